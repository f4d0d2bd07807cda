#!/bin/sh
# .embfs/rows (docs/files.md "Batched rows"): gathers equal per-row preads (random
# ids with duplicates, holes, rows past EOF), scatters read back through
# O_DIRECT pread, buffered pread (the page cache is invalidated) and gather,
# and extend the file; 65536-id batches; requests written in pieces; every
# bad request gets EINVAL and changes nothing; ENOSPC changes nothing;
# concurrent clients on their own fds; EACCES for another user; prefetch
# pins, consumption and release at close; the batch id as text; the same
# without a row cache.
. "$(dirname "$0")/../lib.sh"
[ -z "$TMPDIR" ] && [ -d /dev/shm ] && [ -w /dev/shm ] && TMPDIR=/dev/shm && export TMPDIR
setup
OPTS=${EMBFS_TEST_OPTS:-}
BT="$TOOLS/batchtool"
M="$T/m"
[ -x "$BT" ] || fail "$BT not built"
expect() { [ "$2" = "$3" ] || fail "$1: expected '$3', got '$2'"; }
# image FILE: the table's bytes as the daemon holds them (past the page cache)
image() { dd if="$M/t.emb" iflag=direct bs=1M status=none >"$1" || fail "O_DIRECT read of t.emb"; }

mkpool "$T/pool" -s 256M -t t.emb:64 -t big.emb:16384
mount_pool "$T/pool" "$M" $OPTS -o allow_other

say "the control file"
expect "mode of .embfs/rows" "$(stat -c %a "$M/.embfs/rows")" 666
expect "mode of .embfs/batch" "$(stat -c %a "$M/.embfs/batch")" 644
ls "$M/.embfs" | grep -qx batch || fail "ls .embfs does not show batch"

say "populate t.emb: rows 0..9999, then rows 50000..50099; the rest are holes"
rand_bytes 2560000 >"$T/rows0"
dd if="$T/rows0" of="$M/t.emb" bs=64k conv=notrunc status=none || fail "populate"
rand_bytes 25600 | dd of="$M/t.emb" bs=256 seek=50000 conv=notrunc status=none || fail "populate 2"

say "gather == pread: random ids with duplicates, holes and rows past EOF"
"$BT" gather-check "$M/t.emb" 1 1 60000 || fail "gather of 1 id"
"$BT" gather-check "$M/t.emb" 4096 2 60000 || fail "gather of 4096 ids"
"$BT" gather-check "$M/t.emb" 65536 3 70000 || fail "gather of 65536 ids"

say "scatter, then O_DIRECT pread, buffered pread and gather agree; the file grows"
"$BT" scatter-check "$M/t.emb" 4096 4 40000 || fail "scatter of 4096 rows"
"$BT" scatter-check "$M/t.emb" 65536 5 200000 || fail "scatter of 65536 rows"
size=$(stat -c %s "$M/t.emb")
[ "$size" -gt $((150000 * 256)) ] || fail "scatter up to row ~200000 left the size at $size"
"$BT" split "$M/t.emb" || fail "requests in pieces"

say "bad requests: EINVAL, nothing changes"
sync "$M"
image "$T/before"
rows_before=$(stat_field "$M" rows)
for c in magic op0 op4 flags count0 count-big count-mismatch len-short len-long trailing \
	gather-with-rows id-big id-huge ino-unknown ino-huge ino-root ino-ctl ino-stats ino-batch \
	offset gap overlap; do
	"$BT" bad "$M/t.emb" "$c" >/dev/null || fail "bad request $c"
done
"$BT" errno "$M/t.emb" || fail "a bad request cut in pieces"
# rows of 64 KiB: 1025 of them are more than the 64 MiB a request may carry
expect "1025 rows of 64 KiB" "$("$BT" fill "$M/big.emb" 1025 0)" EINVAL
expect "1024 rows of 64 KiB" "$("$BT" fill "$M/big.emb" 1024 0)" OK
image "$T/after"
cmp -s "$T/before" "$T/after" || fail "a bad request changed t.emb"
expect "rows after bad requests" "$(stat_field "$M" rows)" "$((rows_before + 1024))"
say "  22 kinds of bad request refused with EINVAL, t.emb unchanged"

say "concurrent clients on their own fds"
"$BT" clients "$M/t.emb" 4 30 2048 || fail "concurrent clients"

