// SPDX-License-Identifier: MIT OR Apache-2.0
//! inotify, for memory watches that follow a cgroup's removal.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// A new inotify instance, `IN_CLOEXEC | IN_NONBLOCK`.
pub(crate) fn inotify_new() -> io::Result<OwnedFd> {
    let fd = syscall!(inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK))?;
    // SAFETY: inotify_init1 just returned this fd and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Adds a watch of `path` for the events in `mask` to inotify instance
/// `fd`; returns the watch descriptor.
pub(crate) fn inotify_watch(fd: RawFd, path: &std::path::Path, mask: u32) -> io::Result<i32> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    syscall!(inotify_add_watch(fd, path.as_ptr(), mask))
}
