/*
 * Persistent row index: row id -> offset of its newest emb_version.
 *
 * Extendible hashing.  A directory of 2^global_depth segment pointers is
 * indexed by the top bits of XXH3(row id); a segment holds 256 buckets of 256
 * bytes (layout.h).  A key lives in its home bucket (low 8 hash bits) or the
 * next one; the home bucket's overflow count says whether the next one must
 * be probed.  A lookup therefore reads bucket line 0 (control word and tags),
 * then the one line holding the matching slot: two cache lines, plus one more
 * pair only for overflowed keys.  There are no chains: a segment whose
 * bucket pair is full is split (in a libpmemobj transaction).  Lookup cost
 * and space depend only on the number of rows, never on the ids' magnitude.
 *
 * Entries are published by one 8-byte store of the bucket control word; slot
 * contents are written (and persisted) before that, while the slot is still
 * free.  The DRAM mirror of the directory is rebuilt from PMem at first use:
 * mount reads no rows.
 *
 * Locking: readers hold st->lock shared.  All changes run under commit_lock;
 * those that move or free memory readers could see (publish, split, destroy)
 * or that change what a bucket's checksum covers also hold st->lock
 * exclusive, so a reader never sees a bucket between a change and its new
 * checksum.
 *
 * Damage.  Each bucket's csum covers the valid bits and the overflow count
 * of ctl and, for each valid slot, its tag, key and value: the XOR of one
 * digest of the covered ctl bits and one per valid slot (slot index, tag,
 * key, value), so a change updates it from the old and new digests of what
 * it touched.  Filling a free slot changes nothing covered.  A reader checks
 * a bucket only when a lookup misses (a hit is checked by the version it
 * leads to, ver.c: a damaged key, value, tag or valid bit either leads to a
 * version that fails, or turns the hit into a miss); a miss checks the home
 * bucket and the neighbour it probed, so a row never reads as a hole because
 * its entry was damaged.  Writers (index_find, index_claim) check the buckets
 * they will change, a split checks the whole segment it copies, and walks
 * check every bucket: no checksum is ever recomputed over damage.  The
 * directory and the segment headers (magic, local depth, the hash prefix a
 * segment holds, an XXH64 of the header) are checked at mount (index_check).
 *
 * Crash consistency of checksums.  A covered field and the checksum are two
 * stores, not one.  Every change of a covered field happens either while the
 * journal is sealed with the row it concerns -- commit A3 (home bucket's
 * overflow count), B (publish, value, unpublish) and C (overflow count);
 * reclaim_apply (value, unpublish, overflow count); relink_apply (value) --
 * or inside a libpmemobj transaction (index_create, index_split,
 * index_destroy).  Recovery recomputes the checksums of the home and next
 * bucket of every journaled row (index_reseal) before anything reads them.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "store_int.h"

static inline uint8_t tag_of(uint64_t h)
{
	return (uint8_t)(h >> 8);
}

static inline size_t dir_idx(uint64_t h, uint32_t gd)
{
	return gd ? (size_t)(h >> (64 - gd)) : 0;
}

uint64_t index_hash(const struct store *s, uint64_t key)
{
	return XXH3_64bits_withSeed(&key, sizeof(key), s->sb->hash_seed);
}

/* ---- bucket checksums --------------------------------------------------- */

#define CTL_COVERED (EMB_CTL_VALID_MASK | EMB_CTL_OVF_MASK)
#define SEED_CTL 0x454d4243544cull  /* "EMBCTL" */
#define SEED_SLOT 0x454d42534c54ull /* "EMBSLT" */

static inline uint32_t fold(uint64_t h)
{
	return (uint32_t)(h ^ (h >> 32));
}

static uint32_t h_ctl(uint64_t ctl)
{
	uint64_t c = ctl & CTL_COVERED;
	return fold(XXH3_64bits_withSeed(&c, sizeof(c), SEED_CTL));
}

