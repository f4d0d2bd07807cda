/*
 * missrate: the miss-rate curve of the embfs row cache (cache/, CLOCK) next
 * to an exact LRU, on the id streams rowbench uses.
 *
 *   missrate [-n ROWS] [-r ROWSIZE] [-a ACCESSES] [-w WARMUP] [-s SEED]
 *            [-z THETA] [-p PCT,PCT,...] [-k SHARDS] [-d zipf|uniform|both] [-1]
 *
 * In process, no FUSE and no store: the real cache library (build/libcache.a)
 * runs over a fake store whose fetch callback fills the row and counts the
 * call; every row is stored (a hole would not be cached).  The exact LRU is
 * here: an open-addressing hash map (row -> node) and a doubly linked list
 * of nodes in arrays.
 *
 * For each id stream (Zipf(THETA) and uniform, ids drawn as rowbench draws
 * them: rank -> row by the same fixed bijection of [0, ROWS)) and each cache
 * size PCT % of the table, the cache budget is
 *     struct cache_conf.bytes = PCT% * ROWS * (ROWSIZE + CACHE_ROW_OVERHEAD)
 * split over SHARDS shards (default 64, as the daemon runs it), so CLOCK
 * holds SHARDS * floor(bytes / SHARDS / (ROWSIZE + CACHE_ROW_OVERHEAD)) rows;
 * the LRU gets exactly that many rows.  -1 adds CLOCK with one shard (the
 * same budget), which splits the gap between the policy and the sharding.
 * Each cache first sees WARMUP accesses uncounted, then ACCESSES counted; the
 * same stream (one i.i.d. sequence, not rowbench's cycled ring) is replayed
 * for every policy and size.  Miss rate = fetches / counted accesses.
 *
 * Output: a table, then (after it) one parsable line per point:
 *   missrate dist=zipf pct=0.1 rows=3968 clock=12.34 lru=11.90 [clock1=..] diff=0.44 flag=0
 * flag=1 (and a '!' in the table) where CLOCK misses more than 2 points
 * more often than LRU.  Exit 0, or 1 on bad arguments / allocation failure.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

#include "embfs/cache.h"

#define NIL UINT32_MAX
#define MAX_PCTS 32
#define FLAG_POINTS 2.0
#define LINE_MAX_B 512

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- ids: rng, Zipf and rank -> row exactly as in rowbench.c (keep in sync;
 * run.sh compares `rowbench -Z` and `missrate -P` on rank 1..6 -> rows) ---- */


/* ---- exact LRU: hash map row -> node, doubly linked list, most recent at head ---- */

struct lru {
	uint32_t cap, n, head, tail;
	uint64_t *key;
	uint32_t *prev, *next;
	uint32_t *slot; /* open addressing, linear probing; NIL = empty */
	uint64_t mask;
};

static inline uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xFF51AFD7ED558CCDull;
	x ^= x >> 33;
	x *= 0xC4CEB9FE1A85EC53ull;
	x ^= x >> 33;
	return x;
}

static int lru_init(struct lru *l, uint32_t cap)
{
	uint64_t ns = 16;
	while (ns < 2ull * cap) /* load factor <= 1/2 */
		ns *= 2;
	memset(l, 0, sizeof(*l));
	l->cap = cap;
	l->head = l->tail = NIL;
	l->mask = ns - 1;
	l->key = malloc((size_t)cap * sizeof(*l->key));
	l->prev = malloc((size_t)cap * sizeof(*l->prev));
	l->next = malloc((size_t)cap * sizeof(*l->next));
	l->slot = malloc(ns * sizeof(*l->slot));
	if (!l->key || !l->prev || !l->next || !l->slot)
		return -ENOMEM;
	memset(l->slot, 0xff, ns * sizeof(*l->slot));
	return 0;
}

static void lru_free(struct lru *l)
{
	free(l->key);
	free(l->prev);
	free(l->next);
	free(l->slot);
}

/* slot holding row, or the empty slot where it would go */
static inline uint64_t lru_find(const struct lru *l, uint64_t row)
{
	uint64_t i = mix64(row) & l->mask;
	while (l->slot[i] != NIL && l->key[l->slot[i]] != row)
		i = (i + 1) & l->mask;
	return i;
}

