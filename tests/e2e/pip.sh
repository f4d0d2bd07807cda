#!/bin/sh
# pip: the Python package installs with pip into a venv, offline (docs/python.md
# "Python and PyTorch"), whichever python3 comes first in PATH.
#  - a venv made by Debian's python3 with --system-site-packages (its numpy,
#    setuptools and wheel), then pip install --no-index --no-build-isolation
#    of a copy of python/ (with include/embfs/version.h beside it, where
#    setup.py reads the version): no network, no PYTHONPATH;
#  - the venv's python, run from elsewhere, imports embfs from the venv,
#    its metadata says the version in version.h, and it writes and reads
#    rows on a real mount.
# Skips (77) only if no venv can be made, saying why.
. "$(dirname "$0")/../lib.sh"

setup
PY=/usr/bin/python3
[ -x "$PY" ] || skip "no $PY"
"$PY" -m venv --system-site-packages "$T/venv" >"$T/venv.err" 2>&1 ||
	skip "cannot make a venv with $PY -m venv (install python3-venv): $(tail -1 "$T/venv.err")"
VPY=$T/venv/bin/python
[ -x "$T/venv/bin/pip" ] || skip "the venv has no pip (python3-venv without ensurepip?)"

# a copy of the tree's parts, so the in-place build leaves the source alone
mkdir -p "$T/src/include/embfs"
cp -r "$TOP/python" "$T/src/python"
cp "$TOP/include/embfs/version.h" "$T/src/include/embfs/"
env -u PYTHONPATH "$T/venv/bin/pip" install --no-index --no-build-isolation --disable-pip-version-check \
	"$T/src/python" >"$T/pip.out" 2>&1 || { cat "$T/pip.out" >&2; fail "pip install --no-index --no-build-isolation"; }
say "$(tail -1 "$T/pip.out")"

want=$(sed -n 's/^#define EMBFS_VERSION "\(.*\)"$/\1/p' "$TOP/include/embfs/version.h")
got=$(cd / && env -u PYTHONPATH "$VPY" -c 'import importlib.metadata as m; print(m.version("embfs"))') ||
	fail "no metadata for embfs in the venv"
[ "$got" = "$want" ] || fail "installed version $got, version.h says $want"
where=$(cd / && env -u PYTHONPATH "$VPY" -c 'import embfs; print(embfs.__file__)') || fail "import embfs in the venv"
case $where in "$T/venv/"*) ;; *) fail "embfs imported from $where, not from the venv" ;; esac
say "embfs $got imported from $where"

mkpool "$T/pool"
mount_pool "$T/pool" "$T/mnt"
(cd / && env -u PYTHONPATH "$VPY" - "$T/mnt" <<'PYEOF') || fail "rows through the installed package"
import sys, numpy as np, embfs
m = embfs.Mount(sys.argv[1])
t = m.create("p.emb", dim=8, dtype="f32")
t.scatter([3, 1000], np.arange(16, dtype=np.float32).reshape(2, 8))
rows, stored = t.gather([3, 5, 1000], present=True)
assert list(stored) == [True, False, True], stored
assert (rows[0] == np.arange(8)).all() and (rows[2] == np.arange(8, 16)).all() and not rows[1].any()
embfs.close_all()
PYEOF
say "scatter and gather through the venv's embfs on a mount"
unmount_pool "$T/mnt"
