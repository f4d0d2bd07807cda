#!/bin/sh
# The Python package (python/embfs, embfs.torch) on real mounts: the
# unittest suites in tests/python (each mounts its own pools and unmounts
# them, also on failure).  Seeds: EMBFS_SEED (printed by each suite).
. "$(dirname "$0")/../lib.sh"
PY=/usr/bin/python3
[ -c /dev/fuse ] || skip "no /dev/fuse"
"$PY" -c 'import numpy' 2>/dev/null || skip "no numpy for $PY (tests/deps.sh installs python3-numpy)"
export BUILD PYTHONPATH="$TOP/python${PYTHONPATH:+:$PYTHONPATH}"
export EMBFS_SEED
cd "$TOP/tests/python" || exit 1
"$PY" -m unittest discover -s . -p 'test_*.py' -v 2>&1 || { seed_line >&2; exit 1; }
