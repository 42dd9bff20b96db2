// SPDX-License-Identifier: MIT OR Apache-2.0
//! D1 exactly once, D2 whole, D3 per-producer order, under real concurrency:
//! several producers and consumers on real threads, each with its own handle
//! (clone), moving self-checking messages of 16..=2064 bytes through every
//! send and receive call (send, send_batch, recv_into, recv, recv_batch) in
//! every wait mode, plus a poll(2) consumer and an event-loop producer that
//! wait on the fds and only ever call with `Wait::Never`.
//!
//! D4/D6 are checked at the quiescent point after all threads are joined;
//! close in the middle of the stream (from a consumer, a producer, or the
//! main thread while producers are blocked) must lose nothing accepted.

mod common;

use common::fds;

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use common::*;
use eventq::{Chan, Error, Options, Wait};

/// A short timeout, used only to exercise the timed-wait path: a timed-out
/// call is simply retried, no result depends on the duration.
const TICK: Duration = Duration::from_millis(1);

/// Who closes the channel, and when.
#[derive(Clone, Copy, Debug)]
enum Closer {
    /// The main thread, after every producer has finished and been joined.
    MainAfterProducers,
    /// The consumer whose receive brings the total to this many.
    ConsumerAtTotal(u32),
    /// Producer 0, once it has had this many messages accepted.
    ProducerAt(u32),
    /// Every consumer quits once the total reaches this many; the main
    /// thread joins them, then closes while producers are (or are about to
    /// be) blocked on the full channel, then drains what is left itself.
    MainAfterConsumersQuit(u32),
}

struct Run {
    producers: u32,
    consumers: u32,
    /// Messages each producer sends if the channel stays open.
    per_producer: u32,
    opts: fn() -> Options,
    closer: Closer,
    seed: u64,
}

/// Sends messages (id, 0), (id, 1), ... until `count` are accepted or the
/// channel is closed; returns how many were accepted. Each step picks a call
/// at random: a blocking send, a timed send, a batch, or (always, for an
/// event-loop producer) a non-blocking send or batch that waits in poll(2)
/// on the send fd after `WouldBlock` (D5: the fd must come back).
fn produce(
    ch: &Chan,
    id: u32,
    count: u32,
    seed: u64,
    event_loop: bool,
    close_at: Option<u32>,
) -> u32 {
    let mut rng = Rng::new(seed);
    let mut next = 0u32;
    let mut batch: Vec<Vec<u8>> = Vec::new();
    while next < count {
        if close_at == Some(next) {
            ch.close();
            return next;
        }
        let room = close_at.unwrap_or(count).min(count) - next;
        let mode = if event_loop { 3 } else { rng.below(4) };
        let k = (rng.range(1, 16) as u32).min(room);
        let res = match mode {
            0 => ch.send(&encode(id, next), Wait::Forever).map(|()| 1),
            1 => match ch.send(&encode(id, next), Wait::For(TICK)) {
                Err(Error::TimedOut) => Ok(0),
                r => r.map(|()| 1),
            },
            _ => {
                batch.clear();
                batch.extend((next..next + k).map(|s| encode(id, s)));
                let wait = match mode {
                    2 if rng.chance(1, 2) => Wait::Forever,
                    2 => Wait::For(TICK),
                    _ => Wait::Never,
                };
                let r = if k == 1 && rng.chance(1, 2) {
                    ch.send(&batch[0], wait).map(|()| 1)
                } else {
                    ch.send_batch(batch.iter().map(Vec::as_slice), wait)
                };
                match r {
                    Err(Error::TimedOut) => Ok(0),
                    Err(Error::WouldBlock) => {
                        assert_eq!(wait, Wait::Never);
                        wait_readable(
                            ch.send_fd().unwrap().as_raw_fd(),
                            "event-loop producer on the send fd",
                        );
                        Ok(0)
                    }
                    Ok(0) => panic!("send_batch of {k} accepted none without an error"),
                    r => r,
                }
            }
        };
        match res {
            Ok(n) => next += n as u32,
            Err(Error::Closed) => return next,
            Err(e) => panic!("producer {id}: unexpected send error {e:?}"),
        }
    }
    next
}

