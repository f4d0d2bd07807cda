/*
 * snapcheck: a writer with a known pattern, and a checker of snapshots.
 *
 *   snapcheck write DIR NROWS ROUNDS   rounds over tables DIR/a.emb, DIR/b.emb:
 *       round g writes row i of a then row i of b, for i = 0..NROWS-1, each
 *       row filled with (table, row, g).  One pwrite per row, in that order.
 *   snapcheck check SNAPDIR NROWS      the snapshot must be one cut of that
 *       sequence: in the interleaved order (a0 b0 a1 b1 ...), the rounds
 *       read are non-increasing and differ by at most one, every row whole.
 *       Prints the round range it saw.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RS 256

static void fill(uint8_t *b, int table, uint64_t row, uint64_t g)
{
	uint64_t w[RS / 8];
	for (int i = 0; i < RS / 8; i++)
		w[i] = (g << 40) ^ (row << 8) ^ (uint64_t)table ^ ((uint64_t)i * 0x9E3779B97F4A7C15ull);
	w[0] = g;
	memcpy(b, w, RS);
}

/* Round of a row, 0 for a hole, -1 if torn or foreign. */
static int64_t decode(const uint8_t *b, int table, uint64_t row)
{
	uint64_t g;
	uint8_t want[RS];
	memcpy(&g, b, 8);
	int zero = 1;
	for (int i = 0; i < RS && zero; i++)
		zero = !b[i];
	if (zero)
		return 0;
	fill(want, table, row, g);
	return memcmp(want, b, RS) ? -1 : (int64_t)g;
}

int main(int argc, char **argv)
{
	if (argc < 4)
		goto usage;
	char pa[4096], pb[4096];
	snprintf(pa, sizeof(pa), "%s/a.emb", argv[2]);
	snprintf(pb, sizeof(pb), "%s/b.emb", argv[2]);
	uint64_t n = strtoull(argv[3], NULL, 10);
	uint8_t buf[RS];
	if (!strcmp(argv[1], "write") && argc == 5) {
		uint64_t rounds = strtoull(argv[4], NULL, 10);
		int fa = open(pa, O_WRONLY | O_CREAT, 0644), fb = open(pb, O_WRONLY | O_CREAT, 0644);
		if (fa < 0 || fb < 0) {
			perror("open");
			return 1;
		}
		for (uint64_t g = 1; g <= rounds; g++)
			for (uint64_t r = 0; r < n; r++) {
				fill(buf, 0, r, g);
				if (pwrite(fa, buf, RS, (off_t)(r * RS)) != RS)
					return perror("pwrite a"), 1;
				fill(buf, 1, r, g);
				if (pwrite(fb, buf, RS, (off_t)(r * RS)) != RS)
					return perror("pwrite b"), 1;
			}
		return 0;
	}
	if (!strcmp(argv[1], "check") && argc == 4) {
		int fa = open(pa, O_RDONLY), fb = open(pb, O_RDONLY);
		if (fa < 0 && fb < 0) {
			printf("empty snapshot\n");
			return 0;
		}
		int64_t prev = INT64_MAX, hi = -1, lo = INT64_MAX;
		for (uint64_t r = 0; r < n; r++)
			for (int t = 0; t < 2; t++) {
				int fd = t ? fb : fa;
				ssize_t got = fd < 0 ? 0 : pread(fd, buf, RS, (off_t)(r * RS));
				if (got < RS)
					memset(buf + (got > 0 ? got : 0), 0, RS - (size_t)(got > 0 ? got : 0));
				int64_t g = decode(buf, t, r);
				if (g < 0) {
					fprintf(stderr, "torn or foreign row %llu of %s\n", (unsigned long long)r,
						t ? "b" : "a");
					return 1;
				}
				if (g > prev || (prev != INT64_MAX && prev - g > 1)) {
					fprintf(stderr, "not one cut: row %llu of %s has round %lld after %lld\n",
						(unsigned long long)r, t ? "b" : "a", (long long)g, (long long)prev);
					return 1;
				}
				prev = g;
				hi = g > hi ? g : hi;
				lo = g < lo ? g : lo;
			}
		printf("consistent cut, rounds %lld..%lld\n", (long long)lo, (long long)hi);
		return 0;
	}
usage:
	fprintf(stderr, "usage: snapcheck write DIR NROWS ROUNDS | check SNAPDIR NROWS\n");
	return 2;
}
