// SPDX-License-Identifier: MIT OR Apache-2.0
//! Edge cases of the loop found in review: end of stream once, a stop that
//! leaves nothing behind, a stop inside a callback that runs nothing more
//! and loses nothing, ids that belong to their loop, a non-blocking fd.

mod fds;

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use eventq::{Chan, Error, Event, Loop, Options};
use fds::is_readable;

#[test]
fn end_of_stream_is_delivered_once_even_after_re_enabling() {
    let lp = Loop::new().unwrap();
    let chan = Chan::new(Options::new(4)).unwrap();
    let eos = Arc::new(AtomicUsize::new(0));
    let e = eos.clone();
    let id = lp
        .add_chan(&chan, move |_, _, ev| {
            if ev == Event::Closed {
                e.fetch_add(1, Ordering::SeqCst);
            }
            Ok(())
        })
        .unwrap();
    chan.close();
    lp.run_once(Some(Duration::ZERO)).unwrap();
    assert_eq!(eos.load(Ordering::SeqCst), 1);
    lp.set_enabled(id, true).unwrap();
    for _ in 0..3 {
        lp.run_once(Some(Duration::ZERO)).unwrap();
    }
    assert_eq!(eos.load(Ordering::SeqCst), 1);
    // The re-enabled source disabled itself again: the loop is idle.
    assert!(!is_readable(lp.fd().as_raw_fd()).unwrap());
}

#[test]
fn stop_leaves_the_loop_fd_idle() {
    let lp = Loop::new().unwrap();
    assert!(!is_readable(lp.fd().as_raw_fd()).unwrap());
    lp.stop();
    assert!(
        is_readable(lp.fd().as_raw_fd()).unwrap(),
        "stop wakes the loop"
    );
    lp.run().unwrap();
    assert!(
        !is_readable(lp.fd().as_raw_fd()).unwrap(),
        "run consumed the wake-up"
    );
}

#[test]
fn stop_seen_by_run_once_does_not_keep_an_embedder_awake() {
    let lp = Loop::new().unwrap();
    lp.stop();
    assert_eq!(lp.run_once(Some(Duration::ZERO)).unwrap(), 0);
    assert!(!is_readable(lp.fd().as_raw_fd()).unwrap());
    // The stop is still pending: this run returns without any event.
    lp.run().unwrap();
}

#[test]
fn a_stop_inside_a_callback_takes_effect_when_it_returns() {
    let lp = Loop::new().unwrap();
    let (a, b) = (
        Chan::new(Options::new(16)).unwrap(),
        Chan::new(Options::new(16)).unwrap(),
    );
    for _ in 0..10 {
        a.send(b"a", eventq::Wait::Never).unwrap();
        b.send(b"b", eventq::Wait::Never).unwrap();
    }
    // calls[0]: a's messages, [1]: b's, [2]: posts; [3]: calls after the stop.
    let calls = Arc::new([const { AtomicUsize::new(0) }; 4]);
    let stopped = Arc::new(AtomicUsize::new(0));
    let note = {
        let (calls, stopped) = (calls.clone(), stopped.clone());
        move |i: usize| {
            if stopped.load(Ordering::SeqCst) == 1 {
                calls[3].fetch_add(1, Ordering::SeqCst);
            }
            calls[i].fetch_add(1, Ordering::SeqCst);
        }
    };
    let (n, s) = (note.clone(), stopped.clone());
    lp.add_chan(&a, move |lp, _, _| {
        n(0);
        if s.fetch_add(1, Ordering::SeqCst) == 0 {
            lp.stop();
        }
        Ok(())
    })
    .unwrap();
    let n = note.clone();
    lp.add_chan(&b, move |_, _, _| {
        n(1);
        Ok(())
    })
    .unwrap();
    for _ in 0..3 {
        let n = note.clone();
        lp.post(move |_| n(2)).unwrap();
    }
    lp.run().unwrap();
    let got = |i: usize| calls[i].load(Ordering::SeqCst);
    assert_eq!((got(0), got(3)), (1, 0), "nothing ran after the stop");
    assert_eq!(
        (got(1), got(2)),
        (0, 0),
        "the other source and the posts wait"
    );
    assert_eq!(a.stats().pending, 9, "a stopped source takes no message");
    // The next iterations deliver the rest; a stop pending before run_once
    // does not end its dispatch.
    stopped.store(2, Ordering::SeqCst);
    lp.stop();
    while lp.run_once(Some(Duration::ZERO)).unwrap() > 0 {}
    assert_eq!((got(0), got(1), got(2), got(3)), (10, 10, 3, 0));
    lp.run().unwrap(); // the pending stop
}

#[test]
fn an_id_of_one_loop_means_nothing_to_another() {
    let a = Loop::new().unwrap();
    let b = Loop::new().unwrap();
    let ida = a
        .add_timer(Duration::from_secs(3600), Duration::ZERO, |_, _, _| Ok(()))
        .unwrap();
    let idb = b
        .add_timer(Duration::from_secs(3600), Duration::ZERO, |_, _, _| Ok(()))
        .unwrap();
    assert!(matches!(b.remove(ida), Err(Error::Stale)));
    assert!(matches!(a.source_error(idb), Err(Error::Stale)));
    b.remove(idb).unwrap();
    a.remove(ida).unwrap();
}

#[test]
fn the_loop_fd_is_nonblocking_and_cloexec() {
    let lp = Loop::new().unwrap();
    let flags = fd_flags(lp.fd().as_raw_fd());
    assert_ne!(flags & libc::O_NONBLOCK, 0);
    assert_ne!(flags & libc::O_CLOEXEC, 0);
}

/// The open flags of one of this process's fds, read from /proc so the test
/// needs no `unsafe`.
fn fd_flags(fd: i32) -> i32 {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).unwrap();
    let octal = info.lines().find_map(|l| l.strip_prefix("flags:")).unwrap();
    i32::from_str_radix(octal.trim(), 8).unwrap()
}
