//! The channel: a bounded multi-producer multi-consumer queue of byte
//! messages with two doorbell fds.
//!
//! The queue (what) and the doorbells (whether) are kept in step under one
//! mutex, which is the whole trick of the seed article done once, properly:
//!
//! - the receive fd is an eventfd raised when the queue leaves empty (or the
//!   channel closes) and lowered by the receive that empties it (D4);
//! - the send fd is an eventfd lowered when a send fills the queue (or is
//!   refused for lack of room) and raised by the receive that drains it to
//!   the low-water mark (or by close) (D5).
//!
//! Because both transitions happen under the lock that changes the queue, the
//! fd state equals the queue state whenever no call is in progress, and the
//! eventfds are written only on those transitions: a busy channel costs no
//! syscalls at all. Threads that block inside the library wait on condvars,
//! not on the fds, and are signalled only when one is actually waiting.

use std::collections::VecDeque;
use std::fmt;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::sync::{Condvar, EventFd, Mutex, MutexGuard};

/// Maximum message size when the options do not set one.
pub const DEFAULT_MAX_MSG_SIZE: usize = 1 << 20;

/// Received buffers are kept for reuse by later sends, so the steady-state
/// copy path allocates nothing. Larger buffers are freed instead so one huge
/// message does not pin its memory for the channel's life.
const SPARE_BUF_MAX: usize = 64 * 1024;

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
    /// and one at close if the fd was down. Compare with `sent` to see the
    /// wakeup economy.
    pub recv_doorbell_rings: u64,
    /// Writes to the send eventfd: one at creation, one per drain to the
    /// low-water mark after the queue was full (or refused a send), and one
    /// at close if the fd was down.
    pub send_doorbell_rings: u64,
    /// Whether the channel is closed.
    pub closed: bool,
}

struct State {
    queue: VecDeque<Vec<u8>>,
    spare: Vec<Vec<u8>>,
    bytes: usize,
    closed: bool,
    /// Mirrors whether the receive eventfd's counter is non-zero.
    recv_raised: bool,
    /// Mirrors whether the send eventfd's counter is non-zero.
    send_raised: bool,
    recv_waiters: usize,
    send_waiters: usize,
    stats: Stats,
}

struct Shared {
    state: Mutex<State>,
    /// Signalled when a message arrives or the channel closes.
    readable: Condvar,
    /// Signalled when room appears or the channel closes.
    writable: Condvar,
    recv_bell: EventFd,
    send_bell: EventFd,
    limits: Limits,
    on_drop: Option<DropFn>,
}

/// A handle to a channel. Clone it to give each thread its own; the channel
/// lives until the last handle is dropped. Any handle can send, receive and
/// close.
#[derive(Clone)]
pub struct Chan {
    shared: Arc<Shared>,
}

