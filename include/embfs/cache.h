/*
 * cache/: a DRAM cache of table rows, keyed by (table, row id).
 *
 * Files (cache/cache_int.h, private to them, has what they share):
 *   cache.c      the front: cache_create/destroy, cache_read, cache_read_rows,
 *                cache_read_range, cache_write, cache_write_rows,
 *                cache_update_rows, cache_drop,
 *                cache_drop_rows, cache_pin/unpin, cache_stats_get
 *   rows.c       the row cache mechanism: arenas, hash table, CLOCK eviction,
 *                entries, pin counts; includes no store header (the Makefile
 *                checks it)
 *   writeback.c  the write-back policy: promises, write-back rounds, the
 *                flusher, snapshots' preserved copies; cache_flush,
 *                cache_set_snapshot
 *   below.c      cache_store_ops, the ops over the store (embfs/store.h) that
 *                front.c passes to cache_create()
 *   front.c, io.c  the cache layer as fs/ sees it (embfs/front.h): table
 *                byte ranges <-> rows through the row cache, snapshots, sync
 *                points, and the calls passed to the store
 *
 * Contract:
 * - The row cache proper (cache.c, rows.c, writeback.c) knows nothing of the
 *   layer below.  Misses go to ops->fetch, dirty rows leave through
 *   ops->writeback (one call per table and batch: the layer below makes the
 *   whole batch durable at once — group commit).
 * - Replacement is CLOCK (one reference bit per row), per shard.  64 shards
 *   (by default), chosen by a hash of (table, row); each has its own mutex, so lookups take
 *   no global lock.  The byte budget (row bytes + CACHE_ROW_OVERHEAD per row)
 *   is split evenly between shards.
 * - Per cached row, besides the row bytes: a 24-byte entry and 8–16 bytes of
 *   hash bucket (buckets grow to keep at most 1 entry per 2 buckets on
 *   average, so that a lookup seldom walks past the head of its chain: a
 *   batch's lookups are bound by the lines they load): at most
 *   CACHE_ROW_OVERHEAD = 40 bytes.  Row ids are below CACHE_ROW_LIMIT (2^48,
 *   as the store's; a higher one is never cached: reads and writes of it go
 *   straight to the layer below).  Row bytes live in per-size-class arenas
 *   of chunks of up to 64 KiB, with no per-row allocator header.
 * - Memory: the buckets of all shards (interleaved, room reserved for the
 *   most), a shard's entries when they may take 4 MiB or more, and, with a
 *   budget of 256 MiB or more, every arena chunk (carved from 2 MiB regions)
 *   are mappings advised MADV_HUGEPAGE: with transparent huge pages
 *   ("madvise" or "always") a lookup's bucket, entry and row cost no page
 *   walk.  Resident memory then rounds up to 2 MiB pages: at most one
 *   partly used region of chunks, a partly used page of each shard's entries
 *   and of the buckets, beyond what the budget counts.
 * - Write-back: cache_write() leaves the row dirty.  Dirty rows are written
 *   back when evicted, by cache_flush() (fsync, unmount), and by a background
 *   flusher at most dirty_age_ms after they became dirty (a round every
 *   dirty_age_ms / 2 takes the rows dirtied before it began).  Only one write-back
 *   runs at a time (flush_lock), so cache_flush() returning 0 means every row
 *   dirty when it was called is durable.
 * - Pinned rows are never evicted.  When a shard has nothing it may evict, the
 *   operation bypasses the cache (reads fetch straight into the caller's
 *   buffer, writes go straight to writeback): never a deadlock, never a wait
 *   on a pin.
 * - Promises (with ops->reserve): a write whose row's write-back will take a
 *   slot below without freeing one has room promised below first, so a full
 *   pool refuses the write (ENOSPC) instead of failing at write-back.  That
 *   is a row that is a hole below, a row whose stored version a snapshot
 *   holds (batch at or below the newest cache_set_snapshot()), and a dirty
 *   row whose bytes a snapshot holds (their copy, see cache_write()): at most
 *   one promise per row and write.  The writer may promise the room itself
 *   before the write and pass it as credit; the cache spends one unit per row
 *   that needs one, and reserves the rest itself.  Each promise is given back
 *   (reserve with delta < 0) once its version is written back, or when its
 *   row is dropped.
 * - Nothing calls the layer below (fetch, fetch_rows, writeback, reserve,
 *   durable_below) with a shard lock held, so a reader of cached rows never
 *   waits on it: a write that needs a promise its credit cannot pay unlocks,
 *   reserves, and starts over; promises to give back are gathered under the
 *   lock and given back after it.  Write-back rounds (writeback, then
 *   reserve(delta < 0)) run under flush_lock, one at a time.
 * - Every call returns 0 (or a count) or -errno from the layer below.
 */
