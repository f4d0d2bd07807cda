/*
 * Private to fs/: the daemon's state, reached through the request userdata,
 * and what each file of fs/ offers the others.  Calls go down this list:
 *
 *   main.c    the daemon: options, pool, mount, worker loop
 *   ll.c      the FUSE op table: decodes each inode (ino.h) and hands the
 *             request to the file that owns that kind of inode, through
 *             the kind's ops table (struct fs_kind_ops, defined by its owner)
 *   root.c    the root directory: live tables by name, listing, statfs
 *   table.c   table files, live and in snapshots: open, read, write, seek,
 *             attributes, xattrs, punch
 *   copy.c    copy_file_range between tables, inside the daemon
 *   relay.c   a table's geometry set while it holds rows of another size:
 *             its bytes cut again, into a table that takes its name; the
 *             kernel's inode forwarded to it
 *   snap.c    .snapshots and its directories: take, drop, list, sync
 *   dview.c   .snapshots/A/.delta/B/TABLE: deltas as sparse files
 *   ctl.c     .embfs and its control files (stats.c renders stats and
 *             metrics)
 *   stats.c   .embfs/stats and .embfs/metrics: one walk, two renderings
 *   restore.c .embfs/restore: a table or the whole mount back to a snapshot
 *   delta.c   .embfs/delta: the rows changed between two snapshots
 *   changes.c the rows that may differ between two views (restore, delta)
 *   batchreq.c  .embfs/rows: gather, scatter, push, prefetch of many rows
 *             (its FUSE entry points, the requests)
 *   batch.c   .embfs/rows's targets, prefetch thread, page cache
 *             invalidations and stats (batch_int.h: what the two share)
 *   pcache.c  the kernel's pages of tables against scatters
 *   attr.c    attributes of every inode, table views, directory listings
 *   perm.c    who may do what: owners and modes of the directories
 *   base.c    helpers every file may call (read views, readdir buffers,
 *             control-file words, the restore gate, the inode forwarding
 *             of a re-lay, freeing an unlinked table), calling none of them
 *
 * Every file of fs/ may reply to the kernel (once per request); functions
 * that do not take a request return 0 or -errno.
 */
#ifndef EMBFS_FS_H
#define EMBFS_FS_H

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#include "embfs/front.h"
#include "ino.h"

#define FS_TIMEOUT 1.0 /* attribute and entry timeout, seconds */

struct embfs_conf {
	char *pool;
	char *pidfile;
	char *dtype;
	char *cache_size;
	unsigned dirty_age_ms;
	unsigned dim;
	unsigned threads;
	char *spill;
	char *spill_size;
	char *read_ahead;
	unsigned spill_qd, spill_high, spill_low, spill_compact_mbps, spill_runs;
	unsigned follow_cpu; /* follow.c */
	unsigned given; /* bit k: numeric option k (main.c's numopts) was given */
	int show_help;
	int show_version;
};

