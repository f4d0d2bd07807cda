#!/bin/sh
# mkfs: mkfs.embfs rejects bad input with one line on stderr and a non-zero
# exit, before touching anything (every file of the work directory keeps its
# bytes, size, mode and mtime; no file appears); and what it makes is right:
# -t tables with their geometry (xattrs, row size in use), -L label in
# .embfs/stats, -f overwrites a pool or data, -s sizes a new file and extends
# an existing zero file, a file's own size is used without -s.
. "$(dirname "$0")/../lib.sh"

setup
EXPECT=""
W="$T/w"
mkdir "$W"
POOL="$W/pool"          # an embfs pool with a table
DATA="$W/data"          # a file holding data
ZERO="$W/zero"          # 1 MiB of zeros
mkpool "$POOL" -s 16M -L keep -t old.emb:8
rand_bytes 1M >"$DATA"
head -c 1M /dev/zero >"$ZERO"
mkdir "$W/dir"

# snapshot of everything under $W
wstate() {
	find "$W" -printf '%p %y %s %m %T@\n' | sort
	find "$W" -type f -exec sha256sum {} + | sort
}

xattr() {
	python3 -c 'import os, sys; print(os.getxattr(sys.argv[1], sys.argv[2]).decode())' "$1" "$2" ||
		fail "getxattr $2 of $1"
}

# bad DESC ARGS...: mkfs.embfs ARGS must fail cleanly and change nothing;
# the message must contain $EXPECT if set
bad() {
	desc=$1; shift
	before=$(wstate)
	"$MKFS" "$@" >"$T/out" 2>"$T/err"
	rc=$?
	[ $rc -ne 0 ] || fail "$desc: mkfs.embfs $* succeeded"
	n=$(wc -l <"$T/err")
	[ "$n" -eq 1 ] || { cat "$T/err" >&2; fail "$desc: $n lines on stderr, want 1"; }
	grep -q '^mkfs.embfs: .....' "$T/err" || fail "$desc: unclear message '$(cat "$T/err")'"
	[ -s "$T/out" ] && fail "$desc: wrote to stdout: $(cat "$T/out")"
	[ "$(wstate)" = "$before" ] || fail "$desc: mkfs.embfs $* changed $W"
	if [ -n "$EXPECT" ]; then
		grep -qF -- "$EXPECT" "$T/err" || fail "$desc: message does not name $EXPECT: $(cat "$T/err")"
		EXPECT=""
	fi
	say "$(printf '%-34s' "$desc") status $rc: $(sed "s|$W/||g" "$T/err")"
}

EXPECT="'-x'"
bad "unknown option"                -x "$W/new"
EXPECT="'-x'"
bad "unknown option in a group"     -fx "$W/new"
EXPECT="'--frobnicate'"
bad "unknown long option"           --frobnicate "$W/new"
bad "missing target"                -s 32M
bad "no arguments at all"
bad "two targets"                   -s 32M "$W/new" "$W/new2"
bad "-s without a value"            "$W/new" -s
bad "size too small (new file)"     -s 1M "$W/new"
bad "size too small (zero file)"    -s 4M "$ZERO"
bad "bad -s: letters"               -s abc "$W/new"
bad "bad -s: negative"              -s -64M "$W/new"
bad "bad -s: zero"                  -s 0 "$W/new"
bad "bad -s: unknown suffix"        -s 64Q "$W/new"
bad "bad -s: overflow"              -s 99999999999999T "$W/new"
bad "bad -s: empty"                 -s "" "$W/new"
bad "table without dim"             -s 32M -t user.emb "$W/new"
bad "table with dim 0"              -s 32M -t user.emb:0 "$W/new"
bad "table with dim letters"        -s 32M -t user.emb:abc "$W/new"
bad "table with bad dtype"          -s 32M -t user.emb:64:f99 "$W/new"
EXPECT="more than 65536 (dim at most 8192 for f64)"
bad "table row too large"           -s 32M -t user.emb:100000:f64 "$W/new"
EXPECT="a row of 20000 x f32 is 80000 bytes"
bad "table row too large (f32)"     -s 32M -t foo:20000 "$W/new"
EXPECT="dtype 'f99'"
bad "table with bad dtype (named)"  -s 32M -t user.emb:64:f99 "$W/new"
bad "table name with /"             -s 32M -t a/b:64 "$W/new"
bad "table with empty name"         -s 32M -t :64 "$W/new"
bad "table named .embfs"            -s 32M -t .embfs:64 "$W/new"
bad "table given twice"             -s 32M -t a:8 -t a:16:f16 "$W/new"
bad "bad table, existing pool"      -f -t a:0 "$POOL"
bad "label too long"                -s 32M -L "$(printf '%070d' 0)" "$W/new"
bad "new file without -s"           "$W/new"
bad "existing pool without -f"      "$POOL"
bad "existing pool without -f, -s"  -s 32M "$POOL"
bad "file with data without -f"     "$DATA"
bad "file with data without -f, -s" -s 32M "$DATA"
bad "zero file larger than -s"      -s 512K "$ZERO"
bad "a directory"                   -s 32M "$W/dir"
bad "target in a missing directory" -s 32M "$W/nodir/new"
[ -e "$W/new" ] && fail "a failed mkfs left $W/new behind"

# ---- what mkfs makes -------------------------------------------------------

# -t tables, -L label, -s with a suffix on a new file
"$MKFS" -s 24MiB -L "my pool" -t user.emb:64 -t item.emb:16:f16 -t q8:100:i8 \
	-t b:7:bf16 -t d:3:f64 -t "with:colon:12:u8" "$T/p1" >"$T/out" || fail "mkfs with tables"
