/*
 * cache/writeback.c: the cache's write-back policy.  Promises of room below
 * (a write's credit, and promises given back in runs after the shard locks
 * are let go); write-back rounds (dirty rows staged under their shard's
 * lock, handed to ops->writeback with no lock held, settled after); the
 * flusher thread that runs a round every dirty_age_ms / 2; the copies of
 * snapshots' versions a write makes before overwriting them (preserved
 * copies), written back before the newer bytes; cache_flush() and
 * cache_set_snapshot().  The per-row part of the policy (what a write needs,
 * marking a row dirty) is inline in cache_int.h, for the write path.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache_int.h"

#define WB_BATCH 16384 /* rows per write-back round */

/* ---- promises ----------------------------------------------------------- */

/* The credit ran out: reserve one unit below.  No lock held. */
int cache_credit_reserve(struct cache *c, struct credit *cr, uint32_t table, uint32_t rs)
{
	int r = c->ops->reserve(c->ctx, table, rs, 1);
	if (!r)
		cr->spare++;
	return r;
}

/* The write is over: units it reserved and did not spend go to the caller's
 * credit (the caller gives back what is left), or below.  No lock held. */
void cache_credit_end(struct cache *c, struct credit *cr, uint32_t table, uint32_t rs)
{
	if (!cr->spare)
		return;
	if (cr->caller)
		*cr->caller += cr->spare;
	else
		c->ops->reserve(c->ctx, table, rs, (int)-cr->spare);
	cr->spare = 0;
}

/* Add n promises of (table, rs) to g.  No shard lock held: a run of another
 * table or size is given back now. */
void cache_giveback_add(struct cache *c, struct giveback *g, uint32_t table, uint32_t rs, int n)
{
	if (g->n && (g->table != table || g->rs != rs)) {
		c->ops->reserve(c->ctx, g->table, g->rs, -g->n);
		g->n = 0;
	}
	if (n) {
		g->table = table;
		g->rs = rs;
		g->n += n;
	}
}

void cache_giveback_end(struct cache *c, struct giveback *g)
{
	if (g->n)
		c->ops->reserve(c->ctx, g->table, g->rs, -g->n);
	g->n = 0;
}

/* ---- write-back ------------------------------------------------------- */

struct staged {
	uint32_t shard, idx;
	uint32_t table, rs;
	uint64_t row;
	uint64_t batch;
	size_t off;  /* of the row bytes in stage.buf */
	int prom;    /* the entry's promise, taken along (F_PROM) */
};

struct stage {
	struct staged *v;
	size_t n, cap;
	char *buf;
	size_t used, bufcap;
};

/* Stage entry e (busy from now on; its promise goes with it).  Shard lock held. */
static int stage_add(struct stage *s, uint32_t shard, uint32_t idx, struct centry *e, const char *data,
		     uint32_t rs, uint64_t batch)
{
	if (s->n == s->cap) {
		size_t nc = s->cap ? 2 * s->cap : 256;
		struct staged *p = realloc(s->v, nc * sizeof(*p));
		if (!p)
			return -ENOMEM;
		s->v = p;
		s->cap = nc;
	}
	if (s->used + rs > s->bufcap) {
		size_t nc = s->bufcap ? 2 * s->bufcap : 1 << 20;
		while (nc < s->used + rs)
			nc *= 2;
		char *p = realloc(s->buf, nc);
		if (!p)
			return -ENOMEM;
		s->buf = p;
		s->bufcap = nc;
	}
	memcpy(s->buf + s->used, data, rs);
	s->v[s->n++] = (struct staged){ shard, idx, e->table, rs, e_row(e), batch, s->used,
					!!(e->flags & F_PROM) };
	e->flags = (uint8_t)((e->flags & ~F_PROM) | F_BUSY);
	s->used += rs;
	return 0;
}

/* One version to write back: a staged dirty row or a preserved copy. */
struct wbitem {
	uint32_t table;
	uint32_t rank;     /* 0 for a row's oldest pending version, 1 for the next... */
	uint64_t row, batch;
	const char *data;
	size_t staged;     /* index into the stage, or SIZE_MAX */
	struct pres *p;    /* or the preserved copy */
	int done;
};

static int cmp_item_row(const void *a, const void *b)
{
	const struct wbitem *x = a, *y = b;
	if (x->table != y->table)
		return x->table < y->table ? -1 : 1;
	if (x->row != y->row)
		return x->row < y->row ? -1 : 1;
	return x->batch < y->batch ? -1 : x->batch > y->batch;
}

