/*
 * cache/cache.c: the cache's front, the calls of embfs/cache.h that read and
 * change rows.  cache_create() and cache_destroy(); reads of a row, of many
 * rows and of a range (misses fetched through ops and cached, or not, for a
 * range); writes of a row and of many rows (a hit written in place, a miss
 * fetched, merged and inserted, or written through when its shard has no
 * room); the batch path (rows grouped by shard, each shard locked once, the
 * lookups pipelined with prefetches); drops, pins and statistics.  Entries
 * come from the mechanism (rows.c), promises, snapshots' copies and room
 * made by write-back from the policy (writeback.c); cache_int.h has what
 * they share.  cache_flush() and cache_set_snapshot() are writeback.c's.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache_int.h"

/* ---- life cycle --------------------------------------------------------- */

struct cache *cache_create(const struct cache_conf *conf, const struct cache_ops *ops, void *ctx)
{
	uint64_t bytes = conf->bytes;
	uint32_t dirty_age_ms = conf->dirty_age_ms;
	uint32_t ns = conf->shards ? conf->shards : NSHARDS;
	if (ns > NSHARDS || (ns & (ns - 1)))
		return NULL;
	struct cache *c; /* shards are cache-line aligned */
	if (posix_memalign((void **)&c, 64, sizeof(*c)))
		return NULL;
	memset(c, 0, sizeof(*c));
	c->nshards = ns;
	c->shard_shift = 64 - (uint32_t)__builtin_ctz(ns);
	c->ops = ops;
	c->ctx = ctx;
	c->budget = bytes;
	c->dirty_age_ms = dirty_age_ms;
	clock_gettime(CLOCK_MONOTONIC, &c->t0);
	pthread_mutex_init(&c->flush_lock, NULL);
	pthread_mutex_init(&c->ts_lock, NULL);
	pthread_mutex_init(&c->wake_lock, NULL);
	pthread_mutex_init(&c->pres_lock, NULL);
	pthread_cond_init(&c->wake, NULL);
	c->ts = calloc(CACHE_MAX_TABLES, sizeof(*c->ts));
	if (!c->ts)
		goto fail;
	if (cache_shards_init(c, bytes))
		goto fail;
	if (cache_flusher_start(c))
		goto fail;
	return c;
fail:
	cache_destroy(c);
	return NULL;
}

void cache_destroy(struct cache *c)
{
	if (!c)
		return;
	cache_flusher_stop(c);
	cache_shards_free(c);
	if (c->ts)
		for (uint32_t i = 0; i < CACHE_MAX_TABLES; i++)
			free(atomic_load(&c->ts[i]));
	free(c->ts);
	pthread_mutex_destroy(&c->flush_lock);
	pthread_mutex_destroy(&c->ts_lock);
	pthread_mutex_destroy(&c->wake_lock);
	cache_preserved_free(c);
	pthread_mutex_destroy(&c->pres_lock);
	pthread_cond_destroy(&c->wake);
	free(c);
}

/* ---- one row ------------------------------------------------------------ */

/* A missed row fetched from below (tmp): cached, unless it is a hole or
 * the fill raced a drop (cacheable 0; else fetch's answer, 1 or
 * CACHE_STORED_OUT), and its bytes [off, off + len) into
 * buf, from the cache if it was filled meanwhile (that is newer: then 1). */
static int read_fill(struct cache *c, struct shard *sh, uint32_t si, uint32_t table, uint32_t rs, uint64_t row,
		      uint64_t h, const char *tmp, int cacheable, uint64_t sbatch, uint32_t off, uint32_t len,
		      void *buf)
{
	struct tstat *t = tst(c, table);
	uint32_t idx = NIL;
	int err = 0, cached = 0;
	pthread_mutex_lock(&sh->lock);
	if (cacheable && (idx = lookup(sh, table, row, h)) != NIL) {
		sh->e[idx].flags |= F_REF;
		tmp = e_data(sh, &sh->e[idx]);
		cached = 1;
	} else if (cacheable) {
		idx = cache_entry_insert(c, sh, table, rs, row, h, &err);
		if (idx != NIL) {
			memcpy(e_data(sh, &sh->e[idx]), tmp, rs);
			base_fill(c, &sh->e[idx], sbatch, cacheable);
		} else {
			sh->bypasses++;
		}
	}
	memcpy(buf, tmp + off, len);
	sh->misses++;
	pthread_mutex_unlock(&sh->lock);
	TS_ADD(t, misses, 1);
	if (cacheable && idx == NIL) {
		TS_ADD(t, bypasses, 1);
		if (err == -EAGAIN)
			cache_make_clean(c, si); /* next miss finds room */
	}
	return cached;
}

/* cache_read(), and 1 if the row is stored or written, 0 if a hole. */
static int read_row(struct cache *c, uint32_t table, uint32_t rs, uint64_t row, uint32_t off, uint32_t len,
		    void *buf)
{
	uint64_t h = hash(table, row), sbatch = 0;
	uint32_t si;
	struct shard *sh = shard_of(c, h, &si);
	char sbuf[4096]; /* a miss's row, without a malloc for the usual sizes */

	if (table >= CACHE_MAX_TABLES || (uint64_t)off + len > rs)
		return -EINVAL;
	struct tstat *t = tst(c, table);
	pthread_mutex_lock(&sh->lock);
	uint32_t idx = lookup(sh, table, row, h);
	if (idx != NIL) {
		struct centry *e = &sh->e[idx];
		int stored = e_stored(e);
		memcpy(buf, e_data(sh, e) + off, len);
		e->flags |= F_REF;
		sh->hits++;
		pthread_mutex_unlock(&sh->lock);
		TS_ADD(t, hits, 1);
		return stored;
	}
	pthread_mutex_unlock(&sh->lock);
	uint64_t gen = atomic_load(&t->gen);
	char *tmp = rs <= sizeof(sbuf) ? sbuf : malloc(rs);
	if (!tmp)
		return -ENOMEM;
	int ret = c->ops->fetch(c->ctx, table, row, tmp, &sbatch);
	if (ret >= 0 && read_fill(c, sh, si, table, rs, row, h, tmp, atomic_load(&t->gen) == gen ? ret : 0,
				  sbatch, off, len, buf))
		ret = 1;
	ret = ret > 1 ? 1 : ret; /* CACHE_STORED_OUT: stored */
	if (tmp != sbuf)
		free(tmp);
	return ret;
}

