/*
 * Unit tests of cache/ against a fake store (an array of rows in DRAM that
 * counts fetches, write-backs and reservations): hits and misses, CLOCK
 * eviction order, dirty write-back at flush/eviction/age, drop, pinning and
 * bypass, space reservations, per-row overhead, and many threads at once
 * (run it under make SANITIZER=thread too).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "embfs/cache.h"
#include "helpers.h"


#define RS 256
#define NROWS 20000

/* The fake store: table 0 only. */
struct fake {
	pthread_mutex_t lock;
	uint8_t rows[NROWS][RS];
	uint8_t stored[NROWS];
	_Atomic long fetches, probes, writebacks, wb_calls;
	_Atomic long reserved;
	long reserve_limit; /* -1: unlimited */
	uint64_t batch_of[NROWS]; /* batch of the last version written back */
	long versions;
	int fail_writeback;
};

static struct fake F;

static int f_fetch(void *ctx, uint32_t table, uint64_t row, void *buf, uint64_t *batch)
{
	(void)batch; /* unknown: the cache takes any snapshot to hold it */
	struct fake *f = ctx;
	CHECK(table == 0 && row < NROWS);
	if (!buf) {
		f->probes++;
		return f->stored[row];
	}
	f->fetches++;
	pthread_mutex_lock(&f->lock);
	int st = f->stored[row];
	if (st)
		memcpy(buf, f->rows[row], RS);
	else
		memset(buf, 0, RS);
	pthread_mutex_unlock(&f->lock);
	return st;
}

static int f_writeback(void *ctx, uint32_t table, const struct cache_wb *rows, size_t n)
{
	struct fake *f = ctx;
	CHECK(table == 0);
	if (f->fail_writeback)
		return -EIO;
	pthread_mutex_lock(&f->lock);
	for (size_t i = 0; i < n; i++) {
		CHECK(rows[i].row < NROWS);
		CHECK(rows[i].batch >= f->batch_of[rows[i].row]); /* never back in batch order */
		f->batch_of[rows[i].row] = rows[i].batch;
		f->versions++;
		memcpy(f->rows[rows[i].row], rows[i].data, RS);
		f->stored[rows[i].row] = 1;
	}
	pthread_mutex_unlock(&f->lock);
	f->writebacks += (long)n;
	f->wb_calls++;
	return 0;
}

static int f_reserve(void *ctx, uint32_t table, uint32_t rs, int delta)
{
	struct fake *f = ctx;
	(void)table;
	CHECK(rs == RS);
	if (delta > 0 && f->reserve_limit >= 0 && f->reserved + delta > f->reserve_limit)
		return -ENOSPC;
	f->reserved += delta;
	return 0;
}

static const struct cache_ops OPS = { .fetch = f_fetch, .writeback = f_writeback, .reserve = f_reserve };

static void reset(void)
{
	pthread_mutex_destroy(&F.lock);
	memset(&F, 0, sizeof(F));
	pthread_mutex_init(&F.lock, NULL);
	F.reserve_limit = -1;
	for (int r = 0; r < NROWS; r++)
		memset(F.rows[r], (uint8_t)r, RS);
	for (int r = 0; r < NROWS; r += 2)
		F.stored[r] = 1; /* odd rows are holes */
}

static struct cache *mk(uint64_t rows_budget, uint32_t shards, uint32_t age)
{
	struct cache_conf cc = { rows_budget * (RS + CACHE_ROW_OVERHEAD), age, shards };
	struct cache *c = cache_create(&cc, &OPS, &F);
	CHECK(c);
	return c;
}

static void rd(struct cache *c, uint64_t row, uint8_t *buf)
{
	CHECK(cache_read(c, 0, RS, row, 0, RS, buf) == 0);
}

