#!/bin/sh
# A table behaves like a sparse regular file to ordinary tools: shell
# redirection, cat, dd, cp, cmp, ls, mv, rm, chmod, chown, touch; holes read
# as zeros, st_blocks counts stored bytes, an unlinked open table stays
# readable until closed, attributes survive a remount, permissions are
# enforced for other users (default_permissions, allow_other).
. "$(dirname "$0")/../lib.sh"
[ -z "$TMPDIR" ] && [ -d /dev/shm ] && [ -w /dev/shm ] && TMPDIR=/dev/shm && export TMPDIR
setup
# EMBFS_TEST_OPTS: extra daemon arguments for every mount, e.g. "-o cache_size=0"
OPTS=${EMBFS_TEST_OPTS:-}
M="$T/m"
export LC_ALL=C

# stored KEY: a store counter of .embfs/stats after a whole-pool sync point
# (fsync of the mount root), where rows a write-back cache holds reach the store
# (a failed sync shows in the value: fail would only leave the $(...) subshell)
stored() { sync "$M" 2>/dev/null || echo "fsync-of-the-mount-root-failed"; stat_field "$M" "$1"; }
# stored_is KEY VALUE: the stored KEY is VALUE (for wait_until: freeing an
# unlinked table waits for the kernel's FORGET)
stored_is() {
	seen=$(stored "$1")
	case $seen in fsync*) fail "fsync of the mount root failed" ;; esac
	[ "$seen" = "$2" ]
}
size_of() { stat -c %s "$1"; }
blocks_of() { stat -c %b "$1"; }
expect() { [ "$2" = "$3" ] || fail "$1: expected '$3', got '$2'"; }

mkpool "$T/pool"
mount_pool "$T/pool" "$M" $OPTS

say "create with shell redirection, append, cat, ls -l"
echo hello > "$M/a.emb" || fail "create a.emb"
expect "cat a.emb" "$(cat "$M/a.emb")" hello
echo world >> "$M/a.emb" || fail "append a.emb"
printf 'hello\nworld\n' > "$T/a.ref"
cmp "$M/a.emb" "$T/a.ref" || fail "a.emb after append"
expect "ls -l size" "$(ls -l "$M/a.emb" | awk '{ print $5 }')" 12
expect "ls" "$(ls "$M")" a.emb
ls -a "$M" | grep -qx .embfs || fail "ls -a does not show .embfs"
expect "tables" "$(stored tables)" 1

say "dd / cp / cmp round trips"
rand_bytes 307200 > "$T/src" # 1200 rows of 256 bytes
cp "$T/src" "$M/b.emb" || fail "cp into the mount"
cmp "$T/src" "$M/b.emb" || fail "cp round trip"
expect "size b.emb" "$(size_of "$M/b.emb")" 307200
dd if="$M/b.emb" of="$T/out" bs=4k status=none || fail "dd out of the mount"
cmp "$T/src" "$T/out" || fail "dd bs=4k read back"
dd if="$T/src" of="$M/c.emb" bs=1000 status=none || fail "dd bs=1000 into the mount"
cmp "$T/src" "$M/c.emb" || fail "dd bs=1000 round trip (writes not row aligned)"
dd if="$M/c.emb" bs=777 status=none | cmp - "$T/src" || fail "dd bs=777 read back"
cp "$M/c.emb" "$T/out2" && cmp "$T/src" "$T/out2" || fail "cp out of the mount"
# overwrite part of a row in the middle: the rest of the row is kept
printf 'XYZ' | dd of="$M/c.emb" bs=1 seek=1000 conv=notrunc status=none
printf 'XYZ' | dd of="$T/src" bs=1 seek=1000 conv=notrunc status=none
cmp "$T/src" "$M/c.emb" || fail "partial-row overwrite"
expect "rows" "$(stored rows)" $((1 + 1200 + 1200))

