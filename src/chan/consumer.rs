// SPDX-License-Identifier: MIT OR Apache-2.0
//! Consumers: the loop's receive, one message at a time into a callback
//! (`Chan::recv_each`), and the hand-on between consumers that wait on the
//! receive fd with `EPOLLEXCLUSIVE` (D4): one write wakes one of them, so
//! one that leaves while messages remain must wake another. Consumers
//! count themselves in ([`Consumer`], a loop's channel source) so that one
//! leaving knows whether another is there to wake.

use super::ring::{Payload, Pop, TAIL_CLOSED};
use super::shared::Popped;
use super::shim::{AtomicBool, AtomicUsize, Ordering};
use super::slots::INLINE_MAX;
use super::{Chan, Inner, Wait};
use crate::error::Error;

/// Why [`Chan::recv_each`] returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EachEnd {
    /// Its caller asked to stop, or took its fill: messages may remain.
    Stopped,
    /// The queue is empty and open.
    Empty,
    /// The channel is closed and drained: end of stream.
    Closed,
}

impl Chan {
    /// The loop's receive: takes messages one at a time, without waiting,
    /// and hands each to `deliver` once it is out of the ring and its
    /// doorbell work is done, until `deliver` returns false, `max` were
    /// delivered, the queue is empty or the stream ended. A message is taken
    /// only when the previous call asked for more, so nothing is taken that
    /// is not delivered. Short messages are delivered from a copy on the
    /// stack; a long one by swapping the slot's buffer with `spare`, so no
    /// message is copied here (the slot keeps `spare`'s memory for its next
    /// message). A process-shared channel's message is copied into `spare`.
    /// Returns the count delivered and why it stopped.
    pub(crate) fn recv_each(
        &self,
        spare: &mut Vec<u8>,
        max: usize,
        mut deliver: impl FnMut(&[u8]) -> bool,
    ) -> (usize, EachEnd) {
        let sh = match &self.inner {
            Inner::Local(sh) => sh,
            Inner::Process(p) => {
                let mut n = 0;
                while n < max {
                    let mut got = 0;
                    let taken = p.recv_with(Wait::Never, 1, |len, copy| {
                        got = len;
                        spare.resize(len, 0);
                        copy(spare);
                        true
                    });
                    match taken {
                        Ok(_) => n += 1,
                        Err(Error::WouldBlock) => return (n, EachEnd::Empty),
                        // End of stream, or broken and so closed here.
                        Err(_) => return (n, EachEnd::Closed),
                    }
                    if !deliver(&spare[..got]) {
                        break;
                    }
                }
                return (n, EachEnd::Stopped);
            }
        };
        let mut n = 0;
        while n < max {
            let mut inline = [0u8; INLINE_MAX];
            let mut take = |m: Payload<'_>| match m {
                Payload::Inline(m) => {
                    m.copy_to(&mut inline);
                    false
                }
                Payload::Heap(m) => {
                    std::mem::swap(m.buf, spare);
                    true
                }
            };
            let c = match sh.ring.pop(|_| true, &mut take) {
                Pop::Took(c) => c,
                Pop::Empty(tail) if tail.has(TAIL_CLOSED) => {
                    sh.end_of_stream();
                    return (n, EachEnd::Closed);
                }
                // As a refused `recv_into`: the fd is lowered before giving up.
                Pop::Empty(tail) if sh.settle_before_refusal(tail) => continue,
                Pop::Empty(_) | Pop::TooLong(_) => return (n, EachEnd::Empty),
            };
            sh.after_pop(&Popped::one(&c));
            n += 1;
            let msg = if c.value {
                &spare[..c.len]
            } else {
                &inline[..c.len]
            };
            if !deliver(msg) {
                break;
            }
        }
        (n, EachEnd::Stopped)
    }

    /// Counts a consumer in: a waiter on the receive fd, which will hand
    /// its wake-up on when it leaves ([`Consumer`]).
    pub fn consumer(&self) -> Consumer {
        self.consumer_enter();
        Consumer { chan: self.clone() }
    }

    /// Counts a consumer in (a [`Consumer`], a loop source, or a C
    /// caller's); `consumer_leave` counts it out.
    pub(crate) fn consumer_enter(&self) {
        // A consumer waits on the receive fd: it must follow the queue.
        if let Inner::Local(sh) = &self.inner {
            sh.bells.wake_recv(&sh.ring);
        }
        self.consumers().fetch_add(1, Ordering::SeqCst);
    }

    /// Counts out a consumer counted in by `consumer_enter`; if it leaves
    /// messages and another consumer remains, wakes one. False if none is
    /// counted.
    pub(crate) fn consumer_leave(&self) -> bool {
        let left = self
            .consumers()
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        match left {
            Ok(before) => {
                if before > 1 {
                    self.pass_on_pending();
                }
                true
            }
            Err(_) => false,
        }
    }

    pub(crate) fn loop_consumer(&self) -> LoopConsumer {
        LoopConsumer {
            chan: self.clone(),
            enlisted: AtomicBool::new(false),
        }
    }

    fn consumers(&self) -> &AtomicUsize {
        match &self.inner {
            Inner::Local(sh) => &sh.consumers,
            Inner::Process(p) => &p.consumers,
        }
    }

    /// Writes the receive fd again if messages are pending and another
    /// consumer than the caller is counted in: one more exclusive waiter
    /// wakes for them.
    fn hand_on(&self) {
        if self.consumers().load(Ordering::SeqCst) > 1 {
            self.pass_on_pending();
        }
    }

    /// Writes the receive fd again if messages are pending.
    fn pass_on_pending(&self) {
        match &self.inner {
            Inner::Local(sh) => sh.bells.pass_on_pending(&sh.ring),
            Inner::Process(p) => p.pass_on_pending(),
        }
    }
}

