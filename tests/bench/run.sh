#!/bin/sh
# embfs benchmarks (`make bench`, or `sh tests/bench/run.sh` from anywhere).
#
# Mounts a fresh pool on /dev/shm with the real daemon, fills one table of
# ROWS rows of 256 bytes, and compares per-row access through the mount with
# the same rows in a sparse file on /dev/shm (the kernel's best case).  Each
# configuration runs RUNS times, mount and baseline interleaved so that noise
# from other work on the machine hits both alike; the tables give medians.
#
# Sections are functions (section_*); each adds rows to the summary with
# `result`.  To add one (cache hit path, batched gather, snapshots, spill):
# write section_NAME using run_set (or rowbench + result) and call it
# between section_rowio and section_teardown at the end of this file.
#
# Environment: ROWS (4000000), RUNS (3), SECS (3 per run), SEED (1),
#   POOL_SIZE (2G), THREADS ("1 2"), BENCH_OUT (copy of the summary;
#   default build/bench/last-run.txt; every run's rowbench line goes to
#   BENCH_OUT.runs), BUILD (build dir).
# Exit 0 done, 1 failure, 77 skipped (no FUSE, no room on /dev/shm).
set -u
TOP=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$TOP/build}
EMBFS=$BUILD/embfs
MKFS=$BUILD/mkfs.embfs
ROWBENCH=$BUILD/bench/rowbench
ROWS=${ROWS:-4000000}
ROW_SIZE=256          # table geometry below: 64 x f32
TABLE=bench
RUNS=${RUNS:-3}
SECS=${SECS:-3}
SEED=${SEED:-1}
POOL_SIZE=${POOL_SIZE:-2G} # a row costs ~288 B in the pool plus ~25 B of index
THREADS=${THREADS:-"1 2"}
BENCH_OUT=${BENCH_OUT:-$BUILD/bench/last-run.txt}

# /dev/shm stands in for PMem.  PMEM_IS_PMEM_FORCE=1 makes libpmemobj treat
# the pool as PMem and persist with cache-line flushes instead of msync, as
# it would on real PMem (on a plain file on disk it would msync instead).
export PMEM_IS_PMEM_FORCE=1

W=""        # work dir on /dev/shm: pool, baseline file, mount point, logs
PID=""      # the daemon this script started
MNT=""
T_START=$(date +%s.%N)

fail() { echo "bench: FAIL: $*" >&2; exit 1; }
skip() { echo "bench: SKIP: $*" >&2; exit 77; }
say() { echo "$*"; }
now() { date +%s.%N; }
since() { awk -v s="$1" -v e="$(now)" 'BEGIN { printf "%.2f", e - s }'; }
is_mounted() { awk -v m="$1" '$2 == m { f = 1 } END { exit !f }' /proc/mounts; }

# wait_gone PID SECONDS: poll until the process has exited; 1 if it has not
wait_gone() {
	i=0
	while kill -0 "$1" 2>/dev/null; do
		i=$((i + 1))
		[ $i -gt $(($2 * 50)) ] && return 1
		sleep 0.02
	done
	return 0
}

# stop_daemon: unmount and stop the daemon we started (by PID), bounded
stop_daemon() {
	if [ -n "$MNT" ] && is_mounted "$MNT"; then
		fusermount3 -u "$MNT" 2>/dev/null || fusermount3 -uz "$MNT" 2>/dev/null
	fi
	if [ -n "$PID" ]; then
		if ! wait_gone "$PID" 30; then
			echo "bench: daemon $PID still running after unmount; SIGTERM" >&2
			kill "$PID" 2>/dev/null
			wait_gone "$PID" 10 || kill -9 "$PID" 2>/dev/null
		fi
		wait "$PID" 2>/dev/null
		PID=""
	fi
}

cleanup() {
	rc=$?
	stop_daemon
	if [ -n "$W" ] && [ -d "$W" ]; then
		if [ -n "$MNT" ] && is_mounted "$MNT"; then
			echo "bench: $MNT still mounted; leaving $W" >&2
		else
			[ $rc -ne 0 ] && [ -s "$W/daemon.log" ] && { echo "daemon log:" >&2; tail -20 "$W/daemon.log" >&2; }
			[ -s "$W/runs.log" ] && cp "$W/runs.log" "$BENCH_OUT.runs" 2>/dev/null
			rm -f "$W/pool" "$W/base.emb" "$W/daemon.log" "$W/summary" "$W/runs.log"
			[ -n "$MNT" ] && rmdir "$MNT" 2>/dev/null
			rmdir "$W" 2>/dev/null
		fi
	fi
	exit $rc
}

# ---- results ----

# result SECTION LABEL MOUNT_RPS SHM_RPS P50_MOUNT P50_SHM NOTE ("-" = none)
result() {
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$W/summary"
}

