/*
 * Unit tests of cache/ against a fake store (an array of rows in DRAM that
 * counts fetches, write-backs and reservations, and models slots: a write-back
 * over a hole or over a version a snapshot keeps takes one more, and fails
 * with ENOSPC past `cap`): hits and misses, CLOCK eviction order, dirty
 * write-back at flush/eviction/age, drop, pinning and bypass, promises (holes,
 * rows snapshots hold, credit, none asked with a shard lock held), per-row
 * overhead, in-place updates (cache_update_rows), and many threads at once, with snapshots and a nearly full store
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
	uint8_t out[NROWS];           /* stored in a spill tier: a write-back takes a slot */
	_Atomic long fetches, probes, writebacks, wb_calls;
	_Atomic long reserve_calls;   /* of delta > 0 */
	long reserved;                /* promises outstanding; protected by lock */
	long used;                    /* slots taken since reset(); protected by lock */
	long cap;                     /* at most this many (-1: no limit); protected by lock */
	long wb_nospace;              /* write-backs refused for want of a slot; protected by lock */
	uint64_t batch_of[NROWS];     /* batch of the stored version; protected by lock */
	uint64_t snaps[4096];         /* batches of the snapshots, increasing; protected by lock */
	int nsnaps;
	long versions;
	int fail_writeback;
	int fail_table;               /* write-backs of this table fail (-1: none) */
	uint8_t stored1[NROWS];       /* table 1: only which rows were written back */
	/* block: the next reserve() of that sign (1 or -1), or writeback (2),
	 * waits until unblock */
	pthread_mutex_t bl;
	pthread_cond_t bl_cv;
	int block, blocked, unblock;  /* protected by bl */
	long batch_fetches;           /* fetch_rows calls (OPS_ROWS) */
};

static struct fake F;

static int f_fetch(void *ctx, uint32_t table, uint64_t row, void *buf, uint64_t *batch)
{
	struct fake *f = ctx;
	CHECK(table <= 1 && row < NROWS && *batch == 0);
	if (table == 1) { /* a second table, always a hole below */
		if (buf)
			memset(buf, 0, RS);
		return 0;
	}
	if (buf)
		f->fetches++;
	else
		f->probes++;
	pthread_mutex_lock(&f->lock);
	int st = f->stored[row];
	if (buf && st)
		memcpy(buf, f->rows[row], RS);
	else if (buf)
		memset(buf, 0, RS);
	if (st)
		*batch = f->batch_of[row];
	if (st && f->out[row])
		st = CACHE_STORED_OUT;
	pthread_mutex_unlock(&f->lock);
	return st;
}

/* Is the stored version of row (batch x) one that a write of batch y keeps
 * for a snapshot, as store/commit.c plan() decides?  f->lock held. */
