// SPDX-License-Identifier: MIT OR Apache-2.0
//! What every handle of a channel shares, and the work each call does
//! around its claims: a send claims slots, then makes the doorbell and
//! wake-up changes its claims' flags call for, once per call; a receive
//! likewise. The rules are the doorbells' (`doorbell.rs`) and the
//! parking's (`parking.rs`); this file decides when each is asked.

use super::doorbell::{Doorbells, Edge, HEAD_SEND_LOWERED, TAIL_RECV_RAISED};
use super::options::{DropFn, Stats, Wait};
use super::parking::{Deadline, Parking, HEAD_SEND_WAITERS, TAIL_RECV_WAITERS};
use super::ring::{Claimed, Flags, Payload, Pop, PushError, Ring, Word, TAIL_CLOSED};
use super::shim::{AtomicUsize, Ordering};
use super::waits::{Linger, Spin};
use crate::error::{Error, Result};

/// The `head` flags that call for work when the queue drains to low water.
const HEAD_ROOM_WANTED: Flags = HEAD_SEND_LOWERED.or(HEAD_SEND_WAITERS);

/// What every handle shares: the queue, and the process-local parts that
/// wake its users.
pub(super) struct Shared {
    pub(super) ring: Ring,
    pub(super) bells: Doorbells,
    pub(super) parking: Parking,
    /// Consumers counted in (`Consumer`, loop sources), for the hand-on.
    pub(super) consumers: AtomicUsize,
    on_drop: Option<DropFn>,
    /// Messages discarded by the last handle (set with `&mut`).
    dropped: u64,
    discarded: bool,
}

/// The error for a push that failed (a full queue is `WouldBlock`).
fn refusal(e: PushError) -> Error {
    match e {
        PushError::Full => Error::WouldBlock,
        PushError::Closed => Error::Closed,
        PushError::NoMemory => Error::from_errno(libc::ENOMEM),
    }
}

/// What one send call queued, for the doorbell work done once at its end.
#[derive(Default)]
pub(super) struct Pushed {
    pub(super) n: usize,
    pub(super) last_pos: u64,
    /// Some push found the receive doorbell down.
    pub(super) saw_recv_down: bool,
    /// Some push found a receiver announced as blocked.
    pub(super) saw_recv_waiters: bool,
    /// The batch stopped for lack of room, with the send fd lowered.
    pub(super) refused: bool,
}

impl Pushed {
    pub(super) fn add(&mut self, c: &Claimed<()>) {
        self.n += 1;
        self.last_pos = c.pos;
        self.saw_recv_down |= !c.word.has(TAIL_RECV_RAISED);
        self.saw_recv_waiters |= c.word.has(TAIL_RECV_WAITERS);
    }
}

/// What one receive call took.
pub(super) struct Popped {
    pub(super) n: usize,
    pub(super) last_pos: u64,
    pub(super) bytes: usize,
    /// The `head` flags seen by the claiming CASes.
    pub(super) flags: Word,
    /// The batch ended on an empty queue with the receive fd lowered: the
    /// doorbell needs no more work.
    pub(super) settled: bool,
    /// The batch ended short at end of stream: the fd stays up, so the
    /// caller, who may wait for an edge after a short batch, is owed a
    /// write (D9).
    pub(super) edge_owed: bool,
}

impl Popped {
    pub(super) fn one<T>(c: &Claimed<T>) -> Popped {
        Popped {
            n: 1,
            last_pos: c.pos,
            bytes: c.len,
            flags: c.word,
            settled: false,
            edge_owed: false,
        }
    }

    pub(super) fn add<T>(&mut self, c: &Claimed<T>) {
        self.n += 1;
        self.last_pos = c.pos;
        self.bytes += c.len;
        self.flags = self.flags.union(c.word);
    }
}

/// Copies a received message to the front of `buf` (which the caller
/// checked is long enough) and returns its length.
#[inline(always)]
pub(super) fn copy_out(m: Payload<'_>, buf: &mut [u8]) -> usize {
    m.copy_to(buf);
    m.len()
}

