// SPDX-License-Identifier: MIT OR Apache-2.0
//! The doorbells of a process-shared channel: the same two eventfds and the
//! same rules as in one process (D4, D5, D9; `doorbell.rs` judges), but
//! the lock that serialises their changes lives in the shared memory, and
//! nobody ever waits for it. The other process may die holding it, or
//! hold it for ever out of malice; a call that wanted a change leaves a
//! request instead, and whoever holds the lock serves every request before
//! it lets go.
//!
//! A requester sets its bits in the requests word, then tries the lock; a
//! holder lets go, then looks at the requests word again. Every access is
//! SeqCst, so either the requester gets the lock or the holder sees the
//! request. A refused call cannot know when its request is served, so it
//! asks for an edge (`*_EDGE`): the server writes the fd even if it stays
//! up. Either the fd is lowered after the refusal (and the raise that
//! follows is the caller's event) or it is written then (D9).
//!
//! When the other process is seen gone, `recover` takes back a lock it
//! held, makes each fd match its flag again (a holder may have died
//! between its flag and its syscall), and serves both doorbells.

use std::sync::Arc;

use super::ring::ShmRing;
use crate::chan::doorbell::{
    settle_recv_on, settle_send_on, Edge, HEAD_SEND_LOWERED, TAIL_RECV_RAISED,
};
use crate::chan::shim::{AtomicU64, EventFd, Ordering};
use crate::chan::waits::Backoff;

/// Settle the receive doorbell.
pub(in crate::chan) const RECV: u64 = 1;
/// ... and write it even if it stays up.
pub(in crate::chan) const RECV_EDGE: u64 = 2;
/// Settle the send doorbell.
pub(in crate::chan) const SEND: u64 = 4;
/// ... and write it even if it stays up.
pub(in crate::chan) const SEND_EDGE: u64 = 8;
/// Every doorbell, with an edge: close, recovery.
pub(in crate::chan) const ALL: u64 = RECV | RECV_EDGE | SEND | SEND_EDGE;

/// How many times a holder serves requests that came while it held the
/// lock before it leaves the rest to the next caller.
const SERVE_ROUNDS: u32 = 64;

/// How many turns a refused call waits for the doorbell lock to come free
/// (a holder makes an eventfd syscall or two) before it leaves its request.
#[cfg(not(loom))]
const REFUSAL_TRIES: u32 = 64;
#[cfg(loom)]
const REFUSAL_TRIES: u32 = 2;

/// How many turns `recover` waits for this process's own threads to let
/// go of the lock before it gives up on making the fds match their flags.
#[cfg(not(loom))]
const RECOVER_TRIES: u32 = 1 << 12;
#[cfg(loom)]
const RECOVER_TRIES: u32 = 3;

pub(in crate::chan) struct Bells {
    pub(in crate::chan) recv: Arc<EventFd>,
    pub(in crate::chan) send: Arc<EventFd>,
    /// This process's mark in the lock word (1 or 2; 0 is free).
    me: u64,
    /// Writes this process made to each fd, for the stats.
    recv_rings: AtomicU64,
    send_rings: AtomicU64,
}

impl Bells {
    pub(in crate::chan) fn new(recv: Arc<EventFd>, send: Arc<EventFd>, me: u64) -> Bells {
        Bells {
            recv,
            send,
            me,
            recv_rings: AtomicU64::new(0),
            send_rings: AtomicU64::new(0),
        }
    }

    /// Asks for the doorbell changes in `req` and serves them if the lock
    /// is free; otherwise its holder will.
    pub(in crate::chan) fn request(&self, ring: &ShmRing, req: u64) {
        ring.bells_requests().fetch_or(req, Ordering::SeqCst);
        self.serve(ring);
    }

