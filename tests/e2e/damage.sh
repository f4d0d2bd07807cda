#!/bin/sh
# damage: a damaged pool through the daemon (issue 10, items 9 and 10).
#  1. one flipped byte in a stored row: reading that row (O_DIRECT, one row)
#     is EIO, with and without the row cache, and pool.checksum_errors counts
#     it; the rows around it and a snapshot taken before it read fine; the
#     live row is EIO again after a remount.  Rewriting the whole row heals
#     it (the snapshot's copy stays EIO), also after a remount.
#  2. one flipped byte in a catalog entry (the table's name): the mount is
#     refused with one line naming the entry, exit status 1, the pool file
#     byte for byte unchanged.
#  3. a pool check that crashes (EMBFS_TEST_CHECK_CRASH makes the check
#     child raise SIGSEGV, as libpmemobj does on some damage): one line,
#     exit status 1, no core, nothing mounted, the pool unchanged.
. "$(dirname "$0")/../lib.sh"
command -v python3 >/dev/null || skip "no python3"
[ -z "$TMPDIR" ] && [ -d /dev/shm ] && [ -w /dev/shm ] && TMPDIR=/dev/shm && export TMPDIR
setup
M="$T/m"
RS=256

# flip FILE OFFSET: invert the bits of one byte
flip() {
	b=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ')
	[ -n "$b" ] || fail "no byte at $2 of $1"
	printf "\\$(printf %o $((b ^ 0xff)))" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none ||
		fail "flip $1 @$2"
}

# refused NAME POOL PATTERN: the daemon refuses POOL with one line matching
# PATTERN and exit status 1, mounts nothing, leaves the file as it was
refused() {
	before=$(sha256sum <"$2")
	mkdir -p "$M"
	timeout -k 5 30 "$EMBFS" -f "$2" "$M" >"$T/out" 2>"$T/err"
	rc=$?
	if is_mounted "$M"; then
		fusermount3 -u "$M"
		fail "$1: embfs mounted it"
	fi
	[ $rc -eq 1 ] || { cat "$T/err" >&2; fail "$1: exit status $rc, want 1"; }
	[ "$(wc -l <"$T/err")" -eq 1 ] || { cat "$T/err" >&2; fail "$1: not one line on stderr"; }
	grep -q "$3" "$T/err" || fail "$1: unexpected message '$(cat "$T/err")'"
	[ "$(sha256sum <"$2")" = "$before" ] || fail "$1: the pool file was modified"
	say "$1: $(sed "s|$T/||g" "$T/err")"
}

# ---- 1. a damaged row ------------------------------------------------------
P="$T/pool"
mkpool "$P" -s 64M
mount_pool "$P" "$M" -o cache_size=0
rand_bytes $((2048 * RS)) >"$T/src"
cp "$T/src" "$M/t.emb" || fail "writing t.emb"
mkdir "$M/.snapshots/before" || fail "snapshot"
unmount_pool "$M"
R=1000
# the row's bytes are in the pool once (its only version): flip one in the middle
OFF=$(python3 - "$P" "$T/src" $R $RS <<'EOF'
import sys
pool, src, r, rs = open(sys.argv[1], 'rb').read(), open(sys.argv[2], 'rb').read(), int(sys.argv[3]), int(sys.argv[4])
row = src[r * rs:(r + 1) * rs]
at = pool.find(row)
if at < 0 or pool.find(row, at + 1) >= 0:
    sys.exit("row %d is not in the pool exactly once" % r)
print(at + rs // 2)
EOF
) || fail "finding row $R in the pool"
flip "$P" "$OFF"
say "flipped byte $OFF of the pool: a data byte of row $R"

# readrow FILE ROW: one row, O_DIRECT (no page cache: exactly that row is read)
readrow() { dd if="$1" of="$T/row" bs=$RS skip="$2" count=1 iflag=direct status=none 2>"$T/row.err"; }
for opts in "cache_size=0" "cache_size=64M"; do
	mount_pool "$P" "$M" -o $opts
	readrow "$M/t.emb" $R && fail "[$opts] reading the damaged row $R succeeded"
	grep -q "Input/output error" "$T/row.err" || fail "[$opts] row $R: want EIO, got: $(cat "$T/row.err")"
	for r in $((R - 3)) $((R - 2)) $((R - 1)) $((R + 1)) $((R + 2)) $((R + 3)) 0 2047; do
		readrow "$M/t.emb" $r || fail "[$opts] row $r next to the damaged row: $(cat "$T/row.err")"
		dd if="$T/src" bs=$RS skip=$r count=1 status=none | cmp -s - "$T/row" || fail "[$opts] row $r: wrong bytes"
	done
	readrow "$M/.snapshots/before/t.emb" $R && fail "[$opts] snapshot: reading the damaged row succeeded"
	readrow "$M/.snapshots/before/t.emb" $((R + 1)) || fail "[$opts] snapshot row $((R + 1)): $(cat "$T/row.err")"
	readrow "$M/t.emb" $R && fail "[$opts] row $R read fine the second time"
	ce=$(stat_field "$M" pool.checksum_errors)
	[ "${ce:-0}" -ge 3 ] || fail "[$opts] pool.checksum_errors is '${ce:-none}', want >= 3"
	cat "$M/t.emb" >/dev/null 2>&1 && fail "[$opts] cat of the whole table succeeded"
	say "[$opts] row $R: EIO (live, snapshot, again); its neighbours read right; checksum_errors=$ce"
	unmount_pool "$M"
done
mount_pool "$P" "$M" -o cache_size=0
dd if="$T/src" of="$M/t.emb" bs=$RS skip=$R seek=$R count=1 conv=notrunc status=none ||
	fail "rewriting the damaged row"
for pass in written remounted; do
	readrow "$M/t.emb" $R || fail "$pass: the rewritten row: $(cat "$T/row.err")"
	dd if="$T/src" bs=$RS skip=$R count=1 status=none | cmp -s - "$T/row" || fail "$pass: rewritten row: wrong bytes"
	readrow "$M/.snapshots/before/t.emb" $R && fail "$pass: the snapshot's damaged row reads"
	unmount_pool "$M"
	[ $pass = written ] && mount_pool "$P" "$M" -o cache_size=0
done
say "rewriting row $R healed it (also after a remount); the snapshot's copy is still EIO"

# ---- 2. a damaged catalog entry -------------------------------------------
P2="$T/pool2"
NAME=damage-catalog-entry.emb
mkpool "$P2" -s 32M -t "$NAME:16"
N=$(grep -c "$NAME" "$P2")
[ "$N" -eq 1 ] || fail "the table name is in the pool $N times"
AT=$(grep -obUa "$NAME" "$P2" | cut -d: -f1)
flip "$P2" $((AT + 3))
refused "catalog entry" "$P2" "^embfs: .*pool2: catalog entry 0 is damaged (checksum mismatch)$"

# ---- 3. a check that crashes ------------------------------------------------
P3="$T/pool3"
mkpool "$P3" -s 32M -t t.emb:16
export EMBFS_TEST_CHECK_CRASH=1
refused "crashing check" "$P3" "^embfs: .*pool3: damaged (libpmemobj crashed while checking it: SIGSEGV)$"
unset EMBFS_TEST_CHECK_CRASH
ls "$T"/core* 2>/dev/null && fail "a core file was left"
mount_pool "$P3" "$M"
[ -f "$M/t.emb" ] || fail "the pool does not mount without the crash"
unmount_pool "$M"
exit 0
