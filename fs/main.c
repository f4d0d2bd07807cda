/*
 * embfs daemon: embfs [options] POOL MOUNTPOINT
 * Checks every -o option (into struct embfs_conf) and opens the pool before
 * mounting, so that bad input is reported on the terminal with a non-zero
 * exit; mounts; goes to the background (go_background: the parent exits only
 * once the daemon answered the kernel, with the daemon's status if it
 * failed); then serves requests on a small worker pool (near the core
 * count: on 2 cores, batched gathers from 2 clients once ran 17.4 M rows/s
 * with 2 workers and 12 M with 10; the figures of a day are in
 * docs/benchmarks.md).  `mount -t fuse.embfs POOL MNT` and fstab lines reach it
 * through mount.fuse.embfs (util/), which runs it by its installed path.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include "embfs/size.h"
#include "embfs/version.h"
#include "fs.h"

#ifndef EMBFS_PMEMOBJ_VERSION
#define EMBFS_PMEMOBJ_VERSION "?"
#endif
#ifndef EMBFS_URING_VERSION
#define EMBFS_URING_VERSION "?"
#endif

/* The numeric options: each is checked whole (digits only: no sign, no
 * suffix, no overflow) against its range, and the message names the option,
 * the range and what the number counts. */
enum { K_DIM, K_THREADS, K_DIRTY_AGE, K_SPILL_QD, K_SPILL_HIGH, K_SPILL_LOW, K_SPILL_MBPS, K_SPILL_RUNS, K_FOLLOW, K_NUM,
       K_MAX_THREADS = 100 };
#define NUM(n, f, lo, hi, what) { n, offsetof(struct embfs_conf, f), lo, hi, what }
static const struct numopt {
	const char *name;
	size_t off;
	unsigned lo, hi;
	const char *what;
} numopts[K_NUM] = {
	[K_DIM] = NUM("dim", dim, 1, EMB_ROW_MAX, "values per row of a new table"),
	[K_THREADS] = NUM("threads", threads, 1, 1024, "FUSE worker threads"),
	[K_DIRTY_AGE] = NUM("dirty_age_ms", dirty_age_ms, 0, 86400000, "ms, at most a day; 0 = no flusher"),
	[K_SPILL_QD] = NUM("spill_qd", spill_qd, 1, 4096, "SSD reads in flight"),
	[K_SPILL_HIGH] = NUM("spill_high", spill_high, 1, 95, "percent of the pool"),
	[K_SPILL_LOW] = NUM("spill_low", spill_low, 1, 94, "percent of the pool"),
	[K_SPILL_MBPS] = NUM("spill_compact_mbps", spill_compact_mbps, 1, 100000, "MB/s"),
	[K_SPILL_RUNS] = NUM("spill_runs", spill_runs, 0, 1, "0 = stubs only"),
	[K_FOLLOW] = NUM("follow_cpu", follow_cpu, 0, 1, "0 = workers stay where the scheduler puts them"),
};
/* the options that mean nothing without spill= (spill_runs=, a mode, is
 * let through: a pool keeping rows on a device is then refused for want of
 * its device, as without it) */
#define SPILL_NUMS (1u << K_SPILL_QD | 1u << K_SPILL_HIGH | 1u << K_SPILL_LOW | 1u << K_SPILL_MBPS)

#define OPT(t, p) { t, offsetof(struct embfs_conf, p), 1 }
static const struct fuse_opt embfs_opts[] = {
	OPT("dtype=%s", dtype),
	OPT("pidfile=%s", pidfile),
	OPT("cache_size=%s", cache_size),
	OPT("spill=%s", spill),
	OPT("spill_size=%s", spill_size),
	OPT("read_ahead=%s", read_ahead),
	FUSE_OPT_KEY("dim=", K_DIM),
	FUSE_OPT_KEY("threads=", K_THREADS),
	FUSE_OPT_KEY("dirty_age_ms=", K_DIRTY_AGE),
	FUSE_OPT_KEY("spill_qd=", K_SPILL_QD),
	FUSE_OPT_KEY("spill_high=", K_SPILL_HIGH),
	FUSE_OPT_KEY("spill_low=", K_SPILL_LOW),
	FUSE_OPT_KEY("spill_compact_mbps=", K_SPILL_MBPS),
	FUSE_OPT_KEY("spill_runs=", K_SPILL_RUNS),
	FUSE_OPT_KEY("follow_cpu=", K_FOLLOW),
	FUSE_OPT_KEY("max_threads=", K_MAX_THREADS),
	OPT("-h", show_help),
	OPT("--help", show_help),
	OPT("-V", show_version),
	OPT("--version", show_version),
	FUSE_OPT_END
};

