// SPDX-License-Identifier: MIT OR Apache-2.0
//! The method every rate bench shares (the C benches' twin is `struct
//! method` in benches/peers/peers.h and common.c), included by each bench
//! with `#[path]`:
//!
//! - a row runs for a time, not a count: a warm-up (`--warm` seconds,
//!   default a fifth of the window), then a window of `--row-time` seconds
//!   (default 0.5; `--quick` 0.2); `--smoke` stays count-based;
//! - the rows compared with each other (one configuration) run repetition
//!   by repetition (`--reps`, default 5; `--quick` 3), rep 1 of each row,
//!   then rep 2, in an order rotated per repetition ([`order`]);
//! - a figure is judged on its per-repetition values: the median and
//!   inter-quartile range (min-max below 5 values), `met` when the whole
//!   spread meets the goal, `MISSED` when none of it does, `unsettled` when
//!   it straddles ([`verdict`]), in one line format shared with the C
//!   benches;
//! - the load around a run: load average, other processes' CPU and steal
//!   ([`Watch`]).

// Each bench uses part of this module.
#![allow(dead_code)]

use std::fmt::Write as _;
use std::thread;
use std::time::{Duration, Instant};

/// The repetitions and row times of one run.
#[derive(Clone, Copy, Debug)]
pub struct Method {
    pub smoke: bool,
    pub quick: bool,
    pub reps: usize,
    /// The timed window of a row.
    pub row_time: Duration,
    /// Before the window: a fifth of it.
    pub warm: Duration,
}

/// `--reps N`, `--row-time S`, `--warm S`, `--quick`, `--smoke`, gathered by
/// [`Method::arg`].
#[derive(Default)]
pub struct MethodArgs {
    smoke: bool,
    quick: bool,
    reps: Option<usize>,
    row_time: Option<f64>,
    warm: Option<f64>,
}

pub const MAX_REPS: usize = 50;

impl MethodArgs {
    /// Consumes `a` (and its value from `args`) if it is one of the
    /// method's options.
    pub fn arg(&mut self, a: &str, args: &mut impl Iterator<Item = String>) -> bool {
        match a {
            "--smoke" => self.smoke = true,
            "--quick" => self.quick = true,
            "--reps" => self.reps = Some(args.next().and_then(|v| v.parse().ok()).unwrap_or(0)),
            "--row-time" => {
                self.row_time = Some(args.next().and_then(|v| v.parse().ok()).unwrap_or(0.0))
            }
            "--warm" => self.warm = Some(args.next().and_then(|v| v.parse().ok()).unwrap_or(0.0)),
            _ => return false,
        }
        true
    }

    /// The defaults filled in; `EVENTQ_BENCH_SMOKE` set (not "0") means
    /// `--smoke`. Exits 2 on a value out of range.
    pub fn finish(self) -> Method {
        let smoke = self.smoke || std::env::var_os("EVENTQ_BENCH_SMOKE").is_some_and(|v| v != "0");
        let reps = self.reps.unwrap_or(if smoke {
            1
        } else if self.quick {
            3
        } else {
            5
        });
        let row_time = self.row_time.unwrap_or(if self.quick { 0.2 } else { 0.5 });
        let warm = self.warm.unwrap_or(row_time / 5.0);
        let out_of_range = |s: f64| s.is_nan() || s <= 0.0 || s > 60.0;
        if reps == 0 || reps > MAX_REPS || out_of_range(row_time) || out_of_range(warm) {
            eprintln!("--reps 1..{MAX_REPS}, --row-time and --warm in seconds (0 < S <= 60)");
            std::process::exit(2);
        }
        let row_time = Duration::from_secs_f64(row_time);
        Method {
            smoke,
            quick: self.quick,
            reps: if smoke { 1 } else { reps },
            row_time,
            warm: Duration::from_secs_f64(warm),
        }
    }
}

