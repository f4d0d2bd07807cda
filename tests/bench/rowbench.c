/*
 * rowbench: per-row pread/pwrite throughput on one file, the way a trainer
 * that knows nothing of embfs reads an embedding table.
 *
 *   rowbench [-r ROWSIZE] [-n ROWS] [-o read|write|rmw] [-t THREADS]
 *            [-d SECONDS | -c OPS] [-s SEED] [-z THETA] [-D] [-F] [-S N] FILE
 *   rowbench -Z [-n ROWS] [-z THETA] [-s SEED]      check the Zipf sampler
 *
 * Every call moves one row: pread/pwrite(fd, buf, ROWSIZE, row * ROWSIZE);
 * rmw (a training step's update) is a pread then a pwrite of the same row,
 * counted as one row.
 * Row ids follow Zipf(THETA) over ROWS ranks (rejection-inversion sampling,
 * Hormann & Derflinger 1996: O(1) per id, no table).  Rank k is mapped to a
 * row by a fixed bijection of [0, ROWS) (an invertible 64-bit mix on the
 * next power of two, cycle-walked), so hot rows are spread over the file.
 * Ids are drawn before the clock starts: each thread owns a ring of 2^20
 * ids from its own stream (seed + thread) and cycles through it.
 *
 * Output, one line:  rowbench op=read threads=1 ... rows_per_s=N p50_us=X p99_us=Y
 * Latency: one row in LAT_EVERY is timed (clock read before and after) into
 * a log-linear histogram (~3% resolution); the deadline is checked there too,
 * so timing costs under 2% even of a 0.6 us kernel pread.
 *   -D  open with O_DIRECT (on FUSE: bypass the kernel page cache)
 *   -F  posix_fadvise(DONTNEED) the file before the run (start cold)
 *   -S N  (write, rmw) durable writes: each thread fsyncs after every N of its
 *         rows and once more at the end for the rows since its last fsync;
 *         fsync time counts in rows_per_s.  Adds fsyncs= and fsync_ms= (mean
 *         per fsync) to the output.  The timed latency samples never include
 *         an fsync unless N is not a multiple of 16 (LAT_EVERY).
 * Exit 0 on success, 1 on a failed call or bad arguments.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

#define RING_BITS 20
#define LAT_EVERY 16 /* time one call in 16: two clock reads per 16 calls */

struct conf {
	const char *path;
	size_t row_size;
	uint64_t rows;
	int write, rmw;
	int threads;
	double secs;
	uint64_t ops; /* total over all threads; 0 = run for secs */
	uint64_t seed;
	double theta;
	int direct, fadv_cold;
	uint64_t sync_every; /* fsync after this many rows per thread; 0 = never */
};

struct worker {
	pthread_t tid;
	const struct conf *c;
	int fd;
	uint64_t *ids; /* ring of 2^RING_BITS row ids */
	uint64_t seed;
	uint64_t quota; /* calls to make, 0 = until deadline */
	pthread_barrier_t *go;
	uint64_t done;
	double t_start, t_end;
	int err;
	uint64_t fsyncs, fsync_ns;
	uint32_t hist[HIST_N];
};

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- random numbers: splitmix64 seeds xoshiro256** ---- */


/* middle of bucket i, in ns */


/* ---- the timed loop ---- */

/* -S: make this thread's writes durable; -1 (w->err set) on failure */
static int sync_now(struct worker *w)
{
	uint64_t t = now_ns();
	if (fsync(w->fd)) {
		w->err = errno;
		fprintf(stderr, "rowbench: fsync: %s\n", strerror(errno));
		return -1;
	}
	w->fsync_ns += now_ns() - t;
	w->fsyncs++;
	return 0;
}

