// SPDX-License-Identifier: MIT OR Apache-2.0
//! The channel: a bounded multi-producer multi-consumer queue of byte
//! messages with two doorbell fds, the send one created when first asked
//! for.
//!
//! The queue (what) is a lock-free slot ring (`ring.rs`); the doorbells
//! (whether) are eventfds changed only on transitions, which is the whole
//! trick of the seed article done once, properly:
//!
//! - the receive fd is raised when the queue leaves empty (or the channel
//!   closes) and lowered by the receive that empties it (D4);
//! - the send fd is lowered when a send fills the queue (or is refused for
//!   lack of room) and raised by the receive that drains it to the
//!   low-water mark (or by close) (D5).
//!
//! Whether each doorbell is up is mirrored in a flag bit of the ring word
//! its wakers move anyway (recv: `tail`, moved by every send; send: `head`,
//! moved by every receive), so the CAS that queues or takes a message also
//! tells the caller whether a doorbell needs changing: a busy channel makes
//! no syscall and takes no lock. A doorbell changes only in `sync_recv` /
//! `sync_send`, under the `bells` mutex, and flips its bit with a CAS on the
//! word whose position it judged by, so a message that slips in between
//! makes the CAS fail and the decision is taken again.
//!
//! Threads that block inside the library sleep on condvars, announced by a
//! flag bit in the same words; blocked senders are woken at the low-water
//! mark, like the send fd, so a full channel costs one wake-up per
//! `capacity - low_water` messages instead of one per message.

mod ring;

use std::fmt;
#[cfg(not(loom))]
use std::os::fd::{AsFd, BorrowedFd};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use self::ring::{
    no_memory, position, Claimed, Payload, Pop, PushError, Ring, HEAD_SEND_LOWERED,
    HEAD_SEND_WAITERS, INLINE_MAX, TAIL_CLOSED, TAIL_RECV_RAISED, TAIL_RECV_WAITERS,
};
use crate::error::{Error, Result};
use crate::sync::{
    fence, AtomicBool, AtomicU64, AtomicUsize, Condvar, EventFd, Mutex, MutexGuard, Ordering,
};

/// The largest capacity a channel accepts. A channel's slots (64 bytes
/// each) are allocated zeroed when it is created, and its first message
/// over 48 bytes allocates a buffer slot (32 bytes each, plus the reused
/// buffer of each slot that has carried such a message), so a capacity is
/// an address-space commitment of about 1.5 GiB at this maximum; the slots'
/// pages become resident only as messages first reach them.
pub const MAX_CAPACITY: usize = 1 << 24;

/// Maximum message size when the options do not set one.
pub const DEFAULT_MAX_MSG_SIZE: usize = 1 << 20;

/// Called once for each message still queued when the last handle goes away.
pub type DropFn = Box<dyn Fn(&[u8]) + Send + Sync>;

/// How long a send or receive may wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Never wait: `Error::WouldBlock` instead.
    Never,
    /// Wait as long as it takes.
    Forever,
    /// Wait at most this long: `Error::TimedOut` after.
    For(Duration),
}

/// The limits and hooks a channel is created with.
pub struct Options {
    capacity: usize,
    max_bytes: Option<usize>,
    max_msg_size: Option<usize>,
    low_water: Option<usize>,
    on_drop: Option<DropFn>,
}

impl Options {
    /// A channel holding at most `capacity` messages; no byte limit, messages
    /// up to `DEFAULT_MAX_MSG_SIZE`, low-water mark `capacity / 2`.
    pub fn new(capacity: usize) -> Options {
        Options {
            capacity,
            max_bytes: None,
            max_msg_size: None,
            low_water: None,
            on_drop: None,
        }
    }

    /// Also limit the bytes queued (the sum of message lengths). The send
    /// fd's byte low-water mark is half of it.
    pub fn max_bytes(mut self, max_bytes: usize) -> Options {
        self.max_bytes = Some(max_bytes);
        self
    }

    /// The longest message a send accepts. Defaults to
    /// `min(DEFAULT_MAX_MSG_SIZE, max_bytes)`.
    pub fn max_msg_size(mut self, max_msg_size: usize) -> Options {
        self.max_msg_size = Some(max_msg_size);
        self
    }

    /// The queue depth (in messages) at or below which the send fd is raised
    /// again after the queue was full. Defaults to `capacity / 2`.
    pub fn low_water(mut self, low_water: usize) -> Options {
        self.low_water = Some(low_water);
        self
    }

    /// Called with each message still queued when the last handle is
    /// dropped, so messages that carry ownership (pointers, fds) can release
    /// it.
    pub fn on_drop(mut self, f: impl Fn(&[u8]) + Send + Sync + 'static) -> Options {
        self.on_drop = Some(Box::new(f));
        self
    }
}

impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("capacity", &self.capacity)
            .field("max_bytes", &self.max_bytes)
            .field("max_msg_size", &self.max_msg_size)
            .field("low_water", &self.low_water)
            .field("on_drop", &self.on_drop.is_some())
            .finish()
    }
}

/// Validated limits.
#[derive(Clone, Copy, Debug)]
struct Limits {
    capacity: usize,
    max_bytes: Option<usize>,
    max_msg_size: usize,
    low_water: usize,
    low_water_bytes: usize,
}

