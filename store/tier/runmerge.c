/*
 * Merges of a table's runs (by level, and the ones that give room back on
 * a nearly full device: the merge reserve), and truncation, which writes
 * tombstones for the rows past the new end into a run of their own.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run_int.h"

/* ---- merges -------------------------------------------------------------- */

/* Run x holds no row in the row ranges of v[0..m). */
static int runs_apart(const struct srun *x, struct srun *const *v, size_t m)
{
	for (size_t i = 0; i < m; i++)
		if (x->r->min_row <= v[i]->r->max_row && v[i]->r->min_row <= x->r->max_row)
			return 0;
	return 1;
}

/* Runs v[0..m) hold disjoint rows and no tombstone: a merge of them would
 * write their records again as they are (but for older versions no
 * snapshot needs any more, which merge_fitting drops when the device is
 * short of room).  Disjoint rows: their ranges are disjoint, or they are
 * fresh (runevict.c). */
static int runs_settled(struct srun *const *v, size_t m)
{
	for (size_t i = 0; i < m; i++)
		if (v[i]->r->nlive != v[i]->r->nrecs)
			return 0;
	for (size_t i = 0; i < m; i++)
		for (size_t k = i + 1; k < m; k++)
			if (!runs_apart(v[i], v + k, 1) && !(v[i]->fresh && v[k]->fresh))
				return 0;
	return 1;
}

/* A fresh run that holds fewer than half the rows of its range: the rows a
 * load's writer had not written back when the mover's hand passed them,
 * or a run of a load in no order.  Its range meets other runs' ranges, so
 * that lookups there try its filter too. */
static int run_sparse(const struct srun *x)
{
	return x->fresh && x->r->nlive == x->r->nrecs && x->r->nrecs * 2 < x->r->max_row - x->r->min_row + 1;
}

static int nrecs_cmp(const void *a, const void *b)
{
	const struct srun *x = *(struct srun *const *)a, *y = *(struct srun *const *)b;
	return x->r->nrecs < y->r->nrecs ? -1 : x->r->nrecs > y->r->nrecs;
}

/* Move runs v[0..m) of table tid (settled: see runs_settled) to level
 * without writing them again (a merge's trivial move), if they are all
 * still listed.  Takes commit_lock.  1 moved, 0 not (a list changed),
 * -errno. */
static int runs_relevel(struct store *s, uint32_t tid, struct srun **v, size_t m, uint32_t level)
{
	struct spill *sp = s->sp;
	volatile int ret = 0;
	volatile int listed = 1;
	pthread_mutex_lock(&s->commit_lock);
	pthread_rwlock_wrlock(&sp->run_lock);
	for (size_t i = 0; i < m && listed; i++) {
		struct srun *p = sp->runs[tid];
		while (p && p != v[i])
			p = p->next;
		listed = p != NULL;
	}
	if (listed) {
		PM_TX(s) {
			for (size_t i = 0; i < m; i++) {
				struct emb_run *r = v[i]->r;
				pmemobj_tx_add_range_direct(r, sizeof(*r));
				r->level = level;
				r->csum = run_rec_csum(r);
			}
		} PM_TX_END(s, ret);
	}
	pthread_rwlock_unlock(&sp->run_lock);
	pthread_mutex_unlock(&s->commit_lock);
	if (!ret && listed)
		atomic_fetch_add(&sp->moves, 1);
	return ret ? ret : listed;
}

/* Load the merge's inputs v[0..m) and start an iterator on each (it[i]:
 * its buffer, to free); *level: one above the highest input's level (of
 * those loaded).  0 or -errno (an unreadable run, -ENOMEM, an iterator's). */
