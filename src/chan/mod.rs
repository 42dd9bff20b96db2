// SPDX-License-Identifier: MIT OR Apache-2.0
//! The channel: a bounded multi-producer multi-consumer queue of byte
//! messages with two doorbell fds. The seed article's fix done once,
//! properly: a FIFO carries *what*, an eventfd only says *whether*.
//!
//! - `ring.rs`: the queue, lock-free (positions, stamps, flag bits);
//! - `slots.rs`: its storage, one block of plain data, and the long
//!   messages' buffers (the channel's one `unsafe`);
//! - `doorbell.rs`: the two eventfds, changed only on transitions (D4, D5,
//!   D9);
//! - `parking.rs`: threads blocked in the library, on condvars;
//! - `waits.rs`: how a call waits a little before it tries again or parks;
//! - `shared.rs`: what the handles share, and the work around each call's
//!   claims;
//! - `consumer.rs`: the loop's receive and the hand-on between consumers;
//! - `options.rs`: options, limits, stats;
//! - `shim.rs`: the primitives, swapped for loom's under `--cfg loom`;
//! - `process/`: the same channel between two processes.
//!
//! This file is the API, for both kinds of channel.

// No `unsafe` but the slot buffer's (`slots.rs`) and the ring's two uses of
// it, each allowed where it is.
#![deny(unsafe_code)]

mod consumer;
mod doorbell;
#[cfg(loom)]
mod model;
mod options;
mod parking;
mod process;
mod ring;
mod shared;
mod shim;
#[allow(unsafe_code)]
mod slots;
mod waits;

use std::fmt;
use std::os::fd::RawFd;
#[cfg(not(loom))]
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::Arc;

pub use self::consumer::Consumer;
pub(crate) use self::consumer::{EachEnd, LoopConsumer};
use self::doorbell::{HEAD_SEND_LOWERED, TAIL_RECV_RAISED};
use self::options::Limits;
pub use self::options::{
    DropFn, Options, Stats, Wait, DEFAULT_MAX_MSG_SIZE, MAX_CAPACITY, SHARED_DEFAULT_MAX_MSG_SIZE,
};
use self::parking::{HEAD_SEND_WAITERS, TAIL_RECV_WAITERS};
#[cfg(not(loom))]
pub use self::process::SharedFds;
pub use self::process::{Side, SHARED_MSG_MAX};
use self::ring::{Ring, TAIL_CLOSED};
use self::shared::Shared;
use crate::error::{Error, Result};

// The flag bits of each word, owned by the ring, the doorbells and the
// parking, must not overlap.
const _: () = assert!(
    TAIL_CLOSED.disjoint(TAIL_RECV_RAISED)
        && TAIL_CLOSED.disjoint(TAIL_RECV_WAITERS)
        && TAIL_RECV_RAISED.disjoint(TAIL_RECV_WAITERS)
        && HEAD_SEND_LOWERED.disjoint(HEAD_SEND_WAITERS)
);

/// A handle to a channel. Clone it to give each thread its own; the channel
/// lives until the last handle is dropped. Any handle can send, receive and
/// close.
///
/// A thread sends, another receives every message once, in order, then sees
/// the end of the stream:
///
/// ```
/// use eventq::{Chan, Error, Options, Wait};
///
/// let chan = Chan::new(Options::new(64))?;
/// let tx = chan.clone();
/// let producer = std::thread::spawn(move || -> eventq::Result<()> {
///     for i in 0u32..100 {
///         tx.send(&i.to_le_bytes(), Wait::Forever)?;
///     }
///     tx.close();
///     Ok(())
/// });
/// let mut buf = [0u8; 4];
/// let mut next = 0u32;
/// loop {
///     match chan.recv_into(&mut buf, Wait::Forever) {
///         Ok(n) => {
///             assert_eq!(u32::from_le_bytes(buf[..n].try_into().unwrap()), next);
///             next += 1;
///         }
///         Err(Error::Closed) => break, // end of stream: all 100 arrived
///         Err(e) => return Err(e),
///     }
/// }
/// assert_eq!(next, 100);
/// producer.join().unwrap()?;
/// # Ok::<(), eventq::Error>(())
/// ```
///
/// Its [`recv_fd`](Chan::recv_fd) can be polled by any event loop instead:
/// it is readable exactly while messages are pending (or after close).
#[derive(Clone)]
pub struct Chan {
    inner: Inner,
}

/// A channel within this process, or one end of a channel shared with
/// another process.
#[derive(Clone)]
enum Inner {
    Local(Arc<Shared>),
    Process(Arc<process::Channel>),
}

