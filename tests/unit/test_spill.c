/*
 * Unit tests of the spill tier (store/spill.c), with a pool deliberately too
 * small so that most rows live on the spill file:
 *  - rows spill and read back (one by one and batched), survive reopen;
 *  - random writes, partial writes, deletes and truncates against a shadow
 *    copy, with spills, promotions and compactions in between;
 *  - snapshot versions spill; dropping the snapshot frees their space
 *    through compaction;
 *  - a damaged byte in the spill file gives EIO on exactly the rows whose
 *    record it is in;
 *  - a full spill file gives ENOSPC and loses nothing;
 *  - SIGKILL during spills and compactions: recovery keeps every durable row,
 *    tears none, leaks nothing (store_fsck, with the live counts recounted).
 * The pool is on /dev/shm when there is one; the spill file in /tmp (O_DIRECT
 * needs a disk file system).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "embfs/store.h"
#include "helpers.h"

#define RS 256u
static char path[256], spath[256];
static char err[512];

static void attach(struct store *s, uint64_t spill_size)
{
	struct store_spill_conf c = { .path = spath, .size = spill_size, .manual = 1, .high = 40, .low = 30 };
	if (store_spill_attach(s, &c, err, sizeof(err))) {
		fprintf(stderr, "attach: %s\n", err);
		exit(1);
	}
}

static struct store *open_pool(void)
{
	struct store *s;
	if (store_open(path, &s, err, sizeof(err))) {
		fprintf(stderr, "open: %s\n", err);
		exit(1);
	}
	attach(s, 0);
	return s;
}

static struct store *fresh(uint64_t size, uint64_t spill_size)
{
	struct store_mkfs_opts o = { .size = size, .force = 1, .label = "spill" };
	struct store *s;
	unlink(path);
	unlink(spath);
	if (store_mkfs(path, &o, err, sizeof(err)) || store_open(path, &s, err, sizeof(err))) {
		fprintf(stderr, "pool: %s\n", err);
		exit(1);
	}
	attach(s, spill_size);
	return s;
}

static void fill(uint8_t *row, uint64_t id, uint64_t gen)
{
	for (uint32_t i = 0; i < RS; i++)
		row[i] = (uint8_t)(id * 131 + gen * 7 + i);
}

static void fsck_clean(struct store *s)
{
	struct store_fsck f;
	OK(store_fsck(s, &f));
	if (f.bad_versions || f.double_refs || f.leaked_slots || f.bad_counts || f.bad_stubs ||
	    f.seg_live_off) {
		fprintf(stderr, "fsck: rows %llu bad %llu double %llu leaked %llu counts %llu stubs %llu bad %llu live-off %llu\n",
			(unsigned long long)f.rows, (unsigned long long)f.bad_versions,
			(unsigned long long)f.double_refs, (unsigned long long)f.leaked_slots,
			(unsigned long long)f.bad_counts, (unsigned long long)f.stubs,
			(unsigned long long)f.bad_stubs, (unsigned long long)f.seg_live_off);
		exit(1);
	}
}

static struct store_spill_stats sstats(struct store *s)
{
	struct store_spill_stats st;
	store_spill_stats_get(s, &st);
	return st;
}

/* Write rows [0, n) of generation gen, 512 per commit. */
static void write_all(struct store *s, uint32_t id, uint64_t n, uint64_t gen)
{
	static uint8_t data[512][RS];
	struct store_rowop ops[512];
	for (uint64_t r = 0; r < n;) {
		size_t k = 0;
		for (; k < 512 && r < n; k++, r++) {
			fill(data[k], r, gen);
			ops[k] = (struct store_rowop){ r, 0, RS, data[k], 0 };
		}
		OK(store_rows_write(s, id, ops, k, r * RS));
	}
}

static void check_all(struct store *s, uint32_t id, uint64_t n, uint64_t gen)
{
	static uint64_t ids[1024];
	static uint8_t got[1024][RS];
	uint8_t want[RS];
	for (uint64_t r = 0; r < n; r += 1024) {
		size_t k = n - r < 1024 ? (size_t)(n - r) : 1024;
		for (size_t i = 0; i < k; i++)
			ids[i] = (r + i * 7919) % n; /* scattered */
		OK(store_rows_read(s, id, ids, k, got, NULL));
		for (size_t i = 0; i < k; i++) {
			fill(want, ids[i], gen);
			if (memcmp(got[i], want, RS)) {
				fprintf(stderr, "row %llu differs\n", (unsigned long long)ids[i]);
				exit(1);
			}
		}
	}
}

