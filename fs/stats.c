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
	struct cache_stats cs;
	store_stats_get(fs->st, &s);
	if (fs->cache) {
		/* rows written but not yet written back count as stored */
		cache_stats_get(fs->cache, -1, &cs);
		s.rows += cs.new_dirty;
	}
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
	batch_stats(fs, f);
	if (fs->cache) {
		fprintf(f, "cache.budget_bytes %llu\n", (unsigned long long)cs.budget);
		fprintf(f, "cache.bytes %llu\n", (unsigned long long)cs.bytes);
		fprintf(f, "cache.rows %llu\n", (unsigned long long)cs.rows);
		fprintf(f, "cache.meta_bytes_per_row %.1f\n", cs.rows ? (double)cs.meta_bytes / (double)cs.rows : 0.0);
		fprintf(f, "cache.hits %llu\n", (unsigned long long)cs.hits);
		fprintf(f, "cache.misses %llu\n", (unsigned long long)cs.misses);
		fprintf(f, "cache.evictions %llu\n", (unsigned long long)cs.evictions);
		fprintf(f, "cache.dirty %llu\n", (unsigned long long)cs.dirty);
		fprintf(f, "cache.writebacks %llu\n", (unsigned long long)cs.writebacks);
		fprintf(f, "cache.bypasses %llu\n", (unsigned long long)cs.bypasses);
		fprintf(f, "cache.pinned %llu\n", (unsigned long long)cs.pinned);
	}
	fprintf(f, "batch %llu\n", (unsigned long long)store_batch_get(fs->st));
	fprintf(f, "snapshots %llu\n", (unsigned long long)s.snapshots);
	uint32_t sc = 0;
	struct store_snap sn;
	while (store_snap_next(fs->st, &sc, &sn) == 1)
		fprintf(f, "snapshot.%s batch=%llu durable=%d tables=%u excl_bytes=%llu\n", sn.name,
			(unsigned long long)sn.batch, sn.durable, sn.ntables,
			(unsigned long long)sn.excl_bytes);
	uint32_t cur = 0;
	struct store_attr a;
	while (store_table_next(fs->st, &cur, &a) == 1) {
		fprintf(f, "table.%s rows=%llu size=%llu dim=%u dtype=%s row_size=%u", a.name,
			(unsigned long long)rows_count(fs, a.id, a.nrows), (unsigned long long)a.size,
			a.dim, store_dtype_name(a.dtype), a.row_size);
		if (fs->cache) {
			cache_stats_get(fs->cache, a.id, &cs);
			fprintf(f, " cache_hits=%llu cache_misses=%llu cache_evictions=%llu cache_dirty=%llu cache_writebacks=%llu cache_bytes=%llu",
				(unsigned long long)cs.hits, (unsigned long long)cs.misses,
				(unsigned long long)cs.evictions, (unsigned long long)cs.dirty,
				(unsigned long long)cs.writebacks, (unsigned long long)cs.bytes);
		}
		fputc('\n', f);
	}
	if (fclose(f)) {
		free(buf);
		return NULL;
	}
	*len = n;
	return buf;
}
