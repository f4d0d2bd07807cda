/*
 * .embfs/restore: put a live table back to its state in a snapshot, in
 * place.  Writing "SNAPSHOT TABLE" runs the restore; the write returns when
 * it is done and the kernel has dropped what it cached of the tables (or
 * with its errno).  "SNAPSHOT" alone rolls the whole mount
 * back: live tables the snapshot lacks are unlinked, its tables missing
 * from the live tree made again, and every one of its tables restored.
 * Reading gives the last restore's outcome as one line of text.
 *
 * Only rows that differ are written.  A row differs when the live table's
 * newest version has a batch id above the snapshot's (changed or deleted
 * since: its newest version is not the one the snapshot sees) and its
 * bytes are not the snapshot's (changed back, or restored before: a
 * restored row is a new version, of the current batch), or when the
 * snapshot stores it and the live table does not.  Candidates are the rows
 * either side stores, found run by run through both seek indexes and
 * judged in chunks by their versions' batch ids (bytes are read only of
 * rows changed since); the rows that differ are rewritten with the
 * snapshot's bytes or deleted, one group commit per chunk.  Then the size
 * and mode follow the snapshot's.
 *
 * All or nothing across a crash: the request is checked whole first (the
 * snapshot, its table, the live table), then recorded in the pool
 * (store_intent_set) before the first row changes and cleared once the last
 * is durable; a pool mounted with one pending finishes it before it serves
 * anything (restore_recover), and a restore is idempotent.  While it runs,
 * changes to its tables (writes, scatters, truncates, punches, copies into
 * them; for a rollback every table and create, unlink and rename in the
 * root) fail with EBUSY after the changes in flight are done.  A restore
 * that fails midway (ENOSPC, EIO) stays pending and keeps refusing changes
 * until the same request is written again or the pool is mounted again.
 * One restore at a time (EBUSY).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fs.h"

#define CHUNK CHANGES_CHUNK
#define INVAL_WAIT_S 5 /* longest wait for the kernel to drop cached pages */

struct rcount {
	uint64_t examined, rewritten, deleted;
	uint64_t tables, created, unlinked; /* a rollback's */
	int fast; /* candidates from store_rows_since, not a walk of both tables */
	uint64_t inval; /* the last page-cache invalidation queued (batch_inval) */
};

/* A chunk's arrays (CHUNK each), and the snapshot's rows read into buf. */
struct rwork {
	uint64_t vl[CHUNK], put[CHUNK];
	uint8_t sl[CHUNK], ss[CHUNK], pl[CHUNK];
	struct store_rowop ops[CHUNK];
	char *live;  /* the live bytes of put[] (CHUNK rows) */
	char buf[];  /* the snapshot's bytes of put[] (CHUNK rows) */
};

/* Rows ids[0..n) (ascending) of the live table l made those of s
 * (snapshot batch b). */
