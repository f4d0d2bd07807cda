/*
 * Attributes of every inode of the tree (stat, and the generation a lookup
 * entry carries), the one place that turns a table file's inode into a
 * store view, and directory listings.  Shared by root.c, table.c, snap.c
 * and ctl.c, below all of them.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fs.h"

static void ns_to_ts(uint64_t ns, struct timespec *ts)
{
	ts->tv_sec = (time_t)(ns / 1000000000ull);
	ts->tv_nsec = (long)(ns % 1000000000ull);
}

/* A table file: a snapshot's counts its stored rows only, a live one's also
 * rows written but not yet in the store.  A snapshot's shows the mode its
 * table had (as files on a read-only mount do: changes get EROFS), so that
 * cp -a of it keeps the mode. */
static void table_stat(struct embfs *fs, const struct store_view *v, const struct store_attr *a, struct stat *st)
{
	st->st_mode = S_IFREG | (a->mode & 07777);
	st->st_nlink = a->orphan ? 0 : 1;
	st->st_uid = a->uid;
	st->st_gid = a->gid;
	st->st_size = (off_t)a->size;
	st->st_blksize = 65536;
	uint64_t rows = v->snap ? a->nrows : front_count(&fs->fr, v->id, a->nrows);
	st->st_blocks = (blkcnt_t)((rows * a->row_size + 511) / 512);
	ns_to_ts(a->atime_ns, &st->st_atim);
	ns_to_ts(a->mtime_ns, &st->st_mtim);
	ns_to_ts(a->ctime_ns, &st->st_ctim);
}

/* Times of a directory without a catalog entry (and of the control files). */
static void dir_times(struct embfs *fs, enum store_dir which, struct stat *st)
{
	struct store_dir_times t;
	if (front_dir_times(&fs->fr, which, &t))
		return;
	ns_to_ts(t.atime_ns, &st->st_atim);
	ns_to_ts(t.mtime_ns, &st->st_mtim);
	ns_to_ts(t.ctime_ns, &st->st_ctim);
}

/* The inodes that are neither tables nor snapshots. */
static const struct {
	mode_t mode;
	nlink_t nlink;
	enum store_dir times;
} fixed[] = {
	[FS_ROOT] = { S_IFDIR, 3, STORE_DIR_ROOT }, /* mode and owner: perm.c */
	[FS_CTL] = { S_IFDIR | 0555, 2, STORE_DIR_POOL },
	[FS_STATS] = { S_IFREG | 0444, 1, STORE_DIR_POOL },
	[FS_METRICS] = { S_IFREG | 0444, 1, STORE_DIR_POOL },
	/* anyone may use it: batch.c checks access to the target table */
	[FS_ROWS] = { S_IFREG | 0666, 1, STORE_DIR_POOL },
	/* the batch id, restores and deltas: writable by those who may take
	 * snapshots (mode and owner from perm.c) */
	[FS_BATCHID] = { S_IFREG, 1, STORE_DIR_POOL },
	[FS_RESTORE] = { S_IFREG, 1, STORE_DIR_POOL },
	[FS_DELTA] = { S_IFREG, 1, STORE_DIR_POOL },
	[FS_PID] = { S_IFREG | 0444, 1, STORE_DIR_POOL },
	[FS_SNAPS] = { S_IFDIR, 2, STORE_DIR_SNAPS },
};

/* The size of .embfs/stats or .embfs/metrics: of a text rendered now (each
 * open renders its own, read with direct I/O up to its end). */
static size_t text_size(struct embfs *fs, int metrics)
{
	size_t len = 0;
	free(embfs_stats_render(fs, metrics, &len));
	return len;
}

