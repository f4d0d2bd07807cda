/*
 * The one read path: rows as a batch sees them (EMB_NONE: the newest
 * versions), from the pool or, for spilled rows, from the device in one
 * io_uring submission.  Views (view.c) call it for live and snapshot reads.
 *
 * A reader resolves each row under its table's lock (shared), pins the
 * segments its stubs point into, drops the lock and reads every spilled row of
 * the request at once (queue depth qd, topped up as reads complete).  A
 * record whose header does not match its stub was moved meanwhile: the row
 * is resolved again.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"
#include "tier/tier.h"

/* A spilled row whose record did not match its stub (moved meanwhile):
 * resolve it again and read it where it is now, a few times.  q->ret: 0,
 * -EIO (damaged) or still -ESTALE. */
static void reread(struct store *s, struct stable *st, struct sreq *q, uint64_t b, uint8_t *stored,
		   uint64_t *vbatch)
{
	uint32_t rs = st->t->row_size;
	for (int tries = 0; q->ret == -ESTALE && tries < 4; tries++) {
		struct emb_version *v;
		pthread_rwlock_rdlock(&st->lock);
		if (chain_visible(s, st, q->row, b, &v)) {
			pthread_rwlock_unlock(&st->lock);
			q->ret = -EIO;
			return;
		}
		if (!v || !ver_stub(v) || ((struct emb_stub *)v)->loc == q->loc) {
			if (!v)
				memset(q->dst, 0, rs);
			else if (!ver_stub(v))
				memcpy(q->dst, ver_data(v), rs);
			q->ret = v && ver_stub(v) ? -EIO : 0; /* same place, no match: damaged */
			if (stored)
				stored[q->idx] = v ? (ver_stub(v) ? STORE_OUT : 1) : 0;
			if (vbatch)
				vbatch[q->idx] = v ? ver_batch(v) : 0;
			pthread_rwlock_unlock(&st->lock);
			if (q->ret == -EIO)
				spill_csum_error(s);
			return;
		}
		q->loc = ((struct emb_stub *)v)->loc;
		q->batch = ver_batch(v);
		spill_pin(s, q->loc, 1);
		pthread_rwlock_unlock(&st->lock);
		spill_read(s, q, 1);
		spill_pin(s, q->loc, -1);
	}
}

/* What a read asks: rows[i], or first + i for a range; skip[i] set: row i
 * is not read (NULL: none are skipped). */
struct rdesc {
	const uint64_t *rows;
	uint64_t first;
	const uint8_t *skip;
	int scan;            /* a range read: no reference bits, no promotion */
	int where;           /* stored[i] STORE_OUT for rows outside the pool (else 1) */
};

static inline uint64_t row_of(const struct rdesc *d, size_t i)
{
	return d->rows ? d->rows[i] : d->first + i;
}

/* A read of many rows (n > 1): the keys to look up (d->rows itself, or
 * first + i) and room for their index entries.  0, or -ENOMEM with
 * nothing allocated. */
static int read_keys(const struct rdesc *d, size_t n, uint64_t **keys, uint64_t **heads)
{
	*heads = malloc(n * sizeof(**heads));
	*keys = d->rows ? (uint64_t *)d->rows : malloc(n * sizeof(**keys));
	if (!*heads || !*keys) {
		free(*heads);
		if (*keys != d->rows)
			free(*keys);
		return -ENOMEM;
	}
	for (size_t i = 0; !d->rows && i < n; i++)
		(*keys)[i] = d->first + i;
	return 0;
}

/* Row i (row) as the read found it under st->lock: v, or NULL for none.
 * Note it in stored and vbatch and, unless the read is a probe (dst NULL),
 * put its bytes in dst (zeros for none).  1 when the row is done, 0 when v
 * is a spilled version: its bytes are on the device. */
static int place_row(struct store *s, struct stable *st, struct emb_version *v, uint64_t row, size_t i,
		     char *dst, uint8_t *stored, uint64_t *vbatch, int hot)
{
	uint32_t rs = st->t->row_size;
	if (stored)
		stored[i] = v ? (ver_stub(v) ? STORE_OUT : 1) : 0;
	if (vbatch)
		vbatch[i] = v ? ver_batch(v) : 0;
	if (!dst)
		return 1; /* a probe: which rows are stored, not their bytes */
	if (!v) {
		memset(dst, 0, rs);
		return 1;
	}
	if (!ver_stub(v)) {
		memcpy(dst, ver_data(v), rs);
		if (hot)
			spill_note_use(s, st->id, row);
		return 1;
	}
	return 0;
}

/* The nq spilled rows of q, their segments pinned: read them from the
 * device (unless ret: the read has failed already), resolving again the
 * rows moved meanwhile (reread), and unpin the segments.  ret, else the
 * first failed row's error (-EIO for a row still moved). */