impl Method {
    /// Prints (to stderr) the plan and how long it should take: `rows`
    /// timed rows per repetition, each `per_row` seconds beyond its
    /// warm-up and window, plus `extra` seconds per repetition.
    pub fn plan(&self, prog: &str, rows: usize, per_row: f64, extra: f64) {
        if self.smoke {
            return;
        }
        let (w, t) = (self.warm.as_secs_f64(), self.row_time.as_secs_f64());
        let rep = rows as f64 * (w + t + per_row) + extra;
        eprintln!(
            "{prog}: {rows} timed rows x {} repetitions x ({w:.2} s warm-up + {t:.2} s window + ~{per_row:.2} s set-up), plus ~{extra:.0} s per repetition of latency rows: expect about {:.0} s{}",
            self.reps,
            rep * self.reps as f64,
            if self.quick { " (quick)" } else { "" }
        );
    }

    /// The heading's description of the method.
    pub fn describe(&self) -> String {
        if self.smoke {
            return "SMOKE: fixed tiny counts, one repetition, figures meaningless".into();
        }
        format!(
            "each row a {:.2} s window after a {:.2} s warm-up, {} repetitions interleaved per configuration (order rotated){}",
            self.row_time.as_secs_f64(),
            self.warm.as_secs_f64(),
            self.reps,
            if self.quick {
                "; QUICK: short rows, few repetitions"
            } else {
                ""
            }
        )
    }

    /// The heading of a targets section.
    pub fn targets_heading(&self) -> String {
        format!(
            "== targets (per-repetition figures: median and inter-quartile range, min-max below 5 repetitions; met when the whole spread meets the goal, MISSED when none of it does, unsettled when it straddles; reported, never asserted){} ==",
            if self.quick {
                " QUICK run: short rows, few repetitions"
            } else {
                ""
            }
        )
    }
}

/// The index of the row at place `i` of repetition `rep`, among `n`:
/// rotated, so no row always goes first.
pub fn order(i: usize, rep: usize, n: usize) -> usize {
    (i + rep) % n
}

/// The machine's phase just now: the nanoseconds to hand one cache line
/// between two threads, the lower quartile over bursts of 1,250 hand-overs
/// (16 bursts, or more, up to 64, until 2 ms have passed). The lower
/// quartile, and a floor on the time, because anything else runnable (a
/// thread of the row before, still exiting) only makes a burst slower, for
/// a while. The in-process twin of benches/probe/line_transfer.h, measured
/// before and after each row so that a row run while the vCPUs sat far
/// apart shows (docs/decisions/0027, "Phases").
pub fn line_transfer_ns() -> f64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    /// The line, alone on its 128 bytes (the adjacent-line prefetcher's pair).
    #[repr(align(128))]
    struct Line(AtomicU64);

    /// The turn that tells the other thread to stop.
    const STOP: u64 = u64::MAX;
    const PER_BURST: u64 = 1_250;
    const MIN_BURSTS: usize = 16;
    const MAX_BURSTS: usize = 64;
    const MIN_TIME: Duration = Duration::from_millis(2);

    /// Waits for the line to read `want` (or STOP) and returns what it
    /// read, yielding now and then so two threads on one CPU still take
    /// turns.
    fn await_turn(line: &Line, want: u64) -> u64 {
        let mut spins = 0u32;
        loop {
            let v = line.0.load(Ordering::Acquire);
            if v == want || v == STOP {
                return v;
            }
            spins = spins.wrapping_add(1);
            if spins % 4096 == 0 {
                thread::yield_now();
            }
        }
    }

    let line = Arc::new(Line(AtomicU64::new(0)));
    let other = {
        let line = line.clone();
        thread::spawn(move || {
            let mut i = 1;
            while await_turn(&line, i) != STOP {
                line.0.store(i + 1, Ordering::Release);
                i += 2;
            }
        })
    };
    let (mut bursts, mut turn, start) = (Vec::new(), 0, Instant::now());
    while bursts.len() < MIN_BURSTS || (start.elapsed() < MIN_TIME && bursts.len() < MAX_BURSTS) {
        let t = Instant::now();
        for i in (turn..turn + PER_BURST).step_by(2) {
            line.0.store(i + 1, Ordering::Release);
            await_turn(&line, i + 2);
        }
        turn += PER_BURST;
        bursts.push(t.elapsed().as_nanos() as f64 / PER_BURST as f64);
    }
    line.0.store(STOP, Ordering::Release);
    other.join().expect("line_transfer thread");
    quantile(&bursts, 0.25)
}

