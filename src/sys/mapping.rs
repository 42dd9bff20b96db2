// SPDX-License-Identifier: MIT OR Apache-2.0
//! Zeroed cache lines for a channel's ring: its shared words and its slots.
//!
//! From `MAPPED_MIN` bytes up the lines get an anonymous mapping of their
//! own, whose pages the kernel provides only when first touched, so an idle
//! channel's slots cost no resident memory whatever its capacity. Below it
//! they come from the allocator (a mapping costs a page and a kernel VMA).
//! The allocator would not do for large rings: glibc's calloc clears any
//! block it does not map itself (under its mmap threshold, 128 KiB or more),
//! touching every page.

use std::alloc::{self, Layout};
use std::io;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;

/// A cache line of atomic words.
#[repr(C, align(64))]
pub(crate) struct Line(pub(crate) [AtomicU64; 8]);

/// Lines come in 128-byte aligned pairs, so that a word kept alone on an
/// even line shares no adjacent-line prefetch pair with another.
const ALIGN: usize = 128;

/// The size from which the lines get a mapping of their own.
const MAPPED_MIN: usize = 8 * 1024;

/// `H` header lines then `len` more, zeroed, 128-byte aligned, freed on
/// drop. The header is a fixed-size array, so a word in it is reached at a
/// constant offset, without a bounds check.
pub(crate) struct ZeroedLines<const H: usize> {
    ptr: NonNull<Line>,
    len: usize,
    mapped: bool,
}

// SAFETY: the memory is owned by this value and reached only through
// `&[Line]`, whose atomics are Sync.
unsafe impl<const H: usize> Send for ZeroedLines<H> {}
// SAFETY: as above.
unsafe impl<const H: usize> Sync for ZeroedLines<H> {}

impl<const H: usize> ZeroedLines<H> {
    /// The header and `len` zeroed lines; `ENOMEM` rather than an abort
    /// when they cannot be had.
    pub(crate) fn new(len: usize) -> io::Result<ZeroedLines<H>> {
        let layout = Self::layout(len).ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
        if layout.size() < MAPPED_MIN {
            // SAFETY: the layout's size is non-zero (len >= 1).
            let p = unsafe { alloc::alloc_zeroed(layout) };
            let ptr = NonNull::new(p.cast::<Line>())
                .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
            return Ok(ZeroedLines {
                ptr,
                len,
                mapped: false,
            });
        }
        // SAFETY: a new private anonymous mapping; it overlays nothing.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                layout.size(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<Line>()).expect("mmap returned NULL");
        Ok(ZeroedLines {
            ptr,
            len,
            mapped: true,
        })
    }

    /// The header.
    #[inline]
    pub(crate) fn header(&self) -> &[Line; H] {
        // SAFETY: the memory starts with `H` zeroed lines (see `deref`),
        // and `[Line; H]` has the layout of `H` consecutive lines.
        unsafe { &*self.ptr.as_ptr().cast::<[Line; H]>() }
    }

    /// The memory for `len` lines after the header.
    fn layout(len: usize) -> Option<Layout> {
        let bytes = len
            .checked_add(H)?
            .checked_mul(std::mem::size_of::<Line>())?;
        if bytes == 0 {
            return None;
        }
        Layout::from_size_align(bytes, ALIGN).ok()
    }
}

/// The `len` lines after the header.
impl<const H: usize> std::ops::Deref for ZeroedLines<H> {
    type Target = [Line];
    #[inline]
    fn deref(&self) -> &[Line] {
        // SAFETY: the memory holds `H + len` lines, aligned to 128
        // (page-aligned when mapped), zero-filled (all zeros is a valid
        // `Line`), lives until drop, and is written only through the
        // atomics.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(H), self.len) }
    }
}

impl<const H: usize> Drop for ZeroedLines<H> {
    fn drop(&mut self) {
        let layout = Self::layout(self.len).expect("the layout `new` used");
        if self.mapped {
            // SAFETY: unmaps exactly the mapping made in `new`, which no
            // reference outlives (they borrow `self`).
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), layout.size()) };
        } else {
            // SAFETY: frees exactly the block `new` allocated with this
            // layout, which no reference outlives.
            unsafe { alloc::dealloc(self.ptr.as_ptr().cast(), layout) };
        }
    }
}
