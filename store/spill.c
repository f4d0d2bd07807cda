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
 * Crash safety.  The mover, under commit_lock: records -> device, fdatasync;
 * segment fill; then the chain change is journaled like a commit
 * (EMB_J_RELINK: row, old version, its stub): journal + stubs, barrier;
 * slab bits + the 8-byte links (index value or the newer version's prev),
 * barrier; old slots freed, journal cleared, barrier.  So no stub points at
 * bytes that are not durable, and recovery keeps whichever of old and new is
 * linked and frees the other.  Compaction copies the live records of a
 * mostly-stale sealed segment to the open one (fdatasync), rewrites each
 * stub's loc with one 8-byte store, barrier, and frees the segment once no
 * reader has it pinned; a crash in between leaves both copies valid and the
 * old segment still sealed.  Space a crash leaves unreferenced is found by
 * the recount and compacted away.
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

#include "store_int.h"

#define BLK EMB_SPILL_BLOCK
#define CHUNK_BYTES (1u << 20)     /* one device write */
#define NRINGS 4u
#define HEAT_BITS 20u
#define HEAT_REF 0x80u             /* reference bit: read or written lately */
#define HEAT_HITS 0x7fu            /* device reads of a spilled row */
#define PROMOTE_AFTER 2u
#define PQ_CAP 4096u
#define COMPACT_PIECE (256u << 10)
#define SUBMIT_GROUP 4u

struct ring {
	pthread_mutex_t lock;
	struct io_uring ring;
	int ok;
};

struct pq_ent {
	uint32_t table;
	uint64_t row;
};

struct spill {
	int fd;
	int direct;               /* O_DIRECT worked */
	char path[256];
	struct emb_spill *pm;     /* segment table, in the pool */
	uint32_t qd;
	uint64_t low_bytes, start_bytes;
	uint64_t compact_bps;
	int manual;
	struct ring rings[NRINGS];
	_Atomic uint32_t ring_rr;
	_Atomic uint32_t *pins;   /* readers inside each segment */
	_Atomic uint8_t *heat;

	/* one mover round at a time (the thread, store_spill_run, a writer's
	 * wait in manual mode): compaction reads a segment into rbuf unlocked.
	 * Taken before commit_lock. */
	pthread_mutex_t round_lock;

	/* mover state: protected by commit_lock */
	int64_t open_seg;
	char *wbuf;               /* CHUNK_BYTES, aligned */
	char *rbuf;               /* one segment, aligned (compaction) */
	uint32_t cur_table;
	size_t cur_di;
	int recount;              /* live counts are hints from before a crash */

	/* thread */
	pthread_t thr;
	int thr_started;
	pthread_mutex_t mu;       /* the fields below and the promotion queue */
	pthread_cond_t cv, done_cv;
	int stop, kicked, busy;
	uint64_t need;            /* bytes of slots the waiting writers want */
	uint64_t passes;          /* mover passes finished */
	int last_freed;           /* the last pass freed row room */
	struct pq_ent pq[PQ_CAP];
	uint32_t pq_n;

	_Atomic uint64_t spilled, spill_writes, spill_write_bytes, promoted;
	_Atomic uint64_t reads, read_ios, read_bytes, read_iops;
	_Atomic uint64_t compacted_segs, compact_moved, compact_bytes, compact_done, compact_total;
	_Atomic uint64_t csum_errors, waits, full, shrinks;
	uint64_t iops_last, iops_t;
};

uint32_t spill_rec_size(uint32_t len)
{
	return (uint32_t)((sizeof(struct emb_srec) + len + 15) & ~15u);
}

static uint64_t seg_base(const struct spill *sp, uint64_t k)
{
	return EMB_SPILL_HDR + k * sp->pm->seg_size;
}

static uint64_t seg_of(const struct emb_spill *pm, uint64_t loc)
{
	return loc < EMB_SPILL_HDR ? EMB_NONE : (loc - EMB_SPILL_HDR) / pm->seg_size;
}

static uint32_t rec_csum(const struct emb_srec *r)
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

static inline struct emb_stub *STUB(struct store *s, uint64_t off)
{
	return S_PTR(s, off);
}

static uint64_t heat_slot(uint32_t table, uint64_t row)
{
	uint64_t h = (row ^ ((uint64_t)table << 40)) * 0x9E3779B97F4A7C15ull;
	return h >> (64 - HEAT_BITS);
}

static void heat_ref(struct spill *sp, uint32_t table, uint64_t row)
{
	_Atomic uint8_t *h = &sp->heat[heat_slot(table, row)];
	if (!(atomic_load_explicit(h, memory_order_relaxed) & HEAT_REF))
		atomic_fetch_or_explicit(h, HEAT_REF, memory_order_relaxed);
}

void spill_note_write(struct store *s, uint32_t table, uint64_t row)
{
	if (s->sp)
		heat_ref(s->sp, table, row);
}

/* ---- segment accounting (commit_lock held, or single-threaded at mount) -- */

static void seg_live_add(struct store *s, uint64_t loc, uint32_t rsz, int sign)
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

void ver_free(struct store *s, uint64_t off)
{
	if (!pool_range_ok(s, off, sizeof(struct emb_stub), 8))
		return;
	struct emb_version *v = S_PTR(s, off);
	if (ver_stub(v)) {
		struct stable *st = tab_get(s, ver_table(v));
		if (st)
			seg_live_add(s, STUB(s, off)->loc, spill_rec_size(st->t->row_size), -1);
	}
	if (slab_free(s, off))
		ver_poison(s, off);
}

/* ---- device reads ----------------------------------------------------- */

struct sreq {
	uint64_t loc;
	uint64_t row, batch;
	uint32_t len, table;
	char *dst;
	size_t idx;          /* row index in the caller's request */
	uint64_t blk, boff;
	uint32_t span;
	int ret;
};

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
	if (rec_csum(r) != r->csum) {
		atomic_fetch_add(&sp->csum_errors, 1);
		return -EIO;
	}
	memcpy(q->dst, r + 1, q->len);
	return 0;
}

