/*
 * Who may do what (README "Permissions").  The mount's root and .snapshots
 * have an owner, group and mode kept in the pool (store_dir_perm; a pool
 * that never had them set shows root's 0755 and 0555, as before they were
 * kept).  The kernel enforces them (default_permissions) from what getattr
 * shows: creating, removing and renaming tables needs write and search
 * permission on the root, taking (mkdir) and dropping (rmdir) a snapshot
 * on .snapshots.  Those who may write .snapshots may also write
 * .embfs/batch, .embfs/restore and .embfs/delta: they show .snapshots'
 * owner and group, readable by all and writable where .snapshots is.  A
 * snapshot's directory shows .snapshots' owner and group (mode 0555), so
 * that with the sticky bit on .snapshots its owner (and root) alone may
 * drop snapshots.
 *
 * chmod and chown of the root and of .snapshots are checked by the kernel
 * as for any file (root, or the owner for chmod and for chgrp to one of
 * its groups) and stored here.  The daemon checks access itself where the
 * kernel cannot see the target: a scatter's table (batch.c) and a
 * restore's tables (restore.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "fs.h"

/* The stored permissions of which, or the defaults (owner root, mode def). */
static void dir_perm(struct embfs *fs, enum store_dir which, uint32_t def, struct fs_perm *p)
{
	struct store_dir_perm d;
	int ret = front_dir_perm(&fs->fr, which, &d);
	if (ret == 1)
		*p = (struct fs_perm){ d.uid, d.gid, d.mode, 1 };
	else
		*p = (struct fs_perm){ 0, 0, def, 0 };
}

int perm_get(struct embfs *fs, enum fs_kind kind, struct fs_perm *p)
{
	switch (kind) {
	case FS_ROOT:
		dir_perm(fs, STORE_DIR_ROOT, 0755, p);
		return 1;
	case FS_SNAPS:
		dir_perm(fs, STORE_DIR_SNAPS, 0555, p);
		return 1;
	case FS_SNAPDIR:
		dir_perm(fs, STORE_DIR_SNAPS, 0555, p);
		p->mode = 0555;
		return 1;
	case FS_BATCHID:
	case FS_RESTORE:
	case FS_DELTA:
		dir_perm(fs, STORE_DIR_SNAPS, 0555, p);
		/* never set: root's 0644, as before permissions were kept */
		p->mode = p->set ? 0444 | (p->mode & 0222) : 0644;
		return 1;
	default:
		return 0;
	}
}

int perm_may(fuse_req_t req, const struct fs_perm *p, unsigned bits)
{
	const struct fuse_ctx *c = fuse_req_ctx(req);
	if (c->uid == 0)
		return 0;
	if (c->uid == p->uid)
		return ((p->mode >> 6) & bits) == bits ? 0 : -EACCES;
	int in_group = c->gid == p->gid;
	if (!in_group && (((p->mode >> 3) ^ p->mode) & bits & 7)) {
		gid_t small[64], *g = small;
		int n = fuse_req_getgroups(req, 64, g);
		if (n > 64 && (g = malloc((size_t)n * sizeof(*g))) != NULL)
			n = fuse_req_getgroups(req, n, g);
		for (int i = 0; g && i < n; i++)
			in_group |= g[i] == p->gid;
		if (g != small)
			free(g);
	}
	return (((in_group ? p->mode >> 3 : p->mode) & bits) == bits) ? 0 : -EACCES;
}
