// SPDX-License-Identifier: MIT OR Apache-2.0
//! The library's error type, one for the whole crate. Every variant maps to
//! one errno, which is what the C ABI returns (negated) and what the Go
//! binding wraps; its text says what went wrong, and for [`Error::Os`] what
//! was being done and what is missing.

use std::fmt;
use std::io;

/// What went wrong. `errno()` gives the C ABI's code.
///
/// Non-exhaustive: a later 0.x release may add a condition (as 0.3 added
/// `Corrupt` and `Attached`), so a `match` needs a `_` arm; `errno()` and the
/// text cover what it does not name.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// Nothing could be done without waiting, and the caller asked not to
    /// wait (`EAGAIN`).
    WouldBlock,
    /// The caller's timeout passed first (`ETIMEDOUT`).
    TimedOut,
    /// The channel is closed: a send is refused, or a receive found it
    /// closed and drained (end of stream) (`EPIPE`).
    Closed,
    /// The message is longer than the channel's maximum message size
    /// (`EMSGSIZE`).
    TooLarge { len: usize, max: usize },
    /// The receive buffer is smaller than the message at the head, which
    /// stays queued (`EMSGSIZE`).
    BufferTooSmall { needed: usize },
    /// A bad argument (`EINVAL`); the text says which.
    Invalid(&'static str),
    /// The loop source was removed (or its loop freed) (`ESTALE`).
    Stale,
    /// Already in use (`EBUSY`): the loop is being run by another call, or
    /// the signal already has a source. The text says which.
    Busy(&'static str),
    /// A callback failed with this negative code; its source was disabled.
    Callback(i32),
    /// This end of a process-shared channel does not do that: it only
    /// sends, or only receives (`EPERM`). The text says which.
    WrongSide(&'static str),
    /// The other process of a process-shared channel broke its protocol:
    /// a shared word or a handed-over fd is not what it may be (`EPROTO`).
    /// The text says what; the channel is closed on this side.
    Corrupt(&'static str),
    /// The other end of a process-shared channel is held by a live process
    /// already, so it cannot be handed to another (`EISCONN`).
    Attached,
    /// The operating system refused (`EMFILE`, `ENOMEM`, ...), or a system
    /// condition stands in the way: the errno (the system's, or the one the
    /// library chose for the condition, e.g. `ENODEV` for a memory
    /// controller that is not mounted) and a message naming what was being
    /// done and, where there is one, the file or setting at fault.
    Os { errno: i32, message: String },
}

impl Error {
    /// The positive errno this error stands for.
    pub fn errno(&self) -> i32 {
        match self {
            Error::WouldBlock => libc::EAGAIN,
            Error::TimedOut => libc::ETIMEDOUT,
            Error::Closed => libc::EPIPE,
            Error::TooLarge { .. } | Error::BufferTooSmall { .. } => libc::EMSGSIZE,
            Error::Invalid(_) => libc::EINVAL,
            Error::Stale => libc::ESTALE,
            Error::Busy(_) => libc::EBUSY,
            Error::Callback(code) => code.checked_neg().unwrap_or(libc::EIO).max(1),
            Error::WrongSide(_) => libc::EPERM,
            Error::Corrupt(_) => libc::EPROTO,
            Error::Attached => libc::EISCONN,
            Error::Os { errno, .. } => *errno,
        }
    }

    /// An error with `errno` and a message saying what went wrong.
    pub fn os(errno: i32, message: impl Into<String>) -> Error {
        Error::Os {
            errno,
            message: message.into(),
        }
    }

    /// An error with `errno` and the system's text for it.
    pub fn from_errno(errno: i32) -> Error {
        Error::from(io::Error::from_raw_os_error(errno))
    }

    /// `err`, met while doing `what`, with that context: its errno (`EIO`
    /// if it has none) and the message "`what`: `err`".
    pub fn context(what: impl fmt::Display, err: &io::Error) -> Error {
        Error::os(
            err.raw_os_error().unwrap_or(libc::EIO),
            format!("{what}: {err}"),
        )
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::WouldBlock => f.write_str("operation would block"),
            Error::TimedOut => f.write_str("timed out"),
            Error::Closed => f.write_str("channel closed"),
            Error::TooLarge { len, max } => {
                write!(f, "message of {len} bytes exceeds the maximum of {max}")
            }
            Error::BufferTooSmall { needed } => {
                write!(
                    f,
                    "receive buffer too small: the message needs {needed} bytes"
                )
            }
            Error::Invalid(what) => write!(f, "invalid argument: {what}"),
            Error::Stale => f.write_str("the source was removed, or its loop freed"),
            Error::Busy(what) => write!(f, "busy: {what}"),
            Error::Callback(code) => write!(f, "callback failed with {code}"),
            Error::WrongSide(what) => write!(f, "wrong end of a process-shared channel: {what}"),
            Error::Corrupt(what) => write!(
                f,
                "the other process broke the shared channel's protocol ({what}); the channel is closed on this side"
            ),
            Error::Attached => f.write_str(
                "the other end of this process-shared channel is held by a live process",
            ),
            Error::Os { message, .. } => f.write_str(message),
        }
    }
}

impl std::error::Error for Error {}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Error {
        Error::os(e.raw_os_error().unwrap_or(libc::EIO), e.to_string())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
