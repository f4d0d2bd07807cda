/*
 * Snapshot records: taking, dropping, listing snapshots and the tables in
 * them, and the batch id.
 *
 * A version v with the next newer version n (in its row's chain) is seen by
 * snapshot S exactly when v.batch <= S.batch < n.batch.  Commits keep a
 * replaced version when some live snapshot sees it (snapset.c) and link it
 * from the new one; nothing else changes at snapshot time, so taking one
 * costs O(tables): the catalog is copied into the record, no row is.
 * Dropping one marks the record dropping, reclaims what only it held
 * (reclaim.c), then frees the record; mount finishes an interrupted drop.
 *
 * Taking one without waiting (issue 17).  With a row cache a snapshot is
 * not durable when mkdir returns (fs/snap.c): a crash drops it.  So nothing
 * need reach the device then, and mkdir costs no barrier: the record is
 * written with plain stores and marked EMB_S_PENDING, its table array stays
 * in DRAM (s->pend_tables), its generation comes from a DRAM counter, and the
 * batch id advances by an 8-byte store that the next barrier of any commit
 * persists before that commit publishes a version of the new batch.  When
 * the cache has written back every older row, store_snap_set_durable makes
 * it durable in one transaction: the table array into the pool, the record
 * sealed, EMB_S_DURABLE set, the superblock's generation counter raised.
 * After a crash a pending record may be torn; open marks it dropping and the
 * drop reclaims whatever versions commits kept for it.  Without a cache a
 * snapshot is durable at once: one transaction, as before.
 *
 * Damage: each record's csum covers what changes only in transactions (gen,
 * batch, whether it is used, creation time, the table array and its length,
 * the name, the table array's bytes); a free record carries a free record's
 * checksum (all are sealed at mkfs and on drop).  flags change by stores
 * (durable, dropping): they sit in one 8-byte word with their complement,
 * stored at once.  snap_check() verifies every record in use at mount; a
 * free record may hold a pending record's torn stores and a pending one may
 * be torn, so neither is checked beyond its flags.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "store_int.h"
#include "tier/tier.h"


static uint64_t flags_word(uint32_t f)
{
	return (uint64_t)f | (uint64_t)(uint32_t)~f << 32;
}

/* Flags and their complement in one 8-byte store, persisted: 0 or -EIO. */
static int rec_flags_set(struct store *s, struct emb_snap *r, uint32_t f)
{
	__atomic_store_n(&r->flags, flags_word(f), __ATOMIC_RELEASE);
	return pm_persist(s, &r->flags, 8);
}


#define SEED_SNAP 0x534e4150ull /* "SNAP" */

/* What a record's csum covers; its table array must lie inside the pool. */
static uint64_t rec_csum(const char *base, const struct emb_snap *r)
{
	struct {
		uint64_t gen, batch, created, tables_off;
		uint32_t used, ntables;
	} k = { r->gen, r->batch, r->created_ns, r->tables_off, (uint32_t)(r->flags & EMB_S_USED), r->ntables };
	uint64_t h = XXH64(&k, sizeof(k), SEED_SNAP);
	h = XXH64(r->name, sizeof(r->name), h);
	if (r->tables_off)
		h = XXH64(base + r->tables_off, (size_t)r->ntables * sizeof(struct emb_snap_table), h);
	return h;
}

/* A free record, sealed. */
static void rec_clear(struct emb_snap *r)
{
	memset(r, 0, sizeof(*r));
	r->flags = flags_word(0);
	r->csum = rec_csum(NULL, r);
}

void snap_records_init(struct emb_snaps *sn)
{
	for (uint32_t i = 0; i < EMB_MAX_SNAPS; i++)
		rec_clear(&sn->s[i]);
}

static int rec_bad(char *err, size_t n, uint32_t i, const char *why)
{
	return store_err(err, n, -EIO, "snapshot record %u is damaged (%s)", i, why);
}

