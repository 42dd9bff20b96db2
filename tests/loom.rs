// SPDX-License-Identifier: MIT OR Apache-2.0
//! Model checks of the channel's wake-up protocol with loom: every
//! interleaving of the real `Chan` code on 2-3 threads, with the eventfds
//! replaced by a model of the kernel's counter (src/sync.rs).
//!
//! Run with `make loom` (`RUSTFLAGS="--cfg loom" cargo test --test loom`).
//! loom fails a model on a deadlock (a lost wake-up of a blocked thread),
//! on a doorbell raised twice (the model asserts it), and on any assertion
//! below. What is asserted, at quiescence (all threads joined):
//! - D4: the receive doorbell is raised iff messages are pending or the
//!   channel is closed;
//! - D5: the send doorbell is down while full and open, up at or below the
//!   low-water mark or when closed;
//! - D1/D6: every accepted message is received once or still queued; close
//!   loses nothing and wakes every blocked thread.
//!
//! The edge guarantee is checked with an edge-triggered observer: the
//! eventfd model counts writes (each is an event to an EPOLLET waiter or Go's
//! netpoller, up or not). A waiter notes the count, tries a call, and if it
//! is refused with `WouldBlock` it would sleep until the count moves; at
//! quiescence, if the call would now succeed (a message pending, or the
//! send fd's rule says room, or the channel closed), the count must have
//! moved.
//!
//! The send doorbell is created when first asked for, under the lock that
//! serialises its changes, at the level its flag has tracked meanwhile: two
//! models create it while other threads fill and drain the channel.
#![cfg(loom)]

use std::collections::HashSet;

use eventq::{Chan, Error, Options, Wait};
use loom::thread;

/// Checks D4 and D5 on a quiescent channel without a byte limit.
fn assert_doorbells_match(chan: &Chan) {
    let (recv, send) = chan.doorbells();
    let s = chan.stats();
    assert_eq!(
        recv,
        s.pending > 0 || s.closed,
        "D4: recv doorbell {recv} with {s:?}"
    );
    let cap = chan.capacity() as u64;
    if s.closed {
        assert!(send, "D5: send doorbell down on a closed channel");
    } else if s.pending == cap {
        assert!(!send, "D5: send doorbell up on a full channel");
    } else if s.pending <= cap / 2 {
        assert!(send, "D5: send doorbell down at low water: {s:?}");
    }
}

/// A channel with both doorbells in use from the start: the send fd
/// created and the receive fd awake, as when a poller asked for them
/// first. These models check their transitions; their creation and waking
/// during traffic have models of their own.
fn opened(options: Options) -> Chan {
    let chan = Chan::new(options).unwrap();
    chan.open_send_bell();
    chan.open_recv_bell();
    chan
}

/// Receives what is left, without waiting.
fn drain(chan: &Chan) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while let Ok(m) = chan.recv(Wait::Never) {
        out.push(m);
    }
    out
}

/// Two threads: every interleaving with up to 3 preemptions.
fn model(f: impl Fn() + Sync + Send + 'static) {
    model_bounded(3, f);
}

/// Three threads: up to 2 preemptions. Each lock-free call is several
/// scheduling points, and a bound of 3 on three threads runs for hours.
fn model3(f: impl Fn() + Sync + Send + 'static) {
    model_bounded(2, f);
}

fn model_bounded(preemptions: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(preemptions);
    b.check(f);
}

#[test]
fn send_and_try_recv_keep_the_doorbell_exact() {
    model(|| {
        let chan = opened(Options::new(2));
        let tx = chan.clone();
        let producer = thread::spawn(move || {
            tx.send(b"a", Wait::Never).unwrap();
            tx.send(b"b", Wait::Never).unwrap();
        });
        let rx = chan.clone();
        let consumer = thread::spawn(move || {
            let mut got = Vec::new();
            for _ in 0..2 {
                if let Ok(m) = rx.recv(Wait::Never) {
                    got.push(m);
                }
            }
            got
        });
        producer.join().unwrap();
        let mut got = consumer.join().unwrap();
        assert_doorbells_match(&chan);
        got.extend(drain(&chan));
        assert_eq!(got, vec![b"a".to_vec(), b"b".to_vec()], "D1/D3");
        assert_doorbells_match(&chan);
    });
}

