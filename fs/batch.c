/*
 * .embfs/rows: gather, scatter, push and prefetch many rows of one table
 * (or of many, MULTI) per FUSE round trip.  Wire format in
 * include/embfs/batch.h; what users see in docs/files.md "Batched rows".
 * This file: targets, an fd's state, the prefetch map and thread, page
 * cache invalidations, the stats; the FUSE entry points and the requests
 * themselves are batchreq.c's, which calls this file (what the two share:
 * batch_int.h).
 *
 * Each open file description (fi->fh) has a struct bfd: the request being
 * received, the gather response, and the rows this fd prefetched.  A request
 * arrives in one or more WRITEs at increasing offsets (the kernel cuts a big
 * write into max_write pieces).  It is checked as soon as its header, then
 * its ids, are in (so a bad request fails on the first piece, and the write
 * syscall returns the errno instead of a short count), and it runs when its
 * last byte is in:
 *  - SCATTER and PUSH run in that WRITE: one cache_write per row (each row atomic,
 *    the batch as a whole not), the table size raised as by pwrite, then the
 *    table's kernel page cache invalidated by the notifier thread (libfuse
 *    warns that a notify from a request thread can deadlock); pcache.c keeps
 *    pages a mapping writes back meanwhile from bringing the old rows back.
 *  - GATHER rows are copied at the first READ of the response.  The kernel
 *    holds the inode lock of .embfs/rows across each direct-io WRITE
 *    (parallel direct writes need libfuse >= 3.15), so work done in the WRITE
 *    would serialize all clients; READs run in parallel.
 *  - MULTI runs its pushes in that WRITE and its gathers at the first READ.
 *  - PREFETCH hands the ids to the prefetch thread, which pins the rows in
 *    the cache; a later GATHER on the same fd unpins the ones it reads,
 *    RELEASE the rest.  Nothing ever waits for the prefetch thread.
 * Lock order: bfd.lock, then bfd.pf_lock, then cache shard locks;
 * batch.lock is taken alone.
 */
#include <endian.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "batch_int.h"

/* ---- targets ---------------------------------------------------------- */

/* What a request's table inode resolves to (attr.c's fs_view): -EINVAL
 * unless ino is a table file, live or in a snapshot; -ESTALE for a table
 * unlinked and kept only by open files (its name is gone: a client that
 * names tables by inode must not go on using it).  A snapshot's table is
 * read-only (SCATTER gets EROFS) and read from the store (its snapshot made
 * durable first); a live table's rows are read through the row cache when
 * there is one, where PREFETCH can pin them. */
int batch_resolve(struct embfs *fs, uint64_t ino, struct btarget *t)
{
	struct store_view v;
	struct store_attr a;
	if (fs_view(fs, alias_ino(fs, ino), &v, &a)) /* a re-lay's table (relay.c) */
		return -EINVAL;
	if (a.orphan)
		return -ESTALE;
	if (v.snap) {
		int ret = front_sync_snap(&fs->fr, v.snap - 1);
		if (ret)
			return ret;
	}
	*t = (struct btarget){ .ino = ino, .id = a.id, .gen = v.snap ? v.snap_gen : a.gen, .row_size = a.row_size,
			       .dtype = a.dtype, .cols = a.dim,
			       .mode = v.snap ? a.mode & ~0222u : a.mode, .uid = a.uid, .gid = a.gid, .size = a.size,
			       .writable = !v.snap, .cached = fs->fr.cache && !v.snap, .view = v };
	return 0;
}

/* ---- prefetch map ----------------------------------------------------- */

static uint32_t pf_hash(uint32_t table, uint64_t row)
{
	uint64_t h = (row ^ ((uint64_t)table << 40)) * 0x9E3779B97F4A7C15ull;
	return (uint32_t)(h >> 32);
}

static struct pfent *pf_find(struct pfmap *m, uint32_t table, uint64_t row)
{
	if (!m->n)
		return NULL;
	for (uint32_t i = pf_hash(table, row) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
		struct pfent *e = &m->e[i];
		if (!e->state)
			return NULL;
		if (e->row == row && e->table == table)
			return e;
	}
}

