// SPDX-License-Identifier: MIT OR Apache-2.0
//! Threads blocked inside the library: they sleep on condvars, not on the
//! fds (which exist for event loops), so blocking costs no eventfd traffic.
//!
//! A receiver about to sleep announces itself with `TAIL_RECV_WAITERS` in
//! `tail` under the `waiting` lock and looks once more; a send whose claim
//! saw the flag takes the lock and notifies, so the notify cannot slip in
//! between the look and the sleep. Senders announce themselves in `head`
//! (`HEAD_SEND_WAITERS`) the same way and are woken at the low-water mark,
//! like the send fd: a full channel costs one wake-up per
//! `capacity - low_water` messages, not one per message.

use std::time::Instant;

use super::options::Wait;
use super::ring::{Flags, Ring, TAIL_CLOSED};
use super::shim::{fence, Condvar, Mutex, MutexGuard, Ordering};
use super::waits::LingerRecord;
use crate::error::Error;

/// `tail`: a receiver may be blocked in the library, waiting for a message.
pub(super) const TAIL_RECV_WAITERS: Flags = Flags::bit(2);
/// `head`: a sender may be blocked in the library, waiting for room.
pub(super) const HEAD_SEND_WAITERS: Flags = Flags::bit(1);

/// When a wait gives up.
#[derive(Clone, Copy)]
pub(super) enum Deadline {
    Now,
    Never,
    At(Instant),
}

impl Deadline {
    pub(super) fn new(wait: Wait) -> Deadline {
        match wait {
            Wait::Never => Deadline::Now,
            Wait::Forever => Deadline::Never,
            // A timeout too large to represent is as good as none.
            Wait::For(d) => Instant::now()
                .checked_add(d)
                .map_or(Deadline::Never, Deadline::At),
        }
    }

    /// When it passes, if it ever does.
    pub(super) fn instant(self) -> Option<Instant> {
        match self {
            Deadline::At(t) => Some(t),
            Deadline::Now => Some(Instant::now()),
            Deadline::Never => None,
        }
    }

    /// The error to return when the deadline has passed, if it has.
    pub(super) fn expired(self) -> Option<Error> {
        match self {
            Deadline::Now => Some(Error::WouldBlock),
            Deadline::Never => None,
            Deadline::At(t) => (Instant::now() >= t).then_some(Error::TimedOut),
        }
    }
}

/// Threads asleep in the library, counted under the `waiting` lock.
struct Sleepers {
    receivers: usize,
    senders: usize,
}

pub(super) struct Parking {
    /// Blocking receives that found the queue empty and have not returned
    /// yet (looking again or asleep). Only a hint for how to wait: std's
    /// atomic, not loom's, since loom explores no spin.
    looking: std::sync::atomic::AtomicUsize,
    /// Blocking sends that found it full, likewise.
    looking_for_room: std::sync::atomic::AtomicUsize,
    /// Whether a lone receive's linger, and a lone send's, paid lately.
    pub(super) recv_lingers: LingerRecord,
    pub(super) send_lingers: LingerRecord,
    waiting: Mutex<Sleepers>,
    /// Signalled when a message arrives or the channel closes.
    readable: Condvar,
    /// Signalled at the low-water mark or when the channel closes.
    writable: Condvar,
}

impl Parking {
    pub(super) fn new() -> Parking {
        Parking {
            looking: std::sync::atomic::AtomicUsize::new(0),
            looking_for_room: std::sync::atomic::AtomicUsize::new(0),
            recv_lingers: LingerRecord::new(),
            send_lingers: LingerRecord::new(),
            waiting: Mutex::new(Sleepers {
                receivers: 0,
                senders: 0,
            }),
            readable: Condvar::new(),
            writable: Condvar::new(),
        }
    }

