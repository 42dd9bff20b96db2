// SPDX-License-Identifier: MIT OR Apache-2.0
//! The loop: an epoll dispatcher over fd, timer, signal and channel sources,
//! with posts and stop from any thread (D8).
//!
//! Sources live in a slot table behind one mutex; the mutex is never held
//! while user code runs. A source's id (slot index and generation) is the
//! epoll event's data, so an event fetched for a source that was removed
//! earlier in the same batch finds a stale id and is dropped, even if a new
//! source took the same fd or slot. Dispatch takes the callback out of its
//! slot, runs it unlocked, and puts it back only if the source still exists;
//! a callback removed meanwhile is dropped then, so its destroy hook runs
//! exactly once and never during its own call.
//!
//! One iteration (`run_once`) is:
//! 1. wait: `epoll_wait` for at most 64 ready sources (or the timeout);
//! 2. dispatch: for each, in kernel order, skip it if removed or disabled
//!    since the wait, else run its callback: once for an fd, once with the
//!    expiration count for a timer, once per signal, once per message up to
//!    the source's budget for a channel (the rest stay readable and come back
//!    next iteration, so a busy channel cannot starve the others; the only
//!    source of a loop under `run` goes on, having no one to yield to);
//! 3. posts run when the loop's wake eventfd comes up in the batch, in the
//!    order posted, at most 64 per iteration.
//!
//! The loop's own fd, the wake eventfd, is in the epoll set under a
//! reserved key, outside the source table (libuv's async handle, mio's
//! waker): a post raises it when the task queue goes from empty to
//! non-empty, so a burst of posts costs one write; `stop` raises it too, so
//! a blocked wait returns. A stop made during an iteration
//! takes effect when the running callback returns: the rest of the batch,
//! of a channel source's budget and of the posts is left for the next run
//! (see [`Loop::stop`]).

use std::collections::{HashSet, VecDeque};
use std::fmt;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::{self, ThreadId};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::chan::{Chan, EachEnd, LoopConsumer};
use crate::error::{Error, Result};
use crate::memcg::{MemEvent, Watch};
use crate::source::Source;
use crate::sys::{Epoll, EventFd, SignalFd, TimerFd};

/// Readiness flags for fd sources: the epoll values, so they pass through.
pub mod events {
    pub const IN: u32 = libc::EPOLLIN as u32;
    pub const PRI: u32 = libc::EPOLLPRI as u32;
    pub const OUT: u32 = libc::EPOLLOUT as u32;
    pub const ERR: u32 = libc::EPOLLERR as u32;
    pub const HUP: u32 = libc::EPOLLHUP as u32;
    pub const RDHUP: u32 = libc::EPOLLRDHUP as u32;
    /// Edge-triggered: report a change once, not a level repeatedly.
    pub const EDGE: u32 = libc::EPOLLET as u32;
    /// Disable the source after one event; `set_enabled(true)` re-arms it.
    pub const ONESHOT: u32 = libc::EPOLLONESHOT as u32;

    /// What a caller may ask for.
    pub(crate) const ALLOWED: u32 = IN | PRI | OUT | ERR | HUP | RDHUP | EDGE | ONESHOT;
    /// Of which at least one must be present (ERR and HUP are always on).
    pub(crate) const WANTED: u32 = IN | PRI | OUT | RDHUP;
}

/// Channel messages a channel source delivers per iteration unless set
/// otherwise: enough that the `epoll_wait` between batches costs a few
/// percent of a message's time, few enough that other ready sources wait at
/// most that many callbacks (docs/design.md has the figures).
pub const DEFAULT_BUDGET: usize = 256;

/// Pending posts a loop holds before `post` fails with `WouldBlock`.
pub const POST_CAPACITY: usize = 4096;

/// Posts run per iteration, so posts made by posts cannot starve the rest.
const POST_BUDGET: usize = 64;

const SIGNAL_TAKEN: Error = Error::Busy("this signal already has a source in this loop");

/// Events fetched per `epoll_wait`.
const BATCH: usize = 64;

/// The epoll key of the loop's wake eventfd: no source id has it, since
/// slot indexes stay below `u32::MAX`.
const WAKE_KEY: u64 = u64::MAX;

/// Identifies a source: its loop, slot index and generation, so an id is
/// never reused for another source and means nothing to another loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SourceId {
    /// Slot index and generation; the epoll event's data.
    key: u64,
    loop_tag: u64,
}

impl SourceId {
    fn index(self) -> usize {
        (self.key >> 32) as usize
    }

    fn gen(self) -> u32 {
        self.key as u32
    }
}

/// Gives each loop its own tag for the ids of its sources.
static NEXT_LOOP_TAG: AtomicU64 = AtomicU64::new(1);

/// What a callback is called for.
#[derive(Debug, PartialEq, Eq)]
pub enum Event<'a> {
    /// An fd source is ready; the `events` flags that are set.
    Fd(u32),
    /// A timer expired this many times since the last call (more than 1
    /// means expirations were missed; the period does not drift).
    Timer(u64),
    /// A channel source's next message.
    Message(&'a [u8]),
    /// A channel source's channel is closed and drained; after this call the
    /// source is disabled.
    Closed,
    /// A signal source's signal arrived.
    Signal(i32),
    /// A memory watch's event (see [`crate::memcg`]). After
    /// `MemEvent::Removed` the source is disabled.
    Memory(MemEvent),
}