/* 150 k rows of 256 bytes (38 MB of rows, 43 MB of slots) in a 64 MiB
 * pool whose row versions may take 40% (~22 MiB). */
static void test_basic(void)
{
	struct store *s = fresh(64 << 20, 64 << 20);
	uint32_t id;
	uint64_t n = 150000;
	OK(store_table_create(s, "t", 0644, 0, 0, RS / 4, EMB_DT_F32, &id));
	write_all(s, id, n, 1);
	struct store_spill_stats st = sstats(s);
	CHECK(st.live_versions > n / 2); /* most rows are on the spill file */
	CHECK(st.pmem_row_bytes <= st.pmem_high);
	check_all(s, id, n, 1);
	uint8_t row[RS], want[RS];
	CHECK(store_row_read(s, id, 4242, row) == 1);
	fill(want, 4242, 1);
	CHECK(!memcmp(row, want, RS));
	CHECK(store_row_read(s, id, n + 5, row) == 0);
	fsck_clean(s);
	printf("  %llu of %llu rows spilled, %llu device reads, footprint %llu KiB\n",
	       (unsigned long long)st.live_versions, (unsigned long long)n,
	       (unsigned long long)sstats(s).reads, (unsigned long long)st.footprint >> 10);

	/* overwrite half: the old records turn stale, compaction reclaims them */
	write_all(s, id, n / 2, 2);
	OK(store_spill_run(s, STORE_SPILL_MOVE | STORE_SPILL_ALL));
	uint64_t before = sstats(s).footprint;
	/* compaction goes segment by segment, most stale first */
	for (int i = 0; i < 64; i++) {
		st = sstats(s);
		if (st.footprint <= 2 * st.live_bytes + 2 * st.seg_size && st.compacted_segs)
			break;
		OK(store_spill_run(s, STORE_SPILL_COMPACT));
	}
	st = sstats(s);
	printf("  compaction: footprint %llu KiB -> %llu KiB, live %llu KiB, %llu segments compacted\n",
	       (unsigned long long)before >> 10, (unsigned long long)st.footprint >> 10,
	       (unsigned long long)st.live_bytes >> 10, (unsigned long long)st.compacted_segs);
	CHECK(st.compacted_segs > 0 && st.footprint <= before);
	CHECK(st.footprint <= 2 * st.live_bytes + 2 * st.seg_size);
	check_all(s, id, n / 2, 2);
	fsck_clean(s);

	/* reopen: the pool needs its spill file, and finds everything */
	store_close(s);
	CHECK(store_open(path, &s, err, sizeof(err)) == 0);
	CHECK(store_spill_attach(s, NULL, err, sizeof(err)) == -ENODEV);
	struct store_spill_conf c = { .path = "/nonexistent-dir/x.spill", .manual = 1 };
	CHECK(store_spill_attach(s, &c, err, sizeof(err)) == -ENOENT);
	CHECK(strstr(err, "missing") != NULL);
	attach(s, 0);
	check_all(s, id, n / 2, 2);
	fsck_clean(s);

	/* promotion: a spilled row read twice comes back to the pool */
	uint64_t hot[64];
	for (int i = 0; i < 64; i++)
		hot[i] = (uint64_t)i * 997 % n;
	static uint8_t got[64][RS];
	uint64_t reads0 = sstats(s).reads;
	OK(store_rows_read(s, id, hot, 64, got, NULL));
	OK(store_rows_read(s, id, hot, 64, got, NULL));
	CHECK(sstats(s).reads > reads0);
	OK(store_spill_run(s, STORE_SPILL_PROMOTE));
	CHECK(sstats(s).promoted > 0);
	uint64_t reads1 = sstats(s).reads;
	OK(store_rows_read(s, id, hot, 64, got, NULL));
	CHECK(sstats(s).reads - reads1 < 64); /* the promoted ones came from the pool */
	for (int i = 0; i < 64; i++) {
		fill(want, hot[i], hot[i] < n / 2 ? 2 : 1);
		CHECK(!memcmp(got[i], want, RS));
	}
	fsck_clean(s);
	store_close(s);
}

