/*
 * Compaction of the spill device: the live records of a mostly stale sealed
 * segment are copied to the open one, each stub repointed with one 8-byte
 * store, and the segment freed once no reader has it pinned; and the recount
 * of live bytes per segment from the stubs after a crash.  Called by the
 * mover (mover.c), one round at a time (round_lock).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "spill.h"
#include <time.h>
#include <unistd.h>

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

int spill_recount_locked(struct store *s)
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

/* Read sealed segment k whole into rbuf. */
static int read_seg(struct spill *sp, uint64_t k)
{
	uint64_t fill = sp->pm->seg[k].fill, base = seg_base(sp, k);
	for (uint64_t done = 0; done < fill;) {
		ssize_t r = pread(sp->fd, sp->rbuf + done, fill - done, (off_t)(base + done));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -EIO;
		done += (uint64_t)r;
	}
	return 0;
}

/* One piece of a compaction: the live records it copies (into wbuf) and
 * the stubs that will point at the copies. */
struct piece {
	struct moved {
		uint64_t stub, loc;   /* the stub; the copy's place in wbuf, then on the device */
		uint64_t from, key;   /* the record's place in the segment; the stub's key then */
		uint32_t table, rsz;
	} *mv;
	size_t nmv, capmv;
	uint64_t pos;             /* bytes of wbuf used */
	int room;                 /* 0: the open segment took no more */
};

/* Scan rbuf from *p to end (of segment k, filled to fill) and copy each
 * live record into wbuf, packed, as long as lim bytes hold them; records are
 * walked by their sizes, damage (no record header) is stepped over 16 bytes
 * at a time.  commit_lock held. */
static int gather_live(struct store *s, uint64_t k, uint64_t *p, uint64_t end, uint64_t fill, uint64_t lim,
		       struct piece *pc)
{
	struct spill *sp = s->sp;
	uint64_t base = seg_base(sp, k);
	while (*p < end) {
		const struct emb_srec *r = (const struct emb_srec *)(sp->rbuf + *p);
		uint64_t in = *p % BLK;
		if (in + sizeof(*r) > BLK) { /* no record starts this late in a block */
			*p += BLK - in;
			continue;
		}
		uint32_t rsz = r->magic == EMB_SREC_MAGIC && r->len <= EMB_ROW_MAX ? spill_rec_size(r->len) : 0;
		if (!rsz || *p + rsz > fill) {
			*p += 16;
			continue;
		}
		struct stable *st = tab_get(s, r->table);
		uint64_t found = st && st->t->row_size == r->len ? stub_at(s, st, r->row, base + *p) : 0;
		if (!found) { /* stale; or damage that looks like a header: step over it slowly */
			*p += srec_csum(r) == r->csum ? rsz : 16;
			continue;
		}
		uint64_t at = srec_place(pc->pos, rsz);
		if (at + rsz > lim) {
			pc->room = 0; /* the rest goes to the next segment */
			return 0;
		}
		if (pc->nmv == pc->capmv) {
			size_t nc = pc->capmv ? pc->capmv * 2 : 256;
			void *q = realloc(pc->mv, nc * sizeof(*pc->mv));
			if (!q)
				return -ENOMEM;
			pc->mv = q;
			pc->capmv = nc;
		}
		memcpy(sp->wbuf + at, r, rsz);
		pc->mv[pc->nmv++] = (struct moved){ found, at, base + *p, ld64(&STUB(s, found)->v.key), r->table, rsz };
		pc->pos = at + rsz;
		*p += rsz;
	}
	return 0;
}

/* Write the piece's copies to the open segment and make them durable on
 * the device: without commit_lock (the open segment is the mover's alone:
 * round_lock), so no commit waits for the device; point_piece takes them
 * into the fill.  A piece that copies nothing because the open segment is
 * full opens the next (the segment table changes under commit_lock).
 * *at: where the piece went. */
static int write_piece(struct store *s, struct piece *pc, uint64_t *at)
{
	*at = 0;
	if (pc->nmv)
		return seg_write(s, pc->pos, at);
	if (pc->room)
		return 0;
	pthread_mutex_lock(&s->commit_lock); /* not one more record fits the open segment */
	int ret = seg_next(s, 1);
	pthread_mutex_unlock(&s->commit_lock);
	return ret;
}

/* Take the piece's copies (written at at) into the open segment's fill,
 * durably, then point each stub at its copy (one 8-byte store each), if it
 * is still the stub that pointed at the record (a stub freed while
 * commit_lock was let go has its row id poisoned; a slot reused since holds
 * another key or points elsewhere: nothing points into the segment being
 * emptied but its own old stubs).  commit_lock held. */
