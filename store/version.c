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

#include "spill.h"

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

int chain_find(struct store *s, struct stable *st, uint64_t row, uint64_t b, struct emb_version **out,
	       int *decided)
{
	uint64_t head;
	struct chain c;
	int ret = index_get(s, st, row, &head);
	if (!ret)
		ret = chain_start(s, st, row, head, &c);
	while (!ret && c.v && b != EMB_NONE && c.v->batch > b)
		ret = chain_step(&c);
	*out = !ret && c.v && !ver_tomb(c.v) ? c.v : NULL;
	*decided = !ret && c.v;
	return ret;
}

int chain_visible(struct store *s, struct stable *st, uint64_t row, uint64_t b, struct emb_version **out)
{
	int decided;
	return chain_find(s, st, row, b, out, &decided);
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

void ver_free(struct store *s, uint64_t off)
{
	if (!pool_range_ok(s, off, sizeof(struct emb_stub), 8))
		return;
	struct emb_version *v = S_PTR(s, off);
	if (ver_stub(v)) {
		struct stable *st = tab_get(s, ver_table(v));
		if (st)
			seg_live_add(s, STUB(s, off)->loc, spill_rec_size(st->t->row_size), -1);
	}
	if (slab_free(s, off))
		ver_poison(s, off);
}

int ver_bytes_locked(struct store *s, struct stable *st, const struct emb_version *v, void *buf)
{
	uint32_t rs = st->t->row_size;
	if (!ver_stub(v)) {
		memcpy(buf, v + 1, rs);
		return 0;
	}
	if (!s->sp)
		return -EIO;
	struct sreq q = { .loc = ((const struct emb_stub *)v)->loc, .row = v->row, .batch = v->batch,
			  .len = rs, .table = st->id, .dst = buf };
	device_read(s->sp, &q, 1);
	atomic_fetch_add_explicit(&s->sp->reads, 1, memory_order_relaxed);
	if (q.ret == -ESTALE)
		atomic_fetch_add(&s->sp->csum_errors, 1);
	return q.ret ? -EIO : 0;
}


/* Replace r[i].old by r[i].new_ (already written and flushed) in its chain:
 * 0, or -EIO (nothing changed) if an index entry to change is damaged.
 * commit_lock held. */
int relink_apply(struct store *s, struct stable *st, struct rl *r, size_t n)
{
	struct emb_journal *j = s->jr;
	struct ipos *pos = calloc(n, sizeof(*pos));
	if (!pos)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		uint64_t cur;
		int ret = r[i].pred ? 0 : index_find(s, st, r[i].row, &pos[i], &cur);
		if (!ret && !r[i].pred && cur != r[i].old)
			ret = -EIO;
		if (ret) {
			free(pos);
			return ret;
		}
	}
	for (size_t i = 0; i < n; i++)
		j->rec[i] = (struct emb_jrec){ r[i].row, r[i].old, r[i].new_, st->id, 0 };
	int ret = journal_seal(s, st, EMB_J_RELINK, n, 0);
	if (ret) {
		free(pos);
		return ret;
	}

	for (size_t i = 0; i < n; i++)
		slab_mark(s, r[i].new_);
	pthread_rwlock_wrlock(&st->lock);
	for (size_t i = 0; i < n; i++) {
		if (r[i].pred == 0) {
			index_set_val(s, &pos[i], r[i].new_);
		} else if (r[i].pred != EMB_NONE) {
			struct emb_version *p = S_PTR(s, r[i].pred);
			st64(&p->prev, r[i].new_);
			pm_flush(s, &p->prev, 8);
		}
	}
	pthread_rwlock_unlock(&st->lock);
	free(pos);
	if ((ret = pm_barrier(s)))
		return ret;

	for (size_t i = 0; i < n; i++)
		ver_free(s, r[i].old);
	return journal_clear(s);
}

int relink_replay(struct store *s, struct emb_journal *j)
{
	struct stable *st = tab_get(s, j->table);
	if (!st)
		return -EIO;
	for (uint64_t i = 0; i < j->count; i++) {
		struct emb_jrec *r = &j->rec[i];
		int linked = chain_has(s, st, r->row, r->new_off);
		if (linked < 0)
			continue; /* a damaged chain: keep both (a leak, never a loss) */
		uint64_t drop = r->new_off;
		if (linked) {
			slab_mark(s, r->new_off);
			drop = chain_has(s, st, r->row, r->old_off) == 0 ? r->old_off : 0;
		}
		if (drop && slab_free(s, drop))
			ver_poison(s, drop);
	}
	return pm_barrier(s);
}
