// SPDX-License-Identifier: MIT OR Apache-2.0
//! Where a long message's memory is allocated (design.md, "Slots"):
//! sending allocates nothing once every slot has its buffer, and `recv`
//! allocates the receiver's own `Vec` (one allocation, on the receiving
//! thread) while the slot keeps its buffer; a buffer that grew past 64 KiB
//! is handed over instead, and its slot allocates anew; `recv_into` keeps
//! a buffer up to 64 KiB in its slot and frees a longer one.
//!
//! A counting global allocator, per thread, in a test binary of its own.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use eventq::{Chan, Options, Wait};

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator unchanged; the count is a
// thread-local cell that allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations this thread made while running `f`.
fn allocations<T>(f: impl FnOnce() -> T) -> (T, u64) {
    let before = ALLOCS.with(Cell::get);
    let out = f();
    (out, ALLOCS.with(Cell::get) - before)
}

const CAP: usize = 4;

/// A channel whose every slot has carried one message of `len` bytes.
fn warmed(len: usize) -> Chan {
    let chan = Chan::new(Options::new(CAP)).unwrap();
    for _ in 0..CAP {
        chan.send(&vec![1u8; len], Wait::Never).unwrap();
    }
    for _ in 0..CAP {
        chan.recv(Wait::Never).unwrap();
    }
    chan
}

#[test]
fn a_long_message_is_sent_without_allocating_and_received_into_one_new_vec() {
    let msg = vec![7u8; 1024];
    let chan = warmed(msg.len());
    for lap in 0..3 * CAP {
        let ((), sent) = allocations(|| chan.send(&msg, Wait::Never).unwrap());
        assert_eq!(
            sent, 0,
            "lap {lap}: a send allocated (its slot lost its buffer)"
        );
        let (got, received) = allocations(|| chan.recv(Wait::Never).unwrap());
        assert_eq!(got, msg, "lap {lap}");
        assert_eq!(
            received, 1,
            "lap {lap}: recv should allocate exactly its Vec"
        );
    }
}

#[test]
fn a_buffer_over_64_kib_is_handed_over_and_its_slot_allocates_anew() {
    let msg = vec![9u8; 100 * 1024];
    let chan = warmed(msg.len());
    for lap in 0..2 * CAP {
        let ((), sent) = allocations(|| chan.send(&msg, Wait::Never).unwrap());
        assert_eq!(sent, 1, "lap {lap}: the slot's new buffer");
        let (got, received) = allocations(|| chan.recv(Wait::Never).unwrap());
        assert_eq!(got.len(), msg.len(), "lap {lap}");
        assert!(got.iter().all(|&b| b == 9), "lap {lap}");
        assert_eq!(
            received, 0,
            "lap {lap}: the slot's buffer is handed over, not copied"
        );
    }
}

#[test]
fn recv_into_keeps_a_buffer_up_to_64_kib_and_frees_a_longer_one() {
    for (len, send_allocs) in [(60 * 1024, 0), (100 * 1024, 1)] {
        let msg = vec![3u8; len];
        let chan = warmed(len);
        let mut buf = vec![0u8; len];
        for lap in 0..2 * CAP {
            let ((), sent) = allocations(|| chan.send(&msg, Wait::Never).unwrap());
            assert_eq!(sent, send_allocs, "{len} bytes, lap {lap}");
            let (n, received) = allocations(|| chan.recv_into(&mut buf, Wait::Never).unwrap());
            assert_eq!((n, received), (len, 0), "{len} bytes, lap {lap}");
            assert_eq!(buf, msg);
        }
    }
}
