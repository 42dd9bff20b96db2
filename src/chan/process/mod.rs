// SPDX-License-Identifier: MIT OR Apache-2.0
//! A channel between two processes: its ring in a sealed memfd that both
//! map, its doorbells the same two eventfds, handed from the process that
//! made it to one other process (over a Unix socket, or inherited).
//!
//! One process sends and the other receives, each with any number of
//! threads; that is what keeps a death harmless (see `ring.rs`). The
//! delivery contract is the in-process one (D1-D9), with what a death
//! does added (`docs/design.md`, "Between processes").
//!
//! - `layout.rs`: the shared memory, line by line, and its check on import;
//! - `ring.rs`: the single-producer single-consumer ring over it;
//! - `bells.rs`: the doorbells, with a lock nobody waits for;
//! - `peer.rs`: the link to the other process, its death, the fds users
//!   poll, and waiting;
//! - `handover.rs`: giving the channel to another process, and taking it.

mod bells;
#[cfg(not(loom))]
mod handover;
mod layout;
#[cfg(not(loom))]
mod peer;
mod ring;

use std::sync::Arc;

#[cfg(not(loom))]
pub use self::handover::SharedFds;
#[cfg(not(loom))]
pub(in crate::chan) use self::handover::{import, recv_from};
pub use self::layout::SHARED_MSG_MAX;
#[cfg(not(loom))]
pub(in crate::chan) use self::peer::Direction;

use self::bells::{Bells, ALL, RECV, RECV_EDGE, SEND, SEND_EDGE};
use self::layout::Layout;
#[cfg(not(loom))]
use self::peer::Peer;
use self::ring::{Memory, Peeked, Pushed, ShmRing, Turn, POSITION_MAX};
use super::doorbell::{HEAD_SEND_LOWERED, TAIL_RECV_RAISED};
use super::options::{Limits, Stats, Wait};
use super::ring::{Word, TAIL_CLOSED};
use super::shim::{AtomicBool, AtomicUsize, EventFd, Mutex, Ordering};
use crate::error::{Error, Result};

/// Which end of a process-shared channel a process holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// This process sends; the other receives.
    Send,
    /// This process receives; the other sends.
    Receive,
}

impl Side {
    /// The other process's side.
    pub fn other(self) -> Side {
        match self {
            Side::Send => Side::Receive,
            Side::Receive => Side::Send,
        }
    }
}

/// One process's end of a process-shared channel.
pub(in crate::chan) struct Channel {
    ring: ShmRing,
    bells: Bells,
    side: Side,
    /// This side's positions, taken in turn by this process's threads.
    turn: Mutex<Turn>,
    #[cfg(not(loom))]
    peer: Peer,
    /// Under loom, the stand-in for the link's hang-up.
    #[cfg(loom)]
    peer_gone: AtomicBool,
    #[cfg(loom)]
    gone_seen: AtomicBool,
    /// The other process broke the protocol: closed on this side.
    broken: AtomicBool,
    /// Consumers counted in (`Consumer`, loop sources), for the hand-on.
    pub(in crate::chan) consumers: AtomicUsize,
    /// The memfd, kept to hand the channel on.
    #[cfg(not(loom))]
    mem_fd: std::os::fd::OwnedFd,
}

impl Channel {
    /// This process's side.
    pub(in crate::chan) fn side(&self) -> Side {
        self.side
    }

