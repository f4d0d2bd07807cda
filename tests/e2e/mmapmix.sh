#!/bin/sh
# docs/files.md "Batched rows" and "mmap": stores through mmap(MAP_SHARED) + msync
# into even rows, scatters of odd rows of the same pages through
# .embfs/rows, buffered preads and gathers, at once (batchtool mmap-mix): a page written
# back from the mapping must not bring back the old bytes of a scattered
# row.  No gather may see a row go back to an older version or miss a
# completed write; at the end, and after a remount, every row holds its
# last written version.  256-byte rows (16 a page) and 400-byte rows (rows
# across page boundaries); with and without the row cache.
# EMBFS_SEED replays a run, EMBFS_MIX_SECS sets its length (3 s).
. "$(dirname "$0")/../lib.sh"
[ -z "$TMPDIR" ] && [ -d /dev/shm ] && [ -w /dev/shm ] && TMPDIR=/dev/shm && export TMPDIR
setup
OPTS=${EMBFS_TEST_OPTS:-}
BT="$TOOLS/batchtool"
M="$T/m"
[ -x "$BT" ] || fail "$BT not built"
SEED=$EMBFS_SEED # lib.sh: printed by setup (and by fail), replayed from EMBFS_SEED
SECS=${EMBFS_MIX_SECS:-3}

mkpool "$T/pool" -s 128M -t a.emb:64 -t b.emb:100
run() { # run TABLE ROWS SEED [daemon opts]
	tab=$1 rows=$2 seed=$3; shift 3
	mount_pool "$T/pool" "$M" $OPTS "$@"
	rs=$(getfattr --absolute-names --only-values -n user.embfs.row_size "$M/$tab") || fail "row size of $tab"
	truncate -s 0 "$M/$tab" && truncate -s $((rows * rs)) "$M/$tab" || fail "truncate $tab"
	"$BT" mmap-mix "$M/$tab" "$SECS" "$seed" "$T/$tab.state" || fail "mmap-mix on $tab $*"
	say "  $(awk '/^pagecache\.(capturing|plain|writebacks|writeback_stale|recorded|io_waits)/ \
		{ sub(/^pagecache\./, ""); printf "%s %s, ", $1, $2 }' "$M/.embfs/stats")"
	unmount_pool "$M"
	mount_pool "$T/pool" "$M" $OPTS "$@"
	"$BT" mmap-check "$M/$tab" "$T/$tab.state" || fail "$tab after remount $*"
	unmount_pool "$M"
}
command -v getfattr >/dev/null || skip "getfattr missing (Debian package attr)"
say "256-byte rows, row cache"
run a.emb 2048 "$SEED"
say "400-byte rows across pages, row cache"
run b.emb 2048 $((SEED + 1))
say "256-byte rows, no row cache"
run a.emb 2048 $((SEED + 2)) -o cache_size=0
exit 0
