/* store_fsck: a full walk of indexes and slab bitmaps (tests, repair). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

struct walk {
	struct store *s;
	struct stable *st;
	struct store_fsck *r;
	struct u64vec refs;
	uint64_t count;
	struct emb_spill *pm;
	uint64_t *live;   /* per segment, from the stubs */
	struct u64vec stubs; /* of the current table, to read back */
};

/* A stub must point into a written part of a used segment, at a record that
 * reads back (when the device is attached). */
static void check_stub(struct walk *w, struct emb_version *v)
{
	struct store *s = w->s;
	uint64_t loc = ((struct emb_stub *)v)->loc;
	struct emb_spill *pm = w->pm;
	uint32_t rs = w->st->t->row_size;
	uint32_t rsz = spill_rec_size(rs);
	w->r->stubs++;
	uint64_t k = pm && loc >= EMB_SPILL_HDR ? (loc - EMB_SPILL_HDR) / pm->seg_size : UINT64_MAX;
	if (!pm || k >= pm->nsegs || pm->seg[k].state == EMB_SEG_FREE ||
	    loc + rsz > EMB_SPILL_HDR + k * pm->seg_size + pm->seg[k].fill) {
		w->r->bad_stubs++;
		return;
	}
	w->live[k] += rsz;
	if (s->sp && u64vec_push(&w->stubs, S_OFF(s, v)))
		w->r->bad_stubs++; /* no memory to check it */
}

/* Every version of a row's chain is sound (ver.c: right row and table,
 * checksum, batches strictly decreasing). */
static int check_entry(void *arg, uint64_t key, uint64_t val)
{
	struct walk *w = arg;
	struct chain c;
	int ret = chain_start(w->s, w->st, key, val, &c);
	w->count += ret || (c.v && !ver_tomb(c.v)); /* a damaged head counts as a row */
	while (!ret && c.v) {
		if (u64vec_push(&w->refs, c.off))
			return -ENOMEM;
		if (ver_stub(c.v))
			check_stub(w, c.v);
		ret = chain_step(&c);
	}
	if (ret || !val)
		w->r->bad_versions++;
	return 0;
}

static int referenced(const struct u64vec *refs, uint64_t off)
{
	size_t i = u64_lower_bound(refs->v, refs->n, off);
	return i < refs->n && refs->v[i] == off;
}

int store_fsck(struct store *s, struct store_fsck *r)
{
	struct walk w = { .s = s, .r = r };
	int ret = 0;
	memset(r, 0, sizeof(*r));
	w.pm = S_PTR(s, s->sb->spill_off);
	if (w.pm && !(w.live = calloc(w.pm->nsegs, sizeof(*w.live))))
		return -ENOMEM;
	pthread_mutex_lock(&s->commit_lock);
	for (uint32_t i = 0; i < EMB_NTABLES && !ret; i++) {
		struct stable *st = tab_get(s, i);
		if (!st)
			continue;
		w.st = st;
		w.count = 0;
		w.stubs.n = 0;
		ret = index_walk(s, st, check_entry, &w);
		if (!ret && w.stubs.n) {
			int bad = spill_verify(s, st, w.stubs.v, w.stubs.n);
			if (bad < 0)
				ret = bad;
			else
				r->bad_stubs += (uint64_t)bad;
		}
		if (w.count != st->t->nrows && !(st->t->flags & EMB_T_ZOMBIE))
			r->bad_counts++;
		r->rows += w.count;
	}
	if (!ret) {
		u64_sort(w.refs.v, w.refs.n);
		for (size_t i = 1; i < w.refs.n; i++)
			if (w.refs.v[i] == w.refs.v[i - 1])
				r->double_refs++;
		for (uint32_t c = 0; c < EMB_MAX_CLASSES; c++) {
			struct emb_class *pc = &s->sb->classes[c];
			for (uint64_t off = pc->slot_size ? pc->head : 0; off;) {
				struct emb_slab *h = S_PTR(s, off);
				uint64_t start = off + h->data_off;
				for (uint32_t k = 0; k < h->nslots; k++) {
					int set = !!(h->bitmap[k / 64] & (1ull << (k % 64)));
					int ref = referenced(&w.refs, start + (uint64_t)k * h->slot_size);
					if (set && !ref)
						r->leaked_slots++;
					if (ref && !set)
						r->bad_versions++;
				}
				off = h->next;
			}
		}
	}
	for (uint64_t k = 0; !ret && w.pm && k < w.pm->nsegs; k++)
		r->seg_live_off += w.pm->seg[k].live != w.live[k];
	if (!ret)
		ret = runs_fsck(s, &r->runs, &r->bad_runs);
	pthread_mutex_unlock(&s->commit_lock);
	free(w.live);
	free(w.stubs.v);
	free(w.refs.v);
	return ret;
}
