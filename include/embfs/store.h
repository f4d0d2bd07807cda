/*
 * store/: the persistent pool.  Superblock, table catalog, per-table row
 * index, versioned row slots, group commit and recovery.  Knows nothing of
 * FUSE or of the DRAM cache.
 *
 * Contract:
 * - Every function returns 0 (or a count) on success and -errno on failure.
 * - A table is named by its catalog slot (uint32_t id); ids are stable while
 *   the pool is open and reused only after store_table_release().
 * - store_rows_write() applies a group of row updates.  Each row is
 *   crash-atomic; the whole group is durable when the call returns (four
 *   persist barriers per commit of up to EMB_JOURNAL_CAP rows, fewer rows for
 *   rows of more than 512 bytes).  The group is planned and given its room
 *   whole before the first commit: on an error (ENOSPC, EIO reading a row it
 *   needs, ENOMEM) no row of the group has changed.  A crash in the middle may
 *   leave some commits of a group applied and not others.
 * - Reads and writes may run from many threads; catalog changes serialize on
 *   a catalog lock, commits on a commit lock, readers of a table take its
 *   index lock shared.
 * - Where the pool is not on PMem, persistence is msync of the pool mapping
 *   (see store/pm.c); a persist barrier then costs one fsync of the file.
 */
#ifndef EMBFS_STORE_H
#define EMBFS_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "embfs/layout.h"

struct store; /* an open pool; valid until store_close() */

struct store_mkfs_opts {
	uint64_t size;       /* bytes; 0 = use the existing file/device size */
	const char *label;   /* may be NULL */
	int force;           /* overwrite an existing pool or data */
	const uint8_t *uuid; /* 16 bytes, NULL = random; it seeds the row index's
			      * hash, so a test that replays a seed passes one */
};

/* Format path as an empty pool.  err receives a one-line reason. */
int store_mkfs(const char *path, const struct store_mkfs_opts *o, char *err, size_t errlen);

/* Validate then open a pool.  Validation maps the pool copy-on-write, so a
 * pool that fails it is left byte for byte unchanged. */
int store_open(const char *path, struct store **out, char *err, size_t errlen);

/* Check a pool without opening it for writing: 0 if it is a valid embfs
 * pool, -errno with err set otherwise. */
int store_check(const char *path, char *err, size_t errlen);

/* What a repair found or did, one line (no newline) for each: fixed = 1 when
 * it was repaired (in memory only with STORE_OPEN_PRIVATE), 0 when it is
 * left as found. */
typedef void (*store_note_fn)(void *arg, int fixed, const char *msg);

#define STORE_OPEN_PRIVATE 1u /* the pool is mapped copy-on-write: whatever the open (recovery,
			       * repairs) and later calls change stays in this process, and the
			       * file is never written (fsck.embfs -n) */
#define STORE_OPEN_REPAIR 2u  /* a pool that fails validation is repaired where that needs no
			       * guess (store/repair.c) before it is opened */
struct store_open_opts {
	unsigned flags;       /* STORE_OPEN_* */
	store_note_fn note;   /* told each repair; may be NULL */
	void *arg;
};
/* store_open() with options (o NULL: as store_open).  -EBUSY: another
 * process has the pool open. */
int store_open_ext(const char *path, const struct store_open_opts *o, struct store **out, char *err,
		   size_t errlen);

/* The pool layout and library versions this build uses, one line:
 * "pool layout 2, libpmemobj 1.12.1, liburing 2.3, xxHash 0.8.1". */
const char *store_versions(void);

/* Make everything durable, mark the pool clean and close it. */
void store_close(struct store *s);

/* One persist barrier over everything written so far: 0, or -EIO when the
 * pool file cannot be made durable (see store_health). */
int store_sync(struct store *s);

/* 0 while the pool takes changes; -EIO once persisting it failed (an msync
 * of a pool on a plain file returned an error): from then on reads are
 * served, changes are refused (EROFS; write-back and sync: EIO) until it is
 * opened again, and why is a one-line reason. */
int store_health(struct store *s, char *why, size_t n);

/* ---- catalog ---------------------------------------------------------- */

struct store_attr {
	uint32_t id;
	uint64_t gen;
	uint32_t mode, uid, gid;
	uint32_t dim, row_size, dtype;
	uint64_t size;
	uint64_t nrows;
	uint64_t atime_ns, mtime_ns, ctime_ns;
	int orphan;
	char name[EMB_NAME_MAX + 1];
};

