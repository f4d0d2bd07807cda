/*
 * minfuse: a minimal FUSE server of our own, the anchor of issue 27's speed
 * target for the batched gather (embfs's GATHER through .embfs/rows against
 * what the same request costs a server that does nothing but answer it).
 *
 *   minfuse [-f] [-s] [-d] [-o rows=N,row_size=B,threads=T] [-o FUSE options] MOUNTPOINT
 *
 * It holds one table in a DRAM array malloc'd and filled at start (before
 * the mount), no persistence, and exposes (libfuse3 low-level API):
 *   MOUNTPOINT/t.emb          the table, ROWS * ROWSIZE bytes, read-only
 *                             (mode 0444; pread of row r at r * ROWSIZE)
 *   MOUNTPOINT/.embfs/rows    GATHER of include/embfs/batch.h for t.emb,
 *                             with or without EMBFS_BATCH_F_PRESENT
 * .embfs/rows behaves as embfs's does for one table: each open file
 * description has its own request and response buffers (kept and reused
 * from one request to the next); a request (header, then count little-endian
 * u64 row ids) is written at offset 0, in one or more WRITEs at increasing
 * offsets (the kernel cuts a write into max_write = 1 MiB pieces); its
 * header is checked as soon as it is in (a bad one fails that WRITE with
 * EINVAL); the rows are copied at the first READ of the response (embfs
 * gathers there too: the kernel holds the file's inode lock across a
 * direct-io WRITE, READs run in parallel), which then returns them packed in
 * request order (then the presence bitmap with F_PRESENT) to preads at any
 * offset, until the next request.  The file is opened with direct_io, as
 * embfs's.  Any other op, an F_INIT, a table_ino other than t.emb's st_ino
 * (2), a count outside 1..EMBFS_BATCH_MAX_COUNT or a total_len that is not
 * 32 + 8 * count: EINVAL.  Every row of the table is present (bit 1); an id
 * past the table's end reads as zeros with its bit 0 (a hole, as in embfs),
 * an id whose byte offset does not fit an off_t is EINVAL.
 *
 * The rows are deterministic so that a client can check them: byte k of row
 * r is byte k % 8 of the little-endian u64 splitmix64 output number
 * r * ceil(ROWSIZE / 8) + k / 8 of the generator seeded with 0 (output i =
 * the splitmix64 finalizer of (i + 1) * 0x9E3779B97F4A7C15): with 8 | ROWSIZE
 * the table is that generator's stream, outputs 0, 1, 2, ...
 *
 * Options (-o NAME=VALUE): rows (4000000) and row_size (256, 1..65536 as an
 * embfs table's), the batch section's table; threads (2); huge (1: the
 * table advised onto 2 MiB pages with MADV_HUGEPAGE, as embfs's row cache
 * is; 0: 4 KiB pages).  libfuse's own:
 * -f foreground (else it goes to the background once mounted), -s one
 * thread, -d debug, -o clone_fd, allow_other, ...
 *
 * The loop: libfuse's multi-threaded one with threads= workers, all kept
 * (max_threads = max_idle_threads = threads, as embfs's threads=; 2 = the
 * core count here).  It is the fastest of the three tried: on this 2-core
 * VM (2026-11-27, one gatherbench -m batch client, 4096 Zipf ids a batch,
 * 256-B rows, 4M rows; 3 s runs, the three servers mounted together and
 * run in turn, 2 x 5 rounds) the medians were 8.1 and 7.8 M rows/s with 2
 * workers, 6.8 and 6.7 M with -s (fuse_session_loop) and 6.3 and 6.4 M
 * with 10; 2 workers beat -s in each of the 10 rounds (presumably because
 * while one worker is still replying to a request's WRITE, the other
 * already waits in read(2) of /dev/fuse for its READ).  -s stays available
 * for comparison.
 *
 * Exit 0 after a clean unmount, 1 on bad arguments or a failure (said on
 * stderr).
 */
#define FUSE_USE_VERSION 314
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

#include "embfs/batch.h"

#define INO_ROOT 1
#define INO_TABLE 2
#define INO_CTL 3
#define INO_ROWS 4
#define HDR sizeof(struct embfs_batch_hdr)
#define REQ_MAX (HDR + 8ull * EMBFS_BATCH_MAX_COUNT) /* the largest GATHER */
#define ROW_MAX 65536u                               /* as embfs's EMB_ROW_MAX */
#define TIMEOUT 3600.0                               /* nothing here ever changes */

struct conf {
	char *rows, *row_size, *threads, *huge;
	int help, libfuse_threads;
};

static struct {
	char *table;
	uint64_t rows, row_size, size;
	struct timespec t0;
} mf;

