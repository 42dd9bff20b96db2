// SPDX-License-Identifier: MIT OR Apache-2.0
//! Error paths lose nothing (D7): a receive into a buffer that is too small
//! says how much it needs and leaves the message at the head; an oversize
//! send is refused and queues nothing; invalid options are rejected. Each
//! error maps to its documented errno.

mod common;

use std::time::Duration;

use common::*;
use eventq::chan::DEFAULT_MAX_MSG_SIZE;
use eventq::{Chan, Error, Options, Wait};

fn chan(opts: Options) -> Chan {
    Chan::new(opts).expect("valid options")
}

// ---------------------------------------------------------------------------
// D7: too-small receive buffers.
// ---------------------------------------------------------------------------

#[test]
fn d7_recv_into_too_small_says_needed_and_keeps_the_message_at_the_head() {
    let ch = chan(Options::new(8));
    let _ = ch.recv_fd(); // polled: its doorbell counts from the start
    let big = vec![0xAB; 100];
    ch.send(&big, Wait::Never).unwrap();
    ch.send(b"after", Wait::Never).unwrap();
    let before = ch.stats();
    for (size, wait) in [
        (0usize, Wait::Never),
        (1, Wait::Forever),
        (99, Wait::For(Duration::ZERO)),
        (99, Wait::For(Duration::MAX)),
    ] {
        let mut buf = vec![0u8; size];
        assert_eq!(
            out(ch.recv_into(&mut buf, wait)),
            Got::BufferTooSmall { needed: 100 },
            "buffer of {size}"
        );
        assert!(buf.iter().all(|&b| b == 0), "nothing written on error");
        assert_eq!(ch.stats(), before, "D7: nothing taken, nothing counted");
        assert!(recv_ready(&ch), "D4: the message is still pending");
    }
    let e = ch.recv_into(&mut [0u8; 10], Wait::Never).unwrap_err();
    assert_eq!(e.errno(), libc::EMSGSIZE);
    assert!(e.to_string().contains("100"), "message says the need: {e}");
    // Exactly the needed size works, and order is intact.
    let mut buf = [0u8; 100];
    assert_eq!(ch.recv_into(&mut buf, Wait::Never).unwrap(), 100);
    assert_eq!(&buf[..], &big[..]);
    assert_eq!(ch.recv(Wait::Never).unwrap(), b"after");
    assert!(!recv_ready(&ch));
}

#[test]
fn d7_too_small_buffer_on_a_closed_channel_still_keeps_the_message() {
    let ch = chan(Options::new(4));
    ch.send(&[5; 10], Wait::Never).unwrap();
    assert!(ch.close());
    assert_eq!(
        out(ch.recv_into(&mut [0u8; 3], Wait::Forever)),
        Got::BufferTooSmall { needed: 10 }
    );
    assert_eq!(
        out(ch.recv_batch(&mut [0u8; 3], &mut [0; 4], Wait::Never)),
        Got::BufferTooSmall { needed: 10 }
    );
    assert_eq!(ch.recv(Wait::Never).unwrap(), vec![5; 10]);
    assert_eq!(out(ch.recv(Wait::Never)), Got::Closed);
}

#[test]
fn d7_recv_batch_too_small_for_the_head_takes_nothing() {
    let ch = chan(Options::new(8));
    ch.send(&[1; 50], Wait::Never).unwrap();
    ch.send(&[2; 5], Wait::Never).unwrap();
    let before = ch.stats();
    let mut buf = [0u8; 49];
    let mut lens = [usize::MAX; 4];
    assert_eq!(
        out(ch.recv_batch(&mut buf, &mut lens, Wait::Never)),
        Got::BufferTooSmall { needed: 50 },
        "the head does not fit, though the second would"
    );
    assert_eq!(lens, [usize::MAX; 4], "lens untouched on error");
    assert_eq!(ch.stats(), before, "D7: nothing taken");
    let mut buf = [0u8; 55];
    assert_eq!(ch.recv_batch(&mut buf, &mut lens, Wait::Never).unwrap(), 2);
    assert_eq!(&lens[..2], &[50, 5]);
    assert_eq!(&buf[..50], &[1; 50][..]);
    assert_eq!(&buf[50..], &[2; 5][..]);
}

#[test]
fn d7_recv_batch_stops_before_the_first_message_that_does_not_fit() {
    let ch = chan(Options::new(8));
    for m in [&[1u8; 10][..], &[2; 10], &[3; 11], &[4; 1]] {
        ch.send(m, Wait::Never).unwrap();
    }
    let mut buf = [0u8; 30];
    let mut lens = [0usize; 8];
    // 10 + 10 fit, 11 more would not: two taken, the 11 stays at the head
    // (the 1-byte message behind it is not taken out of order).
    assert_eq!(ch.recv_batch(&mut buf, &mut lens, Wait::Never).unwrap(), 2);
    assert_eq!(&lens[..2], &[10, 10]);
    assert_eq!(ch.stats().pending, 2);
    assert_eq!(ch.recv(Wait::Never).unwrap(), vec![3; 11]);
    assert_eq!(ch.recv(Wait::Never).unwrap(), vec![4; 1]);
}

