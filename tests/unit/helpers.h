/* Helpers for the unit tests: a failed check prints where and exits 1. */
#ifndef EMBFS_TEST_HELPERS_H
#define EMBFS_TEST_HELPERS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

#endif
