#!/usr/bin/env python3
# SPDX-License-Identifier: MIT OR Apache-2.0
"""Shows that each loom model can fail: breaks one rule of the channel's
wake-up protocol at a time, in a copy of the sources, and runs the models
again, all of them: each mutation must make some model fail (an
assertion, or a deadlock loom reports), and every model must be made to
fail by some mutation, or it proves nothing. A mutation whose code is not
found means the code moved and this list must follow it.

usage: scripts/loom-mutations.py [NAME...]   (default: every mutation)
       scripts/loom-mutations.py --check     (only that each mutation's code
                                              is still there, once; seconds)
Environment: CARGO (default cargo), LOOM_MUTANTS_DIR (the scratch copy and
its target dir; default build/loom-mutants).
"""

import os
import re
import shutil
import subprocess
import sys

# (name, file, code, replacement). Each must make some model fail, and
# every model must be failed by some mutation. Not here: a receiver taking
# back its announcement while another receiver sleeps (the `receivers == 0`
# of `wait_for_message`): a model with two blocked receivers and a sender
# has the receivers spin on a claimed slot, and exceeds loom's branch
# limit.
MUTATIONS = [
    ("a woken receive fd is not judged: it stays down with messages pending",
     "src/chan/doorbell.rs",
     "            self.awake.store(true, Ordering::SeqCst);\n            fence(Ordering::SeqCst);\n            loop {",
     "            self.awake.store(true, Ordering::SeqCst);\n            fence(Ordering::SeqCst);\n            while ring.tail().latest().has(TAIL_CLOSED) {"),
    ("the wake judges the queue before it marks the fd awake",
     "src/chan/doorbell.rs",
     '            self.awake.store(true, Ordering::SeqCst);\n            fence(Ordering::SeqCst);\n            loop {\n                let tail = ring.tail().latest();\n                let head = ring.head().latest();\n                if recv_should_be_raised(tail, head) {\n                    self.recv.raise();\n                    bells.recv += 1;\n                    break;\n                }\n                // Judged by `tail`: if a send moved it since, judge again.\n                if ring.tail().flip_if_unchanged(tail, TAIL_RECV_RAISED) {\n                    break;\n                }\n            }\n        }\n',
     '            loop {\n                let tail = ring.tail().latest();\n                let head = ring.head().latest();\n                if recv_should_be_raised(tail, head) {\n                    self.recv.raise();\n                    bells.recv += 1;\n                    break;\n                }\n                // Judged by `tail`: if a send moved it since, judge again.\n                if ring.tail().flip_if_unchanged(tail, TAIL_RECV_RAISED) {\n                    break;\n                }\n            }\n            self.awake.store(true, Ordering::SeqCst);\n        }\n'),
    ("an emptying receive leaves the receive fd up",
     "src/chan/shared.rs",
     "self.bells.lower_recv_soon(&self.ring);",
     "{}"),
    ("bytes given back do not wake a sender blocked on the byte limit",
     "src/chan/shared.rs",
     "        if head.has(HEAD_ROOM_WANTED) && self.ring.at_low_water(0) {\n            self.room_at_low_water(head);\n        }",
     ""),
    ("the bells holder does not judge the receive fd again",
     "src/chan/doorbell.rs",
     "        if self.recv_recheck.load(Ordering::SeqCst) {\n            self.recheck_recv(ring);\n        }",
     ""),
    ("a refused receive does not lower a raised fd first (D9)",
     "src/chan/shared.rs",
     "                        if self.settle_before_refusal(tail) {\n                            continue;\n                        }\n",
     ""),
    ("a short batch receive does not settle the fd (D9)",
     "src/chan/shared.rs",
     "                Pop::Empty(tail) if sh.settle_before_refusal(tail) => continue,\n",
     ""),
    ("a refused send leaves the send fd as it is (D5, D9)",
     "src/chan/shared.rs",
     "            if sh.settle_send(Some(first.len())) {\n",
     "            if true {\n"),
    ("close does not settle the receive fd (D4, D6)",
     "src/chan/shared.rs",
     "        sh.bells.settle_recv(&sh.ring, Edge::Always);\n",
     ""),
    ("close does not settle the send fd (D5, D6)",
     "src/chan/shared.rs",
     "        sh.bells.settle_send(&sh.ring, None, Edge::Always);\n",
     ""),
    ("close does not wake blocked receivers",
     "src/chan/parking.rs",
     "        self.readable.notify_all();\n        self.writable.notify_all();",
     "        self.writable.notify_all();"),
    ("close does not wake blocked senders",
     "src/chan/parking.rs",
     "        self.readable.notify_all();\n        self.writable.notify_all();",
     "        self.readable.notify_all();"),
    ("a receive takes an empty queue for a message being written",
     "src/chan/ring.rs",
     "                    if tail.position() == pos {\n                        return Pop::Empty(tail);\n                    }",
     "                    return Pop::Empty(tail);"),
    ("a receiver hands a slot on before it has read the message",
     "src/chan/ring.rs",
     "                        let value = self.read(&slot, pos, len, take);\n                        slot.stamp.store(empty + 2 * self.cap, Ordering::Release);",
     "                        slot.stamp.store(empty + 2 * self.cap, Ordering::Release);\n                        let value = self.read(&slot, pos, len, take);"),
    ("a sender publishes a slot before it has written the message",
     "src/chan/ring.rs",
     "                        self.write(&slot, pos, msg);\n                        slot.stamp.store(empty + 1, Ordering::Release);",
     "                        slot.stamp.store(empty + 1, Ordering::Release);\n                        self.write(&slot, pos, msg);"),
    ("a send claims a slot that is still full",
     "src/chan/ring.rs",
     "            if stamp == empty {\n                match self.tail().advance(tail) {",
     "            if stamp <= empty {\n                match self.tail().advance(tail) {"),
    ("an end-of-stream report does not write the receive fd (D6)",
     "src/chan/shared.rs",
     "    pub(super) fn end_of_stream(&self) {\n        self.settle_recv(Edge::Always);",
     "    pub(super) fn end_of_stream(&self) {\n        self.settle_recv(Edge::OnRaise);"),
    ("a send does not wake an announced receiver",
     "src/chan/shared.rs",
     "        if p.saw_recv_waiters {\n            self.parking.wake_receivers(&self.ring, p.n);\n        }",
     ""),
    ("the queue at low water does not wake blocked senders",
     "src/chan/shared.rs",
     "        if flags.has(HEAD_SEND_WAITERS) {\n            self.parking.wake_senders(&self.ring);\n        }",
     ""),
    ("a receiver sleeps without announcing itself",
     "src/chan/parking.rs",
     "let tail = ring.tail().set(TAIL_RECV_WAITERS);",
     "let tail = ring.tail().latest();"),
    ("the send fd is created at the wrong level",
     "src/chan/doorbell.rs",
     "if !ring.head().latest().has(HEAD_SEND_LOWERED) {",
     "if ring.head().latest().has(HEAD_SEND_LOWERED) {"),
    ("a batch send between processes judges the receive doorbell by its first message",
     "src/chan/process/mod.rs",
     "                    saw_recv_down |= !word.has(TAIL_RECV_RAISED);\n                    n += 1;",
     "                    n += 1;"),
    ("a doorbell lock holder does not look for requests after letting go",
     "src/chan/process/bells.rs",
     "            if requests.load(Ordering::SeqCst) == 0 {\n                break;\n            }",
     "            break;"),
    ("a refused call between processes whose request another holder took asks for no edge (D9)",
     "src/chan/process/bells.rs",
     "        self.request(ring, edge);\n    }",
     "        self.request(ring, 0);\n    }"),
    ("close between processes asks for no edges (D6, D9)",
     "src/chan/process/mod.rs",
     "        self.bells.request(&self.ring, ALL);\n        true",
     "        self.bells.request(&self.ring, RECV | SEND);\n        true"),
    ("a send between processes that found the receive fd down does not raise it",
     "src/chan/process/mod.rs",
     "        if saw_recv_down {\n            self.bells.request(&self.ring, RECV);\n        }",
     ""),
    ("a receive between processes that empties the queue does not lower the fd",
     "src/chan/process/mod.rs",
     "            RecvEnd::More(_) if drained => self.bells.request(&self.ring, RECV),\n",
     ""),
    ("a survivor leaves the dead process's doorbell lock held",
     "src/chan/process/bells.rs",
     "        if held != 0 && held != self.me {\n            let _ = lock.compare_exchange(held, 0, Ordering::SeqCst, Ordering::SeqCst);\n        }",
     ""),
    ("a survivor does not make the fds match their flags",
     "src/chan/process/bells.rs",
     "                self.resync(ring);\n",
     ""),
]

