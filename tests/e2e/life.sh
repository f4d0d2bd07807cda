#!/bin/sh
# life: the daemon's life cycle as a user meets it (docs/operations.md "Mount and
# unmount").
#  - bad options: each refused before mounting, exit 1, one line naming the
#    option (dirty_age_ms=-1 is not 4294967295, threads=0 is not "default");
#  - a background mount that fails exits non-zero with its message and leaves
#    nothing mounted: before the fork (cache_size above the machine's memory)
#    and after it (the cache cannot be allocated under ulimit -v: the parent
#    waits for the daemon's readiness and exits with its status);
#  - embfs --help lists embfs's options and not libfuse's max_threads; -V
#    names embfs's version, the pool layout and the libraries;
#  - embfs-umount with 200k dirty rows in the cache returns only once the
#    daemon has exited: the pool mounts again at once, every row intact;
#  - make install PREFIX=<temp> HELPERDIR=<temp>, then, in a private mount
#    namespace where an overlay shows those helpers in /sbin (nothing is
#    installed on the system): mount -t fuse.embfs with PATH not naming the
#    prefix, a failing mount -t exits non-zero, umount MNT waits for the
#    daemon, and an fstab line (mount -T) mounts.
# LIFE_ONLY="options background help umount install" (a subset) runs those parts.
. "$(dirname "$0")/../lib.sh"

setup
NSPIDS="$T/ns-pids"
# daemons started in the private namespace are killed from here on failure
trap 'rc=$?; for p in $(cat "$NSPIDS" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done; (exit $rc); cleanup' EXIT
M="$T/mnt"
mkdir -p "$M"
MOUNTS="$MOUNTS $M"
ROWS=200000
RS=256

# exited PID: no such process, or a zombie (a daemon that went to the
# background is nobody's child here: its exit is reaped by init, or not)
exited() { [ ! -e "/proc/$1" ] || awk '{ exit $3 != "Z" }' "/proc/$1/stat" 2>/dev/null; }

# refuse OPTS WORD: embfs -o OPTS (background) exits 1 with one line on
# stderr that names WORD, and mounts nothing
refuse() {
	timeout -k 5 30 "$EMBFS" -o "$1" "$T/pool" "$M" >"$T/out" 2>"$T/err"
	rc=$?
	if is_mounted "$M"; then
		"$BUILD/embfs-umount" "$M" 2>/dev/null || fusermount3 -u "$M"
		fail "-o $1: mounted"
	fi
	[ $rc -eq 1 ] || fail "-o $1: exit status $rc, want 1 ($(cat "$T/err"))"
	[ "$(wc -l <"$T/err")" -eq 1 ] || { cat "$T/err" >&2; fail "-o $1: want one line on stderr"; }
	grep -qF -- "$2" "$T/err" || fail "-o $1: message does not name '$2': $(cat "$T/err")"
	say "$(printf '%-34s' "-o $1") $(cat "$T/err")"
}

mkpool "$T/pool" -s 256M

part_options() {
say "bad options"
refuse dirty_age_ms=-1 "dirty_age_ms=-1"
refuse dirty_age_ms=99999999999 "dirty_age_ms"
refuse threads=0 "threads=0"
refuse threads=4x "threads=4x"
refuse dim=0 "dim=0"
refuse dim=20000 "80000 bytes"
refuse dim=40000,dtype=f16 "dim at most 32768 for f16"
refuse dtype=f99 "dtype=f99"
refuse cache_size=1K "cache_size=1K"
refuse cache_size=lots "cache_size=lots"
refuse spill_qd=8 "spill_qd"
refuse spill_size=1G "spill_size"
refuse spill_runs=2 "spill_runs=2"
refuse "spill=$T/spill,spill_high=20" "spill_low=25"
refuse "spill=$T/spill,spill_qd=0" "spill_qd=0"
refuse max_threads=4 "threads=N"
refuse "pidfile=$T/no/such/dir/pid" "pidfile"
[ ! -e "$T/spill" ] || fail "a refused spill= made $T/spill"
}

