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
 * version newer than the view's batch) consults the table's runs newest
 * first: range, Bloom filter, fence search, one block (or the few blocks of
 * a row with many versions); the first version with batch <= the view's
 * batch decides, a tombstone is a hole.  A request's rows are resolved run
 * by run; the blocks they need are read once each, adjacent blocks in one
 * read (store reads of many rows, `cat`, a snapshot copy, gathers whose ids
 * share blocks).  Deleting a row a run may hold writes a tombstone into the
 * pool (commit.c), which the mover evicts like any row.
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

static uint64_t meta_hdr_csum(const struct emb_rmeta *m)
{
	struct emb_rmeta h = *m;
	h.csum = 0;
	XXH64_state_t *x = XXH64_createState();
	XXH64_reset(x, EMB_RMETA_MAGIC);
	XXH64_update(x, &h, sizeof(h));
	XXH64_update(x, m->seg, (size_t)m->nsegs * 4);
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
	    r->nsegs != (r->nblocks + 1 + (arr_bytes(r) + r->blk_size - 1) / r->blk_size + bps - 1) / bps ||
	    r->nsegs > (r->blk_size - sizeof(struct emb_rmeta)) / 4 || r->meta_loc < EMB_SPILL_HDR ||
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
	uint64_t nmeta = (ab + bs - 1) / bs;
	char *hb = NULL, *ab_buf = NULL;
	uint32_t *arrays = malloc(segb + ab);
	int ret = arrays && !posix_memalign((void **)&hb, BLK, bs) &&
			  !posix_memalign((void **)&ab_buf, BLK, (nmeta ? nmeta : 1) * bs) ? 0 : -ENOMEM;
	struct sreq q = { .blk = r->meta_loc, .span = bs, .boff = 0 };
	if (!ret)
		ret = device_read_raw(sp, &q, 1, hb);
	const struct emb_rmeta *m = (const struct emb_rmeta *)hb;
	if (!ret && (m->magic != EMB_RMETA_MAGIC || m->id != r->id || m->nsegs != r->nsegs ||
		     meta_hdr_csum(m) != m->csum))
		ret = -EIO;
	if (!ret) {
		memset(arrays, 0, segb);
		memcpy(arrays, m->seg, (size_t)r->nsegs * 4);
		for (uint32_t i = 0; i < r->nsegs && !ret; i++)
			if (arrays[i] >= sp->pm->nsegs || sp->pm->seg[arrays[i]].state != EMB_SEG_RUN)
				ret = -EIO;
	}
	x->seg = arrays;
	for (uint64_t i = 0; !ret && i < nmeta; i++) {
		q = (struct sreq){ .blk = blk_loc(sp, x, r->nblocks + 1 + i), .span = bs, .boff = i * bs };
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

/* Blocks [a, b] of run x that may hold row. */
static int row_blocks(const struct srun *x, uint64_t row, uint64_t *a, uint64_t *b)
{
	const struct emb_run *r = x->r;
	if (row < r->min_row || row > r->max_row || !bloom_has(x->bloom, r->bloom_bits, r->bloom_k, row))
		return 0;
	/* last block whose fence is <= row (row ids are below 2^64 / row size:
	 * row + 1 does not wrap) */
	size_t lo = u64_lower_bound(x->fence, r->nblocks, row + 1);
	if (!lo)
		return 0;
	*b = lo - 1;
	*a = *b;
	if (x->fence[*b] == row) /* the row's versions fill blocks: from the first whose fence it is */
		while (*a > 0 && x->fence[*a - 1] == row)
			(*a)--;
	return 1;
}

/* A block read into memory, checked once. */
struct bref {
	uint64_t blk;
	char *p;
	int ok; /* 1 sound, -EIO damaged, 0 not checked */
};

/* Read the distinct blocks of x listed in want[0..n) (sorted, unique) into
 * one buffer, adjacent blocks in one read; br[i] points at each. */
static int read_blocks(struct store *s, struct srun *x, const uint64_t *want, size_t n, char **bufp,
		       struct bref *br)
{
	struct spill *sp = s->sp;
	uint32_t bs = x->r->blk_size;
	char *buf = NULL;
	if (posix_memalign((void **)&buf, BLK, n * bs))
		return -ENOMEM;
	struct sreq *q = calloc(n, sizeof(*q));
	if (!q) {
		free(buf);
		return -ENOMEM;
	}
	size_t nq = 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t loc = blk_loc(sp, x, want[i]);
		br[i] = (struct bref){ want[i], buf + i * bs, 0 };
		if (nq && q[nq - 1].blk + q[nq - 1].span == loc && q[nq - 1].span + bs <= CHUNK_BYTES &&
		    (uint64_t)(buf + i * bs - buf) == q[nq - 1].boff + q[nq - 1].span) {
			q[nq - 1].span += bs;
			continue;
		}
		q[nq++] = (struct sreq){ .blk = loc, .span = bs, .boff = (uint64_t)i * bs };
	}
	int ret = device_read_raw(sp, q, nq, buf);
	free(q);
	if (ret) {
		free(buf);
		return ret;
	}
	*bufp = buf;
	return 0;
}

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

/* One pending lookup. */
struct look {
	size_t qi;          /* index into the caller's requests */
	uint64_t a, b;      /* blocks to read */
};

static int look_cmp(const void *pa, const void *pb)
{
	const struct look *x = pa, *y = pb;
	return x->a < y->a ? -1 : x->a > y->a;
}

static struct bref *bref_find(struct bref *br, size_t n, uint64_t blk)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (br[mid].blk < blk)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < n && br[lo].blk == blk ? &br[lo] : NULL;
}

