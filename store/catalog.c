/*
 * Table catalog: fixed 512-byte entries in chunks of 256, allocated as
 * tables are created.  Entry changes other than size/times/row count (which
 * commits publish with 8-byte stores) run in libpmemobj transactions.  A DRAM
 * name hash is built at mount from the catalog: O(tables), never O(rows).
 *
 * Each entry's csum (XXH64) covers everything but size, nrows, the times and
 * itself: flags, mode, owner, geometry, index root, trim_from, nsegs, name.
 * Every transaction that changes those recomputes it (catalog_seal_tx, under
 * meta_lock).  A free entry carries the checksum of an all-zero entry:
 * entries are sealed free when their chunk is allocated and when a table is
 * freed, so a zeroed block of the catalog is not taken for free slots.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "store_int.h"
#include "tier/tier.h"

#define NAME_BUCKETS 65536u

static const struct {
	const char *name;
	uint32_t size;
} dtypes[EMB_DT_COUNT] = {
	[EMB_DT_F32] = { "f32", 4 }, [EMB_DT_F16] = { "f16", 2 }, [EMB_DT_BF16] = { "bf16", 2 },
	[EMB_DT_I8] = { "i8", 1 },   [EMB_DT_U8] = { "u8", 1 },   [EMB_DT_F64] = { "f64", 8 },
	[EMB_DT_I16] = { "i16", 2 }, [EMB_DT_I32] = { "i32", 4 },
};

int store_dtype_parse(const char *name, uint32_t *dtype)
{
	for (uint32_t i = 0; i < EMB_DT_COUNT; i++)
		if (strcmp(name, dtypes[i].name) == 0) {
			*dtype = i;
			return 0;
		}
	return -EINVAL;
}

const char *store_dtype_name(uint32_t dtype)
{
	return dtype < EMB_DT_COUNT ? dtypes[dtype].name : "?";
}

uint32_t store_dtype_size(uint32_t dtype)
{
	return dtype < EMB_DT_COUNT ? dtypes[dtype].size : 0;
}

uint64_t store_max_row(uint32_t row_size)
{
	return row_id_max(row_size);
}

uint64_t store_max_size(uint32_t row_size)
{
	return (store_max_row(row_size) + 1) * row_size;
}

int store_geometry_check(uint32_t dim, uint32_t dtype)
{
	if (dtype >= EMB_DT_COUNT || dim == 0 || (uint64_t)dim * dtypes[dtype].size > EMB_ROW_MAX)
		return -EINVAL;
	return 0;
}

static int name_check(const char *name)
{
	size_t n = strlen(name);
	if (n == 0 || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, ".."))
		return -EINVAL;
	if (n > EMB_NAME_MAX)
		return -ENAMETOOLONG;
	return 0;
}

static size_t name_hash(const char *name)
{
	return (size_t)XXH3_64bits(name, strlen(name)) & (NAME_BUCKETS - 1);
}

static struct stable *name_find(struct store *s, const char *name)
{
	for (struct stable *st = s->names[name_hash(name)]; st; st = st->name_next)
		if (strcmp(st->t->name, name) == 0)
			return st;
	return NULL;
}

static void name_insert(struct store *s, struct stable *st)
{
	size_t h = name_hash(st->t->name);
	st->name_next = s->names[h];
	s->names[h] = st;
}

static void name_remove(struct store *s, struct stable *st)
{
	for (struct stable **pp = &s->names[name_hash(st->t->name)]; *pp; pp = &(*pp)->name_next)
		if (*pp == st) {
			*pp = st->name_next;
			return;
		}
}

/* Entry k of catalog chunk c is damaged: why. */
static int entry_bad(char *err, size_t n, uint32_t id, const char *why)
{
	return store_err(err, n, -EIO, "catalog entry %u is damaged (%s)", id, why);
}

