# Shared helpers for the end-to-end tests (sourced).  Each test:
#   . "$(dirname "$0")/../lib.sh"
#   setup            # temp dir $T, trap that unmounts and stops the daemon
#   mkpool POOL [mkfs args]; mount_pool POOL MNT [embfs -o opts]
#   wait_until SECONDS COMMAND...   # every wait for a condition (never sleep-and-hope)
# Exit 0 pass, 1 fail, 77 skip.
TOP=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$TOP/build}
# The start of every file name a test makes in /dev/shm or /tmp: "embfs-",
# then, under tests/run.sh, its run's tag and a dot (the runner's leftover
# check looks at its own run's files only).
EMBFS_PFX="embfs-${EMBFS_TEST_RUN:+$EMBFS_TEST_RUN.}"
EMBFS="$BUILD/embfs"
MKFS="$BUILD/mkfs.embfs"
TOOLS="$BUILD/tools"
DAEMONS=""
MOUNTS=""

# Randomness comes from one seed per run (EMBFS_SEED if set), printed by
# setup and again by fail, with how to replay it: rand N is a number in
# [0, N), rand_bytes SIZE that many bytes (K/M suffixes) on stdout.  Each call
# takes the seed's next stream (counted in $T, so that calls inside $(...)
# count too).
EMBFS_SEED=${EMBFS_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
seed_line() { echo "seed $EMBFS_SEED (replay: EMBFS_SEED=$EMBFS_SEED sh tests/e2e/$(basename "$0"))"; }
rand_stream() {
	_rs=$(($(cat "$T/.rand" 2>/dev/null || echo 0) + 1))
	echo $_rs >"$T/.rand"
	echo $_rs
}
rand() { "$TOOLS/prng" num "$EMBFS_SEED" "$(rand_stream)" "$1"; }
rand_bytes() { "$TOOLS/prng" bytes "$EMBFS_SEED" "$(rand_stream)" "$1"; }

fail() { echo "FAIL: $*" >&2; seed_line >&2; exit 1; }
skip() { echo "SKIP: $*" >&2; exit 77; }
say() { echo "  $*"; }

# wait_until [-r] SECONDS COMMAND...: run COMMAND (a command or a shell
# function) every 20 ms until it succeeds, for at most SECONDS.  On time-out
# the test fails, naming COMMAND and what it last saw if it left that in
# $seen; with -r, wait_until returns 1 instead (the caller cleans up first).
# COMMAND may itself fail the test (a daemon that died meanwhile).
wait_until() {
	_wu_fail=1
	[ "$1" = -r ] && { _wu_fail=; shift; }
	_wu_secs=$1; shift
	_wu_end=$(($(date +%s%3N) + _wu_secs * 1000))
	seen=
	until "$@"; do
		if [ "$(date +%s%3N)" -ge $_wu_end ]; then
			[ -n "$_wu_fail" ] && fail "not within $_wu_secs s: $*${seen:+ (last: $seen)}"
			return 1
		fi
		sleep 0.02
	done
}

is_mounted() { awk -v m="$1" '$2 == m { f = 1 } END { exit !f }' /proc/mounts; }
unmounted() { ! is_mounted "$1"; }
# gone PID: the process has exited (the shell reaps its children as it goes)
gone() { ! kill -0 "$1" 2>/dev/null; }

cleanup() {
	rc=$?
	# a sanitizer's report whole (its first lines say what and where), else
	# the daemon's last lines
	if [ $rc -ne 0 ] && [ -s "$T/daemon.log" ]; then
		if grep -q 'Sanitizer' "$T/daemon.log"; then
			echo "daemon log (whole: a sanitizer report):" >&2
			cat "$T/daemon.log" >&2
		else
			echo "daemon log (last lines):" >&2
			tail -5 "$T/daemon.log" >&2
		fi
	fi
	for m in $MOUNTS; do
		is_mounted "$m" && { fusermount3 -u "$m" 2>/dev/null || fusermount3 -uz "$m" 2>/dev/null; }
	done
	for p in $DAEMONS; do
		kill "$p" 2>/dev/null
		# a hung daemon (a deadlock under test) ignores SIGTERM: give it 5 s
		wait_until -r 5 gone "$p" || kill -9 "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	[ -n "$T" ] && rm -rf "$T"
	exit $rc
}

setup() {
	[ -c /dev/fuse ] || skip "no /dev/fuse"
	[ -x "$TOOLS/prng" ] || skip "$TOOLS/prng not built (make)"
	T=$(mktemp -d "${TMPDIR:-/tmp}/${EMBFS_PFX}test.XXXXXX")
	trap cleanup EXIT
	trap 'exit 1' INT TERM
	seed_line
}

# mkpool PATH [mkfs args...]: a fresh pool (64 MiB unless -s is given)
mkpool() {
	p=$1; shift
	case " $* " in *" -s "*) ;; *) set -- -s 64M "$@" ;; esac
	"$MKFS" -f "$@" "$p" >/dev/null || fail "mkfs.embfs $p"
}

# mount_pool POOL MNT [embfs args...]: start the daemon in the foreground in
# the background, wait until the mount is live (bounded: TEST_MOUNT_WAIT
# seconds, 20 unless set; sanitizer builds start slower), set $PID.
mount_pool() {
	pool=$1; mnt=$2; shift 2
	mkdir -p "$mnt"
	"$EMBFS" -f "$@" "$pool" "$mnt" 2>>"$T/daemon.log" &
	PID=$!
	DAEMONS="$DAEMONS $PID"
	MOUNTS="$MOUNTS $mnt"
	wait_until "${TEST_MOUNT_WAIT:-20}" mounted_by "$PID" "$mnt"
	# first request through the mount proves the daemon serves
	stat "$mnt/.embfs/stats" >/dev/null || fail "mount $mnt does not answer"
}

# mounted_by PID MNT: the daemon PID mounted MNT (fails if it exited first)
mounted_by() {
	is_mounted "$2" && return 0
	gone "$1" || return 1
	cat "$T/daemon.log" >&2
	fail "embfs exited before mounting $2"
}

# unmount_pool MNT: clean unmount, wait (bounded) for the daemon to exit cleanly
unmount_pool() {
	fusermount3 -u "$1" || fail "unmount $1"
	wait_until 120 gone "$PID"
	wait "$PID" || fail "embfs exited with status $?"
	DAEMONS=$(echo "$DAEMONS" | sed "s/ $PID\b//")
}

# crash_daemon MNT: SIGKILL the daemon, drop the dead mount
crash_daemon() {
	kill -9 "$PID" 2>/dev/null
	wait "$PID" 2>/dev/null
	DAEMONS=$(echo "$DAEMONS" | sed "s/ $PID\b//")
	fusermount3 -uz "$1" 2>/dev/null || umount -l "$1" 2>/dev/null
	wait_until 10 unmounted "$1"
}

stat_field() { awk -v k="$2" '$1 == k { print $2 }' "$1/.embfs/stats"; }
# stat_is MNT KEY VALUE: .embfs/stats shows KEY = VALUE (for wait_until)
stat_is() { seen=$(stat_field "$1" "$2"); [ "$seen" = "$3" ]; }
