/*
 * Unit tests of cache_read_rows() and cache_write_rows() (the batch path)
 * against a fake store: they must give exactly what the same cache_read() /
 * cache_write() calls in order would, with duplicates (the last write wins),
 * holes, rows not cached, a cache far smaller than a batch (evictions and
 * bypasses), reservations that balance, several threads at once, and the
 * presence bits (a hole a pin loaded into the cache is still a hole); and
 * cache_read_range() (scans: cached rows served, the rest fetched in one
 * call and not cached).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embfs/cache.h"
#include "helpers.h"


#define RS 128
#define NROWS 50000

/* The fake store: table 3 only; even rows stored, odd rows holes. */
static struct {
	pthread_mutex_t lock;
	uint8_t rows[NROWS][RS];
	uint8_t stored[NROWS];
	_Atomic long reserved;
	_Atomic long asked; /* reserve(delta > 0) calls */
} F;

static int f_fetch(void *ctx, uint32_t table, uint64_t row, void *buf, uint64_t *batch)
{
	(void)ctx;
	CHECK(table == 3 && row < NROWS && *batch == 0);
	pthread_mutex_lock(&F.lock);
	int st = F.stored[row];
	*batch = 1;
	if (buf && st)
		memcpy(buf, F.rows[row], RS);
	else if (buf)
		memset(buf, 0, RS);
	pthread_mutex_unlock(&F.lock);
	return st;
}

static int f_writeback(void *ctx, uint32_t table, const struct cache_wb *rows, size_t n)
{
	(void)ctx;
	CHECK(table == 3);
	pthread_mutex_lock(&F.lock);
	for (size_t i = 0; i < n; i++) {
		memcpy(F.rows[rows[i].row], rows[i].data, RS);
		F.stored[rows[i].row] = 1;
	}
	pthread_mutex_unlock(&F.lock);
	return 0;
}

static int f_reserve(void *ctx, uint32_t table, uint32_t rs, int delta)
{
	(void)ctx;
	(void)table;
	CHECK(rs == RS);
	F.reserved += delta;
	F.asked += delta > 0;
	return 0;
}

static const struct cache_ops OPS = { .fetch = f_fetch, .writeback = f_writeback, .reserve = f_reserve };

/* fetch_range: the rows not skipped, counted; the last call's skip mask */
static struct {
	long calls, rows, masked;
} R;

static int f_fetch_range(void *ctx, uint32_t table, uint64_t first, size_t n, void *buf, const uint8_t *skip,
			 uint8_t *stored)
{
	(void)ctx;
	CHECK(table == 3 && first + n <= NROWS);
	R.calls++;
	R.masked += skip != NULL;
	pthread_mutex_lock(&F.lock);
	for (size_t i = 0; i < n; i++) {
		if (skip && skip[i])
			continue;
		memcpy((uint8_t *)buf + i * RS, F.rows[first + i], RS);
		if (stored)
			stored[i] = F.stored[first + i];
		R.rows++;
	}
	pthread_mutex_unlock(&F.lock);
	return 0;
}

static const struct cache_ops OPS_RANGE = { .fetch = f_fetch, .fetch_range = f_fetch_range, .writeback = f_writeback,
					    .reserve = f_reserve };

static uint8_t shadow[NROWS][RS]; /* what every row must read as */

static void reset(void)
{
	memset(&F, 0, sizeof(F));
	pthread_mutex_init(&F.lock, NULL);
	for (int r = 0; r < NROWS; r++) {
		F.stored[r] = !(r & 1);
		memset(F.rows[r], F.stored[r] ? (uint8_t)(r * 7 + 1) : 0, RS);
		memcpy(shadow[r], F.rows[r], RS);
	}
}

static uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* ids in [lo, lo + span): skewed (a third repeat a small hot set) */
static void ids_fill(uint64_t *ids, size_t n, uint64_t *seed, uint64_t lo, uint64_t span)
{
	for (size_t i = 0; i < n; i++)
		ids[i] = lo + (rnd(seed) % 3 == 0 ? rnd(seed) % 64 : rnd(seed) % span);
}

static void check_read(struct cache *c, const uint64_t *ids, size_t n)
{
	uint8_t *buf = malloc(n * RS);
	CHECK(buf && cache_read_rows(c, 3, RS, ids, n, buf, NULL) == 0);
	for (size_t i = 0; i < n; i++)
		CHECK(!memcmp(buf + i * RS, shadow[ids[i]], RS));
	free(buf);
}