struct embfs {
	struct front fr;            /* the cache layer: fs/'s one door below (embfs/front.h) */
	uint64_t cache_bytes;
	struct fuse_session *se;
	struct embfs_conf conf;
	uint32_t def_dim, def_dtype;
	_Atomic uint64_t *nlookup;  /* kernel references per table id */
	_Atomic uint64_t n_read, n_write, n_read_bytes, n_write_bytes, n_fsync, n_snaps;
	_Atomic uint64_t n_copy, n_copy_bytes, n_copy_rows, n_copy_geometry; /* copy.c */
	_Atomic uint64_t n_relays, n_relay_rows; /* relay.c */
	/* relay.c: a live table replaced by a re-lay forwards the inode the
	 * kernel holds (fwd[its id]) to the table now under its name, whose
	 * name gives that inode (rev[new id]); both id + 1, 0 = none, indexed
	 * by table id, changed under alias_mu */
	_Atomic uint32_t *fwd, *rev;
	_Atomic uint32_t *users; /* relay.c: reads in flight per table id (alias_get) */
	pthread_mutex_t alias_mu;
	pthread_mutex_t restore_lock; /* restore.c: one restore at a time */
	char restore_last[1024];      /* protected by restore_lock */
	/* restore.c: changes to tables and to the namespace hold gate_rw shared
	 * and fail with EBUSY while `restoring` names their table (GATE_ALL: a
	 * rollback, every table and the namespace); a restore takes it
	 * exclusive to wait out changes in flight */
	pthread_rwlock_t gate_rw;
	_Atomic uint32_t restoring; /* GATE_NONE, a table id or GATE_ALL */
	/* relay.c: the table being re-laid (GATE_NONE): its changes fail, as
	 * a restore's, but a snapshot may be taken (the re-lay's new table
	 * is unlinked until it takes the name, in one step) */
	_Atomic uint32_t relaying;
	_Atomic uint64_t n_restore_recovered; /* restores finished at mount */
	pthread_mutex_t dv_lock;    /* dview.c: the deltas' answers kept */
	struct dres *dv[32];        /* protected by dv_lock */
	uint64_t dv_tick;           /* protected by dv_lock */
	struct batch *batch;        /* batch.c: .embfs/rows threads and counters */
	struct pcache *pc;          /* pcache.c: stale kernel pages after scatters */
	int ready_fd; /* main.c: the waiting parent's pipe until daemon_ready(), else -1 */
	/* main.c: the kernel's read-ahead for this mount (read_ahead=), set
	 * once INIT is answered (fs_read_ahead); what it is then, KiB (0:
	 * unknown) */
	char *mountpoint;
	uint64_t ra_bytes;
	_Atomic int ra_done;
	_Atomic long ra_kb;
};

static inline struct embfs *fs_of(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

/* ll.c */
extern const struct fuse_lowlevel_ops embfs_ops;

/* What one kind of inode (ino.h's enum fs_kind) does: one table per kind,
 * defined next to the code that owns the kind; ll.c picks the table by the
 * kind of the request's inode.  A NULL op is one the kind does not have:
 * ll.c answers it with that op's errno (lookup, readdir: ENOTDIR; open,
 * read: EISDIR; write: EROFS inside .snapshots, else EBADF; lseek: EINVAL;
 * release: 0).  The ops that change the namespace, attributes or xattrs
 * concern one kind each: ll.c checks the kind and calls its owner. */
struct fs_kind_ops {
	void (*lookup)(fuse_req_t req, fuse_ino_t parent, const char *name);
	void (*readdir)(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off);
	void (*open)(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
	void (*read)(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi);
	void (*write)(fuse_req_t req, fuse_ino_t ino, const char *data, size_t size, off_t off,
		      struct fuse_file_info *fi);
	void (*lseek)(fuse_req_t req, fuse_ino_t ino, off_t off, int whence, struct fuse_file_info *fi);
	void (*release)(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
	int gated; /* a write waits out a restore of its table (ll.c's gate, by the inode's id) */
};
extern const struct fs_kind_ops root_kind;      /* root.c: FS_ROOT */
extern const struct fs_kind_ops table_kind;     /* table.c: FS_TABLE */
extern const struct fs_kind_ops snaptable_kind; /* table.c: FS_SNAPTABLE */
extern const struct fs_kind_ops snaps_kind;     /* snap.c: FS_SNAPS */
extern const struct fs_kind_ops snapdir_kind;   /* snap.c: FS_SNAPDIR */
extern const struct fs_kind_ops dview_dir_kind; /* dview.c: FS_DDIR, FS_DPAIR, FS_DDEL, FS_DCHGD */
extern const struct fs_kind_ops dview_file_kind; /* dview.c: FS_DVIEW, FS_DLIST, FS_DCHG */
extern const struct fs_kind_ops ctl_kind;       /* ctl.c: FS_CTL */
extern const struct fs_kind_ops ctl_stats_kind; /* ctl.c: FS_STATS, FS_METRICS */
extern const struct fs_kind_ops ctl_batchid_kind; /* ctl.c: FS_BATCHID */
extern const struct fs_kind_ops ctl_pid_kind;   /* ctl.c: FS_PID */
extern const struct fs_kind_ops restore_kind;   /* restore.c: FS_RESTORE */
extern const struct fs_kind_ops delta_kind;     /* delta.c: FS_DELTA */
extern const struct fs_kind_ops batch_kind;     /* batchreq.c: FS_ROWS */

/* main.c: the kernel's INIT was answered; a daemon that went to the
 * background tells the waiting parent it mounted (once; then a no-op). */
void daemon_ready(struct embfs *fs);
/* Once, on the first request after INIT: the mount's read-ahead window
 * (read_ahead=).  Cheap after the first call. */
void fs_read_ahead(struct embfs *fs);

/* follow.c: bind this worker thread to the CPU of req's caller (when
 * follow_cpu is on and that CPU is known and allowed). */
void fs_follow_caller(fuse_req_t req);

/* root.c: the root directory (parent is the root; names checked for length). */
void root_lookup(fuse_req_t req, fuse_ino_t parent, const char *name);
void root_create(fuse_req_t req, const char *name, mode_t mode, struct fuse_file_info *fi);
void root_unlink(fuse_req_t req, const char *name);
void root_rmdir(fuse_req_t req, const char *name);
void root_rename(fuse_req_t req, const char *name, const char *newname, unsigned int flags);
void root_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off);
void root_statfs(fuse_req_t req);

/* table.c: table files.  ino is a table file (fs_ino_is_table); the ops that
 * change a table take live tables only (ll.c answers EROFS for the rest). */
void table_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void table_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi);
void table_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence, struct fuse_file_info *fi);
void table_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size);
void table_listxattr(fuse_req_t req, size_t size);
void table_removexattr(fuse_req_t req, const char *name);
void table_write(fuse_req_t req, uint32_t id, const char *data, size_t size, off_t off,
		 struct fuse_file_info *fi);
