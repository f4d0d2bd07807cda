/*
 * PUSH (include/embfs/batch.h): gradients applied to a table's rows in
 * place, by an optimizer whose state lives in the row's columns after the
 * weights.  This file owns the arithmetic (a row to f32 and back, the
 * optimizers, the initial values of rows never stored) and front_push(),
 * the read-update-write of a request's rows through the row cache.
 *
 * Atomicity: pushes to one table hold its push lock (struct front's
 * push_mu, by table id) from reading the rows to writing them, so two
 * pushers never update the same row from the same old bytes.  Through the
 * row cache (cache_update_rows) a cached row is updated in place under its
 * shard's lock, so even a write racing the push is before or after it; a
 * row not cached is read, updated and written back.  Gathers, writes and
 * scatters do not take the push lock: each row they read or write is
 * whole, as always.
 *
 * The arithmetic follows torch's operation by operation in f32 (and the
 * hyper-parameters rounded to f32 where torch rounds them), so a push
 * matches torch.optim on the same gradients within float rounding; this
 * file is built with -ffp-contract=off (no fused multiply-add).
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "embfs/front.h"

/* ---- rows <-> f32 ------------------------------------------------------- */

static float bf16_get(uint16_t b)
{
	uint32_t u = (uint32_t)b << 16;
	float x;
	memcpy(&x, &u, 4);
	return x;
}

