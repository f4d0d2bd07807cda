/*
 * The row index's structure (the design: store/index.c): the directory and
 * its segments checked at mount and loaded into DRAM, bucket checksums
 * checked, segments grown, split and the directory doubled (each in a
 * libpmemobj transaction, under the index-room reserve), sizes counted, and
 * a table's index freed.  What lives in the buckets (lookups, claims,
 * entries, walks) is index.c's, which calls this file; this file calls
 * nothing of index.c.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "index_int.h"

int index_bucket_check(struct store *s, const struct emb_bucket *b)
{
	if (bucket_sum(b) == csum_ld(b))
		return 0;
	csum_error(s);
	return -EIO;
}

/* ---- directory ---------------------------------------------------------- */

int index_check(struct store *s, const struct emb_table *t, char *err, size_t n)
{
	if (!t->dir_off)
		return t->nsegs ? store_err(err, n, -EIO, "no index directory, %llu segments",
					    (unsigned long long)t->nsegs) : 0;
	if (!pool_range_ok(s, t->dir_off, sizeof(struct emb_dir), 8))
		return store_err(err, n, -EIO, "index directory outside the pool");
	const struct emb_dir *d = S_PTR(s, t->dir_off);
	uint32_t gd = d->global_depth;
	if (d->magic != EMB_DIR_MAGIC || gd > EMB_MAX_DEPTH)
		return store_err(err, n, -EIO, "index directory is damaged (magic or depth)");
	size_t cnt = (size_t)1 << gd;
	if (!pool_range_ok(s, t->dir_off, sizeof(*d) + cnt * 8, 8))
		return store_err(err, n, -EIO, "index directory outside the pool");
	uint64_t nseg = 0;
	/* a dying index (index_destroy) has freed the segments below free_at */
	size_t from = (t->flags & EMB_T_DYING) ? (size_t)t->free_at : 0;
	if (from > cnt)
		return store_err(err, n, -EIO, "index destroy cursor past the directory");
	for (size_t i = from; i < cnt; nseg++) {
		uint64_t off = d->seg[i];
		if (!pool_range_ok(s, off, seg_bytes(EMB_SEG_SMALL), 64))
			return store_err(err, n, -EIO, "index directory entry %zu points outside the pool", i);
		const struct emb_seg *g = S_PTR(s, off);
		if (g->magic != EMB_SEG_MAGIC || g->csum != seg_csum(g) || g->local_depth > gd ||
		    off - g->raw_off >= 64 || (g->nbuckets != EMB_SEG_SMALL && g->nbuckets != EMB_SEG_LARGE) ||
		    !pool_range_ok(s, off, seg_bytes(g->nbuckets), 64))
			return store_err(err, n, -EIO, "index segment %zu is damaged (header)", i);
		size_t span = (size_t)1 << (gd - g->local_depth);
		if (i % span || g->prefix != i >> (gd - g->local_depth))
			return store_err(err, n, -EIO, "index segment %zu is damaged (hash prefix)", i);
		for (size_t k = 1; k < span; k++)
			if (d->seg[i + k] != off)
				return store_err(err, n, -EIO, "index directory entry %zu is damaged", i + k);
		i += span;
	}
	if (nseg != t->nsegs)
		return store_err(err, n, -EIO, "index has %llu segments, the catalog says %llu",
				 (unsigned long long)nseg, (unsigned long long)t->nsegs);
	return 0;
}

int index_load(struct store *s, struct stable *st)
{
	index_unload(st);
	if (!st->t->dir_off || (st->t->flags & EMB_T_DYING))
		return 0; /* a dying index is only walked by index_destroy */
	struct emb_dir *d = S_PTR(s, st->t->dir_off);
	if (d->global_depth > EMB_MAX_DEPTH)
		return -EIO;
	size_t n = (size_t)1 << d->global_depth;
	st->segs = malloc(n * sizeof(*st->segs));
	if (!st->segs)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		st->segs[i] = S_PTR(s, d->seg[i]);
	st->gd = d->global_depth;
	return 0;
}

