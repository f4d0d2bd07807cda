#!/bin/sh
# Permissions of the mount root, .snapshots and the control files (docs/operations.md
# "Permissions"): set with mkfs.embfs -o and with chmod/chown of the two
# directories, kept in the pool across remounts, enforced for other users
# (allow_other): a trainer in the pool's group creates tables, takes and
# drops snapshots, sets the batch id and restores its tables; a user outside
# it gets EACCES (EPERM for chmod) for each.  A pool that never had them set
# shows root's 0755 and 0555 and keeps other users out as before.
# Runs commands as other ids with setpriv (no users or groups are created).
. "$(dirname "$0")/../lib.sh"
[ -z "$TMPDIR" ] && [ -d /dev/shm ] && [ -w /dev/shm ] && TMPDIR=/dev/shm && export TMPDIR
[ "$(id -u)" = 0 ] || skip "needs root (to run commands as other ids)"
command -v setpriv >/dev/null || skip "no setpriv"
setup
OPTS=${EMBFS_TEST_OPTS:-}
M="$T/m"
export LC_ALL=C
chmod 755 "$T" # other users reach the mount point

G=4242      # the trainers' group
TU=4243     # a trainer: primary group its own, $G a supplementary one
XU=4244     # a user outside $G
trainer() { setpriv --reuid=$TU --regid=$TU --groups=$G -- "$@"; }
outsider() { setpriv --reuid=$XU --regid=$XU --clear-groups -- "$@"; }
expect() { [ "$2" = "$3" ] || fail "$1: expected '$3', got '$2'"; }
perms() { stat -c '%a %u %g' "$@" | tr '\n' ' ' | sed 's/ $//'; }
# refused WHY ERRTEXT COMMAND...: COMMAND fails, saying ERRTEXT
refused() {
	_why=$1 _err=$2; shift 2
	"$@" >"$T/out" 2>&1 && fail "$_why worked"
	grep -q "$_err" "$T/out" || fail "$_why: expected '$_err', got '$(cat "$T/out")'"
}
# put FILE TEXT [AS]: write TEXT to a control file, as user AS (trainer,
# outsider; root if none), with dd (which names the errno, as dash's echo
# does not)
put() {
	_f=$1 _t=$2; shift 2
	echo "$_t" | "$@" dd of="$_f" conv=notrunc status=none
}
batch_next() { echo $(($(cat "$M/.embfs/batch") + 10)); }

say "a pool without permissions set: as before"
mkpool "$T/old"
mount_pool "$T/old" "$M" $OPTS -o allow_other
expect "defaults" "$(perms "$M" "$M/.snapshots" "$M/.embfs/batch" "$M/.embfs/restore")" \
	"755 0 0 555 0 0 644 0 0 644 0 0"
refused "a trainer creating a table in a 0755 root" "Permission denied" trainer sh -c "echo x > '$M/t.emb'"
refused "a trainer taking a snapshot" "Permission denied" trainer mkdir "$M/.snapshots/s0"
refused "a trainer setting the batch id" "Permission denied" put "$M/.embfs/batch" "99" trainer
mkdir "$M/.snapshots/s0" || fail "root cannot take a snapshot"
put "$M/.embfs/batch" "$(batch_next)" || fail "root cannot set the batch id"
say "chmod and chown of the root and .snapshots (root)"
chmod 2775 "$M" || fail "chmod of the root"
chown 0:$G "$M" || fail "chown of the root"
chown 0:$G "$M/.snapshots" && chmod 775 "$M/.snapshots" || fail "chmod/chown of .snapshots"
expect "set by root" "$(perms "$M" "$M/.snapshots" "$M/.embfs/batch")" "2775 0 $G 775 0 $G 664 0 $G"
trainer sh -c "echo x > '$M/t.emb'" || fail "a trainer cannot create a table once the root is 2775 0:$G"
trainer mkdir "$M/.snapshots/s1" || fail "a trainer cannot take a snapshot once .snapshots is 775"
unmount_pool "$M"
mount_pool "$T/old" "$M" $OPTS -o allow_other
expect "kept across a remount" "$(perms "$M" "$M/.snapshots" "$M/.embfs/batch")" "2775 0 $G 775 0 $G 664 0 $G"
unmount_pool "$M"

say "mkfs.embfs -o: a trainers' group"
mkpool "$T/pool" -o root_owner=0:$G,root_mode=2775,snap_owner=:$G,snap_mode=0775
"$MKFS" -f -s 64M -o root_mode=8 "$T/bad" 2>/dev/null && fail "mkfs took root_mode=8"
"$MKFS" -f -s 64M -o root_owner=no-such-user-x "$T/bad" 2>/dev/null && fail "mkfs took an unknown user"
"$MKFS" -f -s 64M -o snap_size=1 "$T/bad" 2>/dev/null && fail "mkfs took snap_size=1"
[ -e "$T/bad" ] && fail "a refused mkfs left $T/bad"
mount_pool "$T/pool" "$M" $OPTS -o allow_other
expect "as formatted" "$(perms "$M" "$M/.snapshots" "$M/.embfs/batch" "$M/.embfs/restore" "$M/.embfs/delta")" \
	"2775 0 $G 775 0 $G 664 0 $G 664 0 $G 664 0 $G"
