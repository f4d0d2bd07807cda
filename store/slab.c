/*
 * Row-version slots.  Each size class (slot = 16-byte version header + row,
 * rounded to 8 bytes, at least 40; links, stubs and tombstones: 32 bytes)
 * owns a list of ~1 MiB slabs allocated from libpmemobj.
 * A slab's persistent bitmap says which slots hold a journaled or published
 * version; the DRAM copy additionally holds slots handed out to a commit in
 * progress.  Slabs of a class are read in at the first allocation in that
 * class, not at mount.
 *
 * Reservations: a write-back cache promises rows to the pool before it writes
 * them (store_space_reserve).  A promise is an exact count of free slots of
 * the row's class, taken from loaded slabs, growing the class by a slab if
 * needed; every class keeps COW_HEADROOM unpromised slots for copy-on-write
 * of updates.  While a snapshot is live, a promise also counts a slot of
 * the small class: a write-back that keeps the version it replaces for a
 * snapshot links the two.  Promises are counted per table (rows, and of
 * them those with a link), so a release gives back links exactly as far
 * as that table was promised them.  Rows promised while no snapshot was
 * live get their links when they are stamped with a batch, if a snapshot
 * was taken meanwhile (store_space_links: rows stamped before a snapshot
 * never replace a version it keeps).  Index growth is held back too: the pool keeps whole free
 * chunks in reserve (emb_resv) in proportion to the rows promised, and an
 * index split that finds the heap full gives one back and retries.  So
 * write-back of promised rows does not run out of space.
 *
 * Locking: space_lock protects the DRAM state here (classes, slabs, bitmap
 * copies, promises); the public functions take it.  PMem bitmap words are
 * changed only under commit_lock.
 *
 * Damage: the class table is covered by the superblock's checksum; slab
 * headers are checked at mount against their class (magic, slot size, slot
 * count and data offset of the class's geometry, links inside the pool, as
 * many slabs as the class counts); the index reserve carries a checksum.
 * Bitmaps are not covered.  A bit lost on a used slot would let the slot be
 * handed out again, and the version written there is a sound one of another
 * row: the row whose entry still leads to the slot would read as a hole,
 * with no error (a lookup takes a sound element of another row for a tag
 * collision).  So a slot is handed out only if it holds nothing a row can
 * refer to (slot_unused: zeros, as a slab is allocated, or poisoned, as
 * every free leaves it and slab_unreserve leaves a slot it takes back); one
 * that holds anything else is damage, counted (n_csum_errors) and kept out
 * of use until the next mount, whose first allocation in that class finds
 * it again; fsck reports it ("versions that rows reference sit in slots
 * marked free").
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "store_int.h"

/* libpmemobj hands out 256 KiB chunks; its data pointer is 16-byte aligned
 * and slabs align to 64 inside the allocation.  A slab is four chunks (or
 * more for huge rows) minus that header, so no chunk is wasted. */
#define CHUNK (256u << 10)
#define SLAB_TARGET (4 * CHUNK)
#define ALLOC_HDR 64u

uint32_t slab_row_slot(uint32_t row_size)
{
	uint32_t ss = ver_slot_size(row_size);
	return ss <= EMB_SMALL_SLOT ? EMB_SMALL_SLOT + 8 : ss;
}

static size_t bm_words(uint32_t nslots)
{
	return (nslots + 63) / 64;
}

static uint64_t data_off_for(uint32_t n)
{
	return (sizeof(struct emb_slab) + bm_words(n) * 8 + 63) & ~63ull;
}

/* Allocation size (what is asked of libpmemobj) and slots for a slot size. */
static void slab_geometry(uint32_t ss, uint32_t *alloc, uint32_t *nslots)
{
	uint64_t a = SLAB_TARGET;
	while (a - ALLOC_HDR - 64 - data_off_for(16) < 16ull * ss)
		a += CHUNK;
	a -= ALLOC_HDR;
	uint32_t n = (uint32_t)((a - 64) / ss);
	while (64 + data_off_for(n) + (uint64_t)n * ss > a)
		n--;
	*alloc = (uint32_t)a;
	*nslots = n;
}

