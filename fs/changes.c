/*
 * The rows that may differ between two views of one table: an older
 * snapshot's (a, of batch ba) and a later one's or the live table's (b).
 * Shared by restore.c (a restore in place) and delta.c (the rows changed
 * between two snapshots).
 *
 * Fast: when the live table is the one a snapshot holds and has no rows in
 * spill runs, the candidates are the rows whose newest version in the pool
 * is of a batch after ba (store_rows_since: one walk of the live index by
 * version header), tombstones included -- a row deleted while a snapshot
 * holds it stays as a tombstone -- so no row that differs is missed.  Else
 * every row either view stores, run by run through both seek indexes.
 * Either way the candidates are listed before the callback runs (it may
 * write the live table, which changes its seek index).  The callback gets
 * them ascending, at most CHANGES_CHUNK at a time.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fs.h"

/* The next run of rows either view stores at or after r: [*lo, *hi), at
 * most CHANGES_CHUNK rows.  0, 1 (found) or -errno. */
static int next_run(struct embfs *fs, const struct store_view *a, const struct store_view *b, uint64_t r,
		    uint64_t *lo, uint64_t *hi)
{
	uint64_t da = UINT64_MAX, db = UINT64_MAX, h;
	int ra = front_row_next(&fs->fr, a, r, &da);
	int rb = front_row_next(&fs->fr, b, r, &db);
	if (ra < 0 || rb < 0)
		return ra < 0 ? ra : rb;
	if (!ra && !rb)
		return 0;
	da = ra ? da : UINT64_MAX;
	db = rb ? db : UINT64_MAX;
	*lo = da <= db ? da : db;
	int ret = front_row_hole(&fs->fr, da <= db ? a : b, *lo, &h);
	if (ret < 0)
		return ret;
	*hi = h - *lo > CHANGES_CHUNK ? *lo + CHANGES_CHUNK : h;
	return 1;
}

/* Every row a or b stores, as [lo, hi) pairs in *rg (*nrg of them). */
static int both_runs(struct embfs *fs, const struct store_view *a, const struct store_view *b, uint64_t **rg,
		     size_t *nrg)
{
	uint64_t r = 0, lo = 0, hi = 0, *v = NULL;
	size_t n = 0, cap = 0;
	int ret;
	while ((ret = next_run(fs, a, b, r, &lo, &hi)) == 1) {
		if (n == cap) {
			size_t ncap = cap ? 2 * cap : 1024;
			uint64_t *p = realloc(v, ncap * 2 * sizeof(*v));
			if (!p) {
				free(v);
				return -ENOMEM;
			}
			v = p;
			cap = ncap;
		}
		v[2 * n] = lo;
		v[2 * n + 1] = hi;
		n++;
		r = hi;
	}
	if (ret < 0) {
		free(v);
		return ret;
	}
	*rg = v;
	*nrg = n;
	return 0;
}

int changes_walk(struct embfs *fs, const struct store_view *a, const struct store_view *b, int fast_ok,
		 uint32_t lid, uint64_t ba, int (*fn)(void *, const uint64_t *, uint32_t), void *arg, int *fast)
{
	uint64_t *ids = NULL;
	size_t n = 0;
	int ret = fast_ok ? front_rows_since(&fs->fr, lid, ba, &ids, &n) : -EAGAIN;
	*fast = ret != -EAGAIN;
	if (*fast) {
		for (size_t i = 0; !ret && i < n; i += CHANGES_CHUNK)
			ret = fn(arg, ids + i, n - i < CHANGES_CHUNK ? (uint32_t)(n - i) : CHANGES_CHUNK);
		free(ids);
		return ret;
	}
	uint64_t *rg = NULL, *run = malloc(CHANGES_CHUNK * sizeof(*run));
	ret = run ? both_runs(fs, a, b, &rg, &n) : -ENOMEM;
	for (size_t i = 0; !ret && i < n; i++) {
		uint32_t k = (uint32_t)(rg[2 * i + 1] - rg[2 * i]);
		for (uint32_t j = 0; j < k; j++)
			run[j] = rg[2 * i] + j;
		ret = fn(arg, run, k);
	}
	free(rg);
	free(run);
	return ret;
}
