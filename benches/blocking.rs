// SPDX-License-Identifier: MIT OR Apache-2.0
//! blocking: the blocking single-message path against the epoll path, one
//! producer and one consumer thread, capacity 1024, 8-byte and 1 KiB
//! messages, in one run.
//!
//! - blocking: `send(.., Wait::Forever)` and `recv_into(.., Wait::Forever)`,
//!   the path C threads and the Go binding's C floor take (the send fd is
//!   not asked for: a blocking user has no use for it, and once created
//!   it is kept in step);
//! - epoll: the consumer receives with `Wait::Never` until `WouldBlock`, then
//!   waits in `epoll_wait` on the receive fd; the producer sends with
//!   `Wait::Never` and, when the channel is full, waits in `poll` on the
//!   send fd.
//!
//! The method is the one every rate bench shares (benches/method/mod.rs):
//! each run lasts a time, not a count (a warm-up of a fifth of `--row-time`
//! or `--warm` seconds, then a window of `--row-time` seconds, default 0.5,
//! the producer looking at the clock once per 1024 messages); the two paths
//! alternate,
//! repetition by repetition (`--reps`, default 5), the first rotating. The
//! table gives the median ns per message with its inter-quartile range
//! (min-max below 5 repetitions), the ratio blocking / epoll taken within
//! each repetition (median and spread; a ratio within one repetition is
//! the only figure that means anything on a loaded machine), and receive
//! doorbell writes per message; the end judges the ratio against target
//! (5), at most 1.2. Every message is checked (its sequence number in the
//! first 8 bytes, its length).
//!
//! Then the idle cost: one 8-byte message every 5 us, 50 us and 1 ms (the
//! producer spins to each due time), received by the blocking path, the
//! epoll path and crossbeam's blocking `recv`; the figure is the CPU time
//! per message of the consumer thread and of the producer's send calls
//! (`CLOCK_THREAD_CPUTIME_ID`), what a mostly idle channel costs the
//! machine. Its target: the blocking path at most 1.2x crossbeam's, whose
//! blocking calls also spin and yield a little before they park.
//!
//! `--smoke` (or `EVENTQ_BENCH_SMOKE=1`): a fixed count (`--msgs`, default
//! 20,000), one repetition; it checks delivery, never speed. `--quick`: 3
//! repetitions of 0.2 s. `--size BYTES` runs one size, `--only
//! blocking|epoll` one path of the rate rows, `--only idle` only the idle
//! rows (for a profiler). The idle rows' smoke is 200 messages each.
//! Nothing here asserts a timing.

#[path = "method/mod.rs"]
mod method;

use std::os::fd::{AsRawFd, RawFd};
use std::thread;
use std::time::{Duration, Instant};

use eventq::{Chan, Error, Options, Wait};

const CAPACITY: usize = 1024;

#[derive(Clone, Copy, PartialEq)]
enum Path {
    Blocking,
    Epoll,
}

impl Path {
    fn name(self) -> &'static str {
        match self {
            Path::Blocking => "blocking (Wait::Forever)",
            Path::Epoll => "epoll + Wait::Never",
        }
    }
}

/// Waits until `fd` is readable: `epoll_wait` on a set holding only it.
struct Poller {
    ep: RawFd,
}

impl Poller {
    fn new(fd: RawFd) -> Poller {
        // SAFETY: plain syscalls on fds this bench owns or borrows for the
        // duration of the run; the event struct outlives the call.
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        assert!(ep >= 0, "epoll_create1");
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: 0,
        };
        // SAFETY: as above.
        let rc = unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev) };
        assert_eq!(rc, 0, "epoll_ctl");
        Poller { ep }
    }

    fn wait(&self) {
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        loop {
            // SAFETY: one event into a live struct.
            let n = unsafe { libc::epoll_wait(self.ep, &mut ev, 1, -1) };
            if n >= 0 {
                return;
            }
            assert_eq!(
                std::io::Error::last_os_error().raw_os_error(),
                Some(libc::EINTR)
            );
        }
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        // SAFETY: the epoll fd is ours.
        unsafe { libc::close(self.ep) };
    }
}

