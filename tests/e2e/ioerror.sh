#!/bin/sh
# A pool on a plain file whose msync fails (issue 10, item 2), simulated with
# the LD_PRELOAD shim build/shim/failmsync.so: msync returns EIO once the
# trigger file exists.  Expected, as ext4 with errors=remount-ro: the write or
# fsync that could not be made durable returns EIO, the daemon logs why and
# stays up, reads of what is in the pool and the cache keep working, further
# changes get EROFS until the next mount, and nothing fsynced before is lost.
. "$(dirname "$0")/../lib.sh"
[ -z "$TMPDIR" ] && [ -d /dev/shm ] && [ -w /dev/shm ] && TMPDIR=/dev/shm && export TMPDIR
setup
M="$T/m"
MiB=1048576
SHIM="$BUILD/shim/failmsync.so"
[ -f "$SHIM" ] || fail "$SHIM not built"
export EMBFS_FAIL_MSYNC="$T/trigger"
# a sanitizer build's runtime must come first in the library list; the shim
# is not instrumented, so let it be second
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
rand_bytes 4M > "$T/a"
rand_bytes 4M > "$T/b"

# mount_failing POOL [opts]: the daemon with the shim preloaded
mount_failing() {
	p=$1; shift
	LD_PRELOAD="$SHIM" mount_pool "$p" "$M" "$@"
}

# check_failed LABEL: after the failure the daemon answers, serves reads,
# refuses changes, reports the state; remount without the fault and compare
check_failed() {
	label=$1
	kill -0 "$PID" 2>/dev/null || fail "$label: the daemon died"
	cmp "$T/a" "$M/a.emb" || fail "$label: rows fsynced before the failure do not read back"
	dd if="$T/b" of="$M/a.emb" bs=64k count=1 seek=100 conv=notrunc status=none 2>"$T/err" &&
		fail "$label: a write after the failure succeeded"
	grep -qE "Read-only file system|Input/output error" "$T/err" || { cat "$T/err" >&2; fail "$label: write after the failure: want EROFS or EIO"; }
	mkdir "$M/.snapshots/after" 2>"$T/err" && fail "$label: a snapshot after the failure"
	touch "$M/new.emb" 2>/dev/null && fail "$label: a table was created after the failure"
	setfattr -n user.embfs.dim -v 8 "$M/a.emb" 2>/dev/null && fail "$label: geometry changed after the failure"
	sync "$M" 2>/dev/null && fail "$label: fsync of the root succeeded after the failure"
	grep -q "^pool.state failed" "$M/.embfs/stats" || { grep pool. "$M/.embfs/stats" >&2; fail "$label: stats do not say the pool failed"; }
	grep -q "persist" "$T/daemon.log" || { cat "$T/daemon.log" >&2; fail "$label: the daemon did not log why"; }
	fusermount3 -u "$M" || fail "$label: unmount"
	wait_until 120 gone "$PID"
	wait "$PID"
	DAEMONS=$(echo "$DAEMONS" | sed "s/ $PID\b//")
	rm -f "$T/trigger"
	mount_pool "$T/pool" "$M"
	cmp "$T/a" "$M/a.emb" || fail "$label: rows fsynced before the failure lost after remount"
	unmount_pool "$M"
	say "$label: EIO at the failure, EROFS after, reads served, nothing fsynced lost"
}

say "with the row cache: the fsync after the failure gets EIO"
mkpool "$T/pool" -s 64M
mount_failing "$T/pool"
cp "$T/a" "$M/a.emb" && sync "$M/a.emb" || fail "write and fsync before the failure"
cp "$T/b" "$M/b.emb" || fail "write into the cache before the failure"
: > "$T/trigger"
sync "$M/b.emb" 2>"$T/err" && fail "fsync succeeded though msync fails"
grep -q "Input/output error" "$T/err" || { cat "$T/err" >&2; fail "fsync: want EIO"; }
cmp "$T/b" "$M/b.emb" || fail "rows that could not be made durable must still read from the cache"
check_failed "cache"

say "without a cache: the write itself gets EIO"
mkpool "$T/pool" -s 64M
mount_failing "$T/pool" -o cache_size=0
cp "$T/a" "$M/a.emb" && : > "$M/b.emb" || fail "write before the failure"
: > "$T/trigger"
dd if="$T/b" of="$M/b.emb" bs=64k count=1 conv=notrunc status=none 2>"$T/err" && fail "a write succeeded though msync fails"
grep -q "Input/output error" "$T/err" || { cat "$T/err" >&2; fail "write: want EIO"; }
check_failed "no cache"

say "the first failing persist is a transaction's (a snapshot made durable)"
mkpool "$T/pool" -s 64M
mount_failing "$T/pool"
cp "$T/a" "$M/a.emb" && sync "$M" || fail "write and fsync before the failure"
: > "$T/trigger"
# with the row cache, mkdir persists nothing (a pending snapshot): the
# transaction that makes it durable is the first to persist
mkdir "$M/.snapshots/s" || fail "mkdir of a snapshot (it persists nothing)"
sync "$M/.snapshots" 2>"$T/err" && fail "fsync of .snapshots succeeded though msync fails"
grep -q "Input/output error" "$T/err" || { cat "$T/err" >&2; fail "fsync of .snapshots: want EIO"; }
check_failed "snapshot"

say "without a cache, mkdir of a snapshot is a transaction: it gets EIO"
mkpool "$T/pool" -s 64M
mount_failing "$T/pool" -o cache_size=0
cp "$T/a" "$M/a.emb" && sync "$M" || fail "write and fsync before the failure"
: > "$T/trigger"
mkdir "$M/.snapshots/s" 2>"$T/err" && fail "mkdir of a snapshot without a cache succeeded though msync fails"
grep -q "Input/output error" "$T/err" || { cat "$T/err" >&2; fail "mkdir without a cache: want EIO"; }
check_failed "snapshot, no cache"
exit 0