void index_unload(struct stable *st)
{
	free((void *)st->vmemo);
	st->vmemo = NULL;
	free(st->segs);
	st->segs = NULL;
	st->gd = 0;
}

/* ---- structure changes (transactions) --------------------------------- */

/* A new empty segment of nb buckets (every bucket sealed empty), persisted. */
static struct emb_seg *seg_new_tx(struct store *s, uint32_t ld, uint64_t prefix, uint32_t nb)
{
	uint64_t cls = nb == EMB_SEG_LARGE ? s->xa_seg_large : s->xa_seg;
	PMEMoid o = pmemobj_tx_xalloc(seg_bytes(nb) + 64, 0, POBJ_XALLOC_ZERO | cls);
	char *raw = pmemobj_direct(o);
	struct emb_seg *seg = (struct emb_seg *)(((uintptr_t)raw + 63) & ~(uintptr_t)63);
	seg->magic = EMB_SEG_MAGIC;
	seg->local_depth = ld;
	seg->nbuckets = nb;
	seg->prefix = prefix;
	seg->raw_off = o.off;
	seg->csum = seg_csum(seg);
	uint32_t empty = h_ctl(0);
	for (unsigned bi = 0; bi < nb; bi++)
		seg->bucket[bi].csum = empty;
	pmemobj_persist(s->pop, seg, seg_bytes(nb));
	return seg;
}

static void seg_free_tx(struct store *s, struct emb_seg *seg)
{
	pmemobj_tx_free(pmemobj_oid(S_PTR(s, seg->raw_off)));
}

/* Insert slot value v (tag and ref) of hash h into a fresh segment, into
 * the emptier of its two buckets (no concurrency, persisted by the caller). */
static int seg_put(struct emb_seg *seg, struct ihash h, uint64_t v)
{
	struct emb_bucket *b = &seg->bucket[bucket1(seg, h)], *t = b;
	struct emb_bucket *nb = &seg->bucket[bucket2(seg, h)];
	uint64_t fb = ~b->ctl & EMB_CTL_VALID_MASK, fn = ~nb->ctl & EMB_CTL_VALID_MASK;
	if (__builtin_popcountll(fn) > __builtin_popcountll(fb) &&
	    (b->ctl & EMB_CTL_OVF_MASK) != EMB_CTL_OVF_MASK) {
		t = nb;
		b->ctl += 1ull << EMB_CTL_OVF_SHIFT;
		fb = fn;
	}
	if (!fb)
		return -1;
	int i = __builtin_ctzll(fb);
	t->slot[i] = v;
	t->ctl |= 1ull << i;
	return 0;
}

static int index_create(struct store *s, struct stable *st)
{
	volatile int ret = 0;
	META_TX(s) {
		struct emb_seg *seg = seg_new_tx(s, 0, 0, EMB_SEG_SMALL);
		PMEMoid d = pmemobj_tx_xalloc(sizeof(struct emb_dir) + 8, 0, POBJ_XALLOC_ZERO | s->xa_dir[0]);
		struct emb_dir *dir = pmemobj_direct(d);
		dir->global_depth = 0;
		dir->magic = EMB_DIR_MAGIC;
		dir->seg[0] = S_OFF(s, seg);
		pmemobj_persist(s->pop, dir, sizeof(*dir) + 8);
		pmemobj_tx_add_range_direct(&st->t->dir_off, 8);
		st->t->dir_off = d.off;
		pmemobj_tx_add_range_direct(&st->t->nsegs, 8);
		st->t->nsegs = 1;
		catalog_seal_tx(st->t);
	} META_TX_END(s, ret);
	if (ret)
		return ret;
	atomic_fetch_add(&s->idx_segs, 1);
	atomic_fetch_add(&s->idx_dir_bytes, sizeof(struct emb_dir) + 8);
	return index_load(s, st);
}

