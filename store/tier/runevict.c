/*
 * Eviction: cold rows of a table, whole chains, written into a new run and
 * then taken out of the pool's index by a commit (store/tier/evict.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run_int.h"

/* ---- eviction ----------------------------------------------------------- */

/* An eviction's rows: each a chain of nv versions at v0.. in the flat
 * arrays (slot, batch | EMB_RREC_TOMB, bytes in the arena or NULL). */
struct ev {
	uint64_t row;
	uint32_t nv;
	size_t v0;
};

struct evset {
	struct ev *e;
	size_t n, max;
	uint64_t *off, *lnk, *bat;
	const char **data;
	char *arena;
	size_t nv, vmax;
};

static int ev_cmp(const void *a, const void *b)
{
	const struct ev *x = a, *y = b;
	return x->row < y->row ? -1 : x->row > y->row;
}

#define EVICT_MAX_CHAIN 64u /* longer chains (many snapshots) stay */

/* Take row's chain (head at off) into es if it is sound, has no stub, and
 * fits: 1 taken, 0 skipped, -1 es is full.  st->lock held. */
static int ev_take(struct store *s, struct stable *st, struct evset *es, uint64_t row, uint64_t off)
{
	uint32_t rs = st->t->row_size;
	uint64_t offs[EVICT_MAX_CHAIN], links[EVICT_MAX_CHAIN];
	struct emb_version *vs[EVICT_MAX_CHAIN];
	uint32_t nv = 0;
	struct chain c;
	if (chain_start(s, st, row, off, &c))
		return 0;
	while (c.v) {
		if (nv == EVICT_MAX_CHAIN || ver_stub(c.v))
			return 0;
		offs[nv] = c.off;
		links[nv] = c.link;
		vs[nv++] = c.v;
		if (chain_step(&c))
			return 0; /* damaged: it stays */
	}
	if (!nv)
		return 0;
	if (es->n == es->max || es->nv + nv > es->vmax)
		return -1;
	es->e[es->n++] = (struct ev){ row, nv, es->nv };
	for (uint32_t k = 0; k < nv; k++) {
		size_t i = es->nv++;
		es->off[i] = offs[k];
		es->lnk[i] = links[k];
		es->bat[i] = ver_batch(vs[k]) | (ver_tomb(vs[k]) ? EMB_RREC_TOMB : 0);
		es->data[i] = NULL;
		if (!ver_tomb(vs[k])) {
			char *d = es->arena + i * (size_t)rs;
			memcpy(d, ver_data(vs[k]), rs);
			es->data[i] = d;
		}
	}
	return 1;
}

struct gather {
	struct store *s;
	struct stable *st;
	struct evset *es;
	int all;
};

/* Take one row's chain if it is cold: 1 taken, 0 passed over (hot, a stub,
 * or a lone tombstone that reclaim drops), -1 es is full. */
static int gather_one(struct gather *g, uint64_t row, uint64_t ref)
{
	struct store *s = g->s;
	struct stable *st = g->st;
	struct chain c;
	if (chain_start(s, st, row, ref, &c) || ver_stub(c.v))
		return 0;
	if (ver_tomb(c.v) && !c.next && !runs_may_hold(s, st->id, row))
		return 0; /* reclaim drops it */
	if (!g->all && !s->sp->all_cold && heat_test_clear(s->sp, st->id, row))
		return 0;
	return ev_take(s, st, g->es, row, ref);
}

/* index_scan's callback (index order): take one row's chain if it is
 * cold; 1 when es is full (the segment is gathered again next time). */
static int gather_cb(void *arg, uint64_t row, uint64_t ref)
{
	return gather_one(arg, row, ref) < 0;
}

/* A row of the index and its chain's head. */
struct ev_cand {
	uint64_t row, ref;
};

struct cands {
	struct ev_cand *v;
	size_t n, cap;
	uint64_t from;
	int err;
};

static int cand_cmp(const void *a, const void *b)
{
	const struct ev_cand *x = a, *y = b;
	return x->row < y->row ? -1 : x->row > y->row;
}

/* index_scan's callback: keep the rows at or past the hand. */
static int cand_add(void *arg, uint64_t row, uint64_t ref)
{
	struct cands *c = arg;
	if (row < c->from)
		return 0;
	if (c->n == c->cap) {
		size_t cap = c->cap ? 2 * c->cap : 4096;
		struct ev_cand *v = realloc(c->v, cap * sizeof(*v));
		if (!v) {
			c->err = -ENOMEM;
			return 1;
		}
		c->v = v;
		c->cap = cap;
	}
	c->v[c->n++] = (struct ev_cand){ row, ref };
	return 0;
}