/* Resolve the pending lookups L[0..n) in run x: state set for each row the
 * run decides. */
static int look_run(struct store *s, struct srun *x, struct rq *q, struct look *L, size_t n, uint64_t b,
		    uint32_t rs)
{
	struct spill *sp = s->sp;
	qsort(L, n, sizeof(*L), look_cmp);
	struct u64vec want = { 0 };
	int ret = 0;
	/* L is sorted by a, so the blocks come in order: each pushed once */
	for (size_t i = 0; i < n && !ret; i++)
		for (uint64_t k = L[i].a; k <= L[i].b && !ret; k++)
			if (!want.n || want.v[want.n - 1] < k)
				ret = u64vec_push(&want, k);
	size_t nw = want.n;
	struct bref *br = ret ? NULL : calloc(nw ? nw : 1, sizeof(*br));
	char *buf = NULL;
	if (!ret && !br)
		ret = -ENOMEM;
	if (!ret)
		ret = read_blocks(s, x, want.v, nw, &buf, br);
	if (!ret)
		atomic_fetch_add_explicit(&sp->run_blocks, nw, memory_order_relaxed);
	for (size_t i = 0; i < n && !ret; i++) {
		struct rq *r = &q[L[i].qi];
		int seen = 0;
		for (uint64_t k = L[i].a; k <= L[i].b && r->state == RQ_PENDING; k++) {
			struct bref *bb = bref_find(br, nw, k);
			if (!bb || blk_ok(sp, x, bb)) {
				r->state = RQ_EIO;
				break;
			}
			const struct emb_rblk *h = (const struct emb_rblk *)bb->p;
			/* first record of the row in this block */
			uint32_t lo = 0, hi = h->nrec;
			while (lo < hi) {
				uint32_t mid = (lo + hi) / 2;
				if (rec_row(rec_at(x, bb->p, mid)) < r->row)
					lo = mid + 1;
				else
					hi = mid;
			}
			for (uint32_t j = lo; j < h->nrec; j++) {
				const char *rec = rec_at(x, bb->p, j);
				if (rec_row(rec) != r->row)
					break;
				seen = 1;
				uint64_t bt = rec_batch(rec);
				if (b != EMB_NONE && (bt & ~EMB_RREC_TOMB) > b)
					continue;
				r->batch = bt & ~EMB_RREC_TOMB;
				if (bt & EMB_RREC_TOMB) {
					r->state = RQ_HOLE;
				} else {
					r->state = RQ_DATA;
					if (r->dst)
						memcpy(r->dst, rec + 16, rs);
				}
				break;
			}
		}
		if (!seen && r->state == RQ_PENDING)
			atomic_fetch_add_explicit(&sp->bloom_fp, 1, memory_order_relaxed);
	}
	free(buf);
	free(br);
	free(want.v);
	return ret;
}

int runs_lookup(struct store *s, struct stable *st, struct rq *q, size_t n, uint64_t b)
{
	struct spill *sp = s->sp;
	struct srun **v;
	size_t nr;
	if (!sp)
		return 0;
	int ret = runs_get(sp, st->id, &v, &nr);
	if (ret || !nr)
		return ret;
	struct look *L = malloc(n * sizeof(*L));
	if (!L) {
		runs_put(v, nr);
		return -ENOMEM;
	}
	uint32_t rs = st->t->row_size;
	for (size_t ri = 0; ri < nr && !ret; ri++) {
		size_t nl = 0;
		int lr = srun_load(s, v[ri]);
		if (lr == -ENOMEM) {
			ret = lr;
			break;
		}
		for (size_t i = 0; i < n; i++) {
			if (q[i].state != RQ_PENDING)
				continue;
			uint64_t a, bb;
			if (lr) { /* its arrays are unreadable: its rows are EIO */
				if (q[i].row >= v[ri]->r->min_row && q[i].row <= v[ri]->r->max_row)
					q[i].state = RQ_EIO;
				continue;
			}
			if (row_blocks(v[ri], q[i].row, &a, &bb))
				L[nl++] = (struct look){ i, a, bb };
		}
		if (nl)
			ret = look_run(s, v[ri], q, L, nl, b, rs);
	}
	free(L);
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
	int err;
};

