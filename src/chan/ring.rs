// SPDX-License-Identifier: MIT OR Apache-2.0
//! The ring: a bounded multi-producer multi-consumer queue of byte messages
//! without a queue lock (the algorithm of crossbeam's `ArrayQueue`, D.
//! Vyukov's bounded queue), bounded in messages and, optionally, in bytes.
//!
//! - `tail` and `head` are positions that only grow; message `pos` lives in
//!   slot `pos % cap`. A sender claims `pos` by moving `tail` from `pos` to
//!   `pos + 1` with one CAS, a receiver claims it by moving `head` the same
//!   way. Each word also carries a few flag bits below the position
//!   ([`Word`], [`Flags`]): the ring owns one (`TAIL_CLOSED`); the doorbells
//!   and the parking of blocked threads own the others. The CAS that claims
//!   a slot returns the word before it, flags included, so a claimer learns
//!   them without another read.
//! - Each slot's `stamp` says whose turn it is: `2 * pos` = empty, ready for
//!   the sender of `pos`; `2 * pos + 1` = holds message `pos`. The receiver
//!   of `pos` hands the slot to the sender of `pos + cap`. A thread touches
//!   a slot's payload only while the stamp says it is its turn. Slot `i`
//!   stores its stamp less `2 * i`, so that a new ring is all zeros.
//! - A message of up to `INLINE_MAX` bytes is stored in the slot's words,
//!   written and read with relaxed ordering (the stamp's release/acquire
//!   orders them); a longer one in the slot's heap buffer, which stays with
//!   the slot, so the steady-state copy path allocates nothing.
//! - With a byte limit, a sender reserves its message's bytes by CAS before
//!   it claims a slot, and a receiver gives them back after the head moved.

use super::options::Limits;
use super::shim::{fence, AtomicU64, Ordering};
use super::slots::{Buffers, PayloadWord, RingState, SlotRef, INLINE_MAX, INLINE_WORDS};
use super::waits::Backoff;

/// Flag bits below the position in `tail` and `head`.
const FLAG_BITS: u32 = 3;
/// Adds one to a word's position.
const ONE: u64 = 1 << FLAG_BITS;

/// Some of a word's flag bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Flags(u64);

impl Flags {
    /// Flag bit `n` of a word.
    pub(super) const fn bit(n: u32) -> Flags {
        assert!(n < FLAG_BITS, "a word has FLAG_BITS flag bits");
        Flags(1 << n)
    }

    pub(super) const fn or(self, other: Flags) -> Flags {
        Flags(self.0 | other.0)
    }

    /// Whether `self` and `other` share no bit.
    pub(super) const fn disjoint(self, other: Flags) -> bool {
        self.0 & other.0 == 0
    }
}

/// `tail`: the channel is closed; no send succeeds after the CAS that set it.
pub(super) const TAIL_CLOSED: Flags = Flags::bit(0);

/// A `head` or `tail` word as read: a position and flag bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Word(u64);

impl Word {
    pub(super) fn position(self) -> u64 {
        self.0 >> FLAG_BITS
    }

    /// Whether any of `flags` is set.
    pub(super) fn has(self, flags: Flags) -> bool {
        self.0 & flags.0 != 0
    }

    /// Every flag set in either word.
    pub(super) fn union(self, other: Word) -> Word {
        Word(self.0 | other.0)
    }

    /// No position, no flag: what a union starts from.
    pub(super) const NONE: Word = Word(0);
}

/// One of the ring's two shared words, `tail` or `head`, with the
/// operations the channel makes on it. Every read-modify-write is SeqCst.
#[derive(Clone, Copy)]
pub(super) struct SharedWord<'a>(&'a AtomicU64);

