/*
 * spillbench: reads of rows that live on the spill device (docs/spill.md "Spill
 * tier"; run.sh sections spill and capacity), the sequential fill that puts
 * them there and the check that reads them all back.
 *
 *   spillbench -m fill   [-r ROWSIZE] [-n ROWS] [-c CHUNK] [-E] [-T SECONDS] [-L] FILE
 *   spillbench -m check  [-r ROWSIZE] [-n ROWS] [-c CHUNK] FILE
 *   spillbench -m gather|pread [-r ROWSIZE] [-n ROWS] [-b BATCH] [-t THREADS]
 *              [-d SECONDS] [-s SEED] [-u | -z THETA] [-D] [-P] [-S STATS] FILE
 *
 * -m fill: rows [0, ROWS) written front to back with pwrite of CHUNK bytes
 *   (default 1 MiB), then one fsync (the row cache writes its dirty rows
 *   back; the spill mover has moved the cold ones to the device meanwhile);
 *   the fsync counts in the time.  Row r holds 64-bit words pat(r, i), so
 *   that reads can be checked.  -E: the first ENOSPC ends the writes
 *   cleanly (stop=enospc; the rows written so far are fsynced and
 *   reported as accepted) instead of failing; -T: no new pwrite after
 *   SECONDS (stop=time); -L: each pwrite's latency is recorded and printed
 *   (lat_p50_us, lat_p99_us, lat_max_us).
 * -m check: reads [0, ROWS * ROWSIZE) front to back with preads of CHUNK
 *   bytes and checks every word of every row; prints MB/s.  A wrong row or
 *   a short file is an error (the first bad row and the count of bad rows
 *   are printed).
 * -m gather: per batch one GATHER of BATCH ids through
 *   dirname(FILE)/.embfs/rows (pwrite of header + ids at offset 0, pread of
 *   the rows from a page-aligned buffer), as gatherbench does.
 * -m pread: one pread of one row per id (at row * ROWSIZE of FILE); with -D
 *   the file is opened O_DIRECT, so on the mount every row is one FUSE round
 *   trip and, for a spilled row, one device read at queue depth 1.
 * Ids: uniform over [0, ROWS) with -u, else Zipf(THETA) (default 0.99) by
 * rejection-inversion with rowbench's rank -> row bijection (bench.h); each
 * thread (own fd) draws 2^20 ids from its own stream before the clock starts
 * and cycles through them.  Every row read is checked (its first and last
 * words against pat): a wrong row is an error, not a figure.  -P (gather,
 * one thread): STATS is also read after every batch, and the batch's device
 * reads per row read from the device (spill.read_ios / spill.rows_read
 * deltas) go into a distribution: dev_per_row_p50, _p99, _max over the
 * batches that read the device (the reads of STATS count in the elapsed
 * time but not in the per-batch latency).
 *
 * The daemon's counters: STATS (default dirname(FILE)/.embfs/stats) is read
 * just before the threads start and just after they end; the output gives
 * the deltas of spill.read_ios (device reads), spill.rows_read (rows that
 * came from the device), spill.promoted, spill.moved, spill.writes and the
 * row cache's hits and misses, and dev_iops = read_ios delta / elapsed.
 *
 * Output, one line of key=value:
 *   spillbench mode=gather dist=uniform threads=1 ... rows_per_s=X p50_us=Y
 *              p99_us=Z dev_ios=.. dev_iops=.. dev_frac=.. promoted=.. ...
 * p50_us/p99_us: per batch (gather) or per row (pread).  fill prints
 * rows (accepted), bytes, stop, rows_per_s, mb_per_s, secs, fsync_s and the
 * spill counters' deltas (dev_write_bytes = spill.write_bytes); check prints
 * rows, secs, mb_per_s and the deltas of spill.read_ios, spill.read_bytes
 * and spill.rows_read.
 * Exit 0 on success, 1 on a failed call, a wrong row or bad arguments.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

#include "embfs/batch.h"

#define RING_BITS 20

enum mode { M_FILL, M_CHECK, M_GATHER, M_PREAD };

struct conf {
	const char *path, *stats_path;
	char batch_path[PATH_MAX];
	enum mode mode;
	uint32_t row_size, batch;
	uint64_t rows, seed, ino, chunk;
	int threads, uniform, direct, stop_enospc, lat, per_batch, shuffle;
	double secs, theta, fill_secs;
};

struct worker {
	pthread_t tid;
	const struct conf *c;
	uint64_t *ids;
	pthread_barrier_t *go;
	uint64_t ops, rows;
	double t_start, t_end;
	int err;
	uint32_t hist[HIST_N];
	double *dev_per_row; /* -P: one entry per batch that read the device */
	size_t ndev, cap_dev;
};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* word i of row r */
static inline uint64_t pat(uint64_t r, uint32_t i)
{
	uint64_t x = r * 0x100000001B3ull + i;
	return splitmix64(&x);
}

