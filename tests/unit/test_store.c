/*
 * Unit tests of store/: rows, sparse huge ids, partial and duplicate updates,
 * index splits, truncate, unlink/release, ENOSPC, reopen, and recovery after
 * a writer is SIGKILLed in the middle of commits (checked with store_fsck:
 * no torn row, no leaked or doubly used slot).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "embfs/store.h"
#include "helpers.h"


static char path[256];
static char err[512];

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

static void fill(uint8_t *row, uint32_t rs, uint64_t id, uint64_t gen)
{
	for (uint32_t i = 0; i < rs; i++)
		row[i] = (uint8_t)(id * 131 + gen * 7 + i);
}

static void fsck_clean(struct store *s)
{
	struct store_fsck f;
	OK(store_fsck(s, &f));
	if (f.bad_versions || f.double_refs || f.leaked_slots || f.bad_counts) {
		fprintf(stderr, "fsck: rows %llu bad %llu double %llu leaked %llu counts %llu\n",
			(unsigned long long)f.rows, (unsigned long long)f.bad_versions,
			(unsigned long long)f.double_refs, (unsigned long long)f.leaked_slots,
			(unsigned long long)f.bad_counts);
		exit(1);
	}
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

	/* sparse, huge ids: any id whose byte offset fits in off_t */
	uint64_t ids[] = { 0, 1, 77, 1ull << 40, (uint64_t)(INT64_MAX / 256) };
	for (size_t i = 0; i < 5; i++) {
		fill(row, 256, ids[i], 1);
		struct store_rowop op = { ids[i], 0, 256, row, 0 };
		OK(store_rows_write(s, id, &op, 1, (ids[i] + 1) * 256));
	}
	for (size_t i = 0; i < 5; i++) {
		fill(row, 256, ids[i], 1);
		CHECK(store_row_read(s, id, ids[i], got) == 1);
		CHECK(!memcmp(row, got, 256));
	}
	CHECK(store_row_read(s, id, 2, got) == 0);
	for (int i = 0; i < 256; i++)
		CHECK(got[i] == 0);

	/* partial update keeps the other bytes; duplicates in one batch: last wins */
	uint8_t patch[10];
	memset(patch, 0xAB, 10);
	struct store_rowop ops[3] = { { 77, 100, 10, patch, 0 }, { 77, 0, 0, NULL, 0 }, { 77, 5, 10, patch, 0 } };
	OK(store_rows_write(s, id, ops, 1, 0));
	fill(row, 256, 77, 1);
	memset(row + 100, 0xAB, 10);
	CHECK(store_row_read(s, id, 77, got) == 1 && !memcmp(row, got, 256));
	OK(store_rows_write(s, id, ops, 3, 0)); /* write, delete, write */
	memset(row, 0, 256);
	memset(row + 5, 0xAB, 10);
	CHECK(store_row_read(s, id, 77, got) == 1 && !memcmp(row, got, 256));

	/* SEEK_DATA / SEEK_HOLE support */
	uint64_t r;
	CHECK(store_row_next(s, id, 2, &r) == 1 && r == 77);
	CHECK(store_row_next(s, id, (uint64_t)(INT64_MAX / 256) + 1, &r) == 0);
	CHECK(store_row_hole(s, id, 0, &r) == 0 && r == 2);

	struct store_attr a;
	OK(store_table_getattr(s, id, &a));
	CHECK(a.nrows == 5 && a.size == ((uint64_t)(INT64_MAX / 256) + 1) * 256);
	CHECK(store_table_set_geometry(s, id, 32, EMB_DT_F32) == -EBUSY);
	fsck_clean(s);
	s = reopen(s);
	fill(row, 256, 1ull << 40, 1);
	CHECK(store_row_read(s, id, 1ull << 40, got) == 1 && !memcmp(row, got, 256));
	fsck_clean(s);

	/* truncate mid-row: the tail is zeroed, later rows dropped */
	OK(store_table_truncate(s, id, 256 + 100));
	OK(store_table_getattr(s, id, &a));
	CHECK(a.nrows == 2 && a.size == 356);
	fill(row, 256, 1, 1);
	memset(row + 100, 0, 156);
	CHECK(store_row_read(s, id, 1, got) == 1 && !memcmp(row, got, 256));
	CHECK(store_row_read(s, id, 1ull << 40, got) == 0);
	fsck_clean(s);
	store_close(s);
}

static void test_many(void)
{
	struct store *s = fresh(256 << 20);
	uint32_t id;
	enum { N = 200000, B = 4096 };
	static struct store_rowop ops[B];
	static uint8_t data[B][64];
	uint8_t got[64], want[64];
	OK(store_table_create(s, "big", 0644, 0, 0, 16, EMB_DT_F32, &id));
	for (uint64_t base = 0; base < N; base += B) {
		for (int i = 0; i < B; i++) {
			uint64_t rid = (base + (uint64_t)i) * 0x9E3779B97F4A7C15ull >> 20; /* scattered */
			fill(data[i], 64, rid, 2);
			ops[i] = (struct store_rowop){ rid, 0, 64, data[i], 0 };
		}
		OK(store_rows_write(s, id, ops, B, 0));
	}
	s = reopen(s);
	struct store_attr a;
	OK(store_table_getattr(s, id, &a));
	CHECK(a.nrows >= N - 10); /* the mixed ids may collide a few times */
	for (uint64_t k = 0; k < N + N % B; k += 7) {
		uint64_t rid = k * 0x9E3779B97F4A7C15ull >> 20;
		if (k >= (N / B + (N % B != 0)) * (uint64_t)B)
			break;
		fill(want, 64, rid, 2);
		CHECK(store_row_read(s, id, rid, got) == 1 && !memcmp(want, got, 64));
	}
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
		CHECK(store_row_read(s, id, r, got) == 1 && !memcmp(want, got, 1024));
	}
	CHECK(store_row_read(s, id, written, got) == 0);
	fsck_clean(s);
	/* deleting rows makes room again */
	for (int i = 0; i < B; i++)
		ops[i] = (struct store_rowop){ (uint64_t)i, 0, 0, NULL, 0 };
	OK(store_rows_write(s, id, ops, B, 0));
	for (int i = 0; i < B / 2; i++)
		ops[i] = (struct store_rowop){ written + (uint64_t)i, 0, 1024, data[i], 0 };
	OK(store_rows_write(s, id, ops, B / 2, 0));
	s = reopen(s);
	fsck_clean(s);
	store_close(s);
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
	CHECK(WIFSIGNALED(st));
	if (store_open(path, &s, err, sizeof(err))) {
		fprintf(stderr, "reopen after crash: %s\n", err);
		exit(1);
	}
	return s;
}