fn poll_readable(fd: RawFd) {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd in a live struct.
    unsafe { libc::poll(&mut p, 1, -1) };
}

/// How long a run lasts: a fixed count (smoke), or a warm-up and a window.
#[derive(Clone, Copy)]
enum Length {
    Count(u64),
    Timed(Duration, Duration),
}

/// The producer looks at the clock once per this many messages.
const CLOCK_EVERY: u64 = 1024;

/// One row's figures: ns/msg, rings/msg, the phase probe before and after.
type Row = (f64, f64, Vec<f64>);

/// Moves messages of `size` bytes from one thread to another for the
/// length given; returns ns per message (in the window: from its start
/// until the consumer had the last message) and receive doorbell rings
/// (writes) per message.
fn run(path: Path, size: usize, len: Length) -> (f64, f64) {
    let chan = Chan::new(Options::new(CAPACITY)).expect("Chan::new");
    let rx = chan.clone();
    let consumer = thread::spawn(move || {
        let mut buf = vec![0u8; size];
        let poller = (path == Path::Epoll).then(|| Poller::new(rx.recv_fd().as_raw_fd()));
        let mut next = 0u64;
        loop {
            let wait = match path {
                Path::Blocking => Wait::Forever,
                Path::Epoll => Wait::Never,
            };
            match rx.recv_into(&mut buf, wait) {
                Ok(len) => {
                    assert_eq!(len, size, "length");
                    let seq = u64::from_le_bytes(buf[..8].try_into().unwrap());
                    assert_eq!(seq, next, "order");
                    next += 1;
                }
                Err(Error::WouldBlock) => poller.as_ref().unwrap().wait(),
                Err(Error::Closed) => break,
                Err(e) => panic!("recv_into: {e}"),
            }
        }
        (next, Instant::now())
    });
    let mut msg = vec![0xa5u8; size];
    let send_fd =
        (path == Path::Epoll).then(|| chan.send_fd().expect("libeventq send fd").as_raw_fd());
    let start = Instant::now();
    // (sequence, time) at the window's start.
    let mut window: Option<(u64, Instant)> = None;
    let mut seq = 0u64;
    loop {
        match len {
            Length::Count(n) if seq == n => break,
            Length::Timed(warm, time) if seq % CLOCK_EVERY == 0 => {
                let now = Instant::now();
                match window {
                    None if now - start >= warm => window = Some((seq, now)),
                    Some((_, t0)) if now - t0 >= time => break,
                    _ => {}
                }
            }
            _ => {}
        }
        msg[..8].copy_from_slice(&seq.to_le_bytes());
        match path {
            Path::Blocking => chan.send(&msg, Wait::Forever).expect("send"),
            Path::Epoll => loop {
                match chan.send(&msg, Wait::Never) {
                    Ok(()) => break,
                    Err(Error::WouldBlock) => poll_readable(send_fd.unwrap()),
                    Err(e) => panic!("send: {e}"),
                }
            },
        }
        seq += 1;
    }
    chan.close();
    let (got, done) = consumer.join().expect("consumer");
    assert_eq!(got, seq, "delivered");
    let (s0, t0) = window.unwrap_or((0, start));
    let ns = (done - t0).as_nanos() as f64 / (seq - s0).max(1) as f64;
    let rings = chan.stats().recv_doorbell_rings as f64 / seq.max(1) as f64;
    (ns, rings)
}

/// The consumers of the idle-cost rows: each waits for every message.
#[derive(Clone, Copy, PartialEq)]
enum Idle {
    Blocking,
    Epoll,
    Crossbeam,
}

impl Idle {
    fn name(self) -> &'static str {
        match self {
            Idle::Blocking => "blocking (Wait::Forever)",
            Idle::Epoll => "epoll + Wait::Never",
            Idle::Crossbeam => "crossbeam (blocking recv)",
        }
    }
}

