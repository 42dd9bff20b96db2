// SPDX-License-Identifier: MIT OR Apache-2.0
//! The source table: every source of a loop in a slot, with the ids that
//! name them. One mutex guards it (in `mod.rs`), and it is never held while
//! user code runs.
//!
//! A source's id is its slot index and the slot's generation (the epoll
//! event's data) plus its loop's tag. A removal bumps the generation, so an
//! event fetched for a removed source finds a stale id and is dropped, even
//! if a new source took the same fd or slot (D8), and an id used on another
//! loop is stale rather than someone else's source.

use std::collections::HashSet;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::ThreadId;

use super::event::Callback;
use crate::chan::LoopConsumer;
use crate::memcg::Watch;
use crate::sys::{SignalFd, TimerFd};

/// The epoll key of the loop's wake eventfd: no source id has it, since
/// slot indexes stay below `u32::MAX` (see [`Table::is_full`]).
pub(super) const WAKE_KEY: u64 = u64::MAX;

/// Identifies a source: its loop, slot index and generation, so an id is
/// never reused for another source and means nothing to another loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SourceId {
    /// Slot index and generation; the epoll event's data.
    pub(super) key: u64,
    pub(super) loop_tag: u64,
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

/// A new loop's tag.
pub(super) fn new_loop_tag() -> u64 {
    NEXT_LOOP_TAG.fetch_add(1, Ordering::Relaxed)
}

/// What a source is, with the fd it is polled by and what it needs to turn
/// a wake-up into an event.
pub(super) enum Kind {
    /// The fd is the caller's.
    Fd(RawFd),
    Timer {
        tfd: TimerFd,
        periodic: bool,
    },
    Chan {
        consumer: Arc<LoopConsumer>,
        /// `Event::Closed` was delivered; it is delivered once only.
        closed_delivered: bool,
        /// Delivers its messages a batch per callback (`Event::Batch`),
        /// not one per callback.
        batch: bool,
    },
    Signal {
        sfd: SignalFd,
        signo: i32,
    },
    /// A memory watch: it owns its fd and reads its own events. Boxed so
    /// that the largest watch does not widen every slot of the table.
    Memory(Box<Watch>),
}

/// A source in its slot.
pub(super) struct Entry {
    pub(super) kind: Kind,
    /// Epoll flags the source is registered with.
    pub(super) events: u32,
    pub(super) enabled: bool,
    /// Whether the fd is in the epoll set (a fired one-shot stays in it,
    /// disarmed, until re-armed with EPOLL_CTL_MOD).
    pub(super) in_epoll: bool,
    /// Channel sources: messages per iteration.
    pub(super) budget: usize,
    /// Taken out while the callback runs.
    pub(super) callback: Option<Callback>,
    /// The errno of the failure that disabled the source, or 0.
    pub(super) error: i32,
}

impl Entry {
    /// An enabled source, its callback still to come (it is made once the
    /// id is known).
    pub(super) fn new(kind: Kind, events: u32, budget: usize) -> Entry {
        Entry {
            kind,
            events,
            enabled: true,
            in_epoll: true,
            budget,
            callback: None,
            error: 0,
        }
    }

    /// The fd in the epoll set for this source.
    pub(super) fn fd(&self) -> RawFd {
        match &self.kind {
            Kind::Fd(fd) => *fd,
            Kind::Timer { tfd, .. } => tfd.as_raw_fd(),
            Kind::Chan { consumer, .. } => consumer.chan().recv_raw_fd(),
            Kind::Signal { sfd, .. } => sfd.as_raw_fd(),
            Kind::Memory(watch) => watch.fd().as_raw_fd(),
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

pub(super) struct Table {
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
    pub(super) running: Option<SourceId>,
    /// The thread inside `run`/`run_once`, if any.
    pub(super) loop_thread: Option<ThreadId>,
}

impl Table {
    pub(super) fn new(tag: u64) -> Table {
        Table {
            tag,
            slots: Vec::new(),
            free: Vec::new(),
            fds: HashSet::new(),
            signals: HashSet::new(),
            running: None,
            loop_thread: None,
        }
    }

    fn id(&self, index: u32, gen: u32) -> SourceId {
        SourceId {
            key: (u64::from(index) << 32) | u64::from(gen),
            loop_tag: self.tag,
        }
    }

    /// How many sources there are, disabled ones included.
    pub(super) fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Whether no slot is left: indexes stay below `u32::MAX`, so no id
    /// meets [`WAKE_KEY`].
    pub(super) fn is_full(&self) -> bool {
        self.slots.len() >= u32::MAX as usize - 1 && self.free.is_empty()
    }

    /// Whether `fd` already has a source.
    pub(super) fn has_fd(&self, fd: RawFd) -> bool {
        self.fds.contains(&fd)
    }

    /// Whether `signo` already has a source.
    pub(super) fn has_signal(&self, signo: i32) -> bool {
        self.signals.contains(&signo)
    }

    /// The slot `id` names, if the id is of this loop and this generation.
    fn slot_mut(&mut self, id: SourceId) -> Option<&mut Slot> {
        if id.loop_tag != self.tag {
            return None;
        }
        self.slots
            .get_mut(id.index())
            .filter(|slot| slot.gen == id.gen())
    }

    pub(super) fn get_mut(&mut self, id: SourceId) -> Option<&mut Entry> {
        self.slot_mut(id)?.entry.as_mut()
    }

    /// The id the next insert will get.
    pub(super) fn vacant_id(&self) -> SourceId {
        match self.free.last() {
            Some(&i) => self.id(i, self.slots[i as usize].gen),
            None => self.id(self.slots.len() as u32, 0),
        }
    }

    pub(super) fn insert(&mut self, entry: Entry) -> SourceId {
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

    /// Takes a source out of its slot; its id (and any copy of it) is stale
    /// from here on.
    pub(super) fn take(&mut self, id: SourceId) -> Option<Entry> {
        let slot = self.slot_mut(id)?;
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