/* Random operations against a shadow copy. */
static void test_random(void)
{
	struct store *s = fresh(64 << 20, 96 << 20);
	uint32_t id;
	uint64_t n = 60000;
	OK(store_table_create(s, "r", 0644, 0, 0, RS / 4, EMB_DT_F32, &id));
	uint8_t *shadow = calloc(n, RS);
	uint8_t *has = calloc(n, 1);
	uint64_t size = 0;
	CHECK(shadow && has);
	srand(7);
	static uint8_t data[512][RS];
	struct store_rowop ops[512];
	for (int step = 0; step < 400; step++) {
		int what = rand() % 20;
		if (what == 0) { /* truncate */
			uint64_t to = (uint64_t)rand() % (n * RS);
			OK(store_table_truncate(s, id, to));
			for (uint64_t r = to / RS; r < n; r++) {
				if (r == to / RS && to % RS) {
					memset(shadow + r * RS + to % RS, 0, RS - to % RS);
					continue;
				}
				has[r] = 0;
				memset(shadow + r * RS, 0, RS);
			}
			size = to;
			continue;
		}
		size_t k = 1 + (size_t)rand() % 512;
		for (size_t i = 0; i < k; i++) {
			uint64_t r = (uint64_t)rand() % n;
			int kind = rand() % 10;
			if (kind == 0) { /* punch */
				ops[i] = (struct store_rowop){ r, 0, 0, NULL, 0 };
				has[r] = 0;
				memset(shadow + r * RS, 0, RS);
			} else if (kind < 3) { /* partial write */
				uint32_t off = (uint32_t)rand() % RS, len = 1 + (uint32_t)rand() % (RS - off);
				for (uint32_t b = 0; b < len; b++)
					data[i][b] = (uint8_t)rand();
				ops[i] = (struct store_rowop){ r, off, len, data[i], 0 };
				memcpy(shadow + r * RS + off, data[i], len);
				has[r] = 1;
			} else {
				fill(data[i], r, (uint64_t)step);
				ops[i] = (struct store_rowop){ r, 0, RS, data[i], 0 };
				memcpy(shadow + r * RS, data[i], RS);
				has[r] = 1;
			}
			/* a later op on the same row in this group wins, as in the shadow */
		}
		/* apply in order so that the shadow's last-wins matches */
		for (size_t i = 0; i < k; i++)
			OK(store_rows_write(s, id, &ops[i], 1, ops[i].data ? (ops[i].row + 1) * RS : 0));
		if (step % 25 == 24)
			OK(store_spill_run(s, STORE_SPILL_MOVE | STORE_SPILL_ALL | STORE_SPILL_PROMOTE));
		if (step % 50 == 49) {
			OK(store_spill_run(s, STORE_SPILL_COMPACT));
			struct store_spill_stats x = sstats(s);
			printf("  step %d: footprint %llu live %llu segs %llu/%llu/%llu compacted %llu\n", step,
			       (unsigned long long)x.footprint, (unsigned long long)x.live_bytes,
			       (unsigned long long)x.segs_free, (unsigned long long)x.segs_open,
			       (unsigned long long)x.segs_sealed, (unsigned long long)x.compacted_segs);
		}
		if (step % 100 == 0) {
			for (uint64_t r = 0; r < n; r += 1 + (uint64_t)rand() % 16) {
				uint8_t got[RS];
				int st = store_row_read(s, id, r, got);
				CHECK(st == has[r]);
				CHECK(!memcmp(got, shadow + r * RS, RS));
			}
		}
	}
	(void)size;
	fsck_clean(s);
	store_close(s);
	s = open_pool();
	for (uint64_t r = 0; r < n; r++) {
		uint8_t got[RS];
		CHECK(store_row_read(s, id, r, got) == has[r]);
		CHECK(!memcmp(got, shadow + r * RS, RS));
	}
	fsck_clean(s);
	printf("  %llu versions spilled, %llu compacted segments, %llu promoted\n",
	       (unsigned long long)sstats(s).live_versions, (unsigned long long)sstats(s).compacted_segs,
	       (unsigned long long)sstats(s).promoted);
	store_close(s);
	free(shadow);
	free(has);
}

