/*
 * batchtool: drives MNT/.embfs/rows for tests/e2e/batch.sh.  Every command
 * checks what it did and exits 0 (ok) or 1 (failure, with a message).
 *
 *   batchtool gather-check TABLE COUNT SEED MAXROW    random ids (duplicates, holes,
 *                                                    past EOF) gathered == pread
 *   batchtool scatter-check TABLE COUNT SEED MAXROW   scatter random rows (duplicates:
 *                                                    last wins), check with O_DIRECT
 *                                                    pread, buffered pread once the page
 *                                                    cache is invalidated, and a gather
 *   batchtool split TABLE                            a request written in small pieces
 *   batchtool bad TABLE CASE                         a bad request: expect EINVAL
 *   batchtool access TABLE gather|scatter|prefetch   print the errno name of the result
 *   batchtool clients TABLE NPROC ROUNDS COUNT       processes on their own fds
 *   batchtool prefetch TABLE COUNT SEED MAXROW       prefetch, wait for the pins,
 *                                                    gather them, check the counters;
 *                                                    then prefetch more and exit
 *   batchtool errno TABLE                            a bad request written as two
 *                                                    pieces: the syscall gets EINVAL
 *   batchtool fill TABLE COUNT FIRST                 scatter rows FIRST.. and print the
 *                                                    errno name of the result
 *   batchtool mmap-mix TABLE SECS SEED STATE         for SECS seconds: a process stores
 *                                                    even rows through mmap(MAP_SHARED) +
 *                                                    msync, one scatters odd rows, one
 *                                                    preads, one gathers and checks that
 *                                                    no row goes back to an older version;
 *                                                    then every row holds its last version
 *                                                    (saved in STATE)
 *   batchtool mmap-check TABLE STATE                 every row holds its version in STATE
 *                                                    (gather and buffered pread)
 * The batch file is dirname(TABLE)/.embfs/rows unless BATCH_FILE is set;
 * the row size is the table's user.embfs.row_size unless ROW_SIZE is set.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "embfs/batch.h"

#define HDR sizeof(struct embfs_batch_hdr)

/* Each command runs once and exits: its buffers live until then (a
 * make SANITIZER=address build would report them as leaks). */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
	return "detect_leaks=0";
}

static const char *table_path;
static char batch_path[PATH_MAX], stats_path[PATH_MAX];
static uint64_t ino;
static uint32_t rs;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "batchtool: ");
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(1);
}

static uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static void setup(const char *table)
{
	char buf[32];
	struct stat st;
	table_path = table;
	if (stat(table, &st))
		die("stat %s: %s", table, strerror(errno));
	ino = st.st_ino;
	/* ROW_SIZE: for a caller that may not read the table's xattrs */
	ssize_t n = getenv("ROW_SIZE") ? 0 : getxattr(table, "user.embfs.row_size", buf, sizeof(buf) - 1);
	if (n < 0)
		die("getxattr row_size %s: %s", table, strerror(errno));
	buf[n] = 0;
	rs = (uint32_t)atoi(n ? buf : getenv("ROW_SIZE"));
	const char *env = getenv("BATCH_FILE");
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s", table);
	char *slash = strrchr(dir, '/');
	if (slash)
		*slash = 0;
	else
		strcpy(dir, ".");
	snprintf(batch_path, sizeof(batch_path), "%s", env ? env : dir);
	if (!env)
		snprintf(batch_path, sizeof(batch_path), "%s/.embfs/rows", dir);
	snprintf(stats_path, sizeof(stats_path), "%.*s/stats",
		 (int)(strrchr(batch_path, '/') - batch_path), batch_path);
}

static int open_batch(void)
{
	int fd = open(batch_path, O_RDWR);
	if (fd < 0)
		die("open %s: %s", batch_path, strerror(errno));
	return fd;
}

static uint64_t stat_get(const char *key)
{
	FILE *f = fopen(stats_path, "r");
	char line[512];
	uint64_t v = UINT64_MAX;
	size_t kl = strlen(key);
	if (!f)
		die("open %s: %s", stats_path, strerror(errno));
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, kl) && line[kl] == ' ')
			v = strtoull(line + kl + 1, NULL, 10);
	fclose(f);
	if (v == UINT64_MAX)
		die("no %s in %s", key, stats_path);
	return v;
}

/* poll until stats key reaches at least want (bounded: 10 s) */
static void wait_stat(const char *key, uint64_t want)
{
	for (int i = 0; i < 1000; i++) {
		if (stat_get(key) >= want)
			return;
		usleep(10000);
	}
	die("%s stayed at %llu, expected >= %llu", key, (unsigned long long)stat_get(key),
	    (unsigned long long)want);
}

static char *build(uint32_t op, uint64_t tino, const uint64_t *ids, uint32_t n, const char *rows,
		   size_t *len)
{
	size_t l = HDR + 8ull * n + (op == EMBFS_BATCH_SCATTER ? (size_t)n * rs : 0);
	char *b = malloc(l);
	if (!b)
		die("out of memory");
	struct embfs_batch_hdr h = { .op = op, .table_ino = tino, .count = n, .total_len = l };
	memcpy(h.magic, EMBFS_BATCH_MAGIC, 4);
	memcpy(b, &h, HDR);
	memcpy(b + HDR, ids, 8ull * n);
	if (op == EMBFS_BATCH_SCATTER)
		memcpy(b + HDR + 8ull * n, rows, (size_t)n * rs);
	*len = l;
	return b;
}

