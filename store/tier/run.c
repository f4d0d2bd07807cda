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
 * replaced); a large table's, by a sweep a row range at a time
 * (runsweep.c), and again when its records outside the sweep's parts make
 * half of those in them (an eighth, the device three quarters full).
 * Merges read and write the device without commit_lock.
 * A merge that would only copy its inputs (disjoint rows, no tombstone) is
 * a move: the runs take the next level as they are.  Rows are disjoint
 * when the ranges are, or when the runs are fresh (an eviction's whose rows
 * no other run held, or a merge's of fresh runs; DRAM only): a load's runs
 * are written once.  Sparse fresh runs (under half the rows of their
 * range) merge among themselves, MERGE_FANOUT of about one size.
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
 *
 * Files.  Run work is split by job, sharing run_int.h:
 *   run.c        this file: run records, meta blocks, filters, loading,
 *                the DRAM lists, retiring and freeing, attach, stats, fsck
 *   runlookup.c  lookups: planning a request over every run, reading,
 *                deciding rows
 *   runahead.c   read-ahead windows and their thread
 *   runbuild.c   writing a run: blocks, meta, installing it
 *   runevict.c   eviction of cold rows into new runs (a CLOCK hand in row
 *                order; whether a new run is fresh: its rows in no other run)
 *   runmerge.c   merges (and the room they need; trivial moves of runs of
 *                disjoint rows, size-tiered merges of sparse fresh runs),
 *                truncation
 *   runsweep.c   sweeps: the merge of all of a table's runs, a row range
 *                (a part) at a time
 *   runmvers.c   the versions of a row a merge or a sweep gathers and keeps
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

#include "run_int.h"
#include "../store_test.h"

/* ---- runs: records, meta, arrays ----------------------------------------- */

size_t run_bloom_words(uint64_t bits)
{
	return (size_t)((bits + 63) / 64);
}

/* Bytes of the fences and the filter. */
static size_t arr_bytes(const struct emb_run *r)
{
	return r->nblocks * 8 + run_bloom_words(r->bloom_bits) * 8;
}

/* Segments a list block of bs bytes can name. */
uint64_t run_list_room(uint32_t bs)
{
	return (bs - sizeof(struct emb_rmeta)) / 4;
}

/* The blocks a list of nsegs takes, cap to a block. */
uint64_t run_list_blocks(uint64_t nsegs, uint64_t cap)
{
	return (nsegs + cap - 1) / cap;
}

/* Segments a run of nblocks data blocks and ab bytes of fences and filter
 * takes with its list blocks (which it counts itself), cap segments to a
 * list block. */
uint64_t run_segs(uint64_t nblocks, size_t ab, uint32_t bs, uint64_t bps, uint64_t cap)
{
	uint64_t nmeta = (ab + bs - 1) / bs, nl = 1, nsegs;
	for (;;) {
		nsegs = (nblocks + nl + nmeta + bps - 1) / bps;
		if (run_list_blocks(nsegs, cap) <= nl)
			return nsegs;
		nl = run_list_blocks(nsegs, cap);
	}
}

uint64_t run_rec_csum(const struct emb_run *r)
{
	struct emb_run h = *r;
	h.csum = 0;
	return XXH64(&h, sizeof(h), EMB_RMETA_MAGIC);
}

uint32_t run_blk_csum(const char *b, uint32_t blk)
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
uint64_t run_meta_nseg(const struct emb_rmeta *m, uint64_t cap)
{
	uint64_t from = (uint64_t)m->part * cap;
	return m->nsegs > from ? (m->nsegs - from < cap ? m->nsegs - from : cap) : 0;
}

uint64_t run_meta_hdr_csum(const struct emb_rmeta *m, uint64_t cap)
{
	struct emb_rmeta h = *m;
	h.csum = 0;
	XXH64_state_t *x = XXH64_createState();
	XXH64_reset(x, EMB_RMETA_MAGIC);
	XXH64_update(x, &h, sizeof(h));
	XXH64_update(x, m->seg, (size_t)run_meta_nseg(m, cap) * 4);
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

/* A row's first filter hash (its probes are h1 + i * h2, h2 = mix64(h1) | 1). */
static inline uint64_t bloom_h1(uint64_t row)
{
	return mix64(row + 0x9E3779B97F4A7C15ull);
}

void run_bloom_add(uint64_t *w, uint64_t bits, uint32_t k, uint64_t row)
{
	uint64_t h1 = bloom_h1(row), h2 = mix64(h1) | 1;
	for (uint32_t i = 0; i < k; i++) {
		uint64_t p = bloom_pos(h1 + i * h2, bits);
		w[p / 64] |= 1ull << (p % 64);
	}
}

static int run_bloom_has(const uint64_t *w, uint64_t bits, uint32_t k, uint64_t row)
{
	uint64_t h1 = bloom_h1(row), h2 = mix64(h1) | 1;
	for (uint32_t i = 0; i < k; i++) {
		uint64_t p = bloom_pos(h1 + i * h2, bits);
		if (!(w[p / 64] & (1ull << (p % 64))))
			return 0;
	}
	return 1;
}

/* A run's DRAM state; its arrays (owned, one malloc: segs first) if the
 * builder has them, else read at first use. */
struct srun *srun_new(struct spill *sp, struct emb_run *r, uint32_t *arrays)
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
uint64_t run_blk_loc(const struct spill *sp, const struct srun *x, uint64_t i)
{
	return seg_base(sp, x->seg[i / x->bps]) + (i % x->bps) * x->r->blk_size;
}

/* Record r is sound: checksum, geometry. */
static int rec_sane(struct store *s, const struct emb_run *r, char *err, size_t n)
{
	const struct emb_spill *pm = s->sp->pm;
	if (run_rec_csum(r) != r->csum)
		return store_err(err, n, -EIO, "run record %llu: damaged (checksum)", (unsigned long long)r->id);
	uint64_t bps = r->blk_size ? pm->seg_size / r->blk_size : 0;
	if (!r->id || !r->blk_size || r->blk_size % BLK || r->rec_size + sizeof(struct emb_rblk) > r->blk_size ||
	    r->blk_size > pm->seg_size || !r->nblocks || r->table >= EMB_NTABLES || !bps ||
	    r->nblocks > pm->nsegs * bps || r->nsegs > pm->nsegs ||
	    !r->list_cap || r->list_cap > run_list_room(r->blk_size) ||
	    r->nsegs != run_segs(r->nblocks, arr_bytes(r), r->blk_size, bps, r->list_cap) || r->meta_loc < EMB_SPILL_HDR ||
	    r->meta_loc % BLK || r->meta_loc + r->blk_size > pm->size)
		return store_err(err, n, -EIO, "run record %llu: bad geometry", (unsigned long long)r->id);
	return 0;
}

/* Read x's segments, fences and filter from its meta blocks: 0 or -EIO
 * (counted; the run's rows then read as EIO). */
int srun_load(struct store *s, struct srun *x)
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
	uint64_t nmeta = (ab + bs - 1) / bs, cap = r->list_cap, nl = run_list_blocks(r->nsegs, cap);
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
		uint64_t k = ret ? 0 : run_meta_nseg(m, cap);
		if (!ret && (m->magic != EMB_RMETA_MAGIC || m->id != r->id || m->nsegs != r->nsegs ||
			     m->part != part || run_meta_hdr_csum(m, cap) != m->csum || !k ||
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
		struct sreq q = { .blk = run_blk_loc(sp, x, r->nblocks + nl + i), .span = bs, .boff = i * bs };
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
void runs_list_insert(struct spill *sp, struct srun *x)
{
	atomic_fetch_add(&sp->runs_gen, 1);
	struct srun **p = &sp->runs[x->r->table];
	while (*p && (*p)->r->seq > x->r->seq)
		p = &(*p)->next;
	x->next = *p;
	*p = x;
}

void srun_put(struct srun *x)
{
	atomic_fetch_sub_explicit(&x->refs, 1, memory_order_acq_rel);
}

int runs_get(struct spill *sp, uint32_t id, struct srun ***out, size_t *n)
{
	return runs_get_range(sp, id, 0, UINT64_MAX, out, n);
}

/* Run x holds rows in [lo, hi]. */
static int run_meets(const struct srun *x, uint64_t lo, uint64_t hi)
{
	return x->r->min_row <= hi && lo <= x->r->max_row;
}

int runs_get_range(struct spill *sp, uint32_t id, uint64_t lo, uint64_t hi, struct srun ***out, size_t *n)
{
	*out = NULL;
	*n = 0;
	pthread_rwlock_rdlock(&sp->run_lock);
	size_t k = 0;
	for (struct srun *x = sp->runs[id]; x; x = x->next)
		k += run_meets(x, lo, hi);
	struct srun **v = k ? malloc(k * sizeof(*v)) : NULL;
	if (k && !v) {
		pthread_rwlock_unlock(&sp->run_lock);
		return -ENOMEM;
	}
	k = 0;
	for (struct srun *x = sp->runs[id]; x; x = x->next) {
		if (!run_meets(x, lo, hi))
			continue;
		atomic_fetch_add_explicit(&x->refs, 1, memory_order_acq_rel);
		v[k++] = x;
	}
	pthread_rwlock_unlock(&sp->run_lock);
	*out = v;
	*n = k;
	return 0;
}

void runs_put(struct srun **v, size_t n)
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
		maybe = srun_load(s, x) || run_bloom_has(x->bloom, x->r->bloom_bits, x->r->bloom_k, row);
	}
	if (!maybe && sp->ev_n && sp->ev_id == id) {
		size_t i = u64_lower_bound(sp->ev_rows, sp->ev_n, row);
		maybe = i < sp->ev_n && sp->ev_rows[i] == row;
	}
	pthread_rwlock_unlock(&sp->run_lock);
	return maybe;
}

int store_test_newest_fresh(struct store *s, uint32_t id)
{
	struct spill *sp = s->sp;
	const struct srun *newest = NULL;
	int fresh = -1;
	if (!sp)
		return -1;
	pthread_rwlock_rdlock(&sp->run_lock);
	for (const struct srun *x = sp->runs[id]; x; x = x->next)
		if (!newest || x->r->id > newest->r->id)
			newest = x;
	if (newest)
		fresh = !!newest->fresh;
	pthread_rwlock_unlock(&sp->run_lock);
	return fresh;
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
uint64_t run_fence_floor(const struct srun *x, uint64_t row)
{
	/* row ids are below 2^64 / row size: row + 1 does not wrap */
	size_t lo = u64_lower_bound(x->fence, x->r->nblocks, row + 1);
	return lo ? lo - 1 : 0;
}

/* Blocks [*a, *b] of run x that may hold row (row in the run's range), for
 * rows visited in increasing order: *j is the last block whose fence is <=
 * the previous row (start it at fence_floor of the first), so a walk over
 * many rows is one pass over the fences. */
void run_fence_walk(const struct srun *x, uint64_t row, uint64_t *j, uint64_t *a, uint64_t *b)
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

int run_bloom_row(const struct srun *x, uint64_t row)
{
	return run_bloom_has(x->bloom, x->r->bloom_bits, x->r->bloom_k, row);
}

#define HOLDS_BLKS 256u   /* blocks run_holds_any reads in one queue at most */
#define BLOOM_AHEAD 8u    /* rows ahead whose first filter word it loads */

/* Do blocks blk[0..nb) of x (read into buf) hold a record of any row of
 * cand[0..nc), each candidate with the index in blk of its block (cb)?
 * A block that cannot be read or is damaged may: 1. */
static int holds_in_blocks(struct spill *sp, const struct srun *x, const uint64_t *blk, size_t nb,
			   const uint64_t *cand, const uint32_t *cb, size_t nc, char *buf, struct sreq *q)
{
	uint32_t bs = x->r->blk_size;
	for (size_t i = 0; i < nb; i++)
		q[i] = (struct sreq){ .blk = run_blk_loc(sp, x, blk[i]), .span = bs, .boff = (uint64_t)i * bs };
	if (device_read_raw(sp, q, nb, buf))
		return 1;
	size_t c = 0;
	for (size_t i = 0; i < nb; i++) {
		struct bref b = { blk[i], buf + (size_t)i * bs, 0, NULL };
		if (run_blk_ok(sp, x, &b))
			return 1;
		const struct emb_rblk *h = (const struct emb_rblk *)b.p;
		/* the block's records and its candidates, both in row order */
		for (uint32_t r = 0; r < h->nrec && c < nc && cb[c] == i; r++) {
			uint64_t row = rec_row(rec_at(x, b.p, r));
			while (c < nc && cb[c] == i && cand[c] < row)
				c++;
			if (c < nc && cb[c] == i && cand[c] == row)
				return 1;
		}
		while (c < nc && cb[c] == i)
			c++;
	}
	return 0;
}

int run_holds_any(struct store *s, struct srun *x, const uint64_t *rows, size_t n)
{
	struct spill *sp = s->sp;
	if (srun_load(s, x))
		return 1; /* an unreadable filter: it may hold any row of its range */
	uint32_t bs = x->r->blk_size;
	size_t cap = n < HOLDS_BLKS ? n : HOLDS_BLKS;
	uint64_t *blk = NULL, *cand = NULL;
	uint32_t *cb = NULL;
	struct sreq *q = NULL;
	char *buf = NULL;
	int held = 0;
	/* the first queue is one block, each next one twice the last: an
	 * eviction of rows the run does hold (rewritten rows) stops at the
	 * first read, one of new rows reads its false positives' blocks deep */
	size_t nb = 0, nc = 0, depth = 1;
	for (size_t k = 0; k < n && !held; k++) {
		if (k + BLOOM_AHEAD < n) /* the word of its first probe */
			__builtin_prefetch(&x->bloom[bloom_pos(bloom_h1(rows[k + BLOOM_AHEAD]), x->r->bloom_bits) / 64]);
		uint64_t row = rows[k];
		if (row < x->r->min_row || row > x->r->max_row || !run_bloom_row(x, row))
			continue;
		uint64_t j = run_fence_floor(x, row);
		if (x->fence[j] == row) {
			held = 1; /* the first record of block j */
			break;
		}
		if (!buf) { /* the first candidate: the arrays for them */
			blk = malloc(cap * sizeof(*blk));
			cand = malloc(n * sizeof(*cand));
			cb = malloc(n * sizeof(*cb));
			q = malloc(cap * sizeof(*q));
			if (!blk || !cand || !cb || !q || posix_memalign((void **)&buf, BLK, cap * bs)) {
				buf = NULL;
				held = 1; /* no memory to tell: it may */
				break;
			}
		}
		if (!nb || blk[nb - 1] != j) {
			if (nb == depth) { /* a queue's worth: read them, then go on */
				held = holds_in_blocks(sp, x, blk, nb, cand, cb, nc, buf, q);
				nb = nc = 0;
				depth = depth * 2 < cap ? depth * 2 : cap;
				if (held)
					break;
			}
			blk[nb++] = j;
		}
		cand[nc] = row;
		cb[nc++] = (uint32_t)(nb - 1);
	}
	if (!held && nb)
		held = holds_in_blocks(sp, x, blk, nb, cand, cb, nc, buf, q);
	free(blk);
	free(cand);
	free(cb);
	free(q);
	free(buf);
	return held;
}

/* Check block b of run x once: 0 or -EIO (counted). */
int run_blk_ok(struct spill *sp, const struct srun *x, struct bref *b)
{
	if (!b->ok) {
		const struct emb_rblk *h = (const struct emb_rblk *)b->p;
		int good = h->magic == EMB_RBLK_MAGIC && h->run_id == (uint32_t)x->r->id &&
			   h->nrec <= x->per_blk && run_blk_csum(b->p, x->r->blk_size) == h->csum;
		b->ok = good ? 1 : -EIO;
		if (!good)
			atomic_fetch_add(&sp->csum_errors, 1);
	}
	return b->ok > 0 ? 0 : -EIO;
}



/* ---- reading a run's records in order ----------------------------------- */

/* Read the chunk of blocks of it->x from it->blk on: 0, or -EIO (a block
 * that fails its check). */
int rit_load(struct store *s, struct rit *it)
{
	struct spill *sp = s->sp;
	struct srun *x = it->x;
	uint32_t bs = x->r->blk_size;
	uint64_t n = CHUNK_BYTES / bs ? CHUNK_BYTES / bs : 1;
	if (it->blk + n > x->r->nblocks)
		n = x->r->nblocks - it->blk;
	/* blocks of one segment are adjacent on the device */
	uint64_t cnt = x->bps - it->blk % x->bps < n ? x->bps - it->blk % x->bps : n;
	struct sreq q = { .blk = run_blk_loc(sp, x, it->blk), .span = (uint32_t)(cnt * bs), .boff = 0 };
	int ret = device_read_raw(sp, &q, 1, it->buf);
	if (ret)
		return ret;
	it->blk0 = it->blk;
	it->nblk = cnt;
	for (uint64_t i = 0; i < cnt; i++) {
		struct bref b = { it->blk + i, it->buf + i * bs, 0, NULL };
		if (run_blk_ok(sp, x, &b))
			return -EIO;
	}
	return 0;
}

/* Step to the next record (or the first). */
void rit_next(struct store *s, struct rit *it)
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
		if (it->rec_i < h->nrec) {
			it->cur = rec_at(x, b, it->rec_i++);
			return;
		}
		it->blk++;
		it->rec_i = 0;
	}
}

int rit_open(struct store *s, struct srun *x, uint64_t row, struct rit *it)
{
	*it = (struct rit){ .x = x, .blk0 = EMB_NONE };
	if (row > x->r->min_row) { /* the last block whose fence is below row */
		size_t lo = u64_lower_bound(x->fence, x->r->nblocks, row);
		it->blk = lo ? lo - 1 : 0;
	}
	if (posix_memalign((void **)&it->buf, BLK, CHUNK_BYTES + x->r->blk_size))
		return -ENOMEM;
	for (rit_next(s, it); it->cur && rec_row(it->cur) < row; rit_next(s, it))
		;
	return it->err;
}

/* ---- retiring and freeing runs -------------------------------------------- */

/* Mark the records of v[0..n) dead (inside a transaction). */
void runs_mark_dead_tx(struct srun **v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct emb_run *o = v[i]->r;
		pmemobj_tx_add_range_direct(o, sizeof(*o));
		o->state = EMB_RUN_DEAD;
		o->csum = run_rec_csum(o);
	}
}

