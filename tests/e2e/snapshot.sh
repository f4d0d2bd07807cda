#!/bin/sh
# Snapshots: mkdir .snapshots/NAME captures every table as of one instant,
# read-only, without copying; overwrites, truncates and unlinks after it do
# not change it; rmdir gives its space back; crashes leave it whole or absent;
# many snapshots each match a shadow copy.
. "$(dirname "$0")/../lib.sh"
[ -z "$TMPDIR" ] && [ -d /dev/shm ] && [ -w /dev/shm ] && TMPDIR=/dev/shm && export TMPDIR
setup
M="$T/m"
S="$M/.snapshots"
CHK="$TOOLS/snapcheck"
expect() { [ "$2" = "$3" ] || fail "$1: expected '$3', got '$2'"; }
erofs() { # erofs WHAT CMD...: the command must fail with EROFS
	what=$1; shift
	"$@" 2>"$T/err" && fail "$what succeeded in a snapshot"
	grep -q "Read-only file system" "$T/err" || { cat "$T/err" >&2; fail "$what: not EROFS"; }
}
free_bytes() { sync "$M"; stat -f -c '%f %S' "$M" | awk '{ printf "%d\n", $1 * $2 }'; }
# rows FILE ROW...: write those 256-byte rows of FILE
rows() {
	f=$1; shift
	for r in "$@"; do printf '%256s' x | dd of="$f" bs=256 seek="$r" conv=notrunc status=none || return 1; done
}
# seeks FILE: its data ranges by SEEK_DATA/SEEK_HOLE, then where a few
# seeks from inside a row land
seeks() {
	python3 - "$1" <<'EOF'
import errno, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
size, pos, out = os.fstat(fd).st_size, 0, []
while pos < size:
    try:
        d = os.lseek(fd, pos, os.SEEK_DATA)
    except OSError as e:
        if e.errno != errno.ENXIO:
            raise
        break
    pos = os.lseek(fd, d, os.SEEK_HOLE)
    out.append("%d-%d" % (d, pos))
for what, whence, at in (("data", os.SEEK_DATA, 600), ("hole", os.SEEK_HOLE, 300), ("data", os.SEEK_DATA, 1100)):
    out.append("%s@%d=%d" % (what, at, os.lseek(fd, at, whence)))
print(" ".join(out))
EOF
}

for variant in cache nocache; do
	opts=""
	[ $variant = nocache ] && opts="-o cache_size=0"
	say "[$variant] pre-image kept after overwrite, truncate and unlink"
	mkpool "$T/pool" -s 128M
	mount_pool "$T/pool" "$M" $opts
	rand_bytes 1M > "$T/v1"
	cp "$T/v1" "$M/t.emb"
	rand_bytes 300K > "$T/u1"
	cp "$T/u1" "$M/u.emb"
	mkdir "$S/s1" || fail "mkdir snapshot"
	expect "snapshot listing" "$(ls "$S")" s1
	expect "tables in it" "$(ls "$S/s1" | tr '\n' ' ')" "t.emb u.emb "
	rand_bytes 256K | dd of="$M/t.emb" bs=64k seek=3 conv=notrunc status=none
	truncate -s 1000 "$M/u.emb"
	cmp "$S/s1/t.emb" "$T/v1" || fail "snapshot changed by an overwrite"
	cmp "$S/s1/u.emb" "$T/u1" || fail "snapshot changed by a truncate"
	cmp -s "$M/t.emb" "$T/v1" && fail "the live table did not change"
	rm "$M/u.emb"
	cmp "$S/s1/u.emb" "$T/u1" || fail "snapshot lost an unlinked table"
	expect "size in snapshot" "$(stat -c %s "$S/s1/u.emb")" 307200
	cp --sparse=always "$S/s1/t.emb" "$T/copy" && cmp "$T/copy" "$T/v1" || fail "cp of a snapshot table"
	expect "snapshot xattr" "$(getfattr --only-values -n user.embfs.row_size "$S/s1/t.emb" 2>/dev/null)" 256

	say "[$variant] read-only: EROFS everywhere inside"
	erofs "write" sh -c "echo x > '$S/s1/t.emb'"
	erofs "truncate" truncate -s 0 "$S/s1/t.emb"
	erofs "unlink" rm -f "$S/s1/t.emb"
	erofs "setxattr" setfattr -n user.embfs.dim -v 8 "$S/s1/t.emb"
	erofs "create" sh -c "echo x > '$S/s1/new.emb'"
	erofs "mkdir inside" mkdir "$S/s1/d"
	erofs "rename out" mv "$S/s1/t.emb" "$M/z.emb"
	erofs "chmod" chmod 600 "$S/s1/t.emb"
	erofs "punch" fallocate -p -o 0 -l 4096 "$S/s1/t.emb"
	mkdir "$S/s1" 2>"$T/err" && fail "duplicate snapshot name"
	grep -q "File exists" "$T/err" || fail "duplicate name: not EEXIST"

	say "[$variant] rmdir gives the space back"
	f0=$(free_bytes)
	rmdir "$S/s1" || fail "rmdir snapshot"
	[ -z "$(ls "$S")" ] || fail "snapshot still listed"
	f1=$(free_bytes)
	[ "$f1" -gt $((f0 + 256 * 1024)) ] || fail "rmdir freed too little: $f0 -> $f1"

	say "[$variant] SEEK_DATA/SEEK_HOLE: a snapshot's table as taken, the live table as it is now"
	rows "$M/sp.emb" 2 3 7 && truncate -s 5120 "$M/sp.emb" || fail "writing sp.emb"
	mkdir "$S/s2" || fail "mkdir s2"
	rows "$M/sp.emb" 0 12 || fail "writing sp.emb after the snapshot"
	expect "snapshot's data" "$(seeks "$S/s2/sp.emb")" "512-1024 1792-2048 data@600=600 hole@300=300 data@1100=1792"
	expect "live data" "$(seeks "$M/sp.emb")" "0-256 512-1024 1792-2048 3072-3328 data@600=600 hole@300=300 data@1100=1792"
	rmdir "$S/s2" || fail "rmdir s2"
	unmount_pool "$M"
	mount_pool "$T/pool" "$M" $opts
	cmp -n 196608 "$M/t.emb" "$T/v1" || fail "live table after rmdir"
	unmount_pool "$M"