/* write a whole request (a short write is followed by the rest, which then
 * gets the error); 0 or -errno */
static int send_all(int fd, const char *b, size_t len)
{
	size_t done = 0;
	while (done < len) {
		ssize_t n = pwrite(fd, b + done, len - done, (off_t)done);
		if (n < 0)
			return -errno;
		done += (size_t)n;
	}
	return 0;
}

static int request(int fd, uint32_t op, const uint64_t *ids, uint32_t n, const char *rows)
{
	size_t len;
	char *b = build(op, ino, ids, n, rows, &len);
	int ret = send_all(fd, b, len);
	free(b);
	return ret;
}

static int read_all(int fd, char *out, size_t len)
{
	size_t done = 0;
	while (done < len) {
		ssize_t n = pread(fd, out + done, len - done, (off_t)done);
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO; /* short response */
		done += (size_t)n;
	}
	return 0;
}

static int gather(int fd, const uint64_t *ids, uint32_t n, char *out)
{
	int ret = request(fd, EMBFS_BATCH_GATHER, ids, n, NULL);
	return ret ? ret : read_all(fd, out, (size_t)n * rs);
}

/* the row as a plain pread shows it (zeros past EOF) */
static void pread_row(int tfd, uint64_t id, char *row)
{
	memset(row, 0, rs);
	ssize_t n = pread(tfd, row, rs, (off_t)(id * rs));
	if (n < 0)
		die("pread row %llu: %s", (unsigned long long)id, strerror(errno));
}

static void *xmalloc(size_t n)
{
	void *p;
	if (posix_memalign(&p, 4096, n ? n : 1))
		die("out of memory");
	return p;
}

/* ids with duplicates: a quarter repeat an earlier id */
static uint64_t *random_ids(uint32_t n, uint64_t seed, uint64_t maxrow)
{
	uint64_t *ids = xmalloc(8ull * n);
	for (uint32_t i = 0; i < n; i++)
		ids[i] = i && rnd(&seed) % 4 == 0 ? ids[rnd(&seed) % i] : rnd(&seed) % maxrow;
	return ids;
}

static void fill_row(char *row, uint64_t id, uint64_t salt)
{
	uint64_t s = id * 1315423911u + salt;
	for (uint32_t i = 0; i < rs; i += 8) {
		uint64_t v = rnd(&s);
		memcpy(row + i, &v, rs - i < 8 ? rs - i : 8);
	}
}

static int cmd_gather_check(uint32_t n, uint64_t seed, uint64_t maxrow)
{
	uint64_t *ids = random_ids(n, seed, maxrow);
	char *got = xmalloc((size_t)n * rs), *want = xmalloc(rs);
	int fd = open_batch(), tfd = open(table_path, O_RDONLY);
	if (tfd < 0)
		die("open %s: %s", table_path, strerror(errno));
	int ret = gather(fd, ids, n, got);
	if (ret)
		die("gather of %u ids: %s", n, strerror(-ret));
	uint32_t holes = 0;
	for (uint32_t i = 0; i < n; i++) {
		pread_row(tfd, ids[i], want);
		if (memcmp(got + (size_t)i * rs, want, rs))
			die("gather position %u (row %llu) differs from pread", i, (unsigned long long)ids[i]);
		int zero = 1;
		for (uint32_t k = 0; k < rs && zero; k++)
			zero = !want[k];
		holes += zero;
	}
	/* reading the response again (and in pieces) gives the same bytes */
	char *again = xmalloc((size_t)n * rs);
	size_t half = (size_t)n * rs / 2;
	if (pread(fd, again, half, 0) != (ssize_t)half ||
	    pread(fd, again + half, (size_t)n * rs - half, (off_t)half) != (ssize_t)((size_t)n * rs - half) ||
	    memcmp(again, got, (size_t)n * rs))
		die("re-reading the response differs");
	if (pread(fd, again, 16, (off_t)n * rs) != 0)
		die("read past the response is not EOF");
	printf("gather of %u ids (%u hole rows) equals pread\n", n, holes);
	close(fd);
	close(tfd);
	return 0;
}

