/*
 * The FUSE low-level op table.  Each op decodes its inode once (ino.h) and
 * hands the request to the file that owns that kind of inode, through the
 * kind's ops table (struct fs_kind_ops, fs.h; kinds[] below): root.c (the
 * root directory), table.c (table files), snap.c (.snapshots), dview.c
 * (.delta), ctl.c, restore.c, delta.c and batch.c (.embfs).  It answers
 * itself only what follows from the kind alone: EROFS for a change in
 * .snapshots, ENOTDIR, EISDIR and the like for an op the kind has not, and
 * ENAMETOOLONG first for a name over EMB_NAME_MAX bytes (the kernel lets
 * up to 1024 through).  Init and destroy start and stop the batch path and
 * write the cache back.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "fs.h"

/* FS_NONE: an inode number that names nothing has no op */
static const struct fs_kind_ops none_kind;

static const struct fs_kind_ops *const kinds[FS_NKINDS] = {
	[FS_NONE] = &none_kind,
	[FS_ROOT] = &root_kind,
	[FS_CTL] = &ctl_kind,
	[FS_STATS] = &ctl_stats_kind,
	[FS_BATCHID] = &ctl_batchid_kind,
	[FS_ROWS] = &batch_kind,
	[FS_RESTORE] = &restore_kind,
	[FS_DELTA] = &delta_kind,
	[FS_METRICS] = &ctl_stats_kind,
	[FS_PID] = &ctl_pid_kind,
	[FS_SNAPS] = &snaps_kind,
	[FS_SNAPDIR] = &snapdir_kind,
	[FS_TABLE] = &table_kind,
	[FS_SNAPTABLE] = &snaptable_kind,
	[FS_DDIR] = &dview_dir_kind,
	[FS_DPAIR] = &dview_dir_kind,
	[FS_DDEL] = &dview_dir_kind,
	[FS_DVIEW] = &dview_file_kind,
	[FS_DLIST] = &dview_file_kind,
	[FS_DCHGD] = &dview_dir_kind,
	[FS_DCHG] = &dview_file_kind,
};

/* The ops of the kind of inode k. */
static const struct fs_kind_ops *kind_ops(struct fs_ino k)
{
	return kinds[k.kind] ? kinds[k.kind] : &none_kind;
}

static int name_too_long(fuse_req_t req, const char *name)
{
	if (strnlen(name, EMB_NAME_MAX + 1) <= EMB_NAME_MAX)
		return 0;
	fuse_reply_err(req, ENAMETOOLONG);
	return 1;
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
	daemon_ready(fs);
}

static void op_destroy(void *userdata)
{
	struct embfs *fs = userdata;
	batch_destroy(fs);
	pc_destroy(fs);
	dview_forget_all(fs);
	int ret = front_sync_table(&fs->fr, -1);
	if (ret)
		fprintf(stderr, "embfs: writing back cached rows at unmount: %s\n", strerror(-ret));
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	fs_read_ahead(fs_of(req)); /* before any file is opened */
	if (name_too_long(req, name))
		return;
	const struct fs_kind_ops *o = kind_ops(fs_ino(parent));
	if (o->lookup)
		o->lookup(req, parent, name);
	else
		fuse_reply_err(req, ENOTDIR);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	struct fs_ino k = fs_ino(ino);
	if (k.kind == FS_TABLE)
		table_forget(fs_of(req), k.id, nlookup);
	fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *f)
{
	for (size_t i = 0; i < count; i++) {
		struct fs_ino k = fs_ino(f[i].ino);
		if (k.kind == FS_TABLE)
			table_forget(fs_of(req), k.id, f[i].nlookup);
	}
	fuse_reply_none(req);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat st;
	uint32_t held;
	(void)fi;
	fs_read_ahead(fs_of(req));
	int ret = fs_stat(fs_of(req), alias_get(fs_of(req), ino, &held), &st, NULL);
	alias_put(fs_of(req), held);
	st.st_ino = ino; /* the kernel's inode, also when a re-lay forwards it */
	if (ret)
		fuse_reply_err(req, -ret);
	else
		fuse_reply_attr(req, &st, fs_attr_timeout(ino));
}

