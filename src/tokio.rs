// SPDX-License-Identifier: MIT OR Apache-2.0
//! Async channels for Tokio (feature `tokio`): `recv().await` and
//! `send(..).await` on a [`Chan`], a [`Stream`] and a [`Sink`], and a
//! lossless [`select`] over channels.
//!
//! An [`AsyncChan`] waits in Tokio's reactor on the channel's fds, through
//! [`AsyncFd`]: a receive tries the channel without waiting and, refused
//! (`WouldBlock`), clears the readiness it saw before the try and waits for
//! the next event. That is sound because a refused call is owed an event
//! (D9 in `docs/design.md`), and the fd is readable while there is work
//! (D4, D5), so no task sleeps through a message, room or end of stream.
//!
//! **Cancel safety.** A message is taken or sent only by a non-waiting call
//! inside one poll, and a future that takes one returns it from that same
//! poll; no future holds a message across an await. So a receive future
//! dropped before it completed took nothing, and a send future dropped
//! before it completed sent nothing: every `recv`, `recv_into`,
//! `recv_batch`, `send` and `send_batch` is safe in `tokio::select!` and
//! under `tokio::time::timeout`, and so is [`select`].
//!
//! ```
//! use eventq::tokio::AsyncChan;
//! use eventq::{Chan, Error, Options};
//!
//! let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
//! rt.block_on(async {
//!     let chan = AsyncChan::new(Chan::new(Options::new(64))?);
//!     let tx = chan.clone();
//!     let producer = tokio::spawn(async move {
//!         for i in 0u32..100 {
//!             tx.send(&i.to_le_bytes()).await?;
//!         }
//!         tx.close();
//!         Ok::<_, Error>(())
//!     });
//!     let mut next = 0u32;
//!     loop {
//!         match chan.recv().await {
//!             Ok(msg) => {
//!                 assert_eq!(msg, next.to_le_bytes());
//!                 next += 1;
//!             }
//!             Err(Error::Closed) => break, // end of stream: all 100 arrived
//!             Err(e) => return Err(e),
//!         }
//!     }
//!     assert_eq!(next, 100);
//!     producer.await.unwrap()
//! })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The same with `tokio::select!`, lossless because each branch's receive
//! is cancel-safe: the branch that loses took nothing.
//!
//! ```
//! # use eventq::tokio::AsyncChan;
//! # use eventq::{Chan, Error, Options};
//! # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
//! # rt.block_on(async {
//! let (a, b) = (
//!     AsyncChan::new(Chan::new(Options::new(8))?),
//!     AsyncChan::new(Chan::new(Options::new(8))?),
//! );
//! a.send(b"from a").await?;
//! b.send(b"from b").await?;
//! let mut got = Vec::new();
//! while got.len() < 2 {
//!     tokio::select! {
//!         msg = a.recv() => got.push(msg?),
//!         msg = b.recv() => got.push(msg?),
//!     }
//! }
//! got.sort();
//! assert_eq!(got, [b"from a".to_vec(), b"from b".to_vec()]);
//! # Ok::<_, Error>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The fds are registered with the runtime the first call that waits runs
//! in, and stay with it: use an `AsyncChan` within one runtime (make
//! another `AsyncChan` of the same `Chan` for another runtime). As with
//! Tokio's `AsyncFd`, a call that has to wait panics outside a Tokio
//! runtime whose IO driver is enabled. Each
//! registers a duplicate of the fd, so any number of them may wait on one
//! channel, in one runtime or several; clones of one `AsyncChan` share its
//! registration, and each waiting task is woken by every event.

#![forbid(unsafe_code)]

use std::fmt;
use std::future::{poll_fn, Future};
use std::io;
use std::marker::PhantomData;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{ready, Context, Poll};

use ::tokio::io::unix::{AsyncFd, AsyncFdReadyGuard};
use ::tokio::io::Interest;
use ::tokio::task::coop;
use futures_core::stream::{FusedStream, Stream};
use futures_sink::Sink;