/// A consumer of a channel, counted in until dropped (D4). Consumers that
/// each wait on the receive fd with `EPOLLEXCLUSIVE` are woken one per
/// write, so one that stops waiting after its wake-up (a worker shutting
/// down, a thread cancelled) would leave the messages it was woken for to
/// nobody; dropping its `Consumer` (or [`leave`](Consumer::leave)) writes
/// the fd again if messages remain and another consumer is counted, so one
/// more wakes. A loop's channel source counts itself in the same way.
///
/// ```
/// use eventq::{Chan, Options, Wait};
///
/// let chan = Chan::new(Options::new(16))?;
/// let worker = chan.consumer(); // counted in while it waits
/// chan.send(b"job", Wait::Never)?;
/// drop(worker); // leaves without receiving: another consumer would wake
/// assert_eq!(chan.recv(Wait::Never)?, b"job");
/// # Ok::<(), eventq::Error>(())
/// ```
#[derive(Debug)]
pub struct Consumer {
    chan: Chan,
}

impl Consumer {
    /// The channel this consumer takes from.
    pub fn chan(&self) -> &Chan {
        &self.chan
    }

    /// Counts this consumer out now (as dropping it does).
    pub fn leave(self) {}
}

impl Drop for Consumer {
    fn drop(&mut self) {
        self.chan.consumer_leave();
    }
}

/// A loop's channel source, a consumer counted in once its source is
/// registered (`enlist`), so a failed add neither counts nor writes. Loops
/// register the receive fd with EPOLLEXCLUSIVE, so one write wakes one of
/// them; a loop that stops taking while messages remain (its budget spent,
/// the loop stopped, the source disabled or removed) passes the wake-up on
/// if another consumer is counted.
pub(crate) struct LoopConsumer {
    chan: Chan,
    enlisted: AtomicBool,
}

impl LoopConsumer {
    pub(crate) fn chan(&self) -> &Chan {
        &self.chan
    }

    /// Counts this consumer in: its source is registered.
    pub(crate) fn enlist(&self) {
        if !self.enlisted.swap(true, Ordering::SeqCst) {
            self.chan.consumer_enter();
        }
    }

    /// Wakes another consumer for the messages still pending, if one is
    /// counted (this one counts until it is dropped).
    pub(crate) fn pass_on(&self) {
        self.chan.hand_on();
    }
}

impl Drop for LoopConsumer {
    fn drop(&mut self) {
        if self.enlisted.load(Ordering::SeqCst) {
            self.chan.consumer_leave();
        }
    }
}
