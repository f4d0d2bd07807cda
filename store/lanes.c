/*
 * libpmemobj's lanes, read before libpmemobj opens the pool.
 *
 * At open, libpmemobj recovers every lane: it replays each redo log whose
 * checksum holds, and rolls back each undo log by applying its entries up
 * to the first one that is not valid.  A snapshot entry (a buffer) is valid
 * when its own checksum holds; a value entry (set, and, or: 8 bytes at an
 * offset) has no checksum and is valid when its offset word is not zero.
 * Transactions write only snapshot entries into undo logs, and once one
 * commits its entries stop being valid (the log's generation moves on), so
 * a damaged byte in a lane can make libpmemobj apply, at the first open, a
 * write no transaction made: 8 bytes at an arbitrary offset, for example
 * into the pool header, after which every later open is refused.  An entry
 * of no known type is worse: libpmemobj's walk takes it as 0 bytes long and
 * never ends.
 *
 * lanes_check() walks the lanes as that recovery would and refuses the pool
 * when the walk would reach such an entry, or leave the pool.  It reads
 * libpmemobj's private layout, as PMDK 1.12 writes it (pool header major 6):
 * a pool of another format is left to libpmemobj.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <unistd.h>

#include "store_int.h"

#define OBJ_MAJOR 6
#define DSC_LANES 5120 /* pool header (4 KiB), then the 1 KiB layout name */
#define LANE_BYTES 3072
#define LANE_MAX 1024
#define ULOG_HDR 64 /* checksum, next, capacity, gen_num, flags, unused */
#define LOG_INTERNAL 0
#define LOG_EXTERNAL (ULOG_HDR + 192)
#define LOG_UNDO (LOG_EXTERNAL + ULOG_HDR + 640)
#define EXT_MAX 4096 /* extensions followed before the chain counts as a loop */

enum { OP_SET, OP_AND, OP_OR, OP_BUF_SET = 5, OP_BUF_CPY = 6 }; /* an entry's top 3 bits */
static const char *op_name[8] = { "a set",	  "an and",	 "an or",      "an unknown (3)",
				  "an unknown (4)", "a buffer set", "a snapshot", "an unknown (7)" };

struct pool_map {
	const char *path;
	const uint8_t *b;
	uint64_t len;
};

static uint64_t lget64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

/* libpmemobj's Fletcher-64 over 32-bit words, continued from seed; the 8
 * bytes at offset skip (an entry's own checksum) count as zero. */
static uint64_t fletcher(const uint8_t *p, uint64_t len, uint64_t skip, uint64_t seed)
{
	uint32_t lo = (uint32_t)seed, hi = (uint32_t)(seed >> 32);
	for (uint64_t i = 0; i < len; i += 4) {
		uint32_t w = 0;
		if (i < skip || i >= skip + 8)
			memcpy(&w, p + i, 4);
		lo += w;
		hi += lo;
	}
	return (uint64_t)hi << 32 | lo;
}

static int damaged(const struct pool_map *m, uint64_t lane, const char *log, const char *why, char *err, size_t n)
{
	return store_err(err, n, -EIO, "%s: damaged (libpmemobj lane %llu, %s log: %s; opening would act on it)",
			 m->path, (unsigned long long)lane, log, why);
}

/* The log at offset u walked as recovery walks it: 0, or -EIO with the
 * reason in err. */
