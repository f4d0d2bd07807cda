#!/bin/sh
# examples/dist.sh (make example-dist): examples/dlrm_dist.py on W = 1, 2
# and 4 ranks of this machine, one file-backed pool and mount per rank
# (embfs.dist shards every table over them), STEPS steps (default 40) with
# a global checkpoint every EVERY (10); then on 2 ranks again, rank 1
# SIGKILLed in the middle, the job resumed from the last global checkpoint
# (--resume), and its shards compared with the uninterrupted 2-rank run's:
# they must be the same, bit for bit.  Leaves nothing behind.
set -e
TOP=$(cd "$(dirname "$0")/.." && pwd)
B=${BUILD:-$TOP/build}
PY=/usr/bin/python3
STEPS=${STEPS:-40} EVERY=${EVERY:-10} TABLES=${TABLES:-8} BATCH=${BATCH:-1024}
D=$(mktemp -d "${TMPDIR:-/tmp}/embfs-dist.XXXXXX")
PIDS="" MNTS=""
mounted() { awk -v m="$1" '$2 == m { f = 1 } END { exit !f }' /proc/mounts; }
cleanup() {
	for m in $MNTS; do
		mounted "$m" && { fusermount3 -u "$m" 2>/dev/null || fusermount3 -uz "$m"; }
	done
	for p in $PIDS; do wait "$p" 2>/dev/null || true; done
	rm -rf "$D"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }
export PYTHONPATH="$TOP/python${PYTHONPATH:+:$PYTHONPATH}"

# pools TAG W: W fresh pools mounted; their mounts, comma-separated, in $M
pools() {
	M="" r=0
	while [ $r -lt "$2" ]; do
		p=$D/$1-pool$r m=$D/$1-mnt$r
		"$B/mkfs.embfs" -s 512M -L "$1-$r" "$p" >/dev/null
		mkdir -p "$m"
		"$B/embfs" -f -o cache_size=64M "$p" "$m" &
		PIDS="$PIDS $!" MNTS="$MNTS $m" M="$M,$m"
		i=0
		until mounted "$m"; do
			i=$((i + 1))
			[ $i -gt 400 ] && { echo "mount $m not ready after 20 s" >&2; exit 1; }
			sleep 0.05
		done
		r=$((r + 1))
	done
	M=${M#,}
}

ARGS="--steps $STEPS --every $EVERY --tables $TABLES --batch $BATCH"
for w in 1 2 4; do
	pools w$w $w
	step $PY examples/dlrm_dist.py "<$w mounts>" --manifests DIR $ARGS
	"$PY" "$TOP/examples/dlrm_dist.py" "$M" --manifests "$D/man-w$w" $ARGS | tee "$D/w$w.txt"
done

K=$((STEPS / 2 / EVERY * EVERY))
KILL=$((K + EVERY / 2))
pools job 2
step $PY examples/dlrm_dist.py "<2 mounts>" $ARGS --kill-at $KILL --kill-rank 1 "  # rank 1 dies at step $KILL"
"$PY" "$TOP/examples/dlrm_dist.py" "$M" --manifests "$D/man-job" $ARGS --kill-at "$KILL" --kill-rank 1 || echo "(exit $?: as expected)"
step $PY examples/dlrm_dist.py "<2 mounts>" $ARGS --resume step-$K
"$PY" "$TOP/examples/dlrm_dist.py" "$M" --manifests "$D/man-job" $ARGS --resume "step-$K" | tee "$D/resumed.txt"
grep '^rank .* shard' "$D/w2.txt" | awk '{print $2, $4}' >"$D/want"
grep '^rank .* shard' "$D/resumed.txt" | awk '{print $2, $4}' >"$D/got"
if [ -s "$D/want" ] && cmp -s "$D/want" "$D/got"; then
	printf '\nresume after a killed rank: bit-exact (both shards'"'"' sha256 match the uninterrupted run)\n'
else
	printf '\nresume after a killed rank: NOT bit-exact\n' >&2
	exit 1
fi
