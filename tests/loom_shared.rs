// SPDX-License-Identifier: MIT OR Apache-2.0
//! Model checks of the process-shared channel's doorbells with loom: the
//! real code of both ends, each loom thread standing for a process (or a
//! thread of one), the memory and the eventfds shared as between two
//! processes, the eventfds replaced by the kernel counter's model.
//!
//! What changes from one process (tests/loom.rs) is the lock that
//! serialises doorbell changes: it lives in the shared memory and nobody
//! waits for it; a call that finds it held leaves a request that the
//! holder serves before letting go. The models check, at quiescence:
//! - D4 and D5: each doorbell matches the queue (every request was served);
//! - D9: a refused call's fd got a write since, if the call would now
//!   succeed;
//! - recovery: a process that dies holding the lock leaves the survivor's
//!   doorbells right once its death is seen.
//!
//! Run with `make loom`.
#![cfg(loom)]

use eventq::{Chan, Error, Options, Side, Wait};
use loom::thread;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

fn model3(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.check(f);
}

/// A sending end and the receiving end of one channel.
fn ends(capacity: usize) -> (Chan, Chan) {
    let tx = Chan::new_shared(Options::new(capacity).max_msg_size(8), Side::Send).unwrap();
    let rx = tx.model_other_end();
    (tx, rx)
}

/// D4 and D5 at quiescence (both ends see the same doorbells).
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
        assert!(!send, "D5: send doorbell up on a full channel: {s:?}");
    } else if s.pending <= cap / 2 {
        assert!(send, "D5: send doorbell down at low water: {s:?}");
    }
}

#[test]
fn sends_and_receives_keep_the_doorbells_exact() {
    model(|| {
        let (tx, rx) = ends(2);
        let producer = thread::spawn(move || {
            tx.send(b"a", Wait::Never).unwrap();
            tx.send(b"b", Wait::Never).unwrap();
        });
        let mut got = Vec::new();
        for _ in 0..2 {
            if let Ok(m) = rx.recv(Wait::Never) {
                got.push(m);
            }
        }
        producer.join().unwrap();
        assert_doorbells_match(&rx);
        while let Ok(m) = rx.recv(Wait::Never) {
            got.push(m);
        }
        assert_eq!(got, [b"a".to_vec(), b"b".to_vec()], "D1/D3");
        assert_doorbells_match(&rx);
    });
}

#[test]
fn two_receiving_threads_and_a_sender_keep_the_doorbells_exact() {
    // Three parties contend for the doorbell lock: whoever holds it serves
    // the others' requests.
    model3(|| {
        let (tx, rx) = ends(2);
        let rx2 = rx.clone();
        let producer = thread::spawn(move || {
            tx.send(b"a", Wait::Never).unwrap();
        });
        let other = thread::spawn(move || rx2.recv(Wait::Never).is_ok());
        let mine = rx.recv(Wait::Never).is_ok();
        producer.join().unwrap();
        let theirs = other.join().unwrap();
        assert!(!(mine && theirs), "D1: one message taken twice");
        assert_doorbells_match(&rx);
    });
}

#[test]
fn a_refused_receiver_gets_an_edge_for_the_next_message() {
    model(|| {
        let (tx, rx) = ends(2);
        tx.send(b"1", Wait::Never).unwrap();
        let taker_end = rx.clone();
        let taker = thread::spawn(move || taker_end.recv(Wait::Never).is_ok());
        let seen = rx.doorbell_writes().0;
        let refused = matches!(rx.recv(Wait::Never), Err(Error::WouldBlock));
        tx.send(b"2", Wait::Never).unwrap();
        taker.join().unwrap();
        let s = rx.stats();
        if refused && s.pending > 0 {
            assert!(
                rx.doorbell_writes().0 > seen,
                "D9: a refused receiver got no event, with {s:?}"
            );
        }
        assert_doorbells_match(&rx);
    });
}

