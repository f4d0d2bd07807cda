/*
 * What fs/batch.c and fs/batchreq.c share: .embfs/rows's per-fd state, the
 * prefetch thread's jobs, the counters.
 *   batchreq.c  the file's FUSE entry points; requests: receiving and
 *               checking them, running SCATTER, PUSH, GATHER and MULTI
 *   batch.c     targets (a table inode's view), an fd's state, the
 *               prefetch map and thread, page cache invalidation, the stats
 * batchreq.c calls batch.c, never the other way.
 */
#ifndef EMBFS_FS_BATCH_INT_H
#define EMBFS_FS_BATCH_INT_H

#include <pthread.h>
#include <stdint.h>

#include "embfs/batch.h"
#include "fs.h"

#define HDR ((uint64_t)sizeof(struct embfs_batch_hdr))
#define PUSH_HDR ((uint64_t)sizeof(struct embfs_batch_push))
#define INIT_LEN ((uint64_t)sizeof(struct embfs_batch_init))
#define SUB_LEN ((uint64_t)sizeof(struct embfs_batch_sub))
/* the most a single-table request holds; a MULTI, and any request */
#define MAX_TOTAL (HDR + PUSH_HDR + 8ull * EMBFS_BATCH_MAX_COUNT + EMBFS_BATCH_MAX_BYTES)
#define REQ_MAX (HDR + (uint64_t)EMBFS_BATCH_MAX_MULTI)
#define PF_MAX_PER_FD (4u * EMBFS_BATCH_MAX_COUNT) /* rows pending or pinned per fd */
#define INVAL_CHUNK 64

/* What a request's table inode resolves to. */
struct btarget {
	uint64_t ino;
	uint32_t id;       /* table id (catalog slot) */
	uint64_t gen;
	uint32_t row_size, dtype, cols;
	uint32_t mode, uid, gid;
	uint64_t size;     /* the table's size (bytes) when resolved */
	int writable;      /* SCATTER allowed: a live table */
	int cached;        /* rows live in fs->fr.cache under id: PREFETCH can pin them */
	struct store_view view;
};

enum { PF_PENDING = 1, PF_PINNED = 2 };

struct pfent {
	uint64_t row;
	uint32_t table;
	uint32_t state; /* 0: empty slot */
};

/* Rows one fd announced: open addressing, linear probing, backward-shift delete. */
struct pfmap {
	struct pfent *e;
	uint32_t cap, n;
};

enum { S_IDLE, S_RECV, S_GATHER, S_RESP, S_FAILED };

/* One table's part of a MULTI request (batchreq.c). */
struct bsub {
	struct btarget t;
	uint32_t op, count, flags;
	uint64_t ids_off;              /* in req */
	uint64_t body_off;             /* a PUSH's gradients, in req */
	struct embfs_batch_push p;     /* a PUSH's, host order */
	struct embfs_batch_init init;  /* a GATHER's with F_INIT, host order */
	int64_t promised;              /* a PUSH's room reserved */
	uint64_t resp_off;             /* a GATHER's rows in resp */
};

struct bfd {
	pthread_mutex_t lock; /* one request at a time; protects everything down to pf_lock */
	int state;
	int err;              /* S_FAILED: what the last request failed with */
	char *req;            /* request bytes; ids in host order once checked */
	uint64_t req_cap, got;
	struct embfs_batch_hdr h; /* host order, valid once hdr_ok */
	struct embfs_batch_push p; /* a PUSH's, host order, valid once push_ok */
	struct embfs_batch_init init; /* a GATHER's with F_INIT, host order, valid once ids_off is */
	int hdr_ok, pre_ok, ids_ok; /* header, what is between it and the ids, ids: checked */
	uint64_t ids_off;     /* where the ids start in req (0: not known yet) */
	struct bsub *subs;    /* a MULTI's sub-requests, checked once all is in */
	uint32_t nsubs, subs_cap;
	struct btarget t;
	int64_t promised;     /* rows of room reserved for the scatter in flight */
	char *resp;
	uint64_t resp_cap, resp_len;
	uint64_t *unpin;      /* a gather's rows to unpin after reading them */
	uint32_t unpin_cap;
	uint8_t *present;     /* a gather's presence, a byte per row (F_PRESENT) */
	uint32_t present_cap;

	pthread_mutex_t pf_lock; /* protects pf and closing */
	struct pfmap pf;
	int closing;
	_Atomic int refs;     /* the open file, plus one per queued prefetch job */
};

struct pfjob {
	struct pfjob *next;
	struct bfd *f;
	uint32_t table, row_size;
	size_t n;
	uint64_t rows[];
};

struct batch {
	struct embfs *fs;
	pthread_mutex_t lock; /* protects the queues and stop */
	pthread_cond_t pf_wake, inval_wake, inval_sent;
	struct pfjob *head, *tail;
	uint64_t *inval;      /* table inodes whose page cache must go */
	size_t ninval, inval_cap;
	uint64_t inval_seq;   /* invalidations queued so far (inval_queue calls) */
	uint64_t inval_done;  /* every one queued up to this seq has been sent */
	_Atomic int stop;     /* set under lock; the prefetch thread also polls it */
	pthread_t pf_thread, inval_thread;
	_Atomic uint64_t writes, reads, gathers, gather_rows, scatters, scatter_rows, prefetches, errors;
	_Atomic uint64_t pushes, push_rows, multis;
	_Atomic uint64_t pf_rows, pf_pinned, pf_consumed, pf_late, pf_released, pf_failed, pf_skipped;
	_Atomic uint64_t pf_held, invals;
};

#define INC(b, f, v) atomic_fetch_add_explicit(&(b)->f, (uint64_t)(v), memory_order_relaxed)
#define DEC(b, f, v) atomic_fetch_sub_explicit(&(b)->f, (uint64_t)(v), memory_order_relaxed)

static inline struct bfd *batch_fh(struct fuse_file_info *fi)
{
	return (struct bfd *)(uintptr_t)fi->fh;
}

/* ---- batch.c ---- */
/* What table inode ino resolves to: -EINVAL unless a table file (live or
 * in a snapshot), -ESTALE for one unlinked and kept only by open files. */
int batch_resolve(struct embfs *fs, uint64_t ino, struct btarget *t);
/* Hand ids[0..n) of t to the prefetch thread (rows of a live, cached
 * table; others are counted as skipped). */
void batch_prefetch_ids(struct embfs *fs, struct bfd *f, const struct btarget *t, const uint64_t *ids, uint32_t n);
/* Before a gather of ids[0..n) of t: the rows this fd prefetched are
 * forgotten; those pinned are listed in f->unpin (their count returned)
 * for batch_pins_drop() after the rows are read. */
uint32_t batch_pins_take(struct embfs *fs, struct bfd *f, const struct btarget *t, const uint64_t *ids,
			 uint32_t n);
void batch_pins_drop(struct embfs *fs, struct bfd *f, uint32_t table, uint32_t nun);

/* A new fd's state (NULL: no memory, or no batch threads); at its
 * release (the request forgotten first), its prefetch pins dropped and
 * the state freed once the prefetch thread is done with it. */
struct bfd *batch_fd_new(struct embfs *fs);
void batch_fd_close(struct embfs *fs, struct bfd *f);

#endif
