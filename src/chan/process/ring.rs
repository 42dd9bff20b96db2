// SPDX-License-Identifier: MIT OR Apache-2.0
//! The ring of a process-shared channel: one process sends, the other
//! receives, so each position word has one writer process (a
//! single-producer single-consumer ring, L. Lamport's), and the threads of
//! each side take turns under a lock of their own process (`Turn`).
//!
//! A sender writes the message into the slot of its position, then
//! publishes it by moving `tail`; a receiver copies the message out, then
//! frees the slot by moving `head`. Nothing is claimed before it is done,
//! so a process killed at any instruction leaves no half-claimed slot: an
//! unpublished message was never sent, a message not yet freed is still
//! there for the next receiver.
//!
//! The other process is not trusted. Each side keeps its own position and
//! the last position it saw of the other side, and reads the other side's
//! word once per refresh, checking that it only moved forward and by no
//! more than the ring holds; a message's length is checked against the
//! limit before a byte is copied. Anything else is `Error::Corrupt`.
//! Every access stays inside the mapping whatever the words say.

use std::sync::Arc;

use super::layout::{Layout, BELLS_LINE, HEADER_LINES, HEAD_LINE, PEAK_LINE, TAIL_LINE};
use crate::chan::doorbell::Queue;
use crate::chan::ring::{SharedWord, Word, TAIL_CLOSED};
use crate::chan::shim::{AtomicU64, Ordering};
use crate::error::{Error, Result};

/// A slot's words and the payload words of messages are std's atomics,
/// also under loom (outside the model): `tail` and `head` order them.
type PayloadWord = std::sync::atomic::AtomicU64;

/// The shared memory: a memfd's mapping, or under loom boxes of model
/// atomics that the two sides of a model share.
pub(in crate::chan) struct Memory {
    #[cfg(not(loom))]
    lines: crate::sys::ZeroedLines<HEADER_LINES>,
    #[cfg(loom)]
    header: Box<[[AtomicU64; 2]]>,
    #[cfg(loom)]
    slots: Box<[[PayloadWord; 8]]>,
}

impl Memory {
    #[cfg(not(loom))]
    pub(in crate::chan) fn new(lines: crate::sys::ZeroedLines<HEADER_LINES>) -> Memory {
        Memory { lines }
    }

    /// Zeroed memory for `slot_total` slot lines (loom's stand-in for a
    /// memfd).
    #[cfg(loom)]
    pub(in crate::chan) fn zeroed(slot_total: usize) -> Memory {
        Memory {
            header: (0..HEADER_LINES).map(|_| Default::default()).collect(),
            slots: (0..slot_total).map(|_| Default::default()).collect(),
        }
    }

    /// Lines past the header.
    #[cfg_attr(loom, allow(dead_code))]
    pub(in crate::chan) fn slot_total(&self) -> usize {
        #[cfg(not(loom))]
        return self.lines.len();
        #[cfg(loom)]
        return self.slots.len();
    }

    /// Word `w` (0 or 1) of header line `line`.
    #[inline]
    fn word(&self, line: usize, w: usize) -> &AtomicU64 {
        #[cfg(not(loom))]
        return &self.lines.header()[line].0[w];
        #[cfg(loom)]
        return &self.header[line][w];
    }

    /// The words of slot-area lines `first..first + n`.
    #[inline]
    fn slot_words(&self, first: usize, n: usize) -> &[PayloadWord] {
        #[cfg(not(loom))]
        return &self.lines.words()[first * 8..(first + n) * 8];
        #[cfg(loom)]
        return self.slots[first..first + n].as_flattened();
    }

    /// The layout words of line 0, read once.
    #[cfg(not(loom))]
    pub(in crate::chan) fn layout_words(&self) -> [u64; 6] {
        let line = &self.lines.header()[0].0;
        std::array::from_fn(|i| line[i].load(Ordering::Acquire))
    }

