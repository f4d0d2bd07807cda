/*
 * The cache layer as fs/ sees it: the one door below fs/.  fs/ translates
 * FUSE requests into calls of this header and calls nothing in store/;
 * the cache layer keeps DRAM rows and the pool consistent (reads and writes
 * of rows and byte ranges through the row cache, scatter, punch, truncate,
 * snapshots, sync points, the write credit) and passes the rest to the
 * store unchanged (the front_* functions below whose store_* namesake they
 * call: their contract is that function's, in embfs/store.h).
 *
 *   cache/front.c  struct front: set-up, snapshots (mkdir, rmdir), the
 *                  calls passed to the store
 *   cache/io.c     byte ranges <-> rows, scatter, punch, truncate, the
 *                  write credit, sync points
 *   cache/optim.c  PUSH: optimizers applied to rows in place (front_push)
 *
 * The types are the store's (struct store_view, store_attr, ...): the
 * vocabulary of both layers.
 */
#ifndef EMBFS_FRONT_H
#define EMBFS_FRONT_H

#include <pthread.h>

#include "embfs/batch.h"
#include "embfs/cache.h"
#include "embfs/store.h"

#define FRONT_PUSH_LOCKS 64u

struct front {
	struct store *st;
	struct cache *cache;      /* NULL with -o cache_size=0: rows go straight to the store */
	struct cache_below below; /* the row cache's ops' context (cache/below.c) */
	/* Writes into the cache hold it shared from reading the batch id until
	 * their rows are in the cache; taking a snapshot holds it exclusive while
	 * it advances the batch id and tells the cache, so no write straddles a
	 * snapshot (front_snap_take). */
	pthread_rwlock_t snap_rw;
	/* A push holds its table's (by id) from reading its rows to writing
	 * them (cache/optim.c). */
	pthread_mutex_t push_mu[FRONT_PUSH_LOCKS];
};

/* ---- cache/front.c ------------------------------------------------------- */
/* Open the pool at path (err: why not); attach its spill device; start the
 * tier's mover (after the daemon forked); close it. */
int front_open(struct front *f, const char *path, char *err, size_t errlen);
int front_spill_attach(struct front *f, const struct store_spill_conf *c, char *err, size_t errlen);
int front_spill_start(struct front *f);
void front_close(struct front *f);
/* The row cache rows go through from now on (NULL: none); conf as for
 * cache_create.  -errno. */
int front_cache_start(struct front *f, const struct cache_conf *conf);
/* Take snapshot name (mkdir of .snapshots/NAME): no write straddles it, the
 * cache keeps what it needs, its tables' row counts take in rows still only
 * in the cache.  Drop one (rmdir): the cache's preserved versions are
 * written back first. */
int front_snap_take(struct front *f, const char *name, struct store_snap *out);
int front_snap_remove(struct front *f, const char *name);

/* ---- cache/io.c: byte ranges of a table <-> rows, through the row cache
 * when there is one; the sync points ------------------------------------- */
/* Whole rows ids[0..n) of the table v names into buf (row i at buf + i * rs):
 * a live table's through the row cache when there is one, a snapshot's (or
 * without a cache) from the store.  present (may be NULL): present[i] = 1 if
 * row i is stored (or written and still in the cache), 0 for a hole. */
int front_rows_get(struct front *f, const struct store_view *v, uint32_t rs, const uint64_t *ids, size_t n,
	     char *buf, uint8_t *present);
/* Bytes [off, off + len) of the table v names (rows of rs bytes). */
int front_read(struct front *f, const struct store_view *v, uint32_t rs, uint64_t off, size_t len, char *buf);
/* data to bytes [off, off + len) of live table id: refused whole (ENOSPC)
 * or taken whole; into the cache, or one store commit without one. */
int front_write(struct front *f, uint32_t id, uint32_t rs, uint64_t off, size_t len, const char *data);
/* Byte ranges [r[i].lo, r[i].hi) (increasing) of data, whose first byte is
 * at off: as front_write() of each, but one commit without a cache. */
struct front_range {
	uint64_t lo, hi;
};
int front_write_ranges(struct front *f, uint32_t id, uint32_t rs, const struct front_range *r, size_t n,
		      uint64_t off, const char *data);