/* 1 when a restore running on table id (or GATE_NS) refuses the change:
 * EBUSY answered.  Else the gate is entered: leave it after the reply. */
static int gated(fuse_req_t req, uint32_t id)
{
	if (!restore_gate_enter(fs_of(req), id))
		return 0;
	fuse_reply_err(req, EBUSY);
	return 1;
}

/* gated() for the table behind the kernel's inode `asked`: in the gate,
 * *ino and *k name that table until the gate is left (a re-lay moves an
 * inode's forwarding only with the gate closed to its table, relay.c).
 * The ops that change a table pass their inode as it came from the kernel. */
static int gated_table(fuse_req_t req, fuse_ino_t asked, fuse_ino_t *ino, struct fs_ino *k)
{
	struct embfs *fs = fs_of(req);
	for (;;) {
		*ino = alias_ino(fs, asked);
		*k = fs_ino(*ino);
		if (gated(req, k->id))
			return 1;
		if (alias_ino(fs, asked) == *ino)
			return 0;
		restore_gate_leave(fs); /* re-laid meanwhile: the new table's gate */
	}
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		       struct fuse_file_info *fi)
{
	struct fs_ino k = fs_ino(ino);
	(void)fi;
	if (k.kind == FS_TABLE) {
		struct embfs *fs = fs_of(req);
		if (!gated_table(req, ino, &ino, &k)) {
			table_setattr(req, k.id, attr, to_set);
			restore_gate_leave(fs);
		}
	} else if (k.kind == FS_ROOT || k.kind == FS_SNAPS) {
		fs_dir_setattr(req, ino, attr, to_set);
	} else
		fuse_reply_err(req, fs_ino_in_snaps(k) ? EROFS : k.kind == FS_NONE ? ENOENT : EPERM);
}

