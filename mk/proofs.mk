# SPDX-License-Identifier: MIT OR Apache-2.0
# Proof under interleavings, load, faults and bad input: loom, stress, leaks,
# sanitizers, fuzzing. The fault tests are tests/c/test_fault_*.c: stage
# c-tests runs them with the other C tests.
#
#   make loom      tests/loom.rs, tests/loom_shared.rs: model checks of the
#                  channel's wake-up protocol, in one process and between
#                  two (also stage loom)
#   make loom-mutations  scripts/loom-mutations.py: breaks one rule of the
#                  protocol at a time and reruns every model; each mutation
#                  must fail some model and every model must be failed by
#                  some mutation (about 40 minutes on 2 cores)
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
#   make crash     tests/stress/crash.c: a producer and a consumer process on
#                  a process-shared channel, one killed (SIGKILL) at a random
#                  point of every kind of call, CRASH_ROUNDS rounds; what the
#                  contract promises at a death checked from records that
#                  outlive it. `make crash-soak`: CRASH_SOAK_ROUNDS (10,000)
#   make hostile   tests/stress/hostile.c: a well-behaved process against a
#                  hostile one that rewrites the shared memory and forges
#                  handovers, HOSTILE_SESSIONS sessions. The library bugs
#                  these and the fuzz target found are regression tests in
#                  tests/c/test_shared_findings.c (stage c-tests)
# Stages: loom, stress-smoke, leaks-smoke, fuzz-corpus (the corpus replayed
# through fuzz/driver.c under gcc's ASan+UBSan: no clang needed),
# sanitize-smoke (the C tests and a short hostile run under ASan+UBSan,
# after a self-test of sanitize.sh's skip lists), crash-smoke and
# hostile-smoke (short runs of the two above).

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
CRASH_BIN   := $(BUILD)/stress/crash
HOSTILE_BIN := $(BUILD)/stress/hostile
# Rounds and sessions of the process-shared proofs: a round or a session
# takes from a few to 50 ms on 2 busy cores.
CRASH_ROUNDS           ?= 2000
CRASH_SOAK_ROUNDS      ?= 10000
CRASH_SMOKE_ROUNDS     ?= 400
HOSTILE_SESSIONS       ?= 2000
HOSTILE_SMOKE_SESSIONS ?= 150
CRASH_ARGS             ?=
HOSTILE_ARGS           ?=
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
SAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
# What scripts/sanitize.sh is told of the build (it takes no make variables).
SANITIZE_ENV = CC="$(CC)" CARGO="$(CARGO)" BUILD="$(BUILD)" PREFIX="$(TEST_PREFIX)" \
               NATIVE_LIBS="$$(cat $(NATIVE_LIBS))" VALGRIND="$(VALGRIND)"

.PHONY: loom loom-mutations stress leaks sanitize fuzz fuzz-merge fuzz-driver \
        crash crash-soak hostile

# Stage: loom model checks of the channel's wake-up protocol (tests/loom.rs,
# and between processes tests/loom_shared.rs), built with --cfg loom in a
# target dir of their own. Optimised: loom runs the models' code many
# thousands of times, and a debug build is ~20x slower.
stage-loom loom: | need-cargo need-python3
	$(PYTHON3) scripts/loom-mutations.py --check
	RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=$(CARGO_TARGET_DIR)/loom \
	  $(CARGO) test --release --test loom --test loom_shared

loom-mutations: | need-cargo need-python3
	CARGO="$(CARGO)" LOOM_MUTANTS_DIR=$(CURDIR)/$(BUILD)/loom-mutants $(PYTHON3) scripts/loom-mutations.py