int cache_read(struct cache *c, uint32_t table, uint32_t rs, uint64_t row, uint32_t off, uint32_t len,
	       void *buf)
{
	int ret = read_row(c, table, rs, row, off, len, buf);
	return ret < 0 ? ret : 0;
}

/* Write bytes [off, off+len) of cached entry e in `batch`; w from
 * write_needs(), its promise taken.  0, or -ENOMEM with nothing changed.
 * Shard lock held. */
static int apply_write(struct cache *c, struct shard *sh, struct centry *e, int w, uint64_t batch,
		       const void *data, uint32_t off, uint32_t len)
{
	if (w & W_COPY) {
		int r = cache_preserve(c, sh, e);
		if (r)
			return r;
	}
	memcpy(e_data(sh, e) + off, data, len);
	e->flags |= F_REF;
	if (mark_dirty(c, sh, e, batch, w))
		cache_dirty_kick(c);
	return 0;
}

/* What the steps of a write return besides 0 and -errno. */
enum { W_AGAIN = 1, W_MISS, W_NOROOM };

/* A write of [off, off + len) to the row if it is cached (shard lock held,
 * released here): 0 or -errno; W_MISS, not cached; W_AGAIN, a promise was
 * reserved with the lock released: start over, the row may have changed. */
static int write_hit(struct cache *c, struct shard *sh, uint32_t table, uint32_t rs, uint64_t row, uint64_t h,
		     uint32_t off, uint32_t len, const void *data, uint64_t batch, struct credit *cr)
{
	uint32_t idx = lookup(sh, table, row, h);
	if (idx == NIL) {
		pthread_mutex_unlock(&sh->lock);
		return W_MISS;
	}
	struct centry *e = &sh->e[idx];
	int w = write_needs(c, e, batch);
	if ((w & W_PROMISE) && !credit_take(cr)) {
		pthread_mutex_unlock(&sh->lock);
		int r = cache_credit_reserve(c, cr, table, rs);
		return r ? r : W_AGAIN;
	}
	int r = apply_write(c, sh, e, w, batch, data, off, len);
	if (r && (w & W_PROMISE))
		credit_put(cr);
	if (!r)
		sh->hits++;
	pthread_mutex_unlock(&sh->lock);
	if (!r)
		TS_ADD(tst(c, table), hits, 1);
	return r;
}

/* What the layer below said of a row before a write of it (a batch's
 * probe): stored or not, its batch, and the table's gen before the probe. */
struct probed {
	int stored;
	uint64_t sbatch, gen;
};

/* The row after a write of [off, off + len) that missed: its stored bytes
 * (not read for a whole-row write) with data over them, into a malloc'd
 * *base; 1 stored, 0 a hole, -errno.  pr: a whole row's write the batch
 * probed (what the layer below said), NULL: ask it here. */
static int write_base(struct cache *c, uint32_t table, uint32_t rs, uint64_t row, uint32_t off, uint32_t len,
		      const void *data, char **base, uint64_t *sbatch, const struct probed *pr)
{
	char *b = malloc(rs);
	if (!b)
		return -ENOMEM;
	*sbatch = pr ? pr->sbatch : 0;
	int stored = pr ? pr->stored : c->ops->fetch(c->ctx, table, row, off == 0 && len == rs ? NULL : b, sbatch);
	if (stored < 0) {
		free(b);
		return stored;
	}
	memcpy(b + off, data, len);
	*base = b;
	return stored;
}

/* Cache the written row (base) as a new dirty entry: 0 or -errno; W_AGAIN,
 * start over (it was cached or dropped meanwhile, or a promise was reserved
 * with the lock released); W_NOROOM, not cached, *err from cache_entry_insert(). */
static int write_insert(struct cache *c, struct shard *sh, uint32_t table, uint32_t rs, uint64_t row, uint64_t h,
			const char *base, int stored, uint64_t sbatch, uint64_t gen, uint64_t batch, struct credit *cr,
			int *err)
{
	struct tstat *t = tst(c, table);
	uint64_t seq;
	pthread_mutex_lock(&sh->lock);
	if (lookup(sh, table, row, h) != NIL || atomic_load(&t->gen) != gen) {
		pthread_mutex_unlock(&sh->lock);
		return W_AGAIN;
	}
	/* a hole, a version a snapshot keeps or one out of the room below:
	 * its write-back takes a slot without freeing one */
	int need = !stored || stored == CACHE_STORED_OUT || below_snapshot(c, sbatch, &seq);
	int w = c->ops->reserve && need ? W_PROMISE : 0;
	if (w && !credit_take(cr)) {
		pthread_mutex_unlock(&sh->lock);
		int r = cache_credit_reserve(c, cr, table, rs);
		return r ? r : W_AGAIN;
	}
	uint32_t idx = cache_entry_insert(c, sh, table, rs, row, h, err);
	if (idx == NIL) {
		if (w)
			credit_put(cr); /* a write-through needs no promise */
		pthread_mutex_unlock(&sh->lock);
		return W_NOROOM;
	}
	struct centry *e = &sh->e[idx];
	memcpy(e_data(sh, e), base, rs);
	if (!stored)
		e->flags |= F_NEW;
	if (mark_dirty(c, sh, e, batch, w))
		cache_dirty_kick(c);
	sh->misses++;
	pthread_mutex_unlock(&sh->lock);
	TS_ADD(t, misses, 1);
	return 0;
}

