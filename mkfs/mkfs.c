/*
 * mkfs.embfs: format a devdax device, a file on a DAX file system or a plain
 * file as an embfs pool.  Every argument is checked before the target is
 * touched; a failed run leaves the target as it was (a file it created is
 * removed again).
 */
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "embfs/size.h"
#include "embfs/store.h"
#include "embfs/version.h"

#define MAX_TABLES 256

struct tspec {
	char name[EMB_NAME_MAX + 1];
	uint32_t dim, dtype;
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: mkfs.embfs [-s SIZE] [-L LABEL] [-f] [-t NAME:DIM[:DTYPE]]... TARGET\n"
		"  TARGET       devdax device (/dev/daxN.M), file on a DAX file system, or plain file\n"
		"  -s SIZE      create or size a file target (bytes, or with K/M/G/T suffix)\n"
		"  -L LABEL     pool label (at most %d bytes)\n"
		"  -f           overwrite an existing pool or other data\n"
		"  -t SPEC      pre-create table NAME with DIM elements of DTYPE (default f32);\n"
		"               dtypes: f32 f16 bf16 f64 i8 u8 i16 i32\n"
		"  -h, --help   this help;  -V, --version  versions\n",
		EMB_LABEL_MAX);
	fputs("  -o PERMS     owner and mode of the root and of .snapshots, comma separated:\n"
	      "               root_owner=USER[:GROUP], root_mode=MODE (default 0:0, 0755),\n"
	      "               snap_owner=USER[:GROUP], snap_mode=MODE (default 0:0, 0555);\n"
	      "               names or numbers, octal modes (see mkfs.embfs(8))\n",
	      f);
}

static int table_name_ok(const char *n)
{
	size_t len = strlen(n);
	return len > 0 && len <= EMB_NAME_MAX && !strchr(n, '/') && strcmp(n, ".") &&
	       strcmp(n, "..") && strcmp(n, ".embfs") && strcmp(n, ".snapshots");
}

/* NAME:DIM[:DTYPE] into t: 0, or -1 and why it is not. */
static int parse_table(const char *arg, struct tspec *t, char *why, size_t n)
{
	char buf[512];
	snprintf(why, n, "want NAME:DIM[:DTYPE]");
	if (strlen(arg) >= sizeof(buf))
		return -1;
	strcpy(buf, arg);
	char *c1 = strrchr(buf, ':');
	if (!c1)
		return -1;
	char *c0 = NULL;
	*c1 = 0;
	char *dt = "f32";
	char *dim = c1 + 1;
	/* NAME:DIM or NAME:DIM:DTYPE */
	if ((c0 = strrchr(buf, ':')) && (dim[0] < '0' || dim[0] > '9')) {
		*c0 = 0;
		dt = c1 + 1;
		dim = c0 + 1;
	}
	char *end;
	errno = 0;
	unsigned long d = strtoul(dim, &end, 10);
	if (errno || *end || end == dim || d == 0) {
		snprintf(why, n, "dim '%s': want a whole number from 1", dim);
		return -1;
	}
	if (!table_name_ok(buf)) {
		snprintf(why, n, "table name '%s': 1 to %d bytes, no '/', not '.', '..', '.embfs' or '.snapshots'",
			 buf, EMB_NAME_MAX);
		return -1;
	}
	if (store_dtype_parse(dt, &t->dtype)) {
		snprintf(why, n, "dtype '%s': one of f32 f16 bf16 f64 i8 u8 i16 i32", dt);
		return -1;
	}
	uint32_t es = store_dtype_size(t->dtype);
	if (d > EMB_ROW_MAX || store_geometry_check((uint32_t)d, t->dtype)) {
		snprintf(why, n, "a row of %lu x %s is %llu bytes, more than %u (dim at most %u for %s)", d, dt,
			 (unsigned long long)d * es, EMB_ROW_MAX, EMB_ROW_MAX / es, dt);
		return -1;
	}
	t->dim = (uint32_t)d;
	strcpy(t->name, buf);
	return 0;
}