static int cmd_scatter_check(uint32_t n, uint64_t seed, uint64_t maxrow)
{
	uint64_t *ids = random_ids(n, seed, maxrow);
	char *rows = xmalloc((size_t)n * rs), *got = xmalloc(rs), *g = xmalloc((size_t)n * rs);
	for (uint32_t i = 0; i < n; i++)
		fill_row(rows + (size_t)i * rs, ids[i], seed + i);
	int fd = open_batch();
	int tfd = open(table_path, O_RDONLY), dfd = open(table_path, O_RDONLY | O_DIRECT);
	if (tfd < 0 || dfd < 0)
		die("open %s: %s", table_path, strerror(errno));
	/* fill the page cache with the old rows first: the scatter must drop them */
	for (uint32_t i = 0; i < n; i++)
		pread_row(tfd, ids[i], got);
	uint64_t inval0 = stat_get("batch.page_cache_invalidations");
	int ret = request(fd, EMBFS_BATCH_SCATTER, ids, n, rows);
	if (ret)
		die("scatter of %u rows: %s", n, strerror(-ret));
	uint64_t maxid = 0;
	for (uint32_t i = 0; i < n; i++)
		maxid = ids[i] > maxid ? ids[i] : maxid;
	struct stat st;
	fstat(dfd, &st);
	if ((uint64_t)st.st_size < (maxid + 1) * rs)
		die("size %lld after scatter up to row %llu", (long long)st.st_size, (unsigned long long)maxid);
	/* the last occurrence of each id wins */
	for (uint32_t i = 0; i < n; i++) {
		uint32_t last = i;
		for (uint32_t k = i + 1; k < n; k++)
			if (ids[k] == ids[i])
				last = k;
		memset(got, 0, rs);
		if (pread(dfd, got, rs, (off_t)(ids[i] * rs)) != (ssize_t)rs)
			die("O_DIRECT pread row %llu: %s", (unsigned long long)ids[i], strerror(errno));
		if (memcmp(got, rows + (size_t)last * rs, rs))
			die("row %llu after scatter (O_DIRECT pread) is not the last scattered", (unsigned long long)ids[i]);
	}
	wait_stat("batch.page_cache_invalidations", inval0 + 1);
	for (uint32_t i = 0; i < n; i++) {
		uint32_t last = i;
		for (uint32_t k = i + 1; k < n; k++)
			if (ids[k] == ids[i])
				last = k;
		pread_row(tfd, ids[i], got);
		if (memcmp(got, rows + (size_t)last * rs, rs))
			die("row %llu after scatter (buffered pread, page cache invalidated) is stale",
			    (unsigned long long)ids[i]);
		memcpy(rows + (size_t)i * rs, got, rs);
	}
	ret = gather(fd, ids, n, g);
	if (ret || memcmp(g, rows, (size_t)n * rs))
		die("gather after scatter differs: %s", ret ? strerror(-ret) : "bytes");
	printf("scatter of %u rows (max row %llu): pread, gather and size agree\n", n,
	       (unsigned long long)maxid);
	return 0;
}

/* header alone, then ids, then rows a byte at a time for one row, then the rest */
static int cmd_split(void)
{
	uint64_t ids[3] = { 7, 3, 7 };
	char *rows = xmalloc(3ull * rs), *g = xmalloc(3ull * rs);
	for (int i = 0; i < 3; i++)
		fill_row(rows + (size_t)i * rs, ids[i], 99 + i);
	size_t len;
	char *b = build(EMBFS_BATCH_SCATTER, ino, ids, 3, rows, &len);
	int fd = open_batch();
	size_t cut[] = { 0, 10, HDR, HDR + 24, HDR + 24 + 1, HDR + 24 + 2, len };
	for (size_t i = 0; i + 1 < sizeof(cut) / sizeof(cut[0]); i++)
		if (pwrite(fd, b + cut[i], cut[i + 1] - cut[i], (off_t)cut[i]) != (ssize_t)(cut[i + 1] - cut[i]))
			die("piece %zu of a split scatter: %s", i, strerror(errno));
	uint64_t q[2] = { 3, 7 };
	int ret = gather(fd, q, 2, g);
	if (ret || memcmp(g, rows + rs, rs) || memcmp(g + rs, rows + 2 * rs, rs))
		die("split scatter then gather: %s", ret ? strerror(-ret) : "wrong rows");
	/* a gather request cut the same way */
	free(b);
	b = build(EMBFS_BATCH_GATHER, ino, q, 2, NULL, &len);
	if (pwrite(fd, b, 5, 0) != 5 || pwrite(fd, b + 5, 30, 5) != 30 || pwrite(fd, b + 35, len - 35, 35) != (ssize_t)(len - 35))
		die("split gather request: %s", strerror(errno));
	if (read_all(fd, g, 2ull * rs) || memcmp(g + rs, rows + 2 * rs, rs))
		die("split gather response");
	printf("requests written in pieces work\n");
	return 0;
}

