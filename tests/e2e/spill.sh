#!/bin/sh
# spill: the SSD spill tier through the mount.  Pools on tmpfs, spill files on
# a disk file system ($SPILLDIR, default /var/tmp).  A 64 MiB pool keeps
# 16 MiB of row versions (spill_high 30), so a 32 MiB table of 256-byte rows
# lives mostly on the spill file: in sorted runs (the default), or behind
# stubs with -o spill_runs=0 (tests/e2e/spillstubs.sh runs this file so).  The first ~100 ops of each fsx run meet
# mostly spilled rows; the run then drops most of them, so each run starts
# from a fresh top-up.
#  1. fsx (random writes, partial rows, punches, truncates, reads) on that
#     table against a shadow on tmpfs, with the default row cache and with
#     cache_size=0 (every read of a cold row goes to the device);
#  2. a clean remount compares the table (cmp, through the daemon: spilled
#     rows come off the device); a SIGKILL while a writer's rows are being
#     spilled (with the row cache and without): the fsync'ed prefix reads
#     back whole, every row after it is its new contents or a hole, the
#     recount after the crash finishes;
#  3. the pool refuses to mount with its spill file missing or without
#     -o spill= (clear message, non-zero exit), and mounts once it is back;
#  4. a 6 MiB spill file fills: dd gets ENOSPC, every write that succeeded
#     reads back, before and after an fsync and a remount;
#  5. a load in row order (128 MiB, 8x what the pool keeps of rows): no
#     merge rewrites a run (the runs hold disjoint rows: spill.merges stays
#     0), the device writes at most 1.3x the rows, every byte reads back
#     before and after a remount;
#  6. one flipped byte in a spilled record: reading that row is EIO (direct
#     I/O, row by row), its neighbours and the rows whose records share its
#     4 KiB block read fine, spill.checksum_errors counts.
# EMBFS_TEST_OPTS adds daemon arguments to every mount.
. "$(dirname "$0")/../lib.sh"
# pools and shadow files on tmpfs, where a persist barrier costs little
[ -z "$TMPDIR" ] && [ -d /dev/shm ] && [ -w /dev/shm ] && TMPDIR=/dev/shm && export TMPDIR
setup
SPILLDIR=${SPILLDIR:-/var/tmp}
SP=$(mktemp -d "$SPILLDIR/${EMBFS_PFX}spill.XXXXXX") || fail "mktemp -d in $SPILLDIR"
WPID=""
trap 'rc=$?; [ -n "$WPID" ] && kill "$WPID" 2>/dev/null; rm -rf "$SP"; (exit $rc); cleanup' EXIT
case $(stat -f -c %T "$SP") in
tmpfs|ramfs) skip "$SPILLDIR is $(stat -f -c %T "$SP"): the spill tier wants a disk file system (O_DIRECT)" ;;
esac
command -v python3 >/dev/null || skip "no python3"

OPTS=${EMBFS_TEST_OPTS:-}
FSX="$TOOLS/fsx"
[ -x "$FSX" ] || fail "$FSX is not built (run make)"
OPS=${FSX_OPS:-400}
MB=32                      # table size, MiB: 128 Ki rows, ~45 Ki of them fit the pool
RS=256
M="$T/m"
POOL="$T/pool"

# sf FIELD...: "field=value ..." from the stats of $M
# rows on the device: behind stubs (spill.versions) and in sorted runs
on_device() { echo $(($(stat_field "$1" spill.versions) + $(stat_field "$1" spill.run_rows))); }
# versions moved to the device: to stubs and evicted into runs
moved() { echo $(($(stat_field "$1" spill.moved) + $(stat_field "$1" spill.run_evicted))); }

sf() {
	for f in "$@"; do printf '%s=%s ' "${f#spill.}" "$(stat_field "$M" "$f")"; done
}

