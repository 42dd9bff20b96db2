// SPDX-License-Identifier: MIT OR Apache-2.0
//! Async channels for smol and any executor (feature `async-io`):
//! `recv().await` and `send(..).await` on a [`Chan`], waiting in async-io's
//! reactor (the one smol uses; it runs on a thread of its own when no
//! `async_io::block_on` drives it, so any executor will do).
//!
//! async-io waits level-triggered: each wait arms the fd once and fires if
//! it is readable then or later. A call tries the channel without waiting
//! and, refused (`WouldBlock`), waits for the fd to be readable, then tries
//! again. A refused call's fd is down (D9) and readable while there is
//! work (D4, D5), so no task sleeps through a message, room or end of
//! stream. Cancel-safe as the Tokio wrapper is (`eventq::tokio` with that
//! feature): a message is taken or sent only by a non-waiting call inside
//! one poll and returned from it, so a future dropped before it completed
//! took or sent nothing.
//!
//! ```
//! use eventq::async_io::AsyncChan;
//! use eventq::{Chan, Error, Options, Wait};
//!
//! let chan = AsyncChan::new(Chan::new(Options::new(64))?);
//! let tx = chan.chan().clone();
//! let producer = std::thread::spawn(move || {
//!     for i in 0u32..100 {
//!         tx.send(&i.to_le_bytes(), Wait::Forever).unwrap();
//!     }
//!     tx.close();
//! });
//! let got = async_io::block_on(async {
//!     let mut next = 0u32;
//!     loop {
//!         match chan.recv().await {
//!             Ok(msg) => assert_eq!(msg, next.to_le_bytes()),
//!             Err(Error::Closed) => return Ok(next), // end of stream
//!             Err(e) => return Err(e),
//!         }
//!         next += 1;
//!     }
//! })?;
//! assert_eq!(got, 100);
//! producer.join().unwrap();
//! # Ok::<(), eventq::Error>(())
//! ```
//!
//! This wrapper has the calls only; the `Stream`, `Sink` and `select` are
//! in the Tokio one. Each `AsyncChan` registers a duplicate of the fd it
//! waits on, so several may wait on one channel; clones share theirs.

#![forbid(unsafe_code)]

use std::fmt;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::{Arc, OnceLock};

use ::async_io::Async;

use crate::{Chan, Error, Result, Wait};

/// A [`Chan`] whose calls can wait in async-io's reactor. Cloning is cheap
/// (an `Arc`); clones share the channel and the fds' registration. Any
/// clone can send, receive and close.
#[derive(Clone)]
pub struct AsyncChan {
    inner: Arc<Inner>,
}

struct Inner {
    chan: Chan,
    // Made by the first call that waits.
    recv: OnceLock<Async<OwnedFd>>,
    send: OnceLock<Async<OwnedFd>>,
}

#[derive(Clone, Copy)]
enum Dir {
    Recv,
    Send,
}

impl fmt::Debug for AsyncChan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncChan")
            .field("chan", &self.inner.chan)
            .finish_non_exhaustive()
    }
}

impl From<Chan> for AsyncChan {
    fn from(chan: Chan) -> AsyncChan {
        AsyncChan::new(chan)
    }
}

/// A duplicate of `fd` (several wrappers of one channel may register),
/// registered with async-io's reactor.
fn register(fd: BorrowedFd<'_>) -> Result<Async<OwnedFd>> {
    let dup = fd
        .try_clone_to_owned()
        .map_err(|e| Error::context("duplicating the channel's fd for async-io", &e))?;
    Async::new(dup).map_err(|e| Error::context("registering the channel's fd with async-io", &e))
}

impl AsyncChan {
    /// Wraps `chan`; nothing is registered until a call has to wait.
    pub fn new(chan: Chan) -> AsyncChan {
        AsyncChan {
            inner: Arc::new(Inner {
                chan,
                recv: OnceLock::new(),
                send: OnceLock::new(),
            }),
        }
    }

    /// The channel, for its synchronous calls, fds and stats.
    pub fn chan(&self) -> &Chan {
        &self.inner.chan
    }

    /// Closes the channel (D6), as [`Chan::close`].
    pub fn close(&self) -> bool {
        self.inner.chan.close()
    }

    fn fd(&self, dir: Dir) -> Result<&Async<OwnedFd>> {
        let cell = match dir {
            Dir::Recv => &self.inner.recv,
            Dir::Send => &self.inner.send,
        };
        if let Some(fd) = cell.get() {
            return Ok(fd);
        }
        let chan = &self.inner.chan;
        let fd = match dir {
            Dir::Recv => register(chan.recv_fd())?,
            Dir::Send => register(chan.send_fd()?)?,
        };
        Ok(cell.get_or_init(|| fd))
    }

    /// Every call: `call` (non-waiting) until it is not refused, waiting
    /// for the fd to be readable after each refusal.
    async fn run<T>(&self, dir: Dir, mut call: impl FnMut(&Chan) -> Result<T>) -> Result<T> {
        loop {
            match call(&self.inner.chan) {
                Err(Error::WouldBlock) => {}
                r => return r,
            }
            self.fd(dir)?
                .readable()
                .await
                .map_err(|e| Error::context("waiting for the channel's fd in async-io", &e))?;
        }
    }

    /// Receives the head message ([`Chan::recv`]), waiting until there is
    /// one; `Error::Closed` at end of stream. Cancel-safe.
    pub async fn recv(&self) -> Result<Vec<u8>> {
        self.run(Dir::Recv, |c| c.recv(Wait::Never)).await
    }

    /// Receives the head message into `buf` ([`Chan::recv_into`]), waiting
    /// until there is one. Cancel-safe.
    pub async fn recv_into(&self, buf: &mut [u8]) -> Result<usize> {
        self.run(Dir::Recv, |c| c.recv_into(buf, Wait::Never)).await
    }

    /// Receives as many messages as fit ([`Chan::recv_batch`]), waiting
    /// only for the first. Cancel-safe.
    pub async fn recv_batch(&self, buf: &mut [u8], lens: &mut [usize]) -> Result<usize> {
        self.run(Dir::Recv, |c| c.recv_batch(buf, lens, Wait::Never))
            .await
    }

    /// Queues a copy of `msg` ([`Chan::send`]), waiting for room.
    /// Cancel-safe.
    pub async fn send(&self, msg: &[u8]) -> Result<()> {
        self.run(Dir::Send, |c| c.send(msg, Wait::Never)).await
    }

    /// Queues a prefix of `msgs` ([`Chan::send_batch`]), waiting only until
    /// the first fits; returns how many. Cancel-safe.
    pub async fn send_batch<M: AsRef<[u8]>>(&self, msgs: &[M]) -> Result<usize> {
        self.run(Dir::Send, |c| {
            c.send_batch(msgs.iter().map(<M as AsRef<[u8]>>::as_ref), Wait::Never)
        })
        .await
    }

    /// [`Chan::recv`] without waiting.
    pub fn try_recv(&self) -> Result<Vec<u8>> {
        self.inner.chan.recv(Wait::Never)
    }

    /// [`Chan::send`] without waiting.
    pub fn try_send(&self, msg: &[u8]) -> Result<()> {
        self.inner.chan.send(msg, Wait::Never)
    }
}
