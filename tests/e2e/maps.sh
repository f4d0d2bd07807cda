#!/bin/sh
# maps: the tree's maps tell the truth (tests/tools/maps.py): every path a
# comment or doc page names exists, every file map lists its folder's files,
# nothing cites the design card outside the tree.  The checker must itself
# fail on a copy of the tree with a comment naming a missing file and with
# a file the map lacks.  No mount.
. "$(dirname "$0")/../lib.sh"
setup
CHECK="$TOP/tests/tools/maps.py"

python3 "$CHECK" "$TOP" || fail "the tree's maps and its files disagree (above)"

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
say "paths named exist, file maps are complete; a missing path or an unlisted file is caught"