static int cmp_item_rank(const void *a, const void *b)
{
	const struct wbitem *x = a, *y = b;
	if (x->rank != y->rank)
		return x->rank < y->rank ? -1 : 1;
	return x->table < y->table ? -1 : x->table > y->table;
}

/* A preserved copy to write back at the next round. */
static void pres_push(struct cache *c, struct pres *p)
{
	pthread_mutex_lock(&c->pres_lock);
	p->next = c->pres;
	c->pres = p;
	c->npres++;
	pthread_mutex_unlock(&c->pres_lock);
}

/* Every preserved copy made so far (*np of them), for a write-back round. */
static struct pres *pres_take(struct cache *c, size_t *np)
{
	pthread_mutex_lock(&c->pres_lock);
	struct pres *list = c->pres;
	*np = c->npres;
	c->pres = NULL;
	c->npres = 0;
	pthread_mutex_unlock(&c->pres_lock);
	return list;
}

/* A preserved version of (table, row) reached the store.  If the row's
 * entry still counts as new (a hole below), it no longer is one for the
 * counters.  The copy's promise was for the version after it, which keeps
 * it: that is now the row's next version over its stored one, so the
 * promise moves to the entry (F_PROM), and the one the entry held, spent on
 * the copy's own write-back, is given back.  Returns the promises to give
 * back (shard lock not held). */
static int stored_below(struct cache *c, uint32_t table, uint64_t row)
{
	uint64_t h = hash(table, row);
	struct shard *sh = &c->sh[c->shard_shift == 64 ? 0 : (uint32_t)(h >> c->shard_shift)];
	int give = 1;
	pthread_mutex_lock(&sh->lock);
	uint32_t idx = lookup(sh, table, row, h);
	if (idx != NIL && (sh->e[idx].flags & F_DIRTY)) { /* always: drops drain copies first */
		struct centry *e = &sh->e[idx];
		if ((e->flags & F_NEW) && !(e->flags & F_STORED)) {
			e->flags |= F_STORED;
			TS_SUB(tst(c, table), new_dirty, 1);
		}
		give = !!(e->flags & F_PROM);
		e->flags |= F_PROM;
	}
	pthread_mutex_unlock(&sh->lock);
	return give;
}

/* The versions of a round in write-back order: ranked per row in batch
 * order (0 for a row's oldest pending version), then by rank and table. */
static void items_order(struct wbitem *it, size_t n, const struct stage *s, struct pres *plist)
{
	size_t k = 0;
	for (size_t i = 0; i < s->n; i++)
		it[k++] = (struct wbitem){ s->v[i].table, 0, s->v[i].row, s->v[i].batch,
					   s->buf + s->v[i].off, i, NULL, 0 };
	for (struct pres *p = plist; p; p = p->next)
		it[k++] = (struct wbitem){ p->table, 0, p->row, p->batch, p->data, SIZE_MAX, p, 0 };
	qsort(it, n, sizeof(*it), cmp_item_row);
	int ranked = 0;
	for (size_t i = 1; i < n; i++)
		if (it[i].table == it[i - 1].table && it[i].row == it[i - 1].row) {
			it[i].rank = it[i - 1].rank + 1;
			ranked = 1;
		}
	if (ranked) /* else every rank is 0: already in (rank, table) order */
		qsort(it, n, sizeof(*it), cmp_item_rank);
}

/* Hand the ordered versions below, one ops->writeback per rank and table,
 * marking those that got there (done).  A table whose write-back fails
 * keeps the rest of its rows for the next round (a later rank must not
 * land before an earlier one), but the other tables go on: one failing
 * table never holds up the others.  The first error, or 0. */
static int writeback_items(struct cache *c, struct wbitem *it, size_t n, struct cache_wb *wb)
{
	uint32_t *failed = NULL;
	size_t nfailed = 0;
	int stop = 0; /* no memory to remember a failed table: hold the rest back */
	int ret = 0;
	for (size_t i = 0; i < n;) {
		size_t j = i;
		while (j < n && it[j].rank == it[i].rank && it[j].table == it[i].table) {
			wb[j - i] = (struct cache_wb){ it[j].row, it[j].data, it[j].batch };
			j++;
		}
		int skip = stop;
		for (size_t f = 0; f < nfailed && !skip; f++)
			skip = failed[f] == it[i].table;
		int r = skip ? -EAGAIN : c->ops->writeback(c->ctx, it[i].table, wb, j - i);
		if (r && !skip) {
			uint32_t *p = realloc(failed, (nfailed + 1) * sizeof(*failed));
			if (p) {
				failed = p;
				failed[nfailed++] = it[i].table;
			} else {
				stop = 1;
			}
			if (!ret)
				ret = r;
		}
		for (size_t m = i; m < j; m++)
			it[m].done = r == 0;
		i = j;
	}
	free(failed);
	return ret;
}

