/*
 * Reclaim: free what no live snapshot (and, for a linked table, the live
 * view) needs of a table's version chains, after a snapshot is dropped or an
 * unlinked table is released.
 *
 * A version v with the next newer version n in its row's chain is seen by
 * snapshot S exactly when v.batch <= S.batch < n.batch.  Reclaim walks every
 * row of the table, keeps the versions some holder sees, points each kept
 * element's link at the next kept one and frees the rest: the versions no
 * one sees, their links, and the link of the last kept version (the last
 * element of a chain is referred to directly; a row left with one version
 * costs no link).  The chain surgery is journaled (EMB_J_RECLAIM): records
 * name the versions and links about to be freed; at recovery
 * (reclaim_replay) a named one no longer reachable from its row's chain is
 * freed, so a crash leaks nothing and frees nothing still linked.
 * commit_lock held throughout.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"
#include "tier/tier.h"

struct change {
	uint64_t row;
	uint64_t head;     /* new ref of the first element, 0 = remove the row */
	uint64_t old_head;
	int was, now;      /* its newest version is a row (not a tombstone) before, after */
	uint32_t first_free, nfree;
};

struct link {
	uint64_t at;       /* a link's next field */
	uint64_t ref;      /* its new value */
};

struct reclaim {
	struct store *s;
	struct stable *st;
	const uint64_t *refb; /* batches of live snapshots holding the table */
	const uint32_t *refi; /* their record index */
	size_t nref;
	int live;             /* the table is linked: its newest version serves the live view */
	struct change *ch;
	size_t nch, capch;
	uint64_t *frees;
	size_t nfrees, capfrees;
	struct link *links;
	size_t nlinks, caplinks;
	uint64_t remaining;   /* rows left in the index */
	uint32_t slot;
	int count;            /* add kept versions to their only holder's excl_bytes */
};

#define GROW(arr, n, cap)                                                        \
	do {                                                                     \
		if ((n) == (cap)) {                                              \
			size_t nc_ = (cap) ? 2 * (cap) : 256;                   \
			void *p_ = realloc((arr), nc_ * sizeof(*(arr)));         \
			if (!p_)                                                 \
				return -ENOMEM;                                  \
			(arr) = p_;                                              \
			(cap) = nc_;                                             \
		}                                                                \
	} while (0)

/* Journal, unlink and free one group of changes. */
static int reclaim_apply(struct reclaim *rc)
{
	struct store *s = rc->s;
	struct stable *st = rc->st;
	struct emb_journal *j = s->jr;
	if (!rc->nch)
		return 0;
	/* positions first: a damaged bucket fails the reclaim before it starts */
	struct ipos *pos = calloc(rc->nch, sizeof(*pos));
	if (!pos)
		return -ENOMEM;
	for (size_t c = 0; c < rc->nch; c++) {
		uint64_t cur;
		int ret = index_find(s, st, rc->ch[c].row, &pos[c], &cur);
		if (ret || cur != rc->ch[c].old_head) {
			free(pos);
			return ret ? ret : -EIO;
		}
	}
	uint64_t n = 0;
	for (size_t i = 0; i < rc->nfrees; i++)
		j->ent[n++] = (struct emb_jrec){ 0, rc->frees[i], 0, 0 };
	for (size_t c = 0; c < rc->nch; c++)
		for (uint32_t k = 0; k < rc->ch[c].nfree; k++)
			j->ent[rc->ch[c].first_free + k].row = rc->ch[c].row;
	int ret = journal_seal(s, st, EMB_J_RECLAIM, n, 0);
	if (ret) {
		free(pos);
		return ret;
	}

	pthread_rwlock_wrlock(&st->lock);
	for (size_t i = 0; i < rc->nlinks; i++)
		field_set(s, rc->links[i].at, rc->links[i].ref);
	int64_t drows = 0;
	for (size_t c = 0; c < rc->nch; c++) {
		struct change *x = &rc->ch[c];
		drows += x->now - x->was;
		if (!x->head)
			index_unpublish(s, st, &pos[c], x->row);
		else if (x->head != x->old_head)
			index_set_val(s, &pos[c], x->head);
	}
	if (drows)
		st64(&st->t->nrows, st->t->nrows + (uint64_t)drows);
	st->mod++;
	pthread_rwlock_unlock(&st->lock);
	pm_flush(s, st->t, 128);
	if ((ret = pm_barrier(s))) {
		free(pos);
		return ret;
	}

	for (size_t i = 0; i < rc->nfrees; i++)
		spill_ver_free(s, st, rc->frees[i]);
	for (size_t c = 0; c < rc->nch; c++)
		if (!rc->ch[c].head)
			index_ovf_dec(s, st, &pos[c]);
	free(pos);
	ret = journal_clear(s);
	slab_trim(s);
	rc->nch = rc->nfrees = rc->nlinks = 0;
	return ret;
}