static int restore_chunk(struct embfs *fs, const struct tview *l, const struct tview *s, uint64_t b,
			 const uint64_t *ids, uint32_t n, struct rwork *w, struct rcount *c)
{
	uint64_t *vl = w->vl, *put = w->put;
	uint8_t *sl = w->sl, *ss = w->ss, *pl = w->pl;
	struct store_rowop *ops = w->ops;
	char *buf = w->buf;
	uint32_t nput = 0, nops = 0;
	int ret = front_rows_read(&fs->fr, &l->v, ids, n, NULL, sl, vl);
	if (!ret)
		ret = front_rows_read(&fs->fr, &s->v, ids, n, NULL, ss, NULL);
	if (ret)
		return ret;
	c->examined += n;
	for (uint32_t i = 0; i < n; i++) {
		/* the live newest version is the snapshot's iff its batch is <= b
		 * (a batch unknown, 0, is taken as changed) */
		int same = sl[i] ? ss[i] && vl[i] && vl[i] <= b : !ss[i];
		if (same)
			continue;
		if (ss[i]) {
			pl[nput] = sl[i];
			put[nput++] = ids[i];
		} else {
			ops[nops++] = (struct store_rowop){ ids[i], 0, 0, NULL, 0 };
			c->deleted++;
		}
	}
	if (nput) {
		/* a live row changed since but now holding the snapshot's bytes
		 * (changed back, or restored before) is left as it is */
		uint32_t rs = s->a.row_size;
		ret = front_rows_read(&fs->fr, &s->v, put, nput, buf, NULL, NULL);
		if (!ret)
			ret = front_rows_read(&fs->fr, &l->v, put, nput, w->live, NULL, NULL);
		if (ret)
			return ret;
		for (uint32_t i = 0; i < nput; i++) {
			const char *want = buf + (size_t)i * rs;
			if (pl[i] && !memcmp(want, w->live + (size_t)i * rs, rs))
				continue;
			ops[nops++] = (struct store_rowop){ put[i], 0, rs, want, 0 };
			c->rewritten++;
		}
	}
	if (!nops)
		return 0;
	ret = front_rows_write(&fs->fr, l->v.id, ops, nops, 0);
	for (uint32_t i = 0; i < nops; i++)
		put[i] = ops[i].row;
	front_dropped(&fs->fr, l->v.id, put, nops); /* cached copies of the old rows */
	return ret;
}

struct rargs {
	struct embfs *fs;
	const struct tview *l, *s;
	uint64_t b;
	struct rwork *w;
	struct rcount *c;
};

static int restore_cb(void *arg, const uint64_t *ids, uint32_t n)
{
	struct rargs *a = arg;
	return restore_chunk(a->fs, a->l, a->s, a->b, ids, n, a->w, a->c);
}

/* Restore live table `table` to snapshot `snap`. */
static int restore(struct embfs *fs, const char *snap, const char *table, struct rcount *c, char *why, size_t n)
{
	struct store_snap sn;
	struct tview l, s;
	uint32_t sid, lid;
	int ret = front_snap_lookup(&fs->fr, snap, &sn);
	if (ret) {
		snprintf(why, n, "no snapshot %s", snap);
		return ret;
	}
	if ((ret = front_snap_table_lookup(&fs->fr, sn.idx, table, &sid))) {
		snprintf(why, n, "snapshot %s has no table %s", snap, table);
		return ret;
	}
	if ((ret = front_table_lookup(&fs->fr, table, &lid))) {
		snprintf(why, n, "no live table %s (create it first: it takes the snapshot's geometry)", table);
		return ret;
	}
	if ((ret = front_sync_snap(&fs->fr, sn.idx)) || (ret = front_view_snap(&fs->fr, sn.idx, sid, &s.v)) ||
	    (ret = front_view_getattr(&fs->fr, &s.v, &s.a)))
		return ret;
	/* the store must hold every row written: its seeks and batch ids decide */
	if ((ret = front_before_change(&fs->fr, lid)) || (ret = front_view_live(&fs->fr, lid, &l.v)) ||
	    (ret = front_view_getattr(&fs->fr, &l.v, &l.a)))
		return ret;
	if (l.a.dim != s.a.dim || l.a.dtype != s.a.dtype) {
		/* another geometry: emptied, then it takes the snapshot's */
		if ((ret = front_truncate(&fs->fr, lid, 0)) || (ret = front_table_set_geometry(&fs->fr, lid, s.a.dim, s.a.dtype))) {
			snprintf(why, n, "%s: cannot take the snapshot's geometry", table);
			return ret;
		}
		front_after_change(&fs->fr, lid, 0, UINT64_MAX);
		if ((ret = front_view_live(&fs->fr, lid, &l.v)) || (ret = front_view_getattr(&fs->fr, &l.v, &l.a)))
			return ret;
	}
	struct rwork *w = malloc(sizeof(*w) + (size_t)CHUNK * s.a.row_size);
	char *live = malloc((size_t)CHUNK * s.a.row_size);
	if (!w || !live) {
		free(w);
		free(live);
		return -ENOMEM;
	}
	w->live = live;
	/* the candidates (changes.c): the rows changed since, when the live
	 * table is the one the snapshot holds */
	struct rargs ra = { fs, &l, &s, sn.batch, w, c };
	ret = changes_walk(fs, &s.v, &l.v, lid == sid && l.a.gen == s.a.gen, lid, sn.batch, restore_cb, &ra,
			   &c->fast);
	free(w);
	free(live);
	/* the size and mode as the snapshot has them (a failed walk may have
	 * written some chunks: the kernel's pages go all the same) */
	if (ret >= 0) {
		if (l.a.size > s.a.size)
			ret = front_truncate(&fs->fr, lid, s.a.size);
		else
			ret = front_table_extend(&fs->fr, lid, s.a.size);
	}
	if (!ret) {
		struct store_attr set = s.a;
		ret = front_table_setattr(&fs->fr, lid, &set, STORE_SET_MODE);
	}
	/* pages and attributes the kernel holds of the old table: dropped
	 * before the reply (restore_write) */
	uint64_t q = batch_inval(fs, fs_ino_table(alias_kernel(fs, lid)));
	if (q > c->inval)
		c->inval = q;
	return ret;
}

