/*
 * The .snapshots tree.  mkdir .snapshots/NAME takes a snapshot (the store
 * copies the catalog and advances the batch id; no row is copied and nothing
 * is written back: the cache keeps the snapshot's dirty rows and writes them
 * back as versions of their own batch).  rmdir drops it.  Snapshot tables
 * are read-only files (EROFS for every change).
 *
 * Durability: with a row cache, a snapshot is durable (survives a crash)
 * once every row written before it is in the pool: after fsync of its
 * directory, of .snapshots or of the mount root, at unmount, or when the
 * flusher has written back every older row (at most dirty_age_ms).  A
 * snapshot not durable at a crash is dropped at the next mount: complete or
 * absent.  Without a cache every write is committed before it returns, so a
 * snapshot is durable when mkdir returns.  The first open of a table in a
 * snapshot that is not durable yet writes the cache back first.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fs.h"

#define TIMEOUT 1.0

int snapfs_owns(fuse_ino_t ino)
{
	return ino == INO_SNAPS || (ino >= INO_SNAP0 && ino < INO_SNAP0 + EMB_MAX_SNAPS) ||
	       ino >= INO_SNAPT0;
}

static int dir_idx(fuse_ino_t ino, uint32_t *idx)
{
	if (ino < INO_SNAP0 || ino >= INO_SNAP0 + EMB_MAX_SNAPS)
		return 0;
	*idx = (uint32_t)(ino - INO_SNAP0);
	return 1;
}

static int tab_ino(fuse_ino_t ino, uint32_t *idx, uint32_t *id)
{
	if (ino < INO_SNAPT0)
		return 0;
	uint64_t x = ino - INO_SNAPT0;
	*idx = (uint32_t)(x >> 16);
	*id = (uint32_t)(x & 0xffff);
	return *idx < EMB_MAX_SNAPS;
}

/* Table id of snapshot idx: its view and attributes. */
static int snap_view(struct embfs *fs, uint32_t idx, uint32_t id, struct store_view *v, struct store_attr *a)
{
	int ret = store_view_snap(fs->st, idx, id, v);
	return ret ? ret : store_view_getattr(fs->st, v, a);
}

static void dir_stat(fuse_ino_t ino, const struct store_snap *sn, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_mode = S_IFDIR | 0555;
	st->st_nlink = 2;
	if (sn) {
		st->st_atim.tv_sec = st->st_mtim.tv_sec = st->st_ctim.tv_sec = (time_t)(sn->created_ns / 1000000000ull);
		st->st_atim.tv_nsec = st->st_mtim.tv_nsec = st->st_ctim.tv_nsec = (long)(sn->created_ns % 1000000000ull);
	}
}

int snapfs_stat(struct embfs *fs, fuse_ino_t ino, struct stat *st)
{
	uint32_t idx, id;
	struct store_snap sn;
	struct store_attr a;
	if (ino == INO_SNAPS) {
		dir_stat(ino, NULL, st);
		fs_dir_times(fs, STORE_DIR_SNAPS, st);
		return 0;
	}
	if (dir_idx(ino, &idx)) {
		int ret = store_snap_get(fs->st, idx, &sn);
		if (!ret)
			dir_stat(ino, &sn, st);
		return ret;
	}
	if (!tab_ino(ino, &idx, &id))
		return -ENOENT;
	struct store_view v;
	int ret = snap_view(fs, idx, id, &v, &a);
	if (ret)
		return ret;
	fs_table_stat(fs, &a, st, 1);
	st->st_ino = ino;
	st->st_mode &= ~0222u; /* read-only */
	return 0;
}

static void reply_entry(fuse_req_t req, fuse_ino_t ino, uint64_t gen)
{
	struct fuse_entry_param e;
	memset(&e, 0, sizeof(e));
	e.ino = ino;
	e.generation = gen;
	e.attr_timeout = e.entry_timeout = TIMEOUT;
	int ret = snapfs_stat(fuse_req_userdata(req), ino, &e.attr);
	if (ret)
		fuse_reply_err(req, -ret);
	else
		fuse_reply_entry(req, &e);
}