/* 1 added (pending), 0 already there, -ENOMEM. */
static int pf_add(struct pfmap *m, uint32_t table, uint64_t row)
{
	if ((m->n + 1) * 2 > m->cap) {
		uint32_t nc = m->cap ? m->cap * 2 : 1024;
		struct pfent *ne = calloc(nc, sizeof(*ne));
		if (!ne)
			return -ENOMEM;
		for (uint32_t i = 0; i < m->cap; i++) {
			if (!m->e[i].state)
				continue;
			uint32_t j = pf_hash(m->e[i].table, m->e[i].row) & (nc - 1);
			while (ne[j].state)
				j = (j + 1) & (nc - 1);
			ne[j] = m->e[i];
		}
		free(m->e);
		m->e = ne;
		m->cap = nc;
	}
	uint32_t i = pf_hash(table, row) & (m->cap - 1);
	for (; m->e[i].state; i = (i + 1) & (m->cap - 1))
		if (m->e[i].row == row && m->e[i].table == table)
			return 0;
	m->e[i] = (struct pfent){ row, table, PF_PENDING };
	m->n++;
	return 1;
}

static void pf_del(struct pfmap *m, struct pfent *e)
{
	uint32_t mask = m->cap - 1, i = (uint32_t)(e - m->e), j = i;
	e->state = 0;
	m->n--;
	for (;;) {
		j = (j + 1) & mask;
		if (!m->e[j].state)
			return;
		uint32_t k = pf_hash(m->e[j].table, m->e[j].row) & mask;
		/* the entry at j may fill the hole at i unless its home is in (i, j] */
		if (j > i ? (k <= i || k > j) : (k <= i && k > j)) {
			m->e[i] = m->e[j];
			m->e[j].state = 0;
			i = j;
		}
	}
}

static void bfd_put(struct bfd *f)
{
	if (atomic_fetch_sub(&f->refs, 1) != 1)
		return;
	free(f->req);
	free(f->resp);
	free(f->unpin);
	free(f->present);
	free(f->subs);
	free(f->pf.e);
	pthread_mutex_destroy(&f->lock);
	pthread_mutex_destroy(&f->pf_lock);
	free(f);
}

/* ---- background threads ----------------------------------------------- */

/* Pin the rows of one PREFETCH that are still wanted. */
static void pf_run(struct batch *b, struct pfjob *j)
{
	struct bfd *f = j->f;
	struct cache *c = b->fs->fr.cache;
	size_t i = 0;
	/* load the rows with batched reads first (rows on the spill device:
	 * one submission per 4096), then pin them, cached by now */
	char *tmp = malloc(4096 * (size_t)j->row_size);
	for (size_t k = 0; tmp && k < j->n && !b->stop; k += 4096)
		cache_read_rows(c, j->table, j->row_size, j->rows + k, j->n - k < 4096 ? j->n - k : 4096, tmp, NULL);
	free(tmp);
	for (; i < j->n && !b->stop; i++) {
		uint64_t row = j->rows[i];
		pthread_mutex_lock(&f->pf_lock);
		struct pfent *e = f->closing ? NULL : pf_find(&f->pf, j->table, row);
		int want = e && e->state == PF_PENDING, closing = f->closing;
		pthread_mutex_unlock(&f->pf_lock);
		if (closing)
			break;
		if (!want)
			continue; /* a gather got there first */
		int r = cache_pin(c, j->table, j->row_size, row), undo = 0;
		pthread_mutex_lock(&f->pf_lock);
		e = f->closing ? NULL : pf_find(&f->pf, j->table, row);
		if (e && e->state == PF_PENDING && r == 0) {
			e->state = PF_PINNED;
			INC(b, pf_pinned, 1);
			INC(b, pf_held, 1);
		} else {
			if (e && e->state == PF_PENDING)
				pf_del(&f->pf, e);
			undo = r == 0;
			if (r)
				INC(b, pf_failed, 1);
		}
		pthread_mutex_unlock(&f->pf_lock);
		if (undo)
			cache_unpin(c, j->table, row);
	}
	INC(b, pf_skipped, j->n - i); /* the fd was closed (or the daemon stops) first */
}

