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
#include <sys/mman.h>

#include "cache_int.h"

/* ---- memory on huge pages ----------------------------------------------
 *
 * A batch's lookups touch, per row, its bucket, its entry and its bytes,
 * each at a random place in arrays of hundreds of MiB: with 4 KiB pages
 * that is a TLB miss (a page walk) for each, and the walks, not the cache
 * lines, bound a gather.  So the large arrays are mapped with
 * MADV_HUGEPAGE (2 MiB pages where the kernel has them; where THP is off
 * it is plain memory): a shard's entry array when it is at least
 * HUGE_MIN_ENTRIES bytes, so is the buckets' map (all shards'), and, when
 * the whole budget is at least HUGE_MIN_BUDGET, every arena chunk, carved
 * from 2 MiB regions shared by all shards (chunks are never freed before
 * cache_shards_free(), so a region is only ever carved).  A small cache
 * keeps malloc: a 2 MiB page per shard would exceed its budget. */
#define HUGE_PAGE (2u << 20)
#define HUGE_MIN_ENTRIES (4u << 20)
#define HUGE_MIN_BUDGET (256ull << 20)

/* len bytes (a multiple of HUGE_PAGE), zeroed, 2 MiB-aligned, advised to
 * be backed by huge pages if huge; NULL when there is no memory. */