static void test_hits(void)
{
	reset();
	struct cache *c = mk(100, 1, 0);
	uint8_t b[RS];
	rd(c, 4, b);
	CHECK(b[0] == 4 && F.fetches == 1);
	rd(c, 4, b);
	CHECK(F.fetches == 1);
	rd(c, 5, b); /* a hole: zeros, and not cached */
	CHECK(b[7] == 0 && F.fetches == 2);
	rd(c, 5, b);
	CHECK(F.fetches == 3);
	struct cache_stats st;
	cache_stats_get(c, 0, &st);
	CHECK(st.hits == 1 && st.misses == 3 && st.rows == 1);
	CHECK(cache_read(c, 0, RS, 4, 200, 100, b) == -EINVAL);
	cache_destroy(c);
}

/* CLOCK with one shard of 8 rows: second chance for referenced rows. */
static void test_clock(void)
{
	reset();
	struct cache *c = mk(8, 1, 0);
	uint8_t b[RS];
	for (int r = 0; r < 16; r += 2)
		rd(c, (uint64_t)r, b); /* rows 0..14 even: 8 rows, all referenced */
	CHECK(F.fetches == 8);
	rd(c, 16, b); /* sweep clears every bit, evicts row 0 */
	rd(c, 2, b);  /* still cached */
	CHECK(F.fetches == 9);
	rd(c, 0, b);  /* was evicted; now row 4 goes (2 was referenced again) */
	CHECK(F.fetches == 10);
	rd(c, 2, b);
	CHECK(F.fetches == 10);
	rd(c, 4, b);
	CHECK(F.fetches == 11);
	struct cache_stats st;
	cache_stats_get(c, -1, &st);
	CHECK(st.evictions == 3 && st.rows == 8);
	cache_destroy(c);
}

static void test_writeback(void)
{
	reset();
	struct cache *c = mk(100, 1, 0);
	uint8_t w[RS], b[RS];
	memset(w, 0xEE, RS);
	CHECK(cache_write(c, 0, RS, 10, 0, RS, w, 1, NULL) == 0); /* full row: no fetch, a probe */
	CHECK(F.fetches == 0 && F.probes == 1);
	CHECK(cache_write(c, 0, RS, 12, 100, 4, w, 1, NULL) == 0); /* partial: base fetched */
	CHECK(F.fetches == 1);
	CHECK(cache_write(c, 0, RS, 13, 0, 4, w, 1, NULL) == 0);   /* partial on a hole */
	CHECK(F.reserved == 1);                          /* only row 13 was a hole */
	CHECK(F.rows[10][0] == 10 && F.writebacks == 0); /* write-back, not through */
	rd(c, 12, b);
	CHECK(b[99] == 12 && b[100] == 0xEE && b[103] == 0xEE && b[104] == 12);
	struct cache_stats st;
	cache_stats_get(c, 0, &st);
	CHECK(st.dirty == 3 && st.new_dirty == 1);
	CHECK(cache_flush(c, 0) == 0);
	CHECK(F.writebacks == 3 && F.wb_calls == 1); /* one group */
	CHECK(F.rows[10][5] == 0xEE && F.rows[12][100] == 0xEE && F.rows[12][99] == 12);
	CHECK(F.stored[13] && F.rows[13][3] == 0xEE && F.rows[13][4] == 0);
	CHECK(F.reserved == 0);
	cache_stats_get(c, 0, &st);
	CHECK(st.dirty == 0 && st.writebacks == 3);
	CHECK(cache_flush(c, -1) == 0 && F.writebacks == 3); /* nothing left */

	/* a failed write-back keeps rows dirty; the error reaches flush */
	CHECK(cache_write(c, 0, RS, 10, 0, 1, w, 1, NULL) == 0);
	F.fail_writeback = 1;
	CHECK(cache_flush(c, 0) == -EIO);
	cache_stats_get(c, 0, &st);
	CHECK(st.dirty == 1);
	F.fail_writeback = 0;
	CHECK(cache_flush(c, 0) == 0 && F.writebacks == 4);

	/* drop discards dirty rows without writing them */
	CHECK(cache_write(c, 0, RS, 14, 0, RS, w, 1, NULL) == 0);
	CHECK(cache_write(c, 0, RS, 15, 0, RS, w, 1, NULL) == 0);
	cache_drop(c, 0, 15, 16);
	CHECK(F.reserved == 0);
	CHECK(cache_flush(c, 0) == 0 && F.writebacks == 5 && !F.stored[15]);
	rd(c, 15, b);
	CHECK(b[0] == 0); /* a hole in the store again */
	cache_destroy(c);
}