/* Snapshot versions spill; rmdir frees their space through compaction. */
static void test_snap(void)
{
	struct store *s = fresh(64 << 20, 64 << 20);
	uint32_t id;
	uint64_t n = 20000;
	OK(store_table_create(s, "s", 0644, 0, 0, RS / 4, EMB_DT_F32, &id));
	write_all(s, id, n, 1);
	struct store_snap sn;
	OK(store_snap_create(s, "one", 1, &sn));
	write_all(s, id, n, 2);
	OK(store_spill_run(s, STORE_SPILL_MOVE | STORE_SPILL_ALL));
	struct store_spill_stats st = sstats(s);
	printf("  snapshot: %llu versions spilled of %llu\n", (unsigned long long)st.live_versions, (unsigned long long)2 * n);
	CHECK(st.live_versions >= 2 * n); /* both generations are on the device */
	uint8_t got[RS], want[RS];
	for (uint64_t r = 0; r < n; r += 37) {
		CHECK(store_snap_row_read(s, sn.idx, id, r, got) == 1);
		fill(want, r, 1);
		CHECK(!memcmp(got, want, RS));
	}
	check_all(s, id, n, 2);
	fsck_clean(s);
	uint64_t live0 = st.live_bytes, foot0 = st.footprint;
	OK(store_snap_drop(s, "one"));
	CHECK(sstats(s).live_bytes < live0);
	for (int i = 0; i < 64; i++) {
		st = sstats(s);
		if (st.footprint <= 2 * st.live_bytes + 2 * st.seg_size && st.compacted_segs)
			break;
		OK(store_spill_run(s, STORE_SPILL_COMPACT));
	}
	st = sstats(s);
	CHECK(st.footprint < foot0);
	CHECK(st.footprint <= 2 * st.live_bytes + 2 * st.seg_size);
	check_all(s, id, n, 2);
	fsck_clean(s);
	store_close(s);
}

/* The records of rows in the spill file, by scanning it (as a tool would). */
static long find_record(uint64_t row, uint32_t table)
{
	int fd = open(spath, O_RDONLY);
	CHECK(fd >= 0);
	static char blk[1 << 16];
	long found = -1;
	for (off_t off = EMB_SPILL_HDR; found < 0; off += sizeof(blk)) {
		ssize_t r = pread(fd, blk, sizeof(blk), off);
		if (r <= 0)
			break;
		for (ssize_t i = 0; i + (ssize_t)sizeof(struct emb_srec) <= r; i += 16) {
			struct emb_srec *h = (struct emb_srec *)(blk + i);
			if (h->magic == EMB_SREC_MAGIC && h->row == row && h->table == table && h->len == RS) {
				found = (long)(off + i);
				break;
			}
		}
	}
	close(fd);
	return found;
}

static void flip(long at)
{
	int fd = open(spath, O_RDWR);
	uint8_t b;
	CHECK(pread(fd, &b, 1, at) == 1);
	b ^= 0x20;
	CHECK(pwrite(fd, &b, 1, at) == 1);
	fsync(fd);
	close(fd);
}

/* A damaged byte: EIO on exactly the rows it is in, counted. */
static void test_corrupt(void)
{
	struct store *s = fresh(64 << 20, 64 << 20);
	uint32_t id;
	uint64_t n = 4000;
	OK(store_table_create(s, "c", 0644, 0, 0, RS / 4, EMB_DT_F32, &id));
	write_all(s, id, n, 1);
	OK(store_spill_run(s, STORE_SPILL_MOVE | STORE_SPILL_ALL));
	store_close(s); /* nothing of the device stays in a cache */
	long a = find_record(1234, id), b = find_record(77, id);
	CHECK(a > 0 && b > 0);
	flip(a + (long)sizeof(struct emb_srec) + 100); /* row 1234's bytes */
	flip(b + 9);                                   /* row 77's header */
	s = open_pool();
	uint8_t got[RS], want[RS];
	for (uint64_t r = 0; r < n; r++) {
		int ret = store_row_read(s, id, r, got);
		if (r == 1234 || r == 77) {
			CHECK(ret == -EIO);
			continue;
		}
		CHECK(ret == 1);
		fill(want, r, 1);
		CHECK(!memcmp(got, want, RS));
	}
	uint64_t ids[3] = { 5, 1234, 6 };
	static uint8_t three[3][RS];
	CHECK(store_rows_read(s, id, ids, 3, three, NULL) == -EIO);
	CHECK(sstats(s).csum_errors >= 3);
	/* rewriting the row heals it */
	fill(want, 1234, 9);
	struct store_rowop op = { 1234, 0, RS, want, 0 };
	OK(store_rows_write(s, id, &op, 1, 0));
	CHECK(store_row_read(s, id, 1234, got) == 1 && !memcmp(got, want, RS));
	store_close(s);
}