static void *pf_main(void *arg)
{
	struct batch *b = arg;
	pthread_mutex_lock(&b->lock);
	for (;;) {
		while (!b->head && !b->stop)
			pthread_cond_wait(&b->pf_wake, &b->lock);
		struct pfjob *j = b->head;
		if (!j)
			break;
		b->head = j->next;
		if (!b->head)
			b->tail = NULL;
		pthread_mutex_unlock(&b->lock);
		pf_run(b, j);
		bfd_put(j->f);
		free(j);
		pthread_mutex_lock(&b->lock);
	}
	pthread_mutex_unlock(&b->lock);
	return NULL;
}

/* Have the table's kernel page cache (and attributes) dropped, after a
 * scatter or a restore: its seq (batch_inval_wait), 0 if none was queued. */
static uint64_t inval_queue(struct batch *b, uint64_t ino)
{
	uint64_t seq = 0;
	pthread_mutex_lock(&b->lock);
	for (size_t i = 0; i < b->ninval; i++)
		if (b->inval[i] == ino)
			goto queued; /* not yet taken: it will be sent after this call */
	if (b->ninval == b->inval_cap) {
		size_t nc = b->inval_cap ? 2 * b->inval_cap : 16;
		uint64_t *p = realloc(b->inval, nc * sizeof(*p));
		if (!p)
			goto out; /* attributes time out anyway; pages stay stale: logged */
		b->inval = p;
		b->inval_cap = nc;
	}
	b->inval[b->ninval++] = ino;
	pthread_cond_signal(&b->inval_wake);
queued:
	seq = ++b->inval_seq;
out:
	pthread_mutex_unlock(&b->lock);
	return seq;
}

static void *inval_main(void *arg)
{
	struct batch *b = arg;
	uint64_t todo[INVAL_CHUNK];
	pthread_mutex_lock(&b->lock);
	for (;;) {
		while (!b->ninval && !b->stop)
			pthread_cond_wait(&b->inval_wake, &b->lock);
		if (!b->ninval)
			break;
		size_t n = b->ninval < INVAL_CHUNK ? b->ninval : INVAL_CHUNK;
		/* taking the whole queue: once sent, every seq queued so far is */
		uint64_t upto = n == b->ninval ? b->inval_seq : 0;
		memcpy(todo, b->inval + b->ninval - n, n * sizeof(*todo));
		b->ninval -= n;
		pthread_mutex_unlock(&b->lock);
		for (size_t i = 0; i < n; i++) {
			/* -ENOENT: the kernel holds no inode, so no pages either */
			uint64_t start = pc_inval_begin(b->fs);
			int r = fuse_lowlevel_notify_inval_inode(b->fs->se, (fuse_ino_t)todo[i], 0, 0);
			pc_inval_end(b->fs, fs_ino(todo[i]).id, start, r);
			INC(b, invals, 1);
		}
		pthread_mutex_lock(&b->lock);
		if (upto > b->inval_done) {
			b->inval_done = upto;
			pthread_cond_broadcast(&b->inval_sent);
		}
	}
	b->inval_done = b->inval_seq; /* nothing more will be sent: no one waits */
	pthread_cond_broadcast(&b->inval_sent);
	pthread_mutex_unlock(&b->lock);
	return NULL;
}

int batch_init(struct embfs *fs)
{
	struct batch *b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->fs = fs;
	pthread_mutex_init(&b->lock, NULL);
	pthread_cond_init(&b->pf_wake, NULL);
	pthread_cond_init(&b->inval_wake, NULL);
	pthread_cond_init(&b->inval_sent, NULL);
	int ret = -pthread_create(&b->pf_thread, NULL, pf_main, b);
	if (ret)
		goto out_free;
	ret = -pthread_create(&b->inval_thread, NULL, inval_main, b);
	if (ret)
		goto out_pf;
	fs->batch = b;
	return 0;
out_pf:
	pthread_mutex_lock(&b->lock);
	b->stop = 1;
	pthread_cond_broadcast(&b->pf_wake);
	pthread_mutex_unlock(&b->lock);
	pthread_join(b->pf_thread, NULL);
out_free:
	pthread_cond_destroy(&b->inval_sent);
	pthread_cond_destroy(&b->inval_wake);
	pthread_cond_destroy(&b->pf_wake);
	pthread_mutex_destroy(&b->lock);
	free(b);
	return ret;
}

