/*
 * Row ids for the benchmarks, shared so that every program draws the same
 * stream: a xoshiro256** generator, a Zipf(theta) sampler over ranks 1..n by
 * rejection-inversion (W. Hormann, G. Derflinger), and a fixed permutation
 * of [0, n) that spreads the hot ranks over the table (rank -> row); a
 * latency histogram and option parsing.
 */
#ifndef EMBFS_BENCH_H
#define EMBFS_BENCH_H

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

struct rng {
	uint64_t s[4];
};

static inline uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static inline void rng_seed(struct rng *r, uint64_t seed)
{
	for (int i = 0; i < 4; i++)
		r->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static inline uint64_t rng_next(struct rng *r)
{
	uint64_t *s = r->s;
	uint64_t res = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return res;
}

/* uniform in [0, 1) */
static inline double rng_unit(struct rng *r)
{
	return (double)(rng_next(r) >> 11) * 0x1.0p-53;
}

/* ---- Zipf by rejection-inversion: ranks 1..n, P(k) ~ k^-theta ---- */

struct zipf {
	double n, theta;
	double hx1, hn, s;
};

static inline double helper1(double x) /* log1p(x) / x */
{
	return fabs(x) > 1e-8 ? log1p(x) / x : 1 - x * (0.5 - x * (1.0 / 3 - 0.25 * x));
}

static inline double helper2(double x) /* expm1(x) / x */
{
	return fabs(x) > 1e-8 ? expm1(x) / x : 1 + x * 0.5 * (1 + x * (1.0 / 3) * (1 + 0.25 * x));
}

/* H(x) = integral of x^-theta, shifted so that it is smooth at theta = 1 */
static inline double zipf_H(const struct zipf *z, double x)
{
	double lx = log(x);
	return helper2((1 - z->theta) * lx) * lx;
}

static inline double zipf_h(const struct zipf *z, double x)
{
	return exp(-z->theta * log(x));
}

static inline double zipf_Hinv(const struct zipf *z, double x)
{
	double t = x * (1 - z->theta);
	if (t < -1)
		t = -1;
	return exp(helper1(t) * x);
}

static inline void zipf_init(struct zipf *z, uint64_t n, double theta)
{
	z->n = (double)n;
	z->theta = theta;
	z->hx1 = zipf_H(z, 1.5) - 1;
	z->hn = zipf_H(z, z->n + 0.5);
	z->s = 2 - zipf_Hinv(z, zipf_H(z, 2.5) - zipf_h(z, 2));
}

static inline uint64_t zipf_next(const struct zipf *z, struct rng *r)
{
	for (;;) {
		double u = z->hn + rng_unit(r) * (z->hx1 - z->hn);
		double x = zipf_Hinv(z, u);
		double k = floor(x + 0.5);
		if (k < 1)
			k = 1;
		else if (k > z->n)
			k = z->n;
		if (k - x <= z->s || u >= zipf_H(z, k + 0.5) - zipf_h(z, k))
			return (uint64_t)k;
	}
}

/* ---- rank -> row: a fixed permutation of [0, n) ---- */

struct perm {
	uint64_t n, mask;
	int bits;
};

static inline void perm_init(struct perm *p, uint64_t n)
{
	p->bits = 1;
	while (p->bits < 64 && (1ull << p->bits) < n)
		p->bits++;
	p->mask = p->bits == 64 ? ~0ull : (1ull << p->bits) - 1;
	p->n = n;
}

/* invertible on [0, 2^bits): odd adds and multiplies, xor-shifts, all mod 2^bits */
static inline uint64_t perm_mix(const struct perm *p, uint64_t x)
{
	static const uint64_t k[4][2] = {
		{ 0x9E3779B97F4A7C15ull, 0xBF58476D1CE4E5B9ull },
		{ 0x94D049BB133111EBull, 0xD6E8FEB86659FD93ull },
		{ 0xC2B2AE3D27D4EB4Full, 0x165667B19E3779F9ull },
		{ 0x27D4EB2F165667C5ull, 0xFF51AFD7ED558CCDull },
	};
	int h = p->bits / 2 > 0 ? p->bits / 2 : 1;
	for (int i = 0; i < 4; i++) {
		x = ((x + k[i][0]) * k[i][1]) & p->mask;
		x ^= x >> h;
	}
	return x;
}

static inline uint64_t perm_row(const struct perm *p, uint64_t rank0)
{
	uint64_t x = rank0;
	do /* cycle-walk until back inside [0, n); at most 2^bits / n steps expected */
		x = perm_mix(p, x);
	while (x >= p->n);
	return x;
}

/* ---- latency histogram: 32 sub-buckets per power of two ---- */

#define HIST_SUB 32 /* sub-buckets per power of two */
#define HIST_N (64 * HIST_SUB)

static inline unsigned hist_idx(uint64_t v)
{
	if (v < HIST_SUB)
		return (unsigned)v;
	int e = 63 - __builtin_clzll(v); /* >= 5 */
	return (unsigned)((e - 4) * HIST_SUB + ((v >> (e - 5)) & (HIST_SUB - 1)));
}

static inline double hist_val(unsigned i)
{
	if (i < HIST_SUB)
		return i;
	int e = (int)(i / HIST_SUB) + 4;
	uint64_t lo = (1ull << e) | ((uint64_t)(i % HIST_SUB) << (e - 5));
	return (double)lo + (double)(1ull << (e - 5)) / 2;
}

static inline double hist_pct(const uint64_t *h, uint64_t total, double pct)
{
	uint64_t want = (uint64_t)ceil(total * pct / 100.0), acc = 0;
	if (want == 0)
		want = 1;
	for (unsigned i = 0; i < HIST_N; i++) {
		acc += h[i];
		if (acc >= want)
			return hist_val(i);
	}
	return 0;
}

/* ---- options ---- */

static inline int parse_u64(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-')
		return -1;
	*out = v;
	return 0;
}

#endif
