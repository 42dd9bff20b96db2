// SPDX-License-Identifier: MIT OR Apache-2.0
//! The channel's contract, call by call: D4 level readiness, D5 backpressure,
//! D6 close, the counters, and what happens to queued messages when the last
//! handle goes away. Readiness is always checked with poll(2) at quiescent
//! points: on one thread between calls, or after the other threads are
//! joined. Threads that must be blocked are never "waited for" with sleeps:
//! each test's outcome is the same whether or not the thread had already
//! gone to sleep inside the library when the waking call happened.

mod common;

use common::fds;

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::Duration;

use common::*;
use eventq::{Chan, Error, Options, Stats, Wait};

fn chan(opts: Options) -> Chan {
    Chan::new(opts).expect("valid options")
}

/// A channel whose receive fd has been asked for, so it follows the queue
/// from the start (until then it sleeps and no call writes it).
fn polled(opts: Options) -> Chan {
    let ch = chan(opts);
    let _ = ch.recv_fd();
    ch
}

/// Receives one message with `Wait::Never` by the given method (0: recv,
/// 1: recv_into, 2: recv_batch of one).
fn recv_by(ch: &Chan, method: usize) -> Got<Vec<u8>> {
    let mut buf = [0u8; 256];
    let mut lens = [0usize; 1];
    Got::from(match method {
        0 => ch.recv(Wait::Never),
        1 => ch
            .recv_into(&mut buf, Wait::Never)
            .map(|n| buf[..n].to_vec()),
        _ => ch.recv_batch(&mut buf, &mut lens, Wait::Never).map(|n| {
            assert_eq!(n, 1);
            buf[..lens[0]].to_vec()
        }),
    })
}

fn fill(ch: &Chan, n: usize, len: usize) {
    for i in 0..n {
        ch.send(&vec![i as u8; len], Wait::Never)
            .unwrap_or_else(|e| panic!("send {i} of {n}: {e:?}"));
    }
}

fn pending(ch: &Chan) -> u64 {
    ch.stats().pending
}

// ---------------------------------------------------------------------------
// D4: the receive fd is readable iff messages are pending or closed.
// ---------------------------------------------------------------------------

#[test]
fn d4_new_channel_not_readable_send_fd_readable() {
    let ch = chan(Options::new(4));
    assert!(!recv_ready(&ch), "D4: a new channel has nothing pending");
    assert!(send_ready(&ch), "D5: a new channel has room");
    assert_eq!(out(ch.recv(Wait::Never)), Got::WouldBlock);
    assert!(!recv_ready(&ch), "a failed receive leaves it unreadable");
}

#[test]
fn d4_readable_exactly_while_pending_for_every_receive_method() {
    let ch = chan(Options::new(8));
    for method in 0..3 {
        for n in 1..=5usize {
            for i in 0..n {
                ch.send(&[i as u8; 3], Wait::Never).unwrap();
                assert!(recv_ready(&ch), "D4: readable after send {i}");
            }
            for i in 0..n {
                assert!(recv_ready(&ch), "D4: {} pending: readable", n - i);
                assert_eq!(recv_by(&ch, method), Got::Ok(vec![i as u8; 3]));
            }
            assert!(
                !recv_ready(&ch),
                "D4: drained by method {method}: not readable"
            );
            assert_eq!(recv_by(&ch, method), Got::WouldBlock);
            assert!(!recv_ready(&ch));
        }
    }
    // A zero-length message is a message: it makes the fd readable.
    ch.send(&[], Wait::Never).unwrap();
    assert!(recv_ready(&ch));
    assert_eq!(out(ch.recv_into(&mut [], Wait::Never)), Got::Ok(()));
    assert!(!recv_ready(&ch));
}

#[test]
fn d4_batch_send_and_receive_keep_readiness_exact() {
    let ch = chan(Options::new(16));
    let msgs: Vec<Vec<u8>> = (0..10u8).map(|i| vec![i; usize::from(i)]).collect();
    let n = ch
        .send_batch(msgs.iter().map(Vec::as_slice), Wait::Never)
        .unwrap();
    assert_eq!(n, 10);
    assert!(recv_ready(&ch));
    let mut buf = [0u8; 1024];
    let mut lens = [0usize; 4];
    let mut got = Vec::new();
    while got.len() < 10 {
        assert!(recv_ready(&ch));
        let k = ch.recv_batch(&mut buf, &mut lens, Wait::Never).unwrap();
        let mut off = 0;
        for &l in &lens[..k] {
            got.push(buf[off..off + l].to_vec());
            off += l;
        }
    }
    assert_eq!(
        got, msgs,
        "D2/D3: batch receive returns each message whole, in order"
    );
    assert!(!recv_ready(&ch), "D4: drained by batches: not readable");
}

#[test]
fn d4_close_makes_readable_and_it_stays_readable_after_end_of_stream() {
    for method in 0..3 {
        let ch = chan(Options::new(4));
        fill(&ch, 2, 1);
        assert!(ch.close());
        assert!(recv_ready(&ch) && send_ready(&ch));
        for i in 0..2u8 {
            assert_eq!(recv_by(&ch, method), Got::Ok(vec![i]));
            assert!(recv_ready(&ch), "D6: closed: readable even once drained");
        }
        for _ in 0..3 {
            assert_eq!(recv_by(&ch, method), Got::Closed, "end of stream");
            assert!(recv_ready(&ch), "D6: stays readable after Closed");
            assert!(send_ready(&ch), "D6: send fd stays readable after Closed");
        }
        // Blocking and timed receives return end of stream at once too.
        assert_eq!(out(ch.recv(Wait::Forever)), Got::Closed);
        assert_eq!(out(ch.recv(Wait::For(Duration::MAX))), Got::Closed);
        assert!(recv_ready(&ch));
    }
}

#[test]
fn d4_close_of_empty_channel_makes_readable() {
    let ch = chan(Options::new(4));
    let other = ch.clone();
    assert!(!recv_ready(&ch));
    assert!(other.close(), "any handle can close");
    assert!(recv_ready(&ch), "D6: closed: readable with nothing queued");
    assert_eq!(out(ch.recv(Wait::Never)), Got::Closed);
    assert!(recv_ready(&ch) && recv_ready(&other));
}

#[test]
fn d4_fds_nonblocking_cloexec_distinct_and_shared_by_clones() {
    let ch = chan(Options::new(4));
    let c2 = ch.clone();
    assert_ne!(ch.recv_fd().as_raw_fd(), ch.send_fd().unwrap().as_raw_fd());
    assert_eq!(ch.recv_fd().as_raw_fd(), c2.recv_fd().as_raw_fd());
    assert_eq!(
        ch.send_fd().unwrap().as_raw_fd(),
        c2.send_fd().unwrap().as_raw_fd()
    );
    for fd in [ch.recv_fd().as_raw_fd(), ch.send_fd().unwrap().as_raw_fd()] {
        // SAFETY: fcntl queries on fds the channel keeps open.
        let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        // SAFETY: as above.
        let fdfl = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        assert!(fl >= 0 && fdfl >= 0);
        assert_ne!(fl & libc::O_NONBLOCK, 0, "fd {fd} must be O_NONBLOCK");
        assert_ne!(fdfl & libc::FD_CLOEXEC, 0, "fd {fd} must be O_CLOEXEC");
    }
    // A message sent through one handle makes every handle's fd readable.
    c2.send(b"x", Wait::Never).unwrap();
    assert!(recv_ready(&ch));
}

