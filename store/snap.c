/*
 * Snapshots: batch-versioned rows, the live snapshot set, snapshot reads,
 * and reclaim of what no snapshot needs any more.
 *
 * A version v with the next newer version n (in its row's chain) is seen by
 * snapshot S exactly when v.batch <= S.batch < n.batch.  Commits keep a
 * replaced version when some live snapshot sees it (snap_needed) and link it
 * from the new one; nothing else changes at snapshot time, so taking one
 * costs O(tables): the catalog is copied into the record, no row is.
 *
 * Dropping a snapshot (and freeing an unlinked table) walks the chains of
 * every table and unlinks and frees the versions nobody sees any more.  The
 * chain surgery is journaled (EMB_J_RECLAIM): records name the versions about
 * to be freed; at recovery a named version no longer reachable from its row's
 * chain is freed, so a crash leaks nothing and frees nothing still linked.
 * The record is marked dropping first; mount finishes an interrupted drop.
 *
 * Damage: each record's csum covers what changes only in transactions (gen,
 * batch, whether it is used, creation time, the table array and its length,
 * the name, the table array's bytes); a free record carries a free record's
 * checksum (all are sealed at mkfs and on drop).  flags change by stores
 * (durable, dropping): they sit in one 8-byte word with their complement,
 * stored at once.  snap_check() verifies every record at mount.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "store_int.h"

static struct emb_snap *rec(struct store *s, uint32_t i)
{
	return &s->snaps->s[i];
}

static struct emb_snap_table *rec_tables(struct store *s, const struct emb_snap *r)
{
	return S_PTR(s, r->tables_off);
}

/* flags change under snap_lock exclusive, except EMB_S_DURABLE, which
 * store_snap_set_durable sets under snap_lock shared (every such writer
 * stores the same word) */
static uint32_t rec_flags(const struct emb_snap *r)
{
	return (uint32_t)__atomic_load_n(&r->flags, __ATOMIC_ACQUIRE);
}

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

static int rec_live(const struct emb_snap *r)
{
	uint32_t f = rec_flags(r);
	return (f & EMB_S_USED) && !(f & EMB_S_DROPPING);
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
		if ((uint32_t)(r->flags >> 32) != (uint32_t)~f || (f & ~(EMB_S_USED | EMB_S_DURABLE | EMB_S_DROPPING)) ||
		    (!(f & EMB_S_USED) && f))
			return rec_bad(err, n, i, "flags");
		if (r->ntables > EMB_NTABLES || !r->tables_off != !r->ntables ||
		    (r->tables_off && !pool_range_ok(s, r->tables_off, bytes, 8)))
			return rec_bad(err, n, i, "table array outside the pool");
		if (r->csum != rec_csum(s->base, r))
			return rec_bad(err, n, i, "checksum mismatch");
		if (!(f & EMB_S_USED))
			continue;
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

/* Sorted batches of live snapshots.  snap_lock held exclusive (or at load). */
static void live_rebuild(struct store *s)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < EMB_MAX_SNAPS; i++) {
		struct emb_snap *r = rec(s, i);
		if (!rec_live(r))
			continue;
		uint32_t k = n++;
		while (k > 0 && s->live_batch[k - 1] > r->batch) {
			s->live_batch[k] = s->live_batch[k - 1];
			s->live_idx[k] = s->live_idx[k - 1];
			k--;
		}
		s->live_batch[k] = r->batch;
		s->live_idx[k] = i;
	}
	s->n_live = n;
}

int snap_load(struct store *s)
{
	s->snaps = S_PTR(s, s->sb->snaps_off);
	if (!s->snaps)
		return -EIO;
	pthread_rwlock_init(&s->snap_lock, NULL);
	live_rebuild(s);
	return 0;
}

int snap_needed(struct store *s, uint64_t b_old, uint64_t b_new)
{
	size_t i = u64_lower_bound(s->live_batch, s->n_live, b_old);
	return i < s->n_live && s->live_batch[i] < b_new;
}

