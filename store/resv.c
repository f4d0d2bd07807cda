/*
 * The index-room reserve (emb_resv): whole 256 KiB chunks held back while a
 * write-back cache holds promised rows, so that the index splits those rows
 * need at write-back always find heap.  Its size covers the worst case of
 * what the promised rows can do to the row index (resv_target); a split that
 * finds the heap full gives one chunk back and runs again (resv_run), under
 * space_lock so that a growing slab cannot take that chunk in between.
 * Changes are transactions of at most 16 blocks (a lane's log holds them:
 * no heap needed to free), resealing the reserve's checksum under meta_lock.
 * Locking: space_lock held by every caller.
 */
#include <errno.h>
#include <xxhash.h>

#include "store_int.h"

#define CHUNK (256u << 10)

#define SEED_RESV 0x52455356ull /* "RESV" */

static uint64_t resv_csum(const struct emb_resv *r)
{
	uint64_t n = r->n <= EMB_RESV_MAX ? r->n : 0;
	return XXH64(r->block, n * 8, XXH64(&r->n, 8, SEED_RESV));
}

void resv_seal(struct emb_resv *r)
{
	r->csum = resv_csum(r);
}

/* Inside a transaction that changed r. */
static void resv_seal_tx(struct emb_resv *r)
{
	pmemobj_tx_add_range_direct(&r->csum, 8);
	resv_seal(r);
}

/* Hold back heap for index growth: whole chunks, so that a block given back
 * serves whatever a split allocates (segments and directories come from
 * one-chunk runs, pool.c).  space_lock held. */
static int resv_grow(struct store *s, uint64_t want)
{
	struct emb_resv *volatile r = S_PTR(s, s->sb->resv_off);
	if (r->n >= want)
		return 0;
	/* grow by a quarter more than asked, 16 blocks per transaction: on a
	 * plain file every transaction costs msyncs.  The quarter is best
	 * effort: a heap that has room for `need` but not for it (a full
	 * pool) must not fail the promise, and near a full heap the blocks
	 * are taken one per transaction (a transaction is all or nothing) */
	uint64_t need = want < EMB_RESV_MAX ? want : EMB_RESV_MAX;
	volatile uint64_t step = 16; /* volatile: set between TX_BEGINs (setjmp) */
	want += want / 4;
	if (want > EMB_RESV_MAX)
		want = EMB_RESV_MAX;
	while (r->n < want) {
		volatile int ret = 0;
		uint64_t k = want - r->n < step ? want - r->n : step;
		META_TX(s) {
			pmemobj_tx_add_range_direct(&r->n, 8);
			pmemobj_tx_add_range_direct(&r->block[r->n], k * 8);
			while (k--) {
				PMEMoid o = pmemobj_tx_alloc(EMB_CHUNK_ALLOC, 0);
				r->block[r->n++] = o.off;
			}
			resv_seal_tx(r);
		} META_TX_END(s, ret);
		if (ret == -ENOSPC && step > 1) {
			step = 1;
			continue;
		}
		if (ret == -ENOSPC && r->n < need)
			atomic_fetch_add(&s->heap_refusals, 1); /* the spill mover may shrink rows */
		if (ret)
			return r->n >= need && ret == -ENOSPC ? 0 : ret;
	}
	return 0;
}

/* Give blocks beyond want back to the heap, a few per transaction (so that
 * its log fits libpmemobj's lane: no heap needed).  On a failure the blocks
 * left are kept (tried again at the next release).  space_lock held. */
static int resv_shrink(struct store *s, uint64_t want)
{
	struct emb_resv *volatile r = S_PTR(s, s->sb->resv_off);
	volatile int ret = 0;
	while (r->n > want && !ret) {
		META_TX(s) {
			pmemobj_tx_add_range_direct(&r->n, 8);
			for (int k = 0; k < 16 && r->n > want; k++)
				pmemobj_tx_free(pmemobj_oid(S_PTR(s, r->block[--r->n])));
			resv_seal_tx(r);
		} META_TX_END(s, ret);
	}
	return ret;
}

