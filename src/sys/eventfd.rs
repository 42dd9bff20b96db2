// SPDX-License-Identifier: MIT OR Apache-2.0
//! The eventfd: a channel's doorbell and a loop's wake-up.
//!
//! The doorbells of a process-shared channel are one open file in two
//! processes, so the other process can change its flags (clear
//! `O_NONBLOCK`) and fill its counter: those eventfds are *guarded*. A
//! guarded read asks the kernel not to wait (`RWF_NOWAIT`) whatever the
//! flags say; a guarded write restores `O_NONBLOCK` and writes only when
//! the counter has room (a full counter is readable already, which is what
//! a raise wants).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use super::retry_eintr;

/// A non-blocking eventfd used as a level-triggered doorbell: readable while
/// its counter is non-zero.
#[derive(Debug)]
pub(crate) struct EventFd {
    fd: OwnedFd,
    /// Shared with another process, which may change its flags and fill
    /// its counter: no read or write may wait (see the module doc).
    guarded: bool,
}

impl EventFd {
    /// A new eventfd with counter 0.
    pub(crate) fn new() -> io::Result<EventFd> {
        let fd = syscall!(eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK))?;
        // SAFETY: eventfd just returned this fd and nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(EventFd { fd, guarded: false })
    }

    /// A new eventfd to share with another process: guarded.
    #[cfg_attr(loom, allow(dead_code))] // the process channel's, not loom's
    pub(crate) fn new_shared() -> io::Result<EventFd> {
        Ok(EventFd {
            guarded: true,
            ..EventFd::new()?
        })
    }

    /// Adds `n` to the counter (makes the fd readable). A guarded eventfd
    /// is written only if the counter has room for `n`; else `Ok` and
    /// nothing written (it is readable already).
    pub(crate) fn write(&self, n: u64) -> io::Result<()> {
        if self.guarded {
            self.keep_nonblocking()?;
            if !self.has_room() {
                return Ok(());
            }
        }
        let buf = n.to_ne_bytes();
        retry_eintr(|| syscall!(write(self.fd.as_raw_fd(), buf.as_ptr().cast(), buf.len())))
            .map(drop)
    }

    /// Reads and resets the counter; `Ok(0)` when it was already zero.
    pub(crate) fn read(&self) -> io::Result<u64> {
        let mut buf = [0u8; 8];
        let res = if self.guarded {
            let mut iov = libc::iovec {
                iov_base: buf.as_mut_ptr().cast(),
                iov_len: buf.len(),
            };
            // RWF_NOWAIT: never wait, whatever the file's flags say.
            retry_eintr(|| {
                syscall!(preadv2(
                    self.fd.as_raw_fd(),
                    &mut iov,
                    1,
                    -1,
                    libc::RWF_NOWAIT
                ))
            })
        } else {
            retry_eintr(|| {
                syscall!(read(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len()
                ))
            })
        };
        match res {
            Ok(_) => Ok(u64::from_ne_bytes(buf)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
            Err(e) => Err(e),
        }
    }

    /// Sets `O_NONBLOCK` again if the other process cleared it.
    fn keep_nonblocking(&self) -> io::Result<()> {
        let flags = syscall!(fcntl(self.fd.as_raw_fd(), libc::F_GETFL))?;
        if flags & libc::O_NONBLOCK == 0 {
            syscall!(fcntl(
                self.fd.as_raw_fd(),
                libc::F_SETFL,
                flags | libc::O_NONBLOCK
            ))?;
        }
        Ok(())
    }

    /// Whether a write of 1 would not overflow the counter (the kernel's
    /// POLLOUT).
    fn has_room(&self) -> bool {
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLOUT,
            revents: 0,
        };
        matches!(retry_eintr(|| syscall!(poll(&mut pfd, 1, 0))), Ok(n) if n > 0)
            && pfd.revents & libc::POLLOUT != 0
    }

    /// Sets the fd readable. A write fails only when the counter would
    /// overflow, which the doorbell protocol never comes near (it writes 1
    /// while the counter is 0, and pulses at most once per refused call
    /// between two lowers); only another process sharing the fd could fill
    /// it, and a full counter is readable, which is what a raise wants.
    #[cfg_attr(loom, allow(dead_code))] // under loom the channel uses a model
    pub(crate) fn raise(&self) {
        let _ = self.write(1);
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

    #[cfg_attr(loom, allow(dead_code))] // the process channel's, not loom's
    /// Takes over `fd`, which another process sent as an eventfd; `EPROTO`
    /// if it is not one. Guarded, and made non-blocking (a flag of the open
    /// file, which the sender set already).
    pub(crate) fn from_received(fd: OwnedFd) -> io::Result<EventFd> {
        let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()));
        if matches!(&link, Ok(target) if target.as_os_str() != "anon_inode:[eventfd]") {
            return Err(io::Error::from_raw_os_error(libc::EPROTO));
        }
        let bell = EventFd { fd, guarded: true };
        bell.keep_nonblocking()?;
        Ok(bell)
    }

    #[cfg_attr(loom, allow(dead_code))] // the process channel's, not loom's
    /// Whether the fd is readable now (a zero-timeout poll; false if the
    /// poll fails, which it cannot on a valid fd).
    pub(crate) fn is_raised(&self) -> bool {
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        matches!(retry_eintr(|| syscall!(poll(&mut pfd, 1, 0))), Ok(n) if n > 0)
            && pfd.revents & libc::POLLIN != 0
    }

    #[cfg_attr(loom, allow(dead_code))] // the process channel's, not loom's
    /// A new fd for the same eventfd (close-on-exec), to send to another
    /// process.
    pub(crate) fn try_clone_fd(&self) -> io::Result<OwnedFd> {
        self.fd.try_clone()
    }
}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
