/*
 * Sweeps: a merge of all of a table's runs made one row range at a time,
 * so that neither a merge nor the room it needs is the size of the table.
 *
 * A sweep takes the table's list as it is when it starts (its inputs, V,
 * newest first).  Each step (one per mover round, evictions between them)
 * picks the next row range [cur, hi) whose records make about a part
 * (part_bytes), merges V's records of that range into one new run, a
 * *part* (level RUN_PART_LEVEL), and retires the inputs that hold no row
 * at or past hi.  The part goes into the list at V[0]'s order (runs_list_
 * insert puts it before V[0]): above every input that is still listed,
 * below every run that came after the sweep began.  So a lookup in
 * [cur, hi) meets the part before any input left behind, and the part holds
 * what the merged inputs held (the newest version of each row and the
 * newest each live snapshot sees); an input left below it only repeats
 * versions the part has or supersedes.  A part may drop a row's last
 * tombstone only when every input that held the row retires in that step:
 * otherwise an input left below the part would show an older version.
 *
 * What is left at the end: parts with disjoint ranges, each about
 * part_bytes, and nothing of V.  The next sweep's steps end where old parts
 * end (hi snaps to an input's end when that keeps a step near a part), so
 * a step retires the old parts it rewrote at once: the room a sweep needs
 * beyond what it frees is one part plus V's runs that span every range
 * (evictions' and their merges').  A sweep whose list changed under it
 * (a merge, a truncation or a drop took one of its inputs, or the table
 * went) ends; what it installed is a valid list, as after a crash.
 *
 * Crash safety is a merge's: a part is durable before the transaction that
 * lists it and retires the inputs it replaces.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "run_int.h"

struct rsweep {
	uint32_t table;
	uint64_t gen;
	struct srun **v;     /* its inputs, newest first, a reference each until retired */
	size_t n;
	uint8_t *gone;       /* retired by a step (its reference put: v[i] is not read) */
	uint64_t seq;        /* v[0]'s order: the parts' */
	uint64_t cur;        /* rows below it are done */
};

/* Records of rs-byte rows a part holds at most: its blocks, their fences
 * and its filter, and a few list and meta blocks, in part_bytes. */
static uint64_t part_recs(const struct spill *sp, uint32_t rs)
{
	uint64_t bs = run_blk_size(rs), per = run_blk_recs(rs);
	uint64_t room = sweep_part_bytes(sp) - 4 * BLK;
	/* per record: bs / per of a block, 8 / per of a fence, 12 bits of filter */
	return room * 8 * per / (8 * bs + 64 + 12 * per);
}

void sweep_end(struct spill *sp)
{
	struct rsweep *w = sp->sweep;
	if (!w)
		return;
	for (size_t i = 0; i < w->n; i++)
		if (!w->gone[i])
			srun_put(w->v[i]);
	free(w->v);
	free(w->gone);
	free(w);
	sp->sweep = NULL;
	atomic_store(&sp->sweep_on, 0);
}

int sweep_start(struct store *s, struct stable *st, struct srun **v, size_t n)
{
	struct spill *sp = s->sp;
	struct rsweep *w = calloc(1, sizeof(*w));
	uint8_t *gone = w ? calloc(n, 1) : NULL;
	if (!gone) {
		free(w);
		runs_put(v, n);
		return -ENOMEM;
	}
	*w = (struct rsweep){ .table = st->id, .gen = st->t->gen, .v = v, .n = n, .gone = gone, .seq = v[0]->r->seq };
	sp->sweep = w;
	atomic_store(&sp->sweep_on, 1);
	return 0;
}

size_t sweep_newer(const struct spill *sp, uint32_t tid, struct srun *const *v, size_t n)
{
	const struct rsweep *w = sp->sweep;
	if (!w || w->table != tid)
		return n;
	size_t k = 0;
	while (k < n && v[k]->r->seq > w->seq)
		k++;
	return k;
}

/* Records of run x (loaded) with rows in [a, b), about: its blocks whose
 * first row is in the range. */
static uint64_t recs_in(const struct srun *x, uint64_t a, uint64_t b)
{
	uint64_t nb = x->r->nblocks;
	if (b <= x->r->min_row || a > x->r->max_row)
		return 0;
	size_t i = a <= x->r->min_row ? 0 : u64_lower_bound(x->fence, nb, a);
	size_t j = b > x->r->max_row ? nb : u64_lower_bound(x->fence, nb, b);
	return (uint64_t)(j > i ? j - i : 0) * x->per_blk;
}

/* The rows [a, b) of the inputs left, about: at least the records of the
 * input with the most there (a table's rows are mostly in its oldest runs;
 * newer ones repeat them). */
