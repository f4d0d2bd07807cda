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
# `result`.  To add one (batched gather, snapshots, spill): write
# section_NAME using run_set or run_ab (or rowbench + result) and call it
# from the list at the end of this file.
#   setup     pool on /dev/shm, mount (default row cache), populate, verify
#   rowio     per-row pread/pwrite through the mount vs the /dev/shm file
#   hit       the hit path: reads served by the kernel page cache, and with
#             O_DIRECT by the daemon's DRAM row cache (both vs /dev/shm)
#   batch     training batches of 4096 Zipf ids through .embfs/rows vs
#             per-row pread on the mount and on /dev/shm, 1 and 2 clients;
#             then each batch written back too (build/bench/gatherbench)
#   dist      issue 16's sharded gather + scatter (embfs.dist, gloo on
#             loopback) for W = 1, 2, 4: rows/s, all-to-all and embfs shares
#   train     issue 27's trainer: embfs.torch against torch holding the same
#             tables in DRAM (tests/bench/trainbench.py: one table of 4 M x
#             64 f32, 4096 bags of 4, SGD and row-wise Adagrad, plain and
#             pipelined modules; 26 tables of 1 M x 16, 512 bags of 4,
#             per-table modules, one Collection, one pipelined Collection),
#             TRAIN_RUNS runs each alternating, lookups/s and the ratio
#             (target >= 1.0x), and each side's CPU a step (this process,
#             the daemon: on 2 cores a side takes at least half); the
#             pipelined shape again in runs of TRAIN_LONG_STEPS, which pay
#             for the write-back of what they pushed; then examples/dlrm.py
#             with OpenBLAS (apt's libopenblas0-pthread, installed here; one
#             BLAS thread, OPENBLAS_NUM_THREADS=1):
#             whole step against torch compute (target <= 1.1x) and FUSE
#             requests a step (<= 4), and against the same model and data
#             with the tables in DRAM (tests/bench/dlrmtorch.py: a
#             torch.nn.EmbeddingBag per feature, and one fused), DLRM_RUNS
#             rounds
#   restore   issue 14's restore in place (.embfs/restore) of 1% changed
#             rows against a dd bs=1M copy of the table (RUNS each)
#   pybatch   issue 13's Python package against the C client on the same
#             batches: tests/bench/pybench.py (import embfs; Table.gather
#             into a reused buffer, Table.scatter) and gatherbench -m batch
#             draw the same ids (checked first: -I digests), 1 and 2
#             clients, gather and gather+scatter, PY_RUNS runs of PY_SECS s
#             each, alternately; ratio python/C (target >= 0.7x).  On the
#             main mount if setup ran, else on a pool of its own
#   teardown  clean unmount of the main mount
#   gathermin issue 27's anchor for the batched gather: gatherbench -m batch
#             (1 client, BATCH_IDS Zipf ids) on embfs's .embfs/rows against
#             the same batches on build/bench/minfuse (tests/bench/minfuse.c:
#             a minimal FUSE server answering GATHERs from a DRAM array), a
#             pool of its own on /dev/shm; GM_PAIRS pairs, alternately;
#             ratio embfs/minfuse, target >= 0.8x
#   cache1    row cache at 1% of the table vs cache_size=0, two daemons on
#             copies of the pool, O_DIRECT read/write/rmw
#   verify    the cost of checksum verification on the store's read path:
#             two daemons with cache_size=0 on copies of the pool, one the
#             bench's build (build/bench/embfs-test) with EMBFS_VERIFY=0
#             (reads skip the row digest); batched gathers
#             and per-row O_DIRECT preads, runs interleaved
#   snap      training loop with a snapshot every SNAP_EVERY batches vs
#             none, mkdir latency, space a snapshot holds (main mount)
#   snapscale mkdir latency with 1M and SNAP_BIG_ROWS rows stored
#   snapwb    mkdir latency while 2M dirty rows are written back (p50, p99
#             of 25) and the training loop with and without snapshots, on
#             a pool file on the root disk and on /dev/shm (issue 17)
#   durable   pool as a plain file on the root disk (msync, no PMem):
#             writes with an fsync every SYNC_EVERY rows vs a file on disk
#   umount    issue 29's plain unmount: UMOUNT_ROWS (200000) dirty rows,
#             pool a plain file in DISK_DIR; fusermount3 -u -> remount vs
#             the fsync write-back of the same rows, UMOUNT_RUNS (RUNS)
#             pairs; target <= 1.5x
#   load      a table 8x the pool loaded through the mount, in row order and
#             shuffled, against the same fill of a plain file on DISK_DIR;
#             device write amplification (LOAD_* knobs)
#   spilltrain training on a table 8x the pool: each 10-step window's
#             device reads against fio's IOPS on the spill file (the
#             device's read bound), bytes written (SPT_* knobs)
#   spill     SSD spill tier: a 256 MiB pool on /dev/shm + 16 MiB row cache
#             + spill file in DISK_DIR, a 1 GiB table of 512-byte rows filled
#             sequentially (~95% of rows end up on the device); batched
#             gathers of uniform and Zipf ids (1 and 2 clients) and per-row
#             O_DIRECT pread, device IOPS next to fio 4 KiB O_DIRECT io_uring
#             random reads of the same spill file at the same queue depth
#             (build/bench/spillbench; needs fio for the comparison)
#   capacity  issue 12's capacity figures (runs alone: SECTIONS=capacity,
#             ~6 min today, 64-B rows the longest: ~2.6 min of fill): a 64 MiB pool on
#             /dev/shm, 8 MiB row cache, 4 GiB spill file in DISK_DIR; per
#             row size (64, 128, 256 B) one table filled front to back in
#             64 KiB pwrites until ENOSPC, 1 GiB or 300 s: bytes accepted,
#             ratio to the pool, pool bytes per spilled row, fill MB/s,
#             device write amplification, pwrite p50/p99/max; kill -9,
#             remount, every row checked.  On the 256-B table: sequential
#             read after remount + drop_caches vs dd iflag=direct of the
#             spill file, device reads and read amplification; uniform
#             gathers: device reads per spilled row and its distribution
#   overhead  issue 12's pool bytes per row kept in the pool (no spill):
#             per row size (OVH_DIMS f32) and table size (OVH_ROWS), a
#             fresh pool on /dev/shm, the rows dd'd in through the mount
#             (default row cache), fsync of the root: (pool.used_bytes -
#             the empty pool's) / rows - row size, and pool.index_bytes /
#             rows; target <= 32 B.  Then the same table after a snapshot
#             and a rewrite of every row (a link per kept version), and
#             after dropping the snapshot (the links go)
#   spillsnap the snap section's training loop (snapshot every SNAP_EVERY
#             batches vs none) over a 256 MiB table mostly in sorted runs:
#             a 64 MiB pool, 8 MiB cache, spill file in DISK_DIR (issue 12)
#   missrate  in-process miss-rate curve of the cache library (CLOCK) vs an
#             exact LRU (build/bench/missrate), Zipf and uniform ids
#   cachewalk the gathermin walk in process (build/bench/cachewalk): the
#             cache library's cache_read_rows of 4096 Zipf(0.99) ids over
#             ROWS cached rows against memcpy of the same ids from a DRAM
#             array, CW_RUNS (3) runs, medians; the same for writes
#             (cache_write_rows against memcpy into the array)
#
# Environment: ROWS (4000000), RUNS (3), SECS (3 per run), SEED (1),
#   POOL_SIZE (2G), THREADS ("1 2"), BENCH_OUT (copy of the summary;
#   default build/bench/last-run.txt; every run's rowbench line goes to
#   BENCH_OUT.runs), BUILD (build dir), WARM_SECS (2: untimed O_DIRECT
#   reads that fill a row cache before O_DIRECT runs), DISK_DIR (/var/tmp),
#   DISK_ROWS (1000000), DISK_POOL_SIZE (512M), SYNC_EVERY (4096),
#   MR_ACCESSES (5 x ROWS), MR_WARMUP (ROWS + ROWS/4), MR_UNIFORM_ACCESSES
#   (ROWS + ROWS/4), MR_UNIFORM_WARMUP (ROWS / 2), MR_ONE_SHARD (0; 1: also
#   CLOCK with one shard), CACHE1_RUNS (5), CACHE1_SECS (2), SPILL_POOL_SIZE
#   (256M), SPILL_CACHE (16M), SPILL_DIM (128 f32), SPILL_ROWS (1048576),
#   SPILL_SIZE (2G), SPILL_QD (32), SPILL_HIGH (25), SPILL_LOW (20),
#   SPILL_SECS (4), SPILL_BATCH (4096), SNAP_BATCHES (40), SNAP_EVERY (5),
#   SNAP_BIG_ROWS (8000000), SNAPWB_ROWS (2097152), SNAPWB_TRAIN_ROWS
#   (1048576), SNAPWB_POOL_SIZE (2G), SNAPWB_N (25), SNAPWB_GAP_MS (10),
#   SNAPWB_TRAIN_RUNS (5), SNAPWB_MEDIA ("disk shm"), SS_ROWS (1048576),
#   SS_POOL_SIZE (64M), SS_PAIRS (7), CAP_POOL_SIZE (64M),
#   CAP_CACHE (8M), CAP_SPILL_SIZE (4G), CAP_DIMS ("16 32 64" f32),
#   CAP_MAX_BYTES (1G of rows per fill) or CAP_MAX_ROWS, CAP_FILL_SECS
#   (300: a fill writes no longer), CAP_FILL_RUNS (1 per row size),
#   CAP_CHUNK (64K per pwrite), CAP_SECS (4 per gather run), CAP_HIGH and
#   CAP_LOW (spill_high/spill_low; the daemon's defaults if empty), CAP_OPTS
#   (more mount options, e.g. spill_runs=0 for the stub tier), PY
#   (/usr/bin/python3: Debian's, with python3-numpy), PY_RUNS (RUNS), PY_SECS
#   (5 per run), GM_PAIRS (5: section gathermin's pairs of SECS s runs).
#   TRAIN_RUNS (5), TRAIN_STEPS (10 a run), TRAIN_LONG_STEPS (250 a run, one
#   shape), TRAIN_WARM (5), DLRM_STEPS (150), DLRM_RUNS (3 rounds).
#   SECTIONS (or BENCH_SECTIONS): the sections to run, in order.
# Exit 0 done, 1 failure, 77 skipped (no FUSE, no room on /dev/shm).
set -u
TOP=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$TOP/build}
EMBFS=$BUILD/embfs
MKFS=$BUILD/mkfs.embfs
ROWBENCH=$BUILD/bench/rowbench
MISSRATE=$BUILD/bench/missrate
ROWS=${ROWS:-4000000}
ROW_SIZE=256          # table geometry below: 64 x f32
TABLE=bench
RUNS=${RUNS:-3}
SECS=${SECS:-3}
SEED=${SEED:-1}
POOL_SIZE=${POOL_SIZE:-2G} # a row costs ~288 B in the pool plus ~25 B of index
THREADS=${THREADS:-"1 2"}
BENCH_OUT=${BENCH_OUT:-$BUILD/bench/last-run.txt}
WARM_SECS=${WARM_SECS:-2}
CACHE1_RUNS=${CACHE1_RUNS:-5}
CACHE1_SECS=${CACHE1_SECS:-2}
ROW_COST=$((ROW_SIZE + 40)) # bytes per cached row: CACHE_ROW_OVERHEAD = 40
DISK_DIR=${DISK_DIR:-/var/tmp}
DISK_ROWS=${DISK_ROWS:-1000000}
DISK_POOL_SIZE=${DISK_POOL_SIZE:-512M}
SYNC_EVERY=${SYNC_EVERY:-4096}
UMOUNT_ROWS=${UMOUNT_ROWS:-200000}     # section umount: dirty rows at the unmount
UMOUNT_RUNS=${UMOUNT_RUNS:-$RUNS}      # its pairs (fsync, unmount)
MR_ACCESSES=${MR_ACCESSES:-$((ROWS * 5))}
MR_WARMUP=${MR_WARMUP:-$((ROWS + ROWS / 4))}
MR_UNIFORM_ACCESSES=${MR_UNIFORM_ACCESSES:-$((ROWS + ROWS / 4))}
MR_UNIFORM_WARMUP=${MR_UNIFORM_WARMUP:-$((ROWS / 2))}
MR_ONE_SHARD=${MR_ONE_SHARD:-0}
SNAP_BATCHES=${SNAP_BATCHES:-40}   # training batches of 4096 rows per run (snap section)
SNAP_EVERY=${SNAP_EVERY:-5}        # a snapshot every this many batches
SNAP_BIG_ROWS=${SNAP_BIG_ROWS:-8000000}
SNAPWB_ROWS=${SNAPWB_ROWS:-2097152}      # snapwb: dirty rows written back while mkdirs run
SNAPWB_TRAIN_ROWS=${SNAPWB_TRAIN_ROWS:-1048576} # snapwb: the training table
SNAPWB_POOL_SIZE=${SNAPWB_POOL_SIZE:-2G}
SNAPWB_N=${SNAPWB_N:-25}                 # mkdirs per write-back
SNAPWB_GAP_MS=${SNAPWB_GAP_MS:-10}       # between them
SNAPWB_TRAIN_RUNS=${SNAPWB_TRAIN_RUNS:-5} # snapwb: training-loop pairs (with, without)
SNAPWB_MEDIA=${SNAPWB_MEDIA:-"disk shm"}
SS_ROWS=${SS_ROWS:-1048576}              # spillsnap: the table (256-byte rows)
SS_POOL_SIZE=${SS_POOL_SIZE:-64M}        # spillsnap: its pool
SS_PAIRS=${SS_PAIRS:-7}                  # spillsnap: pairs of training runs (with, without snapshots)
SPT_ROWS=${SPT_ROWS:-8388608}           # section spilltrain: rows (2 GiB of 256-byte rows)
SPT_DIM=${SPT_DIM:-64}
SPT_POOL_SIZE=${SPT_POOL_SIZE:-256M}    # ... its pool on /dev/shm (the table is 8x)
SPT_CACHE=${SPT_CACHE:-64M}
SPT_SPILL_SIZE=${SPT_SPILL_SIZE:-6G}
SPT_WINDOWS=${SPT_WINDOWS:-12}          # ... windows of SPT_STEPS steps (the issue's 10-minute run: SPT_WINDOWS=~200)
SPT_STEPS=${SPT_STEPS:-10}
SPT_SNAP_EVERY=${SPT_SNAP_EVERY:-0}     # ... and a snapshot every that many steps (0: none)
LOAD_BYTES=${LOAD_BYTES:-2G}            # section load: the table's bytes
LOAD_DIM=${LOAD_DIM:-64}                # ... its f32 dim (256-byte rows)
LOAD_POOL_SIZE=${LOAD_POOL_SIZE:-256M}  # ... its pool on /dev/shm (the table is 8x)
LOAD_CACHE=${LOAD_CACHE:-64M}           # ... the row cache
LOAD_SPILL_SIZE=${LOAD_SPILL_SIZE:-6G}  # ... the spill file in DISK_DIR
SPILL_POOL_SIZE=${SPILL_POOL_SIZE:-256M} # section spill: pool on /dev/shm
SPILL_CACHE=${SPILL_CACHE:-16M}         # its row cache
SPILL_DIM=${SPILL_DIM:-128}             # f32: 512-byte rows
SPILL_ROWS=${SPILL_ROWS:-1048576}       # 512 MiB of 512-byte rows (1 GiB no longer fits: docs/spill.md)
SPILL_SIZE=${SPILL_SIZE:-2G}            # the spill file in DISK_DIR
SPILL_QD=${SPILL_QD:-32}
SPILL_HIGH=${SPILL_HIGH:-25}
SPILL_LOW=${SPILL_LOW:-20}
SPILL_SECS=${SPILL_SECS:-4}             # per run, embfs and fio alike
SPILL_BATCH=${SPILL_BATCH:-4096}
CAP_POOL_SIZE=${CAP_POOL_SIZE:-64M}     # section capacity: pool on /dev/shm
CAP_CACHE=${CAP_CACHE:-8M}              # its row cache
CAP_SPILL_SIZE=${CAP_SPILL_SIZE:-4G}    # its spill file in DISK_DIR
CAP_DIMS=${CAP_DIMS:-"16 32 64"}        # f32: 64-, 128-, 256-byte rows
CAP_MAX_BYTES=${CAP_MAX_BYTES:-1G}      # a fill stops at this many bytes of rows
CAP_MAX_ROWS=${CAP_MAX_ROWS:-}          # or rows (overrides CAP_MAX_BYTES)
CAP_FILL_SECS=${CAP_FILL_SECS:-300}     # or after this long writing
CAP_FILL_RUNS=${CAP_FILL_RUNS:-1}       # fills per row size (fresh pool each)
CAP_CHUNK=${CAP_CHUNK:-64K}             # bytes per timed pwrite of the fill
CAP_SECS=${CAP_SECS:-4}                 # per gather run
CAP_HIGH=${CAP_HIGH:-}                  # spill_high / spill_low; empty: the daemon's defaults
CAP_LOW=${CAP_LOW:-}
CAP_OPTS=${CAP_OPTS:-}                  # more mount options, e.g. spill_runs=1 (sorted runs)
OVH_DIMS=${OVH_DIMS:-"16 32 64"}        # section overhead: f32 dims (64-, 128-, 256-byte rows)
OVH_ROWS=${OVH_ROWS:-"300000 700000 1300000 2000000 4000000"} # its table sizes
PY=${PY:-/usr/bin/python3}              # section pybatch: Debian's python3, with python3-numpy
PY_RUNS=${PY_RUNS:-$RUNS}               # its runs per configuration, each side
PY_SECS=${PY_SECS:-5}                   # per run
GM_PAIRS=${GM_PAIRS:-5}                 # section gathermin: pairs of runs (embfs, minfuse)

# /dev/shm stands in for PMem.  PMEM_IS_PMEM_FORCE=1 makes libpmemobj treat
# the pool as PMem and persist with cache-line flushes instead of msync, as
# it would on real PMem (on a plain file on disk it would msync instead).
# Section durable unsets it for its pool on the root disk.
export PMEM_IS_PMEM_FORCE=1

W=""        # work dir on /dev/shm: pool, baseline file, mount points, logs
DW=""       # work dir on DISK_DIR (section durable)
SW=""       # spill dir on DISK_DIR (section spill)
PID=""      # the daemon serving MNT
MNT=""
DAEMONS=""  # "pid:mountpoint" of every daemon this script started and has not stopped
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

forget() { DAEMONS=$(echo "$DAEMONS" | tr ' ' '\n' | grep -v "^$1:" | tr '\n' ' '); }

# mount_pool POOL MNT OPTS PMEM: start the daemon in the foreground (in the
# background), with -o OPTS unless OPTS is empty, PMEM_IS_PMEM_FORCE=1 if
# PMEM is 1 and unset otherwise; wait (bounded) until MNT is mounted and
# answers.  Sets DPID.
mount_pool() {
	mp_pool=$1; mp_mnt=$2; mp_opts=$3; mp_pm=$4
	set -- -f
	[ -n "$mp_opts" ] && set -- "$@" -o "$mp_opts"
	if [ "$mp_pm" = 1 ]; then
		PMEM_IS_PMEM_FORCE=1 "$EMBFS" "$@" "$mp_pool" "$mp_mnt" >>"$W/daemon.log" 2>&1 &
	else
		env -u PMEM_IS_PMEM_FORCE "$EMBFS" "$@" "$mp_pool" "$mp_mnt" >>"$W/daemon.log" 2>&1 &
	fi
	DPID=$!
	DAEMONS="$DAEMONS $DPID:$mp_mnt"
	i=0
	until is_mounted "$mp_mnt"; do
		kill -0 "$DPID" 2>/dev/null || fail "embfs exited before mounting $mp_mnt"
		i=$((i + 1))
		[ $i -gt 1000 ] && fail "mount of $mp_mnt not ready after 20 s"
		sleep 0.02
	done
	stat "$mp_mnt/.embfs/stats" >/dev/null || fail "mount $mp_mnt does not answer"
}

# umount_pool PID MNT: clean unmount (the daemon writes every cached row
# back), then the daemon must exit with status 0 (bounded wait)
umount_pool() {
	fusermount3 -u "$2" || fail "unmount $2"
	wait_gone "$1" 60 || fail "daemon $1 did not exit after unmount of $2"
	wait "$1"
	st=$?
	forget "$1"
	[ "$st" = 0 ] || fail "embfs ($2) exited with status $st"
}

