/*
 * Private to the sorted-run files of the spill tier (run.c and run*.c: see
 * run.c's header): the types and helpers they share.
 */
#ifndef EMBFS_RUN_INT_H
#define EMBFS_RUN_INT_H

#include <string.h>

#include "spill.h"

#define MERGE_FANOUT 4u
#define SPARSE_FANOUT 16u /* sparse fresh runs (a load in no order) merged at once: merge_sparse */
#define MERGE_EVICT_ROWS 4096u /* rows a merge writes between its checks for an eviction */
/* A long merge or sweep step at its k-th row (from 1): every
 * MERGE_EVICT_ROWS rows, writers that wait for room, or rows past the
 * mover's start, have an eviction now (sp->evict_now; segs: the segments
 * its output has claimed).  The eviction's run is newer than the inputs:
 * the install finds them listed as they were, and the run stays above the
 * output. */
static inline void merge_evict_point(struct store *s, uint64_t k, size_t segs)
{
	if (k % MERGE_EVICT_ROWS == 0) {
		spill_hook_sleep(s->sp->merge_slow_ms);
		s->sp->evict_now(s, (uint32_t)segs);
	}
}
#define RUNS_SETTLED_MAX 512u /* runs of a table past which settled runs are merged too */
#define BLOOM_BITS_PER_REC 12u
#define BLOOM_K 8u
#define EVICT_MAX_BYTES (64ull << 20) /* row bytes one eviction gathers */
#define EVICT_MIN_ROWS 4096u
#define RUN_PART_LEVEL (1u << 24)  /* a sweep's parts (runsweep.c): above any level moves reach */
#define SWEEP_PART_BYTES (64ull << 20) /* records a sweep's step writes, about */
#define SWEEP_UPPER_MAX 64u        /* runs outside parts a swept table keeps unmerged */

/* A block read into memory, checked once. */
struct bref {
	uint64_t blk;
	char *p;
	int ok; /* 1 sound, -EIO damaged, 0 not checked */
	struct rawin *w; /* lookups: the read-ahead window it is in, or NULL */
};

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

/* Sequential reader of one run's records. */
struct rit {
	struct srun *x;
	char *buf;
	uint64_t blk0, nblk;   /* blocks [blk0, blk0 + nblk) are in buf */
	uint64_t blk;          /* current block */
	uint32_t rec_i;        /* index of the current record in it */
	const char *cur;       /* current record, NULL at the end */
	int err;
};

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
	/* live view (runlookup.c, rounds): a sparse row asks only its newest
	 * run whose filter may hold it; from[u]: the first run (plan index)
	 * row u may ask next; claim[u]: the round that asked it (0: none) */
	uint32_t *from, *claim;
	uint32_t round;
};

struct run_build {
	struct store *s;
	struct spill *sp;
	uint32_t table, rs, rec_size, bs, per_blk; /* rec_size: a record, 16 + rs */
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
	int fresh;               /* its srun's fresh (run_install) */
	int64_t slot;            /* run directory slot held for it (bulk.c), or -1: any free one */
	uint64_t dry_segs;       /* build_finish of a dry build: that count */
	int err;
};

/* runbuild.c: segments a run w builds takes with nblocks blocks of nrows
 * rows, with its list blocks, fences and filter; *bloom_bits, *ab (bytes
 * of fences and filter) and *cap (segments to a list block) as it makes
 * them.  run_build_finish claims that many; a bulk load claims them ahead. */
uint64_t run_build_segs(const struct run_build *w, uint64_t nblocks, uint64_t nrows, uint64_t *bloom_bits,
			size_t *ab, uint64_t *cap);

/* run.c */
/* The device offset of block i of run x (its arrays loaded). */
uint64_t run_blk_loc(const struct spill *sp, const struct srun *x, uint64_t i);
/* Check block b of run x once: 0 or -EIO (counted). */
int run_blk_ok(struct spill *sp, const struct srun *x, struct bref *b);
int run_bloom_row(const struct srun *x, uint64_t row);
/* Does run x hold a record of any of rows[0..n) (in increasing order)?
 * Its filter, then the one block that would hold each row the filter lets
 * through, those blocks read in queues of 1, 2, 4 ... up to HOLDS_BLKS.  A
 * run or block that cannot be read may hold any row: 1. */