expect ".embfs/rows, stats" "$(perms "$M/.embfs/rows" "$M/.embfs/stats")" "666 0 0 444 0 0"

say "a trainer in the group"
trainer sh -c "head -c 4096 /dev/urandom > '$M/t.emb'" || fail "trainer: create a table"
expect "a table in the set-group-ID root" "$(perms "$M/t.emb")" "644 $TU $G"
trainer mkdir "$M/.snapshots/s1" || fail "trainer: take a snapshot"
expect "a snapshot's directory" "$(perms "$M/.snapshots/s1")" "555 0 $G"
b=$(batch_next)
put "$M/.embfs/batch" "$b" trainer || fail "trainer: set the batch id"
expect "batch id" "$(cat "$M/.embfs/batch")" "$b"
cp "$M/t.emb" "$T/t.ref"
trainer dd if=/dev/zero of="$M/t.emb" bs=4096 count=1 conv=notrunc status=none || fail "trainer: write its table"
put "$M/.embfs/restore" "s1 t.emb" trainer || fail "trainer: restore its table"
cmp "$M/t.emb" "$T/t.ref" || fail "the trainer's restore did not bring t.emb back"
trainer rmdir "$M/.snapshots/s1" || fail "trainer: drop a snapshot"
head -c 4096 /dev/urandom > "$M/r.emb" && chmod 644 "$M/r.emb"
mkdir "$M/.snapshots/s2"
refused "a trainer restoring root's 0644 table" "Permission denied" \
	put "$M/.embfs/restore" "s2 r.emb" trainer
put "$M/.embfs/restore" "s2" trainer || fail "trainer: roll back (the root is group-writable)"

say "a user outside the group"
refused "an outsider creating a table" "Permission denied" outsider sh -c "echo x > '$M/u.emb'"
refused "an outsider removing a table" "Permission denied" outsider rm -f "$M/t.emb"
refused "an outsider taking a snapshot" "Permission denied" outsider mkdir "$M/.snapshots/s3"
refused "an outsider dropping a snapshot" "Permission denied" outsider rmdir "$M/.snapshots/s2"
refused "an outsider setting the batch id" "Permission denied" put "$M/.embfs/batch" "$b" outsider
refused "an outsider restoring" "Permission denied" put "$M/.embfs/restore" "s2 t.emb" outsider
refused "an outsider chmod of the root" "Operation not permitted" outsider chmod 777 "$M"
refused "a trainer chmod of the root it does not own" "Operation not permitted" trainer chmod 777 "$M"
refused "a trainer chown of .snapshots" "Operation not permitted" trainer chown $TU "$M/.snapshots"
expect "outsider reads what others may" "$(outsider cat "$M/.embfs/batch")" "$(cat "$M/.embfs/batch")"
[ -e "$M/.snapshots/s2" ] && [ -e "$M/t.emb" ] && [ ! -e "$M/u.emb" ] || fail "the tree changed"

say "the owner of the root: chmod, chgrp to its own group"
chown $TU:$G "$M" || fail "chown of the root to the trainer"
trainer chmod 2770 "$M" || fail "the owner cannot chmod the root"
refused "an outsider listing a 2770 root" "Permission denied" outsider ls "$M"
refused "the owner giving the root a group it is not in" "Operation not permitted" trainer chgrp 0 "$M"
trainer chgrp $TU "$M" || fail "the owner cannot give the root its own group"
chgrp $G "$M"
say ".snapshots sticky: only its owner (and root) drop snapshots"
chmod 1775 "$M/.snapshots"
refused "a trainer dropping a snapshot in a sticky .snapshots" "Operation not permitted" \
	trainer rmdir "$M/.snapshots/s2"
trainer mkdir "$M/.snapshots/s4" || fail "trainer: take a snapshot in a sticky .snapshots"
say "revoking: chmod 755 .snapshots"
put "$M/.embfs/batch" "$(batch_next)" trainer || fail "trainer: set the batch id"
chmod 755 "$M/.snapshots"
expect "batch follows .snapshots at once" "$(perms "$M/.embfs/batch")" "644 0 $G"
refused "a trainer setting the batch id after chmod 755 .snapshots" "Permission denied" \
	put "$M/.embfs/batch" "$(batch_next)" trainer
refused "a trainer taking a snapshot after chmod 755 .snapshots" "Permission denied" \
	trainer mkdir "$M/.snapshots/s5"
refused "touch of the root (times are not set)" "Operation not permitted" touch "$M"

say "kept across a remount"
before=$(perms "$M" "$M/.snapshots" "$M/.embfs/batch")
unmount_pool "$M"
mount_pool "$T/pool" "$M" $OPTS -o allow_other
expect "after a remount" "$(perms "$M" "$M/.snapshots" "$M/.embfs/batch")" "$before"
expect "the values" "$before" "2770 $TU $G 755 0 $G 644 0 $G"
trainer sh -c "echo x > '$M/t2.emb'" || fail "trainer: create a table after a remount"
refused "an outsider creating a table after a remount" "Permission denied" outsider sh -c "echo x > '$M/u.emb'"
unmount_pool "$M"
exit 0
