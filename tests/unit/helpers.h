/* Helpers for the unit tests: a failed check prints where and exits 1. */
#ifndef EMBFS_TEST_HELPERS_H
#define EMBFS_TEST_HELPERS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* "embfs-" then, under tests/run.sh, its run's tag (EMBFS_TEST_RUN) and a
 * dot: the start of every file name a test makes in /dev/shm or /tmp, so
 * the runner's leftover check sees its own run's files only. */
static inline const char *test_prefix(void)
{
	static char p[64];
	const char *t = getenv("EMBFS_TEST_RUN");
	if (!p[0])
		snprintf(p, sizeof(p), "embfs-%s%s", t && *t ? t : "", t && *t ? "." : "");
	return p;
}

/* The seed of a randomized test and how to replay it. */
struct test_seed {
	unsigned long long v;
	int set;
	char how[192];
};

static inline struct test_seed *test_seed_state(void)
{
	static struct test_seed t;
	return &t;
}

/* Print "seed N (replay: EMBFS_SEED=N how)" if a seed was taken. */
static inline void test_seed_say(FILE *f)
{
	struct test_seed *t = test_seed_state();
	if (t->set)
		fprintf(f, "seed %llu (replay: EMBFS_SEED=%llu %s)\n", t->v, t->v, t->how);
}

/* The seed: EMBFS_SEED if set, else a fresh one.  Printed now, and again
 * when a check fails. */
static inline unsigned long long test_seed(const char *how)
{
	struct test_seed *t = test_seed_state();
	const char *e = getenv("EMBFS_SEED");
	if (e && *e) {
		t->v = strtoull(e, NULL, 0);
	} else {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		t->v = ((unsigned long long)ts.tv_nsec ^ ((unsigned long long)ts.tv_sec << 20) ^
			(unsigned long long)getpid()) % 1000000000ull;
	}
	snprintf(t->how, sizeof(t->how), "%s", how);
	t->set = 1;
	test_seed_say(stdout);
	fflush(stdout);
	return t->v;
}

/* c must hold */
#define CHECK(c)                                                                          \
	do {                                                                              \
		if (!(c)) {                                                               \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
			test_seed_say(stderr);                                            \
			exit(1);                                                          \
		}                                                                         \
	} while (0)

/* e returns 0 or a count, not -errno */
#define OK(e)                                                                             \
	do {                                                                              \
		int r_ = (e);                                                             \
		if (r_ < 0) {                                                             \
			fprintf(stderr, "%s:%d: %s = %s\n", __FILE__, __LINE__, #e, strerror(-r_)); \
			test_seed_say(stderr);                                            \
			exit(1);                                                          \
		}                                                                         \
	} while (0)

#ifdef EMBFS_STORE_H
/* Reads through views, by table id (live) or snapshot slot and table id:
 * row reads return 1 stored, 0 hole, -errno. */
static inline int t_view(struct store *s, int64_t snap, uint32_t id, struct store_view *v)
{
	return snap < 0 ? store_view_live(s, id, v) : store_view_snap(s, (uint32_t)snap, id, v);
}

static inline int t_rows_read_at(struct store *s, int64_t snap, uint32_t id, const uint64_t *rows, size_t n,
				 void *buf, uint8_t *stored)
{
	struct store_view v;
	int ret = t_view(s, snap, id, &v);
	return ret ? ret : store_rows_read(s, &v, rows, n, buf, stored, NULL);
}

static inline int t_row_read_at(struct store *s, int64_t snap, uint32_t id, uint64_t row, void *buf)
{
	uint8_t st = 0;
	int ret = t_rows_read_at(s, snap, id, &row, 1, buf, &st);
	return ret ? ret : st;
}

#define t_row_read(s, id, row, buf) t_row_read_at((s), -1, (id), (row), (buf))
#define t_rows_read(s, id, rows, n, buf, stored) t_rows_read_at((s), -1, (id), (rows), (n), (buf), (stored))
#define t_row_exists(s, id, row) t_row_read_at((s), -1, (id), (row), NULL)
#define t_snap_row_read(s, idx, id, row, buf) t_row_read_at((s), (idx), (id), (row), (buf))
#define t_snap_rows_read(s, idx, id, rows, n, buf, stored) t_rows_read_at((s), (idx), (id), (rows), (n), (buf), (stored))

static inline int t_seek(struct store *s, int64_t snap, uint32_t id, uint64_t from, uint64_t *out, int hole)
{
	struct store_view v;
	int ret = t_view(s, snap, id, &v);
	if (ret)
		return ret;
	return hole ? store_row_hole(s, &v, from, out) : store_row_next(s, &v, from, out);
}
#define t_row_next(s, id, from, found) t_seek((s), -1, (id), (from), (found), 0)
#define t_row_hole(s, id, from, hole) t_seek((s), -1, (id), (from), (hole), 1)
#define t_snap_row_next(s, idx, id, from, found) t_seek((s), (idx), (id), (from), (found), 0)
#define t_snap_row_hole(s, idx, id, from, hole) t_seek((s), (idx), (id), (from), (hole), 1)

static inline int t_snap_table_getattr(struct store *s, uint32_t idx, uint32_t id, struct store_attr *a)
{
	struct store_view v;
	int ret = store_view_snap(s, idx, id, &v);
	return ret ? ret : store_view_getattr(s, &v, a);
}
#endif

#endif
