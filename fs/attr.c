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

int fs_view(struct embfs *fs, uint64_t ino, struct store_view *v, struct store_attr *a)
{
	struct fs_ino k = fs_ino(ino);
	int ret;
	if (k.kind == FS_TABLE)
		ret = store_view_live(fs->st, k.id, v);
	else if (k.kind == FS_SNAPTABLE)
		ret = store_view_snap(fs->st, k.idx, k.id, v);
	else
		return -ENOENT;
	return ret || !a ? ret : store_view_getattr(fs->st, v, a);
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
	uint64_t rows = v->snap ? a->nrows : rows_count(fs, v->id, a->nrows);
	st->st_blocks = (blkcnt_t)((rows * a->row_size + 511) / 512);
	ns_to_ts(a->atime_ns, &st->st_atim);
	ns_to_ts(a->mtime_ns, &st->st_mtim);
	ns_to_ts(a->ctime_ns, &st->st_ctim);
}

/* Times of a directory without a catalog entry (and of the control files). */
static void dir_times(struct embfs *fs, enum store_dir which, struct stat *st)
{
	struct store_dir_times t;
	if (store_dir_times(fs->st, which, &t))
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
		ret = store_snap_get(fs->st, k.idx, &sn);
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

int fs_dir_begin(fuse_req_t req, struct fs_dirbuf *b, size_t size, off_t off)
{
	*b = (struct fs_dirbuf){ .req = req, .p = malloc(size), .cap = size, .off = off };
	if (!b->p)
		fuse_reply_err(req, ENOMEM);
	return b->p != NULL;
}

int fs_dir_add(struct fs_dirbuf *b, const char *name, uint64_t ino, mode_t mode, off_t next)
{
	if (b->full)
		return 0;
	if (next <= b->off)
		return 1; /* listed by an earlier readdir */
	struct stat st;
	memset(&st, 0, sizeof(st));
	st.st_ino = ino;
	st.st_mode = mode;
	size_t need = fuse_add_direntry(b->req, NULL, 0, name, NULL, 0);
	if (b->size + need > b->cap) {
		b->full = 1;
		return 0;
	}
	fuse_add_direntry(b->req, b->p + b->size, b->cap - b->size, name, &st, next);
	b->size += need;
	return 1;
}

void fs_dir_add_list(struct fs_dirbuf *b, const struct fs_dirent *list, size_t n)
{
	for (size_t i = 0; i < n; i++)
		fs_dir_add(b, list[i].name, list[i].ino, list[i].mode, (off_t)i + 1);
}

void fs_dir_reply(struct fs_dirbuf *b)
{
	fuse_reply_buf(b->req, b->p, b->size);
	free(b->p);
	b->p = NULL;
}
