/* Parse a size: bytes, or with a K/M/G/T suffix (optionally KiB, KB...). */
#ifndef EMBFS_SIZE_H
#define EMBFS_SIZE_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

static inline int embfs_parse_size(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || s[0] == '-')
		return -1;
	unsigned shift = 0;
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	case 't': case 'T': shift = 40; end++; break;
	}
	if (shift && (*end == 'i' || *end == 'I') && (end[1] == 'B' || end[1] == 'b'))
		end += 2;
	else if (shift && (*end == 'B' || *end == 'b'))
		end++;
	if (*end || v > (UINT64_MAX >> shift))
		return -1;
	*out = (uint64_t)v << shift;
	return 0;
}

#endif