# stop_one PID MNT: unmount (lazily if busy) and stop a daemon, bounded
stop_one() {
	if is_mounted "$2"; then
		fusermount3 -u "$2" 2>/dev/null || fusermount3 -uz "$2" 2>/dev/null
	fi
	if ! wait_gone "$1" 30; then
		echo "bench: daemon $1 still running after unmount; SIGTERM" >&2
		kill "$1" 2>/dev/null
		wait_gone "$1" 10 || kill -9 "$1" 2>/dev/null
	fi
	wait "$1" 2>/dev/null
	forget "$1"
}

# stop_daemon: unmount and stop every daemon we started (by PID), bounded
stop_daemon() {
	for d in $DAEMONS; do
		stop_one "${d%%:*}" "${d#*:}"
	done
	PID=""
}

# still_mounted DIR: 0 if a mount point under DIR is still mounted
still_mounted() { awk -v d="$1/" 'index($2, d) == 1 { f = 1 } END { exit !f }' /proc/mounts; }

cleanup() {
	rc=$?
	stop_daemon
	if [ -n "$DW" ] && [ -d "$DW" ]; then
		if still_mounted "$DW"; then
			echo "bench: a mount under $DW is still there; leaving $DW" >&2
		else
			rm -f "$DW/pool" "$DW/base.emb" "$DW/pid" "$DW/err"
			rmdir "$DW/mnt" 2>/dev/null
			rmdir "$DW" 2>/dev/null
		fi
	fi
	if [ -n "$SWB_POOL" ] && ! still_mounted "$W"; then
		rm -f "$SWB_POOL"
	fi
	if [ -n "$SW" ] && [ -d "$SW" ]; then
		if [ -n "$W" ] && still_mounted "$W"; then
			echo "bench: a mount under $W is still there; leaving $SW" >&2
		else
			rm -f "$SW"/embfs-*.spill "$SW/plain"
			rmdir "$SW" 2>/dev/null
		fi
	fi
	if [ -n "$W" ] && [ -d "$W" ]; then
		if still_mounted "$W"; then
			echo "bench: a mount under $W is still there; leaving $W" >&2
		else
			[ $rc -ne 0 ] && [ -s "$W/daemon.log" ] && { echo "daemon log:" >&2; tail -20 "$W/daemon.log" >&2; }
			[ -s "$W/runs.log" ] && cp "$W/runs.log" "$BENCH_OUT.runs" 2>/dev/null
			rm -f "$W/pool" "$W/pool0" "$W/base.emb" "$W/daemon.log" "$W/summary" "$W/runs.log" \
				"$W/mr.zipf" "$W/mr.uniform" "$W/snappool" "$W/spillpool" "$W/cappool" "$W/loadpool" "$W/pypool" \
				"$W/rspool" "$W/dpool0" "$W/dpool1" "$W/dpool2" "$W/dpool3" "$W/ovhpool" "$W/tpool" "$W/apt.log" "$W/gmpool"
			rmdir "$W/mnt" "$W/mnt0" "$W/snapmnt" "$W/snapwbmnt" "$W/spillmnt" "$W/capmnt" "$W/loadmnt" "$W/pymnt" \
				"$W/rsmnt" "$W/dmnt0" "$W/dmnt1" "$W/dmnt2" "$W/dmnt3" "$W/ovhmnt" "$W/gmmnt" "$W/minmnt" "$W/tmnt" 2>/dev/null
			rmdir "$W" 2>/dev/null
		fi
	fi
	exit $rc
}

# ---- results ----

# result SECTION LABEL MOUNT_RPS BASE_RPS P50_MOUNT P50_BASE NOTE ("-" = none);
# the base is the /dev/shm file unless the section says otherwise
result() {
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$W/summary"
}

summary() {
	awk -F'\t' '
	function m(x) { return x == "-" ? "-" : sprintf(x < 1e4 ? "%.5f" : x < 1e5 ? "%.4f" : "%.3f", x / 1e6) }
	BEGIN {
		printf "%-8s %-30s %10s %10s %7s %9s %9s  %s\n", "section", "configuration",
		       "mount M/s", "base M/s", "ratio", "p50 mnt", "p50 base", "note"
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
stat_of() { awk -v k="$2" '$1 == k { print $2 }' "$1/.embfs/stats"; }
med() { echo "$@" | tr ' ' '\n' | grep -v '^$' | median; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b <= 0) print "-"; else printf "%.3f", a / b }'; }
# pct PART TOTAL: PART as a percentage of TOTAL, or "-"
pct() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.1f%%", 100 * a / b; else print "-" }'; }
# meets RATIO MIN: "met" or "MISSED"
meets() { awk -v r="$1" -v m="$2" 'BEGIN { print (r != "-" && r + 0 >= m + 0) ? "met" : "MISSED" }'; }
# target MIN: append "target >= MINx: met|MISSED" to the note of the last result
target() {
	t_r=$(ratio "$LAST_MNT" "$LAST_SHM")
	sed -i "\$ s/\$/; target >= ${1}x: $(meets "$t_r" "$1")/" "$W/summary"
}
count() { awk -v x="$1" 'BEGIN { if (x >= 1e6) printf "%.1fM", x / 1e6; else if (x >= 1e3) printf "%.0fK", x / 1e3; else print x }'; }
mrows() { awk -v x="$1" 'BEGIN { if (x == "-") print "-"; else printf "%.3fM", x / 1e6 }'; }

# rowbench FILE RUN ARGS...: one run (run RUN draws its own ids, the same on
# the mount and on the baseline); prints its output line, fails on error.
# ARGS may override -n (a later -n wins).
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
	h0=$(stat_field cache.hits); m0=$(stat_field cache.misses)
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
	if [ -n "$h0" ]; then # rows the daemon's row cache was asked for, and hits among them
		h1=$(stat_field cache.hits); m1=$(stat_field cache.misses)
		[ $((h1 - h0 + m1 - m0)) -gt 0 ] && note="$note, row cache: $(count $((h1 - h0 + m1 - m0))) rows, hit $(pct $((h1 - h0)) $((h1 - h0 + m1 - m0)))"
	fi
	mmed=$(echo $mv | tr ' ' '\n' | median)
	smed=$ref
	spm="-"
	if [ "$with_shm" = 1 ]; then
		smed=$(echo $sv | tr ' ' '\n' | median)
		spm=$(echo $sp | tr ' ' '\n' | median)
	fi
	result "$sec" "$label" "$mmed" "$smed" "$(echo $mp | tr ' ' '\n' | median)" "$spm" "$note"
	LAST_SHM=$smed
	LAST_MNT=$mmed
}

# run_ab LABEL NAME_A FILE_A NAME_B FILE_B ARGS...: RUNS runs of rowbench
# ARGS on FILE_A and, interleaved, on FILE_B (none if FILE_B is "-").  Sets
# the medians A_MED A_P50 A_FS B_MED B_P50 B_FS (rows/s, p50 us, mean fsync
# ms; "-" if none), A_OPS (rows moved on A) and A_WINS (runs in which A
# moved more rows per second than the B run next to it).  Records no result.
run_ab() {
	label=$1; na=$2; fa=$3; nb=$4; fb=$5; shift 5
	av=""; ap=""; af=""; bv=""; bp=""; bf=""; A_OPS=0; A_WINS=0
	n=1
	while [ $n -le "$RUNS" ]; do
		o=$(rowbench "$fa" "$n" "$@") || exit 1
		av="$av $(field "$o" rows_per_s)"; ap="$ap $(field "$o" p50_us)"; af="$af $(field "$o" fsync_ms)"
		A_OPS=$((A_OPS + $(field "$o" ops)))
		line="  $label run $n/$RUNS: $na $(mrows "$(field "$o" rows_per_s)") p50 $(field "$o" p50_us)us p99 $(field "$o" p99_us)us"
		[ -n "$(field "$o" fsync_ms)" ] && line="$line fsync $(field "$o" fsync_ms)ms"
		if [ "$fb" != - ]; then
			ra=$(echo "$av" | awk '{ print $NF }')
			o=$(rowbench "$fb" "$n" "$@") || exit 1
			bv="$bv $(field "$o" rows_per_s)"; bp="$bp $(field "$o" p50_us)"; bf="$bf $(field "$o" fsync_ms)"
			A_WINS=$((A_WINS + $(awk -v a="$ra" -v b="$(field "$o" rows_per_s)" 'BEGIN { print (a + 0 > b + 0) }')))
			line="$line | $nb $(mrows "$(field "$o" rows_per_s)") p50 $(field "$o" p50_us)us p99 $(field "$o" p99_us)us"
			[ -n "$(field "$o" fsync_ms)" ] && line="$line fsync $(field "$o" fsync_ms)ms"
		fi
		say "$line"
		n=$((n + 1))
	done
	A_MED=$(med $av); A_P50=$(med $ap); A_FS=$(med $af)
	B_MED=$(med $bv); B_P50=$(med $bp); B_FS=$(med $bf)
}

# warm ROWS FILE: untimed O_DIRECT Zipf reads for WARM_SECS s (ids of their
# own seed), so that a row cache holds the hot rows before timed runs
warm() {
	"$ROWBENCH" -r "$ROW_SIZE" -n "$1" -d "$WARM_SECS" -s "$((SEED * 1000 + 999))" -o read -D "$2" >/dev/null ||
		fail "warm-up reads of $2"
}

# ---- sections ----

# setup: pool on /dev/shm, daemon, table filled with ROWS rows, baseline file
section_setup() {
	for p in "$EMBFS" "$MKFS" "$ROWBENCH" "$MISSRATE"; do
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
	mount_pool "$W/pool" "$MNT" "" 1 # the daemon's default row cache
	PID=$DPID
	[ "$(getfattr --only-values -n user.embfs.row_size "$MNT/$TABLE.emb" 2>/dev/null || echo "$ROW_SIZE")" = "$ROW_SIZE" ] ||
		fail "table row size is not $ROW_SIZE"
	cb=$(stat_field cache.budget_bytes)
	say "mounted $W/pool ($POOL_SIZE, media $(stat_field pool.media)) on $MNT, daemon pid $PID," \
		"row cache $([ -n "$cb" ] && echo "$((cb >> 20)) MiB" || echo none)"

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

# hit: the hit path.  Per-row pread of Zipf rows that are all in DRAM:
# (a) buffered: the kernel page cache answers (keep_cache), the daemon is not
# asked (rowio measured it: its row is copied here); (b) O_DIRECT: every
# pread is a FUSE round trip that the daemon's row cache answers.  Both
# against the /dev/shm file read through its page cache.
section_hit() {
	say ""
	budget=$(stat_field cache.budget_bytes)
	if [ -z "$budget" ]; then
		say "hit: the mount has no row cache; skipped"
		result hit "no row cache" - - - - "skipped"
		return
	fi
	say "hit: per-row pread of Zipf(0.99) rows over $ROWS, 1 thread, $RUNS x $SECS s; row cache $((budget >> 20)) MiB" \
		"(daemon default) = $((budget / ROW_COST)) rows: holds the hot set"
	# (a) is rowio's "read  1thr warm cache": copied, not run again
	pc=$(awk -F'\t' -v OFS='\t' '$1 == "rowio" && $2 == "read  1thr warm cache" { $1 = "hit"; $2 = "read 1thr page cache (kernel)";
		$7 = "= rowio read 1thr warm cache: the kernel answers, the daemon is not asked"; print; exit }' "$W/summary")
	if [ -n "$pc" ]; then
		printf '%s\n' "$pc" >>"$W/summary"
		LAST_MNT=$(echo "$pc" | cut -f3); LAST_SHM=$(echo "$pc" | cut -f4)
		target 0.5
		say "  page cache (kernel): see rowio read  1thr warm cache"
	fi
	ref=${SHM_READ_1:--}
	t=$(now)
	warm "$ROWS" "$MNT/$TABLE.emb"
	say "  warm-up: $WARM_SECS s of O_DIRECT Zipf reads (ids of another seed) fill the row cache: $(since "$t") s"
	run_set hit "read 1thr O_DIRECT (row cache)" 0 "$ref" -o read -t 1 -D
	target 0.5
}

# batch: a trainer's access, batch by batch (build/bench/gatherbench): B
# Zipf(0.99) ids per batch (duplicates kept), their rows read through
# .embfs/rows (one GATHER request + one read), with one pread per row on
# the mount, and with one pread per row on the /dev/shm file; RUNS runs
# interleaved, THREADS clients (own fds).  Then the same with the batch
# written back after each read (SCATTER / one pwrite per row).  The main
# mount's default row cache (1 GiB) holds the hot set.  Notes: FUSE requests
# per batch on .embfs/rows (from .embfs/stats), batched vs per-row pread on
# the mount, 2 threads vs 1.  Targets: batched >= 2x per-row pread on
# /dev/shm; 2 threads faster than 1.
section_batch() {
	gb=$BUILD/bench/gatherbench
	bsz=${BATCH_IDS:-4096}
	[ -x "$gb" ] || fail "$gb not built (run make)"
	[ -x "$BUILD/bench/embfs-test" ] || fail "$BUILD/bench/embfs-test not built (run make)"
	say ""
	say "batch: batches of $bsz Zipf(0.99) ids over $ROWS rows, $RUNS x $SECS s per configuration;" \
		"row cache $(($(stat_field cache.budget_bytes) >> 20)) MiB"
	for wr in 0 1; do
		if [ $wr = 0 ]; then kind=gather; wflag=""; else kind="gather+scatter"; wflag=-w; fi
		for t in $THREADS; do
			bv=""; pv=""; sv=""; bp=""; pp=""; sp=""; nb=0
			q0=$(stat_field batch.write_requests); d0=$(stat_field batch.read_requests)
			n=1
			while [ $n -le "$RUNS" ]; do
				seed=$((SEED * 1000 + n))
				line="  $kind ${t}thr run $n/$RUNS:"
				for m in batch mount shm; do
					case $m in
					batch) o=$("$gb" -m batch $wflag -t "$t" -b "$bsz" -n "$ROWS" -d "$SECS" -s "$seed" "$MNT/$TABLE.emb") ;;
					mount) o=$("$gb" -m pread $wflag -t "$t" -b "$bsz" -n "$ROWS" -d "$SECS" -s "$seed" "$MNT/$TABLE.emb") ;;
					shm) o=$("$gb" -m pread $wflag -t "$t" -b "$bsz" -n "$ROWS" -d "$SECS" -s "$seed" "$W/base.emb") ;;
					esac || fail "gatherbench $m $kind ${t}thr"
					echo "$o" >>"$W/runs.log"
					r=$(field "$o" rows_per_s); p=$(field "$o" p50_batch_us)
					case $m in
					batch) bv="$bv $r"; bp="$bp $p"; nb=$((nb + $(field "$o" batches))) ;;
					mount) pv="$pv $r"; pp="$pp $p" ;;
					shm) sv="$sv $r"; sp="$sp $p" ;;
					esac
					line="$line $m $(mrows "$r")"
				done
				say "$line"
				n=$((n + 1))
			done
			q1=$(stat_field batch.write_requests); d1=$(stat_field batch.read_requests)
			rt=$(awk -v w="$((q1 - q0))" -v r="$((d1 - d0))" -v n="$nb" \
				'BEGIN { if (n > 0) printf "%.2f WRITE + %.2f READ requests per batch", w / n, r / n; else print "-" }')
			bm=$(med $bv); pm=$(med $pv); sm=$(med $sv)
			eval "B_${wr}_$t=\$bm"
			vs1=""
			if [ "$t" != 1 ]; then
				eval "r1=\$(ratio \$bm \$B_${wr}_1)"
				vs1="; ${t}thr/1thr $r1 (target > 1: $(awk -v r="$r1" 'BEGIN { print (r != "-" && r + 0 > 1) ? "met" : "MISSED" }'))"
			fi
			result batch "$kind ${t}thr .embfs/rows" "$bm" "$sm" "$(med $bp)" "$(med $sp)" \
				"p50 per batch; $rt; vs pread on the mount $(ratio "$bm" "$pm")$vs1"
			LAST_MNT=$bm; LAST_SHM=$sm
			target 2
			result batch "$kind ${t}thr pread on mount" "$pm" "$sm" "$(med $pp)" "$(med $sp)" \
				"p50 per batch of $bsz; one FUSE round trip per row not in the page cache"
		done
	done
	# what a scatter costs when the kernel may cache the table's pages (docs/files.md
	# "Batched rows"): it first records what its rows held.  gatherbench -P
	# preads one row of the table per batch (so most scatters record), runs
	# interleaved with plain ones (the table not read: nothing recorded).
	# Columns: recording, plain.
	cv=""; pv=""; cp=""; pp=""; caps=0; scs=0
	n=1
	while [ $n -le "$RUNS" ]; do
		seed=$((SEED * 1000 + 100 + n))
		o=$("$gb" -m batch -w -t 1 -b "$bsz" -n "$ROWS" -d "$SECS" -s "$seed" "$MNT/$TABLE.emb") ||
			fail "gatherbench plain scatters"
		echo "$o" >>"$W/runs.log"
		pv="$pv $(field "$o" rows_per_s)"; pp="$pp $(field "$o" p50_batch_us)"
		c0=$(stat_field pagecache.capturing_scatters); s0=$(stat_field batch.scatters)
		o=$("$gb" -m batch -w -P -t 1 -b "$bsz" -n "$ROWS" -d "$SECS" -s "$seed" "$MNT/$TABLE.emb") ||
			fail "gatherbench recording scatters"
		echo "$o" >>"$W/runs.log"
		caps=$((caps + $(stat_field pagecache.capturing_scatters) - c0))
		scs=$((scs + $(stat_field batch.scatters) - s0))
		cv="$cv $(field "$o" rows_per_s)"; cp="$cp $(field "$o" p50_batch_us)"
		say "  gather+scatter 1thr run $n/$RUNS: plain $(mrows "${pv##* }") recording $(mrows "${cv##* }")"
		n=$((n + 1))
	done
	result batch "gather+scatter 1thr recording" "$(med $cv)" "$(med $pv)" "$(med $cp)" "$(med $pp)" \
		"scatters with the table read via pread (one row a batch): $(pct "$caps" "$scs") of them recorded its rows' bytes; base: not read, none recorded"
}

# py_ready SECTION: $PY imports python/embfs (and so numpy), or SECTION is
# reported skipped and py_ready fails
py_ready() {
	PYTHONPATH=$TOP/python "$PY" -c 'import embfs' 2>/dev/null && return 0
	say "$1: $PY cannot import numpy or embfs (tests/deps.sh installs python3-numpy); skipped"
	result "$1" "skipped" - - - - "no numpy for $PY"
	return 1
}

# dist: issue 16's sharded gather + scatter (embfs.dist over gloo on
# loopback) for W = 1, 2 and 4 ranks, one pool and mount per rank on
# /dev/shm; rows/s over all ranks, the share of time in all-to-all and in
# embfs; W = 1 also against embfs.torch.Embedding in the same run.
section_dist() {
	ensure_w
	say ""
	py_ready dist || return
	"$PY" -c 'import torch' 2>/dev/null || { say "dist: skipped (no torch for $PY)"; return; }
	room dist /dev/shm 2048 || return
	say "dist: ShardedEmbedding (dim 64 f32, SGD) forward + backward + step, 16384 ids per rank per iteration from 4 M rows, 20 iterations after 3 warm-up; W ranks on this machine's 2 cores"
	for w in 1 2 4; do
		ms=""; pids=""
		r=0
		while [ $r -lt $w ]; do
			"$MKFS" -f -s 384M "$W/dpool$r" >/dev/null || fail "mkfs.embfs dpool$r"
			mkdir -p "$W/dmnt$r"
			mount_pool "$W/dpool$r" "$W/dmnt$r" "cache_size=64M" 1
			pids="$pids $DPID"; ms="$ms,$W/dmnt$r"
			r=$((r + 1))
		done
		out=$(PYTHONPATH=$TOP/python "$PY" "$TOP/tests/bench/distbench.py" "${ms#,}" -s "$SEED") || { echo "$out"; fail "distbench W=$w"; }
		echo "$out" | sed 's/^/  /'
		r=0
		for p in $pids; do
			umount_pool "$p" "$W/dmnt$r"
			rm -f "$W/dpool$r"
			rmdir "$W/dmnt$r"
			r=$((r + 1))
		done
		line=$(echo "$out" | grep "^distbench world=")
		rps=$(echo "$line" | sed -n 's/.*rows_per_s=\([0-9]*\).*/\1/p')
		a2a=$(echo "$line" | sed -n 's/.*a2a_share=\([0-9.]*\).*/\1/p')
		emb=$(echo "$line" | sed -n 's/.*embfs_share=\([0-9.]*\).*/\1/p')
		loc=$(echo "$out" | sed -n 's/^distbench local rows_per_s=\([0-9]*\)/\1/p')
		say "  W=$w: $rps rows/s over all ranks, all-to-all $a2a of the time, embfs $emb${loc:+; unsharded embfs.torch.Embedding $loc rows/s}"
		result dist "W=$w ranks" - - - - "$rps rows/s; a2a $a2a, embfs $emb${loc:+; unsharded $loc rows/s}"
	done
}