impl fmt::Debug for Chan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Chan")
            .field("limits", &self.shared.limits)
            .field("recv_fd", &self.recv_fd())
            .field("send_fd", &self.send_fd())
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
    /// Creates a channel and its two eventfds.
    pub fn new(options: Options) -> Result<Chan> {
        let limits = Limits::from_options(&options)?;
        let recv_bell = EventFd::new()?;
        let send_bell = EventFd::new()?;
        // An empty channel has room: the send fd starts readable.
        send_bell.raise();
        let state = State {
            queue: VecDeque::with_capacity(limits.capacity.min(1024)),
            spare: Vec::new(),
            bytes: 0,
            closed: false,
            recv_raised: false,
            send_raised: true,
            recv_waiters: 0,
            send_waiters: 0,
            stats: Stats {
                send_doorbell_rings: 1,
                ..Stats::default()
            },
        };
        Ok(Chan {
            shared: Arc::new(Shared {
                state: Mutex::new(state),
                readable: Condvar::new(),
                writable: Condvar::new(),
                recv_bell,
                send_bell,
                limits,
                on_drop: options.on_drop,
            }),
        })
    }

    /// The fd to poll for input: readable exactly while messages are pending
    /// or the channel is closed (D4). Only poll it; never read or write it.
    pub fn recv_fd(&self) -> RawFd {
        self.shared.recv_bell.as_raw_fd()
    }

    /// The fd to poll for room: not readable while the channel is full and
    /// open, readable again once it drains to the low-water mark or closes
    /// (D5). Only poll it; never read or write it.
    pub fn send_fd(&self) -> RawFd {
        self.shared.send_bell.as_raw_fd()
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
    pub fn send_batch<'a, I>(&self, msgs: I, wait: Wait) -> Result<usize>
    where
        I: IntoIterator<Item = &'a [u8]>,
    {
        let sh = &*self.shared;
        let mut msgs = msgs.into_iter().peekable();
        let Some(first) = msgs.peek() else {
            return Ok(0);
        };
        sh.check_len(first.len())?;
        let deadline = Deadline::new(wait);
        let mut st = sh.state.lock();
        loop {
            if st.closed {
                return Err(Error::Closed);
            }
            if sh.fits(&st, first.len()) {
                break;
            }
            // No room: lower the send fd now so a producer polling it sleeps
            // until the queue drains instead of spinning on EAGAIN.
            sh.lower_send(&mut st);
            if let Some(e) = deadline.expired() {
                return Err(e);
            }
            sh.wait(&sh.writable, &mut st, deadline, |s| &mut s.send_waiters);
        }
        let mut n = 0;
        while let Some(msg) = msgs.next_if(|m| m.len() <= sh.limits.max_msg_size) {
            if !sh.fits(&st, msg.len()) {
                break;
            }
            sh.push(&mut st, msg);
            n += 1;
        }
        sh.after_push(&mut st, n);
        Ok(n)
    }

    /// Receives the head message into `buf` and returns its length. If `buf`
    /// is too small the message stays at the head and the error says how
    /// many bytes it needs (D7). After close, once drained, fails with
    /// `Error::Closed` (end of stream).
    pub fn recv_into(&self, buf: &mut [u8], wait: Wait) -> Result<usize> {
        let sh = &*self.shared;
        let mut st = sh.wait_for_message(wait)?;
        let len = st.queue.front().map_or(0, Vec::len);
        if len > buf.len() {
            return Err(Error::BufferTooSmall { needed: len });
        }
        let msg = sh.pop(&mut st);
        buf[..len].copy_from_slice(&msg);
        sh.recycle(&mut st, msg);
        sh.after_pop(&mut st, 1);
        Ok(len)
    }

    /// Receives the head message as an owned buffer: no copy, the queued
    /// buffer itself is handed over.
    pub fn recv(&self, wait: Wait) -> Result<Vec<u8>> {
        let sh = &*self.shared;
        let mut st = sh.wait_for_message(wait)?;
        let msg = sh.pop(&mut st);
        sh.after_pop(&mut st, 1);
        Ok(msg)
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
        let mut st = sh.wait_for_message(wait)?;
        let head = st.queue.front().map_or(0, Vec::len);
        if head > buf.len() {
            return Err(Error::BufferTooSmall { needed: head });
        }
        let mut n = 0;
        let mut off = 0;
        while n < lens.len() {
            let Some(len) = st.queue.front().map(Vec::len) else {
                break;
            };
            if len > buf.len() - off {
                break;
            }
            let msg = sh.pop(&mut st);
            buf[off..off + len].copy_from_slice(&msg);
            sh.recycle(&mut st, msg);
            lens[n] = len;
            off += len;
            n += 1;
        }
        sh.after_pop(&mut st, n);
        Ok(n)
    }

    /// Closes the channel (D6): sends fail with `Error::Closed` from now on;
    /// queued messages stay receivable; both fds become and stay readable and
    /// every blocked thread wakes. Returns false if it was already closed.
    pub fn close(&self) -> bool {
        let sh = &*self.shared;
        let mut st = sh.state.lock();
        if st.closed {
            return false;
        }
        st.closed = true;
        sh.raise_recv(&mut st);
        sh.raise_send(&mut st);
        sh.readable.notify_all();
        sh.writable.notify_all();
        true
    }

    /// Under loom: whether the receive and send doorbells are raised (the
    /// model's "readable").
    #[cfg(loom)]
    pub fn doorbells(&self) -> (bool, bool) {
        (
            self.shared.recv_bell.is_raised(),
            self.shared.send_bell.is_raised(),
        )
    }

    /// Whether the channel is closed.
    pub fn is_closed(&self) -> bool {
        self.shared.state.lock().closed
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> Stats {
        let st = self.shared.state.lock();
        st.stats_now()
    }

    /// Drops this handle. If it was the last one, the messages still queued
    /// are discarded (each passed to the drop hook) and the channel's final
    /// counters are returned, `dropped` included; otherwise `None`.
    pub fn into_final_stats(self) -> Option<Stats> {
        let mut shared = Arc::into_inner(self.shared)?;
        shared.discard_pending();
        Some(shared.state.get_mut().stats_now())
    }
}

impl State {
    fn stats_now(&self) -> Stats {
        Stats {
            pending: self.queue.len() as u64,
            pending_bytes: self.bytes as u64,
            closed: self.closed,
            ..self.stats
        }
    }
}

impl Shared {
    fn check_len(&self, len: usize) -> Result<()> {
        let max = self.limits.max_msg_size;
        if len > max {
            return Err(Error::TooLarge { len, max });
        }
        Ok(())
    }

    fn fits(&self, st: &State, len: usize) -> bool {
        st.queue.len() < self.limits.capacity
            && self
                .limits
                .max_bytes
                .is_none_or(|max| st.bytes + len <= max)
    }

    fn is_full(&self, st: &State) -> bool {
        st.queue.len() >= self.limits.capacity
            || self.limits.max_bytes.is_some_and(|max| st.bytes >= max)
    }

    fn at_low_water(&self, st: &State) -> bool {
        st.queue.len() <= self.limits.low_water && st.bytes <= self.limits.low_water_bytes
    }

    /// Waits on `cv` until notified or the deadline; the caller re-checks
    /// its condition. `waiters` counts sleepers so wakers skip the futex
    /// call when nobody sleeps.
    fn wait(
        &self,
        cv: &Condvar,
        st: &mut MutexGuard<'_, State>,
        deadline: Deadline,
        waiters: fn(&mut State) -> &mut usize,
    ) {
        *waiters(st) += 1;
        match deadline {
            Deadline::At(t) => {
                cv.wait_until(st, t);
            }
            _ => cv.wait(st),
        }
        *waiters(st) -= 1;
    }

    /// Locks the state once a message is at the head, or fails: closed and
    /// drained (end of stream), or the deadline passed.
    fn wait_for_message(&self, wait: Wait) -> Result<MutexGuard<'_, State>> {
        let deadline = Deadline::new(wait);
        let mut st = self.state.lock();
        loop {
            if !st.queue.is_empty() {
                return Ok(st);
            }
            if st.closed {
                return Err(Error::Closed);
            }
            if let Some(e) = deadline.expired() {
                return Err(e);
            }
            self.wait(&self.readable, &mut st, deadline, |s| &mut s.recv_waiters);
        }
    }

    fn push(&self, st: &mut State, msg: &[u8]) {
        let mut buf = st.spare.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(msg);
        st.bytes += msg.len();
        st.queue.push_back(buf);
        st.stats.sent += 1;
        st.stats.peak_depth = st.stats.peak_depth.max(st.queue.len() as u64);
    }

    /// Doorbells and wake-ups after `n` messages were queued.
    fn after_push(&self, st: &mut State, n: usize) {
        if n == 0 {
            return;
        }
        self.raise_recv(st);
        if self.is_full(st) {
            self.lower_send(st);
        }
        match st.recv_waiters {
            0 => {}
            1 if n == 1 => {
                self.readable.notify_one();
            }
            _ => {
                self.readable.notify_all();
            }
        }
    }

    /// Takes the head message; the caller checked there is one.
    fn pop(&self, st: &mut State) -> Vec<u8> {
        let msg = st.queue.pop_front().unwrap_or_default();
        st.bytes -= msg.len();
        st.stats.received += 1;
        msg
    }

    fn recycle(&self, st: &mut State, buf: Vec<u8>) {
        if buf.capacity() <= SPARE_BUF_MAX && st.spare.len() < self.limits.capacity {
            st.spare.push(buf);
        }
    }

    /// Doorbells and wake-ups after `n` messages were taken.
    fn after_pop(&self, st: &mut State, n: usize) {
        if n == 0 {
            return;
        }
        if st.queue.is_empty() && !st.closed {
            self.lower_recv(st);
        }
        if self.at_low_water(st) {
            self.raise_send(st);
        }
        if st.send_waiters > 0 {
            // With a byte limit the woken sender's message may not fit while
            // another's would, so wake them all and let each re-check.
            if n == 1 && self.limits.max_bytes.is_none() {
                self.writable.notify_one();
            } else {
                self.writable.notify_all();
            }
        }
    }

    fn raise_recv(&self, st: &mut State) {
        if !st.recv_raised {
            self.recv_bell.raise();
            st.recv_raised = true;
            st.stats.recv_doorbell_rings += 1;
        }
    }

    fn lower_recv(&self, st: &mut State) {
        if st.recv_raised {
            self.recv_bell.lower();
            st.recv_raised = false;
        }
    }

    fn raise_send(&self, st: &mut State) {
        if !st.send_raised {
            self.send_bell.raise();
            st.send_raised = true;
            st.stats.send_doorbell_rings += 1;
        }
    }

    fn lower_send(&self, st: &mut State) {
        if st.send_raised && !st.closed {
            self.send_bell.lower();
            st.send_raised = false;
        }
    }

    /// Discards what is still queued (the last handle is gone).
    fn discard_pending(&mut self) {
        let st = self.state.get_mut();
        while let Some(msg) = st.queue.pop_front() {
            st.bytes -= msg.len();
            st.stats.dropped += 1;
            if let Some(f) = &self.on_drop {
                f(&msg);
            }
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.discard_pending();
    }
}