static void *worker_run(void *arg)
{
	struct worker *w = arg;
	const struct conf *c = w->c;
	const uint64_t ring_mask = (1ull << RING_BITS) - 1;
	void *buf;
	if (posix_memalign(&buf, 4096, c->row_size < 4096 ? 4096 : c->row_size)) {
		w->err = ENOMEM;
		pthread_barrier_wait(w->go);
		return NULL;
	}
	struct rng r;
	rng_seed(&r, w->seed ^ 0x5EED);
	for (size_t i = 0; i < c->row_size; i += 8) { /* written rows: random bytes */
		uint64_t v = rng_next(&r);
		memcpy((char *)buf + i, &v, c->row_size - i < 8 ? c->row_size - i : 8);
	}
	uint64_t deadline_ns = 0, i = 0, ts = 0, unsynced = 0;
	pthread_barrier_wait(w->go);
	uint64_t t0 = now_ns(), t = t0;
	if (!w->quota)
		deadline_ns = t0 + (uint64_t)(c->secs * 1e9);
	for (;;) {
		uint64_t row = w->ids[i & ring_mask];
		off_t off = (off_t)(row * c->row_size);
		ssize_t n;
		int sample = (i & (LAT_EVERY - 1)) == 0;
		if (sample)
			ts = now_ns();
		if (c->write) {
			memcpy(buf, &row, sizeof(row) < c->row_size ? sizeof(row) : c->row_size);
			n = pwrite(w->fd, buf, c->row_size, off);
		} else {
			n = pread(w->fd, buf, c->row_size, off);
			if (c->rmw && n == (ssize_t)c->row_size) {
				((unsigned char *)buf)[0]++;
				n = pwrite(w->fd, buf, c->row_size, off);
			}
		}
		if (n != (ssize_t)c->row_size) {
			w->err = n < 0 ? errno : EIO;
			fprintf(stderr, "rowbench: %s row %llu: %s\n", c->write || c->rmw ? "pwrite" : "pread",
				(unsigned long long)row, n < 0 ? strerror(errno) : "short transfer");
			break;
		}
		i++;
		if (c->sync_every && ++unsynced == c->sync_every) {
			if (sync_now(w))
				break;
			unsynced = 0;
		}
		if (sample) {
			t = now_ns();
			w->hist[hist_idx(t - ts)]++;
			if (!w->quota && t >= deadline_ns)
				break;
		}
		if (w->quota && i >= w->quota)
			break;
	}
	if (unsynced && !w->err)
		sync_now(w);
	t = now_ns();
	w->done = i;
	w->t_start = t0 * 1e-9;
	w->t_end = t * 1e-9;
	free(buf);
	return NULL;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: rowbench [-r ROWSIZE] [-n ROWS] [-o read|write|rmw] [-t THREADS]\n"
		   "                [-d SECONDS | -c OPS] [-s SEED] [-z THETA] [-D] [-F] [-S N] FILE\n"
		   "       rowbench -Z [-n ROWS] [-z THETA] [-s SEED]   (check the Zipf sampler)\n"
		   "  defaults: -r 256 -n 4000000 -o read -t 1 -d 3 -s 1 -z 0.99\n"
		   "  -D open O_DIRECT   -F drop the file's page cache first (start cold)\n"
		   "  -S N  fsync after every N rows written (per thread) and at the end\n");
}


