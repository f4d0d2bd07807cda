/*
 * The spill tier: cold row versions on an SSD, in append-only segments.
 *
 * Placement.  The index of every row stays in the pool.  A spilled version
 * keeps its place in its row's chain as a 40-byte stub (emb_stub: the same
 * header plus the record's byte offset on the device), so a lookup always
 * knows where a row is without touching the device, and snapshots, commits
 * and reclaim see the same chains as before.  With a device attached, row
 * versions may take row_cap bytes of slabs (`high` percent of the pool); a
 * mover thread starts when they come within 1/16 of it and writes cold
 * versions out until they take `low` percent.  Cold: every version a newer
 * one replaced (only snapshots read those), and newest versions whose
 * reference bit is clear (CLOCK over a hashed array of bits that reads and
 * commits set and the mover's sweep clears).  A spilled row read from the
 * device twice within a while (the same hashed array counts) is promoted:
 * copied back into a slot, its stub freed.
 *
 * Device.  Segments of seg_size bytes, written front to back in chunks of up
 * to 1 MiB (one pwrite and one fdatasync each); a record (emb_srec header +
 * row bytes, 16-byte aligned) never straddles a 4 KiB block unless it is
 * larger than one, so a read of a row is one 4 KiB O_DIRECT read.  Each
 * record carries an XXH32 of its header and bytes; a mismatch is an EIO for
 * the read that met it (never wrong bytes) and is counted.  The pool's
 * segment table keeps each segment's state and fill exactly, and its live
 * bytes and records as hints: exact while the pool is mounted and after a
 * clean unmount, recounted from the stubs by the mover after a crash.
 *
 * Crash safety.  The mover gathers versions under commit_lock, then without
 * it: records -> device, fdatasync; then under commit_lock again the
 * segment's fill grows, and for the versions still where it found them
 * (same chain, batch and bytes) the chain change is journaled like a
 * commit (EMB_J_RELINK: row, old version, its stub): fill + journal +
 * stubs, barrier; slab bits + the 8-byte
 * ref (index value, or a link's ver or next), barrier; old slots freed,
 * journal cleared, barrier.  So no stub points at bytes that are not
 * durable, recovery keeps whichever of old and new is linked and frees the
 * other, and no commit waits for the device.  Compaction copies the live
 * records of a mostly-stale sealed segment to the open one (found under
 * commit_lock, written and fdatasync'ed without it), then under commit_lock
 * grows the fill, barrier, rewrites the loc of each stub that still points
 * at the old record with one 8-byte store, barrier, and frees the segment
 * once no reader has it
 * pinned; a crash in between leaves both copies valid and the old segment
 * still sealed.  Space a crash (or a version changed meanwhile) leaves
 * unreferenced is found by the recount and compacted away.
 *
 * Reads.  A reader resolves each row under its table's lock (shared), pins
 * the segments its stubs point into, drops the lock and reads every spilled
 * row of the request in one io_uring submission (queue depth qd, topped up
 * as reads complete).  A record whose header does not match its stub was
 * moved meanwhile: the row is resolved again.
 */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "spill.h"

uint32_t spill_rec_size(uint32_t len)
{
	return (uint32_t)((sizeof(struct emb_srec) + len + 15) & ~15u);
}

uint64_t seg_base(const struct spill *sp, uint64_t k)
{
	return EMB_SPILL_HDR + k * sp->pm->seg_size;
}

uint64_t seg_of(const struct emb_spill *pm, uint64_t loc)
{
	return loc < EMB_SPILL_HDR ? EMB_NONE : (loc - EMB_SPILL_HDR) / pm->seg_size;
}

uint32_t srec_csum(const struct emb_srec *r)
{
	struct emb_srec h = *r;
	h.csum = 0;
	XXH32_state_t *x = XXH32_createState();
	XXH32_reset(x, 0);
	XXH32_update(x, &h, sizeof(h));
	XXH32_update(x, r + 1, r->len);
	uint32_t c = XXH32_digest(x);
	XXH32_freeState(x);
	return c;
}


/* ---- segment accounting (commit_lock held, or single-threaded at mount) -- */

void seg_live_add(struct store *s, uint64_t loc, uint32_t rsz, int sign)
{
	struct emb_spill *pm = S_PTR(s, s->sb->spill_off);
	uint64_t k = pm ? seg_of(pm, loc) : EMB_NONE;
	if (k >= (pm ? pm->nsegs : 0))
		return;
	struct emb_sseg *g = &pm->seg[k];
	if (sign > 0) {
		g->live += rsz;
		g->nlive++;
	} else {
		g->live = g->live > rsz ? g->live - rsz : 0;
		g->nlive = g->nlive ? g->nlive - 1 : 0;
	}
	pm_flush(s, g, sizeof(*g));
}

/* ---- device reads ----------------------------------------------------- */