say "holes read as zeros; st_blocks counts stored bytes"
truncate -s 10M "$M/h.emb" || fail "truncate -s 10M"
expect "size h.emb" "$(size_of "$M/h.emb")" 10485760
expect "blocks of an all-hole table" "$(blocks_of "$M/h.emb")" 0
cmp -n 10485760 "$M/h.emb" /dev/zero || fail "a never-written table does not read as zeros"
printf 'abcd' | dd of="$M/h.emb" bs=1 seek=5000000 conv=notrunc status=none
expect "blocks after one row" "$(blocks_of "$M/h.emb")" 1 # 256 bytes -> 1 block of 512
rand_bytes 1024 > "$T/k"
dd if="$T/k" of="$M/h.emb" bs=1024 seek=100 conv=notrunc status=none # rows 400..403
expect "blocks after five rows" "$(blocks_of "$M/h.emb")" 3 # 1280 bytes
expect "size h.emb after writes inside" "$(size_of "$M/h.emb")" 10485760
cmp -n 102400 "$M/h.emb" /dev/zero || fail "hole before the rows not zero"
cmp -i 102400:0 -n 1024 "$M/h.emb" "$T/k" || fail "rows 400..403"
expect "bytes at 5000000" "$(dd if="$M/h.emb" bs=1 skip=5000000 count=4 status=none)" abcd
cmp -i 5000004:0 "$M/h.emb" /dev/zero 2>&1 | grep -q EOF || fail "tail after the row not zero"
cmp -i 103424:103424 -n 4896576 "$M/h.emb" /dev/zero || fail "hole between the rows not zero"
# writing past EOF extends the file, the gap is a hole
printf 'end' | dd of="$M/h.emb" bs=1 seek=20000000 conv=notrunc status=none
expect "size after write past EOF" "$(size_of "$M/h.emb")" 20000003
cmp -i 10485760:0 -n 9514240 "$M/h.emb" /dev/zero || fail "gap before a write past EOF not zero"
expect "blocks after write past EOF" "$(blocks_of "$M/h.emb")" 3 # 6 rows = 1536 bytes
# O_TRUNC drops every row
: > "$M/h.emb"
expect "size after O_TRUNC" "$(size_of "$M/h.emb")" 0
expect "blocks after O_TRUNC" "$(blocks_of "$M/h.emb")" 0
expect "rows after O_TRUNC" "$(stored rows)" $((1 + 1200 + 1200))
# cp over a longer table truncates it (open O_TRUNC)
cp "$M/b.emb" "$M/h.emb" && cp "$T/a.ref" "$M/h.emb" || fail "cp over an existing table"
cmp "$M/h.emb" "$T/a.ref" || fail "cp over a longer table left its tail"
expect "rows after cp over" "$(stored rows)" $((1 + 1200 + 1200 + 1))

say "far offsets: row ids up to 2^48 - 2 (the pool's limit), sparse copies"
rs=$(getfattr --only-values -n user.embfs.row_size "$M/h.emb")
maxsz=$(( ((1 << 48) - 1) * rs )) # the end of row 2^48 - 2
printf 'far' | dd of="$M/far.emb" bs=1 seek=36028797018963968 status=none || fail "write at 2^55"
expect "size after a write at 2^55" "$(size_of "$M/far.emb")" 36028797018963971
printf 'end' | dd of="$M/far.emb" bs=1 seek=$((maxsz - 8)) conv=notrunc status=none ||
	fail "write at the largest size - 8"
expect "size after a write at the largest size - 8" "$(size_of "$M/far.emb")" $((maxsz - 5))
printf 'Z' | dd of="$M/far.emb" bs=1 seek=$((maxsz - 1)) conv=notrunc status=none ||
	fail "write of the last possible byte (the end of row 2^48 - 2)"
expect "largest size" "$(size_of "$M/far.emb")" $maxsz
(printf 'x' | dd of="$M/far.emb" bs=1 seek=$maxsz conv=notrunc status=none) 2>&1 |
	grep -Eq "File too large" || fail "a write past the largest size worked"
(printf 'x' | dd of="$M/far.emb" bs=1 seek=9223372036854775806 conv=notrunc status=none) 2>&1 |
	grep -Eq "File too large|Invalid argument" || fail "a write at 2^63-2 worked"
