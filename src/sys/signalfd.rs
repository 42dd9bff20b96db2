// SPDX-License-Identifier: MIT OR Apache-2.0
//! A signalfd for one signal: a loop's signal source.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::retry_eintr;

/// A signalfd for one signal. Creating it blocks the signal in the calling
/// thread (a signalfd only sees signals that are blocked); the process's
/// other threads must block it too, or the kernel may deliver it to them.
#[derive(Debug)]
pub(crate) struct SignalFd(OwnedFd);

/// A set holding just `signo`.
fn sigset_of(signo: i32) -> io::Result<libc::sigset_t> {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    syscall!(sigemptyset(&mut set))?;
    syscall!(sigaddset(&mut set, signo))?;
    Ok(set)
}

/// Changes the calling thread's signal mask for `signo` (`SIG_BLOCK` or
/// `SIG_UNBLOCK`); returns whether it was blocked before.
fn mask_signal(how: i32, signo: i32) -> io::Result<bool> {
    let set = sigset_of(signo)?;
    // SAFETY: sigset_t is plain data; pthread_sigmask fills it.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // pthread_sigmask returns the error number instead of setting errno.
    // SAFETY: set is initialised and old is writable.
    let rc = unsafe { libc::pthread_sigmask(how, &set, &mut old) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    // SAFETY: old was filled by pthread_sigmask.
    Ok(unsafe { libc::sigismember(&old, signo) } == 1)
}

/// Unblocks `signo` in the calling thread: undoes `SignalFd::new`'s block
/// when the source it was made for could not be added.
pub(crate) fn unblock_signal(signo: i32) {
    let _ = mask_signal(libc::SIG_UNBLOCK, signo);
}

impl SignalFd {
    /// The signalfd, and whether this call blocked the signal (it was not
    /// blocked before). If making the fd fails, the mask is restored.
    pub(crate) fn new(signo: i32) -> io::Result<(SignalFd, bool)> {
        let was_blocked = mask_signal(libc::SIG_BLOCK, signo)?;
        let set = sigset_of(signo)?;
        match syscall!(signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK)) {
            // SAFETY: signalfd just returned this fd and nothing else owns it.
            Ok(fd) => Ok((SignalFd(unsafe { OwnedFd::from_raw_fd(fd) }), !was_blocked)),
            Err(e) => {
                if !was_blocked {
                    unblock_signal(signo);
                }
                Err(e)
            }
        }
    }

    /// The number of the next pending signal, `None` if none is pending.
    pub(crate) fn read(&self) -> io::Result<Option<i32>> {
        // SAFETY: signalfd_siginfo is plain data.
        let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<libc::signalfd_siginfo>();
        let res = retry_eintr(|| {
            syscall!(read(
                self.0.as_raw_fd(),
                (&mut info as *mut libc::signalfd_siginfo).cast(),
                size
            ))
        });
        match res {
            Ok(_) => Ok(Some(info.ssi_signo as i32)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl AsRawFd for SignalFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}
