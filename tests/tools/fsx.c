/*
 * fsx: random file operations on a file in an embfs mount and, identically,
 * on a shadow file on tmpfs; stops at the first divergence.
 *
 * usage: fsx [-n OPS] [-s SEED] [-m NEAR] [-l MAXLEN] [-f FARPCT] [-M MMAPPCT]
 *            [-c EVERY] [-K] [-C] [-q] FILE SHADOW
 *   -n OPS     operations to run (1000)
 *   -s SEED    RNG seed (default: EMBFS_SEED, else from the clock); always printed
 *   -m NEAR    most ordinary offsets fall in [0, NEAR) (256 KiB)
 *   -l MAXLEN  longest write/read/punch (64 KiB; at most 64 MiB)
 *   -f FARPCT  percent of writes/truncates that go to offsets near 1e12 (5)
 *   -M MMAPPCT percent of ops that are mapped writes (store into a
 *              MAP_SHARED mapping, msync MS_SYNC: the kernel writes the
 *              pages back) or mapped reads, at near offsets (0: none, and
 *              the ops of a seed are those of fsx without -M)
 *   -c EVERY   full compare every EVERY ops (100) and always at the end
 *   -K         keep: continue on the existing FILE and SHADOW (no O_TRUNC)
 *   -C         compare only: one full compare, no operations
 *   -q         quiet: print only the seed and the verdict
 *
 * Operations: pwrite (partial rows, rows spanning writes, past EOF, far
 * offsets), ftruncate (shrink mid-row, grow), fallocate(PUNCH_HOLE |
 * KEEP_SIZE), pread compare, lseek(SEEK_DATA/SEEK_HOLE) checks, page cache
 * drops, reopen, fsync.  A full compare checks the size, every byte of the
 * near part, every data extent either file reports beyond it, and that every
 * non-zero byte lies in a data extent of FILE (so holes reported by SEEK_HOLE
 * really are holes).  Exit 0: no divergence; 1: divergence (op number,
 * offset, expected vs got, then the last operations); 2: usage or setup.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* SEEK_DATA, fallocate */
#endif
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>
#include <linux/falloc.h>

#define CHUNK (1u << 20)
#define MAXLEN_MAX (64u << 20)
#define LOGN 24

static const uint64_t far_base[] = { 1000000000000ull, 1001000000123ull, 4000000000017ull };
#define NFAR (sizeof(far_base) / sizeof(far_base[0]))

static const char *path, *spath;
static int mfd = -1, sfd = -1;
static uint64_t rng, near = 256 << 10, maxlen = 64 << 10, farpct = 5, mmappct, rs = 256;
static size_t bufsz = CHUNK; /* mbuf, sbuf, wbuf: max(CHUNK, maxlen) */
static unsigned long opno;
static int quiet;
static char *mbuf, *sbuf, *wbuf;
static char oplog[LOGN][128];