#[test]
fn a_blocked_receiver_is_always_woken() {
    model(|| {
        let chan = opened(Options::new(1));
        let rx = chan.clone();
        let consumer = thread::spawn(move || rx.recv(Wait::Forever));
        chan.send(b"x", Wait::Forever).unwrap();
        assert_eq!(consumer.join().unwrap().unwrap(), b"x");
        assert_doorbells_match(&chan);
    });
}

/// A blocking receiver announces itself (`TAIL_RECV_WAITERS`) and parks. A
/// send racing the announcement can make it find a message instead; it
/// then takes the announcement back, there being no sleeper, and the send
/// that follows skips `waiting`. It must still be woken when it parks for
/// the second message, whichever order these happen in.
#[test]
fn a_receiver_that_takes_back_its_announcement_is_still_woken() {
    model(|| {
        let chan = opened(Options::new(2));
        let rx = chan.clone();
        let consumer = thread::spawn(move || (rx.recv(Wait::Forever), rx.recv(Wait::Forever)));
        chan.send(b"a", Wait::Forever).unwrap();
        chan.send(b"b", Wait::Forever).unwrap();
        let (a, b) = consumer.join().unwrap();
        assert_eq!((a.unwrap(), b.unwrap()), (b"a".to_vec(), b"b".to_vec()));
        assert_doorbells_match(&chan);
    });
}

#[test]
fn a_blocked_sender_is_always_woken_and_the_send_doorbell_follows() {
    model(|| {
        let chan = opened(Options::new(1));
        let tx = chan.clone();
        let producer = thread::spawn(move || {
            tx.send(b"1", Wait::Forever).unwrap();
            tx.send(b"2", Wait::Forever).unwrap();
        });
        let a = chan.recv(Wait::Forever).unwrap();
        let b = chan.recv(Wait::Forever).unwrap();
        producer.join().unwrap();
        assert_eq!((a.as_slice(), b.as_slice()), (&b"1"[..], &b"2"[..]));
        assert_doorbells_match(&chan);
    });
}

#[test]
fn a_sender_blocked_on_the_byte_limit_is_woken() {
    // The byte limit is kept apart from the ring's positions, with its own
    // fence pair (release_bytes against sync_send / wait_for_room).
    model(|| {
        let chan = opened(Options::new(4).max_bytes(4));
        chan.send(b"abc", Wait::Never).unwrap();
        let tx = chan.clone();
        let producer = thread::spawn(move || tx.send(b"de", Wait::Forever));
        assert_eq!(chan.recv(Wait::Forever).unwrap(), b"abc");
        producer.join().unwrap().unwrap();
        let s = chan.stats();
        assert_eq!((s.pending, s.pending_bytes), (1, 2));
        let (recv, send) = chan.doorbells();
        assert!(recv, "D4: a message is pending");
        assert!(send, "D5: 2 bytes queued is at the byte low-water mark");
        assert_eq!(chan.recv(Wait::Never).unwrap(), b"de", "D1/D3");
    });
}

#[test]
fn two_producers_one_consumer_lose_nothing() {
    model3(|| {
        let chan = opened(Options::new(2));
        let producers: Vec<_> = [b"p", b"q"]
            .into_iter()
            .map(|m| {
                let tx = chan.clone();
                thread::spawn(move || tx.send(m, Wait::Forever).unwrap())
            })
            .collect();
        let first = chan.recv(Wait::Forever).unwrap();
        for p in producers {
            p.join().unwrap();
        }
        assert_doorbells_match(&chan);
        let mut all: HashSet<Vec<u8>> = drain(&chan).into_iter().collect();
        all.insert(first);
        assert_eq!(all.len(), 2, "D1: each message exactly once");
        assert_doorbells_match(&chan);
    });
}

/// A long message lives in its slot's heap buffer, which has no lock of its
/// own: only the stamp keeps the next sender out until the receiver is done
/// with it (loom's `UnsafeCell` under the buffer fails the model on two
/// accesses the stamps do not order, and the messages must arrive whole).
#[test]
fn a_long_messages_slot_is_not_reused_while_it_is_read() {
    model(|| {
        let chan = Chan::new(Options::new(1)).unwrap();
        let tx = chan.clone();
        let producer = thread::spawn(move || {
            tx.send(&[1; 100], Wait::Forever).unwrap();
            tx.send(&[2; 100], Wait::Forever).unwrap();
        });
        let first = chan.recv(Wait::Forever).unwrap();
        let second = chan.recv(Wait::Forever).unwrap();
        producer.join().unwrap();
        assert_eq!((first, second), (vec![1; 100], vec![2; 100]), "D1/D2/D3");
    });
}

