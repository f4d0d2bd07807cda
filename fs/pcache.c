/*
 * The kernel's page cache of tables, against changes the daemon makes behind
 * its back (README "Batched rows", "mmap").
 *
 * Tables are opened with keep_cache and every write(2) goes through the
 * kernel, so its pages stay coherent with one exception: a SCATTER changes
 * rows the kernel may hold pages of.  batch.c then has those pages dropped
 * (fuse_lowlevel_notify_inval_inode, from its notifier thread), but a page a
 * shared mapping dirtied is first written back whole (FUSE_WRITE_CACHE:
 * fi->writepage), and until it is dropped the mapping may write it back any
 * number of times: its stale copies of the scattered rows would overwrite
 * them.  So:
 *
 *  - A table is "cached" when a READ or WRITE of it arrived after the start
 *    of the last completed invalidation: only then may the kernel hold its
 *    pages (an invalidation waits for pages being read and drops them).
 *  - A scatter into a cached table "captures": before writing, it pins an
 *    entry per row and records hashes of what each row held (XXH3 of each
 *    piece of the row within one page, seeded with the piece's index, so
 *    rows across pages compare page by page).  READs and WRITEs that overlap
 *    a capturing scatter add what they served or wrote to the entries of
 *    their rows (a page may hold it).  When its rows are written the
 *    scatter stamps its hashes with the clock; a hash goes once an
 *    invalidation that started after that stamp has returned.
 *  - A write-back skips each whole piece whose bytes hash to a stale piece
 *    of its row (the mapping did not change it) and applies the rest.  Write-
 *    backs and capturing scatters of a table exclude each other, so a piece
 *    is never judged before a capture and applied after the scatter.
 *  - A scatter into a table that is not cached captures nothing (no extra
 *    read); READs and WRITEs of the table that arrive meanwhile wait for it.
 *
 * Bounded: entries and hashes take at most PC_MAX_BYTES; a capturing
 * scatter that would exceed it waits for invalidations to free room, at most
 * PC_WAIT_S seconds, then fails with EAGAIN, having changed nothing.
 * Nothing here calls into the kernel or waits for a FUSE request, except
 * that wait for room (bounded).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "fs.h"

#define PC_MAX_BYTES (64ull << 20)
#define PC_WAIT_S 5
#define PC_EMPTY UINT64_MAX     /* free slot of a map */
#define PC_PINNED UINT64_MAX    /* hash stamp while a scatter of its row runs */
#define PC_CHUNK (1u << 20)     /* capture reads this many bytes of rows at a time */
#define PC_INLINE 2             /* hashes an entry holds without an allocation */
#define PC_KEEP_SLOTS 4096u     /* a map this small is kept when it empties */

/* Entries, maps and table states are protected by pcache.lock (but
 * pc_tab.pin_seq, also read without it). */

/* One stale version of one piece of a row. */
struct pc_hash {
	uint64_t h;
	uint64_t stamp;   /* clock when it became droppable; PC_PINNED */
};

/* A row a scatter changed while its table was cached. */
struct pc_ent {
	uint64_t row;     /* PC_EMPTY: free slot */
	uint32_t pins;    /* capturing scatters of this row in progress */
	uint32_t n, cap;  /* hashes; room in v (0: they are in in[]) */
	struct pc_hash *v;
	struct pc_hash in[PC_INLINE];
};

static struct pc_hash *hv(struct pc_ent *e)
{
	return e->v ? e->v : e->in;
}

/* A table's entries: open addressing by row id. */
struct pc_map {
	struct pc_ent *e;
	uint32_t cap, n;
	uint32_t rs;      /* row size the hashes were taken at */
};

struct pc_tab {
	uint64_t io;      /* clock at the last READ/WRITE's arrival */
	uint64_t clean;   /* clock at the start of the last completed invalidation */
	uint32_t nocap;   /* scatters running that captured nothing */
	uint32_t capt;    /* capturing scatters running */
	uint32_t wp;      /* write-backs being applied */
	uint32_t wpw;     /* write-backs waiting for capturing scatters (which new ones let pass) */
	struct pc_map *map;
	_Atomic uint64_t pin_seq; /* capturing scatters begun (read without lock) */
};

