/*
 * Persistent row index: row id -> ref of the first element of its chain
 * (its newest version, or the link to it: layout.h).  This file holds what
 * lives in the buckets: lookups, the check memo, the key filter, claims,
 * entries changed, walks.  The structure they live in (directory and
 * segments: check, load, growth and splits, sizes, destroy) is
 * store/indexdir.c; the helpers both use are in store/index_int.h.
 *
 * Extendible hashing.  A directory of 2^global_depth segment pointers is
 * indexed by the top bits of a row's hash (the low half of XXH3-128 of its
 * id); a segment holds EMB_SEG_SMALL or EMB_SEG_LARGE buckets of 256 bytes,
 * 30 slots each (layout.h).  A row has two candidate buckets in its
 * segment, one from each half of its hash, and goes into the emptier when
 * it is inserted (two-choice: a segment fills to ~94% before a row finds
 * neither bucket free, against ~60% when a row may only go to its first
 * bucket or the next); its first bucket's overflow count says whether the
 * second must be probed.  A slot is 8 bytes: the ref and 16 more hash bits
 * (the tag); the row id is in the element the ref leads to, so a lookup
 * compares tags, then reads that element's key (the version it reads next
 * on a hit anyway).  There are no chains: a full small segment grows in
 * place into a large one (x1.34), a full large one splits into two small
 * ones (x1.5), each in a libpmemobj transaction, so segments stay 63-94%
 * full; a split alone (x2) would leave a table's index half empty after
 * each wave of splits (uniform hashing fills all segments together).  Four
 * small or three large segments fill a heap chunk.  Lookup cost and space
 * depend only on the number of rows, never on the ids' magnitude: 9-14
 * bytes per row, where keys and values in the buckets took ~40.
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
 * of ctl and each valid slot (its index and 8-byte value): the XOR of one
 * digest of the covered ctl bits and one per valid slot, so a change updates
 * it from the old and new digests of what it touched.  Filling a free slot
 * changes nothing covered.  A reader checks a bucket only when a lookup
 * misses (a hit is checked by the version it leads to, version.c: a damaged
 * value, tag or valid bit either leads to an element that fails, or turns
 * the hit into a miss); a miss checks the buckets it probed, so a row never
 * reads as a hole because its entry was damaged.  A tag that matches an
 * element of another row has that element checked whole (ref_sound): a
 * damaged row id in a version or link must not turn a hit into a miss.
 * Writers (index_find, index_claim) check the buckets they will change, a
 * split checks the whole segment it copies and every element its entries
 * lead to (it rehashes their row ids), and walks check every bucket: no
 * checksum is ever recomputed over damage.  The directory and the segment
 * headers (magic, local depth, the hash prefix a segment holds, an XXH64 of
 * the header) are checked at mount (index_check).
 *
 * Crash consistency of checksums.  A covered field and the checksum are two
 * stores, not one.  Every change of a covered field happens either while the
 * journal is sealed with the row it concerns -- commit A3 (first bucket's
 * overflow count), B (publish, value, unpublish) and C (overflow count);
 * reclaim_apply (value, unpublish, overflow count); relink_apply (value) --
 * or inside a libpmemobj transaction (index_create, index_split,
 * index_destroy).  Recovery recomputes the checksums of both buckets of
 * every journaled row (index_reseal) before anything reads them.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "index_int.h"

uint64_t index_hash(const struct store *s, uint64_t key)
{
	return ihash_of(s, key).lo;
}

/*
 * A bucket's check, remembered.  A lookup that misses checks the buckets it
 * probed, so that a damaged entry never reads as a hole, and a writer the
 * buckets it will change, so that no checksum is recomputed over damage:
 * one hash per valid slot.  On a table whose rows are mostly in sorted runs
 * nearly every lookup misses, and that check was a third of a range read's
 * CPU; a commit checks two buckets of 30 slots per row.  So a bucket that
 * passed is remembered in a DRAM array of the table's (st->vmemo: 4 bytes
 * per bucket of each directory entry (EMB_SEG_LARGE of them), made at the
 * first miss for directories of up to 2^VMEMO_MAX_GD entries, dropped with
 * the DRAM directory by index_unload, i.e. at every growth or split of a
 * segment): a 32-bit digest of the
 * bucket's covered control bits and its checksum.  A later miss skips the
 * check when the digest matches.  Every change a checksum covers changes
 * the checksum (XOR of the digests of what changed), so a changed bucket
 * is checked again; a digest that came back to a remembered value names
 * the same contents unless 32 bits collide, the odds of damage the checksum
 * itself misses.  What this gives up: damage to a remembered bucket's slots
 * that happens while the pool is mounted (not its control word or
 * checksum) is found when the bucket next changes or at the next mount,
 * not at the next miss.  A writer that changes a remembered bucket (its
 * ipos carries the entry) remembers the bucket as it leaves it: its new
 * checksum follows from the checked old one by the change's digests.
 * Racing threads make the array once (one wins, the others free theirs);
 * entries are single 32-bit stores.
 */
