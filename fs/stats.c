/*
 * .embfs/stats and .embfs/metrics: one walk over the pool, table, cache,
 * spill and request counters, rendered as either file.
 *
 * .embfs/stats: one "KEY VALUE" line per value; then one line per snapshot
 * ("snapshot.NAME k=v ...") and per table ("table.NAME k=v ...").  In the
 * NAME of those keys every byte that could break the line or its split
 * (control characters, space, '=', '\', DEL, bytes outside valid UTF-8) is
 * written \xHH (two lower-case hex digits); string values (pool.path,
 * pool.label, spill.path, pool.state) escape control characters, DEL, '\'
 * and invalid UTF-8 the same way.
 *
 * .embfs/metrics: the Prometheus text exposition format 0.0.4: HELP and
 * TYPE before each family's samples, counters named *_total, per-table and
 * per-snapshot values labelled table="NAME" / snapshot="NAME" with '\', '"'
 * and newline escaped (\\, \", \n) and bytes outside valid UTF-8 given as
 * the four characters \xHH.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs.h"
#include "embfs/utf8.h"

struct stats_out {
	FILE *f;
	int metrics;
};

/* s into .embfs/stats; key: s is part of a key (space and '=' escaped too). */
static void put_stats_text(FILE *f, const char *s, int key)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n = strlen(s);
	while (n) {
		size_t len = embfs_utf8_seq(p, n);
		if (len == 1 && (*p < 0x20 || *p == 0x7f || *p == '\\' || (key && (*p == ' ' || *p == '='))))
			len = 0;
		if (len == 0) {
			fprintf(f, "\\x%02x", *p);
			len = 1;
		} else {
			fwrite(p, 1, len, f);
		}
		p += len;
		n -= len;
	}
}

/* s as a label value (or HELP text: quote kept) of .embfs/metrics. */
static void put_label(FILE *f, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n = strlen(s);
	while (n) {
		size_t len = embfs_utf8_seq(p, n);
		if (len == 0) {
			fprintf(f, "\\\\x%02x", *p);
			len = 1;
		} else if (*p == '\\') {
			fputs("\\\\", f);
		} else if (*p == '"') {
			fputs("\\\"", f);
		} else if (*p == '\n') {
			fputs("\\n", f);
		} else {
			fwrite(p, 1, len, f);
		}
		p += len;
		n -= len;
	}
}

static void family(struct stats_out *o, const char *metric, enum stats_type type, const char *help)
{
	fprintf(o->f, "# HELP embfs_%s %s\n# TYPE embfs_%s %s\n", metric, help, metric,
		type == STATS_COUNTER ? "counter" : "gauge");
}

void stats_put(struct stats_out *o, const struct stats_def *d, uint64_t v)
{
	if (o->metrics) {
		family(o, d->metric, d->type, d->help);
		fprintf(o->f, "embfs_%s %" PRIu64 "\n", d->metric, v);
	} else {
		fprintf(o->f, "%s %" PRIu64 "\n", d->key, v);
	}
}

/* A value that is not a whole number (prec: digits after the point in stats). */
static void put_float(struct stats_out *o, const struct stats_def *d, double v, int prec)
{
	if (o->metrics) {
		family(o, d->metric, d->type, d->help);
		fprintf(o->f, "embfs_%s %.6g\n", d->metric, v);
	} else {
		fprintf(o->f, "%s %.*f\n", d->key, prec, v);
	}
}

#define PUT(key, metric, type, help, v) STATS_PUT(o, key, metric, type, help, v)
#define PUTF(key, metric, help, v, prec)                                              \
	do {                                                                          \
		static const struct stats_def d_ = { key, metric, STATS_GAUGE, help }; \
		put_float(o, &d_, v, prec);                                           \
	} while (0)

/* One table or snapshot line's worth, kept until both files can be written. */
struct tline {
	char name[EMB_NAME_MAX + 1];
	uint64_t rows, size;
	uint32_t dim, row_size;
	const char *dtype;
	struct cache_stats cs;
};