#define STORE_SET_MODE (1u << 0)
#define STORE_SET_UID (1u << 1)
#define STORE_SET_GID (1u << 2)
#define STORE_SET_ATIME (1u << 3)
#define STORE_SET_MTIME (1u << 4)
#define STORE_SET_CTIME (1u << 5)

int store_dtype_parse(const char *name, uint32_t *dtype);
const char *store_dtype_name(uint32_t dtype);
uint32_t store_dtype_size(uint32_t dtype);
/* 0 if dim x dtype is an acceptable row geometry, -EINVAL otherwise. */
int store_geometry_check(uint32_t dim, uint32_t dtype);
/* The largest row id a table of row_size-byte rows can store (the pool's
 * limit on row ids, and the row's end within off_t), and the largest file
 * size (that row's end): writes, truncation and scatters past it get
 * EFBIG (EINVAL for an id in a batched request). */
uint64_t store_max_row(uint32_t row_size);
uint64_t store_max_size(uint32_t row_size);

int store_table_create(struct store *s, const char *name, uint32_t mode, uint32_t uid,
		       uint32_t gid, uint32_t dim, uint32_t dtype, uint32_t *id);
int store_table_lookup(struct store *s, const char *name, uint32_t *id);
int store_table_getattr(struct store *s, uint32_t id, struct store_attr *a);
int store_table_setattr(struct store *s, uint32_t id, const struct store_attr *a, unsigned mask);
/* -EBUSY while a snapshot holds versions of the table, or when it holds
 * rows and the row size would change. */
int store_table_set_geometry(struct store *s, uint32_t id, uint32_t dim, uint32_t dtype);
/* Removes the name; rows stay until store_table_release() (last close). */
int store_table_unlink(struct store *s, const char *name);
/* A table made unlinked (an orphan: freed at its release, or at mount
 * after a crash); label is its name in the catalog only. */
int store_table_create_orphan(struct store *s, const char *label, uint32_t mode, uint32_t uid,
			      uint32_t gid, uint32_t dim, uint32_t dtype, uint32_t *id);
/* Orphan orphan_id takes live table id's name, and id is unlinked (an
 * orphan), in one step: a rename over id of a table that had no name.
 * -ENOENT when id is no longer linked, -EINVAL when orphan_id is not a
 * plain orphan. */
int store_table_replace(struct store *s, uint32_t orphan_id, uint32_t id);
/* Atomic; an existing newname is unlinked in the same step. */
int store_table_rename(struct store *s, const char *oldname, const char *newname);
/* Frees an orphaned table's rows and slot.  No-op for linked tables. */
int store_table_release(struct store *s, uint32_t id);
/* Iterate tables: *cursor starts at 0; returns 1 with a filled, 0 at end. */
int store_table_next(struct store *s, uint32_t *cursor, struct store_attr *a);
/* Set the size; rows past it are dropped, a partial last row zero-filled. */
int store_table_truncate(struct store *s, uint32_t id, uint64_t size);

/* Times of the directories the pool keeps no catalog entry for.  ROOT and
 * SNAPS (.snapshots) change on store_dir_touch(); POOL is the pool's
 * creation (atime, mtime and ctime alike).  atime is not kept: the pool's
 * creation time for all three.  A pool made before directory times were
 * kept shows its creation time until the first touch. */
enum store_dir { STORE_DIR_ROOT, STORE_DIR_SNAPS, STORE_DIR_POOL };
struct store_dir_times {
	uint64_t atime_ns, mtime_ns, ctime_ns;
};
int store_dir_times(struct store *s, enum store_dir which, struct store_dir_times *t);
/* An entry of `which` was added, removed or renamed: mtime and ctime
 * become now (never go back), durable with the next commit or barrier. */
int store_dir_touch(struct store *s, enum store_dir which);
/* Owner, group and permission bits (07777) of ROOT or SNAPS, kept in the
 * pool.  store_dir_perm: 1 with *p filled when they were set, 0 when never
 * set (a pool made before they were kept: the caller shows its defaults),
 * -EUCLEAN when the record is damaged (the caller shows its defaults),
 * -EINVAL for POOL.  store_dir_perm_set: sets all three in one transaction
 * and makes ctime now; 0 or -errno (-EINVAL: POOL, or bits outside 07777). */