/// Producers and consumers on threads, readiness checked after each join:
/// pending messages are always signalled, a drained channel never is.
#[test]
fn d4_readiness_at_quiescent_points_between_threaded_rounds() {
    let ch = chan(Options::new(64));
    let mut rng = Rng::new(44);
    let mut queued = 0usize;
    for round in 0..40 {
        // Up to 4 producers add some messages (never more than fit).
        let producers = rng.range(1, 4);
        let each = rng.below((64 - queued) / producers + 1);
        thread::scope(|s| {
            for p in 0..producers {
                let tx = ch.clone();
                s.spawn(move || {
                    for i in 0..each {
                        tx.send(&[p as u8, i as u8], Wait::Never).unwrap();
                    }
                });
            }
        });
        queued += producers * each;
        assert_eq!(pending(&ch), queued as u64);
        assert_eq!(
            recv_ready(&ch),
            queued > 0,
            "D4 after producers, round {round}"
        );
        // Up to 3 consumers take some of them (blocking: they must exist).
        let consumers = rng.range(1, 3);
        let take = rng.below(queued / consumers + 1);
        thread::scope(|s| {
            for c in 0..consumers {
                let rx = ch.clone();
                s.spawn(move || {
                    for _ in 0..take {
                        let m = match c % 2 {
                            0 => rx.recv(Wait::Forever).unwrap(),
                            _ => {
                                let mut b = [0u8; 2];
                                let n = rx.recv_into(&mut b, Wait::Forever).unwrap();
                                b[..n].to_vec()
                            }
                        };
                        assert_eq!(m.len(), 2);
                    }
                });
            }
        });
        queued -= consumers * take;
        assert_eq!(pending(&ch), queued as u64);
        assert_eq!(
            recv_ready(&ch),
            queued > 0,
            "D4 after consumers, round {round}"
        );
    }
}

// ---------------------------------------------------------------------------
// D5: backpressure.
// ---------------------------------------------------------------------------

#[test]
fn d5_full_channel_refuses_with_would_block_and_the_message_stays_the_callers() {
    let ch = chan(Options::new(4));
    fill(&ch, 4, 1);
    assert!(!send_ready(&ch), "D5: full and open: send fd not readable");
    let mine = b"mine".to_vec();
    assert_eq!(out(ch.send(&mine, Wait::Never)), Got::WouldBlock);
    assert_eq!(
        out(ch.send_batch([&mine[..], b"too"], Wait::Never)),
        Got::WouldBlock
    );
    assert_eq!(mine, b"mine", "the caller still has its message");
    assert!(!send_ready(&ch));
    let st = ch.stats();
    assert_eq!(
        (st.sent, st.pending),
        (4, 4),
        "D5: never more than capacity"
    );
    // The refused messages were not queued: only the four come out.
    for i in 0..4u8 {
        assert_eq!(ch.recv(Wait::Never).unwrap(), vec![i]);
    }
    assert_eq!(out(ch.recv(Wait::Never)), Got::WouldBlock);
    // Now it fits.
    ch.send(&mine, Wait::Never).unwrap();
    assert_eq!(ch.recv(Wait::Never).unwrap(), mine);
}

#[test]
fn d5_send_batch_queues_the_prefix_that_fits() {
    let ch = chan(Options::new(5));
    fill(&ch, 2, 1);
    let batch: Vec<Vec<u8>> = (10..16u8).map(|i| vec![i]).collect();
    let n = ch
        .send_batch(batch.iter().map(Vec::as_slice), Wait::Never)
        .unwrap();
    assert_eq!(n, 3, "only three fit");
    assert!(!send_ready(&ch), "the batch filled the channel");
    // The rest (13, 14, 15) stayed the caller's: it can send them later.
    let got: Vec<Vec<u8>> = (0..5).map(|_| ch.recv(Wait::Never).unwrap()).collect();
    assert_eq!(got, vec![vec![0], vec![1], vec![10], vec![11], vec![12]]);
    let n = ch
        .send_batch(batch[n..].iter().map(Vec::as_slice), Wait::Never)
        .unwrap();
    assert_eq!(n, 3);
    let got: Vec<Vec<u8>> = (0..3).map(|_| ch.recv(Wait::Never).unwrap()).collect();
    assert_eq!(got, batch[3..].to_vec());
    assert_eq!(ch.send_batch(std::iter::empty(), Wait::Never).unwrap(), 0);
}

/// Fills the channel, then drains one message at a time and returns the
/// queue depth at which the send fd became readable again. Checks that it
/// never is readable while full.
fn send_fd_returns_at(ch: &Chan) -> u64 {
    let cap = ch.capacity();
    fill(ch, cap - pending(ch) as usize, 1);
    assert!(!send_ready(ch), "D5: full and open: send fd not readable");
    assert_eq!(out(ch.send(b"x", Wait::Never)), Got::WouldBlock);
    assert!(!send_ready(ch));
    loop {
        ch.recv(Wait::Never).expect("not yet empty");
        let depth = pending(ch);
        if send_ready(ch) {
            return depth;
        }
        assert!(depth > 0, "D5: drained empty and still no room signalled");
    }
}

#[test]
fn d5_send_fd_readable_again_at_default_low_water_half_capacity() {
    for cap in [1usize, 2, 7, 8, 64] {
        let ch = chan(Options::new(cap));
        for _ in 0..3 {
            assert_eq!(send_fd_returns_at(&ch), (cap / 2) as u64, "capacity {cap}");
            // Below low water it stays readable while the queue grows again
            // (no syscall per message near full) until it is full once more.
            while pending(&ch) < cap as u64 - 1 {
                ch.send(b"y", Wait::Never).unwrap();
                assert!(send_ready(&ch));
            }
        }
    }
}

#[test]
fn d5_send_fd_readable_again_at_custom_low_water() {
    for (cap, low) in [(10usize, 7usize), (10, 0), (10, 9), (3, 1), (1, 0)] {
        let ch = chan(Options::new(cap).low_water(low));
        for _ in 0..2 {
            assert_eq!(
                send_fd_returns_at(&ch),
                low as u64,
                "cap {cap} low water {low}"
            );
        }
    }
}

#[test]
fn d5_byte_limit_refuses_what_does_not_fit_and_signals_at_half() {
    let ch = chan(Options::new(10).max_bytes(100));
    assert_eq!(ch.max_msg_size(), 100, "defaults to max_bytes");
    ch.send(&[1; 60], Wait::Never).unwrap();
    assert!(send_ready(&ch));
    assert_eq!(out(ch.send(&[2; 41], Wait::Never)), Got::WouldBlock);
    assert_eq!(
        out(ch.send(&[2; 41], Wait::For(Duration::ZERO))),
        Got::TimedOut
    );
    ch.send(&[3; 40], Wait::Never).unwrap();
    let st = ch.stats();
    assert_eq!(
        (st.pending, st.pending_bytes),
        (2, 100),
        "exactly max_bytes"
    );
    assert!(!send_ready(&ch), "D5: full by bytes and open: not readable");
    assert_eq!(out(ch.send(&[4; 1], Wait::Never)), Got::WouldBlock);
    // Draining the 60-byte message leaves 40 bytes <= 50: room signalled.
    assert_eq!(ch.recv(Wait::Never).unwrap(), vec![1; 60]);
    assert!(send_ready(&ch), "D5: at the byte low-water mark: readable");
    ch.send(&[5; 60], Wait::Never).unwrap();
    assert_eq!(ch.recv(Wait::Never).unwrap(), vec![3; 40]);
    assert_eq!(ch.recv(Wait::Never).unwrap(), vec![5; 60]);
    assert_eq!(ch.stats().pending_bytes, 0);
}

