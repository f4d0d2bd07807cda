/*
 * Table files, live and in snapshots: open, read, write, SEEK_DATA/HOLE,
 * attributes, geometry xattrs, punch, and the kernel's references to live
 * tables.  A live table and a snapshot's are read and sought through one
 * path over their view (attr.c's fs_view): a live table's rows through the
 * row cache when there is one (and its seek first writes its cached rows
 * back), a snapshot's straight from the store.  The calls that change a
 * table take live tables only: ll.c answers EROFS in .snapshots.
 *
 * Caching: table attributes and the kernel page cache are kept (keep_cache):
 * every change to a table's bytes arrives through the kernel, so its cache
 * is coherent, except for scatters, which pcache.c and batch.c handle.  The
 * kernel's writeback cache is not used: a write it still held would be
 * unknown to the daemon, so a snapshot taken after that write returned
 * would miss it.
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
#include <linux/falloc.h>

#include "fs.h"

#define XA_DIM "user.embfs.dim"
#define XA_DTYPE "user.embfs.dtype"
#define XA_ROWSZ "user.embfs.row_size"

/* ---- every table file --------------------------------------------------- */

void table_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct embfs *fs = fs_of(req);
	struct fs_ino k = fs_ino(ino);
	int ret = 0;
	if (k.kind == FS_SNAPTABLE) {
		if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC))
			ret = -EROFS;
		else
			ret = front_sync_snap(&fs->fr, k.idx); /* its rows must be in the pool */
	} else if (fi->flags & O_TRUNC) {
		/* libfuse negotiates atomic_o_trunc: the kernel sends no SETATTR
		 * for open(O_TRUNC) and relies on us to truncate here */
		ret = front_truncate(&fs->fr, k.id, 0);
	}
	if (ret) {
		fuse_reply_err(req, -ret);
		return;
	}
	fi->keep_cache = 1;
	fuse_reply_open(req, fi);
}

/* A READ's reply buffer: each worker keeps one of up to REPLY_KEEP bytes
 * (a 1 MiB READ a millisecond would otherwise map, fault in and give
 * back a megabyte each time); larger ones are malloc'ed. */
#define REPLY_KEEP (1u << 20)
static pthread_key_t reply_key; /* freed when its worker thread exits */
static pthread_once_t reply_once = PTHREAD_ONCE_INIT;

static void reply_key_make(void)
{
	if (pthread_key_create(&reply_key, free))
		abort(); /* only when a process has used up its keys */
}

static char *reply_buf(size_t len)
{
	if (len > REPLY_KEEP)
		return malloc(len);
	pthread_once(&reply_once, reply_key_make);
	char *b = pthread_getspecific(reply_key);
	if (!b && (b = malloc(REPLY_KEEP)) && pthread_setspecific(reply_key, b)) {
		free(b);
		b = NULL;
	}
	return b;
}

static void reply_buf_done(char *buf)
{
	if (buf != pthread_getspecific(reply_key))
		free(buf);
}

void table_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	(void)fi;
	struct embfs *fs = fs_of(req);
	struct store_view v;
	struct store_attr a;
	struct pc_io io = { 0 };
	int ret = fs_view(fs, ino, &v, &a);
	if (ret) {
		fuse_reply_err(req, -ret);
		return;
	}
	/* the kernel may cache what this READ returns (zeros past EOF too);
	 * nothing scatters into a snapshot */
	if (!v.snap)
		pc_io_begin(fs, v.id, &io);
	uint64_t o = (uint64_t)off;
	if (o >= a.size || size == 0) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	size_t len = a.size - o < size ? (size_t)(a.size - o) : size;
	char *buf = reply_buf(len);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	ret = front_read(&fs->fr, &v, a.row_size, o, len, buf);
	if (!ret)
		pc_io_done(fs, v.id, a.row_size, o, len, buf, &io);
	if (!v.snap) {
		atomic_fetch_add_explicit(&fs->n_read, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&fs->n_read_bytes, len, memory_order_relaxed);
	}
	if (ret)
		fuse_reply_err(req, -ret);
	else
		fuse_reply_buf(req, buf, len);
	reply_buf_done(buf);
}

