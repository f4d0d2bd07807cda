/*
 * .embfs/rows: its FUSE entry points and its requests (wire format:
 * include/embfs/batch.h): receiving them piece by piece, checking each part as soon as it is in, and running
 * them: SCATTER and PUSH in the WRITE that completes them, GATHER at the
 * first READ, PREFETCH handed to batch.c's thread, MULTI (one request over
 * many tables) as its parts.  State per fd: struct bfd (batch_int.h).
 */
#include <endian.h>
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "batch_int.h"

#define GROW_WAIT_S 5 /* longest wait for the kernel to drop a grown table's attributes */

/* ---- requests --------------------------------------------------------- */

/* Forget the request in flight (and the room it reserved) and the response. */
static void batch_req_reset(struct embfs *fs, struct bfd *f)
{
	front_unreserve(&fs->fr, f->t.id, f->t.row_size, f->promised);
	f->promised = 0;
	for (uint32_t i = 0; i < f->nsubs; i++)
		front_unreserve(&fs->fr, f->subs[i].t.id, f->subs[i].t.row_size, f->subs[i].promised);
	f->nsubs = 0;
	f->ids_off = 0;
	f->state = S_IDLE;
	f->err = 0;
	f->got = 0;
	f->hdr_ok = f->pre_ok = f->ids_ok = 0;
	f->resp_len = 0;
}

static int batch_req_fail(struct embfs *fs, struct bfd *f, int err)
{
	batch_req_reset(fs, f);
	f->state = S_FAILED;
	f->err = err;
	INC(fs->batch, errors, 1);
	return err;
}

static int grow(char **p, uint64_t *cap, uint64_t need)
{
	if (need <= *cap)
		return 0;
	char *n = realloc(*p, need);
	if (!n)
		return -ENOMEM;
	*p = n;
	*cap = need;
	return 0;
}

/* A little-endian double to host order. */
static double le_double(double x)
{
	uint64_t u;
	memcpy(&u, &x, 8);
	u = le64toh(u);
	memcpy(&x, &u, 8);
	return x;
}

/* The init spec at src, in host order: checked for a table of dtype. */
static int init_take(const char *src, uint32_t dtype, struct embfs_batch_init *in)
{
	memcpy(in, src, sizeof(*in));
	in->kind = le32toh(in->kind);
	in->cols = le32toh(in->cols);
	in->seed = le64toh(in->seed);
	in->p = le_double(in->p);
	in->q = le_double(in->q);
	in->fill = le_double(in->fill);
	return front_init_check(in, dtype);
}

/* The PUSH parameters at src, in host order: checked for table t. */
static int push_take(const char *src, const struct btarget *t, struct embfs_batch_push *p)
{
	memcpy(p, src, PUSH_HDR);
	p->optim = le32toh(p->optim);
	p->dim = le32toh(p->dim);
	p->step = le64toh(p->step);
	p->lr = le_double(p->lr);
	p->eps = le_double(p->eps);
	p->beta1 = le_double(p->beta1);
	p->beta2 = le_double(p->beta2);
	p->weight_decay = le_double(p->weight_decay);
	int ret = init_take(src + offsetof(struct embfs_batch_push, init), t->dtype, &p->init);
	return ret ? ret : front_push_check(p, t->dtype, t->cols);
}

/* The flags an op allows. */
static int flags_ok(uint32_t op, uint32_t flags)
{
	if (op == EMBFS_BATCH_GATHER)
		return !(flags & ~(EMBFS_BATCH_F_PRESENT | EMBFS_BATCH_F_INIT));
	return flags == 0;
}

/* Whether the caller may run op on table t: 0, -EACCES, -EROFS. */
static int may(fuse_req_t req, const struct btarget *t, uint32_t op)
{
	int changes = op == EMBFS_BATCH_SCATTER || op == EMBFS_BATCH_PUSH;
	struct fs_perm p = { t->uid, t->gid, t->mode, 1 };
	int ret = perm_may(req, &p, changes ? 2 : 4);
	if (ret)
		return ret;
	return changes && !t->writable ? -EROFS : 0;
}

/* Bytes between a part's header and its ids. */
static uint64_t pre_len(uint32_t op, uint32_t flags)
{
	if (op == EMBFS_BATCH_PUSH)
		return PUSH_HDR;
	return op == EMBFS_BATCH_GATHER && (flags & EMBFS_BATCH_F_INIT) ? INIT_LEN : 0;
}

