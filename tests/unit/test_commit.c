/*
 * Unit tests of the store's commit path and locking (issue 10, items 1, 3,
 * 11): a group that cannot get its room changes no row, however many
 * journal-sized commits it would take; large rows are rewritten in place on
 * a nearly full pool; geometry changes, snapshot creation and drops, commits
 * and durability marks run at once without a deadlock; a durability mark
 * never lands on a snapshot that reused a dropped one's slot.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "embfs/store.h"
#include "helpers.h"
#include "store_helpers.h"

static char path[256];
static char err[512];

static struct store *fresh(uint64_t size)
{
	struct store_mkfs_opts o = { .size = size, .force = 1, .label = "commit" };
	struct store *s;
	unlink(path);
	if (store_mkfs(path, &o, err, sizeof(err)) || store_open(path, &s, err, sizeof(err))) {
		fprintf(stderr, "pool: %s\n", err);
		exit(1);
	}
	return s;
}

static uint64_t nrows(struct store *s, uint32_t id)
{
	struct store_attr a;
	OK(store_table_getattr(s, id, &a));
	return a.nrows;
}

/* Write rows [from, from + n) of rs bytes, generation gen, in one group. */
static int write_rows(struct store *s, uint32_t id, uint32_t rs, uint64_t from, size_t n, uint64_t gen)
{
	struct store_rowop *ops = calloc(n, sizeof(*ops));
	uint8_t *data = malloc(n * rs);
	CHECK(ops && data);
	for (size_t i = 0; i < n; i++) {
		fill(data + i * rs, rs, from + i, gen);
		ops[i] = (struct store_rowop){ from + i, 0, rs, data + i * rs, 0 };
	}
	int ret = store_rows_write(s, id, ops, n, 0);
	free(ops);
	free(data);
	return ret;
}

/* Rows [from, from + n) hold generation gen (gen 0: holes). */
static void expect_rows(struct store *s, uint32_t id, uint32_t rs, uint64_t from, size_t n, uint64_t gen)
{
	uint8_t *got = malloc(rs), *want = malloc(rs);
	CHECK(got && want);
	for (size_t i = 0; i < n; i++) {
		int st = t_row_read(s, id, from + i, got);
		if (gen == 0) {
			CHECK(st == 0);
			continue;
		}
		CHECK(st == 1);
		fill(want, rs, from + i, gen);
		if (memcmp(got, want, rs)) {
			fprintf(stderr, "row %llu is not generation %llu\n", (unsigned long long)(from + i),
				(unsigned long long)gen);
			exit(1);
		}
	}
	free(got);
	free(want);
}

/* Item 3: a group of more rows than one commit holds that does not fit
 * fails whole: no row written, no row replaced. */
static void test_group_enospc(void)
{
	struct store *s = fresh(32 << 20);
	uint32_t id, rs = 256;
	OK(store_table_create(s, "t", 0644, 0, 0, 64, EMB_DT_F32, &id));
	uint64_t n = 0;
	while (write_rows(s, id, rs, n, 1024, 1) == 0)
		n += 1024;
	CHECK(n > 20000);
	/* room for about 12000 rows: more than one commit (8184) takes, less
	 * than the group below needs */
	struct store_rowop *del = calloc(12000, sizeof(*del));
	CHECK(del);
	for (size_t i = 0; i < 12000; i++)
		del[i].row = i;
	OK(store_rows_write(s, id, del, 12000, 0));
	free(del);
	uint64_t before = nrows(s, id);
	CHECK(before == n - 12000);
	/* 20000 new rows: the first 8184 fit, all of them do not */
	int ret = write_rows(s, id, rs, n + 1000000, 20000, 2);
	CHECK(ret == -ENOSPC);
	CHECK(nrows(s, id) == before);
	expect_rows(s, id, rs, n + 1000000, 20000, 0);
	/* rewrites of existing rows mixed with new ones: nothing changes either */
	struct store_rowop *ops = calloc(24000, sizeof(*ops));
	uint8_t *data = malloc(24000 * (size_t)rs);
	CHECK(ops && data);
	for (size_t i = 0; i < 24000; i++) {
		uint64_t r = i < 4000 ? 12000 + i : n + 2000000 + i;
		fill(data + i * rs, rs, r, 3);
		ops[i] = (struct store_rowop){ r, 0, rs, data + i * rs, 0 };
	}
	CHECK(store_rows_write(s, id, ops, 24000, 0) == -ENOSPC);
	free(ops);
	free(data);
	expect_rows(s, id, rs, 12000, 4000, 1);
	expect_rows(s, id, rs, n + 2000000 + 4000, 100, 0);
	CHECK(nrows(s, id) == before);
	fsck_clean(s);
	/* and what fits still goes in */
	OK(write_rows(s, id, rs, 0, 8000, 4));
	expect_rows(s, id, rs, 0, 8000, 4);
	fsck_clean(s);
	store_close(s);
	printf("group ENOSPC: %llu rows stored, a 20000-row group refused whole\n", (unsigned long long)n);
}

