// SPDX-License-Identifier: MIT OR Apache-2.0
//! The loop: an epoll dispatcher over fd, timer, channel, signal and
//! memory-watch sources, with posts and stop from any thread (D8).
//!
//! One iteration waits for ready sources, runs their callbacks (once per fd
//! event, per timer wake-up with its expiration count, per signal, per
//! memory event, per channel message up to the source's budget), then the
//! posts. Callbacks run with no lock held; once [`Loop::remove`] returns,
//! the source's callback never runs again. A stop takes effect when the
//! running callback returns ([`Loop::stop`]).
//!
//! This file is the API ([`Loop`], [`LoopHandle`]): making a loop, the one
//! add path, changing and removing sources, running and stopping. The
//! machinery sits beside it, a file per job: `table.rs` (the source table
//! and the ids of its slots), `dispatch.rs` (one iteration and running a
//! callback), `chan_source.rs` (a channel source's dispatch), `posts.rs`
//! (the task queue, the wake eventfd and stop), `event.rs` (what callbacks
//! see). The crate path is `event_loop` since `loop` is a Rust keyword.

#![forbid(unsafe_code)]

mod chan_source;
mod dispatch;
mod event;
mod posts;
mod table;

use std::collections::VecDeque;
use std::fmt;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

pub use self::chan_source::DEFAULT_BUDGET;
pub use self::event::{events, Batch, Callback, Event};
pub use self::posts::POST_CAPACITY;
pub use self::table::SourceId;

use self::posts::Task;
use self::table::{new_loop_tag, Entry, Kind, Table, WAKE_KEY};
use crate::chan::Chan;
use crate::error::{Error, Result};
use crate::memcg::Watch;
use crate::sys::{unblock_signal, Epoll, EventFd, SignalFd, TimerFd};

const SIGNAL_TAKEN: Error = Error::Busy("this signal already has a source in this loop");

/// A new source, as [`Loop::add_with`] takes it: one variant per kind, with
/// what its add call takes.
pub(crate) enum NewSource<'a> {
    /// An fd the caller keeps, and the [`events`] to wait for.
    Fd { fd: RawFd, events: u32 },
    /// A timerfd armed to fire `first` from now, then every `interval`.
    Timer { first: Duration, interval: Duration },
    /// A channel's receive side; `batch`: one callback per batch of
    /// messages (`Event::Batch`) instead of one per message.
    Chan { chan: &'a Chan, batch: bool },
    /// A signal number.
    Signal(i32),
    /// A memory watch, which the source takes over.
    Memory(Watch),
}

/// What a [`Loop`] and its [`LoopHandle`]s share.
struct Shared {
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
    stop_pending: AtomicBool,
    /// How many stops were made: dispatch ends early once it moved since
    /// the iteration began.
    stop_count: AtomicU64,
    /// Counts removals and disables of sources, so a channel source's
    /// dispatch learns with one atomic load per message whether it must
    /// look at the table (under its lock) before the next callback.
    disable_count: AtomicU64,
    /// Channel sources' spare buffer: a long message is received by
    /// swapping its slot's buffer with this one (`Chan::recv_each`), so it
    /// is never copied. Only the running thread dispatches and it takes the
    /// buffer out for the duration, so the lock is never contended.
    spare: Mutex<Vec<u8>>,
    /// Batch channel sources' buffers (the messages packed back to back and
    /// their lengths), taken out by the running dispatch like `spare`.
    batch: Mutex<(Vec<u8>, Vec<usize>)>,
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
    shared: Arc<Shared>,
}

/// A cheap, `'static` handle for posting to and stopping a loop from other
/// threads. It does not keep the loop alive: once the loop is dropped,
/// `post` fails with `Error::Closed`.
#[derive(Clone)]
pub struct LoopHandle {
    shared: Weak<Shared>,
}