static int read_device(struct store *s, struct stable *st, struct sreq *q, size_t nq, uint64_t b,
		       uint8_t *stored, uint64_t *vbatch, int hot, int ret)
{
	if (nq && !ret) {
		spill_read(s, q, nq);
	}
	for (size_t k = 0; k < nq; k++) {
		spill_pin(s, q[k].loc, -1);
		if (!ret) /* a header that does not match: moved (look again) or damaged */
			reread(s, st, &q[k], b, stored, vbatch);
		if (!ret && q[k].ret)
			ret = q[k].ret == -ESTALE ? -EIO : q[k].ret;
		if (!q[k].ret && hot)
			spill_note_device_hit(s, st->id, q[k].row);
	}
	return ret;
}

/* The nrq rows of rq that only the runs can answer (the table's lock
 * dropped): look them up and put their bytes (zeros for none) and batches
 * in place.  0 or -errno (-EIO: a damaged block). */
static int read_runs(struct store *s, struct stable *st, struct rq *rq, size_t nrq, uint64_t b,
		     uint8_t *stored, uint64_t *vbatch)
{
	uint32_t rs = st->t->row_size;
	int ret = runs_lookup(s, st, rq, nrq, b);
	for (size_t k = 0; k < nrq && !ret; k++) {
		if (rq[k].state == RQ_EIO) {
			ret = -EIO;
			break;
		}
		int data = rq[k].state == RQ_DATA;
		if (!data && rq[k].dst)
			memset(rq[k].dst, 0, rs);
		if (stored)
			stored[rq[k].idx] = data ? STORE_OUT : 0;
		if (vbatch)
			vbatch[rq[k].idx] = data ? rq[k].batch : 0;
	}
	return ret;
}

/* The read path: d's n rows as batch b sees them. */
static int read_rows(struct store *s, struct stable *st, const struct rdesc *d, size_t n, char *buf, uint64_t b,
		     uint8_t *stored, uint64_t *vbatch)
{
	uint32_t rs = st->t->row_size;
	struct spill *sp = s->sp;
	struct sreq one, *q = NULL;
	struct rq rone, *rq = NULL;
	size_t nq = 0, nrq = 0, nread = 0;
	int ret = 0;
	int runs = sp && runs_count(s, st->id, NULL) > 0;
	int hot = sp && b == EMB_NONE && !d->scan; /* reads that mark rows as used */

	/* many rows: their index entries first, in one pipelined pass */
	uint64_t *keys = NULL, *heads = NULL;
	if (n > 1 && read_keys(d, n, &keys, &heads))
		return -ENOMEM;
	pthread_rwlock_rdlock(&st->lock);
	if (heads)
		ret = index_get_many(s, st, keys, n, d->skip, runs, heads);
	for (size_t i = 0; i < n && !ret; i++) {
		if (d->skip && d->skip[i])
			continue;
		uint64_t row = row_of(d, i);
		char *dst = buf ? buf + i * rs : NULL;
		struct emb_version *v;
		int decided;
		nread++;
		if (heads && !heads[i]) { /* no entry: a hole, or the runs have it */
			v = NULL;
			decided = 0;
		} else {
			ret = heads ? chain_find_at(s, st, row, heads[i], b, &v, &decided)
				    : chain_find(s, st, row, b, &v, &decided);
			if (ret)
				break; /* damaged: EIO (counted) */
		}
		if (!decided && runs) { /* the runs say (below) */
			if (!rq && !(rq = n == 1 ? &rone : malloc(n * sizeof(*rq)))) {
				ret = -ENOMEM;
				break;
			}
			rq[nrq++] = (struct rq){ .row = row, .dst = dst, .idx = i };
			continue;
		}
		if (place_row(s, st, v, row, i, dst, stored, vbatch, hot))
			continue;
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
		q[nq++] = (struct sreq){ .loc = loc, .row = row, .batch = ver_batch(v), .len = rs,
					 .table = st->id, .dst = dst, .idx = i };
		spill_pin(s, loc, 1);
	}
	pthread_rwlock_unlock(&st->lock);
	free(heads);
	if (keys != d->rows)
		free(keys);
	ret = read_device(s, st, q, nq, b, stored, vbatch, hot, ret);
	if (q != &one)
		free(q);
	if (nrq && !ret)
		ret = read_runs(s, st, rq, nrq, b, stored, vbatch);
	if (rq != &rone)
		free(rq);
	atomic_fetch_add_explicit(&s->n_rows_read, nread, memory_order_relaxed);
	for (size_t i = 0; stored && !d->where && i < n; i++)
		if (!d->skip || !d->skip[i])
			stored[i] = stored[i] != 0;
	return ret;
}

int rows_read_ver(struct store *s, struct stable *st, const uint64_t *rows, size_t n, char *buf,
		  uint64_t b, uint8_t *stored, uint64_t *vbatch, int where)
{
	struct rdesc d = { .rows = rows, .where = where };
	return read_rows(s, st, &d, n, buf, b, stored, vbatch);
}

int rows_read_range(struct store *s, struct stable *st, uint64_t first, size_t n, char *buf, uint64_t b,
		    const uint8_t *skip, uint8_t *stored)
{
	struct rdesc d = { .first = first, .skip = skip, .scan = 1 };
	return read_rows(s, st, &d, n, buf, b, stored, NULL);
}
