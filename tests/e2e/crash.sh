#!/bin/sh
# crash: SIGKILL the daemon while a writer commits batches of rows, remount,
# and check (tests/tools/crashwriter.c verify) that every batch the writer had
# fsync'ed and logged survived, that the batch in flight is all-or-some per
# row, and that no row is torn.  The log lives on tmpfs outside the mount.
# Two variants: a plain-file pool in $T (msync path) and a pool on /dev/shm
# with PMEM_IS_PMEM_FORCE=1 (libpmemobj flush/drain path).  Each runs $ROUNDS
# rounds, continuing from the state the previous crash left; then a clean
# unmount and mount must find the same state with pool.recovered 0.
. "$(dirname "$0")/../lib.sh"

CW="$TOOLS/crashwriter"
[ -x "$CW" ] || skip "$CW not built (make)"
ROUNDS=${ROUNDS:-5}
SEED=$((EMBFS_SEED % 65536)) # the writer's rows
WOPTS="-s $SEED -k 24 -n 32768"

unset PMEM_IS_PMEM_FORCE
setup
S=$(mktemp -d "/dev/shm/${EMBFS_PFX}crash.XXXXXX") || fail "mktemp on /dev/shm"
WPID=""
trap 'rc=$?; [ -n "$WPID" ] && kill "$WPID" 2>/dev/null; rm -rf "$S"; (exit $rc); cleanup' EXIT

nlines() { [ -f "$1" ] && wc -l <"$1" || echo 0; }

# wait_writer: the writer must exit (bounded) once its daemon is gone
wait_writer() {
	wait_until 20 gone "$WPID"
	wait "$WPID"; wrc=$?
	WPID=""
}

# logged N: the writer's log holds N batches (fails if the writer died)
logged() {
	[ "$(nlines "$log")" -ge "$1" ] && return 0
	gone "$WPID" || return 1
	cat "$S/writer.out" >&2
	fail "$name round $r: writer died"
}

verify() {
	"$CW" verify $WOPTS "$1/t.emb" "$2" >"$S/verify.out" 2>&1
	vrc=$?
	sed 's/^/    /' "$S/verify.out"
	[ $vrc -eq 0 ] || fail "$3: verify failed (seed $SEED)"
}

# variant NAME POOL MEDIA: ROUNDS crash/remount/verify rounds on a fresh pool
variant() {
	name=$1; pool=$2
	mnt="$T/mnt-$name"; log="$S/$name.log"
	mkpool "$pool" -s 96M
	mount_pool "$pool" "$mnt"
	media=$(stat_field "$mnt" pool.media)
	say "$name: pool $pool, media $media, seed $SEED"
	[ "$media" = "$3" ] || fail "$name: pool.media is '$media', want $3"
	[ "$(stat_field "$mnt" pool.recovered)" = 0 ] || fail "$name: fresh pool reports recovered"
	r=1
	while [ $r -le "$ROUNDS" ]; do
		before=$(nlines "$log")
		want=$((before + 2 + $(rand 12)))
		"$CW" write $WOPTS "$mnt/t.emb" "$log" >"$S/writer.out" 2>&1 &
		WPID=$!
		wait_until 20 logged $want
		crash_daemon "$mnt"
		wait_writer
		[ $wrc -eq 3 ] || { cat "$S/writer.out" >&2; fail "$name round $r: writer exit $wrc, want 3 (stopped by the crash)"; }
		say "round $r: killed after $(nlines "$log") logged batches; $(tail -1 "$S/writer.out")"
		mount_pool "$pool" "$mnt"
		rec=$(stat_field "$mnt" pool.recovered)
		[ "$rec" = 1 ] || fail "$name round $r: pool.recovered is '$rec' after SIGKILL, want 1"
		verify "$mnt" "$log" "$name round $r"
		r=$((r + 1))
	done
	[ "$(nlines "$log")" -gt 0 ] || fail "$name: no batch was ever logged"
	unmount_pool "$mnt"
	mount_pool "$pool" "$mnt"
	rec=$(stat_field "$mnt" pool.recovered)
	[ "$rec" = 0 ] || fail "$name: pool.recovered is '$rec' after a clean unmount, want 0"
	verify "$mnt" "$log" "$name after clean remount"
	unmount_pool "$mnt"
}

variant file "$T/pool" file-msync
export PMEM_IS_PMEM_FORCE=1
variant pmem "$S/pool" pmem
unset PMEM_IS_PMEM_FORCE
say "seed $SEED: $ROUNDS crash rounds per variant verified"
exit 0
