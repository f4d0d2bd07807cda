#!/bin/sh
# fsck: fsck.embfs on unmounted pools.
#  1. a clean pool exits 0 (with and without -n), --help / -V / bad arguments
#     (16, one line naming the problem), a missing path or a file that is no
#     pool (8);
#  2. each injected damage (tests/tools/pooldamage: a zeroed catalog entry, a
#     stale journal after a clean unmount, a zeroed journal magic, a leaked
#     slot, a row's slot marked free, a wrong row count)
#     is found by -n (exit 4) without a byte of the pool changing (sha256),
#     then fixed (exit 1), and a second run exits 0; the pool then mounts and
#     the rows that should survive read back (cmp), a zeroed table is gone;
#     a damaged catalog entry with data exits 4 and is left byte for byte;
#  3. a pool in use (mounted) is refused with exit 8, with and without -n;
#  4. spill device (skipped on tmpfs): without -o spill= it exits 8 with a
#     hint; a flipped byte in a sorted-run block of the spill file is found
#     (-n and repair: exit 4, "read EIO"), -n changes neither file, and the
#     pool still mounts: the damaged row reads EIO, a row elsewhere reads right.
. "$(dirname "$0")/../lib.sh"
[ -z "$TMPDIR" ] && [ -d /dev/shm ] && [ -w /dev/shm ] && TMPDIR=/dev/shm && export TMPDIR
setup
FSCK="$BUILD/fsck.embfs"
DMG="$TOOLS/pooldamage"
[ -x "$FSCK" ] || fail "$FSCK is not built (run make)"
[ -x "$DMG" ] || fail "$DMG is not built (run make)"
M="$T/m"
POOL="$T/pool"
RS=64

# fsck_is WANT DESC [fsck args...]: fsck.embfs exits WANT; its output in $T/out
fsck_is() {
	want=$1; desc=$2; shift 2
	"$FSCK" "$@" >"$T/out" 2>"$T/err"
	rc=$?
	[ $rc -eq "$want" ] || { cat "$T/out" "$T/err" >&2; fail "$desc: fsck.embfs $* exited $rc, want $want"; }
	say "$(printf '%-28s' "$desc") status $rc: $(sed "s|$T/||g" "$T/out" "$T/err" | tr '\n' ' ')"
}

# ---- 1. clean pool, help, versions, bad arguments ---------------------------
mkpool "$POOL" -s 64M -t a.emb:16 -t b.emb:16
mount_pool "$POOL" "$M"
rand_bytes 256K >"$T/a.src"
rand_bytes 128K >"$T/b.src"
cp "$T/a.src" "$M/a.emb" || fail "writing a.emb"
cp "$T/b.src" "$M/b.emb" || fail "writing b.emb"
unmount_pool "$M"
cp "$POOL" "$T/pool.good"

fsck_is 0 "clean" "$POOL"
grep -q "clean, 2 tables, 6144 rows" "$T/out" || fail "clean pool: $(cat "$T/out")"
fsck_is 0 "clean, -n" -n "$POOL"
fsck_is 0 "clean, -f -y -v" -f -y -v "$POOL"

"$FSCK" --help >"$T/out" 2>&1 || fail "fsck.embfs --help exited $?"
grep -q "^usage: fsck.embfs" "$T/out" || fail "fsck.embfs --help: $(head -1 "$T/out")"
grep -q "exit status" "$T/out" || fail "fsck.embfs --help names no exit status"
ver=$(sed -n 's/^#define EMBFS_VERSION "\(.*\)"/\1/p' "$TOP/include/embfs/version.h")
for p in "$FSCK" "$MKFS"; do
	for o in -V --version; do
		v=$("$p" $o) || fail "$p $o exited $?"
		case "$v" in *" $ver;"*"pool layout "*libpmemobj*) ;; *) fail "$p $o: '$v'" ;; esac
	done
done
"$MKFS" --help | grep -q "^usage: mkfs.embfs" || fail "mkfs.embfs --help"
say "--help, -V: $v"
# fsck(8) finds fsck.embfs in PATH (after /sbin, /sbin/fs.d, /sbin/fs, /etc/fs, /etc)
if command -v fsck >/dev/null; then
	PATH="$BUILD:$PATH" fsck -t embfs "$POOL" >"$T/out" 2>&1 || fail "fsck -t embfs exited $?: $(cat "$T/out")"
	grep -q "pool: clean" "$T/out" || fail "fsck -t embfs did not run fsck.embfs: $(cat "$T/out")"
	say "fsck -t embfs: $(sed "s|$T/||g" "$T/out" | tr '\n' ' ')"
