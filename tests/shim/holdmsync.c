/*
 * holdmsync.so: an LD_PRELOAD shim that holds msync(2) calls while the file
 * named by EMBFS_HOLD_MSYNC exists (issue 17: a persistence barrier that
 * takes as long as the test wants, deterministically).  The first held call
 * creates that name with ".held" appended, so the test knows a barrier is
 * in progress; calls go on when the file is removed, or after 60 s so a
 * test that dies holding it cannot wedge its daemon for good.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

int msync(void *addr, size_t len, int flags)
{
	static int (*real)(void *, size_t, int);
	const char *hold = getenv("EMBFS_HOLD_MSYNC");
	if (hold && access(hold, F_OK) == 0) {
		char held[4096];
		snprintf(held, sizeof(held), "%s.held", hold);
		int fd = open(held, O_WRONLY | O_CREAT, 0644);
		if (fd >= 0)
			close(fd);
		struct timespec ms = { 0, 1000000 };
		for (int i = 0; i < 60000 && access(hold, F_OK) == 0; i++)
			nanosleep(&ms, NULL);
	}
	if (!real)
		real = (int (*)(void *, size_t, int))dlsym(RTLD_NEXT, "msync");
	return real(addr, len, flags);
}
