/*
 * embfs-umount [-v] [-f] [-l] [--timeout=SECONDS] MOUNTPOINT
 * and, installed as /sbin/umount.fuse.embfs, umount(8)'s helper for embfs
 * mounts: umount.fuse.embfs MOUNTPOINT [-n] [-l] [-f] [-v] [-r] [-N NS].
 *
 * A clean unmount a script can wait for: when it returns 0, every row the
 * mount accepted is in the pool and the daemon has exited, so the pool can be
 * mounted again, or copied, at once.  (fusermount3 -u returns as soon as the
 * kernel lets go of the mount, while the daemon may still be writing its row
 * cache back and holds the pool.)  Steps:
 *  1. MOUNTPOINT must be an embfs mount (type fuse.embfs in mountinfo);
 *  2. as the mount's owner (the daemon lets no one else in without
 *     allow_other, root included): read the daemon's pid from
 *     MOUNTPOINT/.embfs/pid, and fsync the mount's root, so that the daemon
 *     writes every cached row back while still mounted and says so if it
 *     cannot (EIO: a failed pool);
 *  3. hold the daemon as a pidfd (no confusion with a later process that
 *     gets the same pid);
 *  4. unmount: umount2() as root, else fusermount3 -u;
 *  5. wait until the daemon has exited (it closes the pool before).
 * Exit status: 0 done; 1 bad usage or not an embfs mount; 32 (umount(8)'s
 * "unmount failed") when the sync, the unmount or the wait failed, with a
 * message saying which.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "embfs/version.h"

#define EX_USAGE 1
#define EX_FAIL 32

static const char *prog = "embfs-umount";
static int verbose;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "%s: ", prog);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static long now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Undo mountinfo's octal escapes (\040 for a space) in place. */
static void unescape(char *s)
{
	char *o = s;
	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' && s[3] >= '0' &&
		    s[3] <= '7') {
			*o++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
			s += 3;
		} else {
			*o++ = *s;
		}
	}
	*o = 0;
}

/* The mount at mnt: its type and super options (the last mount there, the
 * one a path reaches).  0, or -ENOENT when nothing is mounted there. */
static int find_mount(const char *mnt, char *type, size_t tn, char *opts, size_t on)
{
	FILE *f = fopen("/proc/self/mountinfo", "r");
	char *line = NULL;
	size_t cap = 0;
	int found = 0;
	if (!f)
		return -errno;
	while (getline(&line, &cap, f) > 0) {
		char *save, *field[6], *t, *src, *so;
		int i = 0;
		char *p;
		while (i < 6 && (p = strtok_r(i ? NULL : line, " \n", &save)))
			field[i++] = p;
		if (i < 6)
			continue;
		unescape(field[4]);
		if (strcmp(field[4], mnt))
			continue;
		/* optional fields up to "-", then type, source, super options */
		while ((p = strtok_r(NULL, " \n", &save)) && strcmp(p, "-"))
			;
		t = strtok_r(NULL, " \n", &save);
		src = strtok_r(NULL, " \n", &save);
		so = strtok_r(NULL, " \n", &save);
		if (!t || !src)
			continue;
		snprintf(type, tn, "%s", t);
		snprintf(opts, on, "%s", so ? so : "");
		found = 1;
	}
	free(line);
	fclose(f);
	return found ? 0 : -ENOENT;
}

