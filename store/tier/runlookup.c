/*
 * Lookups in a table's sorted runs (runs_lookup, runs_row_read): a
 * request's undecided rows planned over every run at once, their blocks
 * read in one submission (through read-ahead windows for a sequential
 * reader: runahead.c), and each row decided newest run first.  See run.c
 * for the runs themselves.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run_int.h"


/*
 * Lookups.  The rows of a request the pool did not decide (sorted, each
 * distinct row once) are looked up in all of the table's runs together:
 *
 *  plan   per run, the rows inside its range.  A run whose blocks over
 *         them are no more than the rows (a range read, a dense gather) is
 *         walked: one pass over its fences gives each row's blocks, and no
 *         Bloom filter is asked.  Otherwise (a sparse gather) each row is
 *         checked against the filter, and only the rows it may hold get
 *         their blocks by a fence search.
 *  read   every run's blocks, adjacent ones in one read, all in one
 *         submission.
 *  merge  newest run first: a row still pending is decided by the first of
 *         its versions with batch <= the view's (a tombstone: a hole).
 *
 * Rounds.  A live read of scattered rows (no run walked) asks each row of
 * only the newest run whose filter may hold it: that run decides it, but
 * for a filter's false positive.  A row such a run did not decide asks the
 * next run in another round (plan, read, merge again).  A row written
 * again and again is in as many runs until a merge or a sweep passes it;
 * in one submission per request, each of those runs cost a block read.
 *
 * So a run's blocks may be read for rows a newer run decides (rows written
 * again since): the price of one submission per request instead of one per
 * run.  A damaged block is EIO for the rows that may be in it (those its
 * Bloom filter does not rule out), never for others.
 */


static int br_push(struct lreq *L, uint64_t blk)
{
	if (arr_room(&L->br, L->nbr, &L->cbr, sizeof(*L->br), 256))
		return -ENOMEM;
	L->br[L->nbr++] = (struct bref){ .blk = blk };
	return 0;
}

/* Blocks [a, b] into plan p's list (ascending: only those past its last). */
static int want(struct lreq *L, struct plan *p, uint64_t a, uint64_t b)
{
	if (p->nb && a <= L->br[L->nbr - 1].blk)
		a = L->br[L->nbr - 1].blk + 1;
	for (uint64_t k = a; k <= b; k++) {
		int ret = br_push(L, k);
		if (ret)
			return ret;
		p->nb++;
	}
	return 0;
}

/* The first index in [lo, end) of sorted v whose value is >= x (end if
 * none), galloping from lo: cheap when it is near, as it is when rows and
 * records are walked together. */
static inline size_t gallop(const uint64_t *v, size_t lo, size_t end, uint64_t x)
{
	if (lo >= end || v[lo] >= x)
		return lo;
	size_t step = 1, hi = lo + 1; /* v[lo] < x */
	while (hi < end && v[hi] < x) {
		lo = hi;
		step <<= 1;
		hi = lo + step;
	}
	if (hi > end)
		hi = end;
	return lo + 1 + u64_lower_bound(v + lo + 1, hi - lo - 1, x);
}

/* The rows block k of run x holds, if any: [*lo, *hi), or the one row *lo
 * when the next block starts with it too (its versions fill blocks). */
static void blk_rows(const struct srun *x, uint64_t k, uint64_t *lo, uint64_t *hi)
{
	*lo = x->fence[k];
	*hi = k + 1 < x->r->nblocks ? x->fence[k + 1] : x->r->max_row + 1;
	if (*hi <= *lo)
		*hi = *lo + 1;
}

/* Plan p's blocks come from windows, if its walk follows the last one (a
 * sequential reader).  Blocks no window can take stay direct. */
