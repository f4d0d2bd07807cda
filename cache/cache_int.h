/*
 * cache/cache_int.h: what the files of cache/ share, private to them.  The
 * cache itself (struct cache), its shards, entries, arenas, per-table
 * counters and preserved copies; the inline helpers of the row lookup and
 * row write paths (hash, lookup, a write's needs, marking a row dirty), so
 * that a hit calls into no other file; and the functions each file lends
 * the others.
 *
 *   cache.c      the front: create/destroy, reads and writes of rows and
 *                ranges, the batch path, drops, pins, statistics
 *   rows.c       the row cache mechanism: arenas, hash table, CLOCK
 *                eviction, insertion, removal, pin counts, shard set-up;
 *                nothing of the layer below (it never calls ops)
 *   writeback.c  the write-back policy: promises (credit, give-back),
 *                write-back rounds, the flusher, preserved copies of
 *                snapshots' versions, cache_flush(), cache_set_snapshot()
 *
 * below.c, the ops over the store that the daemon hands cache_create(), is
 * the fourth file of cache/; it uses none of this.
 *
 * Lock order: flush_lock, then one shard lock at a time; pres_lock, ts_lock
 * and wake_lock are leaves.  Nothing calls the layer below (ops) with a
 * shard lock held.
 *
 * Promises.  Writing back a row version takes a new slot below; it frees the
 * one it replaces unless that is a hole or a live snapshot keeps it, i.e.
 * unless the replaced version's batch X has a snapshot S with X <= S < Y, Y
 * the new version's batch (store/commit.c plan()).  Each pending write-back
 * that will take a slot without freeing one holds one promise: a dirty entry
 * with F_PROM (its next write-back), a staged row (staged.prom: the one in
 * flight), a preserved copy (the version after it keeps it; once the copy is
 * stored, its promise moves to the entry: stored_below() in writeback.c).
 * Writes come after every snapshot that exists (their batch is above
 * snap_floor), so a clean row turning dirty needs one iff it is a hole below
 * (F_NEW), its stored version is of a batch <= the newest snapshot's (a
 * clean entry keeps X_HELD when that held when it was filled, and otherwise
 * the snap_seq of then: a snapshot taken later has a batch >= X), or its
 * stored version frees no slot when replaced (X_OUT: it was fetched from
 * the spill tier, CACHE_STORED_OUT).
 */
#ifndef EMBFS_CACHE_INT_H
#define EMBFS_CACHE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "embfs/cache.h"

#define NSHARDS CACHE_MAX_SHARDS
#define NIL UINT32_MAX
#define MAX_CLASSES 16
#define CHUNK_BYTES (64u << 10)
#define MIN_ROW 64     /* sizes the entry arrays: smaller rows are capped by count */

enum {
	F_VALID = 1,
	F_DIRTY = 2,
	F_REF = 4,   /* CLOCK reference bit */
	F_BUSY = 8,  /* being written back (flush_lock holder) */
	F_REDIRTY = 16, /* written again while busy */
	F_NEW = 32,  /* not stored below (a hole there) when it became dirty */
	F_STORED = 64, /* ... but a preserved older version of it is now: not counted as new */
	F_PROM = 128,  /* dirty; holds a promise for its next write-back (see the top) */
};

enum {
	X_HELD = 1, /* clean; its stored version is of a batch <= the newest snapshot's */
	X_OUT = 2,  /* clean; its stored version is out of the layer below's room
		     * (CACHE_STORED_OUT): writing it back takes a new slot */
};

/* 24 bytes: with 8–16 bytes of bucket, at most CACHE_ROW_OVERHEAD per row.
 * Row ids are below CACHE_ROW_LIMIT (2^48): 16 bits of row_hi are enough. */