/* ids[0..n) (little-endian in place) to host order: -EINVAL if one is
 * past the rows a table of rs can hold. */
static int ids_take(uint64_t *ids, uint32_t n, uint32_t rs)
{
	uint64_t max = front_max_row(rs); /* a row the pool can hold, within off_t */
	for (uint32_t i = 0; i < n; i++) {
		ids[i] = le64toh(ids[i]);
		if (ids[i] > max)
			return -EINVAL;
	}
	return 0;
}

/* The header of a MULTI request: its length bounds. */
static int check_multi_header(struct bfd *f)
{
	const struct embfs_batch_hdr *h = &f->h;
	if (h->table_ino || h->flags || h->count > EMBFS_BATCH_MAX_TABLES ||
	    h->total_len < HDR + SUB_LEN * h->count || h->total_len > HDR + EMBFS_BATCH_MAX_MULTI ||
	    f->got > h->total_len)
		return -EINVAL;
	return 0;
}

/* The header, once it is in: the op, the table, the caller's permission;
 * where the ids start. */
static int check_header(struct embfs *fs, fuse_req_t req, struct bfd *f)
{
	struct embfs_batch_hdr *h = &f->h;
	memcpy(h, f->req, HDR);
	h->op = le32toh(h->op);
	h->table_ino = le64toh(h->table_ino);
	h->count = le32toh(h->count);
	h->flags = le32toh(h->flags);
	h->total_len = le64toh(h->total_len);
	if (memcmp(h->magic, EMBFS_BATCH_MAGIC, 4) || h->op < EMBFS_BATCH_GATHER || h->op > EMBFS_BATCH_MULTI ||
	    !flags_ok(h->op, h->flags) || h->count == 0 ||
	    h->count > (h->op == EMBFS_BATCH_MULTI ? EMBFS_BATCH_MAX_TABLES : EMBFS_BATCH_MAX_COUNT))
		return -EINVAL;
	int ret;
	if (h->op == EMBFS_BATCH_MULTI) {
		ret = check_multi_header(f);
	} else {
		if ((ret = batch_resolve(fs, h->table_ino, &f->t)) || (ret = may(req, &f->t, h->op)))
			return ret;
		int push = h->op == EMBFS_BATCH_PUSH;
		uint64_t rows = (uint64_t)h->count * f->t.row_size;
		if (rows > EMBFS_BATCH_MAX_BYTES)
			return -EINVAL;
		f->ids_off = HDR + pre_len(h->op, h->flags);
		/* a PUSH's length is checked against its parameters once they are in */
		if (push ? h->total_len < f->ids_off + 8ull * h->count || h->total_len > MAX_TOTAL
			 : h->total_len != f->ids_off + 8ull * h->count + (h->op == EMBFS_BATCH_SCATTER ? rows : 0))
			return -EINVAL;
		if (f->got > h->total_len)
			return -EINVAL;
		f->pre_ok = f->ids_off == HDR;
	}
	if (!ret)
		ret = grow(&f->req, &f->req_cap, h->total_len);
	if (!ret)
		f->hdr_ok = 1;
	return ret;
}

/* What follows a single-table request's header, once it is in: a PUSH's
 * parameters (and the request's length is its gradients'), a GATHER's init
 * spec. */
static int check_pre(struct bfd *f)
{
	if (f->h.op == EMBFS_BATCH_GATHER)
		return init_take(f->req + HDR, f->t.dtype, &f->init);
	int ret = push_take(f->req + HDR, &f->t, &f->p);
	if (ret)
		return ret;
	uint64_t grads = (uint64_t)f->h.count * f->p.dim * sizeof(float);
	if (grads > EMBFS_BATCH_MAX_BYTES || f->h.total_len != f->ids_off + 8ull * f->h.count + grads)
		return -EINVAL;
	return 0;
}

static int check_multi(struct embfs *fs, fuse_req_t req, struct bfd *f);

/* Check what has arrived of the request: the header once it is in, what
 * sits between it and the ids, the ids once they are; a SCATTER or PUSH
 * then reserves room for its rows (like a pwrite of as many rows: a full
 * pool refuses it whole, before any row changes).  A MULTI is checked
 * whole once all of it is in. */