/* In a transaction: what replaces full segment old, its entries rehashed
 * into it (hs: their row ids' hashes, in bucket and slot order): a large
 * segment of the same depth for a small one (n[0]), the two small halves
 * of one more depth for a large one (by the next bit of each row's hash);
 * sealed and persisted. */
static int seg_reshape_tx(struct store *s, struct emb_seg *old, const struct ihash *hs, struct emb_seg *n[2])
{
	uint32_t ld = old->local_depth;
	int split = old->nbuckets == EMB_SEG_LARGE;
	if (split) {
		n[0] = seg_new_tx(s, ld + 1, old->prefix << 1, EMB_SEG_SMALL);
		n[1] = seg_new_tx(s, ld + 1, (old->prefix << 1) | 1, EMB_SEG_SMALL);
	} else {
		n[0] = n[1] = seg_new_tx(s, ld, old->prefix, EMB_SEG_LARGE);
	}
	for (unsigned bi = 0; bi < old->nbuckets; bi++) {
		struct emb_bucket *b = &old->bucket[bi];
		for (uint64_t m = b->ctl & EMB_CTL_VALID_MASK; m; m &= m - 1) {
			int i = __builtin_ctzll(m);
			struct ihash h = *hs++;
			int side = split ? (int)((h.lo >> (63 - ld)) & 1) : 0;
			if (seg_put(n[side], h, b->slot[i]))
				pmemobj_tx_abort(ENOSPC);
		}
	}
	for (int k = 0; k < 1 + split; k++) {
		for (unsigned bi = 0; bi < n[k]->nbuckets; bi++)
			bucket_seal(&n[k]->bucket[bi]);
		pmemobj_persist(s->pop, n[k], seg_bytes(n[k]->nbuckets));
	}
	return split;
}

/* In a transaction: a directory of twice the entries, entry di's two
 * halves in place of it, replaces the table's directory. */
static void dir_double_tx(struct store *s, struct stable *st, size_t di, struct emb_seg *n[2])
{
	struct emb_dir *dir = S_PTR(s, st->t->dir_off);
	uint32_t gd = st->gd;
	size_t cnt = (size_t)1 << gd;
	PMEMoid nd = pmemobj_tx_xalloc(sizeof(struct emb_dir) + 2 * cnt * 8, 0,
				       s->xa_dir[gd + 1 <= EMB_MAX_DEPTH ? gd + 1 : 0]);
	struct emb_dir *ndir = pmemobj_direct(nd);
	ndir->global_depth = gd + 1;
	ndir->magic = EMB_DIR_MAGIC;
	for (size_t i = 0; i < cnt; i++) {
		if (i == di) {
			ndir->seg[2 * i] = S_OFF(s, n[0]);
			ndir->seg[2 * i + 1] = S_OFF(s, n[1]);
		} else {
			ndir->seg[2 * i] = ndir->seg[2 * i + 1] = dir->seg[i];
		}
	}
	pmemobj_persist(s->pop, ndir, sizeof(*ndir) + 2 * cnt * 8);
	pmemobj_tx_add_range_direct(&st->t->dir_off, 8);
	st->t->dir_off = nd.off;
	pmemobj_tx_free(pmemobj_oid(dir));
}

/* Start loading each element b's slots lead to, every line ref_sound
 * reads (a split checks them all: each line is a cache miss otherwise). */
static void bucket_prefetch_elems(struct store *s, const struct emb_bucket *b, uint32_t len)
{
	for (uint64_t m = ld64(&b->ctl) & EMB_CTL_VALID_MASK; m; m &= m - 1) {
		uint64_t off = ref_obj(ld64(&b->slot[__builtin_ctzll(m)]));
		const char *p = S_PTR(s, off & ~63ull);
		for (uint32_t l = 0; l < len + (off & 63); l += 64)
			prefetch_l2(p + l);
	}
}

/* Replace the full segment at directory index di: a small one by a large
 * one, a large one by two small ones of depth+1. */
