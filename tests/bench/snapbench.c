/*
 * snapbench: snapshot costs through a mounted embfs.
 *
 *   snapbench mkdir MNT N [GAP_MS [keep]]
 *       times N snapshot mkdirs (.snapshots/bench-PID-I), GAP_MS apart (0):
 *       prints p50, p99 (the ceil(0.99 N)-th smallest: the largest for
 *       N < 100), min, max and the span from the first to the last; then
 *       removes them, unless "keep"
 *   snapbench train MNT TABLE ROWS BATCHES EVERY [SEED]
 *       a training-like loop on MNT/TABLE: each batch reads 4096 rows drawn
 *       Zipf(0.99) over ROWS (hash-scrambled, one pread per row), adds 1 to
 *       the first float of each and writes it back (one pwrite per row);
 *       EVERY > 0: mkdir .snapshots/train-K every EVERY batches.  Prints
 *       rows/s (read+write pairs per second).
 *   snapbench space MNT TABLE ROWS K
 *       takes a snapshot, rewrites K distinct rows, prints the pool's used
 *       bytes and the snapshot's exclusive bytes before and after.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define RS 256
#define BATCH 4096

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

/* Zipf(s) over [1, n] by inversion of the continuous approximation. */
static uint64_t zipf(double s, uint64_t n, double u)
{
	double a = 1.0 - s;
	double hn = (pow((double)n + 0.5, a) - pow(0.5, a)) / a;
	double x = pow(u * hn * a + pow(0.5, a), 1.0 / a) - 0.5;
	uint64_t k = (uint64_t)(x + 1.0);
	return k < 1 ? 1 : k > n ? n : k;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static long stat_num(const char *mnt, const char *key)
{
	char p[4096], line[512];
	snprintf(p, sizeof(p), "%s/.embfs/stats", mnt);
	FILE *f = fopen(p, "r");
	long v = -1;
	size_t kl = strlen(key);
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, key, kl) && line[kl] == ' ')
			v = atol(line + kl + 1);
	if (f)
		fclose(f);
	return v;
}

static long snap_excl(const char *mnt, const char *name)
{
	char p[4096], line[512], key[300];
	snprintf(p, sizeof(p), "%s/.embfs/stats", mnt);
	snprintf(key, sizeof(key), "snapshot.%s ", name);
	FILE *f = fopen(p, "r");
	long v = -1;
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, key, strlen(key))) {
			char *e = strstr(line, "excl_bytes=");
			if (e)
				v = atol(e + 11);
		}
	if (f)
		fclose(f);
	return v;
}

