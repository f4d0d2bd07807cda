#!/bin/sh
# badpool: the daemon refuses what is not a sound embfs pool with one clear
# line on stderr and a non-zero exit, mounts nothing, and leaves the file
# byte for byte as it was (sha256).  Cases: random bytes, zeros, a file too
# small, a truncated pool, a flipped byte in the embfs superblock (label,
# uuid: covered by its checksum), a flipped byte in the checksummed part of
# the libpmemobj pool header, a missing path, a directory.  Each is tried
# daemonizing (the usual `embfs POOL MNT`) and in the foreground (-f).
. "$(dirname "$0")/../lib.sh"

setup
M="$T/mnt"
mkdir -p "$M"
MOUNTS="$MOUNTS $M"

# state PATH: what must not change
state() {
	if [ -d "$1" ]; then
		echo "dir $(ls -la --time-style=+%s.%N "$1" | sha256sum)"
	elif [ -e "$1" ]; then
		sha256sum <"$1"
	else
		echo missing
	fi
}

# flip FILE OFFSET: invert the bits of one byte
flip() {
	b=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ')
	[ -n "$b" ] || fail "no byte at $2 of $1"
	printf "\\$(printf %o $((b ^ 0xff)))" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none ||
		fail "flip $1 @$2"
}

# refuse NAME PATH: both ways of starting the daemon must refuse PATH
refuse() {
	name=$1; pool=$2
	before=$(state "$pool")
	for mode in daemon foreground; do
		if [ $mode = daemon ]; then
			"$EMBFS" -o pidfile="$T/pid" "$pool" "$M" >"$T/out" 2>"$T/err"
		else
			# if it wrongly mounted, -f would serve until the timeout's SIGTERM
			timeout -k 5 15 "$EMBFS" -f "$pool" "$M" >"$T/out" 2>"$T/err"
		fi
		rc=$?
		if is_mounted "$M"; then
			fusermount3 -u "$M"
			fail "$name ($mode): embfs mounted it"
		fi
		grep -qF " $M " /proc/mounts && fail "$name ($mode): $M in /proc/mounts"
		[ $rc -ne 0 ] || fail "$name ($mode): exit status 0"
		[ $rc -ne 124 ] && [ $rc -ne 137 ] || fail "$name ($mode): daemon ran until the timeout"
		n=$(wc -l <"$T/err")
		[ "$n" -eq 1 ] || { cat "$T/err" >&2; fail "$name ($mode): $n lines on stderr, want 1"; }
		grep -q '^embfs: ..........' "$T/err" || fail "$name ($mode): unclear message '$(cat "$T/err")'"
		LC_ALL=C grep -q '[^[:print:]]' "$T/err" && fail "$name ($mode): control bytes in the message"
		[ "$(state "$pool")" = "$before" ] || fail "$name ($mode): $pool was modified"
	done
	say "$(printf '%-22s' "$name") status $rc: $(sed "s|$T/||g" "$T/err")"
}

# a real pool with a table and some rows: the source of the damaged copies
mkpool "$T/good" -s 32M -L badpool -t user.emb:64
mount_pool "$T/good" "$T/gm"
rand_bytes 256K | dd of="$T/gm/user.emb" bs=64K count=4 iflag=fullblock status=none || fail "write rows"
unmount_pool "$T/gm"
[ "$(grep -caF EMBFSPL "$T/good")" -ge 1 ] || fail "no EMBFSPL magic in the pool"
SB=$(grep -obUa EMBFSPL "$T/good" | head -1 | cut -d: -f1)
[ "$(grep -obUa EMBFSPL "$T/good" | wc -l)" -eq 1 ] || say "note: magic found more than once, using offset $SB"
say "superblock (root object) at offset $SB"

rand_bytes 32M >"$T/random"
refuse "random bytes" "$T/random"

truncate -s 32M "$T/zeros"
refuse "zeros" "$T/zeros"

rand_bytes 4096 >"$T/tiny"
refuse "4 KiB file" "$T/tiny"

: >"$T/empty"
refuse "empty file" "$T/empty"

cp "$T/good" "$T/half"
truncate -s 16M "$T/half"
refuse "pool truncated to half" "$T/half"

# struct emb_super: magic[8] layout_version u32 reserved0 u32 uuid[16] label[64]
cp "$T/good" "$T/sb-label"
flip "$T/sb-label" $((SB + 32 + 3))
refuse "superblock label byte" "$T/sb-label"

cp "$T/good" "$T/sb-uuid"
flip "$T/sb-uuid" $((SB + 16 + $(rand 16)))
refuse "superblock uuid byte" "$T/sb-uuid"

cp "$T/good" "$T/sb-magic"
flip "$T/sb-magic" $((SB + 2))
refuse "superblock magic byte" "$T/sb-magic"

# libpmemobj's pool header: its checksum covers bytes 0..2047 (signature,
# version, features, uuids, creation time, arch flags) and itself at 4088.
for off in 0 8 $((40 + $(rand 16))) 130 $((144 + $(rand 1900))) 4090; do
	cp "$T/good" "$T/hdr"
	flip "$T/hdr" $off
	refuse "pool header byte $off" "$T/hdr"
done

refuse "missing path" "$T/no-such-pool"
mkdir "$T/dirpool"
refuse "directory" "$T/dirpool"

# the source pool itself is fine
mount_pool "$T/good" "$T/gm"
[ "$(stat_field "$T/gm" pool.label)" = badpool ] || fail "good pool: label"
[ "$(stat -c %s "$T/gm/user.emb")" = 262144 ] || fail "good pool: table size changed"
unmount_pool "$T/gm"
exit 0