static int row_ok(const struct conf *c, const char *row, uint64_t r)
{
	uint32_t words = c->row_size / 8;
	uint64_t first, last;
	if (!words)
		return 1;
	memcpy(&first, row, 8);
	memcpy(&last, row + (size_t)(words - 1) * 8, 8);
	return first == pat(r, 0) && last == pat(r, words - 1);
}

/* ---- the daemon's counters ---- */

static const char *const stat_keys[] = {
	"spill.read_ios", "spill.rows_read", "spill.promoted", "spill.moved",
	"spill.writes",   "cache.hits",      "cache.misses",   "spill.writer_waits",
	"spill.write_bytes", "spill.read_bytes",
};
#define NKEYS (sizeof(stat_keys) / sizeof(stat_keys[0]))
enum { K_IOS, K_DEVROWS, K_PROMOTED, K_MOVED, K_WRITES, K_HITS, K_MISSES, K_WAITS, K_WBYTES, K_RBYTES };

/* 0, or -1 if the file cannot be read (then every counter reads 0) */
static int stats_read(const char *path, uint64_t *v)
{
	memset(v, 0, NKEYS * sizeof(*v));
	FILE *f = path ? fopen(path, "r") : NULL;
	if (!f)
		return -1;
	char line[512], key[128];
	unsigned long long x;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%127s %llu", key, &x) == 2)
			for (size_t k = 0; k < NKEYS; k++)
				if (!strcmp(key, stat_keys[k]))
					v[k] = x;
	fclose(f);
	return 0;
}

/* ---- fill and check ---- */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* the pct-th percentile of v[0..n) (sorts v): the ceil(pct/100 * n)-th smallest */
static double pct_of(double *v, size_t n, double pct)
{
	if (!n)
		return 0;
	qsort(v, n, sizeof(*v), cmp_double);
	size_t k = (size_t)ceil((double)n * pct / 100.0);
	return v[k ? k - 1 : 0];
}

/* Open c->path with flags and a page-aligned buffer of the rows one chunk
 * holds (at least one): 0, or 1 after saying why. */
static int open_chunked(const struct conf *c, int flags, int *fd, char **buf, uint64_t *rows_per)
{
	*fd = open(c->path, flags, 0644);
	*buf = NULL;
	*rows_per = c->chunk / c->row_size ? c->chunk / c->row_size : 1;
	if (*fd < 0 || posix_memalign((void **)buf, 4096, *rows_per * c->row_size)) {
		fprintf(stderr, "spillbench: %s: %s\n", c->path, strerror(errno ? errno : ENOMEM));
		return 1;
	}
	return 0;
}

/* The order of a fill's nchunk chunks: front to back, or (-O) shuffled
 * with the seed.  NULL when out of memory. */
static uint64_t *chunk_order(const struct conf *c, uint64_t nchunk)
{
	uint64_t *o = malloc((nchunk ? nchunk : 1) * sizeof(*o));
	if (!o)
		return NULL;
	for (uint64_t i = 0; i < nchunk; i++)
		o[i] = i;
	uint64_t x = c->seed;
	for (uint64_t i = nchunk; c->shuffle && i > 1; i--) {
		uint64_t j = splitmix64(&x) % i, t = o[i - 1];
		o[i - 1] = o[j];
		o[j] = t;
	}
	return o;
}

/* rows [0, rows) front to back (or in a shuffled order of chunks: -O);
 * with -E the first ENOSPC ends the writes */