/* How many of the sorted batches b[] lie in [lo, hi); *only = the index of
 * the one when there is exactly one. */
static size_t holders(const uint64_t *b, size_t n, uint64_t lo, uint64_t hi, size_t *only)
{
	size_t i = u64_lower_bound(b, n, lo), k = 0;
	*only = i;
	while (i + k < n && b[i + k] < hi)
		k++;
	return k;
}

void snap_charge(struct store *s, const struct emb_version *v, uint64_t b_new, uint32_t cls)
{
	size_t only;
	if (holders(s->live_batch, s->n_live, v->batch, b_new, &only) == 1) {
		struct emb_snap *r = rec(s, s->live_idx[only]);
		st64(&r->excl_bytes, r->excl_bytes + s->cls[cls].slot_size);
	}
}

static int rec_holds(struct store *s, const struct emb_snap *r, uint32_t id, uint64_t gen)
{
	const struct emb_snap_table *t = rec_tables(s, r);
	for (uint32_t k = 0; k < r->ntables; k++)
		if (t[k].id == id && t[k].gen == gen)
			return 1;
	return 0;
}

int snap_refs(struct store *s, const struct stable *st)
{
	int n = 0;
	for (uint32_t i = 0; i < s->n_live; i++)
		n += rec_holds(s, rec(s, s->live_idx[i]), st->id, st->t->gen);
	return n;
}

/* ---- reclaim ------------------------------------------------------------ */

struct change {
	uint64_t row;
	uint64_t head;     /* new newest version, 0 = remove the row */
	uint64_t old_head;
	uint32_t first_free, nfree;
	uint32_t first_link, nlink;
};
struct link {
	uint64_t ver;      /* version whose prev changes */
	uint64_t prev;
};

struct reclaim {
	struct store *s;
	struct stable *st;
	const uint64_t *refb; /* batches of live snapshots holding the table */
	const uint32_t *refi; /* their record index */
	size_t nref;
	int live;             /* the table is linked: its newest version serves the live view */
	struct change *ch;
	size_t nch, capch;
	uint64_t *frees;
	size_t nfrees, capfrees;
	struct link *links;
	size_t nlinks, caplinks;
	uint64_t remaining;   /* rows left in the index */
	uint32_t slot;
	int count;            /* add kept versions to their only holder's excl_bytes */
};

#define GROW(arr, n, cap)                                                        \
	do {                                                                     \
		if ((n) == (cap)) {                                              \
			size_t nc_ = (cap) ? 2 * (cap) : 256;                   \
			void *p_ = realloc((arr), nc_ * sizeof(*(arr)));         \
			if (!p_)                                                 \
				return -ENOMEM;                                  \
			(arr) = p_;                                              \
			(cap) = nc_;                                             \
		}                                                                \
	} while (0)