struct sline {
	struct store_snap sn;
};

/* The per-table values: key in the table line, metric, type, help, field. */
enum tfield { T_ROWS, T_SIZE, T_DIM, T_ROW_SIZE, T_HITS, T_MISSES, T_EVICTIONS, T_DIRTY, T_WRITEBACKS, T_BYTES };
static const struct {
	const char *key, *metric;
	enum stats_type type;
	const char *help;
	int cache;
} tdefs[] = {
	[T_ROWS] = { "rows", "table_rows", STATS_GAUGE, "Stored rows of the table (with written rows not yet in the pool)", 0 },
	[T_SIZE] = { "size", "table_size_bytes", STATS_GAUGE, "File size of the table", 0 },
	[T_DIM] = { "dim", "table_dim", STATS_GAUGE, "Values per row of the table", 0 },
	[T_ROW_SIZE] = { "row_size", "table_row_size_bytes", STATS_GAUGE, "Bytes per row of the table", 0 },
	[T_HITS] = { "cache_hits", "cache_hits_total", STATS_COUNTER, "Row cache hits of the table", 1 },
	[T_MISSES] = { "cache_misses", "cache_misses_total", STATS_COUNTER, "Row cache misses of the table", 1 },
	[T_EVICTIONS] = { "cache_evictions", "cache_evictions_total", STATS_COUNTER,
			  "Rows of the table evicted from the row cache", 1 },
	[T_DIRTY] = { "cache_dirty", "cache_dirty_rows", STATS_GAUGE,
		      "Rows of the table written in the row cache and not yet in the pool", 1 },
	[T_WRITEBACKS] = { "cache_writebacks", "cache_writebacks_total", STATS_COUNTER,
			   "Rows of the table written back from the row cache", 1 },
	[T_BYTES] = { "cache_bytes", "cache_bytes", STATS_GAUGE, "Row bytes of the table in the row cache", 1 },
};

static uint64_t tvalue(const struct tline *t, enum tfield k)
{
	switch (k) {
	case T_ROWS: return t->rows;
	case T_SIZE: return t->size;
	case T_DIM: return t->dim;
	case T_ROW_SIZE: return t->row_size;
	case T_HITS: return t->cs.hits;
	case T_MISSES: return t->cs.misses;
	case T_EVICTIONS: return t->cs.evictions;
	case T_DIRTY: return t->cs.dirty;
	case T_WRITEBACKS: return t->cs.writebacks;
	case T_BYTES: return t->cs.bytes;
	}
	return 0;
}

/* The per-snapshot values. */
enum sfield { S_BATCH, S_DURABLE, S_TABLES, S_EXCL, S_CREATED };
static const struct {
	const char *key, *metric;
	const char *help;
} sdefs[] = {
	[S_BATCH] = { "batch", "snapshot_batch", "Batch id the snapshot closed" },
	[S_DURABLE] = { "durable", "snapshot_durable", "1 when every row the snapshot holds is in the pool" },
	[S_TABLES] = { "tables", "snapshot_tables", "Tables the snapshot holds" },
	[S_EXCL] = { "excl_bytes", "snapshot_exclusive_bytes", "Pool bytes only the snapshot holds (freed by dropping it)" },
	[S_CREATED] = { "created_ns", "snapshot_created_timestamp_seconds", "When the snapshot was taken, Unix time" },
};

static uint64_t svalue(const struct store_snap *sn, enum sfield k)
{
	switch (k) {
	case S_BATCH: return sn->batch;
	case S_DURABLE: return (uint64_t)sn->durable;
	case S_TABLES: return sn->ntables;
	case S_EXCL: return sn->excl_bytes;
	case S_CREATED: return sn->created_ns;
	}
	return 0;
}