/// Gaps between messages in the idle-cost rows: within a lone receive's
/// linger, beyond it, and a mostly idle channel.
const GAPS: [Duration; 3] = [
    Duration::from_micros(5),
    Duration::from_micros(50),
    Duration::from_millis(1),
];

/// A gap as the tables and targets print it: "5 us", "1 ms".
fn gap_name(gap: Duration) -> String {
    let us = gap.as_micros();
    if us >= 1000 && us % 1000 == 0 {
        format!("{} ms", us / 1000)
    } else {
        format!("{us} us")
    }
}

/// The calling thread's CPU time so far, in ns.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: one timespec in a live struct.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One 8-byte message every `gap` (the producer waits for each due time
/// spinning on the clock, so the gap is the gap, not a timer's), received
/// by `kind`; returns, per message in the window, the CPU time the
/// receiving thread took and the sending thread took in its send calls (a
/// send to a parked receiver wakes it), in us: what a mostly idle channel
/// costs the machine.
fn idle_cost(kind: Idle, gap: Duration, len: Length) -> f64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    // The sequence number that opens the window; the consumer reads its
    // CPU time on receiving it, and again at the end.
    let from = Arc::new(AtomicU64::new(u64::MAX));
    let chan = Chan::new(Options::new(CAPACITY)).expect("Chan::new");
    let (cb_tx, cb_rx) = crossbeam_channel::bounded::<[u8; 8]>(CAPACITY);
    let rx = chan.clone();
    let opened = from.clone();
    let consumer = thread::spawn(move || {
        let mut buf = [0u8; 8];
        let poller = (kind == Idle::Epoll).then(|| Poller::new(rx.recv_fd().as_raw_fd()));
        let (mut next, mut cpu0) = (0u64, None);
        loop {
            let got = match kind {
                Idle::Blocking => rx.recv_into(&mut buf, Wait::Forever).map(|_| ()),
                Idle::Epoll => rx.recv_into(&mut buf, Wait::Never).map(|_| ()),
                Idle::Crossbeam => cb_rx.recv().map(|m| buf = m).map_err(|_| Error::Closed),
            };
            match got {
                Ok(()) => {
                    assert_eq!(u64::from_le_bytes(buf), next, "order");
                    if next == opened.load(Ordering::Relaxed) {
                        cpu0 = Some((next, thread_cpu_ns()));
                    }
                    next += 1;
                }
                Err(Error::WouldBlock) => poller.as_ref().unwrap().wait(),
                Err(Error::Closed) => break,
                Err(e) => panic!("recv_into: {e}"),
            }
        }
        let (s0, c0) = cpu0.unwrap_or((0, 0));
        (next, s0, thread_cpu_ns() - c0)
    });
    let start = Instant::now();
    let mut due = start;
    let mut seq = 0u64;
    // CPU ns in the window's send calls.
    let mut sending = 0u64;
    loop {
        match len {
            Length::Count(n) if seq == n => break,
            Length::Timed(warm, time) => {
                let t = due - start;
                if t >= warm + time {
                    break;
                }
                if t >= warm && from.load(Ordering::Relaxed) == u64::MAX {
                    from.store(seq, Ordering::Relaxed);
                    sending = 0;
                }
            }
            _ => {}
        }
        while Instant::now() < due {
            std::hint::spin_loop();
        }
        let msg = seq.to_le_bytes();
        let cpu = thread_cpu_ns();
        match kind {
            Idle::Crossbeam => cb_tx.send(msg).expect("crossbeam send"),
            _ => chan.send(&msg, Wait::Forever).expect("send"),
        }
        sending += thread_cpu_ns() - cpu;
        seq += 1;
        due += gap;
    }
    chan.close();
    drop(cb_tx);
    let (got, s0, receiving) = consumer.join().expect("consumer");
    assert_eq!(got, seq, "delivered");
    (receiving + sending) as f64 / 1e3 / (seq - s0).max(1) as f64
}

