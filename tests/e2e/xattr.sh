#!/bin/sh
# Table geometry as extended attributes: user.embfs.dim, user.embfs.dtype and
# the read-only user.embfs.row_size.  Defaults from the mount options; a
# change on a table with rows cuts its bytes again (cptools.sh has the rest),
# bad values EINVAL, geometry survives a remount and decides how bytes map to
# rows.
. "$(dirname "$0")/../lib.sh"
[ -z "$TMPDIR" ] && [ -d /dev/shm ] && [ -w /dev/shm ] && TMPDIR=/dev/shm && export TMPDIR
setup
# EMBFS_TEST_OPTS: extra daemon arguments for every mount, e.g. "-o cache_size=0"
OPTS=${EMBFS_TEST_OPTS:-}
command -v getfattr >/dev/null && command -v setfattr >/dev/null ||
	skip "getfattr/setfattr missing (Debian package attr; make deps installs it)"
M="$T/m"
export LC_ALL=C

# stored rows, after a whole-pool sync point (fsync of the mount root)
# (a failed sync shows in the value: fail would only leave the $(...) subshell)
stored_rows() { sync "$M" 2>/dev/null || echo "fsync-of-the-mount-root-failed"; stat_field "$M" rows; }
# rows table F stores, by its SEEK_DATA extents (an unlinked table's rows
# that the kernel still holds open count in .embfs/stats, not here)
rows_of() { python3 "$TOP/tests/tools/extents.py" --rows "$M/$1"; }
expect() { [ "$2" = "$3" ] || fail "$1: expected '$3', got '$2'"; }
xget() { getfattr --absolute-names --only-values -n "user.embfs.$2" "$M/$1" 2>&1; }
geom() { echo "$(xget "$1" dim) $(xget "$1" dtype) $(xget "$1" row_size)"; }
xset() { setfattr -n "user.embfs.$2" -v "$3" "$M/$1" || fail "setfattr $2=$3 on $1"; }
# xset_err FILE NAME VALUE MESSAGE: setfattr must fail with strerror MESSAGE
xset_err() {
	out=$(setfattr -n "user.embfs.$2" -v "$3" "$M/$1" 2>&1) &&
		fail "setfattr $2='$3' on $1 succeeded, expected $4"
	case $out in
	*"$4"*) ;;
	*) fail "setfattr $2='$3' on $1: '$out', expected '$4'" ;;
	esac
}

mkpool "$T/pool"
mount_pool "$T/pool" "$M" $OPTS

say "defaults: dim=64 f32, 256-byte rows; listxattr"
: > "$M/t.emb" || fail "create t.emb"
expect "default geometry" "$(geom t.emb)" "64 f32 256"
expect "listxattr" "$(getfattr --absolute-names -d "$M/t.emb" 2>/dev/null | grep '^user' | tr '\n' ' ')" \
	'user.embfs.dim="64" user.embfs.dtype="f32" user.embfs.row_size="256" '
getfattr --absolute-names -n user.embfs.nosuch "$M/t.emb" 2>&1 | grep -q "No such attribute" ||
	fail "getfattr of an unknown attribute does not give ENODATA"

say "changes on an empty table set row_size"
xset t.emb dim 128
expect "dim=128" "$(geom t.emb)" "128 f32 512"
for d in f16:256 bf16:256 i8:128 u8:128 f64:1024 i16:256 i32:512 f32:512; do
	xset t.emb dtype "${d%:*}"
	expect "dtype=${d%:*}" "$(geom t.emb)" "128 ${d%:*} ${d#*:}"
done
setfattr -n user.embfs.dim -v 0x3130300a "$M/t.emb" || fail "dim '100\\n' (as echo writes it)"
expect "dim '100\\n'" "$(geom t.emb)" "100 f32 400"
xset t.emb dim 16384
expect "largest f32 row" "$(geom t.emb)" "16384 f32 65536"
xset t.emb dim 3
xset t.emb dtype u8
expect "3-byte rows" "$(geom t.emb)" "3 u8 3"

say "bad values: EINVAL, geometry unchanged"
for v in 0 -1 abc 12x 1.5 "" " " 4294967297 65537; do
	xset_err t.emb dim "$v" "Invalid argument"