static int check(struct embfs *fs, fuse_req_t req, struct bfd *f)
{
	int ret = 0;
	if (!f->hdr_ok && f->got >= HDR && (ret = check_header(fs, req, f)))
		return ret;
	if (!f->hdr_ok)
		return 0;
	if (f->h.op == EMBFS_BATCH_MULTI)
		return f->got == f->h.total_len ? check_multi(fs, req, f) : 0;
	if (!f->pre_ok && f->got >= f->ids_off) {
		if ((ret = check_pre(f)))
			return ret;
		f->pre_ok = 1;
	}
	if (f->pre_ok && !f->ids_ok && f->got >= f->ids_off + 8ull * f->h.count) {
		if ((ret = ids_take((uint64_t *)(f->req + f->ids_off), f->h.count, f->t.row_size)))
			return ret;
		f->ids_ok = 1;
		int changes = f->h.op == EMBFS_BATCH_PUSH || f->h.op == EMBFS_BATCH_SCATTER;
		if (changes && fs->fr.cache) {
			if ((ret = front_reserve(&fs->fr, f->t.id, f->t.row_size, f->h.count)))
				return ret;
			f->promised = f->h.count;
		}
	}
	/* a PUSH with any NaN or Inf gradient is refused whole */
	if (f->h.op == EMBFS_BATCH_PUSH && f->ids_ok && f->got == f->h.total_len &&
	    !front_finite((const float *)(f->req + f->ids_off + 8ull * f->h.count), (size_t)f->h.count * f->p.dim))
		return -EINVAL;
	return 0;
}

/* ---- MULTI ---------------------------------------------------------------- */

/* Part i of a MULTI whose body starts at *cur: its target, checks and
 * where its ids (and gradients) are; *cur moves past it, *resp grows by
 * its answer. */
static int multi_part(struct embfs *fs, fuse_req_t req, struct bfd *f, uint32_t i, uint64_t *cur,
		      uint64_t *resp)
{
	struct embfs_batch_sub in;
	struct bsub *s = &f->subs[i];
	memcpy(&in, f->req + HDR + SUB_LEN * i, SUB_LEN);
	*s = (struct bsub){ .op = le32toh(in.op), .count = le32toh(in.count), .flags = le32toh(in.flags) };
	if ((s->op != EMBFS_BATCH_GATHER && s->op != EMBFS_BATCH_PUSH && s->op != EMBFS_BATCH_PREFETCH) ||
	    !flags_ok(s->op, s->flags) || in.reserved || s->count == 0 || s->count > EMBFS_BATCH_MAX_COUNT)
		return -EINVAL;
	int ret = batch_resolve(fs, le64toh(in.table_ino), &s->t);
	if (ret || (ret = may(req, &s->t, s->op)))
		return ret;
	for (uint32_t j = 0; j < i; j++)
		if (f->subs[j].t.id == s->t.id && f->subs[j].t.view.snap == s->t.view.snap && f->subs[j].op == s->op)
			return -EINVAL; /* a table twice for one op */
	uint64_t end = f->h.total_len, pre = pre_len(s->op, s->flags), rows = (uint64_t)s->count * s->t.row_size;
	if (*cur + pre + 8ull * s->count > end || rows > EMBFS_BATCH_MAX_BYTES)
		return -EINVAL;
	if (s->op == EMBFS_BATCH_PUSH)
		ret = push_take(f->req + *cur, &s->t, &s->p);
	else if (pre)
		ret = init_take(f->req + *cur, s->t.dtype, &s->init);
	if (ret)
		return ret;
	s->ids_off = *cur + pre;
	s->body_off = *cur = s->ids_off + 8ull * s->count;
	if ((ret = ids_take((uint64_t *)(f->req + s->ids_off), s->count, s->t.row_size)))
		return ret;
	if (s->op == EMBFS_BATCH_PUSH) {
		uint64_t nvals = (uint64_t)s->count * s->p.dim;
		if (4 * nvals > EMBFS_BATCH_MAX_BYTES || *cur + 4 * nvals > end)
			return -EINVAL;
		if (!front_finite((const float *)(f->req + *cur), nvals))
			return -EINVAL;
		*cur += 4 * nvals;
	}
	if (s->op == EMBFS_BATCH_GATHER) {
		s->resp_off = *resp;
		*resp += rows + (s->flags & EMBFS_BATCH_F_PRESENT ? (s->count + 7) / 8 : 0);
	}
	return 0;
}

/* A whole MULTI request: every part checked, room reserved for every
 * push, before anything runs. */