/* Rounded to nearest even, NaN kept a quiet NaN (as embfs.f32_to_bf16). */
static uint16_t bf16_put(float x)
{
	uint32_t u;
	if (isnan(x))
		return 0x7FC0;
	memcpy(&u, &x, 4);
	return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

static void row_load(uint32_t dtype, const char *row, uint32_t cols, float *out)
{
	if (dtype == EMB_DT_F32) {
		memcpy(out, row, cols * 4ull);
	} else if (dtype == EMB_DT_F16) {
		const _Float16 *h = (const _Float16 *)row;
		for (uint32_t j = 0; j < cols; j++)
			out[j] = (float)h[j];
	} else {
		const uint16_t *b = (const uint16_t *)row;
		for (uint32_t j = 0; j < cols; j++)
			out[j] = bf16_get(b[j]);
	}
}

static void row_store(uint32_t dtype, const float *in, uint32_t cols, char *row)
{
	if (dtype == EMB_DT_F32) {
		memcpy(row, in, cols * 4ull);
	} else if (dtype == EMB_DT_F16) {
		_Float16 *h = (_Float16 *)row;
		for (uint32_t j = 0; j < cols; j++)
			h[j] = (_Float16)in[j];
	} else {
		uint16_t *b = (uint16_t *)row;
		for (uint32_t j = 0; j < cols; j++)
			b[j] = bf16_put(in[j]);
	}
}

/* ---- initial values (embfs.Init, python/embfs/init.py) ------------------ */

static uint64_t mix(uint64_t x)
{
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

/* Init._u01: a uniform double in (0, 1) for (seed, salt, row id, column j),
 * from the row's part (u01_base: the same for all its columns). */
static uint64_t u01_base(uint64_t seed, uint64_t salt, uint64_t id)
{
	return mix(id * 0x9E3779B97F4A7C15ull + (seed * 2 + salt));
}

static double u01(uint64_t base, uint32_t j)
{
	uint64_t x = mix(base + (uint64_t)(j + 1) * 0xD1B54A32D192ED03ull);
	return ((double)(x >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* Column j's value; b0, b1: the row's u01_base for salts 0 and 1. */
static double init_value(const struct embfs_batch_init *in, uint64_t b0, uint64_t b1, uint32_t j)
{
	if (j >= in->cols || in->kind == EMBFS_INIT_ZERO)
		return in->fill;
	switch (in->kind) {
	case EMBFS_INIT_UNIFORM:
		return in->p + (in->q - in->p) * u01(b0, j);
	case EMBFS_INIT_NORMAL: {
		double r = in->q * sqrt(-2.0 * log(u01(b0, j)));
		return in->p + r * cos(2.0 * M_PI * u01(b1, j));
	}
	default:
		return in->p;
	}
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define INIT_VEC 1
typedef uint64_t v8u __attribute__((vector_size(64)));
typedef int64_t v8i __attribute__((vector_size(64)));
typedef double v8d __attribute__((vector_size(64)));
typedef float v8f __attribute__((vector_size(32)));

/* The first k columns of a uniform f32 row, 8 at a time with AVX-512's
 * 64-bit multiplies (k a multiple of 8): the same operations as
 * init_value's, each rounded as there (no fused multiply-add), so the same
 * bits.  A new row's values cost ~105 ns for 64 columns one by one, ~37
 * this way. */
__attribute__((target("avx512f,avx512dq"), optimize("fp-contract=off"))) static void
uniform_f32_x8(double p, double q, uint64_t b0, uint32_t k, float *row)
{
	const v8u step = { 1, 2, 3, 4, 5, 6, 7, 8 };
	for (uint32_t j = 0; j < k; j += 8) {
		v8u x = b0 + ((uint64_t)j + step) * 0xD1B54A32D192ED03ull;
		x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
		x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
		x = x ^ (x >> 31);
		v8d u = (__builtin_convertvector((v8i)(x >> 11), v8d) + 0.5) * (1.0 / 9007199254740992.0);
		v8f f = __builtin_convertvector(p + (q - p) * u, v8f);
		memcpy(row + j, &f, sizeof(f));
	}
}
#endif

/* Row `id` as a row never stored starts: each column's double rounded once
 * to the table's dtype (bf16 through f32, as embfs.Init). */
static void init_row(const struct embfs_batch_init *in, uint32_t dtype, uint32_t cols, uint64_t id, char *row)
{
	uint64_t b0 = u01_base(in->seed, 0, id), b1 = u01_base(in->seed, 1, id);
	if (dtype == EMB_DT_F32) {
		uint32_t j = 0;
#ifdef INIT_VEC
		/* a test of libgcc's cpu model, read at its start */
		if (in->kind == EMBFS_INIT_UNIFORM && __builtin_cpu_supports("avx512f") &&
		    __builtin_cpu_supports("avx512dq")) {
			j = (in->cols < cols ? in->cols : cols) & ~7u;
			uniform_f32_x8(in->p, in->q, b0, j, (float *)row);
		}
#endif
		for (; j < cols; j++)
			((float *)row)[j] = (float)init_value(in, b0, b1, j);
	} else if (dtype == EMB_DT_F16) {
		for (uint32_t j = 0; j < cols; j++)
			((_Float16 *)row)[j] = (_Float16)init_value(in, b0, b1, j);
	} else {
		for (uint32_t j = 0; j < cols; j++)
			((uint16_t *)row)[j] = bf16_put((float)init_value(in, b0, b1, j));
	}
}

static int float_dtype(uint32_t dtype)
{
	return dtype == EMB_DT_F32 || dtype == EMB_DT_F16 || dtype == EMB_DT_BF16;
}

int front_init_check(const struct embfs_batch_init *in, uint32_t dtype)
{
	if (!float_dtype(dtype) || in->kind > EMBFS_INIT_CONSTANT || !isfinite(in->p) || !isfinite(in->q) ||
	    !isfinite(in->fill) || (in->kind == EMBFS_INIT_NORMAL && in->q < 0))
		return -EINVAL;
	return 0;
}

void front_init_rows(const struct embfs_batch_init *in, uint32_t dtype, uint32_t rs, const uint64_t *ids,
		     size_t n, const uint8_t *present, char *buf)
{
	uint32_t cols = rs / front_dtype_size(dtype);
	for (size_t i = 0; i < n; i++)
		if (!present[i])
			init_row(in, dtype, cols, ids[i], buf + i * rs);
}

/* ---- the optimizers ----------------------------------------------------- */

int front_push_state_cols(uint32_t optim, uint32_t dim)
{
	switch (optim) {
	case EMBFS_OPT_SGD:
		return 0;
	case EMBFS_OPT_ROWWISE_ADAGRAD:
		return 1;
	case EMBFS_OPT_ADAGRAD:
		return (int)dim;
	case EMBFS_OPT_ADAM:
		return 2 * (int)dim;
	default:
		return -1;
	}
}

static int finite_in(double x, double lo, double hi)
{
	return isfinite(x) && x >= lo && x <= hi;
}

int front_push_check(const struct embfs_batch_push *p, uint32_t dtype, uint32_t row_cols)
{
	int state = front_push_state_cols(p->optim, p->dim);
	if (!float_dtype(dtype))
		return -EINVAL; /* an optimizer updates float rows */
	if (state < 0 || p->dim == 0 || p->dim > row_cols || state > (int)(row_cols - p->dim))
		return -EINVAL;
	if (!finite_in(p->lr, -HUGE_VAL, HUGE_VAL) || !finite_in(p->eps, 0, HUGE_VAL) ||
	    !finite_in(p->weight_decay, -HUGE_VAL, HUGE_VAL))
		return -EINVAL;
	if (p->optim == EMBFS_OPT_ADAM ? p->step == 0 || !finite_in(p->beta1, 0, 1) || p->beta1 == 1 ||
						 !finite_in(p->beta2, 0, 1) || p->beta2 == 1
				       : p->step != 0)
		return -EINVAL;
	return front_init_check(&p->init, dtype);
}

/* What an update needs besides the row: the hyper-parameters as torch
 * rounds them to f32. */
struct opt {
	uint32_t optim, dim;
	float lr, eps, wd, one_b1, one_b2, neg_step;
};

static void opt_make(const struct embfs_batch_push *p, struct opt *o)
{
	*o = (struct opt){ .optim = p->optim, .dim = p->dim, .lr = (float)p->lr, .eps = (float)p->eps,
			   .wd = (float)p->weight_decay };
	if (p->optim == EMBFS_OPT_ADAM) {
		double t = (double)p->step;
		double bc1 = 1 - pow(p->beta1, t), bc2 = 1 - pow(p->beta2, t);
		o->one_b1 = (float)(1 - p->beta1);
		o->one_b2 = (float)(1 - p->beta2);
		o->neg_step = (float)-(p->lr * sqrt(bc2) / bc1);
	}
}

/* One row's update: w (dim weights, then the state) in f32, g its summed
 * gradient (dim values; with weight decay a copy, which it changes). */
static void opt_apply(const struct opt *o, float *restrict w, const float *restrict gin)
{
	uint32_t d = o->dim;
	float *g = (float *)gin;
	if (o->wd != 0)
		for (uint32_t j = 0; j < d; j++)
			g[j] = g[j] + o->wd * w[j];
	switch (o->optim) {
	case EMBFS_OPT_SGD:
		for (uint32_t j = 0; j < d; j++)
			w[j] = w[j] - o->lr * g[j];
		break;
	case EMBFS_OPT_ROWWISE_ADAGRAD: {
		float sq = 0;
		for (uint32_t j = 0; j < d; j++)
			sq += g[j] * g[j];
		float s = w[d] + sq / (float)d;
		float den = sqrtf(s) + o->eps;
		w[d] = s;
		for (uint32_t j = 0; j < d; j++)
			w[j] = w[j] - (o->lr * g[j]) / den;
		break;
	}
	case EMBFS_OPT_ADAGRAD: {
		float *s = w + d;
		for (uint32_t j = 0; j < d; j++) {
			s[j] = s[j] + g[j] * g[j];
			w[j] = w[j] + -o->lr * (g[j] / (sqrtf(s[j]) + o->eps));
		}
		break;
	}
	default: { /* EMBFS_OPT_ADAM */
		float *m = w + d, *v = w + 2 * d;
		for (uint32_t j = 0; j < d; j++) {
			m[j] = m[j] + (g[j] - m[j]) * o->one_b1;
			v[j] = v[j] + (g[j] * g[j] - v[j]) * o->one_b2;
			w[j] = w[j] + o->neg_step * (m[j] / (sqrtf(v[j]) + o->eps));
		}
		break;
	}
	}
}

/* ---- a request ---------------------------------------------------------- */

int front_finite(const float *v, size_t n)
{
	uint32_t bad = 0; /* no early exit: the loop vectorizes */
	for (size_t i = 0; i < n; i++) {
		uint32_t u;
		memcpy(&u, v + i, 4);
		bad |= (u & 0x7F800000u) == 0x7F800000u;
	}
	return !bad;
}

/* The request's ids without duplicates (*uids, *m of them) and their
 * gradients summed in request order (*ug): the request's own arrays when
 * it has no duplicates (*owned 0), else malloc'd ones (*owned 1). */
static int coalesce(const uint64_t *ids, const float *g, uint32_t n, uint32_t dim, const uint64_t **uids,
		    const float **ug, uint32_t *m, int *owned)
{
	uint32_t up = 1;
	while (up < n && ids[up] > ids[up - 1])
		up++;
	if (up >= n) { /* ascending (as np.unique gives them): no duplicate */
		*uids = ids, *ug = g, *m = n, *owned = 0;
		return 0;
	}
	struct front_idpos *s = front_sort_ids(ids, n);
	if (!s)
		return -ENOMEM;
	uint32_t k = n ? 1 : 0;
	for (uint32_t i = 1; i < n; i++)
		k += s[i].row != s[i - 1].row;
	if (k == n) {
		free(s);
		*uids = ids, *ug = g, *m = n, *owned = 0;
		return 0;
	}
	uint64_t *u = malloc(k * sizeof(*u));
	float *sum = malloc((size_t)k * dim * sizeof(*sum));
	if (!u || !sum) {
		free(s), free(u), free(sum);
		return -ENOMEM;
	}
	for (uint32_t i = 0, j = 0; i < n; j++) {
		u[j] = s[i].row;
		memcpy(sum + (size_t)j * dim, g + (size_t)s[i].pos * dim, dim * sizeof(float));
		for (i++; i < n && s[i].row == u[j]; i++)
			for (uint32_t c = 0; c < dim; c++)
				sum[(size_t)j * dim + c] += g[(size_t)s[i].pos * dim + c];
	}
	free(s);
	*uids = u, *ug = sum, *m = k, *owned = 1;
	return 0;
}

/* One row's push, as the row cache's update function. */
struct pushrow {
	const struct embfs_batch_push *p;
	struct opt o;
	uint32_t dtype, cols;
	const uint64_t *ids;
	const float *g;
	float *w, *gj; /* scratch: the row in f32, its gradient */
};

static void push_row(void *arg, size_t i, char *row, int stored)
{
	struct pushrow *x = arg;
	const float *g = x->g + i * x->p->dim;
	if (!stored)
		init_row(&x->p->init, x->dtype, x->cols, x->ids[i], row);
	if (x->o.wd != 0) { /* the decay is added to a copy */
		memcpy(x->gj, g, x->p->dim * sizeof(float));
		g = x->gj;
	}
	if (x->dtype == EMB_DT_F32 && !((uintptr_t)row & 3)) {
		opt_apply(&x->o, (float *)row, g); /* in place */
		return;
	}
	row_load(x->dtype, row, x->cols, x->w);
	opt_apply(&x->o, x->w, g);
	row_store(x->dtype, x->w, x->cols, row);
}

/* Through the row cache: each row updated in place (under its shard's
 * lock when cached), under the table's push lock. */
static int update_cached(struct front *f, uint32_t id, uint32_t rs, uint32_t dtype, const uint64_t *ids,
			 uint32_t m, const struct embfs_batch_push *p, const float *g, int64_t credit)
{
	struct pushrow x = { .p = p, .dtype = dtype, .cols = rs / front_dtype_size(dtype), .ids = ids, .g = g };
	x.w = malloc(((size_t)x.cols + p->dim) * sizeof(float));
	if (!x.w) {
		front_unreserve(f, id, rs, credit);
		return -ENOMEM;
	}
	x.gj = x.w + x.cols;
	opt_make(p, &x.o);
	pthread_mutex_t *mu = &f->push_mu[id % FRONT_PUSH_LOCKS];
	pthread_mutex_lock(mu);
	int ret = front_update(f, id, rs, ids, m, push_row, &x, credit);
	pthread_mutex_unlock(mu);
	free(x.w);
	return ret;
}

/* Without a row cache: the rows read, updated and written back, under the
 * table's push lock. */
static int update_rows(struct front *f, uint32_t id, uint32_t rs, uint32_t dtype, const uint64_t *ids,
		       uint32_t m, const struct embfs_batch_push *p, const float *g, int64_t credit)
{
	uint32_t cols = rs / front_dtype_size(dtype);
	char *rows = malloc((size_t)m * rs);
	uint8_t *present = malloc(m);
	float *w = malloc(((size_t)cols + p->dim) * sizeof(float));
	struct store_view v;
	struct opt o;
	int ret = rows && present && w ? 0 : -ENOMEM;
	opt_make(p, &o);
	pthread_mutex_t *mu = &f->push_mu[id % FRONT_PUSH_LOCKS];
	pthread_mutex_lock(mu);
	if (!ret)
		ret = front_view_live(f, id, &v);
	if (!ret)
		ret = front_rows_get(f, &v, rs, ids, m, rows, present);
	if (!ret) {
		float *gj = w + cols;
		for (uint32_t i = 0; i < m; i++) {
			char *row = rows + (size_t)i * rs;
			if (!present[i])
				init_row(&p->init, dtype, cols, ids[i], row);
			row_load(dtype, row, cols, w);
			memcpy(gj, g + (size_t)i * p->dim, p->dim * sizeof(float));
			opt_apply(&o, w, gj);
			row_store(dtype, w, cols, row);
		}
		ret = front_scatter(f, id, rs, ids, rows, m, credit);
		credit = 0;
	}
	pthread_mutex_unlock(mu);
	if (credit)
		front_unreserve(f, id, rs, credit);
	free(rows), free(present), free(w);
	return ret;
}

int front_push(struct front *f, uint32_t id, uint32_t rs, uint32_t dtype, const uint64_t *ids, uint32_t n,
	       const struct embfs_batch_push *p, const float *grads, int64_t credit)
{
	const uint64_t *uids;
	const float *ug;
	uint32_t m;
	int owned;
	int ret = coalesce(ids, grads, n, p->dim, &uids, &ug, &m, &owned);
	if (ret) {
		front_unreserve(f, id, rs, credit);
		return ret;
	}
	ret = f->cache ? update_cached(f, id, rs, dtype, uids, m, p, ug, credit)
		       : update_rows(f, id, rs, dtype, uids, m, p, ug, credit);
	if (owned) {
		free((void *)uids);
		free((void *)ug);
	}
	return ret;
}