#define VMEMO_MAX_GD 14 /* at most 22 MiB of memo for a table */

static inline uint32_t vmemo_digest(const struct emb_bucket *b)
{
	uint64_t k = ((ld64(&b->ctl) & CTL_COVERED) * 0x9E3779B97F4A7C15ull) ^ csum_ld(b);
	k ^= k >> 29;
	k *= 0xBF58476D1CE4E5B9ull;
	k ^= k >> 32;
	return (uint32_t)k | 1; /* 0: nothing remembered */
}

/* The memo entry of bucket bi of directory entry di, the array made if
 * need be: NULL when the directory is too large (or no memory). */
static _Atomic uint32_t *memo_entry(struct stable *st, size_t di, unsigned bi)
{
	_Atomic uint32_t *m = atomic_load_explicit(&st->vmemo, memory_order_acquire);
	if (!m) {
		if (st->gd > VMEMO_MAX_GD)
			return NULL;
		_Atomic uint32_t *fresh = calloc((size_t)EMB_SEG_LARGE << st->gd, sizeof(*fresh)), *none = NULL;
		if (!fresh)
			return NULL;
		if (atomic_compare_exchange_strong(&st->vmemo, &none, fresh)) {
			m = fresh;
		} else {
			free(fresh);
			m = none;
		}
	}
	return &m[di * EMB_SEG_LARGE + bi];
}

/* Check b, or find it remembered in its memo entry e (NULL: none). */
static int check_at(struct store *s, _Atomic uint32_t *e, const struct emb_bucket *b)
{
	if (!e)
		return index_bucket_check(s, b);
	uint32_t k = vmemo_digest(b);
	if (atomic_load_explicit(e, memory_order_relaxed) == k)
		return 0;
	int ret = index_bucket_check(s, b);
	if (!ret)
		atomic_store_explicit(e, k, memory_order_relaxed);
	return ret;
}

/* Check bucket bi of directory entry di (b), or find it remembered. */
static int bucket_check_memo(struct store *s, struct stable *st, size_t di, unsigned bi,
			     const struct emb_bucket *b)
{
	return check_at(s, memo_entry(st, di, bi), b);
}

/* A writer left b sound (it was checked, and the change updated its
 * checksum): remember it so. */
static inline void memo_note(_Atomic uint32_t *e, const struct emb_bucket *b)
{
	if (e)
		atomic_store_explicit(e, vmemo_digest(b), memory_order_relaxed);
}

/* ctl becomes nctl: store both and the checksum updated to match, and
 * remember b sound in its memo entry (or NULL), before the flush takes the
 * line out of the cache. */
static void ctl_set(struct store *s, struct emb_bucket *b, uint64_t nctl, uint32_t slot_delta,
		    _Atomic uint32_t *memo)
{
	uint64_t ctl = ld64(&b->ctl);
	csum_st(b, csum_ld(b) ^ h_ctl(ctl) ^ h_ctl(nctl) ^ slot_delta);
	st64(&b->ctl, nctl);
	memo_note(memo, b);
	pm_flush(s, b, 16);
}

/* Start loading all of b (its slots span four cache lines). */
static inline void bucket_prefetch(const struct emb_bucket *b)
{
	for (size_t k = 0; k < sizeof(*b); k += 64)
		prefetch_l2((const char *)b + k);
}

/* Start loading the first bucket of hash x and its memo entry (m: st's
 * memo array, or NULL).  st->segs is set. */
static inline void prefetch_at(const struct stable *st, struct ihash x, _Atomic uint32_t *m)
{
	size_t di = dir_idx(x, st->gd);
	unsigned bi = bucket1(st->segs[di], x);
	bucket_prefetch(&st->segs[di]->bucket[bi]);
	if (m)
		prefetch_l2(&m[di * EMB_SEG_LARGE + bi]);
}