/* One open file description of .embfs/rows. */
enum { S_IDLE, S_RECV, S_GATHER, S_RESP, S_FAILED };
struct mfd {
	pthread_mutex_t lock;
	int state, err;
	char *req, *resp;
	uint64_t got, req_cap, resp_len, resp_cap;
	struct embfs_batch_hdr h; /* in host order, once hdr_ok */
	int hdr_ok;
};

/* ---- the table ---- */

/* Row r: the little-endian splitmix64 outputs (seed 0) number r * words,
 * r * words + 1, ..., cut at row_size bytes. */
static void table_fill(void)
{
	uint64_t words = (mf.row_size + 7) / 8, full = mf.row_size / 8;
	for (uint64_t r = 0; r < mf.rows; r++) {
		char *row = mf.table + r * mf.row_size;
		uint64_t x = r * words * 0x9E3779B97F4A7C15ull; /* splitmix64 adds the step first */
		for (uint64_t j = 0; j < full; j++) {
			uint64_t w = htole64(splitmix64(&x));
			memcpy(row + 8 * j, &w, 8);
		}
		if (full < words) {
			uint64_t w = htole64(splitmix64(&x));
			memcpy(row + 8 * full, &w, mf.row_size - 8 * full);
		}
	}
}

/* ---- attributes and names ---- */

static int ino_stat(fuse_ino_t ino, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_uid = getuid();
	st->st_gid = getgid();
	st->st_atim = st->st_mtim = st->st_ctim = mf.t0;
	switch (ino) {
	case INO_ROOT:
		st->st_mode = S_IFDIR | 0755;
		st->st_nlink = 3;
		break;
	case INO_CTL:
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
		break;
	case INO_TABLE:
		st->st_mode = S_IFREG | 0444;
		st->st_nlink = 1;
		st->st_size = (off_t)mf.size;
		st->st_blocks = (blkcnt_t)((mf.size + 511) / 512);
		break;
	case INO_ROWS:
		st->st_mode = S_IFREG | 0666;
		st->st_nlink = 1;
		break;
	default:
		return -ENOENT;
	}
	st->st_blksize = 4096;
	return 0;
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	(void)userdata;
	/* as embfs: 1 MiB WRITEs (and max_pages 256: 1 MiB READs), no
	 * writeback cache */
	conn->max_write = 1u << 20;
	conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
	conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	fuse_ino_t ino = 0;
	if (parent == INO_ROOT && !strcmp(name, "t.emb"))
		ino = INO_TABLE;
	else if (parent == INO_ROOT && !strcmp(name, ".embfs"))
		ino = INO_CTL;
	else if (parent == INO_CTL && !strcmp(name, "rows"))
		ino = INO_ROWS;
	else if (parent != INO_ROOT && parent != INO_CTL) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	struct fuse_entry_param e;
	memset(&e, 0, sizeof(e));
	if (!ino || ino_stat(ino, &e.attr)) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	e.ino = ino;
	e.generation = 1;
	e.attr_timeout = e.entry_timeout = TIMEOUT;
	fuse_reply_entry(req, &e);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat st;
	(void)fi;
	int ret = ino_stat(ino, &st);
	if (ret)
		fuse_reply_err(req, -ret);
	else
		fuse_reply_attr(req, &st, TIMEOUT);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	static const struct {
		fuse_ino_t dir, ino;
		const char *name;
	} ents[] = {
		{ INO_ROOT, INO_ROOT, "." }, { INO_ROOT, INO_ROOT, ".." },  { INO_ROOT, INO_TABLE, "t.emb" },
		{ INO_ROOT, INO_CTL, ".embfs" }, { INO_CTL, INO_CTL, "." }, { INO_CTL, INO_ROOT, ".." },
		{ INO_CTL, INO_ROWS, "rows" },
	};
	(void)fi;
	if (ino != INO_ROOT && ino != INO_CTL) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	char *buf = malloc(size ? size : 1);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	size_t len = 0;
	off_t pos = 0; /* an entry's offset: its place in this directory, from 1 */
	for (size_t i = 0; i < sizeof(ents) / sizeof(ents[0]); i++) {
		if (ents[i].dir != ino || ++pos <= off)
			continue;
		struct stat st = { .st_ino = ents[i].ino };
		ino_stat(ents[i].ino, &st);
		size_t n = fuse_add_direntry(req, buf + len, size - len, ents[i].name, &st, pos);
		if (n > size - len)
			break;
		len += n;
	}
	fuse_reply_buf(req, buf, len);
	free(buf);
}

/* ---- opening ---- */