static int check_multi(struct embfs *fs, fuse_req_t req, struct bfd *f)
{
	uint32_t n = f->h.count;
	if (f->subs_cap < n) {
		struct bsub *p = realloc(f->subs, n * sizeof(*p));
		if (!p)
			return -ENOMEM;
		f->subs = p;
		f->subs_cap = n;
	}
	uint64_t cur = HDR + SUB_LEN * n, resp = 0;
	int ret = 0;
	for (uint32_t i = 0; i < n && !ret; i++) {
		ret = multi_part(fs, req, f, i, &cur, &resp);
		f->nsubs = i + 1; /* reset() gives back what the parts reserved */
	}
	if (!ret && (cur != f->h.total_len || resp > EMBFS_BATCH_MAX_MULTI))
		ret = -EINVAL;
	for (uint32_t i = 0; i < n && !ret; i++) {
		struct bsub *s = &f->subs[i];
		if (s->op != EMBFS_BATCH_PUSH || !fs->fr.cache)
			continue;
		ret = front_reserve(&fs->fr, s->t.id, s->t.row_size, s->count);
		if (!ret)
			s->promised = s->count;
	}
	f->resp_len = resp; /* the response's length, once gathered */
	return ret;
}

/* ---- running requests ------------------------------------------------------ */

/* Run a SCATTER or a PUSH of rows ids[0..n) of t (body: the rows, or the
 * gradients of push p), with the room promised for them. */
static int change_rows(struct embfs *fs, const struct btarget *t, uint32_t op, const uint64_t *ids, uint32_t n,
		       const struct embfs_batch_push *p, const char *body, int64_t promised)
{
	uint32_t rs = t->row_size;
	struct btarget now;
	/* checked inside the gate: a re-lay moves the table behind an inode
	 * only with the gate closed to it (relay.c) */
	int ret = restore_gate_enter(fs, t->id);
	if (!ret && (batch_resolve(fs, t->ino, &now) || now.gen != t->gen || now.row_size != rs ||
		     now.dtype != t->dtype)) {
		restore_gate_leave(fs);
		ret = -ESTALE; /* the table went away or changed geometry meanwhile */
	}
	/* pages the kernel caches must not bring the old rows back (pcache.c) */
	struct pc_scatter pcs;
	if (!ret && (ret = pc_scatter_begin(fs, &pcs, t->id, rs, ids, n)))
		restore_gate_leave(fs);
	if (ret) {
		front_unreserve(&fs->fr, t->id, rs, promised);
		return ret;
	}
	if (op == EMBFS_BATCH_PUSH)
		ret = front_push(&fs->fr, t->id, rs, t->dtype, ids, n, p, (const float *)body, promised);
	else
		ret = front_scatter(&fs->fr, t->id, rs, ids, body, n, promised);
	restore_gate_leave(fs);
	if (!ret && op == EMBFS_BATCH_PUSH) {
		INC(fs->batch, pushes, 1);
		INC(fs->batch, push_rows, n);
	} else if (!ret) {
		INC(fs->batch, scatters, 1);
		INC(fs->batch, scatter_rows, n);
	}
	pc_scatter_end(fs, &pcs);
	uint64_t seq = batch_inval(fs, t->ino); /* also after an error: some rows may have changed */
	/* the table grew (the front raised its size to cover the rows): the
	 * kernel's attributes are dropped before the reply, so that a stat
	 * after it sees the new size (the notifier thread was still on its way
	 * about half the time); bounded, as restore's wait (the size then
	 * shows when they time out) */
	struct btarget after;
	if (!batch_resolve(fs, t->ino, &after) && after.size > now.size)
		(void)batch_inval_wait(fs, seq, GROW_WAIT_S);
	return ret;
}

/* A MULTI's pushes, in order, and its prefetches. */
static int run_multi(struct embfs *fs, struct bfd *f)
{
	int gathers = 0;
	for (uint32_t i = 0; i < f->nsubs; i++) {
		struct bsub *s = &f->subs[i];
		const uint64_t *ids = (const uint64_t *)(f->req + s->ids_off);
		if (s->op == EMBFS_BATCH_PUSH) {
			int64_t promised = s->promised;
			s->promised = 0;
			int ret = change_rows(fs, &s->t, s->op, ids, s->count, &s->p, f->req + s->body_off, promised);
			if (ret)
				return ret;
		} else if (s->op == EMBFS_BATCH_PREFETCH) {
			batch_prefetch_ids(fs, f, &s->t, ids, s->count);
			INC(fs->batch, prefetches, 1);
		} else {
			gathers = 1;
		}
	}
	INC(fs->batch, multis, 1);
	f->state = gathers ? S_GATHER : S_IDLE; /* rows are copied at the first read */
	return 0;
}

