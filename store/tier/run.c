/*
 * Sorted runs: how the spill tier keeps rows a table has no room for in the
 * pool at a few bytes of pool per run, not per row.
 *
 * Placement.  The mover evicts cold rows, their whole chains, by writing
 * them, sorted by row id, into a new run on the device (blocks of emb_run.blk_size bytes
 * in whole segments, then the run's meta blocks: its segment list, the
 * first row id of each block (fences, 8 bytes per 4 KiB block) and a Bloom
 * filter of 12 bits per record) and then deleting their index entries with
 * a commit (so the pool's index holds only rows whose newest version is in
 * the pool).  The pool keeps one 128-byte record per run in the run
 * directory (allocated once): nothing per row.  The arrays are read into
 * DRAM at a run's first use (srun_load).  A row's whole chain goes (the
 * versions snapshots hold, newest first; the commit frees the older slots
 * through EMB_JR_CHAIN records); a chain holding a stub stays.  Old versions
 * of rows whose newest version is hot go behind stubs (device.c, mover.c).
 *
 * Lookups.  A read the pool's chain does not decide (no entry, or every
 * version newer than the view's batch) consults the table's runs; newest
 * first, the first version with batch <= the view's batch decides, a
 * tombstone is a hole.  A request's undecided rows go to every run at once
 * (runs_lookup, see "Lookups" below): where its rows are dense in a run (a
 * range read, `cat`, a snapshot copy, a dense gather) the run's blocks over
 * them are walked with the rows in step, without Bloom filter or a search
 * per row; where they are sparse (a gather of scattered ids) each row asks
 * the filter and gets a fence search and its block.  Every run's blocks are
 * read once each, adjacent ones in one read, in one submission.  Deleting
 * a row a run may hold writes a tombstone into the pool (commit.c), which
 * the mover evicts like any row.
 *
 * Merges.  Evicted runs start at level 0; when a table has MERGE_FANOUT runs
 * of one level next to each other, the mover merges them into one run of the
 * next level, keeping of each row the newest version and the newest one each
 * live snapshot sees, and dropping tombstones a merge that reaches the
 * table's oldest run no longer needs.  So a table has at most
 * (MERGE_FANOUT - 1) runs per level and a row costs a lookup about one
 * device read.  When the device is half full, all runs of the table with
 * the most are merged (that drops every copy newer runs
 * replaced).  Merges read and write the device without commit_lock.
 *
 * Crash safety.  A run's blocks and meta blocks are written and
 * fdatasync'ed into segments that are still FREE in the pool; one
 * transaction then writes its record in the run directory, marks its
 * segments EMB_SEG_RUN and (for a merge) marks its inputs dead; only after
 * that does the eviction commit delete index entries (a crash before it
 * leaves a row both in the pool and in a run: the pool's copy wins).  Rows
 * gathered for an eviction count as in a run (runs_may_hold, runs_trim)
 * until its commit, and its run is ordered by when they were gathered, so a
 * delete or truncation meanwhile leaves a tombstone that hides them.  A dead
 * run is freed (segments FREE, record cleared) once no reader holds it, or
 * at the next mount.  Mount reads the directory's records only.
 *
 * Locking.  sp->run_lock (a leaf) guards the DRAM run lists; they change
 * under commit_lock too.  Readers take a reference on each run they use.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack: no allocation per block */
#include <xxhash.h>
#if defined(__x86_64__)
/* libxxhash's run-time dispatch to AVX2/AVX-512 where the CPU has them:
 * 1.5x the block checksum's speed here, the same digests */
#include <xxh_x86dispatch.h>
#endif

#include "spill.h"

#define MERGE_FANOUT 4u
#define BLOOM_BITS_PER_REC 12u
#define BLOOM_K 8u
#define EVICT_MAX_BYTES (64ull << 20) /* row bytes one eviction gathers */
#define EVICT_MIN_ROWS 4096u

/* ---- runs: records, meta, arrays ----------------------------------------- */

static size_t bloom_words(uint64_t bits)
{
	return (size_t)((bits + 63) / 64);
}

/* Bytes of the fences and the filter. */
static size_t arr_bytes(const struct emb_run *r)
{
	return r->nblocks * 8 + bloom_words(r->bloom_bits) * 8;
}

/* Segments a list block of bs bytes can name. */
static inline uint64_t list_room(uint32_t bs)
{
	return (bs - sizeof(struct emb_rmeta)) / 4;
}

/* The blocks a list of nsegs takes, cap to a block. */
static inline uint64_t list_blocks(uint64_t nsegs, uint64_t cap)
{
	return (nsegs + cap - 1) / cap;
}

/* Segments a run of nblocks data blocks and ab bytes of fences and filter
 * takes with its list blocks (which it counts itself), cap segments to a
 * list block. */
static uint64_t run_segs(uint64_t nblocks, size_t ab, uint32_t bs, uint64_t bps, uint64_t cap)
{
	uint64_t nmeta = (ab + bs - 1) / bs, nl = 1, nsegs;
	for (;;) {
		nsegs = (nblocks + nl + nmeta + bps - 1) / bps;
		if (list_blocks(nsegs, cap) <= nl)
			return nsegs;
		nl = list_blocks(nsegs, cap);
	}
}

static uint64_t rec_csum(const struct emb_run *r)
{
	struct emb_run h = *r;
	h.csum = 0;
	return XXH64(&h, sizeof(h), EMB_RMETA_MAGIC);
}

static uint32_t blk_csum(const char *b, uint32_t blk)
{
	struct emb_rblk h = *(const struct emb_rblk *)b;
	h.csum = 0;
	XXH3_state_t x;
	XXH3_INITSTATE(&x);
	XXH3_64bits_reset(&x);
	XXH3_64bits_update(&x, &h, sizeof(h));
	XXH3_64bits_update(&x, b + sizeof(h), blk - sizeof(h));
	return (uint32_t)XXH3_64bits_digest(&x);
}

/* The segments list block m names, cap to a block. */
static uint64_t meta_nseg(const struct emb_rmeta *m, uint64_t cap)
{
	uint64_t from = (uint64_t)m->part * cap;
	return m->nsegs > from ? (m->nsegs - from < cap ? m->nsegs - from : cap) : 0;
}

static uint64_t meta_hdr_csum(const struct emb_rmeta *m, uint64_t cap)
{
	struct emb_rmeta h = *m;
	h.csum = 0;
	XXH64_state_t *x = XXH64_createState();
	XXH64_reset(x, EMB_RMETA_MAGIC);
	XXH64_update(x, &h, sizeof(h));
	XXH64_update(x, m->seg, (size_t)meta_nseg(m, cap) * 4);
	uint64_t c = XXH64_digest(x);
	XXH64_freeState(x);
	return c;
}

static inline uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	x ^= x >> 33;
	return x;
}

static inline uint64_t bloom_pos(uint64_t h, uint64_t bits)
{
	return (uint64_t)(((unsigned __int128)h * bits) >> 64);
}

static void bloom_add(uint64_t *w, uint64_t bits, uint32_t k, uint64_t row)
{
	uint64_t h1 = mix64(row + 0x9E3779B97F4A7C15ull), h2 = mix64(h1) | 1;
	for (uint32_t i = 0; i < k; i++) {
		uint64_t p = bloom_pos(h1 + i * h2, bits);
		w[p / 64] |= 1ull << (p % 64);
	}
}

static int bloom_has(const uint64_t *w, uint64_t bits, uint32_t k, uint64_t row)
{
	uint64_t h1 = mix64(row + 0x9E3779B97F4A7C15ull), h2 = mix64(h1) | 1;
	for (uint32_t i = 0; i < k; i++) {
		uint64_t p = bloom_pos(h1 + i * h2, bits);
		if (!(w[p / 64] & (1ull << (p % 64))))
			return 0;
	}
	return 1;
}

/* A run's DRAM state; its arrays (owned, one malloc: segs first) if the
 * builder has them, else read at first use. */
static struct srun *srun_new(struct spill *sp, struct emb_run *r, uint32_t *arrays)
{
	struct srun *x = calloc(1, sizeof(*x));
	if (!x)
		return NULL;
	x->r = r;
	x->per_blk = (r->blk_size - (uint32_t)sizeof(struct emb_rblk)) / r->rec_size;
	x->bps = sp->pm->seg_size / r->blk_size;
	pthread_mutex_init(&x->load_mu, NULL);
	atomic_init(&x->refs, 1);
	if (arrays) {
		x->seg = arrays;
		x->fence = (uint64_t *)((char *)arrays + (((size_t)r->nsegs * 4 + 7) & ~(size_t)7));
		x->bloom = x->fence + r->nblocks;
		atomic_init(&x->loaded, 1);
	}
	return x;
}

static void srun_free(struct srun *x)
{
	pthread_mutex_destroy(&x->load_mu);
	free(x->seg);
	free(x);
}

/* The device offset of block i of run x (its arrays loaded). */
static uint64_t blk_loc(const struct spill *sp, const struct srun *x, uint64_t i)
{
	return seg_base(sp, x->seg[i / x->bps]) + (i % x->bps) * x->r->blk_size;
}

/* Record r is sound: checksum, geometry. */
static int rec_sane(struct store *s, const struct emb_run *r, char *err, size_t n)
{
	const struct emb_spill *pm = s->sp->pm;
	if (rec_csum(r) != r->csum)
		return store_err(err, n, -EIO, "run record %llu: damaged (checksum)", (unsigned long long)r->id);
	uint64_t bps = r->blk_size ? pm->seg_size / r->blk_size : 0;
	if (!r->id || !r->blk_size || r->blk_size % BLK || r->rec_size + sizeof(struct emb_rblk) > r->blk_size ||
	    r->blk_size > pm->seg_size || !r->nblocks || r->table >= EMB_NTABLES || !bps ||
	    r->nblocks > pm->nsegs * bps || r->nsegs > pm->nsegs ||
	    !r->list_cap || r->list_cap > list_room(r->blk_size) ||
	    r->nsegs != run_segs(r->nblocks, arr_bytes(r), r->blk_size, bps, r->list_cap) || r->meta_loc < EMB_SPILL_HDR ||
	    r->meta_loc % BLK || r->meta_loc + r->blk_size > pm->size)
		return store_err(err, n, -EIO, "run record %llu: bad geometry", (unsigned long long)r->id);
	return 0;
}