/* "NAME=VALUE" of numeric option k into c: 0, or -1 (said on stderr). */
static int num_opt(struct embfs_conf *c, int k, const char *arg)
{
	const struct numopt *o = &numopts[k];
	const char *v = arg + strlen(o->name) + 1;
	char *end = NULL;
	unsigned long n = 0;
	errno = 0;
	if (*v >= '0' && *v <= '9')
		n = strtoul(v, &end, 10);
	if (!end || *end || errno || n < o->lo || n > o->hi) {
		fprintf(stderr, "embfs: %s: want a whole number from %u to %u (%s)\n", arg, o->lo, o->hi, o->what);
		return -1;
	}
	*(unsigned *)(void *)((char *)c + o->off) = (unsigned)n;
	c->given |= 1u << k;
	return 0;
}

static int opt_proc(void *data, const char *arg, int key, struct fuse_args *outargs)
{
	struct embfs_conf *c = data;
	(void)outargs;
	if (key >= 0 && key < K_NUM)
		return num_opt(c, key, arg) ? -1 : 0;
	if (key == K_MAX_THREADS) {
		fprintf(stderr, "embfs: %s: embfs sets libfuse's max_threads itself; use threads=N\n", arg);
		return -1;
	}
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

static unsigned default_threads(void)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	return ncpu > 1 ? (ncpu > 1024 ? 1024 : (unsigned)ncpu) : 2;
}

/* The machine's memory in bytes (0 if unknown) and the default cache size:
 * 1/8 of it, at most 1 GiB. */
static uint64_t ram_bytes(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
	return pages > 0 && psize > 0 ? (uint64_t)pages * (uint64_t)psize : 0;
}

static uint64_t default_cache(void)
{
	uint64_t ram = ram_bytes();
	uint64_t c = ram ? ram / 8 : 1ull << 30;
	return c > (1ull << 30) ? 1ull << 30 : c;
}

/* embfs's options, then the few of libfuse's that matter here (libfuse's
 * own list would offer max_threads, which embfs sets from threads=). */
