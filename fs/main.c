/*
 * embfs daemon: embfs [options] POOL MOUNTPOINT
 * Parses -o options into struct embfs_conf, opens the pool before mounting
 * (so a bad pool is reported on the terminal with a non-zero exit), mounts,
 * then serves requests on a small worker pool (DESIGN.md §5: near the core
 * count).  Also serves `mount -t fuse.embfs POOL MNT` and fstab lines.
 */
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "embfs/size.h"
#include "fs.h"

#define OPT(t, p) { t, offsetof(struct embfs_conf, p), 1 }
static const struct fuse_opt embfs_opts[] = {
	OPT("dim=%u", dim),
	OPT("dtype=%s", dtype),
	OPT("pidfile=%s", pidfile),
	OPT("threads=%u", threads),
	OPT("cache_size=%s", cache_size),
	OPT("dirty_age_ms=%u", dirty_age_ms),
	OPT("spill=%s", spill),
	OPT("spill_size=%s", spill_size),
	OPT("spill_qd=%u", spill_qd),
	OPT("spill_high=%u", spill_high),
	OPT("spill_low=%u", spill_low),
	OPT("spill_compact_mbps=%u", spill_compact_mbps),
	OPT("spill_runs=%u", spill_runs),
	OPT("-h", show_help),
	OPT("--help", show_help),
	OPT("-V", show_version),
	OPT("--version", show_version),
	FUSE_OPT_END
};

static int opt_proc(void *data, const char *arg, int key, struct fuse_args *outargs)
{
	struct embfs_conf *c = data;
	(void)outargs;
	if (key == FUSE_OPT_KEY_NONOPT && !c->pool) {
		c->pool = realpath(arg, NULL);
		if (!c->pool) {
			fprintf(stderr, "embfs: %s: %s\n", arg, strerror(errno));
			return -1;
		}
		return 0;
	}
	return 1;
}

static void usage(const char *prog)
{
	printf("usage: %s [options] POOL MOUNTPOINT\n\n"
	       "embfs options:\n"
	       "    -o dim=N               default dim for new tables (64)\n"
	       "    -o dtype=T             default dtype for new tables (f32)\n"
	       "    -o threads=N           FUSE worker threads (number of cores)\n"
	       "    -o cache_size=SIZE     DRAM row cache (default: 1/8 of RAM, at most 1G; 0 = none)\n"
	       "    -o dirty_age_ms=N      longest a written row stays only in DRAM (5000)\n"
	       "    -o pidfile=PATH        write the daemon's pid once mounted\n"
	       "    -o spill=PATH          SSD spill tier: a file, a directory (for embfs-<uuid>.spill)\n"
	       "                           or a block device; cold row versions move there\n"
	       "    -o spill_size=SIZE     size of a new spill file\n"
	       "    -o spill_qd=N          io_uring queue depth of one read's device reads (32)\n"
	       "    -o spill_high=PCT      share of the pool row versions may take (30)\n"
	       "    -o spill_low=PCT       the mover spills until they take this share (25)\n"
	       "    -o spill_compact_mbps=N  compaction I/O budget in MB/s (64)\n"
	       "    -o spill_runs=0        no sorted runs: a 40-byte stub and an index entry in the pool per spilled row (1)\n\n",
	       prog);
	fuse_cmdline_help();
	fuse_lowlevel_help();
}

/* The command line into fs->conf and cl: 0 to go on, 1 to exit with status
 * 0 now (help, version), -1 on bad input (said on stderr). */
static int parse_args(struct fuse_args *args, struct embfs *fs, struct fuse_cmdline_opts *cl, const char *prog)
{
	fs->conf.dim = 64;
	fs->conf.dirty_age_ms = 5000;
	fs->conf.spill_runs = 1;
	if (fuse_opt_parse(args, &fs->conf, embfs_opts, opt_proc) == -1)
		return -1;
	if (fs->conf.spill_runs > 1) {
		fprintf(stderr, "embfs: spill_runs must be 0 or 1, not %u\n", fs->conf.spill_runs);
		return -1;
	}
	if (fs->conf.show_help) {
		usage(prog);
		return 1;
	}
	if (fs->conf.show_version) {
		printf("embfs layout %u, libfuse %s\n", EMB_LAYOUT_VERSION, fuse_pkgversion());
		return 1;
	}
	if (fuse_parse_cmdline(args, cl) != 0)
		return -1;
	if (!fs->conf.pool || !cl->mountpoint) {
		fprintf(stderr, "embfs: usage: %s [options] POOL MOUNTPOINT (see --help)\n", prog);
		return -1;
	}
	return 0;
}

/* The default geometry of new tables and the cache size the options ask
 * for: 0, or -1 (said on stderr). */