# train: issue 27's trainer figure (see the header).  Each shape on a pool
# of its own on /dev/shm with a 1 GiB row cache; the embfs tables are
# populated first (torch's hold a value for every row from the start).
TRAIN_RUNS=${TRAIN_RUNS:-5}
TRAIN_STEPS=${TRAIN_STEPS:-10}
TRAIN_WARM=${TRAIN_WARM:-5}
TRAIN_LONG_STEPS=${TRAIN_LONG_STEPS:-250}
DLRM_STEPS=${DLRM_STEPS:-150}
DLRM_RUNS=${DLRM_RUNS:-3}
train_one() { # LABEL ARGS...: one trainbench on a fresh pool
	tl=$1; shift
	"$MKFS" -f -s 6G "$W/tpool" >/dev/null || fail "mkfs.embfs tpool"
	mkdir -p "$W/tmnt"
	mount_pool "$W/tpool" "$W/tmnt" "cache_size=1G" 1
	out=$(PYTHONPATH=$TOP/python "$PY" "$TOP/tests/bench/trainbench.py" "$W/tmnt" --populate --runs "$TRAIN_RUNS" \
		--steps "$TRAIN_STEPS" --warm "$TRAIN_WARM" --seed "$SEED" --daemon-pid "$DPID" "$@") ||
		{ echo "$out"; fail "trainbench $tl"; }
	umount_pool "$DPID" "$W/tmnt"
	rm -f "$W/tpool"
	echo "$out" | sed 's/^/  /'
	line=$(echo "$out" | grep '^trainbench ')
	e=$(field "$line" embfs_lookups_per_s); t=$(field "$line" torch_lookups_per_s); r=$(field "$line" ratio)
	cpu=$(echo "$out" | sed -n 's/^trainbench cpu //p')
	result train "$tl" "$e" "$t" - - "base = torch in DRAM; median of per-run ratios $r; target >= 1.0x: $(meets "$r" 1.0); CPU $cpu"
}
section_train() {
	ensure_w
	say ""
	py_ready train || return
	"$PY" -c 'import torch' 2>/dev/null || { say "train: skipped (no torch for $PY)"; return; }
	room train /dev/shm 8192 || return
	say "train: embfs.torch against torch.nn.EmbeddingBag(sparse=True) in DRAM, one process, alternating runs of $TRAIN_STEPS steps after $TRAIN_WARM warm-up, torch on one thread"
	train_one "1x4M x64 sgd" --tables 1 --rows 4194304 --dim 64 --bags 4096 --per-bag 4 --opt sgd
	train_one "1x4M x64 sgd, pipelined" --tables 1 --rows 4194304 --dim 64 --bags 4096 --per-bag 4 --opt sgd --pipeline
	# runs of TRAIN_LONG_STEPS (about 2.5 s each, a flusher round at the
	# default dirty_age_ms): each run pays its share of the write-back of
	# the rows it pushed, which runs of TRAIN_STEPS mostly miss (the last
	# --steps is the one trainbench takes)
	train_one "1x4M sgd pipelined, long runs" --tables 1 --rows 4194304 --dim 64 --bags 4096 --per-bag 4 --opt sgd \
		--pipeline --steps "$TRAIN_LONG_STEPS"
	train_one "1x4M x64 rowwise adagrad" --tables 1 --rows 4194304 --dim 64 --bags 4096 --per-bag 4 --opt adagrad
	train_one "1x4M x64 rw adagrad, pipelined" --tables 1 --rows 4194304 --dim 64 --bags 4096 --per-bag 4 --opt adagrad \
		--pipeline
	train_one "26x1M x16 sgd, modules" --tables 26 --rows 1048576 --dim 16 --bags 512 --per-bag 4 --opt sgd
	train_one "26x1M x16 sgd, Collection" --tables 26 --rows 1048576 --dim 16 --bags 512 --per-bag 4 --opt sgd --collection
	train_one "26x1M x16 sgd, Coll. pipelined" --tables 26 --rows 1048576 --dim 16 --bags 512 --per-bag 4 --opt sgd \
		--collection --pipeline
	# the DLRM example with a real BLAS
	if ! dpkg -s libopenblas0-pthread >/dev/null 2>&1; then
		say "  installing libopenblas0-pthread (apt) for the DLRM figure"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q libopenblas0-pthread >"$W/apt.log" 2>&1 ||
			say "  apt-get install libopenblas0-pthread failed (see $W/apt.log): torch keeps its BLAS"
	fi
	blas=$(update-alternatives --query libblas.so.3-x86_64-linux-gnu 2>/dev/null | sed -n 's/^Value: //p')
	# DLRM_RUNS rounds: the example on a fresh pool, then the same model and
	# data with the tables in DRAM (tests/bench/dlrmtorch.py), one table per
	# feature and fused; the ratios are the medians of the rounds' ratios.
	# One torch thread on both sides: torch.set_num_threads(1) does not reach
	# OpenBLAS's own threads (two on this machine, which ran the example's
	# matrix products 1.2x faster while the other core was idle).
	OPENBLAS_NUM_THREADS=1; export OPENBLAS_NUM_THREADS
	wls=""; cps=""; ios=""; rqs=""; rts=""; rfs=""; tws=""; fws=""
	k=1
	while [ $k -le "$DLRM_RUNS" ]; do
		"$MKFS" -f -s 2G "$W/tpool" >/dev/null || fail "mkfs.embfs tpool"
		mkdir -p "$W/tmnt"
		mount_pool "$W/tpool" "$W/tmnt" "" 1
		out=$(PYTHONPATH=$TOP/python "$PY" "$TOP/examples/dlrm.py" "$W/tmnt" --steps "$DLRM_STEPS" --every 0 --log 50 \
			--seed "$SEED") || { echo "$out"; fail "dlrm.py"; }
		umount_pool "$DPID" "$W/tmnt"
		rm -f "$W/tpool"
		[ $k = 1 ] && echo "$out" | grep -v '^step ' | sed 's/^/  /'
		pl=$(echo "$out" | grep '^per step')
		io=$(echo "$pl" | sed -n 's/.*embfs I\/O \([0-9.]*\) .*/\1/p')
		rq=$(echo "$pl" | sed -n 's/.*(\([0-9.]*\) FUSE requests.*/\1/p')
		cp=$(echo "$pl" | sed -n 's/.*torch compute \([0-9.]*\);.*/\1/p')
		wl=$(echo "$pl" | sed -n 's/.*whole step \([0-9.]*\);.*/\1/p')
		tl=$(PYTHONPATH=$TOP/python "$PY" "$TOP/tests/bench/dlrmtorch.py" --steps "$DLRM_STEPS" --seed "$SEED" |
			grep '^per step') || fail "dlrmtorch.py"
		fl=$(PYTHONPATH=$TOP/python "$PY" "$TOP/tests/bench/dlrmtorch.py" --steps "$DLRM_STEPS" --seed "$SEED" --fused |
			grep '^per step') || fail "dlrmtorch.py --fused"
		tw=$(echo "$tl" | sed -n 's/.*whole step \([0-9.]*\)$/\1/p'); fw=$(echo "$fl" | sed -n 's/.*whole step \([0-9.]*\)$/\1/p')
		[ -n "$tw" ] && [ -n "$fw" ] || fail "dlrmtorch.py printed no step time"
		say "  DLRM round $k: embfs whole step $wl ms (torch compute $cp, I/O $io, $rq requests a step); tables in DRAM:" \
			"one per feature $tw ms (compute $(echo "$tl" | sed -n 's/.*torch compute \([0-9.]*\);.*/\1/p')), fused $fw ms" \
			"(compute $(echo "$fl" | sed -n 's/.*torch compute \([0-9.]*\);.*/\1/p'))"
		wls="$wls $wl"; cps="$cps $cp"; ios="$ios $io"; rqs="$rqs $rq"; tws="$tws $tw"; fws="$fws $fw"
		rts="$rts $(ratio "$wl" "$tw")"; rfs="$rfs $(ratio "$wl" "$fw")"
		k=$((k + 1))
	done
	wl=$(med $wls); cp=$(med $cps); io=$(med $ios); rq=$(med $rqs)
	r=$(ratio "$wl" "$cp")
	ok=$(awk -v r="$r" -v q="$rq" 'BEGIN { print (r != "-" && r + 0 <= 1.1 && q + 0 <= 4) ? "met" : "MISSED" }')
	say "  DLRM ($blas): whole step $wl ms, torch compute $cp ms (x$r), embfs I/O $io ms, $rq FUSE requests a step (medians of $DLRM_RUNS)"
	say "  ... against the tables in DRAM: one per feature $(med $tws) ms (x$(med $rts)), fused $(med $fws) ms (x$(med $rfs))"
	unset OPENBLAS_NUM_THREADS
	result train "DLRM step / compute" - - - - "x$r ($wl / $cp ms), I/O $io ms, $rq requests a step, BLAS ${blas:+$(basename "$(dirname "$blas")")/${blas##*/}}; target <= 1.1x, <= 4: $ok"
	result train "DLRM step / tables in DRAM" - - - - "x$(med $rts) against one torch.nn.EmbeddingBag per feature ($(med $tws) ms), x$(med $rfs) against one fused ($(med $fws) ms); same data, model and seed (tests/bench/dlrmtorch.py); medians of $DLRM_RUNS rounds"
}

# restore: issue 14's restore in place (.embfs/restore) of a table of ROWS
# rows of ROW_SIZE bytes where 1% changed since the snapshot, against
# copying the whole table through the mount with dd bs=1M (target <= 5%),
# on a pool of its own on /dev/shm (PMEM_IS_PMEM_FORCE=1, as the main one).
section_restore() {
	ensure_w
	say ""
	py_ready restore || return
	need=$((ROWS * ROW_SIZE / 1048576 * 4 + 1024))
	room restore /dev/shm $need || return
	"$MKFS" -f -s $((need - 512))M "$W/rspool" >/dev/null || fail "mkfs.embfs rspool"
	mkdir -p "$W/rsmnt"
	mount_pool "$W/rspool" "$W/rsmnt" "" 1
	rspid=$DPID
	say "restore: in place, 1% of $ROWS rows of $ROW_SIZE B changed since the snapshot, vs dd bs=1M of the table into another on the mount ($RUNS runs each)"
	out=$(PYTHONPATH=$TOP/python "$PY" "$TOP/tests/bench/restorebench.py" "$W/rsmnt" -n "$ROWS" \
		-d $((ROW_SIZE / 4)) -p 1 -r "$RUNS" -s "$SEED") || { echo "$out"; fail "restorebench"; }
	echo "$out" | sed 's/^/  /'
	umount_pool "$rspid" "$W/rsmnt"
	rm -f "$W/rspool"
	dline=$(echo "$out" | grep "restorebench delta:")
	dtime=$(echo "$dline" | sed -n 's/.* time \([0-9.]*\) .*/\1/p')
	dbytes=$(echo "$dline" | sed -n 's/.* bytes \([0-9.]*\)$/\1/p')
	dmet=$(awk -v t="$dtime" -v b="$dbytes" 'BEGIN { print (t <= 0.05 && b <= 0.05) ? "met" : "MISSED" }')
	say "  delta export (1% changed) / dd copy: time $dtime, bytes $dbytes (target <= 0.05 both: $dmet)"
	result restore "delta of 1% changed" - - - - "export_delta: time $dtime, bytes $dbytes of a dd copy (<= 0.05: $dmet)"
	fline=$(echo "$out" | grep "restorebench delta files:")
	ftime=$(echo "$fline" | sed -n 's/.*: time \([0-9.]*\) .*/\1/p')
	fread=$(echo "$fline" | sed -n 's/.* read bytes \([0-9.]*\) .*/\1/p')
	fcopy=$(echo "$fline" | sed -n 's/.* copy bytes \([0-9.]*\)$/\1/p')
	fmet=$(awk -v t="$ftime" -v b="$fread" 'BEGIN { print (t <= 0.05 && b <= 0.05) ? "met" : "MISSED" }')
	say "  delta as files, cp -r --sparse=always / dd copy: time $ftime, bytes read $fread, bytes the copy takes $fcopy (target <= 0.05 time and bytes read: $fmet)"
	result restore "delta files, 1% changed" - - - - "cp --sparse=always: time $ftime, read $fread, copy takes $fcopy of a dd copy (<= 0.05: $fmet)"
	cline=$(echo "$out" | grep "restorebench cp out of a snapshot:")
	say "  cp out of a snapshot / dd copy: $(echo "$cline" | sed -n 's/.*: \([0-9.]*\)$/\1/p') ($(echo "$cline" | sed 's/restorebench cp out of a snapshot: //'))"
	line=$(echo "$out" | tail -1)
	ratio=$(echo "$line" | sed -n 's/.*ratio=\([0-9.]*\).*/\1/p')
	met=$(awk -v r="$ratio" 'BEGIN { print (r <= 0.05) ? "met" : "MISSED" }')
	say "  restore in place / dd copy = $ratio (target <= 0.05: $met)"
	result restore "1% of $ROWS rows changed" - - - - \
		"restore $(echo "$line" | sed -n 's/.*restore_ms=\([0-9]*\).*/\1/p') ms, dd copy $(echo "$line" | sed -n 's/.*dd_ms=\([0-9]*\).*/\1/p') ms: $ratio (<= 0.05: $met)"
}

# pybatch: the Python package (python/embfs) against the C client on the
# same batches.  gatherbench -m batch and tests/bench/pybench.py (Python
# threads, Table.gather(ids, out=buffer), with -w one byte of each row
# changed and Table.scatter) draw the same ids for the same seed and thread
# (checked here first: gatherbench -I and pybench.py -I print each
# thread's first ids and a digest of its 2^20); per configuration PY_RUNS
# runs of PY_SECS s of each, alternately (which goes first alternates).
# Uses the main mount when setup ran, else a pool of its own with ROWS rows
# from /dev/urandom.  FUSE requests per batch include pybench's one 1-id
# gather per thread before the clock (it opens the thread's fd).
section_pybatch() {
	gb=$BUILD/bench/gatherbench
	pb=$TOP/tests/bench/pybench.py
	bsz=${BATCH_IDS:-4096}
	[ -x "$gb" ] || fail "$gb not built (run make)"
	ensure_w
	say ""
	py_ready pybatch || return
	pyown=0
	if [ -n "$PID" ] && is_mounted "$MNT"; then
		pm=$MNT
	else
		[ -c /dev/fuse ] || skip "no /dev/fuse"
		pyown=1
		room pybatch /dev/shm $((ROWS * ROW_SIZE / 1048576 * 2 + 512)) || return
		"$MKFS" -f -s "$POOL_SIZE" -t "$TABLE:64:f32" "$W/pypool" >/dev/null || fail "mkfs.embfs pypool"
		mkdir -p "$W/pymnt"
		pm=$W/pymnt
		mount_pool "$W/pypool" "$pm" "" 1
		pypid=$DPID
		t=$(now)
		head -c $((ROWS * ROW_SIZE)) /dev/urandom |
			dd of="$pm/$TABLE.emb" bs=1M iflag=fullblock conv=notrunc,fsync status=none || fail "populate (pybatch)"
		[ "$(stat_of "$pm" rows)" = "$ROWS" ] || fail "pybatch pool holds $(stat_of "$pm" rows) rows, want $ROWS"
		say "pybatch: a pool of its own on $pm: $ROWS rows from /dev/urandom by dd bs=1M + fsync ($(since "$t") s)"
	fi
	tf=$pm/$TABLE.emb
	say "pybatch: python/embfs vs gatherbench -m batch, batches of $bsz Zipf(0.99) ids over $ROWS rows," \
		"$PY_RUNS x $PY_SECS s per configuration and side; row cache $(($(stat_of "$pm" cache.budget_bytes || echo 0) >> 20)) MiB;" \
		"$("$PY" -c 'import sys, numpy; print("python", sys.version.split()[0], "numpy", numpy.__version__)')"
	pyb() { PYTHONPATH=$TOP/python "$PY" "$pb" "$@"; }
	tmax=$(echo $THREADS | tr ' ' '\n' | sort -n | tail -1)
	t=$(now)
	n=1
	while [ $n -le "$PY_RUNS" ]; do
		seed=$((SEED * 1000 + n))
		a=$("$gb" -I -t "$tmax" -b "$bsz" -n "$ROWS" -s "$seed" "$tf") || fail "gatherbench -I"
		b=$(pyb -I -t "$tmax" -b "$bsz" -n "$ROWS" -s "$seed" "$tf") || fail "pybench.py -I"
		[ "$a" = "$b" ] || fail "pybench.py draws other ids than gatherbench (seed $seed):
$a
$b"
		echo "$b" >>"$W/runs.log"
		n=$((n + 1))
	done
	say "  ids: gatherbench -I and pybench.py -I agree (first ids, digest of 2^20) for seeds" \
		"$((SEED * 1000 + 1))..$((SEED * 1000 + PY_RUNS)), threads 0..$((tmax - 1)) ($(since "$t") s)"
	allmet=met
	for wr in 0 1; do
		if [ $wr = 0 ]; then kind=gather; wflag=""; else kind="gather+scatter"; wflag=-w; fi
		for t in $THREADS; do
			cv=""; pv=""; cp=""; pp=""; rv=""; cb=0; pyb_n=0; cq=0; pq=0
			n=1
			while [ $n -le "$PY_RUNS" ]; do
				seed=$((SEED * 1000 + n))
				line="  $kind ${t}thr run $n/$PY_RUNS:"
				for side in $( [ $((n % 2)) = 1 ] && echo "c py" || echo "py c"); do
					q0=$(stat_of "$pm" batch.write_requests); d0=$(stat_of "$pm" batch.read_requests)
					case $side in
					c) o=$("$gb" -m batch $wflag -t "$t" -b "$bsz" -n "$ROWS" -d "$PY_SECS" -s "$seed" "$tf") ||
						fail "gatherbench $kind ${t}thr" ;;
					py) o=$(pyb $wflag -t "$t" -b "$bsz" -n "$ROWS" -d "$PY_SECS" -s "$seed" "$tf") ||
						fail "pybench.py $kind ${t}thr" ;;
					esac
					q1=$(stat_of "$pm" batch.write_requests); d1=$(stat_of "$pm" batch.read_requests)
					echo "$o" >>"$W/runs.log"
					r=$(field "$o" rows_per_s); p=$(field "$o" p50_batch_us)
					line="$line $([ $side = c ] && echo C || echo python) $(mrows "$r") p50 ${p}us p99 $(field "$o" p99_batch_us)us;"
					if [ $side = c ]; then
						cv="$cv $r"; cp="$cp $p"; rc=$r
						cb=$((cb + $(field "$o" batches))); cq=$((cq + q1 - q0 + d1 - d0))
					else
						pv="$pv $r"; pp="$pp $p"; rp=$r
						pyb_n=$((pyb_n + $(field "$o" batches))); pq=$((pq + q1 - q0 + d1 - d0))
					fi
				done
				rv="$rv $(ratio "$rp" "$rc")"
				say "$line python/C $(ratio "$rp" "$rc")"
				n=$((n + 1))
			done
			cm=$(med $cv); pym=$(med $pv); rm_=$(ratio "$pym" "$cm")
			rq=$(awk -v a="$pq" -v na="$pyb_n" -v b="$cq" -v nb="$cb" \
				'BEGIN { if (na > 0 && nb > 0) printf "FUSE requests per batch python %.2f, C %.2f", a / na, b / nb; else print "-" }')
			result pybatch "$kind ${t}thr python/C" "$pym" "$cm" "$(med $pp)" "$(med $cp)" \
				"base = gatherbench -m batch (C), same batches; per-run ratios$(echo "$rv" | tr -s ' ' ' '); $rq"
			LAST_MNT=$pym; LAST_SHM=$cm
			target 0.7
			mt=$(meets "$rm_" 0.7)
			[ "$mt" = met ] || allmet=MISSED
			say "  $kind ${t}thr: python $(mrows "$pym") C $(mrows "$cm") rows/s (medians), python/C $rm_; target >= 0.7x: $mt"
		done
	done
	say "  pybatch target >= 0.7x: $allmet"
	if [ $pyown = 1 ]; then
		umount_pool "$pypid" "$pm"
		rm -f "$W/pypool"
		rmdir "$pm"
	fi
}