void snapfs_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct embfs *fs = fuse_req_userdata(req);
	struct store_snap sn;
	uint32_t idx, id;
	if (parent == INO_SNAPS) {
		int ret = store_snap_lookup(fs->st, name, &sn);
		if (ret)
			fuse_reply_err(req, -ret);
		else
			reply_entry(req, INO_SNAP0 + sn.idx, sn.gen);
		return;
	}
	if (!dir_idx(parent, &idx)) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	int ret = store_snap_get(fs->st, idx, &sn);
	if (!ret)
		ret = store_snap_table_lookup(fs->st, idx, name, &id);
	if (ret)
		fuse_reply_err(req, -ret);
	else
		reply_entry(req, INO_SNAPT0 + ((uint64_t)idx << 16) + id, sn.gen);
}

void snapfs_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off)
{
	struct embfs *fs = fuse_req_userdata(req);
	struct fs_dirbuf b = { malloc(size), 0, size };
	uint32_t idx;
	if (!b.p) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	if (ino != INO_SNAPS && !dir_idx(ino, &idx)) {
		free(b.p);
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	if (off < 1 && !fs_dir_add(req, &b, ".", ino, S_IFDIR, 1))
		goto done;
	if (off < 2 && !fs_dir_add(req, &b, "..", ino == INO_SNAPS ? INO_ROOT : INO_SNAPS, S_IFDIR, 2))
		goto done;
	uint32_t cur = off > 16 ? (uint32_t)(off - 16) : 0;
	if (ino == INO_SNAPS) {
		struct store_snap sn;
		while (store_snap_next(fs->st, &cur, &sn) == 1)
			if (!fs_dir_add(req, &b, sn.name, INO_SNAP0 + sn.idx, S_IFDIR, 16 + (off_t)cur))
				break;
	} else {
		struct store_attr a;
		while (store_snap_table_next(fs->st, idx, &cur, &a) == 1)
			if (!fs_dir_add(req, &b, a.name, INO_SNAPT0 + ((uint64_t)idx << 16) + a.id, S_IFREG,
					16 + (off_t)cur))
				break;
	}
done:
	fuse_reply_buf(req, b.p, b.size);
	free(b.p);
}

void snapfs_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct embfs *fs = fuse_req_userdata(req);
	struct store_snap sn;
	if (parent != INO_SNAPS) {
		fuse_reply_err(req, EROFS);
		return;
	}
	/* no write into the cache may read the old batch id and land after the
	 * cache learns of the snapshot: it would overwrite a row the snapshot
	 * needs without keeping a copy */
	pthread_rwlock_wrlock(&fs->snap_rw);
	int ret = store_snap_create(fs->st, name, fs->cache == NULL, &sn);
	if (!ret && fs->cache)
		cache_set_snapshot(fs->cache, sn.batch);
	pthread_rwlock_unlock(&fs->snap_rw);
	if (ret) {
		rows_pool_failed(fs, ret);
		fuse_reply_err(req, -ret);
		return;
	}
	store_dir_touch(fs->st, STORE_DIR_SNAPS);
	atomic_fetch_add_explicit(&fs->n_snaps, 1, memory_order_relaxed);
	reply_entry(req, INO_SNAP0 + sn.idx, sn.gen);
}

void snapfs_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct embfs *fs = fuse_req_userdata(req);
	if (parent != INO_SNAPS) {
		fuse_reply_err(req, EROFS);
		return;
	}
	/* the drop frees versions nothing else holds: their bytes must all be in
	 * the pool, so write the cache's preserved versions back first */
	int ret = fs->cache ? cache_flush(fs->cache, -1) : 0;
	if (!ret)
		ret = store_snap_drop(fs->st, name);
	if (!ret)
		store_dir_touch(fs->st, STORE_DIR_SNAPS);
	fuse_reply_err(req, -ret);
}

/* Make snapshot idx durable now: write every cached row back. */
int snapfs_ensure_durable(struct embfs *fs, uint32_t idx)
{
	struct store_snap sn;
	int ret = store_snap_get(fs->st, idx, &sn);
	if (ret || sn.durable)
		return ret;
	ret = rows_sync(fs, -1);
	if (!ret)
		ret = store_snap_set_durable(fs->st, idx, sn.gen);
	return ret;
}