done
xset t.emb dtype f32
xset_err t.emb dim 16385 "Invalid argument" # 65540-byte rows
xset t.emb dim 3
xset t.emb dtype u8
xset t.emb dim 65536
xset_err t.emb dtype f16 "Invalid argument" # 131072-byte rows
xset t.emb dim 3
xset t.emb dtype f32
for v in f128 F32 float "" int8 u16; do
	xset_err t.emb dtype "$v" "Invalid argument"
done
expect "geometry after refused values" "$(geom t.emb)" "3 f32 12"

say "row_size is read-only; the attributes cannot be removed; other user.* names unsupported"
xset t.emb row_size 12 # the value it has: a no-op (cp -a copies every user.* attribute)
xset_err t.emb row_size 64 "Operation not permitted"
setfattr -x user.embfs.dim "$M/t.emb" 2>/dev/null && fail "removexattr user.embfs.dim worked"
out=$(setfattr -n user.comment -v hi "$M/t.emb" 2>&1) && fail "setfattr user.comment worked"
case $out in *"Operation not supported"*) ;; *) fail "setfattr user.comment: '$out'" ;; esac
expect "geometry after refused changes" "$(geom t.emb)" "3 f32 12"

say "a size without rows is still empty: geometry can change"
truncate -s 1M "$M/t.emb"
xset t.emb dim 4
expect "geometry of a sized, rowless table" "$(geom t.emb)" "4 f32 16"
expect "size kept" "$(stat -c %s "$M/t.emb")" 1048576

say "with rows: the bytes cut again into rows of the new size, the same bytes"
xset t.emb dtype u8 # 4-byte rows
printf '0123456789' | dd of="$M/t.emb" bs=1 seek=1000 conv=notrunc status=none
# no sync point yet: the rows may still be in a cache, they exist all the same
expect "st_blocks" "$(stat -c %b "$M/t.emb")" 1
expect "rows of 4 bytes written by 10 bytes at 1000" "$(stored_rows)" 3
xset t.emb dim 8
expect "geometry cut again" "$(geom t.emb)" "8 u8 8"
expect "data cut again" "$(dd if="$M/t.emb" bs=1 skip=1000 count=10 status=none)" 0123456789
expect "size kept" "$(stat -c %s "$M/t.emb")" 1048576
expect "rows of 8 bytes holding bytes 1000..1009" "$(rows_of t.emb)" 2
xset t.emb dim 4
xset t.emb dim 4 # what it is already: nothing to do
xset t.emb row_size 4
xset_err t.emb row_size 8 "Operation not permitted"
expect "geometry with rows" "$(geom t.emb)" "4 u8 4"
expect "data with rows" "$(dd if="$M/t.emb" bs=1 skip=1000 count=10 status=none)" 0123456789
expect "rows of 4 bytes again" "$(rows_of t.emb)" 3
fallocate -p -o 996 -l 20 "$M/t.emb" || fail "punch the rows"
expect "rows after punch" "$(rows_of t.emb)" 0
xset t.emb dim 5
truncate -s 0 "$M/t.emb"
printf 'abcdefghij' > "$M/t.emb"
expect "rows of 5 bytes" "$(rows_of t.emb)" 2
xset t.emb dtype i16
expect "one row of 10 bytes" "$(rows_of t.emb)" 1
expect "bytes of the i16 rows" "$(cat "$M/t.emb")" abcdefghij
truncate -s 0 "$M/t.emb"
xset t.emb dim 5
expect "geometry after truncate to 0" "$(geom t.emb)" "5 i16 10"

say "mount options set the default; geometry survives a remount"
unmount_pool "$M"
mount_pool "$T/pool" "$M" $OPTS -o dim=16,dtype=f16
: > "$M/h.emb"
expect "default from -o dim=16,dtype=f16" "$(geom h.emb)" "16 f16 32"
expect "t.emb after remount" "$(geom t.emb)" "5 i16 10"
xset h.emb dim 7
printf 'x' > "$M/h.emb"
unmount_pool "$M"
mount_pool "$T/pool" "$M" $OPTS
expect "h.emb after remount" "$(geom h.emb)" "7 f16 14"
: > "$M/d.emb"
expect "default back to dim=64 f32" "$(geom d.emb)" "64 f32 256"
unmount_pool "$M"
for o in dim=0 dim=16385 dtype=f128; do
	# bounded: should it mount anyway, timeout's SIGTERM unmounts it
	timeout 10 "$EMBFS" -f -o "$o" "$T/pool" "$M" 2>/dev/null && fail "embfs -o $o mounted"
	is_mounted "$M" && fail "embfs -o $o left a mount"
done
exit 0