/// What a consumer does besides receiving.
#[derive(Clone, Copy)]
struct ConsumerRole<'a> {
    total: &'a AtomicU32,
    /// Close the channel when the running total reaches this.
    close_at_total: Option<u32>,
    /// Stop receiving (without close) once the running total reaches this.
    quit_at_total: Option<u32>,
}

/// Records one received message; returns true when the consumer should quit.
fn record(ch: &Chan, log: &mut Vec<(u32, u32)>, msg: &[u8], role: ConsumerRole<'_>) -> bool {
    log.push(decode(msg));
    let total = role.total.fetch_add(1, Ordering::SeqCst) + 1;
    if role.close_at_total == Some(total) {
        assert!(ch.close(), "only this consumer closes");
    }
    role.quit_at_total.is_some_and(|q| total >= q)
}

/// What one receive call did.
#[derive(Debug, PartialEq)]
enum Step {
    /// Nothing available (timed out / would block).
    Nothing,
    /// Took one or more messages.
    Took,
    /// Took messages and the consumer should quit.
    Quit,
}

/// One receive by a method picked at random; `Err(Closed)` is end of
/// stream.
fn recv_some(
    ch: &Chan,
    rng: &mut Rng,
    wait: Wait,
    log: &mut Vec<(u32, u32)>,
    role: ConsumerRole<'_>,
    buf: &mut [u8],
    lens: &mut [usize],
) -> Result<Step, Error> {
    let r = match rng.below(3) {
        0 => {
            // Exactly the largest message must fit.
            let buf = &mut buf[..MAX_MSG];
            ch.recv_into(buf, wait)
                .map(|n| record(ch, log, &buf[..n], role))
        }
        1 => ch.recv(wait).map(|m| record(ch, log, &m, role)),
        _ => {
            let want = rng.range(1, lens.len());
            ch.recv_batch(buf, &mut lens[..want], wait).map(|n| {
                assert!(n >= 1 && n <= want, "recv_batch returned {n} of {want}");
                let mut off = 0;
                let mut quit = false;
                for &len in &lens[..n] {
                    quit |= record(ch, log, &buf[off..off + len], role);
                    off += len;
                }
                quit
            })
        }
    };
    match r {
        Ok(false) => Ok(Step::Took),
        Ok(true) => Ok(Step::Quit),
        Err(Error::TimedOut) => {
            assert!(matches!(wait, Wait::For(_)));
            Ok(Step::Nothing)
        }
        Err(Error::WouldBlock) => {
            assert_eq!(wait, Wait::Never);
            Ok(Step::Nothing)
        }
        Err(e) => Err(e),
    }
}

/// Receives until end of stream (or until told to quit) and returns the
/// (producer, seq) of every message in the order received. A poll consumer
/// waits in poll(2) on the receive fd and drains with `Wait::Never`.
fn consume(ch: &Chan, seed: u64, poll_consumer: bool, role: ConsumerRole<'_>) -> Vec<(u32, u32)> {
    let mut rng = Rng::new(seed);
    let mut log = Vec::new();
    let mut buf = vec![0u8; 4 * MAX_MSG];
    let mut lens = [0usize; 16];
    loop {
        if poll_consumer {
            wait_readable(ch.recv_fd().as_raw_fd(), "poll consumer on the receive fd");
            // Drain: a readable fd with nothing to take is allowed only as
            // a transient race, and then the receive says WouldBlock.
            loop {
                match recv_some(
                    ch,
                    &mut rng,
                    Wait::Never,
                    &mut log,
                    role,
                    &mut buf,
                    &mut lens,
                ) {
                    Ok(Step::Took) => {}
                    Ok(Step::Nothing) => break,
                    Ok(Step::Quit) | Err(Error::Closed) => return log,
                    Err(e) => panic!("poll consumer: unexpected receive error {e:?}"),
                }
            }
        } else {
            let wait = if rng.chance(3, 4) {
                Wait::Forever
            } else {
                Wait::For(TICK)
            };
            match recv_some(ch, &mut rng, wait, &mut log, role, &mut buf, &mut lens) {
                Ok(Step::Took | Step::Nothing) => {}
                Ok(Step::Quit) | Err(Error::Closed) => return log,
                Err(e) => panic!("consumer: unexpected receive error {e:?}"),
            }
        }
    }
}