static struct io_uring *ring_get(struct spill *sp, struct ring **rp)
{
	uint32_t start = atomic_fetch_add_explicit(&sp->ring_rr, 1, memory_order_relaxed);
	for (uint32_t k = 0; k < NRINGS; k++) {
		struct ring *r = &sp->rings[(start + k) % NRINGS];
		if (r->ok && pthread_mutex_trylock(&r->lock) == 0) {
			*rp = r;
			return &r->ring;
		}
	}
	for (uint32_t k = 0; k < NRINGS; k++) {
		struct ring *r = &sp->rings[(start + k) % NRINGS];
		if (r->ok) {
			pthread_mutex_lock(&r->lock);
			*rp = r;
			return &r->ring;
		}
	}
	return NULL;
}

/* Check one record read into place; copy its row bytes out. */
static int rec_check(struct spill *sp, const char *p, struct sreq *q)
{
	const struct emb_srec *r = (const struct emb_srec *)p;
	if (r->magic != EMB_SREC_MAGIC || r->len != q->len || r->table != q->table ||
	    r->row != q->row || r->batch != q->batch)
		return -ESTALE; /* moved meanwhile, or a damaged header: the caller looks again */
	if (srec_csum(r) != r->csum) {
		atomic_fetch_add(&sp->csum_errors, 1);
		return -EIO;
	}
	memcpy(q->dst, r + 1, q->len);
	return 0;
}

/* Submit the reads of q[0..n) into buf on ring, in small groups topped
 * up to qd in flight, and reap them: res[i] each read's result.  Returns
 * how many were submitted; an error from the ring stops submitting. */
static size_t ring_reads(struct spill *sp, struct io_uring *ring, struct sreq *q, size_t n, char *buf, int *res)
{
	size_t sub = 0, done = 0, inflight = 0;
	int err = 0;
	while (done < n) {
		/* small groups: the device starts on the first reads while later
		 * ones are prepared, and completions keep the queue topped up
		 * (one big submit leaves it idle between rounds) */
		while (!err && inflight < sp->qd && sub < n) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
			if (!sqe)
				break;
			io_uring_prep_read(sqe, sp->fd, q[sub].to ? q[sub].to : buf + q[sub].boff, q[sub].span,
					   q[sub].blk);
			sqe->user_data = sub;
			sub++;
			inflight++;
			if (sub % SUBMIT_GROUP == 0)
				io_uring_submit(ring);
		}
		if (!inflight)
			break;
		int r = io_uring_submit_and_wait(ring, 1);
		if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY)
			err = r; /* stop submitting; reap what is in flight */
		struct io_uring_cqe *cqe;
		unsigned head, k = 0;
		io_uring_for_each_cqe(ring, head, cqe) {
			size_t i = (size_t)cqe->user_data;
			if (i < n)
				res[i] = cqe->res;
			k++;
		}
		io_uring_cq_advance(ring, k);
		inflight -= k;
		done += k;
		if (err && !k && inflight && io_uring_wait_cqe(ring, &cqe) != 0)
			break;
	}
	return sub;
}

/* Read q[0..n) in one io_uring submission, topped up to qd in flight. */
void device_read(struct spill *sp, struct sreq *q, size_t n)
{
	uint64_t total = 0;
	for (size_t i = 0; i < n; i++) {
		q[i].blk = q[i].loc & ~(uint64_t)(BLK - 1);
		uint64_t end = q[i].loc + sizeof(struct emb_srec) + q[i].len;
		q[i].span = (uint32_t)(((end - q[i].blk) + BLK - 1) & ~(uint64_t)(BLK - 1));
		q[i].boff = total;
		q[i].ret = -EIO;
		total += q[i].span;
	}
	char *buf = NULL;
	if (posix_memalign((void **)&buf, BLK, total)) {
		for (size_t i = 0; i < n; i++)
			q[i].ret = -ENOMEM;
		return;
	}
	struct ring *rg;
	struct io_uring *ring = ring_get(sp, &rg);
	int *res = calloc(n, sizeof(*res));
	size_t sub = ring && res ? ring_reads(sp, ring, q, n, buf, res) : 0; /* else one pread each */
	if (ring)
		pthread_mutex_unlock(&rg->lock);
	atomic_fetch_add_explicit(&sp->read_ios, sub, memory_order_relaxed);
	atomic_fetch_add_explicit(&sp->read_bytes, total, memory_order_relaxed);
	for (size_t i = 0; i < n; i++) {
		if (i >= sub || res[i] != (int)q[i].span) {
			/* no submission, or a short read (damaged device) */
			if (pread(sp->fd, buf + q[i].boff, q[i].span, (off_t)q[i].blk) != (ssize_t)q[i].span) {
				q[i].ret = -EIO;
				continue;
			}
		}
		q[i].ret = rec_check(sp, buf + q[i].boff + (q[i].loc - q[i].blk), &q[i]);
	}
	free(res);
	free(buf);
}

int device_read_raw(struct spill *sp, struct sreq *q, size_t n, char *buf)
{
	if (!n)
		return 0;
	struct ring *rg;
	struct io_uring *ring = ring_get(sp, &rg);
	int *res = calloc(n, sizeof(*res));
	size_t sub = ring && res ? ring_reads(sp, ring, q, n, buf, res) : 0;
	if (ring)
		pthread_mutex_unlock(&rg->lock);
	uint64_t total = 0;
	int ret = 0;
	for (size_t i = 0; i < n; i++) {
		total += q[i].span;
		if (i < sub && res[i] == (int)q[i].span)
			continue;
		/* no submission, or a short read (damaged device) */
		if (pread(sp->fd, q[i].to ? q[i].to : buf + q[i].boff, q[i].span, (off_t)q[i].blk) !=
		    (ssize_t)q[i].span)
			ret = -EIO;
	}
	free(res);
	atomic_fetch_add_explicit(&sp->read_ios, n, memory_order_relaxed);
	atomic_fetch_add_explicit(&sp->read_bytes, total, memory_order_relaxed);
	return ret;
}