/* The request of a bad case; *off_first != 0: written at that offset. */
static int bad_case(const char *c, int fd)
{
	uint64_t ids[4] = { 1, 2, 3, 4 };
	char *rows = xmalloc(4ull * rs);
	memset(rows, 0x5a, 4ull * rs);
	size_t len;
	char *b = build(EMBFS_BATCH_SCATTER, ino, ids, 4, rows, &len);
	struct embfs_batch_hdr *h = (struct embfs_batch_hdr *)b;
	uint64_t *id = (uint64_t *)(b + HDR);
	if (!strcmp(c, "magic"))
		h->magic[3] = 'X';
	else if (!strcmp(c, "op0"))
		h->op = 0;
	else if (!strcmp(c, "op4"))
		h->op = 4;
	else if (!strcmp(c, "flags"))
		h->flags = 1;
	else if (!strcmp(c, "count0"))
		h->count = 0;
	else if (!strcmp(c, "count-big"))
		h->count = EMBFS_BATCH_MAX_COUNT + 1;
	else if (!strcmp(c, "count-mismatch"))
		h->count = 3; /* total_len says 4 */
	else if (!strcmp(c, "len-short")) {
		h->total_len -= 1;
		len -= 1;
	} else if (!strcmp(c, "len-long"))
		h->total_len += 1; /* and the request never completes: the extra write fails */
	else if (!strcmp(c, "trailing")) {
		b = realloc(b, len + 8); /* more bytes than total_len in one write */
		memset(b + len, 0, 8);
		len += 8;
	} else if (!strcmp(c, "gather-with-rows"))
		h->op = EMBFS_BATCH_GATHER; /* total_len includes rows: wrong for a gather */
	else if (!strcmp(c, "id-big"))
		id[3] = (uint64_t)LLONG_MAX / rs; /* row would end past off_t */
	else if (!strcmp(c, "id-huge"))
		id[3] = UINT64_MAX;
	else if (!strcmp(c, "ino-unknown"))
		h->table_ino = 16 + 60000;
	else if (!strcmp(c, "ino-huge"))
		h->table_ino = UINT64_MAX;
	else if (!strcmp(c, "ino-root"))
		h->table_ino = 1;
	else if (!strcmp(c, "ino-ctl"))
		h->table_ino = 2;
	else if (!strcmp(c, "ino-stats"))
		h->table_ino = 3;
	else if (!strcmp(c, "ino-batch"))
		h->table_ino = 5;
	else if (!strcmp(c, "offset")) {
		ssize_t n = pwrite(fd, b, len, 4096); /* no request pending */
		return n < 0 ? -errno : 0;
	} else if (!strcmp(c, "gap")) {
		if (pwrite(fd, b, 40, 0) != 40)
			return -errno;
		ssize_t n = pwrite(fd, b + 48, len - 48, 48);
		return n < 0 ? -errno : 0;
	} else if (!strcmp(c, "overlap")) {
		if (pwrite(fd, b, 64, 0) != 64)
			return -errno;
		ssize_t n = pwrite(fd, b + 32, len - 32, 32);
		return n < 0 ? -errno : 0;
	} else {
		die("unknown case %s", c);
	}
	ssize_t n = pwrite(fd, b, len, 0);
	if (n < 0)
		return -errno;
	if (!strcmp(c, "len-long")) { /* everything sent, request still open: one more byte */
		n = pwrite(fd, "x", 1, (off_t)len);
		return n < 0 ? -errno : 0;
	}
	return (size_t)n == len ? 0 : -EIO;
}

static int cmd_bad(const char *c)
{
	int fd = open_batch();
	int ret = bad_case(c, fd);
	if (ret != -EINVAL)
		die("bad request '%s': got %s, expected EINVAL", c, ret ? strerror(-ret) : "success");
	/* no gather response: reading gives the failure */
	char buf[16];
	if (pread(fd, buf, sizeof(buf), 0) >= 0 && strcmp(c, "offset") && strcmp(c, "len-long"))
		die("bad request '%s': a read afterwards succeeded", c);
	/* the fd still works */
	uint64_t one = 1;
	char *row = xmalloc(rs);
	if (gather(fd, &one, 1, row))
		die("gather after bad request '%s' fails", c);
	printf("bad request %-16s EINVAL\n", c);
	return 0;
}

static int cmd_access(const char *what)
{
	uint64_t ids[2] = { 0, 1 };
	char *rows = xmalloc(2ull * rs);
	memset(rows, 0x33, 2ull * rs);
	int fd = open(batch_path, O_RDWR);
	if (fd < 0) {
		printf("open-%s\n", strerrorname_np(errno));
		return 0;
	}
	int ret;
	if (!strcmp(what, "gather"))
		ret = gather(fd, ids, 2, rows);
	else if (!strcmp(what, "scatter"))
		ret = request(fd, EMBFS_BATCH_SCATTER, ids, 2, rows);
	else
		ret = request(fd, EMBFS_BATCH_PREFETCH, ids, 2, NULL);
	printf("%s\n", ret ? strerrorname_np(-ret) : "OK");
	return 0;
}

/* NPROC processes, own fds: process p owns rows r with r % NPROC == p; each
 * round scatters COUNT of its rows and gathers them back, and gathers rows
 * of the others (read-only) at the same time. */
