// SPDX-License-Identifier: MIT OR Apache-2.0
//! The Tokio wrapper (feature `tokio`): the calls, cancel safety and no
//! lost wake-up, with real threads and Tokio runtimes (current_thread, and
//! multi-thread with 8 workers, more than this machine's cores).
//!
//! Cancel safety is checked two ways: futures polled by hand a given number
//! of times, with events between the polls that send them round the
//! refused-try path, then dropped, after which nothing may be missing or
//! extra; and storms of `tokio::select!` and `timeout` races over many
//! rounds, where every message is accounted for exactly once and in order
//! per producer. A watchdog turns a hang (a lost wake-up) into a failure;
//! nothing waits on time.

#![cfg(feature = "tokio")]

mod common;

use std::collections::BTreeMap;
use std::future::Future;
use std::os::unix::net::UnixStream;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use common::{guarded, Flag};
use eventq::tokio::{select, AsyncChan};
use eventq::{Chan, Error, Options, Side, Wait};
use futures::{SinkExt, StreamExt};
use tokio::runtime::{Builder, Runtime};

/// Only a hang guard: a working channel never comes near it.
const HANG_GUARD: Duration = Duration::from_secs(120);

fn watchdog<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    guarded(what, HANG_GUARD, f)
}

fn current() -> Runtime {
    Builder::new_current_thread().enable_all().build().unwrap()
}

fn multi() -> Runtime {
    Builder::new_multi_thread()
        .worker_threads(8)
        .enable_all()
        .build()
        .unwrap()
}