struct pcache {
	pthread_mutex_t lock;  /* protects everything below but the counters */
	pthread_cond_t cv;     /* nocap, capt, wp and bytes went down */
	uint64_t clock;
	uint64_t bytes;        /* entries and hashes */
	uint32_t page;
	struct pc_tab *tab;    /* by table id */
	_Atomic uint64_t n_capture, n_captured_rows, n_nocapture, n_writepages, n_skipped;
	_Atomic uint64_t n_recorded, n_io_waits, n_room_waits, n_refused;
};

#define INC(pc, f, v) atomic_fetch_add_explicit(&(pc)->f, (uint64_t)(v), memory_order_relaxed)

int pc_init(struct embfs *fs)
{
	struct pcache *pc = calloc(1, sizeof(*pc));
	if (!pc)
		return -ENOMEM;
	pc->tab = calloc(CACHE_MAX_TABLES, sizeof(*pc->tab));
	if (!pc->tab) {
		free(pc);
		return -ENOMEM;
	}
	long pg = sysconf(_SC_PAGESIZE);
	pc->page = pg > 0 ? (uint32_t)pg : 4096;
	pthread_mutex_init(&pc->lock, NULL);
	pthread_cond_init(&pc->cv, NULL);
	fs->pc = pc;
	return 0;
}

static void map_free(struct pcache *pc, struct pc_map *m)
{
	if (!m)
		return;
	for (uint32_t i = 0; i < m->cap; i++) {
		if (m->e[i].row != PC_EMPTY) {
			pc->bytes -= (uint64_t)m->e[i].cap * sizeof(struct pc_hash);
			free(m->e[i].v);
		}
	}
	pc->bytes -= (uint64_t)m->cap * sizeof(struct pc_ent) + sizeof(*m);
	free(m->e);
	free(m);
}

void pc_destroy(struct embfs *fs)
{
	struct pcache *pc = fs->pc;
	if (!pc)
		return;
	fs->pc = NULL;
	for (uint32_t i = 0; i < CACHE_MAX_TABLES; i++)
		map_free(pc, pc->tab[i].map);
	pthread_cond_destroy(&pc->cv);
	pthread_mutex_destroy(&pc->lock);
	free(pc->tab);
	free(pc);
}

/* ---- a table's entries (pc->lock held) -------------------------------- */

static uint32_t row_slot(uint64_t row, uint32_t cap)
{
	return (uint32_t)((row * 0x9E3779B97F4A7C15ull) >> 32) & (cap - 1);
}

static struct pc_ent *ent_find(struct pc_map *m, uint64_t row)
{
	if (!m || !m->n)
		return NULL;
	for (uint32_t i = row_slot(row, m->cap);; i = (i + 1) & (m->cap - 1)) {
		if (m->e[i].row == row)
			return &m->e[i];
		if (m->e[i].row == PC_EMPTY)
			return NULL;
	}
}

/* Rehash the entries worth keeping into a table of cap slots. */
static int map_rebuild(struct pcache *pc, struct pc_map *m, uint32_t cap)
{
	struct pc_ent *ne = malloc((size_t)cap * sizeof(*ne));
	if (!ne)
		return -ENOMEM;
	for (uint32_t i = 0; i < cap; i++)
		ne[i].row = PC_EMPTY;
	uint32_t n = 0;
	for (uint32_t i = 0; i < m->cap; i++) {
		struct pc_ent *e = &m->e[i];
		if (e->row == PC_EMPTY)
			continue;
		if (!e->n && !e->pins) {
			pc->bytes -= (uint64_t)e->cap * sizeof(struct pc_hash);
			free(e->v);
			continue;
		}
		uint32_t j = row_slot(e->row, cap);
		while (ne[j].row != PC_EMPTY)
			j = (j + 1) & (cap - 1);
		ne[j] = *e;
		n++;
	}
	pc->bytes += (uint64_t)cap * sizeof(*ne);
	pc->bytes -= (uint64_t)m->cap * sizeof(*ne);
	free(m->e);
	m->e = ne;
	m->cap = cap;
	m->n = n;
	return 0;
}