fn main() {
    let mut margs = method::MethodArgs::default();
    let mut msgs: Option<u64> = None;
    let mut only: Option<String> = None;
    let mut sizes = vec![8usize, 1024];
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if margs.arg(&a, &mut args) {
            continue;
        }
        match a.as_str() {
            "--msgs" => msgs = args.next().and_then(|v| v.parse().ok()),
            "--only" => only = args.next(),
            "--size" => {
                sizes = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .into_iter()
                    .collect()
            }
            // cargo bench passes --bench.
            "--bench" => {}
            _ => {
                eprintln!(
                    "usage: blocking [--smoke] [--quick] [--reps N] [--row-time S] [--msgs N] [--size BYTES] [--only blocking|epoll|idle]"
                );
                std::process::exit(2);
            }
        }
    }
    let m = margs.finish();
    let len = if m.smoke {
        Length::Count(msgs.unwrap_or(20_000))
    } else {
        Length::Timed(m.warm, m.row_time)
    };
    let paths = [Path::Epoll, Path::Blocking];
    let runs = |path: Path| only.as_deref().is_none_or(|o| path.name().starts_with(o));
    let kinds = [Idle::Blocking, Idle::Epoll, Idle::Crossbeam];
    let idle_rows = only.as_deref().is_none_or(|o| o == "idle");
    let rows = sizes.len() * paths.iter().filter(|&&p| runs(p)).count()
        + if idle_rows {
            GAPS.len() * kinds.len()
        } else {
            0
        };
    m.plan("blocking", rows, 0.01, 0.0);
    let watch = method::Watch::start();
    // [size][path][rep]
    let mut t: Vec<[Vec<Row>; 2]> = Vec::new();
    for &size in &sizes {
        let mut by_path = [Vec::new(), Vec::new()];
        for rep in 0..m.reps {
            for i in 0..paths.len() {
                let i = method::order(i, rep, paths.len());
                // --only (for a profiler): the other path is not run.
                if runs(paths[i]) {
                    let ((ns, rings), line, phase) =
                        method::bracketed(m.smoke, || run(paths[i], size, len));
                    if !m.smoke {
                        eprintln!("  {size} B {}: {ns:.1} ns/msg{phase}", paths[i].name());
                    }
                    by_path[i].push((ns, rings, line));
                }
            }
        }
        t.push(by_path);
    }
    // [gap][kind][rep]: the consumer's CPU us per message.
    let mut idle: Vec<[Vec<f64>; 3]> = Vec::new();
    for &gap in GAPS.iter().filter(|_| idle_rows) {
        let mut by_kind: [Vec<f64>; 3] = Default::default();
        let len = if m.smoke {
            Length::Count(200)
        } else {
            Length::Timed(m.warm, m.row_time)
        };
        for rep in 0..m.reps {
            for i in 0..kinds.len() {
                let i = method::order(i, rep, kinds.len());
                let us = idle_cost(kinds[i], gap, len);
                if !m.smoke {
                    eprintln!(
                        "  idle, a message every {}, {}: {us:.2} us CPU/msg",
                        gap_name(gap),
                        kinds[i].name()
                    );
                }
                by_kind[i].push(us);
            }
        }
        idle.push(by_kind);
    }
    let watched = watch.stop();
    println!(
        "blocking vs epoll path, 1P1C, capacity {CAPACITY}; {}; {:.0} s",
        m.describe(),
        watched.elapsed
    );
    println!("machine: {}", method::machine());
    print!("{}", watched.report());
    if m.smoke {
        for &size in &sizes {
            println!("{size:<6} delivered (smoke: no timing)");
        }
        if idle_rows {
            println!("idle rows delivered (smoke: no timing)");
        }
        return;
    }
    println!(
        "(ns per message: median and {} of the repetitions; ratio = blocking / epoll per repetition: median and spread)",
        if m.reps >= 5 { "inter-quartile range" } else { "min-max" }
    );
    println!(
        "{:<6} {:<26} {:>8} {:>15} {:>18} {:>9}",
        "size",
        "path",
        "ns/msg",
        if m.reps >= 5 { "IQR" } else { "min-max" },
        "ratio",
        "rings/msg"
    );
    let mut o = String::new();
    for (&size, by_path) in sizes.iter().zip(&t) {
        let ns = |i: usize| -> Vec<Option<f64>> { by_path[i].iter().map(|r| Some(r.0)).collect() };
        let lines =
            |i: usize| -> Vec<Vec<f64>> { by_path[i].iter().map(|r| r.2.clone()).collect() };
        let figs = method::phased_ratios(&ns(1), &lines(1), &ns(0), &lines(0));
        let ratio = method::spread(&figs.iter().map(|f| f.0).collect::<Vec<_>>());
        for (i, path) in paths.iter().enumerate() {
            let v: Vec<f64> = ns(i).into_iter().flatten().collect();
            let Some(s) = method::spread(&v) else {
                continue;
            };
            let rings: Vec<f64> = by_path[i].iter().map(|r| r.1).collect();
            println!(
                "{:<6} {:<26} {:>8.1} {:>15} {:>18} {:>9.4}",
                size,
                path.name(),
                s.med,
                format!("{:.1}-{:.1}", s.lo, s.hi),
                if i == 0 {
                    "-".into()
                } else {
                    method::fmt_spread(ratio, 2)
                },
                method::quantile(&rings, 0.5)
            );
        }
        method::verdict_phased(
            &mut o,
            &m,
            &format!(
                "(5) 1P1C {}: blocking / epoll (Wait::Never, poll on the send fd), ns per msg",
                if size == 8 {
                    "8 B".to_string()
                } else {
                    format!("{size} B")
                }
            ),
            &figs,
            method::Goal::AtMost(1.2, "x"),
        );
    }
    if idle_rows {
        idle_table(&mut o, &m, &kinds, &idle);
    }
    println!();
    println!("{}", m.targets_heading());
    print!("{o}");
}

