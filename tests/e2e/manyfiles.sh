#!/bin/sh
# Many tables: create 300 (odd names included), list them (readdir over many
# calls), stat them, remove half, remount, check the rest and their contents,
# reuse the freed catalog slots, rename many.
. "$(dirname "$0")/../lib.sh"
[ -z "$TMPDIR" ] && [ -d /dev/shm ] && [ -w /dev/shm ] && TMPDIR=/dev/shm && export TMPDIR
setup
# EMBFS_TEST_OPTS: extra daemon arguments for every mount, e.g. "-o cache_size=0"
OPTS=${EMBFS_TEST_OPTS:-}
M="$T/m"
export LC_ALL=C
N=300

expect() { [ "$2" = "$3" ] || fail "$1: expected '$3', got '$2'"; }
# name I: the I-th table's name; a few are odd on purpose
name() {
	case $1 in
	7) echo "with space $1.emb" ;;
	8) echo "ünïcødé-$1.emb" ;;
	9) printf 'long-%0250d\n' "$1" ;; # 255 bytes
	10) echo "-dash-$1" ;;
	11) echo "..dots..$1" ;;
	*) echo "t$1.emb" ;;
	esac
}
# content of table I: its name, then a row's worth of bytes that depend on I
content() { printf '%s\n%0300d\n' "$(name "$1")" "$1"; }
# check_table I: its content is right
check_table() {
	n=$(name "$1")
	content "$1" > "$T/want"
	cmp "$M/$n" "$T/want" >/dev/null 2>&1 || fail "content of '$n'"
}
# expected_list FILTER: names of tables I for which FILTER I succeeds, sorted
listed() { ls -A "$M" | grep -vx -e .embfs -e .snapshots | sort; }
want_list() {
	i=1
	while [ $i -le $N ]; do
		"$@" $i && name $i
		i=$((i + 1))
	done | sort
}
all() { true; }
odd() { [ $(($1 % 2)) = 1 ]; }

mkpool "$T/pool"
mount_pool "$T/pool" "$M" $OPTS
files=$(stat -f -c %c "$M")

say "create $N tables"
i=1
while [ $i -le $N ]; do
	content $i > "$M/$(name $i)" || fail "create table $i"
	i=$((i + 1))
done
(: > "$M/$(printf 'x%0255d' 0)") 2>/dev/null && fail "a 256-byte name was accepted"

say "list and stat"
want_list all > "$T/want.ls"
listed > "$T/got.ls"
cmp "$T/want.ls" "$T/got.ls" >/dev/null || { diff "$T/want.ls" "$T/got.ls" | head >&2; fail "ls of $N tables"; }
expect "ls -f entries (with . .. .embfs .snapshots)" "$(ls -f "$M" | wc -l)" $((N + 4))
expect "duplicates in readdir" "$(ls -f "$M" | sort | uniq -d)" ""
expect "find -type f" "$(find "$M" -maxdepth 1 -type f | wc -l)" $N
expect "tables" "$(stat_field "$M" tables)" $N
expect "free inodes" "$(stat -f -c %d "$M")" $((files - N))
i=1
while [ $i -le $N ]; do
	n=$(name $i)
	expect "stat '$n'" "$(stat -c '%s %F' "$M/$n")" "$(($(content $i | wc -c))) regular file"
	i=$((i + 1))
done
# inode numbers are distinct
expect "distinct inodes" "$(ls -i "$M" | awk '{ print $1 }' | sort | uniq -d)" ""

say "remove half"
i=2
while [ $i -le $N ]; do
	rm "$M/$(name $i)" || fail "rm table $i"
	i=$((i + 2))
done
want_list odd > "$T/want.ls"
listed > "$T/got.ls"
cmp "$T/want.ls" "$T/got.ls" >/dev/null || { diff "$T/want.ls" "$T/got.ls" | head >&2; fail "ls after removing half"; }

say "remount, check the rest"
unmount_pool "$M"
mount_pool "$T/pool" "$M" $OPTS
listed > "$T/got.ls"
cmp "$T/want.ls" "$T/got.ls" >/dev/null || { diff "$T/want.ls" "$T/got.ls" | head >&2; fail "ls after remount"; }
expect "tables after remount" "$(stat_field "$M" tables)" $((N / 2))
expect "free inodes after remount" "$(stat -f -c %d "$M")" $((files - N / 2))
i=1
while [ $i -le $N ]; do
	if odd $i; then
		check_table $i
	else
		[ -e "$M/$(name $i)" ] && fail "removed table $(name $i) is back"
	fi
	i=$((i + 1))
done

say "reuse the freed slots, rename many"
i=2
while [ $i -le $N ]; do
	content $i > "$M/$(name $i)" || fail "re-create table $i"
	i=$((i + 2))
done
i=1
while [ $i -le $N ]; do
	mv "$M/$(name $i)" "$M/r-$(name $i)" || fail "rename table $i"
	i=$((i + 3))
done
unmount_pool "$M"
mount_pool "$T/pool" "$M" $OPTS
expect "tables at the end" "$(stat_field "$M" tables)" $N
expect "ls -f at the end" "$(ls -f "$M" | wc -l)" $((N + 4))
i=1
while [ $i -le $N ]; do
	n=$(name $i)
	if [ $((i % 3)) = 1 ]; then
		[ -e "$M/$n" ] && fail "'$n' still there after rename"
		content $i | cmp - "$M/r-$n" >/dev/null 2>&1 || fail "content of renamed 'r-$n'"
	else
		check_table $i
	fi
	i=$((i + 1))
done
unmount_pool "$M"
exit 0