#ifndef EMBFS_CACHE_H
#define EMBFS_CACHE_H

#include <stddef.h>
#include <stdint.h>

#define CACHE_ROW_OVERHEAD 40u
#define CACHE_ROW_LIMIT (1ull << 48)
#define CACHE_MAX_TABLES 65536u

struct cache; /* valid until cache_destroy() */

struct cache_wb {
	uint64_t row;
	const void *data; /* row_size bytes, valid during the writeback call */
	uint64_t batch;   /* batch id of the write that produced these bytes */
};

#define CACHE_STORED_OUT 2 /* see fetch: the same value as STORE_OUT */

struct cache_ops {
	/* Copy the stored row into buf (row_size bytes): 1 stored, 0 hole (buf
	 * zero-filled), -errno; CACHE_STORED_OUT instead of 1 when writing the
	 * row back will take new room below rather than reuse the stored
	 * version's (the row is in the spill tier): its writes promise it.  buf == NULL: only say whether it is stored.
	 * *batch (0 on entry): the batch id of the stored version; left 0 when
	 * unknown, the cache then takes any snapshot to hold it. */
	int (*fetch)(void *ctx, uint32_t table, uint64_t row, void *buf, uint64_t *batch);
	/* Optional: fetch rows[0..n) into buf (row i at buf + i * row_size),
	 * stored[i] as fetch's answer (1, CACHE_STORED_OUT or 0), batch[i] as fetch's *batch
	 * (zeroed on entry); 0 or -errno.  Batch reads hand all their misses to
	 * one call. */
	int (*fetch_rows)(void *ctx, uint32_t table, const uint64_t *rows, size_t n, void *buf,
			  uint8_t *stored, uint64_t *batch);
	/* Optional: rows [first, first + n) into buf (row i at buf + i *
	 * row_size), except those with skip[i] set (skip may be NULL: none),
	 * which are left as they are; stored[i] (may be NULL) 1 if stored, 0 for
	 * a hole.
	 * 0 or -errno.  cache_read_range() hands it a large read's misses. */
	int (*fetch_range)(void *ctx, uint32_t table, uint64_t first, size_t n, void *buf, const uint8_t *skip,
			   uint8_t *stored);
	/* Make rows[0..n) of table durable, each row atomically. */
	int (*writeback)(void *ctx, uint32_t table, const struct cache_wb *rows, size_t n);
	/* Optional.  delta > 0: promise room below for delta row versions of
	 * row_size, or fail (-ENOSPC: the write is refused and nothing changes);
	 * may block.  delta < 0: give back promises whose versions were written
	 * back or dropped.  Called with no shard lock held (delta < 0 with
	 * flush_lock held): must not call into the cache. */
	int (*reserve)(void *ctx, uint32_t table, uint32_t row_size, int delta);
	/* Optional: every write of a batch below `batch` is now in the layer
	 * below (called after write-back rounds, with no lock held). */
	void (*durable_below)(void *ctx, uint64_t batch);
};

struct cache_conf {
	uint64_t bytes;        /* budget: row bytes + CACHE_ROW_OVERHEAD per row */
	uint32_t dirty_age_ms; /* flusher deadline; 0 = no flusher thread */
	uint32_t shards;       /* power of two <= CACHE_MAX_SHARDS; 0 = CACHE_MAX_SHARDS */
};
#define CACHE_MAX_SHARDS 64u

/* cache/below.c: the ops over the store, with a struct cache_below as ctx
 * (st and pool set, the rest zero; valid until cache_destroy()). */
struct store;
struct cache_below {
	struct store *st;
	const char *pool;           /* named when the pool's failure is logged */
	_Atomic int failure_logged; /* ... which happens once */
};
extern const struct cache_ops cache_store_ops;
/* After a call of the store failed with ret: when the pool itself has failed
 * (store_health()), log why, once per struct cache_below; 1 if it has. */
int cache_below_failed(struct cache_below *b, int ret);

/* ops and ctx must stay valid until cache_destroy(). */
struct cache *cache_create(const struct cache_conf *conf, const struct cache_ops *ops, void *ctx);
/* Stops the flusher.  Dirty rows still cached are lost: flush first. */
void cache_destroy(struct cache *c);

/* Bytes [off, off+len) of a row of row_size bytes. */
int cache_read(struct cache *c, uint32_t table, uint32_t row_size, uint64_t row, uint32_t off,
	       uint32_t len, void *buf);
/* Whole rows rows[0..n) into buf (row i at buf + i * row_size), as n
 * cache_read() calls, but each shard is locked once for all its rows and their
 * lookups are pipelined with prefetches (a batch gather's cost is memory
 * latency).  Duplicates are fine.  present (may be NULL): present[i] = 1 if
 * row i is stored below or cached (written), 0 if it is a hole. */
