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
//!
//! The receive fd sleeps until its number is first asked for
//! ([`Doorbells::recv_fd`]): until then nobody can poll it, so no call
//! writes or reads it, and `TAIL_RECV_RAISED` stays set, so no send takes
//! `bells`. A channel used only through blocking calls never pays a
//! doorbell syscall. Waking it, under `bells`, judges the queue once: the
//! fd is raised if messages are pending (or the channel closed), the flag
//! cleared otherwise, and from then on the rules above hold. The wake and
//! a receive that empties the queue each write one word (`awake`, `head`)
//! then read the other across SeqCst, so either the wake sees the queue
//! empty or the receive sees the fd awake and lowers it.

#[cfg(not(loom))]
use std::os::fd::{AsFd, BorrowedFd};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::OnceLock;

use super::ring::{Flags, Ring, SharedWord, Word, TAIL_CLOSED};
use super::shim::{fence, AtomicBool, EventFd, Mutex, MutexGuard, Ordering};
use crate::error::Result;

/// `tail`: the receive doorbell is raised.
pub(super) const TAIL_RECV_RAISED: Flags = Flags::bit(1);
/// `head`: the send doorbell is lowered.
pub(super) const HEAD_SEND_LOWERED: Flags = Flags::bit(0);

/// What a doorbell judges by: the queue's two words and its room. The
/// in-process ring and the process-shared one each have one.
pub(super) trait Queue {
    fn tail(&self) -> SharedWord<'_>;
    fn head(&self) -> SharedWord<'_>;
    fn byte_limited(&self) -> bool;
    /// The bytes queued (0 without a byte limit).
    fn bytes(&self) -> u64;
    fn is_full(&self, depth: u64, bytes: u64) -> bool;
    fn is_low(&self, depth: u64, bytes: u64) -> bool;
    fn fits(&self, depth: u64, bytes: u64, len: usize) -> bool;
    /// How many times a settle judges again because a word moved under it
    /// before it gives up: without bound in one process (every move is a
    /// call making progress); bounded where another process, which may
    /// change the words without pause, shares them.
    fn judge_tries(&self) -> u32 {
        u32::MAX
    }
}

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
    /// The receive fd's number has been handed out: it follows the queue.
    /// Set once, under `bells`.
    awake: AtomicBool,
    recv: EventFd,
    /// Created under `bells` by the first call that asks for it, at the
    /// level `HEAD_SEND_LOWERED` gives: a channel polled only for input
    /// (most are) costs one fd.
    send: OnceLock<EventFd>,
}

impl Doorbells {
    /// The doorbells of an empty, open channel `ring`: the receive fd
    /// asleep (down, its flag set in `ring`); the send doorbell up
    /// (`HEAD_SEND_LOWERED` clear), a ring counted now.
    pub(super) fn new(ring: &Ring) -> Result<Doorbells> {
        ring.tail().set(TAIL_RECV_RAISED);
        Ok(Doorbells {
            bells: Mutex::new(Rings { recv: 0, send: 1 }),
            recv_recheck: AtomicBool::new(false),
            awake: AtomicBool::new(false),
            recv: EventFd::new()?,
            send: OnceLock::new(),
        })
    }