use crate::{Chan, Error, Result, Wait};

/// A [`Chan`] whose calls can wait in a Tokio runtime. Cloning is cheap
/// (an `Arc`); clones share the channel and the fds' registration, so give
/// each task its own clone. Any clone can send, receive and close, as a
/// `Chan` can.
#[derive(Clone)]
pub struct AsyncChan {
    inner: Arc<Inner>,
}

struct Inner {
    chan: Chan,
    // Made by the first call that waits: a receive-only user never makes
    // the send fd (which the channel creates on first use).
    recv: OnceLock<AsyncFd<OwnedFd>>,
    send: OnceLock<AsyncFd<OwnedFd>>,
}

/// Which fd a call waits on.
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

fn io_error(what: &str, e: &io::Error) -> Error {
    Error::context(what, e)
}

/// A duplicate of `fd`, registered for readability. A duplicate, so that
/// two `AsyncChan`s of one channel can both register in one runtime (epoll
/// refuses the same fd twice).
fn register(fd: BorrowedFd<'_>) -> Result<AsyncFd<OwnedFd>> {
    let dup = fd
        .try_clone_to_owned()
        .map_err(|e| io_error("duplicating the channel's fd for tokio", &e))?;
    // Tokio 1.54 deprecates its safe constructors for an fd type that may
    // not own its fd; an OwnedFd does and keeps it open and unchanged for
    // the AsyncFd's life, which is all `register_with_interest` (unsafe)
    // asks, so the safe call is sound here and needs no `unsafe`.
    #[allow(deprecated)]
    AsyncFd::with_interest(dup, Interest::READABLE)
        .map_err(|e| io_error("registering the channel's fd with tokio", &e))
}

impl AsyncChan {
    /// Wraps `chan` (any handle: a clone of it keeps working
    /// synchronously beside this one). Nothing is registered yet: the first
    /// call that waits registers the fd it waits on with the runtime it
    /// runs in, and fails with `Error::Os` if that fails.
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

    /// Closes the channel (D6), as [`Chan::close`]: sends fail with
    /// `Error::Closed`, receivers drain what is queued, then see end of
    /// stream; every waiting task wakes.
    pub fn close(&self) -> bool {
        self.inner.chan.close()
    }

    /// Whether the channel is closed.
    pub fn is_closed(&self) -> bool {
        self.inner.chan.is_closed()
    }

    fn fd(&self, dir: Dir) -> Result<&AsyncFd<OwnedFd>> {
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
        // A racing task may have set it first; ours is dropped (and
        // deregistered) then.
        Ok(cell.get_or_init(|| fd))
    }

    /// The one way every call runs: `call` (a non-waiting call of the
    /// channel) until it is not refused. The first try spends a unit of the
    /// task's Tokio budget (so a busy channel cannot starve the task's
    /// worker); then each try follows a readiness seen before it, and a
    /// refusal clears just that readiness, so an event that came after it
    /// is kept (D9 owes the refused call one). Every message taken or sent
    /// is so in a try, whose result is returned from the same poll.
    async fn run<T>(&self, dir: Dir, mut call: impl FnMut(&Chan) -> Result<T>) -> Result<T> {
        let first = poll_fn(|cx| {
            let budget = ready!(coop::poll_proceed(cx));
            match call(&self.inner.chan) {
                Err(Error::WouldBlock) => Poll::Ready(None),
                r => {
                    budget.made_progress();
                    Poll::Ready(Some(r))
                }
            }
        })
        .await;
        if let Some(r) = first {
            return r;
        }
        self.wait(dir, call).await
    }