/* rows with distinct contents per (id, position, salt), applied to the shadow
 * in order; with credit for n rows on odd salts (as fs/batch.c), none on even */
static void do_write(struct cache *c, const uint64_t *ids, size_t n, uint64_t salt, uint64_t batch)
{
	uint8_t *buf = malloc(n * RS);
	CHECK(buf);
	for (size_t i = 0; i < n; i++) {
		memset(buf + i * RS, (int)((ids[i] + i + salt) & 0xff), RS);
		memcpy(buf + i * RS, &i, sizeof(i));
	}
	int64_t credit = (int64_t)n;
	long asked = F.asked;
	if (salt & 1)
		F.reserved += credit;
	CHECK(cache_write_rows(c, 3, RS, ids, n, buf, batch, salt & 1 ? &credit : NULL) == 0);
	if (salt & 1) {
		F.reserved -= credit;
		CHECK(F.asked == asked && credit >= 0); /* the credit paid for every row */
	}
	for (size_t i = 0; i < n; i++)
		memcpy(shadow[ids[i]], buf + i * RS, RS);
	free(buf);
}

static void check_store_after_flush(struct cache *c)
{
	CHECK(cache_flush(c, -1) == 0);
	for (int r = 0; r < NROWS; r++)
		CHECK(!memcmp(F.rows[r], shadow[r], RS));
	CHECK(F.reserved == 0);
}

/* big cache: rows end up cached; read and write batches against the shadow.
 * bytes 0: room for every row; 512 MiB: arena chunks and (with one shard)
 * entries on the huge-page mappings of rows.c. */
static void test_big(uint32_t shards, uint64_t bytes)
{
	reset();
	struct cache_conf cc = { bytes ? bytes : (uint64_t)NROWS * (RS + CACHE_ROW_OVERHEAD), 0, shards };
	struct cache *c = cache_create(&cc, &OPS, NULL);
	CHECK(c);
	uint64_t seed = shards, ids[4096];
	for (int round = 0; round < 20; round++) {
		ids_fill(ids, 4096, &seed, 0, NROWS);
		check_read(c, ids, 4096);
		ids_fill(ids, 4096, &seed, 0, NROWS);
		do_write(c, ids, 4096, (uint64_t)round, 1);
		check_read(c, ids, 4096);
		/* the same rows one at a time agree */
		uint8_t one[RS];
		for (int i = 0; i < 64; i++) {
			CHECK(cache_read(c, 3, RS, ids[i], 0, RS, one) == 0);
			CHECK(!memcmp(one, shadow[ids[i]], RS));
		}
	}
	struct cache_stats st;
	cache_stats_get(c, 3, &st);
	CHECK(st.hits > 0 && st.misses > 0);
	check_store_after_flush(c);
	cache_destroy(c);
}

/* a cache of 64 rows against batches of 4096: evictions, write-backs, bypasses */
static void test_small(void)
{
	reset();
	struct cache_conf cc = { 64 * (RS + CACHE_ROW_OVERHEAD), 0, 4 };
	struct cache *c = cache_create(&cc, &OPS, NULL);
	CHECK(c);
	uint64_t seed = 99, ids[4096];
	for (int round = 0; round < 10; round++) {
		ids_fill(ids, 4096, &seed, 0, 5000);
		do_write(c, ids, 4096, 1000 + (uint64_t)round, 1);
		ids_fill(ids, 4096, &seed, 0, 5000);
		check_read(c, ids, 4096);
	}
	check_store_after_flush(c);
	cache_destroy(c);
}

/* one row many times in one batch: the last occurrence wins, cached or not */
static void test_dups(void)
{
	reset();
	struct cache_conf cc = { 1000 * (RS + CACHE_ROW_OVERHEAD), 0, 0 };
	struct cache *c = cache_create(&cc, &OPS, NULL);
	CHECK(c);
	uint64_t ids[8] = { 5, 6, 5, 5, 6, 7, 8, 5 };
	do_write(c, ids, 8, 1, 1);   /* 5, 6 not cached yet */
	check_read(c, ids, 8);
	do_write(c, ids, 8, 2, 1);   /* now cached */
	check_read(c, ids, 8);
	uint64_t one = 6;
	check_read(c, &one, 1);
	check_store_after_flush(c);
	cache_destroy(c);
}

struct worker {
	struct cache *c;
	uint64_t lo;
	int err;
	int rounds; /* done */
};

/* each thread writes and reads its own range; reads of the shared hot rows
 * (64 ids below its range start are another thread's) are not checked */
