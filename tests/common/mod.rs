// SPDX-License-Identifier: MIT OR Apache-2.0
//! Helpers shared by the channel's integration tests: fd readiness through
//! poll(2), a seeded PRNG, self-checking test messages, an error summary that
//! can be compared, and the exactly-once / order verifier.
//!
//! No helper sleeps or measures time. The only timeout anywhere is the
//! liveness guard in `wait_readable`, which turns a lost wake-up (a hang)
//! into a failure instead of a stuck test run; it never fires on a working
//! channel and no result depends on it.

#![allow(dead_code)]

use std::os::fd::AsRawFd;
use std::os::fd::RawFd;
use std::time::Duration;

use eventq::{Chan, Error};

#[path = "../fds/mod.rs"]
pub mod fds;

/// How long `wait_readable` waits before declaring a lost wake-up. Only a
/// hang guard: a correct channel wakes the poller at once.
pub const HANG_GUARD: Duration = Duration::from_secs(60);

/// Whether `fd` is readable right now (a zero-timeout poll(2)).
pub fn readable(fd: RawFd) -> bool {
    fds::is_readable(fd).expect("poll(2) failed")
}

/// Whether the channel's receive fd is readable now.
pub fn recv_ready(ch: &Chan) -> bool {
    readable(ch.recv_fd().as_raw_fd())
}

/// Whether the channel's send fd is readable now.
pub fn send_ready(ch: &Chan) -> bool {
    readable(ch.send_fd().unwrap().as_raw_fd())
}

/// Blocks in poll(2) until `fd` is readable. Panics if that takes longer
/// than `HANG_GUARD` (a lost wake-up) or if poll reports an error condition.
pub fn wait_readable(fd: RawFd, what: &str) {
    let rev = fds::poll_fd(fd, libc::POLLIN, Some(HANG_GUARD)).expect("poll(2) failed");
    assert!(
        rev & (libc::POLLERR | libc::POLLNVAL) == 0,
        "{what}: poll reported revents {rev:#x}"
    );
    assert!(
        rev & libc::POLLIN != 0,
        "{what}: fd {fd} not readable within {HANG_GUARD:?}: lost wake-up"
    );
}

/// SplitMix64: a tiny deterministic PRNG, good enough to pick operations.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }

    /// True with probability `num / den`.
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.next_u64() % den < num
    }
}

/// The SplitMix64 finaliser.
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

// ---------------------------------------------------------------------------
// Self-checking messages.
//
// Layout: producer id (u32 LE), sequence number (u32 LE), body length
// (u32 LE), FNV-1a checksum of the body (u32 LE), then the body. The body's
// length (0..=MAX_BODY) and bytes are derived from (id, seq), so a receiver
// can check the exact length and every byte, and the checksum catches a
// message spliced from two others.
// ---------------------------------------------------------------------------

/// Bytes before the body.
pub const HEADER: usize = 16;
/// The longest body.
pub const MAX_BODY: usize = 2048;
/// The longest test message.
pub const MAX_MSG: usize = HEADER + MAX_BODY;

fn key(id: u32, seq: u32) -> u64 {
    mix((u64::from(id) << 32) | u64::from(seq))
}

/// The body length of message (id, seq): empty and maximal bodies are
/// frequent, the rest spread over 0..=MAX_BODY.
pub fn body_len(id: u32, seq: u32) -> usize {
    let k = key(id, seq);
    match k % 8 {
        0 => 0,
        1 => MAX_BODY,
        2 => (k >> 8) as usize % 16,
        _ => (k >> 8) as usize % (MAX_BODY + 1),
    }
}

/// Byte `i` of the body of message (id, seq).
fn body_byte(k: u64, i: usize) -> u8 {
    ((k >> ((i % 8) * 8)) as u8) ^ ((i / 8) as u8)
}

