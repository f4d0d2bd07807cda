#!/bin/sh
# manpages: the six manual pages in man/ lint clean with `mandoc -T lint` (which
# must itself catch a bad page), name every option each program's --help
# lists, and `make install DESTDIR=...` puts them, unchanged, in
# PREFIX/share/man/man5 and man8 under DESTDIR.
. "$(dirname "$0")/../lib.sh"
command -v mandoc >/dev/null || fail "mandoc is not installed (make deps installs it)"
setup

PAGES="man5/embfs.5 man8/embfs.8 man8/mkfs.embfs.8 man8/fsck.embfs.8 man8/embfsctl.8 man8/embfs-umount.8"

# the lint catches a page with a fault (else a clean result proves nothing)
printf '.TH T 8 2026-01-01\n.SH NAME\nt \\- t \n.SH DESCRIPTION\nx\n' >"$T/bad.8"
out=$(mandoc -T lint "$T/bad.8" 2>&1) && [ -z "$out" ] && fail "mandoc -T lint passes a page with trailing whitespace"

for p in $PAGES; do
	f="$TOP/man/${p#*/}"
	[ -f "$f" ] || fail "man/${p#*/} is missing"
	out=$(mandoc -T lint "$f" 2>&1) || fail "mandoc -T lint man/${p#*/}: $out"
	[ -z "$out" ] || fail "mandoc -T lint man/${p#*/} prints: $out"
done
say "mandoc -T lint: the six pages are clean"

# every option a program's --help names is in its page (the page rendered,
# so that \- and fonts do not hide it)
for prog in embfs mkfs.embfs fsck.embfs embfsctl embfs-umount; do
	[ -x "$BUILD/$prog" ] || fail "$BUILD/$prog not built (make)"
	mandoc -T ascii "$TOP/man/$prog.8" | col -b >"$T/$prog.txt"
	"$BUILD/$prog" --help >"$T/$prog.help" 2>&1 || fail "$prog --help exits non-zero"
	# -x and --long flags, and -o NAME= options
	opts=$(grep -oE '(^|[ [|,])--?[a-zA-Z][a-z_-]*' "$T/$prog.help" | sed 's/^[ [|,]//' | sort -u)
	oopts=$(grep -oE -- '-o [a-z_]+=?' "$T/$prog.help" | sed 's/^-o //' | sort -u)
	[ -n "$opts" ] || fail "no option found in $prog --help"
	for o in $opts $oopts; do
		# the option as a word of its own (dim= may be followed by anything)
		case $o in *=) end= ;; *) end='([^a-zA-Z_]|$)' ;; esac
		grep -qE -- "(^|[^a-zA-Z_-])$o$end" "$T/$prog.txt" ||
			fail "$prog --help names '$o', man/$prog.8 does not"
	done
done
say "each page names every option of its program's --help"

# make install places them, DESTDIR honoured
D="$T/root"
make -s -C "$TOP" install BUILD="$BUILD" DESTDIR="$D" PREFIX=/usr/local >"$T/make.out" 2>&1 ||
	{ cat "$T/make.out" >&2; fail "make install DESTDIR=$D"; }
for p in $PAGES; do
	cmp -s "$TOP/man/${p#*/}" "$D/usr/local/share/man/$p" ||
		fail "make install DESTDIR=$D did not place man/${p#*/} as usr/local/share/man/$p"
done
say "make install DESTDIR: the six pages in share/man/man5 and man8"
