/* Helpers for the unit tests: a failed check prints where and exits 1. */
#ifndef EMBFS_TEST_HELPERS_H
#define EMBFS_TEST_HELPERS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* c must hold */
#define CHECK(c)                                                                          \
	do {                                                                              \
		if (!(c)) {                                                               \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
			exit(1);                                                          \
		}                                                                         \
	} while (0)

/* e returns 0 or a count, not -errno */
#define OK(e)                                                                             \
	do {                                                                              \
		int r_ = (e);                                                             \
		if (r_ < 0) {                                                             \
			fprintf(stderr, "%s:%d: %s = %s\n", __FILE__, __LINE__, #e, strerror(-r_)); \
			exit(1);                                                          \
		}                                                                         \
	} while (0)

#endif