/// A source's callback. An `Err` disables the source and is kept as its
/// error (see [`Loop::source_error`]); so is a panic.
pub type Callback = Box<dyn FnMut(&Loop, SourceId, Event<'_>) -> Result<()> + Send>;

type Task = Box<dyn FnOnce(&Loop) + Send>;

enum Kind {
    Fd(RawFd),
    Timer {
        tfd: TimerFd,
        periodic: bool,
    },
    /// `eos`: end of stream was delivered; it is delivered once only.
    Chan {
        chan: Arc<LoopConsumer>,
        eos: bool,
    },
    Signal {
        sfd: SignalFd,
        signo: i32,
    },
    /// A source that owns its fd and reads its own events (a memory watch).
    Owned(Box<dyn Source>),
}

struct Entry {
    kind: Kind,
    /// Epoll flags the source is registered with.
    events: u32,
    enabled: bool,
    /// Whether the fd is in the epoll set (a fired one-shot stays in it,
    /// disarmed, until re-armed with EPOLL_CTL_MOD).
    registered: bool,
    budget: usize,
    /// Taken out while the callback runs.
    callback: Option<Callback>,
    /// The errno of the failure that disabled the source, or 0.
    error: i32,
}

impl Entry {
    fn fd(&self) -> RawFd {
        match &self.kind {
            Kind::Fd(fd) => *fd,
            Kind::Timer { tfd, .. } => tfd.as_raw_fd(),
            Kind::Chan { chan, .. } => chan.chan().recv_raw_fd(),
            Kind::Signal { sfd, .. } => sfd.as_raw_fd(),
            Kind::Owned(src) => src.fd(),
        }
    }

    fn signo(&self) -> Option<i32> {
        match self.kind {
            Kind::Signal { signo, .. } => Some(signo),
            _ => None,
        }
    }
}

struct Slot {
    gen: u32,
    entry: Option<Entry>,
}

struct Table {
    /// This loop's tag, in every id it gives out.
    tag: u64,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// The fds of the sources, disabled ones included: one source per fd
    /// (a disabled source is out of the epoll set, so epoll alone would
    /// accept a second source for its fd, and re-enabling the first would
    /// then fail).
    fds: HashSet<RawFd>,
    /// The signals that have a source.
    signals: HashSet<i32>,
    /// The source whose callback runs now, if any.
    running: Option<SourceId>,
    /// The thread inside `run`/`run_once`, if any.
    loop_thread: Option<ThreadId>,
}

impl Table {
    fn id(&self, index: u32, gen: u32) -> SourceId {
        SourceId {
            key: (u64::from(index) << 32) | u64::from(gen),
            loop_tag: self.tag,
        }
    }

    /// Whether `signo` already has a source.
    fn has_signal(&self, signo: i32) -> bool {
        self.signals.contains(&signo)
    }

    fn get_mut(&mut self, id: SourceId) -> Option<&mut Entry> {
        if id.loop_tag != self.tag {
            return None;
        }
        let slot = self.slots.get_mut(id.index())?;
        if slot.gen != id.gen() {
            return None;
        }
        slot.entry.as_mut()
    }

    /// The id the next insert will get.
    fn vacant_id(&self) -> SourceId {
        match self.free.last() {
            Some(&i) => self.id(i, self.slots[i as usize].gen),
            None => self.id(self.slots.len() as u32, 0),
        }
    }

    fn insert(&mut self, entry: Entry) -> SourceId {
        let id = self.vacant_id();
        self.fds.insert(entry.fd());
        if let Some(signo) = entry.signo() {
            self.signals.insert(signo);
        }
        match self.free.pop() {
            Some(i) => self.slots[i as usize].entry = Some(entry),
            None => self.slots.push(Slot {
                gen: 0,
                entry: Some(entry),
            }),
        }
        id
    }

    fn take(&mut self, id: SourceId) -> Option<Entry> {
        if id.loop_tag != self.tag {
            return None;
        }
        let slot = self.slots.get_mut(id.index())?;
        if slot.gen != id.gen() {
            return None;
        }
        let entry = slot.entry.take()?;
        slot.gen = slot.gen.wrapping_add(1);
        self.free.push(id.index() as u32);
        self.fds.remove(&entry.fd());
        if let Some(signo) = entry.signo() {
            self.signals.remove(&signo);
        }
        Some(entry)
    }
}

struct Inner {
    epoll: Epoll,
    /// The table's tag, kept here too so an iteration reads it without the
    /// table lock (it never changes).
    tag: u64,
    table: Mutex<Table>,
    /// Signalled when a callback returns, for removers on other threads.
    callback_done: Condvar,
    /// Posted tasks, in post order.
    posts: Mutex<VecDeque<Task>>,
    /// Raised when `posts` goes from empty to non-empty and by `stop`, so a
    /// blocked `epoll_wait` returns; in the epoll set under `WAKE_KEY`.
    wake: EventFd,
    /// Set by `stop`, consumed by `run`.
    stop: AtomicBool,
    /// How many stops were made: dispatch ends early once it moved since
    /// the iteration began.
    stops: AtomicU64,
    /// Counts removals and disables of sources, so a channel source's
    /// dispatch learns with one atomic load per message whether it must
    /// look at the table (under its lock) before the next callback.
    disables: AtomicU64,
    /// Channel sources' spare buffer: a long message is received by
    /// swapping its slot's buffer with this one (`Chan::recv_each`), so it
    /// is never copied. Only the running thread dispatches and it takes the
    /// buffer out for the duration, so the lock is never contended.
    spare: Mutex<Vec<u8>>,
}

/// An event loop. `Send + Sync`: sources can be added, changed and removed
/// from any thread, and `stop`/`post` called from any thread, while one
/// thread runs it.
///
/// A channel source calls back once per message, then once at the end of
/// the stream:
///
/// ```
/// use eventq::{Chan, Event, Loop, Options, Wait};
///
/// let lp = Loop::new()?;
/// let chan = Chan::new(Options::new(16))?;
/// let mut got = Vec::new();
/// let (tx, done) = std::sync::mpsc::channel();
/// lp.add_chan(&chan, move |lp, _id, ev| {
///     match ev {
///         Event::Message(m) => got.push(m.to_vec()),
///         Event::Closed => {
///             tx.send(std::mem::take(&mut got)).unwrap();
///             lp.stop();
///         }
///         _ => {}
///     }
///     Ok(())
/// })?;
/// chan.send(b"one", Wait::Never)?;
/// chan.send(b"two", Wait::Never)?;
/// chan.close();
/// lp.run()?;
/// assert_eq!(done.recv().unwrap(), [b"one".to_vec(), b"two".to_vec()]);
/// # Ok::<(), eventq::Error>(())
/// ```
pub struct Loop {
    inner: Arc<Inner>,
}

/// A cheap, `'static` handle for posting to and stopping a loop from other
/// threads. It does not keep the loop alive: once the loop is dropped,
/// `post` fails with `Error::Closed`.
#[derive(Clone)]
pub struct LoopHandle {
    inner: Weak<Inner>,
}

impl fmt::Debug for Loop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Loop")
            .field("fd", &self.inner.epoll.as_raw_fd())
            .finish()
    }
}