/* Find or create the class of slot size ss.  space_lock held. */
static int class_of_slot_locked(struct store *s, uint32_t ss, uint32_t *cls)
{
	volatile int free_i = -1;

	for (uint32_t i = 0; i < EMB_MAX_CLASSES; i++) {
		if (s->sb->classes[i].slot_size == ss) {
			*cls = i;
			return 0;
		}
		if (s->sb->classes[i].slot_size == 0 && free_i < 0)
			free_i = (int)i;
	}
	if (free_i < 0)
		return -ENOSPC;
	struct emb_class *c = &s->sb->classes[free_i];
	volatile int ret = 0;
	META_TX(s) {
		pmemobj_tx_add_range_direct(c, sizeof(*c));
		uint32_t n;
		c->slot_size = ss;
		slab_geometry(ss, &c->slab_size, &n);
		c->head = 0;
		c->nslabs = 0;
		super_seal_tx(s);
	} META_TX_END(s, ret);
	if (ret)
		return ret;
	s->cls[free_i].slot_size = ss;
	*cls = (uint32_t)free_i;
	return 0;
}

/* Find or create the class whose slots fit row_size.  space_lock held. */
static int class_for_locked(struct store *s, uint32_t row_size, uint32_t *cls)
{
	return class_of_slot_locked(s, slab_row_slot(row_size), cls);
}

/* Row-version slab bytes (every class but the stubs').  space_lock held. */
static uint64_t row_slab_bytes(struct store *s)
{
	uint64_t b = 0;
	for (uint32_t i = 0; i < EMB_MAX_CLASSES; i++) {
		struct emb_class *pc = &s->sb->classes[i];
		if (pc->slot_size && pc->slot_size != EMB_SMALL_SLOT)
			b += pc->nslabs * ((uint64_t)pc->slab_size + ALLOC_HDR);
	}
	return b;
}

static int by_addr_insert(struct store *s, struct sslab *sl)
{
	if (s->nby_addr == s->cap_by_addr) {
		size_t nc = s->cap_by_addr ? s->cap_by_addr * 2 : 64;
		struct sslab **p = realloc(s->by_addr, nc * sizeof(*p));
		if (!p)
			return -ENOMEM;
		s->by_addr = p;
		s->cap_by_addr = nc;
	}
	size_t i = s->nby_addr;
	while (i > 0 && s->by_addr[i - 1]->start > sl->start) {
		s->by_addr[i] = s->by_addr[i - 1];
		i--;
	}
	s->by_addr[i] = sl;
	s->nby_addr++;
	return 0;
}

static int class_push(struct store *s, uint32_t cls, struct emb_slab *h)
{
	struct sclass *c = &s->cls[cls];
	struct sslab *sl = calloc(1, sizeof(*sl));
	if (!sl)
		return -ENOMEM;
	sl->hdr = h;
	sl->cls = cls;
	sl->start = S_OFF(s, h) + h->data_off;
	sl->end = sl->start + (uint64_t)h->nslots * h->slot_size;
	size_t w = bm_words(h->nslots);
	sl->bm = malloc(w * 8);
	if (!sl->bm) {
		free(sl);
		return -ENOMEM;
	}
	uint32_t used = 0;
	for (size_t i = 0; i < w; i++) {
		sl->bm[i] = ld64(&h->bitmap[i]);
		used += (uint32_t)__builtin_popcountll(sl->bm[i]);
	}
	sl->nfree = h->nslots - used;
	if (c->n == c->cap) {
		size_t nc = c->cap ? c->cap * 2 : 16;
		struct sslab **p = realloc(c->slabs, nc * sizeof(*p));
		if (!p || by_addr_insert(s, sl)) {
			if (p)
				c->slabs = p;
			free(sl->bm);
			free(sl);
			return -ENOMEM;
		}
		c->slabs = p;
		c->cap = nc;
	} else if (by_addr_insert(s, sl)) {
		free(sl->bm);
		free(sl);
		return -ENOMEM;
	}
	c->slabs[c->n++] = sl;
	c->nfree += sl->nfree;
	c->nslots += h->nslots;
	return 0;
}

static int class_load(struct store *s, uint32_t cls)
{
	struct sclass *c = &s->cls[cls];
	if (c->loaded)
		return 0;
	c->slot_size = s->sb->classes[cls].slot_size;
	/* a load that stopped goes on where it stopped: the slabs before are in */
	for (uint64_t off = c->load_at ? c->load_at : s->sb->classes[cls].head; off;) {
		struct emb_slab *h = S_PTR(s, off);
		c->load_at = off;
		if (h->magic != EMB_SLAB_MAGIC || h->slot_size != c->slot_size)
			return -EIO;
		int ret = class_push(s, cls, h);
		if (ret)
			return ret;
		off = h->next;
	}
	c->load_at = 0;
	c->loaded = 1;
	return 0;
}

