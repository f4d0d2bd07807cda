#!/bin/sh
# range: large reads of a table mostly in sorted runs through the mount (the
# range path: READs of 128 KiB and more skip the row cache's inserts, the
# store walks the runs block by block, a sequential reader gets read-ahead
# windows).  A 64 MiB pool keeps 16 MiB of row versions (spill_high 30), so
# a 40 MiB table of 256-byte rows lives mostly in runs.  Against shadow
# copies on tmpfs:
#  1. the table (written front to back with a never-written MiB in it, then
#     overwritten and punched in random pieces, a snapshot, more of both)
#     read with cat after dropping the page cache (1 MiB READs, read-ahead
#     windows), with random O_DIRECT preads of 1 byte to 3 MiB at any offset
#     (partial rows at both ends of a READ), and row by row (O_DIRECT, one
#     READ per row: the per-row path) over random ranges, which must give
#     what one pread of the range gives; the same for the snapshot's file;
#     with the default row cache, which a cat must not fill, and without;
#  2. on a fresh pool with one table written once, a flipped byte in every
#     run block that holds one row: O_DIRECT range reads touching those
#     blocks fail with EIO, reads elsewhere read right, cat fails with EIO,
#     spill.checksum_errors counts.
. "$(dirname "$0")/../lib.sh"
[ -z "$TMPDIR" ] && [ -d /dev/shm ] && [ -w /dev/shm ] && TMPDIR=/dev/shm && export TMPDIR
setup
SPILLDIR=${SPILLDIR:-/var/tmp}
SP=$(mktemp -d "$SPILLDIR/${EMBFS_PFX}range.XXXXXX") || fail "mktemp -d in $SPILLDIR"
trap 'rc=$?; rm -rf "$SP"; (exit $rc); cleanup' EXIT
case $(stat -f -c %T "$SP") in
tmpfs|ramfs) skip "$SPILLDIR is $(stat -f -c %T "$SP"): the spill tier wants a disk file system (O_DIRECT)" ;;
esac
command -v python3 >/dev/null || skip "no python3"
M="$T/m"
P="$T/pool"
RS=256
MB=40
sf() { for k in "$@"; do printf '%s=%s ' "$k" "$(stat_field "$M" "$k")"; done; }

# drop_pages FILE: the kernel's pages of FILE go, so that reading it asks the
# daemon (as root every page; else the file's pages with fadvise)
drop_pages() {
	python3 -c 'import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$1" ||
		fail "fadvise $1"
}

