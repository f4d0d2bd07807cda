/*
 * gatherbench: a trainer's row access, batch by batch: B Zipf ids per batch,
 * their rows read (and with -w written back), through MNT/.embfs/rows or
 * with one pread/pwrite per row.
 *
 *   gatherbench -m batch|pread [-w] [-r ROWSIZE] [-n ROWS] [-b BATCH] [-t THREADS]
 *               [-d SECONDS] [-s SEED] [-z THETA] [-B BATCHFILE] [-I] FILE
 *
 * -m batch: per batch one GATHER request (pwrite of header + ids at offset 0)
 *   and one pread of the B rows from the batch file; with -w then a SCATTER
 *   of the same rows (one byte changed), written with pwritev so the rows go
 *   straight from the gather buffer.  FILE is the table (for its st_ino); the
 *   batch file is dirname(FILE)/.embfs/rows unless -B names it.
 * -P (batch mode): before each batch, one pread of its first row from FILE
 *   through the page cache, so the daemon takes the table as cached by the
 *   kernel and each scatter first records what its rows held (the cost of
 *   docs/files.md "Batched rows", page cache; without -P scatters record nothing).
 * -m pread: per batch B preads of one row at row * ROWSIZE of FILE; with -w
 *   each row is then written back with pwrite (read-modify-write).  Works on
 *   any file (the mount's table, or a sparse file on /dev/shm as baseline).
 * Ids: Zipf(THETA) over ROWS ranks by rejection-inversion, rank -> row by the
 * same fixed bijection as rowbench (so the hot rows are the same); each
 * thread (own fds) draws 2^20 ids from its own stream before the clock
 * starts and cycles through them, duplicates within a batch kept.
 * -I: no batches; per thread one line "ids thread=T seed=S n=2^20
 * first=A,B,C,D digest=HEX" (ids_digest below) and exit: tests/bench/pybench.py
 * -I prints the same lines when it draws the same ids (run.sh checks it).
 *
 * Output, one line:
 *   gatherbench mode=batch threads=1 batch=4096 write=0 ... batches=N rows_per_s=X
 *               p50_batch_us=Y p99_batch_us=Z
 * (rows_per_s counts ids gathered; a gathered-and-scattered row counts once.)
 * Exit 0 on success, 1 on a failed call or bad arguments.
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

struct conf {
	const char *path, *batch_path;
	uint32_t row_size, batch;
	uint64_t rows, seed, ino;
	int batched, write, threads, touch, ids_only;
	double secs, theta;
};

struct worker {
	pthread_t tid;
	const struct conf *c;
	uint64_t *ids;
	uint64_t seed;
	pthread_barrier_t *go;
	uint64_t batches;
	double t_start, t_end;
	int err;
	uint32_t hist[HIST_N];
};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ids, Zipf sampler and latency histogram: bench.h, shared with rowbench.c */

/* an order-sensitive digest of ids: the sum mod 2^64 of the splitmix64
 * finalizer of ids[i] ^ (i * golden) (pybench.py computes it with numpy) */
static uint64_t ids_digest(const uint64_t *ids, size_t n)
{
	uint64_t sum = 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t z = ids[i] ^ (i * 0x9E3779B97F4A7C15ull);
		z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
		z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
		sum += z ^ (z >> 31);
	}
	return sum;
}

/* ---- one batch ---- */

