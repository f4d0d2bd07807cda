#!/bin/sh
# mkdir .snapshots/NAME does not wait for the pool's persistence (issue 17).
# With the row cache, a write-back commit is held inside one of its msync
# barriers (the LD_PRELOAD shim build/shim/holdmsync.so holds every msync
# while a file exists); meanwhile mkdir of a snapshot must return, and the
# snapshot must hold exactly the rows written before it once the barrier
# goes on: the rows being written back, not rows written after the mkdir.
# Before issue 17 the commit held the snapshot set across its barriers and
# mkdir waited for it (on a disk pool: 8-120 ms, here: until released).
. "$(dirname "$0")/../lib.sh"
[ -z "$TMPDIR" ] && [ -d /dev/shm ] && [ -w /dev/shm ] && TMPDIR=/dev/shm && export TMPDIR
setup
M="$T/m"
SHIM="$BUILD/shim/holdmsync.so"
[ -f "$SHIM" ] || fail "$SHIM not built"
export EMBFS_HOLD_MSYNC="$T/hold"
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
unset PMEM_IS_PMEM_FORCE # a plain-file pool: its barriers are msyncs

rand_bytes 8M > "$T/a"   # 32768 rows of 256 bytes: in the cache, then written back
rand_bytes 64K > "$T/b"  # written over the first rows after the snapshot
mkpool "$T/pool" -s 128M
LD_PRELOAD="$SHIM" mount_pool "$T/pool" "$M"
cp "$T/a" "$M/t.emb" || fail "write into the cache"

: > "$T/hold"
sync "$M/t.emb" 2>"$T/sync.err" &   # writes the cache back: its first barrier is held
SYNC=$!
wait_until -r 20 test -e "$T/hold.held" || { rm -f "$T/hold"; fail "no barrier reached within 20 s"; }

mkdir "$M/.snapshots/s1" 2>"$T/mkdir.err" &
MK=$!
if ! wait_until -r 10 gone $MK; then # 10 s, while the barrier is held
	rm -f "$T/hold"
	wait $MK
	wait $SYNC
	fail "mkdir waited for a write-back commit held in its barrier"
fi
wait $MK || { rm -f "$T/hold"; cat "$T/mkdir.err" >&2; fail "mkdir failed while a barrier was held"; }
[ -e "$T/hold" ] || fail "the barrier was released before mkdir returned"
# (.embfs/stats is not read here: its pool figures wait for space_lock,
# which the held transaction, an index growth, holds)
ls "$M/.snapshots" | grep -qx s1 || { rm -f "$T/hold"; fail "s1 not listed"; }
say "mkdir returned while a write-back commit was held in a barrier"

rm -f "$T/hold"
wait $SYNC || { cat "$T/sync.err" >&2; fail "fsync after the barrier was released"; }
dd if="$T/b" of="$M/t.emb" bs=64k conv=notrunc status=none || fail "write after the snapshot"
cmp "$T/a" "$M/.snapshots/s1/t.emb" || fail "s1 does not hold exactly the rows written before it"
head -c 65536 "$M/t.emb" | cmp - "$T/b" || fail "the live table lost the write made after s1"
grep -q "^snapshot.s1 .*durable=1" "$M/.embfs/stats" || { grep snapshot "$M/.embfs/stats" >&2; fail "s1 not durable after its table was opened"; }
unmount_pool "$M"

mount_pool "$T/pool" "$M"
cmp "$T/a" "$M/.snapshots/s1/t.emb" || fail "s1 differs after a remount"
unmount_pool "$M"
say "s1 holds the rows written before it, durable, and after a remount"