static void *huge_map(size_t len, int huge)
{
	size_t span = len + HUGE_PAGE;
	char *p = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	char *a = (char *)(((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
	if (a > p)
		munmap(p, (size_t)(a - p));
	if (a + len < p + span)
		munmap(a + len, (size_t)(p + span - (a + len)));
	if (huge)
		(void)madvise(a, len, MADV_HUGEPAGE); /* advice: without THP, 4 KiB pages */
	return a;
}

static size_t huge_round(size_t len)
{
	return (len + HUGE_PAGE - 1) & ~(size_t)(HUGE_PAGE - 1);
}

/* A chunk of len bytes (<= CHUNK_BYTES) for an arena: from the shared
 * regions (c->huge) or malloc.  Shard lock held; huge_lock is a leaf. */
static char *chunk_alloc(struct cache *c, size_t len)
{
	if (!c->huge)
		return malloc(len);
	len = (len + 63) & ~(size_t)63;
	pthread_mutex_lock(&c->huge_lock);
	char *p = NULL;
	if (c->huge_left < len) {
		void **r = realloc(c->huge_reg, (c->nhuge + 1) * sizeof(*r));
		char *reg = r ? huge_map(HUGE_PAGE, 1) : NULL;
		if (r)
			c->huge_reg = r;
		if (!reg)
			goto out;
		c->huge_reg[c->nhuge++] = reg;
		c->huge_cur = reg;
		c->huge_left = HUGE_PAGE;
	}
	p = c->huge_cur;
	c->huge_cur += len;
	c->huge_left -= len;
out:
	pthread_mutex_unlock(&c->huge_lock);
	return p;
}

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

static uint32_t slot_alloc(struct cache *c, struct arena *a)
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
		p[a->nchunks] = chunk_alloc(c, (size_t)a->per_chunk * a->stride);
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
	uint32_t *pp = bucket_of(sh, hash(e->table, e_row(e)));
	while (*pp != idx)
		pp = &sh->e[*pp].hnext;
	*pp = e->hnext;
}

/* Keep at most one entry per two buckets on average: a hit is at the head
 * of its chain but for at most a quarter of lookups, against up to a half
 * at one per bucket (a batch's lookups prefetch the first two of a chain,
 * cache.c's walk_find: each second entry costs a line and a wait).  The
 * buckets double in place, into the room reserved after them
 * (cache_shards_init()): chain i splits into chains i and i + nbucket. */
static void maybe_grow_buckets(struct shard *sh)
{
	if (sh->nvalid <= sh->nbucket / 2 || sh->nbucket >= sh->max_bucket)
		return; /* (at the most: longer chains, still correct) */
	uint32_t nb = sh->nbucket, mask = nb * 2 - 1;
	for (uint32_t i = 0; i < nb; i++) {
		uint32_t x = *bucket_at(sh, i), lo = NIL, hi = NIL;
		while (x != NIL) {
			struct centry *e = &sh->e[x];
			uint32_t next = e->hnext;
			uint32_t *head = (hash(e->table, e_row(e)) & mask) == i ? &lo : &hi;
			e->hnext = *head;
			*head = x;
			x = next;
		}
		*bucket_at(sh, i) = lo;
		*bucket_at(sh, i + nb) = hi;
	}
	sh->nbucket = nb * 2;
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
	if (cls < 0 || row >= CACHE_ROW_LIMIT) {
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
	uint32_t d = slot_alloc(c, &sh->ar[cls]);
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
	e->row_hi = (uint16_t)(row >> 32);
	e->table = (uint16_t)table;
	e->cls = (uint8_t)cls;
	e->data = d;
	e->flags = F_VALID | F_REF;
	uint32_t *head = bucket_of(sh, h);
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
	pthread_mutex_init(&c->huge_lock, NULL);
	c->huge = bytes >= HUGE_MIN_BUDGET;
	uint64_t cap = bytes / c->nshards / (MIN_ROW + CACHE_ROW_OVERHEAD) + 1;
	if (cap > NIL - 1)
		cap = NIL - 1;
	/* each shard's buckets: room for twice its entries (a power of
	 * two), reserved in one mapping where they interleave (bucket_of()):
	 * what is touched is the buckets in use, as dense as in one array */
	uint32_t max_bucket = INIT_BUCKETS, bshift = 0;
	while (max_bucket < 2 * cap && max_bucket < (1u << 31))
		max_bucket *= 2;
	while ((1u << bshift) < c->nshards)
		bshift++;
	c->bucket_len = huge_round(((size_t)max_bucket << bshift) * sizeof(uint32_t));
	c->bucket_map = huge_map(c->bucket_len, c->bucket_len >= HUGE_MIN_ENTRIES);
	if (!c->bucket_map)
		return -ENOMEM;
	for (uint32_t i = 0; i < c->nshards; i++) {
		struct shard *sh = &c->sh[i];
		pthread_mutex_init(&sh->lock, NULL);
		sh->budget = bytes / c->nshards;
		sh->cap = (uint32_t)cap;
		sh->bucket = c->bucket_map + i;
		sh->max_bucket = max_bucket;
		sh->bshift = bshift;
		/* either way zero pages are mapped: only entries used are resident */
		size_t len = (size_t)sh->cap * sizeof(*sh->e), map = huge_round(len);
		if (len >= HUGE_MIN_ENTRIES && (sh->e = huge_map(map, 1)))
			sh->e_map = map;
		else
			sh->e = calloc(sh->cap, sizeof(*sh->e));
		sh->nbucket = INIT_BUCKETS;
		if (!sh->e)
			return -ENOMEM;
		for (uint32_t b = 0; b < sh->nbucket; b++)
			*bucket_at(sh, b) = NIL;
		sh->free = NIL;
	}
	return 0;
}

void cache_shards_free(struct cache *c)
{
	for (uint32_t i = 0; i < c->nshards; i++) {
		struct shard *sh = &c->sh[i];
		for (uint32_t k = 0; k < sh->ncls; k++) {
			if (!c->huge) /* else the chunks are the regions' */
				for (uint32_t j = 0; j < sh->ar[k].nchunks; j++)
					free(sh->ar[k].chunks[j]);
			free(sh->ar[k].chunks);
		}
		if (sh->e_map)
			munmap(sh->e, sh->e_map);
		else
			free(sh->e);
		pthread_mutex_destroy(&sh->lock);
	}
	if (c->bucket_map)
		munmap(c->bucket_map, c->bucket_len);
	for (uint32_t i = 0; i < c->nhuge; i++)
		munmap(c->huge_reg[i], HUGE_PAGE);
	free(c->huge_reg);
	pthread_mutex_destroy(&c->huge_lock);
}