static int merge_load(struct store *s, struct srun **v, size_t m, struct rit *it, uint32_t *level)
{
	int ret = 0;
	for (size_t i = 0; i < m && !ret; i++) {
		if ((ret = srun_load(s, v[i])))
			break; /* an unreadable run is not merged (its rows read as EIO) */
		it[i].x = v[i];
		it[i].blk0 = EMB_NONE;
		if (posix_memalign((void **)&it[i].buf, BLK, CHUNK_BYTES + v[i]->r->blk_size))
			ret = -ENOMEM;
		else
			rit_next(s, &it[i]);
		if (!ret && it[i].err)
			ret = it[i].err;
		if (v[i]->r->level + 1 > *level)
			*level = v[i]->r->level + 1;
	}
	return ret;
}

/* Install the merge's output w (at level) in v[0]'s place, or retire the
 * inputs v[0..m) when nothing is left of them: if the inputs are still
 * listed, in order, with nothing between them that holds rows of theirs,
 * and table tid is still st of generation gen.  Takes commit_lock and
 * run_lock (shared).  0, -ESTALE (they are not) or -errno. */
static int merge_install(struct store *s, struct stable *st, uint32_t tid, uint64_t gen, struct run_build *w,
			 struct srun **v, size_t m, uint32_t level)
{
	struct spill *sp = s->sp;
	int ret;
	pthread_mutex_lock(&s->commit_lock);
	/* the inputs must still be listed, in order, with nothing between
	 * them that holds rows of theirs (fresh runs hold none of each
	 * other's) */
	int listed = 1, fresh = 1;
	for (size_t i = 0; i < m; i++)
		fresh &= v[i]->fresh;
	pthread_rwlock_rdlock(&sp->run_lock);
	struct srun *p = sp->runs[tid];
	while (p && p != v[0])
		p = p->next;
	for (size_t i = 0; i < m && listed;) {
		if (!p)
			listed = 0;
		else if (p == v[i])
			i++;
		else
			listed = runs_apart(p, v, m) || (fresh && p->fresh);
		if (p)
			p = p->next;
	}
	pthread_rwlock_unlock(&sp->run_lock);
	if (!listed || !run_table_same(s, st, tid, gen))
		ret = -ESTALE;
	else if (w->nrecs)
		ret = run_install(s, w, v[0]->r->seq, level, v, m);
	else
		ret = runs_retire_locked(s, v, m);
	if (!ret) {
		pthread_rwlock_wrlock(&st->lock);
		st->mod++;
		pthread_rwlock_unlock(&st->lock);
	}
	pthread_mutex_unlock(&s->commit_lock);
	return ret;
}

/* Merge runs v[0..m) (in the table's list order, newest first, any run
 * between them holding none of their row ranges) into one, in v[0]'s place.
 * bottom: v[m - 1] is the table's oldest run.  Versions no live snapshot
 * needs are dropped.  Takes commit_lock to install.  With plan, a dry run:
 * the inputs are read and *plan set to the segments the output would take
 * (0: nothing is left), nothing written. */