static int cmd_clients(int nproc, int rounds, uint32_t count)
{
	for (int p = 0; p < nproc; p++) {
		pid_t pid = fork();
		if (pid < 0)
			die("fork: %s", strerror(errno));
		if (pid)
			continue;
		int fd = open_batch();
		uint64_t seed = 1000 + (uint64_t)p;
		uint64_t *ids = xmalloc(8ull * count);
		char *rows = xmalloc((size_t)count * rs), *g = xmalloc((size_t)count * rs);
		for (int r = 0; r < rounds; r++) {
			for (uint32_t i = 0; i < count; i++)
				ids[i] = (rnd(&seed) % 4096) * (uint64_t)nproc + (uint64_t)p;
			for (uint32_t i = 0; i < count; i++)
				fill_row(rows + (size_t)i * rs, ids[i], (uint64_t)r * 7919 + i);
			int ret = request(fd, EMBFS_BATCH_SCATTER, ids, count, rows);
			if (ret)
				die("client %d round %d: scatter: %s", p, r, strerror(-ret));
			ret = gather(fd, ids, count, g);
			if (ret)
				die("client %d round %d: gather: %s", p, r, strerror(-ret));
			for (uint32_t i = 0; i < count; i++) {
				uint32_t last = i;
				for (uint32_t k = i + 1; k < count; k++)
					if (ids[k] == ids[i])
						last = k;
				if (memcmp(g + (size_t)i * rs, rows + (size_t)last * rs, rs))
					die("client %d round %d: row %llu gathered wrong", p, r,
					    (unsigned long long)ids[i]);
			}
			/* others' rows: just gather, any content is fine */
			for (uint32_t i = 0; i < count; i++)
				ids[i] = rnd(&seed) % (4096ull * (uint64_t)nproc);
			ret = gather(fd, ids, count, g);
			if (ret)
				die("client %d round %d: shared gather: %s", p, r, strerror(-ret));
		}
		_exit(0);
	}
	int bad = 0;
	for (int p = 0; p < nproc; p++) {
		int st;
		if (wait(&st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
			bad++;
	}
	if (bad)
		die("%d of %d clients failed", bad, nproc);
	printf("%d clients x %d rounds of scatter+gather of %u rows: all consistent\n", nproc, rounds, count);
	return 0;
}

static int cmd_prefetch(uint32_t n, uint64_t seed, uint64_t maxrow)
{
	uint64_t *ids = random_ids(n, seed, maxrow);
	char *got = xmalloc((size_t)n * rs), *want = xmalloc(rs);
	int fd = open_batch(), tfd = open(table_path, O_RDONLY | O_DIRECT);
	if (tfd < 0)
		die("open %s: %s", table_path, strerror(errno));
	/* distinct ids */
	uint32_t distinct = 0;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t k = 0;
		while (k < i && ids[k] != ids[i])
			k++;
		distinct += k == i;
	}
	uint64_t pinned0 = stat_get("prefetch.pinned"), consumed0 = stat_get("prefetch.consumed");
	uint64_t cpin0 = stat_get("cache.pinned");
	int ret = request(fd, EMBFS_BATCH_PREFETCH, ids, n, NULL);
	if (ret)
		die("prefetch: %s", strerror(-ret));
	/* a prefetch gives no response */
	wait_stat("prefetch.pinned", pinned0 + distinct);
	if (stat_get("cache.pinned") < cpin0 + distinct)
		die("cache.pinned %llu, expected >= %llu", (unsigned long long)stat_get("cache.pinned"),
		    (unsigned long long)(cpin0 + distinct));
	ret = gather(fd, ids, n, got);
	if (ret)
		die("gather of prefetched rows: %s", strerror(-ret));
	for (uint32_t i = 0; i < n; i++) {
		memset(want, 0, rs);
		if (pread(tfd, want, rs, (off_t)(ids[i] * rs)) < 0)
			die("pread: %s", strerror(errno));
		if (memcmp(got + (size_t)i * rs, want, rs))
			die("prefetched row %llu gathered wrong", (unsigned long long)ids[i]);
	}
	if (stat_get("prefetch.consumed") != consumed0 + distinct)
		die("prefetch.consumed %llu, expected %llu", (unsigned long long)stat_get("prefetch.consumed"),
		    (unsigned long long)(consumed0 + distinct));
	if (stat_get("cache.pinned") != cpin0)
		die("cache.pinned %llu after the gather, expected %llu", (unsigned long long)stat_get("cache.pinned"),
		    (unsigned long long)cpin0);
	printf("prefetch of %u ids (%u distinct): pinned, gathered equal to pread, consumed\n", n, distinct);
	/* a prefetch never gathered: its pins go at close */
	for (uint32_t i = 0; i < n; i++)
		ids[i] = (ids[i] + 1) % maxrow;
	if ((ret = request(fd, EMBFS_BATCH_PREFETCH, ids, n, NULL)))
		die("second prefetch: %s", strerror(-ret));
	printf("second prefetch of %u ids left to the close\n", n);
	close(fd);
	return 0;
}

/* A bad id in a request big enough that the kernel splits it: the bad piece
 * is the first, so the write returns -1 EINVAL, not a short count. */
static int cmd_errno(void)
{
	uint32_t n = 8192;
	uint64_t *ids = random_ids(n, 5, 1000);
	char *rows = xmalloc((size_t)n * rs);
	memset(rows, 1, (size_t)n * rs);
	ids[n - 1] = UINT64_MAX;
	size_t len;
	char *b = build(EMBFS_BATCH_SCATTER, ino, ids, n, rows, &len);
	int fd = open_batch();
	ssize_t w = pwrite(fd, b, len, 0);
	if (w != -1 || errno != EINVAL)
		die("split bad scatter (%zu bytes): write returned %zd (%s), expected -1 EINVAL", len, w,
		    w < 0 ? strerror(errno) : "no error");
	printf("a %zu-byte bad scatter: write() fails with EINVAL\n", len);
	return 0;
}

static int cmd_fill(uint32_t n, uint64_t first)
{
	uint64_t *ids = xmalloc(8ull * n);
	char *rows = xmalloc((size_t)n * rs);
	for (uint32_t i = 0; i < n; i++) {
		ids[i] = first + i;
		fill_row(rows + (size_t)i * rs, ids[i], 77);
	}
	int fd = open_batch();
	int ret = request(fd, EMBFS_BATCH_SCATTER, ids, n, rows);
	printf("%s\n", ret ? strerrorname_np(-ret) : "OK");
	return 0;
}

/* ---- mmap-mix: stores through a shared mapping, scatters and gathers at once
 *
 * A row holds (row id, version, bytes derived from both); version 0 is a
 * hole.  Even rows are stored through the mapping (then msync), odd rows
 * scattered.  done[r] is the last version of row r whose write completed
 * (msync or scatter returned): a gather that starts later must see at least
 * it, and no gather may see a row older than an earlier gather saw it. */
struct mix {
	_Atomic int stop;
	_Atomic uint64_t rounds, scatters, gathers, reverts, behind, torn;
	_Atomic uint64_t done[];
};

static void mk_row(char *row, uint64_t r, uint64_t v)
{
	memset(row, 0, rs);
	if (!v)
		return;
	memcpy(row, &r, 8);
	memcpy(row + 8, &v, 8);
	uint64_t s = r * 0x100000001b3ull ^ v * 0x9E3779B97F4A7C15ull;
	for (uint32_t i = 16; i < rs; i += 8) {
		uint64_t x = rnd(&s);
		memcpy(row + i, &x, rs - i < 8 ? rs - i : 8);
	}
}

/* The version row r holds, or -1 if its bytes are not one whole version. */
static int64_t row_version(const char *row, uint64_t r)
{
	static __thread char *want;
	uint64_t v;
	memcpy(&v, row + 8, 8);
	if (!want)
		want = xmalloc(rs);
	mk_row(want, r, v);
	return memcmp(row, want, rs) ? -1 : (int64_t)v;
}

static int mix_alive(struct mix *m, pid_t *kids, int n)
{
	for (int i = 0; i < n; i++) {
		int st;
		if (kids[i] && waitpid(kids[i], &st, WNOHANG) == kids[i]) {
			kids[i] = 0;
			if (!WIFEXITED(st) || WEXITSTATUS(st))
				return 0;
		}
	}
	return !m->stop;
}

static void mix_writer(struct mix *m, uint64_t nrows, uint64_t seed)
{
	int fd = open(table_path, O_RDWR);
	if (fd < 0)
		die("writer: open %s: %s", table_path, strerror(errno));
	size_t len = nrows * rs;
	char *map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED)
		die("writer: mmap: %s", strerror(errno));
	uint64_t *ver = calloc(nrows, 8), *todo = calloc(nrows, 8);
	char *row = xmalloc(rs);
	if (!ver || !todo)
		die("out of memory");
	while (!m->stop) {
		size_t n = 0;
		for (uint64_t r = 0; r < nrows; r += 2)
			if (rnd(&seed) % 4 == 0)
				todo[n++] = r;
		for (size_t i = 0; i < n; i++) {
			mk_row(row, todo[i], ++ver[todo[i]]);
			memcpy(map + todo[i] * rs, row, rs);
		}
		if (msync(map, len, MS_SYNC))
			die("writer: msync: %s", strerror(errno));
		for (size_t i = 0; i < n; i++)
			m->done[todo[i]] = ver[todo[i]];
		m->rounds++;
	}
	munmap(map, len);
	close(fd);
	_exit(0);
}