/* Journal, unlink and free one group of changes. */
static int reclaim_apply(struct reclaim *rc)
{
	struct store *s = rc->s;
	struct stable *st = rc->st;
	struct emb_journal *j = s->jr;
	if (!rc->nch)
		return 0;
	/* positions first: a damaged bucket fails the reclaim before it starts */
	struct ipos *pos = calloc(rc->nch, sizeof(*pos));
	if (!pos)
		return -ENOMEM;
	for (size_t c = 0; c < rc->nch; c++) {
		uint64_t cur;
		int ret = index_find(s, st, rc->ch[c].row, &pos[c], &cur);
		if (ret || cur != rc->ch[c].old_head) {
			free(pos);
			return ret ? ret : -EIO;
		}
	}
	uint64_t n = 0;
	for (size_t i = 0; i < rc->nfrees; i++)
		j->rec[n++] = (struct emb_jrec){ 0, rc->frees[i], 0, st->id, 0 };
	for (size_t c = 0; c < rc->nch; c++)
		for (uint32_t k = 0; k < rc->ch[c].nfree; k++)
			j->rec[rc->ch[c].first_free + k].row = rc->ch[c].row;
	int ret = journal_seal(s, st, EMB_J_RECLAIM, n, 0);
	if (ret) {
		free(pos);
		return ret;
	}

	pthread_rwlock_wrlock(&st->lock);
	for (size_t i = 0; i < rc->nlinks; i++) {
		struct emb_version *v = S_PTR(s, rc->links[i].ver);
		st64(&v->prev, rc->links[i].prev);
		pm_flush(s, &v->prev, 8);
	}
	int64_t drows = 0;
	for (size_t c = 0; c < rc->nch; c++) {
		struct change *x = &rc->ch[c];
		int was = !ver_tomb(S_PTR(s, x->old_head));
		int now = x->head && !ver_tomb(S_PTR(s, x->head));
		drows += now - was;
		if (!x->head)
			index_unpublish(s, &pos[c]);
		else if (x->head != x->old_head)
			index_set_val(s, &pos[c], x->head);
	}
	if (drows)
		st64(&st->t->nrows, st->t->nrows + (uint64_t)drows);
	st->mod++;
	pthread_rwlock_unlock(&st->lock);
	pm_flush(s, st->t, 128);
	if ((ret = pm_barrier(s))) {
		free(pos);
		return ret;
	}

	for (size_t i = 0; i < rc->nfrees; i++)
		ver_free(s, rc->frees[i]);
	for (size_t c = 0; c < rc->nch; c++)
		if (!rc->ch[c].head)
			index_ovf_dec(s, st, &pos[c]);
	free(pos);
	ret = journal_clear(s);
	rc->nch = rc->nfrees = rc->nlinks = 0;
	return ret;
}

/* Decide which versions of one row's chain stay; queue the changes. */
static int reclaim_row(struct reclaim *rc, uint64_t row, uint64_t head)
{
	struct store *s = rc->s;
	uint64_t vs[EMB_MAX_SNAPS + 2];
	int keep[EMB_MAX_SNAPS + 2];
	size_t k = 0;
	struct chain ch;
	int ret = chain_start(s, rc->st, row, head, &ch);
	while (!ret && ch.v) {
		vs[k++] = ch.off;
		ret = chain_step(&ch);
	}
	if (ret || !k) { /* damaged: the whole chain stays as it is */
		rc->remaining++;
		return 0;
	}
	/* older versions first: each is seen by the snapshots in [batch, newer batch) */
	int older_kept = 0;
	for (size_t i = k; i-- > 1;) {
		struct emb_version *v = S_PTR(s, vs[i]), *nv = S_PTR(s, vs[i - 1]);
		size_t only;
		size_t h = holders(rc->refb, rc->nref, v->batch, nv->batch, &only);
		keep[i] = h > 0;
		older_kept |= keep[i];
		if (h == 1 && rc->count) {
			struct emb_snap *r = rec(s, rc->refi[only]);
			st64(&r->excl_bytes, r->excl_bytes + rc->slot);
		}
	}
	struct emb_version *v0 = S_PTR(s, vs[0]);
	size_t only;
	size_t h0 = holders(rc->refb, rc->nref, v0->batch, UINT64_MAX, &only);
	if (rc->live)
		keep[0] = !ver_tomb(v0) || older_kept; /* a tombstone hides older versions */
	else
		keep[0] = h0 > 0;
	if (!rc->live && h0 == 1 && rc->count) {
		struct emb_snap *r = rec(s, rc->refi[only]);
		st64(&r->excl_bytes, r->excl_bytes + rc->slot);
	}

	size_t nfree = 0;
	for (size_t i = 0; i < k; i++)
		nfree += !keep[i];
	uint64_t newhead = 0;
	for (size_t i = 0; i < k && !newhead; i++)
		if (keep[i])
			newhead = vs[i];
	if (newhead)
		rc->remaining++;
	if (!nfree)
		return 0;
	if (rc->nfrees + nfree > EMB_JOURNAL_CAP) {
		ret = reclaim_apply(rc);
		if (ret)
			return ret;
	}
	GROW(rc->ch, rc->nch, rc->capch);
	struct change *c = &rc->ch[rc->nch++];
	c->row = row;
	c->head = newhead;
	c->old_head = head;
	c->first_free = (uint32_t)rc->nfrees;
	c->nfree = (uint32_t)nfree;
	for (size_t i = 0; i < k; i++) {
		if (!keep[i]) {
			GROW(rc->frees, rc->nfrees, rc->capfrees);
			rc->frees[rc->nfrees++] = vs[i];
			continue;
		}
		/* relink each kept version to the next kept older one */
		uint64_t want = 0;
		for (size_t m = i + 1; m < k && !want; m++)
			if (keep[m])
				want = vs[m];
		if (((struct emb_version *)S_PTR(s, vs[i]))->prev != want) {
			GROW(rc->links, rc->nlinks, rc->caplinks);
			rc->links[rc->nlinks++] = (struct link){ vs[i], want };
		}
	}
	return 0;
}