# The model files, each run whole for every mutation.
TESTS = ["loom", "loom_shared"]

COPY = ["src", "capi", "tests", "benches", "examples", "include", "Cargo.toml", "Cargo.lock", "build.rs", "cbindgen.toml", "README.md"]


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    work = os.path.abspath(os.environ.get("LOOM_MUTANTS_DIR", os.path.join(root, "build", "loom-mutants")))
    cargo = os.environ.get("CARGO", "cargo")
    chosen = sys.argv[1:]
    if chosen == ["--check"]:
        moved = [(name, path) for name, path, code, _ in MUTATIONS
                 if open(os.path.join(root, path)).read().count(code) != 1]
        for name, path in moved:
            print("  MOVED  %s: its code is not (once) in %s; update this script" % (name, path))
        print("%d mutation(s) in place, %d moved" % (len(MUTATIONS) - len(moved), len(moved)))
        sys.exit(1 if moved else 0)
    unknown = [c for c in chosen if c not in [m[0] for m in MUTATIONS]]
    if unknown:
        sys.exit("unknown mutation(s): %s" % ", ".join(unknown))
    models = []
    for f in TESTS:
        models += re.findall(r"#\[test\]\s*fn (\w+)", open(os.path.join(root, "tests", f + ".rs")).read())
    src = os.path.join(work, "src-copy")
    env = dict(os.environ, RUSTFLAGS="--cfg loom", CARGO_TARGET_DIR=os.path.join(work, "target"))
    shown = set()
    bad = 0
    for name, path, code, repl in MUTATIONS:
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
            bad += 1
            continue
        open(target, "w").write(text.replace(code, repl))
        cmd = [cargo, "test", "--release", "--no-fail-fast"]
        for f in TESTS:
            cmd += ["--test", f]
        cmd += ["--", "--test-threads=2"]
        run = subprocess.run(cmd, cwd=src, env=env, capture_output=True, text=True)
        out = run.stdout + run.stderr
        failed = sorted(set(re.findall(r"^test (\w+) \.\.\. FAILED", out, re.M)))
        if "test result" not in out:
            print("  BROKEN %s: the models did not run" % name)
            print("\n".join("         | " + l for l in out.strip().splitlines()[-8:]))
            bad += 1
        elif failed:
            print("  ok     %s: %s" % (name, ", ".join(failed)))
            shown.update(failed)
        else:
            print("  MISSED %s: every model still passes" % name)
            bad += 1
    if not chosen:
        for m in models:
            if m not in shown:
                print("  NEVER  %s: no mutation made it fail" % m)
                bad += 1
        print("%d of %d model(s) shown able to fail" % (len(shown & set(models)), len(models)))
    print("%d problem(s)" % bad)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
