/*
 * Group commit of row updates, and its recovery.
 *
 * A commit of N row updates of one table runs in four steps, each ended by a
 * persist barrier (pm.c), so its cost on a plain file is four fsyncs whatever
 * N is:
 *
 *   A2  intent records (table, row, old version, new version) go to the
 *       journal, sealed by a checksum.                         barrier
 *   A3  new versions are written copy-on-write into free slots and marked in
 *       their slab bitmaps; keys of new rows are written into free (still
 *       invisible) index slots.                                barrier
 *   B   publish: one 8-byte store per row (index value or bucket control
 *       word), plus the file size and times.                   barrier
 *   C   replaced or deleted versions are freed; journal emptied. barrier
 *
 * Every row is atomic: before B's store for a row it reads old, after it new.
 * Recovery replays the journal: a row whose index points at the new version
 * was committed (free the old one), otherwise the new version is freed.  So a
 * crash at any point leaks nothing and tears nothing.  Space (slots, index
 * splits) is taken before A2, so ENOSPC leaves every row untouched.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "store_int.h"
#include "tier/tier.h"

struct uop {
	uint64_t row;
	uint64_t batch;
	uint64_t old_ref;  /* the index's ref (0 = none) */
	uint64_t old_ver, old_link; /* its first element: version and link (0: referred to directly) */
	uint64_t old_next; /* what follows that element in the chain */
	struct emb_version *ov; /* old_ver, validated (NULL: none, or damaged) */
	uint64_t new_ver, new_link, new_ref; /* what the commit writes: version, link, the index's new ref */
	uint64_t cont;     /* what follows the new version in the chain (its link's next), 0 = nothing */
	struct ipos pos;
	int found;   /* row is in the index */
	int live;    /* ... and its newest version is not a tombstone */
	int del;     /* final state of the row is deleted */
	int tomb;    /* the delete writes a tombstone (older versions are needed) */
	int retain;  /* the replaced version stays, for a snapshot */
	int skip;    /* nothing to do */
	int claimed; /* pos is a claimed free slot */
	int full;    /* an op writes the whole row: the old bytes are not needed */
	int damaged; /* its newest version is damaged (ver.c) and the update replaces it whole */
	int head_only; /* ov was checked by its header only (no live snapshot: it is freed unread) */
	int inrun;   /* not in the index, but a run on the spill device may hold it (run.c);
		      * asked only for a delete or a partial write (0 otherwise) */
	char *old;   /* the old bytes of a spilled row that is partly rewritten */
};

struct umap {
	size_t cap;
	uint32_t *e; /* uop index + 1, 0 = empty */
};

static uint32_t *umap_slot(struct umap *m, const struct uop *u, uint64_t row)
{
	size_t i = (size_t)(row * 0x9E3779B97F4A7C15ull >> 17);
	for (;; i++) {
		uint32_t *e = &m->e[i & (m->cap - 1)];
		if (!*e || u[*e - 1].row == row)
			return e;
	}
}

/* The row's newest version is damaged and the update replaces the whole row
 * (or deletes it): the new version (or tombstone) takes its place and links
 * to it while a live snapshot may need what it hid (such reads stay EIO);
 * the damaged element is never freed nor read.  So rewriting a damaged row
 * heals its live view. */
static void plan_damaged(struct store *s, struct uop *u)
{
	int keep = s->n_live > 0;
	u->live = 1;
	u->retain = u->skip = 0;
	u->tomb = u->del && keep;
	u->cont = keep ? u->old_ref : 0;
}

/* Decide what happens to each row: a new version replaces the newest one,
 * which is kept (chained) if a live snapshot needs it and freed otherwise; a
 * delete removes the row, or writes a tombstone when older versions must
 * stay reachable. */
static void plan(struct store *s, uint32_t id, uint32_t rs, struct uop *u)
{
	if (u->head_only && u->ov && s->n_live && !ver_get(s, u->old_ver, id, u->row, rs)) {
		/* a snapshot came after the prepass: it may keep the old version,
		 * which is now checked whole */
		u->damaged = 1;
		u->ov = NULL;
		u->old_ver = u->old_link = u->old_next = 0;
	}
	if (u->damaged) {
		plan_damaged(s, u);
		return;
	}
	struct emb_version *v = u->ov;
	u->live = v && !ver_tomb(v);
	u->retain = u->tomb = u->skip = 0;
	u->cont = 0;
	if (v && u->batch < ver_batch(v))
		u->batch = ver_batch(v); /* batches never go back along a chain */
	int need = v && snapset_needed(s, ver_batch(v), u->batch);
	if (u->del && !v && u->inrun) {
		u->tomb = 1; /* hides what the runs hold */
		return;
	}
	if (u->del) {
		if (!u->live) {
			u->skip = 1; /* a hole already, for the live view */
		} else if (need || u->old_next || u->inrun) {
			u->tomb = 1;
			u->retain = need;
			u->cont = need ? u->old_ref : u->old_next;
		}
		return;
	}
	if (v) {
		u->retain = need;
		u->cont = need ? u->old_ref : u->old_next;
	}
}

