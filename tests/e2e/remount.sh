#!/bin/sh
# remount: mount time must not grow with the number of stored rows
# (docs/design.md, durability: mount after a crash must not scan every
# row).  One table on
# a pool in /dev/shm grows to 10k, 100k and 400k rows (sequential 1 MiB dd
# writes); at each size the pool is remounted after a clean unmount and after
# a SIGKILL, three times each, timing mount_pool (daemon start to a mount
# that answers).  Prints rows vs remount ms.  The assertion is deliberately
# loose (machines are noisy): the best time at the largest size is below
# 5x the best at the smallest plus 200 ms.
. "$(dirname "$0")/../lib.sh"

SIZES=${SIZES:-"10240 102400 409600"}
REPS=3
setup
S=$(mktemp -d "/dev/shm/${EMBFS_PFX}remount.XXXXXX") || fail "mktemp on /dev/shm"
trap 'rc=$?; rm -rf "$S"; (exit $rc); cleanup' EXIT
POOL="$S/pool"
M="$T/mnt"
RS=256

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# timed_mount: remount, set MS to the ms it took (no $(...): mount_pool
# must set PID and DAEMONS in this shell)
timed_mount() {
	t0=$(now_ms)
	mount_pool "$POOL" "$M"
	MS=$(( $(now_ms) - t0 ))
}

# best LIST: smallest number of a list
best() { echo "$@" | tr ' ' '\n' | sort -n | head -1; }

mkpool "$POOL" -s 256M
mount_pool "$POOL" "$M"
loaded=0
out="$T/table"
printf '  %8s %10s %-20s %10s %-20s %9s\n' rows "clean ms" "(each)" "crash ms" "(each)" "used MiB" >"$out"
first_clean=""; first_crash=""
for n in $SIZES; do
	# grow the table to n rows, 1 MiB per write
	if [ "$n" -gt $loaded ]; then
		rand_bytes $(((n - loaded) * RS)) | dd of="$M/t.emb" bs=1M iflag=fullblock \
			oflag=seek_bytes seek=$((loaded * RS)) conv=notrunc \
			status=none || fail "loading rows $loaded..$n (pool full?)"
		loaded=$n
	fi
	[ "$(stat_field "$M" rows)" = "$n" ] || fail "stats say $(stat_field "$M" rows) rows, want $n"
	tail -c $RS "$M/t.emb" >"$T/last"
	used=$(( $(stat_field "$M" pool.used_bytes) >> 20 ))

	clean=""
	for i in $(seq $REPS); do
		unmount_pool "$M"
		timed_mount
		clean="$clean $MS"
		[ "$(stat_field "$M" pool.recovered)" = 0 ] || fail "recovered after a clean unmount"
	done
	crash=""
	for i in $(seq $REPS); do
		crash_daemon "$M"
		timed_mount
		crash="$crash $MS"
		[ "$(stat_field "$M" pool.recovered)" = 1 ] || fail "pool.recovered not 1 after SIGKILL"
	done
	[ "$(stat_field "$M" rows)" = "$n" ] || fail "$n rows before, $(stat_field "$M" rows) after remounts"
	tail -c $RS "$M/t.emb" | cmp -s - "$T/last" || fail "last row changed across remounts"
	bc=$(best $clean); bk=$(best $crash)
	[ -n "$first_clean" ] || { first_clean=$bc; first_crash=$bk; }
	printf '  %8d %10d %-20s %10d %-20s %9d\n' "$n" "$bc" "($(echo $clean | tr ' ' ,))" "$bk" \
		"($(echo $crash | tr ' ' ,))" "$used" >>"$out"
	last_clean=$bc; last_crash=$bk
done
unmount_pool "$M"
echo "  remount time (best of $REPS, ms; mount_pool polls every 20 ms):"
cat "$out"
[ "$last_clean" -lt $((5 * first_clean + 200)) ] ||
	fail "clean remount grows with rows: $first_clean ms -> $last_clean ms"
[ "$last_crash" -lt $((5 * first_crash + 200)) ] ||
	fail "remount after SIGKILL grows with rows: $first_crash ms -> $last_crash ms"
exit 0
