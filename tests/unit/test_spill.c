/*
 * Unit tests of the spill tier (store/tier/), with a pool deliberately too
 * small so that most rows live on the spill file:
 *  - rows spill and read back (one by one and batched), survive reopen;
 *  - every forced compaction is checked against the segment table before
 *    and after: the most stale segment is freed, its live records and
 *    nothing else are appended (packed), a segment the copies fill is
 *    sealed only when full;
 *  - rows of two sizes: a short record in the last block of a long one
 *    survives the compaction of its segment;
 *  - a device full of stale records: the mover compacts until rows fit;
 *  - random writes, partial writes, deletes and truncates against a shadow
 *    copy, with spills, promotions and compactions in between;
 *  - snapshot versions spill; dropping the snapshot frees their space
 *    through compaction;
 *  - a damaged byte in the spill file gives EIO on exactly the rows whose
 *    record it is in, also after compaction moved the record;
 *  - a full spill file gives ENOSPC and loses nothing;
 *  - SIGKILL during spills and compactions: recovery keeps every durable row,
 *    tears none, leaks nothing (store_fsck, with the live counts recounted);
 *  - store_spill_run from two threads beside a writer;
 *  - the mover thread under a writer and two readers; a writer short of
 *    room goes on after the mover's evictions, not after its merges;
 *  - range reads (store_rows_read_range) against a model of the live view
 *    and two snapshots and against the per-row path, over the pool, runs,
 *    tombstones and holes, with skip masks and read-ahead windows; a
 *    damaged run block: EIO for exactly the reads that touch it;
 *  - bulk loads straight into runs (store_rows_append): random appends
 *    with gaps, reads, a snapshot, pool writes over them, truncation,
 *    merges, reopening; a device too small; SIGKILL during loads.
 * The pool is on /dev/shm when there is one; the spill file in /tmp (O_DIRECT
 * needs a disk file system).  EMBFS_SEED replays a run (the pools' index
 * layout, the operations, the kill points); TEST_SPILL_ONLY=PART runs one
 * part.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "embfs/store.h"
#include "../../store/store_test.h"
#include "helpers.h"
#include "store_helpers.h"

#define RS 256u
static char path[256], spath[256];
static char err[512];
static unsigned long long seed; /* EMBFS_SEED replays: pools' uuids, operations, kill points */
/* the parts before sorted runs test the stub path: every spilled version
 * behind a stub (store_spill_conf.stubs_only); the runs_* parts set it 0 */
static int stubs_only = 1;
/* the mover's test hook (store_test_spill.unlocked), for pools attached now */
static void (*unlocked_fn)(void *);
/* segments to a new run's list block (0: a block's worth) */
static uint32_t list_cap;
static uint64_t order_max; /* store_test_spill.evict_order_max */
static int bulk_always;    /* store_test_spill.bulk_always */
static uint64_t sweep_part; /* store_test_spill.sweep_part_bytes; also whole_always */
static uint32_t merge_delay; /* store_test_spill.merge_delay_ms */
static uint32_t merge_slow;  /* store_test_spill.merge_slow_ms */
static uint32_t evict_rows, evict_slow; /* store_test_spill.evict_rows, evict_slow_ms */
static int all_cold;                    /* store_test_spill.all_cold */
static uint32_t spill_low = 30; /* the low watermark, percent of the pool (the high one: 40) */

