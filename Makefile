# SPDX-License-Identifier: MIT
# preduce: one Makefile for the whole tree (no recursive make into
# subdirectories). Objects and generated protobuf-c code live under $(BUILD).
#
#   make            daemon, client library, example trainer
#   make check      unit + integration suites (Check prints a summary each)
#   make asan       the same suites under AddressSanitizer + UBSan
#   make demo       partial-reduce training of 4 trainers on this machine
#   make install    PREFIX=/usr/local DESTDIR=

PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
LIBDIR ?= $(PREFIX)/lib
INCDIR ?= $(PREFIX)/include
SYSCONFDIR ?= /etc
UNITDIR ?= /lib/systemd/system
SYSUSERSDIR ?= /usr/lib/sysusers.d
MANDIR ?= $(PREFIX)/share/man
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
# Where the python3 of this install searches: Debian's searches
# /usr/lib/python3/dist-packages and /usr/local/lib/python3.X/dist-packages.
PYTHON ?= /usr/bin/python3
PYVER := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
ifeq ($(PREFIX),/usr)
PYDIR ?= $(PREFIX)/lib/python3/dist-packages
else
PYDIR ?= $(PREFIX)/lib/python$(PYVER)/dist-packages
endif

BUILD ?= build
CC ?= cc
PROTOC_C ?= protoc-c
PKG_CONFIG ?= pkg-config
CLANG_FORMAT ?= clang-format

PKGS := libuv libprotobuf-c inih libsodium libcrypto libsystemd libibverbs
PKG_CFLAGS := $(shell $(PKG_CONFIG) --cflags $(PKGS) check 2>/dev/null)
PKG_LIBS := $(shell $(PKG_CONFIG) --libs $(PKGS) 2>/dev/null)
CHECK_LIBS := $(shell $(PKG_CONFIG) --libs check 2>/dev/null)

WARN := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
	-Wmissing-prototypes -Wformat=2 -Wvla
OPT ?= -O2 -g
SAN_FLAGS :=
ifeq ($(SANITIZE),1)
SAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all \
	-fno-omit-frame-pointer
endif
# make fuzz: the daemon's code instrumented for libFuzzer too.
ifeq ($(FUZZ),1)
SAN_FLAGS += -fsanitize=fuzzer-no-link
endif
CPPFLAGS += -I. -I$(BUILD) -Iclient/include
CFLAGS += -std=c11 -D_GNU_SOURCE $(WARN) $(OPT) -fPIC $(SAN_FLAGS) \
	$(PKG_CFLAGS)
LDFLAGS += $(SAN_FLAGS)
LDLIBS += $(PKG_LIBS) -lm -lpthread

PROTO_GEN := $(BUILD)/proto/preduce.pb-c.c
PROTO_HDR := $(BUILD)/proto/preduce.pb-c.h
PROTO_OBJS := $(BUILD)/proto/preduce.pb-c.o $(BUILD)/proto/frame.o \
	$(BUILD)/proto/status.o

# The daemon's parts, one folder each (tests/check-layout.sh has their
# order): everything but the programs' main files goes into libpreduced.a.
DAEMON_PARTS := daemon/base daemon/engine daemon/xport/tcp daemon/xport/rdma \
	daemon/node daemon/sched daemon/sched/core