/* One row's chain as reclaim sees it: element i's version, its batch, its
 * link (0 for the last), and whether it is a tombstone. */
struct elems {
	uint64_t ver[EMB_MAX_SNAPS + 2], batch[EMB_MAX_SNAPS + 2], link[EMB_MAX_SNAPS + 2];
	int tomb[EMB_MAX_SNAPS + 2];
	int keep[EMB_MAX_SNAPS + 2];
	size_t k;
};

/* Which elements a snapshot or the live table still sees; rc->count:
 * credit what one snapshot alone holds to it. */
static void reclaim_keep(struct reclaim *rc, uint64_t row, struct elems *e)
{
	struct store *s = rc->s;
	size_t only;
	/* older versions first: each is seen by the snapshots in [batch, newer batch) */
	int older_kept = 0;
	for (size_t i = e->k; i-- > 1;) {
		size_t h = snapset_holders(rc->refb, rc->nref, e->batch[i], e->batch[i - 1], &only);
		e->keep[i] = h > 0;
		older_kept |= e->keep[i];
		if (h == 1 && rc->count) {
			struct emb_snap *r = snap_rec(s, rc->refi[only]);
			st64(&r->excl_bytes, r->excl_bytes + rc->slot);
		}
	}
	size_t h0 = snapset_holders(rc->refb, rc->nref, e->batch[0], UINT64_MAX, &only);
	if (rc->live)
		/* a tombstone hides older versions, and what a run holds */
		e->keep[0] = !e->tomb[0] || older_kept || runs_may_hold(s, rc->st->id, row);
	else
		e->keep[0] = h0 > 0;
	if (!rc->live && h0 == 1 && rc->count) {
		struct emb_snap *r = snap_rec(s, rc->refi[only]);
		st64(&r->excl_bytes, r->excl_bytes + rc->slot);
	}
}

static int push_free(struct reclaim *rc, uint64_t off)
{
	GROW(rc->frees, rc->nfrees, rc->capfrees);
	rc->frees[rc->nfrees++] = off;
	return 0;
}

/* Queue one row's change: its new first ref, what to free, the kept links'
 * new next refs.  -ENOMEM. */
static int reclaim_queue(struct reclaim *rc, uint64_t row, uint64_t head, const struct elems *e)
{
	size_t kept[EMB_MAX_SNAPS + 2], m = 0;
	for (size_t i = 0; i < e->k; i++)
		if (e->keep[i])
			kept[m++] = i;
	GROW(rc->ch, rc->nch, rc->capch);
	struct change *c = &rc->ch[rc->nch++];
	c->row = row;
	c->old_head = head;
	c->was = !e->tomb[0];
	c->now = m > 0 && !e->tomb[kept[0]];
	c->first_free = (uint32_t)rc->nfrees;
	/* the last kept element is referred to directly; every other kept one
	 * by its link (it has one: something older follows it) */
	c->head = !m ? 0 : m == 1 ? e->ver[kept[0]] : e->link[kept[0]] | EMB_REF_LINK;
	for (size_t j = 0; j + 1 < m; j++) {
		size_t a = kept[j], b = kept[j + 1];
		uint64_t want = j + 2 == m ? e->ver[b] : e->link[b] | EMB_REF_LINK;
		struct emb_link *l = S_PTR(rc->s, e->link[a]);
		if (ld64(&l->next) != want) {
			GROW(rc->links, rc->nlinks, rc->caplinks);
			rc->links[rc->nlinks++] = (struct link){ e->link[a] + offsetof(struct emb_link, next), want };
		}
	}
	for (size_t i = 0; i < e->k; i++) {
		int last_kept = m && i == kept[m - 1];
		if (!e->keep[i] && push_free(rc, e->ver[i]))
			return -ENOMEM;
		if (e->link[i] && (!e->keep[i] || last_kept) && push_free(rc, e->link[i]))
			return -ENOMEM;
	}
	c->nfree = (uint32_t)(rc->nfrees - c->first_free);
	return 0;
}

