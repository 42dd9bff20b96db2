// SPDX-License-Identifier: MIT OR Apache-2.0
//! The doorbells: two eventfds whose readiness tracks the queue, for event
//! loops (D4, D5, D9). Threads that block inside the library never use them
//! (see `parking.rs`).
//!
//! - The receive fd is readable iff messages are pending or the channel is
//!   closed (D4).
//! - The send fd is not readable while the queue is full (or refused a send
//!   for lack of room) and open; it is readable again once the queue has
//!   drained to its low-water mark, or closed (D5). It is created by the
//!   first call that asks for it; until then only its flag moves.
//!
//! Whether each is up is mirrored in a flag bit of the ring word its wakers
//! move anyway (`TAIL_RECV_RAISED` in `tail`, moved by every send;
//! `HEAD_SEND_LOWERED` in `head`, moved by every receive), so the CAS that
//! queues or takes a message also tells the caller whether a doorbell needs
//! changing. A doorbell changes only here, under the `bells` lock: a settle
//! reads both words, decides what the fd should be, and flips the flag with
//! a CAS on the word it judged by; if a message slipped in or out meanwhile
//! the CAS fails and it judges again. The syscall is made still under the
//! lock, so the fd equals the queue state whenever no call is in progress.
//!
//! Edges (D9): a call is refused only once its fd is down, so the raise that
//! follows is its event. Close, and a batch receive cut short at end of
//! stream, refuse with an fd that stays up: they write it again
//! ([`Edge::Always`]).

#[cfg(not(loom))]
use std::os::fd::{AsFd, BorrowedFd};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::OnceLock;

use super::ring::{Flags, Ring, Word, TAIL_CLOSED};
use super::shim::{fence, AtomicBool, EventFd, Mutex, MutexGuard, Ordering};
use crate::error::Result;

/// `tail`: the receive doorbell is raised.
pub(super) const TAIL_RECV_RAISED: Flags = Flags::bit(1);
/// `head`: the send doorbell is lowered.
pub(super) const HEAD_SEND_LOWERED: Flags = Flags::bit(0);

/// What a settle owes edge-triggered waiters (EPOLLET, Go's netpoller,
/// tokio), who wake only on a write, not on a level.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Edge {
    /// Write only on a transition to raised. Enough for a refused call
    /// once its fd is down: the raise that follows is its event.
    OnRaise,
    /// The fd stays up and a waiter may have consumed its last event
    /// (close; end of stream passed on): write even if it is up already.
    Always,
}

/// Writes to each eventfd, counted under the `bells` lock (the stats'
/// `recv_doorbell_rings` and `send_doorbell_rings`).
struct Rings {
    recv: u64,
    send: u64,
}

pub(super) struct Doorbells {
    bells: Mutex<Rings>,
    /// A receive that emptied the queue found `bells` busy and left the
    /// lowering of the receive fd to its holder (`lower_recv_soon`).
    recv_recheck: AtomicBool,
    recv: EventFd,
    /// Created under `bells` by the first call that asks for it, at the
    /// level `HEAD_SEND_LOWERED` gives: a channel polled only for input
    /// (most are) costs one fd.
    send: OnceLock<EventFd>,
}

impl Doorbells {
    /// The doorbells of an empty, open channel: the receive fd down; the
    /// send doorbell up (`HEAD_SEND_LOWERED` clear), a ring counted now.
    pub(super) fn new() -> Result<Doorbells> {
        Ok(Doorbells {
            bells: Mutex::new(Rings { recv: 0, send: 1 }),
            recv_recheck: AtomicBool::new(false),
            recv: EventFd::new()?,
            send: OnceLock::new(),
        })
    }