/* The snapshot and table lines (stats) or families (metrics). */
static void put_lines(struct stats_out *o, const struct store_snap *sn, size_t nsn, const struct tline *t,
		      size_t nt, int cache)
{
	FILE *f = o->f;
	size_t ntdefs = sizeof(tdefs) / sizeof(tdefs[0]), nsdefs = sizeof(sdefs) / sizeof(sdefs[0]);
	if (!o->metrics) {
		for (size_t i = 0; i < nsn; i++) {
			fputs("snapshot.", f);
			put_stats_text(f, sn[i].name, 1);
			for (size_t k = 0; k < nsdefs; k++)
				fprintf(f, " %s=%" PRIu64, sdefs[k].key, svalue(&sn[i], (enum sfield)k));
			fputc('\n', f);
		}
		for (size_t i = 0; i < nt; i++) {
			fputs("table.", f);
			put_stats_text(f, t[i].name, 1);
			for (size_t k = 0; k < ntdefs; k++) {
				if (tdefs[k].cache && !cache)
					continue;
				fprintf(f, " %s=%" PRIu64, tdefs[k].key, tvalue(&t[i], (enum tfield)k));
				if (k == T_DIM)
					fprintf(f, " dtype=%s", t[i].dtype);
			}
			fputc('\n', f);
		}
		return;
	}
	for (size_t k = 0; k < nsdefs; k++) {
		family(o, sdefs[k].metric, STATS_GAUGE, sdefs[k].help);
		for (size_t i = 0; i < nsn; i++) {
			fprintf(f, "embfs_%s{snapshot=\"", sdefs[k].metric);
			put_label(f, sn[i].name);
			if (k == S_CREATED)
				fprintf(f, "\"} %" PRIu64 ".%09" PRIu64 "\n", sn[i].created_ns / 1000000000u,
					sn[i].created_ns % 1000000000u);
			else
				fprintf(f, "\"} %" PRIu64 "\n", svalue(&sn[i], (enum sfield)k));
		}
	}
	family(o, "table_info", STATS_GAUGE, "Always 1: a live table and its dtype");
	for (size_t i = 0; i < nt; i++) {
		fputs("embfs_table_info{table=\"", f);
		put_label(f, t[i].name);
		fprintf(f, "\",dtype=\"%s\"} 1\n", t[i].dtype);
	}
	for (size_t k = 0; k < ntdefs; k++) {
		if (tdefs[k].cache && !cache)
			continue;
		family(o, tdefs[k].metric, tdefs[k].type, tdefs[k].help);
		for (size_t i = 0; i < nt; i++) {
			fprintf(f, "embfs_%s{table=\"", tdefs[k].metric);
			put_label(f, t[i].name);
			fprintf(f, "\"} %" PRIu64 "\n", tvalue(&t[i], (enum tfield)k));
		}
	}
}

/* A string value: a KEY line in stats; in metrics the caller's info family. */
static void put_string(struct stats_out *o, const char *key, const char *v)
{
	if (o->metrics)
		return;
	fprintf(o->f, "%s ", key);
	put_stats_text(o->f, v, 0);
	fputc('\n', o->f);
}

/* The snapshots and live tables, in catalog order (malloc'd arrays). */
static int collect(struct embfs *fs, struct store_snap **sn, size_t *nsn, struct tline **t, size_t *nt)
{
	size_t cap = 0;
	*sn = calloc(EMB_MAX_SNAPS, sizeof(**sn));
	*t = NULL;
	*nsn = *nt = 0;
	if (!*sn)
		return -1;
	uint32_t sc = 0;
	while (*nsn < EMB_MAX_SNAPS && front_snap_next(&fs->fr, &sc, &(*sn)[*nsn]) == 1)
		(*nsn)++;
	uint32_t cur = 0;
	struct store_attr a;
	while (front_table_next(&fs->fr, &cur, &a) == 1) {
		if (*nt == cap) {
			cap = cap ? cap * 2 : 16;
			struct tline *n = realloc(*t, cap * sizeof(**t));
			if (!n)
				return -1;
			*t = n;
		}
		struct tline *l = &(*t)[(*nt)++];
		memset(l, 0, sizeof(*l));
		memcpy(l->name, a.name, sizeof(l->name));
		l->rows = front_count(&fs->fr, a.id, a.nrows);
		l->size = a.size;
		l->dim = a.dim;
		l->row_size = a.row_size;
		l->dtype = front_dtype_name(a.dtype);
		if (fs->fr.cache)
			cache_stats_get(fs->fr.cache, a.id, &l->cs);
	}
	return 0;
}

