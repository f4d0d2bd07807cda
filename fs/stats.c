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
	fprintf(f, "pool.checksum_errors %llu\n", (unsigned long long)s.checksum_errors);
	char why[200];
	if (store_health(fs->st, why, sizeof(why)))
		fprintf(f, "pool.state failed (%s)\n", why);
	else
		fprintf(f, "pool.state ok\n");
	fprintf(f, "tables %llu\n", (unsigned long long)s.tables);
	fprintf(f, "rows %llu\n", (unsigned long long)s.rows);
	fprintf(f, "store.commits %llu\n", (unsigned long long)s.commits);
	fprintf(f, "store.persist_barriers %llu\n", (unsigned long long)s.barriers);
	fprintf(f, "store.transactions %llu\n", (unsigned long long)s.transactions);
	fprintf(f, "store.rows_written %llu\n", (unsigned long long)s.rows_written);
	fprintf(f, "store.rows_read %llu\n", (unsigned long long)s.rows_read);
	fprintf(f, "fs.read_calls %llu\n", (unsigned long long)atomic_load(&fs->n_read));
	fprintf(f, "fs.read_bytes %llu\n", (unsigned long long)atomic_load(&fs->n_read_bytes));
	fprintf(f, "fs.write_calls %llu\n", (unsigned long long)atomic_load(&fs->n_write));
	fprintf(f, "fs.write_bytes %llu\n", (unsigned long long)atomic_load(&fs->n_write_bytes));
	fprintf(f, "fs.fsync_calls %llu\n", (unsigned long long)atomic_load(&fs->n_fsync));
	fprintf(f, "fs.copy_calls %llu\n", (unsigned long long)atomic_load(&fs->n_copy));
	fprintf(f, "fs.copy_bytes %llu\n", (unsigned long long)atomic_load(&fs->n_copy_bytes));
	fprintf(f, "fs.copy_rows %llu\n", (unsigned long long)atomic_load(&fs->n_copy_rows));
	fprintf(f, "fs.copy_geometry_taken %llu\n", (unsigned long long)atomic_load(&fs->n_copy_geometry));
	struct store_intent in;
	fprintf(f, "restore.pending %d\n", store_intent_get(fs->st, &in) != 0);
	fprintf(f, "restore.recovered %llu\n", (unsigned long long)atomic_load(&fs->n_restore_recovered));
	batch_stats(fs, f);
	pc_stats(fs, f);
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
	struct store_spill_stats sp;
	store_spill_stats_get(fs->st, &sp);
	fprintf(f, "pmem.row_bytes %llu\n", (unsigned long long)sp.pmem_row_bytes);
	fprintf(f, "pmem.versions %llu\n", (unsigned long long)sp.pmem_versions);
	if (sp.attached) {
#define SP(name, v) fprintf(f, "spill." name " %llu\n", (unsigned long long)(v))
		fprintf(f, "spill.path %s\n", sp.path);
		SP("size_bytes", sp.size);
		SP("segment_bytes", sp.seg_size);
		SP("segments", sp.segs);
		SP("segments_free", sp.segs_free);
		SP("segments_open", sp.segs_open);
		SP("segments_sealed", sp.segs_sealed);
		SP("footprint_bytes", sp.footprint);
		SP("live_bytes", sp.live_bytes);
		SP("versions", sp.live_versions);
		fprintf(f, "spill.footprint_ratio %.2f\n", sp.live_bytes ? (double)sp.footprint / (double)sp.live_bytes : 0.0);
		SP("pmem_high_bytes", sp.pmem_high);
		SP("pmem_low_bytes", sp.pmem_low);
		SP("moved", sp.spilled);
		SP("writes", sp.spill_writes);
		SP("write_bytes", sp.spill_write_bytes);
		SP("promoted", sp.promoted);
		SP("rows_read", sp.reads);
		SP("read_ios", sp.read_ios);
		SP("read_bytes", sp.read_bytes);
		SP("read_iops", sp.read_iops);
		SP("queue_depth", sp.qd);
		SP("compacted_segments", sp.compacted_segs);
		SP("compact_moved", sp.compact_moved);
		SP("compact_bytes", sp.compact_bytes);
		SP("compacting_done_bytes", sp.compact_seg_done);
		SP("compacting_total_bytes", sp.compact_seg_total);
		SP("checksum_errors", sp.csum_errors);
		SP("writer_waits", sp.waits);
		SP("full_events", sp.full);
		SP("row_slabs_returned", sp.slabs_returned);
		SP("runs", sp.runs);
		SP("runs_dead", sp.runs_dead);
		SP("run_levels", sp.run_levels);
		SP("run_rows", sp.run_rows);
		SP("run_bytes", sp.run_bytes);
		SP("run_pool_bytes", sp.run_pool_bytes);
		SP("run_meta_bytes", sp.run_meta_bytes);
		SP("run_evicted", sp.run_evicted);
		SP("run_lookups", sp.run_reads);
		SP("run_blocks_read", sp.run_blocks);
		SP("bloom_false_positives", sp.bloom_fp);
		SP("merges", sp.merges);
		SP("merge_read_bytes", sp.merge_in_bytes);
		SP("merge_write_bytes", sp.merge_out_bytes);
		SP("recounting", sp.recounting);
#undef SP
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
