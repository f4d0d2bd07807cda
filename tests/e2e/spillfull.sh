#!/bin/sh
# A spill device filled with versions that snapshots hold, then given back:
# writes get ENOSPC while the snapshots hold the device, every snapshot still
# reads as it was, and once they are dropped the same table can be rewritten
# (the merges that give the room back always have the merge reserve: issue
# 25, where evictions took every segment but one and the device stayed
# full after the drop, and after a remount).
# 64 MiB pool, 160 MiB spill file, a 48 MiB table rewritten whole with other
# bytes each round, a snapshot after each.
. "$(dirname "$0")/../lib.sh"
[ -z "$TMPDIR" ] && [ -d /dev/shm ] && [ -w /dev/shm ] && TMPDIR=/dev/shm && export TMPDIR
setup
M="$T/m"
SP="$T/spill"
mkpool "$T/pool" -s 64M
mount_pool "$T/pool" "$M" -o spill="$SP",spill_size=160M
sf() { for k in "$@"; do printf '%s %s ' "$k" "$(stat_field "$M" "$k")"; done; }
say "spill: $(sf spill.segments spill.segments_reserved)"

# write ROUND: the table's bytes of round ROUND (48 MiB) from the seed
src() { rand_bytes 48M >"$T/src.$1"; }
round=0
full=
while [ $round -lt 6 ]; do
	src $round
	if ! dd if="$T/src.$round" of="$M/t.emb" bs=1M conv=notrunc,fsync status=none 2>"$T/dd.err"; then
		grep -q "No space left on device" "$T/dd.err" || { cat "$T/dd.err" >&2; fail "rewrite $round failed, not with ENOSPC"; }
		full=$round
		say "rewrite $round: ENOSPC with $round snapshots held; $(sf spill.segments_free spill.runs)"
		break
	fi
	mkdir "$M/.snapshots/s$round" || fail "mkdir .snapshots/s$round"
	say "rewrite $round and snapshot s$round: $(sf spill.segments_free spill.runs spill.merges)"
	round=$((round + 1))
done
[ -n "$full" ] || fail "6 rewrites of 48 MiB held by snapshots fit a 160 MiB device"
[ "$full" -ge 1 ] || fail "the first 48 MiB did not fit a 160 MiB device"
# statfs: the merge reserve is not available to new rows
avail=$(stat -f -c %a "$M")
free=$(stat -f -c %f "$M")
[ "$avail" -lt "$free" ] || fail "statfs: f_bavail $avail is not below f_bfree $free (the merge reserve)"

i=0
while [ $i -lt "$full" ]; do
	cmp "$M/.snapshots/s$i/t.emb" "$T/src.$i" || fail "snapshot s$i differs from rewrite $i"
	i=$((i + 1))
done
say "every snapshot reads back as it was"

i=0
while [ $i -lt "$full" ]; do
	rmdir "$M/.snapshots/s$i" || fail "rmdir .snapshots/s$i"
	rm -f "$T/src.$i"
	i=$((i + 1))
done
say "snapshots dropped: $(sf spill.segments_free spill.runs)"

src last
for k in 1 2; do
	dd if="$T/src.last" of="$M/t.emb" bs=1M conv=notrunc,fsync status=none 2>"$T/dd.err" ||
		{ cat "$T/dd.err" >&2; fail "rewrite $k after every snapshot was dropped: $(sf spill.segments_free spill.segments_reserved spill.runs)"; }
	cmp "$M/t.emb" "$T/src.last" || fail "t.emb differs after rewrite $k"
	say "rewrite $k after the drop: $(sf spill.segments_free spill.runs spill.merges)"
done
unmount_pool "$M"

mount_pool "$T/pool" "$M" -o spill="$SP"
cmp "$M/t.emb" "$T/src.last" || fail "t.emb differs after a remount"
src again
dd if="$T/src.again" of="$M/t.emb" bs=1M conv=notrunc,fsync status=none 2>"$T/dd.err" ||
	{ cat "$T/dd.err" >&2; fail "rewrite after a remount"; }
cmp "$M/t.emb" "$T/src.again" || fail "t.emb differs after the rewrite that followed the remount"
say "remounted: reads back, rewrites: $(sf spill.segments_free spill.runs)"
unmount_pool "$M"