/* Rows ahead whose first bucket a prepass starts loading, and rows ahead
 * whose old version (which the find reads to tell the row, and plan()
 * checks) it starts loading once that bucket is in. */
#define PREPASS_AHEAD 32
#define PREPASS_REFS 16

/* Segments a prepass found full, each with a row of it. */
struct fullseg {
	const void *seg;
	uint64_t row;
};
struct fullsegs {
	struct fullseg *v;
	size_t n, cap;
};

static int fullsegs_note(struct fullsegs *f, const void *seg, uint64_t row)
{
	for (size_t k = 0; k < f->n; k++)
		if (f->v[k].seg == seg)
			return 0;
	if (arr_room(&f->v, f->n, &f->cap, sizeof(*f->v), 16))
		return -ENOMEM;
	f->v[f->n++] = (struct fullseg){ seg, row };
	return 0;
}

/* Grow every segment noted: -EAGAIN (start over) or -errno. */
static int fullsegs_grow(struct store *s, struct stable *st, struct fullsegs *f)
{
	int ret = -EAGAIN;
	for (size_t k = 0; k < f->n && ret == -EAGAIN; k++)
		ret = index_grow_key(s, st, f->v[k].row);
	f->n = 0;
	return ret;
}

/* Look every row up and claim index slots for new rows.  The segments
 * found full on the way are grown together at the end, then it starts over
 * (a group of thousands of new rows used to start over at each split: 4.4
 * times a group in dist's pushes, each pass looking every row up again).
 * Needs no snapshot: plan_all decides what the old versions become. */
static int prepass(struct store *s, struct stable *st, struct uop *u, size_t nu,
		   struct claims *c, int runs_hidden)
{
	struct fullsegs full = { 0 };
	uint32_t rs = st->t->row_size;
	for (;;) {
		int ret = 0;
		claims_reset(c);
		for (size_t i = 0; i < nu && i < PREPASS_AHEAD; i++)
			index_prefetch(s, st, u[i].row);
		/* with no live snapshot, a version a row written whole replaces
		 * is freed unread: its header is all that is checked (and loaded) */
		int head_ok = !__atomic_load_n(&s->n_live, __ATOMIC_ACQUIRE);
		for (size_t i = 0; i < nu; i++)
			u[i].head_only = head_ok && u[i].full && !u[i].del;
		for (size_t i = 0; i < nu && i < PREPASS_REFS; i++)
			index_prefetch_refs(s, st, u[i].row, u[i].head_only ? 0 : rs);
		for (size_t i = 0; i < nu && !ret; i++) {
			if (i + PREPASS_AHEAD < nu) /* each find's bucket a cache miss otherwise */
				index_prefetch(s, st, u[i + PREPASS_AHEAD].row);
			if (i + PREPASS_REFS < nu) /* and the version it reads */
				index_prefetch_refs(s, st, u[i + PREPASS_REFS].row, u[i + PREPASS_REFS].head_only ? 0 : rs);
			ret = index_find(s, st, u[i].row, &u[i].pos, &u[i].old_ref);
			u[i].damaged = 0;
			/* plan() reads the old version, A3 may copy its bytes */
			struct chain ch;
			if (!ret && (u[i].head_only ? chain_start_head : chain_start)(s, st, u[i].row, u[i].old_ref, &ch)) {
				if (u[i].full || u[i].del)
					u[i].damaged = 1;
				else
					ret = -EIO; /* its bytes are needed */
			}
			if (ret)
				break;
			u[i].ov = u[i].damaged ? NULL : ch.v;
			u[i].old_ver = u[i].damaged ? 0 : ch.off;
			u[i].old_link = u[i].damaged ? 0 : ch.link;
			u[i].old_next = u[i].damaged ? 0 : ch.next;
			u[i].found = u[i].old_ref != 0;
			u[i].claimed = 0;
			u[i].inrun = 0;
			/* only a delete (its tombstone) and a partial write (the old
			 * bytes) of a row the index lacks ask the runs: a whole new
			 * row hides whatever they hold, as a pool row does */
			if (s->sp && !runs_hidden && (u[i].del || (!u[i].found && !u[i].full)))
				u[i].inrun = runs_may_hold(s, st->id, u[i].row);
			if (!u[i].found && (!u[i].del || u[i].inrun)) {
				const void *seg;
				ret = index_claim(s, st, c, u[i].row, &u[i].pos, &seg);
				u[i].claimed = 1;
				if (ret == 1)
					ret = fullsegs_note(&full, seg, u[i].row);
			}
		}
		if (!ret && full.n)
			ret = fullsegs_grow(s, st, &full);
		if (ret != -EAGAIN) {
			free(full.v);
			return ret;
		}
	}
}

