// SPDX-License-Identifier: MIT OR Apache-2.0
//! A monotonic timerfd: a loop's timer source.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use super::retry_eintr;

/// A monotonic timerfd.
#[derive(Debug)]
pub(crate) struct TimerFd(OwnedFd);

fn timespec(d: Duration) -> libc::timespec {
    libc::timespec {
        tv_sec: d.as_secs().min(libc::time_t::MAX as u64) as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    }
}

impl TimerFd {
    pub(crate) fn new() -> io::Result<TimerFd> {
        let fd = syscall!(timerfd_create(
            libc::CLOCK_MONOTONIC,
            libc::TFD_CLOEXEC | libc::TFD_NONBLOCK
        ))?;
        // SAFETY: timerfd_create just returned this fd and nothing else owns it.
        Ok(TimerFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Arms the timer to fire `first` from now, then every `interval`
    /// (zero: once). A zero `first` would disarm a timerfd, so it becomes
    /// 1 ns: "now".
    pub(crate) fn set(&self, first: Duration, interval: Duration) -> io::Result<()> {
        let spec = libc::itimerspec {
            it_value: timespec(first.max(Duration::from_nanos(1))),
            it_interval: timespec(interval),
        };
        syscall!(timerfd_settime(
            self.0.as_raw_fd(),
            0,
            &spec,
            std::ptr::null_mut()
        ))
        .map(drop)
    }

    /// Expirations since the last read; 0 if none (spurious wake-up).
    pub(crate) fn read(&self) -> io::Result<u64> {
        let mut buf = [0u8; 8];
        match retry_eintr(|| syscall!(read(self.0.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len())))
        {
            Ok(_) => Ok(u64::from_ne_bytes(buf)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
            Err(e) => Err(e),
        }
    }
}

impl AsRawFd for TimerFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}
