/*
 * Byte ranges of a table <-> rows, for every path that reads or changes
 * rows: READ and WRITE (fs/table.c), punch and truncate, scatters and gathers
 * (batch.c), page write-backs (pcache.c).  With a cache, a live table's rows
 * go through it and the store sees writes at write-back (group commit);
 * without one, and for a snapshot's table, rows come from the store through
 * the table's view, and a write is one store commit.
 *
 * Also the sync points (fsync, snapshot durability).  The cache reaches the
 * store through cache/below.c (cache_store_ops).
 *
 * Room for rows a write leaves dirty in the cache is promised before the
 * write (front_reserve) and handed to the cache as the write's credit, an
 * argument all the way down; what the write did not spend is given back.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embfs/front.h"

/* ---- reads -------------------------------------------------------------- */

/* Reads of at least this many bytes of consecutive rows are scans (the
 * kernel's read-ahead of a sequential reader, cat, cp, a dense gather): the
 * row cache serves what it holds but keeps none of the rest
 * (cache_read_range), and the store walks its sorted runs block by block
 * and marks no row as used (store_rows_read_range).  Smaller reads are
 * random accesses (a buffered read of one row reads ahead 16 KiB). */
#define SCAN_BYTES (128u << 10)

/* Whole rows [first, first + n) as a scan. */
static int rows_scan(struct front *f, const struct store_view *v, uint32_t rs, uint64_t first, size_t n,
		     char *buf, uint8_t *present)
{
	int ret = f->cache && !v->snap ? cache_read_range(f->cache, v->id, rs, first, n, buf, present)
					: store_rows_read_range(f->st, v, first, n, buf, NULL, present);
	return ret < 0 ? ret : 0;
}

int front_rows_get(struct front *f, const struct store_view *v, uint32_t rs, const uint64_t *ids, size_t n,
	     char *buf, uint8_t *present)
{
	if (n && (uint64_t)n * rs >= SCAN_BYTES && ids[n - 1] - ids[0] == n - 1) {
		size_t i = 1;
		while (i < n && ids[i] == ids[i - 1] + 1)
			i++;
		if (i == n)
			return rows_scan(f, v, rs, ids[0], n, buf, present);
	}
	int ret = f->cache && !v->snap ? cache_read_rows(f->cache, v->id, rs, ids, n, buf, present)
					: store_rows_read(f->st, v, ids, n, buf, present, NULL);
	return ret < 0 ? ret : 0;
}

/* Whole rows [first, first + n) into buf. */
static int rows_run(struct front *f, const struct store_view *v, uint32_t rs, uint64_t first, size_t n,
		    char *buf)
{
	uint64_t sids[64], *ids = n <= 64 ? sids : NULL;
	if (!n)
		return 0;
	if ((uint64_t)n * rs >= SCAN_BYTES)
		return rows_scan(f, v, rs, first, n, buf, NULL);
	if (!ids && !(ids = malloc(n * sizeof(*ids))))
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		ids[i] = first + i;
	int ret = front_rows_get(f, v, rs, ids, n, buf, NULL);
	if (ids != sids)
		free(ids);
	return ret;
}

/* Through the cache: runs of whole rows in one call (its misses reach the
 * store in one call: one device submission for spilled rows), the pieces of
 * rows at either end one by one. */
static int read_cached(struct front *f, const struct store_view *v, uint32_t rs, uint64_t off, size_t len,
		       char *buf)
{
	int ret = 0;
	for (size_t done = 0; done < len && !ret;) {
		uint64_t pos = off + done;
		if (pos % rs == 0 && len - done >= 2 * (size_t)rs) {
			size_t n = (len - done) / rs;
			ret = rows_run(f, v, rs, pos / rs, n, buf + done);
			done += n * rs;
			continue;
		}
		uint32_t in = (uint32_t)(pos % rs);
		size_t take = rs - in < len - done ? rs - in : len - done;
		ret = cache_read(f->cache, v->id, rs, pos / rs, in, (uint32_t)take, buf + done);
		done += take;
	}
	return ret < 0 ? ret : 0;
}

/* From the store: every row the range touches in one call (spilled rows:
 * one device submission), straight into buf when the range is whole rows. */
static int read_stored(struct front *f, const struct store_view *v, uint32_t rs, uint64_t off, size_t len,
		       char *buf)
{
	uint64_t r0 = off / rs, nr = (off + len - 1) / rs - r0 + 1;
	int whole = off % rs == 0 && len % rs == 0;
	char *rows = whole ? buf : malloc(nr * rs);
	if (!rows)
		return -ENOMEM;
	int ret = rows_run(f, v, rs, r0, nr, rows);
	if (!ret && !whole)
		memcpy(buf, rows + (off - r0 * rs), len);
	if (!whole)
		free(rows);
	return ret;
}