static int kept(struct fake *f, uint64_t row, uint64_t y)
{
	int lo = 0, hi = f->nsnaps; /* the first snapshot >= the stored batch */
	while (lo < hi) {
		int mid = (lo + hi) / 2;
		if (f->snaps[mid] < f->batch_of[row])
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < f->nsnaps && f->snaps[lo] < y;
}

static int f_writeback(void *ctx, uint32_t table, const struct cache_wb *rows, size_t n)
{
	struct fake *f = ctx;
	CHECK(table <= 1);
	if (f->fail_writeback || (int)table == f->fail_table)
		return -EIO;
	if (table == 1) {
		pthread_mutex_lock(&f->lock);
		for (size_t i = 0; i < n; i++)
			f->stored1[rows[i].row] = 1;
		pthread_mutex_unlock(&f->lock);
		return 0;
	}
	pthread_mutex_lock(&f->bl);
	if (f->block == 2) {
		f->block = 0;
		f->blocked = 1;
		pthread_cond_broadcast(&f->bl_cv);
		while (!f->unblock)
			pthread_cond_wait(&f->bl_cv, &f->bl);
	}
	pthread_mutex_unlock(&f->bl);
	pthread_mutex_lock(&f->lock);
	long more = 0; /* slots taken and none freed: over a hole or a kept version */
	for (size_t i = 0; i < n; i++) {
		CHECK(rows[i].row < NROWS);
		more += !f->stored[rows[i].row] || f->out[rows[i].row] || kept(f, rows[i].row, rows[i].batch);
	}
	if (f->cap >= 0 && f->used + more > f->cap) {
		f->wb_nospace++; /* as the store: the whole group refused */
		pthread_mutex_unlock(&f->lock);
		return -ENOSPC;
	}
	f->used += more;
	for (size_t i = 0; i < n; i++) {
		CHECK(rows[i].batch >= f->batch_of[rows[i].row]); /* never back in batch order */
		f->batch_of[rows[i].row] = rows[i].batch;
		f->versions++;
		memcpy(f->rows[rows[i].row], rows[i].data, RS);
		f->stored[rows[i].row] = 1;
		f->out[rows[i].row] = 0;
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
	CHECK(rs == RS && delta != 0);
	pthread_mutex_lock(&f->bl);
	if (f->block && (delta > 0) == (f->block > 0)) {
		f->block = 0;
		f->blocked = 1;
		pthread_cond_broadcast(&f->bl_cv);
		while (!f->unblock)
			pthread_cond_wait(&f->bl_cv, &f->bl);
	}
	pthread_mutex_unlock(&f->bl);
	pthread_mutex_lock(&f->lock);
	int ret = 0;
	if (delta > 0) {
		f->reserve_calls++;
		if (f->cap >= 0 && f->used + f->reserved + delta > f->cap)
			ret = -ENOSPC;
	}
	if (!ret)
		f->reserved += delta;
	CHECK(f->reserved >= 0); /* nothing given back twice */
	pthread_mutex_unlock(&f->lock);
	return ret;
}

static const struct cache_ops OPS = { .fetch = f_fetch, .writeback = f_writeback, .reserve = f_reserve };

/* The same below, with the batch call a store makes for many misses. */
static int f_fetch_rows(void *ctx, uint32_t table, const uint64_t *rows, size_t n, void *buf, uint8_t *stored,
			uint64_t *batch)
{
	struct fake *f = ctx;
	f->batch_fetches++;
	for (size_t i = 0; i < n; i++) {
		int st = f_fetch(ctx, table, rows[i], buf ? (char *)buf + i * RS : NULL, &batch[i]);
		if (stored)
			stored[i] = (uint8_t)st;
	}
	return 0;
}

static const struct cache_ops OPS_ROWS = { .fetch = f_fetch, .fetch_rows = f_fetch_rows, .writeback = f_writeback,
					   .reserve = f_reserve };

static void reset(void)
{
	pthread_mutex_destroy(&F.lock);
	pthread_mutex_destroy(&F.bl);
	pthread_cond_destroy(&F.bl_cv);
	memset(&F, 0, sizeof(F));
	pthread_mutex_init(&F.lock, NULL);
	F.fail_table = -1;
	pthread_mutex_init(&F.bl, NULL);
	pthread_cond_init(&F.bl_cv, NULL);
	F.cap = -1;
	for (int r = 0; r < NROWS; r++)
		memset(F.rows[r], (uint8_t)r, RS);
	for (int r = 0; r < NROWS; r += 2) {
		F.stored[r] = 1; /* odd rows are holes */
		F.batch_of[r] = 1;
	}
}

static long reserved(void)
{
	pthread_mutex_lock(&F.lock);
	long r = F.reserved;
	pthread_mutex_unlock(&F.lock);
	return r;
}

/* A snapshot closes batch b: the fake keeps what it holds, the cache is told. */
static void snap(struct cache *c, uint64_t b)
{
	pthread_mutex_lock(&F.lock);
	CHECK(F.nsnaps < 4096 && (!F.nsnaps || F.snaps[F.nsnaps - 1] < b));
	F.snaps[F.nsnaps++] = b;
	pthread_mutex_unlock(&F.lock);
	cache_set_snapshot(c, b);
}

static struct cache *mk_ops(uint64_t rows_budget, uint32_t shards, uint32_t age, const struct cache_ops *ops)
{
	struct cache_conf cc = { rows_budget * (RS + CACHE_ROW_OVERHEAD), age, shards };
	struct cache *c = cache_create(&cc, ops, &F);
	CHECK(c);
	return c;
}

static struct cache *mk(uint64_t rows_budget, uint32_t shards, uint32_t age)
{
	return mk_ops(rows_budget, shards, age, &OPS);
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

	/* a table whose write-back fails does not hold up the others: table 0
	 * comes first in a round and fails, table 1 is still written back */
	F.fail_table = 0;
	CHECK(cache_write(c, 0, RS, 11, 0, RS, w, 1, NULL) == 0);
	CHECK(cache_write(c, 1, RS, 7, 0, RS, w, 1, NULL) == 0);
	CHECK(cache_flush(c, -1) == -EIO);
	CHECK(F.stored1[7]);
	cache_stats_get(c, 0, &st);
	CHECK(st.dirty == 1);
	cache_stats_get(c, 1, &st);
	CHECK(st.dirty == 0);
	F.fail_table = -1;
	CHECK(cache_flush(c, -1) == 0);
	cache_stats_get(c, 0, &st);
	CHECK(st.dirty == 0);

	/* drop discards dirty rows without writing them */
	CHECK(cache_write(c, 0, RS, 14, 0, RS, w, 1, NULL) == 0);
	CHECK(cache_write(c, 0, RS, 15, 0, RS, w, 1, NULL) == 0);
	cache_drop(c, 0, 15, 16);
	CHECK(F.reserved == 0);
	CHECK(cache_flush(c, 0) == 0 && F.writebacks == 6 && !F.stored[15]);
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
	F.cap = 2;
	CHECK(cache_write(c, 0, RS, 1, 0, RS, w, 1, NULL) == 0);
	CHECK(cache_write(c, 0, RS, 3, 0, RS, w, 1, NULL) == 0);
	CHECK(cache_write(c, 0, RS, 5, 0, RS, w, 1, NULL) == -ENOSPC);
	CHECK(cache_write(c, 0, RS, 2, 0, RS, w, 1, NULL) == 0); /* stored below: no room needed */
	rd(c, 5, b);
	CHECK(b[0] == 0);
	CHECK(cache_flush(c, 0) == 0 && F.reserved == 0 && !F.stored[5] && F.used == 2);
	CHECK(cache_write(c, 0, RS, 5, 0, RS, w, 1, NULL) == -ENOSPC); /* the slots are taken now */
	F.cap = 3;
	CHECK(cache_write(c, 0, RS, 5, 0, RS, w, 1, NULL) == 0);
	CHECK(cache_flush(c, 0) == 0 && F.reserved == 0 && F.wb_nospace == 0);
	cache_destroy(c);
}

/* A row dirty when a snapshot is taken keeps its bytes for the snapshot:
 * written again in a later batch, the old bytes are written back first, as
 * a version of their own batch. */
/* Rows below that are out of its room (CACHE_STORED_OUT: in a spill tier)
 * take a slot at their write-back without freeing one: a write of one, read
 * or not, promises it, and is refused when there is no room (not its
 * write-back, later). */
static void test_out(void)
{
	reset();
	for (int r = 20; r <= 30; r += 2)
		F.out[r] = r != 24;
	struct cache *c = mk_ops(100, 1, 0, &OPS_ROWS);
	uint8_t w[RS], b[RS], present[2];
	memset(w, 0xAB, RS);
	rd(c, 20, b); /* filled by a fetch */
	uint64_t ids[2] = { 22, 24 };
	uint8_t two[2 * RS];
	CHECK(cache_read_rows(c, 0, RS, ids, 2, two, present) == 0); /* by a fetch_rows */
	CHECK(present[0] == 1 && present[1] == 1 && two[0] == 22);
	CHECK(cache_write(c, 0, RS, 20, 0, RS, w, 2, NULL) == 0 && reserved() == 1);
	CHECK(cache_write(c, 0, RS, 22, 0, 4, w, 2, NULL) == 0 && reserved() == 2);
	CHECK(cache_write(c, 0, RS, 24, 0, RS, w, 2, NULL) == 0 && reserved() == 2); /* in the room */
	CHECK(cache_write(c, 0, RS, 26, 0, RS, w, 2, NULL) == 0 && reserved() == 3); /* not cached */
	CHECK(cache_write(c, 0, RS, 28, 8, 4, w, 2, NULL) == 0 && reserved() == 4);  /* nor this */
	CHECK(cache_flush(c, 0) == 0 && reserved() == 0 && F.used == 4 && F.wb_nospace == 0);
	CHECK(!F.out[20] && F.rows[22][0] == 0xAB && F.rows[22][4] == 22 && F.rows[28][8] == 0xAB);
	CHECK(cache_write(c, 0, RS, 20, 0, RS, w, 3, NULL) == 0 && reserved() == 0); /* in the room now */
	/* no room below: the write of an out row is refused, nothing changes */
	F.cap = F.used;
	rd(c, 30, b);
	CHECK(cache_write(c, 0, RS, 30, 0, RS, w, 3, NULL) == -ENOSPC && reserved() == 0);
	rd(c, 30, b);
	CHECK(b[0] == 30);
	CHECK(cache_flush(c, 0) == 0 && F.wb_nospace == 0 && F.rows[30][0] == 30);
	cache_destroy(c);
}

static void test_preserve(void)
{
	reset();
	struct cache *c = mk(100, 1, 0);
	uint8_t w[RS];
	memset(w, 1, RS);
	CHECK(cache_write(c, 0, RS, 8, 0, RS, w, 5, NULL) == 0);
	snap(c, 5); /* a snapshot closes batch 5 */
	memset(w, 2, RS);
	CHECK(cache_write(c, 0, RS, 8, 0, RS, w, 6, NULL) == 0);
	CHECK(F.reserved == 1); /* room promised for the extra version */
	memset(w, 3, RS);
	CHECK(cache_write(c, 0, RS, 8, 0, RS, w, 6, NULL) == 0); /* same batch: nothing more kept */
	snap(c, 6);
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
	snap(c, 7);
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
	/* clean rows need no copy: the store keeps the old version itself (and
	 * needs a slot for it: promised) */
	long v0 = F.versions, u0 = F.used;
	memset(w, 5, RS);
	snap(c, 8);
	CHECK(cache_write(c, 0, RS, 8, 0, RS, w, 9, NULL) == 0 && F.reserved == 1);
	CHECK(cache_flush(c, 0) == 0 && F.versions == v0 + 1 && F.used == u0 + 1 && F.reserved == 0);
	CHECK(F.wb_nospace == 0);
	cache_destroy(c);

	/* a copy written back alone (a drop writes copies back first): its
	 * promise stays for the version after it, which keeps the copy */
	reset();
	c = mk(100, 1, 0);
	CHECK(cache_write(c, 0, RS, 8, 0, RS, w, 2, NULL) == 0 && F.reserved == 0);
	snap(c, 2);
	CHECK(cache_write(c, 0, RS, 8, 0, RS, w, 3, NULL) == 0 && F.reserved == 1);
	cache_drop(c, 0, 1000, 1001);
	CHECK(F.versions == 1 && F.batch_of[8] == 2 && F.used == 0);
	CHECK(F.reserved == 1);
	F.cap = 1;
	CHECK(cache_flush(c, 0) == 0 && F.batch_of[8] == 3 && F.used == 1 && F.reserved == 0);
	cache_destroy(c);
}

/* cache_update_rows: fn sees each row's bytes and whether it is stored,
 * for rows cached, not cached and holes; a dirty row a snapshot holds is
 * kept aside before it changes; threads updating one cached row lose no
 * update (fn runs under the shard lock). */
struct upd {
	int stored[8];
	int calls;
};

static void upd_inc(void *ctx, size_t i, char *row, int stored)
{
	struct upd *u = ctx;
	if (u && i < 8)
		u->stored[i] = stored;
	if (u)
		u->calls++;
	uint32_t v;
	memcpy(&v, row, 4);
	v++;
	memcpy(row, &v, 4);
}

static uint32_t row_u32(struct cache *c, uint64_t row)
{
	uint8_t b[RS];
	uint32_t v;
	rd(c, row, b);
	memcpy(&v, b, 4);
	return v;
}

static void *upd_main(void *arg)
{
	struct cache *c = arg;
	uint64_t row = 10;
	for (int k = 0; k < 2000; k++)
		CHECK(cache_update_rows(c, 0, RS, &row, 1, upd_inc, NULL, 1, NULL) == 0);
	return NULL;
}

/* Rows cached, stored and holes, one by one (OPS) or with their misses
 * fetched in one call (OPS_ROWS); a repeated row (its misses twice in one
 * call) counts both updates. */
static void update_kinds(const struct cache_ops *ops)
{
	reset();
	struct cache *c = mk_ops(100, 1, 0, ops);
	uint8_t b[RS];
	rd(c, 6, b); /* row 6 cached; 4 stored, not cached; 5 a hole */
	uint64_t rows[3] = { 4, 5, 6 };
	struct upd u = { { 0 }, 0 };
	CHECK(cache_update_rows(c, 0, RS, rows, 3, upd_inc, &u, 1, NULL) == 0);
	CHECK(u.calls == 3 && u.stored[0] == 1 && u.stored[1] == 0 && u.stored[2] == 1);
	CHECK(row_u32(c, 4) == 0x04040405u && row_u32(c, 5) == 1 && row_u32(c, 6) == 0x06060607u);
	CHECK(cache_flush(c, 0) == 0);
	CHECK(F.stored[5] && F.rows[5][0] == 1 && F.rows[4][0] == 5 && F.rows[6][0] == 7);
	CHECK(reserved() == 0);
	uint64_t rep[5] = { 20, 21, 20, 23, 20 }; /* 20 stored, 21 and 23 holes */
	CHECK(cache_update_rows(c, 0, RS, rep, 5, upd_inc, NULL, 2, NULL) == 0);
	CHECK(row_u32(c, 20) == 0x14141414u + 3 && row_u32(c, 21) == 1 && row_u32(c, 23) == 1);
	CHECK(ops->fetch_rows ? F.batch_fetches == 2 : F.batch_fetches == 0);
	CHECK(cache_flush(c, 0) == 0);
	CHECK(reserved() == 0);
	cache_destroy(c);

	/* more misses than the cache holds, each row twice: written back to
	 * make room, or written through, every update kept */
	reset();
	c = mk_ops(8, 1, 0, ops);
	uint64_t many[80];
	for (int i = 0; i < 80; i++)
		many[i] = 100 + (uint64_t)(i % 40) * 7;
	for (int k = 0; k < 3; k++)
		CHECK(cache_update_rows(c, 0, RS, many, 80, upd_inc, NULL, 3 + k, NULL) == 0);
	CHECK(cache_flush(c, 0) == 0);
	for (int i = 0; i < 40; i++) {
		uint32_t want;
		memset(&want, (int)(many[i] & 0xff), 4);
		CHECK(F.stored[many[i]] && row_u32(c, many[i]) == (many[i] % 2 ? 6 : want + 6)); /* odd: holes */
	}
	CHECK(reserved() == 0);
	cache_destroy(c);
}

static void test_update(void)
{
	update_kinds(&OPS);
	update_kinds(&OPS_ROWS);
	reset();
	struct cache *c = mk(100, 1, 0);

	/* a dirty row a snapshot holds: its bytes are kept aside first */
	uint8_t w[RS];
	memset(w, 9, RS);
	CHECK(cache_write(c, 0, RS, 8, 0, RS, w, 5, NULL) == 0);
	snap(c, 5);
	uint64_t r8 = 8;
	CHECK(cache_update_rows(c, 0, RS, &r8, 1, upd_inc, NULL, 6, NULL) == 0);
	CHECK(cache_flush(c, 0) == 0);
	CHECK(F.versions >= 2 && F.rows[8][0] == 10 && F.batch_of[8] == 6);
	CHECK(reserved() == 0);
	cache_destroy(c);

	/* four threads on one cached row */
	reset();
	c = mk(100, 1, 0);
	pthread_t t[4];
	uint32_t v0 = row_u32(c, 10);
	for (int i = 0; i < 4; i++)
		CHECK(pthread_create(&t[i], NULL, upd_main, c) == 0);
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	CHECK(row_u32(c, 10) == v0 + 8000);
	cache_destroy(c);
}

/* As cache/io.c does: promise n rows below, write with that credit, give
 * back what is left.  Returns cache_write()'s result; *spent: units used. */
static int wr_credit(struct cache *c, uint64_t row, uint32_t off, uint32_t len, uint64_t batch,
		     int64_t n, int64_t *spent)
{
	uint8_t w[RS];
	memset(w, (int)(row + batch) & 0xff, RS);
	pthread_mutex_lock(&F.lock);
	F.reserved += n;
	pthread_mutex_unlock(&F.lock);
	int64_t credit = n;
	int r = cache_write(c, 0, RS, row, off, len, w, batch, &credit);
	CHECK(credit >= 0 && credit <= n);
	*spent = n - credit;
	pthread_mutex_lock(&F.lock);
	F.reserved -= credit;
	pthread_mutex_unlock(&F.lock);
	return r;
}

static int wr(struct cache *c, uint64_t row, uint32_t off, uint32_t len, uint64_t batch)
{
	uint8_t w[RS];
	memset(w, (int)(row + batch) & 0xff, RS);
	return cache_write(c, 0, RS, row, off, len, w, batch, NULL);
}

/* A clean row stored below turns dirty: its write-back keeps the stored
 * version when a snapshot holds it (stored batch <= the snapshot's), so the
 * write needs a promise then, and only then; promises balance. */
static void test_promise_held(void)
{
	reset();
	struct cache *c = mk(100, 1, 0);
	uint8_t b[RS];
	int64_t spent;
	rd(c, 2, b);
	rd(c, 10, b); /* cached clean, stored at batch 1 */
	/* no snapshot: nothing is kept, no promise */
	CHECK(wr(c, 2, 0, RS, 2) == 0);
	CHECK(wr(c, 4, 0, RS, 2) == 0); /* not cached */
	CHECK(wr_credit(c, 16, 0, 8, 2, 1, &spent) == 0 && spent == 0);
	CHECK(F.reserve_calls == 0 && reserved() == 0);
	CHECK(cache_flush(c, 0) == 0 && F.used == 0 && F.wb_nospace == 0);

	snap(c, 2); /* holds rows 2, 4, 16 at batch 2 and every other stored row at batch 1 */
	rd(c, 6, b); /* filled after the snapshot */
	/* with credit: spent, the cache asks nothing */
	CHECK(wr_credit(c, 10, 0, RS, 3, 1, &spent) == 0 && spent == 1); /* filled before it */
	CHECK(wr_credit(c, 6, 5, 9, 3, 2, &spent) == 0 && spent == 1);   /* filled after it */
	CHECK(F.reserve_calls == 0 && reserved() == 2);
	/* without: the cache reserves */
	CHECK(wr(c, 2, 0, RS, 3) == 0 && reserved() == 3);  /* written back before it */
	CHECK(wr(c, 12, 0, RS, 3) == 0 && reserved() == 4); /* not cached: a probe */
	CHECK(wr(c, 14, 8, 8, 3) == 0 && reserved() == 5);  /* not cached: a fetch */
	CHECK(wr(c, 10, 0, RS, 3) == 0 && reserved() == 5); /* dirty already: one per row */
	CHECK(wr_credit(c, 2, 1, 1, 3, 1, &spent) == 0 && spent == 0);
	CHECK(F.reserve_calls == 3);
	CHECK(cache_flush(c, 0) == 0 && F.used == 5 && reserved() == 0 && F.wb_nospace == 0);

	/* stored after the newest snapshot: nothing holds them */
	long calls = F.reserve_calls;
	CHECK(wr(c, 10, 0, RS, 4) == 0 && wr(c, 12, 0, 3, 4) == 0 && wr(c, 14, 0, RS, 4) == 0);
	CHECK(F.reserve_calls == calls && reserved() == 0);
	CHECK(wr(c, 16, 0, RS, 4) == 0 && reserved() == 1); /* but this one the snapshot holds */
	CHECK(cache_flush(c, 0) == 0 && F.used == 6 && reserved() == 0);

	/* a drop gives promises back (a stored row and a hole) */
	snap(c, 4);
	CHECK(wr(c, 10, 0, RS, 5) == 0 && wr(c, 13, 0, RS, 5) == 0 && reserved() == 2);
	cache_drop(c, 0, 0, 100);
	CHECK(reserved() == 0);
	CHECK(cache_flush(c, -1) == 0 && F.used == 6);
	cache_destroy(c);
}

/* Issue 10 item 7: a snapshot holds every stored row and the store has room
 * for two more slots.  Rewriting stored rows fills it: the third write is
 * refused when made, and every write taken reaches the store. */
static void test_full(void)
{
	reset();
	struct cache *c = mk(100, 1, 0);
	uint8_t b[RS];
	snap(c, 1);
	F.cap = 2;
	CHECK(wr(c, 2, 0, RS, 2) == 0);
	CHECK(wr(c, 4, 0, 10, 2) == 0);
	CHECK(wr(c, 6, 0, RS, 2) == -ENOSPC);
	rd(c, 6, b);
	CHECK(b[0] == 6 && b[RS - 1] == 6); /* unchanged */
	CHECK(cache_flush(c, -1) == 0 && F.wb_nospace == 0);
	CHECK(F.rows[2][0] == 4 && F.rows[4][9] == 6 && F.rows[4][10] == 4 && F.rows[6][0] == 6);
	CHECK(reserved() == 0 && F.used == 2);
	cache_destroy(c);
}

/* Run `fn` in a thread; `done` is set (under F.bl) when it returns. */
struct bg {
	pthread_t t;
	struct cache *c;
	int op;          /* 0 write a hole, 1 flush, 2 drop, 3 read a cached row */
	uint64_t row, batch;
	int ret, done;   /* done: protected by F.bl */
};

static void *bg_main(void *arg)
{
	struct bg *g = arg;
	uint8_t b[RS];
	if (g->op == 0)
		g->ret = wr(g->c, g->row, 0, RS, g->batch);
	else if (g->op == 1)
		g->ret = cache_flush(g->c, -1);
	else if (g->op == 2)
		cache_drop(g->c, 0, g->row, g->row + 1);
	else
		g->ret = cache_read(g->c, 0, RS, g->row, 0, RS, b);
	pthread_mutex_lock(&F.bl);
	g->done = 1;
	pthread_cond_broadcast(&F.bl_cv);
	pthread_mutex_unlock(&F.bl);
	return NULL;
}

static void bg_start(struct bg *g, struct cache *c, int op, uint64_t row, uint64_t batch)
{
	*g = (struct bg){ .c = c, .op = op, .row = row, .batch = batch };
	CHECK(pthread_create(&g->t, NULL, bg_main, g) == 0);
}

/* Wait (bounded: 20 s) until *flag is set; 0 if it never was. */
static int wait_flag(int *flag)
{
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += 20;
	pthread_mutex_lock(&F.bl);
	int r = 0;
	while (!*flag && r == 0)
		r = pthread_cond_timedwait(&F.bl_cv, &F.bl, &dl);
	int set = *flag;
	pthread_mutex_unlock(&F.bl);
	return set;
}

static void unblock(void)
{
	pthread_mutex_lock(&F.bl);
	F.unblock = 1;
	pthread_cond_broadcast(&F.bl_cv);
	pthread_mutex_unlock(&F.bl);
}

/* While the layer below blocks in `op` (which must call reserve of sign
 * `sign`, or writeback for sign 2), a reader of a cached row of the same
 * shard goes on: the call is not made with the shard lock held. */
static void check_unlocked(struct cache *c, int op, uint64_t row, int sign, const char *what)
{
	struct bg a, r;
	pthread_mutex_lock(&F.bl);
	F.block = sign;
	F.blocked = F.unblock = 0;
	pthread_mutex_unlock(&F.bl);
	bg_start(&a, c, op, row, 2);
	if (!wait_flag(&F.blocked)) {
		fprintf(stderr, "%s: never reached the layer below\n", what);
		exit(1);
	}
	bg_start(&r, c, 3, 2, 0);
	if (!wait_flag(&r.done)) {
		fprintf(stderr, "%s: a reader of the same shard waited 20 s on it (shard lock held)\n", what);
		exit(1);
	}
	CHECK(r.ret == 0);
	unblock();
	pthread_join(a.t, NULL);
	pthread_join(r.t, NULL);
	CHECK(a.ret == 0);
	pthread_mutex_lock(&F.bl);
	F.block = F.blocked = F.unblock = 0;
	pthread_mutex_unlock(&F.bl);
}

/* Issue 10 item 4: reserve() may block (the store waits for its spill
 * mover), so it is never called with a shard lock held; neither are
 * promises given back.  One shard: every row shares its lock. */
static void test_unlocked(void)
{
	reset();
	struct cache *c = mk(100, 1, 0);
	uint8_t b[RS];
	rd(c, 2, b); /* the row the reader reads: a hit */
	check_unlocked(c, 0, 3, 1, "reserve(+1) of a write to a hole");
	snap(c, 1);
	rd(c, 4, b);
	check_unlocked(c, 0, 4, 1, "reserve(+1) of a write to a row a snapshot holds");
	CHECK(reserved() == 2);
	check_unlocked(c, 1, 0, -1, "reserve(-1) after write-back");
	CHECK(reserved() == 0);
	CHECK(wr(c, 5, 0, RS, 2) == 0 && reserved() == 1);
	check_unlocked(c, 2, 5, -1, "reserve(-1) of a dropped row");
	CHECK(reserved() == 0 && F.used == 2);
	cache_destroy(c);
}

/* A row written while its write-back is in flight, after a snapshot took
 * the bytes in flight: the next write-back keeps them for the snapshot, so
 * that write needs a promise (and is refused when the store is full). */
static void test_busy_snapshot(void)
{
	for (int cap = 0; cap <= 1; cap++) {
		reset();
		struct cache *c = mk(100, 1, 0);
		CHECK(wr(c, 20, 0, RS, 2) == 0);
		F.cap = cap;
		pthread_mutex_lock(&F.bl);
		F.block = 2; /* the next writeback waits */
		pthread_mutex_unlock(&F.bl);
		struct bg a;
		bg_start(&a, c, 1, 0, 0);
		CHECK(wait_flag(&F.blocked));
		snap(c, 2);
		int r = wr(c, 20, 0, RS, 3);
		CHECK(r == (cap ? 0 : -ENOSPC));
		unblock();
		pthread_join(a.t, NULL);
		CHECK(a.ret == 0);
		CHECK(cache_flush(c, -1) == 0 && F.wb_nospace == 0);
		CHECK(F.batch_of[20] == (cap ? 3u : 2u) && F.used == cap && reserved() == 0);
		cache_destroy(c);
	}
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

/* Dirty rows that fill a shard (7/8 of its budget, half of its rows) make
 * the flusher write every dirty row back at once, whatever their age:
 * writers that need room then find clean rows to evict. */
static void test_kick(void)
{
	reset();
	struct cache *c = mk(4000, 1, 600000); /* the age would be 10 minutes */
	uint8_t w[RS];
	memset(w, 5, RS);
	for (uint64_t r = 0; r < 1000; r++)
		CHECK(cache_write(c, 0, RS, r, 0, RS, w, 1, NULL) == 0);
	struct timespec d = { 0, 2000000 };
	for (int i = 0; i < 50; i++)
		nanosleep(&d, NULL);
	CHECK(F.writebacks == 0); /* a quarter full: the age decides */
	for (uint64_t r = 1000; r < 3800; r++)
		CHECK(cache_write(c, 0, RS, r, 0, RS, w, 1, NULL) == 0);
	/* the kick comes once 7/8 of the budget is used (about 3500 rows, all
	 * dirty), and its round writes back at least those; rows dirtied
	 * after its round passed them wait for their age (or the next kick:
	 * under half dirty, none) */
	for (int i = 0; i < 2500 && F.writebacks < 3000; i++)
		nanosleep(&d, NULL); /* waits for the condition, bounded at ~5 s */
	printf("  %ld of 3800 dirty rows written back by the flusher (dirty_age_ms 600000)\n", (long)F.writebacks);
	CHECK(F.writebacks >= 3000 && F.rows[0][0] == 5);
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

/* Row ids of 2^48 and more (CACHE_ROW_LIMIT: an entry keeps 48 bits of its
 * row) are never cached, and never taken for the cached row with the same
 * low 48 bits: their reads and writes go to the layer below.  The fake
 * store's rows hold their own id, 8 bytes at a time, until written. */
static struct {
	uint64_t row[8];
	uint8_t data[8][RS];
	int n;
	long wbs;
} H;

static void h_pattern(uint64_t row, uint8_t *buf)
{
	for (int o = 0; o < RS; o += 8)
		memcpy(buf + o, &row, 8);
}

static int h_fetch(void *ctx, uint32_t table, uint64_t row, void *buf, uint64_t *batch)
{
	(void)ctx;
	CHECK(table == 0);
	*batch = 1;
	for (int i = 0; i < H.n; i++)
		if (H.row[i] == row) {
			if (buf)
				memcpy(buf, H.data[i], RS);
			return 1;
		}
	if (buf)
		h_pattern(row, buf);
	return 1;
}

static int h_writeback(void *ctx, uint32_t table, const struct cache_wb *rows, size_t n)
{
	(void)ctx;
	CHECK(table == 0);
	for (size_t k = 0; k < n; k++) {
		int i = 0;
		while (i < H.n && H.row[i] != rows[k].row)
			i++;
		CHECK(i < 8);
		H.row[i] = rows[k].row;
		memcpy(H.data[i], rows[k].data, RS);
		H.n += i == H.n;
		H.wbs++;
	}
	return 0;
}

static int h_is(const uint8_t *buf, uint64_t row)
{
	uint8_t want[RS];
	h_pattern(row, want);
	return memcmp(buf, want, RS) == 0;
}

static void test_high_rows(void)
{
	memset(&H, 0, sizeof(H));
	static const struct cache_ops ops = { .fetch = h_fetch, .writeback = h_writeback };
	struct cache_conf cc = { 100 * (RS + CACHE_ROW_OVERHEAD), 0, 1 };
	struct cache *c = cache_create(&cc, &ops, NULL);
	CHECK(c);
	const uint64_t lo = 5, hi = CACHE_ROW_LIMIT + lo;
	uint8_t b[RS], w[RS];
	CHECK(cache_read(c, 0, RS, lo, 0, RS, b) == 0 && h_is(b, lo));
	/* every k * 2^48 + 5 has row 5's low 48 bits; about one in 16 of
	 * them hashes to its bucket (one row cached: 16 buckets) */
	for (uint64_t k = 1; k <= 4096; k++) {
		CHECK(cache_read(c, 0, RS, lo + k * CACHE_ROW_LIMIT, 0, RS, b) == 0);
		CHECK(h_is(b, lo + k * CACHE_ROW_LIMIT));
	}
	CHECK(cache_read(c, 0, RS, UINT64_MAX, 0, RS, b) == 0 && h_is(b, UINT64_MAX));
	struct cache_stats st;
	cache_stats_get(c, 0, &st);
	CHECK(st.rows == 1);
	/* a write of a high row is written through; row 5 is unchanged */
	memset(w, 0xab, RS);
	CHECK(cache_write(c, 0, RS, hi, 0, RS, w, 2, NULL) == 0);
	CHECK(H.wbs == 1 && H.n == 1 && H.row[0] == hi);
	cache_stats_get(c, 0, &st);
	CHECK(st.rows == 1 && st.dirty == 0);
	uint64_t ids[4] = { hi, lo, UINT64_MAX, hi };
	uint8_t out[4 * RS];
	CHECK(cache_read_rows(c, 0, RS, ids, 4, out, NULL) == 0);
	CHECK(memcmp(out, w, RS) == 0 && h_is(out + RS, lo) && h_is(out + 2 * RS, UINT64_MAX) &&
	      memcmp(out + 3 * RS, w, RS) == 0);
	/* and a write of row 5 stays cached, not written through */
	memset(w, 0xcd, RS);
	CHECK(cache_write_rows(c, 0, RS, &lo, 1, w, 3, NULL) == 0);
	CHECK(H.wbs == 1);
	CHECK(cache_read(c, 0, RS, hi, 0, RS, b) == 0 && b[7] == 0xab);
	CHECK(cache_read(c, 0, RS, lo, 0, RS, b) == 0 && b[7] == 0xcd);
	cache_stats_get(c, 0, &st);
	CHECK(st.rows == 1 && st.dirty == 1);
	cache_destroy(c);
}

/* Threads each own rows r % 4 == k; readers of all rows run alongside. */
struct worker {
	struct cache *c;
	int k;
	uint8_t model[NROWS / 4][RS];
	uint8_t written[NROWS / 4];
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
			w->written[slot] = 1;
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
	static const uint8_t zero[RS];
	long holes_written = 0;
	for (int k = 0; k < 4; k++)
		for (int s = 0; s < NROWS / 4; s++) {
			int r = s * 4 + k;
			/* every row written reached the store, holes included */
			CHECK(!w[k].written[s] || F.stored[r]);
			CHECK(memcmp(F.stored[r] ? F.rows[r] : zero, w[k].model[s], RS) == 0);
			holes_written += w[k].written[s] && (r & 1);
		}
	CHECK(holes_written > 0);
	CHECK(F.reserved == 0);
	struct cache_stats st;
	cache_stats_get(c, -1, &st);
	printf("  4 threads: %llu hits, %llu misses, %llu evictions, %llu write-backs\n",
	       (unsigned long long)st.hits, (unsigned long long)st.misses,
	       (unsigned long long)st.evictions, (unsigned long long)st.writebacks);
	cache_destroy(c);
}

/* Writers (single rows and batches, with and without credit) on a small
 * cache with a flusher, while snapshots are taken, until the store is nearly
 * full: writes get ENOSPC when made, no write-back ever does, every write
 * taken is in the store at the end, and promises balance.  As in fs/, writes
 * hold snap_rw shared from reading the batch id until they are in the cache;
 * a snapshot holds it exclusive. */
#define SW 3          /* writers */
#define SW_ROWS 2000  /* rows per writer: row = k + SW * j */

static struct {
	struct cache *c;
	pthread_rwlock_t rw;
	uint64_t batch;       /* protected by rw */
	_Atomic int done;     /* writers finished */
	_Atomic long taken, refused;
	uint8_t model[SW][SW_ROWS][RS];
} S;

struct swarg {
	int k;
	unsigned seed;
};

static void *snap_writer(void *arg)
{
	struct swarg *a = arg;
	unsigned seed = a->seed;
	uint8_t buf[8 * RS];
	uint64_t ids[8];
	uint32_t js[8];
	for (int i = 0; i < 1000000 && S.refused < 3000; i++) { /* until well past full */
		int op = rand_r(&seed) % 10;
		if (op < 3) { /* read back one of its rows */
			uint32_t j = (uint32_t)rand_r(&seed) % SW_ROWS;
			CHECK(cache_read(S.c, 0, RS, (uint64_t)(a->k + SW * j), 0, RS, buf) == 0);
			CHECK(memcmp(buf, S.model[a->k][j], RS) == 0);
			continue;
		}
		if (op < 5) { /* a batch of up to 8 rows (duplicates too), with credit */
			int n = 1 + rand_r(&seed) % 8;
			for (int m = 0; m < n; m++) {
				js[m] = (uint32_t)rand_r(&seed) % (m && rand_r(&seed) % 4 == 0 ? 1 : SW_ROWS);
				ids[m] = (uint64_t)(a->k + SW * js[m]);
				memset(buf + m * RS, rand_r(&seed) & 0xff, RS);
			}
			if (f_reserve(&F, 0, RS, n)) {
				S.refused++;
				continue;
			}
			int64_t credit = n;
			pthread_rwlock_rdlock(&S.rw);
			int r = cache_write_rows(S.c, 0, RS, ids, (size_t)n, buf, S.batch, &credit);
			pthread_rwlock_unlock(&S.rw);
			CHECK(r == 0 && credit >= 0); /* enough credit: never ENOSPC */
			if (credit)
				f_reserve(&F, 0, RS, (int)-credit);
			for (int m = 0; m < n; m++)
				memcpy(S.model[a->k][js[m]], buf + m * RS, RS);
			S.taken++;
			continue;
		}
		/* one row, whole or in part, with credit or without */
		uint32_t j = (uint32_t)rand_r(&seed) % SW_ROWS;
		uint32_t off = op < 8 ? 0 : (uint32_t)(rand_r(&seed) % RS);
		uint32_t len = op < 8 ? RS : (uint32_t)(rand_r(&seed) % (RS - off)) + 1;
		memset(buf, rand_r(&seed) & 0xff, len);
		int with = rand_r(&seed) & 1;
		int64_t credit = 1;
		if (with && f_reserve(&F, 0, RS, 1)) {
			S.refused++;
			continue;
		}
		pthread_rwlock_rdlock(&S.rw);
		int r = cache_write(S.c, 0, RS, (uint64_t)(a->k + SW * j), off, len, buf, S.batch,
				    with ? &credit : NULL);
		pthread_rwlock_unlock(&S.rw);
		if (with && credit)
			f_reserve(&F, 0, RS, (int)-credit);
		if (r == -ENOSPC && !with) {
			S.refused++; /* refused whole: nothing changed */
			continue;
		}
		CHECK(r == 0);
		memcpy(S.model[a->k][j] + off, buf, len);
		S.taken++;
	}
	S.done++;
	return NULL;
}

static void test_snap_threads(void)
{
	/* printed now and again when a check fails */
	unsigned seed = (unsigned)test_seed("build/tests/test_cache");
	reset();
	F.cap = 60000;
	S.c = mk(600, 4, 5);
	S.batch = 2;
	S.done = 0;
	S.taken = S.refused = 0;
	pthread_rwlock_init(&S.rw, NULL);
	for (int k = 0; k < SW; k++)
		for (int j = 0; j < SW_ROWS; j++) {
			int r = k + SW * j;
			if (F.stored[r])
				memcpy(S.model[k][j], F.rows[r], RS);
			else
				memset(S.model[k][j], 0, RS);
		}
	pthread_t t[SW];
	struct swarg a[SW];
	for (int k = 0; k < SW; k++) {
		a[k] = (struct swarg){ k, seed * 31u + (unsigned)k };
		CHECK(pthread_create(&t[k], NULL, snap_writer, &a[k]) == 0);
	}
	int nsnap = 0;
	struct timespec d = { 0, 100000 };
	for (; S.done < SW && nsnap < 4000; nsnap++) { /* a snapshot every 0.1 ms while they write */
		nanosleep(&d, NULL);
		pthread_rwlock_wrlock(&S.rw);
		snap(S.c, S.batch);
		S.batch++;
		pthread_rwlock_unlock(&S.rw);
	}
	for (int k = 0; k < SW; k++)
		pthread_join(t[k], NULL);
	int fr = cache_flush(S.c, -1);
	if (fr)
		fprintf(stderr, "final flush: %s, %ld write-backs refused for room\n", strerror(-fr), F.wb_nospace);
	CHECK(fr == 0);
	printf("  %d snapshots, %ld writes taken, %ld refused (ENOSPC when made), %ld of %ld slots used\n",
	       nsnap, (long)S.taken, (long)S.refused, F.used, F.cap);
	CHECK(F.wb_nospace == 0); /* no write-back ever lacked room */
	CHECK(S.refused > 0);     /* the store did fill up */
	CHECK(reserved() == 0);
	static const uint8_t zero[RS];
	for (int k = 0; k < SW; k++)
		for (int j = 0; j < SW_ROWS; j++) {
			int r = k + SW * j;
			CHECK(memcmp(F.stored[r] ? F.rows[r] : zero, S.model[k][j], RS) == 0);
		}
	cache_destroy(S.c);
	pthread_rwlock_destroy(&S.rw);
}

int main(void)
{
	pthread_mutex_init(&F.lock, NULL);
	F.fail_table = -1;
	pthread_mutex_init(&F.bl, NULL);
	pthread_cond_init(&F.bl_cv, NULL);
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
	test_out();
	printf("out ok\n");
	test_preserve();
	printf("preserve ok\n");
	test_promise_held();
	printf("promise held ok\n");
	test_update();
	printf("update ok\n");
	test_full();
	printf("full ok\n");
	test_unlocked();
	printf("unlocked ok\n");
	test_busy_snapshot();
	printf("busy snapshot ok\n");
	test_age();
	printf("age ok\n");
	test_kick();
	printf("kick ok\n");
	test_overhead();
	printf("overhead ok\n");
	test_high_rows();
	printf("high rows ok\n");
	test_threads();
	printf("threads ok\n");
	test_snap_threads();
	printf("snapshot threads ok\n");
	return 0;
}