struct store_dir_perm {
	uint32_t uid, gid, mode;
};
int store_dir_perm(struct store *s, enum store_dir which, struct store_dir_perm *p);
int store_dir_perm_set(struct store *s, enum store_dir which, const struct store_dir_perm *p);

/* ---- read views --------------------------------------------------------
 *
 * Every read of a table's rows or attributes goes through a view: the table
 * as it is now (live) or as a snapshot holds it.  One code path serves both.
 * A view is a value naming the table by catalog slot and generation (and the
 * snapshot by record slot and generation); kept after the table was freed or
 * the snapshot dropped, it reads -ESTALE, never another table's rows.
 */
struct store_view {
	uint32_t id;         /* the table's catalog slot */
	uint32_t snap;       /* snapshot record slot + 1; 0 = the live table */
	uint64_t gen;        /* the table's generation */
	uint64_t snap_gen;   /* the snapshot's generation (0 for a live view) */
	uint32_t where;      /* set by the caller: store_rows_read() says which rows
			      * are stored outside the pool (STORE_OUT) */
};
/* -ENOENT: no such table (in that snapshot). */
int store_view_live(struct store *s, uint32_t id, struct store_view *v);
int store_view_snap(struct store *s, uint32_t snap_idx, uint32_t id, struct store_view *v);
/* Attributes: a snapshot's as it recorded them (read-only file). */
int store_view_getattr(struct store *s, const struct store_view *v, struct store_attr *a);

/* Rows rows[0..n) as the view sees them into buf (row i at buf + i *
 * row_size; holes read as zeros); stored[i] (if not NULL) says whether row i
 * is stored (1; STORE_OUT if v->where is set and the version read is outside
 * the pool, in a sorted run or on the spill device, so that writing the row
 * takes a new row slot where writing a row in the pool frees the one it
 * replaces), vbatch[i] (if not NULL) the batch id of the version read (0: a
 * hole).  buf == NULL: only stored/vbatch (no bytes, no device read).  Rows
 * on the spill device are read in one io_uring submission.  -EIO if a row is
 * damaged (its version or device record fails its checksum). */
#define STORE_OUT 2
int store_rows_read(struct store *s, const struct store_view *v, const uint64_t *rows, size_t n, void *buf,
		    uint8_t *stored, uint64_t *vbatch);
/* Rows [first, first + n) as store_rows_read() reads them (stored[i] 1 or
 * 0, whatever v->where), except those with skip[i] set (skip may be NULL:
 * none), whose bytes and stored[i] are left as they are.  For large reads (a FUSE read of a range, a copy, a
 * dense gather): rows in sorted runs are found by walking the runs' blocks,
 * not row by row, and the read marks no row as recently used. */
int store_rows_read_range(struct store *s, const struct store_view *v, uint64_t first, size_t n, void *buf,
			  const uint8_t *skip, uint8_t *stored);
/* Smallest row >= from the view sees: 1 with *found set, 0 if none. */
int store_row_next(struct store *s, const struct store_view *v, uint64_t from, uint64_t *found);
/* Smallest row >= from that the view does not see (a hole). */
int store_row_hole(struct store *s, const struct store_view *v, uint64_t from, uint64_t *hole);
/* Rows of live table id whose newest version in the pool is of a batch above
 * `batch` (changed or deleted since a snapshot of that batch: tombstones
 * count), ascending, in a malloc'd *rows (*n of them; may be NULL when 0).
 * One walk of the table's index reading version headers, no row bytes.
 * -EAGAIN if the table has rows in spill runs, whose batches this does not
 * see.  Rows written and still in a row cache above are not seen either. */
int store_rows_since(struct store *s, uint32_t id, uint64_t batch, uint64_t **rows, size_t *n);

/* ---- rows ------------------------------------------------------------- */

/* Raise the size to at least size and set mtime/ctime, without a commit: the
 * new values become durable with the next commit or barrier. */
int store_table_extend(struct store *s, uint32_t id, uint64_t size);

/* One row update: bytes [off, off+len) of the row become data; data == NULL
 * deletes the row (off/len ignored).  Bytes of the row outside the range keep
 * their stored value (zero for a new row). */
struct store_rowop {
	uint64_t row;
	uint32_t off;
	uint32_t len;
	const void *data;
	uint64_t batch;  /* batch id the bytes were written in; 0 = the current one */
};

/* Apply ops as one group commit.  size_hint: the file size becomes
 * max(size, size_hint) in the same commit.  Returns 0 or -errno. */