$(STRESS_BIN) $(LEAKS_BIN) $(CRASH_BIN) $(HOSTILE_BIN): $(BUILD)/stress/%: tests/stress/%.c \
    $(wildcard tests/stress/*.h) $(TEST_STAMP) | need-cc need-pkg-config
	$(call cc_test,$(STATIC_EVENTQ))

stress: $(STRESS_BIN)
	$(call timed,$(STRESS_TIMEOUT)) $(STRESS_BIN) -n $(STRESS_MESSAGES) $(STRESS_ARGS)
	$(call timed,$(STRESS_TIMEOUT)) $(STRESS_BIN) -B -n $(STRESS_BLOCKING_MESSAGES) $(STRESS_ARGS)

# Stage: a short stress run of each kind.
stage-stress-smoke: $(STRESS_BIN)
	$(call timed,$(C_TEST_TIMEOUT)) $(STRESS_BIN) -q -n $(STRESS_SMOKE_MESSAGES)
	$(call timed,$(C_TEST_TIMEOUT)) $(STRESS_BIN) -q -B -n $(STRESS_SMOKE_BLOCKING_MESSAGES)

# The process-shared channel between real processes: deaths and a hostile peer.
crash: $(CRASH_BIN)
	$(call timed,$(STRESS_TIMEOUT)) $(CRASH_BIN) -n $(CRASH_ROUNDS) $(CRASH_ARGS)
crash-soak: $(CRASH_BIN)
	$(call timed,$(STRESS_TIMEOUT)) $(CRASH_BIN) -n $(CRASH_SOAK_ROUNDS) $(CRASH_ARGS)
hostile: $(HOSTILE_BIN)
	$(call timed,$(STRESS_TIMEOUT)) $(HOSTILE_BIN) -n $(HOSTILE_SESSIONS) $(HOSTILE_ARGS)

# Stages: short runs of each.
stage-crash-smoke: $(CRASH_BIN)
	$(call timed,$(C_TEST_TIMEOUT)) $(CRASH_BIN) -q -n $(CRASH_SMOKE_ROUNDS)
stage-hostile-smoke: $(HOSTILE_BIN)
	$(call timed,$(C_TEST_TIMEOUT)) $(HOSTILE_BIN) -q -n $(HOSTILE_SMOKE_SESSIONS)

# memcheck counts definite and indirect leaks; "possibly lost" is left out:
# std keeps one 48-byte handle of the main thread (std::thread::current(),
# first called by eventq_source_remove) in TLS through an interior pointer.
leaks: $(LEAKS_BIN)
	$(call timed,$(STRESS_TIMEOUT)) $(LEAKS_BIN) -n $(LEAKS_N)
	@if command -v $(VALGRIND) >/dev/null 2>&1; then \
	  echo "valgrind memcheck, $(LEAKS_VALGRIND_N) of each (every allocation, Rust's included, through malloc):"; \
	  $(call timed,$(STRESS_TIMEOUT)) $(VALGRIND) -q --error-exitcode=86 --leak-check=full \
	    --show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect \
	    $(LEAKS_BIN) -n $(LEAKS_VALGRIND_N) && echo "valgrind: no leak, no invalid access"; \
	else echo "valgrind is missing: the memcheck run of leaks is skipped (apt-get install valgrind)"; fi

# Stage: a short leaks run.
stage-leaks-smoke: $(LEAKS_BIN)
	$(call timed,$(C_TEST_TIMEOUT)) $(LEAKS_BIN) -n $(LEAKS_SMOKE_N)

# The fuzz target through the plain driver, with gcc's ASan+UBSan when the
# compiler has them (the driver needs no libFuzzer and no clang).
$(FUZZ_DRIVER): fuzz/fuzz_abi.c fuzz/fuzz_shared.h fuzz/driver.c $(TEST_STAMP) | need-cc need-pkg-config
	@mkdir -p $(@D)
	@if echo 'int main(void){return 0;}' | $(CC) $(SAN_FLAGS) -x c - -o $@.probe 2>/dev/null; then \
	  rm -f $@.probe; san="$(SAN_FLAGS)"; \
	else echo "note: $(CC) has no ASan/UBSan: the corpus runs without them"; san=; fi; \
	echo "$(CC) $(C_STD_FLAGS) -O1 -g $$san ... fuzz/fuzz_abi.c fuzz/driver.c -o $@"; \
	$(CC) $(C_STD_FLAGS) -O1 -g $$san $(call pc_test,--cflags) fuzz/fuzz_abi.c fuzz/driver.c -o $@ \
	  $(STATIC_EVENTQ) $(LDFLAGS)
fuzz-driver: $(FUZZ_DRIVER)

# Stage: fuzz/corpus replayed through the driver.
stage-fuzz-corpus: $(FUZZ_DRIVER)
	@test -d $(FUZZ_CORPUS) || { echo "error: $(FUZZ_CORPUS) is missing" >&2; exit 1; }
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
	  $(call timed,$(C_TEST_TIMEOUT)) $(FUZZ_DRIVER) $(FUZZ_CORPUS)

sanitize: $(TEST_STAMP) | need-cc need-cargo
	$(SANITIZE_ENV) scripts/sanitize.sh --selftest
	$(SANITIZE_ENV) scripts/sanitize.sh

# Stage: that the skip lists of sanitize.sh are honoured, then the C tests
# under ASan+UBSan.
stage-sanitize-smoke: $(TEST_STAMP) | need-cc
	$(SANITIZE_ENV) scripts/sanitize.sh --selftest
	$(SANITIZE_ENV) scripts/sanitize.sh --smoke

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
