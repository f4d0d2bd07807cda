/*
 * .embfs/delta: which rows of a table changed between snapshot A and a
 * later snapshot B (or the live table), for incremental checkpoints.  Write
 * "A B TABLE" (B = "-": the live table, written back first), then read the
 * answer (include/embfs/delta.h): the rows whose version in B differs from
 * the one in A or that A lacks, and the rows A stores that B does not.
 *
 * Candidates come from changes.c (the rows changed since A when the live
 * table is A's and has no spill runs; else every row either side stores);
 * each is judged by the batch ids of the versions A and B see (the newest
 * version of batch <= A's is one version: B sees that same version iff its
 * batch is not above A's), and by their bytes where a batch id is unknown.
 */
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "embfs/delta.h"
#include "fs.h"

struct dfd {
	pthread_mutex_t lock; /* one request at a time; protects the rest */
	char *resp;
	size_t len;
	int err;              /* the last request's, answered to reads */
};

struct dwork {
	struct embfs *fs;
	const struct tview *a, *b;
	uint64_t ba;
	struct u64list { uint64_t *v; size_t n, cap; } ch, del;
	uint64_t va[CHANGES_CHUNK], vb[CHANGES_CHUNK];
	uint8_t sa[CHANGES_CHUNK], sb[CHANGES_CHUNK];
	char *ra, *rb; /* one row of each side, for a comparison of bytes */
};

static int push(struct u64list *l, uint64_t x)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 4096;
		uint64_t *p = realloc(l->v, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		l->v = p;
		l->cap = cap;
	}
	l->v[l->n++] = x;
	return 0;
}

/* Does row r hold the same bytes in both views? 1, 0 or -errno. */
static int same_bytes(struct dwork *w, uint64_t r)
{
	int ret = front_rows_read(&w->fs->fr, &w->a->v, &r, 1, w->ra, NULL, NULL);
	if (!ret)
		ret = front_rows_read(&w->fs->fr, &w->b->v, &r, 1, w->rb, NULL, NULL);
	return ret ? ret : !memcmp(w->ra, w->rb, w->a->a.row_size);
}

static int judge(void *arg, const uint64_t *ids, uint32_t n)
{
	struct dwork *w = arg;
	int ret = front_rows_read(&w->fs->fr, &w->a->v, ids, n, NULL, w->sa, w->va);
	if (!ret)
		ret = front_rows_read(&w->fs->fr, &w->b->v, ids, n, NULL, w->sb, w->vb);
	for (uint32_t i = 0; !ret && i < n; i++) {
		if (w->sa[i] && !w->sb[i]) {
			ret = push(&w->del, ids[i]);
		} else if (w->sb[i] && !w->sa[i]) {
			ret = push(&w->ch, ids[i]);
		} else if (w->sb[i]) {
			int same = w->vb[i] && w->va[i] ? w->vb[i] <= w->ba : same_bytes(w, ids[i]);
			if (same < 0)
				ret = same;
			else if (!same)
				ret = push(&w->ch, ids[i]);
		}
	}
	return ret;
}

/* A view of table `name` in snapshot `snap` ("-": the live table). */
static int side(struct embfs *fs, const char *snap, const char *name, struct tview *d, struct store_snap *sn,
		uint32_t *id)
{
	int ret;
	if (!strcmp(snap, "-")) {
		if ((ret = front_table_lookup(&fs->fr, name, id)) || (ret = front_before_change(&fs->fr, *id)) ||
		    (ret = front_view_live(&fs->fr, *id, &d->v)))
			return ret;
		sn->batch = UINT64_MAX;
	} else {
		if ((ret = front_snap_lookup(&fs->fr, snap, sn)) ||
		    (ret = front_snap_table_lookup(&fs->fr, sn->idx, name, id)) ||
		    (ret = front_sync_snap(&fs->fr, sn->idx)) || (ret = front_view_snap(&fs->fr, sn->idx, *id, &d->v)))
			return ret;
	}
	return front_view_getattr(&fs->fr, &d->v, &d->a);
}

void delta_ids_free(struct delta_ids *d)
{
	free(d->ch);
	free(d->del);
	d->ch = d->del = NULL;
	d->nch = d->ndel = 0;
}

