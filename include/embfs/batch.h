/*
 * The wire format of MNT/.embfs/rows: many rows of one table per round trip
 * with ordinary file calls (README "Batched rows").  For C clients; any other
 * language packs the same 32 little-endian bytes (Python: struct "<4sIQIIQ").
 *
 * Contract:
 * - A request is written at offset 0 of an fd of .embfs/rows: this header,
 *   then count uint64_t row ids, then (SCATTER only) count rows of the
 *   table's row_size bytes in the same order.  total_len counts it all.
 * - GATHER: pread(fd, buf, count * row_size, 0) then returns the rows packed
 *   in request order (and the presence bitmap after them with
 *   EMBFS_BATCH_F_PRESENT).  SCATTER: the write that completes the request returns
 *   once every row is written.  PREFETCH: a hint; the write returns at once.
 * - PUSH: this header, a struct embfs_batch_push (the optimizer and its
 *   hyper-parameters), count row ids, then count gradient rows of
 *   push.dim little-endian f32 each, in the same order.  The daemon sums
 *   the gradients of duplicate ids, then updates each row in place with
 *   the optimizer (in f32, the result rounded to the table's dtype, nearest
 *   even), its state in the row's columns after the weights.  Rows never
 *   stored start from push's init spec.  Pushes to one table are applied
 *   one request at a time, so concurrent pushers lose no update.  The write
 *   that completes the request returns once every row is updated; the
 *   request is refused whole (EINVAL: a bad optimizer or shape, state that
 *   does not fit the row, a NaN or Inf gradient; EROFS: a snapshot's table)
 *   before any row changes.  There is no response to read.
 * - MULTI: many tables in one round trip (a training step's pushes and
 *   gathers for every table).  The header's table_ino is 0, count the
 *   number of parts (1 .. EMBFS_BATCH_MAX_TABLES), flags 0; then count
 *   struct embfs_batch_sub, then each part's body in the same order, as
 *   the single-table request has it after its header (GATHER: [init spec]
 *   ids; PUSH: parameters, ids, gradients; PREFETCH: ids).  A part is a
 *   GATHER, PUSH or PREFETCH; a table may have at most one part of each op.
 *   The whole request is checked before anything runs (bad input refuses
 *   it whole: EINVAL; a missing table EINVAL, one removed ESTALE; EROFS,
 *   EACCES, ENOSPC as for its parts).  The write that completes it applies
 *   the PUSHes in order and queues the PREFETCHes; the GATHERs run at the
 *   first READ, after the pushes, and the response is their answers
 *   concatenated in order (each its rows, then its bitmap with F_PRESENT).
 *   A push that fails midway (ENOSPC, EIO) leaves the earlier ones applied.
 * - Each open file description has its own request and response state.
 */
#ifndef EMBFS_BATCH_H
#define EMBFS_BATCH_H

#include <stdint.h>

#define EMBFS_BATCH_MAGIC "EMBB"
#define EMBFS_BATCH_GATHER 1u
#define EMBFS_BATCH_SCATTER 2u
#define EMBFS_BATCH_PREFETCH 3u
#define EMBFS_BATCH_PUSH 4u
#define EMBFS_BATCH_MULTI 5u
/* flags: GATHER only.  F_PRESENT: the response is followed by ceil(count /
 * 8) bytes of bitmap: bit i % 8 of byte i / 8 is 1 if row i is stored
 * (written and not deleted; in a snapshot: as of it), 0 if it is a hole (it
 * read as zeros, or as its init with F_INIT).  F_INIT: a struct
 * embfs_batch_init follows the header (before the ids), and rows not
 * stored are answered with its values instead of zeros. */
#define EMBFS_BATCH_F_PRESENT 1u
#define EMBFS_BATCH_F_INIT 2u
#define EMBFS_BATCH_MAX_COUNT 65536u        /* row ids per request */
#define EMBFS_BATCH_MAX_BYTES (64u << 20)   /* count * row_size per request */
#define EMBFS_BATCH_MAX_TABLES 1024u        /* parts of a MULTI request */
#define EMBFS_BATCH_MAX_MULTI (256u << 20)  /* bytes of a MULTI request, and of its response */