/* A full spill file: ENOSPC, and every row written before reads back. */
static void test_full(void)
{
	struct store *s = fresh(64 << 20, 6 << 20); /* 5 segments of 1 MiB */
	uint32_t id;
	OK(store_table_create(s, "f", 0644, 0, 0, RS / 4, EMB_DT_F32, &id));
	static uint8_t data[512][RS];
	struct store_rowop ops[512];
	uint64_t r = 0;
	int ret = 0;
	while (!ret && r < 400000) {
		for (int k = 0; k < 512; k++) {
			fill(data[k], r + (uint64_t)k, 1);
			ops[k] = (struct store_rowop){ r + (uint64_t)k, 0, RS, data[k], 0 };
		}
		ret = store_rows_write(s, id, ops, 512, 0);
		if (!ret)
			r += 512;
	}
	CHECK(ret == -ENOSPC);
	CHECK(sstats(s).full > 0);
	printf("  spill file full after %llu rows\n", (unsigned long long)r);
	check_all(s, id, r, 1);
	fsck_clean(s);
	store_close(s);
	s = open_pool();
	check_all(s, id, r, 1);
	store_close(s);
}

/* The child writes rounds over rows [0, N) (each commit durable), spilling
 * and compacting in between, and reports each finished round. */
#define CN 30000u
static void crash_child(int fd)
{
	struct store *s = open_pool();
	uint32_t id;
	if (store_table_lookup(s, "k", &id))
		_exit(2);
	static uint8_t data[512][RS];
	struct store_rowop ops[512];
	for (uint64_t gen = 2;; gen++) {
		for (uint64_t r = 0; r < CN;) {
			size_t k = 0;
			for (; k < 512 && r < CN; k++, r++) {
				fill(data[k], r, gen);
				ops[k] = (struct store_rowop){ r, 0, RS, data[k], 0 };
			}
			if (store_rows_write(s, id, ops, k, 0))
				_exit(3);
			/* a full device (-ENOSPC) is fine here: compaction catches up */
			if (r % 4096 < 512) {
				int sr = store_spill_run(s, STORE_SPILL_MOVE | STORE_SPILL_ALL | STORE_SPILL_COMPACT);
				if (sr < 0 && sr != -ENOSPC)
					_exit(4);
			}
		}
		uint8_t g = (uint8_t)gen;
		if (write(fd, &g, 1) != 1)
			_exit(5);
	}
}

static void test_crash(void)
{
	struct store *s = fresh(64 << 20, 256 << 20);
	uint32_t id;
	OK(store_table_create(s, "k", 0644, 0, 0, RS / 4, EMB_DT_F32, &id));
	write_all(s, id, CN, 1);
	store_close(s);
	srand((unsigned)time(NULL));
	for (int round = 0; round < 6; round++) {
		int pfd[2];
		CHECK(pipe(pfd) == 0);
		pid_t pid = fork();
		CHECK(pid >= 0);
		if (pid == 0) {
			close(pfd[0]);
			crash_child(pfd[1]);
		}
		close(pfd[1]);
		uint8_t last = 0;
		CHECK(read(pfd[0], &last, 1) == 1); /* a whole round is durable */
		struct timespec ts = { 0, (long)(rand() % 400) * 1000000L };
		nanosleep(&ts, NULL); /* a random point, on purpose */
		kill(pid, SIGKILL);
		uint8_t g;
		while (read(pfd[0], &g, 1) == 1)
			last = g;
		close(pfd[0]);
		int st;
		waitpid(pid, &st, 0);
		CHECK(WIFSIGNALED(st));
		s = open_pool(); /* recovery, then the live counts are recounted */
		fsck_clean(s);
		/* every row is whole: a generation >= the last finished round */
		uint8_t got[RS], want[RS];
		for (uint64_t r = 0; r < CN; r++) {
			CHECK(store_row_read(s, id, r, got) == 1);
			uint8_t gen = (uint8_t)((got[0] - (uint8_t)(r * 131)) * 183); /* 7 * 183 = 1 mod 256 */
			fill(want, r, gen);
			CHECK(!memcmp(got, want, RS));
			CHECK((uint8_t)(gen - last) <= 1);
		}
		store_close(s);
	}
}

