/*
 * Byte ranges <-> rows.  With a cache, reads and writes go through it and
 * the store sees writes at write-back (group commit); without one, a write
 * is one store commit.  The cache reaches the store only through the two
 * callbacks at the bottom of this file.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs.h"

/* Whole rows [first, first + n) into buf: through the cache, whose misses
 * reach the store in one call (one device submission for spilled rows). */
static int whole_rows(struct embfs *fs, uint32_t id, uint32_t rs, uint64_t first, size_t n, char *buf)
{
	uint64_t sids[64], *ids = n <= 64 ? sids : malloc(n * sizeof(*ids));
	if (!ids)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		ids[i] = first + i;
	int ret = fs->cache ? cache_read_rows(fs->cache, id, rs, ids, n, buf)
			    : fs_store_read(fs, id, ids, n, buf, NULL, NULL);
	if (ids != sids)
		free(ids);
	return ret < 0 ? ret : 0;
}

int rows_read(struct embfs *fs, uint32_t id, uint32_t rs, uint64_t off, size_t len, char *buf)
{
	char *row = NULL;
	int ret = 0;
	for (size_t done = 0; done < len && !ret;) {
		uint64_t pos = off + done;
		if (pos % rs == 0 && len - done >= 2 * (size_t)rs) {
			size_t n = (len - done) / rs;
			ret = whole_rows(fs, id, rs, pos / rs, n, buf + done);
			done += n * rs;
			continue;
		}
		uint64_t r = pos / rs;
		uint32_t in = (uint32_t)(pos % rs);
		size_t take = rs - in < len - done ? rs - in : len - done;
		if (fs->cache) {
			ret = cache_read(fs->cache, id, rs, r, in, (uint32_t)take, buf + done);
		} else if (in == 0 && take == rs) {
			ret = fs_store_read(fs, id, &r, 1, buf + done, NULL, NULL);
		} else {
			if (!row && !(row = malloc(rs)))
				return -ENOMEM;
			ret = fs_store_read(fs, id, &r, 1, row, NULL, NULL);
			memcpy(buf + done, row + in, take);
		}
		ret = ret < 0 ? ret : 0;
		done += take;
	}
	free(row);
	return ret;
}

/* Promise room for n rows a write is about to leave dirty in the cache.  The
 * pool holds back room for the worst case of what the promised rows may need
 * (slots, and index growth: store/slab.c), which is more than they will
 * take: when no promise can be made, write the cache back (the rows then
 * take what they really need, the rest of the promise comes back, and with a
 * spill tier the mover can move them out) and ask again. */
int rows_reserve(struct embfs *fs, uint32_t rs, int64_t n)
{
	int ret = store_space_reserve(fs->st, rs, n);
	if (ret == -ENOSPC && fs->cache && cache_flush(fs->cache, -1) == 0)
		ret = store_space_reserve(fs->st, rs, n);
	return ret;
}

uint64_t rows_batch_begin(struct embfs *fs)
{
	pthread_rwlock_rdlock(&fs->snap_rw);
	return store_batch_get(fs->st);
}

void rows_batch_end(struct embfs *fs)
{
	pthread_rwlock_unlock(&fs->snap_rw);
}

void rows_credit_end(struct embfs *fs, uint32_t rs, int64_t credit)
{
	if (credit > 0)
		store_space_reserve(fs->st, rs, -credit);
}

int rows_write(struct embfs *fs, uint32_t id, uint32_t rs, uint64_t off, size_t len, const char *data)
{
	int ret = 0;
	if (fs->cache) {
		/* room for every row it touches, before any changes: the write is
		 * refused whole (ENOSPC) or taken whole */
		int64_t credit = len ? (int64_t)((off + len - 1) / rs - off / rs + 1) : 0;
		ret = rows_reserve(fs, rs, credit);
		if (ret)
			return ret;
		uint64_t batch = rows_batch_begin(fs);
		for (size_t done = 0; done < len && !ret;) {
			uint64_t pos = off + done;
			uint32_t in = (uint32_t)(pos % rs);
			size_t take = rs - in < len - done ? rs - in : len - done;
			ret = cache_write(fs->cache, id, rs, pos / rs, in, (uint32_t)take, data + done, batch,
					  &credit);
			done += take;
		}
		rows_batch_end(fs);
		rows_credit_end(fs, rs, credit);
		if (!ret)
			ret = store_table_extend(fs->st, id, off + len);
		return ret;
	}
	size_t nrows = len ? (size_t)((off + len - 1) / rs - off / rs + 1) : 0;
	struct store_rowop *ops = calloc(nrows ? nrows : 1, sizeof(*ops));
	if (!ops)
		return -ENOMEM;
	size_t k = 0;
	for (size_t done = 0; done < len; k++) {
		uint64_t pos = off + done;
		uint32_t in = (uint32_t)(pos % rs);
		size_t take = rs - in < len - done ? rs - in : len - done;
		ops[k] = (struct store_rowop){ pos / rs, in, (uint32_t)take, data + done, 0 };
		done += take;
	}
	ret = store_rows_write(fs->st, id, ops, k, off + len);
	free(ops);
	return ret;
}