    /// The fd users poll for `dir`.
    #[cfg(not(loom))]
    pub(in crate::chan) fn poll_fd(&self, dir: Direction) -> std::os::fd::BorrowedFd<'_> {
        self.peer.poll_fd(dir)
    }

    fn limits(&self) -> &Layout {
        self.ring.layout()
    }

    pub(in crate::chan) fn capacity(&self) -> usize {
        self.limits().capacity
    }

    pub(in crate::chan) fn max_msg_size(&self) -> usize {
        self.limits().max_msg
    }

    fn must_be(&self, side: Side) -> Result<()> {
        if self.side == side {
            return Ok(());
        }
        Err(Error::WrongSide(match side {
            Side::Send => "this process receives on this channel; the other sends",
            Side::Receive => "this process sends on this channel; the other receives",
        }))
    }

    /// A call found the other process's words broken: the channel is
    /// closed on this side, and every waiter here wakes to see it.
    fn broke(&self, e: Error) -> Error {
        if !self.broken.swap(true, Ordering::SeqCst) {
            self.bells.recv.pulse();
            self.bells.send.pulse();
        }
        e
    }

    fn check<T>(&self, r: Result<T>) -> Result<T> {
        r.map_err(|e| match e {
            Error::Corrupt(_) => self.broke(e),
            e => e,
        })
    }

    /// Whether the other process is gone (observed now, recovering once if
    /// it just went).
    fn peer_gone(&self) -> bool {
        #[cfg(not(loom))]
        {
            if self.peer.newly_gone() {
                self.bells.recover(&self.ring);
            }
            self.peer.is_gone()
        }
        #[cfg(loom)]
        {
            if self.peer_gone.load(Ordering::SeqCst) {
                if !self.gone_seen.swap(true, Ordering::SeqCst) {
                    self.bells.recover(&self.ring);
                }
                return true;
            }
            false
        }
    }

    /// Queues copies of a prefix of `msgs` (see `Chan::send_batch`).
    pub(in crate::chan) fn send_batch<'a>(
        &self,
        mut msgs: impl Iterator<Item = &'a [u8]>,
        wait: Wait,
    ) -> Result<usize> {
        self.must_be(Side::Send)?;
        let Some(first) = msgs.next() else {
            return Ok(0);
        };
        let max = self.max_msg_size();
        if first.len() > max {
            return Err(Error::TooLarge {
                len: first.len(),
                max,
            });
        }
        let deadline = Deadlines::new(wait);
        let mut flags = Word::NONE;
        let mut n;
        let mut turn = loop {
            if self.broken.load(Ordering::SeqCst) {
                return Err(Error::Closed);
            }
            let mut turn = self.turn.lock();
            match self.check(self.ring.push(&mut turn, first))? {
                Pushed::Sent(word) => {
                    flags = flags.union(word);
                    n = 1;
                    break turn;
                }
                Pushed::Closed => return Err(Error::Closed),
                Pushed::Full => {
                    drop(turn);
                    if self.peer_gone() {
                        return Err(Error::Closed);
                    }
                    // Lowered (or written) after this refusal (D9).
                    self.bells.request_for_refusal(&self.ring, SEND, SEND_EDGE);
                    if self.has_room()? {
                        continue;
                    }
                    self.wait(Direction::Send, &deadline)?;
                }
            }
        };
        for msg in msgs {
            if msg.len() > max {
                break;
            }
            match self.check(self.ring.push(&mut turn, msg))? {
                Pushed::Sent(word) => {
                    flags = flags.union(word);
                    n += 1;
                }
                Pushed::Full | Pushed::Closed => break,
            }
        }
        self.ring.record_peak(&turn);
        let full = turn.own - turn.seen >= self.capacity() as u64;
        drop(turn);
        if !flags.has(TAIL_RECV_RAISED) {
            self.bells.request(&self.ring, RECV);
        }
        if full {
            self.bells.request(&self.ring, SEND);
        }
        Ok(n)
    }

    /// Whether the ring has room now, as this sender sees it (the
    /// receiver's word read fresh and checked: a broken one is an error,
    /// never a reason to try again).
    fn has_room(&self) -> Result<bool> {
        let mut turn = self.turn.lock();
        self.check(self.ring.has_room(&mut turn))
    }

    /// Whether a message is published past this receiver's position now
    /// (the sender's word read fresh and checked, as `has_room`).
    fn has_message(&self) -> Result<bool> {
        let mut turn = self.turn.lock();
        Ok(matches!(
            self.check(self.ring.peek(&mut turn))?,
            Peeked::Ready(_)
        ))
    }

    /// Takes up to `max` messages (at least 1), waiting only for the first
    /// as `wait` says: `take(len, copy)` takes a message of `len` bytes by
    /// calling `copy` once with a buffer at least that long and returning
    /// true, or leaves it queued by returning false (then the call fails
    /// with `BufferTooSmall` if it is the first). See `Chan::recv_batch`.
    pub(in crate::chan) fn recv_with(
        &self,
        wait: Wait,
        max: usize,
        mut take: impl FnMut(usize, &dyn Fn(&mut [u8])) -> bool,
    ) -> Result<RecvEnd> {
        self.must_be(Side::Receive)?;
        let deadline = Deadlines::new(wait);
        let (mut turn, mut len) = loop {
            if self.broken.load(Ordering::SeqCst) {
                return Err(Error::Closed);
            }
            let mut turn = self.turn.lock();
            match self.check(self.ring.peek(&mut turn))? {
                Peeked::Ready(len) => break (turn, len),
                Peeked::Empty(tail) => {
                    drop(turn);
                    if tail.has(TAIL_CLOSED) || (self.peer_gone() && !self.has_message()?) {
                        // End of stream: written for the next waiter (D6).
                        self.bells.request(&self.ring, RECV | RECV_EDGE);
                        return Err(Error::Closed);
                    }
                    // Lowered (or written) after this refusal (D9).
                    self.bells.request_for_refusal(&self.ring, RECV, RECV_EDGE);
                    if !self.has_message()? {
                        self.wait(Direction::Recv, &deadline)?;
                    }
                }
            }
        };
        let mut n = 0;
        let mut flags = Word::NONE;
        let end = loop {
            let copy = |out: &mut [u8]| self.ring.copy_out(&turn, len, out);
            if !take(len, &copy) {
                if n == 0 {
                    return Err(Error::BufferTooSmall { needed: len });
                }
                break RecvEnd::More(n);
            }
            flags = flags.union(self.check(self.ring.release(&mut turn))?);
            n += 1;
            if n == max {
                break RecvEnd::More(n);
            }
            match self.check(self.ring.peek(&mut turn))? {
                Peeked::Ready(next) => len = next,
                Peeked::Empty(tail) if tail.has(TAIL_CLOSED) => break RecvEnd::Closed(n),
                Peeked::Empty(_) => break RecvEnd::Dry(n),
            }
        };
        let drained = !matches!(end, RecvEnd::More(_)) || self.ring.drained(&turn);
        drop(turn);
        match end {
            RecvEnd::More(_) if drained => self.bells.request(&self.ring, RECV),
            RecvEnd::More(_) => {}
            // Cut short by an empty queue: the caller may wait for an edge
            // next, as after a refusal (D9).
            RecvEnd::Dry(_) => self.bells.request_for_refusal(&self.ring, RECV, RECV_EDGE),
            // Cut short at end of stream: the fd stays up; written (D9).
            RecvEnd::Closed(_) => self.bells.request(&self.ring, RECV | RECV_EDGE),
        }
        if flags.has(HEAD_SEND_LOWERED) && self.ring.at_low_water() {
            self.bells.request(&self.ring, SEND);
        }
        Ok(end)
    }

    /// Closes the channel for both processes (D6). False if it was closed.
    pub(in crate::chan) fn close(&self) -> bool {
        if self.ring.tail().set(TAIL_CLOSED).has(TAIL_CLOSED) {
            return false;
        }
        self.bells.request(&self.ring, ALL);
        true
    }

    /// Whether the channel is closed, broken on this side, or (for a
    /// receiver) its sender is gone.
    pub(in crate::chan) fn is_closed(&self) -> bool {
        self.ring.tail().load(Ordering::SeqCst).has(TAIL_CLOSED)
            || self.broken.load(Ordering::SeqCst)
            || (self.side == Side::Receive && self.peer_gone())
    }

    /// Writes the receive fd again if messages are pending: one more
    /// waiter wakes for them (a consumer leaving hands its wake-up on, D4).
    pub(in crate::chan) fn pass_on_pending(&self) {
        let tail = self.ring.tail().load(Ordering::SeqCst).position();
        let head = self.ring.head().load(Ordering::SeqCst).position();
        if tail > head {
            self.bells.request(&self.ring, RECV | RECV_EDGE);
        }
    }

    pub(in crate::chan) fn stats(&self) -> Stats {
        let tail = self.ring.tail().load(Ordering::SeqCst);
        let head = self.ring.head().load(Ordering::SeqCst);
        let sent = tail.position();
        let received = head.position().min(sent);
        let pending = (sent - received).min(self.capacity() as u64);
        let (recv_doorbell_rings, send_doorbell_rings) = self.bells.rings();
        Stats {
            sent,
            received,
            pending,
            pending_bytes: self.ring.pending_bytes(received, sent),
            dropped: 0,
            peak_depth: self.ring.peak().max(pending),
            recv_doorbell_rings,
            send_doorbell_rings,
            closed: self.is_closed(),
        }
    }

    /// Waits for the doorbell of `dir` to be written, or the other process
    /// to go, or the deadline; `WouldBlock`/`TimedOut` once it has passed.
    /// One call waits on one epoll set, made at its first wait.
    #[cfg(not(loom))]
    fn wait(&self, dir: Direction, deadline: &Deadlines) -> Result<()> {
        let until = deadline.check()?;
        let mut waiter = deadline.waiter.borrow_mut();
        if waiter.is_none() {
            *waiter = Some(self.peer.waiter(dir)?);
        }
        Peer::wait(waiter.as_ref().expect("made above"), until)
    }

    /// Under loom the models never wait.
    #[cfg(loom)]
    fn wait(&self, _dir: Direction, deadline: &Deadlines) -> Result<()> {
        deadline.check()?;
        unreachable!("process-shared loom models use Wait::Never")
    }
}