static int index_split(struct store *s, struct stable *st, size_t di)
{
	struct emb_seg *old = st->segs[di];
	uint32_t ld = old->local_depth, gd = st->gd;
	volatile int ret = 0;
	volatile int split = old->nbuckets == EMB_SEG_LARGE;

	if (split && ld >= EMB_MAX_DEPTH)
		return -E2BIG; /* no room will help: see index_grow */
	/* what is copied must be sound: no checksum is recomputed over damage,
	 * and the row ids it rehashes are those of sound elements, hashed
	 * here while their first line is loaded */
	struct ihash *hs = malloc((size_t)old->nbuckets * EMB_BUCKET_SLOTS * sizeof(*hs)), *h = hs;
	if (!hs)
		return -ENOMEM;
	for (unsigned bi = 0; bi < old->nbuckets; bi++) {
		struct emb_bucket *b = &old->bucket[bi];
		if (bi + 1 < old->nbuckets) /* the next bucket's elements start loading */
			bucket_prefetch_elems(s, &old->bucket[bi + 1],
					      (uint32_t)sizeof(struct emb_version) + st->t->row_size);
		if (index_bucket_check(s, b)) {
			free(hs);
			return -EIO;
		}
		for (uint64_t m = ld64(&b->ctl) & EMB_CTL_VALID_MASK; m; m &= m - 1) {
			uint64_t ref = ld64(&b->slot[__builtin_ctzll(m)]) & EMB_REF_MASK;
			if (!ref_sound(s, st, ref)) {
				free(hs);
				return -EIO;
			}
			*h++ = ihash_of(s, ref_row(s, ref));
		}
	}
	META_TX(s) {
		struct emb_seg *n[2];
		seg_reshape_tx(s, old, hs, n);
		if (split && ld == gd) {
			dir_double_tx(s, st, di, n);
		} else { /* the entries that pointed at old point at what replaces it */
			struct emb_dir *dir = S_PTR(s, st->t->dir_off);
			size_t span = (size_t)1 << (gd - ld);
			size_t start = di & ~(span - 1);
			pmemobj_tx_add_range_direct(&dir->seg[start], span * 8);
			for (size_t i = 0; i < span; i++)
				dir->seg[start + i] = S_OFF(s, n[i < span / 2 ? 0 : 1]);
		}
		if (split) {
			pmemobj_tx_add_range_direct(&st->t->nsegs, 8);
			st->t->nsegs++;
			catalog_seal_tx(st->t);
		}
		seg_free_tx(s, old);
	} META_TX_END(s, ret);
	free(hs);
	if (ret)
		return ret;
	if (split)
		atomic_fetch_add(&s->idx_segs, 1);
	atomic_fetch_add(&s->idx_large, split ? (uint64_t)-1 : 1);
	if (split && ld == gd)
		atomic_fetch_add(&s->idx_dir_bytes, 8ull << gd);
	return index_load(s, st);
}

struct grow {
	struct store *s;
	struct stable *st;
	size_t di;   /* segment to split, or SIZE_MAX: create the index */
};

static int grow_fn(void *arg)
{
	struct grow *g = arg;
	return g->di == SIZE_MAX ? index_create(g->s, g->st) : index_split(g->s, g->st, g->di);
}

/* Create the index or split a segment, with the index-room reserve behind it
 * (see slab.c): st->lock exclusive around it. */
int index_grow(struct store *s, struct stable *st, size_t di)
{
	struct grow g = { s, st, di };
	pthread_rwlock_wrlock(&st->lock);
	int ret = resv_run(s, grow_fn, &g);
	pthread_rwlock_unlock(&st->lock);
	if (ret == -E2BIG)
		ret = -ENOSPC;
	return ret ? ret : -EAGAIN;
}

size_t index_ndir(const struct stable *st)
{
	return st->segs ? (size_t)1 << st->gd : 0;
}

__attribute__((noinline)) uint64_t index_large(const struct stable *st)
{
	uint64_t k = 0;
	for (size_t di = 0, n = index_ndir(st); di < n;) {
		k += st->segs[di]->nbuckets == EMB_SEG_LARGE;
		di += (size_t)1 << (st->gd - st->segs[di]->local_depth);
	}
	return k;
}

