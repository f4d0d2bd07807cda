#!/bin/sh
# .embfs/metrics and .embfs/stats (issue 15): both parse with strict parsers
# (tests/tools/expfmt.py, itself checked against good and bad texts first),
# with tables and snapshots whose names hold a quote, backslash, space, '=',
# newline or bytes outside UTF-8; they show every name exactly, agree value
# by value, stat gives them a size, and the key reference in docs/operations.md lists every
# key and family (and nothing the mount lacks); then embfsctl's commands,
# JSON and errors (tests/e2e/metrics.py has the checks).
. "$(dirname "$0")/../lib.sh"
[ -z "$TMPDIR" ] && [ -d /dev/shm ] && [ -w /dev/shm ] && TMPDIR=/dev/shm && export TMPDIR
setup
M="$T/m"
CTL="$BUILD/embfsctl"
CHECK="$TOP/tests/e2e/metrics.py"
[ -x "$CTL" ] || fail "$CTL not built (make)"
python3 "$TOP/tests/tools/expfmt.py" selftest || fail "expfmt.py takes a bad text or refuses a good one"

mkpool "$T/pool" -s 64M
mkdir "$T/spill"
# the row cache, .embfs/rows and a spill device: every key there is; rows
# stay dirty until a sync point (embfsctl flush is checked against that)
mount_pool "$T/pool" "$M" -o spill="$T/spill",spill_size=64M,dirty_age_ms=600000
python3 "$CHECK" setup "$M" || fail "tables and snapshots with hard names"
python3 "$CHECK" files "$M" "$TOP/docs/operations.md" --all || fail "stats and metrics (row cache, spill device)"
python3 "$CHECK" ctl "$M" "$CTL" "$TOP/include/embfs/version.h" || fail "embfsctl"
# what older readers of .embfs/stats rely on still holds
[ "$(stat_field "$M" tables)" = 5 ] || fail "stats: tables is '$(stat_field "$M" tables)', want 5"
grep -q '^table\.a\\x20b\\x3dc\.emb rows=3 ' "$M/.embfs/stats" || { grep '^table' "$M/.embfs/stats" >&2; fail "stats: no line for table 'a b=c.emb'"; }
unmount_pool "$M"

# without the row cache: no cache keys, the rest the same
mount_pool "$T/pool" "$M" -o cache_size=0
grep -q '^cache\.' "$M/.embfs/stats" && fail "cache keys without a row cache"
python3 "$CHECK" files "$M" "$TOP/docs/operations.md" || fail "stats and metrics (no row cache)"
unmount_pool "$M"
