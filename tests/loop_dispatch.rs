// SPDX-License-Identifier: MIT OR Apache-2.0
//! The loop's channel sources and source removal (D8), through the Rust API.
//!
//! - per-message delivery from several producer threads, checked with
//!   self-describing (producer id, sequence, length, checksum) messages: D1
//!   exactly once, D2 whole, D3 per-producer order; two loops sharing one
//!   channel; the per-iteration budget; `Event::Closed` exactly once, then
//!   the source is disabled; a failing or panicking callback;
//! - removal during dispatch: a callback removing itself; removing or
//!   disabling another source whose event is already in the current epoll
//!   batch (every kind made ready before one `run_once`); removing every
//!   source from one callback; a post removing a source; dropping the loop
//!   with sources present; removal from another thread while the loop runs.
//!   A callback's drop stands for the C destroy hook: each is counted.
//!
//! No sleeps and no timing assertions: every result is the same whatever the
//! interleaving, and readiness is checked only at quiescent points.

mod fds;

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use eventq::event_loop::events::{IN, OUT};
use eventq::{Chan, Error, Event, Loop, Options, SourceId, Wait};
use parking_lot::Mutex;

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// Counts its drops: captured by a callback, it tells when the callback (the
/// Rust side of a C destroy hook) was dropped.
struct OnDrop(Arc<AtomicUsize>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        self.0.fetch_add(1, SeqCst);
    }
}

fn counter() -> Arc<AtomicUsize> {
    Arc::new(AtomicUsize::new(0))
}

fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: fds has room for two descriptors.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) };
    assert_eq!(rc, 0, "pipe2: {}", std::io::Error::last_os_error());
    // SAFETY: pipe2 just returned these fds and nothing else owns them.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

fn write_byte(fd: &OwnedFd) {
    // SAFETY: one byte from a valid buffer to an open fd.
    let n = unsafe { libc::write(fd.as_raw_fd(), b"x".as_ptr().cast(), 1) };
    assert_eq!(n, 1, "write: {}", std::io::Error::last_os_error());
}

fn readable(fd: RawFd) -> bool {
    fds::is_readable(fd).unwrap()
}

/// Blocks until `fd` is readable (a lost wake-up would hang: the harness's
/// own timeout reports it).
fn wait_readable(fd: RawFd) {
    let rev = fds::poll_fd(fd, libc::POLLIN, None).unwrap();
    assert!(rev & libc::POLLIN != 0, "poll revents {rev:#x}");
}

