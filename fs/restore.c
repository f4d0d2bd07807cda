/*
 * .embfs/restore: put a live table back to its state in a snapshot, in
 * place.  Writing "SNAPSHOT TABLE" runs the restore; the write returns when
 * it is done (or with its errno).  "SNAPSHOT" alone rolls the whole mount
 * back: live tables the snapshot lacks are unlinked, its tables missing
 * from the live tree made again, and every one of its tables restored.  Reading gives the last restore's
 * outcome as one line of text.
 *
 * Only rows that differ are written.  A row differs when the live table's
 * newest version has a batch id above the snapshot's (changed or deleted
 * since: its newest version is not the one the snapshot sees) and its
 * bytes are not the snapshot's (changed back, or restored before: a
 * restored row is a new version, of the current batch), or when the
 * snapshot stores it and the live table does not.  Candidates are the rows
 * either side stores, found run by run through both seek indexes and
 * judged in chunks by their versions' batch ids (bytes are read only of
 * rows changed since); the rows that differ are rewritten with the snapshot's bytes or deleted, one
 * group commit per chunk.  Then the size and mode follow the snapshot's.
 *
 * Not atomic: each chunk's commit is, the restore as a whole is not.  A
 * crash in the middle leaves some rows restored and others not; writing
 * the same request again finishes it (a restore is idempotent).  Writes to
 * the table while it runs land before or after it, row by row.  One
 * restore at a time (EBUSY).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fs.h"

#define CHUNK CHANGES_CHUNK

struct rcount {
	uint64_t examined, rewritten, deleted;
	uint64_t tables, created, unlinked; /* a rollback's */
	int fast; /* candidates from store_rows_since, not a walk of both tables */
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
	int ret = store_rows_read(fs->st, &l->v, ids, n, NULL, sl, vl);
	if (!ret)
		ret = store_rows_read(fs->st, &s->v, ids, n, NULL, ss, NULL);
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
		ret = store_rows_read(fs->st, &s->v, put, nput, buf, NULL, NULL);
		if (!ret)
			ret = store_rows_read(fs->st, &l->v, put, nput, w->live, NULL, NULL);
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
	ret = store_rows_write(fs->st, l->v.id, ops, nops, 0);
	for (uint32_t i = 0; i < nops; i++)
		put[i] = ops[i].row;
	rows_dropped(fs, l->v.id, put, nops); /* cached copies of the old rows */
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
	int ret = store_snap_lookup(fs->st, snap, &sn);
	if (ret) {
		snprintf(why, n, "no snapshot %s", snap);
		return ret;
	}
	if ((ret = store_snap_table_lookup(fs->st, sn.idx, table, &sid))) {
		snprintf(why, n, "snapshot %s has no table %s", snap, table);
		return ret;
	}
	if ((ret = store_table_lookup(fs->st, table, &lid))) {
		snprintf(why, n, "no live table %s (create it first: it takes the snapshot's geometry)", table);
		return ret;
	}
	if ((ret = rows_sync_snap(fs, sn.idx)) || (ret = store_view_snap(fs->st, sn.idx, sid, &s.v)) ||
	    (ret = store_view_getattr(fs->st, &s.v, &s.a)))
		return ret;
	/* the store must hold every row written: its seeks and batch ids decide */
	if ((ret = rows_before_change(fs, lid)) || (ret = store_view_live(fs->st, lid, &l.v)) ||
	    (ret = store_view_getattr(fs->st, &l.v, &l.a)))
		return ret;
	if (l.a.dim != s.a.dim || l.a.dtype != s.a.dtype) {
		/* another geometry: emptied, then it takes the snapshot's */
		if ((ret = rows_truncate(fs, lid, 0)) || (ret = store_table_set_geometry(fs->st, lid, s.a.dim, s.a.dtype))) {
			snprintf(why, n, "%s: cannot take the snapshot's geometry", table);
			return ret;
		}
		rows_after_change(fs, lid, 0, UINT64_MAX);
		if ((ret = store_view_live(fs->st, lid, &l.v)) || (ret = store_view_getattr(fs->st, &l.v, &l.a)))
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
	if (ret < 0)
		return ret;
	/* the size and mode as the snapshot has them */
	if (l.a.size > s.a.size)
		ret = rows_truncate(fs, lid, s.a.size);
	else
		ret = store_table_extend(fs->st, lid, s.a.size);
	if (!ret) {
		struct store_attr set = s.a;
		ret = store_table_setattr(fs->st, lid, &set, STORE_SET_MODE);
	}
	batch_inval(fs, INO_TABLE0 + lid); /* pages the kernel holds of the old rows */
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
	while ((ret = live ? store_table_next(fs->st, &cur, &a) : store_snap_table_next(fs->st, idx, &cur, &a)) == 1) {
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
	int ret = store_table_lookup(fs->st, name, &id);
	if (!ret)
		ret = store_table_unlink(fs->st, name);
	if (ret)
		return ret;
	store_dir_touch(fs->st, STORE_DIR_ROOT);
	if (atomic_load(&fs->nlookup[id]) == 0) {
		if (store_table_snaps(fs->st, id) > 0)
			rows_before_change(fs, id);
		rows_after_change(fs, id, 0, UINT64_MAX);
		ret = store_table_release(fs->st, id);
	}
	return ret;
}

/* The attributes of table id as snapshot idx holds it. */
static int snap_attr(struct embfs *fs, uint32_t idx, uint32_t id, struct store_attr *a)
{
	struct store_view v;
	int ret = store_view_snap(fs->st, idx, id, &v);
	return ret ? ret : store_view_getattr(fs->st, &v, a);
}

/* Every table back to snapshot snap: live tables it does not have are
 * unlinked, its tables missing from the live tree are made again (its
 * mode, owner and geometry), and each is restored in place. */
static int rollback(struct embfs *fs, const char *snap, struct rcount *c, char *why, size_t n)
{
	struct store_snap sn;
	char(*live)[EMB_NAME_MAX + 1] = NULL, (*his)[EMB_NAME_MAX + 1] = NULL;
	size_t nl = 0, nh = 0;
	int ret = store_snap_lookup(fs->st, snap, &sn);
	if (ret) {
		snprintf(why, n, "no snapshot %s", snap);
		return ret;
	}
	if ((ret = names_of(fs, 1, 0, &live, &nl)) || (ret = names_of(fs, 0, sn.idx, &his, &nh)))
		goto out;
	for (size_t i = 0; !ret && i < nl; i++) {
		uint32_t x;
		if (store_snap_table_lookup(fs->st, sn.idx, live[i], &x) != -ENOENT)
			continue;
		if ((ret = unlink_table(fs, live[i])))
			snprintf(why, n, "unlinking %s (made after the snapshot)", live[i]);
		else
			c->unlinked++;
	}
	for (size_t i = 0; !ret && i < nh; i++) {
		uint32_t lid, sid;
		struct store_attr a;
		if (store_table_lookup(fs->st, his[i], &lid) == -ENOENT) {
			if ((ret = store_snap_table_lookup(fs->st, sn.idx, his[i], &sid)) ||
			    (ret = snap_attr(fs, sn.idx, sid, &a)) ||
			    (ret = store_table_create(fs->st, his[i], a.mode, a.uid, a.gid, a.dim, a.dtype, &lid))) {
				snprintf(why, n, "making %s again", his[i]);
				break;
			}
			pc_table_reset(fs, lid);
			store_dir_touch(fs->st, STORE_DIR_ROOT);
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

void restore_write(fuse_req_t req, const char *data, size_t size, off_t off)
{
	struct embfs *fs = fs_of(req);
	char w[2][EMB_NAME_MAX + 1], why[600] = "";
	int all = 0, ret = ctl_words(data, size, off, w, 2);
	if (ret && !(ret = ctl_words(data, size, off, w, 1)))
		all = 1; /* "SNAPSHOT" alone: the whole mount */
	if (ret) {
		fuse_reply_err(req, -ret);
		return;
	}
	const char *snap = w[0], *table = all ? "(all tables)" : w[1];
	if (pthread_mutex_trylock(&fs->restore_lock)) {
		fuse_reply_err(req, EBUSY); /* one restore at a time */
		return;
	}
	struct rcount c = { 0 };
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	ret = all ? rollback(fs, snap, &c, why, sizeof(why)) : restore(fs, snap, table, &c, why, sizeof(why));
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
	snprintf(fs->restore_last, sizeof(fs->restore_last),
		 "%s %s %s: rows_examined %llu rows_rewritten %llu rows_deleted %llu ms %.1f walk %s "
		 "tables %llu created %llu unlinked %llu%s%s\n",
		 ret ? "failed" : "restored", snap, table, (unsigned long long)c.examined,
		 (unsigned long long)c.rewritten, (unsigned long long)c.deleted, ms, c.fast ? "since" : "both",
		 (unsigned long long)c.tables, (unsigned long long)c.created, (unsigned long long)c.unlinked,
		 why[0] ? " -- " : "", why);
	pthread_mutex_unlock(&fs->restore_lock);
	if (ret) {
		rows_pool_failed(fs, ret);
		fuse_reply_err(req, -ret);
	} else {
		fuse_reply_write(req, size);
	}
}

void restore_read(fuse_req_t req, size_t size, off_t off)
{
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