#[test]
fn close_wakes_every_blocked_receiver() {
    // No send here: two receivers spinning on a slot a sender has claimed
    // but not yet filled make loom's search unbounded (each may yield to
    // the other forever); the send-and-close race is the model below.
    model3(|| {
        let chan = opened(Options::new(2));
        let receivers: Vec<_> = (0..2)
            .map(|_| {
                let rx = chan.clone();
                thread::spawn(move || rx.recv(Wait::Forever))
            })
            .collect();
        chan.close();
        for r in receivers {
            assert!(
                matches!(r.join().unwrap(), Err(Error::Closed)),
                "D6: end of stream for every blocked receiver"
            );
        }
        assert_doorbells_match(&chan);
    });
}

#[test]
fn close_after_a_send_loses_nothing_and_ends_the_stream() {
    model(|| {
        let chan = opened(Options::new(2));
        let rx = chan.clone();
        let consumer = thread::spawn(move || (rx.recv(Wait::Forever), rx.recv(Wait::Forever)));
        chan.send(b"m", Wait::Forever).unwrap();
        chan.close();
        let (first, second) = consumer.join().unwrap();
        assert_eq!(first.unwrap(), b"m", "D6: queued before close, received");
        assert!(
            matches!(second, Err(Error::Closed)),
            "D6: then end of stream"
        );
        assert_doorbells_match(&chan);
    });
}

#[test]
fn close_wakes_a_blocked_sender_and_keeps_what_was_queued() {
    model(|| {
        let chan = opened(Options::new(1));
        chan.send(b"queued", Wait::Never).unwrap();
        let tx = chan.clone();
        let producer = thread::spawn(move || tx.send(b"late", Wait::Forever));
        chan.close();
        assert!(matches!(producer.join().unwrap(), Err(Error::Closed)));
        assert_doorbells_match(&chan);
        assert_eq!(chan.recv(Wait::Never).unwrap(), b"queued", "D6");
        assert!(matches!(chan.recv(Wait::Never), Err(Error::Closed)));
        assert_doorbells_match(&chan);
    });
}

#[test]
fn close_racing_sends_and_receives_keeps_the_doorbells_exact() {
    model(|| {
        let chan = opened(Options::new(2));
        let tx = chan.clone();
        let producer = thread::spawn(move || {
            let mut accepted = 0;
            for m in [b"1", b"2"] {
                if tx.send(m, Wait::Never).is_ok() {
                    accepted += 1;
                }
            }
            accepted
        });
        let rx = chan.clone();
        let consumer = thread::spawn(move || usize::from(rx.recv(Wait::Never).is_ok()));
        chan.close();
        let accepted = producer.join().unwrap();
        let received = consumer.join().unwrap();
        assert_doorbells_match(&chan);
        assert_eq!(received + drain(&chan).len(), accepted, "D1/D6");
        assert_doorbells_match(&chan);
    });
}

/// The writes the receive fd had, if a non-blocking receive was refused
/// right after: an edge-triggered waiter that is now asleep until the
/// count moves.
fn refused_receive(chan: &Chan) -> Option<u64> {
    let seen = chan.doorbell_writes().0;
    matches!(chan.recv(Wait::Never), Err(Error::WouldBlock)).then_some(seen)
}

/// Fails unless a receiver refused at `seen` writes got an event since,
/// when a message is pending or the channel is closed.
fn assert_recv_edge(chan: &Chan, refused_at: Option<u64>) {
    let s = chan.stats();
    if let Some(seen) = refused_at {
        if s.pending > 0 || s.closed {
            assert!(
                chan.doorbell_writes().0 > seen,
                "edge: a refused receiver got no event, with {s:?}"
            );
        }
    }
}

#[test]
fn a_refused_receiver_gets_an_edge_for_the_next_message() {
    // The lost wake-up: the taker claims the last message and has not yet
    // lowered the fd when the waiter is refused; the next send finds the fd
    // up and writes nothing, and the taker, seeing that message, lowers
    // nothing. The waiter sends it itself so that only two threads run.
    model(|| {
        let chan = opened(Options::new(2));
        chan.send(b"1", Wait::Never).unwrap();
        let rx = chan.clone();
        let taker = thread::spawn(move || rx.recv(Wait::Never).is_ok());
        let refused_at = refused_receive(&chan);
        chan.send(b"2", Wait::Never).unwrap();
        taker.join().unwrap();
        assert_recv_edge(&chan, refused_at);
        assert_doorbells_match(&chan);
    });
}