/* SEEK_DATA (hole 0) or SEEK_HOLE from o, inside the file: the start of the
 * first stored row (hole 0) or hole (hole 1) at or after o, or o itself
 * inside one.  No data left: -ENXIO; no hole before the end: the size. */
static int seek_from(struct embfs *fs, const struct store_view *v, const struct store_attr *a, uint64_t o,
		     int hole, uint64_t *pos)
{
	uint64_t rs = a->row_size, r;
	int ret = hole ? front_row_hole(&fs->fr, v, o / rs, &r) : front_row_next(&fs->fr, v, o / rs, &r);
	if (ret < 0)
		return ret;
	if (!hole && ret == 0)
		return -ENXIO;
	*pos = r > a->size / rs ? a->size : r * rs > o ? r * rs : o;
	return !hole && *pos >= a->size ? -ENXIO : 0;
}

void table_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence, struct fuse_file_info *fi)
{
	(void)fi;
	struct embfs *fs = fs_of(req);
	struct store_view v;
	struct store_attr a;
	uint64_t pos = 0;
	if (whence != SEEK_DATA && whence != SEEK_HOLE) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	int ret = fs_view(fs, ino, &v, NULL);
	if (!ret && !v.snap)
		ret = front_before_change(&fs->fr, v.id); /* the store answers: it must hold every row written */
	if (!ret)
		ret = front_view_getattr(&fs->fr, &v, &a);
	if (!ret && (off < 0 || (uint64_t)off >= a.size))
		ret = -ENXIO;
	if (!ret)
		ret = seek_from(fs, &v, &a, (uint64_t)off, whence == SEEK_HOLE, &pos);
	if (ret)
		fuse_reply_err(req, -ret);
	else
		fuse_reply_lseek(req, (off_t)pos);
}

/* Reply to getxattr/listxattr with len bytes of val (size 0: the length). */
static void reply_xattr(fuse_req_t req, const char *val, size_t len, size_t size)
{
	if (size == 0)
		fuse_reply_xattr(req, len);
	else if (size < len)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, val, len);
}

static int xa_value(const struct store_attr *a, const char *name, char *out, size_t n)
{
	if (!strcmp(name, XA_DIM))
		return snprintf(out, n, "%u", a->dim);
	if (!strcmp(name, XA_DTYPE))
		return snprintf(out, n, "%s", front_dtype_name(a->dtype));
	if (!strcmp(name, XA_ROWSZ))
		return snprintf(out, n, "%u", a->row_size);
	return -ENODATA;
}

void table_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	struct store_view v;
	struct store_attr a;
	char val[32];
	int ret = fs_view(fs_of(req), ino, &v, &a);
	if (!ret)
		ret = xa_value(&a, name, val, sizeof(val));
	if (ret < 0)
		fuse_reply_err(req, -ret);
	else
		reply_xattr(req, val, (size_t)ret, size);
}

void table_listxattr(fuse_req_t req, size_t size)
{
	static const char list[] = XA_DIM "\0" XA_DTYPE "\0" XA_ROWSZ;
	reply_xattr(req, list, sizeof(list), size);
}

static int xa_known(const char *name)
{
	return !strcmp(name, XA_DIM) || !strcmp(name, XA_DTYPE) || !strcmp(name, XA_ROWSZ);
}

void table_removexattr(fuse_req_t req, const char *name)
{
	fuse_reply_err(req, xa_known(name) ? EPERM : ENODATA);
}

/* ---- live tables -------------------------------------------------------- */