static struct pc_ent *ent_get(struct pcache *pc, struct pc_map *m, uint64_t row)
{
	struct pc_ent *e = ent_find(m, row);
	if (e)
		return e;
	if ((m->n + 1) * 2 > m->cap && map_rebuild(pc, m, m->cap ? m->cap * 2 : 256))
		return NULL;
	uint32_t i = row_slot(row, m->cap);
	while (m->e[i].row != PC_EMPTY)
		i = (i + 1) & (m->cap - 1);
	m->e[i] = (struct pc_ent){ .row = row };
	m->n++;
	return &m->e[i];
}

static int hash_has(struct pc_ent *e, uint64_t h)
{
	const struct pc_hash *v = hv(e);
	for (uint32_t i = 0; i < e->n; i++)
		if (v[i].h == h)
			return 1;
	return 0;
}

/* Add a stale piece hash (an existing one keeps the later stamp). */
static int hash_add(struct pcache *pc, struct pc_ent *e, uint64_t h, uint64_t stamp)
{
	struct pc_hash *v = hv(e);
	for (uint32_t i = 0; i < e->n; i++) {
		if (v[i].h == h) {
			if (stamp > v[i].stamp)
				v[i].stamp = stamp;
			return 0;
		}
	}
	uint32_t room = e->v ? e->cap : PC_INLINE;
	if (e->n == room) {
		uint32_t nc = 2 * room;
		v = e->v ? realloc(e->v, nc * sizeof(*v)) : malloc(nc * sizeof(*v));
		if (!v)
			return -ENOMEM;
		if (!e->v)
			memcpy(v, e->in, sizeof(e->in));
		pc->bytes += (uint64_t)(nc - e->cap) * sizeof(*v);
		e->v = v;
		e->cap = nc;
	}
	v[e->n++] = (struct pc_hash){ h, stamp };
	return 0;
}

/* ---- pieces: a row cut at page boundaries ----------------------------- */

struct piece {
	uint64_t row;
	uint64_t lo, hi;  /* file bytes [lo, hi) */
	uint32_t k;       /* index of the piece in its row */
};

/* Next whole piece inside [off, end) from *pos on (rows of rs bytes, pages
 * of pg): 1 with p filled, 0 when there is none. */
static int piece_next(uint64_t *pos, uint64_t off, uint64_t end, uint32_t rs, uint32_t pg, struct piece *p)
{
	while (*pos < end) {
		uint64_t row = *pos / rs, rstart = row * rs, rend = rstart + rs;
		uint64_t lo = *pos, hi = (lo / pg + 1) * pg;
		if (hi > rend)
			hi = rend;
		*pos = hi;
		if (lo < off || hi > end)
			continue; /* only partly inside */
		p->row = row;
		p->lo = lo;
		p->hi = hi;
		p->k = (uint32_t)((lo / pg) - (rstart / pg));
		return 1;
	}
	return 0;
}

/* Where the walk over [off, end) starts: the first piece boundary at or after off. */
static uint64_t piece_start(uint64_t off, uint32_t rs, uint32_t pg)
{
	uint64_t a = (off + rs - 1) / rs * rs, b = (off + pg - 1) / pg * pg;
	return a < b ? a : b;
}

static uint64_t piece_hash(const char *p, size_t len, uint32_t k)
{
	return XXH3_64bits_withSeed(p, len, k);
}

/* ---- READ and WRITE --------------------------------------------------- */

void pc_io_begin(struct embfs *fs, uint32_t id, struct pc_io *io)
{
	struct pcache *pc = fs->pc;
	memset(io, 0, sizeof(*io));
	if (!pc || id >= CACHE_MAX_TABLES)
		return;
	struct pc_tab *t = &pc->tab[id];
	pthread_mutex_lock(&pc->lock);
	t->io = ++pc->clock;
	if (t->nocap) {
		INC(pc, n_io_waits, 1);
		while (t->nocap)
			pthread_cond_wait(&pc->cv, &pc->lock);
	}
	io->capt = t->capt;
	io->pin_seq = atomic_load(&t->pin_seq);
	io->valid = 1;
	pthread_mutex_unlock(&pc->lock);
}

