/*
 * Test hooks of the store: for tests/unit and the store's own files only.
 * Nothing that ships (fs/, mkfs/, the daemon) includes this header; a caller
 * of include/embfs/store.h cannot see or set what it declares.
 *
 * Set the hooks after store_open() and before store_spill_attach(): the
 * attach takes them into the spill tier, which reads them from then on
 * without a lock.
 */
#ifndef EMBFS_STORE_TEST_H
#define EMBFS_STORE_TEST_H

#include <stdint.h>

#include "embfs/store.h"

struct store_test_spill {
	/* called by the mover each time it has let commit_lock go with device
	 * work in flight (a chunk of stubs, a compaction piece, an eviction's
	 * run), so that a test can change rows in between; NULL: none */
	void (*unlocked)(void *arg);
	void *unlocked_arg;
	/* segments one block of a new run's segment list names (0: as many as
	 * a block holds, 1014 in 4 KiB), so that small runs list their
	 * segments in several blocks */
	uint32_t run_list_cap;
	/* row versions in the pool past which the mover's eviction hand goes
	 * in the index's order, not in row order (0: 1 Mi; 1: nearly always) */
	uint64_t evict_order_max;
	/* bulk loads go straight into runs even while the pool has room for
	 * their rows below the low watermark (store/tier/bulk.c) */
	int bulk_always;
	/* the records a sweep's part holds, in bytes (store/tier/runsweep.c; 0:
	 * 64 MiB), so that small tables are swept in parts */
	uint64_t sweep_part_bytes;
	/* the mover merges all runs of a table (or sweeps them) whatever the
	 * device's fill, not only when it is half full */
	int whole_always;
	/* a mover round whose evictions a waiting writer asked for and that
	 * gave room back sleeps this long before its merges (ms; 0: no), so
	 * that a test sees writers go on after the evictions */
	uint32_t merge_delay_ms;
	/* a merge sleeps this long each time it checks for an eviction (every
	 * MERGE_EVICT_ROWS rows it writes; ms; 0: no), so that a test sees
	 * evictions made in the middle of a long merge */
	uint32_t merge_slow_ms;
	/* rows one eviction (one run) takes at most (0: no limit of the
	 * test's), and how long the mover thread sleeps after each eviction
	 * (ms; 0: no), so that a test sees a pass of several slow runs */
	uint32_t evict_rows;
	uint32_t evict_slow_ms;
	/* every row counts as cold to the mover's sweep (no second chance), so
	 * that a test's sweep reaches the rows it just changed */
	int all_cold;
};

/* Was the newest run of table id fresh when it came (its rows in no other
 * run of the table: store/tier/runevict.c)?  1 or 0; -1: it has no run. */
int store_test_newest_fresh(struct store *s, uint32_t id);

/* Set the spill tier's test hooks of s (a copy of *h; NULL: none) for the
 * next store_spill_attach(). */
void store_test_spill_hooks(struct store *s, const struct store_test_spill *h);

#endif