# refuse WHY POOL MNT [embfs args...]: the daemon (foreground) must exit
# non-zero without mounting; its stderr is left in $T/refused
refuse() {
	why=$1; pool=$2; mnt=$3; shift 3
	mkdir -p "$mnt"
	# if it wrongly mounted, -f would serve until the timeout's SIGTERM
	timeout -k 5 15 "$EMBFS" -f "$@" "$pool" "$mnt" >/dev/null 2>"$T/refused"
	rc=$?
	if is_mounted "$mnt"; then
		fusermount3 -u "$mnt"
		fail "$why: embfs mounted the pool"
	fi
	[ $rc -ne 0 ] || fail "$why: exit status 0"
	grep -q '^embfs: ' "$T/refused" || fail "$why: no message from embfs on stderr"
	[ $rc -ne 124 ] && [ $rc -ne 137 ] || fail "$why: daemon ran until the timeout"
	say "  $why: status $rc: $(sed "s|$T/||g; s|$SP/||g" "$T/refused" | tr '\n' ' ')"
}

# rows_check FILE SRC FROM_BYTE: every row of FILE from FROM_BYTE to its end
# is the same row of SRC or all zeros (never torn); prints "new holes"
rows_check() {
	python3 - "$1" "$2" "$3" "$RS" <<'EOF'
import os, sys
path, src, start, rs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
a, b = open(path, 'rb').read(), open(src, 'rb').read()
zero = bytes(rs)
new = holes = 0
for off in range(start, len(a), rs):
    r, s = a[off:off + rs], b[off:off + rs]
    if r == s[:len(r)]:
        new += 1
    elif r == zero[:len(r)]:
        holes += 1
    else:
        print("row %d (offset %d) is neither its new contents nor a hole" % (off // rs, off), file=sys.stderr)
        sys.exit(1)
print(new, holes)
EOF
}

# ---- 1. fsx on a mostly spilled table ------------------------------------

# topup: fresh random bytes over [0, MB MiB) of the table and its shadow,
# written with O_DIRECT so that no page of the table stays in the page cache
# (fsx's first full compare then reads every row through the daemon)
topup() {
	rand_bytes ${MB}M >"$T/fill"
	dd if="$T/fill" of="$T/a.shadow" bs=1M conv=notrunc status=none || fail "writing the shadow"
	dd if="$T/fill" of="$M/a.emb" bs=1M oflag=direct conv=notrunc,fsync status=none ||
		fail "writing $MB MiB to a.emb ($name)"
	rm -f "$T/fill"
	rows=$(stat_field "$M" rows)
	sv=$(on_device "$M")
	[ "$((2 * ${sv:-0}))" -gt "$rows" ] ||
		fail "$name: after writing $MB MiB only ${sv:-none} of $rows rows are spilled"
	say "$name: $MB MiB written: rows=$rows $(sf pmem.versions spill.versions spill.run_rows spill.runs)"
}

# fsx_rounds NAME SEEDS...: per seed a top-up, then fsx -K on the table (its
# random punches and truncates soon drop most rows: hence the top-ups)
fsx_rounds() {
	name=$1; shift
	for seed in "$@"; do
		topup
		r0=$(stat_field "$M" spill.rows_read)
		"$FSX" -q -K -f 0 -n "$OPS" -s "$seed" -m ${MB}M -l 1M -c 100 "$M/a.emb" "$T/a.shadow" \
			>"$T/fsx.out" 2>&1 || { cat "$T/fsx.out" >&2
			fail "fsx on a spilled table ($name; reproduce: write $MB MiB, then fsx -K -f 0 -n $OPS -s $seed -m ${MB}M -l 1M -c 100)"; }
		r1=$(stat_field "$M" spill.rows_read)
		# without a row cache, the first full compare reads the spilled rows
		[ "$name" = cache ] || [ "$r1" -gt "$r0" ] || fail "$name: fsx -s $seed read no spilled row"
		say "$name: fsx -s $seed, $OPS ops: no divergence; $((r1 - r0)) rows read from the spill file; now $(sf rows spill.versions spill.promoted spill.compacted_segments)"
	done
}

mkpool "$POOL" -s 64M
mount_pool "$POOL" "$M" -o spill="$SP",spill_size=256M $OPTS
SPF=$(stat_field "$M" spill.path)
[ -f "$SPF" ] || fail "spill.path '$SPF' is not a file"
case $SPF in "$SP"/embfs-*.spill) ;; *) fail "spill.path '$SPF': want $SP/embfs-<uuid>.spill" ;; esac
say "64 MiB pool, 256 MiB spill file in $SP: $(sf spill.pmem_high_bytes spill.segment_bytes spill.segments)"
fsx_rounds cache 61 62
topup
unmount_pool "$M"

