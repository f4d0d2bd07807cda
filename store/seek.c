/*
 * SEEK_DATA/SEEK_HOLE over a view.  The index is a hash, so the sorted ids of
 * the rows a view sees are collected on the first seek and kept per table:
 * the live view's until the set of stored rows changes (st->mod), one
 * snapshot's until another snapshot is sought (its keys never change).
 * Locking: st->seek_lock (the caches), then st->lock shared for the walk.
 */
#include <errno.h>
#include <stdlib.h>

#include "store_int.h"
#include "tier/tier.h"

struct collect {
	struct store *s;
	struct stable *st;
	uint64_t batch;
	struct u64vec keys;
};

/* A row the view sees: its visible version exists and is not a tombstone.
 * The chain is walked from the entry's ref (validating the key the walk
 * read from it), not looked up again by that key. */
static int collect_row(void *arg, uint64_t key, uint64_t val)
{
	struct collect *c = arg;
	struct chain ch;
	int ret = chain_start(c->s, c->st, key, val, &ch);
	while (!ret && ch.v && c->batch != EMB_NONE && ver_batch(ch.v) > c->batch)
		ret = chain_step(&ch);
	if (ret)
		return ret;
	return ch.v && !ver_tomb(ch.v) ? u64vec_push(&c->keys, key) : 0;
}

static int range_cmp(const void *a, const void *b)
{
	return u64_cmp(a, b);
}

/* Sort [lo, hi) pairs by lo. */
static void range_sort(uint64_t *v, size_t n)
{
	if (n)
		qsort(v, n, 2 * sizeof(*v), range_cmp);
}

/* The first row >= from inside a range of k (EMB_NONE: none). */
static uint64_t range_next(const struct seek_keys *k, uint64_t from)
{
	uint64_t best = EMB_NONE;
	for (size_t i = 0; i < k->nrg; i++) {
		uint64_t lo = k->rg[2 * i], hi = k->rg[2 * i + 1];
		if (hi > from) {
			uint64_t c = lo > from ? lo : from;
			if (c < best)
				best = c;
		}
	}
	return best;
}

/* The sorted keys of (st, batch) into cache k, rebuilt when its tag changed.
 * seek_lock held. */
static int keys_get(struct store *s, struct stable *st, uint64_t batch, uint64_t tag, struct seek_keys *k)
{
	if (k->v && k->tag == tag)
		return 0;
	struct collect c = { .s = s, .st = st, .batch = batch };
	pthread_rwlock_rdlock(&st->lock);
	int ret = index_walk(s, st, collect_row, &c);
	pthread_rwlock_unlock(&st->lock);
	if (ret) {
		free(c.keys.v);
		return ret;
	}
	u64_sort(c.keys.v, c.keys.n);
	struct u64vec rg = { 0 };
	if ((ret = runs_ranges(s, st->id, &rg))) {
		free(c.keys.v);
		free(rg.v);
		return ret;
	}
	range_sort(rg.v, rg.n / 2);
	free(k->v);
	free(k->rg);
	k->v = c.keys.v;
	k->n = c.keys.n;
	k->rg = rg.v;
	k->nrg = rg.n / 2;
	k->tag = tag;
	if (!k->v) /* no rows: still a valid (empty) cache */
		k->v = malloc(1);
	return k->v ? 0 : -ENOMEM;
}

/* The view's sorted keys, with seek_lock held on success. */
static int view_keys(struct store *s, const struct store_view *v, struct stable **stp, struct seek_keys **kp)
{
	struct stable *st;
	uint64_t batch;
	int ret = view_resolve(s, v, &st, &batch, NULL);
	if (!ret)
		ret = bulk_settle(s, st->id, EMB_NONE); /* its rows in the open bulk run, if any */
	if (ret)
		return ret;
	pthread_mutex_lock(&st->seek_lock);
	struct seek_keys *k = v->snap ? &st->snap_keys : &st->live_keys;
	uint64_t tag;
	if (v->snap) {
		tag = v->snap_gen;
	} else {
		pthread_rwlock_rdlock(&st->lock);
		tag = st->mod;
		pthread_rwlock_unlock(&st->lock);
	}
	ret = keys_get(s, st, batch, tag, k);
	if (ret) {
		pthread_mutex_unlock(&st->seek_lock);
		return ret;
	}
	*stp = st;
	*kp = k;
	return 0;
}

int store_row_next(struct store *s, const struct store_view *v, uint64_t from, uint64_t *found)
{
	struct stable *st;
	struct seek_keys *k;
	int ret = view_keys(s, v, &st, &k);
	if (ret)
		return ret;
	size_t i = u64_lower_bound(k->v, k->n, from);
	uint64_t r = range_next(k, from);
	if (i < k->n && k->v[i] < r)
		r = k->v[i];
	if (r != EMB_NONE) {
		*found = r;
		ret = 1;
	}
	pthread_mutex_unlock(&st->seek_lock);
	return ret;
}

int store_row_hole(struct store *s, const struct store_view *v, uint64_t from, uint64_t *hole)
{
	struct stable *st;
	struct seek_keys *k;
	int ret = view_keys(s, v, &st, &k);
	if (ret)
		return ret;
	size_t i = u64_lower_bound(k->v, k->n, from);
	uint64_t r = from;
	for (int moved = 1; moved;) {
		moved = 0;
		while (i < k->n && k->v[i] == r) {
			i++;
			r++;
			moved = 1;
		}
		for (size_t j = 0; j < k->nrg; j++)
			if (k->rg[2 * j] <= r && r < k->rg[2 * j + 1]) {
				r = k->rg[2 * j + 1];
				moved = 1;
			}
		while (i < k->n && k->v[i] < r)
			i++;
	}
	*hole = r;
	pthread_mutex_unlock(&st->seek_lock);
	return 0;
}

/* A row whose newest version in the pool is of a batch above c->batch. */
static int since_row(void *arg, uint64_t key, uint64_t val)
{
	struct collect *c = arg;
	struct chain ch;
	int ret = chain_start(c->s, c->st, key, val, &ch);
	if (ret)
		return ret;
	return ver_batch(ch.v) > c->batch ? u64vec_push(&c->keys, key) : 0;
}

int store_rows_since(struct store *s, uint32_t id, uint64_t batch, uint64_t **rows, size_t *n)
{
	struct store_view v;
	struct stable *st;
	uint64_t vb;
	int ret = store_view_live(s, id, &v);
	if (!ret)
		ret = view_resolve(s, &v, &st, &vb, NULL);
	if (!ret)
		ret = bulk_settle(s, id, EMB_NONE);
	if (ret)
		return ret;
	if (runs_count(s, id, NULL))
		return -EAGAIN; /* rows in runs: their batches are on the device */
	struct collect c = { .s = s, .st = st, .batch = batch };
	pthread_rwlock_rdlock(&st->lock);
	ret = index_walk(s, st, since_row, &c);
	pthread_rwlock_unlock(&st->lock);
	if (ret) {
		free(c.keys.v);
		return ret;
	}
	u64_sort(c.keys.v, c.keys.n);
	*rows = c.keys.v;
	*n = c.keys.n;
	return 0;
}