/* -Z: sample 10M ids and compare the top ranks with the exact pmf */
static int zipf_check(const struct conf *c)
{
	struct zipf z;
	struct rng r;
	const uint64_t N = 10000000, top = 5;
	uint64_t cnt[6] = { 0 }, tail = 0;
	double hsum = 0;
	zipf_init(&z, c->rows, c->theta);
	rng_seed(&r, c->seed);
	for (uint64_t i = 0; i < N; i++) {
		uint64_t k = zipf_next(&z, &r);
		if (k <= top)
			cnt[k]++;
		else if (k > c->rows / 2)
			tail++;
	}
	for (uint64_t k = c->rows; k >= 1; k--) /* small terms first */
		hsum += pow((double)k, -c->theta);
	double tailp = 0;
	for (uint64_t k = c->rows; k > c->rows / 2; k--)
		tailp += pow((double)k, -c->theta);
	int bad = 0;
	printf("zipf n=%llu theta=%.3f, %llu samples\n", (unsigned long long)c->rows, c->theta,
	       (unsigned long long)N);
	for (uint64_t k = 1; k <= top; k++) {
		double p = pow((double)k, -c->theta) / hsum, got = (double)cnt[k] / N;
		double sd = sqrt(p * (1 - p) / N);
		printf("  rank %llu  exact %.5f  sampled %.5f  (%+.1f sd)\n", (unsigned long long)k, p,
		       got, (got - p) / sd);
		bad |= fabs(got - p) > 5 * sd;
	}
	double p = tailp / hsum, got = (double)tail / N, sd = sqrt(p * (1 - p) / N);
	printf("  upper half  exact %.5f  sampled %.5f  (%+.1f sd)\n", p, got, (got - p) / sd);
	bad |= fabs(got - p) > 5 * sd;
	struct perm pm;
	perm_init(&pm, c->rows);
	printf("  rank 1..6 -> rows");
	for (uint64_t k = 0; k < 6 && k < c->rows; k++)
		printf(" %llu", (unsigned long long)perm_row(&pm, k));
	printf("\n");
	if (c->rows <= (1u << 24)) { /* the rank -> row map must be a bijection */
		uint8_t *seen = calloc(c->rows, 1);
		if (!seen)
			return 1;
		for (uint64_t k = 0; k < c->rows; k++) {
			uint64_t row = perm_row(&pm, k);
			bad |= seen[row];
			seen[row] = 1;
		}
		free(seen);
		printf("  rank -> row map is %s\n", bad ? "NOT a permutation" : "a permutation");
	}
	printf("%s\n", bad ? "FAIL" : "ok");
	return bad;
}