/* Every (row, newest version) of an index. */
struct kv {
	struct u64vec k, v;
};

static int kv_push(void *arg, uint64_t key, uint64_t val)
{
	struct kv *a = arg;
	return u64vec_push(&a->k, key) ? -ENOMEM : u64vec_push(&a->v, val);
}

/* Returns the rows left in the table's index, or -errno.  count: also add
 * what each snapshot alone holds to its excl_bytes.  commit_lock held. */
int reclaim_table(struct store *s, struct stable *st, int count)
{
	uint64_t refb[EMB_MAX_SNAPS];
	uint32_t refi[EMB_MAX_SNAPS];
	size_t nref = 0;
	pthread_rwlock_rdlock(&s->snap_lock);
	for (uint32_t i = 0; i < s->n_live; i++)
		if (rec_holds(s, rec(s, s->live_idx[i]), st->id, st->t->gen)) {
			refb[nref] = s->live_batch[i];
			refi[nref++] = s->live_idx[i];
		}
	pthread_rwlock_unlock(&s->snap_lock);

	uint32_t cls;
	int ret = slab_class_for(s, st->t->row_size, &cls);
	if (ret)
		return ret;
	struct reclaim rc = { .s = s, .st = st, .refb = refb, .refi = refi, .nref = nref,
			      .live = !(st->t->flags & EMB_T_ZOMBIE), .slot = s->cls[cls].slot_size,
			      .count = count };
	struct kv all = { 0 };
	ret = index_walk(s, st, kv_push, &all);
	for (size_t i = 0; !ret && i < all.k.n; i++)
		ret = reclaim_row(&rc, all.k.v[i], all.v.v[i]);
	if (!ret)
		ret = reclaim_apply(&rc);
	free(all.k.v);
	free(all.v.v);
	free(rc.ch);
	free(rc.frees);
	free(rc.links);
	return ret ? ret : (int)(rc.remaining > INT32_MAX ? INT32_MAX : rc.remaining);
}

int reclaim_replay(struct store *s, struct emb_journal *j)
{
	struct stable *st = tab_get(s, j->table);
	if (!st)
		return -EIO;
	for (uint64_t i = 0; i < j->count; i++)
		if (!chain_has(s, st, j->rec[i].row, j->rec[i].old_off))
			ver_free(s, j->rec[i].old_off);
	/* recount the live rows: the head updates may have been partial */
	uint64_t n = 0;
	struct kv all = { 0 };
	int ret = index_walk(s, st, kv_push, &all);
	for (size_t i = 0; !ret && i < all.k.n; i++) {
		struct emb_version *v = ver_get(s, all.v.v[i], st->id, all.k.v[i], st->t->row_size);
		n += !v || !ver_tomb(v); /* a damaged head counts as a row */
	}
	free(all.k.v);
	free(all.v.v);
	if (ret)
		return ret;
	st64(&st->t->nrows, n);
	pm_flush(s, st->t, 128);
	return pm_barrier(s);
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
		if (rec_live(rec(s, i)) && !strcmp(rec(s, i)->name, name))
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
	else if (b < s->sb->batch || b == UINT64_MAX)
		ret = -EINVAL;
	else if (b != s->sb->batch) {
		st64(&s->sb->batch, b);
		ret = pm_persist(s, &s->sb->batch, 8);
	}
	pthread_rwlock_unlock(&s->snap_lock);
	return ret;
}

