// SPDX-License-Identifier: MIT OR Apache-2.0
//! The channel: a bounded multi-producer multi-consumer queue of byte
//! messages with two doorbell fds. The seed article's fix done once,
//! properly: a FIFO carries *what*, an eventfd only says *whether*.
//!
//! - `ring.rs`: the queue, lock-free (positions, stamps, flag bits);
//! - `slots.rs`: its storage, one block of plain data;
//! - `doorbell.rs`: the two eventfds, changed only on transitions (D4, D5,
//!   D9);
//! - `parking.rs`: threads blocked in the library, on condvars;
//! - `consumer.rs`: the loop's receive and the hand-on between consumers;
//! - `options.rs`: options, limits, stats;
//! - `shim.rs`: the primitives, swapped for loom's under `--cfg loom`.
//!
//! This file is the API and the orchestration: a send claims slots, then
//! does the doorbell and wake-up work its claims' flags call for, once per
//! call; a receive likewise.

#![forbid(unsafe_code)]

mod consumer;
mod doorbell;
mod options;
mod parking;
mod ring;
mod shared;
mod shim;
mod slots;

use std::fmt;
#[cfg(not(loom))]
use std::os::fd::BorrowedFd;
use std::os::fd::RawFd;
use std::sync::Arc;

pub(crate) use self::consumer::{EachEnd, LoopConsumer};
use self::doorbell::{Edge, HEAD_SEND_LOWERED, TAIL_RECV_RAISED};
use self::options::Limits;
pub use self::options::{DropFn, Options, Stats, Wait, DEFAULT_MAX_MSG_SIZE, MAX_CAPACITY};
use self::parking::{Deadline, HEAD_SEND_WAITERS, TAIL_RECV_WAITERS};
use self::ring::{Payload, Pop, PushError, Ring, TAIL_CLOSED};
use self::shared::{copy_out, Popped, Pushed, Shared};
use self::shim::Ordering;
use crate::error::{Error, Result};

// The flag bits of each word, owned by the ring, the doorbells and the
// parking, must not overlap.
const _: () = assert!(
    TAIL_CLOSED.disjoint(TAIL_RECV_RAISED)
        && TAIL_CLOSED.disjoint(TAIL_RECV_WAITERS)
        && TAIL_RECV_RAISED.disjoint(TAIL_RECV_WAITERS)
        && HEAD_SEND_LOWERED.disjoint(HEAD_SEND_WAITERS)
);

/// A handle to a channel. Clone it to give each thread its own; the channel
/// lives until the last handle is dropped. Any handle can send, receive and
/// close.
///
/// A thread sends, another receives every message once, in order, then sees
/// the end of the stream:
///
/// ```
/// use eventq::{Chan, Error, Options, Wait};
///
/// let chan = Chan::new(Options::new(64))?;
/// let tx = chan.clone();
/// let producer = std::thread::spawn(move || -> eventq::Result<()> {
///     for i in 0u32..100 {
///         tx.send(&i.to_le_bytes(), Wait::Forever)?;
///     }
///     tx.close();
///     Ok(())
/// });
/// let mut buf = [0u8; 4];
/// let mut next = 0u32;
/// loop {
///     match chan.recv_into(&mut buf, Wait::Forever) {
///         Ok(n) => {
///             assert_eq!(u32::from_le_bytes(buf[..n].try_into().unwrap()), next);
///             next += 1;
///         }
///         Err(Error::Closed) => break, // end of stream: all 100 arrived
///         Err(e) => return Err(e),
///     }
/// }
/// assert_eq!(next, 100);
/// producer.join().unwrap()?;
/// # Ok::<(), eventq::Error>(())
/// ```
///
/// Its [`recv_fd`](Chan::recv_fd) can be polled by any event loop instead:
/// it is readable exactly while messages are pending (or after close).
#[derive(Clone)]
pub struct Chan {
    shared: Arc<Shared>,
}

impl fmt::Debug for Chan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Chan")
            .field("limits", self.shared.ring.limits())
            .field("recv_fd", &self.recv_raw_fd())
            .field("send_fd", &self.shared.bells.send_raw_fd_if_open())
            .finish()
    }
}

impl Chan {
    /// Creates a channel and its receive eventfd (the send one is created
    /// by the first [`send_fd`](Chan::send_fd)). The ring's slots are
    /// allocated here, zeroed: address space proportional to `capacity`,
    /// resident only as messages reach them.
    pub fn new(options: Options) -> Result<Chan> {
        let limits = Limits::from_options(&options)?;
        let ring = Ring::new(limits).ok_or_else(|| Error::from_errno(libc::ENOMEM))?;
        Ok(Chan {
            shared: Arc::new(Shared::new(ring, options.on_drop)?),
        })
    }