int fs_stat(struct embfs *fs, fuse_ino_t ino, struct stat *st, uint64_t *gen)
{
	struct fs_ino k = fs_ino(ino);
	struct store_snap sn;
	struct store_view v;
	struct store_attr a;
	int ret = 0;
	uint64_t g = 0;
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	switch (k.kind) {
	case FS_NONE:
		return -ENOENT;
	case FS_SNAPDIR:
		ret = front_snap_get(&fs->fr, k.idx, &sn);
		if (ret)
			return ret;
		st->st_mode = S_IFDIR;
		st->st_nlink = 2;
		ns_to_ts(sn.created_ns, &st->st_atim);
		st->st_mtim = st->st_ctim = st->st_atim;
		g = sn.gen;
		break;
	case FS_DDIR:
	case FS_DPAIR:
	case FS_DDEL:
	case FS_DCHGD:
	case FS_DVIEW:
	case FS_DLIST:
	case FS_DCHG:
		ret = dview_stat(fs, k, st, &g);
		if (ret)
			return ret;
		break;
	case FS_TABLE:
	case FS_SNAPTABLE:
		ret = fs_view(fs, ino, &v, &a);
		if (ret)
			return ret;
		table_stat(fs, &v, &a, st);
		g = v.snap ? v.snap_gen : a.gen;
		break;
	default:
		st->st_mode = fixed[k.kind].mode;
		st->st_nlink = fixed[k.kind].nlink;
		dir_times(fs, fixed[k.kind].times, st);
		if (k.kind == FS_STATS || k.kind == FS_METRICS)
			st->st_size = (off_t)text_size(fs, k.kind == FS_METRICS);
		break;
	}
	struct fs_perm p;
	if (perm_get(fs, k.kind, &p)) {
		st->st_mode |= p.mode;
		st->st_uid = p.uid;
		st->st_gid = p.gid;
	}
	if (gen)
		*gen = g;
	return 0;
}

/* chmod and chown of the root and .snapshots, kept in the pool (perm.c
 * shows them); their times and sizes are not set (EPERM). */
void fs_dir_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set)
{
	struct embfs *fs = fs_of(req);
	enum fs_kind kind = fs_ino(ino).kind;
	enum store_dir which = kind == FS_ROOT ? STORE_DIR_ROOT : STORE_DIR_SNAPS;
	const int ok = FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID | FUSE_SET_ATTR_CTIME;
	struct fs_perm p;
	struct stat st;
	int ret = 0;
	if ((kind != FS_ROOT && kind != FS_SNAPS) || (to_set & ~ok))
		ret = -EPERM; /* times and sizes of these directories are not set */
	if (!ret && (to_set & (FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID))) {
		perm_get(fs, kind, &p);
		struct store_dir_perm d = { p.uid, p.gid, p.mode };
		if (to_set & FUSE_SET_ATTR_MODE)
			d.mode = attr->st_mode & 07777;
		if (to_set & FUSE_SET_ATTR_UID)
			d.uid = attr->st_uid;
		if (to_set & FUSE_SET_ATTR_GID)
			d.gid = attr->st_gid;
		ret = front_dir_perm_set(&fs->fr, which, &d);
		if (ret)
			front_pool_failed(&fs->fr, ret);
	}
	if (!ret)
		ret = fs_stat(fs, ino, &st, NULL);
	if (ret) {
		fuse_reply_err(req, -ret);
		return;
	}
	fuse_reply_attr(req, &st, FS_TIMEOUT);
	/* the control files that follow .snapshots' must not keep the old
	 * owner and mode in the kernel for an attribute timeout (a snapshot's
	 * directory may: it only shows the owner); after the reply, and no
	 * lock of theirs is held here */
	static const fuse_ino_t follow[] = { INO_BATCHID, INO_RESTORE, INO_DELTA };
	for (size_t i = 0; kind == FS_SNAPS && i < sizeof(follow) / sizeof(follow[0]); i++)
		fuse_lowlevel_notify_inval_inode(fs->se, follow[i], -1, 0);
}

void fs_reply_entry(fuse_req_t req, fuse_ino_t ino)
{
	struct fuse_entry_param e;
	int ret = fs_entry(fs_of(req), ino, &e);
	if (ret)
		fuse_reply_err(req, -ret);
	else
		fuse_reply_entry(req, &e);
}

int fs_entry(struct embfs *fs, fuse_ino_t ino, struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	e->ino = ino;
	e->attr_timeout = fs_attr_timeout(ino);
	e->entry_timeout = FS_TIMEOUT;
	return fs_stat(fs, ino, &e->attr, &e->generation);
}