int store_snap_create(struct store *s, const char *name, int durable, struct store_snap *out)
{
	if (pm_writable(s))
		return -EROFS; /* the pool failed (pm.c) */
	volatile int ret = name_ok(name);
	if (ret)
		return ret;
	pthread_rwlock_wrlock(&s->snap_lock); /* waits for commits in flight */
	pthread_rwlock_rdlock(&s->cat_lock);
	volatile int idx = -1;
	if (find_locked(s, name) >= 0) {
		ret = -EEXIST;
		goto out;
	}
	for (uint32_t i = 0; i < EMB_MAX_SNAPS && idx < 0; i++)
		if (!(rec_flags(rec(s, i)) & EMB_S_USED))
			idx = (int)i;
	if (idx < 0) {
		ret = -ENOSPC;
		goto out;
	}
	volatile uint32_t n = 0;
	for (uint32_t i = 0; i < EMB_NTABLES; i++)
		n += s->tab[i] && !(s->tab[i]->t->flags & EMB_T_ORPHAN);
	struct emb_snap *r = rec(s, (uint32_t)idx);
	pthread_mutex_lock(&s->meta_lock);
	TX_BEGIN(s->pop) {
		uint64_t toff = 0;
		if (n) {
			PMEMoid o = pmemobj_tx_zalloc(n * sizeof(struct emb_snap_table), 0);
			struct emb_snap_table *t = pmemobj_direct(o);
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
			toff = o.off;
		}
		pmemobj_tx_add_range_direct(r, sizeof(*r));
		pmemobj_tx_add_range_direct(&s->sb->snap_seq, 8);
		pmemobj_tx_add_range_direct(&s->sb->batch, 8);
		memset(r, 0, sizeof(*r));
		r->gen = ++s->sb->snap_seq;
		r->batch = s->sb->batch;
		r->flags = flags_word(EMB_S_USED | (durable ? EMB_S_DURABLE : 0));
		r->ntables = n;
		r->created_ns = now_ns();
		r->tables_off = toff;
		strcpy(r->name, name);
		r->csum = rec_csum(s->base, r);
		s->sb->batch = r->batch + 1;
		super_seal_tx(s);
	} TX_ONABORT {
		ret = pm_tx_errno();
	} TX_END
	ret = pm_tx_end(s, ret);
	pthread_mutex_unlock(&s->meta_lock);
	if (!ret) {
		live_rebuild(s);
		if (out)
			fill_snap(r, (uint32_t)idx, out);
	}
out:
	pthread_rwlock_unlock(&s->cat_lock);
	pthread_rwlock_unlock(&s->snap_lock);
	return ret;
}

int store_snap_set_durable(struct store *s, uint32_t idx, uint64_t gen)
{
	if (idx >= EMB_MAX_SNAPS)
		return -EINVAL;
	struct emb_snap *r = rec(s, idx);
	int ret = 0;
	/* shared: a drop (exclusive) cannot run meanwhile, so the record stays
	 * the one named by gen */
	pthread_rwlock_rdlock(&s->snap_lock);
	uint32_t f = rec_flags(r);
	if (!rec_live(r) || r->gen != gen)
		ret = -ENOENT; /* dropped, and maybe the slot reused */
	else if (!(f & EMB_S_DURABLE))
		ret = rec_flags_set(s, r, f | EMB_S_DURABLE);
	pthread_rwlock_unlock(&s->snap_lock);
	return ret;
}

/* Walk every table: free what the live snapshots need not keep, free
 * zombie tables left empty, and recount each snapshot's excl_bytes.
 * commit_lock held. */