int store_rows_write(struct store *s, uint32_t id, const struct store_rowop *ops, size_t n,
		     uint64_t size_hint);

/* A bulk load: rows [first, first + n) of table id, whole (row i at rows +
 * i * row size), written in batch `batch` straight into a sorted run on the
 * spill device, the size raised to cover them.  Only where that is sound
 * and the device has room: a table without a row in the pool, the rows at
 * or past its end, a spill device with runs (store/tier/bulk.c).  1 taken,
 * 0 not (write them another way), or -errno.  Durable with the next
 * store_sync(), like a write-back cache's rows. */
int store_rows_append(struct store *s, uint32_t id, uint64_t first, size_t n, const void *rows,
		      uint64_t batch);

/* store_rows_write() of rows a write-back cache promised room for
 * (store_space_reserve): they may use the promised slots. */
int store_rows_writeback(struct store *s, uint32_t id, const struct store_rowop *ops, size_t n);

/* Promise room for rows of table id (rows of row_size) a write-back cache
 * holds but has not written yet (rows > 0; -ENOSPC when the pool cannot
 * take them), or give it back (rows < 0) once they are written or dropped.
 * Promised rows are sure to find a slot and index room at write-back, and
 * a link to the version they replace when a snapshot keeps it (see
 * store/slab.c). */
int store_space_reserve(struct store *s, uint32_t id, uint32_t row_size, int64_t rows);
/* Rows promised for table id are about to be stamped with the current
 * batch (where the batch is read: no snapshot may be taken in between).
 * While a snapshot is live, their write-back may keep the versions they
 * replace: a promise made before it was taken gets room for a link now.
 * A snapshot may be dropped meanwhile: its links stay promised until the
 * rows' promise is given back.  0, or -ENOSPC (the rows are not written). */
int store_space_links(struct store *s, uint32_t id);

/* ---- batches and snapshots ------------------------------------------
 *
 * Every row version carries the batch id it was written in.  A snapshot
 * records the current batch id B and advances it to B + 1: it holds, for each
 * table that existed then, the newest version of each row with batch <= B.
 * Commits keep (chain) a replaced version while a live snapshot needs it;
 * store_snap_drop() frees what only the dropped snapshot held.  A snapshot
 * is created O(tables): the catalog is copied, no row is.
 */
uint64_t store_batch_get(struct store *s);
/* -EINVAL if b is below the current batch (batches never go back). */
int store_batch_set(struct store *s, uint64_t b);

struct store_snap {
	uint32_t idx;          /* record slot, stable while the snapshot lives */
	uint64_t gen;
	uint64_t batch;
	uint64_t created_ns;
	uint64_t excl_bytes;
	uint32_t ntables;
	int durable;
	char name[EMB_NAME_MAX + 1];
};
/* durable: every row the snapshot holds is already in the pool (else it is
 * dropped at the next mount unless store_snap_set_durable() is called).
 * store_snap_set_durable names the snapshot by record slot and generation
 * (from store_snap_get/next): -ENOENT if it was dropped meanwhile. */
int store_snap_create(struct store *s, const char *name, int durable, struct store_snap *out);
int store_snap_set_durable(struct store *s, uint32_t idx, uint64_t gen);
int store_snap_drop(struct store *s, const char *name);
/* The count of rows table id holds in pending snapshot idx (its users
 * count rows the store does not hold yet): -ENOENT when it is not pending
 * or has no such table. */
int store_snap_table_count(struct store *s, uint32_t idx, uint32_t id, uint64_t nrows);

/* A restore or rollback in progress (store/intent.c): recorded before the
 * first row changes, cleared when the last is durable; the pool's user
 * finishes a pending one before serving.  store_snap_drop() of its
 * snapshot gives -EBUSY while it is pending. */
#define STORE_INTENT_RESTORE EMB_INTENT_RESTORE   /* one live table (table_gen) */
#define STORE_INTENT_ROLLBACK EMB_INTENT_ROLLBACK /* every table */
struct store_intent {
	uint32_t kind;
	uint32_t snap_idx;  /* the snapshot's record, and its generation */
	uint64_t snap_gen;
	uint64_t table_gen; /* _RESTORE: the live table's inode generation */
};
/* 1 and *in filled when one is pending, 0 when none, -EUCLEAN when the
 * record is damaged. */
