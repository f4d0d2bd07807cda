/*
 * Persistence primitives.  On PMem (real, or PMEM_IS_PMEM_FORCE=1) a flush
 * writes back cache lines and a barrier is a fence: libpmemobj's flush/drain.
 * On a plain file the mapping is page cache: a store survives a crash of the
 * daemon at once, and survives a crash of the machine only after msync.  There
 * pm_flush does nothing and pm_barrier is one msync(MS_SYNC) of the whole
 * mapping, which the kernel turns into writeback of the dirty pages and one
 * fsync of the file: the cost of a barrier is one fsync, whatever was written.
 * Callers therefore group many rows per barrier (store/commit.c).
 */
#include <errno.h>
#include <sys/mman.h>
#include <time.h>

#include "store_int.h"

uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void pm_flush(struct store *s, const void *addr, size_t len)
{
	if (s->is_pmem)
		pmemobj_flush(s->pop, addr, len);
}

void pm_barrier(struct store *s)
{
	atomic_fetch_add_explicit(&s->n_barriers, 1, memory_order_relaxed);
	if (s->is_pmem)
		pmemobj_drain(s->pop);
	else
		msync(s->base, s->map_len, MS_SYNC);
}

void pm_persist(struct store *s, const void *addr, size_t len)
{
	pmemobj_persist(s->pop, addr, len);
}

/* libpmemobj reports allocation failure as ENOMEM; to the file system the
 * pool being full is ENOSPC. */
int pm_tx_errno(void)
{
	int e = errno;
	if (e == ENOMEM || e == 0)
		return -ENOSPC;
	return -e;
}