static int fill(const struct conf *c)
{
	int fd;
	char *buf;
	uint64_t rows_per;
	if (open_chunked(c, O_WRONLY | O_CREAT, &fd, &buf, &rows_per))
		return 1;
	uint64_t nchunk = (c->rows + rows_per - 1) / rows_per;
	uint64_t *order = chunk_order(c, nchunk);
	if (!order) {
		fprintf(stderr, "spillbench: %s\n", strerror(ENOMEM));
		return 1;
	}
	static uint64_t lat[HIST_N];
	uint64_t nlat = 0, lat_max = 0, s0[NKEYS], s1[NKEYS];
	stats_read(c->stats_path, s0);
	uint32_t words = c->row_size / 8;
	const char *stop = "rows";
	uint64_t accepted = 0; /* bytes */
	uint64_t t0 = now_ns(), limit = t0 + (uint64_t)(c->fill_secs * 1e9);
	for (uint64_t ci = 0; ci < nchunk; ci++) {
		uint64_t r = order[ci] * rows_per;
		if (c->fill_secs > 0 && now_ns() >= limit) {
			stop = "time";
			break;
		}
		uint64_t n = c->rows - r < rows_per ? c->rows - r : rows_per;
		for (uint64_t k = 0; k < n; k++) {
			uint64_t *w = (uint64_t *)(buf + k * c->row_size);
			for (uint32_t i = 0; i < words; i++)
				w[i] = pat(r + k, i);
		}
		size_t len = (size_t)(n * c->row_size), done = 0;
		while (done < len) {
			uint64_t a = c->lat ? now_ns() : 0;
			ssize_t w = pwrite(fd, buf + done, len - done, (off_t)(r * c->row_size + done));
			if (c->lat) {
				uint64_t d = now_ns() - a;
				lat[hist_idx(d)]++;
				nlat++;
				if (d > lat_max)
					lat_max = d;
			}
			if (w < 0 && errno == ENOSPC && c->stop_enospc) {
				stop = "enospc";
				break;
			}
			if (w <= 0) {
				fprintf(stderr, "spillbench: pwrite at row %llu: %s\n", (unsigned long long)r,
					w < 0 ? strerror(errno) : "short write");
				return 1;
			}
			done += (size_t)w;
		}
		accepted += done;
		if (done < len)
			break;
	}
	uint64_t t1 = now_ns();
	if (fsync(fd)) {
		fprintf(stderr, "spillbench: fsync after %llu bytes accepted: %s\n", (unsigned long long)accepted,
			strerror(errno));
		return 1;
	}
	uint64_t t2 = now_ns();
	stats_read(c->stats_path, s1);
	close(fd);
	free(buf);
	free(order);
	double el = (double)(t2 - t0) * 1e-9;
	uint64_t rows = accepted / c->row_size;
	printf("spillbench mode=fill row_size=%u rows=%llu bytes=%llu stop=%s chunk=%llu secs=%.3f fsync_s=%.3f "
	       "order=%s rows_per_s=%.0f mb_per_s=%.1f moved=%llu spill_writes=%llu dev_write_bytes=%llu writer_waits=%llu",
	       c->row_size, (unsigned long long)rows, (unsigned long long)accepted, stop,
	       (unsigned long long)(rows_per * c->row_size), el, (double)(t2 - t1) * 1e-9, c->shuffle ? "shuffled" : "rows",
	       (double)rows / el,
	       (double)accepted / el / 1e6, (unsigned long long)(s1[K_MOVED] - s0[K_MOVED]),
	       (unsigned long long)(s1[K_WRITES] - s0[K_WRITES]),
	       (unsigned long long)(s1[K_WBYTES] - s0[K_WBYTES]),
	       (unsigned long long)(s1[K_WAITS] - s0[K_WAITS]));
	if (c->lat) {
		/* a bucket's middle can lie above the largest value in it */
		double mx = (double)lat_max, p50 = hist_pct(lat, nlat, 50), p99 = hist_pct(lat, nlat, 99);
		printf(" pwrites=%llu lat_p50_us=%.1f lat_p99_us=%.1f lat_max_us=%.1f", (unsigned long long)nlat,
		       (p50 < mx ? p50 : mx) / 1e3, (p99 < mx ? p99 : mx) / 1e3, mx / 1e3);
	}
	printf("\n");
	return 0;
}