int run_holds_any(struct store *s, struct srun *x, const uint64_t *rows, size_t n);
/* The last block of run x whose fence is <= row (row >= its first fence). */
uint64_t run_fence_floor(const struct srun *x, uint64_t row);
/* Blocks [*a, *b] of run x that may hold row (row in the run's range), for
 * rows visited in increasing order: *j is the last block whose fence is <=
 * the previous row (start it at fence_floor of the first), so a walk over
 * many rows is one pass over the fences. */
void run_fence_walk(const struct srun *x, uint64_t row, uint64_t *j, uint64_t *a, uint64_t *b);
/* The runs of table id, newest first, each with a reference: *n of them in
 * a malloc'ed array (NULL when none).  */
int runs_get(struct spill *sp, uint32_t id, struct srun ***out, size_t *n);
/* ... only those whose range meets rows [lo, hi]. */
int runs_get_range(struct spill *sp, uint32_t id, uint64_t lo, uint64_t hi, struct srun ***out, size_t *n);
void runs_put(struct srun **v, size_t n);
/* Read x's segments, fences and filter from its meta blocks: 0 or -EIO
 * (counted; the run's rows then read as EIO). */
int srun_load(struct store *s, struct srun *x);
void srun_put(struct srun *x);
uint32_t run_blk_csum(const char *b, uint32_t blk);
void run_bloom_add(uint64_t *w, uint64_t bits, uint32_t k, uint64_t row);
size_t run_bloom_words(uint64_t bits);
/* The blocks a list of nsegs takes, cap to a block. */
uint64_t run_list_blocks(uint64_t nsegs, uint64_t cap);
/* Insert x into its table's list by seq (newest first).  run_lock held. */
void runs_list_insert(struct spill *sp, struct srun *x);
/* Segments a list block of bs bytes can name. */
uint64_t run_list_room(uint32_t bs);
uint64_t run_meta_hdr_csum(const struct emb_rmeta *m, uint64_t cap);
/* The segments list block m names, cap to a block. */
uint64_t run_meta_nseg(const struct emb_rmeta *m, uint64_t cap);
uint64_t run_rec_csum(const struct emb_run *r);
/* Segments a run of nblocks data blocks and ab bytes of fences and filter
 * takes with its list blocks (which it counts itself), cap segments to a
 * list block. */
uint64_t run_segs(uint64_t nblocks, size_t ab, uint32_t bs, uint64_t bps, uint64_t cap);
/* A run's DRAM state; its arrays (owned, one malloc: segs first) if the
 * builder has them, else read at first use. */
struct srun *srun_new(struct spill *sp, struct emb_run *r, uint32_t *arrays);

/* Move v[0..n) from their tables' lists to the dead list.  run_lock held
 * exclusive. */
void runs_list_retire(struct store *s, struct spill *sp, struct srun **v, size_t n);
/* A table's count of live records in runs follows a run coming (sign 1) or
 * going (-1). */
void run_live_add(struct store *s, const struct emb_run *r, int sign);
/* Mark the records of v[0..n) dead (inside a transaction). */
void runs_mark_dead_tx(struct srun **v, size_t n);
/* Is st still table tid of generation gen (it may have been freed while
 * commit_lock was let go; st is not read unless it is still listed)?
 * commit_lock held. */
int run_table_same(struct store *s, struct stable *st, uint32_t tid, uint64_t gen);
/* Step to the next record (or the first). */
void rit_next(struct store *s, struct rit *it);
/* Start it on run x (loaded) at its first record at or past row, its
 * buffer allocated (the caller frees it->buf, also on an error): 0 or
 * -errno. */
int rit_open(struct store *s, struct srun *x, uint64_t row, struct rit *it);
int rit_load(struct store *s, struct rit *it);