/* Decide which versions of one row's chain stay; queue the changes. */
static int reclaim_row(struct reclaim *rc, uint64_t row, uint64_t head)
{
	struct elems e;
	struct chain ch;
	e.k = 0;
	int ret = chain_start(rc->s, rc->st, row, head, &ch);
	while (!ret && ch.v) {
		e.ver[e.k] = ch.off;
		e.link[e.k] = ch.link;
		e.batch[e.k] = ver_batch(ch.v);
		e.tomb[e.k++] = ver_tomb(ch.v);
		ret = chain_step(&ch);
	}
	if (ret || !e.k) { /* damaged: the whole chain stays as it is */
		rc->remaining++;
		return 0;
	}
	reclaim_keep(rc, row, &e);
	size_t nfree = 0, nkept = 0;
	for (size_t i = 0; i < e.k; i++) {
		nfree += !e.keep[i];
		nkept += e.keep[i];
	}
	if (nkept)
		rc->remaining++;
	/* nothing dropped: the chain stays, unless its last kept element
	 * (not the chain's last) still has a link -- never, all are kept */
	if (!nfree)
		return 0;
	if (rc->nfrees + 2 * e.k > EMB_JOURNAL_CAP && (ret = reclaim_apply(rc)))
		return ret;
	return reclaim_queue(rc, row, head, &e);
}

/* Every (row, newest version) of an index. */
struct kv {
	struct u64vec k, v;
};

static int kv_push(void *arg, uint64_t key, uint64_t val)
{
	struct kv *a = arg;
	return u64vec_push(&a->k, key) ? -ENOMEM : u64vec_push(&a->v, val);
}

/* Returns the rows left in the table's index, or -errno.  count: also add
 * what each snapshot alone holds to its excl_bytes.  commit_lock held. */
int reclaim_table(struct store *s, struct stable *st, int count)
{
	uint64_t refb[EMB_MAX_SNAPS];
	uint32_t refi[EMB_MAX_SNAPS];
	size_t nref = 0;
	pthread_rwlock_rdlock(&s->snap_lock);
	for (uint32_t i = 0; i < s->n_live; i++)
		if (snapset_holds(s, snap_rec(s, s->live_idx[i]), st->id, st->t->gen)) {
			refb[nref] = s->live_batch[i];
			refi[nref++] = s->live_idx[i];
		}
	pthread_rwlock_unlock(&s->snap_lock);

	struct reclaim rc = { .s = s, .st = st, .refb = refb, .refi = refi, .nref = nref,
			      .live = !(st->t->flags & EMB_T_ZOMBIE), .slot = slab_row_slot(st->t->row_size),
			      .count = count };
	int ret;
	struct kv all = { 0 };
	ret = index_walk(s, st, kv_push, &all);
	for (size_t i = 0; !ret && i < all.k.n; i++)
		ret = reclaim_row(&rc, all.k.v[i], all.v.v[i]);
	if (!ret)
		ret = reclaim_apply(&rc);
	free(all.k.v);
	free(all.v.v);
	free(rc.ch);
	free(rc.frees);
	free(rc.links);
	return ret ? ret : (int)(rc.remaining > INT32_MAX ? INT32_MAX : rc.remaining);
}

int reclaim_replay(struct store *s, struct emb_journal *j)
{
	struct stable *st = tab_get(s, j->table);
	if (!st)
		return -EIO;
	for (uint64_t i = 0; i < j->count; i++)
		if (!chain_has(s, st, j->ent[i].row, j->ent[i].old_off))
			spill_ver_free(s, st, j->ent[i].old_off);
	/* recount the live rows: the head updates may have been partial */
	uint64_t n = 0;
	struct kv all = { 0 };
	int ret = index_walk(s, st, kv_push, &all);
	for (size_t i = 0; !ret && i < all.k.n; i++) {
		struct chain c;
		int bad = chain_start(s, st, all.k.v[i], all.v.v[i], &c);
		n += bad || !ver_tomb(c.v); /* a damaged head counts as a row */
	}
	free(all.k.v);
	free(all.v.v);
	if (ret)
		return ret;
	st64(&st->t->nrows, n);
	pm_flush(s, st->t, 128);
	return pm_barrier(s);
}

/* Walk every table: free what the live snapshots need not keep, free
 * zombie tables left empty, and recount each snapshot's excl_bytes.
 * commit_lock held. */
int snap_reclaim_all(struct store *s)
{
	int ret = 0;
	for (uint32_t i = 0; i < EMB_MAX_SNAPS; i++)
		if (rec_live(snap_rec(s, i)))
			st64(&snap_rec(s, i)->excl_bytes, 0);
	for (uint32_t i = 0; i < EMB_NTABLES && ret >= 0; i++) {
		struct stable *st = tab_get(s, i);
		if (!st)
			continue;
		ret = reclaim_table(s, st, 1);
		/* runs are not reclaimed row by row: a zombie with runs goes
		 * once no snapshot holds it */
		if (ret == 0 && (st->t->flags & EMB_T_ZOMBIE) &&
		    (!runs_count(s, st->id, NULL) || !snapset_refs(s, st)) && !(ret = runs_drop_table(s, st)))
			ret = catalog_free_locked(s, st);
	}
	return ret < 0 ? ret : 0;
}