static uint32_t h_slot(const struct emb_bucket *b, int i, uint64_t val)
{
	struct {
		uint64_t key, val;
		uint32_t idx, tag;
	} e = { ld64(&b->slot[i].key), val, (uint32_t)i, __atomic_load_n(&b->tags[i], __ATOMIC_RELAXED) };
	return fold(XXH3_64bits_withSeed(&e, sizeof(e), SEED_SLOT));
}

/* The checksum b should carry. */
static uint32_t bucket_sum(const struct emb_bucket *b)
{
	uint64_t ctl = ld64(&b->ctl);
	uint32_t c = h_ctl(ctl);
	for (uint64_t m = ctl & EMB_CTL_VALID_MASK; m; m &= m - 1) {
		int i = __builtin_ctzll(m);
		c ^= h_slot(b, i, ld64(&b->slot[i].val));
	}
	return c;
}

static inline uint32_t csum_ld(const struct emb_bucket *b)
{
	return __atomic_load_n(&b->csum, __ATOMIC_RELAXED);
}

static inline void csum_st(struct emb_bucket *b, uint32_t c)
{
	__atomic_store_n(&b->csum, c, __ATOMIC_RELAXED);
}

int index_bucket_check(struct store *s, const struct emb_bucket *b)
{
	if (bucket_sum(b) == csum_ld(b))
		return 0;
	csum_error(s);
	return -EIO;
}

/* ctl becomes nctl: store both and the checksum updated to match. */
static void ctl_set(struct store *s, struct emb_bucket *b, uint64_t nctl, uint32_t slot_delta)
{
	uint64_t ctl = ld64(&b->ctl);
	csum_st(b, csum_ld(b) ^ h_ctl(ctl) ^ h_ctl(nctl) ^ slot_delta);
	st64(&b->ctl, nctl);
	pm_flush(s, b, 32);
}

static void bucket_seal(struct emb_bucket *b)
{
	csum_st(b, bucket_sum(b));
}

/* ---- directory ---------------------------------------------------------- */

static uint64_t seg_csum(const struct emb_seg *g)
{
	return XXH64(g, offsetof(struct emb_seg, csum), 0);
}

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
		if (!pool_range_ok(s, off, sizeof(struct emb_seg), 64))
			return store_err(err, n, -EIO, "index directory entry %zu points outside the pool", i);
		const struct emb_seg *g = S_PTR(s, off);
		if (g->magic != EMB_SEG_MAGIC || g->csum != seg_csum(g) || g->local_depth > gd ||
		    off - g->raw_off >= 64)
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

static int probe(const struct emb_bucket *b, uint64_t key, uint8_t tag)
{
	uint64_t m = ld64(&b->ctl) & EMB_CTL_VALID_MASK;
	while (m) {
		int i = __builtin_ctzll(m);
		m &= m - 1;
		if (__atomic_load_n(&b->tags[i], __ATOMIC_RELAXED) == tag &&
		    ld64(&b->slot[i].key) == key)
			return i;
	}
	return -1;
}

/* Find key (of hash h) in its home bucket or the next: its value, 0 if
 * absent. */
static uint64_t lookup_h(struct stable *st, uint64_t key, uint64_t h, struct ipos *pos)
{
	if (!st->segs)
		return 0;
	struct emb_seg *seg = st->segs[dir_idx(h, st->gd)];
	unsigned bi = (unsigned)(h & (EMB_SEG_BUCKETS - 1));
	struct emb_bucket *b = &seg->bucket[bi];
	uint8_t tag = tag_of(h);
	int i = probe(b, key, tag);
	if (i >= 0) {
		if (pos)
			*pos = (struct ipos){ b, i, 0, b };
		return ld64(&b->slot[i].val);
	}
	if (!(ld64(&b->ctl) & EMB_CTL_OVF_MASK))
		return 0;
	struct emb_bucket *nb = &seg->bucket[(bi + 1) & (EMB_SEG_BUCKETS - 1)];
	i = probe(nb, key, tag);
	if (i < 0)
		return 0;
	if (pos)
		*pos = (struct ipos){ nb, i, 1, b };
	return ld64(&nb->slot[i].val);
}