/// The q-quantile of `v` (linear interpolation); NaN for none.
pub fn quantile(v: &[f64], q: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    if s.is_empty() {
        return f64::NAN;
    }
    let x = q * (s.len() - 1) as f64;
    let i = x as usize;
    if i + 1 >= s.len() {
        s[s.len() - 1]
    } else {
        s[i] + (x - i as f64) * (s[i + 1] - s[i])
    }
}

/// Per-repetition figures: the median and the inter-quartile range (`iqr`)
/// or, below 5 values, the min-max.
#[derive(Clone, Copy, Debug)]
pub struct Spread {
    pub n: usize,
    pub iqr: bool,
    pub med: f64,
    pub lo: f64,
    pub hi: f64,
}

/// None for no values.
pub fn spread(v: &[f64]) -> Option<Spread> {
    if v.is_empty() {
        return None;
    }
    let iqr = v.len() >= 5;
    Some(Spread {
        n: v.len(),
        iqr,
        med: quantile(v, 0.5),
        lo: quantile(v, if iqr { 0.25 } else { 0.0 }),
        hi: quantile(v, if iqr { 0.75 } else { 1.0 }),
    })
}

impl Spread {
    /// "0.93 (0.90-0.97)".
    pub fn fmt(&self, prec: usize) -> String {
        format!(
            "{:.prec$} ({:.prec$}-{:.prec$})",
            self.med, self.lo, self.hi
        )
    }
}

/// "-" for none.
pub fn fmt_spread(s: Option<Spread>, prec: usize) -> String {
    s.map_or_else(|| "-".into(), |s| s.fmt(prec))
}

/// Per-repetition ratios a[i] / b[i] (the same repetition), over the
/// repetitions both have (None where either failed).
pub fn ratios(a: &[Option<f64>], b: &[Option<f64>]) -> Vec<f64> {
    phased_ratios(a, &[], b, &[])
        .into_iter()
        .map(|f| f.0)
        .collect()
}

/// Runs one row between two phase probes (none when `smoke`): its result,
/// the probe's readings before and after, and the text for the row's
/// progress line (", line 41 ns, after 39 ns"; empty for none).
pub fn bracketed<T>(smoke: bool, row: impl FnOnce() -> T) -> (T, Vec<f64>, String) {
    let probe = || (!smoke).then(line_transfer_ns);
    let before = probe();
    let out = row();
    let line: Vec<f64> = before.into_iter().chain(probe()).collect();
    let text = match line[..] {
        [a, b] => format!(", line {a:.0} ns, after {b:.0} ns"),
        _ => String::new(),
    };
    (out, line, text)
}

/// Where the machine was while a figure was taken, by the phase probes
/// ([`line_transfer_ns`]) before and after each of its rows: near when
/// every one read under [`NEAR_NS`], far when every one read over
/// [`FAR_NS`], turned otherwise (the phase changed, or sat between). On
/// this project's 2-vCPU VM a ratio of a copying row over a handing-over
/// one is about 3x near and 1.2x far (docs/decisions/0027, "Phases").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Near,
    Far,
    Turned,
}

/// A hand-over this fast shares a cache (the VM's near phase, 25-60 ns).
pub const NEAR_NS: f64 = 60.0;
/// A hand-over this slow crosses between caches (the far phase, 110-300 ns).
pub const FAR_NS: f64 = 110.0;

