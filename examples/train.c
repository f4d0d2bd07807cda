/*
 * train: a small click model whose embedding tables live on embfs (the C
 * twin of train.py; see docs/files.md "Batched rows").
 *
 *   build/examples/train MNT [BATCHES [EVERY]]       (defaults 1000, 100)
 *
 * Synthetic data: users and items drawn Zipf(0.99); a click happens with
 * probability sigmoid(6 * cos(true_user, true_item)) for hidden true vectors.
 * The model scores a pair by the dot product of their embeddings.
 * MNT/user.emb and MNT/item.emb hold one row per id: 16 float weights and a
 * row-wise Adagrad accumulator (dim 17, f32), created if missing.
 *
 * Each step is one MULTI request on MNT/.embfs/rows for both tables: the
 * previous step's gradients pushed (the daemon applies row-wise Adagrad to
 * the rows in place) and this step's unique user and item rows gathered
 * after them (rows never written come back from the request's init spec:
 * normal, sd 0.1).  Then the next batch's ids are announced (PREFETCH) and
 * the logistic loss and gradients computed.
 * Every EVERY steps: print the loss, write the step number to .embfs/batch
 * (the batch id) and, if MNT/.snapshots exists, mkdir .snapshots/step-N.
 * Only ordinary file calls; the request layout is include/embfs/batch.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "embfs/batch.h"

#define DIM 16           /* weights per row; a row holds DIM + 1 floats */
#define ROW (DIM + 1)
#define NUSERS 20000
#define NITEMS 5000
#define BATCH 1024
#define LR 0.1f

struct table {
	const char *name;
	char path[4096];
	uint64_t ino;
};

static void die(const char *what, const char *arg)
{
	fprintf(stderr, "train: %s %s: %s\n", what, arg, strerror(errno));
	exit(1);
}

/* ---- random numbers and data ------------------------------------------ */

static uint64_t rng_state = 1;

