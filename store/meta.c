/*
 * Checksums of the pool's metadata that transactions change: the
 * superblock's dynamic fields (next_gen .. spill_off) and catalog entries.
 * Every transaction that changes a covered field reseals it before it
 * commits, under meta_lock (see store_int.h), so a checksum never lags its
 * fields on media; mount checks them (pool.c store_validate, catalog.c
 * catalog_check).  Fields changed by 8-byte stores outside transactions
 * (the batch id, the clean flag, sizes, row counts, times) are not covered.
 */
#include <errno.h>
#include <stddef.h>
#include <xxhash.h>

#include "store_int.h"

#define SEED_SUPER 0x5355504552ull /* "SUPER" */

uint64_t super_csum(const struct emb_super *sb)
{
	return XXH64(sb, EMB_SUPER_STATIC_LEN, 0);
}

/* The superblock's fields changed only in transactions, next_gen .. spill_off. */
uint64_t super_dyn_csum(const struct emb_super *sb)
{
	size_t from = offsetof(struct emb_super, next_gen), to = offsetof(struct emb_super, spill_off) + 8;
	return XXH64((const char *)sb + from, to - from, SEED_SUPER);
}

void super_seal_tx(struct store *s)
{
	pmemobj_tx_add_range_direct(&s->sb->dyn_csum, 8);
	s->sb->dyn_csum = super_dyn_csum(s->sb);
}

#define SEED_CAT 0x434154414cull /* "CATAL" */

uint64_t catalog_entry_csum(const struct emb_table *t)
{
	const char *p = (const char *)t;
	size_t dir = offsetof(struct emb_table, dir_off), sum = offsetof(struct emb_table, csum);
	size_t rest = offsetof(struct emb_table, reserved1);
	uint64_t h = XXH64(p, offsetof(struct emb_table, size), SEED_CAT);
	h = XXH64(p + dir, sum - dir, h);
	return XXH64(p + rest, sizeof(*t) - rest, h);
}

void catalog_seal_tx(struct emb_table *t)
{
	pmemobj_tx_add_range_direct(&t->csum, 8);
	t->csum = catalog_entry_csum(t);
}

/* The superblock's dynamic part and the offsets in it. */
int super_validate(struct store *s, char *err, size_t n)
{
	const struct emb_super *sb = s->sb;
	if (super_dyn_csum(sb) != sb->dyn_csum)
		return store_err(err, n, -EIO, "superblock is damaged (checksum mismatch)");
	if (!pool_range_ok(s, sb->journal_off, sizeof(struct emb_journal), 16) ||
	    !pool_range_ok(s, sb->snaps_off, sizeof(struct emb_snaps), 16) ||
	    !pool_range_ok(s, sb->resv_off, sizeof(struct emb_resv), 16))
		return store_err(err, n, -EIO, "superblock is damaged (an offset outside the pool)");
	for (uint32_t c = 0; c < EMB_CAT_CHUNKS; c++)
		if (sb->cat_chunks[c] &&
		    !pool_range_ok(s, sb->cat_chunks[c], EMB_CAT_PER_CHUNK * sizeof(struct emb_table), 16))
			return store_err(err, n, -EIO, "superblock is damaged (catalog chunk %u outside the pool)", c);
	return 0;
}
