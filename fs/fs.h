/* Private to fs/: the daemon's state, reached through the request userdata. */
#ifndef EMBFS_FS_H
#define EMBFS_FS_H

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#include "embfs/cache.h"
#include "embfs/store.h"

#define INO_ROOT FUSE_ROOT_ID
#define INO_CTL 2        /* .embfs */
#define INO_STATS 3      /* .embfs/stats */
#define INO_SNAPS 4      /* .snapshots */
#define INO_BATCHID 5    /* .embfs/batch: the current batch id (ctl.c) */
#define INO_ROWS 6       /* .embfs/rows: batched gather/scatter (batch.c) */
/* 7..15: more control files */
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
	char *spill;
	char *spill_size;
	unsigned spill_qd, spill_high, spill_low, spill_compact_mbps;
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
	_Atomic uint64_t n_read, n_write, n_read_bytes, n_write_bytes, n_fsync, n_snaps;
	_Atomic int failure_logged; /* the pool's failure (store_health) was logged */
	struct batch *batch;        /* batch.c: .embfs/rows threads and counters */
	struct pcache *pc;          /* pcache.c: stale kernel pages after scatters */
	/* Writes into the cache hold it shared from reading the batch id until
	 * their rows are in the cache; taking a snapshot holds it exclusive while
	 * it advances the batch id and tells the cache, so no write straddles a
	 * snapshot (see rows_batch_begin). */
	pthread_rwlock_t snap_rw;
};

extern const struct fuse_lowlevel_ops embfs_ops;

/* Rows of live table id straight from the store (a live view): as
 * store_rows_read(). */
static inline int fs_store_read(struct embfs *fs, uint32_t id, const uint64_t *rows, size_t n, void *buf,
				uint8_t *stored, uint64_t *vbatch)
{
	struct store_view v;
	int ret = store_view_live(fs->st, id, &v);
	return ret ? ret : store_rows_read(fs->st, &v, rows, n, buf, stored, vbatch);
}

/* rows.c: byte ranges of a table <-> rows, through the cache when there is one. */
int rows_read(struct embfs *fs, uint32_t id, uint32_t rs, uint64_t off, size_t len, char *buf);
int rows_write(struct embfs *fs, uint32_t id, uint32_t rs, uint64_t off, size_t len, const char *data);
/* Promise room for n rows of rs a write is about to leave dirty in the
 * cache: its credit for cache_write()/cache_write_rows(). */
int rows_reserve(struct embfs *fs, uint32_t rs, int64_t n);
/* Give back what is left of a write's credit (no cache lock held). */
void rows_credit_end(struct embfs *fs, uint32_t rs, int64_t credit);
/* Around writes into the cache: the batch id to stamp them with. */
uint64_t rows_batch_begin(struct embfs *fs);
void rows_batch_end(struct embfs *fs);
/* After a store call failed with ret: when the pool itself has failed (a
 * write-back of its file failed), log why, once; 1 if it has. */
int rows_pool_failed(struct embfs *fs, int ret);
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

/* ll.c helpers shared with snap.c */
struct fs_dirbuf {
	char *p;
	size_t size, cap;
};
int fs_dir_add(fuse_req_t req, struct fs_dirbuf *b, const char *name, fuse_ino_t ino, mode_t mode,
	       off_t next);
void fs_table_stat(struct embfs *fs, const struct store_attr *a, struct stat *st, int snap);
void fs_dir_times(struct embfs *fs, enum store_dir which, struct stat *st);

/* snap.c: the .snapshots tree (every other change there gives EROFS). */
int snapfs_owns(fuse_ino_t ino);
int snapfs_is_table(fuse_ino_t ino);
int snapfs_stat(struct embfs *fs, fuse_ino_t ino, struct stat *st);
int snapfs_table_attr(struct embfs *fs, fuse_ino_t ino, struct store_attr *a);
void snapfs_lookup(fuse_req_t req, fuse_ino_t parent, const char *name);
void snapfs_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off);
void snapfs_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name);
void snapfs_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name);
void snapfs_fsyncdir(fuse_req_t req, fuse_ino_t ino);
void snapfs_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void snapfs_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off);
void snapfs_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence);
int snapfs_ensure_durable(struct embfs *fs, uint32_t idx);

