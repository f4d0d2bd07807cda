/*
 * FUSE low-level operations: the only code that replies to the kernel.
 * Byte ranges are cut into rows here; everything below returns -errno, which
 * is passed to the kernel unchanged.
 *
 * Caching: table attributes and the kernel page cache are kept (keep_cache):
 * every change to a table's bytes arrives through the kernel, so its cache is
 * coherent.  The kernel's writeback cache is not used (DESIGN.md §5).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>
#include <linux/falloc.h>

#include "fs.h"

#define TIMEOUT 1.0
#define XA_DIM "user.embfs.dim"
#define XA_DTYPE "user.embfs.dtype"
#define XA_ROWSZ "user.embfs.row_size"

static inline struct embfs *FS(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static int ino_table(fuse_ino_t ino, uint32_t *id)
{
	if (ino < INO_TABLE0 || ino - INO_TABLE0 >= (fuse_ino_t)EMB_CAT_PER_CHUNK * EMB_CAT_CHUNKS)
		return 0;
	*id = (uint32_t)(ino - INO_TABLE0);
	return 1;
}

static void ns_to_ts(uint64_t ns, struct timespec *ts)
{
	ts->tv_sec = (time_t)(ns / 1000000000ull);
	ts->tv_nsec = (long)(ns % 1000000000ull);
}

/* snap: the attributes are a snapshot's (no cached rows to add). */
void fs_table_stat(struct embfs *fs, const struct store_attr *a, struct stat *st, int snap)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = INO_TABLE0 + a->id;
	st->st_mode = S_IFREG | (a->mode & 07777);
	st->st_nlink = a->orphan ? 0 : 1;
	st->st_uid = a->uid;
	st->st_gid = a->gid;
	st->st_size = (off_t)a->size;
	st->st_blksize = 65536;
	uint64_t rows = snap ? a->nrows : rows_count(fs, a->id, a->nrows);
	st->st_blocks = (blkcnt_t)((rows * a->row_size + 511) / 512);
	ns_to_ts(a->atime_ns, &st->st_atim);
	ns_to_ts(a->mtime_ns, &st->st_mtim);
	ns_to_ts(a->ctime_ns, &st->st_ctim);
}

/* Times of a directory without a catalog entry (and of the control files). */
void fs_dir_times(struct embfs *fs, enum store_dir which, struct stat *st)
{
	struct store_dir_times t;
	if (store_dir_times(fs->st, which, &t))
		return;
	ns_to_ts(t.atime_ns, &st->st_atim);
	ns_to_ts(t.mtime_ns, &st->st_mtim);
	ns_to_ts(t.ctime_ns, &st->st_ctim);
}

static int do_stat(struct embfs *fs, fuse_ino_t ino, struct stat *st)
{
	uint32_t id;
	if (snapfs_owns(ino))
		return snapfs_stat(fs, ino, st);
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	if (ino < INO_TABLE0)
		fs_dir_times(fs, ino == INO_ROOT ? STORE_DIR_ROOT : STORE_DIR_POOL, st);
	switch (ino) {
	case INO_ROOT:
		st->st_mode = S_IFDIR | 0755;
		st->st_nlink = 3;
		return 0;
	case INO_CTL:
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
		return 0;
	case INO_STATS:
		st->st_mode = S_IFREG | 0444;
		st->st_nlink = 1;
		return 0;
	case INO_ROWS: /* anyone may use it: batch.c checks access to the target table */
		st->st_mode = S_IFREG | 0666;
		st->st_nlink = 1;
		return 0;
	case INO_BATCHID: /* the batch id: set by the trainer (root or the mount's owner) */
		st->st_mode = S_IFREG | 0644;
		st->st_nlink = 1;
		return 0;
	}
	if (!ino_table(ino, &id))
		return -ENOENT;
	struct store_attr a;
	int ret = store_table_getattr(fs->st, id, &a);
	if (ret)
		return ret;
	fs_table_stat(fs, &a, st, 0);
	return 0;
}

/* Every op that takes a name answers ENAMETOOLONG first for one over
 * EMB_NAME_MAX bytes (the kernel lets up to 1024 through). */
static int name_too_long(fuse_req_t req, const char *name)
{
	if (strnlen(name, EMB_NAME_MAX + 1) <= EMB_NAME_MAX)
		return 0;
	fuse_reply_err(req, ENAMETOOLONG);
	return 1;
}