void seg_pin(struct spill *sp, uint64_t loc, int d)
{
	uint64_t k = seg_of(sp->pm, loc);
	if (k < sp->pm->nsegs)
		atomic_fetch_add_explicit(&sp->pins[k], (uint32_t)d, memory_order_acq_rel);
}

void spill_pin(struct store *s, uint64_t loc, int d)
{
	seg_pin(s->sp, loc, d);
}

void spill_read(struct store *s, struct sreq *q, size_t n)
{
	device_read(s->sp, q, n);
	atomic_fetch_add_explicit(&s->sp->reads, n, memory_order_relaxed);
}

void spill_ver_free(struct store *s, struct stable *st, uint64_t off)
{
	spill_vers_free(s, st, &off, 1);
}

void spill_vers_free(struct store *s, struct stable *st, uint64_t *off, size_t n)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		if (!pool_range_ok(s, off[i], EMB_SMALL_SLOT, 8))
			continue;
		struct emb_version *v = S_PTR(s, off[i]);
		uint64_t kind = ld64(&v->key) & EMB_VK_KIND;
		if (kind == EMB_VK_STUB && st)
			seg_live_add(s, ((struct emb_stub *)v)->loc, spill_rec_size(st->t->row_size), -1);
		off[k++] = off[i];
	}
	ver_slots_free(s, off, k);
}

void spill_ref_free(struct store *s, struct stable *st, uint64_t ref)
{
	uint64_t off = ref_obj(ref);
	if (ref_is_link(ref) && pool_range_ok(s, off, sizeof(struct emb_link), 8)) {
		struct emb_link *l = S_PTR(s, off);
		uint64_t key = ld64(&l->key);
		/* only a sound link's version: never free what a damaged one names */
		if ((key & EMB_VK_KIND) == EMB_VK_LINK &&
		    ver_get(s, ld64(&l->ver), st->id, key & EMB_ROW_ID_MASK, st->t->row_size))
			spill_ver_free(s, st, ld64(&l->ver));
	}
	spill_ver_free(s, st, off);
}

int spill_ver_bytes_locked(struct store *s, struct stable *st, const struct emb_version *v, void *buf)
{
	uint32_t rs = st->t->row_size;
	if (!ver_stub(v)) {
		memcpy(buf, ver_data(v), rs);
		return 0;
	}
	if (!s->sp)
		return -EIO;
	struct sreq q = { .loc = ((const struct emb_stub *)v)->loc, .row = ver_row(v), .batch = ver_batch(v),
			  .len = rs, .table = st->id, .dst = buf };
	spill_read(s, &q, 1);
	if (q.ret == -ESTALE)
		spill_csum_error(s);
	return q.ret ? -EIO : 0;
}

void spill_csum_error(struct store *s)
{
	atomic_fetch_add(&s->sp->csum_errors, 1);
}

int spill_verify(struct store *s, struct stable *st, const uint64_t *stubs, size_t n)
{
	uint32_t rs = st->t->row_size;
	int bad = 0;
	if (!s->sp)
		return 0;
	for (size_t i = 0; i < n; i += 1024) {
		size_t k = n - i < 1024 ? n - i : 1024;
		struct sreq *q = calloc(k, sizeof(*q));
		char *buf = malloc(k * rs);
		if (!q || !buf) {
			free(q);
			free(buf);
			return -ENOMEM;
		}
		for (size_t j = 0; j < k; j++) {
			struct emb_stub *x = STUB(s, stubs[i + j]);
			q[j] = (struct sreq){ .loc = x->loc, .row = ver_row(&x->v), .batch = ver_batch(&x->v), .len = rs,
					      .table = st->id, .dst = buf + j * rs };
		}
		device_read(s->sp, q, k);
		for (size_t j = 0; j < k; j++)
			bad += q[j].ret != 0;
		free(q);
		free(buf);
	}
	return bad;
}

/* ---- relinking versions (journaled) -------------------------------------- */

/* ---- writing segments (the mover: round_lock) ------------------------- */

uint32_t seg_free_count(struct spill *sp)
{
	uint32_t n = 0;
	pthread_mutex_lock(&sp->mu);
	for (uint64_t k = 0; k < sp->pm->nsegs; k++)
		n += sp->pm->seg[k].state == EMB_SEG_FREE && !sp->seg_busy[k];
	pthread_mutex_unlock(&sp->mu);
	return n;
}

uint64_t seg_claim(struct spill *sp, uint32_t keep)
{
	uint64_t k = EMB_NONE;
	uint32_t nfree = 0;
	pthread_mutex_lock(&sp->mu);
	for (uint64_t i = 0; i < sp->pm->nsegs && nfree <= keep; i++)
		if (sp->pm->seg[i].state == EMB_SEG_FREE && !sp->seg_busy[i]) {
			if (k == EMB_NONE)
				k = i;
			nfree++;
		}
	if (nfree > keep)
		sp->seg_busy[k] = 1;
	else
		k = EMB_NONE;
	pthread_mutex_unlock(&sp->mu);
	return k;
}