impl fmt::Debug for Chan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Chan");
        match &self.inner {
            Inner::Local(sh) => d
                .field("limits", sh.ring.limits())
                .field("send_fd", &sh.bells.send_raw_fd_if_open()),
            Inner::Process(p) => d
                .field("side", &p.side())
                .field("capacity", &p.capacity())
                .field("max_msg_size", &p.max_msg_size()),
        };
        d.field("recv_fd", &self.recv_raw_fd()).finish()
    }
}

/// The receive fd, [`Chan::recv_fd`]: what a channel is polled for is its
/// messages, so a `Chan` passes as an fd to any poller (mio, tokio's
/// `AsyncFd`, an epoll set) as the fd that is readable exactly while
/// messages are pending or the channel is closed (D4). Only poll it; never
/// read or write it. It exists from [`Chan::new`] on, so this neither
/// creates an fd nor fails; the fd to poll for room is
/// [`Chan::send_fd`], made on first use, also for the send end of a
/// process-shared channel (whose receive fd this still is).
#[cfg(not(loom))]
impl AsFd for Chan {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.recv_fd()
    }
}

impl Chan {
    /// Creates a channel and its receive eventfd (the send one is created
    /// by the first [`send_fd`](Chan::send_fd)). The ring's slots are
    /// allocated here, zeroed: address space proportional to `capacity`,
    /// resident only as messages reach them.
    pub fn new(options: Options) -> Result<Chan> {
        let limits = Limits::from_options(&options)?;
        let ring = Ring::new(limits).ok_or_else(|| Error::from_errno(libc::ENOMEM))?;
        Ok(Chan {
            inner: Inner::Local(Arc::new(Shared::new(ring, options.on_drop)?)),
        })
    }

    /// Creates a channel to share with one other process: this process
    /// holds `side`, the process it is handed to ([`send_to`](Chan::send_to),
    /// [`export_fds`](Chan::export_fds)) the other. Its ring is a sealed
    /// memfd of `capacity` slots, each holding a whole message of up to
    /// `max_msg_size` bytes ([`SHARED_DEFAULT_MAX_MSG_SIZE`] unless set; at
    /// most [`SHARED_MSG_MAX`]),
    /// so the memory is fixed when it is made; `max_bytes` and the drop
    /// hook are not supported. The contract between processes, and what a
    /// death does, is in `docs/design.md`.
    pub fn new_shared(options: Options, side: Side) -> Result<Chan> {
        let options = options.shared_defaults();
        if options.on_drop.is_some() {
            return Err(Error::Invalid(
                "a process-shared channel has no drop hook: its messages may outlive this process",
            ));
        }
        let limits = Limits::from_options(&options)?;
        Ok(Chan {
            inner: Inner::Process(Arc::new(process::create(&limits, side)?)),
        })
    }

    /// Hands the other end of this process-shared channel to the process at
    /// the other end of the connected Unix socket `sock` (which takes it
    /// with [`recv_from`](Chan::recv_from)). Allowed while no other process
    /// holds that end: before the first handover, or once the one that
    /// held it is gone (then it is handed to its successor, and what it had
    /// not taken is still there). `Error::Attached` otherwise.
    #[cfg(not(loom))]
    pub fn send_to(&self, sock: impl AsFd) -> Result<()> {
        self.process()?.send_to(sock.as_fd())
    }

    /// Takes the end of a process-shared channel that the process at the
    /// other end of the connected Unix socket `sock` hands over with
    /// [`send_to`](Chan::send_to). Everything received is checked first:
    /// `Error::Corrupt` if it is not a channel's end.
    #[cfg(not(loom))]
    pub fn recv_from(sock: impl AsFd) -> Result<Chan> {
        let p = process::recv_from(sock.as_fd())?;
        Ok(Chan {
            inner: Inner::Process(Arc::new(p)),
        })
    }

    /// The fds of the other end of this process-shared channel, for a child
    /// process to inherit and take with [`import_fds`](Chan::import_fds);
    /// the same rule as [`send_to`](Chan::send_to) for when it is allowed.
    #[cfg(not(loom))]
    pub fn export_fds(&self) -> Result<SharedFds> {
        self.process()?.export_fds()
    }

    /// Takes an end of a process-shared channel from fds another process
    /// exported ([`export_fds`](Chan::export_fds)); they are checked as
    /// [`recv_from`](Chan::recv_from) checks what it receives.
    #[cfg(not(loom))]
    pub fn import_fds(fds: SharedFds) -> Result<Chan> {
        let p = process::import(fds)?;
        Ok(Chan {
            inner: Inner::Process(Arc::new(p)),
        })
    }

    /// Which end of a process-shared channel this is; `None` for a channel
    /// within this process.
    pub fn side(&self) -> Option<Side> {
        match &self.inner {
            Inner::Local(_) => None,
            Inner::Process(p) => Some(p.side()),
        }
    }