static int reserved_name(const char *name)
{
	return !strcmp(name, ".embfs") || !strcmp(name, ".snapshots");
}

/* Reply to lookup/create with an entry, counting the kernel's reference. */
static void fill_entry(struct embfs *fs, const struct store_attr *a, struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	e->ino = INO_TABLE0 + a->id;
	e->generation = a->gen;
	e->attr_timeout = TIMEOUT;
	e->entry_timeout = TIMEOUT;
	fs_table_stat(fs, a, &e->attr, 0);
	atomic_fetch_add(&fs->nlookup[a->id], 1);
}

/* Truncate through the cache: written rows reach the store first, the
 * rows the store changes are dropped from the cache after. */
static int truncate_table(struct embfs *fs, uint32_t id, uint64_t size)
{
	struct store_attr a;
	int ret = store_table_getattr(fs->st, id, &a);
	if (!ret)
		ret = rows_before_change(fs, id);
	if (!ret)
		ret = store_table_truncate(fs->st, id, size);
	if (!ret)
		rows_after_change(fs, id, size / a.row_size, UINT64_MAX);
	return ret;
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	struct embfs *fs = userdata;
	int ret = pc_init(fs);
	if (!ret)
		ret = batch_init(fs);
	if (ret)
		fprintf(stderr, "embfs: .embfs/rows disabled: %s\n", strerror(-ret));
	/* 1 MiB WRITEs (libfuse then asks for max_pages = 256): a 4096-row
	 * batch of 256-byte rows moves in one or two requests each way */
	conn->max_write = 1u << 20;
	conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
	/* every change to a table's bytes comes through this kernel, so its page
	 * cache stays valid when mtime moves; changes the daemon makes itself
	 * are invalidated explicitly */
	conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
	if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
		conn->want |= FUSE_CAP_PARALLEL_DIROPS;
}

static void op_destroy(void *userdata)
{
	struct embfs *fs = userdata;
	batch_destroy(fs);
	pc_destroy(fs);
	int ret = rows_sync(fs, -1);
	if (ret)
		fprintf(stderr, "embfs: writing back cached rows at unmount: %s\n", strerror(-ret));
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct embfs *fs = FS(req);
	struct fuse_entry_param e;
	if (name_too_long(req, name))
		return;
	memset(&e, 0, sizeof(e));
	e.attr_timeout = e.entry_timeout = TIMEOUT;
	if (parent == INO_CTL) {
		if (!strcmp(name, "stats"))
			e.ino = INO_STATS;
		else if (!strcmp(name, "rows"))
			e.ino = INO_ROWS;
		else if (!strcmp(name, "batch"))
			e.ino = INO_BATCHID;
		else {
			fuse_reply_err(req, ENOENT);
			return;
		}
		do_stat(fs, e.ino, &e.attr);
		fuse_reply_entry(req, &e);
		return;
	}
	if (snapfs_owns(parent)) {
		snapfs_lookup(req, parent, name);
		return;
	}
	if (parent != INO_ROOT) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	if (reserved_name(name)) {
		e.ino = strcmp(name, ".snapshots") ? INO_CTL : INO_SNAPS;
		do_stat(fs, e.ino, &e.attr);
		fuse_reply_entry(req, &e);
		return;
	}
	uint32_t id;
	struct store_attr a;
	int ret = store_table_lookup(fs->st, name, &id);
	if (!ret)
		ret = store_table_getattr(fs->st, id, &a);
	if (ret) {
		fuse_reply_err(req, -ret);
		return;
	}
	fill_entry(fs, &a, &e);
	if (fuse_reply_entry(req, &e))
		atomic_fetch_sub(&fs->nlookup[id], 1);
}