/* Read x's segments, fences and filter from its meta blocks: 0 or -EIO
 * (counted; the run's rows then read as EIO). */
static int srun_load(struct store *s, struct srun *x)
{
	struct spill *sp = s->sp;
	int st = atomic_load_explicit(&x->loaded, memory_order_acquire);
	if (st)
		return st > 0 ? 0 : st;
	pthread_mutex_lock(&x->load_mu);
	if ((st = atomic_load(&x->loaded))) {
		pthread_mutex_unlock(&x->load_mu);
		return st > 0 ? 0 : st;
	}
	const struct emb_run *r = x->r;
	uint32_t bs = r->blk_size;
	size_t segb = ((size_t)r->nsegs * 4 + 7) & ~(size_t)7, ab = arr_bytes(r);
	uint64_t nmeta = (ab + bs - 1) / bs, cap = r->list_cap, nl = list_blocks(r->nsegs, cap);
	char *hb = NULL, *ab_buf = NULL;
	uint32_t *arrays = malloc(segb + ab);
	int ret = arrays && !posix_memalign((void **)&hb, BLK, bs) &&
			  !posix_memalign((void **)&ab_buf, BLK, (nmeta ? nmeta : 1) * bs) ? 0 : -ENOMEM;
	/* the segment list, block by block: each names where the next is */
	uint64_t loc = r->meta_loc;
	for (uint64_t part = 0; !ret && part < nl; part++) {
		struct sreq q = { .blk = loc, .span = bs, .boff = 0 };
		ret = device_read_raw(sp, &q, 1, hb);
		const struct emb_rmeta *m = (const struct emb_rmeta *)hb;
		uint64_t k = ret ? 0 : meta_nseg(m, cap);
		if (!ret && (m->magic != EMB_RMETA_MAGIC || m->id != r->id || m->nsegs != r->nsegs ||
			     m->part != part || meta_hdr_csum(m, cap) != m->csum || !k ||
			     (part + 1 < nl) != (m->next != 0) ||
			     (m->next && (m->next < EMB_SPILL_HDR || m->next % BLK || m->next + bs > sp->pm->size))))
			ret = -EIO;
		if (!ret) {
			memcpy(arrays + part * cap, m->seg, (size_t)k * 4);
			loc = m->next;
		}
	}
	if (!ret) {
		memset((char *)arrays + (size_t)r->nsegs * 4, 0, segb - (size_t)r->nsegs * 4);
		for (uint32_t i = 0; i < r->nsegs && !ret; i++)
			if (arrays[i] >= sp->pm->nsegs || sp->pm->seg[arrays[i]].state != EMB_SEG_RUN)
				ret = -EIO;
	}
	x->seg = arrays;
	for (uint64_t i = 0; !ret && i < nmeta; i++) {
		struct sreq q = { .blk = blk_loc(sp, x, r->nblocks + nl + i), .span = bs, .boff = i * bs };
		ret = device_read_raw(sp, &q, 1, ab_buf);
	}
	if (!ret && XXH64(ab_buf, ab, r->id) != r->meta_csum)
		ret = -EIO;
	if (!ret) {
		memcpy((char *)arrays + segb, ab_buf, ab);
		x->fence = (uint64_t *)((char *)arrays + segb);
		x->bloom = x->fence + r->nblocks;
	} else {
		x->seg = NULL;
		free(arrays);
		if (ret == -EIO)
			atomic_fetch_add(&sp->csum_errors, 1);
	}
	free(hb);
	free(ab_buf);
	if (ret != -ENOMEM)
		atomic_store_explicit(&x->loaded, ret ? ret : 1, memory_order_release);
	pthread_mutex_unlock(&x->load_mu);
	return ret;
}

/* ---- the lists -------------------------------------------------------- */

/* Insert x into its table's list by seq (newest first).  run_lock held. */
static void list_insert(struct spill *sp, struct srun *x)
{
	atomic_fetch_add(&sp->runs_gen, 1);
	struct srun **p = &sp->runs[x->r->table];
	while (*p && (*p)->r->seq > x->r->seq)
		p = &(*p)->next;
	x->next = *p;
	*p = x;
}

static void srun_put(struct srun *x)
{
	atomic_fetch_sub_explicit(&x->refs, 1, memory_order_acq_rel);
}

/* The runs of table id, newest first, each with a reference: *n of them in
 * a malloc'ed array (NULL when none).  */
static int runs_get(struct spill *sp, uint32_t id, struct srun ***out, size_t *n)
{
	*out = NULL;
	*n = 0;
	pthread_rwlock_rdlock(&sp->run_lock);
	size_t k = 0;
	for (struct srun *x = sp->runs[id]; x; x = x->next)
		k++;
	struct srun **v = k ? malloc(k * sizeof(*v)) : NULL;
	if (k && !v) {
		pthread_rwlock_unlock(&sp->run_lock);
		return -ENOMEM;
	}
	k = 0;
	for (struct srun *x = sp->runs[id]; x; x = x->next) {
		atomic_fetch_add_explicit(&x->refs, 1, memory_order_acq_rel);
		v[k++] = x;
	}
	pthread_rwlock_unlock(&sp->run_lock);
	*out = v;
	*n = k;
	return 0;
}

static void runs_put(struct srun **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		srun_put(v[i]);
	free(v);
}

int runs_may_hold(struct store *s, uint32_t id, uint64_t row)
{
	struct spill *sp = s->sp;
	int maybe = 0;
	if (!sp)
		return 0;
	pthread_rwlock_rdlock(&sp->run_lock);
	for (struct srun *x = sp->runs[id]; x && !maybe; x = x->next) {
		if (row < x->r->min_row || row > x->r->max_row)
			continue;
		/* an unreadable filter: the run may hold any row of its range */
		maybe = srun_load(s, x) || bloom_has(x->bloom, x->r->bloom_bits, x->r->bloom_k, row);
	}
	if (!maybe && sp->ev_n && sp->ev_id == id) {
		size_t i = u64_lower_bound(sp->ev_rows, sp->ev_n, row);
		maybe = i < sp->ev_n && sp->ev_rows[i] == row;
	}
	pthread_rwlock_unlock(&sp->run_lock);
	return maybe;
}

int runs_count(struct store *s, uint32_t id, uint64_t *live)
{
	struct spill *sp = s->sp;
	int n = 0;
	if (live)
		*live = 0;
	if (!sp)
		return 0;
	pthread_rwlock_rdlock(&sp->run_lock);
	for (struct srun *x = sp->runs[id]; x; x = x->next) {
		n++;
		if (live)
			*live += x->r->nlive;
	}
	pthread_rwlock_unlock(&sp->run_lock);
	return n;
}

/* ---- reading blocks ------------------------------------------------------ */

/* The last block of run x whose fence is <= row (row >= its first fence). */
static uint64_t fence_floor(const struct srun *x, uint64_t row)
{
	/* row ids are below 2^64 / row size: row + 1 does not wrap */
	size_t lo = u64_lower_bound(x->fence, x->r->nblocks, row + 1);
	return lo ? lo - 1 : 0;
}

/* Blocks [*a, *b] of run x that may hold row (row in the run's range), for
 * rows visited in increasing order: *j is the last block whose fence is <=
 * the previous row (start it at fence_floor of the first), so a walk over
 * many rows is one pass over the fences. */
static void fence_walk(const struct srun *x, uint64_t row, uint64_t *j, uint64_t *a, uint64_t *b)
{
	const uint64_t *f = x->fence;
	uint64_t nb = x->r->nblocks;
	while (*j + 1 < nb && f[*j + 1] <= row)
		(*j)++;
	*a = *b = *j;
	if (f[*j] == row) /* the row's versions fill blocks: from the first whose fence it is */
		while (*a > 0 && f[*a - 1] == row)
			(*a)--;
}

static int bloom_row(const struct srun *x, uint64_t row)
{
	return bloom_has(x->bloom, x->r->bloom_bits, x->r->bloom_k, row);
}

/* A block read into memory, checked once. */
struct bref {
	uint64_t blk;
	char *p;
	int ok; /* 1 sound, -EIO damaged, 0 not checked */
	struct rawin *w; /* lookups: the read-ahead window it is in, or NULL */
};

/* Check block b of run x once: 0 or -EIO (counted). */
static int blk_ok(struct spill *sp, const struct srun *x, struct bref *b)
{
	if (!b->ok) {
		const struct emb_rblk *h = (const struct emb_rblk *)b->p;
		int good = h->magic == EMB_RBLK_MAGIC && h->run_id == (uint32_t)x->r->id &&
			   h->nrec <= x->per_blk && blk_csum(b->p, x->r->blk_size) == h->csum;
		b->ok = good ? 1 : -EIO;
		if (!good)
			atomic_fetch_add(&sp->csum_errors, 1);
	}
	return b->ok > 0 ? 0 : -EIO;
}

static inline const char *rec_at(const struct srun *x, const char *blk, uint32_t i)
{
	return blk + sizeof(struct emb_rblk) + (size_t)i * x->r->rec_size;
}

static inline uint64_t rec_row(const char *rec)
{
	uint64_t v;
	memcpy(&v, rec, 8);
	return v;
}

static inline uint64_t rec_batch(const char *rec)
{
	uint64_t v;
	memcpy(&v, rec + 8, 8);
	return v;
}

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
 * So a run's blocks may be read for rows a newer run decides (rows written
 * again since): the price of one submission per request instead of one per
 * run.  A damaged block is EIO for the rows that may be in it (those its
 * Bloom filter does not rule out), never for others.
 */

/* One row looked up in one run (filtered mode): unique row u, blocks [a, b]. */
struct lk {
	size_t u;
	uint64_t a, b;
};

/* One run's part of a request. */
struct plan {
	struct srun *x;
	int lr;             /* srun_load: 0, or -EIO (its rows are EIO) */
	int walk;           /* walked, not filtered */
	size_t u0, u1;      /* the unique rows inside its range */
	size_t b0, nb;      /* its blocks in the request's list */
	size_t l0, nl;      /* filtered: its lookups */
};

