/* UTF-8 checking shared by the daemon's stats (fs/stats.c escapes table names
 * in .embfs/stats and .embfs/metrics) and embfsctl (escapes them for a
 * terminal): both pass valid sequences through and escape every other byte. */
#ifndef EMBFS_UTF8_H
#define EMBFS_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Length of the valid UTF-8 sequence at p (at most n bytes), 0 if none:
 * no overlong form, no surrogate, nothing past U+10FFFF. */
static inline size_t embfs_utf8_seq(const unsigned char *p, size_t n)
{
	size_t len;
	uint32_t c;
	if (p[0] < 0x80)
		return 1;
	if (p[0] >= 0xc2 && p[0] <= 0xdf)
		len = 2, c = p[0] & 0x1f;
	else if (p[0] >= 0xe0 && p[0] <= 0xef)
		len = 3, c = p[0] & 0x0f;
	else if (p[0] >= 0xf0 && p[0] <= 0xf4)
		len = 4, c = p[0] & 0x07;
	else
		return 0;
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		c = c << 6 | (p[i] & 0x3f);
	}
	if ((len == 3 && (c < 0x800 || (c >= 0xd800 && c <= 0xdfff))) || (len == 4 && (c < 0x10000 || c > 0x10ffff)))
		return 0;
	return len;
}

#endif