/* After the write-back: staged rows' outcome into ok[]; preserved copies
 * that got below are freed (their promises settled, see stored_below(),
 * into g), the others wait for the next round, oldest first. */
static void items_settle(struct cache *c, struct wbitem *it, size_t n, int *ok, struct giveback *g)
{
	for (size_t i = 0; i < n; i++) {
		struct pres *p = it[i].p;
		if (it[i].staged != SIZE_MAX) {
			ok[it[i].staged] = it[i].done;
		} else if (it[i].done) {
			int give = stored_below(c, p->table, p->row);
			if (give && c->ops->reserve)
				cache_giveback_add(c, g, p->table, p->rs, give);
			free(p);
		} else {
			pres_push(c, p);
		}
	}
}

/* Staged row v after its write-back (ok: it got below): no longer busy;
 * clean unless written meanwhile.  The promises to give back. */
static int staged_settle(struct cache *c, const struct staged *v, int ok)
{
	struct shard *sh = &c->sh[v->shard];
	int give = 0;
	pthread_mutex_lock(&sh->lock);
	struct centry *e = &sh->e[v->idx];
	struct tstat *t = tst(c, e->table);
	e->flags &= (uint8_t)~F_BUSY;
	if (ok) {
		sh->writebacks++;
		TS_ADD(t, writebacks, 1);
		give = v->prom; /* the slot it promised is taken now */
		if (e->flags & F_NEW) {
			if (!(e->flags & F_STORED))
				TS_SUB(t, new_dirty, 1);
			e->flags &= (uint8_t)~(F_NEW | F_STORED);
		}
		if (e->flags & F_REDIRTY) {
			/* written meanwhile: its F_PROM is for the write-back
			 * over the version just stored */
			e->flags &= (uint8_t)~F_REDIRTY;
		} else {
			give += !!(e->flags & F_PROM);
			e->flags &= (uint8_t)~(F_DIRTY | F_PROM);
			sh->ndirty--;
			TS_SUB(t, dirty, 1);
			base_set(c, e, v->batch);
		}
	} else {
		/* still dirty over the same stored version: the promise
		 * comes back (one is enough) */
		e->flags &= (uint8_t)~F_REDIRTY;
		if (v->prom && (e->flags & F_PROM))
			give = 1;
		else if (v->prom)
			e->flags |= F_PROM;
	}
	pthread_mutex_unlock(&sh->lock);
	return give;
}

/*
 * Write back the staged rows and every preserved copy made so far, then
 * settle their flags.  A row may have several pending versions (preserved
 * copies for snapshots, then its current bytes): they reach the store in
 * batch order, one commit per rank, so a snapshot's version is never written
 * after a newer one.  Copies preserved after this call are newer than the
 * staged bytes of their row (or the row was not staged), so they can wait
 * for the next round.  Promises of what reached the layer below are given
 * back.  flush_lock held; no shard lock held.
 */
static int stage_commit(struct cache *c, struct stage *s)
{
	size_t np;
	struct pres *plist = pres_take(c, &np);
	size_t n = s->n + np;
	if (n == 0)
		return 0;
	int ret;
	struct giveback g = { 0 };
	struct wbitem *it = malloc(n * sizeof(*it));
	struct cache_wb *wb = malloc(n * sizeof(*wb));
	int *ok = calloc(s->n ? s->n : 1, sizeof(*ok));
	if (it && wb && ok) {
		items_order(it, n, s, plist);
		ret = writeback_items(c, it, n, wb);
		items_settle(c, it, n, ok, &g);
	} else {
		ret = -ENOMEM;
		for (struct pres *p = plist, *nx; p; p = nx) {
			nx = p->next;
			pres_push(c, p);
		}
	}
	for (size_t i = 0; i < s->n; i++) {
		int give = staged_settle(c, &s->v[i], ok && ok[i]);
		if (give && c->ops->reserve)
			cache_giveback_add(c, &g, s->v[i].table, s->v[i].rs, give);
	}
	cache_giveback_end(c, &g);
	free(it);
	free(wb);
	free(ok);
	s->n = 0;
	s->used = 0;
	return ret;
}