impl Shared {
    pub(super) fn new(ring: Ring, on_drop: Option<DropFn>) -> Result<Shared> {
        let bells = Doorbells::new(&ring)?;
        Ok(Shared {
            ring,
            bells,
            parking: Parking::new(),
            consumers: AtomicUsize::new(0),
            on_drop,
            dropped: 0,
            discarded: false,
        })
    }

    pub(super) fn check_len(&self, len: usize) -> Result<()> {
        let max = self.ring.limits().max_msg_size;
        if len > max {
            return Err(Error::TooLarge { len, max });
        }
        Ok(())
    }

    pub(super) fn settle_recv(&self, edge: Edge) -> bool {
        self.bells.settle_recv(&self.ring, edge)
    }

    pub(super) fn settle_send(&self, refused: Option<usize>) -> bool {
        self.bells.settle_send(&self.ring, refused, Edge::OnRaise)
    }

    /// Queues `msg` if there is room: bytes under the limit, then a slot.
    /// Inlined, with the claim in registers; without a byte limit it is the
    /// ring's push alone.
    #[inline(always)]
    pub(super) fn try_push(&self, msg: &[u8]) -> Result<Claimed<()>, PushError> {
        if !self.ring.byte_limited() || !self.ring.reserve_bytes(msg.len())? {
            return self.ring.push(msg);
        }
        let pushed = self.ring.push(msg);
        if pushed.is_err() {
            self.release_bytes(msg.len());
        }
        pushed
    }

    /// Gives back bytes (a receive, or a reservation whose push failed) and
    /// acts on the `head` flags seen after it (see `Ring::release_bytes`).
    fn release_bytes(&self, len: usize) {
        let head = self.ring.release_bytes(len);
        if head.has(HEAD_ROOM_WANTED) && self.ring.at_low_water(0) {
            self.room_at_low_water(head);
        }
    }

