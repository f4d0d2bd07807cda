/*
 * Read-ahead windows over sorted runs, and the thread that loads them ahead
 * of a sequential reader (see the comment below).  Lookups (runlookup.c)
 * take their blocks from windows when a walk follows the previous one.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run_int.h"

/*
 * Read-ahead windows.  A sequential reader of a table (cat, a copy, the
 * kernel's read-ahead of 1 MiB READs) walks each run a few dozen blocks
 * per request, and would read those blocks as a small read per run per
 * request, waiting for each.  So when a walk of a run starts where the
 * previous ones reached (srun.ra_next, give or take a little), its blocks
 * come from windows of RA_BYTES of the run instead: the first request that
 * needs a window reads all of it (in its one submission), and the next
 * requests find it in DRAM, read once, with no wait.  Windows are shared
 * by all readers (sp->ra, RA_WINDOWS of them, reused least recently used
 * first; a window in use or loading is never reused), and named by the
 * run's id, which no other run ever has; runs are immutable, so a window
 * never goes stale (a row written meanwhile is in the pool, which decides
 * first).  A reader that finds a window loading waits for it; a reader
 * never waits while it holds a window it has to load itself, so no two
 * wait for each other.  When every window is in use, blocks are read
 * directly, as for a random range read.
 *
 * Ahead: a sequential walk also queues the windows after its last block,
 * enough for four times the blocks it took (at most RA_AHEAD), for the
 * read-ahead thread (ra_main), which keeps spill_qd reads of queued
 * windows in flight, oldest queued first, and hands each window over as
 * soon as its reads complete; so in a steady sequential read a request
 * finds its windows read and waits for no device read.  The thread starts
 * at the first window it is given (in the process that gives it: the
 * daemon forks after opening the pool) and stops in runs_unload; a queued
 * window holds a reference on its run, so the run is not freed under the
 * read.  The windows' buffers are one arena, which the thread registers
 * with its ring.
 */
#define RA_AHEAD 24 /* windows queued ahead of a walk, per run */

/* The window to reuse: not in use; an empty or failed one, else the least
 * recently used or queued.  NULL if every window is in use.  ra_mu held. */
static struct rawin *win_victim(struct spill *sp)
{
	struct rawin *v = NULL;
	for (uint32_t i = 0; i < RA_WINDOWS; i++) {
		struct rawin *c = &sp->ra[i];
		if (c->refs)
			continue;
		if (!c->run_id || c->state == RA_FAILED)
			return c;
		if (!v || c->tick < v->tick)
			v = c;
	}
	return v;
}

/* In the child of a fork (a process that forks after reading), windows
 * being loaded by threads of the parent would never be read: they go.
 * ra_mu held. */
static void win_forked_locked(struct spill *sp)
{
	if (!sp->ra_pid || sp->ra_pid == getpid())
		return;
	for (uint32_t i = 0; i < RA_WINDOWS; i++)
		if (sp->ra[i].state == RA_LOADING || sp->ra[i].refs) {
			if (sp->ra[i].x)
				srun_put(sp->ra[i].x);
			sp->ra[i] = (struct rawin){ .buf = sp->ra[i].buf };
		}
	sp->ra_queued = 0;
	sp->ra_pid = 0;
}

/* The windows' buffers: one arena of RA_WINDOWS x RA_BYTES, made at the
 * first window (the read-ahead thread registers it with its ring: no page
 * pinning per read).  0, or -ENOMEM.  ra_mu held. */
static int win_arena_locked(struct spill *sp)
{
	if (sp->ra_arena)
		return 0;
	if (posix_memalign((void **)&sp->ra_arena, BLK, (size_t)RA_WINDOWS * RA_BYTES)) {
		sp->ra_arena = NULL;
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < RA_WINDOWS; i++)
		sp->ra[i].buf = sp->ra_arena + (size_t)i * RA_BYTES;
	return 0;
}

/* Blocks per window of run x. */
uint64_t ra_win_blocks(const struct srun *x)
{
	uint64_t per = RA_BYTES / x->r->blk_size;
	return per ? per : 1;
}

/* A reference to window ext of run x for L: found, or claimed for L to
 * load (*mine); NULL when every window is busy (read directly). */