static void plan_windows(struct lreq *L, struct plan *p)
{
	struct srun *x = p->x;
	if (!p->nb)
		return;
	uint64_t per = ra_win_blocks(x), a = L->br[p->b0].blk, last = L->br[p->b0 + p->nb - 1].blk;
	/* ra_next: the furthest a sequential reader's walks reached.  Its
	 * requests may be served out of order (the kernel sends a few READs
	 * at once), so a walk counts as sequential when it starts within a
	 * window and two of its own lengths of ra_next, either side; one that
	 * does not starts a new stream there. */
	uint64_t next = atomic_load_explicit(&x->ra_next, memory_order_relaxed), tol = per + 2 * (last + 1 - a);
	int seq = next && a + tol >= next && a <= next + tol;
	if (!seq) {
		atomic_store_explicit(&x->ra_next, last + 1, memory_order_relaxed);
		return; /* a random range read, or the first of a stream */
	}
	while (next < last + 1 &&
	       !atomic_compare_exchange_weak_explicit(&x->ra_next, &next, last + 1, memory_order_relaxed,
						      memory_order_relaxed))
		;
	struct rawin *w = NULL;
	uint64_t wext = UINT64_MAX;
	for (size_t k = p->b0; k < p->b0 + p->nb; k++) {
		uint64_t ext = L->br[k].blk / per;
		if (ext != wext) {
			wext = ext;
			w = ra_win_get(L, x, ext);
		}
		L->br[k].w = w;
	}
	/* four times the blocks this walk took, past what the last window
	 * holds (at least the next window): the next requests' windows are
	 * read while this one and the one after it are served */
	uint64_t want = 4 * (last + 1 - a), left = per - 1 - last % per;
	ra_win_ahead(L->s->sp, x, last / per + 1, want > left ? want - left : 1);
}

/* Plan p's rows, [u0, u1): 0 when it has none to look up (or its arrays
 * are unreadable). */
static int plan_range(const struct lreq *L, struct plan *p)
{
	const struct emb_run *r = p->x->r;
	p->u0 = u64_lower_bound(L->urow, L->nu, r->min_row);
	p->u1 = u64_lower_bound(L->urow, L->nu, r->max_row + 1);
	return !p->lr && p->u0 < p->u1;
}

/* Is plan p (its range planned) walked: its blocks over its rows no more
 * than the rows?  Its first row's blocks [*a, *b] and the last row's first
 * block *last, with *j the fence walk's place, as it finds them. */
static int plan_walks(const struct lreq *L, const struct plan *p, uint64_t *j, uint64_t *a, uint64_t *b,
		      uint64_t *last)
{
	const struct srun *x = p->x;
	*j = run_fence_floor(x, L->urow[p->u0]);
	run_fence_walk(x, L->urow[p->u0], j, a, b);
	*last = run_fence_floor(x, L->urow[p->u1 - 1]);
	return *last - *a + 1 <= p->u1 - p->u0;
}

/* Plan run p (plan index pi): which of its blocks the rows need. */
static int plan_run(struct lreq *L, struct plan *p, size_t pi)
{
	const struct srun *x = p->x;
	p->b0 = L->nbr;
	p->l0 = L->nlk;
	if (!plan_range(L, p))
		return 0;
	uint64_t j, a, b, last;
	p->walk = plan_walks(L, p, &j, &a, &b, &last) && !L->from;
	int ret = 0;
	if (p->walk) { /* each block of the span that holds a row asked for */
		size_t u = p->u0;
		for (uint64_t k = a; k <= last && u < p->u1 && !ret; k++) {
			uint64_t lo, hi;
			blk_rows(x, k, &lo, &hi);
			u = gallop(L->urow, u, p->u1, lo);
			if (u < p->u1 && L->urow[u] < hi)
				ret = want(L, p, k, k);
		}
		if (!ret)
			plan_windows(L, p);
		return ret;
	}
	for (size_t u = p->u0; u < p->u1 && !ret; u++) {
		uint64_t row = L->urow[u];
		if (L->from && (L->q[L->uq[u]].state != RQ_PENDING || L->claim[u] == L->round || L->from[u] > pi))
			continue; /* decided, asked of a newer run this round, or of this one before */
		if (!run_bloom_row(x, row))
			continue;
		if (L->from) {
			L->claim[u] = L->round;
			L->from[u] = (uint32_t)pi + 1;
		}
		j = run_fence_floor(x, row);
		run_fence_walk(x, row, &j, &a, &b);
		if (arr_room(&L->lk, L->nlk, &L->clk, sizeof(*L->lk), 256))
			return -ENOMEM;
		L->lk[L->nlk++] = (struct lk){ u, a, b };
		p->nl++;
		ret = want(L, p, a, b);
	}
	return ret;
}

/* What reading L's planned blocks takes: *total_out bytes of the blocks
 * read directly, and at most *nreads_out reads (one per direct block, and
 * per block of each window L loads). */
static void planned_size(const struct lreq *L, size_t *total_out, size_t *nreads_out)
{
	size_t total = 0, nreads = 0;
	for (size_t i = 0; i < L->np; i++)
		for (size_t k = L->p[i].b0; k < L->p[i].b0 + L->p[i].nb; k++)
			if (!L->br[k].w) {
				total += L->p[i].x->r->blk_size;
				nreads++;
			}
	for (size_t i = 0; i < L->nwin; i++)
		if (L->mine[i])
			nreads += L->win[i]->nblk;
	*total_out = total;
	*nreads_out = nreads;
}