/* ---- the merge reserve --------------------------------------------------- */

uint64_t sweep_part_bytes(const struct spill *sp)
{
	uint64_t b = sp->part_bytes ? sp->part_bytes : SWEEP_PART_BYTES, seg = sp->pm->seg_size;
	return (b + seg - 1) / seg * seg; /* a run takes whole segments */
}

int sweep_wants(const struct spill *sp, struct stable *st)
{
	uint64_t bytes = atomic_load(&st->run_live) * (16 + (uint64_t)st->t->row_size);
	return bytes > 2 * sweep_part_bytes(sp);
}

/* The merge reserve a table's runs ask for: what merging all of them would
 * write, in segments (its rows in runs: no more than are live there, nor
 * than it has; its meta blocks add a few %); for a table a sweep merges,
 * what a sweep would write beyond what it frees as it goes. */
static uint64_t table_reserve(const struct spill *sp, struct stable *st)
{
	uint64_t rs = st->t->row_size, rows = atomic_load(&st->run_live), extra = 1;
	if (sweep_wants(sp, st)) {
		/* a sweep (runsweep.c) writes each part in place of an old
		 * one: room for the records no part holds, and two parts */
		uint64_t parts = atomic_load(&st->part_live);
		rows = rows > parts ? rows - parts : 0;
		extra = 2 * (sweep_part_bytes(sp) / sp->pm->seg_size) + 1;
	}
	if (rows > ld64(&st->t->size) / rs + 1)
		rows = ld64(&st->t->size) / rs + 1;
	uint64_t bs = run_blk_size((uint32_t)rs);
	uint64_t bytes = (rows / run_blk_recs((uint32_t)rs) + 1) * bs * 33 / 32;
	return (bytes + sp->pm->seg_size - 1) / sp->pm->seg_size + extra;
}