static void forget_one(struct embfs *fs, fuse_ino_t ino, uint64_t n)
{
	uint32_t id;
	if (!ino_table(ino, &id))
		return;
	struct store_attr a;
	if (atomic_fetch_sub(&fs->nlookup[id], n) == n && store_table_getattr(fs->st, id, &a) == 0 &&
	    a.orphan) {
		/* rows written before a snapshot belong to it even when the table
		 * is gone from the live tree: write them back, do not drop them */
		if (store_table_snaps(fs->st, id) > 0)
			rows_before_change(fs, id);
		rows_after_change(fs, id, 0, UINT64_MAX);
		int ret = store_table_release(fs->st, id);
		if (ret)
			fprintf(stderr, "embfs: freeing unlinked table %u: %s\n", id, strerror(-ret));
	}
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	forget_one(FS(req), ino, nlookup);
	fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *f)
{
	for (size_t i = 0; i < count; i++)
		forget_one(FS(req), f[i].ino, f[i].nlookup);
	fuse_reply_none(req);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat st;
	(void)fi;
	int ret = do_stat(FS(req), ino, &st);
	if (ret)
		fuse_reply_err(req, -ret);
	else
		fuse_reply_attr(req, &st, TIMEOUT);
}

static uint64_t ts_ns(const struct timespec *ts)
{
	return (uint64_t)ts->tv_sec * 1000000000ull + (uint64_t)ts->tv_nsec;
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		       struct fuse_file_info *fi)
{
	struct embfs *fs = FS(req);
	uint32_t id;
	int ret = 0;
	(void)fi;
	if (snapfs_owns(ino)) {
		fuse_reply_err(req, EROFS);
		return;
	}
	if (!ino_table(ino, &id)) {
		fuse_reply_err(req, ino < INO_TABLE0 ? EPERM : ENOENT);
		return;
	}
	if (to_set & FUSE_SET_ATTR_SIZE) {
		if (attr->st_size < 0) {
			fuse_reply_err(req, EINVAL);
			return;
		}
		ret = truncate_table(fs, id, (uint64_t)attr->st_size);
	}
	struct store_attr a;
	unsigned mask = 0;
	memset(&a, 0, sizeof(a));
	if (to_set & FUSE_SET_ATTR_MODE) {
		a.mode = attr->st_mode & 07777;
		mask |= STORE_SET_MODE;
	}
	if (to_set & FUSE_SET_ATTR_UID) {
		a.uid = attr->st_uid;
		mask |= STORE_SET_UID;
	}
	if (to_set & FUSE_SET_ATTR_GID) {
		a.gid = attr->st_gid;
		mask |= STORE_SET_GID;
	}
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	if (to_set & FUSE_SET_ATTR_ATIME_NOW) {
		a.atime_ns = ts_ns(&now);
		mask |= STORE_SET_ATIME;
	} else if (to_set & FUSE_SET_ATTR_ATIME) {
		a.atime_ns = ts_ns(&attr->st_atim);
		mask |= STORE_SET_ATIME;
	}
	if (to_set & FUSE_SET_ATTR_MTIME_NOW) {
		a.mtime_ns = ts_ns(&now);
		mask |= STORE_SET_MTIME;
	} else if (to_set & FUSE_SET_ATTR_MTIME) {
		a.mtime_ns = ts_ns(&attr->st_mtim);
		mask |= STORE_SET_MTIME;
	}
	if (to_set & FUSE_SET_ATTR_CTIME) {
		a.ctime_ns = ts_ns(&attr->st_ctim);
		mask |= STORE_SET_CTIME;
	}
	if (!ret && mask)
		ret = store_table_setattr(fs->st, id, &a, mask);
	if (ret) {
		fuse_reply_err(req, -ret);
		return;
	}
	struct stat st;
	ret = do_stat(fs, ino, &st);
	if (ret)
		fuse_reply_err(req, -ret);
	else
		fuse_reply_attr(req, &st, TIMEOUT);
}