/*
 * Chunks the index may need to insert `rows` promised rows at write-back.
 * A segment holds 3584 entries and splits when a bucket pair fills, at about
 * 2400-2700 entries, leaving two halves of ~1200 or more.  So inserting R
 * rows splits each existing segment at most once (all of them when they sit
 * near the threshold together, as they do under uniform hashing: splits
 * come in waves) and, beyond that, once per ~1200 further rows; and never more
 * than once per row.  Segments: min(R, S + R/1024), three to a chunk; a
 * directory that doubles needs its new copy while the old one lives; two
 * chunks for a split in flight and a table's first segment.  Directories
 * larger than a chunk (tables of tens of millions of rows) need contiguous
 * chunks the reserve does not hold.
 */
static uint64_t resv_target(struct store *s, uint64_t rows)
{
	if (!rows)
		return 0;
	uint64_t segs = atomic_load(&s->idx_segs) + rows / 1024;
	if (segs > rows)
		segs = rows;
	return (segs + 2) / 3 + (2 * atomic_load(&s->idx_dir_bytes) + CHUNK - 1) / CHUNK + 2;
}

/* Give one held-back block back to the heap.  space_lock held. */
static int resv_release_locked(struct store *s)
{
	const struct emb_resv *r = S_PTR(s, s->sb->resv_off);
	return r->n ? resv_shrink(s, r->n - 1) : -ENOSPC;
}

/* The block given back and the allocation that needs it happen under
 * space_lock, so a slab growing for a promise cannot take it in between.
 * An allocation the heap still refuses is counted in heap_refusals. */
int resv_run(struct store *s, int (*fn)(void *), void *arg)
{
	pthread_mutex_lock(&s->space_lock);
	int ret = fn(arg);
	while (ret == -ENOSPC && resv_release_locked(s) == 0)
		ret = fn(arg);
	if (ret == -ENOSPC)
		atomic_fetch_add(&s->heap_refusals, 1); /* the spill mover may shrink rows */
	pthread_mutex_unlock(&s->space_lock);
	return ret;
}

/*
 * A trainer promises a batch, writes it and gets the promise back, batch
 * after batch: giving the reserve back each time and taking it again would
 * cost tens of transactions per batch (16 blocks each; a 4 M row table's
 * reserve for 4096 promised rows is ~740 blocks).  So the largest target
 * asked for lately is kept for RESV_LINGER_NS after it was last asked for;
 * a full heap takes it back at once (resv_squeeze, from slab growth).
 */
#define RESV_LINGER_NS 2000000000ull

int resv_hold(struct store *s, uint64_t rows)
{
	uint64_t want = resv_target(s, rows), now = now_ns();
	if (want >= s->resv_keep || now - s->resv_keep_ns > RESV_LINGER_NS) {
		s->resv_keep = want;
		s->resv_keep_ns = now;
	}
	return resv_grow(s, want);
}

void resv_trim(struct store *s, uint64_t rows)
{
	/* hysteresis: a few transactions per write-back, not one per row */
	uint64_t want = resv_target(s, rows);
	if (now_ns() - s->resv_keep_ns <= RESV_LINGER_NS && s->resv_keep > want)
		want = s->resv_keep;
	const struct emb_resv *r = S_PTR(s, s->sb->resv_off);
	if (r->n > 2 * want + 16)
		(void)resv_shrink(s, want + want / 4); /* kept on failure: tried again */
}

uint64_t resv_squeeze(struct store *s, uint64_t rows)
{
	const struct emb_resv *r = S_PTR(s, s->sb->resv_off);
	uint64_t before = r->n;
	s->resv_keep = 0;
	resv_trim(s, rows); /* what the reserve would be without lingering */
	return before - r->n;
}

int resv_check(struct store *s, char *err, size_t n)
{
	const struct emb_resv *r = S_PTR(s, s->sb->resv_off);
	if (r->n > EMB_RESV_MAX || r->csum != resv_csum(r))
		return store_err(err, n, -EIO, "index reserve is damaged (checksum mismatch)");
	for (uint64_t k = 0; k < r->n; k++)
		if (!pool_range_ok(s, r->block[k], EMB_CHUNK_ALLOC, 16))
			return store_err(err, n, -EIO, "index reserve is damaged (block %llu outside the pool)",
					 (unsigned long long)k);
	return 0;
}
