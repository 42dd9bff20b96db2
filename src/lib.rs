// SPDX-License-Identifier: MIT OR Apache-2.0
//! libeventq: per-event message delivery between threads and into event
//! loops.
//!
//! An eventfd is a counter: several writes sum into one read, so using it to
//! carry data merges events. libeventq keeps the data in a bounded FIFO and
//! uses eventfds only as level-triggered doorbells that track the queue
//! exactly, so any poll/epoll loop can wait on a channel and receive every
//! message once, whole and in order. See `docs/design.md` for the contract
//! (D1-D9).
//!
//! - [`chan`]: the channel ([`Chan`]).
//! - [`event_loop`] (`src/loop/`): the epoll loop ([`Loop`]).
//! - [`memcg`]: memory-pressure watches, a source kind of the loop.
//! - `tokio` (feature `tokio`): `AsyncChan`,
//!   `recv().await` and `send(..).await` in Tokio's reactor, a `Stream`, a
//!   `Sink` and a lossless `select`, all cancel-safe.
//! - `async_io` (feature `async-io`): the same calls on async-io's reactor
//!   (smol, or any executor).
//! - `ffi` (feature `capi`, for the C library only): the C ABI
//!   (`include/eventq.h`).
//!
//! # Example
//!
//! A producer thread sends; the receiving thread waits on the channel's fd
//! with `poll(2)`, as any event loop would (a [`Chan`] is [`AsFd`](std::os::fd::AsFd):
//! its receive fd), receives until the queue is empty, waits again, and ends at
//! the end of the stream. Every message arrives once, whole and in order,
//! however the producer's writes and the receiver's wake-ups interleave:
//!
//! ```
//! use std::os::fd::{AsFd, AsRawFd};
//! use eventq::{Chan, Error, Options, Wait};
//!
//! let chan = Chan::new(Options::new(64))?;
//! let tx = chan.clone();
//! let producer = std::thread::spawn(move || -> eventq::Result<()> {
//!     for i in 0u32..1000 {
//!         tx.send(&i.to_le_bytes(), Wait::Forever)?; // waits while full
//!     }
//!     tx.close(); // the receiver sees the end of the stream
//!     Ok(())
//! });
//!
//! let mut next = 0u32;
//! 'wait: loop {
//!     // Readable exactly while messages are pending, or once closed (D4).
//!     let mut pfd = libc::pollfd {
//!         fd: chan.as_fd().as_raw_fd(),
//!         events: libc::POLLIN,
//!         revents: 0,
//!     };
//!     // SAFETY: one valid pollfd, as the count says.
//!     if unsafe { libc::poll(&mut pfd, 1, -1) } < 0 {
//!         let e = std::io::Error::last_os_error();
//!         assert_eq!(e.kind(), std::io::ErrorKind::Interrupted, "poll: {e}");
//!     }
//!     loop {
//!         match chan.recv(Wait::Never) {
//!             Ok(msg) => {
//!                 assert_eq!(msg, next.to_le_bytes());
//!                 next += 1;
//!             }
//!             Err(Error::WouldBlock) => continue 'wait, // drained: wait again
//!             Err(Error::Closed) => break 'wait,        // end of the stream
//!             Err(e) => return Err(e),
//!         }
//!     }
//! }
//! assert_eq!(next, 1000);
//! producer.join().unwrap()?;
//! # Ok::<(), eventq::Error>(())
//! ```
//!
//! A thread that only receives can block in the call instead
//! (`chan.recv(Wait::Forever)`, see [`Chan`]); [`Loop`] is the library's own
//! epoll loop, which calls back once per message (`Loop::add_chan`).
//!
//! The crate is an rlib of safe Rust. Its C library is a crate of its own
//! in the repository (`capi/`, built by `make`), so a Rust program that
//! depends on eventq builds neither the C ABI nor its header.

// `unsafe` is denied everywhere but in the modules that allow it below by
// name: the OS layer and the C ABI.
#![deny(unsafe_code)]

#[cfg(feature = "async-io")]
pub mod async_io;
pub mod chan;
pub mod error;
#[path = "loop/mod.rs"]
pub mod event_loop;
// The C ABI: exported from the C library's builds, not Rust API (its
// functions take raw pointers that safe Rust could pass wrongly).
#[cfg(feature = "capi")]
#[allow(unsafe_code)]
mod ffi;
pub mod memcg;
#[allow(unsafe_code)]
mod sys;
#[cfg(feature = "tokio")]
pub mod tokio;

#[cfg(not(loom))]
pub use chan::SharedFds;
pub use chan::{Chan, Consumer, Options, Side, Stats, Wait};
pub use error::{Error, Result};
pub use event_loop::{Event, Loop, LoopHandle, SourceId};

/// The README's Rust examples, compiled and run as doctests. One uses the
/// `tokio` feature, so they run with it (as stage cargo-test does).
#[cfg(all(doctest, feature = "tokio"))]
#[doc = include_str!("../README.md")]
struct ReadmeExample;