impl fmt::Debug for LoopHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoopHandle").finish_non_exhaustive()
    }
}

/// Marks the current thread as the one running the loop, until dropped.
struct Running<'a> {
    table: &'a Mutex<Table>,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.table.lock().loop_thread = None;
    }
}

impl Loop {
    /// A new loop with no sources.
    pub fn new() -> Result<Loop> {
        let epoll = Epoll::new()?;
        let wake = EventFd::new()?;
        epoll.add(wake.as_raw_fd(), events::IN, WAKE_KEY)?;
        let tag = NEXT_LOOP_TAG.fetch_add(1, Ordering::Relaxed);
        let inner = Arc::new(Inner {
            epoll,
            tag,
            table: Mutex::new(Table {
                tag,
                slots: Vec::new(),
                free: Vec::new(),
                fds: HashSet::new(),
                signals: HashSet::new(),
                running: None,
                loop_thread: None,
            }),
            callback_done: Condvar::new(),
            posts: Mutex::new(VecDeque::new()),
            wake,
            stop: AtomicBool::new(false),
            stops: AtomicU64::new(0),
            disables: AtomicU64::new(0),
            spare: Mutex::new(Vec::new()),
        });
        Ok(Loop { inner })
    }

    /// A handle for other threads.
    pub fn handle(&self) -> LoopHandle {
        LoopHandle {
            inner: Arc::downgrade(&self.inner),
        }
    }