#[test]
fn d5_byte_and_message_limits_together() {
    // Whichever limit binds first makes the channel full.
    let ch = chan(Options::new(3).max_bytes(1000));
    fill(&ch, 3, 1);
    assert!(!send_ready(&ch), "full by count");
    assert_eq!(out(ch.send(&[], Wait::Never)), Got::WouldBlock);
    while ch.recv(Wait::Never).is_ok() {}
    ch.send(&[0; 1000], Wait::Never).unwrap();
    assert!(!send_ready(&ch), "full by bytes");
    assert_eq!(out(ch.send(&[0; 1], Wait::Never)), Got::WouldBlock);
    ch.recv(Wait::Never).unwrap();
    assert!(send_ready(&ch));
}

#[test]
fn d5_timeouts_give_timed_out_and_queue_nothing() {
    let ch = chan(Options::new(1));
    assert_eq!(out(ch.recv(Wait::For(Duration::ZERO))), Got::TimedOut);
    assert_eq!(
        out(ch.recv(Wait::For(Duration::from_millis(5)))),
        Got::TimedOut
    );
    let mut buf = [0u8; 4];
    assert_eq!(
        out(ch.recv_into(&mut buf, Wait::For(Duration::from_millis(1)))),
        Got::TimedOut
    );
    assert_eq!(
        out(ch.recv_batch(&mut buf, &mut [0; 2], Wait::For(Duration::from_millis(1)))),
        Got::TimedOut
    );
    ch.send(b"a", Wait::For(Duration::from_millis(5))).unwrap();
    assert_eq!(out(ch.send(b"b", Wait::For(Duration::ZERO))), Got::TimedOut);
    assert_eq!(
        out(ch.send(b"b", Wait::For(Duration::from_millis(5)))),
        Got::TimedOut
    );
    assert_eq!(
        out(ch.send_batch([&b"b"[..]], Wait::For(Duration::from_millis(1)))),
        Got::TimedOut
    );
    let st = ch.stats();
    assert_eq!(
        (st.sent, st.pending),
        (1, 1),
        "timed-out sends queued nothing"
    );
    assert_eq!(ch.recv(Wait::For(Duration::from_millis(5))).unwrap(), b"a");
    assert!(!recv_ready(&ch));
}

#[test]
fn d5_blocked_sender_completes_after_a_receive() {
    for wait in [
        Wait::Forever,
        Wait::For(Duration::from_secs(3600)),
        Wait::For(Duration::MAX),
    ] {
        let _dog = Watchdog::new("d5_blocked_sender_completes_after_a_receive");
        let ch = chan(Options::new(1));
        ch.send(b"first", Wait::Never).unwrap();
        let sleepers = Sleepers::default();
        thread::scope(|s| {
            let tx = ch.clone();
            let sleepers = &sleepers;
            let h = s.spawn(move || {
                sleepers.me();
                tx.send(b"second", wait)
            });
            // It cannot finish before this receive makes room, and must
            // finish after it.
            sleepers.wait_all(1);
            assert_eq!(ch.stats().pending, 1, "the sender is still blocked");
            assert_eq!(ch.recv(Wait::Forever).unwrap(), b"first");
            h.join()
                .unwrap()
                .expect("sender completes once there is room");
        });
        assert_eq!(ch.recv(Wait::Never).unwrap(), b"second");
        assert!(!recv_ready(&ch));
    }
}

#[test]
fn d5_blocked_batch_sender_completes_after_receives() {
    // A sender streams 500 messages through a channel of one; every send
    // after the first finds it full and must be woken by a receive.
    let ch = chan(Options::new(1));
    thread::scope(|s| {
        let tx = ch.clone();
        s.spawn(move || {
            for i in 0..500u32 {
                if i % 2 == 0 {
                    tx.send(&i.to_le_bytes(), Wait::Forever).unwrap();
                } else {
                    let m = i.to_le_bytes();
                    assert_eq!(tx.send_batch([&m[..]], Wait::Forever).unwrap(), 1);
                }
            }
        });
        for i in 0..500u32 {
            assert_eq!(ch.recv(Wait::Forever).unwrap(), i.to_le_bytes());
        }
    });
    assert_eq!(ch.stats().peak_depth, 1);
}

#[test]
fn d5_sender_blocked_on_bytes_completes_when_enough_is_drained() {
    let _dog = Watchdog::new("d5_sender_blocked_on_bytes_completes_when_enough_is_drained");
    let ch = chan(Options::new(8).max_bytes(100));
    fill(&ch, 4, 25);
    let sleepers = Sleepers::default();
    thread::scope(|s| {
        let tx = ch.clone();
        let sleepers = &sleepers;
        let h = s.spawn(move || {
            sleepers.me();
            tx.send(&[9; 60], Wait::Forever)
        });
        // 60 bytes need three of the 25-byte messages gone.
        sleepers.wait_all(1);
        for _ in 0..3 {
            ch.recv(Wait::Never).unwrap();
        }
        h.join().unwrap().expect("fits once 75 bytes are free");
    });
    assert_eq!(ch.recv(Wait::Never).unwrap(), vec![3; 25]);
    assert_eq!(ch.recv(Wait::Never).unwrap(), vec![9; 60]);
}

#[test]
fn d5_event_loop_producer_wakes_on_send_fd_at_low_water() {
    // A producer that never blocks in the library: on WouldBlock it waits in
    // poll(2) on the send fd, which must come back at the low-water mark.
    let _dog = Watchdog::new("d5_event_loop_producer_wakes_on_send_fd_at_low_water");
    let ch = chan(Options::new(4));
    fill(&ch, 4, 1);
    let sleepers = Sleepers::default();
    thread::scope(|s| {
        let tx = ch.clone();
        let sleepers = &sleepers;
        let h = s.spawn(move || {
            sleepers.me();
            let mut attempts = 0;
            loop {
                attempts += 1;
                match tx.send(b"late", Wait::Never) {
                    Ok(()) => return attempts,
                    Err(Error::WouldBlock) => {
                        wait_readable(tx.send_fd().unwrap().as_raw_fd(), "send fd")
                    }
                    Err(e) => panic!("{e:?}"),
                }
            }
        });
        // Asleep in poll(2) on the send fd of the full channel. Two
        // receives reach the low-water mark (2) and raise the send fd.
        sleepers.wait_all(1);
        ch.recv(Wait::Never).unwrap();
        assert!(!send_ready(&ch), "above the low-water mark");
        ch.recv(Wait::Never).unwrap();
        assert_eq!(h.join().unwrap(), 2, "one refusal, one wake-up, one send");
    });
    let st = ch.stats();
    assert_eq!((st.sent, st.received, st.pending), (5, 2, 3));
}

