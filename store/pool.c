/*
 * Pool life cycle: format, validate, open (with recovery), close; row reads,
 * SEEK_DATA support and status.
 *
 * Validation never writes: the pool is first opened copy-on-write
 * (libpmemobj's copy_on_write.at_open), checked, and closed; only a pool that
 * passes is opened for real.  libpmemobj itself checks its pool header
 * checksum and heap; embfs checks its superblock's magic, layout version and
 * the checksums of the superblock's static and dynamic parts, then every
 * structure reached from it (store_validate: journal, slab classes, index
 * reserve, catalog and each table's index directory, snapshot records, spill
 * segment table), and validates it again after the real open, before
 * recovery writes anything.
 */

#include <errno.h>
#include <fcntl.h>
#include <libpmem.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "store_int.h"
#include "tier/tier.h"

#define EMB_MIN_POOL (16ull << 20)


int store_validate(struct store *s, char *err, size_t n)
{
	int ret = super_validate(s, err, n);
	if (!ret)
		ret = journal_check(s, err, n);
	if (!ret)
		ret = slab_check(s, err, n);
	if (!ret)
		ret = catalog_check(s, err, n);
	if (!ret)
		ret = snap_check(s, err, n);
	if (!ret)
		ret = spill_table_check(s, err, n);
	return ret;
}

static int super_check(PMEMobjpool *pop, char *err, size_t n)
{
	if (pmemobj_root_size(pop) != sizeof(struct emb_super))
		return store_err(err, n, -EINVAL, "not an embfs pool (no superblock)");
	struct emb_super *sb = pmemobj_direct(pmemobj_root(pop, 0));
	if (memcmp(sb->magic, EMB_MAGIC, 8) != 0)
		return store_err(err, n, -EINVAL, "not an embfs pool (bad superblock magic)");
	if (sb->layout_version != EMB_LAYOUT_VERSION)
		return store_err(err, n, -EINVAL, "embfs layout version %u is not supported (this build: %u)",
			    sb->layout_version, EMB_LAYOUT_VERSION);
	if (super_csum(sb) != sb->static_csum)
		return store_err(err, n, -EIO, "embfs superblock is corrupt (checksum mismatch)");
	if (!sb->journal_off || !sb->snaps_off || !sb->resv_off)
		return store_err(err, n, -EIO, "embfs superblock is corrupt (no journal or snapshot table)");
	return 0;
}

static int target_size(const char *path, uint64_t *size, int *is_dev, char *err, size_t n)
{
	struct stat st;
	if (stat(path, &st) != 0)
		return store_err(err, n, -errno, "%s: %s", path, strerror(errno));
	*is_dev = S_ISCHR(st.st_mode);
	if (!*is_dev && !S_ISREG(st.st_mode))
		return store_err(err, n, -EINVAL, "%s: not a regular file or a devdax device", path);
	*size = (uint64_t)st.st_size;
	return 0;
}

/* libpmemobj quotes bytes of the file (e.g. its signature) in its messages:
 * keep the one-line error printable. */
static const char *printable(const char *m, char *buf, size_t n)
{
	size_t i = 0;
	for (; m && m[i] && i + 1 < n; i++)
		buf[i] = (unsigned char)m[i] >= 0x20 && (unsigned char)m[i] < 0x7f ? m[i] : '?';
	buf[i] = 0;
	return buf;
}

/* Tell the parent which code runs now: 'L' libpmemobj, 'E' embfs's own
 * checks (fd < 0: checking in this process). */
static void check_phase(int fd, char phase)
{
	if (fd >= 0 && write(fd, &phase, 1) != 1)
		return;
}

/* The checks of store_check(), in this process.  *structural = 1 when
 * libpmemobj and the superblock passed and a structure reached from the
 * superblock failed (what store/repair.c may repair). */
