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
//! allocated by the channel's first long message. That buffer is the one
//! piece of the channel that is not atomics: its `unsafe` is here, and the
//! ring's stamps are its safety argument.

#[cfg(not(loom))]
use std::cell::UnsafeCell;
use std::sync::OnceLock;

use super::shim::AtomicU64;

/// A word of a message stored in its slot. Under loom it is std's atomic,
/// outside the model (sparing loom a scheduling point per word): the
/// slot's stamp orders it, and loom checks the stamps.
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

/// A slot's message buffer. Only the thread whose turn the slot's stamp
/// gives touches it, so it needs no lock: a lock here cost every long
/// message two locked instructions on a line the other side wrote last.
/// Not padded to a line of its own: that quadruples the array for 3-10% at
/// 4P1C on a far machine (decision 0003).
#[cfg(not(loom))]
pub(super) struct SlotBuf {
    buf: UnsafeCell<Vec<u8>>,
    /// Debug builds check the stamp protocol at run time: set while a
    /// thread is inside, so a second one panics rather than racing.
    #[cfg(debug_assertions)]
    inside: std::sync::atomic::AtomicBool,
}

// SAFETY: the buffer is reached only through `with`, whose callers hold the
// slot's turn, so no two threads touch it at once; a `Vec<u8>` may move
// between threads, and the stamp's release/acquire orders one turn's writes
// before the next turn's reads.
#[cfg(not(loom))]
unsafe impl Sync for SlotBuf {}

#[cfg(not(loom))]
impl SlotBuf {
    fn new() -> SlotBuf {
        SlotBuf {
            buf: UnsafeCell::new(Vec::new()),
            #[cfg(debug_assertions)]
            inside: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Runs `f` on the buffer.
    ///
    /// # Safety
    ///
    /// The caller holds the slot's turn: it moved `tail` (a sender) or
    /// `head` (a receiver) past the slot's position and has not yet
    /// published the slot's next stamp. The ring's stamps give that turn to
    /// one thread at a time, which is all this relies on.
    #[inline]
    pub(super) unsafe fn with<T>(&self, f: impl FnOnce(&mut Vec<u8>) -> T) -> T {
        #[cfg(debug_assertions)]
        let _inside = Inside::enter(&self.inside);
        // SAFETY: the caller holds the slot's turn (above), so this is the
        // only reference to the buffer until `f` returns.
        f(unsafe { &mut *self.buf.get() })
    }
}

/// A debug build's mark that a thread is in a slot's buffer.
#[cfg(all(not(loom), debug_assertions))]
struct Inside<'a>(&'a std::sync::atomic::AtomicBool);

#[cfg(all(not(loom), debug_assertions))]
impl<'a> Inside<'a> {
    fn enter(flag: &'a std::sync::atomic::AtomicBool) -> Inside<'a> {
        use std::sync::atomic::Ordering;
        assert!(
            !flag.swap(true, Ordering::Acquire),
            "two threads in one slot: the stamp protocol is broken"
        );
        Inside(flag)
    }
}

#[cfg(all(not(loom), debug_assertions))]
impl Drop for Inside<'_> {
    fn drop(&mut self) {
        self.0.store(false, std::sync::atomic::Ordering::Release);
    }
}

/// Under loom the buffer is loom's `UnsafeCell`, which fails the model when
/// two accesses are not ordered by a happens-before edge: the stamps must
/// order each turn's use of the buffer after the last.
#[cfg(loom)]
pub(super) struct SlotBuf(loom::cell::UnsafeCell<Vec<u8>>);

// SAFETY: as outside the model, and loom checks it.
#[cfg(loom)]
unsafe impl Sync for SlotBuf {}

#[cfg(loom)]
impl SlotBuf {
    fn new() -> SlotBuf {
        SlotBuf(loom::cell::UnsafeCell::new(Vec::new()))
    }

    /// As outside the model.
    ///
    /// # Safety
    ///
    /// As outside the model.
    pub(super) unsafe fn with<T>(&self, f: impl FnOnce(&mut Vec<u8>) -> T) -> T {
        // SAFETY: the caller holds the slot's turn; loom reports it if not.
        self.0.with_mut(|buf| f(unsafe { &mut *buf }))
    }
}

#[cfg(all(test, not(loom), debug_assertions))]
mod tests {
    use super::SlotBuf;

    /// The debug guard: a second thread in a slot's buffer panics rather
    /// than racing (here the same thread, entering twice).
    #[test]
    #[should_panic(expected = "two threads in one slot")]
    fn a_second_holder_of_a_slot_buffer_panics() {
        let slot = SlotBuf::new();
        // SAFETY: deliberately broken, to show the guard catches it; the
        // inner call panics before it makes a second reference.
        unsafe { slot.with(|_| slot.with(|_| ())) }
    }

    #[test]
    fn turns_one_after_another_pass() {
        let slot = SlotBuf::new();
        // SAFETY: one thread, one turn at a time.
        unsafe {
            slot.with(|b| b.extend_from_slice(b"abc"));
            assert_eq!(slot.with(|b| b.clone()), b"abc");
        }
    }
}
