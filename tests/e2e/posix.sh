#!/bin/sh
# POSIX details (pjdfstest): names over 255 bytes get ENAMETOOLONG from every
# call that takes a name (stat, open, create, unlink, rename either way,
# mkdir/rmdir in .snapshots, link, symlink), 255-byte names work; the root
# directory's mtime and ctime move forward on create, unlink and rename,
# .snapshots' on snapshot mkdir and rmdir, and both survive a remount; no
# directory shows 1 Jan 1970.
. "$(dirname "$0")/../lib.sh"
[ -z "$TMPDIR" ] && [ -d /dev/shm ] && [ -w /dev/shm ] && TMPDIR=/dev/shm && export TMPDIR
setup
OPTS=${EMBFS_TEST_OPTS:-}
M="$T/m"
command -v python3 >/dev/null || skip "python3 missing"
# py SCRIPT ARGS...: run a check in Python (errno values, nanosecond times)
py() { python3 -c "$@" || fail "python check failed"; }
expect() { [ "$2" = "$3" ] || fail "$1: expected '$3', got '$2'"; }
# mt DIR: mtime and ctime in ns
mt() { python3 -c 'import os, sys; s = os.stat(sys.argv[1]); print(s.st_mtime_ns, s.st_ctime_ns)' "$1"; }
# later "A B" "C D": C > A and D > B
later() {
	set -- $1 $2
	[ "$3" -gt "$1" ] && [ "$4" -gt "$2" ]
}

mkpool "$T/pool"
mount_pool "$T/pool" "$M" $OPTS

say "names: 255 bytes work, 256 bytes give ENAMETOOLONG"
py '
import errno, os, sys
m = sys.argv[1]
ok, ok2, long = "a" * 251 + ".emb", "c" * 255, "b" * 256
def too_long(what, fn, *args):
    try:
        fn(*args)
    except OSError as e:
        if e.errno != errno.ENAMETOOLONG:
            sys.exit("%s of a 256-byte name: %s, expected ENAMETOOLONG" % (what, errno.errorcode[e.errno]))
        return
    sys.exit("%s of a 256-byte name succeeded" % what)
os.close(os.open(os.path.join(m, ok), os.O_CREAT | os.O_WRONLY, 0o644))
os.stat(os.path.join(m, ok))
os.mkdir(os.path.join(m, ".snapshots", ok2))
os.stat(os.path.join(m, ".snapshots", ok2, ok))
P = lambda *p: os.path.join(m, *p)
too_long("stat", os.stat, P(long))
too_long("open", os.open, P(long), os.O_RDONLY)
too_long("create", os.open, P(long), os.O_CREAT | os.O_WRONLY, 0o644)
too_long("mknod", os.mknod, P(long))
too_long("unlink", os.unlink, P(long))
too_long("rename from", os.rename, P(long), P("x.emb"))
too_long("rename to", os.rename, P(ok), P(long))
too_long("mkdir", os.mkdir, P(long))
too_long("link", os.link, P(ok), P(long))
too_long("symlink", os.symlink, ok, P(long))
too_long("stat in .embfs", os.stat, P(".embfs", long))
too_long("mkdir in .snapshots", os.mkdir, P(".snapshots", long))
too_long("rmdir in .snapshots", os.rmdir, P(".snapshots", long))
too_long("stat in a snapshot", os.stat, P(".snapshots", ok2, long))
os.rename(P(ok), P(ok2))
os.stat(P(ok2))
os.unlink(P(ok2))
os.rmdir(P(".snapshots", ok2))
' "$M"

say "directory times: root and .snapshots move forward, .embfs shows the pool's creation"
r0=$(mt "$M"); s0=$(mt "$M/.snapshots")
: >"$M/t.emb" || fail "create"
r1=$(mt "$M"); later "$r0" "$r1" || fail "root mtime/ctime after create: $r0 -> $r1"
mv "$M/t.emb" "$M/u.emb" || fail "rename"
r2=$(mt "$M"); later "$r1" "$r2" || fail "root mtime/ctime after rename: $r1 -> $r2"
: >"$M/v.emb" && rm "$M/v.emb" || fail "create and unlink"
r3=$(mt "$M"); later "$r2" "$r3" || fail "root mtime/ctime after unlink: $r2 -> $r3"
expect ".snapshots unchanged by tables" "$(mt "$M/.snapshots")" "$s0"
mkdir "$M/.snapshots/s1" || fail "mkdir snapshot"
s1=$(mt "$M/.snapshots"); later "$s0" "$s1" || fail ".snapshots mtime/ctime after mkdir: $s0 -> $s1"
expect "root unchanged by a snapshot" "$(mt "$M")" "$r3"
mkdir "$M/.snapshots/s2" && rmdir "$M/.snapshots/s2" || fail "mkdir and rmdir snapshot"
s2=$(mt "$M/.snapshots"); later "$s1" "$s2" || fail ".snapshots mtime/ctime after rmdir: $s1 -> $s2"
# none of the directories reads 1970 (the pool was made today)
py '
import os, sys, time
m = sys.argv[1]
day = time.time() - 86400
for d in ("", ".embfs", ".snapshots", ".snapshots/s1"):
    s = os.stat(os.path.join(m, d))
    for k in ("st_atime", "st_mtime", "st_ctime"):
        if getattr(s, k) < day:
            sys.exit("%s of %s is %s" % (k, d or "the root", time.ctime(getattr(s, k))))
c = os.stat(os.path.join(m, ".embfs"))
if not (c.st_atime_ns == c.st_mtime_ns == c.st_ctime_ns):
    sys.exit(".embfs times differ: %d %d %d" % (c.st_atime_ns, c.st_mtime_ns, c.st_ctime_ns))
' "$M"

say "directory times survive a remount"
unmount_pool "$M"
mount_pool "$T/pool" "$M" $OPTS
expect "root mtime/ctime after remount" "$(mt "$M")" "$r3"
expect ".snapshots mtime/ctime after remount" "$(mt "$M/.snapshots")" "$s2"
unmount_pool "$M"
exit 0