/* The windows L loads are read (or failed: ret): say so to their waiters,
 * then wait for those that others load.  ret, or -EIO when one of those
 * failed.  Takes ra_mu. */
static int wins_wait(struct lreq *L, int ret)
{
	struct spill *sp = L->s->sp;
	pthread_mutex_lock(&sp->ra_mu);
	for (size_t j = 0; j < L->nwin; j++)
		if (L->mine[j])
			L->win[j]->state = ret ? RA_FAILED : RA_READY;
	pthread_cond_broadcast(&sp->ra_cv);
	for (size_t j = 0; j < L->nwin && !ret; j++) {
		while (L->win[j]->state == RA_LOADING)
			pthread_cond_wait(&sp->ra_cv, &sp->ra_mu);
		if (L->win[j]->state == RA_FAILED)
			ret = -EIO;
	}
	pthread_mutex_unlock(&sp->ra_mu);
	return ret;
}

/* Point each planned block that a window holds at its bytes there, with
 * the read-ahead thread's verdict on it.  Every window of L is read. */
static void wins_point(struct lreq *L)
{
	for (size_t i = 0; i < L->np; i++) {
		const struct plan *p = &L->p[i];
		uint64_t per = ra_win_blocks(p->x);
		for (size_t k = p->b0; k < p->b0 + p->nb; k++) {
			struct rawin *w = L->br[k].w;
			if (w) {
				uint64_t i = L->br[k].blk - w->ext * per;
				L->br[k].p = w->buf + i * (size_t)p->x->r->blk_size;
				L->br[k].ok = w->ok[i] > 0 ? 1 : w->ok[i] < 0 ? -EIO : 0; /* the thread's check */
			}
		}
	}
}

/* The buffer a thread reads a request's blocks into, kept for its next
 * request (up to RBUF_KEEP bytes; freed when the thread ends).  A request
 * of a training step reads thousands of blocks: tens of MiB, which malloc
 * maps afresh each time (past glibc's largest mmap threshold), and the
 * first touch of each fresh page after the device filled it was 30% of
 * the daemon's time in a spilled training run. */
#define RBUF_KEEP (64u << 20)
static __thread char *rbuf_kept;
static __thread size_t rbuf_cap;
static pthread_key_t rbuf_key;
static pthread_once_t rbuf_once = PTHREAD_ONCE_INIT;

static void rbuf_key_make(void)
{
	pthread_key_create(&rbuf_key, free);
}

/* A buffer of total bytes (BLK-aligned), or NULL. */
static char *rbuf_get(size_t total)
{
	char *b = NULL;
	if (total > RBUF_KEEP)
		return posix_memalign((void **)&b, BLK, total) ? NULL : b;
	if (rbuf_cap < total) {
		size_t cap = 1u << 20;
		while (cap < total)
			cap *= 2;
		pthread_once(&rbuf_once, rbuf_key_make);
		free(rbuf_kept);
		rbuf_kept = NULL;
		rbuf_cap = 0;
		pthread_setspecific(rbuf_key, NULL);
		if (posix_memalign((void **)&b, BLK, cap))
			return NULL;
		rbuf_kept = b;
		rbuf_cap = cap;
		pthread_setspecific(rbuf_key, b);
	}
	return rbuf_kept;
}

/* Done with a buffer of rbuf_get. */
static void rbuf_put(char *b)
{
	if (b != rbuf_kept)
		free(b);
}

/* Read every planned block: those of windows L loads into them, the others
 * into one buffer (adjacent blocks of a run in one read), all in one
 * submission; then wait for the windows others load.  0 or -errno.  *bufp:
 * the buffer, to free. */