int snap_check(struct store *s, char *err, size_t n)
{
	const struct emb_snaps *sn = S_PTR(s, s->sb->snaps_off);
	for (uint32_t i = 0; i < EMB_MAX_SNAPS; i++) {
		const struct emb_snap *r = &sn->s[i];
		uint32_t f = (uint32_t)r->flags;
		size_t bytes = (size_t)r->ntables * sizeof(struct emb_snap_table);
		if ((uint32_t)(r->flags >> 32) != (uint32_t)~f ||
		    (f & ~(EMB_S_USED | EMB_S_DURABLE | EMB_S_DROPPING | EMB_S_PENDING)) ||
		    (!(f & EMB_S_USED) && f) || ((f & EMB_S_PENDING) && (f & EMB_S_DURABLE)))
			return rec_bad(err, n, i, "flags");
		if (!(f & EMB_S_USED) || (f & EMB_S_PENDING))
			continue; /* free, or pending: may be torn (see the top) */
		if (r->ntables > EMB_NTABLES || !r->tables_off != !r->ntables ||
		    (r->tables_off && !pool_range_ok(s, r->tables_off, bytes, 8)))
			return rec_bad(err, n, i, "table array outside the pool");
		if (r->csum != rec_csum(s->base, r))
			return rec_bad(err, n, i, "checksum mismatch");
		const struct emb_snap_table *t = S_PTR(s, r->tables_off);
		if (!memchr(r->name, 0, sizeof(r->name)))
			return rec_bad(err, n, i, "name");
		for (uint32_t k = 0; k < r->ntables; k++)
			if (t[k].id >= EMB_NTABLES || !memchr(t[k].name, 0, sizeof(t[k].name)) ||
			    store_geometry_check(t[k].dim, t[k].dtype) ||
			    t[k].row_size != t[k].dim * store_dtype_size(t[k].dtype))
				return rec_bad(err, n, i, "table record");
	}
	return 0;
}

int snap_load(struct store *s)
{
	s->snaps = S_PTR(s, s->sb->snaps_off);
	if (!s->snaps)
		return -EIO;
	pthread_rwlockattr_t ra; /* writers first: store_int.h's lock order */
	pthread_rwlockattr_init(&ra);
	pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&s->snap_lock, &ra);
	pthread_rwlockattr_destroy(&ra);
	s->snap_gen = s->sb->snap_seq;
	int ret = 0;
	for (uint32_t i = 0; i < EMB_MAX_SNAPS && !ret; i++) {
		struct emb_snap *r = snap_rec(s, i);
		uint32_t f = rec_flags(r);
		if (!(f & EMB_S_USED)) {
			continue; /* may hold a pending record's torn stores: unused */
		} else if (f & EMB_S_PENDING) { /* lost in a crash: snap_recover drops it */
			if (!(f & EMB_S_DROPPING))
				ret = rec_flags_set(s, r, f | EMB_S_DROPPING);
		} else if (r->gen > s->snap_gen) {
			s->snap_gen = r->gen;
		}
	}
	snapset_rebuild(s);
	return ret;
}

void snap_unload(struct store *s)
{
	for (uint32_t i = 0; i < EMB_MAX_SNAPS; i++) {
		free(s->pend_tables[i]);
		s->pend_tables[i] = NULL;
	}
}

/* ---- snapshot records --------------------------------------------------- */

static int name_ok(const char *name)
{
	size_t n = strlen(name);
	if (n == 0 || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, ".."))
		return -EINVAL;
	return n > EMB_NAME_MAX ? -ENAMETOOLONG : 0;
}

static void fill_snap(const struct emb_snap *r, uint32_t idx, struct store_snap *out)
{
	out->idx = idx;
	out->gen = r->gen;
	out->batch = r->batch;
	out->created_ns = r->created_ns;
	out->excl_bytes = ld64(&r->excl_bytes);
	out->ntables = r->ntables;
	out->durable = !!(rec_flags(r) & EMB_S_DURABLE);
	memcpy(out->name, r->name, sizeof(out->name));
}

static int find_locked(struct store *s, const char *name)
{
	for (uint32_t i = 0; i < EMB_MAX_SNAPS; i++)
		if (rec_live(snap_rec(s, i)) && !strcmp(snap_rec(s, i)->name, name))
			return (int)i;
	return -1;
}

uint64_t store_batch_get(struct store *s)
{
	return ld64(&s->sb->batch);
}

int store_batch_set(struct store *s, uint64_t b)
{
	pthread_rwlock_wrlock(&s->snap_lock);
	int ret = pm_writable(s);
	if (ret)
		;
	else if (b < s->sb->batch || b > EMB_BATCH_MAX)
		ret = -EINVAL; /* never back; a version keeps 44 bits of it (layout.h) */
	else if (b != s->sb->batch) {
		st64(&s->sb->batch, b);
		ret = pm_persist(s, &s->sb->batch, 8);
	}
	pthread_rwlock_unlock(&s->snap_lock);
	return ret;
}