void pc_io_done(struct embfs *fs, uint32_t id, uint32_t rs, uint64_t off, size_t len, const char *buf,
		const struct pc_io *io)
{
	struct pcache *pc = fs->pc;
	if (!pc || !io->valid)
		return;
	struct pc_tab *t = &pc->tab[id];
	if (!io->capt && atomic_load(&t->pin_seq) == io->pin_seq)
		return; /* no capturing scatter overlapped it */
	uint64_t end = off + len, pos = piece_start(off, rs, pc->page);
	struct piece p;
	pthread_mutex_lock(&pc->lock);
	struct pc_map *m = t->map;
	if (m && m->rs == rs) {
		while (piece_next(&pos, off, end, rs, pc->page, &p)) {
			struct pc_ent *e = ent_find(m, p.row);
			if (!e)
				continue;
			uint64_t h = piece_hash(buf + (p.lo - off), p.hi - p.lo, p.k);
			if (hash_add(pc, e, h, e->pins ? PC_PINNED : pc->clock) == 0)
				INC(pc, n_recorded, 1);
		}
	}
	pthread_mutex_unlock(&pc->lock);
}

/* The byte ranges of a write-back to apply. */
struct runs {
	struct front_range *v;
	size_t n, cap;
};

static int runs_push(struct runs *r, uint64_t lo, uint64_t hi)
{
	if (lo >= hi)
		return 0;
	if (r->n == r->cap) {
		size_t nc = r->cap ? 2 * r->cap : 16;
		struct front_range *v = realloc(r->v, nc * sizeof(*v));
		if (!v)
			return -ENOMEM;
		r->v = v;
		r->cap = nc;
	}
	r->v[r->n++] = (struct front_range){ lo, hi };
	return 0;
}

int pc_writepage(struct embfs *fs, uint32_t id, uint32_t rs, uint64_t off, size_t len, const char *data)
{
	struct pcache *pc = fs->pc;
	if (!pc || id >= CACHE_MAX_TABLES || !len)
		return front_write(&fs->fr, id, rs, off, len, data);
	struct pc_tab *t = &pc->tab[id];
	INC(pc, n_writepages, 1);
	pthread_mutex_lock(&pc->lock);
	t->io = ++pc->clock;
	t->wpw++;
	while (t->capt || t->nocap)
		pthread_cond_wait(&pc->cv, &pc->lock);
	t->wpw--;
	t->wp++;
	/* the pieces that hold a stale version are skipped, the rest applied */
	struct pc_map *m = t->map && t->map->n && t->map->rs == rs ? t->map : NULL;
	struct runs keep = { 0 };
	uint64_t end = off + len, pos = m ? piece_start(off, rs, pc->page) : end, from = off, skipped = 0;
	struct piece p;
	int ret = 0;
	while (!ret && piece_next(&pos, off, end, rs, pc->page, &p)) {
		struct pc_ent *e = ent_find(m, p.row);
		if (!e || !hash_has(e, piece_hash(data + (p.lo - off), p.hi - p.lo, p.k)))
			continue;
		skipped++;
		ret = runs_push(&keep, from, p.lo);
		from = p.hi;
	}
	pthread_mutex_unlock(&pc->lock);
	if (!ret && !skipped) {
		ret = front_write(&fs->fr, id, rs, off, len, data);
	} else if (!ret) {
		ret = runs_push(&keep, from, end);
		if (!ret && keep.n)
			ret = front_write_ranges(&fs->fr, id, rs, keep.v, keep.n, off, data);
		INC(pc, n_skipped, skipped);
	}
	free(keep.v);
	pthread_mutex_lock(&pc->lock);
	t->wp--;
	pthread_cond_broadcast(&pc->cv);
	pthread_mutex_unlock(&pc->lock);
	return ret;
}

/* ---- SCATTER ---------------------------------------------------------- */

/* Hashes of the pieces of rows[0..n) as they are now, into their pinned
 * entries: one batched read, or row by row if it fails (a row that cannot be
 * read was not served to the kernel either). */