/* pcache.c: keeps pages the kernel caches of a table from bringing back rows
 * a scatter changed behind its back (README "Batched rows").  pc_init at
 * INIT, pc_destroy at DESTROY after batch_destroy; without pc_init every
 * call does nothing (rows_write for pc_writepage). */
int pc_init(struct embfs *fs);
void pc_destroy(struct embfs *fs);
/* What a READ or WRITE of a table saw of capturing scatters when it arrived. */
struct pc_io {
	int valid;
	uint32_t capt;
	uint64_t pin_seq;
};
/* A READ or (not write-back) WRITE of table id arrived: the kernel may
 * cache its pages from now on.  Waits while a scatter that captured
 * nothing runs on the table. */
void pc_io_begin(struct embfs *fs, uint32_t id, struct pc_io *io);
/* ... and served (READ) or wrote (WRITE) buf at [off, off + len). */
void pc_io_done(struct embfs *fs, uint32_t id, uint32_t rs, uint64_t off, size_t len, const char *buf,
		const struct pc_io *io);
/* A write-back of cached pages (fi->writepage): apply data at off except
 * the pieces of rows that hold a version a scatter replaced.  0 or -errno. */
int pc_writepage(struct embfs *fs, uint32_t id, uint32_t rs, uint64_t off, size_t len, const char *data);
enum { PC_CAPTURE = 1, PC_NOCAPTURE = 2 };
struct pc_scatter {
	int mode;
	uint32_t id, n;
	uint64_t *rows;
};
/* Around a scatter's row changes (ids[0..n) of table id): begin records
 * what the rows hold if the kernel may cache the table (0, -EAGAIN past the
 * memory bound, -errno; nothing changed on error); end is called once the
 * rows are written, before the invalidation is queued. */
int pc_scatter_begin(struct embfs *fs, struct pc_scatter *sc, uint32_t id, uint32_t rs, const uint64_t *ids,
		     uint32_t n);
void pc_scatter_end(struct embfs *fs, struct pc_scatter *sc);
/* Around fuse_lowlevel_notify_inval_inode of table id (ret: its result). */
uint64_t pc_inval_begin(struct embfs *fs);
void pc_inval_end(struct embfs *fs, uint32_t id, uint64_t start, int ret);
/* Table slot id holds a new table. */
void pc_table_reset(struct embfs *fs, uint32_t id);
void pc_stats(struct embfs *fs, FILE *f);

/* ctl.c: .embfs/batch, the current batch id as text */
void ctl_batch_read(fuse_req_t req, size_t size, off_t off);
void ctl_batch_write(fuse_req_t req, const char *data, size_t size, off_t off);

/* stats.c: render .embfs/stats into a malloc'd buffer. */
char *embfs_stats_render(struct embfs *fs, size_t *len);

/* batch.c: .embfs/rows (README "Batched rows"): binary requests, many rows
 * of one table per round trip (the batch id is ctl.c's .embfs/batch).
 * batch_init at INIT (starts the prefetch and page-cache notifier threads),
 * batch_destroy at DESTROY; the others reply to the request. */
int batch_init(struct embfs *fs);
void batch_destroy(struct embfs *fs);
void batch_open(fuse_req_t req, struct fuse_file_info *fi);
void batch_read(fuse_req_t req, size_t size, off_t off, struct fuse_file_info *fi);
void batch_write(fuse_req_t req, const char *data, size_t size, off_t off, struct fuse_file_info *fi);
void batch_release(fuse_req_t req, struct fuse_file_info *fi);
void batch_stats(struct embfs *fs, FILE *f);

#endif
