/*
 * Private to store/: the open-pool state shared by its files, and each
 * file's functions that others call.  Files call down only, in this order
 * from the top (a file calls files below it):
 *
 *   pool.c      mkfs, check (in a child process), open and recovery, close, stats
 *   repair.c    repairs of a pool that fails validation (fsck.embfs)
 *   fsck.c      the deep check and its repairs (tests, fsck.embfs)
 *   seek.c      SEEK_DATA/SEEK_HOLE over a view
 *   tablife.c   truncate, geometry, release, their recovery
 *   view.c      read views: live tables and snapshots, one path
 *   commit.c    group commit of row updates
 *   snaprec.c   snapshot records
 *   reclaim.c   freeing what no snapshot needs
 *   read.c      the one read path (pool, and the tier for spilled rows)
 *   catalog.c   tables: names, slots, attributes
 *   tier/       the spill tier, through tier/tier.h: called by the files
 *               above, it calls only those below
 *   version.c   version chains: walks, slot frees
 *   index.c     the row index: lookups, claims, entries, walks (index_int.h)
 *   indexdir.c  ... its structure: directory and segments, growth, destroy
 *   vcheck.c    row versions and links: checksums, validated access
 *   slab.c      row-version slots
 *   resv.c      the index-room reserve
 *   journal.c   the intent journal
 *   meta.c      metadata checksums
 *   dirs.c      directory times, owners and modes
 *   intent.c    a restore or rollback in progress (the superblock's record)
 *   snapset.c   the live snapshot set
 *   pm.c        persistence, the pool's failure
 *   util.c      errors, clock
 *
 * The spill tier is in tier/ (its files: tier/tier.h).  The core calls it
 * through tier/tier.h only; its background jobs (tier/mover.c, eviction and
 * compaction) call the index, chain, slab and journal functions of this
 * header that the files below it in the list define, and commit their own
 * changes of the index (tier/evict.c, the relink in tier/mover.c).
 *
 * Lock order (take them in this order, release in any; never call up into a
 * lock taken earlier in the list while holding a later one):
 *
 *   sp->bulk_mu        the open bulk-load run (tier/bulk.c): taken only at the
 *                      store's entry points, before any other store lock
 *   sp->round_lock     one spill mover round at a time (tier/spill.h): the open
 *                      segment, the mover's cursors and buffers
 *   commit_lock        journal, index structure, PMem slab bitmaps, spill
 *                      segment table (state, fill, live; the mover writes
 *                      to the device without it and takes what it wrote
 *                      into the fill under it); held across a whole commit
 *                      group
 *   snap_lock          the live snapshot set; its count n_live is also
 *                      stored atomically, for store_space_links, which
 *                      reads it unlocked.  Commits hold it shared (a
 *                      direct group throughout, a write-back group a slice
 *                      at a time).  It prefers writers, so that mkdir is not
 *                      starved by slices taken back to back: no thread may
 *                      take it shared twice (a waiting writer would block
 *                      the second hold, and the first would never go)
 *   cat_lock           catalog entries, the name hash, s->tab.  An
 *                      entry's flags change with commit_lock held too (the
 *                      store's walks read them under commit_lock), its
 *                      index fields (dir_off, nsegs, free_at) under
 *                      commit_lock alone; its row count and size are
 *                      read and written atomically (ld64, st64)
 *   st->seek_lock      a table's sorted-key caches
 *   st->lock           a table's index: readers shared, publish/split exclusive
 *   space_lock         DRAM slab state and promises; the index-room reserve
 *   meta_lock          around a transaction that reseals checksummed metadata
 *                      (superblock, catalog entry, reserve, snapshot record)
 *   sp->mu, ring locks spill mover state, io_uring rings (leaves)
 *   sp->run_lock       the run lists (a leaf; the lists change under
 *                      commit_lock too); a run's load_mu inside it
 *   sp->ra_mu          the read-ahead windows of runs (run.c; a leaf: taken
 *                      with no store lock held, by readers and the
 *                      read-ahead thread)
 *   perm_lock          the directories' permission records (dirs.c): taken
 *                      alone
 *
 * store_table_set_geometry once took cat_lock before snap_lock while
 * store_snap_create took them the other way: that deadlocked the mount.
 */
#ifndef EMBFS_STORE_INT_H
#define EMBFS_STORE_INT_H

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <libpmemobj.h>

#include "embfs/store.h"
#include "store_test.h"

#define EMB_NTABLES (EMB_CAT_PER_CHUNK * EMB_CAT_CHUNKS)
#define EMB_NONE UINT64_MAX

/* DRAM state of one slab (see slab.c). */
struct sslab {
	struct emb_slab *hdr;
	uint64_t start, end;   /* pool offsets of slot 0 and one past the last slot */
	uint64_t *bm;          /* DRAM copy of the bitmap, plus slots handed out but not yet journaled */
	uint32_t nfree;
	uint32_t cls;
};

struct sclass {
	uint32_t slot_size;
	int loaded;            /* slabs of this class read in */
	uint64_t load_at;      /* a load that stopped (a damaged slab, ENOMEM): the slab it stopped at */
	uint64_t nfree;        /* free slots over all its slabs */
	uint64_t nslots;       /* slots of all its slabs */
	uint64_t promised;     /* slots promised to rows not yet written */
	int trim;              /* a slab of it became empty (slab_trim) */
	struct sslab **slabs;
	size_t n, cap, cursor;
};

