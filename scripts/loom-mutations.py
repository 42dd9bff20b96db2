#!/usr/bin/env python3
# SPDX-License-Identifier: MIT OR Apache-2.0
"""Shows that each loom model can fail: breaks one rule of the channel's
wake-up protocol at a time, in a copy of the sources, and runs the models
that guard that rule, which must fail (an assertion, or a deadlock loom
reports). A mutation whose models all still pass means a model no longer
checks what it claims to; one whose code is not found means the code moved
and this list must follow it.

usage: scripts/loom-mutations.py [NAME...]   (default: every mutation)
Environment: CARGO (default cargo), LOOM_MUTANTS_DIR (the scratch copy and
its target dir; default build/loom-mutants).
"""

import os
import re
import shutil
import subprocess
import sys

# (name, file, code, replacement, models that must fail)
MUTATIONS = [
    (
        "an emptying receive leaves the receive fd up",
        "src/chan/shared.rs",
        "self.bells.lower_recv_soon(&self.ring);",
        "{}",
        ["send_and_try_recv_keep_the_doorbell_exact",
         "close_racing_sends_and_receives_keeps_the_doorbells_exact"],
    ),
    (
        "bytes given back do not wake a sender blocked on the byte limit",
        "src/chan/shared.rs",
        "        if head.has(HEAD_ROOM_WANTED) && self.ring.at_low_water(0) {\n            self.room_at_low_water(head);\n        }",
        "",
        ["a_sender_blocked_on_the_byte_limit_is_woken"],
    ),
    (
        "the bells holder does not judge the receive fd again",
        "src/chan/doorbell.rs",
        "        if self.recv_recheck.load(Ordering::SeqCst) {\n            self.recheck_recv(ring);\n        }",
        "",
        ["send_and_try_recv_keep_the_doorbell_exact",
         "two_producers_one_consumer_lose_nothing",
         "close_racing_sends_and_receives_keeps_the_doorbells_exact",
         "a_refused_receiver_gets_an_edge_for_the_next_message"],
    ),
    (
        "a refused receive does not lower a raised fd first (D9)",
        "src/chan/shared.rs",
        "                        if self.settle_before_refusal(tail) {\n                            continue;\n                        }\n",
        "",
        ["a_refused_receiver_gets_an_edge_for_the_next_message"],
    ),
    (
        "a short batch receive does not settle the fd (D9)",
        "src/chan/mod.rs",
        "                Pop::Empty(tail) if sh.settle_before_refusal(tail) => continue,\n",
        "",
        ["a_short_batch_receive_is_owed_an_edge_too"],
    ),
    (
        "a refused send does not try again when room came back (D9)",
        "src/chan/mod.rs",
        "                    if !sh.settle_send(Some(first.len())) {\n                        continue;\n                    }",
        "                    sh.settle_send(Some(first.len()));",
        ["a_refused_sender_gets_an_edge_when_room_comes"],
    ),
    (
        "close writes the receive fd only on a transition (D6, D9)",
        "src/chan/mod.rs",
        "        sh.bells.settle_recv(&sh.ring, Edge::Always);",
        "        sh.bells.settle_recv(&sh.ring, Edge::OnRaise);",
        ["close_gives_a_refused_receiver_an_edge"],
    ),
    (
        "an end-of-stream report does not write the receive fd (D6)",
        "src/chan/shared.rs",
        "    pub(super) fn end_of_stream(&self) {\n        self.settle_recv(Edge::Always);",
        "    pub(super) fn end_of_stream(&self) {\n        self.settle_recv(Edge::OnRaise);",
        ["every_end_of_stream_report_writes_the_receive_fd"],
    ),
    (
        "a send does not wake an announced receiver",
        "src/chan/shared.rs",
        "        if p.saw_recv_waiters {\n            self.parking.wake_receivers(&self.ring, p.n);\n        }",
        "",
        ["a_blocked_receiver_is_always_woken"],
    ),
    (
        "the queue at low water does not wake blocked senders",
        "src/chan/shared.rs",
        "        if flags.has(HEAD_SEND_WAITERS) {\n            self.parking.wake_senders(&self.ring);\n        }",
        "",
        ["a_blocked_sender_is_always_woken_and_the_send_doorbell_follows"],
    ),
    (
        "a receiver takes its announcement back while another sleeps",
        "src/chan/parking.rs",
        "if sleepers.receivers == 0 && ring.tail()",
        "if ring.tail()",
        ["a_receiver_that_takes_back_its_announcement_is_still_woken"],
    ),
    (
        "the send fd is created at the wrong level",
        "src/chan/doorbell.rs",
        "if !ring.head().latest().has(HEAD_SEND_LOWERED) {",
        "if ring.head().latest().has(HEAD_SEND_LOWERED) {",
        ["a_send_doorbell_created_during_traffic_starts_at_the_right_level"],
    ),
]

COPY = ["src", "tests", "benches", "examples", "include", "Cargo.toml", "Cargo.lock", "build.rs", "cbindgen.toml", "README.md"]


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    work = os.path.abspath(os.environ.get("LOOM_MUTANTS_DIR", os.path.join(root, "build", "loom-mutants")))
    cargo = os.environ.get("CARGO", "cargo")
    chosen = sys.argv[1:]
    unknown = [c for c in chosen if c not in [m[0] for m in MUTATIONS]]
    if unknown:
        sys.exit("unknown mutation(s): %s" % ", ".join(unknown))
    src = os.path.join(work, "src-copy")
    env = dict(os.environ, RUSTFLAGS="--cfg loom", CARGO_TARGET_DIR=os.path.join(work, "target"))
    caught = missed = 0
    for name, path, code, repl, models in MUTATIONS:
        if chosen and name not in chosen:
            continue
        shutil.rmtree(src, ignore_errors=True)
        os.makedirs(src)
        for item in COPY:
            s = os.path.join(root, item)
            (shutil.copytree if os.path.isdir(s) else shutil.copy)(s, os.path.join(src, item))
        target = os.path.join(src, path)
        text = open(target).read()
        if text.count(code) != 1:
            print("  MOVED  %s: its code is not (once) in %s; update this script" % (name, path))
            missed += 1
            continue
        open(target, "w").write(text.replace(code, repl))
        cmd = [cargo, "test", "--release", "--test", "loom", "--"] + models
        run = subprocess.run(cmd, cwd=src, env=env, capture_output=True, text=True)
        out = run.stdout + run.stderr
        if "error[E" in out or "could not compile" in out:
            print("  BROKEN %s: the mutant does not compile" % name)
            print(out[-2000:])
            missed += 1
            continue
        if run.returncode != 0 and "test result" not in out and "deadlock" not in out:
            print("  BROKEN %s: the models did not run" % name)
            print("\n".join("         | " + l for l in out.strip().splitlines()[-8:]))
            missed += 1
            continue
        failed = sorted(set(re.findall(r"^test (\S+) \.\.\. FAILED", out, re.M)))
        if run.returncode != 0 and failed:
            print("  ok     %s: %s fail" % (name, ", ".join(failed)))
            caught += 1
        else:
            print("  MISSED %s: %s still pass" % (name, ", ".join(models)))
            print("\n".join("         | " + l for l in out.strip().splitlines()[-8:]))
            missed += 1
    print("%d mutation(s) caught, %d missed" % (caught, missed))
    sys.exit(1 if missed else 0)


if __name__ == "__main__":
    main()