/* reads rows [0, rows) front to back and checks every word of every row */
static int check(const struct conf *c)
{
	int fd;
	char *buf;
	uint64_t rows_per;
	if (open_chunked(c, O_RDONLY, &fd, &buf, &rows_per))
		return 1;
	uint64_t s0[NKEYS], s1[NKEYS], bad = 0, first_bad = 0;
	int have_stats = stats_read(c->stats_path, s0) == 0;
	uint32_t words = c->row_size / 8;
	uint64_t t0 = now_ns();
	for (uint64_t r = 0; r < c->rows; r += rows_per) {
		uint64_t n = c->rows - r < rows_per ? c->rows - r : rows_per;
		size_t len = (size_t)(n * c->row_size), done = 0;
		while (done < len) {
			ssize_t g = pread(fd, buf + done, len - done, (off_t)(r * c->row_size + done));
			if (g <= 0) {
				fprintf(stderr, "spillbench: pread at byte %llu (row %llu): %s\n",
					(unsigned long long)(r * c->row_size + done),
					(unsigned long long)(r + done / c->row_size),
					g < 0 ? strerror(errno) : "end of file");
				return 1;
			}
			done += (size_t)g;
		}
		for (uint64_t k = 0; k < n; k++) {
			const char *row = buf + k * c->row_size;
			for (uint32_t i = 0; i < words; i++) {
				uint64_t x;
				memcpy(&x, row + (size_t)i * 8, 8);
				if (x != pat(r + k, i)) {
					if (!bad++)
						first_bad = r + k;
					break;
				}
			}
		}
	}
	uint64_t t1 = now_ns();
	stats_read(c->stats_path, s1);
	close(fd);
	free(buf);
	if (bad) {
		fprintf(stderr, "spillbench: %llu of %llu rows read back wrong bytes, the first is row %llu\n",
			(unsigned long long)bad, (unsigned long long)c->rows, (unsigned long long)first_bad);
		return 1;
	}
	double el = (double)(t1 - t0) * 1e-9;
	printf("spillbench mode=check row_size=%u rows=%llu bytes=%llu chunk=%llu secs=%.3f mb_per_s=%.1f",
	       c->row_size, (unsigned long long)c->rows, (unsigned long long)(c->rows * c->row_size),
	       (unsigned long long)(rows_per * c->row_size), el,
	       el > 0 ? (double)c->rows * c->row_size / el / 1e6 : 0.0);
	if (have_stats)
		printf(" dev_ios=%llu dev_read_bytes=%llu dev_rows=%llu", (unsigned long long)(s1[K_IOS] - s0[K_IOS]),
		       (unsigned long long)(s1[K_RBYTES] - s0[K_RBYTES]),
		       (unsigned long long)(s1[K_DEVROWS] - s0[K_DEVROWS]));
	printf("\n");
	return 0;
}

/* ---- reads ---- */

static int full_pwrite(int fd, const char *buf, size_t len)
{
	size_t done = 0;
	while (done < len) {
		ssize_t w = pwrite(fd, buf + done, len - done, (off_t)done);
		if (w <= 0)
			return -1;
		done += (size_t)w;
	}
	return 0;
}

static int full_pread(int fd, char *buf, size_t len)
{
	size_t done = 0;
	while (done < len) {
		ssize_t r = pread(fd, buf + done, len - done, (off_t)done);
		if (r <= 0)
			return -1;
		done += (size_t)r;
	}
	return 0;
}

/* -P: the counters after a batch (into cur) against those before it (prev,
 * then updated): the batch's device reads per row read from the device */
static int per_batch_note(struct worker *w, uint64_t *prev, uint64_t *cur)
{
	if (stats_read(w->c->stats_path, cur))
		return 0;
	uint64_t ios = cur[K_IOS] - prev[K_IOS], rows = cur[K_DEVROWS] - prev[K_DEVROWS];
	memcpy(prev, cur, NKEYS * sizeof(*prev));
	if (!rows)
		return 0;
	if (w->ndev == w->cap_dev) {
		size_t cap = w->cap_dev ? 2 * w->cap_dev : 1024;
		double *v = realloc(w->dev_per_row, cap * sizeof(*v));
		if (!v)
			return -1;
		w->dev_per_row = v;
		w->cap_dev = cap;
	}
	w->dev_per_row[w->ndev++] = (double)ios / (double)rows;
	return 0;
}