/* Sorted ids of the rows a view sees (seek.c); valid while tag matches. */
struct seek_keys {
	uint64_t *v;
	size_t n;
	uint64_t *rg;          /* [lo, hi) pairs of rows the runs may hold (taken as data) */
	size_t nrg;            /* pairs */
	uint64_t tag;          /* the live view's st->mod, or the snapshot's generation */
};

/* DRAM state of one table. */
struct stable {
	uint32_t id;
	struct emb_table *t;   /* in PMem */
	pthread_rwlock_t lock; /* readers of the index; taken exclusive to publish and to split */
	uint32_t gd;           /* DRAM mirror of the directory; protected by lock */
	struct emb_seg **segs;
	uint64_t mod;          /* bumped when the set of stored rows changes; protected by lock */
	pthread_mutex_t seek_lock;
	struct seek_keys live_keys, snap_keys; /* protected by seek_lock */
	struct stable *name_next; /* name hash chain; protected by cat_lock */
	_Atomic uint64_t run_live;  /* records in its sorted runs that are not tombstones (run.c) */
	_Atomic uint64_t part_live; /* ... of them in a sweep's parts (tier/runsweep.c) */
	/* index.c: buckets whose miss check passed (bucket_check_memo); made
	 * by readers, freed with segs (st->lock exclusive) */
	_Atomic(_Atomic uint32_t *) vmemo;
	/* index.c: which 64-row chunks hold index entries (the key filter);
	 * built by a reader (kf_mu), kept by writers (st->lock exclusive) */
	_Atomic(struct kfilter *) kf;
	pthread_mutex_t kf_mu;
};

/*
 * The open pool.  Fields are grouped by the file that owns them (writes
 * them); each group names its lock.  Anonymous structs: fields are reached
 * as s->field.
 */
struct store {
	struct { /* pool.c: set at open, read-only afterwards (recovered: at open only) */
		PMEMobjpool *pop;
		char *base;
		uint64_t map_len;
		int is_pmem;
		int recovered;           /* mount found an unclean shutdown */
		int no_verify;           /* EMBFS_VERIFY=0 in a test build: reads skip the bytes' digest (pool.c) */
		struct emb_super *sb;
		struct emb_journal *jr;
		/* libpmemobj allocation classes of index objects: runs of one
		 * chunk, so a chunk the index-room reserve gives back serves them */
		uint64_t xa_seg, xa_seg_large; /* POBJ_CLASS_ID flags of small and large index segments */
		uint64_t xa_dir[EMB_MAX_DEPTH + 1]; /* ... of a directory of depth d (0: default class) */
	};
	struct { /* the locks (order: top of this file) */
		pthread_mutex_t commit_lock; /* journal, index structure, PMem slab bitmaps, spill segment table */
		pthread_rwlock_t cat_lock;   /* catalog and the name hash */
		pthread_mutex_t space_lock;  /* DRAM slab state, promises, the index-room reserve */
		/* held around every transaction that changes a checksummed
		 * structure (superblock dynamic part, catalog entry, snapshot
		 * record, index reserve): their checksums are recomputed in it */
		pthread_mutex_t meta_lock;
		/* the root's and .snapshots' permission records (dirs.c): held
		 * across the transaction that writes one and to read one; taken
		 * alone, never with another lock (not meta_lock: a getattr of the
		 * root must not wait for a commit's transaction) */
		pthread_mutex_t perm_lock;
	};
	struct { /* catalog.c: protected by cat_lock */
		struct stable **tab;     /* by catalog slot (read lock-free with tab_get) */
		struct stable **names;   /* name hash buckets */
		size_t nnames;
	};
	struct { /* slab.c: protected by space_lock */
		struct sclass cls[EMB_MAX_CLASSES];
		struct sslab **by_addr;  /* all loaded slabs sorted by start */
		size_t nby_addr, cap_by_addr;
		uint64_t row_cap;        /* with a spill tier: slab bytes row versions may take (device.c sets it) */
		uint64_t row_cap_hits;   /* slab growths refused by row_cap */
		/* slab, index and index-reserve growths the heap itself refused (not
		 * row_cap): what tells the spill mover that giving a row slab
		 * back to the heap can help (mover.c); also read without the lock */
		_Atomic uint64_t heap_refusals;
	};
	struct { /* slab.c: promises per table (by catalog slot), protected by
		  * space_lock: rows, and of them those promised a link too */
		struct tprom {
			uint64_t rows, links;
		} *prom;
	};
	struct { /* resv.c: protected by space_lock */
		uint64_t resv_keep;    /* the largest target asked for lately ... */
		uint64_t resv_keep_ns; /* ... and when: kept for RESV_LINGER_NS */
	};
	struct { /* index.c: atomic; the reserve's size (resv.c) follows them */
		_Atomic uint64_t idx_segs;      /* index segments of every table */
		_Atomic uint64_t idx_large;     /* ... of them large ones (grown in place) */
		_Atomic uint64_t idx_dir_bytes; /* bytes of their directories */
	};
	struct { /* snaprec.c (records) and snapset.c (the live set): protected by snap_lock */
		struct emb_snaps *snaps;
		pthread_rwlock_t snap_lock;     /* commits hold it shared */
		uint64_t live_batch[EMB_MAX_SNAPS]; /* batches of live (not dropping) snapshots, sorted */
		uint32_t live_idx[EMB_MAX_SNAPS];   /* their record index, same order */
		uint32_t n_live;                    /* also stored atomically: store_space_links reads it unlocked */
		/* the table arrays of EMB_S_PENDING records, until they are made
		 * durable; written under snap_lock exclusive */
		struct emb_snap_table *pend_tables[EMB_MAX_SNAPS];
		uint64_t snap_gen;              /* the last generation handed out */
	};
	struct { /* counters, atomic: commit.c, pm.c, read.c, util.c */
		_Atomic uint64_t n_commits, n_barriers, n_rows_written, n_rows_read;
		_Atomic uint64_t n_tx; /* libpmemobj transactions ended (pm_tx_end) */
		_Atomic uint64_t n_csum_errors;  /* damage found (version.c, index.c) */
	};
	struct { /* pm.c: the pool's failure (an msync failed) */
		_Atomic int failed;      /* errno; the pool is read-only from then on */
		_Atomic uint64_t msync_failures; /* failed msyncs of the pool's mapping (atomic) */
		_Atomic int msync_errno;         /* ... and the errno of the last one (atomic) */
		struct store *pm_next;   /* the open pools msync covers; protected by pm.c's pools_lock */
		char fail_why[160];      /* why, set once with failed */
	};
	struct spill *sp;                /* spill tier (tier/spill.h), NULL when none is attached (device.c) */
	struct store_test_spill test_spill; /* tier/mover.c: tests' hooks (store_test.h), read at attach */
};
static inline void *S_PTR(const struct store *s, uint64_t off)
{
	return off ? s->base + off : NULL;
}

