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
 * - Each open file description has its own request and response state.
 */
#ifndef EMBFS_BATCH_H
#define EMBFS_BATCH_H

#include <stdint.h>

#define EMBFS_BATCH_MAGIC "EMBB"
#define EMBFS_BATCH_GATHER 1u
#define EMBFS_BATCH_SCATTER 2u
#define EMBFS_BATCH_PREFETCH 3u
/* flags: GATHER only.  The response is followed by ceil(count / 8) bytes of
 * bitmap: bit i % 8 of byte i / 8 is 1 if row i is stored (written and not
 * deleted; in a snapshot: as of it), 0 if it is a hole (it read as zeros). */
#define EMBFS_BATCH_F_PRESENT 1u
#define EMBFS_BATCH_MAX_COUNT 65536u        /* row ids per request */
#define EMBFS_BATCH_MAX_BYTES (64u << 20)   /* count * row_size per request */

struct embfs_batch_hdr {
	char magic[4];      /* "EMBB" */
	uint32_t op;        /* EMBFS_BATCH_GATHER, _SCATTER or _PREFETCH */
	uint64_t table_ino; /* st_ino of the table (stat() of its file) */
	uint32_t count;     /* row ids that follow: 1 .. EMBFS_BATCH_MAX_COUNT */
	uint32_t flags;     /* 0, or EMBFS_BATCH_F_PRESENT for a GATHER */
	uint64_t total_len; /* header + ids (+ rows for SCATTER), in bytes */
};
_Static_assert(sizeof(struct embfs_batch_hdr) == 32, "batch header is 32 bytes");

#endif