int catalog_check(struct store *s, char *err, size_t n)
{
	static const struct emb_table zero;
	uint64_t free_sum = catalog_entry_csum(&zero);
	for (uint32_t c = 0; c < EMB_CAT_CHUNKS; c++) {
		if (!s->sb->cat_chunks[c])
			continue;
		const struct emb_table *tab = S_PTR(s, s->sb->cat_chunks[c]);
		for (uint32_t k = 0; k < EMB_CAT_PER_CHUNK; k++) {
			const struct emb_table *t = &tab[k];
			uint32_t id = c * EMB_CAT_PER_CHUNK + k;
			if (!(t->flags & EMB_T_USED)) {
				if (t->flags || t->csum != free_sum)
					return entry_bad(err, n, id, "checksum mismatch");
				continue;
			}
			if (t->csum != catalog_entry_csum(t))
				return entry_bad(err, n, id, "checksum mismatch");
			if (t->flags & ~(EMB_T_USED | EMB_T_ORPHAN | EMB_T_ZOMBIE | EMB_T_DYING) ||
			    ((t->flags & EMB_T_ZOMBIE) && !(t->flags & EMB_T_ORPHAN)) ||
			    ((t->flags & EMB_T_DYING) && !(t->flags & EMB_T_ORPHAN)))
				return entry_bad(err, n, id, "flags");
			if (store_geometry_check(t->dim, t->dtype) || t->row_size != t->dim * store_dtype_size(t->dtype))
				return entry_bad(err, n, id, "geometry");
			if (!memchr(t->name, 0, sizeof(t->name)) || name_check(t->name))
				return entry_bad(err, n, id, "name");
			char why[200];
			if (index_check(s, t, why, sizeof(why)))
				return store_err(err, n, -EIO, "table '%.64s' (catalog entry %u): %s", t->name, id, why);
		}
	}
	return 0;
}

static struct emb_table *entry(struct store *s, uint32_t id)
{
	uint64_t off = s->sb->cat_chunks[id / EMB_CAT_PER_CHUNK];
	if (!off)
		return NULL;
	return (struct emb_table *)S_PTR(s, off) + id % EMB_CAT_PER_CHUNK;
}

static struct stable *stable_new(struct store *s, uint32_t id, struct emb_table *t)
{
	struct stable *st = calloc(1, sizeof(*st));
	if (!st)
		return NULL;
	st->id = id;
	st->t = t;
	pthread_rwlock_init(&st->lock, NULL);
	pthread_mutex_init(&st->seek_lock, NULL);
	pthread_mutex_init(&st->kf_mu, NULL);
	if (index_load(s, st)) {
		free(st);
		return NULL;
	}
	__atomic_store_n(&s->tab[id], st, __ATOMIC_RELEASE);
	return st;
}

static void stable_free(struct store *s, struct stable *st)
{
	__atomic_store_n(&s->tab[st->id], NULL, __ATOMIC_RELEASE);
	index_unload(st);
	free(st->live_keys.v);
	free(st->snap_keys.v);
	free(st->live_keys.rg);
	free(st->snap_keys.rg);
	index_kf_free(st);
	pthread_rwlock_destroy(&st->lock);
	pthread_mutex_destroy(&st->seek_lock);
	pthread_mutex_destroy(&st->kf_mu);
	free(st);
}

int catalog_load(struct store *s)
{
	s->tab = calloc(EMB_NTABLES, sizeof(*s->tab));
	s->names = calloc(NAME_BUCKETS, sizeof(*s->names));
	if (!s->tab || !s->names)
		return -ENOMEM;
	for (uint32_t c = 0; c < EMB_CAT_CHUNKS; c++) {
		if (!s->sb->cat_chunks[c])
			continue;
		for (uint32_t k = 0; k < EMB_CAT_PER_CHUNK; k++) {
			uint32_t id = c * EMB_CAT_PER_CHUNK + k;
			struct emb_table *t = entry(s, id);
			if (!(t->flags & EMB_T_USED))
				continue;
			if (t->row_size == 0 || t->row_size > EMB_ROW_MAX ||
			    memchr(t->name, 0, sizeof(t->name)) == NULL)
				return -EIO; /* store_validate() said why */
			struct stable *st = stable_new(s, id, t);
			if (!st)
				return -ENOMEM;
			if (!(t->flags & EMB_T_ORPHAN))
				name_insert(s, st);
			if (st->segs) {
				atomic_fetch_add(&s->idx_segs, t->nsegs);
				atomic_fetch_add(&s->idx_large, index_large(st));
				atomic_fetch_add(&s->idx_dir_bytes, sizeof(struct emb_dir) + (8ull << st->gd));
			}
		}
	}
	return 0;
}

void catalog_unload(struct store *s)
{
	if (s->tab)
		for (uint32_t i = 0; i < EMB_NTABLES; i++)
			if (s->tab[i])
				stable_free(s, s->tab[i]);
	free(s->tab);
	free(s->names);
	s->tab = NULL;
	s->names = NULL;
}

