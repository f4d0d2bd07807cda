/*
 * The inode scheme of the mounted tree: the one place that turns an inode
 * number into what it names (fs_ino), and names into inode numbers.
 *
 *   1                           the root
 *   2, 3, 5, 6, 7, 8, 9         .embfs, .embfs/stats, .embfs/batch, .embfs/rows,
 *                               .embfs/restore, .embfs/delta, .embfs/metrics
 *   15                          .embfs/pid
 *   4                           .snapshots
 *   16 + id                     live table id (catalog slot, < 65536)
 *   2^20 + idx                  snapshot directory idx (record slot, < 256)
 *   2^32 + (idx << 16) + id     table id in snapshot idx
 *   2^21 + a                    .snapshots/A/.delta (a: A's record slot)
 *   2^22 + p                    .snapshots/A/.delta/B, p = a << 9 | b (b: B's
 *                               slot, or DELTA_LIVE for .delta/.live)
 *   2^23 + p                    .snapshots/A/.delta/B/.deleted
 *   2^40 + (p << 16) + id       .snapshots/A/.delta/B/TABLE (id: B's table)
 *   2^41 + (p << 16) + id       .snapshots/A/.delta/B/.deleted/TABLE
 *   2^24 + p                    .snapshots/A/.delta/B/.changed
 *   2^42 + (p << 16) + id       .snapshots/A/.delta/B/.changed/TABLE
 *
 * Inode numbers are uint64_t here (fuse_ino_t is one), so that the batch
 * path, which takes them from requests, decodes them the same way.
 */
#ifndef EMBFS_FS_INO_H
#define EMBFS_FS_INO_H

#include <stdint.h>

#include "embfs/layout.h"

#define INO_ROOT 1
#define INO_CTL 2     /* .embfs */
#define INO_STATS 3   /* .embfs/stats */
#define INO_SNAPS 4   /* .snapshots */
#define INO_BATCHID 5 /* .embfs/batch: the current batch id */
#define INO_ROWS 6    /* .embfs/rows: batched gather/scatter */
#define INO_RESTORE 7 /* .embfs/restore: a table back to a snapshot, in place */
#define INO_DELTA 8   /* .embfs/delta: the rows changed between two snapshots */
#define INO_METRICS 9 /* .embfs/metrics: the stats in the Prometheus text format */
#define INO_PID 15    /* .embfs/pid: the daemon's pid (embfs-umount waits for it) */
/* 10..14: more control files */
#define INO_TABLE0 16ull
#define INO_NTABLES ((uint64_t)EMB_CAT_PER_CHUNK * EMB_CAT_CHUNKS)
#define INO_SNAP0 (1ull << 20)
#define INO_SNAPT0 (1ull << 32)
#define INO_DDIR0 (1ull << 21)
#define INO_DPAIR0 (1ull << 22)
#define INO_DDEL0 (1ull << 23)
#define INO_DVIEW0 (1ull << 40)
#define INO_DLIST0 (1ull << 41)
#define INO_DCHGD0 (1ull << 24)
#define INO_DCHG0 (1ull << 42)
#define DELTA_LIVE EMB_MAX_SNAPS /* B is the live tables */
#define DELTA_PAIRS ((uint64_t)EMB_MAX_SNAPS << 9)

enum fs_kind {
	FS_NONE,      /* names nothing */
	FS_ROOT,
	FS_CTL,
	FS_STATS,
	FS_BATCHID,
	FS_ROWS,
	FS_RESTORE,
	FS_DELTA,
	FS_METRICS,
	FS_PID,
	FS_SNAPS,     /* .snapshots */
	FS_SNAPDIR,   /* a snapshot's directory: idx */
	FS_TABLE,     /* a live table: id */
	FS_SNAPTABLE, /* a snapshot's table: idx, id */
	FS_DDIR,      /* .snapshots/A/.delta: idx = A */
	FS_DPAIR,     /* .snapshots/A/.delta/B: idx = A, b = B */
	FS_DDEL,      /* .snapshots/A/.delta/B/.deleted */
	FS_DVIEW,     /* the rows of table id changed from A to B: idx, b, id */
	FS_DLIST,     /* the ids of the rows deleted from A to B: idx, b, id */
	FS_DCHGD,     /* .snapshots/A/.delta/B/.changed */
	FS_DCHG,      /* the ids of the rows changed from A to B: idx, b, id */
	FS_NKINDS
};

/* What an inode number names. */
struct fs_ino {
	enum fs_kind kind;
	uint32_t idx; /* snapshot record slot (FS_SNAPDIR, FS_SNAPTABLE) */
	uint32_t id;  /* table catalog slot (FS_TABLE, FS_SNAPTABLE) */
	uint32_t b;   /* the later side of a delta: a record slot or DELTA_LIVE */
};