/// Closes the channel if the thread holding it panics, so that a failing
/// thread fails the test at once instead of leaving its peers blocked.
struct CloseOnPanic<'a>(&'a Chan);

impl Drop for CloseOnPanic<'_> {
    fn drop(&mut self) {
        if thread::panicking() {
            self.0.close();
        }
    }
}

fn join<T>(h: thread::ScopedJoinHandle<'_, T>) -> T {
    h.join().expect("thread panicked")
}

fn run(cfg: Run) {
    let _dog = Watchdog::new("mpmc run");
    let ch = Chan::new((cfg.opts)()).expect("valid options");
    assert!(!recv_ready(&ch) && send_ready(&ch));
    let total = AtomicU32::new(0);
    let role = ConsumerRole {
        total: &total,
        close_at_total: match cfg.closer {
            Closer::ConsumerAtTotal(n) => Some(n),
            _ => None,
        },
        quit_at_total: match cfg.closer {
            Closer::MainAfterConsumersQuit(n) => Some(n),
            _ => None,
        },
    };
    let barrier = Barrier::new((cfg.producers + cfg.consumers) as usize);
    let (accepted, logs) = thread::scope(|s| {
        let producers: Vec<_> = (0..cfg.producers)
            .map(|p| {
                let ch = ch.clone();
                let barrier = &barrier;
                let close_at = match cfg.closer {
                    Closer::ProducerAt(n) if p == 0 => Some(n),
                    _ => None,
                };
                let event_loop = p == cfg.producers - 1 && cfg.producers > 1;
                let (count, seed) = (cfg.per_producer, cfg.seed ^ u64::from(p));
                s.spawn(move || {
                    let _guard = CloseOnPanic(&ch);
                    barrier.wait();
                    produce(&ch, p, count, seed, event_loop, close_at)
                })
            })
            .collect();
        let consumers: Vec<_> = (0..cfg.consumers)
            .map(|c| {
                let ch = ch.clone();
                let barrier = &barrier;
                let poll_consumer = c == cfg.consumers - 1;
                let seed = cfg.seed ^ (u64::from(c) << 32) ^ 0xC0;
                s.spawn(move || {
                    let _guard = CloseOnPanic(&ch);
                    barrier.wait();
                    consume(&ch, seed, poll_consumer, role)
                })
            })
            .collect();
        match cfg.closer {
            Closer::MainAfterProducers => {
                let accepted: Vec<u32> = producers.into_iter().map(join).collect();
                assert!(ch.close(), "first close returns true");
                let logs: Vec<_> = consumers.into_iter().map(join).collect();
                (accepted, logs)
            }
            Closer::ConsumerAtTotal(_) | Closer::ProducerAt(_) => {
                let accepted: Vec<u32> = producers.into_iter().map(join).collect();
                let logs: Vec<_> = consumers.into_iter().map(join).collect();
                (accepted, logs)
            }
            Closer::MainAfterConsumersQuit(_) => {
                let mut logs: Vec<_> = consumers.into_iter().map(join).collect();
                // Nobody receives now: producers fill the channel and block
                // (or wait on the send fd); close must wake every one.
                assert!(ch.close(), "first close returns true");
                let accepted: Vec<u32> = producers.into_iter().map(join).collect();
                // D6: what was queued stays receivable, then end of stream.
                let mut rest = Vec::new();
                loop {
                    match ch.recv(Wait::Never) {
                        Ok(m) => rest.push(decode(&m)),
                        Err(Error::Closed) => break,
                        Err(e) => panic!("drain after close: {e:?}"),
                    }
                }
                logs.push(rest);
                (accepted, logs)
            }
        }
    });

    verify(&logs, &accepted);
    let sent: u64 = accepted.iter().map(|&n| u64::from(n)).sum();
    assert!(sent > 0);
    if let Closer::MainAfterProducers = cfg.closer {
        assert!(accepted.iter().all(|&n| n == cfg.per_producer));
    }

    // Quiescent: every thread joined, channel closed and drained.
    let st = ch.stats();
    assert_eq!(
        (st.sent, st.received, st.pending),
        (sent, sent, 0),
        "{st:?}"
    );
    assert_eq!(st.pending_bytes, 0);
    assert!(st.closed);
    assert!(st.peak_depth >= 1 && st.peak_depth <= ch.capacity() as u64);
    assert!(st.recv_doorbell_rings >= 1 && st.recv_doorbell_rings <= sent + 1);
    // D4/D6: closed and drained, both fds readable, and they stay readable
    // across receives that report end of stream.
    for _ in 0..3 {
        assert!(
            recv_ready(&ch),
            "D4: receive fd must stay readable after close"
        );
        assert!(
            send_ready(&ch),
            "D6: send fd must stay readable after close"
        );
        assert!(matches!(ch.recv(Wait::Forever), Err(Error::Closed)));
        assert!(matches!(ch.send(b"x", Wait::Never), Err(Error::Closed)));
    }
    assert!(!ch.close(), "second close returns false");
    let fin = ch.into_final_stats().expect("last handle");
    assert_eq!(fin.dropped, 0);
}

