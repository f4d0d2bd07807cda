#!/bin/sh
# mmap(MAP_SHARED) on tables (tests/tools/mmaptest.c): stores through a
# writable mapping reach the store by msync and read back with pread after a
# remount, also unaligned ranges and 3-byte rows; a read-only mapping of a
# table written with pwrite shows its bytes and its holes, cold after remount.
. "$(dirname "$0")/../lib.sh"
[ -z "$TMPDIR" ] && [ -d /dev/shm ] && [ -w /dev/shm ] && TMPDIR=/dev/shm && export TMPDIR
setup
# EMBFS_TEST_OPTS: extra daemon arguments for every mount, e.g. "-o cache_size=0"
OPTS=${EMBFS_TEST_OPTS:-}
MT="$TOOLS/mmaptest"
[ -x "$MT" ] || fail "$MT is not built (run make)"
M="$T/m"
command -v setfattr >/dev/null || skip "setfattr missing (Debian package attr)"
expect() { [ "$2" = "$3" ] || fail "$1: expected '$3', got '$2'"; }

mkpool "$T/pool"
mount_pool "$T/pool" "$M" $OPTS

say "MAP_SHARED stores into a table of holes, msync"
truncate -s 1M "$M/a.emb"
"$MT" write "$M/a.emb" 0 1048576 1 || fail "mmap write of a.emb"
# msync(MS_SYNC) returned: the rows are in the store now
expect "rows after msync" "$(stat_field "$M" rows)" 4096
"$MT" check "$M/a.emb" 0 1048576 1 || fail "pread after mmap write"

say "unaligned store across rows and pages, into rows that exist"
"$MT" write "$M/a.emb" 5000 3000 2 || fail "mmap write at 5000"
"$MT" write "$M/a.emb" 1044000 4576 3 || fail "mmap write at the end"
expect "rows after overwrite" "$(stat_field "$M" rows)" 4096 # msync is a sync point

say "3-byte rows (dim=3 u8) through a mapping"
: > "$M/b.emb"
setfattr -n user.embfs.dim -v 3 "$M/b.emb" && setfattr -n user.embfs.dtype -v u8 "$M/b.emb" ||
	fail "set 3-byte rows"
truncate -s 65536 "$M/b.emb"
"$MT" write "$M/b.emb" 4095 2 4 || fail "mmap write of 2 bytes across a page boundary"
# writeback sends whole dirty pages: pages 0 and 1 are bytes 0..8191, rows 0..2730
expect "rows for 2 bytes at 4095 (3-byte rows)" "$(stat_field "$M" rows)" $((4096 + 2731))
"$MT" write "$M/b.emb" 8192 4096 5 || fail "mmap write of a page of 3-byte rows"

say "read mapping of a table written with pwrite, with holes"
: > "$M/c.emb"
"$MT" pwrite "$M/c.emb" 0 300001 6 || fail "pwrite c.emb"
"$MT" pwrite "$M/c.emb" 2000000 1000 7 || fail "pwrite c.emb far"
expect "size c.emb" "$(stat -c %s "$M/c.emb")" 2001000
"$MT" check "$M/c.emb" 0 300001 6 mmap || fail "mmap read of pwrite data"
"$MT" zero "$M/c.emb" 300001 1699999 mmap || fail "mmap read of the hole"
"$MT" check "$M/c.emb" 2000000 1000 7 mmap || fail "mmap read of the far rows"

say "after a remount (cold page cache)"
unmount_pool "$M"
mount_pool "$T/pool" "$M" $OPTS
"$MT" check "$M/a.emb" 0 5000 1 || fail "a.emb [0,5000) after remount"
"$MT" check "$M/a.emb" 5000 3000 2 || fail "a.emb [5000,8000) after remount"
"$MT" check "$M/a.emb" 8000 1036000 1 || fail "a.emb [8000,1044000) after remount"
"$MT" check "$M/a.emb" 1044000 4576 3 || fail "a.emb tail after remount"
"$MT" check "$M/a.emb" 5000 3000 2 mmap || fail "a.emb mapped after remount"
"$MT" zero "$M/b.emb" 0 4095 || fail "b.emb before the 2 bytes"
"$MT" check "$M/b.emb" 4095 2 4 || fail "b.emb 2 bytes at 4095 after remount"
"$MT" zero "$M/b.emb" 4097 4095 || fail "b.emb between"
"$MT" check "$M/b.emb" 8192 4096 5 || fail "b.emb page at 8192 after remount"
"$MT" zero "$M/b.emb" 12288 53248 mmap || fail "b.emb tail after remount"
"$MT" check "$M/c.emb" 0 300001 6 mmap || fail "c.emb mapped after remount"
"$MT" zero "$M/c.emb" 300001 1699999 || fail "c.emb hole after remount"
"$MT" check "$M/c.emb" 2000000 1000 7 || fail "c.emb far rows after remount"
unmount_pool "$M"
exit 0