/* Free slot, allocating a chunk if all are taken.  cat_lock held. */
static int slot_find(struct store *s, uint32_t *id)
{
	for (volatile uint32_t c = 0; c < EMB_CAT_CHUNKS; c++) {
		if (!s->sb->cat_chunks[c]) {
			volatile int ret = 0;
			static const struct emb_table zero;
			uint64_t free_sum = catalog_entry_csum(&zero);
			META_TX(s) {
				PMEMoid o = pmemobj_tx_zalloc(EMB_CHUNK_ALLOC, 0);
				struct emb_table *tab = pmemobj_direct(o);
				for (uint32_t k = 0; k < EMB_CAT_PER_CHUNK; k++)
					tab[k].csum = free_sum;
				pmemobj_persist(s->pop, tab, EMB_CAT_PER_CHUNK * sizeof(*tab));
				pmemobj_tx_add_range_direct(&s->sb->cat_chunks[c], 8);
				s->sb->cat_chunks[c] = o.off;
				super_seal_tx(s);
			} META_TX_END(s, ret);
			if (ret)
				return ret;
		}
		for (uint32_t k = 0; k < EMB_CAT_PER_CHUNK; k++) {
			uint32_t i = c * EMB_CAT_PER_CHUNK + k;
			if (!(entry(s, i)->flags & EMB_T_USED) && !s->tab[i]) {
				*id = i;
				return 0;
			}
		}
	}
	return -ENOSPC;
}

/* A new table; orphan: unlinked from the start (no name in the tree; freed
 * at its release or at mount after a crash), name kept only as its label. */
static int table_create(struct store *s, const char *name, int orphan, uint32_t mode, uint32_t uid,
			uint32_t gid, uint32_t dim, uint32_t dtype, uint32_t *id)
{
	if (pm_writable(s))
		return -EROFS; /* the pool failed (pm.c) */
	int ret = name_check(name);
	if (ret)
		return ret;
	if (store_geometry_check(dim, dtype))
		return -EINVAL;
	pthread_rwlock_wrlock(&s->cat_lock);
	if (!orphan && name_find(s, name)) {
		ret = -EEXIST;
		goto out;
	}
	ret = slot_find(s, id);
	if (ret)
		goto out;
	struct emb_table *volatile t = entry(s, *id);
	uint64_t now = now_ns();
	META_TX(s) {
		pmemobj_tx_add_range_direct(t, sizeof(*t));
		pmemobj_tx_add_range_direct(&s->sb->next_gen, 8);
		memset(t, 0, sizeof(*t));
		t->gen = ++s->sb->next_gen;
		t->mode = mode;
		t->uid = uid;
		t->gid = gid;
		t->dim = dim;
		t->dtype = dtype;
		t->row_size = dim * store_dtype_size(dtype);
		t->atime_ns = t->mtime_ns = t->ctime_ns = now;
		t->trim_from = EMB_NONE;
		strcpy(t->name, name);
		t->flags = EMB_T_USED | (orphan ? EMB_T_ORPHAN : 0);
		catalog_seal_tx(t);
		super_seal_tx(s);
	} META_TX_END(s, ret);
	if (ret)
		goto out;
	struct stable *st = stable_new(s, *id, t);
	if (!st) {
		ret = -ENOMEM;
		goto out;
	}
	if (!orphan)
		name_insert(s, st);
out:
	pthread_rwlock_unlock(&s->cat_lock);
	return ret;
}

int store_table_create(struct store *s, const char *name, uint32_t mode, uint32_t uid,
		       uint32_t gid, uint32_t dim, uint32_t dtype, uint32_t *id)
{
	return table_create(s, name, 0, mode, uid, gid, dim, dtype, id);
}

int store_table_create_orphan(struct store *s, const char *label, uint32_t mode, uint32_t uid,
			      uint32_t gid, uint32_t dim, uint32_t dtype, uint32_t *id)
{
	return table_create(s, label, 1, mode, uid, gid, dim, dtype, id);
}

int store_table_lookup(struct store *s, const char *name, uint32_t *id)
{
	pthread_rwlock_rdlock(&s->cat_lock);
	struct stable *st = name_find(s, name);
	if (st)
		*id = st->id;
	pthread_rwlock_unlock(&s->cat_lock);
	return st ? 0 : -ENOENT;
}

static void fill_attr(struct stable *st, struct store_attr *a)
{
	struct emb_table *t = st->t;
	a->id = st->id;
	a->gen = t->gen;
	a->mode = t->mode;
	a->uid = t->uid;
	a->gid = t->gid;
	a->dim = t->dim;
	a->row_size = t->row_size;
	a->dtype = t->dtype;
	a->size = ld64(&t->size);
	/* rows on the device, counted once per run holding them */
	a->nrows = ld64(&t->nrows) + atomic_load(&st->run_live);
	a->atime_ns = ld64(&t->atime_ns);
	a->mtime_ns = ld64(&t->mtime_ns);
	a->ctime_ns = ld64(&t->ctime_ns);
	a->orphan = !!(t->flags & EMB_T_ORPHAN);
	memcpy(a->name, t->name, sizeof(a->name));
}

