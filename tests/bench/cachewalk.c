/*
 * cachewalk: the row cache's batched gather in process, against a plain
 * gather of the same ids from a DRAM array.
 *
 *   cachewalk [-w] [-n ROWS] [-r ROWSIZE] [-b BATCH] [-B BATCHES] [-k ROUNDS]
 *             [-z THETA] [-s SEED]
 *
 * No FUSE and no store: the real cache library (build/libcache.a) over a
 * fake store whose fetch fills a row from its id.  Every row of the table is
 * cached first (the budget holds them all), and an array of the same
 * geometry (advised MADV_HUGEPAGE, as the cache's arenas are) is filled.
 * Then ROUNDS rounds, each BATCHES batches of BATCH Zipf(THETA) ids (drawn
 * as gatherbench draws them: rank -> row by bench.h's fixed bijection) read
 * with cache_read_rows(), then the same batches copied row by row from the
 * array with memcpy, as tests/bench/minfuse.c answers a gather.  The two run
 * in turn, not interleaved batch by batch, so that each has the last level
 * cache to itself as a server would.  Figures: the median batch time of
 * each (over every round), and array/cache.  This is the walk that the
 * gathermin section measures through FUSE, without the kernel's share.
 * -w: the batches are written instead (cache_write_rows(), every row
 * dirty after the first round: no flusher runs), against memcpy of the
 * same rows into the array.
 *
 * Output: one parsable line
 *   cachewalk rows=... row_size=... batch=... cache_us=... array_us=... ratio=...
 * Exit 0, or 1 on bad arguments / allocation failure.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "embfs/cache.h"

static uint32_t RS = 256;

static void fill_row(uint64_t row, char *buf)
{
	for (uint32_t o = 0; o + 8 <= RS; o += 8)
		memcpy(buf + o, &row, 8);
}

static int f_fetch(void *ctx, uint32_t table, uint64_t row, void *buf, uint64_t *batch)
{
	(void)ctx;
	(void)table;
	*batch = 1;
	if (buf)
		fill_row(row, buf);
	return 1;
}

static int f_writeback(void *ctx, uint32_t table, const struct cache_wb *rows, size_t n)
{
	(void)ctx;
	(void)table;
	(void)rows;
	(void)n;
	return 0;
}

static const struct cache_ops OPS = { .fetch = f_fetch, .writeback = f_writeback };

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void usage(void)
{
	fprintf(stderr, "usage: cachewalk [-w] [-n ROWS] [-r ROWSIZE] [-b BATCH] [-B BATCHES] [-k ROUNDS] "
			"[-z THETA] [-s SEED]\n");
	exit(1);
}

int main(int argc, char **argv)
{
	uint64_t rows = 4000000, seed = 1, rs = RS, ub = 4096, unb = 2000, urounds = 2;
	double theta = 0.99;
	int o, wr = 0;
	while ((o = getopt(argc, argv, "wn:r:b:B:k:z:s:")) != -1) {
		int bad = 0;
		char *end = NULL;
		switch (o) {
		case 'w': wr = 1; break;
		case 'n': bad = parse_u64(optarg, &rows); break;
		case 'r': bad = parse_u64(optarg, &rs); break;
		case 'b': bad = parse_u64(optarg, &ub); break;
		case 'B': bad = parse_u64(optarg, &unb); break;
		case 'k': bad = parse_u64(optarg, &urounds); break;
		case 'z': theta = strtod(optarg, &end); bad = end == optarg || *end; break;
		case 's': bad = parse_u64(optarg, &seed); break;
		default: usage();
		}
		if (bad)
			usage();
	}
	if (rows < 2 || rs < 8 || rs % 8 || rs > 65536 || ub < 1 || ub > (1u << 20) || unb < 1 || unb > (1u << 20) ||
	    urounds < 1 || urounds > 1000 || !(theta > 0))
		usage();
	RS = (uint32_t)rs;
	long batch = (long)ub, nb = (long)unb, rounds = (long)urounds;
	/* the budget holds every row, with room for the shards' rounding */
	struct cache_conf cf = { rows * (RS + CACHE_ROW_OVERHEAD) + rows * (RS + CACHE_ROW_OVERHEAD) / 16, 0, 0 };
	struct cache *c = cache_create(&cf, &OPS, NULL);
	size_t chunk = 65536, len = (size_t)rows * RS;
	uint64_t *ids = malloc(sizeof(*ids) * chunk);
	char *out = malloc((size_t)(batch > (long)chunk ? batch : (long)chunk) * RS);
	char *arr = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint64_t *all = malloc(sizeof(*all) * (size_t)nb * (size_t)batch);
	double *tc = malloc(sizeof(double) * (size_t)(nb * rounds)), *ta = malloc(sizeof(double) * (size_t)(nb * rounds));
	if (!c || !ids || !out || arr == MAP_FAILED || !all || !tc || !ta) {
		fprintf(stderr, "cachewalk: out of memory\n");
		return 1;
	}
	madvise(arr, len, MADV_HUGEPAGE);
	for (uint64_t r = 0; r < rows; r += chunk) {
		size_t n = rows - r < chunk ? rows - r : chunk;
		for (size_t i = 0; i < n; i++) {
			ids[i] = r + i;
			fill_row(r + i, arr + (r + i) * RS);
		}
		if (cache_read_rows(c, 0, RS, ids, n, out, NULL)) {
			fprintf(stderr, "cachewalk: cache_read_rows failed\n");
			return 1;
		}
	}
	struct cache_stats st;
	cache_stats_get(c, 0, &st);
	if (st.rows != rows) {
		fprintf(stderr, "cachewalk: %llu of %llu rows cached\n", (unsigned long long)st.rows,
			(unsigned long long)rows);
		return 1;
	}
	struct zipf z;
	struct perm pm;
	struct rng rg;
	zipf_init(&z, rows, theta);
	perm_init(&pm, rows);
	rng_seed(&rg, seed);
	for (size_t i = 0; i < (size_t)nb * (size_t)batch; i++)
		all[i] = perm_row(&pm, zipf_next(&z, &rg) - 1);
	for (long k = 0; k < rounds; k++) {
		for (long b = 0; b < nb; b++) {
			const uint64_t *id = all + (size_t)b * (size_t)batch;
			double t0 = now();
			if (wr ? cache_write_rows(c, 0, RS, id, (size_t)batch, out, 2, NULL)
			       : cache_read_rows(c, 0, RS, id, (size_t)batch, out, NULL))
				return 1;
			tc[k * nb + b] = now() - t0;
			if (!wr && b == 0 && memcmp(out, arr + id[0] * RS, RS)) {
				fprintf(stderr, "cachewalk: row %llu reads wrong\n", (unsigned long long)id[0]);
				return 1;
			}
		}
		for (long b = 0; b < nb; b++) {
			const uint64_t *id = all + (size_t)b * (size_t)batch;
			double t0 = now();
			if (wr)
				for (long i = 0; i < batch; i++)
					memcpy(arr + id[i] * RS, out + (size_t)i * RS, RS);
			else
				for (long i = 0; i < batch; i++)
					memcpy(out + (size_t)i * RS, arr + id[i] * RS, RS);
			ta[k * nb + b] = now() - t0;
		}
	}
	size_t n = (size_t)(nb * rounds);
	qsort(tc, n, sizeof(double), cmp_double);
	qsort(ta, n, sizeof(double), cmp_double);
	double mc = tc[n / 2] * 1e6, ma = ta[n / 2] * 1e6;
	printf("cachewalk mode=%s rows=%llu row_size=%u batch=%ld batches=%ld rounds=%ld theta=%.2f cache_us=%.1f "
	       "array_us=%.1f ratio=%.3f\n",
	       wr ? "write" : "read", (unsigned long long)rows, RS, batch, nb, rounds, theta, mc, ma, ma / mc);
	cache_destroy(c);
	return 0;
}