impl<'a> SharedWord<'a> {
    pub(super) fn new(word: &'a AtomicU64) -> SharedWord<'a> {
        SharedWord(word)
    }

    pub(super) fn load(self, order: Ordering) -> Word {
        Word(self.0.load(order))
    }

    /// The latest value: a read-modify-write never reads a stale one.
    pub(super) fn latest(self) -> Word {
        Word(self.0.fetch_or(0, Ordering::SeqCst))
    }

    /// Sets `flags`; returns the word before.
    pub(super) fn set(self, flags: Flags) -> Word {
        Word(self.0.fetch_or(flags.0, Ordering::SeqCst))
    }

    /// Clears `flags`; returns the word before.
    pub(super) fn clear(self, flags: Flags) -> Word {
        Word(self.0.fetch_and(!flags.0, Ordering::SeqCst))
    }

    /// Flips `flags` if the word still is `seen`; false if it moved since
    /// (the caller judged by a stale word and must judge again).
    pub(super) fn flip_if_unchanged(self, seen: Word, flags: Flags) -> bool {
        self.0
            .compare_exchange(seen.0, seen.0 ^ flags.0, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    /// Moves the word from `seen` to the next position (a claim, or a
    /// publication); fails with the word now if it is no longer `seen`.
    pub(super) fn advance(self, seen: Word) -> Result<(), Word> {
        self.0
            .compare_exchange_weak(seen.0, seen.0 + ONE, Ordering::SeqCst, Ordering::Relaxed)
            .map(drop)
            .map_err(Word)
    }
}

/// Buffers that grew past this are freed when their message is received, so
/// one huge message does not pin its memory for the channel's life.
const SPARE_BUF_MAX: usize = 64 * 1024;

/// A message as a receiver gets it, still in its slot.
pub(super) enum Payload<'a> {
    /// In the slot's words, copied straight to where the receiver wants it.
    Inline(Inline<'a>),
    /// In the slot's heap buffer; taking it leaves the slot to allocate
    /// anew.
    Heap(Heap<'a>),
}

/// A long message: the front `len` bytes of its slot's buffer. The buffer
/// keeps the longest length it has held, so that a message no longer than
/// that one is written without writing the buffer's own length: the line
/// holding the buffers' pointers and lengths then stays in both sides'
/// caches, where writing it made every message fetch it again.
pub(super) struct Heap<'a> {
    pub(super) buf: &'a mut Vec<u8>,
    len: usize,
}

impl Heap<'_> {
    fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// An inline message: the slot's words and its length (at most
/// `INLINE_MAX`).
pub(super) struct Inline<'a> {
    words: &'a [PayloadWord; INLINE_WORDS],
    len: usize,
}

impl Inline<'_> {
    /// Copies the message to the front of `buf` (at least `len` long): whole
    /// words, then the bytes of the last, with no buffer in between.
    #[inline(always)]
    pub(super) fn copy_to(&self, buf: &mut [u8]) {
        let buf = &mut buf[..self.len];
        let mut chunks = buf.chunks_exact_mut(8);
        for (chunk, word) in (&mut chunks).zip(self.words) {
            chunk.copy_from_slice(&word.load(Ordering::Relaxed).to_ne_bytes());
        }
        let rest = chunks.into_remainder();
        if !rest.is_empty() {
            // The bytes past `len` are the stored word's padding.
            let word = self.words[self.len / 8].load(Ordering::Relaxed);
            rest.copy_from_slice(&word.to_ne_bytes()[..rest.len()]);
        }
    }

    /// The message, copied to a buffer on the stack, to `f`.
    fn with_bytes<T>(&self, f: impl FnOnce(&[u8]) -> T) -> T {
        let mut out = [0u8; INLINE_MAX];
        self.copy_to(&mut out);
        f(&out[..self.len])
    }
}

impl Payload<'_> {
    pub(super) fn len(&self) -> usize {
        match self {
            Payload::Inline(m) => m.len,
            Payload::Heap(m) => m.len,
        }
    }

    /// Copies the message to the front of `buf` (at least `len()` long).
    #[inline(always)]
    pub(super) fn copy_to(&self, buf: &mut [u8]) {
        match self {
            Payload::Inline(m) => m.copy_to(buf),
            Payload::Heap(m) => buf[..m.len].copy_from_slice(m.bytes()),
        }
    }

    /// The message to `f`.
    pub(super) fn with_bytes<T>(&self, f: impl FnOnce(&[u8]) -> T) -> T {
        match self {
            Payload::Inline(m) => m.with_bytes(f),
            Payload::Heap(m) => f(m.bytes()),
        }
    }