static void create_table(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
			 struct fuse_file_info *fi)
{
	struct embfs *fs = FS(req);
	if (name_too_long(req, name))
		return;
	if (snapfs_owns(parent)) {
		fuse_reply_err(req, EROFS);
		return;
	}
	if (parent != INO_ROOT) {
		fuse_reply_err(req, parent == INO_CTL ? EACCES : ENOTDIR);
		return;
	}
	if (reserved_name(name)) {
		fuse_reply_err(req, EEXIST);
		return;
	}
	if (!S_ISREG(mode)) {
		fuse_reply_err(req, EPERM);
		return;
	}
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	uint32_t id;
	struct store_attr a;
	int ret = store_table_create(fs->st, name, mode & 07777, ctx->uid, ctx->gid, fs->def_dim,
				     fs->def_dtype, &id);
	if (!ret)
		ret = store_table_getattr(fs->st, id, &a);
	if (ret) {
		fuse_reply_err(req, -ret);
		return;
	}
	pc_table_reset(fs, id);
	store_dir_touch(fs->st, STORE_DIR_ROOT);
	struct fuse_entry_param e;
	fill_entry(fs, &a, &e);
	int r;
	if (fi) {
		fi->keep_cache = 1;
		r = fuse_reply_create(req, &e, fi);
	} else {
		r = fuse_reply_entry(req, &e);
	}
	if (r)
		atomic_fetch_sub(&fs->nlookup[id], 1);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		      struct fuse_file_info *fi)
{
	create_table(req, parent, name, S_IFREG | (mode & 07777), fi);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	(void)rdev;
	create_table(req, parent, name, mode, NULL);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	(void)mode;
	if (name_too_long(req, name))
		return;
	if (snapfs_owns(parent))
		snapfs_mkdir(req, parent, name); /* .snapshots/NAME: take a snapshot */
	else
		fuse_reply_err(req, parent == INO_ROOT ? EPERM : ENOTDIR);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct embfs *fs = FS(req);
	if (name_too_long(req, name))
		return;
	if (snapfs_owns(parent)) {
		fuse_reply_err(req, parent == INO_SNAPS ? EISDIR : EROFS);
		return;
	}
	if (parent != INO_ROOT) {
		fuse_reply_err(req, parent == INO_CTL ? EPERM : ENOTDIR);
		return;
	}
	if (reserved_name(name)) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	int ret = store_table_unlink(fs->st, name);
	if (!ret)
		store_dir_touch(fs->st, STORE_DIR_ROOT);
	fuse_reply_err(req, -ret);
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	if (name_too_long(req, name))
		return;
	if (snapfs_owns(parent))
		snapfs_rmdir(req, parent, name); /* .snapshots/NAME: drop it */
	else if (parent == INO_ROOT && reserved_name(name))
		fuse_reply_err(req, EPERM);
	else
		fuse_reply_err(req, parent == INO_ROOT ? ENOTDIR : ENOENT);
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		      const char *newname, unsigned int flags)
{
	struct embfs *fs = FS(req);
	if (name_too_long(req, name) || name_too_long(req, newname))
		return;
	if (snapfs_owns(parent) || snapfs_owns(newparent)) {
		fuse_reply_err(req, EROFS);
		return;
	}
	if (parent != INO_ROOT || newparent != INO_ROOT) {
		fuse_reply_err(req, EXDEV);
		return;
	}
	if (reserved_name(name) || reserved_name(newname)) {
		fuse_reply_err(req, EPERM);
		return;
	}
	if (flags & RENAME_EXCHANGE) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	uint32_t id;
	if ((flags & RENAME_NOREPLACE) && store_table_lookup(fs->st, newname, &id) == 0) {
		fuse_reply_err(req, EEXIST);
		return;
	}
	int ret = store_table_rename(fs->st, name, newname);
	if (!ret)
		store_dir_touch(fs->st, STORE_DIR_ROOT);
	fuse_reply_err(req, -ret);
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	(void)ino;
	(void)newparent;
	if (!name_too_long(req, newname))
		fuse_reply_err(req, EPERM);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	(void)link;
	(void)parent;
	if (!name_too_long(req, name))
		fuse_reply_err(req, EPERM);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct embfs *fs = FS(req);
	uint32_t id;
	if (snapfs_owns(ino)) {
		snapfs_open(req, ino, fi);
		return;
	}
	if (ino == INO_ROWS) {
		batch_open(req, fi);
		return;
	}
	if (ino == INO_BATCHID) {
		fi->direct_io = 1;
		fuse_reply_open(req, fi);
		return;
	}
	if (ino == INO_STATS) {
		if ((fi->flags & O_ACCMODE) != O_RDONLY) {
			fuse_reply_err(req, EACCES);
			return;
		}
		size_t len;
		char *buf = embfs_stats_render(fs, &len);
		if (!buf) {
			fuse_reply_err(req, ENOMEM);
			return;
		}
		struct { size_t len; char data[]; } *snap = malloc(sizeof(*snap) + len);
		if (!snap) {
			free(buf);
			fuse_reply_err(req, ENOMEM);
			return;
		}
		snap->len = len;
		memcpy(snap->data, buf, len);
		free(buf);
		fi->fh = (uintptr_t)snap;
		fi->direct_io = 1;
		fuse_reply_open(req, fi);
		return;
	}
	if (!ino_table(ino, &id)) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	/* libfuse negotiates atomic_o_trunc: the kernel sends no SETATTR for
	 * open(O_TRUNC) and relies on us to truncate here */
	if (fi->flags & O_TRUNC) {
		int ret = truncate_table(fs, id, 0);
		if (ret) {
			fuse_reply_err(req, -ret);
			return;
		}
	}
	fi->keep_cache = 1;
	fuse_reply_open(req, fi);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (ino == INO_ROWS) {
		batch_release(req, fi);
		return;
	}
	if (ino == INO_STATS)
		free((void *)(uintptr_t)fi->fh);
	fuse_reply_err(req, 0);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	struct embfs *fs = FS(req);
	uint32_t id;
	if (snapfs_owns(ino)) {
		snapfs_read(req, ino, size, off);
		return;
	}
	if (ino == INO_ROWS) {
		batch_read(req, size, off, fi);
		return;
	}
	if (ino == INO_BATCHID) {
		ctl_batch_read(req, size, off);
		return;
	}
	if (ino == INO_STATS) {
		struct { size_t len; char data[]; } *snap = (void *)(uintptr_t)fi->fh;
		if ((size_t)off >= snap->len)
			fuse_reply_buf(req, NULL, 0);
		else
			fuse_reply_buf(req, snap->data + off,
				       size < snap->len - (size_t)off ? size : snap->len - (size_t)off);
		return;
	}
	if (!ino_table(ino, &id)) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	struct store_attr a;
	int ret = store_table_getattr(fs->st, id, &a);
	if (ret) {
		fuse_reply_err(req, -ret);
		return;
	}
	/* the kernel may cache what this READ returns (zeros past EOF too) */
	struct pc_io io;
	pc_io_begin(fs, id, &io);
	uint64_t o = (uint64_t)off;
	if (o >= a.size || size == 0) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	size_t len = a.size - o < size ? (size_t)(a.size - o) : size;
	char *buf = malloc(len);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	ret = rows_read(fs, id, a.row_size, o, len, buf);
	if (!ret)
		pc_io_done(fs, id, a.row_size, o, len, buf, &io);
	atomic_fetch_add_explicit(&fs->n_read, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&fs->n_read_bytes, len, memory_order_relaxed);
	if (ret)
		fuse_reply_err(req, -ret);
	else
		fuse_reply_buf(req, buf, len);
	free(buf);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *data, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	struct embfs *fs = FS(req);
	uint32_t id;
	if (snapfs_owns(ino)) {
		fuse_reply_err(req, EROFS);
		return;
	}
	if (ino == INO_ROWS) {
		batch_write(req, data, size, off, fi);
		return;
	}
	if (ino == INO_BATCHID) {
		ctl_batch_write(req, data, size, off);
		return;
	}
	if (!ino_table(ino, &id)) {
		fuse_reply_err(req, EBADF);
		return;
	}
	struct store_attr a;
	int ret = store_table_getattr(fs->st, id, &a);
	if (ret) {
		fuse_reply_err(req, -ret);
		return;
	}
	uint64_t o = (uint64_t)off;
	if (off < 0 || o + size < o || o + size > (uint64_t)LLONG_MAX) {
		fuse_reply_err(req, EFBIG);
		return;
	}
	if (fi->writepage) {
		/* pages a mapping dirtied, written back by the kernel */
		ret = pc_writepage(fs, id, a.row_size, o, size, data);
	} else {
		struct pc_io io;
		pc_io_begin(fs, id, &io);
		ret = rows_write(fs, id, a.row_size, o, size, data);
		if (!ret)
			pc_io_done(fs, id, a.row_size, o, size, data, &io);
	}
	atomic_fetch_add_explicit(&fs->n_write, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&fs->n_write_bytes, size, memory_order_relaxed);
	if (ret)
		rows_pool_failed(fs, ret);
	if (ret)
		fuse_reply_err(req, -ret);
	else
		fuse_reply_write(req, size);
}

