# SPDX-License-Identifier: MIT OR Apache-2.0
# The benchmarks and their smoke stages. No timing is ever checked by a
# stage: the smoke runs use tiny counts and judge delivery only.
#
# The method every rate bench of `make bench` shares (benches/method/mod.rs
# for Rust, struct method in benches/peers/peers.h for C; docs/performance.md
# "Method"): each row runs for a time, not a count (a warm-up of a fifth of
# the row time, then a window of --row-time seconds, default 0.5); the rows
# compared with each other (one configuration) run repetition by repetition
# (--reps), in an order rotated per repetition; every ratio is taken within
# a repetition; each target is judged on the median and inter-quartile
# range of its figures (min-max below 5): met, MISSED or unsettled (the
# spread straddles the goal), one line per target in a format the benches
# share. make bench takes its repetitions as fresh processes: the driver
# benches/rounds.py runs every bench once per round, the order of the
# benches rotated per round, and judges each target on its per-round
# figures (a process keeps the mode it lands in, placement or memory
# layout, so repetitions inside one process do not sample it;
# docs/decisions/0027). Within a round a row's 0.5 s window is taken as
# BENCH_SLICES slices (default 3: --reps 3 --row-time 0.167, each after the
# whole window's warm-up, --warm 0.1; the latency rows run once, whole,
# --lat-reps 1 and --ping-reps 1), each with fresh threads and a fresh channel, and the
# process's figure is their median: a thread
# placement that lasts a window is drawn three times a round, not once
# (decision 0027, "Slices"). Before every process the driver runs
# benches/probe/line_transfer (the ns to hand a cache line between two
# threads: about 30 or about 160 on this VM, by where the hypervisor puts
# the vCPUs) and prints it beside the process and per round in the
# summary, so a round in the far phase shows (decision 0027, "Phases");
# and every bench measures the same in process just before and after each
# row (", line 41 ns, after 39 ns" on the row's progress line), since the
# phase turns within seconds. Every target on a ratio of throughput rows
# also prints its figures by phase (near, far, turned), and the driver
# judges each phase apart over the rounds ("by phase: ..." under the
# target; decision 0027, "Judging per phase").
# The standalone bench-* targets below still
# take their repetitions in one process (--reps, default 5).
#
#   make bench           BENCH_ROUNDS rounds (default 5) of bench-blocking,
#                        bench-async, bench-peers, bench-ipc and
#                        benches/side_by_side.rs, each bench a fresh process
#                        per round (BENCH_SLICES slices), built before the first
#                        round (the C programs by their rules, the cargo
#                        benches by the driver's cargo bench --no-run; the
#                        rounds run the built executables directly). The
#                        console: the plan, a line per process, then one
#                        table of every target (median and spread over the
#                        rounds, verdict, per-round figures) with the
#                        machine and its load; every process's output is
#                        kept in build/bench/rounds/<UTC stamp>/ (and
#                        summary.txt, summary.json). Then
#                        benches/footprint.rs once (the fds and resident
#                        memory of 10,000 idle channels). side_by_side:
#                        libeventq (epoll, loop and blocking paths) against
#                        crossbeam-channel, a semaphore-eventfd queue, a
#                        pipe and the seed's bare eventfd, plus idle
#                        wake-up (handshake and 1 ms idle-gap pacing) and
#                        ping-pong latency. About 12 minutes on 2 CPUs
#                        after the builds (a round about 2.2 minutes);
#                        take figures on a quiet machine.
#                        Each bench's *_ARGS below are passed to it in every
#                        round (their --reps and --row-time are the
#                        driver's);
#                        BENCH_ARGS is side_by_side's: --row-time S,
#                        --filter TEXT (rows containing TEXT; A|B either),
#                        --no-latency, --budget N (the loop rows),
#                        --low-water N[,N..] (one more epoll row per
#                        low-water mark), --send-fd (producers poll the
#                        send fd instead of blocking in send). ROUNDS_ARGS
#                        passes options to the driver (--verbose: each
#                        bench's progress on the console; --timeout S).
#                        The driver exits non-zero, naming bench and round,
#                        if a bench process failed (a delivery error).
#                        IPC_ICEORYX2=1 runs bench-ipc-iceoryx2 after it.
#   make bench-quick     make bench with --quick everywhere (BENCH_QUICK=1;
#                        async_peers: --seconds 0.2): 3 rounds (unless
#                        BENCH_ROUNDS) of 0.2 s rows, no slices, fewer latency
#                        samples; about 3 minutes after the builds; every
#                        verdict marked (quick).
#   make bench-blocking  benches/blocking.rs: the blocking single-message
#                        path (send/recv_into with Wait::Forever) against the
#                        epoll path (Wait::Never, epoll_wait on the receive
#                        fd, poll on the send fd), 1P1C, 8 B and 1 KiB, with
#                        the ratio per repetition; then the CPU per message
#                        of a mostly idle channel (a message every 5 us,
#                        50 us, 1 ms) against crossbeam's blocking calls.
#                        BLOCKING_ARGS: --reps N, --row-time S, --quick,
#                        --size BYTES, --only PATH (or idle).
#   make bench-async     benches/async_peers.rs (feature tokio): AsyncChan
#                        against tokio::sync::mpsc and flume, async tasks on
#                        a multi-thread Tokio runtime, 1P1C and 4P1C, 8 B
#                        and 1 KiB, capacity 1024, each row a 0.5 s window,
#                        repetitions interleaved; median M msg/s with
#                        min-max and the libeventq/peer ratios, the targets
#                        against mpsc judged on the spread of per-repetition
#                        ratios (met, unsettled or MISSED). About 40 s.
#                        ASYNC_ARGS: --reps N, --seconds S, --filter TEXT.
#   make bench-peers     benches/peers/*.c, built with $(CC) against the
#                        distribution's libuv, ZeroMQ, nng and GLib (found by
#                        benches/peers/configure.sh; Debian's libnng-dev has
#                        no pkg-config module, so nng is also found by a
#                        compile probe) and against libeventq's C ABI in the
#                        test install. 1P1C and 4P1C, 8-byte and 1 KiB
#                        messages, one table per configuration, with the
#                        libeventq/peer ratios of its epoll and loop rows,
#                        ending with the loop's targets. About 2 minutes. A
#                        peer library that is missing is left out, and the
#                        program says so with its apt-get line (.ci/run
#                        installs all four). PEERS_ARGS: --reps N,
#                        --row-time S, --quick, --filter TEXT.
#   make bench-ipc       benches/ipc/*.c (with benches/peers/common.c and
#                        the peers' configure.sh flags): libeventq's
#                        process-shared channel between processes against
#                        Unix SOCK_SEQPACKET, a pipe, ZeroMQ and nng over
#                        ipc://, with the in-process channel (threads) as
#                        the reference (the shared channel's consumer
#                        level-triggered, and EPOLLET in a row of its own);
#                        1P1C and 4P1C producer processes, 8-byte and 1 KiB
#                        messages; then idle-gap ping latency (one way, 1 ms
#                        gaps). About 2.5 minutes. IPC_ARGS: --reps N,
#                        --row-time S, --quick, --ping N, --filter TEXT.
#                        IPC_ICEORYX2=1 runs bench-ipc-iceoryx2 after it.
#   make bench-ipc-iceoryx2
#                        benches/ipc-iceoryx2, a crate of its own (not a
#                        dependency of libeventq's): iceoryx2's
#                        publish-subscribe against the shared channel,
#                        through their Rust APIs, the same configurations.
#                        Its first build fetches and compiles iceoryx2 from
#                        crates.io (about 90 crates, a minute or two on 2
#                        CPUs). IPC_ICEORYX2_ARGS: --reps N, --seconds S,
#                        --only TEXT.
#   make bench-ipc-wakes benches/ipc/repro/empty_wakes.c: how often a shared
#                        channel's receive fd wakes a consumer with nothing
#                        to receive, level-triggered then EPOLLET.
#                        IPC_WAKES_ARGS: N SIZE GAP_US (default 1000 8 1000).
#   make bench-go        the Go binding against what a Go program would use
#                        instead (bindings/go/internal/benchgo), each target
#                        met, MISSED or unsettled (on the inter-quartile
#                        range of its per-repetition figures), some figures
#                        only reported. Group cthread: C threads (made by C)
#                        into a goroutine through libeventq (Recv, RecvInto,
#                        RecvBatchInto) against an //export Go function
#                        sending on a Go channel and a pipe read through an
#                        *os.File; 1 and 4 threads in bursts, and p50/p99
#                        latency of one thread sending every 200 µs. Group
#                        gochan: goroutine to goroutine. cthread takes
#                        about 45 s.
#                        BENCH_GO_ARGS: -reps N, -min DURATION, -run REGEXP
#                        (a group or row, e.g. -run cthread).
#   make bench-go-micro  go test benchmarks (bindings/go/bench_test.go).
#                        GO_BENCH_ARGS (default -bench . -count 5).
#   make bench-python    thread-to-asyncio hand-off of small messages: eventq
#                        against call_soon_threadsafe + asyncio.Queue and
#                        queue.Queue through an executor. BENCH_PY_ARGS
#                        passes options, e.g. --msgs 100000.
#
# Stages (count-based, tiny, seconds): bench-rounds (benches/test_rounds.py:
# the driver against fake benches, its pooled figures and verdicts),
# bench-smoke (side_by_side --smoke: every configuration delivered
# every message intact; footprint --smoke: 100 channels, each works),
# blocking-bench-smoke (blocking --smoke), async-bench-smoke (async_peers
# --smoke: every message of every row once, whole, in order), bench-peers-smoke (peers --smoke:
# every message exactly once, whole and in order; then --selftest: faults
# injected into the streams, lost, duplicated, swapped, corrupted or short
# messages, must each be reported), bench-ipc-smoke (ipc --smoke: every
# message between the processes exactly once, whole and in order, and the
# pings).

