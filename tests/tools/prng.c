/*
 * prng: the randomness of the end-to-end tests, from their seed (tests/lib.sh
 * rand and rand_bytes), so that EMBFS_SEED replays a run.
 *   prng bytes SEED STREAM SIZE   SIZE bytes (K, M, G suffixes) to stdout
 *   prng num SEED STREAM N        a number in [0, N)
 * Each (SEED, STREAM) gives its own sequence (splitmix64).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t next(uint64_t *x)
{
	uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* A number with an optional K, M or G suffix; exits on anything else. */
static uint64_t num(const char *s)
{
	char *end;
	errno = 0;
	uint64_t v = strtoull(s, &end, 0);
	if (errno || end == s)
		goto bad;
	switch (*end) {
	case 'K': v <<= 10; end++; break;
	case 'M': v <<= 20; end++; break;
	case 'G': v <<= 30; end++; break;
	}
	if (*end)
		goto bad;
	return v;
bad:
	fprintf(stderr, "prng: bad number '%s'\n", s);
	exit(2);
}

int main(int argc, char **argv)
{
	if (argc != 5 || (strcmp(argv[1], "bytes") && strcmp(argv[1], "num"))) {
		fprintf(stderr, "usage: prng bytes SEED STREAM SIZE | prng num SEED STREAM N\n");
		return 2;
	}
	uint64_t x = next(&(uint64_t){ num(argv[2]) }) ^ num(argv[3]) * 0xD1B54A32D192ED03ull;
	uint64_t n = num(argv[4]);
	if (!strcmp(argv[1], "num")) {
		if (!n) {
			fprintf(stderr, "prng: num needs N > 0\n");
			return 2;
		}
		printf("%" PRIu64 "\n", next(&x) % n);
		return 0;
	}
	static uint64_t buf[8192];
	while (n) {
		size_t k = n < sizeof(buf) ? (size_t)n : sizeof(buf);
		for (size_t i = 0; i < (k + 7) / 8; i++)
			buf[i] = next(&x);
		for (size_t done = 0; done < k;) {
			ssize_t w = write(1, (char *)buf + done, k - done);
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0)
				return errno == EPIPE ? 0 : 1;
			done += (size_t)w;
		}
		n -= k;
	}
	return 0;
}
