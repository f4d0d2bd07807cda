/*
 * Bulk loads: whole rows written in row order at or past the end of a table,
 * past every row the pool's index holds of it, once the pool is full to its
 * low watermark, go straight into a sorted run on the spill device: no pool
 * slot, no index entry, no eviction, no merge (bulk_may).
 * The device writes each row once (with its 16-byte key and the run's
 * blocks' headers and meta).
 *
 * One run is open at a time, of one table (sp->bulk, under bulk_mu).  Its
 * blocks go to the device as they fill (run_build), into segments claimed
 * before its rows are taken, so that sealing it never runs out of room.
 * It is sealed (its meta written, fdatasync, its record installed) when it
 * reaches a run's size, when a write to its table does not follow it, and
 * before anything reads, writes, truncates or drops its table's rows, takes
 * a snapshot, syncs or closes the pool (bulk_settle, called at the top of
 * those store entry points).  Until then its rows are not in the pool, so
 * nothing else can see them: a crash loses them like a write-back cache's
 * rows (a write is durable at the next fsync, which seals the run).
 *
 * Lock order: bulk_mu before commit_lock (sealing installs under it); it
 * is taken only at the store's entry points, never under another store lock.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "run_int.h"

struct bulk {
	struct run_build w;
	uint32_t table;
	uint64_t gen;
	uint64_t lo, next;  /* it holds rows of [lo, next) (or holes there) */
	uint64_t max_rows;  /* a run's size */
	uint64_t rows;      /* rows in it */
};

/* Rows a bulk run takes at most: half the smallest merge reserve (as an
 * eviction's run, so that two runs always merge in the reserve). */
static uint64_t bulk_max_rows(const struct spill *sp, uint32_t rs)
{
	uint64_t cap = sp->reserve_min * sp->pm->seg_size / 2 / run_blk_size(rs) * run_blk_recs(rs);
	return cap ? cap : 1;
}

/* Segments the run takes with `rows` rows (data, lists, fences, filter):
 * one record a row, as run_build_finish will count them. */
static uint64_t bulk_segs(const struct run_build *w, uint64_t rows)
{
	uint64_t bits, cap;
	size_t ab;
	return run_build_segs(w, (rows + w->per_blk - 1) / w->per_blk, rows, &bits, &ab, &cap);
}

/* Give back the open run's claimed segments past the first `keep`. */
static void bulk_unclaim(struct run_build *w, uint64_t keep)
{
	pthread_mutex_lock(&w->sp->mu);
	while (w->segs.n > keep)
		w->sp->seg_busy[w->segs.v[--w->segs.n]] = 0;
	pthread_mutex_unlock(&w->sp->mu);
}

/* Claim the segments the open run needs to take `rows` rows in all, leaving
 * the merge reserve as it will be once the run counts in it (it grows by
 * at most the run's segments): 0, or -ENOSPC / -ENOMEM with only what the
 * rows it has need claimed. */
static int bulk_claim(struct bulk *b, uint64_t rows)
{
	struct run_build *w = &b->w;
	uint64_t need = bulk_segs(w, rows), had = w->segs.n;
	while (w->segs.n < need) {
		uint64_t k = seg_claim(w->sp, 1 + atomic_load(&w->sp->reserve) + (uint32_t)need);
		int ret = k == EMB_NONE ? -ENOSPC : u64vec_push(&w->segs, k);
		if (ret) {
			if (k != EMB_NONE) {
				pthread_mutex_lock(&w->sp->mu);
				w->sp->seg_busy[k] = 0;
				pthread_mutex_unlock(&w->sp->mu);
			}
			bulk_unclaim(w, had);
			return ret;
		}
	}
	return 0;
}

/* Do no other runs of the table meet the run's range? */
static int bulk_fresh(struct spill *sp, const struct run_build *w)
{
	struct srun **v;
	size_t n;
	if (runs_get_range(sp, w->table, w->min_row, w->max_row, &v, &n))
		return 0;
	runs_put(v, n);
	return n == 0;
}