truncate -s $((maxsz + 1)) "$M/far.emb" 2>/dev/null && fail "truncate past the largest size worked"
expect "size after the refused writes" "$(size_of "$M/far.emb")" $maxsz
expect "last byte" "$(dd if="$M/far.emb" bs=1 skip=$((maxsz - 1)) count=1 status=none)" Z
expect "far bytes" "$(dd if="$M/far.emb" bs=1 skip=36028797018963968 count=3 status=none)" far
expect "last bytes" "$(dd if="$M/far.emb" bs=1 skip=$((maxsz - 8)) count=3 status=none)" end
expect "blocks of two far rows (the last two writes share a row)" "$(blocks_of "$M/far.emb")" 1
rm "$M/far.emb"
truncate -s 1T "$M/sp.emb"
printf 'sparse' | dd of="$M/sp.emb" bs=1 seek=500000000000 conv=notrunc status=none
dd if="$T/k" of="$M/sp.emb" bs=1 seek=1000 conv=notrunc status=none
# cp walks SEEK_DATA/SEEK_HOLE: reading the 1 TiB of holes would time out
timeout 20 cp "$M/sp.emb" "$T/sp" || fail "cp of a sparse 1 TiB table (SEEK_DATA/SEEK_HOLE)"
expect "size of the copy" "$(size_of "$T/sp")" 1099511627776
"$TOOLS/fsx" -q -C "$M/sp.emb" "$T/sp" >/dev/null || fail "sparse copy differs"
[ "$(du -k "$T/sp" | cut -f1)" -lt 1024 ] || fail "the copy of a sparse table is not sparse"
rm "$M/sp.emb" "$T/sp"

say "rm"
rm "$M/h.emb" || fail "rm h.emb"
[ -e "$M/h.emb" ] && fail "h.emb still there after rm"
wait_until 10 stored_is rows $((1 + 1200 + 1200))
cat "$M/h.emb" 2>/dev/null && fail "cat of a removed table worked"
wait_until 10 stored_is tables 3

say "a new table reusing a removed one's slot starts empty"
rand_bytes 65536 > "$M/r1.emb" # no sync point: rows may sit in a cache
ino=$(stat -c %i "$M/r1.emb")
rm "$M/r1.emb"
wait_until 10 stored_is rows $((1 + 1200 + 1200))
: > "$M/r2.emb"
truncate -s 65536 "$M/r2.emb"
[ "$(stat -c %i "$M/r2.emb")" = "$ino" ] || say "(r2.emb got another slot than r1.emb)"
cmp -n 65536 "$M/r2.emb" /dev/zero || fail "a new table shows a removed table's rows"
expect "blocks of the new table" "$(blocks_of "$M/r2.emb")" 0
rm "$M/r2.emb"

say "mv: rename, and rename over an existing table"
mv "$M/a.emb" "$M/a2.emb" || fail "mv a.emb a2.emb"
[ -e "$M/a.emb" ] && fail "a.emb still there after mv"
cmp "$M/a2.emb" "$T/a.ref" || fail "a2.emb content after rename"
mv "$M/b.emb" "$M/c.emb" || fail "mv b.emb over c.emb"
[ -e "$M/b.emb" ] && fail "b.emb still there after mv over c.emb"
head -c 307200 "$M/c.emb" | cmp - "$T/out" || fail "c.emb is not b.emb's content after mv"
wait_until 10 stored_is tables 2
wait_until 10 stored_is rows $((1 + 1200)) # the replaced table's rows are freed
expect "ls after renames" "$(ls "$M" | tr '\n' ' ')" "a2.emb c.emb "

say "unlink while open: data readable until close"
cp "$T/src" "$M/u.emb" || fail "cp u.emb"
wait_until 10 stored_is rows $((1 + 1200 + 1200))
exec 3<"$M/u.emb"
rm "$M/u.emb" || fail "rm u.emb while open"
[ -e "$M/u.emb" ] && fail "u.emb still listed after rm"
cmp - "$T/src" <&3 || fail "unlinked open table not readable"
expect "rows while the unlinked table is open" "$(stored rows)" $((1 + 1200 + 1200))
exec 3<&-
wait_until 10 stored_is rows $((1 + 1200))
# the same through rename over an open table
cp "$T/src" "$M/v.emb" && cp "$T/a.ref" "$M/w.emb" || fail "cp v.emb w.emb"
exec 3<"$M/v.emb"
mv "$M/w.emb" "$M/v.emb" || fail "mv w.emb over open v.emb"
cmp - "$T/src" <&3 || fail "table replaced by rename not readable through an open fd"
cmp "$M/v.emb" "$T/a.ref" || fail "v.emb is not w.emb's content"
exec 3<&-
wait_until 10 stored_is rows $((1 + 1200 + 1))
rm "$M/v.emb"

