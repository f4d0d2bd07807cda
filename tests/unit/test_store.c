/*
 * Unit tests of store/: rows, sparse huge ids, partial and duplicate updates,
 * index splits, truncate, unlink/release, ENOSPC, reopen, and recovery after
 * a writer is SIGKILLed in the middle of commits, snapshots and drops: every
 * operation it saw succeed is there (rows, and snapshots with the rows they
 * were taken with), each row of the commit in flight is old or new, a
 * snapshot not durable is gone, store_fsck finds no torn row and no leaked
 * or doubly used slot; a clean close needs no recovery.  Snapshots taken
 * without a barrier (pending until made durable) and torn records.  The
 * root's and .snapshots' owner, group and mode.  Damaged libpmemobj
 * lanes refused before libpmemobj acts on them.  EMBFS_SEED replays
 * the writers' operations and the kill points.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <libpmemobj.h>

#include "embfs/layout.h"
#include "embfs/store.h"
#include "helpers.h"
#include "store_helpers.h"


static char path[256];
static char err[512];
static unsigned long long seed; /* EMBFS_SEED replays the writers' batches and the kill points */

/* A 64-bit mix of x (splitmix64). */
static uint64_t mix(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ull;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

static struct store *fresh(uint64_t size)
{
	struct store_mkfs_opts o = { .size = size, .force = 1, .label = "unit" };
	struct store *s;
	unlink(path);
	if (store_mkfs(path, &o, err, sizeof(err)) || store_open(path, &s, err, sizeof(err))) {
		fprintf(stderr, "pool: %s\n", err);
		exit(1);
	}
	return s;
}

static struct store *reopen(struct store *s)
{
	store_close(s);
	if (store_open(path, &s, err, sizeof(err))) {
		fprintf(stderr, "reopen: %s\n", err);
		exit(1);
	}
	return s;
}

static void test_rows(void)
{
	struct store *s = fresh(64 << 20);
	uint32_t id;
	uint8_t row[256], got[256];
	OK(store_table_create(s, "t.emb", 0644, 0, 0, 64, EMB_DT_F32, &id));
	CHECK(store_table_create(s, "t.emb", 0644, 0, 0, 64, EMB_DT_F32, &id) == -EEXIST);
	CHECK(store_table_create(s, "a/b", 0644, 0, 0, 64, EMB_DT_F32, &id) == -EINVAL);
	CHECK(store_table_create(s, "x", 0644, 0, 0, 0, EMB_DT_F32, &id) == -EINVAL);

	/* sparse, huge ids: any id up to the pool's largest (2^48 - 2) */
	uint64_t ids[] = { 0, 1, 77, 1ull << 40, store_max_row(256) };
	CHECK(store_max_row(256) == EMB_ROW_ID_MAX && store_max_size(256) == (EMB_ROW_ID_MAX + 1) * 256);
	CHECK(store_max_row(1u << 16) == (uint64_t)INT64_MAX / 65536 - 1);
	for (size_t i = 0; i < 5; i++) {
		fill(row, 256, ids[i], 1);
		struct store_rowop op = { ids[i], 0, 256, row, 0 };
		OK(store_rows_write(s, id, &op, 1, (ids[i] + 1) * 256));
	}
	for (size_t i = 0; i < 5; i++) {
		fill(row, 256, ids[i], 1);
		CHECK(t_row_read(s, id, ids[i], got) == 1);
		CHECK(!memcmp(row, got, 256));
	}
	{ /* past the largest id: EFBIG, nothing written; an id that shares
	   * the low 48 bits of a stored row's is not that row */
		struct store_rowop op = { store_max_row(256) + 1, 0, 256, row, 0 };
		CHECK(store_rows_write(s, id, &op, 1, 0) == -EFBIG);
		op.row = (uint64_t)(INT64_MAX / 256);
		CHECK(store_rows_write(s, id, &op, 1, 0) == -EFBIG);
		CHECK(store_table_truncate(s, id, store_max_size(256) + 1) == -EFBIG);
		CHECK(t_row_read(s, id, (1ull << 48) + 77, got) == 0);
	}
	CHECK(t_row_read(s, id, 2, got) == 0);
	for (int i = 0; i < 256; i++)
		CHECK(got[i] == 0);

	/* partial update keeps the other bytes; duplicates in one batch: last wins */
	uint8_t patch[10];
	memset(patch, 0xAB, 10);
	struct store_rowop ops[3] = { { 77, 100, 10, patch, 0 }, { 77, 0, 0, NULL, 0 }, { 77, 5, 10, patch, 0 } };
	OK(store_rows_write(s, id, ops, 1, 0));
	fill(row, 256, 77, 1);
	memset(row + 100, 0xAB, 10);
	CHECK(t_row_read(s, id, 77, got) == 1 && !memcmp(row, got, 256));
	OK(store_rows_write(s, id, ops, 3, 0)); /* write, delete, write */
	memset(row, 0, 256);
	memset(row + 5, 0xAB, 10);
	CHECK(t_row_read(s, id, 77, got) == 1 && !memcmp(row, got, 256));

	/* SEEK_DATA / SEEK_HOLE support */
	uint64_t r;
	CHECK(t_row_next(s, id, 2, &r) == 1 && r == 77);
	CHECK(t_row_next(s, id, store_max_row(256) + 1, &r) == 0);
	CHECK(t_row_hole(s, id, 0, &r) == 0 && r == 2);

	struct store_attr a;
	OK(store_table_getattr(s, id, &a));
	CHECK(a.nrows == 5 && a.size == store_max_size(256));
	CHECK(store_table_set_geometry(s, id, 32, EMB_DT_F32) == -EBUSY);
	/* rows of the same size: the dtype changes, the rows stay */
	OK(store_table_set_geometry(s, id, 128, EMB_DT_F16));
	CHECK(t_row_read(s, id, 77, got) == 1 && !memcmp(row, got, 256));
	OK(store_table_set_geometry(s, id, 64, EMB_DT_F32));
	fsck_clean(s);
	s = reopen(s);
	fill(row, 256, 1ull << 40, 1);
	CHECK(t_row_read(s, id, 1ull << 40, got) == 1 && !memcmp(row, got, 256));
	fsck_clean(s);

	/* truncate mid-row: the tail is zeroed, later rows dropped */
	OK(store_table_truncate(s, id, 256 + 100));
	OK(store_table_getattr(s, id, &a));
	CHECK(a.nrows == 2 && a.size == 356);
	fill(row, 256, 1, 1);
	memset(row + 100, 0, 156);
	CHECK(t_row_read(s, id, 1, got) == 1 && !memcmp(row, got, 256));
	CHECK(t_row_read(s, id, 1ull << 40, got) == 0);
	fsck_clean(s);
	store_close(s);
}

static int u64cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static void test_many(void)
{
	struct store *s = fresh(256 << 20);
	uint32_t id;
	enum { N = 200000, B = 4096 };
	static struct store_rowop ops[B];
	static uint8_t data[B][64];
	uint8_t got[64], want[64];
	struct store_stats empty, full;
	store_stats_get(s, &empty);
	OK(store_table_create(s, "big", 0644, 0, 0, 16, EMB_DT_F32, &id));
	for (uint64_t base = 0; base < N; base += B) {
		for (int i = 0; i < B; i++) {
			uint64_t rid = (base + (uint64_t)i) * 0x9E3779B97F4A7C15ull >> 20; /* scattered */
			fill(data[i], 64, rid, 2);
			ops[i] = (struct store_rowop){ rid, 0, 64, data[i], 0 };
		}
		OK(store_rows_write(s, id, ops, B, 0));
	}
	/* layout 3: a row kept in the pool costs at most 32 bytes beyond its
	 * own: a 16-byte header and an 8-byte index slot at 63-94% fill */
	store_stats_get(s, &full);
	double per_row = (double)(full.used_bytes - empty.used_bytes) / N - 64;
	printf("many: %.1f pool bytes per 64-byte row beyond the row, index %.1f\n", per_row,
	       (double)full.index_bytes / N);
	CHECK(per_row <= 32 && (double)full.index_bytes / N <= 16);
	s = reopen(s);
	/* the ids written, and how many distinct ones */
	uint64_t nw = (N + B - 1) / B * (uint64_t)B;
	uint64_t *rids = malloc(nw * sizeof(*rids));
	CHECK(rids);
	for (uint64_t k = 0; k < nw; k++)
		rids[k] = k * 0x9E3779B97F4A7C15ull >> 20;
	qsort(rids, nw, sizeof(*rids), u64cmp);
	uint64_t distinct = 0;
	for (uint64_t k = 0; k < nw; k++)
		distinct += k == 0 || rids[k] != rids[k - 1];
	struct store_attr a;
	OK(store_table_getattr(s, id, &a));
	CHECK(a.nrows == distinct);
	for (uint64_t k = 0; k < nw; k++) {
		uint64_t rid = k * 0x9E3779B97F4A7C15ull >> 20;
		fill(want, 64, rid, 2);
		CHECK(t_row_read(s, id, rid, got) == 1 && !memcmp(want, got, 64));
		if (k + 1 < nw && rids[k] + 1 < rids[k + 1]) /* the id after a written one is a hole */
			CHECK(t_row_read(s, id, rids[k] + 1, got) == 0);
	}
	free(rids);
	fsck_clean(s);

	/* unlink frees everything at release */
	struct store_stats before, after;
	store_stats_get(s, &before);
	OK(store_table_unlink(s, "big"));
	CHECK(store_table_lookup(s, "big", &id) == -ENOENT);
	OK(store_table_release(s, id));
	store_stats_get(s, &after);
	CHECK(after.rows == 0);
	CHECK(after.free_bytes > before.free_bytes + 10 * (1 << 20));
	fsck_clean(s);
	store_close(s);
}

/* Rows [from, from + n) of rs bytes, generation gen, in groups of 4096. */
static int t_write_gen(struct store *s, uint32_t id, uint32_t rs, uint64_t from, size_t n, uint64_t gen)
{
	enum { G = 4096 };
	static struct store_rowop ops[G];
	uint8_t *data = malloc((size_t)G * rs);
	CHECK(data);
	int ret = 0;
	for (size_t at = 0; at < n && !ret; at += G) {
		size_t k = n - at < G ? n - at : G;
		for (size_t i = 0; i < k; i++) {
			fill(data + i * rs, rs, from + at + i, gen);
			ops[i] = (struct store_rowop){ from + at + i, 0, rs, data + i * rs, 0 };
		}
		ret = store_rows_write(s, id, ops, k, 0);
	}
	free(data);
	return ret;
}

/* Layout 3's chains: rows rewritten after snapshots get a link per kept
 * version; every view reads its own bytes; dropping the snapshots frees
 * the old versions and their links, and a row left with one version is
 * referred to directly again: the pool's use comes back to what the rows
 * took before (a row costs no link unless a snapshot holds an older one). */
static void test_links(void)
{
	struct store *s = fresh(64 << 20);
	uint32_t id;
	enum { N = 20000 };
	struct store_stats u1, u2, u3;
	struct store_snap s1, s2;
	OK(store_table_create(s, "l", 0644, 0, 0, 16, EMB_DT_F32, &id));
	OK(t_write_gen(s, id, 64, 0, N, 1));
	store_stats_get(s, &u1);
	OK(store_snap_create(s, "s1", 1, &s1));
	OK(t_write_gen(s, id, 64, 0, N, 2));
	OK(store_snap_create(s, "s2", 1, &s2));
	OK(t_write_gen(s, id, 64, 0, N / 2, 3));
	store_stats_get(s, &u2);
	CHECK(u2.used_bytes - u1.used_bytes >= (uint64_t)N * 80 + (N / 2) * (80 + 32));
	uint8_t got[64], want[64];
	struct store_view v1, v2;
	OK(store_view_snap(s, s1.idx, id, &v1));
	OK(store_view_snap(s, s2.idx, id, &v2));
	for (uint64_t r = 0; r < N; r += 7) {
		OK(store_rows_read(s, &v1, &r, 1, got, NULL, NULL));
		fill(want, 64, r, 1);
		CHECK(!memcmp(got, want, 64));
		OK(store_rows_read(s, &v2, &r, 1, got, NULL, NULL));
		fill(want, 64, r, 2);
		CHECK(!memcmp(got, want, 64));
		CHECK(t_row_read(s, id, r, got) == 1);
		fill(want, 64, r, r < N / 2 ? 3 : 2);
		CHECK(!memcmp(got, want, 64));
	}
	fsck_clean(s);
	s = reopen(s);
	OK(store_snap_drop(s, "s1"));
	OK(store_view_snap(s, s2.idx, id, &v2));
	for (uint64_t r = 0; r < N; r += 7) {
		OK(store_rows_read(s, &v2, &r, 1, got, NULL, NULL));
		fill(want, 64, r, 2);
		CHECK(!memcmp(got, want, 64));
	}
	OK(store_snap_drop(s, "s2"));
	store_stats_get(s, &u3);
	printf("links: %llu pool bytes before the snapshots, %llu with them, %llu after dropping them\n",
	       (unsigned long long)u1.used_bytes, (unsigned long long)u2.used_bytes,
	       (unsigned long long)u3.used_bytes);
	CHECK(u3.used_bytes <= u1.used_bytes + u1.used_bytes / 100 + (64 << 10));
	for (uint64_t r = 0; r < N; r += 7) {
		CHECK(t_row_read(s, id, r, got) == 1);
		fill(want, 64, r, r < N / 2 ? 3 : 2);
		CHECK(!memcmp(got, want, 64));
	}
	fsck_clean(s);
	store_close(s);
}

static void test_enospc(void)
{
	struct store *s = fresh(16 << 20);
	uint32_t id;
	enum { B = 512 };
	static struct store_rowop ops[B];
	static uint8_t data[B][1024];
	uint8_t got[1024], want[1024];
	OK(store_table_create(s, "t", 0644, 0, 0, 256, EMB_DT_F32, &id));
	uint64_t written = 0;
	int ret = 0;
	for (int round = 0; round < 100000 && !ret; round++) {
		for (int i = 0; i < B; i++) {
			fill(data[i], 1024, written + (uint64_t)i, 3);
			ops[i] = (struct store_rowop){ written + (uint64_t)i, 0, 1024, data[i], 0 };
		}
		ret = store_rows_write(s, id, ops, B, 0);
		if (!ret)
			written += B;
	}
	CHECK(ret == -ENOSPC);
	CHECK(written > 0);
	struct store_attr a;
	OK(store_table_getattr(s, id, &a));
	CHECK(a.nrows == written); /* the failed batch added nothing */
	for (uint64_t r = 0; r < written; r += 13) {
		fill(want, 1024, r, 3);
		CHECK(t_row_read(s, id, r, got) == 1 && !memcmp(want, got, 1024));
	}
	CHECK(t_row_read(s, id, written, got) == 0);
	fsck_clean(s);
	/* deleting rows makes room again */
	for (int i = 0; i < B; i++)
		ops[i] = (struct store_rowop){ (uint64_t)i, 0, 0, NULL, 0 };
	OK(store_rows_write(s, id, ops, B, 0));
	for (int i = 0; i < B / 2; i++)
		ops[i] = (struct store_rowop){ written + (uint64_t)i, 0, 1024, data[i], 0 };
	OK(store_rows_write(s, id, ops, B / 2, 0));
	s = reopen(s);
	OK(store_table_getattr(s, id, &a));
	CHECK(a.nrows == written - B + B / 2);
	for (uint64_t r = 0; r < written + B / 2; r++) {
		int st = t_row_read(s, id, r, got);
		if (r < B) {
			CHECK(st == 0);
			continue;
		}
		fill(want, 1024, r, 3);
		CHECK(st == 1 && !memcmp(want, got, 1024));
	}
	fsck_clean(s);
	store_close(s);
}

/* ---- SIGKILL tests -------------------------------------------------------
 *
 * A child writes to the pool until it is killed at a random point; it logs
 * each operation (in memory shared with the parent) before the call and
 * marks it done when the call returns 0.  Its batches are a function of
 * (seed, round, gen), so the parent replays the log over a shadow of the
 * table: every operation done must have survived recovery, each row of the
 * one in flight (at most one) must hold its old or its new bytes, and
 * nothing else may have changed. */
enum { OP_COMMIT = 1, OP_SNAP, OP_DROP };
struct op {
	uint32_t kind, done;
	uint64_t gen;
	int durable;
	char name[32];
};
#define LOG_CAP 65536u
struct oplog {
	uint64_t n;
	struct op op[LOG_CAP];
};
static struct oplog *oplog;

/* Log an operation before it is made; returns it (NULL: the log is full). */
static struct op *log_op(uint32_t kind, uint64_t gen, int durable, const char *name)
{
	uint64_t n = oplog->n;
	if (n == LOG_CAP)
		return NULL;
	struct op *o = &oplog->op[n];
	*o = (struct op){ kind, 0, gen, durable, "" };
	if (name)
		snprintf(o->name, sizeof(o->name), "%s", name);
	__atomic_store_n(&oplog->n, n + 1, __ATOMIC_RELEASE);
	return o;
}

static void log_done(struct op *o)
{
	__atomic_store_n(&o->done, 1, __ATOMIC_RELEASE);
}

/* The rows (and deletes) of a writer's batch gen of round: n ops on rows
 * < nrows of rs bytes, 1 in del_every deleted. */
static void batch_of(uint64_t round, uint64_t gen, struct store_rowop *ops, uint8_t *data, size_t n,
		     uint32_t rs, uint64_t nrows, unsigned del_every)
{
	uint64_t x = mix(seed ^ (round << 40) ^ gen);
	for (size_t i = 0; i < n; i++) {
		x = mix(x);
		uint64_t rid = x % nrows;
		fill(data + i * rs, rs, rid, gen);
		int del = (x >> 40) % del_every == 0;
		ops[i] = (struct store_rowop){ rid, 0, rs, del ? NULL : data + i * rs, 0 };
	}
}

/* What a table holds: rows of rs bytes and whether each is stored. */
struct shadow {
	uint32_t rs;
	uint64_t n;
	uint8_t *bytes, *has;
};

static void shadow_init(struct shadow *w, uint32_t rs, uint64_t n)
{
	w->rs = rs;
	w->n = n;
	w->bytes = calloc(n, rs);
	w->has = calloc(n, 1);
	CHECK(w->bytes && w->has);
}

static void shadow_copy(struct shadow *to, const struct shadow *from)
{
	shadow_init(to, from->rs, from->n);
	memcpy(to->bytes, from->bytes, from->n * from->rs);
	memcpy(to->has, from->has, from->n);
}

static void shadow_free(struct shadow *w)
{
	free(w->bytes);
	free(w->has);
}

static void shadow_apply(struct shadow *w, const struct store_rowop *ops, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint8_t *row = w->bytes + ops[i].row * w->rs;
		w->has[ops[i].row] = ops[i].data != NULL;
		if (ops[i].data)
			memcpy(row, ops[i].data, w->rs);
		else
			memset(row, 0, w->rs);
	}
}