void table_write(fuse_req_t req, uint32_t id, const char *data, size_t size, off_t off,
		 struct fuse_file_info *fi)
{
	struct embfs *fs = fs_of(req);
	struct store_attr a;
	int ret = front_table_getattr(&fs->fr, id, &a);
	if (ret) {
		fuse_reply_err(req, -ret);
		return;
	}
	uint64_t o = (uint64_t)off;
	if (off < 0 || o + size < o || o + size > front_max_size(a.row_size)) {
		fuse_reply_err(req, EFBIG);
		return;
	}
	if (fi->writepage) {
		/* pages a mapping dirtied, written back by the kernel */
		ret = pc_writepage(fs, id, a.row_size, o, size, data);
	} else {
		struct pc_io io;
		pc_io_begin(fs, id, &io);
		ret = front_write(&fs->fr, id, a.row_size, o, size, data);
		if (!ret)
			pc_io_done(fs, id, a.row_size, o, size, data, &io);
	}
	atomic_fetch_add_explicit(&fs->n_write, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&fs->n_write_bytes, size, memory_order_relaxed);
	if (ret) {
		front_pool_failed(&fs->fr, ret);
		fuse_reply_err(req, -ret);
	} else {
		fuse_reply_write(req, size);
	}
}

static uint64_t ts_ns(const struct timespec *ts)
{
	return (uint64_t)ts->tv_sec * 1000000000ull + (uint64_t)ts->tv_nsec;
}

/* What a SETATTR sets besides the size: into a, with its STORE_SET_* mask. */
static unsigned setattr_mask(const struct stat *attr, int to_set, struct store_attr *a)
{
	unsigned mask = 0;
	struct timespec now;
	memset(a, 0, sizeof(*a));
	clock_gettime(CLOCK_REALTIME, &now);
	if (to_set & FUSE_SET_ATTR_MODE) {
		a->mode = attr->st_mode & 07777;
		mask |= STORE_SET_MODE;
	}
	if (to_set & FUSE_SET_ATTR_UID) {
		a->uid = attr->st_uid;
		mask |= STORE_SET_UID;
	}
	if (to_set & FUSE_SET_ATTR_GID) {
		a->gid = attr->st_gid;
		mask |= STORE_SET_GID;
	}
	if (to_set & (FUSE_SET_ATTR_ATIME_NOW | FUSE_SET_ATTR_ATIME)) {
		a->atime_ns = ts_ns(to_set & FUSE_SET_ATTR_ATIME_NOW ? &now : &attr->st_atim);
		mask |= STORE_SET_ATIME;
	}
	if (to_set & (FUSE_SET_ATTR_MTIME_NOW | FUSE_SET_ATTR_MTIME)) {
		a->mtime_ns = ts_ns(to_set & FUSE_SET_ATTR_MTIME_NOW ? &now : &attr->st_mtim);
		mask |= STORE_SET_MTIME;
	}
	if (to_set & FUSE_SET_ATTR_CTIME) {
		a->ctime_ns = ts_ns(&attr->st_ctim);
		mask |= STORE_SET_CTIME;
	}
	return mask;
}

void table_setattr(fuse_req_t req, uint32_t id, struct stat *attr, int to_set)
{
	struct embfs *fs = fs_of(req);
	struct store_attr a;
	struct stat st;
	int ret = 0;
	if (to_set & FUSE_SET_ATTR_SIZE) {
		if (attr->st_size < 0) {
			fuse_reply_err(req, EINVAL);
			return;
		}
		ret = front_truncate(&fs->fr, id, (uint64_t)attr->st_size);
	}
	unsigned mask = setattr_mask(attr, to_set, &a);
	if (!ret && mask)
		ret = front_table_setattr(&fs->fr, id, &a, mask);
	if (!ret)
		ret = fs_stat(fs, fs_ino_table(id), &st, NULL);
	if (ret)
		fuse_reply_err(req, -ret);
	else
		fuse_reply_attr(req, &st, FS_TIMEOUT);
}

/* A geometry xattr's value as text: "128" and "128\n" (echo) alike. */
static int xa_text(const char *value, size_t size, char *v, size_t n)
{
	while (size && (value[size - 1] == '\n' || value[size - 1] == ' ' || value[size - 1] == 0))
		size--;
	if (size == 0 || size >= n)
		return -EINVAL;
	memcpy(v, value, size);
	v[size] = 0;
	return 0;
}