static void *worker_run(void *arg)
{
	struct worker *w = arg;
	const struct conf *c = w->c;
	const uint64_t ring = 1ull << RING_BITS;
	int gather = c->mode == M_GATHER;
	uint32_t per = gather ? c->batch : 1;
	size_t idlen = 8ull * per, rlen = (size_t)per * c->row_size;
	char *req = NULL, *rows = NULL;
	const char *path = gather ? c->batch_path : c->path;
	int fd = open(path, gather ? O_RDWR : O_RDONLY | (c->direct ? O_DIRECT : 0));
	if (fd < 0 || posix_memalign((void **)&req, 4096, sizeof(struct embfs_batch_hdr) + idlen) ||
	    posix_memalign((void **)&rows, 4096, rlen < 4096 ? 4096 : rlen)) {
		w->err = errno ? errno : ENOMEM;
		fprintf(stderr, "spillbench: open %s: %s\n", path, strerror(w->err));
		pthread_barrier_wait(w->go);
		return NULL;
	}
	struct embfs_batch_hdr *h = (struct embfs_batch_hdr *)req;
	memset(h, 0, sizeof(*h));
	memcpy(h->magic, EMBFS_BATCH_MAGIC, 4);
	h->op = EMBFS_BATCH_GATHER;
	h->table_ino = c->ino;
	h->count = per;
	h->total_len = sizeof(*h) + idlen;
	uint64_t *ids = (uint64_t *)(req + sizeof(*h));
	uint64_t pos = 0, b = 0, sp[NKEYS], sq[NKEYS];
	pthread_barrier_wait(w->go);
	if (c->per_batch)
		stats_read(c->stats_path, sp);
	uint64_t t0 = now_ns(), t = t0, deadline = t0 + (uint64_t)(c->secs * 1e9);
	while (t < deadline) {
		for (uint32_t i = 0; i < per; i++)
			ids[i] = w->ids[(pos + i) & (ring - 1)];
		pos += per;
		int bad = 0;
		if (gather)
			bad = full_pwrite(fd, req, sizeof(*h) + idlen) || full_pread(fd, rows, rlen);
		else
			bad = pread(fd, rows, c->row_size, (off_t)(ids[0] * c->row_size)) != (ssize_t)c->row_size;
		if (bad) {
			w->err = errno ? errno : EIO;
			fprintf(stderr, "spillbench: %s %llu: %s\n", gather ? "batch" : "row",
				(unsigned long long)(gather ? b : ids[0]), strerror(w->err));
			break;
		}
		for (uint32_t i = 0; i < per; i++)
			if (!row_ok(c, rows + (size_t)i * c->row_size, ids[i])) {
				w->err = EILSEQ;
				fprintf(stderr, "spillbench: row %llu read back wrong bytes\n",
					(unsigned long long)ids[i]);
				goto out;
			}
		uint64_t t1 = now_ns();
		w->hist[hist_idx(t1 - t)]++;
		t = t1;
		b++;
		if (c->per_batch && per_batch_note(w, sp, sq)) {
			w->err = ENOMEM;
			break;
		}
		if (c->per_batch)
			t = now_ns();
	}
out:
	w->ops = b;
	w->rows = b * per;
	w->t_start = t0 * 1e-9;
	w->t_end = t * 1e-9;
	close(fd);
	free(req);
	free(rows);
	return NULL;
}

