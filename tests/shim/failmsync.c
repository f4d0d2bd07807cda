/*
 * failmsync.so: an LD_PRELOAD shim that makes msync(2) fail with EIO once the
 * file named by EMBFS_FAIL_MSYNC exists (issue 10, item 2: a pool on a plain
 * file whose write-back fails).  Until then msync runs normally.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

int msync(void *addr, size_t len, int flags)
{
	static int (*real)(void *, size_t, int);
	const char *trigger = getenv("EMBFS_FAIL_MSYNC");
	if (trigger && access(trigger, F_OK) == 0) {
		errno = EIO;
		return -1;
	}
	if (!real)
		real = (int (*)(void *, size_t, int))dlsym(RTLD_NEXT, "msync");
	return real(addr, len, flags);
}