static int check_here(const char *path, uint64_t size, int is_dev, int fd, int *structural, char *err,
		      size_t n)
{
	int one = 1, zero = 0, ret;
	char msg[256];
	check_phase(fd, 'L');
	ret = lanes_check(path, size, err, n);
	if (ret)
		return ret;
	pmemobj_ctl_set(NULL, "copy_on_write.at_open", &one);
	pm_enter();
	PMEMobjpool *pop = pmemobj_open(path, EMB_LAYOUT);
	int e = errno;
	pm_leave();
	pmemobj_ctl_set(NULL, "copy_on_write.at_open", &zero);
	if (!pop && (e == EAGAIN || e == EWOULDBLOCK))
		return store_err(err, n, -EBUSY, "%s: pool is in use (another embfs has it open)", path);
	if (!pop)
		return store_err(err, n, e == EINVAL || e <= 0 ? -EINVAL : -e,
			    "%s: not an embfs pool, or damaged (libpmemobj: %s)", path,
			    printable(pmemobj_errormsg(), msg, sizeof(msg)));
	check_phase(fd, 'E');
	ret = super_check(pop, err, n);
	if (!ret) {
		struct emb_super *sb = pmemobj_direct(pmemobj_root(pop, 0));
		if (!is_dev && sb->pool_size > size)
			ret = store_err(err, n, -EIO, "pool is truncated (%llu bytes, made with %llu)",
				   (unsigned long long)size, (unsigned long long)sb->pool_size);
	}
	if (!ret) {
		struct store chk = { .pop = pop, .base = (char *)pop, .sb = pmemobj_direct(pmemobj_root(pop, 0)) };
		chk.map_len = is_dev ? chk.sb->pool_size : size;
		chk.jr = S_PTR(&chk, chk.sb->journal_off);
		ret = store_validate(&chk, err, n);
		*structural = ret != 0;
		if (ret && err && n) {
			char why[256];
			snprintf(why, sizeof(why), "%s", err);
			store_err(err, n, ret, "%s: %s", path, why);
		}
	}
	check_phase(fd, 'L');
	pm_enter();
	pmemobj_close(pop);
	pm_leave();
	if (ret)
		return ret;
	/* libpmemobj's own consistency check: its heap and lanes */
	errno = 0;
	pm_enter();
	int ok = pmemobj_check(path, EMB_LAYOUT);
	e = errno;
	pm_leave();
	if (ok < 0 && (e == EAGAIN || e == EWOULDBLOCK))
		return store_err(err, n, -EBUSY, "%s: pool is in use (another embfs has it open)", path);
	if (ok != 1)
		return store_err(err, n, -EIO, "%s: damaged (libpmemobj: %s)", path,
				 printable(pmemobj_errormsg(), msg, sizeof(msg)));
	return 0;
}

#define CHECK_TIMEOUT_MS (600 * 1000)

/* Everything the check child wrote: phase bytes, then 'R', its return
 * value and its message.  0, or -ETIMEDOUT (the child was killed). */