/* Rows planned per hold of snap_lock by a group whose rows all carry their
 * batch (see group_commit). */
#define PLAN_SLICE 1024

/* plan() every row.  held: the caller holds snap_lock for the whole group;
 * otherwise it is taken for a slice of rows at a time, so that a snapshot
 * taken meanwhile waits for one slice, not for the group. */
static void plan_all(struct store *s, struct stable *st, struct uop *u, size_t nu, int held)
{
	for (size_t i = 0; i < nu;) {
		size_t end = held || nu - i <= PLAN_SLICE ? nu : i + PLAN_SLICE;
		if (!held)
			pthread_rwlock_rdlock(&s->snap_lock);
		for (; i < end; i++)
			plan(s, st->id, st->t->row_size, &u[i]);
		if (!held)
			pthread_rwlock_unlock(&s->snap_lock);
	}
}

/* A version is written (new row version or tombstone). */
static inline int writes(const struct uop *u)
{
	return !u->skip && (!u->del || u->tomb);
}

/* The old first element goes in step C (its version, and its link). */
static inline int frees(const struct uop *u)
{
	return !u->skip && u->old_ref && !u->retain && !u->damaged;
}

/* One group of row updates, planned whole before anything changes. */
struct group {
	struct uop *u;
	size_t nu;
	struct umap m;
	uint32_t *opord;   /* op indices grouped by uop, each uop's in request order */
	uint32_t *opstart; /* opord[opstart[k] .. opstart[k+1]) are uop k's ops */
	struct claims *c;
	uint32_t cls, scls, rs; /* the row class and the small class (links, tombstones) */
	size_t chunk;      /* uops per commit: the journal, and copy-on-write headroom */
	uint64_t *offs;    /* a chunk's slots to mark or to free (2 * chunk, or 2 * nu if fewer) */
	int stamped;       /* every op carries its batch: snap_lock is not held throughout */
	int runs_hidden;   /* COMMIT_RUNS_HIDDEN: deletes need no tombstone for the runs */
};

static void group_free(struct group *g)
{
	for (size_t i = 0; i < g->nu; i++)
		free(g->u[i].old);
	claims_free(g->c);
	free(g->offs);
	free(g->m.e);
	free(g->opord);
	free(g->opstart);
	free(g->u);
}

/* Check the ops, gather them into one uop per row (g->u, g->nu) and order
 * them by uop (g->opord, g->opstart; opu: scratch of n).  0, -EINVAL (an op
 * past the end of its row) or -EFBIG (a row id past the largest). */
static int group_ops(struct group *g, const struct store_rowop *ops, size_t n, uint64_t cur_batch,
		     uint32_t *opu)
{
	uint32_t rs = g->rs;
	for (size_t i = 0; i < n; i++) {
		if (ops[i].data && ((uint64_t)ops[i].off + ops[i].len > rs))
			return -EINVAL;
		if (ops[i].row > EMB_ROW_ID_MAX)
			return -EFBIG;
		uint32_t *e = umap_slot(&g->m, g->u, ops[i].row);
		if (!*e) {
			g->u[g->nu].row = ops[i].row;
			*e = (uint32_t)++g->nu;
		}
		struct uop *x = &g->u[*e - 1];
		x->del = ops[i].data == NULL;
		x->batch = ops[i].batch ? ops[i].batch : cur_batch;
		x->full |= ops[i].data && ops[i].off == 0 && ops[i].len == rs;
		opu[i] = *e - 1;
		g->opstart[*e]++;
	}
	for (size_t k = 0; k < g->nu; k++)
		g->opstart[k + 1] += g->opstart[k];
	for (size_t i = 0, fill; i < n; i++) { /* stable: request order within a uop */
		fill = g->opstart[opu[i]]++;
		g->opord[fill] = (uint32_t)i;
	}
	for (size_t k = g->nu; k > 0; k--) /* undo the fill's advance */
		g->opstart[k] = g->opstart[k - 1];
	g->opstart[0] = 0;
	return 0;
}

