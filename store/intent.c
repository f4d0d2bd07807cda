/*
 * A restore or rollback in progress (fs/restore.c does the work): the
 * superblock names it from before the first row changes until the last is
 * durable, so a pool opened with one pending finishes it before it serves
 * anything, and outside a crash it is all or nothing.  The record is
 * written in a transaction and checksummed: a torn or damaged one reads as
 * -EUCLEAN, never as another request.  While it is pending its snapshot
 * cannot be dropped (EBUSY).
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <xxhash.h>

#include "store_int.h"

#define SEED_INTENT 0x494e54454e54ull /* "INTENT" */

static uint64_t intent_csum(const struct emb_intent *r)
{
	return XXH64(r, offsetof(struct emb_intent, csum), SEED_INTENT);
}

int store_intent_get(struct store *s, struct store_intent *out)
{
	struct emb_intent r;
	pthread_mutex_lock(&s->meta_lock);
	memcpy(&r, &s->sb->intent, sizeof(r));
	pthread_mutex_unlock(&s->meta_lock);
	memset(out, 0, sizeof(*out));
	if (r.kind == EMB_INTENT_NONE && !r.csum)
		return 0;
	if (r.csum != intent_csum(&r) || (r.kind != EMB_INTENT_RESTORE && r.kind != EMB_INTENT_ROLLBACK) ||
	    r.snap_idx >= EMB_MAX_SNAPS)
		return -EUCLEAN;
	out->kind = r.kind;
	out->snap_idx = r.snap_idx;
	out->snap_gen = r.snap_gen;
	out->table_gen = r.table_gen;
	return 1;
}

/* The record made r (zeroed when r is NULL), in one transaction. */
static int intent_put(struct store *s, const struct emb_intent *r)
{
	volatile int ret = pm_writable(s);
	if (ret)
		return ret;
	PM_TX(s) {
		pmemobj_tx_add_range_direct(&s->sb->intent, sizeof(s->sb->intent));
		if (r)
			s->sb->intent = *r;
		else
			memset(&s->sb->intent, 0, sizeof(s->sb->intent));
	} PM_TX_END(s, ret);
	return ret;
}

int store_intent_set(struct store *s, const struct store_intent *in)
{
	if ((in->kind != STORE_INTENT_RESTORE && in->kind != STORE_INTENT_ROLLBACK) || in->snap_idx >= EMB_MAX_SNAPS)
		return -EINVAL;
	struct emb_intent r = { in->kind, in->snap_idx, in->snap_gen, in->table_gen, 0 };
	r.csum = intent_csum(&r);
	pthread_rwlock_wrlock(&s->snap_lock); /* against a drop of the snapshot */
	pthread_mutex_lock(&s->meta_lock);
	int ret = s->sb->intent.kind != EMB_INTENT_NONE || s->sb->intent.csum ? -EBUSY : intent_put(s, &r);
	pthread_mutex_unlock(&s->meta_lock);
	pthread_rwlock_unlock(&s->snap_lock);
	return ret;
}

int store_intent_clear(struct store *s)
{
	pthread_mutex_lock(&s->meta_lock);
	int ret = intent_put(s, NULL);
	pthread_mutex_unlock(&s->meta_lock);
	return ret;
}

int intent_pins(struct store *s, uint32_t idx)
{
	const struct emb_intent *r = &s->sb->intent;
	return r->kind != EMB_INTENT_NONE && r->snap_idx == idx;
}
