// SPDX-License-Identifier: MIT OR Apache-2.0
//! The C ABI. The only place besides `sys` with `unsafe`, and the only place
//! with `#[no_mangle]` and raw pointers.
//!
//! Every export runs its body inside [`boundary!`], checks each argument
//! first with one [`ensure!`] line (`-EINVAL`, as sd-event's
//! `assert_return`), and reaches its objects through the [`Handle`]
//! functions: [`borrow`] a handle, [`out_new_handle`] to return a new one
//! through an out-pointer (written only on success), [`free_box`] or
//! [`free_arc`] as its [`Ownership`] says. A panic is caught and returned as
//! `-ENOTRECOVERABLE` instead of unwinding into C.
//!
//! The exports are safe `extern "C" fn`s, since an `unsafe` marker means
//! nothing to a C caller: the header states each pointer's requirements,
//! and every export names the one it relies on in a `// SAFETY:` line at
//! each call of an `unsafe fn` helper below.

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_void, CStr};
use std::mem::{self, MaybeUninit};
use std::sync::Arc;
use std::time::Duration;
use std::{ptr, slice};

use crate::chan::Wait;
use crate::error::Error;

pub mod chan;
#[path = "loop.rs"]
pub mod event_loop;
pub mod memcg;
pub mod shared;

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

/// Returns `$code` (`-EINVAL` if not given) from the export unless `$cond`
/// holds: one line per precondition, at the top of the export.
macro_rules! ensure {
    ($cond:expr, $code:expr) => {
        if !$cond {
            return $code;
        }
    };
    ($cond:expr) => {
        ensure!($cond, -::libc::EINVAL)
    };
}
pub(crate) use ensure;

/// `?` for an export returning a code: the `Ok` value of a
/// `Result<T, c_int>`, or returns the negative code from the export.
macro_rules! try_c {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(code) => return code,
        }
    };
}
pub(crate) use try_c;

/// The code an export returns when it caught a panic.
pub(crate) const PANIC: c_int = -libc::ENOTRECOVERABLE;

/// Wait without limit (`timeout_ns` argument of sends and receives). The
/// header spells it in build.rs, parenthesised as a macro must be.
pub const EVENTQ_FOREVER: i64 = -1;

/// The code an export returns for `e`: its errno, negated.
pub(crate) fn to_code(e: &Error) -> c_int {
    -e.errno()
}