/* Row r as the store has it (idx: a snapshot, or UINT32_MAX for the live
 * table) equals the shadow's. */
static int row_matches(struct store *s, uint32_t idx, uint32_t id, const struct shadow *w, uint64_t r)
{
	uint8_t got[256];
	int st = idx == UINT32_MAX ? t_row_read(s, id, r, got) : t_snap_row_read(s, idx, id, r, got);
	CHECK(st == 0 || st == 1);
	return st == w->has[r] && !memcmp(got, w->bytes + r * w->rs, w->rs);
}

/* The live table after recovery against the shadow of every commit done
 * (updated to what the table holds): a row the commit in flight (inflight,
 * its n ops) touched holds its old or its new bytes (each row is
 * crash-atomic, the group is not), every other row is as the shadow says.
 * Returns how many rows the commit in flight changed; *differ: how many it
 * would have changed whole. */
static uint64_t check_rows(struct store *s, uint32_t id, struct shadow *w, const struct store_rowop *inflight,
			   size_t n, uint64_t *differ)
{
	struct shadow fwd;
	shadow_copy(&fwd, w);
	if (inflight)
		shadow_apply(&fwd, inflight, n);
	uint8_t *touched = calloc(w->n, 1);
	CHECK(touched);
	for (size_t i = 0; inflight && i < n; i++)
		touched[inflight[i].row] = 1;
	uint64_t forward = 0;
	for (uint64_t r = 0; r < w->n; r++) {
		int b = row_matches(s, UINT32_MAX, id, w, r);
		int f = touched[r] && row_matches(s, UINT32_MAX, id, &fwd, r);
		*differ += touched[r] && (w->has[r] != fwd.has[r] ||
					  memcmp(w->bytes + r * w->rs, fwd.bytes + r * w->rs, w->rs));
		if (!b && !f)
			fprintf(stderr, "row %llu is %s\n", (unsigned long long)r,
				touched[r] ? "neither before nor after the commit in flight" : "changed, no commit in flight touched it");
		CHECK(b || f);
		if (f && !b) {
			memcpy(w->bytes + r * w->rs, fwd.bytes + r * w->rs, w->rs);
			w->has[r] = fwd.has[r];
			forward++;
		}
	}
	shadow_free(&fwd);
	free(touched);
	return forward;
}

