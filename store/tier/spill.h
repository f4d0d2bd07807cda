/*
 * Private to the spill tier's files (store/tier/): its shared state and
 * the functions they share.  The core store sees the tier through tier.h
 * only.  What the tier does and its crash safety: device.c's header
 * comment.
 *
 * Fields are grouped by owner; each group says its lock.  The tier's locks
 * are in the store's lock order (store_int.h): round_lock (one mover round at
 * a time) before commit_lock, then a table's lock; sp->mu, ring locks and
 * ra_mu are leaves.
 */
#ifndef EMBFS_SPILL_H
#define EMBFS_SPILL_H

#include <liburing.h>
#include <sys/types.h>
#include <time.h>

#include "../store_int.h"
#include "tier.h"

#define BLK EMB_SPILL_BLOCK
#define CHUNK_BYTES (1u << 20)     /* one device write */
#define NRINGS 4u
#define HEAT_BITS 20u
#define EVICT_ORDER_MAX (1u << 20) /* row versions in the pool past which evictions go in index order */
#define HEAT_REF 0x80u             /* reference bit: read or written lately */
#define HEAT_HITS 0x7fu            /* device reads of a spilled row */
#define PROMOTE_AFTER 2u
#define PQ_CAP 4096u
#define COMPACT_PIECE (256u << 10)
#define SUBMIT_GROUP 4u
/* a class keeps up to 4 MiB of copy-on-write headroom (slab.c): the row share
 * must leave room for a few of those */
#define COW_ROOM (4ull << 20)

struct ring {
	pthread_mutex_t lock;
	struct io_uring ring;
	int ok;
};

struct pq_ent {
	uint32_t table;
	uint64_t row;
};

/* A sorted run (run.c): its record in the pool, and its segments, fences
 * and filter read from its meta blocks on the device (at first use). */
struct srun {
	struct emb_run *r;       /* its record in the pool's run directory */
	uint32_t per_blk;        /* records per block */
	uint64_t bps;            /* blocks per segment */
	pthread_mutex_t load_mu; /* around reading the arrays */
	_Atomic int loaded;      /* 1: the arrays are here; -EIO: unreadable */
	uint32_t *seg;           /* one malloc: segments, fences, filter */
	uint64_t *fence;
	uint64_t *bloom;
	_Atomic int refs;        /* 1 for its list, +1 per reader */
	_Atomic uint64_t ra_next; /* past the furthest block a sequential reader's walks reached (run.c) */
	int fresh;               /* its rows were in no other run when it came (an eviction's: runevict.c;
				  * a merge's of fresh runs), so fresh runs hold disjoint rows; DRAM only:
				  * a mount starts with none (the mover's, round_lock; read by merges) */
	struct srun *next;       /* the next older run of its table, or the next dead one (run_lock) */
};

/* A read-ahead window (run.c): blocks [ext * per, ...) of one run, read
 * whole for a sequential reader, shared by the requests that need them.
 * Fields under sp->ra_mu; buf is written only by the request that loads it
 * (state RA_LOADING), read by all once RA_READY. */
enum { RA_LOADING = 1, RA_READY, RA_FAILED };
#define RA_WINDOWS 64u            /* per device: at most 64 x RA_BYTES of DRAM */
#define RA_BYTES (256u << 10)     /* a window (at least one block) */
struct rawin {
	uint64_t run_id;          /* 0: empty */
	uint64_t ext;             /* window index in its run */
	uint32_t nblk;            /* blocks in it (a run's last is short) */
	char *buf;                /* RA_BYTES of sp->ra_arena */
	int state;
	int refs;                 /* requests using it, and the read-ahead thread while it loads it */
	int8_t ok[RA_BYTES / BLK]; /* per block, as the thread checked it: 1 sound, -1 damaged, 0 unchecked */
	struct srun *x;           /* queued for the read-ahead thread: its run (a reference), else NULL */
	uint64_t tick;            /* last use */
};

struct ev_cand;

struct spill {
	/* device.c: set at attach, then read-only */
	int fd;
	int direct;               /* O_DIRECT worked */
	char path[256];
	struct emb_spill *pm;     /* segment table, in the pool */
	uint32_t qd;
	uint64_t low_bytes, high_bytes;
	uint64_t compact_bps;
	int manual;
	int stubs_only;           /* conf: no runs (run.c) */
	void (*unlocked)(void *);  /* test hook (store/store_test.h) */
	uint32_t list_cap;        /* test hook: segments to a new run's list block, 0 = a block's worth */
	void *unlocked_arg;
	struct ring rings[NRINGS];
	_Atomic uint32_t ring_rr;
	_Atomic uint32_t *pins;   /* readers inside each segment (device.c, atomic) */
	_Atomic uint8_t *heat;    /* heat.c: reference bits and device-read counts (atomic) */