struct embfs_batch_hdr {
	char magic[4];      /* "EMBB" */
	uint32_t op;        /* EMBFS_BATCH_GATHER, _SCATTER or _PREFETCH */
	uint64_t table_ino; /* st_ino of the table (stat() of its file) */
	uint32_t count;     /* row ids that follow: 1 .. EMBFS_BATCH_MAX_COUNT */
	uint32_t flags;     /* 0, or EMBFS_BATCH_F_PRESENT for a GATHER */
	uint64_t total_len; /* header + ids (+ rows for SCATTER), in bytes */
};
_Static_assert(sizeof(struct embfs_batch_hdr) == 32, "batch header is 32 bytes");

/* One part of a MULTI request. */
struct embfs_batch_sub {
	uint64_t table_ino; /* st_ino of the table */
	uint32_t op;        /* EMBFS_BATCH_GATHER, _PUSH or _PREFETCH */
	uint32_t count;     /* row ids: 1 .. EMBFS_BATCH_MAX_COUNT */
	uint32_t flags;     /* a GATHER's EMBFS_BATCH_F_* ; else 0 */
	uint32_t reserved;  /* 0 */
};
_Static_assert(sizeof(struct embfs_batch_sub) == 24, "a MULTI part is 24 bytes");

/* A PUSH's optimizer (push.optim); the state columns it keeps after the
 * row's dim weights, and its update of weights w with gradient g (after
 * g += weight_decay * w when weight_decay is not 0):
 *  SGD              no state          w -= lr * g
 *  ROWWISE_ADAGRAD  1: s              s += mean(g^2); w -= lr * g / (sqrt(s) + eps)
 *                                     (FBGEMM's row-wise Adagrad)
 *  ADAGRAD          dim: s            s += g^2; w -= lr * (g / (sqrt(s) + eps))
 *                                     (torch.optim.Adagrad, lr_decay 0)
 *  ADAM             2 * dim: m, v     m += (g - m)(1 - beta1); v += (g^2 - v)(1 - beta2);
 *                                     w -= lr * sqrt(1 - beta2^t) / (1 - beta1^t) * m / (sqrt(v) + eps)
 *                                     with t = push.step (torch.optim.SparseAdam)
 * Only the rows a push names change (a lazy update, as FBGEMM's and
 * SparseAdam's: no decay or momentum for rows not in the batch). */
#define EMBFS_OPT_SGD 1u
#define EMBFS_OPT_ROWWISE_ADAGRAD 2u
#define EMBFS_OPT_ADAGRAD 3u
#define EMBFS_OPT_ADAM 4u

/* Values of rows never stored (struct embfs_batch_init), a function of
 * (seed, row id, column) only, the same as Python's embfs.Init: columns
 * below cols (UINT32_MAX: all) get the value, the others fill.  Float
 * tables only (f32, f16, bf16). */
#define EMBFS_INIT_ZERO 0u     /* every column fill */
#define EMBFS_INIT_UNIFORM 1u  /* in [p, q) */
#define EMBFS_INIT_NORMAL 2u   /* mean p, standard deviation q */
#define EMBFS_INIT_CONSTANT 3u /* p */

struct embfs_batch_init {
	uint32_t kind;       /* EMBFS_INIT_* */
	uint32_t cols;
	uint64_t seed;
	double p, q, fill;
};
_Static_assert(sizeof(struct embfs_batch_init) == 40, "an init spec is 40 bytes");

struct embfs_batch_push {
	uint32_t optim;      /* EMBFS_OPT_* */
	uint32_t dim;        /* weight columns (gradient columns); state follows */
	uint64_t step;       /* ADAM: this update's step t >= 1; others 0 */
	double lr, eps, beta1, beta2, weight_decay;
	struct embfs_batch_init init; /* rows never stored start from it */
};
_Static_assert(sizeof(struct embfs_batch_push) == 96, "push parameters are 96 bytes");

#endif