#[test]
fn mpmc_4x4_message_capacity() {
    run(Run {
        producers: 4,
        consumers: 4,
        per_producer: 2500,
        opts: || Options::new(64),
        closer: Closer::MainAfterProducers,
        seed: 1,
    });
}

#[test]
fn mpmc_4x4_byte_limit() {
    // The byte limit (three largest messages) binds long before the count.
    run(Run {
        producers: 4,
        consumers: 4,
        per_producer: 2500,
        opts: || Options::new(1024).max_bytes(3 * MAX_MSG),
        closer: Closer::MainAfterProducers,
        seed: 2,
    });
}

#[test]
fn mpmc_3x3_capacity_one() {
    // Every send but one finds the channel full: maximal wake-up traffic.
    run(Run {
        producers: 3,
        consumers: 3,
        per_producer: 1500,
        opts: || Options::new(1),
        closer: Closer::MainAfterProducers,
        seed: 3,
    });
}

#[test]
fn mpmc_1x4_single_producer_order() {
    run(Run {
        producers: 1,
        consumers: 4,
        per_producer: 6000,
        opts: || Options::new(16).low_water(0),
        closer: Closer::MainAfterProducers,
        seed: 4,
    });
}

#[test]
fn mpmc_6x1_only_a_poll_consumer() {
    // A single consumer that waits in poll(2) and drains with Wait::Never:
    // no wake-up may be lost, however the producers' sends interleave.
    run(Run {
        producers: 6,
        consumers: 1,
        per_producer: 1500,
        opts: || Options::new(32).low_water(31),
        closer: Closer::MainAfterProducers,
        seed: 5,
    });
}

#[test]
fn close_by_consumer_mid_stream_loses_nothing() {
    run(Run {
        producers: 3,
        consumers: 3,
        per_producer: u32::MAX,
        opts: || Options::new(16),
        closer: Closer::ConsumerAtTotal(4000),
        seed: 6,
    });
}

#[test]
fn close_by_producer_mid_stream_loses_nothing() {
    run(Run {
        producers: 3,
        consumers: 3,
        per_producer: u32::MAX,
        opts: || Options::new(16).max_bytes(4 * MAX_MSG),
        closer: Closer::ProducerAt(1500),
        seed: 7,
    });
}

#[test]
fn close_wakes_producers_blocked_on_full_channel_loses_nothing() {
    run(Run {
        producers: 4,
        consumers: 2,
        per_producer: u32::MAX,
        opts: || Options::new(8),
        closer: Closer::MainAfterConsumersQuit(3000),
        seed: 8,
    });
}

