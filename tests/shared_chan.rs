// SPDX-License-Identifier: MIT OR Apache-2.0
//! The process-shared channel through the Rust API: handover over a Unix
//! socket and by inherited fds, the contract at each end (D1-D9), the
//! wrong side, and the other process's death (real processes, SIGKILL).
//! The crash, soak and hostile-peer tests of the C ABI are in tests/c and
//! tests/stress.

mod common;

use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::net::UnixStream;

use common::fds;
use common::*;
use eventq::{Chan, Error, Options, Side, Wait};

/// A channel made here with `side`, and the other end taken over a socket
/// pair in this same process (two mappings of one memfd, as two processes
/// would have).
fn pair(options: Options, side: Side) -> (Chan, Chan) {
    let made = Chan::new_shared(options, side).expect("new_shared");
    let (a, b) = UnixStream::pair().expect("socketpair");
    made.send_to(&a).expect("send_to");
    let taken = Chan::recv_from(&b).expect("recv_from");
    assert_eq!(taken.side(), Some(side.other()));
    (made, taken)
}

#[test]
fn messages_cross_whole_in_order_then_end_of_stream() {
    let (tx, rx) = pair(Options::new(8).max_msg_size(100), Side::Send);
    assert_eq!(tx.capacity(), 8);
    assert_eq!(rx.max_msg_size(), 100);
    assert!(!recv_ready(&rx), "D4: nothing pending");
    for i in 0u8..5 {
        tx.send(&vec![i; usize::from(i) * 20], Wait::Never).unwrap();
    }
    assert!(recv_ready(&rx), "D4: pending messages");
    let mut buf = [0u8; 100];
    for i in 0u8..5 {
        let n = rx.recv_into(&mut buf, Wait::Never).unwrap();
        assert_eq!(&buf[..n], &vec![i; usize::from(i) * 20][..], "D2/D3");
    }
    assert_eq!(out(rx.recv_into(&mut buf, Wait::Never)), Got::WouldBlock);
    assert!(!recv_ready(&rx), "D4: drained");
    tx.send(b"", Wait::Never).unwrap();
    assert_eq!(
        rx.recv(Wait::Never).unwrap(),
        b"",
        "D2: empty messages count"
    );
    tx.send(b"last", Wait::Never).unwrap();
    assert!(tx.close());
    assert_eq!(out(tx.send(b"x", Wait::Never)), Got::Closed, "D6");
    assert_eq!(rx.recv(Wait::Never).unwrap(), b"last", "D6: queued stays");
    assert_eq!(out(rx.recv(Wait::Never)), Got::Closed, "D6: end of stream");
    assert!(recv_ready(&rx), "D6: the fd stays readable");
    let s = rx.stats();
    assert_eq!((s.sent, s.received, s.pending, s.closed), (7, 7, 0, true));
}

#[test]
fn each_end_does_only_its_side() {
    let (tx, rx) = pair(Options::new(4), Side::Receive);
    // Made as the receiving end: the process it was handed to sends.
    assert_eq!(tx.side(), Some(Side::Receive));
    assert!(matches!(
        tx.send(b"x", Wait::Never),
        Err(Error::WrongSide(_))
    ));
    assert!(matches!(rx.recv(Wait::Never), Err(Error::WrongSide(_))));
    rx.send(b"x", Wait::Never).unwrap();
    assert_eq!(tx.recv(Wait::Never).unwrap(), b"x");
}

#[test]
fn limits_are_fixed_when_made() {
    let e = Chan::new_shared(Options::new(4).max_bytes(100), Side::Send).unwrap_err();
    assert!(matches!(e, Error::Invalid(_)), "{e:?}");
    let e = Chan::new_shared(Options::new(4).on_drop(|_| {}), Side::Send).unwrap_err();
    assert!(matches!(e, Error::Invalid(_)), "{e:?}");
    let (tx, _rx) = pair(Options::new(4).max_msg_size(10), Side::Send);
    assert!(matches!(
        tx.send(&[0; 11], Wait::Never),
        Err(Error::TooLarge { len: 11, max: 10 })
    ));
    let (tx, rx) = pair(Options::new(4), Side::Send);
    assert_eq!(tx.max_msg_size(), eventq::chan::SHARED_DEFAULT_MAX_MSG_SIZE);
    tx.send(&[1; 20], Wait::Never).unwrap();
    let mut small = [0u8; 10];
    assert_eq!(
        out(rx.recv_into(&mut small, Wait::Never)),
        Got::BufferTooSmall { needed: 20 },
        "D7"
    );
    assert_eq!(rx.recv(Wait::Never).unwrap(), [1; 20], "D7: it stayed");
}

