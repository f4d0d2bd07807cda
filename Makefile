# embfs — plain Makefile.  make [SANITIZER=address|undefined|thread]
CC ?= cc
PKGS := fuse3 libpmemobj libpmem liburing libxxhash
PREFIX ?= /usr/local
# a sanitizer build lives in its own tree (build-address, ...), so switching
# never mixes objects built with different flags
BUILD ?= build$(if $(SANITIZER),-$(SANITIZER))

CFLAGS ?= -O2 -g
CFLAGS += -std=gnu11 -Wall -Wextra -Iinclude -D_GNU_SOURCE -pthread
ifneq ($(SANITIZER),)
CFLAGS += -fsanitize=$(SANITIZER) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS += -fsanitize=$(SANITIZER)
endif
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
STORE_LIBS = $(shell pkg-config --libs libpmemobj libpmem liburing libxxhash 2>/dev/null) -pthread -lm
FUSE_LIBS = $(shell pkg-config --libs fuse3 2>/dev/null)

STORE_SRC := $(wildcard store/*.c store/tier/*.c)
CACHE_SRC := $(wildcard cache/*.c)
FS_SRC := $(wildcard fs/*.c)
STORE_OBJ := $(STORE_SRC:%.c=$(BUILD)/%.o)
CACHE_OBJ := $(CACHE_SRC:%.c=$(BUILD)/%.o)
FS_OBJ := $(FS_SRC:%.c=$(BUILD)/%.o)
HDRS := $(wildcard include/embfs/*.h cache/*.h store/*.h store/tier/*.h fs/*.h)

PROGS := $(BUILD)/embfs $(BUILD)/mkfs.embfs $(BUILD)/fsck.embfs $(BUILD)/embfsctl
UNIT := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(wildcard tests/unit/*.c))
BENCH := $(patsubst tests/bench/%.c,$(BUILD)/bench/%,$(wildcard tests/bench/*.c))
TOOLS := $(patsubst tests/tools/%.c,$(BUILD)/tools/%,$(wildcard tests/tools/*.c))
SHIMS := $(patsubst tests/shim/%.c,$(BUILD)/shim/%.so,$(wildcard tests/shim/*.c))
EXAMPLES := $(BUILD)/examples/train

all: $(PROGS) $(UNIT) $(BENCH) $(TOOLS) $(SHIMS) $(EXAMPLES)

$(BUILD)/%.o: %.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(PKG_CFLAGS) -c -o $@ $<

$(BUILD)/libstore.a: $(STORE_OBJ)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/libcache.a: $(CACHE_OBJ) | $(BUILD)/cache/rows.layer
	rm -f $@ && ar rcs $@ $^

# cache/rows.c, the cache's mechanism, includes no store header, directly or
# through another: only cache/ and embfs/cache.h (checked on every build of
# the cache library)
$(BUILD)/cache/rows.layer: cache/rows.c $(HDRS)
	@deps=$$($(CC) $(CFLAGS) -MM cache/rows.c | sed 's/^[^:]*://; s/\\//g'); \
	for d in $$deps; do case $$d in cache/*|include/embfs/cache.h) ;; \
	*) echo "cache/rows.c includes $$d: the cache's mechanism includes no store header" >&2; exit 1 ;; \
	esac; done; mkdir -p $(dir $@) && touch $@

$(BUILD)/embfs: $(FS_OBJ) $(BUILD)/libcache.a $(BUILD)/libstore.a
	$(CC) $(LDFLAGS) -o $@ $^ $(FUSE_LIBS) $(STORE_LIBS)

# a push's arithmetic follows torch's operation by operation: no fused
# multiply-add, whatever the target; -O3 vectorizes its element-wise loops
# (which changes no result: nothing is reassociated)
$(BUILD)/cache/optim.o: CFLAGS += -O3 -ffp-contract=off

$(BUILD)/mkfs.embfs: $(BUILD)/mkfs/mkfs.o $(BUILD)/libstore.a
	$(CC) $(LDFLAGS) -o $@ $^ $(STORE_LIBS)

# embfsctl uses only the files of a mount: no library of the daemon
$(BUILD)/embfsctl: embfsctl/embfsctl.c include/embfs/version.h include/embfs/utf8.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS)

$(BUILD)/fsck.embfs: $(BUILD)/mkfs/fsck.o $(BUILD)/libstore.a
	$(CC) $(LDFLAGS) -o $@ $^ $(STORE_LIBS)

# the library versions -V prints: those this build was made with
$(BUILD)/store/util.o: CFLAGS += -DEMBFS_LIB_VERSIONS='"libpmemobj $(shell pkg-config --modversion libpmemobj 2>/dev/null), liburing $(shell pkg-config --modversion liburing 2>/dev/null)"'

# embfs -V names the libpmemobj and liburing it was built with (neither says
# its version at run time; libfuse and xxHash do)
$(BUILD)/fs/main.o: CFLAGS += -DEMBFS_PMEMOBJ_VERSION='"$(shell pkg-config --modversion libpmemobj 2>/dev/null)"' \
	-DEMBFS_URING_VERSION='"$(shell pkg-config --modversion liburing 2>/dev/null)"'

# The bench's daemon: embfs with the store's test switches compiled in
# (EMBFS_TEST_HOOKS: EMBFS_VERIFY=0 turns off the row digest on reads, for
# make bench's section verify).  Its pool.o comes before libstore.a, whose
# own pool.o the link then never takes.  The shipped embfs has no such switch.
all: $(BUILD)/bench/embfs-test
$(BUILD)/bench/pool-test.o: store/pool.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(PKG_CFLAGS) -DEMBFS_TEST_HOOKS -c -o $@ $<
$(BUILD)/bench/embfs-test: $(FS_OBJ) $(BUILD)/bench/pool-test.o $(BUILD)/libcache.a $(BUILD)/libstore.a
	$(CC) $(LDFLAGS) -o $@ $^ $(FUSE_LIBS) $(STORE_LIBS)

# the clean unmount (docs/operations.md "Mount and unmount"); umount(8) runs it as umount.fuse.embfs
all: $(BUILD)/embfs-umount
$(BUILD)/embfs-umount: util/embfs-umount.c include/embfs/version.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS)

$(BUILD)/tests/%: tests/unit/%.c tests/unit/helpers.h tests/unit/store_helpers.h $(BUILD)/libstore.a $(BUILD)/libcache.a $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(PKG_CFLAGS) -o $@ $< $(BUILD)/libcache.a $(BUILD)/libstore.a $(LDFLAGS) $(STORE_LIBS)

# pooldamage writes into a pool with libpmemobj (tests/e2e/fsck.sh)
$(BUILD)/tools/pooldamage: tests/tools/pooldamage.c include/embfs/layout.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(PKG_CFLAGS) -o $@ $< $(LDFLAGS) $(STORE_LIBS)

$(BUILD)/tools/%: tests/tools/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) -lm

# LD_PRELOAD shims for fault injection: never built with a sanitizer (its
# runtime must come first in the daemon's library list)
$(BUILD)/shim/%.so: tests/shim/%.c
	@mkdir -p $(dir $@)
	$(CC) -O2 -g -Wall -Wextra -fPIC -shared -o $@ $< -ldl

# missrate drives the real cache library over a fake store
$(BUILD)/bench/missrate: tests/bench/missrate.c tests/bench/bench.h $(BUILD)/libcache.a $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libcache.a $(LDFLAGS) -pthread -lm

# cachewalk, likewise: the cache's batched gather in process
$(BUILD)/bench/cachewalk: tests/bench/cachewalk.c tests/bench/bench.h $(BUILD)/libcache.a $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libcache.a $(LDFLAGS) -pthread -lm

# minfuse is a FUSE server (the gathermin section's baseline): libfuse's
# flags and library
$(BUILD)/bench/minfuse: tests/bench/minfuse.c tests/bench/bench.h include/embfs/batch.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(PKG_CFLAGS) -o $@ $< $(LDFLAGS) $(FUSE_LIBS)

$(BUILD)/bench/%: tests/bench/%.c tests/bench/bench.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) -lm

$(BUILD)/examples/%: examples/%.c include/embfs/batch.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) -lm

deps:
	@sh tests/deps.sh

# ThreadSanitizer runs test_damage's 300 cases in ~5 min, and test_spill
# takes more than 15 on busy cores: sanitizer builds get 30 min per test
# instead of 5, and 2 min for a daemon to mount instead of 20 s.
# ThreadSanitizer's reports go to files in $(BUILD)/tsan (report.PID), not
# to stderr: an e2e test's cleanup deletes the daemon's log with its temp
# dir.  A process with a report still exits 66 (its test fails); a report
# file fails the run too (a daemon killed on purpose never exits 66), and
# its path and summary lines are printed.
TSAN_DIR := $(abspath $(BUILD))/tsan
TEST_ENV = BUILD=$(abspath $(BUILD)) \
	$(if $(SANITIZER),TEST_TIMEOUT=$${TEST_TIMEOUT:-1800} TEST_MOUNT_WAIT=$${TEST_MOUNT_WAIT:-120}) \
	LSAN_OPTIONS=suppressions=$(abspath tests/lsan.supp):print_suppressions=0 \
	$(if $(filter thread,$(SANITIZER)),TSAN_OPTIONS="log_path=$(TSAN_DIR)/report $${TSAN_OPTIONS:-}")
TSAN_BEGIN = $(if $(filter thread,$(SANITIZER)),rm -rf $(TSAN_DIR) && mkdir -p $(TSAN_DIR);)
TSAN_END = $(if $(filter thread,$(SANITIZER)),\
	for f in $(TSAN_DIR)/report.*; do [ -f "$$f" ] || continue; rc=1; \
	echo "ThreadSanitizer report: $$f"; grep '^SUMMARY:' "$$f" | sort | uniq -c | sed 's/^/    /'; done;)

test: deps all
	@$(TSAN_BEGIN) $(TEST_ENV) sh tests/run.sh; rc=$$?; $(TSAN_END) exit $$rc

# The tests that exercise the locks hardest, under ThreadSanitizer: run this
# before submitting a change to locking (about an hour on 2 busy cores).  "spill"
# also takes in test_spill and spillstubs.
TSAN_TESTS := test_commit spill locks snapshot batch mmapmix
tsan-check:
	@$(MAKE) --no-print-directory SANITIZER=thread deps all
	@$(MAKE) --no-print-directory SANITIZER=thread tsan-run
tsan-run:
	@$(TSAN_BEGIN) rc=0; for t in $(TSAN_TESTS); do $(TEST_ENV) sh tests/run.sh $$t || rc=1; done; $(TSAN_END) exit $$rc

# docs/files.md "Batched rows": train on a fresh pool, serve from the tables, unmount
example-train: deps all
	@BUILD=$(abspath $(BUILD)) sh examples/run.sh c

example-python: deps all
	@BUILD=$(abspath $(BUILD)) sh examples/run.sh python

# docs/python.md "A DLRM-style model with embfs.torch": train, snapshot, roll back, resume bit-exactly
example-torch: deps all
	@BUILD=$(abspath $(BUILD)) sh examples/run.sh torch

example-dist: deps all
	@BUILD=$(abspath $(BUILD)) sh examples/dist.sh

demo: deps all
	@BUILD=$(abspath $(BUILD)) sh examples/demo.sh

bench: deps all
	@BUILD=$(abspath $(BUILD)) sh tests/bench/run.sh

# The Python package goes where Debian's /usr/bin/python3 looks: PREFIX=/usr
# -> /usr/lib/python3/dist-packages, else PREFIX/lib/python3.N/dist-packages
PYVER := $(shell /usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || echo 3)
PYTHONDIR ?= $(if $(filter /usr,$(PREFIX)),/usr/lib/python3/dist-packages,$(PREFIX)/lib/python$(PYVER)/dist-packages)

install: $(PROGS)
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/sbin $(DESTDIR)$(PYTHONDIR)/embfs
	install -m 755 $(BUILD)/embfs $(DESTDIR)$(PREFIX)/bin/embfs
	install -m 755 $(BUILD)/mkfs.embfs $(DESTDIR)$(PREFIX)/sbin/mkfs.embfs
	install -m 755 $(BUILD)/embfsctl $(DESTDIR)$(PREFIX)/bin/embfsctl
	install -m 755 $(BUILD)/fsck.embfs $(DESTDIR)$(PREFIX)/sbin/fsck.embfs
	install -m 644 python/embfs/*.py $(DESTDIR)$(PYTHONDIR)/embfs/

# mount(8) and umount(8) look for the helpers mount.TYPE and umount.TYPE in
# /sbin (libmount: /sbin, /sbin/fs.d, /sbin/fs), whatever PREFIX is; the mount
# helper runs the daemon by its absolute path (mount(8) does not search PREFIX)
HELPERDIR ?= /sbin
install: install-helpers
install-helpers: $(BUILD)/embfs $(BUILD)/embfs-umount
	@case '$(PREFIX)' in *'#'*|*"'"*) echo "PREFIX must not hold # or '" >&2; exit 1 ;; esac
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(HELPERDIR)
	install -m 755 $(BUILD)/embfs-umount $(DESTDIR)$(PREFIX)/bin/embfs-umount
	sed 's#@EMBFS@#$(PREFIX)/bin/embfs#' util/mount.fuse.embfs.in >$(DESTDIR)$(HELPERDIR)/mount.fuse.embfs
	chmod 755 $(DESTDIR)$(HELPERDIR)/mount.fuse.embfs
	ln -sf $(PREFIX)/bin/embfs-umount $(DESTDIR)$(HELPERDIR)/umount.fuse.embfs

# the manual pages (man/): embfs(5), and embfs(8) and a page per program
MANDIR ?= $(PREFIX)/share/man
MAN5 := $(wildcard man/*.5)
MAN8 := $(wildcard man/*.8)
install: install-man
install-man:
	install -d $(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(MANDIR)/man8
	install -m 644 $(MAN5) $(DESTDIR)$(MANDIR)/man5/
	install -m 644 $(MAN8) $(DESTDIR)$(MANDIR)/man8/

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/embfs $(DESTDIR)$(PREFIX)/bin/embfs-umount $(DESTDIR)$(PREFIX)/sbin/mkfs.embfs
	rm -f $(addprefix $(DESTDIR)$(MANDIR)/man5/,$(notdir $(MAN5))) $(addprefix $(DESTDIR)$(MANDIR)/man8/,$(notdir $(MAN8)))
	rm -f $(DESTDIR)$(HELPERDIR)/mount.fuse.embfs $(DESTDIR)$(HELPERDIR)/umount.fuse.embfs
	rm -rf $(DESTDIR)$(PYTHONDIR)/embfs

clean:
	rm -rf $(BUILD)

.PHONY: all deps test tsan-check tsan-run demo bench install install-helpers install-man uninstall clean example-train example-python example-torch example-dist