	/* one mover round at a time (the thread, store_spill_run, a writer's
	 * wait in manual mode): compaction reads a segment into rbuf unlocked.
	 * Taken before commit_lock. */
	pthread_mutex_t round_lock;

	/* mover state: the mover's alone (round_lock).  The device writes
	 * run without commit_lock so that no commit waits for the device (a
	 * chunk of stubs and a compaction piece are gathered under
	 * commit_lock, written without it, and land under it again, for
	 * what is still where it was); the segment table (pm->seg[]: state,
	 * fill, live) changes only under commit_lock, the open segment's
	 * and the compacted one's by the mover alone, which may read those
	 * two without commit_lock */
	int64_t open_seg;
	char *wbuf;               /* CHUNK_BYTES, aligned */
	char *rbuf;               /* one segment, aligned (compaction) */
	uint32_t cur_table;
	size_t cur_di;
	uint32_t ev_table;        /* runevict.c's eviction cursor (the mover's, round_lock): */
	uint64_t ev_hand;         /* the table, and the row its sweep is at (the index
				   * position past order_max row versions in the pool) */
	uint64_t order_max;       /* EVICT_ORDER_MAX, or a test's */
	/* an ordered sweep's rows (runevict.c, the mover's): the rows of table
	 * evc_id (generation evc_gen) at or past the hand when its index was
	 * last scanned, sorted, with their chains' heads then; evc[evc_at..)
	 * are the ones the hand has not passed.  One scan and sort serves the
	 * evictions of a whole sweep instead of one each. */
	struct ev_cand *evc;
	size_t evc_n, evc_at;
	uint32_t evc_id;
	uint64_t evc_gen;
	/* the row bytes of the round's evictions, kept from one to the next
	 * of that round (a fresh 64 MiB buffer each time faulted in every page
	 * it filled) and freed at its end: the mover's (round_lock) */
	char *ev_arena;
	size_t ev_arena_len;
	int bulk_always;          /* test hook: bulk loads whatever the pool's room */
	int recount;              /* live counts are hints from before a crash */
	uint64_t heap_seen;       /* s->heap_refusals as the last round saw it */
	_Atomic uint64_t start_bytes; /* rows that start the mover: set by it, read by the stats */
	/* how much earlier the mover starts for writers' large requests
	 * (mover.c, mover_used): the largest request since the mover last
	 * looked (req_max: writers'), the largest of late (req_peak, decaying,
	 * as of req_ms: round_lock), and the bytes it starts early by (early) */
	_Atomic uint64_t req_max;
	uint64_t req_peak, req_ms;
	_Atomic uint64_t early;
	int evicting;             /* an eviction under way: none more from a merge */
	uint32_t merge_segs;      /* segments claimed by the merge an eviction is
				   * made in the middle of (spill_evict_between) */
	/* mover.c's spill_evict_between, set at attach: a merge calls it every
	 * MERGE_EVICT_ROWS rows (segs: the segments its output has claimed);
	 * when writers wait for room, or row versions are past the mover's
	 * start, it evicts now rather than after the merge (not from a merge an
	 * eviction asked for, nor when the mover runs by hand), taking what is
	 * left of the merge reserve beyond what the merge still needs of it.
	 * round_lock held */
	void (*evict_now)(struct store *s, uint32_t segs);

	/* thread */
	pthread_t thr;
	int thr_started;
	pthread_mutex_t mu;       /* the fields below and the promotion queue */
	pthread_cond_t cv, done_cv;
	int stop, kicked, busy;
	uint64_t need;            /* bytes of slots the waiting writers want */
	uint64_t passes;          /* mover passes finished */
	int last_freed;           /* the last pass (or the evictions of one: outs) freed row room */
	/* evictions of a pass that gave row room back, counted as they end
	 * (the writers waiting for room go on then, not after the pass's
	 * merges); out_busy: a pass's evictions are under way */
	uint64_t outs;
	int out_busy;
	struct pq_ent pq[PQ_CAP];
	uint32_t pq_n;

	_Atomic uint64_t spilled, spill_writes, spill_write_bytes, promoted;
	_Atomic uint64_t reads, read_ios, read_bytes, read_iops;
	_Atomic uint64_t compacted_segs, compact_moved, compact_bytes, compact_done, compact_total;
	_Atomic uint64_t csum_errors, waits, full, shrinks;
	_Atomic uint64_t between; /* spill_evict_between's evictions */
	uint64_t iops_last, iops_t;