# ---- 2. clean remount, then a crash while rows spill ----------------------

mount_pool "$POOL" "$M" -o spill="$SP",cache_size=0 $OPTS
r0=$(stat_field "$M" spill.rows_read)
cmp "$M/a.emb" "$T/a.shadow" || fail "a.emb differs from its shadow after a clean remount"
r1=$(stat_field "$M" spill.rows_read)
[ "$r1" -gt "$r0" ] || fail "reading a.emb after a remount read no spilled row"
say "clean remount: a.emb matches its shadow ($((r1 - r0)) rows read from the spill file)"
fsx_rounds nocache 63 64
unmount_pool "$M"

# spilling MOVED FILE: versions were spilled since spill.moved was MOVED and
# FILE is past 20 MiB, or its writer ($WPID) has exited
spilling() {
	[ "$(moved "$M")" -gt "$1" ] && [ "$(stat -c %s "$2")" -ge $((20 << 20)) ] || gone $WPID
}

# crash_round NAME TABLE [embfs args...]: 16 MiB written and fsync'ed, then a
# writer goes on past them while rows spill; SIGKILL; remount: the prefix
# reads back whole, every row after it is new or a hole
crash_round() {
	name=$1; tab=$2; shift 2
	mount_pool "$POOL" "$M" -o spill="$SP" "$@" $OPTS
	rand_bytes 32M >"$T/$tab.src"
	# the size set first: writes below it go through the pool and spill
	# (writes past the end of a new table would go straight into runs)
	truncate -s 32M "$M/$tab" || fail "$name: sizing $tab"
	dd if="$T/$tab.src" of="$M/$tab" bs=1M count=16 conv=fsync,notrunc status=none || fail "$name: writing $tab"
	moved=$(moved "$M")
	dd if="$T/$tab.src" of="$M/$tab" bs=256K skip=64 seek=64 conv=notrunc status=none 2>/dev/null &
	WPID=$!
	wait_until 20 spilling "$moved" "$M/$tab"
	running=no; kill -0 $WPID 2>/dev/null && running=yes
	size=$(stat -c %s "$M/$tab")
	nowmoved=$(moved "$M")
	crash_daemon "$M"
	wait $WPID
	WPID=""
	say "$name: SIGKILL with $tab at $size bytes (writer still running: $running), 16 MiB fsync'ed; $((nowmoved - moved)) versions spilled meanwhile"
	[ "$nowmoved" -gt "$moved" ] || fail "$name: nothing was spilled while $tab was written"
	mount_pool "$POOL" "$M" -o spill="$SP" "$@" $OPTS
	[ "$(stat_field "$M" pool.recovered)" = 1 ] || fail "$name: pool.recovered is not 1 after SIGKILL"
	wait_until 10 stat_is "$M" spill.recounting 0
	cmp -n 16M "$M/$tab" "$T/$tab.src" || fail "$name: the fsync'ed 16 MiB of $tab differ after the crash"
	out=$(rows_check "$M/$tab" "$T/$tab.src" $((16 << 20))) || fail "$name: torn rows in $tab"
	set -- $out
	say "$name: recount done, fsync'ed prefix whole; after it $1 new rows, $2 holes, none torn"
	cmp "$M/a.emb" "$T/a.shadow" || fail "$name: a.emb differs from its shadow after the crash"
	say "$name: a.emb still matches its shadow; $(sf spill.versions spill.footprint_ratio)"
	unmount_pool "$M"
}

crash_round "crash (cache)" c.emb
crash_round "crash (cache_size=0)" c0.emb -o cache_size=0