/* Rows promised in every row class (the small class's promises go with
 * them).  space_lock held. */
static uint64_t promised_rows(const struct store *s)
{
	uint64_t rows = 0;
	for (uint32_t i = 0; i < EMB_MAX_CLASSES; i++)
		if (s->cls[i].slot_size != EMB_SMALL_SLOT)
			rows += s->cls[i].promised;
	return rows;
}

static int slab_grow_once(struct store *s, uint32_t cls);

/* Allocate a new slab and link it at the head of the class, atomically; on
 * a full heap, first take back the index reserve kept beyond what the
 * promised rows need (resv.c).  A refusal of the heap's (not row_cap's) is
 * counted in heap_refusals.  space_lock held. */
static int slab_grow(struct store *s, uint32_t cls)
{
	uint64_t hits = s->row_cap_hits;
	int ret = slab_grow_once(s, cls);
	if (ret == -ENOSPC && !pm_failed(s) && resv_squeeze(s, promised_rows(s)) > 0)
		ret = slab_grow_once(s, cls);
	if (ret == -ENOSPC && s->row_cap_hits == hits)
		atomic_fetch_add(&s->heap_refusals, 1);
	return ret;
}

static int slab_grow_once(struct store *s, uint32_t cls)
{
	struct emb_class *pc = &s->sb->classes[cls];
	struct emb_slab *volatile h = NULL;
	volatile int ret = 0;
	uint32_t ss = pc->slot_size, alloc, n;
	slab_geometry(ss, &alloc, &n);
	/* with a spill device, row versions keep to their share of the pool */
	if (s->row_cap && ss != EMB_SMALL_SLOT && row_slab_bytes(s) + alloc + ALLOC_HDR > s->row_cap) {
		s->row_cap_hits++;
		return -ENOSPC;
	}

	META_TX(s) {
		PMEMoid o = pmemobj_tx_zalloc(alloc, 0);
		char *raw = pmemobj_direct(o);
		h = (struct emb_slab *)(((uintptr_t)raw + 63) & ~(uintptr_t)63);
		h->magic = EMB_SLAB_MAGIC;
		h->slot_size = ss;
		h->nslots = n;
		h->next = pc->head;
		h->data_off = data_off_for(n);
		h->raw_off = o.off;
		pmemobj_persist(s->pop, h, sizeof(*h));
		pmemobj_tx_add_range_direct(pc, sizeof(*pc));
		pc->head = S_OFF(s, h);
		pc->nslabs++;
		super_seal_tx(s);
	} META_TX_END(s, ret);
	if (ret)
		return ret;
	return class_push(s, cls, h);
}

/* A free slot holds nothing a row can refer to: zeros (never used: slabs
 * are allocated zeroed) or a poisoned key (row id all ones: freed, or taken
 * back unused). */
static int slot_unused(const struct store *s, uint64_t off)
{
	const struct emb_version *v = S_PTR(s, off);
	uint64_t key = ld64(&v->key);
	return (key & EMB_ROW_ID_MASK) == EMB_ROW_ID_MASK || (key == 0 && v->batch_lo == 0 && v->csum == 0);
}

static int alloc_locked(struct store *s, uint32_t cls, uint64_t *off)
{
	struct sclass *c = &s->cls[cls];
	int ret = class_load(s, cls);
	if (ret)
		return ret;
again:
	for (size_t k = 0; k < c->n; k++) {
		size_t at = (c->cursor + k) % c->n;
		struct sslab *sl = c->slabs[at];
		if (sl->nfree == 0)
			continue;
		size_t w = bm_words(sl->hdr->nslots);
		for (size_t i = 0; i < w; i++) {
			if (sl->bm[i] == ~0ull)
				continue;
			unsigned b = (unsigned)__builtin_ctzll(~sl->bm[i]);
			uint64_t slot = i * 64 + b;
			if (slot >= sl->hdr->nslots)
				break;
			sl->bm[i] |= 1ull << b;
			sl->nfree--;
			c->nfree--;
			c->cursor = at;
			*off = sl->start + slot * c->slot_size;
			if (slot_unused(s, *off))
				return 0;
			csum_error(s); /* its bit was lost: kept out of use */
			goto again;
		}
		c->nfree -= sl->nfree; /* only tail bits past nslots were clear */
		sl->nfree = 0;
	}
	ret = slab_grow(s, cls);
	if (ret)
		return ret;
	c->cursor = c->n - 1;
	return alloc_locked(s, cls, off);
}