/* Evicting dirty rows writes them back first; nothing is lost. */
static void test_evict_dirty(void)
{
	reset();
	struct cache *c = mk(64, 1, 0);
	uint8_t w[RS], b[RS];
	for (int r = 0; r < 1000; r++) {
		memset(w, (uint8_t)(r * 3), RS);
		CHECK(cache_write(c, 0, RS, (uint64_t)r, 0, RS, w, 1, NULL) == 0);
	}
	CHECK(F.writebacks >= 1000 - 64);
	for (int r = 0; r < 1000; r++) {
		rd(c, (uint64_t)r, b);
		CHECK(b[0] == (uint8_t)(r * 3) && b[RS - 1] == (uint8_t)(r * 3));
	}
	CHECK(cache_flush(c, -1) == 0);
	for (int r = 0; r < 1000; r++)
		CHECK(F.rows[r][17] == (uint8_t)(r * 3));
	CHECK(F.reserved == 0);
	cache_destroy(c);
}

/* Pinned rows stay; a shard full of pins serves by bypassing. */
static void test_pin(void)
{
	reset();
	struct cache *c = mk(16, 1, 0);
	uint8_t w[RS], b[RS];
	for (int r = 0; r < 16; r++)
		CHECK(cache_pin(c, 0, RS, (uint64_t)r) == 0);
	CHECK(cache_pin(c, 0, RS, 100) == -ENOSPC);
	long f0 = F.fetches;
	rd(c, 200, b); /* bypass: fetched, not cached */
	rd(c, 200, b);
	CHECK(F.fetches == f0 + 2 && b[0] == 200);
	memset(w, 0x5A, RS);
	CHECK(cache_write(c, 0, RS, 300, 0, RS, w, 1, NULL) == 0); /* write-through */
	CHECK(F.stored[300] && F.rows[300][0] == 0x5A);
	CHECK(cache_write(c, 0, RS, 3, 0, RS, w, 1, NULL) == 0); /* pinned rows take writes */
	struct cache_stats st;
	cache_stats_get(c, -1, &st);
	CHECK(st.pinned == 16 && st.bypasses >= 3 && st.dirty == 1);
	CHECK(cache_flush(c, -1) == 0 && F.rows[3][0] == 0x5A);
	for (int r = 0; r < 16; r++)
		cache_unpin(c, 0, (uint64_t)r);
	CHECK(cache_pin(c, 0, RS, 100) == 0);
	cache_unpin(c, 0, 100);
	cache_stats_get(c, -1, &st);
	CHECK(st.pinned == 0);
	for (int r = 1000; r < 1100; r++)
		rd(c, (uint64_t)r, b);
	cache_stats_get(c, -1, &st);
	CHECK(st.rows <= 16);
	cache_destroy(c);
}

/* A write that needs room the store refuses changes nothing. */
static void test_reserve(void)
{
	reset();
	struct cache *c = mk(100, 1, 0);
	uint8_t w[RS], b[RS];
	memset(w, 1, RS);
	F.reserve_limit = 2;
	CHECK(cache_write(c, 0, RS, 1, 0, RS, w, 1, NULL) == 0);
	CHECK(cache_write(c, 0, RS, 3, 0, RS, w, 1, NULL) == 0);
	CHECK(cache_write(c, 0, RS, 5, 0, RS, w, 1, NULL) == -ENOSPC);
	CHECK(cache_write(c, 0, RS, 2, 0, RS, w, 1, NULL) == 0); /* stored below: no room needed */
	rd(c, 5, b);
	CHECK(b[0] == 0);
	CHECK(cache_flush(c, 0) == 0 && F.reserved == 0 && !F.stored[5]);
	CHECK(cache_write(c, 0, RS, 5, 0, RS, w, 1, NULL) == 0);
	cache_destroy(c);
}

