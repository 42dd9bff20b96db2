// SPDX-License-Identifier: MIT OR Apache-2.0
//! The async-io wrapper (feature `async-io`): cancel safety and no lost
//! wake-up with real threads, futures' executor and async-io's reactor
//! thread. A watchdog turns a hang into a failure; nothing waits on time.

#![cfg(feature = "async-io")]

mod common;

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Waker};
use std::time::Duration;

use async_io::Timer;
use common::{guarded, Flag};
use eventq::async_io::AsyncChan;
use eventq::{Chan, Error, Options, Wait};
use futures::executor::block_on;
use futures::future::{self, Either};

const HANG_GUARD: Duration = Duration::from_secs(120);

fn watchdog<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    guarded(what, HANG_GUARD, f)
}

fn chan(capacity: usize) -> AsyncChan {
    AsyncChan::new(Chan::new(Options::new(capacity)).unwrap())
}

fn msg(p: u8, seq: u32) -> Vec<u8> {
    let mut m = vec![p];
    m.extend_from_slice(&seq.to_le_bytes());
    if seq % 3 == 0 {
        m.resize(80, p);
    }
    m
}

/// Checks each producer's messages arrive once each, in order per log.
fn check(logs: &[Vec<Vec<u8>>], producers: u8, per: u32) {
    let mut all = vec![Vec::new(); producers as usize];
    for log in logs {
        let mut last = vec![None; producers as usize];
        for m in log {
            let (p, seq) = (m[0], u32::from_le_bytes(m[1..5].try_into().unwrap()));
            assert_eq!(m, &msg(p, seq), "D2");
            if let Some(prev) = last[p as usize] {
                assert!(seq > prev, "D3: producer {p}: {seq} after {prev}");
            }
            last[p as usize] = Some(seq);
            all[p as usize].push(seq);
        }
    }
    for (p, mut seqs) in all.into_iter().enumerate() {
        seqs.sort_unstable();
        assert_eq!(seqs, (0..per).collect::<Vec<_>>(), "D1: producer {p}");
    }
}

#[test]
fn calls_and_end_of_stream() {
    block_on(async {
        let c = chan(2);
        c.send(b"a").await.unwrap();
        assert_eq!(c.send_batch(&[b"b", b"c"]).await.unwrap(), 1);
        assert!(matches!(c.try_send(b"x"), Err(Error::WouldBlock)));
        let mut buf = [0u8; 4];
        assert_eq!(c.recv_into(&mut buf).await.unwrap(), 1);
        let mut lens = [0usize; 2];
        assert_eq!(c.recv_batch(&mut buf, &mut lens).await.unwrap(), 1);
        assert!(matches!(c.try_recv(), Err(Error::WouldBlock)));
        c.send(b"last").await.unwrap();
        assert!(c.close());
        assert!(matches!(c.send(b"x").await, Err(Error::Closed)));
        assert_eq!(c.recv().await.unwrap(), b"last");
        assert!(matches!(c.recv().await, Err(Error::Closed)));
    });
}

/// A receive polled once (empty), then woken by a message and dropped
/// unpolled, took nothing; the same for a send on a full channel woken by
/// room.
#[test]
fn dropped_futures_take_and_send_nothing() {
    watchdog("dropped futures", || {
        let flag = Arc::new(Flag(AtomicBool::new(false)));
        let waker = Waker::from(flag.clone());
        let woken = || {
            while !flag.0.swap(false, Ordering::SeqCst) {
                std::thread::yield_now();
            }
        };
        let c = chan(4);
        let sync = c.chan().clone();
        for round in 0..50u32 {
            {
                let fut = pin!(c.recv());
                let mut cx = Context::from_waker(&waker);
                assert!(fut.poll(&mut cx).is_pending());
                sync.send(&round.to_le_bytes(), Wait::Never).unwrap();
                woken();
            }
            assert_eq!(sync.recv(Wait::Never).unwrap(), round.to_le_bytes());
        }
        for _ in 0..4 {
            sync.send(b"filler", Wait::Never).unwrap();
        }
        for _ in 0..50 {
            {
                let fut = pin!(c.send(b"cancelled"));
                let mut cx = Context::from_waker(&waker);
                assert!(fut.poll(&mut cx).is_pending());
                sync.recv(Wait::Never).unwrap();
                sync.recv(Wait::Never).unwrap();
                woken();
            }
            assert_eq!(sync.stats().pending, 2, "the dropped send sent nothing");
            sync.send(b"filler", Wait::Never).unwrap();
            sync.send(b"filler", Wait::Never).unwrap();
        }
    });
}

/// Producer threads, consumers each racing every receive against a
/// zero timer (the loser is dropped), on threads of their own and several
/// on one thread: every message once, in order, every round; then async
/// producers (sends raced the same way, retried when they lose) into a
/// thread that receives.
#[test]
fn races_and_rounds_lose_nothing() {
    watchdog("rounds", || {
        for round in 0..100u32 {
            const PER: u32 = 200;
            let c = chan(1 + round as usize % 6);
            let left = Arc::new(std::sync::atomic::AtomicU32::new(2));
            let producers: Vec<_> = (0..2u8)
                .map(|p| {
                    let (tx, left) = (c.chan().clone(), left.clone());
                    std::thread::spawn(move || {
                        for seq in 0..PER {
                            tx.send(&msg(p, seq), Wait::Forever).unwrap();
                        }
                        if left.fetch_sub(1, Ordering::SeqCst) == 1 {
                            tx.close();
                        }
                    })
                })
                .collect();
            let consume = |c: AsyncChan, race: bool| async move {
                let mut log = Vec::new();
                loop {
                    let r = if race {
                        match future::select(pin!(c.recv()), pin!(Timer::after(Duration::ZERO)))
                            .await
                        {
                            Either::Left((r, _)) => r,
                            Either::Right(_) => continue, // dropped: took nothing
                        }
                    } else {
                        c.recv().await
                    };
                    match r {
                        Ok(m) => log.push(m),
                        Err(Error::Closed) => return log,
                        Err(e) => panic!("{e}"),
                    }
                }
            };
            let solo = {
                let c = c.clone();
                std::thread::spawn(move || block_on(consume(c, true)))
            };
            let mut logs = block_on(future::join_all([
                consume(c.clone(), false),
                consume(c.clone(), true),
            ]));
            logs.push(solo.join().unwrap());
            for p in producers {
                p.join().unwrap();
            }
            check(&logs, 2, PER);

            // Async producers into a receiving thread.
            let c = chan(1 + round as usize % 6);
            let rx = c.chan().clone();
            let receiver = std::thread::spawn(move || {
                let mut log = Vec::new();
                loop {
                    match rx.recv(Wait::Forever) {
                        Ok(m) => log.push(m),
                        Err(Error::Closed) => return log,
                        Err(e) => panic!("{e}"),
                    }
                }
            });
            let produce = |c: AsyncChan, p: u8| async move {
                for seq in 0..PER {
                    let m = msg(p, seq);
                    loop {
                        match future::select(pin!(c.send(&m)), pin!(Timer::after(Duration::ZERO)))
                            .await
                        {
                            Either::Left((r, _)) => break r.unwrap(),
                            Either::Right(_) => continue, // dropped: sent nothing
                        }
                    }
                }
            };
            block_on(future::join(produce(c.clone(), 0), produce(c.clone(), 1)));
            c.close();
            check(&[receiver.join().unwrap()], 2, PER);
        }
    });
}