static int read_planned(struct lreq *L, char **bufp)
{
	struct spill *sp = L->s->sp;
	size_t total, nreads;
	uint64_t direct = 0, loaded = 0, fromwin = 0;
	planned_size(L, &total, &nreads);
	*bufp = NULL;
	char *buf = NULL;
	struct sreq *q = malloc((nreads ? nreads : 1) * sizeof(*q));
	if (!q || (total && !(buf = rbuf_get(total)))) {
		free(q);
		return -ENOMEM;
	}
	size_t nq = 0, off = 0;
	for (size_t i = 0; i < L->np; i++) {
		const struct plan *p = &L->p[i];
		uint32_t bs = p->x->r->blk_size;
		int prev = 0; /* the last read is this run's previous block, direct */
		for (size_t k = p->b0; k < p->b0 + p->nb; k++) {
			if (L->br[k].w) {
				prev = 0;
				fromwin++;
				continue;
			}
			uint64_t loc = run_blk_loc(sp, p->x, L->br[k].blk);
			L->br[k].p = buf + off;
			direct++;
			if (prev && q[nq - 1].blk + q[nq - 1].span == loc && q[nq - 1].span + bs <= CHUNK_BYTES) {
				q[nq - 1].span += bs;
			} else {
				q[nq++] = (struct sreq){ .blk = loc, .span = bs, .boff = off };
				prev = 1;
			}
			off += bs;
		}
	}
	/* the windows L loads: of which run each is, from its blocks */
	for (size_t i = 0; i < L->np; i++)
		for (size_t k = L->p[i].b0; k < L->p[i].b0 + L->p[i].nb; k++) {
			struct rawin *w = L->br[k].w;
			for (size_t j = 0; w && j < L->nwin; j++)
				if (L->win[j] == w && L->mine[j] == 1) {
					ra_win_reads(sp, L->p[i].x, w, q, &nq);
					L->mine[j] = 2; /* its reads are in q */
					loaded += w->nblk;
				}
		}
	int ret = nq ? device_read_raw(sp, q, nq, buf) : 0;
	free(q);
	ret = wins_wait(L, ret);
	if (ret) {
		rbuf_put(buf);
		return ret;
	}
	wins_point(L);
	atomic_fetch_add_explicit(&sp->run_blocks, direct + loaded, memory_order_relaxed);
	if (fromwin)
		atomic_fetch_add_explicit(&sp->ra_blocks, fromwin, memory_order_relaxed);
	if (loaded)
		atomic_fetch_add_explicit(&sp->ra_loads, 1, memory_order_relaxed);
	*bufp = buf;
	return 0;
}

/* Decide row u from blocks [a, b] of plan p, whose buffers are found from
 * *w on: 1 the run holds it (state set), 0 it does not, -EIO a block it may
 * be in is damaged. */
static int resolve(struct lreq *L, const struct plan *p, size_t *w, size_t u, uint64_t a, uint64_t b)
{
	struct spill *sp = L->s->sp;
	const struct srun *x = p->x;
	struct rq *r = &L->q[L->uq[u]];
	uint64_t row = L->urow[u];
	for (uint64_t k = a; k <= b; k++) {
		while (*w < p->b0 + p->nb && L->br[*w].blk < k)
			(*w)++;
		struct bref *bb = *w < p->b0 + p->nb && L->br[*w].blk == k ? &L->br[*w] : NULL;
		if (!bb || run_blk_ok(sp, x, bb))
			return run_bloom_row(x, row) ? -EIO : 0;
		const struct emb_rblk *h = (const struct emb_rblk *)bb->p;
		/* first record of the row in this block */
		uint32_t lo = 0, hi = h->nrec;
		while (lo < hi) {
			uint32_t mid = (lo + hi) / 2;
			if (rec_row(rec_at(x, bb->p, mid)) < row)
				lo = mid + 1;
			else
				hi = mid;
		}
		for (uint32_t i = lo; i < h->nrec; i++) {
			const char *rec = rec_at(x, bb->p, i);
			if (rec_row(rec) != row)
				return 0; /* past it: its versions end here */
			uint64_t bt = rec_batch(rec);
			if (L->batch != EMB_NONE && (bt & ~EMB_RREC_TOMB) > L->batch)
				continue;
			r->batch = bt & ~EMB_RREC_TOMB;
			if (bt & EMB_RREC_TOMB) {
				r->state = RQ_HOLE;
			} else {
				r->state = RQ_DATA;
				if (r->dst)
					memcpy(r->dst, rec + 16, L->rs);
			}
			return 1;
		}
	}
	return 0;
}