part_background() {
say "failing background mounts"
# before the fork: more cache than the machine has
refuse cache_size=100T "cache_size=100T"
# after the fork: the cache is allocated in the daemon (its flusher is a
# thread); 600 MB of address space is enough for the daemon, not for the
# entry and bucket arrays of a 2 GiB cache (24 bytes of entry and room for
# 8 of bucket, rounded up to a power of two, per 64 + CACHE_ROW_OVERHEAD of
# budget: 780 MB by themselves, past the limit whatever the daemon's
# threads and libraries take.  A sanitizer's shadow
# memory needs more: then this is skipped)
if ! (ulimit -v 600000 && exec "$EMBFS" -V) >/dev/null 2>&1; then
	say "skipped the failure after the fork: embfs does not start under ulimit -v 600000"
	return 0
fi
(ulimit -v 600000 && exec "$EMBFS" -o cache_size=2G "$T/pool" "$M") >"$T/out" 2>"$T/err"
rc=$?
is_mounted "$M" && { fusermount3 -u "$M"; fail "cache_size=2G under ulimit -v: mounted"; }
[ $rc -ne 0 ] || fail "cache_size=2G under ulimit -v 600000: exit status 0, nothing mounted"
grep -q "cannot allocate" "$T/err" || fail "cache_size=2G under ulimit -v: no message ($(cat "$T/err"))"
say "cache_size=2G, ulimit -v 600000: status $rc: $(grep "cannot" "$T/err")"
# the same limit with a small cache mounts: the limit was not the daemon's
(ulimit -v 600000 && exec "$EMBFS" -o cache_size=64M,pidfile="$T/pid" "$T/pool" "$M") 2>>"$T/daemon.log" ||
	fail "cache_size=64M under ulimit -v 600000 did not mount"
is_mounted "$M" || fail "embfs returned 0 before the mount was there"
PID=$(cat "$T/pid")
DAEMONS="$DAEMONS $PID"
[ "$(cat "$M/.embfs/pid")" = "$PID" ] || fail ".embfs/pid $(cat "$M/.embfs/pid"), pidfile $PID"
"$BUILD/embfs-umount" "$M" || fail "embfs-umount after the small-cache mount"
exited "$PID" || fail "daemon $PID still running after embfs-umount"
}

part_help() {
say "--help, -V"
"$EMBFS" --help >"$T/help" 2>&1 || fail "embfs --help: exit status $?"
for w in dim=N dtype=T cache_size=SIZE dirty_age_ms=N threads=N pidfile=PATH spill=PATH spill_size=SIZE \
	spill_high=PCT spill_low=PCT spill_qd=N spill_compact_mbps=N spill_runs allow_other embfs-umount; do
	grep -qF -- "$w" "$T/help" || fail "embfs --help does not list $w"
done
grep -q max_threads "$T/help" && fail "embfs --help lists libfuse's max_threads"
"$EMBFS" -V >"$T/ver" 2>&1 || fail "embfs -V: exit status $?"
V=$(sed -n 's/^#define EMBFS_VERSION "\(.*\)"$/\1/p' "$TOP/include/embfs/version.h")
L=$(sed -n 's/^#define EMB_LAYOUT_VERSION \([0-9]*\)u.*/\1/p' "$TOP/include/embfs/layout.h")
grep -qx "embfs $V" "$T/ver" || fail "embfs -V: no 'embfs $V' line: $(cat "$T/ver")"
grep -qx "pool layout $L" "$T/ver" || fail "embfs -V: no 'pool layout $L' line"
for lib in libfuse libpmemobj liburing xxHash; do
	grep -q "^$lib [0-9][0-9.]*$" "$T/ver" || fail "embfs -V: no $lib version: $(cat "$T/ver")"
done
"$EMBFS" --version | cmp -s - "$T/ver" || fail "embfs --version differs from -V"
"$BUILD/embfs-umount" --help >/dev/null || fail "embfs-umount --help"
say "$(tr '\n' ' ' <"$T/ver")"
}

part_umount() {
say "embfs-umount with $ROWS dirty rows"
"$EMBFS" -o cache_size=512M,dirty_age_ms=0,pidfile="$T/pid" "$T/pool" "$M" 2>>"$T/daemon.log" || fail "mount"
PID=$(cat "$T/pid")
DAEMONS="$DAEMONS $PID"
dd if="$T/rows" of="$M/t.emb" bs=1M status=none || fail "writing $ROWS rows"
dirty=$(stat_field "$M" cache.dirty)
[ "$dirty" -ge $((ROWS * 9 / 10)) ] || fail "only $dirty dirty rows in the cache"
t0=$(date +%s%N)
"$BUILD/embfs-umount" "$M" || fail "embfs-umount: exit status $?"
t1=$(date +%s%N)
exited "$PID" || fail "embfs-umount returned while the daemon ($PID) runs"
"$EMBFS" -o pidfile="$T/pid" "$T/pool" "$M" 2>"$T/err" ||
	fail "remount right after embfs-umount: $(cat "$T/err")"
PID2=$(cat "$T/pid")
DAEMONS="$DAEMONS $PID2"
cmp "$T/rows" "$M/t.emb" || fail "rows differ after embfs-umount and remount"
say "$dirty dirty rows: embfs-umount took $(((t1 - t0) / 1000000)) ms; remounted at once, rows intact"
"$BUILD/embfs-umount" "$M" || fail "embfs-umount (clean)"
exited "$PID2" || fail "daemon $PID2 still running after embfs-umount"
"$BUILD/embfs-umount" "$M" 2>"$T/err" && fail "embfs-umount of what is not mounted: exit status 0"
grep -q "not mounted" "$T/err" || fail "embfs-umount of what is not mounted: $(cat "$T/err")"
DAEMONS=""
}

