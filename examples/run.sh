#!/bin/sh
# examples/run.sh c|python  (make example-train, make example-python)
# Formats a file-backed pool, mounts it, trains the click model of
# examples/train.c (or train.py) through MNT/.embfs/rows, serves
# recommendations with examples/serve.py from the live tables and from the
# newest snapshot (when the mount has .snapshots), shows the batch counters,
# and unmounts.  Leaves nothing behind.
set -e
TOP=$(cd "$(dirname "$0")/.." && pwd)
B=${BUILD:-$TOP/build}
PY=/usr/bin/python3 # Debian's, with python3-numpy (tests/deps.sh installs both)
case "$1" in
c | python) ;;
*) echo "usage: $0 c|python" >&2; exit 2 ;;
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

step mkfs.embfs -s 256M -L example -t user.emb:17 -t item.emb:17 $POOL
"$B/mkfs.embfs" -s 256M -L example -t user.emb:17 -t item.emb:17 "$POOL"
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

if [ "$1" = c ]; then
	step build/examples/train $MNT 1000 100
	"$B/examples/train" "$MNT" 1000 100
else
	step $PY examples/train.py $MNT --batches 600 --every 100
	"$PY" "$TOP/examples/train.py" "$MNT" --batches 600 --every 100
fi

if "$PY" -c 'import numpy' 2>/dev/null; then
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