    /// The message as an owned buffer. A copy made here, on the receiver's
    /// thread, up to `SPARE_BUF_MAX`: the slot keeps its buffer for the
    /// next sender, and the receiver's allocation is freed where it was
    /// made, both in their threads' allocator caches. Taking the slot's
    /// buffer instead made every message an allocation on the sender's
    /// thread freed on the receiver's. A longer buffer is taken: it would be
    /// freed anyway, and its copy costs more than an allocation.
    pub(super) fn into_vec(self) -> Vec<u8> {
        match self {
            Payload::Inline(m) => {
                let mut v = vec![0; m.len];
                m.copy_to(&mut v);
                v
            }
            Payload::Heap(m) if m.buf.capacity() <= SPARE_BUF_MAX => m.bytes().to_vec(),
            Payload::Heap(m) => {
                let mut v = std::mem::take(m.buf);
                v.truncate(m.len);
                v
            }
        }
    }
}

/// Why a push did not happen.
pub(super) enum PushError {
    Full,
    Closed,
    /// The first long message could not allocate the slots' buffers.
    NoMemory,
}

/// A successful claim: the position and the word before the claiming CAS
/// (its flags are what the claimer must act on).
pub(super) struct Claimed<T> {
    pub(super) value: T,
    pub(super) pos: u64,
    pub(super) word: Word,
    /// The message's length.
    pub(super) len: usize,
}

/// What a pop found.
pub(super) enum Pop<T> {
    Took(Claimed<T>),
    /// Nothing pending: the `tail` word that showed it (for `TAIL_CLOSED`).
    Empty(Word),
    /// The head message is longer than the caller accepts; it stays queued.
    TooLong(usize),
}

pub(super) struct Ring {
    state: RingState,
    bufs: Buffers,
    limits: Limits,
    cap: u64,
    /// `cap - 1` if `cap` is a power of two above 1, else 0.
    mask: u64,
}

impl Ring {
    /// A ring with `limits`, its slots allocated now; `None` rather than an
    /// abort when a huge capacity cannot be had.
    pub(super) fn new(limits: Limits) -> Option<Ring> {
        let cap = limits.capacity;
        Some(Ring {
            state: RingState::zeroed(cap)?,
            bufs: Buffers::new(),
            limits,
            cap: cap as u64,
            mask: if cap > 1 && cap.is_power_of_two() {
                cap as u64 - 1
            } else {
                0
            },
        })
    }