/* The old bytes each partial update of a spilled row needs, read from the
 * run or the device that holds them (into uop.old).  commit_lock held, and
 * snap_lock (shared) unless g->stamped.  0 or -errno. */
static int group_old_bytes(struct store *s, struct stable *st, struct group *g)
{
	uint32_t rs = g->rs;
	int ret = 0;
	/* a partial update of a row only a run holds: its bytes from there */
	for (size_t i = 0; i < g->nu && !ret; i++) {
		struct uop *x = &g->u[i];
		if (x->found || !x->inrun || x->full || x->del)
			continue;
		if (!(x->old = calloc(1, rs)))
			return -ENOMEM;
		int got = runs_row_read(s, st, x->row, x->old);
		ret = got < 0 ? got : 0;
		if (got == 0)
			memset(x->old, 0, rs);
	}
	if (ret)
		return ret;
	/* a partial update of a spilled row needs its bytes from the device */
	for (size_t i = 0; i < g->nu; i++) {
		struct uop *x = &g->u[i];
		if (!x->live || x->damaged || x->full || x->del || !ver_stub(x->ov))
			continue;
		if (!(x->old = malloc(rs)))
			return -ENOMEM;
		if ((ret = spill_ver_bytes_locked(s, st, x->ov, x->old)))
			return ret;
	}
	return 0;
}

/* Deduplicate the ops, look every row up, claim index slots for new rows
 * (splitting segments as needed: the only step that grows the index), plan
 * each row against the live snapshots, and read the device bytes of spilled
 * rows a partial update needs.  Nothing in the pool changes.  commit_lock
 * held, and snap_lock (shared) unless g->stamped. */
static int group_plan(struct store *s, struct stable *st, const struct store_rowop *ops, size_t n,
		      uint64_t size_hint, struct group *g, int stamped, int runs_hidden)
{
	uint32_t rs = st->t->row_size;
	uint64_t cur_batch = ld64(&s->sb->batch);
	memset(g, 0, sizeof(*g));
	g->rs = rs;
	g->stamped = stamped;
	g->runs_hidden = !!runs_hidden;
	g->m.cap = 16;
	while (g->m.cap < 2 * n + 16)
		g->m.cap <<= 1;
	g->m.e = calloc(g->m.cap, sizeof(*g->m.e));
	g->u = calloc(n, sizeof(*g->u));
	g->opord = malloc(n * sizeof(*g->opord));
	g->opstart = calloc(n + 1, sizeof(*g->opstart));
	uint32_t *opu = malloc(n * sizeof(*opu));
	int ret = 0;
	if (!g->m.e || !g->u || !g->opord || !g->opstart || !opu) {
		ret = -ENOMEM;
		goto out;
	}
	if (size_hint > store_max_size(rs)) {
		ret = -EFBIG;
		goto out;
	}
	if ((ret = group_ops(g, ops, n, cur_batch, opu)))
		goto out;
	if ((ret = slab_class_for(s, rs, &g->cls)) || (ret = slab_class_small(s, &g->scls)))
		goto out;
	g->chunk = slab_commit_rows(s, g->cls);
	if (g->chunk > slab_commit_rows(s, g->scls) / 2)
		g->chunk = slab_commit_rows(s, g->scls) / 2; /* a tombstone and a link each */
	if (!(g->c = claims_new(g->nu)) ||
	    !(g->offs = malloc(2 * (g->chunk < g->nu ? g->chunk : g->nu) * sizeof(*g->offs) + 1))) {
		ret = -ENOMEM;
		goto out;
	}
	if ((ret = prepass(s, st, g->u, g->nu, g->c, g->runs_hidden)))
		goto out;
	plan_all(s, st, g->u, g->nu, !stamped);
	ret = group_old_bytes(s, st, g);
out:
	free(opu);
	return ret;
}

/* Slots a uop takes (new version, link) and gives back (the old first
 * element) in the row class [0] and the small class [1]. */
static void uop_slots(const struct uop *u, int64_t take[2], int64_t give[2])
{
	take[0] = take[1] = give[0] = give[1] = 0;
	if (writes(u)) {
		take[u->tomb]++;
		take[1] += u->cont != 0;
	}
	if (frees(u)) {
		give[u->ov && (ver_tomb(u->ov) || ver_stub(u->ov))]++;
		give[1] += u->old_link != 0;
	}
}