int store_table_getattr(struct store *s, uint32_t id, struct store_attr *a)
{
	pthread_rwlock_rdlock(&s->cat_lock);
	struct stable *st = tab_get(s, id);
	if (st)
		fill_attr(st, a);
	pthread_rwlock_unlock(&s->cat_lock);
	return st ? 0 : -ENOENT;
}

int store_table_setattr(struct store *s, uint32_t id, const struct store_attr *a, unsigned mask)
{
	if (pm_writable(s))
		return -EROFS; /* the pool failed (pm.c) */
	volatile int ret = 0;
	pthread_rwlock_wrlock(&s->cat_lock);
	struct stable *st = tab_get(s, id);
	if (!st) {
		ret = -ENOENT;
		goto out;
	}
	struct emb_table *t = st->t;
	/* The transaction covers the checksummed fields it changes (up to
	 * size), not size, nrows and the times: commits and extends change
	 * those atomically without cat_lock, and a transaction's undo would
	 * put back stale copies.  The times are set atomically too, after it. */
	if (mask & (STORE_SET_MODE | STORE_SET_UID | STORE_SET_GID)) {
		META_TX(s) {
			pmemobj_tx_add_range_direct(t, offsetof(struct emb_table, size));
			if (mask & STORE_SET_MODE)
				t->mode = a->mode;
			if (mask & STORE_SET_UID)
				t->uid = a->uid;
			if (mask & STORE_SET_GID)
				t->gid = a->gid;
			catalog_seal_tx(t);
		} META_TX_END(s, ret);
		if (ret)
			goto out;
	}
	if (mask & STORE_SET_ATIME)
		st64(&t->atime_ns, a->atime_ns);
	if (mask & STORE_SET_MTIME)
		st64(&t->mtime_ns, a->mtime_ns);
	st64(&t->ctime_ns, (mask & STORE_SET_CTIME) ? a->ctime_ns : now_ns());
	ret = pm_persist(s, &t->atime_ns, 3 * sizeof(t->atime_ns));
out:
	pthread_rwlock_unlock(&s->cat_lock);
	return ret;
}

int store_table_unlink(struct store *s, const char *name)
{
	if (pm_writable(s))
		return -EROFS; /* the pool failed (pm.c) */
	volatile int ret = bulk_settle(s, BULK_ANY, EMB_NONE); /* an open bulk run's table may go */
	if (ret)
		return ret;
	/* a catalog entry's flags change under commit_lock and cat_lock: the
	 * store's own walks (reclaim, release) read them under commit_lock */
	pthread_mutex_lock(&s->commit_lock);
	pthread_rwlock_wrlock(&s->cat_lock);
	struct stable *st = name_find(s, name);
	if (!st) {
		ret = -ENOENT;
		goto out;
	}
	META_TX(s) {
		/* not size, nrows and the times: extends change them atomically
		 * without these locks (store_table_setattr) */
		pmemobj_tx_add_range_direct(st->t, offsetof(struct emb_table, size));
		st->t->flags |= EMB_T_ORPHAN;
		catalog_seal_tx(st->t);
	} META_TX_END(s, ret);
	if (!ret) {
		st64(&st->t->ctime_ns, now_ns());
		pm_flush(s, &st->t->ctime_ns, 8);
		name_remove(s, st);
	}
out:
	pthread_rwlock_unlock(&s->cat_lock);
	pthread_mutex_unlock(&s->commit_lock);
	return ret;
}

/* st (out of the name hash) takes name and is linked; victim (out of the
 * hash, or NULL) is unlinked: one transaction.  Both go back into the hash
 * as they then are.  commit_lock and cat_lock held. */