static void segs_release(struct spill *sp, const struct u64vec *segs)
{
	pthread_mutex_lock(&sp->mu);
	for (size_t i = 0; i < segs->n; i++)
		sp->seg_busy[segs->v[i]] = 0;
	pthread_mutex_unlock(&sp->mu);
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
	w->bs = (uint32_t)((sizeof(struct emb_rblk) + w->rec + BLK - 1) & ~(BLK - 1));
	if (w->bs < BLK)
		w->bs = BLK;
	w->per_blk = (w->bs - (uint32_t)sizeof(struct emb_rblk)) / w->rec;
	w->cap = CHUNK_BYTES / w->bs ? CHUNK_BYTES / w->bs : 1;
	w->min_row = EMB_NONE;
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
	size_t done = 0;
	while (!w->err && done < w->nbuf) {
		uint64_t blk = w->first + done;
		if (blk / bps >= w->segs.n) {
			uint64_t k = seg_claim(sp, 1); /* the last stays for stub compaction */
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
	uint64_t nsegs = (w->nblocks + 1 + nmeta + bps - 1) / bps;
	if (nsegs > (w->bs - sizeof(struct emb_rmeta)) / 4)
		return w->err = -EFBIG; /* its segment list would not fit one block */
	while (w->segs.n < nsegs) { /* the meta block lists them all */
		uint64_t k = seg_claim(sp, 1); /* the last stays for stub compaction */
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
	*m = (struct emb_rmeta){ .magic = EMB_RMETA_MAGIC, .id = w->id, .nsegs = (uint32_t)nsegs };
	memcpy(m->seg, w->arrays, nsegs * 4);
	m->csum = meta_hdr_csum(m);
	w->meta_loc = seg_base(sp, w->segs.v[w->nblocks / bps]) + (w->nblocks % bps) * w->bs;
	w->err = build_raw(w, m, w->bs);
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
		struct bref b = { it->blk + i, it->buf + i * bs, 0 };
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

/* Merge runs v[0..m) (adjacent in the table's list, newest first) into one.
 * bottom: v[m - 1] is the table's oldest run.  Versions no live snapshot
 * needs are dropped.  Takes commit_lock to install. */
static int merge_runs(struct store *s, struct stable *st, struct srun **v, size_t m, int bottom)
{
	struct spill *sp = s->sp;
	uint32_t rs = st->t->row_size;
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
	w.id = next_id(sp);
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
	if (!ret) {
		pthread_mutex_lock(&s->commit_lock);
		/* the inputs must still be listed, next to each other */
		int listed = 1;
		pthread_rwlock_rdlock(&sp->run_lock);
		struct srun *p = sp->runs[st->id];
		while (p && p != v[0])
			p = p->next;
		for (size_t i = 0; i < m; i++) {
			if (p != v[i]) {
				listed = 0;
				break;
			}
			p = p->next;
		}
		pthread_rwlock_unlock(&sp->run_lock);
		if (!listed || !tab_get(s, st->id))
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
	if (!ret) {
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

/* One merge a table needs, if any: MERGE_FANOUT adjacent runs of one level.
 * Returns 1 merged, 0 none needed, or -errno. */
/* The device is too full for the merge it wants: merge the two adjacent
 * runs (of any table) with the fewest blocks that fit in the free segments
 * but one.  Their output is no larger than they are, and drops what newer
 * runs replaced and what no snapshot needs, so it frees segments for the
 * next such merge.  1 merged, 0 nothing fits, -errno. */
static int merge_fitting(struct store *s)
{
	struct spill *sp = s->sp;
	uint32_t nfree = free_segs(sp);
	uint64_t room = nfree > 1 ? (uint64_t)(nfree - 1) * sp->pm->seg_size : 0, best = UINT64_MAX;
	uint32_t bid = EMB_NTABLES;
	size_t bat = 0;
	for (uint32_t id = 0; id < EMB_NTABLES; id++) {
		struct srun **v;
		size_t n;
		if (!sp->runs[id] || runs_get(sp, id, &v, &n))
			continue;
		for (size_t i = 0; i + 1 < n; i++) {
			uint64_t b = (v[i]->r->nblocks + v[i + 1]->r->nblocks + 2) * v[i]->r->blk_size;
			if (b <= room && b < best) {
				best = b;
				bid = id;
				bat = i;
			}
		}
		runs_put(v, n);
	}
	struct stable *st = bid < EMB_NTABLES ? tab_get(s, bid) : NULL;
	struct srun **v;
	size_t n;
	if (!st || runs_get(sp, bid, &v, &n))
		return 0;
	int ret = bat + 1 < n ? merge_runs(s, st, v + bat, 2, bat + 2 == n) : 0;
	int merged = bat + 1 < n;
	runs_put(v, n);
	return ret ? ret : merged;
}

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
			int ret = n > 1 ? merge_runs(s, st, v, n, 1) : 0;
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
			ret = merge_runs(s, st, v + at, len, at + len == n);
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