/* The request: unique rows, plans, blocks. */
struct lreq {
	struct store *s;
	struct rq *q;
	size_t *uq;         /* q index of each unique row (its representative) */
	uint64_t *urow;     /* unique rows, ascending */
	size_t nu;
	struct plan *p;
	size_t np;
	struct bref *br;    /* every run's blocks, each run's ascending */
	size_t nbr, cbr;
	struct lk *lk;
	size_t nlk, clk;
	struct rawin **win;  /* read-ahead windows it holds (a reference each) */
	uint8_t *mine;       /* ... and loads itself */
	size_t nwin, cwin;
	uint64_t batch;
	uint32_t rs;
};

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
static uint64_t win_blocks(const struct srun *x)
{
	uint64_t per = RA_BYTES / x->r->blk_size;
	return per ? per : 1;
}

/* A reference to window ext of run x for L: found, or claimed for L to
 * load (*mine); NULL when every window is busy (read directly). */
static struct rawin *win_get(struct lreq *L, const struct srun *x, uint64_t ext)
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
	uint64_t per = win_blocks(x), first = ext * per;
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
static void win_reads(struct spill *sp, const struct srun *x, struct rawin *w, struct sreq *q, size_t *nq);

/* Queue window ext of run x for the read-ahead thread, unless it is in
 * DRAM or on its way, or no window is free.  ra_mu held. */
static void win_ahead_locked(struct spill *sp, struct srun *x, uint64_t ext)
{
	uint64_t per = win_blocks(x), first = ext * per;
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
static void win_ahead(struct spill *sp, struct srun *x, uint64_t ext, uint64_t want)
{
	uint64_t per = win_blocks(x), n = (want + per - 1) / per;
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
		w->ok[k] = blk_ok(sp, x, &b) ? -1 : 1;
	}
}

/* Window i's reads ended (err: one failed): readers may use it.  ra_mu held. */
static void win_done_locked(struct spill *sp, uint32_t i, int err)
{
	sp->ra[i].state = err ? RA_FAILED : RA_READY;
	sp->ra[i].refs--;
	pthread_cond_broadcast(&sp->ra_cv);
}

/* The read-ahead thread: submits the reads of the windows queued (up to
 * spill_qd reads in flight, on a ring of its own) and marks each window
 * read as soon as its own reads complete, nearest first, so that a reader
 * waits for the window it needs, not for all that were queued with it.
 * Without a ring of its own, one window at a time through the shared ones. */
static void *ra_main(void *arg)
{
	struct spill *sp = arg;
	uint32_t qd = sp->qd < 256 ? sp->qd : 256;
	struct io_uring ring;
	int have_ring = io_uring_queue_init(qd, &ring, 0) == 0;
	/* the windows' arena registered: reads into it pin no pages each
	 * (needs RLIMIT_MEMLOCK room or CAP_IPC_LOCK, else plain reads) */
	struct iovec arena = { sp->ra_arena, (size_t)RA_WINDOWS * RA_BYTES };
	int fixed = have_ring && io_uring_register_buffers(&ring, &arena, 1) == 0;
	struct raio io[256];
	int left[RA_WINDOWS] = { 0 }, err[RA_WINDOWS] = { 0 };
	struct srun *run[RA_WINDOWS] = { 0 };
	uint32_t inflight = 0;
	for (uint32_t k = 0; k < qd; k++)
		io[k].win = -1;
	pthread_mutex_lock(&sp->ra_mu);
	while (!sp->ra_stop || inflight) {
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
			win_reads(sp, w->x, w, q, &nq);
			int plain = !have_ring || nq > qd; /* (a window in more pieces than the ring holds) */
			if (!plain && inflight + nq > qd)
				break; /* when some complete */
			run[best] = w->x;
			w->x = NULL;
			sp->ra_queued--;
			atomic_fetch_add_explicit(&sp->ra_ahead, 1, memory_order_relaxed);
			atomic_fetch_add_explicit(&sp->run_blocks, w->nblk, memory_order_relaxed);
			if (plain) {
				pthread_mutex_unlock(&sp->ra_mu);
				int r = device_read_raw(sp, q, nq, NULL);
				if (!r)
					win_check(sp, run[best], w);
				srun_put(run[best]);
				pthread_mutex_lock(&sp->ra_mu);
				win_done_locked(sp, (uint32_t)best, r);
				continue;
			}
			left[best] = (int)nq;
			err[best] = 0;
			for (size_t j = 0; j < nq; j++) {
				uint32_t k = 0;
				while (io[k].win >= 0)
					k++;
				io[k] = (struct raio){ .win = best, .q = q[j] };
				struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
				if (fixed)
					io_uring_prep_read_fixed(sqe, sp->fd, q[j].to, q[j].span, q[j].blk, 0);
				else
					io_uring_prep_read(sqe, sp->fd, q[j].to, q[j].span, q[j].blk);
				sqe->user_data = k;
				inflight++;
			}
		}
		if (!inflight) {
			if (!sp->ra_stop)
				pthread_cond_wait(&sp->ra_job, &sp->ra_mu);
			continue;
		}
		pthread_mutex_unlock(&sp->ra_mu);
		struct io_uring_cqe *cqe;
		int r = io_uring_submit_and_wait(&ring, 1);
		uint32_t got = 0, done[256];
		unsigned head;
		io_uring_for_each_cqe(&ring, head, cqe) {
			uint32_t k = (uint32_t)cqe->user_data;
			struct raio *a = &io[k];
			if (cqe->res != (int)a->q.span && /* a short read: once more, plainly */
			    pread(sp->fd, a->q.to, a->q.span, (off_t)a->q.blk) != (ssize_t)a->q.span)
				err[a->win] = -EIO;
			done[got++] = k;
		}
		io_uring_cq_advance(&ring, got);
		atomic_fetch_add_explicit(&sp->read_ios, got, memory_order_relaxed);
		pthread_mutex_lock(&sp->ra_mu);
		if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY && !got) {
			/* the ring failed: read what is in flight plainly */
			for (uint32_t k = 0; k < qd; k++)
				if (io[k].win >= 0) {
					if (pread(sp->fd, io[k].q.to, io[k].q.span, (off_t)io[k].q.blk) != (ssize_t)io[k].q.span)
						err[io[k].win] = -EIO;
					done[got++] = k;
				}
		}
		uint32_t nfin = 0, fin[RA_WINDOWS];
		for (uint32_t g = 0; g < got; g++) {
			struct raio *a = &io[done[g]];
			atomic_fetch_add_explicit(&sp->read_bytes, a->q.span, memory_order_relaxed);
			int i = a->win;
			a->win = -1;
			inflight--;
			if (--left[i] == 0)
				fin[nfin++] = (uint32_t)i;
		}
		/* the windows read whole: their blocks checked here, off the
		 * readers' path, then handed over */
		if (nfin) {
			pthread_mutex_unlock(&sp->ra_mu);
			for (uint32_t f = 0; f < nfin; f++)
				if (!err[fin[f]])
					win_check(sp, run[fin[f]], &sp->ra[fin[f]]);
			pthread_mutex_lock(&sp->ra_mu);
		}
		for (uint32_t f = 0; f < nfin; f++) {
			uint32_t i = fin[f];
			win_done_locked(sp, i, err[i]);
			struct srun *x = run[i];
			run[i] = NULL;
			srun_put(x);
		}
	}
	pthread_mutex_unlock(&sp->ra_mu);
	if (have_ring)
		io_uring_queue_exit(&ring);
	return NULL;
}

/* Plan p's blocks come from windows, if its walk follows the last one (a
 * sequential reader).  Blocks no window can take stay direct. */
static void plan_windows(struct lreq *L, struct plan *p)
{
	struct srun *x = p->x;
	if (!p->nb)
		return;
	uint64_t per = win_blocks(x), a = L->br[p->b0].blk, last = L->br[p->b0 + p->nb - 1].blk;
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
			w = win_get(L, x, ext);
		}
		L->br[k].w = w;
	}
	/* four times the blocks this walk took, past what the last window
	 * holds (at least the next window): the next requests' windows are
	 * read while this one and the one after it are served */
	uint64_t want = 4 * (last + 1 - a), left = per - 1 - last % per;
	win_ahead(L->s->sp, x, last / per + 1, want > left ? want - left : 1);
}

/* Plan run p: which of its blocks the rows need. */
static int plan_run(struct lreq *L, struct plan *p)
{
	const struct srun *x = p->x;
	const struct emb_run *r = x->r;
	p->u0 = u64_lower_bound(L->urow, L->nu, r->min_row);
	p->u1 = u64_lower_bound(L->urow, L->nu, r->max_row + 1);
	p->b0 = L->nbr;
	p->l0 = L->nlk;
	if (p->lr || p->u0 == p->u1)
		return 0;
	size_t nrows = p->u1 - p->u0;
	uint64_t j = fence_floor(x, L->urow[p->u0]), a, b;
	fence_walk(x, L->urow[p->u0], &j, &a, &b);
	uint64_t last = fence_floor(x, L->urow[p->u1 - 1]);
	p->walk = last - a + 1 <= nrows;
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
		if (!bloom_row(x, row))
			continue;
		j = fence_floor(x, row);
		fence_walk(x, row, &j, &a, &b);
		if (arr_room(&L->lk, L->nlk, &L->clk, sizeof(*L->lk), 256))
			return -ENOMEM;
		L->lk[L->nlk++] = (struct lk){ u, a, b };
		p->nl++;
		ret = want(L, p, a, b);
	}
	return ret;
}

/* Add the reads of window w's blocks (of run x) to q. */
static void win_reads(struct spill *sp, const struct srun *x, struct rawin *w, struct sreq *q, size_t *nq)
{
	uint32_t bs = x->r->blk_size;
	uint64_t first = w->ext * win_blocks(x);
	for (uint32_t i = 0; i < w->nblk; i++) {
		uint64_t loc = blk_loc(sp, x, first + i);
		if (i && q[*nq - 1].blk + q[*nq - 1].span == loc && q[*nq - 1].span + bs <= CHUNK_BYTES) {
			q[*nq - 1].span += bs;
			continue;
		}
		q[(*nq)++] = (struct sreq){ .blk = loc, .span = bs, .to = w->buf + (size_t)i * bs };
	}
}