static uint64_t rnd64(void)
{
	/* splitmix64 */
	uint64_t z = (rng += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static uint64_t rnd(uint64_t n)
{
	return n ? rnd64() % n : 0;
}

static void logop(const char *fmt, ...)
{
	va_list ap;
	char *l = oplog[opno % LOGN];
	int k = snprintf(l, sizeof(oplog[0]), "%6lu ", opno);
	va_start(ap, fmt);
	vsnprintf(l + k, sizeof(oplog[0]) - (size_t)k, fmt, ap);
	va_end(ap);
	if (!quiet && getenv("FSX_VERBOSE"))
		fprintf(stderr, "%s\n", l);
}

static void __attribute__((noreturn, format(printf, 1, 2))) diverge(const char *fmt, ...)
{
	va_list ap;
	fflush(stdout);
	fprintf(stderr, "fsx: DIVERGENCE at op %lu: ", opno);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nfsx: file %s, shadow %s, row_size %" PRIu64 "\nfsx: last operations:\n",
		path, spath, rs);
	unsigned long first = opno >= LOGN - 1 ? opno - (LOGN - 1) : 0;
	for (unsigned long i = first; i <= opno; i++)
		if (oplog[i % LOGN][0])
			fprintf(stderr, "  %s\n", oplog[i % LOGN]);
	exit(1);
}

static void __attribute__((noreturn)) die(const char *what)
{
	fprintf(stderr, "fsx: op %lu: %s: %s\n", opno, what, strerror(errno));
	exit(2);
}

static uint64_t fsize(int fd, const char *who)
{
	struct stat st;
	if (fstat(fd, &st) != 0)
		diverge("fstat %s: %s", who, strerror(errno));
	return (uint64_t)st.st_size;
}

static void check_size(void)
{
	uint64_t m = fsize(mfd, "file"), s = fsize(sfd, "shadow");
	if (m != s)
		diverge("size: expected %" PRIu64 ", got %" PRIu64, s, m);
}

/* Compare n bytes read at off; report the first differing byte. */
static void same_bytes(uint64_t off, size_t n, const char *what)
{
	if (memcmp(mbuf, sbuf, n) == 0)
		return;
	size_t i = 0;
	while (mbuf[i] == sbuf[i])
		i++;
	size_t j = i;
	while (j < n && mbuf[j] != sbuf[j])
		j++;
	diverge("%s: content differs at offset %" PRIu64 " (row %" PRIu64 " +%" PRIu64
		"): expected 0x%02x, got 0x%02x (%zu differing bytes from there)",
		what, off + i, (off + i) / rs, (off + i) % rs, (unsigned char)sbuf[i],
		(unsigned char)mbuf[i], j - i);
}

/* Read [off, off+n) from both (n <= bufsz) and compare, lengths included. */
static void cmp_range(uint64_t off, size_t n, const char *what)
{
	ssize_t a = pread(mfd, mbuf, n, (off_t)off);
	int ea = errno;
	ssize_t b = pread(sfd, sbuf, n, (off_t)off);
	if (b < 0)
		die("pread shadow");
	if (a != b)
		diverge("%s: pread(off=%" PRIu64 ", len=%zu) returned %zd (%s), expected %zd", what,
			off, n, a, a < 0 ? strerror(ea) : "short", b);
	same_bytes(off, (size_t)b, what);
}

/* ---- extents -------------------------------------------------------- */

struct ext {
	uint64_t a, b;
};
struct extv {
	struct ext *v;
	size_t n, cap;
};

static void ext_push(struct extv *e, uint64_t a, uint64_t b)
{
	if (e->n == e->cap) {
		e->cap = e->cap ? 2 * e->cap : 64;
		e->v = realloc(e->v, e->cap * sizeof(*e->v));
		if (!e->v)
			die("realloc");
	}
	e->v[e->n++] = (struct ext){ a, b };
}

/* Data extents of fd below size via SEEK_DATA/SEEK_HOLE, checked for sanity. */
static void extents(int fd, uint64_t size, struct extv *e, const char *who)
{
	uint64_t pos = 0;
	e->n = 0;
	while (pos < size) {
		off_t d = lseek(fd, (off_t)pos, SEEK_DATA);
		if (d < 0) {
			if (errno == ENXIO)
				break;
			diverge("lseek(%s, %" PRIu64 ", SEEK_DATA): %s", who, pos, strerror(errno));
		}
		if ((uint64_t)d < pos || (uint64_t)d >= size)
			diverge("lseek(%s, %" PRIu64 ", SEEK_DATA) = %lld, size %" PRIu64, who, pos,
				(long long)d, size);
		off_t h = lseek(fd, d, SEEK_HOLE);
		if (h < 0)
			diverge("lseek(%s, %lld, SEEK_HOLE): %s", who, (long long)d, strerror(errno));
		if (h <= d || (uint64_t)h > size)
			diverge("lseek(%s, %lld, SEEK_HOLE) = %lld, size %" PRIu64, who, (long long)d,
				(long long)h, size);
		ext_push(e, (uint64_t)d, (uint64_t)h);
		pos = (uint64_t)h;
	}
}

static int ext_cmp(const void *x, const void *y)
{
	const struct ext *a = x, *b = y;
	return a->a < b->a ? -1 : a->a > b->a;
}

/* First non-zero byte of the shadow in [a, b), or UINT64_MAX. */
static uint64_t shadow_nonzero(uint64_t a, uint64_t b)
{
	uint64_t pos = a;
	while (pos < b) {
		off_t d = lseek(sfd, (off_t)pos, SEEK_DATA);
		if (d < 0 || (uint64_t)d >= b)
			return UINT64_MAX;
		off_t h = lseek(sfd, d, SEEK_HOLE);
		uint64_t end = (uint64_t)h < b ? (uint64_t)h : b;
		for (uint64_t p = (uint64_t)d; p < end;) {
			size_t n = end - p < CHUNK ? (size_t)(end - p) : CHUNK;
			ssize_t r = pread(sfd, sbuf, n, (off_t)p);
			if (r <= 0)
				die("pread shadow");
			for (ssize_t i = 0; i < r; i++)
				if (sbuf[i])
					return p + (uint64_t)i;
			p += (uint64_t)r;
		}
		pos = end;
	}
	return UINT64_MAX;
}

/* Size, the near part byte for byte, every extent either side reports, and
 * every non-zero byte inside a data extent of the file. */
static void full_compare(const char *why)
{
	static struct extv me, se, re;
	check_size();
	uint64_t size = fsize(sfd, "shadow");
	extents(mfd, size, &me, "file");
	extents(sfd, size, &se, "shadow");
	re.n = 0;
	uint64_t lim = 4 * near + 4 * maxlen + 4 * rs;
	if (size)
		ext_push(&re, 0, size < lim ? size : lim);
	for (size_t i = 0; i < me.n; i++)
		ext_push(&re, me.v[i].a, me.v[i].b);
	for (size_t i = 0; i < se.n; i++)
		ext_push(&re, se.v[i].a, se.v[i].b);
	if (re.n)
		qsort(re.v, re.n, sizeof(*re.v), ext_cmp);
	size_t k = 0;
	for (size_t i = 0; i < re.n; i++) {
		if (k && re.v[i].a <= re.v[k - 1].b) {
			if (re.v[i].b > re.v[k - 1].b)
				re.v[k - 1].b = re.v[i].b;
		} else {
			re.v[k++] = re.v[i];
		}
	}
	re.n = k;
	size_t mi = 0;
	uint64_t bytes = 0;
	for (size_t i = 0; i < re.n; i++) {
		for (uint64_t p = re.v[i].a; p < re.v[i].b;) {
			size_t n = re.v[i].b - p < CHUNK ? (size_t)(re.v[i].b - p) : CHUNK;
			cmp_range(p, n, why);
			for (size_t j = 0; j < n; j++) {
				if (!sbuf[j])
					continue;
				uint64_t q = p + j;
				while (mi < me.n && me.v[mi].b <= q)
					mi++;
				if (mi == me.n || me.v[mi].a > q)
					diverge("%s: offset %" PRIu64 " holds 0x%02x but SEEK_DATA/SEEK_HOLE "
						"report a hole there", why, q, (unsigned char)sbuf[j]);
			}
			p += n;
			bytes += n;
		}
	}
	if (!quiet)
		printf("fsx: op %lu: full compare ok (%s): size %" PRIu64 ", %zu file extents, %" PRIu64
		       " bytes compared\n", opno, why, size, me.n, bytes);
}

/* ---- choosing offsets and lengths ------------------------------------ */

static uint64_t far_off(void)
{
	uint64_t spread = near < (64u << 10) ? near : (64u << 10);
	return far_base[rnd(NFAR)] + rnd(spread);
}

static uint64_t near_off(uint64_t size)
{
	uint64_t nrows = near / rs + 1;
	switch (rnd(10)) {
	case 0: case 1: case 2: case 3:
		return rnd(near);
	case 4: case 5:
		return rnd(nrows) * rs;                              /* row start */
	case 6:
		return rnd(nrows) * rs + rs - 1 - rnd(rs < 8 ? rs : 8); /* just before a row end */
	case 7: case 8:
		if (size <= 2 * near) {                              /* around EOF */
			uint64_t w = 2 * rs + 64;
			uint64_t lo = size > w ? size - w : 0;
			return lo + rnd(size - lo + w);
		}
		return rnd(near);
	default:
		return 0;
	}
}

static size_t pick_len(void)
{
	uint64_t n;
	switch (rnd(8)) {
	case 0:
		n = 1 + rnd(8);
		break;
	case 1:
		n = rs * (1 + rnd(4));
		break;
	case 2:
		n = 1 + rnd(2 * rs);
		break;
	case 3:
		n = rs - rnd(rs < 4 ? rs : 4);
		break;
	default:
		n = 1 + rnd(maxlen);
	}
	if (n > maxlen)
		n = maxlen;
	return (size_t)(n ? n : 1);
}

static void fill(char *b, size_t n)
{
	uint8_t seed = (uint8_t)rnd64();
	if (rnd(8) == 0) { /* now and then a block with zero bytes in it */
		for (size_t i = 0; i < n; i++)
			b[i] = (char)(i % 3 ? 0 : seed + i);
		return;
	}
	for (size_t i = 0; i < n; i += 8) {
		uint64_t v = rnd64();
		memcpy(b + i, &v, n - i < 8 ? n - i : 8);
	}
	for (size_t i = 0; i < n; i++) /* non-zero bytes make holes visible */
		if (!b[i])
			b[i] = (char)(seed | 1);
}

/* ---- operations ----------------------------------------------------- */

static void op_write(void)
{
	uint64_t size = fsize(sfd, "shadow");
	uint64_t off = rnd(100) < farpct ? far_off() : near_off(size);
	size_t len = pick_len();
	logop("write off=%" PRIu64 " len=%zu (rows %" PRIu64 "..%" PRIu64 ") size=%" PRIu64, off, len,
	      off / rs, (off + len - 1) / rs, size);
	fill(wbuf, len);
	ssize_t a = pwrite(mfd, wbuf, len, (off_t)off);
	int ea = errno;
	ssize_t b = pwrite(sfd, wbuf, len, (off_t)off);
	if (b != (ssize_t)len)
		die("pwrite shadow");
	if (a != b)
		diverge("pwrite(off=%" PRIu64 ", len=%zu) returned %zd (%s)", off, len, a,
			a < 0 ? strerror(ea) : "short");
	check_size();
}

static void op_read(void)
{
	uint64_t size = fsize(sfd, "shadow");
	uint64_t off;
	if (size > 4 * near && rnd(2)) { /* near a data extent of a sparse file */
		off_t d = lseek(sfd, (off_t)rnd(size), SEEK_DATA);
		uint64_t back = rnd(rs + 1);
		off = d < 0 ? rnd(near) : (uint64_t)d > back ? (uint64_t)d - back : 0;
	} else {
		off = near_off(size);
	}
	size_t len = pick_len();
	logop("read  off=%" PRIu64 " len=%zu size=%" PRIu64, off, len, size);
	cmp_range(off, len, "pread");
}

static void op_truncate(void)
{
	uint64_t size = fsize(sfd, "shadow"), ns;
	const char *kind;
	switch (rnd(6)) {
	case 0:
		kind = "mid-row";
		ns = rnd((size < near ? size : near) / rs + 1) * rs + 1 + rnd(rs > 1 ? rs - 1 : 1);
		break;
	case 1:
		kind = "shrink";
		ns = rnd((size < 2 * near ? size : 2 * near) + 1);
		break;
	case 2:
		kind = "grow";
		ns = size <= 2 * near ? size + rnd(2 * rs + maxlen) : rnd(2 * near);
		break;
	case 3:
		if (rnd(100) < farpct * 4) {
			kind = "far";
			ns = far_off();
			break;
		}
		/* fall through */
	case 4:
		kind = "row";
		ns = rnd(near / rs + 1) * rs;
		break;
	default:
		kind = "zero";
		ns = rnd(4) ? size - size % rs : 0;
	}
	logop("trunc %s %" PRIu64 " -> %" PRIu64, kind, size, ns);
	int a = ftruncate(mfd, (off_t)ns);
	int ea = errno;
	if (ftruncate(sfd, (off_t)ns) != 0)
		die("ftruncate shadow");
	if (a != 0)
		diverge("ftruncate(%" PRIu64 "): %s", ns, strerror(ea));
	check_size();
}

static void op_punch(void)
{
	uint64_t size = fsize(sfd, "shadow"), off, len;
	switch (rnd(6)) {
	case 0: /* from a near offset across everything, far regions included */
		off = near_off(size);
		len = 1 + rnd(5000000000000ull);
		break;
	case 1:
		off = far_off();
		len = pick_len();
		break;
	case 2:
		off = rnd(near / rs + 1) * rs;
		len = rs * (1 + rnd(8));
		break;
	default:
		off = near_off(size);
		len = pick_len();
	}
	logop("punch off=%" PRIu64 " len=%" PRIu64 " size=%" PRIu64, off, len, size);
	int a = fallocate(mfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len);
	int ea = errno;
	if (fallocate(sfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len) != 0)
		die("fallocate shadow");
	if (a != 0)
		diverge("fallocate(PUNCH_HOLE, off=%" PRIu64 ", len=%" PRIu64 "): %s", off, len,
			strerror(ea));
	check_size();
}

static void op_seek(void)
{
	uint64_t size = fsize(sfd, "shadow");
	uint64_t off = rnd(3) == 0 && size ? rnd(size + rs) : near_off(size);
	int whence = rnd(2) ? SEEK_DATA : SEEK_HOLE;
	const char *wn = whence == SEEK_DATA ? "SEEK_DATA" : "SEEK_HOLE";
	logop("lseek off=%" PRIu64 " %s size=%" PRIu64, off, wn, size);
	off_t r = lseek(mfd, (off_t)off, whence);
	int e = errno;
	if (off >= size) {
		if (r >= 0 || e != ENXIO)
			diverge("lseek(%" PRIu64 ", %s) at/after EOF %" PRIu64 ": got %lld (%s), expected ENXIO",
				off, wn, size, (long long)r, r < 0 ? strerror(e) : "no error");
		return;
	}
	if (whence == SEEK_DATA) {
		uint64_t d;
		if (r < 0) {
			if (e != ENXIO)
				diverge("lseek(%" PRIu64 ", SEEK_DATA): %s", off, strerror(e));
			d = size;
		} else {
			d = (uint64_t)r;
			if (d < off || d >= size)
				diverge("lseek(%" PRIu64 ", SEEK_DATA) = %" PRIu64 ", size %" PRIu64, off, d, size);
		}
		uint64_t z = shadow_nonzero(off, d);
		if (z != UINT64_MAX)
			diverge("lseek(%" PRIu64 ", SEEK_DATA) = %" PRIu64 " skips data at %" PRIu64, off, d, z);
		return;
	}
	if (r < 0)
		diverge("lseek(%" PRIu64 ", SEEK_HOLE): %s", off, strerror(e));
	uint64_t h = (uint64_t)r;
	if (h < off || h > size)
		diverge("lseek(%" PRIu64 ", SEEK_HOLE) = %" PRIu64 ", size %" PRIu64, off, h, size);
	uint64_t rowend = (h / rs + 1) * rs;
	uint64_t z = shadow_nonzero(h, rowend < size ? rowend : size);
	if (z != UINT64_MAX)
		diverge("lseek(%" PRIu64 ", SEEK_HOLE) = %" PRIu64 " but offset %" PRIu64 " holds data", off,
			h, z);
}

/* A page-aligned shared mapping of [off, off + len) of the file: the
 * address of byte off, the mapping's start and length in *base, *mlen. */
static char *map_range(uint64_t off, size_t len, int prot, void **base, size_t *mlen)
{
	uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE), a = off - off % pg;
	*mlen = (size_t)(off + len - a);
	*base = mmap(NULL, *mlen, prot, MAP_SHARED, mfd, (off_t)a);
	return *base == MAP_FAILED ? NULL : (char *)*base + (off - a);
}