static uint64_t rnd(void)
{
	uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static double unit(void)
{
	return (double)(rnd() >> 11) * 0x1.0p-53;
}

static float gauss(void)
{
	return (float)(sqrt(-2 * log(unit() + 1e-300)) * cos(2 * M_PI * unit()));
}

/* Zipf(theta) over [0, n) by inverse CDF */
struct zipf {
	double *cdf;
	uint32_t n;
};

static void zipf_init(struct zipf *z, uint32_t n, double theta)
{
	z->n = n;
	z->cdf = malloc(n * sizeof(double));
	double s = 0;
	for (uint32_t k = 0; k < n; k++)
		z->cdf[k] = s += pow(k + 1.0, -theta);
	for (uint32_t k = 0; k < n; k++)
		z->cdf[k] /= s;
}

static uint32_t zipf_draw(const struct zipf *z)
{
	double u = unit();
	uint32_t lo = 0, hi = z->n - 1;
	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;
		if (z->cdf[mid] < u)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static void unit_vectors(float *v, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		double norm = 0;
		for (int d = 0; d < DIM; d++) {
			v[i * DIM + d] = gauss();
			norm += (double)v[i * DIM + d] * v[i * DIM + d];
		}
		for (int d = 0; d < DIM; d++)
			v[i * DIM + d] /= (float)sqrt(norm);
	}
}

struct batch {
	uint32_t u[BATCH], i[BATCH];
	float y[BATCH];
};

static void make_batch(struct batch *b, const struct zipf *zu, const struct zipf *zi, const float *tu,
		       const float *ti)
{
	for (int k = 0; k < BATCH; k++) {
		b->u[k] = zipf_draw(zu);
		b->i[k] = zipf_draw(zi);
		float dot = 0;
		for (int d = 0; d < DIM; d++)
			dot += tu[b->u[k] * DIM + d] * ti[b->i[k] * DIM + d];
		b->y[k] = unit() < 1 / (1 + exp(-6.0 * dot)) ? 1.0f : 0.0f;
	}
}

/* unique ids of ids[0..n) into uniq (sorted), pos[k] = index of ids[k] in uniq */
static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static uint32_t unique(const uint32_t *ids, uint32_t n, uint64_t *uniq, uint32_t *pos)
{
	for (uint32_t k = 0; k < n; k++)
		uniq[k] = ids[k];
	qsort(uniq, n, sizeof(*uniq), cmp_u64);
	uint32_t m = 0;
	for (uint32_t k = 0; k < n; k++)
		if (!m || uniq[m - 1] != uniq[k])
			uniq[m++] = uniq[k];
	for (uint32_t k = 0; k < n; k++) {
		uint32_t lo = 0, hi = m - 1;
		while (lo < hi) {
			uint32_t mid = (lo + hi) / 2;
			if (uniq[mid] < ids[k])
				lo = mid + 1;
			else
				hi = mid;
		}
		pos[k] = lo;
	}
	return m;
}

/* ---- embfs: tables and the batch file --------------------------------- */

static void table_open(struct table *t, const char *mnt, const char *name)
{
	char v[32];
	struct stat st;
	t->name = name;
	snprintf(t->path, sizeof(t->path), "%s/%s", mnt, name);
	if (stat(t->path, &st)) {
		int fd = open(t->path, O_CREAT | O_RDWR, 0644);
		if (fd < 0)
			die("create", t->path);
		close(fd);
		if (setxattr(t->path, "user.embfs.dim", "17", 2, 0) ||
		    setxattr(t->path, "user.embfs.dtype", "f32", 3, 0))
			die("setxattr", t->path);
		printf("created %s (dim %d, f32)\n", t->path, ROW);
		if (stat(t->path, &st))
			die("stat", t->path);
	}
	ssize_t n = getxattr(t->path, "user.embfs.dim", v, sizeof(v) - 1);
	if (n <= 0)
		die("getxattr user.embfs.dim of", t->path);
	v[n] = 0;
	if (atoi(v) != ROW) {
		fprintf(stderr, "train: %s has dim %s; this example needs %d x f32\n", t->path, v, ROW);
		exit(1);
	}
	t->ino = st.st_ino;
}

/* The buffers *iov[0..*n) less their first `got` bytes (changed in place). */
static void iov_advance(struct iovec **iov, int *n, size_t got)
{
	while (*n && got >= (*iov)->iov_len) {
		got -= (*iov)->iov_len;
		(*iov)++;
		(*n)--;
	}
	if (*n) {
		(*iov)->iov_base = (char *)(*iov)->iov_base + got;
		(*iov)->iov_len -= got;
	}
}

/* Write a whole request at offset 0: the kernel may take it in pieces, and a
 * short write means "send the rest", which then fails with the error. */
static void send_req(int fd, struct iovec *iov, int n)
{
	size_t total = 0, done = 0;
	for (int k = 0; k < n; k++)
		total += iov[k].iov_len;
	while (done < total) {
		ssize_t w = pwritev(fd, iov, n, (off_t)done);
		if (w < 0)
			die("batch request to", ".embfs/rows");
		done += (size_t)w;
		iov_advance(&iov, &n, (size_t)w);
	}
}

static void request(int fd, uint32_t op, const struct table *t, const uint64_t *ids, uint32_t n,
		    const float *rows)
{
	size_t rlen = op == EMBFS_BATCH_SCATTER ? (size_t)n * ROW * sizeof(float) : 0;
	struct embfs_batch_hdr h = { .op = op, .table_ino = t->ino, .count = n,
				     .total_len = sizeof(h) + 8ull * n + rlen };
	memcpy(h.magic, EMBFS_BATCH_MAGIC, 4);
	struct iovec iov[3] = { { &h, sizeof(h) }, { (void *)ids, 8ull * n }, { (void *)rows, rlen } };
	send_req(fd, iov, rlen ? 3 : 2);
}

/* One table's part of a step: the gradients to push (n_push rows, none on
 * the first step), the rows to gather. */
struct part {
	const struct table *t;
	const uint64_t *push_ids;
	const float *grad; /* n_push x DIM */
	uint32_t n_push;
	const uint64_t *ids;
	uint32_t n;
	float *rows;       /* n x ROW, filled */
};

/* One MULTI request for both tables: the pushes first (row-wise Adagrad,
 * applied by the daemon), then the gathers, whose rows come back in order. */
static void step_request(int fd, struct part *p, int np)
{
	struct embfs_batch_sub sub[4];
	struct embfs_batch_push push = { .optim = EMBFS_OPT_ROWWISE_ADAGRAD, .dim = DIM, .lr = LR, .eps = 1e-6,
					 .init = { .kind = EMBFS_INIT_NORMAL, .cols = DIM, .seed = 1, .q = 0.1 } };
	struct iovec iov[16];
	int ns = 0, ni = 2;
	uint64_t total = sizeof(struct embfs_batch_hdr);
	for (int k = 0; k < np; k++) {
		if (!p[k].n_push)
			continue;
		sub[ns++] = (struct embfs_batch_sub){ p[k].t->ino, EMBFS_BATCH_PUSH, p[k].n_push, 0, 0 };
		iov[ni++] = (struct iovec){ &push, sizeof(push) };
		iov[ni++] = (struct iovec){ (void *)p[k].push_ids, 8ull * p[k].n_push };
		iov[ni++] = (struct iovec){ (void *)p[k].grad, sizeof(float) * DIM * p[k].n_push };
	}
	for (int k = 0; k < np; k++) {
		if (!p[k].n)
			continue;
		sub[ns++] = (struct embfs_batch_sub){ p[k].t->ino, EMBFS_BATCH_GATHER, p[k].n, EMBFS_BATCH_F_INIT, 0 };
		iov[ni++] = (struct iovec){ &push.init, sizeof(push.init) };
		iov[ni++] = (struct iovec){ (void *)p[k].ids, 8ull * p[k].n };
	}
	for (int k = 2; k < ni; k++)
		total += iov[k].iov_len;
	total += sizeof(sub[0]) * ns;
	struct embfs_batch_hdr h = { .op = EMBFS_BATCH_MULTI, .count = (uint32_t)ns, .total_len = total };
	memcpy(h.magic, EMBFS_BATCH_MAGIC, 4);
	iov[0] = (struct iovec){ &h, sizeof(h) };
	iov[1] = (struct iovec){ sub, sizeof(sub[0]) * ns };
	send_req(fd, iov, ni);
	/* the response: each gather's rows, one after the other */
	struct iovec out[4];
	size_t need = 0, got = 0;
	if (!ns)
		return;
	for (int k = 0; k < np; k++) {
		out[k] = (struct iovec){ p[k].rows, (size_t)p[k].n * ROW * sizeof(float) };
		need += out[k].iov_len;
	}
	struct iovec *o = out;
	int no = np;
	while (got < need) {
		ssize_t r = preadv(fd, o, no, (off_t)got);
		if (r <= 0)
			die("gather response from", ".embfs/rows");
		got += (size_t)r;
		iov_advance(&o, &no, (size_t)r);
	}
}

static const char *set_batch_id(const char *mnt, int step)
{
	static char msg[128];
	char path[4096], num[32];
	snprintf(path, sizeof(path), "%s/.embfs/batch", mnt);
	int fd = open(path, O_WRONLY);
	if (fd < 0)
		return "no .embfs/batch: batch id not set";
	int len = snprintf(num, sizeof(num), "%d\n", step);
	if (pwrite(fd, num, (size_t)len, 0) == len)
		snprintf(msg, sizeof(msg), "batch id %d", step);
	else
		snprintf(msg, sizeof(msg), "batch id not set (%s)", strerror(errno));
	close(fd);
	return msg;
}

static const char *snapshot(const char *mnt, int step)
{
	static char msg[160];
	char path[4096];
	struct stat st;
	snprintf(path, sizeof(path), "%s/.snapshots", mnt);
	if (stat(path, &st) || !S_ISDIR(st.st_mode))
		return "no .snapshots: no snapshot taken";
	snprintf(path, sizeof(path), "%s/.snapshots/step-%d", mnt, step);
	if (mkdir(path, 0755))
		snprintf(msg, sizeof(msg), "snapshot step-%d failed (%s)", step, strerror(errno));
	else
		snprintf(msg, sizeof(msg), "snapshot .snapshots/step-%d", step);
	return msg;
}

/* ---- training --------------------------------------------------------- */

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 4) {
		fprintf(stderr, "usage: train MNT [BATCHES [EVERY]]\n");
		return 2;
	}
	const char *mnt = argv[1];
	int batches = argc > 2 ? atoi(argv[2]) : 1000, every = argc > 3 ? atoi(argv[3]) : 100;
	if (batches < 1 || every < 1) {
		fprintf(stderr, "train: BATCHES and EVERY must be positive\n");
		return 2;
	}
	struct table users, items;
	table_open(&users, mnt, "user.emb");
	table_open(&items, mnt, "item.emb");
	char bpath[4096];
	snprintf(bpath, sizeof(bpath), "%s/.embfs/rows", mnt);
	int bfd = open(bpath, O_RDWR);
	if (bfd < 0)
		die("open", bpath);

	float *tu = malloc(sizeof(float) * NUSERS * DIM), *ti = malloc(sizeof(float) * NITEMS * DIM);
	struct zipf zu, zi;
	unit_vectors(tu, NUSERS);
	unit_vectors(ti, NITEMS);
	zipf_init(&zu, NUSERS, 0.99);
	zipf_init(&zi, NITEMS, 0.99);
	static struct batch cur, next;
	static uint64_t uu[BATCH], iu[BATCH], puu[BATCH], piu[BATCH];
	static uint32_t up[BATCH], ip[BATCH];
	static float U[BATCH * ROW], I[BATCH * ROW], gu[BATCH * DIM], gi[BATCH * DIM];
	printf("training on %s: %d batches of %d clicks, %d users x %d items, Zipf(0.99), dim %d, "
	       "row-wise Adagrad lr %.2f\n", mnt, batches, BATCH, NUSERS, NITEMS, DIM, LR);

	make_batch(&next, &zu, &zi, tu, ti);
	uint32_t nu = unique(next.u, BATCH, uu, up), ni = unique(next.i, BATCH, iu, ip);
	request(bfd, EMBFS_BATCH_PREFETCH, &users, uu, nu, NULL);
	request(bfd, EMBFS_BATCH_PREFETCH, &items, iu, ni, NULL);
	uint32_t pnu = 0, pni = 0; /* the previous step's rows, to push */
	double loss_sum = 0, first = -1, last = 0;
	uint64_t moved = 0;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int step = 1; step <= batches; step++) {
		cur = next;
		nu = unique(cur.u, BATCH, uu, up);
		ni = unique(cur.i, BATCH, iu, ip);
		struct part parts[2] = { { &users, puu, gu, pnu, uu, nu, U }, { &items, piu, gi, pni, iu, ni, I } };
		step_request(bfd, parts, 2);
		/* look ahead: the daemon pins the next batch's rows meanwhile */
		make_batch(&next, &zu, &zi, tu, ti);
		static uint64_t nuu[BATCH], niu[BATCH];
		static uint32_t scratch[BATCH];
		uint32_t nnu = unique(next.u, BATCH, nuu, scratch), nni = unique(next.i, BATCH, niu, scratch);
		request(bfd, EMBFS_BATCH_PREFETCH, &users, nuu, nnu, NULL);
		request(bfd, EMBFS_BATCH_PREFETCH, &items, niu, nni, NULL);

		memset(gu, 0, sizeof(float) * nu * DIM);
		memset(gi, 0, sizeof(float) * ni * DIM);
		double loss = 0;
		for (int k = 0; k < BATCH; k++) {
			const float *u = &U[up[k] * ROW], *v = &I[ip[k] * ROW];
			float s = 0;
			for (int d = 0; d < DIM; d++)
				s += u[d] * v[d];
			double p = 1 / (1 + exp(-(double)s));
			loss -= cur.y[k] ? log(p + 1e-7) : log(1 - p + 1e-7);
			float g = (float)(p - cur.y[k]);
			for (int d = 0; d < DIM; d++) {
				gu[up[k] * DIM + d] += g * v[d];
				gi[ip[k] * DIM + d] += g * u[d];
			}
		}
		loss /= BATCH;
		/* pushed with the next step's gathers (and once more at the end) */
		memcpy(puu, uu, 8ull * nu);
		memcpy(piu, iu, 8ull * ni);
		pnu = nu;
		pni = ni;
		moved += 2ull * (nu + ni);
		loss_sum += loss;
		if (step % every == 0 || step == batches) {
			/* the snapshot (and the end) must hold this step's update */
			struct part flush[2] = { { &users, puu, gu, pnu, uu, 0, U }, { &items, piu, gi, pni, iu, 0, I } };
			step_request(bfd, flush, 2);
			pnu = pni = 0;
		}
		if (step % every == 0) {
			double avg = loss_sum / every;
			if (first < 0)
				first = avg;
			last = avg;
			loss_sum = 0;
			clock_gettime(CLOCK_MONOTONIC, &t1);
			double el = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
			printf("step %5d  loss %.4f  (%.0f rows/s gathered+pushed)  ", step, avg, moved / el);
			printf("%s; ", set_batch_id(mnt, step));
			printf("%s\n", snapshot(mnt, step));
			fflush(stdout);
		}
	}
	close(bfd);
	if (first < 0) {
		printf("fewer than EVERY batches: no loss printed\n");
		return 0;
	}
	printf("loss %.4f -> %.4f over %d batches (%s)\n", first, last, batches,
	       last < first ? "decreased" : "DID NOT DECREASE");
	return last < first ? 0 : 1;
}