/* Read every planned block: those of windows L loads into them, the others
 * into one buffer (adjacent blocks of a run in one read), all in one
 * submission; then wait for the windows others load.  0 or -errno.  *bufp:
 * the buffer, to free. */
static int read_planned(struct lreq *L, char **bufp)
{
	struct spill *sp = L->s->sp;
	size_t total = 0, nreads = 0;
	uint64_t direct = 0, loaded = 0, fromwin = 0;
	for (size_t i = 0; i < L->np; i++)
		for (size_t k = L->p[i].b0; k < L->p[i].b0 + L->p[i].nb; k++)
			if (!L->br[k].w) {
				total += L->p[i].x->r->blk_size;
				nreads++;
			}
	for (size_t i = 0; i < L->nwin; i++)
		if (L->mine[i])
			nreads += L->win[i]->nblk;
	*bufp = NULL;
	char *buf = NULL;
	struct sreq *q = malloc((nreads ? nreads : 1) * sizeof(*q));
	if (!q || (total && posix_memalign((void **)&buf, BLK, total))) {
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
			uint64_t loc = blk_loc(sp, p->x, L->br[k].blk);
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
					win_reads(sp, L->p[i].x, w, q, &nq);
					L->mine[j] = 2; /* its reads are in q */
					loaded += w->nblk;
				}
		}
	int ret = nq ? device_read_raw(sp, q, nq, buf) : 0;
	free(q);
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
	if (ret) {
		free(buf);
		return ret;
	}
	for (size_t i = 0; i < L->np; i++) {
		const struct plan *p = &L->p[i];
		uint64_t per = win_blocks(p->x);
		for (size_t k = p->b0; k < p->b0 + p->nb; k++) {
			struct rawin *w = L->br[k].w;
			if (w) {
				uint64_t i = L->br[k].blk - w->ext * per;
				L->br[k].p = w->buf + i * (size_t)p->x->r->blk_size;
				L->br[k].ok = w->ok[i] > 0 ? 1 : w->ok[i] < 0 ? -EIO : 0; /* the thread's check */
			}
		}
	}
	atomic_fetch_add_explicit(&sp->run_blocks, direct + loaded, memory_order_relaxed);
	if (fromwin)
		atomic_fetch_add_explicit(&sp->ra_blocks, fromwin, memory_order_relaxed);
	if (loaded)
		atomic_fetch_add_explicit(&sp->ra_loads, 1, memory_order_relaxed);
	*bufp = buf;
	return 0;
}