# dread FILE SHADOW SEED N: N O_DIRECT preads of FILE at random offsets (any
# byte) and lengths (1 byte to 3 MiB) equal SHADOW's bytes there; then N/10
# random ranges of whole rows (up to 300) read row by row equal one pread
# of the range
dread() {
	python3 - "$@" "$RS" <<'EOF' || fail "O_DIRECT reads of $1 (seed $3)"
import mmap, os, random, sys
path, shadow, seed, n, rs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
want = open(shadow, 'rb').read()
size = len(want)
rnd = random.Random(seed)
fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
buf = mmap.mmap(-1, 3 << 20)
view = memoryview(buf)
def read(off, ln):
    got = os.preadv(fd, [view[:ln]], off)
    return bytes(view[:got])
for i in range(n):
    ln = rnd.choice([1, rnd.randrange(1, 4096), rnd.randrange(1, 3 << 20), 1 << 20, (1 << 20) + rs // 2])
    off = rnd.randrange(size)
    if rnd.randrange(4) == 0:
        off -= off % rs
    got = read(off, ln)
    if got != want[off:off + ln]:
        bad = next((k for k in range(min(len(got), ln)) if got[k] != want[off + k]), min(len(got), ln))
        sys.exit("pread(%d, %d) of %s: %d bytes, first difference at byte %d (row %d)" %
                 (off, ln, path, len(got), off + bad, (off + bad) // rs))
for i in range(max(1, n // 10)):
    rows = rnd.randrange(1, 301)
    r0 = rnd.randrange(size // rs - rows)
    whole = read(r0 * rs, rows * rs)
    each = b''.join(read((r0 + k) * rs, rs) for k in range(rows))
    if whole != each or whole != want[r0 * rs:(r0 + rows) * rs]:
        sys.exit("rows %d..%d of %s: the range read, the per-row reads and the shadow differ" % (r0, r0 + rows, path))
EOF
}

# change FILE SHADOW N: N random pieces (1 byte to 300 KiB) of FILE and
# SHADOW overwritten alike, and N/4 punched (fallocate, whole rows and not)
change() {
	i=0
	while [ $i -lt "$3" ]; do
		len=$(($(rand 300000) + 1)); off=$(rand $((MB << 20)))
		rand_bytes "$len" >"$T/piece"
		dd if="$T/piece" of="$2" bs=64K seek="$off" oflag=seek_bytes conv=notrunc status=none || fail "shadow write"
		dd if="$T/piece" of="$1" bs=64K seek="$off" oflag=seek_bytes conv=notrunc status=none || fail "write at $off"
		if [ $((i % 4)) = 0 ]; then
			poff=$(rand $((MB << 20))); plen=$(($(rand 200000) + 1))
			[ $((i % 8)) = 0 ] && { poff=$((poff - poff % RS)); plen=$((plen - plen % RS + RS)); }
			fallocate -p -o "$poff" -l "$plen" "$2" || fail "shadow punch"
			fallocate -p -o "$poff" -l "$plen" "$1" || fail "punch $poff+$plen"
		fi
		i=$((i + 1))
	done
}

# ---- 1. range reads against the shadows, with the row cache and without ---
mkpool "$P" -s 64M
mount_pool "$P" "$M" -o spill="$SP",spill_size=256M
rand_bytes ${MB}M >"$T/src"
# the table with MiB 16 never written: holes
dd if="$T/src" of="$M/t.emb" bs=1M count=16 oflag=direct conv=fsync status=none || fail "writing t.emb"
dd if="$T/src" of="$M/t.emb" bs=1M skip=17 seek=17 oflag=direct conv=notrunc,fsync status=none || fail "writing t.emb"
cp "$T/src" "$T/shadow" && dd if=/dev/zero of="$T/shadow" bs=1M seek=16 count=1 conv=notrunc status=none ||
	fail "the shadow"
rm -f "$T/src"
change "$M/t.emb" "$T/shadow" 60
sync "$M/t.emb"
mkdir "$M/.snapshots/s1" || fail "mkdir .snapshots/s1"
cp "$T/shadow" "$T/shadow.s1"
change "$M/t.emb" "$T/shadow" 40
sync "$M/t.emb"
say "t.emb: $MB MiB, 100 random overwrites and 25 punches, a snapshot between them: $(sf rows spill.run_rows spill.runs pmem.versions)"
[ "$(stat_field "$M" spill.run_rows)" -gt $(((MB << 20) / RS / 2)) ] || fail "too few rows in runs"

check() {
	drop_pages "$M/t.emb"
	c0=$(stat_field "$M" cache.rows); w0=$(stat_field "$M" spill.run_ra_blocks)
	cat "$M/t.emb" | cmp - "$T/shadow" || fail "$1: cat of t.emb differs from its shadow"
	c1=$(stat_field "$M" cache.rows); w1=$(stat_field "$M" spill.run_ra_blocks)
	[ "$w1" -gt "$w0" ] || fail "$1: cat read no block from a read-ahead window"
	[ "$((c1 - c0))" -lt 1024 ] || fail "$1: cat put $((c1 - c0)) rows into the row cache"
	dread "$M/t.emb" "$T/shadow" "$(rand 1000000000)" 200
	drop_pages "$M/.snapshots/s1/t.emb"
	cmp "$M/.snapshots/s1/t.emb" "$T/shadow.s1" || fail "$1: the snapshot's t.emb differs from its shadow"
	dread "$M/.snapshots/s1/t.emb" "$T/shadow.s1" "$(rand 1000000000)" 100
	say "$1: cat, O_DIRECT preads and row-by-row reads match, live and snapshot; cat added $((c1 - c0)) rows to the cache, read $((w1 - w0)) blocks from windows"
}
check "row cache"
unmount_pool "$M"
mount_pool "$P" "$M" -o spill="$SP",cache_size=0
check "cache_size=0"
unmount_pool "$M"

# ---- 2. a damaged run block ------------------------------------------------
# a fresh pool with one table written once: every row has one version, in
# a run (blocks do not name their table)
P2="$T/pool2"; S2="$SP/two"
mkdir -p "$S2"
mkpool "$P2" -s 64M
mount_pool "$P2" "$M" -o spill="$S2",spill_size=128M,cache_size=0
rand_bytes ${MB}M >"$T/shadow"
dd if="$T/shadow" of="$M/t.emb" bs=1M conv=fsync status=none || fail "writing t.emb"
F=$(stat_field "$M" spill.path)
say "a fresh pool, t.emb written once: $(sf spill.run_rows spill.runs)"
unmount_pool "$M"
# flip a data byte of row R in every block that holds it; print R, the
# blocks, and the first and last row of each such block
R=$(python3 - "$F" "$RS" "$(rand 1000000)" "$TOP/tests/tools" <<'EOF'
import random, sys
dev, rs, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
sys.path.insert(0, sys.argv[4])
from runblocks import run_blocks, flip_row
blocks = run_blocks(dev, rs)
rows = sorted({r for v in blocks.values() for r in v if 1000 < r < 150000})
if not rows:
    sys.exit("no row in a run block")
R = random.Random(seed).choice(rows[len(rows) // 4:3 * len(rows) // 4])
hold = flip_row(dev, blocks, rs, R)
span = [f(blocks[off]) for off in hold for f in (min, max)]
print(R, len(hold), min(span), max(span))
EOF
) || fail "damaging a block of $F"
set -- $R
R=$1; NB=$2; LO=$3; HI=$4
say "flipped a byte of row $R in $NB block(s) of the spill file; they hold rows $LO..$HI"
mount_pool "$P2" "$M" -o spill="$S2",cache_size=0
python3 - "$M/t.emb" "$T/shadow" "$RS" "$R" "$LO" "$HI" <<'EOF' || fail "range reads around the damaged block"
import errno, mmap, os, sys
path, shadow, rs, R, lo, hi = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
want = open(shadow, 'rb').read()
fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
buf = mmap.mmap(-1, 1 << 20)
view = memoryview(buf)
eio = good = 0
for r0 in range(max(0, R - 20000), min(len(want) // rs, R + 20000), 1000):
    n = 2048  # a READ of 512 KiB: the range path
    try:
        got = os.preadv(fd, [view[:n * rs]], r0 * rs)
    except OSError as e:
        if e.errno != errno.EIO:
            raise
        if r0 > hi or r0 + n <= lo:
            sys.exit("rows %d..%d: EIO, but the damaged blocks hold rows %d..%d" % (r0, r0 + n, lo, hi))
        eio += 1
        continue
    if r0 <= R < r0 + n:
        sys.exit("rows %d..%d hold row %d, whose only records are damaged, and read fine" % (r0, r0 + n, R))
    if bytes(view[:got]) != want[r0 * rs:r0 * rs + got] or got != n * rs:
        sys.exit("rows %d..%d read wrong bytes" % (r0, r0 + n))
    good += 1
if not eio or not good:
    sys.exit("%d reads EIO, %d right" % (eio, good))
print("  %d range reads touching the damaged blocks: EIO; %d others: right" % (eio, good))
EOF
ce=$(stat_field "$M" spill.checksum_errors)
[ "${ce:-0}" -ge 1 ] || fail "spill.checksum_errors is '${ce:-none}'"
cat "$M/t.emb" >/dev/null 2>"$T/cat.err" && fail "cat of t.emb read past the damaged block"
grep -q "Input/output error" "$T/cat.err" || fail "cat: want EIO, got: $(cat "$T/cat.err")"
say "cat: Input/output error; spill.checksum_errors=$ce"
unmount_pool "$M"
exit 0