static struct sslab *slab_of(struct store *s, uint64_t off, uint64_t *slot)
{
	size_t lo = 0, hi = s->nby_addr;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		struct sslab *sl = s->by_addr[mid];
		if (off < sl->start)
			hi = mid;
		else if (off >= sl->end)
			lo = mid + 1;
		else {
			*slot = (off - sl->start) / sl->hdr->slot_size;
			return sl;
		}
	}
	return NULL;
}

/* Read in every class.  space_lock held. */
static int load_all_locked(struct store *s)
{
	for (uint32_t i = 0; i < EMB_MAX_CLASSES; i++)
		if (s->sb->classes[i].slot_size) {
			int ret = class_load(s, i);
			if (ret)
				return ret;
		}
	return 0;
}

/* The slab of off must be loaded; versions are freed only in classes that
 * allocated (and hence loaded) or by recovery, which loads all classes. */
static struct sslab *slab_of_loaded(struct store *s, uint64_t off, uint64_t *slot)
{
	struct sslab *sl = slab_of(s, off, slot);
	if (sl)
		return sl;
	if (load_all_locked(s))
		return NULL;
	return slab_of(s, off, slot);
}

static void give_back(struct store *s, struct sslab *sl, uint64_t slot)
{
	uint64_t bit = 1ull << (slot % 64);
	if (sl->bm[slot / 64] & bit) {
		sl->bm[slot / 64] &= ~bit;
		sl->nfree++;
		s->cls[sl->cls].nfree++;
	}
}

int slab_class_small(struct store *s, uint32_t *cls)
{
	pthread_mutex_lock(&s->space_lock);
	int ret = class_of_slot_locked(s, EMB_SMALL_SLOT, cls);
	pthread_mutex_unlock(&s->space_lock);
	return ret;
}

/* Bytes of row-version slots used or promised (slab_row_usage's *used). */
uint64_t slab_row_used(struct store *s)
{
	uint64_t used, slabs, nv;
	slab_row_usage(s, &used, &slabs, &nv);
	return used;
}

/* Row-version slots used or promised, and the slab bytes they live in. */
void slab_row_usage(struct store *s, uint64_t *used, uint64_t *slab_bytes, uint64_t *versions)
{
	*used = *versions = 0;
	pthread_mutex_lock(&s->space_lock);
	for (uint32_t i = 0; i < EMB_MAX_CLASSES; i++) {
		struct sclass *c = &s->cls[i];
		if (!c->loaded || c->slot_size == EMB_SMALL_SLOT)
			continue;
		uint64_t u = c->nslots > c->nfree ? c->nslots - c->nfree : 0;
		*versions += u;
		*used += (u + c->promised) * c->slot_size;
	}
	*slab_bytes = row_slab_bytes(s);
	pthread_mutex_unlock(&s->space_lock);
}

int slab_class_for(struct store *s, uint32_t row_size, uint32_t *cls)
{
	pthread_mutex_lock(&s->space_lock);
	int ret = class_for_locked(s, row_size, cls);
	pthread_mutex_unlock(&s->space_lock);
	return ret;
}

int slab_alloc(struct store *s, uint32_t cls, uint64_t *off)
{
	pthread_mutex_lock(&s->space_lock);
	int ret = alloc_locked(s, cls, off);
	pthread_mutex_unlock(&s->space_lock);
	return ret;
}

int slab_load_all(struct store *s)
{
	pthread_mutex_lock(&s->space_lock);
	int ret = load_all_locked(s);
	pthread_mutex_unlock(&s->space_lock);
	return ret;
}

/* Take back a slot handed out and never published.  What was written into
 * it is poisoned, so that slot_unused sees it free; not after a failed
 * barrier, when the journal may still publish it at the next mount (the
 * pool takes no more changes meanwhile). */