say "prefetch: pinned in the background, consumed by the gather, released at close"
"$BT" prefetch "$M/t.emb" 4096 6 60000 || fail "prefetch"
# (waited for: the kernel sends RELEASE after close returns)
wait_until 10 stat_is "$M" prefetch.pins_held 0
wait_until 10 stat_is "$M" cache.pinned 0
say "  pins after close: prefetch.pins_held 0, cache.pinned 0"

say "batch id as text"
b0=$(cat "$M/.embfs/batch") || fail "cat .embfs/batch"
echo $((b0 + 5)) >"$M/.embfs/batch" || fail "set the batch id"
expect "batch id" "$(cat "$M/.embfs/batch")" $((b0 + 5))
(echo "$b0" >"$M/.embfs/batch") 2>/dev/null && fail "the batch id went back"
expect "batch id" "$(cat "$M/.embfs/batch")" $((b0 + 5))

say "other users: access to the target table is checked"
if [ "$(id -u)" != 0 ] || ! command -v setpriv >/dev/null; then
	say "(skipped: needs root and setpriv)"
else
	chmod 755 "$T"
	as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups -- env ROW_SIZE=256 "$@"; }
	chmod 644 "$M/t.emb"
	expect "nobody gathers a 0644 table" "$(as_nobody "$BT" access "$M/t.emb" gather)" OK
	expect "nobody prefetches a 0644 table" "$(as_nobody "$BT" access "$M/t.emb" prefetch)" OK
	expect "nobody scatters to a 0644 table" "$(as_nobody "$BT" access "$M/t.emb" scatter)" EACCES
	chmod 600 "$M/t.emb"
	expect "nobody gathers a 0600 table" "$(as_nobody "$BT" access "$M/t.emb" gather)" EACCES
	expect "nobody prefetches a 0600 table" "$(as_nobody "$BT" access "$M/t.emb" prefetch)" EACCES
	chmod 666 "$M/t.emb"
	expect "nobody scatters to a 0666 table" "$(as_nobody "$BT" access "$M/t.emb" scatter)" OK
	chown 65534 "$M/t.emb"
	chmod 066 "$M/t.emb"
	expect "owner without owner bits" "$(as_nobody "$BT" access "$M/t.emb" gather)" EACCES
	chown 0 "$M/t.emb"
	chmod 644 "$M/t.emb"
fi
unmount_pool "$M"

say "snapshot tables: gathers read the snapshot as taken; scatters get EROFS"
mount_pool "$T/pool" "$M"
chmod 644 "$M/t.emb"
mkdir "$M/.snapshots/g1" || fail "mkdir snapshot"
cp "$M/t.emb" "$T/t.before"
"$BT" scatter-check "$M/t.emb" 4096 9 60000 || fail "scatter after the snapshot"
cmp -s "$M/t.emb" "$T/t.before" && fail "the scatter changed nothing"
cmp "$M/.snapshots/g1/t.emb" "$T/t.before" || fail "the snapshot changed"
BATCH_FILE="$M/.embfs/rows" "$BT" gather-check "$M/.snapshots/g1/t.emb" 4096 10 60000 ||
	fail "gather from a snapshot table"
expect "scatter into a snapshot table" \
	"$(BATCH_FILE="$M/.embfs/rows" "$BT" access "$M/.snapshots/g1/t.emb" scatter)" EROFS
unmount_pool "$M"

say "a full pool refuses a scatter whole (ENOSPC), nothing changes"
mkpool "$T/small" -s 16M -t t.emb:64
mount_pool "$T/small" "$M" $OPTS
expect "scatter of 65536 rows into 16 MiB" "$("$BT" fill "$M/t.emb" 65536 0)" ENOSPC
expect "size after ENOSPC" "$(stat -c %s "$M/t.emb")" 0
expect "rows after ENOSPC" "$(stat_field "$M" rows)" 0
expect "a small scatter still works" "$("$BT" fill "$M/t.emb" 100 0)" OK
unmount_pool "$M"

say "without a row cache (-o cache_size=0)"
mount_pool "$T/pool" "$M" $OPTS -o cache_size=0
"$BT" gather-check "$M/t.emb" 4096 7 250000 || fail "gather without cache"
"$BT" scatter-check "$M/t.emb" 4096 8 250000 || fail "scatter without cache"
"$BT" split "$M/t.emb" || fail "pieces without cache"
"$BT" clients "$M/t.emb" 3 10 1024 || fail "clients without cache"
# a prefetch is accepted and skipped
"$BT" access "$M/t.emb" prefetch | grep -qx OK || fail "prefetch without cache"
unmount_pool "$M"
exit 0