impl Phase {
    /// The phase of a figure from these probe readings (none: turned).
    pub fn of(probes: impl IntoIterator<Item = f64>) -> Phase {
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for p in probes {
            lo = lo.min(p);
            hi = hi.max(p);
        }
        if lo > hi {
            // No readings (a smoke run): as the C benches' phase_of_rows.
            Phase::Turned
        } else if hi < NEAR_NS {
            Phase::Near
        } else if lo > FAR_NS {
            Phase::Far
        } else {
            Phase::Turned
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Phase::Near => "near",
            Phase::Far => "far",
            Phase::Turned => "turned",
        }
    }
}

/// The line after a target's line that gives its per-repetition figures
/// by phase, for make bench's driver to judge each phase over the rounds:
/// `phases WHAT: near 3.14 3.20; far 1.10; turned 2.00` (`what` as in the
/// target line; a phase without figures left out; nothing for none).
pub fn phases_line(o: &mut String, what: &str, figs: &[(f64, Phase)]) {
    let mut parts = Vec::new();
    for ph in [Phase::Near, Phase::Far, Phase::Turned] {
        let v: Vec<String> = figs
            .iter()
            .filter(|f| f.1 == ph)
            .map(|f| format!("{:.4}", f.0))
            .collect();
        if !v.is_empty() {
            parts.push(format!("{} {}", ph.name(), v.join(" ")));
        }
    }
    if !parts.is_empty() {
        let _ = writeln!(o, "phases {what}: {}", parts.join("; "));
    }
}

/// A goal on a figure: at least or at most, in "x" (a ratio) or "%"
/// (figures already in percent).
#[derive(Clone, Copy)]
pub enum Goal {
    AtLeast(f64, &'static str),
    AtMost(f64, &'static str),
}

/// met, MISSED or unsettled.
pub fn judge(s: &Spread, goal: Goal) -> &'static str {
    match goal {
        Goal::AtLeast(g, _) if s.lo >= g => "met",
        Goal::AtLeast(g, _) if s.hi < g => "MISSED",
        Goal::AtMost(g, _) if s.hi <= g => "met",
        Goal::AtMost(g, _) if s.lo > g => "MISSED",
        _ => "unsettled",
    }
}

/// One target's line, in the format every bench shares:
/// `target WHAT >= 0.8x: median 0.93x (IQR 0.90-0.97x, 5 reps): met`.
pub fn verdict(o: &mut String, m: &Method, what: &str, s: Option<Spread>, goal: Goal) {
    let (cmp, g, unit) = match goal {
        Goal::AtLeast(g, u) => (">=", g, u),
        Goal::AtMost(g, u) => ("<=", g, u),
    };
    let head = format!("target {what} {cmp} {g}{unit}:");
    let Some(s) = s else {
        let _ = writeln!(o, "{head:<92} not measured");
        return;
    };
    let prec = if unit == "%" { 1 } else { 2 };
    let _ = writeln!(
        o,
        "{head:<92} median {:.prec$}{unit} ({} {:.prec$}-{:.prec$}{unit}, {} rep{}): {}{}",
        s.med,
        if s.iqr { "IQR" } else { "min-max" },
        s.lo,
        s.hi,
        s.n,
        if s.n == 1 { "" } else { "s" },
        judge(&s, goal),
        if m.quick { " (quick)" } else { "" }
    );
}

/// [`verdict`] on per-repetition figures that know their phase, then
/// their [`phases_line`].
pub fn verdict_phased(o: &mut String, m: &Method, what: &str, figs: &[(f64, Phase)], goal: Goal) {
    let v: Vec<f64> = figs.iter().map(|f| f.0).collect();
    verdict(o, m, what, spread(&v), goal);
    phases_line(o, what, figs);
}

/// Per-repetition ratios a[i] / b[i] as [`ratios`], each with the phase
/// around both rows (`pa[i]`, `pb[i]`: a row's probe readings).
pub fn phased_ratios(
    a: &[Option<f64>],
    pa: &[Vec<f64>],
    b: &[Option<f64>],
    pb: &[Vec<f64>],
) -> Vec<(f64, Phase)> {
    (0..a.len().min(b.len()))
        .filter_map(|i| match (a[i], b[i]) {
            (Some(x), Some(y)) if y > 0.0 => {
                let probes = pa.get(i).into_iter().chain(pb.get(i)).flatten().copied();
                Some((x / y, Phase::of(probes)))
            }
            _ => None,
        })
        .collect()
}

// ---------------------------------------------------------------------------
// The machine and its load.

fn read_trim(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

/// CPU ticks from /proc: (busy ticks of the whole machine, steal ticks,
/// ticks of this process, all threads).
fn cpu_ticks() -> Option<(u64, u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let f: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    // user nice system idle iowait irq softirq steal ...
    let busy = f.first()? + f.get(1)? + f.get(2)? + f.get(5)? + f.get(6)?;
    let steal = *f.get(7)?;
    let me = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest: Vec<&str> = me.rsplit_once(") ")?.1.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime) are at 11 and 12 after the comm.
    let own = rest.get(11)?.parse::<u64>().ok()? + rest.get(12)?.parse::<u64>().ok()?;
    Some((busy, steal, own))
}

/// The share of all CPUs that other processes used (and the hypervisor
/// stole) between two `cpu_ticks` readings taken `secs` apart.
fn interference(
    a: Option<(u64, u64, u64)>,
    b: Option<(u64, u64, u64)>,
    secs: f64,
) -> Option<(f64, f64)> {
    let ((b0, s0, o0), (b1, s1, o1)) = (a?, b?);
    // SAFETY: plain libc call.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let cpus = thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let total = secs * hz * cpus;
    let others = (b1 - b0).saturating_sub(o1 - o0) as f64 / total;
    Some((others, (s1 - s0) as f64 / total))
}

fn load1() -> (f64, String) {
    let l = read_trim("/proc/loadavg");
    let one = l
        .split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN);
    (one, l)
}

