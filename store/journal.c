/*
 * The intent journal (emb_journal): records of one change of one table,
 * sealed by a checksum and made durable before the change starts, emptied
 * (one barrier) when it is done.  Commits (commit.c), reclaim (reclaim.c)
 * and relinks (version.c) use it; after a crash the pool's open replays a
 * sealed journal by its kind (pool.c), each kind's replay living with its
 * owner.  commit_lock held by every user.
 */
#include <errno.h>
#include <stddef.h>
#include <xxhash.h>

#include "store_int.h"

uint64_t journal_csum(const struct emb_journal *j, uint64_t count)
{
	XXH64_state_t *x = XXH64_createState();
	XXH64_reset(x, 0);
	XXH64_update(x, j, offsetof(struct emb_journal, csum));
	XXH64_update(x, j->ent, count * sizeof(j->ent[0]));
	uint64_t h = XXH64_digest(x);
	XXH64_freeState(x);
	return h;
}

/* Seal entries ent[0..n) of one table's change in the journal and make them
 * durable (one barrier): 0 or -EIO.  commit_lock held. */
int journal_seal(struct store *s, struct stable *st, uint32_t kind, uint64_t n, uint64_t size_hint)
{
	struct emb_journal *j = s->jr;
	j->seq++;
	j->count = n;
	j->kind = kind;
	j->table = st->id;
	j->nrows_before = st->t->nrows;
	j->size_hint = size_hint;
	j->csum = journal_csum(j, n);
	pm_flush(s, j, 64 + n * sizeof(j->ent[0]));
	return pm_barrier(s);
}

/* The change is done: empty the journal (one barrier): 0 or -EIO. */
int journal_clear(struct store *s)
{
	st64(&s->jr->count, 0);
	pm_flush(s, s->jr, 64);
	return pm_barrier(s);
}

int journal_valid(const struct emb_journal *j)
{
	return j->count > 0 && j->count <= EMB_JOURNAL_CAP && journal_csum(j, j->count) == j->csum;
}

int journal_check(struct store *s, char *err, size_t n)
{
	const struct emb_journal *j = s->jr;
	if (j->magic != EMB_JOURNAL_MAGIC)
		return store_err(err, n, -EIO, "journal is damaged (bad magic)");
	if (j->count > EMB_JOURNAL_CAP || (j->count && s->sb->clean))
		return store_err(err, n, -EIO, "journal is damaged (%llu records%s)", (unsigned long long)j->count,
				 s->sb->clean ? " after a clean unmount" : "");
	if (!journal_valid(j))
		return 0; /* empty, or a seal a crash cut short: nothing to replay */
	if (j->kind > EMB_J_RELINK || j->table >= EMB_NTABLES)
		return store_err(err, n, -EIO, "journal is damaged (kind or table)");
	for (uint64_t i = 0; i < j->count; i++) {
		const struct emb_jrec *r = &j->ent[i];
		uint64_t flags = r->aux & EMB_JR_FLAGS, aux = r->aux & ~EMB_JR_FLAGS;
		int old_ok = !r->old_off || (flags & EMB_JR_DAMAGED) ||
			     (r->old_off <= EMB_REF_MASK && pool_range_ok(s, ref_obj(r->old_off), EMB_SMALL_SLOT, 8));
		/* a new link comes with its new version, and only then */
		int new_ok = !r->new_off || (r->new_off <= EMB_REF_MASK &&
					     pool_range_ok(s, ref_obj(r->new_off), EMB_SMALL_SLOT, 8) &&
					     !aux == !ref_is_link(r->new_off));
		int aux_ok = !aux || pool_range_ok(s, aux, EMB_SMALL_SLOT, 8);
		if (r->row > EMB_ROW_ID_MAX || !old_ok || !new_ok || !aux_ok ||
		    (flags & ~(uint64_t)(EMB_JR_DAMAGED | EMB_JR_CHAIN)))
			return store_err(err, n, -EIO, "journal is damaged (record %llu)", (unsigned long long)i);
	}
	return 0;
}