/* The catalog as a snapshot keeps it: every table not unlinked, into t
 * (n entries).  cat_lock held. */
static void tables_copy(struct store *s, struct emb_snap_table *t, uint32_t n)
{
	uint32_t k = 0;
	for (uint32_t i = 0; i < EMB_NTABLES && k < n; i++) {
		struct stable *st = s->tab[i];
		if (!st || (st->t->flags & EMB_T_ORPHAN))
			continue;
		struct emb_table *e = st->t;
		t[k] = (struct emb_snap_table){ .id = i, .dim = e->dim, .row_size = e->row_size,
						.dtype = e->dtype, .gen = e->gen,
						.size = ld64(&e->size), .nrows = ld64(&e->nrows),
						.mode = e->mode, .uid = e->uid, .gid = e->gid,
						.mtime_ns = ld64(&e->mtime_ns),
						.ctime_ns = ld64(&e->ctime_ns) };
		memcpy(t[k].name, e->name, sizeof(t[k].name));
		k++;
	}
}

/* A snapshot's record body (flags and csum left to the caller); tables_off
 * 0 for a pending one. */
static void rec_fill(struct store *s, struct emb_snap *r, const char *name, uint32_t n, uint64_t toff)
{
	memset(r, 0, offsetof(struct emb_snap, flags));
	memset((char *)r + offsetof(struct emb_snap, created_ns), 0,
	       sizeof(*r) - offsetof(struct emb_snap, created_ns));
	r->gen = ++s->snap_gen;
	r->batch = ld64(&s->sb->batch);
	r->ntables = n;
	r->created_ns = now_ns();
	r->tables_off = toff;
	strcpy(r->name, name);
}

/* A durable snapshot in record idx: one transaction.  snap_lock exclusive,
 * cat_lock held. */
static int take_durable(struct store *s, uint32_t idx, const char *name, uint32_t n)
{
	volatile int ret = 0;
	struct emb_snap *r = snap_rec(s, idx);
	META_TX(s) {
		uint64_t toff = 0;
		if (n) {
			PMEMoid o = pmemobj_tx_alloc(n * sizeof(struct emb_snap_table), 0);
			tables_copy(s, pmemobj_direct(o), n);
			toff = o.off;
		}
		pmemobj_tx_add_range_direct(r, sizeof(*r));
		pmemobj_tx_add_range_direct(&s->sb->snap_seq, 8);
		pmemobj_tx_add_range_direct(&s->sb->batch, 8);
		rec_fill(s, r, name, n, toff);
		r->flags = flags_word(EMB_S_USED | EMB_S_DURABLE);
		r->csum = rec_csum(s->base, r);
		s->sb->snap_seq = r->gen;
		s->sb->batch = r->batch + 1;
		super_seal_tx(s);
	} META_TX_END(s, ret);
	return ret;
}

/* A pending snapshot in record idx: stores only, no barrier (see the top).
 * snap_lock exclusive, cat_lock held. */
static int take_pending(struct store *s, uint32_t idx, const char *name, uint32_t n)
{
	struct emb_snap_table *t = NULL;
	if (n && !(t = malloc(n * sizeof(*t))))
		return -ENOMEM;
	if (n)
		tables_copy(s, t, n);
	struct emb_snap *r = snap_rec(s, idx);
	s->pend_tables[idx] = t;
	rec_fill(s, r, name, n, 0);
	__atomic_store_n(&r->flags, flags_word(EMB_S_USED | EMB_S_PENDING), __ATOMIC_RELEASE);
	r->csum = rec_csum(s->base, r); /* without the array: make_durable seals it */
	st64(&s->sb->batch, r->batch + 1);
	pm_soon(s, r, sizeof(*r));
	pm_soon(s, &s->sb->batch, 8);
	return 0;
}