static uint32_t reserve_clamp(const struct spill *sp, uint64_t segs)
{
	if (segs < sp->reserve_min)
		segs = sp->reserve_min;
	if (segs > sp->pm->nsegs / 2)
		segs = sp->pm->nsegs / 2;
	return (uint32_t)segs;
}

void runs_reserve(struct store *s)
{
	struct spill *sp = s->sp;
	uint64_t most = 0;
	pthread_rwlock_rdlock(&sp->run_lock); /* the lists change under it (a truncation's) */
	for (uint32_t id = 0; id < EMB_NTABLES; id++) {
		struct stable *st = sp->runs[id] ? tab_get(s, id) : NULL;
		uint64_t segs = st ? table_reserve(sp, st) : 0;
		if (segs > most)
			most = segs;
	}
	pthread_rwlock_unlock(&sp->run_lock);
	atomic_store(&sp->reserve, reserve_clamp(sp, most));
}

void runs_reserve_raise(struct store *s, struct stable *st)
{
	struct spill *sp = s->sp;
	uint32_t want = reserve_clamp(sp, table_reserve(sp, st));
	uint32_t had = atomic_load(&sp->reserve);
	while (want > had && !atomic_compare_exchange_weak(&sp->reserve, &had, want))
		;
}

/* A table's count of live records in runs follows a run coming (sign 1) or
 * going (-1); a run coming raises the merge reserve at once (the mover's
 * round lowers it), so that fills between rounds leave merges their room. */