int store_intent_get(struct store *s, struct store_intent *in);
/* -EBUSY when one is pending already. */
int store_intent_set(struct store *s, const struct store_intent *in);
int store_intent_clear(struct store *s);
int store_snap_lookup(struct store *s, const char *name, struct store_snap *out);
int store_snap_get(struct store *s, uint32_t idx, struct store_snap *out);
/* Iterate: *cursor from 0; 1 with out filled, 0 at the end. */
int store_snap_next(struct store *s, uint32_t *cursor, struct store_snap *out);

/* Tables inside a snapshot, by their id (catalog slot, as when taken). */
int store_snap_table_lookup(struct store *s, uint32_t idx, const char *name, uint32_t *id);
int store_snap_table_next(struct store *s, uint32_t idx, uint32_t *cursor, struct store_attr *a);
/* Live snapshots holding table id (geometry cannot change while > 0). */
int store_table_snaps(struct store *s, uint32_t id);

/* ---- pool status ------------------------------------------------------ */

struct store_stats {
	uint64_t pool_size;     /* bytes */
	uint64_t used_bytes;    /* row slots in use + index + catalog */
	uint64_t index_bytes;   /* of them the row index (segments, directories) */
	uint64_t free_bytes;    /* what new rows can still use (estimate) */
	uint64_t tables;
	uint64_t rows;
	uint64_t commits;
	uint64_t barriers;
	uint64_t transactions; /* libpmemobj transactions (metadata, slabs, reserve) */
	uint64_t rows_written;
	uint64_t rows_read;
	uint64_t slabs;
	uint64_t snapshots;
	int is_pmem;
	int recovered;          /* mount found an unclean shutdown */
	uint64_t checksum_errors; /* damaged versions or index buckets met (each gave EIO) */
	char label[EMB_LABEL_MAX + 1];
	uint8_t uuid[16];
};
void store_stats_get(struct store *s, struct store_stats *st);

/* ---- spill tier (store/tier/: device.c, mover.c, run.c) ----------------------
 *
 * With a spill device attached row versions may take up to `high` percent
 * of the pool.  When they come near it a mover thread evicts cold rows (with
 * the versions snapshots hold) into sorted runs on the device and takes them
 * out of the pool's index, until they take `low` percent; old versions of
 * hot rows go to append-only segments behind 40-byte stubs (with
 * stubs_only, every spilled version does).  Runs are merged, stale stub
 * segments compacted; rows read again from stubs are promoted back.
 */
struct store_spill_conf {
	const char *path;      /* file, directory (for embfs-<pool uuid>.spill) or block device; NULL = none */
	uint64_t size;         /* bytes for a new spill file (0: the file's or device's size) */
	uint32_t qd;           /* io_uring queue depth of one read submission (0: 32) */
	uint32_t high, low;    /* percent of the pool for row versions (0: 30 and 25) */
	uint32_t compact_mbps; /* compaction I/O budget in MB/s (0: 64) */
	int manual;            /* no mover thread: store_spill_run() does its work (fsck.embfs,
				* tests; the daemon, until store_spill_start() after its fork) */
	int stubs_only;        /* no sorted runs: every spilled version keeps a stub and its
				* index entry in the pool (the tier before runs; the daemon's
				* spill_runs=0, tests, benches) */
};
/* Attach the spill device named by c->path and start the mover.  A pool that
 * keeps rows on a spill device refuses c->path == NULL, a missing device or
 * another pool's (err says which).  Call once, right after store_open(). */
int store_spill_attach(struct store *s, const struct store_spill_conf *c, char *err, size_t errlen);

/* Start the mover of a device attached with manual = 1 (after a fork). */
int store_spill_start(struct store *s);

#define STORE_SPILL_MOVE 1u     /* spill down to the low watermark */
#define STORE_SPILL_ALL 2u      /* ... and with MOVE: every version that can go */
#define STORE_SPILL_PROMOTE 4u  /* promote queued hot rows */
#define STORE_SPILL_COMPACT 8u  /* compact the most stale segment, whatever its staleness */
/* Do the mover's work now.  Returns versions moved, or -errno. */
int store_spill_run(struct store *s, unsigned what);