/* delete slot i, shifting later members of its probe run back (no tombstones) */
static void lru_slot_del(struct lru *l, uint64_t i)
{
	uint64_t j = i;
	for (;;) {
		j = (j + 1) & l->mask;
		if (l->slot[j] == NIL)
			break;
		uint64_t home = mix64(l->key[l->slot[j]]) & l->mask;
		/* move j to i unless home lies cyclically in (i, j] */
		if (i <= j ? (home <= i || home > j) : (home <= i && home > j)) {
			l->slot[i] = l->slot[j];
			i = j;
		}
	}
	l->slot[i] = NIL;
}

static inline void lru_unlink(struct lru *l, uint32_t x)
{
	if (l->prev[x] != NIL)
		l->next[l->prev[x]] = l->next[x];
	else
		l->head = l->next[x];
	if (l->next[x] != NIL)
		l->prev[l->next[x]] = l->prev[x];
	else
		l->tail = l->prev[x];
}

static inline void lru_push_front(struct lru *l, uint32_t x)
{
	l->prev[x] = NIL;
	l->next[x] = l->head;
	if (l->head != NIL)
		l->prev[l->head] = x;
	l->head = x;
	if (l->tail == NIL)
		l->tail = x;
}

/* 1 hit, 0 miss (row now cached, the least recent one evicted if full) */
static int lru_access(struct lru *l, uint64_t row)
{
	uint64_t i = lru_find(l, row);
	uint32_t x = l->slot[i];
	if (x != NIL) {
		if (l->head != x) {
			lru_unlink(l, x);
			lru_push_front(l, x);
		}
		return 1;
	}
	if (l->n < l->cap) {
		x = l->n++;
	} else {
		x = l->tail;
		lru_unlink(l, x);
		lru_slot_del(l, lru_find(l, l->key[x]));
		i = lru_find(l, row); /* the deletion may have moved the empty slot */
	}
	l->key[x] = row;
	l->slot[i] = x;
	lru_push_front(l, x);
	return 0;
}

/* ---- the fake store under the real cache ---- */

struct fake {
	uint64_t fetches;
	uint32_t rs;
};

static int f_fetch(void *ctx, uint32_t table, uint64_t row, void *buf, uint64_t *batch)
{
	struct fake *f = ctx;
	*batch = 1;
	(void)table;
	if (buf) {
		f->fetches++;
		memset(buf, 0, f->rs);
		memcpy(buf, &row, sizeof(row) < f->rs ? sizeof(row) : f->rs);
	}
	return 1; /* every row is stored */
}

static int f_writeback(void *ctx, uint32_t table, const struct cache_wb *rows, size_t n)
{
	(void)ctx, (void)table, (void)rows, (void)n;
	return 0; /* reads only: never called */
}

static const struct cache_ops fake_ops = { .fetch = f_fetch, .writeback = f_writeback };

struct run {
	double miss;     /* % of counted accesses */
	uint64_t rows;   /* rows cached at the end */
	double secs;
};

static int run_clock(const uint64_t *ids, uint64_t warm, uint64_t count, uint64_t bytes, uint32_t shards,
		     uint32_t rs, struct run *out)
{
	struct fake f = { 0, rs };
	struct cache_conf cc = { bytes, 0, shards };
	struct cache *c = cache_create(&cc, &fake_ops, &f);
	char *buf = malloc(rs);
	if (!c || !buf) {
		free(buf);
		if (c)
			cache_destroy(c);
		return -ENOMEM;
	}
	double t = now();
	for (uint64_t i = 0; i < warm + count; i++) {
		if (i == warm)
			f.fetches = 0;
		int r = cache_read(c, 0, rs, ids[i], 0, rs, buf);
		if (r) {
			fprintf(stderr, "missrate: cache_read: %s\n", strerror(-r));
			exit(1);
		}
	}
	out->secs = now() - t;
	struct cache_stats st;
	cache_stats_get(c, -1, &st);
	out->rows = st.rows;
	out->miss = 100.0 * (double)f.fetches / (double)count;
	cache_destroy(c);
	free(buf);
	return 0;
}

