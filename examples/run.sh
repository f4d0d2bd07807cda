#!/bin/sh
# examples/run.sh c|python|torch  (make example-train, example-python, example-torch)
# Formats a file-backed pool, mounts it, trains the click model of
# examples/train.c (or train.py) through MNT/.embfs/rows, serves
# recommendations with examples/serve.py from the live tables and from the
# newest snapshot (when the mount has .snapshots), shows the batch counters,
# and unmounts.  Leaves nothing behind.
# torch: trains examples/dlrm.py (DLRM-style, python3-torch, the embfs
# package) for STEPS steps (default 300) with a snapshot every EVERY (50),
# then rolls back to the middle snapshot and trains the second half again
# (dlrm.py --resume), and checks that its loss lines and final state are
# those of the first run, bit for bit.
set -e
TOP=$(cd "$(dirname "$0")/.." && pwd)
B=${BUILD:-$TOP/build}
PY=/usr/bin/python3 # Debian's, with python3-numpy (tests/deps.sh installs both)
case "$1" in
c | python | torch) ;;
*) echo "usage: $0 c|python|torch" >&2; exit 2 ;;
esac
D=$(mktemp -d "${TMPDIR:-/tmp}/embfs-example.XXXXXX")
POOL=$D/pool.embfs MNT=$D/mnt PID=
mounted() { awk -v m="$MNT" '$2 == m { f = 1 } END { exit !f }' /proc/mounts; }
cleanup() {
	if mounted; then
		fusermount3 -u "$MNT" 2>/dev/null || fusermount3 -uz "$MNT"
	fi
	[ -n "$PID" ] && wait "$PID" 2>/dev/null
	rm -rf "$D"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }

if [ "$1" = torch ]; then
	step mkfs.embfs -s 1G -L example $POOL
	"$B/mkfs.embfs" -s 1G -L example "$POOL"
else
	step mkfs.embfs -s 256M -L example -t user.emb:17 -t item.emb:17 $POOL
	"$B/mkfs.embfs" -s 256M -L example -t user.emb:17 -t item.emb:17 "$POOL"
fi
mkdir -p "$MNT"
step embfs -f $POOL $MNT "&"
"$B/embfs" -f "$POOL" "$MNT" &
PID=$!
i=0
until mounted; do
	kill -0 "$PID" 2>/dev/null || { echo "embfs exited" >&2; exit 1; }
	i=$((i + 1))
	[ $i -gt 400 ] && { echo "mount not ready after 20 s" >&2; exit 1; }
	sleep 0.05
done

# run_to FILE COMMAND...: run it, its output shown and kept in FILE; its status
run_to() {
	_f=$1; shift
	{ _rc=0; "$@" || _rc=$?; echo $_rc >"$_f.rc"; } | tee "$_f"
	return "$(cat "$_f.rc")"
}

if [ "$1" = torch ]; then
	STEPS=${STEPS:-300} EVERY=${EVERY:-50}
	K=$((STEPS / 2 / EVERY * EVERY))
	[ "$K" -gt 0 ] || { echo "STEPS $STEPS leaves no snapshot before the middle (EVERY $EVERY)" >&2; exit 2; }
	export PYTHONPATH="$TOP/python${PYTHONPATH:+:$PYTHONPATH}"
	step PYTHONPATH=python $PY examples/dlrm.py $MNT --steps $STEPS --every $EVERY
	run_to "$D/run.txt" "$PY" "$TOP/examples/dlrm.py" "$MNT" --steps "$STEPS" --every "$EVERY"
	step ls $MNT $MNT/.snapshots
	echo "$(ls "$MNT" | tr '\n' ' ')"
	echo "$(ls "$MNT/.snapshots" | tr '\n' ' ')"
	step PYTHONPATH=python $PY examples/dlrm.py $MNT --resume step-$K "  # roll back, train steps $((K + 1))..$STEPS again"
	run_to "$D/resume.txt" "$PY" "$TOP/examples/dlrm.py" "$MNT" --resume "step-$K"
	# the loss lines after step K and the final state, as printed (float reprs)
	awk -v k="$K" '($1 == "step" && $2 > k) || /^final state/' "$D/run.txt" >"$D/want"
	awk '$1 == "step" || /^final state/' "$D/resume.txt" >"$D/got"
	n=$(grep -c '^step' "$D/want" || true)
	if [ "$n" -gt 0 ] && cmp -s "$D/want" "$D/got"; then
		printf '\nresume: bit-exact (%d loss lines and the final state sha256 match)\n' "$n"
	else
		printf '\nresume: NOT bit-exact: uninterrupted run (<) vs resumed (>)\n' >&2
		diff "$D/want" "$D/got" >&2 || true
		exit 1
	fi
elif [ "$1" = c ]; then
	step build/examples/train $MNT 1000 100
	"$B/examples/train" "$MNT" 1000 100
else
	step $PY examples/train.py $MNT --batches 600 --every 100
	"$PY" "$TOP/examples/train.py" "$MNT" --batches 600 --every 100
fi

if [ "$1" = torch ]; then
	: # dlrm.py's tables are not serve.py's user.emb and item.emb
elif "$PY" -c 'import numpy' 2>/dev/null; then
	step $PY examples/serve.py $MNT 0 1 2 "   # live tables, numpy.memmap"
	"$PY" "$TOP/examples/serve.py" "$MNT" 0 1 2
	last=$(ls "$MNT/.snapshots" 2>/dev/null | sed -n 's/^step-\([0-9]*\)$/\1/p' | sort -n | tail -1)
	if [ -n "$last" ]; then
		step $PY examples/serve.py $MNT/.snapshots/step-$last 0 1 2 "   # the newest snapshot"
		"$PY" "$TOP/examples/serve.py" "$MNT/.snapshots/step-$last" 0 1 2
	else
		echo "(no .snapshots on this mount: serving from the live tables only)"
	fi
else
	echo "(no numpy for $PY: skipping serve.py; tests/deps.sh installs python3-numpy)"
fi

step "grep -E '^(batch|prefetch)' $MNT/.embfs/stats"
grep -E '^(batch|prefetch)' "$MNT/.embfs/stats"
step fusermount3 -u $MNT
fusermount3 -u "$MNT"
wait "$PID"
PID=