#[test]
fn backpressure_and_the_send_fd() {
    let (tx, rx) = pair(Options::new(4).low_water(1), Side::Send);
    assert!(send_ready(&tx));
    for i in 0u8..4 {
        tx.send(&[i], Wait::Never).unwrap();
    }
    assert_eq!(out(tx.send(b"x", Wait::Never)), Got::WouldBlock, "D5");
    assert!(!send_ready(&tx), "D5: full");
    rx.recv(Wait::Never).unwrap();
    rx.recv(Wait::Never).unwrap();
    assert!(!send_ready(&tx), "D5: above low water");
    rx.recv(Wait::Never).unwrap();
    assert!(send_ready(&tx), "D5: at low water");
}

#[test]
fn batches_cross_too() {
    let (tx, rx) = pair(Options::new(16).max_msg_size(8), Side::Send);
    let msgs: Vec<[u8; 4]> = (0u32..10).map(|i| i.to_le_bytes()).collect();
    assert_eq!(
        tx.send_batch(msgs.iter().map(|m| &m[..]), Wait::Never)
            .unwrap(),
        10
    );
    let mut buf = [0u8; 64];
    let mut lens = [0usize; 4];
    assert_eq!(rx.recv_batch(&mut buf, &mut lens, Wait::Never).unwrap(), 4);
    assert_eq!(lens, [4; 4]);
    assert_eq!(&buf[..16], msgs[..4].concat());
    let mut rest = Vec::new();
    while let Ok(n) = rx.recv_batch(&mut buf, &mut lens, Wait::Never) {
        rest.extend_from_slice(&buf[..n * 4]);
    }
    assert_eq!(rest, msgs[4..].concat());
}

#[test]
fn blocking_calls_wait_across_the_ends() {
    let (tx, rx) = pair(Options::new(2), Side::Send);
    let producer = std::thread::spawn(move || {
        for i in 0u32..1000 {
            tx.send(&i.to_le_bytes(), Wait::Forever).unwrap();
        }
        tx.close();
    });
    let mut next = 0u32;
    loop {
        match rx.recv(Wait::Forever) {
            Ok(m) => {
                assert_eq!(m, next.to_le_bytes(), "D1/D3");
                next += 1;
            }
            Err(Error::Closed) => break,
            Err(e) => panic!("{e:?}"),
        }
    }
    assert_eq!(next, 1000);
    producer.join().unwrap();
    let e = rx
        .recv(Wait::For(std::time::Duration::from_millis(1)))
        .unwrap_err();
    assert!(matches!(e, Error::Closed), "{e:?}");
}

#[test]
fn an_edge_after_every_refusal() {
    // D9: an EPOLLET waiter on the receive fd, refused, gets an event when
    // the next message comes, though the fd was up a moment before.
    let (tx, rx) = pair(Options::new(4), Side::Send);
    let ep = fds::Epoll::new().unwrap();
    ep.add(
        rx.recv_fd().as_raw_fd(),
        (libc::EPOLLIN | libc::EPOLLET) as u32,
        1,
    )
    .unwrap();
    let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 2];
    for round in 0..50u32 {
        assert_eq!(out(rx.recv(Wait::Never)), Got::WouldBlock);
        let _ = ep.wait(&mut evs, Some(std::time::Duration::ZERO));
        tx.send(&round.to_le_bytes(), Wait::Never).unwrap();
        let n = ep.wait(&mut evs, Some(HANG_GUARD)).unwrap();
        assert_eq!(n, 1, "D9: round {round} got no event");
        assert_eq!(rx.recv(Wait::Never).unwrap(), round.to_le_bytes());
    }
}

