#!/bin/sh
# Test runner: unit tests (build/tests/test_*) then end-to-end tests
# (tests/e2e/*.sh), each under a timeout.  Exit status 77 = skipped.
# Usage: tests/run.sh [NAME-SUBSTRING...]  (a test runs if its name holds any
# of the substrings; none given: every test)
# Each test's whole output goes to $BUILD/test-logs/NAME.log; for a failing
# test the runner prints the log's path, every "seed" line in it and its last
# lines.  The logs of passing tests are removed (VERBOSE=1 prints them all).
# A test must leave nothing behind: a file or folder of this run in /dev/shm,
# /tmp or /var/tmp, or a fuse mount in one, that appeared while it ran fails
# it (listed, not removed).  A run's names start "embfs-TAG." (TAG is
# EMBFS_TEST_RUN, exported here; tests name files through test_prefix(),
# $EMBFS_PFX or mountutil.PREFIX), so another run's or a benchmark's files
# never fail this one's tests.
TOP=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$TOP/build}
TIMEOUT=${TEST_TIMEOUT:-600} # a guard against hangs, not a speed check: the slowest tests take ~300 s on a loaded 2-core machine
LOGS="$BUILD/test-logs"
mkdir -p "$LOGS" || exit 1
pass=0; failn=0; skipn=0; failed=""

selected() {
	[ $# -eq 1 ] && return 0
	name=$1; shift
	for f in "$@"; do
		case "$name" in *"$f"*) return 0 ;; esac
	done
	return 1
}

EMBFS_TEST_RUN=${EMBFS_TEST_RUN:-r$$}
export EMBFS_TEST_RUN
P="embfs-$EMBFS_TEST_RUN."

# what a test may leave behind, one a line
leftovers() {
	ls -d /dev/shm/"$P"* /tmp/"$P"* /var/tmp/"$P"* 2>/dev/null
	awk -v p="/$P" '$3 ~ /^fuse/ && (index($1, p) || index($2, p)) { print "mount " $2 }' /proc/mounts
}

run() {
	name=$1; shift
	log="$LOGS/$name.log"
	leftovers | sort >"$LOGS/.before"
	start=$(date +%s.%N)
	timeout -k 10 "$TIMEOUT" "$@" >"$log" 2>&1 </dev/null; rc=$?
	left=$(leftovers | sort | comm -13 "$LOGS/.before" -)
	if [ -n "$left" ]; then
		echo "runner: the test left behind:" >>"$log"
		echo "$left" | sed 's/^/  /' >>"$log"
		[ $rc = 0 ] || [ $rc = 77 ] && rc=99
	fi
	t=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
	case $rc in
	0) pass=$((pass + 1)); printf 'PASS %-28s %6ss\n' "$name" "$t" ;;
	77) skipn=$((skipn + 1)); printf 'SKIP %-28s %s\n' "$name" "$(tail -1 "$log")" ;;
	*) failn=$((failn + 1)); failed="$failed $name"
	   case $rc in
	   124) why="timed out after ${TIMEOUT}s" ;;
	   99) why="left files or mounts behind" ;;
	   *) why="status $rc" ;;
	   esac
	   printf 'FAIL %-28s (%s, %ss)\n' "$name" "$why" "$t"
	   echo "     whole output: $log"
	   grep -i 'seed' "$log" | sed 's/^/     /'
	   echo "     last lines:"
	   tail -30 "$log" | sed 's/^/     /' ;;
	esac
	[ -n "$VERBOSE" ] && sed 's/^/     /' "$log"
	[ $rc = 0 ] || [ $rc = 77 ] || return 0
	rm -f "$log"
}

for t in "$BUILD"/tests/test_*; do
	[ -x "$t" ] || continue
	n=$(basename "$t")
	selected "$n" "$@" && run "$n" "$t"
done
for t in "$TOP"/tests/e2e/*.sh; do
	[ -f "$t" ] || continue
	n=$(basename "$t" .sh)
	selected "$n" "$@" && run "$n" sh "$t"
done
[ -n "$failed" ] && echo "failed:$failed (whole outputs in $LOGS)"
rm -f "$LOGS/.before"
echo "$pass passed, $failn failed, $skipn skipped"
[ $failn -eq 0 ] && [ $# -eq 0 ] && echo "next: make demo shows a mount step by step; README.md has the quick start, man/ and docs/ the manual"
[ $failn -eq 0 ]