/* Seal the open segment and open a free one.  Stub spills leave the merge
 * reserve and one more free segment, kept for compaction (which can always
 * finish with it).  0, or -ENOSPC. */
int seg_next(struct store *s, int compacting)
{
	struct spill *sp = s->sp;
	struct emb_spill *pm = sp->pm;
	uint64_t k = seg_claim(sp, compacting ? 0 : 1 + atomic_load(&sp->reserve));
	if (k == EMB_NONE)
		return -ENOSPC;
	struct emb_sseg *g = &pm->seg[k];
	pthread_mutex_lock(&sp->mu); /* seg_claim and seg_free_count read states under it */
	if (sp->open_seg >= 0)
		pm->seg[sp->open_seg].state = EMB_SEG_SEALED;
	g->fill = g->live = 0;
	g->nlive = 0;
	g->seq = ++pm->seq;
	g->state = EMB_SEG_OPEN;
	sp->seg_busy[k] = 0; /* OPEN now: no run takes it */
	pthread_mutex_unlock(&sp->mu);
	if (sp->open_seg >= 0)
		pm_flush(s, &pm->seg[sp->open_seg], 8);
	pm_flush(s, g, sizeof(*g));
	sp->open_seg = (int64_t)k;
	return pm_persist(s, &pm->seq, 8);
}

/* Make sure the open segment has `need` bytes left (for the mover's own
 * writes).  0, or -ENOSPC when the device is full. */
int seg_room(struct store *s, uint64_t need)
{
	struct spill *sp = s->sp;
	if (sp->open_seg >= 0 && sp->pm->seg_size - sp->pm->seg[sp->open_seg].fill >= need)
		return 0;
	return seg_next(s, 0);
}

/* Write wbuf[0..len) at the open segment's end, durably (fdatasync); *at:
 * its device offset.  The mover (round_lock); commit_lock need not be held
 * (no commit waits for the device): the caller then takes the bytes into the
 * fill under it (seg_grow). */
int seg_write(struct store *s, uint64_t len, uint64_t *at)
{
	struct spill *sp = s->sp;
	const struct emb_sseg *g = &sp->pm->seg[sp->open_seg];
	len = (len + BLK - 1) & ~(uint64_t)(BLK - 1);
	*at = seg_base(sp, (uint64_t)sp->open_seg) + g->fill; /* the mover's to change */
	for (uint64_t done = 0; done < len;) {
		ssize_t w = pwrite(sp->fd, sp->wbuf + done, len - done, (off_t)(*at + done));
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		done += (uint64_t)w;
	}
	if (fdatasync(sp->fd))
		return -errno;
	atomic_fetch_add_explicit(&sp->spill_writes, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&sp->spill_write_bytes, len, memory_order_relaxed);
	return 0;
}

/* The open segment's fill takes in the len bytes seg_write wrote there
 * (flushed; durable at the caller's next barrier, which must come before
 * anything points there).  The mover (round_lock), commit_lock held. */
void seg_grow(struct store *s, uint64_t len)
{
	struct spill *sp = s->sp;
	struct emb_sseg *g = &sp->pm->seg[sp->open_seg];
	g->fill += (len + BLK - 1) & ~(uint64_t)(BLK - 1);
	pm_flush(s, &g->fill, 8);
}

/* Where the next record of rsz bytes goes in wbuf: the same block unless it
 * would straddle one. */
uint64_t srec_place(uint64_t pos, uint32_t rsz)
{
	uint64_t in = pos % BLK;
	if (in && (rsz > BLK || in + rsz > BLK))
		pos += BLK - in;
	return pos;
}

void srec_put(char *at, uint32_t table, uint64_t row, uint64_t batch, const void *data, uint32_t len)
{
	struct emb_srec *r = (struct emb_srec *)at;
	*r = (struct emb_srec){ EMB_SREC_MAGIC, len, row, batch, table, 0 };
	memcpy(r + 1, data, len);
	r->csum = srec_csum(r);
}

/* ---- the mover ------------------------------------------------------- */

void device_iops_tick(struct spill *sp)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	uint64_t now = (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
	if (now - sp->iops_t >= 1000000000ull) {
		uint64_t ios = atomic_load(&sp->read_ios);
		if (sp->iops_t)
			atomic_store(&sp->read_iops, (ios - sp->iops_last) * 1000000000ull / (now - sp->iops_t));
		sp->iops_last = ios;
		sp->iops_t = now;
	}
}

/* ---- attach / detach ---------------------------------------------------- */

void spill_free(struct spill *sp)
{
	free(sp->seg_busy);
	for (uint32_t i = 0; i < NRINGS; i++)
		if (sp->rings[i].ok)
			io_uring_queue_exit(&sp->rings[i].ring);
	close(sp->fd);
	free(sp->pins);
	free((void *)sp->heat);
	free(sp->wbuf);
	free(sp->rbuf);
	free(sp);
}


