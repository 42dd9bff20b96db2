// SPDX-License-Identifier: MIT OR Apache-2.0
//! Cache lines for a channel's ring: its shared words and its slots.
//!
//! An in-process ring's lines are zeroed. From `MAPPED_MIN` bytes up they
//! get an anonymous mapping of their own, whose pages the kernel provides
//! only when first touched, so an idle channel's slots cost no resident
//! memory whatever its capacity. Below it they come from the allocator (a
//! mapping costs a page and a kernel VMA). The allocator would not do for
//! large rings: glibc's calloc clears any block it does not map itself
//! (under its mmap threshold, 128 KiB or more), touching every page.
//!
//! A process-shared ring's lines are a shared mapping of a sealed memfd
//! (see `memfd.rs`), made by one process and mapped by the other.

use std::alloc::{self, Layout};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;

use super::memfd;

/// A cache line of atomic words.
#[repr(C, align(64))]
pub(crate) struct Line(pub(crate) [AtomicU64; 8]);

// `ZeroedLines::words` reads lines as words: no padding in a line.
const _: () = assert!(std::mem::size_of::<Line>() == 8 * std::mem::size_of::<AtomicU64>());

/// Lines come in 128-byte aligned pairs, so that a word kept alone on an
/// even line shares no adjacent-line prefetch pair with another.
const ALIGN: usize = 128;

/// The size from which the lines get a mapping of their own.
const MAPPED_MIN: usize = 8 * 1024;

/// `H` header lines then `len` more, 128-byte aligned, freed (or
/// unmapped) on drop. The header is a fixed-size array, so a word in it is
/// reached at a constant offset, without a bounds check.
pub(crate) struct ZeroedLines<const H: usize> {
    ptr: NonNull<Line>,
    len: usize,
    backing: Backing,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Backing {
    Heap,
    Private,
    /// A shared mapping of a memfd, of `bytes` bytes.
    Shared {
        bytes: usize,
    },
}

/// The largest shared mapping accepted from another process.
const SHARED_MAX: usize = 1 << 40;

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
                backing: Backing::Heap,
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
            backing: Backing::Private,
        })
    }

    /// The header and `len` zeroed lines in a new sealed memfd (its size
    /// fixed: it can neither shrink nor grow), mapped shared; the memfd is
    /// for another process to map.
    pub(crate) fn new_shared(len: usize) -> io::Result<(OwnedFd, ZeroedLines<H>)> {
        let layout = Self::layout(len).ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
        let fd = memfd::create_sealed(layout.size())?;
        let lines = Self::map(fd.as_fd(), layout.size())?;
        Ok((fd, lines))
    }

    /// Maps a memfd another process made: it must be sealed against
    /// shrinking and growing (so no access can fault), and its size whole
    /// lines, the header included. What the lines hold is the caller's to
    /// check.
    pub(crate) fn map_shared(fd: BorrowedFd<'_>) -> io::Result<ZeroedLines<H>> {
        let bytes = memfd::sealed_size(fd)?;
        let line = std::mem::size_of::<Line>();
        if bytes % line != 0 || bytes < H * line || bytes > SHARED_MAX {
            return Err(io::Error::from_raw_os_error(libc::EPROTO));
        }
        Self::map(fd, bytes)
    }

    fn map(fd: BorrowedFd<'_>, bytes: usize) -> io::Result<ZeroedLines<H>> {
        // SAFETY: a new shared mapping of `bytes` bytes of a memfd whose
        // size is sealed at least that large; it overlays nothing.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<Line>()).expect("mmap returned NULL");
        Ok(ZeroedLines {
            ptr,
            len: bytes / std::mem::size_of::<Line>() - H,
            backing: Backing::Shared { bytes },
        })
    }

    /// The `len` lines after the header as one run of words, 8 a line.
    #[inline]
    pub(crate) fn words(&self) -> &[AtomicU64] {
        let lines: &[Line] = self;
        // SAFETY: a `Line` is 8 words and nothing else (`repr(C)`, 64
        // bytes: checked below), so `len` lines are `8 * len` consecutive
        // words, borrowed for as long as the lines are.
        unsafe { std::slice::from_raw_parts(lines.as_ptr().cast::<AtomicU64>(), lines.len() * 8) }
    }

    /// The header.
    #[inline]
    pub(crate) fn header(&self) -> &[Line; H] {
        // SAFETY: the memory starts with `H` lines (see `deref`), and
        // `[Line; H]` has the layout of `H` consecutive lines.
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
        // (page-aligned when mapped), initialised (zero-filled or written
        // through atomics; any bytes are a valid `Line`), lives until drop,
        // and is reached only through the atomics.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(H), self.len) }
    }
}

impl<const H: usize> Drop for ZeroedLines<H> {
    fn drop(&mut self) {
        let bytes = match self.backing {
            Backing::Shared { bytes } => bytes,
            Backing::Heap | Backing::Private => Self::layout(self.len)
                .expect("the layout `new` used")
                .size(),
        };
        if self.backing == Backing::Heap {
            let layout = Self::layout(self.len).expect("the layout `new` used");
            // SAFETY: frees exactly the block `new` allocated with this
            // layout, which no reference outlives.
            unsafe { alloc::dealloc(self.ptr.as_ptr().cast(), layout) };
        } else {
            // SAFETY: unmaps exactly the mapping made by `new` or `map`, which
            // no reference outlives (they borrow `self`).
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), bytes) };
        }
    }
}
