// SPDX-License-Identifier: MIT OR Apache-2.0
//! The slot ring under the channel: a bounded MPMC queue of byte messages
//! without a queue lock (the algorithm of crossbeam's `ArrayQueue`, D. Vyukov's
//! bounded queue), written without `unsafe`.
//!
//! - `tail` and `head` are positions that only grow; message `pos` lives in
//!   slot `pos % cap`. A sender claims `pos` by moving `tail` from `pos` to
//!   `pos + 1` with one CAS, a receiver claims it by moving `head` the same
//!   way. Each word also carries a few flag bits below the position (see
//!   `TAIL_*`, `HEAD_*`), so the CAS that claims a slot also reads them: a
//!   busy channel learns "nobody needs a wake-up" without a fence.
//! - Each slot's `stamp` says whose turn it is: `2 * pos` = empty, ready for
//!   the sender of `pos`; `2 * pos + 1` = holds message `pos`. The receiver
//!   of `pos` hands the slot to the sender of `pos + cap`. A thread touches a
//!   slot's payload only while the stamp says it is its turn. Slot `i`
//!   stores its stamp less `2 * i`, so that a new ring, every slot waiting
//!   for the sender of its own index, is all zeros: allocated zeroed, its
//!   pages stay unmapped until used (an idle channel's slots cost no
//!   memory). The subtraction is one instruction on an index computed
//!   anyway.
//! - A message of up to `INLINE_MAX` bytes is stored in the slot itself, in
//!   atomic words written and read with relaxed ordering (the stamp's
//!   release/acquire orders them): plain moves, and the slot is one cache
//!   line. A longer message goes to the slot's heap buffer, behind a mutex
//!   that is never contended (the stamp already serialises its users) and
//!   exists so this file needs no `unsafe`. A profile of the first version,
//!   which put every message behind that mutex, showed its lock and unlock
//!   as a third of the 8-byte send and a sixth of the receive.
//! - Buffers stay in their slots, so the steady-state copy path allocates
//!   nothing. The buffers themselves (one mutex and `Vec` per slot) are
//!   allocated at the channel's first long message, so a channel that only
//!   carries short ones never has them.

use std::sync::OnceLock;

use crate::error::{Error, Result};
use crate::sync::{AtomicU64, Backoff, CachePadded, Ordering, SlotBuf, SlotRef, Slots, SLOT_WORDS};

/// Flag bits below the position in `tail` and `head`.
const FLAG_BITS: u32 = 3;
/// Adds one to a word's position.
pub(super) const ONE: u64 = 1 << FLAG_BITS;

/// `tail`: the channel is closed; no send succeeds after the CAS that set it.
pub(super) const TAIL_CLOSED: u64 = 1;
/// `tail`: the receive doorbell is raised.
pub(super) const TAIL_RECV_RAISED: u64 = 2;
/// `tail`: a receiver may be blocked in the library, waiting for a message.
pub(super) const TAIL_RECV_WAITERS: u64 = 4;
/// `head`: the send doorbell is lowered.
pub(super) const HEAD_SEND_LOWERED: u64 = 1;
/// `head`: a sender may be blocked in the library, waiting for room.
pub(super) const HEAD_SEND_WAITERS: u64 = 2;

/// The position part of a `head` or `tail` word.
pub(super) fn position(word: u64) -> u64 {
    word >> FLAG_BITS
}

/// Buffers that grew past this are freed when their message is received, so
/// one huge message does not pin its memory for the channel's life.
const SPARE_BUF_MAX: usize = 64 * 1024;

/// Messages up to this long are stored in the slot (after its stamp and
/// length, which is readable before the slot is claimed, so a receiver can
/// refuse a message that does not fit without taking it), longer ones in
/// its heap buffer. A slot is one cache line, aligned: a sender filling
/// slot `p` does not disturb the receiver reading slot `p - 1`.
pub(super) const INLINE_MAX: usize = (SLOT_WORDS - 2) * 8;

/// A message as a receiver gets it, still in its slot.
pub(super) enum Payload<'a> {
    /// Copied out of the slot's words.
    Inline(&'a [u8]),
    /// The slot's heap buffer; taking it leaves the slot to allocate anew.
    Heap(&'a mut Vec<u8>),
}

impl Payload<'_> {
    pub(super) fn bytes(&self) -> &[u8] {
        match self {
            Payload::Inline(b) => b,
            Payload::Heap(v) => v,
        }
    }

    /// The message as an owned buffer: the heap buffer itself when there is
    /// one, a new one for an inline message.
    pub(super) fn into_vec(self) -> Vec<u8> {
        match self {
            Payload::Inline(b) => b.to_vec(),
            Payload::Heap(v) => std::mem::take(v),
        }
    }
}