/* The slot of b holding key (tag matching, then the element's row), or -1;
 * -2 when a slot's tag matched but its element is damaged (counted). */
static int probe(struct store *s, struct stable *st, const struct emb_bucket *b, uint64_t key, uint64_t tag)
{
	uint64_t m = ld64(&b->ctl) & EMB_CTL_VALID_MASK;
	while (m) {
		int i = __builtin_ctzll(m);
		m &= m - 1;
		uint64_t v = ld64(&b->slot[i]);
		if ((v & ~EMB_REF_MASK) != tag)
			continue;
		if (ref_row(s, v & EMB_REF_MASK) == key)
			return i;
		if (!ref_sound(s, st, v & EMB_REF_MASK))
			return -2;
	}
	return -1;
}

/* Find key (of hash h) in its first or second bucket: its ref (0 if
 * absent) and, if pos, where.  0, or -EIO when a probed element is
 * damaged. */
static int lookup_h(struct store *s, struct stable *st, uint64_t key, struct ihash h, struct ipos *pos,
		    uint64_t *val)
{
	*val = 0;
	if (!st->segs)
		return 0;
	size_t di = dir_idx(h, st->gd);
	struct emb_seg *seg = st->segs[di];
	unsigned b1 = bucket1(seg, h);
	struct emb_bucket *b = &seg->bucket[b1];
	uint64_t tag = tag_of(h);
	int i = probe(s, st, b, key, tag);
	if (i >= 0) {
		if (pos) {
			_Atomic uint32_t *e = memo_entry(st, di, b1);
			*pos = (struct ipos){ b, i, 0, b, e, e };
		}
		*val = ld64(&b->slot[i]) & EMB_REF_MASK;
		return 0;
	}
	if (i == -2)
		return -EIO;
	if (!(ld64(&b->ctl) & EMB_CTL_OVF_MASK))
		return 0;
	unsigned b2 = bucket2(seg, h);
	struct emb_bucket *nb = &seg->bucket[b2];
	i = probe(s, st, nb, key, tag);
	if (i == -2)
		return -EIO;
	if (i < 0)
		return 0;
	if (pos)
		*pos = (struct ipos){ nb, i, 1, b, memo_entry(st, di, b2), memo_entry(st, di, b1) };
	*val = ld64(&nb->slot[i]) & EMB_REF_MASK;
	return 0;
}

static int lookup_key(struct store *s, struct stable *st, uint64_t key, struct ipos *pos, uint64_t *val)
{
	*val = 0;
	return st->segs ? lookup_h(s, st, key, ihash_of(s, key), pos, val) : 0;
}

/* A writer's lookup: the buckets probed are sound (or remembered so). */
static int probed_check(struct store *s, struct stable *st, uint64_t key)
{
	struct ihash h = ihash_of(s, key);
	size_t di = dir_idx(h, st->gd);
	struct emb_seg *seg = st->segs[di];
	unsigned b1 = bucket1(seg, h);
	int ret = bucket_check_memo(s, st, di, b1, &seg->bucket[b1]);
	if (!ret && (ld64(&seg->bucket[b1].ctl) & EMB_CTL_OVF_MASK)) {
		unsigned b2 = bucket2(seg, h);
		ret = bucket_check_memo(s, st, di, b2, &seg->bucket[b2]);
	}
	return ret;
}

/* ---- the key filter --------------------------------------------------------
 * Which 64-row chunks of a table hold index entries, each chunk's entries
 * counted in a DRAM hash (st->kf).  A read of many rows of a table with
 * runs mostly misses the index, and a miss probes two buckets of 30 slots
 * (eight cache lines): most of a spilled table's sequential read went
 * there.  With the filter such a read probes only the rows of chunks that
 * hold entries.  It is made at the first read that asks for it, from a
 * walk of the index (under st->lock shared, so no writer changes the index
 * meanwhile) that checks every bucket and every element it takes a row id
 * from, and kept by index_publish and index_unpublish (st->lock exclusive).
 * Damage found while it is made, or no memory to grow it, leaves it unused
 * (reads probe as before).  Counts that drop to 0 stay as entries.  Freed
 * with the table (index_kf_free); a table freed and made again starts
 * without one.  16 bytes of DRAM per chunk with entries.
 */
#define KF_SHIFT 6
#define KF_MAX_ENTRIES (1ull << 24) /* a table with more entries probes */