/* The names of the live tables (live = 1) or of snapshot idx's tables, in
 * a malloc'd array of *n. */
static int names_of(struct embfs *fs, int live, uint32_t idx, char (**out)[EMB_NAME_MAX + 1], size_t *n)
{
	char(*v)[EMB_NAME_MAX + 1] = NULL;
	size_t k = 0, cap = 0;
	uint32_t cur = 0;
	struct store_attr a;
	int ret;
	while ((ret = live ? front_table_next(&fs->fr, &cur, &a) : front_snap_table_next(&fs->fr, idx, &cur, &a)) == 1) {
		if (k == cap) {
			size_t ncap = cap ? 2 * cap : 16;
			char(*p)[EMB_NAME_MAX + 1] = realloc(v, ncap * sizeof(*v));
			if (!p) {
				free(v);
				return -ENOMEM;
			}
			v = p;
			cap = ncap;
		}
		memcpy(v[k++], a.name, sizeof(v[0]));
	}
	if (ret < 0) {
		free(v);
		return ret;
	}
	*out = v;
	*n = k;
	return 0;
}

/* Unlink live table `name` as the kernel's unlink would, and free it now
 * if the kernel holds no reference to it (it will send no FORGET). */
static int unlink_table(struct embfs *fs, const char *name)
{
	uint32_t id;
	int ret = front_table_lookup(&fs->fr, name, &id);
	if (!ret)
		ret = front_table_unlink(&fs->fr, name);
	if (ret)
		return ret;
	front_dir_touch(&fs->fr, STORE_DIR_ROOT);
	/* the kernel's references to it are its inode's (relay.c) */
	if (atomic_load(&fs->nlookup[alias_kernel(fs, id)]) == 0)
		ret = table_free_unlinked(fs, id);
	return ret;
}

/* The attributes of table id as snapshot idx holds it. */
static int snap_attr(struct embfs *fs, uint32_t idx, uint32_t id, struct store_attr *a)
{
	struct store_view v;
	int ret = front_view_snap(&fs->fr, idx, id, &v);
	return ret ? ret : front_view_getattr(&fs->fr, &v, a);
}

/* Every table back to snapshot snap: live tables it does not have are
 * unlinked, its tables missing from the live tree are made again (its
 * mode, owner and geometry), and each is restored in place. */