uint64_t index_bytes(struct store *s)
{
	uint64_t segs = atomic_load(&s->idx_segs), large = atomic_load(&s->idx_large);
	large = large > segs ? segs : large;
	return (segs - large) * (seg_bytes(EMB_SEG_SMALL) + 64) + large * (seg_bytes(EMB_SEG_LARGE) + 64) +
	       atomic_load(&s->idx_dir_bytes);
}

/*
 * Free every segment and the directory; the rows must be gone.  One
 * transaction for a whole index would log a free per segment, more than
 * libpmemobj's lanes hold, and a full pool has no heap to extend the log
 * (rm of a big table then freed nothing).  So the table is marked dying,
 * which no reader looks at again, and its segments go a few per small
 * transaction in directory order, free_at recording the progress; mount
 * finishes a destroy a crash interrupted (table_recover).
 */
#define DESTROY_STEP 8
int index_destroy(struct store *s, struct stable *st)
{
	struct emb_table *t = st->t;
	volatile int ret = 0;
	if (!t->dir_off)
		return 0;
	struct emb_dir *dir = S_PTR(s, t->dir_off);
	uint32_t gd = dir->global_depth;
	uint64_t nsegs = t->nsegs, n = 1ull << gd;
	int counted = st->segs != NULL; /* in idx_segs (not when resumed at mount) */
	uint64_t large = counted ? index_large(st) : 0;
	pthread_rwlock_wrlock(&st->lock);
	index_unload(st); /* readers find no rows from here on */
	pthread_rwlock_unlock(&st->lock);
	/* the catalog entry's flags change under cat_lock (store_int.h);
	 * its index fields (free_at, nsegs, dir_off) under commit_lock */
	if (!(t->flags & EMB_T_DYING)) {
		pthread_rwlock_wrlock(&s->cat_lock);
		META_TX(s) {
			pmemobj_tx_add_range_direct(&t->flags, 4);
			pmemobj_tx_add_range_direct(&t->free_at, 8);
			t->flags |= EMB_T_DYING;
			t->free_at = 0;
			catalog_seal_tx(t);
		} META_TX_END(s, ret);
		pthread_rwlock_unlock(&s->cat_lock);
		if (ret)
			return ret;
	}
	while (t->free_at < n) {
		META_TX(s) {
			pmemobj_tx_add_range_direct(&t->free_at, 8);
			pmemobj_tx_add_range_direct(&t->nsegs, 8);
			for (int k = 0; k < DESTROY_STEP && t->free_at < n; k++) {
				/* free_at is the first entry of a segment not freed yet:
				 * a segment's entries are a span aligned to its size */
				struct emb_seg *seg = S_PTR(s, dir->seg[t->free_at]);
				t->free_at += 1ull << (gd - seg->local_depth);
				seg_free_tx(s, seg);
				if (t->nsegs)
					t->nsegs--;
			}
			catalog_seal_tx(t);
		} META_TX_END(s, ret);
		if (ret)
			return ret;
	}
	pthread_rwlock_wrlock(&s->cat_lock);
	META_TX(s) {
		pmemobj_tx_free(pmemobj_oid(dir));
		pmemobj_tx_add_range_direct(t, offsetof(struct emb_table, reserved1));
		t->dir_off = 0;
		t->nsegs = 0;
		t->free_at = 0;
		t->flags &= ~EMB_T_DYING;
		catalog_seal_tx(t);
	} META_TX_END(s, ret);
	pthread_rwlock_unlock(&s->cat_lock);
	if (!ret && counted) {
		atomic_fetch_sub(&s->idx_segs, nsegs);
		atomic_fetch_sub(&s->idx_large, large);
		atomic_fetch_sub(&s->idx_dir_bytes, sizeof(struct emb_dir) + (8ull << gd));
	}
	return ret;
}
