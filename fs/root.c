/*
 * The root directory: the live tables by name (lookup, create, unlink,
 * rename), its listing (with .embfs and .snapshots, whose names are
 * reserved), and statfs of the pool.  Every name reaching here is at most
 * EMB_NAME_MAX bytes (ll.c).  A table's inode is counted in fs->nlookup for
 * every entry the kernel holds (table_forget gives them back).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "fs.h"

static int reserved_name(const char *name)
{
	return !strcmp(name, ".embfs") || !strcmp(name, ".snapshots");
}

/* Reply with the entry of live table id, counting the kernel's reference;
 * fi: a create's open file.  0 or -errno (nothing replied). */
static int reply_table(fuse_req_t req, uint32_t id, struct fuse_file_info *fi)
{
	struct embfs *fs = fs_of(req);
	struct fuse_entry_param e;
	struct store_attr ka;
	int ret = fs_entry(fs, fs_ino_table(id), &e);
	if (ret)
		return ret;
	/* a re-lay's table: the inode the kernel already has (relay.c) */
	uint32_t kid = alias_kernel(fs, id);
	if (kid != id) {
		if ((ret = front_table_getattr(&fs->fr, kid, &ka)))
			return ret;
		e.ino = e.attr.st_ino = fs_ino_table(kid);
		e.generation = ka.gen;
	}
	atomic_fetch_add(&fs->nlookup[kid], 1);
	if (fi)
		fi->keep_cache = 1;
	if (fi ? fuse_reply_create(req, &e, fi) : fuse_reply_entry(req, &e))
		atomic_fetch_sub(&fs->nlookup[kid], 1);
	return 0;
}

void root_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	(void)parent;
	struct embfs *fs = fs_of(req);
	struct fuse_entry_param e;
	uint32_t id;
	int ret;
	if (reserved_name(name)) {
		ret = fs_entry(fs, strcmp(name, ".snapshots") ? INO_CTL : INO_SNAPS, &e);
		if (!ret)
			fuse_reply_entry(req, &e);
	} else {
		ret = front_table_lookup(&fs->fr, name, &id);
		if (!ret)
			ret = reply_table(req, id, NULL);
	}
	if (ret)
		fuse_reply_err(req, -ret);
}

void root_create(fuse_req_t req, const char *name, mode_t mode, struct fuse_file_info *fi)
{
	struct embfs *fs = fs_of(req);
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct fs_perm dir;
	uint32_t id;
	int ret;
	perm_get(fs, FS_ROOT, &dir);
	if (reserved_name(name))
		ret = -EEXIST;
	else if (!S_ISREG(mode))
		ret = -EPERM;
	else /* a set-group-ID root gives new tables its group */
		ret = front_table_create(&fs->fr, name, mode & 07777, ctx->uid,
					 dir.mode & S_ISGID ? dir.gid : ctx->gid, fs->def_dim, fs->def_dtype, &id);
	if (!ret) {
		pc_table_reset(fs, id);
		front_dir_touch(&fs->fr, STORE_DIR_ROOT);
		ret = reply_table(req, id, fi);
	}
	if (ret)
		fuse_reply_err(req, -ret);
}

void root_unlink(fuse_req_t req, const char *name)
{
	struct embfs *fs = fs_of(req);
	if (reserved_name(name)) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	int ret = front_table_unlink(&fs->fr, name);
	if (!ret)
		front_dir_touch(&fs->fr, STORE_DIR_ROOT);
	fuse_reply_err(req, -ret);
}

void root_rmdir(fuse_req_t req, const char *name)
{
	fuse_reply_err(req, reserved_name(name) ? EPERM : ENOTDIR);
}

void root_rename(fuse_req_t req, const char *name, const char *newname, unsigned int flags)
{
	struct embfs *fs = fs_of(req);
	uint32_t id;
	int ret;
	if (reserved_name(name) || reserved_name(newname))
		ret = -EPERM;
	else if (flags & RENAME_EXCHANGE)
		ret = -EINVAL;
	else if ((flags & RENAME_NOREPLACE) && front_table_lookup(&fs->fr, newname, &id) == 0)
		ret = -EEXIST;
	else
		ret = front_table_rename(&fs->fr, name, newname);
	if (!ret)
		front_dir_touch(&fs->fr, STORE_DIR_ROOT);
	fuse_reply_err(req, -ret);
}

/* Offsets: 1..4 the fixed entries, then 16 + table cursor. */
void root_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off)
{
	(void)ino;
	struct embfs *fs = fs_of(req);
	struct fs_dirbuf b;
	struct store_attr a;
	static const struct fs_dirent fixed[] = {
		{ ".", INO_ROOT, S_IFDIR },
		{ "..", INO_ROOT, S_IFDIR },
		{ ".embfs", INO_CTL, S_IFDIR },
		{ ".snapshots", INO_SNAPS, S_IFDIR },
	};
	if (!fs_dir_begin(req, &b, size, off))
		return;
	fs_dir_add_list(&b, fixed, sizeof(fixed) / sizeof(fixed[0]));
	uint32_t cur = off > 16 ? (uint32_t)(off - 16) : 0;
	while (!b.full && front_table_next(&fs->fr, &cur, &a) == 1)
		fs_dir_add(&b, a.name, fs_ino_table(alias_kernel(fs, a.id)), S_IFREG, 16 + (off_t)cur);
	fs_dir_reply(&b);
}

void root_statfs(fuse_req_t req)
{
	struct embfs *fs = fs_of(req);
	struct store_stats s;
	struct statvfs v;
	front_stats_get(&fs->fr, &s);
	memset(&v, 0, sizeof(v));
	v.f_bsize = 4096;
	v.f_frsize = 4096;
	v.f_blocks = s.pool_size / 4096;
	v.f_bfree = s.free_bytes / 4096;
	v.f_bavail = v.f_bfree;
	/* with a spill tier its segments count too: free ones (and the open
	 * one's unwritten end) are free room.  Available for new rows: the
	 * device's free room less the merge reserve (free, but not for new
	 * rows, as ext4's reserved blocks), and of the pool only what row
	 * versions may still take (the rest holds the index of spilled rows) */
	struct store_spill_stats sp;
	front_spill_stats_get(&fs->fr, &sp);
	if (sp.attached) {
		v.f_blocks += sp.segs * sp.seg_size / 4096;
		v.f_bfree += sp.free_bytes / 4096;
		uint64_t r = sp.segs_reserved * sp.seg_size, dev = sp.free_bytes > r ? sp.free_bytes - r : 0;
		uint64_t rows = sp.pmem_high > sp.pmem_row_bytes ? sp.pmem_high - sp.pmem_row_bytes : 0;
		uint64_t pool = s.free_bytes + sp.pmem_slab_free;
		v.f_bavail = (dev + (rows < pool ? rows : pool)) / 4096;
		if (v.f_bavail > v.f_bfree)
			v.f_bavail = v.f_bfree;
	}
	v.f_files = INO_NTABLES;
	v.f_ffree = v.f_files - s.tables;
	v.f_favail = v.f_ffree;
	v.f_namemax = EMB_NAME_MAX;
	fuse_reply_statfs(req, &v);
}

/* FS_ROOT */
const struct fs_kind_ops root_kind = {
	.lookup = root_lookup,
	.readdir = root_readdir,
};