int front_read(struct front *f, const struct store_view *v, uint32_t rs, uint64_t off, size_t len, char *buf)
{
	if (!len)
		return 0;
	if (f->cache && !v->snap)
		return read_cached(f, v, rs, off, len, buf);
	return read_stored(f, v, rs, off, len, buf);
}

/* ---- writes ------------------------------------------------------------- */

/* The pool holds back room for the worst case of what the promised rows may
 * need (slots, and index growth: store/slab.c), which is more than they will
 * take: when no promise can be made, write the cache back (the rows then
 * take what they really need, the rest of the promise comes back, and with
 * a spill tier the mover can move them out) and ask again. */
int front_reserve(struct front *f, uint32_t id, uint32_t rs, int64_t n)
{
	int ret = store_space_reserve(f->st, id, rs, n);
	if (ret == -ENOSPC && f->cache && cache_flush(f->cache, -1) == 0)
		ret = store_space_reserve(f->st, id, rs, n);
	return ret;
}

void front_unreserve(struct front *f, uint32_t id, uint32_t rs, int64_t credit)
{
	if (credit > 0)
		store_space_reserve(f->st, id, rs, -credit);
}

/* Around writes into the cache: the batch id to stamp them with, read with
 * snap_rw held shared so that no write straddles a snapshot (front_snap_take). */
static uint64_t batch_begin(struct front *f)
{
	pthread_rwlock_rdlock(&f->snap_rw);
	return store_batch_get(f->st);
}

static void batch_end(struct front *f)
{
	pthread_rwlock_unlock(&f->snap_rw);
}

/* Rows a byte range touches. */
static uint64_t range_rows(uint32_t rs, uint64_t lo, uint64_t hi)
{
	return hi > lo ? (hi - 1) / rs - lo / rs + 1 : 0;
}

/* Rows [first, first + n) whole, from data, as one cache_write_rows. */
static int write_whole(struct front *f, uint32_t id, uint32_t rs, uint64_t first, size_t n, const char *data,
		       uint64_t batch, int64_t *credit)
{
	uint64_t *ids = malloc(n * sizeof(*ids));
	if (!ids)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		ids[i] = first + i;
	int ret = cache_write_rows(f->cache, id, rs, ids, n, data, batch, credit);
	free(ids);
	return ret;
}

/* One range into the cache: room for every row it touches is promised
 * before any changes, so the write is refused whole (ENOSPC) or taken whole. */
static int write_cached(struct front *f, uint32_t id, uint32_t rs, uint64_t off, size_t len, const char *data)
{
	int64_t credit = (int64_t)range_rows(rs, off, off + len);
	int ret = front_reserve(f, id, rs, credit);
	if (ret)
		return ret;
	uint64_t batch = batch_begin(f);
	ret = store_space_links(f->st, id); /* a snapshot since the promise */
	for (size_t done = 0; done < len && !ret;) {
		uint64_t pos = off + done;
		uint32_t in = (uint32_t)(pos % rs);
		size_t take = rs - in < len - done ? rs - in : len - done;
		size_t whole = in ? 0 : (len - done) / rs;
		if (whole > 1) { /* whole rows: one batch (their misses probed at once) */
			ret = write_whole(f, id, rs, pos / rs, whole, data + done, batch, &credit);
			take = whole * rs;
		} else {
			ret = cache_write(f->cache, id, rs, pos / rs, in, (uint32_t)take, data + done, batch, &credit);
		}
		done += take;
	}
	batch_end(f);
	front_unreserve(f, id, rs, credit);
	return ret ? ret : store_table_extend(f->st, id, off + len);
}

/* The ranges as one store commit, the size raised to the end of the last. */
static int write_stored(struct front *f, uint32_t id, uint32_t rs, const struct front_range *r, size_t nr,
			uint64_t off, const char *data)
{
	size_t nops = 0, k = 0;
	for (size_t i = 0; i < nr; i++)
		nops += range_rows(rs, r[i].lo, r[i].hi);
	struct store_rowop *ops = malloc((nops ? nops : 1) * sizeof(*ops));
	if (!ops)
		return -ENOMEM;
	for (size_t i = 0; i < nr; i++) {
		for (uint64_t pos = r[i].lo; pos < r[i].hi;) {
			uint32_t in = (uint32_t)(pos % rs);
			uint64_t take = rs - in < r[i].hi - pos ? rs - in : r[i].hi - pos;
			ops[k++] = (struct store_rowop){ pos / rs, in, (uint32_t)take, data + (pos - off), 0 };
			pos += take;
		}
	}
	int ret = store_rows_write(f->st, id, ops, k, nr ? r[nr - 1].hi : 0);
	free(ops);
	return ret;
}