/* Nothing evictable: write the row (base) through, invalidating racing fills. */
static int write_through(struct cache *c, struct shard *sh, uint32_t table, uint64_t row, const char *base,
			 uint64_t batch)
{
	struct tstat *t = tst(c, table);
	atomic_fetch_add(&t->gen, 1);
	struct cache_wb wb = { row, base, batch };
	int r = c->ops->writeback(c->ctx, table, &wb, 1);
	atomic_fetch_add(&t->gen, 1);
	pthread_mutex_lock(&sh->lock);
	sh->bypasses++;
	sh->misses++;
	pthread_mutex_unlock(&sh->lock);
	TS_ADD(t, bypasses, 1);
	TS_ADD(t, misses, 1);
	return r;
}

/* Cache base, a missed row as a write leaves it, as a new dirty entry
 * (write_insert); with no room, the shard is cleaned (W_AGAIN: start over;
 * *cleans counts them, 4 at most), then the row written through. */
static int insert_row(struct cache *c, struct shard *sh, uint32_t si, uint32_t table, uint32_t rs, uint64_t row,
		      uint64_t h, const char *base, int stored, uint64_t sbatch, uint64_t gen, uint64_t batch,
		      struct credit *cr, int *cleans)
{
	int err = 0;
	int r = write_insert(c, sh, table, rs, row, h, base, stored, sbatch, gen, batch, cr, &err);
	if (r == W_NOROOM && err == -EAGAIN && (*cleans)++ < 4) {
		r = cache_make_clean(c, si);
		return r ? r : W_AGAIN;
	}
	return r == W_NOROOM ? write_through(c, sh, table, row, base, batch) : r;
}

/* cache_write() spending the units of cr; pr: the row was probed (a whole
 * row's write), NULL: probe it here. */
static int write_one(struct cache *c, uint32_t table, uint32_t rs, uint64_t row, uint32_t off,
		     uint32_t len, const void *data, uint64_t batch, struct credit *cr, const struct probed *pr)
{
	uint64_t h = hash(table, row);
	uint32_t si;
	struct shard *sh = shard_of(c, h, &si);
	for (int cleans = 0;;) {
		pthread_mutex_lock(&sh->lock);
		int r = write_hit(c, sh, table, rs, row, h, off, len, data, batch, cr);
		if (r == W_AGAIN)
			continue;
		if (r != W_MISS)
			return r;
		/* miss: the stored row is the base of a partial write (a probe
		 * made before gen moved is stale: write_insert says W_AGAIN) */
		uint64_t gen = pr ? pr->gen : atomic_load(&tst(c, table)->gen), sbatch;
		char *base;
		int stored = write_base(c, table, rs, row, off, len, data, &base, &sbatch, pr);
		pr = NULL; /* once: a retry probes again */
		if (stored < 0)
			return stored;
		r = insert_row(c, sh, si, table, rs, row, h, base, stored, sbatch, gen, batch, cr, &cleans);
		free(base);
		if (r != W_AGAIN)
			return r;
	}
}

int cache_write(struct cache *c, uint32_t table, uint32_t rs, uint64_t row, uint32_t off, uint32_t len,
		const void *data, uint64_t batch, int64_t *credit)
{
	struct credit cr = { credit, 0 };
	if (table >= CACHE_MAX_TABLES || (uint64_t)off + len > rs)
		return -EINVAL;
	if (batch > atomic_load_explicit(&c->last_batch, memory_order_relaxed))
		atomic_store(&c->last_batch, batch);
	int ret = write_one(c, table, rs, row, off, len, data, batch, &cr, NULL);
	cache_credit_end(c, &cr, table, rs);
	return ret;
}

/* ---- many rows at once (the batch path) -------------------------------
 * Rows are grouped by shard (a stable counting sort, so duplicates keep their
 * request order); each shard is locked once for all its rows.  Their lookups
 * go in blocks of WALK_BLOCK rows, stage by stage over the whole block: the
 * buckets are prefetched, then the chains' first entries, then the second
 * entries of chains whose first is another row's, then each row's entry is
 * found and its bytes prefetched, and only then are the rows copied (or
 * written).  The memory latency of a block's lookups and row bytes overlaps,
 * and each row's bytes have the whole block's time to arrive.  The
 * prefetches go to L2 (prefetcht2), not L1: a block's 128 rows of 256 B and
 * their entries fit there, and they leave L1's miss buffers to the loads
 * (cachewalk, in process: 64-row blocks into L1 took 276-291 us a 4096-row
 * gather; into L2 182-213 us; 128-row blocks into L2 another 5-15% less,
 * 7 pairs of 7: about 64 rows of a 4096-row gather fall in each shard, and
 * at 64 a shard's rows often made a second, short block).  Rows not cached
 * go through cache_read()/cache_write(). */
#define WALK_BLOCK 128

struct rowgroup {
	uint64_t *h;
	uint32_t *ord, *miss, *si;
	uint32_t start[CACHE_MAX_SHARDS + 1];
	size_t nmiss;
	uint8_t *present; /* a read's: 1 = row i stored or cached (may be NULL) */
};

static void rowgroup_free(struct rowgroup *g)
{
	free(g->h);
	free(g->ord);
	free(g->miss);
	free(g->si);
}