static void *work(void *arg)
{
	struct worker *w = arg;
	uint64_t seed = w->lo, ids[2048];
	uint8_t *buf = malloc(2048 * RS);
	if (!buf) {
		w->err = 1; /* not a pass that did nothing */
		return NULL;
	}
	for (int round = 0; round < 50; round++) {
		ids_fill(ids, 2048, &seed, w->lo, 10000);
		for (size_t i = 0; i < 2048; i++)
			memset(buf + i * RS, (int)((ids[i] + (uint64_t)round) & 0xff), RS);
		if (cache_write_rows(w->c, 3, RS, ids, 2048, buf, 1, NULL))
			w->err = 1;
		w->rounds++;
		for (size_t i = 0; i < 2048; i++)
			memcpy(shadow[ids[i]], buf + i * RS, RS);
		if (cache_read_rows(w->c, 3, RS, ids, 2048, buf, NULL))
			w->err = 1;
		for (size_t i = 0; i < 2048; i++)
			if (memcmp(buf + i * RS, shadow[ids[i]], RS))
				w->err = 1;
	}
	free(buf);
	return NULL;
}

static void test_threads(void)
{
	reset();
	struct cache_conf cc = { 8000 * (RS + CACHE_ROW_OVERHEAD), 5, 8 }; /* flusher every few ms */
	struct cache *c = cache_create(&cc, &OPS, NULL);
	CHECK(c);
	struct worker w[4];
	pthread_t t[4];
	for (int i = 0; i < 4; i++) {
		w[i] = (struct worker){ c, (uint64_t)i * 12000, 0, 0 };
		CHECK(pthread_create(&t[i], NULL, work, &w[i]) == 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		CHECK(!w[i].err && w[i].rounds == 50);
	}
	check_store_after_flush(c);
	cache_destroy(c);
}

/* present[]: stored rows and written ones 1, holes 0, also a hole that a
 * prefetch pin brought into the cache (until it is written) */
static void test_present(void)
{
	reset();
	struct cache_conf cc = { 1000 * (RS + CACHE_ROW_OVERHEAD), 0, 0 };
	struct cache *c = cache_create(&cc, &OPS, NULL);
	CHECK(c);
	CHECK(cache_pin(c, 3, RS, 11) == 0); /* a hole */
	CHECK(cache_pin(c, 3, RS, 12) == 0); /* stored */
	uint64_t ids[6] = { 11, 12, 13, 14, 11, 12 };
	uint8_t want[6] = { 0, 1, 0, 1, 0, 1 }, got[6], buf[6 * RS];
	for (int round = 0; round < 2; round++) { /* misses, then hits */
		memset(got, 0xee, sizeof(got));
		CHECK(cache_read_rows(c, 3, RS, ids, 6, buf, got) == 0);
		for (int i = 0; i < 6; i++)
			CHECK(got[i] == want[i] && !memcmp(buf + i * RS, shadow[ids[i]], RS));
	}
	uint64_t w[2] = { 11, 13 };
	do_write(c, w, 2, 7, 1);
	want[0] = want[2] = want[4] = 1;
	CHECK(cache_read_rows(c, 3, RS, ids, 6, buf, got) == 0);
	for (int i = 0; i < 6; i++)
		CHECK(got[i] == want[i] && !memcmp(buf + i * RS, shadow[ids[i]], RS));
	cache_unpin(c, 3, 11);
	cache_unpin(c, 3, 12);
	check_store_after_flush(c);
	CHECK(cache_read_rows(c, 3, RS, ids, 6, buf, got) == 0);
	for (int i = 0; i < 6; i++)
		CHECK(got[i] == want[i]);
	cache_destroy(c);
}

/* cache_drop_rows: the named rows go (a read fetches the store's bytes
 * again), others stay cached; dirty rows dropped give their promises back. */
static void test_drop_rows(void)
{
	reset();
	struct cache_conf cc = { 1000 * (RS + CACHE_ROW_OVERHEAD), 0, 0 };
	struct cache *c = cache_create(&cc, &OPS, NULL);
	CHECK(c);
	uint64_t ids[4] = { 20, 22, 24, 25 };
	uint8_t buf[4 * RS];
	CHECK(cache_read_rows(c, 3, RS, ids, 4, buf, NULL) == 0); /* 20, 22, 24 cached */
	uint64_t w[1] = { 25 };
	do_write(c, w, 1, 9, 1); /* 25 dirty: a promise held */
	long held = F.reserved;
	CHECK(held > 0);
	/* the store changes behind the cache, as a restore changes it */
	pthread_mutex_lock(&F.lock);
	memset(F.rows[22], 0x5a, RS);
	memset(F.rows[24], 0x5b, RS);
	pthread_mutex_unlock(&F.lock);
	uint64_t drop[3] = { 22, 25, 9999 }; /* 9999: not cached */
	cache_drop_rows(c, 3, drop, 3);
	CHECK(F.reserved == held - 1);
	CHECK(cache_read_rows(c, 3, RS, ids, 4, buf, NULL) == 0);
	CHECK(buf[1 * RS] == 0x5a);         /* dropped: the store's new bytes */
	CHECK(buf[2 * RS] == shadow[24][0]); /* still cached: the old copy */
	CHECK(buf[3 * RS] == 0);            /* 25's write is gone: a hole again */
	cache_destroy(c);
}

/* cache_read_range: what cache_read_rows() of the same rows gives (dirty
 * rows from the cache, the rest from below, presence bits), in one
 * fetch_range call for the rows not cached (no mask when the table has
 * none cached), caching none of them; without fetch_range, as
 * cache_read_rows(). */
static void test_range(void)
{
	reset();
	memset(&R, 0, sizeof(R));
	struct cache_conf cc = { 4000 * (RS + CACHE_ROW_OVERHEAD), 0, 0 };
	struct cache *c = cache_create(&cc, &OPS_RANGE, NULL);
	CHECK(c);
	static uint8_t buf[6000 * RS], got[6000];
	struct cache_stats st0, st1;
	/* nothing cached: one call, no mask, nothing cached after */
	memset(got, 0xee, sizeof(got));
	CHECK(cache_read_range(c, 3, RS, 100, 5000, buf, got) == 0);
	for (int i = 0; i < 5000; i++)
		CHECK(!memcmp(buf + i * RS, shadow[100 + i], RS) && got[i] == F.stored[100 + i]);
	cache_stats_get(c, 3, &st0);
	CHECK(R.calls == 1 && R.masked == 0 && R.rows == 5000 && st0.rows == 0 && st0.scan_misses == 5000);
	/* rows written (dirty: newer than below) and rows read into the cache */
	uint64_t w[] = { 101, 102, 2000, 2001, 5099, 7 }, rd[] = { 300, 301, 302 };
	do_write(c, w, 6, 3, 1);
	check_read(c, rd, 3);
	cache_stats_get(c, 3, &st0);
	memset(&R, 0, sizeof(R));
	memset(got, 0xee, sizeof(got));
	CHECK(cache_read_range(c, 3, RS, 100, 5000, buf, got) == 0);
	for (int i = 0; i < 5000; i++) {
		int written = 100 + i == 101 || 100 + i == 102 || 100 + i == 2000 || 100 + i == 2001 || 100 + i == 5099;
		CHECK(!memcmp(buf + i * RS, shadow[100 + i], RS));
		CHECK(got[i] == (written ? 1 : F.stored[100 + i]));
	}
	cache_stats_get(c, 3, &st1);
	/* cached: the 5 written, and 300, 302 (a read caches no hole) */
	CHECK(R.calls == 1 && R.masked == 1 && R.rows == 5000 - 7);
	CHECK(st1.rows == st0.rows && st1.hits == st0.hits + 7 && st1.scan_misses == st0.scan_misses + 4993);
	/* no row to fetch: no call */
	memset(&R, 0, sizeof(R));
	CHECK(cache_read_range(c, 3, RS, 101, 2, buf, NULL) == 0 && R.calls == 0);
	CHECK(!memcmp(buf, shadow[101], 2 * RS));
	check_store_after_flush(c);
	cache_destroy(c);
	/* without fetch_range: cache_read_rows() (which caches what it reads) */
	reset();
	c = cache_create(&cc, &OPS, NULL);
	CHECK(c && cache_read_range(c, 3, RS, 10, 1000, buf, got) == 0);
	for (int i = 0; i < 1000; i++)
		CHECK(!memcmp(buf + i * RS, shadow[10 + i], RS) && got[i] == F.stored[10 + i]);
	cache_stats_get(c, 3, &st1);
	CHECK(st1.rows > 0 && st1.scan_misses == 0);
	cache_destroy(c);
}

int main(void)
{
	test_range();
	test_drop_rows();
	test_present();
	test_big(0, 0);
	test_big(1, 0);
	test_big(0, 512ull << 20);
	test_big(1, 512ull << 20);
	test_small();
	test_dups();
	test_threads();
	printf("test_cache_rows: ok\n");
	return 0;
}
