/*
 * copy_file_range between tables, served inside the daemon: `cp` of a
 * table (coreutils calls copy_file_range, which FUSE forwards) moves no row
 * bytes through the kernel.  The source is a live table or a snapshot's;
 * the destination a live table.
 *
 *  - A destination that holds no rows and has size 0 (new, or emptied)
 *    takes the source's geometry first, so `cp .snapshots/S/t MNT/t2` makes
 *    a table of t's dim and dtype.
 *  - Same row size and row-aligned offsets: the source's stored rows are
 *    found through its seek index and only they are written (holes stay
 *    holes, and a sparse table costs what it stores, not its length; where
 *    the destination may store a row the source does not -- below its
 *    size -- that row is punched, as a byte copy of zeros would leave it).
 *  - Anything else (unaligned offsets, other row sizes, a partial last
 *    row): the bytes are read and written as by READ and WRITE.
 * Each request copies at most MAX_BYTES of stored rows (or, byte by byte,
 * of the range); a short count makes the caller (the kernel, cp) go on.  Not
 * atomic as a whole (neither is cp): each row is.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fs.h"

#define CHUNK_ROWS 4096u
#define MAX_BYTES (16u << 20) /* per request */

/* Rows [rin, rin + k) of src, all stored, to [rout, rout + k) of table id. */
static int copy_run(struct embfs *fs, const struct tview *src, uint32_t id, uint32_t rs, uint64_t rin,
		    uint64_t rout, uint64_t k, uint64_t *ids, char *buf)
{
	int ret = 0;
	for (uint64_t done = 0; !ret && done < k;) {
		uint32_t m = k - done < CHUNK_ROWS ? (uint32_t)(k - done) : CHUNK_ROWS;
		for (uint32_t i = 0; i < m; i++)
			ids[i] = rin + done + i;
		ret = front_rows_get(&fs->fr, &src->v, rs, ids, m, buf, NULL);
		if (!ret) {
			uint64_t off = (rout + done) * rs;
			struct pc_io io;
			pc_io_begin(fs, id, &io);
			ret = front_write(&fs->fr, id, rs, off, (size_t)m * rs, buf);
			if (!ret)
				pc_io_done(fs, id, rs, off, (size_t)m * rs, buf, &io);
		}
		done += m;
	}
	return ret;
}

/* Rows [rin, rin + n) of src to [rout, rout + n) of table id, row size rs:
 * the source's runs of stored rows are found with its seek index (a sparse
 * table costs what it stores, not its length) and written; rows it does
 * not store are punched in the destination below dst_end (its size in rows:
 * no row is stored past it).  Stops once MAX_BYTES of rows are copied:
 * *covered = rows of the range done. */
static int copy_rows(struct embfs *fs, const struct tview *src, uint32_t id, uint32_t rs, uint64_t rin,
		     uint64_t rout, uint64_t n, uint64_t dst_end, uint64_t *covered)
{
	uint64_t *ids = malloc(CHUNK_ROWS * sizeof(*ids));
	char *buf = malloc((size_t)CHUNK_ROWS * rs);
	int ret = ids && buf ? 0 : -ENOMEM;
	uint64_t r = rin, end = rin + n, budget = MAX_BYTES / rs ? MAX_BYTES / rs : 1, copied = 0;
	while (!ret && r < end && copied < budget) {
		uint64_t data, hole;
		ret = front_row_next(&fs->fr, &src->v, r, &data);
		if (ret < 0)
			break;
		if (ret == 0 || data > end)
			data = end;
		uint64_t plo = rout + (r - rin), phi = rout + (data - rin);
		phi = phi < dst_end ? phi : dst_end;
		if (plo < phi)
			ret = front_punch(&fs->fr, id, plo * rs, (phi - plo) * rs);
		if (ret < 0)
			break;
		r = data;
		if (r == end)
			break;
		ret = front_row_hole(&fs->fr, &src->v, data, &hole);
		if (ret < 0)
			break;
		hole = hole < end ? hole : end;
		if (hole - data > budget - copied)
			hole = data + (budget - copied);
		ret = copy_run(fs, src, id, rs, data, rout + (data - rin), hole - data, ids, buf);
		copied += hole - data;
		atomic_fetch_add_explicit(&fs->n_copy_rows, hole - data, memory_order_relaxed);
		r = hole;
	}
	free(ids);
	free(buf);
	*covered = r - rin;
	return ret < 0 ? ret : 0;
}

/* Bytes [in, in + len) of src to [out, out + len) of table id, as READ and
 * WRITE would move them. */