struct centry {
	uint32_t row_lo;
	uint16_t row_hi;
	uint16_t table;
	uint32_t data;     /* slot in the class arena */
	uint32_t hnext;    /* hash chain, or free list */
	uint32_t batch;    /* dirty: low 32 bits of the batch id of its latest write;
			      clean: low 32 bits of snap_seq when it was filled (see base_set) */
	uint8_t flags;
	uint8_t pins;
	uint8_t cls : 4;   /* < MAX_CLASSES */
	uint8_t xflags : 4; /* X_* */
	uint8_t round;     /* flusher round in which it became dirty */
};
_Static_assert(sizeof(struct centry) == 24, "cache entry");
_Static_assert(MAX_CLASSES <= 16, "cls is 4 bits of struct centry");
_Static_assert(CACHE_ROW_LIMIT == 1ull << (32 + 16), "row_lo and row_hi hold a row id below CACHE_ROW_LIMIT");

#define INIT_BUCKETS 16u /* hash buckets of an empty shard */

/* Row bytes of one size: chunks of a power of two of slots (at most 64 KiB),
 * a free list threaded through slots. */
struct arena {
	uint32_t rs, stride, per_chunk, chunk_shift; /* per_chunk = 1 << chunk_shift */
	char **chunks;
	uint32_t nchunks, hwm, free;
};

struct shard {
	pthread_mutex_t lock;
	uint32_t *bucket;   /* bucket i at bucket[i << bshift] (bucket_of()); protected by lock, */
	uint32_t nbucket, max_bucket, bshift; /* as is everything below */
	struct centry *e;
	size_t e_map;       /* bytes of e when mapped on huge pages (0: calloc'd) */
	uint32_t cap, hwm, free;
	uint32_t hand;
	uint32_t nvalid, ndirty, npinned;
	uint64_t bytes, budget;
	struct arena ar[MAX_CLASSES];
	uint32_t ncls;
	uint64_t hits, misses, evictions, writebacks, bypasses;
} __attribute__((aligned(64)));

struct tstat {
	_Atomic uint64_t hits, misses, evictions, writebacks, bypasses, scan_misses;
	_Atomic uint64_t rows, dirty, new_dirty, pinned, bytes;
	_Atomic uint64_t gen; /* bumped by drops and write-throughs: stale fills are discarded */
};

/* A snapshot's version of a row, copied out when the row was written again
 * before being written back (see cache_write). */
struct pres {
	struct pres *next;
	uint64_t row, batch;
	uint32_t table, rs;
	char data[];
};

/* The cache.  Set at cache_create() and read-only after: nshards,
 * shard_shift, ops, ctx, budget, dirty_age_ms.  Each field below says whose
 * it is: the front (cache.c), the mechanism (rows.c) or the write-back
 * policy (writeback.c). */
struct cache {
	struct shard sh[NSHARDS];    /* rows.c's; each under its own lock */
	uint32_t nshards, shard_shift;
	const struct cache_ops *ops;
	void *ctx;
	uint64_t budget;
	struct timespec t0;
	pthread_mutex_t flush_lock;  /* writeback.c's: one write-back at a time */
	_Atomic(struct tstat *) *ts; /* per-table counters (tst()); made under ts_lock */
	uint32_t *bucket_map;        /* rows.c's: every shard's buckets, interleaved (bucket_of()), */
	size_t bucket_len;           /* room reserved for the most; bytes of it */
	pthread_mutex_t huge_lock;   /* rows.c's: arena chunks carved from huge-page regions */
	int huge;                    /* set at cache_shards_init(): a budget large enough for them */
	char *huge_cur;              /* the region being carved, and bytes left in it */
	size_t huge_left;
	void **huge_reg;             /* every region, freed at cache_shards_free() */
	uint32_t nhuge;
	pthread_mutex_t ts_lock;
	uint32_t dirty_age_ms;
	_Atomic uint64_t snap_floor; /* writeback.c's: batch of the newest snapshot */
	_Atomic uint64_t snap_seq;   /* writeback.c's: cache_set_snapshot() calls so far */
	_Atomic uint64_t last_batch; /* newest batch seen (by the front's writes): rebuilds 64-bit ids */
	_Atomic uint64_t scan_misses; /* the front's: cache_read_range()'s misses (not in any shard's) */
	_Atomic uint8_t round;       /* writeback.c's: flusher round */
	pthread_mutex_t pres_lock;   /* writeback.c's, as are all fields below */
	struct pres *pres;           /* protected by pres_lock */
	uint64_t npres;
	_Atomic int kicked;     /* dirty rows fill a full shard: write back now (cache_dirty_kick) */
	int stop;               /* protected by wake_lock */
	pthread_mutex_t wake_lock;
	pthread_cond_t wake;
	pthread_t flusher;
	int has_flusher;
};