void runs_evict_forget(struct spill *sp)
{
	free(sp->evc);
	sp->evc = NULL;
	sp->evc_n = sp->evc_at = 0;
}

/* The sweep's rows of st from the hand on: those a scan of this sweep kept
 * (1: their heads may have changed since), or a new scan's (0).  Only the
 * mover (round_lock) touches sp->evc.  st->lock and commit_lock held. */
static int evc_get(struct store *s, struct stable *st, uint64_t hand)
{
	struct spill *sp = s->sp;
	if (sp->evc && sp->evc_id == st->id && sp->evc_gen == st->t->gen && sp->evc_at < sp->evc_n &&
	    sp->evc[sp->evc_at].row == hand)
		return 1;
	runs_evict_forget(sp);
	struct cands c = { .from = hand };
	size_t di = 0;
	index_scan(s, st, &di, cand_add, &c);
	if (c.err) {
		free(c.v);
		return c.err;
	}
	if (c.n)
		qsort(c.v, c.n, sizeof(*c.v), cand_cmp);
	sp->evc = c.v;
	sp->evc_n = c.n;
	sp->evc_id = st->id;
	sp->evc_gen = st->t->gen;
	return 0;
}

/* Gather cold rows of st (their whole chains), want of them, in row order
 * from the hand *hand on: a CLOCK whose hand sweeps the row ids, so that
 * rows written in row order leave in row order and the runs of one sweep
 * hold disjoint ranges of rows (a load makes runs that no merge needs to
 * rewrite).  Past want, while the rows taken stay contiguous (a load's),
 * it goes on until es is full: a load's runs are few and large, and the
 * hand stops at the first row a load has not written back yet instead of
 * passing it.  *hand: the first row not passed, or EMB_NONE when the sweep
 * reached the table's end.  The rows come from a scan of the index at the
 * sweep's first eviction (evc_get): a row made since is left for the next
 * sweep, and each row kept is looked up again when its turn comes.  A pool
 * of sp->order_max row versions or more (ordered 0) is swept in its
 * index's order instead, *hand then the index position: a sort of its
 * rows would hold commit_lock too long.  commit_lock held. */
static int evict_gather(struct store *s, struct stable *st, uint64_t *hand, int all, size_t want, int ordered,
			struct evset *es)
{
	struct spill *sp = s->sp;
	struct gather g = { s, st, es, all };
	pthread_rwlock_rdlock(&st->lock);
	if (!ordered) {
		runs_evict_forget(sp);
		size_t di = *hand;
		index_scan(s, st, &di, gather_cb, &g);
		*hand = di >= index_ndir(st) ? EMB_NONE : di;
		pthread_rwlock_unlock(&st->lock);
		return 0;
	}
	int kept = evc_get(s, st, *hand);
	if (kept < 0) {
		pthread_rwlock_unlock(&st->lock);
		return kept;
	}
	int dense = 1; /* every row from the first taken on was taken */
	size_t i = sp->evc_at;
	for (; i < sp->evc_n; i++) {
		uint64_t row = sp->evc[i].row, ref = sp->evc[i].ref;
		if (es->n >= want && (!dense || row != es->e[es->n - 1].row + 1))
			break;
		size_t had = es->n;
		struct ipos pos;
		int r = 0;
		if (kept && (index_find(s, st, row, &pos, &ref) || !ref))
			ref = 0; /* deleted since the scan (or its bucket is damaged): passed */
		if (ref)
			r = gather_one(&g, row, ref);
		if (r < 0 && es->n)
			break; /* full: this row first next time */
		dense &= es->n > had && (!had || row == es->e[had - 1].row + 1);
	}
	pthread_rwlock_unlock(&st->lock);
	sp->evc_at = i;
	*hand = i < sp->evc_n ? sp->evc[i].row : EMB_NONE;
	if (i >= sp->evc_n)
		runs_evict_forget(sp);
	return 0;
}

/* Mark the rows of e[0..n) (sorted) of table id in flight (n = 0: none). */
static int ev_publish(struct spill *sp, uint32_t id, const struct ev *e, size_t n)
{
	uint64_t *v = n ? malloc(n * sizeof(*v)) : NULL;
	if (n && !v)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		v[i] = e[i].row;
	pthread_rwlock_wrlock(&sp->run_lock);
	free(sp->ev_rows);
	sp->ev_rows = v;
	sp->ev_n = n;
	sp->ev_id = id;
	pthread_rwlock_unlock(&sp->run_lock);
	return 0;
}

