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
 * disk.
 *
 * msync.  libpmemobj persists a plain-file pool with msync too, inside its
 * transactions and allocations, and aborts the process when msync fails
 * (its persist function for a pool that is not PMem calls abort() on any
 * error).  It offers no hook to replace that function or to be told of the
 * error: its public API (pmemobj_ctl included) sets allocation classes,
 * statistics and copy-on-write, never the persist path.  So embfs defines
 * msync for the process: libpmemobj (through libpmem) calls it by name, and
 * a symbol cannot be defined for one library only.  What it does is scoped
 * to the pools: it runs the real msync (the next definition: libc's, or a
 * test's LD_PRELOAD shim) and returns its result and errno unchanged,
 * except when an MS_SYNC call fails on a pool's bytes.  A pool's bytes are
 * the mapping of an open store (pm_open .. pm_close), or any msync made by
 * a thread inside libpmemobj's open, create, check or close of a pool
 * (pm_enter .. pm_leave: the mapping is not known there).  Such a failure
 * is hidden from its caller (msync returns 0) and, on an open store's
 * mapping, recorded for that store's pm_failed(); one inside pm_enter ..
 * pm_leave counts for no store (the open, mkfs or check goes on).
 * libpmemobj then completes its operation in memory, and the store, which
 * checks pm_failed() after every barrier and transaction, reports EIO and
 * stops.  An msync of any other mapping (the daemon makes none of its own)
 * is the real call, untouched: tests/unit/test_store.c "msync scope".
 * What remains: the operation that met the failure may reach the disk in
 * part, as the kernel writes its pages back; libpmemobj's own logs keep a
 * transaction whole only if they reached the disk before its data did.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "store_int.h"

/* The open stores whose mappings msync covers, linked by pm_next. */
static pthread_mutex_t pools_lock = PTHREAD_MUTEX_INITIALIZER;
static struct store *pools; /* protected by pools_lock */
/* This thread is inside libpmemobj's open, create, check or close of a pool. */
static __thread int in_pool_call;

void pm_enter(void)
{
	in_pool_call++;
}

void pm_leave(void)
{
	in_pool_call--;
}

void pm_open(struct store *s)
{
	pthread_mutex_lock(&pools_lock);
	s->pm_next = pools;
	pools = s;
	pthread_mutex_unlock(&pools_lock);
}

void pm_close(struct store *s)
{
	pm_enter();
	pmemobj_close(s->pop);
	pm_leave();
	pthread_mutex_lock(&pools_lock);
	for (struct store **p = &pools; *p; p = &(*p)->pm_next)
		if (*p == s) {
			*p = s->pm_next;
			break;
		}
	pthread_mutex_unlock(&pools_lock);
}

/* A failed msync of addr: record it for the pool that maps addr.  1 if addr
 * is a pool's (or the thread is inside a pool's open, create, check or
 * close), else 0. */
static int pool_msync_failed(const void *addr, int e)
{
	if (in_pool_call)
		return 1;
	const char *a = addr;
	int found = 0;
	pthread_mutex_lock(&pools_lock);
	for (struct store *s = pools; s && !found; s = s->pm_next)
		if (a >= s->base && (uint64_t)(a - s->base) < s->map_len) {
			atomic_store(&s->msync_errno, e);
			atomic_fetch_add(&s->msync_failures, 1);
			found = 1;
		}
	pthread_mutex_unlock(&pools_lock);
	return found;
}

int msync(void *addr, size_t len, int flags)
{
	static int (*next_msync)(void *, size_t, int);
	if (!next_msync)
		next_msync = (int (*)(void *, size_t, int))dlsym(RTLD_NEXT, "msync");
	int r = next_msync(addr, len, flags);
	if (r == 0 || !(flags & MS_SYNC))
		return r;
	int e = errno;
	if (!pool_msync_failed(addr, e ? e : EIO)) {
		errno = e;
		return r; /* not a pool's: the real result */
	}
	return 0; /* see above: the store reports it, libpmemobj must not abort */
}

int pm_failed(struct store *s)
{
	if (!atomic_load(&s->failed) && !atomic_load(&s->msync_failures))
		return 0;
	int e = atomic_load(&s->msync_errno), zero = 0;
	if (atomic_compare_exchange_strong(&s->failed, &zero, e))
		snprintf(s->fail_why, sizeof(s->fail_why), "persisting the pool failed (msync: %s): "
			 "changes are refused until it is mounted again", strerror(e));
	return -EIO;
}

void pm_fail(struct store *s, int err, const char *why)
{
	int zero = 0, e = err < 0 ? -err : err;
	if (atomic_compare_exchange_strong(&s->failed, &zero, e ? e : EIO))
		snprintf(s->fail_why, sizeof(s->fail_why), "%s (%s): changes are refused until it is mounted again",
			 why, strerror(e ? e : EIO));
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