int main(int argc, char **argv)
{
	struct conf c = { .row_size = 256, .rows = 4000000, .threads = 1, .secs = 3,
			  .seed = 1, .theta = 0.99 };
	uint64_t v;
	int opt, check = 0;
	while ((opt = getopt(argc, argv, "r:n:o:t:d:c:s:z:S:DFZh")) != -1) {
		switch (opt) {
		case 'r':
			if (parse_u64(optarg, &v) || v == 0 || v > (1u << 20))
				goto bad;
			c.row_size = (size_t)v;
			break;
		case 'n':
			if (parse_u64(optarg, &v) || v == 0)
				goto bad;
			c.rows = v;
			break;
		case 'o':
			c.write = c.rmw = 0;
			if (!strcmp(optarg, "write"))
				c.write = 1;
			else if (!strcmp(optarg, "rmw"))
				c.rmw = 1;
			else if (strcmp(optarg, "read"))
				goto bad;
			break;
		case 't':
			if (parse_u64(optarg, &v) || v == 0 || v > 256)
				goto bad;
			c.threads = (int)v;
			break;
		case 'd':
			c.secs = strtod(optarg, NULL);
			if (!(c.secs > 0))
				goto bad;
			break;
		case 'c':
			if (parse_u64(optarg, &c.ops) || c.ops == 0)
				goto bad;
			break;
		case 's':
			if (parse_u64(optarg, &c.seed))
				goto bad;
			break;
		case 'z':
			c.theta = strtod(optarg, NULL);
			if (!(c.theta > 0) || c.theta > 10)
				goto bad;
			break;
		case 'S':
			if (parse_u64(optarg, &c.sync_every) || c.sync_every == 0)
				goto bad;
			break;
		case 'D': c.direct = 1; break;
		case 'F': c.fadv_cold = 1; break;
		case 'Z': check = 1; break;
		case 'h': usage(stdout); return 0;
		default: goto bad;
		}
	}
	if (check)
		return zipf_check(&c);
	if (optind != argc - 1)
		goto bad;
	c.path = argv[optind];
	if (c.sync_every && !c.write && !c.rmw) {
		fprintf(stderr, "rowbench: -S needs -o write or -o rmw\n");
		goto bad;
	}

	int flags = (c.write ? O_WRONLY : c.rmw ? O_RDWR : O_RDONLY) | (c.direct ? O_DIRECT : 0);
	int fd = open(c.path, flags);
	if (fd < 0) {
		fprintf(stderr, "rowbench: %s: %s\n", c.path, strerror(errno));
		return 1;
	}
	if (c.fadv_cold && (errno = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED)))
		fprintf(stderr, "rowbench: fadvise(DONTNEED): %s\n", strerror(errno));

	struct zipf z;
	struct perm pm;
	zipf_init(&z, c.rows, c.theta);
	perm_init(&pm, c.rows);
	struct worker *w = calloc((size_t)c.threads, sizeof(*w));
	pthread_barrier_t go;
	if (!w || pthread_barrier_init(&go, NULL, (unsigned)c.threads + 1))
		return 1;
	const size_t ring = (size_t)1 << RING_BITS;
	double tg = now();
	for (int t = 0; t < c.threads; t++) { /* draw every id before the clock starts */
		struct rng r;
		w[t].c = &c;
		w[t].fd = fd;
		w[t].go = &go;
		w[t].seed = c.seed * 1000003 + (uint64_t)t;
		w[t].quota = c.ops ? c.ops / (uint64_t)c.threads + ((uint64_t)t < c.ops % (uint64_t)c.threads) : 0;
		w[t].ids = malloc(ring * sizeof(uint64_t));
		if (!w[t].ids)
			return 1;
		rng_seed(&r, w[t].seed);
		for (size_t i = 0; i < ring; i++)
			w[t].ids[i] = perm_row(&pm, zipf_next(&z, &r) - 1);
	}
	tg = now() - tg;
	for (int t = 0; t < c.threads; t++) {
		if (pthread_create(&w[t].tid, NULL, worker_run, &w[t])) {
			fprintf(stderr, "rowbench: pthread_create failed\n");
			return 1;
		}
	}
	pthread_barrier_wait(&go);
	uint64_t total = 0, fsyncs = 0, fsync_ns = 0;
	static uint64_t hist[HIST_N];
	double t_min = 1e300, t_max = 0;
	int err = 0;
	for (int t = 0; t < c.threads; t++) {
		pthread_join(w[t].tid, NULL);
		err |= w[t].err;
		total += w[t].done;
		fsyncs += w[t].fsyncs;
		fsync_ns += w[t].fsync_ns;
		if (w[t].t_start < t_min)
			t_min = w[t].t_start;
		if (w[t].t_end > t_max)
			t_max = w[t].t_end;
		for (unsigned i = 0; i < HIST_N; i++)
			hist[i] += w[t].hist[i];
	}
	close(fd);
	if (err)
		return 1;
	double el = t_max - t_min;
	printf("rowbench op=%s threads=%d row_size=%zu rows=%llu theta=%.2f%s%s ops=%llu secs=%.3f "
	       "rows_per_s=%.0f",
	       c.write ? "write" : c.rmw ? "rmw" : "read", c.threads, c.row_size, (unsigned long long)c.rows, c.theta,
	       c.direct ? " direct=1" : "", c.fadv_cold ? " cold=1" : "", (unsigned long long)total,
	       el, el > 0 ? total / el : 0.0);
	uint64_t sampled = 0;
	for (unsigned i = 0; i < HIST_N; i++)
		sampled += hist[i];
	printf(" p50_us=%.2f p99_us=%.2f", hist_pct(hist, sampled, 50) / 1e3,
	       hist_pct(hist, sampled, 99) / 1e3);
	if (c.sync_every)
		printf(" sync_every=%llu fsyncs=%llu fsync_ms=%.3f", (unsigned long long)c.sync_every,
		       (unsigned long long)fsyncs, fsyncs ? fsync_ns / 1e6 / (double)fsyncs : 0.0);
	printf(" gen_s=%.2f\n", tg);
	for (int t = 0; t < c.threads; t++)
		free(w[t].ids);
	free(w);
	pthread_barrier_destroy(&go);
	return 0;
bad:
	usage(stderr);
	return 1;
}