#define EVICT_SLICE 4096u /* rows per hold of commit_lock when they leave the index */

/* Rows an eviction takes at most to give back budget bytes of rows of
 * row_size rs: at least EVICT_MIN_ROWS, at most EVICT_MAX_BYTES of them,
 * and a run that fits half the smallest merge reserve. */
static size_t ev_max_rows(const struct spill *sp, uint32_t rs, uint64_t budget)
{
	size_t max = (size_t)(budget / slab_row_slot(rs));
	if (max < EVICT_MIN_ROWS)
		max = EVICT_MIN_ROWS;
	if (max * rs > EVICT_MAX_BYTES)
		max = EVICT_MAX_BYTES / rs;
	/* a run fits in half the smallest merge reserve, so that two of them
	 * can always be merged (its versions count: vmax = max) */
	uint64_t cap = sp->reserve_min * sp->pm->seg_size / 2 / run_blk_size(rs) * run_blk_recs(rs);
	if (max > cap)
		max = cap ? cap : 1;
	if (sp->evict_rows && max > sp->evict_rows)
		max = sp->evict_rows; /* a test's */
	return max;
}

void runs_evict_release(struct spill *sp)
{
	free(sp->ev_arena);
	sp->ev_arena = NULL;
	sp->ev_arena_len = 0;
}

/* es's arrays for es->max rows and es->vmax versions (vmax = max) of
 * row_size rs; the row bytes in the round's buffer (sp->ev_arena), grown
 * if it is smaller.  0, or -ENOMEM (evset_free frees what was made). */
static int evset_alloc(struct spill *sp, struct evset *es, uint32_t rs)
{
	size_t max = es->max;
	es->e = malloc(max * sizeof(*es->e));
	es->off = malloc(max * sizeof(*es->off));
	es->lnk = malloc(max * sizeof(*es->lnk));
	es->bat = malloc(max * sizeof(*es->bat));
	es->data = malloc(max * sizeof(*es->data));
	if (sp->ev_arena_len < max * (size_t)rs) {
		runs_evict_release(sp);
		if ((sp->ev_arena = malloc(max * (size_t)rs)))
			sp->ev_arena_len = max * (size_t)rs;
	}
	es->arena = sp->ev_arena;
	return es->e && es->off && es->lnk && es->bat && es->data && es->arena ? 0 : -ENOMEM;
}

/* Free es's arrays (those evset_alloc made; the others are NULL), all but
 * the row bytes (the round's: runs_evict_release). */
static void evset_free(struct evset *es)
{
	free(es->e);
	free(es->off);
	free(es->lnk);
	free(es->bat);
	free(es->data);
}

/* Are the rows of the run w built (w->rows) in none of st's runs?  Then it
 * is fresh: a merge of it with other fresh runs would drop nothing.  Mover
 * only (round_lock): no run that may be fresh comes meanwhile. */
static int ev_fresh(struct store *s, struct stable *st, const struct run_build *w)
{
	struct srun **v;
	size_t n;
	if (!w->rows.n || runs_get_range(s->sp, st->id, w->min_row, w->max_row, &v, &n))
		return 0;
	int fresh = 1;
	for (size_t i = 0; i < n && fresh; i++) {
		struct srun *x = v[i];
		size_t k = u64_lower_bound(w->rows.v, w->rows.n, x->r->min_row);
		size_t e = u64_lower_bound(w->rows.v, w->rows.n, x->r->max_row + 1);
		fresh = !run_holds_any(s, x, w->rows.v + k, e - k);
	}
	runs_put(v, n);
	return fresh;
}

/* Install the run w built of st's rows, then take its *nrows rows (er) out of
 * the index, EVICT_SLICE at a time, commit_lock let go in between (and the
 * table checked again).  commit_lock held.  0, -ENOENT (the table went
 * meanwhile) or -errno; *nrows: the rows that left the index (unchanged if
 * the table had gone before the install). */