/* The spill tier's sorted runs: merges and bulk loads. */
static void put_runs(struct stats_out *o, const struct store_spill_stats *sp)
{
	PUT("spill.runs", "spill_runs", GAUGE, "Sorted runs on the spill device", sp->runs);
	PUT("spill.runs_dead", "spill_runs_dead", GAUGE, "Sorted runs waiting to be freed", sp->runs_dead);
	PUT("spill.run_levels", "spill_run_levels", GAUGE, "Levels of sorted runs", sp->run_levels);
	PUT("spill.run_rows", "spill_run_rows", GAUGE, "Row records in sorted runs", sp->run_rows);
	PUT("spill.run_bytes", "spill_run_bytes", GAUGE, "Bytes of sorted runs on the device", sp->run_bytes);
	PUT("spill.run_pool_bytes", "spill_run_pool_bytes", GAUGE, "Pool bytes of sorted runs' records",
	    sp->run_pool_bytes);
	PUT("spill.run_meta_bytes", "spill_run_meta_bytes", GAUGE, "Segment lists, fences and filters of sorted runs",
	    sp->run_meta_bytes);
	PUT("spill.run_evicted", "spill_run_evicted_rows_total", COUNTER, "Rows evicted into sorted runs",
	    sp->run_evicted);
	PUT("spill.run_lookups", "spill_run_lookups_total", COUNTER, "Row lookups in sorted runs", sp->run_reads);
	PUT("spill.run_blocks_read", "spill_run_blocks_read_total", COUNTER, "Blocks of sorted runs read",
	    sp->run_blocks);
	PUT("spill.run_ra_loads", "spill_run_ra_loads_total", COUNTER,
	    "Reads of sorted runs that loaded read-ahead windows for a sequential reader", sp->run_ra_loads);
	PUT("spill.run_ra_blocks", "spill_run_ra_blocks_total", COUNTER,
	    "Blocks of sorted runs found in read-ahead windows", sp->run_ra_blocks);
	PUT("spill.bloom_false_positives", "spill_bloom_false_positives_total", COUNTER,
	    "Run lookups a Bloom filter let through in vain", sp->bloom_fp);
	PUT("spill.merges", "spill_merges_total", COUNTER, "Merges of sorted runs", sp->merges);
	PUT("spill.merge_read_bytes", "spill_merge_read_bytes_total", COUNTER, "Bytes read by merges",
	    sp->merge_in_bytes);
	PUT("spill.merge_write_bytes", "spill_merge_write_bytes_total", COUNTER, "Bytes written by merges",
	    sp->merge_out_bytes);
	PUT("spill.merge_moves", "spill_merge_moves_total", COUNTER,
	    "Sorted runs moved down a level without a rewrite (their rows are disjoint)", sp->merge_moves);
	PUT("spill.sweep_parts", "spill_sweep_parts_total", COUNTER,
	    "Parts written by sweeps (merges of a whole table, a row range at a time)", sp->sweep_parts);
	PUT("spill.sweeping", "spill_sweeping", GAUGE, "1 while a sweep is under way", sp->sweeping);
	PUT("spill.bulk_runs", "spill_bulk_runs_total", COUNTER,
	    "Sorted runs a bulk load wrote straight to the device (rows in row order past a table's end)", sp->bulk_runs);
	PUT("spill.bulk_rows", "spill_bulk_rows_total", COUNTER,
	    "Rows a bulk load wrote straight into sorted runs, past the pool", sp->bulk_rows);
}

