/*
 * Pool-damage fuzz (issue 10, items 9 and 10): a damaged pool is refused
 * with a one-line error or serves EIO for what is damaged; it never crashes
 * the process and never returns wrong bytes.
 *
 * One source pool is built: tables of four row sizes (dense with index
 * splits, sparse 40-bit ids, partly written rows, one unlinked and held only
 * by a snapshot, one empty), two snapshots with rows overwritten and deleted
 * in between (version chains, tombstones), rows created and deleted after the
 * last snapshot; the expected bytes of every row of every view are kept.
 * Each case copies the pool and damages the copy: one byte XORed with a
 * random value, or a zeroed 4 KiB block; the offset is drawn ~70% inside
 * allocated objects (enumerated with pmemobj_first/pmemobj_next on the clean
 * pool), ~5% in libpmemobj's first 8 lanes (their logs: store/lanes.c) and
 * ~25% anywhere in the file.  A child process then opens the copy
 * and, unless it is refused, reads every row of every view (gathers, and row
 * by row where a gather fails), walks the stored rows (SEEK_DATA), writes a
 * few rows into each table, reads everything again, closes, reopens and
 * reads again.  Outcomes: refused, clean, EIO (allowed and counted), WRONG
 * (bytes or presence differ from the expected ones) and crashed (a signal).
 * Any WRONG or crash fails the test; their seeds are printed.
 *
 * After the random cases, one fixed case: the slab bitmap bit of a.emb row
 * 1327's only version cleared (a lost bit must not let that slot be handed
 * out again: the row would then read as a hole, with no error).
 *
 * EMBFS_DAMAGE_CASES=N (default 300).  EMBFS_SEED=S replays the one case S
 * verbosely; it needs the same source pool (uuid and hash seed are random):
 * EMBFS_DAMAGE_POOL=PATH keeps the source pool there, or reuses it if it
 * exists.  A failing run keeps its source pool and prints how to replay.
 * EMBFS_DAMAGE_AT=OFF^X replays a damage a run printed ("byte OFF ^= X") on
 * any source pool (the objects' places do not depend on the random uuid),
 * OFF:0 zeroes the 4 KiB block at OFF.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libpmemobj.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "embfs/layout.h"
#include "embfs/store.h"
#include "helpers.h"

#define POOL_SIZE (24ull << 20)
#define NVIEWS 3 /* live, s1, s2 */
#define EXTRA 64 /* ids a case may add by writing */

static const char *snapname[NVIEWS] = { NULL, "s1", "s2" };

struct view {
	uint8_t *has;   /* per candidate id: stored in this view */
	uint8_t *bytes; /* n * rs expected bytes */
};

struct tab {
	const char *name;
	uint32_t dim, dtype, rs;
	size_t n, cap;
	uint64_t *ids;
	struct view v[NVIEWS];
	int in[NVIEWS]; /* the table exists in this view */
};

enum { TA, TB, TC, TZ, TE, NTAB };
static struct tab tabs[NTAB] = {
	[TA] = { "a.emb", 16, EMB_DT_F32, 64 },    /* dense, index splits */
	[TB] = { "b.emb", 100, EMB_DT_U8, 100 },   /* sparse 40-bit ids */
	[TC] = { "c.emb", 300, EMB_DT_F32, 1200 }, /* partly written rows */
	[TZ] = { "z.emb", 8, EMB_DT_F32, 32 },     /* unlinked: only in s1 */
	[TE] = { "e.emb", 4, EMB_DT_I16, 8 },      /* never written */
};

static int verbose;
static char err[512];