int snap_reclaim_all(struct store *s)
{
	int ret = 0;
	for (uint32_t i = 0; i < EMB_MAX_SNAPS; i++)
		if (rec_live(rec(s, i)))
			st64(&rec(s, i)->excl_bytes, 0);
	for (uint32_t i = 0; i < EMB_NTABLES && ret >= 0; i++) {
		struct stable *st = tab_get(s, i);
		if (!st)
			continue;
		ret = reclaim_table(s, st, 1);
		if (ret == 0 && (st->t->flags & EMB_T_ZOMBIE))
			ret = catalog_free_locked(s, st);
	}
	return ret < 0 ? ret : 0;
}

/* Free what the snapshots left need not keep; then the record.
 * commit_lock held; the record is already marked dropping. */
static int drop_locked(struct store *s, uint32_t idx)
{
	struct emb_snap *r = rec(s, idx);
	volatile int ret = snap_reclaim_all(s);
	if (ret)
		return ret;
	pthread_mutex_lock(&s->meta_lock);
	TX_BEGIN(s->pop) {
		if (r->tables_off)
			pmemobj_tx_free(pmemobj_oid(S_PTR(s, r->tables_off)));
		pmemobj_tx_add_range_direct(r, sizeof(*r));
		rec_clear(r);
	} TX_ONABORT {
		ret = pm_tx_errno();
	} TX_END
	ret = pm_tx_end(s, ret);
	pthread_mutex_unlock(&s->meta_lock);
	return ret;
}

static int mark_dropping(struct store *s, uint32_t idx)
{
	struct emb_snap *r = rec(s, idx);
	int ret = rec_flags_set(s, r, rec_flags(r) | EMB_S_DROPPING);
	live_rebuild(s);
	return ret;
}

int store_snap_drop(struct store *s, const char *name)
{
	pthread_mutex_lock(&s->commit_lock);
	pthread_rwlock_wrlock(&s->snap_lock);
	int idx = find_locked(s, name);
	int ret = idx < 0 ? -ENOENT : pm_writable(s);
	if (!ret)
		ret = mark_dropping(s, (uint32_t)idx);
	pthread_rwlock_unlock(&s->snap_lock);
	if (!ret)
		ret = drop_locked(s, (uint32_t)idx);
	pthread_mutex_unlock(&s->commit_lock);
	return ret;
}

/* At mount: finish drops, and drop snapshots that never became durable. */
int snap_recover(struct store *s)
{
	int ret = 0;
	pthread_mutex_lock(&s->commit_lock);
	for (uint32_t i = 0; i < EMB_MAX_SNAPS && !ret; i++) {
		uint32_t f = rec_flags(rec(s, i));
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
		fill_snap(rec(s, (uint32_t)idx), (uint32_t)idx, out);
	pthread_rwlock_unlock(&s->snap_lock);
	return idx >= 0 ? 0 : -ENOENT;
}

int store_snap_get(struct store *s, uint32_t idx, struct store_snap *out)
{
	if (idx >= EMB_MAX_SNAPS)
		return -ENOENT;
	pthread_rwlock_rdlock(&s->snap_lock);
	int ok = rec_live(rec(s, idx));
	if (ok)
		fill_snap(rec(s, idx), idx, out);
	pthread_rwlock_unlock(&s->snap_lock);
	return ok ? 0 : -ENOENT;
}

int store_snap_next(struct store *s, uint32_t *cursor, struct store_snap *out)
{
	pthread_rwlock_rdlock(&s->snap_lock);
	for (uint32_t i = *cursor; i < EMB_MAX_SNAPS; i++)
		if (rec_live(rec(s, i))) {
			fill_snap(rec(s, i), i, out);
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
	int n = snap_refs(s, st);
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
	const struct emb_snap *r = rec(s, idx);
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
	const struct emb_snap *r = rec(s, idx);
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
	const struct emb_snap *r = rec(s, idx);
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