# mount_minfuse MNT: build/bench/minfuse -f on MNT (in the background) with
# a table of ROWS rows of ROW_SIZE bytes, which it fills in DRAM before it
# mounts; wait (bounded: 2 min, the fill included) until MNT is mounted and
# answers.  Sets DPID.
mount_minfuse() {
	"$BUILD/bench/minfuse" -f -o "rows=$ROWS,row_size=$ROW_SIZE" "$1" >>"$W/daemon.log" 2>&1 &
	DPID=$!
	DAEMONS="$DAEMONS $DPID:$1"
	i=0
	until is_mounted "$1"; do
		kill -0 "$DPID" 2>/dev/null || fail "minfuse exited before mounting $1"
		i=$((i + 1))
		[ $i -gt 6000 ] && fail "minfuse: mount of $1 not ready after 2 min"
		sleep 0.02
	done
	[ "$(stat -c %s "$1/t.emb")" = $((ROWS * ROW_SIZE)) ] || fail "minfuse mount $1 does not answer"
}

# mem_avail_mb: the memory the kernel says is available, in MiB
mem_avail_mb() { awk '$1 == "MemAvailable:" { print int($2 / 1024) }' /proc/meminfo; }

# cpu_ticks PID: user + system time of the process so far, in clock ticks
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

# gathermin (issue 27, item 4): the batched gather against a floor of our
# own.  build/bench/minfuse (tests/bench/minfuse.c) is a minimal FUSE server
# (libfuse3 low-level, 2 worker threads) that answers .embfs/rows GATHERs of
# one table from a DRAM array: per request the rows copied into the fd's
# response buffer and one reply, nothing else; its table on huge pages
# (MADV_HUGEPAGE), as embfs's row cache is.  embfs on a pool of its own
# on /dev/shm (PMEM_IS_PMEM_FORCE=1, default row cache), one table of ROWS
# rows of ROW_SIZE B populated as setup does (dd bs=1M + fsync, bytes from
# /dev/urandom); minfuse with a table of the same geometry.  gatherbench -m
# batch, 1 client, BATCH_IDS (4096) Zipf(0.99) ids per batch, the same ids
# on both sides of a pair (seed SEED*1000+pair), GM_PAIRS pairs of SECS s
# runs, which side goes first alternating; an untimed WARM_SECS run on each
# first (ids of another seed).  Summary: mount = embfs, base = minfuse,
# ratio embfs/minfuse of the medians, target >= 0.8x; the note gives the
# per-pair ratios, FUSE requests per batch on embfs and each daemon's CPU
# time per batch.
section_gathermin() {
	gb=$BUILD/bench/gatherbench
	bsz=${BATCH_IDS:-4096}
	[ -x "$gb" ] || fail "$gb not built (run make)"
	[ -x "$BUILD/bench/minfuse" ] || fail "$BUILD/bench/minfuse not built (run make)"
	[ -x "$EMBFS" ] && [ -x "$MKFS" ] || fail "$EMBFS or $MKFS not built (run make)"
	[ -c /dev/fuse ] || skip "no /dev/fuse"
	command -v fusermount3 >/dev/null || skip "no fusermount3"
	ensure_w
	say ""
	room gathermin /dev/shm $((ROWS * ROW_SIZE / 1048576 * 2 + 512)) || return
	avail_mb=$(mem_avail_mb)
	if [ "${avail_mb:-0}" -lt $((ROWS * ROW_SIZE / 1048576 * 3 + 1024)) ]; then
		say "  gathermin: $avail_mb MiB of memory available, need ~$((ROWS * ROW_SIZE / 1048576 * 3 + 1024)) (pool, row cache, minfuse's table); skipped"
		result gathermin "skipped" - - - - "not enough memory"
		return
	fi
	"$MKFS" -f -s "$POOL_SIZE" -t "$TABLE:64:f32" "$W/gmpool" >/dev/null || fail "mkfs.embfs gmpool"
	GM=$W/gmmnt; MM=$W/minmnt
	mkdir -p "$GM" "$MM"
	mount_pool "$W/gmpool" "$GM" "" 1
	gmpid=$DPID
	t=$(now)
	head -c $((ROWS * ROW_SIZE)) /dev/urandom |
		dd of="$GM/$TABLE.emb" bs=1M iflag=fullblock conv=notrunc,fsync status=none || fail "populate (gathermin)"
	[ "$(stat_of "$GM" rows)" = "$ROWS" ] || fail "gathermin pool holds $(stat_of "$GM" rows) rows, want $ROWS"
	say "gathermin: a pool of its own on $GM: $ROWS rows of $ROW_SIZE B from /dev/urandom by dd bs=1M + fsync ($(since "$t") s);" \
		"row cache $(($(stat_of "$GM" cache.budget_bytes || echo 0) >> 20)) MiB"
	t=$(now)
	mount_minfuse "$MM"
	mpid=$DPID
	say "  minfuse (pid $mpid) on $MM: t.emb, $ROWS rows of $ROW_SIZE B generated in DRAM, mounted in $(since "$t") s"
	say "  batches of $bsz Zipf(0.99) ids over $ROWS rows, 1 client, $GM_PAIRS pairs of $SECS s runs (embfs, minfuse), alternately"
	for side in embfs minfuse; do
		f=$GM/$TABLE.emb; [ $side = minfuse ] && f=$MM/t.emb
		"$gb" -m batch -t 1 -b "$bsz" -r "$ROW_SIZE" -n "$ROWS" -d "$WARM_SECS" -s "$((SEED * 1000 + 999))" "$f" >/dev/null ||
			fail "gatherbench warm-up ($side)"
	done
	hz=$(getconf CLK_TCK)
	ev=""; mv=""; ep=""; mp=""; rv=""; eb=0; mb=0; eq=0; ec=0; mc=0
	n=1
	while [ $n -le "$GM_PAIRS" ]; do
		seed=$((SEED * 1000 + n))
		line="  gather 1thr pair $n/$GM_PAIRS:"
		for side in $( [ $((n % 2)) = 1 ] && echo "embfs minfuse" || echo "minfuse embfs"); do
			if [ $side = embfs ]; then f=$GM/$TABLE.emb; p=$gmpid; else f=$MM/t.emb; p=$mpid; fi
			q0=$(stat_of "$GM" batch.write_requests); d0=$(stat_of "$GM" batch.read_requests)
			c0=$(cpu_ticks "$p")
			o=$("$gb" -m batch -t 1 -b "$bsz" -r "$ROW_SIZE" -n "$ROWS" -d "$SECS" -s "$seed" "$f") ||
				fail "gatherbench ($side)"
			c1=$(cpu_ticks "$p")
			q1=$(stat_of "$GM" batch.write_requests); d1=$(stat_of "$GM" batch.read_requests)
			echo "gathermin $side: $o daemon_ticks=$((c1 - c0))" >>"$W/runs.log"
			r=$(field "$o" rows_per_s); pb=$(field "$o" p50_batch_us); nb=$(field "$o" batches)
			if [ $side = embfs ]; then
				ev="$ev $r"; ep="$ep $pb"; re=$r; eb=$((eb + nb)); eq=$((eq + q1 - q0 + d1 - d0)); ec=$((ec + c1 - c0))
			else
				mv="$mv $r"; mp="$mp $pb"; rm_=$r; mb=$((mb + nb)); mc=$((mc + c1 - c0))
			fi
			line="$line $side $(mrows "$r") p50 ${pb}us p99 $(field "$o" p99_batch_us)us;"
		done
		rv="$rv $(ratio "$re" "$rm_")"
		say "$line embfs/minfuse $(ratio "$re" "$rm_")"
		n=$((n + 1))
	done
	em=$(med $ev); mm=$(med $mv); r=$(ratio "$em" "$mm")
	# each daemon's CPU time per batch (us), and embfs's FUSE requests per batch
	cpu=$(awk -v a="$ec" -v na="$eb" -v b="$mc" -v nb="$mb" -v hz="$hz" \
		'BEGIN { if (na > 0 && nb > 0) printf "daemon CPU per batch embfs %.0fus, minfuse %.0fus", a * 1e6 / hz / na, b * 1e6 / hz / nb; else print "-" }')
	rq=$(awk -v q="$eq" -v n="$eb" 'BEGIN { if (n > 0) printf "%.2f", q / n; else print "-" }')
	say "  gather 1thr: embfs $(mrows "$em") minfuse $(mrows "$mm") rows/s (medians), embfs/minfuse $r" \
		"(median of the pairs' ratios $(med $rv)); $cpu; target >= 0.8x: $(meets "$r" 0.8)"
	result gathermin "gather 1thr embfs/minfuse" "$em" "$mm" "$(med $ep)" "$(med $mp)" \
		"base = minfuse (tests/bench/minfuse.c), same batches of $bsz; medians of $GM_PAIRS pairs, their ratios$(echo "$rv" | tr -s ' ' ' '); FUSE requests per batch on embfs $rq; $cpu"
	LAST_MNT=$em; LAST_SHM=$mm
	target 0.8
	umount_pool "$mpid" "$MM"
	umount_pool "$gmpid" "$GM"
	rm -f "$W/gmpool"
	rmdir "$GM" "$MM"
}

# teardown: clean unmount (flushes everything), timed
# snap: snapshot costs on the populated table.  A training-like loop (a
# Zipf batch of 4096 rows read with pread, changed, written back with
# pwrite) with a snapshot every SNAP_EVERY batches against none, runs
# interleaved; mkdir latency; pool space held per row changed since.
# room SECTION DIR MB: DIR has MB MiB free; else say so, record SECTION as
# skipped and return 1
room() {
	avail_mb=$(df -Pm "$2" | awk 'NR == 2 { print $4 }')
	[ "${avail_mb:-0}" -ge "$3" ] && return 0
	say "  $2 has $avail_mb MiB free, need ~$3; skipped"
	result "$1" "skipped" - - - - "no room in $2"
	return 1
}

# train_pairs MNT TABLE ROWS TAG: RUNS pairs of `snapbench train` on
# MNT/TABLE, with a snapshot every SNAP_EVERY batches and without (which
# goes first alternates: the first run of a pair warms caches); sets tn and
# ts to the lists of rows/s without and with snapshots
train_pairs() {
	tn=""; ts=""
	for r in $(seq 1 "$RUNS"); do
		for e in $( [ $((r % 2)) = 1 ] && echo "0 $SNAP_EVERY" || echo "$SNAP_EVERY 0"); do
			o=$("$SB" train "$1" "$2" "$3" "$SNAP_BATCHES" "$e" "$r") || fail "snapbench train ($4)"
			echo "$4 every $e: $o" >>"$W/runs.log"
			if [ "$e" = 0 ]; then
				tn="$tn $(echo "$o" | awk '{ print $3 }')"
			else
				ts="$ts $(echo "$o" | awk '{ print $3 }')"
			fi
		done
		say "  run $r: none $(echo "$tn" | awk '{ print $NF }') rows/s, with snapshots $(echo "$ts" | awk '{ print $NF }') rows/s ($o)"
	done
}

section_snap() {
	SB="$BUILD/bench/snapbench"
	[ -x "$SB" ] || fail "$SB not built"
	say ""
	say "snap: training loop, $SNAP_BATCHES batches of 4096 Zipf rows (pread + pwrite each), snapshot every $SNAP_EVERY batches vs none"
	train_pairs "$MNT" "$TABLE.emb" "$ROWS" snap
	mn=$(med $tn); ms=$(med $ts)
	ov=$(awk -v a="$ms" -v b="$mn" 'BEGIN { printf "%.1f", 100 * (1 - a / b) }')
	result snap "train 1thr, snapshot every $SNAP_EVERY batches" "$ms" "$mn" - - "base = no snapshots; throughput overhead ${ov}% (target < 3%)"
	lat=$("$SB" mkdir "$MNT" 9) || fail "snapbench mkdir"
	say "  mkdir with $ROWS rows stored: $lat"
	result snap "mkdir latency, $ROWS rows" - - - - "$lat"
	for k in 1000 10000 100000; do
		o=$("$SB" space "$MNT" "$TABLE.emb" "$ROWS" "$k") || fail "snapbench space"
		say "  $o"
		result snap "space held after $k rows changed" - - - - "$(echo "$o" | cut -d' ' -f2-)"
	done
}

# snapscale: mkdir latency with 1M and then SNAP_BIG_ROWS stored rows, on a
# pool of its own (O(1) in table size: it must not grow with the rows)
section_snapscale() {
	SB="$BUILD/bench/snapbench"
	say ""
	big_mb=$((SNAP_BIG_ROWS * 330 / 1048576 + 512))
	avail_mb=$(df -Pm /dev/shm | awk 'NR == 2 { print $4 }')
	if [ "${avail_mb:-0}" -lt "$big_mb" ]; then
		say "snapscale: skipped, /dev/shm has ${avail_mb} MiB free, need ~$big_mb"
		return 0
	fi
	"$MKFS" -f -s "${big_mb}M" "$W/snappool" >/dev/null || fail "mkfs.embfs snappool"
	mkdir -p "$W/snapmnt"
	mount_pool "$W/snappool" "$W/snapmnt" "" 1
	spid=$DPID
	dd if=/dev/urandom of="$W/snapmnt/t.emb" bs=1M count=$((1000000 * 256 / 1048576)) conv=fsync status=none || fail "populate 1M"
	l1=$("$SB" mkdir "$W/snapmnt" 25) || fail "snapbench mkdir"
	say "snapscale: mkdir with $(stat_of "$W/snapmnt" rows) rows: $l1"
	result snap "mkdir latency, $(stat_of "$W/snapmnt" rows) rows" - - - - "$l1"
	t=$(now)
	dd if=/dev/zero bs=1M count=$(((SNAP_BIG_ROWS - 1000000) * 256 / 1048576)) status=none |
		tr '\0' 'x' | dd of="$W/snapmnt/t.emb" bs=1M oflag=append conv=notrunc,fsync status=none || fail "populate big"
	l8=$("$SB" mkdir "$W/snapmnt" 25) || fail "snapbench mkdir"
	say "snapscale: mkdir with $(stat_of "$W/snapmnt" rows) rows: $l8 (populated in $(since "$t") s)"
	result snap "mkdir latency, $(stat_of "$W/snapmnt" rows) rows" - - - - "$l8"
	umount_pool "$spid" "$W/snapmnt"
	rm -f "$W/snappool"
}

# snapwb: snapshots against the store's persistence (issue 17), on a pool
# file on the root disk (DISK_DIR, barriers are msyncs) and on /dev/shm
# (PMEM_IS_PMEM_FORCE=1), each with the default row cache (SNAPWB_MEDIA
# picks one or both):
#  - mkdir latency while SNAPWB_ROWS dirty rows are written back: on a fresh
#    pool, dd them into a table (no fsync), start `sync` of it (the row
#    cache's write-back, as its flusher runs it) and take SNAPWB_N snapshots
#    SNAPWB_GAP_MS apart meanwhile; RUNS times; p50 and p99 per run.  The
#    snapshots are not dropped between runs (a fresh pool each time): a drop
#    walks every table's index under the commit lock, ~1.2 s with 2 M rows
#    stored; the last run times the drop of one
#  - the training loop (snapbench train, as section snap) on a table of
#    SNAPWB_TRAIN_ROWS rows with a snapshot every SNAP_EVERY batches vs none,
#    SNAPWB_TRAIN_RUNS interleaved pairs
SWB_POOL=""

# snapwb_mount MEDIA DIR PMEM: a fresh pool in DIR, mounted at $W/snapwbmnt
# (sets SWB_POOL, SWB_PID)
snapwb_mount() {
	SWB_POOL=$(mktemp "$2/embfs-snapwb.XXXXXX") || fail "mktemp in $2"
	mkdir -p "$W/snapwbmnt"
	if [ "$3" = 1 ]; then
		"$MKFS" -f -s "$SNAPWB_POOL_SIZE" "$SWB_POOL" >/dev/null || fail "mkfs.embfs $SWB_POOL"
	else
		env -u PMEM_IS_PMEM_FORCE "$MKFS" -f -s "$SNAPWB_POOL_SIZE" "$SWB_POOL" >/dev/null || fail "mkfs.embfs $SWB_POOL"
	fi
	mount_pool "$SWB_POOL" "$W/snapwbmnt" "" "$3"
	SWB_PID=$DPID
}

snapwb_unmount() {
	umount_pool "$SWB_PID" "$W/snapwbmnt"
	rm -f "$SWB_POOL"
	SWB_POOL=""
}

snapwb_one() {
	media=$1; dir=$2; pm=$3
	SB="$BUILD/bench/snapbench"
	m="$W/snapwbmnt"
	need_mb=$(($(numfmt --from=iec "$SNAPWB_POOL_SIZE") / 1048576 + 256))
	avail_mb=$(df -Pm "$dir" | awk 'NR == 2 { print $4 }')
	if [ "${avail_mb:-0}" -lt "$need_mb" ]; then
		say "  $media: $dir has $avail_mb MiB free, need ~$need_mb; skipped"
		result snapwb "$media: skipped" - - - - "no room in $dir"
		return
	fi

	p50s=""; p99s=""; wbs=""; worst=0
	for r in $(seq 1 "$RUNS"); do
		snapwb_mount "$media" "$dir" "$pm"
		dd if=/dev/zero bs=1M count=$((SNAPWB_ROWS * ROW_SIZE / 1048576)) status=none |
			dd of="$m/wb.emb" bs=1M iflag=fullblock status=none || fail "write wb.emb"
		d0=$(stat_of "$m" cache.dirty); w0=$(stat_of "$m" cache.writebacks)
		t=$(now)
		sync "$m/wb.emb" &
		spid=$!
		o=$("$SB" mkdir "$m" "$SNAPWB_N" "$SNAPWB_GAP_MS" keep) || { wait $spid; fail "snapbench mkdir"; }
		wait $spid || fail "sync wb.emb"
		wb=$(since "$t")
		w1=$(stat_of "$m" cache.writebacks)
		echo "snapwb $media run $r: dirty $d0 written back $((w1 - w0)) in $wb s; $o" >>"$W/runs.log"
		p50=$(echo "$o" | awk '{ print $3 }'); p99=$(echo "$o" | awk '{ print $5 }')
		p50s="$p50s $p50"; p99s="$p99s $p99"; wbs="$wbs $wb"
		[ "$p99" -gt "$worst" ] && worst=$p99
		say "  $media ($(stat_of "$m" pool.media)) write-back run $r: $d0 of $(stat_of "$m" rows) rows dirty, written back in $wb s; $o"
		if [ "$r" = "$RUNS" ]; then
			t=$(now)
			rmdir "$(ls -d "$m"/.snapshots/bench-* | head -1)" || fail "rmdir of a snapshot"
			rm1=$(since "$t")
			say "  $media: rmdir of one of them: $rm1 s"
		fi
		snapwb_unmount
	done
	p99=$(med $p99s)
	result snapwb "$media: mkdir during write-back" - - "$(med $p50s)" - \
		"p50 above; p99 $(med $p99s)us (median of $RUNS runs of $SNAPWB_N, worst ${worst}us) while $(count "$SNAPWB_ROWS") rows were written back (the sync) in $(med $wbs) s; rmdir of one after: $rm1 s; target p99 <= 2000us: $(awk -v p="$p99" 'BEGIN { print p <= 2000 ? "met" : "MISSED" }')"

	snapwb_mount "$media" "$dir" "$pm"
	t=$(now)
	dd if=/dev/zero bs=1M count=$((SNAPWB_TRAIN_ROWS * ROW_SIZE / 1048576)) status=none |
		dd of="$m/train.emb" bs=1M iflag=fullblock conv=fsync status=none || fail "populate train.emb"
	say "  $media: train.emb $(stat_of "$m" rows) rows, populated and fsynced in $(since "$t") s"
	tn=""; ts=""; fr=""; rs=""
	for r in $(seq 1 "$SNAPWB_TRAIN_RUNS"); do
		for e in $( [ $((r % 2)) = 1 ] && echo "0 $SNAP_EVERY" || echo "$SNAP_EVERY 0"); do
			# each run from a clean cache: the last one's dirty rows
			# (and its snapshots' drops) are not the next one's cost
			sync "$m/train.emb" || fail "sync train.emb"
			o=$("$SB" train "$m" train.emb "$SNAPWB_TRAIN_ROWS" "$SNAP_BATCHES" "$e" "$r") || fail "snapbench train"
			echo "snapwb $media every $e: $o" >>"$W/runs.log"
			if [ "$e" = 0 ]; then
				n0=$(echo "$o" | awk '{ print $3 }'); tn="$tn $n0"
			else
				n1=$(echo "$o" | awk '{ print $3 }'); ts="$ts $n1"
				# the mkdirs' own share of the run's time
				fr="$fr $(echo "$o" | awk '{ printf "%.3f", 100 * $9 / 1000 / $11 }')"
			fi
		done
		rs="$rs $(ratio "$n1" "$n0")"
		say "  $media train pair $r: none $n0 rows/s, snapshot every $SNAP_EVERY $n1 rows/s, ratio $(ratio "$n1" "$n0")"
	done
	mn=$(med $tn); ms=$(med $ts); mr=$(med $rs)
	ov=$(awk -v r="$mr" 'BEGIN { printf "%.1f", 100 * (1 - r) }')
	result snapwb "$media: train, snap every $SNAP_EVERY" "$ms" "$mn" - - \
		"base = no snapshots; overhead ${ov}% (median of the ratios of $SNAPWB_TRAIN_RUNS adjacent pairs:$(echo $rs)), of which mkdir itself $(med $fr)% of the time; target <= 3%: $(awk -v o="$ov" 'BEGIN { print o <= 3 ? "met" : "MISSED" }')"
	snapwb_unmount
}

