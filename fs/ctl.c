/*
 * The .embfs directory and some of its files (rows is batch.c's, restore
 * restore.c's, delta delta.c's):
 *  - stats and metrics: a text snapshot of the counters (stats.c renders
 *    both), taken at open, so that reads of one open see one consistent
 *    text; read with direct I/O (no page cache), to its end whatever the
 *    size stat gave (the length of a text rendered at the stat);
 *  - batch: the current batch id, as text.  Reading gives "B\n"; writing a
 *    decimal number (a trailing newline is fine) sets it, as a trainer does
 *    at the start of each training batch: every row version written from
 *    then on carries that id.  It never goes back (EINVAL), and taking a
 *    snapshot advances it past the snapshot's.
 *  - pid: the daemon's process id, as text ("PID\n"), so that embfs-umount
 *    can wait for the daemon serving a mount to exit.
 */
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs.h"

void ctl_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	(void)parent;
	struct fuse_entry_param e;
	fuse_ino_t ino = !strcmp(name, "stats") ? INO_STATS
		       : !strcmp(name, "metrics") ? INO_METRICS
		       : !strcmp(name, "rows")  ? INO_ROWS
		       : !strcmp(name, "batch") ? INO_BATCHID
		       : !strcmp(name, "restore") ? INO_RESTORE
		       : !strcmp(name, "delta") ? INO_DELTA
		       : !strcmp(name, "pid") ? INO_PID
						: 0;
	if (!ino || fs_entry(fs_of(req), ino, &e))
		fuse_reply_err(req, ENOENT);
	else
		fuse_reply_entry(req, &e);
}

void ctl_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off)
{
	(void)ino;
	static const struct fs_dirent list[] = {
		{ ".", INO_CTL, S_IFDIR },
		{ "..", INO_ROOT, S_IFDIR },
		{ "stats", INO_STATS, S_IFREG },
		{ "metrics", INO_METRICS, S_IFREG },
		{ "batch", INO_BATCHID, S_IFREG },
		{ "rows", INO_ROWS, S_IFREG },
		{ "restore", INO_RESTORE, S_IFREG },
		{ "delta", INO_DELTA, S_IFREG },
		{ "pid", INO_PID, S_IFREG },
	};
	struct fs_dirbuf b;
	if (fs_dir_begin(req, &b, size, off)) {
		fs_dir_add_list(&b, list, sizeof(list) / sizeof(list[0]));
		fs_dir_reply(&b);
	}
}

/* An open .embfs/stats or .embfs/metrics (fi->fh): the text rendered at open.
 * The kernel may send a file's RELEASE while a READ of it is still being
 * answered (a reader killed inside read(2) closes the file at once), so a
 * READ answers from a text only while it is listed, under stats_mu, and a
 * RELEASE unlists it under stats_mu before freeing it (found by
 * ThreadSanitizer in tests/e2e/batch.sh: a reply's writev read the freed
 * text). */
struct stats_text {
	struct stats_text *next, **pprev;
	size_t len;
	char data[];
};

static pthread_mutex_t stats_mu = PTHREAD_MUTEX_INITIALIZER;
static struct stats_text *stats_open; /* protected by stats_mu */

void ctl_stats_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	size_t len;
	if ((fi->flags & O_ACCMODE) != O_RDONLY) {
		fuse_reply_err(req, EACCES);
		return;
	}
	char *buf = embfs_stats_render(fs_of(req), ino == INO_METRICS, &len);
	struct stats_text *t = buf ? malloc(sizeof(*t) + len) : NULL;
	if (!t) {
		free(buf);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	t->len = len;
	memcpy(t->data, buf, len);
	free(buf);
	pthread_mutex_lock(&stats_mu);
	t->next = stats_open;
	t->pprev = &stats_open;
	if (stats_open)
		stats_open->pprev = &t->next;
	stats_open = t;
	pthread_mutex_unlock(&stats_mu);
	fi->fh = (uintptr_t)t;
	fi->direct_io = 1;
	fuse_reply_open(req, fi);
}