static uint64_t lookup(struct store *s, struct stable *st, uint64_t key, struct ipos *pos)
{
	return st->segs ? lookup_h(st, key, index_hash(s, key), pos) : 0;
}

/* The buckets a lookup of key probes (nb NULL when only the home one). */
static void probed(struct store *s, struct stable *st, uint64_t key, struct emb_bucket **b,
		   struct emb_bucket **nb)
{
	uint64_t h = index_hash(s, key);
	struct emb_seg *seg = st->segs[dir_idx(h, st->gd)];
	unsigned bi = (unsigned)(h & (EMB_SEG_BUCKETS - 1));
	*b = &seg->bucket[bi];
	*nb = ld64(&(*b)->ctl) & EMB_CTL_OVF_MASK ? &seg->bucket[(bi + 1) & (EMB_SEG_BUCKETS - 1)] : NULL;
}

/*
 * A miss's bucket check, remembered (the read side only: no writer calls or
 * changes this).  A lookup that misses checks the buckets it probed, so
 * that a damaged entry never reads as a hole: one XXH3 per valid slot.  On
 * a table whose rows are mostly in sorted runs nearly every lookup misses,
 * and that check was a third of a range read's CPU.  So a bucket that
 * passed is remembered in a DRAM array of the table's (st->vmemo: 4 bytes
 * per bucket of each directory entry, made at the first miss for
 * directories of up to 2^VMEMO_MAX_GD entries, dropped with the DRAM
 * directory by index_unload, i.e. at every split): a 32-bit digest of the
 * bucket's covered control bits and its checksum.  A later miss skips the
 * check when the digest matches.  Every change a checksum covers changes
 * the checksum (XOR of the digests of what changed), so a changed bucket
 * is checked again; a digest that came back to a remembered value names
 * the same contents unless 32 bits collide, the odds of damage the checksum
 * itself misses.  What this gives up: damage to a remembered bucket's slots
 * that happens while the pool is mounted (not its control word or
 * checksum) is found when the bucket next changes or at the next mount,
 * not at the next miss.  Racing readers make the array once (one wins, the
 * others free theirs); entries are single 32-bit stores.
 */
#define VMEMO_MAX_GD 14 /* at most 16 MiB of memo for a table */

static inline uint32_t vmemo_digest(const struct emb_bucket *b)
{
	uint64_t k = ((ld64(&b->ctl) & CTL_COVERED) * 0x9E3779B97F4A7C15ull) ^ csum_ld(b);
	k ^= k >> 29;
	k *= 0xBF58476D1CE4E5B9ull;
	k ^= k >> 32;
	return (uint32_t)k | 1; /* 0: nothing remembered */
}

/* Check bucket bi of directory entry di (b), or find it remembered. */
static int bucket_check_memo(struct store *s, struct stable *st, size_t di, unsigned bi,
			     const struct emb_bucket *b)
{
	_Atomic uint32_t *m = atomic_load_explicit(&st->vmemo, memory_order_acquire);
	if (!m) {
		if (st->gd > VMEMO_MAX_GD)
			return index_bucket_check(s, b);
		_Atomic uint32_t *fresh = calloc((size_t)EMB_SEG_BUCKETS << st->gd, sizeof(*fresh)), *none = NULL;
		if (!fresh)
			return index_bucket_check(s, b);
		if (atomic_compare_exchange_strong(&st->vmemo, &none, fresh)) {
			m = fresh;
		} else {
			free(fresh);
			m = none;
		}
	}
	_Atomic uint32_t *e = &m[di * EMB_SEG_BUCKETS + bi];
	uint32_t k = vmemo_digest(b);
	if (atomic_load_explicit(e, memory_order_relaxed) == k)
		return 0;
	int ret = index_bucket_check(s, b);
	if (!ret)
		atomic_store_explicit(e, k, memory_order_relaxed);
	return ret;
}