section_snapwb() {
	ensure_w
	say ""
	say "snapwb: snapshots during write-back and in a training loop, default row cache; pool file on the root disk ($DISK_DIR) and on /dev/shm"
	for md in ${SNAPWB_MEDIA:-disk shm}; do
		case $md in
		disk) snapwb_one disk "$DISK_DIR" 0 ;;
		shm) snapwb_one shm "$W" 1 ;;
		*) fail "SNAPWB_MEDIA: disk or shm, not $md" ;;
		esac
	done
}

section_teardown() {
	t=$(now)
	umount_pool "$PID" "$MNT"
	PID=""
	say ""
	say "clean unmount: $(since "$t") s"
}

# cache1: the row cache at 1% of the table against none (cache_size=0), the
# same pool twice (a copy for the second daemon), both mounted at once so
# that the runs interleave and the cache stays warm between them.
section_cache1() {
	say ""
	c1=$((ROWS * ROW_COST / 100))
	say "cache1: row cache of 1% of the table (cache_size=$c1 = $((c1 / ROW_COST)) rows, 64 shards) vs cache_size=0;" \
		"per-row O_DIRECT pread/pwrite, Zipf(0.99), 1 thread, $CACHE1_RUNS x $CACHE1_SECS s; pools on /dev/shm"
	need_kb=$(du -k "$W/pool" | awk '{ print $1 + 262144 }')
	avail_kb=$(df -Pk "$W" | awk 'NR == 2 { print $4 }')
	if [ "${avail_kb:-0}" -lt "$need_kb" ]; then
		say "  /dev/shm has $((avail_kb >> 10)) MiB free, the pool copy needs ~$((need_kb >> 10)); skipped"
		result cache1 "skipped" - - - - "no room for a pool copy on /dev/shm"
		return
	fi
	t=$(now)
	cp --sparse=always "$W/pool" "$W/pool0" || fail "copy of the pool"
	say "  copied the pool for the cache_size=0 daemon: $(since "$t") s"
	mount_pool "$W/pool" "$MNT" "cache_size=$c1" 1
	PID=$DPID
	MNT0=$W/mnt0
	mkdir "$MNT0" || fail "mkdir $MNT0"
	mount_pool "$W/pool0" "$MNT0" "cache_size=0" 1
	PID0=$DPID
	[ "$(stat_field cache.budget_bytes)" = "$c1" ] || fail "row cache is $(stat_field cache.budget_bytes) B, want $c1"
	[ -z "$(stat_of "$MNT0" cache.budget_bytes)" ] || fail "cache_size=0 mount has a row cache"
	t=$(now)
	warm "$ROWS" "$MNT/$TABLE.emb"
	warm "$ROWS" "$MNT0/$TABLE.emb"
	say "  warm-up: $WARM_SECS s of O_DIRECT Zipf reads on each mount: $(since "$t") s"
	# more, shorter pairs than elsewhere: the two sides differ by little, so
	# bursts of other work on the machine must hit both alike
	runs_save=$RUNS; secs_save=$SECS
	RUNS=$CACHE1_RUNS; SECS=$CACHE1_SECS
	for op in read write rmw; do
		h0=$(stat_field cache.hits); m0=$(stat_field cache.misses); b0=$(stat_field cache.bypasses)
		run_ab "$op" "cache 1%" "$MNT/$TABLE.emb" "cache 0" "$MNT0/$TABLE.emb" -o "$op" -t 1 -D
		h1=$(stat_field cache.hits); m1=$(stat_field cache.misses); b1=$(stat_field cache.bypasses)
		r=$(ratio "$A_MED" "$B_MED")
		verdict=$(awk -v r="$r" 'BEGIN { print (r != "-" && r + 0 >= 1) ? "not slower" : "cache SLOWER" }')
		result cache1 "$op 1thr O_DIRECT 1% vs 0" "$A_MED" "$B_MED" "$A_P50" "$B_P50" \
			"base = cache_size=0 mount; row cache hit $(pct $((h1 - h0)) $((h1 - h0 + m1 - m0))), bypasses $((b1 - b0)); cache faster in $A_WINS/$RUNS pairs; $verdict"
	done
	RUNS=$runs_save; SECS=$secs_save
	t=$(now)
	umount_pool "$PID" "$MNT"
	PID=""
	say "  clean unmount of the cached mount (writes back its dirty rows): $(since "$t") s"
	umount_pool "$PID0" "$MNT0"
	rm -f "$W/pool0"
	rmdir "$MNT0"
}

# verify: what verifying each row's checksum costs the read path.  Two
# daemons with no row cache (every read reaches the store) on copies of the
# pool, one the bench's build of the daemon (build/bench/embfs-test: the
# shipped embfs has no such switch) started with EMBFS_VERIFY=0 (reads skip
# the bytes' digest; the header and bounds checks stay); gathers of BATCH_IDS Zipf ids through
# .embfs/rows and per-row O_DIRECT preads, runs interleaved.
section_verify() {
	gb=$BUILD/bench/gatherbench
	bsz=${BATCH_IDS:-4096}
	[ -x "$gb" ] || fail "$gb not built (run make)"
	say ""
	say "verify: row checksums verified vs not (EMBFS_VERIFY=0), cache_size=0 both, pools on /dev/shm;" \
		"gathers of $bsz Zipf ids and O_DIRECT preads, 1 thread, $RUNS x $SECS s"
	need_kb=$(du -k "$W/pool" | awk '{ print $1 + 262144 }')
	avail_kb=$(df -Pk "$W" | awk 'NR == 2 { print $4 }')
	if [ "${avail_kb:-0}" -lt "$need_kb" ]; then
		say "  /dev/shm has $((avail_kb >> 10)) MiB free, the pool copy needs ~$((need_kb >> 10)); skipped"
		result verify "skipped" - - - - "no room for a pool copy on /dev/shm"
		return
	fi
	cp --sparse=always "$W/pool" "$W/pool0" || fail "copy of the pool"
	mount_pool "$W/pool" "$MNT" "cache_size=0" 1
	PID=$DPID
	MNT0=$W/mnt0
	mkdir "$MNT0" || fail "mkdir $MNT0"
	embfs_save=$EMBFS
	EMBFS=$BUILD/bench/embfs-test
	export EMBFS_VERIFY=0
	mount_pool "$W/pool0" "$MNT0" "cache_size=0" 1
	unset EMBFS_VERIFY
	EMBFS=$embfs_save
	PID0=$DPID
	gv=""; g0=""; gp=""; gp0=""
	n=1
	while [ $n -le "$RUNS" ]; do
		seed=$((SEED * 1000 + n))
		o=$("$gb" -m batch -t 1 -b "$bsz" -n "$ROWS" -d "$SECS" -s "$seed" "$MNT/$TABLE.emb") || fail "gatherbench (verify)"
		o0=$("$gb" -m batch -t 1 -b "$bsz" -n "$ROWS" -d "$SECS" -s "$seed" "$MNT0/$TABLE.emb") || fail "gatherbench (no verify)"
		echo "$o" >>"$W/runs.log"; echo "$o0" >>"$W/runs.log"
		gv="$gv $(field "$o" rows_per_s)"; g0="$g0 $(field "$o0" rows_per_s)"
		gp="$gp $(field "$o" p50_batch_us)"; gp0="$gp0 $(field "$o0" p50_batch_us)"
		say "  gather run $n/$RUNS: verify $(mrows "$(field "$o" rows_per_s)") | no verify $(mrows "$(field "$o0" rows_per_s)")"
		n=$((n + 1))
	done
	r=$(ratio "$(med $gv)" "$(med $g0)")
	result verify "gather 1thr verify vs not" "$(med $gv)" "$(med $g0)" "$(med $gp)" "$(med $gp0)" \
		"base = EMBFS_VERIFY=0 mount; p50 per batch of $bsz; checksum cost $(awk -v r="$r" 'BEGIN { if (r == "-") print "-"; else printf "%.1f%%", 100 * (1 - r) }')"
	run_ab "pread" "verify" "$MNT/$TABLE.emb" "no verify" "$MNT0/$TABLE.emb" -o read -t 1 -D
	r=$(ratio "$A_MED" "$B_MED")
	result verify "pread 1thr O_DIRECT verify vs not" "$A_MED" "$B_MED" "$A_P50" "$B_P50" \
		"base = EMBFS_VERIFY=0 mount; one FUSE round trip per row; faster in $A_WINS/$RUNS pairs"
	[ "$(stat_field pool.checksum_errors)" = 0 ] || fail "checksum errors on a sound pool"
	umount_pool "$PID" "$MNT"
	PID=""
	umount_pool "$PID0" "$MNT0"
	rm -f "$W/pool0"
	rmdir "$MNT0"
}

# durable: the default set-up, a pool that is a plain file on the root disk
# (libpmemobj persists by msync), row writes made durable by an fsync every
# SYNC_EVERY rows (group commit), against the same writes and fsyncs on a
# file on the same disk; then the same through cache_size=0 for contrast.
section_durable() {
	say ""
	bytes=$((DISK_ROWS * ROW_SIZE))
	say "durable: pool as a plain file on the root disk ($DISK_DIR, no PMEM_IS_PMEM_FORCE), $DISK_ROWS rows;" \
		"Zipf(0.99) pwrite, fsync every $SYNC_EVERY rows, 1 thread, $RUNS x $SECS s"
	need_mb=$((bytes / 1048576 + 1024 + 512)) # baseline + pool (<= 1 GiB by default) + slack
	room durable "$DISK_DIR" "$need_mb" || return
	DW=$(mktemp -d "$DISK_DIR/embfs-bench.XXXXXX") || fail "mktemp in $DISK_DIR"
	mkdir "$DW/mnt"
	t=$(now)
	dd if=/dev/urandom of="$DW/base.emb" bs=1M count=$((bytes / 1048576)) conv=fsync status=none || fail "disk baseline"
	rest=$((bytes % 1048576))
	[ $rest -gt 0 ] && { head -c $rest /dev/urandom >>"$DW/base.emb" || fail "disk baseline tail"; }
	sync "$DW/base.emb" 2>/dev/null
	say "  baseline: $DW/base.emb, $DISK_ROWS rows from /dev/urandom, fsynced ($(since "$t") s)"
	env -u PMEM_IS_PMEM_FORCE "$MKFS" -f -s "$DISK_POOL_SIZE" -t "$TABLE:64:f32" "$DW/pool" >/dev/null ||
		fail "mkfs.embfs on disk"
	mount_pool "$DW/pool" "$DW/mnt" "" 0
	PID=$DPID
	MNT=$DW/mnt
	[ "$(stat_field pool.media)" = file-msync ] || fail "disk pool media is $(stat_field pool.media), want file-msync"
	cb=$(stat_field cache.budget_bytes)
	t=$(now)
	dd if="$DW/base.emb" of="$MNT/$TABLE.emb" bs=1M conv=notrunc,fsync status=none || fail "disk populate"
	ps=$(since "$t")
	[ "$(stat_field rows)" = "$DISK_ROWS" ] || fail "disk pool holds $(stat_field rows) rows, want $DISK_ROWS"
	say "  populate: dd bs=1M + fsync through the mount (row cache $((cb >> 20)) MiB, default): $ps s"
	result durable "populate dd bs=1M+fsync" "$(awk -v s="$ps" -v n="$DISK_ROWS" 'BEGIN { printf "%.0f", n / s }')" - - - \
		"$ps s for $DISK_ROWS rows, pool on disk"
	c0=$(stat_field store.commits); f0=$(stat_field fs.fsync_calls); b0=$(stat_field store.persist_barriers)
	run_ab "write+fsync" "mount" "$MNT/$TABLE.emb" "disk file" "$DW/base.emb" -n "$DISK_ROWS" -o write -t 1 -S "$SYNC_EVERY"
	c1=$(stat_field store.commits); f1=$(stat_field fs.fsync_calls); b1=$(stat_field store.persist_barriers)
	base=$B_MED
	per_f=$(awk -v c=$((c1 - c0)) -v b=$((b1 - b0)) -v f=$((f1 - f0)) 'BEGIN { if (f) printf "%.1f commits, %.1f msyncs", c / f, b / f; else print "-" }')
	result durable "write 1thr fsync/$SYNC_EVERY, cache" "$A_MED" "$B_MED" "$A_P50" "$B_P50" \
		"base = file on disk; fsync ${A_FS}ms vs ${B_FS}ms; per fsync $per_f; target >= 0.1x: $(meets "$(ratio "$A_MED" "$B_MED")" 0.1)"
	t=$(now)
	umount_pool "$PID" "$MNT"
	PID=""
	say "  clean unmount: $(since "$t") s"
	# contrast: no row cache, every pwrite a commit (an msync of the pool)
	mount_pool "$DW/pool" "$DW/mnt" "cache_size=0" 0
	PID=$DPID
	run_ab "write+fsync, cache_size=0" "mount" "$MNT/$TABLE.emb" - - -n "$DISK_ROWS" -o write -t 1 -S "$SYNC_EVERY"
	result durable "write 1thr fsync/$SYNC_EVERY, no cache" "$A_MED" "$base" "$A_P50" - \
		"base = file on disk (runs above); cache_size=0: a commit per row"
	umount_pool "$PID" "$MNT"
	PID=""
	MNT=$W/mnt
	rm -f "$DW/pool" "$DW/base.emb"
	rmdir "$DW/mnt" "$DW"
	DW=""
}

# umount: issue 29 item 3.  A pool as a plain file in DISK_DIR (msync, as in
# tests/e2e/life.sh), UMOUNT_ROWS dirty rows of 256 B in the row cache
# (dirty_age_ms=0: no flusher).  UMOUNT_RUNS pairs, in turn: (a) fsync of the
# table (the write-back through fsync), timed; (b) a plain fusermount3 -u,
# then `embfs POOL MNT` every 20 ms until it mounts: the time from the
# unmount's start to the remount's return.  Target: (b) <= 1.5 x (a).
section_umount() {
	say ""
	ensure_w
	say "umount: $UMOUNT_ROWS dirty rows (256 B) in the row cache, pool a plain file in $DISK_DIR (msync);" \
		"$UMOUNT_RUNS runs each of fsync write-back and fusermount3 -u -> remount, interleaved"
	room umount "$DISK_DIR" $((UMOUNT_ROWS * 256 * 3 / 1048576 + 600)) || return
	DW=$(mktemp -d "$DISK_DIR/embfs-bench.XXXXXX") || fail "mktemp in $DISK_DIR"
	mkdir "$DW/mnt"
	head -c $((UMOUNT_ROWS * 256)) /dev/urandom >"$DW/base.emb" || fail "umount: rows"
	fs_l="" rm_l="" ex_l="" tr_l=""
	r=0
	while [ $r -lt "$UMOUNT_RUNS" ]; do
		r=$((r + 1))
		for how in fsync umount; do
			env -u PMEM_IS_PMEM_FORCE "$MKFS" -f -s 512M "$DW/pool" >/dev/null || fail "umount: mkfs"
			mount_pool "$DW/pool" "$DW/mnt" "cache_size=512M,dirty_age_ms=0" 0
			dd if="$DW/base.emb" of="$DW/mnt/t.emb" bs=1M status=none || fail "umount: writing rows"
			d=$(stat_of "$DW/mnt" cache.dirty)
			[ "$d" -ge $((UMOUNT_ROWS * 9 / 10)) ] || fail "umount: only $d dirty rows"
			if [ $how = fsync ]; then
				t=$(now)
				$PY -c 'import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd)' "$DW/mnt/t.emb" ||
					fail "umount: fsync"
				fs_l="$fs_l $(since "$t")"
				umount_pool "$DPID" "$DW/mnt"
				continue
			fi
			t=$(now)
			fusermount3 -u "$DW/mnt" || fail "umount: fusermount3 -u"
			tries=0
			until env -u PMEM_IS_PMEM_FORCE "$EMBFS" -o "pidfile=$DW/pid" "$DW/pool" "$DW/mnt" 2>"$DW/err"; do
				grep -q "in use" "$DW/err" || fail "umount: remount: $(cat "$DW/err")"
				tries=$((tries + 1))
				[ $tries -gt 3000 ] && fail "umount: no remount within 60 s"
				sleep 0.02
			done
			rm_l="$rm_l $(since "$t")"
			tr_l="$tr_l $tries"
			# the first daemon (a child of this shell) has exited
			wait_gone "$DPID" 10 || fail "umount: first daemon still running"
			wait "$DPID"
			forget "$DPID"
			NPID=$(cat "$DW/pid")
			DAEMONS="$DAEMONS $NPID:$DW/mnt"
			cmp -s "$DW/base.emb" "$DW/mnt/t.emb" || fail "umount: rows differ after remount"
			stop_one "$NPID" "$DW/mnt"
		done
	done
	fm=$(med $fs_l)
	um=$(med $rm_l)
	rt=$(awk -v a="$um" -v b="$fm" 'BEGIN { printf "%.2f", a / b }')
	say "  fsync write-back (s):$fs_l; median $fm"
	say "  fusermount3 -u -> remount (s):$rm_l; median $um (failed remounts:$tr_l)"
	result umount "$UMOUNT_ROWS dirty rows, unmount" - - - - \
		"fusermount3 -u -> remount ${um} s vs fsync ${fm} s: ${rt}x (target <= 1.5x: $(awk -v r="$rt" 'BEGIN { print r <= 1.5 ? "met" : "MISSED" }'))"
	rm -f "$DW/pool" "$DW/base.emb" "$DW/pid" "$DW/err"
	rmdir "$DW/mnt" "$DW"
	DW=""
}

# spillbench_start: SPB (built), the work dir, a blank line
spillbench_start() {
	SPB=$BUILD/bench/spillbench
	[ -x "$SPB" ] || fail "$SPB not built (run make)"
	ensure_w
	say ""
}

# settle_spill MNT: wait until the mover's merges after a load are done
# (spill.write_bytes unchanged for 3 s running; at most 300 s) and print
# how many seconds that took.  A bench's heuristic: the mover has no idle
# signal, and the section reports what the merges wrote, not a pass/fail.
settle_spill() {
	ss_prev=-1; ss_same=0; ss_t=0
	while [ $ss_same -lt 3 ] && [ $ss_t -lt 300 ]; do
		ss_w=$(stat_of "$1" spill.write_bytes)
		if [ "$ss_w" = "$ss_prev" ]; then ss_same=$((ss_same + 1)); else ss_same=0; fi
		ss_prev=$ss_w
		sleep 1
		ss_t=$((ss_t + 1))
	done
	echo $((ss_t - ss_same))
}