static int ev_install_locked(struct store *s, struct stable *st, uint32_t tid, struct run_build *w,
			     const struct evict_row *er, size_t *nrows)
{
	struct spill *sp = s->sp;
	size_t n = *nrows, evicted = 0;
	int ret;
	if (!run_table_same(s, st, tid, w->gen))
		return -ENOENT; /* the table went meanwhile */
	ret = run_install(s, w, w->id, 0, NULL, 0);
	if (!ret) {
		pthread_rwlock_wrlock(&st->lock);
		st->mod++;
		pthread_rwlock_unlock(&st->lock);
	}
	for (size_t at = 0; !ret && at < n;) {
		size_t k = n - at < EVICT_SLICE ? n - at : EVICT_SLICE, done = 0;
		ret = commit_evict_locked(s, st, er + at, k, &done);
		evicted += done;
		at += k;
		if (!ret && at < n) {
			pthread_mutex_unlock(&s->commit_lock);
			spill_unlocked(sp);
			pthread_mutex_lock(&s->commit_lock);
			if (!run_table_same(s, st, tid, w->gen))
				ret = -ENOENT;
		}
	}
	atomic_fetch_add_explicit(&sp->run_evicted, evicted, memory_order_relaxed);
	*nrows = evicted;
	return ret;
}

int64_t runs_evict_table(struct store *s, struct stable *st, uint64_t *hand, uint64_t budget, int all)
{
	struct spill *sp = s->sp;
	uint32_t rs = st->t->row_size, tid = st->id;
	size_t want = ev_max_rows(sp, rs, budget), max = ev_max_rows(sp, rs, EVICT_MAX_BYTES);
	uint64_t used, slabs, nv;
	slab_row_usage(s, &used, &slabs, &nv);
	int ordered = nv < sp->order_max;
	if (!ordered)
		max = want;
	struct evset es = { .max = max, .vmax = max };
	uint64_t *plain = NULL;
	struct evict_row *er = NULL;
	struct run_build w;
	int built = 0;
	size_t n = 0;
	int ret = evset_alloc(sp, &es, rs);
	uint64_t id = 0;
	if (!ret) {
		/* the rows are marked in flight before commit_lock goes: a delete
		 * or a truncation meanwhile leaves a tombstone for them, and the
		 * run's id orders it before any run made meanwhile */
		pthread_mutex_lock(&s->commit_lock);
		ret = evict_gather(s, st, hand, all, want, ordered, &es);
		n = es.n;
		if (!ret && n) {
			if (!ordered) /* a sweep in row order gathered them ascending */
				qsort(es.e, n, sizeof(*es.e), ev_cmp);
			ret = ev_publish(sp, st->id, es.e, n);
			id = run_next_id(sp);
		}
		pthread_mutex_unlock(&s->commit_lock);
	}
	if (ret || !n)
		goto out;
	spill_unlocked(sp);
	if ((ret = run_build_open(&w, s, st)))
		goto out;
	built = 1;
	w.id = id;
	/* it leaves the reserve (run_build_open: keep = 1 + the reserve) as it
	 * will be with this run's rows counted (runs_reserve grows by at most
	 * the run's size); made in the middle of a merge (spill_evict_between),
	 * which may take the reserve, less what the merge has claimed of it */
	uint32_t rsv = w.keep - 1;
	rsv -= sp->merge_segs < rsv ? sp->merge_segs : rsv;
	w.keep = 1 + rsv + (uint32_t)(((uint64_t)es.nv / w.per_blk + 2) * w.bs / sp->pm->seg_size + 1);
	for (size_t i = 0; i < n && !ret; i++)
		ret = run_build_row(&w, es.e[i].row, &es.bat[es.e[i].v0], &es.data[es.e[i].v0], es.e[i].nv);
	if (!ret)
		ret = run_build_finish(&w);
	if (ret)
		goto out;
	w.fresh = ev_fresh(s, st, &w);
	plain = malloc(es.nv * sizeof(*plain));
	er = malloc(n * sizeof(*er));
	if (!plain || !er) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < es.nv; i++)
		plain[i] = es.bat[i] & ~EMB_RREC_TOMB;
	for (size_t i = 0; i < n; i++)
		er[i] = (struct evict_row){ es.e[i].row, es.e[i].nv, &es.off[es.e[i].v0], &es.lnk[es.e[i].v0],
					    &plain[es.e[i].v0], &es.data[es.e[i].v0] };
	/* the run is installed, then its rows leave the index in slices of
	 * EVICT_SLICE, commit_lock let go in between so that commits (and
	 * their barriers) do not queue behind the whole eviction; a row
	 * written meanwhile stays (commit_evict_locked compares its chain) */
	pthread_mutex_lock(&s->commit_lock);
	ret = ev_install_locked(s, st, tid, &w, er, &n);
	ev_publish(sp, 0, NULL, 0);
	pthread_mutex_unlock(&s->commit_lock);
out:
	if (sp->ev_n)
		ev_publish(sp, 0, NULL, 0);
	if (built)
		run_build_free(&w, 1);
	free(plain);
	free(er);
	evset_free(&es);
	return ret ? ret : (int64_t)n;
}