static int reads(const struct conf *c)
{
	struct zipf z;
	struct perm pm;
	if (!c->uniform)
		zipf_init(&z, c->rows, c->theta);
	perm_init(&pm, c->rows);
	struct worker *w = calloc((size_t)c->threads, sizeof(*w));
	pthread_barrier_t go;
	if (!w || pthread_barrier_init(&go, NULL, (unsigned)c->threads + 1))
		return 1;
	const size_t ring = (size_t)1 << RING_BITS;
	for (int t = 0; t < c->threads; t++) {
		struct rng r;
		w[t].c = c;
		w[t].go = &go;
		w[t].ids = malloc(ring * sizeof(uint64_t));
		if (!w[t].ids)
			return 1;
		rng_seed(&r, c->seed * 1000003 + (uint64_t)t + (c->uniform ? 0x5eed0000ull : 0));
		for (size_t i = 0; i < ring; i++)
			w[t].ids[i] = c->uniform ? rng_next(&r) % c->rows : perm_row(&pm, zipf_next(&z, &r) - 1);
	}
	for (int t = 0; t < c->threads; t++)
		if (pthread_create(&w[t].tid, NULL, worker_run, &w[t]))
			return 1;
	uint64_t s0[NKEYS], s1[NKEYS];
	int have_stats = stats_read(c->stats_path, s0) == 0;
	uint64_t ts0 = now_ns();
	pthread_barrier_wait(&go);
	static uint64_t hist[HIST_N];
	uint64_t ops = 0, nrows = 0;
	int err = 0;
	for (int t = 0; t < c->threads; t++) {
		pthread_join(w[t].tid, NULL);
		err |= w[t].err;
		ops += w[t].ops;
		nrows += w[t].rows;
		for (unsigned i = 0; i < HIST_N; i++)
			hist[i] += w[t].hist[i];
		free(w[t].ids);
	}
	uint64_t ts1 = now_ns();
	stats_read(c->stats_path, s1);
	double *dpr = w[0].dev_per_row;
	size_t ndpr = w[0].ndev;
	free(w);
	if (err) {
		free(dpr);
		return 1;
	}
	/* one window for rows and device reads alike: from just before the
	 * threads start to just after the last one ends (a few us either side
	 * of the timed loops) */
	double el = (double)(ts1 - ts0) * 1e-9;
	uint64_t d[NKEYS];
	for (size_t k = 0; k < NKEYS; k++)
		d[k] = s1[k] - s0[k];
	printf("spillbench mode=%s dist=%s theta=%.2f threads=%d batch=%u direct=%d row_size=%u rows=%llu "
	       "ops=%llu rows_read=%llu secs=%.3f rows_per_s=%.0f p50_us=%.1f p99_us=%.1f",
	       c->mode == M_GATHER ? "gather" : "pread", c->uniform ? "uniform" : "zipf",
	       c->uniform ? 0.0 : c->theta, c->threads, c->mode == M_GATHER ? c->batch : 1, c->direct,
	       c->row_size, (unsigned long long)c->rows, (unsigned long long)ops,
	       (unsigned long long)nrows, el, el > 0 ? (double)nrows / el : 0.0,
	       hist_pct(hist, ops, 50) / 1e3, hist_pct(hist, ops, 99) / 1e3);
	if (have_stats)
		printf(" dev_ios=%llu dev_iops=%.0f dev_rows=%llu dev_frac=%.4f promoted=%llu moved=%llu "
		       "spill_writes=%llu cache_hits=%llu cache_misses=%llu",
		       (unsigned long long)d[K_IOS], el > 0 ? (double)d[K_IOS] / el : 0.0,
		       (unsigned long long)d[K_DEVROWS], nrows ? (double)d[K_DEVROWS] / (double)nrows : 0.0,
		       (unsigned long long)d[K_PROMOTED], (unsigned long long)d[K_MOVED],
		       (unsigned long long)d[K_WRITES], (unsigned long long)d[K_HITS],
		       (unsigned long long)d[K_MISSES]);
	if (c->per_batch) {
		double p50 = pct_of(dpr, ndpr, 50), p99 = pct_of(dpr, ndpr, 99);
		printf(" dev_batches=%zu dev_per_row_p50=%.3f dev_per_row_p99=%.3f dev_per_row_max=%.3f", ndpr, p50,
		       p99, ndpr ? dpr[ndpr - 1] : 0.0);
	}
	printf("\n");
	free(dpr);
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: spillbench -m fill [-r ROWSIZE] [-n ROWS] [-c CHUNK] [-E] [-T SECONDS] [-L] [-O [-s SEED]] FILE\n"
		   "       spillbench -m check [-r ROWSIZE] [-n ROWS] [-c CHUNK] FILE\n"
		   "       spillbench -m gather|pread [-r ROWSIZE] [-n ROWS] [-b BATCH] [-t THREADS]\n"
		   "                  [-d SECONDS] [-s SEED] [-u | -z THETA] [-D] [-P] [-S STATS] FILE\n"
		   "  defaults: -r 512 -n 2097152 -c 1048576 -b 4096 -t 1 -d 3 -s 1 -z 0.99;\n"
		   "  -E stop at the first ENOSPC, -T stop writing after SECONDS, -L pwrite latencies,\n"
		   "  -O chunks in a shuffled order (seed -s);\n"
		   "  -u uniform ids, -D O_DIRECT (pread), -P device reads per row per batch (gather, 1 thread);\n"
		   "  STATS = dirname(FILE)/.embfs/stats\n");
}