int store_snap_create(struct store *s, const char *name, int durable, struct store_snap *out)
{
	if (pm_writable(s))
		return -EROFS; /* the pool failed (pm.c) */
	int ret = name_ok(name);
	if (!ret)
		ret = bulk_settle(s, BULK_ANY, EMB_NONE); /* rows of the open bulk run are in it */
	if (ret)
		return ret;
	/* waits for commits that stamp rows with the current batch (commit.c) */
	pthread_rwlock_wrlock(&s->snap_lock);
	pthread_rwlock_rdlock(&s->cat_lock);
	int idx = -1;
	if (find_locked(s, name) >= 0) {
		ret = -EEXIST;
		goto out;
	}
	for (uint32_t i = 0; i < EMB_MAX_SNAPS && idx < 0; i++)
		if (!(rec_flags(snap_rec(s, i)) & EMB_S_USED))
			idx = (int)i;
	if (idx < 0) {
		ret = -ENOSPC;
		goto out;
	}
	if (ld64(&s->sb->batch) >= EMB_BATCH_MAX) {
		ret = -EOVERFLOW; /* no batch id left to advance to */
		goto out;
	}
	uint32_t n = 0;
	for (uint32_t i = 0; i < EMB_NTABLES; i++)
		n += s->tab[i] && !(s->tab[i]->t->flags & EMB_T_ORPHAN);
	ret = durable ? take_durable(s, (uint32_t)idx, name, n) : take_pending(s, (uint32_t)idx, name, n);
	if (!ret) {
		snapset_rebuild(s);
		if (out)
			fill_snap(snap_rec(s, (uint32_t)idx), (uint32_t)idx, out);
	}
out:
	pthread_rwlock_unlock(&s->cat_lock);
	pthread_rwlock_unlock(&s->snap_lock);
	return ret;
}

/* A pending snapshot made durable: its table array into the pool, the
 * record sealed and marked durable, in one transaction.  commit_lock held
 * (no drop runs); snap_lock not held: a snapshot may be taken meanwhile. */
static int make_durable(struct store *s, uint32_t idx)
{
	struct emb_snap *r = snap_rec(s, idx);
	const struct emb_snap_table *t = s->pend_tables[idx];
	volatile int ret = 0;
	META_TX(s) {
		uint64_t toff = 0;
		if (r->ntables) {
			PMEMoid o = pmemobj_tx_alloc(r->ntables * sizeof(*t), 0);
			memcpy(pmemobj_direct(o), t, r->ntables * sizeof(*t));
			toff = o.off;
		}
		pmemobj_tx_add_range_direct(r, sizeof(*r));
		pmemobj_tx_add_range_direct(&s->sb->snap_seq, 8);
		r->tables_off = toff;
		r->csum = rec_csum(s->base, r);
		__atomic_store_n(&r->flags, flags_word(EMB_S_USED | EMB_S_DURABLE), __ATOMIC_RELEASE);
		if (r->gen > s->sb->snap_seq)
			s->sb->snap_seq = r->gen;
		super_seal_tx(s);
	} META_TX_END(s, ret);
	if (!ret) { /* the pool's copy serves from now on */
		pthread_rwlock_wrlock(&s->snap_lock);
		s->pend_tables[idx] = NULL;
		pthread_rwlock_unlock(&s->snap_lock);
		free((void *)t);
	}
	return ret;
}

int store_snap_set_durable(struct store *s, uint32_t idx, uint64_t gen)
{
	if (idx >= EMB_MAX_SNAPS)
		return -EINVAL;
	struct emb_snap *r = snap_rec(s, idx);
	int ret = 0;
	/* commit_lock: no drop runs meanwhile, so the record stays the one
	 * named by gen; snap_lock only to look, not across the persist */
	pthread_mutex_lock(&s->commit_lock);
	pthread_rwlock_rdlock(&s->snap_lock);
	uint32_t f = rec_flags(r);
	int live = rec_live(r) && r->gen == gen;
	pthread_rwlock_unlock(&s->snap_lock);
	if (!live)
		ret = -ENOENT; /* dropped, and maybe the slot reused */
	else if (f & EMB_S_PENDING)
		ret = make_durable(s, idx);
	else if (!(f & EMB_S_DURABLE))
		ret = rec_flags_set(s, r, f | EMB_S_DURABLE);
	pthread_mutex_unlock(&s->commit_lock);
	return ret;
}

/* Free what the snapshots left need not keep; then the record.
 * commit_lock held; the record is already marked dropping. */