done

say "consistency under a concurrent writer (two tables)"
mkpool "$T/pool" -s 128M
mount_pool "$T/pool" "$M"
"$CHK" write "$M" 2000 30 &
W=$!
n=0
while kill -0 $W 2>/dev/null && [ $n -lt 12 ]; do
	n=$((n + 1))
	mkdir "$S/c$n" || fail "mkdir c$n"
	sleep 0.1 # pacing, to spread the snapshots over the writer's rounds
done
wait $W || fail "writer failed"
[ $n -ge 3 ] || skip "writer finished before enough snapshots ($n)"
for i in $(seq 1 $n); do
	out=$("$CHK" check "$S/c$i" 2000) || fail "snapshot c$i is not one consistent state"
done
say "$n snapshots, each one cut of the write sequence (last: $out)"
"$CHK" check "$M" 2000 | grep -q "rounds 30..30" || fail "live tables after the writer"

say "64 snapshots with interleaved writes match shadow copies"
rand_bytes 1M >"$T/shadow"
cp "$T/shadow" "$M/m.emb"
for i in $(seq 1 64); do
	mkdir "$S/m$i" || fail "mkdir m$i"
	cp "$T/shadow" "$T/sh$i"
	off=$(( (i * 7919) % 4000 ))
	rand_bytes 512 | tee "$T/p" | dd of="$M/m.emb" bs=256 seek=$off conv=notrunc status=none
	dd if="$T/p" of="$T/shadow" bs=256 seek=$off conv=notrunc status=none
done
for i in $(seq 1 64); do
	cmp "$S/m$i/m.emb" "$T/sh$i" || fail "snapshot m$i differs from its shadow"
done
cmp "$M/m.emb" "$T/shadow" || fail "live table differs from its shadow"
expect "snapshots in stats" "$(stat_field "$M" snapshots)" $((n + 64))
for i in $(seq 1 64); do [ $((i % 2)) = 0 ] && rmdir "$S/m$i"; done
unmount_pool "$M"
mount_pool "$T/pool" "$M"
for i in $(seq 1 2 64); do
	cmp "$S/m$i/m.emb" "$T/sh$i" || fail "snapshot m$i after dropping its neighbours and remounting"
done
cmp "$M/m.emb" "$T/shadow" || fail "live table after the drops"
unmount_pool "$M"

say "crash: a snapshot fsynced before SIGKILL is whole; one not yet durable is whole or absent"
mkpool "$T/pool" -s 64M
mount_pool "$T/pool" "$M" -o dirty_age_ms=60000
rand_bytes 512K > "$T/c1"
cp "$T/c1" "$M/t.emb"
mkdir "$S/durable"
python3 -c "import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd)" "$S/durable" 2>/dev/null ||
	sync "$S/durable"
rand_bytes 512K > "$T/c2"
cp "$T/c2" "$M/t.emb"
mkdir "$S/fresh"
rand_bytes 64K | dd of="$M/t.emb" bs=64k conv=notrunc status=none
crash_daemon "$M"
mount_pool "$T/pool" "$M"
expect "recovered" "$(stat_field "$M" pool.recovered)" 1
cmp "$S/durable/t.emb" "$T/c1" || fail "a durable snapshot changed across a crash"
if [ -d "$S/fresh" ]; then
	cmp "$S/fresh/t.emb" "$T/c2" || fail "a snapshot that survived the crash is partial"
	say "the snapshot taken just before the crash survived whole"
else
	say "the snapshot taken just before the crash is absent (it was not durable yet)"
fi
unmount_pool "$M"
