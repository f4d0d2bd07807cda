#!/bin/sh
# Install the Debian packages embfs needs to build, test, bench and run its
# examples, if any is missing.  Called by `make deps` (and so by make test,
# make demo, make bench).  Needs root (or sudo) only when something is missing.
set -e
PKGS="gcc make pkg-config libfuse3-dev fuse3 libpmemobj-dev libpmem-dev liburing-dev libxxhash-dev fio mandoc python3 python3-numpy python3-torch python3-venv python3-pip python3-setuptools python3-wheel attr rsync tar"
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "embfs: installing Debian packages:$missing"
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