static int rowgroup_make(struct cache *c, uint32_t table, const uint64_t *rows, size_t n,
			 struct rowgroup *g)
{
	memset(g, 0, sizeof(*g));
	g->h = malloc(n * sizeof(*g->h));
	g->ord = malloc(n * sizeof(*g->ord));
	g->miss = malloc(n * sizeof(*g->miss));
	g->si = malloc(n * sizeof(*g->si));
	if (!g->h || !g->ord || !g->miss || !g->si) {
		rowgroup_free(g);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		g->h[i] = hash(table, rows[i]);
		shard_of(c, g->h[i], &g->si[i]);
		g->start[g->si[i] + 1]++;
	}
	for (uint32_t s = 0; s < c->nshards; s++)
		g->start[s + 1] += g->start[s];
	uint32_t fill[CACHE_MAX_SHARDS];
	memcpy(fill, g->start, sizeof(fill));
	for (size_t i = 0; i < n; i++)
		g->ord[fill[g->si[i]]++] = (uint32_t)i;
	return 0;
}

static inline void prefetch_entry(struct shard *sh, uint32_t idx)
{
	const char *p = (const char *)&sh->e[idx];
	prefetch_l2(p);
	prefetch_l2(p + sizeof(struct centry) - 1);
}

/* An update's function and its argument (cache_update_rows). */
struct cache_upd {
	cache_update_fn *fn;
	void *ctx;
};

/* A cached row updated in place by u, as apply_write() writes it (w from
 * write_needs(), its promise taken).  Shard lock held. */
static int apply_update(struct cache *c, struct shard *sh, struct centry *e, int w, uint64_t batch,
			const struct cache_upd *u, size_t i)
{
	if (w & W_COPY) {
		int r = cache_preserve(c, sh, e);
		if (r)
			return r;
	}
	u->fn(u->ctx, i, e_data(sh, e), e_stored(e));
	e->flags |= F_REF;
	if (mark_dirty(c, sh, e, batch, w))
		cache_dirty_kick(c);
	return 0;
}

/* The entries of rows ord[0..k) (k <= WALK_BLOCK) into idx[] (NIL: not
 * cached), their bytes prefetched (up to 1 KiB of each).  Shard lock held. */
static void walk_find(struct shard *sh, uint32_t table, uint32_t rs, const uint64_t *rows, const uint64_t *h,
		      const uint32_t *ord, size_t k, uint32_t *idx)
{
	uint32_t lines = rs < 1024 ? rs : 1024;
	for (size_t i = 0; i < k; i++)
		prefetch_l2(bucket_of(sh, h[ord[i]]));
	for (size_t i = 0; i < k; i++) {
		idx[i] = *bucket_of(sh, h[ord[i]]);
		if (idx[i] != NIL)
			prefetch_entry(sh, idx[i]);
	}
	/* the first entry of each chain: the row's, or the next one prefetched */
	uint8_t more[WALK_BLOCK];
	for (size_t i = 0; i < k; i++) {
		uint32_t p = ord[i], x = idx[i];
		more[i] = x != NIL && !e_is(&sh->e[x], table, rows[p]);
		if (more[i] && (idx[i] = sh->e[x].hnext) != NIL)
			prefetch_entry(sh, idx[i]);
	}
	for (size_t i = 0; i < k; i++) {
		uint32_t x = more[i] ? chain_find(sh, idx[i], table, rows[ord[i]]) : idx[i];
		idx[i] = x;
		if (x != NIL) {
			const char *d = e_data(sh, &sh->e[x]);
			for (uint32_t o = 0; o < lines; o += 64)
				prefetch_l2(d + o);
		}
	}
}

/* The rows ord[0..k) of one shard: copied into out (src == NULL) or written
 * from src as cache_write() does on a hit.  Shard lock held.  Rows not cached
 * go to g->miss, and so do rows to write that need a promise cr cannot pay
 * (cache_write() reserves it unlocked; the row's later occurrences go there
 * too, in order).  0 or -errno (a write stops at the first error). */
static int walk_shard(struct cache *c, struct shard *sh, uint32_t table, uint32_t rs,
		      const uint64_t *rows, struct rowgroup *g, const uint32_t *ord, size_t k,
		      char *out, const char *src, const struct cache_upd *upd, uint64_t batch, struct credit *cr,
		      size_t *hits)
{
	uint32_t idx[WALK_BLOCK];
	for (size_t b = 0; b < k; b += WALK_BLOCK) {
		size_t m = k - b < WALK_BLOCK ? k - b : WALK_BLOCK;
		walk_find(sh, table, rs, rows, g->h, ord + b, m, idx);
		for (size_t i = 0; i < m; i++) {
			/* idx[] stays valid: the shard is locked and nothing here
			 * inserts or removes entries (misses wait in g->miss) */
			uint32_t p = ord[b + i], x = idx[i];
			if (x == NIL) {
				g->miss[g->nmiss++] = p;
				continue;
			}
			struct centry *e = &sh->e[x];
			if (src || upd) {
				int w = write_needs(c, e, batch);
				if ((w & W_PROMISE) && !credit_take(cr)) {
					g->miss[g->nmiss++] = p;
					continue;
				}
				int r = upd ? apply_update(c, sh, e, w, batch, upd, p)
					    : apply_write(c, sh, e, w, batch, src + (size_t)p * rs, 0, rs);
				if (r) {
					if (w & W_PROMISE)
						credit_put(cr);
					return r;
				}
			} else {
				memcpy(out + (size_t)p * rs, e_data(sh, e), rs);
				if (!(e->flags & F_REF)) /* a hot row's entry line stays clean */
					e->flags |= F_REF;
				if (g->present)
					g->present[p] = (uint8_t)e_stored(e);
			}
			sh->hits++;
			(*hits)++;
		}
	}
	return 0;
}