static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	(void)fi;
	fuse_reply_err(req, 0);
}

static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	struct embfs *fs = FS(req);
	(void)ino;
	(void)datasync;
	(void)fi;
	uint32_t id;
	atomic_fetch_add_explicit(&fs->n_fsync, 1, memory_order_relaxed);
	fuse_reply_err(req, -rows_sync(fs, ino_table(ino, &id) ? (int64_t)id : -1));
}

static void op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	(void)datasync;
	(void)fi;
	if (snapfs_owns(ino)) {
		snapfs_fsyncdir(req, ino);
		return;
	}
	/* fsync of a directory (the mount's root) writes back every table:
	 * the kernel delivers syncfs(2) to virtiofs only, so this is the
	 * whole-pool sync point */
	fuse_reply_err(req, -rows_sync(FS(req), -1));
}

int fs_dir_add(fuse_req_t req, struct fs_dirbuf *b, const char *name, fuse_ino_t ino, mode_t mode,
	       off_t next)
{
	struct stat st;
	memset(&st, 0, sizeof(st));
	st.st_ino = ino;
	st.st_mode = mode;
	size_t need = fuse_add_direntry(req, NULL, 0, name, NULL, 0);
	if (b->size + need > b->cap)
		return 0;
	fuse_add_direntry(req, b->p + b->size, b->cap - b->size, name, &st, next);
	b->size += need;
	return 1;
}