/* The 64-bit batch id whose low 32 bits are b, nearest below the newest. */
static inline uint64_t full_batch(struct cache *c, uint32_t b)
{
	uint64_t ref = atomic_load_explicit(&c->last_batch, memory_order_relaxed);
	uint64_t x = (ref & ~0xffffffffull) | b;
	return x > ref && x >= (1ull << 32) ? x - (1ull << 32) : x;
}

static inline uint64_t hash(uint32_t table, uint64_t row)
{
	uint64_t h = row * 0x9E3779B97F4A7C15ull ^ ((uint64_t)table + 1) * 0xC2B2AE3D27D4EB4Full;
	h ^= h >> 31;
	h *= 0xD6E8FEB86659FD93ull;
	h ^= h >> 32;
	return h;
}

static inline uint64_t e_row(const struct centry *e)
{
	return (uint64_t)e->row_hi << 32 | e->row_lo;
}

static inline struct tstat *tst(struct cache *c, uint32_t table)
{
	struct tstat *t = atomic_load_explicit(&c->ts[table], memory_order_acquire);
	if (t)
		return t;
	pthread_mutex_lock(&c->ts_lock);
	t = atomic_load(&c->ts[table]);
	if (!t) {
		t = calloc(1, sizeof(*t));
		if (!t)
			abort(); /* a few hundred bytes per table: nothing to recover */
		atomic_store_explicit(&c->ts[table], t, memory_order_release);
	}
	pthread_mutex_unlock(&c->ts_lock);
	return t;
}

#define TS_ADD(t, f, v) atomic_fetch_add_explicit(&(t)->f, (uint64_t)(v), memory_order_relaxed)
#define TS_SUB(t, f, v) atomic_fetch_sub_explicit(&(t)->f, (uint64_t)(v), memory_order_relaxed)

/* ---- arenas and hash table (rows.c's, inline for the lookup path) ------- */

/* Start loading p's line into L2 (prefetcht2), not L1, whose miss buffers
 * a block of lookups' prefetches would fill (cache.c, WALK_BLOCK). */
static inline void prefetch_l2(const void *p)
{
	__builtin_prefetch(p, 0, 1);
}

static inline char *slot_ptr(struct arena *a, uint32_t i)
{
	return a->chunks[i >> a->chunk_shift] + (size_t)(i & (a->per_chunk - 1)) * a->stride;
}

static inline char *e_data(struct shard *sh, struct centry *e)
{
	return slot_ptr(&sh->ar[e->cls], e->data);
}

static inline int e_is(const struct centry *e, uint32_t table, uint64_t row)
{
	return e_row(e) == row && e->table == table; /* a row id of 2^48 or more is no entry's */
}

/* The entry of (table, row) in the hash chain from entry i on, or NIL. */
static inline uint32_t chain_find(const struct shard *sh, uint32_t i, uint32_t table, uint64_t row)
{
	while (i != NIL && !e_is(&sh->e[i], table, row))
		i = sh->e[i].hnext;
	return i;
}

/* Bucket i, and the bucket of hash h.  Bucket i of shard s is word
 * i * nshards + s of c->bucket_map: the buckets in use, about as many in
 * every shard, are the map's first pages (see cache_shards_init()).  A line
 * holds 16 shards' buckets: two threads inserting into different shards
 * may share it. */
static inline uint32_t *bucket_at(const struct shard *sh, uint32_t i)
{
	return &sh->bucket[(size_t)i << sh->bshift];
}

static inline uint32_t *bucket_of(const struct shard *sh, uint64_t h)
{
	return bucket_at(sh, (uint32_t)(h & (sh->nbucket - 1)));
}

static inline uint32_t lookup(struct shard *sh, uint32_t table, uint64_t row, uint64_t h)
{
	return chain_find(sh, *bucket_of(sh, h), table, row);
}