    /// Counts a blocking receive in as waiting for a message, until the
    /// result is dropped.
    pub(super) fn look(&self) -> Looking<'_> {
        Looking::new(&self.looking)
    }

    /// Counts a blocking send in as waiting for room, until the result is
    /// dropped.
    pub(super) fn look_for_room(&self) -> Looking<'_> {
        Looking::new(&self.looking_for_room)
    }

    /// Sleeps until a send or close announces itself, unless a message is
    /// already pending.
    pub(super) fn wait_for_message(&self, ring: &Ring, deadline: Deadline) {
        let mut sleepers = self.waiting.lock();
        let tail = ring.tail().set(TAIL_RECV_WAITERS);
        let head = ring.head().latest();
        if !tail.has(TAIL_CLOSED) && tail.position() == head.position() {
            sleepers.receivers += 1;
            sleep(&self.readable, &mut sleepers, deadline);
            sleepers.receivers -= 1;
        }
        // Nobody asleep (a message came first, or the wait timed out): take
        // the announcement back, so the next send does not take `waiting`.
        // Only receivers set it, under `waiting`, so the load is exact; it
        // spares the `tail` line a write when a waker already cleared it.
        if sleepers.receivers == 0 && ring.tail().load(Ordering::SeqCst).has(TAIL_RECV_WAITERS) {
            ring.tail().clear(TAIL_RECV_WAITERS);
        }
    }

    /// Sleeps until the queue drains to the low-water mark or closes, unless
    /// `len` bytes already fit.
    pub(super) fn wait_for_room(&self, ring: &Ring, len: usize, deadline: Deadline) {
        let mut sleepers = self.waiting.lock();
        let head = ring.head().set(HEAD_SEND_WAITERS);
        if ring.byte_limited() {
            // Pairs with the fence of a receive giving bytes back.
            fence(Ordering::SeqCst);
        }
        let tail = ring.tail().latest();
        if tail.has(TAIL_CLOSED) || ring.fits(Ring::depth(tail, head), ring.bytes(), len) {
            return;
        }
        sleepers.senders += 1;
        sleep(&self.writable, &mut sleepers, deadline);
        sleepers.senders -= 1;
    }

    /// Wakes receivers asleep in the library after `n` messages arrived:
    /// one per message, or all of them when there are no more sleepers
    /// than messages (and then nobody is left asleep to announce).
    pub(super) fn wake_receivers(&self, ring: &Ring, n: usize) {
        let sleepers = self.waiting.lock();
        if sleepers.receivers <= n {
            ring.tail().clear(TAIL_RECV_WAITERS);
            if sleepers.receivers > 0 {
                self.readable.notify_all();
            }
        } else {
            for _ in 0..n {
                self.readable.notify_one();
            }
        }
    }

    /// Wakes every sender asleep in the library: the queue drained to the
    /// low-water mark. (With a byte limit the one woken first may not fit
    /// while another would, so it is all of them in any case.)
    pub(super) fn wake_senders(&self, ring: &Ring) {
        let sleepers = self.waiting.lock();
        ring.head().clear(HEAD_SEND_WAITERS);
        if sleepers.senders > 0 {
            self.writable.notify_all();
        }
    }

    /// Wakes every blocked thread: the channel closed.
    pub(super) fn wake_all(&self, ring: &Ring) {
        let _sleepers = self.waiting.lock();
        ring.tail().clear(TAIL_RECV_WAITERS);
        ring.head().clear(HEAD_SEND_WAITERS);
        self.readable.notify_all();
        self.writable.notify_all();
    }
}

/// A blocking receive waiting for a message ([`Parking::look`]), or a
/// blocking send waiting for room ([`Parking::look_for_room`]).
pub(super) struct Looking<'a>(&'a std::sync::atomic::AtomicUsize);

impl Looking<'_> {
    fn new(count: &std::sync::atomic::AtomicUsize) -> Looking<'_> {
        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Looking(count)
    }

    /// Whether another call of its kind waits too. Receives with company
    /// spin: messages are scarcer than receivers, and one that spins takes
    /// the next message without a wake-up. A lone receive or send lingers
    /// instead (`Linger`): spinning, it would take each message or slot as
    /// it comes and pull the ring's lines across CPUs for every one. Sends
    /// with company park at once: spinning, they would take the CPUs the
    /// receivers need.
    pub(super) fn has_company(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Relaxed) > 1
    }
}

impl Drop for Looking<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

fn sleep(cv: &Condvar, sleepers: &mut MutexGuard<'_, Sleepers>, deadline: Deadline) {
    match deadline {
        Deadline::At(t) => {
            cv.wait_until(sleepers, t);
        }
        Deadline::Never => cv.wait(sleepers),
        Deadline::Now => {}
    }
}