    #[cfg(not(loom))]
    pub(in crate::chan) fn write_layout(&self, words: [u64; 6]) {
        let line = &self.lines.header()[0].0;
        for (w, v) in line.iter().zip(words) {
            w.store(v, Ordering::Release);
        }
    }
}

/// How many times a move of this side's word may fail because the other
/// process changed the word's flags meanwhile: a well-behaved one flips a
/// flag now and then, never without pause, so a word that keeps changing
/// is a broken protocol, not a busy one.
const MOVE_TRIES: u32 = 1 << 16;

/// The highest position either word may hold: far below the top of a
/// word's position bits (2^61), so moving a word never overflows it. A
/// well-behaved pair of processes reaches it after 2^60 messages; another
/// process's word beyond it is a broken protocol.
pub(in crate::chan) const POSITION_MAX: u64 = 1 << 60;

/// The last positions one side knows: its own (which only it moves) and
/// the other side's, as last seen. Kept under the side's lock, so the
/// threads of one process take turns.
#[derive(Clone, Copy, Debug)]
pub(in crate::chan) struct Turn {
    pub(in crate::chan) own: u64,
    pub(in crate::chan) seen: u64,
}

/// What a push found.
pub(in crate::chan) enum Pushed {
    /// Published; the `tail` word before (its flags are the sender's to act
    /// on).
    Sent(Word),
    Full,
    Closed,
}

/// What a receiver finds at its position.
pub(in crate::chan) enum Peeked {
    /// A message this long.
    Ready(usize),
    /// Nothing published: the `tail` word that showed it.
    Empty(Word),
}

pub(in crate::chan) struct ShmRing {
    mem: Arc<Memory>,
    layout: Layout,
    cap: u64,
}

impl ShmRing {
    pub(in crate::chan) fn new(mem: Arc<Memory>, layout: Layout) -> ShmRing {
        ShmRing {
            mem,
            cap: layout.capacity as u64,
            layout,
        }
    }

    #[cfg(loom)]
    pub(in crate::chan) fn memory(&self) -> &Arc<Memory> {
        &self.mem
    }

    pub(in crate::chan) fn layout(&self) -> &Layout {
        &self.layout
    }

