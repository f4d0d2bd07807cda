/* store_fsck: a full walk of indexes and slab bitmaps (tests, fsck.embfs),
 * and the repairs it allows without guessing (store_fsck_run). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"
#include "tier/tier.h"

struct walk {
	struct store *s;
	struct stable *st;
	struct store_fsck *r;
	struct u64vec refs;
	uint64_t count;
	struct emb_spill *pm;
	uint64_t *live;   /* per segment, from the stubs */
	struct u64vec stubs; /* of the current table, to read back */
	const struct store_fsck_opts *o;
	uint64_t walked, total; /* rows, for progress */
};

static void note(const struct store_fsck_opts *o, int fixed, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void note(const struct store_fsck_opts *o, int fixed, const char *fmt, ...)
{
	char msg[320];
	va_list ap;
	if (!o || !o->note)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	o->note(o->arg, fixed, msg);
}

/* A stub must point into a written part of a used segment, at a record that
 * reads back (when the device is attached). */
static void check_stub(struct walk *w, struct emb_version *v)
{
	struct store *s = w->s;
	uint64_t loc = ((struct emb_stub *)v)->loc;
	struct emb_spill *pm = w->pm;
	uint32_t rs = w->st->t->row_size;
	uint32_t rsz = spill_rec_size(rs);
	w->r->stubs++;
	uint64_t k = pm && loc >= EMB_SPILL_HDR ? (loc - EMB_SPILL_HDR) / pm->seg_size : UINT64_MAX;
	if (!pm || k >= pm->nsegs || pm->seg[k].state == EMB_SEG_FREE ||
	    loc + rsz > EMB_SPILL_HDR + k * pm->seg_size + pm->seg[k].fill) {
		w->r->bad_stubs++;
		return;
	}
	w->live[k] += rsz;
	if (s->sp && u64vec_push(&w->stubs, S_OFF(s, v)))
		w->r->bad_stubs++; /* no memory to check it */
}

/* Every version and link of a row's chain is sound (version.c: right row
 * and table, checksum, batches strictly decreasing). */
static int check_entry(void *arg, uint64_t key, uint64_t val)
{
	struct walk *w = arg;
	struct chain c;
	int ret = chain_start(w->s, w->st, key, val, &c);
	w->count += ret || (c.v && !ver_tomb(c.v)); /* a damaged head counts as a row */
	if (w->o && w->o->progress && ++w->walked % 65536 == 0)
		w->o->progress(w->o->arg, w->walked, w->total);
	while (!ret && c.v) {
		if (u64vec_push(&w->refs, c.off) || (c.link && u64vec_push(&w->refs, c.link)))
			return -ENOMEM;
		if (ver_stub(c.v))
			check_stub(w, c.v);
		ret = chain_step(&c);
	}
	if (ret || !val)
		w->r->bad_versions++;
	return 0;
}

static int referenced(const struct u64vec *refs, uint64_t off)
{
	size_t i = u64_lower_bound(refs->v, refs->n, off);
	return i < refs->n && refs->v[i] == off;
}

/* Give leaked slots back (commit_lock held): each is poisoned and its
 * bit cleared; one barrier after them all. */
static int free_leaked(struct store *s, const struct u64vec *leaked)
{
	for (size_t i = 0; i < leaked->n; i++)
		if (slab_free(s, leaked->v[i]))
			ver_poison(s, leaked->v[i]);
	return pm_barrier(s);
}

int store_fsck(struct store *s, struct store_fsck *r)
{
	return store_fsck_run(s, NULL, r, NULL);
}

/* Walk one table's index (check_entry), read its stubs back, note what is
 * damaged and check its row count (recomputed with repair; fx counts it).
 * commit_lock held.  0 or -errno (the walk's or the read-back's). */
static int fsck_table(struct walk *w, struct stable *st, int repair, struct store_fsck_fixed *fx)
{
	struct store *s = w->s;
	struct store_fsck *r = w->r;
	const struct store_fsck_opts *o = w->o;
	struct store_fsck before = *r;
	w->st = st;
	w->count = 0;
	w->stubs.n = 0;
	int ret = index_walk(s, st, check_entry, w);
	if (!ret && w->stubs.n) {
		int bad = spill_verify(s, st, w->stubs.v, w->stubs.n);
		if (bad < 0)
			ret = bad;
		else
			r->bad_stubs += (uint64_t)bad;
	}
	if (ret)
		return ret;
	const char *name = st->t->name;
	if (r->bad_versions > before.bad_versions)
		note(o, 0, "table '%.64s': %llu rows with a damaged version (read EIO)", name,
		     (unsigned long long)(r->bad_versions - before.bad_versions));
	if (r->bad_stubs > before.bad_stubs)
		note(o, 0, "table '%.64s': %llu spilled versions unreadable or failing their checksum on the spill device (read EIO)",
		     name, (unsigned long long)(r->bad_stubs - before.bad_stubs));
	if (w->count != st->t->nrows && !(st->t->flags & EMB_T_ZOMBIE)) {
		r->bad_counts++;
		if (repair) {
			note(o, 1, "table '%.64s': row count %llu, the index holds %llu: recomputed", name,
			     (unsigned long long)st->t->nrows, (unsigned long long)w->count);
			st64(&st->t->nrows, w->count);
			pm_flush(s, &st->t->nrows, 8);
			fx->counts++;
		} else {
			note(o, 0, "table '%.64s': row count %llu, the index holds %llu", name,
			     (unsigned long long)st->t->nrows, (unsigned long long)w->count);
		}
	}
	r->rows += w->count;
	return 0;
}

/* Match the slab bitmaps against the versions the walk found referenced
 * (w->refs, sorted here): slots referenced twice, referenced and free (bad
 * versions; with repair gathered in lost: every ref the walk kept is a
 * sound chain element, so its bit was lost), allocated and unreferenced
 * (leaked: gathered in leaked with repair).  commit_lock held.  0, or
 * -ENOMEM when leaked or lost could not grow (the counts are still whole). */
static int fsck_slots(struct walk *w, int repair, struct u64vec *leaked, struct u64vec *lost)
{
	struct store *s = w->s;
	struct store_fsck *r = w->r;
	int ret = 0;
	u64_sort(w->refs.v, w->refs.n);
	for (size_t i = 1; i < w->refs.n; i++)
		if (w->refs.v[i] == w->refs.v[i - 1])
			r->double_refs++;
	for (uint32_t c = 0; c < EMB_MAX_CLASSES; c++) {
		struct emb_class *pc = &s->sb->classes[c];
		for (uint64_t off = pc->slot_size ? pc->head : 0; off;) {
			struct emb_slab *h = S_PTR(s, off);
			uint64_t start = off + h->data_off;
			for (uint32_t k = 0; k < h->nslots; k++) {
				int set = !!(h->bitmap[k / 64] & (1ull << (k % 64)));
				int ref = referenced(&w->refs, start + (uint64_t)k * h->slot_size);
				if (set && !ref) {
					r->leaked_slots++;
					if (repair && u64vec_push(leaked, start + (uint64_t)k * h->slot_size))
						ret = -ENOMEM;
				}
				if (ref && !set) {
					r->bad_versions++;
					r->free_refs++;
					if (repair && u64vec_push(lost, start + (uint64_t)k * h->slot_size))
						ret = -ENOMEM;
				}
			}
			off = h->next;
		}
	}
	return ret;
}

int store_fsck_run(struct store *s, const struct store_fsck_opts *o, struct store_fsck *r,
		   struct store_fsck_fixed *fixed)
{
	struct walk w = { .s = s, .r = r, .o = o };
	struct store_fsck_fixed fx = { 0 };
	struct u64vec leaked = { 0 }, lost = { 0 };
	int repair = o && o->repair;
	int ret = 0;
	memset(r, 0, sizeof(*r));
	w.pm = S_PTR(s, s->sb->spill_off);
	if (w.pm && !(w.live = calloc(w.pm->nsegs, sizeof(*w.live))))
		return -ENOMEM;
	pthread_mutex_lock(&s->commit_lock);
	for (uint32_t i = 0; i < EMB_NTABLES; i++) {
		struct stable *st = tab_get(s, i);
		w.total += st ? st->t->nrows : 0;
	}
	for (uint32_t i = 0; i < EMB_NTABLES && !ret; i++) {
		struct stable *st = tab_get(s, i);
		if (st)
			ret = fsck_table(&w, st, repair, &fx);
	}
	uint64_t bad_before = r->bad_versions;
	if (!ret)
		ret = fsck_slots(&w, repair, &leaked, &lost);
	for (uint64_t k = 0; !ret && w.pm && k < w.pm->nsegs; k++)
		r->seg_live_off += w.pm->seg[k].live != w.live[k];
	if (!ret)
		ret = runs_fsck(s, &r->runs, &r->bad_runs);
	if (!ret && lost.n) {
		fx.bits = slab_keep_all(s, lost.v, lost.n);
		note(o, 1, "%llu versions that rows reference sat in slots marked free: marked allocated",
		     (unsigned long long)fx.bits);
	}
	if (!ret && r->bad_versions - fx.bits > bad_before)
		note(o, 0, "%llu versions that rows reference sit in slots marked free",
		     (unsigned long long)(r->bad_versions - fx.bits - bad_before));
	if (!ret && r->double_refs)
		note(o, 0, "%llu version slots are referenced twice", (unsigned long long)r->double_refs);
	if (!ret && r->bad_runs)
		note(o, 0, "spill device: %llu of %llu sorted runs damaged (rows in their damaged blocks read EIO)",
		     (unsigned long long)r->bad_runs, (unsigned long long)r->runs);
	if (!ret && r->leaked_slots && (!repair || r->bad_versions > fx.bits || r->double_refs))
		note(o, 0, "%llu version slots allocated and referenced by no row%s", (unsigned long long)r->leaked_slots,
		     repair ? ": kept (a damaged chain may hide their references)" : "");
	else if (!ret && r->leaked_slots) {
		ret = free_leaked(s, &leaked);
		if (!ret) {
			fx.slots = r->leaked_slots;
			note(o, 1, "%llu version slots allocated and referenced by no row: freed",
			     (unsigned long long)r->leaked_slots);
		}
	}
	if (!ret && r->seg_live_off && repair && s->sp) {
		ret = spill_recount_locked(s);
		if (!ret) {
			fx.segs = r->seg_live_off;
			note(o, 1, "spill device: live counts of %llu segments recounted from the stubs",
			     (unsigned long long)r->seg_live_off);
		}
	} else if (!ret && r->seg_live_off) {
		note(o, 0, "spill device: live counts of %llu segments disagree with the stubs",
		     (unsigned long long)r->seg_live_off);
	}
	if (!ret && (fx.counts || fx.bits))
		ret = pm_barrier(s);
	pthread_mutex_unlock(&s->commit_lock);
	if (fixed)
		*fixed = fx;
	free(leaked.v);
	free(lost.v);
	free(w.live);
	free(w.stubs.v);
	free(w.refs.v);
	return ret;
}
