/*
 * cache/below.c: the cache's ops over the store (cache_store_ops), what the
 * daemon hands cache_create(): misses read from a table's live view, dirty
 * rows written back with store_rows_writeback(), promises of room made and
 * given back with store_space_reserve(), snapshots marked durable once every
 * row of theirs is in the pool; and the pool's failure, logged once
 * (cache_below_failed()).  The one file of cache/ that includes the store's
 * header: the front, the mechanism and the write-back policy reach the store
 * only through struct cache_ops, so tests drive them over a fake store.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embfs/cache.h"
#include "embfs/store.h"

int cache_below_failed(struct cache_below *b, int ret)
{
	char why[200];
	if ((ret != -EIO && ret != -EROFS) || !store_health(b->st, why, sizeof(why)))
		return 0;
	if (!atomic_exchange(&b->failure_logged, 1))
		fprintf(stderr, "embfs: %s: %s\n", b->pool, why);
	return 1;
}

static int below_fetch_rows(void *ctx, uint32_t table, const uint64_t *rows, size_t n, void *buf,
			    uint8_t *stored, uint64_t *batch)
{
	struct cache_below *b = ctx;
	struct store_view v;
	int ret = store_view_live(b->st, table, &v);
	v.where = 1; /* rows outside the pool: CACHE_STORED_OUT (STORE_OUT) */
	return ret ? ret : store_rows_read(b->st, &v, rows, n, buf, stored, batch);
}

static int below_fetch(void *ctx, uint32_t table, uint64_t row, void *buf, uint64_t *batch)
{
	uint8_t stored = 0;
	int ret = below_fetch_rows(ctx, table, &row, 1, buf, &stored, batch); /* buf NULL: a probe */
	return ret ? ret : stored;
}

static int below_fetch_range(void *ctx, uint32_t table, uint64_t first, size_t n, void *buf, const uint8_t *skip,
			     uint8_t *stored)
{
	struct cache_below *b = ctx;
	struct store_view v;
	int ret = store_view_live(b->st, table, &v);
	return ret ? ret : store_rows_read_range(b->st, &v, first, n, buf, skip, stored);
}

static int below_writeback(void *ctx, uint32_t table, const struct cache_wb *rows, size_t n)
{
	struct cache_below *b = ctx;
	struct store_attr a;
	int ret = store_table_getattr(b->st, table, &a);
	if (ret)
		return ret;
	struct store_rowop *ops = malloc(n * sizeof(*ops));
	if (!ops)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		ops[i] = (struct store_rowop){ rows[i].row, 0, a.row_size, rows[i].data, rows[i].batch };
	ret = store_rows_writeback(b->st, table, ops, n);
	free(ops);
	if (ret && !cache_below_failed(b, ret)) /* a failed pool is logged once, not each round */
		fprintf(stderr, "embfs: writing back %zu rows of table %u: %s\n", n, table, strerror(-ret));
	return ret;
}

/* Writes pass their own promise as credit; this pays for the rest (a caller
 * without credit) and takes promises back. */
static int below_reserve(void *ctx, uint32_t table, uint32_t row_size, int delta)
{
	struct cache_below *b = ctx;
	return store_space_reserve(b->st, table, row_size, delta);
}

/* Snapshots whose batch is below every row still only in DRAM are whole in
 * the pool: from now on they survive a crash. */
static void below_durable_below(void *ctx, uint64_t batch)
{
	struct cache_below *b = ctx;
	uint32_t cur = 0;
	struct store_snap sn;
	while (store_snap_next(b->st, &cur, &sn) == 1)
		if (!sn.durable && sn.batch < batch)
			store_snap_set_durable(b->st, sn.idx, sn.gen); /* -ENOENT: dropped meanwhile */
}

const struct cache_ops cache_store_ops = {
	.fetch = below_fetch,
	.fetch_rows = below_fetch_rows,
	.fetch_range = below_fetch_range,
	.writeback = below_writeback,
	.reserve = below_reserve,
	.durable_below = below_durable_below,
};