static void usage(const char *prog)
{
	printf("usage: %s [options] POOL MOUNTPOINT\n\n"
	       "Mounts the embfs pool POOL (made by mkfs.embfs) at MOUNTPOINT and goes to the\n"
	       "background once the mount answers; a mount that fails exits non-zero with its\n"
	       "reason. `embfs-umount MOUNTPOINT` (or `umount MOUNTPOINT` with umount.fuse.embfs\n"
	       "installed) writes every cached row back, unmounts and waits until the pool is free.\n\n"
	       "embfs options (-o NAME=VALUE[,NAME=VALUE...]; default in brackets):\n"
	       "    -o dim=N                 dim of new tables, a row at most %u bytes [64]\n"
	       "    -o dtype=T               dtype of new tables: f32 f16 bf16 f64 i8 u8 i16 i32 [f32]\n"
	       "    -o cache_size=SIZE       DRAM row cache (K/M/G/T suffix), 64K to the machine's\n"
	       "                             memory, 0 = none [1/8 of memory, at most 1G: %lluM here]\n"
	       "    -o dirty_age_ms=N        longest a written row stays only in DRAM, 0 to 86400000;\n"
	       "                             0 = no flusher (until fsync, eviction or unmount) [5000]\n"
	       "    -o threads=N             FUSE worker threads, 1 to 1024 [the core count: %u here]\n"
	       "    -o follow_cpu=0|1        1: a worker serves a read or write on the CPU of the\n"
	       "                             thread that asked (fewer cross-CPU wake-ups) [1]\n"
	       "    -o pidfile=PATH          the daemon's pid, written once mounted, removed at exit\n"
	       "    -o read_ahead=SIZE       the kernel's read-ahead window for the mount, 4K to 64M,\n"
	       "                             0 = leave the kernel's (128K); needs root [1M]\n"
	       "    -o spill=PATH            SSD spill tier: a file, a directory (for\n"
	       "                             embfs-<uuid>.spill in it) or a block device [none]\n"
	       "    -o spill_size=SIZE       size of a new spill file [the file's or device's size]\n"
	       "    -o spill_high=PCT        share of the pool row versions may take, 1 to 95 [30]\n"
	       "    -o spill_low=PCT         the mover spills until they take this share, below\n"
	       "                             spill_high [25]\n"
	       "    -o spill_qd=N            io_uring queue depth of one read's SSD reads, 1 to 4096 [32]\n"
	       "    -o spill_compact_mbps=N  compaction I/O budget in MB/s, 1 to 100000 [64]\n"
	       "    -o spill_runs=0|1        0: no sorted runs, a 40-byte stub and an index entry in\n"
	       "                             the pool per spilled row [1]\n\n"
	       "FUSE options (libfuse's; embfs always adds default_permissions):\n"
	       "    -f                       stay in the foreground, messages on stderr\n"
	       "    -d, -o debug             foreground, and print every request\n"
	       "    -s                       serve on one thread instead of threads=N\n"
	       "    -o allow_other           other users may use the mount (as non-root: needs\n"
	       "                             user_allow_other in /etc/fuse.conf)\n"
	       "    -o allow_root            root may use the mount too\n"
	       "    -o auto_unmount          unmount when the daemon exits, even when killed\n"
	       "    -o clone_fd              one /dev/fuse descriptor per worker thread\n"
	       "    -o ro, noatime, nosuid, nodev, noexec   the kernel's mount options\n"
	       "    -h, --help               this text\n"
	       "    -V, --version            the versions of embfs, its pool layout and libraries\n",
	       prog, EMB_ROW_MAX, (unsigned long long)(default_cache() >> 20), default_threads());
}

static void version(void)
{
	unsigned x = XXH_versionNumber();
	printf("embfs %s\n"
	       "pool layout %u\n"
	       "libfuse %s\n"
	       "libpmemobj %s\n"
	       "liburing %s\n"
	       "xxHash %u.%u.%u\n",
	       EMBFS_VERSION, EMB_LAYOUT_VERSION, fuse_pkgversion(), EMBFS_PMEMOBJ_VERSION, EMBFS_URING_VERSION,
	       x / 10000, x / 100 % 100, x % 100);
}

/* The command line into fs->conf and cl: 0 to go on, 1 to exit with status
 * 0 now (help, version), -1 on bad input (said on stderr). */
