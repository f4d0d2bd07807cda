#!/bin/sh
# maps: the tree's maps tell the truth (tests/tools/maps.py): every path a
# comment or doc page names exists, every file map lists its folder's files,
# nothing cites the design card outside the tree.  The checker must itself
# fail on a copy of the tree with a comment naming a missing file and with
# a file the map lacks.  And no C function is over 80 lines
# (tests/tools/longfn.py), which must fail on a copy with one of 81.  No
# mount.
. "$(dirname "$0")/../lib.sh"
setup
CHECK="$TOP/tests/tools/maps.py"
LONGFN="$TOP/tests/tools/longfn.py"

python3 "$CHECK" "$TOP" || fail "the tree's maps and its files disagree (above)"
python3 "$LONGFN" "$TOP" || fail "a C function is over 80 lines (above)"

# a copy of the tree's sources (no build trees, no .git)
(cd "$TOP" && tar cf - --exclude='./build*' --exclude=./.git .) | (mkdir -p "$T/src" && cd "$T/src" && tar xf -)
python3 "$CHECK" "$T/src" || fail "the checker fails on an unchanged copy"

# a comment naming a file that does not exist (the names are built here so
# that this script does not name them itself)
MISSING=store/nosuch UNLISTED=fs/unlisted
sed -i "1a * (see $MISSING.c)" "$T/src/store/view.c"
python3 "$CHECK" "$T/src" 2>"$T/err" && fail "maps.py passes a comment naming $MISSING.c"
grep -q "names $MISSING.c, which does not exist" "$T/err" || { cat "$T/err" >&2; fail "maps.py does not name the missing file"; }
cp "$TOP/store/view.c" "$T/src/store/view.c"

# a file the map does not list
printf '/* a file of fs/ */\n' >"$T/src/$UNLISTED.c"
python3 "$CHECK" "$T/src" 2>"$T/err" && fail "maps.py passes $UNLISTED.c, which fs/fs.h does not list"
grep -q "$UNLISTED.c is missing from the file map" "$T/err" || { cat "$T/err" >&2; fail "maps.py does not name the unlisted file"; }
rm "$T/src/$UNLISTED.c"

# fs/ calling the store past the cache layer
printf 'static int x(void) { return store_sync(0); }\n' >>"$T/src/fs/base.c"
python3 "$CHECK" "$T/src" 2>"$T/err" && fail "maps.py passes a store_ call in fs/base.c"
grep -q "fs/base.c:.*fs/ reaches past the cache layer" "$T/err" || { cat "$T/err" >&2; fail "maps.py does not name the call past the cache layer"; }
cp "$TOP/fs/base.c" "$T/src/fs/base.c"

# a function of 80 lines passes, one of 81 does not (lines between its
# braces)
probe() { # probe N: a function of N lines at the end of store/view.c
	cp "$TOP/store/view.c" "$T/src/store/view.c"
	{ printf 'static int longfn_probe(void)\n{\n'
	  i=1; while [ $i -lt "$1" ]; do printf '\t(void)0;\n'; i=$((i + 1)); done
	  printf '\treturn 0;\n}\n'; } >>"$T/src/store/view.c"
}
python3 "$LONGFN" "$T/src" || fail "longfn.py fails on an unchanged copy"
probe 80
python3 "$LONGFN" "$T/src" 2>"$T/err" || { cat "$T/err" >&2; fail "longfn.py fails a function of 80 lines"; }
probe 81
python3 "$LONGFN" "$T/src" 2>"$T/err" && fail "longfn.py passes a function of 81 lines"
grep -q "store/view.c:.*longfn_probe is 81 lines" "$T/err" || { cat "$T/err" >&2; fail "longfn.py does not name the long function"; }
cp "$TOP/store/view.c" "$T/src/store/view.c"
say "paths named exist, file maps are complete, no function is over 80 lines; a missing path, an unlisted file or a long function is caught"