/* A miss of a key of hash h: check (or find remembered) the buckets it
 * probed.  0 or -EIO. */
static int miss_check(struct store *s, struct stable *st, uint64_t h)
{
	size_t di = dir_idx(h, st->gd);
	unsigned bi = (unsigned)(h & (EMB_SEG_BUCKETS - 1));
	struct emb_seg *seg = st->segs[di];
	int ret = bucket_check_memo(s, st, di, bi, &seg->bucket[bi]);
	if (!ret && (ld64(&seg->bucket[bi].ctl) & EMB_CTL_OVF_MASK)) {
		bi = (bi + 1) & (EMB_SEG_BUCKETS - 1);
		ret = bucket_check_memo(s, st, di, bi, &seg->bucket[bi]);
	}
	return ret;
}

int index_get(struct store *s, struct stable *st, uint64_t key, uint64_t *val)
{
	if (!st->segs) {
		*val = 0;
		return 0;
	}
	uint64_t h = index_hash(s, key);
	*val = lookup_h(st, key, h, NULL);
	return *val ? 0 : miss_check(s, st, h);
}

/* index_get of many keys, for reads of many rows (readers only: st->lock
 * shared): each key hashed once, and the bucket line (and memo entry) of
 * the key INDEX_AHEAD places on loaded early, so that the loads of
 * buckets far apart in the pool overlap instead of one waiting for the
 * other. */
#define INDEX_AHEAD 8
int index_get_many(struct store *s, struct stable *st, const uint64_t *keys, size_t n, const uint8_t *skip,
		   uint64_t *vals)
{
	uint64_t h[INDEX_AHEAD];
	_Atomic uint32_t *m = atomic_load_explicit(&st->vmemo, memory_order_relaxed);
	size_t next = 0;
	for (size_t i = 0; i < n; i++) {
		for (; st->segs && next < n && next < i + INDEX_AHEAD; next++) {
			if (skip && skip[next])
				continue;
			uint64_t x = h[next % INDEX_AHEAD] = index_hash(s, keys[next]);
			size_t di = dir_idx(x, st->gd);
			unsigned bi = (unsigned)(x & (EMB_SEG_BUCKETS - 1));
			__builtin_prefetch(&st->segs[di]->bucket[bi]);
			if (m)
				__builtin_prefetch(&m[di * EMB_SEG_BUCKETS + bi]);
		}
		if (skip && skip[i])
			continue;
		vals[i] = st->segs ? lookup_h(st, keys[i], h[i % INDEX_AHEAD], NULL) : 0;
		int ret = vals[i] ? 0 : st->segs ? miss_check(s, st, h[i % INDEX_AHEAD]) : 0;
		if (ret)
			return ret;
		if (!m)
			m = atomic_load_explicit(&st->vmemo, memory_order_relaxed);
	}
	return 0;
}

int index_find(struct store *s, struct stable *st, uint64_t key, struct ipos *pos, uint64_t *val)
{
	*val = lookup(s, st, key, pos);
	if (!st->segs)
		return 0;
	struct emb_bucket *b, *nb;
	probed(s, st, key, &b, &nb);
	int ret = index_bucket_check(s, b);
	if (!ret && nb)
		ret = index_bucket_check(s, nb);
	return ret;
}

void index_reseal(struct store *s, struct stable *st, uint64_t key)
{
	if (!st->segs)
		return;
	uint64_t h = index_hash(s, key);
	struct emb_seg *seg = st->segs[dir_idx(h, st->gd)];
	unsigned bi = (unsigned)(h & (EMB_SEG_BUCKETS - 1));
	for (unsigned k = 0; k < 2; k++) {
		struct emb_bucket *b = &seg->bucket[(bi + k) & (EMB_SEG_BUCKETS - 1)];
		bucket_seal(b);
		pm_flush(s, b, 32);
	}
}

