/*
 * Writing a sorted run: blocks of records into claimed segments, then its
 * meta blocks (segment list, fences, Bloom filter), fdatasync, and one
 * transaction that installs its record (and retires a merge's inputs).
 * Evictions, merges and truncation build runs through here.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "run_int.h"

/* ---- building a run ------------------------------------------------------ */


static void segs_release(struct spill *sp, const struct u64vec *segs)
{
	pthread_mutex_lock(&sp->mu);
	for (size_t i = 0; i < segs->n; i++)
		sp->seg_busy[segs->v[i]] = 0;
	pthread_mutex_unlock(&sp->mu);
}



int run_build_open(struct run_build *w, struct store *s, struct stable *st)
{
	struct spill *sp = s->sp;
	memset(w, 0, sizeof(*w));
	w->s = s;
	w->sp = sp;
	w->table = st->id;
	w->gen = st->t->gen;
	w->rs = st->t->row_size;
	w->rec_size = 16 + w->rs;
	w->bs = run_blk_size(w->rs);
	w->per_blk = run_blk_recs(w->rs);
	w->cap = CHUNK_BYTES / w->bs ? CHUNK_BYTES / w->bs : 1;
	w->min_row = EMB_NONE;
	w->slot = -1;
	w->keep = 1 + atomic_load(&sp->reserve); /* an eviction leaves the merge reserve */
	if (posix_memalign((void **)&w->buf, BLK, (w->cap + 1) * (size_t)w->bs))
		return -ENOMEM;
	memset(w->buf, 0, (w->cap + 1) * (size_t)w->bs);
	return 0;
}

/* Write the full blocks in buf to their segments. */
static int run_build_flush(struct run_build *w)
{
	struct spill *sp = w->sp;
	uint64_t bps = sp->pm->seg_size / w->bs;
	size_t done = w->dry ? w->nbuf : 0;
	while (!w->err && done < w->nbuf) {
		uint64_t blk = w->first + done;
		if (blk / bps >= w->segs.n) {
			uint64_t k = seg_claim(sp, w->keep);
			if (k == EMB_NONE) {
				w->err = -ENOSPC;
				break;
			}
			if ((w->err = u64vec_push(&w->segs, k)))
				break;
		}
		size_t n = w->nbuf - done;
		if (n > bps - blk % bps)
			n = bps - blk % bps;
		uint64_t at = seg_base(sp, w->segs.v[blk / bps]) + (blk % bps) * w->bs;
		size_t len = n * w->bs, off = 0;
		while (off < len) {
			ssize_t r = pwrite(sp->fd, w->buf + done * w->bs + off, len - off, (off_t)(at + off));
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0) {
				w->err = r < 0 ? -errno : -EIO;
				break;
			}
			off += (size_t)r;
		}
		w->bytes += off;
		done += n;
	}
	if (w->err)
		return w->err;
	/* the open block moves to the front */
	memmove(w->buf, w->buf + w->nbuf * w->bs, w->bs);
	memset(w->buf + w->bs, 0, w->nbuf * (size_t)w->bs);
	w->first += w->nbuf;
	w->nbuf = 0;
	return 0;
}

/* Close the open block: header, checksum. */
static int run_build_seal_blk(struct run_build *w)
{
	char *b = w->buf + w->nbuf * (size_t)w->bs;
	struct emb_rblk *h = (struct emb_rblk *)b;
	h->magic = EMB_RBLK_MAGIC;
	h->nrec = w->in_blk;
	h->run_id = (uint32_t)w->id;
	h->csum = run_blk_csum(b, w->bs);
	w->nbuf++;
	w->in_blk = 0;
	if (w->nbuf == w->cap)
		return run_build_flush(w);
	return 0;
}

/* Append the versions of one row, newest first (nv of them). */
int run_build_row(struct run_build *w, uint64_t row, const uint64_t *batch, const char *const *data, uint32_t nv)
{
	if (w->err)
		return w->err;
	if (w->in_blk && w->in_blk + nv > w->per_blk && (w->err = run_build_seal_blk(w)))
		return w->err;
	for (uint32_t i = 0; i < nv; i++) {
		if (w->in_blk == w->per_blk && (w->err = run_build_seal_blk(w)))
			return w->err;
		if (!w->in_blk && (w->err = u64vec_push(&w->fences, row)))
			return w->err;
		char *rec = w->buf + w->nbuf * (size_t)w->bs + sizeof(struct emb_rblk) + (size_t)w->in_blk * w->rec_size;
		memcpy(rec, &row, 8);
		memcpy(rec + 8, &batch[i], 8);
		if (data[i])
			memcpy(rec + 16, data[i], w->rs);
		w->in_blk++;
		w->nrecs++;
		w->nlive += !(batch[i] & EMB_RREC_TOMB);
	}
	if ((w->err = u64vec_push(&w->rows, row)))
		return w->err;
	if (w->min_row == EMB_NONE)
		w->min_row = row;
	w->max_row = row;
	return 0;
}