/* Directory offsets: 1 ".", 2 "..", 3 ".embfs", then 16 + table cursor. */
static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	struct embfs *fs = FS(req);
	(void)fi;
	if (snapfs_owns(ino)) {
		snapfs_readdir(req, ino, size, off);
		return;
	}
	struct fs_dirbuf b = { malloc(size), 0, size };
	if (!b.p) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	if (ino == INO_CTL) {
		if (off < 1 && !fs_dir_add(req, &b, ".", INO_CTL, S_IFDIR, 1))
			goto done;
		if (off < 2 && !fs_dir_add(req, &b, "..", INO_ROOT, S_IFDIR, 2))
			goto done;
		if (off < 3 && !fs_dir_add(req, &b, "stats", INO_STATS, S_IFREG, 3))
			goto done;
		if (off < 4 && !fs_dir_add(req, &b, "batch", INO_BATCHID, S_IFREG, 4))
			goto done;
		if (off < 5)
			fs_dir_add(req, &b, "rows", INO_ROWS, S_IFREG, 5);
		goto done;
	}
	if (ino != INO_ROOT) {
		free(b.p);
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	if (off < 1 && !fs_dir_add(req, &b, ".", INO_ROOT, S_IFDIR, 1))
		goto done;
	if (off < 2 && !fs_dir_add(req, &b, "..", INO_ROOT, S_IFDIR, 2))
		goto done;
	if (off < 3 && !fs_dir_add(req, &b, ".embfs", INO_CTL, S_IFDIR, 3))
		goto done;
	if (off < 4 && !fs_dir_add(req, &b, ".snapshots", INO_SNAPS, S_IFDIR, 4))
		goto done;
	uint32_t cur = off > 16 ? (uint32_t)(off - 16) : 0;
	struct store_attr a;
	while (store_table_next(fs->st, &cur, &a) == 1)
		if (!fs_dir_add(req, &b, a.name, INO_TABLE0 + a.id, S_IFREG, 16 + (off_t)cur))
			break;
done:
	fuse_reply_buf(req, b.p, b.size);
	free(b.p);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct store_stats s;
	struct statvfs v;
	(void)ino;
	struct embfs *fs = FS(req);
	store_stats_get(fs->st, &s);
	memset(&v, 0, sizeof(v));
	v.f_bsize = 4096;
	v.f_frsize = 4096;
	v.f_blocks = s.pool_size / 4096;
	v.f_bfree = s.free_bytes / 4096;
	v.f_bavail = v.f_bfree;
	v.f_files = EMB_CAT_PER_CHUNK * EMB_CAT_CHUNKS;
	v.f_ffree = v.f_files - s.tables;
	v.f_favail = v.f_ffree;
	v.f_namemax = EMB_NAME_MAX;
	fuse_reply_statfs(req, &v);
}