void table_setattr(fuse_req_t req, uint32_t id, struct stat *attr, int to_set);
/* 1 when the geometry change needs a re-lay (table_relay: *dim x *dtype,
 * nothing replied), else 0 (replied). */
int table_setxattr(fuse_req_t req, uint32_t id, const char *name, const char *value, size_t size,
		   int flags, uint32_t *dim, uint32_t *dtype);
void table_fallocate(fuse_req_t req, uint32_t id, int mode, off_t off, off_t len);
/* copy.c: copy_file_range into live table id from table ino_in (live or a
 * snapshot's), served inside the daemon. */
void table_copy_range(fuse_req_t req, fuse_ino_t ino_in, off_t off_in, uint32_t id, fuse_ino_t ino_out,
		      off_t off_out, size_t len, int flags);
/* relay.c: set table id's geometry when it holds rows of another size
 * (the gate closed to its changes meanwhile): 0 or -errno. */
int table_relay(struct embfs *fs, uint32_t id, uint32_t dim, uint32_t dtype);
/* base.c: the inode forwarding relay.c sets.  alias_live: the live table
 * behind the kernel's inode of table id (itself unless a re-lay replaced
 * it); alias_kernel: the id whose inode the kernel holds for live table
 * id; alias_ino: ino with a table's forwarded; alias_drop: the kernel
 * forgot table kid's inode: its forwarding ends; the table it forwarded to,
 * or GATE_NONE. */
uint32_t alias_live(struct embfs *fs, uint32_t id);
uint32_t alias_kernel(struct embfs *fs, uint32_t id);
fuse_ino_t alias_ino(struct embfs *fs, fuse_ino_t ino);
uint32_t alias_drop(struct embfs *fs, uint32_t kid);
/* A read's inode: alias_ino's, counted as a user of that table until
 * alias_put(*held) (a re-lay frees the old rows once they have none). */
fuse_ino_t alias_get(struct embfs *fs, fuse_ino_t asked, uint32_t *held);
void alias_put(struct embfs *fs, uint32_t held);
/* base.c: free unlinked table id, which the kernel no longer references
 * (rows a snapshot holds written back first): 0 or -errno, also said on
 * stderr. */
int table_free_unlinked(struct embfs *fs, uint32_t id);
/* A table as one view sees it: the view and its attributes (copy.c,
 * restore.c, delta.c). */
struct tview {
	struct store_view v;
	struct store_attr a;
};
/* base.c: the gate of changes (see struct embfs; restore.c closes it).  id: the table a
 * change is to, or GATE_NS for a create, unlink or rename in the root. */