# ---- 3. the spill device must be there ------------------------------------

say "mounting without the spill file"
mv "$SPF" "$SP/moved.spill" || fail "mv $SPF"
refuse "spill file missing" "$POOL" "$M" -o spill="$SP" $OPTS
grep -q "spill device .* is missing" "$T/refused" || fail "unclear message for a missing spill device: $(cat "$T/refused")"
refuse "explicit path missing" "$POOL" "$M" -o spill="$SPF" $OPTS
grep -q "spill device .* is missing" "$T/refused" || fail "unclear message for a missing spill path: $(cat "$T/refused")"
refuse "no -o spill=" "$POOL" "$M" $OPTS
grep -q "spill=PATH" "$T/refused" || fail "no hint at -o spill= in: $(cat "$T/refused")"
mv "$SP/moved.spill" "$SPF" || fail "mv back"
mount_pool "$POOL" "$M" -o spill="$SPF" $OPTS
cmp -n 16M "$M/c.emb" "$T/c.emb.src" || fail "c.emb differs once the spill file is back"
say "  spill file back: mounts, c.emb reads back"
unmount_pool "$M"

# ---- 4. a full spill file: ENOSPC -----------------------------------------

P4="$T/pool4"; S4="$SP/small"
mkdir -p "$S4"
mkpool "$P4" -s 64M
mount_pool "$P4" "$M" -o spill="$S4",spill_size=6M $OPTS
say "6 MiB spill file: $(sf spill.segment_bytes spill.segments)"
rand_bytes 64M >"$T/d.src"
dd if="$T/d.src" of="$M/d.emb" bs=1M count=8 conv=fsync status=none || fail "writing 8 MiB"
dd if="$T/d.src" of="$M/d.emb" bs=1M skip=8 seek=8 conv=notrunc,fsync 2>"$T/dd.err"
rc=$?
[ $rc -ne 0 ] || fail "dd of 64 MiB through a 6 MiB spill file succeeded"
grep -q "No space left on device" "$T/dd.err" || { cat "$T/dd.err" >&2; fail "dd failed, but not with ENOSPC"; }
got=$(stat -c %s "$M/d.emb")
[ $((got % 4096)) = 0 ] || fail "a refused write left the size at $got, mid-page"
say "dd: No space left on device at $got bytes; $(sf spill.full_events spill.segments_free spill.versions)"
[ "$got" -gt $((8 << 20)) ] || fail "nothing fit after the first 8 MiB"
[ "$(stat_field "$M" spill.full_events)" -gt 0 ] || fail "spill.full_events is 0 after ENOSPC"
cmp -n "$got" "$M/d.emb" "$T/d.src" || fail "what was written before ENOSPC does not read back"
python3 -c 'import os, sys; fd = os.open(sys.argv[1], os.O_RDWR); os.fsync(fd)' "$M/d.emb" ||
	fail "fsync after ENOSPC failed"
unmount_pool "$M"
mount_pool "$P4" "$M" -o spill="$S4" $OPTS
[ "$(stat -c %s "$M/d.emb")" = "$got" ] || fail "d.emb is $(stat -c %s "$M/d.emb") bytes after a remount, want $got"
cmp -n "$got" "$M/d.emb" "$T/d.src" || fail "d.emb differs after a remount"
say "after fsync and remount: all $got bytes read back"
unmount_pool "$M"
rm -rf "$S4" "$T/d.src"

# ---- 5. a load in row order: runs written straight, that no merge rewrites --