struct kfilter {
	uint64_t *k;    /* chunk + 1, 0 = empty */
	uint32_t *c;    /* entries in the chunk */
	size_t cap, n;
	uint64_t hi;    /* 1 + the highest row an entry was added for */
	int bad;        /* not to be used */
};

static size_t kf_slot(const struct kfilter *f, uint64_t ch)
{
	size_t i = (size_t)mix64(ch) & (f->cap - 1);
	while (f->k[i] && f->k[i] != ch + 1)
		i = (i + 1) & (f->cap - 1);
	return i;
}

static int kf_grow(struct kfilter *f)
{
	size_t cap = f->cap ? 2 * f->cap : 1024;
	struct kfilter g = { calloc(cap, sizeof(uint64_t)), calloc(cap, sizeof(uint32_t)), cap, 0, f->hi, 0 };
	if (!g.k || !g.c) {
		free(g.k);
		free(g.c);
		return -ENOMEM;
	}
	for (size_t i = 0; i < f->cap; i++)
		if (f->k[i]) {
			size_t j = kf_slot(&g, f->k[i] - 1);
			g.k[j] = f->k[i];
			g.c[j] = f->c[i];
			g.n++;
		}
	free(f->k);
	free(f->c);
	*f = g;
	return 0;
}

/* An entry of row joins (d = 1) or leaves (d = -1) the index. */
static void kf_add(struct kfilter *f, uint64_t row, int d)
{
	if (f->bad)
		return;
	if (d > 0 && row + 1 > f->hi)
		f->hi = row + 1;
	uint64_t ch = row >> KF_SHIFT;
	if ((f->n + 1) * 4 > f->cap * 3 && kf_grow(f)) {
		f->bad = 1;
		return;
	}
	size_t i = kf_slot(f, ch);
	if (!f->k[i]) {
		if (d < 0)
			return;
		f->k[i] = ch + 1;
		f->c[i] = 0;
		f->n++;
	}
	f->c[i] += (uint32_t)d;
}

static int kf_has(const struct kfilter *f, uint64_t row)
{
	size_t i = kf_slot(f, row >> KF_SHIFT);
	return f->k[i] && f->c[i];
}

static void kf_destroy(struct kfilter *f)
{
	if (f) {
		free(f->k);
		free(f->c);
		free(f);
	}
}

void index_kf_free(struct stable *st)
{
	kf_destroy(atomic_exchange(&st->kf, NULL));
}

/* A writer's change of the entries (st->lock exclusive): row's entry
 * joins (d = 1) or leaves (-1). */
static void kf_note(struct stable *st, uint64_t row, int d)
{
	struct kfilter *f = atomic_load_explicit(&st->kf, memory_order_relaxed);
	if (f)
		kf_add(f, row, d);
}

/* Make the filter from a walk of the index (st->lock shared).  NULL: not
 * now (another thread makes it, or no memory); a damaged index gives a
 * filter marked bad, kept so that it is not walked again. */
static struct kfilter *kf_make(struct store *s, struct stable *st)
{
	if (pthread_mutex_trylock(&st->kf_mu))
		return NULL;
	struct kfilter *f = atomic_load(&st->kf);
	if (f) {
		pthread_mutex_unlock(&st->kf_mu);
		return f;
	}
	f = calloc(1, sizeof(*f));
	if (!f || kf_grow(f)) {
		free(f);
		pthread_mutex_unlock(&st->kf_mu);
		return NULL;
	}
	uint64_t entries = 0;
	for (size_t di = 0, nd = index_ndir(st); di < nd && !f->bad;) {
		struct emb_seg *seg = st->segs[di];
		for (unsigned bi = 0; bi < seg->nbuckets && !f->bad; bi++) {
			struct emb_bucket *b = &seg->bucket[bi];
			if (bucket_check_memo(s, st, di, bi, b)) {
				f->bad = 1;
				break;
			}
			for (uint64_t m = ld64(&b->ctl) & EMB_CTL_VALID_MASK; m && !f->bad; m &= m - 1) {
				uint64_t ref = ld64(&b->slot[__builtin_ctzll(m)]) & EMB_REF_MASK;
				if (++entries > KF_MAX_ENTRIES || !ref_sound(s, st, ref))
					f->bad = 1;
				else
					kf_add(f, ref_row(s, ref), 1);
			}
		}
		di += (size_t)1 << (st->gd - seg->local_depth);
	}
	atomic_store_explicit(&st->kf, f, memory_order_release);
	pthread_mutex_unlock(&st->kf_mu);
	return f;
}

