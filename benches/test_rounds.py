#!/usr/bin/env python3
# SPDX-License-Identifier: MIT OR Apache-2.0
"""The rounds driver (benches/rounds.py) against fake benches: each fake
prints the target lines chosen for the round it is in (EVENTQ_BENCH_ROUND)
and logs how it was called. Checks the pooled medians and spreads, the
verdicts, the rotation, a target missing from a round, a failing and a hung
bench. No timing is checked (the hung bench's --timeout is a watchdog)."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROUNDS = os.path.join(HERE, "rounds.py")

FAKE = r'''
import json, os, signal, sys
spec = json.load(open(sys.argv[1]))
rnd = os.environ["EVENTQ_BENCH_ROUND"]
with open(spec["log"], "a") as f:
    f.write(json.dumps([spec["name"], int(rnd), sys.argv[2:]]) + "\n")
print("fake bench %s, a table line that is not a target" % spec["name"])
sys.stderr.write("fake %s: progress of round %s\n" % (spec["name"], rnd))
for line in spec["lines"].get(rnd, []):
    print(line)
sys.stdout.flush()
if rnd in spec.get("hang", []):
    signal.pause()
if rnd in spec.get("orphan", []):
    import subprocess
    # a child that outlives the bench, holding its stdout and stderr
    p = subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()"])
    with open(spec["log"] + ".orphan", "w") as f:
        f.write(str(p.pid))
sys.exit(spec.get("exit", {}).get(rnd, 0))
'''


def tline(what, cmp, goal, unit, fig):
    """A target line as the benches print it with --reps 1; fig None:
    not measured."""
    head = "target %s %s %s%s:" % (what, cmp, goal, unit)
    if fig is None:
        return "%-92s not measured" % head
    f = "%.1f" % fig if unit == "%" else "%.2f" % fig
    return "%-92s median %s%s (min-max %s-%s%s, 1 rep): met" % (head, f, unit, f, f, unit)


class Fakes:
    def __init__(self, tmp):
        self.tmp = tmp
        self.script = os.path.join(tmp, "fake.py")
        with open(self.script, "w") as f:
            f.write(FAKE)
        self.log = os.path.join(tmp, "calls.log")

    def bench(self, name, per_round, exit=None, hang=None, orphan=None):
        """per_round: {round: [lines]}. Returns the --bench option."""
        spec = os.path.join(self.tmp, name + ".json")
        with open(spec, "w") as f:
            json.dump(
                {
                    "name": name,
                    "log": self.log,
                    "lines": {str(k): v for k, v in per_round.items()},
                    "exit": {str(k): v for k, v in (exit or {}).items()},
                    "hang": [str(k) for k in (hang or [])],
                    "orphan": [str(k) for k in (orphan or [])],
                },
                f,
            )
        return ["--bench", "%s=%s %s %s --own-arg" % (name, sys.executable, self.script, spec)]

    def calls(self):
        with open(self.log) as f:
            return [json.loads(l) for l in f]


def series(what, cmp, goal, unit, figs):
    """{round: [line]} for one target, figs[i] in round i+1; a figure
    "skip" leaves the line out of that round."""
    return {i + 1: [] if x == "skip" else [tline(what, cmp, goal, unit, x)] for i, x in enumerate(figs)}


def merge(*ds):
    out = {}
    for d in ds:
        for k, v in d.items():
            out.setdefault(k, []).extend(v)
    return out


class RoundsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory(prefix="rounds-test.")
        self.tmp = self.dir.name
        self.out = os.path.join(self.tmp, "out")

    def tearDown(self):
        self.dir.cleanup()

    def run_driver(self, args, rounds):
        p = subprocess.run(
            [sys.executable, ROUNDS, "--rounds", str(rounds), "--out", self.out] + args,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            universal_newlines=True,
            timeout=300,  # a watchdog, not a measurement
        )
        summary = None
        path = os.path.join(self.out, "summary.json")
        if os.path.exists(path):
            with open(path) as f:
                summary = json.load(f)
        return p.returncode, p.stdout, summary

    def target(self, summary, what):
        hits = [t for t in summary["targets"] if t["what"] == what]
        self.assertEqual(len(hits), 1, what)
        return hits[0]

    def test_pooled_spreads_and_verdicts(self):
        fk = Fakes(self.tmp)
        lines = merge(
            # sorted 0.85 0.90 0.95 1.00 1.10: IQR 0.90-1.00
            series("A met", ">=", "0.8", "x", [0.9, 1.0, 0.85, 0.95, 1.1]),
            series("A missed", ">=", "1", "x", [0.5, 0.7, 0.6, 0.9, 0.8]),
            series("A straddles", ">=", "1", "x", [0.9, 1.1, 0.95, 1.2, 1.05]),
            # min-max would straddle; the IQR (1.20-1.30) meets it
            series("A iqr not min-max", ">=", "1", "x", [0.5, 1.2, 1.3, 1.25, 1.4]),
            series("A at-most pct", "<=", "10", "%", [0.4, 1.0, 12.0, 0.7, 0.5]),
            series("A at-most missed", "<=", "1.2", "x", [1.3, 1.5, 1.4, 1.25, 1.35]),
            series("A at-most straddles", "<=", "1.2", "x", [1.1, 1.3, 1.0, 1.25, 1.15]),
            # on the goal: met both ways
            series("A edge at-least", ">=", "0.8", "x", [0.8] * 5),
            series("A edge at-most", "<=", "1.2", "x", [1.2] * 5),
            # the better end on the goal: it meets there, so not MISSED
            series("A edge straddle at-least", ">=", "1", "x", [1.1, 0.6, 1.0, 0.5, 0.7]),
            series("A edge straddle at-most", "<=", "1.2", "x", [1.4, 1.2, 1.5, 1.0, 1.3]),
            # no line in round 3
            series("A gap", ">=", "1", "x", [2.0, 3.0, "skip", 5.0, 4.0]),
            # not measured in round 2
            series("A not measured once", ">=", "1", "x", [2.0, None, 2.0, 2.0, 2.0]),
            series("A never measured", ">=", "1", "x", [None] * 5),
        )
        # async_peers' own line format
        old = {r: ["1P1C 8 B AsyncChan vs tokio mpsc         %.2fx (%.2f-%.2f)  target >= 0.7x  met" % (x, x, x)]
               for r, x in zip(range(1, 6), [0.6, 0.65, 0.8, 0.5, 0.66])}
        rc, out, s = self.run_driver(fk.bench("a", lines) + fk.bench("b", old), 5)
        self.assertEqual(rc, 0, out)

        def check(what, med, lo, hi, verdict, n=5):
            t = self.target(s, what)
            self.assertEqual(t["verdict"], verdict, what)
            self.assertEqual(t["n"], n, what)
            self.assertAlmostEqual(t["median"], med, 9, what)
            self.assertAlmostEqual(t["lo"], lo, 9, what)
            self.assertAlmostEqual(t["hi"], hi, 9, what)
            self.assertEqual(t["iqr"], n >= 5, what)

        check("A met", 0.95, 0.9, 1.0, "met")
        check("A missed", 0.7, 0.6, 0.8, "MISSED")
        check("A straddles", 1.05, 0.95, 1.1, "unsettled")
        check("A iqr not min-max", 1.25, 1.2, 1.3, "met")
        check("A at-most pct", 0.7, 0.5, 1.0, "met")
        check("A at-most missed", 1.35, 1.3, 1.4, "MISSED")
        check("A at-most straddles", 1.15, 1.1, 1.25, "unsettled")
        check("A edge at-least", 0.8, 0.8, 0.8, "met")
        check("A edge at-most", 1.2, 1.2, 1.2, "met")
        check("A edge straddle at-least", 0.7, 0.6, 1.0, "unsettled")
        check("A edge straddle at-most", 1.3, 1.2, 1.4, "unsettled")
        # four values: min-max, the median between the middle two
        check("A gap", 3.5, 2.0, 5.0, "met", n=4)
        check("A not measured once", 2.0, 2.0, 2.0, "met", n=4)
        self.assertEqual(self.target(s, "A gap")["rounds"], [2.0, 3.0, None, 5.0, 4.0])
        self.assertEqual(self.target(s, "A never measured")["verdict"], "not measured")
        # sorted 0.50 0.60 0.65 0.66 0.80: IQR 0.60-0.66 against 0.7
        check("1P1C 8 B AsyncChan vs tokio mpsc", 0.65, 0.6, 0.66, "MISSED")

        # The console: the shared line format, the rounds, what is missing.
        self.assertRegex(out, r"target A met >= 0.8x: +median 0.95x \(IQR 0.90-1.00x, 5 rounds\): met "
                              r"\| per round: 0.90 1.00 0.85 0.95 1.10\n")
        self.assertRegex(out, r"target A gap >= 1x: +median 3.50x \(min-max 2.00-5.00x, 4 rounds\): met "
                              r"\| per round: 2.00 3.00 - 5.00 4.00; measured in 4 of 5 rounds\n")
        self.assertRegex(out, r"target A at-most pct <= 10%: +median 0.7% \(IQR 0.5-1.0%, 5 rounds\): met")
        self.assertRegex(out, r"target A never measured >= 1x: +not measured\n")
        self.assertIn("15 targets: 7 met, 3 MISSED, 4 unsettled, 1 not measured", out)
        self.assertRegex(out, r"machine: \d+ CPUs \(.*\), Linux ")
        self.assertRegex(out, r"loadavg at start: .*; at end: ")
        self.assertRegex(out, r"other processes used \d+\.\d% of the CPUs; hypervisor steal \d+\.\d%")
        # Only progress and the summary on the console; the rest in the files.
        self.assertNotIn("not a target", out)
        with open(os.path.join(self.out, "round-3-a.txt")) as f:
            saved = f.read()
        self.assertIn("a table line that is not a target", saved)
        self.assertIn("progress of round 3", saved)

        # Every bench once per round, a fresh process, --reps 1 appended
        # to its own arguments, the order rotated.
        calls = fk.calls()
        self.assertEqual([(c[0], c[1]) for c in calls],
                         [("a", 1), ("b", 1), ("b", 2), ("a", 2), ("a", 3), ("b", 3),
                          ("b", 4), ("a", 4), ("a", 5), ("b", 5)])
        for c in calls:
            self.assertEqual(c[2][-3:], ["--own-arg", "--reps", "1"])

    def test_verdict_counts_line(self):
        fk = Fakes(self.tmp)
        lines = merge(
            series("met", ">=", "1", "x", [2, 2, 2]),
            series("missed", ">=", "1", "x", [0.5, 0.6, 0.7]),
            series("unsettled", "<=", "1", "x", [0.5, 1.5, 1.0]),
            series("gone", "<=", "1", "x", [None, None, None]),
        )
        rc, out, s = self.run_driver(fk.bench("a", lines), 3)
        self.assertEqual(rc, 0, out)
        self.assertIn("4 targets: 1 met, 1 MISSED, 1 unsettled, 1 not measured", out)

    def test_interpolated_quartiles(self):
        fk = Fakes(self.tmp)
        # 1..6: q.25 at 1.25 -> 2.25, median 3.5, q.75 at 3.75 -> 4.75
        rc, out, s = self.run_driver(fk.bench("a", series("six", ">=", "2.5", "x", [6, 1, 5, 2, 4, 3])), 6)
        self.assertEqual(rc, 0, out)
        t = self.target(s, "six")
        self.assertTrue(t["iqr"])
        self.assertAlmostEqual(t["median"], 3.5)
        self.assertAlmostEqual(t["lo"], 2.25)
        self.assertAlmostEqual(t["hi"], 4.75)
        self.assertEqual(t["verdict"], "unsettled")

    def test_quick(self):
        fk = Fakes(self.tmp)
        lines = series("q", ">=", "1", "x", [2, 3])
        args = fk.bench("a", lines) + fk.bench("b", lines) + ["--quick", "--quick-args", "b=--seconds 0.2"]
        rc, out, s = self.run_driver(args, 2)
        self.assertEqual(rc, 0, out)
        self.assertTrue(s["quick"])
        for c in fk.calls():
            want = ["--quick"] if c[0] == "a" else ["--seconds", "0.2"]
            self.assertEqual(c[2][-3 - len(want):], ["--own-arg"] + want + ["--reps", "1"])
        self.assertRegex(out, r"target q >= 1x: +median 2.50x \(min-max 2.00-3.00x, 2 rounds\): met \(quick\)")

    def test_slices(self):
        fk = Fakes(self.tmp)
        lines = series("s", ">=", "1", "x", [2, 3])
        args = fk.bench("a", lines) + fk.bench("b", lines) + ["--slices", "4", "--slice-args", "b=--lat 9"]
        rc, out, s = self.run_driver(args, 2)
        self.assertEqual(rc, 0, out)
        calls = fk.calls()
        self.assertEqual(len(calls), 4)
        for c in calls:
            want = ["--reps", "4", "--row-time", "0.125"] + (["--lat", "9"] if c[0] == "b" else [])
            self.assertEqual(c[2], ["--own-arg"] + want)
        self.assertIn("--reps 4 --row-time 0.125 (4 slices of a 0.5 s window) per round", out)
        # quick: the window is 0.2 s; --window sets it; --slices 1 is --reps 1
        rc, out, s = self.run_driver(fk.bench("c", lines) + ["--quick", "--slices", "2"], 1)
        self.assertEqual(fk.calls()[-1][2], ["--own-arg", "--quick", "--reps", "2", "--row-time", "0.1"])
        rc, out, s = self.run_driver(fk.bench("d", lines) + ["--slices", "5", "--window", "2"], 1)
        self.assertEqual(fk.calls()[-1][2], ["--own-arg", "--reps", "5", "--row-time", "0.4"])
        rc, out, s = self.run_driver(fk.bench("e", lines) + ["--slices", "1", "--slice-args", "e=--x"], 1)
        self.assertEqual(fk.calls()[-1][2], ["--own-arg", "--reps", "1"])

    def test_probe(self):
        fk = Fakes(self.tmp)
        lines = series("p", ">=", "1", "x", [2, 3])
        # The probe prints 30 then 160 then fails (no number), in turn.
        state = os.path.join(self.tmp, "probe.n")
        probe = os.path.join(self.tmp, "probe.py")
        with open(probe, "w") as f:
            f.write("import sys\n"
                    "p = %r\n"
                    "try: n = int(open(p).read())\n"
                    "except OSError: n = 0\n"
                    "open(p, 'w').write(str(n + 1))\n"
                    "if n %% 3 == 2: sys.exit(1)\n"
                    "print([30, 160][n %% 3])\n" % state)
        args = fk.bench("a", lines) + fk.bench("b", lines) + ["--probe", "%s %s" % (sys.executable, probe)]
        rc, out, s = self.run_driver(args, 2)
        self.assertEqual(rc, 0, out)
        self.assertEqual([(p["round"], p["bench"], p["value"]) for p in s["probe"]],
                         [(1, "a", 30.0), (1, "b", 160.0), (2, "b", None), (2, "a", 30.0)])
        self.assertIn("  round 1: a 30 b 160", out)
        self.assertIn("  round 2: b ? a 30", out)
        self.assertRegex(out, r"round 1/2  a +\S+ s, 1 targets, probe 30")
        # Without --probe: no probe line, an empty list.
        rc, out, s = self.run_driver(fk.bench("c", lines), 1)
        self.assertEqual(s["probe"], [])
        self.assertNotIn("probe", out)

    def test_row_phases(self):
        fk = Fakes(self.tmp)
        rows = ["  1P1C 8 B a row: 9.00 M msg/s, 0.27 s, line %d ns" % ns for ns in (30, 40, 160, 170, 50)]
        lines = series("p", ">=", "1", "x", [2, 3])
        lines[1] = lines[1] + rows
        rc, out, s = self.run_driver(fk.bench("a", lines), 2)
        self.assertEqual(rc, 0, out)
        # Round 1 printed five row figures, round 2 none.
        self.assertEqual(s["rows_phase"], [{"round": 1, "bench": "a", "n": 5,
                                            "p25": 40.0, "p50": 50.0, "p75": 160.0}])
        self.assertRegex(out, r"round 1/2  a +\S+ s, 1 targets, rows 40/50/160 ns of 5 rows")
        self.assertIn("  round 1: a 40/50/160 ns of 5 rows", out)
        self.assertNotRegex(out, r"round 2/2  a .*rows")

    def test_phases(self):
        fk = Fakes(self.tmp)
        lines = series("(3) 1P1C 1 KiB: a / b", ">=", "1.5", "x", [3.0, 1.2, 3.1])
        lines[1].append("phases (3) 1P1C 1 KiB: a / b: near 3.0 3.1; far 1.1")
        lines[2].append("phases (3) 1P1C 1 KiB: a / b: near 3.2; far 1.2 1.0; turned 2.0")
        lines[3].append("phases (3) 1P1C 1 KiB: a / b: far 1.15")
        # A second target: two near figures, too few to judge; its phases
        # line printed twice in a round (the first counts).
        other = series("c / d", "<=", "1.2", "x", [1.0, 1.0])
        other[1] += ["phases c / d: near 1.0", "phases c / d: near 9.0"]
        other[2] += ["phases c / d: near 1.1; far 0.9 1.0 1.1"]
        rc, out, s = self.run_driver(fk.bench("a", lines) + fk.bench("b", other), 3)
        self.assertEqual(rc, 0, out)
        t = self.target(s, "(3) 1P1C 1 KiB: a / b")
        self.assertEqual(t["verdict"], "unsettled")
        self.assertEqual(t["phases"]["near"], {"n": 3, "median": 3.1, "lo": 3.0, "hi": 3.2,
                                               "iqr": False, "verdict": "met"})
        self.assertEqual((t["phases"]["far"]["n"], t["phases"]["far"]["verdict"]), (4, "MISSED"))
        self.assertEqual(t["phases"]["turned"], 1)
        self.assertIn("    by phase: near met 3.10x (min-max 3.00-3.20x, 3 slices); "
                      "far MISSED 1.12x (min-max 1.00-1.20x, 4 slices); 1 turned", out)
        t = self.target(s, "c / d")
        self.assertEqual(t["phases"]["near"], {"n": 2, "verdict": "not judged"})
        self.assertEqual(t["phases"]["far"]["verdict"], "met")
        self.assertIn("near 2 slices, not judged", out)
        self.assertIn("  2 with figures by phase, near: 1 met, 1 not judged", out)
        self.assertIn("  2 with figures by phase, far: 1 met, 1 MISSED", out)

    def test_failing_bench(self):
        fk = Fakes(self.tmp)
        good = series("good", ">=", "1", "x", [2, 3, 4])
        bad = series("bad", ">=", "1", "x", [2, 0.1, 4])
        rc, out, s = self.run_driver(fk.bench("ok", good) + fk.bench("broken", bad, exit={2: 1}), 3)
        self.assertNotEqual(rc, 0)
        self.assertIn("FAILED: broken in round 2 (exit 1)", out)
        self.assertEqual(s["failures"], [{"bench": "broken", "round": 2, "why": "exit 1"}])
        # The rest is judged; the failed process's figures are left out.
        t = self.target(s, "good")
        self.assertEqual((t["n"], t["verdict"]), (3, "met"))
        t = self.target(s, "bad")
        self.assertEqual(t["rounds"], [2.0, None, 4.0])
        self.assertEqual((t["n"], t["verdict"]), (2, "met"))
        self.assertIn("measured in 2 of 3 rounds", out)
        # Later rounds still ran.
        self.assertIn(["broken", 3], [c[:2] for c in fk.calls()])

    def test_hung_bench(self):
        fk = Fakes(self.tmp)
        rc, out, s = self.run_driver(
            fk.bench("stuck", series("x", ">=", "1", "x", [2, 2]), hang=[1]) + ["--timeout", "5"], 2)
        self.assertNotEqual(rc, 0)
        self.assertIn("FAILED: stuck in round 1 (timed out after 5 s)", out)
        self.assertEqual(self.target(s, "x")["n"], 1)

    def test_orphan_holding_stderr(self):
        fk = Fakes(self.tmp)
        rc, out, s = self.run_driver(fk.bench("forks", series("x", ">=", "1", "x", [2]), orphan=[1]), 1)
        self.assertEqual(rc, 0, out)
        self.assertEqual(self.target(s, "x")["n"], 1)
        with open(fk.log + ".orphan") as f:
            pid = int(f.read())
        # killed (a zombie until init reaps it, or gone)
        try:
            with open("/proc/%d/stat" % pid) as f:
                state = f.read().rsplit(") ", 1)[1].split()[0]
        except OSError:
            state = "gone"
        self.assertIn(state, ("Z", "X", "gone"))

    def test_usage_errors(self):
        for args in ([], ["--bench", "noequals"], ["--bench", "a=x", "--bench", "a=y"],
                     ["--bench", "a=x", "--quick-args", "b=--q"], ["--bench", "a=x", "--slice-args", "b=--q"],
                     ["--bench", "a=x", "--slices", "0"], ["--bench", "a=x", "--window", "0"]):
            p = subprocess.run([sys.executable, ROUNDS, "--out", os.path.join(self.tmp, "usage")] + args,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
            self.assertNotEqual(p.returncode, 0, args)


if __name__ == "__main__":
    unittest.main(verbosity=2)