/* Pack present[0..n) (0 or 1 each) into a bitmap: bit i%8 of byte i/8. */
static void pack_bits(const uint8_t *present, uint32_t n, uint8_t *bits)
{
	memset(bits, 0, (n + 7) / 8);
	for (uint32_t i = 0; i < n; i++)
		bits[i / 8] |= (uint8_t)(present[i] << (i % 8));
}

/* Rows ids[0..n) of t into out (then, with EMBFS_BATCH_F_PRESENT, the
 * presence bitmap; with F_INIT, rows not stored as init's values); rows
 * this fd prefetched are consumed (unpinned once read). */
static int gather_one(struct embfs *fs, struct bfd *f, const struct btarget *t, const uint64_t *ids, uint32_t n,
		      uint32_t flags, const struct embfs_batch_init *init, char *out)
{
	uint32_t rs = t->row_size, held;
	struct btarget now;
	int want = flags & (EMBFS_BATCH_F_PRESENT | EMBFS_BATCH_F_INIT);
	if (want && f->present_cap < n) {
		uint8_t *p = realloc(f->present, n);
		if (!p)
			return -ENOMEM;
		f->present = p;
		f->present_cap = n;
	}
	/* a user of the table while it reads it: a re-lay drops the old rows
	 * only once they have none (relay.c) */
	alias_get(fs, t->ino, &held);
	if (batch_resolve(fs, t->ino, &now) || now.gen != t->gen || now.row_size != rs) {
		alias_put(fs, held);
		return -ESTALE;
	}
	uint32_t nun = batch_pins_take(fs, f, t, ids, n);
	int ret = front_rows_get(&fs->fr, &t->view, rs, ids, n, out, want ? f->present : NULL);
	batch_pins_drop(fs, f, t->id, nun);
	alias_put(fs, held);
	if (ret)
		return ret == -ENOENT ? -ESTALE : ret; /* removed since the check */
	if (flags & EMBFS_BATCH_F_INIT)
		front_init_rows(init, t->dtype, rs, ids, n, f->present, out);
	if (flags & EMBFS_BATCH_F_PRESENT)
		pack_bits(f->present, n, (uint8_t *)out + (uint64_t)n * rs);
	INC(fs->batch, gathers, 1);
	INC(fs->batch, gather_rows, n);
	return 0;
}

static int batch_req_gather(struct embfs *fs, struct bfd *f)
{
	if (f->h.op != EMBFS_BATCH_MULTI) {
		uint32_t n = f->h.count;
		uint64_t len = (uint64_t)n * f->t.row_size + (f->h.flags & EMBFS_BATCH_F_PRESENT ? (n + 7) / 8 : 0);
		int ret = grow(&f->resp, &f->resp_cap, len);
		if (!ret)
			ret = gather_one(fs, f, &f->t, (const uint64_t *)(f->req + f->ids_off), n, f->h.flags, &f->init,
					 f->resp);
		f->resp_len = ret ? 0 : len;
		return ret;
	}
	uint64_t len = f->resp_len;
	int ret = grow(&f->resp, &f->resp_cap, len);
	for (uint32_t i = 0; i < f->nsubs && !ret; i++) {
		struct bsub *s = &f->subs[i];
		if (s->op == EMBFS_BATCH_GATHER)
			ret = gather_one(fs, f, &s->t, (const uint64_t *)(f->req + s->ids_off), s->count, s->flags,
					 &s->init, f->resp + s->resp_off);
	}
	f->resp_len = ret ? 0 : len;
	return ret;
}

