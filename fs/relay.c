/*
 * A live table's geometry set while it holds rows of another size: its
 * bytes cut again into rows of the new size (a re-lay), so that the file's
 * bytes stay what they were.  This is what `cp -a`, `rsync -aX` and the
 * like need: they write a table's bytes into a new file first (rows of the
 * mount's default geometry) and set the user.embfs.dim/dtype xattrs last.
 *
 * The rows go into a new table made unlinked (an orphan, freed at mount if
 * a crash comes first), are made durable, and then that table takes the
 * old one's name in one pool transaction (store_table_replace, a rename
 * over it); the old table is unlinked, and freed once the kernel forgets
 * it (or kept as a zombie for the snapshots that hold it).  Presence: a
 * row of the new size is stored when one of its bytes was in a stored row
 * and it is not all zeros (an all-zero stretch reads the same as a hole,
 * as cp --sparse treats it).  While it runs, changes to the table fail
 * with EBUSY, as during a restore (one re-lay or restore at a time); a
 * snapshot may be taken meanwhile (it holds the old table).
 *
 * The kernel keeps the inode it knows (the open fd of the cp that set the
 * xattr): that inode number now forwards to the new table (fwd), and a
 * lookup of the name gives it, not the new table's own (rev), so the file
 * has one inode and one page cache (base.c reads the forwarding, this file
 * alone moves it).  The forwarding ends when the kernel
 * forgets the inode (table_forget).  A change resolves an inode (alias_ino)
 * before it enters the gate of changes and checks it again inside (ll.c,
 * batchreq.c): the forwarding moves only while the gate is closed to the
 * table.  A read counts itself a user of the table it resolved to
 * (alias_get): the old table's rows are dropped once its users are gone,
 * right after the move, and its catalog entry when the kernel forgets the
 * inode (a table re-laid twice, cp -a setting dim then dtype, is freed
 * whole: the kernel never had its inode).
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "fs.h"

#define RELAY_BYTES (1u << 20) /* bytes read and cut per step */

/* Live table id was replaced by nid: the kernel's inode for id now names
 * nid.  1 when the kernel holds id's own inode (the old table is freed when
 * it forgets it), 0 when id was itself a re-lay's table (the kernel never
 * looked it up). */
static int alias_move(struct embfs *fs, uint32_t id, uint32_t nid)
{
	pthread_mutex_lock(&fs->alias_mu);
	uint32_t kid = alias_kernel(fs, id);
	if (kid != id)
		atomic_store(&fs->rev[id], 0);
	atomic_store(&fs->fwd[kid], nid + 1);
	atomic_store(&fs->rev[nid], kid + 1);
	pthread_mutex_unlock(&fs->alias_mu);
	return kid == id;
}

/* 1 when the n bytes at p are all zero */
static int zero(const char *p, size_t n)
{
	return n == 0 || (p[0] == 0 && !memcmp(p, p + 1, n - 1));
}

/* Rows [lo, hi) of the new size rs, cut from the bytes of view v (rows of
 * rs_old bytes), the ones not all zero written to table nid. */
static int cut(struct embfs *fs, const struct store_view *v, uint32_t rs_old, uint32_t nid, uint32_t rs,
	       uint64_t lo, uint64_t hi, char *buf, uint64_t *rows)
{
	uint64_t per = RELAY_BYTES / rs ? RELAY_BYTES / rs : 1;
	int ret = 0;
	for (uint64_t r = lo; !ret && r < hi; r += per) {
		uint64_t k = hi - r < per ? hi - r : per;
		ret = front_read(&fs->fr, v, rs_old, r * rs, (size_t)(k * rs), buf);
		for (uint64_t i = 0; !ret && i < k;) {
			while (i < k && zero(buf + i * rs, rs))
				i++;
			uint64_t j = i;
			while (j < k && !zero(buf + j * rs, rs))
				j++;
			if (j > i) {
				ret = front_write(&fs->fr, nid, rs, (r + i) * rs, (size_t)((j - i) * rs), buf + i * rs);
				*rows += j - i;
			}
			i = j;
		}
	}
	return ret;
}