part_install() {
say "make install, mount -t fuse.embfs, umount, fstab"
[ "$(id -u)" = 0 ] || { say "skipped: not root"; return 0; }
command -v unshare >/dev/null || { say "skipped: no unshare"; return 0; }
make -s -C "$TOP" install BUILD="$BUILD" PREFIX="$T/px" HELPERDIR="$T/helpers" PYTHONDIR="$T/py" \
	>"$T/make.out" 2>&1 || { cat "$T/make.out" >&2; fail "make install PREFIX=$T/px HELPERDIR=$T/helpers"; }
[ -x "$T/helpers/mount.fuse.embfs" ] && [ -x "$T/helpers/umount.fuse.embfs" ] || fail "helpers not installed"
cat >"$T/ns.sh" <<EOF
# in a private mount namespace: /sbin shows $T/helpers too
T=$T; M=$M; ROWS=$ROWS; RS=$RS
exited() { [ ! -e "/proc/\$1" ] || awk '{ exit \$3 != "Z" }' "/proc/\$1/stat" 2>/dev/null; }
nfail() { echo "FAIL: \$*" >&2; exit 1; }
mount -t overlay overlay -o lowerdir=\$T/helpers:/usr/sbin /usr/sbin 2>/dev/null || exit 77
if [ -d /run/mount ]; then mount -t tmpfs tmpfs /run/mount; else mount -t tmpfs tmpfs /run; fi || exit 77
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
# what is running here is killed by the outer test if this fails
daemon() { cat "\$M/.embfs/pid" | tee -a "\$T/ns-pids"; }

mount -t fuse.embfs -o cache_size=100T "\$T/pool" "\$M" 2>"\$T/err" && nfail "mount -t with cache_size=100T: status 0"
grep -q "cache_size=100T" "\$T/err" || nfail "mount -t with cache_size=100T: message '\$(cat "\$T/err")'"
grep -q " \$M " /proc/self/mounts && nfail "mount -t with cache_size=100T: mounted"
echo "  mount -t fuse.embfs -o cache_size=100T: \$(cat "\$T/err")"

mount -t fuse.embfs -o cache_size=512M,dirty_age_ms=0 "\$T/pool" "\$M" 2>"\$T/err" ||
	nfail "mount -t fuse.embfs: \$(cat "\$T/err")"
P=\$(daemon)
[ "\$(readlink /proc/\$P/exe)" = "\$T/px/bin/embfs" ] || nfail "the daemon is \$(readlink /proc/\$P/exe)"
dd if="\$T/rows" of="\$M/t2.emb" bs=1M status=none || nfail "writing rows"
umount "\$M" || nfail "umount \$M: status \$?"
exited \$P || nfail "umount returned while the daemon (\$P) runs"
echo "  mount -t fuse.embfs (\$T/px/bin/embfs, PATH=\$PATH), umount waited for pid \$P"

echo "\$T/pool \$M fuse.embfs noauto,nofail,cache_size=64M 0 0" >"\$T/fstab"
mount -T "\$T/fstab" "\$M" 2>"\$T/err" || nfail "fstab line: \$(cat "\$T/err")"
P=\$(daemon)
cmp "\$T/rows" "\$M/t2.emb" || nfail "rows differ after umount and an fstab mount"
umount "\$M" || nfail "umount (fstab mount): status \$?"
exited \$P || nfail "umount returned while the daemon (\$P) runs (fstab mount)"
echo "  fstab line: mounted, rows intact, umount waited for pid \$P"
exit 0
EOF
unshare -m --propagation private sh "$T/ns.sh"
rc=$?
[ $rc -eq 77 ] && { say "skipped: no overlay or tmpfs in a private mount namespace"; return 0; }
[ $rc -eq 0 ] || fail "mount -t fuse.embfs / umount / fstab (status $rc)"
}

rand_bytes $((ROWS * RS)) >"$T/rows"
for p in ${LIFE_ONLY:-options background help umount install}; do
	"part_$p"
done
exit 0