/* ---- claims: free slots promised to the ops of one commit ------------- */

struct claim {
	struct emb_bucket *b;
	uint32_t mask;
};
struct claims {
	size_t cap;
	struct claim *e;
};

struct claims *claims_new(size_t n)
{
	struct claims *c = malloc(sizeof(*c));
	if (!c)
		return NULL;
	c->cap = 16;
	while (c->cap < 2 * n + 16)
		c->cap <<= 1;
	c->e = calloc(c->cap, sizeof(*c->e));
	if (!c->e) {
		free(c);
		return NULL;
	}
	return c;
}

void claims_free(struct claims *c)
{
	if (c) {
		free(c->e);
		free(c);
	}
}

void claims_reset(struct claims *c)
{
	memset(c->e, 0, c->cap * sizeof(*c->e));
}

static struct claim *claim_slot(struct claims *c, struct emb_bucket *b)
{
	size_t i = ((uintptr_t)b >> 8) * 0x9E3779B97F4A7C15ull >> 20;
	for (;; i++) {
		struct claim *e = &c->e[i & (c->cap - 1)];
		if (e->b == b || !e->b) {
			e->b = b;
			return e;
		}
	}
}

static int free_slot(struct claims *c, struct emb_bucket *b, struct claim **ce)
{
	struct claim *e = claim_slot(c, b);
	uint64_t busy = (ld64(&b->ctl) & EMB_CTL_VALID_MASK) | e->mask;
	uint64_t fr = ~busy & EMB_CTL_VALID_MASK;
	*ce = e;
	return fr ? __builtin_ctzll(fr) : -1;
}

/* ---- structure changes (transactions) --------------------------------- */

/* A new empty segment (every bucket sealed empty), persisted. */
static struct emb_seg *seg_new_tx(struct store *s, uint32_t ld, uint64_t prefix)
{
	PMEMoid o = pmemobj_tx_xalloc(sizeof(struct emb_seg) + 64, 0, POBJ_XALLOC_ZERO | s->xa_seg);
	char *raw = pmemobj_direct(o);
	struct emb_seg *seg = (struct emb_seg *)(((uintptr_t)raw + 63) & ~(uintptr_t)63);
	seg->magic = EMB_SEG_MAGIC;
	seg->local_depth = ld;
	seg->prefix = prefix;
	seg->raw_off = o.off;
	seg->csum = seg_csum(seg);
	uint32_t empty = h_ctl(0);
	for (unsigned bi = 0; bi < EMB_SEG_BUCKETS; bi++)
		seg->bucket[bi].csum = empty;
	pmemobj_persist(s->pop, seg, sizeof(*seg));
	return seg;
}

static void seg_free_tx(struct store *s, struct emb_seg *seg)
{
	pmemobj_tx_free(pmemobj_oid(S_PTR(s, seg->raw_off)));
}

/* Insert into a fresh segment (no concurrency, persisted by the caller). */
static int seg_put(struct store *s, struct emb_seg *seg, uint64_t key, uint64_t val)
{
	uint64_t h = index_hash(s, key);
	unsigned bi = (unsigned)(h & (EMB_SEG_BUCKETS - 1));
	struct emb_bucket *b = &seg->bucket[bi];
	struct emb_bucket *t = b;
	uint64_t fr = ~b->ctl & EMB_CTL_VALID_MASK;
	if (!fr) {
		t = &seg->bucket[(bi + 1) & (EMB_SEG_BUCKETS - 1)];
		fr = ~t->ctl & EMB_CTL_VALID_MASK;
		if (!fr || (b->ctl & EMB_CTL_OVF_MASK) == EMB_CTL_OVF_MASK)
			return -1;
		b->ctl += 1ull << EMB_CTL_OVF_SHIFT;
	}
	int i = __builtin_ctzll(fr);
	t->slot[i].key = key;
	t->slot[i].val = val;
	t->tags[i] = tag_of(h);
	t->ctl |= 1ull << i;
	return 0;
}

