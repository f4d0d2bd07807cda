/*
 * A worker thread moves to the CPU of the thread whose request it serves.
 *
 * A FUSE request is two wake-ups: the kernel wakes a worker blocked on
 * /dev/fuse, and the worker's reply wakes the caller.  On another CPU each
 * is an inter-processor interrupt, and on a virtual machine whose idle
 * vCPUs halt (cpuidle's guest halt polling off), a halted vCPU must be
 * scheduled again by the host first: on the project's 2-core machine a
 * gather of one row took 300-600 us there, against 62 us with the caller
 * and the daemon pinned to one CPU by hand, and a push of one row 170-388
 * us against 95-105 us with the worker following (docs/operations.md,
 * "Workers follow their caller").  The caller waits for the reply anyway,
 * so the worker loses no parallelism by running where the caller sleeps.
 *
 * So before it serves a read or a write, a worker looks up the caller's CPU
 * (field 39 of /proc/TID/stat, the CPU it last ran on: the one it sleeps
 * on now) and, when that is not the CPU it is bound to, binds itself there
 * (sched_setaffinity).  It stays bound while it waits for the next request,
 * so that the next request from the same thread wakes it where that thread
 * runs.  Only when:
 *  - the caller is its process's first thread.  A trainer's background
 *    thread asks while the main thread computes, and a worker bound to the
 *    background thread's CPU would take it from the compute (the DLRM
 *    example: x1.53-1.61 bound, x1.40-1.47 not);
 *  - the worker served FOLLOW_STREAK requests in a row from that thread.  A
 *    request from another thread frees it again, so that callers taking
 *    turns (two processes on one mount) do not have workers migrate at
 *    every request (two processes' gathers: 4.5-5.9 K requests/s each,
 *    against 5.7-6.4 K unbound).
 * The descriptor of the caller's stat file is kept per worker and read
 * again with pread (one system call a request).  Any failure (no /proc, a
 * CPU outside the daemon's cpuset, the caller gone) leaves the worker where
 * it is.  -o follow_cpu=0 turns it off.
 */
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "fs.h"

static __thread pid_t seen_tid;   /* the caller whose stat file seen_fd is */
static __thread int seen_fd = -1;
static __thread int seen_main;    /* seen_tid is its process's first thread */
static __thread int bound = -1;   /* the CPU this worker is bound to, or -1 */
static __thread pid_t last_caller; /* whose request this worker served last */
static __thread unsigned streak;  /* ... and how many in a row */
/* requests in a row from one caller before a worker binds itself to it */
#define FOLLOW_STREAK 8
static __thread cpu_set_t all;    /* the CPUs it may run on, as it started */
static __thread int have_mask;    /* all is set (1), or unknown (-1) */

/* Is thread tid its process's first thread (its id the process's)? */
static int is_main(pid_t tid)
{
	char path[48], buf[256];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)tid);
	FILE *f = fopen(path, "re");
	int main_thread = 0;
	if (!f)
		return 0;
	while (fgets(buf, sizeof(buf), f))
		if (!strncmp(buf, "Tgid:", 5)) {
			main_thread = atoi(buf + 5) == (int)tid;
			break;
		}
	fclose(f);
	return main_thread;
}

/* The CPU thread tid last ran on, or -1 (also for a thread that is not
 * its process's first: see the top of the file). */
static int caller_cpu(pid_t tid)
{
	if (tid != seen_tid || seen_fd < 0) {
		if (seen_fd >= 0)
			close(seen_fd);
		char path[48];
		snprintf(path, sizeof(path), "/proc/%d/stat", (int)tid);
		seen_fd = open(path, O_RDONLY | O_CLOEXEC);
		seen_tid = tid;
		seen_main = is_main(tid);
		if (seen_fd < 0)
			return -1;
	}
	if (!seen_main)
		return -1;
	char buf[1024];
	ssize_t n = pread(seen_fd, buf, sizeof(buf) - 1, 0);
	if (n <= 0) { /* the thread ended (its id may come back for another) */
		close(seen_fd);
		seen_fd = -1;
		return -1;
	}
	buf[n] = '\0';
	/* after the command name's ')': field 3 (the state) on; the CPU is 39 */
	char *p = strrchr(buf, ')');
	for (int field = 2; p && field < 39; field++)
		p = strchr(p + 1, ' ');
	if (!p)
		return -1;
	char *end;
	long cpu = strtol(p + 1, &end, 10);
	return end != p + 1 && cpu >= 0 && cpu < CPU_SETSIZE ? (int)cpu : -1;
}

void fs_follow_caller(fuse_req_t req)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	if (!ctx || ctx->pid <= 0 || !fs_of(req)->conf.follow_cpu)
		return;
	if (!have_mask)
		have_mask = sched_getaffinity(0, sizeof(all), &all) == 0 ? 1 : -1;
	if (have_mask < 0)
		return;
	if (ctx->pid != last_caller) {
		/* another caller than this worker's last: callers that take
		 * turns (two processes, or a pipeline's two threads) would have
		 * it migrate at every request, so it goes back to any CPU */
		last_caller = ctx->pid;
		streak = 1;
		if (bound >= 0 && sched_setaffinity(0, sizeof(all), &all) == 0)
			bound = -1;
		return;
	}
	if (streak < FOLLOW_STREAK) {
		streak++;
		return;
	}
	int cpu = caller_cpu(ctx->pid);
	if (cpu < 0 || cpu == bound || !CPU_ISSET(cpu, &all))
		return;
	cpu_set_t m;
	CPU_ZERO(&m);
	CPU_SET(cpu, &m);
	if (sched_setaffinity(0, sizeof(m), &m) == 0)
		bound = cpu;
}