static uint64_t mix(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ull;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

static uint64_t rng_state;
static uint64_t rnd(void)
{
	rng_state += 0x9E3779B97F4A7C15ull;
	return mix(rng_state);
}

/* Bytes a write of generation gen puts into row id of table t. */
static void pattern(int t, uint64_t id, uint64_t gen, uint8_t *out, uint32_t len)
{
	uint64_t x = mix(((uint64_t)t << 56) ^ (id * 1000003) ^ (gen << 40));
	for (uint32_t i = 0; i < len; i++) {
		if (i % 8 == 0)
			x = mix(x);
		out[i] = (uint8_t)(x >> (8 * (i % 8)));
	}
}

static void tab_alloc(struct tab *t, size_t n)
{
	t->cap = n + EXTRA;
	t->ids = calloc(t->cap, sizeof(*t->ids));
	CHECK(t->ids);
	for (int w = 0; w < NVIEWS; w++) {
		t->v[w].has = calloc(t->cap, 1);
		t->v[w].bytes = calloc(t->cap, t->rs);
		CHECK(t->v[w].has && t->v[w].bytes);
	}
}

/* ---- building the source pool (s == NULL: only the model) ------------- */

struct group {
	struct store_rowop ops[1024];
	uint8_t buf[1024][1200];
	size_t n;
};
static struct group grp;
static uint64_t gen_ctr = 1;

static void group_flush(struct store *s, int t)
{
	if (s && grp.n) {
		uint32_t id;
		OK(store_table_lookup(s, tabs[t].name, &id));
		OK(store_rows_write(s, id, grp.ops, grp.n, 0));
	}
	grp.n = 0;
}

/* Write bytes [off, off+len) of candidate i of table t (len 0: delete). */
static void put(struct store *s, int t, size_t i, uint32_t off, uint32_t len, int del)
{
	struct tab *tb = &tabs[t];
	struct view *v = &tb->v[0];
	if (grp.n == 1024)
		group_flush(s, t);
	struct store_rowop *op = &grp.ops[grp.n];
	*op = (struct store_rowop){ tb->ids[i], off, len, NULL, 0 };
	if (del) {
		v->has[i] = 0;
		memset(v->bytes + i * tb->rs, 0, tb->rs);
	} else {
		pattern(t, tb->ids[i], gen_ctr++, grp.buf[grp.n], len);
		op->data = grp.buf[grp.n];
		if (!v->has[i])
			memset(v->bytes + i * tb->rs, 0, tb->rs);
		memcpy(v->bytes + i * tb->rs + off, grp.buf[grp.n], len);
		v->has[i] = 1;
	}
	grp.n++;
}

static void snap_model(int w)
{
	for (int t = 0; t < NTAB; t++) {
		struct tab *tb = &tabs[t];
		memcpy(tb->v[w].has, tb->v[0].has, tb->cap);
		memcpy(tb->v[w].bytes, tb->v[0].bytes, tb->cap * tb->rs);
		tb->in[w] = tb->in[0];
	}
}

static void partial(struct store *s, int t, size_t i)
{
	uint32_t rs = tabs[t].rs;
	uint32_t off = (uint32_t)(rnd() % rs);
	uint32_t len = 1 + (uint32_t)(rnd() % (rs - off));
	put(s, t, i, off, len, 0);
}

static void build(struct store *s)
{
	rng_state = 42;
	tab_alloc(&tabs[TA], 5300);
	tab_alloc(&tabs[TB], 800);
	tab_alloc(&tabs[TC], 200);
	tab_alloc(&tabs[TZ], 300);
	tab_alloc(&tabs[TE], 10);
	tabs[TA].n = 5300;
	for (size_t i = 0; i < 5000; i++)
		tabs[TA].ids[i] = i;
	for (size_t i = 5000; i < 5200; i++)
		tabs[TA].ids[i] = i;     /* written after s1 */
	for (size_t i = 5200; i < 5300; i++)
		tabs[TA].ids[i] = 1000 + i; /* written and partly deleted after s2 */
	tabs[TB].n = 800;
	for (size_t i = 0; i < 800; i++) {
		uint64_t id;
		int dup;
		do {
			id = rnd() & ((1ull << 40) - 1);
			dup = 0;
			for (size_t k = 0; k < i && !dup; k++)
				dup = tabs[TB].ids[k] == id;
		} while (dup);
		tabs[TB].ids[i] = id;
	}
	tabs[TC].n = 200;
	for (size_t i = 0; i < 200; i++)
		tabs[TC].ids[i] = 2 * i;
	tabs[TZ].n = 300;
	for (size_t i = 0; i < 300; i++)
		tabs[TZ].ids[i] = 7 * i;
	tabs[TE].n = 10;
	for (size_t i = 0; i < 10; i++)
		tabs[TE].ids[i] = i;

	uint32_t id;
	for (int t = 0; t < NTAB; t++) {
		if (s)
			OK(store_table_create(s, tabs[t].name, 0644, 0, 0, tabs[t].dim, tabs[t].dtype, &id));
		tabs[t].in[0] = 1;
	}
	/* phase 1: every table gets its rows (every 97th of a.emb stays a hole) */
	for (size_t i = 0; i < 5000; i++)
		if (i % 97 != 5)
			put(s, TA, i, 0, 64, 0);
	group_flush(s, TA);
	for (size_t i = 0; i < 800; i++)
		put(s, TB, i, 0, 100, 0);
	group_flush(s, TB);
	for (size_t i = 0; i < 200; i++)
		partial(s, TC, i);
	group_flush(s, TC);
	for (size_t i = 0; i < 300; i++)
		put(s, TZ, i, 0, 32, 0);
	group_flush(s, TZ);
	if (s)
		OK(store_snap_create(s, "s1", 1, NULL));
	snap_model(1);

	/* phase 2: overwrites, deletes (tombstones: s1 needs the old rows),
	 * new rows; z.emb unlinked and released: a zombie s1 holds */
	for (size_t i = 0; i < 5200; i++) {
		if (i % 10 == 1 && i < 5000)
			put(s, TA, i, 0, 0, 1);
		else if (i % 3 == 0 || i >= 5000)
			put(s, TA, i, 0, 64, 0);
	}
	group_flush(s, TA);
	for (size_t i = 0; i < 800; i++) {
		if (i % 7 == 3)
			put(s, TB, i, 0, 0, 1);
		else if (i % 4 == 0)
			put(s, TB, i, 0, 100, 0);
	}
	group_flush(s, TB);
	for (size_t i = 0; i < 200; i += 2)
		partial(s, TC, i);
	group_flush(s, TC);
	if (s) {
		OK(store_table_lookup(s, "z.emb", &id));
		OK(store_table_unlink(s, "z.emb"));
		OK(store_table_release(s, id));
		OK(store_batch_set(s, store_batch_get(s) + 5));
		OK(store_snap_create(s, "s2", 1, NULL));
	}
	tabs[TZ].in[0] = 0;
	snap_model(2);

	/* phase 3: chains three deep, deletes, re-created rows; rows created
	 * after s2 and some of them deleted again (no tombstone needed) */
	for (size_t i = 0; i < 5200; i++) {
		if (i % 11 == 2)
			put(s, TA, i, 0, 0, 1);
		else if (i % 5 == 0)
			put(s, TA, i, 0, 64, 0);
	}
	group_flush(s, TA);
	for (size_t i = 5200; i < 5300; i++)
		put(s, TA, i, 0, 64, 0);
	group_flush(s, TA);
	for (size_t i = 5200; i < 5300; i += 2)
		put(s, TA, i, 0, 0, 1);
	group_flush(s, TA);
	for (size_t i = 0; i < 800; i++)
		if (i % 6 == 1)
			partial(s, TB, i);
	group_flush(s, TB);
}

static void build_pool(const char *path)
{
	struct store_mkfs_opts o = { .size = POOL_SIZE, .force = 1, .label = "damage" };
	struct store *s;
	unlink(path);
	if (store_mkfs(path, &o, err, sizeof(err)) || store_open(path, &s, err, sizeof(err))) {
		fprintf(stderr, "pool: %s\n", err);
		exit(1);
	}
	build(s);
	struct store_fsck f;
	OK(store_fsck(s, &f));
	CHECK(!f.bad_versions && !f.double_refs && !f.leaked_slots && !f.bad_counts);
	store_close(s);
}

/* ---- one case, in a child process ------------------------------------ */

struct outcome {
	uint64_t eio, wrong, other;
};

static void wrong(struct outcome *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void wrong(struct outcome *o, const char *fmt, ...)
{
	if (o->wrong++ < 10) {
		va_list ap;
		va_start(ap, fmt);
		fprintf(stderr, "  WRONG: ");
		vfprintf(stderr, fmt, ap);
		fputc('\n', stderr);
		va_end(ap);
	}
}

static void io_err(struct outcome *o, int r, const char *what)
{
	if (r == -EIO) {
		o->eio++;
		return;
	}
	o->other++;
	if (verbose || o->other < 4)
		fprintf(stderr, "  %s: %s\n", what, strerror(-r));
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Compare the stored rows a SEEK_DATA walk finds with the view. */
static void walk_view(struct store *s, int t, int w, uint32_t sidx, uint32_t id, struct outcome *o)
{
	struct tab *tb = &tabs[t];
	uint64_t *want = malloc(tb->cap * sizeof(*want));
	size_t nw = 0, k = 0;
	CHECK(want);
	for (size_t i = 0; i < tb->n; i++)
		if (tb->v[w].has[i])
			want[nw++] = tb->ids[i];
	qsort(want, nw, sizeof(*want), cmp_u64);
	uint64_t from = 0, found;
	for (;;) {
		int r = w ? t_snap_row_next(s, sidx, id, from, &found) : t_row_next(s, id, from, &found);
		if (r < 0) {
			io_err(o, r, "walk");
			break;
		}
		if (r == 0) {
			if (k < nw)
				wrong(o, "%s view %d: walk ends before stored row %" PRIu64, tb->name, w, want[k]);
			break;
		}
		if (k >= nw || found != want[k]) {
			wrong(o, "%s view %d: walk finds row %" PRIu64 ", expected %" PRIu64, tb->name, w, found,
			      k < nw ? want[k] : UINT64_MAX);
			break;
		}
		k++;
		from = found + 1;
	}
	free(want);
}

/* Read every candidate row of table t in view w and compare. */
static void read_view(struct store *s, int t, int w, struct outcome *o)
{
	struct tab *tb = &tabs[t];
	struct view *v = &tb->v[w];
	uint32_t id = 0, sidx = 0;
	int r;
	if (w) {
		struct store_snap sn;
		r = store_snap_lookup(s, snapname[w], &sn);
		if (r) {
			wrong(o, "snapshot %s: %s", snapname[w], strerror(-r));
			return;
		}
		sidx = sn.idx;
		r = store_snap_table_lookup(s, sidx, tb->name, &id);
	} else {
		r = store_table_lookup(s, tb->name, &id);
	}
	if (!tb->in[w]) {
		if (r == 0)
			wrong(o, "%s view %d: an unlinked table is there", tb->name, w);
		return;
	}
	if (r) {
		wrong(o, "%s view %d: lookup: %s", tb->name, w, strerror(-r));
		return;
	}
	struct store_attr a;
	r = w ? t_snap_table_getattr(s, sidx, id, &a) : store_table_getattr(s, id, &a);
	if (r || a.row_size != tb->rs) {
		wrong(o, "%s view %d: getattr %d, row_size %u", tb->name, w, r, r ? 0 : a.row_size);
		return;
	}
	uint32_t rs = tb->rs;
	uint8_t *buf = malloc(512 * rs), stored[512];
	CHECK(buf);
	for (size_t i0 = 0; i0 < tb->n; i0 += 512) {
		size_t n = tb->n - i0 < 512 ? tb->n - i0 : 512;
		r = w ? t_snap_rows_read(s, sidx, id, tb->ids + i0, n, buf, stored)
		      : t_rows_read(s, id, tb->ids + i0, n, buf, stored);
		for (size_t k = 0; k < n; k++) {
			size_t i = i0 + k;
			if (r) { /* a failed gather: row by row */
				int rr = w ? t_snap_row_read(s, sidx, id, tb->ids[i], buf + k * rs)
					   : t_row_read(s, id, tb->ids[i], buf + k * rs);
				if (rr < 0) {
					io_err(o, rr, "row read");
					continue;
				}
				stored[k] = (uint8_t)rr;
			}
			if (stored[k] != v->has[i])
				wrong(o, "%s view %d row %" PRIu64 ": %s, expected %s", tb->name, w, tb->ids[i],
				      stored[k] ? "stored" : "a hole", v->has[i] ? "stored" : "a hole");
			else if (memcmp(buf + k * rs, v->bytes + i * rs, rs))
				wrong(o, "%s view %d row %" PRIu64 ": wrong bytes", tb->name, w, tb->ids[i]);
		}
		if (r && r != -EIO)
			io_err(o, r, "gather");
	}
	free(buf);
	walk_view(s, t, w, sidx, id, o);
}

static void read_all(struct store *s, struct outcome *o)
{
	for (int w = 0; w < NVIEWS; w++)
		for (int t = 0; t < NTAB; t++)
			read_view(s, t, w, o);
}

/* A few writes into each live table: overwrites, partial writes, new rows,
 * a delete.  A write that fails must change nothing. */
static void write_some(struct store *s, struct outcome *o)
{
	static const int wt[] = { TA, TB, TC };
	for (size_t k = 0; k < sizeof(wt) / sizeof(wt[0]); k++) {
		int t = wt[k];
		struct tab *tb = &tabs[t];
		uint32_t id;
		if (store_table_lookup(s, tb->name, &id))
			continue; /* reported by the reads */
		struct tab save = *tb;
		uint8_t *has = malloc(tb->cap), *bytes = malloc(tb->cap * tb->rs);
		CHECK(has && bytes);
		memcpy(has, tb->v[0].has, tb->cap);
		memcpy(bytes, tb->v[0].bytes, tb->cap * tb->rs);
		size_t used[8], nu = 0;
		grp.n = 0;
		for (int j = 0; j < 8 && tb->n < tb->cap; j++) {
			size_t i;
			int dup;
			if (j == 5 || j == 6) { /* a new row */
				i = tb->n++;
				tb->ids[i] = (1ull << 41) + (rnd() & 0xffffff);
				tb->v[0].has[i] = 0;
			} else {
				i = rnd() % save.n;
			}
			dup = 0;
			for (size_t m = 0; m < nu; m++)
				dup |= used[m] == i || tabs[t].ids[used[m]] == tb->ids[i];
			if (dup)
				continue;
			used[nu++] = i;
			if (j == 7)
				put(NULL, t, i, 0, 0, 1);
			else if (j == 3 || j == 4)
				partial(NULL, t, i);
			else
				put(NULL, t, i, 0, tb->rs, 0);
		}
		int r = store_rows_write(s, id, grp.ops, grp.n, 0);
		grp.n = 0;
		if (r) {
			if (r != -ENOSPC)
				io_err(o, r, "write");
			tb->n = save.n;
			memcpy(tb->v[0].has, has, tb->cap);
			memcpy(tb->v[0].bytes, bytes, tb->cap * tb->rs);
		}
		free(has);
		free(bytes);
	}
}

/* A case's outcome is its child's exit status; any other status (a failed
 * CHECK, a sanitizer's report) or a signal counts as a crash. */
enum { X_CLEAN = 20, X_EIO, X_REFUSED, X_WRONG, X_MULTILINE, X_REOPEN };

/* Reads found errors: the pool must have counted them. */
static void counted(struct store *s, struct outcome *o)
{
	struct store_stats st;
	store_stats_get(s, &st);
	if (o->eio && !st.checksum_errors)
		wrong(o, "%" PRIu64 " EIOs, checksum_errors 0", o->eio);
}

static int run_case(const char *path)
{
	struct outcome o = { 0 };
	struct store *s;
	alarm(120);
	if (store_open(path, &s, err, sizeof(err))) {
		if (verbose)
			printf("  refused: %s\n", err);
		return strchr(err, '\n') ? X_MULTILINE : X_REFUSED;
	}
	read_all(s, &o);
	write_some(s, &o);
	read_all(s, &o);
	counted(s, &o);
	store_close(s);
	if (store_open(path, &s, err, sizeof(err))) {
		printf("  refused on reopen: %s\n", err);
		return o.wrong ? X_WRONG : X_REOPEN;
	}
	uint64_t eio = o.eio;
	o.eio = 0;
	read_all(s, &o);
	counted(s, &o);
	store_close(s);
	o.eio += eio;
	if (verbose)
		printf("  eio %" PRIu64 ", other errors %" PRIu64 ", wrong %" PRIu64 "\n", o.eio, o.other, o.wrong);
	return o.wrong ? X_WRONG : (o.eio || o.other) ? X_EIO : X_CLEAN;
}

/* ---- damage ------------------------------------------------------------ */

struct obj {
	uint64_t off, size;
};
static struct obj *objs;
static size_t nobjs;
static uint64_t obj_bytes;

/* Allocated objects of the clean pool (opened copy-on-write). */
static void enum_objects(const char *path)
{
	int one = 1, zero = 0;
	pmemobj_ctl_set(NULL, "copy_on_write.at_open", &one);
	PMEMobjpool *pop = pmemobj_open(path, EMB_LAYOUT);
	pmemobj_ctl_set(NULL, "copy_on_write.at_open", &zero);
	CHECK(pop);
	size_t cap = 64;
	objs = malloc(cap * sizeof(*objs));
	CHECK(objs);
	PMEMoid root = pmemobj_root(pop, 0);
	objs[nobjs++] = (struct obj){ root.off, pmemobj_root_size(pop) };
	for (PMEMoid o = pmemobj_first(pop); !OID_IS_NULL(o); o = pmemobj_next(o)) {
		if (nobjs == cap) {
			cap *= 2;
			objs = realloc(objs, cap * sizeof(*objs));
			CHECK(objs);
		}
		objs[nobjs++] = (struct obj){ o.off, pmemobj_alloc_usable_size(o) };
	}
	for (size_t i = 0; i < nobjs; i++)
		obj_bytes += objs[i].size;
	pmemobj_close(pop);
}

/* XOR byte off of buf with x, or (x 0) zero the 4 KiB block holding it;
 * describe it in what ("in" where). */
static void damage_apply(uint8_t *buf, uint64_t len, uint64_t off, unsigned x, const char *where, char *what,
			 size_t n)
{
	if (x) {
		buf[off] ^= (uint8_t)x;
		snprintf(what, n, "byte %" PRIu64 " ^= 0x%02x (in %s)", off, x, where);
	} else {
		off &= ~4095ull;
		memset(buf + off, 0, 4096 < len - off ? 4096 : len - off);
		snprintf(what, n, "4 KiB at %" PRIu64 " zeroed (in %s)", off, where);
	}
}

/* Damage buf (the pool copy) as case `seed` says; describe it in what. */
static void damage(uint8_t *buf, uint64_t len, uint64_t seed, char *what, size_t n)
{
	rng_state = seed;
	uint64_t pick = rnd() % 100, off;
	const char *where;
	if (pick < 35) {
		uint64_t b = rnd() % obj_bytes;
		size_t i = 0;
		while (b >= objs[i].size)
			b -= objs[i++].size;
		off = objs[i].off + b;
		where = "an object's byte";
	} else if (pick < 70) {
		size_t i = rnd() % nobjs;
		off = objs[i].off + rnd() % objs[i].size;
		where = "an object";
	} else if (pick < 75) {
		uint64_t lanes;
		memcpy(&lanes, buf + 5120, 8); /* libpmemobj's pool descriptor */
		off = (lanes + rnd() % (8 * 3072)) % len;
		where = "libpmemobj's first lanes";
	} else {
		off = rnd() % len;
		where = "the file";
	}
	unsigned x = rnd() % 2 ? (unsigned)(1 + rnd() % 255) : 0;
	damage_apply(buf, len, off, x, where, what, n);
}

/* EMBFS_DAMAGE_AT ("OFF^X" or "OFF:0"), parsed: x 0 zeroes a block. */
struct at_damage {
	uint64_t off;
	unsigned x;
};

static int at_parse(const char *at, struct at_damage *d)
{
	char *end, *e2;
	errno = 0;
	d->off = strtoull(at, &end, 0);
	if (errno || end == at || *at == '-')
		return -1;
	if (!strcmp(end, ":0")) {
		d->x = 0;
		return 0;
	}
	if (*end != '^')
		return -1;
	unsigned long x = strtoul(end + 1, &e2, 0);
	if (e2 == end + 1 || *e2 || x == 0 || x > 255)
		return -1;
	d->x = (unsigned)x;
	return 0;
}

/* Damage buf as d says; -1 if its offset is past the pool. */
static int damage_at(uint8_t *buf, uint64_t len, const struct at_damage *d, char *what, size_t n)
{
	if (d->off >= len)
		return -1;
	damage_apply(buf, len, d->off, d->x, "the place given", what, n);
	return 0;
}

/* The fixed case: clear the bitmap bit of the one version of a.emb row
 * 1327 (written once, before both snapshots), found by its key in the
 * slabs of a.emb's slot size.  0, or -1 if it is not found exactly once. */
#define LOST_ROW 1327
static int damage_lost_bit(uint8_t *buf, uint64_t len, char *what, size_t n)
{
	uint32_t ss = (uint32_t)sizeof(struct emb_version) + tabs[TA].rs;
	uint64_t hit = 0, found = 0;
	for (size_t i = 0; i < nobjs; i++) {
		for (uint64_t o = (objs[i].off + 63) & ~63ull; o + sizeof(struct emb_slab) <= objs[i].off + objs[i].size;
		     o += 64) {
			struct emb_slab h;
			memcpy(&h, buf + o, sizeof(h));
			if (h.magic != EMB_SLAB_MAGIC || h.slot_size != ss || o + h.data_off + (uint64_t)h.nslots * ss > len)
				continue;
			for (uint32_t k = 0; k < h.nslots; k++) {
				uint64_t key;
				memcpy(&key, buf + o + h.data_off + (uint64_t)k * ss, 8);
				if (key == LOST_ROW) {
					hit = o + sizeof(struct emb_slab) + (k / 64) * 8;
					buf[hit + (k % 64) / 8] &= (uint8_t)~(1u << (k % 8));
					found++;
				}
			}
			break; /* one slab per object */
		}
	}
	snprintf(what, n, "the bitmap bit of a.emb row %d's version cleared (byte %" PRIu64 ")", LOST_ROW, hit);
	return found == 1 ? 0 : -1;
}

/* An early exit: the case copy goes, and the source pool unless kept. */
static void drop_pools(const char *keep, const char *src, const char *cpath)
{
	unlink(cpath);
	if (!keep)
		unlink(src);
}

static uint8_t *slurp(const char *path, uint64_t *len)
{
	int fd = open(path, O_RDONLY);
	struct stat st;
	CHECK(fd >= 0 && fstat(fd, &st) == 0);
	uint8_t *b = malloc((size_t)st.st_size);
	CHECK(b);
	CHECK(pread(fd, b, (size_t)st.st_size, 0) == st.st_size);
	close(fd);
	*len = (uint64_t)st.st_size;
	return b;
}

static void spit(const char *path, const uint8_t *b, uint64_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	CHECK(fd >= 0);
	CHECK(pwrite(fd, b, len, 0) == (ssize_t)len);
	close(fd);
}

enum { R_CLEAN, R_EIO, R_REFUSED, R_WRONG, R_MULTILINE, R_REOPEN, R_CRASH, NR };
static const char *rname[NR] = { "clean", "EIO", "refused", "WRONG", "refused with several lines",
				  "refused on reopen", "crashed" };

int main(void)
{
	const char *dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
	const char *keep = getenv("EMBFS_DAMAGE_POOL");
	const char *replay = getenv("EMBFS_SEED");
	const char *at = getenv("EMBFS_DAMAGE_AT");
	struct at_damage atd = { 0, 0 };
	if (at && at_parse(at, &atd)) {
		fprintf(stderr, "EMBFS_DAMAGE_AT=%s: want OFF^X (X 1..255) or OFF:0\n", at);
		return 2;
	}
	int ncases = getenv("EMBFS_DAMAGE_CASES") ? atoi(getenv("EMBFS_DAMAGE_CASES")) : 300;
	char src[256], cpath[256];
	int reuse = keep && access(keep, R_OK) == 0;
	setvbuf(stdout, NULL, _IOLBF, 0);
	snprintf(src, sizeof(src), "%s", keep ? keep : "");
	if (!keep)
		snprintf(src, sizeof(src), "%s/%sdamage-src-%d", dir, test_prefix(), (int)getpid());
	snprintf(cpath, sizeof(cpath), "%s/%sdamage-case-%d", dir, test_prefix(), (int)getpid());
	if (reuse)
		build(NULL);
	else
		build_pool(src);
	enum_objects(src);
	uint64_t len;
	uint8_t *clean = slurp(src, &len), *buf = malloc(len);
	CHECK(buf);

	uint64_t base = (uint64_t)time(NULL) * 1000003u ^ (uint64_t)getpid();
	if (replay || at) {
		ncases = 1;
		verbose = 1;
	}
	printf("damage fuzz: %d cases, %zu objects (%" PRIu64 " KiB) in a %" PRIu64 " MiB pool, seeds from %" PRIu64 "\n",
	       ncases, nobjs, obj_bytes >> 10, len >> 20, base);
	uint64_t count[NR] = { 0 };
	char bad[4096] = "";
	size_t nbad = 0;
	/* the random cases, then (unless one case is replayed) the fixed one */
	int fixed = !replay && !at;
	for (int c = 0; c < ncases + fixed; c++) {
		uint64_t seed = replay ? strtoull(replay, NULL, 0) : mix(base + (uint64_t)c);
		char what[160];
		memcpy(buf, clean, len);
		if (c == ncases) {
			seed = 0;
			if (damage_lost_bit(buf, len, what, sizeof(what))) {
				printf("the fixed case: a.emb row %d's version is not in a slab exactly once\n", LOST_ROW);
				drop_pools(keep, src, cpath);
				return 1;
			}
		} else if (at) {
			seed = replay ? seed : 0;
			if (damage_at(buf, len, &atd, what, sizeof(what))) {
				fprintf(stderr, "EMBFS_DAMAGE_AT=%s: the pool is %" PRIu64 " bytes\n", at, len);
				drop_pools(keep, src, cpath);
				return 2;
			}
		} else {
			damage(buf, len, seed, what, sizeof(what));
		}
		spit(cpath, buf, len);
		if (verbose)
			printf("case %" PRIu64 ": %s\n", seed, what);
		fflush(stdout);
		pid_t p = fork();
		CHECK(p >= 0);
		if (p == 0) {
			rng_state = seed ^ 0x5555;
			_exit(run_case(cpath));
		}
		int st;
		CHECK(waitpid(p, &st, 0) == p);
		int x = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
		int r = x == X_CLEAN ? R_CLEAN
		       : x == X_EIO ? R_EIO
		       : x == X_REFUSED ? R_REFUSED
		       : x == X_WRONG ? R_WRONG
		       : x == X_MULTILINE ? R_MULTILINE
		       : x == X_REOPEN ? R_REOPEN
		       : R_CRASH;
		count[r]++;
		if (r == R_WRONG || r == R_CRASH || r == R_MULTILINE || r == R_REOPEN) {
			char how[64] = "";
			if (WIFSIGNALED(st))
				snprintf(how, sizeof(how), " (%s)", WTERMSIG(st) == SIGALRM ? "hung" : strsignal(WTERMSIG(st)));
			else if (r == R_CRASH)
				snprintf(how, sizeof(how), " (exit status %d)", x);
			if (c == ncases)
				printf("the fixed case: %s: %s%s (it replays by itself)\n", what, rname[r], how);
			else
				printf("case %" PRIu64 ": %s: %s%s\n", seed, what, rname[r], how);
			if (nbad < 40 && c < ncases)
				snprintf(bad + strlen(bad), sizeof(bad) - strlen(bad), " %" PRIu64, seed);
			nbad++;
		} else if (verbose) {
			printf("  -> %s\n", rname[r]);
		}
	}
	unlink(cpath);
	printf("damage fuzz:");
	for (int r = 0; r < NR; r++)
		printf(" %s %" PRIu64 "%s", rname[r], count[r], r + 1 < NR ? "," : "\n");
	free(buf);
	free(clean);
	if (nbad) {
		if (!keep && bad[0]) {
			char kept[300];
			snprintf(kept, sizeof(kept), "%s.kept", src);
			rename(src, kept);
			printf("replay: EMBFS_DAMAGE_POOL=%s EMBFS_SEED=SEED %s (seeds:%s)\n", kept, "build/tests/test_damage", bad);
		} else if (!keep) {
			unlink(src); /* only the fixed case failed: it needs no source pool */
		}
		return 1;
	}
	if (!keep)
		unlink(src);
	return 0;
}