/* A row dirty when a snapshot is taken keeps its bytes for the snapshot:
 * written again in a later batch, the old bytes are written back first, as
 * a version of their own batch. */
static void test_preserve(void)
{
	reset();
	struct cache *c = mk(100, 1, 0);
	uint8_t w[RS];
	memset(w, 1, RS);
	CHECK(cache_write(c, 0, RS, 8, 0, RS, w, 5, NULL) == 0);
	cache_set_snapshot(c, 5); /* a snapshot closes batch 5 */
	memset(w, 2, RS);
	CHECK(cache_write(c, 0, RS, 8, 0, RS, w, 6, NULL) == 0);
	CHECK(F.reserved == 1); /* room promised for the extra version */
	memset(w, 3, RS);
	CHECK(cache_write(c, 0, RS, 8, 0, RS, w, 6, NULL) == 0); /* same batch: nothing more kept */
	cache_set_snapshot(c, 6);
	memset(w, 4, RS);
	CHECK(cache_write(c, 0, RS, 8, 0, RS, w, 7, NULL) == 0);
	CHECK(cache_flush(c, 0) == 0);
	CHECK(F.versions == 3 && F.batch_of[8] == 7 && F.rows[8][0] == 4);
	CHECK(F.reserved == 0);
	/* a row that was a hole below stops counting as new once a preserved
	 * version of it is written back, even before its own write-back */
	struct cache_stats st;
	memset(w, 6, RS);
	CHECK(cache_write(c, 0, RS, 9, 0, RS, w, 7, NULL) == 0); /* row 9: a hole below */
	cache_set_snapshot(c, 7);
	memset(w, 7, RS);
	CHECK(cache_write(c, 0, RS, 9, 0, RS, w, 8, NULL) == 0);
	cache_stats_get(c, 0, &st);
	CHECK(st.new_dirty == 1 && st.dirty == 1);
	cache_drop(c, 0, 1000, 1001); /* writes the preserved versions back first */
	CHECK(F.stored[9] && F.rows[9][0] == 6);
	cache_stats_get(c, 0, &st);
	CHECK(st.new_dirty == 0 && st.dirty == 1);
	CHECK(cache_flush(c, 0) == 0 && F.rows[9][0] == 7 && F.reserved == 0);
	cache_stats_get(c, 0, &st);
	CHECK(st.new_dirty == 0 && st.dirty == 0);
	/* clean rows need no copy: the store keeps the old version itself */
	long v0 = F.versions;
	memset(w, 5, RS);
	cache_set_snapshot(c, 8);
	CHECK(cache_write(c, 0, RS, 8, 0, RS, w, 9, NULL) == 0);
	CHECK(cache_flush(c, 0) == 0 && F.versions == v0 + 1);
	cache_destroy(c);
}