#[test]
fn a_short_batch_receive_is_owed_an_edge_too() {
    // A batch that drains the queue finds it empty before it lowers the fd;
    // a send landing in between finds the fd up and writes nothing, and the
    // batch, returning short, must not leave the fd up without an event.
    model(|| {
        let chan = opened(Options::new(4));
        chan.send(b"1", Wait::Never).unwrap();
        let tx = chan.clone();
        let sender = thread::spawn(move || tx.send(b"2", Wait::Never).unwrap());
        let seen = chan.doorbell_writes().0;
        let (mut buf, mut lens) = ([0u8; 8], [0usize; 4]);
        // Fewer than asked: an edge-triggered caller waits for an event next.
        let short = match chan.recv_batch(&mut buf, &mut lens, Wait::Never) {
            Ok(n) => n < 4,
            Err(e) => matches!(e, Error::WouldBlock),
        };
        sender.join().unwrap();
        assert_recv_edge(&chan, short.then_some(seen));
        assert_doorbells_match(&chan);
    });
}

#[test]
fn close_gives_a_refused_receiver_an_edge() {
    // No send: close must write the receive fd even if it is up already.
    model3(|| {
        let chan = opened(Options::new(2));
        chan.send(b"1", Wait::Never).unwrap();
        let rx = chan.clone();
        let taker = thread::spawn(move || rx.recv(Wait::Never).is_ok());
        let w = chan.clone();
        let waiter = thread::spawn(move || refused_receive(&w));
        chan.close();
        taker.join().unwrap();
        let refused_at = waiter.join().unwrap();
        assert_recv_edge(&chan, refused_at);
        assert_doorbells_match(&chan);
    });
}

#[test]
fn a_refused_sender_gets_an_edge_when_room_comes() {
    // The mirror: the waiter finds the ring full just before a receive
    // frees it, and the send fd, never lowered, stays up: without an event
    // the waiter sleeps on an empty channel.
    model3(|| {
        let chan = opened(Options::new(1));
        let tx = chan.clone();
        let sender = thread::spawn(move || tx.send(b"1", Wait::Never).is_ok());
        let rx = chan.clone();
        let receiver = thread::spawn(move || rx.recv(Wait::Never).is_ok());
        let seen = chan.doorbell_writes().1;
        let refused = matches!(chan.send(b"2", Wait::Never), Err(Error::WouldBlock));
        sender.join().unwrap();
        receiver.join().unwrap();
        let s = chan.stats();
        // Low water is capacity / 2 = 0: the send fd's rule says room at 0.
        if refused && s.pending == 0 {
            assert!(
                chan.doorbell_writes().1 > seen,
                "edge: a refused sender got no event, with {s:?}"
            );
        }
        assert_doorbells_match(&chan);
    });
}

/// A send refused by the byte limit while the ring has slots to spare:
/// nothing lowered the send fd (the ring is not full), so the refusal must
/// lower it, or no raise follows when the bytes are given back and the
/// waiter sleeps with room.
#[test]
fn a_sender_refused_by_the_byte_limit_gets_an_edge_when_room_comes() {
    model(|| {
        let chan = opened(Options::new(4).max_bytes(4));
        chan.send(b"aaa", Wait::Never).unwrap();
        let rx = chan.clone();
        let receiver = thread::spawn(move || rx.recv(Wait::Never).is_ok());
        let seen = chan.doorbell_writes().1;
        let refused = matches!(chan.send(b"bb", Wait::Never), Err(Error::WouldBlock));
        receiver.join().unwrap();
        let s = chan.stats();
        // Low water in bytes is max_bytes / 2 = 2: room by the fd's rule.
        if refused && s.pending_bytes <= 2 {
            assert!(
                chan.doorbell_writes().1 > seen,
                "edge: a sender refused by the byte limit got no event, with {s:?}"
            );
        }
    });
}