/* Plan p decides what it can of the rows still pending. */
static void merge_run(struct lreq *L, const struct plan *p)
{
	struct spill *sp = L->s->sp;
	size_t w = p->b0;
	if (p->lr) { /* its arrays are unreadable: the rows it may hold are EIO */
		for (size_t u = p->u0; u < p->u1; u++)
			if (L->q[L->uq[u]].state == RQ_PENDING)
				L->q[L->uq[u]].state = RQ_EIO;
		return;
	}
	if (p->walk) { /* its records and the rows asked for, in step */
		const struct srun *x = p->x;
		size_t u = p->u0;
		for (size_t w = p->b0; w < p->b0 + p->nb && u < p->u1; w++) {
			struct bref *bb = &L->br[w];
			if (run_blk_ok(sp, x, bb)) { /* EIO for the rows it may hold */
				uint64_t lo, hi;
				blk_rows(x, bb->blk, &lo, &hi);
				for (size_t v = gallop(L->urow, u, p->u1, lo); v < p->u1 && L->urow[v] < hi; v++)
					if (L->q[L->uq[v]].state == RQ_PENDING && run_bloom_row(x, L->urow[v]))
						L->q[L->uq[v]].state = RQ_EIO;
				continue;
			}
			const struct emb_rblk *h = (const struct emb_rblk *)bb->p;
			for (uint32_t i = 0; i < h->nrec; i++) {
				const char *rec = rec_at(x, bb->p, i);
				uint64_t row = rec_row(rec);
				u = gallop(L->urow, u, p->u1, row);
				if (u == p->u1)
					break;
				struct rq *r = &L->q[L->uq[u]];
				if (L->urow[u] != row || r->state != RQ_PENDING)
					continue; /* not asked for, or decided (by a newer version) */
				uint64_t bt = rec_batch(rec);
				if (L->batch != EMB_NONE && (bt & ~EMB_RREC_TOMB) > L->batch)
					continue; /* newer than the view: an older version follows */
				r->batch = bt & ~EMB_RREC_TOMB;
				if (bt & EMB_RREC_TOMB) {
					r->state = RQ_HOLE;
				} else {
					r->state = RQ_DATA;
					if (r->dst)
						memcpy(r->dst, rec + 16, L->rs);
				}
			}
		}
		return;
	}
	uint64_t fp = 0;
	for (size_t i = p->l0; i < p->l0 + p->nl; i++) {
		const struct lk *k = &L->lk[i];
		if (L->q[L->uq[k->u]].state != RQ_PENDING)
			continue;
		int got = resolve(L, p, &w, k->u, k->a, k->b);
		if (got < 0)
			L->q[L->uq[k->u]].state = RQ_EIO;
		fp += got == 0;
	}
	if (fp)
		atomic_fetch_add_explicit(&sp->bloom_fp, fp, memory_order_relaxed);
}

struct upos {
	uint64_t row;
	size_t i;
};

static int upos_cmp(const void *pa, const void *pb)
{
	const struct upos *x = pa, *y = pb;
	return x->row < y->row ? -1 : x->row > y->row;
}

/* The distinct pending rows of q, ascending, into L (urow, and in uq the
 * first request of each). */
static int unique_rows(struct lreq *L, struct rq *q, size_t n)
{
	struct upos *o = malloc(n * sizeof(*o));
	L->urow = malloc(n * sizeof(*L->urow));
	L->uq = malloc(n * sizeof(*L->uq));
	if (!o || !L->urow || !L->uq) {
		free(o);
		return -ENOMEM;
	}
	size_t m = 0;
	int sorted = 1;
	for (size_t i = 0; i < n; i++) {
		if (q[i].state != RQ_PENDING)
			continue;
		if (m && o[m - 1].row >= q[i].row)
			sorted = 0;
		o[m++] = (struct upos){ q[i].row, i };
	}
	if (sorted) { /* ascending and distinct already (a range read) */
		for (size_t i = 0; i < m; i++) {
			L->urow[i] = o[i].row;
			L->uq[i] = o[i].i;
		}
		L->nu = m;
		free(o);
		return 0;
	}
	/* qsort is not stable: the first of equal rows is found below */
	qsort(o, m, sizeof(*o), upos_cmp);
	L->nu = 0;
	for (size_t i = 0; i < m; i++) {
		if (L->nu && L->urow[L->nu - 1] == o[i].row) {
			if (o[i].i < L->uq[L->nu - 1])
				L->uq[L->nu - 1] = o[i].i;
			continue;
		}
		L->urow[L->nu] = o[i].row;
		L->uq[L->nu++] = o[i].i;
	}
	free(o);
	return 0;
}

/* Plan, read and merge L's rows over runs v[0..nr) (L->p[i]: each run and
 * whether its arrays loaded), in rounds for the live view (b) of scattered
 * rows.  0 or -errno. */
