#!/bin/sh
# The audit's lock-order loops through the mount (issue 10, item 1): setfattr
# on an empty table, mkdir/rmdir of a snapshot, and small writes to another
# table, all at once for a bounded time.  The old lock order hung the mount
# within seconds; tests/tools/lockloop watches each loop's progress, so a
# hang fails the test (after 5 s without progress) instead of stalling it.
. "$(dirname "$0")/../lib.sh"
[ -z "$TMPDIR" ] && [ -d /dev/shm ] && [ -w /dev/shm ] && TMPDIR=/dev/shm && export TMPDIR
setup
M="$T/m"
mkpool "$T/pool" -s 64M
mount_pool "$T/pool" "$M" ${EMBFS_TEST_OPTS:-}
SECS=${LOCKS_SECS:-8}
"$TOOLS/lockloop" "$M" $SECS > "$T/out" 2>&1 &
L=$!
# lockloop gives up after 5 s without progress, but its threads stay in the
# kernel while the daemon hangs: kill the daemon to let them out
if ! wait_until -r $((SECS + 15)) gone $L; then
	crash_daemon "$M"
	wait $L
	cat "$T/out" >&2
	fail "the loops hung the mount"
fi
wait $L || { cat "$T/out" >&2; fail "the loops stopped: a hung mount or a failed call"; }
say "$(cat "$T/out")"
stat "$M/empty.emb" >/dev/null || fail "mount does not answer after the loops"
unmount_pool "$M"
exit 0