/* Table id's bytes cut into rows of dim x dtype, into orphan nid. */
static int relay_rows(struct embfs *fs, uint32_t id, const struct store_attr *a, uint32_t nid, uint32_t rs)
{
	struct store_view v;
	char *buf = malloc(RELAY_BYTES > rs ? RELAY_BYTES : rs);
	int ret = buf ? front_view_live(&fs->fr, id, &v) : -ENOMEM;
	uint64_t rs_old = a->row_size, end = (a->size + rs_old - 1) / rs_old, r = 0, rows = 0;
	while (!ret && r < end) {
		uint64_t data, hole;
		int found = front_row_next(&fs->fr, &v, r, &data);
		if (found <= 0 || data >= end) {
			ret = found < 0 ? found : 0;
			break;
		}
		ret = front_row_hole(&fs->fr, &v, data, &hole);
		if (ret < 0)
			break;
		ret = 0;
		hole = hole < end ? hole : end;
		/* the new rows holding bytes [data * rs_old, hole * rs_old) */
		uint64_t lo = data * rs_old / rs, hi = (hole * rs_old + rs - 1) / rs;
		ret = cut(fs, &v, (uint32_t)rs_old, nid, rs, lo, hi, buf, &rows);
		r = hole;
	}
	free(buf);
	if (!ret) /* the last row cut may run past the size: zeros there */
		ret = front_truncate(&fs->fr, nid, a->size);
	if (!ret)
		ret = front_table_setattr(&fs->fr, nid, a, STORE_SET_ATIME | STORE_SET_MTIME);
	if (!ret)
		ret = front_sync_table(&fs->fr, nid); /* durable before it is named */
	atomic_fetch_add_explicit(&fs->n_relay_rows, rows, memory_order_relaxed);
	return ret;
}

/* With the gate closed to changes of id. */
static int relay_locked(struct embfs *fs, uint32_t id, uint32_t dim, uint32_t dtype)
{
	struct store_attr a;
	uint32_t nid;
	int ret = front_before_change(&fs->fr, id);
	if (!ret)
		ret = front_table_getattr(&fs->fr, id, &a);
	if (ret || (a.dim == dim && a.dtype == dtype))
		return ret;
	if (a.orphan)
		return -EBUSY; /* unlinked, or re-laid by another request meanwhile */
	/* emptied meanwhile, or rows of the same size: no cut needed */
	ret = front_table_set_geometry(&fs->fr, id, dim, dtype);
	front_after_change(&fs->fr, id, 0, UINT64_MAX);
	if (ret != -EBUSY)
		return ret;
	ret = front_table_create_orphan(&fs->fr, a.name, a.mode, a.uid, a.gid, dim, dtype, &nid);
	if (ret)
		return ret;
	pc_table_reset(fs, nid);
	ret = relay_rows(fs, id, &a, nid, dim * front_dtype_size(dtype));
	if (!ret)
		ret = front_table_replace(&fs->fr, nid, id);
	if (ret) {
		table_free_unlinked(fs, nid);
		return ret;
	}
	atomic_fetch_add_explicit(&fs->n_relays, 1, memory_order_relaxed);
	front_dir_touch(&fs->fr, STORE_DIR_ROOT);
	int kernel_has = alias_move(fs, id, nid);
	/* the old rows: once no request that resolved the inode to them
	 * before the move reads them (alias_get) */
	while (atomic_load(&fs->users[id]))
		sched_yield();
	front_after_change(&fs->fr, id, 0, UINT64_MAX);
	if (kernel_has)
		front_truncate(&fs->fr, id, 0); /* the entry goes when the kernel forgets it */
	else
		table_free_unlinked(fs, id);
	return 0;
}

int table_relay(struct embfs *fs, uint32_t id, uint32_t dim, uint32_t dtype)
{
	pthread_mutex_lock(&fs->restore_lock); /* one restore or re-lay at a time */
	/* close the gate to changes of id and wait out those in flight (as a
	 * restore does); a restore left pending on it keeps it closed: EBUSY */
	pthread_rwlock_wrlock(&fs->gate_rw);
	uint32_t r = atomic_load(&fs->restoring);
	int ret = r == GATE_ALL || r == id ? -EBUSY : 0;
	if (!ret)
		atomic_store(&fs->relaying, id);
	pthread_rwlock_unlock(&fs->gate_rw);
	if (!ret) {
		ret = relay_locked(fs, id, dim, dtype);
		atomic_store(&fs->relaying, GATE_NONE);
	}
	pthread_mutex_unlock(&fs->restore_lock);
	return ret;
}