/* Run writer(s, table, round, ready_fd) in a child on the pool at path:
 * it commits in a loop and writes one byte to ready_fd after its first
 * commit.  SIGKILL it at a random point after that (on purpose), then
 * reopen the pool (recovery) and return it. */
typedef void (*writer_fn)(struct store *s, uint32_t id, int round, int ready_fd);

static struct store *kill_midway(writer_fn writer, uint32_t id, int round, int max_ms)
{
	struct store *s;
	int pfd[2];
	oplog->n = 0;
	CHECK(pipe(pfd) == 0);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		if (store_open(path, &s, err, sizeof(err)))
			_exit(2);
		writer(s, id, round, pfd[1]); /* does not return */
		_exit(3);
	}
	char x;
	close(pfd[1]);
	CHECK(read(pfd[0], &x, 1) == 1); /* the writer has committed once */
	close(pfd[0]);
	struct timespec ts = { 0, (long)(5 + rand() % max_ms) * 1000000L };
	nanosleep(&ts, NULL); /* a random point in the writer's life, on purpose */
	kill(pid, SIGKILL);
	int st;
	waitpid(pid, &st, 0);
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	if (store_open(path, &s, err, sizeof(err))) {
		fprintf(stderr, "reopen after crash: %s\n", err);
		exit(1);
	}
	return s;
}

/* The log is full: wait for the kill. */
static void log_full(void)
{
	for (;;)
		pause();
}

#define CW_ROWS 20000u
#define CW_N 256u
#define CW_RS 128u

static void crash_writer(struct store *s, uint32_t id, int round, int ready_fd)
{
	static uint8_t data[CW_N][CW_RS];
	struct store_rowop ops[CW_N];
	for (uint64_t gen = 0;; gen++) {
		batch_of((uint64_t)round, gen, ops, &data[0][0], CW_N, CW_RS, CW_ROWS, 10);
		struct op *o = log_op(OP_COMMIT, gen, 0, NULL);
		if (!o)
			log_full();
		if (store_rows_write(s, id, ops, CW_N, 0))
			_exit(3);
		log_done(o);
		if (gen == 0 && write(ready_fd, "x", 1) != 1)
			_exit(4);
	}
}

/* A child commits random batches until SIGKILLed: recovery (reported) keeps
 * every commit the child saw succeed, each row of the one in flight old or
 * new, and every slot accounted for; a clean close needs no recovery. */