static int xa_value(struct store_attr *a, const char *name, char *out, size_t n)
{
	if (!strcmp(name, XA_DIM))
		return snprintf(out, n, "%u", a->dim);
	if (!strcmp(name, XA_DTYPE))
		return snprintf(out, n, "%s", store_dtype_name(a->dtype));
	if (!strcmp(name, XA_ROWSZ))
		return snprintf(out, n, "%u", a->row_size);
	return -ENODATA;
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	uint32_t id;
	struct store_attr a;
	char val[32];
	int ret;
	if (snapfs_is_table(ino))
		ret = snapfs_table_attr(FS(req), ino, &a);
	else if (ino_table(ino, &id))
		ret = store_table_getattr(FS(req)->st, id, &a);
	else
		ret = -ENODATA;
	if (!ret)
		ret = xa_value(&a, name, val, sizeof(val));
	if (ret < 0)
		fuse_reply_err(req, -ret);
	else if (size == 0)
		fuse_reply_xattr(req, (size_t)ret);
	else if (size < (size_t)ret)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, val, (size_t)ret);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	static const char list[] = XA_DIM "\0" XA_DTYPE "\0" XA_ROWSZ;
	uint32_t id;
	size_t len = ino_table(ino, &id) || snapfs_is_table(ino) ? sizeof(list) : 0;
	if (size == 0)
		fuse_reply_xattr(req, len);
	else if (size < len)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, list, len);
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
			size_t size, int flags)
{
	struct embfs *fs = FS(req);
	uint32_t id;
	struct store_attr a;
	char v[32];
	if (!ino_table(ino, &id)) {
		fuse_reply_err(req, snapfs_owns(ino) ? EROFS : ENOTSUP);
		return;
	}
	int known = !strcmp(name, XA_DIM) || !strcmp(name, XA_DTYPE) || !strcmp(name, XA_ROWSZ);
	if (!known) {
		fuse_reply_err(req, ENOTSUP);
		return;
	}
	if (flags & XATTR_CREATE) {
		fuse_reply_err(req, EEXIST);
		return;
	}
	if (!strcmp(name, XA_ROWSZ)) {
		fuse_reply_err(req, EPERM);
		return;
	}
	/* accept "128" and "128\n" (echo) */
	while (size && (value[size - 1] == '\n' || value[size - 1] == ' ' || value[size - 1] == 0))
		size--;
	if (size == 0 || size >= sizeof(v)) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	memcpy(v, value, size);
	v[size] = 0;
	int ret = store_table_getattr(fs->st, id, &a);
	if (ret) {
		fuse_reply_err(req, -ret);
		return;
	}
	uint32_t dim = a.dim, dtype = a.dtype;
	if (!strcmp(name, XA_DIM)) {
		char *end;
		errno = 0;
		unsigned long d = strtoul(v, &end, 10);
		if (errno || *end || v[0] == '-' || d == 0 || d > EMB_ROW_MAX) {
			fuse_reply_err(req, EINVAL);
			return;
		}
		dim = (uint32_t)d;
	} else if (store_dtype_parse(v, &dtype)) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	ret = rows_before_change(fs, id);
	if (!ret)
		ret = store_table_set_geometry(fs->st, id, dim, dtype);
	if (!ret)
		rows_after_change(fs, id, 0, UINT64_MAX);
	fuse_reply_err(req, -ret);
}

static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	uint32_t id;
	int known = !strcmp(name, XA_DIM) || !strcmp(name, XA_DTYPE) || !strcmp(name, XA_ROWSZ);
	if (snapfs_owns(ino))
		fuse_reply_err(req, EROFS);
	else
		fuse_reply_err(req, ino_table(ino, &id) && known ? EPERM : ENODATA);
}

/* Punch a hole: whole rows are deleted, partly covered stored rows get the
 * covered bytes zeroed.  Stored rows are found through the seek index, so a
 * huge sparse range costs what it holds, not its length. */
