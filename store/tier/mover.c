/*
 * The spill mover: moves cold row versions to the device behind stubs when
 * row versions near their share of the pool (spill_pass, spill_chunk),
 * empties a row slab when stubs and index need heap (shrink_rows), promotes
 * hot spilled rows back (promote), compacts (compact.c), runs as a thread or
 * on demand (store_spill_run, spill_wait_room for writers that find no room),
 * and the journaled relink that puts stubs in and takes them out
 * (relink_apply, spill_relink_replay at open).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "spill.h"
#include <time.h>

/* How far a pass spills: to the low watermark, and lower if writers wait
 * for `need` bytes of slots (a class keeps up to 4 MiB of copy-on-write
 * headroom on top of what it promises, and slabs reach row_cap in whole
 * slabs: one more CHUNK_BYTES of slack). */
static uint64_t pass_target(struct store *s, uint64_t need)
{
	uint64_t keep = COW_ROOM + need + (need ? CHUNK_BYTES : 0);
	uint64_t lim = s->row_cap > keep ? s->row_cap - keep : 0;
	return lim < s->sp->low_bytes ? lim : s->sp->low_bytes;
}

/* Writers promise slots for a whole request before they write (a push of
 * 16,384 ids promises 4.25 MiB of 256-byte rows, and gives back after what
 * its rows did not need), while the mover starts only a sixteenth of the
 * row share below it: a request that came while an eviction ran found no
 * room and waited for the eviction.  So the mover starts earlier, and stops
 * lower, by what two of the largest requests of the last REQ_DECAY_MS
 * (decaying linearly over it) need beyond that sixteenth, at most a sixth
 * of the row share: mover_used() is the row usage plus that.  round_lock
 * held. */