impl Limits {
    fn from_options(o: &Options) -> Result<Limits> {
        if o.capacity == 0 {
            return Err(Error::Invalid("capacity must be at least 1"));
        }
        if o.capacity > MAX_CAPACITY {
            return Err(Error::Invalid(
                "capacity above MAX_CAPACITY (16M): slots are allocated up front",
            ));
        }
        if o.max_bytes == Some(0) {
            return Err(Error::Invalid("max_bytes must be at least 1"));
        }
        let max_msg_size = match (o.max_msg_size, o.max_bytes) {
            (Some(m), Some(b)) if m > b => {
                return Err(Error::Invalid(
                    "max_msg_size exceeds max_bytes: such a message could never be sent",
                ))
            }
            (Some(m), _) => m,
            (None, Some(b)) => b.min(DEFAULT_MAX_MSG_SIZE),
            (None, None) => DEFAULT_MAX_MSG_SIZE,
        };
        let low_water = o.low_water.unwrap_or(o.capacity / 2);
        if low_water >= o.capacity {
            return Err(Error::Invalid("low_water must be below capacity"));
        }
        Ok(Limits {
            capacity: o.capacity,
            max_bytes: o.max_bytes,
            max_msg_size,
            low_water,
            low_water_bytes: o.max_bytes.map_or(usize::MAX, |b| b / 2),
        })
    }
}

/// A snapshot of a channel's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Messages accepted by sends.
    pub sent: u64,
    /// Messages returned by receives.
    pub received: u64,
    /// Messages queued now.
    pub pending: u64,
    /// Bytes queued now.
    pub pending_bytes: u64,
    /// Messages discarded because the last handle was freed while they were
    /// queued (see `Chan::into_final_stats`).
    pub dropped: u64,
    /// The most messages ever queued at once.
    pub peak_depth: u64,
    /// Writes to the receive eventfd: one per empty-to-non-empty transition,
    /// one at close, one per receive that reports end of stream (or a batch
    /// that ends short at it), and one when a loop source that leaves
    /// messages behind passes the wake-up on to another loop (D4, D6, D9).
    /// Compare with `sent` to see the wakeup economy.
    pub recv_doorbell_rings: u64,
    /// Writes to the send eventfd: one at creation, one per drain to the
    /// low-water mark after the queue was full (or refused a send),
    /// and one at close (D9). Counted whether or not the fd exists yet (it
    /// is created when first asked for, at the level the count implies).
    pub send_doorbell_rings: u64,
    /// Whether the channel is closed.
    pub closed: bool,
}

/// Doorbell counters, kept under the `bells` mutex that serialises every
/// change of a doorbell.
struct Bells {
    recv_rings: u64,
    send_rings: u64,
}

/// What a doorbell sync owes edge-triggered waiters (EPOLLET, Go's
/// netpoller, tokio), who wake only on a write, not on a level.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Edge {
    /// Write only on a transition to raised. Enough for a refused call
    /// once its fd is down: the raise that follows is its event.
    IfChanged,
    /// The fd stays up and a waiter may have consumed its last event (close;
    /// a batch cut short at end of stream): write even if it is up already.
    Owed,
}

/// Threads asleep in the library, counted under the `waiting` mutex.
struct Sleepers {
    receivers: usize,
    senders: usize,
}

struct Shared {
    ring: Ring,
    limits: Limits,
    /// Bytes queued; kept only with a byte limit (the counter would
    /// otherwise be one more contended write per message).
    bytes: AtomicUsize,
    peak_depth: AtomicU64,
    bells: Mutex<Bells>,
    /// A receive that emptied the queue found `bells` busy and left the
    /// lowering of the receive fd to its holder (`lower_recv_soon`).
    recv_recheck: AtomicBool,
    /// Loop sources taking from this channel (`LoopConsumer`).
    loop_consumers: AtomicUsize,
    recv_bell: EventFd,
    /// Created by the first `send_fd`, under `bells`; until then every
    /// change of the send doorbell only flips `HEAD_SEND_LOWERED`, which
    /// is what its level is created from. A channel polled only for input
    /// (most are) costs one fd.
    send_bell: OnceLock<EventFd>,
    waiting: Mutex<Sleepers>,
    /// Signalled when a message arrives or the channel closes.
    readable: Condvar,
    /// Signalled at the low-water mark or when the channel closes.
    writable: Condvar,
    on_drop: Option<DropFn>,
    /// Messages discarded by the last handle (set with `&mut`).
    dropped: u64,
    discarded: bool,
}

/// What one send call queued, for the doorbell work done once at its end.
#[derive(Default)]
struct Pushed {
    n: usize,
    last_pos: u64,
    /// Some push found the receive doorbell down.
    saw_recv_down: bool,
    /// Some push found a receiver announced as blocked.
    saw_recv_waiters: bool,
    /// The batch stopped for lack of room, with the send fd lowered.
    refused: bool,
}

impl Pushed {
    fn add(&mut self, c: &Claimed<()>) {
        self.n += 1;
        self.last_pos = c.pos;
        self.saw_recv_down |= c.word & TAIL_RECV_RAISED == 0;
        self.saw_recv_waiters |= c.word & TAIL_RECV_WAITERS != 0;
    }
}