say "chmod, chown, touch -d survive a remount"
chmod 640 "$M/a2.emb" && chown 123:456 "$M/a2.emb" || fail "chmod/chown"
touch -d '2001-02-03 04:05:06 UTC' "$M/a2.emb" || fail "touch -d"
want="640 123 456 981173106 981173106"
expect "attributes" "$(stat -c '%a %u %g %X %Y' "$M/a2.emb")" "$want"
unmount_pool "$M"
mount_pool "$T/pool" "$M" $OPTS
expect "attributes after remount" "$(stat -c '%a %u %g %X %Y' "$M/a2.emb")" "$want"
cmp "$M/a2.emb" "$T/a.ref" || fail "a2.emb after remount"
head -c 307200 "$M/c.emb" | cmp - "$T/out" || fail "c.emb after remount"
expect "ls after remount" "$(ls "$M" | tr '\n' ' ')" "a2.emb c.emb "

say "what a table cannot be: directories, links, special files"
mkdir "$M/d" 2>/dev/null && fail "mkdir worked"
ln "$M/c.emb" "$M/l.emb" 2>/dev/null && fail "hard link worked"
ln -s c.emb "$M/s.emb" 2>/dev/null && fail "symlink worked"
mkfifo "$M/p" 2>/dev/null && fail "mkfifo worked"
rm "$M/.embfs/stats" 2>/dev/null && fail "rm .embfs/stats worked"
(echo x > "$M/.embfs/stats") 2>/dev/null && fail "write to .embfs/stats worked"
expect "ls after refused operations" "$(ls "$M" | tr '\n' ' ')" "a2.emb c.emb "

say "other users"
if [ "$(id -u)" != 0 ]; then
	say "(skipped: not root)"
elif command -v setpriv >/dev/null; then
	as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups -- "$@"; }
elif command -v su >/dev/null; then
	as_nobody() { su nobody -s /bin/sh -c '"$0" "$@"' -- "$@"; }
else
	say "(skipped: neither setpriv nor su)"
fi
if command -v as_nobody >/dev/null; then
	chmod 755 "$T"
	as_nobody true || fail "cannot run commands as uid 65534"
	# without allow_other the mount is the owner's alone
	as_nobody stat "$M/c.emb" >/dev/null 2>&1 && fail "uid 65534 sees the mount without allow_other"
	unmount_pool "$M"
	mount_pool "$T/pool" "$M" $OPTS -o allow_other
	chmod 644 "$M/c.emb" && chmod 600 "$M/a2.emb" && chown 0:0 "$M/a2.emb"
	as_nobody cat "$M/c.emb" | cmp -n 307200 - "$T/out" || fail "uid 65534 cannot read a 0644 table"
	as_nobody sh -c "echo x >> '$M/c.emb'" 2>/dev/null && fail "uid 65534 wrote a 0644 root table"
	as_nobody cat "$M/a2.emb" >/dev/null 2>&1 && fail "uid 65534 read a 0600 root table"
	as_nobody sh -c "echo x > '$M/n.emb'" 2>/dev/null && fail "uid 65534 created a table in the 0755 root"
	as_nobody rm -f "$M/c.emb" 2>/dev/null; [ -e "$M/c.emb" ] || fail "uid 65534 removed a table"
	as_nobody chmod 666 "$M/c.emb" 2>/dev/null && fail "uid 65534 changed the mode of root's table"
	as_nobody truncate -s 0 "$M/c.emb" 2>/dev/null && fail "uid 65534 truncated root's table"
	chmod 666 "$M/c.emb"
	as_nobody sh -c "printf nobody | dd of='$M/c.emb' bs=1 seek=10 conv=notrunc status=none" ||
		fail "uid 65534 cannot write a 0666 table"
	expect "write by uid 65534" "$(dd if="$M/c.emb" bs=1 skip=10 count=6 status=none)" nobody
	chown 65534:65534 "$M/c.emb"
	as_nobody chmod 600 "$M/c.emb" || fail "the owner cannot chmod its table"
	expect "mode set by the owner" "$(stat -c '%a %u' "$M/c.emb")" "600 65534"
	cat "$M/c.emb" >/dev/null || fail "root cannot read a 0600 table of another user"
fi
unmount_pool "$M"
exit 0
