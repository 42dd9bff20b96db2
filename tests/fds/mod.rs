// SPDX-License-Identifier: MIT OR Apache-2.0
//! Readiness of real fds for the tests and benches: poll(2) on one fd and a
//! small epoll set, straight on libc (the library's own wrappers are
//! private).

#![allow(dead_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn millis(timeout: Option<Duration>) -> libc::c_int {
    timeout.map_or(-1, |d| {
        d.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as libc::c_int
    })
}

/// Polls `fd` for `events` and returns the revents, 0 on timeout; `None`
/// waits without limit. `EINTR` is retried.
pub fn poll_fd(fd: RawFd, events: i16, timeout: Option<Duration>) -> io::Result<i16> {
    let mut pfd = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    loop {
        // SAFETY: `pfd` is one live pollfd, as the count says.
        match check(unsafe { libc::poll(&mut pfd, 1, millis(timeout)) }) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
            Ok(0) => return Ok(0),
            Ok(_) => return Ok(pfd.revents),
        }
    }
}

/// Whether `fd` is readable right now (a zero-timeout poll).
pub fn is_readable(fd: RawFd) -> io::Result<bool> {
    Ok(poll_fd(fd, libc::POLLIN, Some(Duration::ZERO))? & libc::POLLIN != 0)
}

/// An epoll set, for waiting on fds as an event loop does.
pub struct Epoll(OwnedFd);

impl Epoll {
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: no pointer arguments.
        let fd = check(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: epoll_create1 just returned this fd and nothing else owns it.
        Ok(Epoll(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Registers `fd` for `events`, with `data` in its events.
    pub fn add(&self, fd: RawFd, events: u32, data: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: data };
        // SAFETY: `ev` is a live epoll_event.
        check(unsafe { libc::epoll_ctl(self.0.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) })
            .map(drop)
    }

    /// Waits for events into `events`; `None` waits without limit.
    pub fn wait(
        &self,
        events: &mut [libc::epoll_event],
        timeout: Option<Duration>,
    ) -> io::Result<usize> {
        let max = events.len().min(i32::MAX as usize) as libc::c_int;
        // SAFETY: `events` has room for `max` entries.
        let n = check(unsafe {
            libc::epoll_wait(
                self.0.as_raw_fd(),
                events.as_mut_ptr(),
                max,
                millis(timeout),
            )
        })?;
        Ok(n as usize)
    }
}