P6="$T/pool6"; S6="$SP/load"
mkdir -p "$S6"
mkpool "$P6" -s 64M -t "l.emb:64:f32"
mount_pool "$P6" "$M" -o spill="$S6",spill_size=1G $OPTS
rand_bytes 128M >"$T/l.src"
dd if="$T/l.src" of="$M/l.emb" bs=1M conv=fsync,notrunc status=none || fail "loading 128 MiB"
say "load of 128 MiB: $(sf spill.runs spill.run_rows spill.bulk_runs spill.bulk_rows spill.run_evicted spill.merges spill.merge_moves spill.write_bytes)"
if ! echo "$OPTS" | grep -q "spill_runs=0"; then
	[ "$(stat_field "$M" spill.run_rows)" -gt 262144 ] || fail "the load left less than half its rows in runs"
	# once the pool holds rows to its low watermark (16 MiB of 64), whole
	# rows in order past the table's end go straight into runs (a bulk load)
	b=$(stat_field "$M" spill.bulk_rows)
	[ "$b" -ge $((524288 * 3 / 4)) ] || fail "the load wrote $b of 524288 rows straight into runs (want 3/4 or more)"
	[ "$(stat_field "$M" spill.merges)" = 0 ] || fail "a load in row order merged runs"
	wb=$(stat_field "$M" spill.write_bytes)
	[ "$wb" -le $((128 * 1048576 * 13 / 10)) ] || fail "the device wrote $wb bytes for 128 MiB of rows (more than 1.3x)"
fi
cmp "$M/l.emb" "$T/l.src" || fail "l.emb differs after the load"
unmount_pool "$M"
mount_pool "$P6" "$M" -o spill="$S6",spill_size=1G $OPTS
cmp "$M/l.emb" "$T/l.src" || fail "l.emb differs after a remount"
say "  reads back whole, before and after a remount"
unmount_pool "$M"
rm -rf "$S6" "$T/l.src" "$P6"

# ---- 6. a flipped byte in the spill file: EIO on that row -----------------

P5="$T/pool5"; S5="$SP/csum"
mkdir -p "$S5"
mkpool "$P5" -s 64M
mount_pool "$P5" "$M" -o spill="$S5",spill_size=64M,cache_size=0 $OPTS
rand_bytes 24M >"$T/e.src"
dd if="$T/e.src" of="$M/e.emb" bs=1M conv=fsync status=none || fail "writing e.emb"
say "24 MiB written with cache_size=0: $(sf spill.versions)"
[ "$(on_device "$M")" -gt 1000 ] || fail "too few rows spilled"
F5=$(stat_field "$M" spill.path)
unmount_pool "$M"
# readrow ROW: one row, O_DIRECT (no page cache: exactly that row is read)
readrow() { dd if="$M/e.emb" of="$T/row" bs=$RS skip="$1" count=1 iflag=direct status=none 2>"$T/row.err"; }
# row_eio ROW: reading ROW fails with EIO
row_eio() {
	readrow "$1" && fail "reading row $1 with a flipped byte succeeded"
	grep -q "Input/output error" "$T/row.err" || fail "row $1: want EIO, got: $(cat "$T/row.err")"
}
# row_ok ROW WHERE: ROW reads back as the source has it
row_ok() {
	readrow "$1" || fail "row $1 $2: $(cat "$T/row.err")"
	dd if="$T/e.src" bs=$RS skip="$1" count=1 status=none | cmp -s - "$T/row" || fail "row $1 reads wrong bytes"
}
case "$OPTS" in
*spill_runs=0*) ;; # stubs: below
*)
# sorted runs: flip a data byte of row R in every block that holds it (the
# live run's, and those of runs merged away but not yet written over); R
# and the rows sharing its block read EIO, every other row reads right
R=$(python3 - "$F5" "$T/e.src" "$RS" "$TOP/tests/tools" <<'EOF'
import os, sys
dev, src, rs = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path.insert(0, sys.argv[4])
from runblocks import run_blocks, flip_row
nrows = os.path.getsize(src) // rs
blocks = run_blocks(dev, rs)
inruns = sorted({r for rows in blocks.values() for r in rows if r < nrows})
if not inruns:
    sys.exit("no row in a run block")
R = inruns[len(inruns) // 2]
hold = flip_row(dev, blocks, rs, R)
if not hold:
    sys.exit("row %d is in no run block" % R)
near = {r for off in hold for r in blocks[off]}
print(R, len(hold), *sorted(near - {R}))
EOF
) || fail "finding row blocks in $F5"
set -- $R
R=$1; NB=$2; shift 2
MATES=" $* "
say "flipped a byte of row $R in $NB block(s) of $(basename "$F5"); $# rows share them"
mount_pool "$P5" "$M" -o spill="$S5",cache_size=0 $OPTS
row_eio "$R"
good=0
for r in $(seq $((R - 64)) $((R + 64))); do
	case "$MATES" in *" $r "*) continue ;; esac
	[ "$r" = "$R" ] && continue
	row_ok "$r" "outside the damaged block"
	good=$((good + 1))