static int point_piece(struct store *s, struct piece *pc, uint64_t at)
{
	struct spill *sp = s->sp;
	size_t moved = 0;
	seg_grow(s, pc->pos);
	int ret = pm_barrier(s); /* the fill covers the copies before any stub points there */
	if (ret)
		return ret;
	for (size_t i = 0; i < pc->nmv; i++) {
		struct stable *st = tab_get(s, pc->mv[i].table);
		struct emb_stub *stub = STUB(s, pc->mv[i].stub);
		if (!st || ld64(&stub->v.key) != pc->mv[i].key || ld64(&stub->loc) != pc->mv[i].from)
			continue; /* its copy stays unreferenced */
		pthread_rwlock_wrlock(&st->lock);
		st64(&stub->loc, at + pc->mv[i].loc);
		pthread_rwlock_unlock(&st->lock);
		pm_flush(s, &stub->loc, 8);
		seg_live_add(s, pc->mv[i].from, pc->mv[i].rsz, -1);
		seg_live_add(s, at + pc->mv[i].loc, pc->mv[i].rsz, 1);
		moved++;
	}
	atomic_fetch_add(&sp->compact_moved, moved);
	atomic_fetch_add(&sp->compact_bytes, pc->pos);
	return pc->nmv ? pm_barrier(s) : 0;
}

/* Sleep so that bytes moved since t0 take at least their share of the
 * compaction budget (compact_bps).  The mover thread only: tests run it at
 * full speed. */
static void rate_limit(struct spill *sp, const struct timespec *t0, uint64_t bytes)
{
	uint64_t want_ns = bytes * 1000000000ull / (sp->compact_bps ? sp->compact_bps : 1);
	struct timespec t1;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	uint64_t took = (uint64_t)(t1.tv_sec - t0->tv_sec) * 1000000000ull + (uint64_t)(t1.tv_nsec - t0->tv_nsec);
	if (!sp->manual && want_ns > took) {
		struct timespec d = { (time_t)((want_ns - took) / 1000000000ull), (long)((want_ns - took) % 1000000000ull) };
		nanosleep(&d, NULL);
	}
}

/* Free segment k once no reader is inside its old copies. */
static int free_seg(struct store *s, uint64_t k)
{
	struct spill *sp = s->sp;
	pthread_mutex_lock(&s->commit_lock);
	while (atomic_load(&sp->pins[k])) { /* readers still inside the old copies */
		pthread_mutex_unlock(&s->commit_lock);
		sched_yield();
		pthread_mutex_lock(&s->commit_lock);
	}
	struct emb_sseg *g = &sp->pm->seg[k];
	g->fill = g->live = 0;
	g->nlive = 0;
	pthread_mutex_lock(&sp->mu); /* seg_claim reads states under it */
	g->state = EMB_SEG_FREE;
	pthread_mutex_unlock(&sp->mu);
	int ret = pm_persist(s, g, sizeof(*g));
	pthread_mutex_unlock(&s->commit_lock);
	return ret;
}

/* Copy the live records of sealed segment k to the open one, a piece of
 * COMPACT_PIECE bytes at a time (found under commit_lock, written without
 * it, repointed under it), then free k. */
int compact_seg(struct store *s, uint64_t k)
{
	struct spill *sp = s->sp;
	struct emb_spill *pm = sp->pm;
	uint64_t fill = pm->seg[k].fill;
	int ret = read_seg(sp, k);
	if (ret)
		return ret;
	atomic_store(&sp->compact_total, fill);
	atomic_store(&sp->compact_done, 0);
	for (uint64_t p = 0; p < fill;) { /* p: scan position in the segment */
		uint64_t p0 = p, end = p + COMPACT_PIECE < fill ? p + COMPACT_PIECE : fill;
		struct timespec t0;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		struct piece pc = { .room = 1 };
		uint64_t at = 0;
		uint64_t lim = sp->open_seg >= 0 ? pm->seg_size - pm->seg[sp->open_seg].fill : 0;
		if (lim > CHUNK_BYTES)
			lim = CHUNK_BYTES;
		memset(sp->wbuf, 0, lim);
		pthread_mutex_lock(&s->commit_lock);
		ret = gather_live(s, k, &p, end, fill, lim, &pc);
		pthread_mutex_unlock(&s->commit_lock);
		spill_unlocked(sp);
		if (!ret)
			ret = write_piece(s, &pc, &at);
		if (!ret && pc.nmv) {
			pthread_mutex_lock(&s->commit_lock);
			ret = point_piece(s, &pc, at);
			pthread_mutex_unlock(&s->commit_lock);
		}
		free(pc.mv);
		if (ret)
			return ret;
		atomic_store(&sp->compact_done, p);
		rate_limit(sp, &t0, (p - p0) + pc.pos);
	}
	ret = free_seg(s, k);
	atomic_fetch_add(&sp->compacted_segs, 1);
	atomic_store(&sp->compact_total, 0);
	return ret;
}

/* The sealed segment most worth compacting, or EMB_NONE: compaction runs
 * when written bytes exceed 1.5x the live ones (so they stay within 2x) or
 * when free segments run out; forced: whatever has stale bytes.  *ratio:
 * the share of that segment's bytes that are live. */
uint64_t compact_pick(struct store *s, int forced, double *ratio)
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
		if (g->state == EMB_SEG_FREE || g->state == EMB_SEG_RUN)
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
	uint32_t nfree = seg_free_count(s->sp);
	pthread_mutex_unlock(&s->commit_lock);
	*ratio = best_ratio;
	if (best == EMB_NONE || forced)
		return best;
	int needed = written > live + live / 2 + 2 * pm->seg_size || nfree < 3;
	/* a segment nothing points into any more costs nothing to free */
	return (needed && best_ratio < 0.75) || best_ratio == 0 ? best : EMB_NONE;
}
