// SPDX-License-Identifier: MIT OR Apache-2.0
//! Zeroed memory in an anonymous mapping of its own: a large channel's
//! slots, resident only as they are first touched.

use std::io;

/// A cache line of atomic words: a channel slot.
#[repr(C, align(64))]
pub(crate) struct Line(pub(crate) [std::sync::atomic::AtomicU64; 8]);

/// Zeroed cache lines in an anonymous private mapping of their own: the
/// kernel maps a page only when it is first touched, so lines never used
/// cost no resident memory. (The allocator's calloc clears a block that
/// is not a mapping of its own, touching every page: glibc maps only
/// blocks over its mmap threshold, 128 KiB or more, itself.)
pub(crate) struct ZeroedLines {
    ptr: std::ptr::NonNull<Line>,
    len: usize,
}

// SAFETY: the mapping is owned by this value and accessed only through
// `&[Line]`, whose atomics are Sync.
unsafe impl Send for ZeroedLines {}
// SAFETY: as above.
unsafe impl Sync for ZeroedLines {}

impl ZeroedLines {
    /// `len` (at least 1) zeroed lines.
    pub(crate) fn new(len: usize) -> io::Result<ZeroedLines> {
        let bytes = len
            .checked_mul(std::mem::size_of::<Line>())
            .filter(|&b| b > 0 && b <= isize::MAX as usize)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
        // SAFETY: a new private anonymous mapping; it overlays nothing.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = std::ptr::NonNull::new(p.cast::<Line>()).expect("mmap returned NULL");
        Ok(ZeroedLines { ptr, len })
    }
}

impl std::ops::Deref for ZeroedLines {
    type Target = [Line];
    fn deref(&self) -> &[Line] {
        // SAFETY: the mapping holds `len` lines, page-aligned (so aligned
        // for `Line`), zero-filled (all zeros is a valid `Line`), lives
        // until drop, and is written only through the atomics.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for ZeroedLines {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`, which no
        // reference outlives (they borrow `self`).
        unsafe {
            libc::munmap(
                self.ptr.as_ptr().cast(),
                self.len * std::mem::size_of::<Line>(),
            );
        }
    }
}