    #[inline]
    pub(in crate::chan) fn tail(&self) -> SharedWord<'_> {
        SharedWord::new(self.mem.word(TAIL_LINE, 0))
    }

    #[inline]
    pub(in crate::chan) fn head(&self) -> SharedWord<'_> {
        SharedWord::new(self.mem.word(HEAD_LINE, 0))
    }

    /// The doorbell lock word (see `bells.rs`).
    pub(in crate::chan) fn bells_lock(&self) -> &AtomicU64 {
        self.mem.word(BELLS_LINE, 0)
    }

    /// The doorbell requests word (see `bells.rs`).
    pub(in crate::chan) fn bells_requests(&self) -> &AtomicU64 {
        self.mem.word(BELLS_LINE, 1)
    }

    /// The most messages the sender saw queued (clamped: another process
    /// writes it).
    pub(in crate::chan) fn peak(&self) -> u64 {
        self.mem
            .word(PEAK_LINE, 0)
            .load(Ordering::Relaxed)
            .min(self.cap)
    }

    /// The words of the slot of message `pos`: its length, then room for
    /// `max_msg` bytes. One bounds check here, none per word.
    #[inline]
    fn slot(&self, pos: u64) -> &[PayloadWord] {
        let lines = self.layout.slot_lines;
        self.mem
            .slot_words((pos % self.cap) as usize * lines, lines)
    }

    /// Writes `msg` (no longer than the limit) into the slot of `pos`.
    fn write(&self, pos: u64, msg: &[u8]) {
        let (len_word, words) = self
            .slot(pos)
            .split_first()
            .expect("a slot has a length word");
        let mut chunks = msg.chunks_exact(8);
        for (w, chunk) in words.iter().zip(&mut chunks) {
            let b: [u8; 8] = chunk.try_into().expect("8-byte chunk");
            w.store(u64::from_ne_bytes(b), Ordering::Relaxed);
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 8];
            b[..rest.len()].copy_from_slice(rest);
            words[msg.len() / 8].store(u64::from_ne_bytes(b), Ordering::Relaxed);
        }
        len_word.store(msg.len() as u64, Ordering::Relaxed);
    }

    /// Copies message `pos`, `len` bytes (checked against the limit), into
    /// the front of `out`.
    fn read_into(&self, pos: u64, len: usize, out: &mut [u8]) {
        let words = &self.slot(pos)[1..];
        let mut chunks = out[..len].chunks_exact_mut(8);
        for (chunk, w) in (&mut chunks).zip(words) {
            chunk.copy_from_slice(&w.load(Ordering::Relaxed).to_ne_bytes());
        }
        let rest = chunks.into_remainder();
        if !rest.is_empty() {
            let b = words[len / 8].load(Ordering::Relaxed).to_ne_bytes();
            rest.copy_from_slice(&b[..rest.len()]);
        }
    }

    /// The other side's position, read fresh and checked: it only moves
    /// forward, and the ring never holds more than its capacity.
    fn refresh(&self, word: Word, turn: &Turn, sender: bool) -> Result<u64> {
        let pos = word.position();
        let (tail, head) = if sender {
            (turn.own, pos)
        } else {
            (pos, turn.own)
        };
        if pos < turn.seen || head > tail || tail - head > self.cap {
            return Err(Error::Corrupt(if sender {
                "the receiver's position moved backwards or past the sender's"
            } else {
                "the sender's position moved backwards or past the ring"
            }));
        }
        Ok(pos)
    }

    /// Queues a copy of `msg` (within the limit: the caller checked) at the
    /// sender's position `turn.own`.
    pub(in crate::chan) fn push(&self, turn: &mut Turn, msg: &[u8]) -> Result<Pushed> {
        if turn.own >= POSITION_MAX {
            return Err(Error::Corrupt(
                "the positions reached the top of their range",
            ));
        }
        // Closed first: a full ring that is closed refuses with end, not
        // with "full" (D6).
        let mut tail = self.tail().load(Ordering::Relaxed);
        if tail.has(TAIL_CLOSED) {
            return Ok(Pushed::Closed);
        }
        if !self.has_room(turn)? {
            return Ok(Pushed::Full);
        }
        self.write(turn.own, msg);
        for _ in 0..MOVE_TRIES {
            if tail.position() != turn.own {
                return Err(Error::Corrupt("the receiver moved the sender's position"));
            }
            if tail.has(TAIL_CLOSED) {
                return Ok(Pushed::Closed);
            }
            // The receive side may flip a flag meanwhile: then try again.
            match self.tail().advance(tail) {
                Ok(()) => {
                    turn.own += 1;
                    return Ok(Pushed::Sent(tail));
                }
                Err(now) => tail = now,
            }
        }
        Err(Error::Corrupt(
            "the receiver keeps changing the sender's word",
        ))
    }

    /// The message at the receiver's position `turn.own`, if one is
    /// published: its length, checked against the limit.
    pub(in crate::chan) fn peek(&self, turn: &mut Turn) -> Result<Peeked> {
        if turn.own == turn.seen {
            let tail = self.tail().load(Ordering::Acquire);
            turn.seen = self.refresh(tail, turn, false)?;
            if turn.own == turn.seen {
                return Ok(Peeked::Empty(tail));
            }
        }
        let len = self.slot(turn.own)[0].load(Ordering::Relaxed);
        match usize::try_from(len) {
            Ok(len) if len <= self.layout.max_msg => Ok(Peeked::Ready(len)),
            _ => Err(Error::Corrupt("a message longer than the channel's limit")),
        }
    }

    /// Whether the sender at `turn` has room for one more message, reading
    /// the receiver's position (checked) when its last one says full.
    pub(in crate::chan) fn has_room(&self, turn: &mut Turn) -> Result<bool> {
        if turn.own - turn.seen >= self.cap {
            let head = self.head().load(Ordering::Acquire);
            turn.seen = self.refresh(head, turn, true)?;
        }
        Ok(turn.own - turn.seen < self.cap)
    }

    /// Copies the message `peek` found, `len` bytes, into the front of
    /// `out`.
    pub(in crate::chan) fn copy_out(&self, turn: &Turn, len: usize, out: &mut [u8]) {
        self.read_into(turn.own, len, out);
    }

    /// Frees the slot of the message just copied out: moves `head` past it.
    /// Returns the `head` word before (its flags are the receiver's to act
    /// on).
    pub(in crate::chan) fn release(&self, turn: &mut Turn) -> Result<Word> {
        let mut head = self.head().load(Ordering::Relaxed);
        for _ in 0..MOVE_TRIES {
            if head.position() != turn.own {
                return Err(Error::Corrupt("the sender moved the receiver's position"));
            }
            // The send side may flip a flag meanwhile: then try again.
            match self.head().advance(head) {
                Ok(()) => {
                    turn.own += 1;
                    return Ok(head);
                }
                Err(now) => head = now,
            }
        }
        Err(Error::Corrupt(
            "the sender keeps changing the receiver's word",
        ))
    }

    /// Whether the receiver at `turn` has emptied the queue: nothing past
    /// its position, read fresh.
    pub(in crate::chan) fn drained(&self, turn: &Turn) -> bool {
        turn.own >= turn.seen && turn.own >= self.tail().load(Ordering::SeqCst).position()
    }

    /// Records the depth a sender saw after publishing, if a new peak.
    pub(in crate::chan) fn record_peak(&self, turn: &Turn) {
        let depth = (turn.own - turn.seen).min(self.cap);
        let peak = self.mem.word(PEAK_LINE, 0);
        if depth > peak.load(Ordering::Relaxed) {
            peak.fetch_max(depth, Ordering::Relaxed);
        }
    }

    /// Whether the queue is at or below the low-water mark, judged by the
    /// words now.
    pub(in crate::chan) fn at_low_water(&self) -> bool {
        let tail = self.tail().load(Ordering::SeqCst);
        let head = self.head().load(Ordering::SeqCst);
        depth(tail, head) <= self.layout.low_water as u64
    }

    /// The lengths of the messages between `head` and `tail` (clamped to
    /// the limit and the ring: another process writes them), for the stats.
    pub(in crate::chan) fn pending_bytes(&self, head: u64, tail: u64) -> u64 {
        let tail = tail.min(head + self.cap);
        (head..tail)
            .map(|p| {
                self.slot(p)[0]
                    .load(Ordering::Relaxed)
                    .min(self.layout.max_msg as u64)
            })
            .sum()
    }
}

/// Messages between `head` and `tail`; 0 if the words say less.
fn depth(tail: Word, head: Word) -> u64 {
    tail.position().saturating_sub(head.position())
}

impl Queue for ShmRing {
    fn tail(&self) -> SharedWord<'_> {
        ShmRing::tail(self)
    }

    fn head(&self) -> SharedWord<'_> {
        ShmRing::head(self)
    }

    fn byte_limited(&self) -> bool {
        false
    }

    fn bytes(&self) -> u64 {
        0
    }

    fn is_full(&self, depth: u64, _bytes: u64) -> bool {
        depth >= self.cap
    }

    fn is_low(&self, depth: u64, _bytes: u64) -> bool {
        depth <= self.layout.low_water as u64
    }

    fn fits(&self, depth: u64, _bytes: u64, _len: usize) -> bool {
        depth < self.cap
    }

    fn judge_tries(&self) -> u32 {
        MOVE_TRIES
    }
}