static int check_conf(struct embfs *fs)
{
	fs->def_dim = fs->conf.dim;
	fs->def_dtype = EMB_DT_F32;
	if (fs->conf.dtype && store_dtype_parse(fs->conf.dtype, &fs->def_dtype)) {
		fprintf(stderr, "embfs: unknown dtype '%s' (f32 f16 bf16 f64 i8 u8 i16 i32)\n", fs->conf.dtype);
		return -1;
	}
	if (store_geometry_check(fs->def_dim, fs->def_dtype)) {
		fprintf(stderr, "embfs: bad default geometry dim=%u dtype=%s (row at most %u bytes)\n",
			fs->def_dim, store_dtype_name(fs->def_dtype), EMB_ROW_MAX);
		return -1;
	}
	long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
	fs->cache_bytes = pages > 0 && psize > 0 ? (uint64_t)pages * (uint64_t)psize / 8 : 1ull << 30;
	if (fs->cache_bytes > (1ull << 30))
		fs->cache_bytes = 1ull << 30;
	if (fs->conf.cache_size && embfs_parse_size(fs->conf.cache_size, &fs->cache_bytes)) {
		fprintf(stderr, "embfs: bad cache_size '%s'\n", fs->conf.cache_size);
		return -1;
	}
	if (fs->cache_bytes && fs->cache_bytes < (64u << 10)) {
		fprintf(stderr, "embfs: cache_size below 64K (use 0 for no cache)\n");
		return -1;
	}
	return 0;
}

/* Check (or make) the spill device the options name, on the terminal; its
 * mover thread starts in the daemon, after the fork.  0 or -1. */
static int attach_spill(struct embfs *fs)
{
	char err[512];
	struct store_spill_conf sc = { .path = fs->conf.spill, .qd = fs->conf.spill_qd,
				       .high = fs->conf.spill_high, .low = fs->conf.spill_low,
				       .compact_mbps = fs->conf.spill_compact_mbps, .manual = 1,
				       .stubs_only = fs->conf.spill_runs == 0 };
	if (fs->conf.spill_size && (embfs_parse_size(fs->conf.spill_size, &sc.size) || !sc.size)) {
		fprintf(stderr, "embfs: bad spill_size '%s'\n", fs->conf.spill_size);
		return -1;
	}
	if (fs->conf.spill_size && !fs->conf.spill) {
		fprintf(stderr, "embfs: spill_size= needs spill=PATH\n");
		return -1;
	}
	if (store_spill_attach(fs->st, &sc, err, sizeof(err))) {
		fprintf(stderr, "embfs: %s\n", err);
		return -1;
	}
	if (fs->conf.spill) {
		struct store_spill_stats ss;
		store_spill_stats_get(fs->st, &ss);
		fprintf(stderr, "embfs: spill tier %s: %llu MiB in %llu segments, row versions keep to %llu MiB of the pool\n",
			ss.path, (unsigned long long)(ss.size >> 20), (unsigned long long)ss.segs,
			(unsigned long long)(ss.pmem_high >> 20));
	}
	return 0;
}

/* A FUSE session for fs, mounted at mnt (its handlers of SIGINT and the
 * like set): 0, or -1 with nothing left behind. */
static int mount_session(struct embfs *fs, struct fuse_args *args, const char *mnt)
{
	char opt[PATH_MAX + 64];
	fuse_opt_add_arg(args, "-odefault_permissions");
	snprintf(opt, sizeof(opt), "-ofsname=%s,subtype=embfs", fs->conf.pool);
	for (char *p = opt; *p; p++) /* a comma would split the option list */
		if (*p == ',' && p != strstr(opt, ",subtype"))
			*p = '_';
	fuse_opt_add_arg(args, opt);
	fs->se = fuse_session_new(args, &embfs_ops, sizeof(embfs_ops), fs);
	if (!fs->se)
		return -1;
	if (fuse_set_signal_handlers(fs->se) == 0) {
		if (fuse_session_mount(fs->se, mnt) == 0)
			return 0;
		fuse_remove_signal_handlers(fs->se);
	}
	fuse_session_destroy(fs->se);
	fs->se = NULL;
	return -1;
}

/* In the daemon, after the fork: the spill mover, the row cache (told of the
 * live snapshots: rows they hold need room promised when written), the
 * pidfile.  0, or -1 (said on stderr). */
