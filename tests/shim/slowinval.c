/*
 * slowinval.so: an LD_PRELOAD shim that makes every page-cache invalidation
 * the daemon sends (fuse_lowlevel_notify_inval_inode) wait
 * EMBFS_INVAL_DELAY_MS milliseconds first (issue 25: the window between a
 * change made behind the kernel's back and the kernel dropping its copies,
 * made as long as the test wants, deterministically).  Without the variable
 * the calls go through at once.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/types.h>
#include <time.h>

struct fuse_session;

int fuse_lowlevel_notify_inval_inode(struct fuse_session *se, uint64_t ino, off_t off, off_t len)
{
	static int (*real)(struct fuse_session *, uint64_t, off_t, off_t);
	const char *d = getenv("EMBFS_INVAL_DELAY_MS");
	long ms = d ? atol(d) : 0;
	if (ms > 0) {
		struct timespec t = { ms / 1000, (ms % 1000) * 1000000L };
		nanosleep(&t, NULL);
	}
	if (!real)
		real = (int (*)(struct fuse_session *, uint64_t, off_t, off_t))dlsym(RTLD_NEXT,
										"fuse_lowlevel_notify_inval_inode");
	return real(se, ino, off, len);
}