#[cfg(loom)]
#[derive(Clone, Copy)]
enum Direction {
    Recv,
    Send,
}

/// How a receive ended, with the count taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::chan) enum RecvEnd {
    /// It took its fill, or `take` stopped it: messages may remain.
    More(usize),
    /// The queue ran empty.
    Dry(usize),
    /// The queue ran empty and the channel is closed: end of stream.
    Closed(usize),
}

impl RecvEnd {
    pub(in crate::chan) fn count(self) -> usize {
        match self {
            RecvEnd::More(n) | RecvEnd::Dry(n) | RecvEnd::Closed(n) => n,
        }
    }
}

/// A call's waiting: its limit, worked out on first use, and the epoll
/// set it waits on, made on first use.
struct Deadlines {
    wait: Wait,
    at: std::cell::Cell<Option<Option<std::time::Instant>>>,
    #[cfg(not(loom))]
    waiter: std::cell::RefCell<Option<crate::sys::Epoll>>,
}

impl Deadlines {
    fn new(wait: Wait) -> Deadlines {
        Deadlines {
            wait,
            at: std::cell::Cell::new(None),
            #[cfg(not(loom))]
            waiter: std::cell::RefCell::new(None),
        }
    }

    /// When the wait ends (`None`: never), or the error once it has.
    fn check(&self) -> Result<Option<std::time::Instant>> {
        let now = std::time::Instant::now();
        let at = self.at.get().unwrap_or(match self.wait {
            Wait::Never => Some(now),
            Wait::Forever => None,
            Wait::For(d) => now.checked_add(d),
        });
        self.at.set(Some(at));
        match (self.wait, at) {
            (Wait::Never, _) => Err(Error::WouldBlock),
            (_, Some(t)) if now >= t => Err(Error::TimedOut),
            (_, at) => Ok(at),
        }
    }
}