static void stage_free(struct stage *s)
{
	free(s->v);
	free(s->buf);
}

/* Which dirty rows a write-back round takes. */
struct pick {
	int64_t table;     /* -1: any */
	int use_age;       /* only rows dirty since before the current flusher round */
	size_t limit;      /* stop after this many rows (0: no limit) */
};

static int picks(struct cache *c, struct shard *sh, struct centry *e, const struct pick *p)
{
	if (!(e->flags & F_VALID) || !(e->flags & F_DIRTY) || (e->flags & F_BUSY))
		return 0;
	if (p->table >= 0 && e->table != (uint32_t)p->table)
		return 0;
	(void)c;
	(void)sh;
	if (p->use_age && e->round == atomic_load_explicit(&c->round, memory_order_relaxed))
		return 0;
	return 1;
}

/* Write back the preserved copies alone.  flush_lock held. */
int cache_drain_preserved(struct cache *c)
{
	struct stage none = { 0 };
	return stage_commit(c, &none);
}

/* Write back the dirty rows `p` picks from the shards [s0, s1).  flush_lock held. */
static int writeback_rounds(struct cache *c, uint32_t s0, uint32_t s1, const struct pick *p)
{
	struct stage st = { 0 };
	int ret = 0;
	size_t taken = 0;
	for (uint32_t si = s0; si < s1; si++) {
		struct shard *sh = &c->sh[si];
		pthread_mutex_lock(&sh->lock);
		for (uint32_t i = 0; i < sh->hwm; i++) {
			struct centry *e = &sh->e[i];
			if (!picks(c, sh, e, p))
				continue;
			if (stage_add(&st, si, i, e, e_data(sh, e), sh->ar[e->cls].rs,
				      full_batch(c, e->batch))) {
				ret = -ENOMEM;
				break;
			}
			taken++;
			if (st.n >= WB_BATCH || (p->limit && taken >= p->limit)) {
				pthread_mutex_unlock(&sh->lock);
				int r = stage_commit(c, &st);
				if (r && !ret)
					ret = r;
				if (p->limit && taken >= p->limit)
					goto out;
				pthread_mutex_lock(&sh->lock);
			}
		}
		pthread_mutex_unlock(&sh->lock);
	}
out:;
	int r = stage_commit(c, &st);
	if (r && !ret)
		ret = r;
	stage_free(&st);
	return ret;
}

static uint64_t oldest_dirty(struct cache *c);

/* Nothing of table is dirty or preserved: a flush of it has nothing to do
 * (an lseek or setxattr of a clean table then scans no shard).  Called with
 * flush_lock held: write-backs in flight are done. */
static int table_clean(struct cache *c, int64_t table)
{
	if (table < 0 || table >= CACHE_MAX_TABLES || atomic_load(&tst(c, (uint32_t)table)->dirty))
		return 0;
	pthread_mutex_lock(&c->pres_lock);
	uint64_t np = c->npres;
	pthread_mutex_unlock(&c->pres_lock);
	return np == 0;
}

int cache_flush(struct cache *c, int64_t table)
{
	struct pick p = { table, 0, 0 };
	pthread_mutex_lock(&c->flush_lock);
	int ret = table_clean(c, table) ? 0 : writeback_rounds(c, 0, c->nshards, &p);
	uint64_t low = table < 0 && !ret ? oldest_dirty(c) : 0;
	pthread_mutex_unlock(&c->flush_lock);
	if (low && c->ops->durable_below)
		c->ops->durable_below(c->ctx, low);
	return ret;
}

void cache_set_snapshot(struct cache *c, uint64_t batch)
{
	uint64_t cur = atomic_load(&c->snap_floor);
	while (cur < batch && !atomic_compare_exchange_weak(&c->snap_floor, &cur, batch))
		;
	atomic_fetch_add(&c->snap_seq, 1); /* after the floor: see below_snapshot() */
}

/* An inserting thread found only dirty rows to evict in its shard. */
int cache_make_clean(struct cache *c, uint32_t si)
{
	struct pick p = { -1, 0, 256 };
	pthread_mutex_lock(&c->flush_lock);
	int ret = writeback_rounds(c, si, si + 1, &p);
	pthread_mutex_unlock(&c->flush_lock);
	return ret;
}