#define REQ_DECAY_MS 30000u
static uint64_t mover_used(struct store *s)
{
	struct spill *sp = s->sp;
	uint64_t used = slab_row_used(s);
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	uint64_t now = (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
	uint64_t peak = sp->req_peak, dt = now - sp->req_ms;
	peak = dt >= REQ_DECAY_MS ? 0 : peak - peak / REQ_DECAY_MS * dt;
	uint64_t seen = atomic_exchange_explicit(&sp->req_max, 0, memory_order_relaxed);
	if (seen > peak)
		peak = seen;
	sp->req_peak = peak;
	sp->req_ms = now;
	uint64_t lim = s->row_cap / 6, slack = s->row_cap - sp->start_bytes;
	uint64_t early = 2 * peak > slack ? 2 * peak - slack : 0;
	early = early < lim ? early : lim;
	atomic_store_explicit(&sp->early, early, memory_order_relaxed);
	return used + early;
}

/* A chunk being gathered: records placed in sp->wbuf[0..pos), their
 * relinks in v[0..n). */
struct chunk {
	struct rl *v;
	size_t n, max;
	uint64_t pos, cap;
	uint32_t rs, rsz;
	int full;
};

static int chunk_open(struct store *s, struct stable *st, struct chunk *k)
{
	struct spill *sp = s->sp;
	*k = (struct chunk){ .max = EMB_JOURNAL_CAP, .rs = st->t->row_size };
	k->rsz = spill_rec_size(k->rs);
	uint32_t need = k->rsz > BLK ? (k->rsz + BLK - 1) & ~(BLK - 1) : BLK;
	int ret = seg_room(s, need);
	if (ret)
		return ret;
	k->cap = sp->pm->seg_size - sp->pm->seg[sp->open_seg].fill;
	if (k->cap > CHUNK_BYTES)
		k->cap = CHUNK_BYTES;
	memset(sp->wbuf, 0, k->cap);
	return 0;
}

/* Place row version x (at off in PMem, referred to by the field at) in the
 * chunk as a device record.  0 = placed, 1 = no room (k->full). */
static int chunk_put(struct store *s, struct stable *st, struct chunk *k, uint64_t off, uint64_t at)
{
	struct emb_version *x = S_PTR(s, off);
	uint64_t pos = srec_place(k->pos, k->rsz);
	if (k->n == k->max || pos + k->rsz > k->cap) {
		k->full = 1;
		return 1;
	}
	k->v[k->n] = (struct rl){ ver_row(x), off, 0, at, pos, k->rsz };
	srec_put(s->sp->wbuf + pos, st->id, ver_row(x), ver_batch(x), ver_data(x), k->rs);
	k->pos = pos + k->rsz;
	k->n++;
	return 0;
}

/* Where version off sits in its row's chain: the field that refers to it
 * (0: the index), or EMB_NONE when it is not linked (or the chain is
 * damaged before it).  Walking the chain validates it.  st->lock not needed
 * (commit_lock). */
static uint64_t linked_at(struct store *s, struct stable *st, uint64_t row, uint64_t off)
{
	uint64_t head;
	struct chain c;
	int cr = index_get(s, st, row, &head);
	if (!cr)
		cr = chain_start(s, st, row, head, &c);
	for (; !cr && c.v; cr = chain_step(&c))
		if (c.off == off)
			return chain_vat(&c);
	return EMB_NONE;
}

/* Is the version r moved still where the chunk found it, as the device
 * has it (its batch and bytes: its slot may have been freed and reused
 * while commit_lock was let go)?  r->at follows it if the chain changed
 * around it.  commit_lock held. */
static int still_there(struct store *s, struct stable *st, const struct chunk *k, struct rl *r)
{
	const struct emb_srec *rec = (const struct emb_srec *)(s->sp->wbuf + r->loc);
	uint64_t at = linked_at(s, st, r->row, r->old);
	if (at == EMB_NONE)
		return 0;
	const struct emb_version *x = S_PTR(s, r->old);
	if (ver_stub(x) || ver_tomb(x) || ver_batch(x) != rec->batch || memcmp(ver_data(x), rec + 1, k->rs))
		return 0;
	r->at = at;
	return 1;
}

/* Land a chunk written at device offset base: a stub per version, one
 * journaled relink.  verify: commit_lock was let go since the chunk was
 * gathered: versions no longer where they were are left (their records
 * stay unreferenced: compaction takes them).  commit_lock held. */
static int chunk_land(struct store *s, struct stable *st, struct chunk *k, uint64_t base, int verify)
{
	struct spill *sp = s->sp;
	struct rl *v = k->v;
	size_t nv = 0;
	uint32_t small;
	for (size_t i = 0; i < k->n; i++)
		if (!verify || still_there(s, st, k, &v[i]))
			v[nv++] = v[i];
	int ret = slab_class_small(s, &small);
	for (size_t i = 0; !ret && i < nv; i++) {
		ret = slab_alloc(s, small, &v[i].new_);
		if (ret) {
			while (i-- > 0)
				slab_unreserve(s, v[i].new_);
			atomic_fetch_add(&sp->full, 1);
		}
	}
	if (ret || !nv)
		return ret; /* what was written is unreferenced: compaction takes it */
	for (size_t i = 0; i < nv; i++) {
		struct emb_stub *ns = STUB(s, v[i].new_);
		const struct emb_version *ov = S_PTR(s, v[i].old);
		ver_init(&ns->v, ver_row(ov), ver_batch(ov), EMB_VK_STUB);
		ns->loc = v[i].loc = base + v[i].loc;
		ver_seal(&ns->v, st->id, k->rs);
		pm_flush(s, ns, sizeof(*ns));
	}
	ret = relink_apply(s, st, v, nv);
	if (ret) {
		for (size_t i = 0; i < nv; i++)
			slab_unreserve(s, v[i].new_);
		return ret;
	}
	for (size_t i = 0; i < nv; i++)
		seg_live_add(s, v[i].loc, k->rsz, 1);
	k->n = nv;
	atomic_fetch_add_explicit(&sp->spilled, nv, memory_order_relaxed);
	return 0;
}

/* Gather the cold versions of one row: all but the newest, and the newest
 * too when `all` or its reference bit is clear.  st->lock held (read). */
static void gather_row(struct store *s, struct stable *st, struct chunk *k, uint64_t row,
		       uint64_t head, int all)
{
	struct chain c;
	/* versions of a damaged chain move up to the damage */
	int cr = chain_start(s, st, row, head, &c);
	for (int i = 0; !cr && c.v && !k->full; i++) {
		struct emb_version *x = c.v;
		/* a newest version goes behind a stub only when older ones keep
		 * it from a run (run.c evicts single versions) */
		int take = !ver_stub(x) && !ver_tomb(x) &&
			   (i > 0 || all ||
			    ((c.next || s->sp->stubs_only) && !heat_test_clear(s->sp, st->id, row)));
		if (take)
			chunk_put(s, st, k, c.off, chain_vat(&c));
		cr = chain_step(&c);
	}
}

struct spill_scan {
	struct store *s;
	struct stable *st;
	struct chunk *k;
	int all;
};

static int spill_one(void *arg, uint64_t row, uint64_t ref)
{
	struct spill_scan *x = arg;
	gather_row(x->s, x->st, x->k, row, ref, x->all);
	return x->k->full;
}

/* Spill cold versions of one table from index position *di on: gathered
 * under commit_lock, written to the device (one write, one fdatasync)
 * without it, so that no commit waits for device I/O, then relinked under
 * it again (only what is still where it was).  *moved: versions spilled.
 * commit_lock held on entry and on return; st may be gone on return
 * (*gone set: it is not read again). */
static int spill_chunk(struct store *s, struct stable *st, size_t *di, int all, size_t *moved, int *gone)
{
	struct chunk k;
	uint32_t tid = st->id;
	uint64_t gen = st->t->gen, base = 0;
	*moved = 0;
	*gone = 0;
	int ret = chunk_open(s, st, &k);
	if (ret)
		return ret;
	if (!(k.v = malloc(k.max * sizeof(*k.v))))
		return -ENOMEM;
	struct spill_scan x = { s, st, &k, all };
	pthread_rwlock_rdlock(&st->lock);
	index_scan(s, st, di, spill_one, &x);
	pthread_rwlock_unlock(&st->lock);
	if (k.n) {
		pthread_mutex_unlock(&s->commit_lock);
		spill_unlocked(s->sp);
		ret = k.pos ? seg_write(s, k.pos, &base) : 0; /* the mover's alone (round_lock) */
		pthread_mutex_lock(&s->commit_lock);
		if (!ret && k.pos)
			seg_grow(s, k.pos); /* written: the fill covers it, wherever its rows went */
		*gone = tab_get(s, tid) != st || st->t->gen != gen;
		if (!ret && !*gone && !(ret = chunk_land(s, st, &k, base, 1)))
			*moved = k.n;
	}
	free(k.v);
	return ret;
}

/* Move the listed row versions of st (offsets, all in PMem) out of their
 * slots to the device, behind stubs.  Versions of a row already moved in
 * this chunk wait for the next one.  commit_lock held. */
static int move_listed(struct store *s, struct stable *st, uint64_t *offs, size_t n)
{
	struct chunk k = { 0 };
	uint64_t *seen = malloc(EMB_JOURNAL_CAP * sizeof(*seen));
	struct rl *v = malloc(EMB_JOURNAL_CAP * sizeof(*v));
	int ret = v && seen ? 0 : -ENOMEM;
	size_t left = n;
	while (!ret && left && !(ret = chunk_open(s, st, &k))) {
		size_t keep = 0;
		k.v = v;
		for (size_t i = 0; i < left; i++) {
			struct emb_version *x = S_PTR(s, offs[i]);
			uint64_t row = ver_row(x);
			int dup = 0;
			for (size_t j = 0; j < k.n && !dup; j++)
				dup = seen[j] == row;
			if (dup || k.full) {
				offs[keep++] = offs[i];
				continue;
			}
			uint64_t at = linked_at(s, st, row, offs[i]);
			if (at == EMB_NONE || ver_stub(x) || ver_tomb(x))
				continue; /* not ours to move */
			seen[k.n] = row;
			if (chunk_put(s, st, &k, offs[i], at))
				offs[keep++] = offs[i];
		}
		left = keep;
		if (!k.n)
			break;
		/* under commit_lock throughout: the heap is full, commits wait
		 * for this anyway (shrink_rows) */
		uint64_t base = 0;
		ret = k.pos ? seg_write(s, k.pos, &base) : 0;
		if (!ret && k.pos)
			seg_grow(s, k.pos);
		if (!ret)
			ret = chunk_land(s, st, &k, base, 0);
	}
	free(v);
	free(seen);
	return ret;
}

/* The table a row version of slot size ss at off belongs to: the one whose
 * checksum it passes (versions do not name their table), or NULL.  Tables
 * whose rows take ss-byte slots are in cand[0..n). */
static struct stable *owner(struct store *s, uint64_t off, struct stable **cand, size_t n)
{
	const struct emb_version *v = S_PTR(s, off);
	for (size_t i = 0; i < n; i++)
		if (ver_csum(v, cand[i]->id, cand[i]->t->row_size) == v->csum)
			return cand[i];
	return NULL;
}

/* The heap is full while row slabs hold free slots: empty the row slab with
 * the fewest versions (they move to the device) and give it back, so that
 * stubs and the index can grow.  commit_lock held. */
static int shrink_rows(struct store *s)
{
	struct u64vec used = { 0 };
	struct sslab *sl = slab_pick_victim(s, &used);
	int ret = sl ? 0 : -ENOSPC;
	struct stable **cand = NULL;
	size_t ncand = 0;
	if (!ret && !(cand = malloc(64 * sizeof(*cand))))
		ret = -ENOMEM;
	for (uint32_t i = 0; !ret && i < EMB_NTABLES && ncand < 64; i++) {
		struct stable *st = tab_get(s, i);
		if (st && slab_row_slot(st->t->row_size) == sl->hdr->slot_size)
			cand[ncand++] = st;
	}
	/* group by table: versions of one slab belong to tables of one row size */
	while (!ret && used.n) {
		struct stable *t = owner(s, used.v[0], cand, ncand);
		size_t k = 0, m = 0;
		for (size_t i = 0; i < used.n; i++) {
			uint64_t o = used.v[i];
			if (owner(s, o, cand, ncand) == t)
				used.v[k++] = o;
			else
				used.v[used.n - 1 - m++] = o; /* others to the back, kept */
		}
		if (!t) {
			ret = -EIO; /* damaged versions: this slab stays */
			break;
		}
		/* the others sit at the back in reverse; bring them forward after */
		ret = move_listed(s, t, used.v, k);
		memmove(used.v, used.v + used.n - m, m * sizeof(used.v[0]));
		used.n = m;
	}
	if (!ret)
		ret = slab_give_back(s, sl);
	free(cand);
	free(used.v);
	if (!ret)
		s->sp->start_bytes = s->row_cap - s->row_cap / 16;
	return ret;
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
	while (all || mover_used(s) > target) {
		struct stable *st = tab_get(s, sp->cur_table);
		size_t n = 0;
		int gone = 0;
		if (st)
			ret = spill_chunk(s, st, &sp->cur_di, all, &n, &gone);
		if (ret)
			break;
		moved += (int64_t)n;
		size_t ndir = st && !gone ? index_ndir(st) : 0;
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

/* Evictions gave row room back: count them in outs and wake the writers
 * waiting for room (spill_wait_room).  sp->mu held. */
static void outs_add_locked(struct spill *sp)
{
	sp->outs++;
	sp->last_freed = 1;
	pthread_cond_broadcast(&sp->done_cv);
}

/* One eviction of a pass gave row room back: writers that began waiting
 * for room before it began go on now, not after the pass's other
 * evictions (a pass makes several runs: 150 ms each under training, where
 * a pass took up to 800 ms). */
static void mover_evicted(struct spill *sp)
{
	if (sp->manual)
		return;
	pthread_mutex_lock(&sp->mu);
	outs_add_locked(sp);
	pthread_mutex_unlock(&sp->mu);
}

/* Evict cold single-version rows into sorted runs (run.c) until row
 * versions take target bytes (all: every such row).  Rows evicted or
 * -errno.  Mover only (round_lock). */
static int64_t evict_pass(struct store *s, int all, uint64_t target)
{
	struct spill *sp = s->sp;
	int64_t moved = 0;
	uint32_t wraps = 0;
	if (all) {
		sp->ev_table = 0;
		sp->ev_hand = 0;
	}
	uint32_t start_table = sp->ev_table;
	for (;;) {
		uint64_t used = mover_used(s);
		if (!all && used <= target)
			break;
		/* flags: under cat_lock (or commit_lock), as every catalog field */
		pthread_rwlock_rdlock(&s->cat_lock);
		struct stable *st = tab_get(s, sp->ev_table);
		int zombie = st && (st->t->flags & EMB_T_ZOMBIE);
		pthread_rwlock_unlock(&s->cat_lock);
		int64_t n = 0;
		if (st && !zombie) {
			n = runs_evict_table(s, st, &sp->ev_hand, all ? UINT64_MAX / 2 : used - target, all);
			if (n < 0 && n != -ENOENT)
				return moved ? moved : n;
			if (n > 0) {
				moved += n;
				mover_evicted(sp);
				if (!sp->manual)
					spill_hook_sleep(sp->evict_slow_ms);
			}
		}
		if (!st || n <= 0 || sp->ev_hand == EMB_NONE) {
			sp->ev_hand = 0;
			sp->ev_table = (sp->ev_table + 1) % EMB_NTABLES;
			if (sp->ev_table == start_table && ++wraps >= (all ? 1u : 2u))
				break; /* two sweeps: every reference bit had its second chance */
		}
	}
	return moved;
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
		if (mover_used(s) + COW_ROOM / 4 > sp->start_bytes)
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
		if (spill_ver_bytes_locked(s, st, v, ver_data(nv))) {
			slab_unreserve(s, off);
			continue;
		}
		ver_init(nv, ver_row(v), ver_batch(v), 0);
		ver_seal(nv, st->id, st->t->row_size);
		pm_flush(s, nv, sizeof(*nv) + st->t->row_size);
		struct rl r = { q[i].row, c.off, off, chain_vat(&c), 0, 0 };
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

/* Move rows out of the pool, a round's main work: evict cold rows into
 * runs, spill the rest to the device (compacting it when full), and give a
 * row slab back to the heap when nothing else could make room (heap_short:
 * the heap refused a writer since the last round asked).  round_lock held;
 * takes commit_lock in steps.  Rows moved (1: a slab went back) or -errno. */
static int64_t move_out(struct store *s, unsigned what, uint64_t need, int heap_short)
{
	struct spill *sp = s->sp;
	int64_t moved;
	uint64_t target = pass_target(s, need);
	int all = !!(what & STORE_SPILL_ALL);
	int64_t ev = sp->stubs_only ? 0 : evict_pass(s, all, target);
	/* no room for the run: merges that give room back, then again (a
	 * sweep's steps give it back a part at a time) */
	for (int i = 0; i < 64 && ev == -ENOSPC && runs_make_room(s) > 0; i++)
		ev = evict_pass(s, all, target);
	moved = ev;
	if (ev >= 0 && (all || mover_used(s) > target)) {
		moved = spill_pass(s, all, target);
		if (moved >= 0)
			moved += ev;
		else if (ev > 0 && moved != -ENOSPC)
			moved = ev;
	}
	/* the device is full: compact, most stale segment first, for as
	 * long as each one gives back at least an eighth of a segment */
	for (uint64_t i = 0; moved == -ENOSPC && i < sp->pm->nsegs; i++) {
		double ratio;
		uint64_t k = compact_pick(s, 1, &ratio);
		if (k == EMB_NONE || ratio > 0.875 || compact_seg(s, k))
			break;
		moved = spill_pass(s, !!(what & STORE_SPILL_ALL), target);
	}
	/* stubs found the heap full, or the heap refused a writer
	 * that now waits and nothing could move: give a row slab back
	 * to the heap (row_cap shrinks with it).  Not when row_cap
	 * refused the writer: rows already keep to their share, and a
	 * smaller share would only refuse more writes (issue 25) */
	if ((moved == -ENOSPC || (moved == 0 && (what & STORE_SPILL_MOVE) && heap_short)) &&
	    !(what & STORE_SPILL_ALL)) {
		pthread_mutex_lock(&s->commit_lock);
		int r = shrink_rows(s);
		pthread_mutex_unlock(&s->commit_lock);
		if (r == 0) {
			atomic_fetch_add(&sp->shrinks, 1);
			moved = 1;
		}
	}
	return moved;
}

/* The mover thread's evictions begin (begin) or end: writers waiting for
 * room (spill_wait_room) go on when they gave room back (freed), before
 * the round's merges and compaction. */
static void mover_outs(struct spill *sp, int begin, int freed)
{
	if (sp->manual)
		return; /* a round a writer runs itself */
	pthread_mutex_lock(&sp->mu);
	sp->out_busy = begin;
	if (!begin && freed)
		outs_add_locked(sp);
	pthread_mutex_unlock(&sp->mu);
}

static int64_t mover_round_locked(struct store *s, unsigned what, uint64_t need)
{
	struct spill *sp = s->sp;
	int64_t moved = 0;
	runs_reserve(s);
	/* did the heap refuse a slab or the index reserve since the last round
	 * a writer asked for?  (Rounds nobody asked for leave the answer to
	 * the next one that is asked.) */
	uint64_t refusals = atomic_load(&s->heap_refusals);
	int heap_short = 0;
	if (what & STORE_SPILL_MOVE) {
		heap_short = refusals != sp->heap_seen;
		sp->heap_seen = refusals;
	}
	if (sp->recount) {
		pthread_mutex_lock(&s->commit_lock);
		int ret = spill_recount_locked(s);
		pthread_mutex_unlock(&s->commit_lock);
		if (ret)
			return ret;
	}
	if ((what & STORE_SPILL_MOVE) || mover_used(s) > sp->start_bytes) {
		mover_outs(sp, 1, 0);
		sp->evicting = 1;
		moved = move_out(s, what, need, heap_short);
		sp->evicting = 0;
		mover_outs(sp, 0, moved > 0);
		if ((what & STORE_SPILL_MOVE) && moved > 0)
			spill_hook_sleep(sp->merge_delay_ms);
	}
	if (what & STORE_SPILL_PROMOTE || !sp->manual)
		promote(s);
	/* runs: merge what a table has too many of (one merge only while a
	 * writer waits for room: it waits for this round), free what merges
	 * replaced */
	int r = 1;
	for (int i = 0; i < (need ? 1 : 4) && r == 1; i++)
		r = runs_merge_some(s); /* 2: a sweep began with a step */
	if (r != 2)
		runs_sweep_some(s); /* a step of a sweep under way, each round */
	pthread_mutex_lock(&s->commit_lock);
	runs_reap_locked(s);
	pthread_mutex_unlock(&s->commit_lock);
	double ratio;
	uint64_t k = compact_pick(s, !!(what & STORE_SPILL_COMPACT), &ratio);
	if (k != EMB_NONE) {
		int ret = compact_seg(s, k);
		if (ret && moved >= 0)
			moved = ret;
	}
	/* the open segment holds only stale records: append from its start */
	pthread_mutex_lock(&s->commit_lock);
	if (sp->open_seg >= 0 && !sp->recount) {
		struct emb_sseg *g = &sp->pm->seg[sp->open_seg];
		if (g->fill && !g->nlive && !g->live && !atomic_load(&sp->pins[sp->open_seg])) {
			g->fill = 0;
			pm_flush(s, &g->fill, 8);
			if (pm_barrier(s) && moved >= 0)
				moved = -EIO;
		}
	}
	pthread_mutex_unlock(&s->commit_lock);
	return moved;
}

/* sp->evict_now (spill.h). */
static void spill_evict_between(struct store *s, uint32_t segs)
{
	struct spill *sp = s->sp;
	if (sp->manual || sp->evicting || sp->stubs_only)
		return;
	pthread_mutex_lock(&sp->mu);
	int kicked = sp->kicked;
	uint64_t need = sp->need;
	pthread_mutex_unlock(&sp->mu);
	if (!kicked && mover_used(s) <= sp->start_bytes)
		return;
	mover_outs(sp, 1, 0);
	sp->evicting = 1;
	sp->merge_segs = segs;
	int64_t n = evict_pass(s, 0, pass_target(s, need));
	sp->merge_segs = 0;
	sp->evicting = 0;
	mover_outs(sp, 0, n > 0);
	if (n > 0)
		atomic_fetch_add_explicit(&sp->between, 1, memory_order_relaxed);
}

/* One round of the mover's work (what: STORE_SPILL_*). */
static int64_t mover_round(struct store *s, unsigned what, uint64_t need)
{
	if (pm_writable(s))
		return -EROFS; /* a failed pool moves nothing */
	pthread_mutex_lock(&s->sp->round_lock);
	int64_t r = mover_round_locked(s, what, need);
	runs_evict_release(s->sp);
	pthread_mutex_unlock(&s->sp->round_lock);
	return r;
}

void *mover_main(void *arg)
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
		uint64_t before = slab_row_used(s);
		int64_t moved = mover_round(s, kicked ? STORE_SPILL_MOVE : 0, need);
		uint64_t after = slab_row_used(s);
		device_iops_tick(sp);
		pthread_mutex_lock(&sp->mu);
		sp->last_freed = moved > 0 || after < before;
		sp->passes++;
		sp->busy = 0;
		pthread_cond_broadcast(&sp->done_cv);
	}
	pthread_mutex_unlock(&sp->mu);
	return NULL;
}

#define NEED_MAX (1ull << 60) /* the waiters' summed need saturates here */

/* Room for a writer that found none: a round of the mover that moved
 * versions out, or row usage (versions and promises) lower than when the
 * writer asked (others' promises came back meanwhile), is worth another
 * try.  Writers that wait together ask for the sum of their needs.  The
 * wait ends with the first eviction begun after the writer asked that gave
 * room back (one of a round's, or one made in the middle of a merge:
 * spill_evict_between), else with the round. */
int spill_wait_room(struct store *s, uint64_t need)
{
	struct spill *sp = s->sp;
	uint64_t before = slab_row_used(s);
	atomic_fetch_add(&sp->waits, 1);
	if (sp->manual) {
		int64_t moved = mover_round(s, STORE_SPILL_MOVE, need);
		int ret = moved > 0 || (moved == 0 && slab_row_used(s) < before) ? 0 : -ENOSPC;
		if (ret)
			atomic_fetch_add(&sp->full, 1);
		return ret;
	}
	pthread_mutex_lock(&sp->mu);
	uint64_t want = sp->passes + (sp->busy ? 2 : 1); /* a whole pass begun after this call */
	uint64_t want_outs = sp->outs + (sp->out_busy ? 2 : 1); /* ... or its evictions */
	sp->kicked = 1;
	sp->need = need < NEED_MAX - sp->need ? sp->need + need : NEED_MAX;
	pthread_cond_signal(&sp->cv);
	while (sp->passes < want && sp->outs < want_outs && !sp->stop)
		pthread_cond_wait(&sp->done_cv, &sp->mu);
	int freed = sp->last_freed, stop = sp->stop;
	pthread_mutex_unlock(&sp->mu); /* a leaf: slab_row_used takes space_lock */
	int ret = !stop && (freed || slab_row_used(s) < before) ? 0 : -ENOSPC;
	if (ret)
		atomic_fetch_add(&sp->full, 1);
	return ret;
}

void spill_promised(struct store *s, uint64_t bytes)
{
	struct spill *sp = s->sp;
	uint64_t m = atomic_load_explicit(&sp->req_max, memory_order_relaxed);
	while (bytes > m && !atomic_compare_exchange_weak(&sp->req_max, &m, bytes))
		;
	uint64_t early = atomic_load_explicit(&sp->early, memory_order_relaxed);
	if (sp->manual || slab_row_used(s) + early <= sp->start_bytes)
		return;
	pthread_mutex_lock(&sp->mu);
	if (!sp->busy)
		pthread_cond_signal(&sp->cv);
	pthread_mutex_unlock(&sp->mu);
}

int store_spill_run(struct store *s, unsigned what)
{
	if (!s->sp)
		return -ENODEV;
	int64_t r = mover_round(s, what, 0);
	return r < 0 ? (int)r : (int)(r > INT32_MAX ? INT32_MAX : r);
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

void spill_close(struct store *s)
{
	struct spill *sp = s->sp;
	if (!sp)
		return;
	bulk_settle(s, BULK_ANY, EMB_NONE); /* a failure is the pool's: reported by store_health */
	if (sp->thr_started) {
		pthread_mutex_lock(&sp->mu);
		sp->stop = 1;
		pthread_cond_broadcast(&sp->cv);
		pthread_cond_broadcast(&sp->done_cv);
		pthread_mutex_unlock(&sp->mu);
		pthread_join(sp->thr, NULL);
		sp->thr_started = 0;
	}
	sweep_end(sp); /* its references first */
	runs_evict_forget(sp);
	runs_evict_release(sp);
	runs_unload(sp);
	spill_detach(s);
}

void store_spill_stats_get(struct store *s, struct store_spill_stats *st)
{
	device_stats_get(s, st);
	if (s->sp)
		runs_stats(s, st);
}

void store_test_spill_hooks(struct store *s, const struct store_test_spill *h)
{
	static const struct store_test_spill none;
	s->test_spill = h ? *h : none;
}

int store_spill_attach(struct store *s, const struct store_spill_conf *c, char *err, size_t n)
{
	int ret = device_attach(s, c, err, n);
	struct spill *sp = s->sp;
	if (ret || !sp)
		return ret;
	sp->evict_now = spill_evict_between;
	if ((ret = runs_load(s, err, n))) {
		spill_close(s);
		return ret;
	}
	if (sp->manual && sp->recount) { /* tests run the mover by hand: counts exact at once */
		pthread_mutex_lock(&s->commit_lock);
		ret = spill_recount_locked(s);
		pthread_mutex_unlock(&s->commit_lock);
		if (ret)
			return ret;
	}
	if (!sp->manual && pthread_create(&sp->thr, NULL, mover_main, s) == 0)
		sp->thr_started = 1;
	return 0;
}

/* ---- the journaled relink (spilling and promotion) --------------------- */

/* Replace version r[i].old by r[i].new_ (already written and flushed) where
 * r[i].at refers to it: 0, or -EIO (nothing changed) if an index entry to
 * change is damaged.  commit_lock held. */
int relink_apply(struct store *s, struct stable *st, struct rl *r, size_t n)
{
	struct emb_journal *j = s->jr;
	struct ipos *pos = calloc(n, sizeof(*pos));
	if (!pos)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		uint64_t cur;
		int ret = r[i].at ? 0 : index_find(s, st, r[i].row, &pos[i], &cur);
		if (!ret && !r[i].at && cur != r[i].old)
			ret = -EIO;
		if (ret) {
			free(pos);
			return ret;
		}
	}
	for (size_t i = 0; i < n; i++)
		j->ent[i] = (struct emb_jrec){ r[i].row, r[i].old, r[i].new_, 0 };
	int ret = journal_seal(s, st, EMB_J_RELINK, n, 0);
	if (ret) {
		free(pos);
		return ret;
	}

	for (size_t i = 0; i < n; i++)
		slab_mark(s, r[i].new_);
	pthread_rwlock_wrlock(&st->lock);
	for (size_t i = 0; i < n; i++) {
		if (r[i].at == 0)
			index_set_val(s, &pos[i], r[i].new_);
		else if (r[i].at != EMB_NONE)
			field_set(s, r[i].at, r[i].new_);
	}
	pthread_rwlock_unlock(&st->lock);
	free(pos);
	if ((ret = pm_barrier(s)))
		return ret;

	for (size_t i = 0; i < n; i++)
		spill_ver_free(s, st, r[i].old);
	return journal_clear(s);
}

int spill_relink_replay(struct store *s, struct emb_journal *j)
{
	struct stable *st = tab_get(s, j->table);
	if (!st)
		return -EIO;
	for (uint64_t i = 0; i < j->count; i++) {
		struct emb_jrec *r = &j->ent[i];
		int linked = chain_has(s, st, r->row, r->new_off);
		if (linked < 0)
			continue; /* a damaged chain: keep both (a leak, never a loss) */
		uint64_t drop = r->new_off;
		if (linked) {
			slab_mark(s, r->new_off);
			drop = chain_has(s, st, r->row, r->old_off) == 0 ? r->old_off : 0;
		}
		if (drop)
			spill_ver_free(s, st, drop);
	}
	return pm_barrier(s);
}