/// "2 CPUs (model), Linux x.y".
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "?".into());
    let cpus = thread::available_parallelism().map_or(0, |n| n.get());
    format!(
        "{cpus} CPUs ({cpu}), Linux {}",
        read_trim("/proc/sys/kernel/osrelease")
    )
}

/// The load around a whole run: [`Watch::start`] before it,
/// [`Watch::stop`] after.
pub struct Watch {
    load_start: f64,
    load_start_s: String,
    ticks: Option<(u64, u64, u64)>,
    t0: Instant,
}

/// What a [`Watch`] saw.
pub struct Watched {
    pub elapsed: f64,
    report: String,
}

impl Watch {
    pub fn start() -> Watch {
        let (load_start, load_start_s) = load1();
        Watch {
            load_start,
            load_start_s,
            ticks: cpu_ticks(),
            t0: Instant::now(),
        }
    }

    pub fn stop(self) -> Watched {
        let elapsed = self.t0.elapsed().as_secs_f64();
        let (_, load_end_s) = load1();
        let mut o = String::new();
        let _ = writeln!(
            o,
            "loadavg at start: {}; at end: {load_end_s} (the end includes this run's own load)",
            self.load_start_s
        );
        match interference(self.ticks, cpu_ticks(), elapsed) {
            Some((other, steal)) => {
                let _ = writeln!(
                    o,
                    "during the run, other processes used {:.1}% of the CPUs; hypervisor steal {:.1}%",
                    other * 100.0,
                    steal * 100.0
                );
                if !(self.load_start < 1.0 && other < 0.05 && steal < 0.05) {
                    let _ = writeln!(
                        o,
                        "WARNING: the machine was not quiet (load at start >= 1.0, or others/steal >= 5%): figures are not from a quiet machine"
                    );
                }
            }
            None => {
                let _ = writeln!(
                    o,
                    "(/proc/stat unreadable: CPU use by other processes unknown)"
                );
            }
        }
        Watched { elapsed, report: o }
    }
}

impl Watched {
    /// The load lines, each ending in a newline.
    pub fn report(&self) -> &str {
        &self.report
    }
}
