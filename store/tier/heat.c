/*
 * Heat of rows for the spill tier: a CLOCK reference bit per hashed row
 * (reads and commits set it, the mover's sweep clears it: cold rows go to the
 * device first) and a count of device reads of spilled rows (a row read twice
 * from the device is queued for promotion back into the pool).  Lock-free
 * (atomic bytes); the promotion queue is protected by sp->mu.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "spill.h"

uint64_t heat_slot(uint32_t table, uint64_t row)
{
	uint64_t h = (row ^ ((uint64_t)table << 40)) * 0x9E3779B97F4A7C15ull;
	return h >> (64 - HEAT_BITS);
}

void heat_ref(struct spill *sp, uint32_t table, uint64_t row)
{
	_Atomic uint8_t *h = &sp->heat[heat_slot(table, row)];
	if (!(atomic_load_explicit(h, memory_order_relaxed) & HEAT_REF))
		atomic_fetch_or_explicit(h, HEAT_REF, memory_order_relaxed);
}

void spill_note_use(struct store *s, uint32_t table, uint64_t row)
{
	if (s->sp)
		heat_ref(s->sp, table, row);
}

void queue_promote(struct spill *sp, uint32_t table, uint64_t row)
{
	pthread_mutex_lock(&sp->mu);
	if (sp->pq_n < PQ_CAP)
		sp->pq[sp->pq_n++] = (struct pq_ent){ table, row };
	pthread_mutex_unlock(&sp->mu);
}

/* A spilled row was read from the device: count it towards promotion. */
void heat_device_hit(struct spill *sp, uint32_t table, uint64_t row)
{
	_Atomic uint8_t *h = &sp->heat[heat_slot(table, row)];
	uint8_t old = atomic_load_explicit(h, memory_order_relaxed), nv;
	do {
		uint8_t hits = (uint8_t)((old & HEAT_HITS) + 1);
		nv = hits >= PROMOTE_AFTER ? HEAT_REF : (uint8_t)((old & HEAT_REF) | hits);
	} while (!atomic_compare_exchange_weak(h, &old, nv));
	if ((old & HEAT_HITS) + 1 >= PROMOTE_AFTER)
		queue_promote(sp, table, row);
}

void spill_note_device_hit(struct store *s, uint32_t table, uint64_t row)
{
	if (s->sp)
		heat_device_hit(s->sp, table, row);
}

/* Reference bit set: clear it and say so (second chance). */
int heat_test_clear(struct spill *sp, uint32_t table, uint64_t row)
{
	_Atomic uint8_t *h = &sp->heat[heat_slot(table, row)];
	if (!(atomic_load_explicit(h, memory_order_relaxed) & HEAT_REF))
		return 0;
	atomic_fetch_and_explicit(h, (uint8_t)~HEAT_REF, memory_order_relaxed);
	return 1;
}
