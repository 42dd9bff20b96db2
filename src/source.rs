// SPDX-License-Identifier: MIT OR Apache-2.0
//! What the loop needs of a source that owns its fd and reads its own
//! events (the memory watches of [`crate::memcg`]): one source kind of the
//! loop for every such type, instead of an fd source per type with its own
//! dispatch around it.

use std::os::fd::RawFd;

use crate::error::Result;
use crate::event_loop::Event;

/// A source that owns the fd the loop polls and turns each wake-up into at
/// most one event. The loop owns the source: removing it (or freeing the
/// loop) drops it after its fd left the epoll set.
pub(crate) trait Source: Send {
    /// The fd to poll; valid as long as the source.
    fn fd(&self) -> RawFd;

    /// The epoll events to wait for (level-triggered).
    fn interest(&self) -> u32;

    /// Handles a wake-up with epoll flags `revents`: the event to deliver,
    /// or `None` for nothing (a spurious wake-up, nothing changed). An error
    /// disables the source with its errno (as a failing callback does).
    fn read(&mut self, revents: u32) -> Result<Option<Event<'static>>>;

    /// Whether the source has reported its last event (a memory watch whose
    /// cgroup was removed). The loop disables it once that event is read,
    /// and again at any later wake-up if it is re-enabled, since its fd may
    /// stay ready.
    fn finished(&self) -> bool;
}
