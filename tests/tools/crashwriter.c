/*
 * crashwriter: the writer and the checker of tests/e2e/crash.sh.
 *
 *   crashwriter write  [opts] TABLE LOG    write batches until an error
 *   crashwriter verify [opts] TABLE LOG    check TABLE against LOG
 *
 * Batch b writes K runs of rows at pseudo-random row ids (log-uniform, i.e.
 * Zipf-like with exponent ~1, or uniform over [0, N)), a deterministic
 * function of (seed, b).  A run is one pwrite: mostly one row, 1 in 8 of
 * 2..16 rows, 1 in 32 of 17..512 rows (many rows in one commit).  Row r of batch b holds a pattern made of its row id,
 * b, filler words derived from (seed, r, b) and a checksum, so a row that
 * mixes two versions or holds anything else is detectable.  After a batch the
 * table is fsync'ed (fdatasync every other batch), then "b\n" is appended to
 * LOG (outside the mount, on tmpfs) and LOG is fsync'ed.  So when LOG ends
 * with L, batches <= L are durable and batch L+1 may have been begun.
 *
 * write starts at batch (last line of LOG) + 1 unless -b is given and stops
 * at the first failing call (the daemon was killed: status 3) or after -m
 * batches (status 0).
 *
 * verify, after a remount, reads every row of TABLE and requires:
 *   - a row written by some batch <= L holds the pattern of the latest such
 *     batch, or that of batch L+1 if L+1 writes it too;
 *   - a row not written by any batch <= L is a hole (zeros), or holds the
 *     pattern of batch L+1 if L+1 writes it;
 *   - hence no row is torn, stale or foreign; and the file size is at least
 *     the end of the last row of batches <= L and at most that of <= L+1.
 * Exit 0 if all holds, 1 otherwise (the first errors are printed).
 *
 * Options: -s SEED (1)  -k RUNS per batch (32)  -n N rows in the id space
 * (65536)  -r ROW_SIZE bytes, a multiple of 8 >= 32 (256)  -b FIRST batch
 * -m MAX batches (1000000).  verify must be given the same -s -k -n -r.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAGIC 0x43524153485752ull /* "CRASHWR" */

struct conf {
	uint64_t seed;
	uint32_t runs;
	uint64_t nrows;
	uint32_t rs;
	uint64_t first;
	uint64_t max;
	int have_first;
};