/* Whole rows past the end of a table the pool holds no row of go straight
 * into a sorted run on the spill device (a bulk load: store_rows_append).
 * 1 taken, 0 not (write them through the cache), or -errno. */
static int write_bulk(struct front *f, uint32_t id, uint32_t rs, uint64_t off, size_t len, const char *data)
{
	if (off % rs || len % rs)
		return 0;
	uint64_t batch = batch_begin(f); /* its rows take the batch as a write's */
	int ret = store_rows_append(f->st, id, off / rs, len / rs, data, batch);
	batch_end(f);
	return ret;
}

int front_write_ranges(struct front *f, uint32_t id, uint32_t rs, const struct front_range *r, size_t n,
		      uint64_t off, const char *data)
{
	int ret = 0;
	if (n == 1 && (ret = write_bulk(f, id, rs, r[0].lo, r[0].hi - r[0].lo, data + (r[0].lo - off))) != 0)
		return ret < 0 ? ret : 0;
	if (!f->cache)
		return write_stored(f, id, rs, r, n, off, data);
	for (size_t i = 0; i < n && !ret; i++)
		ret = write_cached(f, id, rs, r[i].lo, r[i].hi - r[i].lo, data + (r[i].lo - off));
	return ret;
}

int front_write(struct front *f, uint32_t id, uint32_t rs, uint64_t off, size_t len, const char *data)
{
	struct front_range r = { off, off + len };
	return front_write_ranges(f, id, rs, &r, 1, off, data);
}

static int cmp_idpos(const void *a, const void *b)
{
	const struct front_idpos *x = a, *y = b;
	if (x->row != y->row)
		return x->row < y->row ? -1 : 1;
	return x->pos < y->pos ? -1 : x->pos > y->pos;
}

struct front_idpos *front_sort_ids(const uint64_t *ids, uint32_t n)
{
	struct front_idpos *v = malloc((n ? n : 1) * sizeof(*v));
	if (!v)
		return NULL;
	for (uint32_t i = 0; i < n; i++)
		v[i] = (struct front_idpos){ ids[i], i };
	qsort(v, n, sizeof(*v), cmp_idpos);
	return v;
}

/* A scatter without a cache: one group commit, the last of duplicates winning. */
static int scatter_stored(struct front *f, uint32_t id, uint32_t rs, const uint64_t *ids, const char *rows,
			  uint32_t n, uint64_t end)
{
	struct front_idpos *v = front_sort_ids(ids, n);
	struct store_rowop *ops = malloc(n * sizeof(*ops));
	int ret = -ENOMEM;
	if (v && ops) {
		size_t k = 0;
		for (uint32_t i = 0; i < n; i++) {
			if (i + 1 < n && v[i + 1].row == v[i].row)
				continue;
			ops[k++] = (struct store_rowop){ .row = v[i].row, .off = 0, .len = rs,
							 .data = rows + (size_t)v[i].pos * rs };
		}
		ret = store_rows_write(f->st, id, ops, k, end);
	}
	free(v);
	free(ops);
	return ret;
}

/* The end of the last of rows ids[0..n) of rs bytes. */
static uint64_t rows_end(const uint64_t *ids, uint32_t n, uint32_t rs)
{
	uint64_t end = 0;
	for (uint32_t i = 0; i < n; i++)
		end = (ids[i] + 1) * rs > end ? (ids[i] + 1) * rs : end;
	return end;
}

/* Rows ids[0..n) into the cache as one write: rows (row i at rows + i *
 * rs) written, or (rows NULL) each updated in place by fn; the credit
 * spent or given back, the size raised to cover them. */
static int rows_to_cache(struct front *f, uint32_t id, uint32_t rs, const uint64_t *ids, uint32_t n,
			 const char *rows, cache_update_fn *fn, void *ctx, int64_t credit)
{
	/* as a write: the batch id when it starts stamps its rows */
	uint64_t batch = batch_begin(f);
	int ret = store_space_links(f->st, id); /* a snapshot since the promise */
	if (!ret)
		ret = rows ? cache_write_rows(f->cache, id, rs, ids, n, rows, batch, &credit)
			   : cache_update_rows(f->cache, id, rs, ids, n, fn, ctx, batch, &credit);
	batch_end(f);
	front_unreserve(f, id, rs, credit);
	/* after an error some rows may be written: the size covers them all
	 * (rows not written read as holes, as in any sparse file) */
	int r = store_table_extend(f->st, id, rows_end(ids, n, rs));
	return ret ? ret : r;
}

int front_scatter(struct front *f, uint32_t id, uint32_t rs, const uint64_t *ids, const char *rows, uint32_t n,
		 int64_t credit)
{
	if (!f->cache) {
		front_unreserve(f, id, rs, credit);
		return scatter_stored(f, id, rs, ids, rows, n, rows_end(ids, n, rs));
	}
	return rows_to_cache(f, id, rs, ids, n, rows, NULL, NULL, credit);
}