summary() {
	awk -F'\t' '
	function m(x) { return x == "-" ? "-" : sprintf("%.3f", x / 1e6) }
	BEGIN {
		printf "%-8s %-30s %10s %10s %7s %9s %9s  %s\n", "section", "configuration",
		       "mount M/s", "shm M/s", "ratio", "p50 mnt", "p50 shm", "note"
	}
	{
		r = ($3 != "-" && $4 != "-" && $4 > 0) ? sprintf("%.3f", $3 / $4) : "-"
		printf "%-8s %-30s %10s %10s %7s %9s %9s  %s\n", $1, $2, m($3), m($4), r,
		       $5 == "-" ? "-" : $5 "us", $6 == "-" ? "-" : $6 "us", $7
	}' "$W/summary"
}

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
field() { echo "$1" | tr ' ' '\n' | awk -F= -v k="$2" '$1 == k { print $2 }'; }
stat_field() { awk -v k="$1" '$1 == k { print $2 }' "$MNT/.embfs/stats"; }
mrows() { awk -v x="$1" 'BEGIN { if (x == "-") print "-"; else printf "%.3fM", x / 1e6 }'; }

# rowbench FILE RUN ARGS...: one run (run RUN draws its own ids, the same on
# the mount and on the baseline); prints its output line, fails on error
rowbench() {
	f=$1; seed=$((SEED * 1000 + $2)); shift 2
	out=$("$ROWBENCH" -r "$ROW_SIZE" -n "$ROWS" -d "$SECS" -s "$seed" "$@" "$f") ||
		fail "rowbench $* $f"
	echo "$out" >>"$W/runs.log"
	echo "$out"
}

# run_set SECTION LABEL SHM(1|0) REF_SHM ARGS...: RUNS runs on the mount
# (and, interleaved, on the baseline if SHM=1); records medians.  Without a
# baseline run, REF_SHM (a rows/s figure or "-") is the ratio's reference.
# The note gives the daemon's read and write requests per row: how much of
# the traffic the kernel page cache did not absorb.
run_set() {
	sec=$1; label=$2; with_shm=$3; ref=$4; shift 4
	mv=""; sv=""; mp=""; sp=""; ops=0
	r0=$(stat_field fs.read_calls); w0=$(stat_field fs.write_calls)
	n=1
	while [ $n -le "$RUNS" ]; do
		o=$(rowbench "$MNT/$TABLE.emb" "$n" "$@") || exit 1
		mv="$mv $(field "$o" rows_per_s)"; mp="$mp $(field "$o" p50_us)"
		ops=$((ops + $(field "$o" ops)))
		line="  $label run $n/$RUNS: mount $(mrows "$(field "$o" rows_per_s)") p50 $(field "$o" p50_us)us p99 $(field "$o" p99_us)us"
		if [ "$with_shm" = 1 ]; then
			o=$(rowbench "$W/base.emb" "$n" "$@") || exit 1
			sv="$sv $(field "$o" rows_per_s)"; sp="$sp $(field "$o" p50_us)"
			line="$line | shm $(mrows "$(field "$o" rows_per_s)") p50 $(field "$o" p50_us)us p99 $(field "$o" p99_us)us"
		fi
		say "$line"
		n=$((n + 1))
	done
	r1=$(stat_field fs.read_calls); w1=$(stat_field fs.write_calls)
	note=$(awk -v r="$((r1 - r0))" -v w="$((w1 - w0))" -v n="$ops" \
		'BEGIN { if (n > 0) printf "daemon rd/wr per row %.3f/%.3f", r / n, w / n; else print "-" }')
	mmed=$(echo $mv | tr ' ' '\n' | median)
	smed=$ref
	spm="-"
	if [ "$with_shm" = 1 ]; then
		smed=$(echo $sv | tr ' ' '\n' | median)
		spm=$(echo $sp | tr ' ' '\n' | median)
	fi
	result "$sec" "$label" "$mmed" "$smed" "$(echo $mp | tr ' ' '\n' | median)" "$spm" "$note"
	LAST_SHM=$smed
}

# ---- sections ----

