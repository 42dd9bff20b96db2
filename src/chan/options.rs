// SPDX-License-Identifier: MIT OR Apache-2.0
//! What a channel is made with and what it reports: its options, their
//! validated limits, how long a call may wait, and its counters.

use std::fmt;
use std::time::Duration;

use crate::error::{Error, Result};

/// The largest capacity a channel accepts. A channel's slots (64 bytes
/// each) are allocated zeroed when it is created, and its first message
/// over 48 bytes allocates a buffer slot (24 bytes each, plus the reused
/// buffer of each slot that has carried such a message), so a capacity is
/// an address-space commitment of about 1.4 GiB at this maximum; the slots'
/// pages become resident only as messages first reach them.
pub const MAX_CAPACITY: usize = 1 << 24;

/// Maximum message size when the options do not set one.
pub const DEFAULT_MAX_MSG_SIZE: usize = 1 << 20;

/// Maximum message size of a process-shared channel when the options do
/// not set one: each of its slots holds a whole message.
pub const SHARED_DEFAULT_MAX_MSG_SIZE: usize = 4096;

/// Called once for each message still queued when the last handle goes away.
pub type DropFn = Box<dyn Fn(&[u8]) + Send + Sync>;

/// How long a send or receive may wait.
///
/// A call on an in-process channel that has to wait while no other call of
/// its kind waits first looks again every 4 us, yielding the CPU in
/// between, for up to 16 us (a sleeping thread takes longer than that to
/// run again); then it sleeps until woken. Once such looks have missed in
/// 32 waits in a row (a mostly idle channel), its calls of that kind sleep
/// at once, but for every 16th.
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
    pub(super) on_drop: Option<DropFn>,
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

impl Options {
    /// These options with a process-shared channel's default message size
    /// limit, if they set none.
    pub(super) fn shared_defaults(mut self) -> Options {
        if self.max_msg_size.is_none() && self.max_bytes.is_none() {
            self.max_msg_size = Some(SHARED_DEFAULT_MAX_MSG_SIZE);
        }
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
pub(super) struct Limits {
    pub(super) capacity: usize,
    pub(super) max_bytes: Option<usize>,
    pub(super) max_msg_size: usize,
    pub(super) low_water: usize,
    pub(super) low_water_bytes: usize,
}

impl Limits {
    pub(super) fn from_options(o: &Options) -> Result<Limits> {
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

/// A snapshot of a channel's counters. Non-exhaustive: a later release may
/// count more, so it is read, not built, outside this crate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
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
    /// Counted from the first time the fd is asked for (`recv_fd`, a loop
    /// source, a `Consumer`; one write then if messages are pending):
    /// before that nobody can poll it and nothing writes it. Compare with
    /// `sent` to see the wakeup economy.
    pub recv_doorbell_rings: u64,
    /// Writes to the send eventfd: one at creation, one per drain to the
    /// low-water mark after the queue was full (or refused a send),
    /// and one at close (D9). Counted whether or not the fd exists yet (it
    /// is created when first asked for, at the level the count implies).
    pub send_doorbell_rings: u64,
    /// Whether the channel is closed.
    pub closed: bool,
}