#define GATE_NONE UINT32_MAX
#define GATE_ALL (UINT32_MAX - 1)
#define GATE_NS (UINT32_MAX - 2)
#define GATE_ANY (UINT32_MAX - 3) /* a snapshot: refused while any restore runs */
int restore_gate_enter(struct embfs *fs, uint32_t id); /* 0, or -EBUSY and not entered */
void restore_gate_leave(struct embfs *fs);
/* restore.c: at mount, before serving: finish a restore or rollback a crash
 * interrupted (0, or -errno: it stays pending and its tables refuse changes). */
int restore_recover(struct embfs *fs);
/* base.c: a control file's request, n names separated by single spaces
 * (a trailing newline is fine), written at offset 0: 0 or -EINVAL. */
int ctl_words(const char *data, size_t size, off_t off, char (*w)[EMB_NAME_MAX + 1], int n);
/* changes.c: the rows that may differ between an older snapshot's view a
 * (batch ba) and a later view b of the same table (a later snapshot's, or
 * the live table's, written back), ascending, to fn CHANGES_CHUNK at most at
 * a time.  fast_ok: live table lid is a's table; then, without spill runs,
 * only rows changed since ba (*fast = 1), else every row a or b stores. */
#define CHANGES_CHUNK 4096u
int changes_walk(struct embfs *fs, const struct store_view *a, const struct store_view *b, int fast_ok,
		 uint32_t lid, uint64_t ba, int (*fn)(void *, const uint64_t *, uint32_t), void *arg, int *fast);
/* restore.c: .embfs/restore ("SNAPSHOT TABLE" written: a restore in place). */
/* dview.c: .snapshots/A/.delta/B/TABLE and .deleted/TABLE (see there). */
int dview_stat(struct embfs *fs, struct fs_ino k, struct stat *st, uint64_t *gen);
void dview_lookup(fuse_req_t req, fuse_ino_t parent, const char *name);
void dview_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off);
void dview_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void dview_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi);
void dview_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence, struct fuse_file_info *fi);
void dview_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void dview_forget_all(struct embfs *fs);
/* delta.c: the rows of `table` changed from snapshot an to bn (a later
 * snapshot, or "-": the live table, written back first), ascending, host
 * order: ch the rows bn stores in another version than an or an lacks, del
 * the rows an stores and bn does not; b is bn's table.  Free with
 * delta_ids_free. */
struct delta_ids {
	uint64_t *ch, *del;
	size_t nch, ndel;
	uint64_t batch_a;
	struct tview b;
};
int delta_ids(struct embfs *fs, const char *an, const char *bn, const char *table, struct delta_ids *out);
void delta_ids_free(struct delta_ids *d);
void restore_write(fuse_req_t req, fuse_ino_t ino, const char *data, size_t size, off_t off,
		   struct fuse_file_info *fi);
void restore_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi);
/* delta.c: .embfs/delta ("A B TABLE" written, B a snapshot or "-" for the
 * live table; then read: the rows changed and deleted between them). */
void delta_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void delta_write(fuse_req_t req, fuse_ino_t ino, const char *data, size_t size, off_t off,
		 struct fuse_file_info *fi);
void delta_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi);
void delta_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
/* batch.c: queue an invalidation of table inode ino's kernel page cache
 * and attributes (sent by the notifier thread); its seq, or 0 when none was
 * queued (no memory: the attributes time out, the pages stay). */
uint64_t batch_inval(struct embfs *fs, uint64_t ino);
/* Wait until every invalidation queued up to seq has been sent (the kernel
 * has dropped those pages), at most secs seconds (-ETIMEDOUT).  Not from
 * the notifier thread; from a request thread it needs another to serve the
 * reads and page write-backs the invalidation may wait for. */
int batch_inval_wait(struct embfs *fs, uint64_t seq, unsigned secs);
/* The kernel dropped n references to live table id (no reply). */
void table_forget(struct embfs *fs, uint32_t id, uint64_t n);