/* The entry holds a row (stored below, or written here), not a hole that
 * cache_pin() loaded: a clean entry is new only then.  Shard lock held. */
static inline int e_stored(const struct centry *e)
{
	return (e->flags & (F_NEW | F_DIRTY)) != F_NEW;
}

static inline struct shard *shard_of(struct cache *c, uint64_t h, uint32_t *si)
{
	*si = c->shard_shift == 64 ? 0 : (uint32_t)(h >> c->shard_shift);
	return &c->sh[*si];
}

/* ---- a write's promises and copies (writeback.c's policy, inline for the
 * write path) ------------------------------------------------------------ */

/* The units of room one write may spend: the caller's credit, then units the
 * write reserved itself (spare). */
struct credit {
	int64_t *caller; /* may be NULL */
	int64_t spare;
};

static inline int credit_take(struct credit *cr)
{
	if (cr->spare > 0) {
		cr->spare--;
		return 1;
	}
	if (cr->caller && *cr->caller > 0) {
		(*cr->caller)--;
		return 1;
	}
	return 0;
}

/* A unit taken but not spent. */
static inline void credit_put(struct credit *cr)
{
	cr->spare++;
}

/* Promises to give back below, gathered while shard locks are held and given
 * back after them, in runs of one (table, row size). */
struct giveback {
	uint32_t table, rs;
	int n;
};

/* Does a live snapshot hold a stored version of batch b?  (Conservative: a
 * dropped snapshot's batch still counts; b == 0, unknown, counts when any
 * snapshot was taken.)  snap_seq first: cache_set_snapshot() raises the floor
 * before it counts, so a seq that saw a snapshot also sees its floor. */
static inline int below_snapshot(struct cache *c, uint64_t b, uint64_t *seq)
{
	*seq = atomic_load(&c->snap_seq);
	return *seq && b <= atomic_load(&c->snap_floor);
}

/* A clean entry whose stored version is of batch b (just filled or written
 * back).  Shard lock held. */
static inline void base_set(struct cache *c, struct centry *e, uint64_t b)
{
	uint64_t seq;
	e->xflags = below_snapshot(c, b, &seq) ? X_HELD : 0;
	e->batch = (uint32_t)seq;
}

/* A clean entry just filled from below: its stored version of batch b, as
 * fetch answered (stored: 1 or CACHE_STORED_OUT).  Shard lock held. */
static inline void base_fill(struct cache *c, struct centry *e, uint64_t b, int stored)
{
	base_set(c, e, b);
	if (stored == CACHE_STORED_OUT)
		e->xflags |= X_OUT;
}

enum { W_PROMISE = 1, W_COPY = 2 };

/* What a write in `batch` to entry e needs: W_PROMISE, room promised below
 * for a write-back that will keep the version it replaces (or fill a hole);
 * W_COPY, its bytes copied aside first for a snapshot (see cache_preserve()).  At
 * most one promise per row and write.  Shard lock held. */
static inline int write_needs(struct cache *c, struct centry *e, uint64_t batch)
{
	int prom = c->ops->reserve != NULL;
	if (!(e->flags & F_DIRTY)) {
		/* its stored version is replaced by its next write-back */
		int need = (e->flags & F_NEW) || (e->xflags & (X_HELD | X_OUT)) ||
			   e->batch != (uint32_t)atomic_load(&c->snap_seq);
		return prom && need ? W_PROMISE : 0;
	}
	uint64_t floor = atomic_load(&c->snap_floor);
	if (batch <= floor || full_batch(c, e->batch) > floor)
		return 0; /* its pending version is no snapshot's */
	if ((e->flags & F_BUSY) && !(e->flags & F_REDIRTY))
		/* the write-back in flight takes exactly these bytes; the next
		 * one keeps them for the snapshot */
		return prom && !(e->flags & F_PROM) ? W_PROMISE : 0;
	return W_COPY | (prom ? W_PROMISE : 0);
}

/* A shard nearly full (7/8 of its budget) is half dirty (256 rows or
 * more): the flusher is to write back every dirty row now, not only those
 * of dirty_age_ms, so that writers that need room do not find only dirty
 * rows and write back themselves (a training step on a spilled table
 * waited 1.6-3 s a window for that): mark_dirty says so, its caller calls
 * cache_dirty_kick (writeback.c). */