int index_none_from(struct store *s, struct stable *st, uint64_t row)
{
	if (!st->segs)
		return 1; /* no index yet */
	struct kfilter *f = atomic_load_explicit(&st->kf, memory_order_acquire);
	if (!f)
		f = kf_make(s, st);
	return f && !f->bad && f->hi <= row;
}

/* A miss of a key of hash h: check (or find remembered) the buckets it
 * probed.  0 or -EIO. */
static int miss_check(struct store *s, struct stable *st, struct ihash h)
{
	size_t di = dir_idx(h, st->gd);
	struct emb_seg *seg = st->segs[di];
	unsigned bi = bucket1(seg, h);
	int ret = bucket_check_memo(s, st, di, bi, &seg->bucket[bi]);
	if (!ret && (ld64(&seg->bucket[bi].ctl) & EMB_CTL_OVF_MASK)) {
		bi = bucket2(seg, h);
		ret = bucket_check_memo(s, st, di, bi, &seg->bucket[bi]);
	}
	return ret;
}

int index_get(struct store *s, struct stable *st, uint64_t key, uint64_t *val)
{
	*val = 0;
	if (!st->segs)
		return 0;
	struct ihash h = ihash_of(s, key);
	int ret = lookup_h(s, st, key, h, NULL, val);
	return ret || *val ? ret : miss_check(s, st, h);
}

/* index_get of many keys, for reads of many rows (readers only: st->lock
 * shared): each key hashed once, and the first bucket's line (and memo
 * entry) of the key INDEX_AHEAD places on loaded early, so that the loads
 * of buckets far apart in the pool overlap instead of one waiting for the
 * other. */
#define INDEX_AHEAD 8
int index_get_many(struct store *s, struct stable *st, const uint64_t *keys, size_t n, const uint8_t *skip,
		   int filter, uint64_t *vals)
{
	struct ihash h[INDEX_AHEAD];
	uint8_t want[INDEX_AHEAD];
	_Atomic uint32_t *m = atomic_load_explicit(&st->vmemo, memory_order_relaxed);
	struct kfilter *f = NULL;
	if (filter && st->segs && n >= 64) {
		f = atomic_load_explicit(&st->kf, memory_order_acquire);
		if (!f)
			f = kf_make(s, st);
		if (f && f->bad)
			f = NULL;
	}
	uint64_t last_ch = EMB_NONE;
	int last_has = 1;
	size_t next = 0;
	for (size_t i = 0; i < n; i++) {
		for (; st->segs && next < n && next < i + INDEX_AHEAD; next++) {
			want[next % INDEX_AHEAD] = 0;
			if (skip && skip[next])
				continue;
			if (f && keys[next] >> KF_SHIFT != last_ch) {
				last_ch = keys[next] >> KF_SHIFT;
				last_has = kf_has(f, keys[next]);
			}
			if (f && !last_has)
				continue; /* no entry in its chunk: not probed */
			want[next % INDEX_AHEAD] = 1;
			h[next % INDEX_AHEAD] = ihash_of(s, keys[next]);
			prefetch_at(st, h[next % INDEX_AHEAD], m);
		}
		if (skip && skip[i])
			continue;
		vals[i] = 0;
		if (!st->segs || !want[i % INDEX_AHEAD])
			continue;
		int ret = lookup_h(s, st, keys[i], h[i % INDEX_AHEAD], NULL, &vals[i]);
		if (!ret && !vals[i])
			ret = miss_check(s, st, h[i % INDEX_AHEAD]);
		if (ret)
			return ret;
		if (!m)
			m = atomic_load_explicit(&st->vmemo, memory_order_relaxed);
	}
	return 0;
}

int index_find(struct store *s, struct stable *st, uint64_t key, struct ipos *pos, uint64_t *val)
{
	int ret = lookup_key(s, st, key, pos, val);
	if (ret || !st->segs)
		return ret;
	return probed_check(s, st, key);
}

void index_prefetch(struct store *s, struct stable *st, uint64_t key)
{
	if (st->segs)
		prefetch_at(st, ihash_of(s, key), atomic_load_explicit(&st->vmemo, memory_order_relaxed));
}