static int capture(struct embfs *fs, struct pc_tab *t, uint32_t id, uint32_t rs, const uint64_t *rows,
		   size_t n, char *buf)
{
	struct pcache *pc = fs->pc;
	struct store_view v;
	int ret = front_view_live(&fs->fr, id, &v);
	if (ret)
		return ret;
	ret = front_rows_get(&fs->fr, &v, rs, rows, n, buf, NULL);
	uint8_t *ok = NULL;
	if (ret < 0) {
		if (!(ok = calloc(n, 1)))
			return -ENOMEM;
		for (size_t i = 0; i < n; i++)
			ok[i] = front_rows_get(&fs->fr, &v, rs, &rows[i], 1, buf + i * rs, NULL) == 0;
	}
	ret = 0;
	struct piece p;
	pthread_mutex_lock(&pc->lock);
	for (size_t i = 0; i < n && !ret; i++) {
		if (ok && !ok[i])
			continue;
		uint64_t off = rows[i] * rs, pos = off;
		struct pc_ent *e = ent_find(t->map, rows[i]);
		while (e && !ret && piece_next(&pos, off, off + rs, rs, pc->page, &p))
			ret = hash_add(pc, e, piece_hash(buf + i * rs + (p.lo - off), p.hi - p.lo, p.k), PC_PINNED);
	}
	pthread_mutex_unlock(&pc->lock);
	free(ok);
	return ret;
}