static void test_crash(void)
{
	struct store *s = fresh(64 << 20);
	uint32_t id;
	OK(store_table_create(s, "c", 0644, 0, 0, CW_RS / 4, EMB_DT_F32, &id));
	store_close(s);
	struct shadow w;
	shadow_init(&w, CW_RS, CW_ROWS);
	static uint8_t data[CW_N][CW_RS];
	struct store_rowop ops[CW_N];
	uint64_t commits = 0, in_flight = 0, whole = 0, none = 0, part = 0;
	for (int round = 0; round < 12; round++) {
		s = kill_midway(crash_writer, id, round, 60);
		struct store_stats ss;
		store_stats_get(s, &ss);
		CHECK(ss.recovered == 1);
		uint64_t n = oplog->n;
		CHECK(n > 0 && oplog->op[0].done); /* the child had committed once */
		for (uint64_t i = 0; i < n; i++) {
			struct op *o = &oplog->op[i];
			CHECK(o->kind == OP_COMMIT && o->gen == i);
			CHECK(o->done || i == n - 1); /* only the last can be in flight */
			batch_of((uint64_t)round, o->gen, ops, &data[0][0], CW_N, CW_RS, CW_ROWS, 10);
			if (o->done)
				shadow_apply(&w, ops, CW_N);
		}
		commits += n;
		int inf = !oplog->op[n - 1].done;
		in_flight += inf;
		uint64_t differ = 0, fw = check_rows(s, id, &w, inf ? ops : NULL, CW_N, &differ);
		whole += inf && fw == differ;
		none += inf && fw == 0;
		part += inf && fw && fw < differ;
		fsck_clean(s);
		store_close(s);
	}
	/* a clean close: nothing to recover, everything there */
	CHECK(store_open(path, &s, err, sizeof(err)) == 0);
	struct store_stats ss;
	store_stats_get(s, &ss);
	CHECK(ss.recovered == 0);
	uint64_t differ = 0;
	CHECK(check_rows(s, id, &w, NULL, 0, &differ) == 0);
	store_close(s);
	shadow_free(&w);
	printf("  12 kills after %llu commits, %llu in a commit: its rows were all there after recovery %llu times, none %llu, some %llu\n",
	       (unsigned long long)commits, (unsigned long long)in_flight, (unsigned long long)whole,
	       (unsigned long long)none, (unsigned long long)part);
}

static void rowat(struct store *s, uint32_t id, uint64_t row, uint64_t gen)
{
	uint8_t d[64];
	fill(d, 64, row, gen);
	struct store_rowop op = { row, 0, 64, d, 0 };
	OK(store_rows_write(s, id, &op, 1, (row + 1) * 64));
}

static void expect_snap(struct store *s, uint32_t idx, uint32_t id, uint64_t row, uint64_t gen)
{
	uint8_t got[64], want[64];
	int r = t_snap_row_read(s, idx, id, row, got);
	if (gen == 0) {
		CHECK(r == 0);
		return;
	}
	fill(want, 64, row, gen);
	CHECK(r == 1 && !memcmp(got, want, 64));
}

/* The pool file offset of row's version holding its fill(gen) bytes (the
 * store closed): found by its bytes and checked by its key. */
static long ver_at(uint64_t row, uint64_t gen)
{
	uint8_t want[64];
	fill(want, 64, row, gen);
	int fd = open(path, O_RDONLY);
	CHECK(fd >= 0);
	struct stat sb;
	CHECK(!fstat(fd, &sb));
	uint8_t *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fd, 0);
	CHECK(m != MAP_FAILED);
	long at = -1;
	for (size_t o = sizeof(struct emb_version); o + 64 <= (size_t)sb.st_size && at < 0; o += 8) {
		const struct emb_version *v = (const void *)(m + o - sizeof(*v));
		if (!memcmp(m + o, want, 64) && (v->key & EMB_ROW_ID_MASK) == row && !(v->key & EMB_VK_KIND))
			at = (long)(o - sizeof(*v));
	}
	munmap(m, (size_t)sb.st_size);
	close(fd);
	CHECK(at >= 0);
	return at;
}

/* Change n bytes of the (closed) pool file at off. */
static void poke(long off, const void *b, size_t n)
{
	int fd = open(path, O_WRONLY);
	CHECK(fd >= 0 && pwrite(fd, b, n, off) == (ssize_t)n);
	close(fd);
}

static uint64_t csum_errors(struct store *s)
{
	struct store_stats st;
	store_stats_get(s, &st);
	return st.checksum_errors;
}

/* A fresh pool with table "t" (16 f32) holding rows 0-7 of generation 1,
 * closed: the table's id. */
static uint32_t eight_rows(void)
{
	struct store *s = fresh(64 << 20);
	uint32_t id;
	OK(store_table_create(s, "t", 0644, 0, 0, 16, EMB_DT_F32, &id));
	for (uint64_t r = 0; r < 8; r++)
		rowat(s, id, r, 1);
	store_close(s);
	return id;
}

/* A version a row written whole replaces is checked by its header alone
 * while no snapshot is live (it is freed unread), and whole otherwise:
 * damaged bytes there cost nothing, a damaged batch past the pool's is
 * still caught (the new version does not take it, so a later snapshot
 * sees the row), and with a live snapshot damaged bytes are found at the
 * rewrite and the snapshot reads EIO. */
static void test_head_only(void)
{
	uint32_t id = eight_rows();
	uint8_t got[64], want[64];
	struct store *s;

	/* bytes damaged, no snapshot: replaced whole, unread, freed */
	long v5 = ver_at(5, 1), v6 = ver_at(6, 1);
	uint8_t x = 0x5a;
	poke(v5 + (long)sizeof(struct emb_version) + 9, &x, 1);
	/* row 6's batch past the pool's (its checksum no longer matches either) */
	uint32_t blo = 1u << 30;
	poke(v6 + (long)offsetof(struct emb_version, batch_lo), &blo, 4);
	s = reopen(NULL);
	CHECK(t_row_read(s, id, 5, got) == -EIO);
	uint64_t e0 = csum_errors(s);
	rowat(s, id, 5, 2);
	CHECK(csum_errors(s) == e0);
	fill(want, 64, 5, 2);
	CHECK(t_row_read(s, id, 5, got) == 1 && !memcmp(got, want, 64));
	rowat(s, id, 6, 2);
	CHECK(csum_errors(s) == e0 + 1);
	struct store_snap sn;
	OK(store_snap_create(s, "after", 1, &sn));
	expect_snap(s, sn.idx, id, 6, 2);
	expect_snap(s, sn.idx, id, 5, 2);
	/* row 5's old slot was freed; row 6's damaged one is left alone, as a
	 * damaged element always is (commit.c, plan_damaged) */
	struct store_fsck f;
	OK(store_fsck(s, &f));
	CHECK(f.leaked_slots == 1 && !f.bad_versions && !f.double_refs && !f.bad_counts);
	store_close(s);

	/* bytes damaged with a live snapshot: checked whole at the rewrite, the
	 * snapshot's read is EIO, the live row is the new one */
	long v7 = ver_at(7, 1);
	poke(v7 + (long)sizeof(struct emb_version) + 3, &x, 1);
	s = reopen(NULL);
	e0 = csum_errors(s);
	rowat(s, id, 7, 2);
	CHECK(csum_errors(s) == e0 + 1);
	fill(want, 64, 7, 2);
	CHECK(t_row_read(s, id, 7, got) == 1 && !memcmp(got, want, 64));
	OK(store_snap_lookup(s, "after", &sn));
	CHECK(t_snap_row_read(s, sn.idx, id, 7, got) == -EIO);
	expect_snap(s, sn.idx, id, 4, 1);
	store_close(s);
}

static void peek(long off, void *b, size_t n)
{
	int fd = open(path, O_RDONLY);
	CHECK(fd >= 0 && pread(fd, b, n, off) == (ssize_t)n);
	close(fd);
}

static uint64_t peek64(long off)
{
	uint64_t v;
	peek(off, &v, 8);
	return v;
}

/* libpmemobj's checksum of a log entry (Fletcher-64 over 32-bit words, its
 * checksum field as zero, then the log's generation), written here from
 * PMDK 1.12's ulog.c to check store/lanes.c against libpmemobj itself. */
static uint64_t entry_sum(const uint8_t *e, size_t len, uint64_t gen)
{
	uint32_t lo = 0, hi = 0, w;
	for (size_t i = 0; i < len + 8; i += 4) {
		if (i >= 8 && i < 16)
			w = 0;
		else if (i < len)
			memcpy(&w, e + i, 4);
		else
			memcpy(&w, (const uint8_t *)&gen + (i - len), 4);
		lo += w;
		hi += lo;
	}
	return (uint64_t)hi << 32 | lo;
}

