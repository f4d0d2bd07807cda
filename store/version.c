/*
 * Walks of version chains, frees and relinks.  A chain starts at a row's
 * index entry; each element is checked through vcheck.c (validated access
 * to versions and links, their checksums: see its header for the layout).
 * A chain walk requires strictly decreasing batches and at most
 * EMB_MAX_SNAPS + 2 versions, so it always ends.
 */
#include "store_int.h"

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

void ver_free(struct store *s, struct stable *st, uint64_t off)
{
	if (!pool_range_ok(s, off, EMB_SMALL_SLOT, 8))
		return;
	struct emb_version *v = S_PTR(s, off);
	uint64_t kind = ld64(&v->key) & EMB_VK_KIND;
	if (kind == EMB_VK_STUB && st)
		spill_stub_freed(s, ((struct emb_stub *)S_PTR(s, off))->loc, st->t->row_size);
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
	spill_read(s, &q, 1);
	if (q.ret == -ESTALE)
		spill_csum_error(s);
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
		j->ent[i] = (struct emb_jrec){ r[i].row, r[i].old, r[i].new_, 0 };
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
		struct emb_jrec *r = &j->ent[i];
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