static int parse_args(struct fuse_args *args, struct embfs *fs, struct fuse_cmdline_opts *cl, const char *prog)
{
	fs->conf.dim = 64;
	fs->conf.dirty_age_ms = 5000;
	fs->conf.spill_runs = 1;
	fs->conf.follow_cpu = 1;
	if (fuse_opt_parse(args, &fs->conf, embfs_opts, opt_proc) == -1)
		return -1;
	if (fs->conf.show_help) {
		usage(prog);
		return 1;
	}
	if (fs->conf.show_version) {
		version();
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

/* PATH made absolute (the daemon runs in /): a new string, or NULL. */
static char *absolute(const char *path)
{
	char cwd[PATH_MAX], *out;
	if (path[0] == '/')
		return strdup(path);
	if (!getcwd(cwd, sizeof(cwd)) || asprintf(&out, "%s/%s", cwd, path) < 0)
		return NULL;
	return out;
}

/* What the options ask for, checked together: the default geometry of new
 * tables, the cache size, the spill options' company.  0, or -1 (said on
 * stderr). */
static int check_conf(struct embfs *fs)
{
	struct embfs_conf *c = &fs->conf;
	fs->def_dim = c->dim;
	fs->def_dtype = EMB_DT_F32;
	if (c->dtype && front_dtype_parse(c->dtype, &fs->def_dtype)) {
		fprintf(stderr, "embfs: dtype=%s: unknown dtype (f32 f16 bf16 f64 i8 u8 i16 i32)\n", c->dtype);
		return -1;
	}
	if (front_geometry_check(fs->def_dim, fs->def_dtype)) {
		uint32_t esz = front_dtype_size(fs->def_dtype);
		const char *dt = front_dtype_name(fs->def_dtype);
		fprintf(stderr, "embfs: dim=%u dtype=%s: a row would be %llu bytes, more than %u (dim at most %u for %s)\n",
			fs->def_dim, dt, (unsigned long long)fs->def_dim * esz, EMB_ROW_MAX, EMB_ROW_MAX / esz, dt);
		return -1;
	}
	uint64_t ram = ram_bytes();
	fs->cache_bytes = default_cache();
	if (c->cache_size && embfs_parse_size(c->cache_size, &fs->cache_bytes)) {
		fprintf(stderr, "embfs: cache_size=%s: want a size such as 512M or 4G (0 = no cache)\n", c->cache_size);
		return -1;
	}
	if (fs->cache_bytes && fs->cache_bytes < (64u << 10)) {
		fprintf(stderr, "embfs: cache_size=%s: below 64K (0 = no cache)\n", c->cache_size);
		return -1;
	}
	if (ram && fs->cache_bytes > ram) {
		fprintf(stderr, "embfs: cache_size=%s: more than this machine's memory (%llu MiB)\n", c->cache_size,
			(unsigned long long)(ram >> 20));
		return -1;
	}
	if (!c->spill && (c->spill_size || (c->given & SPILL_NUMS))) {
		int k = 0;
		while (k < K_NUM && !(c->given & SPILL_NUMS & (1u << k)))
			k++;
		fprintf(stderr, "embfs: %s= needs spill=PATH\n", c->spill_size || k == K_NUM ? "spill_size" : numopts[k].name);
		return -1;
	}
	unsigned high = c->given & (1u << K_SPILL_HIGH) ? c->spill_high : 30;
	unsigned low = c->given & (1u << K_SPILL_LOW) ? c->spill_low : 25;
	if (c->spill && low >= high) {
		fprintf(stderr, "embfs: spill_low=%u%s must be below spill_high=%u%s\n", low,
			c->given & (1u << K_SPILL_LOW) ? "" : " (default)", high,
			c->given & (1u << K_SPILL_HIGH) ? "" : " (default)");
		return -1;
	}
	fs->ra_bytes = 1u << 20;
	if (c->read_ahead && (embfs_parse_size(c->read_ahead, &fs->ra_bytes) ||
			      (fs->ra_bytes && (fs->ra_bytes < 4096 || fs->ra_bytes > (64u << 20))))) {
		fprintf(stderr, "embfs: read_ahead=%s: want a size from 4K to 64M, or 0 (the kernel's)\n",
			c->read_ahead);
		return -1;
	}
	if (c->pidfile) {
		char *abs = absolute(c->pidfile);
		if (!abs) {
			fprintf(stderr, "embfs: pidfile=%s: %s\n", c->pidfile, strerror(errno));
			return -1;
		}
		free(c->pidfile);
		c->pidfile = abs;
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
		fprintf(stderr, "embfs: spill_size=%s: want a size such as 64G\n", fs->conf.spill_size);
		return -1;
	}
	if (front_spill_attach(&fs->fr, &sc, err, sizeof(err))) {
		fprintf(stderr, "embfs: %s\n", err);
		return -1;
	}
	if (fs->conf.spill) {
		struct store_spill_stats ss;
		front_spill_stats_get(&fs->fr, &ss);
		fprintf(stderr, "embfs: spill tier %s: %llu MiB in %llu segments, row versions keep to %llu MiB of the pool\n",
			ss.path, (unsigned long long)(ss.size >> 20), (unsigned long long)ss.segs,
			(unsigned long long)(ss.pmem_high >> 20));
	}
	return 0;
}

/* The FUSE session for fs (not mounted yet): libfuse's options are checked
 * here, before the pool is opened.  0, or -1 (said on stderr by libfuse). */
static int new_session(struct embfs *fs, struct fuse_args *args)
{
	char opt[PATH_MAX + 64];
	fuse_opt_add_arg(args, "-odefault_permissions");
	snprintf(opt, sizeof(opt), "-ofsname=%s,subtype=embfs", fs->conf.pool);
	for (char *p = opt; *p; p++) /* a comma would split the option list */
		if (*p == ',' && p != strstr(opt, ",subtype"))
			*p = '_';
	fuse_opt_add_arg(args, opt);
	fs->se = fuse_session_new(args, &embfs_ops, sizeof(embfs_ops), fs);
	return fs->se ? 0 : -1;
}

/* The pidfile, created (or truncated) before mounting so that a bad path is
 * said on the terminal: its descriptor, -1 without one, -2 on error. */
static int pidfile_open(struct embfs *fs)
{
	if (!fs->conf.pidfile)
		return -1;
	int fd = open(fs->conf.pidfile, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		fprintf(stderr, "embfs: pidfile=%s: %s\n", fs->conf.pidfile, strerror(errno));
		return -2;
	}
	return fd;
}

/* The parent's side of go_background: wait for the daemon's readiness byte,
 * or for its exit; the status to exit with. */
static int wait_daemon(struct embfs *fs, int fd, pid_t pid)
{
	char c;
	ssize_t n;
	int st;
	do
		n = read(fd, &c, 1);
	while (n < 0 && errno == EINTR);
	if (n == 1)
		return 0;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return 1;
	if (WIFEXITED(st))
		return WEXITSTATUS(st) ? WEXITSTATUS(st) : 1;
	/* killed before it could undo the mount itself */
	fprintf(stderr, "embfs: the daemon died (signal %d) before the mount was ready\n",
		WIFSIGNALED(st) ? WTERMSIG(st) : 0);
	fuse_session_unmount(fs->se);
	return 1;
}

/*
 * To the background, the session mounted.  Threads do not survive a fork,
 * and the cache's flusher, the spill mover and the FUSE workers are threads,
 * so they start in the child, after this; what can fail there could not be
 * reported by libfuse's fuse_daemonize(), whose parent exits 0 at once.  So
 * the parent waits on a pipe: the child writes one byte once it has answered
 * the kernel's INIT (daemon_ready(): threads started, the mount serves), and
 * when it fails first it says why on the terminal (stderr is still the
 * parent's until then), unmounts and closes the pool, exits non-zero, and
 * the parent exits with that status.  Everything that can be checked
 * without threads (options, the pool, the spill device, the mount) is
 * checked before this, in the foreground.  Returns 0 in the daemon (or with
 * -f), -1 if it cannot fork; the parent does not return.
 */
static int go_background(struct embfs *fs, int foreground)
{
	int p[2];
	if (!foreground) {
		if (pipe2(p, O_CLOEXEC)) {
			fprintf(stderr, "embfs: pipe: %s\n", strerror(errno));
			return -1;
		}
		pid_t pid = fork();
		if (pid < 0) {
			fprintf(stderr, "embfs: fork: %s\n", strerror(errno));
			close(p[0]);
			close(p[1]);
			return -1;
		}
		if (pid > 0) {
			close(p[1]);
			_exit(wait_daemon(fs, p[0], pid));
		}
		close(p[0]);
		fs->ready_fd = p[1];
		if (setsid() < 0)
			fprintf(stderr, "embfs: setsid: %s\n", strerror(errno));
	}
	if (chdir("/"))
		fprintf(stderr, "embfs: chdir /: %s\n", strerror(errno));
	return 0;
}

void daemon_ready(struct embfs *fs)
{
	if (fs->ready_fd < 0)
		return;
	int nul = open("/dev/null", O_RDWR);
	if (nul >= 0) {
		dup2(nul, 0);
		dup2(nul, 1);
		dup2(nul, 2);
		if (nul > 2)
			close(nul);
	}
	char ok = 1;
	ssize_t n = write(fs->ready_fd, &ok, 1); /* fails only if the parent is gone */
	(void)n;
	close(fs->ready_fd);
	fs->ready_fd = -1;
}

/* mountinfo's form of a path: space, tab, newline and backslash as \ooo. */
static void mi_escape(const char *in, char *out, size_t n)
{
	size_t k = 0;
	for (; *in && k + 5 < n; in++) {
		if (*in == ' ' || *in == '\t' || *in == '\n' || *in == '\\')
			k += (size_t)snprintf(out + k, n - k, "\\%03o", (unsigned char)*in);
		else
			out[k++] = *in;
	}
	out[k] = 0;
}

/* The device number ("major:minor") of the FUSE mount at path: the last
 * one mounted there.  0, or -1. */
static int mount_dev(const char *path, char *dev, size_t n)
{
	char want[PATH_MAX * 4], line[PATH_MAX * 4 + 512];
	FILE *f = fopen("/proc/self/mountinfo", "re");
	int found = -1;
	if (!f)
		return -1;
	mi_escape(path, want, sizeof(want));
	while (fgets(line, sizeof(line), f)) {
		char mm[64], mp[PATH_MAX * 4];
		const char *sep = strstr(line, " - ");
		if (sscanf(line, "%*s %*s %63s %*s %16383s", mm, mp) == 2 && !strcmp(mp, want) && sep &&
		    !strncmp(sep + 3, "fuse", 4) && strlen(mm) < n) {
			strcpy(dev, mm);
			found = 0;
		}
	}
	fclose(f);
	return found;
}

void fs_read_ahead(struct embfs *fs)
{
	if (atomic_load_explicit(&fs->ra_done, memory_order_acquire) || atomic_exchange(&fs->ra_done, 1))
		return;
	/* The kernel reads ahead a sequential reader's pages in windows of
	 * the mount's read_ahead_kb (128 KiB by default), and a FUSE READ is
	 * at most one window, however large the reader's read(2): so `cat` of
	 * a table was 8 READs per MiB.  libfuse can only lower the window
	 * (max_readahead in INIT), so it is raised in sysfs, for this mount's
	 * own device only, after INIT (whose answer would cap it again); files
	 * opened later read ahead in windows of up to 1 MiB, one READ each
	 * (the kernel's FUSE requests are at most max_pages = 256 pages, which
	 * libfuse asks for with max_write).  Needs root; otherwise the window
	 * stays as it was. */
	char dev[64], path[128];
	long kb = 0;
	if (fs->mountpoint && mount_dev(fs->mountpoint, dev, sizeof(dev)) == 0) {
		snprintf(path, sizeof(path), "/sys/class/bdi/%s/read_ahead_kb", dev);
		if (fs->ra_bytes) {
			FILE *f = fopen(path, "we");
			if (f) {
				fprintf(f, "%llu\n", (unsigned long long)(fs->ra_bytes >> 10));
				fclose(f);
			}
		}
		FILE *f = fopen(path, "re");
		if (f) {
			if (fscanf(f, "%ld", &kb) != 1)
				kb = 0;
			fclose(f);
		}
	}
	atomic_store(&fs->ra_kb, kb);
}

/* In the daemon, after the fork: the spill mover, the row cache (told of the
 * live snapshots: rows they hold need room promised when written), the
 * pid into pidfd (if >= 0).  0, or -1 (said on stderr). */
static int start_daemon(struct embfs *fs, int pidfd)
{
	if (fs->conf.spill && front_spill_start(&fs->fr) != 0) {
		fprintf(stderr, "embfs: cannot start the spill mover\n");
		return -1;
	}
	if (fs->cache_bytes) {
		struct cache_conf cc = { fs->cache_bytes, fs->conf.dirty_age_ms, 0 };
		if (front_cache_start(&fs->fr, &cc)) {
			fprintf(stderr, "embfs: cannot allocate a %llu-byte cache (cache_size=)\n",
				(unsigned long long)fs->cache_bytes);
			return -1;
		}
		uint32_t cur = 0;
		struct store_snap sn;
		while (front_snap_next(&fs->fr, &cur, &sn) == 1)
			cache_set_snapshot(fs->fr.cache, sn.batch);
	}
	/* a restore a crash interrupted is finished before anything is served;
	 * if it fails again its tables refuse changes (restore.c) */
	int rr = restore_recover(fs);
	if (rr < 0)
		fprintf(stderr, "embfs: a pending restore could not be finished: %s (%s)\n", strerror(-rr),
			fs->restore_last);
	if (pidfd >= 0 && dprintf(pidfd, "%ld\n", (long)getpid()) < 0) {
		fprintf(stderr, "embfs: pidfile=%s: %s\n", fs->conf.pidfile, strerror(errno));
		return -1;
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
		if (!lc)
			return 1;
		unsigned t = fs->conf.threads ? fs->conf.threads : default_threads();
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
	if (fs->fr.cache) {
		int r = cache_flush(fs->fr.cache, -1);
		if (r)
			fprintf(stderr, "embfs: writing back cached rows: %s\n", strerror(-r));
	}
	front_close(&fs->fr); /* destroys the cache, closes the pool */
}

static void free_conf(struct embfs_conf *c)
{
	free(c->pool);
	free(c->pidfile);
	free(c->dtype);
	free(c->cache_size);
	free(c->spill);
	free(c->spill_size);
	free(c->read_ahead);
}

int main(int argc, char **argv)
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	struct fuse_cmdline_opts cl;
	struct embfs fs;
	char err[512];
	int ret = 1, pidfd = -1;

	memset(&fs, 0, sizeof(fs));
	memset(&cl, 0, sizeof(cl));
	fs.ready_fd = -1;
	pthread_mutex_init(&fs.restore_lock, NULL);
	pthread_rwlockattr_t ga;
	pthread_rwlockattr_init(&ga);
	/* a restore waiting for the gate is not starved by a stream of writes */
	pthread_rwlockattr_setkind_np(&ga, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&fs.gate_rw, &ga);
	pthread_rwlockattr_destroy(&ga);
	atomic_store(&fs.restoring, GATE_NONE);
	atomic_store(&fs.relaying, GATE_NONE);
	pthread_mutex_init(&fs.dv_lock, NULL);
	int r = parse_args(&args, &fs, &cl, argv[0]);
	if (r)
		ret = r > 0 ? 0 : 1;
	if (r || check_conf(&fs))
		goto out_args;
	fs.nlookup = calloc(INO_NTABLES, sizeof(*fs.nlookup));
	fs.fwd = calloc(INO_NTABLES, sizeof(*fs.fwd));
	fs.rev = calloc(INO_NTABLES, sizeof(*fs.rev));
	fs.users = calloc(INO_NTABLES, sizeof(*fs.users));
	pthread_mutex_init(&fs.alias_mu, NULL);
	if (!fs.nlookup || !fs.fwd || !fs.rev || !fs.users || new_session(&fs, &args))
		goto out_args;
	if (front_open(&fs.fr, fs.conf.pool, err, sizeof(err))) {
		fprintf(stderr, "embfs: %s\n", err);
		goto out_session;
	}
	if (attach_spill(&fs))
		goto out_store;
	pidfd = pidfile_open(&fs);
	if (pidfd == -2)
		goto out_store;
	if (fuse_set_signal_handlers(fs.se))
		goto out_pidfile;
	if (fuse_session_mount(fs.se, cl.mountpoint))
		goto out_signals;
	fs.mountpoint = cl.mountpoint;
	if (fs.cache_bytes)
		fprintf(stderr, "embfs: %s: row cache %llu MiB, dirty rows written back within %u ms\n",
			fs.conf.pool, (unsigned long long)(fs.cache_bytes >> 20), fs.conf.dirty_age_ms);
	else
		fprintf(stderr, "embfs: %s: no row cache, every write is a commit\n", fs.conf.pool);
	if (go_background(&fs, cl.foreground) == 0) {
		if (start_daemon(&fs, pidfd) == 0)
			ret = serve(&fs, &cl);
	}
	fuse_session_unmount(fs.se);
out_signals:
	fuse_remove_signal_handlers(fs.se);
out_pidfile:
	if (pidfd >= 0) {
		close(pidfd);
		unlink(fs.conf.pidfile);
	}
out_store:
	/* before the pool closes: its op_destroy writes the cache back */
	fuse_session_destroy(fs.se);
	fs.se = NULL;
	close_pool(&fs);
out_session:
	if (fs.se)
		fuse_session_destroy(fs.se);
out_args:
	free(cl.mountpoint);
	free(fs.nlookup);
	free(fs.fwd);
	free(fs.rev);
	free(fs.users);
	free_conf(&fs.conf);
	fuse_opt_free_args(&args);
	return ret;
}