/* Make sure every chunk of the group will find its slots, in both classes:
 * chunk k needs the slots all chunks up to k write, less those the chunks
 * before it freed.  Grows the classes now, so ENOSPC comes before any row
 * changes. */
static int group_room(struct store *s, struct group *g, int promised)
{
	int64_t run[2] = { 0, 0 }, worst[2] = { 0, 0 }, freed[2] = { 0, 0 };
	size_t in_chunk = 0;
	for (size_t i = 0; i < g->nu; i++) {
		if (g->u[i].skip)
			continue;
		int64_t take[2], give[2];
		uop_slots(&g->u[i], take, give);
		for (int k = 0; k < 2; k++) {
			run[k] += take[k];
			if (run[k] > worst[k])
				worst[k] = run[k];
			freed[k] += give[k];
		}
		if (++in_chunk == g->chunk) { /* its frees serve the chunks after it */
			for (int k = 0; k < 2; k++) {
				run[k] -= freed[k];
				freed[k] = 0;
			}
			in_chunk = 0;
		}
	}
	int ret = 0;
	if (worst[0] > 0)
		ret = slab_ensure(s, g->cls, (uint64_t)worst[0], promised);
	if (!ret && worst[1] > 0)
		ret = slab_ensure(s, g->scls, (uint64_t)worst[1], promised);
	return ret;
}

static void chunk_unslot(struct store *s, struct group *g, size_t from, size_t to)
{
	for (size_t i = from; i < to; i++) {
		struct uop *u = &g->u[i];
		if (u->new_ver)
			slab_unreserve(s, u->new_ver);
		if (u->new_link)
			slab_unreserve(s, u->new_link);
		u->new_ver = u->new_link = u->new_ref = 0;
	}
}

/* A1: take the chunk's slots (group_room made sure they are there); each
 * uop's new ref: its link, or its version, or 0 for a delete. */
static int chunk_slots(struct store *s, struct group *g, size_t from, size_t to)
{
	struct uop *u = g->u;
	for (size_t i = from; i < to; i++) {
		u[i].new_ver = u[i].new_link = u[i].new_ref = 0;
		if (!writes(&u[i]))
			continue;
		int ret = slab_alloc(s, u[i].tomb ? g->scls : g->cls, &u[i].new_ver);
		if (!ret && u[i].cont)
			ret = slab_alloc(s, g->scls, &u[i].new_link);
		if (ret) { /* cannot happen after group_room: fail this chunk whole */
			chunk_unslot(s, g, from, i + 1);
			return ret;
		}
		u[i].new_ref = u[i].new_link ? u[i].new_link | EMB_REF_LINK : u[i].new_ver;
	}
	return 0;
}

/* A2: the chunk's intents, sealed and durable. */
static int chunk_intents(struct store *s, struct stable *st, struct group *g, size_t from, size_t to,
			 uint64_t size_hint)
{
	struct emb_journal *j = s->jr;
	struct uop *u = g->u;
	uint64_t nrec = 0;
	for (size_t i = from; i < to; i++)
		if (!u[i].skip)
			j->ent[nrec++] = (struct emb_jrec){ u[i].row, u[i].old_ref, u[i].new_ref,
							    (u[i].new_link ? u[i].new_ver : 0) |
								    (u[i].damaged ? EMB_JR_DAMAGED : 0) };
	return journal_seal(s, st, EMB_J_COMMIT, nrec, size_hint);
}

/* Versions of rows up to this size are made and sealed in a buffer of the
 * committing thread, then copied to their slot: the checksum reads bytes
 * the cache holds, not the slot's lines the copy is still filling.  A
 * rewrite's write-back, 4 pairs: 1.18-1.22 us a row against 1.22-1.29 in
 * place.  Larger ones are made in place. */
#define VER_STAGE_MAX 4096u

/* A3: the new version of uop x, copy-on-write: header, the old bytes, the
 * ops' bytes in request order, checksum; its link to what follows; a new
 * row's ref written into its claimed (still invisible) index slot.  Their
 * slots are marked after the chunk's versions (chunk_mark). */