static int drop_locked(struct store *s, uint32_t idx)
{
	struct emb_snap *r = snap_rec(s, idx);
	volatile int ret = snap_reclaim_all(s);
	if (ret)
		return ret;
	int pending = (rec_flags(r) & EMB_S_PENDING) != 0; /* its tables_off names nothing */
	/* listings read the record's flags under snap_lock: clear it under it */
	pthread_rwlock_wrlock(&s->snap_lock);
	META_TX(s) {
		if (r->tables_off && !pending)
			pmemobj_tx_free(pmemobj_oid(S_PTR(s, r->tables_off)));
		pmemobj_tx_add_range_direct(r, sizeof(*r));
		rec_clear(r);
	} META_TX_END(s, ret);
	if (!ret && s->pend_tables[idx]) {
		free(s->pend_tables[idx]);
		s->pend_tables[idx] = NULL;
	}
	pthread_rwlock_unlock(&s->snap_lock);
	return ret;
}

static int mark_dropping(struct store *s, uint32_t idx)
{
	struct emb_snap *r = snap_rec(s, idx);
	int ret = rec_flags_set(s, r, rec_flags(r) | EMB_S_DROPPING);
	snapset_rebuild(s);
	return ret;
}

int store_snap_drop(struct store *s, const char *name)
{
	pthread_mutex_lock(&s->commit_lock);
	pthread_rwlock_wrlock(&s->snap_lock);
	int idx = find_locked(s, name);
	int ret = idx < 0 ? -ENOENT : intent_pins(s, (uint32_t)idx) ? -EBUSY : pm_writable(s);
	if (!ret)
		ret = mark_dropping(s, (uint32_t)idx);
	pthread_rwlock_unlock(&s->snap_lock);
	if (!ret)
		ret = drop_locked(s, (uint32_t)idx);
	pthread_mutex_unlock(&s->commit_lock);
	return ret;
}

int store_snap_table_count(struct store *s, uint32_t idx, uint32_t id, uint64_t nrows)
{
	int ret = -ENOENT;
	if (idx >= EMB_MAX_SNAPS)
		return -EINVAL;
	pthread_rwlock_wrlock(&s->snap_lock);
	struct emb_snap_table *t = s->pend_tables[idx];
	uint32_t n = snap_rec(s, idx)->ntables;
	for (uint32_t k = 0; t && k < n; k++) {
		if (t[k].id == id) {
			t[k].nrows = nrows;
			ret = 0;
			break;
		}
	}
	pthread_rwlock_unlock(&s->snap_lock);
	return ret;
}

/* At mount: finish drops, and drop snapshots that never became durable. */
int snap_recover(struct store *s)
{
	int ret = 0;
	pthread_mutex_lock(&s->commit_lock);
	for (uint32_t i = 0; i < EMB_MAX_SNAPS && !ret; i++) {
		uint32_t f = rec_flags(snap_rec(s, i));
		if (!(f & EMB_S_USED) || ((f & EMB_S_DURABLE) && !(f & EMB_S_DROPPING)))
			continue;
		s->recovered = 1;
		pthread_rwlock_wrlock(&s->snap_lock);
		ret = mark_dropping(s, i);
		pthread_rwlock_unlock(&s->snap_lock);
		if (!ret)
			ret = drop_locked(s, i);
	}
	pthread_mutex_unlock(&s->commit_lock);
	return ret;
}

int store_snap_lookup(struct store *s, const char *name, struct store_snap *out)
{
	pthread_rwlock_rdlock(&s->snap_lock);
	int idx = find_locked(s, name);
	if (idx >= 0)
		fill_snap(snap_rec(s, (uint32_t)idx), (uint32_t)idx, out);
	pthread_rwlock_unlock(&s->snap_lock);
	return idx >= 0 ? 0 : -ENOENT;
}

int store_snap_get(struct store *s, uint32_t idx, struct store_snap *out)
{
	if (idx >= EMB_MAX_SNAPS)
		return -ENOENT;
	pthread_rwlock_rdlock(&s->snap_lock);
	int ok = rec_live(snap_rec(s, idx));
	if (ok)
		fill_snap(snap_rec(s, idx), idx, out);
	pthread_rwlock_unlock(&s->snap_lock);
	return ok ? 0 : -ENOENT;
}

int store_snap_next(struct store *s, uint32_t *cursor, struct store_snap *out)
{
	pthread_rwlock_rdlock(&s->snap_lock);
	for (uint32_t i = *cursor; i < EMB_MAX_SNAPS; i++)
		if (rec_live(snap_rec(s, i))) {
			fill_snap(snap_rec(s, i), i, out);
			*cursor = i + 1;
			pthread_rwlock_unlock(&s->snap_lock);
			return 1;
		}
	*cursor = EMB_MAX_SNAPS;
	pthread_rwlock_unlock(&s->snap_lock);
	return 0;
}