# setup: pool on /dev/shm, daemon, table filled with ROWS rows, baseline file
section_setup() {
	for p in "$EMBFS" "$MKFS" "$ROWBENCH"; do
		[ -x "$p" ] || fail "$p not built (run make)"
	done
	[ -c /dev/fuse ] || skip "no /dev/fuse"
	command -v fusermount3 >/dev/null || skip "no fusermount3"
	bytes=$((ROWS * ROW_SIZE))
	need_mb=$((bytes / 1048576 * 3 + 512)) # baseline + pool (~1.25x) + slack
	avail_mb=$(df -Pm /dev/shm | awk 'NR == 2 { print $4 }')
	[ "${avail_mb:-0}" -ge "$need_mb" ] || skip "/dev/shm has ${avail_mb} MiB free, need ~$need_mb"

	W=$(mktemp -d /dev/shm/embfs-bench.XXXXXX) || fail "mktemp"
	MNT=$W/mnt
	mkdir "$MNT"
	: >"$W/summary"
	: >"$W/runs.log"

	t=$(now)
	dd if=/dev/urandom of="$W/base.emb" bs=1M count=$((bytes / 1048576)) status=none || fail "baseline"
	rest=$((bytes % 1048576))
	[ $rest -gt 0 ] && { head -c $rest /dev/urandom >>"$W/base.emb" || fail "baseline tail"; }
	say "baseline: $W/base.emb, $ROWS rows of $ROW_SIZE B from /dev/urandom ($(since "$t") s)"

	"$MKFS" -f -s "$POOL_SIZE" -t "$TABLE:64:f32" "$W/pool" >/dev/null || fail "mkfs.embfs"
	"$EMBFS" -f "$W/pool" "$MNT" >>"$W/daemon.log" 2>&1 &
	PID=$!
	i=0
	until is_mounted "$MNT"; do
		kill -0 "$PID" 2>/dev/null || fail "embfs exited before mounting"
		i=$((i + 1))
		[ $i -gt 1000 ] && fail "mount not ready after 20 s"
		sleep 0.02
	done
	stat "$MNT/.embfs/stats" >/dev/null || fail "mount does not answer"
	[ "$(getfattr --only-values -n user.embfs.row_size "$MNT/$TABLE.emb" 2>/dev/null || echo "$ROW_SIZE")" = "$ROW_SIZE" ] ||
		fail "table row size is not $ROW_SIZE"
	say "mounted $W/pool ($POOL_SIZE, media $(stat_field pool.media)) on $MNT, daemon pid $PID"

	# populate with large sequential writes, made durable by the final fsync
	t=$(now)
	dd if="$W/base.emb" of="$MNT/$TABLE.emb" bs=1M conv=notrunc,fsync status=none || fail "populate"
	POPULATE_S=$(since "$t")
	[ "$(stat_field rows)" = "$ROWS" ] || fail "pool holds $(stat_field rows) rows, want $ROWS"
	rate=$(awk -v s="$POPULATE_S" -v n="$ROWS" 'BEGIN { printf "%.3f", (s > 0 ? n / s / 1e6 : 0) }')
	say "populate: $ROWS rows by dd bs=1M + fsync through the mount: $POPULATE_S s ($rate M rows/s)"
	result setup "populate dd bs=1M+fsync" "$(awk -v s="$POPULATE_S" -v n="$ROWS" 'BEGIN { printf "%.0f", n / s }')" - - - "$POPULATE_S s"

	# the daemon really holds the rows: read back past the page cache
	t=$(now)
	dd if="$MNT/$TABLE.emb" iflag=direct bs=1M status=none | cmp -s - "$W/base.emb" ||
		fail "table differs from the baseline"
	VERIFY_S=$(since "$t")
	say "verify: O_DIRECT read back with dd bs=1M equals the baseline ($VERIFY_S s)"
	result setup "verify O_DIRECT dd bs=1M" "$(awk -v s="$VERIFY_S" -v n="$ROWS" 'BEGIN { printf "%.0f", n / s }')" - - - "$VERIFY_S s"
}

# rowio: one pread/pwrite per row, Zipf(0.99) ids, mount vs /dev/shm file
section_rowio() {
	say ""
	say "rowio: per-row pread/pwrite, Zipf(0.99) over $ROWS rows, $RUNS x $SECS s per configuration"
	# writes through the mount leave its page cache cold (they invalidate
	# it); fill it as a serving process would, then read from it
	t=$(now)
	dd if="$MNT/$TABLE.emb" of=/dev/null bs=1M status=none || fail "warm-up read"
	say "  warm-up: sequential dd bs=1M read of the table through the page cache: $(since "$t") s"
	for t in $THREADS; do
		run_set rowio "read  ${t}thr warm cache" 1 - -o read -t "$t"
		eval "SHM_READ_$t=\$LAST_SHM"
	done
	# past the page cache: one FUSE round trip per row
	for t in $THREADS; do
		eval "ref=\$SHM_READ_$t"
		run_set rowio "read  ${t}thr O_DIRECT" 0 "$ref" -o read -t "$t" -D
	done
	# page cache dropped before each run: every miss goes to the daemon
	run_set rowio "read  1thr cold cache" 0 "${SHM_READ_1:--}" -o read -t 1 -F
	for t in $THREADS; do
		run_set rowio "write ${t}thr" 1 - -o write -t "$t"
	done
	# a training step's update: read the row, write it back
	run_set rowio "rmw   1thr (pread+pwrite)" 1 - -o rmw -t 1
}

# teardown: clean unmount (flushes everything), timed
section_teardown() {
	t=$(now)
	fusermount3 -u "$MNT" || fail "unmount"
	wait_gone "$PID" 60 || fail "daemon did not exit after unmount"
	wait "$PID" || fail "embfs exited with status $?"
	PID=""
	say ""
	say "clean unmount: $(since "$t") s"
}

trap cleanup EXIT
trap 'exit 1' INT TERM HUP

say "embfs bench: $ROWS rows x $ROW_SIZE B, $RUNS runs x $SECS s, threads: $THREADS, $(nproc) cores"
section_setup
section_rowio
section_teardown

say ""
say "summary (medians of $RUNS runs; M rows/s; ratio = mount / shm):"
summary | tee "$BENCH_OUT"
say "total bench time: $(since "$T_START") s"