/* L's windows go back (they stay in DRAM for the next reader). */
static void win_put_all(struct lreq *L)
{
	struct spill *sp = L->s->sp;
	if (!L->nwin)
		return;
	pthread_mutex_lock(&sp->ra_mu);
	for (size_t j = 0; j < L->nwin; j++)
		L->win[j]->refs--;
	pthread_mutex_unlock(&sp->ra_mu);
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
		if (!bb || blk_ok(sp, x, bb))
			return bloom_row(x, row) ? -EIO : 0;
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
			if (blk_ok(sp, x, bb)) { /* EIO for the rows it may hold */
				uint64_t lo, hi;
				blk_rows(x, bb->blk, &lo, &hi);
				for (size_t v = gallop(L->urow, u, p->u1, lo); v < p->u1 && L->urow[v] < hi; v++)
					if (L->q[L->uq[v]].state == RQ_PENDING && bloom_row(x, L->urow[v]))
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

int runs_lookup(struct store *s, struct stable *st, struct rq *q, size_t n, uint64_t b)
{
	struct spill *sp = s->sp;
	struct srun **v;
	size_t nr;
	if (!sp || !n)
		return 0;
	int ret = runs_get(sp, st->id, &v, &nr);
	if (ret || !nr)
		return ret;
	struct lreq L = { .s = s, .q = q, .batch = b, .rs = st->t->row_size };
	char *buf = NULL;
	ret = unique_rows(&L, q, n);
	if (!ret && !(L.p = calloc(nr, sizeof(*L.p))))
		ret = -ENOMEM;
	for (size_t i = 0; i < nr && !ret; i++) {
		struct plan *p = &L.p[L.np++];
		p->x = v[i];
		p->lr = srun_load(s, v[i]);
		if (p->lr == -ENOMEM)
			ret = -ENOMEM;
		else
			ret = plan_run(&L, p);
	}
	if (!ret)
		ret = read_planned(&L, &buf);
	for (size_t i = 0; i < L.np && !ret; i++)
		merge_run(&L, &L.p[i]);
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
	win_put_all(&L);
	free(buf);
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

/* ---- building a run ------------------------------------------------------ */

struct build {
	struct store *s;
	struct spill *sp;
	uint32_t table, rs, rec, bs, per_blk;
	uint64_t gen, id;
	char *buf;          /* blocks not yet written: [0, nbuf) */
	size_t cap, nbuf;   /* in blocks */
	uint64_t first;     /* block index of buf[0] */
	uint32_t in_blk;    /* records in the open block (buf[nbuf]) */
	struct u64vec fences, rows, segs;
	uint64_t nrecs, nlive, min_row, max_row;
	uint64_t bytes;     /* written to the device */
	/* build_finish: segs | fences | filter (one malloc, for the srun),
	 * the filter's size, the meta block's place and the arrays' checksum */
	uint32_t *arrays;
	uint64_t nblocks, bloom_bits, meta_loc, meta_csum;
	uint32_t list_cap;       /* segments to a list block of its meta */
	uint32_t keep;           /* free segments its claims leave (seg_claim) */
	int dry;                 /* count the segments it would take, write nothing */
	uint64_t dry_segs;       /* build_finish of a dry build: that count */
	int err;
};

static void segs_release(struct spill *sp, const struct u64vec *segs)
{
	pthread_mutex_lock(&sp->mu);
	for (size_t i = 0; i < segs->n; i++)
		sp->seg_busy[segs->v[i]] = 0;
	pthread_mutex_unlock(&sp->mu);
}

/* The block size of a run of rs-byte rows: a header and at least one
 * record (16 bytes of key + the row), in whole 4 KiB blocks. */
static inline uint32_t run_blk_size(uint32_t rs)
{
	return (uint32_t)((sizeof(struct emb_rblk) + 16 + rs + BLK - 1) & ~(BLK - 1));
}

/* Records of rs-byte rows one such block holds. */
static inline uint32_t run_blk_recs(uint32_t rs)
{
	return (run_blk_size(rs) - (uint32_t)sizeof(struct emb_rblk)) / (16 + rs);
}

static int build_open(struct build *w, struct store *s, struct stable *st)
{
	struct spill *sp = s->sp;
	memset(w, 0, sizeof(*w));
	w->s = s;
	w->sp = sp;
	w->table = st->id;
	w->gen = st->t->gen;
	w->rs = st->t->row_size;
	w->rec = 16 + w->rs;
	w->bs = run_blk_size(w->rs);
	w->per_blk = run_blk_recs(w->rs);
	w->cap = CHUNK_BYTES / w->bs ? CHUNK_BYTES / w->bs : 1;
	w->min_row = EMB_NONE;
	w->keep = 1 + atomic_load(&sp->reserve); /* an eviction leaves the merge reserve */
	if (posix_memalign((void **)&w->buf, BLK, (w->cap + 1) * (size_t)w->bs))
		return -ENOMEM;
	memset(w->buf, 0, (w->cap + 1) * (size_t)w->bs);
	return 0;
}

/* Write the full blocks in buf to their segments. */
static int build_flush(struct build *w)
{
	struct spill *sp = w->sp;
	uint64_t bps = sp->pm->seg_size / w->bs;
	size_t done = w->dry ? w->nbuf : 0;
	while (!w->err && done < w->nbuf) {
		uint64_t blk = w->first + done;
		if (blk / bps >= w->segs.n) {
			uint64_t k = seg_claim(sp, w->keep);
			if (k == EMB_NONE) {
				w->err = -ENOSPC;
				break;
			}
			if ((w->err = u64vec_push(&w->segs, k)))
				break;
		}
		size_t n = w->nbuf - done;
		if (n > bps - blk % bps)
			n = bps - blk % bps;
		uint64_t at = seg_base(sp, w->segs.v[blk / bps]) + (blk % bps) * w->bs;
		size_t len = n * w->bs, off = 0;
		while (off < len) {
			ssize_t r = pwrite(sp->fd, w->buf + done * w->bs + off, len - off, (off_t)(at + off));
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0) {
				w->err = r < 0 ? -errno : -EIO;
				break;
			}
			off += (size_t)r;
		}
		w->bytes += off;
		done += n;
	}
	if (w->err)
		return w->err;
	/* the open block moves to the front */
	memmove(w->buf, w->buf + w->nbuf * w->bs, w->bs);
	memset(w->buf + w->bs, 0, w->nbuf * (size_t)w->bs);
	w->first += w->nbuf;
	w->nbuf = 0;
	return 0;
}

/* Close the open block: header, checksum. */
static int build_seal_blk(struct build *w)
{
	char *b = w->buf + w->nbuf * (size_t)w->bs;
	struct emb_rblk *h = (struct emb_rblk *)b;
	h->magic = EMB_RBLK_MAGIC;
	h->nrec = w->in_blk;
	h->run_id = (uint32_t)w->id;
	h->csum = blk_csum(b, w->bs);
	w->nbuf++;
	w->in_blk = 0;
	if (w->nbuf == w->cap)
		return build_flush(w);
	return 0;
}

/* Append the versions of one row, newest first (nv of them). */
static int build_row(struct build *w, uint64_t row, const uint64_t *batch, const char *const *data, uint32_t nv)
{
	if (w->err)
		return w->err;
	if (w->in_blk && w->in_blk + nv > w->per_blk && (w->err = build_seal_blk(w)))
		return w->err;
	for (uint32_t i = 0; i < nv; i++) {
		if (w->in_blk == w->per_blk && (w->err = build_seal_blk(w)))
			return w->err;
		if (!w->in_blk && (w->err = u64vec_push(&w->fences, row)))
			return w->err;
		char *rec = w->buf + w->nbuf * (size_t)w->bs + sizeof(struct emb_rblk) + (size_t)w->in_blk * w->rec;
		memcpy(rec, &row, 8);
		memcpy(rec + 8, &batch[i], 8);
		if (data[i])
			memcpy(rec + 16, data[i], w->rs);
		w->in_blk++;
		w->nrecs++;
		w->nlive += !(batch[i] & EMB_RREC_TOMB);
	}
	if ((w->err = u64vec_push(&w->rows, row)))
		return w->err;
	if (w->min_row == EMB_NONE)
		w->min_row = row;
	w->max_row = row;
	return 0;
}

/* Write what is left and make it durable. */
/* Append one raw block (meta). */
static int build_raw(struct build *w, const void *src, size_t len)
{
	char *b = w->buf + w->nbuf * (size_t)w->bs;
	memset(b, 0, w->bs);
	memcpy(b, src, len);
	w->nbuf++;
	return w->nbuf == w->cap ? build_flush(w) : 0;
}

/* Write what is left, then the meta blocks (segments, fences, filter), and
 * make it all durable. */
static int build_finish(struct build *w)
{
	struct spill *sp = w->sp;
	if (!w->err && w->in_blk)
		w->err = build_seal_blk(w);
	if (!w->err && !w->nrecs)
		w->err = -ENODATA;
	if (w->err)
		return w->err;
	w->nblocks = w->fences.n;
	w->bloom_bits = w->rows.n * BLOOM_BITS_PER_REC < 64 ? 64 : w->rows.n * BLOOM_BITS_PER_REC;
	size_t ab = w->nblocks * 8 + bloom_words(w->bloom_bits) * 8;
	uint64_t nmeta = (ab + w->bs - 1) / w->bs, bps = sp->pm->seg_size / w->bs;
	uint64_t cap = sp->list_cap && sp->list_cap < list_room(w->bs) ? sp->list_cap : list_room(w->bs);
	uint64_t nsegs = run_segs(w->nblocks, ab, w->bs, bps, cap), nl = list_blocks(nsegs, cap);
	w->list_cap = (uint32_t)cap;
	if (nsegs > UINT32_MAX)
		return w->err = -EFBIG;
	if (w->dry) {
		w->dry_segs = nsegs;
		return 0;
	}
	while (w->segs.n < nsegs) { /* the list blocks name them all */
		uint64_t k = seg_claim(sp, w->keep);
		if (k == EMB_NONE)
			return w->err = -ENOSPC;
		if ((w->err = u64vec_push(&w->segs, k)))
			return w->err;
	}
	size_t segb = ((size_t)nsegs * 4 + 7) & ~(size_t)7;
	w->arrays = calloc(1, segb + ab);
	struct emb_rmeta *m = calloc(1, w->bs);
	if (!w->arrays || !m) {
		free(m);
		return w->err = -ENOMEM;
	}
	for (uint64_t i = 0; i < nsegs; i++)
		w->arrays[i] = (uint32_t)w->segs.v[i];
	uint64_t *fence = (uint64_t *)((char *)w->arrays + segb), *bloom = fence + w->nblocks;
	memcpy(fence, w->fences.v, w->nblocks * 8);
	for (size_t i = 0; i < w->rows.n; i++)
		bloom_add(bloom, w->bloom_bits, BLOOM_K, w->rows.v[i]);
	w->meta_csum = XXH64(fence, ab, w->id);
	/* the segment list in blocks nblocks .. nblocks + nl - 1, each naming
	 * the next (known now: every segment is claimed) */
	for (uint64_t part = 0; !w->err && part < nl; part++) {
		uint64_t b = w->nblocks + part;
		memset(m, 0, w->bs);
		*m = (struct emb_rmeta){ .magic = EMB_RMETA_MAGIC, .id = w->id, .nsegs = (uint32_t)nsegs,
					 .part = (uint32_t)part };
		if (part + 1 < nl)
			m->next = seg_base(sp, w->segs.v[(b + 1) / bps]) + ((b + 1) % bps) * w->bs;
		memcpy(m->seg, w->arrays + part * cap, (size_t)meta_nseg(m, cap) * 4);
		m->csum = meta_hdr_csum(m, cap);
		if (part == 0)
			w->meta_loc = seg_base(sp, w->segs.v[b / bps]) + (b % bps) * w->bs;
		w->err = build_raw(w, m, w->bs);
	}
	free(m);
	for (uint64_t i = 0; !w->err && i < nmeta; i++) {
		size_t off = i * w->bs, len = ab - off < w->bs ? ab - off : w->bs;
		w->err = build_raw(w, (char *)fence + off, len);
	}
	if (!w->err && w->nbuf)
		w->err = build_flush(w);
	if (!w->err && fdatasync(sp->fd))
		w->err = -errno;
	if (!w->err) {
		atomic_fetch_add_explicit(&sp->spill_writes, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&sp->spill_write_bytes, w->bytes, memory_order_relaxed);
	}
	return w->err;
}

static void build_free(struct build *w, int release)
{
	if (release)
		segs_release(w->sp, &w->segs);
	free(w->buf);
	free(w->fences.v);
	free(w->rows.v);
	free(w->segs.v);
	free(w->arrays);
}

/* Mark the records of v[0..n) dead (inside a transaction). */
static void mark_dead_tx(struct srun **v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct emb_run *o = v[i]->r;
		pmemobj_tx_add_range_direct(o, sizeof(*o));
		o->state = EMB_RUN_DEAD;
		o->csum = rec_csum(o);
	}
}

/* A table's count of live records in runs follows a run coming (sign 1) or
 * going (-1). */
static void live_add(struct store *s, const struct emb_run *r, int sign)
{
	struct stable *st = tab_get(s, r->table);
	if (!st || st->t->gen != r->table_gen)
		return;
	if (sign > 0)
		atomic_fetch_add(&st->run_live, r->nlive);
	else
		atomic_fetch_sub(&st->run_live, r->nlive);
}

/* Move v[0..n) from their tables' lists to the dead list.  run_lock held
 * exclusive. */
static void list_retire(struct store *s, struct spill *sp, struct srun **v, size_t n)
{
	atomic_fetch_add(&sp->runs_gen, 1);
	for (size_t i = 0; i < n; i++) {
		live_add(s, v[i]->r, -1);
		for (struct srun **p = &sp->runs[v[i]->r->table]; *p; p = &(*p)->next)
			if (*p == v[i]) {
				*p = v[i]->next;
				break;
			}
		v[i]->next = sp->dead;
		sp->dead = v[i];
	}
}

/* Make the built run part of the pool, in place of the runs old[0..nold)
 * (a merge; they turn dead), at order seq.  commit_lock held. */
static int run_install(struct store *s, struct build *w, uint64_t seq, uint32_t level, struct srun **old,
		       size_t nold)
{
	struct spill *sp = s->sp;
	struct emb_rundir *rd = sp->rd;
	volatile size_t slot = EMB_RUNDIR_CAP;
	for (size_t i = 0; i < EMB_RUNDIR_CAP && slot == EMB_RUNDIR_CAP; i++)
		if (!rd->run[i].state)
			slot = i;
	if (slot == EMB_RUNDIR_CAP)
		return -ENOSPC;
	struct emb_run r = { .id = w->id, .table = w->table, .rec_size = w->rec, .table_gen = w->gen,
			     .seq = seq, .nrecs = w->nrecs, .nlive = w->nlive, .nblocks = w->nblocks,
			     .blk_size = w->bs, .nsegs = (uint32_t)w->segs.n, .min_row = w->min_row,
			     .max_row = w->max_row, .level = level, .bloom_k = BLOOM_K,
			     .bloom_bits = w->bloom_bits, .meta_loc = w->meta_loc, .meta_csum = w->meta_csum,
			     .list_cap = w->list_cap,
			     .state = EMB_RUN_LIVE };
	r.csum = rec_csum(&r);
	volatile int ret = 0;
	TX_BEGIN(s->pop) {
		for (size_t i = 0; i < w->segs.n; i++) {
			struct emb_sseg *g = &sp->pm->seg[w->segs.v[i]];
			pmemobj_tx_add_range_direct(g, sizeof(*g));
			*g = (struct emb_sseg){ .state = EMB_SEG_RUN, .fill = sp->pm->seg_size, .seq = w->id };
		}
		pmemobj_tx_add_range_direct(&rd->run[slot], sizeof(r));
		rd->run[slot] = r;
		mark_dead_tx(old, nold);
	} TX_ONABORT {
		ret = pm_tx_errno();
	} TX_END
	ret = pm_tx_end(s, ret);
	if (ret)
		return ret;
	struct srun *x = srun_new(sp, &rd->run[slot], w->arrays);
	if (!x)
		return -ENOMEM; /* listed at the next mount */
	w->arrays = NULL;
	segs_release(sp, &w->segs);
	w->segs.n = 0;
	pthread_rwlock_wrlock(&sp->run_lock);
	list_retire(s, sp, old, nold);
	list_insert(sp, x);
	live_add(s, x->r, 1);
	pthread_rwlock_unlock(&sp->run_lock);
	return 0;
}

static uint64_t next_id(struct spill *sp)
{
	return atomic_fetch_add(&sp->run_next_id, 1);
}

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

/* index_scan's callback: take one row's chain if it is cold; 1 when es is
 * full (the segment is gathered again next time). */
static int gather_one(void *arg, uint64_t row, uint64_t ref)
{
	struct gather *g = arg;
	struct store *s = g->s;
	struct stable *st = g->st;
	struct chain c;
	if (chain_start(s, st, row, ref, &c) || ver_stub(c.v))
		return 0;
	if (ver_tomb(c.v) && !c.next && !runs_may_hold(s, st->id, row))
		return 0; /* reclaim drops it */
	if (!g->all && heat_test_clear(s->sp, st->id, row))
		return 0;
	return ev_take(s, st, g->es, row, ref) < 0;
}

/* Gather cold rows of st (their whole chains) from index position *di on,
 * until es is full.  commit_lock held. */
static int evict_gather(struct store *s, struct stable *st, size_t *di, int all, struct evset *es)
{
	struct gather g = { s, st, es, all };
	pthread_rwlock_rdlock(&st->lock);
	index_scan(s, st, di, gather_one, &g);
	pthread_rwlock_unlock(&st->lock);
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

/* Is st still table tid of generation gen (it may have been freed while
 * commit_lock was let go; st is not read unless it is still listed)?
 * commit_lock held. */
static int table_same(struct store *s, struct stable *st, uint32_t tid, uint64_t gen)
{
	return tab_get(s, tid) == st && st->t->gen == gen;
}

#define EVICT_SLICE 4096u /* rows per hold of commit_lock when they leave the index */

int64_t evict_table(struct store *s, struct stable *st, size_t *di, uint64_t budget, int all)
{
	struct spill *sp = s->sp;
	uint32_t rs = st->t->row_size, tid = st->id;
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
	struct evset es = { .max = max, .vmax = max };
	es.e = malloc(max * sizeof(*es.e));
	es.off = malloc(max * sizeof(*es.off));
	es.lnk = malloc(max * sizeof(*es.lnk));
	es.bat = malloc(max * sizeof(*es.bat));
	es.data = malloc(max * sizeof(*es.data));
	es.arena = malloc(max * (size_t)rs);
	uint64_t *plain = NULL;
	struct evict_row *er = NULL;
	struct build w;
	int built = 0;
	size_t n = 0;
	int ret = es.e && es.off && es.lnk && es.bat && es.data && es.arena ? 0 : -ENOMEM;
	uint64_t id = 0;
	if (!ret) {
		/* the rows are marked in flight before commit_lock goes: a delete
		 * or a truncation meanwhile leaves a tombstone for them, and the
		 * run's id orders it before any run made meanwhile */
		pthread_mutex_lock(&s->commit_lock);
		ret = evict_gather(s, st, di, all, &es);
		n = es.n;
		if (!ret && n) {
			qsort(es.e, n, sizeof(*es.e), ev_cmp);
			ret = ev_publish(sp, st->id, es.e, n);
			id = next_id(sp);
		}
		pthread_mutex_unlock(&s->commit_lock);
	}
	if (ret || !n)
		goto out;
	spill_unlocked(sp);
	if ((ret = build_open(&w, s, st)))
		goto out;
	built = 1;
	w.id = id;
	/* it leaves the reserve as it will be with this run's rows counted
	 * (runs_reserve grows by at most the run's size) */
	w.keep += (uint32_t)(((uint64_t)es.nv / w.per_blk + 2) * w.bs / sp->pm->seg_size + 1);
	for (size_t i = 0; i < n && !ret; i++)
		ret = build_row(&w, es.e[i].row, &es.bat[es.e[i].v0], &es.data[es.e[i].v0], es.e[i].nv);
	if (!ret)
		ret = build_finish(&w);
	if (ret)
		goto out;
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
	size_t evicted = 0;
	if (!table_same(s, st, tid, w.gen)) {
		ret = -ENOENT; /* the table went meanwhile */
	} else {
		ret = run_install(s, &w, w.id, 0, NULL, 0);
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
				if (!table_same(s, st, tid, w.gen))
					ret = -ENOENT;
			}
		}
		atomic_fetch_add_explicit(&sp->run_evicted, evicted, memory_order_relaxed);
		n = evicted;
	}
	ev_publish(sp, 0, NULL, 0);
	pthread_mutex_unlock(&s->commit_lock);
out:
	if (sp->ev_n)
		ev_publish(sp, 0, NULL, 0);
	if (built)
		build_free(&w, 1);
	free(plain);
	free(er);
	free(es.e);
	free(es.off);
	free(es.lnk);
	free(es.bat);
	free(es.data);
	free(es.arena);
	return ret ? ret : (int64_t)n;
}

