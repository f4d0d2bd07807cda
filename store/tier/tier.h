/*
 * The spill tier as the core store sees it: the only tier header a file
 * outside store/tier/ includes (through store_int.h).  The tier's own state
 * and the functions its files share are in spill.h, private to store/tier/.
 *
 *   device.c    the device: segments, records, every io_uring ring, I/O
 *   run.c       sorted runs: format, filters, lists, retiring, attach, fsck
 *   (see run.c's header for the files its work is split into)
 *   mover.c     the mover thread: spilling, promotion, eviction rounds;
 *               the journaled relink of stubs
 *   evict.c     the commit that takes rows a run now holds out of the index
 *   compact.c   compaction of stub segments, recount
 *   heat.c      reference bits, the promotion queue
 *
 * The core calls the tier for: reading spilled rows (stubs through
 * spill_read, runs through runs_lookup), whether a run may hold a row,
 * trimming and dropping a table's runs, waiting for room, noting use, and
 * its checks and stats, and for freeing a version (spill_ver_free: a stub's
 * record turns stale).  The tier's background work (mover, eviction,
 * compaction) calls the core's index, chain, slab and journal functions,
 * which sit below it (store_int.h's file map), and commits its own index
 * changes (evict.c, relink_apply): no call runs back up to the core files
 * that call the tier.
 */
#ifndef EMBFS_TIER_H
#define EMBFS_TIER_H

#include <stddef.h>
#include <stdint.h>

struct store;
struct stable;
struct u64vec;
struct store_spill_stats;
struct emb_journal;
struct emb_version;

/* A row looked up in the runs (run.c runs_lookup). */
enum { RQ_PENDING, RQ_DATA, RQ_HOLE, RQ_EIO };
struct rq {
	uint64_t row;
	char *dst;           /* row bytes go here (NULL: a probe) */
	size_t idx;          /* row index in the caller's request */
	uint64_t batch;      /* of the version found */
	int state;
};

/* A device read of one record (device.c). */
struct sreq {
	uint64_t loc;
	uint64_t row, batch;
	uint32_t len, table;
	char *dst;
	size_t idx;          /* row index in the caller's request */
	uint64_t blk, boff;
	uint32_t span;
	char *to;            /* device_read_raw: read into here, not buf + boff (if set) */
	int ret;
};

/* device.c: bytes a record of a row of len bytes takes on the device. */
uint32_t spill_rec_size(uint32_t len);
/* Read back the records of these stubs of st: how many fail.  commit_lock held. */
int spill_verify(struct store *s, struct stable *st, const uint64_t *stubs, size_t n);
/* device.c: free the tier's DRAM state (its thread stopped, runs unloaded). */
void spill_detach(struct store *s);
/* mover.c: stop the mover, unload the runs, detach the device. */
void spill_close(struct store *s);
/* The spill segment table, if any, is sound (mount). */
int spill_table_check(struct store *s, char *err, size_t n);
/* heat.c: row was written or read from the pool (its reference bit: the
 * mover spills cold rows first). */
void spill_note_use(struct store *s, uint32_t table, uint64_t row);
/* heat.c: a spilled row was read from the device (read twice, it is queued
 * for promotion back into the pool). */
void spill_note_device_hit(struct store *s, uint32_t table, uint64_t row);
/* mover.c: a write found no room for `need` bytes of slots: let the mover
 * free some.  0 = try again (at most SPILL_MAX_WAITS times). */
#define SPILL_MAX_WAITS 8
int spill_wait_room(struct store *s, uint64_t need);
/* mover.c: a writer asks for `bytes` of slots (a request's promises): noted
 * (the mover starts earlier for large requests, mover_used), and the mover
 * woken now if row usage is past its start, not at its next look. */
void spill_promised(struct store *s, uint64_t bytes);

/* bulk.c: seal the open bulk-load run if it holds rows of table id (or
 * of any table: BULK_ANY) at or below row hi (EMB_NONE: any), so that they
 * are in a run before those rows are read, written, truncated or dropped,
 * a snapshot is taken or the pool syncs or closes.  0, or -errno (then the
 * pool refuses changes). */
#define BULK_ANY UINT32_MAX
int bulk_settle(struct store *s, uint32_t id, uint64_t hi);

/* run.c: sorted runs on the spill device (see there).  Does a run of table
 * id perhaps hold row (Bloom filters)?  How many runs, and their records
 * that are not tombstones (*live, may be NULL)? */
int runs_may_hold(struct store *s, uint32_t id, uint64_t row);
int runs_count(struct store *s, uint32_t id, uint64_t *live);
/* Rows at or past `from` leave st's runs (tombstones in a new run, or whole
 * runs go).  commit_lock held. */
int runs_trim(struct store *s, struct stable *st, uint64_t from);
/* st's runs go (its table is freed).  commit_lock held. */
int runs_drop_table(struct store *s, struct stable *st);
/* Row's newest version in st's runs: 1 bytes (into buf unless NULL), 0 none
 * or a tombstone, or -errno. */
int runs_row_read(struct store *s, struct stable *st, uint64_t row, void *buf);
/* Ranges [lo, hi) of rows the runs of id may hold, as pairs, in lohi. */
int runs_ranges(struct store *s, uint32_t id, struct u64vec *lohi);
/* Check every run: header, arrays, segments, and every block read back
 * (checksums, rows in order, counts): *n runs, *bad wrong.  commit_lock held. */
int runs_fsck(struct store *s, uint64_t *n, uint64_t *bad);

/* device.c: read q[0..n) (one record each) in one io_uring submission and
 * count them; q[i].ret: 0, -ESTALE (the record is not the stub's: moved or
 * damaged) or -EIO. */
void spill_read(struct store *s, struct sreq *q, size_t n);
/* device.c: a reader enters (d = 1) or leaves (-1) the segment of loc, which
 * compaction then does not free under it. */
void spill_pin(struct store *s, uint64_t loc, int d);
/* device.c: free a version's or a link's slot (poisoned); a stub's record
 * on the device turns stale (st NULL: not counted).  commit_lock held. */
void spill_ver_free(struct store *s, struct stable *st, uint64_t off);
/* spill_ver_free of off[0..n) (which it changes): one hold of the space
 * lock for all their slots. */
void spill_vers_free(struct store *s, struct stable *st, uint64_t *off, size_t n);
/* device.c: free what a ref names: its link and the link's version, or the
 * version.  commit_lock held. */
void spill_ref_free(struct store *s, struct stable *st, uint64_t ref);
/* device.c: the bytes of version v (a stub's read from the device) into
 * buf: 0 or -EIO.  commit_lock held. */
int spill_ver_bytes_locked(struct store *s, struct stable *st, const struct emb_version *v, void *buf);
/* mover.c: at open, finish a relink the journal holds (EMB_J_RELINK). */
int spill_relink_replay(struct store *s, struct emb_journal *j);
/* device.c: count a spilled row that failed its checksum. */
void spill_csum_error(struct store *s);
/* compact.c: recount the segments' live bytes from the stubs (fsck).
 * commit_lock held. */
int spill_recount_locked(struct store *s);
/* run.c: rows of q[0..n) still pending, as batch b sees them in st's runs. */
int runs_lookup(struct store *s, struct stable *st, struct rq *q, size_t n, uint64_t b);

#endif