void slab_unreserve(struct store *s, uint64_t off)
{
	uint64_t slot;
	if (!pm_failed(s))
		ver_poison(s, off);
	pthread_mutex_lock(&s->space_lock);
	struct sslab *sl = slab_of_loaded(s, off, &slot);
	if (sl)
		give_back(s, sl, slot);
	pthread_mutex_unlock(&s->space_lock);
}

#define BITS_BLOCK 64 /* slots whose bitmap words are loading together */

/* The PMem bits of slots off[0..n) on (set) or off, each bitmap line
 * flushed once after a run of changes in it; off, also the DRAM bits
 * (give_back).  Keeps in off[] the k offsets that are slots and returns k.
 * A flush takes the line out of the cache, so a flush per slot made the
 * next slot's bit in that line a miss; and the words are loaded a block
 * ahead.  space_lock held. */
static size_t bits_locked(struct store *s, uint64_t *off, size_t n, int set)
{
	struct sslab *sl[BITS_BLOCK];
	uint64_t slot[BITS_BLOCK];
	uint64_t *last = NULL; /* the word changed last, its line not flushed yet */
	size_t k = 0;
	for (size_t b = 0; b < n; b += BITS_BLOCK) {
		size_t m = n - b < BITS_BLOCK ? n - b : BITS_BLOCK;
		for (size_t j = 0; j < m; j++)
			if ((sl[j] = slab_of_loaded(s, off[b + j], &slot[j])) != NULL)
				prefetch_l2(&sl[j]->hdr->bitmap[slot[j] / 64]);
		for (size_t j = 0; j < m; j++) {
			if (!sl[j])
				continue;
			uint64_t bit = 1ull << (slot[j] % 64);
			uint64_t *w = &sl[j]->hdr->bitmap[slot[j] / 64];
			if (last && (uintptr_t)last / 64 != (uintptr_t)w / 64)
				pm_flush(s, last, 8);
			last = w;
			if (set ? !(*w & bit) : !!(*w & bit))
				st64(w, set ? *w | bit : *w & ~bit);
			if (!set) {
				give_back(s, sl[j], slot[j]);
				if (sl[j]->nfree == sl[j]->hdr->nslots)
					s->cls[sl[j]->cls].trim = 1; /* slab_trim looks at it */
			}
			off[k++] = off[b + j];
		}
	}
	if (last)
		pm_flush(s, last, 8);
	return k;
}

/* commit_lock held. */
void slab_mark(struct store *s, uint64_t off)
{
	slab_mark_all(s, &off, 1);
}

/* One hold of space_lock for all (a mutex is a fence, which waits for the
 * flushes before it).  commit_lock held. */
void slab_mark_all(struct store *s, uint64_t *off, size_t n)
{
	pthread_mutex_lock(&s->space_lock);
	bits_locked(s, off, n, 1);
	pthread_mutex_unlock(&s->space_lock);
}

/* commit_lock held. */
int slab_free(struct store *s, uint64_t off)
{
	return slab_free_all(s, &off, 1) == 1;
}

size_t slab_free_all(struct store *s, uint64_t *off, size_t n)
{
	pthread_mutex_lock(&s->space_lock);
	size_t k = bits_locked(s, off, n, 0);
	pthread_mutex_unlock(&s->space_lock);
	return k;
}

size_t slab_keep_all(struct store *s, uint64_t *off, size_t n)
{
	pthread_mutex_lock(&s->space_lock);
	for (size_t i = 0; i < n; i++) {
		uint64_t slot;
		struct sslab *sl = slab_of_loaded(s, off[i], &slot);
		if (sl && !(sl->bm[slot / 64] & 1ull << (slot % 64))) { /* alloc_locked may have kept it already */
			sl->bm[slot / 64] |= 1ull << (slot % 64);
			sl->nfree--;
			s->cls[sl->cls].nfree--;
		}
	}
	size_t k = bits_locked(s, off, n, 1);
	pthread_mutex_unlock(&s->space_lock);
	return k;
}

/* Slots a class keeps unpromised: one commit's worth of copy-on-write (the
 * small class: a tombstone and a link per row). */
static uint64_t cow_headroom(uint32_t slot_size)
{
	if (slot_size == EMB_SMALL_SLOT)
		return 2 * EMB_JOURNAL_CAP;
	uint64_t n = (4ull << 20) / slot_size;
	return n > EMB_JOURNAL_CAP ? EMB_JOURNAL_CAP : n < 16 ? 16 : n;
}

