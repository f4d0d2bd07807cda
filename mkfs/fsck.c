/*
 * fsck.embfs: check an unmounted embfs pool and repair what can be repaired
 * without guessing.  Links the store only (no FUSE).  Never asks: without
 * -n it repairs, with -n it writes nothing (the pool is mapped
 * copy-on-write, so even the recovery of a crashed pool stays in memory).
 *
 * Exit status as e2fsck's, the sum of: 1 errors were fixed, 4 errors are
 * left uncorrected, 8 operational error (cannot open the pool, pool in use,
 * spill device missing), 16 usage error.  0: the pool is clean.
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "embfs/store.h"
#include "embfs/version.h"

#define FSCK_OK 0
#define FSCK_FIXED 1
#define FSCK_LEFT 4
#define FSCK_OPERR 8
#define FSCK_USAGE 16

struct fsck {
	const char *pool;
	const char *spill;
	int check_only;  /* -n */
	int verbose;     /* -v */
	int progress;    /* stderr is a terminal, or -v */
	uint64_t fixed, left;
	struct timespec last; /* last progress line */
	int shown;       /* a progress line is on the terminal */
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: fsck.embfs [-n | -y | -p] [-f] [-v] [-o spill=PATH] POOL\n"
		"  Check an unmounted embfs pool and repair what needs no guess.  Never asks.\n"
		"  -n           check only: the pool (and spill device) are never written\n"
		"  -y, -p, -a   repair without asking (the default)\n"
		"  -f           full check (every check is full; accepted for fsck(8))\n"
		"  -v           say each step, and show progress even when stderr is not a terminal\n"
		"  -o spill=PATH  the spill device of a pool that keeps rows on one (as embfs -o spill=)\n"
		"  -h, --help   this help;  -V, --version  versions\n"
		"exit status: 0 clean, 1 errors fixed, 4 errors left uncorrected, 8 operational error\n"
		"(cannot open, pool in use), 16 usage error; a sum when several apply\n");
}

static void clear_progress(struct fsck *f)
{
	if (f->shown && isatty(STDERR_FILENO))
		fprintf(stderr, "\r%60s\r", "");
	f->shown = 0;
}

/* One line on stdout: what was found or done. */
static void say(struct fsck *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(struct fsck *f, const char *fmt, ...)
{
	va_list ap;
	clear_progress(f);
	printf("%s: ", f->pool);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

/* A store note: fixed (in memory only with -n) or left as found. */
static void on_note(void *arg, int fixed, const char *msg)
{
	struct fsck *f = arg;
	if (fixed && !f->check_only) {
		f->fixed++;
		say(f, "fixed: %s", msg);
	} else {
		f->left++;
		say(f, "%s%s", fixed ? "error (would fix): " : "error: ", msg);
	}
}

/* Rows walked: a percentage on stderr every 2 s. */
static void on_progress(void *arg, uint64_t done, uint64_t total)
{
	struct fsck *f = arg;
	struct timespec t;
	if (!f->progress)
		return;
	clock_gettime(CLOCK_MONOTONIC, &t);
	if (f->last.tv_sec && t.tv_sec - f->last.tv_sec < 2)
		return;
	f->last = t;
	unsigned pct = total ? (unsigned)(done * 100 / total) : 0;
	if (isatty(STDERR_FILENO)) {
		fprintf(stderr, "\r%s: checking rows: %u%%", f->pool, pct > 100 ? 100 : pct);
		f->shown = 1;
	} else {
		fprintf(stderr, "%s: checking rows: %u%% (%llu rows)\n", f->pool, pct > 100 ? 100 : pct,
			(unsigned long long)done);
	}
}

static void version(void)
{
	printf("fsck.embfs (embfs) %s; %s\n", EMBFS_VERSION, store_versions());
}

/* 0: go on; otherwise the exit status (-1: help or version printed). */
static int parse_args(int argc, char **argv, struct fsck *f)
{
	static const struct option longs[] = { { "help", no_argument, NULL, 'h' },
						 { "version", no_argument, NULL, 'V' },
						 { NULL, 0, NULL, 0 } };
	int c, repair = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":nypafvo:hV", longs, NULL)) != -1) {
		switch (c) {
		case 'n':
			f->check_only = 1;
			break;
		case 'y':
		case 'p':
		case 'a':
			repair = 1;
			break;
		case 'f':
			break;
		case 'v':
			f->verbose = 1;
			break;
		case 'o':
			if (strncmp(optarg, "spill=", 6) || !optarg[6]) {
				fprintf(stderr, "fsck.embfs: unknown -o option '%s' (want spill=PATH)\n", optarg);
				return FSCK_USAGE;
			}
			f->spill = optarg + 6;
			break;
		case 'h':
			usage(stdout);
			return -1;
		case 'V':
			version();
			return -1;
		case ':':
			fprintf(stderr, "fsck.embfs: option -%c needs an argument\n", optopt);
			return FSCK_USAGE;
		default:
			if (optopt)
				fprintf(stderr, "fsck.embfs: unknown option '-%c' (see --help)\n", optopt);
			else
				fprintf(stderr, "fsck.embfs: unknown option '%s' (see --help)\n", argv[optind - 1]);
			return FSCK_USAGE;
		}
	}
	if (repair && f->check_only) {
		fprintf(stderr, "fsck.embfs: -n and -y/-p/-a exclude each other\n");
		return FSCK_USAGE;
	}
	if (optind != argc - 1) {
		fprintf(stderr, "fsck.embfs: %s (see --help)\n", optind == argc ? "missing POOL" : "more than one POOL");
		return FSCK_USAGE;
	}
	f->pool = argv[optind];
	f->progress = f->verbose || isatty(STDERR_FILENO);
	return 0;
}