static int walk_rows(struct cache *c, uint32_t table, uint32_t rs, const uint64_t *rows,
		     struct rowgroup *g, char *out, const char *src, const struct cache_upd *upd, uint64_t batch,
		     struct credit *cr)
{
	size_t hits = 0;
	int ret = 0;
	for (uint32_t s = 0; s < c->nshards && !ret; s++) {
		size_t k = g->start[s + 1] - g->start[s];
		if (!k)
			continue;
		struct shard *sh = &c->sh[s];
		pthread_mutex_lock(&sh->lock);
		ret = walk_shard(c, sh, table, rs, rows, g, g->ord + g->start[s], k, out, src, upd, batch, cr,
				 &hits);
		pthread_mutex_unlock(&sh->lock);
	}
	TS_ADD(tst(c, table), hits, hits);
	return ret;
}

/* All misses of a batch read with one ops->fetch_rows call (the layer below
 * can then read them from its device in one submission), then cached as
 * cache_read() would.  -ENOSYS: no memory for that, read them one by one. */
static int fetch_misses(struct cache *c, uint32_t table, uint32_t rs, const uint64_t *rows,
			const struct rowgroup *g, char *out)
{
	struct tstat *t = tst(c, table);
	uint64_t *ids = malloc(g->nmiss * sizeof(*ids));
	char *tmp = malloc(g->nmiss * rs);
	uint8_t *stored = malloc(g->nmiss);
	uint64_t *sbatch = calloc(g->nmiss, sizeof(*sbatch));
	int ret = -ENOSYS;
	if (!ids || !tmp || !stored || !sbatch)
		goto out;
	for (size_t i = 0; i < g->nmiss; i++)
		ids[i] = rows[g->miss[i]];
	uint64_t gen = atomic_load(&t->gen);
	ret = c->ops->fetch_rows(c->ctx, table, ids, g->nmiss, tmp, stored, sbatch);
	if (ret < 0)
		goto out;
	ret = 0;
	int raced = atomic_load(&t->gen) != gen;
	for (size_t i = 0; i < g->nmiss; i++) {
		char *dst = out + (size_t)g->miss[i] * rs, *src = tmp + i * rs;
		uint64_t h = hash(table, ids[i]);
		uint32_t si;
		struct shard *sh = shard_of(c, h, &si);
		int err = 0;
		pthread_mutex_lock(&sh->lock);
		uint32_t idx = lookup(sh, table, ids[i], h);
		if (g->present)
			g->present[g->miss[i]] = idx != NIL ? e_stored(&sh->e[idx]) : stored[i] != 0;
		if (idx != NIL) { /* written (or fetched) meanwhile: that is newer */
			struct centry *e = &sh->e[idx];
			memcpy(dst, e_data(sh, e), rs);
			e->flags |= F_REF;
		} else {
			memcpy(dst, src, rs);
			if (stored[i] && !raced) { /* holes are not cached, nor a fill that raced a drop */
				idx = cache_entry_insert(c, sh, table, rs, ids[i], h, &err);
				if (idx != NIL) {
					memcpy(e_data(sh, &sh->e[idx]), src, rs);
					base_fill(c, &sh->e[idx], sbatch[i], stored[i]);
				} else {
					sh->bypasses++;
				}
			}
		}
		sh->misses++;
		pthread_mutex_unlock(&sh->lock);
		TS_ADD(t, misses, 1);
		if (err == -EAGAIN) {
			TS_ADD(t, bypasses, 1);
			cache_make_clean(c, si);
		}
	}
out:
	free(ids);
	free(tmp);
	free(stored);
	free(sbatch);
	return ret;
}

/* Row i one at a time into out (and present[i]); 0 or -errno. */
static int read_each(struct cache *c, uint32_t table, uint32_t rs, const uint64_t *rows, const uint32_t *idx,
		     size_t n, char *out, uint8_t *present)
{
	for (size_t k = 0; k < n; k++) {
		size_t i = idx ? idx[k] : k;
		int r = read_row(c, table, rs, rows[i], 0, rs, out + i * rs);
		if (r < 0)
			return r;
		if (present)
			present[i] = (uint8_t)r;
	}
	return 0;
}

int cache_read_rows(struct cache *c, uint32_t table, uint32_t rs, const uint64_t *rows, size_t n,
		    void *buf, uint8_t *present)
{
	char *out = buf;
	struct rowgroup g;
	int ret = 0;
	if (table >= CACHE_MAX_TABLES || n > UINT32_MAX)
		return -EINVAL;
	if (rowgroup_make(c, table, rows, n, &g)) /* one at a time, then */
		return read_each(c, table, rs, rows, NULL, n, out, present);
	g.present = present;
	walk_rows(c, table, rs, rows, &g, out, NULL, NULL, 0, NULL);
	if (g.nmiss > 1 && c->ops->fetch_rows) {
		ret = fetch_misses(c, table, rs, rows, &g, out);
		if (ret != -ENOSYS) {
			rowgroup_free(&g);
			return ret;
		}
		ret = 0;
	}
	ret = read_each(c, table, rs, rows, g.miss, g.nmiss, out, present);
	rowgroup_free(&g);
	return ret;
}