/* Rewriting every row of a nearly full pool in one group: its commits take
 * the slots of the rows before them, never all at once. */
static void test_big_rows_rewrite(void)
{
	struct store *s = fresh(64 << 20);
	uint32_t id, rs = 65536;
	OK(store_table_create(s, "big", 0644, 0, 0, 16384, EMB_DT_F32, &id));
	uint64_t n = 0;
	while (write_rows(s, id, rs, n, 1, 1) == 0)
		n++;
	CHECK(n > 200);
	/* free 100 slots: less than the group, more than a commit of 64 KiB
	 * rows may take (4 MiB of copy-on-write) */
	struct store_rowop del[100];
	memset(del, 0, sizeof(del));
	for (int i = 0; i < 100; i++)
		del[i].row = n - 100 + (uint64_t)i;
	OK(store_rows_write(s, id, del, 100, 0));
	n -= 100;
	OK(write_rows(s, id, rs, 0, n, 2));
	expect_rows(s, id, rs, 0, n, 2);
	fsck_clean(s);
	store_close(s);
	printf("64 KiB rows: %llu rewritten in one group on a full pool\n", (unsigned long long)n);
}

/* rm of a big table on a full pool gives every byte back, also when the
 * release is killed in the middle (its index goes segment by segment). */
static void test_release_full(void)
{
	struct store_stats st0, st1;
	struct store *s = fresh(128 << 20);
	store_stats_get(s, &st0);
	uint32_t id, rs = 64;
	OK(store_table_create(s, "t", 0644, 0, 0, 16, EMB_DT_F32, &id));
	uint64_t n = 0;
	for (size_t g = 4096; g; g /= 8) /* to the last slot */
		while (write_rows(s, id, rs, n * 7, g, 1) == 0)
			n += g;
	OK(store_table_unlink(s, "t"));
	uint64_t seed = test_seed("build/tests/test_commit");
	printf("release: %llu rows, killed after %llu us\n", (unsigned long long)n,
	       (unsigned long long)(seed % 40000));
	store_close(s);
	/* a child releases it and is killed after a random delay */
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		struct store *c;
		if (store_open(path, &c, err, sizeof(err)))
			_exit(2);
		_exit(store_table_release(c, id) ? 3 : 0);
	}
	usleep((useconds_t)(seed % 40000));
	kill(pid, SIGKILL);
	int status;
	waitpid(pid, &status, 0);
	CHECK(WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) == 0));
	/* mount finishes the release; the child's pool check (a process of its
	 * own, killed with it) may still hold the pool for a moment */
	int ret;
	for (int i = 0; (ret = store_open(path, &s, err, sizeof(err))) == -EBUSY && i < 500; i++)
		usleep(10000);
	if (ret) {
		fprintf(stderr, "reopen: %s\n", err);
		exit(1);
	}
	fsck_clean(s);
	store_stats_get(s, &st1);
	CHECK(st1.tables == 0 && st1.rows == 0);
	if (st1.free_bytes + (1 << 20) < st0.free_bytes) {
		fprintf(stderr, "free %llu after the release, %llu before the fill\n",
			(unsigned long long)st1.free_bytes, (unsigned long long)st0.free_bytes);
		exit(1);
	}
	store_close(s);
}