    #[cfg(not(loom))]
    pub(super) fn recv_fd(&self) -> BorrowedFd<'_> {
        self.recv.as_fd()
    }

    pub(super) fn recv_raw_fd(&self) -> RawFd {
        self.recv.as_raw_fd()
    }

    /// The send fd if it has been asked for.
    pub(super) fn send_raw_fd_if_open(&self) -> Option<RawFd> {
        self.send.get().map(|b| b.as_raw_fd())
    }

    /// The send doorbell, created now if it is not yet. Under `bells`, which
    /// every change of the doorbell holds, so its level is taken from
    /// `HEAD_SEND_LOWERED` with no change in flight, and every change after
    /// sees the fd. An edge-triggered waiter registers the fd after this, so
    /// its first event is the level at registration, and each later change
    /// is a write (D9).
    pub(super) fn send(&self, ring: &Ring) -> Result<&EventFd> {
        if let Some(bell) = self.send.get() {
            return Ok(bell);
        }
        let bells = self.bells.lock();
        let bell = match self.send.get() {
            Some(bell) => Ok(bell),
            None => EventFd::new().map(|bell| {
                if !ring.head().latest().has(HEAD_SEND_LOWERED) {
                    bell.raise();
                }
                self.send.get_or_init(|| bell)
            }),
        };
        self.unlock(bells, ring);
        Ok(bell?)
    }

    /// Makes the receive doorbell match the queue: raised iff messages are
    /// pending or the channel is closed; with `Edge::Always`, a raised fd is
    /// written even if it was up already. Returns whether it is raised.
    pub(super) fn settle_recv(&self, ring: &Ring, edge: Edge) -> bool {
        let mut bells = self.bells.lock();
        let raised = self.settle_recv_held(&mut bells, ring, edge);
        self.unlock(bells, ring);
        raised
    }

    /// The receive that emptied the queue lowers the receive fd, unless
    /// `bells` is busy: then its holder, who may be writing an eventfd (a
    /// syscall that can take microseconds when it wakes an idle CPU),
    /// judges again once it lets go, and this receive returns its message
    /// now instead of waiting for that write. The flag and the lock are
    /// each written then read across a SeqCst fence, so either this call
    /// gets the lock or the holder sees the flag.
    pub(super) fn lower_recv_soon(&self, ring: &Ring) {
        self.recv_recheck.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        self.recheck_recv(ring);
    }

    /// Writes the receive fd again if messages are pending: one more
    /// exclusive waiter wakes (a consumer that leaves hands its wake-up on).
    pub(super) fn pass_on_pending(&self, ring: &Ring) {
        let tail = ring.tail().load(Ordering::SeqCst);
        let head = ring.head().load(Ordering::SeqCst);
        if tail.position() > head.position() {
            self.settle_recv(ring, Edge::Always);
        }
    }

    /// Makes the send doorbell match the queue: lowered when full (or when
    /// a send of `refused` bytes does not fit), raised at the low-water mark
    /// or when closed, unchanged in between; with `Edge::Always` (close) a
    /// raised fd is written even if it was up. Returns whether the
    /// `refused` send still does not fit (and so the fd is down): false
    /// means room came back (or the channel closed), and the sender should
    /// try again rather than be refused with an fd that may stay up (D9).
    pub(super) fn settle_send(&self, ring: &Ring, refused: Option<usize>, edge: Edge) -> bool {
        let mut bells = self.bells.lock();
        let still_refused = self.settle_send_held(&mut bells, ring, refused, edge);
        self.unlock(bells, ring);
        still_refused
    }

    /// The writes each eventfd has had (the stats' doorbell rings).
    pub(super) fn rings(&self, ring: &Ring) -> (u64, u64) {
        let bells = self.bells.lock();
        let rings = (bells.recv, bells.send);
        self.unlock(bells, ring);
        rings
    }

    /// Lets go of `bells`, then does a lowering a receive left to the holder.
    fn unlock(&self, bells: MutexGuard<'_, Rings>, ring: &Ring) {
        drop(bells);
        fence(Ordering::SeqCst);
        if self.recv_recheck.load(Ordering::SeqCst) {
            self.recheck_recv(ring);
        }
    }

    /// Judges the receive fd again while someone asks for it and `bells` is
    /// free; a holder that sees the request after letting go comes back here.
    fn recheck_recv(&self, ring: &Ring) {
        while let Some(mut bells) = self.bells.try_lock() {
            self.recv_recheck.store(false, Ordering::SeqCst);
            self.settle_recv_held(&mut bells, ring, Edge::OnRaise);
            drop(bells);
            fence(Ordering::SeqCst);
            if !self.recv_recheck.load(Ordering::SeqCst) {
                return;
            }
        }
    }

    fn settle_recv_held(&self, bells: &mut MutexGuard<'_, Rings>, ring: &Ring, edge: Edge) -> bool {
        loop {
            let tail = ring.tail().latest();
            let head = ring.head().latest();
            let raised = tail.has(TAIL_RECV_RAISED);
            let want = tail.has(TAIL_CLOSED) || tail.position() > head.position();
            if want == raised {
                if want && edge == Edge::Always {
                    self.recv.pulse();
                    bells.recv += 1;
                }
                return want;
            }
            // Judged by `tail`: if a send moved it since, judge again.
            if !ring.tail().flip_if_unchanged(tail, TAIL_RECV_RAISED) {
                continue;
            }
            if want {
                self.recv.raise();
                bells.recv += 1;
            } else {
                self.recv.lower();
            }
            return want;
        }
    }

    fn settle_send_held(
        &self,
        bells: &mut MutexGuard<'_, Rings>,
        ring: &Ring,
        refused: Option<usize>,
        mut edge: Edge,
    ) -> bool {
        loop {
            let head = ring.head().latest();
            let tail = ring.tail().latest();
            let lowered = head.has(HEAD_SEND_LOWERED);
            let want = send_should_be_lowered(ring, tail, head, refused, lowered);
            if want != lowered {
                // Judged by `head`: if a receive moved it since, judge again.
                if !ring.head().flip_if_unchanged(head, HEAD_SEND_LOWERED) {
                    continue;
                }
                // Without the fd (nobody asked for it) only the flag moves.
                let bell = self.send.get();
                if want {
                    if let Some(b) = bell {
                        b.lower();
                    }
                } else {
                    if let Some(b) = bell {
                        b.raise();
                    }
                    bells.send += 1;
                    edge = Edge::OnRaise;
                }
            } else if !lowered && edge == Edge::Always {
                if let Some(b) = self.send.get() {
                    b.pulse();
                }
                bells.send += 1;
                edge = Edge::OnRaise;
            }
            if !ring.byte_limited() {
                return still_refused(ring, tail, head, refused);
            }
            // Bytes are given back after `head` moves, so a receive may have
            // missed the flag just set: look again after a fence (the
            // releaser fences too, so one of us sees the other).
            fence(Ordering::SeqCst);
            let head = ring.head().latest();
            let tail = ring.tail().latest();
            let lowered = head.has(HEAD_SEND_LOWERED);
            if send_should_be_lowered(ring, tail, head, refused, lowered) == lowered {
                return still_refused(ring, tail, head, refused);
            }
        }
    }
}