/* snap.c: .snapshots (FS_SNAPS) and its directories (FS_SNAPDIR). */
void snap_lookup(fuse_req_t req, fuse_ino_t parent, const char *name);
void snap_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off);
void snap_mkdir(fuse_req_t req, const char *name);
void snap_rmdir(fuse_req_t req, const char *name);
void snap_fsyncdir(fuse_req_t req, fuse_ino_t ino);

/* ctl.c: .embfs and its control files (stats, metrics, batch, pid; rows is batch.c's). */
void ctl_lookup(fuse_req_t req, fuse_ino_t parent, const char *name);
void ctl_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off);
/* .embfs/stats and .embfs/metrics (ino: INO_STATS or INO_METRICS). */
void ctl_stats_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void ctl_stats_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi);
void ctl_stats_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void ctl_batch_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void ctl_batch_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi);
void ctl_batch_write(fuse_req_t req, fuse_ino_t ino, const char *data, size_t size, off_t off,
		     struct fuse_file_info *fi);
void ctl_pid_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void ctl_pid_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi);

/* stats.c: .embfs/stats (metrics = 0) or .embfs/metrics (metrics = 1, the
 * Prometheus text format 0.0.4) rendered into a malloc'd buffer; NULL when
 * out of memory.  Both come from one walk over the counters: every value
 * goes through stats_put() with its definition, so the two files cover the
 * same values. */
char *embfs_stats_render(struct embfs *fs, int metrics, size_t *len);
enum stats_type { STATS_COUNTER, STATS_GAUGE };
struct stats_def {
	const char *key;    /* in .embfs/stats */
	const char *metric; /* in .embfs/metrics, after "embfs_" (counters end in _total) */
	enum stats_type type;
	const char *help;
};
struct stats_out; /* the file being rendered */
void stats_put(struct stats_out *o, const struct stats_def *d, uint64_t v);
/* A value with its definition in place. */
#define STATS_PUT(o, key, metric, type, help, v)                                  \
	do {                                                                      \
		static const struct stats_def d_ = { key, metric, STATS_##type, help }; \
		stats_put(o, &d_, (uint64_t)(v));                                 \
	} while (0)

/* batch.c: .embfs/rows (README "Batched rows"): binary requests, many rows
 * of one table per round trip (the batch id is ctl.c's .embfs/batch).
 * batch_init at INIT (starts the prefetch and page-cache notifier threads),
 * batch_destroy at DESTROY; the others reply to the request. */
int batch_init(struct embfs *fs);
void batch_destroy(struct embfs *fs);
void batch_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void batch_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi);
void batch_write(fuse_req_t req, fuse_ino_t ino, const char *data, size_t size, off_t off,
		 struct fuse_file_info *fi);
void batch_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void batch_stats(struct embfs *fs, struct stats_out *o);

/* pcache.c: keeps pages the kernel caches of a table from bringing back rows
 * a scatter changed behind its back (README "Batched rows").  pc_init at
 * INIT, pc_destroy at DESTROY after batch_destroy; without pc_init every
 * call does nothing (front_write for pc_writepage). */
int pc_init(struct embfs *fs);
void pc_destroy(struct embfs *fs);
/* What a READ or WRITE of a table saw of capturing scatters when it arrived. */
struct pc_io {
	int valid;
	uint32_t capt;
	uint64_t pin_seq;
};
/* A READ or (not write-back) WRITE of table id arrived: the kernel may
 * cache its pages from now on.  Waits while a scatter that captured
 * nothing runs on the table. */
void pc_io_begin(struct embfs *fs, uint32_t id, struct pc_io *io);
/* ... and served (READ) or wrote (WRITE) buf at [off, off + len). */
void pc_io_done(struct embfs *fs, uint32_t id, uint32_t rs, uint64_t off, size_t len, const char *buf,
		const struct pc_io *io);
/* A write-back of cached pages (fi->writepage): apply data at off except
 * the pieces of rows that hold a version a scatter replaced.  0 or -errno. */
int pc_writepage(struct embfs *fs, uint32_t id, uint32_t rs, uint64_t off, size_t len, const char *data);
enum { PC_CAPTURE = 1, PC_NOCAPTURE = 2 };
struct pc_scatter {
	int mode;
	uint32_t id, n;
	uint64_t *rows;
};
/* Around a scatter's row changes (ids[0..n) of table id): begin records
 * what the rows hold if the kernel may cache the table (0, -EAGAIN past the
 * memory bound, -errno; nothing changed on error); end is called once the
 * rows are written, before the invalidation is queued. */