    /// The waiting part of `run`, for callers that tried already.
    async fn wait<T>(&self, dir: Dir, mut call: impl FnMut(&Chan) -> Result<T>) -> Result<T> {
        let fd = self.fd(dir)?;
        loop {
            let mut guard = fd
                .readable()
                .await
                .map_err(|e| io_error("waiting for the channel's fd in tokio", &e))?;
            match call(&self.inner.chan) {
                Err(Error::WouldBlock) => guard.clear_ready(),
                r => return r,
            }
        }
    }

    /// Receives the head message as an owned buffer ([`Chan::recv`]),
    /// waiting until there is one. `Error::Closed` at end of stream.
    /// Cancel-safe: dropped before it completes, it took nothing.
    pub async fn recv(&self) -> Result<Vec<u8>> {
        self.run(Dir::Recv, |c| c.recv(Wait::Never)).await
    }

    /// Receives the head message into `buf` and returns its length
    /// ([`Chan::recv_into`]), waiting until there is one; a too-small `buf`
    /// fails with `Error::BufferTooSmall` and leaves the message at the
    /// head. Cancel-safe.
    pub async fn recv_into(&self, buf: &mut [u8]) -> Result<usize> {
        self.run(Dir::Recv, |c| c.recv_into(buf, Wait::Never)).await
    }

    /// Receives as many messages as fit into `buf`, their lengths into
    /// `lens` ([`Chan::recv_batch`]), waiting only for the first. Returns the
    /// count (0 at once if `lens` is empty). Cancel-safe.
    pub async fn recv_batch(&self, buf: &mut [u8], lens: &mut [usize]) -> Result<usize> {
        self.run(Dir::Recv, |c| c.recv_batch(buf, lens, Wait::Never))
            .await
    }

    /// Queues a copy of `msg` ([`Chan::send`]), waiting for room; the
    /// channel's send fd is made by the first send that has to wait.
    /// `Error::Closed` once the channel is closed. Cancel-safe: dropped
    /// before it completes, it sent nothing.
    pub async fn send(&self, msg: &[u8]) -> Result<()> {
        self.run(Dir::Send, |c| c.send(msg, Wait::Never)).await
    }

    /// Queues copies of a prefix of `msgs`, as many as fit
    /// ([`Chan::send_batch`]), waiting only until the first fits. Returns
    /// how many were queued (0 at once for an empty batch); the rest stay
    /// the caller's. Cancel-safe.
    pub async fn send_batch<M: AsRef<[u8]>>(&self, msgs: &[M]) -> Result<usize> {
        self.run(Dir::Send, |c| {
            c.send_batch(msgs.iter().map(<M as AsRef<[u8]>>::as_ref), Wait::Never)
        })
        .await
    }

    /// [`Chan::recv`] without waiting: `Error::WouldBlock` if empty.
    pub fn try_recv(&self) -> Result<Vec<u8>> {
        self.inner.chan.recv(Wait::Never)
    }

    /// [`Chan::recv_into`] without waiting.
    pub fn try_recv_into(&self, buf: &mut [u8]) -> Result<usize> {
        self.inner.chan.recv_into(buf, Wait::Never)
    }

    /// [`Chan::recv_batch`] without waiting.
    pub fn try_recv_batch(&self, buf: &mut [u8], lens: &mut [usize]) -> Result<usize> {
        self.inner.chan.recv_batch(buf, lens, Wait::Never)
    }

    /// [`Chan::send`] without waiting: `Error::WouldBlock` if full.
    pub fn try_send(&self, msg: &[u8]) -> Result<()> {
        self.inner.chan.send(msg, Wait::Never)
    }

    /// [`Chan::send_batch`] without waiting.
    pub fn try_send_batch<M: AsRef<[u8]>>(&self, msgs: &[M]) -> Result<usize> {
        self.inner
            .chan
            .send_batch(msgs.iter().map(<M as AsRef<[u8]>>::as_ref), Wait::Never)
    }

    /// A [`Stream`] of the messages received through this channel (a clone
    /// of this handle).
    pub fn stream(&self) -> RecvStream {
        RecvStream {
            chan: self.clone(),
            wait: None,
            done: false,
        }
    }