size_t slab_commit_rows(struct store *s, uint32_t cls)
{
	return (size_t)cow_headroom(s->cls[cls].slot_size ? s->cls[cls].slot_size : s->sb->classes[cls].slot_size);
}

int slab_ensure(struct store *s, uint32_t cls, uint64_t need, int promised)
{
	pthread_mutex_lock(&s->space_lock);
	struct sclass *c = &s->cls[cls];
	int ret = class_load(s, cls);
	/* rows not promised keep clear of the promises and their headroom */
	uint64_t keep = promised || !c->promised ? 0 : c->promised + cow_headroom(c->slot_size);
	while (!ret && c->nfree < need + keep)
		ret = slab_grow(s, cls);
	pthread_mutex_unlock(&s->space_lock);
	return ret;
}

/* Grow class cls until it has room for `more` promised slots beyond its
 * promises and headroom.  space_lock held. */
static int promise_room(struct store *s, uint32_t cls, uint64_t more)
{
	struct sclass *c = &s->cls[cls];
	int ret = 0;
	while (!ret && c->nfree < c->promised + more + cow_headroom(c->slot_size))
		ret = slab_grow(s, cls);
	return ret;
}

int slab_promise(struct store *s, uint32_t id, uint32_t row_size, int64_t n, int links)
{
	uint32_t cls, scls;
	if (id >= EMB_NTABLES)
		return -EINVAL;
	pthread_mutex_lock(&s->space_lock);
	struct tprom *tp = &s->prom[id];
	int ret = class_for_locked(s, row_size, &cls);
	if (!ret)
		ret = class_of_slot_locked(s, EMB_SMALL_SLOT, &scls);
	if (!ret)
		ret = class_load(s, cls);
	if (!ret)
		ret = class_load(s, scls);
	if (ret)
		goto out;
	struct sclass *c = &s->cls[cls], *sc = &s->cls[scls];
	uint64_t rows = promised_rows(s);
	if (n < 0) {
		uint64_t k = (uint64_t)-n > tp->rows ? tp->rows : (uint64_t)-n;
		uint64_t kl = k > tp->links ? tp->links : k;
		tp->rows -= k;
		tp->links -= kl;
		c->promised -= k > c->promised ? c->promised : k;
		sc->promised -= kl > sc->promised ? sc->promised : kl;
		resv_trim(s, rows > k ? rows - k : 0);
		goto out;
	}
	ret = promise_room(s, cls, (uint64_t)n);
	if (!ret && links)
		ret = promise_room(s, scls, (uint64_t)n);
	if (!ret)
		ret = resv_hold(s, rows + (uint64_t)n);
	if (!ret) {
		c->promised += (uint64_t)n;
		tp->rows += (uint64_t)n;
		if (links) {
			sc->promised += (uint64_t)n;
			tp->links += (uint64_t)n;
		}
	}
out:
	pthread_mutex_unlock(&s->space_lock);
	return ret;
}

int slab_promise_links(struct store *s, uint32_t id)
{
	uint32_t scls;
	if (id >= EMB_NTABLES)
		return -EINVAL;
	pthread_mutex_lock(&s->space_lock);
	struct tprom *tp = &s->prom[id];
	uint64_t need = tp->rows - tp->links;
	int ret = 0;
	if (need) {
		ret = class_of_slot_locked(s, EMB_SMALL_SLOT, &scls);
		if (!ret)
			ret = class_load(s, scls);
		if (!ret)
			ret = promise_room(s, scls, need);
		if (!ret) {
			s->cls[scls].promised += need;
			tp->links = tp->rows;
		}
	}
	pthread_mutex_unlock(&s->space_lock);
	return ret;
}

/* The row slab with the fewest versions whose free slots the class can do
 * without (promises and copy-on-write headroom stay covered), or NULL.
 * Its used slot offsets go to *used.  commit_lock held. */