static void write_version(struct store *s, struct stable *st, const struct store_rowop *ops,
			  const struct group *g, size_t i)
{
	const struct uop *x = &g->u[i];
	uint32_t rs = g->rs;
	struct emb_version *v = S_PTR(s, x->new_ver);
	size_t vlen = sizeof(*v) + (x->tomb ? 0 : rs);
	_Alignas(64) char stage[sizeof(struct emb_version) + VER_STAGE_MAX];
	struct emb_version *w = vlen <= sizeof(stage) ? (struct emb_version *)stage : v;
	ver_init(w, x->row, x->batch, x->tomb ? EMB_VK_TOMB : 0);
	if (!x->tomb) {
		char *d = ver_data(w);
		/* with an op that writes the whole row (x->full) the ops below
		 * define every byte: the old ones are not read */
		if (x->old)
			memcpy(d, x->old, rs);
		else if (x->full)
			;
		else if (x->live && !x->damaged && !ver_stub(x->ov))
			memmove(d, ver_data(x->ov), rs); /* the same slot only if a bitmap is damaged */
		else
			memset(d, 0, rs);
		for (uint32_t k = g->opstart[i]; k < g->opstart[i + 1]; k++) {
			const struct store_rowop *op = &ops[g->opord[k]];
			if (op->data)
				memcpy(d + op->off, op->data, op->len);
			else
				memset(d, 0, rs); /* deleted, then written again */
		}
	}
	ver_seal(w, st->id, rs);
	if (w != v)
		memcpy(v, w, vlen);
	pm_flush(s, v, vlen);
	if (x->new_link) {
		struct emb_link *l = S_PTR(s, x->new_link);
		l->key = x->row | EMB_VK_LINK;
		l->ver = x->new_ver;
		l->next = x->cont;
		pm_flush(s, l, sizeof(*l));
	}
	if (x->claimed)
		index_fill(s, st, &x->pos, x->row, x->new_ref);
}

/* Rows ahead whose index bucket a publish starts loading. */
#define PUBLISH_AHEAD 16

/* B: one 8-byte store per row makes it visible; row count, size, times. */
static void chunk_publish(struct store *s, struct stable *st, struct group *g, size_t from, size_t to,
			  uint64_t size_hint)
{
	struct emb_table *t = st->t;
	struct uop *u = g->u;
	int64_t drows = 0;
	int changed = 0;
	uint64_t now = now_ns();
	pthread_rwlock_wrlock(&st->lock);
	for (size_t i = from; i < to; i++) {
		if (i + PUBLISH_AHEAD < to) { /* the bucket, read in the prepass, since gone from the cache */
			const struct ipos *p = &u[i + PUBLISH_AHEAD].pos;
			if (p->b) {
				prefetch_l2(p->b);
				prefetch_l2(&p->b->slot[p->slot]);
			}
		}
		if (u[i].skip)
			continue;
		if (u[i].del && !u[i].tomb)
			index_unpublish(s, st, &u[i].pos, u[i].row);
		else if (u[i].found)
			index_set_val(s, &u[i].pos, u[i].new_ref);
		else
			index_publish(s, st, &u[i].pos, u[i].row);
		int live_new = !u[i].del;
		drows += live_new - u[i].live;
		changed |= live_new != u[i].live;
	}
	if (drows)
		st64(&t->nrows, t->nrows + (uint64_t)drows);
	if (changed)
		st->mod++;
	max64(&t->size, size_hint);
	st64(&t->mtime_ns, now);
	st64(&t->ctime_ns, now);
	pthread_rwlock_unlock(&st->lock);
	pm_flush(s, t, 128);
}

/* A3: the chunk's new slots marked in their slab bitmaps, under one hold
 * of the space lock (a lock per row waited for the row's flushes). */
static void chunk_mark(struct store *s, struct group *g, size_t from, size_t to)
{
	size_t k = 0;
	for (size_t i = from; i < to; i++)
		if (writes(&g->u[i])) {
			g->offs[k++] = g->u[i].new_ver;
			if (g->u[i].new_link)
				g->offs[k++] = g->u[i].new_link;
		}
	slab_mark_all(s, g->offs, k);
}

/* C: free what was replaced and is not kept for a snapshot (all under one
 * hold of the space lock, as chunk_mark); charge what is kept to the one
 * snapshot that alone holds it. */
static void chunk_free(struct store *s, struct stable *st, struct group *g, size_t from, size_t to)
{
	struct uop *u = g->u;
	size_t k = 0;
	if (g->stamped)
		pthread_rwlock_rdlock(&s->snap_lock);
	for (size_t i = from; i < to; i++) {
		if (u[i].skip)
			continue;
		if (frees(&u[i])) {
			g->offs[k++] = u[i].old_ver;
			if (u[i].old_link)
				g->offs[k++] = u[i].old_link;
		}
		if (u[i].del && !u[i].tomb)
			index_ovf_dec(s, st, &u[i].pos);
		if (u[i].retain)
			snapset_charge(s, ver_batch(u[i].ov), u[i].batch,
				       s->cls[g->cls].slot_size + (u[i].new_link ? EMB_SMALL_SLOT : 0));
		/* a row's first write into the pool does not make it hot: a load's
		 * rows, written once, then leave in row order (the mover's hand),
		 * and one pass over rows never touched again (a scan) does not
		 * push the rows in use out */
		if (s->sp && u[i].found)
			spill_note_use(s, st->id, u[i].row);
	}
	spill_vers_free(s, st, g->offs, k);
	if (g->stamped)
		pthread_rwlock_unlock(&s->snap_lock);
}