#[test]
fn a_second_taker_is_refused_while_the_first_lives() {
    let (tx, rx) = pair(Options::new(4), Side::Send);
    let (a, _b) = UnixStream::pair().unwrap();
    assert!(matches!(tx.send_to(&a), Err(Error::Attached)));
    assert!(matches!(tx.export_fds(), Err(Error::Attached)));
    // A full ring: the send fd is down, so only the hang-up raises it.
    for m in [&b"kept"[..], b"2", b"3", b"4"] {
        tx.send(m, Wait::Never).unwrap();
    }
    assert!(!send_ready(&tx));
    drop(rx);
    // Gone once every copy of its link is closed (a child that a test
    // running alongside forks holds one until it execs): the send fd says
    // so, and then its successor takes the same channel.
    wait_readable(tx.send_fd().unwrap().as_raw_fd(), "the hang-up");
    let (a, b) = UnixStream::pair().unwrap();
    tx.send_to(&a).unwrap();
    let rx2 = Chan::recv_from(&b).unwrap();
    assert_eq!(rx2.recv(Wait::Never).unwrap(), b"kept");
}

#[test]
fn exported_fds_make_the_other_end() {
    let tx = Chan::new_shared(Options::new(4), Side::Send).unwrap();
    let fds = tx.export_fds().unwrap();
    assert_eq!(fds.side, Side::Receive);
    // As a child's dup2 leaves them: inheritable. The end taken from them
    // holds them close-on-exec again.
    let raw = [&fds.mem, &fds.recv_bell, &fds.send_bell, &fds.link].map(|fd| fd.as_raw_fd());
    for fd in raw {
        // SAFETY: fcntl on fds this test owns.
        assert_eq!(unsafe { libc::fcntl(fd, libc::F_SETFD, 0) }, 0);
    }
    let rx = Chan::import_fds(fds).unwrap();
    for fd in raw {
        // SAFETY: as above; the fds are the channel's now, still open.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        assert_ne!(flags & libc::FD_CLOEXEC, 0, "fd {fd} inheritable");
    }
    tx.send(b"inherited", Wait::Never).unwrap();
    assert_eq!(rx.recv(Wait::Never).unwrap(), b"inherited");
}

#[test]
fn what_arrives_is_checked() {
    // A message that is not a handover, with fds of the wrong kinds.
    let (a, b) = UnixStream::pair().unwrap();
    use std::io::Write;
    (&a).write_all(&[0u8; 16]).unwrap();
    assert!(matches!(Chan::recv_from(&b), Err(Error::Corrupt(_))));
    // A socket closed before anything was sent.
    let (a, b) = UnixStream::pair().unwrap();
    drop(a);
    assert!(matches!(Chan::recv_from(&b), Err(Error::Corrupt(_))));
    // fds of the wrong kinds: the memory a pipe, not a sealed memfd.
    let tx = Chan::new_shared(Options::new(4), Side::Send).unwrap();
    let mut fds = tx.export_fds().unwrap();
    let (r, _w) = std::io::pipe().unwrap();
    fds.mem = r.into();
    assert!(matches!(Chan::import_fds(fds), Err(Error::Corrupt(_))));
}

#[test]
fn a_receiver_sees_end_of_stream_when_the_sending_process_dies() {
    // The child sends 10 messages, then dies by SIGKILL; the parent
    // receives them all, then end of stream, on a readable fd.
    let rx = Chan::new_shared(Options::new(64), Side::Receive).unwrap();
    let mut kid = child("send-ten-then-die", rx.export_fds().unwrap());
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(kid.wait().unwrap().signal(), Some(libc::SIGKILL));
    wait_readable(rx.recv_fd().as_fd().as_raw_fd(), "end of stream");
    for i in 0u32..10 {
        assert_eq!(rx.recv(Wait::Never).unwrap(), i.to_le_bytes(), "D1");
    }
    assert_eq!(out(rx.recv(Wait::Never)), Got::Closed, "end of stream");
    assert!(rx.is_closed());
}