static void mix_scatterer(struct mix *m, uint64_t nrows, uint64_t seed)
{
	int fd = open_batch();
	uint64_t *ver = calloc(nrows, 8), *ids = xmalloc(8 * nrows);
	char *rows = xmalloc(nrows * rs);
	if (!ver)
		die("out of memory");
	while (!m->stop) {
		uint32_t n = 0, p = 1 + (uint32_t)(rnd(&seed) % 8);
		for (uint64_t r = 1; r < nrows; r += 2)
			if (rnd(&seed) % 16 < p)
				ids[n++] = r;
		if (!n)
			continue;
		for (uint32_t i = 0; i < n; i++)
			mk_row(rows + (size_t)i * rs, ids[i], ver[ids[i]] + 1);
		int ret = request(fd, EMBFS_BATCH_SCATTER, ids, n, rows);
		if (ret)
			die("scatterer: scatter of %u rows: %s", n, strerror(-ret));
		for (uint32_t i = 0; i < n; i++)
			m->done[ids[i]] = ++ver[ids[i]];
		m->scatters++;
	}
	_exit(0);
}

static void mix_gatherer(struct mix *m, uint64_t nrows)
{
	int fd = open_batch();
	uint64_t *ids = xmalloc(8 * nrows), *low = xmalloc(8 * nrows), *seen = calloc(nrows, 8);
	char *buf = xmalloc(nrows * rs);
	if (!seen)
		die("out of memory");
	for (uint64_t r = 0; r < nrows; r++)
		ids[r] = r;
	unsigned said = 0;
	while (!m->stop) {
		for (uint64_t r = 0; r < nrows; r++)
			low[r] = m->done[r];
		int ret = gather(fd, ids, (uint32_t)nrows, buf);
		if (ret)
			die("gatherer: gather: %s", strerror(-ret));
		for (uint64_t r = 0; r < nrows; r++) {
			int64_t v = row_version(buf + r * rs, r);
			if (v < 0) {
				/* a store through the mapping may be written back half
				 * done (the kernel knows no rows); a scattered row never */
				if (r % 2) {
					m->torn++;
					if (said++ < 5)
						fprintf(stderr, "batchtool: row %llu: not one whole version\n",
							(unsigned long long)r);
				}
				continue;
			}
			if ((uint64_t)v < seen[r]) {
				m->reverts++;
				if (said++ < 5)
					fprintf(stderr, "batchtool: row %llu went back from version %llu to %llu\n",
						(unsigned long long)r, (unsigned long long)seen[r],
						(unsigned long long)v);
			} else if ((uint64_t)v < low[r]) {
				m->behind++;
				if (said++ < 5)
					fprintf(stderr, "batchtool: row %llu: version %llu, %llu was complete before the gather\n",
						(unsigned long long)r, (unsigned long long)v,
						(unsigned long long)low[r]);
			}
			if ((uint64_t)v > seen[r])
				seen[r] = (uint64_t)v;
		}
		m->gathers++;
	}
	_exit(0);
}

