/*
 * Times of the directories that have no catalog entry: the mount's root and
 * .snapshots keep mtime and ctime in the superblock (8-byte stores, flushed,
 * durable with the next barrier); .embfs shows the pool's creation time.
 */
#include <errno.h>

#include "store_int.h"

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