	/* run.c: the sorted runs.  Lists by table slot, newest first, and the
	 * dead ones waiting for their readers: protected by run_lock (a leaf),
	 * changed with commit_lock held too.  seg_busy: segments a run is
	 * being written into (sp->mu). */
	pthread_rwlock_t run_lock;
	struct srun **runs;
	struct srun *dead;
	struct emb_rundir *rd;
	uint8_t *seg_busy;
	_Atomic uint64_t run_next_id;
	/* the merge reserve: free segments evictions and stub spills leave, so
	 * that a merge (which writes its output before its inputs go) always
	 * finds room.  reserve_min (set at attach): an eighth of the segments,
	 * at least 2; reserve (the mover sets it each round, runs_reserve, and
	 * a run's install raises it, runs_reserve_raise):
	 * what merging all runs of the table with the most rows in runs would
	 * write, at least reserve_min and at most half the segments */
	uint32_t reserve_min;
	_Atomic uint32_t reserve;
	_Atomic uint64_t runs_gen;  /* bumped whenever a table's run list changes */
	uint64_t fit_gen, fit_free; /* merge_fitting's last fruitless search (round_lock) */
	struct rsweep *sweep;       /* runsweep.c: the sweep under way, or NULL (round_lock) */
	uint64_t part_bytes;        /* test hook: a sweep's part (0: SWEEP_PART_BYTES) */
	int whole_always;           /* test hook: merge_whole whatever the device's fill */
	uint32_t merge_delay_ms;    /* test hook: store_test_spill.merge_delay_ms */
	uint32_t merge_slow_ms;     /* test hook: store_test_spill.merge_slow_ms */
	uint32_t evict_rows, evict_slow_ms; /* test hooks: store_test_spill's */
	int all_cold;                       /* ... and this one */
	/* the rows of the eviction between its gather and its commit (sorted),
	 * of table ev_id: deletes and truncation treat them as in a run */
	uint64_t *ev_rows;
	size_t ev_n;
	uint32_t ev_id;
	_Atomic uint64_t run_evicted, run_reads, run_blocks, bloom_fp, merges, merge_in_bytes, merge_out_bytes;
	_Atomic uint64_t moves;   /* runmerge.c: runs moved down a level without a rewrite */
	_Atomic uint64_t sweep_steps; /* runsweep.c: parts written */
	_Atomic int sweep_on;         /* ... and a sweep is under way */
	/* run.c: read-ahead windows of sequential readers (ra_mu, a leaf;
	 * ra_cv: a window finished loading) */
	pthread_mutex_t ra_mu;
	pthread_cond_t ra_cv;
	struct rawin ra[RA_WINDOWS];
	char *ra_arena;           /* the windows' buffers, made at the first */
	uint64_t ra_tick;
	pthread_t ra_thr;         /* loads queued windows ahead of the readers */
	pid_t ra_pid;             /* the process it runs in (0: none) */
	int ra_stop, ra_queued;
	pthread_cond_t ra_job;    /* a window was queued, or stop */
	_Atomic uint64_t ra_loads, ra_blocks, ra_ahead;
	/* bulk.c: the open bulk-load run (bulk_mu: before commit_lock); its
	 * table + 1 (0: none) for a check without the lock; the first seal
	 * that failed (then every later one fails: the pool refuses changes) */
	pthread_mutex_t bulk_mu;
	struct bulk *bulk;
	_Atomic uint32_t bulk_tab;
	_Atomic uint64_t bulk_lo;  /* its first row (EMB_NONE: none yet) */
	_Atomic int bulk_err;
	/* the run directory slot held for the open bulk run, which other runs
	 * do not take, or -1 (commit_lock) */
	int64_t bulk_slot;
	_Atomic uint64_t bulk_runs, bulk_rows;
};


static inline struct emb_stub *STUB(struct store *s, uint64_t off)
{
	return S_PTR(s, off);
}


/* device.c: attach the device c names (check or format it) and set up the
 * tier's state; no thread, no recount (mover.c's store_spill_attach). */
int device_attach(struct store *s, const struct store_spill_conf *c, char *err, size_t n);
void spill_free(struct spill *sp);

/* The test hook: the mover let commit_lock go with device work in flight. */
static inline void spill_unlocked(struct spill *sp)
{
	if (sp->unlocked)
		sp->unlocked(sp->unlocked_arg);
}

/* The test hooks that slow the mover down: sleep ms milliseconds (0: not). */
static inline void spill_hook_sleep(uint32_t ms)
{
	if (ms)
		nanosleep(&(struct timespec){ ms / 1000, (long)(ms % 1000) * 1000000L }, NULL);
}

/* device.c */
uint64_t seg_base(const struct spill *sp, uint64_t k);
uint64_t seg_of(const struct emb_spill *pm, uint64_t loc);
uint32_t srec_csum(const struct emb_srec *r);
void seg_live_add(struct store *s, uint64_t loc, uint32_t rsz, int sign);
/* Read q[0..n) in one io_uring submission, topped up to qd in flight. */
void device_read(struct spill *sp, struct sreq *q, size_t n);
/* A reader enters (d = 1) or leaves (-1) the segment of loc. */
void seg_pin(struct spill *sp, uint64_t loc, int d);
uint32_t seg_free_count(struct spill *sp);
/* A free segment nobody writes, marked busy (sp->mu), leaving `keep` free
 * ones: its index, or EMB_NONE. */
