/* .embfs/stats: a text snapshot of pool, table and request counters. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs.h"

char *embfs_stats_render(struct embfs *fs, size_t *len)
{
	char *buf = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&buf, &n);
	if (!f)
		return NULL;
	struct store_stats s;
	store_stats_get(fs->st, &s);
	fprintf(f, "pool.path %s\n", fs->conf.pool);
	fprintf(f, "pool.label %s\n", s.label);
	fprintf(f, "pool.media %s\n", s.is_pmem ? "pmem" : "file-msync");
	fprintf(f, "pool.size_bytes %llu\n", (unsigned long long)s.pool_size);
	fprintf(f, "pool.used_bytes %llu\n", (unsigned long long)s.used_bytes);
	fprintf(f, "pool.free_bytes %llu\n", (unsigned long long)s.free_bytes);
	fprintf(f, "pool.slabs %llu\n", (unsigned long long)s.slabs);
	fprintf(f, "pool.recovered %d\n", s.recovered);
	fprintf(f, "tables %llu\n", (unsigned long long)s.tables);
	fprintf(f, "rows %llu\n", (unsigned long long)s.rows);
	fprintf(f, "store.commits %llu\n", (unsigned long long)s.commits);
	fprintf(f, "store.persist_barriers %llu\n", (unsigned long long)s.barriers);
	fprintf(f, "store.rows_written %llu\n", (unsigned long long)s.rows_written);
	fprintf(f, "store.rows_read %llu\n", (unsigned long long)s.rows_read);
	fprintf(f, "fs.read_calls %llu\n", (unsigned long long)atomic_load(&fs->n_read));
	fprintf(f, "fs.read_bytes %llu\n", (unsigned long long)atomic_load(&fs->n_read_bytes));
	fprintf(f, "fs.write_calls %llu\n", (unsigned long long)atomic_load(&fs->n_write));
	fprintf(f, "fs.write_bytes %llu\n", (unsigned long long)atomic_load(&fs->n_write_bytes));
	fprintf(f, "fs.fsync_calls %llu\n", (unsigned long long)atomic_load(&fs->n_fsync));
	uint32_t cur = 0;
	struct store_attr a;
	while (store_table_next(fs->st, &cur, &a) == 1)
		fprintf(f, "table.%s rows=%llu size=%llu dim=%u dtype=%s row_size=%u\n", a.name,
			(unsigned long long)a.nrows, (unsigned long long)a.size, a.dim,
			store_dtype_name(a.dtype), a.row_size);
	if (fclose(f)) {
		free(buf);
		return NULL;
	}
	*len = n;
	return buf;
}
