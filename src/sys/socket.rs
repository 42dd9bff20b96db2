// SPDX-License-Identifier: MIT OR Apache-2.0
//! Unix sockets: fds passed with `SCM_RIGHTS`, and the link between the two
//! processes of a process-shared channel (a connected socket pair whose end
//! hangs up when every process holding the other end is gone).

use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use super::retry_eintr;

/// A connected pair of stream sockets, close-on-exec and non-blocking.
pub(crate) fn pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1 as RawFd; 2];
    syscall!(socketpair(
        libc::AF_UNIX,
        libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
        0,
        fds.as_mut_ptr()
    ))?;
    // SAFETY: socketpair just returned these fds and nothing else owns them.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The most fds one message carries.
pub(crate) const MAX_FDS: usize = 8;

/// Room for a control message carrying `MAX_FDS` fds, aligned for
/// `cmsghdr`.
#[repr(C, align(8))]
struct ControlBuf([u8; 128]);

const _: () = assert!(
    // CMSG_SPACE(MAX_FDS * 4) on 64-bit Linux: a 16-byte header and the data
    // rounded up to 8.
    16 + (MAX_FDS * size_of::<RawFd>()).next_multiple_of(8) <= 128
);

/// Sends `data` with `fds` attached over the connected Unix socket `sock`,
/// in one message; `EMSGSIZE`-like short writes are an error (`EPROTO`).
/// A blocking socket may block; a non-blocking one may fail with `EAGAIN`.
pub(crate) fn send_with_fds(sock: BorrowedFd<'_>, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
    assert!(fds.len() <= MAX_FDS, "too many fds for one message");
    let mut control = ControlBuf([0; 128]);
    let mut iov = libc::iovec {
        iov_base: data.as_ptr().cast_mut().cast(),
        iov_len: data.len(),
    };
    // SAFETY: msghdr is plain data; the fields set below are all it needs.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    let payload = std::mem::size_of_val(fds);
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(payload as u32) } as usize;
    msg.msg_control = control.0.as_mut_ptr().cast();
    msg.msg_controllen = space;
    // SAFETY: msg_control points to `space` bytes (asserted to fit above),
    // so the first header and its data lie inside the buffer.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(payload as u32) as usize;
        std::ptr::copy_nonoverlapping(
            fds.as_ptr(),
            libc::CMSG_DATA(cmsg).cast::<RawFd>(),
            fds.len(),
        );
    }
    let sent = retry_eintr(|| syscall!(sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL)))?;
    if sent as usize != data.len() {
        return Err(io::Error::from_raw_os_error(libc::EPROTO));
    }
    Ok(())
}

/// Receives one message into `buf` and the fds attached to it (made
/// close-on-exec), from the Unix socket `sock`. Returns the bytes read and
/// the fds; fds beyond `MAX_FDS`, or a message whose fds did not all fit,
/// are closed and reported as `EPROTO`, as is end of stream.
pub(crate) fn recv_with_fds(
    sock: BorrowedFd<'_>,
    buf: &mut [u8],
) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut control = ControlBuf([0; 128]);
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is plain data; the fields set below are all it needs.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.0.as_mut_ptr().cast();
    msg.msg_controllen = control.0.len();
    let n = retry_eintr(|| {
        syscall!(recvmsg(
            sock.as_raw_fd(),
            &mut msg,
            libc::MSG_CMSG_CLOEXEC | libc::MSG_WAITALL
        ))
    })? as usize;
    let mut fds = Vec::new();
    // SAFETY: recvmsg filled `msg_controllen` bytes of the control buffer
    // with well-formed headers; CMSG_NXTHDR stays inside them, and each
    // SCM_RIGHTS header's data holds `(cmsg_len - CMSG_LEN(0)) / 4` fds,
    // now ours (each is taken as an OwnedFd exactly once).
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let bytes = (*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                for i in 0..bytes / size_of::<RawFd>() {
                    fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    if n == 0 || msg.msg_flags & (libc::MSG_CTRUNC | libc::MSG_TRUNC) != 0 || fds.len() > MAX_FDS {
        return Err(io::Error::from_raw_os_error(libc::EPROTO));
    }
    Ok((n, fds))
}

/// Whether the other end of the connected socket `sock` is gone (hang-up
/// or end of stream), without waiting. Data the other side wrote counts
/// too: the link carries none, so any is a broken protocol.
pub(crate) fn hung_up(sock: BorrowedFd<'_>) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd: sock.as_raw_fd(),
        events: libc::POLLIN | libc::POLLRDHUP,
        revents: 0,
    };
    let n = retry_eintr(|| syscall!(poll(&mut pfd, 1, 0)))?;
    Ok(n > 0 && pfd.revents != 0)
}

/// Whether `fd` is a socket.
pub(crate) fn is_socket(fd: BorrowedFd<'_>) -> bool {
    // SAFETY: stat is plain data that fstat fills.
    let mut st: libc::stat = unsafe { zeroed() };
    syscall!(fstat(fd.as_raw_fd(), &mut st)).is_ok() && st.st_mode & libc::S_IFMT == libc::S_IFSOCK
}
