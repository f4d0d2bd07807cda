/*
 * .embfs/batch: the current batch id, as text.  Reading gives "B\n"; writing
 * a decimal number (a trailing newline is fine) sets it, as a trainer does at
 * the start of each training batch: every row version written from then on
 * carries that id.  It never goes back (EINVAL), and taking a snapshot
 * advances it past the snapshot's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs.h"

void ctl_batch_read(fuse_req_t req, size_t size, off_t off)
{
	struct embfs *fs = fuse_req_userdata(req);
	char buf[32];
	int n = snprintf(buf, sizeof(buf), "%llu\n", (unsigned long long)store_batch_get(fs->st));
	if (off < 0 || off >= n)
		fuse_reply_buf(req, NULL, 0);
	else
		fuse_reply_buf(req, buf + off, (size_t)n - (size_t)off < size ? (size_t)n - (size_t)off : size);
}

void ctl_batch_write(fuse_req_t req, const char *data, size_t size, off_t off)
{
	struct embfs *fs = fuse_req_userdata(req);
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
	int ret = store_batch_set(fs->st, b);
	if (ret)
		fuse_reply_err(req, -ret);
	else
		fuse_reply_write(req, whole);
}