/// The idle-cost rows' table, and their target: on a mostly idle channel
/// the blocking path, whose lone calls may linger before they park, costs
/// at most 1.2x the CPU of crossbeam's blocking calls, which spin and
/// yield a little before they park too.
fn idle_table(o: &mut String, m: &method::Method, kinds: &[Idle; 3], idle: &[[Vec<f64>; 3]]) {
    println!();
    println!(
        "idle cost, 1P1C 8 B, one message every gap (the producer spins to each due time): CPU time per message, us, of the consumer thread and the producer's send calls (median and {}); ratio = this / crossbeam per repetition",
        if m.reps >= 5 { "inter-quartile range" } else { "min-max" }
    );
    println!(
        "{:<8} {:<26} {:>10} {:>15} {:>18}",
        "gap", "consumer", "CPU us", "spread", "ratio"
    );
    for (gap, by_kind) in GAPS.iter().zip(idle) {
        let some = |v: &[f64]| -> Vec<Option<f64>> { v.iter().map(|&x| Some(x)).collect() };
        let cb = some(&by_kind[2]);
        for (k, kind) in kinds.iter().enumerate() {
            let Some(s) = method::spread(&by_kind[k]) else {
                continue;
            };
            let ratio = method::spread(&method::ratios(&some(&by_kind[k]), &cb));
            println!(
                "{:<8} {:<26} {:>10.2} {:>15} {:>18}",
                gap_name(*gap),
                kind.name(),
                s.med,
                format!("{:.2}-{:.2}", s.lo, s.hi),
                if *kind == Idle::Crossbeam {
                    "-".into()
                } else {
                    method::fmt_spread(ratio, 2)
                }
            );
            if *kind == Idle::Blocking {
                method::verdict(
                    o,
                    m,
                    &format!(
                        "(5) idle 1P1C 8 B, a message every {}: blocking (Wait::Forever) / crossbeam (blocking send, recv), CPU per msg",
                        gap_name(*gap)
                    ),
                    ratio,
                    method::Goal::AtMost(1.2, "x"),
                );
            }
        }
    }
}
