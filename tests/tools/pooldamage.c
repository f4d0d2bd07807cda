/*
 * pooldamage: inject one kind of damage into an unmounted embfs pool, for
 * tests/e2e/fsck.sh.  Opens the pool with libpmemobj (as the daemon would;
 * no embfs code), changes it with plain stores and persists them.
 *
 *   pooldamage zero-entry POOL NAME   zero table NAME's catalog entry (512 bytes)
 *   pooldamage stale-journal POOL     records left in the journal of a clean pool
 *   pooldamage journal-magic POOL     zero the journal's magic
 *   pooldamage leak POOL              mark one free slot of a row slab as used
 *   pooldamage lose-bit POOL          mark one used slot of a row slab as free
 *   pooldamage count POOL NAME        add 5 to table NAME's row count
 *   pooldamage rename POOL NAME       change a byte of table NAME's name (its checksum kept)
 *
 * Exit 0 done, 1 cannot (message on stderr), 2 usage.
 */
#include <libpmemobj.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embfs/layout.h"

static PMEMobjpool *pop;
static struct emb_super *sb;

static void *ptr(uint64_t off)
{
	return off ? (char *)pop + off : NULL;
}

static struct emb_table *entry(const char *name)
{
	for (uint32_t c = 0; c < EMB_CAT_CHUNKS; c++) {
		struct emb_table *tab = ptr(sb->cat_chunks[c]);
		for (uint32_t k = 0; tab && k < EMB_CAT_PER_CHUNK; k++)
			if ((tab[k].flags & EMB_T_USED) && !strcmp(tab[k].name, name))
				return &tab[k];
	}
	fprintf(stderr, "pooldamage: no table '%s'\n", name);
	exit(1);
}

/* The first slot of a row class's slabs whose bit is !used: its bit made
 * used (set) or free (cleared). */
static void flip_first(int used)
{
	for (uint32_t c = 0; c < EMB_MAX_CLASSES; c++) {
		struct emb_class *pc = &sb->classes[c];
		if (!pc->slot_size || pc->slot_size == EMB_SMALL_SLOT)
			continue;
		for (struct emb_slab *h = ptr(pc->head); h; h = ptr(h->next))
			for (uint32_t k = 0; k < h->nslots; k++) {
				uint64_t *w = &h->bitmap[k / 64], bit = 1ull << (k % 64);
				if (!!(*w & bit) == used)
					continue;
				*w ^= bit;
				pmemobj_persist(pop, w, 8);
				printf("slot %u of a %u-byte class\n", k, pc->slot_size);
				return;
			}
	}
	fprintf(stderr, "pooldamage: no %s row slot in any slab\n", used ? "free" : "used");
	exit(1);
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: pooldamage zero-entry|stale-journal|journal-magic|leak|lose-bit|count|rename POOL [NAME]\n");
		return 2;
	}
	const char *what = argv[1];
	pop = pmemobj_open(argv[2], EMB_LAYOUT);
	if (!pop) {
		fprintf(stderr, "pooldamage: %s: %s\n", argv[2], pmemobj_errormsg());
		return 1;
	}
	sb = pmemobj_direct(pmemobj_root(pop, 0));
	if (!strcmp(what, "zero-entry") && argc == 4) {
		struct emb_table *t = entry(argv[3]);
		memset(t, 0, sizeof(*t));
		pmemobj_persist(pop, t, sizeof(*t));
	} else if (!strcmp(what, "stale-journal")) {
		struct emb_journal *j = ptr(sb->journal_off);
		if (sb->clean != 1 || j->count) {
			fprintf(stderr, "pooldamage: the pool was not cleanly unmounted\n");
			return 1;
		}
		j->count = 3;
		pmemobj_persist(pop, &j->count, 8);
	} else if (!strcmp(what, "journal-magic")) {
		struct emb_journal *j = ptr(sb->journal_off);
		j->magic = 0;
		pmemobj_persist(pop, &j->magic, 8);
	} else if (!strcmp(what, "leak")) {
		flip_first(1); /* a free slot marked used */
	} else if (!strcmp(what, "lose-bit")) {
		flip_first(0); /* a row's slot marked free */
	} else if (!strcmp(what, "rename") && argc == 4) {
		struct emb_table *t = entry(argv[3]);
		t->name[0] ^= 0x20;
		pmemobj_persist(pop, t->name, 1);
	} else if (!strcmp(what, "count") && argc == 4) {
		struct emb_table *t = entry(argv[3]);
		t->nrows += 5;
		pmemobj_persist(pop, &t->nrows, 8);
	} else {
		fprintf(stderr, "pooldamage: bad command '%s'\n", what);
		return 2;
	}
	pmemobj_close(pop);
	return 0;
}
