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