static int rollback(struct embfs *fs, const char *snap, struct rcount *c, char *why, size_t n)
{
	struct store_snap sn;
	char(*live)[EMB_NAME_MAX + 1] = NULL, (*his)[EMB_NAME_MAX + 1] = NULL;
	size_t nl = 0, nh = 0;
	int ret = front_snap_lookup(&fs->fr, snap, &sn);
	if (ret) {
		snprintf(why, n, "no snapshot %s", snap);
		return ret;
	}
	if ((ret = names_of(fs, 1, 0, &live, &nl)) || (ret = names_of(fs, 0, sn.idx, &his, &nh)))
		goto out;
	for (size_t i = 0; !ret && i < nl; i++) {
		uint32_t x;
		if (front_snap_table_lookup(&fs->fr, sn.idx, live[i], &x) != -ENOENT)
			continue;
		if ((ret = unlink_table(fs, live[i])))
			snprintf(why, n, "unlinking %s (made after the snapshot)", live[i]);
		else
			c->unlinked++;
	}
	for (size_t i = 0; !ret && i < nh; i++) {
		uint32_t lid, sid;
		struct store_attr a;
		if (front_table_lookup(&fs->fr, his[i], &lid) == -ENOENT) {
			if ((ret = front_snap_table_lookup(&fs->fr, sn.idx, his[i], &sid)) ||
			    (ret = snap_attr(fs, sn.idx, sid, &a)) ||
			    (ret = front_table_create(&fs->fr, his[i], a.mode, a.uid, a.gid, a.dim, a.dtype, &lid))) {
				snprintf(why, n, "making %s again", his[i]);
				break;
			}
			pc_table_reset(fs, lid);
			front_dir_touch(&fs->fr, STORE_DIR_ROOT);
			c->created++;
		}
		ret = restore(fs, snap, his[i], c, why, n);
		c->tables++;
	}
out:
	free(live);
	free(his);
	return ret;
}

/* Close the gate to changes of `to` and wait out those in flight. */
static void gate_close(struct embfs *fs, uint32_t to)
{
	pthread_rwlock_wrlock(&fs->gate_rw);
	atomic_store(&fs->restoring, to);
	pthread_rwlock_unlock(&fs->gate_rw);
}

static void gate_open(struct embfs *fs)
{
	atomic_store(&fs->restoring, GATE_NONE);
}

/* The live table of generation gen: its id and name (-ENOENT when gone). */
static int table_by_gen(struct embfs *fs, uint64_t gen, uint32_t *id, char *name)
{
	uint32_t cur = 0;
	struct store_attr a;
	int ret;
	while ((ret = front_table_next(&fs->fr, &cur, &a)) == 1) {
		if (a.gen == gen) {
			memcpy(name, a.name, EMB_NAME_MAX + 1);
			return front_table_lookup(&fs->fr, name, id);
		}
	}
	return ret < 0 ? ret : -ENOENT;
}

/* A request checked whole before anything changes: the snapshot (made
 * durable: a pending one would not outlive a crash), its table and the live
 * table for a restore; the intent that records it. */
static int plan(struct embfs *fs, const char *snap, const char *table, struct store_intent *in, uint32_t *gate,
		char *why, size_t n)
{
	struct store_snap sn;
	uint32_t sid, lid;
	struct store_attr a;
	int ret = front_snap_lookup(&fs->fr, snap, &sn);
	if (ret) {
		snprintf(why, n, "no snapshot %s", snap);
		return ret;
	}
	*in = (struct store_intent){ STORE_INTENT_ROLLBACK, sn.idx, sn.gen, 0 };
	*gate = GATE_ALL;
	if (table) {
		if ((ret = front_snap_table_lookup(&fs->fr, sn.idx, table, &sid))) {
			snprintf(why, n, "snapshot %s has no table %s", snap, table);
			return ret;
		}
		if ((ret = front_table_lookup(&fs->fr, table, &lid))) {
			snprintf(why, n, "no live table %s (create it first: it takes the snapshot's geometry)", table);
			return ret;
		}
		if ((ret = front_table_getattr(&fs->fr, lid, &a)))
			return ret;
		in->kind = STORE_INTENT_RESTORE;
		in->table_gen = a.gen;
		*gate = lid;
	}
	if ((ret = front_sync_snap(&fs->fr, sn.idx)))
		snprintf(why, n, "cannot make snapshot %s durable", snap);
	return ret;
}