static int walk(const struct pool_map *m, uint64_t lane, uint64_t u, const char *log, int undo, char *err,
		size_t n)
{
	char why[160];
	uint8_t gen[8];
	memcpy(gen, m->b + u + 24, 8); /* the first log's generation, for all */
	for (int ext = 0; u; ext++) {
		if (ext > EXT_MAX || u > m->len - ULOG_HDR) {
			snprintf(why, sizeof(why), "an extension at offset %llu is outside the pool", (unsigned long long)u);
			return damaged(m, lane, log, why, err, n);
		}
		uint64_t cap = lget64(m->b + u + 16);
		if (cap > m->len - u - ULOG_HDR) {
			snprintf(why, sizeof(why), "a capacity of %llu bytes goes past the pool's end",
				 (unsigned long long)cap);
			return damaged(m, lane, log, why, err, n);
		}
		for (uint64_t o = 0; o < cap;) {
			uint64_t at = u + ULOG_HDR + o;
			if (at > m->len - 24) {
				snprintf(why, sizeof(why), "an entry at offset %llu is at the pool's end",
					 (unsigned long long)at);
				return damaged(m, lane, log, why, err, n);
			}
			const uint8_t *e = m->b + at;
			uint64_t word = lget64(e), off = word & ~(7ull << 61);
			unsigned op = (unsigned)(word >> 61);
			if (!word)
				return 0; /* the end of the log */
			if (op == OP_BUF_SET || op == OP_BUF_CPY) {
				uint64_t size = lget64(e + 16);
				uint64_t esize = size > m->len ? UINT64_MAX : (24 + size + 63) & ~63ull;
				if (esize > m->len - at) {
					snprintf(why, sizeof(why), "an entry at offset %llu of %llu bytes goes past the pool's end",
						 (unsigned long long)at, (unsigned long long)size);
					return damaged(m, lane, log, why, err, n);
				}
				uint64_t sum = fletcher(gen, 8, UINT64_MAX, fletcher(e, esize, 8, 0));
				if (sum != lget64(e + 8))
					return 0; /* not valid: recovery stops here */
				if (off > m->len || size > m->len - off) {
					snprintf(why, sizeof(why), "a valid entry writes %llu bytes at offset %llu, outside the pool",
						 (unsigned long long)size, (unsigned long long)off);
					return damaged(m, lane, log, why, err, n);
				}
				o += esize;
			} else if (undo || op > OP_OR) {
				snprintf(why, sizeof(why), "%s entry at offset %llu, for offset %llu", op_name[op],
					 (unsigned long long)at, (unsigned long long)off);
				return damaged(m, lane, log, why, err, n);
			} else {
				o += 16; /* a redo log's value entry */
			}
		}
		if (!undo)
			return 0; /* a redo log's extensions count only when its checksum holds */
		u = (lget64(m->b + u + 8) + 63) & ~63ull;
	}
	return 0;
}

int lanes_check(const char *path, uint64_t size, char *err, size_t n)
{
	if (size < DSC_LANES + 16)
		return 0; /* libpmemobj refuses it */
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0; /* libpmemobj says why */
	/* a pool open elsewhere has logs being written: libpmemobj refuses it
	 * as in use (its lock is an exclusive flock) */
	void *p = flock(fd, LOCK_SH | LOCK_NB) ? MAP_FAILED : mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return 0;
	struct pool_map m = { path, p, size };
	int ret = 0;
	uint32_t major;
	memcpy(&major, m.b + 8, 4);
	uint64_t lanes = lget64(m.b + DSC_LANES), nlanes = lget64(m.b + DSC_LANES + 8);
	/* another format, or a descriptor libpmemobj's checksum will refuse */
	if (memcmp(m.b, "PMEMOBJ", 8) || major != OBJ_MAJOR || nlanes > LANE_MAX || lanes > size ||
	    nlanes * LANE_BYTES > size - lanes)
		goto out;
	for (uint64_t i = 0; i < nlanes && !ret; i++) {
		uint64_t l = lanes + i * LANE_BYTES;
		ret = walk(&m, i, l + LOG_INTERNAL, "internal redo", 0, err, n);
		if (!ret)
			ret = walk(&m, i, l + LOG_EXTERNAL, "external redo", 0, err, n);
		if (!ret)
			ret = walk(&m, i, l + LOG_UNDO, "undo", 1, err, n);
	}
out:
	munmap(p, size);
	return ret;
}
