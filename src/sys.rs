//! Thin wrappers over the Linux fd primitives the library is built on.
//!
//! This module and `ffi` are the only places with `unsafe`. Every fd made
//! here is `O_CLOEXEC | O_NONBLOCK` and closed on drop; `EINTR` is retried.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// Runs a libc call and turns `-1` into the thread's `errno` as an
/// `io::Error`.
macro_rules! syscall {
    ($fn:ident ( $($arg:expr),* $(,)? )) => {{
        // SAFETY: each call site passes valid arguments for this libc function;
        // pointers refer to live locals or slices of the stated length.
        let res = unsafe { libc::$fn($($arg),*) };
        if res == -1 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(res)
        }
    }};
}

/// Retries `f` while it fails with `EINTR`.
pub(crate) fn retry_eintr<T>(mut f: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    loop {
        match f() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// A non-blocking eventfd used as a level-triggered doorbell: readable while
/// its counter is non-zero.
#[derive(Debug)]
pub struct EventFd(OwnedFd);

impl EventFd {
    /// A new eventfd with counter 0.
    pub fn new() -> io::Result<EventFd> {
        let fd = syscall!(eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK))?;
        // SAFETY: eventfd just returned this fd and nothing else owns it.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Adds `n` to the counter (makes the fd readable).
    pub fn write(&self, n: u64) -> io::Result<()> {
        let buf = n.to_ne_bytes();
        retry_eintr(|| syscall!(write(self.0.as_raw_fd(), buf.as_ptr().cast(), buf.len())))
            .map(drop)
    }

    /// Reads and resets the counter; `Ok(0)` when it was already zero.
    pub fn read(&self) -> io::Result<u64> {
        let mut buf = [0u8; 8];
        match retry_eintr(|| syscall!(read(self.0.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len())))
        {
            Ok(_) => Ok(u64::from_ne_bytes(buf)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
            Err(e) => Err(e),
        }
    }

    /// Sets the fd readable. Only fails if the counter would overflow, which
    /// the doorbell protocol rules out (it writes 1 only while the counter
    /// is 0), so a failure is a broken invariant.
    pub(crate) fn raise(&self) {
        let res = self.write(1);
        debug_assert!(res.is_ok(), "eventfd doorbell write failed: {res:?}");
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

/// Polls one fd for `events` (`libc::POLLIN`, ...) and returns the revents,
/// 0 on timeout. `None` waits without limit.
pub fn poll_fd(fd: RawFd, events: i16, timeout: Option<Duration>) -> io::Result<i16> {
    let ms = match timeout {
        None => -1,
        Some(d) => d.as_millis().min(i32::MAX as u128) as i32,
    };
    let mut pfd = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    let n = retry_eintr(|| syscall!(poll(&mut pfd, 1, ms)))?;
    Ok(if n == 0 { 0 } else { pfd.revents })
}

/// True when `fd` is readable right now (a zero-timeout poll).
pub fn is_readable(fd: RawFd) -> io::Result<bool> {
    Ok(poll_fd(fd, libc::POLLIN, Some(Duration::ZERO))? & libc::POLLIN != 0)
}
