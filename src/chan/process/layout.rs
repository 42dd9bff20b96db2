// SPDX-License-Identifier: MIT OR Apache-2.0
//! The shared memory of a process-shared channel, line by line.
//!
//! ```text
//! line 0       the layout: magic, version, capacity, slot size, message
//!              size limit, low-water mark (written once by the creator)
//! line 2       tail: position of the next message to send, and flags
//! line 4       head: position of the next message to receive, and flags
//! line 6       peak depth (for the stats)
//! line 8       the doorbell lock and its requests (see `bells.rs`)
//! line 12...   the slots, `slot_lines` lines each: the message's length,
//!              then its bytes
//! ```
//!
//! Every word is plain data, and the importer trusts none of it: it reads
//! the layout once, checks it against the memfd's sealed size, keeps its
//! own copy, and never reads it again.

use crate::chan::options::{Limits, MAX_CAPACITY};
use crate::error::{Error, Result};

/// Lines before the first slot.
pub(in crate::chan) const HEADER_LINES: usize = 12;
pub(in crate::chan) const TAIL_LINE: usize = 2;
pub(in crate::chan) const HEAD_LINE: usize = 4;
pub(in crate::chan) const PEAK_LINE: usize = 6;
pub(in crate::chan) const BELLS_LINE: usize = 8;

/// "eventqS\x01": a process-shared channel's memory, layout version 1.
#[cfg_attr(loom, allow(dead_code))] // loom's memory has no layout line
const MAGIC: u64 = u64::from_le_bytes(*b"eventqS\x01");

/// The largest message a process-shared channel may be made for: a slot
/// holds it whole, so it sets the memory of every slot.
pub const SHARED_MSG_MAX: usize = 16 << 20;

/// Bytes of a line.
const LINE: usize = 64;

/// The layout, as the creator wrote it and the importer checked it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::chan) struct Layout {
    pub(in crate::chan) capacity: usize,
    pub(in crate::chan) max_msg: usize,
    pub(in crate::chan) low_water: usize,
    /// Lines per slot: its length word and `max_msg` bytes.
    pub(in crate::chan) slot_lines: usize,
}

impl Layout {
    /// The layout of a new channel with `limits`.
    pub(in crate::chan) fn new(limits: &Limits) -> Result<Layout> {
        if limits.max_bytes.is_some() {
            return Err(Error::Invalid(
                "max_bytes is not supported by process-shared channels (capacity and max_msg_size bound them)",
            ));
        }
        if limits.max_msg_size > SHARED_MSG_MAX {
            return Err(Error::Invalid(
                "max_msg_size above 16 MiB: a process-shared channel's slots hold their message whole",
            ));
        }
        let layout = Layout {
            capacity: limits.capacity,
            max_msg: limits.max_msg_size,
            low_water: limits.low_water,
            slot_lines: slot_lines(limits.max_msg_size),
        };
        layout
            .slot_total_lines()
            .ok_or(Error::Invalid("capacity times max_msg_size is too large"))?;
        Ok(layout)
    }

    /// Lines of all the slots; `None` on overflow.
    pub(in crate::chan) fn slot_total_lines(&self) -> Option<usize> {
        self.capacity.checked_mul(self.slot_lines).filter(|&n| {
            n.checked_add(HEADER_LINES)
                .and_then(|n| n.checked_mul(LINE))
                .is_some()
        })
    }

    /// The words of line 0.
    #[cfg_attr(loom, allow(dead_code))]
    pub(in crate::chan) fn words(&self) -> [u64; 6] {
        [
            MAGIC,
            self.capacity as u64,
            self.max_msg as u64,
            self.low_water as u64,
            self.slot_lines as u64,
            0,
        ]
    }

    #[cfg_attr(loom, allow(dead_code))]
    /// Checks the words of line 0, read once from memory another process
    /// wrote, against the `slot_total` lines the mapping has past its
    /// header.
    pub(in crate::chan) fn check(words: [u64; 6], slot_total: usize) -> Result<Layout> {
        let [magic, capacity, max_msg, low_water, lines, _] = words;
        if magic != MAGIC {
            return Err(Error::Corrupt(
                "not a process-shared channel of this version (layout magic)",
            ));
        }
        let capacity = usize::try_from(capacity).unwrap_or(usize::MAX);
        let max_msg = usize::try_from(max_msg).unwrap_or(usize::MAX);
        let low_water = usize::try_from(low_water).unwrap_or(usize::MAX);
        if capacity == 0 || capacity > MAX_CAPACITY {
            return Err(Error::Corrupt("capacity out of range"));
        }
        if max_msg > SHARED_MSG_MAX || lines != slot_lines(max_msg) as u64 {
            return Err(Error::Corrupt(
                "message size limit or slot size out of range",
            ));
        }
        if low_water >= capacity {
            return Err(Error::Corrupt("low-water mark not below the capacity"));
        }
        let layout = Layout {
            capacity,
            max_msg,
            low_water,
            slot_lines: slot_lines(max_msg),
        };
        if layout.slot_total_lines() != Some(slot_total) {
            return Err(Error::Corrupt(
                "the memory's size does not match its layout",
            ));
        }
        Ok(layout)
    }
}

/// Lines a slot needs: a length word and `max_msg` bytes.
fn slot_lines(max_msg: usize) -> usize {
    (8 + max_msg).div_ceil(LINE)
}