/* Stores into a shared mapping, written back by msync(MS_SYNC) (the file
 * is first grown to cover the range, as xfstests' fsx does); the shadow
 * gets the same bytes with pwrite. */
static void op_mapwrite(void)
{
	uint64_t size = fsize(sfd, "shadow");
	uint64_t off = near_off(size);
	size_t len = pick_len();
	logop("mapwrite off=%" PRIu64 " len=%zu (rows %" PRIu64 "..%" PRIu64 ") size=%" PRIu64, off, len,
	      off / rs, (off + len - 1) / rs, size);
	fill(wbuf, len);
	if (off + len > size) {
		int a = ftruncate(mfd, (off_t)(off + len));
		int ea = errno;
		if (ftruncate(sfd, (off_t)(off + len)) != 0)
			die("ftruncate shadow");
		if (a != 0)
			diverge("mapwrite: ftruncate(%" PRIu64 "): %s", off + len, strerror(ea));
	}
	void *base;
	size_t mlen;
	char *p = map_range(off, len, PROT_READ | PROT_WRITE, &base, &mlen);
	if (!p)
		diverge("mapwrite: mmap(off=%" PRIu64 ", len=%zu): %s", off, len, strerror(errno));
	memcpy(p, wbuf, len);
	if (msync(base, mlen, MS_SYNC) != 0)
		diverge("mapwrite: msync(off=%" PRIu64 ", len=%zu): %s", off, len, strerror(errno));
	if (munmap(base, mlen) != 0)
		die("munmap");
	if (pwrite(sfd, wbuf, len, (off_t)off) != (ssize_t)len)
		die("pwrite shadow");
	check_size();
}

