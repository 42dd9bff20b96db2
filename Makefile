# SPDX-License-Identifier: MIT OR Apache-2.0
# libeventq: build, install and test the Rust core, its C ABI and bindings.
#
#   make                 release build (build/lib/libeventq.so, build/lib/libeventq.a, man pages)
#   make check           the quick tier: lints, Rust tests, C tests, Go and Python unit tests
#   make test            every check (what CI runs), in order, stopping at the first failure
#   make test-GROUP      one group of stages: rust, c, go, python, packaging, bench, proofs
#   make test-STAGE      one stage, e.g. make test-cmake
#   make demo            the seed's scenario, bare eventfd versus libeventq
#   make install PREFIX=/usr/local DESTDIR=
#   make help            the other targets, the groups and their stages
#
# Nothing here downloads a toolchain: cargo, cc and pkg-config (go and
# python3 for the bindings) must already be on PATH; a stage whose tool is
# missing says what to install. The rules are in mk/, one file per concern.

.DEFAULT_GOAL := all

# --- Tools (those of one concern are in its file) ---------------------------
CARGO      ?= cargo
CC         ?= cc
CXX        ?= c++
PKG_CONFIG ?= pkg-config
PYTHON3    ?= python3
INSTALL    ?= install

# --- Version: read from Cargo.toml's [package] table, nowhere else ----------
VERSION := $(shell awk -F'"' '/^\[/ { pkg = ($$0 == "[package]") } \
                              pkg && /^version[ \t]*=/ { print $$2; exit }' Cargo.toml)
VERSION_MAJOR := $(word 1,$(subst ., ,$(VERSION)))
ifeq ($(VERSION_MAJOR),)
$(error cannot read the package version from Cargo.toml)
endif

# --- Outputs -----------------------------------------------------------------
BUILD := build
# The C ABI and its header are behind a cargo feature (Rust users of the
# crate build neither). The C library's crate (capi/) turns it on itself;
# the Rust checks of the crate with its C ABI (clippy, cargo test, make
# header) pass this.
CARGO_FEATURES   ?= --features capi
CARGO_TARGET_DIR ?= target

# --- The test install, which every C, Go and Python stage builds against ----
TEST_PREFIX  := $(CURDIR)/$(BUILD)/prefix
TEST_STAMP   := $(TEST_PREFIX)/.installed
TEST_PC_PATH := $(TEST_PREFIX)/lib/pkgconfig
# Compiler and linker flags from the pkg-config file installed in TEST_PREFIX.
pc_test = $$(PKG_CONFIG_PATH=$(TEST_PC_PATH) $(PKG_CONFIG) $(1) eventq)
RPATH_TEST := -Wl,-rpath,$(TEST_PREFIX)/lib
# The flags every C test and example must compile cleanly with.
C_STD_FLAGS := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -pthread
CFLAGS      ?= -O2 -g
# Seconds before a hung C test or example is killed.
C_TEST_TIMEOUT ?= 120
# $(call timed,SECONDS) PROGRAM ARGS: the hang guard of every test program.
timed = timeout --kill-after=10 $(1)

# --- Helpers -----------------------------------------------------------------
# A recipe line failing plainly when a tool is missing: $(call need,tool,hint)
need = @command -v $(firstword $(1)) >/dev/null 2>&1 || \
        { echo "error: $(firstword $(1)) is missing: $(2)" >&2; exit 1; }
# Marks the running test stage as skipped (see scripts/run-stages.sh).
skip = @echo "skipped: $(1)"; mkdir -p $(BUILD)/stages && touch $(BUILD)/stages/$@.skipped
# Every tool a recipe uses has a check, need-NAME, used as an order-only
# prerequisite: TOOL_NAME is the command, HINT_NAME what to install.
TOOL_cargo      = $(CARGO)
HINT_cargo      = install Rust (cargo, rustc) to build libeventq
TOOL_cc         = $(CC)
HINT_cc         = install a C compiler (cc) for the C tests and examples
TOOL_cxx        = $(CXX)
HINT_cxx        = install a C++ compiler (Debian: apt-get install g++) to check the header as C++
TOOL_pkg-config = $(PKG_CONFIG)
HINT_pkg-config = install pkg-config (or pkgconf)
TOOL_python3    = $(PYTHON3)
HINT_python3    = install Python 3 to generate the man pages (apt-get install python3)
TOOL_readelf    = readelf
HINT_readelf    = install binutils (apt-get install binutils)

.DELETE_ON_ERROR:
FORCE:

include mk/build.mk mk/install.mk mk/tests.mk mk/bindings.mk mk/bench.mk mk/proofs.mk

# --- Stages ------------------------------------------------------------------
# A stage is a target stage-NAME defined in mk/; scripts/run-stages.sh runs
# a list of them and prints the summary the CI reads. Each stage is in one
# group; `make test` runs them all in the order of TEST_STAGES.
STAGES_rust      := fmt clippy cargo-test doc rust-user semver
STAGES_packaging := header header-std install installed-lib abi licenses man-pages \
                    cmake static-link debuginfo uninstall
