/*
 * Row versions: their checksum, validated access, and walks of version
 * chains.  Every read of a version from the pool goes through here, so a
 * damaged pool gives EIO (counted in n_csum_errors), never wrong bytes and
 * never a wild pointer.
 *
 * Checksum.  csum is XXH3-64 of the key (row, batch, table with EMB_VER_TOMB
 * but without EMB_VER_SPILL) and, in a version holding its bytes, XXH3-64 of
 * the row bytes seeded with the key's hash; folded to 32 bits.  XXH3 rather
 * than XXH32: it is several times faster on rows of a few hundred bytes, and
 * the read path verifies every row it copies.  A tombstone and a stub are
 * covered by their key alone: a stub's bytes are checked on the device (its
 * record holds their XXH32 and the same key), so a stub is verified without
 * a device read and the mover's 8-byte loc updates (compaction) need no new
 * checksum.  prev is not covered; each link is validated when followed.
 *
 * Validation of an offset before use (ver_get): inside the pool mapping past
 * libpmemobj's pool descriptor, 8-aligned (32 for a version with bytes:
 * slots are), the header naming the row and table asked for, the checksum
 * matching.  A chain walk also requires strictly decreasing batches and at
 * most EMB_MAX_SNAPS + 2 versions, so it always ends.  A freed slot is
 * poisoned (row = UINT64_MAX) so that a damaged link to an old version of the
 * same row cannot pass.  EMBFS_VERIFY=0 in the environment at store_open
 * skips the bytes' digest on reads (for the read-path figure of make bench).
 */
#include <xxhash.h>

#include "store_int.h"

struct vkey {
	uint64_t row, batch;
	uint32_t table, zero;
};

uint32_t ver_csum(const struct emb_version *v, uint32_t rs)
{
	struct vkey k = { v->row, v->batch, v->table & ~EMB_VER_SPILL, 0 };
	uint64_t h = XXH3_64bits(&k, sizeof(k));
	if (!(v->table & EMB_VER_FLAGS))
		h = XXH3_64bits_withSeed(v + 1, rs, h);
	return (uint32_t)(h ^ (h >> 32));
}

void ver_seal(struct emb_version *v, uint32_t rs)
{
	v->csum = ver_csum(v, rs);
}

void ver_poison(struct store *s, uint64_t off)
{
	if (!pool_range_ok(s, off, sizeof(struct emb_version), 8))
		return;
	struct emb_version *v = S_PTR(s, off);
	st64(&v->row, EMB_NONE);
	pm_flush(s, &v->row, 8);
}

void csum_error(struct store *s)
{
	atomic_fetch_add_explicit(&s->n_csum_errors, 1, memory_order_relaxed);
}

struct emb_version *ver_get(struct store *s, uint64_t off, uint32_t id, uint64_t row, uint32_t rs)
{
	if (pool_range_ok(s, off, sizeof(struct emb_version), 8)) {
		struct emb_version *v = S_PTR(s, off);
		uint32_t t = v->table;
		int bytes = !(t & EMB_VER_FLAGS);
		if (v->row == row && (t & ~EMB_VER_FLAGS) == id && (t & EMB_VER_FLAGS) != EMB_VER_FLAGS &&
		    (!bytes || pool_range_ok(s, off, sizeof(*v) + rs, 32)) &&
		    ((bytes && s->no_verify) || v->csum == ver_csum(v, rs)))
			return v;
	}
	csum_error(s);
	return NULL;
}

int chain_start(struct store *s, struct stable *st, uint64_t row, uint64_t head, struct chain *c)
{
	*c = (struct chain){ .s = s, .id = st->id, .rs = st->t->row_size, .row = row, .off = head };
	if (!head)
		return 0;
	c->v = ver_get(s, head, c->id, row, c->rs);
	return c->v ? 0 : -EIO;
}

int chain_step(struct chain *c)
{
	uint64_t prev = ld64(&c->v->prev), newer = c->v->batch;
	c->pred = c->off;
	c->off = prev;
	c->v = NULL;
	if (!prev)
		return 0;
	if (++c->depth > EMB_MAX_SNAPS + 1) {
		csum_error(c->s);
		return -EIO;
	}
	c->v = ver_get(c->s, prev, c->id, c->row, c->rs);
	if (c->v && c->v->batch >= newer) {
		csum_error(c->s);
		c->v = NULL;
	}
	return c->v ? 0 : -EIO;
}

int chain_visible(struct store *s, struct stable *st, uint64_t row, uint64_t b, struct emb_version **out)
{
	uint64_t head;
	struct chain c;
	int ret = index_get(s, st, row, &head);
	if (!ret)
		ret = chain_start(s, st, row, head, &c);
	while (!ret && c.v && b != EMB_NONE && c.v->batch > b)
		ret = chain_step(&c);
	*out = !ret && c.v && !ver_tomb(c.v) ? c.v : NULL;
	return ret;
}

int chain_has(struct store *s, struct stable *st, uint64_t row, uint64_t off)
{
	uint64_t head;
	struct chain c;
	int ret = index_get(s, st, row, &head);
	if (!ret)
		ret = chain_start(s, st, row, head, &c);
	while (!ret && c.v) {
		if (c.off == off)
			return 1;
		ret = chain_step(&c);
	}
	return ret;
}