/* Items 1 and 11: the loops of the audit at store level, for a bounded time. */
struct race {
	struct store *s;
	uint32_t empty, busy;
	atomic_int stop;
	atomic_ulong geo, snaps, commits, marks;
};

static void *geo_loop(void *arg)
{
	struct race *r = arg;
	for (uint32_t i = 0; !atomic_load(&r->stop); i++) {
		int ret = store_table_set_geometry(r->s, r->empty, i % 2 ? 32 : 64, EMB_DT_F32);
		CHECK(ret == 0 || ret == -EBUSY); /* EBUSY while a snapshot holds it */
		atomic_fetch_add(&r->geo, 1);
	}
	return NULL;
}

static void *snap_loop(void *arg)
{
	struct race *r = arg;
	struct store_snap sn;
	while (!atomic_load(&r->stop)) {
		OK(store_snap_create(r->s, "x", 0, &sn));
		OK(store_snap_drop(r->s, "x"));
		atomic_fetch_add(&r->snaps, 1);
	}
	return NULL;
}

static void *commit_loop(void *arg)
{
	struct race *r = arg;
	for (uint64_t g = 1; !atomic_load(&r->stop); g++) {
		OK(write_rows(r->s, r->busy, 64, g % 512, 8, g));
		atomic_fetch_add(&r->commits, 1);
	}
	return NULL;
}

static void *mark_loop(void *arg)
{
	struct race *r = arg;
	while (!atomic_load(&r->stop)) {
		uint32_t cur = 0;
		struct store_snap sn;
		while (store_snap_next(r->s, &cur, &sn) == 1) {
			int ret = store_snap_set_durable(r->s, sn.idx, sn.gen);
			CHECK(ret == 0 || ret == -ENOENT);
		}
		atomic_fetch_add(&r->marks, 1);
	}
	return NULL;
}

static void test_lock_order(void)
{
	struct race r = { .s = fresh(64 << 20) };
	OK(store_table_create(r.s, "empty", 0644, 0, 0, 64, EMB_DT_F32, &r.empty));
	OK(store_table_create(r.s, "busy", 0644, 0, 0, 16, EMB_DT_F32, &r.busy));
	pthread_t t[4];
	void *(*fn[4])(void *) = { geo_loop, snap_loop, commit_loop, mark_loop };
	for (int i = 0; i < 4; i++)
		CHECK(pthread_create(&t[i], NULL, fn[i], &r) == 0);
	/* progress every second for 3 s; a deadlock stops every loop */
	unsigned long last = 0;
	for (int sec = 0; sec < 3; sec++) {
		sleep(1);
		unsigned long now = atomic_load(&r.geo) + atomic_load(&r.snaps) + atomic_load(&r.commits);
		if (now == last) {
			fprintf(stderr, "no progress for 1 s: geometry %lu, snapshots %lu, commits %lu: deadlock\n",
				atomic_load(&r.geo), atomic_load(&r.snaps), atomic_load(&r.commits));
			_exit(1); /* the loops hold locks: do not wait for them */
		}
		last = now;
	}
	atomic_store(&r.stop, 1);
	for (int i = 0; i < 4; i++) {
		struct timespec dl;
		clock_gettime(CLOCK_REALTIME, &dl);
		dl.tv_sec += 10;
		if (pthread_timedjoin_np(t[i], NULL, &dl)) {
			fprintf(stderr, "loop %d did not stop within 10 s: deadlock\n", i);
			_exit(1);
		}
	}
	CHECK(r.geo && r.snaps && r.commits && r.marks);
	fsck_clean(r.s);
	store_close(r.s);
	printf("lock order: %lu geometry changes, %lu snapshots, %lu commits, %lu durability sweeps in 3 s\n",
	       r.geo, r.snaps, r.commits, r.marks);
}

