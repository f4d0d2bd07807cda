#!/bin/sh
# Copying tables with the tools people use for checkpoints keeps their
# geometry: cp -a, rsync -aX and tar -S --xattrs of a sparse and a dense table,
# live and from a snapshot, into the mount and out to a plain directory and
# back.  Each copy ends with the source's dim, dtype, mode, bytes and stored
# rows (SEEK_DATA extents).  cp and rsync write the bytes first, into a
# table of the mount's default geometry, and set the xattrs last: the daemon
# cuts the bytes again (relay.c).  Then: rows of the same size change dtype
# in place, a table a snapshot holds keeps its old rows there, a SIGKILL
# during a re-lay leaves the table whole (old or new geometry, same bytes),
# and fsck.embfs finds the pool clean.
. "$(dirname "$0")/../lib.sh"
[ -z "$TMPDIR" ] && [ -d /dev/shm ] && [ -w /dev/shm ] && TMPDIR=/dev/shm && export TMPDIR
setup
for c in getfattr setfattr rsync tar python3; do
	command -v $c >/dev/null || skip "$c missing (make deps installs it)"
done
OPTS=${EMBFS_TEST_OPTS:-}
M="$T/m"
P="$T/plain" # a plain directory: the copy out and back
export LC_ALL=C
mkpool "$T/pool" -s 256M
mount_pool "$T/pool" "$M" $OPTS
mkdir "$P"