/* Whole rows (row i at rows + i * rs) to ids[0..n) of live table id, the
 * last of duplicates winning, the size raised to cover them.  credit: rows
 * of room promised for them (front_reserve), spent or given back here. */
int front_scatter(struct front *f, uint32_t id, uint32_t rs, const uint64_t *ids, const char *rows, uint32_t n,
		 int64_t credit);
/* ids[0..n) with their positions, sorted by id, then position (duplicates
 * keep their order): malloc'd, NULL for want of memory. */
struct front_idpos {
	uint64_t row;
	uint32_t pos;
};
struct front_idpos *front_sort_ids(const uint64_t *ids, uint32_t n);
/* Rows ids[0..n) (no id twice) of live table id updated in place through
 * the row cache (there must be one) by fn, as cache_update_rows(), the
 * size raised to cover them; credit as front_scatter's. */
int front_update(struct front *f, uint32_t id, uint32_t rs, const uint64_t *ids, uint32_t n,
		 cache_update_fn *fn, void *ctx, int64_t credit);
/* Punch bytes [off, off + len) of live table id (whole rows deleted, the
 * covered part of other stored rows zeroed); truncate it to size. */
int front_punch(struct front *f, uint32_t id, uint64_t off, uint64_t len);
int front_truncate(struct front *f, uint32_t id, uint64_t size);
/* Promise room for n rows of rs a write is about to leave dirty in the
 * cache: its credit for cache_write()/cache_write_rows().  front_unreserve
 * gives back what is left of a credit (no cache lock held). */
int front_reserve(struct front *f, uint32_t id, uint32_t rs, int64_t n);
void front_unreserve(struct front *f, uint32_t id, uint32_t rs, int64_t credit);
/* After a store call failed with ret: when the pool itself has failed (a
 * write-back of its file failed), log why, once; 1 if it has. */
int front_pool_failed(struct front *f, int ret);
/* Make the store see every cached write of table id (id < 0: all). */
int front_sync_table(struct front *f, int64_t id);
/* Make snapshot idx durable now (every cached row written back first). */
int front_sync_snap(struct front *f, uint32_t idx);
/* Before/after a change made in the store directly (geometry, release):
 * cached rows of id are written back before, rows [from, to) dropped after. */
int front_before_change(struct front *f, uint32_t id);
void front_after_change(struct front *f, uint32_t id, uint64_t from, uint64_t to);
/* Stored rows including written rows not yet in the store. */
/* Rows rows[0..n) of table id changed in the store behind the cache: its
 * copies go (no write-back). */
void front_dropped(struct front *f, uint32_t id, const uint64_t *rows, size_t n);
uint64_t front_count(struct front *f, uint32_t id, uint64_t store_rows);

/* ---- passed to the store: see the store_* function of the same name ------ */
uint64_t front_batch_get(struct front *f);
int front_batch_set(struct front *f, uint64_t b);
int front_dir_perm(struct front *f, enum store_dir which, struct store_dir_perm *p);
int front_dir_perm_set(struct front *f, enum store_dir which, const struct store_dir_perm *p);
int front_dir_times(struct front *f, enum store_dir which, struct store_dir_times *t);
int front_dir_touch(struct front *f, enum store_dir which);
const char *front_dtype_name(uint32_t dtype);
int front_dtype_parse(const char *name, uint32_t *dtype);
uint32_t front_dtype_size(uint32_t dtype);
int front_geometry_check(uint32_t dim, uint32_t dtype);
int front_health(struct front *f, char *why, size_t n);
int front_intent_clear(struct front *f);
int front_intent_get(struct front *f, struct store_intent *in);
int front_intent_set(struct front *f, const struct store_intent *in);
uint64_t front_max_row(uint32_t row_size);
uint64_t front_max_size(uint32_t row_size);
int front_row_hole(struct front *f, const struct store_view *v, uint64_t from, uint64_t *hole);
int front_row_next(struct front *f, const struct store_view *v, uint64_t from, uint64_t *found);
int front_rows_read(struct front *f, const struct store_view *v, const uint64_t *rows, size_t n,
		void *buf, uint8_t *stored, uint64_t *vbatch);
