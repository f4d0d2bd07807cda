/*
 * Private to the spill tier's files (device.c, heat.c, read.c, compact.c,
 * mover.c, version.c): its shared state.  What the tier does and its crash
 * safety: device.c's header comment.
 *
 * Fields are grouped by owner; each group says its lock.  Lock order within
 * the tier: round_lock (one mover round at a time), then commit_lock, then a
 * table's lock; sp->mu and ring locks are leaves.
 */
#ifndef EMBFS_SPILL_H
#define EMBFS_SPILL_H

#include <liburing.h>

#include "store_int.h"

#define BLK EMB_SPILL_BLOCK
#define CHUNK_BYTES (1u << 20)     /* one device write */
#define NRINGS 4u
#define HEAT_BITS 20u
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

struct spill {
	/* device.c: set at attach, then read-only */
	int fd;
	int direct;               /* O_DIRECT worked */
	char path[256];
	struct emb_spill *pm;     /* segment table, in the pool */
	uint32_t qd;
	uint64_t low_bytes, high_bytes, start_bytes;
	uint64_t compact_bps;
	int manual;
	struct ring rings[NRINGS];
	_Atomic uint32_t ring_rr;
	_Atomic uint32_t *pins;   /* readers inside each segment (device.c, atomic) */
	_Atomic uint8_t *heat;    /* heat.c: reference bits and device-read counts (atomic) */

	/* one mover round at a time (the thread, store_spill_run, a writer's
	 * wait in manual mode): compaction reads a segment into rbuf unlocked.
	 * Taken before commit_lock. */
	pthread_mutex_t round_lock;

	/* mover state: protected by commit_lock */
	int64_t open_seg;
	char *wbuf;               /* CHUNK_BYTES, aligned */
	char *rbuf;               /* one segment, aligned (compaction) */
	uint32_t cur_table;
	size_t cur_di;
	int recount;              /* live counts are hints from before a crash */

	/* thread */
	pthread_t thr;
	int thr_started;
	pthread_mutex_t mu;       /* the fields below and the promotion queue */
	pthread_cond_t cv, done_cv;
	int stop, kicked, busy;
	uint64_t need;            /* bytes of slots the waiting writers want */
	uint64_t passes;          /* mover passes finished */
	int last_freed;           /* the last pass freed row room */
	struct pq_ent pq[PQ_CAP];
	uint32_t pq_n;

	_Atomic uint64_t spilled, spill_writes, spill_write_bytes, promoted;
	_Atomic uint64_t reads, read_ios, read_bytes, read_iops;
	_Atomic uint64_t compacted_segs, compact_moved, compact_bytes, compact_done, compact_total;
	_Atomic uint64_t csum_errors, waits, full, shrinks;
	uint64_t iops_last, iops_t;
};

/* A device read of one record (device.c). */
struct sreq {
	uint64_t loc;
	uint64_t row, batch;
	uint32_t len, table;
	char *dst;
	size_t idx;          /* row index in the caller's request */
	uint64_t blk, boff;
	uint32_t span;
	int ret;
};

static inline struct emb_stub *STUB(struct store *s, uint64_t off)
{
	return S_PTR(s, off);
}

/* One version moved in its chain (version.c relink_apply): old replaced by
 * new_, linked from pred. */
struct rl {
	uint64_t row, old, new_, pred; /* pred: 0 = the index, EMB_NONE = no link to change */
	uint64_t loc;
	uint32_t rsz;
	int newer;                    /* victim whose stub links to this one, -1 = none */
};

/* version.c: replace r[i].old by r[i].new_ (written, flushed) in their
 * chains, journaled (EMB_J_RELINK).  commit_lock held. */
int relink_apply(struct store *s, struct stable *st, struct rl *r, size_t n);

/* device.c: attach the device c names (check or format it) and set up the
 * tier's state; no thread, no recount (mover.c's store_spill_attach). */
int device_attach(struct store *s, const struct store_spill_conf *c, char *err, size_t n);
void spill_free(struct spill *sp);

/* device.c */
uint64_t seg_base(const struct spill *sp, uint64_t k);
uint64_t seg_of(const struct emb_spill *pm, uint64_t loc);
uint32_t srec_csum(const struct emb_srec *r);
void seg_live_add(struct store *s, uint64_t loc, uint32_t rsz, int sign);
/* Read q[0..n) in one io_uring submission, topped up to qd in flight. */
void device_read(struct spill *sp, struct sreq *q, size_t n);
/* A reader enters (d = 1) or leaves (-1) the segment of loc. */
void pin(struct spill *sp, uint64_t loc, int d);
uint32_t free_segs(const struct emb_spill *pm);
int seg_next(struct store *s, int compacting);
int seg_room(struct store *s, uint64_t need);
int seg_write(struct store *s, uint64_t len, uint64_t *at);
uint64_t place(uint64_t pos, uint32_t rsz);
void put_rec(char *at, uint32_t table, uint64_t row, uint64_t batch, const void *data, uint32_t len);
void iops_tick(struct spill *sp);

/* heat.c */
void heat_ref(struct spill *sp, uint32_t table, uint64_t row);
void heat_device_hit(struct spill *sp, uint32_t table, uint64_t row);
int heat_test_clear(struct spill *sp, uint32_t table, uint64_t row);

/* compact.c: commit_lock held by recount_locked's caller */
int recount_locked(struct store *s);
int compact_seg(struct store *s, uint64_t k);
uint64_t compact_pick(struct store *s, int forced, double *ratio);

/* mover.c */
void *mover_main(void *arg);

#endif