    /// Takes the head message, waiting for one as `wait` says.
    pub(super) fn pop_waiting<T>(
        &self,
        wait: Wait,
        accept: impl Fn(usize) -> bool,
        take: &mut impl FnMut(Payload<'_>) -> T,
    ) -> Result<Claimed<T>> {
        let mut deadline = None;
        let mut looking = None;
        let mut spin = Spin::new();
        let mut linger = Linger::new(&self.parking.recv_lingers);
        loop {
            match self.ring.pop(&accept, &mut *take) {
                Pop::Took(c) => return Ok(c),
                Pop::TooLong(needed) => return Err(Error::BufferTooSmall { needed }),
                Pop::Empty(tail) => {
                    if tail.has(TAIL_CLOSED) {
                        self.end_of_stream();
                        return Err(Error::Closed);
                    }
                    let deadline = *deadline.get_or_insert_with(|| Deadline::new(wait));
                    if let Some(e) = deadline.expired() {
                        if self.settle_before_refusal(tail) {
                            continue;
                        }
                        return Err(e);
                    }
                    // While nobody polls the receive fd (0028): spin with
                    // company, linger alone (0031); then park.
                    let looking = looking.get_or_insert_with(|| self.parking.look());
                    if self.bells.recv_asleep() {
                        let again = if looking.has_company() {
                            spin.again()
                        } else {
                            linger.again(deadline.instant())
                        };
                        if again {
                            continue;
                        }
                    }
                    self.parking.wait_for_message(&self.ring, deadline);
                }
            }
        }
    }

    /// A receive is about to be refused on the empty queue `tail` showed
    /// (D9). If the fd looked up (another receiver took the last message and has
    /// not lowered it yet, and a send arriving now would find it up and
    /// write nothing), lower it first, so that the next send's raise is
    /// the caller's event (D9). True if a message (or close) came
    /// meanwhile: the caller takes that instead of being refused.
    pub(super) fn settle_before_refusal(&self, tail: Word) -> bool {
        tail.has(TAIL_RECV_RAISED) && self.settle_recv(Edge::OnRaise)
    }

    /// A receive found the end of stream: pass it on. A consumer registered
    /// with EPOLLEXCLUSIVE was woken by one write, alone; this write wakes
    /// the next (D6).
    pub(super) fn end_of_stream(&self) {
        self.settle_recv(Edge::Always);
    }

    /// Doorbells and wake-ups after a send call queued messages. Inlined
    /// (the doorbell work it calls is not), so `Pushed` stays in registers.
    #[inline(always)]
    pub(super) fn after_push(&self, p: &Pushed) {
        if p.n == 0 {
            return;
        }
        if p.saw_recv_down {
            self.settle_recv(Edge::OnRaise);
        }
        let end = p.last_pos + 1;
        let full = self.ring.record_peak_is_full(end);
        let bytes_full = self.ring.byte_limited() && self.ring.is_full(0, self.ring.bytes());
        if (full || bytes_full) && !p.refused {
            self.settle_send(None);
        }
        if p.saw_recv_waiters {
            self.parking.wake_receivers(&self.ring, p.n);
        }
    }

    /// Doorbells and wake-ups after a receive call took messages. Inlined
    /// into each receive: called out of line, its `Popped` goes through
    /// memory on every message.
    #[inline(always)]
    pub(super) fn after_pop(&self, p: &Popped) {
        if p.n == 0 {
            return;
        }
        let next = p.last_pos + 1;
        // Lower the receive doorbell if this emptied the queue. The next
        // slot is the line the next receive reads anyway; only if its
        // message is not there yet is the tail worth a look. Not skipped when
        // the raised bit is clear: a send's settle may be about to set it,
        // judging by a head from before this receive, and only taking
        // `bells` after it puts that right.
        if p.edge_owed {
            self.settle_recv(Edge::Always);
        } else if !p.settled && !self.ring.is_ready(next) {
            let tail = self.ring.tail().load(Ordering::SeqCst);
            if tail.position() == next && !tail.has(TAIL_CLOSED) {
                self.bells.lower_recv_soon(&self.ring);
            }
        }
        if self.ring.byte_limited() {
            self.release_bytes(p.bytes);
        } else if p.flags.has(HEAD_ROOM_WANTED) && self.ring.at_low_water(next) {
            self.room_at_low_water(p.flags);
        }
    }

    /// The queue drained to the low-water mark with the send doorbell down
    /// or senders asleep (`flags`): raise it, wake them.
    fn room_at_low_water(&self, flags: Word) {
        if flags.has(HEAD_SEND_LOWERED) {
            self.settle_send(None);
        }
        if flags.has(HEAD_SEND_WAITERS) {
            self.parking.wake_senders(&self.ring);
        }
    }

    pub(super) fn stats(&self) -> Stats {
        let tail = self.ring.tail().load(Ordering::SeqCst);
        let head = self.ring.head().load(Ordering::SeqCst);
        let sent = tail.position();
        let received = head.position().min(sent);
        // Discarded messages are still between head and tail.
        let pending = sent - received - self.dropped;
        let pending_bytes = if self.discarded {
            0
        } else if self.ring.byte_limited() {
            self.ring.bytes()
        } else {
            (received..sent).map(|p| self.ring.len_at(p) as u64).sum()
        };
        let (recv_doorbell_rings, send_doorbell_rings) = self.bells.rings(&self.ring);
        Stats {
            sent,
            received,
            pending,
            pending_bytes,
            dropped: self.dropped,
            peak_depth: self.ring.peak().max(pending),
            recv_doorbell_rings,
            send_doorbell_rings,
            closed: tail.has(TAIL_CLOSED),
        }
    }

    /// Discards what is still queued (the last handle is gone).
    pub(super) fn discard_pending(&mut self) {
        if std::mem::replace(&mut self.discarded, true) {
            return;
        }
        let on_drop = self.on_drop.as_ref();
        self.dropped = self.ring.drain(|msg| {
            if let Some(f) = on_drop {
                f(msg);
            }
        });
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.discard_pending();
    }
}

/// The in-process channel's calls (see `Chan`).
impl Shared {
    /// One message: `send_batch` without the batch.
    pub(super) fn send(&self, msg: &[u8], wait: Wait) -> Result<()> {
        let pushed = self.push_first(msg, wait)?;
        self.after_push(&pushed);
        Ok(())
    }