/* At unmount: queued prefetches are dropped, queued invalidations sent. */
void batch_destroy(struct embfs *fs)
{
	struct batch *b = fs->batch;
	if (!b)
		return;
	pthread_mutex_lock(&b->lock);
	b->stop = 1;
	pthread_cond_broadcast(&b->pf_wake);
	pthread_cond_broadcast(&b->inval_wake);
	pthread_mutex_unlock(&b->lock);
	pthread_join(b->pf_thread, NULL);
	pthread_join(b->inval_thread, NULL);
	fs->batch = NULL;
	free(b->inval);
	pthread_cond_destroy(&b->inval_sent);
	pthread_cond_destroy(&b->inval_wake);
	pthread_cond_destroy(&b->pf_wake);
	pthread_mutex_destroy(&b->lock);
	free(b);
}

/* ---- prefetches and their pins --------------------------------------- */

void batch_prefetch_ids(struct embfs *fs, struct bfd *f, const struct btarget *t, const uint64_t *ids, uint32_t n)
{
	struct batch *b = fs->batch;
	INC(b, pf_rows, n);
	struct pfjob *j = t->cached ? malloc(sizeof(*j) + n * sizeof(uint64_t)) : NULL;
	if (!j) {
		INC(b, pf_skipped, n);
		return;
	}
	size_t k = 0;
	uint32_t i = 0;
	pthread_mutex_lock(&f->pf_lock);
	for (; i < n && f->pf.n < PF_MAX_PER_FD; i++) {
		int r = pf_add(&f->pf, t->id, ids[i]);
		if (r < 0)
			break;
		if (r == 1)
			j->rows[k++] = ids[i];
	}
	pthread_mutex_unlock(&f->pf_lock);
	INC(b, pf_skipped, n - i);
	if (!k) {
		free(j);
		return;
	}
	j->next = NULL;
	j->f = f;
	j->table = t->id;
	j->row_size = t->row_size;
	j->n = k;
	atomic_fetch_add(&f->refs, 1);
	pthread_mutex_lock(&b->lock);
	if (b->tail)
		b->tail->next = j;
	else
		b->head = j;
	b->tail = j;
	pthread_cond_signal(&b->pf_wake);
	pthread_mutex_unlock(&b->lock);
}

uint32_t batch_pins_take(struct embfs *fs, struct bfd *f, const struct btarget *t, const uint64_t *ids,
			 uint32_t n)
{
	uint32_t nun = 0;
	pthread_mutex_lock(&f->pf_lock);
	if (f->pf.n && f->unpin_cap < n) {
		uint64_t *p = realloc(f->unpin, n * sizeof(*p));
		if (p) {
			f->unpin = p;
			f->unpin_cap = n;
		}
	}
	for (uint32_t i = 0; i < n && f->pf.n && f->unpin_cap >= n; i++) {
		struct pfent *e = pf_find(&f->pf, t->id, ids[i]);
		if (!e)
			continue;
		if (e->state == PF_PINNED)
			f->unpin[nun++] = ids[i];
		else
			INC(fs->batch, pf_late, 1);
		pf_del(&f->pf, e);
	}
	pthread_mutex_unlock(&f->pf_lock);
	return nun;
}

void batch_pins_drop(struct embfs *fs, struct bfd *f, uint32_t table, uint32_t nun)
{
	for (uint32_t i = 0; i < nun; i++)
		cache_unpin(fs->fr.cache, table, f->unpin[i]);
	if (nun) {
		INC(fs->batch, pf_consumed, nun);
		DEC(fs->batch, pf_held, nun);
	}
}

uint64_t batch_inval(struct embfs *fs, uint64_t ino)
{
	return fs->batch ? inval_queue(fs->batch, ino) : 0;
}

int batch_inval_wait(struct embfs *fs, uint64_t seq, unsigned secs)
{
	struct batch *b = fs->batch;
	struct timespec until;
	int ret = 0;
	if (!b || !seq)
		return 0;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += secs;
	pthread_mutex_lock(&b->lock);
	while (!ret && b->inval_done < seq)
		if (pthread_cond_timedwait(&b->inval_sent, &b->lock, &until) == ETIMEDOUT)
			ret = -ETIMEDOUT;
	pthread_mutex_unlock(&b->lock);
	return ret;
}

/* ---- an fd's state ------------------------------------------------------ */

