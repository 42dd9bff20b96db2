// SPDX-License-Identifier: MIT OR Apache-2.0
//! The epoll instance under a loop.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// An epoll instance. Its own fd is readable while any registered fd has an
/// event, which is what lets a loop be embedded in another loop.
#[derive(Debug)]
pub(crate) struct Epoll(OwnedFd);

impl Epoll {
    pub(crate) fn new() -> io::Result<Epoll> {
        let fd = syscall!(epoll_create1(libc::EPOLL_CLOEXEC))?;
        // SAFETY: epoll_create1 just returned this fd and nothing else owns it.
        let epoll = Epoll(unsafe { OwnedFd::from_raw_fd(fd) });
        // epoll_create1 takes no O_NONBLOCK; set it so the fd handed out as
        // the loop's own is non-blocking like every other fd of the library.
        syscall!(fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK))?;
        Ok(epoll)
    }

    fn ctl(&self, op: i32, fd: RawFd, events: u32, data: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: data };
        syscall!(epoll_ctl(self.0.as_raw_fd(), op, fd, &mut ev)).map(drop)
    }

    pub(crate) fn add(&self, fd: RawFd, events: u32, data: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, events, data)
    }

    pub(crate) fn modify(&self, fd: RawFd, events: u32, data: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, events, data)
    }

    pub(crate) fn delete(&self, fd: RawFd) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0)
    }

    /// Waits for events; `None` waits without limit. Sub-millisecond
    /// timeouts round up so a short wait never becomes a busy poll. A
    /// signal interrupting the wait gives `ErrorKind::Interrupted`: the
    /// caller retries with what is left of its timeout.
    pub(crate) fn wait(
        &self,
        events: &mut [libc::epoll_event],
        timeout: Option<Duration>,
    ) -> io::Result<usize> {
        let ms = match timeout {
            None => -1,
            Some(d) => d.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32,
        };
        let max = events.len().min(i32::MAX as usize) as i32;
        syscall!(epoll_wait(self.0.as_raw_fd(), events.as_mut_ptr(), max, ms)).map(|n| n as usize)
    }
}

impl AsFd for Epoll {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl AsRawFd for Epoll {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}
