/*
 * The commit that takes rows a run now holds out of the index (run.c's
 * eviction): a row whose chain is still exactly what was written to the run
 * (slots, batches, bytes) loses its index entry and every version's slot.
 *
 * Steps, as a group commit without new versions (commit.c): intents in the
 * journal (the first element as an EMB_J_COMMIT delete of its ref; each
 * older version and link as an EMB_JR_CHAIN record), barrier; index entries
 * unpublished, row count, barrier; slots freed, journal cleared.  commit_replay frees a chain
 * record's slot only when its row left the index, so a crash at any point
 * leaves the row whole in the pool or gone from it, never torn; its bytes
 * are in the run either way.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "spill.h"

static uint64_t first_ref(const struct evict_row *e)
{
	return e->link[0] ? e->link[0] | EMB_REF_LINK : e->off[0];
}

/* Is row's chain (head at head) still exactly e? */
static int chain_same(struct store *s, struct stable *st, const struct evict_row *e, uint64_t head)
{
	struct chain c;
	uint32_t k = 0;
	if (head != first_ref(e) || chain_start(s, st, e->row, head, &c))
		return 0;
	for (; c.v; k++) {
		struct emb_version *v = c.v;
		if (k == e->nv || c.off != e->off[k] || c.link != e->link[k] || ver_stub(v) ||
		    ver_batch(v) != e->batch[k] || ver_tomb(v) != !e->data[k] ||
		    (e->data[k] && memcmp(ver_data(v), e->data[k], st->t->row_size)))
			return 0;
		if (chain_step(&c))
			return 0;
	}
	return k == e->nv;
}

/* Journal records a row's eviction takes. */
static size_t evict_recs(const struct evict_row *e)
{
	size_t n = 1;
	for (uint32_t k = 1; k < e->nv; k++)
		n += 1 + (e->link[k] != 0);
	return n;
}

/* One journaled commit of the rows er[from, to) at index positions pos[]. */
static int evict_apply(struct store *s, struct stable *st, const struct evict_row *const *er,
		       const struct ipos *pos, size_t from, size_t to)
{
	struct emb_journal *j = s->jr;
	uint64_t nrec = 0;
	for (size_t i = from; i < to; i++) {
		const struct evict_row *e = er[i];
		j->ent[nrec++] = (struct emb_jrec){ e->row, first_ref(e), 0, 0 };
		for (uint32_t k = 1; k < e->nv; k++) {
			j->ent[nrec++] = (struct emb_jrec){ e->row, e->off[k], 0, EMB_JR_CHAIN };
			if (e->link[k])
				j->ent[nrec++] = (struct emb_jrec){ e->row, e->link[k], 0, EMB_JR_CHAIN };
		}
	}
	int ret = journal_seal(s, st, EMB_J_COMMIT, nrec, 0);
	if (ret)
		return ret;
	int64_t live = 0;
	pthread_rwlock_wrlock(&st->lock);
	for (size_t i = from; i < to; i++) {
		index_unpublish(s, st, &pos[i], er[i]->row);
		live += !!er[i]->data[0];
	}
	st64(&st->t->nrows, st->t->nrows - (uint64_t)live);
	st->mod++;
	pthread_rwlock_unlock(&st->lock);
	pm_flush(s, st->t, 128);
	if ((ret = pm_barrier(s)))
		return ret; /* the journal decides after a crash */
	for (size_t i = from; i < to; i++) {
		for (uint32_t k = 0; k < er[i]->nv; k++) {
			spill_ver_free(s, st, er[i]->off[k]);
			if (er[i]->link[k])
				spill_ver_free(s, st, er[i]->link[k]);
		}
		index_ovf_dec(s, st, &pos[i]);
	}
	ret = journal_clear(s);
	slab_trim(s);
	atomic_fetch_add_explicit(&s->n_commits, 1, memory_order_relaxed);
	return ret;
}

int commit_evict_locked(struct store *s, struct stable *st, const struct evict_row *e, size_t n, size_t *done)
{
	*done = 0;
	const struct evict_row **er = calloc(n ? n : 1, sizeof(*er));
	struct ipos *pos = calloc(n ? n : 1, sizeof(*pos));
	int ret = er && pos ? 0 : -ENOMEM;
	size_t m = 0;
	for (size_t i = 0; i < n && !ret; i++) {
		uint64_t cur;
		if ((ret = index_find(s, st, e[i].row, &pos[m], &cur)))
			break;
		if (evict_recs(&e[i]) > EMB_JOURNAL_CAP || !chain_same(s, st, &e[i], cur))
			continue; /* written meanwhile: the pool's version is newer */
		er[m++] = &e[i];
	}
	size_t from = 0, nrec = 0;
	for (size_t i = 0; i < m && !ret; i++) {
		nrec += evict_recs(er[i]);
		size_t next = i + 1 < m ? evict_recs(er[i + 1]) : 0;
		if (i + 1 == m || nrec + next > EMB_JOURNAL_CAP) {
			ret = evict_apply(s, st, er, pos, from, i + 1);
			from = i + 1;
			nrec = 0;
			if (!ret)
				*done = from;
		}
	}
	free(er);
	free(pos);
	return ret;
}