static int merge_runs(struct store *s, struct stable *st, struct srun **v, size_t m, int bottom, uint32_t keep,
		      uint64_t *plan)
{
	struct spill *sp = s->sp;
	uint32_t rs = st->t->row_size, tid = st->id;
	uint64_t gen = st->t->gen;
	uint64_t snaps[EMB_MAX_SNAPS];
	uint32_t ns = merge_snaps(s, snaps);
	struct rit *it = calloc(m, sizeof(*it));
	struct run_build w;
	int ret = it ? run_build_open(&w, s, st) : -ENOMEM;
	if (ret) {
		free(it);
		return ret;
	}
	w.id = plan ? 0 : run_next_id(sp);
	w.keep = keep; /* a merge may take the reserve */
	w.dry = plan != NULL;
	w.fresh = 1;
	for (size_t i = 0; i < m; i++)
		w.fresh &= v[i]->fresh;
	uint32_t level = 0;
	ret = merge_load(s, v, m, it, &level);
	struct mvers mv = { 0 };
	uint64_t in_bytes = 0;
	for (uint32_t k = 1; !ret; k++) {
		uint64_t row = EMB_NONE;
		for (size_t i = 0; i < m; i++)
			if (it[i].cur && rec_row(it[i].cur) < row)
				row = rec_row(it[i].cur);
		if (row == EMB_NONE)
			break;
		if (!plan)
			merge_evict_point(s, k, w.segs.n);
		ret = merge_gather(s, it, m, row, rs, &mv, &w, &in_bytes);
		if (ret)
			break;
		size_t nk = mvers_keep(&mv, rs, snaps, ns, bottom);
		if (nk)
			ret = run_build_row(&w, row, mv.batch, mv.data, (uint32_t)nk);
	}
	if (!ret)
		ret = run_build_finish(&w);
	if (ret == -ENODATA) { /* everything dropped: the inputs just go */
		ret = 0;
		w.nrecs = 0;
	}
	if (plan && !ret)
		*plan = w.nrecs ? w.dry_segs : 0;
	if (!ret && !plan)
		ret = merge_install(s, st, tid, gen, &w, v, m, level);
	if (!ret && !plan) {
		atomic_fetch_add(&sp->merges, 1);
		atomic_fetch_add(&sp->merge_in_bytes, in_bytes);
		atomic_fetch_add(&sp->merge_out_bytes, w.bytes);
	}
	run_build_free(&w, 1);
	for (size_t i = 0; i < m; i++)
		free(it[i].buf);
	free(it);
	mvers_free(&mv);
	return ret;
}

/* Merge SPARSE_FANOUT sparse runs of v[0..n) (table st's list) of about one
 * size (the largest at most 4x the smallest: a size-tiered merge, so that a
 * row is rewritten once per tier), the smallest such: the ranges of sparse
 * runs that lookups meet stay few, and the dense runs (a load's) are not
 * rewritten.  Fresh runs hold disjoint rows, so the inputs need not be next
 * to each other in the list.  1 merged, 0 none, -errno. */
static int merge_sparse(struct store *s, struct stable *st, struct srun **v, size_t n)
{
	struct srun *sv[EMB_RUNDIR_CAP];
	size_t k = 0;
	for (size_t i = 0; i < n && k < EMB_RUNDIR_CAP; i++)
		if (run_sparse(v[i]))
			sv[k++] = v[i];
	if (k < SPARSE_FANOUT)
		return 0;
	qsort(sv, k, sizeof(sv[0]), nrecs_cmp);
	for (size_t i = 0; i + SPARSE_FANOUT <= k; i++) {
		if (sv[i + SPARSE_FANOUT - 1]->r->nrecs > 4 * sv[i]->r->nrecs)
			continue;
		struct srun *set[SPARSE_FANOUT];
		size_t m = 0;
		int ok = 1;
		for (size_t j = 0; j < n && m < SPARSE_FANOUT; j++) { /* in list order */
			int in = 0;
			for (size_t q = i; q < i + SPARSE_FANOUT; q++)
				in |= v[j] == sv[q];
			if (in)
				set[m++] = v[j];
			else if (m) /* between inputs: fresh, or apart (merge_install) */
				ok &= v[j]->fresh || runs_apart(v[j], sv + i, SPARSE_FANOUT);
		}
		if (!ok)
			continue;
		int ret = merge_runs(s, st, set, m, 0, 1, NULL);
		return ret == -ESTALE ? 0 : ret ? ret : 1;
	}
	return 0;
}

/* The runs of all tables' lists, counted up to half the run directory:
 * past that, settled runs are merged too (may_settle). */
static size_t runs_listed(struct spill *sp)
{
	size_t all = 0;
	pthread_rwlock_rdlock(&sp->run_lock);
	for (uint32_t id = 0; id < EMB_NTABLES && all < EMB_RUNDIR_CAP / 2; id++)
		for (struct srun *x = sp->runs[id]; x; x = x->next)
			all++;
	pthread_rwlock_unlock(&sp->run_lock);
	return all;
}