fn fnv1a(data: &[u8]) -> u32 {
    data.iter().fold(0x811C_9DC5u32, |h, &b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

const HDR: usize = 16;
const MAX_BODY: usize = 300;

fn body_len(pid: u32, seq: u32) -> usize {
    let mut x = seq.wrapping_mul(2_654_435_761) ^ (pid + 1).wrapping_mul(40_503);
    x ^= x >> 13;
    x as usize % (MAX_BODY + 1)
}

/// Message (pid, seq): pid, seq, body length, FNV-1a of the body (u32 LE
/// each), then the body, whose bytes depend on (pid, seq).
fn encode(pid: u32, seq: u32) -> Vec<u8> {
    let len = body_len(pid, seq);
    let body: Vec<u8> = (0..len)
        .map(|i| (pid as usize * 131 + seq as usize * 7 + i * 13) as u8)
        .collect();
    let mut m = Vec::with_capacity(HDR + len);
    m.extend_from_slice(&pid.to_le_bytes());
    m.extend_from_slice(&seq.to_le_bytes());
    m.extend_from_slice(&(len as u32).to_le_bytes());
    m.extend_from_slice(&fnv1a(&body).to_le_bytes());
    m.extend_from_slice(&body);
    m
}

fn word(m: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(m[at..at + 4].try_into().unwrap())
}

/// Checks one message whole (D2); returns (pid, seq).
fn decode(m: &[u8]) -> Result<(u32, u32), String> {
    if m.len() < HDR {
        return Err(format!("D2: {} bytes, shorter than a header", m.len()));
    }
    let (pid, seq) = (word(m, 0), word(m, 4));
    if m != encode(pid, seq).as_slice() {
        return Err(format!(
            "D2: message ({pid}, {seq}) of {} bytes is not what was sent",
            m.len()
        ));
    }
    Ok((pid, seq))
}

/// What a channel source saw, checked as it arrives.
#[derive(Default)]
struct Tally {
    next: Vec<u32>,
    got: usize,
    errors: Vec<String>,
    closed: usize,
    after_closed: usize,
    in_iteration: usize,
}

impl Tally {
    fn new(producers: usize) -> Tally {
        Tally {
            next: vec![0; producers],
            ..Tally::default()
        }
    }

    fn event(&mut self, ev: Event<'_>) {
        if self.closed > 0 {
            self.after_closed += 1;
        }
        match ev {
            Event::Message(m) => {
                self.in_iteration += 1;
                match decode(m) {
                    Ok((pid, seq)) if (pid as usize) < self.next.len() => {
                        // One consumer: each producer's next seq is exact, so
                        // this checks D3 order and D1 no loss, no duplicate.
                        let want = &mut self.next[pid as usize];
                        if seq != *want && self.errors.len() < 10 {
                            self.errors
                                .push(format!("D1/D3: producer {pid}: got {seq}, want {want}"));
                        }
                        *want = seq + 1;
                        self.got += 1;
                    }
                    Ok((pid, _)) => self.errors.push(format!("unknown producer {pid}")),
                    Err(e) => self.errors.push(e),
                }
            }
            Event::Closed => self.closed += 1,
            other => self.errors.push(format!("unexpected event {other:?}")),
        }
    }

    fn assert_complete(&self, producers: usize, per: u32) {
        assert!(self.errors.is_empty(), "{:?}", self.errors);
        assert_eq!(self.got, producers * per as usize, "D1: message count");
        assert!(self.next.iter().all(|&n| n == per), "D1: {:?}", self.next);
        assert_eq!(self.closed, 1, "Event::Closed exactly once");
        assert_eq!(self.after_closed, 0, "nothing after Event::Closed");
    }
}

/// Starts producers, each on its own handle; the last one to finish closes
/// the channel.
fn producers(chan: &Chan, n: usize, per: u32) -> Vec<thread::JoinHandle<()>> {
    let alive = Arc::new(AtomicUsize::new(n));
    (0..n)
        .map(|pid| {
            let (chan, alive) = (chan.clone(), alive.clone());
            thread::spawn(move || {
                if pid % 2 == 0 {
                    for seq in 0..per {
                        chan.send(&encode(pid as u32, seq), Wait::Forever).unwrap();
                    }
                } else {
                    let mut seq = 0;
                    while seq < per {
                        let batch: Vec<Vec<u8>> = (seq..per.min(seq + 8))
                            .map(|s| encode(pid as u32, s))
                            .collect();
                        let sent = chan
                            .send_batch(batch.iter().map(|m| m.as_slice()), Wait::Forever)
                            .unwrap();
                        assert!(sent > 0);
                        seq += sent as u32;
                    }
                }
                if alive.fetch_sub(1, SeqCst) == 1 {
                    chan.close();
                }
            })
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Delivery through a channel source (D1-D3)
// ---------------------------------------------------------------------------

#[test]
fn chan_source_d1_d2_d3_with_four_producers() {
    const N: usize = 4;
    const PER: u32 = 10_000;
    let lp = Loop::new().unwrap();
    let chan = Chan::new(Options::new(64)).unwrap();
    let tally = Arc::new(Mutex::new(Tally::new(N)));
    let t = tally.clone();
    let id = lp
        .add_chan(&chan, move |lp, _, ev| {
            let closed = ev == Event::Closed;
            t.lock().event(ev);
            if closed {
                lp.stop();
            }
            Ok(())
        })
        .unwrap();
    let threads = producers(&chan, N, PER);
    lp.run().unwrap();
    for t in threads {
        t.join().unwrap();
    }
    tally.lock().assert_complete(N, PER);
    let st = chan.stats();
    assert_eq!((st.sent, st.received, st.pending), (40_000, 40_000, 0));
    // End of stream disabled the source: nothing more, loop fd idle.
    assert_eq!(lp.run_once(Some(Duration::ZERO)).unwrap(), 0);
    assert!(!readable(lp.fd().as_raw_fd()));
    assert_eq!(lp.source_error(id).unwrap(), 0);
    assert_eq!(tally.lock().closed, 1);
}

#[test]
fn chan_source_budget_bounds_each_iteration_under_producers() {
    const N: usize = 3;
    const PER: u32 = 5_000;
    const BUDGET: usize = 7;
    let lp = Loop::new().unwrap();
    let chan = Chan::new(Options::new(256)).unwrap();
    let tally = Arc::new(Mutex::new(Tally::new(N)));
    let t = tally.clone();
    let id = lp.add_chan(&chan, move |_, _, ev| {
        t.lock().event(ev);
        Ok(())
    });
    let id = id.unwrap();
    lp.set_budget(id, BUDGET).unwrap();
    // An always-readable pipe: it must get its turn in every iteration.
    let (r, w) = pipe();
    write_byte(&w);
    let busy = counter();
    let b = busy.clone();
    lp.add_fd(r.as_raw_fd(), IN, move |_, _, _| {
        b.fetch_add(1, SeqCst);
        Ok(())
    })
    .unwrap();

    let threads = producers(&chan, N, PER);
    let (mut iterations, mut max, mut starved) = (0usize, 0usize, 0usize);
    while tally.lock().closed == 0 {
        tally.lock().in_iteration = 0;
        let before = busy.load(SeqCst);
        lp.run_once(None).unwrap();
        iterations += 1;
        max = max.max(tally.lock().in_iteration);
        starved += usize::from(busy.load(SeqCst) != before + 1);
    }
    for t in threads {
        t.join().unwrap();
    }
    tally.lock().assert_complete(N, PER);
    assert!(
        max <= BUDGET,
        "an iteration delivered {max} > budget {BUDGET}"
    );
    assert_eq!(starved, 0, "the pipe was skipped in {starved} iterations");
    assert!(iterations >= N * PER as usize / BUDGET);
    assert_eq!(
        lp.run_once(Some(Duration::ZERO)).unwrap(),
        1,
        "only the pipe"
    );
}

#[test]
fn chan_source_exact_budgets_on_a_full_channel() {
    let lp = Loop::new().unwrap();
    // b holds more than the default budget, so one iteration takes exactly
    // that many from it.
    let b_msgs = eventq::event_loop::DEFAULT_BUDGET as u32 + 50;
    let (a, b) = (
        Chan::new(Options::new(200)).unwrap(),
        Chan::new(Options::new(b_msgs as usize)).unwrap(),
    );
    for i in 0..100u32 {
        a.send(&i.to_le_bytes(), Wait::Never).unwrap();
    }
    for i in 0..b_msgs {
        b.send(&i.to_le_bytes(), Wait::Never).unwrap();
    }
    let got_a = Arc::new(Mutex::new(Vec::new()));
    let (ga, nb, nclosed) = (got_a.clone(), counter(), counter());
    let (nb2, nc2) = (nb.clone(), nclosed.clone());
    let ida = lp
        .add_chan(&a, move |_, _, ev| {
            match ev {
                Event::Message(m) => ga.lock().push(u32::from_le_bytes(m.try_into().unwrap())),
                Event::Closed => {
                    nc2.fetch_add(1, SeqCst);
                }
                _ => unreachable!(),
            }
            Ok(())
        })
        .unwrap();
    let idb = lp
        .add_chan(&b, move |_, _, _| {
            nb2.fetch_add(1, SeqCst);
            Ok(())
        })
        .unwrap();
    lp.set_budget(ida, 3).unwrap();
    let zero = Some(Duration::ZERO);
    assert_eq!(
        lp.run_once(zero).unwrap(),
        3 + eventq::event_loop::DEFAULT_BUDGET
    );
    assert_eq!(got_a.lock().len(), 3);
    assert_eq!(nb.load(SeqCst), eventq::event_loop::DEFAULT_BUDGET);
    lp.set_budget(ida, 1).unwrap();
    lp.run_once(zero).unwrap();
    assert_eq!(got_a.lock().len(), 4);
    lp.set_budget(ida, usize::MAX).unwrap();
    lp.remove(idb).unwrap();
    assert_eq!(
        lp.run_once(zero).unwrap(),
        96,
        "a large budget drains the rest"
    );
    assert_eq!(*got_a.lock(), (0..100).collect::<Vec<_>>(), "in order");
    assert_eq!(nclosed.load(SeqCst), 0);
    a.close();
    assert_eq!(lp.run_once(zero).unwrap(), 1);
    assert_eq!(nclosed.load(SeqCst), 1, "Event::Closed once");
    assert_eq!(lp.run_once(zero).unwrap(), 0, "then disabled");
    assert!(!readable(lp.fd().as_raw_fd()));
}

#[test]
fn two_loops_share_one_channel_each_message_once() {
    const N: usize = 4;
    const PER: u32 = 5_000;
    let chan = Chan::new(Options::new(128)).unwrap();
    let mut loops = Vec::new();
    for _ in 0..2 {
        let chan = chan.clone();
        loops.push(thread::spawn(move || {
            let lp = Loop::new().unwrap();
            // Competing consumers: per-producer seqs only increase (D3);
            // the union is checked below (D1).
            let seen = Arc::new(Mutex::new((Vec::new(), 0usize, Vec::<String>::new())));
            let s = seen.clone();
            let last = Mutex::new(vec![-1i64; N]);
            let id = lp
                .add_chan(&chan, move |lp, _, ev| {
                    let mut s = s.lock();
                    match ev {
                        Event::Message(m) => match decode(m) {
                            Ok((pid, seq)) => {
                                let mut last = last.lock();
                                if i64::from(seq) <= last[pid as usize] {
                                    s.2.push(format!(
                                        "D3: {pid} {seq} after {}",
                                        last[pid as usize]
                                    ));
                                }
                                last[pid as usize] = i64::from(seq);
                                s.0.push((pid, seq));
                            }
                            Err(e) => s.2.push(e),
                        },
                        Event::Closed => {
                            s.1 += 1;
                            lp.stop();
                        }
                        _ => unreachable!(),
                    }
                    Ok(())
                })
                .unwrap();
            lp.set_budget(id, 3).unwrap();
            drop(chan);
            lp.run().unwrap();
            let s = seen.lock();
            (s.0.clone(), s.1, s.2.clone())
        }));
    }
    let threads = producers(&chan, N, PER);
    for t in threads {
        t.join().unwrap();
    }
    let mut all = Vec::new();
    for l in loops {
        let (got, closed, errors) = l.join().unwrap();
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(closed, 1, "each loop sees end of stream once");
        all.extend(got);
    }
    all.sort_unstable();
    let want: Vec<(u32, u32)> = (0..N as u32)
        .flat_map(|p| (0..PER).map(move |s| (p, s)))
        .collect();
    assert!(
        all == want,
        "D1: {} messages, want {}",
        all.len(),
        want.len()
    );
}

#[test]
fn empty_and_large_messages_arrive_whole() {
    let lp = Loop::new().unwrap();
    let chan = Chan::new(Options::new(16)).unwrap();
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    lp.add_chan(&chan, move |_, _, ev| {
        if let Event::Message(m) = ev {
            g.lock().push((m.len(), fnv1a(m)));
        }
        Ok(())
    })
    .unwrap();
    let big: Vec<u8> = (0..chan.max_msg_size())
        .map(|i| (i * 31 + (i >> 12)) as u8)
        .collect();
    chan.send(b"", Wait::Never).unwrap();
    chan.send(&big[..100_000], Wait::Never).unwrap();
    chan.send(&big, Wait::Never).unwrap();
    chan.send(b"abc", Wait::Never).unwrap();
    chan.send(b"", Wait::Never).unwrap();
    assert_eq!(lp.run_once(Some(Duration::ZERO)).unwrap(), 5);
    let want = vec![
        (0, fnv1a(b"")),
        (100_000, fnv1a(&big[..100_000])),
        (big.len(), fnv1a(&big)),
        (3, fnv1a(b"abc")),
        (0, fnv1a(b"")),
    ];
    assert_eq!(*got.lock(), want);
}

#[test]
fn failing_callback_disables_its_source_and_reports_the_error() {
    let lp = Loop::new().unwrap();
    let chan = Chan::new(Options::new(16)).unwrap();
    for i in 0..8u8 {
        chan.send(&[i], Wait::Never).unwrap();
    }
    let seen = Arc::new(Mutex::new(Vec::new()));
    let fail = Arc::new(AtomicBool::new(true));
    let (s, f) = (seen.clone(), fail.clone());
    let id = lp
        .add_chan(&chan, move |_, _, ev| {
            let Event::Message(m) = ev else { return Ok(()) };
            s.lock().push(m[0]);
            if m[0] == 1 && f.load(SeqCst) {
                return Err(Error::from_errno(libc::EIO));
            }
            Ok(())
        })
        .unwrap();
    let zero = Some(Duration::ZERO);
    assert_eq!(lp.source_error(id).unwrap(), 0);
    assert_eq!(
        lp.run_once(zero).unwrap(),
        2,
        "stops at the failing message"
    );
    assert_eq!(lp.source_error(id).unwrap(), libc::EIO);
    assert_eq!(lp.run_once(zero).unwrap(), 0, "disabled");
    assert!(!readable(lp.fd().as_raw_fd()));
    assert_eq!(chan.stats().pending, 6, "nothing lost");
    fail.store(false, SeqCst);
    lp.set_enabled(id, true).unwrap();
    assert_eq!(lp.run_once(zero).unwrap(), 6);
    assert_eq!(*seen.lock(), (0..8).collect::<Vec<u8>>());
    assert_eq!(
        lp.source_error(id).unwrap(),
        libc::EIO,
        "re-enabling clears nothing"
    );
}

#[test]
fn panicking_callback_disables_its_source_with_enotrecoverable() {
    let lp = Loop::new().unwrap();
    let (r, w) = pipe();
    write_byte(&w);
    let calls = counter();
    let c = calls.clone();
    let id = lp
        .add_fd(r.as_raw_fd(), IN, move |_, _, _| {
            c.fetch_add(1, SeqCst);
            panic!("a callback panics (expected by this test)");
        })
        .unwrap();
    assert_eq!(lp.run_once(Some(Duration::ZERO)).unwrap(), 1);
    assert_eq!(lp.source_error(id).unwrap(), libc::ENOTRECOVERABLE);
    assert_eq!(lp.run_once(Some(Duration::ZERO)).unwrap(), 0);
    assert_eq!(calls.load(SeqCst), 1);
    // The loop goes on: posts still run.
    let ran = counter();
    let r2 = ran.clone();
    lp.post(move |_| {
        r2.fetch_add(1, SeqCst);
    })
    .unwrap();
    lp.run_once(Some(Duration::ZERO)).unwrap();
    assert_eq!(ran.load(SeqCst), 1);
}

#[test]
fn the_source_keeps_its_channel() {
    let lp = Loop::new().unwrap();
    let chan = Chan::new(Options::new(16)).unwrap();
    let tx = chan.clone();
    let n = counter();
    let n2 = n.clone();
    let id = lp
        .add_chan(&chan, move |_, _, _| {
            n2.fetch_add(1, SeqCst);
            Ok(())
        })
        .unwrap();
    drop(chan);
    for _ in 0..4 {
        tx.send(b"m", Wait::Never).unwrap();
    }
    tx.close();
    lp.run_once(Some(Duration::ZERO)).unwrap();
    assert_eq!(n.load(SeqCst), 5, "4 messages and end of stream");
    lp.remove(id).unwrap();
    assert!(
        tx.into_final_stats().is_some(),
        "removing the source released its handle"
    );
}

// ---------------------------------------------------------------------------
// Removal during dispatch (D8)
// ---------------------------------------------------------------------------

/// Ids shared between callbacks, filled in after the adds.
type Ids = Arc<Mutex<Vec<SourceId>>>;

#[test]
fn callback_removing_itself() {
    let lp = Loop::new().unwrap();
    let (r, w) = pipe();
    write_byte(&w);
    let (calls, dropped) = (counter(), counter());
    let (c, guard, d) = (calls.clone(), OnDrop(dropped.clone()), dropped.clone());
    let results = Arc::new(Mutex::new(Vec::new()));
    let res = results.clone();
    let id = lp
        .add_fd(r.as_raw_fd(), IN, move |lp, me, _| {
            let _ = &guard;
            c.fetch_add(1, SeqCst);
            let mut res = res.lock();
            res.push(lp.remove(me).is_ok());
            res.push(matches!(lp.remove(me), Err(Error::Stale)));
            res.push(matches!(lp.set_enabled(me, true), Err(Error::Stale)));
            res.push(matches!(lp.source_error(me), Err(Error::Stale)));
            res.push(d.load(SeqCst) == 0); // not dropped during its own call
            Ok(())
        })
        .unwrap();
    assert_eq!(lp.run_once(Some(Duration::ZERO)).unwrap(), 1);
    assert_eq!(*results.lock(), vec![true; 5]);
    assert_eq!(dropped.load(SeqCst), 1, "dropped right after its call");
    assert_eq!(
        lp.run_once(Some(Duration::ZERO)).unwrap(),
        0,
        "fd still ready, no call"
    );
    assert!(matches!(lp.remove(id), Err(Error::Stale)));
    drop(lp);
    assert_eq!(dropped.load(SeqCst), 1, "once");
    assert_eq!(calls.load(SeqCst), 1);
}

#[test]
fn chan_callback_removing_itself_stops_within_the_budget() {
    let lp = Loop::new().unwrap();
    let chan = Chan::new(Options::new(64)).unwrap();
    for _ in 0..20 {
        chan.send(b"m", Wait::Never).unwrap();
    }
    let dropped = counter();
    let guard = OnDrop(dropped.clone());
    lp.add_chan(&chan, move |lp, me, _| {
        let _ = &guard;
        lp.remove(me).unwrap();
        Ok(())
    })
    .unwrap();
    assert_eq!(lp.run_once(Some(Duration::ZERO)).unwrap(), 1);
    assert_eq!(dropped.load(SeqCst), 1);
    assert_eq!(chan.stats().pending, 19);
    assert_eq!(lp.run_once(Some(Duration::ZERO)).unwrap(), 0);
    assert!(!readable(lp.fd().as_raw_fd()));
}

/// Sources of every kind, all ready before the next iteration: two pipes,
/// a timer that has expired, a channel with one message, a signal pending
/// for this thread. Returns their drop counters; each callback runs `act`.
struct Ready {
    _pipes: Vec<(OwnedFd, OwnedFd)>,
    _chan: Chan,
    drops: Vec<Arc<AtomicUsize>>,
    calls: Arc<AtomicUsize>,
    ids: Ids,
}

type Act = Arc<dyn Fn(&Loop, SourceId, &[SourceId]) + Send + Sync>;

fn make_ready(lp: &Loop, signo: i32, act: Act) -> Ready {
    let ids: Ids = Arc::new(Mutex::new(Vec::new()));
    let calls = counter();
    let mut drops = Vec::new();
    let mut cb = || {
        let d = counter();
        drops.push(d.clone());
        let (guard, ids, calls, act) = (OnDrop(d), ids.clone(), calls.clone(), act.clone());
        move |lp: &Loop, me: SourceId, _: Event<'_>| -> eventq::Result<()> {
            let _ = &guard;
            calls.fetch_add(1, SeqCst);
            let all = ids.lock().clone();
            act(lp, me, &all);
            Ok(())
        }
    };
    // The timer first and alone: a readable loop fd then means "expired".
    let t = lp
        .add_timer(Duration::from_nanos(1), Duration::ZERO, cb())
        .unwrap();
    wait_readable(lp.fd().as_raw_fd());
    let pipes = vec![pipe(), pipe()];
    let p0 = lp.add_fd(pipes[0].0.as_raw_fd(), IN, cb()).unwrap();
    let p1 = lp.add_fd(pipes[1].0.as_raw_fd(), IN, cb()).unwrap();
    let chan = Chan::new(Options::new(4)).unwrap();
    let c = lp.add_chan(&chan, cb()).unwrap();
    let s = lp.add_signal(signo, cb()).unwrap();
    ids.lock().extend([t, p0, p1, c, s]);
    write_byte(&pipes[0].1);
    write_byte(&pipes[1].1);
    chan.send(b"m", Wait::Never).unwrap();
    // Thread-directed: pending for this thread only, which has it blocked.
    // SAFETY: pthread_kill on the calling thread with a blocked signal.
    let rc = unsafe { libc::pthread_kill(libc::pthread_self(), signo) };
    assert_eq!(rc, 0);
    Ready {
        _pipes: pipes,
        _chan: chan,
        drops,
        calls,
        ids,
    }
}

/// Takes a pending `signo` of this thread, if any, without waiting.
fn drain_signal(signo: i32) {
    // SAFETY: plain sigset manipulation and a zero-timeout sigtimedwait.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, signo);
        let zero = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        while libc::sigtimedwait(&set, std::ptr::null_mut(), &zero) > 0 {}
    }
}

#[test]
fn removing_other_ready_sources_of_every_kind_in_the_same_batch() {
    let lp = Loop::new().unwrap();
    let first = Arc::new(AtomicBool::new(true));
    let f = first.clone();
    let ready = make_ready(
        &lp,
        libc::SIGUSR1,
        Arc::new(move |lp: &Loop, me: SourceId, all: &[SourceId]| {
            if f.swap(false, SeqCst) {
                for &o in all.iter().filter(|&&o| o != me) {
                    lp.remove(o).unwrap();
                }
            }
        }),
    );
    assert_eq!(
        lp.run_once(Some(Duration::ZERO)).unwrap(),
        1,
        "five ready, one runs"
    );
    assert_eq!(ready.calls.load(SeqCst), 1);
    let dropped: Vec<usize> = ready.drops.iter().map(|d| d.load(SeqCst)).collect();
    assert_eq!(
        dropped.iter().sum::<usize>(),
        4,
        "four dropped: {dropped:?}"
    );
    let again = lp.run_once(Some(Duration::ZERO)).unwrap();
    assert!(again <= 1, "only the survivor may run again");
    assert_eq!(ready.calls.load(SeqCst), 1 + again);
    let ids = ready.ids.lock().clone();
    let stale = ids
        .iter()
        .filter(|&&id| matches!(lp.remove(id), Err(Error::Stale)));
    assert_eq!(stale.count(), 4);
    drop(lp);
    assert!(
        ready.drops.iter().all(|d| d.load(SeqCst) == 1),
        "each dropped once"
    );
    drain_signal(libc::SIGUSR1);
}

#[test]
fn removing_every_source_from_one_callback() {
    let lp = Loop::new().unwrap();
    let first = Arc::new(AtomicBool::new(true));
    let f = first.clone();
    let ready = make_ready(
        &lp,
        libc::SIGUSR2,
        Arc::new(move |lp: &Loop, _: SourceId, all: &[SourceId]| {
            if f.swap(false, SeqCst) {
                for &o in all {
                    lp.remove(o).unwrap();
                }
            }
        }),
    );
    assert_eq!(lp.run_once(Some(Duration::ZERO)).unwrap(), 1);
    assert!(
        ready.drops.iter().all(|d| d.load(SeqCst) == 1),
        "all dropped once"
    );
    assert_eq!(lp.run_once(Some(Duration::ZERO)).unwrap(), 0);
    assert!(
        !readable(lp.fd().as_raw_fd()),
        "loop fd idle though every fd is ready"
    );
    // The loop still works.
    let ran = counter();
    let r = ran.clone();
    lp.post(move |_| {
        r.fetch_add(1, SeqCst);
    })
    .unwrap();
    assert_eq!(lp.run_once(Some(Duration::ZERO)).unwrap(), 1);
    assert_eq!(ran.load(SeqCst), 1);
    drop(lp);
    assert!(ready.drops.iter().all(|d| d.load(SeqCst) == 1));
    drain_signal(libc::SIGUSR2);
}

#[test]
fn disabling_other_ready_sources_in_the_same_batch() {
    let lp = Loop::new().unwrap();
    let ids: Ids = Arc::new(Mutex::new(Vec::new()));
    let first = Arc::new(AtomicBool::new(true));
    let calls = counter();
    let pipes: Vec<_> = (0..3).map(|_| pipe()).collect();
    for (r, w) in &pipes {
        let (ids2, f, c) = (ids.clone(), first.clone(), calls.clone());
        let id = lp
            .add_fd(r.as_raw_fd(), IN, move |lp, me, _| {
                c.fetch_add(1, SeqCst);
                if f.swap(false, SeqCst) {
                    for &o in ids2.lock().iter().filter(|&&o| o != me) {
                        lp.set_enabled(o, false).unwrap();
                    }
                }
                Ok(())
            })
            .unwrap();
        ids.lock().push(id);
        write_byte(w);
    }
    let zero = Some(Duration::ZERO);
    assert_eq!(lp.run_once(zero).unwrap(), 1);
    assert_eq!(lp.run_once(zero).unwrap(), 1, "the disabled stay quiet");
    for &id in ids.lock().iter() {
        lp.set_enabled(id, true).unwrap();
    }
    assert_eq!(lp.run_once(zero).unwrap(), 3);
    assert_eq!(calls.load(SeqCst), 5);
}

#[test]
fn a_new_source_on_a_removed_sources_fd_gets_no_stale_event() {
    let lp = Loop::new().unwrap();
    let pipes = [pipe(), pipe()];
    let ids: Ids = Arc::new(Mutex::new(Vec::new()));
    let new_calls = counter();
    let swapped = Arc::new(AtomicBool::new(false));
    for (i, (r, w)) in pipes.iter().enumerate() {
        let other_fd = pipes[1 - i].0.as_raw_fd();
        let (ids2, nc, sw) = (ids.clone(), new_calls.clone(), swapped.clone());
        let id = lp
            .add_fd(r.as_raw_fd(), IN, move |lp, me, _| {
                if !sw.swap(true, SeqCst) {
                    let other = *ids2.lock().iter().find(|&&o| o != me).unwrap();
                    lp.remove(other).unwrap();
                    let nc = nc.clone();
                    lp.add_fd(other_fd, IN, move |_, _, _| {
                        nc.fetch_add(1, SeqCst);
                        Ok(())
                    })
                    .unwrap();
                }
                Ok(())
            })
            .unwrap();
        ids.lock().push(id);
        write_byte(w);
    }
    let zero = Some(Duration::ZERO);
    assert_eq!(lp.run_once(zero).unwrap(), 1);
    assert_eq!(
        new_calls.load(SeqCst),
        0,
        "the stale event did not reach it"
    );
    assert_eq!(lp.run_once(zero).unwrap(), 2);
    assert_eq!(new_calls.load(SeqCst), 1);
}

#[test]
fn a_post_removing_a_ready_source() {
    let lp = Loop::new().unwrap();
    let (r, w) = pipe();
    write_byte(&w);
    let (calls, dropped) = (counter(), counter());
    let (c, guard) = (calls.clone(), OnDrop(dropped.clone()));
    let id = lp
        .add_fd(r.as_raw_fd(), IN, move |_, _, _| {
            let _ = &guard;
            c.fetch_add(1, SeqCst);
            Ok(())
        })
        .unwrap();
    let at_post = Arc::new(Mutex::new(None));
    let (ap, c2, d2) = (at_post.clone(), calls.clone(), dropped.clone());
    lp.post(move |lp| {
        lp.remove(id).unwrap();
        *ap.lock() = Some((c2.load(SeqCst), d2.load(SeqCst)));
    })
    .unwrap();
    lp.run_once(Some(Duration::ZERO)).unwrap();
    let (calls_then, dropped_then) = at_post.lock().expect("the post ran");
    assert_eq!(dropped_then, 1, "dropped inside remove");
    assert_eq!(calls.load(SeqCst), calls_then, "no call after the post");
    assert_eq!(lp.run_once(Some(Duration::ZERO)).unwrap(), 0);
}

#[test]
fn dropping_the_loop_drops_every_callback_once_and_no_pending_post_runs() {
    let lp = Loop::new().unwrap();
    let drops: Vec<_> = (0..9).map(|_| counter()).collect();
    let g = |i: usize| OnDrop(drops[i].clone());
    let (r, w) = pipe();
    let (r2, w2) = pipe();
    let chan = Chan::new(Options::new(4)).unwrap();
    let closed = Chan::new(Options::new(4)).unwrap();
    closed.close();
    macro_rules! cb {
        ($i:expr) => {{
            let guard = g($i);
            move |_: &Loop, _: SourceId, _: Event<'_>| -> eventq::Result<()> {
                let _ = &guard;
                Ok(())
            }
        }};
    }
    // The one-shot timer first and alone, so a readable loop fd means it
    // expired; it fires (and disables itself) in the runs below.
    lp.add_timer(Duration::from_nanos(1), Duration::ZERO, cb!(8))
        .unwrap();
    wait_readable(lp.fd().as_raw_fd());
    lp.add_fd(r.as_raw_fd(), IN, cb!(0)).unwrap();
    lp.add_timer(Duration::from_secs(100), Duration::ZERO, cb!(1))
        .unwrap();
    lp.add_timer(Duration::from_secs(100), Duration::from_millis(1), cb!(2))
        .unwrap();
    lp.add_chan(&chan, cb!(3)).unwrap();
    lp.add_chan(&closed, cb!(4)).unwrap(); // gets end of stream, disabled
    let d = lp.add_fd(w.as_raw_fd(), OUT, cb!(5)).unwrap();
    lp.set_enabled(d, false).unwrap();
    let rm = lp.add_fd(r2.as_raw_fd(), IN, cb!(6)).unwrap();
    lp.remove(rm).unwrap();
    let guard = g(7);
    lp.add_fd(w2.as_raw_fd(), OUT, move |_, _, _| {
        let _ = &guard;
        Err(Error::Invalid("fails")) // disabled by its failure
    })
    .unwrap();
    while lp.run_once(Some(Duration::ZERO)).unwrap() > 0 {}
    let ran = counter();
    for _ in 0..5 {
        let r = ran.clone();
        lp.post(move |_| {
            r.fetch_add(1, SeqCst);
        })
        .unwrap();
    }
    let h = lp.handle();
    let before: usize = drops.iter().map(|d| d.load(SeqCst)).sum();
    assert_eq!(before, 1, "only the removed one");
    drop(lp);
    let after: Vec<usize> = drops.iter().map(|d| d.load(SeqCst)).collect();
    assert_eq!(after, vec![1; 9], "each callback dropped exactly once");
    assert_eq!(ran.load(SeqCst), 0, "pending posts never ran");
    assert!(matches!(h.post(|_| {}), Err(Error::Closed)));
    h.stop(); // a no-op once the loop is gone
}

#[test]
fn remove_from_another_thread_waits_and_the_callback_never_runs_after() {
    const ROUNDS: usize = 300;
    let lp = Arc::new(Loop::new().unwrap());
    let (r, w) = pipe();
    write_byte(&w); // always readable
    let chan = Chan::new(Options::new(1024)).unwrap();
    let flood = {
        let chan = chan.clone();
        thread::spawn(move || loop {
            match chan.send(b"f", Wait::For(Duration::from_millis(1))) {
                Err(Error::Closed) => break,
                _ => continue,
            }
        })
    };
    let runner = {
        let lp = lp.clone();
        thread::spawn(move || lp.run())
    };
    let in_cb = Arc::new(AtomicBool::new(false));
    let removed = Arc::new(AtomicBool::new(false));
    let after = counter();
    let (mut still_in_cb, mut late_drop, mut total_after) = (0, 0, 0);
    for round in 0..ROUNDS {
        removed.store(false, SeqCst);
        let dropped = counter();
        let (tx, rx) = mpsc::sync_channel::<()>(1);
        let calls = counter();
        let (ic, rm, af, c, guard) = (
            in_cb.clone(),
            removed.clone(),
            after.clone(),
            calls.clone(),
            OnDrop(dropped.clone()),
        );
        let cb = move |_: &Loop, _: SourceId, _: Event<'_>| -> eventq::Result<()> {
            let _ = &guard;
            ic.store(true, SeqCst);
            if rm.load(SeqCst) {
                af.fetch_add(1, SeqCst);
            }
            for _ in 0..2000 {
                std::hint::spin_loop(); // widen the window remove must wait out
            }
            if c.fetch_add(1, SeqCst) + 1 == 3 {
                let _ = tx.try_send(());
            }
            ic.store(false, SeqCst);
            Ok(())
        };
        let id = if round % 2 == 0 {
            lp.add_fd(r.as_raw_fd(), IN, cb).unwrap()
        } else {
            lp.add_chan(&chan, cb).unwrap()
        };
        rx.recv().unwrap(); // it ran 3 times: it runs now or is about to
        lp.remove(id).unwrap();
        still_in_cb += usize::from(in_cb.load(SeqCst));
        late_drop += usize::from(dropped.load(SeqCst) != 1);
        removed.store(true, SeqCst);
        // Two more loop iterations at least.
        for _ in 0..2 {
            let (ptx, prx) = mpsc::sync_channel(1);
            lp.post(move |_| ptx.send(()).unwrap()).unwrap();
            prx.recv().unwrap();
        }
        total_after += after.swap(0, SeqCst);
    }
    assert_eq!(still_in_cb, 0, "remove returned while the callback ran");
    assert_eq!(
        late_drop, 0,
        "the callback was not dropped once before remove returned"
    );
    assert_eq!(total_after, 0, "the callback ran after remove returned");
    lp.stop();
    runner.join().unwrap().unwrap();
    chan.close();
    flood.join().unwrap();
}

#[test]
fn stale_ids_and_wrong_kinds() {
    let lp = Loop::new().unwrap();
    let (r, _w) = pipe();
    let chan = Chan::new(Options::new(4)).unwrap();
    let f = lp.add_fd(r.as_raw_fd(), IN, |_, _, _| Ok(())).unwrap();
    let t = lp
        .add_timer(Duration::from_secs(100), Duration::ZERO, |_, _, _| Ok(()))
        .unwrap();
    let c = lp.add_chan(&chan, |_, _, _| Ok(())).unwrap();
    let inval = |r: eventq::Result<()>| matches!(r, Err(Error::Invalid(_)));
    assert!(inval(lp.set_budget(c, 0)));
    assert!(inval(lp.set_budget(f, 3)));
    assert!(inval(lp.set_budget(t, 3)));
    assert!(inval(lp.set_timer(f, Duration::ZERO, Duration::ZERO)));
    assert!(inval(lp.set_timer(c, Duration::ZERO, Duration::ZERO)));
    assert!(inval(lp.set_events(t, IN)));
    assert!(inval(lp.set_events(c, IN)));
    assert!(inval(lp.set_events(f, 0)));
    assert!(inval(lp.set_events(f, IN | 0x40)));
    lp.set_budget(c, 1).unwrap();
    for id in [f, t, c] {
        lp.remove(id).unwrap();
        assert!(matches!(lp.remove(id), Err(Error::Stale)));
        assert!(matches!(lp.set_enabled(id, true), Err(Error::Stale)));
        assert!(matches!(lp.source_error(id), Err(Error::Stale)));
    }
    assert!(matches!(lp.set_events(f, IN), Err(Error::Stale)));
    assert!(matches!(
        lp.set_timer(t, Duration::ZERO, Duration::ZERO),
        Err(Error::Stale)
    ));
    assert!(matches!(lp.set_budget(c, 2), Err(Error::Stale)));
    assert_eq!(Error::Stale.errno(), libc::ESTALE);
}

#[test]
fn a_panic_mid_batch_takes_no_further_message() {
    let lp = Loop::new().unwrap();
    let chan = Chan::new(Options::new(16)).unwrap();
    for i in 0u8..6 {
        chan.send(&[i], Wait::Never).unwrap();
    }
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let id = lp
        .add_chan(&chan, move |_, _, ev| {
            let Event::Message(m) = ev else {
                panic!("{ev:?}")
            };
            s.lock().push(m[0]);
            if m[0] == 2 {
                panic!("a callback panics (expected by this test)");
            }
            Ok(())
        })
        .unwrap();
    assert_eq!(lp.run_once(Some(Duration::ZERO)).unwrap(), 3);
    assert_eq!(lp.source_error(id).unwrap(), libc::ENOTRECOVERABLE);
    assert_eq!(*seen.lock(), [0, 1, 2]);
    // The rest stayed in the channel, in order.
    let mut buf = [0u8; 1];
    for i in 3u8..6 {
        assert_eq!(chan.recv_into(&mut buf, Wait::Never).unwrap(), 1);
        assert_eq!(buf[0], i);
    }
    assert_eq!(lp.run_once(Some(Duration::ZERO)).unwrap(), 0);
}

/// Messages past the slot's inline size reach the callback by swapping the
/// slot's buffer with the loop's spare one: over several laps of a small
/// ring, with lengths that grow and shrink and other receivers taking some
/// (`recv` takes the slot's buffer, `recv_into` copies), each arrives whole.
#[test]
fn long_messages_arrive_whole_through_the_loop_over_many_laps() {
    let lp = Loop::new().unwrap();
    let chan = Chan::new(Options::new(4)).unwrap();
    let msg = |i: usize| -> Vec<u8> {
        let len = [49, 4000, 64, 1024, 0, 200, 48, 7000][i % 8] + i % 3;
        (0..len).map(|k| (k * 31 + i) as u8).collect()
    };
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    lp.add_chan(&chan, move |_, _, ev| {
        if let Event::Message(m) = ev {
            g.lock().push(m.to_vec());
        }
        Ok(())
    })
    .unwrap();
    let mut want = Vec::new();
    let mut buf = vec![0u8; 8192];
    for i in 0..200 {
        for j in 0..3 {
            let m = msg(3 * i + j);
            chan.send(&m, Wait::Never).unwrap();
            want.push(m);
        }
        match i % 3 {
            0 => {
                let n = chan.recv_into(&mut buf, Wait::Never).unwrap();
                got.lock().push(buf[..n].to_vec());
            }
            1 => {
                let m = chan.recv(Wait::Never).unwrap();
                got.lock().push(m);
            }
            _ => {}
        }
        lp.run_once(Some(Duration::ZERO)).unwrap();
    }
    assert_eq!(*got.lock(), want);
}

/// `run` with one busy channel source goes from budget to budget without an
/// `epoll_wait`, but only while nothing else could be ready: a post, a new
/// source and a stop, each made by a callback while thousands of messages
/// are still queued, take effect within two budgets (the one running, and
/// the one that may come first in the next epoll batch). Alone again, the
/// source drains the rest in one run, past its budget, and ends the stream.
#[test]
fn a_lone_busy_channel_source_yields_to_posts_new_sources_and_stop() {
    const QUEUED: usize = 5_000;
    const BUDGET: usize = 16;
    const AT: usize = 100;
    let lp = Loop::new().unwrap();
    let chan = Chan::new(Options::new(QUEUED)).unwrap();
    for i in 0..QUEUED as u32 {
        chan.send(&i.to_le_bytes(), Wait::Never).unwrap();
    }
    let seen = counter();
    let post_at = Arc::new(AtomicUsize::new(usize::MAX));
    let fd_at = Arc::new(AtomicUsize::new(usize::MAX));
    let (r, w) = pipe();
    write_byte(&w);
    let rfd = r.as_raw_fd();
    let (s, p, f) = (seen.clone(), post_at.clone(), fd_at.clone());
    let id = lp
        .add_chan(&chan, move |lp, _, ev| {
            let m = match ev {
                Event::Message(m) => m,
                Event::Closed => {
                    lp.stop();
                    return Ok(());
                }
                _ => panic!("{ev:?}"),
            };
            let n = s.fetch_add(1, SeqCst) + 1;
            assert_eq!(u32::from_le_bytes(m.try_into().unwrap()) as usize, n - 1);
            if n == AT {
                let (s, p) = (s.clone(), p.clone());
                lp.post(move |_| p.store(s.load(SeqCst), SeqCst)).unwrap();
            } else if n == 4 * AT {
                let (s, f) = (s.clone(), f.clone());
                lp.add_fd(rfd, IN, move |lp, id, _| {
                    f.store(s.load(SeqCst), SeqCst);
                    lp.remove(id)
                })
                .unwrap();
            } else if n == 8 * AT {
                lp.stop();
            }
            Ok(())
        })
        .unwrap();
    lp.set_budget(id, BUDGET).unwrap();
    lp.run().unwrap();
    let post_at = post_at.load(SeqCst);
    assert!(
        (AT..=AT + 2 * BUDGET).contains(&post_at),
        "the post ran after message {post_at}"
    );
    let fd_at = fd_at.load(SeqCst);
    assert!(
        (4 * AT..=4 * AT + 2 * BUDGET).contains(&fd_at),
        "the new source ran after message {fd_at}"
    );
    assert_eq!(seen.load(SeqCst), 8 * AT, "the stop ends the dispatch");
    chan.close();
    lp.run().unwrap();
    assert_eq!(seen.load(SeqCst), QUEUED);
    assert_eq!(
        lp.run_once(Some(Duration::ZERO)).unwrap(),
        0,
        "disabled at end of stream"
    );
}
