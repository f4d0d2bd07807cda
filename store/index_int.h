/*
 * Private to the row index (store/index.c, store/indexdir.c): a row's hash
 * and where it leads in a segment, and the buckets' checksums.  The index's
 * design, its locking and its damage rules are at the top of index.c.
 */
#ifndef EMBFS_STORE_INDEX_INT_H
#define EMBFS_STORE_INDEX_INT_H

#include <stddef.h>
#include <xxhash.h>

#include "store_int.h"

/* A row's hash: lo picks its directory entry (top bits) and its first
 * bucket (low 32 bits), hi its second bucket (low 32 bits) and its tag
 * (top 16 bits). */
struct ihash {
	uint64_t lo, hi;
};

static inline struct ihash ihash_of(const struct store *s, uint64_t key)
{
	XXH128_hash_t h = XXH3_128bits_withSeed(&key, sizeof(key), s->sb->hash_seed);
	return (struct ihash){ h.low64, h.high64 };
}


static inline uint64_t tag_of(struct ihash h)
{
	return h.hi & ~EMB_REF_MASK;
}

static inline size_t dir_idx(struct ihash h, uint32_t gd)
{
	return gd ? (size_t)(h.lo >> (64 - gd)) : 0;
}

/* x (32 bits) mapped onto [0, n) */
static inline unsigned range32(uint64_t x, uint32_t n)
{
	return (unsigned)(((x & 0xffffffffull) * n) >> 32);
}

static inline unsigned bucket1(const struct emb_seg *seg, struct ihash h)
{
	return range32(h.lo, seg->nbuckets);
}

static inline unsigned bucket2(const struct emb_seg *seg, struct ihash h)
{
	unsigned b1 = bucket1(seg, h), b2 = range32(h.hi, seg->nbuckets);
	return b2 != b1 ? b2 : (b1 + 1) % seg->nbuckets;
}

static inline uint64_t seg_bytes(uint32_t nb)
{
	return sizeof(struct emb_seg) + (uint64_t)nb * sizeof(struct emb_bucket);
}

/* ---- bucket checksums --------------------------------------------------- */

#define CTL_COVERED (EMB_CTL_VALID_MASK | EMB_CTL_OVF_MASK)
#define SEED_CTL 0x454d4243544cull  /* "EMBCTL" */
#define SEED_SLOT 0x454d42534c54ull /* "EMBSLT" */

static inline uint32_t fold(uint64_t h)
{
	return (uint32_t)(h ^ (h >> 32));
}

/* A 64-bit mix (murmur3's finalizer): a bucket's checksum hashes up to 31
 * words on every check a writer makes, so each word costs a few
 * multiplications, not a call of XXH3 (which was most of a commit's CPU
 * once buckets held 30 slots). */
static inline uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

static inline uint32_t h_ctl(uint64_t ctl)
{
	return fold(mix64((ctl & CTL_COVERED) ^ SEED_CTL));
}

static inline uint32_t h_slot(int i, uint64_t val)
{
	return fold(mix64(val ^ mix64(SEED_SLOT + (uint64_t)i)));
}

/* The checksum b should carry. */
static inline uint32_t bucket_sum(const struct emb_bucket *b)
{
	uint64_t ctl = ld64(&b->ctl);
	uint32_t c = h_ctl(ctl);
	for (uint64_t m = ctl & EMB_CTL_VALID_MASK; m; m &= m - 1) {
		int i = __builtin_ctzll(m);
		c ^= h_slot(i, ld64(&b->slot[i]));
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

static inline void bucket_seal(struct emb_bucket *b)
{
	csum_st(b, bucket_sum(b));
}

static inline uint64_t seg_csum(const struct emb_seg *g)
{
	return XXH64(g, offsetof(struct emb_seg, csum), 0);
}

/* indexdir.c: create the index or split segment di, with the index-room
 * reserve behind it (st->lock exclusive around it).  -EAGAIN when done
 * (positions and claims are stale), or -errno. */
int index_grow(struct store *s, struct stable *st, size_t di);

#endif
