#!/usr/bin/env python3
# SPDX-License-Identifier: MIT OR Apache-2.0
"""rounds.py: `make bench`'s driver. Repetitions as fresh processes.

Runs R rounds (--rounds, default 5). Each round runs every bench once, each
in a fresh process with `--reps 1` (and `--quick` with --quick), the
benches' order rotated per round, so each target gets R per-process figures
spread over the whole run. A process lands in a mode (thread placement,
memory layout, a phase of the machine lasting minutes) and keeps it;
repetitions inside one process cannot sample that, processes spread over
the run can (docs/decisions/0027-repetitions-in-fresh-processes.md).

Every process's output (stdout and stderr) is kept under --out (default
build/bench/rounds/<UTC stamp>/round-N-<bench>.txt). The console gets the
plan, one progress line per process and, at the end, one table of every
target: the median of its per-round figures with the inter-quartile range
(min-max below 5 values), the verdict by the rule of benches/method/mod.rs
(`judge`: met when the whole spread meets the goal, MISSED when none of it
does, unsettled when it straddles) and the per-round figures; the same as
JSON in summary.json beside the outputs.

Benches:
  --bench NAME=COMMAND        a command line (split as by a POSIX shell),
                              run as it is plus `--reps 1` [`--quick`]
  --cargo-bench NAME=ARGS     a cargo bench: `cargo bench --no-run ARGS`
                              (the part of ARGS before a `--`) builds it
                              before round 1, and each round runs the
                              built executable directly with `--bench`,
                              the part after the `--`, `--reps 1`
                              [`--quick`], from the package's directory
  --quick-args NAME=ARGS      with --quick, ARGS instead of `--quick` for
                              that bench (a bench without a --quick)

Slices: with --slices K (K > 1) each process gets `--reps K --row-time
W/K` instead of `--reps 1`, where W is --window (default 0.5 s; 0.2 s with
--quick): a row's window in a round stays W, taken as K shorter windows,
each with fresh threads and a fresh channel, the rows interleaved slice by
slice. The process's figure is the median over its K slices. (Each
slice's warm-up is the bench's; make bench gives the benches that have one
`--warm`, the whole window's, through --slice-args.) A placement
of the threads that lasts a whole window (which CPU the consumer shares,
with whom) is drawn K times per round instead of once
(docs/decisions/0027-repetitions-in-fresh-processes.md, "Slices").
  --slice-args NAME=ARGS      with --slices, ARGS appended for that bench
                              (make bench: the whole window's --warm, and
                              the latency rows in one repetition only)

Phases: with --probe COMMAND the driver runs COMMAND (split as by a POSIX
shell) before every bench process and reads one number from its stdout:
the machine's phase at that moment (make bench: benches/probe/
line_transfer.c, the nanoseconds to hand a cache line between two
threads). The progress line and the summary show it per process, and
summary.json keeps it ("probe"); a probe that fails or prints no number
shows as '?' and stops nothing. The phase turns within seconds, so the
benches also measure it before and after every row (", line 41 ns, after
39 ns" on the row's progress line): the driver reports the quartiles of
a process's before-row figures beside it, per round in the summary, and
in summary.json ("rows_phase"). A target on a ratio of throughput rows
is followed in the bench's output by its per-repetition figures by phase
("phases WHAT: near 3.1 3.2; far 1.1; turned 2.0", by those probes); the
driver pools each phase's figures over the rounds and judges it apart
(at least 3 figures), printed under the target as "by phase: near met
...; far MISSED ...; N turned", counted under the table and kept in
summary.json ("phases" of the target). The target's own verdict stays
the one over its per-round figures.

Each process gets EVENTQ_BENCH_ROUND=N (1-based) in its environment. The
driver exits 1 (naming bench and round) if any bench process failed (a
non-zero exit: the benches fail on a delivery error; or --timeout), after
the table of the rest; a failed process's figures are left out.
"""

import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time