static void mfd_free(struct mfd *f)
{
	pthread_mutex_destroy(&f->lock);
	free(f->req);
	free(f->resp);
	free(f);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (ino == INO_ROOT || ino == INO_CTL) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	if (ino == INO_TABLE) {
		if ((fi->flags & O_ACCMODE) != O_RDONLY) {
			fuse_reply_err(req, EACCES);
			return;
		}
		fi->keep_cache = 1; /* the table never changes */
		fuse_reply_open(req, fi);
		return;
	}
	if (ino != INO_ROWS) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	struct mfd *f = calloc(1, sizeof(*f));
	if (!f) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	pthread_mutex_init(&f->lock, NULL);
	fi->fh = (uintptr_t)f;
	fi->direct_io = 1; /* requests and responses bypass the page cache, as embfs's */
	fi->keep_cache = 0;
	if (fuse_reply_open(req, fi))
		mfd_free(f); /* no release will come */
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (ino == INO_ROWS) {
		/* a READ replies under the lock, and the client may close the
		 * file (this RELEASE, on another worker) before that READ has
		 * unlocked: wait for it */
		struct mfd *f = (struct mfd *)(uintptr_t)fi->fh;
		pthread_mutex_lock(&f->lock);
		pthread_mutex_unlock(&f->lock);
		mfd_free(f);
	}
	fuse_reply_err(req, 0);
}

/* ---- .embfs/rows ---- */

static int grow(char **p, uint64_t *cap, uint64_t need)
{
	if (need <= *cap)
		return 0;
	char *n = realloc(*p, need);
	if (!n)
		return -ENOMEM;
	*p = n;
	*cap = need;
	return 0;
}

static int fail(struct mfd *f, int err)
{
	f->state = S_FAILED;
	f->err = err;
	f->got = 0;
	f->hdr_ok = 0;
	return err;
}

/* The header, once it is in: a GATHER of t.emb, its length. */
static int check_header(struct mfd *f)
{
	struct embfs_batch_hdr *h = &f->h;
	memcpy(h, f->req, HDR);
	h->op = le32toh(h->op);
	h->table_ino = le64toh(h->table_ino);
	h->count = le32toh(h->count);
	h->flags = le32toh(h->flags);
	h->total_len = le64toh(h->total_len);
	if (memcmp(h->magic, EMBFS_BATCH_MAGIC, 4) || h->op != EMBFS_BATCH_GATHER || h->table_ino != INO_TABLE ||
	    (h->flags & ~EMBFS_BATCH_F_PRESENT) || h->count == 0 || h->count > EMBFS_BATCH_MAX_COUNT ||
	    (uint64_t)h->count * mf.row_size > EMBFS_BATCH_MAX_BYTES || h->total_len != HDR + 8ull * h->count ||
	    f->got > h->total_len)
		return -EINVAL;
	f->hdr_ok = 1;
	return 0;
}

/* One WRITE piece of a request: 0, or a negative errno (the request failed). */
static int rows_take(struct mfd *f, const char *data, size_t size, off_t off)
{
	if (off == 0) {
		f->state = S_RECV;
		f->got = 0;
		f->hdr_ok = 0;
		f->err = 0;
	} else if (f->state == S_FAILED) {
		/* the rest of a write that came back short: it gets the error */
		int err = f->err;
		f->state = S_IDLE;
		return err;
	} else if (f->state != S_RECV) {
		return fail(f, -EINVAL);
	}
	if (off < 0 || (uint64_t)off != f->got || size > REQ_MAX - f->got ||
	    (f->hdr_ok && size > f->h.total_len - f->got))
		return fail(f, -EINVAL);
	int ret = grow(&f->req, &f->req_cap, f->got + size);
	if (ret)
		return fail(f, ret);
	memcpy(f->req + f->got, data, size);
	f->got += size;
	if (!f->hdr_ok && f->got >= HDR && (ret = check_header(f)))
		return fail(f, ret);
	if (!f->hdr_ok || f->got < f->h.total_len)
		return 0;
	/* all in: the ids to host order, each one's byte offset within off_t */
	uint64_t *ids = (uint64_t *)(f->req + HDR);
	uint64_t max = (uint64_t)INT64_MAX / mf.row_size - 1;
	for (uint32_t i = 0; i < f->h.count; i++) {
		ids[i] = le64toh(ids[i]);
		if (ids[i] > max)
			return fail(f, -EINVAL);
	}
	f->state = S_GATHER; /* rows are copied at the first read */
	return 0;
}

