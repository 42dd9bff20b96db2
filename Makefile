# SPDX-License-Identifier: MIT OR Apache-2.0
# libeventq: build, install and test the Rust core, its C ABI and bindings.
#
#   make                 release build (build/lib/libeventq.so, target/release/libeventq.a)
#   make test            every check, in order, stopping at the first failure
#   make demo            the seed's scenario, bare eventfd versus libeventq
#   make install PREFIX=/usr/local DESTDIR=
#
# Nothing here downloads a toolchain: cargo, cc and pkg-config (and go, once
# bindings/go exists) must already be on PATH.

# --- Tools -------------------------------------------------------------------
CARGO      ?= cargo
CC         ?= cc
PKG_CONFIG ?= pkg-config
GO         ?= go
GOFMT      ?= gofmt
INSTALL    ?= install

# --- Installation layout -----------------------------------------------------
PREFIX     ?= /usr/local
DESTDIR    ?=
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
DATAROOTDIR ?= $(PREFIX)/share
MANDIR     ?= $(DATAROOTDIR)/man
CMAKEDIR   ?= $(LIBDIR)/cmake/eventq
# The shared library's split debug info: gdb (and valgrind, readelf -wK) look
# for it by themselves in .debug/ next to the library; a distribution may
# set DEBUGDIR=/usr/lib/debug$(LIBDIR) instead.
DEBUGDIR   ?= $(LIBDIR)/.debug

# --- Version: read from Cargo.toml's [package] table, nowhere else ----------
VERSION := $(shell awk -F'"' '/^\[/ { pkg = ($$0 == "[package]") } \
                              pkg && /^version[ \t]*=/ { print $$2; exit }' Cargo.toml)
VERSION_MAJOR := $(word 1,$(subst ., ,$(VERSION)))
ifeq ($(VERSION_MAJOR),)
$(error cannot read the package version from Cargo.toml)
endif

# --- Build outputs -----------------------------------------------------------
# The C ABI and its header are behind a cargo feature (Rust users of the
# crate build neither); every cargo build of the C library turns it on.
CARGO_FEATURES ?= --features capi
CARGO_TARGET_DIR ?= target
LIB_SO      = $(BUILD)/lib/libeventq.so
LIB_A      := $(CARGO_TARGET_DIR)/release/libeventq.a
HEADER     := include/eventq.h
SONAME     := libeventq.so.$(VERSION_MAJOR)
REALNAME   := libeventq.so.$(VERSION)

BUILD      := build
# rustc's --print native-static-libs, from a staticlib build in its own target
# dir (so the main build is never invalidated); rebuilt only when the crate's
# dependencies, build script or the toolchain change.
NATIVE_LIBS_DIR := $(BUILD)/native-libs
NATIVE_LIBS     := $(NATIVE_LIBS_DIR)/native-static-libs.txt
RUSTC_VERSION   := $(NATIVE_LIBS_DIR)/rustc-version.txt

# --- Tests -------------------------------------------------------------------
TEST_PREFIX  := $(CURDIR)/$(BUILD)/prefix
TEST_STAMP   := $(TEST_PREFIX)/.installed
TEST_PC_PATH := $(TEST_PREFIX)/lib/pkgconfig
# What `make test` runs, in this order (each is a `test-<stage>` target).
TEST_STAGES  := fmt clippy cargo-test doc rust-user loom header header-std install installed-lib abi \
                c-tests c-static examples examples-run go bench-smoke
# The flags every C test and example must compile cleanly with.
C_STD_FLAGS  := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -pthread
CFLAGS       ?= -O2 -g
# Seconds before a hung C test or example is killed.
C_TEST_TIMEOUT ?= 120

