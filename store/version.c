/*
 * Row versions and links: their checksum, validated access, and walks of
 * version chains.  Every read of a version or link from the pool goes
 * through here, so a damaged pool gives EIO (counted in n_csum_errors),
 * never wrong bytes and never a wild pointer.
 *
 * Layout (layout.h).  A version is a 16-byte header -- key (row id, kind,
 * the batch's high bits), the batch's low bits, a checksum -- and the row
 * bytes; a stub adds where its bytes are on the spill device; a tombstone
 * has no bytes.  A chain of more than one version has a link per element
 * but the last ({ key, ver, next }, 24 bytes): the index refers to the
 * first element, each link to its version and to the next older element.
 * So a row with one version costs its header and its index slot, and only
 * rows a snapshot holds older versions of pay for links.
 *
 * Checksum.  csum is XXH3-64 of the key (row, batch, the table's catalog
 * slot, whether it is a tombstone) and, in a version holding its bytes,
 * XXH3-64 of the row bytes seeded with the key's hash; folded to 32 bits.
 * The table is covered but not stored: a version is always read as one of
 * a known table.  XXH3 rather than XXH32: it is several times faster on rows
 * of a few hundred bytes, and the read path verifies every row it copies.  A
 * tombstone and a stub are covered by their key alone: a stub's bytes are
 * checked on the device (its record holds their XXH32 and the same key), so
 * a stub is verified without a device read and the mover's 8-byte loc
 * updates (compaction) need no new checksum.  Links carry no checksum; each
 * link's key must name its row, and what its ver and next lead to is
 * validated when followed.
 *
 * Validation of an offset before use (ver_get, link_get): inside the pool
 * mapping past libpmemobj's pool descriptor, 8-aligned, the key naming the
 * row and kind asked for, the checksum matching.  A chain walk also requires
 * strictly decreasing batches and at most EMB_MAX_SNAPS + 2 versions, so it
 * always ends.  A freed slot is poisoned (its row id all ones, which is no
 * row's; its kind kept) so that a damaged ref to an old version of the same
 * row cannot pass.  EMBFS_VERIFY=0 in the environment at store_open skips the bytes'
 * digest on reads (for the read-path figure of make bench).
 */
#include <xxhash.h>

#include "spill.h"

struct vkey {
	uint64_t row, batch;
	uint32_t table, tomb;
};

void ver_init(struct emb_version *v, uint64_t row, uint64_t batch, uint64_t kind)
{
	v->key = (row & EMB_ROW_ID_MASK) | (kind & EMB_VK_KIND) | (batch >> 32) << EMB_VK_BATCH_SHIFT;
	v->batch_lo = (uint32_t)batch;
}

uint32_t ver_csum(const struct emb_version *v, uint32_t id, uint32_t rs)
{
	struct vkey k = { ver_row(v), ver_batch(v), id, ver_tomb(v) };
	uint64_t h = XXH3_64bits(&k, sizeof(k));
	if (!(v->key & (EMB_VK_TOMB | EMB_VK_STUB)))
		h = XXH3_64bits_withSeed(ver_data(v), rs, h);
	return (uint32_t)(h ^ (h >> 32));
}

void ver_seal(struct emb_version *v, uint32_t id, uint32_t rs)
{
	v->csum = ver_csum(v, id, rs);
}

void ver_poison(struct store *s, uint64_t off)
{
	if (!pool_range_ok(s, off, sizeof(struct emb_version), 8))
		return;
	struct emb_version *v = S_PTR(s, off);
	/* the row id goes, the kind stays: a replay may still ask whether
	 * the version a finished commit freed was a tombstone */
	st64(&v->key, ld64(&v->key) | EMB_ROW_ID_MASK);
	pm_flush(s, &v->key, 8);
}