static int check_collect(int fd, pid_t pid, char *buf, size_t cap, size_t *got)
{
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	*got = 0;
	for (;;) {
		clock_gettime(CLOCK_MONOTONIC, &t);
		long ms = (long)(t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
		if (ms >= CHECK_TIMEOUT_MS) {
			kill(pid, SIGKILL);
			return -ETIMEDOUT;
		}
		struct pollfd p = { fd, POLLIN, 0 };
		int r = poll(&p, 1, (int)(CHECK_TIMEOUT_MS - ms));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			continue;
		char tmp[512];
		ssize_t k = read(fd, tmp, sizeof(tmp));
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return 0;
		size_t take = (size_t)k < cap - *got ? (size_t)k : cap - *got;
		memcpy(buf + *got, tmp, take);
		*got += take;
	}
}

/* Does another process hold the pool's flock (an embfs serving it)? */
static int in_use(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	int busy = flock(fd, LOCK_SH | LOCK_NB) && (errno == EWOULDBLOCK || errno == EAGAIN);
	close(fd); /* drops the shared lock if it was taken */
	return busy;
}

/* The checking child, after fork: check the pool (check_here) and write
 * to pfd[1] its phase bytes, then its reply ('R', or 'V' for a structural
 * failure; check_here's result; its message).  Never returns. */
static __attribute__((noreturn)) void check_child(const char *path, uint64_t size, int is_dev,
						  const int pfd[2], pid_t parent)
{
	char msg[512] = "";
	/* the check dies with its caller: a killed daemon leaves no checker
	 * holding the pool open */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(1);
	int dn = open("/dev/null", O_WRONLY);
	close(pfd[0]);
	if (dn >= 0) { /* a crash report would not be one line */
		dup2(dn, STDOUT_FILENO);
		dup2(dn, STDERR_FILENO);
	}
	/* a crash ends the child by its signal, even where a sanitizer
	 * would catch it */
	static const int fatal[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT };
	for (size_t k = 0; k < sizeof(fatal) / sizeof(fatal[0]); k++)
		signal(fatal[k], SIG_DFL);
	if (getenv("EMBFS_TEST_CHECK_CRASH")) { /* tests: a check that crashes */
		check_phase(pfd[1], 'L');
		raise(SIGSEGV);
	}
	int structural = 0;
	int32_t r = check_here(path, size, is_dev, pfd[1], &structural, msg, sizeof(msg));
	char out[1 + sizeof(r) + sizeof(msg)];
	out[0] = structural ? 'V' : 'R';
	memcpy(out + 1, &r, sizeof(r));
	size_t len = strlen(msg) + 1;
	memcpy(out + 1 + sizeof(r), msg, len);
	_exit(write(pfd[1], out, 1 + sizeof(r) + len) < 0);
}

/* Wait for the checking child pid, read its reply from fd (closed here) and
 * make check_run's result of it, or of how the child died: its error in err,
 * *structural as the reply says. */
static int check_wait(const char *path, pid_t pid, int fd, int *structural, char *err, size_t n)
{
	char buf[1024];
	size_t got;
	int timed_out = check_collect(fd, pid, buf, sizeof(buf) - 1, &got);
	close(fd);
	int st = 0;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	char *res = buf; /* past the phase bytes: 'R', or 'V' for a structural failure */
	while (res < buf + got && (*res == 'L' || *res == 'E'))
		res++;
	if (res < buf + got && (size_t)(buf + got - res) > 1 + sizeof(int32_t)) {
		int32_t r;
		*structural = *res == 'V';
		memcpy(&r, res + 1, sizeof(r));
		buf[got] = 0;
		return store_err(err, n, r, "%s", res + 1 + sizeof(r));
	}
	const char *who = got && buf[got - 1] == 'E' ? "embfs" : "libpmemobj";
	if (timed_out)
		return store_err(err, n, -EIO, "%s: damaged (%s did not finish checking it in %d s)", path, who,
				 CHECK_TIMEOUT_MS / 1000);
	if (WIFSIGNALED(st))
		return store_err(err, n, -EIO, "%s: damaged (%s crashed while checking it: SIG%s)", path, who,
				 sigabbrev_np(WTERMSIG(st)) ? sigabbrev_np(WTERMSIG(st)) : "?");
	return store_err(err, n, -EIO, "%s: damaged (%s crashed while checking it: exit status %d)", path, who,
			 WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

/* store_check(); *structural as check_here() says. */
static int check_run(const char *path, int *structural, char *err, size_t n)
{
	uint64_t size;
	*structural = 0;
	int is_dev;
	int ret = target_size(path, &size, &is_dev, err, n);
	if (ret)
		return ret;
	if (!is_dev && size < PMEMOBJ_MIN_POOL)
		return store_err(err, n, -EINVAL, "%s: not an embfs pool (%llu bytes, too small)", path,
			    (unsigned long long)size);
	/* a pool another embfs has open (libpmemobj holds an exclusive flock
	 * on it) is refused before the child is made: a script retrying the
	 * mount while the previous daemon writes its cache back costs that
	 * daemon little CPU (pmemobj_open in the check says the same later,
	 * should the holder appear in between) */
	if (in_use(path))
		return store_err(err, n, -EBUSY, "%s: pool is in use (another embfs has it open)", path);
	/* a damaged pool can crash libpmemobj itself: check in a child */
	int pfd[2];
	if (pipe2(pfd, O_CLOEXEC))
		return store_err(err, n, -errno, "%s: cannot check the pool: %s", path, strerror(errno));
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0) {
		ret = -errno;
		close(pfd[0]);
		close(pfd[1]);
		return store_err(err, n, ret, "%s: cannot check the pool: %s", path, strerror(-ret));
	}
	if (pid == 0)
		check_child(path, size, is_dev, pfd, parent);
	close(pfd[1]);
	return check_wait(path, pid, pfd[0], structural, err, n);
}

int store_check(const char *path, char *err, size_t n)
{
	int structural;
	return check_run(path, &structural, err, n);
}

/* Any non-zero byte in the file's data extents (first 64 MiB of data)? */
static int has_data(const char *path)
{
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return 0;
	static char buf[1 << 20];
	off_t pos = 0, budget = 64 << 20;
	int found = 0;
	while (!found && budget > 0) {
		off_t d = lseek(fd, pos, SEEK_DATA);
		if (d < 0)
			break;
		ssize_t r = pread(fd, buf, sizeof(buf), d);
		if (r <= 0)
			break;
		for (ssize_t i = 0; i < r; i++)
			if (buf[i]) {
				found = 1;
				break;
			}
		pos = d + r;
		budget -= r;
	}
	close(fd);
	return found;
}

/* What mkfs may do to path: refuse a pool, data, a device with a size, a
 * file larger than the pool without force.  *size: the pool's size (0: a
 * device's own).  *exists: path exists, *st its stat. */
static int mkfs_target(const char *path, const struct store_mkfs_opts *o, struct stat *st, int *exists,
		       uint64_t *size, char *err, size_t n)
{
	char why[256];
	*exists = stat(path, st) == 0;
	*size = o->size;
	if (o->label && strlen(o->label) > EMB_LABEL_MAX)
		return store_err(err, n, -EINVAL, "label longer than %d bytes", EMB_LABEL_MAX);
	if (!*exists && errno != ENOENT)
		return store_err(err, n, -errno, "%s: %s", path, strerror(errno));
	if (*exists && S_ISCHR(st->st_mode)) {
		if (*size)
			return store_err(err, n, -EINVAL, "%s: -s applies to files, not devices", path);
	} else if (*exists && !S_ISREG(st->st_mode)) {
		return store_err(err, n, -EINVAL, "%s: not a regular file or a devdax device", path);
	} else if (!*exists && !*size) {
		return store_err(err, n, -ENOENT, "%s does not exist (give -s SIZE to create it)", path);
	}
	if (*exists && S_ISREG(st->st_mode) && !*size)
		*size = (uint64_t)st->st_size;
	if (*exists && !o->force) {
		if (store_check(path, why, sizeof(why)) == 0)
			return store_err(err, n, -EEXIST, "%s already holds an embfs pool (use -f to overwrite)", path);
		if (S_ISREG(st->st_mode) && has_data(path))
			return store_err(err, n, -EEXIST, "%s contains data (use -f to overwrite)", path);
		if (S_ISREG(st->st_mode) && (uint64_t)st->st_size > *size)
			return store_err(err, n, -EINVAL, "%s is larger than -s %llu (use -f to shrink it)", path,
					 (unsigned long long)*size);
	}
	if (*size && *size < EMB_MIN_POOL)
		return store_err(err, n, -EINVAL, "size %llu is too small (minimum %llu MiB)",
				 (unsigned long long)*size, (unsigned long long)(EMB_MIN_POOL >> 20));
	return 0;
}

/* Make path ready for pmemobj_create: a file created or cut to size, a
 * device's old pool header zeroed. */
static int mkfs_prepare(const char *path, int exists, mode_t mode, uint64_t size, int *created,
			char *err, size_t n)
{
	static const char zeros[64 << 10];
	int ret = 0;
	int fd = open(path, O_RDWR | (exists ? 0 : O_CREAT | O_EXCL), 0644);
	if (fd < 0)
		return store_err(err, n, -errno, "%s: %s", path, strerror(errno));
	*created = !exists;
	if (!S_ISCHR(mode)) {
		if (ftruncate(fd, 0) != 0 || ftruncate(fd, (off_t)size) != 0)
			ret = store_err(err, n, -errno, "%s: cannot size to %llu: %s", path,
					(unsigned long long)size, strerror(errno));
	} else if (pwrite(fd, zeros, sizeof(zeros), 0) != (ssize_t)sizeof(zeros)) {
		ret = store_err(err, n, -errno, "%s: %s", path, strerror(errno));
	}
	close(fd);
	return ret;
}

/* In a transaction: the superblock and the fixed objects it names (the
 * journal, the snapshot records, the index-room reserve). */
static void super_init(PMEMobjpool *pop, const struct store_mkfs_opts *o, uint64_t size)
{
	PMEMoid root = pmemobj_root(pop, sizeof(struct emb_super));
	struct emb_super *sb = pmemobj_direct(root);
	pmemobj_tx_add_range(root, 0, sizeof(*sb));
	memset(sb, 0, sizeof(*sb));
	memcpy(sb->magic, EMB_MAGIC, 8);
	sb->layout_version = EMB_LAYOUT_VERSION;
	if (o->uuid)
		memcpy(sb->uuid, o->uuid, sizeof(sb->uuid));
	else if (getrandom(sb->uuid, sizeof(sb->uuid), 0) != sizeof(sb->uuid))
		pmemobj_tx_abort(EIO);
	sb->uuid[6] = (uint8_t)((sb->uuid[6] & 0x0f) | 0x40);
	sb->uuid[8] = (uint8_t)((sb->uuid[8] & 0x3f) | 0x80);
	if (o->label)
		strcpy(sb->label, o->label);
	sb->pool_size = size;
	sb->created_ns = now_ns();
	memcpy(&sb->hash_seed, sb->uuid, 8);
	sb->static_csum = super_csum(sb);
	sb->clean = 1;
	sb->batch = 1;
	PMEMoid j = pmemobj_tx_zalloc(EMB_CHUNK_ALLOC, 0);
	sb->journal_off = j.off;
	struct emb_journal *jr = pmemobj_direct(j);
	jr->magic = EMB_JOURNAL_MAGIC;
	pmemobj_persist(pop, jr, 64);
	PMEMoid sn = pmemobj_tx_zalloc(EMB_CHUNK_ALLOC, 0);
	sb->snaps_off = sn.off;
	snap_records_init(pmemobj_direct(sn));
	pmemobj_persist(pop, pmemobj_direct(sn), sizeof(struct emb_snaps));
	PMEMoid rv = pmemobj_tx_zalloc(EMB_CHUNK_ALLOC, 0);
	sb->resv_off = rv.off;
	resv_seal(pmemobj_direct(rv));
	pmemobj_persist(pop, pmemobj_direct(rv), 16);
	sb->dyn_csum = super_dyn_csum(sb);
}

static int super_create(PMEMobjpool *pop, const struct store_mkfs_opts *o, uint64_t size, const char *path,
			char *err, size_t n)
{
	volatile int ret = 0;
	enum pobj_stats_enabled stats = POBJ_STATS_ENABLED_BOTH;
	pmemobj_ctl_set(pop, "stats.enabled", &stats);
	TX_BEGIN(pop) {
		super_init(pop, o, size);
	} TX_ONABORT {
		ret = store_err(err, n, pm_tx_errno(), "%s: cannot initialise the pool: %s", path,
				pmemobj_errormsg());
	} TX_END
	return ret;
}

int store_mkfs(const char *path, const struct store_mkfs_opts *o, char *err, size_t n)
{
	struct stat st;
	int exists, created = 0;
	uint64_t size;
	int ret = mkfs_target(path, o, &st, &exists, &size, err, n);
	if (ret)
		return ret;
	/* from here on the target changes */
	ret = mkfs_prepare(path, exists, exists ? st.st_mode : S_IFREG, size, &created, err, n);
	pm_enter(); /* the new pool's msyncs, up to its close */
	PMEMobjpool *pop = ret ? NULL : pmemobj_create(path, EMB_LAYOUT, 0, 0644);
	if (!ret && !pop)
		ret = store_err(err, n, -errno ? -errno : -EIO, "%s: libpmemobj: %s", path, pmemobj_errormsg());
	if (pop) {
		ret = super_create(pop, o, size, path, err, n);
		pmemobj_close(pop);
	}
	pm_leave();
	if (ret && created)
		unlink(path);
	return ret;
}

/* Index segments and directories come from allocation classes whose runs
 * are one chunk each.  libpmemobj's default classes put a 64 KiB segment in
 * runs of 63 units (16 contiguous chunks): on a nearly full pool no such run
 * can be made, and the whole chunks the index-room reserve gives back (slab.c)
 * would not help.  Classes are runtime state: registered at every open. */
static int alloc_classes_register(struct store *s)
{
	/* index segments, small and large, as many as fill a chunk (the +64:
	 * each aligns itself to a cache line inside its allocation) */
	struct pobj_alloc_class_desc d = { .unit_size = sizeof(struct emb_seg) + EMB_SEG_SMALL * 256 + 64,
					   .units_per_block = 4, .header_type = POBJ_HEADER_NONE };
	if (pmemobj_ctl_set(s->pop, "heap.alloc_class.new.desc", &d))
		return -errno ? -errno : -EINVAL;
	s->xa_seg = POBJ_CLASS_ID(d.class_id);
	d = (struct pobj_alloc_class_desc){ .unit_size = sizeof(struct emb_seg) + EMB_SEG_LARGE * 256 + 64,
					    .units_per_block = 3, .header_type = POBJ_HEADER_NONE };
	if (pmemobj_ctl_set(s->pop, "heap.alloc_class.new.desc", &d))
		return -errno ? -errno : -EINVAL;
	s->xa_seg_large = POBJ_CLASS_ID(d.class_id);
	uint64_t unit = 0;
	for (uint32_t gd = 0; gd <= EMB_MAX_DEPTH; gd++) {
		uint64_t bytes = sizeof(struct emb_dir) + (8ull << gd);
		if (bytes > EMB_CHUNK_ALLOC - 1024)
			break; /* larger directories take whole chunks: default classes */
		if (((bytes + 63) & ~63ull) != unit) { /* small depths share a 64-byte unit */
			unit = (bytes + 63) & ~63ull;
			d = (struct pobj_alloc_class_desc){ .unit_size = unit, .units_per_block = 1,
							    .header_type = POBJ_HEADER_NONE };
			if (pmemobj_ctl_set(s->pop, "heap.alloc_class.new.desc", &d))
				return -errno ? -errno : -EINVAL;
		}
		s->xa_dir[gd] = POBJ_CLASS_ID(d.class_id);
	}
	return 0;
}

/* After a crash: replay a sealed journal by its kind (each kind's replay
 * lives with its owner), then empty it.  A journal whose seal a crash cut
 * short was never acted on: emptied. */
static int journal_replay(struct store *s)
{
	struct emb_journal *j = s->jr;
	if (j->count == 0)
		return 0;
	s->recovered = 1;
	int ret = 0;
	if (journal_valid(j)) {
		/* index changes of these rows may be torn from their bucket checksums */
		struct stable *st = tab_get(s, j->table);
		for (uint64_t i = 0; st && i < j->count; i++)
			index_reseal(s, st, j->ent[i].row);
		switch (j->kind) {
		case EMB_J_RECLAIM:
			ret = reclaim_replay(s, j);
			break;
		case EMB_J_RELINK:
			ret = spill_relink_replay(s, j);
			break;
		default:
			ret = commit_replay(s, j);
		}
	}
	if (ret)
		return ret;
	st64(&j->count, 0);
	return pm_persist(s, j, 64);
}

/* The pool mapped and the store's DRAM state around it, nothing read yet. */
static int open_map(const char *path, int private, struct store **out, char *err, size_t n)
{
	uint64_t size;
	int is_dev;
	int ret = target_size(path, &size, &is_dev, err, n);
	if (ret)
		return ret;
	struct store *s = calloc(1, sizeof(*s));
	if (s && !(s->prom = calloc(EMB_NTABLES, sizeof(*s->prom)))) {
		free(s);
		s = NULL;
	}
	if (!s)
		return store_err(err, n, -ENOMEM, "out of memory");
	int one = 1, zero = 0;
	if (private)
		pmemobj_ctl_set(NULL, "copy_on_write.at_open", &one);
	pm_enter(); /* until pm_open: the mapping is not known yet */
	s->pop = pmemobj_open(path, EMB_LAYOUT);
	int e = errno;
	if (private)
		pmemobj_ctl_set(NULL, "copy_on_write.at_open", &zero);
	errno = e;
	if (!s->pop) {
		pm_leave();
		ret = store_err(err, n, errno ? -errno : -EIO, "%s: libpmemobj: %s", path, pmemobj_errormsg());
		free(s->prom);
		free(s);
		return ret;
	}
	enum pobj_stats_enabled stats = POBJ_STATS_ENABLED_BOTH;
	pmemobj_ctl_set(s->pop, "stats.enabled", &stats);
	s->base = (char *)s->pop;
	s->sb = pmemobj_direct(pmemobj_root(s->pop, 0));
	s->map_len = is_dev ? s->sb->pool_size : size;
	pm_open(s);
	pm_leave();
	s->is_pmem = pmem_is_pmem(s->base, s->map_len);
#ifdef EMBFS_TEST_HOOKS
	/* test builds only (the bench's daemon, build/bench/embfs-test; the
	 * shipped embfs reads no such variable): EMBFS_VERIFY=0 skips the bytes'
	 * digest on reads, for make bench's section verify */
	const char *verify = getenv("EMBFS_VERIFY");
	s->no_verify = verify && !strcmp(verify, "0");
#endif
	s->jr = S_PTR(s, s->sb->journal_off);
	pthread_rwlock_init(&s->cat_lock, NULL);
	pthread_mutex_init(&s->commit_lock, NULL);
	pthread_mutex_init(&s->space_lock, NULL);
	pthread_mutex_init(&s->meta_lock, NULL);
	pthread_mutex_init(&s->perm_lock, NULL);
	*out = s;
	return 0;
}

/* Validate, load the catalog and snapshot records, recover from a crash,
 * and mark the pool in use. */
static int open_load(struct store *s, const char *path, char *err, size_t n)
{
	int ret = alloc_classes_register(s);
	if (ret)
		return store_err(err, n, ret, "%s: libpmemobj allocation classes: %s", path, pmemobj_errormsg());
	ret = store_validate(s, err, n); /* again: the pool may have changed since the check */
	if (ret) {
		if (err && n) {
			char why[256];
			snprintf(why, sizeof(why), "%s", err);
			store_err(err, n, ret, "%s: %s", path, why);
		}
		return ret;
	}
	ret = catalog_load(s);
	if (!ret)
		ret = snap_load(s);
	if (ret)
		return store_err(err, n, ret, "%s: catalog is damaged: %s", path, strerror(-ret));
	if (!s->sb->clean)
		s->recovered = 1;
	ret = journal_replay(s);
	if (!ret)
		ret = snap_recover(s);
	if (!ret)
		ret = table_recover(s);
	if (ret)
		return store_err(err, n, ret, "%s: recovery failed: %s", path, strerror(-ret));
	st64(&s->sb->mount_count, s->sb->mount_count + 1);
	st64(&s->sb->clean, 0);
	ret = pm_persist(s, &s->sb->clean, 16);
	if (ret)
		return store_err(err, n, ret, "%s: %s", path, s->fail_why);
	return 0;
}

/* Would repair_preen make the pool valid?  Tried on a private mapping, so
 * that a pool no repair reaches is never opened for writing (libpmemobj's
 * open writes to the file).  0, or the reason validation still fails. */
static int preen_dry(const char *path, char *err, size_t n)
{
	struct store *t;
	int ret = open_map(path, 1, &t, err, n);
	if (ret)
		return ret;
	ret = repair_preen(t, NULL, NULL, err, n);
	if (!ret)
		ret = store_validate(t, err, n);
	if (ret && err && n) {
		char why[256];
		snprintf(why, sizeof(why), "%s", err);
		store_err(err, n, ret, "%s: %s", path, why);
	}
	pm_close(t);
	free(t->prom);
	free(t);
	return ret;
}

int store_open_ext(const char *path, const struct store_open_opts *o, struct store **out, char *err, size_t n)
{
	static const struct store_open_opts none;
	struct store *s = NULL;
	int structural;
	if (!o)
		o = &none;
	int ret = check_run(path, &structural, err, n);
	int repair = ret && structural && (o->flags & STORE_OPEN_REPAIR);
	if (repair && !(o->flags & STORE_OPEN_PRIVATE))
		ret = preen_dry(path, err, n);
	else if (repair)
		ret = 0;
	if (!ret)
		ret = open_map(path, !!(o->flags & STORE_OPEN_PRIVATE), &s, err, n);
	if (ret)
		return ret;
	if (repair)
		ret = repair_preen(s, o->note, o->arg, err, n);
	if (!ret)
		ret = open_load(s, path, err, n);
	if (ret) {
		snap_unload(s);
		catalog_unload(s);
		slab_release_all(s);
		pm_close(s);
		free(s->prom);
		free(s);
		return ret;
	}
	*out = s;
	return 0;
}

int store_open(const char *path, struct store **out, char *err, size_t n)
{
	return store_open_ext(path, NULL, out, err, n);
}

int store_sync(struct store *s)
{
	int r = bulk_settle(s, BULK_ANY, EMB_NONE); /* an open bulk run's rows are made durable too */
	pthread_mutex_lock(&s->commit_lock);
	int ret = pm_barrier(s);
	ret = ret ? ret : r;
	pthread_mutex_unlock(&s->commit_lock);
	return ret;
}

int store_health(struct store *s, char *why, size_t n)
{
	int ret = pm_failed(s);
	if (ret && why && n)
		snprintf(why, n, "%s", s->fail_why);
	return ret;
}

void store_close(struct store *s)
{
	if (!s)
		return;
	spill_close(s);
	pthread_mutex_lock(&s->commit_lock);
	if (!pm_failed(s)) { /* no row is promised now: no index room is held */
		pthread_mutex_lock(&s->space_lock);
		resv_squeeze(s, 0);
		pthread_mutex_unlock(&s->space_lock);
	}
	/* a failed pool is not marked clean: the next mount recovers from what
	 * reached the disk */
	if (pm_barrier(s) == 0) {
		st64(&s->sb->clean, 1);
		if (pm_persist(s, &s->sb->clean, 8))
			(void)0; /* failed now: the pool stays unclean on disk */
	}
	pthread_mutex_unlock(&s->commit_lock);
	snap_unload(s);
	catalog_unload(s);
	slab_release_all(s);
	pm_close(s);
	pthread_rwlock_destroy(&s->cat_lock);
	pthread_mutex_destroy(&s->commit_lock);
	pthread_mutex_destroy(&s->space_lock);
	pthread_mutex_destroy(&s->meta_lock);
	pthread_mutex_destroy(&s->perm_lock);
	free(s->prom);
	free(s);
}

static uint64_t heap_used_fn(struct store *s)
{
	uint64_t used = 0;
	pmemobj_ctl_get(s->pop, "stats.heap.curr_allocated", &used);
	return used;
}

int store_space_reserve(struct store *s, uint32_t id, uint32_t row_size, int64_t rows)
{
	if (rows > 0 && pm_writable(s))
		return -EROFS; /* the pool failed: no write can be promised */
	for (int waits = 0;; waits++) {
		/* a live snapshot may keep the versions the rows replace: a link
		 * each then (snap_lock held across, so that a snapshot taken now
		 * finds these promises counted and links the rest) */
		pthread_rwlock_rdlock(&s->snap_lock);
		int ret = slab_promise(s, id, row_size, rows, rows > 0 && s->n_live > 0);
		pthread_rwlock_unlock(&s->snap_lock);
		if (rows > 0 && s->sp && !waits)
			spill_promised(s, (uint64_t)rows * slab_row_slot(row_size));
		if (ret != -ENOSPC || rows <= 0 || !s->sp || waits == SPILL_MAX_WAITS ||
		    spill_wait_room(s, (uint64_t)rows * slab_row_slot(row_size)) != 0)
			return ret;
	}
}

int store_space_links(struct store *s, uint32_t id)
{
	/* Without snap_lock (an atomic load).  The caller keeps snapshots from
	 * being taken, not dropped (rmdir does not wait for writes): n_live
	 * may fall meanwhile, never rise.  Read as 0, no snapshot is live and
	 * none comes before the caller's rows are stamped.  Read before a drop
	 * lowered it, links are promised for a snapshot that is going: room
	 * held that no write-back will use, given back with the rows' promise
	 * (at worst an ENOSPC the drop would have spared). */
	if (!__atomic_load_n(&s->n_live, __ATOMIC_ACQUIRE))
		return 0;
	return slab_promise_links(s, id);
}

void store_stats_get(struct store *s, struct store_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->pool_size = s->map_len;
	st->is_pmem = s->is_pmem;
	st->recovered = s->recovered;
	memcpy(st->label, s->sb->label, sizeof(st->label));
	memcpy(st->uuid, s->sb->uuid, 16);
	uint64_t slab_bytes, free_slots, nslabs, heap_used = 0;
	pthread_rwlock_rdlock(&s->cat_lock);
	for (uint32_t i = 0; i < EMB_NTABLES; i++) {
		struct stable *t = s->tab[i];
		if (!t)
			continue;
		if (t->t->flags & EMB_T_ZOMBIE)
			continue; /* its rows are only the snapshots' */
		st->tables += !(t->t->flags & EMB_T_ORPHAN);
		/* rows in runs count once per run holding them */
		st->rows += ld64(&t->t->nrows) + atomic_load(&t->run_live);
	}
	pthread_rwlock_unlock(&s->cat_lock);
	slab_usage(s, &slab_bytes, &free_slots, &nslabs);
	heap_used = heap_used_fn(s);
	uint64_t cap = pool_heap_capacity(s);
	st->slabs = nslabs;
	pthread_rwlock_rdlock(&s->snap_lock);
	st->snapshots = s->n_live;
	pthread_rwlock_unlock(&s->snap_lock);
	/* chunks held back for index growth are free space the index will take */
	const struct emb_resv *rv = S_PTR(s, s->sb->resv_off);
	uint64_t held = ld64(&rv->n) * (EMB_CHUNK_ALLOC + 64);
	heap_used = heap_used > held ? heap_used - held : 0;
	st->used_bytes = heap_used > free_slots ? heap_used - free_slots : 0;
	st->index_bytes = index_bytes(s);
	st->free_bytes = (heap_used < cap ? cap - heap_used : 0) + free_slots;
	st->commits = atomic_load(&s->n_commits);
	st->barriers = atomic_load(&s->n_barriers);
	st->transactions = atomic_load(&s->n_tx);
	st->rows_written = atomic_load(&s->n_rows_written);
	st->rows_read = atomic_load(&s->n_rows_read);
	st->checksum_errors = atomic_load(&s->n_csum_errors);
}
