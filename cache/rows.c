/*
 * cache/rows.c: the row cache mechanism.  Per shard: the arenas that hold
 * row bytes (one per row size, chunks of up to 64 KiB, no per-row header),
 * the hash table of entries (chains through the entry array, buckets grown
 * to keep one entry per bucket), CLOCK eviction of clean unpinned rows,
 * inserting and removing entries, pin counts; and setting the shards up and
 * tearing them down.  The lookup itself is inline in cache_int.h.
 *
 * It knows nothing of the layer below: it never calls ops, and includes no
 * store header (the Makefile checks it).  What to do when only dirty rows
 * could be evicted is the caller's (-EAGAIN: writeback.c makes room).
 * Every function here runs with its shard's lock held, but for
 * cache_shards_init() and cache_shards_free().
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cache_int.h"

/* ---- arenas ----------------------------------------------------------- */

static int class_of(struct shard *sh, uint32_t rs)
{
	for (uint32_t i = 0; i < sh->ncls; i++)
		if (sh->ar[i].rs == rs)
			return (int)i;
	if (sh->ncls == MAX_CLASSES)
		return -1;
	struct arena *a = &sh->ar[sh->ncls];
	a->rs = rs;
	a->stride = rs < 8 ? 8 : rs;
	/* a power of two of slots a chunk (at most CHUNK_BYTES, at least one
	 * slot): slot_ptr() then shifts and masks instead of dividing */
	a->chunk_shift = 0;
	while (((uint64_t)a->stride << (a->chunk_shift + 1)) <= CHUNK_BYTES)
		a->chunk_shift++;
	a->per_chunk = 1u << a->chunk_shift;
	a->free = NIL;
	return (int)sh->ncls++;
}

static uint32_t slot_alloc(struct arena *a)
{
	if (a->free != NIL) {
		uint32_t i = a->free;
		memcpy(&a->free, slot_ptr(a, i), 4);
		return i;
	}
	if (a->hwm == a->nchunks * a->per_chunk) {
		char **p = realloc(a->chunks, (a->nchunks + 1) * sizeof(*p));
		if (!p)
			return NIL;
		a->chunks = p;
		p[a->nchunks] = malloc((size_t)a->per_chunk * a->stride);
		if (!p[a->nchunks])
			return NIL;
		a->nchunks++;
	}
	return a->hwm++;
}

static void slot_free(struct arena *a, uint32_t i)
{
	memcpy(slot_ptr(a, i), &a->free, 4);
	a->free = i;
}

/* ---- hash table ------------------------------------------------------- */

static void unlink_entry(struct shard *sh, uint32_t idx)
{
	struct centry *e = &sh->e[idx];
	uint32_t *pp = &sh->bucket[hash(e->table, e_row(e)) & (sh->nbucket - 1)];
	while (*pp != idx)
		pp = &sh->e[*pp].hnext;
	*pp = e->hnext;
}

/* Keep at most one entry per bucket on average (a batch's lookups prefetch
 * the first two of a chain: cache.c's walk_find). */
static void maybe_grow_buckets(struct shard *sh)
{
	if (sh->nvalid <= sh->nbucket)
		return;
	uint32_t nb = sh->nbucket * 2;
	uint32_t *b = malloc(nb * sizeof(*b));
	if (!b)
		return; /* longer chains, still correct */
	memset(b, 0xff, nb * sizeof(*b));
	for (uint32_t i = 0; i < sh->hwm; i++) {
		struct centry *e = &sh->e[i];
		if (!(e->flags & F_VALID))
			continue;
		uint32_t *head = &b[hash(e->table, e_row(e)) & (nb - 1)];
		e->hnext = *head;
		*head = i;
	}
	free(sh->bucket);
	sh->bucket = b;
	sh->nbucket = nb;
}

/* ---- entries: remove, evict (CLOCK), insert, pin ------------------------ */

/* Returns the promises the entry held (to give back once unlocked). */
int cache_entry_remove(struct cache *c, struct shard *sh, uint32_t idx)
{
	struct centry *e = &sh->e[idx];
	struct tstat *t = tst(c, e->table);
	uint32_t rs = sh->ar[e->cls].rs;
	int held = !!(e->flags & F_PROM);
	unlink_entry(sh, idx);
	slot_free(&sh->ar[e->cls], e->data);
	if (e->flags & F_DIRTY) {
		sh->ndirty--;
		TS_SUB(t, dirty, 1);
		if ((e->flags & F_NEW) && !(e->flags & F_STORED))
			TS_SUB(t, new_dirty, 1);
	}
	if (e->pins) {
		sh->npinned--;
		TS_SUB(t, pinned, 1);
	}
	TS_SUB(t, rows, 1);
	TS_SUB(t, bytes, rs + CACHE_ROW_OVERHEAD);
	sh->bytes -= rs + CACHE_ROW_OVERHEAD;
	sh->nvalid--;
	e->flags = 0;
	e->pins = 0;
	e->hnext = sh->free;
	sh->free = idx;
	return held;
}

/* CLOCK: evict one clean, unpinned row.  0 evicted, -EAGAIN only dirty rows
 * could go (write some back first), -ENOSPC nothing can go. */