#[test]
fn d7_recv_batch_takes_no_more_than_lens_holds_and_empty_lens_returns_zero() {
    let ch = chan(Options::new(8));
    for i in 0..5u8 {
        ch.send(&[i], Wait::Never).unwrap();
    }
    let mut buf = [0u8; 64];
    assert_eq!(ch.recv_batch(&mut buf, &mut [], Wait::Never).unwrap(), 0);
    assert_eq!(ch.recv_batch(&mut buf, &mut [], Wait::Forever).unwrap(), 0);
    assert_eq!(ch.stats().pending, 5, "an empty lens takes nothing");
    let mut lens = [0usize; 3];
    assert_eq!(ch.recv_batch(&mut buf, &mut lens, Wait::Never).unwrap(), 3);
    assert_eq!(&buf[..3], &[0, 1, 2]);
    assert_eq!(lens, [1, 1, 1]);
    assert_eq!(ch.stats().pending, 2);
    // Empty lens on an empty or closed channel also returns 0 at once.
    while ch.recv(Wait::Never).is_ok() {}
    assert_eq!(ch.recv_batch(&mut buf, &mut [], Wait::Forever).unwrap(), 0);
    ch.close();
    assert_eq!(ch.recv_batch(&mut buf, &mut [], Wait::Forever).unwrap(), 0);
}

#[test]
fn d2_zero_length_messages_are_whole_messages_in_batches() {
    let ch = chan(Options::new(8));
    for m in [&[][..], &[], &[9, 9], &[], &[7]] {
        ch.send(m, Wait::Never).unwrap();
    }
    let mut lens = [usize::MAX; 8];
    // An empty buffer takes exactly the leading empty messages.
    assert_eq!(ch.recv_batch(&mut [], &mut lens, Wait::Never).unwrap(), 2);
    assert_eq!(&lens[..2], &[0, 0]);
    assert_eq!(
        out(ch.recv_batch(&mut [], &mut lens, Wait::Never)),
        Got::BufferTooSmall { needed: 2 }
    );
    let mut buf = [0u8; 8];
    assert_eq!(ch.recv_batch(&mut buf, &mut lens, Wait::Never).unwrap(), 3);
    assert_eq!(&lens[..3], &[2, 0, 1]);
    assert_eq!(&buf[..3], &[9, 9, 7]);
    assert!(!recv_ready(&ch));
}

// ---------------------------------------------------------------------------
// Oversize sends.
// ---------------------------------------------------------------------------

#[test]
fn oversize_send_is_refused_and_queues_nothing() {
    let ch = chan(Options::new(4).max_msg_size(10));
    assert_eq!(ch.max_msg_size(), 10);
    ch.send(&[0; 10], Wait::Never)
        .expect("exactly the maximum is fine");
    for wait in [Wait::Never, Wait::Forever, Wait::For(Duration::MAX)] {
        assert_eq!(
            out(ch.send(&[0; 11], wait)),
            Got::TooLarge { len: 11, max: 10 }
        );
        assert_eq!(
            out(ch.send_batch([&[0u8; 11][..], &[0; 1]], wait)),
            Got::TooLarge { len: 11, max: 10 },
            "an oversize first message fails the batch"
        );
    }
    let e = ch.send(&[0; 11], Wait::Never).unwrap_err();
    assert_eq!(e.errno(), libc::EMSGSIZE);
    let st = ch.stats();
    assert_eq!((st.sent, st.pending), (1, 1));
    assert!(
        send_ready(&ch),
        "a refused oversize message is not a full channel"
    );
    // An oversize message later in a batch ends the prefix.
    let n = ch
        .send_batch([&[1u8; 3][..], &[2; 11], &[3; 1]], Wait::Never)
        .unwrap();
    assert_eq!(n, 1);
    assert_eq!(ch.recv(Wait::Never).unwrap(), vec![0; 10]);
    assert_eq!(ch.recv(Wait::Never).unwrap(), vec![1; 3]);
    assert_eq!(out(ch.recv(Wait::Never)), Got::WouldBlock);
}