/// A kind of runtime: its name and how to make one.
type Kind = (&'static str, fn() -> Runtime);

/// Both kinds of runtime.
fn runtimes() -> [Kind; 2] {
    [("current_thread", current), ("multi_thread(8)", multi)]
}

fn chan(capacity: usize) -> AsyncChan {
    AsyncChan::new(Chan::new(Options::new(capacity)).unwrap())
}

/// A message from producer `p`, number `seq`: 12 bytes, or 100 (longer
/// than a slot's inline bytes) for every third.
fn msg(p: u32, seq: u64) -> Vec<u8> {
    let mut m = Vec::with_capacity(100);
    m.extend_from_slice(&p.to_le_bytes());
    m.extend_from_slice(&seq.to_le_bytes());
    if seq % 3 == 0 {
        m.resize(100, p as u8 ^ seq as u8);
    }
    m
}

fn parse(m: &[u8]) -> (u32, u64) {
    assert!(m.len() == 12 || m.len() == 100, "D2: length {}", m.len());
    let p = u32::from_le_bytes(m[..4].try_into().unwrap());
    let seq = u64::from_le_bytes(m[4..12].try_into().unwrap());
    assert_eq!(m, &msg(p, seq)[..], "D2: the bytes of {p}/{seq}");
    (p, seq)
}

/// Every consumer's log (in the order it received) holds each producer's
/// messages in increasing order (D3), and all logs together hold each of
/// `per_producer` messages of every producer exactly once (D1).
fn check_exactly_once(logs: &[Vec<(u32, u64)>], producers: u32, per_producer: u64) {
    let mut seen: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for log in logs {
        let mut last: BTreeMap<u32, u64> = BTreeMap::new();
        for &(p, seq) in log {
            if let Some(&prev) = last.get(&p) {
                assert!(seq > prev, "D3: producer {p}: {seq} after {prev}");
            }
            last.insert(p, seq);
            seen.entry(p).or_default().push(seq);
        }
    }
    assert_eq!(seen.len(), producers as usize, "every producer arrived");
    for (p, mut seqs) in seen {
        seqs.sort_unstable();
        let n = seqs.len() as u64;
        seqs.dedup();
        assert_eq!(seqs.len() as u64, n, "D1: producer {p}: a message twice");
        assert_eq!(n, per_producer, "D1: producer {p}: messages missing");
    }
}

/// A future polled by hand with a `Flag` waker.
struct ByHand {
    flag: Arc<Flag>,
    waker: Waker,
}

impl ByHand {
    fn new() -> ByHand {
        let flag = Arc::new(Flag(AtomicBool::new(false)));
        ByHand {
            waker: Waker::from(flag.clone()),
            flag,
        }
    }

    fn poll<F: Future>(&self, fut: std::pin::Pin<&mut F>) -> Poll<F::Output> {
        self.flag.0.store(false, Ordering::SeqCst);
        fut.poll(&mut Context::from_waker(&self.waker))
    }

    /// Lets the runtime turn (its reactor delivers the fd's event) until
    /// the future polled last was woken.
    async fn until_woken(&self) {
        while !self.flag.0.load(Ordering::SeqCst) {
            tokio::task::yield_now().await;
        }
    }
}

#[test]
fn calls_behave_as_the_sync_ones() {
    current().block_on(async {
        let c = chan(4);
        c.send(b"one").await.unwrap();
        c.send(b"").await.unwrap();
        assert_eq!(c.send_batch(&[b"a", b"b", b"c"]).await.unwrap(), 2, "fills");
        assert!(matches!(c.try_send(b"x"), Err(Error::WouldBlock)));
        assert_eq!(c.recv().await.unwrap(), b"one");
        assert_eq!(c.recv().await.unwrap(), b"", "D2: empty messages count");
        let mut small = [0u8; 0];
        assert!(
            matches!(
                c.recv_into(&mut small).await,
                Err(Error::BufferTooSmall { needed: 1 })
            ),
            "D7"
        );
        let mut buf = [0u8; 8];
        let mut lens = [0usize; 4];
        assert_eq!(c.recv_batch(&mut buf, &mut lens).await.unwrap(), 2);
        assert_eq!((&buf[..2], &lens[..2]), (&b"ab"[..], &[1, 1][..]));
        assert!(matches!(c.try_recv(), Err(Error::WouldBlock)));
        assert_eq!(c.recv_batch(&mut buf, &mut []).await.unwrap(), 0);
        assert_eq!(c.send_batch::<&[u8]>(&[]).await.unwrap(), 0);
        c.try_send_batch(&[b"z".to_vec()]).unwrap();
        assert_eq!(c.try_recv_into(&mut buf).unwrap(), 1);
        c.send(b"last").await.unwrap();
        assert!(c.close());
        assert!(c.is_closed());
        assert!(matches!(c.send(b"x").await, Err(Error::Closed)), "D6");
        assert_eq!(c.recv().await.unwrap(), b"last", "D6: queued stays");
        assert!(
            matches!(c.recv().await, Err(Error::Closed)),
            "end of stream"
        );
        assert!(matches!(
            c.try_recv_batch(&mut buf, &mut lens),
            Err(Error::Closed)
        ));
        let (i, r) = select(&[]).await;
        assert!(i == 0 && matches!(r, Err(Error::Invalid(_))));
    });
}

/// A receive future polled `polls` times, each time after a message that
/// a synchronous receiver took first (so the future wakes, is refused and
/// clears its readiness), then woken by one more message and dropped: it
/// must have taken none of them.
#[test]
fn a_dropped_receive_took_nothing_at_any_poll() {
    for (name, rt) in runtimes() {
        rt().block_on(async {
            let c = chan(8);
            let sync = c.chan().clone();
            let hand = ByHand::new();
            for polls in 1..=6u64 {
                {
                    let mut fut = pin!(c.recv());
                    for k in 0..polls {
                        if k > 0 {
                            sync.send(&k.to_le_bytes(), Wait::Never).unwrap();
                            hand.until_woken().await;
                            assert_eq!(sync.recv(Wait::Never).unwrap(), k.to_le_bytes());
                        }
                        assert!(
                            hand.poll(fut.as_mut()).is_pending(),
                            "{name}: nothing to take"
                        );
                    }
                    sync.send(b"for the next", Wait::Never).unwrap();
                    hand.until_woken().await;
                } // dropped: woken, never polled again
                assert_eq!(
                    sync.recv(Wait::Never).unwrap(),
                    b"for the next",
                    "{name}: {polls} polls"
                );
                assert!(matches!(sync.recv(Wait::Never), Err(Error::WouldBlock)));
            }
            // The same for select, the stream's next, recv_into and
            // recv_batch.
            let d = chan(8);
            let sync_d = d.chan().clone();
            let set = [&c, &d];
            {
                let mut fut = pin!(select(&set));
                assert!(hand.poll(fut.as_mut()).is_pending());
                sync_d.send(b"d", Wait::Never).unwrap();
                hand.until_woken().await;
            }
            assert_eq!(
                sync_d.recv(Wait::Never).unwrap(),
                b"d",
                "{name}: select took nothing"
            );
            let mut stream = c.stream();
            {
                let mut fut = pin!(stream.next());
                assert!(hand.poll(fut.as_mut()).is_pending());
                sync.send(b"c", Wait::Never).unwrap();
                hand.until_woken().await;
            }
            assert_eq!(
                sync.recv(Wait::Never).unwrap(),
                b"c",
                "{name}: next took nothing"
            );
            let mut buf = [0u8; 8];
            {
                let mut fut = pin!(c.recv_into(&mut buf));
                assert!(hand.poll(fut.as_mut()).is_pending());
                sync.send(b"i", Wait::Never).unwrap();
                hand.until_woken().await;
            }
            assert_eq!(
                sync.recv(Wait::Never).unwrap(),
                b"i",
                "{name}: recv_into took nothing"
            );
            let mut lens = [0usize; 2];
            {
                let mut fut = pin!(c.recv_batch(&mut buf, &mut lens));
                assert!(hand.poll(fut.as_mut()).is_pending());
                sync.send(b"b", Wait::Never).unwrap();
                hand.until_woken().await;
            }
            assert_eq!(
                sync.recv(Wait::Never).unwrap(),
                b"b",
                "{name}: recv_batch took nothing"
            );
            // A stream whose wait was dropped picks up again.
            sync.send(b"again", Wait::Never).unwrap();
            assert_eq!(stream.next().await.unwrap().unwrap(), b"again");
        });
    }
}

/// A send future on a full channel, polled `polls` times, each time after
/// the channel drained to its low-water mark (the send fd's event) and was
/// filled again by a synchronous sender (so the future is refused and
/// clears its readiness), then woken by room and dropped: it must have
/// sent nothing.
#[test]
fn a_dropped_send_sent_nothing_at_any_poll() {
    for (name, rt) in runtimes() {
        rt().block_on(async {
            let c = chan(4);
            let sync = c.chan().clone();
            let hand = ByHand::new();
            let fill = |n: usize| {
                for _ in 0..n {
                    sync.send(b"filler", Wait::Never).unwrap();
                }
            };
            let drain_to_low_water = || {
                for _ in 0..2 {
                    assert_eq!(sync.recv(Wait::Never).unwrap(), b"filler");
                }
            };
            fill(4);
            for polls in 1..=6 {
                {
                    let mut fut = pin!(c.send(b"cancelled"));
                    for k in 0..polls {
                        if k > 0 {
                            drain_to_low_water();
                            hand.until_woken().await;
                            fill(2);
                        }
                        assert!(hand.poll(fut.as_mut()).is_pending(), "{name}: full");
                    }
                    drain_to_low_water();
                    hand.until_woken().await;
                } // dropped: woken, never polled again
                let s = sync.stats();
                assert_eq!(
                    s.pending, 2,
                    "{name}: {polls} polls: the dropped send sent nothing"
                );
                fill(2);
            }
            // The same for a batch and for the sink's send.
            let batch = [b"cancelled"];
            {
                let mut fut = pin!(c.send_batch(&batch));
                assert!(hand.poll(fut.as_mut()).is_pending());
                drain_to_low_water();
                hand.until_woken().await;
            }
            assert_eq!(sync.stats().pending, 2, "{name}: the batch sent nothing");
            fill(2);
            let mut sink = c.sink::<Vec<u8>>();
            {
                let mut fut = pin!(sink.send(b"sent".to_vec()));
                assert!(hand.poll(fut.as_mut()).is_pending());
            }
            drain_to_low_water();
            hand.until_woken().await;
            // Sink semantics: start_send handed the message over; a flush
            // delivers it.
            sink.flush().await.unwrap();
            let mut all = Vec::new();
            while let Ok(m) = sync.recv(Wait::Never) {
                all.push(m);
            }
            assert_eq!(all.len(), 3, "{name}: the sink sent exactly once");
            assert_eq!(all[2], b"sent");
        });
    }
}

/// Producers (async tasks and threads) send on two channels while
/// consumers receive in `tokio::select!` against a branch that wins every
/// other round, so receives are dropped all the time; producers' sends are
/// raced against `timeout(0)` and retried when cancelled. Exactly once, in
/// order, over many rounds.
#[test]
fn select_storms_lose_and_duplicate_nothing() {
    for (name, rt) in runtimes() {
        watchdog(name, move || {
            let rt = rt();
            for round in 0..30u32 {
                rt.block_on(storm_round(round));
            }
        });
    }
}

async fn storm_round(round: u32) {
    const PER: u64 = 300;
    let a = chan(2 + (round as usize % 5));
    let b = chan(3);
    let mut producers = Vec::new();
    for p in 0..4u32 {
        let tx = if p % 2 == 0 { a.clone() } else { b.clone() };
        if p < 2 {
            producers.push(tokio::spawn(async move {
                for seq in 0..PER {
                    let m = msg(p, seq);
                    loop {
                        match tokio::time::timeout(Duration::ZERO, tx.send(&m)).await {
                            Ok(r) => break r.unwrap(),
                            Err(_) => continue, // cancelled: it sent nothing
                        }
                    }
                }
            }));
        } else {
            let tx = tx.chan().clone();
            producers.push(tokio::task::spawn_blocking(move || {
                for seq in 0..PER {
                    tx.send(&msg(p, seq), Wait::Forever).unwrap();
                }
            }));
        }
    }
    let mut consumers = Vec::new();
    for _ in 0..3 {
        let (a, b) = (a.clone(), b.clone());
        consumers.push(tokio::spawn(async move {
            let mut log = Vec::new();
            let (mut a_done, mut b_done) = (false, false);
            while !(a_done && b_done) {
                tokio::select! {
                    r = a.recv(), if !a_done => match r {
                        Ok(m) => log.push(parse(&m)),
                        Err(Error::Closed) => a_done = true,
                        Err(e) => panic!("{e}"),
                    },
                    r = b.recv(), if !b_done => match r {
                        Ok(m) => log.push(parse(&m)),
                        Err(Error::Closed) => b_done = true,
                        Err(e) => panic!("{e}"),
                    },
                    _ = tokio::task::yield_now() => {}
                }
            }
            log
        }));
    }
    for p in producers {
        p.await.unwrap();
    }
    a.close();
    b.close();
    let mut logs = Vec::new();
    for c in consumers {
        logs.push(c.await.unwrap());
    }
    check_exactly_once(&logs, 4, PER);
}

/// Consumers receive under `timeout(0)` and `timeout(50 us)`, so most
/// receives are dropped after their first poll or mid-wait; one producer
/// thread and one producer task. Exactly once, in order, every round.
#[test]
fn timeout_races_lose_nothing() {
    for (name, rt) in runtimes() {
        watchdog(name, move || {
            let rt = rt();
            for round in 0..30u32 {
                rt.block_on(async move {
                    const PER: u64 = 400;
                    let c = chan(1 + round as usize % 4);
                    let tx = c.chan().clone();
                    let thread = std::thread::spawn(move || {
                        for seq in 0..PER {
                            tx.send(&msg(0, seq), Wait::Forever).unwrap();
                        }
                    });
                    let tx = c.clone();
                    let task = tokio::spawn(async move {
                        for seq in 0..PER {
                            tx.send(&msg(1, seq)).await.unwrap();
                        }
                    });
                    let mut consumers = Vec::new();
                    for k in 0..3u64 {
                        let c = c.clone();
                        consumers.push(tokio::spawn(async move {
                            let mut log = Vec::new();
                            let mut buf = [0u8; 128];
                            let limit = Duration::from_micros(50 * (k % 2));
                            loop {
                                let r = if k == 2 {
                                    tokio::time::timeout(limit, c.recv_into(&mut buf))
                                        .await
                                        .map(|r| r.map(|n| buf[..n].to_vec()))
                                } else {
                                    tokio::time::timeout(limit, c.recv()).await
                                };
                                match r {
                                    Err(_) => continue,
                                    Ok(Ok(m)) => log.push(parse(&m)),
                                    Ok(Err(Error::Closed)) => return log,
                                    Ok(Err(e)) => panic!("{e}"),
                                }
                            }
                        }));
                    }
                    task.await.unwrap();
                    tokio::task::spawn_blocking(move || thread.join().unwrap())
                        .await
                        .unwrap();
                    c.close();
                    let mut logs = Vec::new();
                    for h in consumers {
                        logs.push(h.await.unwrap());
                    }
                    check_exactly_once(&logs, 2, PER);
                });
            }
        });
    }
}

/// `select` over three channels, itself raced in `tokio::select!` against
/// a branch that wins every other round; closed channels leave the set.
#[test]
fn select_fn_storms_lose_nothing() {
    for (name, rt) in runtimes() {
        watchdog(name, move || {
            let rt = rt();
            for _ in 0..30 {
                rt.block_on(async {
                    const PER: u64 = 300;
                    let chans: Vec<AsyncChan> = (0..3).map(|i| chan(2 + i)).collect();
                    let mut producers = Vec::new();
                    for (p, c) in chans.iter().enumerate() {
                        let tx = c.chan().clone();
                        producers.push(std::thread::spawn(move || {
                            for seq in 0..PER {
                                tx.send(&msg(p as u32, seq), Wait::Forever).unwrap();
                            }
                            tx.close();
                        }));
                    }
                    let mut consumers = Vec::new();
                    for _ in 0..2 {
                        let mut open = chans.clone();
                        consumers.push(tokio::spawn(async move {
                            let mut log = Vec::new();
                            while !open.is_empty() {
                                let set: Vec<&AsyncChan> = open.iter().collect();
                                let got = tokio::select! {
                                    got = select(&set) => Some(got),
                                    _ = tokio::task::yield_now() => None,
                                };
                                match got {
                                    None => {}
                                    Some((_, Ok(m))) => log.push(parse(&m)),
                                    Some((i, Err(Error::Closed))) => {
                                        open.remove(i);
                                    }
                                    Some((_, Err(e))) => panic!("{e}"),
                                }
                            }
                            log
                        }));
                    }
                    let mut logs = Vec::new();
                    for h in consumers {
                        logs.push(h.await.unwrap());
                    }
                    for p in producers {
                        p.join().unwrap();
                    }
                    check_exactly_once(&logs, 3, PER);
                });
            }
        });
    }
}

/// A sink fed by two tasks and a stream read in `tokio::select!` against a
/// branch that wins every other round.
#[test]
fn stream_and_sink_lose_nothing() {
    for (name, rt) in runtimes() {
        watchdog(name, move || {
            let rt = rt();
            for _ in 0..30 {
                rt.block_on(async {
                    const PER: u64 = 300;
                    let c = chan(3);
                    let mut producers = Vec::new();
                    for p in 0..2u32 {
                        let mut sink = c.sink::<Vec<u8>>();
                        producers.push(tokio::spawn(async move {
                            for seq in 0..PER {
                                sink.feed(msg(p, seq)).await.unwrap();
                            }
                            sink.close().await.unwrap();
                        }));
                    }
                    let mut consumers = Vec::new();
                    for _ in 0..2 {
                        let mut stream = c.stream();
                        consumers.push(tokio::spawn(async move {
                            let mut log = Vec::new();
                            loop {
                                tokio::select! {
                                    m = stream.next() => match m {
                                        Some(m) => log.push(parse(&m.unwrap())),
                                        None => break,
                                    },
                                    _ = tokio::task::yield_now() => {}
                                }
                            }
                            assert!(futures::stream::FusedStream::is_terminated(&stream));
                            assert!(stream.next().await.is_none(), "stays ended");
                            log
                        }));
                    }
                    for p in producers {
                        p.await.unwrap();
                    }
                    c.close();
                    let mut logs = Vec::new();
                    for h in consumers {
                        logs.push(h.await.unwrap());
                    }
                    check_exactly_once(&logs, 2, PER);
                });
            }
        });
    }
}

/// No lost wake-up: producer threads send (blocking) on a small channel
/// and the last closes it, while async consumers receive until end of
/// stream; each must see end of stream and together every message. Also
/// the other way: async producers blocked on a full channel, one thread
/// receiving. Many short rounds.
#[test]
fn no_lost_wake_up() {
    for (name, rt) in runtimes() {
        watchdog(name, move || {
            let rt = rt();
            for round in 0..200u64 {
                rt.block_on(async move {
                    const PER: u64 = 200;
                    let c = chan(1 + round as usize % 8);
                    let left = Arc::new(AtomicU64::new(2));
                    let mut threads = Vec::new();
                    for p in 0..2u32 {
                        let tx = c.chan().clone();
                        let left = left.clone();
                        threads.push(std::thread::spawn(move || {
                            for seq in 0..PER {
                                tx.send(&msg(p, seq), Wait::Forever).unwrap();
                            }
                            if left.fetch_sub(1, Ordering::SeqCst) == 1 {
                                tx.close();
                            }
                        }));
                    }
                    let mut consumers = Vec::new();
                    for k in 0..3 {
                        let c = c.clone();
                        consumers.push(tokio::spawn(async move {
                            let mut log = Vec::new();
                            let mut buf = vec![0u8; 1024];
                            let mut lens = [0usize; 4];
                            loop {
                                let r = if k == 0 {
                                    c.recv_batch(&mut buf, &mut lens).await.map(|n| {
                                        let mut off = 0;
                                        for &len in &lens[..n] {
                                            log.push(parse(&buf[off..off + len]));
                                            off += len;
                                        }
                                    })
                                } else {
                                    c.recv().await.map(|m| log.push(parse(&m)))
                                };
                                match r {
                                    Ok(()) => {}
                                    Err(Error::Closed) => return log,
                                    Err(e) => panic!("{e}"),
                                }
                            }
                        }));
                    }
                    let mut logs = Vec::new();
                    for h in consumers {
                        logs.push(h.await.unwrap());
                    }
                    for t in threads {
                        t.join().unwrap();
                    }
                    check_exactly_once(&logs, 2, PER);

                    // Async senders, a thread receiving.
                    let c = chan(1 + round as usize % 8);
                    let rx = c.chan().clone();
                    let receiver = std::thread::spawn(move || {
                        let mut log = Vec::new();
                        loop {
                            match rx.recv(Wait::Forever) {
                                Ok(m) => log.push(parse(&m)),
                                Err(Error::Closed) => return log,
                                Err(e) => panic!("{e}"),
                            }
                        }
                    });
                    let mut producers = Vec::new();
                    for p in 0..3u32 {
                        let tx = c.clone();
                        producers.push(tokio::spawn(async move {
                            for seq in 0..PER {
                                if seq % 2 == 0 {
                                    tx.send(&msg(p, seq)).await.unwrap();
                                } else {
                                    let m = msg(p, seq);
                                    assert_eq!(tx.send_batch(&[m]).await.unwrap(), 1);
                                }
                            }
                        }));
                    }
                    for h in producers {
                        h.await.unwrap();
                    }
                    c.close();
                    let log = tokio::task::spawn_blocking(move || receiver.join().unwrap())
                        .await
                        .unwrap();
                    check_exactly_once(&[log], 3, PER);
                });
            }
        });
    }
}

/// Two `AsyncChan`s of one channel in one runtime (each registers its own
/// duplicate of the fd) both wait and both wake.
#[test]
fn two_wrappers_of_one_channel_share_a_runtime() {
    watchdog("two wrappers", || {
        multi().block_on(async {
            let base = Chan::new(Options::new(4)).unwrap();
            let (x, y) = (AsyncChan::new(base.clone()), AsyncChan::new(base.clone()));
            let hx = tokio::spawn(async move { x.recv().await });
            let hy = tokio::spawn(async move { y.recv().await });
            base.send(b"1", Wait::Forever).unwrap();
            base.send(b"2", Wait::Forever).unwrap();
            let mut got = [hx.await.unwrap().unwrap(), hy.await.unwrap().unwrap()];
            got.sort();
            assert_eq!(got, [b"1".to_vec(), b"2".to_vec()]);
        })
    });
}

/// A process-shared channel (both ends in this process, as two processes
/// would hold them): its fds are epoll fds, waited on the same way.
#[test]
fn process_shared_channel_ends_wait_in_tokio() {
    let made = Chan::new_shared(Options::new(4), Side::Send).unwrap();
    let (s1, s2) = UnixStream::pair().unwrap();
    made.send_to(&s1).unwrap();
    let taken = Chan::recv_from(&s2).unwrap();
    watchdog("process-shared", move || {
        multi().block_on(async move {
            const PER: u64 = 2000;
            let (tx, rx) = (AsyncChan::new(made), AsyncChan::new(taken));
            let producer = tokio::spawn(async move {
                for seq in 0..PER {
                    tx.send(&msg(0, seq)).await.unwrap();
                }
                tx.close();
            });
            let mut log = Vec::new();
            loop {
                match rx.recv().await {
                    Ok(m) => log.push(parse(&m)),
                    Err(Error::Closed) => break,
                    Err(e) => panic!("{e}"),
                }
            }
            producer.await.unwrap();
            check_exactly_once(&[log], 1, PER);
        })
    });
}

/// A receiver whose channel never empties still lets the other tasks of
/// its thread run: each call spends Tokio's task budget, so the loop
/// yields now and then. On a current_thread runtime, without that, the
/// task that ends the loop would never run (the watchdog fails the test).
#[test]
fn a_busy_channel_does_not_starve_the_thread() {
    watchdog("busy channel", || {
        current().block_on(async {
            let c = chan(16);
            for i in 0u8..16 {
                c.try_send(&[i]).unwrap();
            }
            let stop = Arc::new(AtomicBool::new(false));
            // Spawned first, so it runs first (current_thread is FIFO).
            let busy = tokio::spawn({
                let (c, stop) = (c.clone(), stop.clone());
                async move {
                    let mut n = 0u64;
                    while !stop.load(Ordering::SeqCst) {
                        let m = c.recv().await.unwrap();
                        c.try_send(&m).unwrap(); // never empty
                        n += 1;
                    }
                    n
                }
            });
            let stopper = tokio::spawn(async move { stop.store(true, Ordering::SeqCst) });
            stopper.await.unwrap();
            assert!(busy.await.unwrap() > 0);
            assert_eq!(c.chan().stats().pending, 16, "nothing lost on the way");
        })
    });
}

/// Many tasks waiting on one wrapper's fd (each event wakes them all; one
/// takes the message, the others are refused and wait again) and on a
/// second wrapper of the same channel: every message once, and every
/// task sees end of stream.
#[test]
fn many_waiters_on_one_fd() {
    for (name, rt) in runtimes() {
        watchdog(name, move || {
            rt().block_on(async {
                const PER: u64 = 500;
                let c = chan(2);
                let other = AsyncChan::new(c.chan().clone());
                let producers: Vec<_> = (0..2u32)
                    .map(|p| {
                        let tx = c.chan().clone();
                        std::thread::spawn(move || {
                            for seq in 0..PER {
                                tx.send(&msg(p, seq), Wait::Forever).unwrap();
                            }
                        })
                    })
                    .collect();
                let consumers: Vec<_> = (0..32)
                    .map(|k| {
                        let c = if k % 4 == 0 { other.clone() } else { c.clone() };
                        tokio::spawn(async move {
                            let mut log = Vec::new();
                            loop {
                                match c.recv().await {
                                    Ok(m) => log.push(parse(&m)),
                                    Err(Error::Closed) => return log,
                                    Err(e) => panic!("{e}"),
                                }
                            }
                        })
                    })
                    .collect();
                tokio::task::spawn_blocking(move || {
                    for p in producers {
                        p.join().unwrap();
                    }
                })
                .await
                .unwrap();
                c.close();
                let mut logs = Vec::new();
                for h in consumers {
                    logs.push(h.await.unwrap());
                }
                check_exactly_once(&logs, 2, PER);
            })
        });
    }
}