static int run_lru(const uint64_t *ids, uint64_t warm, uint64_t count, uint32_t cap, struct run *out)
{
	struct lru l;
	if (lru_init(&l, cap)) {
		lru_free(&l);
		return -ENOMEM;
	}
	uint64_t misses = 0;
	double t = now();
	for (uint64_t i = 0; i < warm; i++)
		lru_access(&l, ids[i]);
	for (uint64_t i = warm; i < warm + count; i++)
		misses += !lru_access(&l, ids[i]);
	out->secs = now() - t;
	out->rows = l.n;
	out->miss = 100.0 * (double)misses / (double)count;
	lru_free(&l);
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: missrate [-n ROWS] [-r ROWSIZE] [-a ACCESSES] [-w WARMUP] [-s SEED] [-z THETA]\n"
		   "                [-p PCT,PCT,...] [-k SHARDS] [-d zipf|uniform|both] [-1]\n"
		   "       missrate -P [-n ROWS]   (print rank 1..6 -> rows, as rowbench -Z does)\n"
		   "  defaults: -n 4000000 -r 256 -a 20000000 -w 5000000 -s 1 -z 0.99\n"
		   "            -p 0.1,0.2,0.5,1,2,5,10 -k 64 (the daemon's shard count)\n"
		   "  -d  which id streams (both)   -1  also run CLOCK with one shard\n");
}


