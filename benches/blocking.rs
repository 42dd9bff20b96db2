// SPDX-License-Identifier: MIT OR Apache-2.0
//! blocking: the blocking single-message path against the epoll path, one
//! producer and one consumer thread, capacity 1024, 8-byte and 1 KiB
//! messages, in one run.
//!
//! - blocking: `send(.., Wait::Forever)` and `recv_into(.., Wait::Forever)`,
//!   the path C threads and the Go binding's C floor take;
//! - epoll: the consumer receives with `Wait::Never` until `WouldBlock`, then
//!   waits in `epoll_wait` on the receive fd; the producer sends with
//!   `Wait::Never` and, when the channel is full, waits in `poll` on the
//!   send fd.
//!
//! The cases alternate, each repeated; the table gives the median and the
//! best of the reps in ns per message, the ratio blocking / epoll of each
//! (a ratio within one run is the only figure that means anything on a
//! loaded machine; the best of many short reps is the least disturbed by
//! other load), and receive doorbell writes per message. Every message is
//! checked (its sequence number in the first 8 bytes, its length).
//!
//! `--smoke` (or `EVENTQ_BENCH_SMOKE=1`): tiny counts, one repetition; it
//! checks delivery, never speed. `--msgs N`, `--reps N` set the counts;
//! `--size BYTES` runs one size, `--only blocking|epoll` one path (for a
//! profiler).
//! Nothing here asserts a timing.

use std::os::fd::{AsRawFd, RawFd};
use std::thread;
use std::time::Instant;

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

/// Moves `n` messages of `size` bytes from one thread to another; returns
/// ns per message and receive doorbell rings (writes) per message.
fn run(path: Path, size: usize, n: u64) -> (f64, f64) {
    let chan = Chan::new(Options::new(CAPACITY)).expect("Chan::new");
    let rx = chan.clone();
    let t0 = Instant::now();
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
        next
    });
    let mut msg = vec![0xa5u8; size];
    let send_fd = chan.send_fd().expect("libeventq send fd").as_raw_fd();
    for seq in 0..n {
        msg[..8].copy_from_slice(&seq.to_le_bytes());
        match path {
            Path::Blocking => chan.send(&msg, Wait::Forever).expect("send"),
            Path::Epoll => loop {
                match chan.send(&msg, Wait::Never) {
                    Ok(()) => break,
                    Err(Error::WouldBlock) => poll_readable(send_fd),
                    Err(e) => panic!("send: {e}"),
                }
            },
        }
    }
    chan.close();
    let got = consumer.join().expect("consumer");
    let ns = t0.elapsed().as_nanos() as f64 / n as f64;
    assert_eq!(got, n, "delivered");
    let rings = chan.stats().recv_doorbell_rings as f64 / n as f64;
    (ns, rings)
}

/// The median; NaN for none.
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn main() {
    let mut smoke = std::env::var_os("EVENTQ_BENCH_SMOKE").is_some_and(|v| v != "0");
    let mut msgs: Option<u64> = None;
    let mut reps: Option<usize> = None;
    let mut only: Option<String> = None;
    let mut sizes = vec![8usize, 1024];
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--smoke" => smoke = true,
            "--msgs" => msgs = args.next().and_then(|v| v.parse().ok()),
            "--reps" => reps = args.next().and_then(|v| v.parse().ok()),
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
                    "usage: blocking [--smoke] [--msgs N] [--reps N] [--size BYTES] [--only blocking|epoll]"
                );
                std::process::exit(2);
            }
        }
    }
    let (n, reps) = if smoke {
        (msgs.unwrap_or(20_000), 1)
    } else {
        (msgs.unwrap_or(2_000_000), reps.unwrap_or(5).max(1))
    };
    println!("blocking vs epoll path, 1P1C, capacity {CAPACITY}, {n} messages x {reps} reps");
    println!("(ns per message: median and best of the reps; ratio = blocking / epoll)");
    println!(
        "{:<6} {:<26} {:>8} {:>8} {:>9} {:>9} {:>9}",
        "size", "path", "median", "best", "ratio", "ratio", "rings"
    );
    println!(
        "{:<6} {:<26} {:>8} {:>8} {:>9} {:>9} {:>9}",
        "", "", "", "", "(median)", "(best)", "/msg"
    );
    for size in sizes {
        // [path][rep]: (ns/msg, rings/msg); the paths alternate.
        let mut t = [Vec::new(), Vec::new()];
        for _ in 0..reps {
            for (i, path) in [Path::Epoll, Path::Blocking].into_iter().enumerate() {
                // --only (for a profiler): the other path is not run.
                if only.as_deref().is_none_or(|o| path.name().starts_with(o)) {
                    t[i].push(run(path, size, n));
                }
            }
        }
        if smoke {
            println!("{size:<6} delivered (smoke: no timing)");
            continue;
        }
        let stat = |v: &[(f64, f64)]| {
            let mut ns: Vec<f64> = v.iter().map(|r| r.0).collect();
            let mut rings: Vec<f64> = v.iter().map(|r| r.1).collect();
            let best = ns.iter().copied().fold(f64::NAN, f64::min);
            (median(&mut ns), best, median(&mut rings))
        };
        let (em, eb, er) = stat(&t[0]);
        let (bm, bb, br) = stat(&t[1]);
        for (path, m, b, r, rm, rb) in [
            (Path::Epoll, em, eb, er, 1.0, 1.0),
            (Path::Blocking, bm, bb, br, bm / em, bb / eb),
        ] {
            println!(
                "{:<6} {:<26} {:>8.1} {:>8.1} {:>9.2} {:>9.2} {:>9.4}",
                size,
                path.name(),
                m,
                b,
                rm,
                rb,
                r
            );
        }
    }
}