# load: a table 8x the pool loaded through the mount (issue 28).  A pool of
# LOAD_POOL_SIZE on /dev/shm, a row cache of LOAD_CACHE, a spill file in
# DISK_DIR; LOAD_BYTES of LOAD_DIM f32 rows written with 1 MiB pwrites and
# an fsync (spillbench fill), in row order and in a shuffled order of
# chunks; against the same spillbench fill of a plain file in DISK_DIR in
# the same order (the rate a user gets without embfs), RUNS pairs.  The
# device's bytes written (spill.write_bytes) over the row bytes is the
# write amplification, at the fsync and once the merges the mover makes
# after it are done (settle_spill).
section_load() {
	spillbench_start
	lb=$(numfmt --from=iec "$LOAD_BYTES") || fail "bad LOAD_BYTES"
	rs=$((LOAD_DIM * 4)); rows=$((lb / rs))
	say "load: $LOAD_BYTES of $rs-byte rows ($rows) into a pool of $LOAD_POOL_SIZE on /dev/shm, row cache $LOAD_CACHE," \
		"spill file $LOAD_SPILL_SIZE in $DISK_DIR; 1 MiB pwrites + fsync, row order and shuffled chunks," \
		"against the same fill of a plain file in $DISK_DIR; $RUNS pairs"
	if [ ! -c /dev/fuse ] || ! command -v fusermount3 >/dev/null; then
		say "  no FUSE; skipped"
		result load "skipped" - - - - "no FUSE"
		return
	fi
	room load "$DISK_DIR" $(((lb >> 20) * 2 + ($(numfmt --from=iec "$LOAD_SPILL_SIZE") >> 20) + 512)) &&
		room load /dev/shm $((($(numfmt --from=iec "$LOAD_POOL_SIZE") >> 20) + 256)) || return
	SW=$(mktemp -d "$DISK_DIR/embfs-bench-spill.XXXXXX") || fail "mktemp in $DISK_DIR"
	LMNT=$W/loadmnt
	mkdir -p "$LMNT"
	for order in rows shuffled; do
		oo=""; [ $order = shuffled ] && oo="-O -s 7"
		e_l=""; p_l=""; r_l=""; wa_l=""; mg_l=""; wf_l=""; st_l=""
		for r in $(seq 1 "$RUNS"); do
			"$MKFS" -f -s "$LOAD_POOL_SIZE" -t "load.emb:$LOAD_DIM:f32" "$W/loadpool" >/dev/null || fail "load: mkfs.embfs"
			mount_pool "$W/loadpool" "$LMNT" "cache_size=$LOAD_CACHE,spill=$SW,spill_size=$LOAD_SPILL_SIZE" 1
			o=$("$SPB" -m fill $oo -r "$rs" -n "$rows" "$LMNT/load.emb") || fail "load: spillbench fill ($order)"
			echo "load $order: $o" >>"$W/runs.log"
			e=$(field "$o" mb_per_s)
			wf=$(awk -v w="$(stat_of "$LMNT" spill.write_bytes)" -v b="$lb" 'BEGIN { printf "%.2f", w / b }')
			st_s=$(settle_spill "$LMNT")
			wa=$(awk -v w="$(stat_of "$LMNT" spill.write_bytes)" -v b="$lb" 'BEGIN { printf "%.2f", w / b }')
			echo "load $order: written ${wf}x at the fsync, ${wa}x ${st_s} s later (merges done), runs $(stat_of "$LMNT" spill.runs)" >>"$W/runs.log"
			wf_l="$wf_l $wf"; st_l="$st_l $st_s"
			mg="$(stat_of "$LMNT" spill.merges)/$(stat_of "$LMNT" spill.merge_moves)/$(stat_of "$LMNT" spill.bulk_rows)"
			umount_pool "$DPID" "$LMNT"
			rm -f "$W/loadpool" "$SW"/embfs-*.spill
			o=$("$SPB" -m fill $oo -r "$rs" -n "$rows" "$SW/plain") || fail "load: spillbench fill of a plain file"
			rm -f "$SW/plain"
			p=$(field "$o" mb_per_s)
			e_l="$e_l $e"; p_l="$p_l $p"; r_l="$r_l $(ratio "$e" "$p")"; wa_l="$wa_l $wa"; mg_l="$mg_l $mg"
		done
		em=$(med $e_l); pm=$(med $p_l); rm_=$(med $r_l); wam=$(med $wa_l)
		say "  $order: embfs MB/s:$e_l; plain file:$p_l; ratio:$r_l; device write amp at the fsync:$wf_l," \
			"once the merges after it were done:$wa_l (s after the fsync:$st_l); merges/moves/rows written straight to runs:$mg_l"
		say "  $order: median $em MB/s vs $pm MB/s = ${rm_}x, device wrote ${wam}x the rows"
		tgt=""
		[ $order = rows ] && tgt=" (targets >= 0.5x: $(awk -v r="$rm_" 'BEGIN { print (r >= 0.5 ? "met" : "MISSED") }'), write amp <= 1.3: $(awk -v r="$wam" 'BEGIN { print (r <= 1.3 ? "met" : "MISSED") }'))"
		result load "$LOAD_BYTES, $order" - - - - "${em} MB/s vs plain file ${pm} MB/s: ${rm_}x; device wrote ${wam}x the rows$tgt"
	done
	rmdir "$LMNT" "$SW" 2>/dev/null
	SW=""
}

# spilltrain: training on a table 8x the pool (issue 28).  A pool of
# SPT_POOL_SIZE on /dev/shm, a row cache of SPT_CACHE, a spill file of
# SPT_SPILL_SIZE in DISK_DIR; SPT_ROWS rows of SPT_DIM f32 loaded in row
# order (spilltrain.py --load), then fio's 4 KiB O_DIRECT random reads at
# queue depth 32 of the used part of the spill file (the device's IOPS),
# then embfs.torch.EmbeddingBag + SGD, 4096 bags of 4 Zipf(1.05) ids a
# step, SPT_WINDOWS windows of SPT_STEPS steps (tests/bench/spilltrain.py):
# per window the device reads / fio's IOPS over the window's time (1.0:
# the steps ran at the device's read bound) and the device's bytes written
# over the updated rows' bytes; each step's push (the optimizer's step),
# timed.  Targets: every window >= 0.6, the median >= 0.75, written <= 4x,
# pushes in windows with merges p99 <= 50 ms and max <= 500 ms.  One run
# (the windows are the samples).
section_spilltrain() {
	ensure_w
	tb=$((SPT_ROWS * SPT_DIM * 4))
	say ""
	say "spilltrain: $SPT_ROWS rows x $((SPT_DIM * 4)) B ($((tb >> 20)) MiB) in a pool of $SPT_POOL_SIZE on /dev/shm," \
		"row cache $SPT_CACHE, spill file $SPT_SPILL_SIZE in $DISK_DIR; $SPT_WINDOWS windows of $SPT_STEPS steps"
	if [ ! -c /dev/fuse ] || ! command -v fio >/dev/null; then
		say "  no FUSE or no fio; skipped"
		result spilltrain "skipped" - - - - "no FUSE or fio"
		return
	fi
	room spilltrain "$DISK_DIR" $((($(numfmt --from=iec "$SPT_SPILL_SIZE") >> 20) + 512)) &&
		room spilltrain /dev/shm $((($(numfmt --from=iec "$SPT_POOL_SIZE") >> 20) + 256)) || return
	SW=$(mktemp -d "$DISK_DIR/embfs-bench-spill.XXXXXX") || fail "mktemp in $DISK_DIR"
	TMNT2=$W/sptmnt
	mkdir -p "$TMNT2"
	"$MKFS" -f -s "$SPT_POOL_SIZE" -t "train.emb:$SPT_DIM:f32" "$W/sptpool" >/dev/null || fail "spilltrain: mkfs.embfs"
	mount_pool "$W/sptpool" "$TMNT2" "cache_size=$SPT_CACHE,spill=$SW,spill_size=$SPT_SPILL_SIZE" 1
	o=$(PYTHONPATH=$TOP/python "$PY" "$TOP/tests/bench/spilltrain.py" "$TMNT2" --fio-iops 1 --rows "$SPT_ROWS" \
		--dim "$SPT_DIM" --windows 0 --load) || fail "spilltrain: load"
	echo "$o" >>"$W/runs.log"
	say "  $(echo "$o" | grep '^loaded')"
	SPILL_FILE=$(stat_of "$TMNT2" spill.path)
	segb=$(stat_of "$TMNT2" spill.segment_bytes)
	useg=$(($(stat_of "$TMNT2" spill.segments) - $(stat_of "$TMNT2" spill.segments_free)))
	SPILL_RANGE=$(((useg + 1) * segb))
	fo=$(fio_run 32 10)
	[ -n "$fo" ] || fail "spilltrain: fio at QD 32"
	say "  fio QD 32 4 KiB random reads of the spill file's first $((SPILL_RANGE >> 20)) MiB: ${fo% *} IOPS"
	c0=$(awk '{ print $14 + $15 }' "/proc/$DPID/stat")
	o=$(PYTHONPATH=$TOP/python "$PY" "$TOP/tests/bench/spilltrain.py" "$TMNT2" --fio-iops "${fo% *}" --rows "$SPT_ROWS" \
		--dim "$SPT_DIM" --windows "$SPT_WINDOWS" --steps "$SPT_STEPS" --seed "$SEED" --snap-every "$SPT_SNAP_EVERY") ||
		fail "spilltrain: training"
	c1=$(awk '{ print $14 + $15 }' "/proc/$DPID/stat")
	echo "$o" >>"$W/runs.log"
	echo "$o" | grep '^window' | sed 's/^/  /' | while read -r l; do say "$l"; done
	last=$(echo "$o" | tail -1)
	say "  daemon CPU during the training: $(((c1 - c0) * 1000 / $(getconf CLK_TCK))) ms;" \
		"evicted $(stat_of "$TMNT2" spill.run_evicted), merges $(stat_of "$TMNT2" spill.merges), runs $(stat_of "$TMNT2" spill.runs)"
	bmin=$(field "$last" bound_min); bmed=$(field "$last" bound_median); wam=$(field "$last" wa)
	met() { awk -v v="$1" -v t="$2" -v d="$3" 'BEGIN { ok = d == "le" ? v <= t : v >= t; print ok ? "met" : "MISSED" }'; }
	[ "$SPT_SNAP_EVERY" -gt 0 ] && say "  snapshots every $SPT_SNAP_EVERY steps: $(field "$last" snapshots)," \
		"median $(field "$last" snap_ms_median) ms (mkdir)"
	mp99=$(field "$last" merge_push_p99_ms); mpmax=$(field "$last" merge_push_max_ms)
	say "  pushes (the optimizer's step, $((SPT_WINDOWS * SPT_STEPS)) steps): p99 $(field "$last" push_p99_ms) ms," \
		"max $(field "$last" push_max_ms) ms; in windows with merges: p99 $mp99 ms, max $mpmax ms"
	pm="-"
	[ "$mp99" != "-" ] && pm=$(awk -v p="$mp99" -v m="$mpmax" 'BEGIN { print (p <= 50 && m <= 500) ? "met" : "MISSED" }')
	result spilltrain "$SPT_WINDOWS x $SPT_STEPS steps" "$(field "$last" lookups_per_s_median)" - - - \
		"of the device's read bound: min $bmin (>= 0.6: $(met "$bmin" 0.6 ge)), median $bmed (>= 0.75: $(met "$bmed" 0.75 ge)); written ${wam}x the updated rows (<= 4: $(met "$wam" 4 le)); push in merge windows p99 $mp99 ms, max $mpmax ms (<= 50, <= 500: $pm)"
	umount_pool "$DPID" "$TMNT2"
	rm -rf "$SW" "$W/sptpool"
	rmdir "$TMNT2" 2>/dev/null
	SW=""
}

# spill: rows that live on the SSD spill tier.  A pool of SPILL_POOL_SIZE on
# /dev/shm, a row cache of SPILL_CACHE, a spill file in DISK_DIR (the root
# disk), one table of SPILL_ROWS rows of SPILL_DIM f32 (1 GiB of 512-byte
# rows: ~3.8x pool + cache) filled front to back, so that almost every row
# lives on the device.  Then, RUNS times: batched gathers (.embfs/rows) of
# SPILL_BATCH uniform ids with 1 and 2 client threads, each next to fio
# 4 KiB O_DIRECT io_uring random reads of the used part of the same spill
# file at the queue depth embfs can have in flight (spill_qd per client);
# the same gathers with Zipf(0.99) ids; per-row O_DIRECT pread (one FUSE
# round trip and one device read per row, QD 1) next to fio at QD 1.  The
# two sides of each pair alternate which goes first.  Device IOPS of embfs
# = spill.read_ios delta / elapsed (build/bench/spillbench reads the stats
# around its timed loops).  Target: gathers of uniform ids (>90% of rows
# from the device) at >= 0.8x fio's IOPS.
ensure_w() {
	[ -n "$W" ] && return 0
	W=$(mktemp -d /dev/shm/embfs-bench.XXXXXX) || fail "mktemp"
	MNT=$W/mnt
	mkdir "$MNT"
	: >"$W/summary"
	: >"$W/runs.log"
}

# fio_run QD SECS: 4 KiB O_DIRECT io_uring random reads of the spill file's
# used range; prints "IOPS P50_CLAT_US"
fio_run() {
	fio --name=spillbench --filename="$SPILL_FILE" --readonly --size="$SPILL_RANGE" --rw=randread \
		--bs=4k --direct=1 --ioengine=io_uring --iodepth="$1" --runtime="$2" --time_based \
		--output-format=terse --terse-version=3 2>>"$W/daemon.log" |
		awk -F';' 'NF > 30 { p = $24; sub(/.*=/, "", p); printf "%.0f %s\n", $8, p; exit }'
}

section_spill() {
	spillbench_start
	srs=$((SPILL_DIM * 4))
	tbytes=$((SPILL_ROWS * srs))
	pool_b=$(numfmt --from=iec "$SPILL_POOL_SIZE") || fail "bad SPILL_POOL_SIZE"
	cache_b=$(numfmt --from=iec "$SPILL_CACHE") || fail "bad SPILL_CACHE"
	spill_b=$(numfmt --from=iec "$SPILL_SIZE") || fail "bad SPILL_SIZE"
	say "spill: table of $SPILL_ROWS rows x $srs B ($((tbytes >> 20)) MiB) = $(awk -v t="$tbytes" -v p="$pool_b" -v c="$cache_b" 'BEGIN { printf "%.2f", t / (p + c) }')x" \
		"(pool $SPILL_POOL_SIZE on /dev/shm + row cache $SPILL_CACHE); spill file $SPILL_SIZE in $DISK_DIR," \
		"spill_qd=$SPILL_QD spill_high=$SPILL_HIGH spill_low=$SPILL_LOW; $RUNS x $SPILL_SECS s per configuration"
	room spill "$DISK_DIR" $(((spill_b >> 20) + 512)) && room spill /dev/shm $(((pool_b >> 20) + 256)) || return
	have_fio=1; fo="- -"
	command -v fio >/dev/null || { have_fio=0; say "  no fio (tests/deps.sh installs it): embfs figures only"; }
	SW=$(mktemp -d "$DISK_DIR/embfs-bench-spill.XXXXXX") || fail "mktemp in $DISK_DIR"
	"$MKFS" -f -s "$SPILL_POOL_SIZE" -t "spill.emb:$SPILL_DIM:f32" "$W/spillpool" >/dev/null || fail "mkfs.embfs spillpool"
	mkdir -p "$W/spillmnt"
	SMNT=$W/spillmnt
	mount_pool "$W/spillpool" "$SMNT" "cache_size=$SPILL_CACHE,spill=$SW,spill_size=$SPILL_SIZE,spill_qd=$SPILL_QD,spill_high=$SPILL_HIGH,spill_low=$SPILL_LOW" 1
	SPID=$DPID
	SPILL_FILE=$(stat_of "$SMNT" spill.path)
	[ -f "$SPILL_FILE" ] || fail "no spill file (spill.path '$SPILL_FILE')"
	[ "$(getfattr --only-values -n user.embfs.row_size "$SMNT/spill.emb" 2>/dev/null)" = "$srs" ] ||
		fail "spill.emb row size is not $srs"

	# fill: sequential 1 MiB writes, then fsync; the mover spills meanwhile
	o=$("$SPB" -m fill -r "$srs" -n "$SPILL_ROWS" "$SMNT/spill.emb") || fail "spillbench fill"
	echo "$o" >>"$W/runs.log"
	# let the mover finish its pass (row versions back under spill_low)
	i=0; prev=-1
	while [ $i -lt 60 ]; do
		cur=$(stat_of "$SMNT" spill.moved)
		[ "$cur" = "$prev" ] && break
		prev=$cur; i=$((i + 1)); sleep 0.25
	done
	[ "$(stat_of "$SMNT" rows)" = "$SPILL_ROWS" ] || fail "spill pool holds $(stat_of "$SMNT" rows) rows, want $SPILL_ROWS"
	used=$(stat_of "$SMNT" pool.used_bytes); rowb=$(stat_of "$SMNT" pmem.row_bytes)
	nver=$(stat_of "$SMNT" pmem.versions)
	sver=$(($(stat_of "$SMNT" spill.versions) + $(stat_of "$SMNT" spill.run_rows))) # stubs + sorted runs
	segb=$(stat_of "$SMNT" spill.segment_bytes)
	useg=$(($(stat_of "$SMNT" spill.segments) - $(stat_of "$SMNT" spill.segments_free)))
	# fio reads the part of the spill file that holds segments (they are
	# taken lowest first), plus one segment for those the runs add
	SPILL_RANGE=$(((useg + 1) * segb + 65536))
	[ "$SPILL_RANGE" -gt "$spill_b" ] && SPILL_RANGE=$spill_b
	per_row=$(awk -v u="$used" -v r="$rowb" -v n="$sver" 'BEGIN { if (n > 0) printf "%.0f", (u - r) / n; else print "-" }')
	say "  fill: $(field "$o" secs) s, $(mrows "$(field "$o" rows_per_s)") rows/s, $(field "$o" mb_per_s) MB/s" \
		"(pwrite 1 MiB + fsync; $(field "$o" writer_waits) writer waits for the mover)"
	say "  after fill: $sver rows on the device ($(pct "$sver" "$SPILL_ROWS")), $nver in PMem; PMem used $((used >> 20)) MiB of" \
		"$((pool_b >> 20)): row versions $((rowb >> 20)) MiB, the rest ~$per_row B per spilled row;" \
		"spill file: $useg segments of $((segb >> 20)) MiB used (fio reads its first $((SPILL_RANGE >> 20)) MiB)"
	result spill "populate 1MiB pwrite+fsync" "$(field "$o" rows_per_s)" - - - \
		"$(field "$o" mb_per_s) MB/s; $(pct "$sver" "$SPILL_ROWS") of $SPILL_ROWS rows spilled; table = $(awk -v t="$tbytes" -v p="$pool_b" -v c="$cache_b" 'BEGIN { printf "%.2f", t / (p + c) }')x (pool + cache); PMem ~$per_row B per spilled row"

	# the runs; per configuration the lists of rows/s, IOPS, p50, dev frac
	# u = uniform gathers, z = Zipf gathers, p = O_DIRECT pread; f = fio
	for k in $THREADS; do eval "u_r_$k=''; u_i_$k=''; u_p_$k=''; u_f_$k=''; z_r_$k=''; z_i_$k=''; z_p_$k=''; z_f_$k=''; f_i_$k=''; f_p_$k=''; u_x_$k=''; z_x_$k=''; u_q_$k=''"; done
	p_r=''; p_i=''; p_p=''; p_f=''; f1_i=''; f1_p=''; p_x=''; z_pr=0; z_mv=0; z_wr=0; u_pr=0
	n=1
	while [ $n -le "$RUNS" ]; do
		seed=$((SEED * 1000 + n))
		for t in $THREADS; do
			qd=$((t * SPILL_QD))
			# uniform gather and fio at qd, the first of the pair alternating
			for side in $( [ $((n % 2)) = 1 ] && echo "embfs fio" || echo "fio embfs"); do
				if [ "$side" = embfs ]; then
					o=$("$SPB" -m gather -u -r "$srs" -n "$SPILL_ROWS" -b "$SPILL_BATCH" -t "$t" -d "$SPILL_SECS" -s "$seed" "$SMNT/spill.emb") ||
						fail "spillbench gather uniform ${t}thr"
					echo "$o" >>"$W/runs.log"
					eval "u_r_$t=\"\$u_r_$t $(field "$o" rows_per_s)\"; u_i_$t=\"\$u_i_$t $(field "$o" dev_iops)\""
					eval "u_p_$t=\"\$u_p_$t $(field "$o" p50_us)\"; u_f_$t=\"\$u_f_$t $(field "$o" dev_frac)\""
					u_pr=$((u_pr + $(field "$o" promoted)))
					uo=$o
				elif [ $have_fio = 1 ]; then
					fo=$(fio_run "$qd" "$SPILL_SECS")
					[ -n "$fo" ] || fail "fio at QD $qd"
					echo "fio qd=$qd iops=${fo% *} p50_clat_us=${fo#* }" >>"$W/runs.log"
					eval "f_i_$t=\"\$f_i_$t ${fo% *}\"; f_p_$t=\"\$f_p_$t ${fo#* }\""
				fi
			done
			fi_=$([ $have_fio = 1 ] && echo "${fo% *}" || echo -)
			r=$(ratio "$(field "$uo" dev_iops)" "$fi_")
			eval "u_x_$t=\"\$u_x_$t $r\""
			say "  run $n/$RUNS uniform ${t}thr: embfs $(mrows "$(field "$uo" rows_per_s)") rows/s, device $(field "$uo" dev_iops) IOPS" \
				"($(pct "$(field "$uo" dev_rows)" "$(field "$uo" rows_read)") of rows), p50 batch $(field "$uo" p50_us)us | fio QD $qd: $fi_ IOPS; ratio $r"
			o=$("$SPB" -m gather -z 0.99 -r "$srs" -n "$SPILL_ROWS" -b "$SPILL_BATCH" -t "$t" -d "$SPILL_SECS" -s "$seed" "$SMNT/spill.emb") ||
				fail "spillbench gather zipf ${t}thr"
			echo "$o" >>"$W/runs.log"
			eval "z_r_$t=\"\$z_r_$t $(field "$o" rows_per_s)\"; z_i_$t=\"\$z_i_$t $(field "$o" dev_iops)\""
			eval "z_p_$t=\"\$z_p_$t $(field "$o" p50_us)\"; z_f_$t=\"\$z_f_$t $(field "$o" dev_frac)\""
			z_pr=$((z_pr + $(field "$o" promoted))); z_mv=$((z_mv + $(field "$o" moved))); z_wr=$((z_wr + $(field "$o" spill_writes)))
			say "  run $n/$RUNS zipf    ${t}thr: embfs $(mrows "$(field "$o" rows_per_s)") rows/s, device $(field "$o" dev_iops) IOPS" \
				"($(pct "$(field "$o" dev_rows)" "$(field "$o" rows_read)") of rows), p50 batch $(field "$o" p50_us)us," \
				"promoted $(field "$o" promoted), re-spilled $(field "$o" moved)"
		done
		# per-row O_DIRECT pread (QD 1) and fio at QD 1
		for side in $( [ $((n % 2)) = 1 ] && echo "embfs fio" || echo "fio embfs"); do
			if [ "$side" = embfs ]; then
				o=$("$SPB" -m pread -D -u -r "$srs" -n "$SPILL_ROWS" -t 1 -d "$SPILL_SECS" -s "$seed" "$SMNT/spill.emb") ||
					fail "spillbench pread"
				echo "$o" >>"$W/runs.log"
				p_r="$p_r $(field "$o" rows_per_s)"; p_i="$p_i $(field "$o" dev_iops)"
				p_p="$p_p $(field "$o" p50_us)"; p_f="$p_f $(field "$o" dev_frac)"
				po=$o
			elif [ $have_fio = 1 ]; then
				fo=$(fio_run 1 "$SPILL_SECS")
				[ -n "$fo" ] || fail "fio at QD 1"
				echo "fio qd=1 iops=${fo% *} p50_clat_us=${fo#* }" >>"$W/runs.log"
				f1_i="$f1_i ${fo% *}"; f1_p="$f1_p ${fo#* }"
			fi
		done
		fi_=$([ $have_fio = 1 ] && echo "${fo% *}" || echo -)
		r=$(ratio "$(field "$po" dev_iops)" "$fi_")
		p_x="$p_x $r"
		say "  run $n/$RUNS pread O_DIRECT 1thr: embfs $(mrows "$(field "$po" rows_per_s)") rows/s, device $(field "$po" dev_iops) IOPS," \
			"p50 $(field "$po" p50_us)us | fio QD 1: $fi_ IOPS, p50 clat ${fo#* }us; ratio $r"
		n=$((n + 1))
	done

	# summary rows: mount = embfs device IOPS, base = fio IOPS at the same QD
	for t in $THREADS; do
		qd=$((t * SPILL_QD))
		eval "ur=\$(med \$u_r_$t); ui=\$(med \$u_i_$t); up=\$(med \$u_p_$t); uf=\$(med \$u_f_$t); ux=\$u_x_$t"
		eval "zr=\$(med \$z_r_$t); zi=\$(med \$z_i_$t); zp=\$(med \$z_p_$t); zf=\$(med \$z_f_$t)"
		eval "fi_=\$(med \$f_i_$t); fp=\$(med \$f_p_$t)"
		[ $have_fio = 1 ] || { fi_=-; fp=-; }
		result spill "gather uniform ${t}thr dev IOPS" "$ui" "$fi_" - - \
			"base = fio QD $qd IOPS (randread 4k O_DIRECT io_uring, spill file); $(mrows "$ur") rows/s, $(awk -v f="$uf" 'BEGIN { printf "%.1f%%", 100 * f }') from the device; p50 batch of $SPILL_BATCH $(awk -v p="$up" 'BEGIN { printf "%.1f", p / 1e3 }') ms; per-run ratios$(echo "$ux" | tr -s ' ' '/' | sed 's,^/, ,'); target >= 0.8x: $(meets "$(ratio "$ui" "$fi_")" 0.8)"
		result spill "gather zipf ${t}thr dev IOPS" "$zi" "$fi_" - - \
			"base = fio QD $qd (the runs above); $(mrows "$zr") rows/s, $(awk -v f="$zf" 'BEGIN { printf "%.1f%%", 100 * f }') from the device; p50 batch $(awk -v p="$zp" 'BEGIN { printf "%.1f", p / 1e3 }') ms"
	done
	fi_=$(med $f1_i); fp=$(med $f1_p)
	[ $have_fio = 1 ] || { fi_=-; fp=-; }
	result spill "pread O_DIRECT 1thr dev IOPS" "$(med $p_i)" "$fi_" "$(med $p_p)" "$fp" \
		"base = fio QD 1; $(mrows "$(med $p_r)") rows/s, $(awk -v f="$(med $p_f)" 'BEGIN { printf "%.1f%%", 100 * f }') from the device; p50 per row (FUSE round trip) vs fio p50 clat; per-run ratios$(echo "$p_x" | tr -s ' ' '/' | sed 's,^/, ,')"
	say "  over all runs: uniform gathers promoted $u_pr rows; Zipf gathers promoted $z_pr rows (read twice from the device)," \
		"the mover re-spilled $z_mv rows in $z_wr device writes meanwhile"
	t=$(now)
	umount_pool "$SPID" "$SMNT"
	say "  clean unmount: $(since "$t") s"
	rm -f "$W/spillpool" "$SPILL_FILE"
	rmdir "$SMNT" "$SW"
	SW=""
}