/* Apply uops [from, to) as one journaled commit (the steps at the top of
 * this file).  A failed barrier stops it: the journal decides after a
 * crash, and the pool takes no more changes.  commit_lock held. */
static int chunk_apply(struct store *s, struct stable *st, const struct store_rowop *ops, struct group *g,
		       size_t from, size_t to, uint64_t size_hint)
{
	int ret = chunk_slots(s, g, from, to);
	if (!ret && (ret = chunk_intents(s, st, g, from, to, size_hint)) != 0)
		chunk_unslot(s, g, from, to);
	if (ret)
		return ret;
	for (size_t i = from; i < to; i++)
		if (writes(&g->u[i]))
			write_version(s, st, ops, g, i);
	chunk_mark(s, g, from, to);
	if ((ret = pm_barrier(s)))
		return ret; /* not published: recovery frees the new versions */
	chunk_publish(s, st, g, from, to, size_hint);
	if ((ret = pm_barrier(s)))
		return ret; /* readers see the rows; the journal decides after a crash */
	chunk_free(s, st, g, from, to);
	ret = journal_clear(s);
	slab_trim(s);
	atomic_fetch_add_explicit(&s->n_commits, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->n_rows_written, to - from, memory_order_relaxed);
	return ret;
}

/* Apply ops as one group: planned and given its room whole first, so an
 * error (ENOSPC, ENOMEM, EINVAL, EIO reading a spilled row) leaves every row
 * as it was; then committed in chunks of at most EMB_JOURNAL_CAP rows (fewer
 * for large rows: a chunk's copy-on-write slots come from the class's
 * headroom).  promised: the rows were promised (store_space_reserve), so they
 * may take promised slots.  commit_lock held.
 *
 * Snapshots.  A group whose ops have no batch is stamped with the current
 * one and holds snap_lock (shared) from its plan to its end: a snapshot
 * waits for it, so that it never sees rows of its own batch appear after it
 * was taken.  A group whose every op carries its batch (a write-back of the
 * row cache) holds it only while planning, a slice of rows at a time, and
 * while charging kept versions.  A snapshot taken in between has a batch at
 * least that of every op (an op's batch was current when its row was
 * written), so it sees the group's new versions and needs none of the
 * versions they replace: the plan stays right.  Its reads wait until it is
 * durable, which waits for this group (fs/snap.c).  Drops take commit_lock,
 * so none runs in between. */
static int group_commit(struct store *s, struct stable *st, const struct store_rowop *ops, size_t n,
			uint64_t size_hint, int promised)
{
	struct group g;
	int stamped = 1;
	for (size_t i = 0; i < n && stamped; i++)
		stamped = ops[i].batch != 0;
	if (!stamped)
		pthread_rwlock_rdlock(&s->snap_lock); /* the set of live snapshots stays put */
	int ret = group_plan(s, st, ops, n, size_hint, &g, stamped, promised & COMMIT_RUNS_HIDDEN);
	if (!ret)
		ret = group_room(s, &g, promised & COMMIT_PROMISED);
	if (!ret) {
		size_t from = 0, last = 0, in_chunk = 0;
		for (size_t i = 0; i < g.nu; i++)
			if (!g.u[i].skip)
				last = i + 1;
		for (size_t i = 0; i < last && !ret; i++) {
			in_chunk += !g.u[i].skip;
			if (in_chunk == g.chunk || i + 1 == last) {
				ret = chunk_apply(s, st, ops, &g, from, i + 1, i + 1 == last ? size_hint : 0);
				from = i + 1;
				in_chunk = 0;
			}
		}
		if (!last)
			ret = -ENODATA; /* nothing to write: the caller extends the size */
	}
	if (!stamped)
		pthread_rwlock_unlock(&s->snap_lock);
	group_free(&g);
	return ret;
}