static int index_create(struct store *s, struct stable *st)
{
	volatile int ret = 0;
	pthread_mutex_lock(&s->meta_lock);
	TX_BEGIN(s->pop) {
		struct emb_seg *seg = seg_new_tx(s, 0, 0);
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
	} TX_ONABORT {
		ret = pm_tx_errno();
	} TX_END
	ret = pm_tx_end(s, ret);
	pthread_mutex_unlock(&s->meta_lock);
	if (ret)
		return ret;
	atomic_fetch_add(&s->idx_segs, 1);
	atomic_fetch_add(&s->idx_dir_bytes, sizeof(struct emb_dir) + 8);
	return index_load(s, st);
}

/* In a transaction: the two halves of segment old, each key by the next
 * bit of its hash, sealed and persisted. */
static void seg_halves_tx(struct store *s, struct emb_seg *old, struct emb_seg *n[2])
{
	uint32_t ld = old->local_depth;
	n[0] = seg_new_tx(s, ld + 1, old->prefix << 1);
	n[1] = seg_new_tx(s, ld + 1, (old->prefix << 1) | 1);
	for (unsigned bi = 0; bi < EMB_SEG_BUCKETS; bi++) {
		struct emb_bucket *b = &old->bucket[bi];
		for (uint64_t m = b->ctl & EMB_CTL_VALID_MASK; m; m &= m - 1) {
			int i = __builtin_ctzll(m);
			uint64_t h = index_hash(s, b->slot[i].key);
			int side = (int)((h >> (63 - ld)) & 1);
			if (seg_put(s, n[side], b->slot[i].key, b->slot[i].val))
				pmemobj_tx_abort(ENOSPC);
		}
	}
	for (int k = 0; k < 2; k++) {
		for (unsigned bi = 0; bi < EMB_SEG_BUCKETS; bi++)
			bucket_seal(&n[k]->bucket[bi]);
		pmemobj_persist(s->pop, n[k], sizeof(*n[k]));
	}
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

/* Split the segment at directory index di into two of depth+1. */
static int index_split(struct store *s, struct stable *st, size_t di)
{
	struct emb_seg *old = st->segs[di];
	uint32_t ld = old->local_depth, gd = st->gd;
	volatile int ret = 0;

	if (ld >= EMB_MAX_DEPTH)
		return -E2BIG; /* no room will help: see index_grow */
	/* what is copied must be sound: no checksum is recomputed over damage */
	for (unsigned bi = 0; bi < EMB_SEG_BUCKETS; bi++)
		if (index_bucket_check(s, &old->bucket[bi]))
			return -EIO;
	pthread_mutex_lock(&s->meta_lock);
	TX_BEGIN(s->pop) {
		struct emb_seg *n[2];
		seg_halves_tx(s, old, n);
		if (ld == gd) {
			dir_double_tx(s, st, di, n);
		} else { /* the entries that pointed at old point at its halves */
			struct emb_dir *dir = S_PTR(s, st->t->dir_off);
			size_t span = (size_t)1 << (gd - ld);
			size_t start = di & ~(span - 1);
			pmemobj_tx_add_range_direct(&dir->seg[start], span * 8);
			for (size_t i = 0; i < span; i++)
				dir->seg[start + i] = S_OFF(s, n[i < span / 2 ? 0 : 1]);
		}
		pmemobj_tx_add_range_direct(&st->t->nsegs, 8);
		st->t->nsegs++;
		catalog_seal_tx(st->t);
		seg_free_tx(s, old);
	} TX_ONABORT {
		ret = pm_tx_errno();
	} TX_END
	ret = pm_tx_end(s, ret);
	pthread_mutex_unlock(&s->meta_lock);
	if (ret)
		return ret;
	atomic_fetch_add(&s->idx_segs, 1);
	if (ld == gd)
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
static int index_grow(struct store *s, struct stable *st, size_t di)
{
	struct grow g = { s, st, di };
	pthread_rwlock_wrlock(&st->lock);
	int ret = resv_run(s, grow_fn, &g);
	pthread_rwlock_unlock(&st->lock);
	if (ret == -E2BIG)
		ret = -ENOSPC;
	return ret ? ret : -EAGAIN;
}

int index_claim(struct store *s, struct stable *st, struct claims *c, uint64_t key,
		struct ipos *pos)
{
	if (!st->segs)
		return index_grow(s, st, SIZE_MAX);
	uint64_t h = index_hash(s, key);
	size_t di = dir_idx(h, st->gd);
	struct emb_seg *seg = st->segs[di];
	unsigned bi = (unsigned)(h & (EMB_SEG_BUCKETS - 1));
	struct emb_bucket *b = &seg->bucket[bi];
	struct claim *ce;
	if (index_bucket_check(s, b))
		return -EIO;
	int i = free_slot(c, b, &ce);
	if (i >= 0) {
		ce->mask |= 1u << i;
		*pos = (struct ipos){ b, i, 0, b };
		return 0;
	}
	struct emb_bucket *nb = &seg->bucket[(bi + 1) & (EMB_SEG_BUCKETS - 1)];
	struct claim *home = claim_slot(c, b);
	/* the overflow count must not wrap: count pending claims too (bits 16+) */
	uint64_t pend = home->mask >> 16;
	uint64_t ovf = (ld64(&b->ctl) & EMB_CTL_OVF_MASK) >> EMB_CTL_OVF_SHIFT;
	if (index_bucket_check(s, nb))
		return -EIO;
	i = free_slot(c, nb, &ce);
	if (i >= 0 && ovf + pend < 255) {
		ce->mask |= 1u << i;
		home = claim_slot(c, b);
		home->mask += 1u << 16;
		*pos = (struct ipos){ nb, i, 1, b };
		return 0;
	}
	return index_grow(s, st, di);
}

/* Write key and value into a claimed (still invisible) slot; an entry in
 * the neighbour raises its home bucket's overflow count. */
void index_fill(struct store *s, struct stable *st, const struct ipos *pos, uint64_t key, uint64_t h,
		uint64_t val)
{
	struct emb_bucket *b = pos->b;
	st64(&b->slot[pos->slot].key, key);
	st64(&b->slot[pos->slot].val, val);
	__atomic_store_n(&b->tags[pos->slot], tag_of(h), __ATOMIC_RELAXED);
	pm_flush(s, &b->slot[pos->slot], sizeof(b->slot[0]));
	pm_flush(s, b, 64);
	if (pos->home_ovf) {
		pthread_rwlock_wrlock(&st->lock);
		ctl_set(s, pos->home, ld64(&pos->home->ctl) + (1ull << EMB_CTL_OVF_SHIFT), 0);
		pthread_rwlock_unlock(&st->lock);
	}
}

void index_publish(struct store *s, const struct ipos *pos)
{
	struct emb_bucket *b = pos->b;
	ctl_set(s, b, ld64(&b->ctl) | (1ull << pos->slot), h_slot(b, pos->slot, ld64(&b->slot[pos->slot].val)));
}

void index_set_val(struct store *s, const struct ipos *pos, uint64_t val)
{
	struct emb_bucket *b = pos->b;
	uint64_t old = ld64(&b->slot[pos->slot].val);
	csum_st(b, csum_ld(b) ^ h_slot(b, pos->slot, old) ^ h_slot(b, pos->slot, val));
	st64(&b->slot[pos->slot].val, val);
	pm_flush(s, &b->slot[pos->slot].val, 8);
	pm_flush(s, b, 32);
}

void index_unpublish(struct store *s, const struct ipos *pos)
{
	struct emb_bucket *b = pos->b;
	ctl_set(s, b, ld64(&b->ctl) & ~(1ull << pos->slot), h_slot(b, pos->slot, ld64(&b->slot[pos->slot].val)));
}

void index_ovf_dec(struct store *s, struct stable *st, const struct ipos *pos)
{
	if (!pos->home_ovf)
		return;
	pthread_rwlock_wrlock(&st->lock);
	uint64_t c = ld64(&pos->home->ctl);
	if (c & EMB_CTL_OVF_MASK)
		ctl_set(s, pos->home, c - (1ull << EMB_CTL_OVF_SHIFT), 0);
	pthread_rwlock_unlock(&st->lock);
}

int index_walk(struct store *s, struct stable *st, int (*fn)(void *, uint64_t, uint64_t), void *arg)
{
	if (!st->segs)
		return 0;
	size_t n = (size_t)1 << st->gd;
	for (size_t di = 0; di < n;) {
		struct emb_seg *seg = st->segs[di];
		for (unsigned bi = 0; bi < EMB_SEG_BUCKETS; bi++) {
			struct emb_bucket *b = &seg->bucket[bi];
			if (index_bucket_check(s, b))
				return -EIO;
			uint64_t m = ld64(&b->ctl) & EMB_CTL_VALID_MASK;
			while (m) {
				int i = __builtin_ctzll(m);
				m &= m - 1;
				int r = fn(arg, ld64(&b->slot[i].key), ld64(&b->slot[i].val));
				if (r)
					return r;
			}
		}
		di += (size_t)1 << (st->gd - seg->local_depth);
	}
	return 0;
}

/*
 * Free every segment and the directory; the rows must be gone.  One
 * transaction for a whole index would log a free per segment, more than
 * libpmemobj's lanes hold, and a full pool has no heap to extend the log
 * (rm of a big table then freed nothing).  So the table is marked dying,
 * which no reader looks at again, and its segments go a few per small
 * transaction in directory order, free_at recording the progress; mount
 * finishes a destroy a crash interrupted (catalog_recover).
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
	pthread_rwlock_wrlock(&st->lock);
	index_unload(st); /* readers find no rows from here on */
	pthread_rwlock_unlock(&st->lock);
	if (!(t->flags & EMB_T_DYING)) {
		pthread_mutex_lock(&s->meta_lock);
		TX_BEGIN(s->pop) {
			pmemobj_tx_add_range_direct(&t->flags, 4);
			pmemobj_tx_add_range_direct(&t->free_at, 8);
			t->flags |= EMB_T_DYING;
			t->free_at = 0;
			catalog_seal_tx(t);
		} TX_ONABORT {
			ret = pm_tx_errno();
		} TX_END
		ret = pm_tx_end(s, ret);
		pthread_mutex_unlock(&s->meta_lock);
		if (ret)
			return ret;
	}
	while (t->free_at < n) {
		pthread_mutex_lock(&s->meta_lock);
		TX_BEGIN(s->pop) {
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
		} TX_ONABORT {
			ret = pm_tx_errno();
		} TX_END
		ret = pm_tx_end(s, ret);
		pthread_mutex_unlock(&s->meta_lock);
		if (ret)
			return ret;
	}
	pthread_mutex_lock(&s->meta_lock);
	TX_BEGIN(s->pop) {
		pmemobj_tx_free(pmemobj_oid(dir));
		pmemobj_tx_add_range_direct(t, offsetof(struct emb_table, reserved1));
		t->dir_off = 0;
		t->nsegs = 0;
		t->free_at = 0;
		t->flags &= ~EMB_T_DYING;
		catalog_seal_tx(t);
	} TX_ONABORT {
		ret = pm_tx_errno();
	} TX_END
	ret = pm_tx_end(s, ret);
	pthread_mutex_unlock(&s->meta_lock);
	if (!ret && counted) {
		atomic_fetch_sub(&s->idx_segs, nsegs);
		atomic_fetch_sub(&s->idx_dir_bytes, sizeof(struct emb_dir) + (8ull << gd));
	}
	return ret;
}
