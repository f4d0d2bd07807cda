/*
 * The inode scheme of the mounted tree: the one place that turns an inode
 * number into what it names (fs_ino), and names into inode numbers.
 *
 *   1                           the root
 *   2, 3, 5, 6, 7, 8            .embfs, .embfs/stats, .embfs/batch, .embfs/rows,
 *                               .embfs/restore, .embfs/delta
 *   15                          .embfs/pid
 *   4                           .snapshots
 *   16 + id                     live table id (catalog slot, < 65536)
 *   2^20 + idx                  snapshot directory idx (record slot, < 256)
 *   2^32 + (idx << 16) + id     table id in snapshot idx
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
#define INO_PID 15    /* .embfs/pid: the daemon's pid (embfs-umount waits for it) */
/* 9..14: more control files */
#define INO_TABLE0 16ull
#define INO_NTABLES ((uint64_t)EMB_CAT_PER_CHUNK * EMB_CAT_CHUNKS)
#define INO_SNAP0 (1ull << 20)
#define INO_SNAPT0 (1ull << 32)

enum fs_kind {
	FS_NONE,      /* names nothing */
	FS_ROOT,
	FS_CTL,
	FS_STATS,
	FS_BATCHID,
	FS_ROWS,
	FS_RESTORE,
	FS_DELTA,
	FS_PID,
	FS_SNAPS,     /* .snapshots */
	FS_SNAPDIR,   /* a snapshot's directory: idx */
	FS_TABLE,     /* a live table: id */
	FS_SNAPTABLE, /* a snapshot's table: idx, id */
};

/* What an inode number names. */
struct fs_ino {
	enum fs_kind kind;
	uint32_t idx; /* snapshot record slot (FS_SNAPDIR, FS_SNAPTABLE) */
	uint32_t id;  /* table catalog slot (FS_TABLE, FS_SNAPTABLE) */
};

static inline struct fs_ino fs_ino(uint64_t ino)
{
	static const enum fs_kind fixed[INO_TABLE0] = {
		[INO_ROOT] = FS_ROOT,   [INO_CTL] = FS_CTL,         [INO_STATS] = FS_STATS,
		[INO_SNAPS] = FS_SNAPS, [INO_BATCHID] = FS_BATCHID, [INO_ROWS] = FS_ROWS,
		[INO_RESTORE] = FS_RESTORE, [INO_DELTA] = FS_DELTA, [INO_PID] = FS_PID,
	};
	if (ino < INO_TABLE0)
		return (struct fs_ino){ fixed[ino], 0, 0 };
	if (ino - INO_TABLE0 < INO_NTABLES)
		return (struct fs_ino){ FS_TABLE, 0, (uint32_t)(ino - INO_TABLE0) };
	if (ino >= INO_SNAP0 && ino - INO_SNAP0 < EMB_MAX_SNAPS)
		return (struct fs_ino){ FS_SNAPDIR, (uint32_t)(ino - INO_SNAP0), 0 };
	if (ino >= INO_SNAPT0 && (ino - INO_SNAPT0) >> 16 < EMB_MAX_SNAPS)
		return (struct fs_ino){ FS_SNAPTABLE, (uint32_t)((ino - INO_SNAPT0) >> 16),
					(uint32_t)((ino - INO_SNAPT0) & 0xffff) };
	return (struct fs_ino){ FS_NONE, 0, 0 };
}

/* A table file: live or in a snapshot. */
static inline int fs_ino_is_table(struct fs_ino k)
{
	return k.kind == FS_TABLE || k.kind == FS_SNAPTABLE;
}

/* Inside .snapshots (read-only: every change gives EROFS). */
static inline int fs_ino_in_snaps(struct fs_ino k)
{
	return k.kind == FS_SNAPS || k.kind == FS_SNAPDIR || k.kind == FS_SNAPTABLE;
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