static void crash_writer(struct store *s, uint32_t id, int round, int ready_fd)
{
	static uint8_t data[256][128];
	struct store_rowop ops[256];
	(void)round;
	for (uint64_t gen = 0;; gen++) {
		for (int i = 0; i < 256; i++) {
			uint64_t rid = (uint64_t)rand() % 20000;
			fill(data[i], 128, rid, gen);
			int del = rand() % 10 == 0;
			ops[i] = (struct store_rowop){ rid, 0, 128, del ? NULL : data[i], 0 };
		}
		if (store_rows_write(s, id, ops, 256, 0))
			_exit(3);
		if (gen == 0 && write(ready_fd, "x", 1) != 1)
			_exit(4);
	}
}

/* A child commits random batches until SIGKILLed; recovery must leave every
 * row whole and every slot accounted for. */
static void test_crash(void)
{
	struct store *s = fresh(64 << 20);
	uint32_t id;
	OK(store_table_create(s, "c", 0644, 0, 0, 32, EMB_DT_F32, &id));
	store_close(s);
	srand((unsigned)time(NULL));
	for (int round = 0; round < 12; round++) {
		s = kill_midway(crash_writer, id, round, 60);
		struct store_stats ss;
		store_stats_get(s, &ss);
		CHECK(ss.recovered);
		fsck_clean(s);
		store_close(s);
	}
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
	int r = store_snap_row_read(s, idx, id, row, got);
	if (gen == 0) {
		CHECK(r == 0);
		return;
	}
	fill(want, 64, row, gen);
	CHECK(r == 1 && !memcmp(got, want, 64));
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
	CHECK(store_row_read(s, id, 60, buf) == 0 && store_row_read(s, id, 95, buf) == 0);
	struct store_attr a;
	OK(store_table_getattr(s, id, &a));
	CHECK(a.nrows == 89);
	OK(store_snap_table_getattr(s, s1.idx, id, &a));
	CHECK(a.size == 100 * 64 && a.nrows == 100);
	uint64_t r;
	CHECK(store_snap_row_next(s, s2.idx, id, 60, &r) == 1 && r == 61);
	CHECK(store_snap_row_hole(s, s1.idx, id, 0, &r) == 0 && r == 100);
	CHECK(store_table_set_geometry(s, id, 8, EMB_DT_F32) == -EBUSY);

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

/* Commits, snapshots (durable or not) and drops interleaved. */
static void snap_crash_writer(struct store *s, uint32_t id, int round, int ready_fd)
{
	static uint8_t data[128][64];
	struct store_rowop ops[128];
	char name[32];
	for (uint64_t gen = 0;; gen++) {
		for (int i = 0; i < 128; i++) {
			uint64_t rid = (uint64_t)rand() % 3000;
			fill(data[i], 64, rid, gen);
			ops[i] = (struct store_rowop){ rid, 0, 64, rand() % 8 ? data[i] : NULL, 0 };
		}
		if (store_rows_write(s, id, ops, 128, 0))
			_exit(3);
		snprintf(name, sizeof(name), "r%d-%llu", round, (unsigned long long)gen);
		if (gen % 3 == 0 && store_snap_create(s, name, rand() % 2, NULL))
			_exit(4);
		uint32_t cur = 0;
		struct store_snap sn;
		int k = 0;
		while (store_snap_next(s, &cur, &sn) == 1)
			k++;
		if (k > 6 && store_snap_next(s, &(uint32_t){ 0 }, &sn) == 1 && store_snap_drop(s, sn.name))
			_exit(5);
		if (gen == 0 && write(ready_fd, "x", 1) != 1)
			_exit(6);
	}
}

/* SIGKILL while commits, snapshots and drops interleave. */
static void test_snap_crash(void)
{
	struct store *s = fresh(64 << 20);
	uint32_t id;
	OK(store_table_create(s, "c", 0644, 0, 0, 16, EMB_DT_F32, &id));
	store_close(s);
	for (int round = 0; round < 10; round++) {
		s = kill_midway(snap_crash_writer, id, round, 80);
		fsck_clean(s);
		uint32_t cur = 0;
		struct store_snap sn;
		while (store_snap_next(s, &cur, &sn) == 1)
			CHECK(sn.durable); /* not durable at the crash: dropped at mount */
		store_close(s);
	}
}

int main(void)
{
	snprintf(path, sizeof(path), "%s/embfs-unit-%d.pool",
		 access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp", (int)getpid());
	test_rows();
	printf("rows ok\n");
	test_many();
	printf("many ok\n");
	test_enospc();
	printf("enospc ok\n");
	test_crash();
	printf("crash ok\n");
	test_snap();
	printf("snapshots ok\n");
	test_snap_crash();
	printf("snapshot crash ok\n");
	unlink(path);
	return 0;
}
