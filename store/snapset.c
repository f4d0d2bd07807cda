/*
 * The live snapshot set: the sorted batch ids of the snapshots that exist and
 * are not being dropped, rebuilt from the records (snaprec.c) when one is taken
 * or dropped.  Commits ask it whether a snapshot still sees a version they
 * replace (snapset_needed) and charge what only one snapshot holds to it;
 * reclaim asks which snapshots hold a table.  Protected by snap_lock: the
 * rebuild holds it exclusive, readers shared; the count alone (n_live) is
 * also stored atomically, for one reader without the lock
 * (store_space_links).
 */
#include <stddef.h>

#include "store_int.h"

/* Sorted batches of live snapshots.  snap_lock held exclusive (or at load). */
void snapset_rebuild(struct store *s)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < EMB_MAX_SNAPS; i++) {
		struct emb_snap *r = snap_rec(s, i);
		if (!rec_live(r))
			continue;
		uint32_t k = n++;
		while (k > 0 && s->live_batch[k - 1] > r->batch) {
			s->live_batch[k] = s->live_batch[k - 1];
			s->live_idx[k] = s->live_idx[k - 1];
			k--;
		}
		s->live_batch[k] = r->batch;
		s->live_idx[k] = i;
	}
	/* atomic: store_space_links reads it without snap_lock */
	__atomic_store_n(&s->n_live, n, __ATOMIC_RELEASE);
}

int snapset_needed(struct store *s, uint64_t b_old, uint64_t b_new)
{
	size_t i = u64_lower_bound(s->live_batch, s->n_live, b_old);
	return i < s->n_live && s->live_batch[i] < b_new;
}

/* How many of the sorted batches b[] lie in [lo, hi); *only = the index of
 * the one when there is exactly one. */
size_t snapset_holders(const uint64_t *b, size_t n, uint64_t lo, uint64_t hi, size_t *only)
{
	size_t i = u64_lower_bound(b, n, lo), k = 0;
	*only = i;
	while (i + k < n && b[i + k] < hi)
		k++;
	return k;
}

void snapset_charge(struct store *s, uint64_t b_old, uint64_t b_new, uint64_t bytes)
{
	size_t only;
	if (snapset_holders(s->live_batch, s->n_live, b_old, b_new, &only) == 1) {
		struct emb_snap *r = snap_rec(s, s->live_idx[only]);
		st64(&r->excl_bytes, r->excl_bytes + bytes);
	}
}

int snapset_holds(struct store *s, const struct emb_snap *r, uint32_t id, uint64_t gen)
{
	const struct emb_snap_table *t = rec_tables(s, r);
	for (uint32_t k = 0; k < r->ntables; k++)
		if (t[k].id == id && t[k].gen == gen)
			return 1;
	return 0;
}

int snapset_refs(struct store *s, const struct stable *st)
{
	int n = 0;
	for (uint32_t i = 0; i < s->n_live; i++)
		n += snapset_holds(s, snap_rec(s, s->live_idx[i]), st->id, st->t->gen);
	return n;
}