/* ---- merges -------------------------------------------------------------- */

/* Sequential reader of one run's records. */
struct rit {
	struct srun *x;
	char *buf;
	uint64_t blk0, nblk;   /* blocks [blk0, blk0 + nblk) are in buf */
	uint64_t blk;          /* current block */
	uint32_t rec;          /* current record in it */
	const char *cur;       /* current record, NULL at the end */
	int err;
};

static int rit_load(struct store *s, struct rit *it)
{
	struct spill *sp = s->sp;
	struct srun *x = it->x;
	uint32_t bs = x->r->blk_size;
	uint64_t n = CHUNK_BYTES / bs ? CHUNK_BYTES / bs : 1;
	if (it->blk + n > x->r->nblocks)
		n = x->r->nblocks - it->blk;
	/* blocks of one segment are adjacent on the device */
	uint64_t cnt = x->bps - it->blk % x->bps < n ? x->bps - it->blk % x->bps : n;
	struct sreq q = { .blk = blk_loc(sp, x, it->blk), .span = (uint32_t)(cnt * bs), .boff = 0 };
	int ret = device_read_raw(sp, &q, 1, it->buf);
	if (ret)
		return ret;
	it->blk0 = it->blk;
	it->nblk = cnt;
	for (uint64_t i = 0; i < cnt; i++) {
		struct bref b = { it->blk + i, it->buf + i * bs, 0, NULL };
		if (blk_ok(sp, x, &b))
			return -EIO;
	}
	return 0;
}

/* Step to the next record (or the first). */
static void rit_next(struct store *s, struct rit *it)
{
	struct srun *x = it->x;
	for (;;) {
		if (it->blk >= x->r->nblocks) {
			it->cur = NULL;
			return;
		}
		if (it->blk < it->blk0 || it->blk >= it->blk0 + it->nblk) {
			if ((it->err = rit_load(s, it))) {
				it->cur = NULL;
				return;
			}
		}
		const char *b = it->buf + (it->blk - it->blk0) * x->r->blk_size;
		const struct emb_rblk *h = (const struct emb_rblk *)b;
		if (it->rec < h->nrec) {
			it->cur = rec_at(x, b, it->rec++);
			return;
		}
		it->blk++;
		it->rec = 0;
	}
}

/* The versions of one row a merge gathers from its inputs, in order. */
struct mvers {
	size_t n, cap;
	uint64_t *batch;     /* | EMB_RREC_TOMB */
	char *bytes;         /* row i at i * row size */
	const char **data;   /* kept versions' bytes (NULL: tombstone) */
	uint8_t *keep;
};

/* Room for one more version of rs bytes: 0 or -ENOMEM. */
static int mvers_room(struct mvers *mv, uint32_t rs)
{
	if (mv->n < mv->cap)
		return 0;
	size_t cap = mv->cap ? 2 * mv->cap : 64;
	uint64_t *b = realloc(mv->batch, cap * sizeof(*b));
	if (b)
		mv->batch = b;
	char *d = b ? realloc(mv->bytes, cap * (size_t)rs) : NULL;
	if (d)
		mv->bytes = d;
	const char **p = d ? realloc(mv->data, cap * sizeof(*p)) : NULL;
	if (p)
		mv->data = p;
	uint8_t *k = p ? realloc(mv->keep, cap) : NULL;
	if (!k)
		return -ENOMEM;
	mv->keep = k;
	mv->cap = cap;
	return 0;
}

static void mvers_free(struct mvers *mv)
{
	free(mv->batch);
	free(mv->bytes);
	free(mv->data);
	free(mv->keep);
}

/* Keep of mv the newest version and the newest each of the live snapshots'
 * batches snaps[0..ns) sees, and (bottom: no older run) drop the oldest
 * kept ones while they are tombstones: their batches and bytes, compacted
 * to the front of mv->batch and mv->data.  Returns how many are kept. */
static size_t mvers_keep(struct mvers *mv, uint32_t rs, const uint64_t *snaps, uint32_t ns, int bottom)
{
	memset(mv->keep, 0, mv->n);
	mv->keep[0] = 1;
	for (uint32_t k = 0; k < ns; k++)
		for (size_t j = 0; j < mv->n; j++)
			if ((mv->batch[j] & ~EMB_RREC_TOMB) <= snaps[k]) {
				mv->keep[j] = 1;
				break;
			}
	size_t nk = 0;
	for (size_t j = 0; j < mv->n; j++)
		if (mv->keep[j]) {
			mv->batch[nk] = mv->batch[j];
			mv->data[nk] = mv->batch[j] & EMB_RREC_TOMB ? NULL : mv->bytes + j * (size_t)rs;
			nk++;
		}
	while (bottom && nk && (mv->batch[nk - 1] & EMB_RREC_TOMB))
		nk--;
	return nk;
}