static int copy_bytes(struct embfs *fs, const struct tview *src, uint32_t id, uint32_t rs_out, uint64_t in,
		      uint64_t out, uint64_t len)
{
	size_t cap = len < (1u << 20) ? (size_t)len : (1u << 20);
	char *buf = malloc(cap ? cap : 1);
	int ret = buf ? 0 : -ENOMEM;
	for (uint64_t done = 0; !ret && done < len;) {
		size_t k = len - done < cap ? (size_t)(len - done) : cap;
		ret = front_read(&fs->fr, &src->v, src->a.row_size, in + done, k, buf);
		if (!ret) {
			struct pc_io io;
			pc_io_begin(fs, id, &io);
			ret = front_write(&fs->fr, id, rs_out, out + done, k, buf);
			if (!ret)
				pc_io_done(fs, id, rs_out, out + done, k, buf, &io);
		}
		done += k;
	}
	free(buf);
	return ret;
}

/* The copy itself: bytes copied (> 0 or 0 at the source's end) or -errno. */
static int64_t copy_range(struct embfs *fs, fuse_ino_t ino_in, uint64_t in, uint32_t id, uint64_t out,
			  uint64_t len)
{
	struct tview src;
	struct store_attr da;
	int ret = fs_view(fs, ino_in, &src.v, &src.a);
	if (ret)
		return ret == -ENOENT ? -EOPNOTSUPP : ret;
	/* the store answers the seeks: it must hold every row written */
	ret = src.v.snap ? front_sync_snap(&fs->fr, src.v.snap - 1) : front_before_change(&fs->fr, src.v.id);
	if (ret)
		return ret;
	if ((ret = front_table_getattr(&fs->fr, id, &da)))
		return ret;
	if (in >= src.a.size)
		return 0;
	if (len > src.a.size - in)
		len = src.a.size - in;
	if (out + len < out || out + len > front_max_size(da.row_size))
		return -EFBIG;
	int dst_empty = da.size == 0 && front_count(&fs->fr, id, da.nrows) == 0;
	uint64_t dst_end = dst_empty ? 0 : (da.size + da.row_size - 1) / da.row_size;
	if (dst_empty && (da.dim != src.a.dim || da.dtype != src.a.dtype)) {
		if ((ret = front_before_change(&fs->fr, id)))
			return ret;
		ret = front_table_set_geometry(&fs->fr, id, src.a.dim, src.a.dtype);
		front_after_change(&fs->fr, id, 0, UINT64_MAX);
		if (ret)
			return ret;
		if ((ret = front_table_getattr(&fs->fr, id, &da)))
			return ret;
		atomic_fetch_add_explicit(&fs->n_copy_geometry, 1, memory_order_relaxed);
	}
	uint32_t rs = src.a.row_size;
	uint64_t whole = 0, covered = 0;
	int aligned = da.row_size == rs && in % rs == 0 && out % rs == 0;
	if (aligned) {
		ret = copy_rows(fs, &src, id, rs, in / rs, out / rs, len / rs, dst_end, &covered);
		whole = covered * rs;
		if (!ret && whole)
			ret = front_table_extend(&fs->fr, id, out + whole); /* trailing holes count */
		if (!ret && covered < len / rs)
			len = whole; /* the budget ran out: a short copy, the caller goes on */
	}
	if (!ret && aligned && whole < len && len - whole < rs) {
		/* the first bytes of one row, aligned: copied if the source
		 * stores that row, else a hole stays a hole (the size covers it) */
		uint64_t row = (in + whole) / rs;
		uint8_t present = 0;
		char *b = malloc(rs);
		ret = b ? front_rows_get(&fs->fr, &src.v, rs, &row, 1, b, &present) : -ENOMEM;
		if (!ret && present)
			ret = copy_bytes(fs, &src, id, da.row_size, in + whole, out + whole, len - whole);
		else if (!ret)
			ret = front_table_extend(&fs->fr, id, out + len);
		free(b);
	} else if (!ret && whole < len) {
		if (len - whole > MAX_BYTES)
			len = whole + MAX_BYTES;
		ret = copy_bytes(fs, &src, id, da.row_size, in + whole, out + whole, len - whole);
	}
	if (ret)
		return ret;
	atomic_fetch_add_explicit(&fs->n_copy, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&fs->n_copy_bytes, len, memory_order_relaxed);
	return (int64_t)len;
}

void table_copy_range(fuse_req_t req, fuse_ino_t ino_in, off_t off_in, uint32_t id, fuse_ino_t ino_out,
		      off_t off_out, size_t len, int flags)
{
	struct embfs *fs = fs_of(req);
	int64_t ret;
	if (flags)
		ret = -EINVAL;
	else if (off_in < 0 || off_out < 0)
		ret = -EINVAL;
	else if (ino_in == ino_out)
		ret = -EOPNOTSUPP; /* overlapping ranges: the kernel copies through the page cache */
	else
		ret = copy_range(fs, ino_in, (uint64_t)off_in, id, (uint64_t)off_out, len);
	if (ret < 0) {
		front_pool_failed(&fs->fr, (int)ret);
		fuse_reply_err(req, (int)-ret);
	} else {
		fuse_reply_write(req, (size_t)ret);
	}
}