pub(super) struct Ring {
    /// Written by receivers.
    pub(super) head: CachePadded<AtomicU64>,
    /// Written by senders.
    pub(super) tail: CachePadded<AtomicU64>,
    slots: Slots,
    /// Heap buffers for long messages, one per slot, apart from the slots
    /// so the short-message path never touches them; allocated by the
    /// first long message.
    bufs: OnceLock<Box<[SlotBuf]>>,
    cap: u64,
    /// `cap - 1` if `cap` is a power of two above 1, else 0.
    mask: u64,
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
    pub(super) word: u64,
    /// The message's length.
    pub(super) len: usize,
}

/// What a pop found.
pub(super) enum Pop<T> {
    Took(Claimed<T>),
    /// Nothing pending: the `tail` word that showed it (for `TAIL_CLOSED`).
    Empty(u64),
    /// The head message is longer than the caller accepts; it stays queued.
    TooLong(usize),
}

impl Ring {
    /// A ring of `cap` slots, allocated now; fails with ENOMEM rather than
    /// aborting when a huge capacity cannot be had.
    pub(super) fn new(cap: usize) -> Result<Ring> {
        let slots = Slots::zeroed(cap).ok_or_else(no_memory)?;
        Ok(Ring {
            head: CachePadded(AtomicU64::new(0)),
            tail: CachePadded(AtomicU64::new(0)),
            slots,
            bufs: OnceLock::new(),
            cap: cap as u64,
            mask: if cap > 1 && cap.is_power_of_two() {
                cap as u64 - 1
            } else {
                0
            },
        })
    }

    pub(super) fn cap(&self) -> u64 {
        self.cap
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
        (self.slots.get(i), 2 * (pos - i as u64))
    }

    /// The slots' heap buffers, once the first long message allocated them.
    fn bufs(&self) -> &[SlotBuf] {
        self.bufs
            .get()
            .expect("a long message allocated the buffers")
    }

    /// Allocates the slots' heap buffers if they are not yet, before a long
    /// message claims a slot (which cannot be undone).
    fn ensure_bufs(&self) -> Result<(), PushError> {
        if self.bufs.get().is_some() {
            return Ok(());
        }
        let mut bufs = Vec::new();
        bufs.try_reserve_exact(self.cap as usize)
            .map_err(|_| PushError::NoMemory)?;
        bufs.extend((0..self.cap).map(|_| SlotBuf::new()));
        // A racing sender may have set them first: either is as good.
        let _ = self.bufs.set(bufs.into_boxed_slice());
        Ok(())
    }

    /// Stores message `pos` (its slot is the caller's by the stamp).
    fn write(&self, pos: u64, msg: &[u8]) {
        let i = self.index(pos);
        let slot = self.slots.get(i);
        if msg.len() <= INLINE_MAX {
            // Whole words apart from the tail, so the compiler emits plain
            // moves rather than a memcpy call per word.
            let whole = msg.chunks_exact(8);
            let tail = whole.remainder();
            let n = msg.len() / 8;
            for (word, chunk) in slot.inline.iter().zip(whole) {
                let w: [u8; 8] = chunk.try_into().expect("8-byte chunk");
                word.store(u64::from_ne_bytes(w), Ordering::Relaxed);
            }
            if !tail.is_empty() {
                let mut w = [0u8; 8];
                w[..tail.len()].copy_from_slice(tail);
                slot.inline[n].store(u64::from_ne_bytes(w), Ordering::Relaxed);
            }
        } else {
            let mut buf = self.bufs()[i].lock();
            buf.clear();
            buf.extend_from_slice(msg);
        }
        slot.len.store(msg.len() as u64, Ordering::Relaxed);
    }