expect() { [ "$2" = "$3" ] || fail "$1: expected '$3', got '$2'"; }
geom() { printf '%s %s' "$(getfattr --absolute-names --only-values -n user.embfs.dim "$1")" "$(getfattr --absolute-names --only-values -n user.embfs.dtype "$1")"; }
# the SEEK_DATA extents of a file, one "start end" a line
extents() { python3 "$TOP/tests/tools/extents.py" "$1"; }
# same CASE SRC DST [bytes-only]: DST is a copy of SRC: geometry, mode, bytes,
# and (unless bytes-only) stored rows
same() {
	expect "$1: geometry" "$(geom "$3")" "$(geom "$2")"
	expect "$1: mode" "$(stat -c %a "$3")" "$(stat -c %a "$2")"
	expect "$1: size" "$(stat -c %s "$3")" "$(stat -c %s "$2")"
	cmp -s "$2" "$3" || fail "$1: the bytes differ"
	[ "$4" = bytes-only ] && return 0
	case "$3" in "$M"/*) expect "$1: stored rows" "$(extents "$3")" "$(extents "$2")" ;; esac
}
# fill FILE ROWSIZE SEED ROW...: random non-zero bytes (from SEED) into those rows
fill() {
	python3 - "$@" <<'EOF'
import os, sys
f, rs, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows = [int(r) for r in sys.argv[4:]]
fd = os.open(f, os.O_WRONLY)
import random
g = random.Random(seed)
for r in rows:
    os.pwrite(fd, bytes(g.randrange(1, 256) for _ in range(rs)), r * rs)
os.close(fd)
EOF
}

say "a sparse table (dim 4 f16, 3 rows) and a dense one (dim 3 f32, 2000 rows)"
: >"$M/sparse"
setfattr -n user.embfs.dim -v 4 "$M/sparse" && setfattr -n user.embfs.dtype -v f16 "$M/sparse" || fail "geometry of sparse"
chmod 640 "$M/sparse"
fill "$M/sparse" 8 "$(rand 1000000)" 5 900 77777
: >"$M/dense"
setfattr -n user.embfs.dim -v 3 "$M/dense" || fail "geometry of dense"
chmod 600 "$M/dense"
fill "$M/dense" 12 "$(rand 1000000)" $(seq 0 1999)
expect "sparse rows" "$(extents "$M/sparse" | wc -l)" 3
mkdir "$M/.snapshots/s" || fail "snapshot"
# changed after the snapshot: the snapshot's copy is not the live one's
fill "$M/sparse" 8 "$(rand 1000000)" 5 6

n=0
for t in sparse dense; do
	for src in "$M/$t" "$M/.snapshots/s/$t"; do
		n=$((n + 1))
		case $src in */.snapshots/*) w="snapshot's $t" ;; *) w="live $t" ;; esac
		say "cp -a, rsync -aX, tar -S --xattrs of the $w"
		cp -a "$src" "$M/cp$n" || fail "cp -a $w"
		same "cp -a of the $w" "$src" "$M/cp$n"
		rsync -aX "$src" "$M/rs$n" || fail "rsync -aX $w (status $?)"
		same "rsync -aX of the $w" "$src" "$M/rs$n"
		tar -S --xattrs --xattrs-include='user.*' -C "$(dirname "$src")" -cf "$T/a.tar" "$t" || fail "tar -c $w"
		tar --xattrs --xattrs-include='user.*' -C "$M" --transform "s/^$t\$/tar$n/" -xf "$T/a.tar" ||
			fail "tar -x $w"
		same "tar --xattrs of the $w" "$src" "$M/tar$n"
		# without -S tar keeps holes as zeros: geometry, mode and bytes
		# still follow (the zero rows are stored)
		tar --xattrs --xattrs-include='user.*' -C "$(dirname "$src")" -cf "$T/b.tar" "$t" || fail "tar -c $w"
		tar --xattrs --xattrs-include='user.*' -C "$M" --transform "s/^$t\$/tarz$n/" -xf "$T/b.tar" ||
			fail "tar -x $w (no -S)"
		same "tar --xattrs (no -S) of the $w" "$src" "$M/tarz$n" bytes-only
		say "out to a plain directory and back"
		if cp -a "$src" "$P/out$n" 2>"$T/err" && [ -n "$(getfattr --absolute-names --only-values -n user.embfs.dim "$P/out$n" 2>/dev/null)" ]; then
			same "cp -a out of the $w" "$src" "$P/out$n"
			cp -a "$P/out$n" "$M/back$n" || fail "cp -a back, $w"
			same "cp -a out and back of the $w" "$src" "$M/back$n"
			rsync -aX "$P/out$n" "$M/rsback$n" || fail "rsync -aX back, $w"
			same "rsync -aX out and back of the $w" "$src" "$M/rsback$n"
		else
			say "(no user xattrs on $P: the copy out is not checked)"
		fi
	done
done
expect "re-lays counted" "$([ "$(stat_field "$M" fs.relays)" -gt 0 ] && echo yes)" yes

say "rows of the same size: dtype changes in place (presence kept); bf16 <-> f16"
: >"$M/same"
setfattr -n user.embfs.dim -v 8 "$M/same" && setfattr -n user.embfs.dtype -v f16 "$M/same"
fill "$M/same" 16 "$(rand 1000000)" 3 4 1000
before=$(stat_field "$M" fs.relays)
cp "$M/same" "$T/same.bytes"
setfattr -n user.embfs.dtype -v bf16 "$M/same" || fail "f16 -> bf16 with rows"
expect "same: geometry" "$(geom "$M/same")" "8 bf16"
expect "same: no re-lay" "$(stat_field "$M" fs.relays)" "$before"
cmp -s "$M/same" "$T/same.bytes" || fail "same: bytes changed"
expect "same: rows" "$(extents "$M/same")" "$(printf '48 80\n16000 16016')"

say "a table a snapshot holds: re-laid live, the snapshot keeps the old rows"
cp "$M/.snapshots/s/dense" "$T/dense.s"
setfattr -n user.embfs.dim -v 6 "$M/dense" || fail "dim 6 on a table a snapshot holds"
expect "dense: geometry" "$(geom "$M/dense")" "6 f32"
expect "snapshot's dense: geometry" "$(geom "$M/.snapshots/s/dense")" "3 f32"
cmp -s "$M/.snapshots/s/dense" "$T/dense.s" || fail "the snapshot's dense changed"
cmp -s "$M/dense" "$T/dense.s" || fail "the live dense's bytes changed"
expect "dense: rows of 24 bytes" "$(extents "$M/dense")" "0 24000"

say "a table open for writing while it is re-laid: the open fd writes to the new rows"
: >"$M/open"
python3 - "$M/open" <<'EOF' || fail "writes through an fd across a re-lay"
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
os.pwrite(fd, b"A" * 1000, 0)
os.setxattr(fd, "user.embfs.dim", b"5")
ino = os.fstat(fd).st_ino
assert os.stat(sys.argv[1]).st_ino == ino, "one inode for the name and the fd"
os.pwrite(fd, b"B" * 20, 2000)
assert os.getxattr(sys.argv[1], "user.embfs.row_size") == b"20"
assert os.pread(os.open(sys.argv[1], os.O_RDONLY), 2020, 0) == b"A" * 1000 + b"\0" * 1000 + b"B" * 20
os.close(fd)
EOF

say "the old rows are freed at once, also while an fd holds the old inode"
# rows the live tables store, by their SEEK_DATA extents
live_rows() { python3 "$TOP/tests/tools/extents.py" --rows "$M"; }
# the snapshot's rows that the live tables no longer share count too: take
# it out of the count by dropping it
rmdir "$M/.snapshots/s" || fail "rmdir the snapshot"
exec 7<"$M/cp1"
setfattr -n user.embfs.dim -v 2 "$M/cp1" || fail "re-lay of cp1 with an fd open"
sync "$M"
expect "rows in the pool = rows of the live tables" "$(stat_field "$M" rows)" "$(live_rows)"
exec 7<&-
setfattr -n user.embfs.dim -v 4 "$M/cp1" || fail "cp1 back to dim 4"

say "remount: geometry and bytes kept; fsck.embfs finds the pool clean"
for f in cp1 rs2 tar3 cp4 dense same open; do cp "$M/$f" "$T/$f.bytes"; geom "$M/$f" >"$T/$f.geom"; done
unmount_pool "$M"
"$BUILD/fsck.embfs" -n "$T/pool" >"$T/fsck.txt" 2>&1 || { cat "$T/fsck.txt"; fail "fsck.embfs after the copies"; }
mount_pool "$T/pool" "$M" $OPTS
for f in cp1 rs2 tar3 cp4 dense same open; do
	cmp -s "$M/$f" "$T/$f.bytes" || fail "$f after remount: bytes"
	expect "$f after remount: geometry" "$(geom "$M/$f")" "$(cat "$T/$f.geom")"
done

say "SIGKILL during a re-lay of 16 MiB: the table stays whole"
dd if=/dev/urandom of="$T/big.bytes" bs=1M count=16 status=none || fail "random bytes"
cp "$T/big.bytes" "$M/twin" && cp "$T/big.bytes" "$M/big" && sync "$M/big" || fail "fill big"
# how long a re-lay of it takes here, on its twin
ms() { python3 -c 'import time; print(int(time.monotonic() * 1000))'; }
t0=$(ms)
setfattr -n user.embfs.dim -v 32 "$M/twin" || fail "re-lay of twin"
took=$(($(ms) - t0))
setfattr -n user.embfs.dim -v 32 "$M/big" &
SP=$!
# a kill point from the seed, anywhere in a re-lay's time (and a bit after)
d=$(rand $((took * 5 / 4 + 1)))
python3 -c "import time; time.sleep($d / 1000)"
crash_daemon "$M"
wait $SP
mount_pool "$T/pool" "$M" $OPTS
cmp -s "$M/big" "$T/big.bytes" || fail "big after a crash in its re-lay (kill after $d ms): bytes"
case "$(geom "$M/big")" in "64 f32" | "32 f32") ;; *) fail "big after the crash: geometry $(geom "$M/big")" ;; esac
say "killed after $d ms (a re-lay took $took ms): geometry $(geom "$M/big")"
unmount_pool "$M"
"$BUILD/fsck.embfs" -n "$T/pool" >"$T/fsck.txt" 2>&1 || { cat "$T/fsck.txt"; fail "fsck.embfs after the crash"; }
echo "cptools: ok"