/* Read q[0..n) in one io_uring submission, topped up to qd in flight. */
static void device_read(struct spill *sp, struct sreq *q, size_t n)
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
	size_t sub = 0, done = 0, inflight = 0;
	int *res = calloc(n, sizeof(*res));
	if (!ring || !res) {
		for (size_t i = 0; i < n; i++) /* no ring: one pread each */
			if (pread(sp->fd, buf + q[i].boff, q[i].span, (off_t)q[i].blk) == (ssize_t)q[i].span)
				q[i].ret = rec_check(sp, buf + q[i].boff + (q[i].loc - q[i].blk), &q[i]);
		if (ring)
			pthread_mutex_unlock(&rg->lock);
		free(res);
		free(buf);
		return;
	}
	int err = 0;
	while (done < n) {
		/* submit in small groups: the device starts on the first reads
		 * while later ones are prepared, and completions keep the queue
		 * topped up (one big submit leaves it idle between rounds) */
		while (!err && inflight < sp->qd && sub < n) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
			if (!sqe)
				break;
			io_uring_prep_read(sqe, sp->fd, buf + q[sub].boff, q[sub].span, q[sub].blk);
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
		if (err && !k && inflight) {
			if (io_uring_wait_cqe(ring, &cqe) == 0)
				continue;
			break;
		}
	}
	pthread_mutex_unlock(&rg->lock);
	atomic_fetch_add_explicit(&sp->read_ios, sub, memory_order_relaxed);
	atomic_fetch_add_explicit(&sp->read_bytes, total, memory_order_relaxed);
	for (size_t i = 0; i < n; i++) {
		if (i >= sub || res[i] != (int)q[i].span) {
			/* a short read (damaged device) or no submission */
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

static void pin(struct spill *sp, uint64_t loc, int d)
{
	uint64_t k = seg_of(sp->pm, loc);
	if (k < sp->pm->nsegs)
		atomic_fetch_add_explicit(&sp->pins[k], (uint32_t)d, memory_order_acq_rel);
}

static void queue_promote(struct spill *sp, uint32_t table, uint64_t row)
{
	pthread_mutex_lock(&sp->mu);
	if (sp->pq_n < PQ_CAP)
		sp->pq[sp->pq_n++] = (struct pq_ent){ table, row };
	pthread_mutex_unlock(&sp->mu);
}

/* A spilled row was read from the device: count it towards promotion. */
static void heat_device_hit(struct spill *sp, uint32_t table, uint64_t row)
{
	_Atomic uint8_t *h = &sp->heat[heat_slot(table, row)];
	uint8_t old = atomic_load_explicit(h, memory_order_relaxed), nv;
	do {
		uint8_t hits = (uint8_t)((old & HEAT_HITS) + 1);
		nv = hits >= PROMOTE_AFTER ? HEAT_REF : (uint8_t)((old & HEAT_REF) | hits);
	} while (!atomic_compare_exchange_weak(h, &old, nv));
	if ((old & HEAT_HITS) + 1 >= PROMOTE_AFTER)
		queue_promote(sp, table, row);
}

int rows_read_ver(struct store *s, struct stable *st, const uint64_t *rows, size_t n, char *buf,
		  uint64_t b, uint8_t *stored, uint64_t *vbatch)
{
	uint32_t rs = st->t->row_size;
	struct spill *sp = s->sp;
	struct sreq one, *q = NULL;
	size_t nq = 0;
	int ret = 0;

	pthread_rwlock_rdlock(&st->lock);
	for (size_t i = 0; i < n; i++) {
		char *dst = buf ? buf + i * rs : NULL;
		struct emb_version *v;
		ret = chain_visible(s, st, rows[i], b, &v);
		if (ret)
			break; /* damaged: EIO (counted) */
		if (stored)
			stored[i] = v != NULL;
		if (vbatch)
			vbatch[i] = v ? v->batch : 0;
		if (!buf)
			continue; /* a probe: which rows are stored, not their bytes */
		if (!v) {
			memset(dst, 0, rs);
			continue;
		}
		if (!ver_stub(v)) {
			memcpy(dst, v + 1, rs);
			if (sp && b == EMB_NONE)
				heat_ref(sp, st->id, rows[i]);
			continue;
		}
		if (!sp) {
			ret = -EIO; /* cannot happen: a pool with stubs mounts only with its device */
			break;
		}
		if (!q) {
			q = n == 1 ? &one : malloc(n * sizeof(*q));
			if (!q) {
				ret = -ENOMEM;
				break;
			}
		}
		uint64_t loc = ((struct emb_stub *)v)->loc;
		q[nq++] = (struct sreq){ .loc = loc, .row = rows[i], .batch = v->batch, .len = rs,
					 .table = st->id, .dst = dst, .idx = i };
		pin(sp, loc, 1);
	}
	pthread_rwlock_unlock(&st->lock);
	if (nq && !ret) {
		device_read(sp, q, nq);
		atomic_fetch_add_explicit(&sp->reads, nq, memory_order_relaxed);
	}
	for (size_t k = 0; k < nq; k++) {
		pin(sp, q[k].loc, -1);
		/* a header that does not match: moved (look again) or damaged */
		for (int tries = 0; !ret && q[k].ret == -ESTALE && tries < 4; tries++) {
			pthread_rwlock_rdlock(&st->lock);
			struct emb_version *v;
			if (chain_visible(s, st, q[k].row, b, &v)) {
				pthread_rwlock_unlock(&st->lock);
				q[k].ret = -EIO;
				break;
			}
			if (!v || !ver_stub(v) || ((struct emb_stub *)v)->loc == q[k].loc) {
				if (!v)
					memset(q[k].dst, 0, rs);
				else if (!ver_stub(v))
					memcpy(q[k].dst, v + 1, rs);
				q[k].ret = v && ver_stub(v) ? -EIO : 0;
				if (stored)
					stored[q[k].idx] = v != NULL;
				if (vbatch)
					vbatch[q[k].idx] = v ? v->batch : 0;
				pthread_rwlock_unlock(&st->lock);
				if (q[k].ret == -EIO)
					atomic_fetch_add(&sp->csum_errors, 1);
				break;
			}
			q[k].loc = ((struct emb_stub *)v)->loc;
			q[k].batch = v->batch;
			pin(sp, q[k].loc, 1);
			pthread_rwlock_unlock(&st->lock);
			device_read(sp, &q[k], 1);
			pin(sp, q[k].loc, -1);
		}
		if (!ret && q[k].ret)
			ret = q[k].ret == -ESTALE ? -EIO : q[k].ret;
		if (!q[k].ret && b == EMB_NONE)
			heat_device_hit(sp, st->id, q[k].row);
	}
	if (q != &one)
		free(q);
	atomic_fetch_add_explicit(&s->n_rows_read, n, memory_order_relaxed);
	return ret;
}

int ver_bytes_locked(struct store *s, struct stable *st, const struct emb_version *v, void *buf)
{
	uint32_t rs = st->t->row_size;
	if (!ver_stub(v)) {
		memcpy(buf, v + 1, rs);
		return 0;
	}
	if (!s->sp)
		return -EIO;
	struct sreq q = { .loc = ((const struct emb_stub *)v)->loc, .row = v->row, .batch = v->batch,
			  .len = rs, .table = st->id, .dst = buf };
	device_read(s->sp, &q, 1);
	atomic_fetch_add_explicit(&s->sp->reads, 1, memory_order_relaxed);
	if (q.ret == -ESTALE)
		atomic_fetch_add(&s->sp->csum_errors, 1);
	return q.ret ? -EIO : 0;
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
			q[j] = (struct sreq){ .loc = x->loc, .row = x->v.row, .batch = x->v.batch, .len = rs,
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

struct rl {
	uint64_t row, old, new_, pred; /* pred: 0 = the index, EMB_NONE = no link to change */
	uint64_t loc;
	uint32_t rsz;
	int newer;                    /* victim whose stub links to this one, -1 = none */
};

/* Replace r[i].old by r[i].new_ (already written and flushed) in its chain:
 * 0, or -EIO (nothing changed) if an index entry to change is damaged.
 * commit_lock held. */
static int relink_apply(struct store *s, struct stable *st, struct rl *r, size_t n)
{
	struct emb_journal *j = s->jr;
	struct ipos *pos = calloc(n, sizeof(*pos));
	if (!pos)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		uint64_t cur;
		int ret = r[i].pred ? 0 : index_find(s, st, r[i].row, &pos[i], &cur);
		if (!ret && !r[i].pred && cur != r[i].old)
			ret = -EIO;
		if (ret) {
			free(pos);
			return ret;
		}
	}
	for (size_t i = 0; i < n; i++)
		j->rec[i] = (struct emb_jrec){ r[i].row, r[i].old, r[i].new_, st->id, 0 };
	int ret = journal_seal(s, st, EMB_J_RELINK, n, 0);
	if (ret) {
		free(pos);
		return ret;
	}

	for (size_t i = 0; i < n; i++)
		slab_mark(s, r[i].new_);
	pthread_rwlock_wrlock(&st->lock);
	for (size_t i = 0; i < n; i++) {
		if (r[i].pred == 0) {
			index_set_val(s, &pos[i], r[i].new_);
		} else if (r[i].pred != EMB_NONE) {
			struct emb_version *p = S_PTR(s, r[i].pred);
			st64(&p->prev, r[i].new_);
			pm_flush(s, &p->prev, 8);
		}
	}
	pthread_rwlock_unlock(&st->lock);
	free(pos);
	if ((ret = pm_barrier(s)))
		return ret;

	for (size_t i = 0; i < n; i++)
		ver_free(s, r[i].old);
	return journal_clear(s);
}

int relink_replay(struct store *s, struct emb_journal *j)
{
	struct stable *st = tab_get(s, j->table);
	if (!st)
		return -EIO;
	for (uint64_t i = 0; i < j->count; i++) {
		struct emb_jrec *r = &j->rec[i];
		int linked = chain_has(s, st, r->row, r->new_off);
		if (linked < 0)
			continue; /* a damaged chain: keep both (a leak, never a loss) */
		uint64_t drop = r->new_off;
		if (linked) {
			slab_mark(s, r->new_off);
			drop = chain_has(s, st, r->row, r->old_off) == 0 ? r->old_off : 0;
		}
		if (drop && slab_free(s, drop))
			ver_poison(s, drop);
	}
	return pm_barrier(s);
}

/* ---- writing segments (commit_lock held) ------------------------------ */

static uint32_t free_segs(const struct emb_spill *pm)
{
	uint32_t n = 0;
	for (uint64_t k = 0; k < pm->nsegs; k++)
		n += pm->seg[k].state == EMB_SEG_FREE;
	return n;
}

/* Seal the open segment and open a free one.  The last free segment is kept
 * for compaction (which can always finish with it).  0, or -ENOSPC. */
static int seg_next(struct store *s, int compacting)
{
	struct spill *sp = s->sp;
	struct emb_spill *pm = sp->pm;
	if (!compacting && free_segs(pm) <= 1)
		return -ENOSPC;
	uint64_t k;
	for (k = 0; k < pm->nsegs && pm->seg[k].state != EMB_SEG_FREE; k++)
		;
	if (k == pm->nsegs)
		return -ENOSPC;
	if (sp->open_seg >= 0) {
		pm->seg[sp->open_seg].state = EMB_SEG_SEALED;
		pm_flush(s, &pm->seg[sp->open_seg], 8);
	}
	struct emb_sseg *g = &pm->seg[k];
	g->fill = g->live = 0;
	g->nlive = 0;
	g->seq = ++pm->seq;
	g->state = EMB_SEG_OPEN;
	pm_flush(s, g, sizeof(*g));
	sp->open_seg = (int64_t)k;
	return pm_persist(s, &pm->seq, 8);
}

/* Make sure the open segment has `need` bytes left (for the mover's own
 * writes).  0, or -ENOSPC when the device is full. */
static int seg_room(struct store *s, uint64_t need)
{
	struct spill *sp = s->sp;
	if (sp->open_seg >= 0 && sp->pm->seg_size - sp->pm->seg[sp->open_seg].fill >= need)
		return 0;
	return seg_next(s, 0);
}

/* Append wbuf[0..len) at the open segment's end; returns its device offset. */
static int seg_write(struct store *s, uint64_t len, uint64_t *at)
{
	struct spill *sp = s->sp;
	struct emb_sseg *g = &sp->pm->seg[sp->open_seg];
	len = (len + BLK - 1) & ~(uint64_t)(BLK - 1);
	*at = seg_base(sp, (uint64_t)sp->open_seg) + g->fill;
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
	g->fill += len;
	pm_flush(s, &g->fill, 8);
	atomic_fetch_add_explicit(&sp->spill_writes, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&sp->spill_write_bytes, len, memory_order_relaxed);
	return 0;
}

/* Where the next record of rsz bytes goes in wbuf: the same block unless it
 * would straddle one. */
static uint64_t place(uint64_t pos, uint32_t rsz)
{
	uint64_t in = pos % BLK;
	if (in && (rsz > BLK || in + rsz > BLK))
		pos += BLK - in;
	return pos;
}

static void put_rec(char *at, uint32_t table, uint64_t row, uint64_t batch, const void *data, uint32_t len)
{
	struct emb_srec *r = (struct emb_srec *)at;
	*r = (struct emb_srec){ EMB_SREC_MAGIC, len, row, batch, table, 0 };
	memcpy(r + 1, data, len);
	r->csum = rec_csum(r);
}

/* Reference bit set: clear it and say so (second chance). */
static int heat_test_clear(struct spill *sp, uint32_t table, uint64_t row)
{
	_Atomic uint8_t *h = &sp->heat[heat_slot(table, row)];
	if (!(atomic_load_explicit(h, memory_order_relaxed) & HEAT_REF))
		return 0;
	atomic_fetch_and_explicit(h, (uint8_t)~HEAT_REF, memory_order_relaxed);
	return 1;
}

/* Spill cold versions of one table from index position *di on: one device
 * write, one relink.  *moved: versions spilled.  commit_lock held. */
static int spill_chunk(struct store *s, struct stable *st, size_t *di, int all, size_t *moved)
{
	struct spill *sp = s->sp;
	uint32_t rs = st->t->row_size, rsz = spill_rec_size(rs);
	uint32_t need = rsz > BLK ? (rsz + BLK - 1) & ~(BLK - 1) : BLK;
	*moved = 0;
	int ret = seg_room(s, need);
	if (ret)
		return ret;
	uint64_t cap = sp->pm->seg_size - sp->pm->seg[sp->open_seg].fill;
	if (cap > CHUNK_BYTES)
		cap = CHUNK_BYTES;
	size_t maxv = EMB_JOURNAL_CAP;
	struct rl *v = malloc(maxv * sizeof(*v));
	if (!v)
		return -ENOMEM;
	memset(sp->wbuf, 0, cap);
	size_t nv = 0;
	uint64_t pos = 0;
	int full = 0;

	pthread_rwlock_rdlock(&st->lock);
	size_t ndir = st->segs ? (size_t)1 << st->gd : 0;
	while (*di < ndir && !full) {
		struct emb_seg *seg = st->segs[*di];
		for (unsigned bi = 0; bi < EMB_SEG_BUCKETS && !full; bi++) {
			struct emb_bucket *b = &seg->bucket[bi];
			if (index_bucket_check(s, b))
				continue; /* damaged: its rows stay */
			uint64_t m = ld64(&b->ctl) & EMB_CTL_VALID_MASK;
			while (m && !full) {
				int si = __builtin_ctzll(m);
				m &= m - 1;
				uint64_t row = ld64(&b->slot[si].key);
				int newer = -1;
				struct chain c;
				/* versions of a damaged chain move up to the damage */
				int cr = chain_start(s, st, row, ld64(&b->slot[si].val), &c);
				for (int k = 0; !cr && c.v; k++) {
					struct emb_version *x = c.v;
					int take = !ver_stub(x) && !ver_tomb(x) &&
						   (k > 0 || all || !heat_test_clear(sp, st->id, row));
					if (take) {
						uint64_t at = place(pos, rsz);
						if (at + rsz > cap || nv == maxv) {
							full = 1;
							break;
						}
						put_rec(sp->wbuf + at, st->id, row, x->batch, x + 1, rs);
						v[nv] = (struct rl){ row, c.off, 0, c.pred, at, rsz, newer };
						newer = (int)nv++;
						pos = at + rsz;
					} else {
						newer = -1;
					}
					cr = chain_step(&c);
				}
			}
		}
		if (!full)
			*di += (size_t)1 << (st->gd - seg->local_depth);
	}
	pthread_rwlock_unlock(&st->lock);
	if (!nv) {
		free(v);
		return 0;
	}

	uint64_t at;
	ret = seg_write(s, pos, &at);
	uint32_t stub_cls;
	if (!ret)
		ret = slab_class_stub(s, &stub_cls);
	for (size_t i = 0; !ret && i < nv; i++) {
		ret = slab_alloc(s, stub_cls, &v[i].new_);
		if (ret) {
			while (i-- > 0)
				slab_unreserve(s, v[i].new_);
			atomic_fetch_add(&sp->full, 1);
		}
	}
	if (ret) {
		free(v);
		return ret; /* what was written is unreferenced: compaction takes it */
	}
	for (size_t i = 0; i < nv; i++) {
		struct emb_version *o = S_PTR(s, v[i].old);
		struct emb_stub *n = STUB(s, v[i].new_);
		n->v = *o;
		n->v.table |= EMB_VER_SPILL;
		ver_seal(&n->v, rs);
		n->loc = at + v[i].loc;
		v[i].loc = n->loc;
	}
	for (size_t i = 0; i < nv; i++) {
		if (v[i].newer >= 0) { /* the newer version moves too: link its stub to ours */
			STUB(s, v[v[i].newer].new_)->v.prev = v[i].new_;
			v[i].pred = EMB_NONE;
		}
	}
	for (size_t i = 0; i < nv; i++)
		pm_flush(s, STUB(s, v[i].new_), sizeof(struct emb_stub));
	ret = relink_apply(s, st, v, nv);
	if (ret) {
		for (size_t i = 0; i < nv; i++)
			slab_unreserve(s, v[i].new_);
		free(v);
		return ret;
	}
	for (size_t i = 0; i < nv; i++)
		seg_live_add(s, v[i].loc, rsz, 1);
	atomic_fetch_add_explicit(&sp->spilled, nv, memory_order_relaxed);
	*moved = nv;
	free(v);
	return 0;
}

/* Move the listed versions of st (offsets, all in PMem) out of their slots:
 * row versions to the device behind stubs, tombstones into stub-sized
 * slots.  Versions of a row already moved in this call wait for the next
 * round.  commit_lock held. */
static int move_listed(struct store *s, struct stable *st, uint64_t *offs, size_t n)
{
	struct spill *sp = s->sp;
	uint32_t rs = st->t->row_size, rsz = spill_rec_size(rs);
	uint32_t need = rsz > BLK ? (rsz + BLK - 1) & ~(BLK - 1) : BLK;
	uint32_t stub_cls;
	int ret = slab_class_stub(s, &stub_cls);
	struct rl *v = malloc(EMB_JOURNAL_CAP * sizeof(*v));
	uint64_t *seen = malloc(EMB_JOURNAL_CAP * sizeof(*seen));
	if (!v || !seen)
		ret = -ENOMEM;
	size_t left = n;
	while (!ret && left) {
		if ((ret = seg_room(s, need)))
			break;
		uint64_t cap = sp->pm->seg_size - sp->pm->seg[sp->open_seg].fill;
		if (cap > CHUNK_BYTES)
			cap = CHUNK_BYTES;
		memset(sp->wbuf, 0, cap);
		size_t nv = 0, keep = 0;
		uint64_t pos = 0;
		for (size_t i = 0; i < left; i++) {
			struct emb_version *x = S_PTR(s, offs[i]);
			uint64_t at = place(pos, rsz);
			int dup = 0;
			for (size_t k = 0; k < nv && !dup; k++)
				dup = seen[k] == x->row;
			if (dup || nv == EMB_JOURNAL_CAP || (!ver_tomb(x) && at + rsz > cap)) {
				offs[keep++] = offs[i];
				continue;
			}
			/* its place in the chain, which validates it */
			uint64_t pred = EMB_NONE, head;
			struct chain c;
			int cr = index_get(s, st, x->row, &head);
			if (!cr)
				cr = chain_start(s, st, x->row, head, &c);
			while (!cr && c.v) {
				if (c.off == offs[i]) {
					pred = c.pred;
					break;
				}
				cr = chain_step(&c);
			}
			if (pred == EMB_NONE)
				continue; /* not linked (or damaged): not ours to move */
			seen[nv] = x->row;
			v[nv] = (struct rl){ x->row, offs[i], 0, pred, EMB_NONE, rsz, -1 };
			if (!ver_tomb(x)) {
				put_rec(sp->wbuf + at, st->id, x->row, x->batch, x + 1, rs);
				v[nv].loc = at;
				pos = at + rsz;
			}
			nv++;
		}
		left = keep;
		if (!nv)
			break;
		uint64_t base = 0;
		if (pos && (ret = seg_write(s, pos, &base)))
			break;
		for (size_t i = 0; !ret && i < nv; i++) {
			ret = slab_alloc(s, stub_cls, &v[i].new_);
			if (ret)
				while (i-- > 0)
					slab_unreserve(s, v[i].new_);
		}
		if (ret)
			break;
		for (size_t i = 0; i < nv; i++) {
			struct emb_stub *ns = STUB(s, v[i].new_);
			ns->v = *(struct emb_version *)S_PTR(s, v[i].old);
			ns->loc = 0;
			if (v[i].loc != EMB_NONE) {
				ns->v.table |= EMB_VER_SPILL;
				ns->loc = v[i].loc = base + v[i].loc;
			}
			ver_seal(&ns->v, rs);
			pm_flush(s, ns, sizeof(*ns));
		}
		ret = relink_apply(s, st, v, nv);
		if (ret) {
			for (size_t i = 0; i < nv; i++)
				slab_unreserve(s, v[i].new_);
			break;
		}
		for (size_t i = 0; i < nv; i++)
			if (v[i].loc != EMB_NONE)
				seg_live_add(s, v[i].loc, rsz, 1);
		atomic_fetch_add_explicit(&sp->spilled, nv, memory_order_relaxed);
	}
	free(v);
	free(seen);
	return ret;
}

/* The heap is full while row slabs hold free slots: empty the row slab with
 * the fewest versions (they move to the device) and give it back, so that
 * stubs and the index can grow.  commit_lock held. */
static int shrink_rows(struct store *s)
{
	struct u64vec used = { 0 };
	struct sslab *sl = slab_pick_victim(s, &used);
	int ret = sl ? 0 : -ENOSPC;
	/* group by table: versions of one slab belong to tables of one row size */
	while (!ret && used.n) {
		uint32_t t = ver_table((struct emb_version *)S_PTR(s, used.v[0]));
		size_t k = 0, m = 0;
		for (size_t i = 0; i < used.n; i++) {
			uint64_t o = used.v[i];
			if (ver_table((struct emb_version *)S_PTR(s, o)) == t)
				used.v[k++] = o;
			else
				used.v[used.n - 1 - m++] = o; /* others to the back, kept */
		}
		struct stable *st = tab_get(s, t);
		if (!st) {
			ret = -EIO;
			break;
		}
		/* the others sit at the back in reverse; bring them forward after */
		ret = move_listed(s, st, used.v, k);
		memmove(used.v, used.v + used.n - m, m * sizeof(used.v[0]));
		used.n = m;
	}
	if (!ret)
		ret = slab_give_back(s, sl);
	free(used.v);
	if (!ret)
		s->sp->start_bytes = s->row_cap - s->row_cap / 16;
	return ret;
}

/* ---- the mover ------------------------------------------------------- */

static uint64_t row_usage(struct store *s)
{
	uint64_t used, slabs, nv;
	slab_row_usage(s, &used, &slabs, &nv);
	return used;
}

/* How far a pass spills: to the low watermark, and lower if a writer waits
 * for `need` bytes of slots (a class keeps up to 4 MiB of copy-on-write
 * headroom on top of what it promises). */
#define COW_ROOM (4ull << 20)
static uint64_t pass_target(struct store *s, uint64_t need)
{
	uint64_t lim = s->row_cap > COW_ROOM + need ? s->row_cap - COW_ROOM - need : 0;
	return lim < s->sp->low_bytes ? lim : s->sp->low_bytes;
}

/* Spill until row versions take target bytes (all: everything spillable).
 * Returns versions moved or -errno.  Takes commit_lock chunk by chunk. */
static int64_t spill_pass(struct store *s, int all, uint64_t target)
{
	struct spill *sp = s->sp;
	int64_t moved = 0;
	int ret = 0;
	uint32_t wraps = 0;
	pthread_mutex_lock(&s->commit_lock);
	if (all) { /* one whole sweep */
		sp->cur_table = 0;
		sp->cur_di = 0;
	}
	uint32_t start_table = sp->cur_table;
	while (all || row_usage(s) > target) {
		struct stable *st = tab_get(s, sp->cur_table);
		size_t n = 0;
		if (st)
			ret = spill_chunk(s, st, &sp->cur_di, all, &n);
		if (ret)
			break;
		moved += (int64_t)n;
		size_t ndir = st && st->segs ? (size_t)1 << st->gd : 0;
		if (!st || sp->cur_di >= ndir) {
			sp->cur_di = 0;
			sp->cur_table = (sp->cur_table + 1) % EMB_NTABLES;
			if (sp->cur_table == start_table && ++wraps >= (all ? 1u : 2u))
				break; /* two sweeps: every reference bit had its second chance */
		}
		if (n) { /* let commits in between chunks */
			pthread_mutex_unlock(&s->commit_lock);
			pthread_mutex_lock(&s->commit_lock);
		}
	}
	pthread_mutex_unlock(&s->commit_lock);
	return ret ? ret : moved;
}

static int promote(struct store *s)
{
	struct spill *sp = s->sp;
	struct pq_ent q[PQ_CAP];
	pthread_mutex_lock(&sp->mu);
	uint32_t n = sp->pq_n;
	memcpy(q, sp->pq, n * sizeof(q[0]));
	sp->pq_n = 0;
	pthread_mutex_unlock(&sp->mu);
	int done = 0;
	pthread_mutex_lock(&s->commit_lock);
	for (uint32_t i = 0; i < n; i++) {
		/* only below the mover's start: hot rows come in, the mover
		 * sends cold ones out */
		if (row_usage(s) + COW_ROOM / 4 > sp->start_bytes)
			break;
		struct stable *st = tab_get(s, q[i].table);
		if (!st)
			continue;
		uint64_t head;
		struct chain c;
		if (index_get(s, st, q[i].row, &head) || chain_start(s, st, q[i].row, head, &c))
			continue;
		struct emb_version *v = c.v;
		if (!v || !ver_stub(v) || ver_tomb(v))
			continue;
		uint32_t cls;
		uint64_t off;
		if (slab_class_for(s, st->t->row_size, &cls) || slab_alloc(s, cls, &off))
			break;
		struct emb_version *nv = S_PTR(s, off);
		if (ver_bytes_locked(s, st, v, nv + 1)) {
			slab_unreserve(s, off);
			continue;
		}
		nv->row = v->row;
		nv->batch = v->batch;
		nv->prev = v->prev;
		nv->table = v->table & ~EMB_VER_SPILL;
		ver_seal(nv, st->t->row_size);
		pm_flush(s, nv, sizeof(*nv) + st->t->row_size);
		struct rl r = { q[i].row, head, off, 0, 0, 0, -1 };
		if (relink_apply(s, st, &r, 1)) {
			slab_unreserve(s, off);
			continue;
		}
		heat_ref(sp, st->id, q[i].row);
		done++;
	}
	pthread_mutex_unlock(&s->commit_lock);
	atomic_fetch_add(&sp->promoted, (uint64_t)done);
	return done;
}

/* Live bytes of every segment from the stubs (after a crash). */
struct recount {
	struct store *s;
	struct stable *st;
	uint32_t rsz;
};

static int recount_row(void *arg, uint64_t key, uint64_t val)
{
	struct recount *rc = arg;
	struct chain c;
	for (int cr = chain_start(rc->s, rc->st, key, val, &c); !cr && c.v; cr = chain_step(&c))
		if (ver_stub(c.v))
			seg_live_add(rc->s, STUB(rc->s, c.off)->loc, rc->rsz, 1);
	return 0;
}

static int recount_locked(struct store *s)
{
	struct emb_spill *pm = s->sp->pm;
	for (uint64_t k = 0; k < pm->nsegs; k++) {
		pm->seg[k].live = 0;
		pm->seg[k].nlive = 0;
	}
	pm_flush(s, pm->seg, pm->nsegs * sizeof(pm->seg[0]));
	int ret = 0;
	for (uint32_t i = 0; i < EMB_NTABLES && !ret; i++) {
		struct stable *st = tab_get(s, i);
		if (!st)
			continue;
		struct recount rc = { s, st, spill_rec_size(st->t->row_size) };
		ret = index_walk(s, st, recount_row, &rc);
	}
	int r = pm_barrier(s);
	if (!ret)
		ret = r;
	if (!ret)
		s->sp->recount = 0;
	return ret;
}

/* The stub of st's row that points at device offset loc, or 0.
 * commit_lock held. */
static uint64_t stub_at(struct store *s, struct stable *st, uint64_t row, uint64_t loc)
{
	uint64_t head;
	struct chain c;
	if (index_get(s, st, row, &head))
		return 0;
	for (int r = chain_start(s, st, row, head, &c); !r && c.v; r = chain_step(&c))
		if (ver_stub(c.v) && STUB(s, c.off)->loc == loc)
			return c.off;
	return 0;
}

/* Copy the live records of sealed segment k to the open segment (filling it
 * to its end, then the next), then free k.  The scan walks records by their
 * sizes: one may start right after a record longer than a block, in its last
 * block.  A live record is copied even when its checksum fails, so that its
 * reads keep failing and no stub points into a freed segment. */
static int compact_seg(struct store *s, uint64_t k)
{
	struct spill *sp = s->sp;
	struct emb_spill *pm = sp->pm;
	uint64_t fill = pm->seg[k].fill, base = seg_base(sp, k);
	for (uint64_t done = 0; done < fill;) {
		ssize_t r = pread(sp->fd, sp->rbuf + done, fill - done, (off_t)(base + done));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -EIO;
		done += (uint64_t)r;
	}
	atomic_store(&sp->compact_total, fill);
	atomic_store(&sp->compact_done, 0);
	uint64_t p = 0; /* scan position in the segment */
	while (p < fill) {
		uint64_t p0 = p, piece_end = p + COMPACT_PIECE < fill ? p + COMPACT_PIECE : fill;
		struct timespec t0;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		pthread_mutex_lock(&s->commit_lock);
		uint64_t lim = sp->open_seg >= 0 ? pm->seg_size - pm->seg[sp->open_seg].fill : 0;
		if (lim > CHUNK_BYTES)
			lim = CHUNK_BYTES;
		struct moved { uint64_t stub, loc; uint32_t table, rsz; } *mv = NULL;
		size_t nmv = 0, capmv = 0;
		uint64_t pos = 0;
		int ret = 0, room = 1;
		memset(sp->wbuf, 0, lim);
		while (p < piece_end && room && !ret) {
			const struct emb_srec *r = (const struct emb_srec *)(sp->rbuf + p);
			uint64_t in = p % BLK;
			if (in + sizeof(*r) > BLK) { /* no record starts this late in a block */
				p += BLK - in;
				continue;
			}
			uint32_t rsz = r->magic == EMB_SREC_MAGIC && r->len <= EMB_ROW_MAX ? spill_rec_size(r->len) : 0;
			if (!rsz || p + rsz > fill) {
				p += 16;
				continue;
			}
			struct stable *st = tab_get(s, r->table);
			uint64_t found = st && st->t->row_size == r->len ? stub_at(s, st, r->row, base + p) : 0;
			if (!found) { /* stale; or damage that looks like a header: step over it slowly */
				p += rec_csum(r) == r->csum ? rsz : 16;
				continue;
			}
			uint64_t at = place(pos, rsz);
			if (at + rsz > lim) {
				room = 0; /* the rest goes to the next segment */
				break;
			}
			if (nmv == capmv) {
				capmv = capmv ? capmv * 2 : 256;
				void *q = realloc(mv, capmv * sizeof(*mv));
				if (!q) {
					ret = -ENOMEM;
					break;
				}
				mv = q;
			}
			memcpy(sp->wbuf + at, r, rsz);
			mv[nmv++] = (struct moved){ found, at, r->table, rsz };
			pos = at + rsz;
			p += rsz;
		}
		uint64_t at = 0;
		if (!ret && !nmv && !room)
			ret = seg_next(s, 1); /* not one more record fits the open segment */
		else if (!ret && nmv)
			ret = seg_write(s, pos, &at);
		if (!ret && nmv) /* the fill covers the copies before any stub points there */
			ret = pm_barrier(s);
		if (!ret && nmv) {
			for (size_t i = 0; i < nmv; i++) {
				struct stable *st = tab_get(s, mv[i].table);
				struct emb_stub *st_ = STUB(s, mv[i].stub);
				uint64_t old = st_->loc;
				pthread_rwlock_wrlock(&st->lock);
				st64(&st_->loc, at + mv[i].loc);
				pthread_rwlock_unlock(&st->lock);
				pm_flush(s, &st_->loc, 8);
				seg_live_add(s, old, mv[i].rsz, -1);
				seg_live_add(s, at + mv[i].loc, mv[i].rsz, 1);
			}
			ret = pm_barrier(s);
			atomic_fetch_add(&sp->compact_moved, nmv);
			atomic_fetch_add(&sp->compact_bytes, pos);
		}
		pthread_mutex_unlock(&s->commit_lock);
		free(mv);
		if (ret)
			return ret;
		atomic_store(&sp->compact_done, p);
		/* rate limit: the bytes read and written at compact_bps */
		uint64_t bytes = (p - p0) + pos;
		uint64_t want_ns = bytes * 1000000000ull / (sp->compact_bps ? sp->compact_bps : 1);
		struct timespec t1;
		clock_gettime(CLOCK_MONOTONIC, &t1);
		uint64_t took = (uint64_t)(t1.tv_sec - t0.tv_sec) * 1000000000ull + (uint64_t)(t1.tv_nsec - t0.tv_nsec);
		if (!sp->manual && want_ns > took) {
			struct timespec d = { (time_t)((want_ns - took) / 1000000000ull), (long)((want_ns - took) % 1000000000ull) };
			nanosleep(&d, NULL);
		}
	}
	pthread_mutex_lock(&s->commit_lock);
	while (atomic_load(&sp->pins[k])) { /* readers still inside the old copies */
		pthread_mutex_unlock(&s->commit_lock);
		sched_yield();
		pthread_mutex_lock(&s->commit_lock);
	}
	struct emb_sseg *g = &pm->seg[k];
	g->fill = g->live = 0;
	g->nlive = 0;
	g->state = EMB_SEG_FREE;
	int ret = pm_persist(s, g, sizeof(*g));
	pthread_mutex_unlock(&s->commit_lock);
	atomic_fetch_add(&sp->compacted_segs, 1);
	atomic_store(&sp->compact_total, 0);
	return ret;
}

/* The sealed segment most worth compacting, or EMB_NONE: compaction runs
 * when written bytes exceed 1.5x the live ones (so they stay within 2x) or
 * when free segments run out; forced: whatever has stale bytes.  *ratio:
 * the share of that segment's bytes that are live. */
static uint64_t compact_pick(struct store *s, int forced, double *ratio)
{
	struct emb_spill *pm = s->sp->pm;
	uint64_t written = 0, live = 0, best = EMB_NONE;
	double best_ratio = 2.0;
	pthread_mutex_lock(&s->commit_lock);
	*ratio = 2.0;
	if (s->sp->recount) {
		pthread_mutex_unlock(&s->commit_lock);
		return EMB_NONE;
	}
	for (uint64_t k = 0; k < pm->nsegs; k++) {
		const struct emb_sseg *g = &pm->seg[k];
		if (g->state == EMB_SEG_FREE)
			continue;
		written += g->fill;
		live += g->live;
		if (g->state != EMB_SEG_SEALED || g->live >= g->fill)
			continue;
		double ratio = g->fill ? (double)g->live / (double)g->fill : 0;
		if (ratio < best_ratio) {
			best_ratio = ratio;
			best = k;
		}
	}
	uint32_t nfree = free_segs(pm);
	pthread_mutex_unlock(&s->commit_lock);
	*ratio = best_ratio;
	if (best == EMB_NONE || forced)
		return best;
	int needed = written > live + live / 2 + 2 * pm->seg_size || nfree < 3;
	return needed && best_ratio < 0.75 ? best : EMB_NONE;
}

static void iops_tick(struct spill *sp)
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

static int64_t mover_round_locked(struct store *s, unsigned what, uint64_t need)
{
	struct spill *sp = s->sp;
	int64_t moved = 0;
	if (sp->recount) {
		pthread_mutex_lock(&s->commit_lock);
		int ret = recount_locked(s);
		pthread_mutex_unlock(&s->commit_lock);
		if (ret)
			return ret;
	}
	if ((what & STORE_SPILL_MOVE) || row_usage(s) > sp->start_bytes) {
		uint64_t target = pass_target(s, need);
		moved = spill_pass(s, !!(what & STORE_SPILL_ALL), target);
		/* the device is full: compact, most stale segment first, for as
		 * long as each one gives back at least an eighth of a segment */
		for (uint64_t i = 0; moved == -ENOSPC && i < sp->pm->nsegs; i++) {
			double ratio;
			uint64_t k = compact_pick(s, 1, &ratio);
			if (k == EMB_NONE || ratio > 0.875 || compact_seg(s, k))
				break;
			moved = spill_pass(s, !!(what & STORE_SPILL_ALL), target);
		}
		/* a writer waits but nothing could move, or stubs found the heap
		 * full: give a row slab back to the heap */
		if ((moved == -ENOSPC || (moved == 0 && (what & STORE_SPILL_MOVE))) && !(what & STORE_SPILL_ALL)) {
			pthread_mutex_lock(&s->commit_lock);
			int r = shrink_rows(s);
			pthread_mutex_unlock(&s->commit_lock);
			if (r == 0) {
				atomic_fetch_add(&sp->shrinks, 1);
				moved = 1;
			}
		}
	}
	if (what & STORE_SPILL_PROMOTE || !sp->manual)
		promote(s);
	double ratio;
	uint64_t k = compact_pick(s, !!(what & STORE_SPILL_COMPACT), &ratio);
	if (k != EMB_NONE) {
		int ret = compact_seg(s, k);
		if (ret && moved >= 0)
			moved = ret;
	}
	return moved;
}

/* One round of the mover's work (what: STORE_SPILL_*). */
static int64_t mover_round(struct store *s, unsigned what, uint64_t need)
{
	if (pm_writable(s))
		return -EROFS; /* a failed pool moves nothing */
	pthread_mutex_lock(&s->sp->round_lock);
	int64_t r = mover_round_locked(s, what, need);
	pthread_mutex_unlock(&s->sp->round_lock);
	return r;
}

static void *mover_main(void *arg)
{
	struct store *s = arg;
	struct spill *sp = s->sp;
	pthread_mutex_lock(&sp->mu);
	while (!sp->stop) {
		if (!sp->kicked) {
			struct timespec t;
			clock_gettime(CLOCK_REALTIME, &t);
			t.tv_nsec += 100 * 1000000L;
			if (t.tv_nsec >= 1000000000L) {
				t.tv_sec++;
				t.tv_nsec -= 1000000000L;
			}
			pthread_cond_timedwait(&sp->cv, &sp->mu, &t);
		}
		if (sp->stop)
			break;
		int kicked = sp->kicked;
		uint64_t need = sp->need;
		sp->kicked = 0;
		sp->need = 0;
		sp->busy = 1;
		pthread_mutex_unlock(&sp->mu);
		uint64_t before = row_usage(s);
		int64_t moved = mover_round(s, kicked ? STORE_SPILL_MOVE : 0, need);
		uint64_t after = row_usage(s);
		iops_tick(sp);
		pthread_mutex_lock(&sp->mu);
		sp->last_freed = moved > 0 || after < before;
		sp->passes++;
		sp->busy = 0;
		pthread_cond_broadcast(&sp->done_cv);
	}
	pthread_mutex_unlock(&sp->mu);
	return NULL;
}

int spill_wait_room(struct store *s, uint64_t need)
{
	struct spill *sp = s->sp;
	atomic_fetch_add(&sp->waits, 1);
	if (sp->manual) {
		int64_t moved = mover_round(s, STORE_SPILL_MOVE, need);
		if (moved <= 0)
			atomic_fetch_add(&sp->full, 1);
		return moved > 0 ? 0 : -ENOSPC;
	}
	pthread_mutex_lock(&sp->mu);
	uint64_t want = sp->passes + (sp->busy ? 2 : 1); /* a whole pass begun after this call */
	sp->kicked = 1;
	if (need > sp->need)
		sp->need = need;
	pthread_cond_signal(&sp->cv);
	while (sp->passes < want && !sp->stop)
		pthread_cond_wait(&sp->done_cv, &sp->mu);
	int ret = sp->last_freed && !sp->stop ? 0 : -ENOSPC;
	pthread_mutex_unlock(&sp->mu);
	if (ret)
		atomic_fetch_add(&sp->full, 1);
	return ret;
}

int store_spill_run(struct store *s, unsigned what)
{
	if (!s->sp)
		return -ENODEV;
	int64_t r = mover_round(s, what, 0);
	return r < 0 ? (int)r : (int)(r > INT32_MAX ? INT32_MAX : r);
}

/* ---- attach / detach ---------------------------------------------------- */

static void spill_free(struct spill *sp)
{
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
		if (g->state > EMB_SEG_SEALED || g->fill > pm->seg_size || g->fill % BLK)
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

int store_spill_attach(struct store *s, const struct store_spill_conf *c, char *err, size_t n)
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
	struct stat sb_;
	if (stat(c->path, &sb_) == 0 && S_ISDIR(sb_.st_mode)) {
		char u[33];
		for (int i = 0; i < 16; i++)
			snprintf(u + 2 * i, 3, "%02x", s->sb->uuid[i]);
		snprintf(path, sizeof(path), "%s/embfs-%s.spill", c->path, u);
	} else {
		snprintf(path, sizeof(path), "%s", c->path);
	}
	int exists = stat(path, &sb_) == 0;
	if (exists && !S_ISREG(sb_.st_mode) && !S_ISBLK(sb_.st_mode))
		return store_err(err, n, -EINVAL, "%s: not a regular file, directory or block device", path);
	if (pm && !exists)
		return store_err(err, n, -ENOENT,
			    "spill device %s is missing: this pool keeps row versions there (made with %llu bytes)",
			    path, (unsigned long long)pm->size);
	if (!pm && !exists && !c->size)
		return store_err(err, n, -EINVAL, "%s does not exist: give -o spill_size=SIZE to create it", path);
	int fd = open(path, O_RDWR | (exists ? 0 : O_CREAT | O_EXCL), 0600);
	if (fd < 0)
		return store_err(err, n, -errno, "%s: %s", path, strerror(errno));
	int ret = 0;
	uint64_t size = 0;
	struct emb_spill_disk *d = NULL;
	if (posix_memalign((void **)&d, BLK, EMB_SPILL_HDR)) {
		close(fd);
		return -ENOMEM;
	}
	memset(d, 0, EMB_SPILL_HDR);
	fstat(fd, &sb_);
	if ((ret = dev_size(fd, &sb_, &size))) {
		store_err(err, n, ret, "%s: %s", path, strerror(-ret));
		goto out;
	}
	ssize_t got = size >= EMB_SPILL_HDR ? pread(fd, d, EMB_SPILL_HDR, 0) : 0;
	int is_spill = got == EMB_SPILL_HDR && memcmp(d->magic, EMB_SPILL_MAGIC, 8) == 0;
	if (is_spill && disk_csum(d) != d->csum) {
		ret = store_err(err, n, -EIO, "%s: spill header is damaged (checksum mismatch)", path);
		goto out;
	}
	if (pm) {
		if (!is_spill || memcmp(d->uuid, pm->uuid, 16) || memcmp(d->pool_uuid, s->sb->uuid, 16)) {
			ret = store_err(err, n, -EINVAL, "%s is not this pool's spill device (%s)", path,
				   is_spill ? "it belongs to another pool or spill" : "no embfs spill header");
			goto out;
		}
		if (size < pm->size || d->size != pm->size) {
			ret = store_err(err, n, -EIO, "%s: spill device is %llu bytes, made with %llu", path,
				   (unsigned long long)size, (unsigned long long)pm->size);
			goto out;
		}
		if (c->size && c->size != pm->size) {
			ret = store_err(err, n, -EINVAL, "spill_size cannot change: %s was made with %llu bytes", path,
				   (unsigned long long)pm->size);
			goto out;
		}
	} else {
		if (is_spill && memcmp(d->pool_uuid, s->sb->uuid, 16)) {
			ret = store_err(err, n, -EINVAL, "%s is another pool's spill device", path);
			goto out;
		}
		if (!is_spill && got > 0) {
			for (ssize_t i = 0; i < got; i++)
				if (((char *)d)[i]) {
					ret = store_err(err, n, -EINVAL,
						   "%s holds data that is not an embfs spill device; give a new file or a directory",
						   path);
					goto out;
				}
		}
		uint64_t want = c->size ? c->size : size;
		if (S_ISBLK(sb_.st_mode) && want > size) {
			ret = store_err(err, n, -EINVAL, "%s: spill_size is larger than the device", path);
			goto out;
		}
		if (S_ISREG(sb_.st_mode) && size < want && (ret = -posix_fallocate(fd, 0, (off_t)want))) {
			store_err(err, n, ret, "%s: cannot reserve %llu bytes: %s", path, (unsigned long long)want,
			     strerror(-ret));
			if (!exists)
				unlink(path);
			goto out;
		}
		ret = format(s, fd, want, path, err, n);
		if (ret)
			goto out;
		pm = S_PTR(s, s->sb->spill_off);
	}
	/* reads and writes bypass the page cache where the file system allows */
	int dfd = open(path, O_RDWR | O_DIRECT);
	struct spill *sp = calloc(1, sizeof(*sp));
	if (!sp) {
		if (dfd >= 0)
			close(dfd);
		ret = -ENOMEM;
		goto out;
	}
	sp->direct = dfd >= 0;
	sp->fd = dfd >= 0 ? dfd : dup(fd);
	snprintf(sp->path, sizeof(sp->path), "%s", path);
	sp->pm = pm;
	sp->qd = c->qd ? c->qd : 32;
	if (sp->qd > 4096)
		sp->qd = 4096;
	uint32_t high = c->high ? c->high : 30, low = c->low ? c->low : 25;
	if (high > 95 || low >= high) {
		free(sp);
		ret = store_err(err, n, -EINVAL, "spill_high must be at most 95 and above spill_low (%u, %u)", high, low);
		goto out;
	}
	uint64_t cap = pool_heap_capacity(s);
	sp->low_bytes = cap / 100 * low;
	sp->compact_bps = (uint64_t)(c->compact_mbps ? c->compact_mbps : 64) * 1000000ull;
	sp->manual = c->manual;
	sp->open_seg = -1;
	sp->recount = s->recovered;
	sp->pins = calloc(pm->nsegs, sizeof(*sp->pins));
	sp->heat = calloc((size_t)1 << HEAT_BITS, 1);
	if (posix_memalign((void **)&sp->wbuf, BLK, CHUNK_BYTES))
		sp->wbuf = NULL;
	if (posix_memalign((void **)&sp->rbuf, BLK, pm->seg_size))
		sp->rbuf = NULL;
	if (!sp->pins || !sp->heat || !sp->wbuf || !sp->rbuf) {
		ret = -ENOMEM;
		goto free_sp;
	}
	for (uint32_t i = 0; i < NRINGS; i++) {
		pthread_mutex_init(&sp->rings[i].lock, NULL);
		sp->rings[i].ok = io_uring_queue_init(sp->qd, &sp->rings[i].ring, 0) == 0;
	}
	pthread_mutex_init(&sp->mu, NULL);
	pthread_mutex_init(&sp->round_lock, NULL);
	pthread_cond_init(&sp->cv, NULL);
	pthread_cond_init(&sp->done_cv, NULL);
	/* appends continue in the newest open segment */
	uint64_t best_seq = 0;
	for (uint64_t k = 0; k < pm->nsegs; k++)
		if (pm->seg[k].state == EMB_SEG_OPEN && pm->seg[k].seq >= best_seq) {
			best_seq = pm->seg[k].seq;
			sp->open_seg = (int64_t)k;
		}
	if ((ret = slab_load_all(s)))
		goto free_sp;
	if (cap / 100 * high < 4 * COW_ROOM) {
		ret = store_err(err, n, -EINVAL,
			   "pool too small for a spill tier: row versions may take %llu MiB of it (spill_high=%u), at least %llu MiB are needed",
			   (unsigned long long)((cap / 100 * high) >> 20), high, (unsigned long long)((4 * COW_ROOM) >> 20));
		goto free_sp;
	}
	pthread_mutex_lock(&s->space_lock);
	s->row_cap = cap / 100 * high;
	pthread_mutex_unlock(&s->space_lock);
	sp->start_bytes = s->row_cap - s->row_cap / 16;
	s->sp = sp;
	if (sp->manual && sp->recount) {
		pthread_mutex_lock(&s->commit_lock);
		recount_locked(s);
		pthread_mutex_unlock(&s->commit_lock);
	}
	if (!sp->manual) {
		if (pthread_create(&sp->thr, NULL, mover_main, s) == 0)
			sp->thr_started = 1;
	}
	free(d);
	close(fd);
	return 0;
free_sp:
	spill_free(sp);
	if (!ret)
		ret = -ENOMEM;
	if (err && n && !err[0])
		store_err(err, n, ret, "%s: %s", path, strerror(-ret));
out:
	free(d);
	close(fd);
	return ret;
}

int store_spill_start(struct store *s)
{
	struct spill *sp = s->sp;
	if (!sp || sp->thr_started)
		return 0;
	sp->manual = 0;
	if (pthread_create(&sp->thr, NULL, mover_main, s) != 0) {
		sp->manual = 1;
		return -EAGAIN;
	}
	sp->thr_started = 1;
	return 0;
}

void spill_detach(struct store *s)
{
	struct spill *sp = s->sp;
	if (!sp)
		return;
	if (sp->thr_started) {
		pthread_mutex_lock(&sp->mu);
		sp->stop = 1;
		pthread_cond_broadcast(&sp->cv);
		pthread_cond_broadcast(&sp->done_cv);
		pthread_mutex_unlock(&sp->mu);
		pthread_join(sp->thr, NULL);
	}
	pthread_mutex_lock(&s->space_lock);
	s->row_cap = 0;
	pthread_mutex_unlock(&s->space_lock);
	s->sp = NULL;
	spill_free(sp);
}

/* ---- status ------------------------------------------------------------ */

void store_spill_stats_get(struct store *s, struct store_spill_stats *st)
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
	st->pmem_low = sp->low_bytes;
	struct emb_spill *pm = sp->pm;
	st->size = pm->size;
	st->seg_size = pm->seg_size;
	st->segs = pm->nsegs;
	pthread_mutex_lock(&s->commit_lock); /* the segment table changes under it */
	st->recounting = sp->recount;
	for (uint64_t k = 0; k < pm->nsegs; k++) {
		const struct emb_sseg *g = &pm->seg[k];
		st->segs_free += g->state == EMB_SEG_FREE;
		st->segs_open += g->state == EMB_SEG_OPEN;
		st->segs_sealed += g->state == EMB_SEG_SEALED;
		if (g->state != EMB_SEG_FREE) {
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