/* The geometry setting xattr name to v asks for, from the table's a. */
static int xa_geometry(const char *name, const char *v, const struct store_attr *a, uint32_t *dim,
		       uint32_t *dtype)
{
	*dim = a->dim;
	*dtype = a->dtype;
	if (strcmp(name, XA_DIM))
		return front_dtype_parse(v, dtype) ? -EINVAL : 0;
	char *end;
	errno = 0;
	unsigned long d = strtoul(v, &end, 10);
	if (errno || *end || v[0] == '-' || d == 0 || d > EMB_ROW_MAX)
		return -EINVAL;
	*dim = (uint32_t)d;
	return 0;
}

int table_setxattr(fuse_req_t req, uint32_t id, const char *name, const char *value, size_t size,
		   int flags, uint32_t *dim, uint32_t *dtype)
{
	struct embfs *fs = fs_of(req);
	struct store_attr a;
	char v[32];
	int ret = 0;
	if (!xa_known(name))
		ret = -ENOTSUP;
	else if (flags & XATTR_CREATE)
		ret = -EEXIST;
	if (!ret)
		ret = xa_text(value, size, v, sizeof(v));
	if (!ret)
		ret = front_table_getattr(&fs->fr, id, &a);
	if (!ret && !strcmp(name, XA_ROWSZ)) {
		/* read-only; setting the value it has (cp -a copying the xattrs) is fine */
		char cur[16];
		snprintf(cur, sizeof(cur), "%u", a.row_size);
		ret = strcmp(v, cur) ? -EPERM : 1;
	}
	if (!ret)
		ret = xa_geometry(name, v, &a, dim, dtype);
	if (!ret && *dim == a.dim && *dtype == a.dtype)
		ret = 1; /* what it is already: nothing to change, also with rows */
	if (!ret)
		ret = front_before_change(&fs->fr, id);
	if (!ret) {
		ret = front_table_set_geometry(&fs->fr, id, *dim, *dtype);
		front_after_change(&fs->fr, id, 0, UINT64_MAX);
	}
	/* rows of another size, or versions a snapshot holds: the bytes cut
	 * again into a table that takes the name (the caller, table_relay) */
	if (ret == -EBUSY)
		return 1;
	fuse_reply_err(req, ret > 0 ? 0 : -ret);
	return 0;
}

void table_fallocate(fuse_req_t req, uint32_t id, int mode, off_t off, off_t len)
{
	int ret;
	if (mode != (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE))
		ret = -EOPNOTSUPP;
	else if (off < 0 || len <= 0)
		ret = -EINVAL;
	else
		ret = front_punch(&fs_of(req)->fr, id, (uint64_t)off, (uint64_t)len);
	fuse_reply_err(req, -ret);
}

/* Unlinked table id, which the kernel no longer references, freed. */
static void forgotten(struct embfs *fs, uint32_t id)
{
	struct store_attr a;
	if (front_table_getattr(&fs->fr, id, &a) || !a.orphan)
		return;
	/* rows written before a snapshot belong to it even when the table is
	 * gone from the live tree: table_free_unlinked writes them back */
	table_free_unlinked(fs, id);
}

void table_forget(struct embfs *fs, uint32_t id, uint64_t n)
{
	if (atomic_fetch_sub(&fs->nlookup[id], n) != n)
		return;
	/* a re-lay forwarded this inode: the table it names, unlinked since
	 * (its references were this inode's), goes too */
	uint32_t live = alias_drop(fs, id);
	forgotten(fs, id);
	if (live != GATE_NONE && atomic_load(&fs->nlookup[live]) == 0)
		forgotten(fs, live);
}

/* write by inode (the kind table's op) */
static void table_write_ino(fuse_req_t req, fuse_ino_t ino, const char *data, size_t size, off_t off,
			    struct fuse_file_info *fi)
{
	table_write(req, fs_ino(ino).id, data, size, off, fi);
}

/* FS_TABLE: a live table; its writes wait out a restore of it */
const struct fs_kind_ops table_kind = {
	.open = table_open,
	.read = table_read,
	.write = table_write_ino,
	.lseek = table_lseek,
	.gated = 1,
};

/* FS_SNAPTABLE: a snapshot's table (no write: EROFS) */
const struct fs_kind_ops snaptable_kind = {
	.open = table_open,
	.read = table_read,
	.lseek = table_lseek,
};
