// SPDX-License-Identifier: MIT OR Apache-2.0
//! D4's hand-on for consumers that leave: consumers wait on the receive fd
//! (with EPOLLEXCLUSIVE in one process, one wakes per write); the one
//! woken for a burst quits without receiving, and its `Consumer`'s drop
//! wakes another, so the burst is not left to nobody. In one process and
//! across two (where every consumer wakes, the fd being an epoll fd).

mod common;

use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};

use common::fds;
use common::*;
use eventq::{Chan, Error, Options, Side, Wait};

/// Runs `consumers` threads, each counted in and waiting on the receive
/// fd in an epoll set of its own (exclusively when `exclusive`); the first
/// to wake leaves without receiving; the rest receive until end of stream,
/// which the one that takes the burst's last message makes. Returns how
/// many messages they received.
fn first_woken_quits(tx: &Chan, rx: &Chan, consumers: usize, exclusive: bool) -> usize {
    let quit = Arc::new(AtomicUsize::new(0));
    let received = Arc::new(AtomicUsize::new(0));
    let ready = Arc::new(Barrier::new(consumers + 1));
    let threads: Vec<_> = (0..consumers)
        .map(|_| {
            let rx = rx.clone();
            let (quit, received, ready) = (quit.clone(), received.clone(), ready.clone());
            std::thread::spawn(move || {
                let me = rx.consumer();
                let ep = fds::Epoll::new().unwrap();
                let mut events = libc::EPOLLIN as u32;
                if exclusive {
                    events |= libc::EPOLLEXCLUSIVE as u32;
                }
                ep.add(rx.recv_fd().as_raw_fd(), events, 0).unwrap();
                ready.wait();
                let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 1];
                loop {
                    let n = ep.wait(&mut evs, Some(HANG_GUARD)).unwrap();
                    assert_eq!(n, 1, "lost wake-up: a consumer slept through work");
                    if quit.fetch_add(1, Ordering::SeqCst) == 0 {
                        // Woken first: leaves without receiving.
                        drop(me);
                        return;
                    }
                    loop {
                        match rx.recv(Wait::Never) {
                            Ok(_) => {
                                // The last of the burst ends the stream.
                                if received.fetch_add(1, Ordering::SeqCst) + 1 == 10 {
                                    rx.close();
                                }
                            }
                            Err(Error::WouldBlock) => break,
                            Err(Error::Closed) => return,
                            Err(e) => panic!("{e:?}"),
                        }
                    }
                }
            })
        })
        .collect();
    ready.wait();
    for i in 0u32..10 {
        tx.send(&i.to_le_bytes(), Wait::Never).unwrap();
    }
    // A burst left to nobody leaves the consumers asleep: their waits'
    // hang guard fails the test.
    for t in threads {
        t.join().unwrap();
    }
    received.load(Ordering::SeqCst)
}

#[test]
fn a_consumer_that_leaves_hands_its_wake_up_on_in_one_process() {
    for _ in 0..20 {
        let chan = Chan::new(Options::new(64)).unwrap();
        assert_eq!(first_woken_quits(&chan, &chan, 3, true), 10, "D1/D4");
    }
}

#[test]
fn a_consumer_that_leaves_hands_its_wake_up_on_across_processes() {
    for _ in 0..20 {
        let tx = Chan::new_shared(Options::new(64), Side::Send).unwrap();
        let (a, b) = UnixStream::pair().unwrap();
        tx.send_to(&a).unwrap();
        let rx = Chan::recv_from(&b).unwrap();
        assert_eq!(first_woken_quits(&tx, &rx, 3, false), 10, "D1/D4");
    }
}

#[test]
fn leaving_writes_the_fd_only_for_another_consumer() {
    let chan = Chan::new(Options::new(8)).unwrap();
    let _ = chan.recv_fd(); // as the consumers' pollers would
    chan.send(b"x", Wait::Never).unwrap();
    let rings = chan.stats().recv_doorbell_rings;
    chan.consumer().leave();
    assert_eq!(chan.stats().recv_doorbell_rings, rings, "alone: no write");
    let stays = chan.consumer();
    chan.consumer().leave();
    assert_eq!(
        chan.stats().recv_doorbell_rings,
        rings + 1,
        "one more wakes"
    );
    drop(stays);
    chan.recv(Wait::Never).unwrap();
    let e = chan.consumer();
    drop(e);
    assert_eq!(
        chan.stats().recv_doorbell_rings,
        rings + 1,
        "nothing pending: no write"
    );
}