    /// The loop's own fd (its epoll fd): readable while some source has
    /// work. Poll it from another loop and call `run_once(Some(ZERO))` when
    /// it is readable to embed this loop there.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.inner.epoll.as_fd()
    }

    fn entry(&self, kind: Kind, events: u32, callback: Option<Callback>) -> Entry {
        Entry {
            kind,
            events,
            enabled: true,
            registered: true,
            budget: DEFAULT_BUDGET,
            callback,
            error: 0,
        }
    }

    /// Registers `entry`, whose callback `make` builds once the id is known.
    /// On failure the entry and `make` are dropped (a C destroy hook runs).
    fn add_entry(
        &self,
        mut entry: Entry,
        make: impl FnOnce(SourceId) -> Option<Callback>,
    ) -> Result<SourceId> {
        let mut tab = self.inner.table.lock();
        // Checked again under the lock that inserts, so two racing adds of
        // one signal cannot both succeed.
        if let Kind::Signal { signo, .. } = entry.kind {
            if tab.has_signal(signo) {
                return Err(SIGNAL_TAKEN);
            }
        }
        let fd = entry.fd();
        // The table, not epoll, is the authority (see `Table::fds`); the
        // loop's own fds are not sources.
        if tab.fds.contains(&fd) {
            return Err(Error::from_errno(libc::EEXIST));
        }
        if fd == self.inner.wake.as_raw_fd() || fd == self.inner.epoll.as_raw_fd() {
            return Err(Error::Invalid("the fd belongs to the loop"));
        }
        if tab.slots.len() >= u32::MAX as usize - 1 && tab.free.is_empty() {
            return Err(Error::from_errno(libc::ENOMEM));
        }
        let id = tab.vacant_id();
        self.inner.epoll.add(fd, entry.events, id.key)?;
        entry.callback = make(id);
        Ok(tab.insert(entry))
    }

    /// Watches `fd` for `events` (see [`events`]; level-triggered unless
    /// `EDGE`). The fd stays the caller's: close it only after removing the
    /// source.
    pub fn add_fd(
        &self,
        fd: RawFd,
        events: u32,
        cb: impl FnMut(&Loop, SourceId, Event<'_>) -> Result<()> + Send + 'static,
    ) -> Result<SourceId> {
        self.add_fd_with(fd, events, |_| Box::new(cb))
    }

    pub(crate) fn add_fd_with(
        &self,
        fd: RawFd,
        events: u32,
        make: impl FnOnce(SourceId) -> Callback,
    ) -> Result<SourceId> {
        check_events(events)?;
        if fd < 0 {
            return Err(Error::from_errno(libc::EBADF));
        }
        self.add_entry(self.entry(Kind::Fd(fd), events, None), |id| Some(make(id)))
    }

    /// A timer that fires `first` from now, then every `interval` if it is
    /// non-zero (monotonic clock, nanosecond resolution). A one-shot timer
    /// disables itself after firing; `set_timer` re-arms it.
    pub fn add_timer(
        &self,
        first: Duration,
        interval: Duration,
        cb: impl FnMut(&Loop, SourceId, Event<'_>) -> Result<()> + Send + 'static,
    ) -> Result<SourceId> {
        self.add_timer_with(first, interval, |_| Box::new(cb))
    }

    pub(crate) fn add_timer_with(
        &self,
        first: Duration,
        interval: Duration,
        make: impl FnOnce(SourceId) -> Callback,
    ) -> Result<SourceId> {
        let tfd = TimerFd::new()?;
        tfd.set(first, interval)?;
        let periodic = !interval.is_zero();
        let entry = self.entry(Kind::Timer { tfd, periodic }, events::IN, None);
        self.add_entry(entry, |id| Some(make(id)))
    }

    /// Calls back once per message of `chan`, at most the source's budget
    /// per iteration ([`DEFAULT_BUDGET`]), then once with `Event::Closed`
    /// when the channel is closed and drained. The source holds its own
    /// handle to the channel. Several loops may consume one channel: a
    /// message wakes one of them, not all (D4).
    pub fn add_chan(
        &self,
        chan: &Chan,
        cb: impl FnMut(&Loop, SourceId, Event<'_>) -> Result<()> + Send + 'static,
    ) -> Result<SourceId> {
        self.add_chan_with(chan, |_| Box::new(cb))
    }

    pub(crate) fn add_chan_with(
        &self,
        chan: &Chan,
        make: impl FnOnce(SourceId) -> Callback,
    ) -> Result<SourceId> {
        let consumer = Arc::new(chan.loop_consumer());
        let kind = Kind::Chan {
            chan: consumer.clone(),
            eos: false,
        };
        // Exclusive: when several loops consume one channel, a message wakes
        // one of them, not all (each passes an end of stream on, and a loop
        // that stops with messages left wakes the next: `LoopConsumer`).
        let entry = self.entry(kind, events::IN | libc::EPOLLEXCLUSIVE as u32, None);
        self.add_entry(entry, |id| {
            consumer.enlist();
            Some(make(id))
        })
    }

    /// Calls back when `signo` arrives. Blocks the signal in the calling
    /// thread (a signalfd sees only blocked signals): block it in every
    /// thread, ideally before starting any, or another thread may take it.
    /// One source per signal per loop (`Error::Busy` otherwise).
    pub fn add_signal(
        &self,
        signo: i32,
        cb: impl FnMut(&Loop, SourceId, Event<'_>) -> Result<()> + Send + 'static,
    ) -> Result<SourceId> {
        self.add_signal_with(signo, |_| Box::new(cb))
    }

    pub(crate) fn add_signal_with(
        &self,
        signo: i32,
        make: impl FnOnce(SourceId) -> Callback,
    ) -> Result<SourceId> {
        // SIGKILL and SIGSTOP cannot be blocked, so a signalfd never sees them.
        if signo <= 0 || signo >= 65 || signo == libc::SIGKILL || signo == libc::SIGSTOP {
            return Err(Error::Invalid("not a signal that can be watched"));
        }
        // Checked before blocking the signal and making a signalfd for
        // nothing; `add_entry` checks again under its lock.
        if self.inner.table.lock().has_signal(signo) {
            return Err(SIGNAL_TAKEN);
        }
        let (sfd, blocked_here) = SignalFd::new(signo)?;
        let entry = self.entry(Kind::Signal { sfd, signo }, events::IN, None);
        let res = self.add_entry(entry, |id| Some(make(id)));
        if res.is_err() && blocked_here {
            // A failed add leaves the caller's signal mask as it found it.
            crate::sys::unblock_signal(signo);
        }
        res
    }

    /// Adds a memory watch (see [`crate::memcg`]): `cb` runs once per event
    /// it reports, with [`Event::Memory`]. The source owns the watch:
    /// removing the source unregisters it. After `MemEvent::Removed` (its
    /// cgroup is gone) the source is disabled; re-enabled, it disables
    /// itself again at its next wake-up.
    pub fn add_watch(
        &self,
        watch: Watch,
        cb: impl FnMut(&Loop, SourceId, Event<'_>) -> Result<()> + Send + 'static,
    ) -> Result<SourceId> {
        self.add_watch_with(watch, |_| Box::new(cb))
    }

    pub(crate) fn add_watch_with(
        &self,
        watch: Watch,
        make: impl FnOnce(SourceId) -> Callback,
    ) -> Result<SourceId> {
        let source: Box<dyn Source> = Box::new(watch);
        let events = source.interest();
        let entry = self.entry(Kind::Owned(source), events, None);
        self.add_entry(entry, |id| Some(make(id)))
    }

    /// Removes a source. Once this returns its callback never runs again,
    /// even for an event already fetched; called from another thread while
    /// that callback runs, it waits for the callback to return. Its callback
    /// is dropped (a C destroy hook runs) before this returns, or, when
    /// called from inside that very callback, right after the callback.
    pub fn remove(&self, id: SourceId) -> Result<()> {
        let mut tab = self.inner.table.lock();
        let entry = tab.take(id).ok_or(Error::Stale)?;
        self.inner.disables.fetch_add(1, Ordering::Release);
        if entry.registered {
            // The fd may already be closed by its owner; that removed it.
            let _ = self.inner.epoll.delete(entry.fd());
        }
        let me = thread::current().id();
        while tab.running == Some(id) && tab.loop_thread != Some(me) {
            self.inner.callback_done.wait(&mut tab);
        }
        drop(tab);
        drop(entry);
        Ok(())
    }

    /// Enables or disables a source. A disabled source is out of the epoll
    /// set and its callback does not run; enabling re-arms a fired one-shot.
    pub fn set_enabled(&self, id: SourceId, enabled: bool) -> Result<()> {
        let mut tab = self.inner.table.lock();
        let entry = tab.get_mut(id).ok_or(Error::Stale)?;
        self.apply_enabled(entry, id, enabled)
    }

    fn apply_enabled(&self, entry: &mut Entry, id: SourceId, enabled: bool) -> Result<()> {
        let fd = entry.fd();
        if enabled && !entry.enabled {
            if entry.registered {
                self.inner.epoll.modify(fd, entry.events, id.key)?;
            } else {
                self.inner.epoll.add(fd, entry.events, id.key)?;
                entry.registered = true;
            }
        } else if !enabled && entry.registered {
            let _ = self.inner.epoll.delete(fd);
            entry.registered = false;
            if let Kind::Chan { chan, .. } = &entry.kind {
                chan.pass_on();
            }
        }
        if !enabled && entry.enabled {
            self.inner.disables.fetch_add(1, Ordering::Release);
        }
        entry.enabled = enabled;
        Ok(())
    }

    /// Changes the events an fd source waits for.
    pub fn set_events(&self, id: SourceId, events: u32) -> Result<()> {
        check_events(events)?;
        let mut tab = self.inner.table.lock();
        let entry = tab.get_mut(id).ok_or(Error::Stale)?;
        if !matches!(entry.kind, Kind::Fd(_)) {
            return Err(Error::Invalid("events can only be set on an fd source"));
        }
        entry.events = events;
        if entry.enabled {
            let fd = entry.fd();
            self.inner.epoll.modify(fd, events, id.key)?;
        }
        Ok(())
    }

    /// Re-arms a timer source (and enables it).
    pub fn set_timer(&self, id: SourceId, first: Duration, interval: Duration) -> Result<()> {
        let mut tab = self.inner.table.lock();
        let entry = tab.get_mut(id).ok_or(Error::Stale)?;
        let Kind::Timer { tfd, periodic } = &mut entry.kind else {
            return Err(Error::Invalid("not a timer source"));
        };
        tfd.set(first, interval)?;
        *periodic = !interval.is_zero();
        self.apply_enabled(entry, id, true)
    }

    /// Sets how many messages a channel source delivers per iteration (at
    /// least 1): after that many, the other ready sources and posts have
    /// their turn. The only source of a loop driven by `run` has none to give
    /// a turn to and goes on without an `epoll_wait`; `run_once` always
    /// stops at the budget.
    pub fn set_budget(&self, id: SourceId, budget: usize) -> Result<()> {
        if budget == 0 {
            return Err(Error::Invalid("budget must be at least 1"));
        }
        let mut tab = self.inner.table.lock();
        let entry = tab.get_mut(id).ok_or(Error::Stale)?;
        if !matches!(entry.kind, Kind::Chan { .. }) {
            return Err(Error::Invalid("a budget applies to channel sources only"));
        }
        entry.budget = budget;
        Ok(())
    }

    /// The errno of the callback failure that disabled the source, or 0.
    pub fn source_error(&self, id: SourceId) -> Result<i32> {
        let mut tab = self.inner.table.lock();
        Ok(tab.get_mut(id).ok_or(Error::Stale)?.error)
    }

    /// Runs `task` on the loop thread, after the tasks posted before it.
    /// From any thread. Fails with `WouldBlock` when [`POST_CAPACITY`] posts
    /// are pending.
    pub fn post(&self, task: impl FnOnce(&Loop) + Send + 'static) -> Result<()> {
        self.inner.post(Box::new(task))
    }

    /// Makes `run` return; if the loop is not running, the next `run`
    /// returns at once. From any thread.
    ///
    /// A stop made while a callback runs (by that callback or by another
    /// thread) takes effect as soon as that callback returns: no further
    /// callback of this iteration runs, `run` returns, and `run_once`
    /// returns the count so far (the stop then stays pending for the next
    /// `run`, as a stop made outside `run` does). Nothing is lost: a
    /// channel source takes no further message, and the events and posts
    /// not dispatched stay pending for the next iteration (fds are
    /// level-triggered; an edge-triggered or one-shot fd source whose event
    /// was skipped is re-armed, so epoll reports it again if still ready).
    pub fn stop(&self) {
        self.inner.stop();
    }

    fn enter(&self) -> Result<Running<'_>> {
        let mut tab = self.inner.table.lock();
        if tab.loop_thread.is_some() {
            return Err(Error::Busy("the loop is already being run"));
        }
        tab.loop_thread = Some(thread::current().id());
        Ok(Running {
            table: &self.inner.table,
        })
    }

    /// Runs iterations until `stop`.
    pub fn run(&self) -> Result<()> {
        let _running = self.enter()?;
        loop {
            // Read before the flag, so a stop racing with this check either
            // is seen here or ends the iteration's dispatch.
            let since = self.inner.stops.load(Ordering::Acquire);
            if self.inner.stop.swap(false, Ordering::AcqRel) {
                // The stop is consumed; so is its wake-up, or the loop's fd
                // would stay readable with nothing to do (unless posts are
                // pending).
                self.inner.settle_wake();
                return Ok(());
            }
            self.iterate(None, since, true)?;
        }
    }

    /// Runs one iteration, waiting at most `timeout` for an event (`None`:
    /// without limit; zero: not at all, for embedding). Returns the number
    /// of callbacks run. A stop made during the call ends its dispatch
    /// early (see [`Loop::stop`]); one already pending does not.
    pub fn run_once(&self, timeout: Option<Duration>) -> Result<usize> {
        let _running = self.enter()?;
        let since = self.inner.stops.load(Ordering::Acquire);
        self.iterate(timeout, since, false)
    }

    /// Whether `stop` was called since `stops` read `since`.
    fn stopped(&self, since: u64) -> bool {
        self.inner.stops.load(Ordering::Acquire) != since
    }

    /// `lone`: a lone channel source may go past its budget (see
    /// `dispatch_chan`); only `run`, not `run_once`, whose caller counts on
    /// the budget per call.
    fn iterate(&self, timeout: Option<Duration>, since: u64, lone: bool) -> Result<usize> {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; BATCH];
        // A signal interrupting the wait is not an event: wait again for
        // what is left of the timeout, so EINTR never ends an iteration.
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let n = loop {
            let left = match (timeout, deadline) {
                (None, _) => None,
                (Some(_), Some(d)) => Some(d.saturating_duration_since(Instant::now())),
                (Some(t), None) => Some(t), // too far to represent: as good as forever
            };
            match self.inner.epoll.wait(&mut events, left) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                other => break other?,
            }
        };
        let mut calls = 0;
        let loop_tag = self.inner.tag;
        for (i, ev) in events[..n].iter().enumerate() {
            if self.stopped(since) {
                self.rearm_skipped(&events[i..n], loop_tag);
                break;
            }
            // Copies: the struct is packed.
            let (key, revents) = (ev.u64, ev.events);
            calls += if key == WAKE_KEY {
                self.run_posts(since)
            } else {
                self.dispatch(SourceId { key, loop_tag }, revents, since, lone)
            };
        }
        Ok(calls)
    }

    /// Events fetched but left undispatched by a stop. Level-triggered fds
    /// are reported again by the next wait; an edge-triggered or one-shot fd
    /// source is re-armed, which makes epoll report it again if it is still
    /// ready, so its event is not lost either.
    fn rearm_skipped(&self, skipped: &[libc::epoll_event], loop_tag: u64) {
        let mut tab = self.inner.table.lock();
        for ev in skipped {
            let id = SourceId {
                key: ev.u64,
                loop_tag,
            };
            let Some(entry) = tab.get_mut(id) else {
                continue;
            };
            if matches!(entry.kind, Kind::Fd(_))
                && entry.enabled
                && entry.registered
                && entry.events & (events::EDGE | events::ONESHOT) != 0
            {
                let fd = entry.fd();
                let _ = self.inner.epoll.modify(fd, entry.events, id.key);
            }
        }
    }

    /// Runs one source's callbacks for one event; returns how many ran.
    fn dispatch(&self, id: SourceId, revents: u32, since: u64, lone: bool) -> usize {
        let mut tab = self.inner.table.lock();
        let Some(entry) = tab.get_mut(id) else {
            return 0; // removed since the wait
        };
        if !entry.enabled {
            return 0;
        }
        let event = match &mut entry.kind {
            Kind::Chan { chan, eos } => {
                if *eos {
                    // Re-enabled after end of stream, which is delivered once.
                    let _ = self.apply_enabled(entry, id, false);
                    return 0;
                }
                // Held through the dispatch: a callback removing its own
                // source leaves this consumer counted until the dispatch
                // has passed the wake on.
                let (consumer, budget) = (chan.clone(), entry.budget);
                return self.dispatch_chan(tab, id, &consumer, budget, since, lone);
            }
            Kind::Fd(_) => {
                if entry.events & events::ONESHOT != 0 {
                    entry.enabled = false; // the kernel disarmed it
                }
                Event::Fd(revents)
            }
            Kind::Timer { tfd, periodic } => match tfd.read() {
                Ok(0) | Err(_) => return 0, // re-armed or read since the wait
                Ok(n) => {
                    if !*periodic {
                        entry.enabled = false;
                    }
                    Event::Timer(n)
                }
            },
            Kind::Signal { sfd, .. } => match sfd.read() {
                Ok(Some(signo)) => Event::Signal(signo),
                _ => return 0,
            },
            Kind::Owned(src) => {
                // Finished: re-enabled after its last event, and its fd may
                // stay ready, so it is disabled again rather than spin.
                let read = if src.finished() {
                    Ok(None)
                } else {
                    src.read(revents)
                };
                if let Err(e) = &read {
                    entry.error = e.errno();
                }
                if read.is_err() || src.finished() {
                    let _ = self.apply_enabled(entry, id, false);
                }
                match read {
                    Ok(Some(event)) => event,
                    _ => return 0,
                }
            }
        };
        let Some(mut cb) = entry.callback.take() else {
            return 0;
        };
        tab.running = Some(id);
        drop(tab);
        let result = self.call(&mut cb, id, event);
        self.finish(id, cb, result);
        1
    }

    /// Delivers up to `budget` messages, one callback each, stopping early
    /// if the source is removed or disabled by a callback, or the loop is
    /// stopped: a message is taken only to be delivered. With `lone`, while
    /// this is the loop's only source and no post is pending, another budget
    /// follows without an `epoll_wait` (it would find only this source).
    fn dispatch_chan(
        &self,
        mut tab: MutexGuard<'_, Table>,
        id: SourceId,
        consumer: &LoopConsumer,
        budget: usize,
        since: u64,
        lone: bool,
    ) -> usize {
        let chan = consumer.chan();
        let Some(mut cb) = tab.get_mut(id).and_then(|e| e.callback.take()) else {
            return 0;
        };
        tab.running = Some(id);
        drop(tab);
        let mut spare = std::mem::take(&mut *self.inner.spare.lock());
        let mut disables = self.inner.disables.load(Ordering::Acquire);
        let mut calls = 0;
        let mut result = Ok(());
        // Set when the dispatch itself ends the batch (failure, stop,
        // removal), as opposed to the budget or the queue ending it.
        let mut cut = false;
        let end = loop {
            // One catch_unwind for the whole batch rather than one per
            // message (`call`): passing each message through its closure
            // cost a store-forwarding stall per call in a profile. A panic
            // leaves the channel consistent: `recv_each` delivers a message
            // only after it is out of the ring.
            let each = catch_unwind(AssertUnwindSafe(|| {
                chan.recv_each(&mut spare, budget, |msg| {
                    calls += 1;
                    // Moved only on failure: copying the whole result after
                    // every call showed in the profile too.
                    if let Err(e) = cb(self, id, Event::Message(msg)) {
                        result = Err(e);
                        cut = true;
                    } else if self.stopped(since) {
                        cut = true;
                    } else {
                        // A callback may have removed or disabled this source
                        // (or another thread did): only then is the table
                        // worth a look.
                        let now = self.inner.disables.load(Ordering::Acquire);
                        if now != disables {
                            disables = now;
                            cut = !self.is_live(id);
                        }
                    }
                    !cut
                })
            }));
            let end = match each {
                Ok((_, end)) => end,
                Err(_) => {
                    result = Err(panicked());
                    break EachEnd::Stopped;
                }
            };
            // The budget ran out with messages left. With other sources (or
            // posts) they wait for the next `epoll_wait`; a `run` whose only
            // source this is goes on without one. Either way (and when a
            // stop, failure or removal cut the batch short) another loop on
            // this channel, asleep, may take what is left: wake it.
            if end == EachEnd::Stopped {
                consumer.pass_on();
            }
            if end != EachEnd::Stopped || cut || !lone || self.stopped(since) || !self.alone() {
                break end;
            }
        };
        if end == EachEnd::Closed {
            calls += 1;
            result = self.call(&mut cb, id, Event::Closed);
            if let Some(entry) = self.inner.table.lock().get_mut(id) {
                if let Kind::Chan { eos, .. } = &mut entry.kind {
                    *eos = true;
                }
                let _ = self.apply_enabled(entry, id, false);
            }
        }
        *self.inner.spare.lock() = spare;
        self.finish(id, cb, result);
        calls
    }

    /// Whether the loop has one source and no pending post: then no other
    /// work can be ready, and a busy channel source needs no `epoll_wait`
    /// between two budgets (a stop is checked after every callback).
    fn alone(&self) -> bool {
        let sources = {
            let tab = self.inner.table.lock();
            tab.slots.len() - tab.free.len()
        };
        // One lock at a time: nothing else nests these two.
        sources == 1 && self.inner.posts.lock().is_empty()
    }

    fn is_live(&self, id: SourceId) -> bool {
        self.inner
            .table
            .lock()
            .get_mut(id)
            .is_some_and(|e| e.enabled)
    }

    /// Runs a callback; a panic counts as a failure with `ENOTRECOVERABLE`.
    fn call(&self, cb: &mut Callback, id: SourceId, event: Event<'_>) -> Result<()> {
        catch_unwind(AssertUnwindSafe(|| cb(self, id, event))).unwrap_or_else(|_| Err(panicked()))
    }

    /// Puts a callback back after it ran, or drops it (unlocked) if its
    /// source was removed meanwhile; disables the source on failure; then
    /// releases removers waiting on other threads.
    fn finish(&self, id: SourceId, cb: Callback, result: Result<()>) {
        let mut tab = self.inner.table.lock();
        match tab.get_mut(id) {
            Some(entry) => {
                entry.callback = Some(cb);
                if let Err(e) = result {
                    entry.error = e.errno();
                    let _ = self.apply_enabled(entry, id, false);
                }
            }
            None => {
                drop(tab);
                drop(cb);
                tab = self.inner.table.lock();
            }
        }
        tab.running = None;
        self.inner.callback_done.notify_all();
    }

    /// The wake eventfd came up: runs pending posts in order, at most
    /// [`POST_BUDGET`], until a stop. The fd is lowered first, under the
    /// queue lock, so a post made meanwhile either is run here or raises it
    /// again; what is left (budget, stop) raises it again for the next
    /// iteration. A stop's raise is consumed here too: its flag stays set
    /// for `run`, and a `run_once` caller (an embedding loop) is not woken
    /// forever.
    fn run_posts(&self, since: u64) -> usize {
        {
            let _posts = self.inner.posts.lock();
            self.inner.wake.lower();
        }
        let mut calls = 0;
        while calls < POST_BUDGET && !self.stopped(since) {
            let Some(task) = self.inner.posts.lock().pop_front() else {
                return calls;
            };
            calls += 1;
            let _ = catch_unwind(AssertUnwindSafe(|| task(self)));
        }
        self.inner.settle_wake();
        calls
    }
}

impl Inner {
    /// Queues a task; raises the wake fd only when the queue leaves empty,
    /// so a burst of posts costs one write (libuv's async coalescing).
    fn post(&self, task: Task) -> Result<()> {
        let mut posts = self.posts.lock();
        if posts.len() >= POST_CAPACITY {
            return Err(Error::WouldBlock);
        }
        posts.push_back(task);
        if posts.len() == 1 {
            // Under the lock, so `run_posts`' lower cannot slip in between
            // and leave a task without its wake-up.
            self.wake.write(1)?;
        }
        Ok(())
    }

    /// Makes the wake fd readable iff posts are pending (a consumed stop
    /// leaves nothing else to wake for).
    fn settle_wake(&self) {
        let posts = self.posts.lock();
        self.wake.lower();
        if !posts.is_empty() {
            let _ = self.wake.write(1);
        }
    }

    fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.stops.fetch_add(1, Ordering::AcqRel);
        // Wake a blocked epoll_wait. A second raise only adds to the
        // counter, which the next lower clears.
        let _ = self.wake.write(1);
    }
}