    /// This handle as a [`Stream`] of the messages received.
    pub fn into_stream(self) -> RecvStream {
        RecvStream {
            chan: self,
            wait: None,
            done: false,
        }
    }

    /// A [`Sink`] of messages of type `T` (`Vec<u8>`, `&'static [u8]`,
    /// `bytes::Bytes`, ...) sent through this channel (a clone of this
    /// handle).
    pub fn sink<T: AsRef<[u8]> + Send + 'static>(&self) -> SendSink<T> {
        SendSink {
            chan: self.clone(),
            wait: None,
            _item: PhantomData,
        }
    }
}

type Waiting<T> = Pin<Box<dyn Future<Output = Result<T>> + Send>>;

/// The messages of a channel as a [`Stream`] ([`AsyncChan::stream`]).
///
/// Items are `Result<Vec<u8>>` as a framed reader's are: a message, or an
/// error of the channel or the runtime (a process-shared channel's
/// `Error::Corrupt`, a failed registration). End of stream (the channel
/// closed and drained) ends the stream (`None`), as a closed `flume` or
/// `tokio-stream` receiver does, and it stays ended ([`FusedStream`]).
/// Dropping it, even while it waits, takes nothing: a message is taken
/// only by the poll that yields it.
pub struct RecvStream {
    chan: AsyncChan,
    // While waiting: a receive that owns its handle, so each stream waits
    // on its own (a Tokio fd wakes only the last task polling it
    // by hand, but every task awaiting its readiness).
    wait: Option<Waiting<Vec<u8>>>,
    done: bool,
}

impl fmt::Debug for RecvStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecvStream")
            .field("chan", &self.chan)
            .field("waiting", &self.wait.is_some())
            .field("done", &self.done)
            .finish()
    }
}

impl RecvStream {
    fn item(&mut self, r: Result<Vec<u8>>) -> Option<Result<Vec<u8>>> {
        match r {
            Err(Error::Closed) => {
                self.done = true;
                None
            }
            r => Some(r),
        }
    }
}

impl Stream for RecvStream {
    type Item = Result<Vec<u8>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        if let Some(wait) = this.wait.as_mut() {
            let r = ready!(wait.as_mut().poll(cx));
            this.wait = None;
            return Poll::Ready(this.item(r));
        }
        let budget = ready!(coop::poll_proceed(cx));
        match this.chan.try_recv() {
            Err(Error::WouldBlock) => {}
            r => {
                budget.made_progress();
                return Poll::Ready(this.item(r));
            }
        }
        drop(budget);
        let chan = this.chan.clone();
        let mut wait: Waiting<Vec<u8>> =
            Box::pin(async move { chan.wait(Dir::Recv, |c| c.recv(Wait::Never)).await });
        match wait.as_mut().poll(cx) {
            Poll::Ready(r) => Poll::Ready(this.item(r)),
            Poll::Pending => {
                this.wait = Some(wait);
                Poll::Pending
            }
        }
    }
}

impl FusedStream for RecvStream {
    fn is_terminated(&self) -> bool {
        self.done
    }
}

/// A [`Sink`] of messages into a channel ([`AsyncChan::sink`]).
///
/// `start_send` sends at once if there is room; otherwise the sink keeps
/// the one message and sends it as `poll_ready`, `poll_flush` or
/// `poll_close` is polled (so `SinkExt::send` and `forward` wait for
/// room). Dropping the sink while it holds a message drops that message,
/// as any buffering sink does: flush first. `poll_close` flushes but does
/// not close the channel, which other handles may still send on; close it
/// with [`AsyncChan::close`].
pub struct SendSink<T> {
    chan: AsyncChan,
    wait: Option<Waiting<()>>,
    _item: PhantomData<fn(T)>,
}

impl<T> fmt::Debug for SendSink<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SendSink")
            .field("chan", &self.chan)
            .field("holding", &self.wait.is_some())
            .finish()
    }
}