uint64_t seg_claim(struct spill *sp, uint32_t keep);
int seg_next(struct store *s, int compacting);
int seg_room(struct store *s, uint64_t need);
int seg_write(struct store *s, uint64_t len, uint64_t *at);
void seg_grow(struct store *s, uint64_t len);
uint64_t srec_place(uint64_t pos, uint32_t rsz);
void srec_put(char *at, uint32_t table, uint64_t row, uint64_t batch, const void *data, uint32_t len);
void device_iops_tick(struct spill *sp);

/* The device's part of store_spill_stats_get (mover.c adds the runs'). */
void device_stats_get(struct store *s, struct store_spill_stats *st);
/* Read extents q[i] (blk = device offset, span = bytes, boff = offset in
 * buf, or to; all BLK-aligned) in one io_uring submission: 0 or -EIO. */
int device_read_raw(struct spill *sp, struct sreq *q, size_t n, char *buf);
/* Take a free segment nobody writes (sp->mu): its index, or EMB_NONE. */

/* run.c */
int runs_load(struct store *s, char *err, size_t n);
void runs_unload(struct spill *sp);
/* Evict cold rows of st (whole chains), about budget bytes of slots, in
 * row order from row *hand on (then *hand: the next row, or EMB_NONE at
 * the table's end): rows evicted or -errno.  Takes commit_lock. */
int64_t runs_evict_table(struct store *s, struct stable *st, uint64_t *hand, uint64_t budget, int all);
/* Free the evictions' row buffer (sp->ev_arena): at a mover round's end,
 * and with no mover left. */
void runs_evict_release(struct spill *sp);
/* Forget the sweep's rows (sp->evc): the mover's, or with no mover left. */
void runs_evict_forget(struct spill *sp);
int runs_merge_some(struct store *s);
/* The next step of the sweep under way, if any (one a mover round): 2 made,
 * 0 none, 1 a merge that gave room back instead, -errno. */
int runs_sweep_some(struct store *s);
/* Merges that give room back while the device is nearly full (round_lock
 * held): the steps of a sweep under way, until one gives room back or it
 * ends, else merge_fitting's; how many were made, or -errno. */
int runs_make_room(struct store *s);
/* Set sp->reserve from the tables' rows in runs (round_lock held); raise it
 * to what st's runs ask for (a run was installed: run_live_add). */
void runs_reserve(struct store *s);
void runs_reserve_raise(struct store *s, struct stable *st);
int runs_retire_locked(struct store *s, struct srun **v, size_t n);
int runs_reap_locked(struct store *s);
void runs_stats(struct store *s, struct store_spill_stats *st);

/* runsweep.c: end the sweep under way, if any, putting its references
 * (round_lock held, or the mover stopped) */
void sweep_end(struct spill *sp);

/* heat.c */
void heat_ref(struct spill *sp, uint32_t table, uint64_t row);
void heat_device_hit(struct spill *sp, uint32_t table, uint64_t row);
int heat_test_clear(struct spill *sp, uint32_t table, uint64_t row);

/* compact.c (spill_recount_locked in tier.h) */
int compact_seg(struct store *s, uint64_t k);
uint64_t compact_pick(struct store *s, int forced, double *ratio);

/* evict.c */
/* A row an eviction wrote to a run: its chain's versions, newest first. */
struct evict_row {
	uint64_t row;
	uint32_t nv;
	const uint64_t *off;      /* their slots */
	const uint64_t *link;     /* their links' slots (0: referred to directly) */
	const uint64_t *batch;    /* their batches */
	const char *const *data;  /* their bytes, NULL for a tombstone */
};
/* Delete e[i].row from the index, and free its versions and links, if its
 * chain is still exactly e[i] (slots, batches, bytes): it was written to a
 * run.  *done: rows deleted.  commit_lock held. */
int commit_evict_locked(struct store *s, struct stable *st, const struct evict_row *e, size_t n, size_t *done);

/* mover.c */
void *mover_main(void *arg);
/* One version moved in its chain (relink_apply): old replaced by new_ in
 * the field at (a link's ver or next) that refers to it. */
struct rl {
	uint64_t row, old, new_, at;  /* at: 0 = the index, EMB_NONE = no field to change */
	uint64_t loc;
	uint32_t rsz;
};
/* Replace version r[i].old by r[i].new_ (written, flushed) in their chains,
 * journaled (EMB_J_RELINK): a spill puts stubs in, a promotion takes them
 * out.  commit_lock held. */
int relink_apply(struct store *s, struct stable *st, struct rl *r, size_t n);

#endif