impl LoopHandle {
    /// The loop, while it exists. A `Loop` made here does not own the loop:
    /// dropping it only releases this reference.
    #[cfg(feature = "capi")]
    pub(crate) fn upgrade(&self) -> Result<Loop> {
        self.inner
            .upgrade()
            .map(|inner| Loop { inner })
            .ok_or(Error::Stale)
    }

    /// As [`Loop::post`]; `Error::Closed` once the loop is gone.
    pub fn post(&self, task: impl FnOnce(&Loop) + Send + 'static) -> Result<()> {
        self.inner
            .upgrade()
            .ok_or(Error::Closed)?
            .post(Box::new(task))
    }

    /// As [`Loop::stop`]; does nothing once the loop is gone.
    pub fn stop(&self) {
        if let Some(inner) = self.inner.upgrade() {
            inner.stop();
        }
    }
}

/// What a panicking callback counts as.
fn panicked() -> Error {
    Error::from_errno(libc::ENOTRECOVERABLE)
}

fn check_events(events: u32) -> Result<()> {
    if events & !events::ALLOWED != 0 {
        return Err(Error::Invalid("unknown event flags"));
    }
    if events & events::WANTED == 0 {
        return Err(Error::Invalid("events must include IN, OUT, PRI or RDHUP"));
    }
    Ok(())
}

impl AsFd for Loop {
    /// The loop's own fd, as [`Loop::fd`].
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd()
    }
}