static uint64_t rows_in(const struct rsweep *w, uint64_t a, uint64_t b)
{
	uint64_t t = 0;
	for (size_t i = 0; i < w->n; i++)
		if (!w->gone[i]) {
			uint64_t k = recs_in(w->v[i], a, b);
			t = k > t ? k : t;
		}
	return t;
}

/* The end of the step's planned range: rows [cur, hi) that make twice
 * `want` (rows_in), the records a part holds, or the first end of an input
 * (an old part, which the step then retires) whose range makes between
 * half of want and want; EMB_NONE: what is left makes a part.  The step
 * ends sooner when its part is full (sweep_merge). */
static uint64_t sweep_bound(const struct rsweep *w, uint64_t want)
{
	uint64_t top = w->cur;
	for (size_t i = 0; i < w->n; i++)
		if (!w->gone[i] && w->v[i]->r->max_row + 1 > top)
			top = w->v[i]->r->max_row + 1;
	if (rows_in(w, w->cur, top) <= want)
		return EMB_NONE;
	uint64_t aim = 2 * want;
	uint64_t lo = w->cur + 1, hi = top; /* the least h with rows_in(cur, h) >= aim */
	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;
		if (rows_in(w, w->cur, mid) >= aim)
			hi = mid;
		else
			lo = mid + 1;
	}
	/* the first input (an old part) to end where its range holds at
	 * least half a part and at most a part: the step retires it */
	uint64_t end = lo;
	for (size_t i = 0; i < w->n; i++) {
		if (w->gone[i])
			continue;
		uint64_t e = w->v[i]->r->max_row + 1, k;
		if (e > w->cur && e < end && (k = rows_in(w, w->cur, e)) >= want / 2 && k <= want)
			end = e;
	}
	return end;
}

/* Are the sweep's inputs not yet retired all still listed, and its table
 * still there?  commit_lock held. */
static int sweep_listed(struct store *s, struct rsweep *w, struct stable *st)
{
	struct spill *sp = s->sp;
	if (!run_table_same(s, st, w->table, w->gen))
		return 0;
	int ok = 1;
	pthread_rwlock_rdlock(&sp->run_lock);
	for (size_t i = 0; i < w->n && ok; i++) {
		if (w->gone[i])
			continue;
		struct srun *p = sp->runs[w->table];
		while (p && p != w->v[i])
			p = p->next;
		ok = p != NULL;
	}
	pthread_rwlock_unlock(&sp->run_lock);
	return ok;
}

/* Does input i of sw, not yet retired, hold no row at or past hi? */
static int sweep_retires(const struct rsweep *sw, size_t i, uint64_t hi)
{
	return !sw->gone[i] && (hi == EMB_NONE || sw->v[i]->r->max_row < hi);
}

/* Install the step's part w (if it holds anything) and retire the inputs
 * that end before hi.  Takes commit_lock.  0, -ESTALE (the list changed)
 * or -errno. */
static int sweep_install(struct store *s, struct rsweep *sw, struct stable *st, struct run_build *w, uint64_t hi)
{
	struct srun **old = malloc(sw->n * sizeof(*old));
	size_t nold = 0;
	int ret = old ? 0 : -ENOMEM;
	for (size_t i = 0; i < sw->n && !ret; i++)
		if (sweep_retires(sw, i, hi))
			old[nold++] = sw->v[i];
	if (!ret) {
		pthread_mutex_lock(&s->commit_lock);
		if (!sweep_listed(s, sw, st))
			ret = -ESTALE;
		else if (w->nrecs)
			ret = run_install(s, w, sw->seq, RUN_PART_LEVEL, old, nold);
		else if (nold)
			ret = runs_retire_locked(s, old, nold);
		if (!ret) {
			for (size_t i = 0; i < sw->n; i++) /* retired: let the reaper free them */
				if (sweep_retires(sw, i, hi)) {
					sw->gone[i] = 1;
					srun_put(sw->v[i]);
				}
			pthread_rwlock_wrlock(&st->lock);
			st->mod++;
			pthread_rwlock_unlock(&st->lock);
		}
		pthread_mutex_unlock(&s->commit_lock);
	}
	free(old);
	return ret;
}

/* Would a row of nv records take part w past its segments (its blocks,
 * fences, filter and lists)? */
static int part_full(const struct run_build *w, size_t nv, uint64_t segs)
{
	uint64_t bb, cap, blocks = w->fences.n + (nv + w->per_blk - 1) / w->per_blk;
	size_t ab;
	return run_build_segs(w, blocks, w->rows.n + 1, &bb, &ab, &cap) > segs;
}

/* Merge the inputs' records of rows [cur, *hi) into w, their iterators
 * it[] (opened on the inputs that meet the range), while the part has room
 * in its segments: where it is full, *hi comes down to the next row (not
 * below a row whose last tombstone went: the inputs that held it must
 * retire).  0 or -errno. */
