/*
 * embfsctl: the admin command of a mounted embfs.  It uses only the files
 * every user sees under MNT/.embfs and MNT/.snapshots (no private channel):
 *
 *   stat [--json]              .embfs/stats, readable (units, a line per table)
 *   snapshot NAME [--sync]     mkdir .snapshots/NAME (--sync: fsync it: durable)
 *   snapshots [--json]         the snapshots of .embfs/stats (batch, creation time)
 *   drop NAME                  rmdir .snapshots/NAME
 *   flush [--wait [--timeout S]]  fsync of MNT; --wait: until no row is dirty
 *                              and every snapshot is durable
 *   batch [N]                  read (or set) .embfs/batch
 *
 * Exit status: 0 done, 1 the operation failed (no such snapshot, not an
 * embfs mount, ...), 2 bad usage.  Names in .embfs/stats have every byte
 * that could break a line written \xHH; embfsctl undoes that, shows names
 * with control characters, '\' and bytes outside UTF-8 as \xHH, and gives
 * them in JSON as they are (bytes outside UTF-8 as the characters \xHH).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "embfs/version.h"
#include "embfs/utf8.h"

static const char *prog = "embfsctl";

static void usage(FILE *f)
{
	fprintf(f,
		"usage: embfsctl MNT COMMAND [ARGS]\n"
		"       embfsctl --help | -V\n"
		"commands (MNT: the mount point of an embfs):\n"
		"  stat [--json]                  pool, cache, request and spill counters, a line per table\n"
		"  snapshot NAME [--sync]         take snapshot NAME (--sync: return once it is durable)\n"
		"  snapshots [--json]             list the snapshots: name, batch id, creation time, durability\n"
		"  drop NAME                      drop snapshot NAME\n"
		"  flush [--wait [--timeout S]]   write every dirty row back (fsync of MNT); --wait: until\n"
		"                                 no row is dirty and every snapshot is durable (at most S s)\n"
		"  batch [N]                      print the current batch id, or set it to N\n"
		"exit status: 0 done, 1 failed, 2 bad usage\n");
}

static void die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static void die(int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "%s: ", prog);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(code);
}

/* ---- .embfs/stats ----------------------------------------------------- */

struct field {
	char *k, *v;
};

/* A snapshot.NAME or table.NAME line. */
struct ent {
	char *name; /* unescaped */
	struct field *f;
	size_t nf;
};

struct stats {
	char *text;
	struct field *kv; /* KEY VALUE lines (values unescaped) */
	size_t nkv;
	struct ent *snaps, *tables;
	size_t nsnaps, ntables;
};

/* \xHH sequences of s back to bytes, in place. */
static void unescape(char *s)
{
	char *w = s;
	for (char *p = s; *p;) {
		unsigned x;
		if (p[0] == '\\' && p[1] == 'x' && sscanf(p + 2, "%2x", &x) == 1 && p[2] && p[3]) {
			*w++ = (char)x;
			p += 4;
		} else {
			*w++ = *p++;
		}
	}
	*w = 0;
}

static void *xrealloc(void *p, size_t n)
{
	p = realloc(p, n);
	if (!p)
		die(1, "out of memory");
	return p;
}