    fn process(&self) -> Result<&process::Channel> {
        match &self.inner {
            Inner::Process(p) => Ok(p),
            Inner::Local(_) => Err(Error::Invalid(
                "not a process-shared channel (made by Chan::new_shared)",
            )),
        }
    }

    /// The fd to poll for input: readable exactly while messages are pending
    /// or the channel is closed (D4). Only poll it; never read or write it.
    /// Edge-triggered pollers may wait for the next event after a refused
    /// receive (D9). Several consumers, each with its own epoll set, should
    /// register it with `EPOLLEXCLUSIVE` and receive until `WouldBlock` or
    /// `Closed` before waiting again: one wakes per write, not all (D4).
    ///
    /// Of a process-shared channel it is an epoll fd, readable also once
    /// the other process is gone; the kernel refuses `EPOLLEXCLUSIVE` on it,
    /// so there every consumer wakes.
    ///
    /// Until the first call (of this, `AsFd`, or a loop or `Consumer`
    /// taking the channel) the fd is not kept in step, since nobody can
    /// poll it: a channel used only through blocking calls costs no eventfd
    /// syscalls. The first call brings it up to date.
    #[cfg(not(loom))]
    pub fn recv_fd(&self) -> BorrowedFd<'_> {
        match &self.inner {
            Inner::Local(sh) => sh.bells.recv_fd(&sh.ring),
            Inner::Process(p) => p.poll_fd(process::Direction::Recv),
        }
    }

    /// The fd to poll for room: not readable while the channel is full and
    /// open, readable again once it drains to the low-water mark or closes
    /// (D5). Only poll it; never read or write it. Edge-triggered pollers
    /// may wait for the next event after a refused send (D9).
    ///
    /// The first call creates it (every handle then shares it), at the
    /// level the channel's state gives it; it fails only then, if the
    /// eventfd cannot be created (EMFILE, ENFILE, ENOMEM), and a later call
    /// tries again. A channel never asked for it has one fd. Of a
    /// process-shared channel it is an epoll fd, made with the channel,
    /// readable also once the other process is gone.
    #[cfg(not(loom))]
    pub fn send_fd(&self) -> Result<BorrowedFd<'_>> {
        match &self.inner {
            Inner::Local(sh) => Ok(sh.bells.send(&sh.ring)?.as_fd()),
            Inner::Process(p) => Ok(p.poll_fd(process::Direction::Send)),
        }
    }

    /// `recv_fd` as a number, for the loop (and the loom model, whose
    /// doorbells have no fd).
    pub(crate) fn recv_raw_fd(&self) -> RawFd {
        match &self.inner {
            Inner::Local(sh) => sh.bells.recv_raw_fd(&sh.ring),
            #[cfg(not(loom))]
            Inner::Process(p) => p.poll_fd(process::Direction::Recv).as_raw_fd(),
            #[cfg(loom)]
            Inner::Process(_) => -1,
        }
    }

    /// Whether consumers may register the receive fd with `EPOLLEXCLUSIVE`
    /// (not an epoll fd, which the kernel refuses it for).
    pub(crate) fn exclusive_wake(&self) -> bool {
        matches!(self.inner, Inner::Local(_))
    }

    /// The longest message a send accepts.
    pub fn max_msg_size(&self) -> usize {
        match &self.inner {
            Inner::Local(sh) => sh.ring.limits().max_msg_size,
            Inner::Process(p) => p.max_msg_size(),
        }
    }

    /// The most messages the channel holds.
    pub fn capacity(&self) -> usize {
        match &self.inner {
            Inner::Local(sh) => sh.ring.limits().capacity,
            Inner::Process(p) => p.capacity(),
        }
    }

    /// Queues a copy of `msg`, waiting for room as `wait` says. A refused
    /// message is not queued and stays the caller's.
    pub fn send(&self, msg: &[u8], wait: Wait) -> Result<()> {
        match &self.inner {
            Inner::Local(sh) => sh.send(msg, wait),
            Inner::Process(_) => self.send_batch([msg], wait).map(drop),
        }
    }

    /// Queues copies of a prefix of `msgs`, as many as fit, in order; waits
    /// (as `wait` says) only until the first fits. Returns how many were
    /// queued: the rest were refused and stay the caller's. An empty batch
    /// returns 0 at once. A message over the size limit ends the prefix; if
    /// it is the first, the call fails with `Error::TooLarge`.
    ///
    /// A sender blocked on a full channel is woken when the channel drains
    /// to its low-water mark (or closes), as a producer polling the send fd
    /// is; a sender that arrives while there is room never waits.
    pub fn send_batch<'a, I>(&self, msgs: I, wait: Wait) -> Result<usize>
    where
        I: IntoIterator<Item = &'a [u8]>,
    {
        match &self.inner {
            Inner::Local(sh) => sh.send_batch(msgs.into_iter(), wait),
            Inner::Process(p) => p.send_batch(msgs.into_iter(), wait),
        }
    }

    /// Receives the head message into `buf` and returns its length. If `buf`
    /// is too small the message stays at the head and the error says how
    /// many bytes it needs (D7). After close, once drained, fails with
    /// `Error::Closed` (end of stream).
    pub fn recv_into(&self, buf: &mut [u8], wait: Wait) -> Result<usize> {
        match &self.inner {
            Inner::Local(sh) => sh.recv_into(buf, wait),
            Inner::Process(p) => {
                let mut got = 0;
                p.recv_with(wait, 1, |len, copy| {
                    got = len;
                    let fits = len <= buf.len();
                    if fits {
                        copy(buf);
                    }
                    fits
                })?;
                Ok(got)
            }
        }
    }

    /// Receives the head message as an owned buffer: a new `Vec`, allocated
    /// on the calling thread, with a copy of the message. A message whose
    /// slot buffer grew past 64 KiB is handed over without a copy instead
    /// (the slot would free that buffer anyway). `recv_into` never
    /// allocates.
    pub fn recv(&self, wait: Wait) -> Result<Vec<u8>> {
        match &self.inner {
            Inner::Local(sh) => sh.recv(wait),
            Inner::Process(p) => {
                let mut msg = Vec::new();
                p.recv_with(wait, 1, |len, copy| {
                    msg.resize(len, 0);
                    copy(&mut msg);
                    true
                })?;
                Ok(msg)
            }
        }
    }

    /// Receives as many messages as fit, packed back to back into `buf`,
    /// writing each length into `lens`; waits (as `wait` says) only for the
    /// first. Returns the count. Stops before the first message that does not
    /// fit; if that is the head, fails with `Error::BufferTooSmall` and
    /// nothing is taken. `lens` empty returns 0 at once.
    pub fn recv_batch(&self, buf: &mut [u8], lens: &mut [usize], wait: Wait) -> Result<usize> {
        match &self.inner {
            Inner::Local(sh) => sh.recv_batch(buf, lens, wait),
            Inner::Process(_) if lens.is_empty() => Ok(0),
            Inner::Process(p) => {
                let mut off = 0;
                let mut i = 0;
                let end = p.recv_with(wait, lens.len(), |len, copy| {
                    if off + len > buf.len() {
                        return false;
                    }
                    copy(&mut buf[off..off + len]);
                    lens[i] = len;
                    i += 1;
                    off += len;
                    true
                })?;
                Ok(end.count())
            }
        }
    }

    /// Closes the channel (D6): sends fail with `Error::Closed` from now on;
    /// queued messages stay receivable; both fds become and stay readable and
    /// every blocked thread wakes. Returns false if it was already closed.
    /// A process-shared channel is closed for both processes.
    pub fn close(&self) -> bool {
        match &self.inner {
            Inner::Local(sh) => sh.close(),
            Inner::Process(p) => p.close(),
        }
    }

    /// Whether the channel is closed (for a process-shared channel also:
    /// closed on this side because the other process broke the protocol,
    /// or, at the receiving end, because the sending process is gone).
    pub fn is_closed(&self) -> bool {
        match &self.inner {
            Inner::Local(sh) => sh.ring.tail().load(shim::Ordering::SeqCst).has(TAIL_CLOSED),
            Inner::Process(p) => p.is_closed(),
        }
    }

    /// A snapshot of the counters. Exact when no call is in progress; while
    /// other threads send and receive, each counter is a recent value.
    /// `pending_bytes` without a byte limit is summed over the pending
    /// messages, so it costs time proportional to the queue's depth. Of a
    /// process-shared channel, the doorbell rings are this process's.
    pub fn stats(&self) -> Stats {
        match &self.inner {
            Inner::Local(sh) => sh.stats(),
            Inner::Process(p) => p.stats(),
        }
    }

    /// Drops this handle. If it was the last one, the messages still queued
    /// are discarded (each passed to the drop hook) and the channel's final
    /// counters are returned, `dropped` included; otherwise `None`. The
    /// last handle of a process-shared channel's end discards nothing (the
    /// other process, or the next one given this end, may still take them):
    /// `dropped` is 0.
    pub fn into_final_stats(self) -> Option<Stats> {
        match self.inner {
            Inner::Local(sh) => {
                let mut shared = Arc::into_inner(sh)?;
                shared.discard_pending();
                Some(shared.stats())
            }
            Inner::Process(p) => Arc::into_inner(p).map(|p| p.stats()),
        }
    }
}