/* Lowest batch id among dirty rows and preserved versions (UINT64_MAX when
 * none): every write of an earlier batch is in the layer below. */
static uint64_t oldest_dirty(struct cache *c)
{
	uint64_t low = UINT64_MAX;
	pthread_mutex_lock(&c->pres_lock);
	for (struct pres *p = c->pres; p; p = p->next)
		if (p->batch < low)
			low = p->batch;
	pthread_mutex_unlock(&c->pres_lock);
	for (uint32_t si = 0; si < c->nshards; si++) {
		struct shard *sh = &c->sh[si];
		pthread_mutex_lock(&sh->lock);
		if (sh->ndirty)
			for (uint32_t i = 0; i < sh->hwm; i++) {
				struct centry *e = &sh->e[i];
				if ((e->flags & (F_VALID | F_DIRTY)) == (F_VALID | F_DIRTY) &&
				    full_batch(c, e->batch) < low)
					low = full_batch(c, e->batch);
			}
		pthread_mutex_unlock(&sh->lock);
	}
	return low;
}

void cache_dirty_kick(struct cache *c)
{
	if (!atomic_load_explicit(&c->kicked, memory_order_relaxed) && !atomic_exchange(&c->kicked, 1))
		pthread_cond_signal(&c->wake);
}

static void *flusher_main(void *arg)
{
	struct cache *c = arg;
	uint32_t period = c->dirty_age_ms / 2 ? c->dirty_age_ms / 2 : 1;
	pthread_mutex_lock(&c->wake_lock);
	while (!c->stop) {
		struct timespec t;
		clock_gettime(CLOCK_REALTIME, &t);
		t.tv_sec += period / 1000;
		t.tv_nsec += (long)(period % 1000) * 1000000L;
		if (t.tv_nsec >= 1000000000L) {
			t.tv_sec++;
			t.tv_nsec -= 1000000000L;
		}
		if (!atomic_load(&c->kicked)) /* a kick while the last round ran is not lost */
			pthread_cond_timedwait(&c->wake, &c->wake_lock, &t);
		if (c->stop)
			break;
		int kicked = atomic_exchange(&c->kicked, 0);
		pthread_mutex_unlock(&c->wake_lock);
		/* rows dirtied before this round began go now: none waits past
		 * two rounds, i.e. dirty_age_ms; after a kick, every dirty row */
		struct pick p = { -1, !kicked, 0 };
		pthread_mutex_lock(&c->flush_lock);
		int r = writeback_rounds(c, 0, c->nshards, &p);
		atomic_fetch_add(&c->round, 1);
		uint64_t low = r ? 0 : oldest_dirty(c);
		pthread_mutex_unlock(&c->flush_lock);
		if (low && c->ops->durable_below)
			c->ops->durable_below(c->ctx, low);
		pthread_mutex_lock(&c->wake_lock);
	}
	pthread_mutex_unlock(&c->wake_lock);
	return NULL;
}

int cache_flusher_start(struct cache *c)
{
	if (!c->dirty_age_ms)
		return 0;
	if (pthread_create(&c->flusher, NULL, flusher_main, c))
		return -EAGAIN;
	c->has_flusher = 1;
	return 0;
}

void cache_flusher_stop(struct cache *c)
{
	if (!c->has_flusher)
		return;
	pthread_mutex_lock(&c->wake_lock);
	c->stop = 1;
	pthread_cond_signal(&c->wake);
	pthread_mutex_unlock(&c->wake_lock);
	pthread_join(c->flusher, NULL);
	c->has_flusher = 0;
}

/* ---- preserved copies ---------------------------------------------------- */

/* The entry holds a snapshot's version (write_needs() said W_COPY): copy its
 * bytes out first, so the snapshot gets them at write-back; the copy holds
 * the write's promise.  Shard lock held. */
int cache_preserve(struct cache *c, struct shard *sh, struct centry *e)
{
	uint32_t rs = sh->ar[e->cls].rs;
	struct pres *p = malloc(sizeof(*p) + rs);
	if (!p)
		return -ENOMEM;
	p->row = e_row(e);
	p->batch = full_batch(c, e->batch);
	p->table = e->table;
	p->rs = rs;
	memcpy(p->data, e_data(sh, e), rs);
	pres_push(c, p);
	return 0;
}

void cache_preserved_free(struct cache *c)
{
	for (struct pres *p = c->pres, *nx; p; p = nx) {
		nx = p->next;
		free(p);
	}
	c->pres = NULL;
	c->npres = 0;
}