fi

# bad DESC WANT ARGS...: one line on stderr, exit WANT, nothing on stdout
bad() {
	desc=$1; want=$2; shift 2
	"$FSCK" "$@" >"$T/out" 2>"$T/err"
	rc=$?
	[ $rc -eq "$want" ] || fail "$desc: fsck.embfs $* exited $rc, want $want"
	[ "$(wc -l <"$T/err")" -eq 1 ] || fail "$desc: stderr: $(cat "$T/err")"
	grep -q '^fsck.embfs: ....' "$T/err" || fail "$desc: unclear message '$(cat "$T/err")'"
	[ -s "$T/out" ] && fail "$desc: wrote to stdout: $(cat "$T/out")"
	say "$(printf '%-28s' "$desc") status $rc: $(sed "s|$T/||g" "$T/err")"
}
bad "no pool" 16
bad "two pools" 16 "$POOL" "$POOL"
bad "-n with -y" 16 -n -y "$POOL"
bad "unknown option" 16 -q "$POOL"
bad "bad -o" 16 -o foo=1 "$POOL"
bad "-o without argument" 16 "$POOL" -o
bad "missing pool" 8 "$T/nothing"
rand_bytes 16M >"$T/junk"
bad "not a pool" 8 "$T/junk"
cmp -s "$POOL" "$T/pool.good" || cp "$T/pool.good" "$POOL"

# ---- 2. injected damage: found by -n, fixed, then clean ---------------------
# damage NAME EXPECT DMG-ARGS...: inject on a fresh copy of the good pool;
# -n exits 4 and changes nothing; a repair exits 1 and names EXPECT; a second
# run exits 0
damage() {
	name=$1; expect=$2; shift 2
	cp "$T/pool.good" "$POOL"
	"$DMG" "$@" "$POOL" $DMG_TABLE >/dev/null || fail "$name: pooldamage $*"
	sum=$(sha256sum <"$POOL")
	fsck_is 4 "$name: -n" -n "$POOL"
	grep -q "$expect" "$T/out" || fail "$name: -n does not say '$expect'"
	[ "$(sha256sum <"$POOL")" = "$sum" ] || fail "$name: fsck.embfs -n changed the pool"
	fsck_is 1 "$name: repair" "$POOL"
	cp "$T/out" "$T/fixed"
	grep -q "fixed: .*$expect" "$T/fixed" || fail "$name: the repair does not say '$expect'"
	fsck_is 0 "$name: again" "$POOL"
}

# reads_back: a.emb (and b.emb unless $1 = no-b) read back as written
reads_back() {
	mount_pool "$POOL" "$M"
	cmp "$M/a.emb" "$T/a.src" || fail "a.emb does not read back after the repair"
	if [ "$1" = no-b ]; then
		[ -e "$M/b.emb" ] && fail "b.emb, whose catalog entry was zeroed, is still there"
	else
		cmp "$M/b.emb" "$T/b.src" || fail "b.emb does not read back after the repair"
	fi
	# the pool takes new rows where the freed slots were
	cp "$T/b.src" "$M/c.emb" && cmp "$M/c.emb" "$T/b.src" || fail "writing c.emb after the repair"
	unmount_pool "$M"
	fsck_is 0 "  after a mount" "$POOL"
}

DMG_TABLE=b.emb damage "zeroed catalog entry" "catalog entry 1: zeroed" zero-entry
grep -q "fixed: 2048 version slots .* freed" "$T/fixed" || fail "the zeroed table's 2048 rows were not freed"
reads_back no-b
DMG_TABLE= damage "stale journal" "journal: stale records" stale-journal
reads_back
DMG_TABLE= damage "journal magic" "journal: bad magic" journal-magic
reads_back
DMG_TABLE= damage "leaked slot" "1 version slots allocated and referenced by no row" leak
reads_back
DMG_TABLE= damage "lost slab bit" "1 versions that rows reference sat in slots marked free" lose-bit
reads_back
DMG_TABLE=a.emb damage "wrong row count" "row count 4101, the index holds 4096" count
reads_back