/* The spill tier's values (attached device only). */
static void put_spill(struct stats_out *o, const struct store_spill_stats *sp)
{
	put_string(o, "spill.path", sp->path);
	if (o->metrics) {
		family(o, "spill_info", STATS_GAUGE, "Always 1: the spill device's path");
		fputs("embfs_spill_info{path=\"", o->f);
		put_label(o->f, sp->path);
		fputs("\"} 1\n", o->f);
	}
	PUT("spill.size_bytes", "spill_size_bytes", GAUGE, "Size of the spill device", sp->size);
	PUT("spill.segment_bytes", "spill_segment_bytes", GAUGE, "Size of one spill segment", sp->seg_size);
	PUT("spill.segments", "spill_segments", GAUGE, "Spill segments", sp->segs);
	PUT("spill.segments_free", "spill_segments_free", GAUGE, "Free spill segments", sp->segs_free);
	PUT("spill.segments_reserved", "spill_segments_reserved", GAUGE,
	    "Free spill segments kept for merges, not for new rows", sp->segs_reserved);
	PUT("spill.segments_open", "spill_segments_open", GAUGE, "Spill segments being written", sp->segs_open);
	PUT("spill.segments_sealed", "spill_segments_sealed", GAUGE, "Full spill segments", sp->segs_sealed);
	PUT("spill.footprint_bytes", "spill_footprint_bytes", GAUGE, "Bytes written to spill segments not yet freed",
	    sp->footprint);
	PUT("spill.live_bytes", "spill_live_bytes", GAUGE, "Bytes of the versions spill stubs point at", sp->live_bytes);
	PUT("spill.versions", "spill_versions", GAUGE, "Row versions behind spill stubs", sp->live_versions);
	PUTF("spill.footprint_ratio", "spill_footprint_ratio", "Spill footprint over live bytes (0 with none live)",
	     sp->live_bytes ? (double)sp->footprint / (double)sp->live_bytes : 0.0, 2);
	PUT("spill.pmem_high_bytes", "spill_pmem_high_bytes", GAUGE, "Pool bytes row versions may take",
	    sp->pmem_high);
	PUT("spill.pmem_low_bytes", "spill_pmem_low_bytes", GAUGE, "Pool bytes of row versions the mover brings them to",
	    sp->pmem_low);
	PUT("spill.mover_start_bytes", "spill_mover_start_bytes", GAUGE, "Pool bytes of row versions that start the mover",
	    sp->mover_start);
	PUT("spill.moved", "spill_moved_versions_total", COUNTER, "Row versions moved to spill stubs", sp->spilled);
	PUT("spill.writes", "spill_writes_total", COUNTER, "Writes to the spill device", sp->spill_writes);
	PUT("spill.write_bytes", "spill_write_bytes_total", COUNTER, "Bytes written to the spill device",
	    sp->spill_write_bytes);
	PUT("spill.promoted", "spill_promoted_rows_total", COUNTER, "Rows read from stubs and promoted back to the pool",
	    sp->promoted);
	PUT("spill.rows_read", "spill_rows_read_total", COUNTER, "Rows read from the spill device", sp->reads);
	PUT("spill.read_ios", "spill_read_ios_total", COUNTER, "Reads submitted to the spill device", sp->read_ios);
	PUT("spill.read_bytes", "spill_read_bytes_total", COUNTER, "Bytes read from the spill device", sp->read_bytes);
	PUT("spill.read_iops", "spill_read_iops", GAUGE, "Spill device reads over the last second", sp->read_iops);
	PUT("spill.queue_depth", "spill_queue_depth", GAUGE, "io_uring queue depth of one read submission", sp->qd);
	PUT("spill.compacted_segments", "spill_compacted_segments_total", COUNTER, "Spill segments compacted",
	    sp->compacted_segs);
	PUT("spill.compact_moved", "spill_compact_moved_versions_total", COUNTER, "Versions moved by compaction",
	    sp->compact_moved);
	PUT("spill.compact_bytes", "spill_compact_bytes_total", COUNTER, "Bytes moved by compaction", sp->compact_bytes);
	PUT("spill.compacting_done_bytes", "spill_compacting_done_bytes", GAUGE,
	    "Bytes of the segment being compacted already done", sp->compact_seg_done);
	PUT("spill.compacting_total_bytes", "spill_compacting_total_bytes", GAUGE,
	    "Bytes of the segment being compacted", sp->compact_seg_total);
	PUT("spill.checksum_errors", "spill_checksum_errors_total", COUNTER, "Spill records whose checksum did not match",
	    sp->csum_errors);
	PUT("spill.writer_waits", "spill_writer_waits_total", COUNTER, "Writes that waited for the mover", sp->waits);
	PUT("spill.full_events", "spill_full_events_total", COUNTER, "Times the spill device was full", sp->full);
	PUT("spill.row_slabs_returned", "spill_row_slabs_returned_total", COUNTER,
	    "Row slabs given back to the pool heap", sp->slabs_returned);
	PUT("spill.evictions_in_merges", "spill_evictions_in_merges_total", COUNTER,
	    "Evictions the mover made in the middle of a merge", sp->evicts_between);
	put_runs(o, sp);
	PUT("spill.recounting", "spill_recounting", GAUGE, "1 while segment live counts are being recounted",
	    sp->recounting);
}