void index_prefetch_refs(struct store *s, struct stable *st, uint64_t key, uint32_t rs)
{
	if (!st->segs)
		return;
	struct ihash h = ihash_of(s, key);
	struct emb_seg *seg = st->segs[dir_idx(h, st->gd)];
	const struct emb_bucket *b = &seg->bucket[bucket1(seg, h)];
	uint64_t tag = tag_of(h), ctl = ld64(&b->ctl);
	size_t vlen = sizeof(struct emb_version) + rs < 1024 ? sizeof(struct emb_version) + rs : 1024;
	for (uint64_t m = ctl & EMB_CTL_VALID_MASK; m; m &= m - 1) {
		uint64_t v = ld64(&b->slot[__builtin_ctzll(m)]);
		if ((v & ~EMB_REF_MASK) != tag)
			continue;
		/* a version or a link; a prefetch never faults, and probe()
		 * checks the ref before it is used */
		const char *p = S_PTR(s, ref_obj(v & EMB_REF_MASK));
		size_t len = ref_is_link(v & EMB_REF_MASK) ? sizeof(struct emb_link) : vlen;
		if (!p)
			continue;
		for (size_t k = 0; k < len; k += 64)
			prefetch_l2(p + k);
		prefetch_l2(p + len - 1);
	}
	if (ctl & EMB_CTL_OVF_MASK)
		bucket_prefetch(&seg->bucket[bucket2(seg, h)]);
}

void index_reseal(struct store *s, struct stable *st, uint64_t key)
{
	if (!st->segs)
		return;
	struct ihash h = ihash_of(s, key);
	struct emb_seg *seg = st->segs[dir_idx(h, st->gd)];
	unsigned bi[2] = { bucket1(seg, h), bucket2(seg, h) };
	for (unsigned k = 0; k < 2; k++) {
		struct emb_bucket *b = &seg->bucket[bi[k]];
		bucket_seal(b);
		pm_flush(s, b, 16);
	}
}

/* ---- claims: free slots promised to the ops of one commit ------------- */