/* Clear the slab bitmap bit of the slot at pool file offset v (the store
 * closed): the slab whose slots cover v is found by its header's magic. */
static void bit_clear(long v)
{
	int fd = open(path, O_RDWR);
	CHECK(fd >= 0);
	struct stat sb;
	CHECK(!fstat(fd, &sb));
	uint8_t *m = mmap(NULL, (size_t)sb.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(m != MAP_FAILED);
	int done = 0;
	for (long o = (v & ~7L) - 8; o >= 0 && !done; o -= 8) {
		struct emb_slab *h = (void *)(m + o);
		if (h->magic != EMB_SLAB_MAGIC || !h->slot_size)
			continue;
		long start = o + (long)h->data_off;
		if (v < start || v >= start + (long)h->nslots * h->slot_size || (v - start) % h->slot_size)
			continue;
		long k = (v - start) / h->slot_size;
		CHECK(h->bitmap[k / 64] & (1ull << (k % 64)));
		h->bitmap[k / 64] &= ~(1ull << (k % 64));
		done = 1;
	}
	CHECK(done);
	CHECK(!msync(m, (size_t)sb.st_size, MS_SYNC));
	munmap(m, (size_t)sb.st_size);
	close(fd);
}

/* A live version whose slab bit was lost: store_fsck counts it, the repair
 * marks it allocated again (in the pool: it holds after a reopen), and new
 * rows allocated afterwards never land on it. */
static void test_lost_bit(void)
{
	uint32_t id = eight_rows();
	uint8_t got[64], want[64];
	struct store *s;
	bit_clear(ver_at(3, 1));
	s = reopen(NULL);
	struct store_fsck f;
	OK(store_fsck(s, &f));
	CHECK(f.bad_versions == 1 && f.free_refs == 1 && !f.leaked_slots && !f.double_refs && !f.bad_counts);
	struct store_fsck_opts o = { .repair = 1 };
	struct store_fsck_fixed fx;
	OK(store_fsck_run(s, &o, &f, &fx));
	CHECK(fx.bits == 1 && !fx.slots && !fx.counts);
	fsck_clean(s);
	store_close(s);
	s = reopen(NULL);
	fsck_clean(s);
	uint64_t e0 = csum_errors(s);
	for (uint64_t r = 8; r < 400; r++)
		rowat(s, id, r, 1);
	CHECK(csum_errors(s) == e0);
	fill(want, 64, 3, 1);
	CHECK(t_row_read(s, id, 3, got) == 1 && !memcmp(got, want, 64));
	fsck_clean(s);
	store_close(s);
}

/* The open refuses a pool whose libpmemobj lanes hold an entry recovery
 * would apply although no transaction wrote it, and changes nothing in the
 * file: libpmemobj itself applies a value entry in an undo log (here 8
 * zero bytes into its own pool header, after which no open succeeds), and
 * loops forever on an entry of no known type.  A stale snapshot entry,
 * damaged or not, is no reason to refuse; a valid one is rolled back. */
static void test_lanes(void)
{
	struct store *s = fresh(64 << 20);
	uint32_t id;
	uint8_t got[64];
	OK(store_table_create(s, "t", 0644, 0, 0, 16, EMB_DT_F32, &id));
	for (uint64_t r = 0; r < 4; r++)
		rowat(s, id, r, 1);
	store_close(s);
	long lanes = (long)peek64(5120), undo = 960, data = undo + 64;
	const long lane_sz = 3072;
	struct {
		long lane;
		uint64_t word;
		const char *why;
	} bad[] = {
		{ 1, 14, "a set entry" },				  /* the case test_damage met */
		{ 0, peek64(lanes + data) & ~(7ull << 61), "a set entry" }, /* a snapshot's type bits */
		{ 2, (3ull << 61) | 4096, "an unknown (3) entry" },
		{ 3, (1ull << 61) | 8192, "an and entry" },
	};
	uint8_t hdr[8192], hdr2[8192];
	peek(0, hdr, sizeof(hdr));
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		long at = lanes + bad[i].lane * lane_sz + data;
		uint64_t was = peek64(at);
		poke(at, &bad[i].word, 8);
		char want[64];
		snprintf(want, sizeof(want), "lane %ld, undo log: %s", bad[i].lane, bad[i].why);
		CHECK(store_open(path, &s, err, sizeof(err)) == -EIO);
		if (!strstr(err, want)) {
			fprintf(stderr, "lanes: %s\n  (wanted \"%s\")\n", err, want);
			exit(1);
		}
		CHECK(store_check(path, err, sizeof(err)) == -EIO && strstr(err, want));
		peek(0, hdr2, sizeof(hdr2));
		CHECK(!memcmp(hdr, hdr2, sizeof(hdr)));
		CHECK(peek64(at) == bad[i].word);
		poke(at, &was, 8);
	}

	/* a byte of lane 0's stale snapshot damaged: its checksum fails, the
	 * walk stops there, the pool opens */
	uint8_t x;
	peek(lanes + data + 40, &x, 1);
	x ^= 0x21;
	poke(lanes + data + 40, &x, 1);
	s = reopen(NULL);
	CHECK(t_row_read(s, id, 2, got) == 1);
	store_close(s);

	/* a valid snapshot entry (a transaction in flight at a crash) of 40
	 * bytes over row 3's bytes: accepted, and libpmemobj rolls it back,
	 * so the row reads EIO (its checksum no longer holds) */
	long v3 = ver_at(3, 1) + (long)sizeof(struct emb_version);
	uint8_t e[64 + 8] = { 0 };
	uint64_t w = (6ull << 61) | (uint64_t)v3, size = 40, gen = peek64(lanes + undo + 24), sum;
	memcpy(e, &w, 8);
	memcpy(e + 16, &size, 8);
	memset(e + 24, 0xa5, 40);
	sum = entry_sum(e, 64, gen);
	memcpy(e + 8, &sum, 8);
	poke(lanes + data, e, sizeof(e)); /* and a zero word after it: the log's end */
	s = reopen(NULL);
	CHECK(t_row_read(s, id, 3, got) == -EIO);
	CHECK(t_row_read(s, id, 2, got) == 1);
	store_close(s);
	CHECK(peek64(lanes + undo + 24) != gen); /* a new generation: the entry is stale */

	/* the same entry aimed past the pool's end: refused */
	w = (6ull << 61) | (64ull << 20);
	memcpy(e, &w, 8);
	sum = entry_sum(e, 64, peek64(lanes + undo + 24));
	memcpy(e + 8, &sum, 8);
	poke(lanes + data, e, sizeof(e));
	CHECK(store_open(path, &s, err, sizeof(err)) == -EIO && strstr(err, "outside the pool"));
}