int front_update(struct front *f, uint32_t id, uint32_t rs, const uint64_t *ids, uint32_t n,
		 cache_update_fn *fn, void *ctx, int64_t credit)
{
	return rows_to_cache(f, id, rs, ids, n, NULL, fn, ctx, credit);
}

/* Punch a hole: whole rows are deleted, partly covered stored rows get the
 * covered bytes zeroed.  Stored rows are found through the seek index, so a
 * huge sparse range costs what it holds, not its length. */
static int punch(struct front *f, uint32_t id, const struct store_attr *a, uint64_t off, uint64_t end)
{
	static const char zeros[EMB_ROW_MAX];
	uint32_t rs = a->row_size;
	size_t cap = 1024, n = 0;
	struct store_rowop *ops = malloc(cap * sizeof(*ops));
	if (!ops)
		return -ENOMEM;
	uint64_t r = off / rs, found;
	struct store_view v;
	int ret = store_view_live(f->st, id, &v);
	while (!ret && (ret = store_row_next(f->st, &v, r, &found)) == 1) {
		uint64_t rstart = found * rs;
		if (rstart >= end) {
			ret = 0;
			break;
		}
		uint64_t lo = rstart > off ? rstart : off;
		uint64_t hi = rstart + rs < end ? rstart + rs : end;
		if (n == cap) {
			ret = store_rows_write(f->st, id, ops, n, 0);
			n = 0;
			if (ret)
				break;
		}
		if (lo == rstart && hi == rstart + rs)
			ops[n++] = (struct store_rowop){ found, 0, 0, NULL, 0 };
		else
			ops[n++] = (struct store_rowop){ found, (uint32_t)(lo - rstart), (uint32_t)(hi - lo), zeros, 0 };
		ret = 0;
		r = found + 1;
	}
	if (ret >= 0 && n)
		ret = store_rows_write(f->st, id, ops, n, 0);
	free(ops);
	return ret < 0 ? ret : 0;
}

int front_punch(struct front *f, uint32_t id, uint64_t off, uint64_t len)
{
	struct store_attr a;
	uint64_t end = off + len < off ? UINT64_MAX : off + len;
	int ret = store_table_getattr(f->st, id, &a);
	if (!ret)
		ret = front_before_change(f, id);
	if (ret)
		return ret;
	uint64_t size_end = end > a.size ? a.size : end;
	if (off < size_end)
		ret = punch(f, id, &a, off, size_end);
	if (!ret) {
		uint64_t last = end / a.row_size + 1;
		front_after_change(f, id, off / a.row_size, last < end / a.row_size ? UINT64_MAX : last);
	}
	return ret;
}

int front_truncate(struct front *f, uint32_t id, uint64_t size)
{
	struct store_attr a;
	int ret = store_table_getattr(f->st, id, &a);
	if (!ret)
		ret = front_before_change(f, id);
	if (!ret)
		ret = store_table_truncate(f->st, id, size);
	if (!ret)
		front_after_change(f, id, size / a.row_size, UINT64_MAX);
	return ret;
}

/* ---- sync points -------------------------------------------------------- */

int front_pool_failed(struct front *f, int ret)
{
	return cache_below_failed(&f->below, ret);
}

int front_sync_table(struct front *f, int64_t id)
{
	int ret = f->cache ? cache_flush(f->cache, id) : 0;
	int r = store_sync(f->st);
	ret = ret ? ret : r;
	front_pool_failed(f, ret);
	return ret;
}

int front_sync_snap(struct front *f, uint32_t idx)
{
	struct store_snap sn;
	int ret = store_snap_get(f->st, idx, &sn);
	if (ret || sn.durable)
		return ret;
	ret = front_sync_table(f, -1);
	if (!ret)
		ret = store_snap_set_durable(f->st, idx, sn.gen);
	return ret;
}

int front_before_change(struct front *f, uint32_t id)
{
	return f->cache ? cache_flush(f->cache, id) : 0;
}

void front_after_change(struct front *f, uint32_t id, uint64_t from, uint64_t to)
{
	if (f->cache)
		cache_drop(f->cache, id, from, to);
}

void front_dropped(struct front *f, uint32_t id, const uint64_t *rows, size_t n)
{
	if (f->cache)
		cache_drop_rows(f->cache, id, rows, n);
}

uint64_t front_count(struct front *f, uint32_t id, uint64_t store_rows)
{
	struct cache_stats cs;
	if (!f->cache)
		return store_rows;
	cache_stats_get(f->cache, id, &cs);
	return store_rows + cs.new_dirty;
}