/* Run a recorded request to its end and clear it: the rows it wrote are
 * durable when store_rows_write returns, the size and mode in their
 * transactions. */
static int run(struct embfs *fs, const struct store_intent *in, struct rcount *c, char *snap, char *table,
	       char *why, size_t n)
{
	struct store_snap sn;
	int ret = front_snap_get(&fs->fr, in->snap_idx, &sn);
	if (ret || sn.gen != in->snap_gen) {
		snprintf(why, n, "the snapshot of the pending restore is gone");
		return front_intent_clear(&fs->fr);
	}
	memcpy(snap, sn.name, EMB_NAME_MAX + 1);
	if (in->kind == STORE_INTENT_RESTORE) {
		uint32_t lid;
		if ((ret = table_by_gen(fs, in->table_gen, &lid, table)) == -ENOENT) {
			snprintf(why, n, "the table of the pending restore is gone");
			return front_intent_clear(&fs->fr);
		}
		if (!ret)
			ret = restore(fs, snap, table, c, why, n);
	} else {
		strcpy(table, "(all tables)");
		ret = rollback(fs, snap, c, why, n);
	}
	if (!ret)
		ret = front_sync(&fs->fr);
	if (!ret)
		ret = front_intent_clear(&fs->fr);
	return ret;
}

static void report(struct embfs *fs, int ret, const char *snap, const char *table, const struct rcount *c,
		   double ms, const char *why)
{
	snprintf(fs->restore_last, sizeof(fs->restore_last),
		 "%s %s %s: rows_examined %llu rows_rewritten %llu rows_deleted %llu ms %.1f walk %s "
		 "tables %llu created %llu unlinked %llu%s%s\n",
		 ret ? "failed" : "restored", snap, table, (unsigned long long)c->examined,
		 (unsigned long long)c->rewritten, (unsigned long long)c->deleted, ms, c->fast ? "since" : "both",
		 (unsigned long long)c->tables, (unsigned long long)c->created, (unsigned long long)c->unlinked,
		 why[0] ? " -- " : "", why);
}