static inline uint64_t S_OFF(const struct store *s, const void *p)
{
	return p ? (uint64_t)((const char *)p - s->base) : 0;
}

/* libpmemobj's pool header and descriptor: no embfs object starts below. */
#define EMB_HEAP_LO 8192u

/* [off, off + len) lies inside the pool mapping, past libpmemobj's pool
 * descriptor, and off is a multiple of align: safe to dereference. */
static inline int pool_range_ok(const struct store *s, uint64_t off, uint64_t len, uint64_t align)
{
	return off >= EMB_HEAP_LO && off % align == 0 && len <= s->map_len && off <= s->map_len - len;
}

/* Start loading p's line into L2 (prefetcht2), not L1: a group's prefetches
 * run ahead by dozens of rows, and into L1 they filled its miss buffers and
 * waited (docs/benchmarks.md, "Prefetches into L2"). */
static inline void prefetch_l2(const void *p)
{
	__builtin_prefetch(p, 0, 1);
}

static inline uint64_t ld64(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static inline void st64(uint64_t *p, uint64_t v)
{
	__atomic_store_n(p, v, __ATOMIC_RELEASE);
}

/* *p = max(*p, v), safe against concurrent raisers. */
static inline void max64(uint64_t *p, uint64_t v)
{
	uint64_t cur = ld64(p);
	while (cur < v && !__atomic_compare_exchange_n(p, &cur, v, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		;
}

/* ---- lanes.c --------------------------------------------------------- */
/* Before libpmemobj opens the pool file of size bytes: 0, or -EIO when its
 * lane recovery would apply an entry no transaction wrote (a damaged lane). */
int lanes_check(const char *path, uint64_t size, char *err, size_t n);

/* ---- util.c ---------------------------------------------------------- */
uint64_t now_ns(void);
/* Put a one-line reason in err (if err and n) and return code. */
int store_err(char *err, size_t n, int code, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Count one piece of damage found (pool.checksum_errors). */
void csum_error(struct store *s);

/* A growable array of uint64_t (row ids, offsets): zero-initialise, push,
 * free(v). */
struct u64vec {
	uint64_t *v;
	size_t n, cap;
};

/* Room for one more element in the growable array *pp holding n of *cap
 * (elements of elem bytes): doubled when full, first at first.  0, or
 * -ENOMEM with the array unchanged. */
static inline int arr_room(void *pp, size_t n, size_t *cap, size_t elem, size_t first)
{
	if (n < *cap)
		return 0;
	size_t nc = *cap ? 2 * *cap : first;
	void *p = realloc(*(void **)pp, nc * elem);
	if (!p)
		return -ENOMEM;
	*(void **)pp = p;
	*cap = nc;
	return 0;
}

static inline int u64vec_push(struct u64vec *a, uint64_t x)
{
	if (arr_room(&a->v, a->n, &a->cap, sizeof(*a->v), 1024))
		return -ENOMEM;
	a->v[a->n++] = x;
	return 0;
}

static inline int u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static inline void u64_sort(uint64_t *v, size_t n)
{
	if (n)
		qsort(v, n, sizeof(*v), u64_cmp);
}

/* Index of the first element >= x in sorted v[0..n) (n if none). */
static inline size_t u64_lower_bound(const uint64_t *v, size_t n, uint64_t x)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (v[mid] < x)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* ---- pm.c: persistence and the pool's failure -------------------------
 * flush records a range; barrier makes every flushed range (on PMem) or every
 * store to the mapping (otherwise) durable.  Barrier and persist return 0,
 * or -EIO once the pool file has failed a write-back: callers stop and pass
 * it up. */
void pm_flush(struct store *s, const void *addr, size_t len);
/* The largest row id of a table of row_size-byte rows (store_max_row): its
 * bytes' end fits an off_t, the id fits the version key. */
static inline uint64_t row_id_max(uint32_t row_size)
{
	uint64_t off_max = (uint64_t)INT64_MAX / (row_size ? row_size : 1) - 1;
	return off_max < EMB_ROW_ID_MAX ? off_max : EMB_ROW_ID_MAX;
}

/* Raise st's size to at least size and set mtime/ctime, without a commit:
 * durable with the next commit or barrier (store_table_extend, bulk loads). */
static inline void table_extend(struct store *s, struct stable *st, uint64_t size)
{
	uint64_t now = now_ns();
	max64(&st->t->size, size);
	st64(&st->t->mtime_ns, now);
	st64(&st->t->ctime_ns, now);
	pm_flush(s, st->t, 128);
}
int pm_barrier(struct store *s) __attribute__((warn_unused_result));
/* Durable by the next barrier of any thread, without waiting for the device
 * now: on PMem flushed and fenced here (cheap), on a plain file left to the
 * next msync, which covers the whole mapping. */
void pm_soon(struct store *s, const void *addr, size_t len);
int pm_persist(struct store *s, const void *addr, size_t len) __attribute__((warn_unused_result));
/* Around libpmemobj's open, create, check or close of a pool (the mapping
 * not known yet, or no more): the calling thread's failed msyncs are the
 * pool's (hidden from libpmemobj, which would abort; see pm.c). */
void pm_enter(void);
void pm_leave(void);
/* Once s->base and s->map_len are set: failed msyncs of that mapping, from
 * any thread, are s's (pm_failed).  pm_close closes s->pop and ends that. */
void pm_open(struct store *s);
void pm_close(struct store *s);
/* -EIO once the pool has failed (an msync failed), else 0. */
int pm_failed(struct store *s);
/* Refuse changes from now on (as a failed msync does), saying why. */
void pm_fail(struct store *s, int err, const char *why);
/* Before a change: 0, or -EROFS once the pool has failed. */
int pm_writable(struct store *s);
/* After a transaction that returned ret: ret, or -EIO if a persist inside it failed. */
int pm_tx_end(struct store *s, int ret);
/* libpmemobj's errno after a failed transaction, as -errno (ENOMEM: -ENOSPC). */
int pm_tx_errno(void);
/* A transaction of the pool, in the shape every metadata change takes:
 *
 *	volatile int ret = 0;
 *	META_TX(s) {
 *		pmemobj_tx_add_range_direct(...); ...
 *	} META_TX_END(s, ret);
 *
 * META_TX takes meta_lock and begins the transaction.  META_TX_END sets ret
 * to the abort's errno (pm_tx_errno), then to pm_tx_end's verdict, and drops
 * meta_lock.  PM_TX and PM_TX_END are the same for a caller that holds
 * meta_lock (or needs no other writer of the pool's metadata kept out).
 * ret is volatile, as libpmemobj asks of a local set inside a transaction
 * and read after it.  A body leaves only by falling off its end or by
 * pmemobj_tx_abort: never by return, break or goto. */
#define PM_TX(s) TX_BEGIN((s)->pop)
#define PM_TX_END(s, ret) \
	TX_ONABORT { (ret) = pm_tx_errno(); } TX_END (ret) = pm_tx_end((s), (ret))
#define META_TX(s) pthread_mutex_lock(&(s)->meta_lock); PM_TX(s)
#define META_TX_END(s, ret) PM_TX_END(s, ret); pthread_mutex_unlock(&(s)->meta_lock)

/* intent.c: 1 when a pending restore or rollback needs snapshot idx
 * (snap_lock held). */
int intent_pins(struct store *s, uint32_t idx);

/* ---- meta.c: checksums of metadata transactions change -----------------
 * The *_seal_tx functions run inside a transaction (meta_lock held), after
 * covered fields changed. */
uint64_t super_csum(const struct emb_super *sb);
uint64_t super_dyn_csum(const struct emb_super *sb);
void super_seal_tx(struct store *s);
/* The superblock's dynamic part and its offsets are sound (mount). */
int super_validate(struct store *s, char *err, size_t n);
uint64_t catalog_entry_csum(const struct emb_table *t);
void catalog_seal_tx(struct emb_table *t);

/* ---- journal.c: the intent journal (commit_lock held) ------------------ */
uint64_t journal_csum(const struct emb_journal *j, uint64_t count);
/* Sealed: records there, checksum matching (a replay is due). */
int journal_valid(const struct emb_journal *j);
int journal_seal(struct store *s, struct stable *st, uint32_t kind, uint64_t n, uint64_t size_hint)
	__attribute__((warn_unused_result));
int journal_clear(struct store *s) __attribute__((warn_unused_result));
/* The journal is sound: magic, empty after a clean unmount, sealed records
 * naming versions inside the pool (mount). */
int journal_check(struct store *s, char *err, size_t n);

/* ---- resv.c: the index-room reserve (takes or holds space_lock) -------- */
/* Run fn(arg) (an index allocation); while it fails with -ENOSPC, give one
 * block of the reserve back to the heap and run it again (takes space_lock). */
int resv_run(struct store *s, int (*fn)(void *), void *arg);
/* r->csum follows r->n and its blocks (a new pool's reserve). */
void resv_seal(struct emb_resv *r);
/* Hold back what `rows` promised rows may need (grow only), or give back
 * what `rows` no longer need (with hysteresis).  space_lock held. */
int resv_hold(struct store *s, uint64_t rows);
void resv_trim(struct store *s, uint64_t rows);
/* Give back what the reserve keeps only because it lingers (the heap is
 * full).  Returns the blocks given back.  space_lock held. */
uint64_t resv_squeeze(struct store *s, uint64_t rows);
/* The reserve's checksum and blocks are sound (mount). */
int resv_check(struct store *s, char *err, size_t n);

/* ---- slab.c: row-version slots (takes space_lock) ----------------------- */
/* The slot size of a row class: the version's (ver_slot_size), kept apart
 * from the small class's. */
uint32_t slab_row_slot(uint32_t row_size);
int slab_class_for(struct store *s, uint32_t row_size, uint32_t *cls);
int slab_class_small(struct store *s, uint32_t *cls);
int slab_alloc(struct store *s, uint32_t cls, uint64_t *off);
void slab_unreserve(struct store *s, uint64_t off);
/* PMem bit on / off, flushed (commit_lock held); free returns 1 if off is a slot. */
void slab_mark(struct store *s, uint64_t off);
int slab_free(struct store *s, uint64_t off);
/* The same for n slots under one hold of the space lock (one fence for a
 * commit's rows), each bitmap line flushed once; they keep in off[] the k
 * that are slots (free_all returns k). */
void slab_mark_all(struct store *s, uint64_t *off, size_t n);
size_t slab_free_all(struct store *s, uint64_t *off, size_t n);
/* fsck's repair of a lost bit: slots off[0..n) hold sound versions the
 * index refers to but are marked free; they become allocated in PMem and
 * in DRAM.  Keeps in off[] the k offsets that are slots and returns k.
 * commit_lock held. */
size_t slab_keep_all(struct store *s, uint64_t *off, size_t n);
void slab_release_all(struct store *s);
int slab_load_all(struct store *s);
/* Rows one commit may cover in class cls: its copy-on-write slots come out of
 * the class's headroom (at most EMB_JOURNAL_CAP). */
size_t slab_commit_rows(struct store *s, uint32_t cls);
/* Grow class cls until it has need free slots; promised: the slots are for
 * promised rows (else they must also leave the promises and headroom free).
 * 0 or -ENOSPC.  commit_lock held. */
int slab_ensure(struct store *s, uint32_t cls, uint64_t need, int promised);
/* n > 0: promise n slots of row_size's class for table id, and n of the
 * small class when links (see slab.c); n < 0: release.  The table's
 * promises are counted, so that a release gives back links exactly as far
 * as the table was promised them. */
int slab_promise(struct store *s, uint32_t id, uint32_t row_size, int64_t n, int links);
/* A link for every promised row of table id that has none.  0 or -ENOSPC. */
int slab_promise_links(struct store *s, uint32_t id);
/* Slab classes, slab headers and the index reserve are sound (mount). */
int slab_check(struct store *s, char *err, size_t n);
void slab_usage(struct store *s, uint64_t *slab_bytes, uint64_t *free_slot_bytes, uint64_t *nslabs);
void slab_row_usage(struct store *s, uint64_t *used, uint64_t *slab_bytes, uint64_t *versions);
/* Its used bytes alone (space_lock taken). */
uint64_t slab_row_used(struct store *s);
/* The emptiest row slab whose slots the class can do without (its used
 * slot offsets into *used), and giving it back.  commit_lock held. */
struct sslab *slab_pick_victim(struct store *s, struct u64vec *used);
int slab_give_back(struct store *s, struct sslab *sl);
/* Give empty slabs a class can do without back to the heap, after a
 * change that freed slots (commit_lock held). */
void slab_trim(struct store *s);
/* Bytes of heap embfs objects can take (the pool less libpmemobj's own). */
uint64_t pool_heap_capacity(const struct store *s);

/* ---- index.c: the row index ---------------------------------------------
 * Readers hold st->lock shared; changes run under commit_lock, and those
 * that move memory readers see also hold st->lock exclusive. */
struct ipos {
	struct emb_bucket *b;
	int slot;
	int home_ovf;          /* entry sits in the second bucket of its row */
	struct emb_bucket *home;
	_Atomic uint32_t *memo, *hmemo; /* b's and home's check memo entries (index.c), or NULL */
};
/* The directory and segment headers of t's index are sound (mount): 0, or
 * -EIO with a reason in err. */
int index_check(struct store *s, const struct emb_table *t, char *err, size_t n);
int index_load(struct store *s, struct stable *st);
void index_unload(struct stable *st);
/* The ref stored for key (0 = none) for a reader (st->lock shared, or
 * commit_lock): 0 or -EIO when what it probed is damaged (a bucket whose
 * check passed since its last change is not checked again:
 * bucket_check_memo). */
int index_get(struct store *s, struct stable *st, uint64_t key, uint64_t *val);
/* index_get of keys[i] into vals[i], i in [0, n) but those with skip[i]
 * set (skip may be NULL), pipelined (reads of many rows; st->lock shared):
 * 0, or -EIO at the first damaged probe.  filter: most keys are likely
 * absent (the table has runs): keys of 64-row chunks that hold no entry
 * are not probed (the key filter, made at the first such call). */
int index_get_many(struct store *s, struct stable *st, const uint64_t *keys, size_t n, const uint8_t *skip,
		   int filter, uint64_t *vals);
/* The table's key filter goes (the table is freed). */
void index_kf_free(struct stable *st);
/* The same for a writer about to change the entry (commit_lock held): also
 * its position, and the buckets it would change are verified. */
int index_find(struct store *s, struct stable *st, uint64_t key, struct ipos *pos, uint64_t *val);
/* Start loading what index_find(key) will read first (its first bucket and
 * that bucket's memo entry): a writer about to find many keys calls it a
 * few keys ahead. */
void index_prefetch(struct store *s, struct stable *st, uint64_t key);
/* Once that bucket is loaded: start loading what its slots of key's tag
 * refer to (the version probe() reads to tell the row, of rs bytes: a
 * writer then checks it whole) and its second bucket if it overflowed. */
void index_prefetch_refs(struct store *s, struct stable *st, uint64_t key, uint32_t rs);
/* Has st's index no entry (row, tombstone or stub) at or past row?  1 sure,
 * 0 it may have (the key filter, made now if need be, knows the highest row
 * ever entered since it was made; unknown when it cannot be made).
 * st->lock shared. */
int index_none_from(struct store *s, struct stable *st, uint64_t row);
struct claims;
struct claims *claims_new(size_t n);
void claims_free(struct claims *c);
void claims_reset(struct claims *c);
/* Find a free slot for key (not present).  Returns 0; 1 when key's bucket
 * pair is full (*full: its segment, for the caller to tell segments apart;
 * index_grow_key grows it); -EAGAIN if the table had no index and it was
 * made (positions and claims are stale: start over); or -errno. */
int index_claim(struct store *s, struct stable *st, struct claims *c, uint64_t key,
		struct ipos *pos, const void **full);
/* Grow the segment key hashes to (or make the index): -EAGAIN once done
 * (positions and claims are stale: start over), or -errno.  Takes st->lock
 * exclusive. */
int index_grow_key(struct store *s, struct stable *st, uint64_t key);
/* Write key's ref into its claimed (still invisible) slot; an entry in the
 * second bucket raises the first's overflow count (takes st->lock
 * exclusive for it). */
void index_fill(struct store *s, struct stable *st, const struct ipos *pos, uint64_t key, uint64_t ref);
uint64_t index_hash(const struct store *s, uint64_t key);
/* st->lock exclusive held.  key: the row the entry is for. */
void index_publish(struct store *s, struct stable *st, const struct ipos *pos, uint64_t key);
void index_set_val(struct store *s, const struct ipos *pos, uint64_t ref);
void index_unpublish(struct store *s, struct stable *st, const struct ipos *pos, uint64_t key);
/* Takes st->lock exclusive. */
void index_ovf_dec(struct store *s, struct stable *st, const struct ipos *pos);
/* A bucket's checksum matches: 0, or -EIO (counted). */
int index_bucket_check(struct store *s, const struct emb_bucket *b);
/* Recompute the checksums of key's two buckets (recovery). */
void index_reseal(struct store *s, struct stable *st, uint64_t key);
/* Call fn for every stored (key, ref), the key as the ref's element names
 * it, not validated: fn walks the chain from ref with chain_start(key,
 * ref), which validates it, before it trusts the key (never looks the key
 * up again: a damaged element could name another row).  Stops early when
 * fn returns non-zero. */
int index_walk(struct store *s, struct stable *st, int (*fn)(void *, uint64_t, uint64_t), void *arg);
/* Directory entries of st's index (0 without one).  st->lock held. */
size_t index_ndir(const struct stable *st);
/* Large segments of st's loaded index (mount's count). */
uint64_t index_large(const struct stable *st);
/* Heap bytes of every table's index: segments and directories. */
uint64_t index_bytes(struct store *s);
/* index_walk one segment at a time from directory index *di on, damaged
 * buckets skipped, until fn returns non-zero: then *di stays at the
 * segment it stopped in (to start it again), else it moves past each
 * segment done.  st->lock held (shared). */
void index_scan(struct store *s, struct stable *st, size_t *di, int (*fn)(void *, uint64_t, uint64_t), void *arg);
int index_destroy(struct store *s, struct stable *st);

/* ---- catalog.c: tables (takes cat_lock) --------------------------------- */
/* The table in catalog slot id, or NULL; read lock-free (a slot's pointer
 * is published and cleared atomically under cat_lock). */
static inline struct stable *tab_get(struct store *s, uint32_t id)
{
	if (id >= EMB_NTABLES)
		return NULL;
	return __atomic_load_n(&s->tab[id], __ATOMIC_ACQUIRE);
}
int catalog_load(struct store *s);
void catalog_unload(struct store *s);
/* Every catalog entry (free ones too) and each table's index directory is
 * sound (mount). */
int catalog_check(struct store *s, char *err, size_t n);
/* A truncate's rows are gone: clear trim_from (a transaction). */
int catalog_trim_done(struct store *s, struct stable *st);
/* Free a table's index and catalog slot; its rows must be gone.  commit_lock held. */
int catalog_free_locked(struct store *s, struct stable *st);

/* ---- snapshot records (snaprec.c owns them; these read them) ------------ */
static inline struct emb_snap *snap_rec(struct store *s, uint32_t i)
{
	return &s->snaps->s[i];
}

/* A record's table array: in the pool, or in DRAM while it is pending. */
static inline struct emb_snap_table *rec_tables(struct store *s, const struct emb_snap *r)
{
	struct emb_snap_table *t = s->pend_tables[r - s->snaps->s];
	return t ? t : S_PTR(s, r->tables_off);
}

/* flags change under snap_lock exclusive, except EMB_S_DURABLE, which
 * store_snap_set_durable sets while it excludes drops by commit_lock
 * (readers load the word atomically) */
static inline uint32_t rec_flags(const struct emb_snap *r)
{
	return (uint32_t)__atomic_load_n(&r->flags, __ATOMIC_ACQUIRE);
}

/* In use and not being dropped. */
static inline int rec_live(const struct emb_snap *r)
{
	uint32_t f = rec_flags(r);
	return (f & EMB_S_USED) && !(f & EMB_S_DROPPING);
}

/* ---- snapset.c: the live snapshot set (snap_lock; exclusive to rebuild) - */
void snapset_rebuild(struct store *s);
/* A version of batch b_old, replaced by one of batch b_new: does a live
 * snapshot still see it? */
int snapset_needed(struct store *s, uint64_t b_old, uint64_t b_new);
/* How many of the sorted batches b[] lie in [lo, hi); *only = the index of
 * the one when there is exactly one. */
size_t snapset_holders(const uint64_t *b, size_t n, uint64_t lo, uint64_t hi, size_t *only);
/* Account a version of batch b_old kept for snapshots when one of batch
 * b_new replaced it: bytes only one snapshot holds. */
void snapset_charge(struct store *s, uint64_t b_old, uint64_t b_new, uint64_t bytes);
/* Does record r hold table (id, gen)?  How many live snapshots hold st? */
int snapset_holds(struct store *s, const struct emb_snap *r, uint32_t id, uint64_t gen);
int snapset_refs(struct store *s, const struct stable *st);

/* ---- vcheck.c: row versions and links, validated access; version.c:
 * chains, slot frees ---------------------------------------------------- */
static inline uint64_t ver_row(const struct emb_version *v)
{
	return v->key & EMB_ROW_ID_MASK;
}

static inline uint64_t ver_batch(const struct emb_version *v)
{
	return (v->key >> EMB_VK_BATCH_SHIFT) << 32 | v->batch_lo;
}

static inline int ver_tomb(const struct emb_version *v)
{
	return (v->key & EMB_VK_TOMB) != 0;
}

static inline int ver_stub(const struct emb_version *v)
{
	return (v->key & EMB_VK_STUB) != 0;
}

/* The row bytes of a version that holds them. */
static inline char *ver_data(const struct emb_version *v)
{
	return (char *)(v + 1);
}

/* A ref's object (version or link) offset; is it a link? */
static inline uint64_t ref_obj(uint64_t ref)
{
	return ref & EMB_REF_MASK & ~EMB_REF_LINK;
}

static inline int ref_is_link(uint64_t ref)
{
	return (ref & EMB_REF_LINK) != 0;
}

/* Slot sizes: a row version of rs bytes (16-byte header + the row, rounded
 * to 8), and links, stubs and tombstones. */
static inline uint32_t ver_slot_size(uint32_t rs)
{
	return (uint32_t)((sizeof(struct emb_version) + rs + 7) & ~7u);
}

/* Fill a version's key and batch (kind: EMB_VK_TOMB, EMB_VK_STUB or 0). */
void ver_init(struct emb_version *v, uint64_t row, uint64_t batch, uint64_t kind);
/* Its checksum as a version of table id (rows of rs bytes); seal it. */
uint32_t ver_csum(const struct emb_version *v, uint32_t id, uint32_t rs);
void ver_seal(struct emb_version *v, uint32_t id, uint32_t rs);
/* Mark a freed slot as holding nothing (flushed). */
void ver_poison(struct store *s, uint64_t off);
/* The version at off if it is a sound version of row of table id (rows of
 * rs bytes); NULL (counted) if the offset or the version is damaged. */
struct emb_version *ver_get(struct store *s, uint64_t off, uint32_t id, uint64_t row, uint32_t rs);
/* The same, but a version holding bytes is checked by its header only, not
 * by its digest (see vcheck.c): for a version whose bytes are not read. */
struct emb_version *ver_get_head(struct store *s, uint64_t off, uint32_t id, uint64_t row, uint32_t rs);
/* The link at off if it is a link of row; NULL (counted) if not. */
struct emb_link *link_get(struct store *s, uint64_t off, uint64_t row);
/* The row id an index slot's ref leads to, read without validation (the
 * caller validates what it uses), or EMB_NONE if the ref leaves the pool. */
uint64_t ref_row(const struct store *s, uint64_t ref);
/* Is the object ref leads to sound (a version of its own row, with a
 * matching checksum; a link whose version is one of its row)?  For a key
 * that did not match: a damaged key must not pass for another row's. */
int ref_sound(struct store *s, struct stable *st, uint64_t ref);
/* Free the slots of versions or links off[0..n) (which it changes; each
 * poisoned), under one hold of the space lock.  Only the slots: a stub's
 * record on the spill device is the tier's, so the store frees versions
 * through spill_ver_free/spill_vers_free (tier/tier.h), which call this.
 * commit_lock held. */
void ver_slots_free(struct store *s, uint64_t *off, size_t n);

/* A walk of one row's version chain, newest first, each element validated. */
struct chain {
	struct store *s;
	uint32_t id, rs;
	uint64_t row;
	uint64_t ref;            /* the current element's ref */
	uint64_t off;            /* its version, 0 past the oldest */
	struct emb_version *v;   /* NULL past the oldest */
	uint64_t link;           /* its link (0: the version is referred to directly) */
	uint64_t next;           /* the next element's ref (its link's next), 0 = none */
	uint64_t at;             /* pool offset of the field holding ref; 0 = the index */
	uint32_t depth;
};
/* Pool offset of the field that refers to the current version (the link's
 * ver, or the field holding the element's ref; 0 = the index). */
static inline uint64_t chain_vat(const struct chain *c)
{
	return c->link ? c->link + offsetof(struct emb_link, ver) : c->at;
}
/* Start at head (the index's ref for row; 0 = none): 0 or -EIO. */
int chain_start(struct store *s, struct stable *st, uint64_t row, uint64_t head, struct chain *c);
/* The same, its first version checked by its header only (ver_get_head). */
int chain_start_head(struct store *s, struct stable *st, uint64_t row, uint64_t head, struct chain *c);
/* Step to the next older element: 0 or -EIO (damaged link, batches not
 * decreasing, chain too long). */
int chain_step(struct chain *c);
/* The version of row that batch b sees (EMB_NONE: the newest) into *out,
 * NULL for a hole or a tombstone: 0 or -EIO.  st->lock held, or commit_lock. */
int chain_visible(struct store *s, struct stable *st, uint64_t row, uint64_t b, struct emb_version **out);
/* chain_visible, and *decided = 0 when the pool's chain has no version for
 * b (no entry, or all newer): then a run may hold it (run.c). */
int chain_find(struct store *s, struct stable *st, uint64_t row, uint64_t b, struct emb_version **out,
	       int *decided);
/* The same for a row whose index value (head) is already known. */
int chain_find_at(struct store *s, struct stable *st, uint64_t row, uint64_t head, uint64_t b,
		  struct emb_version **out, int *decided);
/* Is off (a version or a link) in row's chain?  1, 0 or -EIO.  commit_lock
 * held (or at mount). */
int chain_has(struct store *s, struct stable *st, uint64_t row, uint64_t off);
/* Store ref into the field at (a link's ver or next, flushed; never 0 = the
 * index, which goes through index_set_val). */
void field_set(struct store *s, uint64_t at, uint64_t ref);

/* ---- read.c: the one read path ------------------------------------------ */
/* Rows as batch b sees them (EMB_NONE: the newest) into buf (NULL: a probe,
 * no bytes); stored[i] = 1 if row i is stored (STORE_OUT instead, if where,
 * when the version read is outside the pool), vbatch[i] = the batch of the
 * version read (0 for a hole) (either may be NULL).  Stubs are read from the
 * spill device, all in one submission.  Takes st->lock shared. */
int rows_read_ver(struct store *s, struct stable *st, const uint64_t *rows, size_t n, char *buf,
		  uint64_t b, uint8_t *stored, uint64_t *vbatch, int where);
/* The same for rows [first, first + n), but those with skip[i] set (skip
 * may be NULL; their bytes and stored[i] are left alone): a range read.  It
 * takes the same path, except that the runs are walked block by block where
 * the rows are dense, and that a scan marks no row as used (no reference
 * bits for the mover, no promotion of stubs). */
int rows_read_range(struct store *s, struct stable *st, uint64_t first, size_t n, char *buf, uint64_t b,
		    const uint8_t *skip, uint8_t *stored);

/* ---- reclaim.c (commit_lock held) --------------------------------------- */
/* Free what no live snapshot (and, for a linked table, the live view) needs
 * of one table's version chains: the rows left, or -errno. */
int reclaim_table(struct store *s, struct stable *st, int count);
int reclaim_replay(struct store *s, struct emb_journal *j);
/* Reclaim every table, free zombie tables left empty, recount each
 * snapshot's excl_bytes. */
int snap_reclaim_all(struct store *s);

/* ---- commit.c: group commit (commit_lock held; takes snap_lock shared) --- */
/* Apply ops as one group (see commit.c).  flags: COMMIT_PROMISED, they
 * were promised room; COMMIT_RUNS_HIDDEN, newer runs already hide the rows
 * deleted (truncation wrote their tombstones): no pool tombstones for them. */
#define COMMIT_PROMISED 1
#define COMMIT_RUNS_HIDDEN 2
int commit_locked(struct store *s, struct stable *st, const struct store_rowop *ops, size_t n,
		  uint64_t size_hint, int flags);
int commit_replay(struct store *s, struct emb_journal *j);

/* ---- snaprec.c: snapshot records ----------------------------------------- */
/* At open: the records, the generation counter; pending records (lost in a
 * crash) are marked dropping for snap_recover. */
int snap_load(struct store *s);
/* At close: the DRAM table arrays of snapshots still pending. */
void snap_unload(struct store *s);
/* A new pool's snapshot records: all free, each with its checksum. */
void snap_records_init(struct emb_snaps *sn);
/* Every snapshot record in use and its table array is sound (a free or a
 * pending record may be torn by a crash: not checked). */
int snap_check(struct store *s, char *err, size_t n);
int snap_recover(struct store *s);
/* Table id inside snapshot idx of generation snap_gen: its attributes (a may
 * be NULL), the batch the snapshot sees, the table's state.  Takes snap_lock
 * shared. */
int snap_table_view(struct store *s, uint32_t idx, uint64_t snap_gen, uint32_t id, struct store_attr *a,
		    uint64_t *batch, struct stable **stp);

/* ---- tablife.c: truncate, release and their recovery (takes commit_lock) - */
int trim_locked(struct store *s, struct stable *st);
int table_recover(struct store *s);

/* ---- view.c: the table and batch a view reads (a may be NULL) ----------- */
int view_resolve(struct store *s, const struct store_view *v, struct stable **stp, uint64_t *batch,
		 struct store_attr *a);

/* ---- pool.c ------------------------------------------------------------- */
/* Every structure reached from the superblock is sound (mount, before
 * recovery): 0, or -EIO with a one-line reason in err.  Reads only
 * s->base, map_len, sb and jr. */
int store_validate(struct store *s, char *err, size_t n);
/* repair.c: what STORE_OPEN_REPAIR repairs, on the mapped pool before
 * open_load (see the file's comment). */
int repair_preen(struct store *s, store_note_fn note, void *arg, char *err, size_t n);

#endif
