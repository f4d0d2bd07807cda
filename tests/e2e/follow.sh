#!/bin/sh
# -o follow_cpu (fs/follow.c): a worker that serves a run of requests from
# one thread binds itself to that thread's CPU; with follow_cpu=0 no worker
# is ever bound.  The caller is dd pinned to the last CPU, reading and
# writing a table with O_DIRECT (each block one FUSE request from dd's
# thread).  follow_cpu takes 0 or 1 only.
. "$(dirname "$0")/../lib.sh"
[ -z "$TMPDIR" ] && [ -d /dev/shm ] && [ -w /dev/shm ] && TMPDIR=/dev/shm && export TMPDIR
setup
OPTS=${EMBFS_TEST_OPTS:-}
M="$T/m"
n=$(nproc)
[ "$n" -ge 2 ] || skip "one CPU: nothing to follow"
command -v taskset >/dev/null || skip "no taskset"
last=$((n - 1))

# bound_to PID CPU: how many of PID's threads may run on CPU alone
bound_to() {
	k=0
	for s in /proc/"$1"/task/*/status; do
		[ "$(awk '$1 == "Cpus_allowed_list:" { print $2 }' "$s" 2>/dev/null)" = "$2" ] && k=$((k + 1))
	done
	echo "$k"
}
# io MNT: dd on the last CPU writes and reads 64 rows, a request each
io() {
	taskset -c "$last" dd if=/dev/zero of="$1/t.emb" bs=4096 count=64 oflag=direct conv=notrunc 2>/dev/null ||
		fail "dd write through $1"
	taskset -c "$last" dd if="$1/t.emb" of=/dev/null bs=4096 count=64 iflag=direct 2>/dev/null ||
		fail "dd read through $1"
}

mkpool "$T/pool" -s 64M
mount_pool "$T/pool" "$M" $OPTS
touch "$M/t.emb" || fail "create t.emb"
[ "$(bound_to "$PID" "$last")" = 0 ] || fail "a worker was bound before any request"
io "$M"
b=$(bound_to "$PID" "$last")
say "follow_cpu=1 (default): $b thread(s) bound to CPU $last after dd there"
[ "$b" -ge 1 ] || fail "no worker followed dd to CPU $last"
unmount_pool "$M"

mount_pool "$T/pool" "$M" $OPTS -o follow_cpu=0
io "$M"
b=$(bound_to "$PID" "$last")
say "follow_cpu=0: $b thread(s) bound to CPU $last"
[ "$b" = 0 ] || fail "follow_cpu=0, yet $b worker(s) bound to CPU $last"
unmount_pool "$M"

out=$("$EMBFS" -f -o follow_cpu=2 "$T/pool" "$M" 2>&1) && fail "follow_cpu=2 was taken"
echo "$out" | grep -q "follow_cpu" || fail "follow_cpu=2: no word of the option in: $out"
say "follow_cpu=2 refused: $out"