int commit_locked(struct store *s, struct stable *st, const struct store_rowop *ops, size_t n,
		  uint64_t size_hint, int promised)
{
	int ret = n ? group_commit(s, st, ops, n, size_hint, promised) : -ENODATA;
	if (ret != -ENODATA)
		return ret;
	if (size_hint > st->t->size) {
		max64(&st->t->size, size_hint);
		st64(&st->t->mtime_ns, now_ns());
		pm_flush(s, st->t, 128);
		return pm_barrier(s);
	}
	return 0;
}

static int write_group(struct store *s, uint32_t id, const struct store_rowop *ops, size_t n,
		      uint64_t size_hint, int promised)
{
	struct stable *st = tab_get(s, id);
	if (!st)
		return -ENOENT;
	/* a failed pool takes no change: a new write is refused (EROFS), a
	 * write-back cannot make its rows durable (EIO) */
	if (pm_writable(s))
		return promised ? -EIO : -EROFS;
	uint64_t hi = 0;
	for (size_t i = 0; i < n; i++)
		hi = ops[i].row > hi ? ops[i].row : hi;
	int r = n ? bulk_settle(s, id, hi) : 0; /* the rows these replace may be in the open bulk run */
	if (r)
		return r;
	for (int waits = 0;; waits++) {
		pthread_mutex_lock(&s->commit_lock);
		int ret = commit_locked(s, st, ops, n, size_hint, promised);
		pthread_mutex_unlock(&s->commit_lock);
		/* rows keep to their share of PMem: wait for the mover to spill
		 * some, a bounded number of times (no livelock when the pool is
		 * full of stubs and index) */
		if (ret != -ENOSPC || !s->sp || waits == SPILL_MAX_WAITS ||
		    spill_wait_room(s, n * (uint64_t)slab_row_slot(st->t->row_size)) != 0)
			return ret;
	}
}

int store_rows_write(struct store *s, uint32_t id, const struct store_rowop *ops, size_t n,
		     uint64_t size_hint)
{
	return write_group(s, id, ops, n, size_hint, 0);
}

int store_rows_writeback(struct store *s, uint32_t id, const struct store_rowop *ops, size_t n)
{
	return write_group(s, id, ops, n, 0, 1);
}

/* Is the newest version a ref leads to not a tombstone?  (Recovery: what
 * it reads was written and made durable before the journal said so.) */
static int live_ref(struct store *s, uint64_t ref)
{
	uint64_t off = ref_obj(ref);
	if (!ref || !pool_range_ok(s, off, sizeof(struct emb_link), 8))
		return 0;
	if (ref_is_link(ref))
		off = ld64(&((struct emb_link *)S_PTR(s, off))->ver);
	if (!pool_range_ok(s, off, sizeof(struct emb_version), 8))
		return 0;
	return !ver_tomb(S_PTR(s, off));
}

/* Replay a sealed commit journal after a crash (see the top of this file).
 * commit_lock held (or at mount). */
int commit_replay(struct store *s, struct emb_journal *j)
{
	struct stable *st = tab_get(s, j->table);
	if (!st)
		return -EIO;
	int64_t nrows = (int64_t)j->nrows_before;
	int any = 0;
	for (uint64_t i = 0; i < j->count; i++) {
		struct emb_jrec *r = &j->ent[i];
		uint64_t cur;
		if (index_get(s, st, r->row, &cur))
			continue; /* damaged: keep both versions (a leak, never a loss) */
		if (r->aux & EMB_JR_CHAIN) { /* an evicted row's older element */
			if (!cur)
				spill_ver_free(s, st, r->old_off);
			continue;
		}
		int done = r->new_off ? cur == r->new_off : cur != r->old_off;
		int damaged = r->aux & EMB_JR_DAMAGED; /* never read nor freed */
		uint64_t nver = r->aux & ~EMB_JR_FLAGS;
		if (done) {
			any = 1;
			nrows += live_ref(s, r->new_off) - (damaged ? 1 : live_ref(s, r->old_off));
			/* the old element stays when the new link leads to it */
			int kept = ref_is_link(r->new_off) &&
				   ld64(&((struct emb_link *)S_PTR(s, ref_obj(r->new_off)))->next) == r->old_off;
			if (r->old_off && !damaged && !kept)
				spill_ref_free(s, st, r->old_off);
		} else if (r->new_off) {
			spill_ver_free(s, st, ref_obj(r->new_off));
			if (ref_is_link(r->new_off))
				spill_ver_free(s, st, nver);
		}
	}
	/* the row count and size were published after the rows: redo them */
	st64(&st->t->nrows, (uint64_t)nrows);
	if (any)
		max64(&st->t->size, j->size_hint);
	pm_flush(s, st->t, 128);
	return pm_barrier(s);
}