/* Buffered preads of random ranges while the others run: they fill the
 * page cache the scatters make stale (and may see old rows: docs/files.md), but a
 * scattered row within one page is never torn (one across two pages may
 * show one page old, the other new, until the invalidation). */
static void mix_reader(struct mix *m, uint64_t nrows, uint64_t seed)
{
	int fd = open(table_path, O_RDONLY);
	size_t span = 16 * 4096;
	char *buf = xmalloc(span);
	unsigned said = 0;
	if (fd < 0)
		die("reader: open %s: %s", table_path, strerror(errno));
	while (!m->stop) {
		uint64_t len = nrows * rs, off = rnd(&seed) % len / 4096 * 4096;
		ssize_t n = pread(fd, buf, span < len - off ? span : len - off, (off_t)off);
		if (n < 0)
			die("reader: pread: %s", strerror(errno));
		for (uint64_t r = (off + rs - 1) / rs; (r + 1) * rs <= off + (uint64_t)n; r++)
			if (r % 2 && r * rs / 4096 == ((r + 1) * rs - 1) / 4096 &&
			    row_version(buf + (r * rs - off), r) < 0) {
				m->torn++;
				if (said++ < 5)
					fprintf(stderr, "batchtool: pread: row %llu: not one whole version\n",
						(unsigned long long)r);
			}
	}
	_exit(0);
}

/* Rows [0, nrows) against want[]: by gather and by pread on fd; how many differ. */
static uint64_t mix_compare(const uint64_t *want, uint64_t nrows, int tfd, const char *how)
{
	int fd = open_batch();
	uint64_t *ids = xmalloc(8 * nrows), bad = 0;
	char *buf = xmalloc(nrows * rs), *row = xmalloc(rs);
	for (uint64_t r = 0; r < nrows; r++)
		ids[r] = r;
	int ret = gather(fd, ids, (uint32_t)nrows, buf);
	if (ret)
		die("final gather: %s", strerror(-ret));
	for (uint64_t r = 0; r < nrows; r++) {
		int64_t g = row_version(buf + r * rs, r);
		if (pread(tfd, row, rs, (off_t)(r * rs)) != (ssize_t)rs)
			die("%s pread row %llu: %s", how, (unsigned long long)r, strerror(errno));
		int64_t p = row_version(row, r);
		if (g != (int64_t)want[r] || p != (int64_t)want[r]) {
			if (bad++ < 5)
				fprintf(stderr, "batchtool: row %llu: last written version %llu, gather %lld, %s pread %lld\n",
					(unsigned long long)r, (unsigned long long)want[r], (long long)g, how,
					(long long)p);
		}
	}
	close(fd);
	free(ids);
	free(buf);
	free(row);
	return bad;
}