# `target WHAT >= 0.8x:   median 0.93x (IQR 0.90-0.97x, 5 reps): met`
# or `... not measured` (benches/method/mod.rs `verdict`, common.c twin).
TARGET = re.compile(
    r"^target (?P<what>.*) (?P<cmp>>=|<=) (?P<goal>[0-9][0-9.eE+-]*)(?P<unit>x|%):\s+"
    r"(?:(?P<nm>not measured)|median (?P<med>\S+?)(?:x|%)? \((?:IQR|min-max) [^)]*\): "
    r"(?P<verdict>met|MISSED|unsettled))"
)
# async_peers' own line (it predates the shared format):
# `1P1C 8 B AsyncChan vs tokio mpsc     1.31x (1.31-1.31)  target >= 0.7x  met`
OLD_TARGET = re.compile(
    r"^(?P<what>\S.*?)\s+(?P<med>\S+?)x \(\S+\)\s+target (?P<cmp>>=|<=) "
    r"(?P<goal>[0-9][0-9.eE+-]*)(?P<unit>x|%)\s+(?P<verdict>met|MISSED|unsettled)\s*$"
)
HEAD_WIDTH = 92
# A target's per-repetition figures by the machine's phase around their rows
# (benches/method/mod.rs `phases_line`):
# `phases WHAT: near 3.14 3.20; far 1.10; turned 2.00`
PHASES = re.compile(r"^phases (?P<what>.*): (?P<rest>(?:near|far|turned) [-0-9.eE+ ;a-z]*)$")
PHASE_NAMES = ("near", "far", "turned")
# The fewest figures a phase is judged on.
PHASE_MIN = 3


def parse_targets(text):
    """The target lines of one process's output, in order:
    [(what, cmp, goal, goal_text, unit, figure or None)]; figure None is
    `not measured`. A target printed twice keeps its first line."""
    out, seen = [], set()
    for line in text.splitlines():
        m = TARGET.match(line)
        if m:
            fig = None if m.group("nm") else _num(m.group("med"))
        else:
            m = OLD_TARGET.match(line)
            if not m:
                continue
            fig = _num(m.group("med"))
        key = (m.group("what").strip(), m.group("cmp"), m.group("goal"), m.group("unit"))
        if key in seen:
            continue
        seen.add(key)
        out.append((key[0], key[1], float(key[2]), key[2], key[3], fig))
    return out


def parse_phases(text):
    """{what: {phase: [figures]}} from a process's `phases` lines (the first
    line of a target counts)."""
    out = {}
    for line in text.splitlines():
        m = PHASES.match(line)
        if not m or m.group("what") in out:
            continue
        by = {}
        for part in m.group("rest").split(";"):
            words = part.split()
            if words and words[0] in PHASE_NAMES:
                by[words[0]] = [_num(x) for x in words[1:]]
        out[m.group("what")] = by
    return out


def _num(s):
    try:
        return float(s)
    except ValueError:
        return float("nan")


# --- The method's statistics (benches/method/mod.rs) --------------------------


def quantile(v, q):
    """The q-quantile of v, linear interpolation; NaN for none."""
    s = sorted(v)
    if not s:
        return float("nan")
    x = q * (len(s) - 1)
    i = int(x)
    if i + 1 >= len(s):
        return s[-1]
    return s[i] + (x - i) * (s[i + 1] - s[i])


def spread(v):
    """(n, iqr, median, lo, hi): the inter-quartile range, or the min-max
    below 5 values; None for no values."""
    if not v:
        return None
    iqr = len(v) >= 5
    return (
        len(v),
        iqr,
        quantile(v, 0.5),
        quantile(v, 0.25 if iqr else 0.0),
        quantile(v, 0.75 if iqr else 1.0),
    )


def judge(lo, hi, cmp, goal):
    """met, MISSED or unsettled: method/mod.rs `judge`."""
    if cmp == ">=":
        if lo >= goal:
            return "met"
        if hi < goal:
            return "MISSED"
    else:
        if hi <= goal:
            return "met"
        if lo > goal:
            return "MISSED"
    return "unsettled"


# --- The machine and its load (method/mod.rs `machine`, `Watch`) --------------


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return "?"


def cpus():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def machine():
    model = "?"
    for line in _read("/proc/cpuinfo").splitlines():
        if line.startswith("model name") and ":" in line:
            model = line.split(":", 1)[1].strip()
            break
    return "%d CPUs (%s), Linux %s" % (cpus(), model, _read("/proc/sys/kernel/osrelease"))