struct args {
	struct store_mkfs_opts o;
	struct store_dir_perm perm[2]; /* -o: the root's, .snapshots' */
	int perm_set[2];
	struct tspec tables[MAX_TABLES];
	int nt;
	const char *path;
};

/* Add a -t table; 0 or a message printed and -1. */
static int add_table(struct args *a, const char *spec)
{
	if (a->nt == MAX_TABLES) {
		fprintf(stderr, "mkfs.embfs: at most %d tables with -t\n", MAX_TABLES);
		return -1;
	}
	struct tspec *t = &a->tables[a->nt];
	char why[1024]; /* a name of up to 511 bytes in it */
	if (parse_table(spec, t, why, sizeof(why))) {
		fprintf(stderr, "mkfs.embfs: bad table spec '%s': %s\n", spec, why);
		return -1;
	}
	for (int i = 0; i < a->nt; i++)
		if (!strcmp(a->tables[i].name, t->name)) {
			fprintf(stderr, "mkfs.embfs: table '%s' given twice\n", t->name);
			return -1;
		}
	a->nt++;
	return 0;
}

/* A user or group, by name or number: 0, or -1. */
static int parse_id(const char *s, int group, uint32_t *id)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (*s >= '0' && *s <= '9' && !*end && !errno && v < UINT32_MAX) {
		*id = (uint32_t)v;
		return 0;
	}
	struct passwd *pw = group ? NULL : getpwnam(s);
	struct group *gr = group ? getgrnam(s) : NULL;
	if (!pw && !gr)
		return -1;
	*id = pw ? pw->pw_uid : gr->gr_gid;
	return 0;
}

/* One -o PERMS list (root_owner=, root_mode=, snap_owner=, snap_mode=): 0,
 * or a message printed and -1. */
static int parse_perms(struct args *a, const char *arg)
{
	char buf[512], *save = NULL;
	if (strlen(arg) >= sizeof(buf)) {
		fprintf(stderr, "mkfs.embfs: -o list too long\n");
		return -1;
	}
	strcpy(buf, arg);
	for (char *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
		char *v = strchr(kv, '=');
		int d = !strncmp(kv, "root_", 5) ? 0 : !strncmp(kv, "snap_", 5) ? 1 : -1;
		const char *k = d < 0 ? "" : kv + 5;
		if (v)
			*v++ = 0;
		if (d < 0 || !v || (strcmp(k, "owner") && strcmp(k, "mode"))) {
			fprintf(stderr, "mkfs.embfs: unknown -o option '%s' (want root_owner=, root_mode=, "
				"snap_owner=, snap_mode=)\n", kv);
			return -1;
		}
		struct store_dir_perm *p = &a->perm[d];
		if (!a->perm_set[d])
			*p = (struct store_dir_perm){ 0, 0, d ? 0555 : 0755 };
		a->perm_set[d] = 1;
		if (!strcmp(k, "mode")) {
			char *end;
			errno = 0;
			unsigned long m = strtoul(v, &end, 8);
			if (errno || *end || end == v || *v == '-' || m > 07777) {
				fprintf(stderr, "mkfs.embfs: bad %s '%s' (want an octal mode, at most 07777)\n", kv, v);
				return -1;
			}
			p->mode = (uint32_t)m;
			continue;
		}
		char *g = strchr(v, ':');
		if (g)
			*g++ = 0;
		if ((*v && parse_id(v, 0, &p->uid)) || (g && parse_id(g, 1, &p->gid)) || (!*v && !g)) {
			fprintf(stderr, "mkfs.embfs: bad %s '%s%s%s' (want USER[:GROUP], names or numbers)\n", kv, v,
				g ? ":" : "", g ? g : "");
			return -1;
		}
	}
	return 0;
}

