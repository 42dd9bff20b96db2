// SPDX-License-Identifier: MIT OR Apache-2.0
//! poll(2) on one fd: how a memory watch waits without a loop.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::{Duration, Instant};

use super::retry_eintr;

/// Waits until `fd` has one of `events` (or an error or hang-up, which
/// poll always reports) and returns the revents; 0 once `timeout` passed
/// (`None` waits without limit). Sub-millisecond timeouts round up, so a
/// short wait never becomes a busy poll; a signal interrupting the wait
/// resumes it with what is left of the timeout.
pub(crate) fn poll_one(
    fd: BorrowedFd<'_>,
    events: i16,
    timeout: Option<Duration>,
) -> io::Result<i16> {
    let deadline = timeout.map(|t| Instant::now() + t);
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events,
        revents: 0,
    };
    retry_eintr(|| {
        let ms = match deadline {
            None => -1,
            Some(d) => d
                .saturating_duration_since(Instant::now())
                .as_nanos()
                .div_ceil(1_000_000)
                .min(i32::MAX as u128) as i32,
        };
        syscall!(poll(&mut pfd, 1, ms))
    })?;
    Ok(pfd.revents)
}