done
ce=$(stat_field "$M" spill.checksum_errors)
[ "${ce:-0}" -ge 1 ] || fail "spill.checksum_errors is '${ce:-none}'"
say "row $R: Input/output error; $good rows around it outside its block read right; checksum_errors=$ce"
# the table goes: its runs' segments are free room again (statfs counts them)
f0=$(stat -f -c %f "$M")
rm "$M/e.emb"
runs_gone() { [ "$(stat_field "$M" spill.runs)" = 0 ] && [ "$(stat -f -c %f "$M")" -gt $((f0 + 2048)) ]; }
wait_until 10 runs_gone || fail "rm e.emb: spill.runs $(stat_field "$M" spill.runs), free blocks $f0 -> $(stat -f -c %f "$M")"
say "rm e.emb: no runs left; statfs free blocks $f0 -> $(stat -f -c %f "$M")"
unmount_pool "$M"
exit 0
;;
esac
# a row with exactly one record, whose bytes are that row's, between two
# spilled rows: flip one of its bytes; print the row, the byte and the rows
# whose records share its 4 KiB block (the mover spills in index order)
R=$(python3 - "$F5" "$T/e.src" "$RS" <<'EOF'
import struct, sys
dev, src, rs = sys.argv[1], sys.argv[2], int(sys.argv[3])
d, s = open(dev, 'rb').read(), open(src, 'rb').read()
recs = {}
for off in range(4096, len(d) - 32, 16):
    if d[off:off + 4] != b'EMBR':
        continue
    magic, ln, row, batch, table, csum = struct.unpack_from('<IIQQII', d, off)
    if ln == rs and row < len(s) // rs:
        recs.setdefault(row, []).append(off)
def ok(row):  # one record, holding the row's bytes
    offs = recs.get(row, [])
    return len(offs) == 1 and d[offs[0] + 32:offs[0] + 32 + rs] == s[row * rs:(row + 1) * rs]
for row in sorted(recs)[len(recs) // 2:]:
    if ok(row) and ok(row - 1) and ok(row + 1):
        blk = recs[row][0] // 4096
        mates = [r for r, offs in recs.items() if r != row and any(o // 4096 == blk for o in offs)]
        if not mates:
            continue
        off = recs[row][0] + 32 + 100
        with open(dev, 'r+b') as f:
            f.seek(off)
            f.write(bytes([d[off] ^ 0x5a]))
        print(row, off, *sorted(mates))
        sys.exit(0)
sys.exit("no spilled row with a single record between two spilled rows")
EOF
) || fail "finding a record in $F5"
set -- $R
R=$1; BYTE=$2; shift 2
MATES="$*"
say "flipped byte $BYTE of $(basename "$F5"): a data byte of row $R; rows $((R - 1)), $((R + 1)) spilled too; $# more rows in its block"
mount_pool "$P5" "$M" -o spill="$S5",cache_size=0 $OPTS
row_eio "$R"
for r in $(seq $((R - 8)) $((R + 8))) $MATES; do
	[ "$r" = "$R" ] && continue
	row_ok "$r" "near the damaged row $R"
done
readrow "$R" && fail "row $R read fine the second time"
ce=$(stat_field "$M" spill.checksum_errors)
[ "${ce:-0}" -ge 1 ] || fail "spill.checksum_errors is '${ce:-none}'"
say "row $R: Input/output error (twice); rows $((R - 8))..$((R + 8)) and those sharing its block read fine; checksum_errors=$ce"
unmount_pool "$M"
