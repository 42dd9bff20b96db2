// SPDX-License-Identifier: MIT OR Apache-2.0
//! Sealed memfds: the memory of a process-shared channel. Seals fix the
//! size (no shrinking, no growing) before the fd leaves this process, so
//! the other process can never make an access to the mapping fault
//! (SIGBUS), and a memfd received from another process is mapped only if
//! its size is sealed the same way.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// The seals a channel's memfd must carry.
const SIZE_SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;

/// A new memfd of `bytes` zero bytes, its size sealed.
pub(crate) fn create_sealed(bytes: usize) -> io::Result<OwnedFd> {
    let name = c"eventq-chan";
    let fd = syscall!(memfd_create(
        name.as_ptr(),
        libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING
    ))?;
    // SAFETY: memfd_create just returned this fd and nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let len =
        libc::off_t::try_from(bytes).map_err(|_| io::Error::from_raw_os_error(libc::ENOMEM))?;
    syscall!(ftruncate(fd.as_raw_fd(), len))?;
    syscall!(fcntl(
        fd.as_raw_fd(),
        libc::F_ADD_SEALS,
        SIZE_SEALS | libc::F_SEAL_SEAL
    ))?;
    Ok(fd)
}

/// The size of a memfd whose size is sealed; `EPROTO` if `fd` is not a
/// memfd, its size could still change, or it is sealed against writing.
pub(crate) fn sealed_size(fd: BorrowedFd<'_>) -> io::Result<usize> {
    let seals = syscall!(fcntl(fd.as_raw_fd(), libc::F_GET_SEALS))
        .map_err(|_| io::Error::from_raw_os_error(libc::EPROTO))?;
    // Sealed against writing, it could not be mapped for writing.
    if seals & SIZE_SEALS != SIZE_SEALS
        || seals & (libc::F_SEAL_WRITE | libc::F_SEAL_FUTURE_WRITE) != 0
    {
        return Err(io::Error::from_raw_os_error(libc::EPROTO));
    }
    // SAFETY: stat is plain data that fstat fills.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    syscall!(fstat(fd.as_raw_fd(), &mut st))?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(io::Error::from_raw_os_error(libc::EPROTO));
    }
    usize::try_from(st.st_size).map_err(|_| io::Error::from_raw_os_error(libc::EPROTO))
}