#define DIRTY_KICK_MIN 256u

/* The entry was written in `batch`; w: what write_needs() said (its promise
 * taken, its copy made).  1: the shard is full of dirty rows (see
 * DIRTY_KICK_MIN), 0 otherwise. */
static inline int mark_dirty(struct cache *c, struct shard *sh, struct centry *e, uint64_t batch, int w)
{
	if (w == W_PROMISE)
		e->flags |= F_PROM; /* with W_COPY the copy holds it */
	e->batch = (uint32_t)batch;
	e->xflags = 0;
	if (e->flags & F_BUSY)
		e->flags |= F_REDIRTY;
	if (e->flags & F_DIRTY)
		return 0;
	struct tstat *t = tst(c, e->table);
	e->flags |= F_DIRTY;
	e->round = atomic_load_explicit(&c->round, memory_order_relaxed);
	sh->ndirty++;
	TS_ADD(t, dirty, 1);
	if (e->flags & F_NEW)
		TS_ADD(t, new_dirty, 1);
	return sh->ndirty >= DIRTY_KICK_MIN && sh->ndirty > sh->nvalid / 2 && sh->bytes > sh->budget - sh->budget / 8;
}

/* ---- lent by rows.c (the mechanism); shard lock held ---------------------- */

/* Insert a row (not present) and return its entry: valid and referenced,
 * its bytes to fill, clean.  NIL with *err set: -EAGAIN (only dirty rows
 * could make room: write some back, then retry) or -ENOSPC/-ENOMEM (bypass
 * the cache). */
uint32_t cache_entry_insert(struct cache *c, struct shard *sh, uint32_t table, uint32_t rs, uint64_t row,
			    uint64_t h, int *err);
/* Remove entry idx; returns the promises it held (to give back unlocked). */
int cache_entry_remove(struct cache *c, struct shard *sh, uint32_t idx);
/* One pin more (0, or -EBUSY at UINT8_MAX pins), one pin fewer. */
int cache_entry_pin(struct cache *c, struct shard *sh, struct centry *e);
void cache_entry_unpin(struct cache *c, struct shard *sh, struct centry *e);
/* Set up every shard (0 or -ENOMEM), and free them (also after a failed
 * set-up).  No lock held. */
int cache_shards_init(struct cache *c, uint64_t bytes);
void cache_shards_free(struct cache *c);

/* ---- lent by writeback.c (the policy) ------------------------------------ */

/* The credit ran out: reserve one unit below.  No lock held. */
int cache_credit_reserve(struct cache *c, struct credit *cr, uint32_t table, uint32_t rs);
/* The write is over: units it reserved and did not spend go to the caller's
 * credit, or below.  No lock held. */
void cache_credit_end(struct cache *c, struct credit *cr, uint32_t table, uint32_t rs);
/* Add n promises of (table, rs) to g, and give them all back at the end.
 * No shard lock held. */
void cache_giveback_add(struct cache *c, struct giveback *g, uint32_t table, uint32_t rs, int n);
void cache_giveback_end(struct cache *c, struct giveback *g);
/* Copy aside the snapshot's version entry e holds before a write
 * (write_needs() said W_COPY): 0 or -ENOMEM.  Shard lock held. */
int cache_preserve(struct cache *c, struct shard *sh, struct centry *e);
/* Write back the preserved copies alone.  flush_lock held. */
int cache_drain_preserved(struct cache *c);
/* An inserting thread found only dirty rows to evict in shard si: write
 * some of them back. */
int cache_make_clean(struct cache *c, uint32_t si);
/* Wake the flusher for a round of every dirty row (mark_dirty said so). */
void cache_dirty_kick(struct cache *c);
/* The flusher thread (when dirty_age_ms): started by cache_create(),
 * stopped by cache_destroy(); 0 or -EAGAIN. */
int cache_flusher_start(struct cache *c);
void cache_flusher_stop(struct cache *c);
/* Free the preserved copies not written back (at cache_destroy()). */
void cache_preserved_free(struct cache *c);

#endif