struct rawin *ra_win_get(struct lreq *L, const struct srun *x, uint64_t ext)
{
	struct spill *sp = L->s->sp;
	if (L->nwin == L->cwin) {
		size_t nc = L->cwin ? 2 * L->cwin : 16;
		struct rawin **v = realloc(L->win, nc * sizeof(*v));
		uint8_t *m = v ? realloc(L->mine, nc) : NULL;
		if (v)
			L->win = v;
		if (!m)
			return NULL;
		L->mine = m;
		L->cwin = nc;
	}
	uint64_t per = ra_win_blocks(x), first = ext * per;
	uint32_t nblk = (uint32_t)(x->r->nblocks - first < per ? x->r->nblocks - first : per);
	if ((size_t)nblk * x->r->blk_size > RA_BYTES)
		return NULL; /* a block larger than a window (rows are at most 64 KiB: never) */
	struct rawin *w = NULL, *victim = NULL;
	int mine = 0;
	pthread_mutex_lock(&sp->ra_mu);
	win_forked_locked(sp);
	uint64_t tick = ++sp->ra_tick;
	for (uint32_t i = 0; i < RA_WINDOWS && !w; i++) {
		struct rawin *c = &sp->ra[i];
		if (c->run_id == x->r->id && c->ext == ext && c->state != RA_FAILED)
			w = c;
	}
	if (!w && !win_arena_locked(sp))
		victim = win_victim(sp);
	if (!w && victim) {
		w = victim;
		*w = (struct rawin){ .run_id = x->r->id, .ext = ext, .nblk = nblk, .buf = w->buf, .state = RA_LOADING };
		mine = 1;
	}
	if (w) {
		w->refs++;
		w->tick = tick;
	}
	pthread_mutex_unlock(&sp->ra_mu);
	if (w) {
		L->win[L->nwin] = w;
		L->mine[L->nwin++] = (uint8_t)mine;
	}
	return w;
}

static void *ra_main(void *arg);

/* Queue window ext of run x for the read-ahead thread, unless it is in
 * DRAM or on its way, or no window is free.  ra_mu held. */
static void win_ahead_locked(struct spill *sp, struct srun *x, uint64_t ext)
{
	uint64_t per = ra_win_blocks(x), first = ext * per;
	if (first >= x->r->nblocks)
		return;
	uint32_t nblk = (uint32_t)(x->r->nblocks - first < per ? x->r->nblocks - first : per);
	if ((size_t)nblk * x->r->blk_size > RA_BYTES)
		return;
	for (uint32_t i = 0; i < RA_WINDOWS; i++) {
		struct rawin *c = &sp->ra[i];
		if (c->run_id == x->r->id && c->ext == ext && c->state != RA_FAILED)
			return;
	}
	struct rawin *victim = win_victim(sp);
	if (!victim)
		return;
	atomic_fetch_add_explicit(&x->refs, 1, memory_order_acq_rel);
	*victim = (struct rawin){ .run_id = x->r->id, .ext = ext, .nblk = nblk, .buf = victim->buf,
				  .state = RA_LOADING, .refs = 1, .x = x, .tick = ++sp->ra_tick };
	sp->ra_queued++;
}

/* Queue the windows of run x from ext on that cover `want` blocks. */
void ra_win_ahead(struct spill *sp, struct srun *x, uint64_t ext, uint64_t want)
{
	uint64_t per = ra_win_blocks(x), n = (want + per - 1) / per;
	if (n > RA_AHEAD)
		n = RA_AHEAD;
	pthread_mutex_lock(&sp->ra_mu);
	win_forked_locked(sp);
	if (!sp->ra_pid && !win_arena_locked(sp)) {
		sp->ra_stop = 0;
		if (pthread_create(&sp->ra_thr, NULL, ra_main, sp) == 0)
			sp->ra_pid = getpid();
	}
	if (sp->ra_pid) {
		for (uint64_t i = 0; i < n; i++)
			win_ahead_locked(sp, x, ext + i);
		if (sp->ra_queued)
			pthread_cond_signal(&sp->ra_job);
	}
	pthread_mutex_unlock(&sp->ra_mu);
}

/* One read of the read-ahead thread in flight: a piece of window win. */
struct raio {
	int win;             /* index in sp->ra, -1: free */
	struct sreq q;
};

/* Check window w's blocks (of run x) once for every reader; a damaged one
 * is counted here.  The thread's window, loading: nobody else touches it. */
static void win_check(struct spill *sp, const struct srun *x, struct rawin *w)
{
	for (uint32_t k = 0; k < w->nblk; k++) {
		struct bref b = { .p = w->buf + (size_t)k * x->r->blk_size };
		w->ok[k] = run_blk_ok(sp, x, &b) ? -1 : 1;
	}
}

