/*
 * Repairs of a pool that fails validation (store_open_ext with
 * STORE_OPEN_REPAIR, for fsck.embfs), where the repair needs no guess:
 *
 * - a journal left with records after a clean unmount (stale: a clean
 *   unmount empties it after the last change finished) is emptied; a
 *   journal whose magic is damaged is rewritten when it holds nothing to
 *   replay (clean unmount, or no records);
 * - a catalog entry that is all zeros (its checksum too) becomes a free
 *   entry again.  A table it held is lost whatever is done: its rows become
 *   leaked slots, which store_fsck_run frees.
 *
 * Anything else (a damaged superblock, a catalog entry with data and a wrong
 * checksum, a damaged index, snapshot record or segment table, a damaged
 * journal of a crashed pool) is left as found: open_load's validation then
 * refuses the pool with its reason.  Runs on the mapped pool before anything
 * is loaded from it; every change is one 8-byte store made durable.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "store_int.h"

static void say(store_note_fn note, void *arg, int fixed, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void say(store_note_fn note, void *arg, int fixed, const char *fmt, ...)
{
	char msg[256];
	va_list ap;
	if (!note)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	note(arg, fixed, msg);
}

/* The journal: stale records after a clean unmount, a damaged magic. */
static int preen_journal(struct store *s, store_note_fn note, void *arg)
{
	struct emb_journal *j = s->jr;
	int clean = s->sb->clean == 1;
	int ret = 0;
	if (j->count && (clean || j->count > EMB_JOURNAL_CAP)) {
		if (!clean) {
			say(note, arg, 0, "journal: %llu records after a crash (damaged): left as found",
			    (unsigned long long)j->count);
			return 0;
		}
		st64(&j->count, 0);
		ret = pm_persist(s, &j->count, 8);
		say(note, arg, 1, "journal: %s after a clean unmount: emptied",
		    j->magic == EMB_JOURNAL_MAGIC ? "stale records" : "records");
	}
	if (!ret && j->magic != EMB_JOURNAL_MAGIC && !j->count) {
		st64(&j->magic, EMB_JOURNAL_MAGIC);
		ret = pm_persist(s, &j->magic, 8);
		say(note, arg, 1, "journal: bad magic (it held nothing to replay): rewritten");
	}
	return ret;
}

static int all_zero(const void *p, size_t n)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++)
		if (b[i])
			return 0;
	return 1;
}

/* Catalog entries that are all zeros: free entries again. */
static int preen_catalog(struct store *s, store_note_fn note, void *arg)
{
	static const struct emb_table zero;
	uint64_t free_sum = catalog_entry_csum(&zero);
	for (uint32_t c = 0; c < EMB_CAT_CHUNKS; c++) {
		if (!s->sb->cat_chunks[c])
			continue;
		struct emb_table *tab = S_PTR(s, s->sb->cat_chunks[c]);
		for (uint32_t k = 0; k < EMB_CAT_PER_CHUNK; k++) {
			struct emb_table *t = &tab[k];
			if (t->flags || t->csum == free_sum || !all_zero(t, sizeof(*t)))
				continue;
			st64(&t->csum, free_sum);
			int ret = pm_persist(s, &t->csum, 8);
			if (ret)
				return ret;
			say(note, arg, 1,
			    "catalog entry %u: zeroed: made a free entry (a table it held is lost, its rows leaked)",
			    c * EMB_CAT_PER_CHUNK + k);
		}
	}
	return 0;
}

int repair_preen(struct store *s, store_note_fn note, void *arg, char *err, size_t n)
{
	int ret = super_validate(s, err, n);
	if (ret)
		return ret; /* nothing below can be reached safely */
	ret = preen_journal(s, note, arg);
	if (!ret)
		ret = preen_catalog(s, note, arg);
	if (ret)
		return store_err(err, n, ret, "cannot write the repair: %s", strerror(-ret));
	return 0;
}