// ---------------------------------------------------------------------------
// D6: close.
// ---------------------------------------------------------------------------

#[test]
fn d6_close_is_idempotent_and_sends_fail_after_it() {
    let ch = chan(Options::new(4));
    let other = ch.clone();
    assert!(!ch.is_closed());
    assert!(other.close(), "first close returns true");
    assert!(!ch.close(), "second close returns false");
    assert!(!other.close());
    assert!(ch.is_closed() && other.is_closed());
    assert!(ch.stats().closed);
    assert_eq!(
        out(ch.send(b"x", Wait::Never)),
        Got::Closed,
        "EPIPE with room"
    );
    assert_eq!(out(ch.send(b"x", Wait::Forever)), Got::Closed);
    assert_eq!(out(ch.send(&[], Wait::For(Duration::MAX))), Got::Closed);
    assert_eq!(out(ch.send_batch([&b"x"[..]], Wait::Forever)), Got::Closed);
    assert_eq!(ch.send_batch(std::iter::empty(), Wait::Never).unwrap(), 0);
    assert_eq!(ch.stats().sent, 0);
    assert_eq!(ch.capacity(), 4);
}

#[test]
fn d6_queued_messages_stay_receivable_after_close_then_end_of_stream() {
    let ch = chan(Options::new(8));
    let msgs: Vec<Vec<u8>> = (0..7u8).map(|i| vec![i; usize::from(i) * 3]).collect();
    for m in &msgs {
        ch.send(m, Wait::Never).unwrap();
    }
    assert!(ch.close());
    assert_eq!(out(ch.send(b"late", Wait::Never)), Got::Closed);
    // Every method, blocking or not, gets the queued messages in order.
    let mut got = Vec::new();
    let mut buf = [0u8; 64];
    let mut lens = [0usize; 2];
    got.push(ch.recv(Wait::Forever).unwrap());
    let n = ch.recv_into(&mut buf, Wait::Forever).unwrap();
    got.push(buf[..n].to_vec());
    let k = ch.recv_batch(&mut buf, &mut lens, Wait::Forever).unwrap();
    assert_eq!(k, 2);
    got.push(buf[..lens[0]].to_vec());
    got.push(buf[lens[0]..lens[0] + lens[1]].to_vec());
    got.push(ch.recv(Wait::Never).unwrap());
    got.push(ch.recv(Wait::For(Duration::ZERO)).unwrap());
    got.push(ch.recv(Wait::For(Duration::MAX)).unwrap());
    assert_eq!(got, msgs);
    assert_eq!(out(ch.recv(Wait::Forever)), Got::Closed);
    assert_eq!(out(ch.recv_into(&mut buf, Wait::Never)), Got::Closed);
    assert_eq!(
        out(ch.recv_batch(&mut buf, &mut lens, Wait::For(Duration::ZERO))),
        Got::Closed
    );
    assert!(recv_ready(&ch) && send_ready(&ch));
    let st = ch.stats();
    assert_eq!((st.sent, st.received, st.pending), (7, 7, 0));
}

#[test]
fn d6_send_fd_readable_after_close_even_when_full() {
    let ch = chan(Options::new(2));
    fill(&ch, 2, 1);
    assert!(!send_ready(&ch));
    assert!(ch.close());
    assert!(
        send_ready(&ch),
        "D6: closed: send fd readable so producers wake"
    );
    assert_eq!(out(ch.send(b"x", Wait::Never)), Got::Closed);
    assert!(send_ready(&ch));
    assert_eq!(ch.stats().pending, 2, "close keeps what is queued");
}