/* Run x holds no row in the row ranges of v[0..m). */
static int runs_apart(const struct srun *x, struct srun *const *v, size_t m)
{
	for (size_t i = 0; i < m; i++)
		if (x->r->min_row <= v[i]->r->max_row && v[i]->r->min_row <= x->r->max_row)
			return 0;
	return 1;
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
	uint32_t ns;
	pthread_rwlock_rdlock(&s->snap_lock);
	ns = s->n_live;
	memcpy(snaps, s->live_batch, ns * sizeof(snaps[0]));
	pthread_rwlock_unlock(&s->snap_lock);
	struct rit *it = calloc(m, sizeof(*it));
	struct build w;
	int ret = it ? build_open(&w, s, st) : -ENOMEM;
	if (ret) {
		free(it);
		return ret;
	}
	w.id = plan ? 0 : next_id(sp);
	w.keep = keep; /* a merge may take the reserve */
	w.dry = plan != NULL;
	uint32_t level = 0;
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
		if (v[i]->r->level + 1 > level)
			level = v[i]->r->level + 1;
	}
	struct mvers mv = { 0 };
	uint64_t in_bytes = 0;
	while (!ret) {
		uint64_t row = EMB_NONE;
		for (size_t i = 0; i < m; i++)
			if (it[i].cur && rec_row(it[i].cur) < row)
				row = rec_row(it[i].cur);
		if (row == EMB_NONE)
			break;
		mv.n = 0;
		for (size_t i = 0; i < m && !ret; i++) {
			while (it[i].cur && rec_row(it[i].cur) == row) {
				if ((ret = mvers_room(&mv, rs)))
					break;
				mv.batch[mv.n] = rec_batch(it[i].cur);
				memcpy(mv.bytes + mv.n * (size_t)rs, it[i].cur + 16, rs);
				mv.n++;
				in_bytes += w.rec;
				rit_next(s, &it[i]);
				if (it[i].err)
					ret = it[i].err;
			}
		}
		if (ret)
			break;
		size_t nk = mvers_keep(&mv, rs, snaps, ns, bottom);
		if (nk)
			ret = build_row(&w, row, mv.batch, mv.data, (uint32_t)nk);
	}
	if (!ret)
		ret = build_finish(&w);
	if (ret == -ENODATA) { /* everything dropped: the inputs just go */
		ret = 0;
		w.nrecs = 0;
	}
	if (plan && !ret)
		*plan = w.nrecs ? w.dry_segs : 0;
	if (!ret && !plan) {
		pthread_mutex_lock(&s->commit_lock);
		/* the inputs must still be listed, in order, with nothing between
		 * them that holds rows of theirs */
		int listed = 1;
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
				listed = runs_apart(p, v, m);
			if (p)
				p = p->next;
		}
		pthread_rwlock_unlock(&sp->run_lock);
		if (!listed || !table_same(s, st, tid, gen))
			ret = -ESTALE;
		else if (w.nrecs)
			ret = run_install(s, &w, v[0]->r->seq, level, v, m);
		else
			ret = runs_retire_locked(s, v, m);
		if (!ret) {
			pthread_rwlock_wrlock(&st->lock);
			st->mod++;
			pthread_rwlock_unlock(&st->lock);
		}
		pthread_mutex_unlock(&s->commit_lock);
	}
	if (!ret && !plan) {
		atomic_fetch_add(&sp->merges, 1);
		atomic_fetch_add(&sp->merge_in_bytes, in_bytes);
		atomic_fetch_add(&sp->merge_out_bytes, w.bytes);
	}
	build_free(&w, 1);
	for (size_t i = 0; i < m; i++)
		free(it[i].buf);
	free(it);
	mvers_free(&mv);
	return ret;
}