/* May settled runs of a table of n runs stay as they are, all runs of the
 * directory listed (runs_listed)?  While the table and the run directory
 * (shared by all tables) have room for more. */
static int may_settle(size_t n, size_t all)
{
	return n <= RUNS_SETTLED_MAX && all < EMB_RUNDIR_CAP / 2;
}

/* Segments runs v[0..m) hold. */
static uint64_t segs_of(struct srun **v, size_t m)
{
	uint64_t n = 0;
	for (size_t i = 0; i < m; i++)
		n += v[i]->r->nsegs;
	return n;
}

/* Make the merge merge_fitting chose in table bid's runs: the whole list
 * (bi == n, bj == n - 1), run bi alone (bi == bj) or runs bi and bj.  1
 * merged, 0 not (the table or its list changed, or no room), -errno. */
static int merge_chosen(struct store *s, uint32_t bid, size_t bi, size_t bj)
{
	struct spill *sp = s->sp;
	/* only this thread merges, and runs come only at the head of a list:
	 * the list is as it was, or shorter (merge_runs checks) */
	struct stable *st = tab_get(s, bid);
	struct srun **v;
	size_t n;
	if (!st || runs_get(sp, bid, &v, &n))
		return 0;
	int ret = -ESTALE;
	if (bi == n && bj + 1 == n)
		ret = merge_runs(s, st, v, n, 1, 0, NULL);
	else if (bi < n && bi == bj)
		ret = merge_runs(s, st, v + bi, 1, bi + 1 == n, 0, NULL);
	else if (bi < bj && bj < n) {
		struct srun *pair[2] = { v[bi], v[bj] };
		ret = merge_runs(s, st, pair, 2, bj + 1 == n, 0, NULL);
	}
	runs_put(v, n);
	if (ret == -ESTALE || ret == -ENOSPC)
		return 0;
	return ret ? ret : 1;
}

/* The device has no room for the merge it wants, or for a run a writer
 * waits for: make the merge that gives back the most segments among
 * those whose output fits in the free segments (the reserve included:
 * evictions leave it, so a merge always has it; and the last one, which
 * such a merge gives back with more, or lets go of when it fails).  The
 * candidates, per table: its whole list (which drops every version newer
 * runs replaced and no snapshot needs); each run with the next one holding
 * rows of its range, if no run between them holds rows of either; each run
 * alone (the versions of dropped snapshots).  A dry run of each reads its
 * inputs and counts the segments its output takes, so that a merge whose
 * inputs are larger than the room but mostly dead still fits.  A merge must
 * give back at least two segments and an eighth of what it rewrites.  A
 * search that found nothing is not repeated until the runs or the free
 * count change.  1 merged, 0 none gives room back, -errno. */