/* Loads from a shared mapping of a range inside the file, compared with
 * the shadow's bytes. */
static void op_mapread(void)
{
	uint64_t size = fsize(sfd, "shadow");
	if (!size) {
		logop("mapread (empty file)");
		return;
	}
	uint64_t off = rnd(size < near ? size : near);
	size_t len = pick_len();
	if (off + len > size)
		len = (size_t)(size - off);
	logop("mapread off=%" PRIu64 " len=%zu size=%" PRIu64, off, len, size);
	void *base;
	size_t mlen;
	char *p = map_range(off, len, PROT_READ, &base, &mlen);
	if (!p)
		diverge("mapread: mmap(off=%" PRIu64 ", len=%zu): %s", off, len, strerror(errno));
	memcpy(mbuf, p, len);
	if (munmap(base, mlen) != 0)
		die("munmap");
	if (pread(sfd, sbuf, len, (off_t)off) != (ssize_t)len)
		die("pread shadow");
	same_bytes(off, len, "mapread");
}

static int open_file(int keep)
{
	int fd = open(path, O_RDWR | O_CREAT | (keep ? 0 : O_TRUNC), 0644);
	if (fd < 0) {
		fprintf(stderr, "fsx: %s: %s\n", path, strerror(errno));
		exit(2);
	}
	return fd;
}