void run_live_add(struct store *s, const struct emb_run *r, int sign)
{
	struct stable *st = tab_get(s, r->table);
	if (!st || st->t->gen != r->table_gen)
		return;
	if (r->level >= RUN_PART_LEVEL)
		atomic_fetch_add(&st->part_live, sign > 0 ? r->nlive : -r->nlive);
	if (sign > 0) {
		atomic_fetch_add(&st->run_live, r->nlive);
		runs_reserve_raise(s, st); /* before its room is counted free again */
	} else
		atomic_fetch_sub(&st->run_live, r->nlive);
}

/* Move v[0..n) from their tables' lists to the dead list.  run_lock held
 * exclusive. */
void runs_list_retire(struct store *s, struct spill *sp, struct srun **v, size_t n)
{
	atomic_fetch_add(&sp->runs_gen, 1);
	for (size_t i = 0; i < n; i++) {
		run_live_add(s, v[i]->r, -1);
		for (struct srun **p = &sp->runs[v[i]->r->table]; *p; p = &(*p)->next)
			if (*p == v[i]) {
				*p = v[i]->next;
				break;
			}
		v[i]->next = sp->dead;
		sp->dead = v[i];
	}
}

/* Is st still table tid of generation gen (it may have been freed while
 * commit_lock was let go; st is not read unless it is still listed)?
 * commit_lock held. */