/* The whole of path (a file with direct I/O: read to its end); NULL and errno. */
static char *slurp(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	size_t cap = 65536, n = 0;
	char *buf = xrealloc(NULL, cap + 1);
	for (;;) {
		if (n == cap)
			buf = xrealloc(buf, (cap *= 2) + 1);
		ssize_t r = read(fd, buf + n, cap - n);
		if (r < 0) {
			int e = errno;
			close(fd);
			free(buf);
			errno = e;
			return NULL;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	close(fd);
	buf[n] = 0;
	return buf;
}

static const char *mnt;
static const char *mnt_shown; /* mnt as an absolute path, for output */
static char *mnt_abs;         /* realpath's, freed at the end of main */

static void path_of(char *out, size_t size, const char *rel)
{
	if ((size_t)snprintf(out, size, "%s/%s", mnt, rel) >= size)
		die(2, "%s: path too long", mnt);
}

/* MNT must be the root of an embfs mount. */
static void check_mount(void)
{
	struct stat st;
	char p[4096];
	if (stat(mnt, &st))
		die(1, "%s: %s", mnt, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		die(1, "%s: not a directory (give the mount point of an embfs)", mnt);
	path_of(p, sizeof(p), ".embfs/stats");
	char *t = slurp(p);
	int ok = t && !strncmp(t, "pool.path ", 10);
	free(t);
	if (!ok)
		die(1, "%s: not an embfs mount (no readable .embfs/stats)", mnt);
}

/* Split the k=v words of an entry line. */
static void ent_parse(struct ent *e, char *name, char *rest)
{
	e->name = name;
	unescape(e->name);
	e->f = NULL;
	e->nf = 0;
	char *save = NULL;
	for (char *w = strtok_r(rest, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
		char *eq = strchr(w, '=');
		if (!eq)
			continue;
		*eq = 0;
		e->f = xrealloc(e->f, (e->nf + 1) * sizeof(*e->f));
		e->f[e->nf++] = (struct field){ w, eq + 1 };
	}
}

static void stats_load(struct stats *s)
{
	char p[4096];
	memset(s, 0, sizeof(*s));
	path_of(p, sizeof(p), ".embfs/stats");
	s->text = slurp(p);
	if (!s->text)
		die(1, "%s: %s", p, strerror(errno));
	char *save = NULL;
	for (char *l = strtok_r(s->text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		char *sp = strchr(l, ' ');
		if (!sp)
			continue;
		*sp = 0;
		if (!strncmp(l, "snapshot.", 9)) {
			s->snaps = xrealloc(s->snaps, (s->nsnaps + 1) * sizeof(*s->snaps));
			ent_parse(&s->snaps[s->nsnaps++], l + 9, sp + 1);
		} else if (!strncmp(l, "table.", 6)) {
			s->tables = xrealloc(s->tables, (s->ntables + 1) * sizeof(*s->tables));
			ent_parse(&s->tables[s->ntables++], l + 6, sp + 1);
		} else {
			unescape(sp + 1);
			s->kv = xrealloc(s->kv, (s->nkv + 1) * sizeof(*s->kv));
			s->kv[s->nkv++] = (struct field){ l, sp + 1 };
		}
	}
}

static void stats_free(struct stats *s)
{
	for (size_t i = 0; i < s->nsnaps; i++)
		free(s->snaps[i].f);
	for (size_t i = 0; i < s->ntables; i++)
		free(s->tables[i].f);
	free(s->snaps);
	free(s->tables);
	free(s->kv);
	free(s->text);
}

static const char *field_get(const struct field *f, size_t n, const char *k)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(f[i].k, k))
			return f[i].v;
	return NULL;
}

static const char *sget(const struct stats *s, const char *k)
{
	return field_get(s->kv, s->nkv, k);
}

static uint64_t sget_u(const struct stats *s, const char *k)
{
	const char *v = sget(s, k);
	return v ? strtoull(v, NULL, 10) : 0;
}

static uint64_t eget_u(const struct ent *e, const char *k)
{
	const char *v = field_get(e->f, e->nf, k);
	return v ? strtoull(v, NULL, 10) : 0;
}

/* ---- output helpers ----------------------------------------------------- */

/* A name for a terminal: control characters, '\' and bytes outside UTF-8 as \xHH. */
static void put_name(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n = strlen(s);
	while (n) {
		size_t len = embfs_utf8_seq(p, n);
		if (len == 0 || (len == 1 && (*p < 0x20 || *p == 0x7f || *p == '\\'))) {
			printf("\\x%02x", *p);
			len = 1;
		} else {
			fwrite(p, 1, len, stdout);
		}
		p += len;
		n -= len;
	}
}

/* A JSON string (bytes outside UTF-8 as the characters \xHH). */
static void json_str(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n = strlen(s);
	putchar('"');
	while (n) {
		size_t len = embfs_utf8_seq(p, n);
		if (len == 0) {
			printf("\\\\x%02x", *p);
			len = 1;
		} else if (*p == '"' || *p == '\\') {
			printf("\\%c", *p);
		} else if (*p < 0x20 || *p == 0x7f) {
			printf("\\u%04x", *p);
		} else {
			fwrite(p, 1, len, stdout);
		}
		p += len;
		n -= len;
	}
	putchar('"');
}

/* A stats value as JSON: a number if it is one (-?(0|[1-9][0-9]*)(.[0-9]+)?), else a string. */
static void json_val(const char *v)
{
	const char *p = v + (v[0] == '-');
	int ok = *p >= '0' && *p <= '9' && !(p[0] == '0' && p[1] >= '0' && p[1] <= '9');
	while (ok && *p >= '0' && *p <= '9')
		p++;
	if (ok && *p == '.') {
		p++;
		ok = *p >= '0' && *p <= '9';
		while (*p >= '0' && *p <= '9')
			p++;
	}
	if (ok && !*p)
		fputs(v, stdout);
	else
		json_str(v);
}

/* b with a binary unit, in one of 8 buffers used in turn (8 per printf at most). */
static const char *H(uint64_t b)
{
	static const char *unit[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	static char ring[8][32];
	static unsigned next;
	char *buf = ring[next++ % 8];
	size_t size = sizeof(ring[0]);
	double v = (double)b;
	int u = 0;
	while (v >= 1024 && u < 6) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, size, "%" PRIu64 " B", b);
	else
		snprintf(buf, size, "%.1f %s", v, unit[u]);
	return buf;
}

static const char *when(uint64_t ns, char *buf, size_t size)
{
	time_t t = (time_t)(ns / 1000000000u);
	struct tm tm;
	if (!ns || !localtime_r(&t, &tm) || !strftime(buf, size, "%Y-%m-%d %H:%M:%S %Z", &tm))
		snprintf(buf, size, "-");
	return buf;
}

/* ---- commands ------------------------------------------------------------ */

static void json_ent(const struct ent *e)
{
	printf("{\"name\": ");
	json_str(e->name);
	for (size_t i = 0; i < e->nf; i++) {
		printf(", ");
		json_str(e->f[i].k);
		printf(": ");
		json_val(e->f[i].v);
	}
	printf("}");
}

static void json_ents(const char *key, const struct ent *e, size_t n)
{
	printf("\"%s\": [", key);
	for (size_t i = 0; i < n; i++) {
		printf(i ? ",\n    " : "\n    ");
		json_ent(&e[i]);
	}
	printf("%s]", n ? "\n  " : "");
}

static int cmd_stat(int json)
{
	struct stats s;
	stats_load(&s);
	if (json) {
		printf("{\n  \"mount\": ");
		json_str(mnt_shown);
		printf(",\n  \"stats\": {");
		for (size_t i = 0; i < s.nkv; i++) {
			printf(i ? ",\n    " : "\n    ");
			json_str(s.kv[i].k);
			printf(": ");
			json_val(s.kv[i].v);
		}
		printf("\n  },\n  ");
		json_ents("snapshots", s.snaps, s.nsnaps);
		printf(",\n  ");
		json_ents("tables", s.tables, s.ntables);
		printf("\n}\n");
		stats_free(&s);
		return 0;
	}
	printf("mount      ");
	put_name(mnt_shown);
	putchar('\n');
	printf("pool       ");
	put_name(sget(&s, "pool.path") ? sget(&s, "pool.path") : "?");
	printf("  label \"");
	put_name(sget(&s, "pool.label") ? sget(&s, "pool.label") : "");
	printf("\"  media %s  state ", sget(&s, "pool.media") ? sget(&s, "pool.media") : "?");
	put_name(sget(&s, "pool.state") ? sget(&s, "pool.state") : "?");
	printf("%s\n", sget_u(&s, "pool.recovered") ? "  (recovered at mount)" : "");
	printf("space      %s used, %s free of %s; %" PRIu64 " slabs; %" PRIu64 " checksum errors\n",
	       H(sget_u(&s, "pool.used_bytes")), H(sget_u(&s, "pool.free_bytes")), H(sget_u(&s, "pool.size_bytes")),
	       sget_u(&s, "pool.slabs"), sget_u(&s, "pool.checksum_errors"));
	printf("contents   %" PRIu64 " tables, %" PRIu64 " rows; batch id %" PRIu64 "; %" PRIu64 " snapshots\n",
	       sget_u(&s, "tables"), sget_u(&s, "rows"), sget_u(&s, "batch"), sget_u(&s, "snapshots"));
	if (sget(&s, "cache.budget_bytes")) {
		uint64_t h = sget_u(&s, "cache.hits"), m = sget_u(&s, "cache.misses");
		printf("cache      %s in %" PRIu64 " rows of a %s budget (metadata %s); %" PRIu64 " dirty, %" PRIu64
		       " pinned\n",
		       H(sget_u(&s, "cache.bytes")), sget_u(&s, "cache.rows"), H(sget_u(&s, "cache.budget_bytes")),
		       H(sget_u(&s, "cache.meta_bytes")), sget_u(&s, "cache.dirty"), sget_u(&s, "cache.pinned"));
		printf("           %" PRIu64 " hits, %" PRIu64 " misses (%.1f%% hits), %" PRIu64 " evictions, %" PRIu64
		       " write-backs, %" PRIu64 " bypasses\n",
		       h, m, h + m ? 100.0 * (double)h / (double)(h + m) : 0.0, sget_u(&s, "cache.evictions"),
		       sget_u(&s, "cache.writebacks"), sget_u(&s, "cache.bypasses"));
	} else {
		printf("cache      none (cache_size=0: every write is durable when it returns)\n");
	}
	printf("requests   %" PRIu64 " reads (%s), %" PRIu64 " writes (%s), %" PRIu64 " fsyncs, %" PRIu64
	       " copies (%s)\n",
	       sget_u(&s, "fs.read_calls"), H(sget_u(&s, "fs.read_bytes")), sget_u(&s, "fs.write_calls"),
	       H(sget_u(&s, "fs.write_bytes")), sget_u(&s, "fs.fsync_calls"), sget_u(&s, "fs.copy_calls"),
	       H(sget_u(&s, "fs.copy_bytes")));
	if (sget(&s, "batch.gathers"))
		printf("batched    %" PRIu64 " gathers (%" PRIu64 " rows), %" PRIu64 " scatters (%" PRIu64
		       " rows), %" PRIu64 " prefetches, %" PRIu64 " errors\n",
		       sget_u(&s, "batch.gathers"), sget_u(&s, "batch.gather_rows"), sget_u(&s, "batch.scatters"),
		       sget_u(&s, "batch.scatter_rows"), sget_u(&s, "batch.prefetches"), sget_u(&s, "batch.errors"));
	printf("store      %" PRIu64 " commits, %" PRIu64 " persist barriers, %" PRIu64 " transactions; %" PRIu64
	       " rows written, %" PRIu64 " read; %s in %" PRIu64 " row versions\n",
	       sget_u(&s, "store.commits"), sget_u(&s, "store.persist_barriers"), sget_u(&s, "store.transactions"),
	       sget_u(&s, "store.rows_written"), sget_u(&s, "store.rows_read"), H(sget_u(&s, "pmem.row_bytes")),
	       sget_u(&s, "pmem.versions"));
	if (sget(&s, "spill.path")) {
		printf("spill      ");
		put_name(sget(&s, "spill.path"));
		printf(" %s: %" PRIu64 " of %" PRIu64 " segments free; %s live in %" PRIu64 " versions (footprint %s)\n",
		       H(sget_u(&s, "spill.size_bytes")), sget_u(&s, "spill.segments_free"), sget_u(&s, "spill.segments"),
		       H(sget_u(&s, "spill.live_bytes")), sget_u(&s, "spill.versions"),
		       H(sget_u(&s, "spill.footprint_bytes")));
		printf("           %" PRIu64 " runs holding %" PRIu64 " rows (%s); %" PRIu64 " rows read in %" PRIu64
		       " I/Os (%s); %" PRIu64 " checksum errors\n",
		       sget_u(&s, "spill.runs"), sget_u(&s, "spill.run_rows"), H(sget_u(&s, "spill.run_bytes")),
		       sget_u(&s, "spill.rows_read"), sget_u(&s, "spill.read_ios"), H(sget_u(&s, "spill.read_bytes")),
		       sget_u(&s, "spill.checksum_errors"));
	}
	printf("tables     %zu\n", s.ntables);
	if (s.ntables)
		printf("  %12s %10s %5s %-5s %9s %10s %6s %8s  %s\n", "ROWS", "SIZE", "DIM", "DTYPE", "ROW", "CACHED",
		       "HIT%", "DIRTY", "NAME");
	for (size_t i = 0; i < s.ntables; i++) {
		const struct ent *e = &s.tables[i];
		uint64_t h = eget_u(e, "cache_hits"), m = eget_u(e, "cache_misses");
		const char *dt = field_get(e->f, e->nf, "dtype");
		char hit[16];
		if (h + m)
			snprintf(hit, sizeof(hit), "%.1f", 100.0 * (double)h / (double)(h + m));
		else
			snprintf(hit, sizeof(hit), "-");
		printf("  %12" PRIu64 " %10s %5" PRIu64 " %-5s %9s %10s %6s %8" PRIu64 "  ", eget_u(e, "rows"),
		       H(eget_u(e, "size")), eget_u(e, "dim"), dt ? dt : "?", H(eget_u(e, "row_size")),
		       H(eget_u(e, "cache_bytes")), hit, eget_u(e, "cache_dirty"));
		put_name(e->name);
		putchar('\n');
	}
	stats_free(&s);
	return 0;
}

static int cmd_snapshots(int json)
{
	struct stats s;
	char tb[64];
	stats_load(&s);
	if (json) {
		printf("{");
		json_ents("snapshots", s.snaps, s.nsnaps);
		printf("}\n");
		stats_free(&s);
		return 0;
	}
	if (s.nsnaps)
		printf("%12s  %-23s  %-7s  %10s  %6s  %s\n", "BATCH", "CREATED", "DURABLE", "EXCLUSIVE", "TABLES", "NAME");
	for (size_t i = 0; i < s.nsnaps; i++) {
		const struct ent *e = &s.snaps[i];
		printf("%12" PRIu64 "  %-23s  %-7s  %10s  %6" PRIu64 "  ", eget_u(e, "batch"),
		       when(eget_u(e, "created_ns"), tb, sizeof(tb)), eget_u(e, "durable") ? "yes" : "no",
		       H(eget_u(e, "excl_bytes")), eget_u(e, "tables"));
		put_name(e->name);
		putchar('\n');
	}
	stats_free(&s);
	return 0;
}

static void snap_path(char *p, size_t size, const char *name)
{
	if (!*name || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, ".."))
		die(2, "bad snapshot name '%s' (no '/', not empty, '.' or '..')", name);
	if ((size_t)snprintf(p, size, "%s/.snapshots/%s", mnt, name) >= size)
		die(2, "%s: snapshot name too long", name);
}

static int cmd_snapshot(const char *name, int sync)
{
	char p[4096];
	snap_path(p, sizeof(p), name);
	if (mkdir(p, 0755)) {
		if (errno == EEXIST)
			die(1, "snapshot '%s' exists already", name);
		die(1, "snapshot '%s': %s", name, strerror(errno));
	}
	if (sync) {
		int fd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0 || fsync(fd))
			die(1, "snapshot '%s' taken, but making it durable failed: %s", name, strerror(errno));
		close(fd);
	}
	return 0;
}

static int cmd_drop(const char *name)
{
	char p[4096];
	snap_path(p, sizeof(p), name);
	if (rmdir(p)) {
		if (errno == ENOENT)
			die(1, "no snapshot '%s'", name);
		die(1, "drop '%s': %s", name, strerror(errno));
	}
	return 0;
}

static int clean(const struct stats *s, uint64_t *dirty, uint64_t *pending)
{
	*dirty = sget_u(s, "cache.dirty");
	*pending = 0;
	for (size_t i = 0; i < s->nsnaps; i++)
		*pending += !eget_u(&s->snaps[i], "durable");
	return !*dirty && !*pending;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmd_flush(int wait, double timeout)
{
	double end = now_s() + timeout;
	for (;;) {
		int fd = open(mnt, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0 || fsync(fd))
			die(1, "%s: flush: %s", mnt, strerror(errno));
		close(fd);
		if (!wait)
			return 0;
		struct stats s;
		uint64_t dirty, pending;
		stats_load(&s);
		int done = clean(&s, &dirty, &pending);
		stats_free(&s);
		if (done)
			return 0;
		if (timeout > 0 && now_s() >= end)
			die(1, "%s: still %" PRIu64 " dirty rows and %" PRIu64 " snapshots not durable after %g s", mnt,
			    dirty, pending, timeout);
		struct timespec ts = { 0, 50 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
}

static int cmd_batch(const char *set)
{
	char p[4096];
	path_of(p, sizeof(p), ".embfs/batch");
	if (!set) {
		char *t = slurp(p);
		if (!t)
			die(1, "%s: %s", p, strerror(errno));
		fputs(t, stdout);
		free(t);
		return 0;
	}
	char *end;
	errno = 0;
	unsigned long long b = strtoull(set, &end, 10);
	if (errno || *end || set[0] < '0' || set[0] > '9')
		die(2, "batch id '%s': not a decimal number", set);
	int fd = open(p, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		die(1, "%s: %s", p, strerror(errno));
	char buf[32];
	int n = snprintf(buf, sizeof(buf), "%llu\n", b);
	if (write(fd, buf, (size_t)n) != n) {
		int e = errno;
		char *cur = slurp(p);
		if (cur)
			cur[strcspn(cur, "\n")] = 0;
		if (e == EINVAL && cur)
			die(1, "batch id %llu refused: the batch id is %s and never goes back", b, cur);
		die(1, "batch id %llu: %s", b, strerror(e));
	}
	close(fd);
	return 0;
}

/* The options a command takes; anything else is a usage error. */
static int opt(int argc, char **argv, int *i, const char *name)
{
	if (*i < argc && !strcmp(argv[*i], name)) {
		(*i)++;
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		usage(stdout);
		return 0;
	}
	if (argc >= 2 && (!strcmp(argv[1], "-V") || !strcmp(argv[1], "--version"))) {
		printf("embfsctl (embfs) %s\n", EMBFS_VERSION);
		return 0;
	}
	if (argc < 3) {
		usage(stderr);
		return 2;
	}
	mnt = argv[1];
	mnt_abs = realpath(mnt, NULL);
	mnt_shown = mnt_abs ? mnt_abs : mnt;
	const char *cmd = argv[2];
	int i = 3, ret;
	const char *arg = NULL;
	if (!strcmp(cmd, "stat") || !strcmp(cmd, "snapshots")) {
		int json = opt(argc, argv, &i, "--json");
		if (i != argc)
			goto bad;
		check_mount();
		ret = cmd[1] == 't' ? cmd_stat(json) : cmd_snapshots(json);
	} else if (!strcmp(cmd, "snapshot") || !strcmp(cmd, "drop")) {
		if (i >= argc || argv[i][0] == '-')
			goto bad;
		arg = argv[i++];
		int sync = cmd[0] == 's' && opt(argc, argv, &i, "--sync");
		if (i != argc)
			goto bad;
		check_mount();
		ret = cmd[0] == 's' ? cmd_snapshot(arg, sync) : cmd_drop(arg);
	} else if (!strcmp(cmd, "flush")) {
		int wait = opt(argc, argv, &i, "--wait");
		double timeout = 0;
		if (wait && opt(argc, argv, &i, "--timeout")) {
			char *end;
			if (i >= argc || (timeout = strtod(argv[i], &end)) <= 0 || *end)
				die(2, "--timeout wants a number of seconds above 0");
			i++;
		}
		if (i != argc)
			goto bad;
		check_mount();
		ret = cmd_flush(wait, timeout);
	} else if (!strcmp(cmd, "batch")) {
		if (i < argc)
			arg = argv[i++];
		if (i != argc)
			goto bad;
		check_mount();
		ret = cmd_batch(arg);
	} else {
		fprintf(stderr, "%s: unknown command '%s'\n", prog, cmd);
		usage(stderr);
		return 2;
	}
	if (fflush(stdout) || ferror(stdout))
		die(1, "writing the output: %s", strerror(errno));
	free(mnt_abs);
	return ret;
bad:
	fprintf(stderr, "%s: bad arguments for '%s'\n", prog, cmd);
	usage(stderr);
	return 2;
}
