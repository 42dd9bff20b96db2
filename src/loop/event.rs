// SPDX-License-Identifier: MIT OR Apache-2.0
//! What a callback receives and is: the `events` flags an fd source asks
//! for, the `Event` a callback is called with, and the `Callback` type.
//! Kept apart from the loop's machinery because every user of the loop
//! (tests, bindings, the C ABI) speaks these and nothing else.

use super::{Loop, SourceId};
use crate::error::{Error, Result};
use crate::memcg::MemEvent;

/// Readiness flags for fd sources: the epoll values, so they pass through.
pub mod events {
    use crate::error::{Error, Result};

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
    const ALLOWED: u32 = IN | PRI | OUT | ERR | HUP | RDHUP | EDGE | ONESHOT;
    /// Of which at least one must be present (ERR and HUP are always on).
    const WANTED: u32 = IN | PRI | OUT | RDHUP;

    /// Refuses flags a caller may not ask for, and a set that asks for
    /// nothing to wait on.
    pub(crate) fn check(events: u32) -> Result<()> {
        if events & !ALLOWED != 0 {
            return Err(Error::Invalid("unknown event flags"));
        }
        if events & WANTED == 0 {
            return Err(Error::Invalid("events must include IN, OUT, PRI or RDHUP"));
        }
        Ok(())
    }
}

/// What a callback is called for. Non-exhaustive: a new source kind brings
/// a variant, so a `match` needs a `_` arm.
#[derive(Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event<'a> {
    /// An fd source is ready; the `events` flags that are set.
    Fd(u32),
    /// A timer expired this many times since the last call (more than 1
    /// means expirations were missed; the period does not drift).
    Timer(u64),
    /// A channel source's next message.
    Message(&'a [u8]),
    /// A batch channel source's next messages, in order (see
    /// [`Loop::add_chan_batch`]); never empty.
    Batch(Batch<'a>),
    /// A channel source's channel is closed and drained; after this call the
    /// source is disabled.
    Closed,
    /// A signal source's signal arrived.
    Signal(i32),
    /// A memory watch's event (see [`crate::memcg`]). After
    /// `MemEvent::Removed` the source is disabled.
    Memory(MemEvent),
}

/// The messages of one batch: packed back to back in one buffer, with
/// their lengths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Batch<'a> {
    data: &'a [u8],
    lens: &'a [usize],
}

impl<'a> Batch<'a> {
    pub(super) fn new(data: &'a [u8], lens: &'a [usize]) -> Batch<'a> {
        debug_assert_eq!(lens.iter().sum::<usize>(), data.len());
        Batch { data, lens }
    }

    /// The number of messages.
    pub fn len(&self) -> usize {
        self.lens.len()
    }

    /// Whether there is no message (never, for a batch a callback gets).
    pub fn is_empty(&self) -> bool {
        self.lens.is_empty()
    }

    /// The messages packed back to back.
    pub fn data(&self) -> &'a [u8] {
        self.data
    }

    /// Each message's length, in order.
    pub fn lens(&self) -> &'a [usize] {
        self.lens
    }

    /// The messages, in order.
    pub fn iter(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        let data = self.data;
        self.lens.iter().scan(0usize, move |off, &n| {
            let m = &data[*off..*off + n];
            *off += n;
            Some(m)
        })
    }
}

/// A source's callback. An `Err` disables the source and is kept as its
/// error (see [`Loop::source_error`]); so is a panic.
pub type Callback = Box<dyn FnMut(&Loop, SourceId, Event<'_>) -> Result<()> + Send>;

/// What a panicking callback counts as.
pub(super) fn panicked() -> Error {
    Error::from_errno(libc::ENOTRECOVERABLE)
}
