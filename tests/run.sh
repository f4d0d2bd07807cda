#!/bin/sh
# Test runner: unit tests (build/tests/test_*) then end-to-end tests
# (tests/e2e/*.sh), each under a timeout.  Exit status 77 = skipped.
# Usage: tests/run.sh [NAME-SUBSTRING...]
TOP=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$TOP/build}
TIMEOUT=${TEST_TIMEOUT:-300}
pass=0; failn=0; skipn=0; failed=""
run() {
	name=$1; shift
	if [ -n "$FILTER" ]; then
		case "$name" in *$FILTER*) ;; *) return ;; esac
	fi
	start=$(date +%s.%N)
	out=$(timeout -k 10 "$TIMEOUT" "$@" 2>&1); rc=$?
	t=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
	case $rc in
	0) pass=$((pass + 1)); printf 'PASS %-28s %6ss\n' "$name" "$t" ;;
	77) skipn=$((skipn + 1)); printf 'SKIP %-28s %s\n' "$name" "$(echo "$out" | tail -1)" ;;
	*) failn=$((failn + 1)); failed="$failed $name"; printf 'FAIL %-28s (status %d)\n' "$name" "$rc"
	   echo "$out" | tail -30 | sed 's/^/     /' ;;
	esac
	[ -n "$VERBOSE" ] && echo "$out" | sed 's/^/     /'
}
FILTER=$1
for t in "$BUILD"/tests/test_*; do
	[ -x "$t" ] && run "$(basename "$t")" "$t"
done
for t in "$TOP"/tests/e2e/*.sh; do
	[ -f "$t" ] && run "$(basename "$t" .sh)" sh "$t"
done
[ -n "$failed" ] && echo "failed:$failed"
echo "$pass passed, $failn failed, $skipn skipped"
[ $failn -eq 0 ]
