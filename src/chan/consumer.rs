// SPDX-License-Identifier: MIT OR Apache-2.0
//! The loop's side of a channel: its receive, one message at a time into a
//! callback (`Chan::recv_each`), and the hand-on between consumers that
//! wait on the receive fd with `EPOLLEXCLUSIVE` (`LoopConsumer`, D4).

use super::ring::{Payload, Pop, TAIL_CLOSED};
use super::shared::Popped;
use super::shim::{AtomicBool, Ordering};
use super::slots::INLINE_MAX;
use super::Chan;

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
    /// message). Returns the count delivered and why it stopped.
    pub(crate) fn recv_each(
        &self,
        spare: &mut Vec<u8>,
        max: usize,
        mut deliver: impl FnMut(&[u8]) -> bool,
    ) -> (usize, EachEnd) {
        let sh = &*self.shared;
        let mut n = 0;
        while n < max {
            let mut inline = [0u8; INLINE_MAX];
            let mut take = |m: Payload<'_>| match m {
                Payload::Inline(b) => {
                    inline[..b.len()].copy_from_slice(b);
                    false
                }
                Payload::Heap(v) => {
                    std::mem::swap(v, spare);
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

    pub(crate) fn loop_consumer(&self) -> LoopConsumer {
        LoopConsumer {
            chan: self.clone(),
            enlisted: AtomicBool::new(false),
        }
    }
}

/// A loop's channel source. Loops register the receive fd with
/// EPOLLEXCLUSIVE, so one write wakes one of them; a loop that stops taking
/// while messages remain (its budget spent, the loop stopped, the source
/// disabled or removed) passes the wake-up on, if another loop consumes the
/// channel. Counted from `enlist`, once its source is registered, so a
/// failed add neither counts nor writes.
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
            self.chan
                .shared
                .loop_consumers
                .fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Wakes another loop for the messages still pending, if one consumes
    /// this channel (this one counts until it is dropped).
    pub(crate) fn pass_on(&self) {
        let sh = &*self.chan.shared;
        if sh.loop_consumers.load(Ordering::SeqCst) > 1 {
            sh.bells.pass_on_pending(&sh.ring);
        }
    }
}

impl Drop for LoopConsumer {
    fn drop(&mut self) {
        let sh = &*self.chan.shared;
        if self.enlisted.load(Ordering::SeqCst)
            && sh.loop_consumers.fetch_sub(1, Ordering::SeqCst) > 1
        {
            sh.bells.pass_on_pending(&sh.ring);
        }
    }
}
