/*
 * mmaptest: check a table through mmap(MAP_SHARED) against a seeded pattern.
 *
 *   mmaptest write  FILE OFF LEN SEED  map the file (size must cover
 *                                      OFF+LEN), store the pattern into
 *                                      [OFF, OFF+LEN), msync(MS_SYNC), unmap
 *   mmaptest pwrite FILE OFF LEN SEED  the same bytes with pwrite (extends)
 *   mmaptest check  FILE OFF LEN SEED [pread|mmap]
 *                                      [OFF, OFF+LEN) holds the pattern
 *   mmaptest zero   FILE OFF LEN [pread|mmap]
 *                                      [OFF, OFF+LEN) reads as zeros
 *
 * The pattern byte at file offset i depends only on SEED and i, so a range
 * written in pieces checks as a whole.  Exit 0 ok, 1 mismatch (first offset,
 * expected, got), 2 usage or system error.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* SEEK_DATA, fallocate */
#endif
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static uint8_t pat(uint64_t seed, uint64_t i)
{
	uint64_t z = seed * 0x9E3779B97F4A7C15ull + (i >> 3) + 1;
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	z ^= z >> 31;
	uint8_t b = (uint8_t)(z >> (8 * (i & 7)));
	return b ? b : 0x5a; /* never zero: a hole cannot pass for data */
}

static void __attribute__((noreturn)) die(const char *what)
{
	fprintf(stderr, "mmaptest: %s: %s\n", what, strerror(errno));
	exit(2);
}

static uint64_t num(const char *s)
{
	char *end;
	errno = 0;
	uint64_t v = strtoull(s, &end, 0);
	if (errno || end == s || *end) {
		fprintf(stderr, "mmaptest: bad number '%s'\n", s);
		exit(2);
	}
	return v;
}

/* Map [off, off+len) of fd; returns the address of off, sets base and maplen for munmap. */
static char *map_range(int fd, uint64_t off, uint64_t len, int prot, void **base, size_t *maplen)
{
	uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t start = off - off % pg;
	*maplen = (size_t)(off + len - start);
	*base = mmap(NULL, *maplen, prot, MAP_SHARED, fd, (off_t)start);
	if (*base == MAP_FAILED)
		die("mmap");
	return (char *)*base + (off - start);
}

/* Compare [off, off+len) with the pattern (zero: with zeros). */
static int verify(int fd, uint64_t off, uint64_t len, uint64_t seed, int zero, int use_mmap,
		  const char *file)
{
	void *base = NULL;
	size_t maplen = 0;
	char *p = NULL, *buf = NULL;
	const size_t chunk = 1 << 20;
	if (use_mmap)
		p = map_range(fd, off, len, PROT_READ, &base, &maplen);
	else if (!(buf = malloc(chunk)))
		die("malloc");
	for (uint64_t done = 0; done < len;) {
		size_t n = len - done < chunk ? (size_t)(len - done) : chunk;
		const char *d;
		if (use_mmap) {
			d = p + done;
		} else {
			ssize_t r = pread(fd, buf, n, (off_t)(off + done));
			if (r < 0)
				die("pread");
			if ((size_t)r != n) {
				fprintf(stderr, "mmaptest: %s: short read at %" PRIu64 ": %zd of %zu bytes\n",
					file, off + done, r, n);
				return 1;
			}
			d = buf;
		}
		for (size_t i = 0; i < n; i++) {
			uint8_t want = zero ? 0 : pat(seed, off + done + i);
			if ((uint8_t)d[i] != want) {
				fprintf(stderr, "mmaptest: %s: offset %" PRIu64 " (read by %s): expected 0x%02x, "
					"got 0x%02x\n", file, off + done + i, use_mmap ? "mmap" : "pread",
					want, (uint8_t)d[i]);
				return 1;
			}
		}
		done += n;
	}
	if (use_mmap)
		munmap(base, maplen);
	free(buf);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 5)
		goto usage;
	const char *cmd = argv[1], *file = argv[2];
	uint64_t off = num(argv[3]), len = num(argv[4]), seed = 0;
	int zero = !strcmp(cmd, "zero");
	int argi = 5;
	if (!zero) {
		if (argc < 6)
			goto usage;
		seed = num(argv[argi++]);
	}
	if (!strcmp(cmd, "write") || !strcmp(cmd, "pwrite")) {
		if (argc != argi)
			goto usage;
		int fd = open(file, O_RDWR);
		if (fd < 0)
			die(file);
		char *buf = malloc(len ? len : 1);
		if (!buf)
			die("malloc");
		for (uint64_t i = 0; i < len; i++)
			buf[i] = (char)pat(seed, off + i);
		if (cmd[0] == 'p') {
			if (pwrite(fd, buf, len, (off_t)off) != (ssize_t)len)
				die("pwrite");
		} else {
			struct stat st;
			if (fstat(fd, &st) != 0)
				die("fstat");
			if ((uint64_t)st.st_size < off + len) {
				fprintf(stderr, "mmaptest: %s is %lld bytes, need %" PRIu64 "\n", file,
					(long long)st.st_size, off + len);
				return 2;
			}
			void *base;
			size_t maplen;
			char *p = map_range(fd, off, len, PROT_READ | PROT_WRITE, &base, &maplen);
			memcpy(p, buf, len);
			if (msync(base, maplen, MS_SYNC) != 0)
				die("msync");
			if (munmap(base, maplen) != 0)
				die("munmap");
		}
		free(buf);
		if (close(fd) != 0)
			die("close");
		return 0;
	}
	if (strcmp(cmd, "check") && !zero)
		goto usage;
	int use_mmap = 0;
	if (argc == argi + 1 && !strcmp(argv[argi], "mmap"))
		use_mmap = 1;
	else if (argc == argi + 1 && strcmp(argv[argi], "pread"))
		goto usage;
	else if (argc > argi + 1)
		goto usage;
	int fd = open(file, O_RDONLY);
	if (fd < 0)
		die(file);
	int ret = verify(fd, off, len, seed, zero, use_mmap, file);
	close(fd);
	return ret;
usage:
	fprintf(stderr, "usage: mmaptest write|pwrite FILE OFF LEN SEED\n"
			"       mmaptest check FILE OFF LEN SEED [pread|mmap]\n"
			"       mmaptest zero FILE OFF LEN [pread|mmap]\n");
	return 2;
}