/// The refusal's request is served by another holder of the doorbell lock
/// (a receiving thread lowering the fd it emptied), which judges the queue
/// while a message is there; that thread then takes it, and the next one
/// comes while the fd is up and its lowering still a request. The refused
/// receiver sees an empty queue, and only the edge its refusal asked for
/// writes the fd (D9).
#[test]
fn a_refused_receiver_gets_an_edge_though_another_holder_served_its_request() {
    model(|| {
        let (tx, rx) = ends(4);
        tx.send(b"1", Wait::Never).unwrap();
        let taker_end = rx.clone();
        let taker = thread::spawn(move || {
            let _ = taker_end.recv(Wait::Never);
            let _ = taker_end.recv(Wait::Never);
        });
        let sender = thread::spawn(move || {
            tx.send(b"2", Wait::Never).unwrap();
            tx.send(b"3", Wait::Never).unwrap();
        });
        let seen = rx.doorbell_writes().0;
        let refused = matches!(rx.recv(Wait::Never), Err(Error::WouldBlock));
        taker.join().unwrap();
        sender.join().unwrap();
        let s = rx.stats();
        if refused && s.pending > 0 {
            assert!(
                rx.doorbell_writes().0 > seen,
                "D9: a refused receiver got no event, with {s:?}"
            );
        }
        assert_doorbells_match(&rx);
    });
}

#[test]
fn a_refused_sender_gets_an_edge_when_room_comes() {
    model(|| {
        let (tx, rx) = ends(2);
        tx.send(b"1", Wait::Never).unwrap();
        tx.send(b"2", Wait::Never).unwrap();
        let receiver = thread::spawn(move || {
            let _ = rx.recv(Wait::Never);
        });
        let seen = tx.doorbell_writes().1;
        let refused = matches!(tx.send(b"3", Wait::Never), Err(Error::WouldBlock));
        receiver.join().unwrap();
        let s = tx.stats();
        if refused && s.pending <= 1 {
            assert!(
                tx.doorbell_writes().1 > seen,
                "D9: a refused sender got no event, with {s:?}"
            );
        }
        assert_doorbells_match(&tx);
    });
}

#[test]
fn close_from_the_receiving_end_writes_both_fds() {
    model(|| {
        let (tx, rx) = ends(2);
        let seen = tx.doorbell_writes();
        let closer = thread::spawn(move || assert!(rx.close()));
        let _ = tx.send(b"x", Wait::Never);
        closer.join().unwrap();
        let now = tx.doorbell_writes();
        assert!(
            now.0 > seen.0 && now.1 > seen.1,
            "D6/D9: close wrote {now:?}"
        );
        assert_eq!(tx.send(b"y", Wait::Never).unwrap_err().errno(), libc::EPIPE);
        assert_doorbells_match(&tx);
    });
}

#[test]
fn a_process_that_dies_holding_the_lock_is_recovered() {
    // The sender takes the doorbell lock and dies there, with a message
    // queued whose raise it never made. The receiver's requests go
    // unserved until it sees the death; then it takes the lock back,
    // makes the fds match their flags, and everything is right again.
    model(|| {
        let (tx, rx) = ends(2);
        let dying = thread::spawn(move || {
            tx.send(b"a", Wait::Never).unwrap();
            tx.model_die_holding_the_lock();
        });
        let early = rx.recv(Wait::Never).is_ok();
        dying.join().unwrap();
        rx.model_peer_died();
        let mut got = usize::from(early);
        loop {
            match rx.recv(Wait::Never) {
                Ok(_) => got += 1,
                Err(Error::Closed) => break,
                Err(e) => panic!("after the death: {e:?}"),
            }
        }
        assert_eq!(got, 1, "D1: the message sent before the death");
        // The queue is empty and open: the receive doorbell down, the send
        // one up. (What keeps the receive fd readable after the death is
        // the link's hang-up, which the model does not have.)
        assert_eq!(rx.doorbells(), (false, true), "D4/D5 after recovery");
    });
}