static int punch(struct embfs *fs, uint32_t id, const struct store_attr *a, uint64_t off,
		 uint64_t len)
{
	static const char zeros[EMB_ROW_MAX];
	uint32_t rs = a->row_size;
	uint64_t end = off + len < off ? UINT64_MAX : off + len;
	if (end > a->size)
		end = a->size;
	if (off >= end)
		return 0;
	size_t cap = 1024, n = 0;
	struct store_rowop *ops = malloc(cap * sizeof(*ops));
	if (!ops)
		return -ENOMEM;
	uint64_t r = off / rs, found;
	struct store_view v;
	int ret = store_view_live(fs->st, id, &v);
	while (!ret && (ret = store_row_next(fs->st, &v, r, &found)) == 1) {
		uint64_t rstart = found * rs;
		if (rstart >= end) {
			ret = 0;
			break;
		}
		uint64_t lo = rstart > off ? rstart : off;
		uint64_t hi = rstart + rs < end ? rstart + rs : end;
		if (n == cap) {
			ret = store_rows_write(fs->st, id, ops, n, 0);
			n = 0;
			if (ret)
				break;
		}
		if (lo == rstart && hi == rstart + rs)
			ops[n++] = (struct store_rowop){ found, 0, 0, NULL, 0 };
		else
			ops[n++] = (struct store_rowop){ found, (uint32_t)(lo - rstart),
							 (uint32_t)(hi - lo), zeros, 0 };
		ret = 0;
		r = found + 1;
	}
	if (ret >= 0 && n)
		ret = store_rows_write(fs->st, id, ops, n, 0);
	free(ops);
	return ret < 0 ? ret : 0;
}

static void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
			 struct fuse_file_info *fi)
{
	struct embfs *fs = FS(req);
	uint32_t id;
	struct store_attr a;
	(void)fi;
	if (!ino_table(ino, &id)) {
		fuse_reply_err(req, snapfs_owns(ino) ? EROFS : ENODEV);
		return;
	}
	if (mode != (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE)) {
		fuse_reply_err(req, EOPNOTSUPP);
		return;
	}
	if (off < 0 || len <= 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	int ret = store_table_getattr(fs->st, id, &a);
	if (!ret)
		ret = rows_before_change(fs, id);
	if (!ret)
		ret = punch(fs, id, &a, (uint64_t)off, (uint64_t)len);
	if (!ret) {
		uint64_t end = (uint64_t)off + (uint64_t)len;
		rows_after_change(fs, id, (uint64_t)off / a.row_size,
				  end / a.row_size + 1 < end / a.row_size ? UINT64_MAX : end / a.row_size + 1);
	}
	fuse_reply_err(req, -ret);
}

static void op_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence, struct fuse_file_info *fi)
{
	struct embfs *fs = FS(req);
	uint32_t id;
	struct store_attr a;
	(void)fi;
	if (snapfs_is_table(ino)) {
		snapfs_lseek(req, ino, off, whence);
		return;
	}
	if (!ino_table(ino, &id) || (whence != SEEK_DATA && whence != SEEK_HOLE)) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	/* the store answers: it must hold every row written so far */
	struct store_view v;
	int ret = rows_before_change(fs, id);
	if (!ret)
		ret = store_view_live(fs->st, id, &v);
	if (!ret)
		ret = store_view_getattr(fs->st, &v, &a);
	if (ret) {
		fuse_reply_err(req, -ret);
		return;
	}
	uint64_t o = (uint64_t)off, rs = a.row_size, r;
	if (off < 0 || o >= a.size) {
		fuse_reply_err(req, ENXIO);
		return;
	}
	if (whence == SEEK_DATA) {
		ret = store_row_next(fs->st, &v, o / rs, &r);
		if (ret < 0) {
			fuse_reply_err(req, -ret);
			return;
		}
		uint64_t pos = ret == 1 ? (r * rs > o ? r * rs : o) : UINT64_MAX;
		if (pos >= a.size)
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
	if (r > a.size / rs || pos > a.size)
		pos = a.size;
	fuse_reply_lseek(req, (off_t)pos);
}

const struct fuse_lowlevel_ops embfs_ops = {
	.init = op_init,
	.destroy = op_destroy,
	.lookup = op_lookup,
	.forget = op_forget,
	.forget_multi = op_forget_multi,
	.getattr = op_getattr,
	.setattr = op_setattr,
	.mknod = op_mknod,
	.mkdir = op_mkdir,
	.unlink = op_unlink,
	.rmdir = op_rmdir,
	.symlink = op_symlink,
	.rename = op_rename,
	.link = op_link,
	.open = op_open,
	.read = op_read,
	.write = op_write,
	.flush = op_flush,
	.release = op_release,
	.fsync = op_fsync,
	.readdir = op_readdir,
	.fsyncdir = op_fsyncdir,
	.statfs = op_statfs,
	.setxattr = op_setxattr,
	.getxattr = op_getxattr,
	.listxattr = op_listxattr,
	.removexattr = op_removexattr,
	.create = op_create,
	.fallocate = op_fallocate,
	.lseek = op_lseek,
};