int pc_scatter_begin(struct embfs *fs, struct pc_scatter *sc, uint32_t id, uint32_t rs, const uint64_t *ids,
		     uint32_t n);
void pc_scatter_end(struct embfs *fs, struct pc_scatter *sc);
/* Around fuse_lowlevel_notify_inval_inode of table id (ret: its result). */
uint64_t pc_inval_begin(struct embfs *fs);
void pc_inval_end(struct embfs *fs, uint32_t id, uint64_t start, int ret);
/* Table slot id holds a new table. */
void pc_table_reset(struct embfs *fs, uint32_t id);
void pc_stats(struct embfs *fs, struct stats_out *o);

/* perm.c: owners, groups and modes of the root, .snapshots and the control
 * files that follow .snapshots' (README "Permissions"); set: stored in the
 * pool (0: the defaults of a pool that never had them set). */
struct fs_perm {
	uint32_t uid, gid, mode;
	int set;
};
/* 1 with *p filled when the inode kind has its permissions from perm.c
 * (FS_ROOT, FS_SNAPS, FS_SNAPDIR, FS_BATCHID, FS_RESTORE, FS_DELTA), else 0. */
int perm_get(struct embfs *fs, enum fs_kind kind, struct fs_perm *p);
/* The request's caller may access an inode of p's owner, group and mode
 * for bits (4 read, 2 write, 1 search, or'd), judged as the kernel does
 * with default_permissions: uid 0 passes, then the owner, group
 * (fuse_req_getgroups too) or other bits.  0 or -EACCES. */
int perm_may(fuse_req_t req, const struct fs_perm *p, unsigned bits);

/* attr.c: attributes of every inode. */
/* setattr of the root or .snapshots: mode, owner and group (the kernel has
 * checked who may); anything else gets EPERM. */
void fs_dir_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set);
/* base.c: the view of table file ino (live or in a snapshot) and, if a is not NULL,
 * its attributes; -ENOENT when ino names no table file. */
int fs_view(struct embfs *fs, uint64_t ino, struct store_view *v, struct store_attr *a);
/* Attributes of any inode; *gen (if not NULL): the generation its entry carries. */
int fs_stat(struct embfs *fs, fuse_ino_t ino, struct stat *st, uint64_t *gen);
/* How long the kernel may keep ino's attributes: FS_TIMEOUT, but 0 for
 * .embfs/stats and .embfs/metrics, whose size is that of a text rendered at
 * each stat. */
static inline double fs_attr_timeout(fuse_ino_t ino)
{
	return ino == INO_STATS || ino == INO_METRICS ? 0.0 : FS_TIMEOUT;
}
/* A lookup's (or create's) entry for ino: attributes, generation, timeouts. */
int fs_entry(struct embfs *fs, fuse_ino_t ino, struct fuse_entry_param *e);
/* A lookup's reply: ino's entry, or its errno. */
void fs_reply_entry(fuse_req_t req, fuse_ino_t ino);
/* base.c: a readdir reply being filled: entries at offsets above off, up to size
 * bytes.  fs_dir_begin replies ENOMEM itself and returns 0 when it cannot
 * start; fs_dir_add returns 0 once an entry did not fit (later adds then add
 * nothing); fs_dir_reply sends what was added. */
struct fs_dirbuf {
	fuse_req_t req;
	char *p;
	size_t size, cap;
	off_t off;
	int full;
};
int fs_dir_begin(fuse_req_t req, struct fs_dirbuf *b, size_t size, off_t off);
int fs_dir_add(struct fs_dirbuf *b, const char *name, uint64_t ino, mode_t mode, off_t next);
/* The entries of a fixed listing, at offsets 1, 2, ... */
struct fs_dirent {
	const char *name;
	uint64_t ino;
	mode_t mode;
};
void fs_dir_add_list(struct fs_dirbuf *b, const struct fs_dirent *list, size_t n);
void fs_dir_reply(struct fs_dirbuf *b);


#endif
