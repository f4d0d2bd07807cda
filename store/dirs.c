/*
 * Times and permissions of the directories that have no catalog entry: the
 * mount's root and .snapshots keep mtime and ctime in the superblock (8-byte
 * stores, flushed, durable with the next barrier); .embfs shows the pool's
 * creation time.  Their owner, group and mode are one checksummed record
 * each (struct emb_dirperm), changed in a transaction; a record never set
 * (all zero) means the daemon's defaults.
 */
#include <errno.h>
#include <stddef.h>
#include <xxhash.h>

#include "store_int.h"

#define SEED_DIRPERM 0x444952504552ull /* "DIRPER" */

static int fields(struct store *s, enum store_dir which, uint64_t **m, uint64_t **c)
{
	switch (which) {
	case STORE_DIR_ROOT:
		*m = &s->sb->root_mtime_ns;
		*c = &s->sb->root_ctime_ns;
		return 0;
	case STORE_DIR_SNAPS:
		*m = &s->sb->snaps_mtime_ns;
		*c = &s->sb->snaps_ctime_ns;
		return 0;
	default:
		return -EINVAL;
	}
}

int store_dir_times(struct store *s, enum store_dir which, struct store_dir_times *t)
{
	uint64_t born = s->sb->created_ns, *m, *c;
	t->atime_ns = t->mtime_ns = t->ctime_ns = born;
	if (which == STORE_DIR_POOL)
		return 0;
	int ret = fields(s, which, &m, &c);
	if (ret)
		return ret;
	uint64_t mv = ld64(m), cv = ld64(c);
	t->mtime_ns = mv ? mv : born;
	t->ctime_ns = cv ? cv : born;
	return 0;
}

int store_dir_touch(struct store *s, enum store_dir which)
{
	uint64_t *m, *c;
	int ret = fields(s, which, &m, &c);
	if (ret)
		return ret;
	uint64_t now = now_ns();
	max64(m, now);
	max64(c, now);
	pm_flush(s, m, sizeof(*m));
	pm_flush(s, c, sizeof(*c));
	return 0;
}

static struct emb_dirperm *perm_field(struct store *s, enum store_dir which)
{
	return which == STORE_DIR_ROOT ? &s->sb->root_perm : which == STORE_DIR_SNAPS ? &s->sb->snaps_perm : NULL;
}

static uint32_t perm_csum(const struct emb_dirperm *r)
{
	return (uint32_t)XXH64(r, offsetof(struct emb_dirperm, csum), SEED_DIRPERM);
}

int store_dir_perm(struct store *s, enum store_dir which, struct store_dir_perm *p)
{
	struct emb_dirperm *f = perm_field(s, which), r;
	if (!f)
		return -EINVAL;
	pthread_mutex_lock(&s->perm_lock);
	r = *f;
	pthread_mutex_unlock(&s->perm_lock);
	if (!r.uid && !r.gid && !r.mode && !r.csum)
		return 0;
	if (r.csum != perm_csum(&r) || !(r.mode & EMB_PERM_SET) || (r.mode & ~(EMB_PERM_SET | 07777u)))
		return -EUCLEAN;
	*p = (struct store_dir_perm){ r.uid, r.gid, r.mode & 07777u };
	return 1;
}

/* *f made r, in one transaction (perm_lock held). */
static int perm_put(struct store *s, struct emb_dirperm *f, const struct emb_dirperm *r)
{
	volatile int ret = pm_writable(s);
	if (ret)
		return ret;
	PM_TX(s) {
		pmemobj_tx_add_range_direct(f, sizeof(*f));
		*f = *r;
	} PM_TX_END(s, ret);
	return ret;
}

int store_dir_perm_set(struct store *s, enum store_dir which, const struct store_dir_perm *p)
{
	struct emb_dirperm *f = perm_field(s, which);
	uint64_t *m, *c;
	if (!f || (p->mode & ~07777u) || fields(s, which, &m, &c))
		return -EINVAL;
	struct emb_dirperm r = { p->uid, p->gid, EMB_PERM_SET | p->mode, 0 };
	r.csum = perm_csum(&r);
	pthread_mutex_lock(&s->perm_lock);
	int ret = perm_put(s, f, &r);
	pthread_mutex_unlock(&s->perm_lock);
	if (!ret) {
		max64(c, now_ns());
		pm_flush(s, c, sizeof(*c));
	}
	return ret;
}