# capacity (issue 12): how large a table a small pool holds with the spill
# tier, what a spilled row costs the pool, and how fast spilled rows stream.
# A CAP_POOL_SIZE pool on /dev/shm, row cache CAP_CACHE, a spill file of
# CAP_SPILL_SIZE in DISK_DIR, the mover's watermarks CAP_HIGH/CAP_LOW (the
# daemon's defaults unless set).  For each row size (CAP_DIMS f32), on a
# fresh pool, CAP_FILL_RUNS times: spillbench -m fill -E -L writes one table
# front to back in CAP_CHUNK pwrites until the first ENOSPC, CAP_MAX_BYTES
# (or CAP_MAX_ROWS) or CAP_FILL_SECS of writing, then fsyncs; after the
# mover settles: bytes accepted, their ratio to the pool, pool bytes per
# spilled row = (pool.used_bytes - pmem.row_bytes) / rows on the device
# (spill.run_rows if the daemon prints it, else spill.versions), fill MB/s,
# device write amplification (spill.write_bytes / bytes of rows accepted),
# pwrite latency p50/p99/max.  Then kill -9, remount, spillbench -m check
# reads every accepted row back and checks it.  On the table of the last
# row size (256 B), RUNS times: clean remount (row cache empty), drop the
# page cache, `cat` of the table to /dev/null (the issue's measure: a
# reader that does not check what it reads; the rows were checked after
# the kill -9) against dd iflag=direct bs=1M of as many bytes of the spill
# file (target >= 0.5x), with the device reads it took; then RUNS x CAP_SECS s
# of gathers of SPILL_BATCH uniform ids (spillbench -P): device reads per
# spilled row (target <= 1.1) and their distribution over the batches.

# cap_mount: mount $W/cappool at $CMNT with the section's options (sets CPID)
cap_mount() {
	cm_o="cache_size=$CAP_CACHE,spill=$SW,spill_size=$CAP_SPILL_SIZE"
	[ -n "$CAP_HIGH" ] && cm_o="$cm_o,spill_high=$CAP_HIGH"
	[ -n "$CAP_LOW" ] && cm_o="$cm_o,spill_low=$CAP_LOW"
	[ -n "$CAP_OPTS" ] && cm_o="$cm_o,$CAP_OPTS"
	mount_pool "$W/cappool" "$CMNT" "$cm_o" 1
	CPID=$DPID
}

# cap_crash: SIGKILL the daemon, drop its dead mount, mount the pool again
cap_crash() {
	kill -9 "$CPID" 2>/dev/null
	wait_gone "$CPID" 20 || fail "daemon $CPID still there after SIGKILL"
	wait "$CPID" 2>/dev/null
	fusermount3 -u "$CMNT" 2>/dev/null || fusermount3 -uz "$CMNT" || fail "unmount of the killed daemon's $CMNT"
	forget "$CPID"
	cap_mount
}

# cap_settle: wait (bounded, 30 s) until the mover's counter stops moving
cap_settle() {
	i=0; prev=-1
	while [ $i -lt 120 ]; do
		cur=$(stat_of "$CMNT" spill.moved)
		[ "$cur" = "$prev" ] && break
		prev=$cur; i=$((i + 1)); sleep 0.25
	done
}

# cap_sv KEY: KEY's value in CAP_ST (one read of .embfs/stats)
cap_sv() { echo "$CAP_ST" | awk -v k="$1" '$1 == k { print $2 }'; }

# cap_drop: the pool and its spill file away, mount point kept
cap_drop() {
	rm -f "$W/cappool" "$SW"/embfs-*.spill
}

# drop_caches: the kernel's page cache, if we may (root)
drop_caches() {
	sync
	if [ -w /proc/sys/vm/drop_caches ] && echo 3 >/proc/sys/vm/drop_caches 2>/dev/null; then
		return 0
	fi
	return 1
}

section_capacity() {
	spillbench_start
	pool_b=$(numfmt --from=iec "$CAP_POOL_SIZE") || fail "bad CAP_POOL_SIZE"
	spill_b=$(numfmt --from=iec "$CAP_SPILL_SIZE") || fail "bad CAP_SPILL_SIZE"
	maxb=$(numfmt --from=iec "$CAP_MAX_BYTES") || fail "bad CAP_MAX_BYTES"
	chunk=$(numfmt --from=iec "$CAP_CHUNK") || fail "bad CAP_CHUNK"
	marks="spill_high=${CAP_HIGH:-default} spill_low=${CAP_LOW:-default}"
	say "capacity: pool $CAP_POOL_SIZE on /dev/shm, row cache $CAP_CACHE, spill file $CAP_SPILL_SIZE in $DISK_DIR, $marks;" \
		"per row size (f32 dims $CAP_DIMS) $CAP_FILL_RUNS fill(s) until ENOSPC or ${CAP_MAX_ROWS:-$CAP_MAX_BYTES}$([ -n "$CAP_MAX_ROWS" ] && echo " rows") or $CAP_FILL_SECS s" \
		"($CAP_CHUNK pwrites + fsync), kill -9, remount, check every row; then on the last: sequential read vs dd O_DIRECT and uniform gathers, $RUNS runs"
	if [ ! -c /dev/fuse ] || ! command -v fusermount3 >/dev/null; then
		say "  no FUSE; skipped"
		result capacity "skipped" - - - - "no FUSE"
		return
	fi
	# the spill file (CAP_SPILL_SIZE) + 512 MiB, the pool + 256 MiB
	room capacity "$DISK_DIR" $(((spill_b >> 20) + 512)) && room capacity /dev/shm $(((pool_b >> 20) + 256)) || return
	SW=$(mktemp -d "$DISK_DIR/embfs-bench-spill.XXXXXX") || fail "mktemp in $DISK_DIR"
	CMNT=$W/capmnt
	mkdir -p "$CMNT"
	last_dim=$(echo $CAP_DIMS | awk '{ print $NF }')
	for dim in $CAP_DIMS; do
		rs=$((dim * 4))
		maxr=${CAP_MAX_ROWS:-$((maxb / rs))}
		t_dim=$(now)
		acc_l=""; mbs_l=""; rps_l=""; pr_l=""; wa_l=""; wad_l=""; p50_l=""; p99_l=""; max_l=""; ck_l=""; stops=""; pv_l=""
		fr=1
		while [ $fr -le "$CAP_FILL_RUNS" ]; do
			"$MKFS" -f -s "$CAP_POOL_SIZE" -t "cap.emb:$dim:f32" "$W/cappool" >/dev/null || fail "mkfs.embfs cappool"
			cap_mount
			[ "$(getfattr --only-values -n user.embfs.row_size "$CMNT/cap.emb" 2>/dev/null)" = "$rs" ] ||
				fail "cap.emb row size is not $rs"
			o=$("$SPB" -m fill -E -L -T "$CAP_FILL_SECS" -c "$chunk" -r "$rs" -n "$maxr" "$CMNT/cap.emb") ||
				fail "spillbench fill of $rs-byte rows"
			echo "capacity: $o" >>"$W/runs.log"
			acc=$(field "$o" rows); accb=$((acc * rs)); stop=$(field "$o" stop)
			cap_settle
			CAP_ST=$(cat "$CMNT/.embfs/stats")
			used=$(cap_sv pool.used_bytes); rowb=$(cap_sv pmem.row_bytes); nver=$(cap_sv pmem.versions)
			dev=$(cap_sv spill.run_rows); devk=spill.run_rows
			[ -n "$dev" ] || { dev=$(cap_sv spill.versions); devk=spill.versions; }
			wb=$(cap_sv spill.write_bytes); nrows=$(cap_sv rows)
			[ "${nrows:-0}" -ge "$acc" ] || fail "after the fill of $rs-byte rows the pool holds ${nrows:-?} rows, $acc were accepted"
			per=$(awk -v u="$used" -v r="$rowb" -v n="$dev" 'BEGIN { if (n > 0) printf "%.1f", (u - r) / n; else print "-" }')
			pv=$(awk -v b="$rowb" -v n="$nver" -v r="$rs" 'BEGIN { if (n > 0) printf "%.1f", b / n - r; else print "-" }')
			wa=$(awk -v w="${wb:-0}" -v a="$accb" 'BEGIN { if (a > 0) printf "%.2f", w / a; else print "-" }')
			wad=$(awk -v w="${wb:-0}" -v d="$dev" -v r="$rs" 'BEGIN { if (d > 0) printf "%.2f", w / (d * r); else print "-" }')
			say "  $rs-B rows fill $fr/$CAP_FILL_RUNS: accepted $acc rows = $((accb >> 20)) MiB = $(ratio "$accb" "$pool_b")x the pool" \
				"(stop: $stop after $(field "$o" secs) s), $(field "$o" mb_per_s) MB/s, pwrite $CAP_CHUNK p50/p99/max" \
				"$(field "$o" lat_p50_us)/$(field "$o" lat_p99_us)/$(field "$o" lat_max_us) us, $(field "$o" writer_waits) writer waits"
			say "    settled: $dev rows on the device ($devk, $(pct "$dev" "$acc")), $nver versions in the pool" \
				"(${pv} B each beyond the row); pool used $((used >> 20)) MiB of $((pool_b >> 20)), row versions $((rowb >> 20)) MiB:" \
				"$per B of pool per spilled row; device wrote $((${wb:-0} >> 20)) MiB = ${wa}x the rows accepted, ${wad}x the rows on it"
			ck="none"
			if [ "$acc" -gt 0 ]; then
				cap_crash
				[ "$(stat_of "$CMNT" rows)" -ge "$acc" ] || fail "after kill -9 and remount the pool holds $(stat_of "$CMNT" rows) rows, $acc were accepted"
				c=$("$SPB" -m check -r "$rs" -n "$acc" "$CMNT/cap.emb") ||
					fail "after kill -9 and remount, the $acc accepted $rs-byte rows do not read back right"
				echo "capacity: $c" >>"$W/runs.log"
				ck=$(field "$c" mb_per_s)
				say "    kill -9, remount: all $acc rows read back right ($(field "$c" secs) s, $ck MB/s," \
					"$(field "$c" dev_ios) device reads for $(field "$c" dev_rows) rows from the device)"
			fi
			acc_l="$acc_l $acc"; mbs_l="$mbs_l $(field "$o" mb_per_s)"; rps_l="$rps_l $(field "$o" rows_per_s)"
			pr_l="$pr_l $per"; wa_l="$wa_l $wa"; wad_l="$wad_l $wad"; pv_l="$pv_l $pv"; ck_l="$ck_l $ck"
			p50_l="$p50_l $(field "$o" lat_p50_us)"; p99_l="$p99_l $(field "$o" lat_p99_us)"; max_l="$max_l $(field "$o" lat_max_us)"
			stops="$stops $stop"
			if [ "$dim" = "$last_dim" ] && [ $fr = "$CAP_FILL_RUNS" ]; then
				CAP_ROWS=$acc
			else
				umount_pool "$CPID" "$CMNT"
				cap_drop
			fi
			fr=$((fr + 1))
		done
		acc=$(med $acc_l); accb=$(awk -v a="$acc" -v r="$rs" 'BEGIN { printf "%.0f", a * r }')
		per=$(med $pr_l)
		tgt=""
		[ "$rs" = 256 ] && tgt="; target 16x (1 GiB in 64 MiB): $(meets "$(ratio "$accb" "$pool_b")" 16), <= 8 B/spilled row: $(awk -v p="$per" 'BEGIN { print (p != "-" && p + 0 <= 8) ? "met" : "MISSED" }')"
		result capacity "${rs}B rows: table that fits" - - - - \
			"$(count "$acc") rows = $(awk -v b="$accb" 'BEGIN { printf "%.1f", b / 1048576 }') MiB = $(ratio "$accb" "$pool_b")x pool (stop:$(echo $stops | tr ' ' ',')); $per B pool per spilled row, $(med $pv_l) B per pool version beyond the row (pmem.row_bytes / pmem.versions - row size; index not counted); exact after kill -9 (check $(med $ck_l) MB/s)$tgt"
		result capacity "${rs}B rows: fill ${CAP_CHUNK} pwrite" "$(med $rps_l)" - "$(med $p50_l)" - \
			"$(med $mbs_l) MB/s incl. fsync; device write amp $(med $wa_l)x the rows accepted ($(med $wad_l)x the rows on the device); pwrite p99 $(med $p99_l)us max $(med $max_l)us"
		say "  ($rs-B rows: $(since "$t_dim") s)"
	done

	rs=$((last_dim * 4)); tb=$((CAP_ROWS * rs))
	if [ "$CAP_ROWS" -lt "$SPILL_BATCH" ]; then
		say "  the $rs-B table holds $CAP_ROWS rows: no sequential read or gathers"
		result capacity "${rs}B seq read, gathers" - - - - "skipped: $CAP_ROWS rows stored"
		umount_pool "$CPID" "$CMNT"
		cap_drop
		rmdir "$CMNT" "$SW"
		SW=""
		return
	fi
	# sequential read of the last table, row cache and page cache empty,
	# against dd O_DIRECT of as many bytes of the spill file
	SPILL_FILE=$(stat_of "$CMNT" spill.path)
	[ -f "$SPILL_FILE" ] || [ -b "$SPILL_FILE" ] || fail "no spill file (spill.path '$SPILL_FILE')"
	fp=$(stat_of "$CMNT" spill.footprint_bytes)
	# dd reads only what the device holds: unwritten (fallocated) extents read as zeros without I/O
	db=$tb
	[ -n "$fp" ] && [ "$fp" -gt 0 ] && [ "$fp" -lt "$db" ] && db=$fp
	cnt=$((db >> 20)); [ "$cnt" -ge 1 ] || cnt=1
	dc=1
	s_r=""; d_r=""; x_l=""; ios_l=""; amp_l=""; drow_l=""
	n=1
	while [ $n -le "$RUNS" ]; do
		umount_pool "$CPID" "$CMNT"
		drop_caches || dc=0
		cap_mount
		for side in $( [ $((n % 2)) = 1 ] && echo "embfs dd" || echo "dd embfs"); do
			if [ "$side" = embfs ]; then
				# `cat` as the issue says (its reads are not checked here:
				# every row was checked after the kill -9 above)
				i0=$(stat_of "$CMNT" spill.read_ios); b0=$(stat_of "$CMNT" spill.read_bytes)
				r0=$(stat_of "$CMNT" spill.rows_read)
				t=$(now)
				cat "$CMNT/cap.emb" >/dev/null || fail "cat of the spilled table"
				csec=$(since "$t")
				c="secs=$csec mb_per_s=$(awk -v b="$tb" -v s="$csec" 'BEGIN { printf "%.1f", b / s / 1e6 }')"
				c="$c dev_ios=$(($(stat_of "$CMNT" spill.read_ios) - i0))"
				c="$c dev_read_bytes=$(($(stat_of "$CMNT" spill.read_bytes) - b0))"
				c="$c dev_rows=$(($(stat_of "$CMNT" spill.rows_read) - r0))"
				echo "capacity seq: cat $c" >>"$W/runs.log"
			else
				t=$(now)
				dd if="$SPILL_FILE" iflag=direct bs=1M count="$cnt" of=/dev/null status=none || fail "dd of the spill file"
				dsec=$(since "$t")
				dmb=$(awk -v c="$cnt" -v s="$dsec" 'BEGIN { printf "%.1f", c * 1048576 / s / 1e6 }')
				echo "capacity seq: dd iflag=direct bs=1M count=$cnt secs=$dsec mb_per_s=$dmb" >>"$W/runs.log"
			fi
		done
		smb=$(field "$c" mb_per_s)
		x=$(ratio "$smb" "$dmb")
		# device bytes read per byte of the rows that came from the device
		amp=$(awk -v b="$(field "$c" dev_read_bytes)" -v d="$(field "$c" dev_rows)" -v r="$rs" 'BEGIN { if (d > 0) printf "%.2f", b / (d * r); else print "-" }')
		s_r="$s_r $smb"; d_r="$d_r $dmb"; x_l="$x_l $x"; ios_l="$ios_l $(field "$c" dev_ios)"; amp_l="$amp_l $amp"
		drow_l="$drow_l $(field "$c" dev_rows)"
		say "  seq read run $n/$RUNS: cat $smb MB/s ($(field "$c" secs) s; $(field "$c" dev_ios) device reads," \
			"$(($(field "$c" dev_read_bytes) >> 20)) MiB for $(field "$c" dev_rows) rows from the device: ${amp}x their bytes)" \
			"| dd O_DIRECT 1M $dmb MB/s ($cnt MiB); ratio $x"
		n=$((n + 1))
	done
	[ $dc = 1 ] || say "  (could not write /proc/sys/vm/drop_caches: the page cache was not dropped)"
	sm=$(med $s_r); dm=$(med $d_r)
	result capacity "${rs}B seq read (cat), remount" "$(awk -v m="$sm" -v r="$rs" 'BEGIN { printf "%.0f", m * 1e6 / r }')" \
		"$(awk -v m="$dm" -v r="$rs" 'BEGIN { printf "%.0f", m * 1e6 / r }')" - - \
		"base = dd iflag=direct bs=1M of the spill file; cat $sm vs dd $dm MB/s, $(awk -v b="$tb" 'BEGIN { printf "%.0f", b / 1048576 }') MiB; $(med $ios_l) device reads for $(med $drow_l) rows from the device, read amp $(med $amp_l)x (device bytes / their bytes); per-run ratios$(echo "$x_l" | tr -s ' ' '/' | sed 's,^/, ,'); target >= 0.5x: $(meets "$(ratio "$sm" "$dm")" 0.5)"

	# random gathers of spilled rows: device reads per row read from it;
	# after a clean remount, so that the sequential reads above leave no
	# heat behind (rows read in every run would be promoted)
	umount_pool "$CPID" "$CMNT"
	cap_mount
	g_r=""; g_pr=""; g_50=""; g_99=""; g_mx=0; g_f=""; g_pro=0
	n=1
	while [ $n -le "$RUNS" ]; do
		o=$("$SPB" -m gather -u -P -r "$rs" -n "$CAP_ROWS" -b "$SPILL_BATCH" -t 1 -d "$CAP_SECS" -s "$((SEED * 1000 + n))" "$CMNT/cap.emb") ||
			fail "spillbench gather (capacity)"
		echo "capacity gather: $o" >>"$W/runs.log"
		pr=$(awk -v i="$(field "$o" dev_ios)" -v r="$(field "$o" dev_rows)" 'BEGIN { if (r > 0) printf "%.3f", i / r; else print "-" }')
		g_r="$g_r $(field "$o" rows_per_s)"; g_pr="$g_pr $pr"; g_f="$g_f $(field "$o" dev_frac)"
		g_50="$g_50 $(field "$o" dev_per_row_p50)"; g_99="$g_99 $(field "$o" dev_per_row_p99)"
		g_mx=$(awk -v a="$g_mx" -v b="$(field "$o" dev_per_row_max)" 'BEGIN { print (b + 0 > a + 0) ? b : a }')
		g_pro=$((g_pro + $(field "$o" promoted)))
		say "  gather uniform run $n/$RUNS: $(mrows "$(field "$o" rows_per_s)") rows/s, device rows (spill.rows_read) $(pct "$(field "$o" dev_rows)" "$(field "$o" rows_read)") of the rows gathered," \
			"$pr device reads per such row (per batch p50/p99/max $(field "$o" dev_per_row_p50)/$(field "$o" dev_per_row_p99)/$(field "$o" dev_per_row_max)," \
			"$(field "$o" dev_batches) batches), promoted $(field "$o" promoted)"
		n=$((n + 1))
	done
	gm=$(med $g_pr)
	result capacity "${rs}B gather uniform 1thr" "$(med $g_r)" - - - \
		"$gm device reads per row read from the device (spill.read_ios / spill.rows_read), per batch p50 $(med $g_50) p99 $(med $g_99) max $g_mx; target <= 1.1: $(awk -v g="$gm" 'BEGIN { print (g != "-" && g + 0 <= 1.1) ? "met" : "MISSED" }'); spill.rows_read = $(awk -v f="$(med $g_f)" 'BEGIN { printf "%.1f%%", 100 * f }') of the rows gathered; promoted $g_pro"
	t=$(now)
	umount_pool "$CPID" "$CMNT"
	say "  clean unmount: $(since "$t") s"
	cap_drop
	rmdir "$CMNT" "$SW"
	SW=""
}

