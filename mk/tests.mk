# SPDX-License-Identifier: MIT OR Apache-2.0
# The Rust and C test stages (lints, cargo test, docs, the crate as a Rust
# user gets it, the header; C tests and examples against the test install),
# the rules that build the C programs, and make demo.

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
EXAMPLES_RUN   ?= quickstart seed_demo $(if $(wildcard examples-c/loop.c),loop) processes readme
DEMO           := seed_demo
DEMO_ARGS      ?=
# libeventq.a with its native libraries, through the test install's
# `pkg-config --static`; -leventq is pinned to libeventq.a.
STATIC_EVENTQ = $$(PKG_CONFIG_PATH=$(TEST_PC_PATH) $(PKG_CONFIG) --static --libs eventq | \
                   sed 's/-leventq\b/-l:libeventq.a/')

.PHONY: demo need-rustfmt need-clippy

need-rustfmt: | need-cargo
	@$(CARGO) fmt --version >/dev/null 2>&1 || \
	  { echo "error: rustfmt is missing (rustup component add rustfmt)" >&2; exit 1; }
need-clippy: | need-cargo
	@$(CARGO) clippy --version >/dev/null 2>&1 || \
	  { echo "error: clippy is missing (rustup component add clippy)" >&2; exit 1; }

# Stage: Rust formatting.
stage-fmt: | need-rustfmt
	$(CARGO) fmt --check

# Stage: Rust lints, warnings are errors, with every feature (the C ABI,
# tokio, async-io), with none, and the C library's crate (capi/); and
# `unsafe` allowed only where scripts/check-unsafe-places.sh lists.
stage-clippy: | need-clippy
	scripts/check-unsafe-places.sh
	$(CARGO) clippy --all-targets $(CARGO_FEATURES) --features tokio,async-io -- -D warnings
	$(CARGO) clippy --all-targets -- -D warnings
	$(CARGO) clippy -p eventq-capi --all-targets -- -D warnings

# Stage: Rust unit and integration tests (the unit tests include header
# drift), with the tokio and async-io features' tests and doctests.
stage-cargo-test: | need-cargo
	$(CARGO) test $(CARGO_FEATURES) --features tokio,async-io

# Stage: the Rust API's documentation builds without a warning (broken
# links, bad markup); its examples run in stage cargo-test.
stage-doc: | need-cargo
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --no-deps --features tokio,async-io

# Stage: the crate as a Rust user gets it. What `cargo package` would ship
# (the Rust sources, examples, tests and benches; no fuzz corpus, C tests,
# C library crate or build outputs), and a program outside the repository
# that depends on it by path builds and runs: without cbindgen (the C ABI
# is a feature it does not turn on), without a static library (the crate
# is an rlib; the C library is capi/), and with a second,
# semver-incompatible eventq beside it (the packaged crate renumbered
# 99.0.0), which a `links` key would refuse. Such files left by an earlier
# build, and the user's copies of eventq, are removed first, so what is
# checked is what this build made.
RUST_USER_DIR = $(CURDIR)/$(BUILD)/rust-user
RUST_USER_UNWANTED = \( -name 'libeventq*.a' -o -name '*cbindgen*' \)
stage-rust-user: | need-cargo
	@mkdir -p $(BUILD)
	@$(CARGO) package -p eventq --list --allow-dirty > $(BUILD)/package-list.txt
	@if grep -Ev '^(src/|build\.rs|cbindgen\.toml|README\.md|CHANGELOG\.md|LICENSE-|docs/design\.md|docs/decisions/[0-9A-Za-z-]+\.md|(examples|tests|benches)/[0-9a-z_]+\.rs|tests/(common|fds)/mod\.rs|Cargo\.(toml|toml\.orig|lock)$$|\.cargo_vcs_info\.json$$)' \
	    $(BUILD)/package-list.txt; then echo "error: cargo package would ship the files above" >&2; exit 1; fi
	@echo "cargo package ships $$(wc -l < $(BUILD)/package-list.txt) files: sources, build script, Rust examples, tests and benches, docs, licences"
	@dir=$$(mktemp -d /tmp/eventq-rust-user.XXXXXX) && trap 'rm -rf "$$dir"' EXIT && \
	  mkdir -p "$$dir/src" && cp tests/rust-user/src/main.rs "$$dir/src/" && \
	  $(CARGO) package -q -p eventq --allow-dirty --no-verify && \
	  tar -xzf $(CARGO_TARGET_DIR)/package/eventq-$(VERSION).crate -C "$$dir" && mv "$$dir/eventq-$(VERSION)" "$$dir/next" && \
	  sed -i 's/^version = "$(VERSION)"$$/version = "99.0.0"/' "$$dir/next/Cargo.toml" && \
	  grep -q '^version = "99.0.0"$$' "$$dir/next/Cargo.toml" && \
	  sed -e 's|@EVENTQ_PATH@|$(CURDIR)|' -e "s|@EVENTQ_NEXT_PATH@|$$dir/next|" tests/rust-user/Cargo.toml.in > "$$dir/Cargo.toml" && \
	  cd "$$dir" && export CARGO_TARGET_DIR=$(RUST_USER_DIR)/target && \
	  $(CARGO) tree -e normal,build > tree.txt && \
	  if grep -q cbindgen tree.txt; then cat tree.txt; echo "error: a Rust user builds cbindgen" >&2; exit 1; fi && \
	  echo "a Rust user's dependency tree: $$(grep -c . tree.txt) crates, no cbindgen" && \
	  mkdir -p "$$CARGO_TARGET_DIR" && find "$$CARGO_TARGET_DIR" $(RUST_USER_UNWANTED) -prune -exec rm -rf {} + && \
	  $(CARGO) clean -q -p eventq && $(CARGO) run -q && \
	  made=$$(find "$$CARGO_TARGET_DIR" $(RUST_USER_UNWANTED) -print) && \
	  if [ -n "$$made" ]; then echo "$$made"; echo "error: a Rust user's build made the files above (a static library, or cbindgen)" >&2; exit 1; fi && \
	  echo "a Rust user's build: an rlib of eventq, no libeventq*.a, no cbindgen"