int main(int argc, char **argv)
{
	uint64_t rows = 4000000, rs = 256, count = 20000000, warm = 5000000, seed = 1, shards = CACHE_MAX_SHARDS;
	double theta = 0.99, pct[MAX_PCTS] = { 0.1, 0.2, 0.5, 1, 2, 5, 10 };
	int npct = 7, one_shard = 0, print_perm = 0, d0 = 0, d1 = 2, opt;
	while ((opt = getopt(argc, argv, "n:r:a:w:s:z:p:k:d:1Ph")) != -1) {
		switch (opt) {
		case 'n':
			if (parse_u64(optarg, &rows) || rows == 0 || rows >= NIL)
				goto bad;
			break;
		case 'r':
			if (parse_u64(optarg, &rs) || rs == 0 || rs > (1u << 20))
				goto bad;
			break;
		case 'a':
			if (parse_u64(optarg, &count) || count == 0)
				goto bad;
			break;
		case 'w':
			if (parse_u64(optarg, &warm))
				goto bad;
			break;
		case 's':
			if (parse_u64(optarg, &seed))
				goto bad;
			break;
		case 'z':
			theta = strtod(optarg, NULL);
			if (!(theta > 0) || theta > 10)
				goto bad;
			break;
		case 'p': {
			char *s = optarg, *end;
			npct = 0;
			for (;;) {
				double p = strtod(s, &end);
				if (end == s || !(p > 0) || p > 100 || npct == MAX_PCTS)
					goto bad;
				pct[npct++] = p;
				if (*end == 0)
					break;
				if (*end != ',')
					goto bad;
				s = end + 1;
			}
			break;
		}
		case 'k':
			if (parse_u64(optarg, &shards) || shards == 0 || shards > CACHE_MAX_SHARDS ||
			    (shards & (shards - 1)))
				goto bad;
			break;
		case 'd':
			if (!strcmp(optarg, "zipf"))
				d0 = 0, d1 = 1;
			else if (!strcmp(optarg, "uniform"))
				d0 = 1, d1 = 2;
			else if (!strcmp(optarg, "both"))
				d0 = 0, d1 = 2;
			else
				goto bad;
			break;
		case '1': one_shard = 1; break;
		case 'P': print_perm = 1; break;
		case 'h': usage(stdout); return 0;
		default: goto bad;
		}
	}
	if (optind != argc)
		goto bad;

	struct perm pm;
	perm_init(&pm, rows);
	if (print_perm) {
		printf("  rank 1..6 -> rows");
		for (uint64_t k = 0; k < 6 && k < rows; k++)
			printf(" %llu", (unsigned long long)perm_row(&pm, k));
		printf("\n");
		return 0;
	}

	uint64_t total = warm + count;
	uint64_t *ids = malloc(total * sizeof(*ids));
	if (!ids) {
		fprintf(stderr, "missrate: cannot allocate %llu ids\n", (unsigned long long)total);
		return 1;
	}
	const uint64_t row_cost = rs + CACHE_ROW_OVERHEAD;
	printf("missrate: %llu rows x %llu B (%llu B per cached row), %llu warm-up + %llu counted accesses,"
	       " CLOCK with %llu shards (the daemon's default is %u)\n",
	       (unsigned long long)rows, (unsigned long long)rs, (unsigned long long)row_cost,
	       (unsigned long long)warm, (unsigned long long)count, (unsigned long long)shards,
	       CACHE_MAX_SHARDS);
	printf("%-8s %6s %10s %8s %8s %s%8s %s\n", "ids", "size%", "rows", "CLOCK%", "LRU%",
	       one_shard ? "CLOCK1sh% " : "", "CLOCK-LRU", "");
	double t_all = now();
	int flagged = 0, nlines = 0;
	static char lines[2 * MAX_PCTS][LINE_MAX_B];
	for (int d = d0; d < d1; d++) {
		const char *dist = d == 0 ? "zipf" : "uniform";
		struct zipf z;
		struct rng r;
		zipf_init(&z, rows, theta);
		rng_seed(&r, seed * 1000003 + (uint64_t)d);
		for (uint64_t i = 0; i < total; i++) {
			uint64_t rank0 = d == 0 ? zipf_next(&z, &r) - 1
						: (uint64_t)(((unsigned __int128)rng_next(&r) * rows) >> 64);
			ids[i] = perm_row(&pm, rank0);
		}
		for (int k = 0; k < npct; k++) {
			uint64_t bytes = (uint64_t)(pct[k] / 100.0 * (double)rows * (double)row_cost);
			uint64_t cap = shards * (bytes / shards / row_cost);
			struct run rc, rl, r1 = { 0 };
			if (cap == 0 || run_clock(ids, warm, count, bytes, (uint32_t)shards, (uint32_t)rs, &rc) ||
			    run_lru(ids, warm, count, (uint32_t)cap, &rl) ||
			    (one_shard && run_clock(ids, warm, count, bytes, 1, (uint32_t)rs, &r1))) {
				fprintf(stderr, "missrate: %s %.1f%%: cache of %llu rows failed\n", dist, pct[k],
					(unsigned long long)cap);
				return 1;
			}
			double diff = rc.miss - rl.miss;
			int flag = diff > FLAG_POINTS;
			flagged += flag;
			char c1[32] = "";
			if (one_shard)
				snprintf(c1, sizeof(c1), "%9.2f ", r1.miss);
			printf("%-8s %6.1f %10llu %8.2f %8.2f %s%+8.2f %s%s\n", dist, pct[k], (unsigned long long)cap,
			       rc.miss, rl.miss, c1, diff, flag ? "! CLOCK > LRU + 2 points" : "",
			       rc.rows < cap ? " (CLOCK not full)" : "");
			fflush(stdout);
			char *line = lines[nlines++];
			int n = snprintf(line, LINE_MAX_B,
					 "missrate dist=%s pct=%g rows=%llu clock_rows=%llu clock=%.2f lru=%.2f", dist,
					 pct[k], (unsigned long long)cap, (unsigned long long)rc.rows, rc.miss, rl.miss);
			if (one_shard)
				n += snprintf(line + n, LINE_MAX_B - (size_t)n, " clock1=%.2f", r1.miss);
			snprintf(line + n, LINE_MAX_B - (size_t)n, " diff=%.2f flag=%d clock_s=%.2f lru_s=%.2f",
				 diff, flag, rc.secs, rl.secs);
		}
	}
	printf("%d point(s) where CLOCK misses > %.0f points more than LRU; %.1f s\n", flagged, FLAG_POINTS,
	       now() - t_all);
	for (int i = 0; i < nlines; i++)
		printf("%s\n", lines[i]);
	free(ids);
	return 0;
bad:
	usage(stderr);
	return 1;
}