/* create and mknod: only regular files, only in the root. */
static void create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, struct fuse_file_info *fi)
{
	struct fs_ino k = fs_ino(parent);
	if (name_too_long(req, name))
		return;
	if (k.kind == FS_ROOT) {
		struct embfs *fs = fs_of(req);
		if (!gated(req, GATE_NS)) {
			root_create(req, name, mode, fi);
			restore_gate_leave(fs);
		}
	} else
		fuse_reply_err(req, fs_ino_in_snaps(k) ? EROFS : k.kind == FS_CTL ? EACCES : ENOTDIR);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		      struct fuse_file_info *fi)
{
	create(req, parent, name, S_IFREG | (mode & 07777), fi);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	(void)rdev;
	create(req, parent, name, mode, NULL);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	struct fs_ino k = fs_ino(parent);
	(void)mode;
	if (name_too_long(req, name))
		return;
	if (k.kind == FS_SNAPS) {
		/* .snapshots/NAME: take a snapshot, never of a restore half done */
		struct embfs *fs = fs_of(req);
		if (!gated(req, GATE_ANY)) {
			snap_mkdir(req, name);
			restore_gate_leave(fs);
		}
	} else
		fuse_reply_err(req, fs_ino_in_snaps(k) ? EROFS : k.kind == FS_ROOT ? EPERM : ENOTDIR);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fs_ino k = fs_ino(parent);
	if (name_too_long(req, name))
		return;
	if (k.kind == FS_ROOT) {
		struct embfs *fs = fs_of(req);
		if (!gated(req, GATE_NS)) {
			root_unlink(req, name);
			restore_gate_leave(fs);
		}
	} else if (fs_ino_in_snaps(k))
		fuse_reply_err(req, k.kind == FS_SNAPS ? EISDIR : EROFS);
	else
		fuse_reply_err(req, k.kind == FS_CTL ? EPERM : ENOTDIR);
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fs_ino k = fs_ino(parent);
	if (name_too_long(req, name))
		return;
	if (k.kind == FS_SNAPS)
		snap_rmdir(req, name); /* .snapshots/NAME: drop it */
	else if (k.kind == FS_ROOT)
		root_rmdir(req, name);
	else
		fuse_reply_err(req, fs_ino_in_snaps(k) ? EROFS : ENOENT);
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		      const char *newname, unsigned int flags)
{
	struct fs_ino from = fs_ino(parent), to = fs_ino(newparent);
	if (name_too_long(req, name) || name_too_long(req, newname))
		return;
	if (fs_ino_in_snaps(from) || fs_ino_in_snaps(to))
		fuse_reply_err(req, EROFS);
	else if (from.kind != FS_ROOT || to.kind != FS_ROOT)
		fuse_reply_err(req, EXDEV);
	else if (!gated(req, GATE_NS)) {
		struct embfs *fs = fs_of(req);
		root_rename(req, name, newname, flags);
		restore_gate_leave(fs);
	}
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
	struct embfs *fs = fs_of(req); /* req is gone once replied */
	uint32_t held; /* a re-lay's table, in use (relay.c) */
	ino = alias_get(fs, ino, &held);
	const struct fs_kind_ops *o = kind_ops(fs_ino(ino));
	if (o->open)
		o->open(req, ino, fi);
	else
		fuse_reply_err(req, EISDIR);
	alias_put(fs, held);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	ino = alias_ino(fs_of(req), ino); /* a re-lay's (relay.c) */
	const struct fs_kind_ops *o = kind_ops(fs_ino(ino));
	if (o->release)
		o->release(req, ino, fi);
	else
		fuse_reply_err(req, 0);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	struct embfs *fs = fs_of(req); /* req is gone once replied */
	fs_follow_caller(req);
	uint32_t held; /* a re-lay's table, in use (relay.c) */
	ino = alias_get(fs, ino, &held);
	const struct fs_kind_ops *o = kind_ops(fs_ino(ino));
	if (o->read)
		o->read(req, ino, size, off, fi);
	else
		fuse_reply_err(req, EISDIR);
	alias_put(fs, held);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *data, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	struct fs_ino k = fs_ino(ino);
	const struct fs_kind_ops *o = kind_ops(k);
	fs_follow_caller(req);
	if (!o->write) {
		fuse_reply_err(req, fs_ino_in_snaps(k) ? EROFS : EBADF);
	} else if (!o->gated) {
		o->write(req, ino, data, size, off, fi);
	} else {
		struct embfs *fs = fs_of(req);
		if (!gated_table(req, ino, &ino, &k)) {
			o->write(req, ino, data, size, off, fi);
			restore_gate_leave(fs);
		}
	}
}

static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	(void)fi;
	fuse_reply_err(req, 0);
}

/* fsync of a live table writes back its rows; of anything else, every table. */
static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	ino = alias_ino(fs_of(req), ino); /* a re-lay's (relay.c) */
	struct embfs *fs = fs_of(req);
	struct fs_ino k = fs_ino(ino);
	(void)datasync;
	(void)fi;
	atomic_fetch_add_explicit(&fs->n_fsync, 1, memory_order_relaxed);
	fuse_reply_err(req, -front_sync_table(&fs->fr, k.kind == FS_TABLE ? (int64_t)k.id : -1));
}

