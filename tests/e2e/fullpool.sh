#!/bin/sh
# A full pool with the write-back row cache loses no acknowledged write
# (issue 10, item 7): every write that returned success reaches the pool, a
# write that cannot be promised room fails with ENOSPC when it is made, and
# deleting gives the space back.  Buffered writes (no O_DSYNC): the rows sit
# dirty in the cache, far more of them than the pool holds could be.
# Pools of 32, 64 and 128 MiB with the default (1 GiB) cache, 64 MiB with a
# 64 MiB cache, and with a spill tier.
. "$(dirname "$0")/../lib.sh"
[ -z "$TMPDIR" ] && [ -d /dev/shm ] && [ -w /dev/shm ] && TMPDIR=/dev/shm && export TMPDIR
setup
M="$T/m"
MiB=1048576
rand_bytes 200M > "$T/src"

# free_at_least BYTES: the pool has BYTES free (after a sync point: freeing
# an unlinked table waits for the kernel's FORGET)
free_at_least() {
	sync "$M" || fail "$label: fsync of the mount root"
	seen=$(stat -f -c '%f %S' "$M" | awk '{ printf "%d\n", $1 * $2 }')
	[ "$seen" -ge "$1" ]
}

# fill POOLSIZE LABEL [embfs args]: dd the source into a new table until ENOSPC;
# the accepted prefix must survive fsync, unmount and remount; rm gives the
# space back and a second fill takes as much again.
fill() {
	size=$1 label=$2; shift 2
	say "$label: fill a $size pool through the cache"
	mkpool "$T/pool" -s "$size"
	mount_pool "$T/pool" "$M" "$@"
	f0=$(stat -f -c '%f %S' "$M" | awk '{ printf "%d\n", $1 * $2 }')
	dd if="$T/src" of="$M/big.emb" bs=64k 2>"$T/dd.err" && fail "$label: 200 MiB fit in a $size pool"
	grep -q "No space left on device" "$T/dd.err" || { cat "$T/dd.err" >&2; fail "$label: dd did not stop on ENOSPC"; }
	S=$(stat -c %s "$M/big.emb")
	[ "$S" -ge $((8 * MiB)) ] || fail "$label: ENOSPC after only $S bytes"
	sync "$M" || fail "$label: fsync of the mount root failed after ENOSPC: acknowledged rows did not reach the pool"
	avail=$(stat -f -c '%a %S' "$M" | awk '{ printf "%d\n", $1 * $2 }')
	say "$label: statfs says $avail bytes available after ENOSPC"
	# what df shows as available is near 0 when writes get ENOSPC (index
	# room, the write-back's promises and a slab's tail stay: ~1/16)
	[ "$avail" -le $((${size%M} * MiB / 10 + MiB)) ] || fail "$label: statfs says $avail bytes available, writes get ENOSPC"
	cmp -n "$S" "$T/src" "$M/big.emb" || fail "$label: data differs before unmount"
	unmount_pool "$M"
	grep -q "writing back" "$T/daemon.log" && { cat "$T/daemon.log" >&2; fail "$label: a write-back failed"; }
	mount_pool "$T/pool" "$M" "$@"
	expect_size=$(stat -c %s "$M/big.emb")
	[ "$expect_size" = "$S" ] || fail "$label: size $expect_size after remount, $S before"
	cmp -n "$S" "$T/src" "$M/big.emb" || fail "$label: accepted rows lost or changed after remount"
	rm "$M/big.emb"
	wait_until 10 free_at_least $((f0 - MiB))
	dd if="$T/src" of="$M/again.emb" bs=64k 2>/dev/null && fail "$label: second fill fit"
	S2=$(stat -c %s "$M/again.emb")
	sync "$M" || fail "$label: fsync after the second fill"
	say "$label: first $S, second $S2"; [ "$S2" -ge $((S * 9 / 10)) ] || fail "$label: second fill took $S2 bytes, the first $S"
	unmount_pool "$M"
	mount_pool "$T/pool" "$M" "$@"
	cmp -n "$S2" "$T/src" "$M/again.emb" || fail "$label: second fill differs after remount"
	unmount_pool "$M"
	grep -q "writing back" "$T/daemon.log" && { cat "$T/daemon.log" >&2; fail "$label: a write-back failed"; }
	say "$label: $S then $S2 bytes accepted, all of them stored"
	rm -f "$T/pool" "$T/daemon.log"
}

fill 32M "32 MiB pool"
fill 64M "64 MiB pool"
fill 64M "64 MiB pool, 64 MiB cache" -o cache_size=64M
fill 128M "128 MiB pool" # its index is big enough that freeing it in one transaction needs more log than a lane holds
mkdir "$T/ssd"
fill 64M "64 MiB pool with a spill tier" -o spill="$T/ssd",spill_size=96M
exit 0