void snapfs_fsyncdir(fuse_req_t req, fuse_ino_t ino)
{
	struct embfs *fs = fuse_req_userdata(req);
	uint32_t idx;
	int ret = rows_sync(fs, -1);
	if (!ret && dir_idx(ino, &idx))
		ret = snapfs_ensure_durable(fs, idx);
	if (!ret && ino == INO_SNAPS) {
		uint32_t cur = 0;
		struct store_snap sn;
		while (!ret && store_snap_next(fs->st, &cur, &sn) == 1)
			ret = store_snap_set_durable(fs->st, sn.idx, sn.gen);
	}
	fuse_reply_err(req, -ret);
}

void snapfs_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct embfs *fs = fuse_req_userdata(req);
	uint32_t idx, id;
	if (!tab_ino(ino, &idx, &id)) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
		fuse_reply_err(req, EROFS);
		return;
	}
	int ret = snapfs_ensure_durable(fs, idx);
	if (ret) {
		fuse_reply_err(req, -ret);
		return;
	}
	fi->keep_cache = 1; /* a snapshot never changes */
	fuse_reply_open(req, fi);
}

void snapfs_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off)
{
	struct embfs *fs = fuse_req_userdata(req);
	uint32_t idx, id;
	struct store_attr a;
	if (!tab_ino(ino, &idx, &id)) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	struct store_view v;
	int ret = snap_view(fs, idx, id, &v, &a);
	if (ret) {
		fuse_reply_err(req, -ret);
		return;
	}
	uint64_t o = (uint64_t)off;
	if (o >= a.size || size == 0) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	size_t len = a.size - o < size ? (size_t)(a.size - o) : size;
	/* every row the range touches, in one store call (spilled rows: one
	 * device submission) */
	uint32_t rs = a.row_size;
	uint64_t r0 = o / rs, nr = (o + len - 1) / rs - r0 + 1;
	char *rows = malloc(nr * rs);
	uint64_t *ids = malloc(nr * sizeof(*ids));
	if (!rows || !ids) {
		free(rows);
		free(ids);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	for (uint64_t i = 0; i < nr; i++)
		ids[i] = r0 + i;
	ret = store_rows_read(fs->st, &v, ids, nr, rows, NULL, NULL);
	if (ret < 0)
		fuse_reply_err(req, -ret);
	else
		fuse_reply_buf(req, rows + (o - r0 * rs), len);
	free(rows);
	free(ids);
}

void snapfs_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence)
{
	struct embfs *fs = fuse_req_userdata(req);
	uint32_t idx, id;
	struct store_attr a;
	uint64_t r;
	if (!tab_ino(ino, &idx, &id) || (whence != SEEK_DATA && whence != SEEK_HOLE)) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	struct store_view v;
	int ret = snap_view(fs, idx, id, &v, &a);
	if (ret) {
		fuse_reply_err(req, -ret);
		return;
	}
	uint64_t o = (uint64_t)off, rs = a.row_size;
	if (off < 0 || o >= a.size) {
		fuse_reply_err(req, ENXIO);
		return;
	}
	if (whence == SEEK_DATA) {
		ret = store_row_next(fs->st, &v, o / rs, &r);
		uint64_t pos = ret == 1 ? (r * rs > o ? r * rs : o) : UINT64_MAX;
		if (ret < 0)
			fuse_reply_err(req, -ret);
		else if (pos >= a.size)
			fuse_reply_err(req, ENXIO);
		else
			fuse_reply_lseek(req, (off_t)pos);
		return;
	}
	ret = store_row_hole(fs->st, &v, o / rs, &r);
	if (ret < 0) {
		fuse_reply_err(req, -ret);
		return;
	}
	uint64_t pos = r * rs > o ? r * rs : o;
	fuse_reply_lseek(req, (off_t)(pos > a.size ? a.size : pos));
}

/* Geometry xattrs of a snapshot table (NULL attr: not a snapshot table). */
int snapfs_table_attr(struct embfs *fs, fuse_ino_t ino, struct store_attr *a)
{
	uint32_t idx, id;
	struct store_view v;
	if (!tab_ino(ino, &idx, &id))
		return -ENODATA;
	return snap_view(fs, idx, id, &v, a);
}

int snapfs_is_table(fuse_ino_t ino)
{
	uint32_t idx, id;
	return tab_ino(ino, &idx, &id);
}