static uint64_t disk_csum(const struct emb_spill_disk *d)
{
	return XXH64(d, offsetof(struct emb_spill_disk, csum), 0);
}

static int any_used(const struct emb_spill *pm)
{
	for (uint64_t k = 0; pm && k < pm->nsegs; k++)
		if (pm->seg[k].state != EMB_SEG_FREE)
			return 1;
	return 0;
}

static uint64_t seg_size_for(uint64_t size)
{
	return size >= (4ull << 30) ? 8u << 20 : size >= (256ull << 20) ? 4u << 20 : 1u << 20;
}

#define SEED_SPILL 0x5350494c4cull /* "SPILL" */

static uint64_t table_csum(const struct emb_spill *pm)
{
	return XXH64(pm, offsetof(struct emb_spill, seq), SEED_SPILL);
}

int spill_table_check(struct store *s, char *err, size_t n)
{
	uint64_t off = s->sb->spill_off;
	if (!off)
		return 0;
	const struct emb_spill *pm = S_PTR(s, off);
	if (!pool_range_ok(s, off, sizeof(*pm), 8) || memcmp(pm->magic, EMB_SPILL_MAGIC, 8) ||
	    pm->csum != table_csum(pm))
		return store_err(err, n, -EIO, "spill segment table is damaged (checksum mismatch)");
	if (!pm->nsegs || !pm->seg_size || pm->seg_size % BLK || pm->nsegs > (pm->size - EMB_SPILL_HDR) / pm->seg_size ||
	    !pool_range_ok(s, off, sizeof(*pm) + pm->nsegs * sizeof(pm->seg[0]), 8))
		return store_err(err, n, -EIO, "spill segment table is damaged (geometry)");
	for (uint64_t k = 0; k < pm->nsegs; k++) {
		const struct emb_sseg *g = &pm->seg[k];
		if (g->state > EMB_SEG_RUN || g->fill > pm->seg_size || g->fill % BLK)
			return store_err(err, n, -EIO, "spill segment table is damaged (segment %llu)",
					 (unsigned long long)k);
	}
	return 0;
}

/* Format a new spill device: header on the device, then the segment table
 * in the pool (a crash in between leaves a header naming this pool and no
 * table: formatted again next time). */
static int format(struct store *s, int fd, uint64_t size, const char *path, char *err, size_t n)
{
	volatile uint64_t seg = seg_size_for(size);
	volatile uint64_t nsegs = (size - EMB_SPILL_HDR) / seg;
	if (nsegs < 4)
		return store_err(err, n, -EINVAL, "%s: %llu bytes is too small for a spill device (at least %llu)",
			    path, (unsigned long long)size, (unsigned long long)(EMB_SPILL_HDR + 4 * seg));
	struct emb_spill_disk *d = NULL;
	if (posix_memalign((void **)&d, BLK, EMB_SPILL_HDR))
		return -ENOMEM;
	memset(d, 0, EMB_SPILL_HDR);
	memcpy(d->magic, EMB_SPILL_MAGIC, 8);
	d->version = EMB_SPILL_VERSION;
	memcpy(d->pool_uuid, s->sb->uuid, 16);
	if (getentropy(d->uuid, 16)) {
		free(d);
		return store_err(err, n, -EIO, "no entropy for a uuid");
	}
	d->size = size;
	d->seg_size = seg;
	d->nsegs = nsegs;
	d->csum = disk_csum(d);
	int ret = 0;
	if (pwrite(fd, d, EMB_SPILL_HDR, 0) != EMB_SPILL_HDR || fdatasync(fd))
		ret = store_err(err, n, -errno ? -errno : -EIO, "%s: writing the spill header: %s", path, strerror(errno));
	uint8_t uuid[16];
	memcpy(uuid, d->uuid, 16);
	free(d);
	if (ret)
		return ret;
	volatile int tret = 0;
	struct emb_super *sb = s->sb;
	pthread_mutex_lock(&s->meta_lock);
	TX_BEGIN(s->pop) {
		PMEMoid o = pmemobj_tx_zalloc(sizeof(struct emb_spill) + nsegs * sizeof(struct emb_sseg), 0);
		struct emb_spill *pm = pmemobj_direct(o);
		memcpy(pm->magic, EMB_SPILL_MAGIC, 8);
		memcpy(pm->uuid, uuid, 16);
		pm->size = size;
		pm->seg_size = seg;
		pm->nsegs = nsegs;
		pm->csum = table_csum(pm);
		pmemobj_tx_add_range_direct(&sb->spill_off, 8);
		sb->spill_off = o.off;
		super_seal_tx(s);
	} TX_ONABORT {
		tret = pm_tx_errno();
	} TX_END
	tret = pm_tx_end(s, tret);
	pthread_mutex_unlock(&s->meta_lock);
	if (tret)
		return store_err(err, n, tret, "pool has no room for the spill segment table: %s", strerror(-tret));
	return 0;
}

static int dev_size(int fd, const struct stat *st, uint64_t *size)
{
	if (S_ISBLK(st->st_mode))
		return ioctl(fd, BLKGETSIZE64, size) ? -errno : 0;
	*size = (uint64_t)st->st_size;
	return 0;
}