int delta_ids(struct embfs *fs, const char *an, const char *bn, const char *table, struct delta_ids *out)
{
	struct tview a;
	struct store_snap sa, sb;
	uint32_t ida, idb, lid = 0;
	memset(out, 0, sizeof(*out));
	if (!strcmp(an, "-"))
		return -EINVAL; /* A is a snapshot */
	int ret = side(fs, an, table, &a, &sa, &ida);
	if (!ret)
		ret = side(fs, bn, table, &out->b, &sb, &idb);
	if (ret)
		return ret;
	struct tview *b = &out->b;
	if (sb.batch < sa.batch || a.a.row_size != b->a.row_size)
		return -EINVAL; /* B older than A, or another geometry */
	int live = !strcmp(bn, "-");
	int fast_ok = 0;
	if (live) {
		fast_ok = idb == ida && b->a.gen == a.a.gen;
		lid = idb;
	} else {
		struct store_attr la;
		fast_ok = idb == ida && b->a.gen == a.a.gen && !front_table_lookup(&fs->fr, table, &lid) &&
			  lid == ida && !front_table_getattr(&fs->fr, lid, &la) && la.gen == a.a.gen &&
			  !front_before_change(&fs->fr, lid);
	}
	struct dwork *d = calloc(1, sizeof(*d));
	char *rows = malloc(2 * (size_t)a.a.row_size);
	if (!d || !rows) {
		free(d);
		free(rows);
		return -ENOMEM;
	}
	*d = (struct dwork){ .fs = fs, .a = &a, .b = b, .ba = sa.batch, .ra = rows, .rb = rows + a.a.row_size };
	int fast;
	ret = changes_walk(fs, &a.v, &b->v, fast_ok, lid, sa.batch, judge, d, &fast);
	free(rows);
	out->ch = d->ch.v;
	out->nch = d->ch.n;
	out->del = d->del.v;
	out->ndel = d->del.n;
	out->batch_a = sa.batch;
	free(d);
	if (ret)
		delta_ids_free(out);
	return ret;
}

/* The answer to "A B TABLE" into f. */
static int delta(struct embfs *fs, char (*w)[EMB_NAME_MAX + 1], struct dfd *f)
{
	struct delta_ids d;
	int ret = delta_ids(fs, w[0], w[1], w[2], &d);
	if (ret)
		return ret;
	struct embfs_delta_hdr h = { .row_size = htole32(d.b.a.row_size), .batch_a = htole64(d.batch_a),
				     .size_b = htole64(d.b.a.size), .nchanged = htole64(d.nch),
				     .ndeleted = htole64(d.ndel) };
	memcpy(h.magic, EMBFS_DELTA_MAGIC, 4);
	size_t len = sizeof(h) + 8 * (d.nch + d.ndel);
	char *p = malloc(len);
	if (!p) {
		ret = -ENOMEM;
	} else {
		memcpy(p, &h, sizeof(h));
		uint64_t *q = (uint64_t *)(p + sizeof(h));
		for (size_t i = 0; i < d.nch; i++)
			q[i] = htole64(d.ch[i]);
		for (size_t i = 0; i < d.ndel; i++)
			q[d.nch + i] = htole64(d.del[i]);
		free(f->resp);
		f->resp = p;
		f->len = len;
	}
	delta_ids_free(&d);
	return ret;
}

void delta_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	struct dfd *f = calloc(1, sizeof(*f));
	if (!f) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	pthread_mutex_init(&f->lock, NULL);
	f->err = EINVAL; /* nothing asked yet */
	fi->fh = (uintptr_t)f;
	fi->direct_io = 1;
	if (fuse_reply_open(req, fi)) {
		pthread_mutex_destroy(&f->lock);
		free(f);
	}
}

void delta_write(fuse_req_t req, fuse_ino_t ino, const char *data, size_t size, off_t off,
		 struct fuse_file_info *fi)
{
	(void)ino;
	struct dfd *f = (struct dfd *)(uintptr_t)fi->fh;
	char w[3][EMB_NAME_MAX + 1];
	int ret = ctl_words(data, size, off, w, 3);
	pthread_mutex_lock(&f->lock);
	free(f->resp);
	f->resp = NULL;
	f->len = 0;
	if (!ret)
		ret = delta(fs_of(req), w, f);
	f->err = -ret;
	pthread_mutex_unlock(&f->lock);
	if (ret)
		fuse_reply_err(req, -ret);
	else
		fuse_reply_write(req, size);
}

void delta_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	(void)ino;
	struct dfd *f = (struct dfd *)(uintptr_t)fi->fh;
	pthread_mutex_lock(&f->lock);
	if (!f->resp)
		fuse_reply_err(req, f->err ? f->err : EINVAL);
	else if (off < 0 || (size_t)off >= f->len)
		fuse_reply_buf(req, NULL, 0);
	else
		fuse_reply_buf(req, f->resp + off, f->len - (size_t)off < size ? f->len - (size_t)off : size);
	pthread_mutex_unlock(&f->lock);
}

void delta_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	struct dfd *f = (struct dfd *)(uintptr_t)fi->fh;
	/* a READ's reply, written under f->lock, may still be leaving
	 * fuse_reply_buf when the kernel sends RELEASE: wait for it */
	pthread_mutex_lock(&f->lock);
	pthread_mutex_unlock(&f->lock);
	free(f->resp);
	pthread_mutex_destroy(&f->lock);
	free(f);
	fuse_reply_err(req, 0);
}

/* FS_DELTA: .embfs/delta */
const struct fs_kind_ops delta_kind = {
	.open = delta_open,
	.read = delta_read,
	.write = delta_write,
	.release = delta_release,
};
