/* Helpers for the unit tests of the store (after helpers.h and
 * embfs/store.h): row contents and a pool check that must come out clean. */
#ifndef EMBFS_TEST_STORE_HELPERS_H
#define EMBFS_TEST_STORE_HELPERS_H

#include <stdint.h>

/* The bytes of row id in its generation gen. */
static inline void fill(uint8_t *row, uint32_t rs, uint64_t id, uint64_t gen)
{
	for (uint32_t i = 0; i < rs; i++)
		row[i] = (uint8_t)(id * 131 + gen * 7 + i);
}

/* store_fsck finds no torn version, no slot used twice or leaked, no wrong
 * count, no bad spill stub and no wrong segment live count. */
static inline void fsck_clean(struct store *s)
{
	struct store_fsck f;
	OK(store_fsck(s, &f));
	if (f.bad_versions || f.double_refs || f.leaked_slots || f.bad_counts || f.bad_stubs ||
	    f.seg_live_off || f.bad_runs) {
		fprintf(stderr, "fsck: runs %llu bad %llu\n", (unsigned long long)f.runs, (unsigned long long)f.bad_runs);
		fprintf(stderr, "fsck: rows %llu bad %llu double %llu leaked %llu counts %llu stubs %llu bad %llu live-off %llu\n",
			(unsigned long long)f.rows, (unsigned long long)f.bad_versions,
			(unsigned long long)f.double_refs, (unsigned long long)f.leaked_slots,
			(unsigned long long)f.bad_counts, (unsigned long long)f.stubs,
			(unsigned long long)f.bad_stubs, (unsigned long long)f.seg_live_off);
		test_seed_say(stderr);
		exit(1);
	}
}

#endif
