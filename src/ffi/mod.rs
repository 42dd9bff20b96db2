// SPDX-License-Identifier: MIT OR Apache-2.0
//! The C ABI. The only place besides `sys` with `unsafe`, and the only place
//! with `#[no_mangle]` and raw pointers.
//!
//! Every export runs its body inside [`boundary!`], checks each argument
//! first with one [`require!`] line (`-EINVAL`, as sd-event's
//! `assert_return`), and reaches its objects through the [`Handle`]
//! functions: `borrow` a handle, `give` a new one through an out-pointer
//! (written only on success), `free` it. A panic is caught and returned as
//! `-ENOTRECOVERABLE` instead of unwinding into C.

#![allow(non_camel_case_types)]
// Exports are called from C, where an `unsafe` marker on the Rust side means
// nothing; the header states each pointer's requirements instead, and the
// derefs sit in `unsafe` blocks with their SAFETY lines.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::Arc;
use std::time::Duration;
use std::{mem, ptr, slice};

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

/// Returns `$code` from the export unless `$cond` holds: one line per
/// precondition, at the top of the export.
macro_rules! require {
    ($cond:expr, $code:expr) => {
        if !$cond {
            return $code;
        }
    };
    ($cond:expr) => {
        require!($cond, -::libc::EINVAL)
    };
}
pub(crate) use require;

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

/// Reads a struct the caller sized (`size`: its `sizeof` as the caller's
/// header had it) into `into`, which holds the defaults: an older, smaller
/// struct leaves the fields it lacks at their defaults, and nothing past
/// `size` is read; a newer, larger one must have zeros in the fields this
/// library does not know (-E2BIG otherwise: it asked for something this
/// version cannot do). -EINVAL if `size` is below `min`.
pub(crate) fn read_sized<T>(src: *const T, size: usize, min: usize, into: &mut T) -> c_int {
    require!(size >= min);
    let known = mem::size_of::<T>();
    // SAFETY: src points to `size` readable bytes (the caller's struct, as
    // the header requires); bytes are copied into a valid T of plain data
    // fields (integers, raw pointers, optional fn pointers) of which any
    // non-null value is valid.
    unsafe {
        let bytes = slice::from_raw_parts(src.cast::<u8>(), size);
        if bytes.len() > known && bytes[known..].iter().any(|&b| b != 0) {
            return -libc::E2BIG;
        }
        ptr::copy_nonoverlapping(
            bytes.as_ptr(),
            (into as *mut T).cast::<u8>(),
            size.min(known),
        );
    }
    0
}

/// Writes `v` to a struct the caller sized: the first `size` bytes only,
/// so an older caller's smaller struct is not overrun, and zeros in the
/// fields of a newer caller's larger struct that this library does not
/// know. -EINVAL if `size` is below `min`.
pub(crate) fn write_sized<T>(dst: *mut T, size: usize, min: usize, v: &T) -> c_int {
    require!(size >= min);
    let known = mem::size_of::<T>();
    // SAFETY: dst points to `size` writable bytes (the caller's struct);
    // v's bytes are plain data without padding (checked where the structs
    // are defined).
    unsafe {
        let out = dst.cast::<u8>();
        ptr::copy_nonoverlapping((v as *const T).cast::<u8>(), out, size.min(known));
        if size > known {
            ptr::write_bytes(out.add(known), 0, size - known);
        }
    }
    0
}

/// An opaque object handed to C as a pointer. `Box` handles have one
/// owner and are freed once; `Arc` handles (`SHARED`) are reference-counted,
/// each reference freed once.
pub(crate) trait Handle: Sized {
    const SHARED: bool = false;
}

/// The object behind a handle, for the length of the call; -EINVAL for NULL.
pub(crate) fn borrow<'a, H: Handle>(p: *const H) -> Result<&'a H, c_int> {
    // SAFETY: a non-NULL handle is one this library made with `give` or
    // `into_raw` and the caller has not freed, as the header requires (or
    // a callback's own handle, valid during the callback).
    unsafe { p.as_ref() }.ok_or(-libc::EINVAL)
}

/// A new handle owning `v`.
pub(crate) fn into_raw<H: Handle>(v: H) -> *mut H {
    if H::SHARED {
        Arc::into_raw(Arc::new(v)).cast_mut()
    } else {
        Box::into_raw(Box::new(v))
    }
}

