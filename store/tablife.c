/*
 * A table's life beyond its catalog entry: truncation (trim: delete the rows
 * past the new size through commits, restartable from trim_from), geometry
 * changes while it holds no rows, its size growing with writes, and its
 * release after the last close of an unlinked table (rows only snapshots
 * hold stay, as a zombie; everything else is freed).  Mount finishes an
 * interrupted truncate or release (table_recover).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"
#include "tier/tier.h"

struct collect {
	struct store *s;
	struct stable *st;
	uint64_t from;
	struct u64vec keys;
};

static int collect_from(void *arg, uint64_t key, uint64_t val)
{
	struct collect *c = arg;
	struct chain ch;
	if (chain_start(c->s, c->st, key, val, &ch))
		return -EIO; /* the row id the walk read is not to be trusted */
	return key < c->from ? 0 : u64vec_push(&c->keys, key);
}

/* Drop every row at or past t->trim_from bytes: zero the tail of a partial
 * last row, delete the rows after it, then clear trim_from.  commit_lock held. */
int trim_locked(struct store *s, struct stable *st)
{
	struct emb_table *t = st->t;
	uint64_t lim = t->trim_from, rs = t->row_size;
	int ret = 0;
	if (lim == EMB_NONE)
		return 0;
	/* the row the new end cuts keeps its head, zeros after the end -- if it
	 * exists: the pool's newest version decides (a tombstone says it does
	 * not, whatever a run holds), and only when the pool has none, a run */
	int last = 0;
	if (lim % rs) {
		struct emb_version *v;
		int decided;
		ret = chain_find(s, st, lim / rs, EMB_NONE, &v, &decided);
		if (ret)
			return ret;
		last = v != NULL;
		if (!decided && runs_may_hold(s, st->id, lim / rs)) {
			ret = runs_row_read(s, st, lim / rs, NULL);
			if (ret < 0)
				return ret;
			last = ret > 0; /* only a run holds it */
			ret = 0;
		}
	}
	if (last) {
		static const char zeros[EMB_ROW_MAX];
		struct store_rowop op = { lim / rs, (uint32_t)(lim % rs), (uint32_t)(rs - lim % rs), zeros, 0 };
		ret = commit_locked(s, st, &op, 1, 0, 0);
		if (ret)
			return ret;
	}
	struct collect c = { s, st, (lim + rs - 1) / rs, { 0 } };
	ret = runs_trim(s, st, c.from);
	if (!ret)
		ret = index_walk(s, st, collect_from, &c);
	/* in groups of TRIM_GROUP rows: a group is planned whole in DRAM, and a
	 * trim interrupted by an error or a crash starts again from trim_from */
	enum { TRIM_GROUP = 65536 };
	for (size_t at = 0; !ret && at < c.keys.n; at += TRIM_GROUP) {
		size_t k = c.keys.n - at < TRIM_GROUP ? c.keys.n - at : TRIM_GROUP;
		struct store_rowop *ops = calloc(k, sizeof(*ops));
		if (!ops) {
			ret = -ENOMEM;
			break;
		}
		for (size_t i = 0; i < k; i++)
			ops[i].row = c.keys.v[at + i];
		ret = commit_locked(s, st, ops, k, 0, COMMIT_RUNS_HIDDEN);
		free(ops);
	}
	free(c.keys.v);
	if (ret)
		return ret;
	return catalog_trim_done(s, st);
}

int store_table_set_geometry(struct store *s, uint32_t id, uint32_t dim, uint32_t dtype)
{
	if (pm_writable(s))
		return -EROFS; /* the pool failed (pm.c) */
	volatile int ret = bulk_settle(s, id, EMB_NONE); /* its rows count */
	if (!ret)
		ret = store_geometry_check(dim, dtype);
	if (ret)
		return ret;
	/* lock order (store_int.h): commit_lock, snap_lock, cat_lock */
	pthread_mutex_lock(&s->commit_lock);
	pthread_rwlock_rdlock(&s->snap_lock);
	pthread_rwlock_wrlock(&s->cat_lock);
	struct stable *st = tab_get(s, id);
	if (!st) {
		ret = -ENOENT;
		goto out;
	}
	struct emb_table *t = st->t;
	/* rows of the same size are only read otherwise; rows of another
	 * size would have to be cut again (fs/relay.c does it, into a new
	 * table) */
	int same = dim * store_dtype_size(dtype) == t->row_size;
	if (snapset_refs(s, st) || (!same && (t->nrows || runs_count(s, id, NULL)))) {
		ret = -EBUSY;
		goto out;
	}
	META_TX(s) {
		pmemobj_tx_add_range_direct(t, offsetof(struct emb_table, dir_off));
		t->dim = dim;
		t->dtype = dtype;
		t->row_size = dim * store_dtype_size(dtype);
		t->ctime_ns = now_ns();
		catalog_seal_tx(t);
	} META_TX_END(s, ret);
out:
	pthread_rwlock_unlock(&s->cat_lock);
	pthread_rwlock_unlock(&s->snap_lock);
	pthread_mutex_unlock(&s->commit_lock);
	return ret;
}