/// Makes a channel's end from its parts: `mem` already mapped (and, on
/// import, its layout checked), the doorbells, and this process's side.
fn assemble(
    mem: Arc<Memory>,
    layout: Layout,
    recv: Arc<EventFd>,
    send: Arc<EventFd>,
    side: Side,
    #[cfg(not(loom))] mem_fd: std::os::fd::OwnedFd,
) -> Result<Channel> {
    let ring = ShmRing::new(mem, layout);
    let tail = ring.tail().load(Ordering::SeqCst).position();
    let head = ring.head().load(Ordering::SeqCst).position();
    if head > tail || tail - head > layout.capacity as u64 || tail > POSITION_MAX {
        return Err(Error::Corrupt(
            "the positions are further apart than the ring holds, or out of range",
        ));
    }
    let turn = match side {
        Side::Send => Turn {
            own: tail,
            seen: head,
        },
        Side::Receive => Turn {
            own: head,
            seen: head,
        },
    };
    Ok(Channel {
        #[cfg(not(loom))]
        peer: Peer::new(&recv, &send)?,
        bells: Bells::new(recv, send, bells_mark(side)),
        ring,
        side,
        turn: Mutex::new(turn),
        #[cfg(loom)]
        peer_gone: AtomicBool::new(false),
        #[cfg(loom)]
        gone_seen: AtomicBool::new(false),
        broken: AtomicBool::new(false),
        consumers: AtomicUsize::new(0),
        #[cfg(not(loom))]
        mem_fd,
    })
}