void ctl_stats_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	(void)ino;
	struct stats_text *t = (void *)(uintptr_t)fi->fh, *o;
	pthread_mutex_lock(&stats_mu);
	for (o = stats_open; o && o != t; o = o->next)
		;
	if (!o)
		fuse_reply_err(req, EBADF); /* released meanwhile: its reader is gone */
	else if ((size_t)off >= t->len)
		fuse_reply_buf(req, NULL, 0);
	else
		fuse_reply_buf(req, t->data + off, size < t->len - (size_t)off ? size : t->len - (size_t)off);
	pthread_mutex_unlock(&stats_mu);
}

void ctl_stats_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	struct stats_text *t = (void *)(uintptr_t)fi->fh;
	pthread_mutex_lock(&stats_mu);
	*t->pprev = t->next;
	if (t->next)
		t->next->pprev = t->pprev;
	pthread_mutex_unlock(&stats_mu);
	free(t);
	fuse_reply_err(req, 0);
}

void ctl_batch_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	fi->direct_io = 1;
	fuse_reply_open(req, fi);
}

void ctl_batch_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	(void)ino;
	(void)fi;
	struct embfs *fs = fs_of(req);
	char buf[32];
	int n = snprintf(buf, sizeof(buf), "%llu\n", (unsigned long long)front_batch_get(&fs->fr));
	if (off < 0 || off >= n)
		fuse_reply_buf(req, NULL, 0);
	else
		fuse_reply_buf(req, buf + off, (size_t)n - (size_t)off < size ? (size_t)n - (size_t)off : size);
}

void ctl_batch_write(fuse_req_t req, fuse_ino_t ino, const char *data, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	(void)ino;
	(void)fi;
	struct embfs *fs = fs_of(req);
	char buf[32];
	size_t whole = size;
	while (size && (data[size - 1] == '\n' || data[size - 1] == ' '))
		size--;
	if (off != 0 || size == 0 || size >= sizeof(buf)) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	memcpy(buf, data, size);
	buf[size] = 0;
	char *end;
	errno = 0;
	unsigned long long b = strtoull(buf, &end, 10);
	if (errno || *end || buf[0] < '0' || buf[0] > '9') {
		fuse_reply_err(req, EINVAL);
		return;
	}
	int ret = front_batch_set(&fs->fr, b);
	if (ret)
		fuse_reply_err(req, -ret);
	else
		fuse_reply_write(req, whole);
}

void ctl_pid_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	if ((fi->flags & O_ACCMODE) != O_RDONLY) {
		fuse_reply_err(req, EACCES);
		return;
	}
	fi->direct_io = 1;
	fuse_reply_open(req, fi);
}

void ctl_pid_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	(void)ino;
	(void)fi;
	char buf[32];
	int n = snprintf(buf, sizeof(buf), "%ld\n", (long)getpid());
	if (off < 0 || off >= n)
		fuse_reply_buf(req, NULL, 0);
	else
		fuse_reply_buf(req, buf + off, (size_t)n - (size_t)off < size ? (size_t)n - (size_t)off : size);
}

/* FS_CTL: .embfs */
const struct fs_kind_ops ctl_kind = {
	.lookup = ctl_lookup,
	.readdir = ctl_readdir,
};

/* FS_STATS, FS_METRICS */
const struct fs_kind_ops ctl_stats_kind = {
	.open = ctl_stats_open,
	.read = ctl_stats_read,
	.release = ctl_stats_release,
};

/* FS_BATCHID: .embfs/batch */
const struct fs_kind_ops ctl_batchid_kind = {
	.open = ctl_batch_open,
	.read = ctl_batch_read,
	.write = ctl_batch_write,
};

/* FS_PID: .embfs/pid */
const struct fs_kind_ops ctl_pid_kind = {
	.open = ctl_pid_open,
	.read = ctl_pid_read,
};