/// Whether the send fd should be down, judged by `tail` and `head`: down
/// when full or when a send of `refused` bytes does not fit, up at or below
/// the low-water mark or when closed, unchanged (`lowered`) in between.
fn send_should_be_lowered(
    ring: &Ring,
    tail: Word,
    head: Word,
    refused: Option<usize>,
    lowered: bool,
) -> bool {
    if tail.has(TAIL_CLOSED) {
        return false;
    }
    let depth = Ring::depth(tail, head);
    let bytes = ring.bytes();
    if ring.is_full(depth, bytes) || still_refused(ring, tail, head, refused) {
        return true;
    }
    if ring.is_low(depth, bytes) {
        return false;
    }
    lowered
}

/// Whether a send of `refused` bytes would still be refused for lack of
/// room (not on a closed channel: that send fails otherwise).
fn still_refused(ring: &Ring, tail: Word, head: Word, refused: Option<usize>) -> bool {
    !tail.has(TAIL_CLOSED)
        && refused.is_some_and(|len| !ring.fits(Ring::depth(tail, head), ring.bytes(), len))
}

/// What the loom models observe of the doorbells.
#[cfg(loom)]
impl super::Chan {
    /// Creates the send doorbell, as the first `send_fd` does.
    pub fn open_send_bell(&self) {
        let sh = &*self.shared;
        sh.bells.send(&sh.ring).expect("the model's eventfd");
    }

    /// What an edge-triggered waiter registering the send fd now has seen:
    /// its writes so far and whether it is raised (an event at
    /// registration). The send doorbell must have been opened.
    pub fn send_fd_registered(&self) -> (u64, bool) {
        self.shared.bells.opened_send().registered()
    }

    /// Whether the receive and send doorbells are raised (the model's
    /// "readable"); the send doorbell must have been opened.
    pub fn doorbells(&self) -> (bool, bool) {
        let bells = &self.shared.bells;
        (bells.recv.is_raised(), bells.opened_send().is_raised())
    }

    /// How many writes each eventfd has had (the events an edge-triggered
    /// waiter sees); the send doorbell must have been opened.
    pub fn doorbell_writes(&self) -> (u64, u64) {
        let bells = &self.shared.bells;
        (bells.recv.writes(), bells.opened_send().writes())
    }
}

#[cfg(loom)]
impl Doorbells {
    fn opened_send(&self) -> &EventFd {
        self.send.get().expect("open_send_bell first")
    }
}
