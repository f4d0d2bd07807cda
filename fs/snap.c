/*
 * The .snapshots directory and its snapshot directories.  mkdir
 * .snapshots/NAME takes a snapshot (the store copies the catalog and
 * advances the batch id; no row is copied and nothing is written back: the
 * cache keeps the snapshot's dirty rows and writes them back as versions of
 * their own batch).  rmdir drops it.  The tables inside are table files
 * (table.c), read-only: ll.c answers EROFS to every change in this tree.
 *
 * Durability: with a row cache, a snapshot is durable (survives a crash)
 * once every row written before it is in the pool: after fsync of its
 * directory, of .snapshots or of the mount root, at unmount, or when the
 * flusher has written back every older row (at most dirty_age_ms).  A
 * snapshot not durable at a crash is dropped at the next mount: complete or
 * absent.  Without a cache every write is committed before it returns, so a
 * snapshot is durable when mkdir returns.  The first open of a table in a
 * snapshot that is not durable yet writes the cache back first
 * (front_sync_snap).
 */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "fs.h"

void snap_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct embfs *fs = fs_of(req);
	struct fs_ino k = fs_ino(parent);
	struct store_snap sn;
	uint32_t id;
	int ret;
	if (k.kind == FS_SNAPS) {
		ret = front_snap_lookup(&fs->fr, name, &sn);
		if (!ret)
			fs_reply_entry(req, fs_ino_snapdir(sn.idx));
	} else {
		ret = front_snap_get(&fs->fr, k.idx, &sn);
		if (!ret)
			ret = front_snap_table_lookup(&fs->fr, k.idx, name, &id);
		if (!ret)
			fs_reply_entry(req, fs_ino_snaptable(k.idx, id));
	}
	if (ret)
		fuse_reply_err(req, -ret);
}

/* Offsets: 1 ".", 2 "..", then 16 + snapshot or table cursor. */
void snap_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off)
{
	struct embfs *fs = fs_of(req);
	struct fs_ino k = fs_ino(ino);
	struct fs_dirbuf b;
	struct store_snap sn;
	struct store_attr a;
	if (!fs_dir_begin(req, &b, size, off))
		return;
	fs_dir_add(&b, ".", ino, S_IFDIR, 1);
	fs_dir_add(&b, "..", k.kind == FS_SNAPS ? INO_ROOT : INO_SNAPS, S_IFDIR, 2);
	uint32_t cur = off > 16 ? (uint32_t)(off - 16) : 0;
	if (k.kind == FS_SNAPS) {
		while (!b.full && front_snap_next(&fs->fr, &cur, &sn) == 1)
			fs_dir_add(&b, sn.name, fs_ino_snapdir(sn.idx), S_IFDIR, 16 + (off_t)cur);
	} else {
		while (!b.full && front_snap_table_next(&fs->fr, k.idx, &cur, &a) == 1)
			fs_dir_add(&b, a.name, fs_ino_snaptable(k.idx, a.id), S_IFREG, 16 + (off_t)cur);
	}
	fs_dir_reply(&b);
}

void snap_mkdir(fuse_req_t req, const char *name)
{
	struct embfs *fs = fs_of(req);
	struct store_snap sn;
	int ret = front_snap_take(&fs->fr, name, &sn);
	if (ret) {
		fuse_reply_err(req, -ret);
		return;
	}
	front_dir_touch(&fs->fr, STORE_DIR_SNAPS);
	atomic_fetch_add_explicit(&fs->n_snaps, 1, memory_order_relaxed);
	fs_reply_entry(req, fs_ino_snapdir(sn.idx));
}

void snap_rmdir(fuse_req_t req, const char *name)
{
	struct embfs *fs = fs_of(req);
	int ret = front_snap_remove(&fs->fr, name);
	if (!ret)
		front_dir_touch(&fs->fr, STORE_DIR_SNAPS);
	fuse_reply_err(req, -ret);
}

/* fsync of .snapshots makes every snapshot durable, of a snapshot's
 * directory that one. */
void snap_fsyncdir(fuse_req_t req, fuse_ino_t ino)
{
	struct embfs *fs = fs_of(req);
	struct fs_ino k = fs_ino(ino);
	int ret = front_sync_table(&fs->fr, -1);
	if (!ret && k.kind == FS_SNAPDIR)
		ret = front_sync_snap(&fs->fr, k.idx);
	if (!ret && k.kind == FS_SNAPS) {
		uint32_t cur = 0;
		struct store_snap sn;
		while (!ret && front_snap_next(&fs->fr, &cur, &sn) == 1)
			ret = front_snap_set_durable(&fs->fr, sn.idx, sn.gen);
	}
	fuse_reply_err(req, -ret);
}

/* A name in a snapshot's directory: its .delta (dview.c), or a table. */
static void snapdir_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	if (!strcmp(name, ".delta"))
		dview_lookup(req, parent, name);
	else
		snap_lookup(req, parent, name);
}

/* FS_SNAPS */
const struct fs_kind_ops snaps_kind = {
	.lookup = snap_lookup,
	.readdir = snap_readdir,
};

/* FS_SNAPDIR */
const struct fs_kind_ops snapdir_kind = {
	.lookup = snapdir_lookup,
	.readdir = snap_readdir,
};