/* Write what is left and make it durable. */
/* Append one raw block (meta). */
static int run_build_raw(struct run_build *w, const void *src, size_t len)
{
	char *b = w->buf + w->nbuf * (size_t)w->bs;
	memset(b, 0, w->bs);
	memcpy(b, src, len);
	w->nbuf++;
	return w->nbuf == w->cap ? run_build_flush(w) : 0;
}

uint64_t run_build_segs(const struct run_build *w, uint64_t nblocks, uint64_t nrows, uint64_t *bloom_bits,
			size_t *ab, uint64_t *cap)
{
	const struct spill *sp = w->sp;
	*bloom_bits = nrows * BLOOM_BITS_PER_REC < 64 ? 64 : nrows * BLOOM_BITS_PER_REC;
	*ab = nblocks * 8 + run_bloom_words(*bloom_bits) * 8;
	*cap = sp->list_cap && sp->list_cap < run_list_room(w->bs) ? sp->list_cap : run_list_room(w->bs);
	return run_segs(nblocks, *ab, w->bs, sp->pm->seg_size / w->bs, *cap);
}

/* Write what is left, then the meta blocks (segments, fences, filter), and
 * make it all durable. */
int run_build_finish(struct run_build *w)
{
	struct spill *sp = w->sp;
	if (!w->err && w->in_blk)
		w->err = run_build_seal_blk(w);
	if (!w->err && !w->nrecs)
		w->err = -ENODATA;
	if (w->err)
		return w->err;
	w->nblocks = w->fences.n;
	size_t ab;
	uint64_t cap, nsegs = run_build_segs(w, w->nblocks, w->rows.n, &w->bloom_bits, &ab, &cap);
	uint64_t nmeta = (ab + w->bs - 1) / w->bs, bps = sp->pm->seg_size / w->bs, nl = run_list_blocks(nsegs, cap);
	w->list_cap = (uint32_t)cap;
	if (nsegs > UINT32_MAX)
		return w->err = -EFBIG;
	if (w->dry) {
		w->dry_segs = nsegs;
		return 0;
	}
	while (w->segs.n < nsegs) { /* the list blocks name them all */
		uint64_t k = seg_claim(sp, w->keep);
		if (k == EMB_NONE)
			return w->err = -ENOSPC;
		if ((w->err = u64vec_push(&w->segs, k)))
			return w->err;
	}
	size_t segb = ((size_t)nsegs * 4 + 7) & ~(size_t)7;
	w->arrays = calloc(1, segb + ab);
	struct emb_rmeta *m = calloc(1, w->bs);
	if (!w->arrays || !m) {
		free(m);
		return w->err = -ENOMEM;
	}
	for (uint64_t i = 0; i < nsegs; i++)
		w->arrays[i] = (uint32_t)w->segs.v[i];
	uint64_t *fence = (uint64_t *)((char *)w->arrays + segb), *bloom = fence + w->nblocks;
	memcpy(fence, w->fences.v, w->nblocks * 8);
	for (size_t i = 0; i < w->rows.n; i++)
		run_bloom_add(bloom, w->bloom_bits, BLOOM_K, w->rows.v[i]);
	w->meta_csum = XXH64(fence, ab, w->id);
	/* the segment list in blocks nblocks .. nblocks + nl - 1, each naming
	 * the next (known now: every segment is claimed) */
	for (uint64_t part = 0; !w->err && part < nl; part++) {
		uint64_t b = w->nblocks + part;
		memset(m, 0, w->bs);
		*m = (struct emb_rmeta){ .magic = EMB_RMETA_MAGIC, .id = w->id, .nsegs = (uint32_t)nsegs,
					 .part = (uint32_t)part };
		if (part + 1 < nl)
			m->next = seg_base(sp, w->segs.v[(b + 1) / bps]) + ((b + 1) % bps) * w->bs;
		memcpy(m->seg, w->arrays + part * cap, (size_t)run_meta_nseg(m, cap) * 4);
		m->csum = run_meta_hdr_csum(m, cap);
		if (part == 0)
			w->meta_loc = seg_base(sp, w->segs.v[b / bps]) + (b % bps) * w->bs;
		w->err = run_build_raw(w, m, w->bs);
	}
	free(m);
	for (uint64_t i = 0; !w->err && i < nmeta; i++) {
		size_t off = i * w->bs, len = ab - off < w->bs ? ab - off : w->bs;
		w->err = run_build_raw(w, (char *)fence + off, len);
	}
	if (!w->err && w->nbuf)
		w->err = run_build_flush(w);
	if (!w->err && fdatasync(sp->fd))
		w->err = -errno;
	if (!w->err) {
		atomic_fetch_add_explicit(&sp->spill_writes, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&sp->spill_write_bytes, w->bytes, memory_order_relaxed);
	}
	return w->err;
}