# Stage: the Rust API against 0.2.0's, by cargo-semver-checks when it is
# installed: a report of what breaks 0.2 code, to hold against the
# CHANGELOG. 0.3 may break 0.2 (a 0.x minor bump is a major one to
# semver), so the tool is asked to judge the release as a minor one (else
# it skips every check) and its verdict is shown, not enforced: the stage
# fails only where the check itself cannot run. The Rust API without
# features: `capi` adds none (src/ffi is private), and its build script
# cannot run in the tool's checkout of the baseline, which sits in this
# workspace's target dir.
SEMVER_BASELINE ?= 0d4fd39
SEMVER_LOG = $(BUILD)/semver-checks.log
stage-semver: | need-cargo
	@if ! $(CARGO) semver-checks --version >/dev/null 2>&1; then \
	  echo "skipped: cargo-semver-checks not installed (cargo install cargo-semver-checks)"; \
	  mkdir -p $(BUILD)/stages && touch $(BUILD)/stages/$@.skipped; exit 0; fi; \
	  if ! git cat-file -e '$(SEMVER_BASELINE)^{commit}' 2>/dev/null; then \
	  echo "skipped: the baseline $(SEMVER_BASELINE) is not in this clone (a shallow one?)"; \
	  mkdir -p $(BUILD)/stages && touch $(BUILD)/stages/$@.skipped; exit 0; fi; \
	  mkdir -p $(BUILD); \
	  echo "$(CARGO) semver-checks -p eventq --default-features --baseline-rev $(SEMVER_BASELINE) --release-type minor"; \
	  $(CARGO) semver-checks -p eventq --default-features --baseline-rev $(SEMVER_BASELINE) \
	    --release-type minor > $(SEMVER_LOG) 2>&1; rc=$$?; cat $(SEMVER_LOG); \
	  if [ $$rc -eq 0 ]; then echo "semver: no break of the $(SEMVER_BASELINE) API"; \
	  elif grep -q 'semver requires new \(major\|minor\) version' $(SEMVER_LOG); then \
	    echo "semver: a report, not a failure: the breaks above are allowed in 0.x minor releases; each belongs in CHANGELOG.md"; \
	  else echo "error: cargo-semver-checks could not check (exit $$rc, see above)" >&2; exit 1; fi

# Stage: the committed header equals a fresh generation.
stage-header: | need-cargo
	CARGO="$(CARGO)" scripts/check-header.sh $(HEADER)