# overhead (issue 12): what a row kept in the pool costs it beyond the row
ovh_used() { stat_of "$OMNT" pool.used_bytes; }
section_overhead() {
	ensure_w
	say ""
	say "overhead: pool bytes per row kept in the pool beyond the row (pool on /dev/shm, no spill;" \
		"rows dd'd in 1 MiB writes through the default row cache, fsync of the root); f32 dims $OVH_DIMS, rows $OVH_ROWS"
	OMNT=$W/ovhmnt
	mkdir -p "$OMNT"
	maxr=0
	for n in $OVH_ROWS; do [ "$n" -gt "$maxr" ] && maxr=$n; done
	last_dim=$(echo $OVH_DIMS | awk '{ print $NF }')
	room overhead /dev/shm $(((maxr * (last_dim * 4 + 64) * 2 >> 20) + 256)) || return
	for dim in $OVH_DIMS; do
		rs=$((dim * 4))
		per_l=""; idx_l=""; hdr=""
		for want in $OVH_ROWS; do
			n=$want
			psz=$(((n * (rs + 64) * 2 >> 20) + 64))M
			"$MKFS" -f -s "$psz" -t "o.emb:$dim:f32" "$W/ovhpool" >/dev/null || fail "mkfs.embfs ovhpool"
			mount_pool "$W/ovhpool" "$OMNT" "" 1
			u0=$(ovh_used)
			dd if=/dev/zero of="$OMNT/o.emb" bs=1M count=$((n * rs >> 20)) status=none || fail "dd into o.emb"
			sync "$OMNT" || fail "fsync of $OMNT"
			n=$(stat_of "$OMNT" rows)
			u=$(ovh_used); ib=$(stat_of "$OMNT" pool.index_bytes); vb=$(stat_of "$OMNT" pmem.row_bytes)
			per=$(awk -v u="$u" -v u0="$u0" -v n="$n" -v r="$rs" 'BEGIN { printf "%.1f", (u - u0) / n - r }')
			idx=$(awk -v b="$ib" -v n="$n" 'BEGIN { printf "%.1f", b / n }')
			hdr=$(awk -v b="$vb" -v n="$n" -v r="$rs" 'BEGIN { printf "%.1f", b / n - r }')
			echo "overhead: rs=$rs rows=$n used=$u empty=$u0 index=$ib row_bytes=$vb per_row=$per" >>"$W/runs.log"
			say "  $rs-B rows, $(count "$n") rows: $per B per row beyond the row (version header and slot rounding $hdr, index $idx, the rest slabs' and libpmemobj's)"
			per_l="$per_l $per"; idx_l="$idx_l $idx"
			if [ "$dim" = "$last_dim" ] && [ "$want" = "$(echo $OVH_ROWS | awk '{ print $NF }')" ]; then
				# the last table: a snapshot, every row rewritten, the snapshot dropped
				mkdir "$OMNT/.snapshots/o1" || fail "mkdir of a snapshot"
				dd if=/dev/zero of="$OMNT/o.emb" bs=1M count=$((n * rs >> 20)) conv=notrunc status=none ||
					fail "rewrite of o.emb"
				sync "$OMNT" || fail "fsync of $OMNT"
				us=$(ovh_used)
				rmdir "$OMNT/.snapshots/o1" || fail "rmdir of the snapshot"
				sync "$OMNT"
				ud=$(ovh_used)
				say "  with a snapshot holding every row's first version: $(awk -v a="$us" -v b="$u" -v n="$n" 'BEGIN { printf "%.1f", (a - b) / n }') B more per row (the kept version and its link);" \
					"after dropping it: $(awk -v a="$ud" -v b="$u" -v n="$n" 'BEGIN { printf "%+.1f", (a - b) / n }') B per row against before the snapshot"
			fi
			umount_pool "$DPID" "$OMNT"
			rm -f "$W/ovhpool"
		done
		lo=$(echo $per_l | tr ' ' '\n' | sort -g | head -1); hi=$(echo $per_l | tr ' ' '\n' | sort -g | tail -1)
		result overhead "${rs}B rows kept in the pool" - - - - \
			"$(med $per_l) B per row beyond the row (median over $(echo $OVH_ROWS | wc -w) table sizes; $lo..$hi), index $(med $idx_l) B; target <= 32 B: $(awk -v h="$hi" 'BEGIN { print (h + 0 <= 32) ? "met" : "MISSED" }') (layout 2: ~70 B for 64-B rows)"
	done
	rmdir "$OMNT"
}

# spillsnap (issue 12): the snap section's training loop over a table that
# is mostly on the spill device (sorted runs): a snapshot every SNAP_EVERY
# batches vs none, pairs alternating which goes first
section_spillsnap() {
	SB="$BUILD/bench/snapbench"
	SPB=$BUILD/bench/spillbench
	[ -x "$SB" ] && [ -x "$SPB" ] || fail "snapbench or spillbench not built (run make)"
	ensure_w
	say ""
	ssb=$((SS_ROWS * 256))
	say "spillsnap: a table of $SS_ROWS rows x 256 B ($((ssb >> 20)) MiB) in a $SS_POOL_SIZE pool on /dev/shm" \
		"+ 8 MiB row cache + spill file in $DISK_DIR; $SNAP_BATCHES batches of 4096 Zipf rows (pread + pwrite each)," \
		"a snapshot every $SNAP_EVERY batches vs none, $RUNS pairs"
	room spillsnap "$DISK_DIR" 3072 || return
	SW=$(mktemp -d "$DISK_DIR/embfs-bench-spillsnap.XXXXXX") || fail "mktemp in $DISK_DIR"
	"$MKFS" -f -s "$SS_POOL_SIZE" -t "ss.emb:64:f32" "$W/sspool" >/dev/null || fail "mkfs.embfs sspool"
	mkdir -p "$W/ssmnt"
	SSM=$W/ssmnt
	mount_pool "$W/sspool" "$SSM" "cache_size=8M,spill=$SW,spill_size=2G" 1
	SSPID=$DPID
	o=$("$SPB" -m fill -r 256 -n "$SS_ROWS" "$SSM/ss.emb") || fail "spillbench fill (spillsnap)"
	echo "$o" >>"$W/runs.log"
	# the mover and the merge thread settle: the daemon idle (under 5% of
	# a core over a second) and no eviction meanwhile, or 2 minutes
	i=0; prev=-1; hz=$(getconf CLK_TCK)
	while [ $i -lt 120 ]; do
		c0=$(awk '{ print $14 + $15 }' "/proc/$SSPID/stat")
		cur=$(stat_of "$SSM" spill.run_evicted)
		sleep 1
		c1=$(awk '{ print $14 + $15 }' "/proc/$SSPID/stat")
		[ "$cur" = "$(stat_of "$SSM" spill.run_evicted)" ] && [ $((c1 - c0)) -le $((hz / 20)) ] && break
		i=$((i + 1))
	done
	onr=$(stat_of "$SSM" spill.run_rows)
	say "  filled: $(field "$o" mb_per_s) MB/s; $onr rows in runs ($(pct "$onr" "$SS_ROWS") of the table)"
	RUNS_SAVED=$RUNS; RUNS=$SS_PAIRS
	train_pairs "$SSM" ss.emb "$SS_ROWS" spillsnap
	RUNS=$RUNS_SAVED
	mn=$(med $tn); ms=$(med $ts)
	# the overhead from the median of the pairs' ratios: a pair runs back to
	# back, so the machine's drift between pairs cancels out of it
	rs=$(awk -v a="$ts" -v b="$tn" 'BEGIN { n = split(a, x, " "); split(b, y, " "); for (i = 1; i <= n; i++) if (y[i] > 0) printf "%.3f ", x[i] / y[i] }')
	ov=$(awk -v r="$(med $rs)" 'BEGIN { printf "%.1f", 100 * (1 - r) }')
	say "  device reads $(stat_of "$SSM" spill.read_ios), runs $(stat_of "$SSM" spill.runs), merges $(stat_of "$SSM" spill.merges)"
	result spillsnap "train 1thr, snapshot every $SNAP_EVERY" "$ms" "$mn" - - \
		"base = no snapshots; $(pct "$onr" "$SS_ROWS") of the table in runs; throughput overhead ${ov}% (median of the ratios of $SS_PAIRS adjacent pairs:$(echo " $rs")) (target <= 3%: $(awk -v o="$ov" 'BEGIN { print o <= 3 ? "met" : "MISSED" }'))"
	umount_pool "$SSPID" "$SSM"
	rm -rf "$W/sspool" "$SW"
	rmdir "$SSM"
	SW=""
}

# missrate: miss rate of the cache library (CLOCK, 64 shards as in the daemon)
# against an exact LRU of the same number of rows, in process (no FUSE)
section_missrate() {
	say ""
	a=$("$ROWBENCH" -Z -n "$ROWS" | grep 'rank 1..6')
	b=$("$MISSRATE" -P -n "$ROWS")
	[ "$a" = "$b" ] || fail "missrate and rowbench map ranks to rows differently"
	one=""
	[ "$MR_ONE_SHARD" = 1 ] && one=-1
	say "missrate: cache library over a fake store vs exact LRU, $ROWS rows x $ROW_SIZE B, 64 shards$([ -n "$one" ] && echo " (and 1 for Zipf)");" \
		"Zipf(0.99): $MR_WARMUP warm-up + $MR_ACCESSES counted accesses, uniform: $MR_UNIFORM_WARMUP + $MR_UNIFORM_ACCESSES"
	t=$(now)
	"$MISSRATE" -n "$ROWS" -r "$ROW_SIZE" -s "$SEED" -d zipf -a "$MR_ACCESSES" -w "$MR_WARMUP" $one >"$W/mr.zipf" ||
		fail "missrate zipf"
	"$MISSRATE" -n "$ROWS" -r "$ROW_SIZE" -s "$SEED" -d uniform -a "$MR_UNIFORM_ACCESSES" -w "$MR_UNIFORM_WARMUP" \
		>"$W/mr.uniform" || fail "missrate uniform"
	grep -v '^missrate dist=' "$W/mr.zipf" | sed 's/^/  /'
	grep -v '^missrate dist=' "$W/mr.uniform" | grep -v '^ids ' | grep -v '^missrate:' | sed 's/^/  /'
	say "  ($(since "$t") s)"
	cat "$W/mr.zipf" "$W/mr.uniform" | grep '^missrate dist=' >>"$W/runs.log"
	# one summary row per size: both streams in the note
	grep '^missrate dist=zipf' "$W/mr.zipf" | while read -r line; do
		p=$(field "$line" pct)
		u=$(grep "^missrate dist=uniform pct=$p " "$W/mr.uniform")
		fl=""
		[ "$(field "$line" flag)" = 1 ] && fl=" CLOCK > LRU + 2 pts!"
		result missrate "size $p% ($(field "$line" rows) rows)" - - - - \
			"miss% CLOCK/LRU: zipf $(field "$line" clock)/$(field "$line" lru) ($(field "$line" diff)${one:+; 1-shard CLOCK $(field "$line" clock1)})$fl, uniform $(field "$u" clock)/$(field "$u" lru)"
	done
}

# cachewalk: the cache's batched gather in process (tests/bench/cachewalk.c),
# without FUSE: what gathermin's embfs side spends in its walk, against a
# plain gather of the same ids from an array.  No target of its own
# (gathermin has it); it says how much of a change to the walk reaches the
# daemon.
section_cachewalk() {
	cw=$BUILD/bench/cachewalk
	[ -x "$cw" ] || fail "$cw not built (run make)"
	ensure_w
	say ""
	need=$((ROWS * (ROW_SIZE + 40) / 1048576 * 17 / 16 + ROWS * ROW_SIZE / 1048576 + 512))
	avail_mb=$(mem_avail_mb)
	if [ "${avail_mb:-0}" -lt "$need" ]; then
		say "cachewalk: $avail_mb MiB of memory available, need ~$need; skipped"
		result cachewalk "skipped" - - - - "not enough memory"
		return
	fi
	say "cachewalk: cache_read_rows (every row cached) against memcpy from an array, in process," \
		"batches of 4096 Zipf(0.99) ids over $ROWS rows of $ROW_SIZE B, ${CW_RUNS:-3} runs; then" \
		"cache_write_rows against memcpy into the array"
	for mode in read write; do
		cv=""; av=""; rv=""
		n=1
		while [ $n -le "${CW_RUNS:-3}" ]; do
			o=$("$cw" $([ $mode = write ] && echo -w) -n "$ROWS" -r "$ROW_SIZE" -b 4096 -B 2000 -k 2 \
				-s "$((SEED * 100 + n))") || fail "cachewalk $mode"
			echo "$o" >>"$W/runs.log"
			cu=$(field "$o" cache_us); au=$(field "$o" array_us); r=$(field "$o" ratio)
			say "  $mode run $n: cache $cu us a batch, array $au us, array/cache $r"
			cv="$cv $cu"; av="$av $au"; rv="$rv $r"
			n=$((n + 1))
		done
		cm=$(med $cv); am=$(med $av)
		result cachewalk "4096-id ${mode}s, in process" "$(awk -v u="$cm" 'BEGIN { printf "%.0f", 4096e6 / u }')" \
			"$(awk -v u="$am" 'BEGIN { printf "%.0f", 4096e6 / u }')" "$cm" "$am" \
			"base = memcpy $([ $mode = write ] && echo into || echo from) a DRAM array, same ids; per-run ratios$(echo "$rv" | tr -s ' ' ' ')"
	done
}

trap cleanup EXIT
trap 'exit 1' INT TERM HUP

# section NAME: run section_NAME and say how long it took
section() {
	s_t=$(now)
	"section_$1"
	say "($1: $(since "$s_t") s)"
}

say "embfs bench: $ROWS rows x $ROW_SIZE B, $RUNS runs x $SECS s, threads: $THREADS, $(nproc) cores"
# SECTIONS="setup snap teardown" (or BENCH_SECTIONS) runs a subset (setup
# first, teardown after the sections that use its mount)
for s_name in ${SECTIONS:-${BENCH_SECTIONS:-setup rowio hit batch pybatch snap teardown gathermin cachewalk snapscale snapwb cache1 verify durable umount load spilltrain spill capacity overhead spillsnap missrate restore dist train}}; do
	section "$s_name"
done

say ""
say "summary (medians of $RUNS runs; M rows/s; ratio = mount / base; base = the sparse file on /dev/shm"
say "unless the note says otherwise; miss rates in %):"
summary | tee "$BENCH_OUT"
say "total bench time: $(since "$T_START") s"