/* 0: go on; otherwise the exit status (help printed: 0 by way of -1). */
static int parse_args(int argc, char **argv, struct args *a)
{
	static const struct option longs[] = { { "help", no_argument, NULL, 'h' },
						 { "version", no_argument, NULL, 'V' },
						 { NULL, 0, NULL, 0 } };
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":s:L:ft:o:hV", longs, NULL)) != -1) {
		switch (c) {
		case 's':
			if (embfs_parse_size(optarg, &a->o.size) || a->o.size == 0) {
				fprintf(stderr, "mkfs.embfs: bad size '%s'\n", optarg);
				return 2;
			}
			break;
		case 'L':
			a->o.label = optarg;
			break;
		case 'f':
			a->o.force = 1;
			break;
		case 't':
			if (add_table(a, optarg))
				return 2;
			break;
		case 'o':
			if (parse_perms(a, optarg))
				return 2;
			break;
		case 'h':
			usage(stdout);
			return -1;
		case 'V':
			printf("mkfs.embfs (embfs) %s; %s\n", EMBFS_VERSION, store_versions());
			return -1;
		case ':':
			fprintf(stderr, "mkfs.embfs: option -%c needs an argument\n", optopt);
			return 2;
		default: /* optopt: the bad letter of a (possibly grouped) short option */
			if (optopt)
				fprintf(stderr, "mkfs.embfs: unknown option '-%c' (see -h)\n", optopt);
			else
				fprintf(stderr, "mkfs.embfs: unknown option '%s' (see -h)\n", argv[optind - 1]);
			return 2;
		}
	}
	if (optind != argc - 1) {
		fprintf(stderr, "mkfs.embfs: %s (see -h)\n",
			optind == argc ? "missing TARGET" : "more than one TARGET");
		return 2;
	}
	a->path = argv[optind];
	return 0;
}

static void report(const struct args *a, const struct store_stats *st)
{
	printf("embfs pool on %s: %llu MiB, %s, label '%s', uuid ", a->path,
	       (unsigned long long)(st->pool_size >> 20), st->is_pmem ? "PMem" : "plain file (msync)",
	       st->label);
	for (int i = 0; i < 16; i++)
		printf("%02x%s", st->uuid[i], (i == 3 || i == 5 || i == 7 || i == 9) ? "-" : "");
	printf("\n");
	for (int i = 0; i < a->nt; i++)
		printf("  table %s: dim %u %s, %u-byte rows\n", a->tables[i].name, a->tables[i].dim,
		       store_dtype_name(a->tables[i].dtype),
		       a->tables[i].dim * store_dtype_size(a->tables[i].dtype));
	for (int d = 0; d < 2; d++)
		if (a->perm_set[d])
			printf("  %s: owner %u:%u, mode %04o\n", d ? ".snapshots" : "root", a->perm[d].uid,
			       a->perm[d].gid, a->perm[d].mode);
}

int main(int argc, char **argv)
{
	static struct args a;
	char err[512];
	int ret = parse_args(argc, argv, &a);
	if (ret)
		return ret < 0 ? 0 : ret;
	if (store_mkfs(a.path, &a.o, err, sizeof(err))) {
		fprintf(stderr, "mkfs.embfs: %s\n", err);
		return 1;
	}
	struct store *s;
	if (store_open(a.path, &s, err, sizeof(err))) {
		fprintf(stderr, "mkfs.embfs: formatted, but cannot reopen: %s\n", err);
		return 1;
	}
	for (int i = 0; i < a.nt; i++) {
		uint32_t id;
		ret = store_table_create(s, a.tables[i].name, 0100644, getuid(), getgid(), a.tables[i].dim,
					 a.tables[i].dtype, &id);
		if (ret) {
			fprintf(stderr, "mkfs.embfs: table %s: %s\n", a.tables[i].name, strerror(-ret));
			store_close(s);
			return 1;
		}
	}
	for (int d = 0; d < 2; d++) {
		ret = a.perm_set[d] ? store_dir_perm_set(s, d ? STORE_DIR_SNAPS : STORE_DIR_ROOT, &a.perm[d]) : 0;
		if (ret) {
			fprintf(stderr, "mkfs.embfs: %s permissions: %s\n", d ? ".snapshots" : "root", strerror(-ret));
			store_close(s);
			return 1;
		}
	}
	struct store_stats st;
	store_stats_get(s, &st);
	store_close(s);
	report(&a, &st);
	return 0;
}
