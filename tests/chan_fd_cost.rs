// SPDX-License-Identifier: MIT OR Apache-2.0
//! What a channel costs in fds: one (its receive eventfd) until its send
//! fd is first asked for, then two, whichever handle asks. Alone in its
//! binary, as it counts the process's fds (other tests' threads would
//! open and close theirs meanwhile); its tests take turns (`COUNTING`).

use std::os::fd::{AsFd, AsRawFd};
use std::sync::Mutex;

use eventq::{Chan, Options, Wait};

/// Held by each test while it counts: the harness runs them on threads.
static COUNTING: Mutex<()> = Mutex::new(());

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .count()
}

#[test]
fn a_channel_has_one_fd_until_its_send_fd_is_asked_for() {
    let _turn = COUNTING.lock().unwrap_or_else(|e| e.into_inner());
    let before = open_fds();
    let ch = Chan::new(Options::new(1024)).unwrap();
    assert_eq!(open_fds(), before + 1, "new: the receive fd only");
    // Traffic, fullness and clones do not create it.
    let c2 = ch.clone();
    for i in 0..1024u32 {
        c2.send(&i.to_le_bytes(), Wait::Never).unwrap();
    }
    assert!(c2.send(b"x", Wait::Never).is_err(), "full");
    for _ in 0..1024 {
        ch.recv(Wait::Never).unwrap();
    }
    assert_eq!(open_fds(), before + 1, "traffic: still the receive fd only");
    let fd = c2.send_fd().unwrap().as_raw_fd();
    assert_eq!(open_fds(), before + 2, "send_fd: created");
    assert_eq!(ch.send_fd().unwrap().as_raw_fd(), fd);
    assert_eq!(open_fds(), before + 2, "once per channel");
    ch.close();
    drop(c2);
    assert_eq!(open_fds(), before + 2, "a handle left: both fds stay");
    drop(ch);
    assert_eq!(open_fds(), before, "the last handle closes both");
}

#[test]
fn as_fd_is_the_receive_fd_and_creates_none() {
    let _turn = COUNTING.lock().unwrap_or_else(|e| e.into_inner());
    let before = open_fds();
    let ch = Chan::new(Options::new(4)).unwrap();
    assert_eq!(open_fds(), before + 1, "new: the receive fd only");
    assert_eq!(ch.as_fd().as_raw_fd(), ch.recv_fd().as_raw_fd());
    // Another handle's as_fd is the same fd: the channel has one.
    assert_eq!(ch.clone().as_fd().as_raw_fd(), ch.recv_fd().as_raw_fd());
    assert_eq!(open_fds(), before + 1, "as_fd: no fd created");
    drop(ch);
    assert_eq!(open_fds(), before);
}