static int lookup_rounds(struct lreq *L, struct srun **v, size_t nr, uint64_t b)
{
	int ret = 0;
	char *buf = NULL;
	/* the live view of scattered rows in rounds, when more than one run
	 * may hold a row: a row asks its newest run whose filter may hold it
	 * (a row written several times is in several runs, and the newest
	 * decides it), and the next one only if that one did not (a filter's
	 * false positive).  Not when a run is walked (a range read, a dense
	 * gather): a walk decides every row of its blocks */
	int walks = 0;
	uint64_t j, a, bb, last;
	for (size_t i = 0; i < nr && !walks; i++)
		walks = plan_range(L, &L->p[i]) && plan_walks(L, &L->p[i], &j, &a, &bb, &last);
	if (b == EMB_NONE && nr > 1 && !walks) {
		L->from = calloc(L->nu, sizeof(*L->from));
		L->claim = calloc(L->nu, sizeof(*L->claim));
		if (!L->from || !L->claim)
			ret = -ENOMEM;
	}
	for (int more = 1; more && !ret;) {
		L->round++;
		L->np = L->nbr = L->nlk = 0;
		for (size_t i = 0; i < nr && !ret; i++) {
			struct plan *p = &L->p[L->np++];
			*p = (struct plan){ .x = v[i], .lr = p->lr };
			ret = plan_run(L, p, i);
		}
		if (!ret)
			ret = read_planned(L, &buf);
		for (size_t i = 0; i < L->np && !ret; i++)
			merge_run(L, &L->p[i]);
		rbuf_put(buf);
		buf = NULL;
		more = 0; /* a row its run this round did not decide, with runs left */
		for (size_t u = 0; u < L->nu && L->from && !ret && !more; u++)
			more = L->claim[u] == L->round && L->q[L->uq[u]].state == RQ_PENDING && L->from[u] < nr;
	}
	return ret;
}

int runs_lookup(struct store *s, struct stable *st, struct rq *q, size_t n, uint64_t b)
{
	struct spill *sp = s->sp;
	struct srun **v;
	size_t nr;
	if (!sp || !n)
		return 0;
	uint64_t lo = UINT64_MAX, hi = 0;
	for (size_t i = 0; i < n; i++) {
		lo = q[i].row < lo ? q[i].row : lo;
		hi = q[i].row > hi ? q[i].row : hi;
	}
	/* the runs that may hold one of them (a long list of a load's
	 * disjoint runs costs a lookup only the runs it meets) */
	int ret = runs_get_range(sp, st->id, lo, hi, &v, &nr);
	if (ret || !nr)
		return ret;
	struct lreq L = { .s = s, .q = q, .batch = b, .rs = st->t->row_size };
	ret = unique_rows(&L, q, n);
	if (!ret && !(L.p = calloc(nr, sizeof(*L.p))))
		ret = -ENOMEM;
	for (size_t i = 0; i < nr && !ret; i++) {
		L.p[i].x = v[i];
		L.p[i].lr = srun_load(s, v[i]);
		if (L.p[i].lr == -ENOMEM)
			ret = -ENOMEM;
	}
	if (!ret)
		ret = lookup_rounds(&L, v, nr, b);
	if (!ret && L.nu < n) /* duplicates take the answer of the first of their row */
		for (size_t k = 0; k < n; k++) {
			struct rq *r = &q[k];
			size_t u = u64_lower_bound(L.urow, L.nu, r->row);
			if (r->state != RQ_PENDING || u == L.nu || L.urow[u] != r->row || L.uq[u] == k)
				continue;
			const struct rq *o = &q[L.uq[u]];
			r->state = o->state;
			r->batch = o->batch;
			if (o->state == RQ_DATA && r->dst && o->dst)
				memcpy(r->dst, o->dst, L.rs);
		}
	ra_win_put_all(&L);
	free(L.from);
	free(L.claim);
	free(L.br);
	free(L.lk);
	free(L.win);
	free(L.mine);
	free(L.p);
	free(L.urow);
	free(L.uq);
	runs_put(v, nr);
	uint64_t found = 0;
	for (size_t i = 0; i < n; i++)
		found += q[i].state == RQ_DATA;
	atomic_fetch_add_explicit(&sp->run_reads, n, memory_order_relaxed);
	atomic_fetch_add_explicit(&sp->reads, found, memory_order_relaxed); /* rows from the device */
	return ret;
}

int runs_row_read(struct store *s, struct stable *st, uint64_t row, void *buf)
{
	struct rq q = { .row = row, .dst = buf };
	int ret = runs_lookup(s, st, &q, 1, EMB_NONE);
	if (!ret && q.state == RQ_EIO)
		ret = -EIO;
	return ret ? ret : q.state == RQ_DATA;
}