static int full_pwritev(int fd, struct iovec *iov, int n, size_t len)
{
	size_t done = 0;
	while (done < len) {
		ssize_t w = pwritev(fd, iov, n, (off_t)done);
		if (w <= 0)
			return -1;
		done += (size_t)w;
		while (n && (size_t)w >= iov->iov_len) {
			w -= (ssize_t)iov->iov_len;
			iov++;
			n--;
		}
		if (n) {
			iov->iov_base = (char *)iov->iov_base + w;
			iov->iov_len -= (size_t)w;
		}
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

/* req: header + ids (B ids at req + 32); rows: B rows, page aligned; tfd:
 * the table, read once before the batch (-P), or -1 */
static int batch_one(const struct conf *c, int bfd, int tfd, char *req, char *rows)
{
	struct embfs_batch_hdr *h = (struct embfs_batch_hdr *)req;
	size_t idlen = 8ull * c->batch, rlen = (size_t)c->batch * c->row_size;
	uint64_t first;
	memcpy(&first, req + sizeof(*h), 8);
	if (tfd >= 0 && pread(tfd, rows, c->row_size, (off_t)(first * c->row_size)) < 0)
		return -1;
	h->op = EMBFS_BATCH_GATHER;
	h->total_len = sizeof(*h) + idlen;
	struct iovec iov[2] = { { req, sizeof(*h) + idlen }, { rows, rlen } };
	if (full_pwritev(bfd, iov, 1, sizeof(*h) + idlen) || full_pread(bfd, rows, rlen))
		return -1;
	if (!c->write)
		return 0;
	for (uint32_t i = 0; i < c->batch; i++)
		rows[(size_t)i * c->row_size]++;
	h->op = EMBFS_BATCH_SCATTER;
	h->total_len = sizeof(*h) + idlen + rlen;
	iov[0] = (struct iovec){ req, sizeof(*h) + idlen };
	iov[1] = (struct iovec){ rows, rlen };
	return full_pwritev(bfd, iov, 2, sizeof(*h) + idlen + rlen);
}

static int pread_one(const struct conf *c, int fd, const uint64_t *ids, char *row)
{
	for (uint32_t i = 0; i < c->batch; i++) {
		off_t off = (off_t)(ids[i] * c->row_size);
		if (pread(fd, row, c->row_size, off) != (ssize_t)c->row_size)
			return -1;
		if (c->write) {
			row[0]++;
			if (pwrite(fd, row, c->row_size, off) != (ssize_t)c->row_size)
				return -1;
		}
	}
	return 0;
}

static void *worker_run(void *arg)
{
	struct worker *w = arg;
	const struct conf *c = w->c;
	const uint64_t ring = 1ull << RING_BITS;
	size_t idlen = 8ull * c->batch, rlen = (size_t)c->batch * c->row_size;
	char *req = NULL, *rows = NULL;
	int fd = open(c->batched ? c->batch_path : c->path, c->write || c->batched ? O_RDWR : O_RDONLY);
	int tfd = c->touch ? open(c->path, O_RDONLY) : -1;
	if (fd < 0 || (c->touch && tfd < 0) || posix_memalign((void **)&req, 4096, sizeof(struct embfs_batch_hdr) + idlen) ||
	    posix_memalign((void **)&rows, 4096, rlen)) {
		w->err = errno ? errno : ENOMEM;
		fprintf(stderr, "gatherbench: open %s: %s\n", c->batched ? c->batch_path : c->path,
			strerror(w->err));
		pthread_barrier_wait(w->go);
		return NULL;
	}
	struct embfs_batch_hdr *h = (struct embfs_batch_hdr *)req;
	memset(h, 0, sizeof(*h));
	memcpy(h->magic, EMBFS_BATCH_MAGIC, 4);
	h->table_ino = c->ino;
	h->count = c->batch;
	uint64_t *ids = (uint64_t *)(req + sizeof(*h));
	uint64_t pos = 0, b = 0;
	pthread_barrier_wait(w->go);
	uint64_t t0 = now_ns(), t = t0, deadline = t0 + (uint64_t)(c->secs * 1e9);
	while (t < deadline) {
		for (uint32_t i = 0; i < c->batch; i++)
			ids[i] = w->ids[(pos + i) & (ring - 1)];
		pos += c->batch;
		int r = c->batched ? batch_one(c, fd, tfd, req, rows) : pread_one(c, fd, ids, rows);
		if (r) {
			w->err = errno ? errno : EIO;
			fprintf(stderr, "gatherbench: batch %llu: %s\n", (unsigned long long)b, strerror(w->err));
			break;
		}
		uint64_t t1 = now_ns();
		w->hist[hist_idx(t1 - t)]++;
		t = t1;
		b++;
	}
	w->batches = b;
	w->t_start = t0 * 1e-9;
	w->t_end = t * 1e-9;
	close(fd);
	if (tfd >= 0)
		close(tfd);
	free(req);
	free(rows);
	return NULL;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: gatherbench -m batch|pread [-w] [-P] [-r ROWSIZE] [-n ROWS] [-b BATCH] [-t THREADS]\n"
		   "                   [-d SECONDS] [-s SEED] [-z THETA] [-B BATCHFILE] [-I] FILE\n"
		   "  defaults: -r 256 -n 4000000 -b 4096 -t 1 -d 3 -s 1 -z 0.99\n");
}

int main(int argc, char **argv)
{
	struct conf c = { .row_size = 256, .batch = 4096, .rows = 4000000, .seed = 1, .threads = 1,
			  .secs = 3, .theta = 0.99, .batched = -1 };
	static char bpath[PATH_MAX];
	int opt;
	while ((opt = getopt(argc, argv, "m:wPr:n:b:t:d:s:z:B:Ih")) != -1) {
		switch (opt) {
		case 'm':
			c.batched = !strcmp(optarg, "batch") ? 1 : !strcmp(optarg, "pread") ? 0 : -1;
			if (c.batched < 0)
				goto bad;
			break;
		case 'w': c.write = 1; break;
		case 'P': c.touch = 1; break;
		case 'r': c.row_size = (uint32_t)atoi(optarg); break;
		case 'n': c.rows = strtoull(optarg, NULL, 10); break;
		case 'b': c.batch = (uint32_t)atoi(optarg); break;
		case 't': c.threads = atoi(optarg); break;
		case 'd': c.secs = strtod(optarg, NULL); break;
		case 's': c.seed = strtoull(optarg, NULL, 10); break;
		case 'z': c.theta = strtod(optarg, NULL); break;
		case 'B': c.batch_path = optarg; break;
		case 'I': c.ids_only = 1; break;
		case 'h': usage(stdout); return 0;
		default: goto bad;
		}
	}
	if (c.ids_only && c.batched < 0)
		c.batched = 1;
	if (c.batched < 0 || (c.touch && !c.batched) || optind != argc - 1 || !c.row_size || !c.rows || !c.batch ||
	    c.batch > EMBFS_BATCH_MAX_COUNT || c.threads < 1 || c.threads > 64 || !(c.secs > 0) ||
	    !(c.theta > 0))
		goto bad;
	c.path = argv[optind];
	struct stat st;
	if (stat(c.path, &st)) {
		fprintf(stderr, "gatherbench: %s: %s\n", c.path, strerror(errno));
		return 1;
	}
	c.ino = st.st_ino;
	if (!c.batch_path) {
		const char *slash = strrchr(c.path, '/');
		snprintf(bpath, sizeof(bpath), "%.*s/.embfs/rows", slash ? (int)(slash - c.path) : 1,
			 slash ? c.path : ".");
		c.batch_path = bpath;
	}

	struct zipf z;
	struct perm pm;
	zipf_init(&z, c.rows, c.theta);
	perm_init(&pm, c.rows);
	struct worker *w = calloc((size_t)c.threads, sizeof(*w));
	pthread_barrier_t go;
	if (!w || pthread_barrier_init(&go, NULL, (unsigned)c.threads + 1))
		return 1;
	const size_t ring = (size_t)1 << RING_BITS;
	for (int t = 0; t < c.threads; t++) {
		struct rng r;
		w[t].c = &c;
		w[t].go = &go;
		w[t].seed = c.seed * 1000003 + (uint64_t)t;
		w[t].ids = malloc(ring * sizeof(uint64_t));
		if (!w[t].ids)
			return 1;
		rng_seed(&r, w[t].seed);
		for (size_t i = 0; i < ring; i++)
			w[t].ids[i] = perm_row(&pm, zipf_next(&z, &r) - 1);
		if (c.ids_only) {
			const uint64_t *d = w[t].ids;
			printf("ids thread=%d seed=%llu n=%zu first=%llu,%llu,%llu,%llu digest=%016llx\n", t,
			       (unsigned long long)w[t].seed, ring, (unsigned long long)d[0], (unsigned long long)d[1],
			       (unsigned long long)d[2], (unsigned long long)d[3], (unsigned long long)ids_digest(d, ring));
			free(w[t].ids);
		}
	}
	if (c.ids_only) {
		free(w);
		return 0;
	}
	for (int t = 0; t < c.threads; t++)
		if (pthread_create(&w[t].tid, NULL, worker_run, &w[t]))
			return 1;
	pthread_barrier_wait(&go);
	static uint64_t hist[HIST_N];
	uint64_t batches = 0;
	double t_min = 1e300, t_max = 0;
	int err = 0;
	for (int t = 0; t < c.threads; t++) {
		pthread_join(w[t].tid, NULL);
		err |= w[t].err;
		batches += w[t].batches;
		t_min = w[t].t_start < t_min ? w[t].t_start : t_min;
		t_max = w[t].t_end > t_max ? w[t].t_end : t_max;
		for (unsigned i = 0; i < HIST_N; i++)
			hist[i] += w[t].hist[i];
		free(w[t].ids);
	}
	free(w);
	if (err)
		return 1;
	double el = t_max - t_min;
	printf("gatherbench mode=%s threads=%d batch=%u write=%d row_size=%u rows=%llu theta=%.2f "
	       "batches=%llu secs=%.3f rows_per_s=%.0f p50_batch_us=%.1f p99_batch_us=%.1f\n",
	       c.batched ? "batch" : "pread", c.threads, c.batch, c.write, c.row_size,
	       (unsigned long long)c.rows, c.theta, (unsigned long long)batches, el,
	       el > 0 ? (double)batches * c.batch / el : 0.0, hist_pct(hist, batches, 50) / 1e3,
	       hist_pct(hist, batches, 99) / 1e3);
	return 0;
bad:
	usage(stderr);
	return 1;
}
