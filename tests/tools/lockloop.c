/*
 * lockloop MNT SECONDS: the audit's three loops through a mount, as fast as
 * system calls go (issue 10, item 1): setxattr user.embfs.dim on an empty
 * table, mkdir/rmdir of .snapshots/x, small pwrites to another table.  Exit
 * 0 when every loop ran and stopped in time, 1 when a loop made no progress
 * for 5 s or a call failed unexpectedly (a hung mount leaves the threads
 * stuck in the kernel: the process exits without joining them).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

static char empty[4096], busy[4096], snap[4096];
static atomic_int stop;
static atomic_ulong count[3];
static atomic_int bad;

static void die(const char *what)
{
	fprintf(stderr, "lockloop: %s: %s\n", what, strerror(errno));
	atomic_store(&bad, 1);
	atomic_store(&stop, 1);
}

static void *geo(void *arg)
{
	(void)arg;
	for (unsigned i = 0; !atomic_load(&stop); i++) {
		const char *v = i % 2 ? "32" : "64";
		if (setxattr(empty, "user.embfs.dim", v, 2, 0) && errno != EBUSY)
			return die("setxattr"), NULL;
		atomic_fetch_add(&count[0], 1);
	}
	return NULL;
}

static void *snaps(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop)) {
		if (mkdir(snap, 0755))
			return die("mkdir"), NULL;
		if (rmdir(snap))
			return die("rmdir"), NULL;
		atomic_fetch_add(&count[1], 1);
	}
	return NULL;
}

static void *writes(void *arg)
{
	(void)arg;
	char buf[1024];
	memset(buf, 7, sizeof(buf));
	int fd = open(busy, O_WRONLY | O_CREAT, 0644);
	if (fd < 0)
		return die("open"), NULL;
	for (unsigned i = 0; !atomic_load(&stop); i++) {
		if (pwrite(fd, buf, sizeof(buf), (off_t)(i % 1024) * 1024) != (ssize_t)sizeof(buf))
			return die("pwrite"), NULL;
		atomic_fetch_add(&count[2], 1);
	}
	close(fd);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: lockloop MNT SECONDS\n");
		return 2;
	}
	snprintf(empty, sizeof(empty), "%s/empty.emb", argv[1]);
	snprintf(busy, sizeof(busy), "%s/busy.emb", argv[1]);
	snprintf(snap, sizeof(snap), "%s/.snapshots/x", argv[1]);
	int secs = atoi(argv[2]);
	int fd = open(empty, O_WRONLY | O_CREAT, 0644);
	if (fd < 0)
		return die("create"), 1;
	close(fd);
	pthread_t t[3];
	void *(*fn[3])(void *) = { geo, snaps, writes };
	for (int i = 0; i < 3; i++)
		pthread_create(&t[i], NULL, fn[i], NULL);
	unsigned long last[3] = { 0 }, idle[3] = { 0 };
	for (int tick = 0; tick < secs * 10 && !atomic_load(&stop); tick++) {
		usleep(100000);
		for (int i = 0; i < 3; i++) {
			unsigned long c = atomic_load(&count[i]);
			idle[i] = c == last[i] ? idle[i] + 1 : 0;
			last[i] = c;
			if (idle[i] >= 50) {
				fprintf(stderr, "lockloop: loop %d made no progress for 5 s (setxattr %lu, snapshots %lu, writes %lu): hung\n",
					i, last[0], last[1], last[2]);
				_exit(1);
			}
		}
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	if (atomic_load(&bad))
		return 1;
	printf("setxattr %lu, snapshot mkdir/rmdir %lu, writes %lu in %d s\n", atomic_load(&count[0]),
	       atomic_load(&count[1]), atomic_load(&count[2]), secs);
	return last[0] && last[1] && last[2] ? 0 : 1;
}