/* The response to the GATHER in f: the rows, then the bitmap with F_PRESENT. */
static int rows_gather(struct mfd *f)
{
	uint32_t n = f->h.count;
	uint64_t rs = mf.row_size, rlen = (uint64_t)n * rs;
	int present = f->h.flags & EMBFS_BATCH_F_PRESENT;
	uint64_t len = rlen + (present ? (n + 7) / 8 : 0);
	int ret = grow(&f->resp, &f->resp_cap, len);
	if (ret)
		return ret;
	const uint64_t *ids = (const uint64_t *)(f->req + HDR);
	char *out = f->resp;
	uint8_t *bits = (uint8_t *)out + rlen;
	if (present)
		memset(bits, 0, (n + 7) / 8);
	for (uint32_t i = 0; i < n; i++, out += rs) {
		if (ids[i] < mf.rows) {
			memcpy(out, mf.table + ids[i] * rs, rs);
			if (present)
				bits[i / 8] |= (uint8_t)(1u << (i % 8));
		} else {
			memset(out, 0, rs); /* past the table's end: a hole */
		}
	}
	f->resp_len = len;
	return 0;
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *data, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	if (ino != INO_ROWS) {
		fuse_reply_err(req, EBADF); /* t.emb is only opened read-only */
		return;
	}
	struct mfd *f = (struct mfd *)(uintptr_t)fi->fh;
	pthread_mutex_lock(&f->lock);
	int ret = rows_take(f, data, size, off);
	pthread_mutex_unlock(&f->lock);
	if (ret)
		fuse_reply_err(req, -ret);
	else
		fuse_reply_write(req, size);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	uint64_t o = off < 0 ? UINT64_MAX : (uint64_t)off;
	if (ino == INO_TABLE) {
		if (o >= mf.size)
			fuse_reply_buf(req, NULL, 0);
		else
			fuse_reply_buf(req, mf.table + o, size < mf.size - o ? size : mf.size - o);
		return;
	}
	if (ino != INO_ROWS) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	struct mfd *f = (struct mfd *)(uintptr_t)fi->fh;
	pthread_mutex_lock(&f->lock);
	if (f->state == S_GATHER) {
		int ret = rows_gather(f);
		if (ret)
			fail(f, ret);
		else
			f->state = S_RESP;
	}
	/* replied under the lock: a new request on this fd may not reuse resp yet */
	if (f->state == S_RESP) {
		if (o >= f->resp_len)
			fuse_reply_buf(req, NULL, 0);
		else
			fuse_reply_buf(req, f->resp + o, size < f->resp_len - o ? size : f->resp_len - o);
	} else if (f->state == S_FAILED) {
		fuse_reply_err(req, -f->err);
	} else {
		fuse_reply_err(req, EINVAL); /* no gather to read, or one half written */
	}
	pthread_mutex_unlock(&f->lock);
}

static const struct fuse_lowlevel_ops ops = {
	.init = op_init,
	.lookup = op_lookup,
	.getattr = op_getattr,
	.readdir = op_readdir,
	.open = op_open,
	.read = op_read,
	.write = op_write,
	.release = op_release,
};

/* ---- command line ---- */

#define OPT(t, p) { t, offsetof(struct conf, p), 1 }
static const struct fuse_opt opts[] = {
	OPT("rows=%s", rows),
	OPT("row_size=%s", row_size),
	OPT("threads=%s", threads),
	OPT("huge=%s", huge),
	{ "max_threads=", offsetof(struct conf, libfuse_threads), 1 },
	{ "max_idle_threads=", offsetof(struct conf, libfuse_threads), 1 },
	OPT("-h", help),
	OPT("--help", help),
	FUSE_OPT_END
};

static void usage(FILE *f)
{
	fprintf(f, "usage: minfuse [-f] [-s] [-d] [-o rows=N,row_size=B,threads=T,huge=0|1] [-o FUSE options] MOUNTPOINT\n"
		   "  MOUNTPOINT/t.emb: a read-only table of N rows of B bytes in DRAM [4000000 x 256];\n"
		   "  MOUNTPOINT/.embfs/rows: GATHERs of it (include/embfs/batch.h)\n"
		   "  -f foreground, -s one thread (else T worker threads [2]), -d debug;\n"
		   "  huge=1: the table on huge pages (MADV_HUGEPAGE) [1];\n"
		   "  libfuse's -o clone_fd, allow_other, ...\n");
}

/* "NAME=VALUE": VALUE digits only, in [lo, hi]; 0 or -1 (said on stderr). */
static int number(const char *name, const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
	char *end = NULL;
	unsigned long long n = 0;
	errno = 0;
	if (*s >= '0' && *s <= '9')
		n = strtoull(s, &end, 10);
	if (!end || *end || errno || n < lo || n > hi) {
		fprintf(stderr, "minfuse: %s=%s: want a whole number from %llu to %llu\n", name, s,
			(unsigned long long)lo, (unsigned long long)hi);
		return -1;
	}
	*out = n;
	return 0;
}