void run_build_free(struct run_build *w, int release)
{
	if (release)
		segs_release(w->sp, &w->segs);
	free(w->buf);
	free(w->fences.v);
	free(w->rows.v);
	free(w->segs.v);
	free(w->arrays);
}

/* Make the built run part of the pool, in place of the runs old[0..nold)
 * (a merge; they turn dead), at order seq.  commit_lock held. */
int run_install(struct store *s, struct run_build *w, uint64_t seq, uint32_t level, struct srun **old,
		       size_t nold)
{
	struct spill *sp = s->sp;
	struct emb_rundir *rd = sp->rd;
	volatile size_t slot = w->slot >= 0 ? (size_t)w->slot : EMB_RUNDIR_CAP;
	for (size_t i = 0; i < EMB_RUNDIR_CAP && slot == EMB_RUNDIR_CAP; i++)
		if (!rd->run[i].state && (int64_t)i != sp->bulk_slot)
			slot = i;
	if (slot == EMB_RUNDIR_CAP)
		return -ENOSPC;
	struct emb_run r = { .id = w->id, .table = w->table, .rec_size = w->rec_size, .table_gen = w->gen,
			     .seq = seq, .nrecs = w->nrecs, .nlive = w->nlive, .nblocks = w->nblocks,
			     .blk_size = w->bs, .nsegs = (uint32_t)w->segs.n, .min_row = w->min_row,
			     .max_row = w->max_row, .level = level, .bloom_k = BLOOM_K,
			     .bloom_bits = w->bloom_bits, .meta_loc = w->meta_loc, .meta_csum = w->meta_csum,
			     .list_cap = w->list_cap,
			     .state = EMB_RUN_LIVE };
	r.csum = run_rec_csum(&r);
	volatile int ret = 0;
	PM_TX(s) {
		for (size_t i = 0; i < w->segs.n; i++) {
			struct emb_sseg *g = &sp->pm->seg[w->segs.v[i]];
			pmemobj_tx_add_range_direct(g, sizeof(*g));
			pthread_mutex_lock(&sp->mu); /* seg_claim reads states under it */
			*g = (struct emb_sseg){ .state = EMB_SEG_RUN, .fill = sp->pm->seg_size, .seq = w->id };
			pthread_mutex_unlock(&sp->mu);
		}
		pmemobj_tx_add_range_direct(&rd->run[slot], sizeof(r));
		rd->run[slot] = r;
		runs_mark_dead_tx(old, nold);
	} PM_TX_END(s, ret);
	if (ret)
		return ret;
	if (w->slot >= 0) {
		sp->bulk_slot = -1;
		w->slot = -1;
	}
	struct srun *x = srun_new(sp, &rd->run[slot], w->arrays);
	if (!x)
		return -ENOMEM; /* listed at the next mount */
	w->arrays = NULL;
	x->fresh = w->fresh;
	segs_release(sp, &w->segs);
	w->segs.n = 0;
	pthread_rwlock_wrlock(&sp->run_lock);
	runs_list_retire(s, sp, old, nold);
	runs_list_insert(sp, x);
	run_live_add(s, x->r, 1);
	pthread_rwlock_unlock(&sp->run_lock);
	return 0;
}

uint64_t run_next_id(struct spill *sp)
{
	return atomic_fetch_add(&sp->run_next_id, 1);
}
