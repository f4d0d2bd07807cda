/*
 * cache/front.c: struct front's set-up and tear-down, snapshots taken and
 * dropped consistently with the row cache, and the calls fs/ makes that
 * need nothing of the cache, passed to the store (embfs/front.h).
 */
#include <errno.h>
#include <string.h>

#include "embfs/front.h"

int front_open(struct front *f, const char *path, char *err, size_t errlen)
{
	memset(f, 0, sizeof(*f));
	pthread_rwlock_init(&f->snap_rw, NULL);
	for (unsigned i = 0; i < FRONT_PUSH_LOCKS; i++)
		pthread_mutex_init(&f->push_mu[i], NULL);
	int ret = store_open(path, &f->st, err, errlen);
	if (ret)
		return ret;
	f->below.st = f->st;
	f->below.pool = path;
	return 0;
}

int front_spill_attach(struct front *f, const struct store_spill_conf *c, char *err, size_t errlen)
{
	return store_spill_attach(f->st, c, err, errlen);
}

int front_spill_start(struct front *f)
{
	return store_spill_start(f->st);
}

int front_cache_start(struct front *f, const struct cache_conf *conf)
{
	f->cache = cache_create(conf, &cache_store_ops, &f->below);
	return f->cache ? 0 : -ENOMEM;
}

void front_close(struct front *f)
{
	if (f->cache)
		cache_destroy(f->cache);
	f->cache = NULL;
	if (f->st)
		store_close(f->st);
	f->st = NULL;
	pthread_rwlock_destroy(&f->snap_rw);
	for (unsigned i = 0; i < FRONT_PUSH_LOCKS; i++)
		pthread_mutex_destroy(&f->push_mu[i]);
}

int front_snap_take(struct front *f, const char *name, struct store_snap *sn)
{
	/* no write into the cache may read the old batch id and land after the
	 * cache learns of the snapshot: it would overwrite a row the snapshot
	 * needs without keeping a copy */
	pthread_rwlock_wrlock(&f->snap_rw);
	int ret = store_snap_create(f->st, name, f->cache == NULL, sn);
	if (!ret && f->cache) {
		cache_set_snapshot(f->cache, sn->batch);
		/* its tables' row counts (st_blocks) take in the rows still only
		 * in the cache: no write lands meanwhile (snap_rw) */
		uint32_t cur = 0;
		struct store_attr a;
		while (store_snap_table_next(f->st, sn->idx, &cur, &a) == 1) {
			uint64_t n = front_count(f, a.id, a.nrows);
			if (n != a.nrows)
				store_snap_table_count(f->st, sn->idx, a.id, n);
		}
	}
	pthread_rwlock_unlock(&f->snap_rw);
	if (ret)
		front_pool_failed(f, ret);
	return ret;
}

int front_snap_remove(struct front *f, const char *name)
{
	/* the drop frees versions nothing else holds: their bytes must all be in
	 * the pool, so write the cache's preserved versions back first */
	int ret = f->cache ? cache_flush(f->cache, -1) : 0;
	return ret ? ret : store_snap_drop(f->st, name);
}

/* ---- passed to the store ------------------------------------------------- */

uint64_t front_batch_get(struct front *f)
{
	return store_batch_get(f->st);
}

int front_batch_set(struct front *f, uint64_t b)
{
	return store_batch_set(f->st, b);
}

int front_dir_perm(struct front *f, enum store_dir which, struct store_dir_perm *p)
{
	return store_dir_perm(f->st, which, p);
}

int front_dir_perm_set(struct front *f, enum store_dir which, const struct store_dir_perm *p)
{
	return store_dir_perm_set(f->st, which, p);
}

int front_dir_times(struct front *f, enum store_dir which, struct store_dir_times *t)
{
	return store_dir_times(f->st, which, t);
}

int front_dir_touch(struct front *f, enum store_dir which)
{
	return store_dir_touch(f->st, which);
}

const char *front_dtype_name(uint32_t dtype)
{
	return store_dtype_name(dtype);
}

int front_dtype_parse(const char *name, uint32_t *dtype)
{
	return store_dtype_parse(name, dtype);
}

uint32_t front_dtype_size(uint32_t dtype)
{
	return store_dtype_size(dtype);
}

int front_geometry_check(uint32_t dim, uint32_t dtype)
{
	return store_geometry_check(dim, dtype);
}

int front_health(struct front *f, char *why, size_t n)
{
	return store_health(f->st, why, n);
}

int front_intent_clear(struct front *f)
{
	return store_intent_clear(f->st);
}

int front_intent_get(struct front *f, struct store_intent *in)
{
	return store_intent_get(f->st, in);
}

int front_intent_set(struct front *f, const struct store_intent *in)
{
	return store_intent_set(f->st, in);
}

uint64_t front_max_row(uint32_t row_size)
{
	return store_max_row(row_size);
}

