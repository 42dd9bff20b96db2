// SPDX-License-Identifier: MIT OR Apache-2.0
//! The eventfd: a channel's doorbell and a loop's wake-up.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use super::retry_eintr;

/// A non-blocking eventfd used as a level-triggered doorbell: readable while
/// its counter is non-zero.
#[derive(Debug)]
pub(crate) struct EventFd(OwnedFd);

impl EventFd {
    /// A new eventfd with counter 0.
    pub(crate) fn new() -> io::Result<EventFd> {
        let fd = syscall!(eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK))?;
        // SAFETY: eventfd just returned this fd and nothing else owns it.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Adds `n` to the counter (makes the fd readable).
    pub(crate) fn write(&self, n: u64) -> io::Result<()> {
        let buf = n.to_ne_bytes();
        retry_eintr(|| syscall!(write(self.0.as_raw_fd(), buf.as_ptr().cast(), buf.len())))
            .map(drop)
    }

    /// Reads and resets the counter; `Ok(0)` when it was already zero.
    pub(crate) fn read(&self) -> io::Result<u64> {
        let mut buf = [0u8; 8];
        match retry_eintr(|| syscall!(read(self.0.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len())))
        {
            Ok(_) => Ok(u64::from_ne_bytes(buf)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
            Err(e) => Err(e),
        }
    }

    /// Sets the fd readable. Only fails if the counter would overflow, which
    /// the doorbell protocol rules out (it writes 1 while the counter is 0,
    /// and pulses at most once per refused call between two lowers), so a
    /// failure is a broken invariant.
    #[cfg_attr(loom, allow(dead_code))] // under loom the channel uses a model
    pub(crate) fn raise(&self) {
        let res = self.write(1);
        debug_assert!(res.is_ok(), "eventfd doorbell write failed: {res:?}");
    }

    /// Adds one to the counter whether or not it is already up: an event
    /// for edge-triggered waiters (EPOLLET, Go's netpoller), which a write
    /// wakes even when the fd is readable already. The counter's value
    /// means nothing beyond non-zero, and a lower resets it.
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn pulse(&self) {
        self.raise();
    }

    /// Clears the fd. A read of a valid non-blocking eventfd cannot fail.
    pub(crate) fn lower(&self) {
        let res = self.read();
        debug_assert!(res.is_ok(), "eventfd doorbell read failed: {res:?}");
    }
}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}