int main(int argc, char **argv)
{
	struct conf c = { .row_size = 512, .batch = 4096, .rows = 2097152, .seed = 1, .threads = 1,
			  .secs = 3, .theta = 0.99, .chunk = 1u << 20, .mode = (enum mode)-1 };
	int opt;
	uint64_t v;
	while ((opt = getopt(argc, argv, "m:r:n:c:b:t:d:s:uz:DS:ET:LOPh")) != -1) {
		switch (opt) {
		case 'm':
			c.mode = !strcmp(optarg, "fill")     ? M_FILL
				 : !strcmp(optarg, "check")  ? M_CHECK
				 : !strcmp(optarg, "gather") ? M_GATHER
				 : !strcmp(optarg, "pread")  ? M_PREAD
							     : (enum mode)-1;
			if ((int)c.mode < 0)
				goto bad;
			break;
		case 'r':
			if (parse_u64(optarg, &v) || !v || v > 65536)
				goto bad;
			c.row_size = (uint32_t)v;
			break;
		case 'n':
			if (parse_u64(optarg, &c.rows))
				goto bad;
			break;
		case 'c':
			if (parse_u64(optarg, &c.chunk) || !c.chunk || c.chunk > (1u << 30))
				goto bad;
			break;
		case 'b':
			if (parse_u64(optarg, &v) || !v || v > EMBFS_BATCH_MAX_COUNT)
				goto bad;
			c.batch = (uint32_t)v;
			break;
		case 't':
			if (parse_u64(optarg, &v) || !v || v > 64)
				goto bad;
			c.threads = (int)v;
			break;
		case 'd': c.secs = strtod(optarg, NULL); break;
		case 's':
			if (parse_u64(optarg, &c.seed))
				goto bad;
			break;
		case 'u': c.uniform = 1; break;
		case 'z': c.theta = strtod(optarg, NULL); break;
		case 'D': c.direct = 1; break;
		case 'S': c.stats_path = optarg; break;
		case 'E': c.stop_enospc = 1; break;
		case 'T':
			c.fill_secs = strtod(optarg, NULL);
			if (!(c.fill_secs > 0))
				goto bad;
			break;
		case 'L': c.lat = 1; break;
		case 'O': c.shuffle = 1; break;
		case 'P': c.per_batch = 1; break;
		case 'h': usage(stdout); return 0;
		default: goto bad;
		}
	}
	if ((int)c.mode < 0 || optind != argc - 1 || !c.rows || !(c.secs > 0) || !(c.theta > 0) ||
	    (uint64_t)c.batch * c.row_size > EMBFS_BATCH_MAX_BYTES || (c.per_batch && (c.mode != M_GATHER || c.threads != 1)))
		goto bad;
	c.path = argv[optind];
	const char *slash = strrchr(c.path, '/');
	int dlen = slash ? (int)(slash - c.path) : 1;
	const char *dir = slash ? c.path : ".";
	static char spath[PATH_MAX];
	snprintf(c.batch_path, sizeof(c.batch_path), "%.*s/.embfs/rows", dlen, dir);
	if (!c.stats_path) {
		snprintf(spath, sizeof(spath), "%.*s/.embfs/stats", dlen, dir);
		c.stats_path = spath;
	}
	if (c.mode == M_FILL)
		return fill(&c);
	if (c.mode == M_CHECK)
		return check(&c);
	struct stat st;
	if (stat(c.path, &st)) {
		fprintf(stderr, "spillbench: %s: %s\n", c.path, strerror(errno));
		return 1;
	}
	c.ino = st.st_ino;
	return reads(&c);
bad:
	usage(stderr);
	return 1;
}
