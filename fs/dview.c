/*
 * Deltas as files: .snapshots/A/.delta/B/TABLE holds exactly the rows of
 * TABLE that changed from snapshot A to the later snapshot B (the rows B
 * stores in another version than A, or that A lacks), at their offsets, as
 * a sparse file: SEEK_DATA and SEEK_HOLE walk the changed rows only, every
 * other byte reads as zero, st_blocks counts the changed rows, and the
 * size is B's.  .snapshots/A/.delta/B/.deleted/TABLE lists the rows A
 * stores and B does not (little-endian uint64 ids, ascending).  B = .live
 * is the live tables (their cached rows written back when the file is
 * opened).  .changed/TABLE lists the changed rows' ids the same way: a
 * copy of the view on a file system of 4 KiB blocks keeps the zero rows
 * next to a changed one in its data, so the list, not the copy's holes,
 * says which rows to apply.  So `cp -r --sparse=always .snapshots/A/.delta/B DIR` ships an
 * incremental checkpoint, and writing the rows and punching the deleted
 * ones onto a copy of A (at B's size) gives B.
 *
 * Which rows changed is delta.c's answer (delta_ids), computed when a file
 * is first looked at and kept for the pair of snapshots (both read-only),
 * or computed again at each open for .live (a stat of a .live file shows
 * the last open's counts).  .delta is not listed in a snapshot's directory
 * (a recursive copy or du of .snapshots would read every delta); it is
 * there to look up.  .delta lists the later snapshots and .live; a pair's
 * directory lists the tables B has under names A has too (a table A lacks
 * has no delta: copy it whole).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include "fs.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the id lists are the ids' bytes as they are");

#define DV_SLOTS 32
#define DV_LIVE_NAME ".live"
#define DV_DELETED ".deleted"
#define DV_CHANGED ".changed"
#define DV_DIR ".delta"

struct dres {
	uint64_t ino;        /* the FS_DVIEW inode */
	uint64_t a_gen, b_gen; /* A's snapshot generation; B's, or the live table's inode generation */
	uint64_t used;       /* LRU tick; protected by dv_lock */
	int refs;            /* protected by dv_lock */
	struct delta_ids d;
};

/* The names behind k (a delta's file or pair directory): A's, B's ("-" for
 * the live tables) and, for a file, its table's (B's table id k.id, which A
 * must have under the same name); the generations that key its answer. */
static int names(struct embfs *fs, struct fs_ino k, char *an, char *bn, char *tn, uint64_t *a_gen,
		 uint64_t *b_gen)
{
	struct store_snap sa, sb;
	int ret = front_snap_get(&fs->fr, k.idx, &sa);
	if (ret)
		return ret;
	memcpy(an, sa.name, EMB_NAME_MAX + 1);
	*a_gen = sa.gen;
	*b_gen = 0;
	if (k.b == DELTA_LIVE) {
		strcpy(bn, "-");
	} else {
		if ((ret = front_snap_get(&fs->fr, k.b, &sb)))
			return ret;
		if (sb.batch <= sa.batch)
			return -ENOENT; /* B is not later than A */
		memcpy(bn, sb.name, EMB_NAME_MAX + 1);
		*b_gen = sb.gen;
	}
	if (!tn)
		return 0;
	struct store_attr a;
	if (k.b == DELTA_LIVE) {
		if ((ret = front_table_getattr(&fs->fr, k.id, &a)))
			return ret;
		if (a.orphan)
			return -ENOENT;
		*b_gen = a.gen;
	} else {
		struct store_view v;
		if ((ret = front_view_snap(&fs->fr, k.b, k.id, &v)) || (ret = front_view_getattr(&fs->fr, &v, &a)))
			return ret;
	}
	memcpy(tn, a.name, EMB_NAME_MAX + 1);
	uint32_t ida;
	return front_snap_table_lookup(&fs->fr, k.idx, tn, &ida);
}