def cpu_ticks():
    """(busy ticks of the machine, steal ticks, ticks of this process and
    its waited-for children: the benches)."""
    try:
        f = [int(x) for x in _read("/proc/stat").splitlines()[0].split()[1:]]
        busy = f[0] + f[1] + f[2] + f[5] + f[6]
        rest = _read("/proc/self/stat").rsplit(") ", 1)[1].split()
        # utime stime cutime cstime: fields 14-17, at 11-14 after the comm.
        own = sum(int(x) for x in rest[11:15])
        return busy, f[7], own
    except (IndexError, ValueError):
        return None


def load1():
    s = _read("/proc/loadavg")
    try:
        return float(s.split()[0]), s
    except (IndexError, ValueError):
        return float("nan"), s


class Watch:
    """The load around the rounds: load average at the start (before the
    build) and the end; other processes' share of the CPUs and steal
    between start_ticks and stop."""

    def __init__(self):
        self.load_start, self.load_start_s = load1()
        self.ticks, self.t0 = None, None

    def start_ticks(self):
        self.ticks, self.t0 = cpu_ticks(), time.monotonic()

    def stop(self):
        secs = time.monotonic() - self.t0
        b = cpu_ticks()
        lines = [
            "loadavg at start: %s; at end: %s (the end includes this run's own load)"
            % (self.load_start_s, load1()[1])
        ]
        if self.ticks is None or b is None or secs <= 0:
            lines.append("(/proc/stat unreadable: CPU use by other processes unknown)")
            return lines
        total = secs * os.sysconf("SC_CLK_TCK") * cpus()
        others = max(0, (b[0] - self.ticks[0]) - (b[2] - self.ticks[2])) / total
        steal = (b[1] - self.ticks[1]) / total
        lines.append(
            "during the run, other processes used %.1f%% of the CPUs; hypervisor steal %.1f%%"
            % (others * 100, steal * 100)
        )
        if not (self.load_start < 1.0 and others < 0.05 and steal < 0.05):
            lines.append(
                "WARNING: the machine was not quiet (load at start >= 1.0, or others/steal >= 5%): "
                "figures are not from a quiet machine"
            )
        return lines


# --- Running ------------------------------------------------------------------


def say(*a):
    print(*a, flush=True)


def mmss(secs):
    secs = int(round(secs))
    return "%d:%02d" % (secs // 60, secs % 60)


class Bench:
    def __init__(self, name, argv=None, cargo_args=None, cwd=None):
        self.name, self.argv, self.cargo_args, self.cwd = name, argv, cargo_args, cwd
        self.quick_args = None  # None: `--quick`
        self.slice_args = []


def split_spec(spec, opt):
    name, sep, rest = spec.partition("=")
    if not sep or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise SystemExit("rounds.py: %s NAME=..., got %r" % (opt, spec))
    return name, shlex.split(rest)


def cargo_build(cargo, bench):
    """Builds a cargo bench; sets its argv to the executable's."""
    args = bench.cargo_args
    cut = args.index("--") if "--" in args else len(args)
    cargo_part, bench_part = args[:cut], args[cut + 1 :]
    want = None
    for i, a in enumerate(cargo_part):
        if a == "--bench" and i + 1 < len(cargo_part):
            want = cargo_part[i + 1]
    cmd = [cargo, "bench", "--no-run", "--message-format=json-render-diagnostics"] + cargo_part
    say("build: %s" % " ".join(shlex.quote(c) for c in cmd))
    p = subprocess.run(cmd, stdout=subprocess.PIPE, universal_newlines=True)
    if p.returncode != 0:
        raise SystemExit("rounds.py: building %s failed (exit %d)" % (bench.name, p.returncode))
    found = []
    for line in p.stdout.splitlines():
        try:
            d = json.loads(line)
        except ValueError:
            continue
        t = d.get("target") or {}
        if d.get("reason") == "compiler-artifact" and d.get("executable") and "bench" in t.get("kind", []):
            if want is None or t.get("name") == want:
                found.append((d["executable"], os.path.dirname(d.get("manifest_path", "")) or None))
    if len(found) != 1:
        raise SystemExit(
            "rounds.py: %s: expected one bench executable from cargo, found %d" % (bench.name, len(found))
        )
    exe, bench.cwd = found[0]
    # What `cargo bench` passes to a bench program, then its own arguments.
    bench.argv = [exe, "--bench"] + bench_part


def run_probe(argv):
    """The probe's number, or None (it failed, hung or printed none)."""
    try:
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                           universal_newlines=True, timeout=30)  # a watchdog
    except (OSError, subprocess.TimeoutExpired):
        return None
    if p.returncode != 0:
        return None
    try:
        return float(p.stdout.split()[0])
    except (IndexError, ValueError):
        return None