/* The device's path: c->path, or embfs-<pool uuid>.spill in it when it is a
 * directory. */
static void spill_path(struct store *s, const char *given, char *path, size_t n)
{
	struct stat sb;
	if (stat(given, &sb) == 0 && S_ISDIR(sb.st_mode)) {
		char u[33];
		for (int i = 0; i < 16; i++)
			snprintf(u + 2 * i, 3, "%02x", s->sb->uuid[i]);
		snprintf(path, n, "%s/embfs-%s.spill", given, u);
	} else {
		snprintf(path, n, "%s", given);
	}
}

/* The pool already has a segment table: the device must be the one it was
 * made with, at its size. */
static int check_known(struct store *s, const struct store_spill_conf *c, const char *path,
		       const struct emb_spill_disk *d, int is_spill, uint64_t size, char *err, size_t n)
{
	const struct emb_spill *pm = S_PTR(s, s->sb->spill_off);
	if (!is_spill || memcmp(d->uuid, pm->uuid, 16) || memcmp(d->pool_uuid, s->sb->uuid, 16))
		return store_err(err, n, -EINVAL, "%s is not this pool's spill device (%s)", path,
				 is_spill ? "it belongs to another pool or spill" : "no embfs spill header");
	if (size < pm->size || d->size != pm->size)
		return store_err(err, n, -EIO, "%s: spill device is %llu bytes, made with %llu", path,
				 (unsigned long long)size, (unsigned long long)pm->size);
	if (c->size && c->size != pm->size)
		return store_err(err, n, -EINVAL, "spill_size cannot change: %s was made with %llu bytes", path,
				 (unsigned long long)pm->size);
	return 0;
}

/* A device for a pool that has none: refuse another pool's or foreign data,
 * reserve the size (files), format it. */
static int make_new(struct store *s, const struct store_spill_conf *c, const char *path, int fd, int existed,
		    const struct stat *sb, const struct emb_spill_disk *d, ssize_t got, uint64_t size, char *err,
		    size_t n)
{
	int is_spill = got == EMB_SPILL_HDR && memcmp(d->magic, EMB_SPILL_MAGIC, 8) == 0;
	if (is_spill && memcmp(d->pool_uuid, s->sb->uuid, 16))
		return store_err(err, n, -EINVAL, "%s is another pool's spill device", path);
	for (ssize_t i = 0; !is_spill && i < got; i++)
		if (((const char *)d)[i])
			return store_err(err, n, -EINVAL,
					 "%s holds data that is not an embfs spill device; give a new file or a directory",
					 path);
	uint64_t want = c->size ? c->size : size;
	if (S_ISBLK(sb->st_mode) && want > size)
		return store_err(err, n, -EINVAL, "%s: spill_size is larger than the device", path);
	int ret = 0;
	if (S_ISREG(sb->st_mode) && size < want && (ret = -posix_fallocate(fd, 0, (off_t)want))) {
		store_err(err, n, ret, "%s: cannot reserve %llu bytes: %s", path, (unsigned long long)want,
			  strerror(-ret));
		if (!existed)
			unlink(path);
		return ret;
	}
	return format(s, fd, want, path, err, n);
}

/* Open the device at path and make sure it is this pool's (or make it so).
 * *fd: the descriptor opened (close it). */
static int dev_open(struct store *s, const struct store_spill_conf *c, const char *path, int *fd, char *err,
		    size_t n)
{
	struct stat sb;
	const struct emb_spill *pm = S_PTR(s, s->sb->spill_off);
	int exists = stat(path, &sb) == 0;
	if (exists && !S_ISREG(sb.st_mode) && !S_ISBLK(sb.st_mode))
		return store_err(err, n, -EINVAL, "%s: not a regular file, directory or block device", path);
	if (pm && !exists)
		return store_err(err, n, -ENOENT,
				 "spill device %s is missing: this pool keeps row versions there (made with %llu bytes)",
				 path, (unsigned long long)pm->size);
	if (!pm && !exists && !c->size)
		return store_err(err, n, -EINVAL, "%s does not exist: give -o spill_size=SIZE to create it", path);
	*fd = open(path, O_RDWR | (exists ? 0 : O_CREAT | O_EXCL), 0600);
	if (*fd < 0)
		return store_err(err, n, -errno, "%s: %s", path, strerror(errno));
	struct emb_spill_disk *d = NULL;
	if (posix_memalign((void **)&d, BLK, EMB_SPILL_HDR))
		return -ENOMEM;
	memset(d, 0, EMB_SPILL_HDR);
	uint64_t size = 0;
	fstat(*fd, &sb);
	int ret = dev_size(*fd, &sb, &size);
	if (ret) {
		free(d);
		return store_err(err, n, ret, "%s: %s", path, strerror(-ret));
	}
	ssize_t got = size >= EMB_SPILL_HDR ? pread(*fd, d, EMB_SPILL_HDR, 0) : 0;
	int is_spill = got == EMB_SPILL_HDR && memcmp(d->magic, EMB_SPILL_MAGIC, 8) == 0;
	if (is_spill && disk_csum(d) != d->csum)
		ret = store_err(err, n, -EIO, "%s: spill header is damaged (checksum mismatch)", path);
	else if (pm)
		ret = check_known(s, c, path, d, is_spill, size, err, n);
	else
		ret = make_new(s, c, path, *fd, exists, &sb, d, got, size, err, n);
	free(d);
	return ret;
}