static int take_name(struct store *s, struct stable *st, struct stable *victim, const char *name)
{
	char nm[EMB_NAME_MAX + 1];
	volatile int ret = 0;
	size_t len = strnlen(name, EMB_NAME_MAX); /* name may be victim's */
	memcpy(nm, name, len);
	nm[len] = 0;
	META_TX(s) {
		/* not size, nrows and the times: extends change them atomically
		 * without these locks (store_table_setattr) */
		if (victim) {
			pmemobj_tx_add_range_direct(victim->t, offsetof(struct emb_table, size));
			victim->t->flags |= EMB_T_ORPHAN;
			catalog_seal_tx(victim->t);
		}
		pmemobj_tx_add_range_direct(st->t, offsetof(struct emb_table, size));
		pmemobj_tx_add_range_direct(st->t->name, sizeof(st->t->name));
		st->t->flags &= ~EMB_T_ORPHAN;
		memset(st->t->name, 0, sizeof(st->t->name));
		strcpy(st->t->name, nm);
		catalog_seal_tx(st->t);
	} META_TX_END(s, ret);
	if (!ret) {
		uint64_t now = now_ns();
		if (victim) {
			st64(&victim->t->ctime_ns, now);
			pm_flush(s, &victim->t->ctime_ns, 8);
		}
		st64(&st->t->ctime_ns, now);
		pm_flush(s, &st->t->ctime_ns, 8);
	}
	if (victim && !(victim->t->flags & EMB_T_ORPHAN))
		name_insert(s, victim);
	if (!(st->t->flags & EMB_T_ORPHAN))
		name_insert(s, st);
	return ret;
}

int store_table_rename(struct store *s, const char *oldname, const char *newname)
{
	if (pm_writable(s))
		return -EROFS; /* the pool failed (pm.c) */
	int ret = name_check(newname);
	if (ret)
		return ret;
	pthread_mutex_lock(&s->commit_lock); /* the victim's flags (store_table_unlink) */
	pthread_rwlock_wrlock(&s->cat_lock);
	struct stable *st = name_find(s, oldname);
	struct stable *victim = name_find(s, newname);
	if (!st)
		ret = -ENOENT;
	if (st && st != victim) {
		/* the name hash is keyed by name: take both out under their old names */
		name_remove(s, st);
		if (victim)
			name_remove(s, victim);
		ret = take_name(s, st, victim, newname);
	}
	pthread_rwlock_unlock(&s->cat_lock);
	pthread_mutex_unlock(&s->commit_lock);
	return ret;
}

int store_table_replace(struct store *s, uint32_t orphan_id, uint32_t id)
{
	if (pm_writable(s))
		return -EROFS; /* the pool failed (pm.c) */
	int ret = bulk_settle(s, BULK_ANY, EMB_NONE);
	if (ret)
		return ret;
	pthread_mutex_lock(&s->commit_lock); /* both entries' flags (store_table_unlink) */
	pthread_rwlock_wrlock(&s->cat_lock);
	struct stable *old = tab_get(s, id), *st = tab_get(s, orphan_id);
	if (!old || !st || old == st || (old->t->flags & EMB_T_ORPHAN))
		ret = -ENOENT;
	else if ((st->t->flags & (EMB_T_ORPHAN | EMB_T_ZOMBIE | EMB_T_DYING)) != EMB_T_ORPHAN)
		ret = -EINVAL;
	if (!ret) {
		name_remove(s, old);
		ret = take_name(s, st, old, old->t->name);
	}
	pthread_rwlock_unlock(&s->cat_lock);
	pthread_mutex_unlock(&s->commit_lock);
	return ret;
}

/* Free a table's index and catalog slot; its rows must be gone.
 * commit_lock held. */
int catalog_free_locked(struct store *s, struct stable *st)
{
	volatile int ret = index_destroy(s, st);
	if (ret)
		return ret;
	/* the entry is cleared under cat_lock: stats and listings read it
	 * (s->tab still names it) under cat_lock shared */
	pthread_rwlock_wrlock(&s->cat_lock);
	META_TX(s) {
		pmemobj_tx_add_range_direct(st->t, sizeof(*st->t));
		memset(st->t, 0, sizeof(*st->t));
		st->t->csum = catalog_entry_csum(st->t); /* a free entry's */
	} META_TX_END(s, ret);
	if (!ret)
		stable_free(s, st);
	pthread_rwlock_unlock(&s->cat_lock);
	return ret;
}

int store_table_next(struct store *s, uint32_t *cursor, struct store_attr *a)
{
	pthread_rwlock_rdlock(&s->cat_lock);
	for (uint32_t i = *cursor; i < EMB_NTABLES; i++) {
		struct stable *st = s->tab[i];
		if (st && !(st->t->flags & EMB_T_ORPHAN)) {
			fill_attr(st, a);
			*cursor = i + 1;
			pthread_rwlock_unlock(&s->cat_lock);
			return 1;
		}
	}
	*cursor = EMB_NTABLES;
	pthread_rwlock_unlock(&s->cat_lock);
	return 0;
}

int catalog_trim_done(struct store *s, struct stable *st)
{
	volatile int ret = 0;
	META_TX(s) {
		pmemobj_tx_add_range_direct(&st->t->trim_from, 8);
		st->t->trim_from = EMB_NONE;
		catalog_seal_tx(st->t);
	} META_TX_END(s, ret);
	return ret;
}
