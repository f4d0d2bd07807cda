/*
 * The answer format of MNT/.embfs/delta (README "Deltas"): write
 * "A B TABLE" at offset 0 (snapshot A older than snapshot B, or B = "-" for
 * the live table), then read from offset 0: this header, then nchanged
 * uint64_t row ids (the rows B stores whose version differs from A's, or
 * that A lacks), then ndeleted row ids (rows A stores and B does not), each
 * list ascending.  All little-endian.  Each open file description has its
 * own answer.
 */
#ifndef EMBFS_DELTA_H
#define EMBFS_DELTA_H

#include <stdint.h>

#define EMBFS_DELTA_MAGIC "EMBD"

struct embfs_delta_hdr {
	char magic[4];      /* "EMBD" */
	uint32_t row_size;  /* the table's row size in B */
	uint64_t batch_a;   /* A's batch id */
	uint64_t size_b;    /* the table's size in B, in bytes */
	uint64_t nchanged;  /* row ids that follow */
	uint64_t ndeleted;  /* row ids after those */
};
_Static_assert(sizeof(struct embfs_delta_hdr) == 40, "delta header is 40 bytes");

#endif
