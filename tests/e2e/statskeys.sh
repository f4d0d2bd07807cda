#!/bin/sh
# statskeys: the stats key reference (docs/operations.md) cannot drift from
# the daemon: every key and metric family the source prints (fs/stats.c,
# fs/batch.c, fs/pcache.c) is in the table and every row of the table is
# printed (tests/tools/statskeys.py).  The checker must itself fail on a key
# added to a copy of the source without docs, and on a row dropped from a
# copy of the page.  No mount: metrics.sh checks a live mount's files.
. "$(dirname "$0")/../lib.sh"
setup
CHECK="$TOP/tests/tools/statskeys.py"
DOC="$TOP/docs/operations.md"

python3 "$CHECK" "$TOP" "$DOC" || fail "the key reference in docs/operations.md and the source disagree"

# a key added without docs
mkdir -p "$T/src/fs"
cp "$TOP/fs/stats.c" "$TOP/fs/batch.c" "$TOP/fs/pcache.c" "$T/src/fs/"
sed -i 's/^\(\tPUT("tables", .*\)$/\tPUT("pool.undocumented", "pool_undocumented", GAUGE, "x", 0);\n\1/' "$T/src/fs/stats.c"
grep -q 'pool.undocumented' "$T/src/fs/stats.c" || fail "could not add a key to a copy of fs/stats.c"
python3 "$CHECK" "$T/src" "$DOC" 2>"$T/err" && fail "statskeys.py passes a key the page lacks"
grep -q "'pool.undocumented' is printed by the daemon but not in the key reference" "$T/err" ||
	{ cat "$T/err" >&2; fail "statskeys.py does not name the undocumented key"; }

# a documented key the daemon no longer prints
grep -v '^| `batch.errors` |' "$DOC" >"$T/doc.md"
cmp -s "$DOC" "$T/doc.md" && fail "could not drop a row from a copy of the page"
python3 "$CHECK" "$TOP" "$T/doc.md" 2>"$T/err" && fail "statskeys.py passes a page without batch.errors"
grep -q "'batch.errors' is printed by the daemon but not in the key reference" "$T/err" ||
	{ cat "$T/err" >&2; fail "statskeys.py does not name the missing row"; }
say "source and key reference agree; a key added or a row dropped is caught"