def fmt_probe(x):
    return "?" if x is None else "%g" % x


# A row's own phase, measured by the bench just before the row (", line 41 ns").
ROW_PHASE = re.compile(r", line (\d+(?:\.\d+)?) ns\b")


def row_phases(text):
    """The quartiles of the phase figures on a process's row lines:
    {"n", "p25", "p50", "p75"}, or None for a process that printed none."""
    v = [float(m.group(1)) for m in map(ROW_PHASE.search, text.splitlines()) if m]
    if not v:
        return None
    return {"n": len(v), "p25": quantile(v, 0.25), "p50": quantile(v, 0.5), "p75": quantile(v, 0.75)}


def fmt_rows(r):
    return "%.0f/%.0f/%.0f ns of %d rows" % (r["p25"], r["p50"], r["p75"], r["n"])


def window(opts):
    return opts.window if opts.window is not None else (0.2 if opts.quick else 0.5)


def slice_args(opts, bench):
    """What makes one process one round of a bench: one repetition, or
    --slices repetitions that share the round's window."""
    if opts.slices == 1:
        return ["--reps", "1"]
    return ["--reps", str(opts.slices), "--row-time", "%g" % (window(opts) / opts.slices)] + bench.slice_args


def per_process(opts):
    """slice_args in words, for the plan and the summary."""
    if opts.slices == 1:
        return "--reps 1"
    return "%s (%d slices of a %g s window)" % (
        " ".join(slice_args(opts, Bench("-"))), opts.slices, window(opts))


class Runner:
    def __init__(self, opts, benches, out):
        self.opts, self.benches, self.out = opts, benches, out
        self.child = None

    def run_one(self, rnd, bench):
        """Runs one process; returns (exit code or None for a timeout,
        seconds, output text)."""
        argv = list(bench.argv)
        if self.opts.quick:
            argv += ["--quick"] if bench.quick_args is None else bench.quick_args
        argv += slice_args(self.opts, bench)
        path = os.path.join(self.out, "round-%d-%s.txt" % (rnd, bench.name))
        env = dict(os.environ, EVENTQ_BENCH_ROUND=str(rnd))
        t0 = time.monotonic()
        with open(path, "w") as f:
            f.write("$ %s\n" % " ".join(shlex.quote(a) for a in argv))
        with open(path, "ab") as f:
            # stdout straight to the file; stderr (progress) through us, to
            # the same file (both appending), and to the console with
            # --verbose.
            self.child = subprocess.Popen(
                argv,
                stdout=f,
                stderr=subprocess.PIPE,
                cwd=bench.cwd,
                env=env,
                start_new_session=True,
            )
            pump = threading.Thread(target=self._pump, args=(self.child.stderr, f, bench.name))
            pump.start()
            try:
                rc = self.child.wait(timeout=self.opts.timeout)
            except subprocess.TimeoutExpired:
                rc = None
            finally:
                # Also on Ctrl-C: the bench is in a session of its own.
                self.kill()
                self.child.wait()
                pump.join(5)
                if pump.is_alive():
                    # Something the bench forked outlived it, holding its
                    # stderr: its session's processes go too.
                    try:
                        os.killpg(self.child.pid, signal.SIGKILL)
                    except OSError:
                        pass
                    pump.join()
                self.child = None
        secs = time.monotonic() - t0
        with open(path, "rb") as f:
            text = f.read().decode("utf-8", "replace")
        return rc, secs, text

    def _pump(self, pipe, f, name):
        for line in iter(pipe.readline, b""):
            f.write(line)
            f.flush()
            if self.opts.verbose:
                sys.stdout.write("  %s| %s" % (name, line.decode("utf-8", "replace")))
                sys.stdout.flush()
        pipe.close()

    def kill(self):
        """Kills a bench that is still running, and what it forked."""
        c = self.child
        if c is not None and c.poll() is None:
            try:
                os.killpg(c.pid, signal.SIGKILL)
            except OSError:
                pass


def fmt_fig(x, unit):
    return "%.*f" % (1 if unit == "%" else 2, x)