int front_rows_since(struct front *f, uint32_t id, uint64_t batch, uint64_t **rows, size_t *n);
int front_rows_write(struct front *f, uint32_t id, const struct store_rowop *ops, size_t n,
		uint64_t size_hint);
int front_snap_get(struct front *f, uint32_t idx, struct store_snap *out);
int front_snap_lookup(struct front *f, const char *name, struct store_snap *out);
int front_snap_next(struct front *f, uint32_t *cursor, struct store_snap *out);
int front_snap_set_durable(struct front *f, uint32_t idx, uint64_t gen);
int front_snap_table_count(struct front *f, uint32_t idx, uint32_t id, uint64_t nrows);
int front_snap_table_lookup(struct front *f, uint32_t idx, const char *name, uint32_t *id);
int front_snap_table_next(struct front *f, uint32_t idx, uint32_t *cursor, struct store_attr *a);
void front_spill_stats_get(struct front *f, struct store_spill_stats *st);
void front_stats_get(struct front *f, struct store_stats *st);
int front_sync(struct front *f);
int front_table_create(struct front *f, const char *name, uint32_t mode, uint32_t uid, uint32_t gid,
		uint32_t dim, uint32_t dtype, uint32_t *id);
int front_table_extend(struct front *f, uint32_t id, uint64_t size);
int front_table_getattr(struct front *f, uint32_t id, struct store_attr *a);
int front_table_lookup(struct front *f, const char *name, uint32_t *id);
int front_table_next(struct front *f, uint32_t *cursor, struct store_attr *a);
int front_table_release(struct front *f, uint32_t id);
int front_table_rename(struct front *f, const char *oldname, const char *newname);
int front_table_create_orphan(struct front *f, const char *label, uint32_t mode, uint32_t uid, uint32_t gid,
			      uint32_t dim, uint32_t dtype, uint32_t *id);
int front_table_replace(struct front *f, uint32_t orphan_id, uint32_t id);
int front_table_set_geometry(struct front *f, uint32_t id, uint32_t dim, uint32_t dtype);
int front_table_setattr(struct front *f, uint32_t id, const struct store_attr *a, unsigned mask);
int front_table_snaps(struct front *f, uint32_t id);
int front_table_unlink(struct front *f, const char *name);
int front_view_getattr(struct front *f, const struct store_view *v, struct store_attr *a);
int front_view_live(struct front *f, uint32_t id, struct store_view *v);
int front_view_snap(struct front *f, uint32_t snap_idx, uint32_t id, struct store_view *v);

/* ---- cache/optim.c: PUSH ---------------------------------------------- */
/* The state columns optimizer optim keeps after dim weights; -1 unknown. */
int front_push_state_cols(uint32_t optim, uint32_t dim);
/* 0 if push p (host order) fits a table of dtype with row_cols columns:
 * a float dtype, a known optimizer whose weights and state fit, sane
 * hyper-parameters and init spec; else -EINVAL. */
int front_push_check(const struct embfs_batch_push *p, uint32_t dtype, uint32_t row_cols);
/* 0 if init spec in (host order) is sane for a table of dtype (a float
 * dtype); else -EINVAL.  front_init_rows: rows i of buf (rs bytes each)
 * with present[i] 0 set to row ids[i]'s initial values. */
int front_init_check(const struct embfs_batch_init *in, uint32_t dtype);
void front_init_rows(const struct embfs_batch_init *in, uint32_t dtype, uint32_t rs, const uint64_t *ids,
		     size_t n, const uint8_t *present, char *buf);
/* 1 if none of v[0..n) is NaN or infinite. */
int front_finite(const float *v, size_t n);
/* Apply gradients grads (n rows of p->dim f32) to rows ids[0..n) of live
 * table id (rows of rs bytes of dtype), p checked by front_push_check:
 * duplicates' gradients summed, each row read, updated and written whole
 * under the table's push lock (rows never stored start from p's init
 * spec), the size raised to cover them.  The gradients are finite: the
 * caller refuses a request with a NaN or Inf one (front_finite) before
 * anything changes.  credit as front_scatter's. */
int front_push(struct front *f, uint32_t id, uint32_t rs, uint32_t dtype, const uint64_t *ids, uint32_t n,
	       const struct embfs_batch_push *p, const float *grads, int64_t credit);

#endif