/* Take one WRITE piece; run the request if it is complete. */
static int batch_req_take(struct embfs *fs, fuse_req_t req, struct bfd *f, const char *data, size_t size, off_t off)
{
	if (off == 0) {
		batch_req_reset(fs, f);
		f->state = S_RECV;
	} else if (f->state == S_FAILED) {
		/* the rest of a write that came back short: it gets the error */
		int err = f->err;
		batch_req_reset(fs, f);
		return err;
	} else if (f->state != S_RECV) {
		return batch_req_fail(fs, f, -EINVAL);
	}
	if (off < 0 || (uint64_t)off != f->got || size > REQ_MAX - f->got ||
	    (f->hdr_ok && size > f->h.total_len - f->got))
		return batch_req_fail(fs, f, -EINVAL);
	int ret = grow(&f->req, &f->req_cap, f->got + size);
	if (ret)
		return batch_req_fail(fs, f, ret);
	memcpy(f->req + f->got, data, size);
	f->got += size;
	ret = check(fs, req, f);
	if (ret)
		return batch_req_fail(fs, f, ret);
	if (!f->hdr_ok || f->got < f->h.total_len)
		return 0;
	const uint64_t *ids = (const uint64_t *)(f->req + f->ids_off);
	switch (f->h.op) {
	case EMBFS_BATCH_GATHER:
		f->state = S_GATHER; /* rows are copied at the first read */
		return 0;
	case EMBFS_BATCH_MULTI:
		ret = run_multi(fs, f);
		return ret ? batch_req_fail(fs, f, ret) : 0;
	case EMBFS_BATCH_SCATTER:
	case EMBFS_BATCH_PUSH: {
		int64_t promised = f->promised;
		f->promised = 0;
		ret = change_rows(fs, &f->t, f->h.op, ids, f->h.count, &f->p,
				  f->req + f->ids_off + 8ull * f->h.count, promised);
		if (ret)
			return batch_req_fail(fs, f, ret);
		break;
	}
	default:
		batch_prefetch_ids(fs, f, &f->t, ids, f->h.count);
		INC(fs->batch, prefetches, 1);
		break;
	}
	f->state = S_IDLE;
	return 0;
}

/* ---- FUSE entry points (ll.c dispatches .embfs/rows here) ------------ */

void batch_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	struct embfs *fs = fuse_req_userdata(req);
	struct bfd *f = batch_fd_new(fs);
	if (!f) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	fi->fh = (uintptr_t)f;
	fi->direct_io = 1; /* requests and responses bypass the page cache */
	fi->keep_cache = 0;
	if (fuse_reply_open(req, fi))
		batch_fd_close(fs, f); /* no release will come */
}

void batch_write(fuse_req_t req, fuse_ino_t ino, const char *data, size_t size, off_t off,
		 struct fuse_file_info *fi)
{
	(void)ino;
	struct embfs *fs = fuse_req_userdata(req);
	struct bfd *f = batch_fh(fi);
	INC(fs->batch, writes, 1);
	pthread_mutex_lock(&f->lock);
	int ret = batch_req_take(fs, req, f, data, size, off);
	pthread_mutex_unlock(&f->lock);
	if (ret)
		fuse_reply_err(req, -ret);
	else
		fuse_reply_write(req, size);
}

void batch_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	(void)ino;
	struct embfs *fs = fuse_req_userdata(req);
	struct bfd *f = batch_fh(fi);
	INC(fs->batch, reads, 1);
	pthread_mutex_lock(&f->lock);
	if (f->state == S_GATHER) {
		int ret = batch_req_gather(fs, f);
		if (ret)
			batch_req_fail(fs, f, ret);
		else
			f->state = S_RESP;
	}
	/* replied under the lock: a new request on this fd may not reuse resp yet */
	if (f->state == S_RESP) {
		uint64_t o = off < 0 ? UINT64_MAX : (uint64_t)off;
		if (o >= f->resp_len)
			fuse_reply_buf(req, NULL, 0);
		else
			fuse_reply_buf(req, f->resp + o, size < f->resp_len - o ? size : f->resp_len - o);
	} else if (f->state == S_FAILED) {
		fuse_reply_err(req, -f->err);
	} else if (f->state == S_RECV) {
		fuse_reply_err(req, EINVAL); /* a request is half written */
	} else {
		fuse_reply_err(req, EINVAL); /* no gather to read */
	}
	pthread_mutex_unlock(&f->lock);
}

void batch_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	struct embfs *fs = fuse_req_userdata(req);
	struct bfd *f = batch_fh(fi);
	pthread_mutex_lock(&f->lock);
	batch_req_reset(fs, f);
	pthread_mutex_unlock(&f->lock);
	batch_fd_close(fs, f);
	fuse_reply_err(req, 0);
}

/* FS_ROWS: .embfs/rows */
const struct fs_kind_ops batch_kind = {
	.open = batch_open,
	.read = batch_read,
	.write = batch_write,
	.release = batch_release,
};