static int start_daemon(struct embfs *fs)
{
	if (fs->conf.spill && store_spill_start(fs->st) != 0) {
		fprintf(stderr, "embfs: cannot start the spill mover\n");
		return -1;
	}
	if (fs->cache_bytes) {
		struct cache_conf cc = { fs->cache_bytes, fs->conf.dirty_age_ms, 0 };
		fs->cache = cache_create(&cc, &embfs_cache_ops, fs);
		if (!fs->cache) {
			fprintf(stderr, "embfs: cannot allocate a %llu-byte cache\n", (unsigned long long)fs->cache_bytes);
			return -1;
		}
		uint32_t cur = 0;
		struct store_snap sn;
		while (store_snap_next(fs->st, &cur, &sn) == 1)
			cache_set_snapshot(fs->cache, sn.batch);
	}
	/* a restore a crash interrupted is finished before anything is served;
	 * if it fails again its tables refuse changes (restore.c) */
	int rr = restore_recover(fs);
	if (rr < 0)
		fprintf(stderr, "embfs: a pending restore could not be finished: %s (%s)\n", strerror(-rr),
			fs->restore_last);
	if (fs->conf.pidfile) {
		FILE *f = fopen(fs->conf.pidfile, "w");
		if (f) {
			fprintf(f, "%ld\n", (long)getpid());
			fclose(f);
		}
	}
	return 0;
}

/* Serve requests until the unmount: one thread (-s), or a worker pool of
 * threads= (default: the core count).  0, or 1 if the loop failed. */
static int serve(struct embfs *fs, const struct fuse_cmdline_opts *cl)
{
	int ret;
	if (cl->singlethread) {
		ret = fuse_session_loop(fs->se);
	} else {
		struct fuse_loop_config *lc = fuse_loop_cfg_create();
		long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
		unsigned t = fs->conf.threads ? fs->conf.threads : (unsigned)(ncpu > 1 ? ncpu : 2);
		fuse_loop_cfg_set_max_threads(lc, t);
		fuse_loop_cfg_set_idle_threads(lc, t);
		fuse_loop_cfg_set_clone_fd(lc, cl->clone_fd);
		ret = fuse_session_loop_mt(fs->se, lc);
		fuse_loop_cfg_destroy(lc);
	}
	return ret ? 1 : 0;
}

/* Write the cache back (op_destroy did at a clean unmount: this covers a
 * session that never started) and close the pool. */
static void close_pool(struct embfs *fs)
{
	if (fs->cache) {
		int r = cache_flush(fs->cache, -1);
		if (r)
			fprintf(stderr, "embfs: writing back cached rows: %s\n", strerror(-r));
		cache_destroy(fs->cache);
	}
	store_close(fs->st);
}

static void free_conf(struct embfs_conf *c)
{
	free(c->pool);
	free(c->pidfile);
	free(c->dtype);
	free(c->cache_size);
	free(c->spill);
	free(c->spill_size);
}

int main(int argc, char **argv)
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	struct fuse_cmdline_opts cl;
	struct embfs fs;
	char err[512];
	int ret = 1;

	memset(&fs, 0, sizeof(fs));
	memset(&cl, 0, sizeof(cl));
	pthread_rwlock_init(&fs.snap_rw, NULL);
	pthread_mutex_init(&fs.restore_lock, NULL);
	pthread_rwlockattr_t ga;
	pthread_rwlockattr_init(&ga);
	/* a restore waiting for the gate is not starved by a stream of writes */
	pthread_rwlockattr_setkind_np(&ga, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&fs.gate_rw, &ga);
	pthread_rwlockattr_destroy(&ga);
	atomic_store(&fs.restoring, GATE_NONE);
	pthread_mutex_init(&fs.dv_lock, NULL);
	int r = parse_args(&args, &fs, &cl, argv[0]);
	if (r)
		ret = r > 0 ? 0 : 1;
	if (r || check_conf(&fs))
		goto out_args;
	fs.nlookup = calloc(INO_NTABLES, sizeof(*fs.nlookup));
	if (!fs.nlookup)
		goto out_args;
	if (store_open(fs.conf.pool, &fs.st, err, sizeof(err))) {
		fprintf(stderr, "embfs: %s\n", err);
		goto out_args;
	}
	if (attach_spill(&fs))
		goto out_store;
	if (fs.cache_bytes)
		fprintf(stderr, "embfs: %s: row cache %llu MiB, dirty rows written back within %u ms\n",
			fs.conf.pool, (unsigned long long)(fs.cache_bytes >> 20), fs.conf.dirty_age_ms);
	else
		fprintf(stderr, "embfs: %s: no row cache, every write is a commit\n", fs.conf.pool);
	if (mount_session(&fs, &args, cl.mountpoint))
		goto out_store;
	fuse_daemonize(cl.foreground);
	int started = start_daemon(&fs) == 0;
	if (started)
		ret = serve(&fs, &cl);
	fuse_session_unmount(fs.se);
	if (started && fs.conf.pidfile)
		unlink(fs.conf.pidfile);
	fuse_remove_signal_handlers(fs.se);
	fuse_session_destroy(fs.se);
out_store:
	close_pool(&fs);
out_args:
	free(cl.mountpoint);
	free(fs.nlookup);
	free_conf(&fs.conf);
	fuse_opt_free_args(&args);
	return ret;
}