/* Seal the open run: write it out and install it.  bulk_mu held.  Its
 * segments were claimed as its rows came, so only a device or pool error
 * fails it: then its rows are lost and the pool is refused changes (the
 * error is returned to whoever sealed it, and to every later seal). */
static int bulk_seal_locked(struct store *s)
{
	struct spill *sp = s->sp;
	struct bulk *b = sp->bulk;
	if (!b)
		return atomic_load(&sp->bulk_err);
	sp->bulk = NULL;
	atomic_store(&sp->bulk_tab, 0);
	atomic_store(&sp->bulk_lo, EMB_NONE);
	struct run_build *w = &b->w;
	int ret = b->rows ? run_build_finish(w) : -ENOENT; /* none: nothing to install */
	if (!ret) {
		w->fresh = bulk_fresh(sp, w);
		pthread_mutex_lock(&s->commit_lock);
		struct stable *st = tab_get(s, b->table);
		if (!st || !run_table_same(s, st, b->table, b->gen)) {
			ret = -ENOENT; /* the table went: its rows with it */
		} else {
			/* the size that covers the rows is durable before the run is */
			ret = pm_persist(s, &st->t->size, sizeof(st->t->size));
			if (!ret)
				ret = run_install(s, w, w->id, 0, NULL, 0);
			if (!ret) {
				pthread_rwlock_wrlock(&st->lock);
				st->mod++;
				pthread_rwlock_unlock(&st->lock);
				atomic_fetch_add_explicit(&sp->bulk_runs, 1, memory_order_relaxed);
				atomic_fetch_add_explicit(&sp->bulk_rows, b->rows, memory_order_relaxed);
			}
		}
		pthread_mutex_unlock(&s->commit_lock);
	}
	if (w->slot >= 0) { /* not installed: its directory slot goes back */
		pthread_mutex_lock(&s->commit_lock);
		sp->bulk_slot = -1;
		pthread_mutex_unlock(&s->commit_lock);
	}
	run_build_free(w, 1);
	free(b);
	if (ret == -ENOENT)
		ret = 0;
	int zero = 0;
	if (ret && atomic_compare_exchange_strong(&sp->bulk_err, &zero, ret)) {
		pm_fail(s, ret, "writing a bulk load's run to the spill device failed");
	}
	return ret;
}

int bulk_settle(struct store *s, uint32_t id, uint64_t hi)
{
	struct spill *sp = s->sp;
	if (!sp)
		return 0;
	uint32_t t = atomic_load_explicit(&sp->bulk_tab, memory_order_acquire);
	if (!t || (id != BULK_ANY && t != id + 1) || atomic_load(&sp->bulk_lo) > hi)
		return id == BULK_ANY ? atomic_load(&sp->bulk_err) : 0; /* a sync hears of a lost run */
	pthread_mutex_lock(&sp->bulk_mu);
	int ret = 0;
	if (sp->bulk && (id == BULK_ANY || sp->bulk->table == id) && sp->bulk->lo <= hi)
		ret = bulk_seal_locked(s);
	pthread_mutex_unlock(&sp->bulk_mu);
	return ret;
}

#define BULK_DIR_SPARE 16u /* run directory slots a bulk load leaves free */

/* A new open run of st's rows from row `first`.  bulk_mu held.  1 opened,
 * 0 not (the run directory is nearly full), or -errno. */
static int bulk_open(struct store *s, struct stable *st, uint64_t first)
{
	struct spill *sp = s->sp;
	struct bulk *b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	int ret = run_build_open(&b->w, s, st);
	if (ret) {
		free(b);
		return ret;
	}
	/* a directory slot is held for it, so that its install cannot find
	 * the directory full; none is taken while few are free (the mover
	 * merges runs then) */
	size_t nfree = 0;
	pthread_mutex_lock(&s->commit_lock);
	for (size_t i = 0; i < EMB_RUNDIR_CAP; i++)
		if (!sp->rd->run[i].state && (int64_t)i != sp->bulk_slot && nfree++ == 0)
			b->w.slot = (int64_t)i;
	if (nfree > BULK_DIR_SPARE)
		sp->bulk_slot = b->w.slot;
	pthread_mutex_unlock(&s->commit_lock);
	if (nfree <= BULK_DIR_SPARE) {
		b->w.slot = -1;
		run_build_free(&b->w, 1);
		free(b);
		return 0;
	}
	b->w.id = run_next_id(sp);
	b->table = st->id;
	b->gen = st->t->gen;
	b->lo = b->next = first;
	b->max_rows = bulk_max_rows(sp, st->t->row_size);
	sp->bulk = b;
	atomic_store(&sp->bulk_lo, first);
	atomic_store_explicit(&sp->bulk_tab, st->id + 1, memory_order_release);
	return 1;
}