/* The row cache's whole-cache values. */
static void put_cache(struct stats_out *o, const struct cache_stats *cs)
{
	PUT("cache.budget_bytes", "cache_budget_bytes", GAUGE, "Byte budget of the row cache", cs->budget);
	PUT("cache.bytes", "cache_all_bytes", GAUGE, "Row bytes in the row cache, every table", cs->bytes);
	PUT("cache.rows", "cache_rows", GAUGE, "Rows in the row cache", cs->rows);
	PUT("cache.meta_bytes", "cache_meta_bytes", GAUGE, "DRAM of the row cache's entries and hash buckets",
	    cs->meta_bytes);
	PUT("cache.meta_fixed_bytes", "cache_meta_fixed_bytes", GAUGE,
	    "Part of cache_meta_bytes an empty row cache holds", cs->meta_fixed);
	/* the fixed part spread over a few rows says nothing of a row's cost */
	uint64_t var = cs->meta_bytes > cs->meta_fixed ? cs->meta_bytes - cs->meta_fixed : 0;
	PUTF("cache.meta_bytes_per_row", "cache_meta_bytes_per_row",
	     "Row cache metadata beyond the fixed part per cached row (0 with no rows)",
	     cs->rows ? (double)var / (double)cs->rows : 0.0, 1);
	PUT("cache.hits", "cache_all_hits_total", COUNTER, "Row cache hits, every table", cs->hits);
	PUT("cache.misses", "cache_all_misses_total", COUNTER, "Row cache misses, every table", cs->misses);
	PUT("cache.scan_misses", "cache_scan_misses_total", COUNTER,
	    "Misses of large reads, fetched without being cached (also in cache.misses)", cs->scan_misses);
	PUT("cache.evictions", "cache_all_evictions_total", COUNTER, "Rows evicted from the row cache, every table",
	    cs->evictions);
	PUT("cache.dirty", "cache_all_dirty_rows", GAUGE, "Rows written in the row cache and not yet in the pool",
	    cs->dirty);
	PUT("cache.writebacks", "cache_all_writebacks_total", COUNTER, "Rows written back from the row cache",
	    cs->writebacks);
	PUT("cache.bypasses", "cache_bypasses_total", COUNTER, "Reads and writes that went around a full shard",
	    cs->bypasses);
	PUT("cache.pinned", "cache_pinned_rows", GAUGE, "Rows pinned in the row cache", cs->pinned);
}

