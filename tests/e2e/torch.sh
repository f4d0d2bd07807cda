#!/bin/sh
# examples/dlrm.py (embfs.torch) in small: train 24 steps with a snapshot
# every 8, check dense.pt (a torch.save file on the mount) in the live tree
# and in the snapshots, roll back to step-8 and resume: the loss lines of
# steps 9..24 and the final state must be the uninterrupted run's, bit for
# bit.  The data seed comes from EMBFS_SEED.
. "$(dirname "$0")/../lib.sh"
[ -z "$TMPDIR" ] && [ -d /dev/shm ] && [ -w /dev/shm ] && TMPDIR=/dev/shm && export TMPDIR
PY=/usr/bin/python3
"$PY" -c 'import numpy, torch' 2>/dev/null || skip "$PY lacks numpy or torch (tests/deps.sh installs python3-torch)"
setup
M="$T/m"
export PYTHONPATH="$TOP/python${PYTHONPATH:+:$PYTHONPATH}"
seed=$(rand 1000000)
mkpool "$T/pool" -s 256M
mount_pool "$T/pool" "$M"

say "train steps 1..24 (batch 64, data seed $seed), snapshots step-8, step-16, step-24"
"$PY" "$TOP/examples/dlrm.py" "$M" --steps 24 --every 8 --log 2 --batch 64 --seed "$seed" >"$T/run.txt" 2>&1 ||
	{ cat "$T/run.txt" >&2; fail "dlrm.py"; }
grep -q '^step 24 loss ' "$T/run.txt" || fail "no loss line for step 24"

say "dense.pt: a torch.save file on the mount, whole in the live tree and the snapshots"
size=$(stat -c %s "$M/dense.pt")
[ "$size" -gt 1000000 ] || fail "dense.pt is $size bytes"
[ "$(wc -c <"$M/dense.pt")" -eq "$size" ] || fail "dense.pt reads back $(wc -c <"$M/dense.pt") of $size bytes"
cmp -s "$M/dense.pt" "$M/.snapshots/step-24/dense.pt" || fail "dense.pt differs from the snapshot of the same step"
cmp -s "$M/dense.pt" "$M/.snapshots/step-8/dense.pt" && fail "step-8's dense.pt is the last step's"
"$PY" -c 'import sys, torch; c = torch.load(sys.argv[1]); assert c["step"] == 8, c["step"]' \
	"$M/.snapshots/step-8/dense.pt" || fail "torch.load of step-8's dense.pt"

say "roll back to step-8 and train steps 9..24 again"
"$PY" "$TOP/examples/dlrm.py" "$M" --resume step-8 >"$T/resume.txt" 2>&1 ||
	{ cat "$T/resume.txt" >&2; fail "dlrm.py --resume"; }
awk '($1 == "step" && $2 > 8) || /^final state/' "$T/run.txt" >"$T/want"
awk '$1 == "step" || /^final state/' "$T/resume.txt" >"$T/got"
n=$(grep -c '^step' "$T/want")
[ "$n" -eq 8 ] || fail "expected 8 loss lines after step 8, got $n"
if ! cmp -s "$T/want" "$T/got"; then
	diff "$T/want" "$T/got" >&2
	fail "the resumed run is not the uninterrupted one (< uninterrupted, > resumed)"
fi
[ "$(ls "$M/.snapshots" | sort | tr '\n' ' ')" = "step-16 step-24 step-8 " ] ||
	fail "snapshots after the resume: $(ls "$M/.snapshots" | tr '\n' ' ')"
say "  $n loss lines and the final state sha256 match"
unmount_pool "$M"