    /// Asks for the doorbell changes of a refused call (`req`) and, the
    /// holder of the lock being a call that finishes in a moment, waits a
    /// little for it rather than leave them: then the fd is settled when
    /// the refusal returns, as in one process, and a level-triggered waiter
    /// does not spin on an fd left up meanwhile. If the lock stays held (a
    /// holder that died there, or never lets go), the request stays, with
    /// `edge`: its server writes the fd if it stays up (D9).
    pub(in crate::chan) fn request_for_refusal(&self, ring: &ShmRing, req: u64, edge: u64) {
        ring.bells_requests().fetch_or(req, Ordering::SeqCst);
        let mut backoff = Backoff::new();
        for _ in 0..REFUSAL_TRIES {
            // Settled by this call, judging now: done. Taken by another
            // holder, it may have judged before this refusal: the edge.
            match self.serve(ring) {
                None => backoff.snooze(),
                Some(served) if served & req != 0 => return,
                Some(_) => break,
            }
        }
        self.request(ring, edge);
    }

    /// Serves the requests if the lock is free: the requests it served, or
    /// `None` if the lock was held.
    fn serve(&self, ring: &ShmRing) -> Option<u64> {
        let lock = ring.bells_lock();
        let requests = ring.bells_requests();
        // Bounded: the other process may set requests without pause; what
        // is left is the next caller's.
        let mut served = None;
        for _ in 0..SERVE_ROUNDS {
            if lock
                .compare_exchange(0, self.me, Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
            {
                break;
            }
            let req = requests.swap(0, Ordering::SeqCst);
            self.settle(ring, req);
            served = Some(served.unwrap_or(0) | req);
            // Only if still ours: a survivor may have taken it back.
            let _ = lock.compare_exchange(self.me, 0, Ordering::SeqCst, Ordering::SeqCst);
            if requests.load(Ordering::SeqCst) == 0 {
                break;
            }
        }
        served
    }

    fn settle(&self, ring: &ShmRing, req: u64) {
        let edge = |bit| {
            if req & bit != 0 {
                Edge::Always
            } else {
                Edge::OnRaise
            }
        };
        if req & (RECV | RECV_EDGE) != 0 {
            let settled = settle_recv_on(&self.recv, ring, edge(RECV_EDGE));
            self.recv_rings
                .fetch_add(u64::from(settled.wrote), Ordering::Relaxed);
        }
        if req & (SEND | SEND_EDGE) != 0 {
            let settled = settle_send_on(Some(&self.send), ring, None, edge(SEND_EDGE));
            self.send_rings
                .fetch_add(u64::from(settled.wrote), Ordering::Relaxed);
        }
    }

    /// The other process is gone: takes back the lock if it held it, makes
    /// each fd match its flag, and serves both doorbells with an edge, so
    /// every waiter wakes to see the new state.
    pub(in crate::chan) fn recover(&self, ring: &ShmRing) {
        let lock = ring.bells_lock();
        let held = lock.load(Ordering::SeqCst);
        if held != 0 && held != self.me {
            let _ = lock.compare_exchange(held, 0, Ordering::SeqCst, Ordering::SeqCst);
        }
        let mut backoff = Backoff::new();
        for _ in 0..RECOVER_TRIES {
            if lock
                .compare_exchange(0, self.me, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                self.resync(ring);
                let _ = lock.compare_exchange(self.me, 0, Ordering::SeqCst, Ordering::SeqCst);
                break;
            }
            backoff.snooze();
        }
        self.request(ring, ALL);
    }

    /// Makes each fd match its flag (under the lock).
    fn resync(&self, ring: &ShmRing) {
        let raised = ring.tail().latest().has(TAIL_RECV_RAISED);
        if self.recv.is_raised() != raised {
            if raised {
                self.recv.raise();
            } else {
                self.recv.lower();
            }
        }
        let up = !ring.head().latest().has(HEAD_SEND_LOWERED);
        if self.send.is_raised() != up {
            if up {
                self.send.raise();
            } else {
                self.send.lower();
            }
        }
    }

    /// The writes this process made to each fd.
    pub(in crate::chan) fn rings(&self) -> (u64, u64) {
        (
            self.recv_rings.load(Ordering::Relaxed),
            self.send_rings.load(Ordering::Relaxed),
        )
    }
}