/// The code an export returns for `res`: 0, or the error's.
pub(crate) fn code_of(res: crate::Result<()>) -> c_int {
    res.map_or_else(|e| to_code(&e), |()| 0)
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

/// Writes `v` through the out-pointer `out`, without dropping what was
/// there (C passes uninitialised storage).
///
/// # Safety
/// `out` is non-NULL, aligned and valid for writing a `T`.
pub(crate) unsafe fn write_out<T>(out: *mut T, v: T) {
    // SAFETY: out is valid for writing a T (this function's contract).
    unsafe { out.write(v) }
}

/// Reads a struct the caller sized (`size`: its `sizeof` as the caller's
/// header had it) into `into`, which holds the defaults: an older, smaller
/// struct leaves the fields it lacks at their defaults, and nothing past
/// `size` is read; a newer, larger one must have zeros in the fields this
/// library does not know (-E2BIG otherwise: it asked for something this
/// version cannot do). -EINVAL if `size` is below `min`.
///
/// # Safety
/// `src` points to `size` readable bytes, and `T`'s fields take any bytes
/// (integers, raw pointers, optional fn pointers).
pub(crate) unsafe fn read_sized<T>(
    src: *const T,
    size: usize,
    min: usize,
    into: &mut T,
) -> Result<(), c_int> {
    ensure!(size >= min, einval());
    let known = mem::size_of::<T>();
    // SAFETY: src points to `size` readable bytes (this function's
    // contract), which C does not change during the call.
    let bytes = unsafe { slice::from_raw_parts(src.cast::<u8>(), size) };
    if bytes.len() > known && bytes[known..].iter().any(|&b| b != 0) {
        return Err(-libc::E2BIG);
    }
    // SAFETY: at most size_of::<T>() bytes go into a T, from a buffer that
    // cannot overlap it (into is Rust's); any bytes make a valid T (this
    // function's contract).
    unsafe {
        ptr::copy_nonoverlapping(
            bytes.as_ptr(),
            (into as *mut T).cast::<u8>(),
            size.min(known),
        );
    }
    Ok(())
}

/// Writes `v` to a struct the caller sized: the first `size` bytes only,
/// so an older caller's smaller struct is not overrun, and zeros in the
/// fields of a newer caller's larger struct that this library does not
/// know. -EINVAL if `size` is below `min`.
///
/// # Safety
/// `dst` points to `size` writable bytes, and `T` has no padding (so all
/// of `v`'s bytes are initialised).
pub(crate) unsafe fn write_sized<T>(dst: *mut T, size: usize, min: usize, v: &T) -> c_int {
    ensure!(size >= min);
    let known = mem::size_of::<T>();
    let out = dst.cast::<u8>();
    // SAFETY: dst has `size` writable bytes and v's bytes are initialised
    // (this function's contract); at most min(size, size_of::<T>()) bytes
    // are copied and the rest of `size` zeroed.
    unsafe {
        ptr::copy_nonoverlapping((v as *const T).cast::<u8>(), out, size.min(known));
        if size > known {
            ptr::write_bytes(out.add(known), 0, size - known);
        }
    }
    0
}

/// How the object behind a handle is held: the pointer C has is a `Box`'s
/// (one owner) or an `Arc`'s (one reference of several).
pub(crate) trait Ownership {
    /// Moves `v` to the heap, owned by the pointer returned.
    fn into_raw<T>(v: T) -> *mut T;
}

/// A handle with one owner, freed once: [`take_box`], [`free_box`].
pub(crate) struct OwnershipBox;

/// A reference-counted handle, each reference freed once: [`clone_arc`],
/// [`free_arc`].
pub(crate) struct OwnershipArc;

impl Ownership for OwnershipBox {
    fn into_raw<T>(v: T) -> *mut T {
        Box::into_raw(Box::new(v))
    }
}

impl Ownership for OwnershipArc {
    fn into_raw<T>(v: T) -> *mut T {
        Arc::into_raw(Arc::new(v)).cast_mut()
    }
}

/// An opaque object handed to C as a pointer. Its `Ownership` is part of
/// its type, so freeing it the wrong way does not compile.
pub(crate) trait Handle: Sized {
    type Ownership: Ownership;
}

/// The object behind a handle, for the length of the call; -EINVAL for NULL.
///
/// # Safety
/// `p` is NULL or a live handle: made by this library, not freed, and not
/// freed by another thread during `'a`.
pub(crate) unsafe fn borrow<'a, H: Handle>(p: *const H) -> Result<&'a H, c_int> {
    // SAFETY: a non-NULL p is a live handle (this function's contract).
    unsafe { p.as_ref() }.ok_or(-libc::EINVAL)
}

/// A new handle owning `v`, a `Box` or an `Arc` as `H` says.
pub(crate) fn new_handle<H: Handle>(v: H) -> *mut H {
    H::Ownership::into_raw(v)
}

/// An out-pointer that may be NULL, as a reference to storage C need not
/// have initialised; None for NULL.
///
/// # Safety
/// `out` is NULL, or aligned and valid for writing a `T` that nothing else
/// accesses during `'a`.
pub(crate) unsafe fn out_ref<'a, T>(out: *mut T) -> Option<&'a mut MaybeUninit<T>> {
    // SAFETY: a MaybeUninit<T> has T's layout and takes any bytes; a
    // non-NULL out is valid and unaliased for 'a (this function's contract).
    unsafe { out.cast::<MaybeUninit<T>>().as_mut() }
}

/// Makes a handle of `v` and writes it to `out`; returns 0, the export's
/// success.
///
/// # Safety
/// As [`write_out`]: `out` is non-NULL and valid for writing a pointer.
pub(crate) unsafe fn out_new_handle<H: Handle>(out: *mut *mut H, v: H) -> c_int {
    // SAFETY: out is valid for writing a pointer (this function's contract).
    unsafe { write_out(out, new_handle(v)) };
    0
}

/// A new reference to `a`'s object as a handle, freed with [`free_arc`].
pub(crate) fn clone_arc<H: Handle<Ownership = OwnershipArc>>(a: &Arc<H>) -> *mut H {
    Arc::into_raw(Arc::clone(a)).cast_mut()
}

/// Takes back a `Box` handle; None for NULL.
///
/// # Safety
/// `p` is NULL or a live `Box` handle, which C gives up here: nothing uses
/// it after or during this call.
pub(crate) unsafe fn take_box<H: Handle<Ownership = OwnershipBox>>(p: *mut H) -> Option<Box<H>> {
    // SAFETY: a non-NULL p came from new_handle (a Box, as H's Ownership
    // says) and is given up once, here (this function's contract).
    (!p.is_null()).then(|| unsafe { Box::from_raw(p) })
}

/// Frees a `Box` handle; NULL is a no-op.
///
/// # Safety
/// As [`take_box`].
pub(crate) unsafe fn free_box<H: Handle<Ownership = OwnershipBox>>(p: *mut H) {
    // SAFETY: this function's contract is take_box's.
    drop(unsafe { take_box(p) });
}

/// Releases one reference of an `Arc` handle; NULL is a no-op.
///
/// # Safety
/// `p` is NULL or a live reference of an `Arc` handle, which C gives up
/// here: nothing uses this reference after or during this call.
pub(crate) unsafe fn free_arc<H: Handle<Ownership = OwnershipArc>>(p: *const H) {
    if !p.is_null() {
        // SAFETY: p came from new_handle or clone_arc (an Arc, as H's
        // Ownership says) and this reference is released once, here (this
        // function's contract).
        drop(unsafe { Arc::from_raw(p) });
    }
}

/// Runs when a caller's pointer is released: the `destroy` argument of the
/// add and post calls.
pub type eventq_destroy_fn = Option<extern "C" fn(userdata: *mut c_void)>;

/// A caller's pointer handed over with its destroy hook (None for none),
/// which runs exactly once, when this is dropped: the one rule for userdata
/// on every path, failure included, so no caller leaks it or frees it twice.
/// Every callback's and hook's userdata is one of these.
pub(crate) struct UserData {
    ptr: *mut c_void,
    destroy: eventq_destroy_fn,
}

// SAFETY: the header documents on which thread callbacks and hooks run
// (the loop's, or the one that removes the source, frees the loop or frees
// a channel's last handle), so the caller vouches that the pointer may move
// there.
unsafe impl Send for UserData {}
// SAFETY: a shared UserData only hands out copies of the pointer; what C
// does with them, on which thread, the header documents as for Send.
unsafe impl Sync for UserData {}

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
        c"operation not permitted: epoll cannot watch the fd (a regular file), a PSI window that is not a multiple of 2 s needs CAP_SYS_RESOURCE, or this end of a process-shared channel only sends (or only receives)",
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
        libc::EPROTO,
        c"the other process broke the shared channel's protocol (a shared word, or what was handed over, is not what it may be); the channel is closed on this side",
    ),
    (
        libc::EISCONN,
        c"the other end of this process-shared channel is held by a live process",
    ),
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