def judge_phases(per_phase, cmp, goal, unit):
    """A target's verdict in each phase, on its figures pooled over the
    rounds: (text, {phase: record}), or None when it has no phase figures."""
    if not any(per_phase.values()):
        return None
    parts, rec = [], {}
    for ph in ("near", "far"):
        v = per_phase.get(ph, [])
        if len(v) < PHASE_MIN:
            parts.append("%s %d slice%s, not judged" % (ph, len(v), "" if len(v) == 1 else "s"))
            rec[ph] = {"n": len(v), "verdict": "not judged"}
            continue
        n, iqr, med, lo, hi = spread(v)
        verdict = judge(lo, hi, cmp, goal)
        parts.append("%s %s %s%s (%s %s-%s%s, %d slices)" % (
            ph, verdict, fmt_fig(med, unit), unit, "IQR" if iqr else "min-max",
            fmt_fig(lo, unit), fmt_fig(hi, unit), unit, n))
        rec[ph] = {"n": n, "median": med, "lo": lo, "hi": hi, "iqr": iqr, "verdict": verdict}
    turned = len(per_phase.get("turned", []))
    rec["turned"] = turned
    return "    by phase: %s; %d turned" % ("; ".join(parts), turned), rec


def summarize(benches, results, rounds, quick, phases=None):
    """results[bench name][round] = parsed targets (failed processes
    absent); phases[bench name][round] = parsed phases lines. Returns
    (lines, records)."""
    lines, records = [], []
    phases = phases or {}
    for b in benches:
        per_round = results.get(b.name, {})
        # Every round's phase figures of each target, pooled.
        pooled = {}
        for rnd in sorted(phases.get(b.name, {})):
            for what, by in phases[b.name][rnd].items():
                for ph, v in by.items():
                    pooled.setdefault(what, {}).setdefault(ph, []).extend(v)
        keys, figs = [], {}
        for rnd in range(1, rounds + 1):
            for what, cmp, goal, goal_s, unit, fig in per_round.get(rnd, []):
                key = (what, cmp, goal_s, unit)
                if key not in figs:
                    keys.append(key)
                    figs[key] = (goal, [None] * rounds)
                if fig is not None:
                    figs[key][1][rnd - 1] = fig
        lines.append("-- %s (%d targets) --" % (b.name, len(keys)))
        for key in keys:
            what, cmp, goal_s, unit = key
            goal, per = figs[key]
            vals = [v for v in per if v is not None]
            s = spread(vals)
            head = "target %s %s %s%s:" % (what, cmp, goal_s, unit)
            rec = {
                "bench": b.name,
                "what": what,
                "cmp": cmp,
                "goal": goal,
                "unit": unit,
                "rounds": per,
                "n": len(vals),
            }
            if s is None:
                lines.append("%-*s not measured" % (HEAD_WIDTH, head))
                rec.update(verdict="not measured")
                records.append(rec)
                continue
            n, iqr, med, lo, hi = s
            v = judge(lo, hi, cmp, goal)
            rec.update(median=med, lo=lo, hi=hi, iqr=iqr, verdict=v)
            records.append(rec)
            fewer = "" if n == rounds else "; measured in %d of %d rounds" % (n, rounds)
            lines.append(
                "%-*s median %s%s (%s %s-%s%s, %d round%s): %s%s | per round: %s%s"
                % (
                    HEAD_WIDTH,
                    head,
                    fmt_fig(med, unit),
                    unit,
                    "IQR" if iqr else "min-max",
                    fmt_fig(lo, unit),
                    fmt_fig(hi, unit),
                    unit,
                    n,
                    "" if n == 1 else "s",
                    v,
                    " (quick)" if quick else "",
                    " ".join("-" if x is None else fmt_fig(x, unit) for x in per),
                    fewer,
                )
            )
            by_phase = judge_phases(pooled.get(what, {}), cmp, goal, unit)
            if by_phase:
                lines.append(by_phase[0])
                rec["phases"] = by_phase[1]
    return lines, records


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Runs every bench in fresh processes, round by round, and judges the targets "
        "on the per-round figures.",
        epilog="See the module docstring (the top of this file) for the details.",
    )
    ap.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    ap.add_argument("--quick", action="store_true", help="pass --quick to every bench")
    # One list, so the benches keep the order given.
    ap.add_argument("--bench", dest="specs", action="append", default=[], metavar="NAME=COMMAND",
                    type=lambda s: ("--bench", s))
    ap.add_argument("--cargo-bench", dest="specs", action="append", metavar="NAME=CARGO_ARGS[ -- ARGS]",
                    type=lambda s: ("--cargo-bench", s))
    ap.add_argument("--quick-args", action="append", default=[], metavar="NAME=ARGS")
    ap.add_argument("--probe", metavar="COMMAND",
                    help="run before every bench process; its number is reported as the machine's phase")
    ap.add_argument("--slice-args", action="append", default=[], metavar="NAME=ARGS")
    ap.add_argument("--slices", type=int, default=1,
                    help="repetitions per process sharing a row's window (default 1)")
    ap.add_argument("--window", type=float,
                    help="a row's window per round in seconds, with --slices (default 0.5; quick 0.2)")
    ap.add_argument("--cargo", default=os.environ.get("CARGO", "cargo"), help="cargo (default $CARGO or cargo)")
    ap.add_argument("--out", help="where the outputs go (default build/bench/rounds/<UTC stamp>)")
    ap.add_argument("--round-seconds", type=float, help="the caller's estimate of one round")
    ap.add_argument("--timeout", type=float, default=900, help="seconds before a bench process counts as hung")
    ap.add_argument("--verbose", "-v", action="store_true", help="pass each bench's stderr through")
    opts = ap.parse_args(argv)
    if opts.rounds < 1 or opts.rounds > 50:
        ap.error("--rounds 1..50")
    if opts.slices < 1 or opts.slices > 50:
        ap.error("--slices 1..50")
    if opts.window is not None and not 0 < opts.window <= 60:
        ap.error("--window: seconds, 0 < S <= 60")

    benches = []
    for opt, spec in opts.specs:
        name, args = split_spec(spec, opt)
        if not args:
            ap.error("%s %s: nothing to run" % (opt, name))
        if opt == "--bench":
            benches.append(Bench(name, argv=args))
        else:
            benches.append(Bench(name, cargo_args=args))
    if not benches:
        ap.error("no bench given (--bench or --cargo-bench)")
    if len({b.name for b in benches}) != len(benches):
        ap.error("two benches of one name")
    # Per-bench extra arguments: (option, its specs, the Bench field set).
    for opt, specs, field in (("--quick-args", opts.quick_args, "quick_args"),
                              ("--slice-args", opts.slice_args, "slice_args")):
        for spec in specs:
            name, args = split_spec(spec, opt)
            match = [b for b in benches if b.name == name]
            if not match:
                ap.error("%s %s: no such bench" % (opt, name))
            setattr(match[0], field, args)

    watch = Watch()
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = opts.out or os.path.join("build", "bench", "rounds", stamp)
    os.makedirs(out, exist_ok=True)
    names = [b.name for b in benches]
    say(
        "rounds: %d rounds x %d benches (%s), each bench a fresh process with %s%s, "
        "the order rotated per round; %s"
        % (
            opts.rounds,
            len(benches),
            ", ".join(names),
            per_process(opts),
            " --quick" if opts.quick else "",
            "expect about %d minutes after the build (a round about %g s)"
            % (max(1, round(opts.round_seconds * opts.rounds / 60)), opts.round_seconds)
            if opts.round_seconds
            else "the time to expect is printed after round 1",
        )
    )
    say("outputs: %s" % out)
    for b in benches:
        if b.cargo_args is not None:
            cargo_build(opts.cargo, b)

    # make passes a Ctrl-C on as SIGINT; a kill is SIGTERM or SIGHUP: each
    # stops the bench running (in a session of its own) and ends with the
    # summary of the rounds so far.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)
    runner = Runner(opts, benches, out)
    probe_argv = shlex.split(opts.probe) if opts.probe else None
    results, failures, probes = {}, [], []  # probes: (round, bench, number or None)
    rows = []  # (round, bench, row_phases)
    phases = {}  # bench name: {round: parse_phases}
    watch.start_ticks()
    t_start = time.monotonic()
    interrupted = False
    try:
        for rnd in range(1, opts.rounds + 1):
            t_round = time.monotonic()
            for i in range(len(benches)):
                b = benches[(i + rnd - 1) % len(benches)]
                sys.stdout.write("round %d/%d  %-14s " % (rnd, opts.rounds, b.name))
                sys.stdout.flush()
                probe = ""
                if probe_argv:
                    x = run_probe(probe_argv)
                    probes.append((rnd, b.name, x))
                    probe = ", probe %s" % fmt_probe(x)
                rc, secs, text = runner.run_one(rnd, b)
                row_ph = row_phases(text)
                if row_ph:
                    rows.append((rnd, b.name, row_ph))
                    probe += ", rows %s" % fmt_rows(row_ph)
                if rc == 0:
                    targets = parse_targets(text)
                    results.setdefault(b.name, {})[rnd] = targets
                    phases.setdefault(b.name, {})[rnd] = parse_phases(text)
                    say("%6.1f s, %d targets%s" % (secs, len(targets), probe))
                else:
                    if rc is None:
                        why = "timed out after %g s" % opts.timeout
                    elif rc < 0:
                        why = "killed by signal %d" % -rc
                    else:
                        why = "exit %d" % rc
                    failures.append((b.name, rnd, why))
                    say("%6.1f s, FAILED (%s; output in round-%d-%s.txt)%s" % (secs, why, rnd, b.name, probe))
            done = time.monotonic() - t_start
            if rnd < opts.rounds:
                left = done / rnd * (opts.rounds - rnd)
                say(
                    "round %d took %s; about %s to go (ends near %s UTC)"
                    % (
                        rnd,
                        mmss(time.monotonic() - t_round),
                        mmss(left),
                        time.strftime("%H:%M", time.gmtime(time.time() + left)),
                    )
                )
    except KeyboardInterrupt:
        interrupted = True
        say("\ninterrupted: the summary of the rounds run so far")

    elapsed = time.monotonic() - t_start
    lines, records = summarize(benches, results, opts.rounds, opts.quick, phases)
    report = [
        "",
        "== summary: %d rounds in %s, every bench a fresh process with %s per round%s ==" %
        (opts.rounds, mmss(elapsed), per_process(opts), " (quick)" if opts.quick else ""),
        "machine: %s" % machine(),
    ]
    report += watch.stop()
    if probe_argv:
        report.append("probe before each process (%s), by round, in the order run:" % opts.probe)
        for rnd in sorted({r for r, _, _ in probes}):
            report.append("  round %d: %s" % (rnd, " ".join(
                "%s %s" % (n, fmt_probe(x)) for r, n, x in probes if r == rnd)))
    if rows:
        report.append("each process's rows, the phase just before each (p25/p50/p75), by round:")
        for rnd in sorted({r for r, _, _ in rows}):
            report.append("  round %d: %s" % (rnd, "; ".join(
                "%s %s" % (n, fmt_rows(x)) for r, n, x in rows if r == rnd)))
    report += [
        "per target: the median of its per-round figures and their inter-quartile range "
        "(min-max below 5 rounds); met when the whole spread meets the goal, MISSED when none of "
        "it does, unsettled when it straddles; reported, never asserted; '-' a round without "
        "the figure"
    ]
    report += lines
    def tally(verdicts):
        counts = {}
        for v in verdicts:
            counts[v] = counts.get(v, 0) + 1
        return "".join(
            "%s %d %s" % (":" if i == 0 else ",", counts[k], k)
            for i, k in enumerate(k for k in ("met", "MISSED", "unsettled", "not measured", "not judged")
                                  if k in counts))

    report.append("%d targets%s" % (len(records), tally(r["verdict"] for r in records)))
    phased = [r for r in records if "phases" in r]
    for ph in ("near", "far"):
        if phased:
            report.append("  %d with figures by phase, %s%s" % (
                len(phased), ph, tally(r["phases"][ph]["verdict"] for r in phased)))
    for name, rnd, why in failures:
        report.append("FAILED: %s in round %d (%s); see %s" % (name, rnd, why,
                                                              os.path.join(out, "round-%d-%s.txt" % (rnd, name))))
    report.append("outputs: %s" % out)
    say("\n".join(report))
    with open(os.path.join(out, "summary.txt"), "w") as f:
        f.write("\n".join(report) + "\n")
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(
            {
                "rounds": opts.rounds,
                "quick": opts.quick,
                "benches": names,
                "failures": [{"bench": n, "round": r, "why": w} for n, r, w in failures],
                "probe": [{"round": r, "bench": n, "value": x} for r, n, x in probes],
                "rows_phase": [dict(x, round=r, bench=n) for r, n, x in rows],
                "targets": records,
            },
            f,
            indent=1,
        )
    if interrupted:
        return 130
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