    pub(super) fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Moved by senders.
    #[inline]
    pub(super) fn tail(&self) -> SharedWord<'_> {
        SharedWord::new(self.state.tail())
    }

    /// Moved by receivers.
    #[inline]
    pub(super) fn head(&self) -> SharedWord<'_> {
        SharedWord::new(self.state.head())
    }

    pub(super) fn byte_limited(&self) -> bool {
        self.limits.max_bytes.is_some()
    }

    /// The bytes queued (0 without a byte limit, which keeps no count).
    pub(super) fn bytes(&self) -> u64 {
        self.state.bytes().load(Ordering::SeqCst)
    }

    /// How many messages lie between `head` and `tail`.
    pub(super) fn depth(tail: Word, head: Word) -> u64 {
        tail.position().saturating_sub(head.position())
    }

    /// Whether a message of `len` bytes fits a queue `depth` deep holding
    /// `bytes`.
    pub(super) fn fits(&self, depth: u64, bytes: u64, len: usize) -> bool {
        depth < self.cap
            && self
                .limits
                .max_bytes
                .is_none_or(|max| bytes + len as u64 <= max as u64)
    }

    /// Whether a queue `depth` deep holding `bytes` is full.
    pub(super) fn is_full(&self, depth: u64, bytes: u64) -> bool {
        depth >= self.cap || self.limits.max_bytes.is_some_and(|max| bytes >= max as u64)
    }

    /// Whether a queue `depth` deep holding `bytes` is at or below the
    /// low-water mark.
    pub(super) fn is_low(&self, depth: u64, bytes: u64) -> bool {
        depth <= self.limits.low_water as u64 && bytes <= self.limits.low_water_bytes as u64
    }

    /// Whether the queue is at or below the low-water mark now, with `head`
    /// a position the head has reached (a lower bound; 0 to read it).
    pub(super) fn at_low_water(&self, head: u64) -> bool {
        let head = head.max(self.head().load(Ordering::SeqCst).position());
        let depth = self
            .tail()
            .load(Ordering::SeqCst)
            .position()
            .saturating_sub(head);
        let bytes = if self.byte_limited() { self.bytes() } else { 0 };
        self.is_low(depth, bytes)
    }

    fn index(&self, pos: u64) -> usize {
        // A mask when the capacity allows it: a division is ~25 cycles, and
        // every send and receive indexes at least twice.
        if self.mask != 0 {
            (pos & self.mask) as usize
        } else {
            (pos % self.cap) as usize
        }
    }

    /// The slot of message `pos`, and the stamp it stores when empty and
    /// waiting for the sender of `pos` (`2 * pos` less twice its index).
    fn slot(&self, pos: u64) -> (SlotRef<'_>, u64) {
        let i = self.index(pos);
        (self.state.slot(i), 2 * (pos - i as u64))
    }

    /// Stores message `pos` in `slot`, its slot (the caller's by the
    /// stamp), which the claim found: indexed once per message.
    /// Inlined into the push, the long-message branch kept out of line.
    #[inline(always)]
    fn write(&self, slot: &SlotRef<'_>, pos: u64, msg: &[u8]) {
        if msg.len() <= INLINE_MAX {
            // Whole words apart from the tail, so the compiler emits plain
            // moves rather than a memcpy call per word.
            let n = msg.len() / 8;
            for (k, word) in slot.inline.iter().enumerate().take(n) {
                let w: [u8; 8] = msg[8 * k..8 * k + 8].try_into().expect("8 bytes");
                word.store(u64::from_ne_bytes(w), Ordering::Relaxed);
            }
            let tail = &msg[8 * n..];
            if !tail.is_empty() {
                let mut w = [0u8; 8];
                w[..tail.len()].copy_from_slice(tail);
                slot.inline[n].store(u64::from_ne_bytes(w), Ordering::Relaxed);
            }
        } else {
            self.write_long(pos, msg);
        }
        slot.len.store(msg.len() as u64, Ordering::Relaxed);
    }

    #[cold]
    #[inline(never)]
    #[allow(unsafe_code)]
    fn write_long(&self, pos: u64, msg: &[u8]) {
        let slot = self.bufs.get(self.index(pos));
        // SAFETY: the caller moved `tail` past `pos` and publishes the
        // slot's full stamp only after this returns: the slot is its turn.
        unsafe {
            slot.with(|buf| match buf.get_mut(..msg.len()) {
                // The buffer's length stays: see `Heap`.
                Some(front) => front.copy_from_slice(msg),
                None => {
                    buf.clear();
                    buf.extend_from_slice(msg);
                }
            })
        }
    }

    /// Hands message `pos`, `len` bytes long, in `slot` (the caller's by
    /// the stamp), to `take`.
    fn read<T>(
        &self,
        slot: &SlotRef<'_>,
        pos: u64,
        len: usize,
        take: &mut impl FnMut(Payload<'_>) -> T,
    ) -> T {
        if len <= INLINE_MAX {
            take(Payload::Inline(Inline {
                words: slot.inline,
                len,
            }))
        } else {
            self.read_long(pos, len, take)
        }
    }

    #[allow(unsafe_code)]
    fn read_long<T>(&self, pos: u64, len: usize, take: &mut impl FnMut(Payload<'_>) -> T) -> T {
        let slot = self.bufs.get(self.index(pos));
        // SAFETY: the slot is the caller's turn: a receiver moved `head`
        // past `pos` and hands the slot on (its next stamp) only after this
        // returns; `drain` has the ring to itself.
        unsafe {
            slot.with(|buf| {
                let value = take(Payload::Heap(Heap { buf, len }));
                if buf.capacity() > SPARE_BUF_MAX {
                    *buf = Vec::new();
                }
                value
            })
        }
    }

    /// Reserves `len` bytes under the byte limit, before a push: false when
    /// there is no limit (nothing reserved). Fails if they do not fit (or
    /// the ring is closed).
    pub(super) fn reserve_bytes(&self, len: usize) -> Result<bool, PushError> {
        let Some(max) = self.limits.max_bytes else {
            return Ok(false);
        };
        let bytes = self.state.bytes();
        let mut queued = bytes.load(Ordering::Relaxed);
        loop {
            if queued + len as u64 > max as u64 {
                if self.tail().load(Ordering::SeqCst).has(TAIL_CLOSED) {
                    return Err(PushError::Closed);
                }
                return Err(PushError::Full);
            }
            match bytes.compare_exchange_weak(
                queued,
                queued + len as u64,
                Ordering::SeqCst,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(true),
                Err(now) => queued = now,
            }
        }
    }

    /// Gives back bytes (a receive, or a reservation whose push failed) and
    /// returns the `head` word seen after it. The fence pairs with the one
    /// a doorbell settle or a sender about to sleep makes after announcing
    /// itself in `head`: either it sees the bytes freed, or the caller sees
    /// its flag and acts on it.
    pub(super) fn release_bytes(&self, len: usize) -> Word {
        self.state.bytes().fetch_sub(len as u64, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        self.head().load(Ordering::SeqCst)
    }

    /// Queues a copy of `msg` unless the ring is full or closed (its bytes,
    /// under a byte limit, reserved first).
    #[inline(always)]
    pub(super) fn push(&self, msg: &[u8]) -> Result<Claimed<()>, PushError> {
        if msg.len() > INLINE_MAX && !self.bufs.ensure(self.cap as usize) {
            return Err(PushError::NoMemory);
        }
        let mut backoff = Backoff::new();
        let mut tail = self.tail().load(Ordering::Relaxed);
        loop {
            if tail.has(TAIL_CLOSED) {
                return Err(PushError::Closed);
            }
            let pos = tail.position();
            let (slot, empty) = self.slot(pos);
            let stamp = slot.stamp.load(Ordering::Acquire);
            if stamp == empty {
                match self.tail().advance(tail) {
                    Ok(()) => {
                        self.write(&slot, pos, msg);
                        slot.stamp.store(empty + 1, Ordering::Release);
                        return Ok(Claimed {
                            value: (),
                            pos,
                            word: tail,
                            len: msg.len(),
                        });
                    }
                    Err(now) => {
                        tail = now;
                        backoff.spin_light();
                    }
                }
            } else {
                if stamp < empty {
                    // The slot still holds message `pos - cap`: full, unless
                    // a receiver has claimed it and is copying it out.
                    let head = self.head().load(Ordering::SeqCst);
                    if head.position() + self.cap <= pos {
                        return Err(PushError::Full);
                    }
                }
                // Otherwise another sender took `pos` first, or a receiver
                // is mid-copy: look again.
                backoff.snooze();
                tail = self.tail().load(Ordering::Relaxed);
            }
        }
    }

    /// Takes the head message if `accept(len)` says yes, giving its payload
    /// to `take`. A refused message stays at the head. The caller gives
    /// back its bytes (`release_bytes`) under a byte limit.
    pub(super) fn pop<T>(
        &self,
        accept: impl Fn(usize) -> bool,
        take: &mut impl FnMut(Payload<'_>) -> T,
    ) -> Pop<T> {
        let mut backoff = Backoff::new();
        let mut head = self.head().load(Ordering::Relaxed);
        loop {
            let pos = head.position();
            let (slot, empty) = self.slot(pos);
            let stamp = slot.stamp.load(Ordering::Acquire);
            if stamp == empty + 1 {
                let len = slot.len.load(Ordering::Relaxed) as usize;
                if !accept(len) {
                    // Only if `pos` is still the head: otherwise the length
                    // may belong to a message another receiver took.
                    let now = self.head().load(Ordering::Relaxed);
                    if now == head {
                        return Pop::TooLong(len);
                    }
                    head = now;
                    continue;
                }
                match self.head().advance(head) {
                    Ok(()) => {
                        let value = self.read(&slot, pos, len, take);
                        slot.stamp.store(empty + 2 * self.cap, Ordering::Release);
                        return Pop::Took(Claimed {
                            value,
                            pos,
                            word: head,
                            len,
                        });
                    }
                    Err(now) => {
                        head = now;
                        backoff.spin_light();
                    }
                }
            } else {
                if stamp == empty {
                    // Not written yet: empty, unless a sender has claimed
                    // the slot and is copying into it.
                    let tail = self.tail().load(Ordering::SeqCst);
                    if tail.position() == pos {
                        return Pop::Empty(tail);
                    }
                    backoff.wait_for_writer();
                } else {
                    backoff.snooze();
                }
                head = self.head().load(Ordering::Relaxed);
            }
        }
    }

    /// Whether message `pos` is written and not yet taken: a cheap "not
    /// empty" check after receiving `pos - 1` that touches only the line the
    /// next receive reads anyway.
    pub(super) fn is_ready(&self, pos: u64) -> bool {
        let (slot, empty) = self.slot(pos);
        slot.stamp.load(Ordering::Acquire) == empty + 1
    }

    /// Whether the slot of message `pos` is free for it or beyond (message
    /// `pos - cap` has been received): false means the ring is full at `pos`.
    /// Stamps only grow, so `is_free_for(q + cap)` says message `q` has been
    /// received.
    pub(super) fn is_free_for(&self, pos: u64) -> bool {
        let (slot, empty) = self.slot(pos);
        slot.stamp.load(Ordering::Acquire) >= empty
    }

    /// Records the depth a send ending at position `end` (exclusive) saw, if
    /// it is a new peak, and returns whether the ring is full at `end` (the
    /// slot of message `end` still holds message `end - cap`).
    ///
    /// The peak is read off slot stamps rather than the head, whose line
    /// every receive writes: the depth at the send's last message exceeds
    /// the peak iff the message `peak` places before it is still queued;
    /// only then (at most once per new peak) is the head read. The same
    /// stamp answers the full check: if that message was received, the head
    /// is past it, so at most `peak < cap` messages lie before `end` and the
    /// ring is not full there. One slot is read, not two, unless the peak is
    /// new or has reached the capacity; then the full check reads the slot
    /// of message `end`, the line the next send reads anyway.
    #[inline(always)]
    pub(super) fn record_peak_is_full(&self, end: u64) -> bool {
        let peak = self.state.peak().load(Ordering::Relaxed);
        if peak < self.cap {
            // The head is at or past 0: at most `end <= peak` queued.
            if end <= peak || self.is_free_for(end - 1 - peak + self.cap) {
                return false;
            }
            let head = self.head().load(Ordering::Relaxed).position();
            // A head read late only overstates the depth; capped at capacity.
            let depth = end.saturating_sub(head).min(self.cap);
            self.state.peak().fetch_max(depth, Ordering::Relaxed);
        }
        !self.is_free_for(end)
    }

    /// The most messages ever queued at once (a recent value).
    pub(super) fn peak(&self) -> u64 {
        self.state.peak().load(Ordering::Relaxed)
    }

    /// The length of message `pos`, for counting what is queued. Only
    /// meaningful for `head <= pos < tail`, and exact when no call is in
    /// progress.
    pub(super) fn len_at(&self, pos: u64) -> usize {
        self.slot(pos).0.len.load(Ordering::Relaxed) as usize
    }

    /// Gives each message still queued to `f`, oldest first, and returns how
    /// many; for the last handle (`&mut`: no other thread can touch the
    /// ring, so every slot is its turn).
    pub(super) fn drain(&mut self, mut f: impl FnMut(&[u8])) -> u64 {
        let head = self.head().load(Ordering::SeqCst).position();
        let tail = self.tail().load(Ordering::SeqCst).position();
        for p in head..tail {
            let (slot, _) = self.slot(p);
            let len = slot.len.load(Ordering::Relaxed) as usize;
            self.read(&slot, p, len, &mut |m: Payload<'_>| m.with_bytes(&mut f));
        }
        tail - head
    }
}

impl super::doorbell::Queue for Ring {
    fn tail(&self) -> SharedWord<'_> {
        Ring::tail(self)
    }

    fn head(&self) -> SharedWord<'_> {
        Ring::head(self)
    }

    fn byte_limited(&self) -> bool {
        Ring::byte_limited(self)
    }

    fn bytes(&self) -> u64 {
        Ring::bytes(self)
    }

    fn is_full(&self, depth: u64, bytes: u64) -> bool {
        Ring::is_full(self, depth, bytes)
    }

    fn is_low(&self, depth: u64, bytes: u64) -> bool {
        Ring::is_low(self, depth, bytes)
    }

    fn fits(&self, depth: u64, bytes: u64, len: usize) -> bool {
        Ring::fits(self, depth, bytes, len)
    }
}
