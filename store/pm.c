/*
 * Persistence primitives.  On PMem (real, or PMEM_IS_PMEM_FORCE=1) a flush
 * writes back cache lines and a barrier is a fence: libpmemobj's flush/drain.
 * On a plain file the mapping is page cache: a store survives a crash of the
 * daemon at once, and survives a crash of the machine only after msync.  There
 * pm_flush does nothing and pm_barrier is one msync(MS_SYNC) of the whole
 * mapping, which the kernel turns into writeback of the dirty pages and one
 * fsync of the file: the cost of a barrier is one fsync, whatever was written.
 * Callers therefore group many rows per barrier (store/commit.c).
 *
 * A failing file.  When msync fails (a write-back error of the pool file),
 * nothing written since the last good barrier is known to be durable.  The
 * pool then fails, as ext4 does with errors=remount-ro: the call whose
 * barrier failed returns EIO, every later change is refused (EROFS; fsync and
 * write-back: EIO), reads keep being served from the mapping, and nothing is
 * marked clean at close, so the next mount recovers from what reached the
 * disk.  libpmemobj persists a plain-file pool with msync too, inside its
 * transactions and allocations, and aborts the process when msync fails.  So
 * embfs defines msync for the process: it runs the real one (the next
 * definition: libc's, or a test's LD_PRELOAD shim), and on failure records
 * the error for pm_failed() and tells its caller it succeeded.  libpmemobj
 * then completes its operation in memory, and the store, which checks
 * pm_failed() after every barrier and transaction, reports EIO and stops.
 * What remains: the operation that met the failure may reach the disk in
 * part, as the kernel writes its pages back; libpmemobj's own logs keep a
 * transaction whole only if they reached the disk before its data did.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "store_int.h"

/* msync failures in this process, and the errno of the last one.  A pool
 * counts those after it was opened (with several pools open, a failure of
 * one fails them all: msync names an address, not a pool). */
static _Atomic uint64_t msync_failures;
static _Atomic int msync_errno;

void pm_open(struct store *s)
{
	s->msync_seen = atomic_load(&msync_failures);
}

int msync(void *addr, size_t len, int flags)
{
	static int (*next_msync)(void *, size_t, int);
	if (!next_msync)
		next_msync = (int (*)(void *, size_t, int))dlsym(RTLD_NEXT, "msync");
	int r = next_msync(addr, len, flags);
	if (r == 0 || !(flags & MS_SYNC))
		return r;
	atomic_store(&msync_errno, errno ? errno : EIO);
	atomic_fetch_add(&msync_failures, 1);
	return 0; /* see above: the store reports it, libpmemobj must not abort */
}

int pm_failed(struct store *s)
{
	if (!atomic_load(&s->failed) && atomic_load(&msync_failures) == s->msync_seen)
		return 0;
	int e = atomic_load(&msync_errno), zero = 0;
	if (atomic_compare_exchange_strong(&s->failed, &zero, e))
		snprintf(s->fail_why, sizeof(s->fail_why), "persisting the pool failed (msync: %s): "
			 "changes are refused until it is mounted again", strerror(e));
	return -EIO;
}

int pm_writable(struct store *s)
{
	return pm_failed(s) ? -EROFS : 0;
}

int pm_tx_end(struct store *s, int ret)
{
	atomic_fetch_add_explicit(&s->n_tx, 1, memory_order_relaxed);
	if (pm_failed(s))
		return -EIO;
	return ret;
}

void pm_flush(struct store *s, const void *addr, size_t len)
{
	if (s->is_pmem)
		pmemobj_flush(s->pop, addr, len);
}

void pm_soon(struct store *s, const void *addr, size_t len)
{
	if (s->is_pmem)
		pmemobj_persist(s->pop, addr, len);
}

int pm_barrier(struct store *s)
{
	if (pm_failed(s))
		return -EIO;
	atomic_fetch_add_explicit(&s->n_barriers, 1, memory_order_relaxed);
	if (s->is_pmem)
		pmemobj_drain(s->pop);
	else
		msync(s->base, s->map_len, MS_SYNC);
	return pm_failed(s);
}

int pm_persist(struct store *s, const void *addr, size_t len)
{
	if (pm_failed(s))
		return -EIO;
	pmemobj_persist(s->pop, addr, len);
	return pm_failed(s);
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