    /// Hands message `pos`, `len` bytes long, to `take` (its slot is the
    /// caller's by the stamp).
    fn read<T>(&self, pos: u64, len: usize, take: &mut impl FnMut(Payload<'_>) -> T) -> T {
        if len <= INLINE_MAX {
            let mut out = [0u8; INLINE_MAX];
            let (slot, _) = self.slot(pos);
            // Every word the message touches, whole: the bytes past `len`
            // are the stored word's padding and are not handed out.
            for (word, chunk) in slot
                .inline
                .iter()
                .zip(out.chunks_exact_mut(8))
                .take(len.div_ceil(8))
            {
                chunk.copy_from_slice(&word.load(Ordering::Relaxed).to_ne_bytes());
            }
            take(Payload::Inline(&out[..len]))
        } else {
            let mut buf = self.bufs()[self.index(pos)].lock();
            let value = take(Payload::Heap(&mut buf));
            if buf.capacity() > SPARE_BUF_MAX {
                *buf = Vec::new();
            }
            value
        }
    }

    /// Queues a copy of `msg` unless the ring is full or closed.
    pub(super) fn push(&self, msg: &[u8]) -> Result<Claimed<()>, PushError> {
        if msg.len() > INLINE_MAX {
            self.ensure_bufs()?;
        }
        let mut backoff = Backoff::new();
        let mut tail = self.tail.load(Ordering::Relaxed);
        loop {
            if tail & TAIL_CLOSED != 0 {
                return Err(PushError::Closed);
            }
            let pos = position(tail);
            let (slot, empty) = self.slot(pos);
            let stamp = slot.stamp.load(Ordering::Acquire);
            if stamp == empty {
                match self.tail.compare_exchange_weak(
                    tail,
                    tail + ONE,
                    Ordering::SeqCst,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        self.write(pos, msg);
                        slot.stamp.store(empty + 1, Ordering::Release);
                        return Ok(Claimed {
                            value: (),
                            pos,
                            word: tail,
                            len: msg.len(),
                        });
                    }
                    Err(now) => tail = now,
                }
            } else {
                if stamp < empty {
                    // The slot still holds message `pos - cap`: full, unless
                    // a receiver has claimed it and is copying it out.
                    let head = self.head.load(Ordering::SeqCst);
                    if position(head) + self.cap <= pos {
                        return Err(PushError::Full);
                    }
                }
                // Otherwise another sender took `pos` first, or a receiver
                // is mid-copy: look again.
                backoff.snooze();
                tail = self.tail.load(Ordering::Relaxed);
            }
        }
    }

    /// Takes the head message if `accept(len)` says yes, giving its buffer
    /// to `take`. A refused message stays at the head.
    pub(super) fn pop<T>(
        &self,
        accept: impl Fn(usize) -> bool,
        take: &mut impl FnMut(Payload<'_>) -> T,
    ) -> Pop<T> {
        let mut backoff = Backoff::new();
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            let pos = position(head);
            let (slot, empty) = self.slot(pos);
            let stamp = slot.stamp.load(Ordering::Acquire);
            if stamp == empty + 1 {
                let len = slot.len.load(Ordering::Relaxed) as usize;
                if !accept(len) {
                    // Only if `pos` is still the head: otherwise the length
                    // may belong to a message another receiver took.
                    let now = self.head.load(Ordering::Relaxed);
                    if now == head {
                        return Pop::TooLong(len);
                    }
                    head = now;
                    continue;
                }
                match self.head.compare_exchange_weak(
                    head,
                    head + ONE,
                    Ordering::SeqCst,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        let value = self.read(pos, len, take);
                        slot.stamp.store(empty + 2 * self.cap, Ordering::Release);
                        return Pop::Took(Claimed {
                            value,
                            pos,
                            word: head,
                            len,
                        });
                    }
                    Err(now) => head = now,
                }
            } else {
                if stamp == empty {
                    // Not written yet: empty, unless a sender has claimed
                    // the slot and is copying into it.
                    let tail = self.tail.load(Ordering::SeqCst);
                    if position(tail) == pos {
                        return Pop::Empty(tail);
                    }
                }
                backoff.snooze();
                head = self.head.load(Ordering::Relaxed);
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

    /// The length of message `pos`, for counting what is queued. Only
    /// meaningful for `head <= pos < tail`, and exact when no call is in
    /// progress.
    pub(super) fn len_at(&self, pos: u64) -> usize {
        self.slot(pos).0.len.load(Ordering::Relaxed) as usize
    }

    /// Gives each message still queued to `f`, oldest first, and returns how
    /// many; for the last handle, when no other thread can touch the ring.
    pub(super) fn drain(&self, mut f: impl FnMut(&[u8])) -> u64 {
        let head = position(self.head.load(Ordering::SeqCst));
        let tail = position(self.tail.load(Ordering::SeqCst));
        for p in head..tail {
            let len = self.len_at(p);
            self.read(p, len, &mut |m: Payload<'_>| f(m.bytes()));
        }
        tail - head
    }
}

pub(super) fn no_memory() -> Error {
    Error::from_errno(libc::ENOMEM)
}