static int merge_fitting(struct store *s)
{
	struct spill *sp = s->sp;
	uint32_t nfree = seg_free_count(sp);
	uint64_t gen = atomic_load(&sp->runs_gen);
	if (!nfree || (sp->fit_gen == gen + 1 && sp->fit_free == nfree))
		return 0;
	uint64_t room = nfree, best = 0;
	uint32_t bid = EMB_NTABLES;
	size_t bi = 0, bj = 0;
	for (uint32_t id = 0; id < EMB_NTABLES; id++) {
		struct srun **v;
		size_t n;
		struct stable *st = sp->runs[id] ? tab_get(s, id) : NULL;
		if (!st || runs_get(sp, id, &v, &n))
			continue;
		/* c == 0: the whole list; 1..n: run c - 1 and the next run j
		 * that holds rows of its range; n + 1..2n: run c - n - 1 alone */
		for (size_t c = 0; c <= 2 * n; c++) {
			size_t i = !c ? n : c <= n ? c - 1 : c - n - 1;
			struct srun *pair[2], **set = v;
			size_t m = n, j = i + 1;
			if (c > n) { /* run i alone: the versions no snapshot needs now */
				set = v + i;
				m = 1;
				j = i;
			} else if (i < n) {
				while (j < n && runs_apart(v[j], v + i, 1))
					j++;
				int ok = j < n;
				for (size_t k = i + 1; ok && k < j; k++)
					ok = runs_apart(v[k], v + j, 1);
				if (!ok)
					continue;
				pair[0] = v[i];
				pair[1] = v[j];
				set = pair;
				m = 2;
			} else {
				j = n - 1;
			}
			uint64_t in = segs_of(set, m), out = 0;
			if (in <= best)
				continue;
			int dr = merge_runs(s, st, set, m, j == n - 1, 0, &out);
			if (dr)
				continue;
			/* a merge that gives back less than an eighth of what it
			 * rewrites (a tail segment, say) is not worth its writes */
			if (out <= room && out + 2 <= in && (in - out) * 8 >= in && in - out > best) {
				best = in - out;
				bid = id;
				bi = i;
				bj = j;
			}
		}
		runs_put(v, n);
	}
	if (!best) {
		sp->fit_gen = gen + 1;
		sp->fit_free = nfree;
		return 0;
	}
	return merge_chosen(s, bid, bi, bj);
}

/* The table with the most runs, if it has two or more and they are not
 * settled (a load's, a sweep's parts: nothing to drop): its list in *v
 * (references), or NULL. */
static struct stable *whole_pick(struct store *s, size_t all, struct srun ***v, size_t *n)
{
	struct spill *sp = s->sp;
	uint32_t best = EMB_NTABLES;
	size_t most = 1;
	for (uint32_t id = 0; id < EMB_NTABLES; id++) {
		if (!sp->runs[id])
			continue;
		size_t k = (size_t)runs_count(s, id, NULL);
		if (k > most) {
			most = k;
			best = id;
		}
	}
	struct stable *st = best < EMB_NTABLES ? tab_get(s, best) : NULL;
	if (!st || runs_get(sp, best, v, n))
		return NULL;
	if (*n < 2 || (may_settle(*n, all) && runs_settled(*v, *n))) {
		runs_put(*v, *n);
		return NULL;
	}
	return st;
}

int runs_make_room(struct store *s)
{
	struct spill *sp = s->sp;
	int n = 0, ret = 0;
	/* a sweep under way holds what it rewrote in the inputs it has not
	 * passed yet: its steps, until one gives room back or it ends (the
	 * merge reserve leaves it the room; the writer asks again if that was
	 * not enough); else sweep the table with the most runs, if it is
	 * swept */
	if (!sp->sweep) {
		struct srun **v;
		size_t k;
		struct stable *st = whole_pick(s, runs_listed(sp), &v, &k);
		if (st && sweep_wants(sp, st))
			ret = sweep_start(s, st, v, k);
		else if (st)
			runs_put(v, k);
	}
	uint32_t free0 = seg_free_count(sp);
	while (sp->sweep && ret >= 0) {
		if ((ret = sweep_step(s)) > 0)
			n++;
		pthread_mutex_lock(&s->commit_lock);
		runs_reap_locked(s);
		pthread_mutex_unlock(&s->commit_lock);
		if (n && seg_free_count(sp) > free0)
			return n;
	}
	int swept = n;
	while (n - swept < 16 && (ret = merge_fitting(s)) > 0) {
		n++;
		pthread_mutex_lock(&s->commit_lock);
		runs_reap_locked(s);
		pthread_mutex_unlock(&s->commit_lock);
	}
	return ret < 0 && !n ? ret : n;
}

/* One merge of MERGE_FANOUT adjacent runs of one level (a sweep's parts
 * aside, and of a table being swept only runs newer than the sweep's), or a
 * move of such runs when they are settled, or a size-tiered merge of
 * sparse fresh runs; where that finds no room, the one that gives back the
 * most room (merge_fitting).  all: runs_listed.  1 merged, 0 none needed,
 * or -errno. */