/* runahead.c */
/* Queue the windows of run x from ext on that cover `want` blocks. */
void ra_win_ahead(struct spill *sp, struct srun *x, uint64_t ext, uint64_t want);
/* Blocks per window of run x. */
uint64_t ra_win_blocks(const struct srun *x);
/* A reference to window ext of run x for L: found, or claimed for L to
 * load (*mine); NULL when every window is busy (read directly). */
struct rawin *ra_win_get(struct lreq *L, const struct srun *x, uint64_t ext);
/* L's windows go back (they stay in DRAM for the next reader). */
void ra_win_put_all(struct lreq *L);
/* Add the reads of window w's blocks (of run x) to q. */
void ra_win_reads(struct spill *sp, const struct srun *x, struct rawin *w, struct sreq *q, size_t *nq);

/* runbuild.c */
/* Write what is left, then the meta blocks (segments, fences, filter), and
 * make it all durable. */
int run_build_finish(struct run_build *w);
void run_build_free(struct run_build *w, int release);
int run_build_open(struct run_build *w, struct store *s, struct stable *st);
/* Append the versions of one row, newest first (nv of them). */
int run_build_row(struct run_build *w, uint64_t row, const uint64_t *batch, const char *const *data, uint32_t nv);
uint64_t run_next_id(struct spill *sp);
/* Make the built run part of the pool, in place of the runs old[0..nold)
 * (a merge; they turn dead), at order seq.  commit_lock held. */
int run_install(struct store *s, struct run_build *w, uint64_t seq, uint32_t level, struct srun **old, size_t nold);

/* runmvers.c */
/* The versions of one row a merge gathers from its inputs, in order. */
struct mvers {
	size_t n, cap;
	uint64_t *batch;     /* | EMB_RREC_TOMB */
	char *bytes;         /* row i at i * row size */
	const char **data;   /* kept versions' bytes (NULL: tombstone) */
	uint8_t *keep;
};
/* The live snapshots' batches, into snaps (EMB_MAX_SNAPS): how many. */
uint32_t merge_snaps(struct store *s, uint64_t *snaps);
/* Room for one more version of rs bytes: 0 or -ENOMEM. */
int mvers_room(struct mvers *mv, uint32_t rs);
void mvers_free(struct mvers *mv);
/* Keep of mv the newest version and the newest each of the live snapshots'
 * batches snaps[0..ns) sees, and (bottom: no older run) drop the oldest
 * kept ones while they are tombstones: their batches and bytes, compacted
 * to the front of mv->batch and mv->data.  Returns how many are kept. */
size_t mvers_keep(struct mvers *mv, uint32_t rs, const uint64_t *snaps, uint32_t ns, int bottom);
/* Gather into mv (emptied first) the versions of row (rs bytes) from every
 * input whose iterator is at it, newest input first, stepping those
 * iterators past the row; *in_bytes counts the records read (w's record
 * size each).  0 or -errno. */
int merge_gather(struct store *s, struct rit *it, size_t m, uint64_t row, uint32_t rs, struct mvers *mv,
		 const struct run_build *w, uint64_t *in_bytes);

/* run.c, beside the merge reserve: the bytes of a sweep's part (whole
 * segments), and is st's part of the runs large enough to be swept, not
 * merged whole? */
uint64_t sweep_part_bytes(const struct spill *sp);
int sweep_wants(const struct spill *sp, struct stable *st);

/* runsweep.c: merges of all of a table's runs a row range at a time (the
 * mover's, round_lock) */
/* Begin a sweep of st's runs v[0..n) (its whole list, newest first): it
 * takes their references.  0 or -ENOMEM (then they are put). */
int sweep_start(struct store *s, struct stable *st, struct srun **v, size_t n);
/* The next step of the sweep under way: 2 made, 0 none (or the sweep
 * ended: its list changed), -errno (it ended). */
int sweep_step(struct store *s);
/* Of table tid's runs v[0..n) (newest first), how many lead that came after
 * the sweep's inputs (n when no sweep is on tid): merges among them leave
 * the sweep alone. */
size_t sweep_newer(const struct spill *sp, uint32_t tid, struct srun *const *v, size_t n);

#endif
