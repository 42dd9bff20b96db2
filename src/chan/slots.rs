// SPDX-License-Identifier: MIT OR Apache-2.0
//! The ring's storage.
//!
//! Everything senders and receivers share about the queue is one block of
//! zeroed cache lines, plain data with no pointers into the process: the
//! `tail`, `head`, byte count and peak depth words, each alone on a 128-byte
//! pair of lines (a word written by senders does not slow the receivers
//! that write another), then one line per slot holding its stamp, its
//! message's length and the message's first `INLINE_MAX` bytes. A new ring
//! is all zeros: position 0, no flags, every slot waiting for the sender of
//! its own index (see `ring.rs`), so nothing is written at creation and a
//! large ring's pages stay unmapped until messages reach them.
//!
//! Longer messages go to a per-slot heap buffer, which is process-local and
//! allocated by the channel's first long message.

use std::sync::OnceLock;

use super::shim::AtomicU64;
#[cfg(not(loom))]
use super::shim::{Mutex, MutexGuard};

/// A word of a message stored in its slot. Under loom it is std's atomic,
/// outside the model like the buffers below: the slot's stamp orders it,
/// and loom checks the stamps.
pub(super) type PayloadWord = std::sync::atomic::AtomicU64;

/// Words per line: a slot is its stamp, its length and six payload words.
const LINE_WORDS: usize = 8;
pub(super) const INLINE_WORDS: usize = LINE_WORDS - 2;

/// Messages up to this long are stored in the slot itself.
pub(super) const INLINE_MAX: usize = INLINE_WORDS * 8;

/// Where each shared word lives: alone on an even line.
const TAIL_LINE: usize = 0;
const HEAD_LINE: usize = 2;
const BYTES_LINE: usize = 4;
const PEAK_LINE: usize = 6;
/// Lines before the first slot.
const HEADER_LINES: usize = 8;

/// One slot, as the ring uses it.
pub(super) struct SlotRef<'a> {
    /// Whose turn it is, relative to the slot's index (see `ring.rs`): 0
    /// for a new slot.
    pub(super) stamp: &'a AtomicU64,
    pub(super) len: &'a AtomicU64,
    pub(super) inline: &'a [PayloadWord; INLINE_WORDS],
}

/// The ring's shared state: its words and slots, zeroed.
pub(super) struct RingState {
    lines: Lines,
}

#[cfg(not(loom))]
type Lines = crate::sys::ZeroedLines<HEADER_LINES>;

/// Under loom a line's first two words are loom's atomics (the shared
/// words, or a slot's stamp and length), the payload words std's.
#[cfg(loom)]
type Lines = Box<[ModelLine]>;

#[cfg(loom)]
pub(super) struct ModelLine {
    model: [AtomicU64; 2],
    inline: [PayloadWord; INLINE_WORDS],
}

impl RingState {
    /// The shared state of a ring of `slots` slots, or `None` if the memory
    /// cannot be had.
    pub(super) fn zeroed(slots: usize) -> Option<RingState> {
        #[cfg(not(loom))]
        let lines = Lines::new(slots).ok()?;
        #[cfg(loom)]
        let lines = (0..slots.checked_add(HEADER_LINES)?)
            .map(|_| ModelLine {
                model: Default::default(),
                inline: Default::default(),
            })
            .collect();
        Some(RingState { lines })
    }

    #[cfg(not(loom))]
    #[inline]
    fn word(&self, line: usize) -> &AtomicU64 {
        &self.lines.header()[line].0[0]
    }

    #[cfg(loom)]
    fn word(&self, line: usize) -> &AtomicU64 {
        &self.lines[line].model[0]
    }

    /// Moved by senders: the next position to send, and flags.
    #[inline]
    pub(super) fn tail(&self) -> &AtomicU64 {
        self.word(TAIL_LINE)
    }

    /// Moved by receivers: the next position to receive, and flags.
    #[inline]
    pub(super) fn head(&self) -> &AtomicU64 {
        self.word(HEAD_LINE)
    }

    /// The bytes queued, kept only with a byte limit.
    #[inline]
    pub(super) fn bytes(&self) -> &AtomicU64 {
        self.word(BYTES_LINE)
    }

    /// The most messages ever queued at once (a recent value).
    #[inline]
    pub(super) fn peak(&self) -> &AtomicU64 {
        self.word(PEAK_LINE)
    }

    /// Slot `i`.
    #[cfg(not(loom))]
    #[inline]
    pub(super) fn slot(&self, i: usize) -> SlotRef<'_> {
        let [stamp, len, inline @ ..] = &self.lines[i].0;
        SlotRef { stamp, len, inline }
    }

    #[cfg(loom)]
    pub(super) fn slot(&self, i: usize) -> SlotRef<'_> {
        let line = &self.lines[HEADER_LINES + i];
        let [stamp, len] = &line.model;
        SlotRef {
            stamp,
            len,
            inline: &line.inline,
        }
    }
}

/// The slots' heap buffers for long messages, one per slot, apart from the
/// slots so the short-message path never touches them; allocated by the
/// first long message, so a channel that only carries short ones never
/// has them.
pub(super) struct Buffers(OnceLock<Box<[SlotBuf]>>);

impl Buffers {
    pub(super) fn new() -> Buffers {
        Buffers(OnceLock::new())
    }

    /// Allocates `n` buffers if they are not yet; false if the memory
    /// cannot be had. Called before a long message claims a slot, which
    /// cannot be undone.
    pub(super) fn ensure(&self, n: usize) -> bool {
        if self.0.get().is_some() {
            return true;
        }
        let mut bufs = Vec::new();
        if bufs.try_reserve_exact(n).is_err() {
            return false;
        }
        bufs.extend((0..n).map(|_| SlotBuf::new()));
        // A racing sender may have set them first: either is as good.
        let _ = self.0.set(bufs.into_boxed_slice());
        true
    }

    /// Slot `i`'s buffer, once `ensure` made them.
    pub(super) fn get(&self, i: usize) -> &SlotBuf {
        &self.0.get().expect("a long message allocated the buffers")[i]
    }
}

/// A slot's message buffer. The slot's stamp already gives one thread at a
/// time the right to touch it, so the lock is never contended: it exists so
/// the ring needs no `unsafe`.
#[cfg(not(loom))]
pub(super) struct SlotBuf(Mutex<Vec<u8>>);

#[cfg(not(loom))]
impl SlotBuf {
    fn new() -> SlotBuf {
        SlotBuf(Mutex::new(Vec::new()))
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Vec<u8>> {
        self.0.lock()
    }
}

/// Under loom the buffer's lock is std's, outside the model, and must be
/// free when taken: a second holder means the stamps let two threads into
/// one slot, which the model then reports. Keeping it out of the model
/// spares loom two scheduling points per message.
#[cfg(loom)]
pub(super) struct SlotBuf(std::sync::Mutex<Vec<u8>>);

#[cfg(loom)]
impl SlotBuf {
    fn new() -> SlotBuf {
        SlotBuf(std::sync::Mutex::new(Vec::new()))
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Vec<u8>> {
        self.0
            .try_lock()
            .expect("two threads in one slot: the stamp protocol is broken")
    }
}