/// What one receive call took.
#[derive(Default)]
struct Popped {
    n: usize,
    last_pos: u64,
    bytes: usize,
    /// The `head` flags seen by the claiming CASes.
    flags: u64,
    /// The batch ended on an empty queue with the receive fd lowered: the
    /// doorbell needs no more work.
    settled: bool,
    /// The batch ended short at end of stream: the fd stays up, so the
    /// caller, who may wait for an edge after a short batch, is owed a
    /// write (D9).
    edge_owed: bool,
}

impl Popped {
    fn add<T>(&mut self, c: &Claimed<T>) {
        self.n += 1;
        self.last_pos = c.pos;
        self.bytes += c.len;
        self.flags |= c.word;
    }
}

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
            .field("limits", &self.shared.limits)
            .field("recv_fd", &self.recv_raw_fd())
            .field(
                "send_fd",
                &self.shared.send_bell.get().map(|b| b.as_raw_fd()),
            )
            .finish()
    }
}

/// When a wait gives up.
#[derive(Clone, Copy)]
enum Deadline {
    Now,
    Never,
    At(Instant),
}

impl Deadline {
    fn new(wait: Wait) -> Deadline {
        match wait {
            Wait::Never => Deadline::Now,
            Wait::Forever => Deadline::Never,
            // A timeout too large to represent is as good as none.
            Wait::For(d) => Instant::now()
                .checked_add(d)
                .map_or(Deadline::Never, Deadline::At),
        }
    }

    /// The error to return when the deadline has passed, if it has.
    fn expired(self) -> Option<Error> {
        match self {
            Deadline::Now => Some(Error::WouldBlock),
            Deadline::Never => None,
            Deadline::At(t) => (Instant::now() >= t).then_some(Error::TimedOut),
        }
    }
}