struct emb_version *ver_get(struct store *s, uint64_t off, uint32_t id, uint64_t row, uint32_t rs)
{
	if (pool_range_ok(s, off, sizeof(struct emb_version), 8)) {
		struct emb_version *v = S_PTR(s, off);
		uint64_t key = ld64(&v->key);
		uint64_t kind = key & EMB_VK_KIND;
		int bytes = !kind;
		if ((key & EMB_ROW_ID_MASK) == row && row <= EMB_ROW_ID_MAX &&
		    (kind == 0 || kind == EMB_VK_TOMB || kind == EMB_VK_STUB) &&
		    (!bytes || pool_range_ok(s, off, sizeof(*v) + rs, 8)) &&
		    (kind != EMB_VK_STUB || pool_range_ok(s, off, sizeof(struct emb_stub), 8)) &&
		    ((bytes && s->no_verify) || v->csum == ver_csum(v, id, rs)))
			return v;
	}
	csum_error(s);
	return NULL;
}

struct emb_link *link_get(struct store *s, uint64_t off, uint64_t row)
{
	if (pool_range_ok(s, off, sizeof(struct emb_link), 8)) {
		struct emb_link *l = S_PTR(s, off);
		if (ld64(&l->key) == (row | EMB_VK_LINK) && row <= EMB_ROW_ID_MAX)
			return l;
	}
	csum_error(s);
	return NULL;
}

uint64_t ref_row(const struct store *s, uint64_t ref)
{
	uint64_t off = ref_obj(ref);
	if (!pool_range_ok(s, off, 8, 8))
		return EMB_NONE;
	return ld64(S_PTR(s, off)) & EMB_ROW_ID_MASK;
}

int ref_sound(struct store *s, struct stable *st, uint64_t ref)
{
	uint64_t row = ref_row(s, ref), off = ref_obj(ref);
	if (row == EMB_NONE)
		return 0;
	if (ref_is_link(ref)) {
		struct emb_link *l = link_get(s, off, row);
		if (!l)
			return 0;
		off = ld64(&l->ver);
	}
	return ver_get(s, off, st->id, row, st->t->row_size) != NULL;
}

/* Make ref (read from the field at at) the chain's current element. */
static int chain_elem(struct chain *c, uint64_t ref, uint64_t at)
{
	uint64_t voff = ref;
	c->ref = ref;
	c->at = at;
	c->link = 0;
	c->next = 0;
	c->v = NULL;
	if (ref_is_link(ref)) {
		struct emb_link *l = link_get(c->s, ref_obj(ref), c->row);
		if (!l)
			return -EIO;
		c->link = ref_obj(ref);
		voff = ld64(&l->ver);
		c->next = ld64(&l->next);
	}
	c->off = voff;
	c->v = ver_get(c->s, voff, c->id, c->row, c->rs);
	return c->v ? 0 : -EIO;
}

int chain_start(struct store *s, struct stable *st, uint64_t row, uint64_t head, struct chain *c)
{
	*c = (struct chain){ .s = s, .id = st->id, .rs = st->t->row_size, .row = row };
	if (!head)
		return 0;
	return chain_elem(c, head, 0);
}

int chain_step(struct chain *c)
{
	uint64_t next = c->next, newer = ver_batch(c->v);
	uint64_t at = c->link + offsetof(struct emb_link, next);
	if (!next) {
		*c = (struct chain){ .s = c->s, .id = c->id, .rs = c->rs, .row = c->row, .depth = c->depth };
		return 0;
	}
	if (++c->depth > EMB_MAX_SNAPS + 1) {
		csum_error(c->s);
		c->v = NULL;
		return -EIO;
	}
	int ret = chain_elem(c, next, at);
	if (!ret && ver_batch(c->v) >= newer) {
		csum_error(c->s);
		c->v = NULL;
		ret = -EIO;
	}
	return ret;
}

int chain_find(struct store *s, struct stable *st, uint64_t row, uint64_t b, struct emb_version **out,
	       int *decided)
{
	uint64_t head;
	struct chain c;
	int ret = index_get(s, st, row, &head);
	if (!ret)
		ret = chain_start(s, st, row, head, &c);
	while (!ret && c.v && b != EMB_NONE && ver_batch(c.v) > b)
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
		if (c.off == off || c.link == off)
			return 1;
		ret = chain_step(&c);
	}
	return ret;
}