    pub(super) fn send_batch<'a>(
        &self,
        mut msgs: impl Iterator<Item = &'a [u8]>,
        wait: Wait,
    ) -> Result<usize> {
        let sh = self;
        let Some(first) = msgs.next() else {
            return Ok(0);
        };
        let mut pushed = sh.push_first(first, wait)?;
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

    /// Queues a call's first message, waiting for room as `wait` says. The
    /// first try is inlined; waiting is out of line, so that the send's hot
    /// path stays the claim and the copy.
    #[inline(always)]
    fn push_first(&self, first: &[u8], wait: Wait) -> Result<Pushed> {
        self.check_len(first.len())?;
        let c = match self.try_push(first) {
            Ok(c) => c,
            Err(PushError::Full) => self.push_waiting(first, wait)?,
            Err(e) => return Err(refusal(e)),
        };
        let mut pushed = Pushed::default();
        pushed.add(&c);
        Ok(pushed)
    }

    /// `push_first` after a try found the queue full.
    #[cold]
    #[inline(never)]
    fn push_waiting(&self, first: &[u8], wait: Wait) -> Result<Claimed<()>> {
        let sh = self;
        let mut deadline = None;
        let mut looking = None;
        let mut linger = Linger::new(&sh.parking.send_lingers);
        loop {
            // No room: lower the send fd now, so a producer polling it
            // sleeps until the queue drains instead of spinning and gets
            // its raise as an event (D9). If room came back meanwhile, the
            // fd may be up: try again instead.
            if sh.settle_send(Some(first.len())) {
                let deadline = *deadline.get_or_insert_with(|| Deadline::new(wait));
                if let Some(e) = deadline.expired() {
                    return Err(e);
                }
                // A lone sender lingers until the queue drains to the
                // low-water mark, where a parked one would be woken; then
                // it refills in a run (0031).
                let looking = looking.get_or_insert_with(|| sh.parking.look_for_room());
                if looking.has_company() || !sh.linger_for_room(&mut linger, deadline) {
                    sh.parking.wait_for_room(&sh.ring, first.len(), deadline);
                }
            }
            match sh.try_push(first) {
                Err(PushError::Full) => {}
                other => return other.map_err(refusal),
            }
        }
    }

    /// Waits, looking now and then, until the queue is at its low-water
    /// mark or closed (true), or the linger is spent (false).
    fn linger_for_room(&self, linger: &mut Linger, deadline: Deadline) -> bool {
        while linger.again(deadline.instant()) {
            if self.ring.at_low_water(0)
                || self.ring.tail().load(Ordering::Relaxed).has(TAIL_CLOSED)
            {
                return true;
            }
        }
        false
    }

    pub(super) fn recv_into(&self, buf: &mut [u8], wait: Wait) -> Result<usize> {
        let sh = self;
        let room = buf.len();
        let c = sh.pop_waiting(wait, |len| len <= room, &mut |m: Payload<'_>| {
            copy_out(m, buf)
        })?;
        sh.after_pop(&Popped::one(&c));
        Ok(c.value)
    }

    pub(super) fn recv(&self, wait: Wait) -> Result<Vec<u8>> {
        let sh = self;
        let c = sh.pop_waiting(wait, |_| true, &mut |m: Payload<'_>| m.into_vec())?;
        sh.after_pop(&Popped::one(&c));
        Ok(c.value)
    }

    pub(super) fn recv_batch(
        &self,
        buf: &mut [u8],
        lens: &mut [usize],
        wait: Wait,
    ) -> Result<usize> {
        if lens.is_empty() {
            return Ok(0);
        }
        let sh = self;
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

    pub(super) fn close(&self) -> bool {
        let sh = self;
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
}