/* Drop the scatter's pins; its hashes become droppable from now on. */
static void unpin(struct pcache *pc, struct pc_tab *t, const uint64_t *rows, size_t n)
{
	uint64_t now = ++pc->clock;
	for (size_t i = 0; i < n; i++) {
		struct pc_ent *e = ent_find(t->map, rows[i]);
		if (!e || --e->pins)
			continue;
		struct pc_hash *v = hv(e);
		for (uint32_t k = 0; k < e->n; k++)
			if (v[k].stamp == PC_PINNED)
				v[k].stamp = now;
	}
	t->capt--;
	pthread_cond_broadcast(&pc->cv);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Sort v[0..n) and drop duplicates: the count left. */
static uint32_t sort_unique(uint64_t *v, uint32_t n)
{
	qsort(v, n, sizeof(*v), cmp_u64);
	uint32_t k = 0;
	for (uint32_t i = 0; i < n; i++)
		if (!k || v[i] != v[k - 1])
			v[k++] = v[i];
	return k;
}

/* Bytes n new entries with their hashes may take. */
static uint64_t room_for(uint64_t n, uint32_t rs, uint32_t pg)
{
	uint64_t pieces = rs / pg + 2;
	return n * (2 * sizeof(struct pc_ent) + 2 * pieces * sizeof(struct pc_hash));
}

/* Wait (pc->lock held) for room for `need` more bytes of entries (at most
 * PC_WAIT_S: -EAGAIN) and until no write-back of the table runs. */
static int wait_room(struct pcache *pc, struct pc_tab *t, uint64_t need)
{
	struct timespec until;
	int ret = 0;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += PC_WAIT_S;
	if (pc->bytes + need > PC_MAX_BYTES)
		INC(pc, n_room_waits, 1);
	while (!ret && pc->bytes && pc->bytes + need > PC_MAX_BYTES)
		if (pthread_cond_timedwait(&pc->cv, &pc->lock, &until) == ETIMEDOUT)
			ret = -EAGAIN;
	while (!ret && (t->wp || t->wpw))
		pthread_cond_wait(&pc->cv, &pc->lock);
	return ret;
}

/* Pin an entry per row of rows[0..n) in the table's map (made, or made
 * anew for a new row size, as needed) and count a capturing scatter.
 * pc->lock held; nothing pinned on error. */
static int pin_rows(struct pcache *pc, struct pc_tab *t, uint32_t rs, const uint64_t *rows, uint32_t n)
{
	if (t->map && t->map->rs != rs && !t->capt) {
		map_free(pc, t->map); /* the geometry changed: those rows are gone */
		t->map = NULL;
	}
	if (!t->map) {
		t->map = calloc(1, sizeof(*t->map));
		if (!t->map)
			return -ENOMEM;
		t->map->rs = rs;
		pc->bytes += sizeof(*t->map);
	}
	for (uint32_t i = 0; i < n; i++) {
		struct pc_ent *e = ent_get(pc, t->map, rows[i]);
		if (!e) {
			while (i--)
				ent_find(t->map, rows[i])->pins--;
			return -ENOMEM;
		}
		e->pins++;
	}
	t->capt++;
	atomic_fetch_add(&t->pin_seq, 1);
	return 0;
}

/* What rows[0..n) (pinned) hold now, in pieces of at most PC_CHUNK bytes. */
static int capture_all(struct embfs *fs, struct pc_tab *t, uint32_t id, uint32_t rs, const uint64_t *rows,
		       uint32_t n)
{
	size_t per = PC_CHUNK / rs ? PC_CHUNK / rs : 1;
	char *buf = malloc((per < n ? per : n) * (size_t)rs);
	int ret = buf ? 0 : -ENOMEM;
	for (size_t i = 0; !ret && i < n; i += per)
		ret = capture(fs, t, id, rs, rows + i, n - i < per ? n - i : per, buf);
	free(buf);
	return ret;
}

int pc_scatter_begin(struct embfs *fs, struct pc_scatter *sc, uint32_t id, uint32_t rs, const uint64_t *ids,
		     uint32_t n)
{
	struct pcache *pc = fs->pc;
	memset(sc, 0, sizeof(*sc));
	if (!pc || id >= CACHE_MAX_TABLES)
		return 0;
	struct pc_tab *t = &pc->tab[id];
	sc->id = id;
	pthread_mutex_lock(&pc->lock);
	if (t->io <= t->clean) {
		/* the kernel holds no page of the table: nothing to capture */
		t->nocap++;
		sc->mode = PC_NOCAPTURE;
		pthread_mutex_unlock(&pc->lock);
		INC(pc, n_nocapture, 1);
		return 0;
	}
	pthread_mutex_unlock(&pc->lock);
	uint64_t *rows = malloc((size_t)n * sizeof(*rows));
	if (!rows)
		return -ENOMEM;
	memcpy(rows, ids, (size_t)n * sizeof(*rows));
	n = sort_unique(rows, n);
	pthread_mutex_lock(&pc->lock);
	int ret = wait_room(pc, t, room_for(n, rs, pc->page));
	if (!ret)
		ret = pin_rows(pc, t, rs, rows, n);
	if (ret == -EAGAIN)
		INC(pc, n_refused, 1);
	pthread_mutex_unlock(&pc->lock);
	if (!ret) {
		ret = capture_all(fs, t, id, rs, rows, n);
		if (ret) {
			pthread_mutex_lock(&pc->lock);
			unpin(pc, t, rows, n);
			pthread_mutex_unlock(&pc->lock);
		}
	}
	if (ret) {
		free(rows);
		return ret;
	}
	sc->mode = PC_CAPTURE;
	sc->rows = rows;
	sc->n = n;
	INC(pc, n_capture, 1);
	INC(pc, n_captured_rows, n);
	return 0;
}

void pc_scatter_end(struct embfs *fs, struct pc_scatter *sc)
{
	struct pcache *pc = fs->pc;
	if (!pc || !sc->mode)
		return;
	struct pc_tab *t = &pc->tab[sc->id];
	pthread_mutex_lock(&pc->lock);
	if (sc->mode == PC_NOCAPTURE) {
		if (!--t->nocap)
			pthread_cond_broadcast(&pc->cv);
	} else {
		unpin(pc, t, sc->rows, sc->n);
	}
	pthread_mutex_unlock(&pc->lock);
	free(sc->rows);
	sc->rows = NULL;
	sc->mode = 0;
}

/* ---- invalidations (batch.c's notifier thread) ------------------------- */

uint64_t pc_inval_begin(struct embfs *fs)
{
	struct pcache *pc = fs->pc;
	if (!pc)
		return 0;
	pthread_mutex_lock(&pc->lock);
	uint64_t s = ++pc->clock;
	pthread_mutex_unlock(&pc->lock);
	return s;
}

void pc_inval_end(struct embfs *fs, uint32_t id, uint64_t start, int ret)
{
	struct pcache *pc = fs->pc;
	if (!pc || id >= CACHE_MAX_TABLES || (ret && ret != -ENOENT))
		return; /* pages that may still be there keep their entries */
	struct pc_tab *t = &pc->tab[id];
	pthread_mutex_lock(&pc->lock);
	if (start > t->clean)
		t->clean = start;
	struct pc_map *m = t->map;
	if (m) {
		uint32_t gone = 0;
		for (uint32_t i = 0; i < m->cap; i++) {
			struct pc_ent *e = &m->e[i];
			if (e->row == PC_EMPTY)
				continue;
			struct pc_hash *v = hv(e);
			uint32_t k = 0;
			for (uint32_t j = 0; j < e->n; j++)
				if (v[j].stamp == PC_PINNED || v[j].stamp >= start)
					v[k++] = v[j];
			e->n = k;
			gone += !k && !e->pins;
		}
		if (gone && gone == m->n && m->cap > PC_KEEP_SLOTS) {
			map_free(pc, m);
			t->map = NULL;
		} else if (gone) {
			uint32_t cap = m->cap;
			while (cap > PC_KEEP_SLOTS && (m->n - gone) * 8 < cap)
				cap /= 2;
			map_rebuild(pc, m, cap); /* on ENOMEM the entries simply stay */
		}
		pthread_cond_broadcast(&pc->cv);
	}
	pthread_mutex_unlock(&pc->lock);
}

void pc_table_reset(struct embfs *fs, uint32_t id)
{
	struct pcache *pc = fs->pc;
	if (!pc || id >= CACHE_MAX_TABLES)
		return;
	struct pc_tab *t = &pc->tab[id];
	pthread_mutex_lock(&pc->lock);
	if (!t->capt && !t->nocap && !t->wp && !t->wpw) {
		map_free(pc, t->map);
		t->map = NULL;
		t->io = t->clean = 0;
	}
	pthread_mutex_unlock(&pc->lock);
}

void pc_stats(struct embfs *fs, struct stats_out *o)
{
	struct pcache *pc = fs->pc;
	if (!pc)
		return;
	uint64_t rows = 0, hashes = 0, bytes;
	pthread_mutex_lock(&pc->lock);
	for (uint32_t i = 0; i < CACHE_MAX_TABLES; i++) {
		struct pc_map *m = pc->tab[i].map;
		for (uint32_t k = 0; m && k < m->cap; k++) {
			if (m->e[k].row != PC_EMPTY) {
				rows++;
				hashes += m->e[k].n;
			}
		}
	}
	bytes = pc->bytes;
	pthread_mutex_unlock(&pc->lock);
#define P(key, metric, type, help, v) STATS_PUT(o, "pagecache." key, "pagecache_" metric, type, help, v)
	P("capturing_scatters", "capturing_scatters_total", COUNTER, "Scatters that recorded the rows they replaced",
	  atomic_load(&pc->n_capture));
	P("captured_rows", "captured_rows_total", COUNTER, "Rows recorded by capturing scatters",
	  atomic_load(&pc->n_captured_rows));
	P("plain_scatters", "plain_scatters_total", COUNTER, "Scatters that recorded nothing",
	  atomic_load(&pc->n_nocapture));
	P("writebacks", "writebacks_total", COUNTER, "Page write-backs received from the kernel",
	  atomic_load(&pc->n_writepages));
	P("writeback_stale_pieces_skipped", "writeback_stale_pieces_skipped_total", COUNTER,
	  "Pieces of page write-backs skipped because a scatter replaced their rows", atomic_load(&pc->n_skipped));
	P("recorded_pieces", "recorded_pieces_total", COUNTER, "Pieces recorded by reads and writes during a scatter",
	  atomic_load(&pc->n_recorded));
	P("io_waits", "io_waits_total", COUNTER, "Reads and writes that waited for a scatter",
	  atomic_load(&pc->n_io_waits));
	P("room_waits", "room_waits_total", COUNTER, "Scatters that waited for room for their records",
	  atomic_load(&pc->n_room_waits));
	P("refused_scatters", "refused_scatters_total", COUNTER, "Scatters refused past the records' memory bound",
	  atomic_load(&pc->n_refused));
	P("stale_rows", "stale_rows", GAUGE, "Rows with records of stale kernel pages now", rows);
	P("stale_hashes", "stale_hashes", GAUGE, "Recorded piece hashes now", hashes);
	P("bytes", "bytes", GAUGE, "Memory of the records now, in bytes", bytes);
#undef P
}