struct store_spill_stats {
	int attached;
	int recounting;
	char path[256];
	uint32_t qd;
	uint64_t size, seg_size, segs, segs_free, segs_open, segs_sealed;
	uint64_t segs_reserved;    /* free segments kept for merges (not for new rows) */
	uint64_t footprint;        /* bytes written to segments not yet freed */
	uint64_t free_bytes;       /* free segments and the open one's unwritten end */
	uint64_t live_bytes, live_versions;
	uint64_t pmem_row_bytes, pmem_versions, pmem_high, pmem_low;
	uint64_t pmem_slab_free;   /* bytes of row slots free in the row slabs */
	uint64_t spilled, spill_writes, spill_write_bytes, promoted;
	uint64_t reads, read_ios, read_bytes, read_iops;
	uint64_t compacted_segs, compact_moved, compact_bytes, compact_seg_done, compact_seg_total;
	uint64_t csum_errors, waits, full;
	uint64_t slabs_returned;   /* row slabs given back to the heap for stubs and index */
	uint64_t mover_start;      /* row bytes at which the mover starts (pmem_low: stops;
				    * both lower by the same bytes for writers' large requests) */
	uint64_t evicts_between;   /* evictions made in the middle of a merge */
	/* sorted runs (store/tier/run.c) */
	uint64_t runs, runs_dead, run_levels, run_rows, run_bytes;
	uint64_t run_pool_bytes;   /* their records in the pool */
	uint64_t run_meta_bytes;   /* segment lists, fences and filters (device, and DRAM once read) */
	uint64_t run_evicted, run_reads, run_blocks, bloom_fp;
	uint64_t run_ra_loads;     /* requests that read read-ahead windows of runs */
	uint64_t run_ra_blocks;    /* blocks requests found in read-ahead windows */
	uint64_t merges, merge_in_bytes, merge_out_bytes;
	uint64_t merge_moves;      /* runs moved down a level without a rewrite (disjoint rows) */
	uint64_t sweep_parts;      /* parts a sweep wrote: a merge of a whole table, a row range at a time */
	uint64_t sweeping;         /* 1 while a sweep is under way */
	uint64_t bulk_runs, bulk_rows; /* runs a bulk load wrote straight (store_rows_append), their rows */
};
void store_spill_stats_get(struct store *s, struct store_spill_stats *st);

/* Segment k of the spill device as the pool's segment table has it (tests,
 * tools).  0, -ENODEV without a device, -ERANGE past the last segment. */
struct store_spill_seg {
	uint32_t state;        /* EMB_SEG_FREE, _OPEN or _SEALED */
	uint32_t nlive;        /* records stubs point at */
	uint64_t fill;         /* bytes written */
	uint64_t live;         /* bytes of the records stubs point at */
};
int store_spill_seg_get(struct store *s, uint64_t k, struct store_spill_seg *g);

/* Deep consistency check of an open pool (walks every row: for tests and
 * repair tools, never on the mount path).  Counts index entries whose version
 * is damaged (wrong row/table, checksum mismatch, not an allocated slot),
 * slots referenced twice, and allocated slots nothing references (leaks). */
struct store_fsck {
	uint64_t rows, bad_versions, double_refs, leaked_slots, bad_counts;
	uint64_t free_refs;         /* of bad_versions: sound versions (or links) in slots marked free */
	uint64_t stubs, bad_stubs;  /* spilled versions; ones pointing outside written segments */
	uint64_t seg_live_off;      /* segments whose live count disagrees with the stubs */
	uint64_t runs, bad_runs;    /* sorted runs; those whose header, arrays, segments or blocks are wrong */
};
int store_fsck(struct store *s, struct store_fsck *r);

/* store_fsck() with options.  With repair, what can be repaired without
 * guessing is: leaked slots freed (unless a damaged chain may hide a
 * reference to them), slots marked free that hold a sound version or link
 * the index refers to marked allocated (a lost bit), a table's row count
 * recomputed from its index, the spill segments' live counts recounted
 * from the stubs; r->fixed_* count
 * what was done, the other fields what was found.  note (may be NULL) is
 * told one line per table with damage and per repair; progress (may be
 * NULL) is called with the rows walked and the rows in all now and then. */
struct store_fsck_opts {
	int repair;
	store_note_fn note;
	void (*progress)(void *arg, uint64_t done, uint64_t total);
	void *arg;
};
struct store_fsck_fixed {
	uint64_t slots, counts, segs;
	uint64_t bits; /* lost bits set again (free_refs repaired) */
};
int store_fsck_run(struct store *s, const struct store_fsck_opts *o, struct store_fsck *r,
		   struct store_fsck_fixed *fixed);

#endif
