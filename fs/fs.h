/* Private to fs/: the daemon's state, reached through the request userdata. */
#ifndef EMBFS_FS_H
#define EMBFS_FS_H

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>
#include <stdatomic.h>

#include "embfs/store.h"

#define INO_ROOT FUSE_ROOT_ID
#define INO_CTL 2        /* .embfs */
#define INO_STATS 3      /* .embfs/stats */
#define INO_TABLE0 16    /* table id i is inode INO_TABLE0 + i */

struct embfs_conf {
	char *pool;
	char *pidfile;
	char *dtype;
	unsigned dim;
	unsigned threads;
	int show_help;
	int show_version;
};

struct embfs {
	struct store *st;
	struct fuse_session *se;
	struct embfs_conf conf;
	uint32_t def_dim, def_dtype;
	_Atomic uint64_t *nlookup;  /* kernel references per table id */
	_Atomic uint64_t n_read, n_write, n_read_bytes, n_write_bytes, n_fsync;
};

extern const struct fuse_lowlevel_ops embfs_ops;

/* stats.c: render .embfs/stats into a malloc'd buffer. */
char *embfs_stats_render(struct embfs *fs, size_t *len);

#endif