C_TESTS        := $(sort $(wildcard tests/c/test_*.c))
C_TEST_BINS    := $(patsubst tests/c/%.c,$(BUILD)/c/%,$(C_TESTS))
# C tests also linked against libeventq.a, through `pkg-config --static`.
C_STATIC_TESTS ?= $(wildcard tests/c/test_chan_basic.c)
C_STATIC_BINS  := $(patsubst tests/c/%.c,$(BUILD)/c-static/%,$(C_STATIC_TESTS))
EXAMPLES       := $(sort $(wildcard examples-c/*.c))
EXAMPLE_BINS   := $(patsubst examples-c/%.c,$(BUILD)/examples/%,$(EXAMPLES))
# The C block of README.md, compiled and run so the README cannot rot.
README_EXAMPLE := $(BUILD)/examples/readme
# Examples that `make test` also runs (names without .c); each must exit 0.
EXAMPLES_RUN   ?= quickstart seed_demo $(if $(wildcard examples-c/loop.c),loop) readme
DEMO           := seed_demo
DEMO_ARGS      ?=

GO_DIR       := bindings/go
GO_TIMEOUT   ?= 5m

# A recipe line failing plainly when a tool is missing: $(call need,tool,hint)
need = @command -v $(firstword $(1)) >/dev/null 2>&1 || \
        { echo "error: $(firstword $(1)) is missing: $(2)" >&2; exit 1; }
# Marks the running test stage as skipped (see scripts/run-stages.sh).
skip = @echo "skipped: $(1)"; mkdir -p $(BUILD)/stages && touch $(BUILD)/stages/$@.skipped
# Compiler and linker flags from the pkg-config file installed in TEST_PREFIX.
pc_test = $$(PKG_CONFIG_PATH=$(TEST_PC_PATH) $(PKG_CONFIG) $(1) eventq)
RPATH_TEST := -Wl,-rpath,$(TEST_PREFIX)/lib

.PHONY: all header install test demo clean loom FORCE abi-check abi-baseline \
        need-cargo need-cc need-pkg-config need-go install-test-prefix \
        $(addprefix test-,$(TEST_STAGES))
.DELETE_ON_ERROR:

# Default: the release build of the shared and static library.
all: $(LIB_SO) $(LIB_A)

# cargo decides whether anything is stale; make only re-stats the outputs.
$(LIB_A): FORCE | need-cargo
	$(CARGO) build --release $(CARGO_FEATURES)
# The shared library is linked here from the static one, with eventq.map;
# the crate builds no cdylib: rustc would hand the linker an export list of
# its own (an anonymous version script) that wins over eventq.map, leaving
# the symbols unversioned.
$(LIB_SO): $(LIB_A) $(NATIVE_LIBS) eventq.map | need-cc
	@mkdir -p $(@D)
	$(CC) -shared -o $@ -Wl,--whole-archive $(LIB_A) -Wl,--no-whole-archive \
	  $$(cat $(NATIVE_LIBS)) -Wl,-soname,$(SONAME) -Wl,--version-script=eventq.map \
	  -Wl,--gc-sections -Wl,-z,relro -Wl,-z,now

# Regenerates the committed C header from src/ffi (commit the result).
header: | need-cargo
	EVENTQ_UPDATE_HEADER=1 $(CARGO) build $(CARGO_FEATURES)

# rustc's native-static-libs list, for Libs.private of the static library.
$(NATIVE_LIBS): Cargo.toml $(wildcard Cargo.lock) build.rs $(RUSTC_VERSION) | need-cargo
	CARGO="$(CARGO)" CARGO_FEATURES="$(CARGO_FEATURES)" scripts/native-static-libs.sh $(NATIVE_LIBS_DIR)/target $@

# Rewritten only when the toolchain changes, so it can trigger the above.
$(RUSTC_VERSION): FORCE | need-cargo
	@mkdir -p $(@D)
	@$${RUSTC:-rustc} -vV > $@.tmp && { cmp -s $@.tmp $@ && rm -f $@.tmp || mv -f $@.tmp $@; }

# Installs the shared library (stripped; its debug info in DEBUGDIR, linked
# by .gnu_debuglink), its symlinks, the static library, header, pkg-config
# files (eventq.pc, eventq-static.pc), CMake package and man pages. More in
# the packaging section below: install-strip, uninstall.
install: $(LIB_SO) $(LIB_A) $(NATIVE_LIBS)
	$(INSTALL) -d $(addprefix $(DESTDIR),$(INSTALL_DIRS))
	$(INSTALL) -m 755 $(DIST_SO) $(DESTDIR)$(LIBDIR)/$(REALNAME)
	$(INSTALL) -m 644 $(DIST_DEBUG) $(DESTDIR)$(DEBUGDIR)/$(REALNAME).debug
	ln -sfn $(REALNAME) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sfn $(SONAME) $(DESTDIR)$(LIBDIR)/libeventq.so
	$(INSTALL) -m 644 $(LIB_A) $(DESTDIR)$(LIBDIR)/libeventq.a
	$(INSTALL) -m 644 $(HEADER) $(DESTDIR)$(INCLUDEDIR)/eventq.h
	$(call install_pc,eventq)
	$(call install_pc,eventq-static)
	$(call install_cmake,eventqConfig.cmake)
	$(call install_cmake,eventqConfigVersion.cmake)
	$(INSTALL) -m 644 $(MAN_DIR)/man3/*.3 $(DESTDIR)$(MANDIR)/man3
	$(INSTALL) -m 644 $(MAN_DIR)/man7/*.7 $(DESTDIR)$(MANDIR)/man7

# The install `make test` builds C code against; relinks only what changed.
# Into an empty prefix, so no file of an earlier install (a man page of a
# function since removed) can pass for one of this install.
$(TEST_STAMP): $(LIB_SO) $(LIB_A) $(NATIVE_LIBS) $(HEADER) eventq.pc.in Makefile
	rm -rf $(TEST_PREFIX)
	$(MAKE) --no-print-directory install PREFIX=$(TEST_PREFIX) DESTDIR=
	@touch $@
install-test-prefix: $(TEST_STAMP)

# ============================================================================
# Packaging. Everything of packaging in this Makefile is in this section and
# in the install rule above (its test stages are appended to TEST_STAGES
# here): the man pages, CMake package, eventq-static.pc and split debug info
# that install puts in place; install-strip; uninstall.
#
#   make man            build/man: a page per function of eventq.h and
#                       eventq(7), generated from the header's doc comments
#                       and docs/design.md by scripts/gen-man.py (part of
#                       the default build)
#   make install-strip  install, then strip the debug info of libeventq.a
#                       and the symbol table of the shared library (its
#                       debug file in DEBUGDIR keeps the full symbols)
#   make uninstall      removes what install put there (give the same
#                       PREFIX, DESTDIR and directories), then each directory
#                       of the install's paths that is left empty, up to but
#                       not including DESTDIR (or PREFIX's parent without
#                       DESTDIR). An empty directory that was there before
#                       the install goes too: nothing records which existed.
# Stages: licenses, man-pages, cmake, static-link, debuginfo, uninstall.
# ============================================================================
PACKAGING_STAGES := licenses man-pages cmake static-link debuginfo uninstall
TEST_STAGES      += $(PACKAGING_STAGES)

PYTHON3 ?= python3
OBJCOPY ?= objcopy
STRIP   ?= strip
CMAKE   ?= cmake
MAN     ?= man

MAN_DIR    := $(BUILD)/man
MAN_STAMP  := $(MAN_DIR)/.generated
DIST_DIR   := $(BUILD)/dist
DIST_SO    := $(DIST_DIR)/$(REALNAME)
DIST_DEBUG := $(DIST_DIR)/$(REALNAME).debug
# Every directory install writes into.
INSTALL_DIRS = $(LIBDIR) $(INCLUDEDIR) $(PKGCONFIGDIR) $(DEBUGDIR) $(CMAKEDIR) \
               $(MANDIR)/man3 $(MANDIR)/man7
# uninstall removes no directory at or above this one.
UNINSTALL_TOP = $(if $(DESTDIR),$(DESTDIR),$(patsubst %/,%,$(dir $(PREFIX))))

.PHONY: man install-strip uninstall need-python3 need-objcopy need-cmake need-man \
        $(addprefix test-,$(PACKAGING_STAGES))

all: $(MAN_STAMP)
install: $(DIST_SO) $(DIST_DEBUG) $(MAN_STAMP)
$(TEST_STAMP): $(DIST_SO) $(MAN_STAMP) eventq-static.pc.in $(wildcard cmake/*.cmake.in)

man: $(MAN_STAMP)
$(MAN_STAMP): $(HEADER) docs/design.md scripts/gen-man.py Cargo.toml | need-python3
	$(PYTHON3) scripts/gen-man.py --header $(HEADER) --design docs/design.md \
	  --version $(VERSION) --out $(MAN_DIR)
	@touch $@

# The shared library as installed: its debug info copied into a file of its
# own, then stripped from the library, which names that file (and its CRC)
# in .gnu_debuglink; both keep the build ID.
$(DIST_SO): $(LIB_SO) Makefile | need-objcopy
	@mkdir -p $(@D)
	$(OBJCOPY) --only-keep-debug $(LIB_SO) $(DIST_DEBUG)
	$(OBJCOPY) --strip-debug --add-gnu-debuglink=$(DIST_DEBUG) $(LIB_SO) $@
$(DIST_DEBUG): $(DIST_SO)
	@:

# $(call install_pc,NAME): NAME.pc.in to PKGCONFIGDIR/NAME.pc, with the
# install's paths and the static library's native libraries filled in.
install_pc = sed -e 's|@prefix@|$(PREFIX)|g' \
	    -e 's|@libdir@|$(patsubst $(PREFIX)/%,$${prefix}/%,$(LIBDIR))|g' \
	    -e 's|@includedir@|$(patsubst $(PREFIX)/%,$${prefix}/%,$(INCLUDEDIR))|g' \
	    -e 's|@version@|$(VERSION)|g' \
	    -e "s|@libs_private@|$$(cat $(NATIVE_LIBS))|g" \
	    $(1).pc.in > $(DESTDIR)$(PKGCONFIGDIR)/$(1).pc.tmp && \
	  mv -f $(DESTDIR)$(PKGCONFIGDIR)/$(1).pc.tmp $(DESTDIR)$(PKGCONFIGDIR)/$(1).pc
# $(call install_cmake,FILE): cmake/FILE.in to CMAKEDIR/FILE. The library and
# include directories are written relative to CMAKEDIR, so the installed
# tree can move; the native libraries become a CMake list ("-lm" -> "m");
# the pointer size is the ELF class of the library (1: 32-bit, 2: 64-bit).
install_cmake = sed -e 's|@version@|$(VERSION)|g' -e 's|@major@|$(VERSION_MAJOR)|g' \
	    -e 's|@realname@|$(REALNAME)|g' -e 's|@soname@|$(SONAME)|g' \
	    -e "s|@rel_libdir@|$$(realpath -m -s --relative-to=$(CMAKEDIR) $(LIBDIR))|g" \
	    -e "s|@rel_includedir@|$$(realpath -m -s --relative-to=$(CMAKEDIR) $(INCLUDEDIR))|g" \
	    -e "s|@static_libs@|$$(sed -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$$//' \
	         -e 's/[[:space:]][[:space:]]*/;/g' -e 's/\(^\|;\)-l/\1/g' $(NATIVE_LIBS))|g" \
	    -e "s|@sizeof_void_p@|$$(( $$(od -An -tu1 -j4 -N1 $(LIB_SO)) * 4 ))|g" \
	    cmake/$(1).in > $(DESTDIR)$(CMAKEDIR)/$(1).tmp && \
	  mv -f $(DESTDIR)$(CMAKEDIR)/$(1).tmp $(DESTDIR)$(CMAKEDIR)/$(1)

# GNU's install-strip: install, then strip what can be stripped. The static
# library keeps the symbols a link needs (--strip-debug).
install-strip: install
	$(STRIP) --strip-debug $(DESTDIR)$(LIBDIR)/libeventq.a
	$(STRIP) --strip-unneeded $(DESTDIR)$(LIBDIR)/$(REALNAME)

# The man pages to remove are those build/man holds for the current header.
uninstall: $(MAN_STAMP)
	rm -f $(addprefix $(DESTDIR)$(LIBDIR)/,$(REALNAME) $(SONAME) libeventq.so libeventq.a) \
	  $(DESTDIR)$(DEBUGDIR)/$(REALNAME).debug $(DESTDIR)$(INCLUDEDIR)/eventq.h \
	  $(DESTDIR)$(PKGCONFIGDIR)/eventq.pc $(DESTDIR)$(PKGCONFIGDIR)/eventq-static.pc \
	  $(DESTDIR)$(CMAKEDIR)/eventqConfig.cmake $(DESTDIR)$(CMAKEDIR)/eventqConfigVersion.cmake
	for f in $(MAN_DIR)/man3/*.3 $(MAN_DIR)/man7/*.7; do \
	  page=$${f#$(MAN_DIR)/}; rm -f "$(DESTDIR)$(MANDIR)/$$page" || exit 1; done
	scripts/rmdir-empty.sh "$(UNINSTALL_TOP)" $(addprefix $(DESTDIR),$(INSTALL_DIRS))

# Stage: LICENSE-MIT and LICENSE-APACHE: the texts, the copyright line, the
# licence of Cargo.toml, and the Go module's copies.
test-licenses:
	scripts/check-licenses.sh $(GO_DIR)

# Stage: the installed man pages: one per function of the header, found by
# man, rendered without a warning, with the sections the comments call for.
test-man-pages: $(TEST_STAMP) | need-man need-cc
	CC="$(CC)" MAN="$(MAN)" scripts/check-man.sh $(TEST_PREFIX) $(HEADER) docs/design.md $(BUILD)/check-man

# Stage: tests/cmake built with find_package(eventq) against the test install
# (and a moved copy of it, and a staged install with other directories):
# eventq::eventq and eventq::eventq-static link and run; version requests.
test-cmake: $(TEST_STAMP) | need-cmake need-cc
	CC="$(CC)" CMAKE="$(CMAKE)" MAKE="$(MAKE)" \
	  scripts/check-cmake.sh $(TEST_PREFIX) $(VERSION) $(BUILD)/check-cmake

# Stage: the README's link lines, shared and static, build its C example
# against the test install; the static one needs no libeventq.so.
test-static-link: $(TEST_STAMP) $(BUILD)/readme.c | need-cc need-pkg-config
	CC="$(CC)" PKG_CONFIG="$(PKG_CONFIG)" scripts/check-static-link.sh \
	  $(TEST_PREFIX) $(VERSION) README.md $(BUILD)/readme.c $(BUILD)/check-static-link

# Stage: the installed shared library has no debug info, and its
# .gnu_debuglink leads to the debug file (name, CRC, build ID; gdb).
test-debuginfo: $(TEST_STAMP) | need-objcopy
	scripts/check-debuginfo.sh $(TEST_PREFIX)/lib/$(REALNAME) $(TEST_PREFIX)/lib/.debug/$(REALNAME).debug

# Stage: install, install-strip and uninstall into scratch DESTDIRs (empty,
# and holding other packages' files): exactly the expected files go in, and
# uninstall leaves the tree as it was.
test-uninstall: $(TEST_STAMP) | need-objcopy need-cc
	CC="$(CC)" MAKE="$(MAKE)" scripts/check-uninstall.sh $(VERSION) $(HEADER) $(BUILD)/check-uninstall

need-python3:
	$(call need,$(PYTHON3),install Python 3 to generate the man pages (apt-get install python3))
need-objcopy:
	$(call need,$(OBJCOPY),install binutils (objcopy, strip, readelf) to split the debug info)
need-cmake:
	$(call need,$(CMAKE),install CMake to test the CMake package (apt-get install cmake))
need-man:
	$(call need,$(MAN),install man-db and groff-base to check the man pages (apt-get install man-db groff-base))
# --- End of packaging section -----------------------------------------------

# Runs every stage in order and prints the summary the CI reads.
test:
	@STAGE_MARKS=$(BUILD)/stages scripts/run-stages.sh "$(MAKE)" $(TEST_STAGES)

# Stage: Rust formatting.
test-fmt: | need-cargo
	@$(CARGO) fmt --version >/dev/null 2>&1 || \
	  { echo "error: rustfmt is missing (rustup component add rustfmt)" >&2; exit 1; }
	$(CARGO) fmt --check

# Stage: Rust lints, warnings are errors.
test-clippy: | need-cargo
	@$(CARGO) clippy --version >/dev/null 2>&1 || \
	  { echo "error: clippy is missing (rustup component add clippy)" >&2; exit 1; }
	$(CARGO) clippy --all-targets $(CARGO_FEATURES) -- -D warnings
	$(CARGO) clippy --all-targets -- -D warnings

# Stage: Rust unit and integration tests (the unit tests include header drift).
test-cargo-test: | need-cargo
	$(CARGO) test $(CARGO_FEATURES)

# Stage: the Rust API's documentation builds without a warning (broken
# links, bad markup); its examples run in stage cargo-test.
test-doc: | need-cargo
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --no-deps

# Stage: the crate as a Rust user gets it. What `cargo package` would ship
# (no fuzz corpus, C tests or build outputs), and a program outside the
# repository that depends on it by path builds without cbindgen (the C ABI
# is a feature it does not turn on) and runs.
RUST_USER_DIR = $(CURDIR)/$(BUILD)/rust-user
test-rust-user: | need-cargo
	@$(CARGO) package --list --allow-dirty > $(BUILD)/package-list.txt
	@if grep -Ev '^(src/|build\.rs|cbindgen\.toml|README\.md|CHANGELOG\.md|LICENSE-|docs/design\.md|Cargo\.(toml|toml\.orig|lock)$$|\.cargo_vcs_info\.json$$)' \
	    $(BUILD)/package-list.txt; then echo "error: cargo package would ship the files above" >&2; exit 1; fi
	@echo "cargo package ships $$(wc -l < $(BUILD)/package-list.txt) files: sources, build script, docs, licences"
	@dir=$$(mktemp -d /tmp/eventq-rust-user.XXXXXX) && trap 'rm -rf "$$dir"' EXIT && \
	  mkdir -p "$$dir/src" && cp tests/rust-user/src/main.rs "$$dir/src/" && \
	  sed 's|@EVENTQ_PATH@|$(CURDIR)|' tests/rust-user/Cargo.toml.in > "$$dir/Cargo.toml" && \
	  cd "$$dir" && CARGO_TARGET_DIR=$(RUST_USER_DIR)/target $(CARGO) tree -e normal,build > tree.txt && \
	  if grep -q cbindgen tree.txt; then cat tree.txt; echo "error: a Rust user builds cbindgen" >&2; exit 1; fi && \
	  echo "a Rust user's dependency tree: $$(grep -c . tree.txt) crates, no cbindgen" && \
	  CARGO_TARGET_DIR=$(RUST_USER_DIR)/target $(CARGO) run -q

# Stage: loom model checks of the channel's wake-up protocol (tests/loom.rs),
# built with --cfg loom in a target dir of their own. Optimised: loom runs
# the models' code many thousands of times, and a debug build is ~20x slower.
test-loom loom: | need-cargo
	RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=$(CARGO_TARGET_DIR)/loom $(CARGO) test --release --test loom

# Stage: the committed header equals a fresh generation.
test-header: | need-cargo
	CARGO="$(CARGO)" CARGO_FEATURES="$(CARGO_FEATURES)" scripts/check-header.sh $(HEADER)

# Stage: the header compiles and links, warning-free with -pedantic, as
# every C standard from C99 and every C++ standard from C++11 (the header
# states this minimum).
HEADER_C_STDS   := c99 c11 c17
HEADER_CXX_STDS := c++11 c++14 c++17 c++20 c++23
CXX ?= c++
test-header-std: $(TEST_STAMP) | need-cc
	$(call need,$(CXX),install a C++ compiler (Debian: apt-get install g++) to check the header as C++)
	@mkdir -p $(BUILD)/header-std
	@printf '#include <eventq.h>\nint main(void) { struct eventq_chan *c = 0; int rc = eventq_chan_new(0, &c); eventq_chan_free(c); return rc == 0 && eventq_version() == EVENTQ_VERSION ? 0 : 1; }\n' \
	  > $(BUILD)/header-std/use.c
	@set -e; for std in $(HEADER_C_STDS); do \
	  $(CC) -std=$$std -Wall -Wextra -Werror -pedantic $(call pc_test,--cflags) \
	    $(BUILD)/header-std/use.c -o $(BUILD)/header-std/$$std $(call pc_test,--libs) $(RPATH_TEST); \
	  $(BUILD)/header-std/$$std; echo "  ok    $$std"; done
	@set -e; for std in $(HEADER_CXX_STDS); do \
	  $(CXX) -std=$$std -Wall -Wextra -Werror -pedantic $(call pc_test,--cflags) -x c++ \
	    $(BUILD)/header-std/use.c -o $(BUILD)/header-std/$$std $(call pc_test,--libs) $(RPATH_TEST); \
	  $(BUILD)/header-std/$$std; echo "  ok    $$std"; done

# Stage: the ABI against the baseline in abi/ (scripts/abi-check.sh says
# how), then the check itself on deliberately broken ABIs. abidiff comes
# from libabigail (Debian: abigail-tools; .ci/run installs it).
ABI_CHECK = CC="$(CC)" scripts/abi-check.sh $(1) $(LIB_SO) $(HEADER) abi eventq.map $(BUILD)/abi
test-abi abi-check: $(LIB_SO)
	$(call ABI_CHECK,check)
	$(call ABI_CHECK,selftest)
# A new baseline, at a release that changed the ABI compatibly (commit abi/).
abi-baseline: $(LIB_SO)
	$(call ABI_CHECK,update)

# Stage: install into build/prefix through the install target.
test-install: install-test-prefix
	@echo "installed in $(TEST_PREFIX)"

# Stage: exports, soname, symlinks, pkg-config and version of the install.
test-installed-lib: $(TEST_STAMP) | need-cc need-pkg-config
	CC="$(CC)" PKG_CONFIG="$(PKG_CONFIG)" \
	  scripts/check-install.sh $(TEST_PREFIX) $(VERSION) $(HEADER) $(BUILD)/check-install

# Stage: every tests/c/test_*.c against the installed shared library.
test-c-tests: $(C_TEST_BINS)
ifeq ($(C_TESTS),)
	$(call skip,no tests/c/test_*.c)
else
	@scripts/run-programs.sh $(C_TEST_TIMEOUT) $(C_TEST_BINS)
endif

# Stage: C_STATIC_TESTS linked against libeventq.a with pkg-config --static.
test-c-static: $(C_STATIC_BINS)
ifeq ($(C_STATIC_TESTS),)
	$(call skip,C_STATIC_TESTS is empty)
else
	@for b in $(C_STATIC_BINS); do \
	  if readelf -d $$b | grep -q 'NEEDED.*libeventq'; then \
	    echo "error: $$b is linked against libeventq.so, not libeventq.a" >&2; exit 1; \
	  fi; done
	@scripts/run-programs.sh $(C_TEST_TIMEOUT) $(C_STATIC_BINS)
endif

# Stage: every examples-c/*.c and the README's C block compile with the test flags.
test-examples: $(EXAMPLE_BINS) $(README_EXAMPLE)
ifeq ($(EXAMPLES),)
	$(call skip,no examples-c/*.c)
else
	@echo "built $(words $(EXAMPLE_BINS)) example(s) in $(BUILD)/examples"
endif

# Stage: the examples listed in EXAMPLES_RUN run and exit 0.
test-examples-run: $(addprefix $(BUILD)/examples/,$(EXAMPLES_RUN))
ifeq ($(strip $(EXAMPLES_RUN)),)
	$(call skip,EXAMPLES_RUN is empty)
else
	@scripts/run-programs.sh $(C_TEST_TIMEOUT) $^
endif

# Stage: Go bindings: gofmt, vet, test -race (and -tags static if used) on build/prefix.
test-go: $(if $(wildcard $(GO_DIR)/go.mod),need-go $(TEST_STAMP))
ifeq ($(wildcard $(GO_DIR)/go.mod),)
	$(call skip,no $(GO_DIR)/go.mod)
else
	@out=$$($(GOFMT) -l $(GO_DIR)) || exit 1; \
	  if [ -n "$$out" ]; then echo "gofmt -l: not formatted:" >&2; echo "$$out" >&2; exit 1; fi
	cd $(GO_DIR) && $(GO_ENV) $(GO) vet ./...
	cd $(GO_DIR) && $(GO_ENV) $(GO) test -race -count=1 -timeout $(GO_TIMEOUT) ./...
	@if grep -rlqE '^//go:build .*\bstatic\b' --include='*.go' $(GO_DIR); then \
	  echo 'cd $(GO_DIR) && $(GO) test -race -tags static ./...'; \
	  cd $(GO_DIR) && $(GO_ENV) $(GO) test -race -count=1 -tags static -timeout $(GO_TIMEOUT) ./...; \
	fi
endif
# Never fetch a Go toolchain; link and run against the test install.
GO_ENV = GOTOOLCHAIN=local CGO_ENABLED=1 CC="$(CC)" \
         PKG_CONFIG_PATH=$(TEST_PC_PATH) LD_LIBRARY_PATH=$(TEST_PREFIX)/lib \
         CGO_LDFLAGS="-g -O2 $(RPATH_TEST)"

# C tests and examples: built against the installed library via pkg-config.
$(BUILD)/c/%: tests/c/%.c $(wildcard tests/c/*.h) $(TEST_STAMP) | need-cc need-pkg-config
	@mkdir -p $(@D)
	$(CC) $(C_STD_FLAGS) $(CFLAGS) $(call pc_test,--cflags) $< -o $@ \
	  $(call pc_test,--libs) $(RPATH_TEST) $(LDFLAGS)
$(BUILD)/examples/%: examples-c/%.c $(wildcard examples-c/*.h) $(TEST_STAMP) | need-cc need-pkg-config
	@mkdir -p $(@D)
	$(CC) $(C_STD_FLAGS) $(CFLAGS) $(call pc_test,--cflags) $< -o $@ \
	  $(call pc_test,--libs) $(RPATH_TEST) $(LDFLAGS)
$(BUILD)/readme.c: README.md
	@mkdir -p $(@D)
	awk '/^```c$$/ { f = 1; next } /^```$$/ { f = 0 } f' $< > $@
	@test -s $@ || { echo "error: README.md has no \`\`\`c block" >&2; exit 1; }
$(README_EXAMPLE): $(BUILD)/readme.c $(TEST_STAMP) | need-cc need-pkg-config
	@mkdir -p $(@D)
	$(CC) $(C_STD_FLAGS) $(CFLAGS) $(call pc_test,--cflags) $< -o $@ \
	  $(call pc_test,--libs) $(RPATH_TEST) $(LDFLAGS)
# Static: -leventq is pinned to libeventq.a; the rest is Libs.private.
$(BUILD)/c-static/%: tests/c/%.c $(wildcard tests/c/*.h) $(TEST_STAMP) | need-cc need-pkg-config
	@mkdir -p $(@D)
	$(CC) $(C_STD_FLAGS) $(CFLAGS) $(call pc_test,--cflags) $< -o $@ \
	  $$(PKG_CONFIG_PATH=$(TEST_PC_PATH) $(PKG_CONFIG) --static --libs eventq | \
	     sed 's/-leventq\b/-l:libeventq.a/') $(LDFLAGS)

# Builds and runs the seed's demonstration against the installed library.
demo: $(BUILD)/examples/$(DEMO)
	$(BUILD)/examples/$(DEMO) $(DEMO_ARGS)
examples-c/$(DEMO).c:
	@echo "error: examples-c/$(DEMO).c does not exist yet: nothing to demo" >&2; exit 1

# --- Benchmark ---------------------------------------------------------------
# `make bench`: benches/side_by_side.rs in a release build: libeventq (epoll,
# loop and blocking paths) against crossbeam-channel, a semaphore-eventfd
# queue, a pipe and the seed's bare eventfd, plus idle wake-up (handshake and
# 1 ms idle-gap pacing) and ping-pong latency; prints one table per
# configuration and ends with a summary that judges every performance target
# (met or MISSED, with its figure) from the medians of that run. A few
# minutes; take figures only on a quiet machine (the table prints the load
# average and warns when it is high). BENCH_ARGS passes options: --reps N,
# --msgs N, --filter TEXT, --no-latency, --budget N (the loop rows),
# --low-water N[,N..] (one more epoll row per low-water mark), --send-fd
# (producers poll the send fd instead of blocking in send).
# Stage bench-smoke: the same program with tiny counts (--smoke); it fails only
# if some configuration did not deliver every message intact. No timing is
# ever checked. Then benches/footprint.rs: the fds and resident memory of
# 10,000 idle channels of the default capacity, per channel (--smoke: 100
# channels, checking that each works).
BENCH_ARGS ?=
.PHONY: bench
bench: | need-cargo
	$(CARGO) bench --bench side_by_side -- $(BENCH_ARGS)
	$(CARGO) bench --bench footprint
test-bench-smoke: | need-cargo
	$(CARGO) bench --bench side_by_side -- --smoke
	$(CARGO) bench --bench footprint -- --smoke
# `make bench-go`: the Go binding against Go's buffered channel, in one run
# (bindings/go/bench_test.go), linked to the test install of the library.
GO_BENCH_ARGS ?= -bench . -count 5
.PHONY: bench-go
bench-go: need-go $(TEST_STAMP)
	cd $(GO_DIR) && $(GO_ENV) $(GO) test -run '^$$' -benchmem $(GO_BENCH_ARGS)
# `make bench` also runs benches/blocking.rs (`make bench-blocking`): the
# blocking single-message path (send/recv_into with Wait::Forever) against
# the epoll path (Wait::Never, epoll_wait on the receive fd, poll on the
# send fd), 1P1C, 8 B and 1 KiB, in one run, with the ratio.
# BLOCKING_ARGS passes options: --msgs N, --reps N. Stage
# blocking-bench-smoke: the same with tiny counts (--smoke): delivery only.
BLOCKING_ARGS ?=
TEST_STAGES += blocking-bench-smoke
.PHONY: bench-blocking test-blocking-bench-smoke
bench: bench-blocking
bench-blocking: | need-cargo
	$(CARGO) bench --bench blocking -- $(BLOCKING_ARGS)
test-blocking-bench-smoke: | need-cargo
	$(CARGO) bench --bench blocking -- --smoke
# --- End of benchmark section -----------------------------------------------

# --- Peer benchmark (C): libeventq against libuv, ZeroMQ, nng and GLib ------
# `make bench-peers`: benches/peers/*.c, built with $(CC) against the
# distribution's libuv, ZeroMQ, nng and GLib (found with pkg-config by
# benches/peers/configure.sh; Debian's libnng-dev has no pkg-config module,
# so nng is also found by a compile probe) and against libeventq's C ABI in
# the test install. 1P1C and 4P1C, 8-byte and 1 KiB messages, one table per
# configuration, with the libeventq/peer ratios of its epoll and loop rows,
# ending with the loop's targets (met or MISSED) judged from that run;
# six to eight minutes on 2 CPUs, most of it nng's rows (tens of microseconds a
# message here). A peer library that is missing is left out, and the
# program says so with its apt-get line (.ci/run installs all four).
# `make bench` runs it too, first (a prerequisite of bench), then the Rust
# bench above. PEERS_ARGS passes options: --msgs N, --reps N, --filter TEXT.
# Stage bench-peers-smoke: the same program with tiny counts (--smoke); it
# fails only if some configuration did not deliver every message exactly
# once, whole and in order. Then --selftest: faults injected into the
# streams (lost, duplicated, swapped, corrupted, short messages) must each
# be reported, or the stage fails. No timing is ever checked.
PEERS_ARGS  ?=
PEERS_BUILD := $(BUILD)/bench-peers
PEERS_BIN   := $(PEERS_BUILD)/peers
PEERS_SRCS  := $(sort $(wildcard benches/peers/*.c))
TEST_STAGES += bench-peers-smoke
.PHONY: bench-peers test-bench-peers-smoke
bench: bench-peers
$(PEERS_BUILD)/cflags: FORCE | need-cc need-pkg-config
	@CC="$(CC)" PKG_CONFIG="$(PKG_CONFIG)" benches/peers/configure.sh $(PEERS_BUILD)
$(PEERS_BUILD)/libs: $(PEERS_BUILD)/cflags
$(PEERS_BIN): $(PEERS_SRCS) benches/peers/peers.h $(PEERS_BUILD)/cflags $(PEERS_BUILD)/libs \
              $(TEST_STAMP) | need-cc need-pkg-config
	$(CC) $(C_STD_FLAGS) $(CFLAGS) $(call pc_test,--cflags) $$(cat $(PEERS_BUILD)/cflags) \
	  $(PEERS_SRCS) -o $@ $(call pc_test,--libs) $$(cat $(PEERS_BUILD)/libs) -lm \
	  $(RPATH_TEST) $(LDFLAGS)
bench-peers: $(PEERS_BIN)
	$(PEERS_BIN) $(PEERS_ARGS)
test-bench-peers-smoke: $(PEERS_BIN)
	timeout --kill-after=10 $(C_TEST_TIMEOUT) $(PEERS_BIN) --smoke
	timeout --kill-after=10 $(C_TEST_TIMEOUT) $(PEERS_BIN) --selftest
# --- End of peer benchmark section ------------------------------------------

# Removes every build output (cargo's target dir and build/).
clean:
	rm -rf $(BUILD)
	if command -v $(CARGO) >/dev/null 2>&1; then $(CARGO) clean; else rm -rf $(CARGO_TARGET_DIR); fi

# Tool checks, used as order-only prerequisites.
need-cargo:
	$(call need,$(CARGO),install Rust (cargo, rustc) to build libeventq)
need-cc:
	$(call need,$(CC),install a C compiler (cc) for the C tests and examples)
need-pkg-config:
	$(call need,$(PKG_CONFIG),install pkg-config (or pkgconf))
need-go:
	$(call need,$(GO),install Go to build and test $(GO_DIR))

FORCE:

# `make clean all` or `make -j2 clean test` must not race clean against a build.
ifneq ($(filter clean,$(MAKECMDGOALS)),)
.NOTPARALLEL:
endif

# ============================================================================
# Proof under load, faults and bad input. Everything of it in
# this Makefile is in this section (its test stages are appended to
# TEST_STAGES here). The fault tests are tests/c/test_fault_*.c: the c-tests
# stage runs them with the other C tests.
#
#   make stress    tests/stress/stress.c: 8 producers x 4 consumers, 10M
#                  messages (0..4 KiB, checksummed, sequenced) through a
#                  bare channel, 1M through a capacity-2 one, 10M through
#                  loop channel sources; then 2M of each with blocking calls
#                  only (a lost wake-up would hang it)
#   make leaks     tests/stress/leaks.c: 100,000 channels and 100,000 loops
#                  (a source each) created and freed; fds, heap and RSS
#                  before/after; then a short run under valgrind memcheck
#   make sanitize  scripts/sanitize.sh: C tests, fuzz corpus, stress and
#                  leaks under ASan+UBSan and TSan, Rust tests under ASan and
#                  TSan (nightly, if installed), valgrind memcheck; it prints
#                  what each run covers and what it cannot
#   make fuzz      fuzz/fuzz_abi.c under libFuzzer for FUZZ_SECONDS (needs
#                  clang; installs nothing); `make fuzz-merge` adds what it
#                  found to fuzz/corpus/
# Stages: stress-smoke, leaks-smoke, fuzz-corpus (the corpus replayed through
# fuzz/driver.c under gcc's ASan+UBSan: no clang needed), sanitize-smoke.
# ============================================================================
TEST_STAGES += stress-smoke leaks-smoke fuzz-corpus sanitize-smoke

STRESS_MESSAGES       ?= 10000000
STRESS_SMOKE_MESSAGES ?= 500000
# A second run with blocking calls only (-B), where no timeout or poll can
# mask a lost wake-up: it would hang, and the timeout fails it.
STRESS_BLOCKING_MESSAGES       ?= 2000000
STRESS_SMOKE_BLOCKING_MESSAGES ?= 100000
STRESS_ARGS           ?=
LEAKS_N               ?= 100000
LEAKS_SMOKE_N         ?= 10000
LEAKS_VALGRIND_N      ?= 2000
# Seconds before a hung stress or leaks run is killed (a hang guard only).
STRESS_TIMEOUT        ?= 1800
FUZZ_SECONDS          ?= 600
FUZZ_ARGS             ?=
CLANG                 ?= clang
VALGRIND              ?= valgrind

STRESS_BIN  := $(BUILD)/stress/stress
LEAKS_BIN   := $(BUILD)/stress/leaks
FUZZ_DIR    := $(BUILD)/fuzz
FUZZ_BIN    := $(FUZZ_DIR)/fuzz_abi
FUZZ_DRIVER := $(FUZZ_DIR)/driver-asan
FUZZ_CORPUS := fuzz/corpus
# The Rust library built for libFuzzer: SanitizerCoverage (stable rustc
# flags, as cargo-fuzz uses), debug assertions and overflow checks on, in its
# own target dir; --target keeps the flags off build.rs.
FUZZ_TARGET_DIR := $(CARGO_TARGET_DIR)/fuzz
FUZZ_TRIPLE      = $(shell $${RUSTC:-rustc} -vV | sed -n 's/^host: //p')
FUZZ_LIB         = $(FUZZ_TARGET_DIR)/$(FUZZ_TRIPLE)/release/libeventq.a
FUZZ_RUSTFLAGS  := -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=3 \
                   -Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
                   -Cllvm-args=-sanitizer-coverage-pc-table \
                   -Cllvm-args=-sanitizer-coverage-trace-compares \
                   -Cdebug-assertions -Coverflow-checks
# Linked against libeventq.a of the test install (pkg-config --static).
STATIC_EVENTQ = $$(PKG_CONFIG_PATH=$(TEST_PC_PATH) $(PKG_CONFIG) --static --libs eventq | \
                   sed 's/-leventq\b/-l:libeventq.a/')
SAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined

.PHONY: stress leaks sanitize fuzz fuzz-merge fuzz-driver \
        test-stress-smoke test-leaks-smoke test-fuzz-corpus test-sanitize-smoke

$(STRESS_BIN) $(LEAKS_BIN): $(BUILD)/stress/%: tests/stress/%.c $(TEST_STAMP) | need-cc need-pkg-config
	@mkdir -p $(@D)
	$(CC) $(C_STD_FLAGS) $(CFLAGS) $(call pc_test,--cflags) $< -o $@ $(STATIC_EVENTQ) $(LDFLAGS)

stress: $(STRESS_BIN)
	timeout --kill-after=10 $(STRESS_TIMEOUT) $(STRESS_BIN) -n $(STRESS_MESSAGES) $(STRESS_ARGS)
	timeout --kill-after=10 $(STRESS_TIMEOUT) $(STRESS_BIN) -B -n $(STRESS_BLOCKING_MESSAGES) $(STRESS_ARGS)

test-stress-smoke: $(STRESS_BIN)
	timeout --kill-after=10 $(C_TEST_TIMEOUT) $(STRESS_BIN) -q -n $(STRESS_SMOKE_MESSAGES)
	timeout --kill-after=10 $(C_TEST_TIMEOUT) $(STRESS_BIN) -q -B -n $(STRESS_SMOKE_BLOCKING_MESSAGES)

# memcheck counts definite and indirect leaks; "possibly lost" is left out:
# std keeps one 48-byte handle of the main thread (std::thread::current(),
# first called by eventq_source_remove) in TLS through an interior pointer.
leaks: $(LEAKS_BIN)
	timeout --kill-after=10 $(STRESS_TIMEOUT) $(LEAKS_BIN) -n $(LEAKS_N)
	@if command -v $(VALGRIND) >/dev/null 2>&1; then \
	  echo "valgrind memcheck, $(LEAKS_VALGRIND_N) of each (every allocation, Rust's included, through malloc):"; \
	  timeout --kill-after=10 $(STRESS_TIMEOUT) $(VALGRIND) -q --error-exitcode=86 --leak-check=full \
	    --show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect \
	    $(LEAKS_BIN) -n $(LEAKS_VALGRIND_N) && echo "valgrind: no leak, no invalid access"; \
	else echo "valgrind is missing: the memcheck run of leaks is skipped (apt-get install valgrind)"; fi

test-leaks-smoke: $(LEAKS_BIN)
	timeout --kill-after=10 $(C_TEST_TIMEOUT) $(LEAKS_BIN) -n $(LEAKS_SMOKE_N)

# The fuzz target through the plain driver, with gcc's ASan+UBSan when the
# compiler has them (the driver needs no libFuzzer and no clang).
$(FUZZ_DRIVER): fuzz/fuzz_abi.c fuzz/driver.c $(TEST_STAMP) | need-cc need-pkg-config
	@mkdir -p $(@D)
	@if echo 'int main(void){return 0;}' | $(CC) $(SAN_FLAGS) -x c - -o $@.probe 2>/dev/null; then \
	  rm -f $@.probe; san="$(SAN_FLAGS)"; \
	else echo "note: $(CC) has no ASan/UBSan: the corpus runs without them"; san=; fi; \
	echo "$(CC) $(C_STD_FLAGS) -O1 -g $$san ... fuzz/fuzz_abi.c fuzz/driver.c -o $@"; \
	$(CC) $(C_STD_FLAGS) -O1 -g $$san $(call pc_test,--cflags) fuzz/fuzz_abi.c fuzz/driver.c -o $@ \
	  $(STATIC_EVENTQ) $(LDFLAGS)
fuzz-driver: $(FUZZ_DRIVER)

test-fuzz-corpus: $(FUZZ_DRIVER)
	@test -d $(FUZZ_CORPUS) || { echo "error: $(FUZZ_CORPUS) is missing" >&2; exit 1; }
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
	  timeout --kill-after=10 $(C_TEST_TIMEOUT) $(FUZZ_DRIVER) $(FUZZ_CORPUS)

sanitize: $(TEST_STAMP) | need-cc need-cargo
	CC="$(CC)" CARGO="$(CARGO)" BUILD="$(BUILD)" PREFIX="$(TEST_PREFIX)" \
	  NATIVE_LIBS="$$(cat $(NATIVE_LIBS))" VALGRIND="$(VALGRIND)" scripts/sanitize.sh

test-sanitize-smoke: $(TEST_STAMP) | need-cc
	CC="$(CC)" CARGO="$(CARGO)" BUILD="$(BUILD)" PREFIX="$(TEST_PREFIX)" \
	  NATIVE_LIBS="$$(cat $(NATIVE_LIBS))" VALGRIND="$(VALGRIND)" scripts/sanitize.sh --smoke

# libFuzzer needs clang; nothing is installed here.
fuzz: $(NATIVE_LIBS) | need-cargo
	@echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }' | \
	  $(CLANG) -fsanitize=fuzzer -x c - -o $(FUZZ_DIR).probe >/dev/null 2>&1 || { \
	  rm -f $(FUZZ_DIR).probe; \
	  echo "error: make fuzz needs clang with libFuzzer ($(CLANG) -fsanitize=fuzzer failed)." >&2; \
	  echo "       On Debian: apt-get install clang. This Makefile installs nothing." >&2; \
	  echo "       (make test needs no clang: it replays $(FUZZ_CORPUS) through fuzz/driver.c.)" >&2; \
	  exit 1; }
	@rm -f $(FUZZ_DIR).probe
	CARGO_TARGET_DIR=$(FUZZ_TARGET_DIR) RUSTFLAGS="$(FUZZ_RUSTFLAGS)" \
	  $(CARGO) rustc --release --lib --crate-type staticlib $(CARGO_FEATURES) --target $(FUZZ_TRIPLE)
	@mkdir -p $(FUZZ_DIR)/work $(FUZZ_DIR)/artifacts
	$(CLANG) -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude \
	  fuzz/fuzz_abi.c $(FUZZ_LIB) $$(cat $(NATIVE_LIBS)) -o $(FUZZ_BIN)
	@echo "fuzzing for $(FUZZ_SECONDS) s; new inputs go to $(FUZZ_DIR)/work, crashes to $(FUZZ_DIR)/artifacts"
	$(FUZZ_BIN) -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 -timeout=20 \
	  -artifact_prefix=$(FUZZ_DIR)/artifacts/ $(FUZZ_ARGS) $(FUZZ_DIR)/work $(FUZZ_CORPUS)
	@echo "replay one input with a trace: make fuzz-driver && FUZZ_TRACE=1 $(FUZZ_DRIVER) FILE"

# Adds to fuzz/corpus/ the inputs of the last `make fuzz` that add coverage.
fuzz-merge:
	@test -x $(FUZZ_BIN) || { echo "error: run make fuzz first" >&2; exit 1; }
	$(FUZZ_BIN) -merge=1 $(FUZZ_CORPUS) $(FUZZ_DIR)/work
# --- End of the load, fault and bad-input section ---------------------------

# ============================================================================
# Python binding (bindings/python). Everything of it in this Makefile is in
# this section; its test stage is appended to TEST_STAGES here.
#
#   make test-python   a venv in build/py-venv (python3 -m venv; pip installs
#                      cffi, pytest, pytest-timeout, trio (the README's trio
#                      example) from PyPI and bindings/python from the
#                      tree), pointed at the test install, then
#                      pytest on bindings/python/tests; no tests collected
#                      is a failure
#   make bench-python  thread-to-asyncio hand-off of small messages: eventq
#                      against call_soon_threadsafe + asyncio.Queue and
#                      queue.Queue through an executor (BENCH_PY_ARGS passes
#                      options, e.g. --msgs 100000)
# ============================================================================
TEST_STAGES += python

PYTHON3       ?= python3
PY_DIR        := bindings/python
PY_VENV       := $(BUILD)/py-venv
PY            := $(CURDIR)/$(PY_VENV)/bin/python
PY_TIMEOUT    ?= 60
PYTEST_ARGS   ?=
BENCH_PY_ARGS ?=
PY_SOURCES    := $(shell find $(PY_DIR)/eventq -type f -name '*.py' 2>/dev/null) \
                 $(PY_DIR)/eventq/py.typed $(PY_DIR)/pyproject.toml $(PY_DIR)/README.md
# The package finds the test install through EVENTQ_LIBRARY; the tests build
# their C helper with pkg-config. Run from build/, so `import eventq` is the
# installed package, and without writing bytecode into the tree.
PY_ENV = EVENTQ_LIBRARY=$(TEST_PREFIX)/lib/$(SONAME) PKG_CONFIG_PATH=$(TEST_PC_PATH) \
         PKG_CONFIG="$(PKG_CONFIG)" CC="$(CC)" PYTHONDONTWRITEBYTECODE=1

.PHONY: test-python bench-python need-python-venv

need-python-venv:
	@$(PYTHON3) -c 'import venv, ensurepip' 2>/dev/null || { \
	  echo "error: $(PYTHON3) cannot make a venv with pip (no venv/ensurepip module)." >&2; \
	  echo "       On Debian/Ubuntu: apt-get install python3-venv" >&2; exit 1; }

# The venv and its tools, made once (delete build/py-venv to refresh them).
$(PY_VENV)/.tools: | need-python-venv
	rm -rf $(PY_VENV)
	$(PYTHON3) -m venv $(PY_VENV)
	$(PY) -m pip install -q --disable-pip-version-check -U pip setuptools wheel cffi pytest pytest-timeout trio
	@touch $@

# The package, reinstalled when it changes; built from a copy in build/ so
# setuptools leaves nothing in the source tree.
$(PY_VENV)/.installed: $(PY_VENV)/.tools $(PY_SOURCES)
	rm -rf $(BUILD)/py-src && mkdir -p $(BUILD)/py-src
	cp -R $(PY_DIR)/pyproject.toml $(PY_DIR)/README.md $(PY_DIR)/eventq $(BUILD)/py-src/
	$(PY) -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps \
	  --force-reinstall $(BUILD)/py-src
	@touch $@

test-python: $(PY_VENV)/.installed $(TEST_STAMP) | need-cc need-pkg-config
	@cd $(BUILD) && $(PY_ENV) $(PY) -m pytest -p no:cacheprovider --timeout $(PY_TIMEOUT) \
	  $(PYTEST_ARGS) $(CURDIR)/$(PY_DIR)/tests; rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "error: pytest collected no tests" >&2; exit 1; fi; exit $$rc

bench-python: $(PY_VENV)/.installed $(TEST_STAMP)
	cd $(BUILD) && $(PY_ENV) $(PY) $(CURDIR)/$(PY_DIR)/bench/handoff.py $(BENCH_PY_ARGS)
# --- End of Python binding section -----------------------------------------