#[test]
fn a_blocked_receiver_wakes_when_the_handed_out_end_is_gone() {
    // The receiver waits before any sender has the channel; the sending
    // end is then handed out and given up (as a child that dies before it
    // sends would): the waiter wakes with end of stream, though the link
    // did not exist when it began to wait.
    let rx = Chan::new_shared(Options::new(4), Side::Receive).unwrap();
    let waiter = {
        let rx = rx.clone();
        std::thread::spawn(move || rx.recv(Wait::Forever))
    };
    let fds = rx.export_fds().unwrap();
    drop(fds);
    assert!(matches!(waiter.join().unwrap(), Err(Error::Closed)));
}

/// What a child started by `child` does, by name (in `child_entry`).
const CHILD_ROLE: &str = "EVENTQ_TEST_CHILD_ROLE";

/// Runs this test binary again as a child that takes `fds` (as fds 3 to 6)
/// and plays `role` (see `child_entry`): a real process, started by exec,
/// so nothing of this multi-threaded test process runs in it after fork.
fn child(role: &str, fds: eventq::SharedFds) -> std::process::Child {
    use std::os::unix::process::CommandExt;
    let raw = [
        fds.mem.as_raw_fd(),
        fds.recv_bell.as_raw_fd(),
        fds.send_bell.as_raw_fd(),
        fds.link.as_raw_fd(),
    ];
    let side = if fds.side == Side::Send {
        "send"
    } else {
        "recv"
    };
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "child_entry", "--nocapture"])
        .env(CHILD_ROLE, format!("{role}:{side}"))
        .stdout(std::process::Stdio::null());
    // SAFETY: dup2 is async-signal-safe; each target number is free in the
    // child (its only fds above 2 are this process's, close-on-exec, and
    // the sources themselves, which dup2 leaves alone when equal).
    unsafe {
        cmd.pre_exec(move || {
            for (i, fd) in raw.iter().enumerate() {
                if libc::dup2(*fd, 3 + i as i32) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    cmd.spawn().expect("spawn the child")
}

/// The child's side of `child`: does nothing unless started by it.
#[test]
fn child_entry() {
    let Ok(role) = std::env::var(CHILD_ROLE) else {
        return;
    };
    use std::os::fd::{FromRawFd, OwnedFd};
    let (role, side) = role.split_once(':').unwrap();
    // SAFETY: fds 3 to 6 were put there by `child` for this process.
    let owned = |fd| unsafe { OwnedFd::from_raw_fd(fd) };
    let chan = Chan::import_fds(eventq::SharedFds {
        side: if side == "send" {
            Side::Send
        } else {
            Side::Receive
        },
        mem: owned(3),
        recv_bell: owned(4),
        send_bell: owned(5),
        link: owned(6),
    })
    .unwrap();
    match role {
        "recv-one-then-die" => {
            chan.recv(Wait::Forever).unwrap();
        }
        "send-ten-then-die" => {
            for i in 0u32..10 {
                chan.send(&i.to_le_bytes(), Wait::Never).unwrap();
            }
        }
        other => panic!("unknown child role {other}"),
    }
    // SAFETY: kills this process, as a crash would.
    unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
}

#[test]
fn a_sender_blocked_on_a_full_ring_fails_when_the_receiver_dies() {
    let tx = Chan::new_shared(Options::new(2), Side::Send).unwrap();
    let mut kid = child("recv-one-then-die", tx.export_fds().unwrap());
    let mut sent = 0;
    let end = loop {
        match tx.send(b"m", Wait::Forever) {
            Ok(()) => sent += 1,
            Err(e) => break e,
        }
    };
    assert!(matches!(end, Error::Closed), "{end:?}");
    assert!(sent >= 2, "the ring filled first ({sent} sent)");
    let status = kid.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
    assert!(
        send_ready(&tx),
        "the send fd is readable once the receiver is gone"
    );
}