    /// The fd to poll for input: readable exactly while messages are pending
    /// or the channel is closed (D4). Only poll it; never read or write it.
    /// Edge-triggered pollers may wait for the next event after a refused
    /// receive (D9). Several consumers, each with its own epoll set, should
    /// register it with `EPOLLEXCLUSIVE` and receive until `WouldBlock` or
    /// `Closed` before waiting again: one wakes per write, not all (D4).
    #[cfg(not(loom))]
    pub fn recv_fd(&self) -> BorrowedFd<'_> {
        self.shared.bells.recv_fd()
    }

    /// The fd to poll for room: not readable while the channel is full and
    /// open, readable again once it drains to the low-water mark or closes
    /// (D5). Only poll it; never read or write it. Edge-triggered pollers
    /// may wait for the next event after a refused send (D9).
    ///
    /// The first call creates it (every handle then shares it), at the
    /// level the channel's state gives it; it fails only then, if the
    /// eventfd cannot be created (EMFILE, ENFILE, ENOMEM), and a later call
    /// tries again. A channel never asked for it has one fd.
    #[cfg(not(loom))]
    pub fn send_fd(&self) -> Result<BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        let sh = &*self.shared;
        Ok(sh.bells.send(&sh.ring)?.as_fd())
    }

    /// `recv_fd` as a number, for the loop (and the loom model, whose
    /// doorbells have no fd).
    pub(crate) fn recv_raw_fd(&self) -> RawFd {
        self.shared.bells.recv_raw_fd()
    }

    /// The longest message a send accepts.
    pub fn max_msg_size(&self) -> usize {
        self.shared.ring.limits().max_msg_size
    }

    /// The most messages the channel holds.
    pub fn capacity(&self) -> usize {
        self.shared.ring.limits().capacity
    }

    /// Queues a copy of `msg`, waiting for room as `wait` says. A refused
    /// message is not queued and stays the caller's.
    pub fn send(&self, msg: &[u8], wait: Wait) -> Result<()> {
        self.send_batch([msg], wait).map(drop)
    }

    /// Queues copies of a prefix of `msgs`, as many as fit, in order; waits
    /// (as `wait` says) only until the first fits. Returns how many were
    /// queued: the rest were refused and stay the caller's. An empty batch
    /// returns 0 at once. A message over the size limit ends the prefix; if
    /// it is the first, the call fails with `Error::TooLarge`.
    ///
    /// A sender blocked on a full channel is woken when the channel drains
    /// to its low-water mark (or closes), as a producer polling the send fd
    /// is; a sender that arrives while there is room never waits.
    pub fn send_batch<'a, I>(&self, msgs: I, wait: Wait) -> Result<usize>
    where
        I: IntoIterator<Item = &'a [u8]>,
    {
        let sh = &*self.shared;
        let mut msgs = msgs.into_iter();
        let Some(first) = msgs.next() else {
            return Ok(0);
        };
        sh.check_len(first.len())?;
        let mut pushed = Pushed::default();
        let mut deadline = None;
        loop {
            match sh.try_push(first) {
                Ok(c) => {
                    pushed.add(&c);
                    break;
                }
                Err(PushError::Closed) => return Err(Error::Closed),
                Err(PushError::NoMemory) => return Err(Error::from_errno(libc::ENOMEM)),
                Err(PushError::Full) => {
                    // No room: lower the send fd now, so a producer polling
                    // it sleeps until the queue drains instead of spinning
                    // and gets its raise as an event (D9). If room came
                    // back meanwhile, the fd may be up: try again instead.
                    if !sh.settle_send(Some(first.len())) {
                        continue;
                    }
                    let deadline = *deadline.get_or_insert_with(|| Deadline::new(wait));
                    if let Some(e) = deadline.expired() {
                        return Err(e);
                    }
                    sh.parking.wait_for_room(&sh.ring, first.len(), deadline);
                }
            }
        }
        'batch: for msg in msgs {
            if msg.len() > sh.ring.limits().max_msg_size {
                break;
            }
            loop {
                match sh.try_push(msg) {
                    Ok(c) => {
                        pushed.add(&c);
                        break;
                    }
                    // Cut short for lack of room: as for the first message.
                    Err(PushError::Full) if !sh.settle_send(Some(msg.len())) => {}
                    Err(PushError::Full) => {
                        pushed.refused = true;
                        break 'batch;
                    }
                    Err(PushError::Closed | PushError::NoMemory) => break 'batch,
                }
            }
        }
        sh.after_push(&pushed);
        Ok(pushed.n)
    }

    /// Receives the head message into `buf` and returns its length. If `buf`
    /// is too small the message stays at the head and the error says how
    /// many bytes it needs (D7). After close, once drained, fails with
    /// `Error::Closed` (end of stream).
    pub fn recv_into(&self, buf: &mut [u8], wait: Wait) -> Result<usize> {
        let sh = &*self.shared;
        let room = buf.len();
        let c = sh.pop_waiting(wait, |len| len <= room, &mut |m: Payload<'_>| {
            copy_out(m, buf)
        })?;
        sh.after_pop(&Popped::one(&c));
        Ok(c.value)
    }

    /// Receives the head message as an owned buffer. A message over 48
    /// bytes is handed over without a copy (its slot allocates a new buffer
    /// on the next long send through it); a shorter one, stored in the slot
    /// itself, is copied into a new `Vec`. `recv_into` never allocates.
    pub fn recv(&self, wait: Wait) -> Result<Vec<u8>> {
        let sh = &*self.shared;
        let c = sh.pop_waiting(wait, |_| true, &mut |m: Payload<'_>| m.into_vec())?;
        sh.after_pop(&Popped::one(&c));
        Ok(c.value)
    }

    /// Receives as many messages as fit, packed back to back into `buf`,
    /// writing each length into `lens`; waits (as `wait` says) only for the
    /// first. Returns the count. Stops before the first message that does not
    /// fit; if that is the head, fails with `Error::BufferTooSmall` and
    /// nothing is taken. `lens` empty returns 0 at once.
    pub fn recv_batch(&self, buf: &mut [u8], lens: &mut [usize], wait: Wait) -> Result<usize> {
        if lens.is_empty() {
            return Ok(0);
        }
        let sh = &*self.shared;
        let total = buf.len();
        let first = sh.pop_waiting(wait, |len| len <= total, &mut |m: Payload<'_>| {
            copy_out(m, buf)
        })?;
        let mut off = first.value;
        lens[0] = first.value;
        let mut popped = Popped::one(&first);
        while popped.n < lens.len() {
            let rest = &mut buf[off..];
            let room = rest.len();
            let copy = &mut |m: Payload<'_>| copy_out(m, rest);
            let c = match sh.ring.pop(|len| len <= room, copy) {
                Pop::Took(c) => c,
                Pop::Empty(tail) if tail.has(TAIL_CLOSED) => {
                    popped.edge_owed = true;
                    break;
                }
                // Short: settle the fd as a refused receive does.
                Pop::Empty(tail) if sh.settle_before_refusal(tail) => continue,
                Pop::Empty(_) => {
                    popped.settled = true;
                    break;
                }
                Pop::TooLong(_) => break,
            };
            lens[popped.n] = c.value;
            off += c.value;
            popped.add(&c);
        }
        sh.after_pop(&popped);
        Ok(popped.n)
    }

    /// Closes the channel (D6): sends fail with `Error::Closed` from now on;
    /// queued messages stay receivable; both fds become and stay readable and
    /// every blocked thread wakes. Returns false if it was already closed.
    pub fn close(&self) -> bool {
        let sh = &*self.shared;
        if sh.ring.tail().set(TAIL_CLOSED).has(TAIL_CLOSED) {
            return false;
        }
        // An event on both fds even if they are up already: an
        // edge-triggered waiter may have consumed the last one just before
        // its refusal.
        sh.bells.settle_recv(&sh.ring, Edge::Always);
        sh.bells.settle_send(&sh.ring, None, Edge::Always);
        sh.parking.wake_all(&sh.ring);
        true
    }

    /// Whether the channel is closed.
    pub fn is_closed(&self) -> bool {
        self.shared
            .ring
            .tail()
            .load(Ordering::SeqCst)
            .has(TAIL_CLOSED)
    }

    /// A snapshot of the counters. Exact when no call is in progress; while
    /// other threads send and receive, each counter is a recent value.
    /// `pending_bytes` without a byte limit is summed over the pending
    /// messages, so it costs time proportional to the queue's depth.
    pub fn stats(&self) -> Stats {
        self.shared.stats()
    }

    /// Drops this handle. If it was the last one, the messages still queued
    /// are discarded (each passed to the drop hook) and the channel's final
    /// counters are returned, `dropped` included; otherwise `None`.
    pub fn into_final_stats(self) -> Option<Stats> {
        let mut shared = Arc::into_inner(self.shared)?;
        shared.discard_pending();
        Some(shared.stats())
    }
}