struct bfd *batch_fd_new(struct embfs *fs)
{
	struct bfd *f = fs->batch ? calloc(1, sizeof(*f)) : NULL;
	if (!f)
		return NULL;
	pthread_mutex_init(&f->lock, NULL);
	pthread_mutex_init(&f->pf_lock, NULL);
	atomic_init(&f->refs, 1);
	return f;
}

void batch_fd_close(struct embfs *fs, struct bfd *f)
{
	struct batch *b = fs->batch;
	uint64_t n = 0;
	/* A READ's reply is written under f->lock, and the kernel may send
	 * RELEASE as soon as the reply is in, before the worker that wrote it
	 * leaves fuse_reply_buf: wait for it before resp can be freed (as
	 * .embfs/stats, fs/ctl.c). */
	pthread_mutex_lock(&f->lock);
	pthread_mutex_unlock(&f->lock);
	pthread_mutex_lock(&f->pf_lock);
	f->closing = 1;
	for (uint32_t i = 0; i < f->pf.cap; i++) {
		struct pfent *e = &f->pf.e[i];
		if (e->state == PF_PINNED) {
			cache_unpin(fs->fr.cache, e->table, e->row);
			n++;
		}
		e->state = 0;
	}
	f->pf.n = 0;
	pthread_mutex_unlock(&f->pf_lock);
	if (b && n) {
		INC(b, pf_released, n);
		DEC(b, pf_held, n);
	}
	bfd_put(f);
}

void batch_stats(struct embfs *fs, struct stats_out *o)
{
	struct batch *b = fs->batch;
	if (!b)
		return;
#define P(key, metric, type, help, field) STATS_PUT(o, key, metric, type, help, atomic_load(&b->field))
	P("batch.write_requests", "batch_write_requests_total", COUNTER, "WRITE requests on .embfs/rows", writes);
	P("batch.read_requests", "batch_read_requests_total", COUNTER, "READ requests on .embfs/rows", reads);
	P("batch.gathers", "batch_gathers_total", COUNTER, "Gathers served by .embfs/rows", gathers);
	P("batch.gather_rows", "batch_gather_rows_total", COUNTER, "Rows gathered by .embfs/rows", gather_rows);
	P("batch.scatters", "batch_scatters_total", COUNTER, "Scatters served by .embfs/rows", scatters);
	P("batch.scatter_rows", "batch_scatter_rows_total", COUNTER, "Rows scattered by .embfs/rows", scatter_rows);
	P("batch.multis", "batch_multis_total", COUNTER, "MULTI requests (many tables) served by .embfs/rows", multis);
	P("batch.pushes", "batch_pushes_total", COUNTER, "Pushes (gradients applied in place) served by .embfs/rows",
	  pushes);
	P("batch.push_rows", "batch_push_rows_total", COUNTER, "Gradient rows applied by pushes", push_rows);
	P("batch.prefetches", "batch_prefetches_total", COUNTER, "Prefetch requests on .embfs/rows", prefetches);
	P("batch.errors", "batch_errors_total", COUNTER, "Requests on .embfs/rows answered with an error", errors);
	P("batch.page_cache_invalidations", "batch_page_cache_invalidations_total", COUNTER,
	  "Kernel page cache invalidations of tables after scatters", invals);
	P("prefetch.rows", "prefetch_rows_total", COUNTER, "Rows asked for by prefetches", pf_rows);
	P("prefetch.pinned", "prefetch_pinned_rows_total", COUNTER, "Prefetched rows pinned in the row cache", pf_pinned);
	P("prefetch.consumed", "prefetch_consumed_rows_total", COUNTER, "Prefetched rows a gather then read", pf_consumed);
	P("prefetch.late", "prefetch_late_rows_total", COUNTER, "Prefetched rows gathered before their pin", pf_late);
	P("prefetch.released", "prefetch_released_rows_total", COUNTER, "Prefetch pins dropped at close", pf_released);
	P("prefetch.failed", "prefetch_failed_rows_total", COUNTER, "Prefetched rows that could not be pinned", pf_failed);
	P("prefetch.skipped", "prefetch_skipped_rows_total", COUNTER,
	  "Prefetched rows dropped because the file was closed first", pf_skipped);
	P("prefetch.pins_held", "prefetch_pinned_rows", GAUGE, "Rows pinned by prefetches now", pf_held);
#undef P
}