say "$(head -1 "$T/out" | sed "s|$T/||")"
[ "$(stat -c %s "$T/p1")" = $((24 << 20)) ] || fail "-s 24MiB made $(stat -c %s "$T/p1") bytes"
mount_pool "$T/p1" "$T/m"
[ "$(stat_field "$T/m" pool.label)" = my ] || fail "label: $(stat_field "$T/m" pool.label)"
grep -qx 'pool.label my pool' "$T/m/.embfs/stats" || fail "pool.label is not 'my pool'"
[ "$(stat_field "$T/m" tables)" = 6 ] || fail "want 6 tables, stats say $(stat_field "$T/m" tables)"
for spec in user.emb:64:f32:256 item.emb:16:f16:32 q8:100:i8:100 b:7:bf16:14 d:3:f64:24 \
	with:colon:12:u8:12; do
	rs=${spec##*:}; x=${spec%:*}; dt=${x##*:}; x=${x%:*}; dim=${x##*:}; name=${x%:*}
	f="$T/m/$name"
	[ -f "$f" ] || fail "table $name missing: $(ls -a "$T/m")"
	[ "$(xattr "$f" user.embfs.dim)" = "$dim" ] || fail "$name: dim $(xattr "$f" user.embfs.dim), want $dim"
	[ "$(xattr "$f" user.embfs.dtype)" = "$dt" ] || fail "$name: dtype $(xattr "$f" user.embfs.dtype), want $dt"
	[ "$(xattr "$f" user.embfs.row_size)" = "$rs" ] || fail "$name: row_size $(xattr "$f" user.embfs.row_size), want $rs"
	[ "$(stat -c %s "$f")" = 0 ] || fail "$name: new table is not empty"
	# the geometry is the one in use: row 3 alone makes the file 4 rows long
	rand_bytes "$rs" >"$T/row"
	dd if="$T/row" of="$f" bs="$rs" seek=3 conv=notrunc status=none || fail "$name: write row 3"
	[ "$(stat -c %s "$f")" = $((4 * rs)) ] || fail "$name: size $(stat -c %s "$f") after row 3, want $((4 * rs))"
	dd if="$f" bs="$rs" skip=3 count=1 status=none | cmp -s - "$T/row" || fail "$name: row 3 reads back wrong"
	say "table $name: dim $dim $dt, row_size $rs"
done
unmount_pool "$T/m"

# -f overwrites a pool: new uuid and label, no tables
uuid_of() { sed -n 's/.*uuid \([0-9a-f-]*\).*/\1/p' "$1"; }
"$MKFS" -s 16M -L first -t t1:4 "$T/p2" >"$T/out1" || fail "mkfs p2"
"$MKFS" -f -L second "$T/p2" >"$T/out2" || fail "mkfs -f over a pool"
[ "$(uuid_of "$T/out1")" != "$(uuid_of "$T/out2")" ] || fail "-f kept the uuid"
mount_pool "$T/p2" "$T/m"
[ "$(stat_field "$T/m" pool.label)" = second ] || fail "-f: label $(stat_field "$T/m" pool.label)"
[ "$(stat_field "$T/m" tables)" = 0 ] || fail "-f: old tables survived"
[ -e "$T/m/t1" ] && fail "-f: table t1 still there"
unmount_pool "$T/m"
say "-f over a pool: new uuid $(uuid_of "$T/out2"), label second, no tables"

# -f over a file with data; its size is kept without -s
cp "$DATA" "$T/d2"
truncate -s 20M "$T/d2"
"$MKFS" -f "$T/d2" >/dev/null || fail "mkfs -f over data"
[ "$(stat -c %s "$T/d2")" = $((20 << 20)) ] || fail "-f over data: size changed"
mount_pool "$T/d2" "$T/m"
[ "$(stat_field "$T/m" pool.size_bytes)" = $((20 << 20)) ] || fail "-f over data: pool size"
unmount_pool "$T/m"
say "-f over a 20 MiB file with data: pool of 20 MiB"

# -s extends an existing zero file (no -f needed: it holds no data)
cp "$ZERO" "$T/z"
"$MKFS" -s 40M "$T/z" >/dev/null || fail "mkfs -s on a zero file"
[ "$(stat -c %s "$T/z")" = $((40 << 20)) ] || fail "-s on zero file: size $(stat -c %s "$T/z")"
mount_pool "$T/z" "$T/m"
[ "$(stat_field "$T/m" pool.size_bytes)" = $((40 << 20)) ] || fail "-s on zero file: pool size"
echo hello >"$T/m/x.emb" || fail "write to the pool made on a zero file"
unmount_pool "$T/m"
say "-s 40M on a 1 MiB zero file: extended to 40 MiB"

# a sparse (all-hole) file of the right size needs neither -s nor -f
truncate -s 16M "$T/sparse"
"$MKFS" -L sparse "$T/sparse" >/dev/null || fail "mkfs on an empty sparse file"
mount_pool "$T/sparse" "$T/m"
[ "$(stat_field "$T/m" pool.size_bytes)" = $((16 << 20)) ] || fail "sparse: pool size"
unmount_pool "$T/m"

# the originals are untouched and the kept pool still mounts with its table
mount_pool "$POOL" "$T/m"
[ "$(stat_field "$T/m" pool.label)" = keep ] || fail "kept pool: label"
[ -f "$T/m/old.emb" ] || fail "kept pool: table old.emb gone"
unmount_pool "$T/m"
exit 0