int cache_read_range(struct cache *c, uint32_t table, uint32_t rs, uint64_t first, size_t n, void *buf,
		     uint8_t *present)
{
	if (table >= CACHE_MAX_TABLES || n > UINT32_MAX)
		return -EINVAL;
	uint64_t *ids = malloc((n ? n : 1) * sizeof(*ids));
	if (!ids)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		ids[i] = first + i;
	if (!c->ops->fetch_range) {
		int ret = cache_read_rows(c, table, rs, ids, n, buf, present);
		free(ids);
		return ret;
	}
	struct tstat *t = tst(c, table);
	uint8_t *skip = NULL;
	size_t hits = 0;
	int ret = 0;
	/* No cached row of the table now: the layer below holds every row as
	 * it is now (a write that caches one later is concurrent with this
	 * read).  Otherwise the cached rows are copied out first, and the rest
	 * fetched: a row cached after its shard was walked was written while
	 * this read ran, so either bytes are right. */
	if (atomic_load_explicit(&t->rows, memory_order_acquire)) {
		struct rowgroup g;
		skip = malloc(n);
		if (!skip || rowgroup_make(c, table, ids, n, &g)) {
			free(skip);
			ret = cache_read_rows(c, table, rs, ids, n, buf, present);
			free(ids);
			return ret;
		}
		g.present = present;
		walk_rows(c, table, rs, ids, &g, buf, NULL, NULL, 0, NULL);
		memset(skip, 1, n);
		for (size_t i = 0; i < g.nmiss; i++)
			skip[g.miss[i]] = 0;
		hits = n - g.nmiss;
		rowgroup_free(&g);
	}
	free(ids);
	if (hits < n)
		ret = c->ops->fetch_range(c->ctx, table, first, n, buf, skip, present);
	free(skip);
	TS_ADD(t, misses, n - hits);
	TS_ADD(t, scan_misses, n - hits);
	atomic_fetch_add_explicit(&c->scan_misses, n - hits, memory_order_relaxed);
	return ret < 0 ? ret : 0;
}

/* The misses of a batch of rows, probed in one ops->fetch_rows call (their
 * bytes into buf, miss i at buf + i * row size, unless buf is NULL: a batch
 * of whole-row writes needs none): an array (to free) in g's miss order, or
 * NULL (no memory, or the probe failed: each row is probed on its own). */
static struct probed *probe_misses(struct cache *c, uint32_t table, const uint64_t *rows, const struct rowgroup *g,
				   void *buf)
{
	uint64_t *ids = malloc(g->nmiss * sizeof(*ids));
	uint8_t *stored = malloc(g->nmiss);
	uint64_t *sbatch = calloc(g->nmiss, sizeof(*sbatch));
	struct probed *pr = NULL;
	if (ids && stored && sbatch) {
		for (size_t i = 0; i < g->nmiss; i++)
			ids[i] = rows[g->miss[i]];
		uint64_t gen = atomic_load(&tst(c, table)->gen);
		if (c->ops->fetch_rows(c->ctx, table, ids, g->nmiss, buf, stored, sbatch) >= 0 &&
		    (pr = malloc(g->nmiss * sizeof(*pr))))
			for (size_t i = 0; i < g->nmiss; i++)
				pr[i] = (struct probed){ stored[i], sbatch[i], gen };
	}
	free(ids);
	free(stored);
	free(sbatch);
	return pr;
}

int cache_write_rows(struct cache *c, uint32_t table, uint32_t rs, const uint64_t *rows, size_t n,
		     const void *data, uint64_t batch, int64_t *credit)
{
	const char *src = data;
	struct credit cr = { credit, 0 };
	struct rowgroup g;
	int ret = 0;
	if (table >= CACHE_MAX_TABLES || n > UINT32_MAX)
		return -EINVAL;
	if (batch > atomic_load_explicit(&c->last_batch, memory_order_relaxed))
		atomic_store(&c->last_batch, batch);
	if (rowgroup_make(c, table, rows, n, &g)) {
		for (size_t i = 0; i < n && !ret; i++)
			ret = write_one(c, table, rs, rows[i], 0, rs, src + i * rs, batch, &cr, NULL);
		cache_credit_end(c, &cr, table, rs);
		return ret;
	}
	ret = walk_rows(c, table, rs, rows, &g, NULL, src, NULL, batch, &cr);
	/* a row's occurrences all hit or all miss: misses keep their order;
	 * they are probed below in one ops->fetch_rows call (the store then
	 * looks them up in one pass) */
	struct probed *pr = !ret && g.nmiss > 1 && c->ops->fetch_rows ? probe_misses(c, table, rows, &g, NULL) : NULL;
	for (size_t i = 0; i < g.nmiss && !ret; i++)
		ret = write_one(c, table, rs, rows[g.miss[i]], 0, rs, src + (size_t)g.miss[i] * rs, batch, &cr,
				pr ? &pr[i] : NULL);
	free(pr);
	cache_credit_end(c, &cr, table, rs);
	rowgroup_free(&g);
	return ret;
}

/* A row not cached (or needing a promise the credit cannot pay): read,
 * updated in tmp and written, as cache_read() then cache_write(). */
static int update_one(struct cache *c, uint32_t table, uint32_t rs, uint64_t row, const struct cache_upd *u,
		      size_t i, char *tmp, uint64_t batch, struct credit *cr)
{
	int stored = read_row(c, table, rs, row, 0, rs, tmp);
	if (stored < 0)
		return stored;
	u->fn(u->ctx, i, tmp, stored);
	return write_one(c, table, rs, row, 0, rs, tmp, batch, cr, NULL);
}

/* A missed row's update, computed from the bytes pr was probed with: cached
 * as write_one() caches it, or W_AGAIN if the row was cached or its table
 * changed since the probe (then the caller updates it again, from its bytes
 * now). */
static int update_put(struct cache *c, uint32_t table, uint32_t rs, uint64_t row, const char *data,
		      uint64_t batch, struct credit *cr, const struct probed *pr)
{
	uint64_t h = hash(table, row), sbatch;
	uint32_t si;
	struct shard *sh = shard_of(c, h, &si);
	char *base;
	int stored = write_base(c, table, rs, row, 0, rs, data, &base, &sbatch, pr);
	if (stored < 0)
		return stored;
	int r, cleans = 0;
	for (;;) {
		r = insert_row(c, sh, si, table, rs, row, h, base, stored, sbatch, pr->gen, batch, cr, &cleans);
		if (r != W_AGAIN)
			break;
		/* a promise reserved, or room made: again, unless the probe went stale */
		pthread_mutex_lock(&sh->lock);
		int stale = lookup(sh, table, row, h) != NIL || atomic_load(&tst(c, table)->gen) != pr->gen;
		pthread_mutex_unlock(&sh->lock);
		if (stale)
			break;
	}
	free(base);
	return r;
}