static uint64_t mix64(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ull;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

/* Pattern of row r written by batch b: words [row, b, filler..., csum]. */
static void pattern(const struct conf *c, uint64_t r, uint64_t b, uint64_t *w)
{
	size_t n = c->rs / 8;
	uint64_t h = MAGIC;
	w[0] = r;
	w[1] = b;
	for (size_t i = 2; i < n - 1; i++)
		w[i] = mix64(c->seed ^ mix64(r * 0x100000001B3ull ^ mix64(b) ^ i));
	for (size_t i = 0; i < n - 1; i++)
		h = mix64(h ^ w[i]);
	w[n - 1] = h;
}

/* 0: hole, 1: valid pattern (its batch in *b), -1: anything else. */
static int classify(const struct conf *c, uint64_t r, const uint64_t *w, uint64_t *b, uint64_t *tmp)
{
	size_t n = c->rs / 8, i;
	for (i = 0; i < n && !w[i]; i++)
		;
	if (i == n)
		return 0;
	if (w[0] != r || w[1] == 0)
		return -1;
	pattern(c, r, w[1], tmp);
	if (memcmp(w, tmp, c->rs))
		return -1;
	*b = w[1];
	return 1;
}

struct run {
	uint64_t start;
	uint32_t len;
};

/* The runs of batch b; deterministic in (seed, b). */
static void batch_runs(const struct conf *c, uint64_t b, struct run *runs)
{
	uint64_t st = mix64(c->seed * 0x2545F4914F6CDD1Dull ^ b);
	int bits = 0;
	while ((1ull << bits) < c->nrows)
		bits++;
	for (uint32_t i = 0; i < c->runs; i++) {
		uint64_t x = mix64(st += 0x9E3779B97F4A7C15ull);
		uint64_t y = mix64(st += 0x9E3779B97F4A7C15ull);
		uint64_t r;
		if (x & 1) /* log-uniform: row ids near 0 are hot */
			r = (y >> 8) & ((1ull << (1 + (x >> 1) % bits)) - 1);
		else
			r = (y >> 8) % c->nrows;
		uint32_t len = 1;
		if ((x >> 20) % 32 == 0) /* one write, one commit of many rows */
			len = 17 + (uint32_t)((x >> 28) % 496);
		else if ((x >> 20) % 8 == 0)
			len = 2 + (uint32_t)((x >> 28) % 15);
		if (r >= c->nrows)
			r = c->nrows - 1;
		if (r + len > c->nrows)
			len = (uint32_t)(c->nrows - r);
		runs[i].start = r;
		runs[i].len = len;
	}
}

/* Last batch number in LOG (0 if empty or missing); checks it counts 1, 2, ... */
static int log_last(const char *path, uint64_t *last, uint64_t *count)
{
	FILE *f = fopen(path, "r");
	char line[64];
	*last = 0;
	*count = 0;
	if (!f)
		return errno == ENOENT ? 0 : -1;
	uint64_t prev = 0;
	int ret = 0;
	while (fgets(line, sizeof(line), f)) {
		char *end;
		uint64_t v = strtoull(line, &end, 10);
		if (*end != '\n') {
			fprintf(stderr, "crashwriter: %s: bad line '%s'\n", path, line);
			ret = -1;
			break;
		}
		if (v != prev + 1) {
			fprintf(stderr, "crashwriter: %s: batch %" PRIu64 " follows %" PRIu64 "\n", path, v, prev);
			ret = -1;
		}
		prev = v;
		(*count)++;
	}
	fclose(f);
	*last = prev;
	return ret;
}

static int do_write(const struct conf *c, const char *table, const char *logpath)
{
	uint64_t last, count;
	if (log_last(logpath, &last, &count))
		return 2;
	uint64_t b = c->have_first ? c->first : last + 1;
	int fd = open(table, O_RDWR | O_CREAT, 0644);
	if (fd < 0) {
		fprintf(stderr, "crashwriter: %s: %s\n", table, strerror(errno));
		return 3;
	}
	int lfd = open(logpath, O_WRONLY | O_CREAT | O_APPEND, 0644);
	if (lfd < 0) {
		fprintf(stderr, "crashwriter: %s: %s\n", logpath, strerror(errno));
		return 2;
	}
	struct run *runs = calloc(c->runs, sizeof(*runs));
	uint64_t *buf = malloc((size_t)c->rs * 512);
	if (!runs || !buf)
		return 2;
	uint64_t end = b + c->max, rows = 0, b0 = b;
	for (; b < end; b++) {
		batch_runs(c, b, runs);
		for (uint32_t i = 0; i < c->runs; i++) {
			for (uint32_t k = 0; k < runs[i].len; k++)
				pattern(c, runs[i].start + k, b, buf + (size_t)k * (c->rs / 8));
			size_t len = (size_t)runs[i].len * c->rs;
			ssize_t w = pwrite(fd, buf, len, (off_t)(runs[i].start * c->rs));
			if (w != (ssize_t)len) {
				fprintf(stderr, "crashwriter: batch %" PRIu64 ": pwrite row %" PRIu64 ": %s\n", b,
					runs[i].start, w < 0 ? strerror(errno) : "short write");
				goto stopped;
			}
			rows += runs[i].len;
		}
		if ((b & 1 ? fsync(fd) : fdatasync(fd)) != 0) {
			fprintf(stderr, "crashwriter: batch %" PRIu64 ": fsync: %s\n", b, strerror(errno));
			goto stopped;
		}
		char line[32];
		int n = snprintf(line, sizeof(line), "%" PRIu64 "\n", b);
		if (write(lfd, line, (size_t)n) != n || fsync(lfd) != 0) {
			fprintf(stderr, "crashwriter: %s: %s\n", logpath, strerror(errno));
			return 2;
		}
	}
	printf("crashwriter: wrote batches %" PRIu64 "..%" PRIu64 " (%" PRIu64 " rows)\n", b0, b - 1, rows);
	close(fd);
	close(lfd);
	free(runs);
	free(buf);
	return 0;
stopped:
	printf("crashwriter: stopped in batch %" PRIu64 " after batches %" PRIu64 "..%" PRIu64
	       " (%" PRIu64 " rows)\n", b, b0, b - 1, rows);
	close(lfd);
	free(runs);
	free(buf);
	return 3;
}

static int do_verify(const struct conf *c, const char *table, const char *logpath)
{
	uint64_t L, count;
	if (log_last(logpath, &L, &count))
		return 1;
	int fd = open(table, O_RDONLY);
	if (fd < 0) {
		if (errno == ENOENT && L == 0) {
			printf("verify: no batch logged and no table: nothing to check\n");
			return 0;
		}
		fprintf(stderr, "verify: %s: %s\n", table, strerror(errno));
		return 1;
	}
	struct stat sb;
	if (fstat(fd, &sb) != 0) {
		perror("verify: fstat");
		return 1;
	}
	uint64_t *last = calloc(c->nrows, sizeof(*last)); /* latest batch <= L writing the row */
	uint8_t *next = calloc(c->nrows, 1);               /* batch L+1 writes the row */
	struct run *runs = calloc(c->runs, sizeof(*runs));
	if (!last || !next || !runs)
		return 1;
	uint64_t dur_end = 0, max_end = 0;
	for (uint64_t b = 1; b <= L + 1; b++) {
		batch_runs(c, b, runs);
		for (uint32_t i = 0; i < c->runs; i++)
			for (uint32_t k = 0; k < runs[i].len; k++) {
				uint64_t r = runs[i].start + k;
				if (b <= L) {
					last[r] = b;
					if ((r + 1) * c->rs > dur_end)
						dur_end = (r + 1) * c->rs;
				} else {
					next[r] = 1;
				}
				if ((r + 1) * c->rs > max_end)
					max_end = (r + 1) * c->rs;
			}
	}
	uint64_t fsize = (uint64_t)sb.st_size, nerr = 0;
	uint64_t nrows = fsize / c->rs > c->nrows ? fsize / c->rs : c->nrows;
	uint64_t holes = 0, cur = 0, newer = 0, old_next = 0, touched = 0;
	size_t chunk = 4096, nw = c->rs / 8;
	uint64_t *buf = malloc(chunk * c->rs), *tmp = malloc(c->rs);
	if (!buf || !tmp)
		return 1;
	printf("verify: log has %" PRIu64 " batches, last L=%" PRIu64 "; file %" PRIu64
	       " bytes; durable end %" PRIu64 ", possible end %" PRIu64 "\n", count, L, fsize, dur_end,
	       max_end);
	if (fsize < dur_end || fsize > max_end || fsize % c->rs) {
		printf("verify: ERROR file size %" PRIu64 " not in [%" PRIu64 ", %" PRIu64 "] or not whole rows\n",
		       fsize, dur_end, max_end);
		nerr++;
	}
	for (uint64_t r0 = 0; r0 < nrows; r0 += chunk) {
		size_t want = (size_t)(nrows - r0 < chunk ? nrows - r0 : chunk) * c->rs, got = 0;
		while (got < want) {
			ssize_t n = pread(fd, (char *)buf + got, want - got, (off_t)(r0 * c->rs + got));
			if (n < 0) {
				fprintf(stderr, "verify: pread at row %" PRIu64 ": %s\n", r0, strerror(errno));
				return 1;
			}
			if (n == 0)
				break;
			got += (size_t)n;
		}
		memset((char *)buf + got, 0, want - got); /* past EOF reads as a hole */
		for (size_t i = 0; i < want / c->rs; i++) {
			uint64_t r = r0 + i, b = 0;
			uint64_t *w = buf + i * nw;
			int k = classify(c, r, w, &b, tmp);
			uint64_t exp = r < c->nrows ? last[r] : 0;
			int nx = r < c->nrows && next[r];
			const char *why = NULL;
			if (exp || nx)
				touched++;
			if (k < 0) {
				why = "torn or foreign content";
				b = w[1];
			} else if (k == 0) {
				if (exp)
					why = "hole, but a logged batch wrote it";
				else
					holes++, old_next += nx;
			} else if (b == exp) {
				cur++;
				old_next += nx;
			} else if (nx && b == L + 1) {
				newer++;
			} else {
				why = exp ? "stale or wrong version" : "version of a batch that never wrote it";
			}
			if (why) {
				if (nerr < 20)
					printf("verify: ERROR row %" PRIu64 ": %s (holds batch %" PRIu64
					       ", expected %" PRIu64 "%s; words %016" PRIx64 " %016" PRIx64 ")\n",
					       r, why, b, exp, nx ? " or the next" : "", w[0], w[1]);
				nerr++;
			}
		}
	}
	printf("verify: %" PRIu64 " rows read: %" PRIu64 " rows touched by batches 1..%" PRIu64
	       "; %" PRIu64 " at their last logged batch, %" PRIu64 " at batch %" PRIu64
	       " (begun, not logged), %" PRIu64 " of its rows still old; %" PRIu64 " holes; %" PRIu64
	       " errors\n", nrows, touched, L + 1, cur, newer, L + 1, old_next, holes, nerr);
	close(fd);
	free(buf);
	free(tmp);
	free(last);
	free(next);
	free(runs);
	return nerr ? 1 : 0;
}

static void usage(void)
{
	fprintf(stderr, "usage: crashwriter write|verify [-s SEED] [-k RUNS] [-n ROWS] [-r ROW_SIZE]"
			" [-b FIRST] [-m MAX] TABLE LOG\n");
	exit(2);
}

int main(int argc, char **argv)
{
	struct conf c = { 1, 32, 65536, 256, 1, 1000000, 0 };
	int opt;
	if (argc < 2)
		usage();
	const char *mode = argv[1];
	optind = 2;
	while ((opt = getopt(argc, argv, "s:k:n:r:b:m:")) != -1) {
		switch (opt) {
		case 's': c.seed = strtoull(optarg, NULL, 0); break;
		case 'k': c.runs = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 'n': c.nrows = strtoull(optarg, NULL, 0); break;
		case 'r': c.rs = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 'b': c.first = strtoull(optarg, NULL, 0); c.have_first = 1; break;
		case 'm': c.max = strtoull(optarg, NULL, 0); break;
		default: usage();
		}
	}
	if (argc - optind != 2 || c.runs == 0 || c.nrows < 2 || c.rs < 32 || c.rs % 8 || c.first == 0)
		usage();
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(mode, "write"))
		return do_write(&c, argv[optind], argv[optind + 1]);
	if (!strcmp(mode, "verify"))
		return do_verify(&c, argv[optind], argv[optind + 1]);
	usage();
	return 2;
}