/* Item 11: a durability mark for a dropped snapshot does not land on the one
 * that took its record slot. */
static void test_durable_gen(void)
{
	struct store *s = fresh(32 << 20);
	struct store_snap a, b, got;
	OK(store_snap_create(s, "a", 0, &a));
	OK(store_snap_drop(s, "a"));
	OK(store_snap_create(s, "b", 0, &b));
	CHECK(b.idx == a.idx && b.gen != a.gen); /* the slot is reused */
	CHECK(store_snap_set_durable(s, a.idx, a.gen) == -ENOENT);
	OK(store_snap_get(s, b.idx, &got));
	CHECK(!got.durable);
	OK(store_snap_set_durable(s, b.idx, b.gen));
	OK(store_snap_get(s, b.idx, &got));
	CHECK(got.durable);
	store_close(s);
}

/* A trainer's promise for a batch, given back after it: the index-room
 * reserve it needs (~110 blocks for 4096 rows over a 200 K row table) is
 * kept for the next batch, not given back and taken again each time (which
 * cost two transactions per 16 blocks, per batch); and a full heap still
 * gets what lingers back (slab growth squeezes it). */
static void test_resv_linger(void)
{
	struct store *s = fresh(256ull << 20);
	uint32_t id;
	OK(store_table_create(s, "t", 0644, 0, 0, 64, EMB_DT_F32, &id));
	for (uint64_t r = 0; r < 200000; r += 8000)
		OK(write_rows(s, id, 256, r, 8000, 1));
	struct store_stats a, b;
	OK(store_space_reserve(s, id, 256, 4096));
	OK(store_space_reserve(s, id, 256, -4096));
	store_stats_get(s, &a);
	for (int i = 0; i < 50; i++) {
		OK(store_space_reserve(s, id, 256, 4096));
		OK(store_space_reserve(s, id, 256, -4096));
	}
	store_stats_get(s, &b);
	if (b.transactions - a.transactions > 4) {
		fprintf(stderr, "50 promises of a batch cost %llu transactions\n",
			(unsigned long long)(b.transactions - a.transactions));
		exit(1);
	}
	/* fill the pool with promises, as a cache full of new rows would: the
	 * lingering reserve must not make it refuse earlier than a reserve
	 * that follows the promises exactly */
	int64_t got = 0;
	while (store_space_reserve(s, id, 256, 1024) == 0)
		got += 1024;
	OK(store_space_reserve(s, id, 256, -got));
	fsck_clean(s);
	store_close(s);
	s = fresh(256ull << 20);
	OK(store_table_create(s, "t", 0644, 0, 0, 64, EMB_DT_F32, &id));
	for (uint64_t r = 0; r < 200000; r += 8000)
		OK(write_rows(s, id, 256, r, 8000, 1));
	int64_t cold = 0;
	while (store_space_reserve(s, id, 256, 1024) == 0)
		cold += 1024;
	if (got < cold - cold / 50) {
		fprintf(stderr, "a full pool took %lld promised rows after lingering, %lld without\n",
			(long long)got, (long long)cold);
		exit(1);
	}
	OK(store_space_reserve(s, id, 256, -cold));
	store_close(s);
	printf("reserve: 50 batch promises, %llu transactions; pool full at %lld promised rows (%lld cold)\n",
	       (unsigned long long)(b.transactions - a.transactions), (long long)got, (long long)cold);
}

/* Write back rows [from, from + n) of rs bytes, generation gen, in groups
 * of 4096 as the cache does (store_rows_writeback: promised room). */