#[test]
fn d6_close_wakes_every_blocked_receiver() {
    for round in 0..10u8 {
        // `extra` messages arrive before the close: exactly that many
        // receivers get one, the others get end of stream.
        let extra = usize::from(round % 3);
        let _dog = Watchdog::new("d6_close_wakes_every_blocked_receiver");
        let ch = chan(Options::new(4));
        let sleepers = Sleepers::default();
        let results: Vec<Got<Vec<u8>>> = thread::scope(|s| {
            let hs: Vec<_> = (0..5)
                .map(|r| {
                    let rx = ch.clone();
                    let sleepers = &sleepers;
                    s.spawn(move || {
                        sleepers.me();
                        let mut buf = [0u8; 8];
                        let mut lens = [0usize; 1];
                        Got::from(match r {
                            0 => rx.recv(Wait::Forever),
                            1 => rx.recv(Wait::For(Duration::MAX)),
                            2 => rx
                                .recv_into(&mut buf, Wait::Forever)
                                .map(|n| buf[..n].to_vec()),
                            3 => rx
                                .recv_batch(
                                    &mut buf,
                                    &mut lens,
                                    Wait::For(Duration::from_secs(3600)),
                                )
                                .map(|n| {
                                    assert_eq!(n, 1);
                                    buf[..lens[0]].to_vec()
                                }),
                            _ => {
                                // A poll-loop receiver.
                                loop {
                                    wait_readable(rx.recv_fd().as_raw_fd(), "receiver poll");
                                    match rx.recv(Wait::Never) {
                                        Err(Error::WouldBlock) => continue,
                                        r => break r,
                                    }
                                }
                            }
                        })
                    })
                })
                .collect();
            // All five asleep: in the library, or in poll(2).
            sleepers.wait_all(5);
            for i in 0..extra {
                ch.send(&[round, i as u8], Wait::Never).unwrap();
            }
            assert!(ch.close());
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut got: Vec<Vec<u8>> = results
            .iter()
            .filter_map(|r| match r {
                Got::Ok(m) => Some(m.clone()),
                Got::Closed => None,
                other => panic!("receiver woken by close got {other:?}"),
            })
            .collect();
        got.sort();
        let want: Vec<Vec<u8>> = (0..extra).map(|i| vec![round, i as u8]).collect();
        assert_eq!(got, want, "D6: every message to exactly one receiver");
        assert_eq!(ch.stats().received, extra as u64);
        assert!(recv_ready(&ch) && send_ready(&ch));
    }
}

#[test]
fn d6_close_wakes_every_blocked_sender_and_keeps_the_queue() {
    for round in 0..10u8 {
        let _dog = Watchdog::new("d6_close_wakes_every_blocked_sender_and_keeps_the_queue");
        let ch = chan(Options::new(2));
        ch.send(b"q0", Wait::Never).unwrap();
        ch.send(b"q1", Wait::Never).unwrap();
        let sleepers = Sleepers::default();
        let results: Vec<Got<()>> = thread::scope(|s| {
            let hs: Vec<_> = (0..4u8)
                .map(|k| {
                    let tx = ch.clone();
                    let sleepers = &sleepers;
                    s.spawn(move || {
                        sleepers.me();
                        let m = [round, k];
                        out(match k {
                            0 => tx.send(&m, Wait::Forever),
                            1 => tx.send(&m, Wait::For(Duration::from_secs(3600))),
                            2 => tx.send_batch([&m[..], b"more"], Wait::Forever).map(drop),
                            _ => loop {
                                match tx.send(&m, Wait::Never) {
                                    Err(Error::WouldBlock) => wait_readable(
                                        tx.send_fd().unwrap().as_raw_fd(),
                                        "sender poll",
                                    ),
                                    r => break r,
                                }
                            },
                        })
                    })
                })
                .collect();
            sleepers.wait_all(4);
            assert!(ch.close());
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(
            results.iter().all(|r| *r == Got::Closed),
            "D6: nobody received, so every blocked sender gets Closed: {results:?}"
        );
        assert_eq!(ch.recv(Wait::Never).unwrap(), b"q0");
        assert_eq!(ch.recv(Wait::Never).unwrap(), b"q1");
        assert_eq!(out(ch.recv(Wait::Never)), Got::Closed);
        assert_eq!(ch.stats().sent, 2);
    }
}

// ---------------------------------------------------------------------------
// Wake-ups: every thread asleep in the library is woken when it can proceed.
// Each test first waits (by observation, see `Sleepers`) until the threads
// are asleep, then makes one change; a thread that misses its wake-up
// times out after `HANG_GUARD` and fails the test.
// ---------------------------------------------------------------------------

#[test]
fn wake_every_receiver_asleep_when_a_batch_arrives() {
    let _dog = Watchdog::new("wake_every_receiver_asleep_when_a_batch_arrives");
    for round in 0..5u8 {
        let ch = chan(Options::new(8));
        let sleepers = Sleepers::default();
        let got: Vec<Got<Vec<u8>>> = thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|r| {
                    let rx = ch.clone();
                    let sleepers = &sleepers;
                    s.spawn(move || {
                        sleepers.me();
                        let mut buf = [0u8; 4];
                        Got::from(match r % 2 {
                            0 => rx.recv(Wait::For(HANG_GUARD)),
                            _ => rx
                                .recv_into(&mut buf, Wait::For(HANG_GUARD))
                                .map(|n| buf[..n].to_vec()),
                        })
                    })
                })
                .collect();
            sleepers.wait_all(4);
            // One call queues four messages: all four sleepers must wake.
            let msgs: Vec<[u8; 2]> = (0..4u8).map(|i| [round, i]).collect();
            let n = ch
                .send_batch(msgs.iter().map(|m| &m[..]), Wait::Never)
                .unwrap();
            assert_eq!(n, 4);
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut got: Vec<Vec<u8>> = got
            .into_iter()
            .map(|r| match r {
                Got::Ok(m) => m,
                other => panic!("a receiver asleep when the batch came got {other:?}"),
            })
            .collect();
        got.sort();
        assert_eq!(got, (0..4u8).map(|i| vec![round, i]).collect::<Vec<_>>());
        assert!(!recv_ready(&ch));
    }
}

#[test]
fn wake_every_sender_asleep_when_a_batch_is_received() {
    let _dog = Watchdog::new("wake_every_sender_asleep_when_a_batch_is_received");
    for round in 0..5u8 {
        let ch = chan(Options::new(4));
        fill(&ch, 4, 1);
        let sleepers = Sleepers::default();
        let results: Vec<Got<()>> = thread::scope(|s| {
            let hs: Vec<_> = (0..4u8)
                .map(|k| {
                    let tx = ch.clone();
                    let sleepers = &sleepers;
                    s.spawn(move || {
                        sleepers.me();
                        let m = [round, k];
                        out(match k % 2 {
                            0 => tx.send(&m, Wait::For(HANG_GUARD)),
                            _ => tx.send_batch([&m[..]], Wait::For(HANG_GUARD)).map(drop),
                        })
                    })
                })
                .collect();
            sleepers.wait_all(4);
            // One call frees all four slots: all four sleepers must wake.
            let mut buf = [0u8; 8];
            let mut lens = [0usize; 4];
            assert_eq!(ch.recv_batch(&mut buf, &mut lens, Wait::Never).unwrap(), 4);
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(
            results.iter().all(|r| *r == Got::Ok(())),
            "a sender asleep when room appeared: {results:?}"
        );
        assert_eq!(ch.stats().pending, 4);
    }
}

#[test]
fn wake_the_sender_whose_message_fits_when_bytes_free_up() {
    let _dog = Watchdog::new("wake_the_sender_whose_message_fits_when_bytes_free_up");
    // Sender A (80 bytes) falls asleep first, then B (10 bytes). Freeing 50
    // bytes makes room for B but not for A: B must wake and finish even
    // though A is the longer sleeper.
    let ch = chan(Options::new(8).max_bytes(100));
    ch.send(&[1; 50], Wait::Never).unwrap();
    ch.send(&[2; 45], Wait::Never).unwrap();
    let (sleep_a, sleep_b) = (Sleepers::default(), Sleepers::default());
    thread::scope(|s| {
        let (tx, sl) = (ch.clone(), &sleep_a);
        let a = s.spawn(move || {
            sl.me();
            out(tx.send(&[80; 80], Wait::For(HANG_GUARD)))
        });
        sleep_a.wait_all(1);
        let (tx, sl) = (ch.clone(), &sleep_b);
        let b = s.spawn(move || {
            sl.me();
            out(tx.send(&[10; 10], Wait::For(HANG_GUARD)))
        });
        sleep_b.wait_all(1);
        assert_eq!(ch.recv(Wait::Never).unwrap(), vec![1; 50]);
        assert_eq!(
            b.join().unwrap(),
            Got::Ok(()),
            "B's message fits: B must wake"
        );
        assert_eq!(ch.recv(Wait::Never).unwrap(), vec![2; 45]);
        assert_eq!(ch.recv(Wait::Never).unwrap(), vec![10; 10]);
        assert_eq!(a.join().unwrap(), Got::Ok(()));
    });
    assert_eq!(ch.recv(Wait::Never).unwrap(), vec![80; 80]);
}

// ---------------------------------------------------------------------------
// Counters.
// ---------------------------------------------------------------------------

#[test]
fn stats_count_exactly() {
    let ch = polled(Options::new(10).max_bytes(1000));
    let st = ch.stats();
    let mut new = Stats::default(); // non-exhaustive: set, not built
    new.send_doorbell_rings = 1;
    assert_eq!(st, new, "a new channel");
    fill(&ch, 6, 10);
    ch.recv(Wait::Never).unwrap();
    ch.recv(Wait::Never).unwrap();
    ch.send_batch([&[0u8; 7][..], &[0u8; 3][..]], Wait::Never)
        .unwrap();
    let _ = ch.recv_into(&mut [0u8; 1], Wait::Never); // too small: no change
    let st = ch.stats();
    assert_eq!(st.sent, 8);
    assert_eq!(st.received, 2);
    assert_eq!(st.pending, 6);
    assert_eq!(st.pending_bytes, 4 * 10 + 7 + 3);
    assert_eq!(st.peak_depth, 6);
    assert_eq!(st.dropped, 0);
    assert!(!st.closed);
    assert_eq!(
        st.recv_doorbell_rings, 1,
        "never empty since the first send"
    );
    assert_eq!(st.send_doorbell_rings, 1, "never full");
    let mut buf = [0u8; 100];
    let mut lens = [0usize; 10];
    assert_eq!(ch.recv_batch(&mut buf, &mut lens, Wait::Never).unwrap(), 6);
    ch.send(b"z", Wait::Never).unwrap();
    let st = ch.stats();
    assert_eq!(
        (st.sent, st.received, st.pending, st.pending_bytes),
        (9, 8, 1, 1)
    );
    assert_eq!(st.recv_doorbell_rings, 2, "empty -> non-empty twice");
    assert_eq!(st.peak_depth, 6);
}

#[test]
fn stats_burst_of_1000_sends_rings_the_recv_doorbell_once() {
    // One send at a time.
    let ch = polled(Options::new(1000));
    for i in 0..1000u32 {
        ch.send(&i.to_le_bytes(), Wait::Never).unwrap();
    }
    assert_eq!(ch.stats().recv_doorbell_rings, 1);
    for i in 0..1000u32 {
        assert_eq!(ch.recv(Wait::Never).unwrap(), i.to_le_bytes());
    }
    let st = ch.stats();
    assert_eq!(st.recv_doorbell_rings, 1, "draining rings nothing");
    assert_eq!((st.sent, st.received, st.peak_depth), (1000, 1000, 1000));
    ch.send(b"again", Wait::Never).unwrap();
    assert_eq!(ch.stats().recv_doorbell_rings, 2);

    // One batch.
    let ch = polled(Options::new(1024));
    let msgs: Vec<[u8; 4]> = (0..1000u32).map(u32::to_le_bytes).collect();
    assert_eq!(
        ch.send_batch(msgs.iter().map(|m| &m[..]), Wait::Never)
            .unwrap(),
        1000
    );
    assert_eq!(ch.stats().recv_doorbell_rings, 1);

    // From four threads at once, before anyone receives.
    let ch = polled(Options::new(1000));
    let barrier = Barrier::new(4);
    thread::scope(|s| {
        for t in 0..4u32 {
            let tx = ch.clone();
            let barrier = &barrier;
            s.spawn(move || {
                barrier.wait();
                for i in 0..250u32 {
                    tx.send(&(t * 1000 + i).to_le_bytes(), Wait::Never).unwrap();
                }
            });
        }
    });
    let st = ch.stats();
    assert_eq!(
        (st.sent, st.pending, st.recv_doorbell_rings),
        (1000, 1000, 1)
    );
    assert!(recv_ready(&ch));
}

#[test]
fn a_receive_fd_nobody_asked_for_is_never_written() {
    // Blocking calls and polling calls alike: no doorbell syscall while
    // nobody can poll the fd.
    let ch = chan(Options::new(8));
    for round in 0..3u8 {
        ch.send(&[round], Wait::Never).unwrap();
        ch.send_batch([&[round][..], &[round][..]], Wait::Never)
            .unwrap();
        assert_eq!(ch.recv(Wait::Forever).unwrap(), [round]);
        let mut buf = [0u8; 8];
        let mut lens = [0usize; 4];
        assert_eq!(ch.recv_batch(&mut buf, &mut lens, Wait::Never).unwrap(), 2);
        assert!(matches!(ch.recv(Wait::Never), Err(Error::WouldBlock)));
    }
    assert_eq!(ch.stats().recv_doorbell_rings, 0);
    // Asked for with nothing pending: down, and the next send raises it.
    assert!(!recv_ready(&ch));
    assert_eq!(ch.stats().recv_doorbell_rings, 0);
    ch.send(b"x", Wait::Never).unwrap();
    assert!(recv_ready(&ch));
    assert_eq!(ch.stats().recv_doorbell_rings, 1);
    ch.recv(Wait::Never).unwrap();
    assert!(!recv_ready(&ch), "the emptying receive lowers it");
}

#[test]
fn a_receive_fd_asked_for_with_messages_pending_is_readable_at_once() {
    // Level-triggered, edge-triggered (registered after the ask: its first
    // event is the level), and after close.
    let ch = chan(Options::new(8));
    ch.send(b"a", Wait::Never).unwrap();
    ch.send(b"b", Wait::Never).unwrap();
    let fd = ch.recv_fd().as_raw_fd();
    assert!(readable(fd));
    assert_eq!(ch.stats().recv_doorbell_rings, 1);
    let ep = fds::Epoll::new().unwrap();
    ep.add(fd, (libc::EPOLLIN | libc::EPOLLET) as u32, 0)
        .unwrap();
    let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 1];
    assert_eq!(ep.wait(&mut evs, Some(Duration::ZERO)).unwrap(), 1);
    assert_eq!(ch.recv(Wait::Never).unwrap(), b"a");
    assert_eq!(ch.recv(Wait::Never).unwrap(), b"b");
    assert!(!readable(fd));
    assert!(matches!(ch.recv(Wait::Never), Err(Error::WouldBlock)));
    ch.send(b"c", Wait::Never).unwrap();
    assert_eq!(ep.wait(&mut evs, Some(Duration::ZERO)).unwrap(), 1, "D9");

    let closed = chan(Options::new(8));
    closed.close();
    assert!(recv_ready(&closed), "closed: readable (D4)");
}

#[test]
fn a_receive_fd_asked_for_during_traffic_follows_the_queue() {
    // Producers and consumers run while another thread asks for the fd;
    // afterwards the fd matches the queue every time the calls stop.
    for round in 0..200u64 {
        // Fewer than the capacity: the producer never waits for room.
        let ch = chan(Options::new(16));
        let barrier = Barrier::new(3);
        let n = 12u64;
        thread::scope(|s| {
            let (tx, rx, b) = (ch.clone(), ch.clone(), &barrier);
            s.spawn(move || {
                b.wait();
                for i in 0..n {
                    tx.send(&i.to_le_bytes(), Wait::Forever).unwrap();
                }
            });
            s.spawn(move || {
                b.wait();
                // Takes some of them, leaving a round-dependent rest.
                for _ in 0..(round % (n + 1)) {
                    rx.recv(Wait::Forever).unwrap();
                }
            });
            b.wait();
            let _ = ch.recv_fd();
        });
        let st = ch.stats();
        assert_eq!(
            recv_ready(&ch),
            st.pending > 0,
            "round {round}: fd against {} pending",
            st.pending
        );
    }
}

#[test]
fn stats_send_doorbell_rings_once_per_drain_to_low_water_after_full() {
    let ch = chan(Options::new(8));
    assert_eq!(ch.stats().send_doorbell_rings, 1, "one at creation");
    for cycle in 0..5u64 {
        fill(&ch, 8 - pending(&ch) as usize, 1);
        while pending(&ch) > 4 {
            ch.recv(Wait::Never).unwrap();
        }
        assert_eq!(ch.stats().send_doorbell_rings, 2 + cycle);
        // Draining further rings nothing more.
        ch.recv(Wait::Never).unwrap();
        assert_eq!(ch.stats().send_doorbell_rings, 2 + cycle);
    }
    fill(&ch, 8 - pending(&ch) as usize, 1);
    assert!(ch.close());
    let st = ch.stats();
    assert_eq!(st.send_doorbell_rings, 7, "one at close (it was full)");
    assert!(st.closed);
}

// ---------------------------------------------------------------------------
// Freeing: the last handle drops what is still queued.
// ---------------------------------------------------------------------------

type Seen = Arc<Mutex<Vec<Vec<u8>>>>;

fn recording(cap: usize) -> (Chan, Seen) {
    let seen: Seen = Arc::default();
    let s2 = Arc::clone(&seen);
    let ch = chan(Options::new(cap).on_drop(move |m| s2.lock().unwrap().push(m.to_vec())));
    (ch, seen)
}

#[test]
fn free_not_last_handle_returns_none_and_drops_nothing() {
    let (ch, seen) = recording(8);
    fill(&ch, 3, 2);
    let c2 = ch.clone();
    let c3 = ch.clone();
    assert_eq!(c2.into_final_stats(), None, "not the last handle");
    drop(c3);
    assert!(
        seen.lock().unwrap().is_empty(),
        "nothing dropped while a handle lives"
    );
    assert_eq!(ch.stats().pending, 3);
    assert_eq!(ch.recv(Wait::Never).unwrap(), vec![0, 0]);
    let fin = ch.into_final_stats().expect("now the last handle");
    assert_eq!(
        (fin.sent, fin.received, fin.dropped, fin.pending),
        (3, 1, 2, 0)
    );
}

#[test]
fn free_last_handle_reports_dropped_and_on_drop_sees_each_message_once() {
    let (ch, seen) = recording(8);
    let msgs: Vec<Vec<u8>> = vec![vec![], b"one".to_vec(), vec![], vec![7; 300], b"x".to_vec()];
    for m in &msgs {
        ch.send(m, Wait::Never).unwrap();
    }
    assert_eq!(ch.recv(Wait::Never).unwrap(), msgs[0]);
    assert_eq!(ch.recv(Wait::Never).unwrap(), msgs[1]);
    assert!(
        seen.lock().unwrap().is_empty(),
        "received messages never reach on_drop"
    );
    let fin = ch.into_final_stats().expect("last handle");
    assert_eq!(fin.dropped, 3);
    assert_eq!((fin.sent, fin.received), (5, 2));
    assert_eq!(fin.pending, 0);
    assert_eq!(fin.pending_bytes, 0);
    assert_eq!(
        *seen.lock().unwrap(),
        msgs[2..].to_vec(),
        "each once, in order"
    );
}

#[test]
fn free_after_close_still_drops_what_was_queued() {
    let (ch, seen) = recording(4);
    fill(&ch, 4, 1);
    assert!(ch.close());
    ch.recv(Wait::Never).unwrap();
    let fin = ch.into_final_stats().unwrap();
    assert!(fin.closed);
    assert_eq!(fin.dropped, 3);
    assert_eq!(*seen.lock().unwrap(), vec![vec![1], vec![2], vec![3]]);
}

#[test]
fn free_empty_channel_drops_nothing() {
    let (ch, seen) = recording(4);
    fill(&ch, 2, 1);
    ch.recv(Wait::Never).unwrap();
    ch.recv(Wait::Never).unwrap();
    let fin = ch.into_final_stats().unwrap();
    assert_eq!(fin.dropped, 0);
    assert!(seen.lock().unwrap().is_empty());
}

#[test]
fn free_by_dropping_the_last_handle_on_another_thread_runs_on_drop() {
    let calls = Arc::new(AtomicUsize::new(0));
    let c2 = Arc::clone(&calls);
    let ch = chan(Options::new(16).on_drop(move |m| {
        assert_eq!(m, b"left");
        c2.fetch_add(1, Ordering::SeqCst);
    }));
    for _ in 0..5 {
        ch.send(b"left", Wait::Never).unwrap();
    }
    let handles: Vec<Chan> = (0..4).map(|_| ch.clone()).collect();
    drop(ch);
    thread::scope(|s| {
        for h in handles {
            s.spawn(move || drop(h));
        }
    });
    assert_eq!(calls.load(Ordering::SeqCst), 5, "once per queued message");
}

#[test]
fn free_concurrently_exactly_one_handle_gets_final_stats() {
    for round in 0..20 {
        let (ch, seen) = recording(16);
        fill(&ch, round % 5, 1);
        let handles: Vec<Chan> = (0..6).map(|_| ch.clone()).collect();
        drop(ch);
        let barrier = Barrier::new(handles.len());
        let finals: Vec<Stats> = thread::scope(|s| {
            let hs: Vec<_> = handles
                .into_iter()
                .map(|h| {
                    let barrier = &barrier;
                    s.spawn(move || {
                        barrier.wait();
                        h.into_final_stats()
                    })
                })
                .collect();
            hs.into_iter().filter_map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(finals.len(), 1, "exactly one last handle");
        assert_eq!(finals[0].dropped, (round % 5) as u64);
        assert_eq!(seen.lock().unwrap().len(), round % 5);
    }
}

#[test]
fn chan_handles_are_send_and_sync() {
    fn check<T: Send + Sync + Clone + 'static>() {}
    check::<Chan>();
}

// ---------------------------------------------------------------------------
// D2: messages arrive whole, at every length, through reused slots. Short
// messages are stored in the slot itself and long ones in its heap buffer,
// so each slot here alternates between the two.
// ---------------------------------------------------------------------------

fn patterned(len: usize, seed: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + seed * 7 + 1) as u8).collect()
}

#[test]
fn d2_every_length_round_trips_whole_through_reused_slots() {
    let ch = chan(Options::new(3));
    let lens: Vec<usize> = (0..=200).chain([1000, 4096, 0, 47, 48, 49, 8, 9]).collect();
    for (i, &len) in lens.iter().enumerate() {
        let msg = patterned(len, i);
        ch.send(&msg, Wait::Never).unwrap();
        // Two in flight: a receive reads one slot while the next is filled.
        if i % 2 == 1 {
            for back in [1, 0] {
                let want = patterned(lens[i - back], i - back);
                assert_eq!(recv_by_any(&ch, i + back), want, "message {}", i - back);
            }
        }
    }
    while let Ok(m) = ch.recv(Wait::Never) {
        assert_eq!(m, patterned(*lens.last().unwrap(), lens.len() - 1));
    }
}

/// Like `recv_by`, with a buffer large enough for every length used here.
fn recv_by_any(ch: &Chan, method: usize) -> Vec<u8> {
    let mut buf = vec![0u8; 8192];
    let mut lens = [0usize; 1];
    match method % 3 {
        0 => ch.recv(Wait::Never).unwrap(),
        1 => {
            let n = ch.recv_into(&mut buf, Wait::Never).unwrap();
            buf[..n].to_vec()
        }
        _ => {
            assert_eq!(ch.recv_batch(&mut buf, &mut lens, Wait::Never).unwrap(), 1);
            buf[..lens[0]].to_vec()
        }
    }
}

#[test]
fn d2_on_drop_sees_short_and_long_messages_whole() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    let ch = chan(Options::new(8).on_drop(move |m| log.lock().unwrap().push(m.to_vec())));
    let msgs: Vec<Vec<u8>> = [0, 5, 48, 49, 300]
        .iter()
        .map(|&n| patterned(n, n))
        .collect();
    for m in &msgs {
        ch.send(m, Wait::Never).unwrap();
    }
    let stats = ch.into_final_stats().expect("last handle");
    assert_eq!(stats.dropped, msgs.len() as u64);
    assert_eq!(*seen.lock().unwrap(), msgs);
}

// ---------------------------------------------------------------------------
// The send fd is created by the first `send_fd`, at the level the channel's
// state gives it (D5), and edge-triggered waiters registering it after get
// their events (D9). (That a channel has one fd until then is counted in
// tests/chan_fd_cost.rs, alone in its binary.)

/// A channel brought to a state with its send fd never asked for, then
/// asked: whether it is readable.
fn late_send_fd_readable(opts: Options, setup: impl FnOnce(&Chan)) -> bool {
    let ch = chan(opts);
    setup(&ch);
    send_ready(&ch)
}

#[test]
fn d5_late_send_fd_starts_at_the_level_of_the_state() {
    assert!(late_send_fd_readable(Options::new(4), |_| {}), "empty");
    assert!(
        !late_send_fd_readable(Options::new(4), |ch| fill(ch, 4, 1)),
        "full"
    );
    assert!(
        !late_send_fd_readable(Options::new(4), |ch| {
            fill(ch, 4, 1);
            assert_eq!(out(ch.send(b"x", Wait::Never)), Got::WouldBlock);
        }),
        "full, a send refused"
    );
    assert!(
        late_send_fd_readable(Options::new(4), |ch| {
            fill(ch, 4, 1);
            ch.close();
        }),
        "full and closed"
    );
    assert!(
        late_send_fd_readable(Options::new(4), |ch| {
            ch.close();
        }),
        "empty and closed"
    );
    assert!(
        !late_send_fd_readable(Options::new(4), |ch| {
            fill(ch, 4, 1);
            ch.recv(Wait::Never).unwrap();
        }),
        "full, drained to above low water: still down"
    );
    assert!(
        late_send_fd_readable(Options::new(4), |ch| {
            fill(ch, 4, 1);
            ch.recv(Wait::Never).unwrap();
            ch.recv(Wait::Never).unwrap();
        }),
        "full, drained to low water"
    );
    assert!(
        late_send_fd_readable(Options::new(4), |ch| fill(ch, 3, 1)),
        "below capacity, never full"
    );
    assert!(
        !late_send_fd_readable(Options::new(8).max_bytes(4), |ch| fill(ch, 2, 2)),
        "byte limit reached"
    );
}

#[test]
fn d5_send_fd_is_created_once_and_shared() {
    let ch = chan(Options::new(2));
    let c2 = ch.clone();
    let fd = c2.send_fd().unwrap().as_raw_fd();
    assert_eq!(ch.send_fd().unwrap().as_raw_fd(), fd);
    // A clone made after sees it too, and it follows the state.
    let c3 = ch.clone();
    fill(&ch, 2, 1);
    assert_eq!(c3.send_fd().unwrap().as_raw_fd(), fd);
    assert!(!readable(fd));
    ch.recv(Wait::Never).unwrap();
    ch.recv(Wait::Never).unwrap();
    assert!(readable(fd));
}

#[test]
fn d5_ring_counts_do_not_depend_on_the_send_fd() {
    // Stats count the send doorbell's transitions whether or not the fd
    // exists: the same work gives the same counts.
    let run = |ask_first: bool| {
        let ch = chan(Options::new(4));
        if ask_first {
            ch.send_fd().unwrap();
        }
        fill(&ch, 4, 1);
        assert_eq!(out(ch.send(b"x", Wait::Never)), Got::WouldBlock);
        for _ in 0..2 {
            ch.recv(Wait::Never).unwrap();
        }
        ch.close();
        ch.stats()
    };
    assert_eq!(run(true), run(false));
    assert_eq!(
        run(false).send_doorbell_rings,
        3,
        "creation, low water, close"
    );
}

/// Waits (not at all) for edge-triggered events on `ep`: how many fds had one.
fn edge_events(ep: &fds::Epoll) -> usize {
    let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 4];
    ep.wait(&mut evs, Some(Duration::ZERO)).expect("epoll_wait")
}

fn edge_waiter(fd: std::os::fd::RawFd) -> fds::Epoll {
    let ep = fds::Epoll::new().expect("epoll");
    ep.add(fd, (libc::EPOLLIN | libc::EPOLLET) as u32, 1)
        .expect("epoll_ctl");
    ep
}

#[test]
fn d9_send_fd_created_after_the_channel_filled_gets_its_edge() {
    // A producer fills the channel and is refused, then asks for the send
    // fd and waits on it edge-triggered: no event while full, one when the
    // receiver drains to low water, none while it drains further.
    let ch = chan(Options::new(4));
    fill(&ch, 4, 1);
    assert_eq!(out(ch.send(b"x", Wait::Never)), Got::WouldBlock);
    let ep = edge_waiter(ch.send_fd().unwrap().as_raw_fd());
    assert_eq!(edge_events(&ep), 0, "full: no event at registration");
    ch.recv(Wait::Never).unwrap();
    assert_eq!(edge_events(&ep), 0, "above low water: no event");
    ch.recv(Wait::Never).unwrap();
    assert_eq!(edge_events(&ep), 1, "D9: drained to low water: an event");
    assert_eq!(edge_events(&ep), 0, "edge-triggered: once");
    // Full again and refused: the next drain is an event again.
    fill(&ch, 2, 1);
    assert_eq!(out(ch.send(b"x", Wait::Never)), Got::WouldBlock);
    assert_eq!(edge_events(&ep), 0);
    ch.recv(Wait::Never).unwrap();
    ch.recv(Wait::Never).unwrap();
    assert_eq!(edge_events(&ep), 1, "D9: the second drain");
    // Close writes it though it is up.
    ch.close();
    assert_eq!(edge_events(&ep), 1, "D9: close");
}

#[test]
fn d9_send_fd_created_after_room_came_back_is_an_event_at_registration() {
    // Refused while full, room came back before the fd existed: the fd is
    // created up, and a waiter registering it gets that level as its event.
    let ch = chan(Options::new(4));
    fill(&ch, 4, 1);
    assert_eq!(out(ch.send(b"x", Wait::Never)), Got::WouldBlock);
    ch.recv(Wait::Never).unwrap();
    ch.recv(Wait::Never).unwrap();
    let ep = edge_waiter(ch.send_fd().unwrap().as_raw_fd());
    assert_eq!(edge_events(&ep), 1, "up at registration: an event");
    assert_eq!(edge_events(&ep), 0);
}

#[test]
fn d5_send_fd_created_while_other_threads_send_and_receive_matches_the_state() {
    // Threads fill and drain while another asks for the fd; once they are
    // joined the fd's level is what D5 says for the state they left.
    for round in 0..200 {
        let _dog = Watchdog::new("late send fd under traffic");
        let ch = chan(Options::new(4));
        let (tx, rx, asker) = (ch.clone(), ch.clone(), ch.clone());
        thread::scope(|s| {
            s.spawn(move || {
                for i in 0..(round % 7 + 4) {
                    let _ = tx.send(&[i as u8], Wait::Never);
                }
            });
            s.spawn(move || {
                for _ in 0..(round % 5) {
                    let _ = rx.recv(Wait::Never);
                }
            });
            s.spawn(move || {
                asker.send_fd().unwrap();
            });
        });
        let st = ch.stats();
        let up = send_ready(&ch);
        if st.pending == 4 {
            assert!(!up, "full, send fd up: {st:?}");
        } else if st.pending <= 2 {
            assert!(up, "at low water, send fd down: {st:?}");
        }
        // Between, either level is right (down if it was full since).
    }
}