struct sslab *slab_pick_victim(struct store *s, struct u64vec *used)
{
	struct sslab *best = NULL;
	pthread_mutex_lock(&s->space_lock);
	for (uint32_t i = 0; i < EMB_MAX_CLASSES; i++) {
		struct sclass *c = &s->cls[i];
		if (!c->loaded || c->slot_size == EMB_SMALL_SLOT || c->n < 2)
			continue;
		for (size_t k = 0; k < c->n; k++) {
			struct sslab *sl = c->slabs[k];
			if (!sl->hdr->raw_off)
				continue;
			if (c->nfree - sl->nfree < c->promised + cow_headroom(c->slot_size))
				continue;
			if (!best || sl->hdr->nslots - sl->nfree < best->hdr->nslots - best->nfree)
				best = sl;
		}
	}
	used->n = 0;
	for (uint32_t k = 0; best && k < best->hdr->nslots; k++)
		if ((best->bm[k / 64] >> (k % 64)) & 1)
			u64vec_push(used, best->start + (uint64_t)k * best->hdr->slot_size);
	pthread_mutex_unlock(&s->space_lock);
	return best;
}

/* Give empty slab sl back to libpmemobj.  shrink_cap: keep row versions to
 * what is left (row_cap shrinks to the row slabs' bytes: the mover's
 * shrink_rows).  space_lock held. */
static int give_back_locked(struct store *s, struct sslab *sl, int shrink_cap)
{
	volatile int ret = 0;
	struct sclass *c = &s->cls[sl->cls];
	struct emb_class *pc = &s->sb->classes[sl->cls];
	if (sl->nfree != sl->hdr->nslots)
		return -EBUSY;
	uint64_t off = S_OFF(s, sl->hdr);
	uint64_t *link = &pc->head;
	while (*link && *link != off)
		link = &((struct emb_slab *)S_PTR(s, *link))->next;
	if (!*link)
		return -EIO;
	uint64_t *volatile lp = link;
	META_TX(s) {
		pmemobj_tx_add_range_direct(lp, 8);
		pmemobj_tx_add_range_direct(&pc->nslabs, 8);
		*lp = sl->hdr->next;
		pc->nslabs--;
		super_seal_tx(s);
		pmemobj_tx_free(pmemobj_oid(S_PTR(s, sl->hdr->raw_off)));
	} META_TX_END(s, ret);
	if (ret)
		return ret;
	c->nfree -= sl->nfree;
	c->nslots -= sl->hdr->nslots;
	size_t k = 0;
	while (k < c->n && c->slabs[k] != sl)
		k++;
	memmove(&c->slabs[k], &c->slabs[k + 1], (c->n - k - 1) * sizeof(c->slabs[0]));
	c->n--;
	c->cursor = 0;
	k = 0;
	while (k < s->nby_addr && s->by_addr[k] != sl)
		k++;
	memmove(&s->by_addr[k], &s->by_addr[k + 1], (s->nby_addr - k - 1) * sizeof(s->by_addr[0]));
	s->nby_addr--;
	uint64_t rows = row_slab_bytes(s);
	if (shrink_cap && s->row_cap > rows)
		s->row_cap = rows;
	free(sl->bm);
	free(sl);
	return 0;
}

int slab_give_back(struct store *s, struct sslab *sl)
{
	pthread_mutex_lock(&s->space_lock);
	int ret = give_back_locked(s, sl, 1);
	pthread_mutex_unlock(&s->space_lock);
	return ret;
}

/* A class keeps the free slots its promises and its copy-on-write headroom
 * need and one slab more; empty slabs beyond that go back to the heap, so
 * that what a deleted table held serves any class, the index and its
 * reserve again (a pool filled, emptied and filled again takes as much the
 * second time).  Slabs that slab_free emptied are looked at here, after
 * the change that freed their slots is over (freed slots are poisoned
 * after slab_free: their slab must still be there).  commit_lock held. */
void slab_trim(struct store *s)
{
	pthread_mutex_lock(&s->space_lock);
	for (uint32_t i = 0; i < EMB_MAX_CLASSES; i++) {
		struct sclass *c = &s->cls[i];
		if (!c->trim)
			continue;
		c->trim = 0;
		for (size_t k = c->n; k-- > 0;) {
			struct sslab *sl = c->slabs[k];
			uint64_t keep = c->promised + cow_headroom(c->slot_size) + sl->hdr->nslots;
			if (sl->nfree == sl->hdr->nslots && sl->hdr->raw_off && c->nfree >= keep + sl->hdr->nslots &&
			    give_back_locked(s, sl, 0))
				break; /* kept on failure */
		}
	}
	pthread_mutex_unlock(&s->space_lock);
}