void field_set(struct store *s, uint64_t at, uint64_t ref)
{
	uint64_t *f = S_PTR(s, at);
	st64(f, ref);
	pm_flush(s, f, 8);
}

void ver_free(struct store *s, struct stable *st, uint64_t off)
{
	if (!pool_range_ok(s, off, EMB_SMALL_SLOT, 8))
		return;
	struct emb_version *v = S_PTR(s, off);
	uint64_t kind = ld64(&v->key) & EMB_VK_KIND;
	if (kind == EMB_VK_STUB && st)
		seg_live_add(s, STUB(s, off)->loc, spill_rec_size(st->t->row_size), -1);
	if (slab_free(s, off))
		ver_poison(s, off);
}

void ref_free(struct store *s, struct stable *st, uint64_t ref)
{
	uint64_t off = ref_obj(ref);
	if (ref_is_link(ref) && pool_range_ok(s, off, sizeof(struct emb_link), 8)) {
		struct emb_link *l = S_PTR(s, off);
		uint64_t key = ld64(&l->key);
		/* only a sound link's version: never free what a damaged one names */
		if ((key & EMB_VK_KIND) == EMB_VK_LINK &&
		    ver_get(s, ld64(&l->ver), st->id, key & EMB_ROW_ID_MASK, st->t->row_size))
			ver_free(s, st, ld64(&l->ver));
	}
	ver_free(s, st, off);
}

int ver_bytes_locked(struct store *s, struct stable *st, const struct emb_version *v, void *buf)
{
	uint32_t rs = st->t->row_size;
	if (!ver_stub(v)) {
		memcpy(buf, ver_data(v), rs);
		return 0;
	}
	if (!s->sp)
		return -EIO;
	struct sreq q = { .loc = ((const struct emb_stub *)v)->loc, .row = ver_row(v), .batch = ver_batch(v),
			  .len = rs, .table = st->id, .dst = buf };
	device_read(s->sp, &q, 1);
	atomic_fetch_add_explicit(&s->sp->reads, 1, memory_order_relaxed);
	if (q.ret == -ESTALE)
		atomic_fetch_add(&s->sp->csum_errors, 1);
	return q.ret ? -EIO : 0;
}


/* Replace version r[i].old by r[i].new_ (already written and flushed) where
 * r[i].at refers to it: 0, or -EIO (nothing changed) if an index entry to
 * change is damaged.  commit_lock held. */
int relink_apply(struct store *s, struct stable *st, struct rl *r, size_t n)
{
	struct emb_journal *j = s->jr;
	struct ipos *pos = calloc(n, sizeof(*pos));
	if (!pos)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		uint64_t cur;
		int ret = r[i].at ? 0 : index_find(s, st, r[i].row, &pos[i], &cur);
		if (!ret && !r[i].at && cur != r[i].old)
			ret = -EIO;
		if (ret) {
			free(pos);
			return ret;
		}
	}
	for (size_t i = 0; i < n; i++)
		j->rec[i] = (struct emb_jrec){ r[i].row, r[i].old, r[i].new_, 0 };
	int ret = journal_seal(s, st, EMB_J_RELINK, n, 0);
	if (ret) {
		free(pos);
		return ret;
	}

	for (size_t i = 0; i < n; i++)
		slab_mark(s, r[i].new_);
	pthread_rwlock_wrlock(&st->lock);
	for (size_t i = 0; i < n; i++) {
		if (r[i].at == 0)
			index_set_val(s, &pos[i], r[i].new_);
		else if (r[i].at != EMB_NONE)
			field_set(s, r[i].at, r[i].new_);
	}
	pthread_rwlock_unlock(&st->lock);
	free(pos);
	if ((ret = pm_barrier(s)))
		return ret;

	for (size_t i = 0; i < n; i++)
		ver_free(s, st, r[i].old);
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
		if (drop)
			ver_free(s, st, drop);
	}
	return pm_barrier(s);
}