static void op_misc(void)
{
	switch (rnd(3)) {
	case 0:
		logop("drop page cache");
		if (posix_fadvise(mfd, 0, 0, POSIX_FADV_DONTNEED) != 0)
			die("posix_fadvise");
		break;
	case 1:
		logop("reopen");
		close(mfd);
		mfd = open_file(1);
		break;
	default:
		logop("fsync");
		if (fsync(mfd) != 0)
			diverge("fsync: %s", strerror(errno));
	}
}

static uint64_t num(const char *s)
{
	char *end;
	errno = 0;
	uint64_t v = strtoull(s, &end, 0);
	if (errno || end == s)
		goto bad;
	switch (*end) {
	case 'k': case 'K': v <<= 10; end++; break;
	case 'm': case 'M': v <<= 20; end++; break;
	}
	if (*end)
		goto bad;
	return v;
bad:
	fprintf(stderr, "fsx: bad number '%s'\n", s);
	exit(2);
}

int main(int argc, char **argv)
{
	unsigned long nops = 1000, every = 100;
	int keep = 0, cmponly = 0, c;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	const char *env_seed = getenv("EMBFS_SEED");
	uint64_t seed = env_seed && *env_seed ? num(env_seed)
					      : (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)getpid();

	while ((c = getopt(argc, argv, "n:s:m:l:f:M:c:KCq")) != -1) {
		switch (c) {
		case 'n': nops = (unsigned long)num(optarg); break;
		case 's': seed = num(optarg); break;
		case 'm': near = num(optarg); break;
		case 'l': maxlen = num(optarg); break;
		case 'f': farpct = num(optarg); break;
		case 'M': mmappct = num(optarg); break;
		case 'c': every = (unsigned long)num(optarg); break;
		case 'K': keep = 1; break;
		case 'C': cmponly = 1; break;
		case 'q': quiet = 1; break;
		default: goto usage;
		}
	}
	if (argc - optind != 2 || !near || !maxlen || maxlen > MAXLEN_MAX || mmappct > 100)
		goto usage;
	if (maxlen > bufsz)
		bufsz = (size_t)maxlen;
	path = argv[optind];
	spath = argv[optind + 1];
	rng = seed;
	if (cmponly)
		printf("fsx: compare %s with %s\n", path, spath);
	else
		printf("fsx: seed %" PRIu64 " file %s shadow %s\nseed %" PRIu64 " (replay: EMBFS_SEED=%" PRIu64
		       " or -s %" PRIu64 " with the same options)\n", seed, path, spath, seed, seed, seed);
	fflush(stdout);

	mbuf = malloc(bufsz);
	sbuf = malloc(bufsz);
	wbuf = malloc(bufsz);
	if (!mbuf || !sbuf || !wbuf)
		die("malloc");
	mfd = open_file(keep || cmponly);
	sfd = open(spath, O_RDWR | O_CREAT | (keep || cmponly ? 0 : O_TRUNC), 0644);
	if (sfd < 0) {
		fprintf(stderr, "fsx: %s: %s\n", spath, strerror(errno));
		return 2;
	}
	char v[32];
	ssize_t n = getxattr(path, "user.embfs.row_size", v, sizeof(v) - 1);
	if (n > 0) {
		v[n] = 0;
		rs = strtoull(v, NULL, 10);
	}
	if (!rs)
		rs = 256;

	full_compare("start");
	for (opno = 1; !cmponly && opno <= nops; opno++) {
		uint64_t k = rnd(100);
		if (mmappct && rnd(100) < mmappct) /* no draw without -M: seeds replay as before */
			k % 2 ? op_mapwrite() : op_mapread();
		else if (k < 40)
			op_write();
		else if (k < 58)
			op_read();
		else if (k < 68)
			op_truncate();
		else if (k < 78)
			op_punch();
		else if (k < 92)
			op_seek();
		else
			op_misc();
		if (every && opno % every == 0)
			full_compare("periodic");
	}
	if (!cmponly) {
		opno = nops;
		full_compare("end");
	}
	if (close(mfd) != 0)
		diverge("close: %s", strerror(errno));
	close(sfd);
	if (cmponly)
		printf("fsx: %s matches %s\n", path, spath);
	else
		printf("fsx: seed %" PRIu64 ": %lu ops, no divergence\n", seed, nops);
	return 0;
usage:
	fprintf(stderr, "usage: fsx [-n OPS] [-s SEED] [-m NEAR] [-l MAXLEN] [-f FARPCT] [-M MMAPPCT] "
			"[-c EVERY] [-K] [-C] [-q] FILE SHADOW\n");
	return 2;
}