/// The seed article's scenario done right: a producer bursts small messages
/// while the consumer waits in an edge-triggered epoll on the receive fd
/// and drains with `Wait::Never` until `WouldBlock` on every wake-up. Every
/// message arrives once, whole, in order, and there are no more wake-ups
/// than messages (eventfd coalescing is harmless: the queue holds the what).
#[test]
fn epoll_edge_triggered_consumer_gets_every_message() {
    const N: u32 = 20_000;
    let _dog = Watchdog::new("epoll consumer");
    let ch = Chan::new(Options::new(256)).unwrap();
    let (log, wakeups) = thread::scope(|s| {
        let tx = ch.clone();
        s.spawn(move || {
            let mut rng = Rng::new(99);
            let mut seq = 0;
            while seq < N {
                // Bursts of 1..=200 back-to-back sends.
                let burst = (rng.range(1, 200) as u32).min(N - seq);
                for _ in 0..burst {
                    let mut m = Vec::with_capacity(8);
                    m.extend_from_slice(&0u32.to_le_bytes());
                    m.extend_from_slice(&seq.to_le_bytes());
                    tx.send(&m, Wait::Forever).unwrap();
                    seq += 1;
                }
            }
            tx.close();
        });
        let rx = ch.clone();
        s.spawn(move || {
            let ep = fds::Epoll::new().expect("epoll");
            ep.add(
                rx.recv_fd().as_raw_fd(),
                (libc::EPOLLIN | libc::EPOLLET) as u32,
                7,
            )
            .expect("epoll_ctl");
            let mut log = Vec::new();
            let mut wakeups = 0u64;
            let mut buf = [0u8; 64];
            'outer: loop {
                let mut out = [libc::epoll_event { events: 0, u64: 0 }; 4];
                let n = ep.wait(&mut out, Some(HANG_GUARD)).expect("epoll_wait");
                assert!(n > 0, "epoll_wait returned {n}: lost wake-up");
                wakeups += 1;
                loop {
                    match rx.recv_into(&mut buf, Wait::Never) {
                        Ok(len) => {
                            assert_eq!(len, 8, "D2: merged or split message");
                            let seq = u32::from_le_bytes(buf[4..8].try_into().unwrap());
                            log.push(seq);
                        }
                        Err(Error::WouldBlock) => break,
                        Err(Error::Closed) => break 'outer,
                        Err(e) => panic!("{e:?}"),
                    }
                }
            }
            (log, wakeups)
        })
        .join()
        .unwrap()
    });
    assert_eq!(log.len(), N as usize, "D1: messages lost or duplicated");
    assert!(
        log.iter().enumerate().all(|(i, &s)| s == i as u32),
        "D3: out of order"
    );
    assert!(wakeups >= 1 && wakeups <= u64::from(N) + 1);
    let st = ch.stats();
    assert_eq!((st.sent, st.received), (u64::from(N), u64::from(N)));
    assert!(recv_ready(&ch));
}

/// Messages of every producer stay separate even when they are all empty
/// or all the same length: receiving in batches never merges them.
#[test]
fn zero_length_messages_from_many_producers_are_each_delivered() {
    const P: usize = 4;
    const N: usize = 2000;
    let _dog = Watchdog::new("zero-length messages");
    let ch = Chan::new(Options::new(8)).unwrap();
    let got = thread::scope(|s| {
        for _ in 0..P {
            let tx = ch.clone();
            s.spawn(move || {
                for i in 0..N {
                    if i % 2 == 0 {
                        tx.send(&[], Wait::Forever).unwrap();
                    } else {
                        let n = tx.send_batch([&[][..]], Wait::Forever).unwrap();
                        assert_eq!(n, 1);
                    }
                }
            });
        }
        let rx = ch.clone();
        let h = s.spawn(move || {
            let mut count = 0;
            let mut lens = [usize::MAX; 5];
            while count < P * N {
                let n = rx.recv_batch(&mut [], &mut lens, Wait::Forever).unwrap();
                assert!(n >= 1);
                assert!(lens[..n].iter().all(|&l| l == 0));
                count += n;
            }
            count
        });
        h.join().unwrap()
    });
    assert_eq!(got, P * N);
    let st = ch.stats();
    assert_eq!(
        (st.sent, st.received, st.pending),
        ((P * N) as u64, (P * N) as u64, 0)
    );
    assert!(!recv_ready(&ch), "D4: drained and open: not readable");
}