impl fmt::Debug for Loop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Loop")
            .field("fd", &self.shared.epoll.as_raw_fd())
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
        let tag = new_loop_tag();
        let shared = Arc::new(Shared {
            epoll,
            tag,
            table: Mutex::new(Table::new(tag)),
            callback_done: Condvar::new(),
            posts: Mutex::new(VecDeque::new()),
            wake,
            stop_pending: AtomicBool::new(false),
            stop_count: AtomicU64::new(0),
            disable_count: AtomicU64::new(0),
            spare: Mutex::new(Vec::new()),
            batch: Mutex::new((Vec::new(), Vec::new())),
        });
        Ok(Loop { shared })
    }

    /// A handle for other threads.
    pub fn handle(&self) -> LoopHandle {
        LoopHandle {
            shared: Arc::downgrade(&self.shared),
        }
    }

    /// The loop's own fd (its epoll fd): readable while some source has
    /// work. Poll it from another loop and call `run_once(Some(ZERO))` when
    /// it is readable to embed this loop there.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.shared.epoll.as_fd()
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
        self.add_with(NewSource::Fd { fd, events }, |_| Box::new(cb))
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
        self.add_with(NewSource::Timer { first, interval }, |_| Box::new(cb))
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
        self.add_with(NewSource::Chan { chan, batch: false }, |_| Box::new(cb))
    }

    /// As [`Loop::add_chan`], but the callback runs once per batch of
    /// messages, with [`Event::Batch`]: every message the channel holds, up
    /// to the source's budget, taken in order and handed over together, so
    /// a consumer that can handle several at once pays the callback's fixed
    /// cost once per batch. Every message of a batch is delivered by that
    /// call: a stop, removal or failure that the callback makes leaves the
    /// later messages in the channel, as for `add_chan`. End of stream is
    /// one more call, with `Event::Closed`.
    pub fn add_chan_batch(
        &self,
        chan: &Chan,
        cb: impl FnMut(&Loop, SourceId, Event<'_>) -> Result<()> + Send + 'static,
    ) -> Result<SourceId> {
        self.add_with(NewSource::Chan { chan, batch: true }, |_| Box::new(cb))
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
        self.add_with(NewSource::Signal(signo), |_| Box::new(cb))
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
        self.add_with(NewSource::Memory(watch), |_| Box::new(cb))
    }

    /// The add path of every kind: checks the arguments, makes the source's
    /// fd, and registers it with the callback `make` builds once the id is
    /// known (the C ABI's callback holds a handle that names the id). On
    /// failure `make` is dropped unrun (a C destroy hook runs) and nothing
    /// is left behind: no fd in the epoll set, no signal blocked by this
    /// call.
    pub(crate) fn add_with(
        &self,
        source: NewSource<'_>,
        make: impl FnOnce(SourceId) -> Callback,
    ) -> Result<SourceId> {
        self.add_with_budget(source, DEFAULT_BUDGET, make)
    }

    /// `add_with` for a channel source whose budget starts at `budget` (at
    /// least 1), so that its first dispatch already keeps to it.
    pub(crate) fn add_with_budget(
        &self,
        source: NewSource<'_>,
        budget: usize,
        make: impl FnOnce(SourceId) -> Callback,
    ) -> Result<SourceId> {
        // A signal this call blocked, to unblock if the add fails.
        let mut blocked_here = None;
        let (kind, events) = match source {
            NewSource::Fd { fd, events } => {
                events::check(events)?;
                if fd < 0 {
                    return Err(Error::from_errno(libc::EBADF));
                }
                (Kind::Fd(fd), events)
            }
            NewSource::Timer { first, interval } => {
                let tfd = TimerFd::new()?;
                tfd.set(first, interval)?;
                let periodic = !interval.is_zero();
                (Kind::Timer { tfd, periodic }, events::IN)
            }
            NewSource::Chan { chan, batch } => {
                let kind = Kind::Chan {
                    consumer: Arc::new(chan.loop_consumer()),
                    closed_delivered: false,
                    batch,
                };
                // Exclusive: when several loops consume one channel, a
                // message wakes one of them, not all (each passes an end of
                // stream on, and a loop that stops with messages left wakes
                // the next: `LoopConsumer`). Not on a process-shared
                // channel's fd, an epoll fd, which the kernel refuses it for.
                let exclusive = if chan.exclusive_wake() {
                    libc::EPOLLEXCLUSIVE as u32
                } else {
                    0
                };
                (kind, events::IN | exclusive)
            }
            NewSource::Signal(signo) => {
                // SIGKILL and SIGSTOP cannot be blocked, so a signalfd never
                // sees them.
                if signo <= 0 || signo >= 65 || signo == libc::SIGKILL || signo == libc::SIGSTOP {
                    return Err(Error::Invalid("not a signal that can be watched"));
                }
                // Checked before blocking the signal and making a signalfd
                // for nothing; `insert` checks again under its lock.
                if self.shared.table.lock().has_signal(signo) {
                    return Err(SIGNAL_TAKEN);
                }
                let (sfd, blocked) = SignalFd::new(signo)?;
                if blocked {
                    blocked_here = Some(signo);
                }
                (Kind::Signal { sfd, signo }, events::IN)
            }
            NewSource::Memory(watch) => {
                let events = watch.interest();
                (Kind::Memory(Box::new(watch)), events)
            }
        };
        let res = self.insert(Entry::new(kind, events, budget.max(1)), make);
        if let (Err(_), Some(signo)) = (&res, blocked_here) {
            // A failed add leaves the caller's signal mask as it found it.
            unblock_signal(signo);
        }
        res
    }

    /// Registers `entry` under the table lock, with the callback `make`
    /// builds once the id is known. On failure the entry and `make` are
    /// dropped after the lock is released (a C destroy hook runs unlocked).
    fn insert(
        &self,
        mut entry: Entry,
        make: impl FnOnce(SourceId) -> Callback,
    ) -> Result<SourceId> {
        let mut table = self.shared.table.lock();
        // Checked again under the lock that inserts, so two racing adds of
        // one signal cannot both succeed.
        if let Kind::Signal { signo, .. } = entry.kind {
            if table.has_signal(signo) {
                return Err(SIGNAL_TAKEN);
            }
        }
        let fd = entry.fd();
        // The table, not epoll, is the authority (see `Table::fds`); the
        // loop's own fds are not sources.
        if table.has_fd(fd) {
            return Err(Error::from_errno(libc::EEXIST));
        }
        if fd == self.shared.wake.as_raw_fd() || fd == self.shared.epoll.as_raw_fd() {
            return Err(Error::Invalid("the fd belongs to the loop"));
        }
        if table.is_full() {
            return Err(Error::from_errno(libc::ENOMEM));
        }
        let id = table.vacant_id();
        self.shared.epoll.add(fd, entry.events, id.key)?;
        // A channel source counts as a consumer only once registered, so a
        // failed add neither counts nor hands wakes on.
        if let Kind::Chan { consumer, .. } = &entry.kind {
            consumer.enlist();
        }
        entry.callback = Some(make(id));
        Ok(table.insert(entry))
    }

    /// Removes a source. Once this returns its callback never runs again,
    /// even for an event already fetched; called from another thread while
    /// that callback runs, it waits for the callback to return. Its callback
    /// is dropped (a C destroy hook runs) before this returns, or, when
    /// called from inside that very callback, right after the callback.
    pub fn remove(&self, id: SourceId) -> Result<()> {
        let mut table = self.shared.table.lock();
        let entry = table.take(id).ok_or(Error::Stale)?;
        self.shared.disable_count.fetch_add(1, Ordering::Release);
        if entry.in_epoll {
            // The fd may already be closed by its owner; that removed it.
            let _ = self.shared.epoll.delete(entry.fd());
        }
        let me = thread::current().id();
        while table.running == Some(id) && table.loop_thread != Some(me) {
            self.shared.callback_done.wait(&mut table);
        }
        drop(table);
        drop(entry);
        Ok(())
    }

    /// Enables or disables a source. A disabled source is out of the epoll
    /// set and its callback does not run; enabling re-arms a fired one-shot.
    pub fn set_enabled(&self, id: SourceId, enabled: bool) -> Result<()> {
        let mut table = self.shared.table.lock();
        let entry = table.get_mut(id).ok_or(Error::Stale)?;
        self.apply_enabled(entry, id, enabled)
    }

    /// `set_enabled` on an entry under the table lock. Disabling a channel
    /// source hands its wake on to another loop on the channel.
    fn apply_enabled(&self, entry: &mut Entry, id: SourceId, enabled: bool) -> Result<()> {
        let fd = entry.fd();
        if enabled && !entry.enabled {
            if entry.in_epoll {
                self.shared.epoll.modify(fd, entry.events, id.key)?;
            } else {
                self.shared.epoll.add(fd, entry.events, id.key)?;
                entry.in_epoll = true;
            }
        } else if !enabled && entry.in_epoll {
            let _ = self.shared.epoll.delete(fd);
            entry.in_epoll = false;
            if let Kind::Chan { consumer, .. } = &entry.kind {
                consumer.pass_on();
            }
        }
        if !enabled && entry.enabled {
            self.shared.disable_count.fetch_add(1, Ordering::Release);
        }
        entry.enabled = enabled;
        Ok(())
    }

    /// Changes the events an fd source waits for.
    pub fn set_events(&self, id: SourceId, events: u32) -> Result<()> {
        events::check(events)?;
        let mut table = self.shared.table.lock();
        let entry = table.get_mut(id).ok_or(Error::Stale)?;
        if !matches!(entry.kind, Kind::Fd(_)) {
            return Err(Error::Invalid("events can only be set on an fd source"));
        }
        entry.events = events;
        if entry.enabled {
            let fd = entry.fd();
            self.shared.epoll.modify(fd, events, id.key)?;
        }
        Ok(())
    }

    /// Re-arms a timer source (and enables it).
    pub fn set_timer(&self, id: SourceId, first: Duration, interval: Duration) -> Result<()> {
        let mut table = self.shared.table.lock();
        let entry = table.get_mut(id).ok_or(Error::Stale)?;
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
        let mut table = self.shared.table.lock();
        let entry = table.get_mut(id).ok_or(Error::Stale)?;
        if !matches!(entry.kind, Kind::Chan { .. }) {
            return Err(Error::Invalid("a budget applies to channel sources only"));
        }
        entry.budget = budget;
        Ok(())
    }

    /// The errno of the callback failure that disabled the source, or 0.
    pub fn source_error(&self, id: SourceId) -> Result<i32> {
        let mut table = self.shared.table.lock();
        Ok(table.get_mut(id).ok_or(Error::Stale)?.error)
    }

    /// Runs `task` on the loop thread, after the tasks posted before it.
    /// From any thread. Fails with `WouldBlock` when [`POST_CAPACITY`] posts
    /// are pending.
    pub fn post(&self, task: impl FnOnce(&Loop) + Send + 'static) -> Result<()> {
        self.shared.post(Box::new(task))
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
        self.shared.stop();
    }

    fn enter(&self) -> Result<Running<'_>> {
        let mut table = self.shared.table.lock();
        if table.loop_thread.is_some() {
            return Err(Error::Busy("the loop is already being run"));
        }
        table.loop_thread = Some(thread::current().id());
        Ok(Running {
            table: &self.shared.table,
        })
    }

    /// Runs iterations until `stop`.
    pub fn run(&self) -> Result<()> {
        let _running = self.enter()?;
        loop {
            // Read before the flag, so a stop racing with this check either
            // is seen here or ends the iteration's dispatch.
            let stops_seen = self.shared.stops_now();
            if self.shared.take_stop() {
                // The stop is consumed; so is its wake-up, or the loop's fd
                // would stay readable with nothing to do (unless posts are
                // pending).
                self.shared.settle_wake();
                return Ok(());
            }
            self.iterate(None, stops_seen, true)?;
        }
    }

    /// Runs one iteration, waiting up to `timeout` for an event (`None`:
    /// without limit; zero: not at all, for embedding; else rounded up to
    /// whole milliseconds, epoll's unit, so any positive timeout waits at
    /// least 1 ms unless an event comes first). Returns the number
    /// of callbacks run. A stop made during the call ends its dispatch
    /// early (see [`Loop::stop`]); one already pending does not.
    pub fn run_once(&self, timeout: Option<Duration>) -> Result<usize> {
        let _running = self.enter()?;
        let stops_seen = self.shared.stops_now();
        self.iterate(timeout, stops_seen, false)
    }
}

impl LoopHandle {
    /// The loop, while it exists; `Error::Stale` once it is gone. The
    /// `Loop` made here shares the loop rather than owning it: dropping it
    /// only releases this reference.
    pub(crate) fn upgrade(&self) -> Result<Loop> {
        self.shared
            .upgrade()
            .map(|shared| Loop { shared })
            .ok_or(Error::Stale)
    }

    /// As [`Loop::post`]; `Error::Closed` once the loop is gone.
    pub fn post(&self, task: impl FnOnce(&Loop) + Send + 'static) -> Result<()> {
        self.upgrade().map_err(|_| Error::Closed)?.post(task)
    }

    /// As [`Loop::stop`]; does nothing once the loop is gone.
    pub fn stop(&self) {
        if let Ok(lp) = self.upgrade() {
            lp.stop();
        }
    }
}

impl AsFd for Loop {
    /// The loop's own fd, as [`Loop::fd`].
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd()
    }
}