static int writeback_rows(struct store *s, uint32_t id, uint32_t rs, uint64_t from, size_t n, uint64_t gen)
{
	enum { G = 4096 };
	struct store_rowop *ops = calloc(G, sizeof(*ops));
	uint8_t *data = malloc((size_t)G * rs);
	CHECK(ops && data);
	int ret = 0;
	for (size_t at = 0; at < n && !ret; at += G) {
		size_t k = n - at < G ? n - at : G;
		for (size_t i = 0; i < k; i++) {
			fill(data + i * rs, rs, from + at + i, gen);
			ops[i] = (struct store_rowop){ from + at + i, 0, rs, data + i * rs, store_batch_get(s) };
		}
		ret = store_rows_writeback(s, id, ops, k);
	}
	free(ops);
	free(data);
	return ret;
}

/* Layout 3: a row whose version a snapshot keeps is linked to it at
 * write-back (a link in the small class).  Promises made while a snapshot
 * is live hold a link each, so a pool full of promises writes every
 * promised row back, keeping every old version; promises made before the
 * snapshot get their links from store_space_links; releases give back
 * links exactly as far as a table was promised them. */
static void test_promised_links(void)
{
	struct store *s = fresh(64ull << 20);
	uint32_t id, other;
	OK(store_table_create(s, "t", 0644, 0, 0, 64, EMB_DT_F32, &id));
	OK(store_table_create(s, "u", 0644, 0, 0, 64, EMB_DT_F32, &other));
	OK(write_rows(s, id, 256, 0, 20000, 1));
	struct store_snap sn;
	OK(store_snap_create(s, "s1", 1, &sn));
	/* fill the pool with promises for rewrites of the rows s1 holds */
	int64_t got = 0;
	while (got < 200000 && store_space_reserve(s, id, 256, 1024) == 0)
		got += 1024;
	CHECK(got >= 20000);
	OK(writeback_rows(s, id, 256, 0, 20000, 2)); /* each keeps its old version: 20000 links */
	OK(store_space_reserve(s, id, 256, -got));
	expect_rows(s, id, 256, 0, 20000, 2);
	struct store_view v;
	uint8_t got_row[256], want[256];
	OK(store_view_snap(s, sn.idx, id, &v));
	for (uint64_t r = 0; r < 20000; r += 997) {
		OK(store_rows_read(s, &v, &r, 1, got_row, NULL, NULL));
		fill(want, 256, r, 1);
		CHECK(!memcmp(got_row, want, 256));
	}
	/* a promise made before a snapshot: its link comes when it is stamped */
	OK(store_snap_drop(s, "s1"));
	OK(store_space_reserve(s, id, 256, 4096));
	OK(store_snap_create(s, "s2", 1, &sn));
	OK(store_space_links(s, id));
	OK(writeback_rows(s, id, 256, 0, 4096, 3));
	OK(store_space_reserve(s, id, 256, -4096));
	expect_rows(s, id, 256, 0, 4096, 3);
	/* releasing another table's rows takes none of t's links */
	OK(store_space_reserve(s, other, 256, 100));
	OK(store_space_reserve(s, id, 256, 100));
	OK(store_space_reserve(s, other, 256, -100));
	OK(store_space_reserve(s, id, 256, -100));
	OK(store_snap_drop(s, "s2"));
	fsck_clean(s);
	store_close(s);
	printf("links: %lld promised rows on a full pool kept %d old versions at write-back\n", (long long)got,
	       20000);
}

static pid_t main_pid;

/* The pool goes also when a check fails (exit 1), in the parent only. */
static void cleanup(void)
{
	if (getpid() == main_pid)
		unlink(path);
}

int main(void)
{
	const char *dir = getenv("TMPDIR");
	if (!dir && access("/dev/shm", W_OK) == 0)
		dir = "/dev/shm";
	snprintf(path, sizeof(path), "%s/%scommit-%d.pool", dir ? dir : "/tmp", test_prefix(), (int)getpid());
	main_pid = getpid();
	atexit(cleanup);
	test_group_enospc();
	test_big_rows_rewrite();
	test_release_full();
	test_lock_order();
	test_durable_gen();
	test_resv_linger();
	test_promised_links();
	unlink(path);
	printf("test_commit: ok\n");
	return 0;
}
