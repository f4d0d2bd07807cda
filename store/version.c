/*
 * Walks of version chains, and freeing a version's slot.  What a stub's
 * record on the spill device needs when its stub goes (spill_ver_free) and
 * the journaled relink are the tier's (tier/device.c, tier/mover.c).  A chain starts at a row's
 * index entry; each element is checked through vcheck.c (validated access
 * to versions and links, their checksums: see its header for the layout).
 * A chain walk requires strictly decreasing batches and at most
 * EMB_MAX_SNAPS + 2 versions, so it always ends.
 */
#include "store_int.h"

/* Make ref (read from the field at at) the chain's current element (its
 * version checked by its header alone with head_only). */
static int chain_elem(struct chain *c, uint64_t ref, uint64_t at, int head_only)
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
	c->v = head_only ? ver_get_head(c->s, voff, c->id, c->row, c->rs) : ver_get(c->s, voff, c->id, c->row, c->rs);
	return c->v ? 0 : -EIO;
}

static int chain_begin(struct store *s, struct stable *st, uint64_t row, uint64_t head, struct chain *c,
		       int head_only)
{
	*c = (struct chain){ .s = s, .id = st->id, .rs = st->t->row_size, .row = row };
	if (!head)
		return 0;
	return chain_elem(c, head, 0, head_only);
}

int chain_start(struct store *s, struct stable *st, uint64_t row, uint64_t head, struct chain *c)
{
	return chain_begin(s, st, row, head, c, 0);
}

int chain_start_head(struct store *s, struct stable *st, uint64_t row, uint64_t head, struct chain *c)
{
	return chain_begin(s, st, row, head, c, 1);
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
	int ret = chain_elem(c, next, at, 0);
	if (!ret && ver_batch(c->v) >= newer) {
		csum_error(c->s);
		c->v = NULL;
		ret = -EIO;
	}
	return ret;
}

int chain_find_at(struct store *s, struct stable *st, uint64_t row, uint64_t head, uint64_t b,
		  struct emb_version **out, int *decided)
{
	struct chain c;
	int ret = chain_start(s, st, row, head, &c);
	while (!ret && c.v && b != EMB_NONE && ver_batch(c.v) > b)
		ret = chain_step(&c);
	*out = !ret && c.v && !ver_tomb(c.v) ? c.v : NULL;
	*decided = !ret && c.v;
	return ret;
}

int chain_find(struct store *s, struct stable *st, uint64_t row, uint64_t b, struct emb_version **out,
	       int *decided)
{
	uint64_t head;
	int ret = index_get(s, st, row, &head);
	if (ret) {
		*out = NULL;
		*decided = 0;
		return ret;
	}
	return chain_find_at(s, st, row, head, b, out, decided);
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

void ver_slots_free(struct store *s, uint64_t *off, size_t n)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (pool_range_ok(s, off[i], EMB_SMALL_SLOT, 8))
			off[k++] = off[i];
	k = slab_free_all(s, off, k);
	for (size_t i = 0; i < k; i++)
		ver_poison(s, off[i]);
}