uint64_t front_max_size(uint32_t row_size)
{
	return store_max_size(row_size);
}

int front_row_hole(struct front *f, const struct store_view *v, uint64_t from, uint64_t *hole)
{
	return store_row_hole(f->st, v, from, hole);
}

int front_row_next(struct front *f, const struct store_view *v, uint64_t from, uint64_t *found)
{
	return store_row_next(f->st, v, from, found);
}

int front_rows_read(struct front *f, const struct store_view *v, const uint64_t *rows, size_t n, void *buf, uint8_t *stored, uint64_t *vbatch)
{
	return store_rows_read(f->st, v, rows, n, buf, stored, vbatch);
}

int front_rows_since(struct front *f, uint32_t id, uint64_t batch, uint64_t **rows, size_t *n)
{
	return store_rows_since(f->st, id, batch, rows, n);
}

int front_rows_write(struct front *f, uint32_t id, const struct store_rowop *ops, size_t n, uint64_t size_hint)
{
	return store_rows_write(f->st, id, ops, n, size_hint);
}

int front_snap_get(struct front *f, uint32_t idx, struct store_snap *out)
{
	return store_snap_get(f->st, idx, out);
}

int front_snap_lookup(struct front *f, const char *name, struct store_snap *out)
{
	return store_snap_lookup(f->st, name, out);
}

int front_snap_next(struct front *f, uint32_t *cursor, struct store_snap *out)
{
	return store_snap_next(f->st, cursor, out);
}

int front_snap_set_durable(struct front *f, uint32_t idx, uint64_t gen)
{
	return store_snap_set_durable(f->st, idx, gen);
}

int front_snap_table_count(struct front *f, uint32_t idx, uint32_t id, uint64_t nrows)
{
	return store_snap_table_count(f->st, idx, id, nrows);
}

int front_snap_table_lookup(struct front *f, uint32_t idx, const char *name, uint32_t *id)
{
	return store_snap_table_lookup(f->st, idx, name, id);
}

int front_snap_table_next(struct front *f, uint32_t idx, uint32_t *cursor, struct store_attr *a)
{
	return store_snap_table_next(f->st, idx, cursor, a);
}

void front_spill_stats_get(struct front *f, struct store_spill_stats *st)
{
	store_spill_stats_get(f->st, st);
}

void front_stats_get(struct front *f, struct store_stats *st)
{
	store_stats_get(f->st, st);
}

int front_sync(struct front *f)
{
	return store_sync(f->st);
}

int front_table_create(struct front *f, const char *name, uint32_t mode, uint32_t uid, uint32_t gid, uint32_t dim, uint32_t dtype, uint32_t *id)
{
	return store_table_create(f->st, name, mode, uid, gid, dim, dtype, id);
}

int front_table_extend(struct front *f, uint32_t id, uint64_t size)
{
	return store_table_extend(f->st, id, size);
}

int front_table_getattr(struct front *f, uint32_t id, struct store_attr *a)
{
	return store_table_getattr(f->st, id, a);
}

int front_table_lookup(struct front *f, const char *name, uint32_t *id)
{
	return store_table_lookup(f->st, name, id);
}

int front_table_next(struct front *f, uint32_t *cursor, struct store_attr *a)
{
	return store_table_next(f->st, cursor, a);
}

int front_table_release(struct front *f, uint32_t id)
{
	return store_table_release(f->st, id);
}

int front_table_rename(struct front *f, const char *oldname, const char *newname)
{
	return store_table_rename(f->st, oldname, newname);
}

int front_table_create_orphan(struct front *f, const char *label, uint32_t mode, uint32_t uid, uint32_t gid,
			      uint32_t dim, uint32_t dtype, uint32_t *id)
{
	return store_table_create_orphan(f->st, label, mode, uid, gid, dim, dtype, id);
}

int front_table_replace(struct front *f, uint32_t orphan_id, uint32_t id)
{
	return store_table_replace(f->st, orphan_id, id);
}

int front_table_set_geometry(struct front *f, uint32_t id, uint32_t dim, uint32_t dtype)
{
	return store_table_set_geometry(f->st, id, dim, dtype);
}

int front_table_setattr(struct front *f, uint32_t id, const struct store_attr *a, unsigned mask)
{
	return store_table_setattr(f->st, id, a, mask);
}

int front_table_snaps(struct front *f, uint32_t id)
{
	return store_table_snaps(f->st, id);
}

int front_table_unlink(struct front *f, const char *name)
{
	return store_table_unlink(f->st, name);
}

int front_view_getattr(struct front *f, const struct store_view *v, struct store_attr *a)
{
	return store_view_getattr(f->st, v, a);
}

int front_view_live(struct front *f, uint32_t id, struct store_view *v)
{
	return store_view_live(f->st, id, v);
}

int front_view_snap(struct front *f, uint32_t snap_idx, uint32_t id, struct store_view *v)
{
	return store_view_snap(f->st, snap_idx, id, v);
}