#[test]
fn a_process_that_dies_in_the_middle_of_a_raise_is_recovered() {
    // The sender holds the doorbell lock, publishes a message (its own
    // request to raise the receive doorbell waits for the lock it holds),
    // flips the flag to raised and dies before writing the eventfd. Once
    // the receiver sees the death, the fd must match the flag and then
    // the queue: readable while the message waits, down once it is taken.
    model(|| {
        let (tx, rx) = ends(2);
        let dying = thread::spawn(move || {
            tx.model_die_holding_the_lock();
            tx.send(b"a", Wait::Never).unwrap();
            tx.model_die_mid_raise();
        });
        let early = rx.recv(Wait::Never).is_ok();
        dying.join().unwrap();
        rx.model_peer_died();
        if !early {
            // Seeing the death is a refused receive's job; then the fd
            // says what is pending.
            let _ = rx.stats();
            assert!(rx.is_closed());
            assert_eq!(rx.doorbells().0, true, "D4: a message waits");
            assert_eq!(rx.recv(Wait::Never).unwrap(), b"a");
        }
        assert_eq!(rx.recv(Wait::Never).unwrap_err().errno(), libc::EPIPE);
        assert_eq!(rx.doorbells(), (false, true), "D4/D5 after recovery");
    });
}

#[test]
fn a_process_that_dies_in_the_middle_of_a_lower_is_recovered() {
    // The receiver holds the doorbell lock, takes the only message (its
    // own request to lower the receive doorbell waits for the lock it
    // holds), clears the flag and dies before reading the eventfd. Once
    // the sender sees the death, the fd must be down again: nothing is
    // pending.
    model(|| {
        let (tx, rx) = ends(2);
        tx.send(b"a", Wait::Never).unwrap();
        let dying = thread::spawn(move || {
            rx.model_die_holding_the_lock();
            assert_eq!(rx.recv(Wait::Never).unwrap(), b"a");
            rx.model_die_mid_lower();
        });
        dying.join().unwrap();
        tx.model_peer_died();
        assert_eq!(tx.doorbells(), (false, true), "D4/D5 after recovery");
    });
}

#[test]
fn a_refused_sender_gets_an_edge_though_room_came_before_its_request_was_served() {
    // A receiver holds the doorbell lock (lowering the receive fd after it
    // emptied the queue) while the sender fills the ring and is refused:
    // both of the sender's requests wait for that holder. Another receiver
    // then makes room, so when the holder serves them the send fd is due
    // up and stays up: the refused sender's edge is the write its request
    // asked for, not a raise.
    model3(|| {
        let (tx, rx) = ends(2);
        tx.send(b"0", Wait::Never).unwrap();
        let rx2 = rx.clone();
        let first = thread::spawn(move || rx.recv(Wait::Never).is_ok());
        let second = thread::spawn(move || rx2.recv(Wait::Never).is_ok());
        let _ = tx.send(b"1", Wait::Never);
        let _ = tx.send(b"2", Wait::Never);
        let seen = tx.doorbell_writes().1;
        let refused = matches!(tx.send(b"3", Wait::Never), Err(Error::WouldBlock));
        first.join().unwrap();
        second.join().unwrap();
        let s = tx.stats();
        if refused && s.pending <= 1 {
            assert!(
                tx.doorbell_writes().1 > seen,
                "D9: a refused sender got no event, with {s:?}"
            );
        }
        assert_doorbells_match(&tx);
    });
}

#[test]
fn a_batch_send_raises_the_fd_a_receiver_lowered_during_it() {
    // The batch's first message finds the receive doorbell up; the
    // receiver then drains the ring and lowers it; the batch's next
    // message finds it down, and the batch must raise it again.
    model(|| {
        let (tx, rx) = ends(4);
        tx.send(b"0", Wait::Never).unwrap();
        let receiver = thread::spawn(move || {
            let _ = rx.recv(Wait::Never);
            let _ = rx.recv(Wait::Never);
            rx
        });
        let sent = tx.send_batch([&b"a"[..], &b"b"[..]], Wait::Never).unwrap();
        assert_eq!(sent, 2);
        let rx = receiver.join().unwrap();
        assert_doorbells_match(&rx);
    });
}