impl<T> SendSink<T> {
    fn poll_sent(&mut self, cx: &mut Context<'_>) -> Poll<Result<()>> {
        match self.wait.as_mut() {
            None => Poll::Ready(Ok(())),
            Some(wait) => {
                let r = ready!(wait.as_mut().poll(cx));
                self.wait = None;
                Poll::Ready(r)
            }
        }
    }
}

impl<T: AsRef<[u8]> + Send + 'static> Sink<T> for SendSink<T> {
    type Error = Error;

    fn poll_ready(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        self.get_mut().poll_sent(cx)
    }

    fn start_send(self: Pin<&mut Self>, item: T) -> Result<()> {
        let this = self.get_mut();
        if this.wait.is_some() {
            return Err(Error::Invalid(
                "start_send before poll_ready returned Ready: the sink holds a message",
            ));
        }
        match this.chan.try_send(item.as_ref()) {
            Err(Error::WouldBlock) => {
                let chan = this.chan.clone();
                this.wait = Some(Box::pin(async move {
                    chan.wait(Dir::Send, move |c| c.send(item.as_ref(), Wait::Never))
                        .await
                }));
                Ok(())
            }
            r => r,
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        self.get_mut().poll_sent(cx)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        self.get_mut().poll_sent(cx)
    }
}

type Readable<'a> =
    Pin<Box<dyn Future<Output = io::Result<AsyncFdReadyGuard<'a, OwnedFd>>> + Send + 'a>>;

/// Which channel a [`select`] looks at first: turns, so a busy channel
/// does not starve the others.
static SELECT_TURN: AtomicUsize = AtomicUsize::new(0);

/// Receives one message from whichever of `chans` has one first, waiting
/// until one does, and returns its index with it. Lossless and
/// cancel-safe: the message is taken by the poll that returns it, so a
/// select dropped before it completes took nothing, and no message is
/// taken that is not returned.
///
/// A channel closed and drained is reported at once, every time, as
/// `(index, Err(Error::Closed))`: take it out of the set. Each call starts
/// at another channel, so none starves. With no channels it returns
/// `(0, Err(Error::Invalid(..)))`.
pub async fn select(chans: &[&AsyncChan]) -> (usize, Result<Vec<u8>>) {
    let n = chans.len();
    if n == 0 {
        return (0, Err(Error::Invalid("select over no channels")));
    }
    let start = SELECT_TURN.fetch_add(1, Ordering::Relaxed) % n;
    let order = move || (0..n).map(move |k| (start + k) % n);
    for i in order() {
        match chans[i].try_recv() {
            Err(Error::WouldBlock) => {}
            r => return (i, r),
        }
    }
    let mut fds = Vec::with_capacity(n);
    for (i, c) in chans.iter().enumerate() {
        match c.fd(Dir::Recv) {
            Ok(fd) => fds.push(fd),
            Err(e) => return (i, Err(e)),
        }
    }
    let mut waits: Vec<Readable<'_>> = fds
        .iter()
        .map(|&fd| Box::pin(fd.readable()) as Readable<'_>)
        .collect();
    poll_fn(|cx| {
        for i in order() {
            // Until this channel's readiness is pending: each try follows a
            // readiness seen before it, and a refusal clears only that one.
            while let Poll::Ready(ready) = waits[i].as_mut().poll(cx) {
                let mut guard = match ready {
                    Ok(guard) => guard,
                    Err(e) => {
                        return Poll::Ready((
                            i,
                            Err(io_error("waiting for the channel's fd in tokio", &e)),
                        ))
                    }
                };
                match chans[i].try_recv() {
                    Err(Error::WouldBlock) => {
                        guard.clear_ready();
                        waits[i] = Box::pin(fds[i].readable());
                    }
                    r => return Poll::Ready((i, r)),
                }
            }
        }
        Poll::Pending
    })
    .await
}