static int cmp_u64pair(const void *a, const void *b)
{
	const uint64_t *x = a, *y = b;
	return x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : x[1] < y[1] ? -1 : x[1] > y[1];
}

/* The misses of an update, fetched from below in one call (probe_misses:
 * the store looks them up in one pass) and each updated from those bytes;
 * a row that repeats, or was cached or dropped meanwhile, by update_one().
 * 1 when nothing was done (no memory, or the fetch failed: the caller
 * updates them one by one), else 0 or -errno. */
static int update_misses(struct cache *c, uint32_t table, uint32_t rs, const uint64_t *rows,
			 const struct rowgroup *g, const struct cache_upd *u, char *tmp, uint64_t batch,
			 struct credit *cr)
{
	size_t n = g->nmiss;
	char *buf = malloc(n * rs);
	uint64_t *order = malloc(2 * n * sizeof(*order));
	struct probed *pr = buf && order ? probe_misses(c, table, rows, g, buf) : NULL;
	int ret = 1;
	if (!pr)
		goto out;
	/* a row's later occurrences (none from a push: it sums them) go
	 * after its first, by update_one (stored -1) */
	for (size_t i = 0; i < n; i++) {
		order[2 * i] = rows[g->miss[i]];
		order[2 * i + 1] = i;
	}
	qsort(order, n, 2 * sizeof(*order), cmp_u64pair);
	for (size_t k = 1; k < n; k++)
		if (order[2 * k] == order[2 * k - 2])
			pr[order[2 * k + 1]].stored = -1;
	ret = 0;
	for (size_t i = 0; i < n && !ret; i++) {
		uint32_t idx = g->miss[i];
		ret = W_AGAIN;
		if (pr[i].stored >= 0) {
			u->fn(u->ctx, idx, buf + i * rs, pr[i].stored != 0);
			ret = update_put(c, table, rs, rows[idx], buf + i * rs, batch, cr, &pr[i]);
		}
		if (ret == W_AGAIN)
			ret = update_one(c, table, rs, rows[idx], u, idx, tmp, batch, cr);
	}
out:
	free(buf);
	free(order);
	free(pr);
	return ret;
}

int cache_update_rows(struct cache *c, uint32_t table, uint32_t rs, const uint64_t *rows, size_t n,
		      cache_update_fn *fn, void *ctx, uint64_t batch, int64_t *credit)
{
	struct credit cr = { credit, 0 };
	struct cache_upd u = { fn, ctx };
	struct rowgroup g;
	int ret = 0;
	if (table >= CACHE_MAX_TABLES || n > UINT32_MAX)
		return -EINVAL;
	char *tmp = malloc(rs);
	if (!tmp)
		return -ENOMEM;
	if (batch > atomic_load_explicit(&c->last_batch, memory_order_relaxed))
		atomic_store(&c->last_batch, batch);
	if (rowgroup_make(c, table, rows, n, &g)) {
		for (size_t i = 0; i < n && !ret; i++)
			ret = update_one(c, table, rs, rows[i], &u, i, tmp, batch, &cr);
	} else {
		ret = walk_rows(c, table, rs, rows, &g, NULL, NULL, &u, batch, &cr);
		size_t i = 0;
		if (!ret && g.nmiss > 1 && c->ops->fetch_rows) {
			ret = update_misses(c, table, rs, rows, &g, &u, tmp, batch, &cr);
			i = ret == 1 ? 0 : g.nmiss; /* 1: nothing done, one by one */
			ret = ret == 1 ? 0 : ret;
		}
		for (; i < g.nmiss && !ret; i++)
			ret = update_one(c, table, rs, rows[g.miss[i]], &u, g.miss[i], tmp, batch, &cr);
		rowgroup_free(&g);
	}
	cache_credit_end(c, &cr, table, rs);
	free(tmp);
	return ret;
}

/* ---- drops --------------------------------------------------------------- */

void cache_drop_rows(struct cache *c, uint32_t table, const uint64_t *rows, size_t n)
{
	if (table >= CACHE_MAX_TABLES)
		return;
	struct giveback g = { 0 };
	pthread_mutex_lock(&c->flush_lock); /* no row is busy now */
	cache_drain_preserved(c); /* snapshots' versions are never dropped */
	atomic_fetch_add(&tst(c, table)->gen, 1);
	for (size_t k = 0; k < n; k++) {
		uint64_t h = hash(table, rows[k]);
		uint32_t si, rs = 0;
		struct shard *sh = shard_of(c, h, &si);
		int give = 0;
		pthread_mutex_lock(&sh->lock);
		uint32_t idx = lookup(sh, table, rows[k], h);
		if (idx != NIL) {
			rs = sh->ar[sh->e[idx].cls].rs;
			give = cache_entry_remove(c, sh, idx);
		}
		pthread_mutex_unlock(&sh->lock);
		if (give && c->ops->reserve)
			cache_giveback_add(c, &g, table, rs, 1);
	}
	pthread_mutex_unlock(&c->flush_lock);
	cache_giveback_end(c, &g);
}