static void dres_put(struct embfs *fs, struct dres *r)
{
	if (!r)
		return;
	pthread_mutex_lock(&fs->dv_lock);
	int last = --r->refs == 0;
	pthread_mutex_unlock(&fs->dv_lock);
	if (last) {
		delta_ids_free(&r->d);
		free(r);
	}
}

/* The list a delta's id file (FS_DLIST, FS_DCHG) shows, and its length. */
static const uint64_t *list_of(const struct dres *r, enum fs_kind kind, size_t *n)
{
	*n = kind == FS_DCHG ? r->d.nch : r->d.ndel;
	return kind == FS_DCHG ? r->d.ch : r->d.del;
}

/* The answer for a delta's file (FS_DVIEW, FS_DLIST, FS_DCHG), with a reference:
 * the kept one, or (fresh, or none kept) computed and kept. */
static int dres_get(struct embfs *fs, struct fs_ino k, int fresh, struct dres **out)
{
	char an[EMB_NAME_MAX + 1], bn[EMB_NAME_MAX + 1], tn[EMB_NAME_MAX + 1];
	uint64_t ag, bg, ino = fs_ino_delta(FS_DVIEW, k.idx, k.b, k.id);
	int ret = names(fs, k, an, bn, tn, &ag, &bg);
	if (ret)
		return ret;
	pthread_mutex_lock(&fs->dv_lock);
	int slot = -1;
	for (int i = 0; i < DV_SLOTS; i++) {
		struct dres *r = fs->dv[i];
		if (r && r->ino == ino && r->a_gen == ag && r->b_gen == bg) {
			slot = i;
			if (!fresh) {
				r->refs++;
				r->used = ++fs->dv_tick;
				pthread_mutex_unlock(&fs->dv_lock);
				*out = r;
				return 0;
			}
		}
	}
	pthread_mutex_unlock(&fs->dv_lock);
	struct dres *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	*r = (struct dres){ .ino = ino, .a_gen = ag, .b_gen = bg, .refs = 2 };
	if ((ret = delta_ids(fs, an, bn, tn, &r->d))) {
		free(r);
		return ret;
	}
	pthread_mutex_lock(&fs->dv_lock);
	if (slot < 0 || fs->dv[slot] == NULL || fs->dv[slot]->ino != ino) {
		slot = 0;
		for (int i = 0; i < DV_SLOTS; i++) {
			if (!fs->dv[i]) {
				slot = i;
				break;
			}
			if (fs->dv[i]->used < fs->dv[slot]->used)
				slot = i;
		}
	}
	struct dres *old = fs->dv[slot];
	fs->dv[slot] = r;
	r->used = ++fs->dv_tick;
	pthread_mutex_unlock(&fs->dv_lock);
	dres_put(fs, old);
	*out = r;
	return 0;
}

void dview_forget_all(struct embfs *fs)
{
	for (int i = 0; i < DV_SLOTS; i++) {
		dres_put(fs, fs->dv[i]);
		fs->dv[i] = NULL;
	}
}

static void dir_stat(struct embfs *fs, uint32_t a, struct stat *st, uint64_t *gen)
{
	struct store_snap sn;
	st->st_mode = S_IFDIR | 0555;
	st->st_nlink = 2;
	if (!front_snap_get(&fs->fr, a, &sn)) {
		st->st_mtim.tv_sec = (time_t)(sn.created_ns / 1000000000u);
		st->st_mtim.tv_nsec = (long)(sn.created_ns % 1000000000u);
		*gen = sn.gen;
	}
	st->st_atim = st->st_ctim = st->st_mtim;
}