/// Makes a handle of `v` and writes it to `out` (checked non-NULL by the
/// caller); returns 0, the export's success.
pub(crate) fn give<H: Handle>(out: *mut *mut H, v: H) -> c_int {
    put(out, into_raw(v));
    0
}

/// Another reference to a shared handle, freed separately.
pub(crate) fn share<H: Handle>(p: *const H) {
    debug_assert!(H::SHARED);
    // SAFETY: p is a live handle made by `into_raw` of a shared type.
    unsafe { Arc::increment_strong_count(p) }
}

/// Takes back a `Box` handle; None for NULL.
pub(crate) fn take<H: Handle>(p: *mut H) -> Option<Box<H>> {
    debug_assert!(!H::SHARED);
    // SAFETY: a non-NULL p came from `into_raw` (a Box) and is freed once,
    // here, as the header requires.
    (!p.is_null()).then(|| unsafe { Box::from_raw(p) })
}

/// Frees a handle (one reference of a shared one); NULL is a no-op.
pub(crate) fn free<H: Handle>(p: *const H) {
    if p.is_null() {
        return;
    }
    if H::SHARED {
        // SAFETY: p came from `into_raw` or `share` and this reference is
        // released once, here.
        drop(unsafe { Arc::from_raw(p) });
    } else {
        drop(take(p.cast_mut()));
    }
}

/// Runs when a caller's pointer is released: the `destroy` argument of the
/// add and post calls.
pub type eventq_destroy_fn = Option<extern "C" fn(userdata: *mut c_void)>;

/// A caller's pointer handed over with its destroy hook, which runs exactly
/// once, when this is dropped: the one rule for userdata on every path,
/// failure included, so no caller leaks it or frees it twice.
pub(crate) struct UserData {
    ptr: *mut c_void,
    destroy: eventq_destroy_fn,
}

// SAFETY: the header documents on which thread callbacks and destroy hooks
// run (the loop's, or the one that removes the source or frees the loop),
// so the caller vouches that the pointer may move there.
unsafe impl Send for UserData {}

impl UserData {
    pub(crate) fn new(ptr: *mut c_void, destroy: eventq_destroy_fn) -> UserData {
        UserData { ptr, destroy }
    }

    pub(crate) fn ptr(&self) -> *mut c_void {
        self.ptr
    }
}

impl Drop for UserData {
    fn drop(&mut self) {
        if let Some(destroy) = self.destroy {
            destroy(self.ptr);
        }
    }
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

/// The library's version as a string, e.g. "0.2.0". Static storage.
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn eventq_version_string() -> *const c_char {
    VERSION_STRING.as_ptr()
}

/// Descriptions of the codes the library returns, in its own words where
/// the libc text would mislead (EPIPE is not about pipes here) or say too
/// little (ENODEV, EOPNOTSUPP from the memcg calls). Each reads right for
/// every call that returns it.
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
    (
        libc::E2BIG,
        c"a struct sets fields this version of libeventq does not know (built against a newer header)",
    ),
    (libc::EMFILE, c"too many open files in this process"),
    (libc::ENFILE, c"too many open files in the system"),
    (libc::EBADF, c"bad file descriptor"),
    (libc::EEXIST, c"already exists"),
    (
        libc::ENOENT,
        c"no such cgroup, process or file: the directory does not exist, was removed, or is not a cgroup",
    ),
    (
        libc::EPERM,
        c"operation not permitted: epoll cannot watch the fd (a regular file), or a PSI window that is not a multiple of 2 s needs CAP_SYS_RESOURCE",
    ),
    (
        libc::EACCES,
        c"permission denied: a file (such as a cgroup's control file) cannot be opened or written",
    ),
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
    (
        libc::ENODEV,
        c"memory controller or interface not available: the cgroup v1 memory controller is not mounted, the cgroup2 memory controller is not enabled for the cgroup, or the kernel lacks the control file",
    ),
    (libc::ENOSYS, c"not supported by this kernel"),
    (
        libc::EOPNOTSUPP,
        c"operation not supported: the kernel has no PSI (CONFIG_PSI off, psi=0), or per-cgroup PSI is disabled",
    ),
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