impl Chan {
    /// Creates a channel and its receive eventfd (the send one is created
    /// by the first [`send_fd`](Chan::send_fd)). The ring's slots are
    /// allocated here, zeroed: address space proportional to `capacity`,
    /// resident only as messages reach them.
    pub fn new(options: Options) -> Result<Chan> {
        let limits = Limits::from_options(&options)?;
        let ring = Ring::new(limits.capacity)?;
        let recv_bell = EventFd::new()?;
        Ok(Chan {
            shared: Arc::new(Shared {
                ring,
                limits,
                bytes: AtomicUsize::new(0),
                peak_depth: AtomicU64::new(0),
                // An empty channel has room: the send doorbell starts
                // raised (`HEAD_SEND_LOWERED` clear), a ring counted now.
                bells: Mutex::new(Bells {
                    recv_rings: 0,
                    send_rings: 1,
                }),
                recv_recheck: AtomicBool::new(false),
                loop_consumers: AtomicUsize::new(0),
                recv_bell,
                send_bell: OnceLock::new(),
                waiting: Mutex::new(Sleepers {
                    receivers: 0,
                    senders: 0,
                }),
                readable: Condvar::new(),
                writable: Condvar::new(),
                on_drop: options.on_drop,
                dropped: 0,
                discarded: false,
            }),
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
        self.shared.recv_bell.as_fd()
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
        Ok(self.shared.send_bell()?.as_fd())
    }

    /// `recv_fd` as a number, for the loop and the C ABI (and the loom
    /// model, whose doorbells have no fd).
    pub(crate) fn recv_raw_fd(&self) -> RawFd {
        self.shared.recv_bell.as_raw_fd()
    }

    /// `send_fd` as a number, created if it is not yet.
    #[cfg(feature = "capi")]
    pub(crate) fn send_raw_fd(&self) -> Result<RawFd> {
        Ok(self.shared.send_bell()?.as_raw_fd())
    }

    /// The longest message a send accepts.
    pub fn max_msg_size(&self) -> usize {
        self.shared.limits.max_msg_size
    }

    /// The most messages the channel holds.
    pub fn capacity(&self) -> usize {
        self.shared.limits.capacity
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
                Err(PushError::NoMemory) => return Err(no_memory()),
                Err(PushError::Full) => {
                    // No room: lower the send fd now, so a producer polling
                    // it sleeps until the queue drains instead of spinning
                    // and gets its raise as an event (D9). If room came
                    // back meanwhile, the fd may be up: try again instead.
                    if !sh.sync_send(Some(first.len())) {
                        continue;
                    }
                    let deadline = *deadline.get_or_insert_with(|| Deadline::new(wait));
                    if let Some(e) = deadline.expired() {
                        return Err(e);
                    }
                    sh.wait_for_room(first.len(), deadline);
                }
            }
        }
        'batch: for msg in msgs {
            if msg.len() > sh.limits.max_msg_size {
                break;
            }
            loop {
                match sh.try_push(msg) {
                    Ok(c) => {
                        pushed.add(&c);
                        break;
                    }
                    // Cut short for lack of room: as for the first message.
                    Err(PushError::Full) if !sh.sync_send(Some(msg.len())) => {}
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
        let mut popped = Popped::default();
        popped.add(&c);
        sh.after_pop(&popped);
        Ok(c.value)
    }

    /// Receives the head message as an owned buffer. A message over 48
    /// bytes is handed over without a copy (its slot allocates a new buffer
    /// on the next long send through it); a shorter one, stored in the slot
    /// itself, is copied into a new `Vec`. `recv_into` never allocates.
    pub fn recv(&self, wait: Wait) -> Result<Vec<u8>> {
        let sh = &*self.shared;
        let c = sh.pop_waiting(wait, |_| true, &mut |m: Payload<'_>| m.into_vec())?;
        let mut popped = Popped::default();
        popped.add(&c);
        sh.after_pop(&popped);
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
        let mut popped = Popped::default();
        popped.add(&first);
        while popped.n < lens.len() {
            let rest = &mut buf[off..];
            let room = rest.len();
            let copy = &mut |m: Payload<'_>| copy_out(m, rest);
            let c = match sh.ring.pop(|len| len <= room, copy) {
                Pop::Took(c) => c,
                Pop::Empty(tail) if tail & TAIL_CLOSED != 0 => {
                    popped.edge_owed = true;
                    break;
                }
                // Short: settle the fd as a refused receive does.
                Pop::Empty(tail)
                    if tail & TAIL_RECV_RAISED != 0 && sh.sync_recv(Edge::IfChanged) =>
                {
                    continue
                }
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
                Pop::Empty(tail) if tail & TAIL_CLOSED != 0 => {
                    sh.end_of_stream();
                    return (n, EachEnd::Closed);
                }
                // As a refused `recv_into`: the fd is lowered before giving up.
                Pop::Empty(tail)
                    if tail & TAIL_RECV_RAISED != 0 && sh.sync_recv(Edge::IfChanged) =>
                {
                    continue
                }
                Pop::Empty(_) | Pop::TooLong(_) => return (n, EachEnd::Empty),
            };
            let mut popped = Popped::default();
            popped.add(&c);
            sh.after_pop(&popped);
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
        (n, EachEnd::More)
    }

    /// Closes the channel (D6): sends fail with `Error::Closed` from now on;
    /// queued messages stay receivable; both fds become and stay readable and
    /// every blocked thread wakes. Returns false if it was already closed.
    pub fn close(&self) -> bool {
        let sh = &*self.shared;
        if sh.ring.tail.fetch_or(TAIL_CLOSED, Ordering::SeqCst) & TAIL_CLOSED != 0 {
            return false;
        }
        // An event on both fds even if they are up already: an
        // edge-triggered waiter may have consumed the last one just before
        // its refusal.
        sh.sync_recv(Edge::Owed);
        sh.sync_send_with(None, Edge::Owed);
        let _sleepers = sh.waiting.lock();
        sh.ring.tail.fetch_and(!TAIL_RECV_WAITERS, Ordering::SeqCst);
        sh.ring.head.fetch_and(!HEAD_SEND_WAITERS, Ordering::SeqCst);
        sh.readable.notify_all();
        sh.writable.notify_all();
        true
    }

    /// Under loom: creates the send doorbell, as the first `send_fd` does.
    #[cfg(loom)]
    pub fn open_send_bell(&self) {
        self.shared.send_bell().expect("the model's eventfd");
    }

    /// Under loom: what an edge-triggered waiter registering the send fd
    /// now has seen: its writes so far and whether it is raised (an event
    /// at registration). The send doorbell must have been opened.
    #[cfg(loom)]
    pub fn send_fd_registered(&self) -> (u64, bool) {
        self.shared.opened_send_bell().registered()
    }

    /// Under loom: whether the receive and send doorbells are raised (the
    /// model's "readable"); the send doorbell must have been opened.
    #[cfg(loom)]
    pub fn doorbells(&self) -> (bool, bool) {
        (
            self.shared.recv_bell.is_raised(),
            self.shared.opened_send_bell().is_raised(),
        )
    }

    /// Under loom: how many writes each eventfd has had (the events an
    /// edge-triggered waiter sees); the send doorbell must have been opened.
    #[cfg(loom)]
    pub fn doorbell_writes(&self) -> (u64, u64) {
        (
            self.shared.recv_bell.writes(),
            self.shared.opened_send_bell().writes(),
        )
    }

    /// Whether the channel is closed.
    pub fn is_closed(&self) -> bool {
        self.shared.ring.tail.load(Ordering::SeqCst) & TAIL_CLOSED != 0
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

/// A loop's channel source. Loops register the receive fd with
/// EPOLLEXCLUSIVE, so one write wakes one of them; a loop that stops taking
/// while messages remain (its budget spent, the loop stopped, the source
/// disabled or removed) passes the wake on, if another loop consumes the
/// channel. Counted from `enlist`, once its source is registered, so a
/// failed add neither counts nor writes.
pub(crate) struct LoopConsumer {
    chan: Chan,
    enlisted: AtomicBool,
}

impl Chan {
    pub(crate) fn loop_consumer(&self) -> LoopConsumer {
        LoopConsumer {
            chan: self.clone(),
            enlisted: AtomicBool::new(false),
        }
    }
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
        if self.chan.shared.loop_consumers.load(Ordering::SeqCst) > 1 {
            self.chan.shared.pass_on_pending();
        }
    }
}

impl Drop for LoopConsumer {
    fn drop(&mut self) {
        let sh = &self.chan.shared;
        if self.enlisted.load(Ordering::SeqCst)
            && sh.loop_consumers.fetch_sub(1, Ordering::SeqCst) > 1
        {
            sh.pass_on_pending();
        }
    }
}

/// Why [`Chan::recv_each`] returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EachEnd {
    /// Its caller asked to stop, or took its fill: messages may remain.
    More,
    /// The queue is empty and open.
    Empty,
    /// The channel is closed and drained: end of stream.
    Closed,
}

/// Copies a received message to the front of `buf` (which the caller
/// checked is long enough) and returns its length.
fn copy_out(m: Payload<'_>, buf: &mut [u8]) -> usize {
    let m = m.bytes();
    buf[..m.len()].copy_from_slice(m);
    m.len()
}

impl Shared {
    fn check_len(&self, len: usize) -> Result<()> {
        let max = self.limits.max_msg_size;
        if len > max {
            return Err(Error::TooLarge { len, max });
        }
        Ok(())
    }

    fn byte_limited(&self) -> bool {
        self.limits.max_bytes.is_some()
    }

    /// The send doorbell, created now if it is not yet. Under `bells`, which
    /// every change of the doorbell holds, so its level is taken from
    /// `HEAD_SEND_LOWERED` with no change in flight, and every change after
    /// sees the fd. An edge-triggered waiter registers the fd after this, so
    /// its first event is the level at registration, and each later change
    /// is a write (D9).
    fn send_bell(&self) -> Result<&EventFd> {
        if let Some(bell) = self.send_bell.get() {
            return Ok(bell);
        }
        let bells = self.bells.lock();
        let bell = match self.send_bell.get() {
            Some(bell) => Ok(bell),
            None => EventFd::new().map(|bell| {
                // A read-modify-write reads the latest word, not a stale one.
                if self.ring.head.fetch_or(0, Ordering::SeqCst) & HEAD_SEND_LOWERED == 0 {
                    bell.raise();
                }
                self.send_bell.get_or_init(|| bell)
            }),
        };
        self.release_bells(bells);
        Ok(bell?)
    }

    #[cfg(loom)]
    fn opened_send_bell(&self) -> &EventFd {
        self.send_bell.get().expect("open_send_bell first")
    }

    /// Queues `msg` if there is room: a slot, and bytes under the limit.
    fn try_push(&self, msg: &[u8]) -> Result<Claimed<()>, PushError> {
        let Some(max) = self.limits.max_bytes else {
            return self.ring.push(msg);
        };
        let len = msg.len();
        let mut queued = self.bytes.load(Ordering::Relaxed);
        loop {
            if queued + len > max {
                if self.ring.tail.load(Ordering::SeqCst) & TAIL_CLOSED != 0 {
                    return Err(PushError::Closed);
                }
                return Err(PushError::Full);
            }
            match self.bytes.compare_exchange_weak(
                queued,
                queued + len,
                Ordering::SeqCst,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => queued = now,
            }
        }
        let pushed = self.ring.push(msg);
        if pushed.is_err() {
            self.release_bytes(len);
        }
        pushed
    }

    /// Gives back bytes (a receive, or a reservation whose push failed) and
    /// returns the `head` flags seen after it. The fence pairs with the one
    /// in `sync_send`/`wait_for_room`: either they see the bytes freed, or
    /// this sees their flag and acts on it.
    fn release_bytes(&self, len: usize) -> u64 {
        self.bytes.fetch_sub(len, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let head = self.ring.head.load(Ordering::SeqCst);
        if head & (HEAD_SEND_LOWERED | HEAD_SEND_WAITERS) != 0 && self.at_low_water(0) {
            self.room_at_low_water(head);
        }
        head
    }

    /// Doorbells and wake-ups after a send call queued messages.
    fn after_push(&self, p: &Pushed) {
        if p.n == 0 {
            return;
        }
        if p.saw_recv_down {
            self.sync_recv(Edge::IfChanged);
        }
        // How deep the queue got: a new peak, or full. Both are read off
        // slot stamps rather than the head, whose line every receive writes
        // (reading it on every send cost a line transfer per message both
        // ways: a quarter of the 1P1C time in a profile). The depth at our
        // last message exceeds the peak iff the message `peak` places before
        // it (`end - 1 - peak`) is still queued, i.e. its slot is not yet
        // free for the message `cap` after it; then, and so at most once per
        // new peak, the head is read for the exact depth.
        let end = p.last_pos + 1;
        let cap = self.ring.cap();
        let peak = self.peak_depth.load(Ordering::Relaxed);
        if peak < cap && end > peak && !self.ring.is_free_for(end - 1 - peak + cap) {
            let head = position(self.ring.head.load(Ordering::Relaxed));
            // A head read late only overstates the depth; capped at capacity.
            let depth = end.saturating_sub(head).min(cap);
            self.peak_depth.fetch_max(depth, Ordering::Relaxed);
        }
        // Full iff the slot of the next message still holds the one `cap`
        // before it: the line the next send reads anyway.
        let full = !self.ring.is_free_for(end);
        let bytes_full = self
            .limits
            .max_bytes
            .is_some_and(|max| self.bytes.load(Ordering::Relaxed) >= max);
        if (full || bytes_full) && !p.refused {
            self.sync_send(None);
        }
        if p.saw_recv_waiters {
            self.wake_receivers(p.n);
        }
    }

    /// Doorbells and wake-ups after a receive call took messages.
    fn after_pop(&self, p: &Popped) {
        if p.n == 0 {
            return;
        }
        let next = p.last_pos + 1;
        // Lower the receive doorbell if this emptied the queue. The next
        // slot is the line the next receive reads anyway; only if its
        // message is not there yet is the tail worth a look. Not skipped when
        // the raised bit is clear: a send's `sync_recv` may be about to set
        // it, judging by a head from before this receive, and only taking
        // `bells` after it puts that right.
        if p.edge_owed {
            self.sync_recv(Edge::Owed);
        } else if !p.settled && !self.ring.is_ready(next) {
            let tail = self.ring.tail.load(Ordering::SeqCst);
            if position(tail) == next && tail & TAIL_CLOSED == 0 {
                self.lower_recv_soon();
            }
        }
        if self.byte_limited() {
            self.release_bytes(p.bytes);
        } else if p.flags & (HEAD_SEND_LOWERED | HEAD_SEND_WAITERS) != 0 && self.at_low_water(next)
        {
            self.room_at_low_water(p.flags);
        }
    }

    /// Whether the queue is at or below the low-water mark, with `head` a
    /// position the head has reached (a lower bound; 0 to read it).
    fn at_low_water(&self, head: u64) -> bool {
        let head = head.max(position(self.ring.head.load(Ordering::SeqCst)));
        let depth = position(self.ring.tail.load(Ordering::SeqCst)).saturating_sub(head);
        depth <= self.limits.low_water as u64
            && (!self.byte_limited()
                || self.bytes.load(Ordering::SeqCst) <= self.limits.low_water_bytes)
    }

    /// The queue drained to the low-water mark with the send doorbell down
    /// or senders asleep (`flags`): raise it, wake them.
    fn room_at_low_water(&self, flags: u64) {
        if flags & HEAD_SEND_LOWERED != 0 {
            self.sync_send(None);
        }
        if flags & HEAD_SEND_WAITERS != 0 {
            let sleepers = self.waiting.lock();
            self.ring
                .head
                .fetch_and(!HEAD_SEND_WAITERS, Ordering::SeqCst);
            if sleepers.senders > 0 {
                self.writable.notify_all();
            }
        }
    }

    /// Wakes receivers asleep in the library after `n` messages arrived.
    fn wake_receivers(&self, n: usize) {
        let sleepers = self.waiting.lock();
        if sleepers.receivers <= n {
            // All of them: nobody is left asleep to announce.
            self.ring
                .tail
                .fetch_and(!TAIL_RECV_WAITERS, Ordering::SeqCst);
            if sleepers.receivers > 0 {
                self.readable.notify_all();
            }
        } else {
            for _ in 0..n {
                self.readable.notify_one();
            }
        }
    }

    /// Makes the receive doorbell match the queue: raised iff messages are
    /// pending or the channel is closed; with `Edge::Owed`, a raised fd is
    /// written even if it was up already. Returns whether it is raised.
    fn sync_recv(&self, edge: Edge) -> bool {
        let mut bells = self.bells.lock();
        let raised = self.sync_recv_locked(&mut bells, edge);
        self.release_bells(bells);
        raised
    }

    /// The receive that emptied the queue lowers the receive fd, unless
    /// `bells` is busy: then its holder, who may be writing an eventfd (a
    /// syscall that on a VM waking an idle vCPU takes ~10 us), judges again
    /// once it lets go, and this receive returns its message now instead of
    /// waiting for that write. The flag and the lock are each written then
    /// read across a SeqCst fence, so either this call gets the lock or the
    /// holder sees the flag.
    fn lower_recv_soon(&self) {
        self.recv_recheck.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        self.recheck_recv();
    }

    /// Lets go of `bells`, then does a lowering a receive left to the holder.
    fn release_bells(&self, bells: MutexGuard<'_, Bells>) {
        drop(bells);
        fence(Ordering::SeqCst);
        if self.recv_recheck.load(Ordering::SeqCst) {
            self.recheck_recv();
        }
    }

    /// Judges the receive fd again while someone asks for it and `bells` is
    /// free; a holder that sees the request after letting go comes back here.
    fn recheck_recv(&self) {
        while let Some(mut bells) = self.bells.try_lock() {
            self.recv_recheck.store(false, Ordering::SeqCst);
            self.sync_recv_locked(&mut bells, Edge::IfChanged);
            drop(bells);
            fence(Ordering::SeqCst);
            if !self.recv_recheck.load(Ordering::SeqCst) {
                return;
            }
        }
    }

    fn sync_recv_locked(&self, bells: &mut MutexGuard<'_, Bells>, edge: Edge) -> bool {
        loop {
            // Read-modify-writes read the latest values, not stale ones.
            let tail = self.ring.tail.fetch_or(0, Ordering::SeqCst);
            let head = self.ring.head.fetch_or(0, Ordering::SeqCst);
            let raised = tail & TAIL_RECV_RAISED != 0;
            let want = tail & TAIL_CLOSED != 0 || position(tail) > position(head);
            if want == raised {
                if want && edge == Edge::Owed {
                    self.recv_bell.pulse();
                    bells.recv_rings += 1;
                }
                return want;
            }
            // Judged by `tail`: if a send moved it since, judge again.
            if self
                .ring
                .tail
                .compare_exchange(
                    tail,
                    tail ^ TAIL_RECV_RAISED,
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                )
                .is_err()
            {
                continue;
            }
            if want {
                self.recv_bell.raise();
                bells.recv_rings += 1;
            } else {
                self.recv_bell.lower();
            }
            return want;
        }
    }

    /// Makes the send doorbell match the queue: lowered when full (or when
    /// a send of `refused` bytes does not fit), raised at the low-water mark
    /// or when closed, unchanged in between; close writes it even if it is
    /// up. Returns whether the `refused` send still does not fit (and so
    /// the fd is down): false means room came back (or the channel closed),
    /// and the sender should try again rather than be refused with an fd
    /// that may stay up (D9).
    fn sync_send(&self, refused: Option<usize>) -> bool {
        self.sync_send_with(refused, Edge::IfChanged)
    }

    fn sync_send_with(&self, refused: Option<usize>, edge: Edge) -> bool {
        let mut bells = self.bells.lock();
        let still_refused = self.sync_send_locked(&mut bells, refused, edge);
        self.release_bells(bells);
        still_refused
    }

    fn sync_send_locked(
        &self,
        bells: &mut MutexGuard<'_, Bells>,
        refused: Option<usize>,
        mut edge: Edge,
    ) -> bool {
        loop {
            let head = self.ring.head.fetch_or(0, Ordering::SeqCst);
            let tail = self.ring.tail.fetch_or(0, Ordering::SeqCst);
            let lowered = head & HEAD_SEND_LOWERED != 0;
            let want = self.send_should_be_lowered(tail, head, refused, lowered);
            if want != lowered {
                // Judged by `head`: if a receive moved it since, judge again.
                if self
                    .ring
                    .head
                    .compare_exchange(
                        head,
                        head ^ HEAD_SEND_LOWERED,
                        Ordering::SeqCst,
                        Ordering::SeqCst,
                    )
                    .is_err()
                {
                    continue;
                }
                // Without the fd (nobody asked for it) only the flag moves.
                let bell = self.send_bell.get();
                if want {
                    if let Some(b) = bell {
                        b.lower();
                    }
                } else {
                    if let Some(b) = bell {
                        b.raise();
                    }
                    bells.send_rings += 1;
                    edge = Edge::IfChanged;
                }
            } else if !lowered && edge == Edge::Owed {
                if let Some(b) = self.send_bell.get() {
                    b.pulse();
                }
                bells.send_rings += 1;
                edge = Edge::IfChanged;
            }
            if !self.byte_limited() {
                return self.still_refused(tail, head, refused);
            }
            // Bytes are given back after `head` moves, so a receive may have
            // missed the flag just set: look again after a fence (the
            // releaser fences too, so one of us sees the other).
            fence(Ordering::SeqCst);
            let head = self.ring.head.fetch_or(0, Ordering::SeqCst);
            let tail = self.ring.tail.fetch_or(0, Ordering::SeqCst);
            let lowered = head & HEAD_SEND_LOWERED != 0;
            if self.send_should_be_lowered(tail, head, refused, lowered) == lowered {
                return self.still_refused(tail, head, refused);
            }
        }
    }

    fn send_should_be_lowered(
        &self,
        tail: u64,
        head: u64,
        refused: Option<usize>,
        lowered: bool,
    ) -> bool {
        if tail & TAIL_CLOSED != 0 {
            return false;
        }
        let depth = position(tail).saturating_sub(position(head));
        let bytes = self.bytes.load(Ordering::SeqCst);
        let full =
            depth >= self.ring.cap() || self.limits.max_bytes.is_some_and(|max| bytes >= max);
        if full || self.still_refused(tail, head, refused) {
            return true;
        }
        if depth <= self.limits.low_water as u64 && bytes <= self.limits.low_water_bytes {
            return false;
        }
        lowered
    }

    /// Whether a send of `refused` bytes would still be refused for lack of
    /// room (not on a closed channel: that send fails otherwise).
    fn still_refused(&self, tail: u64, head: u64, refused: Option<usize>) -> bool {
        let depth = position(tail).saturating_sub(position(head));
        tail & TAIL_CLOSED == 0
            && refused.is_some_and(|len| !self.fits(depth, self.bytes.load(Ordering::SeqCst), len))
    }

    fn fits(&self, depth: u64, bytes: usize, len: usize) -> bool {
        depth < self.ring.cap() && self.limits.max_bytes.is_none_or(|max| bytes + len <= max)
    }

    /// Takes the head message, waiting for one as `wait` says.
    fn pop_waiting<T>(
        &self,
        wait: Wait,
        accept: impl Fn(usize) -> bool,
        take: &mut impl FnMut(Payload<'_>) -> T,
    ) -> Result<Claimed<T>> {
        let mut deadline = None;
        loop {
            match self.ring.pop(&accept, &mut *take) {
                Pop::Took(c) => return Ok(c),
                Pop::TooLong(needed) => return Err(Error::BufferTooSmall { needed }),
                Pop::Empty(tail) => {
                    if tail & TAIL_CLOSED != 0 {
                        self.end_of_stream();
                        return Err(Error::Closed);
                    }
                    let deadline = *deadline.get_or_insert_with(|| Deadline::new(wait));
                    if let Some(e) = deadline.expired() {
                        // Refused while the fd looked up: another receiver
                        // took the last message and has not lowered it yet,
                        // and a send arriving now would find it up and write
                        // nothing. Lower it first, so that the next send's
                        // raise is the caller's event (D9); if a message (or
                        // close) came meanwhile, take that instead.
                        if tail & TAIL_RECV_RAISED != 0 && self.sync_recv(Edge::IfChanged) {
                            continue;
                        }
                        return Err(e);
                    }
                    self.wait_for_message(deadline);
                }
            }
        }
    }

    /// A receive found the end of stream: pass it on. A consumer registered
    /// with EPOLLEXCLUSIVE was woken by one write, alone; this write wakes
    /// the next (D6).
    fn end_of_stream(&self) {
        self.sync_recv(Edge::Owed);
    }

    /// Writes the receive fd again if messages are pending: one more
    /// exclusive waiter wakes.
    fn pass_on_pending(&self) {
        let tail = self.ring.tail.load(Ordering::SeqCst);
        let head = self.ring.head.load(Ordering::SeqCst);
        if position(tail) > position(head) {
            self.sync_recv(Edge::Owed);
        }
    }

    /// Sleeps until a send or close announces itself, unless a message is
    /// already pending. The flag set under `waiting` makes every later send
    /// take `waiting` before notifying, so the notify cannot slip in between
    /// this check and the sleep.
    fn wait_for_message(&self, deadline: Deadline) {
        let mut sleepers = self.waiting.lock();
        let tail = self.ring.tail.fetch_or(TAIL_RECV_WAITERS, Ordering::SeqCst);
        let head = self.ring.head.fetch_or(0, Ordering::SeqCst);
        if tail & TAIL_CLOSED == 0 && position(tail) == position(head) {
            sleepers.receivers += 1;
            self.sleep(&self.readable, &mut sleepers, deadline);
            sleepers.receivers -= 1;
        }
        // Nobody asleep (a message came first, or the wait timed out): take
        // the announcement back, so the next send does not take `waiting`.
        // Only receivers set it, under `waiting`, so the load is exact; it
        // spares the `tail` line a write when a waker already cleared it.
        if sleepers.receivers == 0 && self.ring.tail.load(Ordering::SeqCst) & TAIL_RECV_WAITERS != 0
        {
            self.ring
                .tail
                .fetch_and(!TAIL_RECV_WAITERS, Ordering::SeqCst);
        }
    }

    /// Sleeps until the queue drains to the low-water mark or closes, unless
    /// `len` bytes already fit.
    fn wait_for_room(&self, len: usize, deadline: Deadline) {
        let mut sleepers = self.waiting.lock();
        let head = self.ring.head.fetch_or(HEAD_SEND_WAITERS, Ordering::SeqCst);
        if self.byte_limited() {
            fence(Ordering::SeqCst);
        }
        let tail = self.ring.tail.fetch_or(0, Ordering::SeqCst);
        let depth = position(tail).saturating_sub(position(head));
        if tail & TAIL_CLOSED != 0 || self.fits(depth, self.bytes.load(Ordering::SeqCst), len) {
            return;
        }
        sleepers.senders += 1;
        self.sleep(&self.writable, &mut sleepers, deadline);
        sleepers.senders -= 1;
    }

    fn sleep(&self, cv: &Condvar, sleepers: &mut MutexGuard<'_, Sleepers>, deadline: Deadline) {
        match deadline {
            Deadline::At(t) => {
                cv.wait_until(sleepers, t);
            }
            Deadline::Never => cv.wait(sleepers),
            Deadline::Now => {}
        }
    }

    fn stats(&self) -> Stats {
        let tail = self.ring.tail.load(Ordering::SeqCst);
        let head = self.ring.head.load(Ordering::SeqCst);
        let sent = position(tail);
        let received = position(head).min(sent);
        // Discarded messages are still between head and tail.
        let pending = sent - received - self.dropped;
        let pending_bytes = if self.discarded {
            0
        } else if self.byte_limited() {
            self.bytes.load(Ordering::SeqCst) as u64
        } else {
            (received..sent).map(|p| self.ring.len_at(p) as u64).sum()
        };
        let bells = self.bells.lock();
        let (recv_doorbell_rings, send_doorbell_rings) = (bells.recv_rings, bells.send_rings);
        self.release_bells(bells);
        Stats {
            sent,
            received,
            pending,
            pending_bytes,
            dropped: self.dropped,
            peak_depth: self.peak_depth.load(Ordering::Relaxed).max(pending),
            recv_doorbell_rings,
            send_doorbell_rings,
            closed: tail & TAIL_CLOSED != 0,
        }
    }

    /// Discards what is still queued (the last handle is gone).
    fn discard_pending(&mut self) {
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