static int merge_levels(struct store *s, size_t all)
{
	struct spill *sp = s->sp;
	for (uint32_t id = 0; id < EMB_NTABLES; id++) {
		if (!sp->runs[id])
			continue;
		struct stable *st = tab_get(s, id);
		struct srun **v;
		size_t n;
		if (!st || runs_get(sp, id, &v, &n))
			continue;
		size_t nl = sweep_newer(sp, id, v, n);
		/* a swept table's runs outside parts wait for its next sweep (a
		 * lookup asks only a row's newest run), unless they are many:
		 * merging them level by level rewrote each row once per level */
		size_t upper = 0;
		for (size_t i = 0; i < nl; i++)
			upper += v[i]->r->level < RUN_PART_LEVEL;
		if (atomic_load(&st->part_live) && upper <= SWEEP_UPPER_MAX)
			nl = 0;
		size_t at = nl, len = 0;
		for (size_t i = 0; i < nl && at == nl; i++) {
			size_t j = i;
			while (j < nl && v[j]->r->level == v[i]->r->level)
				j++;
			if (j - i >= MERGE_FANOUT && v[i]->r->level < RUN_PART_LEVEL) {
				at = i;
				len = j - i;
			}
			i = j - 1;
		}
		int ret = 0, settle = may_settle(n, all);
		/* settled runs move down a level as they are, while there is
		 * room for more runs; sparse ones merge among themselves */
		if (settle && (ret = merge_sparse(s, st, v, nl)) != 0) {
			runs_put(v, n);
			return ret == -ENOSPC ? merge_fitting(s) : ret;
		}
		if (at < nl && settle && runs_settled(v + at, len))
			ret = runs_relevel(s, id, v + at, len, v[at]->r->level + 1);
		else if (at < nl)
			ret = merge_runs(s, st, v + at, len, at + len == n, 1, NULL);
		runs_put(v, n);
		if (ret == -ENOSPC)
			return merge_fitting(s);
		if (at < nl)
			return ret ? ret : 1;
	}
	return 0;
}

int runs_sweep_some(struct store *s)
{
	if (!s->sp->sweep)
		return 0;
	int ret = sweep_step(s);
	return ret == -ENOSPC ? merge_fitting(s) : ret;
}

/* All runs of the table with the most (which drops every copy newer runs
 * replaced), by a sweep when they are large (runsweep.c: its first step
 * now), else in one merge while the output finds room: where the device is
 * half full (half), or, for a table swept before, where its records outside
 * parts make half of those in parts, or an eighth when the device is three
 * quarters full (full: a table that takes a third of the device fills half
 * of it with its parts and little else, and a sweep that would give back
 * little is not made).  1 merged, 2 a sweep's step, 0 none needed,
 * -errno. */
static int merge_whole(struct store *s, size_t all, int half, int full)
{
	struct spill *sp = s->sp;
	struct srun **v;
	size_t n;
	struct stable *st = whole_pick(s, all, &v, &n);
	if (!st)
		return 0;
	int sweep = sweep_wants(sp, st);
	uint64_t parts = atomic_load(&st->part_live), live = atomic_load(&st->run_live);
	uint64_t up = live > parts ? live - parts : 0;
	if (sweep && parts ? !(2 * up >= parts || (full && 8 * up >= parts)) : !half) {
		runs_put(v, n);
		return 0;
	}
	if (sweep) {
		int ret = sweep_start(s, st, v, n); /* it takes the references */
		return ret ? ret : runs_sweep_some(s);
	}
	int ret = merge_runs(s, st, v, n, 1, 1, NULL);
	runs_put(v, n);
	if (ret == -ENOSPC)
		return merge_fitting(s); /* no room for it: smaller ones */
	return ret ? ret : 1;
}