# Stage: the header compiles and links, warning-free with -pedantic, as
# every C standard from C99 and every C++ standard from C++11 (the header
# states this minimum).
HEADER_C_STDS   := c99 c11 c17
HEADER_CXX_STDS := c++11 c++14 c++17 c++20 c++23
# $(call header_std,COMPILER,STANDARDS,EXTRA_FLAGS)
header_std = @set -e; for std in $(2); do \
	  $(1) -std=$$std -Wall -Wextra -Werror -pedantic $(call pc_test,--cflags) $(3) \
	    $(BUILD)/header-std/use.c -o $(BUILD)/header-std/$$std $(call pc_test,--libs) $(RPATH_TEST); \
	  $(BUILD)/header-std/$$std; echo "  ok    $$std"; done
stage-header-std: $(TEST_STAMP) | need-cc need-cxx need-pkg-config
	@mkdir -p $(BUILD)/header-std
	@printf '#include <eventq.h>\nint main(void) { struct eventq_chan *c = 0; int rc = eventq_chan_new(0, &c); eventq_chan_free(c); return rc == 0 && eventq_version() == EVENTQ_VERSION ? 0 : 1; }\n' \
	  > $(BUILD)/header-std/use.c
	$(call header_std,$(CC),$(HEADER_C_STDS))
	$(call header_std,$(CXX),$(HEADER_CXX_STDS),-x c++)

# Stage: every tests/c/test_*.c against the installed shared library.
stage-c-tests: $(C_TEST_BINS)
ifeq ($(C_TESTS),)
	$(call skip,no tests/c/test_*.c)
else
	@scripts/run-programs.sh $(C_TEST_TIMEOUT) $(C_TEST_BINS)
endif

# Stage: C_STATIC_TESTS linked against libeventq.a with pkg-config --static.
stage-c-static: $(C_STATIC_BINS) | need-readelf
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
stage-examples: $(EXAMPLE_BINS) $(README_EXAMPLE)
ifeq ($(EXAMPLES),)
	$(call skip,no examples-c/*.c)
else
	@echo "built $(words $(EXAMPLE_BINS)) example(s) in $(BUILD)/examples"
endif

# Stage: the examples listed in EXAMPLES_RUN run and exit 0.
stage-examples-run: $(addprefix $(BUILD)/examples/,$(EXAMPLES_RUN))
ifeq ($(strip $(EXAMPLES_RUN)),)
	$(call skip,EXAMPLES_RUN is empty)
else
	@scripts/run-programs.sh $(C_TEST_TIMEOUT) $^
endif

# C tests and examples: built against the installed library via pkg-config.
# $(call cc_test,LIBS): compiles $< into $@ with the test flags.
define cc_test
@mkdir -p $(@D)
$(CC) $(C_STD_FLAGS) $(CFLAGS) $(call pc_test,--cflags) $< -o $@ $(1) $(LDFLAGS)
endef
$(BUILD)/c/%: tests/c/%.c $(wildcard tests/c/*.h) $(TEST_STAMP) | need-cc need-pkg-config
	$(call cc_test,$(call pc_test,--libs) $(RPATH_TEST))
$(BUILD)/examples/%: examples-c/%.c $(wildcard examples-c/*.h) $(TEST_STAMP) | need-cc need-pkg-config
	$(call cc_test,$(call pc_test,--libs) $(RPATH_TEST))
$(README_EXAMPLE): $(BUILD)/readme.c $(TEST_STAMP) | need-cc need-pkg-config
	$(call cc_test,$(call pc_test,--libs) $(RPATH_TEST))
# Static: -leventq is pinned to libeventq.a; the rest is Libs.private.
$(BUILD)/c-static/%: tests/c/%.c $(wildcard tests/c/*.h) $(TEST_STAMP) | need-cc need-pkg-config
	$(call cc_test,$(STATIC_EVENTQ))
$(BUILD)/readme.c: README.md
	@mkdir -p $(@D)
	awk '/^```c$$/ { f = 1; next } /^```$$/ { f = 0 } f' $< > $@
	@test -s $@ || { echo "error: README.md has no \`\`\`c block" >&2; exit 1; }

# Builds and runs the seed's demonstration against the installed library.
demo: $(BUILD)/examples/$(DEMO)
	$(BUILD)/examples/$(DEMO) $(DEMO_ARGS)
examples-c/$(DEMO).c:
	@echo "error: examples-c/$(DEMO).c does not exist yet: nothing to demo" >&2; exit 1