int main(int argc, char **argv)
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	struct fuse_cmdline_opts cl;
	struct conf c = { 0 };
	struct fuse_session *se = NULL;
	int ret = 1;

	memset(&cl, 0, sizeof(cl));
	mf.rows = 4000000;
	mf.row_size = 256;
	if (fuse_opt_parse(&args, &c, opts, NULL) == -1)
		goto usage;
	if (c.help) {
		usage(stdout);
		ret = 0;
		goto out;
	}
	if (fuse_parse_cmdline(&args, &cl) != 0)
		goto out; /* libfuse said why */
	if (cl.show_help || cl.show_version) {
		if (cl.show_help)
			usage(stdout);
		else
			printf("minfuse: libfuse %s\n", fuse_pkgversion());
		ret = 0;
		goto out;
	}
	if (!cl.mountpoint)
		goto usage;
	if (c.libfuse_threads) {
		fprintf(stderr, "minfuse: max_threads= and max_idle_threads=: use threads=N (both)\n");
		goto out;
	}
	uint64_t threads = 2, huge = 1;
	if ((c.rows && number("rows", c.rows, 1, UINT64_MAX, &mf.rows)) ||
	    (c.row_size && number("row_size", c.row_size, 1, ROW_MAX, &mf.row_size)) ||
	    (c.threads && number("threads", c.threads, 1, 1024, &threads)) ||
	    (c.huge && number("huge", c.huge, 0, 1, &huge)))
		goto out;
	if (mf.rows > (uint64_t)INT64_MAX / mf.row_size || mf.rows * mf.row_size > SIZE_MAX) {
		fprintf(stderr, "minfuse: rows=%llu x row_size=%llu: too large\n", (unsigned long long)mf.rows,
			(unsigned long long)mf.row_size);
		goto out;
	}
	mf.size = mf.rows * mf.row_size;
	/* 2 MiB-aligned: with huge=1, advised onto huge pages as embfs's row
	 * cache is (its arenas and entries), so that TLB misses cost both
	 * servers alike */
	if (posix_memalign((void **)&mf.table, 2u << 20, mf.size))
		mf.table = NULL;
	if (mf.table && huge)
		(void)madvise(mf.table, mf.size, MADV_HUGEPAGE);
	if (!mf.table) {
		fprintf(stderr, "minfuse: cannot allocate the %llu-byte table\n", (unsigned long long)mf.size);
		goto out;
	}
	table_fill(); /* every page touched before the mount: none faults in while serving */
	clock_gettime(CLOCK_REALTIME, &mf.t0);

	if (fuse_opt_add_arg(&args, "-odefault_permissions") ||
	    fuse_opt_add_arg(&args, "-ofsname=minfuse,subtype=minfuse"))
		goto out;
	se = fuse_session_new(&args, &ops, sizeof(ops), NULL);
	if (!se)
		goto out; /* libfuse said why */
	if (fuse_set_signal_handlers(se))
		goto out_session;
	if (fuse_session_mount(se, cl.mountpoint))
		goto out_signals;
	if (fuse_daemonize(cl.foreground)) {
		fprintf(stderr, "minfuse: cannot go to the background\n");
		goto out_unmount;
	}
	if (cl.singlethread) {
		ret = fuse_session_loop(se) ? 1 : 0;
	} else {
		struct fuse_loop_config *lc = fuse_loop_cfg_create();
		if (!lc) {
			fprintf(stderr, "minfuse: out of memory\n");
			goto out_unmount;
		}
		/* threads= workers, all kept (as embfs's threads=) */
		fuse_loop_cfg_set_max_threads(lc, (unsigned)threads);
		fuse_loop_cfg_set_idle_threads(lc, (unsigned)threads);
		fuse_loop_cfg_set_clone_fd(lc, (unsigned)cl.clone_fd);
		ret = fuse_session_loop_mt(se, lc) ? 1 : 0;
		fuse_loop_cfg_destroy(lc);
	}
out_unmount:
	fuse_session_unmount(se);
out_signals:
	fuse_remove_signal_handlers(se);
out_session:
	fuse_session_destroy(se);
	goto out;
usage:
	usage(stderr);
out:
	free(cl.mountpoint);
	free(c.rows);
	free(c.row_size);
	free(c.threads);
	free(c.huge);
	free(mf.table);
	fuse_opt_free_args(&args);
	return ret;
}