int cache_read_rows(struct cache *c, uint32_t table, uint32_t row_size, const uint64_t *rows, size_t n,
		    void *buf, uint8_t *present);
/* Whole rows [first, first + n) into buf, for a large read (a scan): as
 * cache_read_rows(), except that rows not cached are not cached by it (they
 * come from ops->fetch_range in one call, straight into buf): a sequential
 * read of a table larger than the cache would otherwise evict every row
 * other readers keep hot, and pay an insertion and an eviction per row.
 * Cached rows (dirty ones are newer than below) are taken from the cache,
 * each shard locked once; when the table has no cached row, not even that.
 * Without ops->fetch_range it is cache_read_rows(). */
int cache_read_range(struct cache *c, uint32_t table, uint32_t row_size, uint64_t first, size_t n, void *buf,
		     uint8_t *present);
/* Whole rows from data (row i at data + i * row_size) to rows[0..n), as n
 * cache_write() calls in order (the last of duplicates wins), grouped by
 * shard like cache_read_rows(), all spending one credit.  Each row is
 * written whole or not at all; on an error some rows may be written and
 * others not (never for want of room when the credit covers n rows). */
int cache_write_rows(struct cache *c, uint32_t table, uint32_t row_size, const uint64_t *rows,
		     size_t n, const void *data, uint64_t batch, int64_t *credit);
/* Update rows[0..n) (no id twice) in place: fn(ctx, i, row, stored) gets
 * row i's current bytes (row_size; a hole's are zeros, stored 0) and
 * changes them; the result is written as by cache_write_rows() (each row
 * whole, in batch, spending credit).  For a cached row fn runs under its
 * shard's lock, so the update is atomic against every write through the
 * cache; a row not cached is read, updated and written with no lock held
 * in between (callers serialize their updates of the same rows).  fn must
 * not call into the cache.  On an error some rows may be updated. */
typedef void cache_update_fn(void *ctx, size_t i, char *row, int stored);
int cache_update_rows(struct cache *c, uint32_t table, uint32_t row_size, const uint64_t *rows, size_t n,
		      cache_update_fn *fn, void *ctx, uint64_t batch, int64_t *credit);
/* batch: the batch id the write belongs to (stamped on the version it
 * becomes).  Batches: a dirty row remembers the batch of its latest write.
 * When cache_set_snapshot(B) has been called and a dirty row of batch <= B
 * is written in a later batch, its bytes are first copied aside and written
 * back as a version of its own batch, before the newer bytes (the snapshot
 * keeps them; nothing is written back at snapshot time).
 * credit (may be NULL): rows of row_size for which the caller has promised
 * room below (as ops->reserve would); the write takes one unit per row that
 * needs a promise (at most one per row) and reserves itself, with no shard
 * lock held, what the credit cannot pay (then -ENOSPC is possible).  Units
 * it reserved and did not spend are added to *credit.  The caller gives back
 * what is left, with no cache lock held. */
int cache_write(struct cache *c, uint32_t table, uint32_t row_size, uint64_t row, uint32_t off,
		uint32_t len, const void *data, uint64_t batch, int64_t *credit);
/* A snapshot closed batch `batch`.  Tell the cache of every snapshot taken,
 * and after cache_create() of the live ones (the newest is enough), before
 * any write of a later batch; writes after it are of later batches. */
void cache_set_snapshot(struct cache *c, uint64_t batch);

/* Write back every dirty row of table (table < 0: of all tables). */
int cache_flush(struct cache *c, int64_t table);
/* Discard (without write-back) the cached rows of table in [from, to). */
void cache_drop(struct cache *c, uint32_t table, uint64_t from, uint64_t to);
/* The same for rows[0..n) (looked up one by one: no scan of the cache). */
void cache_drop_rows(struct cache *c, uint32_t table, const uint64_t *rows, size_t n);

/* Pin a row in the cache (loading it if needed) until cache_unpin();
 * -ENOSPC if its shard holds nothing evictable. */
int cache_pin(struct cache *c, uint32_t table, uint32_t row_size, uint64_t row);
void cache_unpin(struct cache *c, uint32_t table, uint64_t row);

struct cache_stats {
	uint64_t hits, misses, evictions, writebacks, bypasses;
	uint64_t scan_misses; /* misses of cache_read_range() (counted in misses too), not cached */
	uint64_t rows, dirty, new_dirty, pinned, bytes; /* current */
	uint64_t budget, meta_bytes, meta_fixed;         /* totals only */
};
/* table < 0: totals.  new_dirty: dirty rows that were holes below.
 * meta_bytes: entries up to their high-water mark and hash buckets;
 * meta_fixed: the part an empty cache holds (every shard's first buckets). */
void cache_stats_get(struct cache *c, int64_t table, struct cache_stats *st);

#endif
