#!/bin/sh
# make demo: format a file-backed pool, mount it, create a table, write and
# read rows with ordinary tools, show geometry and stats, unmount.
set -e
TOP=$(cd "$(dirname "$0")/.." && pwd)
B=${BUILD:-$TOP/build}
D=$(mktemp -d /tmp/embfs-demo.XXXXXX)
POOL=$D/pool.embfs MNT=$D/mnt PID=
cleanup() {
	if awk -v m="$MNT" '$2 == m { f = 1 } END { exit !f }' /proc/mounts; then
		fusermount3 -u "$MNT" || fusermount3 -uz "$MNT"
	fi
	[ -n "$PID" ] && wait "$PID" 2>/dev/null
	rm -rf "$D"
}
trap cleanup EXIT
step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }

step mkfs.embfs -s 256M -L demo -t item.emb:32:f16 $POOL
"$B/mkfs.embfs" -s 256M -L demo -t item.emb:32:f16 "$POOL"
mkdir -p "$MNT"
step embfs -f $POOL $MNT "&"
"$B/embfs" -f "$POOL" "$MNT" &
PID=$!
until awk -v m="$MNT" '$2 == m { f = 1 } END { exit !f }' /proc/mounts; do
	kill -0 "$PID" || exit 1
	sleep 0.05
done

step "touch $MNT/user.emb; getfattr -d -m user.embfs $MNT/user.emb   # default geometry: 64 x f32"
touch "$MNT/user.emb"
getfattr -d -m user.embfs "$MNT/user.emb" 2>/dev/null | sed 1d
step "setfattr -n user.embfs.dim -v 16 $MNT/user.emb                   # 64-byte rows (allowed while empty)"
setfattr -n user.embfs.dim -v 16 "$MNT/user.emb"
getfattr -n user.embfs.row_size "$MNT/user.emb" 2>/dev/null | sed 1d

step "write row 5 and row 1000000000 (a hashed feature id) with dd"
head -c 64 /dev/urandom > "$D/row5"
dd if="$D/row5" of="$MNT/user.emb" bs=64 seek=5 conv=notrunc status=none
printf 'feature 1000000000 embedding..' | dd of="$MNT/user.emb" bs=64 seek=1000000000 conv=notrunc,sync status=none
ls -ls "$MNT/user.emb"
step "read them back: dd skip=5 | cmp, od of row 1000000000, a hole reads as zeros"
dd if="$MNT/user.emb" bs=64 skip=5 count=1 status=none | cmp - "$D/row5" && echo "row 5 matches"
dd if="$MNT/user.emb" bs=64 skip=1000000000 count=1 status=none | od -c | head -2
dd if="$MNT/user.emb" bs=64 skip=6 count=1 status=none | od -An -tx1 | head -1

step "cp --sparse=always $MNT/user.emb $D/copy   # SEEK_DATA/SEEK_HOLE walk the two stored rows"
cp --sparse=always "$MNT/user.emb" "$D/copy"
dd if="$D/copy" bs=64 skip=1000000000 count=1 status=none | head -c 30; echo
echo "copy: $(stat -c %s "$D/copy") bytes, $(du -k "$D/copy" | cut -f1) KiB on disk"
rm -f "$D/copy"

step "ls -l $MNT; df -h $MNT"
ls -l "$MNT"
df -h "$MNT"
step "cat $MNT/.embfs/stats"
cat "$MNT/.embfs/stats"

step "fusermount3 -u $MNT"
fusermount3 -u "$MNT"
wait "$PID"
PID=
echo "clean unmount; the pool keeps the tables: $POOL (removed by this demo)"

cat <<EOF

Next:
  the quick start, step by step:  README.md, "Quick start (five minutes)"
  the daemon and its options:      man -l man/embfs.8   (make install puts the
                                   pages where man(1) finds them)
  the mounted tree, control files: man -l man/embfs.5
  guides (Python and PyTorch, snapshots, spill tier, hosts, operations): docs/
EOF