/* The DRAM state of an attached device: buffers, rings, the open segment,
 * the watermarks (percent of the pool's heap). */
static int spill_new(struct store *s, const struct store_spill_conf *c, const char *path, int fd,
		     struct spill **out, char *err, size_t n)
{
	struct emb_spill *pm = S_PTR(s, s->sb->spill_off);
	uint32_t high = c->high ? c->high : 30, low = c->low ? c->low : 25;
	uint64_t cap = pool_heap_capacity(s);
	if (high > 95 || low >= high)
		return store_err(err, n, -EINVAL, "spill_high must be at most 95 and above spill_low (%u, %u)", high, low);
	if (cap / 100 * high < 4 * COW_ROOM)
		return store_err(err, n, -EINVAL,
				 "pool too small for a spill tier: row versions may take %llu MiB of it (spill_high=%u), at least %llu MiB are needed",
				 (unsigned long long)((cap / 100 * high) >> 20), high,
				 (unsigned long long)((4 * COW_ROOM) >> 20));
	struct spill *sp = calloc(1, sizeof(*sp));
	if (!sp)
		return -ENOMEM;
	/* reads and writes bypass the page cache where the file system allows */
	int dfd = open(path, O_RDWR | O_DIRECT);
	sp->direct = dfd >= 0;
	sp->fd = dfd >= 0 ? dfd : dup(fd);
	snprintf(sp->path, sizeof(sp->path), "%s", path);
	sp->pm = pm;
	sp->qd = c->qd ? (c->qd > 4096 ? 4096 : c->qd) : 32;
	sp->low_bytes = cap / 100 * low;
	sp->high_bytes = cap / 100 * high;
	sp->compact_bps = (uint64_t)(c->compact_mbps ? c->compact_mbps : 64) * 1000000ull;
	sp->manual = c->manual;
	sp->stubs_only = c->stubs_only;
	sp->unlocked = s->test_spill.unlocked;
	sp->list_cap = s->test_spill.run_list_cap;
	sp->order_max = s->test_spill.evict_order_max ? s->test_spill.evict_order_max : EVICT_ORDER_MAX;
	sp->bulk_always = s->test_spill.bulk_always;
	sp->part_bytes = s->test_spill.sweep_part_bytes;
	sp->whole_always = s->test_spill.whole_always;
	sp->merge_delay_ms = s->test_spill.merge_delay_ms;
	sp->merge_slow_ms = s->test_spill.merge_slow_ms;
	sp->evict_rows = s->test_spill.evict_rows;
	sp->evict_slow_ms = s->test_spill.evict_slow_ms;
	sp->all_cold = s->test_spill.all_cold;
	sp->unlocked_arg = s->test_spill.unlocked_arg;
	sp->open_seg = -1;
	sp->reserve_min = pm->nsegs / 8 > 2 ? (uint32_t)(pm->nsegs / 8) : 2;
	atomic_store(&sp->reserve, sp->reserve_min);
	sp->recount = s->recovered;
	sp->pins = calloc(pm->nsegs, sizeof(*sp->pins));
	sp->seg_busy = calloc(pm->nsegs, 1);
	sp->heat = calloc((size_t)1 << HEAT_BITS, 1);
	if (posix_memalign((void **)&sp->wbuf, BLK, CHUNK_BYTES))
		sp->wbuf = NULL;
	if (posix_memalign((void **)&sp->rbuf, BLK, pm->seg_size))
		sp->rbuf = NULL;
	for (uint32_t i = 0; i < NRINGS; i++) {
		pthread_mutex_init(&sp->rings[i].lock, NULL);
		sp->rings[i].ok = io_uring_queue_init(sp->qd, &sp->rings[i].ring, 0) == 0;
	}
	pthread_mutex_init(&sp->mu, NULL);
	pthread_mutex_init(&sp->round_lock, NULL);
	pthread_mutex_init(&sp->bulk_mu, NULL);
	sp->bulk_slot = -1;
	pthread_cond_init(&sp->cv, NULL);
	pthread_cond_init(&sp->done_cv, NULL);
	if (sp->fd < 0 || !sp->pins || !sp->seg_busy || !sp->heat || !sp->wbuf || !sp->rbuf) {
		spill_free(sp);
		return -ENOMEM;
	}
	/* appends continue in the newest open segment */
	uint64_t best_seq = 0;
	for (uint64_t k = 0; k < pm->nsegs; k++)
		if (pm->seg[k].state == EMB_SEG_OPEN && pm->seg[k].seq >= best_seq) {
			best_seq = pm->seg[k].seq;
			sp->open_seg = (int64_t)k;
		}
	*out = sp;
	return 0;
}