struct claim {
	struct emb_bucket *b;
	uint32_t mask;   /* slots claimed */
	uint32_t pend;   /* claims in its second bucket by rows that have it first */
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
	while (c->cap < 4 * n + 16)
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

/* b's slots neither valid nor claimed. */
static uint64_t free_mask(struct claims *c, struct emb_bucket *b, struct claim **ce)
{
	struct claim *e = claim_slot(c, b);
	*ce = e;
	return ~((ld64(&b->ctl) & EMB_CTL_VALID_MASK) | e->mask) & EMB_CTL_VALID_MASK;
}

int index_claim(struct store *s, struct stable *st, struct claims *c, uint64_t key,
		struct ipos *pos, const void **full)
{
	if (!st->segs)
		return index_grow(s, st, SIZE_MAX);
	struct ihash h = ihash_of(s, key);
	size_t di = dir_idx(h, st->gd);
	struct emb_seg *seg = st->segs[di];
	unsigned i1 = bucket1(seg, h), i2 = bucket2(seg, h);
	struct emb_bucket *b = &seg->bucket[i1], *nb = &seg->bucket[i2];
	_Atomic uint32_t *e1 = memo_entry(st, di, i1), *e2 = memo_entry(st, di, i2);
	struct claim *ce, *ne;
	if (check_at(s, e1, b) || check_at(s, e2, nb))
		return -EIO;
	uint64_t fb = free_mask(c, b, &ce);
	uint64_t fn = free_mask(c, nb, &ne);
	/* the overflow count must not wrap: count pending claims too */
	uint64_t ovf = (ld64(&b->ctl) & EMB_CTL_OVF_MASK) >> EMB_CTL_OVF_SHIFT;
	int second = __builtin_popcountll(fn) > __builtin_popcountll(fb) && ovf + ce->pend < 255;
	if (!second && fb) {
		int i = __builtin_ctzll(fb);
		ce->mask |= 1u << i;
		*pos = (struct ipos){ b, i, 0, b, e1, e1 };
		return 0;
	}
	if (fn && ovf + ce->pend < 255) {
		int i = __builtin_ctzll(fn);
		ne->mask |= 1u << i;
		ce->pend++;
		*pos = (struct ipos){ nb, i, 1, b, e2, e1 };
		return 0;
	}
	*full = seg;
	return 1;
}

int index_grow_key(struct store *s, struct stable *st, uint64_t key)
{
	if (!st->segs)
		return index_grow(s, st, SIZE_MAX);
	return index_grow(s, st, dir_idx(ihash_of(s, key), st->gd));
}

void index_fill(struct store *s, struct stable *st, const struct ipos *pos, uint64_t key, uint64_t ref)
{
	struct emb_bucket *b = pos->b;
	st64(&b->slot[pos->slot], tag_of(ihash_of(s, key)) | ref);
	pm_flush(s, &b->slot[pos->slot], 8);
	if (pos->home_ovf) {
		pthread_rwlock_wrlock(&st->lock);
		ctl_set(s, pos->home, ld64(&pos->home->ctl) + (1ull << EMB_CTL_OVF_SHIFT), 0, pos->hmemo);
		pthread_rwlock_unlock(&st->lock);
	}
}

void index_publish(struct store *s, struct stable *st, const struct ipos *pos, uint64_t key)
{
	struct emb_bucket *b = pos->b;
	kf_note(st, key, 1);
	ctl_set(s, b, ld64(&b->ctl) | (1ull << pos->slot), h_slot(pos->slot, ld64(&b->slot[pos->slot])),
		pos->memo);
}

void index_set_val(struct store *s, const struct ipos *pos, uint64_t ref)
{
	struct emb_bucket *b = pos->b;
	uint64_t old = ld64(&b->slot[pos->slot]);
	uint64_t nv = (old & ~EMB_REF_MASK) | ref;
	csum_st(b, csum_ld(b) ^ h_slot(pos->slot, old) ^ h_slot(pos->slot, nv));
	st64(&b->slot[pos->slot], nv);
	memo_note(pos->memo, b); /* before the flush takes the line out of the cache */
	pm_flush(s, &b->slot[pos->slot], 8);
	pm_flush(s, b, 16);
}

void index_unpublish(struct store *s, struct stable *st, const struct ipos *pos, uint64_t key)
{
	struct emb_bucket *b = pos->b;
	kf_note(st, key, -1);
	ctl_set(s, b, ld64(&b->ctl) & ~(1ull << pos->slot), h_slot(pos->slot, ld64(&b->slot[pos->slot])),
		pos->memo);
}

void index_ovf_dec(struct store *s, struct stable *st, const struct ipos *pos)
{
	if (!pos->home_ovf)
		return;
	pthread_rwlock_wrlock(&st->lock);
	uint64_t c = ld64(&pos->home->ctl);
	if (c & EMB_CTL_OVF_MASK) {
		ctl_set(s, pos->home, c - (1ull << EMB_CTL_OVF_SHIFT), 0, pos->hmemo);
	}
	pthread_rwlock_unlock(&st->lock);
}

/* fn for each entry of segment seg (damaged buckets: -EIO, or skipped). */
static int seg_walk(struct store *s, struct emb_seg *seg, int skip_damaged,
		    int (*fn)(void *, uint64_t, uint64_t), void *arg)
{
	for (unsigned bi = 0; bi < seg->nbuckets; bi++) {
		struct emb_bucket *b = &seg->bucket[bi];
		if (index_bucket_check(s, b)) {
			if (skip_damaged)
				continue;
			return -EIO;
		}
		uint64_t m = ld64(&b->ctl) & EMB_CTL_VALID_MASK;
		while (m) {
			int i = __builtin_ctzll(m);
			m &= m - 1;
			uint64_t ref = ld64(&b->slot[i]) & EMB_REF_MASK;
			int r = fn(arg, ref_row(s, ref), ref);
			if (r)
				return r;
		}
	}
	return 0;
}

void index_scan(struct store *s, struct stable *st, size_t *di, int (*fn)(void *, uint64_t, uint64_t), void *arg)
{
	size_t n = index_ndir(st);
	while (*di < n) {
		struct emb_seg *seg = st->segs[*di];
		if (seg_walk(s, seg, 1, fn, arg))
			return; /* stopped: this segment again next time */
		*di += (size_t)1 << (st->gd - seg->local_depth);
	}
}

int index_walk(struct store *s, struct stable *st, int (*fn)(void *, uint64_t, uint64_t), void *arg)
{
	size_t n = index_ndir(st);
	for (size_t di = 0; di < n;) {
		struct emb_seg *seg = st->segs[di];
		int r = seg_walk(s, seg, 0, fn, arg);
		if (r)
			return r;
		di += (size_t)1 << (st->gd - seg->local_depth);
	}
	return 0;
}
