/*
 * Read views: a table as it is now, or as a snapshot holds it.  Every read
 * of rows and every attribute read of a table file goes through a view, so a
 * snapshot read and a live read are one code path (LMDB's read-only
 * transaction: one read API for "now" and "as of").
 *
 * A view is a value: the table's catalog slot and generation, and for a
 * snapshot its record slot and generation.  Resolving it finds the table's
 * state now and the batch the view sees (EMB_NONE: the newest version of
 * each row; a snapshot's batch B: the newest version with batch <= B).  A
 * view that outlived its table or snapshot resolves to -ESTALE, never to
 * another table's rows.
 */
#include <errno.h>
#include <string.h>

#include "store_int.h"
#include "tier/tier.h"

int store_view_live(struct store *s, uint32_t id, struct store_view *v)
{
	struct stable *st = tab_get(s, id);
	if (!st)
		return -ENOENT;
	*v = (struct store_view){ .id = id, .snap = 0, .gen = ld64(&st->t->gen), .snap_gen = 0 };
	return 0;
}

int store_view_snap(struct store *s, uint32_t idx, uint32_t id, struct store_view *v)
{
	struct store_snap sn;
	struct store_attr a;
	struct stable *st;
	uint64_t b;
	int ret = store_snap_get(s, idx, &sn);
	if (!ret)
		ret = snap_table_view(s, idx, sn.gen, id, &a, &b, &st);
	if (ret)
		return ret;
	*v = (struct store_view){ .id = id, .snap = idx + 1, .gen = a.gen, .snap_gen = sn.gen };
	return 0;
}

int view_resolve(struct store *s, const struct store_view *v, struct stable **stp, uint64_t *batch,
		 struct store_attr *a)
{
	if (v->snap) {
		struct stable *st;
		int ret = snap_table_view(s, v->snap - 1, v->snap_gen, v->id, a, batch, &st);
		if (ret)
			return ret;
		if (ld64(&st->t->gen) != v->gen)
			return -ESTALE;
		*stp = st;
		return 0;
	}
	struct stable *st = tab_get(s, v->id);
	if (!st || ld64(&st->t->gen) != v->gen)
		return -ESTALE;
	if (a) {
		int ret = store_table_getattr(s, v->id, a);
		if (ret || a->gen != v->gen)
			return ret ? ret : -ESTALE;
	}
	*stp = st;
	*batch = EMB_NONE;
	return 0;
}

int store_view_getattr(struct store *s, const struct store_view *v, struct store_attr *a)
{
	struct stable *st;
	uint64_t b;
	return view_resolve(s, v, &st, &b, a);
}

int store_rows_read(struct store *s, const struct store_view *v, const uint64_t *rows, size_t n, void *buf,
		    uint8_t *stored, uint64_t *vbatch)
{
	struct stable *st = NULL;
	uint64_t b;
	int ret = view_resolve(s, v, &st, &b, NULL);
	uint64_t hi = 0;
	for (size_t i = 0; i < n; i++)
		hi = rows[i] > hi ? rows[i] : hi;
	if (!ret && n)
		ret = bulk_settle(s, st->id, hi); /* rows of the open bulk run, if any */
	if (ret)
		return ret;
	return rows_read_ver(s, st, rows, n, buf, b, stored, vbatch, v->where != 0);
}

int store_rows_read_range(struct store *s, const struct store_view *v, uint64_t first, size_t n, void *buf,
			  const uint8_t *skip, uint8_t *stored)
{
	struct stable *st = NULL;
	uint64_t b;
	int ret = view_resolve(s, v, &st, &b, NULL);
	if (!ret && n)
		ret = bulk_settle(s, st->id, first + n - 1 < first ? EMB_NONE : first + n - 1);
	if (ret)
		return ret;
	if (n && first + n < first)
		return -EINVAL;
	return rows_read_range(s, st, first, n, buf, b, skip, stored);
}