fn fnv1a(data: &[u8]) -> u32 {
    let mut h: u32 = 0x811C_9DC5;
    for &b in data {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// Writes message (id, seq) into `out` (cleared first).
pub fn encode_into(id: u32, seq: u32, out: &mut Vec<u8>) {
    let k = key(id, seq);
    let len = body_len(id, seq);
    out.clear();
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend((0..len).map(|i| body_byte(k, i)));
    let sum = fnv1a(&out[HEADER..]);
    out[12..16].copy_from_slice(&sum.to_le_bytes());
}

/// Message (id, seq) as a new buffer.
pub fn encode(id: u32, seq: u32) -> Vec<u8> {
    let mut v = Vec::with_capacity(HEADER + body_len(id, seq));
    encode_into(id, seq, &mut v);
    v
}

fn word(msg: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(msg[at..at + 4].try_into().unwrap())
}

/// Checks that `msg` is exactly one whole test message (D2) and returns its
/// (producer id, sequence number). Panics on a short, long, merged, split or
/// corrupted message.
pub fn decode(msg: &[u8]) -> (u32, u32) {
    assert!(
        msg.len() >= HEADER,
        "D2: message of {} bytes is shorter than the header (split?)",
        msg.len()
    );
    let (id, seq, declared, sum) = (word(msg, 0), word(msg, 4), word(msg, 8), word(msg, 12));
    let want = body_len(id, seq);
    assert_eq!(
        declared as usize, want,
        "D2: message ({id}, {seq}) declares body length {declared}, expected {want}"
    );
    assert_eq!(
        msg.len(),
        HEADER + want,
        "D2: message ({id}, {seq}) arrived with {} bytes, expected {} (merged or split)",
        msg.len(),
        HEADER + want
    );
    let body = &msg[HEADER..];
    assert_eq!(
        fnv1a(body),
        sum,
        "D2: checksum mismatch in message ({id}, {seq})"
    );
    let k = key(id, seq);
    assert!(
        body.iter().enumerate().all(|(i, &b)| b == body_byte(k, i)),
        "D2: body bytes of message ({id}, {seq}) differ from what was sent"
    );
    (id, seq)
}

/// Verifies a run: `logs[c]` is what consumer `c` received, in order, and
/// `accepted[p]` how many messages producer `p` had accepted (its sequence
/// numbers `0..accepted[p]`).
///
/// - D3: within each consumer's log, each producer's seqs strictly increase;
/// - D1: over all logs, every accepted (p, seq) appears exactly once and
///   nothing else appears.
pub fn verify(logs: &[Vec<(u32, u32)>], accepted: &[u32]) {
    for (c, log) in logs.iter().enumerate() {
        let mut last: Vec<Option<u32>> = vec![None; accepted.len()];
        for &(p, s) in log {
            let p_idx = p as usize;
            assert!(
                p_idx < accepted.len(),
                "consumer {c} got a message from unknown producer {p}"
            );
            if let Some(prev) = last[p_idx] {
                assert!(
                    s > prev,
                    "D3: consumer {c} got producer {p}'s seq {s} after seq {prev}"
                );
            }
            last[p_idx] = Some(s);
        }
    }
    let mut seen: Vec<Vec<u8>> = accepted.iter().map(|&n| vec![0; n as usize]).collect();
    for (c, log) in logs.iter().enumerate() {
        for &(p, s) in log {
            let slot = seen[p as usize].get_mut(s as usize).unwrap_or_else(|| {
                panic!(
                    "D1: consumer {c} got ({p}, {s}) but producer {p} had only {} accepted",
                    accepted[p as usize]
                )
            });
            *slot += 1;
            assert!(*slot == 1, "D1: message ({p}, {s}) received twice");
        }
    }
    for (p, v) in seen.iter().enumerate() {
        if let Some(s) = v.iter().position(|&n| n == 0) {
            let missing = v.iter().filter(|&&n| n == 0).count();
            panic!("D1: {missing} accepted messages of producer {p} never received, first seq {s}");
        }
    }
}

// ---------------------------------------------------------------------------
// Comparable outcomes.
// ---------------------------------------------------------------------------

/// An `eventq::Result` reduced to something `PartialEq`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Got<T> {
    Ok(T),
    WouldBlock,
    TimedOut,
    Closed,
    TooLarge {
        len: usize,
        max: usize,
    },
    BufferTooSmall {
        needed: usize,
    },
    Invalid,
    /// Any other error, by its debug text.
    Other(String),
}

impl<T> From<eventq::Result<T>> for Got<T> {
    fn from(r: eventq::Result<T>) -> Got<T> {
        match r {
            Ok(v) => Got::Ok(v),
            Err(e) => err_out(e),
        }
    }
}

/// An error as an `Got`.
pub fn err_out<T>(e: Error) -> Got<T> {
    match e {
        Error::WouldBlock => Got::WouldBlock,
        Error::TimedOut => Got::TimedOut,
        Error::Closed => Got::Closed,
        Error::TooLarge { len, max } => Got::TooLarge { len, max },
        Error::BufferTooSmall { needed } => Got::BufferTooSmall { needed },
        Error::Invalid(_) => Got::Invalid,
        other => Got::Other(format!("{other:?}")),
    }
}

/// Shorthand: the outcome of `r`, with the value dropped.
pub fn out<T>(r: eventq::Result<T>) -> Got<()> {
    Got::from(r.map(drop))
}

// ---------------------------------------------------------------------------
// Blocked threads and hangs.
// ---------------------------------------------------------------------------

/// The calling thread's kernel thread id.
pub fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// Yields until thread `tid` of this process is asleep in the kernel (state
/// `S` in /proc), e.g. parked on the channel's condvar or in poll(2), or
/// has exited. This is observation, not timing: callers record the tid just
/// before a call that must block, so the only sleep it can be in is that
/// call's; a test stays correct even if it were some other sleep, it would
/// only check less.
pub fn wait_until_asleep(tid: i32) {
    let path = format!("/proc/self/task/{tid}/stat");
    loop {
        let Ok(stat) = std::fs::read_to_string(&path) else {
            return; // exited
        };
        // The state follows the command name, which is in parentheses.
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next());
        if state == Some('S') {
            return;
        }
        std::thread::yield_now();
    }
}