/* The pool's path, label, media and sizes (s: the store's values). */
static void put_pool(struct embfs *fs, struct stats_out *o, const struct store_stats *s)
{
	FILE *f = o->f;
	const char *media = s->is_pmem ? "pmem" : "file-msync";
	put_string(o, "pool.path", fs->conf.pool);
	put_string(o, "pool.label", s->label);
	put_string(o, "pool.media", media);
	if (o->metrics) {
		family(o, "pool_info", STATS_GAUGE, "Always 1: the pool's path, label and media");
		fputs("embfs_pool_info{path=\"", f);
		put_label(f, fs->conf.pool);
		fputs("\",label=\"", f);
		put_label(f, s->label);
		fprintf(f, "\",media=\"%s\"} 1\n", media);
	}
	PUT("pool.size_bytes", "pool_size_bytes", GAUGE, "Size of the pool", s->pool_size);
	PUT("pool.used_bytes", "pool_used_bytes", GAUGE, "Pool bytes in use (row slots, index, catalog)", s->used_bytes);
	PUT("pool.index_bytes", "pool_index_bytes", GAUGE, "Pool bytes of the row index (segments, directories)", s->index_bytes);
	PUT("pool.free_bytes", "pool_free_bytes", GAUGE, "Pool bytes new rows can still use (estimate)", s->free_bytes);
	PUT("pool.slabs", "pool_slabs", GAUGE, "Row slabs in the pool", s->slabs);
	PUT("pool.recovered", "pool_recovered", GAUGE, "1 when the mount found an unclean shutdown", s->recovered);
	PUT("pool.checksum_errors", "pool_checksum_errors_total", COUNTER,
	    "Damaged versions or index buckets met (each gave EIO)", s->checksum_errors);
}

/* The pool's state: ok, or failed and why (front_health). */
static void put_pool_state(struct embfs *fs, struct stats_out *o)
{
	FILE *f = o->f;
	char why[200], state[240];
	int failed = front_health(&fs->fr, why, sizeof(why)) != 0;
	if (failed)
		snprintf(state, sizeof(state), "failed (%s)", why);
	put_string(o, "pool.state", failed ? state : "ok");
	if (o->metrics) {
		family(o, "pool_failed", STATS_GAUGE, "1 when the pool has failed (see embfs_pool_failure_info)");
		fprintf(f, "embfs_pool_failed %d\n", failed);
		family(o, "pool_failure_info", STATS_GAUGE, "Always 1, present when the pool has failed: why");
		if (failed) {
			fputs("embfs_pool_failure_info{reason=\"", f);
			put_label(f, why);
			fputs("\"} 1\n", f);
		}
	}
}

/* The file system's request counters and the restore state. */
static void put_fs(struct embfs *fs, struct stats_out *o)
{
	PUT("fs.read_calls", "fs_read_calls_total", COUNTER, "READ requests on tables", atomic_load(&fs->n_read));
	PUT("fs.read_bytes", "fs_read_bytes_total", COUNTER, "Bytes read from tables", atomic_load(&fs->n_read_bytes));
	PUT("fs.read_ahead_kb", "fs_read_ahead_kib", GAUGE, "The kernel's read-ahead window for the mount, KiB (0: unknown)",
	    atomic_load(&fs->ra_kb));
	PUT("fs.write_calls", "fs_write_calls_total", COUNTER, "WRITE requests on tables", atomic_load(&fs->n_write));
	PUT("fs.write_bytes", "fs_write_bytes_total", COUNTER, "Bytes written to tables",
	    atomic_load(&fs->n_write_bytes));
	PUT("fs.fsync_calls", "fs_fsync_calls_total", COUNTER, "FSYNC requests (fsync of a directory is not counted)", atomic_load(&fs->n_fsync));
	PUT("fs.copy_calls", "fs_copy_calls_total", COUNTER, "copy_file_range requests served in the daemon",
	    atomic_load(&fs->n_copy));
	PUT("fs.copy_bytes", "fs_copy_bytes_total", COUNTER, "Bytes of range covered by copy_file_range",
	    atomic_load(&fs->n_copy_bytes));
	PUT("fs.copy_rows", "fs_copy_rows_total", COUNTER, "Stored rows copied by copy_file_range",
	    atomic_load(&fs->n_copy_rows));
	PUT("fs.copy_geometry_taken", "fs_copy_geometry_taken_total", COUNTER,
	    "Copies into an empty table that took the source's geometry", atomic_load(&fs->n_copy_geometry));
	PUT("fs.relays", "fs_relays_total", COUNTER,
	    "Tables whose geometry was set while they held rows of another size (bytes cut again)",
	    atomic_load(&fs->n_relays));
	PUT("fs.relay_rows", "fs_relay_rows_total", COUNTER, "Rows written by those re-lays",
	    atomic_load(&fs->n_relay_rows));
	struct store_intent in;
	PUT("restore.pending", "restore_pending", GAUGE,
	    "1 while a restore or rollback is recorded and not finished (store/intent.c)",
	    (uint64_t)(front_intent_get(&fs->fr, &in) != 0));
	PUT("restore.recovered", "restore_recovered_total", COUNTER,
	    "Restores a crash interrupted, finished at mount", atomic_load(&fs->n_restore_recovered));
}