#[test]
fn every_end_of_stream_report_writes_the_receive_fd() {
    // Consumers registered with EPOLLEXCLUSIVE: the kernel wakes one of them
    // per write, so close's one write wakes one consumer. Each receive that
    // reports end of stream must write the fd again after it began, waking
    // the next; a close racing a send and the receives must not change that.
    fn recv_reports_with_a_write(chan: &Chan) -> bool {
        let seen = chan.doorbell_writes().0;
        let closed = matches!(chan.recv(Wait::Never), Err(Error::Closed));
        assert!(
            !closed || chan.doorbell_writes().0 > seen,
            "an end-of-stream report wrote nothing"
        );
        closed
    }
    model(|| {
        let chan = opened(Options::new(2));
        let tx = chan.clone();
        let closer = thread::spawn(move || {
            let _ = tx.send(b"1", Wait::Never);
            tx.close();
        });
        recv_reports_with_a_write(&chan);
        recv_reports_with_a_write(&chan);
        closer.join().unwrap();
        drain(&chan);
        assert!(recv_reports_with_a_write(&chan));
        assert_doorbells_match(&chan);
    });
}

#[test]
fn a_send_doorbell_created_during_traffic_starts_at_the_right_level() {
    // Created while a sender fills the channel (its second send refused,
    // lowering the flag) and a receiver drains it: at quiescence the fd
    // matches D5 as if it had existed all along.
    model3(|| {
        let chan = Chan::new(Options::new(1)).unwrap();
        chan.open_recv_bell();
        let tx = chan.clone();
        let sender = thread::spawn(move || {
            let _ = tx.send(b"1", Wait::Never);
            let _ = tx.send(b"2", Wait::Never);
        });
        let rx = chan.clone();
        let receiver = thread::spawn(move || rx.recv(Wait::Never).is_ok());
        chan.open_send_bell();
        sender.join().unwrap();
        receiver.join().unwrap();
        assert_doorbells_match(&chan);
    });
}

#[test]
fn a_refused_sender_that_creates_the_send_fd_after_gets_an_edge() {
    // The waiter is refused with no fd yet, then creates it and registers:
    // its first event is the level at registration, so it is owed a write
    // after that only if the fd was down then.
    // Two threads (the channel starts full), not three: with a racing
    // sender too the model took 78 s of `make test`.
    model(|| {
        let chan = Chan::new(Options::new(1)).unwrap();
        chan.open_recv_bell();
        chan.send(b"1", Wait::Never).unwrap();
        let rx = chan.clone();
        let receiver = thread::spawn(move || rx.recv(Wait::Never).is_ok());
        let refused = matches!(chan.send(b"2", Wait::Never), Err(Error::WouldBlock));
        chan.open_send_bell();
        let (seen, up) = chan.send_fd_registered();
        receiver.join().unwrap();
        let s = chan.stats();
        if refused && s.pending == 0 {
            assert!(
                up || chan.doorbell_writes().1 > seen,
                "edge: a refused sender got no event, with {s:?}"
            );
        }
        assert_doorbells_match(&chan);
    });
}

#[test]
fn a_receive_fd_woken_as_a_receive_empties_the_queue_ends_down() {
    // While the fd sleeps an emptying receive leaves it alone; the wake
    // judges the queue. Whichever goes first, the fd ends down.
    model(|| {
        let chan = Chan::new(Options::new(2)).unwrap();
        chan.open_send_bell();
        chan.send(b"a", Wait::Never).unwrap();
        let rx = chan.clone();
        let receiver = thread::spawn(move || rx.recv(Wait::Never).unwrap());
        chan.open_recv_bell();
        assert_eq!(receiver.join().unwrap(), b"a");
        assert_doorbells_match(&chan);
    });
}

#[test]
fn a_receive_fd_woken_as_a_send_fills_the_queue_ends_up_with_an_edge() {
    // A send to a sleeping fd writes nothing; the wake raises it if the
    // message is there, or the send does. An edge-triggered waiter that
    // registers after the wake sees the message either way.
    model(|| {
        let chan = Chan::new(Options::new(2)).unwrap();
        chan.open_send_bell();
        let tx = chan.clone();
        let sender = thread::spawn(move || tx.send(b"a", Wait::Never).unwrap());
        chan.open_recv_bell();
        let (seen, up) = chan.recv_fd_registered();
        sender.join().unwrap();
        assert!(
            up || chan.doorbell_writes().0 > seen,
            "edge: a waiter registered after the wake got no event"
        );
        assert_doorbells_match(&chan);
    });
}