int device_attach(struct store *s, const struct store_spill_conf *c, char *err, size_t n)
{
	struct emb_spill *pm = S_PTR(s, s->sb->spill_off);
	if (err && n)
		err[0] = 0;
	if (!c || !c->path) {
		if (any_used(pm))
			return store_err(err, n, -ENODEV,
					 "this pool keeps row versions on a spill device (%llu bytes); mount it with -o spill=PATH",
					 (unsigned long long)pm->size);
		return 0;
	}
	char path[256];
	int fd = -1;
	struct spill *sp = NULL;
	spill_path(s, c->path, path, sizeof(path));
	int ret = dev_open(s, c, path, &fd, err, n);
	if (!ret)
		ret = spill_new(s, c, path, fd, &sp, err, n);
	if (!ret && (ret = slab_load_all(s)))
		spill_free(sp);
	if (fd >= 0)
		close(fd);
	if (ret) {
		if (err && n && !err[0])
			store_err(err, n, ret, "%s: %s", path, strerror(-ret));
		return ret;
	}
	pthread_mutex_lock(&s->space_lock);
	s->row_cap = sp->high_bytes;
	pthread_mutex_unlock(&s->space_lock);
	sp->start_bytes = s->row_cap - s->row_cap / 16;
	s->sp = sp;
	return 0;
}

void spill_detach(struct store *s)
{
	struct spill *sp = s->sp;
	if (!sp)
		return;
	pthread_mutex_lock(&s->space_lock);
	s->row_cap = 0;
	pthread_mutex_unlock(&s->space_lock);
	s->sp = NULL;
	spill_free(sp);
}

/* ---- status ------------------------------------------------------------ */

void device_stats_get(struct store *s, struct store_spill_stats *st)
{
	memset(st, 0, sizeof(*st));
	struct spill *sp = s->sp;
	uint64_t slabs;
	slab_row_usage(s, &st->pmem_row_bytes, &slabs, &st->pmem_versions);
	if (!sp)
		return;
	st->attached = 1;
	snprintf(st->path, sizeof(st->path), "%s", sp->path);
	st->qd = sp->qd;
	st->pmem_high = s->row_cap;
	st->pmem_slab_free = slabs > st->pmem_row_bytes ? slabs - st->pmem_row_bytes : 0;
	st->pmem_low = sp->low_bytes;
	/* the start as the mover sees it, earlier for writers' large requests
	 * (mover.c, mover_used: it stops as much below pmem_low) */
	uint64_t early = atomic_load_explicit(&sp->early, memory_order_relaxed);
	st->mover_start = sp->start_bytes > early ? sp->start_bytes - early : 0;
	struct emb_spill *pm = sp->pm;
	st->size = pm->size;
	st->seg_size = pm->seg_size;
	st->segs = pm->nsegs;
	st->segs_reserved = atomic_load_explicit(&sp->reserve, memory_order_relaxed);
	pthread_mutex_lock(&s->commit_lock); /* the segment table changes under it */
	st->recounting = sp->recount;
	for (uint64_t k = 0; k < pm->nsegs; k++) {
		const struct emb_sseg *g = &pm->seg[k];
		st->segs_free += g->state == EMB_SEG_FREE;
		st->segs_open += g->state == EMB_SEG_OPEN;
		if (g->state == EMB_SEG_FREE)
			st->free_bytes += pm->seg_size;
		else if (g->state == EMB_SEG_OPEN)
			st->free_bytes += pm->seg_size - g->fill;
		st->segs_sealed += g->state == EMB_SEG_SEALED;
		if (g->state == EMB_SEG_OPEN || g->state == EMB_SEG_SEALED) {
			st->footprint += g->fill;
			st->live_bytes += g->live;
			st->live_versions += g->nlive;
		}
	}
	pthread_mutex_unlock(&s->commit_lock);
	st->spilled = atomic_load(&sp->spilled);
	st->spill_writes = atomic_load(&sp->spill_writes);
	st->spill_write_bytes = atomic_load(&sp->spill_write_bytes);
	st->promoted = atomic_load(&sp->promoted);
	st->reads = atomic_load(&sp->reads);
	st->read_ios = atomic_load(&sp->read_ios);
	st->read_bytes = atomic_load(&sp->read_bytes);
	st->read_iops = atomic_load(&sp->read_iops);
	st->compacted_segs = atomic_load(&sp->compacted_segs);
	st->compact_moved = atomic_load(&sp->compact_moved);
	st->compact_bytes = atomic_load(&sp->compact_bytes);
	st->compact_seg_done = atomic_load(&sp->compact_done);
	st->compact_seg_total = atomic_load(&sp->compact_total);
	st->csum_errors = atomic_load(&sp->csum_errors);
	st->waits = atomic_load(&sp->waits);
	st->full = atomic_load(&sp->full);
	st->slabs_returned = atomic_load(&sp->shrinks);
	st->evicts_between = atomic_load(&sp->between);
}

int store_spill_seg_get(struct store *s, uint64_t k, struct store_spill_seg *g)
{
	struct spill *sp = s->sp;
	if (!sp)
		return -ENODEV;
	if (k >= sp->pm->nsegs)
		return -ERANGE;
	pthread_mutex_lock(&s->commit_lock);
	const struct emb_sseg *x = &sp->pm->seg[k];
	*g = (struct store_spill_seg){ x->state, x->nlive, x->fill, x->live };
	pthread_mutex_unlock(&s->commit_lock);
	return 0;
}