/// A process's mark in the doorbell lock word (0 is free): one process
/// on each side.
fn bells_mark(side: Side) -> u64 {
    match side {
        Side::Send => 1,
        Side::Receive => 2,
    }
}

/// The send doorbell starts raised (an empty channel has room).
fn start_bells(send: &EventFd) {
    send.raise();
}

/// A doorbell eventfd to share with the other process (guarded: it may
/// change the file's flags and fill the counter).
fn new_bell() -> std::io::Result<EventFd> {
    #[cfg(not(loom))]
    return EventFd::new_shared();
    #[cfg(loom)]
    return EventFd::new();
}

/// A new channel's end for `side`, with `limits`.
pub(in crate::chan) fn create(limits: &Limits, side: Side) -> Result<Channel> {
    let layout = Layout::new(limits)?;
    let slot_total = layout
        .slot_total_lines()
        .ok_or(Error::Invalid("capacity times max_msg_size is too large"))?;
    let recv = Arc::new(new_bell()?);
    let send = Arc::new(new_bell()?);
    start_bells(&send);
    #[cfg(not(loom))]
    {
        let (mem_fd, lines) = crate::sys::ZeroedLines::new_shared(slot_total)?;
        let mem = Memory::new(lines);
        mem.write_layout(layout.words());
        assemble(Arc::new(mem), layout, recv, send, side, mem_fd)
    }
    #[cfg(loom)]
    assemble(
        Arc::new(Memory::zeroed(slot_total)),
        layout,
        recv,
        send,
        side,
    )
}

/// Under loom: the other process's end of the same channel, sharing the
/// memory and the doorbells, and a stand-in for its death.
#[cfg(loom)]
impl Channel {
    pub(in crate::chan) fn model_peer(&self) -> Result<Channel> {
        assemble(
            self.ring.memory().clone(),
            *self.ring.layout(),
            self.bells.recv.clone(),
            self.bells.send.clone(),
            self.side.other(),
        )
    }

    /// The other process died (what its link hanging up says), and this
    /// one sees it now (as its next refused call would).
    pub(in crate::chan) fn model_peer_died(&self) {
        self.peer_gone.store(true, Ordering::SeqCst);
        self.peer_gone();
    }

    /// What the doorbells are (the model's "readable").
    pub(in crate::chan) fn model_doorbells(&self) -> (bool, bool) {
        (self.bells.recv.is_raised(), self.bells.send.is_raised())
    }

    pub(in crate::chan) fn model_doorbell_writes(&self) -> (u64, u64) {
        (self.bells.recv.writes(), self.bells.send.writes())
    }

    /// A process that dies in the middle of a settle: it flipped the
    /// receive doorbell's flag (to raised, or to lowered) and never made
    /// the syscall.
    pub(in crate::chan) fn model_flip_recv_flag(&self, raised: bool) {
        if raised {
            self.ring.tail().set(TAIL_RECV_RAISED);
        } else {
            self.ring.tail().clear(TAIL_RECV_RAISED);
        }
    }

    /// A process that dies holding the doorbell lock.
    pub(in crate::chan) fn model_die_holding_the_lock(&self) {
        let _ = self.ring.bells_lock().compare_exchange(
            0,
            bells_mark(self.side),
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
    }
}