int dview_stat(struct embfs *fs, struct fs_ino k, struct stat *st, uint64_t *gen)
{
	char an[EMB_NAME_MAX + 1], bn[EMB_NAME_MAX + 1];
	uint64_t ag, bg;
	struct dres *r;
	int ret;
	switch (k.kind) {
	case FS_DDIR:
		ret = front_snap_get(&fs->fr, k.idx, &(struct store_snap){ 0 });
		if (!ret)
			dir_stat(fs, k.idx, st, gen);
		return ret;
	case FS_DPAIR:
	case FS_DDEL:
	case FS_DCHGD:
		if ((ret = names(fs, k, an, bn, NULL, &ag, &bg)))
			return ret;
		dir_stat(fs, k.idx, st, gen);
		*gen = ag * 1000003u + bg;
		return 0;
	default:
		if ((ret = dres_get(fs, k, 0, &r)))
			return ret;
		const struct store_attr *b = &r->d.b.a;
		st->st_mode = S_IFREG | 0444;
		st->st_nlink = 1;
		st->st_uid = b->uid;
		st->st_gid = b->gid;
		st->st_blksize = 65536;
		if (k.kind == FS_DVIEW) {
			st->st_size = (off_t)b->size;
			st->st_blocks = (blkcnt_t)((r->d.nch * b->row_size + 511) / 512);
		} else {
			size_t n;
			list_of(r, k.kind, &n);
			st->st_size = (off_t)(8 * n);
			st->st_blocks = (blkcnt_t)((st->st_size + 511) / 512);
		}
		st->st_mtim.tv_sec = (time_t)(b->mtime_ns / 1000000000u);
		st->st_mtim.tv_nsec = (long)(b->mtime_ns % 1000000000u);
		st->st_atim = st->st_ctim = st->st_mtim;
		*gen = r->a_gen * 1000003u + r->b_gen;
		dres_put(fs, r);
		return 0;
	}
}

/* A lookup's reply for a delta inode (its attributes from dview_stat, not
 * through fs_stat: attr.c calls this file, not the other way). */
static void reply_entry(fuse_req_t req, uint64_t ino)
{
	struct fuse_entry_param e;
	memset(&e, 0, sizeof(e));
	e.ino = ino;
	e.attr_timeout = e.entry_timeout = FS_TIMEOUT;
	e.attr.st_ino = ino;
	int ret = dview_stat(fs_of(req), fs_ino(ino), &e.attr, &e.generation);
	if (ret)
		fuse_reply_err(req, -ret);
	else
		fuse_reply_entry(req, &e);
}

void dview_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct embfs *fs = fs_of(req);
	struct fs_ino k = fs_ino(parent);
	struct store_snap sn;
	uint32_t id;
	int ret = 0;
	switch (k.kind) {
	case FS_SNAPDIR:
		reply_entry(req, fs_ino_delta(FS_DDIR, k.idx, 0, 0));
		return;
	case FS_DDIR:
		if (!strcmp(name, DV_LIVE_NAME)) {
			reply_entry(req, fs_ino_delta(FS_DPAIR, k.idx, DELTA_LIVE, 0));
			return;
		}
		if (!(ret = front_snap_lookup(&fs->fr, name, &sn))) {
			reply_entry(req, fs_ino_delta(FS_DPAIR, k.idx, sn.idx, 0));
			return;
		}
		break;
	case FS_DPAIR:
		if (!strcmp(name, DV_DELETED) || !strcmp(name, DV_CHANGED)) {
			reply_entry(req, fs_ino_delta(name[1] == 'd' ? FS_DDEL : FS_DCHGD, k.idx, k.b, 0));
			return;
		}
		/* fall through */
	case FS_DDEL:
	case FS_DCHGD:
		ret = k.b == DELTA_LIVE ? front_table_lookup(&fs->fr, name, &id)
					: front_snap_table_lookup(&fs->fr, k.b, name, &id);
		if (!ret) {
			enum fs_kind f = k.kind == FS_DPAIR ? FS_DVIEW : k.kind == FS_DDEL ? FS_DLIST : FS_DCHG;
			reply_entry(req, fs_ino_delta(f, k.idx, k.b, id));
			return;
		}
		break;
	default:
		ret = -ENOTDIR;
	}
	fuse_reply_err(req, -ret);
}

/* Offsets: 1 ".", 2 "..", 3 ".live" or ".deleted", 4 ".changed", then 16 +
 * cursor. */
