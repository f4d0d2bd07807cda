/*
 * The versions of one row that a merge (runmerge.c) or a sweep's step
 * (runsweep.c) gathers from its inputs, and which of them the output keeps.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "run_int.h"

int mvers_room(struct mvers *mv, uint32_t rs)
{
	if (mv->n < mv->cap)
		return 0;
	size_t cap = mv->cap ? 2 * mv->cap : 64;
	uint64_t *b = realloc(mv->batch, cap * sizeof(*b));
	if (b)
		mv->batch = b;
	char *d = b ? realloc(mv->bytes, cap * (size_t)rs) : NULL;
	if (d)
		mv->bytes = d;
	const char **p = d ? realloc(mv->data, cap * sizeof(*p)) : NULL;
	if (p)
		mv->data = p;
	uint8_t *k = p ? realloc(mv->keep, cap) : NULL;
	if (!k)
		return -ENOMEM;
	mv->keep = k;
	mv->cap = cap;
	return 0;
}

void mvers_free(struct mvers *mv)
{
	free(mv->batch);
	free(mv->bytes);
	free(mv->data);
	free(mv->keep);
}

size_t mvers_keep(struct mvers *mv, uint32_t rs, const uint64_t *snaps, uint32_t ns, int bottom)
{
	memset(mv->keep, 0, mv->n);
	mv->keep[0] = 1;
	for (uint32_t k = 0; k < ns; k++)
		for (size_t j = 0; j < mv->n; j++)
			if ((mv->batch[j] & ~EMB_RREC_TOMB) <= snaps[k]) {
				mv->keep[j] = 1;
				break;
			}
	size_t nk = 0;
	for (size_t j = 0; j < mv->n; j++)
		if (mv->keep[j]) {
			mv->batch[nk] = mv->batch[j];
			mv->data[nk] = mv->batch[j] & EMB_RREC_TOMB ? NULL : mv->bytes + j * (size_t)rs;
			nk++;
		}
	while (bottom && nk && (mv->batch[nk - 1] & EMB_RREC_TOMB))
		nk--;
	return nk;
}

uint32_t merge_snaps(struct store *s, uint64_t *snaps)
{
	pthread_rwlock_rdlock(&s->snap_lock);
	uint32_t ns = s->n_live;
	memcpy(snaps, s->live_batch, ns * sizeof(snaps[0]));
	pthread_rwlock_unlock(&s->snap_lock);
	return ns;
}

int merge_gather(struct store *s, struct rit *it, size_t m, uint64_t row, uint32_t rs,
			struct mvers *mv, const struct run_build *w, uint64_t *in_bytes)
{
	int ret = 0;
	mv->n = 0;
	for (size_t i = 0; i < m && !ret; i++) {
		while (it[i].cur && rec_row(it[i].cur) == row) {
			if ((ret = mvers_room(mv, rs)))
				break;
			mv->batch[mv->n] = rec_batch(it[i].cur);
			memcpy(mv->bytes + mv->n * (size_t)rs, it[i].cur + 16, rs);
			mv->n++;
			*in_bytes += w->rec_size;
			rit_next(s, &it[i]);
			if (it[i].err)
				ret = it[i].err;
		}
	}
	return ret;
}