/* An unlinked table nobody has open: keep only what live snapshots hold (a
 * zombie), or free it whole.  commit_lock held. */
static int release_locked(struct store *s, struct stable *st)
{
	volatile int ret = 0;
	if (!(st->t->flags & EMB_T_ZOMBIE)) {
		/* a catalog entry: cat_lock (stats and listings read the flags
		 * under it shared) */
		pthread_rwlock_wrlock(&s->cat_lock);
		META_TX(s) {
			pmemobj_tx_add_range_direct(&st->t->flags, 4);
			st->t->flags |= EMB_T_ZOMBIE;
			catalog_seal_tx(st->t);
		} META_TX_END(s, ret);
		pthread_rwlock_unlock(&s->cat_lock);
		if (ret)
			return ret;
	}
	/* a snapshot may be taken meanwhile (snap_lock, not commit_lock) */
	pthread_rwlock_rdlock(&s->snap_lock);
	int snaps = s->n_live != 0;
	pthread_rwlock_unlock(&s->snap_lock);
	if (snaps) /* rows only snapshots hold now count as theirs */
		return snap_reclaim_all(s);
	ret = reclaim_table(s, st, 0);
	if (ret == 0 && !(ret = runs_drop_table(s, st)))
		ret = catalog_free_locked(s, st);
	return ret < 0 ? ret : 0;
}

int store_table_release(struct store *s, uint32_t id)
{
	if (pm_writable(s))
		return -EROFS; /* the pool failed (pm.c) */
	int r = bulk_settle(s, id, EMB_NONE); /* its open bulk run is installed, then dropped with it */
	if (r)
		return r;
	pthread_mutex_lock(&s->commit_lock);
	struct stable *st = tab_get(s, id);
	int ret = 0;
	if (st && (st->t->flags & EMB_T_ORPHAN))
		ret = release_locked(s, st);
	pthread_mutex_unlock(&s->commit_lock);
	return ret;
}

int store_table_truncate(struct store *s, uint32_t id, uint64_t size)
{
	if (pm_writable(s))
		return -EROFS; /* the pool failed (pm.c) */
	volatile int ret = bulk_settle(s, id, EMB_NONE); /* the rows it cuts must be in runs */
	if (ret)
		return ret;
	pthread_mutex_lock(&s->commit_lock);
	struct stable *st = tab_get(s, id);
	if (!st) {
		ret = -ENOENT;
		goto out;
	}
	struct emb_table *t = st->t;
	if (size > store_max_size(t->row_size)) {
		ret = -EFBIG;
		goto out;
	}
	int shrink = size < t->size;
	META_TX(s) {
		pmemobj_tx_add_range_direct(&t->size, offsetof(struct emb_table, dir_off) -
							  offsetof(struct emb_table, size));
		pmemobj_tx_add_range_direct(&t->trim_from, 8);
		uint64_t now = now_ns();
		st64(&t->size, size); /* getattr reads these without the commit lock */
		st64(&t->mtime_ns, now);
		st64(&t->ctime_ns, now);
		if (shrink) {
			t->trim_from = size;
			catalog_seal_tx(t);
		}
	} META_TX_END(s, ret);
	if (!ret && shrink)
		ret = trim_locked(s, st);
out:
	pthread_mutex_unlock(&s->commit_lock);
	return ret;
}

/* After a crash: finish interrupted truncates, free unlinked tables. */
int table_recover(struct store *s)
{
	int ret = 0;
	pthread_mutex_lock(&s->commit_lock);
	for (uint32_t i = 0; i < EMB_NTABLES && !ret; i++) {
		struct stable *st = s->tab[i];
		if (!st)
			continue;
		if (st->t->flags & EMB_T_ORPHAN) {
			ret = release_locked(s, st);
		} else if (st->t->trim_from != EMB_NONE) {
			ret = trim_locked(s, st);
		}
	}
	pthread_mutex_unlock(&s->commit_lock);
	return ret;
}

int store_table_extend(struct store *s, uint32_t id, uint64_t size)
{
	if (pm_writable(s))
		return -EROFS; /* the pool failed (pm.c) */
	struct stable *st = tab_get(s, id);
	if (!st)
		return -ENOENT;
	table_extend(s, st, size);
	return 0;
}