int main(int argc, char **argv)
{
	char path[4096];
	if (argc >= 4 && !strcmp(argv[1], "mkdir")) {
		int n = atoi(argv[3]);
		long gap_ms = argc > 4 ? atol(argv[4]) : 0;
		int keep = argc > 5 && !strcmp(argv[5], "keep");
		if (n < 1 || gap_ms < 0) {
			fprintf(stderr, "snapbench mkdir: N >= 1 and GAP_MS >= 0\n");
			return 2;
		}
		double *t = calloc((size_t)n, sizeof(*t));
		double start = now();
		for (int i = 0; i < n; i++) {
			if (i && gap_ms) {
				struct timespec g = { gap_ms / 1000, (gap_ms % 1000) * 1000000 };
				nanosleep(&g, NULL);
			}
			snprintf(path, sizeof(path), "%s/.snapshots/bench-%d-%d", argv[2], (int)getpid(), i);
			double t0 = now();
			if (mkdir(path, 0755)) {
				perror(path);
				return 1;
			}
			t[i] = (now() - t0) * 1e6;
		}
		double span = now() - start;
		qsort(t, (size_t)n, sizeof(*t), cmp_d);
		int k99 = (99 * n + 99) / 100 - 1;
		printf("mkdir_us p50 %.0f p99 %.0f min %.0f max %.0f (n=%d, over %.2f s)\n", t[n / 2], t[k99], t[0],
		       t[n - 1], n, span);
		for (int i = 0; i < n && !keep; i++) {
			snprintf(path, sizeof(path), "%s/.snapshots/bench-%d-%d", argv[2], (int)getpid(), i);
			rmdir(path);
		}
		free(t);
		return 0;
	}
	if (argc >= 7 && !strcmp(argv[1], "train")) {
		uint64_t rows = strtoull(argv[4], NULL, 10);
		int batches = atoi(argv[5]), every = atoi(argv[6]);
		uint64_t seed = argc > 7 ? strtoull(argv[7], NULL, 10) : 1;
		snprintf(path, sizeof(path), "%s/%s", argv[2], argv[3]);
		int fd = open(path, O_RDWR);
		if (fd < 0) {
			perror(path);
			return 1;
		}
		uint64_t *ids = malloc(BATCH * sizeof(*ids));
		char row[RS];
		uint64_t rng = seed * 0x9E3779B97F4A7C15ull + 1;
		int snaps = 0;
		double t0 = now(), tsnap = 0;
		for (int b = 0; b < batches; b++) {
			for (int i = 0; i < BATCH; i++) {
				rng = mix(rng + 0x9E3779B97F4A7C15ull);
				double u = (double)(rng >> 11) / 9007199254740992.0;
				ids[i] = mix(zipf(0.99, rows, u)) % rows;
			}
			for (int i = 0; i < BATCH; i++) {
				if (pread(fd, row, RS, (off_t)(ids[i] * RS)) != RS)
					return perror("pread"), 1;
				float f;
				memcpy(&f, row, 4);
				f += 1.0f;
				memcpy(row, &f, 4);
				if (pwrite(fd, row, RS, (off_t)(ids[i] * RS)) != RS)
					return perror("pwrite"), 1;
			}
			if (every > 0 && (b + 1) % every == 0) {
				snprintf(path, sizeof(path), "%s/.snapshots/train-%d-%d", argv[2], (int)getpid(), snaps++);
				double s0 = now();
				if (mkdir(path, 0755))
					return perror(path), 1;
				tsnap += now() - s0;
			}
		}
		double dt = now() - t0;
		printf("train rows/s %.0f batches %d snapshots %d mkdir_total_ms %.1f seconds %.2f\n",
		       (double)batches * BATCH / dt, batches, snaps, tsnap * 1e3, dt);
		for (int i = 0; i < snaps; i++) {
			snprintf(path, sizeof(path), "%s/.snapshots/train-%d-%d", argv[2], (int)getpid(), i);
			rmdir(path);
		}
		return 0;
	}
	if (argc >= 6 && !strcmp(argv[1], "space")) {
		uint64_t rows = strtoull(argv[4], NULL, 10), k = strtoull(argv[5], NULL, 10);
		snprintf(path, sizeof(path), "%s/%s", argv[2], argv[3]);
		int fd = open(path, O_RDWR);
		if (fd < 0)
			return perror(path), 1;
		char name[64];
		snprintf(name, sizeof(name), "space-%d", (int)getpid());
		snprintf(path, sizeof(path), "%s/.snapshots/%s", argv[2], name);
		long used0 = stat_num(argv[2], "pool.used_bytes");
		if (mkdir(path, 0755))
			return perror(path), 1;
		char row[RS];
		memset(row, 0x5a, RS);
		for (uint64_t i = 0; i < k; i++) {
			uint64_t r = mix(i + 12345) % rows; /* distinct enough for k << rows */
			if (pwrite(fd, row, RS, (off_t)(r * RS)) != RS)
				return perror("pwrite"), 1;
		}
		fsync(fd);
		int d = open(argv[2], O_RDONLY);
		fsync(d); /* the mount root: every table written back */
		close(d);
		long used1 = stat_num(argv[2], "pool.used_bytes");
		long excl = snap_excl(argv[2], name);
		printf("space rows_changed %llu pool_used_delta %ld snapshot_excl_bytes %ld per_row %.0f\n",
		       (unsigned long long)k, used1 - used0, excl, k ? (double)excl / (double)k : 0.0);
		rmdir(path);
		return 0;
	}
	fprintf(stderr, "usage: snapbench mkdir MNT N [GAP_MS [keep]] | train MNT TABLE ROWS BATCHES EVERY [SEED] | "
			"space MNT TABLE ROWS K\n");
	return 2;
}