#[test]
fn default_max_msg_size_and_max_bytes_interplay() {
    let ch = chan(Options::new(2));
    assert_eq!(ch.max_msg_size(), DEFAULT_MAX_MSG_SIZE);
    ch.send(&vec![1; DEFAULT_MAX_MSG_SIZE], Wait::Never)
        .unwrap();
    assert_eq!(
        out(ch.send(&vec![1; DEFAULT_MAX_MSG_SIZE + 1], Wait::Never)),
        Got::TooLarge {
            len: DEFAULT_MAX_MSG_SIZE + 1,
            max: DEFAULT_MAX_MSG_SIZE
        }
    );
    assert_eq!(ch.recv(Wait::Never).unwrap().len(), DEFAULT_MAX_MSG_SIZE);

    // A byte limit below the default caps the message size.
    assert_eq!(chan(Options::new(2).max_bytes(300)).max_msg_size(), 300);
    // A byte limit above the default does not raise it.
    let big = DEFAULT_MAX_MSG_SIZE * 4;
    assert_eq!(
        chan(Options::new(2).max_bytes(big)).max_msg_size(),
        DEFAULT_MAX_MSG_SIZE
    );
    // Explicit sizes win, up to max_bytes.
    assert_eq!(
        chan(Options::new(2).max_bytes(big).max_msg_size(big)).max_msg_size(),
        big
    );
    assert_eq!(
        chan(Options::new(2).max_bytes(50).max_msg_size(50)).max_msg_size(),
        50
    );
    // A channel for empty messages only.
    let ch = chan(Options::new(2).max_msg_size(0));
    ch.send(&[], Wait::Never).unwrap();
    assert_eq!(
        out(ch.send(&[1], Wait::Never)),
        Got::TooLarge { len: 1, max: 0 }
    );
}

// ---------------------------------------------------------------------------
// Options validation.
// ---------------------------------------------------------------------------

fn invalid(opts: Options) {
    let what = format!("{opts:?}");
    match Chan::new(opts) {
        Err(e @ Error::Invalid(_)) => {
            assert_eq!(e.errno(), libc::EINVAL);
            assert!(!e.to_string().is_empty());
        }
        Err(e) => panic!("{what}: expected Invalid, got {e:?}"),
        Ok(_) => panic!("{what}: accepted"),
    }
}

#[test]
fn options_validation_rejects_impossible_limits() {
    invalid(Options::new(0));
    invalid(Options::new(0).low_water(0));
    invalid(Options::new(eventq::chan::MAX_CAPACITY + 1));
    invalid(Options::new(usize::MAX));
    invalid(Options::new(4).low_water(4));
    invalid(Options::new(4).low_water(5));
    invalid(Options::new(1).low_water(1));
    invalid(Options::new(4).max_bytes(10).max_msg_size(11));
    invalid(Options::new(4).max_bytes(0));
    invalid(Options::new(4).max_bytes(0).max_msg_size(0));
}

#[test]
fn options_validation_accepts_the_edges() {
    for opts in [
        Options::new(1),
        Options::new(1).low_water(0),
        Options::new(4).low_water(3),
        Options::new(4).max_bytes(1),
        Options::new(4).max_bytes(10).max_msg_size(10),
        Options::new(4).max_msg_size(0),
        Options::new(1 << 16),
    ] {
        let what = format!("{opts:?}");
        let ch = Chan::new(opts).unwrap_or_else(|e| panic!("{what}: {e:?}"));
        assert!(!recv_ready(&ch) && send_ready(&ch), "{what}");
    }
    // A one-byte channel holds one 1-byte message (or any number of empty
    // ones up to the count).
    let ch = chan(Options::new(4).max_bytes(1));
    ch.send(&[1], Wait::Never).unwrap();
    assert_eq!(out(ch.send(&[2], Wait::Never)), Got::WouldBlock);
    assert!(!send_ready(&ch));
}

#[test]
fn errors_map_to_their_errno() {
    assert_eq!(Error::WouldBlock.errno(), libc::EAGAIN);
    assert_eq!(Error::TimedOut.errno(), libc::ETIMEDOUT);
    assert_eq!(Error::Closed.errno(), libc::EPIPE);
    assert_eq!(Error::TooLarge { len: 2, max: 1 }.errno(), libc::EMSGSIZE);
    assert_eq!(Error::BufferTooSmall { needed: 2 }.errno(), libc::EMSGSIZE);
    assert_eq!(Error::Invalid("x").errno(), libc::EINVAL);
    // And the channel really returns them.
    let ch = chan(Options::new(1));
    assert_eq!(ch.recv(Wait::Never).unwrap_err().errno(), libc::EAGAIN);
    assert_eq!(
        ch.recv(Wait::For(Duration::ZERO)).unwrap_err().errno(),
        libc::ETIMEDOUT
    );
    ch.close();
    assert_eq!(ch.send(b"x", Wait::Never).unwrap_err().errno(), libc::EPIPE);
    assert_eq!(ch.recv(Wait::Never).unwrap_err().errno(), libc::EPIPE);
}