/* Everything, into o. */
static int render(struct embfs *fs, struct stats_out *o)
{
	struct store_stats s;
	struct cache_stats cs;
	front_stats_get(&fs->fr, &s);
	if (fs->fr.cache) {
		/* rows written but not yet written back count as stored */
		cache_stats_get(fs->fr.cache, -1, &cs);
		s.rows += cs.new_dirty;
	}
	put_pool(fs, o, &s);
	put_pool_state(fs, o);
	PUT("tables", "tables", GAUGE, "Live tables", s.tables);
	PUT("rows", "rows", GAUGE, "Stored rows of every table (with written rows not yet in the pool)", s.rows);
	PUT("store.commits", "store_commits_total", COUNTER, "Group commits of rows", s.commits);
	PUT("store.persist_barriers", "store_persist_barriers_total", COUNTER, "Persistence barriers (msync or fence)",
	    s.barriers);
	PUT("store.transactions", "store_transactions_total", COUNTER, "libpmemobj transactions", s.transactions);
	PUT("store.rows_written", "store_rows_written_total", COUNTER, "Rows committed to the pool", s.rows_written);
	PUT("store.rows_read", "store_rows_read_total", COUNTER, "Rows read from the pool", s.rows_read);
	put_fs(fs, o);
	batch_stats(fs, o);
	pc_stats(fs, o);
	if (fs->fr.cache)
		put_cache(o, &cs);
	struct store_spill_stats sp;
	front_spill_stats_get(&fs->fr, &sp);
	PUT("pmem.row_bytes", "pmem_row_bytes", GAUGE, "Pool bytes of row versions", sp.pmem_row_bytes);
	PUT("pmem.versions", "pmem_versions", GAUGE, "Row versions in the pool", sp.pmem_versions);
	if (sp.attached)
		put_spill(o, &sp);
	PUT("batch", "batch_id", GAUGE, "The current batch id", front_batch_get(&fs->fr));
	PUT("snapshots", "snapshots", GAUGE, "Live snapshots", s.snapshots);
	struct store_snap *sn;
	struct tline *t;
	size_t nsn, nt;
	int ret = collect(fs, &sn, &nsn, &t, &nt);
	if (!ret)
		put_lines(o, sn, nsn, t, nt, fs->fr.cache != NULL);
	free(sn);
	free(t);
	return ret;
}

char *embfs_stats_render(struct embfs *fs, int metrics, size_t *len)
{
	char *buf = NULL;
	size_t n = 0;
	struct stats_out o = { open_memstream(&buf, &n), metrics };
	if (!o.f)
		return NULL;
	int ret = render(fs, &o);
	if (fclose(o.f) || ret) {
		free(buf);
		return NULL;
	}
	*len = n;
	return buf;
}