# damage no repair reaches (a catalog entry with data and a wrong checksum):
# exit 4 with and without -n, the pool left as it was, still refused
cp "$T/pool.good" "$POOL"
"$DMG" rename "$POOL" a.emb || fail "pooldamage rename"
sum=$(sha256sum <"$POOL")
fsck_is 4 "renamed entry: -n" -n "$POOL"
fsck_is 4 "renamed entry: repair" "$POOL"
grep -q "catalog entry 0 is damaged" "$T/out" || fail "renamed entry: the reason is not given"
[ "$(sha256sum <"$POOL")" = "$sum" ] || fail "renamed entry: fsck.embfs changed a pool it cannot repair"

# ---- 3. a pool in use -------------------------------------------------------
cp "$T/pool.good" "$POOL"
mount_pool "$POOL" "$M"
for n in "" -n; do
	"$FSCK" $n "$POOL" >"$T/out" 2>"$T/err"
	rc=$?
	[ $rc -eq 8 ] || fail "fsck.embfs $n on a mounted pool exited $rc, want 8"
	grep -q "in use" "$T/err" || fail "fsck.embfs $n on a mounted pool: $(cat "$T/err")"
	say "in use ${n:-(repair)}: status $rc: $(sed "s|$T/||g" "$T/err")"
done
cmp "$M/a.emb" "$T/a.src" || fail "a.emb changed under the mount"
unmount_pool "$M"
fsck_is 0 "after the mount" "$POOL"

# ---- 4. spill device: a flipped byte in a sorted run -----------------------
SPILLDIR=${SPILLDIR:-/var/tmp}
case $(stat -f -c %T "$SPILLDIR") in
tmpfs|ramfs) say "spill part skipped: $SPILLDIR is tmpfs (the spill tier wants O_DIRECT)"; exit 0 ;;
esac
command -v python3 >/dev/null || { say "spill part skipped: no python3"; exit 0; }
SP=$(mktemp -d "$SPILLDIR/${EMBFS_PFX}fsck.XXXXXX") || fail "mktemp -d in $SPILLDIR"
trap 'rc=$?; rm -rf "$SP"; (exit $rc); cleanup' EXIT
P5="$T/pool5"
RS=256
mkpool "$P5" -s 64M
mount_pool "$P5" "$M" -o spill="$SP",spill_size=64M,cache_size=0
rand_bytes 24M >"$T/e.src"
dd if="$T/e.src" of="$M/e.emb" bs=1M conv=fsync status=none || fail "writing e.emb"
runs=$(stat_field "$M" spill.runs)
F5=$(stat_field "$M" spill.path)
unmount_pool "$M"
[ "${runs:-0}" -gt 0 ] || fail "no sorted run on the spill device (spill.runs '$runs')"
bad "spilled, no -o spill=" 8 "$P5"
grep -q "spill=PATH" "$T/err" || fail "no hint at -o spill=: $(cat "$T/err")"
fsck_is 0 "spilled, clean" -o spill="$SP" "$P5"
# flip a data byte of row R in every run block holding it (as spill.sh)
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
near = {r for off in flip_row(dev, blocks, rs, R) for r in blocks[off]}
far = [r for r in inruns if r not in near and abs(r - R) > 256]
print(R, far[0] if far else -1)
EOF
) || fail "finding a run block in $F5"
set -- $R
R=$1; FAR=$2
sums=$(sha256sum "$P5" "$F5" | cut -d' ' -f1)
fsck_is 4 "flipped spill byte: -n" -n -o spill="$SP" "$P5"
grep -q "read EIO" "$T/out" || fail "flipped spill byte: -n does not report EIO rows"
[ "$(sha256sum "$P5" "$F5" | cut -d' ' -f1)" = "$sums" ] || fail "fsck.embfs -n changed the pool or the spill file"
fsck_is 4 "flipped spill byte: repair" -o spill="$SP" "$P5"
grep -q "read EIO" "$T/out" || fail "flipped spill byte: no EIO rows reported"
fsck_is 4 "flipped spill byte: again" -o spill="$SP" "$P5"
mount_pool "$P5" "$M" -o spill="$SP",cache_size=0
dd if="$M/e.emb" of="$T/row" bs=$RS skip="$R" count=1 iflag=direct status=none 2>/dev/null &&
	fail "row $R of the flipped block reads"
if [ "$FAR" -ge 0 ]; then
	dd if="$M/e.emb" of="$T/row" bs=$RS skip="$FAR" count=1 iflag=direct status=none || fail "row $FAR: read failed"
	dd if="$T/e.src" bs=$RS skip="$FAR" count=1 status=none | cmp -s - "$T/row" || fail "row $FAR reads wrong bytes"
fi
unmount_pool "$M"
say "row $R reads EIO, row $FAR of another block reads right"
exit 0