/* The mover thread spilling, promoting and compacting while a writer
 * rewrites rows and two readers check every row they read is whole. */
#define TN 120000u
static struct store *ts;
static uint32_t tid;
static _Atomic int tstop;
static _Atomic uint64_t tbad, treads;

static int whole(const uint8_t *got, uint64_t r)
{
	uint8_t want[RS];
	uint8_t gen = (uint8_t)((got[0] - (uint8_t)(r * 131)) * 183);
	fill(want, r, gen);
	return !memcmp(got, want, RS);
}

static void *t_reader(void *arg)
{
	unsigned seed = (unsigned)(uintptr_t)arg;
	static __thread uint8_t got[256][RS];
	uint64_t ids[256];
	while (!tstop) {
		for (int i = 0; i < 256; i++) /* skewed: some rows turn hot */
			ids[i] = rand_r(&seed) % 4 ? (uint64_t)rand_r(&seed) % TN : (uint64_t)rand_r(&seed) % 512;
		if (store_rows_read(ts, tid, ids, 256, got, NULL)) {
			tbad++;
			continue;
		}
		for (int i = 0; i < 256; i++)
			if (!whole(got[i], ids[i]))
				tbad++;
		treads += 256;
	}
	return NULL;
}

static void test_threads(void)
{
	struct store *s = fresh(64 << 20, 128 << 20);
	OK(store_table_create(s, "m", 0644, 0, 0, RS / 4, EMB_DT_F32, &tid));
	write_all(s, tid, TN, 1);
	ts = s;
	OK(store_spill_start(s));
	pthread_t rd[2];
	for (int i = 0; i < 2; i++)
		CHECK(pthread_create(&rd[i], NULL, t_reader, (void *)(uintptr_t)(i + 1)) == 0);
	static uint8_t data[512][RS];
	struct store_rowop ops[512];
	unsigned seed = 3;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (uint64_t gen = 2;; gen++) {
		for (int k = 0; k < 512; k++) {
			uint64_t r = (uint64_t)rand_r(&seed) % TN;
			fill(data[k], r, gen);
			ops[k] = (struct store_rowop){ r, 0, RS, data[k], 0 };
		}
		OK(store_rows_write(s, tid, ops, 512, 0));
		clock_gettime(CLOCK_MONOTONIC, &t1);
		if (t1.tv_sec - t0.tv_sec >= 4)
			break;
	}
	tstop = 1;
	for (int i = 0; i < 2; i++)
		pthread_join(rd[i], NULL);
	struct store_spill_stats st = sstats(s);
	printf("  %llu rows read by 2 readers, %llu moved, %llu promoted, %llu segments compacted\n",
	       (unsigned long long)treads, (unsigned long long)st.spilled, (unsigned long long)st.promoted,
	       (unsigned long long)st.compacted_segs);
	CHECK(tbad == 0);
	CHECK(st.spilled > 0);
	store_close(s);
	s = open_pool();
	fsck_clean(s);
	store_close(s);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	snprintf(path, sizeof(path), "%s/embfs-spill-%d.pool",
		 access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp", (int)getpid());
	snprintf(spath, sizeof(spath), "/tmp/embfs-spill-%d.spill", (int)getpid());
	const char *only = getenv("TEST_SPILL_ONLY"); /* crash or threads: repeat one part */
	if (only && !strcmp(only, "crash")) {
		test_crash();
		return 0;
	}
	if (only && !strcmp(only, "threads")) {
		test_threads();
		return 0;
	}
	test_basic();
	printf("basic ok\n");
	test_random();
	printf("random ok\n");
	test_snap();
	printf("snapshots ok\n");
	test_corrupt();
	printf("corruption ok\n");
	test_full();
	printf("full ok\n");
	test_crash();
	printf("crash ok\n");
	test_threads();
	printf("threads ok\n");
	unlink(path);
	unlink(spath);
	return 0;
}