/* Window i's reads ended (err: one failed): readers may use it.  ra_mu held. */
static void win_done_locked(struct spill *sp, uint32_t i, int err)
{
	sp->ra[i].state = err ? RA_FAILED : RA_READY;
	sp->ra[i].refs--;
	pthread_cond_broadcast(&sp->ra_cv);
}

/* The read-ahead thread's own state: its ring (fixed: the arena registered
 * with it), its reads in flight (io[k]: the read whose user_data is k) and,
 * per window it reads, the run (a reference), the reads left and the error. */
struct rathread {
	struct spill *sp;
	uint32_t qd;
	struct io_uring ring;
	int have_ring, fixed;
	struct raio io[256];
	int left[RA_WINDOWS], err[RA_WINDOWS];
	struct srun *run[RA_WINDOWS];
	uint32_t inflight;
};

/* Start the reads of the queued windows, oldest first, as long as they fit
 * on the ring: each window's reads go on the ring, or are made plainly
 * (ra_mu dropped meanwhile) and the window handed over at once.  ra_mu held. */
static void ra_start_locked(struct rathread *t)
{
	struct spill *sp = t->sp;
	struct raio *io = t->io;
	/* the queued windows, oldest first, as long as their reads fit */
	struct sreq q[RA_BYTES / BLK + 2];
	for (;;) {
		int best = -1;
		for (uint32_t i = 0; i < RA_WINDOWS && !sp->ra_stop; i++)
			if (sp->ra[i].x && (best < 0 || sp->ra[i].tick < sp->ra[best].tick))
				best = (int)i;
		if (best < 0)
			break;
		struct rawin *w = &sp->ra[best];
		size_t nq = 0;
		ra_win_reads(sp, w->x, w, q, &nq);
		int plain = !t->have_ring || nq > t->qd; /* (a window in more pieces than the ring holds) */
		if (!plain && t->inflight + nq > t->qd)
			break; /* when some complete */
		t->run[best] = w->x;
		w->x = NULL;
		sp->ra_queued--;
		atomic_fetch_add_explicit(&sp->ra_ahead, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&sp->run_blocks, w->nblk, memory_order_relaxed);
		if (plain) {
			pthread_mutex_unlock(&sp->ra_mu);
			int r = device_read_raw(sp, q, nq, NULL);
			if (!r)
				win_check(sp, t->run[best], w);
			srun_put(t->run[best]);
			pthread_mutex_lock(&sp->ra_mu);
			win_done_locked(sp, (uint32_t)best, r);
			continue;
		}
		t->left[best] = (int)nq;
		t->err[best] = 0;
		for (size_t j = 0; j < nq; j++) {
			uint32_t k = 0;
			while (io[k].win >= 0)
				k++;
			io[k] = (struct raio){ .win = best, .q = q[j] };
			struct io_uring_sqe *sqe = io_uring_get_sqe(&t->ring);
			if (t->fixed)
				io_uring_prep_read_fixed(sqe, sp->fd, q[j].to, q[j].span, q[j].blk, 0);
			else
				io_uring_prep_read(sqe, sp->fd, q[j].to, q[j].span, q[j].blk);
			sqe->user_data = k;
			t->inflight++;
		}
	}
}

/* Submit the ring's reads and wait for at least one to end (ra_mu dropped
 * meanwhile); a short read is made again plainly, and should the ring fail
 * every read in flight is.  The io slots of the reads that ended go to done
 * (a failed read sets its window's error).  ra_mu held.  How many ended. */
static uint32_t ra_wait_locked(struct rathread *t, uint32_t *done)
{
	struct spill *sp = t->sp;
	struct raio *io = t->io;
	int *err = t->err;
	pthread_mutex_unlock(&sp->ra_mu);
	struct io_uring_cqe *cqe;
	int r = io_uring_submit_and_wait(&t->ring, 1);
	uint32_t got = 0;
	unsigned head;
	io_uring_for_each_cqe(&t->ring, head, cqe) {
		uint32_t k = (uint32_t)cqe->user_data;
		struct raio *a = &io[k];
		if (cqe->res != (int)a->q.span && /* a short read: once more, plainly */
		    pread(sp->fd, a->q.to, a->q.span, (off_t)a->q.blk) != (ssize_t)a->q.span)
			err[a->win] = -EIO;
		done[got++] = k;
	}
	io_uring_cq_advance(&t->ring, got);
	atomic_fetch_add_explicit(&sp->read_ios, got, memory_order_relaxed);
	pthread_mutex_lock(&sp->ra_mu);
	if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY && !got) {
		/* the ring failed: read what is in flight plainly */
		for (uint32_t k = 0; k < t->qd; k++)
			if (io[k].win >= 0) {
				if (pread(sp->fd, io[k].q.to, io[k].q.span, (off_t)io[k].q.blk) != (ssize_t)io[k].q.span)
					err[io[k].win] = -EIO;
				done[got++] = k;
			}
	}
	return got;
}

