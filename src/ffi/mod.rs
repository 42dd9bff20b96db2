//! The C ABI. The only place besides `sys` with `unsafe`, and the only place
//! with `#[no_mangle]` and raw pointers.
//!
//! Every export runs its body inside [`boundary!`]: arguments are checked
//! first and fail with `-EINVAL`, and a panic is caught and returned as
//! `-ENOTRECOVERABLE` instead of unwinding into C. Out-parameters are written
//! only on success.

#![allow(non_camel_case_types)]
// Exports are called from C, where an `unsafe` marker on the Rust side means
// nothing; the header states each pointer's requirements instead, and the
// derefs sit in `unsafe` blocks with their SAFETY lines.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use std::ffi::{c_char, c_int, CStr};
use std::time::Duration;

use crate::chan::Wait;
use crate::error::Error;

pub mod chan;
#[path = "loop.rs"]
pub mod event_loop;
pub mod memcg;

/// Runs an export's body, turning a panic into `$on_panic` so no unwind
/// crosses the ABI. `return` inside the body returns from the export.
macro_rules! boundary {
    ($on_panic:expr, $body:block) => {
        match ::std::panic::catch_unwind(::std::panic::AssertUnwindSafe(|| $body)) {
            Ok(v) => v,
            Err(_) => $on_panic,
        }
    };
}
pub(crate) use boundary;

/// Evaluates a `Result<T, c_int>`, returning the negative code from the
/// export on `Err`.
macro_rules! check {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(code) => return code,
        }
    };
}
pub(crate) use check;

/// The code an export returns when it caught a panic.
pub(crate) const PANIC: c_int = -libc::ENOTRECOVERABLE;

/// Wait without limit (`timeout_ns` argument of sends and receives). The
/// header spells it in build.rs, parenthesised as a macro must be.
pub const EVENTQ_FOREVER: i64 = -1;

/// The negative errno for `e`.
pub(crate) fn neg(e: &Error) -> c_int {
    -e.errno()
}

/// `-EINVAL`.
pub(crate) fn einval<T>() -> Result<T, c_int> {
    Err(-libc::EINVAL)
}

/// A timeout argument: `EVENTQ_FOREVER`, 0 (do not wait) or positive
/// nanoseconds; anything else is `-EINVAL`.
pub(crate) fn wait_of(timeout_ns: i64) -> Result<Wait, c_int> {
    match timeout_ns {
        EVENTQ_FOREVER => Ok(Wait::Forever),
        0 => Ok(Wait::Never),
        ns if ns > 0 => Ok(Wait::For(Duration::from_nanos(ns as u64))),
        _ => einval(),
    }
}

/// Writes `v` through `out` (checked non-NULL by the caller).
pub(crate) fn put<T>(out: *mut T, v: T) {
    // SAFETY: out is non-NULL and points to writable storage for a T, as the
    // header requires; it may be uninitialised, so write without dropping.
    unsafe { out.write(v) }
}

/// A count returned as `int`.
pub(crate) fn int_count(n: usize) -> c_int {
    c_int::try_from(n).unwrap_or(c_int::MAX)
}

const fn parse_u32(s: &str) -> u32 {
    let b = s.as_bytes();
    let mut i = 0;
    let mut n = 0u32;
    while i < b.len() {
        n = n * 10 + (b[i] - b'0') as u32;
        i += 1;
    }
    n
}

const VERSION: u32 = (parse_u32(env!("CARGO_PKG_VERSION_MAJOR")) << 16)
    | (parse_u32(env!("CARGO_PKG_VERSION_MINOR")) << 8)
    | parse_u32(env!("CARGO_PKG_VERSION_PATCH"));

const VERSION_STRING: &CStr =
    match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
        Ok(s) => s,
        Err(_) => panic!("version string has no interior NUL"),
    };

/// The library's version as `(major << 16) | (minor << 8) | patch`; equals
/// `EVENTQ_VERSION` of the header it was built with.
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn eventq_version() -> u32 {
    VERSION
}

/// The library's version as a string, e.g. "0.1.0". Static storage.
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn eventq_version_string() -> *const c_char {
    VERSION_STRING.as_ptr()
}

/// Descriptions of the codes the library returns, in its own words where
/// the libc text would mislead (EPIPE is not about pipes here).
const MESSAGES: &[(c_int, &CStr)] = &[
    (0, c"success"),
    (
        libc::EAGAIN,
        c"would block: no message to receive, or no room to send",
    ),
    (libc::ETIMEDOUT, c"timed out"),
    (
        libc::EPIPE,
        c"channel closed: sends are refused; a receive saw end of stream",
    ),
    (
        libc::EMSGSIZE,
        c"message size: longer than the channel's maximum, or the receive buffer is too small (the message stays queued)",
    ),
    (libc::EINVAL, c"invalid argument"),
    (libc::ENOMEM, c"out of memory"),
    (libc::EMFILE, c"too many open files in this process"),
    (libc::ENFILE, c"too many open files in the system"),
    (libc::EBADF, c"bad file descriptor"),
    (libc::EEXIST, c"already exists"),
    (libc::ENOENT, c"no such file or directory"),
    (libc::EPERM, c"operation not permitted"),
    (libc::EACCES, c"permission denied"),
    (libc::EINTR, c"interrupted"),
    (
        libc::EBUSY,
        c"busy: the loop is already being run, or the signal already has a source",
    ),
    (
        libc::ESTALE,
        c"stale handle: the source was removed, or its loop freed",
    ),
    (libc::ELOOP, c"the fd would make an epoll cycle"),
    (libc::ENODEV, c"no such device"),
    (libc::ENOSYS, c"not supported by this kernel"),
    (libc::EOPNOTSUPP, c"operation not supported"),
    (libc::EIO, c"input/output error"),
    (
        libc::ENOTRECOVERABLE,
        c"internal error: a panic was caught at the libeventq ABI boundary",
    ),
];

/// A static, human-readable description of `err`, which may be negative (as
/// returned) or positive. Never NULL; unknown codes give "unknown error".
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn eventq_strerror(err: c_int) -> *const c_char {
    let Some(code) = err.checked_abs() else {
        return c"unknown error".as_ptr();
    };
    MESSAGES
        .iter()
        .find(|(c, _)| *c == code)
        .map_or(c"unknown error", |(_, m)| *m)
        .as_ptr()
}

#[cfg(test)]
mod tests {
    /// The committed header must equal the one build.rs just generated.
    #[test]
    fn committed_header_is_current() {
        let generated = include_str!(concat!(env!("OUT_DIR"), "/eventq.h"));
        let committed = include_str!("../../include/eventq.h");
        assert!(
            generated == committed,
            "include/eventq.h is stale: run `make header` and commit it"
        );
    }
}