void dview_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off)
{
	struct embfs *fs = fs_of(req);
	struct fs_ino k = fs_ino(ino);
	struct fs_dirbuf b;
	struct store_snap sa, sn;
	struct store_attr a;
	if (front_snap_get(&fs->fr, k.idx, &sa)) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	if (!fs_dir_begin(req, &b, size, off))
		return;
	uint64_t up = k.kind == FS_DDIR ? fs_ino_snapdir(k.idx) : k.kind == FS_DPAIR
								      ? fs_ino_delta(FS_DDIR, k.idx, 0, 0)
								      : fs_ino_delta(FS_DPAIR, k.idx, k.b, 0);
	fs_dir_add(&b, ".", ino, S_IFDIR, 1);
	fs_dir_add(&b, "..", up, S_IFDIR, 2);
	if (k.kind == FS_DDIR)
		fs_dir_add(&b, DV_LIVE_NAME, fs_ino_delta(FS_DPAIR, k.idx, DELTA_LIVE, 0), S_IFDIR, 3);
	else if (k.kind == FS_DPAIR) {
		fs_dir_add(&b, DV_DELETED, fs_ino_delta(FS_DDEL, k.idx, k.b, 0), S_IFDIR, 3);
		fs_dir_add(&b, DV_CHANGED, fs_ino_delta(FS_DCHGD, k.idx, k.b, 0), S_IFDIR, 4);
	}
	uint32_t cur = off > 16 ? (uint32_t)(off - 16) : 0, x;
	if (k.kind == FS_DDIR) {
		while (!b.full && front_snap_next(&fs->fr, &cur, &sn) == 1)
			if (sn.batch > sa.batch)
				fs_dir_add(&b, sn.name, fs_ino_delta(FS_DPAIR, k.idx, sn.idx, 0), S_IFDIR,
					   16 + (off_t)cur);
	} else {
		enum fs_kind f = k.kind == FS_DPAIR ? FS_DVIEW : k.kind == FS_DDEL ? FS_DLIST : FS_DCHG;
		while (!b.full && (k.b == DELTA_LIVE ? front_table_next(&fs->fr, &cur, &a)
						     : front_snap_table_next(&fs->fr, k.b, &cur, &a)) == 1)
			if (!front_snap_table_lookup(&fs->fr, k.idx, a.name, &x))
				fs_dir_add(&b, a.name, fs_ino_delta(f, k.idx, k.b, a.id), S_IFREG, 16 + (off_t)cur);
	}
	fs_dir_reply(&b);
}

void dview_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct embfs *fs = fs_of(req);
	struct fs_ino k = fs_ino(ino);
	struct dres *r;
	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
		fuse_reply_err(req, EROFS);
		return;
	}
	/* a .live delta is as of its open: the table's rows written back and
	 * judged again */
	int ret = dres_get(fs, k, k.b == DELTA_LIVE, &r);
	if (ret) {
		fuse_reply_err(req, -ret);
		return;
	}
	fi->fh = (uintptr_t)r;
	fi->direct_io = 1; /* the same inode's answer changes for .live */
	if (fuse_reply_open(req, fi))
		dres_put(fs, r);
}

void dview_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	dres_put(fs_of(req), (struct dres *)(uintptr_t)fi->fh);
	fuse_reply_err(req, 0);
}

/* The first index i of v[0..n) with v[i] >= x. */
static size_t lower(const uint64_t *v, size_t n, uint64_t x)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (v[mid] < x)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

#define RCHUNK 4096u

/* Bytes [off, off + len) of the view: the changed rows' bytes, zeros
 * elsewhere. */
static int view_read(struct embfs *fs, const struct dres *r, uint64_t off, size_t len, char *out)
{
	const struct delta_ids *d = &r->d;
	uint32_t rs = d->b.a.row_size;
	uint64_t end = off + len;
	memset(out, 0, len);
	size_t i = lower(d->ch, d->nch, off / rs);
	char *rows = NULL;
	uint8_t *present = NULL;
	int ret = 0;
	while (!ret && i < d->nch && d->ch[i] * rs < end) {
		size_t n = 0;
		while (i + n < d->nch && n < RCHUNK && d->ch[i + n] * rs < end)
			n++;
		if (!rows && (!(rows = malloc((size_t)RCHUNK * rs)) || !(present = malloc(RCHUNK)))) {
			ret = -ENOMEM;
			break;
		}
		ret = front_rows_read(&fs->fr, &d->b.v, d->ch + i, n, rows, present, NULL);
		for (size_t j = 0; !ret && j < n; j++) {
			uint64_t ro = d->ch[i + j] * rs, lo = ro > off ? ro : off, hi = ro + rs < end ? ro + rs : end;
			if (present[j])
				memcpy(out + (lo - off), rows + (size_t)j * rs + (lo - ro), hi - lo);
		}
		i += n;
	}
	free(rows);
	free(present);
	return ret;
}