int run_table_same(struct store *s, struct stable *st, uint32_t tid, uint64_t gen)
{
	return tab_get(s, tid) == st && st->t->gen == gen;
}

/* Move runs v[0..n) out of their table's list into the dead list (pool and
 * DRAM).  commit_lock held. */
int runs_retire_locked(struct store *s, struct srun **v, size_t n)
{
	struct spill *sp = s->sp;
	volatile int ret = 0;
	PM_TX(s) {
		runs_mark_dead_tx(v, n);
	} PM_TX_END(s, ret);
	if (ret)
		return ret;
	pthread_rwlock_wrlock(&sp->run_lock);
	runs_list_retire(s, sp, v, n);
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
	PM_TX(s) {
		for (uint32_t i = 0; known && i < r->nsegs; i++) {
			struct emb_sseg *g = &sp->pm->seg[x->seg[i]];
			pmemobj_tx_add_range_direct(g, sizeof(*g));
			pthread_mutex_lock(&sp->mu); /* seg_claim reads states under it */
			*g = (struct emb_sseg){ .state = EMB_SEG_FREE };
			pthread_mutex_unlock(&sp->mu);
		}
		pmemobj_tx_add_range_direct(r, sizeof(*r));
		memset(r, 0, sizeof(*r));
	} PM_TX_END(s, ret);
	return ret;
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
		PM_TX(s) {
			PMEMoid o = pmemobj_tx_zalloc(sizeof(struct emb_rundir), 0);
			struct emb_rundir *rd = pmemobj_direct(o);
			rd->magic = EMB_RUNDIR_MAGIC;
			rd->next_id = 1;
			pmemobj_tx_add_range_direct(&pm->runs_off, 8);
			pm->runs_off = o.off;
		} PM_TX_END(s, ret);
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
			runs_list_insert(sp, x);
			run_live_add(s, r, 1);
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
	int parts = 0;
	pthread_rwlock_rdlock(&sp->run_lock);
	for (uint32_t id = 0; id < EMB_NTABLES; id++)
		for (struct srun *x = sp->runs[id]; x; x = x->next) {
			st->runs++;
			st->run_rows += x->r->nrecs;
			st->run_bytes += x->r->nblocks * x->r->blk_size;
			st->run_pool_bytes += sizeof(struct emb_run);
			st->run_meta_bytes += arr_bytes(x->r) + ((size_t)x->r->nsegs * 4 + 7) / 8 * 8;
			if (x->r->level >= RUN_PART_LEVEL) /* a sweep's parts: one level below the rest */
				parts = 1;
			else if (x->r->level + 1 > st->run_levels)
				st->run_levels = x->r->level + 1;
		}
	st->run_levels += parts;
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
	st->merge_moves = atomic_load(&sp->moves);
	st->sweep_parts = atomic_load(&sp->sweep_steps);
	st->sweeping = atomic_load(&sp->sweep_on);
	st->bulk_runs = atomic_load(&sp->bulk_runs);
	st->bulk_rows = atomic_load(&sp->bulk_rows);
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