    /// The receive fd, woken first if it sleeps.
    #[cfg(not(loom))]
    pub(super) fn recv_fd(&self, ring: &Ring) -> BorrowedFd<'_> {
        self.wake_recv(ring);
        self.recv.as_fd()
    }

    /// The receive fd's number, woken first if it sleeps.
    pub(super) fn recv_raw_fd(&self, ring: &Ring) -> RawFd {
        self.wake_recv(ring);
        self.recv.as_raw_fd()
    }

    /// Whether the receive fd still sleeps (nobody has its number). A
    /// receiver that is about to park may spin first only then: with the
    /// fd awake, a spinning receiver that catches up lowers and raises it
    /// for each message.
    pub(super) fn recv_asleep(&self) -> bool {
        !self.awake.load(Ordering::Relaxed)
    }

    /// Wakes the receive fd: from now on it follows the queue. While it
    /// slept its flag stayed set and the fd down; the queue is judged once
    /// under `bells`, and either the fd goes up or the flag comes down.
    pub(super) fn wake_recv(&self, ring: &Ring) {
        if self.awake.load(Ordering::Acquire) {
            return;
        }
        let mut bells = self.bells.lock();
        if !self.awake.load(Ordering::Relaxed) {
            self.awake.store(true, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            loop {
                let tail = ring.tail().latest();
                let head = ring.head().latest();
                if recv_should_be_raised(tail, head) {
                    self.recv.raise();
                    bells.recv += 1;
                    break;
                }
                // Judged by `tail`: if a send moved it since, judge again.
                if ring.tail().flip_if_unchanged(tail, TAIL_RECV_RAISED) {
                    break;
                }
            }
        }
        self.unlock(bells, ring);
    }

    /// Whether the receive fd is awake, read after the caller's own write
    /// to the queue (a SeqCst RMW), for the wake's judgement to pair with.
    fn awake_after_move(&self) -> bool {
        fence(Ordering::SeqCst);
        self.awake.load(Ordering::SeqCst)
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
    /// While the fd sleeps nothing is written; the result is the level it
    /// would have.
    pub(super) fn settle_recv(&self, ring: &Ring, edge: Edge) -> bool {
        if !self.awake_after_move() {
            let tail = ring.tail().load(Ordering::SeqCst);
            let head = ring.head().load(Ordering::SeqCst);
            return recv_should_be_raised(tail, head);
        }
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
        if !self.awake_after_move() {
            return;
        }
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

    fn settle_recv_held(&self, bells: &mut MutexGuard<'_, Rings>, ring: &Ring, edge: Edge) -> bool {
        let settled = settle_recv_on(&self.recv, ring, edge);
        bells.recv += u64::from(settled.wrote);
        settled.raised
    }

    fn settle_send_held(
        &self,
        bells: &mut MutexGuard<'_, Rings>,
        ring: &Ring,
        refused: Option<usize>,
        edge: Edge,
    ) -> bool {
        let settled = settle_send_on(self.send.get(), ring, refused, edge);
        bells.send += u64::from(settled.wrote);
        settled.raised
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
}

/// What a settle did: whether the fd is (and stays) raised, and whether it
/// wrote the fd (a ring, for the stats).
pub(super) struct Settled {
    pub(super) raised: bool,
    pub(super) wrote: bool,
}

/// Makes the receive doorbell `bell` match `q` (see `Doorbells::settle_recv`);
/// the caller holds whatever serialises the settles of this doorbell.
pub(super) fn settle_recv_on<Q: Queue>(bell: &EventFd, q: &Q, edge: Edge) -> Settled {
    for _ in 0..q.judge_tries() {
        let tail = q.tail().latest();
        let head = q.head().latest();
        let raised = tail.has(TAIL_RECV_RAISED);
        let want = recv_should_be_raised(tail, head);
        if want == raised {
            let wrote = want && edge == Edge::Always;
            if wrote {
                bell.pulse();
            }
            return Settled {
                raised: want,
                wrote,
            };
        }
        // Judged by `tail`: if a send moved it since, judge again.
        if !q.tail().flip_if_unchanged(tail, TAIL_RECV_RAISED) {
            continue;
        }
        if want {
            bell.raise();
        } else {
            bell.lower();
        }
        return Settled {
            raised: want,
            wrote: want,
        };
    }
    // The words never held still (only another process can do that):
    // the fd is left as it is.
    Settled {
        raised: q.tail().load(Ordering::SeqCst).has(TAIL_RECV_RAISED),
        wrote: false,
    }
}

/// The receive fd's level for `tail` and `head` (D4): up iff messages are
/// pending or the channel is closed.
fn recv_should_be_raised(tail: Word, head: Word) -> bool {
    tail.has(TAIL_CLOSED) || tail.position() > head.position()
}

/// Makes the send doorbell (`bell`, if it exists yet) match `q` (see
/// `Doorbells::settle_send`); `raised` in the result says whether the
/// `refused` send still does not fit. The caller serialises the settles.
pub(super) fn settle_send_on<Q: Queue>(
    bell: Option<&EventFd>,
    q: &Q,
    refused: Option<usize>,
    mut edge: Edge,
) -> Settled {
    let mut wrote = false;
    for _ in 0..q.judge_tries() {
        let head = q.head().latest();
        let tail = q.tail().latest();
        let lowered = head.has(HEAD_SEND_LOWERED);
        let want = send_should_be_lowered(q, tail, head, refused, lowered);
        if want != lowered {
            // Judged by `head`: if a receive moved it since, judge again.
            if !q.head().flip_if_unchanged(head, HEAD_SEND_LOWERED) {
                continue;
            }
            // Without the fd (nobody asked for it) only the flag moves.
            if want {
                if let Some(b) = bell {
                    b.lower();
                }
            } else {
                if let Some(b) = bell {
                    b.raise();
                }
                wrote = true;
                edge = Edge::OnRaise;
            }
        } else if !lowered && edge == Edge::Always {
            if let Some(b) = bell {
                b.pulse();
            }
            wrote = true;
            edge = Edge::OnRaise;
        }
        if !q.byte_limited() {
            return Settled {
                raised: still_refused(q, tail, head, refused),
                wrote,
            };
        }
        // Bytes are given back after `head` moves, so a receive may have
        // missed the flag just set: look again after a fence (the
        // releaser fences too, so one of us sees the other).
        fence(Ordering::SeqCst);
        let head = q.head().latest();
        let tail = q.tail().latest();
        let lowered = head.has(HEAD_SEND_LOWERED);
        if send_should_be_lowered(q, tail, head, refused, lowered) == lowered {
            return Settled {
                raised: still_refused(q, tail, head, refused),
                wrote,
            };
        }
    }
    // The words never held still (only another process can do that).
    Settled {
        raised: true,
        wrote,
    }
}

/// Whether the send fd should be down, judged by `tail` and `head`: down
/// when full or when a send of `refused` bytes does not fit, up at or below
/// the low-water mark or when closed, unchanged (`lowered`) in between.
fn send_should_be_lowered<Q: Queue>(
    ring: &Q,
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
fn still_refused<Q: Queue>(ring: &Q, tail: Word, head: Word, refused: Option<usize>) -> bool {
    !tail.has(TAIL_CLOSED)
        && refused.is_some_and(|len| !ring.fits(Ring::depth(tail, head), ring.bytes(), len))
}

#[cfg(loom)]
impl Doorbells {
    pub(super) fn opened_send(&self) -> &EventFd {
        self.send.get().expect("open_send_bell first")
    }

    pub(super) fn recv_is_raised(&self) -> bool {
        self.recv.is_raised()
    }

    pub(super) fn recv_writes(&self) -> u64 {
        self.recv.writes()
    }

    pub(super) fn recv_registered(&self) -> (u64, bool) {
        self.recv.registered()
    }
}