/* A 64-bit mix of x (splitmix64). */
static uint64_t mix(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ull;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

static void attach(struct store *s, uint64_t spill_size)
{
	struct store_spill_conf c = { .path = spath, .size = spill_size, .manual = 1, .high = 40, .low = spill_low,
				      .stubs_only = stubs_only };
	store_test_spill_hooks(s, &(struct store_test_spill){ .unlocked = unlocked_fn, .run_list_cap = list_cap,
								  .evict_order_max = order_max, .bulk_always = bulk_always,
								  .sweep_part_bytes = sweep_part, .whole_always = sweep_part != 0,
								  .merge_delay_ms = merge_delay, .merge_slow_ms = merge_slow,
								  .evict_rows = evict_rows, .evict_slow_ms = evict_slow,
								  .all_cold = all_cold });
	if (store_spill_attach(s, &c, err, sizeof(err))) {
		fprintf(stderr, "attach: %s\n", err);
		exit(1);
	}
}

static struct store *open_pool(void)
{
	struct store *s;
	if (store_open(path, &s, err, sizeof(err))) {
		fprintf(stderr, "open: %s\n", err);
		exit(1);
	}
	attach(s, 0);
	return s;
}

/* pools made by the running part: each part's pools depend only on the seed
 * and the part, so TEST_SPILL_ONLY=PART replays what the whole run did */
static uint64_t part_no, npools;

static struct store *fresh(uint64_t size, uint64_t spill_size)
{
	npools++;
	uint64_t k = part_no << 32 | npools;
	uint64_t u[2] = { mix(seed ^ k), mix(seed + k) }; /* the index's hash seed */
	struct store_mkfs_opts o = { .size = size, .force = 1, .label = "spill", .uuid = (const uint8_t *)u };
	struct store *s;
	unlink(path);
	unlink(spath);
	if (store_mkfs(path, &o, err, sizeof(err)) || store_open(path, &s, err, sizeof(err))) {
		fprintf(stderr, "pool: %s\n", err);
		exit(1);
	}
	attach(s, spill_size);
	return s;
}

/* fill() for this test's rows of RS bytes */
static void fill_rs(uint8_t *row, uint64_t id, uint64_t gen)
{
	fill(row, RS, id, gen);
}

static struct store_spill_stats sstats(struct store *s)
{
	struct store_spill_stats st;
	store_spill_stats_get(s, &st);
	return st;
}

/* Bytes a record of a len-byte row takes on the spill device. */
static uint32_t rec_size(uint32_t len)
{
	return (uint32_t)((sizeof(struct emb_srec) + len + 15) & ~15u);
}

/* The pool's spill segment table. */
#define MAXSEG 256u
struct segtab {
	uint64_t n, seg_size;
	struct store_spill_seg g[MAXSEG];
};

static void segtab_get(struct store *s, struct segtab *t)
{
	struct store_spill_stats st = sstats(s);
	CHECK(st.segs <= MAXSEG);
	t->n = st.segs;
	t->seg_size = st.seg_size;
	for (uint64_t k = 0; k < t->n; k++)
		OK(store_spill_seg_get(s, k, &t->g[k]));
}

/* The segment a forced compaction must take: the sealed one with the
 * smallest share of live bytes (the first of equals), or UINT64_MAX. */
static uint64_t most_stale(const struct segtab *t)
{
	uint64_t best = UINT64_MAX;
	double best_ratio = 2.0;
	for (uint64_t k = 0; k < t->n; k++) {
		const struct store_spill_seg *g = &t->g[k];
		if (g->state != EMB_SEG_SEALED || g->live >= g->fill)
			continue;
		double ratio = (double)g->live / (double)g->fill;
		if (ratio < best_ratio) {
			best_ratio = ratio;
			best = k;
		}
	}
	return best;
}

/* Segments that differ between two tables, as state:live/fill KiB. */
static void segtab_diff(const struct segtab *a, const struct segtab *b)
{
	for (uint64_t k = 0; k < a->n; k++) {
		const struct store_spill_seg *x = &a->g[k], *y = &b->g[k];
		if (x->state != y->state || x->fill != y->fill || x->live != y->live || x->nlive != y->nlive)
			fprintf(stderr, "  segment %llu: %c%llu/%llu -> %c%llu/%llu KiB\n", (unsigned long long)k,
				"FOS"[x->state % 3], (unsigned long long)x->live >> 10, (unsigned long long)x->fill >> 10,
				"FOS"[y->state % 3], (unsigned long long)y->live >> 10, (unsigned long long)y->fill >> 10);
	}
}

/* A check of a compaction: on failure, the segments it changed. */
#define SCHECK(c)                                             \
	do {                                                  \
		if (!(c)) {                                   \
			segtab_diff(&t0, &t1);                \
			CHECK(c);                             \
		}                                             \
	} while (0)

#define BLK EMB_SPILL_BLOCK
#define PIECE (256u << 10) /* compaction works through a segment in pieces of this many bytes */

/* One forced compaction (nothing else may change the device meanwhile),
 * checked against the segment table before and after: the most stale sealed
 * segment k is freed and every other sealed one is untouched; k's live
 * records and nothing else are appended, so live bytes and records do not
 * change and the footprint falls by fill_rs(k) less what was appended; a
 * segment the copies fill is sealed only when not one more record fits.
 * rsz: the largest record; uniform: every record has that size (<= a
 * block), so the copies take at most ceil(nlive(k) / records per block)
 * blocks plus one per write (a write per piece, and one more where the open
 * segment ends).  Returns the bytes reclaimed. */
static uint64_t compact_checked(struct store *s, uint32_t rsz, int uniform)
{
	static struct segtab t0, t1;
	segtab_get(s, &t0);
	struct store_spill_stats s0 = sstats(s);
	uint64_t k = most_stale(&t0);
	OK(store_spill_run(s, STORE_SPILL_COMPACT));
	segtab_get(s, &t1);
	struct store_spill_stats s1 = sstats(s);
	SCHECK(s1.spilled == s0.spilled && s1.promoted == s0.promoted); /* compaction only */
	if (k == UINT64_MAX) {
		SCHECK(s1.compacted_segs == s0.compacted_segs && s1.footprint == s0.footprint);
		return 0;
	}
	const struct store_spill_seg *gk = &t0.g[k];
	SCHECK(s1.compacted_segs == s0.compacted_segs + 1);
	SCHECK(t1.g[k].state == EMB_SEG_FREE && t1.g[k].fill == 0 && t1.g[k].live == 0);
	uint64_t copied = 0, live_in = 0, nlive_in = 0;
	uint64_t span = (rsz + BLK - 1) / BLK * BLK;
	for (uint64_t j = 0; j < t0.n; j++) {
		const struct store_spill_seg *a = &t0.g[j], *b = &t1.g[j];
		if (j == k)
			continue;
		if (a->state == EMB_SEG_SEALED) { /* untouched */
			SCHECK(b->state == EMB_SEG_SEALED && b->fill == a->fill && b->live == a->live &&
			      b->nlive == a->nlive);
			continue;
		}
		if (b->state == EMB_SEG_FREE) {
			SCHECK(a->state == EMB_SEG_FREE);
			continue;
		}
		SCHECK(b->fill >= a->fill && b->live >= a->live && b->nlive >= a->nlive);
		copied += b->fill - a->fill;
		live_in += b->live - a->live;
		nlive_in += b->nlive - a->nlive;
		if (b->state == EMB_SEG_SEALED) /* sealed by this compaction: full */
			SCHECK(t1.seg_size - b->fill < span);
	}
	SCHECK(live_in == gk->live && nlive_in == gk->nlive);
	SCHECK(s1.live_bytes == s0.live_bytes && s1.live_versions == s0.live_versions);
	SCHECK(s1.footprint + gk->fill == s0.footprint + copied);
	SCHECK(copied >= gk->live);
	if (uniform) {
		uint64_t per_blk = BLK / rsz;
		uint64_t writes = (gk->fill + PIECE - 1) / PIECE + 1;
		SCHECK(copied <= ((gk->nlive + per_blk - 1) / per_blk + writes) * BLK);
	}
	return gk->fill - copied;
}

/* Forced compactions, checked, while a sealed segment is less than half
 * live (at most max of them).  Returns how many ran. */
static int compact_stale(struct store *s, uint32_t rsz, int uniform, int max, uint64_t *reclaimed,
			 uint64_t *stale)
{
	static struct segtab t;
	int n = 0;
	for (; n < max; n++) {
		segtab_get(s, &t);
		uint64_t k = most_stale(&t);
		if (k == UINT64_MAX || t.g[k].live * 2 >= t.g[k].fill)
			break;
		*stale += t.g[k].fill - t.g[k].live;
		*reclaimed += compact_checked(s, rsz, uniform);
	}
	return n;
}

/* Write rows [0, n) of generation gen, 512 per commit. */
static void write_all(struct store *s, uint32_t id, uint64_t n, uint64_t gen)
{
	static uint8_t data[512][RS];
	struct store_rowop ops[512];
	for (uint64_t r = 0; r < n;) {
		size_t k = 0;
		for (; k < 512 && r < n; k++, r++) {
			fill_rs(data[k], r, gen);
			ops[k] = (struct store_rowop){ r, 0, RS, data[k], 0 };
		}
		OK(store_rows_write(s, id, ops, k, r * RS));
	}
}

/* Every row of [r0, r1) reads back as generation gen, in batches of rows
 * scattered over the range (7919 is prime: a permutation of it). */
static void check_range(struct store *s, uint32_t id, uint64_t r0, uint64_t r1, uint64_t gen)
{
	static uint64_t ids[1024];
	static uint8_t got[1024][RS];
	static uint8_t stored[1024];
	uint8_t want[RS];
	uint64_t n = r1 - r0;
	CHECK(n % 7919 != 0);
	for (uint64_t j = 0; j < n; j += 1024) {
		size_t k = n - j < 1024 ? (size_t)(n - j) : 1024;
		for (size_t i = 0; i < k; i++)
			ids[i] = r0 + (j + i) * 7919 % n;
		OK(t_rows_read(s, id, ids, k, got, stored));
		for (size_t i = 0; i < k; i++) {
			fill_rs(want, ids[i], gen);
			if (!stored[i] || memcmp(got[i], want, RS)) {
				fprintf(stderr, "row %llu differs\n", (unsigned long long)ids[i]);
				test_seed_say(stderr);
				exit(1);
			}
		}
	}
}

static void check_all(struct store *s, uint32_t id, uint64_t n, uint64_t gen)
{
	check_range(s, id, 0, n, gen);
}

/* 150 k rows of 256 bytes (38 MB of rows, 43 MB of slots) in a 64 MiB
 * pool whose row versions may take 40% (~22 MiB). */
static void test_basic(void)
{
	struct store *s = fresh(64 << 20, 64 << 20);
	uint32_t id;
	uint64_t n = 150000;
	OK(store_table_create(s, "t", 0644, 0, 0, RS / 4, EMB_DT_F32, &id));
	write_all(s, id, n, 1);
	struct store_spill_stats st = sstats(s);
	CHECK(st.live_versions > n / 2); /* most rows are on the spill file */
	CHECK(st.pmem_row_bytes <= st.pmem_high);
	check_all(s, id, n, 1);
	uint8_t row[RS], want[RS];
	CHECK(t_row_read(s, id, 4242, row) == 1);
	fill_rs(want, 4242, 1);
	CHECK(!memcmp(row, want, RS));
	CHECK(t_row_read(s, id, n + 5, row) == 0);
	fsck_clean(s);
	printf("  %llu of %llu rows spilled, %llu device reads, footprint %llu KiB\n",
	       (unsigned long long)st.live_versions, (unsigned long long)n,
	       (unsigned long long)sstats(s).reads, (unsigned long long)st.footprint >> 10);

	/* overwrite half: the old records turn stale, compaction reclaims them */
	write_all(s, id, n / 2, 2);
	OK(store_spill_run(s, STORE_SPILL_MOVE | STORE_SPILL_ALL));
	/* forced compactions, most stale segment first, each checked */
	st = sstats(s);
	uint64_t before = st.footprint, reclaimed = 0, stale = 0;
	int nc = compact_stale(s, rec_size(RS), 1, 64, &reclaimed, &stale);
	st = sstats(s);
	printf("  %d compactions: footprint %llu KiB -> %llu KiB (%.2fx live), reclaimed %llu KiB of %llu KiB stale\n",
	       nc, (unsigned long long)before >> 10, (unsigned long long)st.footprint >> 10,
	       (double)st.footprint / (double)st.live_bytes, (unsigned long long)reclaimed >> 10,
	       (unsigned long long)stale >> 10);
	CHECK(nc > 0 && before - st.footprint == reclaimed);
	CHECK(st.footprint <= 2 * st.live_bytes);
	check_all(s, id, n / 2, 2);
	check_range(s, id, n / 2, n, 1);
	fsck_clean(s);

	/* reopen: the pool needs its spill file, and finds everything */
	store_close(s);
	CHECK(store_open(path, &s, err, sizeof(err)) == 0);
	CHECK(store_spill_attach(s, NULL, err, sizeof(err)) == -ENODEV);
	struct store_spill_conf c = { .path = "/nonexistent-dir/x.spill", .manual = 1 };
	CHECK(store_spill_attach(s, &c, err, sizeof(err)) == -ENOENT);
	CHECK(strstr(err, "missing") != NULL);
	attach(s, 0);
	check_all(s, id, n / 2, 2);
	check_range(s, id, n / 2, n, 1);
	fsck_clean(s);

	/* promotion: a spilled row read twice comes back to the pool (first
	 * promote what the reads above queued: rows sharing a heat slot) */
	OK(store_spill_run(s, STORE_SPILL_PROMOTE));
	uint64_t hot[64];
	for (int i = 0; i < 64; i++)
		hot[i] = (uint64_t)i * 997 % n;
	static uint8_t got[64][RS];
	uint64_t reads0 = sstats(s).reads;
	OK(t_rows_read(s, id, hot, 64, got, NULL));
	OK(t_rows_read(s, id, hot, 64, got, NULL));
	CHECK(sstats(s).reads > reads0);
	OK(store_spill_run(s, STORE_SPILL_PROMOTE));
	CHECK(sstats(s).promoted > 0);
	uint64_t reads1 = sstats(s).reads;
	OK(t_rows_read(s, id, hot, 64, got, NULL));
	CHECK(sstats(s).reads == reads1); /* every one came from the pool */
	for (int i = 0; i < 64; i++) {
		fill_rs(want, hot[i], hot[i] < n / 2 ? 2 : 1);
		CHECK(!memcmp(got[i], want, RS));
	}
	fsck_clean(s);
	store_close(s);
}

/* Row bytes of any size: rows of table id, generation gen. */
static void fillv(uint8_t *row, uint32_t len, uint32_t id, uint64_t r, uint64_t gen)
{
	for (uint32_t i = 0; i < len; i++)
		row[i] = (uint8_t)(r * 131 + gen * 7 + id * 29 + i * 3 + (i >> 8));
}

/* Write rows [r0, r1) of table id (rows of len bytes), generation gen. */
static void write_rows(struct store *s, uint32_t id, uint32_t len, uint64_t r0, uint64_t r1, uint64_t gen)
{
	uint8_t *data = malloc((size_t)64 * len);
	struct store_rowop ops[64];
	CHECK(data);
	for (uint64_t r = r0; r < r1;) {
		size_t k = 0;
		for (; k < 64 && r < r1; k++, r++) {
			fillv(data + k * len, len, id, r, gen);
			ops[k] = (struct store_rowop){ r, 0, len, data + k * len, 0 };
		}
		OK(store_rows_write(s, id, ops, k, 0));
	}
	free(data);
}

/* Rows [r0, r1) of table id read back as generation gen. */
static void check_rows(struct store *s, uint32_t id, uint32_t len, uint64_t r0, uint64_t r1, uint64_t gen)
{
	uint8_t *got = malloc(len), *want = malloc(len);
	CHECK(got && want);
	for (uint64_t r = r0; r < r1; r++) {
		int ret = t_row_read(s, id, r, got);
		fillv(want, len, id, r, gen);
		if (ret != 1 || memcmp(got, want, len)) {
			fprintf(stderr, "table %u row %llu: read %d, %s\n", id, (unsigned long long)r, ret,
				ret == 1 ? "wrong bytes" : "not whole");
			exit(1);
		}
	}
	free(got);
	free(want);
}

/* Records on the spill file of a len_a-byte row directly followed by one of
 * a len_b-byte row in the last block the first one takes (by scanning it). */
static uint64_t tail_pairs(uint32_t len_a, uint32_t len_b)
{
	int fd = open(spath, O_RDONLY);
	CHECK(fd >= 0);
	static char buf[1 << 20];
	uint64_t pairs = 0;
	uint32_t rsz_a = rec_size(len_a);
	for (off_t off = EMB_SPILL_HDR;; off += sizeof(buf) - (1 << 16)) {
		ssize_t r = pread(fd, buf, sizeof(buf), off);
		if (r <= (ssize_t)(rsz_a + sizeof(struct emb_srec)))
			break;
		for (ssize_t i = 0; i + (ssize_t)(rsz_a + sizeof(struct emb_srec)) <= r; i += 16) {
			struct emb_srec *h = (struct emb_srec *)(buf + i), *n = (struct emb_srec *)(buf + i + rsz_a);
			pairs += h->magic == EMB_SREC_MAGIC && h->len == len_a && n->magic == EMB_SREC_MAGIC &&
				 n->len == len_b && (i + rsz_a) % EMB_SPILL_BLOCK != 0;
		}
		if (r < (ssize_t)sizeof(buf))
			break;
	}
	close(fd);
	return pairs;
}

/* Two row sizes in one segment.  Compaction packs what it copies, so a short
 * record can sit in the last block of one longer than a block; compacting
 * the segment that holds them again must move both. */
static void test_mixed(void)
{
	struct store *s = fresh(64 << 20, 16 << 20); /* 1 MiB segments */
	const uint32_t la = 5000, lb = RS;            /* records of 5040 and 288 bytes */
	uint32_t a, b, c;
	OK(store_table_create(s, "a", 0644, 0, 0, la / 4, EMB_DT_F32, &a));
	OK(store_table_create(s, "b", 0644, 0, 0, lb / 4, EMB_DT_F32, &b));
	OK(store_table_create(s, "c", 0644, 0, 0, lb / 4, EMB_DT_F32, &c));
	write_rows(s, a, la, 0, 40, 1);
	write_rows(s, b, lb, 0, 3000, 1);
	OK(store_spill_run(s, STORE_SPILL_MOVE | STORE_SPILL_ALL)); /* a's records, then b's */
	write_rows(s, a, la, 0, 20, 2);
	OK(store_spill_run(s, STORE_SPILL_MOVE | STORE_SPILL_ALL));
	compact_checked(s, rec_size(la), 0); /* a 20..39 then b, packed */
	fsck_clean(s);
	uint64_t pairs = tail_pairs(la, lb);
	printf("  mixed: %llu short records in the last block of a long one\n", (unsigned long long)pairs);
	CHECK(pairs > 0);
	/* seal that segment behind other rows, make it the most stale one */
	write_rows(s, c, lb, 0, 4000, 1);
	OK(store_spill_run(s, STORE_SPILL_MOVE | STORE_SPILL_ALL));
	write_rows(s, a, la, 0, 40, 3);
	OK(store_spill_run(s, STORE_SPILL_MOVE | STORE_SPILL_ALL));
	for (int i = 0; i < 4; i++) {
		compact_checked(s, rec_size(la), 0);
		fsck_clean(s);
		check_rows(s, b, lb, 0, 3000, 1);
	}
	/* the freed segments are written again: nothing may still point there */
	write_rows(s, c, lb, 0, 4000, 2);
	OK(store_spill_run(s, STORE_SPILL_MOVE | STORE_SPILL_ALL));
	check_rows(s, a, la, 0, 40, 3);
	check_rows(s, b, lb, 0, 3000, 1);
	check_rows(s, c, lb, 0, 4000, 2);
	fsck_clean(s);
	store_close(s);
}

/* Every record on the device turned stale, and more rows to spill than the
 * free segments hold: the mover compacts as many segments as that takes
 * (most stale first), not one and then ENOSPC. */
static void test_refill(void)
{
	struct store *s = fresh(64 << 20, 16 << 20); /* 15 segments of 1 MiB */
	uint32_t id;
	uint64_t n = 40000;                            /* 11 MiB of records */
	OK(store_table_create(s, "f", 0644, 0, 0, RS / 4, EMB_DT_F32, &id));
	write_all(s, id, n, 1);
	OK(store_spill_run(s, STORE_SPILL_MOVE | STORE_SPILL_ALL));
	struct store_spill_stats st = sstats(s);
	CHECK(st.live_versions == n);
	/* a second copy needs more than the free segments and one compaction give */
	CHECK(st.footprint > (st.segs_free + 1) * st.seg_size);
	write_all(s, id, n, 2);
	CHECK(sstats(s).live_bytes == 0);
	uint64_t c0 = sstats(s).compacted_segs;
	OK(store_spill_run(s, STORE_SPILL_MOVE | STORE_SPILL_ALL));
	st = sstats(s);
	printf("  refill: %llu versions spilled again, %llu segments compacted on the way\n",
	       (unsigned long long)st.live_versions, (unsigned long long)(st.compacted_segs - c0));
	CHECK(st.live_versions == n);
	check_all(s, id, n, 2);
	fsck_clean(s);
	store_close(s);
}

/* Random operations against a shadow copy. */
static void test_random(void)
{
	struct store *s = fresh(64 << 20, 96 << 20);
	uint32_t id;
	uint64_t n = 60000;
	OK(store_table_create(s, "r", 0644, 0, 0, RS / 4, EMB_DT_F32, &id));
	uint8_t *shadow = calloc(n, RS);
	uint8_t *has = calloc(n, 1);
	uint64_t size = 0;
	CHECK(shadow && has);
	srand((unsigned)mix(seed ^ 0x72616e64));
	static uint8_t data[512][RS];
	struct store_rowop ops[512];
	for (int step = 0; step < 400; step++) {
		int what = rand() % 20;
		if (what == 0) { /* truncate */
			uint64_t to = (uint64_t)rand() % (n * RS);
			OK(store_table_truncate(s, id, to));
			for (uint64_t r = to / RS; r < n; r++) {
				if (r == to / RS && to % RS) {
					memset(shadow + r * RS + to % RS, 0, RS - to % RS);
					continue;
				}
				has[r] = 0;
				memset(shadow + r * RS, 0, RS);
			}
			size = to;
			continue;
		}
		size_t k = 1 + (size_t)rand() % 512;
		for (size_t i = 0; i < k; i++) {
			uint64_t r = (uint64_t)rand() % n;
			int kind = rand() % 10;
			if (kind == 0) { /* punch */
				ops[i] = (struct store_rowop){ r, 0, 0, NULL, 0 };
				has[r] = 0;
				memset(shadow + r * RS, 0, RS);
			} else if (kind < 3) { /* partial write */
				uint32_t off = (uint32_t)rand() % RS, len = 1 + (uint32_t)rand() % (RS - off);
				for (uint32_t b = 0; b < len; b++)
					data[i][b] = (uint8_t)rand();
				ops[i] = (struct store_rowop){ r, off, len, data[i], 0 };
				memcpy(shadow + r * RS + off, data[i], len);
				has[r] = 1;
			} else {
				fill_rs(data[i], r, (uint64_t)step);
				ops[i] = (struct store_rowop){ r, 0, RS, data[i], 0 };
				memcpy(shadow + r * RS, data[i], RS);
				has[r] = 1;
			}
			/* a later op on the same row in this group wins, as in the shadow */
		}
		/* apply in order so that the shadow's last-wins matches */
		for (size_t i = 0; i < k; i++)
			OK(store_rows_write(s, id, &ops[i], 1, ops[i].data ? (ops[i].row + 1) * RS : 0));
		if (step % 25 == 24)
			OK(store_spill_run(s, STORE_SPILL_MOVE | STORE_SPILL_ALL | STORE_SPILL_PROMOTE));
		if (step % 50 == 49) {
			compact_checked(s, rec_size(RS), 1);
			struct store_spill_stats x = sstats(s);
			printf("  step %d: footprint %llu live %llu segs %llu/%llu/%llu compacted %llu\n", step,
			       (unsigned long long)x.footprint, (unsigned long long)x.live_bytes,
			       (unsigned long long)x.segs_free, (unsigned long long)x.segs_open,
			       (unsigned long long)x.segs_sealed, (unsigned long long)x.compacted_segs);
		}
		if (step % 100 == 0) {
			for (uint64_t r = 0; r < n; r += 1 + (uint64_t)rand() % 16) {
				uint8_t got[RS];
				int st = t_row_read(s, id, r, got);
				CHECK(st == has[r]);
				CHECK(!memcmp(got, shadow + r * RS, RS));
			}
		}
	}
	(void)size;
	fsck_clean(s);
	uint64_t parts = sstats(s).sweep_parts;
	store_close(s);
	s = open_pool();
	for (uint64_t r = 0; r < n; r++) {
		uint8_t got[RS];
		CHECK(t_row_read(s, id, r, got) == has[r]);
		CHECK(!memcmp(got, shadow + r * RS, RS));
	}
	fsck_clean(s);
	printf("  %llu versions spilled, %llu compacted segments, %llu promoted, %llu sweep parts\n",
	       (unsigned long long)sstats(s).live_versions, (unsigned long long)sstats(s).compacted_segs,
	       (unsigned long long)sstats(s).promoted, (unsigned long long)parts);
	CHECK(!sweep_part || stubs_only || parts > 0);
	store_close(s);
	free(shadow);
	free(has);
}

/* A truncate that ends inside a punched row leaves it a hole, whether the
 * punch is a tombstone over a run's version or over a snapshot's: the row
 * keeps its head and gets zeros after the end only if it exists (a trim
 * once read the tombstone's index entry as a row and materialised zeros). */
static void test_trim_tomb(void)
{
	for (int runs = 0; runs < 2; runs++) {
		stubs_only = !runs;
		struct store *s = fresh(64 << 20, 64 << 20);
		uint32_t id;
		uint64_t n = 2000, cut = 1234;
		OK(store_table_create(s, "t", 0644, 0, 0, RS / 4, EMB_DT_F32, &id));
		write_all(s, id, n, 1);
		struct store_snap sn;
		if (runs)
			OK(store_spill_run(s, STORE_SPILL_MOVE | STORE_SPILL_ALL));
		else
			OK(store_snap_create(s, "held", 1, &sn));
		struct store_rowop punch = { cut, 0, 0, NULL, 0 };
		OK(store_rows_write(s, id, &punch, 1, 0));
		CHECK(t_row_exists(s, id, cut) == 0);
		OK(store_table_truncate(s, id, cut * RS + RS / 3)); /* inside the punched row */
		CHECK(t_row_exists(s, id, cut) == 0);
		OK(store_table_truncate(s, id, n * RS)); /* and out again */
		for (int pass = 0; pass < 2; pass++) {
			uint8_t got[RS], want[RS];
			CHECK(t_row_exists(s, id, cut) == 0);
			CHECK(t_row_read(s, id, cut - 1, got) == 1);
			fill_rs(want, cut - 1, 1);
			CHECK(!memcmp(got, want, RS));
			CHECK(t_row_exists(s, id, cut + 1) == 0);
			fsck_clean(s);
			store_close(s);
			s = open_pool();
		}
		store_close(s);
	}
	stubs_only = 1;
}

/* Snapshot versions spill; rmdir frees their space through compaction. */
static void test_snap(void)
{
	struct store *s = fresh(64 << 20, 64 << 20);
	uint32_t id;
	uint64_t n = 20000;
	OK(store_table_create(s, "s", 0644, 0, 0, RS / 4, EMB_DT_F32, &id));
	write_all(s, id, n, 1);
	struct store_snap sn;
	OK(store_snap_create(s, "one", 1, &sn));
	write_all(s, id, n, 2);
	OK(store_spill_run(s, STORE_SPILL_MOVE | STORE_SPILL_ALL));
	struct store_spill_stats st = sstats(s);
	printf("  snapshot: %llu versions spilled of %llu\n", (unsigned long long)st.live_versions, (unsigned long long)2 * n);
	CHECK(st.live_versions == 2 * n); /* both generations are on the device */
	uint8_t got[RS], want[RS];
	for (uint64_t r = 0; r < n; r++) {
		CHECK(t_snap_row_read(s, sn.idx, id, r, got) == 1);
		fill_rs(want, r, 1);
		CHECK(!memcmp(got, want, RS));
	}
	check_all(s, id, n, 2);
	fsck_clean(s);
	uint64_t live0 = st.live_bytes, foot0 = st.footprint;
	OK(store_snap_drop(s, "one"));
	st = sstats(s);
	CHECK(st.live_bytes == live0 - n * rec_size(RS)); /* the snapshot's records turned stale */
	uint64_t reclaimed = 0, stale = 0;
	int nc = compact_stale(s, rec_size(RS), 1, 64, &reclaimed, &stale);
	st = sstats(s);
	printf("  rmdir, %d compactions: footprint %llu KiB -> %llu KiB, reclaimed %llu KiB of %llu KiB stale\n", nc,
	       (unsigned long long)foot0 >> 10, (unsigned long long)st.footprint >> 10,
	       (unsigned long long)reclaimed >> 10, (unsigned long long)stale >> 10);
	CHECK(nc > 0 && foot0 - st.footprint == reclaimed);
	CHECK(st.footprint <= 2 * st.live_bytes);
	check_all(s, id, n, 2);
	fsck_clean(s);
	store_close(s);
}

/* The records of rows in the spill file, by scanning it (as a tool would). */
static long find_record(uint64_t row, uint32_t table)
{
	int fd = open(spath, O_RDONLY);
	CHECK(fd >= 0);
	static char blk[1 << 16];
	long found = -1;
	for (off_t off = EMB_SPILL_HDR; found < 0; off += sizeof(blk)) {
		ssize_t r = pread(fd, blk, sizeof(blk), off);
		if (r <= 0)
			break;
		for (ssize_t i = 0; i + (ssize_t)sizeof(struct emb_srec) <= r; i += 16) {
			struct emb_srec *h = (struct emb_srec *)(blk + i);
			if (h->magic == EMB_SREC_MAGIC && h->row == row && h->table == table && h->len == RS) {
				found = (long)(off + i);
				break;
			}
		}
	}
	close(fd);
	return found;
}

static void flip(long at)
{
	int fd = open(spath, O_RDWR);
	uint8_t b;
	CHECK(pread(fd, &b, 1, at) == 1);
	b ^= 0x20;
	CHECK(pwrite(fd, &b, 1, at) == 1);
	fsync(fd);
	close(fd);
}

/* A damaged byte: EIO on exactly the rows it is in, counted. */
static void test_corrupt(void)
{
	struct store *s = fresh(64 << 20, 64 << 20);
	uint32_t id;
	uint64_t n = 4000;
	OK(store_table_create(s, "c", 0644, 0, 0, RS / 4, EMB_DT_F32, &id));
	write_all(s, id, n, 1);
	OK(store_spill_run(s, STORE_SPILL_MOVE | STORE_SPILL_ALL));
	store_close(s); /* nothing of the device stays in a cache */
	long a = find_record(1234, id), b = find_record(77, id);
	CHECK(a > 0 && b > 0);
	flip(a + (long)sizeof(struct emb_srec) + 100); /* row 1234's bytes */
	flip(b + 9);                                   /* row 77's header */
	s = open_pool();
	uint8_t got[RS], want[RS];
	for (uint64_t r = 0; r < n; r++) {
		int ret = t_row_read(s, id, r, got);
		if (r == 1234 || r == 77) {
			CHECK(ret == -EIO);
			continue;
		}
		CHECK(ret == 1);
		fill_rs(want, r, 1);
		CHECK(!memcmp(got, want, RS));
	}
	uint64_t ids[3] = { 5, 1234, 6 };
	static uint8_t three[3][RS];
	CHECK(t_rows_read(s, id, ids, 3, three, NULL) == -EIO);
	CHECK(sstats(s).csum_errors >= 3);
	/* compaction copies a live record whose bytes are damaged as it is: its
	 * row still gives EIO and no stub points into a freed segment (row 77's
	 * header is damaged: compaction cannot know that record, so heal it) */
	fill_rs(want, 77, 9);
	struct store_rowop op = { 77, 0, RS, want, 0 };
	OK(store_rows_write(s, id, &op, 1, 0));
	/* every other row rewritten and spilled until the segment holding row
	 * 1234's damaged record is mostly stale and compacted: where the first
	 * spill put it depends on the index's order (the pool's hash seed), and
	 * the open segment takes the new records too */
	static uint8_t data[512][RS];
	struct store_rowop ops[512];
	static struct segtab t;
	segtab_get(s, &t);
	uint64_t k0 = ((uint64_t)a - EMB_SPILL_HDR) / t.seg_size;
	int nc = 0, done = 0;
	for (uint64_t gen = 2; gen < 8 && !done; gen++) {
		for (uint64_t r = 0; r < n;) {
			size_t k = 0;
			for (; k < 512 && r < n; r++) {
				if (r == 1234 || r == 77)
					continue;
				fill_rs(data[k], r, gen);
				ops[k] = (struct store_rowop){ r, 0, RS, data[k], 0 };
				k++;
			}
			OK(store_rows_write(s, id, ops, k, 0));
		}
		OK(store_spill_run(s, STORE_SPILL_MOVE | STORE_SPILL_ALL));
		segtab_get(s, &t);
		int due = t.g[k0].state == EMB_SEG_SEALED && t.g[k0].live * 2 < t.g[k0].fill;
		uint64_t reclaimed = 0, stale = 0;
		nc += compact_stale(s, rec_size(RS), 1, 16, &reclaimed, &stale);
		segtab_get(s, &t);
		done = due && !(t.g[k0].state == EMB_SEG_SEALED && t.g[k0].live * 2 < t.g[k0].fill);
	}
	printf("  %d compactions with a damaged record in the way (segment %llu)\n", nc, (unsigned long long)k0);
	CHECK(done);
	CHECK(t_row_read(s, id, 1234, got) == -EIO);
	struct store_fsck f;
	OK(store_fsck(s, &f));
	CHECK(f.bad_stubs == 1 && f.seg_live_off == 0 && f.bad_versions == 0 && f.leaked_slots == 0);
	/* rewriting the row heals it */
	fill_rs(want, 1234, 9);
	op = (struct store_rowop){ 1234, 0, RS, want, 0 };
	OK(store_rows_write(s, id, &op, 1, 0));
	CHECK(t_row_read(s, id, 1234, got) == 1 && !memcmp(got, want, RS));
	/* the freed segments are written again */
	write_all(s, id, n, 3);
	OK(store_spill_run(s, STORE_SPILL_MOVE | STORE_SPILL_ALL));
	check_all(s, id, n, 3);
	fsck_clean(s);
	store_close(s);
}

/* A full spill file: ENOSPC, and every row written before reads back. */
static void test_full(void)
{
	struct store *s = fresh(64 << 20, 6 << 20); /* 5 segments of 1 MiB */
	uint32_t id;
	OK(store_table_create(s, "f", 0644, 0, 0, RS / 4, EMB_DT_F32, &id));
	static uint8_t data[512][RS];
	struct store_rowop ops[512];
	uint64_t r = 0;
	int ret = 0;
	while (!ret && r < 400000) {
		for (int k = 0; k < 512; k++) {
			fill_rs(data[k], r + (uint64_t)k, 1);
			ops[k] = (struct store_rowop){ r + (uint64_t)k, 0, RS, data[k], 0 };
		}
		ret = store_rows_write(s, id, ops, 512, 0);
		if (!ret)
			r += 512;
	}
	CHECK(ret == -ENOSPC);
	CHECK(sstats(s).full > 0);
	printf("  spill file full after %llu rows\n", (unsigned long long)r);
	check_all(s, id, r, 1);
	fsck_clean(s);
	store_close(s);
	s = open_pool();
	check_all(s, id, r, 1);
	store_close(s);
}

/* The child writes rounds start, start + 1, ... over rows [0, N) (each
 * commit durable), spilling and compacting in between, and reports each
 * finished round.  With runs, a snapshot after each round and the one of two
 * rounds before dropped: the children go on from the generation the killed
 * one finished, so that at most three snapshots are ever live (one a kill
 * left between its create and the report). */
#define CN 30000u
static void crash_child(int fd, uint64_t start)
{
	struct store *s = open_pool();
	uint32_t id;
	if (store_table_lookup(s, "k", &id))
		_exit(2);
	static uint8_t data[512][RS];
	struct store_rowop ops[512];
	for (uint64_t gen = start;; gen++) {
		for (uint64_t r = 0; r < CN;) {
			size_t k = 0;
			for (; k < 512 && r < CN; k++, r++) {
				fill_rs(data[k], r, gen);
				ops[k] = (struct store_rowop){ r, 0, RS, data[k], 0 };
			}
			if (store_rows_write(s, id, ops, k, 0))
				_exit(3);
			/* never ENOSPC: 8 MiB of live records on a 64 MiB device,
			 * 16-24 MiB more that the snapshots hold, the merge
			 * reserve; the rest stale, which merges and compaction
			 * give back */
			int sr = r % 4096 < 512 ? store_spill_run(s, STORE_SPILL_MOVE | STORE_SPILL_ALL |
									     STORE_SPILL_COMPACT) : 0;
			if (sr < 0) {
				struct store_spill_stats x;
				store_spill_stats_get(s, &x);
				fprintf(stderr,
					"crash child: store_spill_run: %s (segments %llu, %llu free; runs %llu, "
					"%llu levels, %llu records, %llu bytes)\n",
					strerror(-sr), (unsigned long long)x.segs, (unsigned long long)x.segs_free,
					(unsigned long long)x.runs, (unsigned long long)x.run_levels,
					(unsigned long long)x.run_rows, (unsigned long long)x.run_bytes);
				_exit(4);
			}
		}
		/* with runs: snapshots make rows two-version chains, which the
		 * mover evicts whole (EMB_JR_CHAIN records at a crash) */
		if (!stubs_only) {
			char name[32];
			struct store_snap sn;
			snprintf(name, sizeof(name), "k%llu", (unsigned long long)gen);
			int cr = store_snap_create(s, name, 1, &sn);
			if (cr && cr != -EEXIST) { /* the killed child made it */
				fprintf(stderr, "snapshot %s: %s\n", name, strerror(-cr));
				_exit(6);
			}
			snprintf(name, sizeof(name), "k%llu", (unsigned long long)gen - 2);
			int dr = gen >= 4 ? store_snap_drop(s, name) : 0;
			if (dr && dr != -ENOENT)
				_exit(7);
		}
		uint8_t g = (uint8_t)gen;
		if (write(fd, &g, 1) != 1)
			_exit(5);
	}
}

static void test_crash(void)
{
	struct store *s = fresh(64 << 20, 64 << 20);
	uint32_t id;
	OK(store_table_create(s, "k", 0644, 0, 0, RS / 4, EMB_DT_F32, &id));
	write_all(s, id, CN, 1);
	store_close(s);
	srand((unsigned)mix(seed ^ 0x6b696c6c)); /* the kill points */
	uint64_t start = 2;
	for (int round = 0; round < 6; round++) {
		int pfd[2];
		CHECK(pipe(pfd) == 0);
		pid_t pid = fork();
		CHECK(pid >= 0);
		if (pid == 0) {
			close(pfd[0]);
			crash_child(pfd[1], start);
		}
		close(pfd[1]);
		uint8_t last = 0;
		if (read(pfd[0], &last, 1) != 1) { /* a whole round is durable */
			int cst = 0;
			waitpid(pid, &cst, 0);
			fprintf(stderr, "crash child ended before a round: status %d\n",
				WIFEXITED(cst) ? WEXITSTATUS(cst) : -WTERMSIG(cst));
			test_seed_say(stderr);
			exit(1);
		}
		struct timespec ts = { 0, (long)(rand() % 400) * 1000000L };
		nanosleep(&ts, NULL); /* a random point, on purpose */
		kill(pid, SIGKILL);
		uint8_t g;
		while (read(pfd[0], &g, 1) == 1)
			last = g;
		close(pfd[0]);
		int st;
		waitpid(pid, &st, 0);
		CHECK(WIFSIGNALED(st));
		s = open_pool(); /* recovery, then the live counts are recounted */
		fsck_clean(s);
		/* every row is whole: a generation >= the last finished round */
		uint8_t got[RS], want[RS];
		for (uint64_t r = 0; r < CN; r++) {
			CHECK(t_row_read(s, id, r, got) == 1);
			uint8_t gen = (uint8_t)((got[0] - (uint8_t)(r * 131)) * 183); /* 7 * 183 = 1 mod 256 */
			fill_rs(want, r, gen);
			CHECK(!memcmp(got, want, RS));
			CHECK((uint8_t)(gen - last) <= 1);
		}
		store_close(s);
		start += (uint8_t)(last - (uint8_t)start) + 1; /* after the last finished one */
	}
}

/* The mover thread spilling, promoting and compacting while a writer
 * rewrites rows and two readers check every row they read is whole. */
#define TN 120000u
static struct store *ts;
static uint32_t tid;
static _Atomic int tstop;
static _Atomic uint64_t tbad, treads;

static int whole(const uint8_t *got, uint64_t r)
{
	uint8_t want[RS];
	uint8_t gen = (uint8_t)((got[0] - (uint8_t)(r * 131)) * 183);
	fill_rs(want, r, gen);
	return !memcmp(got, want, RS);
}

static void *t_reader(void *arg)
{
	unsigned rseed = (unsigned)(uintptr_t)arg;
	static __thread uint8_t got[256][RS];
	uint64_t ids[256];
	while (!tstop) {
		for (int i = 0; i < 256; i++) /* skewed: some rows turn hot */
			ids[i] = rand_r(&rseed) % 4 ? (uint64_t)rand_r(&rseed) % TN : (uint64_t)rand_r(&rseed) % 512;
		if (t_rows_read(ts, tid, ids, 256, got, NULL)) {
			tbad++;
			continue;
		}
		for (int i = 0; i < 256; i++)
			if (!whole(got[i], ids[i]))
				tbad++;
		treads += 256;
	}
	return NULL;
}

static void test_threads(void)
{
	struct store *s = fresh(64 << 20, 128 << 20);
	OK(store_table_create(s, "m", 0644, 0, 0, RS / 4, EMB_DT_F32, &tid));
	write_all(s, tid, TN, 1);
	ts = s;
	OK(store_spill_start(s));
	pthread_t rd[2];
	for (int i = 0; i < 2; i++)
		CHECK(pthread_create(&rd[i], NULL, t_reader, (void *)(uintptr_t)mix(seed + 1 + (unsigned)i)) == 0);
	static uint8_t data[512][RS];
	struct store_rowop ops[512];
	unsigned wseed = (unsigned)mix(seed + 3);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (uint64_t gen = 2;; gen++) {
		for (int k = 0; k < 512; k++) {
			uint64_t r = (uint64_t)rand_r(&wseed) % TN;
			fill_rs(data[k], r, gen);
			ops[k] = (struct store_rowop){ r, 0, RS, data[k], 0 };
		}
		int wr = store_rows_write(s, tid, ops, 512, 0);
		if (wr) {
			struct store_spill_stats x = sstats(s);
			fprintf(stderr, "write: %s; runs %llu rows %llu evicted %llu merges %llu segs free %llu/%llu, "
				"pmem rows %llu of %llu, waits %llu full %llu\n", strerror(-wr),
				(unsigned long long)x.runs, (unsigned long long)x.run_rows,
				(unsigned long long)x.run_evicted, (unsigned long long)x.merges,
				(unsigned long long)x.segs_free, (unsigned long long)x.segs,
				(unsigned long long)x.pmem_row_bytes, (unsigned long long)x.pmem_high,
				(unsigned long long)x.waits, (unsigned long long)x.full);
			struct store_stats ps;
			store_stats_get(s, &ps);
			fprintf(stderr, "pool: used %llu free %llu of %llu; run headers %llu B, dead runs %llu\n",
				(unsigned long long)ps.used_bytes, (unsigned long long)ps.free_bytes,
				(unsigned long long)ps.pool_size, (unsigned long long)x.run_pool_bytes,
				(unsigned long long)x.runs_dead);
		}
		OK(wr);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		if (t1.tv_sec - t0.tv_sec >= 4)
			break;
	}
	tstop = 1;
	for (int i = 0; i < 2; i++)
		pthread_join(rd[i], NULL);
	struct store_spill_stats st = sstats(s);
	printf("  %llu rows read by 2 readers, %llu moved, %llu evicted to runs, %llu promoted, %llu segments compacted\n",
	       (unsigned long long)treads, (unsigned long long)st.spilled, (unsigned long long)st.run_evicted,
	       (unsigned long long)st.promoted,
	       (unsigned long long)st.compacted_segs);
	CHECK(tbad == 0);
	CHECK(st.spilled + st.run_evicted > 0);
	store_close(s);
	s = open_pool();
	fsck_clean(s);
	store_close(s);
}

/* store_spill_run from two threads at once while a writer rewrites rows
 * (in manual mode the writer's waits run mover rounds too): rounds take
 * turns, so no compaction reads a segment another one is freeing. */
#define RN 40000u
static _Atomic int rstop;
static _Atomic int rerr;

static void *r_runner(void *arg)
{
	struct store *s = arg;
	while (!rstop) {
		int r = store_spill_run(s, STORE_SPILL_MOVE | STORE_SPILL_ALL | STORE_SPILL_COMPACT);
		if (r < 0 && r != -ENOSPC)
			rerr = r;
	}
	return NULL;
}

static void test_rounds(void)
{
	struct store *s = fresh(64 << 20, 64 << 20);
	uint32_t id;
	OK(store_table_create(s, "q", 0644, 0, 0, RS / 4, EMB_DT_F32, &id));
	write_all(s, id, RN, 1);
	uint8_t *gen = malloc(RN);
	CHECK(gen);
	memset(gen, 1, RN);
	pthread_t th[2];
	for (int i = 0; i < 2; i++)
		CHECK(pthread_create(&th[i], NULL, r_runner, s) == 0);
	static uint8_t data[512][RS];
	struct store_rowop ops[512];
	unsigned wseed = (unsigned)mix(seed + 5);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (uint64_t g = 2;; g++) {
		for (int k = 0; k < 512; k++) {
			uint64_t r = (uint64_t)rand_r(&wseed) % RN;
			fill_rs(data[k], r, g);
			ops[k] = (struct store_rowop){ r, 0, RS, data[k], 0 };
			gen[r] = (uint8_t)g;
		}
		OK(store_rows_write(s, id, ops, 512, 0));
		clock_gettime(CLOCK_MONOTONIC, &t1);
		if (t1.tv_sec - t0.tv_sec >= 3)
			break;
	}
	rstop = 1;
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	CHECK(rerr == 0);
	struct store_spill_stats st = sstats(s);
	printf("  2 runners: %llu moved, %llu segments compacted\n", (unsigned long long)st.spilled,
	       (unsigned long long)st.compacted_segs);
	CHECK(st.compacted_segs > 0);
	uint8_t got[RS], want[RS];
	for (uint64_t r = 0; r < RN; r++) {
		CHECK(t_row_read(s, id, r, got) == 1);
		fill_rs(want, r, gen[r]);
		CHECK(!memcmp(got, want, RS));
	}
	fsck_clean(s);
	store_close(s);
	free(gen);
}

static pid_t main_pid;

/* The pool and spill file go when the test ends, passed or failed (not when
 * a crash child exits). */
static void cleanup(void)
{
	if (getpid() == main_pid) {
		unlink(path);
		unlink(spath);
	}
}

/* Every row of [r0, r1) of snapshot idx (or live: -1) is generation
 * gen(r), or a hole where gen(r) is 0. */
/* Rows ids[0..k) (k <= 1024) of view idx read in one call: each is
 * generation gen(row), or a hole where gen says 0. */
static void check_ids(struct store *s, int64_t idx, uint32_t id, const uint64_t *ids, size_t k,
		       uint64_t (*gen)(uint64_t))
{
	static uint8_t got[1024][RS];
	static uint8_t stored[1024];
	uint8_t want[RS];
	OK(t_rows_read_at(s, idx, id, ids, k, got, stored));
	for (size_t i = 0; i < k; i++) {
		uint64_t g = gen(ids[i]);
		memset(want, 0, RS);
		if (g)
			fill_rs(want, ids[i], g);
		if (stored[i] != (g != 0) || memcmp(got[i], want, RS)) {
			fprintf(stderr, "view %lld row %llu: stored %d, want generation %llu\n", (long long)idx,
				(unsigned long long)ids[i], stored[i], (unsigned long long)g);
			test_seed_say(stderr);
			exit(1);
		}
	}
}

static void check_view(struct store *s, int64_t idx, uint32_t id, uint64_t r0, uint64_t r1,
		       uint64_t (*gen)(uint64_t))
{
	static uint64_t ids[1024];
	for (uint64_t r = r0; r < r1;) {
		size_t k = 0;
		for (; k < 1024 && r < r1; k++, r++)
			ids[k] = r;
		check_ids(s, idx, id, ids, k, gen);
	}
}

#define RUNS_N 200000u
static uint64_t g_one(uint64_t r)
{
	(void)r;
	return 1;
}

static uint64_t g_two(uint64_t r)
{
	return r < RUNS_N / 2 ? 2 : 1;
}

static uint64_t g_live(uint64_t r)
{
	if (r % 97 == 5)
		return 0; /* punched */
	return r < RUNS_N / 4 ? 3 : g_two(r);
}

/* after rows [RUNS_N - 1000, RUNS_N) were written again */
static uint64_t g_live2(uint64_t r)
{
	return r >= RUNS_N - 1000 ? 1 : g_live(r);
}

static uint64_t g_trunc(uint64_t r)
{
	return r < RUNS_N / 3 ? g_live(r) : 0;
}

/* Write [r0, r1) as gen, then evict everything the mover can. */
static void write_evict(struct store *s, uint32_t id, uint64_t r0, uint64_t r1, uint64_t gen)
{
	static uint8_t data[512][RS];
	struct store_rowop ops[512];
	for (uint64_t r = r0; r < r1;) {
		size_t k = 0;
		for (; k < 512 && r < r1; k++, r++) {
			fill_rs(data[k], r, gen);
			ops[k] = (struct store_rowop){ r, 0, RS, data[k], 0 };
		}
		OK(store_rows_write(s, id, ops, k, r * RS));
	}
	int ret = store_spill_run(s, STORE_SPILL_MOVE | STORE_SPILL_ALL);
	if (ret < 0)
		fprintf(stderr, "store_spill_run: %s (rows %llu..%llu; free segs %llu, runs %llu, dead %llu, sweeping %llu)\n",
			strerror(-ret), (unsigned long long)r0, (unsigned long long)r1,
			(unsigned long long)sstats(s).segs_free, (unsigned long long)sstats(s).runs,
			(unsigned long long)sstats(s).runs_dead, (unsigned long long)sstats(s).sweeping);
	CHECK(ret >= 0);
}

/* Sorted runs: rows leave the pool's index for runs of a few pool bytes a
 * row; snapshots stay exact through evictions, tombstones, merges,
 * truncation and reopening; a damaged block is EIO for its rows alone; a
 * deleted table gives its segments back. */
static void test_runs(void)
{
	stubs_only = 0;
	struct store *s = fresh(64 << 20, 256 << 20);
	uint32_t id;
	OK(store_table_create(s, "runs", 0644, 0, 0, RS / 4, EMB_DT_F32, &id));
	uint64_t free0 = sstats(s).segs_free;
	/* 200 k rows (51 MB of rows, 2.6x what row versions may take) in
	 * pieces, in row order: the mover makes runs of disjoint rows, which
	 * it moves down the levels without a merge (the rewrites below merge) */
	for (uint64_t r = 0; r < RUNS_N; r += RUNS_N / 8)
		write_evict(s, id, r, r + RUNS_N / 8, 1);
	struct store_spill_stats st = sstats(s);
	printf("  %llu rows: %llu runs (%llu levels), %llu rows in runs, %llu merges, %llu moves, pool %.4f B and device meta %.2f B per run row\n",
	       (unsigned long long)RUNS_N, (unsigned long long)st.runs, (unsigned long long)st.run_levels,
	       (unsigned long long)st.run_rows, (unsigned long long)st.merges, (unsigned long long)st.merge_moves,
	       st.run_rows ? (double)st.run_pool_bytes / (double)st.run_rows : 0.0,
	       st.run_rows ? (double)st.run_meta_bytes / (double)st.run_rows : 0.0);
	CHECK(st.run_rows >= RUNS_N * 9 / 10 && st.merges == 0 && st.merge_moves > 0);
	CHECK(st.run_pool_bytes * 100 < st.run_rows && st.run_meta_bytes < 3 * st.run_rows);
	CHECK(st.runs < 3 * st.run_levels + 1);
	check_view(s, -1, id, 0, RUNS_N, g_one);
	fsck_clean(s);
	struct store_snap s1, s2;
	OK(store_snap_create(s, "one", 1, &s1));
	write_evict(s, id, 0, RUNS_N / 2, 2);
	OK(store_snap_create(s, "two", 1, &s2));
	write_evict(s, id, 0, RUNS_N / 4, 3);
	struct store_rowop op;
	for (uint64_t r = 5; r < RUNS_N; r += 97) { /* punch rows that only runs hold */
		op = (struct store_rowop){ r, 0, 0, NULL, 0 };
		OK(store_rows_write(s, id, &op, 1, 0));
	}
	for (int i = 0; i < 8; i++)
		CHECK(store_spill_run(s, STORE_SPILL_MOVE | STORE_SPILL_ALL) >= 0);
	if (sweep_part) { /* runs_sweep: the merges of the whole list went a range at a time */
		int rounds = 0, mid = 0;
		for (; !sstats(s).sweeping && rounds < 8; rounds++)
			CHECK(store_spill_run(s, STORE_SPILL_MOVE | STORE_SPILL_ALL) >= 0);
		if (sstats(s).sweeping) { /* halfway: parts above the runs not yet let go */
			check_view(s, s1.idx, id, 0, RUNS_N, g_one);
			check_view(s, s2.idx, id, 0, RUNS_N, g_two);
			check_view(s, -1, id, 0, RUNS_N, g_live);
			mid = 1;
		}
		for (; sstats(s).sweeping && rounds < 1000; rounds++)
			CHECK(store_spill_run(s, STORE_SPILL_MOVE | STORE_SPILL_ALL) >= 0);
		st = sstats(s);
		CHECK(!st.sweeping);
		printf("  sweeps: %llu parts, %llu runs, %d rounds to the end, views checked halfway: %d\n",
		       (unsigned long long)st.sweep_parts, (unsigned long long)st.runs, rounds, mid);
		CHECK(mid);
		CHECK(st.sweep_parts >= 4);
	}
	check_view(s, s1.idx, id, 0, RUNS_N, g_one);
	check_view(s, s2.idx, id, 0, RUNS_N, g_two);
	check_view(s, -1, id, 0, RUNS_N, g_live);
	fsck_clean(s);
	/* dropping a snapshot: later merges drop what it alone held */
	OK(store_snap_drop(s, "one"));
	write_evict(s, id, RUNS_N - 1000, RUNS_N, 1);
	check_view(s, s2.idx, id, 0, RUNS_N, g_two);
	check_view(s, -1, id, 0, RUNS_N, g_live2);
	/* truncation: rows past the end go for the live view, not for "two" */
	OK(store_table_truncate(s, id, (uint64_t)(RUNS_N / 3) * RS));
	OK(store_table_truncate(s, id, (uint64_t)RUNS_N * RS));
	check_view(s, -1, id, 0, RUNS_N, g_trunc);
	check_view(s, s2.idx, id, 0, RUNS_N, g_two);
	fsck_clean(s);
	store_close(s);
	s = open_pool();
	check_view(s, -1, id, 0, RUNS_N, g_trunc);
	check_view(s, s2.idx, id, 0, RUNS_N, g_two);
	fsck_clean(s);

	/* a flipped byte in a block: its rows fail with EIO, counted; the
	 * rows of every other block read back */
	OK(store_snap_drop(s, "two"));
	for (int i = 0; i < 8; i++)
		CHECK(store_spill_run(s, STORE_SPILL_MOVE | STORE_SPILL_ALL) >= 0);
	store_close(s);
	/* every copy of row brow's record (live block, and blocks of merged
	 * runs not yet written over) gets a flipped byte */
	uint64_t brow = 30001;
	int fd = open(spath, O_RDWR);
	CHECK(fd >= 0);
	static char blk[4096];
	int flips = 0;
	for (off_t off = EMB_SPILL_HDR; pread(fd, blk, sizeof(blk), off) == (ssize_t)sizeof(blk); off += sizeof(blk)) {
		struct emb_rblk *h = (struct emb_rblk *)blk;
		if (h->magic != EMB_RBLK_MAGIC)
			continue;
		for (uint32_t i = 0; i < h->nrec && i < 15; i++) {
			uint64_t row;
			memcpy(&row, blk + sizeof(*h) + i * (16 + RS), 8);
			if (row == brow) {
				uint8_t b = (uint8_t)(blk[sizeof(*h) + i * (16 + RS) + 16 + 7] ^ 0x20);
				CHECK(pwrite(fd, &b, 1, off + (off_t)(sizeof(*h) + i * (16 + RS) + 16 + 7)) == 1);
				flips++;
			}
		}
	}
	fsync(fd);
	close(fd);
	CHECK(flips > 0);
	s = open_pool();
	uint64_t e0 = sstats(s).csum_errors;
	uint64_t eio = 0;
	for (uint64_t r = 0; r < RUNS_N / 3; r++) {
		uint8_t got[RS], want[RS];
		int ret = t_row_read(s, id, r, got);
		if (ret == -EIO) {
			eio++;
			CHECK(r + 16 > brow && r < brow + 16); /* brow's block: 15 rows */
			continue;
		}
		uint64_t g = g_trunc(r);
		memset(want, 0, RS);
		if (g)
			fill_rs(want, r, g);
		CHECK(ret == (g != 0) && !memcmp(got, want, RS));
	}
	printf("  a flipped byte: %llu rows EIO (one block), %llu checksum errors counted\n",
	       (unsigned long long)eio, (unsigned long long)(sstats(s).csum_errors - e0));
	CHECK(eio > 0 && sstats(s).csum_errors > e0 && t_row_read(s, id, brow, blk) == -EIO);
	/* the table goes: so do its runs, and their segments come back */
	OK(store_table_unlink(s, "runs"));
	OK(store_table_release(s, id));
	st = sstats(s);
	printf("  table deleted: %llu runs, %llu of %llu segments free (%llu before)\n", (unsigned long long)st.runs,
	       (unsigned long long)st.segs_free, (unsigned long long)st.segs, (unsigned long long)free0);
	CHECK(st.runs == 0 && st.segs_free + st.segs_open >= free0);
	fsck_clean(s);
	store_close(s);
	stubs_only = 1;
}

/* ---- the mover lets commit_lock go over its device writes ---------------
 * Stubs, compaction and evictions gather under commit_lock, write the
 * device without it, then change the pool under it again, only for what is
 * still where it was.  The hook rewrites and deletes rows each time the
 * mover has let go, the rows it is moving among them; every row must then
 * read as the shadow says, and store_fsck find nothing wrong. */
static struct store *us;
static uint32_t uid;
static uint64_t un, *ugen, ucalls, uchanged, ux;
static int uinside;

static void u_change(void *arg)
{
	(void)arg;
	if (uinside)
		return;
	uinside = 1;
	ucalls++;
	static uint8_t data[64][RS];
	struct store_rowop ops[64];
	for (int i = 0; i < 64; i++) {
		ux = mix(ux);
		uint64_t r = ux % un;
		if (i % 4 == 3) {
			ops[i] = (struct store_rowop){ r, 0, 0, NULL, 0 };
			ugen[r] = 0;
		} else {
			ugen[r] = 100 + ucalls;
			fill_rs(data[i], r, ugen[r]);
			ops[i] = (struct store_rowop){ r, 0, RS, data[i], 0 };
		}
	}
	OK(store_rows_write(us, uid, ops, 64, 0)); /* later ops of a row win, as in the shadow */
	uchanged += 64;
	uinside = 0;
}

static void u_check(const char *what)
{
	static uint8_t got[RS], want[RS];
	for (uint64_t r = 0; r < un; r++) {
		int st = t_row_read(us, uid, r, got);
		if (ugen[r])
			fill_rs(want, r, ugen[r]);
		if (st != !!ugen[r] || (ugen[r] && memcmp(got, want, RS))) {
			fprintf(stderr, "%s: row %llu reads %s, expected %s %llu\n", what, (unsigned long long)r,
				st == 1 ? "stored bytes" : st == 0 ? "a hole" : "an error", ugen[r] ? "generation" : "a hole",
				(unsigned long long)ugen[r]);
			test_seed_say(stderr);
			exit(1);
		}
	}
	fsck_clean(us);
}

static void unlocked_one(int runs)
{
	stubs_only = !runs;
	unlocked_fn = u_change;
	us = fresh(128 << 20, 256 << 20);
	un = 80000;
	ugen = calloc(un, sizeof(*ugen));
	CHECK(ugen);
	ux = seed ^ (uint64_t)runs;
	ucalls = uchanged = 0;
	OK(store_table_create(us, "t", 0644, 0, 0, RS / 4, EMB_DT_F32, &uid));
	unlocked_fn = NULL; /* no changes while the table is first written */
	write_all(us, uid, un, 1);
	for (uint64_t r = 0; r < un; r++)
		ugen[r] = 1;
	store_close(us);
	unlocked_fn = u_change;
	us = open_pool();
	int64_t moved = store_spill_run(us, STORE_SPILL_MOVE | STORE_SPILL_ALL);
	CHECK(moved > 0);
	uint64_t calls_move = ucalls;
	CHECK(calls_move > 0);
	u_check(runs ? "after evictions" : "after spilling");
	if (!runs) { /* stale records, then compaction with changes in between */
		unlocked_fn = NULL;
		write_all(us, uid, un / 2, 2);
		for (uint64_t r = 0; r < un / 2; r++)
			ugen[r] = 2;
		CHECK(store_spill_run(us, STORE_SPILL_MOVE | STORE_SPILL_ALL) >= 0);
		store_close(us);
		unlocked_fn = u_change;
		us = open_pool();
		uint64_t before = ucalls, compacted = sstats(us).compacted_segs;
		for (int i = 0; i < 8; i++)
			CHECK(store_spill_run(us, STORE_SPILL_COMPACT) >= 0);
		CHECK(sstats(us).compacted_segs > compacted && ucalls > before);
		u_check("after compaction");
	}
	printf("  %s: %llu rows changed in %llu pauses of the mover; all %llu rows as the shadow says\n",
	       runs ? "runs" : "stubs", (unsigned long long)uchanged, (unsigned long long)ucalls,
	       (unsigned long long)un);
	store_close(us);
	unlocked_fn = NULL;
	free(ugen);
	stubs_only = 1;
}

static void test_unlocked(void)
{
	unlocked_one(0);
	unlocked_one(1);
}

/* ---- range reads ----------------------------------------------------------
 * store_rows_read_range against a model of every view and against the
 * per-row path: rows in the pool and in several runs, overwritten,
 * punched (tombstones) and never written (holes), live and in two
 * snapshots, with and without a skip mask, sequential sweeps (read-ahead
 * windows) and random ranges; then a flipped byte in a run block: EIO for
 * the reads that touch that block, right bytes for all others. */

#define RG_N 160000u
#define RG_VIEWS 3
static uint32_t rg_gen[RG_VIEWS][RG_N]; /* live, r1, r2: each row's generation, 0 = hole */
static uint64_t rg_rng;

static uint64_t rg_rand(void)
{
	return mix(rg_rng++);
}

/* Rows ids[0..k) become generation gen (0: punched) in the live model. */
static void rg_write(struct store *s, uint32_t id, const uint64_t *ids, size_t k, uint64_t gen)
{
	static uint8_t data[512][RS];
	struct store_rowop ops[512];
	for (size_t i = 0; i < k;) {
		size_t m = 0;
		for (; m < 512 && i < k; m++, i++) {
			if (gen)
				fill_rs(data[m], ids[i], gen);
			ops[m] = (struct store_rowop){ ids[i], 0, gen ? RS : 0, gen ? data[m] : NULL, 0 };
			rg_gen[0][ids[i]] = (uint32_t)gen;
		}
		OK(store_rows_write(s, id, ops, m, (uint64_t)RG_N * RS));
	}
}

/* A random subset of [0, RG_N), about one row in every `every`. */
static size_t rg_pick(uint64_t *ids, uint32_t every)
{
	size_t k = 0;
	for (uint64_t r = 0; r < RG_N; r++)
		if (rg_rand() % every == 0)
			ids[k++] = r;
	return k;
}

/* Check rows [r0, r0 + n) of view vi as read into got/stored (skip: rows
 * that must be untouched, still 0xA5 and stored 7). */
static void rg_check(int vi, uint64_t r0, size_t n, const uint8_t *got, const uint8_t *stored, const uint8_t *skip,
		     const char *what)
{
	uint8_t want[RS], untouched[RS];
	memset(untouched, 0xA5, RS);
	for (size_t i = 0; i < n; i++) {
		const uint8_t *g = got + i * RS;
		if (skip && skip[i]) {
			if (memcmp(g, untouched, RS) || stored[i] != 7) {
				fprintf(stderr, "%s: view %d row %llu: skipped, but written\n", what, vi,
					(unsigned long long)(r0 + i));
				test_seed_say(stderr);
				exit(1);
			}
			continue;
		}
		uint32_t gen = rg_gen[vi][r0 + i];
		memset(want, 0, RS);
		if (gen)
			fill_rs(want, r0 + i, gen);
		if (memcmp(g, want, RS) || stored[i] != (gen != 0)) {
			fprintf(stderr, "%s: view %d row %llu: stored %d, want generation %u\n", what, vi,
				(unsigned long long)(r0 + i), stored[i], gen);
			test_seed_say(stderr);
			exit(1);
		}
	}
}

/* One range read of view v: 0 or -errno, bytes and stored into got/stored
 * (prefilled so that skipped rows show). */
static int rg_read(struct store *s, const struct store_view *v, uint64_t r0, size_t n, uint8_t *got,
		   uint8_t *stored, const uint8_t *skip)
{
	memset(got, 0xA5, n * RS);
	memset(stored, 7, n);
	return store_rows_read_range(s, v, r0, n, got, skip, stored);
}

static void rg_views(struct store *s, uint32_t id, const int64_t *snap, struct store_view *v)
{
	for (int vi = 0; vi < RG_VIEWS; vi++)
		OK(t_view(s, snap[vi], id, &v[vi]));
}

/* A live view's probe that asks where rows are (the row cache's): the
 * rows written last (generation 3) are in the pool, the others that are
 * stored are in runs (STORE_OUT). */
static void rg_where(struct store *s, const struct store_view *v, const uint64_t *ids, size_t n)
{
	static uint8_t where[9000];
	struct store_view w = *v;
	w.where = 1;
	OK(store_rows_read(s, &w, ids, n, NULL, where, NULL));
	for (size_t i = 0; i < n; i++) {
		uint32_t gen = rg_gen[0][ids[i]];
		int want = !gen ? 0 : gen == 3 ? 1 : STORE_OUT;
		if (where[i] != want) {
			fprintf(stderr, "where: row %llu (generation %u): %d, want %d\n", (unsigned long long)ids[i], gen,
				where[i], want);
			test_seed_say(stderr);
			exit(1);
		}
	}
}

/* Every view, every way, against the model. */
static void rg_compare(struct store *s, uint32_t id, const int64_t *snap, const char *when)
{
	static uint8_t got[9000 * RS], stored[9000], skip[9000], one[RS];
	static uint64_t ids[9000];
	struct store_view v[RG_VIEWS];
	rg_views(s, id, snap, v);
	struct store_spill_stats s0 = sstats(s);
	for (int vi = 0; vi < RG_VIEWS; vi++) {
		/* sequential sweeps, as cat's READs: the second runs on windows */
		for (int sweep = 0; sweep < 2; sweep++)
			for (uint64_t r = 0; r < RG_N; r += 4096) {
				size_t n = RG_N - r < 4096 ? RG_N - r : 4096;
				OK(rg_read(s, &v[vi], r, n, got, stored, NULL));
				rg_check(vi, r, n, got, stored, NULL, "sweep");
			}
		/* random ranges, some with a skip mask */
		for (int k = 0; k < 200; k++) {
			size_t n = 1 + rg_rand() % (k % 4 ? 9000 : 40);
			uint64_t r0 = rg_rand() % (RG_N - n + 1);
			int masked = k % 3 == 0;
			for (size_t i = 0; i < n; i++)
				skip[i] = masked && rg_rand() % 4 == 0;
			OK(rg_read(s, &v[vi], r0, n, got, stored, masked ? skip : NULL));
			rg_check(vi, r0, n, got, stored, masked ? skip : NULL, "range");
		}
		/* the per-row path, and gathers: sorted with gaps, unsorted with
		 * duplicates */
		for (int k = 0; k < 300; k++) {
			uint64_t r = rg_rand() % RG_N;
			memset(one, 0xA5, RS);
			stored[0] = 7;
			OK(store_rows_read(s, &v[vi], &r, 1, one, stored, NULL));
			rg_check(vi, r, 1, one, stored, NULL, "row");
		}
		for (int k = 0; k < 20; k++) {
			size_t n = 1 + rg_rand() % 9000;
			uint64_t r = rg_rand() % (RG_N / 2);
			for (size_t i = 0; i < n; i++) {
				ids[i] = k % 2 ? r : rg_rand() % RG_N;
				r += 1 + rg_rand() % 3;
				if (ids[i] >= RG_N)
					ids[i] = RG_N - 1;
			}
			if (k % 2 == 0 && n > 1)
				ids[n - 1] = ids[0]; /* a duplicate */
			OK(store_rows_read(s, &v[vi], ids, n, got, stored, NULL));
			for (size_t i = 0; i < n; i++)
				rg_check(vi, ids[i], 1, got + i * RS, stored + i, NULL, "gather");
			if (vi == 0)
				rg_where(s, &v[vi], ids, n);
		}
	}
	struct store_spill_stats s1 = sstats(s);
	printf("  %s: views match; %llu blocks read, %llu from read-ahead windows\n", when,
	       (unsigned long long)(s1.run_blocks - s0.run_blocks),
	       (unsigned long long)(s1.run_ra_blocks - s0.run_ra_blocks));
	CHECK(s1.run_ra_blocks > s0.run_ra_blocks);
}

/* Two readers sweeping the live view at once: shared windows, waits for
 * windows the other loads, requests out of order. */
static struct store *rg_s;
static struct store_view rg_v;

static void *rg_sweeper(void *arg)
{
	static uint8_t got[2][4096 * RS], stored[2][4096];
	int me = (int)(intptr_t)arg;
	for (int sweep = 0; sweep < 2; sweep++)
		for (uint64_t k = 0; k < RG_N; k += 4096) {
			uint64_t r = (k + (uint64_t)me * (RG_N / 2)) % RG_N;
			r -= r % 4096;
			size_t n = RG_N - r < 4096 ? RG_N - r : 4096;
			OK(rg_read(rg_s, &rg_v, r, n, got[me], stored[me], NULL));
			rg_check(0, r, n, got[me], stored[me], NULL, "two sweepers");
		}
	return NULL;
}

static void rg_two(struct store *s, uint32_t id)
{
	pthread_t t[2];
	rg_s = s;
	OK(store_view_live(s, id, &rg_v));
	for (int i = 0; i < 2; i++)
		CHECK(pthread_create(&t[i], NULL, rg_sweeper, (void *)(intptr_t)i) == 0);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	printf("  two readers sweeping at once: views match\n");
}

static void test_range(void)
{
	stubs_only = 0;
	rg_rng = seed ^ 0x72616e6765ull;
	memset(rg_gen, 0, sizeof(rg_gen));
	struct store *s = fresh(64 << 20, 256 << 20);
	uint32_t id;
	OK(store_table_create(s, "range", 0644, 0, 0, RS / 4, EMB_DT_F32, &id));
	static uint64_t ids[RG_N];
	/* generation 1 in pieces, each evicted: several runs and merges;
	 * rows r % 101 == 3 are never written */
	for (uint64_t r0 = 0; r0 < RG_N; r0 += RG_N / 8) {
		size_t k = 0;
		for (uint64_t r = r0; r < r0 + RG_N / 8; r++)
			if (r % 101 != 3)
				ids[k++] = r;
		rg_write(s, id, ids, k, 1);
		CHECK(store_spill_run(s, STORE_SPILL_MOVE | STORE_SPILL_ALL) >= 0);
	}
	struct store_snap r1, r2;
	OK(store_snap_create(s, "r1", 1, &r1));
	memcpy(rg_gen[1], rg_gen[0], sizeof(rg_gen[0]));
	/* overwrites and punches, evicted: newer runs, tombstones */
	size_t k = rg_pick(ids, 5);
	rg_write(s, id, ids, k, 2);
	CHECK(store_spill_run(s, STORE_SPILL_MOVE | STORE_SPILL_ALL) >= 0);
	k = rg_pick(ids, 20);
	rg_write(s, id, ids, k, 0);
	for (int i = 0; i < 4; i++)
		CHECK(store_spill_run(s, STORE_SPILL_MOVE | STORE_SPILL_ALL) >= 0);
	OK(store_snap_create(s, "r2", 1, &r2));
	memcpy(rg_gen[2], rg_gen[0], sizeof(rg_gen[0]));
	/* and some in the pool only: overwrites, punches */
	k = rg_pick(ids, 30);
	rg_write(s, id, ids, k, 3);
	k = rg_pick(ids, 97);
	rg_write(s, id, ids, k, 0);
	struct store_spill_stats st = sstats(s);
	printf("  %u rows: %llu runs, %llu rows in runs, %llu merges\n", RG_N, (unsigned long long)st.runs,
	       (unsigned long long)st.run_rows, (unsigned long long)st.merges);
	CHECK(st.runs >= 2 && st.run_rows >= RG_N / 2);
	int64_t snap[RG_VIEWS] = { -1, r1.idx, r2.idx };
	rg_compare(s, id, snap, "open");
	rg_two(s, id);
	store_close(s);
	s = open_pool();
	rg_compare(s, id, snap, "reopened");
	fsck_clean(s);
	store_close(s);

	/* a flipped byte in every block holding the record of a row whose
	 * live version is in a run; the rows of those blocks: [lo, hi] */
	uint64_t brow = 0;
	for (uint64_t r = RG_N / 2; r < RG_N && !brow; r++)
		if (rg_gen[0][r] == 1 && rg_gen[2][r] == 1)
			brow = r;
	CHECK(brow);
	int fd = open(spath, O_RDWR);
	CHECK(fd >= 0);
	static char blk[4096];
	uint64_t lo[16], hi[16];
	int flips = 0;
	uint32_t rec = 16 + RS;
	for (off_t off = EMB_SPILL_HDR; pread(fd, blk, sizeof(blk), off) == (ssize_t)sizeof(blk); off += sizeof(blk)) {
		struct emb_rblk *h = (struct emb_rblk *)blk;
		if (h->magic != EMB_RBLK_MAGIC || !h->nrec || h->nrec > (sizeof(blk) - sizeof(*h)) / rec)
			continue;
		for (uint32_t i = 0; i < h->nrec && flips < 16; i++) {
			uint64_t row;
			memcpy(&row, blk + sizeof(*h) + i * rec, 8);
			if (row != brow)
				continue;
			memcpy(&lo[flips], blk + sizeof(*h), 8);
			memcpy(&hi[flips], blk + sizeof(*h) + (h->nrec - 1) * rec, 8);
			uint8_t b = (uint8_t)(blk[sizeof(*h) + i * rec + 16 + 7] ^ 0x20);
			CHECK(pwrite(fd, &b, 1, off + (off_t)(sizeof(*h) + i * rec + 16 + 7)) == 1);
			flips++;
		}
	}
	fsync(fd);
	close(fd);
	CHECK(flips > 0);
	s = open_pool();
	struct store_view v[RG_VIEWS];
	rg_views(s, id, snap, v);
	uint64_t e0 = sstats(s).csum_errors, eio = 0, ok = 0;
	static uint8_t got[2048 * RS], stored[2048];
	for (int pass = 0; pass < 3; pass++) /* chunks of 512 rows, aligned and not */
		for (uint64_t r0 = pass * 97; r0 < RG_N; r0 += 512) {
			size_t n = RG_N - r0 < 512 ? RG_N - r0 : 512;
			int touches = 0, has = r0 <= brow && brow < r0 + n;
			for (int f = 0; f < flips; f++)
				touches |= r0 <= hi[f] && lo[f] < r0 + n;
			int ret = rg_read(s, &v[0], r0, n, got, stored, NULL);
			if (ret == -EIO) {
				CHECK(touches);
				eio++;
				continue;
			}
			OK(ret);
			CHECK(!has);
			rg_check(0, r0, n, got, stored, NULL, "around the damage");
			ok++;
		}
	uint8_t one[RS];
	CHECK(t_row_read(s, id, brow, one) == -EIO);
	CHECK(t_row_read(s, id, brow + 1000, one) >= 0);
	printf("  a flipped byte in %d block(s) of rows around %llu: %llu range reads EIO, %llu right, %llu checksum errors\n",
	       flips, (unsigned long long)brow, (unsigned long long)eio, (unsigned long long)ok,
	       (unsigned long long)(sstats(s).csum_errors - e0));
	CHECK(eio >= 3 && sstats(s).csum_errors > e0);
	store_close(s);
	stubs_only = 1;
}

/* ---- the key filter ------------------------------------------------------
 * Reads of many rows of a table with runs skip the index lookups of rows
 * whose 64-row chunk holds no index entry (index.c's key filter, made at
 * the first such read).  Rows written, deleted (tombstones) and evicted
 * after it was made must read right: every row is read in batches of 4096
 * (the filter) and one by one (no filter) and both compared with a shadow,
 * after each change. */
static uint64_t kf_n = 100000, *kf_gen;

static void kf_check(struct store *s, uint32_t id, const char *what)
{
	static uint64_t ids[4096];
	static uint8_t got[4096][RS], stored[4096];
	uint8_t one[RS], want[RS];
	for (uint64_t r0 = 0; r0 < kf_n; r0 += 4096) {
		size_t k = kf_n - r0 < 4096 ? (size_t)(kf_n - r0) : 4096;
		for (size_t i = 0; i < k; i++)
			ids[i] = r0 + i;
		OK(t_rows_read(s, id, ids, k, got, stored));
		for (size_t i = 0; i < k; i++) {
			uint64_t r = r0 + i, g = kf_gen[r];
			memset(want, 0, RS);
			if (g)
				fill_rs(want, r, g);
			int st1 = t_row_read(s, id, r, one);
			if (stored[i] != !!g || memcmp(got[i], want, RS) || st1 != !!g || (g && memcmp(one, want, RS))) {
				fprintf(stderr, "%s: row %llu: batch stored %d, one by one %d, want generation %llu\n", what,
					(unsigned long long)r, stored[i], st1, (unsigned long long)g);
				test_seed_say(stderr);
				exit(1);
			}
		}
	}
}

static void kf_write(struct store *s, uint32_t id, uint64_t r0, uint64_t n, uint64_t step, uint64_t gen)
{
	static uint8_t data[512][RS];
	struct store_rowop ops[512];
	size_t k = 0;
	for (uint64_t r = r0; r < r0 + n * step; r += step) {
		kf_gen[r] = gen;
		if (gen)
			fill_rs(data[k], r, gen);
		ops[k] = (struct store_rowop){ r, 0, gen ? RS : 0, gen ? data[k] : NULL, 0 };
		if (++k == 512 || r + step >= r0 + n * step) {
			OK(store_rows_write(s, id, ops, k, 0));
			k = 0;
		}
	}
}

#define NO_ROW UINT64_MAX

/* Rows r of [0, n) with r % 3 == k (and row `also`, if not NO_ROW), of
 * generation 1, in commits of 512. */
static void write_third(struct store *s, uint32_t id, uint64_t n, uint64_t k, uint64_t also)
{
	static uint8_t data[512][RS];
	struct store_rowop ops[512];
	size_t m = 0;
	for (uint64_t r = k; r < n + 3; r += 3) {
		uint64_t row = r < n ? r : also;
		if (row == NO_ROW)
			break;
		fill_rs(data[m], row, 1);
		ops[m] = (struct store_rowop){ row, 0, RS, data[m], 0 };
		if (++m == 512) {
			OK(store_rows_write(s, id, ops, m, n * RS));
			m = 0;
		}
	}
	if (m)
		OK(store_rows_write(s, id, ops, m, n * RS));
}

static int spill_all(struct store *s)
{
	int64_t r = store_spill_run(s, STORE_SPILL_MOVE | STORE_SPILL_ALL);
	return r > 0 ? 0 : r < 0 ? (int)r : -ENODATA;
}

/* An eviction's run is fresh when no run of its table holds any of its
 * rows (ev_fresh: the runs' filters, then the blocks their false
 * positives name, read in queues of 1, 2, 4 ... 256): runs of thirds of
 * one range hold disjoint rows over the same range, so each is checked row
 * by row and its ~0.3% of false positives make several queues of reads. */
static void test_fresh(void)
{
	stubs_only = 0;
	struct store *s = fresh(128 << 20, 512 << 20);
	const uint64_t n = 3 * 100000;
	uint32_t id;
	OK(store_table_create(s, "t", 0644, 0, 0, RS / 4, EMB_DT_F32, &id));
	write_third(s, id, n, 0, NO_ROW);
	OK(spill_all(s));
	CHECK(store_test_newest_fresh(s, id) == 1); /* the only run */
	uint64_t r0 = sstats(s).read_ios;
	write_third(s, id, n, 1, NO_ROW);
	OK(spill_all(s));
	uint64_t reads = sstats(s).read_ios - r0;
	printf("  a run of 100000 rows beside one of the other rows of its range: %llu block reads\n",
	       (unsigned long long)reads);
	CHECK(store_test_newest_fresh(s, id) == 1); /* none shared */
	CHECK(reads > 256); /* more than one queue (the filter is not seeded: 321) */
	/* the last third, and the highest row of the first: met after the
	 * queues of the false positives before it */
	write_third(s, id, n, 2, n - 3);
	OK(spill_all(s));
	CHECK(store_test_newest_fresh(s, id) == 0);
	/* the first third again: its first row starts a block of the first run */
	write_third(s, id, n, 0, NO_ROW);
	OK(spill_all(s));
	CHECK(store_test_newest_fresh(s, id) == 0);
	check_range(s, id, 0, n, 1);
	store_close(s);
	stubs_only = 1;
}

/* A load in no order: SPARSE_FANOUT evictions of rows that interleave over
 * one range make fresh sparse runs of about one size, and the mover's next
 * merge takes all of them at once (merge_sparse: one rewrite for the tier,
 * not one per 4x of size); the merge of fresh runs is fresh, and every row
 * and hole reads back. */
static void test_sparse(void)
{
	stubs_only = 0;
	struct store *s = fresh(64 << 20, 256 << 20);
	enum { K = 2000, FAN = 16 /* SPARSE_FANOUT */, STRIDE = FAN + 1 };
	static uint8_t data[K][RS];
	struct store_rowop ops[K];
	uint32_t id;
	OK(store_table_create(s, "t", 0644, 0, 0, RS / 4, EMB_DT_F32, &id));
	for (uint64_t c = 0; c < FAN; c++) {
		for (uint64_t i = 0; i < K; i++) {
			fill_rs(data[i], i * STRIDE + c, 1);
			ops[i] = (struct store_rowop){ i * STRIDE + c, 0, RS, data[i], 0 };
		}
		OK(store_rows_write(s, id, ops, K, (uint64_t)K * STRIDE * RS));
		OK(spill_all(s));
	}
	struct store_spill_stats st = sstats(s);
	printf("  %d evictions of %d rows %d apart: %llu runs, %llu merges, %llu moves\n", FAN, K, STRIDE,
	       (unsigned long long)st.runs, (unsigned long long)st.merges, (unsigned long long)st.merge_moves);
	CHECK(st.runs == 1 && st.merges == 1 && st.run_rows == (uint64_t)FAN * K);
	CHECK(store_test_newest_fresh(s, id) == 1);
	/* rows of the residue no eviction wrote are holes */
	static uint8_t got[RS];
	struct store_view v;
	OK(store_view_live(s, id, &v));
	for (uint64_t r = 0; r < (uint64_t)K * STRIDE; r++) {
		uint8_t present = 0;
		OK(store_rows_read(s, &v, &r, 1, got, &present, NULL));
		if (r % STRIDE == FAN) {
			CHECK(!present);
		} else {
			uint8_t want[RS];
			fill_rs(want, r, 1);
			CHECK(present && !memcmp(got, want, RS));
		}
	}
	store_close(s);
	stubs_only = 1;
}

static void test_kfilter(void)
{
	stubs_only = 0;
	struct store *s = fresh(128 << 20, 256 << 20);
	uint32_t id;
	kf_gen = calloc(kf_n, sizeof(*kf_gen));
	CHECK(kf_gen);
	OK(store_table_create(s, "t", 0644, 0, 0, RS / 4, EMB_DT_F32, &id));
	write_all(s, id, kf_n, 1);
	for (uint64_t r = 0; r < kf_n; r++)
		kf_gen[r] = 1;
	CHECK(store_spill_run(s, STORE_SPILL_MOVE | STORE_SPILL_ALL) > 0);
	kf_check(s, id, "all in runs"); /* makes the filter */
	kf_write(s, id, 5000, 40, 1, 2);     /* a chunk of rows the pool did not hold */
	kf_write(s, id, 20000, 200, 97, 3);  /* rows spread over many chunks */
	kf_write(s, id, 60000, 100, 13, 0);  /* deletes of rows only runs hold: tombstones */
	kf_check(s, id, "after writes and deletes");
	CHECK(store_spill_run(s, STORE_SPILL_MOVE | STORE_SPILL_ALL) >= 0); /* they leave the index */
	kf_check(s, id, "after evicting them");
	kf_write(s, id, 5010, 20, 1, 4);
	kf_check(s, id, "written again");
	store_close(s);
	s = open_pool();
	kf_check(s, id, "reopened");
	fsck_clean(s);
	printf("  %llu rows read in batches (the filter) and one by one after writes, deletes and evictions\n",
	       (unsigned long long)kf_n);
	store_close(s);
	free(kf_gen);
	stubs_only = 1;
}

/* The parts that are not about stubs, again with runs. */
static void with_runs(void (*fn)(void))
{
	stubs_only = 0;
	fn();
	stubs_only = 1;
}

static void runs_random(void)
{
	with_runs(test_random);
}

static void runs_full(void)
{
	with_runs(test_full);
}

static void runs_crash(void)
{
	with_runs(test_crash);
}

static void runs_threads(void)
{
	with_runs(test_threads);
}

/* The runs part again with runs that list their segments in several
 * blocks (2 segments to a list block: a run of more than 1014 segments,
 * 4 GiB of 4 MiB segments, does so in full size). */
static void runs_lists(void)
{
	list_cap = 2;
	test_runs();
	list_cap = 0;
}

/* lookup_rounds' generations: even rows rewritten. */
static uint64_t g_rounds(uint64_t r)
{
	return r % 2 ? 1 : 2;
}

/* A scattered read of the live view asks each row of its newest run whose
 * filter may hold it, and the next one only when that one did not
 * (runlookup.c's rounds): with the even rows rewritten into a newer run,
 * each odd row the newer run's filter wrongly passes (about 0.3% of them)
 * must still read generation 1 from the older run. */
static void lookup_rounds(void)
{
	stubs_only = 0;
	struct store *s = fresh(64 << 20, 256 << 20);
	uint32_t id;
	uint64_t n = 60000;
	OK(store_table_create(s, "lr", 0644, 0, 0, RS / 4, EMB_DT_F32, &id));
	write_evict(s, id, 0, n, 1);
	printf("  loaded: %llu runs\n", (unsigned long long)sstats(s).runs);
	static uint8_t data[RS];
	for (uint64_t r = 0; r < n; r += 2) {
		fill_rs(data, r, 2);
		struct store_rowop op = { r, 0, RS, data, 0 };
		OK(store_rows_write(s, id, &op, 1, 0));
	}
	/* rewritten rows are referenced: the mover's hand passes them once first */
	for (int i = 0; i < 16 && sstats(s).run_rows < n + n / 2; i++)
		CHECK(store_spill_run(s, STORE_SPILL_MOVE | STORE_SPILL_ALL) >= 0);
	printf("  %llu runs of %llu records\n", (unsigned long long)sstats(s).runs, (unsigned long long)sstats(s).run_rows);
	CHECK(sstats(s).run_rows >= n + n / 2);
	uint64_t fp0 = sstats(s).bloom_fp;
	static uint64_t ids[1024];
	for (uint64_t off = 0; off < 31; off++) /* rows 31 apart: too sparse to walk */
		for (uint64_t r = off; r < n;) {
			size_t k = 0;
			for (; r < n && k < 1024; r += 31)
				ids[k++] = r;
			check_ids(s, -1, id, ids, k, g_rounds);
		}
	uint64_t fp = sstats(s).bloom_fp - fp0;
	printf("  %llu rows read, %llu filter false positives\n", (unsigned long long)n, (unsigned long long)fp);
	CHECK(fp > 0);
	store_close(s);
	stubs_only = 1;
}

/* The live view of rows [0, n) of id as gen says, a clean fsck, and the
 * same view after s is closed and the pool opened again (closed too). */
static void check_close_reopen(struct store *s, uint32_t id, uint64_t n, uint64_t (*gen)(uint64_t))
{
	check_view(s, -1, id, 0, n, gen);
	fsck_clean(s);
	store_close(s);
	s = open_pool();
	check_view(s, -1, id, 0, n, gen);
	store_close(s);
}

/* Generations of sweep_order's rows: rewritten, punched, as loaded. */
static uint64_t g_sweep(uint64_t r)
{
	return r < 1000 ? 2 : r < 2000 ? 0 : 1;
}

/* A sweep halfway: a run newer than the one that spans the table holds
 * rows [0, 2000) (1000 rewritten, 1000 punched).  The first step lets the
 * newer run go while the spanning one stays, so its part must come before
 * the spanning run in the list (else rows [0, 1000) read the old
 * generation) and keep the tombstones (else rows [1000, 2000) do). */
static void sweep_order(void)
{
	stubs_only = 0;
	sweep_part = 1 << 20;
	struct store *s = fresh(64 << 20, 256 << 20);
	uint32_t id;
	uint64_t n = 60000;
	OK(store_table_create(s, "sw", 0644, 0, 0, RS / 4, EMB_DT_F32, &id));
	write_evict(s, id, 0, n, 1);
	CHECK(sstats(s).runs >= 1 && !sstats(s).sweep_parts);
	static uint8_t data[RS];
	for (uint64_t r = 0; r < 2000; r++) {
		struct store_rowop op = { r, 0, r < 1000 ? RS : 0, r < 1000 ? data : NULL, 0 };
		if (r < 1000)
			fill_rs(data, r, 2);
		OK(store_rows_write(s, id, &op, 1, 0));
	}
	int rounds = 0;
	for (; !sstats(s).sweeping && rounds < 8; rounds++)
		CHECK(store_spill_run(s, STORE_SPILL_MOVE | STORE_SPILL_ALL) >= 0);
	struct store_spill_stats st = sstats(s);
	printf("  halfway: %llu parts, %llu runs, sweeping %llu after %d rounds\n", (unsigned long long)st.sweep_parts,
	       (unsigned long long)st.runs, (unsigned long long)st.sweeping, rounds);
	CHECK(st.sweeping && st.sweep_parts >= 1);
	check_view(s, -1, id, 0, n, g_sweep);
	for (rounds = 0; sstats(s).sweeping && rounds < 100; rounds++)
		CHECK(store_spill_run(s, STORE_SPILL_MOVE | STORE_SPILL_ALL) >= 0);
	CHECK(!sstats(s).sweeping);
	check_close_reopen(s, id, n, g_sweep);
	sweep_part = 0;
	stubs_only = 1;
}

/* sweep_kept's rows: their generation (0: deleted or never written) */
#define SK_N 160000u
static uint8_t sk_gen[SK_N];

static uint64_t g_kept(uint64_t r)
{
	return r < SK_N ? sk_gen[r] : 0;
}

/* Write (gen > 0) or delete (gen 0) the rows of [r0, r1) of id whose hash
 * (with salt) is a multiple of every, 512 a call (the table made long
 * enough for them), and note it in sk_gen. */
static void sk_write(struct store *s, uint32_t id, uint64_t r0, uint64_t r1, uint64_t salt, unsigned every,
		     uint8_t gen)
{
	static uint8_t data[512][RS];
	struct store_rowop ops[512];
	size_t k = 0;
	for (uint64_t r = r0; r < r1; r++) {
		if (every > 1 && mix(seed ^ salt ^ r) % every)
			continue;
		if (gen)
			fill_rs(data[k], r, gen);
		ops[k] = (struct store_rowop){ r, 0, gen ? RS : 0, gen ? data[k] : NULL, 0 };
		sk_gen[r] = gen;
		if (++k == 512) {
			OK(store_rows_write(s, id, ops, k, (r + 1) * RS));
			k = 0;
		}
	}
	if (k)
		OK(store_rows_write(s, id, ops, k, ops[k - 1].row * RS + RS));
}

/* The mover's sweep keeps the rows one scan of the index found for the
 * evictions after it (runevict.c, evc_get): rows deleted or rewritten
 * between two evictions of one sweep must leave as they are now, never as
 * the scan saw them.  Evictions of at most 2048 rows and passes that stop
 * at the low watermark leave the hand mid-table; between passes a random
 * eighth of the rows is deleted and another eighth rewritten (those rows
 * turn hot: the hand passes them), the table is cut at a random row and
 * made long again (no row turns hot) and a quarter of the rows cut is
 * written anew, and more rows come.  Every view is checked against a
 * shadow. */
static void sweep_kept(void)
{
	stubs_only = 0;
	evict_rows = 2048;
	all_cold = 1; /* the changed rows are hot: the hand would pass them */
	struct store *s = fresh(64 << 20, 512 << 20);
	uint32_t id;
	OK(store_table_create(s, "kept", 0644, 0, 0, RS / 4, EMB_DT_F32, &id));
	memset(sk_gen, 0, sizeof(sk_gen));
	uint64_t end = 0, passes = 0;
	for (uint8_t gen = 1; end < SK_N; gen++) {
		sk_write(s, id, end, end + 20000, 0, 1, 1);
		end += 20000;
		CHECK(store_spill_run(s, STORE_SPILL_MOVE) >= 0);
		passes++;
		sk_write(s, id, 0, end, (uint64_t)gen << 40, 8, 0);
		sk_write(s, id, 0, end, (uint64_t)gen << 40 | 1ull << 39, 8, (uint8_t)(gen + 1));
		/* a truncation marks no row hot: the sweep reaches the rows it
		 * cut, which its scan saw */
		uint64_t cut = end - 1 - mix(seed ^ gen) % (end / 3);
		OK(store_table_truncate(s, id, cut * RS));
		OK(store_table_truncate(s, id, end * RS));
		memset(sk_gen + cut, 0, end - cut);
		sk_write(s, id, cut, end, (uint64_t)gen << 40 | 1ull << 38, 4, (uint8_t)(gen + 1));
		CHECK(store_spill_run(s, STORE_SPILL_MOVE) >= 0);
		passes++;
		check_view(s, -1, id, 0, SK_N, g_kept);
	}
	struct store_spill_stats st = sstats(s);
	struct store_stats ss;
	store_stats_get(s, &ss);
	printf("  %u rows, %llu passes: %llu rows evicted into %llu runs, %llu checksum errors\n", SK_N,
	       (unsigned long long)passes, (unsigned long long)st.run_evicted, (unsigned long long)st.runs,
	       (unsigned long long)ss.checksum_errors);
	CHECK(st.run_evicted > SK_N / 8); /* the sweeps reached the rows changed */
	/* a row is taken at its head now, never at the one the scan saw
	 * (freed since: a damaged version to the checks below) */
	CHECK(ss.checksum_errors == 0);
	CHECK(store_spill_run(s, STORE_SPILL_MOVE | STORE_SPILL_ALL) >= 0);
	check_close_reopen(s, id, SK_N, g_kept);
	evict_rows = 0;
	all_cold = 0;
	stubs_only = 1;
}

/* The runs parts again with every merge of a table's whole list made as a
 * sweep (runsweep.c), in parts of 1 MiB of records, whatever the device's
 * fill: snapshots' views, tombstones, truncation, a remount, random
 * operations against a shadow, and kills at random points. */
static void runs_sweep(void)
{
	sweep_part = 1 << 20;
	test_runs();
	runs_random();
	runs_crash();
	sweep_part = 0;
}

/* Random rows again, the mover's hand in the index's order (as in a pool
 * of more than EVICT_ORDER_MAX row versions), not in row order. */
static void runs_hashed(void)
{
	order_max = 1;
	runs_random();
	order_max = 0;
}


/* ---- bulk loads (store_rows_append) -------------------------------------- */

#define BN 60000u /* 15 MiB of rows: runs of at most 4 MiB on a 64 MiB device */

/* Append rows [first, first + k) of generation g as one bulk write: its result. */
static int bulk_put(struct store *s, uint32_t id, uint64_t first, size_t k, uint8_t g)
{
	static uint8_t buf[1024][RS];
	CHECK(k <= 1024);
	for (size_t i = 0; i < k; i++)
		fill_rs(buf[i], first + i, g);
	return store_rows_append(s, id, first, k, buf, store_batch_get(s));
}

/* Every row of [0, n) as gen[] says (0: a hole), through the view snap
 * (-1: live), read in batches and as ranges. */
static void bulk_check(struct store *s, int64_t snap, uint32_t id, const uint8_t *gen, uint64_t n)
{
	static uint8_t got[512][RS];
	uint8_t want[RS], stored[512];
	uint64_t ids[512];
	for (uint64_t r = 0; r < n; r += 512) {
		size_t k = n - r < 512 ? (size_t)(n - r) : 512;
		for (size_t i = 0; i < k; i++)
			ids[i] = r + (i * 7) % k; /* not in order */
		OK(t_rows_read_at(s, snap, id, ids, k, got, stored));
		for (size_t i = 0; i < k; i++) {
			uint8_t g = gen[ids[i]];
			if (stored[i] != (g != 0)) {
				fprintf(stderr, "row %llu: stored %d, want %d\n", (unsigned long long)ids[i], stored[i], g != 0);
				CHECK(0);
			}
			if (g) {
				fill_rs(want, ids[i], g);
				CHECK(!memcmp(got[i], want, RS));
			}
		}
	}
}

/* Bulk loads into a table past the pool: appends of random sizes, in row
 * order with gaps, read back while a run is open (which seals it), around
 * a snapshot, then overwritten, deleted and truncated through the pool,
 * merged and compacted by the mover, and reopened; writes that may not go
 * straight to a run (below the end, into a table with pool rows) are
 * refused (0) and the open run of a table that is unlinked goes with it. */
static void test_bulk(void)
{
	stubs_only = 0;
	bulk_always = 1;
	struct store *s = fresh(64 << 20, 64 << 20);
	srand((unsigned)mix(seed ^ 0x62756c6b));
	uint32_t id, id2;
	OK(store_table_create(s, "b", 0644, 0, 0, RS / 4, EMB_DT_F32, &id));
	static uint8_t gen[BN], sgen[BN];
	memset(gen, 0, sizeof(gen));
	uint64_t r = 0, appended = 0, snap_at = 0;
	struct store_snap sn = { 0 };
	int snapped = 0;
	while (r < BN - 100) {
		if (rand() % 8 == 0)
			r += (uint64_t)(rand() % 50); /* a gap: holes */
		size_t k = 1 + (size_t)(rand() % 700);
		if (k > BN - 100 - r)
			k = BN - 100 - r;
		if (!k)
			break;
		uint8_t g = (uint8_t)(1 + rand() % 250);
		CHECK(bulk_put(s, id, r, k, g) == 1);
		memset(gen + r, g, k);
		r += k;
		appended += k;
		if (rand() % 16 == 0) { /* a read seals the open run */
			uint8_t got[RS], want[RS];
			uint64_t q = (uint64_t)rand() % r;
			CHECK(t_row_read(s, id, q, got) == (gen[q] != 0));
			if (gen[q]) {
				fill_rs(want, q, gen[q]);
				CHECK(!memcmp(got, want, RS));
			}
		}
		if (!snapped && r > BN / 2) {
			OK(store_snap_create(s, "half", 1, &sn));
			memcpy(sgen, gen, sizeof(gen));
			snap_at = r;
			snapped = 1;
		}
	}
	struct store_attr a;
	OK(store_table_getattr(s, id, &a));
	CHECK(a.size == r * RS);
	CHECK(bulk_put(s, id, r - 1, 1, 9) == 0); /* below the end */
	bulk_check(s, -1, id, gen, BN);
	bulk_check(s, sn.idx, id, sgen, snap_at);
	struct store_spill_stats x = sstats(s);
	printf("bulk: %llu rows in %llu runs (%llu runs listed), %llu evicted, %llu merges\n",
	       (unsigned long long)x.bulk_rows, (unsigned long long)x.bulk_runs, (unsigned long long)x.runs,
	       (unsigned long long)x.run_evicted, (unsigned long long)x.merges);
	CHECK(x.bulk_rows == appended && x.bulk_runs >= 4 && x.run_evicted == 0);
	CHECK(x.pmem_versions == 0); /* none went through the pool */
	/* the pool's writes win over the runs' rows */
	static uint8_t data[64][RS];
	struct store_rowop ops[64];
	for (int i = 0; i < 64; i++) {
		uint64_t q = (uint64_t)rand() % r;
		uint8_t g = (uint8_t)(251 + i % 4);
		fill_rs(data[i], q, g);
		ops[i] = (struct store_rowop){ q, 0, RS, i % 8 ? data[i] : NULL, 0 };
		gen[q] = i % 8 ? g : 0;
	}
	for (int i = 0; i < 64; i++) /* the last of duplicates wins */
		OK(store_rows_write(s, id, &ops[i], 1, 0));
	bulk_check(s, -1, id, gen, BN);
	/* past every row of the index: still straight into a run */
	CHECK(bulk_put(s, id, r, 8, 3) == 1);
	memset(gen + r, 3, 8);
	r += 8;
	/* a row of the index past the end (a snapshot keeps it through a
	 * truncation): rows up to it may not go to a run, the live view must
	 * read it as a hole, not as a run's newer row */
	fill_rs(data[0], r + 20, 4);
	ops[0] = (struct store_rowop){ r + 20, 0, RS, data[0], 0 };
	OK(store_rows_write(s, id, ops, 1, (r + 21) * RS));
	struct store_snap sn2;
	uint8_t got1[RS], want1[RS];
	OK(store_snap_create(s, "kept", 1, &sn2));
	OK(store_table_truncate(s, id, (r + 10) * RS));
	CHECK(bulk_put(s, id, r + 10, 20, 5) == 0);
	CHECK(bulk_put(s, id, r + 21, 30, 6) == 1);
	memset(gen + r + 21, 6, 30);
	bulk_check(s, -1, id, gen, BN);
	fill_rs(want1, r + 20, 4);
	CHECK(t_snap_row_read(s, sn2.idx, id, r + 20, got1) == 1 && !memcmp(got1, want1, RS));
	OK(store_snap_drop(s, "kept"));
	OK(store_table_truncate(s, id, (BN / 3) * RS));
	memset(gen + BN / 3, 0, BN - BN / 3);
	bulk_check(s, -1, id, gen, BN);
	/* a table unlinked with its run open */
	OK(store_table_create(s, "c", 0644, 0, 0, RS / 4, EMB_DT_F32, &id2));
	CHECK(bulk_put(s, id2, 0, 500, 5) == 1);
	OK(store_table_unlink(s, "c"));
	OK(store_table_release(s, id2));
	for (int i = 0; i < 3; i++)
		OK(store_spill_run(s, STORE_SPILL_MOVE | STORE_SPILL_ALL | STORE_SPILL_COMPACT));
	bulk_check(s, -1, id, gen, BN);
	bulk_check(s, sn.idx, id, sgen, snap_at);
	fsck_clean(s);
	store_close(s);
	s = open_pool();
	fsck_clean(s);
	bulk_check(s, -1, id, gen, BN);
	bulk_check(s, sn.idx, id, sgen, snap_at);
	OK(store_snap_drop(s, "half"));
	OK(store_spill_run(s, STORE_SPILL_MOVE | STORE_SPILL_ALL | STORE_SPILL_COMPACT));
	bulk_check(s, -1, id, gen, BN);
	fsck_clean(s);
	store_close(s);
	bulk_always = 0;
	stubs_only = 1;
}

/* Bulk loads wait for a full pool: appends to a new table go to the pool
 * while its rows fit below the low watermark (0), straight into runs once
 * they do not (1). */
static void test_bulk_policy(void)
{
	stubs_only = 0;
	struct store *s = fresh(64 << 20, 64 << 20);
	uint32_t id, fid;
	OK(store_table_create(s, "p", 0644, 0, 0, RS / 4, EMB_DT_F32, &id));
	OK(store_table_create(s, "fill", 0644, 0, 0, RS / 4, EMB_DT_F32, &fid));
	static uint8_t data[512][RS];
	struct store_rowop ops[512];
	CHECK(bulk_put(s, id, 0, 512, 1) == 0); /* the pool has room: written there */
	for (int i = 0; i < 512; i++) {
		fill_rs(data[i], i, 1);
		ops[i] = (struct store_rowop){ i, 0, RS, data[i], 0 };
	}
	OK(store_rows_write(s, id, ops, 512, 512 * RS));
	uint64_t r = 0;
	struct store_spill_stats x = sstats(s);
	while (x.pmem_row_bytes + 512 * RS <= x.pmem_low) { /* the mover is manual: nothing leaves */
		for (int i = 0; i < 512; i++) {
			fill_rs(data[i], r + i, 2);
			ops[i] = (struct store_rowop){ r + i, 0, RS, data[i], 0 };
		}
		OK(store_rows_write(s, fid, ops, 512, (r + 512) * RS));
		r += 512;
		x = sstats(s);
	}
	CHECK(bulk_put(s, id, 512, 512, 3) == 1);
	CHECK(bulk_put(s, fid, r, 512, 3) == 1); /* past the pool's rows of the table */
	uint8_t got[RS], want[RS];
	fill_rs(want, 700, 3);
	CHECK(t_row_read(s, id, 700, got) == 1 && !memcmp(got, want, RS));
	fill_rs(want, 100, 1);
	CHECK(t_row_read(s, id, 100, got) == 1 && !memcmp(got, want, RS));
	fill_rs(want, r + 5, 3);
	CHECK(t_row_read(s, fid, r + 5, got) == 1 && !memcmp(got, want, RS));
	x = sstats(s);
	CHECK(x.bulk_rows == 1024);
	fsck_clean(s);
	store_close(s);
	stubs_only = 1;
}

/* A bulk load into a device too small for it: appends go straight to runs
 * while the device has room past the merge reserve, then are refused (0),
 * and the ordinary path takes the rest up to its ENOSPC; nothing is lost. */
static void test_bulk_full(void)
{
	stubs_only = 0;
	bulk_always = 1;
	struct store *s = fresh(64 << 20, 32 << 20);
	uint32_t id;
	OK(store_table_create(s, "f", 0644, 0, 0, RS / 4, EMB_DT_F32, &id));
	uint64_t cap = (32u << 20) / RS, r = 0;
	static uint8_t gen[(32u << 20) / RS];
	memset(gen, 0, sizeof(gen));
	int ret;
	while (r + 512 <= cap && (ret = bulk_put(s, id, r, 512, 7)) == 1) {
		memset(gen + r, 7, 512);
		r += 512;
	}
	CHECK(r + 512 <= cap && ret == 0);
	uint64_t bulk_end = r;
	static uint8_t data[512][RS];
	struct store_rowop ops[512];
	for (;;) {
		for (int i = 0; i < 512; i++) {
			fill_rs(data[i], r + i, 8);
			ops[i] = (struct store_rowop){ r + i, 0, RS, data[i], 0 };
		}
		if (r + 512 > cap || (ret = store_rows_write(s, id, ops, 512, 0)) != 0)
			break;
		memset(gen + r, 8, 512);
		r += 512;
	}
	CHECK(ret == -ENOSPC || (r + 512 > cap && !ret)); /* the pool may hold what the device does not */
	printf("bulk_full: %llu rows straight to runs, %llu through the pool, of %llu that fit the device\n",
	       (unsigned long long)bulk_end, (unsigned long long)(r - bulk_end), (unsigned long long)cap);
	CHECK(bulk_end > 0);
	bulk_check(s, -1, id, gen, cap);
	store_close(s);
	s = open_pool();
	fsck_clean(s);
	bulk_check(s, -1, id, gen, cap);
	store_close(s);
	bulk_always = 0;
	stubs_only = 1;
}

#define BCN 120000u

/* The crash child: appends rows of generation g in random chunks, syncing
 * every few thousand rows and telling the parent how many are durable. */
static void bulk_child(int fd, const char *name, uint8_t g)
{
	struct store *s = open_pool();
	uint32_t id;
	if (store_table_lookup(s, name, &id))
		_exit(2);
	uint64_t r = 0, synced = 0;
	while (r < BCN) {
		size_t k = 1 + (size_t)(rand() % 1000);
		if (k > BCN - r)
			k = BCN - r;
		if (bulk_put(s, id, r, k, g) != 1)
			_exit(3);
		r += k;
		if (r - synced >= 3000 || r == BCN) {
			if (store_sync(s))
				_exit(4);
			synced = r;
			uint32_t v = (uint32_t)synced;
			if (write(fd, &v, sizeof(v)) != sizeof(v))
				_exit(5);
		}
	}
	pause(); /* killed */
	_exit(0);
}

/* SIGKILL at random points of bulk loads: every row synced before is
 * there, whole; a later row is whole or a hole; the pool checks clean. */
static void test_bulk_crash(void)
{
	stubs_only = 0;
	bulk_always = 1;
	struct store *s = fresh(64 << 20, 128 << 20);
	store_close(s);
	srand((unsigned)mix(seed ^ 0x62637261)); /* the kill points and chunks */
	for (int round = 0; round < 5; round++) {
		char name[16];
		snprintf(name, sizeof(name), "k%d", round);
		uint8_t g = (uint8_t)(10 + round);
		s = open_pool();
		uint32_t id;
		if (round) { /* the last round's table goes: the device holds about four */
			char old[16];
			snprintf(old, sizeof(old), "k%d", round - 1);
			OK(store_table_lookup(s, old, &id));
			OK(store_table_unlink(s, old));
			OK(store_table_release(s, id));
		}
		OK(store_table_create(s, name, 0644, 0, 0, RS / 4, EMB_DT_F32, &id));
		store_close(s);
		int pfd[2];
		CHECK(pipe(pfd) == 0);
		unsigned cseed = (unsigned)rand();
		pid_t pid = fork();
		CHECK(pid >= 0);
		if (pid == 0) {
			close(pfd[0]);
			srand(cseed);
			bulk_child(pfd[1], name, g);
		}
		close(pfd[1]);
		uint32_t synced = 0, v;
		CHECK(read(pfd[0], &synced, sizeof(synced)) == sizeof(synced));
		struct timespec ts = { 0, (long)(rand() % 60) * 1000000L };
		nanosleep(&ts, NULL); /* a random point, on purpose */
		kill(pid, SIGKILL);
		while (read(pfd[0], &v, sizeof(v)) == sizeof(v))
			synced = v;
		close(pfd[0]);
		int st;
		waitpid(pid, &st, 0);
		if (!WIFSIGNALED(st))
			fprintf(stderr, "bulk child ended before the kill: status %d\n", WEXITSTATUS(st));
		CHECK(WIFSIGNALED(st));
		s = open_pool();
		fsck_clean(s);
		struct store_attr a;
		OK(store_table_getattr(s, id, &a));
		CHECK(a.size >= (uint64_t)synced * RS);
		static uint8_t got[512][RS];
		uint8_t want[RS], stored[512];
		uint64_t ids[512], holes = 0;
		for (uint64_t r = 0; r < BCN; r += 512) {
			size_t k = BCN - r < 512 ? (size_t)(BCN - r) : 512;
			for (size_t i = 0; i < k; i++)
				ids[i] = r + i;
			OK(t_rows_read(s, id, ids, k, got, stored));
			for (size_t i = 0; i < k; i++) {
				CHECK(stored[i] || ids[i] >= synced);
				holes += !stored[i];
				if (stored[i]) {
					fill_rs(want, ids[i], g);
					CHECK(!memcmp(got[i], want, RS));
				}
			}
		}
		printf("bulk_crash round %d: %u rows synced, %llu of %u past them lost\n", round, synced,
		       (unsigned long long)holes, BCN - synced);
		store_close(s);
	}
	bulk_always = 0;
	stubs_only = 1;
}

/* Write KW random rows of table id (of TN rows), 1 MiB, generation gen,
 * rows drawn with *wseed: milliseconds the write took. */
enum { KW = 4096 };
static double write_random(struct store *s, uint32_t id, unsigned *wseed, uint64_t gen)
{
	static uint8_t data[KW][RS];
	static struct store_rowop ops[KW];
	for (int k = 0; k < KW; k++) {
		uint64_t r = (uint64_t)rand_r(wseed) % TN;
		fill_rs(data[k], r, (uint8_t)gen);
		ops[k] = (struct store_rowop){ r, 0, RS, data[k], 0 };
	}
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	OK(store_rows_write(s, id, ops, KW, 0));
	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
}

/* Seconds since *t0. */
static double since(const struct timespec *t0)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

/* A fresh pool with the mover thread running and table "t" of TN rows
 * written; random 1 MiB writes (rows drawn from wseed) until one waits for
 * the mover: the milliseconds it took, or -1 if none did in 60 s.  *sp,
 * *idp: the pool and the table. */
/* A writer's large request for promises (a push's) makes the mover start
 * earlier and stop lower, by what two such requests need beyond the room it
 * keeps ahead of writers (at most a sixth of the rows' share): usage
 * between the watermarks evicts nothing, until a request of twice that room
 * was made (and given back); then the start (as the stats say) is a sixth
 * of the share lower, and a round evicts to a sixth below pmem_low. */
static void test_early_start(void)
{
	stubs_only = 0;
	struct store *s = fresh(256 << 20, 1024ull << 20);
	uint32_t id;
	OK(store_table_create(s, "e", 0644, 0, 0, RS / 4, EMB_DT_F32, &id));
	write_all(s, id, 1024, 1);
	struct store_spill_stats st = sstats(s);
	uint64_t slot = st.pmem_row_bytes / st.pmem_versions, cap = st.pmem_high, start = st.mover_start;
	uint64_t low = st.pmem_low, room = cap - start, early = cap / 6, n = (low + (start - low) / 4) / slot;
	write_all(s, id, n, 1);
	CHECK(store_spill_run(s, 0) == 0);
	st = sstats(s);
	CHECK(st.run_evicted == 0 && st.spilled == 0 && st.mover_start == start);
	CHECK(st.pmem_row_bytes > low && start - early < st.pmem_row_bytes);
	/* a request the pool has room for (it waits for no round) */
	int64_t rows = (int64_t)(2 * room / slot);
	uint64_t waits = st.waits;
	OK(store_space_reserve(s, id, RS, rows));
	OK(store_space_reserve(s, id, RS, -rows));
	CHECK(sstats(s).waits == waits && sstats(s).run_evicted == 0);
	CHECK(store_spill_run(s, 0) > 0);
	st = sstats(s);
	printf("  a request of %llu rows: the mover starts at %llu bytes, not %llu, and stopped at %llu (low %llu)\n",
	       (unsigned long long)rows, (unsigned long long)st.mover_start, (unsigned long long)start,
	       (unsigned long long)st.pmem_row_bytes, (unsigned long long)low);
	CHECK(st.run_evicted > 0 && st.mover_start == start - early && st.pmem_row_bytes <= low - early);
	check_range(s, id, 0, n, 1);
	fsck_clean(s);
	store_close(s);
	stubs_only = 1;
}

static double first_wait(struct store **sp, uint32_t *idp, unsigned wseed)
{
	struct store *s = *sp = fresh(64 << 20, 1024ull << 20);
	OK(store_table_create(s, "t", 0644, 0, 0, RS / 4, EMB_DT_F32, idp));
	write_all(s, *idp, TN, 1);
	OK(store_spill_start(s));
	uint64_t w0 = sstats(s).waits;
	struct timespec start;
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (uint64_t gen = 2; since(&start) < 60; gen++) {
		double t = write_random(s, *idp, &wseed, gen);
		if (sstats(s).waits > w0)
			return t;
	}
	return -1;
}

/* A writer short of room waits for the mover thread's evictions, not for
 * the merges of the same round (spill_wait_room): the rounds a waiting
 * writer asks for sleep 5 s after their evictions, and the write that
 * waited returns well before that. */
static void test_wait_evictions(void)
{
	merge_delay = 5000;
	struct store *s;
	uint32_t id;
	/* writes of 1 MiB: more than the room the mover keeps ahead of
	 * writers (a sixteenth of the pool's share for rows), so one waits */
	double ms = first_wait(&s, &id, (unsigned)mix(seed + 7));
	printf("  the write that waited for room: %.0f ms (its round sleeps %u ms after its evictions)\n", ms,
	       merge_delay);
	CHECK(ms >= 0 && ms < 2500);
	store_close(s);
	merge_delay = 0;
}

/* A writer short of room waits for one run of the mover's evictions, not
 * for the pass: runs of at most 4096 rows (1.1 MB of slots), and the mover
 * thread sleeps 500 ms after each, so that a pass from its start to a low
 * watermark at 10% of the pool (about 60,000 rows) takes 8 s; the first
 * 1 MiB write that waited must return within 2.5 s (it waits for at most
 * the run under way and the next). */
static void test_wait_one_run(void)
{
	stubs_only = 0;
	evict_rows = 4096;
	evict_slow = 500;
	spill_low = 10;
	struct store *s;
	uint32_t id;
	double ms = first_wait(&s, &id, (unsigned)mix(seed + 13));
	printf("  the write that waited for room: %.0f ms (each run of at most %u rows is followed by %u ms of sleep)\n",
	       ms, evict_rows, evict_slow);
	CHECK(ms >= 0 && ms < 2500);
	CHECK(sstats(s).run_evicted > 0);
	store_close(s);
	evict_rows = evict_slow = 0;
	spill_low = 30;
	stubs_only = 1;
}

/* A writer short of room while the mover merges does not wait for the
 * merge: the merge makes an eviction in its middle (spill_evict_between).
 * Merges sleep 300 ms every MERGE_EVICT_ROWS rows, so that one of 4 runs
 * takes seconds; writes of 1 MiB of random rows go on until 3 such
 * evictions were made, and none may take 2.5 s.  The device has room for
 * runs beyond the merge reserve (with less, a writer rightly waits for the
 * merge to give its inputs' room back). */
static void test_evict_in_merges_on(int sweeps)
{
	stubs_only = 0;
	merge_slow = 300;
	struct store *s = fresh(64 << 20, 1024ull << 20);
	uint32_t id;
	OK(store_table_create(s, "m", 0644, 0, 0, RS / 4, EMB_DT_F32, &id));
	write_all(s, id, TN, 1);
	OK(store_spill_start(s));
	unsigned wseed = (unsigned)mix(seed + 11);
	double worst = 0;
	uint64_t writes = 0;
	struct timespec start;
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (uint64_t gen = 2; sstats(s).evicts_between < 3 && since(&start) < 60; gen++, writes++) {
		double ms = write_random(s, id, &wseed, gen);
		worst = ms > worst ? ms : worst;
	}
	struct store_spill_stats st = sstats(s);
	printf("  %llu writes of 1 MiB, the slowest %.0f ms; %llu merges, %llu evictions in their middle, %llu waits\n",
	       (unsigned long long)writes, worst, (unsigned long long)st.merges,
	       (unsigned long long)st.evicts_between, (unsigned long long)st.waits);
	CHECK(st.evicts_between >= 3);
	CHECK(worst < 2500);
	if (sweeps) { /* the merges under way end: what were they? */
		while (sstats(s).merges == 0 && since(&start) < 120)
			nanosleep(&(struct timespec){ 0, 10 * 1000000L }, NULL);
		st = sstats(s);
		printf("  %llu sweep parts, of %llu merges\n", (unsigned long long)st.sweep_parts,
		       (unsigned long long)st.merges);
		CHECK(st.sweep_parts > 0 && st.sweep_parts == st.merges);
	}
	store_close(s);
	merge_slow = 0;
	stubs_only = 1;
}

static void test_evict_in_merges(void)
{
	test_evict_in_merges_on(0);
}

/* The same with sweeps (parts of 8 MiB, every merge of a whole table one):
 * a sweep's step also makes an eviction in its middle when a writer waits
 * (only sweeps merge here, and only 4096 rows of a step pass between two
 * of its 300 ms sleeps). */
static void test_evict_in_sweeps(void)
{
	sweep_part = 8 << 20;
	test_evict_in_merges_on(1);
	sweep_part = 0;
}

static const struct part {
	const char *name;
	void (*fn)(void);
} parts[] = {
	{ "basic", test_basic },
	{ "mixed", test_mixed },
	{ "refill", test_refill },
	{ "random", test_random },
	{ "snapshots", test_snap },
	{ "corruption", test_corrupt },
	{ "full", test_full },
	{ "crash", test_crash },
	{ "rounds", test_rounds },
	{ "threads", test_threads },
	{ "wait_evictions", test_wait_evictions },
	{ "early_start", test_early_start },
	{ "evict_in_merges", test_evict_in_merges },
	{ "evict_in_sweeps", test_evict_in_sweeps },
	{ "wait_one_run", test_wait_one_run },
	{ "runs", test_runs },
	{ "runs_random", runs_random },
	{ "runs_full", runs_full },
	{ "runs_threads", runs_threads },
	{ "runs_crash", runs_crash },
	{ "unlocked", test_unlocked },
	{ "runs_lists", runs_lists },
	{ "runs_hashed", runs_hashed },
	{ "runs_sweep", runs_sweep },
	{ "sweep_order", sweep_order },
	{ "sweep_kept", sweep_kept },
	{ "lookup_rounds", lookup_rounds },
	{ "kfilter", test_kfilter },
	{ "fresh", test_fresh },
	{ "sparse", test_sparse },
	{ "range", test_range },
	{ "trim_tomb", test_trim_tomb },
	{ "bulk", test_bulk },
	{ "bulk_policy", test_bulk_policy },
	{ "bulk_full", test_bulk_full },
	{ "bulk_crash", test_bulk_crash },
};

int main(int argc, char **argv)
{
	(void)argc;
	setvbuf(stdout, NULL, _IOLBF, 0);
	main_pid = getpid();
	snprintf(path, sizeof(path), "%s/%sspill-%d.pool",
		 access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp", test_prefix(), (int)main_pid);
	snprintf(spath, sizeof(spath), "/tmp/%sspill-%d.spill", test_prefix(), (int)main_pid);
	atexit(cleanup);
	const char *only = getenv("TEST_SPILL_ONLY"); /* one part by name, to repeat it */
	char how[160];
	snprintf(how, sizeof(how), "%s%s%s", only ? "TEST_SPILL_ONLY=" : "", only ? only : "", only ? " " : "");
	snprintf(how + strlen(how), sizeof(how) - strlen(how), "%s", argv[0]);
	seed = test_seed(how);
	int ran = 0;
	for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
		if (only && strcmp(only, parts[i].name))
			continue;
		part_no = i;
		npools = 0;
		parts[i].fn();
		printf("%s ok\n", parts[i].name);
		ran++;
	}
	if (!ran) {
		fprintf(stderr, "TEST_SPILL_ONLY=%s: no such part\n", only);
		return 1;
	}
	return 0;
}
