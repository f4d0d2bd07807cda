#!/bin/sh
# Random operations (tests/tools/fsx.c) on tables, compared byte for byte with
# a shadow file on tmpfs: 256-byte rows, odd row sizes (12 and 1 byte), the
# largest row (64 KiB); with the default row cache, with none, and with a
# tiny one flushed every millisecond (eviction and background write-back all
# the time); two runs at once; remounts in the middle of a run.
# FSX_SEEDS="a b c" and FSX_OPS=N override the fixed seeds and the run length;
# EMBFS_TEST_OPTS adds daemon arguments to every mount.
. "$(dirname "$0")/../lib.sh"
# pools and shadow files on tmpfs, where a persist barrier costs little
[ -z "$TMPDIR" ] && [ -d /dev/shm ] && [ -w /dev/shm ] && TMPDIR=/dev/shm && export TMPDIR
setup
OPTS=${EMBFS_TEST_OPTS:-}
FSX="$TOOLS/fsx"
[ -x "$FSX" ] || fail "$FSX is not built (run make)"
SEEDS=${FSX_SEEDS:-"11 12"}
OPS=${FSX_OPS:-1500}
M="$T/m"

# fsx_run NAME SEED [fsx args...]: a fresh run on M/NAME vs T/NAME.shadow
fsx_run() {
	name=$1; seed=$2; shift 2
	"$FSX" -q -n "$OPS" -s "$seed" "$@" "$M/$name" "$T/$name.shadow" ||
		fail "fsx on $name, mount options '$opts $OPTS' (reproduce: build/tools/fsx -n $OPS -s $seed $* FILE SHADOW)"
}

mkpool "$T/pool" -s 256M

for cfg in "cache:" "nocache:-o cache_size=0" "tinycache:-o cache_size=64K,dirty_age_ms=1"; do
	c=${cfg%%:*}
	opts=${cfg#*:}
	say "$c: 256-byte rows (dim=64 f32, the default)"
	mount_pool "$T/pool" "$M" $opts $OPTS
	for s in $SEEDS; do fsx_run "$c-f32x64-$s.emb" "$s"; done
	unmount_pool "$M"

	say "$c: 12-byte rows (dim=3 f32)"
	mount_pool "$T/pool" "$M" $opts $OPTS -o dim=3,dtype=f32
	for s in $SEEDS; do fsx_run "$c-f32x3-$s.emb" "$s" -m 64K -l 16K; done
	unmount_pool "$M"

	say "$c: 1-byte rows (dim=1 u8: every byte is a row)"
	mount_pool "$T/pool" "$M" $opts $OPTS -o dim=1,dtype=u8
	fsx_run "$c-u8x1.emb" 21 -m 16K -l 4K -f 3
	unmount_pool "$M"

	say "$c: 64 KiB rows (dim=16384 f32, the largest)"
	mount_pool "$T/pool" "$M" $opts $OPTS -o dim=16384,dtype=f32
	fsx_run "$c-f32x16k.emb" 22 -m 512K -l 256K -f 2
	unmount_pool "$M"
done

say "remount: every table above still matches its shadow"
mount_pool "$T/pool" "$M" $OPTS
for f in "$T"/*.shadow; do
	name=$(basename "$f" .shadow)
	"$FSX" -q -C "$M/$name" "$f" >/dev/null || fail "$name differs from its shadow after remount"
done

say "two runs at once on two tables"
"$FSX" -q -n "$OPS" -s 41 "$M/par1.emb" "$T/par1.emb.shadow" > "$T/par1.out" 2>&1 &
p1=$!
"$FSX" -q -n "$OPS" -s 42 "$M/par2.emb" "$T/par2.emb.shadow" > "$T/par2.out" 2>&1 &
p2=$!
wait $p1; r1=$?
wait $p2; r2=$?
[ $r1 = 0 ] || { cat "$T/par1.out" >&2; fail "fsx -s 41 beside another run"; }
[ $r2 = 0 ] || { cat "$T/par2.out" >&2; fail "fsx -s 42 beside another run"; }

say "remount in the middle of a run"
fsx_run mid.emb 31 -m 128K
unmount_pool "$M"
mount_pool "$T/pool" "$M" $OPTS
"$FSX" -q -C "$M/mid.emb" "$T/mid.emb.shadow" >/dev/null || fail "mid.emb differs after remount"
"$FSX" -q -K -n "$OPS" -s 32 -m 128K "$M/mid.emb" "$T/mid.emb.shadow" || fail "fsx -K -s 32 after remount"
unmount_pool "$M"
mount_pool "$T/pool" "$M" $OPTS -o cache_size=64K
"$FSX" -q -C "$M/mid.emb" "$T/mid.emb.shadow" >/dev/null || fail "mid.emb differs after second remount"
"$FSX" -q -K -n "$OPS" -s 33 -m 128K "$M/mid.emb" "$T/mid.emb.shadow" || fail "fsx -K -s 33 after remount"
unmount_pool "$M"
mount_pool "$T/pool" "$M" $OPTS
"$FSX" -q -C "$M/mid.emb" "$T/mid.emb.shadow" >/dev/null || fail "mid.emb differs after third remount"
unmount_pool "$M"

say "a 1 MiB cache against 64 MiB of rows: evictions and write-backs all the time"
mount_pool "$T/pool" "$M" $OPTS -o cache_size=1M,dirty_age_ms=20
"$FSX" -q -n 3000 -s 51 -m 64M -l 512K -c 1000 "$M/big.emb" "$T/big.emb.shadow" ||
	fail "fsx on a 64 MiB working set through a 1 MiB cache (reproduce: fsx -n 3000 -s 51 -m 64M -l 512K -c 1000)"
ev=$(stat_field "$M" cache.evictions)
[ "${ev:-0}" -gt 10000 ] || fail "expected many evictions through a 1 MiB cache, got ${ev:-none}"
say "  $ev evictions, $(stat_field "$M" cache.writebacks) write-backs"
unmount_pool "$M"
mount_pool "$T/pool" "$M" $OPTS
"$FSX" -q -C "$M/big.emb" "$T/big.emb.shadow" >/dev/null || fail "big.emb differs after remount"
unmount_pool "$M"
exit 0