/// Collects the tids of threads about to block, and waits until they are.
#[derive(Default)]
pub struct Sleepers(std::sync::Mutex<Vec<i32>>);

impl Sleepers {
    /// Called by a thread right before the call that must block.
    pub fn me(&self) {
        self.0.lock().unwrap().push(gettid());
    }

    /// Waits until `n` threads have registered and all of them are asleep.
    pub fn wait_all(&self, n: usize) {
        let tids = loop {
            let tids = self.0.lock().unwrap().clone();
            if tids.len() >= n {
                break tids;
            }
            std::thread::yield_now();
        };
        for tid in tids {
            wait_until_asleep(tid);
        }
    }
}

/// Aborts the test process if dropped later than `HANG_GUARD` after its
/// creation, so a lost wake-up in a test with `Wait::Forever` calls fails
/// the run instead of hanging it. Never fires on a working channel.
pub struct Watchdog(Option<std::sync::mpsc::Sender<()>>);

impl Watchdog {
    pub fn new(what: &'static str) -> Watchdog {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(HANG_GUARD) {
                eprintln!("{what}: still blocked after {HANG_GUARD:?}: lost wake-up; aborting");
                std::process::abort();
            }
        });
        Watchdog(Some(tx))
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        drop(self.0.take());
    }
}

/// Runs `f` on a thread of its own and fails the test if it has not
/// finished within `guard`: a lost wake-up, a livelock or a starved task
/// hangs rather than fails. Only a hang guard; no result depends on it.
pub fn guarded<T: Send + 'static>(
    what: &str,
    guard: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
    });
    match rx.recv_timeout(guard) {
        Ok(Ok(v)) => v,
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(_) => {
            panic!("{what}: not done after {guard:?}: a lost wake-up, a livelock or a starved task")
        }
    }
}

/// A waker that records that it was woken.
pub struct Flag(pub std::sync::atomic::AtomicBool);

impl std::task::Wake for Flag {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}