/* The flusher writes rows back once they are dirty_age_ms old. */
static void test_age(void)
{
	reset();
	struct cache *c = mk(100, 4, 40);
	uint8_t w[RS];
	memset(w, 9, RS);
	CHECK(cache_write(c, 0, RS, 7, 0, RS, w, 1, NULL) == 0);
	struct timespec t0, t1, d = { 0, 2000000 };
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < 2500 && F.writebacks == 0; i++)
		nanosleep(&d, NULL); /* waits for the condition, bounded at ~5 s */
	clock_gettime(CLOCK_MONOTONIC, &t1);
	CHECK(F.writebacks == 1 && F.rows[7][0] == 9);
	printf("  a dirty row reached the store after %.0f ms (dirty_age_ms 40)\n",
	       (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
	cache_destroy(c);
}

/* Entry and bucket bytes per cached row, measured. */
static void test_overhead(void)
{
	reset();
	struct cache *c = mk(10000, 0, 0);
	uint8_t b[RS];
	for (int r = 0; r < NROWS; r += 2)
		rd(c, (uint64_t)r, b);
	struct cache_stats st;
	cache_stats_get(c, -1, &st);
	double per = (double)st.meta_bytes / (double)st.rows;
	printf("  %llu rows cached, %.1f bytes of entry+bucket per row (limit %u), %llu of %llu bytes used\n",
	       (unsigned long long)st.rows, per, CACHE_ROW_OVERHEAD, (unsigned long long)st.bytes,
	       (unsigned long long)st.budget);
	CHECK(per <= CACHE_ROW_OVERHEAD);
	CHECK(st.bytes <= st.budget);
	cache_destroy(c);
}

/* Threads each own rows r % 4 == k; readers of all rows run alongside. */
struct worker {
	struct cache *c;
	int k;
	uint8_t model[NROWS / 4][RS];
};

static void *work(void *arg)
{
	struct worker *w = arg;
	unsigned seed = (unsigned)w->k * 7919u + 1;
	uint8_t buf[RS];
	for (int i = 0; i < 40000; i++) {
		int slot = rand_r(&seed) % (NROWS / 4);
		uint64_t row = (uint64_t)slot * 4 + (uint64_t)w->k;
		int op = rand_r(&seed) % 10;
		if (op < 4) {
			uint32_t off = (uint32_t)(rand_r(&seed) % RS);
			uint32_t len = (uint32_t)(rand_r(&seed) % (RS - off)) + 1;
			memset(buf, rand_r(&seed) & 0xff, len);
			CHECK(cache_write(w->c, 0, RS, row, off, len, buf, 1, NULL) == 0);
			memcpy(w->model[slot] + off, buf, len);
		} else if (op < 9) {
			CHECK(cache_read(w->c, 0, RS, row, 0, RS, buf) == 0);
			CHECK(memcmp(buf, w->model[slot], RS) == 0);
		} else if (i % 5000 == 0) {
			CHECK(cache_flush(w->c, 0) == 0);
		} else {
			/* someone else's row: any value is fine, it must not crash */
			CHECK(cache_read(w->c, 0, RS, (uint64_t)(rand_r(&seed) % NROWS), 0, RS, buf) == 0);
		}
	}
	return NULL;
}

static void test_threads(void)
{
	reset();
	struct cache *c = mk(2000, 0, 5);
	static struct worker w[4];
	pthread_t t[4];
	for (int k = 0; k < 4; k++) {
		w[k].c = c;
		w[k].k = k;
		for (int s = 0; s < NROWS / 4; s++) {
			int r = s * 4 + k;
			if (F.stored[r])
				memcpy(w[k].model[s], F.rows[r], RS);
			else
				memset(w[k].model[s], 0, RS);
		}
		CHECK(pthread_create(&t[k], NULL, work, &w[k]) == 0);
	}
	for (int k = 0; k < 4; k++)
		pthread_join(t[k], NULL);
	CHECK(cache_flush(c, -1) == 0);
	for (int k = 0; k < 4; k++)
		for (int s = 0; s < NROWS / 4; s++) {
			int r = s * 4 + k;
			if (F.stored[r])
				CHECK(memcmp(F.rows[r], w[k].model[s], RS) == 0);
		}
	CHECK(F.reserved == 0);
	struct cache_stats st;
	cache_stats_get(c, -1, &st);
	printf("  4 threads: %llu hits, %llu misses, %llu evictions, %llu write-backs\n",
	       (unsigned long long)st.hits, (unsigned long long)st.misses,
	       (unsigned long long)st.evictions, (unsigned long long)st.writebacks);
	cache_destroy(c);
}

int main(void)
{
	pthread_mutex_init(&F.lock, NULL);
	test_hits();
	printf("hits ok\n");
	test_clock();
	printf("clock ok\n");
	test_writeback();
	printf("writeback ok\n");
	test_evict_dirty();
	printf("evict dirty ok\n");
	test_pin();
	printf("pin ok\n");
	test_reserve();
	printf("reserve ok\n");
	test_preserve();
	printf("preserve ok\n");
	test_age();
	printf("age ok\n");
	test_overhead();
	printf("overhead ok\n");
	test_threads();
	printf("threads ok\n");
	return 0;
}