static int cmd_mmap_mix(unsigned secs, uint64_t seed, const char *state)
{
	struct stat st;
	if (stat(table_path, &st))
		die("stat %s: %s", table_path, strerror(errno));
	uint64_t nrows = (uint64_t)st.st_size / rs;
	if (rs < 16 || nrows < 2 || nrows > EMBFS_BATCH_MAX_COUNT || (uint64_t)st.st_size != nrows * rs)
		die("mmap-mix needs a table of 2..65536 whole rows of at least 16 bytes");
	size_t mlen = sizeof(struct mix) + nrows * 8;
	struct mix *m = mmap(NULL, mlen, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		die("mmap: %s", strerror(errno));
	printf("mmap-mix: seed %llu, %llu rows of %u bytes, %u s\n", (unsigned long long)seed,
	       (unsigned long long)nrows, rs, secs);
	fflush(stdout);
	pid_t kids[4];
	for (int i = 0; i < 4; i++) {
		kids[i] = fork();
		if (kids[i] < 0)
			die("fork: %s", strerror(errno));
		if (kids[i] == 0) {
			if (i == 0)
				mix_writer(m, nrows, seed);
			else if (i == 1)
				mix_scatterer(m, nrows, seed + 1);
			else if (i == 2)
				mix_reader(m, nrows, seed + 2);
			mix_gatherer(m, nrows);
		}
	}
	struct timespec t0, now;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int ok = 1;
	do {
		usleep(20000);
		clock_gettime(CLOCK_MONOTONIC, &now);
		ok = mix_alive(m, kids, 4);
	} while (ok && now.tv_sec - t0.tv_sec < (time_t)secs);
	m->stop = 1;
	for (int i = 0; i < 4; i++) {
		int wst;
		if (kids[i] && (waitpid(kids[i], &wst, 0) != kids[i] || !WIFEXITED(wst) || WEXITSTATUS(wst)))
			ok = 0;
	}
	if (!ok)
		die("a mix process failed (seed %llu)", (unsigned long long)seed);
	printf("mmap-mix: %llu msync rounds, %llu scatters, %llu gathers: %llu rows went back, "
	       "%llu behind a completed write, %llu torn scattered rows\n",
	       (unsigned long long)m->rounds, (unsigned long long)m->scatters, (unsigned long long)m->gathers,
	       (unsigned long long)m->reverts, (unsigned long long)m->behind, (unsigned long long)m->torn);
	uint64_t *want = xmalloc(8 * nrows);
	for (uint64_t r = 0; r < nrows; r++)
		want[r] = m->done[r];
	FILE *f = fopen(state, "w");
	if (!f || fwrite(want, 8, nrows, f) != nrows || fclose(f))
		die("write %s: %s", state, strerror(errno));
	int dfd = open(table_path, O_RDONLY | O_DIRECT);
	if (dfd < 0)
		die("open %s: %s", table_path, strerror(errno));
	uint64_t bad = mix_compare(want, nrows, dfd, "O_DIRECT");
	close(dfd);
	if (bad)
		printf("mmap-mix: %llu of %llu rows are not at their last written version\n",
		       (unsigned long long)bad, (unsigned long long)nrows);
	if (m->reverts || m->behind || m->torn || bad || !m->rounds || !m->scatters || !m->gathers)
		die("mmap-mix failed (replay with seed %llu)", (unsigned long long)seed);
	return 0;
}

static int cmd_mmap_check(const char *state)
{
	struct stat st;
	if (stat(table_path, &st) || stat(state, &st))
		die("stat: %s", strerror(errno));
	uint64_t nrows = (uint64_t)st.st_size / 8, *want = xmalloc(8 * nrows);
	FILE *f = fopen(state, "r");
	if (!f || fread(want, 8, nrows, f) != nrows)
		die("read %s", state);
	fclose(f);
	int tfd = open(table_path, O_RDONLY);
	if (tfd < 0)
		die("open %s: %s", table_path, strerror(errno));
	uint64_t bad = mix_compare(want, nrows, tfd, "buffered");
	if (bad)
		die("%llu of %llu rows are not at their last written version", (unsigned long long)bad,
		    (unsigned long long)nrows);
	printf("mmap-check: %llu rows at their last written version\n", (unsigned long long)nrows);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: see the top of tests/tools/batchtool.c\n");
		return 2;
	}
	setup(argv[2]);
	const char *c = argv[1];
	if (!strcmp(c, "gather-check") && argc == 6)
		return cmd_gather_check((uint32_t)atoi(argv[3]), strtoull(argv[4], 0, 0), strtoull(argv[5], 0, 0));
	if (!strcmp(c, "scatter-check") && argc == 6)
		return cmd_scatter_check((uint32_t)atoi(argv[3]), strtoull(argv[4], 0, 0), strtoull(argv[5], 0, 0));
	if (!strcmp(c, "split") && argc == 3)
		return cmd_split();
	if (!strcmp(c, "bad") && argc == 4)
		return cmd_bad(argv[3]);
	if (!strcmp(c, "access") && argc == 4)
		return cmd_access(argv[3]);
	if (!strcmp(c, "clients") && argc == 6)
		return cmd_clients(atoi(argv[3]), atoi(argv[4]), (uint32_t)atoi(argv[5]));
	if (!strcmp(c, "prefetch") && argc == 6)
		return cmd_prefetch((uint32_t)atoi(argv[3]), strtoull(argv[4], 0, 0), strtoull(argv[5], 0, 0));
	if (!strcmp(c, "fill") && argc == 5)
		return cmd_fill((uint32_t)atoi(argv[3]), strtoull(argv[4], 0, 0));
	if (!strcmp(c, "errno") && argc == 3)
		return cmd_errno();
	if (!strcmp(c, "mmap-mix") && argc == 6)
		return cmd_mmap_mix((unsigned)atoi(argv[3]), strtoull(argv[4], 0, 0), argv[5]);
	if (!strcmp(c, "mmap-check") && argc == 4)
		return cmd_mmap_check(argv[3]);
	fprintf(stderr, "batchtool: bad command (see tests/tools/batchtool.c)\n");
	return 2;
}