static void op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	(void)datasync;
	(void)fi;
	if (fs_ino_in_snaps(fs_ino(ino))) {
		snap_fsyncdir(req, ino);
		return;
	}
	/* fsync of a directory (the mount's root) writes back every table:
	 * the kernel delivers syncfs(2) to virtiofs only, so this is the
	 * whole-pool sync point */
	fuse_reply_err(req, -front_sync_table(&fs_of(req)->fr, -1));
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	(void)fi;
	const struct fs_kind_ops *o = kind_ops(fs_ino(ino));
	if (o->readdir)
		o->readdir(req, ino, size, off);
	else
		fuse_reply_err(req, ENOTDIR);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	(void)ino;
	root_statfs(req);
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	struct embfs *fs = fs_of(req); /* req is gone once replied */
	uint32_t held; /* a re-lay's table, in use (relay.c) */
	ino = alias_get(fs, ino, &held);
	if (fs_ino_is_table(fs_ino(ino)))
		table_getxattr(req, ino, name, size);
	else
		fuse_reply_err(req, ENODATA);
	alias_put(fs, held);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	if (fs_ino_is_table(fs_ino(ino)))
		table_listxattr(req, size);
	else if (size == 0)
		fuse_reply_xattr(req, 0);
	else
		fuse_reply_buf(req, NULL, 0);
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
			size_t size, int flags)
{
	struct fs_ino k = fs_ino(ino);
	if (k.kind == FS_TABLE) {
		struct embfs *fs = fs_of(req);
		uint32_t dim, dtype;
		if (gated_table(req, ino, &ino, &k))
			return;
		int relay = table_setxattr(req, k.id, name, value, size, flags, &dim, &dtype);
		restore_gate_leave(fs);
		/* rows of another size: the bytes cut again, the gate closed */
		if (relay)
			fuse_reply_err(req, -table_relay(fs, k.id, dim, dtype));
	} else
		fuse_reply_err(req, fs_ino_in_snaps(k) ? EROFS : ENOTSUP);
}

static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	struct fs_ino k = fs_ino(ino);
	if (k.kind == FS_TABLE)
		table_removexattr(req, name);
	else
		fuse_reply_err(req, fs_ino_in_snaps(k) ? EROFS : ENODATA);
}

static void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
			 struct fuse_file_info *fi)
{
	struct fs_ino k = fs_ino(ino);
	(void)fi;
	if (k.kind == FS_TABLE) {
		struct embfs *fs = fs_of(req);
		if (!gated_table(req, ino, &ino, &k)) {
			table_fallocate(req, k.id, mode, off, len);
			restore_gate_leave(fs);
		}
	} else
		fuse_reply_err(req, fs_ino_in_snaps(k) ? EROFS : ENODEV);
}

static void op_copy_file_range(fuse_req_t req, fuse_ino_t ino_in, off_t off_in, struct fuse_file_info *fi_in,
			       fuse_ino_t ino_out, off_t off_out, struct fuse_file_info *fi_out, size_t len,
			       int flags)
{
	struct embfs *fs = fs_of(req); /* req is gone once replied */
	uint32_t held; /* the source: a re-lay's table, in use (relay.c) */
	ino_in = alias_get(fs, ino_in, &held);
	struct fs_ino k = fs_ino(ino_out);
	(void)fi_in;
	(void)fi_out;
	if (k.kind == FS_TABLE && fs_ino_is_table(fs_ino(ino_in))) {
		if (!gated_table(req, ino_out, &ino_out, &k)) {
			table_copy_range(req, ino_in, off_in, k.id, ino_out, off_out, len, flags);
			restore_gate_leave(fs);
		}
	} else
		fuse_reply_err(req, fs_ino_in_snaps(k) ? EROFS : EOPNOTSUPP);
	alias_put(fs, held);
}

static void op_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence, struct fuse_file_info *fi)
{
	struct embfs *fs = fs_of(req); /* req is gone once replied */
	uint32_t held; /* a re-lay's table, in use (relay.c) */
	ino = alias_get(fs, ino, &held);
	const struct fs_kind_ops *o = kind_ops(fs_ino(ino));
	if (o->lseek)
		o->lseek(req, ino, off, whence, fi);
	else
		fuse_reply_err(req, EINVAL);
	alias_put(fs, held);
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
	.copy_file_range = op_copy_file_range,
};