/* Versions kept for snapshots, tombstones, zombies, drops; fsck clean throughout. */
static void test_snap(void)
{
	struct store *s = fresh(64 << 20);
	uint32_t id;
	struct store_snap s1, s2;
	OK(store_table_create(s, "t", 0644, 0, 0, 16, EMB_DT_F32, &id));
	for (uint64_t r = 0; r < 100; r++)
		rowat(s, id, r, 1);
	OK(store_snap_create(s, "s1", 1, &s1));
	CHECK(store_snap_create(s, "s1", 1, NULL) == -EEXIST);
	CHECK(store_batch_get(s) == s1.batch + 1);
	CHECK(store_batch_set(s, s1.batch) == -EINVAL);
	OK(store_batch_set(s, s1.batch + 5));
	for (uint64_t r = 0; r < 50; r++)
		rowat(s, id, r, 2); /* rows 0..49 now gen 2, s1 keeps gen 1 */
	rowat(s, id, 0, 3);     /* same batch again: gen 2 is not kept */
	struct store_rowop del = { 60, 0, 0, NULL, 0 };
	OK(store_rows_write(s, id, &del, 1, 0)); /* a tombstone */
	OK(store_table_truncate(s, id, 90 * 64)); /* rows 90..99 tombstoned */
	OK(store_snap_create(s, "s2", 1, &s2));
	rowat(s, id, 1, 4);
	fsck_clean(s);
	expect_snap(s, s1.idx, id, 0, 1);
	expect_snap(s, s1.idx, id, 1, 1);
	expect_snap(s, s1.idx, id, 60, 1);
	expect_snap(s, s1.idx, id, 95, 1);
	expect_snap(s, s2.idx, id, 0, 3);
	expect_snap(s, s2.idx, id, 1, 2);
	expect_snap(s, s2.idx, id, 60, 0);
	expect_snap(s, s2.idx, id, 95, 0);
	uint8_t buf[64];
	CHECK(t_row_read(s, id, 60, buf) == 0 && t_row_read(s, id, 95, buf) == 0);
	struct store_attr a;
	OK(store_table_getattr(s, id, &a));
	CHECK(a.nrows == 89);
	OK(t_snap_table_getattr(s, s1.idx, id, &a));
	CHECK(a.size == 100 * 64 && a.nrows == 100);
	uint64_t r;
	CHECK(t_snap_row_next(s, s2.idx, id, 60, &r) == 1 && r == 61);
	CHECK(t_snap_row_hole(s, s1.idx, id, 0, &r) == 0 && r == 100);
	CHECK(store_table_set_geometry(s, id, 8, EMB_DT_F32) == -EBUSY);
	CHECK(store_table_set_geometry(s, id, 32, EMB_DT_F16) == -EBUSY); /* the snapshot's rows */

	/* unlink: the table lives on for the snapshots (a zombie) */
	OK(store_table_unlink(s, "t"));
	OK(store_table_release(s, id));
	expect_snap(s, s1.idx, id, 42, 1);
	expect_snap(s, s2.idx, id, 42, 2);
	fsck_clean(s);
	s = reopen(s);
	expect_snap(s, s1.idx, id, 99, 1);
	struct store_stats st0, st1, st2;
	store_stats_get(s, &st0);
	OK(store_snap_drop(s, "s1"));
	CHECK(store_snap_lookup(s, "s1", &s1) == -ENOENT);
	expect_snap(s, s2.idx, id, 1, 2);
	expect_snap(s, s2.idx, id, 0, 3);
	fsck_clean(s);
	store_stats_get(s, &st1);
	OK(store_snap_drop(s, "s2"));
	store_stats_get(s, &st2);
	CHECK(st1.free_bytes >= st0.free_bytes && st2.free_bytes > st1.free_bytes);
	CHECK(store_table_getattr(s, id, &a) == -ENOENT); /* the zombie is gone */
	fsck_clean(s);
	store_close(s);
}

/* Rows 0..n-1 at generation gen, stamped with batch b (as the row cache's
 * write-back stamps them: the batch current when each row was written). */
static void rows_stamped(struct store *s, uint32_t id, uint64_t n, uint64_t gen, uint64_t b)
{
	uint8_t *d = malloc(n * 64);
	struct store_rowop *ops = malloc(n * sizeof(*ops));
	CHECK(d && ops);
	for (uint64_t r = 0; r < n; r++) {
		fill(d + r * 64, 64, r, gen);
		ops[r] = (struct store_rowop){ r, 0, 64, d + r * 64, b };
	}
	OK(store_rows_write(s, id, ops, n, n * 64));
	free(ops);
	free(d);
}

/* The pool file's snapshot record named name (found by its name: no other
 * object holds it), mapped for the caller to tear; NULL if none. */
static struct emb_snap *rec_in_file(const char *name, void **map, size_t *len)
{
	int fd = open(path, O_RDWR);
	CHECK(fd >= 0);
	struct stat stt;
	CHECK(fstat(fd, &stt) == 0);
	*len = (size_t)stt.st_size;
	*map = mmap(NULL, *len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	CHECK(*map != MAP_FAILED);
	size_t nl = strlen(name) + 1, off = offsetof(struct emb_snap, name);
	for (char *p = (char *)*map + off; p + nl <= (char *)*map + *len; p++) {
		p = memmem(p, (size_t)((char *)*map + *len - p), name, nl);
		if (!p)
			break;
		if (((uintptr_t)(p - off) & 7) == 0)
			return (struct emb_snap *)(p - off);
	}
	return NULL;
}

/* Snapshots taken without a barrier (issue 17): pending until made
 * durable, readable at once, lost at a close or a crash before that (what
 * commits kept for them comes back), kept after it; a torn pending or free
 * record does not stop the pool from mounting. */
static void test_snap_pending(void)
{
	struct store *s = fresh(64 << 20);
	uint32_t id;
	struct store_snap p1, p2, p3, p4, d, x;
	struct store_stats a, b;
	OK(store_table_create(s, "t", 0644, 0, 0, 16, EMB_DT_F32, &id));
	rows_stamped(s, id, 200, 1, store_batch_get(s));
	OK(store_snap_create(s, "p1", 0, &p1));
	CHECK(!p1.durable && store_batch_get(s) == p1.batch + 1);
	rows_stamped(s, id, 100, 2, store_batch_get(s)); /* after p1: p1 keeps gen 1 */
	expect_snap(s, p1.idx, id, 5, 1);
	expect_snap(s, p1.idx, id, 150, 1);
	/* a row written before p1 and written back after it: p1 sees it */
	uint8_t row[64];
	fill(row, 64, 150, 7);
	struct store_rowop late = { 150, 0, 64, row, p1.batch };
	OK(store_rows_write(s, id, &late, 1, 0));
	expect_snap(s, p1.idx, id, 150, 7);
	OK(store_snap_create(s, "p2", 0, &p2));
	CHECK(p2.gen > p1.gen && p2.batch > p1.batch);
	OK(store_snap_set_durable(s, p1.idx, p1.gen));
	CHECK(store_snap_get(s, p1.idx, &x) == 0 && x.durable && x.ntables == 1);
	CHECK(store_snap_set_durable(s, p1.idx, p1.gen + 1000) == -ENOENT);
	OK(store_snap_set_durable(s, p1.idx, p1.gen)); /* again: nothing to do */
	fsck_clean(s);

	/* at reopen the pending p2 is gone, the durable p1 is whole */
	s = reopen(s);
	CHECK(store_snap_lookup(s, "p2", &x) == -ENOENT);
	OK(store_snap_lookup(s, "p1", &x));
	CHECK(x.durable && x.gen == p1.gen && x.batch == p1.batch);
	expect_snap(s, p1.idx, id, 5, 1);
	expect_snap(s, p1.idx, id, 150, 7);
	expect_snap(s, p1.idx, id, 199, 1);
	struct store_attr at;
	OK(t_snap_table_getattr(s, p1.idx, id, &at));
	CHECK(at.nrows == 200 && at.size == 200 * 64);
	fsck_clean(s);
	OK(store_snap_create(s, "d", 1, &d)); /* durable at once: one transaction */
	CHECK(d.durable && d.gen > p1.gen);

	/* dropping a pending snapshot gives back what only it kept */
	rows_stamped(s, id, 200, 8, store_batch_get(s));
	OK(store_snap_create(s, "p3", 0, &p3));
	rows_stamped(s, id, 200, 9, store_batch_get(s));
	expect_snap(s, p3.idx, id, 10, 8);
	store_stats_get(s, &a);
	OK(store_snap_drop(s, "p3"));
	store_stats_get(s, &b);
	CHECK(b.free_bytes > a.free_bytes);
	expect_snap(s, d.idx, id, 10, 2);
	fsck_clean(s);

	/* a pending snapshot lost at close: what was kept for it comes back at
	 * the next open */
	OK(store_snap_create(s, "p4", 0, &p4));
	rows_stamped(s, id, 200, 10, store_batch_get(s));
	store_stats_get(s, &a);
	s = reopen(s);
	store_stats_get(s, &b);
	CHECK(store_snap_lookup(s, "p4", &x) == -ENOENT);
	CHECK(b.free_bytes > a.free_bytes);
	expect_snap(s, d.idx, id, 10, 2);
	fsck_clean(s);

	/* torn records after a crash: a pending record with garbage in its body
	 * (the flags reached the device, the rest did not), and a free record
	 * holding a pending record's stores (the reverse) */
	OK(store_snap_create(s, "torn-pending", 0, NULL));
	OK(store_snap_create(s, "torn-free", 0, NULL));
	store_close(s);
	void *map;
	size_t len;
	struct emb_snap *r = rec_in_file("torn-pending", &map, &len);
	CHECK(r && (uint32_t)r->flags == (EMB_S_USED | EMB_S_PENDING));
	r->gen = r->batch = r->tables_off = 0x5a5a5a5a5a5a5a5aull;
	r->ntables = 0x77777777u;
	r->csum ^= 1;
	munmap(map, len);
	r = rec_in_file("torn-free", &map, &len);
	CHECK(r);
	r->flags = 0xffffffff00000000ull; /* free, with its complement */
	r->tables_off = 0x5a5a5a5a5a5a5a5aull;
	munmap(map, len);
	if (store_check(path, err, sizeof(err)) || store_open(path, &s, err, sizeof(err))) {
		fprintf(stderr, "torn snapshot records: %s\n", err);
		exit(1);
	}
	CHECK(store_snap_lookup(s, "torn-pending", &x) == -ENOENT);
	CHECK(store_snap_lookup(s, "torn-free", &x) == -ENOENT);
	OK(store_snap_lookup(s, "d", &x));
	expect_snap(s, d.idx, id, 10, 2);
	fsck_clean(s);
	store_close(s);
	CHECK(store_check(path, err, sizeof(err)) == 0);
}

/* Commits, snapshots (durable or not) and drops interleaved. */
#define SW_ROWS 3000u
#define SW_N 128u
#define SW_RS 64u

static void snap_crash_writer(struct store *s, uint32_t id, int round, int ready_fd)
{
	static uint8_t data[SW_N][SW_RS];
	struct store_rowop ops[SW_N];
	char name[32];
	for (uint64_t gen = 0;; gen++) {
		batch_of((uint64_t)round, gen, ops, &data[0][0], SW_N, SW_RS, SW_ROWS, 8);
		struct op *o = log_op(OP_COMMIT, gen, 0, NULL);
		if (!o)
			log_full();
		if (store_rows_write(s, id, ops, SW_N, 0))
			_exit(3);
		log_done(o);
		if (gen % 3 == 0) {
			snprintf(name, sizeof(name), "r%d-%llu", round, (unsigned long long)gen);
			int durable = (int)(mix(seed ^ ((uint64_t)round << 40) ^ gen ^ 0x5eed) % 2);
			if (!(o = log_op(OP_SNAP, gen, durable, name)))
				log_full();
			if (store_snap_create(s, name, durable, NULL))
				_exit(4);
			log_done(o);
		}
		uint32_t cur = 0;
		struct store_snap sn;
		int k = 0;
		while (store_snap_next(s, &cur, &sn) == 1)
			k++;
		if (k > 6 && store_snap_next(s, &(uint32_t){ 0 }, &sn) == 1) {
			if (!(o = log_op(OP_DROP, gen, 0, sn.name)))
				log_full();
			if (store_snap_drop(s, sn.name))
				_exit(5);
			log_done(o);
		}
		if (gen == 0 && write(ready_fd, "x", 1) != 1)
			_exit(6);
	}
}

/* A snapshot the pool must (or, maybe: may) hold, with its rows. */
struct esnap {
	char name[32];
	int durable, maybe;
	struct shadow rows;
};
#define MAX_ESNAP 64

static int esnap_find(struct esnap *e, int n, const char *name)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(e[i].name, name))
			return i;
	return -1;
}