static int evict_one(struct cache *c, struct shard *sh)
{
	int saw_dirty = 0;
	if (sh->hwm == 0)
		return -ENOSPC;
	for (uint64_t step = 0; step < 2ull * sh->hwm + 1; step++) {
		uint32_t i = sh->hand;
		sh->hand = sh->hand + 1 >= sh->hwm ? 0 : sh->hand + 1;
		struct centry *e = &sh->e[i];
		if (!(e->flags & F_VALID) || e->pins || (e->flags & F_BUSY))
			continue;
		if (e->flags & F_REF) {
			e->flags &= (uint8_t)~F_REF;
			continue;
		}
		if (e->flags & F_DIRTY) {
			saw_dirty = 1;
			continue;
		}
		TS_ADD(tst(c, e->table), evictions, 1);
		sh->evictions++;
		cache_entry_remove(c, sh, i); /* clean: holds no promise */
		return 0;
	}
	return saw_dirty ? -EAGAIN : -ENOSPC;
}

/* Insert a row (not present).  Returns the entry, or NIL with *err set:
 * -EAGAIN (write back dirty rows, then retry) or -ENOSPC/-ENOMEM (bypass). */
uint32_t cache_entry_insert(struct cache *c, struct shard *sh, uint32_t table, uint32_t rs,
		       uint64_t row, uint64_t h, int *err)
{
	int cls = class_of(sh, rs);
	if (cls < 0) {
		*err = -ENOSPC;
		return NIL;
	}
	uint64_t need = rs + CACHE_ROW_OVERHEAD;
	if (need > sh->budget) {
		*err = -ENOSPC;
		return NIL;
	}
	while (sh->bytes + need > sh->budget || (sh->free == NIL && sh->hwm == sh->cap)) {
		int r = evict_one(c, sh);
		if (r) {
			*err = r;
			return NIL;
		}
	}
	uint32_t d = slot_alloc(&sh->ar[cls]);
	if (d == NIL) {
		*err = -ENOMEM;
		return NIL;
	}
	uint32_t idx;
	if (sh->free != NIL) {
		idx = sh->free;
		sh->free = sh->e[idx].hnext;
	} else {
		idx = sh->hwm++;
	}
	struct centry *e = &sh->e[idx];
	memset(e, 0, sizeof(*e));
	e->row_lo = (uint32_t)row;
	e->row_hi = (uint32_t)(row >> 32);
	e->table = (uint16_t)table;
	e->cls = (uint8_t)cls;
	e->data = d;
	e->flags = F_VALID | F_REF;
	uint32_t *head = &sh->bucket[h & (sh->nbucket - 1)];
	e->hnext = *head;
	*head = idx;
	sh->nvalid++;
	sh->bytes += need;
	struct tstat *t = tst(c, table);
	TS_ADD(t, rows, 1);
	TS_ADD(t, bytes, need);
	maybe_grow_buckets(sh);
	return idx;
}

/* One pin more on entry e: 0, or -EBUSY when it has UINT8_MAX already. */
int cache_entry_pin(struct cache *c, struct shard *sh, struct centry *e)
{
	if (e->pins == UINT8_MAX)
		return -EBUSY;
	if (e->pins++ == 0) {
		sh->npinned++;
		TS_ADD(tst(c, e->table), pinned, 1);
	}
	return 0;
}

/* One pin fewer on entry e, if it has any. */
void cache_entry_unpin(struct cache *c, struct shard *sh, struct centry *e)
{
	if (e->pins && --e->pins == 0) {
		sh->npinned--;
		TS_SUB(tst(c, e->table), pinned, 1);
	}
}

/* ---- shards ------------------------------------------------------------- */

/* Each shard's lock, budget (bytes / nshards), entry array and first
 * buckets: 0, or -ENOMEM (cache_shards_free() undoes what was done). */
int cache_shards_init(struct cache *c, uint64_t bytes)
{
	for (uint32_t i = 0; i < c->nshards; i++) {
		struct shard *sh = &c->sh[i];
		pthread_mutex_init(&sh->lock, NULL);
		sh->budget = bytes / c->nshards;
		uint64_t cap = sh->budget / (MIN_ROW + CACHE_ROW_OVERHEAD) + 1;
		sh->cap = cap > NIL - 1 ? NIL - 1 : (uint32_t)cap;
		/* calloc of a large array maps zero pages: only entries used are resident */
		sh->e = calloc(sh->cap, sizeof(*sh->e));
		sh->nbucket = INIT_BUCKETS;
		sh->bucket = malloc(sh->nbucket * sizeof(*sh->bucket));
		if (!sh->e || !sh->bucket)
			return -ENOMEM;
		memset(sh->bucket, 0xff, sh->nbucket * sizeof(*sh->bucket));
		sh->free = NIL;
	}
	return 0;
}

void cache_shards_free(struct cache *c)
{
	for (uint32_t i = 0; i < c->nshards; i++) {
		struct shard *sh = &c->sh[i];
		for (uint32_t k = 0; k < sh->ncls; k++) {
			for (uint32_t j = 0; j < sh->ar[k].nchunks; j++)
				free(sh->ar[k].chunks[j]);
			free(sh->ar[k].chunks);
		}
		free(sh->e);
		free(sh->bucket);
		pthread_mutex_destroy(&sh->lock);
	}
}
