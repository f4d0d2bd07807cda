"""The package's version, from the one place it is kept: EMBFS_VERSION in
include/embfs/version.h (pip builds ./python in place, so the header is at
../include).  An sdist carries it in PKG-INFO instead."""
import os
import re

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))


def version():
    h = os.path.join(HERE, "..", "include", "embfs", "version.h")
    if os.path.exists(h):
        with open(h) as f:
            m = re.search(r'^#define\s+EMBFS_VERSION\s+"([^"]+)"', f.read(), re.M)
        if m:
            return m.group(1)
    pkg = os.path.join(HERE, "PKG-INFO")
    if os.path.exists(pkg):
        with open(pkg) as f:
            m = re.search(r"^Version:\s*(\S+)", f.read(), re.M)
        if m:
            return m.group(1)
    raise RuntimeError("embfs: no version: include/embfs/version.h not found next to python/")


setup(version=version())