int store_table_snaps(struct store *s, uint32_t id)
{
	struct stable *st = tab_get(s, id);
	if (!st)
		return -ENOENT;
	pthread_rwlock_rdlock(&s->snap_lock);
	int n = snapset_refs(s, st);
	pthread_rwlock_unlock(&s->snap_lock);
	return n;
}

/* ---- tables and rows inside a snapshot ------------------------------------ */

/* The snapshot's record of table id; snap_lock held. */
static const struct emb_snap_table *snap_table(struct store *s, uint32_t idx, uint32_t id,
					       const struct emb_snap **rp)
{
	if (idx >= EMB_MAX_SNAPS)
		return NULL;
	const struct emb_snap *r = snap_rec(s, idx);
	if (!rec_live(r))
		return NULL;
	const struct emb_snap_table *t = rec_tables(s, r);
	for (uint32_t k = 0; k < r->ntables; k++)
		if (t[k].id == id) {
			if (rp)
				*rp = r;
			return &t[k];
		}
	return NULL;
}

static void snap_attr(const struct emb_snap *r, const struct emb_snap_table *t, struct store_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->id = t->id;
	a->gen = t->gen;
	a->mode = t->mode;
	a->uid = t->uid;
	a->gid = t->gid;
	a->dim = t->dim;
	a->row_size = t->row_size;
	a->dtype = t->dtype;
	a->size = t->size;
	a->nrows = t->nrows;
	a->atime_ns = t->mtime_ns;
	a->mtime_ns = t->mtime_ns;
	a->ctime_ns = r->created_ns;
	memcpy(a->name, t->name, sizeof(a->name));
}

int store_snap_table_lookup(struct store *s, uint32_t idx, const char *name, uint32_t *id)
{
	int ret = -ENOENT;
	if (idx >= EMB_MAX_SNAPS)
		return ret;
	pthread_rwlock_rdlock(&s->snap_lock);
	const struct emb_snap *r = snap_rec(s, idx);
	if (rec_live(r)) {
		const struct emb_snap_table *t = rec_tables(s, r);
		for (uint32_t k = 0; k < r->ntables; k++)
			if (!strcmp(t[k].name, name)) {
				*id = t[k].id;
				ret = 0;
				break;
			}
	}
	pthread_rwlock_unlock(&s->snap_lock);
	return ret;
}

int store_snap_table_next(struct store *s, uint32_t idx, uint32_t *cursor, struct store_attr *a)
{
	int ret = 0;
	if (idx >= EMB_MAX_SNAPS)
		return -ENOENT;
	pthread_rwlock_rdlock(&s->snap_lock);
	const struct emb_snap *r = snap_rec(s, idx);
	if (!rec_live(r)) {
		ret = -ENOENT;
	} else if (*cursor < r->ntables) {
		snap_attr(r, &rec_tables(s, r)[*cursor], a);
		(*cursor)++;
		ret = 1;
	}
	pthread_rwlock_unlock(&s->snap_lock);
	return ret;
}

/* Table id inside snapshot idx (whose generation must be snap_gen): its
 * attributes (a may be NULL), the batch the snapshot sees and the table's
 * state now.  -ENOENT: no such snapshot or table in it; -ESTALE: the slot
 * holds another snapshot now. */
int snap_table_view(struct store *s, uint32_t idx, uint64_t snap_gen, uint32_t id, struct store_attr *a,
		    uint64_t *batch, struct stable **stp)
{
	const struct emb_snap *r;
	pthread_rwlock_rdlock(&s->snap_lock);
	const struct emb_snap_table *t = snap_table(s, idx, id, &r);
	int ret = !t ? -ENOENT : r->gen != snap_gen ? -ESTALE : 0;
	if (!ret) {
		struct stable *st = tab_get(s, id);
		if (!st || st->t->gen != t->gen)
			ret = -EIO; /* a table a snapshot holds stays (a zombie) until the snapshot goes */
		if (a)
			snap_attr(r, t, a);
		*batch = r->batch;
		*stp = st;
	}
	pthread_rwlock_unlock(&s->snap_lock);
	return ret;
}