int rows_pool_failed(struct embfs *fs, int ret)
{
	char why[200];
	if ((ret != -EIO && ret != -EROFS) || !store_health(fs->st, why, sizeof(why)))
		return 0;
	if (!atomic_exchange(&fs->failure_logged, 1))
		fprintf(stderr, "embfs: %s: %s\n", fs->conf.pool, why);
	return 1;
}

int rows_sync(struct embfs *fs, int64_t id)
{
	int ret = fs->cache ? cache_flush(fs->cache, id) : 0;
	int r = store_sync(fs->st);
	ret = ret ? ret : r;
	rows_pool_failed(fs, ret);
	return ret;
}

int rows_before_change(struct embfs *fs, uint32_t id)
{
	return fs->cache ? cache_flush(fs->cache, id) : 0;
}

void rows_after_change(struct embfs *fs, uint32_t id, uint64_t from, uint64_t to)
{
	if (fs->cache)
		cache_drop(fs->cache, id, from, to);
}

uint64_t rows_count(struct embfs *fs, uint32_t id, uint64_t store_rows)
{
	struct cache_stats cs;
	if (!fs->cache)
		return store_rows;
	cache_stats_get(fs->cache, id, &cs);
	return store_rows + cs.new_dirty;
}

static int cb_fetch(void *ctx, uint32_t table, uint64_t row, void *buf, uint64_t *batch)
{
	struct embfs *fs = ctx;
	uint8_t stored = 0;
	int ret = fs_store_read(fs, table, &row, 1, buf, &stored, batch); /* buf NULL: a probe */
	return ret ? ret : stored;
}

static int cb_fetch_rows(void *ctx, uint32_t table, const uint64_t *rows, size_t n, void *buf,
			 uint8_t *stored, uint64_t *batch)
{
	struct embfs *fs = ctx;
	return fs_store_read(fs, table, rows, n, buf, stored, batch);
}

static int cb_writeback(void *ctx, uint32_t table, const struct cache_wb *rows, size_t n)
{
	struct embfs *fs = ctx;
	struct store_attr a;
	int ret = store_table_getattr(fs->st, table, &a);
	if (ret)
		return ret;
	struct store_rowop *ops = malloc(n * sizeof(*ops));
	if (!ops)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		ops[i] = (struct store_rowop){ rows[i].row, 0, a.row_size, rows[i].data, rows[i].batch };
	ret = store_rows_writeback(fs->st, table, ops, n);
	free(ops);
	if (ret && !rows_pool_failed(fs, ret)) /* a failed pool is logged once, not each round */
		fprintf(stderr, "embfs: writing back %zu rows of table %u: %s\n", n, table, strerror(-ret));
	return ret;
}

/* Writes pass their own promise as credit; this pays for the rest (a caller
 * without credit) and takes promises back. */
static int cb_reserve(void *ctx, uint32_t table, uint32_t row_size, int delta)
{
	struct embfs *fs = ctx;
	(void)table;
	return store_space_reserve(fs->st, row_size, delta);
}

/* Snapshots whose batch is below every row still only in DRAM are whole in
 * the pool: from now on they survive a crash. */
static void cb_durable_below(void *ctx, uint64_t batch)
{
	struct embfs *fs = ctx;
	uint32_t cur = 0;
	struct store_snap sn;
	while (store_snap_next(fs->st, &cur, &sn) == 1)
		if (!sn.durable && sn.batch < batch)
			store_snap_set_durable(fs->st, sn.idx, sn.gen); /* -ENOENT: dropped meanwhile */
}

const struct cache_ops embfs_cache_ops = {
	.fetch = cb_fetch,
	.fetch_rows = cb_fetch_rows,
	.writeback = cb_writeback,
	.reserve = cb_reserve,
	.durable_below = cb_durable_below,
};
