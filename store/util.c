/* Small helpers every store file uses: one-line errors and the clock. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include <xxhash.h>

#include "store_int.h"

int store_err(char *err, size_t n, int code, const char *fmt, ...)
{
	if (err && n) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, n, fmt, ap);
		va_end(ap);
	}
	return code;
}

uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void csum_error(struct store *s)
{
	atomic_fetch_add_explicit(&s->n_csum_errors, 1, memory_order_relaxed);
}

#ifndef EMBFS_LIB_VERSIONS
#define EMBFS_LIB_VERSIONS "libpmemobj ?, liburing ?"
#endif

const char *store_versions(void)
{
	static char buf[160];
	unsigned x = XXH_versionNumber();
	snprintf(buf, sizeof(buf), "pool layout %u, %s, xxHash %u.%u.%u", EMB_LAYOUT_VERSION, EMBFS_LIB_VERSIONS,
		 x / 10000, x / 100 % 100, x % 100);
	return buf;
}