BENCH_ARGS    ?=
BENCH_QUICK   ?= 0
QUICK_ARG   := $(if $(filter 1,$(BENCH_QUICK)),--quick)
# Rounds of make bench: every bench once per round, a fresh process each.
BENCH_ROUNDS  ?= $(if $(QUICK_ARG),3,5)
# Slices of a row's window per round (1: one repetition of the whole window).
BENCH_SLICES  ?= $(if $(QUICK_ARG),1,3)
# More options of benches/rounds.py, e.g. --verbose (each bench's progress).
ROUNDS_ARGS   ?=
BLOCKING_ARGS ?=
ASYNC_ARGS    ?=
PEERS_ARGS    ?=
GO_BENCH_ARGS ?= -bench . -count 5
BENCH_PY_ARGS ?=
PEERS_BUILD := $(BUILD)/bench-peers
PEERS_BIN   := $(PEERS_BUILD)/peers
PEERS_SRCS  := $(sort $(wildcard benches/peers/*.c))
IPC_ARGS    ?=
IPC_ICEORYX2 ?= 0
IPC_ICEORYX2_ARGS ?=
IPC_BIN     := $(BUILD)/bench-ipc/ipc
IPC_SRCS    := $(sort $(wildcard benches/ipc/*.c)) benches/peers/common.c
IPC_IOX_DIR := benches/ipc-iceoryx2
IPC_WAKES_ARGS ?= 1000 8 1000
IPC_WAKES_BIN  := $(BUILD)/bench-ipc/empty_wakes
# The machine's phase before every bench process of make bench: the ns to
# hand a cache line between two threads (benches/probe/line_transfer.c).
PROBE_BIN   := $(BUILD)/bench-probe/line_transfer

.PHONY: bench bench-quick bench-blocking bench-async bench-peers bench-ipc bench-ipc-iceoryx2 bench-ipc-wakes bench-go bench-go-micro \
        bench-python

# The C programs are built as prerequisites and the cargo benches by the
# driver, all before its first round; footprint runs once, after it.
bench: $(PEERS_BIN) $(IPC_BIN) $(PROBE_BIN) | need-cargo need-python3
	$(PYTHON3) benches/rounds.py --rounds $(BENCH_ROUNDS) $(QUICK_ARG) --cargo "$(CARGO)" \
	  --round-seconds $(if $(QUICK_ARG),50,135) \
	  --cargo-bench "blocking=--bench blocking -- $(BLOCKING_ARGS)" \
	  --cargo-bench "async_peers=--features tokio --bench async_peers -- $(ASYNC_ARGS)" \
	  --quick-args "async_peers=--seconds 0.2" \
	  --slices $(BENCH_SLICES) --probe $(PROBE_BIN) \
	  --slice-args "blocking=--warm 0.1" \
	  --slice-args "peers=--warm 0.1" \
	  --slice-args "ipc=--warm 0.1 --ping-reps 1" \
	  --slice-args "side_by_side=--warm 0.1 --lat-reps 1" \
	  --bench "peers=$(PEERS_BIN) $(PEERS_ARGS)" \
	  --bench "ipc=$(IPC_BIN) $(IPC_ARGS)" \
	  --cargo-bench "side_by_side=--bench side_by_side -- $(BENCH_ARGS)" \
	  $(ROUNDS_ARGS)
	$(CARGO) bench --bench footprint
ifeq ($(IPC_ICEORYX2),1)
	$(MAKE) bench-ipc-iceoryx2
endif

bench-quick:
	$(MAKE) bench BENCH_QUICK=1

bench-blocking: | need-cargo
	$(CARGO) bench --bench blocking -- $(QUICK_ARG) $(BLOCKING_ARGS)

bench-async: | need-cargo
	$(CARGO) bench --features tokio --bench async_peers -- $(if $(QUICK_ARG),--reps 3 --seconds 0.2) $(ASYNC_ARGS)

$(PEERS_BUILD)/cflags: FORCE | need-cc need-pkg-config
	@CC="$(CC)" PKG_CONFIG="$(PKG_CONFIG)" benches/peers/configure.sh $(PEERS_BUILD)
$(PEERS_BUILD)/libs: $(PEERS_BUILD)/cflags
$(PEERS_BIN): $(PEERS_SRCS) benches/peers/peers.h benches/peers/drain.h benches/probe/line_transfer.h $(PEERS_BUILD)/cflags \
              $(PEERS_BUILD)/libs $(TEST_STAMP) | need-cc need-pkg-config
	$(CC) $(C_STD_FLAGS) $(CFLAGS) $(call pc_test,--cflags) $$(cat $(PEERS_BUILD)/cflags) \
	  $(PEERS_SRCS) -o $@ $(call pc_test,--libs) $$(cat $(PEERS_BUILD)/libs) -lm \
	  $(RPATH_TEST) $(LDFLAGS)
bench-peers: $(PEERS_BIN)
	$(PEERS_BIN) $(QUICK_ARG) $(PEERS_ARGS)

$(PROBE_BIN): benches/probe/line_transfer.c benches/probe/line_transfer.h | need-cc
	@mkdir -p $(@D)
	$(CC) $(C_STD_FLAGS) $(CFLAGS) $< -o $@ $(LDFLAGS)

$(IPC_BIN): $(IPC_SRCS) benches/ipc/ipc.h benches/peers/peers.h benches/peers/drain.h benches/probe/line_transfer.h \
            $(PEERS_BUILD)/cflags $(PEERS_BUILD)/libs $(TEST_STAMP) | need-cc need-pkg-config
	@mkdir -p $(@D)
	$(CC) $(C_STD_FLAGS) $(CFLAGS) $(call pc_test,--cflags) $$(cat $(PEERS_BUILD)/cflags) \
	  $(IPC_SRCS) -o $@ $(call pc_test,--libs) $$(cat $(PEERS_BUILD)/libs) -lm \
	  $(RPATH_TEST) $(LDFLAGS)
bench-ipc: $(IPC_BIN)
	$(IPC_BIN) $(QUICK_ARG) $(IPC_ARGS)
ifeq ($(IPC_ICEORYX2),1)
	$(MAKE) bench-ipc-iceoryx2
endif

$(IPC_WAKES_BIN): benches/ipc/repro/empty_wakes.c $(TEST_STAMP) | need-cc need-pkg-config
	@mkdir -p $(@D)
	$(CC) $(C_STD_FLAGS) $(CFLAGS) $(call pc_test,--cflags) $< -o $@ $(call pc_test,--libs) \
	  $(RPATH_TEST) $(LDFLAGS)
bench-ipc-wakes: $(IPC_WAKES_BIN)
	$(IPC_WAKES_BIN) $(IPC_WAKES_ARGS)
	ET=1 $(IPC_WAKES_BIN) $(IPC_WAKES_ARGS)

bench-ipc-iceoryx2: | need-cargo
	$(CARGO) run --release --manifest-path $(IPC_IOX_DIR)/Cargo.toml \
	  --target-dir $(BUILD)/ipc-iceoryx2 -- $(IPC_ICEORYX2_ARGS)

bench-go: $(TEST_STAMP) | need-go
	cd $(GO_DIR) && $(GO_ENV) $(GO) run ./internal/benchgo $(BENCH_GO_ARGS)

bench-go-micro: $(TEST_STAMP) | need-go
	cd $(GO_DIR) && $(GO_ENV) $(GO) test -run '^$$' -benchmem $(GO_BENCH_ARGS)

bench-python: $(PY_VENV)/.installed $(TEST_STAMP)
	cd $(BUILD) && $(PY_ENV) $(PY) $(CURDIR)/$(PY_DIR)/bench/handoff.py $(BENCH_PY_ARGS)

# Stage: the rounds driver (benches/rounds.py) against fake benches: the
# per-round figures pooled, the verdicts, a missing round, a failing bench;
# and the phase probe builds and prints a number.
stage-bench-rounds: $(PROBE_BIN) | need-python3
	$(PYTHON3) benches/test_rounds.py
	@v=$$($(PROBE_BIN) 2000) && echo "$$v" | grep -Eq '^[0-9]+(\.[0-9]+)?$$' \
	  && echo "line_transfer: $$v ns (a number)" \
	  || { echo "line_transfer printed '$$v', not a number"; exit 1; }

# Stage: side_by_side and footprint with tiny counts.
stage-bench-smoke: | need-cargo
	$(CARGO) bench --bench side_by_side -- --smoke
	$(CARGO) bench --bench footprint -- --smoke

# Stage: blocking with tiny counts.
stage-blocking-bench-smoke: | need-cargo
	$(CARGO) bench --bench blocking -- --smoke

# Stage: async_peers with tiny counts (delivery only).
stage-async-bench-smoke: | need-cargo
	$(CARGO) bench --features tokio --bench async_peers -- --smoke

# Stage: the peer benchmark with tiny counts, then its fault self-test.
stage-bench-peers-smoke: $(PEERS_BIN)
	$(call timed,$(C_TEST_TIMEOUT)) $(PEERS_BIN) --smoke
	$(call timed,$(C_TEST_TIMEOUT)) $(PEERS_BIN) --selftest

# Stage: the benchmark between processes with tiny counts.
stage-bench-ipc-smoke: $(IPC_BIN)
	$(call timed,$(C_TEST_TIMEOUT)) $(IPC_BIN) --smoke