/* The got reads of done ended: free their io slots, and hand over each
 * window whose reads have all ended (its blocks checked first, ra_mu
 * dropped meanwhile), dropping its run's reference.  ra_mu held. */
static void ra_finish_locked(struct rathread *t, const uint32_t *done, uint32_t got)
{
	struct spill *sp = t->sp;
	int *err = t->err;
	uint32_t nfin = 0, fin[RA_WINDOWS];
	for (uint32_t g = 0; g < got; g++) {
		struct raio *a = &t->io[done[g]];
		atomic_fetch_add_explicit(&sp->read_bytes, a->q.span, memory_order_relaxed);
		int i = a->win;
		a->win = -1;
		t->inflight--;
		if (--t->left[i] == 0)
			fin[nfin++] = (uint32_t)i;
	}
	/* the windows read whole: their blocks checked here, off the
	 * readers' path, then handed over */
	if (nfin) {
		pthread_mutex_unlock(&sp->ra_mu);
		for (uint32_t f = 0; f < nfin; f++)
			if (!err[fin[f]])
				win_check(sp, t->run[fin[f]], &sp->ra[fin[f]]);
		pthread_mutex_lock(&sp->ra_mu);
	}
	for (uint32_t f = 0; f < nfin; f++) {
		uint32_t i = fin[f];
		win_done_locked(sp, i, err[i]);
		struct srun *x = t->run[i];
		t->run[i] = NULL;
		srun_put(x);
	}
}

/* The read-ahead thread: submits the reads of the windows queued (up to
 * spill_qd reads in flight, on a ring of its own) and marks each window
 * read as soon as its own reads complete, nearest first, so that a reader
 * waits for the window it needs, not for all that were queued with it.
 * Without a ring of its own, one window at a time through the shared ones. */
static void *ra_main(void *arg)
{
	struct spill *sp = arg;
	struct rathread t = { .sp = sp, .qd = sp->qd < 256 ? sp->qd : 256 };
	t.have_ring = io_uring_queue_init(t.qd, &t.ring, 0) == 0;
	/* the windows' arena registered: reads into it pin no pages each
	 * (needs RLIMIT_MEMLOCK room or CAP_IPC_LOCK, else plain reads) */
	struct iovec arena = { sp->ra_arena, (size_t)RA_WINDOWS * RA_BYTES };
	t.fixed = t.have_ring && io_uring_register_buffers(&t.ring, &arena, 1) == 0;
	for (uint32_t k = 0; k < t.qd; k++)
		t.io[k].win = -1;
	pthread_mutex_lock(&sp->ra_mu);
	while (!sp->ra_stop || t.inflight) {
		ra_start_locked(&t);
		if (!t.inflight) {
			if (!sp->ra_stop)
				pthread_cond_wait(&sp->ra_job, &sp->ra_mu);
			continue;
		}
		uint32_t done[256];
		uint32_t got = ra_wait_locked(&t, done);
		ra_finish_locked(&t, done, got);
	}
	pthread_mutex_unlock(&sp->ra_mu);
	if (t.have_ring)
		io_uring_queue_exit(&t.ring);
	return NULL;
}

/* Add the reads of window w's blocks (of run x) to q. */
void ra_win_reads(struct spill *sp, const struct srun *x, struct rawin *w, struct sreq *q, size_t *nq)
{
	uint32_t bs = x->r->blk_size;
	uint64_t first = w->ext * ra_win_blocks(x);
	for (uint32_t i = 0; i < w->nblk; i++) {
		uint64_t loc = run_blk_loc(sp, x, first + i);
		if (i && q[*nq - 1].blk + q[*nq - 1].span == loc && q[*nq - 1].span + bs <= CHUNK_BYTES) {
			q[*nq - 1].span += bs;
			continue;
		}
		q[(*nq)++] = (struct sreq){ .blk = loc, .span = bs, .to = w->buf + (size_t)i * bs };
	}
}

/* L's windows go back (they stay in DRAM for the next reader). */
void ra_win_put_all(struct lreq *L)
{
	struct spill *sp = L->s->sp;
	if (!L->nwin)
		return;
	pthread_mutex_lock(&sp->ra_mu);
	for (size_t j = 0; j < L->nwin; j++)
		L->win[j]->refs--;
	pthread_mutex_unlock(&sp->ra_mu);
}