/* One merge the runs need, if any: while a sweep is under way, the levels'
 * (merge_levels; the sweep's steps are runs_sweep_some's); else all runs of
 * the table with the most where they need it (merge_whole: a sweep starts
 * with its first step); else the levels'.  1 merged, 2 a sweep's step (the
 * round's last), 0 none needed, or -errno. */
int runs_merge_some(struct store *s)
{
	struct spill *sp = s->sp;
	size_t all = runs_listed(sp);
	int ret;
	if (sp->sweep)
		return merge_levels(s, all);
	uint32_t nfree = seg_free_count(sp);
	int half = sp->whole_always || nfree * 2 < sp->pm->nsegs;
	if ((ret = merge_whole(s, all, half, sp->whole_always || nfree * 4 < sp->pm->nsegs)) != 0)
		return ret;
	return merge_levels(s, all);
}

/* ---- truncation ---------------------------------------------------------- */

int runs_trim(struct store *s, struct stable *st, uint64_t from)
{
	struct spill *sp = s->sp;
	struct srun **v;
	size_t n;
	if (!sp || (!sp->runs[st->id] && !(sp->ev_n && sp->ev_id == st->id)))
		return 0;
	int ret = runs_get(sp, st->id, &v, &n);
	if (ret)
		return ret;
	int held = snapset_refs(s, st) > 0;
	struct u64vec rows = { 0 };
	/* rows an eviction has in flight (their run comes before this one) */
	pthread_rwlock_rdlock(&sp->run_lock);
	for (size_t i = 0; sp->ev_id == st->id && i < sp->ev_n && !ret; i++)
		if (sp->ev_rows[i] >= from)
			ret = u64vec_push(&rows, sp->ev_rows[i]);
	pthread_rwlock_unlock(&sp->run_lock);
	/* runs wholly past the end go, unless a snapshot holds the table */
	struct srun *gone[64];
	size_t ng = 0;
	for (size_t i = 0; i < n && !held && ng < 64; i++)
		if (v[i]->r->min_row >= from)
			gone[ng++] = v[i];
	if (ng && !ret)
		ret = runs_retire_locked(s, gone, ng);
	/* rows past the end in the others get tombstones, in a run of their own */
	for (size_t i = 0; i < n && !ret; i++) {
		struct srun *x = v[i];
		int went = 0;
		for (size_t k = 0; k < ng; k++)
			went |= gone[k] == x;
		if (went || x->r->max_row < from)
			continue;
		if ((ret = srun_load(s, x)))
			break;
		struct rit it;
		for (ret = rit_open(s, x, from, &it); it.cur && !ret; rit_next(s, &it)) {
			uint64_t r = rec_row(it.cur);
			if (!rows.n || rows.v[rows.n - 1] != r)
				ret = u64vec_push(&rows, r);
		}
		if (!ret && it.err)
			ret = it.err;
		free(it.buf);
	}
	runs_put(v, n);
	if (!ret && rows.n) {
		u64_sort(rows.v, rows.n);
		struct run_build w;
		ret = run_build_open(&w, s, st);
		if (!ret) {
			w.id = run_next_id(sp);
			uint64_t tb = ld64(&s->sb->batch) | EMB_RREC_TOMB;
			const char *none = NULL;
			for (size_t i = 0; i < rows.n && !ret; i++)
				if (!i || rows.v[i] != rows.v[i - 1])
					ret = run_build_row(&w, rows.v[i], &tb, &none, 1);
			if (!ret)
				ret = run_build_finish(&w);
			if (!ret)
				ret = run_install(s, &w, w.id, 0, NULL, 0);
			run_build_free(&w, 1);
		}
	}
	free(rows.v);
	if (!ret) {
		pthread_rwlock_wrlock(&st->lock);
		st->mod++;
		pthread_rwlock_unlock(&st->lock);
		ret = runs_reap_locked(s);
	}
	return ret;
}
