/*
 * Row versions and links: their checksum and validated access.  Every read
 * of a version or link from the pool goes through here (directly, or by a
 * chain walk of version.c), so a damaged pool gives EIO (counted in
 * n_csum_errors), never wrong bytes and never a wild pointer.  Below the
 * index (which checks what its slots refer to with ref_row and ref_sound)
 * and below version.c (chains, which start at index entries).
 *
 * Layout (layout.h).  A version is a 16-byte header -- key (row id, kind,
 * the batch's high bits), the batch's low bits, a checksum -- and the row
 * bytes; a stub adds where its bytes are on the spill device; a tombstone
 * has no bytes.  A chain of more than one version has a link per element
 * but the last ({ key, ver, next }, 24 bytes): the index refers to the
 * first element, each link to its version and to the next older element.
 * So a row with one version costs its header and its index slot, and only
 * rows a snapshot holds older versions of pay for links.
 *
 * Checksum.  csum is XXH3-64 of the key (row, batch, the table's catalog
 * slot, whether it is a tombstone) and, in a version holding its bytes,
 * XXH3-64 of the row bytes seeded with the key's hash; folded to 32 bits.
 * The table is covered but not stored: a version is always read as one of
 * a known table.  XXH3 rather than XXH32: it is several times faster on rows
 * of a few hundred bytes, and the read path verifies every row it copies.  A
 * tombstone and a stub are covered by their key alone: a stub's bytes are
 * checked on the device (its record holds their XXH32 and the same key), so
 * a stub is verified without a device read and the mover's 8-byte loc
 * updates (compaction) need no new checksum.  Links carry no checksum; each
 * link's key must name its row, and what its ver and next lead to is
 * validated when followed.
 *
 * Validation of an offset before use (ver_get, link_get): inside the pool
 * mapping past libpmemobj's pool descriptor, 8-aligned, the key naming the
 * row and kind asked for, the checksum matching.  A chain walk also requires
 * strictly decreasing batches and at most EMB_MAX_SNAPS + 2 versions, so it
 * always ends.  A freed slot is poisoned (its row id all ones, which is no
 * row's; its kind kept) so that a damaged ref to an old version of the same
 * row cannot pass.
 *
 * ver_get_head checks a version holding bytes by its header alone (offset,
 * row, kind, and a batch no later than the pool's current one), not by
 * its digest: for a version a commit replaces whole and frees, when no
 * live snapshot can need it (commit.c, prepass), so its bytes are never
 * read.  A damaged batch can then only be one a version could have had,
 * which no snapshot taken later sees differently; should a snapshot come
 * before the commit decides, the version is checked whole then.
 *
 * In a build with EMBFS_TEST_HOOKS (the bench's daemon, never the shipped
 * one), EMBFS_VERIFY=0 in the environment at store_open skips the bytes'
 * digest on reads (for the read-path figure of make bench).
 */
#include <xxhash.h>

#include "store_int.h"

struct vkey {
	uint64_t row, batch;
	uint32_t table, tomb;
};

void ver_init(struct emb_version *v, uint64_t row, uint64_t batch, uint64_t kind)
{
	v->key = (row & EMB_ROW_ID_MASK) | (kind & EMB_VK_KIND) | (batch >> 32) << EMB_VK_BATCH_SHIFT;
	v->batch_lo = (uint32_t)batch;
}

uint32_t ver_csum(const struct emb_version *v, uint32_t id, uint32_t rs)
{
	struct vkey k = { ver_row(v), ver_batch(v), id, ver_tomb(v) };
	uint64_t h = XXH3_64bits(&k, sizeof(k));
	if (!(v->key & (EMB_VK_TOMB | EMB_VK_STUB)))
		h = XXH3_64bits_withSeed(ver_data(v), rs, h);
	return (uint32_t)(h ^ (h >> 32));
}

void ver_seal(struct emb_version *v, uint32_t id, uint32_t rs)
{
	v->csum = ver_csum(v, id, rs);
}

void ver_poison(struct store *s, uint64_t off)
{
	if (!pool_range_ok(s, off, sizeof(struct emb_version), 8))
		return;
	struct emb_version *v = S_PTR(s, off);
	/* the row id goes, the kind stays: a replay may still ask whether
	 * the version a finished commit freed was a tombstone */
	st64(&v->key, ld64(&v->key) | EMB_ROW_ID_MASK);
	pm_flush(s, &v->key, 8);
}

/* The version at off: full (its checksum) or, with head, a version holding
 * bytes checked by its header alone (below). */
static struct emb_version *ver_check(struct store *s, uint64_t off, uint32_t id, uint64_t row, uint32_t rs,
				     int head)
{
	if (pool_range_ok(s, off, sizeof(struct emb_version), 8)) {
		struct emb_version *v = S_PTR(s, off);
		uint64_t key = ld64(&v->key);
		uint64_t kind = key & EMB_VK_KIND;
		int bytes = !kind;
		if ((key & EMB_ROW_ID_MASK) == row && row <= EMB_ROW_ID_MAX &&
		    (kind == 0 || kind == EMB_VK_TOMB || kind == EMB_VK_STUB) &&
		    (!bytes || pool_range_ok(s, off, sizeof(*v) + rs, 8)) &&
		    (kind != EMB_VK_STUB || pool_range_ok(s, off, sizeof(struct emb_stub), 8)) &&
		    ((bytes && (s->no_verify || (head && ver_batch(v) <= ld64(&s->sb->batch)))) ||
		     v->csum == ver_csum(v, id, rs)))
			return v;
	}
	csum_error(s);
	return NULL;
}

struct emb_version *ver_get(struct store *s, uint64_t off, uint32_t id, uint64_t row, uint32_t rs)
{
	return ver_check(s, off, id, row, rs, 0);
}

struct emb_version *ver_get_head(struct store *s, uint64_t off, uint32_t id, uint64_t row, uint32_t rs)
{
	return ver_check(s, off, id, row, rs, 1);
}

struct emb_link *link_get(struct store *s, uint64_t off, uint64_t row)
{
	if (pool_range_ok(s, off, sizeof(struct emb_link), 8)) {
		struct emb_link *l = S_PTR(s, off);
		if (ld64(&l->key) == (row | EMB_VK_LINK) && row <= EMB_ROW_ID_MAX)
			return l;
	}
	csum_error(s);
	return NULL;
}

uint64_t ref_row(const struct store *s, uint64_t ref)
{
	uint64_t off = ref_obj(ref);
	if (!pool_range_ok(s, off, 8, 8))
		return EMB_NONE;
	return ld64(S_PTR(s, off)) & EMB_ROW_ID_MASK;
}

int ref_sound(struct store *s, struct stable *st, uint64_t ref)
{
	uint64_t row = ref_row(s, ref), off = ref_obj(ref);
	if (row == EMB_NONE)
		return 0;
	if (ref_is_link(ref)) {
		struct emb_link *l = link_get(s, off, row);
		if (!l)
			return 0;
		off = ld64(&l->ver);
	}
	return ver_get(s, off, st->id, row, st->t->row_size) != NULL;
}
