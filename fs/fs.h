/* Private to fs/: the daemon's state, reached through the request userdata. */
#ifndef EMBFS_FS_H
#define EMBFS_FS_H

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>
#include <stdatomic.h>

#include "embfs/cache.h"
#include "embfs/store.h"

#define INO_ROOT FUSE_ROOT_ID
#define INO_CTL 2        /* .embfs */
#define INO_STATS 3      /* .embfs/stats */
#define INO_SNAPS 4      /* .snapshots */
#define INO_BATCHID 5    /* .embfs/batch: the current batch id */
/* 6..15: more control files */
#define INO_TABLE0 16    /* table id i is inode INO_TABLE0 + i */
#define INO_SNAP0 (1ull << 20)  /* snapshot record idx is directory INO_SNAP0 + idx */
#define INO_SNAPT0 (1ull << 32) /* table id in snapshot idx: INO_SNAPT0 + (idx << 16) + id */

struct embfs_conf {
	char *pool;
	char *pidfile;
	char *dtype;
	char *cache_size;
	unsigned dirty_age_ms;
	unsigned dim;
	unsigned threads;
	int show_help;
	int show_version;
};

struct embfs {
	struct store *st;
	struct cache *cache;        /* NULL with -o cache_size=0: rows go straight to the store */
	uint64_t cache_bytes;
	struct fuse_session *se;
	struct embfs_conf conf;
	uint32_t def_dim, def_dtype;
	_Atomic uint64_t *nlookup;  /* kernel references per table id */
	_Atomic uint64_t n_read, n_write, n_read_bytes, n_write_bytes, n_fsync;
};

extern const struct fuse_lowlevel_ops embfs_ops;

/* rows.c: byte ranges of a table <-> rows, through the cache when there is one. */
int rows_read(struct embfs *fs, uint32_t id, uint32_t rs, uint64_t off, size_t len, char *buf);
int rows_write(struct embfs *fs, uint32_t id, uint32_t rs, uint64_t off, size_t len, const char *data);
/* Make the store see every cached write of table id (id < 0: all). */
int rows_sync(struct embfs *fs, int64_t id);
/* Before/after a change made in the store directly (truncate, punch,
 * geometry, release): rows [from, to) cached for id are written back before,
 * dropped after. */
int rows_before_change(struct embfs *fs, uint32_t id);
void rows_after_change(struct embfs *fs, uint32_t id, uint64_t from, uint64_t to);
/* Stored rows including written rows not yet in the store. */
uint64_t rows_count(struct embfs *fs, uint32_t id, uint64_t store_rows);
extern const struct cache_ops embfs_cache_ops;

/* stats.c: render .embfs/stats into a malloc'd buffer. */
char *embfs_stats_render(struct embfs *fs, size_t *len);

#endif