/* value of "key=N" in a comma-separated option list, or -1 */
static long opt_num(const char *opts, const char *key)
{
	size_t kl = strlen(key);
	for (const char *p = opts; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
		if (!strncmp(p, key, kl) && p[kl] == '=')
			return strtol(p + kl + 1, NULL, 10);
	return -1;
}

/* What step 2 found: the daemon's pid (0 if unknown) and the errors of
 * reading it and of the sync (0 or an errno). */
struct probe {
	long pid;
	int pid_err, sync_err;
};

/* Step 2 in this process. */
static void probe_here(const char *mnt, int do_sync, struct probe *pr)
{
	char path[PATH_MAX + 16], buf[32];
	snprintf(path, sizeof(path), "%s/.embfs/pid", mnt);
	errno = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
	pr->pid_err = n > 0 ? 0 : errno ? errno : EIO;
	if (fd >= 0)
		close(fd);
	if (n > 0) {
		buf[n] = 0;
		pr->pid = strtol(buf, NULL, 10);
		if (pr->pid <= 0)
			pr->pid_err = EIO;
	}
	if (!do_sync || pr->pid_err == ENOTCONN)
		return;
	fd = open(mnt, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	pr->sync_err = fd < 0 || fsync(fd) ? errno : 0;
	if (fd >= 0)
		close(fd);
}

/* Step 2, as the mount's owner (uid, gid) when that is not who runs this:
 * the daemon refuses every other user without allow_other. */
static void probe(const char *mnt, long uid, long gid, int do_sync, struct probe *pr)
{
	memset(pr, 0, sizeof(*pr));
	if (geteuid() != 0 || uid < 0 || gid < 0 || ((uid_t)uid == geteuid() && (gid_t)gid == getegid())) {
		probe_here(mnt, do_sync, pr);
		return;
	}
	int p[2];
	if (pipe2(p, O_CLOEXEC)) {
		pr->pid_err = pr->sync_err = errno;
		return;
	}
	pid_t c = fork();
	if (c == 0) {
		close(p[0]);
		if (setgroups(0, NULL) || setgid((gid_t)gid) || setuid((uid_t)uid))
			pr->pid_err = pr->sync_err = errno;
		else
			probe_here(mnt, do_sync, pr);
		_exit(write(p[1], pr, sizeof(*pr)) == sizeof(*pr) ? 0 : 1);
	}
	close(p[1]);
	if (c < 0 || read(p[0], pr, sizeof(*pr)) != sizeof(*pr)) {
		memset(pr, 0, sizeof(*pr));
		pr->pid_err = pr->sync_err = c < 0 ? errno : EIO;
	}
	close(p[0]);
	if (c > 0)
		while (waitpid(c, NULL, 0) < 0 && errno == EINTR)
			;
}

/* Step 4: 0, or an errno (said). */
static int unmount(const char *mnt, int lazy, int force)
{
	if (geteuid() == 0) {
		int flags = (lazy ? MNT_DETACH : 0) | (force ? MNT_FORCE : 0);
		if (umount2(mnt, flags) == 0)
			return 0;
		int e = errno;
		say("%s: %s%s", mnt, strerror(e), e == EBUSY ? " (still mounted: close what uses it, or -l)" : "");
		return e;
	}
	pid_t c = fork();
	if (c == 0) {
		execlp("fusermount3", "fusermount3", lazy ? "-uz" : "-u", "--", mnt, (char *)NULL);
		say("fusermount3: %s", strerror(errno));
		_exit(127);
	}
	int st = 0;
	if (c < 0)
		return errno;
	while (waitpid(c, &st, 0) < 0)
		if (errno != EINTR)
			return errno;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : EBUSY; /* fusermount3 said why */
}

/* Step 5: wait until process pid (a pidfd if the kernel has them) exited,
 * for at most timeout_ms (< 0: no limit).  0, or ETIMEDOUT. */
static int wait_exit(long pid, int pidfd, long timeout_ms, const char *mnt)
{
	long t0 = now_ms(), told = 0;
	for (;;) {
		long waited = now_ms() - t0;
		if (timeout_ms >= 0 && waited >= timeout_ms)
			return ETIMEDOUT;
		if (!told && waited >= 2000 && (verbose || isatty(2))) {
			say("%s: waiting for embfs (pid %ld) to write its rows back and close the pool", mnt, pid);
			told = 1;
		}
		if (pidfd >= 0) {
			struct pollfd p = { pidfd, POLLIN, 0 };
			int r = poll(&p, 1, 100);
			if (r > 0 || (r < 0 && errno != EINTR))
				return 0;
		} else {
			if (kill((pid_t)pid, 0) && errno == ESRCH)
				return 0;
			usleep(20000);
		}
	}
}

/* MOUNTPOINT as mountinfo spells it: absolute, symlinks resolved (the
 * mount's own root may not answer stat: resolve its parent only). */
static int canonical(const char *arg, char *out)
{
	char tmp[PATH_MAX], dir[PATH_MAX];
	if (realpath(arg, out))
		return 0;
	if (snprintf(tmp, sizeof(tmp), "%s", arg) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	size_t n = strlen(tmp);
	while (n > 1 && tmp[n - 1] == '/')
		tmp[--n] = 0;
	char *slash = strrchr(tmp, '/');
	const char *base = slash ? slash + 1 : tmp;
	if (slash == tmp)
		snprintf(dir, sizeof(dir), "/");
	else if (slash) {
		*slash = 0;
		if (!realpath(tmp, dir))
			return -errno;
	} else if (!getcwd(dir, sizeof(dir)))
		return -errno;
	if (snprintf(out, PATH_MAX, "%s%s%s", dir, strcmp(dir, "/") ? "/" : "", base) >= PATH_MAX)
		return -ENAMETOOLONG;
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: %s [-v] [-f] [-l] [--timeout=SECONDS] MOUNTPOINT\n"
		"Unmount an embfs mount cleanly: write every cached row back (fsync of the root),\n"
		"unmount, and wait until the daemon has exited and released the pool.\n"
		"  -v             say each step\n"
		"  -f             force: abort the connection (no sync; the daemon still writes\n"
		"                 its cache back before it exits, and is waited for)\n"
		"  -l             lazy: detach now; does not wait (the daemon exits when the last\n"
		"                 open file is closed)\n"
		"  --timeout=S    give up waiting for the daemon after S seconds (default: none)\n"
		"  -n, -r, -t T   accepted (umount(8) passes them) and ignored\n"
		"  -N NS          in the mount namespace NS (umount -N)\n"
		"Exit status: 0 unmounted and the pool free; 1 bad usage or not an embfs mount;\n"
		"32 the sync, the unmount or the wait failed (the message says which).\n",
		prog);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "timeout", required_argument, NULL, 'T' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	int lazy = 0, force = 0, c;
	long timeout_ms = -1;
	const char *ns = NULL;
	const char *slash = strrchr(argv[0], '/');
	prog = slash ? slash + 1 : argv[0];
	while ((c = getopt_long(argc, argv, "vflnrt:N:hV", longopts, NULL)) != -1) {
		switch (c) {
		case 'v': verbose = 1; break;
		case 'f': force = 1; break;
		case 'l': lazy = 1; break;
		case 'n': case 'r': case 't': break;
		case 'N': ns = optarg; break;
		case 'T': {
			char *end;
			errno = 0;
			double s = strtod(optarg, &end);
			if (errno || *end || end == optarg || s < 0 || s > 1e9) {
				say("--timeout=%s: want seconds, such as 60", optarg);
				return EX_USAGE;
			}
			timeout_ms = (long)(s * 1000);
			break;
		}
		case 'h': usage(stdout); return 0;
		case 'V': printf("%s (embfs) %s\n", prog, EMBFS_VERSION); return 0;
		default: usage(stderr); return EX_USAGE;
		}
	}
	if (optind != argc - 1) {
		usage(stderr);
		return EX_USAGE;
	}
	if (ns) {
		int fd = open(ns, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || setns(fd, CLONE_NEWNS)) {
			say("-N %s: %s", ns, strerror(errno));
			return EX_FAIL;
		}
		close(fd);
	}
	char mnt[PATH_MAX], type[64], opts[1024];
	int r = canonical(argv[optind], mnt);
	if (r) {
		say("%s: %s", argv[optind], strerror(-r));
		return EX_USAGE;
	}
	if (find_mount(mnt, type, sizeof(type), opts, sizeof(opts))) {
		say("%s: not mounted", mnt);
		return EX_USAGE;
	}
	if (strcmp(type, "fuse.embfs")) {
		say("%s: not an embfs mount (type %s)", mnt, type);
		return EX_USAGE;
	}

	long t0 = now_ms();
	struct probe pr;
	probe(mnt, opt_num(opts, "user_id"), opt_num(opts, "group_id"), !force && !lazy, &pr);
	int failed = 0, pidfd = -1;
	if (pr.pid_err == ENOTCONN) {
		say("%s: the daemon is gone (crashed or killed): unmounting what is left", mnt);
	} else if (pr.pid_err) {
		say("%s: cannot learn the daemon's pid (.embfs/pid: %s): will not wait for it", mnt,
		    strerror(pr.pid_err));
		failed = 1;
	} else {
		pidfd = (int)syscall(SYS_pidfd_open, (pid_t)pr.pid, 0);
		if (pidfd < 0 && errno == ESRCH) {
			say("%s: daemon pid %ld is not running here", mnt, pr.pid);
			failed = 1;
		}
	}
	if (pr.sync_err && pr.pid_err != ENOTCONN) {
		say("%s: writing cached rows back (fsync): %s", mnt, strerror(pr.sync_err));
		failed = 1;
	} else if (verbose && !force && !lazy && !pr.pid_err) {
		say("%s: rows written back in %ld ms", mnt, now_ms() - t0);
	}
	if (unmount(mnt, lazy, force)) {
		if (pidfd >= 0)
			close(pidfd);
		return EX_FAIL;
	}
	if (verbose)
		say("%s: unmounted", mnt);
	if (!pr.pid_err && !lazy) {
		long t1 = now_ms();
		if (wait_exit(pr.pid, pidfd, timeout_ms, mnt)) {
			say("%s: unmounted, but embfs (pid %ld) is still running after %.1f s", mnt, pr.pid,
			    (double)timeout_ms / 1000);
			failed = 1;
		} else if (verbose) {
			say("%s: embfs (pid %ld) exited %ld ms after the unmount", mnt, pr.pid, now_ms() - t1);
		}
	}
	if (pidfd >= 0)
		close(pidfd);
	return failed ? EX_FAIL : 0;
}