static inline struct fs_ino fs_ino(uint64_t ino)
{
	static const enum fs_kind fixed[INO_TABLE0] = {
		[INO_ROOT] = FS_ROOT,   [INO_CTL] = FS_CTL,         [INO_STATS] = FS_STATS,
		[INO_SNAPS] = FS_SNAPS, [INO_BATCHID] = FS_BATCHID, [INO_ROWS] = FS_ROWS,
		[INO_RESTORE] = FS_RESTORE, [INO_DELTA] = FS_DELTA, [INO_METRICS] = FS_METRICS, [INO_PID] = FS_PID,
	};
	if (ino < INO_TABLE0)
		return (struct fs_ino){ fixed[ino], 0, 0, 0 };
	if (ino - INO_TABLE0 < INO_NTABLES)
		return (struct fs_ino){ FS_TABLE, 0, (uint32_t)(ino - INO_TABLE0), 0 };
	if (ino >= INO_SNAP0 && ino - INO_SNAP0 < EMB_MAX_SNAPS)
		return (struct fs_ino){ FS_SNAPDIR, (uint32_t)(ino - INO_SNAP0), 0, 0 };
	if (ino >= INO_SNAPT0 && (ino - INO_SNAPT0) >> 16 < EMB_MAX_SNAPS)
		return (struct fs_ino){ FS_SNAPTABLE, (uint32_t)((ino - INO_SNAPT0) >> 16),
					(uint32_t)((ino - INO_SNAPT0) & 0xffff), 0 };
	if (ino >= INO_DDIR0 && ino - INO_DDIR0 < EMB_MAX_SNAPS)
		return (struct fs_ino){ FS_DDIR, (uint32_t)(ino - INO_DDIR0), 0, 0 };
	static const struct { uint64_t base; int shift; enum fs_kind kind; } d[] = {
		{ INO_DPAIR0, 0, FS_DPAIR }, { INO_DDEL0, 0, FS_DDEL },
		{ INO_DVIEW0, 16, FS_DVIEW }, { INO_DLIST0, 16, FS_DLIST },
		{ INO_DCHGD0, 0, FS_DCHGD }, { INO_DCHG0, 16, FS_DCHG },
	};
	for (int i = 0; i < 6; i++) {
		if (ino < d[i].base || (ino - d[i].base) >> d[i].shift >= DELTA_PAIRS)
			continue;
		uint64_t p = (ino - d[i].base) >> d[i].shift;
		if ((p & 511) > DELTA_LIVE)
			break;
		return (struct fs_ino){ d[i].kind, (uint32_t)(p >> 9), (uint32_t)((ino - d[i].base) & 0xffff) *
					(uint32_t)(d[i].shift != 0), (uint32_t)(p & 511) };
	}
	return (struct fs_ino){ FS_NONE, 0, 0, 0 };
}

/* A table file: live or in a snapshot. */
static inline int fs_ino_is_table(struct fs_ino k)
{
	return k.kind == FS_TABLE || k.kind == FS_SNAPTABLE;
}

/* Inside .snapshots (read-only: every change gives EROFS). */
static inline int fs_ino_in_snaps(struct fs_ino k)
{
	return k.kind == FS_SNAPS || k.kind == FS_SNAPDIR || k.kind == FS_SNAPTABLE || k.kind >= FS_DDIR;
}

/* A delta's file (FS_DVIEW, FS_DLIST) or directory: a = A's slot, b = B's
 * or DELTA_LIVE. */
static inline uint64_t fs_ino_delta(enum fs_kind kind, uint32_t a, uint32_t b, uint32_t id)
{
	uint64_t p = (uint64_t)a << 9 | b;
	switch (kind) {
	case FS_DDIR:
		return INO_DDIR0 + a;
	case FS_DPAIR:
		return INO_DPAIR0 + p;
	case FS_DDEL:
		return INO_DDEL0 + p;
	case FS_DVIEW:
		return INO_DVIEW0 + (p << 16) + id;
	case FS_DCHGD:
		return INO_DCHGD0 + p;
	case FS_DCHG:
		return INO_DCHG0 + (p << 16) + id;
	default:
		return INO_DLIST0 + (p << 16) + id;
	}
}

static inline uint64_t fs_ino_table(uint32_t id)
{
	return INO_TABLE0 + id;
}

static inline uint64_t fs_ino_snapdir(uint32_t idx)
{
	return INO_SNAP0 + idx;
}

static inline uint64_t fs_ino_snaptable(uint32_t idx, uint32_t id)
{
	return INO_SNAPT0 + ((uint64_t)idx << 16) + id;
}

#endif