void dview_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	struct embfs *fs = fs_of(req);
	struct dres *r = (struct dres *)(uintptr_t)fi->fh;
	enum fs_kind kind = fs_ino(ino).kind;
	size_t nl;
	const uint64_t *list = list_of(r, kind, &nl);
	uint64_t fsize = kind == FS_DVIEW ? r->d.b.a.size : 8 * nl;
	if (off < 0 || (uint64_t)off >= fsize) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	size_t len = fsize - (uint64_t)off < size ? (size_t)(fsize - (uint64_t)off) : size;
	if (kind != FS_DVIEW) {
		/* little-endian hosts (x86-64, aarch64): the ids as they are.
		 * The kernel may send RELEASE as soon as the reply is in, before
		 * this worker leaves fuse_reply_buf: hold a reference until then. */
		pthread_mutex_lock(&fs->dv_lock);
		r->refs++;
		pthread_mutex_unlock(&fs->dv_lock);
		fuse_reply_buf(req, (const char *)list + off, len);
		dres_put(fs, r);
		return;
	}
	char *buf = malloc(len);
	int ret = buf ? view_read(fs, r, (uint64_t)off, len, buf) : -ENOMEM;
	if (ret)
		fuse_reply_err(req, -ret);
	else
		fuse_reply_buf(req, buf, len);
	free(buf);
}

void dview_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence, struct fuse_file_info *fi)
{
	const struct dres *r = (const struct dres *)(uintptr_t)fi->fh;
	const struct delta_ids *d = &r->d;
	size_t nl;
	enum fs_kind kind = fs_ino(ino).kind;
	list_of(r, kind, &nl);
	int view = kind == FS_DVIEW;
	uint64_t fsize = view ? d->b.a.size : 8 * nl;
	if (whence != SEEK_DATA && whence != SEEK_HOLE) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (off < 0 || (uint64_t)off >= fsize) {
		fuse_reply_err(req, ENXIO);
		return;
	}
	uint64_t o = (uint64_t)off;
	if (!view) { /* the list has no holes */
		fuse_reply_lseek(req, whence == SEEK_DATA ? off : (off_t)fsize);
		return;
	}
	uint32_t rs = d->b.a.row_size;
	uint64_t row = o / rs;
	size_t i = lower(d->ch, d->nch, row);
	int in = i < d->nch && d->ch[i] == row;
	uint64_t pos;
	if (whence == SEEK_DATA) {
		if (in)
			pos = o;
		else if (i < d->nch)
			pos = d->ch[i] * rs;
		else {
			fuse_reply_err(req, ENXIO);
			return;
		}
	} else if (!in) {
		pos = o;
	} else {
		while (i + 1 < d->nch && d->ch[i + 1] == d->ch[i] + 1)
			i++;
		pos = (d->ch[i] + 1) * rs;
	}
	fuse_reply_lseek(req, (off_t)(pos < fsize ? pos : fsize));
}

/* FS_DDIR, FS_DPAIR, FS_DDEL, FS_DCHGD: .delta and the directories under it */
const struct fs_kind_ops dview_dir_kind = {
	.lookup = dview_lookup,
	.readdir = dview_readdir,
};

/* FS_DVIEW, FS_DLIST, FS_DCHG: a delta's files */
const struct fs_kind_ops dview_file_kind = {
	.open = dview_open,
	.read = dview_read,
	.lseek = dview_lseek,
	.release = dview_release,
};