static int class_bad(char *err, size_t n, uint32_t i, uint32_t ss, uint64_t k, const char *why)
{
	return store_err(err, n, -EIO, "slab class %u (%u-byte slots) is damaged: slab %llu: %s", i, ss,
			 (unsigned long long)k, why);
}

int slab_check(struct store *s, char *err, size_t n)
{
	for (uint32_t i = 0; i < EMB_MAX_CLASSES; i++) {
		const struct emb_class *pc = &s->sb->classes[i];
		uint32_t ss = pc->slot_size, alloc, nslots;
		if (!ss)
			continue;
		if (ss < EMB_SMALL_SLOT || ss > slab_row_slot(EMB_ROW_MAX) || ss % 8 ||
		    (ss != EMB_SMALL_SLOT && ss < slab_row_slot(1)))
			return class_bad(err, n, i, ss, 0, "slot size");
		for (uint32_t k = 0; k < i; k++)
			if (s->sb->classes[k].slot_size == ss)
				return class_bad(err, n, i, ss, 0, "two classes of one slot size");
		slab_geometry(ss, &alloc, &nslots);
		if (pc->slab_size != alloc)
			return class_bad(err, n, i, ss, 0, "slab size");
		uint64_t k = 0;
		for (uint64_t off = pc->head; off; k++) {
			if (k >= pc->nslabs)
				return class_bad(err, n, i, ss, k, "more slabs than the class counts");
			if (!pool_range_ok(s, off, sizeof(struct emb_slab), 64))
				return class_bad(err, n, i, ss, k, "outside the pool");
			const struct emb_slab *h = S_PTR(s, off);
			if (h->magic != EMB_SLAB_MAGIC || h->slot_size != ss || h->nslots != nslots ||
			    h->data_off != data_off_for(nslots) || off - h->raw_off >= 64 ||
			    !pool_range_ok(s, off, h->data_off + (uint64_t)nslots * ss, 64))
				return class_bad(err, n, i, ss, k, "header");
			off = h->next;
		}
		if (k != pc->nslabs)
			return class_bad(err, n, i, ss, k, "fewer slabs than the class counts");
	}
	return resv_check(s, err, n);
}

void slab_release_all(struct store *s)
{
	for (uint32_t i = 0; i < EMB_MAX_CLASSES; i++) {
		struct sclass *c = &s->cls[i];
		for (size_t k = 0; k < c->n; k++) {
			free(c->slabs[k]->bm);
			free(c->slabs[k]);
		}
		free(c->slabs);
		memset(c, 0, sizeof(*c));
	}
	free(s->by_addr);
	s->by_addr = NULL;
	s->nby_addr = s->cap_by_addr = 0;
}

/* Slab bytes from the superblock; free (unpromised) slot bytes of every
 * class (each read in first, if no use since the mount has). */
void slab_usage(struct store *s, uint64_t *slab_bytes, uint64_t *free_slot_bytes, uint64_t *nslabs)
{
	*slab_bytes = *free_slot_bytes = *nslabs = 0;
	pthread_mutex_lock(&s->space_lock);
	/* a class is read in at its first use after a mount; free space counts
	 * the free slots of every class (a failure to read one, a damaged
	 * slab, leaves its free slots out) */
	(void)load_all_locked(s);
	for (uint32_t i = 0; i < EMB_MAX_CLASSES; i++) {
		struct emb_class *pc = &s->sb->classes[i];
		if (!pc->slot_size)
			continue;
		*slab_bytes += pc->nslabs * ((uint64_t)pc->slab_size + ALLOC_HDR);
		*nslabs += pc->nslabs;
		struct sclass *c = &s->cls[i];
		if (c->nfree > c->promised)
			*free_slot_bytes += (c->nfree - c->promised) * c->slot_size;
	}
	pthread_mutex_unlock(&s->space_lock);
}

/* libpmemobj's own metadata: ~3 MiB of lanes, chunk headers (1/32768 of
 * the heap) and the chunks its small-object runs hold back; measured as about
 * 10 MiB on a fresh pool, most of it independent of the size. */
uint64_t pool_heap_capacity(const struct store *s)
{
	uint64_t meta = (10ull << 20) + s->map_len / 4096;
	return s->map_len > meta ? s->map_len - meta : 0;
}