static double ms_since(const struct timespec *t0)
{
	struct timespec t1;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

/* Beyond write access to .embfs/restore (the kernel's check): a restore
 * rewrites its table, so the caller must be allowed to write it; a
 * rollback creates and unlinks tables, so it needs write and search
 * permission on the root.  0, or -EACCES; a table that does not exist is
 * left to plan() to report. */
static int may_restore(fuse_req_t req, const char *table)
{
	struct embfs *fs = fs_of(req);
	struct store_attr a;
	struct fs_perm p;
	uint32_t id;
	if (!table) {
		perm_get(fs, FS_ROOT, &p);
		return perm_may(req, &p, 3);
	}
	if (front_table_lookup(&fs->fr, table, &id) || front_table_getattr(&fs->fr, id, &a))
		return 0;
	p = (struct fs_perm){ a.uid, a.gid, a.mode, 1 };
	return perm_may(req, &p, 2);
}

void restore_write(fuse_req_t req, fuse_ino_t ino, const char *data, size_t size, off_t off,
		   struct fuse_file_info *fi)
{
	(void)ino;
	(void)fi;
	struct embfs *fs = fs_of(req);
	char w[2][EMB_NAME_MAX + 1], why[600] = "", snap[EMB_NAME_MAX + 1], table[EMB_NAME_MAX + 1];
	int all = 0, ret = ctl_words(data, size, off, w, 2);
	if (ret && !(ret = ctl_words(data, size, off, w, 1)))
		all = 1; /* "SNAPSHOT" alone: the whole mount */
	if (!ret)
		ret = may_restore(req, all ? NULL : w[1]);
	if (ret) {
		fuse_reply_err(req, -ret);
		return;
	}
	if (pthread_mutex_trylock(&fs->restore_lock)) {
		fuse_reply_err(req, EBUSY); /* one restore at a time */
		return;
	}
	struct rcount c = { 0 };
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	struct store_intent in, was;
	uint32_t gate;
	snprintf(snap, sizeof(snap), "%s", w[0]);
	snprintf(table, sizeof(table), "%s", all ? "(all tables)" : w[1]);
	ret = plan(fs, w[0], all ? NULL : w[1], &in, &gate, why, sizeof(why));
	int pending = ret ? 0 : front_intent_get(&fs->fr, &was);
	if (pending < 0) {
		ret = pending;
		snprintf(why, sizeof(why), "the pool's record of a pending restore is damaged");
	} else if (pending && (was.kind != in.kind || was.snap_idx != in.snap_idx || was.snap_gen != in.snap_gen ||
			       was.table_gen != in.table_gen)) {
		ret = -EBUSY; /* another one failed midway: it must be finished first */
		snprintf(why, sizeof(why), "another restore is pending: write its request again");
	}
	if (!ret) {
		gate_close(fs, gate);
		if (!pending)
			ret = front_intent_set(&fs->fr, &in);
		if (!ret)
			ret = run(fs, &in, &c, snap, table, why, sizeof(why));
		if (!ret || !front_intent_get(&fs->fr, &was))
			gate_open(fs); /* else it stays pending: its tables keep refusing changes */
	}
	report(fs, ret, snap, table, &c, ms_since(&t0), why);
	pthread_mutex_unlock(&fs->restore_lock);
	/* a read after the reply must not get the old rows, size or mode from
	 * the kernel's caches: wait for the notifier thread to drop them */
	if (batch_inval_wait(fs, c.inval, INVAL_WAIT_S))
		fprintf(stderr, "embfs: restore %s %s: the kernel's cached pages of its tables not dropped within "
			"%d s; reads may see old rows until they are\n", snap, table, INVAL_WAIT_S);
	if (ret) {
		front_pool_failed(&fs->fr, ret);
		fuse_reply_err(req, -ret);
	} else {
		fuse_reply_write(req, size);
	}
}

int restore_recover(struct embfs *fs)
{
	struct store_intent in;
	char why[600] = "", snap[EMB_NAME_MAX + 1] = "?", table[EMB_NAME_MAX + 1] = "?";
	struct rcount c = { 0 };
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int ret = front_intent_get(&fs->fr, &in);
	if (ret <= 0)
		return ret;
	pthread_mutex_lock(&fs->restore_lock);
	ret = run(fs, &in, &c, snap, table, why, sizeof(why));
	if (!ret)
		atomic_fetch_add(&fs->n_restore_recovered, 1);
	report(fs, ret, snap, table, &c, ms_since(&t0), why);
	fprintf(stderr, "embfs: finishing a restore a crash interrupted: %s", fs->restore_last);
	if (ret) {
		uint32_t lid;
		char name[EMB_NAME_MAX + 1];
		atomic_store(&fs->restoring, in.kind == STORE_INTENT_ROLLBACK ? GATE_ALL :
				  table_by_gen(fs, in.table_gen, &lid, name) ? GATE_ALL : lid);
	}
	pthread_mutex_unlock(&fs->restore_lock);
	return ret;
}

void restore_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	(void)ino;
	(void)fi;
	struct embfs *fs = fs_of(req);
	char buf[sizeof(fs->restore_last)];
	pthread_mutex_lock(&fs->restore_lock);
	size_t n = (size_t)snprintf(buf, sizeof(buf), "%s", fs->restore_last);
	pthread_mutex_unlock(&fs->restore_lock);
	if (off < 0 || (size_t)off >= n)
		fuse_reply_buf(req, NULL, 0);
	else
		fuse_reply_buf(req, buf + off, n - (size_t)off < size ? n - (size_t)off : size);
}

/* FS_RESTORE: .embfs/restore (opened as .embfs/batch is: direct I/O) */
const struct fs_kind_ops restore_kind = {
	.open = ctl_batch_open,
	.read = restore_read,
	.write = restore_write,
};