/* Attach the spill device if the pool keeps rows on one: 0, or an exit
 * status (message said). */
static int attach_spill(struct fsck *f, struct store *s)
{
	char err[512];
	struct store_spill_conf none = { .manual = 1 };
	int ret = store_spill_attach(s, &none, err, sizeof(err));
	if (!ret) {
		if (f->spill)
			say(f, "the pool keeps nothing on a spill device: -o spill=%s not used", f->spill);
		return 0;
	}
	if (ret != -ENODEV || !f->spill) {
		fprintf(stderr, "fsck.embfs: %s: %s%s\n", f->pool, err,
			ret == -ENODEV ? " (fsck.embfs takes it the same way)" : "");
		return FSCK_OPERR;
	}
	struct store_spill_conf c = { .path = f->spill, .manual = 1 };
	ret = store_spill_attach(s, &c, err, sizeof(err));
	if (ret) {
		fprintf(stderr, "fsck.embfs: %s: spill device: %s\n", f->pool, err);
		return FSCK_OPERR;
	}
	if (f->verbose)
		say(f, "spill device %s attached", f->spill);
	return 0;
}

/* The walk of every row, slot, stub and run; with repairs, then again to
 * see what is left.  0, or an exit status. */
static int deep_check(struct fsck *f, struct store *s)
{
	struct store_fsck r;
	struct store_fsck_fixed fx;
	/* with -n the repairs stay in the private mapping: what they would fix
	 * is told as such, and the second pass sees what they would leave */
	struct store_fsck_opts o = { .repair = 1, .note = on_note, .progress = on_progress, .arg = f };
	if (f->verbose)
		say(f, "checking every row's versions, the slab bitmaps, spill stubs and runs");
	int ret = store_fsck_run(s, &o, &r, &fx);
	clear_progress(f);
	if (ret) {
		fprintf(stderr, "fsck.embfs: %s: the check failed: %s\n", f->pool, strerror(-ret));
		return FSCK_OPERR;
	}
	uint64_t done = fx.slots + fx.counts + fx.segs + fx.bits;
	if (f->verbose)
		say(f, "walked %llu rows, %llu spilled versions, %llu sorted runs", (unsigned long long)r.rows,
		    (unsigned long long)r.stubs, (unsigned long long)r.runs);
	if (!done)
		return 0;
	/* the notes counted each finding; now see that the fixes hold */
	struct store_fsck again;
	o.repair = 0;
	o.note = NULL;
	ret = store_fsck_run(s, &o, &again, NULL);
	clear_progress(f);
	if (ret) {
		fprintf(stderr, "fsck.embfs: %s: the check failed: %s\n", f->pool, strerror(-ret));
		return FSCK_OPERR;
	}
	if (again.leaked_slots || again.bad_counts || again.seg_live_off || (fx.bits && again.free_refs)) {
		f->left++;
		say(f, "error: repairs did not hold (%llu leaked slots, %llu wrong counts, %llu segments, "
		    "%llu referenced slots marked free)",
		    (unsigned long long)again.leaked_slots, (unsigned long long)again.bad_counts,
		    (unsigned long long)again.seg_live_off, (unsigned long long)again.free_refs);
	}
	return 0;
}

int main(int argc, char **argv)
{
	static struct fsck f;
	char err[512];
	int ret = parse_args(argc, argv, &f);
	if (ret)
		return ret < 0 ? 0 : ret;
	struct store_open_opts oo = { .flags = STORE_OPEN_REPAIR | (f.check_only ? STORE_OPEN_PRIVATE : 0),
				      .note = on_note, .arg = &f };
	if (f.verbose)
		say(&f, "checking the superblock, journal, catalog, row indexes, slabs, snapshot records, spill segment table%s",
		    f.check_only ? " (read-only)" : "");
	struct store *s;
	ret = store_open_ext(f.pool, &oo, &s, err, sizeof(err));
	if (ret == -EBUSY) {
		fprintf(stderr, "fsck.embfs: %s (unmount it first)\n", err);
		return FSCK_OPERR;
	}
	if (ret == -EIO) { /* damage no repair reached */
		size_t pl = strlen(f.pool);
		say(&f, "error: %s", !strncmp(err, f.pool, pl) && !strncmp(err + pl, ": ", 2) ? err + pl + 2 : err);
		say(&f, "cannot be opened: errors left uncorrected");
		return FSCK_LEFT | (f.fixed ? FSCK_FIXED : 0);
	}
	if (ret) {
		fprintf(stderr, "fsck.embfs: %s\n", err);
		return FSCK_OPERR;
	}
	struct store_stats st;
	store_stats_get(s, &st);
	if (st.recovered)
		say(&f, "was not cleanly unmounted: recovered as a mount does%s",
		    f.check_only ? " (in memory only)" : "");
	ret = attach_spill(&f, s);
	if (!ret)
		ret = deep_check(&f, s);
	store_stats_get(s, &st);
	store_close(s);
	if (ret)
		return ret | (f.fixed ? FSCK_FIXED : 0);
	if (f.left)
		say(&f, "%llu errors left uncorrected%s, %llu fixed", (unsigned long long)f.left,
		    f.check_only ? " (checked with -n)" : "", (unsigned long long)f.fixed);
	else if (f.fixed)
		say(&f, "%llu errors fixed; %llu tables, %llu rows, %llu snapshots", (unsigned long long)f.fixed,
		    (unsigned long long)st.tables, (unsigned long long)st.rows, (unsigned long long)st.snapshots);
	else
		say(&f, "clean, %llu tables, %llu rows, %llu snapshots", (unsigned long long)st.tables,
		    (unsigned long long)st.rows, (unsigned long long)st.snapshots);
	return (f.left ? FSCK_LEFT : 0) | (f.fixed ? FSCK_FIXED : 0);
}