static void esnap_del(struct esnap *e, int *n, int i)
{
	shadow_free(&e[i].rows);
	e[i] = e[--*n];
}

/* SIGKILL while commits, snapshots and drops interleave: every snapshot
 * created durable and not dropped is there with the rows it was taken with,
 * no other is (one not durable at the crash is dropped at mount), and the
 * table is as in test_crash. */
static void test_snap_crash(void)
{
	struct store *s = fresh(64 << 20);
	uint32_t id;
	OK(store_table_create(s, "c", 0644, 0, 0, SW_RS / 4, EMB_DT_F32, &id));
	store_close(s);
	struct shadow w;
	shadow_init(&w, SW_RS, SW_ROWS);
	static struct esnap e[MAX_ESNAP];
	int ne = 0;
	static uint8_t data[SW_N][SW_RS];
	struct store_rowop ops[SW_N];
	uint64_t checked = 0, gone = 0;
	for (int round = 0; round < 10; round++) {
		s = kill_midway(snap_crash_writer, id, round, 80);
		struct store_stats ss;
		store_stats_get(s, &ss);
		CHECK(ss.recovered == 1);
		uint64_t n = oplog->n;
		CHECK(n > 0 && oplog->op[0].done);
		int commit_in_flight = 0;
		for (uint64_t i = 0; i < n; i++) {
			struct op *o = &oplog->op[i];
			CHECK(o->done || i == n - 1);
			if (o->kind == OP_COMMIT) {
				batch_of((uint64_t)round, o->gen, ops, &data[0][0], SW_N, SW_RS, SW_ROWS, 8);
				if (o->done)
					shadow_apply(&w, ops, SW_N);
				else
					commit_in_flight = 1;
			} else if (o->kind == OP_SNAP) {
				CHECK(ne < MAX_ESNAP && esnap_find(e, ne, o->name) < 0);
				snprintf(e[ne].name, sizeof(e[ne].name), "%s", o->name);
				e[ne].durable = o->durable;
				e[ne].maybe = !o->done;
				shadow_copy(&e[ne].rows, &w);
				ne++;
			} else {
				int k = esnap_find(e, ne, o->name);
				CHECK(k >= 0);
				if (o->done)
					esnap_del(e, &ne, k);
				else
					e[k].maybe = 1;
			}
		}
		/* what the pool holds: durable snapshots only, each expected */
		uint32_t cur = 0;
		struct store_snap sn;
		int found = 0;
		while (store_snap_next(s, &cur, &sn) == 1) {
			int k = esnap_find(e, ne, sn.name);
			if (k < 0)
				fprintf(stderr, "snapshot %s should not be there\n", sn.name);
			CHECK(k >= 0 && e[k].durable && sn.durable);
			for (uint64_t r = 0; r < SW_ROWS; r++)
				CHECK(row_matches(s, sn.idx, id, &e[k].rows, r));
			checked++;
			found++;
		}
		for (int k = 0; k < ne;) {
			struct store_snap x;
			int there = store_snap_lookup(s, e[k].name, &x) == 0;
			if (!there && !e[k].maybe && e[k].durable)
				fprintf(stderr, "snapshot %s is lost\n", e[k].name);
			CHECK(there || e[k].maybe || !e[k].durable);
			if (!there) {
				gone += e[k].durable == 0;
				esnap_del(e, &ne, k);
				continue;
			}
			e[k].maybe = 0;
			k++;
		}
		CHECK(found == ne);
		uint64_t differ = 0;
		check_rows(s, id, &w, commit_in_flight ? ops : NULL, SW_N, &differ);
		fsck_clean(s);
		store_close(s);
	}
	CHECK(checked > 0);
	/* a clean close keeps them all */
	CHECK(store_open(path, &s, err, sizeof(err)) == 0);
	struct store_stats ss;
	store_stats_get(s, &ss);
	CHECK(ss.recovered == 0);
	for (int k = 0; k < ne; k++) {
		struct store_snap x;
		CHECK(store_snap_lookup(s, e[k].name, &x) == 0);
		for (uint64_t r = 0; r < SW_ROWS; r++)
			CHECK(row_matches(s, x.idx, id, &e[k].rows, r));
	}
	uint64_t differ = 0;
	CHECK(check_rows(s, id, &w, NULL, 0, &differ) == 0);
	store_close(s);
	printf("  10 kills: %llu snapshots checked row by row, %llu not durable dropped at mount, %d kept\n",
	       (unsigned long long)checked, (unsigned long long)gone, ne);
	for (int k = 0; k < ne; k++)
		shadow_free(&e[k].rows);
	shadow_free(&w);
}