/* Segments runs v[0..m) hold. */
static uint64_t segs_of(struct srun **v, size_t m)
{
	uint64_t n = 0;
	for (size_t i = 0; i < m; i++)
		n += v[i]->r->nsegs;
	return n;
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
	uint32_t nfree = free_segs(sp);
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

void runs_reserve(struct store *s)
{
	struct spill *sp = s->sp;
	uint64_t most = 0;
	pthread_rwlock_rdlock(&sp->run_lock); /* the lists change under it (a truncation's) */
	for (uint32_t id = 0; id < EMB_NTABLES; id++) {
		struct stable *st = sp->runs[id] ? tab_get(s, id) : NULL;
		if (!st)
			continue;
		/* its rows in runs: no more than are live there, nor than it has */
		uint64_t rs = st->t->row_size, rows = atomic_load(&st->run_live);
		if (rows > ld64(&st->t->size) / rs + 1)
			rows = ld64(&st->t->size) / rs + 1;
		uint64_t bs = run_blk_size((uint32_t)rs);
		uint64_t bytes = (rows / run_blk_recs((uint32_t)rs) + 1) * bs * 33 / 32; /* its meta blocks: a few % */
		if (bytes > most)
			most = bytes;
	}
	pthread_rwlock_unlock(&sp->run_lock);
	uint64_t segs = (most + sp->pm->seg_size - 1) / sp->pm->seg_size + 1;
	if (segs < sp->reserve_min)
		segs = sp->reserve_min;
	if (segs > sp->pm->nsegs / 2)
		segs = sp->pm->nsegs / 2;
	atomic_store(&sp->reserve, (uint32_t)segs);
}

int runs_make_room(struct store *s)
{
	int n = 0, ret = 0;
	while (n < 16 && (ret = merge_fitting(s)) > 0) {
		n++;
		pthread_mutex_lock(&s->commit_lock);
		runs_reap_locked(s);
		pthread_mutex_unlock(&s->commit_lock);
	}
	return ret < 0 && !n ? ret : n;
}

/* One merge the runs need, if any: where the device is half full, all runs
 * of the table with the most; else MERGE_FANOUT adjacent runs of one level;
 * where that finds no room, the one that gives back the most room
 * (merge_fitting, which a writer waiting for room also gets through
 * runs_make_room).  1 merged, 0 none needed, or -errno. */
int merge_some(struct store *s)
{
	struct spill *sp = s->sp;
	/* the device is half full: merge all runs of the table with the most,
	 * which drops every copy newer runs replaced (while the output still
	 * finds room) */
	if (free_segs(sp) * 2 < sp->pm->nsegs) {
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
		struct srun **v;
		size_t n;
		if (st && !runs_get(sp, best, &v, &n)) {
			int ret = n > 1 ? merge_runs(s, st, v, n, 1, 1, NULL) : 0;
			runs_put(v, n);
			if (ret == -ENOSPC)
				return merge_fitting(s); /* no room for it: smaller ones */
			if (n > 1)
				return ret ? ret : 1;
		}
	}
	for (uint32_t id = 0; id < EMB_NTABLES; id++) {
		if (!sp->runs[id])
			continue;
		struct stable *st = tab_get(s, id);
		struct srun **v;
		size_t n;
		if (!st || runs_get(sp, id, &v, &n))
			continue;
		size_t at = n, len = 0;
		for (size_t i = 0; i < n && at == n; i++) {
			size_t j = i;
			while (j < n && v[j]->r->level == v[i]->r->level)
				j++;
			if (j - i >= MERGE_FANOUT) {
				at = i;
				len = j - i;
			}
			i = j - 1;
		}
		int ret = 0;
		if (at < n)
			ret = merge_runs(s, st, v + at, len, at + len == n, 1, NULL);
		runs_put(v, n);
		if (ret == -ENOSPC)
			return merge_fitting(s);
		if (at < n)
			return ret ? ret : 1;
	}
	return 0;
}

/* ---- retiring and freeing runs -------------------------------------------- */

/* Move runs v[0..n) out of their table's list into the dead list (pool and
 * DRAM).  commit_lock held. */
int runs_retire_locked(struct store *s, struct srun **v, size_t n)
{
	struct spill *sp = s->sp;
	volatile int ret = 0;
	TX_BEGIN(s->pop) {
		mark_dead_tx(v, n);
	} TX_ONABORT {
		ret = pm_tx_errno();
	} TX_END
	ret = pm_tx_end(s, ret);
	if (ret)
		return ret;
	pthread_rwlock_wrlock(&sp->run_lock);
	list_retire(s, sp, v, n);
	pthread_rwlock_unlock(&sp->run_lock);
	return 0;
}

/* Free dead run x: its segments (if its meta block can say which) and its
 * record, in one transaction (commit_lock held, or at mount). */
static int run_free_tx(struct store *s, struct srun *x)
{
	struct spill *sp = s->sp;
	struct emb_run *r = x->r;
	int known = srun_load(s, x) == 0; /* else its segments stay taken (fsck says so) */
	volatile int ret = 0;
	TX_BEGIN(s->pop) {
		for (uint32_t i = 0; known && i < r->nsegs; i++) {
			struct emb_sseg *g = &sp->pm->seg[x->seg[i]];
			pmemobj_tx_add_range_direct(g, sizeof(*g));
			*g = (struct emb_sseg){ .state = EMB_SEG_FREE };
		}
		pmemobj_tx_add_range_direct(r, sizeof(*r));
		memset(r, 0, sizeof(*r));
	} TX_ONABORT {
		ret = pm_tx_errno();
	} TX_END
	return pm_tx_end(s, ret);
}

int runs_reap_locked(struct store *s)
{
	struct spill *sp = s->sp;
	int ret = 0;
	pthread_rwlock_wrlock(&sp->run_lock);
	struct srun **p = &sp->dead;
	while (*p && !ret) {
		struct srun *x = *p;
		if (atomic_load(&x->refs) > 1) {
			p = &x->next;
			continue;
		}
		*p = x->next;
		pthread_rwlock_unlock(&sp->run_lock);
		ret = run_free_tx(s, x);
		srun_free(x);
		pthread_rwlock_wrlock(&sp->run_lock);
		p = &sp->dead;
	}
	pthread_rwlock_unlock(&sp->run_lock);
	return ret;
}

int runs_drop_table(struct store *s, struct stable *st)
{
	struct spill *sp = s->sp;
	struct srun **v;
	size_t n;
	if (!sp || !sp->runs[st->id])
		return 0;
	int ret = runs_get(sp, st->id, &v, &n);
	if (!ret && n)
		ret = runs_retire_locked(s, v, n);
	runs_put(v, n);
	if (!ret)
		ret = runs_reap_locked(s);
	return ret;
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
		struct rit it = { .x = x, .blk0 = EMB_NONE };
		/* start at the last block whose fence is below `from` */
		if (from > x->r->min_row) {
			size_t lo = u64_lower_bound(x->fence, x->r->nblocks, from);
			it.blk = lo ? lo - 1 : 0;
		}
		if (posix_memalign((void **)&it.buf, BLK, CHUNK_BYTES + x->r->blk_size)) {
			ret = -ENOMEM;
			break;
		}
		for (rit_next(s, &it); it.cur && !ret; rit_next(s, &it)) {
			uint64_t r = rec_row(it.cur);
			if (r >= from && (!rows.n || rows.v[rows.n - 1] != r))
				ret = u64vec_push(&rows, r);
		}
		if (!ret && it.err)
			ret = it.err;
		free(it.buf);
	}
	runs_put(v, n);
	if (!ret && rows.n) {
		u64_sort(rows.v, rows.n);
		struct build w;
		ret = build_open(&w, s, st);
		if (!ret) {
			w.id = next_id(sp);
			uint64_t tb = ld64(&s->sb->batch) | EMB_RREC_TOMB;
			const char *none = NULL;
			for (size_t i = 0; i < rows.n && !ret; i++)
				if (!i || rows.v[i] != rows.v[i - 1])
					ret = build_row(&w, rows.v[i], &tb, &none, 1);
			if (!ret)
				ret = build_finish(&w);
			if (!ret)
				ret = run_install(s, &w, w.id, 0, NULL, 0);
			build_free(&w, 1);
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

/* ---- seeking ------------------------------------------------------------- */

int runs_ranges(struct store *s, uint32_t id, struct u64vec *lohi)
{
	struct spill *sp = s->sp;
	struct srun **v;
	size_t n;
	if (!sp)
		return 0;
	int ret = runs_get(sp, id, &v, &n);
	for (size_t i = 0; i < n && !ret; i++) {
		const struct emb_run *r = v[i]->r;
		if (srun_load(s, v[i])) { /* unreadable: its whole range counts */
			ret = u64vec_push(lohi, r->min_row);
			if (!ret)
				ret = u64vec_push(lohi, r->max_row + 1);
			continue;
		}
		for (uint64_t k = 0; k < r->nblocks && !ret; k++) {
			uint64_t lo = v[i]->fence[k];
			uint64_t hi = k + 1 < r->nblocks ? v[i]->fence[k + 1] : r->max_row + 1;
			if (hi <= lo)
				hi = lo + 1;
			if (lohi->n && lohi->v[lohi->n - 1] >= lo && lohi->v[lohi->n - 2] <= lo) {
				if (hi > lohi->v[lohi->n - 1])
					lohi->v[lohi->n - 1] = hi;
				continue;
			}
			ret = u64vec_push(lohi, lo);
			if (!ret)
				ret = u64vec_push(lohi, hi);
		}
	}
	runs_put(v, n);
	return ret;
}

/* ---- attach, detach, stats, checks ---------------------------------------- */

int runs_load(struct store *s, char *err, size_t n)
{
	struct spill *sp = s->sp;
	struct emb_spill *pm = sp->pm;
	sp->runs = calloc(EMB_NTABLES, sizeof(*sp->runs));
	pthread_rwlock_init(&sp->run_lock, NULL);
	pthread_mutex_init(&sp->ra_mu, NULL);
	pthread_cond_init(&sp->ra_cv, NULL);
	pthread_cond_init(&sp->ra_job, NULL);
	if (!sp->runs)
		return -ENOMEM;
	if (!pm->runs_off) {
		volatile int ret = 0;
		TX_BEGIN(s->pop) {
			PMEMoid o = pmemobj_tx_zalloc(sizeof(struct emb_rundir), 0);
			struct emb_rundir *rd = pmemobj_direct(o);
			rd->magic = EMB_RUNDIR_MAGIC;
			rd->next_id = 1;
			pmemobj_tx_add_range_direct(&pm->runs_off, 8);
			pm->runs_off = o.off;
		} TX_ONABORT {
			ret = pm_tx_errno();
		} TX_END
		ret = pm_tx_end(s, ret);
		if (ret)
			return store_err(err, n, ret, "no room in the pool for the run directory");
	}
	if (!pool_range_ok(s, pm->runs_off, sizeof(struct emb_rundir), 8))
		return store_err(err, n, -EIO, "run directory lies outside the pool");
	sp->rd = S_PTR(s, pm->runs_off);
	if (sp->rd->magic != EMB_RUNDIR_MAGIC)
		return store_err(err, n, -EIO, "run directory is damaged");
	uint64_t max_id = 0;
	for (size_t i = 0; i < EMB_RUNDIR_CAP; i++) {
		struct emb_run *r = &sp->rd->run[i];
		if (!r->state)
			continue;
		int ret = r->state == EMB_RUN_LIVE || r->state == EMB_RUN_DEAD
				  ? rec_sane(s, r, err, n)
				  : store_err(err, n, -EIO, "run record %zu: bad state %u", i, r->state);
		if (ret)
			return ret;
		struct srun *x = srun_new(sp, r, NULL);
		if (!x)
			return -ENOMEM;
		if (r->id > max_id)
			max_id = r->id;
		if (r->state == EMB_RUN_LIVE) {
			list_insert(sp, x);
			live_add(s, r, 1);
			continue;
		}
		/* a run a merge replaced or a drop let go: nobody reads it now */
		ret = run_free_tx(s, x);
		srun_free(x);
		if (ret)
			return store_err(err, n, ret, "freeing a replaced run: %s", strerror(-ret));
	}
	uint64_t nid = sp->rd->next_id > max_id + 1 ? sp->rd->next_id : max_id + 1;
	atomic_store(&sp->run_next_id, nid + (1ull << 20)); /* ids of runs lost in a crash stay unused */
	sp->rd->next_id = nid + (1ull << 20);
	return pm_persist(s, &sp->rd->next_id, 8);
}

void runs_unload(struct spill *sp)
{
	if (sp->ra_pid == getpid()) { /* the read-ahead thread first: it holds runs */
		pthread_mutex_lock(&sp->ra_mu);
		sp->ra_stop = 1;
		pthread_cond_signal(&sp->ra_job);
		pthread_mutex_unlock(&sp->ra_mu);
		pthread_join(sp->ra_thr, NULL);
		sp->ra_pid = 0;
	}
	for (uint32_t i = 0; i < RA_WINDOWS; i++) /* queued and never read */
		if (sp->ra[i].x)
			srun_put(sp->ra[i].x);
	if (sp->runs) {
		for (uint32_t id = 0; id < EMB_NTABLES; id++)
			for (struct srun *x = sp->runs[id], *nx; x; x = nx) {
				nx = x->next;
				srun_free(x);
			}
		free(sp->runs);
	}
	for (struct srun *x = sp->dead, *nx; x; x = nx) {
		nx = x->next;
		srun_free(x);
	}
	sp->runs = NULL;
	sp->dead = NULL;
	for (uint32_t i = 0; i < RA_WINDOWS; i++) /* no reader is left */
		sp->ra[i] = (struct rawin){ 0 };
	free(sp->ra_arena);
	sp->ra_arena = NULL;
	free(sp->ev_rows);
	sp->ev_rows = NULL;
}

void runs_stats(struct store *s, struct store_spill_stats *st)
{
	struct spill *sp = s->sp;
	pthread_rwlock_rdlock(&sp->run_lock);
	for (uint32_t id = 0; id < EMB_NTABLES; id++)
		for (struct srun *x = sp->runs[id]; x; x = x->next) {
			st->runs++;
			st->run_rows += x->r->nrecs;
			st->run_bytes += x->r->nblocks * x->r->blk_size;
			st->run_pool_bytes += sizeof(struct emb_run);
			st->run_meta_bytes += arr_bytes(x->r) + ((size_t)x->r->nsegs * 4 + 7) / 8 * 8;
			if (x->r->level + 1 > st->run_levels)
				st->run_levels = x->r->level + 1;
		}
	for (struct srun *x = sp->dead; x; x = x->next)
		st->runs_dead++;
	pthread_rwlock_unlock(&sp->run_lock);
	st->run_evicted = atomic_load(&sp->run_evicted);
	st->run_reads = atomic_load(&sp->run_reads);
	st->run_blocks = atomic_load(&sp->run_blocks);
	st->bloom_fp = atomic_load(&sp->bloom_fp);
	st->run_ra_loads = atomic_load(&sp->ra_loads);
	st->run_ra_blocks = atomic_load(&sp->ra_blocks);
	st->merges = atomic_load(&sp->merges);
	st->merge_in_bytes = atomic_load(&sp->merge_in_bytes);
	st->merge_out_bytes = atomic_load(&sp->merge_out_bytes);
}

/* Read run x front to back: 0 when its blocks are sound, in row order and
 * hold nrecs records (nlive of them rows). */
static int run_scan_ok(struct store *s, struct srun *x)
{
	struct rit it = { .x = x, .blk0 = EMB_NONE };
	if (posix_memalign((void **)&it.buf, BLK, CHUNK_BYTES + x->r->blk_size))
		return -ENOMEM;
	uint64_t n = 0, live = 0, last = 0;
	int bad = 0;
	for (rit_next(s, &it); it.cur; rit_next(s, &it)) {
		uint64_t row = rec_row(it.cur);
		bad |= n && row < last;
		bad |= row < x->r->min_row || row > x->r->max_row;
		last = row;
		n++;
		live += !(rec_batch(it.cur) & EMB_RREC_TOMB);
	}
	free(it.buf);
	return bad || it.err || n != x->r->nrecs || live != x->r->nlive;
}

int runs_fsck(struct store *s, uint64_t *nruns, uint64_t *bad)
{
	struct spill *sp = s->sp;
	*bad = *nruns = 0;
	if (!sp)
		return 0;
	uint8_t *own = calloc(sp->pm->nsegs, 1);
	if (!own)
		return -ENOMEM;
	pthread_rwlock_rdlock(&sp->run_lock);
	for (uint32_t id = 0; id < EMB_NTABLES; id++)
		for (struct srun *x = sp->runs[id]; x; x = x->next) {
			const struct emb_run *r = x->r;
			int b = rec_sane(s, r, NULL, 0) || srun_load(s, x);
			if (b) { /* its segments are unknown */
				(*bad)++;
				(*nruns)++;
				continue;
			}
			struct stable *st = tab_get(s, id);
			b |= !st || st->t->gen != r->table_gen;
			for (uint64_t k = 1; k < r->nblocks; k++)
				b |= x->fence[k] < x->fence[k - 1];
			for (uint32_t k = 0; k < r->nsegs; k++)
				b |= own[x->seg[k]]++ != 0;
			if (!b)
				b = run_scan_ok(s, x) != 0;
			*bad += b;
			(*nruns)++;
		}
	for (struct srun *x = sp->dead; x; x = x->next) {
		const struct emb_run *r = x->r;
		for (uint32_t k = 0; !srun_load(s, x) && k < r->nsegs; k++)
			*bad += own[x->seg[k]]++ != 0;
	}
	pthread_rwlock_unlock(&sp->run_lock);
	for (uint64_t k = 0; k < sp->pm->nsegs; k++)
		*bad += sp->pm->seg[k].state == EMB_SEG_RUN && !own[k];
	free(own);
	return 0;
}