STAGES_c         := c-tests c-static examples examples-run
STAGES_go        := go
STAGES_python    := python python-wheel
STAGES_bench     := bench-rounds bench-smoke blocking-bench-smoke async-bench-smoke bench-peers-smoke bench-ipc-smoke
STAGES_proofs    := loom stress-smoke crash-smoke hostile-smoke leaks-smoke fuzz-corpus sanitize-smoke
GROUPS           := rust c go python packaging bench proofs

# The quick Rust checks first. loom then runs in the background (it builds
# nothing the others use: a target dir of its own) beside the stages that
# leave a core idle: the release build's serial tail, the C programs, the
# packaging checks, the Python tests. The Go race tests and the benchmark
# builds, which keep both cores busy, come last, once loom is done.
TEST_STAGES := fmt clippy cargo-test doc rust-user semver loom header header-std install installed-lib abi \
               c-tests c-static examples examples-run licenses man-pages cmake static-link \
               debuginfo uninstall stress-smoke crash-smoke hostile-smoke leaks-smoke fuzz-corpus \
               sanitize-smoke python python-wheel bench-rounds \
               go bench-smoke blocking-bench-smoke async-bench-smoke bench-peers-smoke bench-ipc-smoke
# The quick tier: what a contributor runs before each commit. go-unit is the
# Go tests without -race (stage go runs them with it).
CHECK_STAGES := fmt clippy cargo-test c-tests go-unit python

# Every stage in one group, and make test runs them all (unless told
# otherwise: make test TEST_STAGES="...").
GROUPED_STAGES := $(foreach g,$(GROUPS),$(STAGES_$(g)))
ifeq ($(origin TEST_STAGES),file)
ifneq ($(sort $(TEST_STAGES)),$(sort $(GROUPED_STAGES)))
$(error TEST_STAGES and the groups differ: $(strip $(filter-out $(GROUPED_STAGES),$(TEST_STAGES))         / $(filter-out $(TEST_STAGES),$(GROUPED_STAGES))))
endif
endif
ALL_STAGES := $(TEST_STAGES) go-unit

# Started in their place but not waited for (see scripts/run-stages.sh).
STAGES_BACKGROUND ?= loom
RUN_STAGES = @STAGE_MARKS=$(BUILD)/stages STAGES_BACKGROUND="$(STAGES_BACKGROUND)" \
             scripts/run-stages.sh "$(MAKE)"

.PHONY: all test check clean help FORCE $(addprefix test-,$(GROUPS) $(ALL_STAGES)) \
        $(addprefix stage-,$(ALL_STAGES)) $(patsubst TOOL_%,need-%,$(filter TOOL_%,$(.VARIABLES)))

# Default: the release build of the shared and static library, and the man pages.
all: $(LIB_SO) $(LIB_A) $(MAN_STAMP)

test:
	$(RUN_STAGES) $(TEST_STAGES)
check:
	$(RUN_STAGES) $(CHECK_STAGES)
$(addprefix test-,$(GROUPS)): test-%:
	$(RUN_STAGES) $(STAGES_$*)
$(addprefix test-,$(filter-out $(GROUPS),$(ALL_STAGES))): test-%:
	$(RUN_STAGES) $*

# Removes every build output (cargo's target dir and build/).
clean:
	rm -rf $(BUILD)
	if command -v $(CARGO) >/dev/null 2>&1; then $(CARGO) clean; else rm -rf $(CARGO_TARGET_DIR); fi

help:
	@printf '%-20s %s\n' \
	  'make [all]' 'the release library, header and man pages' \
	  'make check' 'the quick tier: $(CHECK_STAGES)' \
	  'make test' 'every stage, what CI runs' \
	  $(foreach g,$(GROUPS),'make test-$(g)' '$(STAGES_$(g))') \
	  'make test-STAGE' 'one stage, with the same summary' \
	  'make demo' 'the seed scenario: bare eventfd against libeventq' \
	  'make install' 'also install-strip, uninstall (PREFIX, DESTDIR, LIBDIR, ...)' \
	  'make header' 'regenerates include/eventq.h from src/ffi' \
	  'make man' 'the man pages in build/man' \
	  'make abi-baseline' 'a new ABI baseline in abi/ (make abi-check: stage abi)' \
	  'make bench' 'also bench-quick, bench-peers, bench-ipc, bench-blocking, bench-async, bench-go, bench-python' \
	  'make loom' 'also loom-mutations, stress, leaks, crash, crash-soak, hostile, sanitize, fuzz, fuzz-merge, fuzz-driver: the proofs in full'

$(patsubst TOOL_%,need-%,$(filter TOOL_%,$(.VARIABLES))): need-%:
	$(call need,$(TOOL_$*),$(HINT_$*))

# `make clean all` or `make -j2 clean test` must not race clean against a build.
ifneq ($(filter clean,$(MAKECMDGOALS)),)
.NOTPARALLEL:
endif