static int sweep_merge(struct store *s, struct rsweep *sw, struct stable *st, struct rit *it, uint64_t *hi,
		       struct run_build *w, uint64_t *in_bytes)
{
	uint64_t segs = sweep_part_bytes(s->sp) / s->sp->pm->seg_size;
	uint32_t rs = st->t->row_size;
	uint64_t snaps[EMB_MAX_SNAPS];
	uint32_t ns = merge_snaps(s, snaps);
	struct mvers mv = { 0 };
	uint64_t need = 0; /* the step must pass this row: a tombstone's inputs end before it */
	int ret = 0;
	for (uint64_t k = 1; !ret; k++) {
		merge_evict_point(s, k, w->segs.n); /* its run goes above the part */
		uint64_t row = EMB_NONE;
		for (size_t i = 0; i < sw->n; i++)
			if (it[i].cur && rec_row(it[i].cur) < row)
				row = rec_row(it[i].cur);
		if (row == EMB_NONE || row >= *hi)
			break;
		/* its last tombstone may go only if every input holding it
		 * retires with the step (nothing older is left below the part) */
		int bottom = 1;
		uint64_t end = 0;
		for (size_t i = 0; i < sw->n; i++)
			if (it[i].cur && rec_row(it[i].cur) == row) {
				uint64_t e = sw->v[i]->r->max_row;
				bottom &= *hi == EMB_NONE || e < *hi;
				end = e + 1 > end ? e + 1 : end;
			}
		ret = merge_gather(s, it, sw->n, row, rs, &mv, w, in_bytes);
		if (ret)
			break;
		int tomb = 0;
		for (size_t j = 0; j < mv.n; j++)
			tomb |= !!(mv.batch[j] & EMB_RREC_TOMB);
		size_t nk = mvers_keep(&mv, rs, snaps, ns, bottom);
		if (nk && w->nrecs && row >= need && part_full(w, nk, segs)) {
			*hi = row; /* the next step starts at it */
			break;
		}
		if (tomb && bottom)
			need = end > need ? end : need;
		if (nk)
			ret = run_build_row(w, row, mv.batch, mv.data, (uint32_t)nk);
	}
	mvers_free(&mv);
	return ret;
}

int sweep_step(struct store *s)
{
	struct spill *sp = s->sp;
	struct rsweep *sw = sp->sweep;
	if (!sw)
		return 0;
	struct stable *st = tab_get(s, sw->table);
	if (!st || st->t->gen != sw->gen) {
		sweep_end(sp);
		return 0;
	}
	int ret = 0;
	for (size_t i = 0; i < sw->n && !ret; i++)
		if (!sw->gone[i])
			ret = srun_load(s, sw->v[i]);
	if (ret) { /* an unreadable input is not merged (its rows read as EIO) */
		sweep_end(sp);
		return ret == -EIO ? 0 : ret;
	}
	uint64_t want = part_recs(sp, st->t->row_size);
	uint64_t hi = sweep_bound(sw, want > 8 ? want : 8);
	struct rit *it = calloc(sw->n, sizeof(*it));
	struct run_build w;
	ret = it ? run_build_open(&w, s, st) : -ENOMEM;
	if (ret) {
		free(it);
		sweep_end(sp);
		return ret;
	}
	w.id = run_next_id(sp);
	w.keep = 1; /* a sweep may take the merge reserve */
	uint64_t in_bytes = 0;
	for (size_t i = 0; i < sw->n && !ret; i++) {
		const struct emb_run *r = sw->gone[i] ? NULL : sw->v[i]->r;
		if (r && r->max_row >= sw->cur && (hi == EMB_NONE || r->min_row < hi))
			ret = rit_open(s, sw->v[i], sw->cur, &it[i]);
	}
	if (!ret)
		ret = sweep_merge(s, sw, st, it, &hi, &w, &in_bytes);
	if (!ret)
		ret = run_build_finish(&w);
	if (ret == -ENODATA) { /* nothing is left of the range */
		ret = 0;
		w.nrecs = 0;
	}
	if (!ret)
		ret = sweep_install(s, sw, st, &w, hi);
	if (!ret) {
		atomic_fetch_add(&sp->merges, 1);
		atomic_fetch_add(&sp->merge_in_bytes, in_bytes);
		atomic_fetch_add(&sp->merge_out_bytes, w.bytes);
		atomic_fetch_add(&sp->sweep_steps, 1);
		sw->cur = hi;
	}
	run_build_free(&w, 1);
	for (size_t i = 0; i < sw->n; i++)
		free(it[i].buf);
	free(it);
	if (ret || hi == EMB_NONE)
		sweep_end(sp);
	if (ret == -ESTALE || ret == -EIO)
		return 0;
	return ret ? ret : 2;
}