DAEMON_SRCS := $(foreach d,$(DAEMON_PARTS),$(wildcard $(d)/*.c))
DAEMON_OBJS := $(DAEMON_SRCS:%.c=$(BUILD)/%.o)
SIM_SRCS := $(filter-out daemon/sim/main.c,$(wildcard daemon/sim/*.c))
SIM_OBJS := $(SIM_SRCS:%.c=$(BUILD)/%.o)
# preducectl but its main, in libprctl.a: its Prometheus text parser and
# JSON writer are also unit-tested and fuzzed.
CTL_SRCS := $(filter-out daemon/ctl/main.c,$(wildcard daemon/ctl/*.c))
CTL_OBJS := $(CTL_SRCS:%.c=$(BUILD)/%.o)
CLIENT_SRCS := $(wildcard client/*.c)
CLIENT_OBJS := $(CLIENT_SRCS:%.c=$(BUILD)/%.o)

FUZZ_SRCS := $(wildcard tests/fuzz/fuzz_*.c)
UNIT_SRCS := $(wildcard tests/unit/test_*.c)
UNIT_BINS := $(UNIT_SRCS:tests/unit/%.c=$(BUILD)/tests/%)
# Unit test fixtures (tests/unit/*.c but test_*.c), linked into every unit
# binary: a binary that does not use one carries it unused.
UNIT_LIB_SRCS := $(filter-out tests/unit/test_%.c,$(wildcard tests/unit/*.c))
UNIT_LIB_OBJS := $(UNIT_LIB_SRCS:%.c=$(BUILD)/%.o)
ITEST_SRCS := $(wildcard tests/integration/test_*.c)
ITEST_BINS := $(ITEST_SRCS:tests/integration/%.c=$(BUILD)/tests/i%)
TEST_LIB_SRCS := $(filter-out tests/integration/test_%.c \
	tests/integration/tamper_relay.c, $(wildcard tests/integration/*.c))
TEST_LIB_OBJS := $(TEST_LIB_SRCS:%.c=$(BUILD)/%.o)
LOAD_SRCS := $(wildcard tests/load/*.c)
LOAD_BINS := $(LOAD_SRCS:tests/load/%.c=$(BUILD)/tests/%)
HOSTS_SRCS := $(wildcard tests/hosts/test_*.c)
HOSTS_BINS := $(HOSTS_SRCS:tests/hosts/test_%.c=$(BUILD)/tests/hosts_%)
HOSTS_LIB_OBJS := $(BUILD)/tests/hosts/hosts.o
# The delay relay the hosts' suites route a link through (hosts.h).
HOSTS_RELAY := $(BUILD)/tests/hosts/relay
# The relay test_tamper routes a sealed peer link through, a program of
# its own (tests/integration/tamper_relay.c).
TAMPER_RELAY := $(BUILD)/tests/tamper_relay
BENCH_SRCS := $(wildcard tests/bench/*.c)
BENCH_BINS := $(BENCH_SRCS:tests/bench/%.c=$(BUILD)/bench/%)

SOVER := 1
LIB_SO := $(BUILD)/libpreduce.so.$(SOVER)
LIB_A := $(BUILD)/libpreduce.a
BINS := $(BUILD)/preduced $(BUILD)/preduce-trainer $(BUILD)/preduce-sim \
	$(BUILD)/preducectl

FORMAT_SRCS = $(filter-out %.pb-c.c %.pb-c.h, $(wildcard daemon/*.[ch] \
	$(DAEMON_PARTS:%=%/*.[ch]) \
	daemon/sim/*.[ch] daemon/ctl/*.[ch] client/*.[ch] client/include/*.h \
	client/examples/*.[ch] proto/*.[ch] \
	tests/unit/*.[ch] tests/integration/*.[ch] tests/bench/*.[ch] \
	tests/bench/peers/*.[ch] tests/bench/local/*.[ch] \
	tests/bench/jobs/*.[ch] tests/fuzz/*.[ch] \
	tests/load/*.[ch] tests/ops/*.[ch] tests/hosts/*.[ch]))

.PHONY: all test check check-unit check-integration check-replay \
	check-format check-layout \
	check-python asan demo check-chaos soak-chaos \
	coverage check-load check-hosts \
	install uninstall clean format bench
.SECONDARY:

# Man pages: preduced.conf(5) is made from conf/preduced.conf (the keys'
# one documentation) by man/conf2man.awk; the others are written by hand.
MAN_GEN := $(BUILD)/man/preduced.conf.5
MANS := man/preduced.8 man/preducectl.1 man/preduce-sim.1 \
	man/preduce-run.1 man/preduce-trainer.1 man/libpreduce.3 $(MAN_GEN)
# man preduce_reduce and the rest: a page per function of libpreduce(3)'s
# synopsis, each a .so link to it (LP and RP keep make from counting the
# pattern's parentheses).
LP := (
RP := )
MAN3_LINKS := $(shell sed -n \
	's/^\.BI ".*[ *]\$(LP)preduce_[a-z_]*\$(RP)[$(LP)].*/\1/p' \
	man/libpreduce.3)

all: $(BINS) $(LIB_SO) $(LIB_A) $(MAN_GEN)

$(MAN_GEN): conf/preduced.conf man/preduced.conf.5.in man/conf2man.awk
	@mkdir -p $(dir $@)
	awk -f man/conf2man.awk conf/preduced.conf man/preduced.conf.5.in >$@.tmp
	mv $@.tmp $@

# One protoc-c run makes both files (a grouped target: make -j would
# otherwise run it once per file, both writing at the same time).
$(PROTO_GEN) $(PROTO_HDR) &: proto/preduce.proto
	@mkdir -p $(BUILD)
	$(PROTOC_C) --c_out=$(BUILD) $<

# Every object may include the generated header.
$(BUILD)/%.o: %.c | $(PROTO_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/proto/preduce.pb-c.o: $(PROTO_GEN)
	$(CC) $(CPPFLAGS) $(CFLAGS) -Wno-missing-prototypes -c -o $@ $<

# The reduction loops run over whole tensors: let the compiler vectorise.
$(BUILD)/daemon/engine/reduce.o: CFLAGS += -O3
$(BUILD)/daemon/engine/wire.o: CFLAGS += -O3

# The client library: everything hidden but what preduce.h marks public.
$(BUILD)/client/%.o: CFLAGS += -fvisibility=hidden
$(LIB_SO): $(CLIENT_OBJS) $(PROTO_OBJS) client/libpreduce.map
	$(CC) -shared -Wl,-soname,libpreduce.so.$(SOVER) \
		-Wl,--version-script=client/libpreduce.map $(LDFLAGS) -o $@ \
		$(CLIENT_OBJS) $(PROTO_OBJS) $(shell $(PKG_CONFIG) --libs libprotobuf-c)
	ln -sf libpreduce.so.$(SOVER) $(BUILD)/libpreduce.so
$(LIB_A): $(CLIENT_OBJS) $(PROTO_OBJS)
	rm -f $@
	ar rcs $@ $^

$(BUILD)/libpreduced.a: $(DAEMON_OBJS) $(PROTO_OBJS)
	rm -f $@
	ar rcs $@ $^

$(BUILD)/preduced: $(BUILD)/daemon/main.o $(BUILD)/libpreduced.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The status tool: plain sockets, the config's host:port parser.
$(BUILD)/libprctl.a: $(CTL_OBJS)
	rm -f $@
	ar rcs $@ $^

$(BUILD)/preducectl: $(BUILD)/daemon/ctl/main.o $(BUILD)/libprctl.a \
		$(BUILD)/libpreduced.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The simulator: the real scheduler core under a simulated clock.
$(BUILD)/libprsim.a: $(SIM_OBJS)
	rm -f $@
	ar rcs $@ $^

$(BUILD)/preduce-sim: $(BUILD)/daemon/sim/main.o $(BUILD)/libprsim.a \
		$(BUILD)/libpreduced.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/preduce-trainer: $(BUILD)/client/examples/trainer.o $(LIB_A)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/test_%: $(BUILD)/tests/unit/test_%.o $(UNIT_LIB_OBJS) \
		$(BUILD)/libprsim.a $(BUILD)/libprctl.a $(BUILD)/libpreduced.a \
		$(LIB_A)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(CHECK_LIBS)

$(BUILD)/tests/itest_%: $(BUILD)/tests/integration/test_%.o \
		$(TEST_LIB_OBJS) $(BUILD)/libpreduced.a $(LIB_A)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(CHECK_LIBS)

$(BUILD)/tests/load_%: $(BUILD)/tests/load/load_%.o \
		$(TEST_LIB_OBJS) $(BUILD)/libpreduced.a $(LIB_A)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(CHECK_LIBS)

$(BUILD)/tests/hosts_%: $(BUILD)/tests/hosts/test_%.o $(HOSTS_LIB_OBJS) \
		$(TEST_LIB_OBJS) $(BUILD)/libpreduced.a $(LIB_A)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(CHECK_LIBS)

# The chaos suite (tests/hosts/chaos.c): not a check-hosts suite, it has
# targets of its own below.
CHAOS_BIN := $(BUILD)/tests/chaos
$(CHAOS_BIN): $(BUILD)/tests/hosts/chaos.o $(HOSTS_LIB_OBJS) \
		$(TEST_LIB_OBJS) $(BUILD)/libpreduced.a $(LIB_A)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(CHECK_LIBS)

$(HOSTS_RELAY): $(BUILD)/tests/hosts/relay.o
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(TAMPER_RELAY): $(BUILD)/tests/integration/tamper_relay.o
	$(CC) $(LDFLAGS) -o $@ $^ -lpthread
$(BUILD)/tests/itest_tamper: | $(TAMPER_RELAY)

# Benchmarks link the harness, not the Check-based command-line fixture.
BENCH_LIB_OBJS := $(filter-out %/cli_fixture.o,$(TEST_LIB_OBJS))
$(BUILD)/bench/%: $(BUILD)/tests/bench/%.o $(BENCH_LIB_OBJS) \
		$(BUILD)/libprsim.a $(BUILD)/libpreduced.a $(LIB_A)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# Tests find the binaries they start through these variables.
TEST_ENV = PREDUCE_BUILD=$(abspath $(BUILD)) \
	PREDUCED=$(abspath $(BUILD)/preduced) \
	PREDUCE_TRAINER=$(abspath $(BUILD)/preduce-trainer) \
	PREDUCE_TAMPER_RELAY=$(abspath $(TAMPER_RELAY))

test check: check-format check-layout check-unit check-integration \
	check-replay check-python

# The parts depend one way (tests/check-layout.sh says the rules).
check-layout:
	@bash tests/check-layout.sh

# The engine's suites run again with the arithmetic on 3 pool threads.
ENGINE_UNIT_BINS := $(filter $(BUILD)/tests/test_engine%,$(UNIT_BINS))
check-unit: $(UNIT_BINS) $(BINS) $(LIB_SO)
	@set -e; for t in $(UNIT_BINS); do echo "== $$t"; \
		$(TEST_ENV) ./$$t; done; \
	for t in $(ENGINE_UNIT_BINS); do echo "== $$t (3 reduce threads)"; \
		$(TEST_ENV) PR_TEST_REDUCE_THREADS=3 ./$$t; done

check-integration: $(ITEST_BINS) $(TAMPER_RELAY) $(BINS) $(LIB_SO)
	@set -e; for t in $(ITEST_BINS); do echo "== $$t"; \
		$(TEST_ENV) ./$$t; done

# The fuzz targets' seeds and regression inputs (tests/fuzz/regress/),
# replayed through each target without libFuzzer (tests/fuzz/replay.c):
# part of make check and, under the sanitizers, of make asan.
REPLAY_BINS := $(FUZZ_SRCS:tests/fuzz/%.c=$(BUILD)/tests/replay_%)
$(BUILD)/tests/replay_%: $(BUILD)/tests/fuzz/%.o $(BUILD)/tests/fuzz/replay.o \
		$(BUILD)/libprctl.a $(BUILD)/libpreduced.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# fuzz_promtext checks preducectl's JSON with the integration tests'
# JSON checker.
$(BUILD)/tests/replay_fuzz_promtext $(BUILD)/fuzz/fuzz_promtext: \
	$(BUILD)/tests/integration/json_check.o

check-replay: $(REPLAY_BINS) conf-seed
	@set -e; for t in $(REPLAY_BINS); do n=$${t##*/replay_}; \
		echo "== $$t"; $(TEST_ENV) ./$$t $$n tests/fuzz/seeds/$$n \
		build/seeds/$$n tests/fuzz/regress/$$n; done

# Seeds made rather than committed (build/seeds/TARGET/, beside the
# committed tests/fuzz/seeds/TARGET/): the config fuzzer's is every key
# as pr_conf_dump() writes it, so a key added to the table is in the seed
# with no edit here. Made by the plain build's preduced from an empty
# file, whichever BUILD asks for it.
conf-seed:
	@$(MAKE) --no-print-directory BUILD=build CC=cc SANITIZE= FUZZ= \
		OPT="-O2 -g" build/preduced
	@mkdir -p build/seeds/fuzz_conf
	@: >build/seeds/empty.conf
	@build/preduced -c build/seeds/empty.conf --dump \
		>build/seeds/fuzz_conf/dump.conf

# The Python package with torch against real daemons (tests/python/,
# pytest, Debian's /usr/bin/python3 with python3-torch): pytest's summary.
check-python: $(BINS) $(LIB_SO)
	$(TEST_ENV) PREDUCE_LIB=$(abspath $(LIB_SO)) \
		PYTHONPATH=$(abspath client/python) \
		$(PYTHON) -m pytest -q -p no:cacheprovider tests/python

# Idle connections on every listener while trainers reduce (tests/load/):
# figures printed, Check's summary line last; bounded at 60 s per suite.
check-load: $(LOAD_BINS) $(BINS) $(LIB_SO)
	@set -e; for t in $(LOAD_BINS); do echo "== $$t"; \
		$(TEST_ENV) ./$$t; done

# What an administrator installs (tests/ops/): the units (systemd-analyze
# verify, exposure at most 3.5, printed), the sysusers file, the man pages
# (groff -ww, one entry per config key), pkg-config (a program built
# against a DESTDIR install reduces), and as root the trainers' socket
# group with two users and both units under a real systemd booted in a
# systemd-nspawn container (skipped, saying so, without root). Each suite
# prints Check's closing line; each is bounded by timeout, about 30 s in
# all. CI runs it (.ci/run); make check does not, since it adds users.
OPS_SUITES := units man pkgconfig k8s socket-group nspawn
.PHONY: check-ops
check-ops: all
	@rc=0; for t in $(OPS_SUITES); do echo "== tests/ops/$$t.sh"; \
		$(TEST_ENV) BUILD=$(BUILD) MAKE="$(MAKE)" \
			timeout 120 tests/ops/$$t.sh || rc=1; done; exit $$rc

# The Debian package (debian/, tests/deb/check.sh): dpkg-buildpackage -b
# in a scratch copy of the tree, lintian (no errors), then the .debs
# installed, used (both units with the shipped config, a reduce from
# python3-preduce and from a program built with pkg-config), reinstalled,
# removed and purged under a real systemd in a systemd-nspawn container.
# Root only (skipped, saying so, otherwise); about 1 min, at most 8.
.PHONY: check-deb
check-deb:
	timeout 480 tests/deb/check.sh

# client/examples/slurm/preduce.sbatch on a local Slurm (tests/slurm/:
# Debian's slurmctld, slurmd and munge, installed when missing; two nodes
# on this machine): the job trains and leaves no process. Root only
# (skipped, saying so, otherwise); about 15 s once installed, at most 600.
.PHONY: check-slurm
check-slurm: all
	BUILD=$(BUILD) timeout 600 tests/slurm/check.sh

# All-reduce bus bandwidth across 2 and 4 hosts at a capped rate, next to
# iperf3 over the same link (tests/hosts/bench_hosts.c; installs iperf3
# when missing): BENCH_HOSTS_ARGS="RATE_MBIT MIB ROUNDS" (100 4 3), the
# table in $(BUILD)/bench-hosts.txt. Then ring order across two racks
# (BENCH_RING_ARGS, $(BUILD)/bench-hosts-ring.txt); one host's link at a
# quarter of the others', time to a target loss under allreduce and
# dynamic (tests/hosts/slowlink.sh, SLOWLINK_ROUNDS, 3), in
# $(BUILD)/bench-hosts-slowlink.txt; transport.streams = 1, 2, 4 over a
# link through a delay relay, next to iperf3 -P 1, 2, 4 through the same
# (BENCH_STREAMS_ARGS="DELAY_MS WINDOW_KB RATE_MBIT MIB ROUNDS", 20 256
# 200 16 3), in $(BUILD)/bench-hosts-streams.txt; links encrypted against
# in clear (security.encrypt) at a cap (BENCH_SEAL_ARGS="RATE_MBIT MIB
# ROUNDS", 1000 16 3), in $(BUILD)/bench-hosts-seal.txt; the wire
# encodings bf16 and int8 against fp32 at a cap (BENCH_WIRE_ARGS="RATE_MBIT
# MIB ROUNDS", 500 16 3; RATE_MBIT 0: uncapped), in
# $(BUILD)/bench-hosts-wire.txt. BENCH_HOSTS_CASES picks cases (bus ring
# slowlink streams seal wire). About 8 minutes, root.
SLOWLINK_ROUNDS ?= 3
BENCH_HOSTS_CASES ?= bus ring slowlink streams seal wire
bench_case = $(if $(filter $(1),$(BENCH_HOSTS_CASES)),$(2))
.PHONY: bench-hosts
$(BUILD)/bench/bench_hosts: $(BUILD)/tests/hosts/bench_hosts.o \
		$(HOSTS_LIB_OBJS) $(BENCH_LIB_OBJS) $(BUILD)/libpreduced.a $(LIB_A)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
bench-hosts: $(BUILD)/bench/bench_hosts $(HOSTS_RELAY) $(BINS)
	tests/hosts/bench-setup.sh
	$(call bench_case,bus,@$(TEST_ENV) \
		BENCH_HOSTS_OUT=$(abspath $(BUILD))/bench-hosts.txt \
		tests/hosts/run.sh "$(abspath $(BUILD))/bench/bench_hosts \
		$(BENCH_HOSTS_ARGS)")
	$(call bench_case,ring,@$(TEST_ENV) \
		BENCH_RING_OUT=$(abspath $(BUILD))/bench-hosts-ring.txt \
		tests/hosts/run.sh "$(abspath $(BUILD))/bench/bench_hosts ring \
		$(BENCH_RING_ARGS)")
	$(call bench_case,slowlink,@tests/hosts/run.sh \
		"$(abspath tests/hosts/slowlink.sh) $(abspath $(BUILD)) \
		$(SLOWLINK_ROUNDS)" >$(BUILD)/bench-hosts-slowlink.txt; \
		st=$$?; cat $(BUILD)/bench-hosts-slowlink.txt; exit $$st)
	$(call bench_case,streams,@$(TEST_ENV) \
		PREDUCE_HOSTS_RELAY=$(abspath $(HOSTS_RELAY)) \
		BENCH_STREAMS_OUT=$(abspath $(BUILD))/bench-hosts-streams.txt \
		tests/hosts/run.sh "$(abspath $(BUILD))/bench/bench_hosts streams \
		$(BENCH_STREAMS_ARGS)")
	$(call bench_case,seal,@$(TEST_ENV) \
		BENCH_SEAL_OUT=$(abspath $(BUILD))/bench-hosts-seal.txt \
		tests/hosts/run.sh "$(abspath $(BUILD))/bench/bench_hosts seal \
		$(BENCH_SEAL_ARGS)")
	$(call bench_case,wire,@$(TEST_ENV) \
		BENCH_WIRE_OUT=$(abspath $(BUILD))/bench-hosts-wire.txt \
		tests/hosts/run.sh "$(abspath $(BUILD))/bench/bench_hosts wire \
		$(BENCH_WIRE_ARGS)")

# Several hosts on this machine (tests/hosts/): each a network namespace
# on a bridge the suite makes, links capped with tc, partitions by taking
# a host's link down, a long path by a delay relay (tests/hosts/relay.c).
# Needs root (skipped with a message otherwise); tests/hosts/run.sh
# deletes every namespace it made, and what runs in them, on any exit.
check-hosts: $(HOSTS_BINS) $(HOSTS_RELAY) $(BINS) $(LIB_SO)
	@$(TEST_ENV) PREDUCE_HOSTS_RELAY=$(abspath $(HOSTS_RELAY)) \
		tests/hosts/run.sh $(HOSTS_BINS)

# A job on 4 hosts under random kills (trainers, node daemons, the
# active scheduler) and cable cuts, against the same job without them
# (tests/hosts/chaos.c; root): CHAOS_S seconds each, so about
# 2 x CHAOS_S + 60 s, bounded at 2 x CHAOS_S + 240. soak-chaos: SOAK_S.
CHAOS_S ?= 60
SOAK_S ?= 600
check-chaos: $(CHAOS_BIN) $(HOSTS_RELAY) $(BINS) $(LIB_SO)
	@$(TEST_ENV) CHAOS_S=$(CHAOS_S) \
		HOSTS_SUITE_TIMEOUT=$$((2 * $(CHAOS_S) + 240)) \
		tests/hosts/run.sh $(CHAOS_BIN)
soak-chaos: $(CHAOS_BIN) $(HOSTS_RELAY) $(BINS) $(LIB_SO)
	@$(MAKE) --no-print-directory check-chaos CHAOS_S=$(SOAK_S)

# clang-format on the C, the SPDX lines (tests/check-license.sh), and
# shellcheck and pyflakes on the scripts (tests/check-lint.sh).
check-format:
	@if command -v $(CLANG_FORMAT) >/dev/null; then \
		$(CLANG_FORMAT) --dry-run -Werror $(FORMAT_SRCS) && \
		echo "clang-format: clean"; \
	else echo "clang-format not installed: format check skipped"; fi
	@tests/check-license.sh
	@tests/check-lint.sh
	@tests/check-commits.sh

format:
	$(CLANG_FORMAT) -i $(FORMAT_SRCS)

asan:
	PREDUCE_ASAN_RUNTIME=$$($(CC) -print-file-name=libasan.so) \
	$(MAKE) BUILD=build/asan SANITIZE=1 OPT="-O1 -g" check-unit \
		check-integration check-replay

# Line coverage of the daemon and client library by make check's suites
# (gcov, in build/cov): a file per line, least covered first, to find the
# branches no test takes. The RDMA paths run only in the guest, so rdma*.c
# show near 0 here. About 2 minutes.
COV_SRCS := $(DAEMON_SRCS) $(wildcard daemon/*.c daemon/ctl/*.c client/*.c)
coverage:
	mkdir -p build/cov && find build/cov -name '*.gcda' -delete
	$(MAKE) BUILD=build/cov OPT="-O0 -g --coverage" LDFLAGS=--coverage \
		check-unit check-integration >build/cov-check.log 2>&1 || \
		{ tail -n 40 build/cov-check.log; exit 1; }
	@for f in $(COV_SRCS); do \
		gcov -n -o build/cov/$$(dirname $$f) $$f 2>/dev/null | \
		awk -v f=$$f '/^File/ {hit = index($$0, f) > 0} \
			hit && /^Lines executed/ {split($$2, a, ":"); \
			printf "%7s of %4d lines  %s\n", a[2], $$4, f; hit = 0}'; \
	done | sort -n

# Benchmarks print figures (ratios against an anchor measured in the same
# run); they never fail on timing. About a minute in all.
bench: $(BENCH_BINS) $(BINS)
	@set -e; for b in $(BENCH_BINS); do echo "== $$b"; \
		$(TEST_ENV) ./$$b; done
	@echo "== preduce-sim --acceptance"
	./$(BUILD)/preduce-sim --acceptance
	@echo "== tests/bench/convergence.sh"
	tests/bench/convergence.sh $(BUILD)

# PyTorch on preduce next to torch.distributed (tests/bench/torch/): 4
# workers per configuration and profile, 3 repeats in turn. The
# transformer with AdamW against DDP (about 45 minutes), then the MLP with
# SGD (about 15); BENCH_TORCH_WORKLOADS picks. build/bench-torch/WORKLOAD/
# gets the table, the figures and the plot.
BENCH_TORCH_WORKLOADS ?= transformer mlp
.PHONY: bench-torch
bench-torch: $(BINS) $(LIB_SO)
	tests/bench/peers/setup.sh python3-torch python3-sklearn \
		python3-matplotlib
	set -e; for w in $(BENCH_TORCH_WORKLOADS); do \
		$(TEST_ENV) PREDUCE_LIB=$(abspath $(LIB_SO)) timeout 3600 \
		$(PYTHON) tests/bench/torch/bench_torch.py --workload $$w \
			--out $(BUILD)/bench-torch; done

# The wire encodings (transport.wire) in the transformer's job: dynamic
# with fp32 (the anchor), bf16 and int8, the two node daemons on two hosts
# (network namespaces, tests/python/netns.py) whose links are capped at
# BENCH_TORCH_WIRE_MBIT (20) Mbit/s each way. There a consensus step's
# fp32 average (model, AdamW's moments, gradients: 255k floats, 1 MB)
# takes 400 ms against 100-250 ms of compute (over int8, model and
# gradients only). The homogeneous profile, 3 repeats of
# BENCH_TORCH_WIRE_S (240) s: about 43 minutes; root (skipped, saying so,
# otherwise). build/bench-torch-wire/transformer/ gets the table. The
# allreduce policy averages gradients alone, 255 kB a step: measure it at
# 10 Mbit/s (BENCH_TORCH_WIRE_CONFIGS="allreduce fp32,allreduce
# bf16,allreduce int8" BENCH_TORCH_WIRE_ANCHOR="allreduce fp32"
# BENCH_TORCH_WIRE_MBIT=10).
BENCH_TORCH_WIRE_MBIT ?= 20
# A run's length: fp32 at 20 Mbit/s needs 130-170 s to the target.
BENCH_TORCH_WIRE_S ?= 240
BENCH_TORCH_WIRE_CONFIGS ?= dynamic fp32,dynamic bf16,dynamic int8
BENCH_TORCH_WIRE_ANCHOR ?= dynamic fp32
# The capped links' queue: fifo (one queue, 200 ms) or prio (the daemons'
# low-delay packets, scheduler and express connections, first, as a
# host's pfifo_fast sends them).
BENCH_TORCH_WIRE_QUEUE ?= fifo
.PHONY: bench-torch-wire
bench-torch-wire: $(BINS) $(LIB_SO)
	@if [ "$$(id -u)" != 0 ]; then \
		echo "bench-torch-wire: SKIPPED: network namespaces and tc" \
			"need root"; exit 0; fi; \
	set -e; tests/bench/peers/setup.sh python3-torch python3-matplotlib; \
	$(TEST_ENV) PREDUCE_LIB=$(abspath $(LIB_SO)) timeout -k 60 3000 \
		$(PYTHON) tests/bench/torch/bench_torch.py --workload transformer \
		--configs "$(BENCH_TORCH_WIRE_CONFIGS)" \
		--anchor "$(BENCH_TORCH_WIRE_ANCHOR)" \
		--cap-mbit $(BENCH_TORCH_WIRE_MBIT) --profiles homogeneous \
		--link-queue $(BENCH_TORCH_WIRE_QUEUE) \
		--seconds $(BENCH_TORCH_WIRE_S) --repeats 3 \
		--out $(BUILD)/bench-torch-wire

# Fuzzing (tests/fuzz/, libFuzzer with ASan and UBSan, clang): what peers
# and files feed the daemon. Each target runs FUZZ_SECONDS (default 60), or
# FUZZ_BUDGET over the number of targets when that is less (at least 1 s),
# so that a pass takes about FUZZ_BUDGET however many targets there are
# (CI: 300 s). One input may take FUZZ_INPUT_S (libFuzzer's -timeout); a
# target still running 30 s past its time (stuck outside libFuzzer's
# checks) is interrupted, then killed 10 s later. A crash or a slow input
# stops make with the input saved under build/fuzz/crashes/ and printed; a
# target that had to be stopped stops make, saying so.
FUZZ_BINS := $(FUZZ_SRCS:tests/fuzz/%.c=$(BUILD)/fuzz/%)
FUZZ_SECONDS ?= 60
FUZZ_BUDGET ?=
FUZZ_INPUT_S ?= 10
FUZZ_EACH = $(if $(FUZZ_BUDGET),$$(( $(FUZZ_BUDGET) / $(words $(FUZZ_BINS)) \
	< $(FUZZ_SECONDS) ? $(FUZZ_BUDGET) / $(words $(FUZZ_BINS)) : \
	$(FUZZ_SECONDS) )),$(FUZZ_SECONDS))
$(BUILD)/fuzz/%: $(BUILD)/tests/fuzz/%.o $(BUILD)/libprctl.a \
		$(BUILD)/libpreduced.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -fsanitize=fuzzer -o $@ $^ $(LDLIBS)

.PHONY: fuzz fuzz-run conf-seed
fuzz:
	@command -v clang >/dev/null || \
		{ echo "make fuzz needs clang: apt-get install clang" >&2; exit 1; }
	$(MAKE) --no-print-directory conf-seed
	$(MAKE) --no-print-directory BUILD=build/fuzz CC=clang SANITIZE=1 FUZZ=1 \
		OPT="-O1 -g" fuzz-run

fuzz-run: $(FUZZ_BINS)
	@set -e; s=$(FUZZ_EACH); [ "$$s" -ge 1 ] || s=1; \
	for f in $(FUZZ_BINS); do n=$$(basename $$f); \
		mkdir -p $(BUILD)/corpus/$$n $(BUILD)/crashes; \
		echo "== $$n: $$s s"; rc=0; \
		timeout -s INT -k 10 $$((s + 30)) $$f -max_total_time=$$s \
			-timeout=$(FUZZ_INPUT_S) -print_final_stats=1 \
			-artifact_prefix=$(BUILD)/crashes/$$n- $(BUILD)/corpus/$$n \
			tests/fuzz/seeds/$$n $$(ls -d build/seeds/$$n 2>/dev/null) \
			>$(BUILD)/$$n.log 2>&1 || rc=$$?; \
		[ $$rc -eq 0 ] || \
			{ tail -n 60 $(BUILD)/$$n.log; \
			[ $$rc -ne 124 ] && [ $$rc -ne 137 ] || \
			echo "$$n: still running $$((s + 30)) s after its start: stopped"; \
			for a in $(BUILD)/crashes/$$n-*; do [ -f "$$a" ] || continue; \
			echo "reproducer $$a (base64; commit it under"; \
			echo "tests/fuzz/regress/$$n/ once fixed):"; base64 "$$a"; \
			done; exit 1; }; \
		grep -E "Done [0-9]+ runs|stat::number_of_executed_units|cov: " \
			$(BUILD)/$$n.log | tail -n 2; \
		echo "$$n: corpus $$(ls $(BUILD)/corpus/$$n | wc -l) inputs"; done

# preduce next to Open MPI and Gloo, all over TCP on this machine
# (tests/bench/peers/): installs both from Debian when missing, then prints
# medians of 3 rounds and their ratios. A few minutes.
PEER_BINS := $(BUILD)/bench/mpi_allreduce $(BUILD)/bench/gloo_allreduce
$(BUILD)/bench/mpi_allreduce: tests/bench/peers/mpi_allreduce.c
	@mkdir -p $(dir $@)
	mpicc -O2 -Wall -Wextra -Werror -o $@ $< -lm
$(BUILD)/bench/gloo_allreduce: tests/bench/peers/gloo_allreduce.cc
	@mkdir -p $(dir $@)
	$(CXX) -O2 -std=c++17 -Wall -Wextra -Werror -o $@ $< -lgloo -pthread

# One node daemon and its trainers next to Open MPI's MPI_Allreduce over
# shared memory (vader), torch.distributed's Gloo on this host (when
# $(PYTHON) has torch) and a STREAM-style copy and add over buffers of the
# same size (tests/bench/local/): installs Open MPI when missing, prints
# and writes $(BUILD)/bench-local.txt. About 6 minutes with the defaults
# (BENCH_LOCAL_SIZES, BENCH_LOCAL_TRAINERS, BENCH_LOCAL_REPEATS and
# BENCH_RUN_S change them).
$(BUILD)/bench/bench_local: $(BUILD)/tests/bench/local/bench_local.o \
		$(BENCH_LIB_OBJS) $(BUILD)/libpreduced.a $(LIB_A)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

.PHONY: bench-local
bench-local: $(BUILD)/bench/bench_local $(BINS)
	tests/bench/peers/setup.sh libopenmpi-dev openmpi-bin
	$(MAKE) --no-print-directory $(BUILD)/bench/mpi_allreduce
	$(TEST_ENV) BENCH_LOCAL_MPI=$(abspath $(BUILD)/bench/mpi_allreduce) \
		BENCH_LOCAL_GLOO=$$($(PYTHON) -c 'import torch.distributed as d; \
			print(d.is_gloo_available())' 2>/dev/null | \
			grep -q True && echo tests/bench/local/gloo_allreduce.py) \
		./$(BUILD)/bench/bench_local $(BUILD)/bench-local.txt

.PHONY: bench-peers
bench-peers: $(BUILD)/bench/bench_allreduce $(BINS)
	tests/bench/peers/setup.sh
	$(MAKE) --no-print-directory $(PEER_BINS)
	$(TEST_ENV) tests/bench/peers/peers.sh $(SIZES)

# Many jobs on one scheduler and shared node daemons (tests/bench/jobs/),
# figures printed and written to $(BUILD)/bench-jobs.txt. First the
# scheduler's READYs per second of its own CPU, groups/s and reduce
# latency: 64 jobs x 16 workers with 4-float tensors on 4 node daemons,
# 3 rounds of 10 s. Then a job's 1 KiB reduces while another job's 256
# MiB ones cross the same peer link, against the same alone and against
# the big job on daemons of its own: p50, p99 and the ratio of the p99s,
# 3 rounds of 10 s phases. About 2.5 minutes and 3 GiB of memory,
# bounded at BENCH_JOBS_TIMEOUT_S (900 s); BENCH_JOBS_PARTS picks parts
# (sched isolation), the BENCH_JOBS_* variables in tests/bench/jobs/*.c
# change the sizes and times.
BENCH_JOBS_TIMEOUT_S ?= 900
BENCH_JOBS_PARTS ?= sched isolation
BENCH_JOBS_OBJS := $(patsubst %.c,$(BUILD)/%.o, \
	$(wildcard tests/bench/jobs/*.c))
$(BUILD)/bench/bench_jobs: $(BENCH_JOBS_OBJS) $(BENCH_LIB_OBJS) \
		$(BUILD)/libpreduced.a $(LIB_A)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

.PHONY: bench-jobs
bench-jobs: $(BUILD)/bench/bench_jobs $(BINS)
	$(TEST_ENV) timeout -s INT -k 15 $(BENCH_JOBS_TIMEOUT_S) \
		./$(BUILD)/bench/bench_jobs $(BUILD)/bench-jobs.txt \
		$(BENCH_JOBS_PARTS)

# Files made at install time from templates (*.in), with the directories
# of this install: the units name the binaries and the config where they
# are.
UNITS := preduced.service preduced-scheduler.service
SUBST = sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@BINDIR@|$(BINDIR)|g' \
	-e 's|@LIBDIR@|$(LIBDIR)|g' -e 's|@INCDIR@|$(INCDIR)|g' \
	-e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' -e 's|@PYDIR@|$(PYDIR)|g' \
	-e 's|@PYTHON@|$(PYTHON)|g'

demo: all
	./client/examples/demo.sh $(BUILD)

install: all
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCDIR) \
		$(DESTDIR)$(SYSCONFDIR)/preduce $(DESTDIR)$(UNITDIR)
	install -m 755 $(BUILD)/preduced $(BUILD)/preduce-trainer \
		$(BUILD)/preduce-sim $(BUILD)/preducectl \
		$(DESTDIR)$(BINDIR)/
	install -m 755 $(LIB_SO) $(DESTDIR)$(LIBDIR)/
	ln -sf libpreduce.so.$(SOVER) $(DESTDIR)$(LIBDIR)/libpreduce.so
	install -m 644 $(LIB_A) $(DESTDIR)$(LIBDIR)/
	install -m 644 client/include/preduce.h $(DESTDIR)$(INCDIR)/
	install -d $(DESTDIR)$(PKGCONFIGDIR)
	$(SUBST) client/preduce.pc.in >$(DESTDIR)$(PKGCONFIGDIR)/preduce.pc
	chmod 644 $(DESTDIR)$(PKGCONFIGDIR)/preduce.pc
	install -d $(DESTDIR)$(PYDIR)/preduce
	install -m 644 client/python/preduce/*.py \
		client/python/preduce/py.typed $(DESTDIR)$(PYDIR)/preduce/
	$(SUBST) client/python/preduce-run.in >$(DESTDIR)$(BINDIR)/preduce-run
	chmod 755 $(DESTDIR)$(BINDIR)/preduce-run
	install -m 644 conf/preduced.conf $(DESTDIR)$(SYSCONFDIR)/preduce/
	for u in $(UNITS); do \
		$(SUBST) systemd/$$u.in > $(DESTDIR)$(UNITDIR)/$$u && \
		chmod 644 $(DESTDIR)$(UNITDIR)/$$u; done
	for m in $(MANS); do s=$${m##*.}; \
		install -d $(DESTDIR)$(MANDIR)/man$$s && \
		install -m 644 $$m $(DESTDIR)$(MANDIR)/man$$s/; done
	for f in $(MAN3_LINKS); do echo '.so man3/libpreduce.3' \
		>$(DESTDIR)$(MANDIR)/man3/$$f.3; done
	install -d $(DESTDIR)$(SYSUSERSDIR)
	install -m 644 systemd/preduce.sysusers \
		$(DESTDIR)$(SYSUSERSDIR)/preduce.conf
	@# The loader's cache, so the new library is found by name (ctypes).
	if [ -z "$(DESTDIR)" ]; then ldconfig || \
		echo "make install: run ldconfig as root to use $(LIBDIR)"; fi

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/preduced $(DESTDIR)$(BINDIR)/preduce-trainer \
		$(DESTDIR)$(BINDIR)/preduce-sim $(DESTDIR)$(BINDIR)/preducectl \
		$(DESTDIR)$(LIBDIR)/libpreduce.so* $(DESTDIR)$(LIBDIR)/libpreduce.a \
		$(DESTDIR)$(INCDIR)/preduce.h $(DESTDIR)$(PKGCONFIGDIR)/preduce.pc \
		$(DESTDIR)$(SYSCONFDIR)/preduce/preduced.conf \
		$(addprefix $(DESTDIR)$(UNITDIR)/,$(UNITS)) \
		$(DESTDIR)$(SYSUSERSDIR)/preduce.conf $(DESTDIR)$(BINDIR)/preduce-run \
		$(foreach m,$(MANS),$(DESTDIR)$(MANDIR)/man$(subst .,,$(suffix $(m)))/$(notdir $(m))) \
		$(MAN3_LINKS:%=$(DESTDIR)$(MANDIR)/man3/%.3)
	rm -rf $(DESTDIR)$(PYDIR)/preduce

# RDMA over Soft-RoCE in a QEMU guest (this machine has no RDMA device):
# installs QEMU and the verbs tools, fetches a Debian kernel, boots it.
.PHONY: check-rdma
# The RDMA tests in a Soft-RoCE guest (tests/rdma/README.md); bounded by
# the guest's timeouts, well under 10 minutes.
check-rdma: $(BUILD)/tests/itest_rdma $(BUILD)/bench/bench_allreduce $(BINS)
	tests/rdma/setup.sh
	RDMA_GUEST_TIMEOUT=$${RDMA_GUEST_TIMEOUT:-540} \
	RDMA_HOST_TIMEOUT=$${RDMA_HOST_TIMEOUT:-590} PREDUCE_BUILD=$(abspath $(BUILD)) \
		tests/rdma/run-in-guest.sh tests/rdma/check.sh

.PHONY: bench-rdma
# The bandwidth part alone (tests/rdma/bw.sh): preduce against ib_write_bw.
bench-rdma: $(BUILD)/bench/bench_allreduce $(BINS)
	tests/rdma/setup.sh
	RDMA_GUEST_TIMEOUT=$${RDMA_GUEST_TIMEOUT:-1140} \
	RDMA_HOST_TIMEOUT=$${RDMA_HOST_TIMEOUT:-1200} PREDUCE_BUILD=$(abspath $(BUILD)) \
		tests/rdma/run-in-guest.sh tests/rdma/bw.sh $(SIZES)

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
