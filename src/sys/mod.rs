// SPDX-License-Identifier: MIT OR Apache-2.0
//! The operating system layer: thin wrappers over the Linux fd primitives
//! the library is built on, one file per mechanism, and the mappings that
//! hold a channel's ring (anonymous, or a sealed memfd shared with another
//! process).
//!
//! Private to the crate. With `ffi`, the only code allowed `unsafe` (the
//! crate root denies it elsewhere). Every fd made here is `O_CLOEXEC |
//! O_NONBLOCK` and closed on drop; `EINTR` is retried.

use std::io;

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

/// Makes `fd` close-on-exec, as every fd the library holds is (one taken
/// from a caller may have lost the flag, as `dup2` clears it).
pub(crate) fn set_cloexec(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let flags = syscall!(fcntl(fd.as_raw_fd(), libc::F_GETFD))?;
    if flags & libc::FD_CLOEXEC == 0 {
        syscall!(fcntl(
            fd.as_raw_fd(),
            libc::F_SETFD,
            flags | libc::FD_CLOEXEC
        ))?;
    }
    Ok(())
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

mod epoll;
mod eventfd;
mod inotify;
#[cfg(not(loom))]
mod mapping;
#[cfg(not(loom))]
mod memfd;
mod poll;
mod signalfd;
#[cfg(not(loom))]
pub(crate) mod socket;
mod timerfd;

pub(crate) use self::epoll::Epoll;
pub(crate) use self::eventfd::EventFd;
pub(crate) use self::inotify::{inotify_new, inotify_watch};
#[cfg(not(loom))]
pub(crate) use self::mapping::ZeroedLines;
pub(crate) use self::poll::poll_one;
pub(crate) use self::signalfd::{unblock_signal, SignalFd};
pub(crate) use self::timerfd::TimerFd;