void cache_drop(struct cache *c, uint32_t table, uint64_t from, uint64_t to)
{
	if (table >= CACHE_MAX_TABLES)
		return;
	struct giveback g = { 0 };
	pthread_mutex_lock(&c->flush_lock); /* no row is busy now */
	cache_drain_preserved(c); /* snapshots' versions are never dropped */
	atomic_fetch_add(&tst(c, table)->gen, 1);
	for (uint32_t si = 0; si < c->nshards; si++) {
		struct shard *sh = &c->sh[si];
		uint32_t rs = 0;
		int n = 0;
		pthread_mutex_lock(&sh->lock);
		for (uint32_t i = 0; i < sh->hwm;) {
			struct centry *e = &sh->e[i];
			if (!(e->flags & F_VALID) || e->table != table || e_row(e) < from || e_row(e) >= to) {
				i++;
				continue;
			}
			uint32_t ers = sh->ar[e->cls].rs;
			if ((e->flags & F_PROM) && n && ers != rs) { /* two sizes: give back, look again */
				pthread_mutex_unlock(&sh->lock);
				cache_giveback_add(c, &g, table, rs, n);
				n = 0;
				pthread_mutex_lock(&sh->lock);
				continue;
			}
			if (cache_entry_remove(c, sh, i)) {
				rs = ers;
				n++;
			}
			i++;
		}
		pthread_mutex_unlock(&sh->lock);
		if (n && c->ops->reserve)
			cache_giveback_add(c, &g, table, rs, n);
	}
	pthread_mutex_unlock(&c->flush_lock);
	cache_giveback_end(c, &g);
}

/* ---- pins and statistics ------------------------------------------------- */

int cache_pin(struct cache *c, uint32_t table, uint32_t rs, uint64_t row)
{
	uint64_t h = hash(table, row);
	uint32_t si;
	struct shard *sh = shard_of(c, h, &si);
	struct tstat *t = tst(c, table);
	char *tmp = NULL;
	uint64_t sbatch = 0;
	int stored = 0;

	if (table >= CACHE_MAX_TABLES)
		return -EINVAL;
	for (int attempt = 0;; attempt++) {
		pthread_mutex_lock(&sh->lock);
		uint32_t idx = lookup(sh, table, row, h);
		int err = 0;
		if (idx == NIL && tmp) {
			idx = cache_entry_insert(c, sh, table, rs, row, h, &err);
			if (idx != NIL) {
				memcpy(e_data(sh, &sh->e[idx]), tmp, rs);
				if (!stored)
					sh->e[idx].flags |= F_NEW;
				else
					base_fill(c, &sh->e[idx], sbatch, stored);
			}
		}
		if (idx != NIL) {
			struct centry *e = &sh->e[idx];
			int ret = cache_entry_pin(c, sh, e);
			pthread_mutex_unlock(&sh->lock);
			free(tmp);
			return ret;
		}
		pthread_mutex_unlock(&sh->lock);
		if (tmp) {
			free(tmp);
			tmp = NULL;
			if (err == -EAGAIN && attempt < 4 && cache_make_clean(c, si) == 0)
				continue;
			return -ENOSPC;
		}
		uint64_t gen = atomic_load(&t->gen);
		tmp = malloc(rs);
		if (!tmp)
			return -ENOMEM;
		sbatch = 0;
		int r = c->ops->fetch(c->ctx, table, row, tmp, &sbatch);
		stored = r > 0 ? r : 0;
		if (r < 0 || atomic_load(&t->gen) != gen) {
			free(tmp);
			if (r < 0)
				return r;
			tmp = NULL;
		}
	}
}

void cache_unpin(struct cache *c, uint32_t table, uint64_t row)
{
	uint64_t h = hash(table, row);
	uint32_t si;
	struct shard *sh = shard_of(c, h, &si);
	pthread_mutex_lock(&sh->lock);
	uint32_t idx = lookup(sh, table, row, h);
	if (idx != NIL)
		cache_entry_unpin(c, sh, &sh->e[idx]);
	pthread_mutex_unlock(&sh->lock);
}

void cache_stats_get(struct cache *c, int64_t table, struct cache_stats *st)
{
	memset(st, 0, sizeof(*st));
	if (table >= 0) {
		if (table >= CACHE_MAX_TABLES)
			return;
		struct tstat *t = atomic_load(&c->ts[table]);
		if (!t)
			return;
		st->hits = atomic_load(&t->hits);
		st->misses = atomic_load(&t->misses);
		st->evictions = atomic_load(&t->evictions);
		st->writebacks = atomic_load(&t->writebacks);
		st->bypasses = atomic_load(&t->bypasses);
		st->scan_misses = atomic_load(&t->scan_misses);
		st->rows = atomic_load(&t->rows);
		st->dirty = atomic_load(&t->dirty);
		st->new_dirty = atomic_load(&t->new_dirty);
		st->pinned = atomic_load(&t->pinned);
		st->bytes = atomic_load(&t->bytes);
		return;
	}
	st->budget = c->budget;
	st->scan_misses = atomic_load(&c->scan_misses);
	st->misses = st->scan_misses;
	for (uint32_t i = 0; i < c->nshards; i++) {
		struct shard *sh = &c->sh[i];
		pthread_mutex_lock(&sh->lock);
		st->hits += sh->hits;
		st->misses += sh->misses;
		st->evictions += sh->evictions;
		st->writebacks += sh->writebacks;
		st->bypasses += sh->bypasses;
		st->rows += sh->nvalid;
		st->dirty += sh->ndirty;
		st->pinned += sh->npinned;
		st->bytes += sh->bytes;
		st->meta_bytes += (uint64_t)sh->hwm * sizeof(struct centry) + (uint64_t)sh->nbucket * 4;
		st->meta_fixed += (uint64_t)INIT_BUCKETS * 4;
		pthread_mutex_unlock(&sh->lock);
	}
	for (uint32_t i = 0; i < CACHE_MAX_TABLES; i++) {
		struct tstat *t = atomic_load(&c->ts[i]);
		if (t)
			st->new_dirty += atomic_load(&t->new_dirty);
	}
}