/* May rows [first, first + n) of st go straight into a run?  Only rows no
 * one can have seen: at or past the size (so no cached row either: a
 * cache holds rows below it) and past every entry of the index (so no
 * pool row, tombstone or stub of theirs: the pool's versions win over the
 * runs').  And only rows the pool would not keep: a run of st already open
 * and followed, or the pool's rows past the low watermark with them (a
 * table that fits stays in the pool).  A write that may not leaves an open
 * run as it is: its rows are newer than the run's wherever they land.
 * bulk_mu held. */
static int bulk_may(struct store *s, struct stable *st, const struct bulk *b, uint64_t first, size_t n)
{
	struct spill *sp = s->sp;
	uint32_t rs = st->t->row_size;
	if (first * (uint64_t)rs < ld64(&st->t->size) || (st->t->flags & EMB_T_DYING))
		return 0;
	int follows = b && b->table == st->id && b->gen == st->t->gen && first >= b->next;
	if (!follows && !sp->bulk_always && slab_row_used(s) + n * (uint64_t)slab_row_slot(rs) <= sp->low_bytes)
		return 0;
	pthread_rwlock_rdlock(&st->lock);
	int ok = index_none_from(s, st, first);
	pthread_rwlock_unlock(&st->lock);
	return ok;
}

int store_rows_append(struct store *s, uint32_t id, uint64_t first, size_t n, const void *rows, uint64_t batch)
{
	struct spill *sp = s->sp;
	if (!sp || sp->stubs_only || !n)
		return 0;
	if (pm_writable(s))
		return -EROFS;
	struct stable *st = tab_get(s, id);
	if (!st)
		return -ENOENT;
	uint32_t rs = st->t->row_size;
	if (first + n < first || first + n > row_id_max(rs) + 1)
		return 0; /* the ordinary path says what is wrong */
	if (first * (uint64_t)rs < ld64(&st->t->size))
		return 0; /* the common case of a write that is not a load's */
	pthread_mutex_lock(&sp->bulk_mu);
	int ret = atomic_load(&sp->bulk_err), ok = 0;
	struct bulk *b = sp->bulk;
	if (ret || n > bulk_max_rows(sp, rs) || !bulk_may(s, st, b, first, n))
		goto out; /* (more rows than a run holds: the ordinary path) */
	if (b && (b->table != id || b->gen != st->t->gen || first < b->next || b->rows + n > b->max_rows)) {
		b = NULL;
		if ((ret = bulk_seal_locked(s)))
			goto out;
	}
	if (!b) {
		int r = bulk_open(s, st, first);
		if (r <= 0) {
			ret = r;
			goto out;
		}
		b = sp->bulk;
	}
	/* room first: a write that cannot be placed takes the ordinary path
	 * (and its ENOSPC, or the mover's room) */
	ret = bulk_claim(b, b->rows + n);
	if (ret) {
		if (ret == -ENOSPC)
			ret = bulk_seal_locked(s);
		goto out;
	}
	const char *p = rows;
	for (size_t i = 0; i < n && !ret; i++) {
		const char *d = p + i * (size_t)rs;
		ret = run_build_row(&b->w, first + i, &batch, &d, 1);
	}
	if (ret) { /* a device error: what it took is lost, and so are the run's rows */
		bulk_seal_locked(s);
		goto out;
	}
	b->rows += n;
	b->next = first + n;
	table_extend(s, st, (first + n) * (uint64_t)rs);
	ok = 1;
out:
	pthread_mutex_unlock(&sp->bulk_mu);
	return ret ? ret : ok;
}
