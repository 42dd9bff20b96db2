// SPDX-License-Identifier: MIT OR Apache-2.0
//! Thin wrappers over the Linux fd primitives the library is built on, and
//! the anonymous mapping that holds a large channel's slots.
//!
//! This module and `ffi` are the only places with `unsafe`. Every fd made
//! here is `O_CLOEXEC | O_NONBLOCK` and closed on drop; `EINTR` is retried.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

// The loom model's slots are plain boxes.
#[cfg(not(loom))]
/// A cache line of atomic words: a channel slot.
#[repr(C, align(64))]
pub(crate) struct Line(pub(crate) [std::sync::atomic::AtomicU64; 8]);

#[cfg(not(loom))]
/// Zeroed cache lines in an anonymous private mapping of their own: the
/// kernel maps a page only when it is first touched, so lines never used
/// cost no resident memory. (The allocator's calloc clears a block that
/// is not a mapping of its own, touching every page: glibc maps only
/// blocks over its mmap threshold, 128 KiB or more, itself.)
pub(crate) struct ZeroedLines {
    ptr: std::ptr::NonNull<Line>,
    len: usize,
}

#[cfg(not(loom))]
// SAFETY: the mapping is owned by this value and accessed only through
// `&[Line]`, whose atomics are Sync.
unsafe impl Send for ZeroedLines {}
#[cfg(not(loom))]
// SAFETY: as above.
unsafe impl Sync for ZeroedLines {}

#[cfg(not(loom))]
impl ZeroedLines {
    /// `len` (at least 1) zeroed lines.
    pub(crate) fn new(len: usize) -> io::Result<ZeroedLines> {
        let bytes = len
            .checked_mul(std::mem::size_of::<Line>())
            .filter(|&b| b > 0 && b <= isize::MAX as usize)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
        // SAFETY: a new private anonymous mapping; it overlays nothing.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = std::ptr::NonNull::new(p.cast::<Line>()).expect("mmap returned NULL");
        Ok(ZeroedLines { ptr, len })
    }
}

#[cfg(not(loom))]
impl std::ops::Deref for ZeroedLines {
    type Target = [Line];
    fn deref(&self) -> &[Line] {
        // SAFETY: the mapping holds `len` lines, page-aligned (so aligned
        // for `Line`), zero-filled (all zeros is a valid `Line`), lives
        // until drop, and is written only through the atomics.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

#[cfg(not(loom))]
impl Drop for ZeroedLines {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`, which no
        // reference outlives (they borrow `self`).
        unsafe {
            libc::munmap(
                self.ptr.as_ptr().cast(),
                self.len * std::mem::size_of::<Line>(),
            );
        }
    }
}

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
    /// the doorbell protocol rules out (it writes 1 while the counter is 0,
    /// and pulses at most once per refused call between two lowers), so a
    /// failure is a broken invariant.
    #[cfg_attr(loom, allow(dead_code))] // under loom the channel uses a model
    pub(crate) fn raise(&self) {
        let res = self.write(1);
        debug_assert!(res.is_ok(), "eventfd doorbell write failed: {res:?}");
    }

    /// Adds one to the counter whether or not it is already up: an event
    /// for edge-triggered waiters (EPOLLET, Go's netpoller), which a write
    /// wakes even when the fd is readable already. The counter's value
    /// means nothing beyond non-zero, and a lower resets it.
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn pulse(&self) {
        self.raise();
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

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
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

/// An epoll instance. Its own fd is readable while any registered fd has an
/// event, which is what lets a loop be embedded in another loop.
#[derive(Debug)]
pub struct Epoll(OwnedFd);

impl Epoll {
    pub fn new() -> io::Result<Epoll> {
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

    pub fn add(&self, fd: RawFd, events: u32, data: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, events, data)
    }

    pub fn modify(&self, fd: RawFd, events: u32, data: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, events, data)
    }

    pub fn delete(&self, fd: RawFd) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0)
    }

    /// Waits for events; `None` waits without limit. Sub-millisecond
    /// timeouts round up so a short wait never becomes a busy poll. A
    /// signal interrupting the wait gives `ErrorKind::Interrupted`: the
    /// caller retries with what is left of its timeout.
    pub fn wait(
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

/// A monotonic timerfd.
#[derive(Debug)]
pub struct TimerFd(OwnedFd);

fn timespec(d: Duration) -> libc::timespec {
    libc::timespec {
        tv_sec: d.as_secs().min(libc::time_t::MAX as u64) as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    }
}

impl TimerFd {
    pub fn new() -> io::Result<TimerFd> {
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
    pub fn set(&self, first: Duration, interval: Duration) -> io::Result<()> {
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

    /// Disarms the timer.
    pub fn disarm(&self) -> io::Result<()> {
        let zero = timespec(Duration::ZERO);
        let spec = libc::itimerspec {
            it_value: zero,
            it_interval: zero,
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
    pub fn read(&self) -> io::Result<u64> {
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

/// A signalfd for one signal. Creating it blocks the signal in the calling
/// thread (a signalfd only sees signals that are blocked); the process's
/// other threads must block it too, or the kernel may deliver it to them.
#[derive(Debug)]
pub struct SignalFd(OwnedFd);

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
    pub fn new(signo: i32) -> io::Result<(SignalFd, bool)> {
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
    pub fn read(&self) -> io::Result<Option<i32>> {
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

/// A new inotify instance, `IN_CLOEXEC | IN_NONBLOCK`.
pub fn inotify_new() -> io::Result<OwnedFd> {
    let fd = syscall!(inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK))?;
    // SAFETY: inotify_init1 just returned this fd and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Adds a watch of `path` for the events in `mask` to inotify instance
/// `fd`; returns the watch descriptor.
pub fn inotify_watch(fd: RawFd, path: &std::path::Path, mask: u32) -> io::Result<i32> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    syscall!(inotify_add_watch(fd, path.as_ptr(), mask))
}