static pid_t main_pid;

/* The pool goes when the test ends, passed or failed (not when a writer
 * child exits). */
/* Owner, group and mode of the root and .snapshots: unset in a fresh pool
 * (the daemon's defaults), set in one step, kept across a reopen, ctime
 * moved; bad requests refused; a damaged record reads as -EUCLEAN. */
/* A table made unlinked, filled, then put under a live table's name in one
 * step (fs/relay.c's re-lay); an orphan is freed at its release, or at the
 * next open when a crash came first. */
static void test_replace(void)
{
	struct store *s = fresh(64 << 20);
	uint32_t id, nid, other, cur;
	uint8_t row[16], got[16];
	struct store_attr a;
	OK(store_table_create(s, "t", 0640, 7, 8, 64, EMB_DT_F32, &id));
	fill(row, 16, 3, 1);
	struct store_rowop op = { 3, 0, 16, row, 0 };
	CHECK(store_table_create_orphan(s, "t", 0640, 7, 8, 4, EMB_DT_F32, &nid) == 0 && nid != id);
	OK(store_rows_write(s, nid, &op, 1, 64));
	OK(store_table_getattr(s, nid, &a));
	CHECK(a.orphan && a.nrows == 1 && a.row_size == 16);
	CHECK(store_table_lookup(s, "t", &cur) == 0 && cur == id);
	cur = 0;
	int listed = 0;
	while (store_table_next(s, &cur, &a) == 1)
		listed += a.id == nid;
	CHECK(listed == 0); /* an orphan is in no listing */
	CHECK(store_table_replace(s, id, nid) == -ENOENT); /* nid has no name to take */
	CHECK(store_table_replace(s, nid, nid) == -ENOENT);
	OK(store_table_replace(s, nid, id));
	CHECK(store_table_lookup(s, "t", &cur) == 0 && cur == nid);
	OK(store_table_getattr(s, nid, &a));
	CHECK(!a.orphan && a.dim == 4 && a.mode == 0640 && a.uid == 7 && a.gid == 8 && !strcmp(a.name, "t"));
	OK(store_table_getattr(s, id, &a));
	CHECK(a.orphan);
	OK(store_table_create(s, "u", 0640, 0, 0, 4, EMB_DT_F32, &other));
	CHECK(store_table_replace(s, other, nid) == -EINVAL); /* u is no orphan */
	OK(store_table_unlink(s, "u"));
	OK(store_table_release(s, other));
	OK(store_table_create_orphan(s, "t", 0640, 0, 0, 4, EMB_DT_F32, &other));
	CHECK(store_table_replace(s, other, id) == -ENOENT); /* id is no longer linked */
	fsck_clean(s);
	/* a crash with two orphans: both freed at open, the replacement kept */
	s = reopen(s);
	CHECK(store_table_getattr(s, id, &a) == -ENOENT && store_table_getattr(s, other, &a) == -ENOENT);
	CHECK(store_table_lookup(s, "t", &cur) == 0 && cur == nid);
	CHECK(t_row_read(s, nid, 3, got) == 1 && !memcmp(row, got, 16));
	fsck_clean(s);
	store_close(s);
	unlink(path);
}

static void test_dir_perm(void)
{
	struct store *s = fresh(64ull << 20);
	struct store_dir_perm p = { 1, 2, 3 }, q;
	struct store_dir_times t0, t1;
	CHECK(store_dir_perm(s, STORE_DIR_ROOT, &p) == 0);
	CHECK(store_dir_perm(s, STORE_DIR_SNAPS, &p) == 0);
	CHECK(p.uid == 1 && p.gid == 2 && p.mode == 3); /* untouched */
	CHECK(store_dir_perm(s, STORE_DIR_POOL, &p) == -EINVAL);
	CHECK(store_dir_times(s, STORE_DIR_ROOT, &t0) == 0);
	p = (struct store_dir_perm){ 4243, 4242, 02775 };
	CHECK(store_dir_perm_set(s, STORE_DIR_ROOT, &p) == 0);
	q = (struct store_dir_perm){ 0, 0, 0 }; /* mode 0 is a setting too */
	CHECK(store_dir_perm_set(s, STORE_DIR_SNAPS, &q) == 0);
	q.mode = 010000;
	CHECK(store_dir_perm_set(s, STORE_DIR_SNAPS, &q) == -EINVAL);
	CHECK(store_dir_perm_set(s, STORE_DIR_POOL, &p) == -EINVAL);
	CHECK(store_dir_times(s, STORE_DIR_ROOT, &t1) == 0);
	CHECK(t1.ctime_ns > t0.ctime_ns);
	s = reopen(s);
	CHECK(store_dir_perm(s, STORE_DIR_ROOT, &q) == 1);
	CHECK(q.uid == 4243 && q.gid == 4242 && q.mode == 02775);
	CHECK(store_dir_perm(s, STORE_DIR_SNAPS, &q) == 1);
	CHECK(q.uid == 0 && q.gid == 0 && q.mode == 0);
	store_close(s);
	/* one flipped bit of the root's record */
	PMEMobjpool *pop = pmemobj_open(path, EMB_LAYOUT);
	CHECK(pop);
	struct emb_super *sb = pmemobj_direct(pmemobj_root(pop, sizeof(*sb)));
	sb->root_perm.mode ^= 0002;
	pmemobj_persist(pop, &sb->root_perm, sizeof(sb->root_perm));
	pmemobj_close(pop);
	CHECK(store_open(path, &s, err, sizeof(err)) == 0);
	CHECK(store_dir_perm(s, STORE_DIR_ROOT, &q) == -EUCLEAN);
	CHECK(store_dir_perm(s, STORE_DIR_SNAPS, &q) == 1);
	CHECK(store_dir_perm_set(s, STORE_DIR_ROOT, &p) == 0); /* a chmod mends it */
	CHECK(store_dir_perm(s, STORE_DIR_ROOT, &q) == 1 && q.mode == 02775);
	store_close(s);
}

/* store/pm.c defines msync for the process: a failed MS_SYNC of memory that
 * is no pool's gets the real call's result and errno, and fails no pool. */
static void test_msync_scope(void)
{
	struct store *s = fresh(64ull << 20);
	char *m = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	char why[160];
	CHECK(m != MAP_FAILED);
	CHECK(msync(m, 4096, MS_SYNC) == 0);
	errno = 0;
	CHECK(msync(m + 1, 4096, MS_SYNC) == -1 && errno == EINVAL); /* not page-aligned */
	CHECK(store_health(s, why, sizeof(why)) == 0);
	CHECK(store_sync(s) == 0);
	munmap(m, 8192);
	store_close(s);
}

static void cleanup(void)
{
	if (getpid() == main_pid)
		unlink(path);
}

int main(int argc, char **argv)
{
	(void)argc;
	setvbuf(stdout, NULL, _IOLBF, 0);
	main_pid = getpid();
	snprintf(path, sizeof(path), "%s/%sunit-%d.pool",
		 access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp", test_prefix(), (int)main_pid);
	atexit(cleanup);
	seed = test_seed(argv[0]);
	srand((unsigned)mix(seed)); /* the kill points */
	oplog = mmap(NULL, sizeof(*oplog), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK(oplog != MAP_FAILED);
	test_rows();
	printf("rows ok\n");
	test_many();
	printf("many ok\n");
	test_links();
	printf("links ok\n");
	test_enospc();
	printf("enospc ok\n");
	test_crash();
	printf("crash ok\n");
	test_snap();
	printf("snapshots ok\n");
	test_snap_pending();
	printf("pending snapshots ok\n");
	test_snap_crash();
	printf("snapshot crash ok\n");
	test_replace();
	printf("replace ok\n");
	test_dir_perm();
	printf("directory permissions ok\n");
	test_msync_scope();
	printf("msync scope ok\n");
	test_head_only();
	printf("header-only checks ok\n");
	test_lanes();
	printf("damaged lanes ok\n");
	test_lost_bit();
	printf("lost slab bit ok\n");
	return 0;
}
