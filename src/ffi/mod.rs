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

use std::cell::{Cell, RefCell};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::fmt;
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
/// crosses the ABI. `return` inside the body returns from the export. It
/// also keeps the thread's last-error text (`eventq_last_error`): the text
/// set during the body is shown only if the export returns the code it was
/// set with, and a call that succeeds shows none.
macro_rules! boundary {
    ($on_panic:expr, $body:block) => {{
        // The export's name, for the text, from this fn item's path.
        fn __export() {}
        $crate::ffi::call(
            ::std::any::type_name_of_val(&__export),
            || $on_panic,
            || $body,
        )
    }};
}
pub(crate) use boundary;

/// Returns from the export unless `$cond` holds: one line per
/// precondition, at the top of the export, with the text
/// `eventq_last_error` gives (format arguments). The code is `-EINVAL`
/// unless given as `$cond => code`.
macro_rules! ensure {
    ($cond:expr => $code:expr, $($msg:tt)+) => {
        if !$cond {
            return $crate::ffi::fail_code($code, format_args!($($msg)+));
        }
    };
    ($cond:expr, $($msg:tt)+) => {
        ensure!($cond => -::libc::EINVAL, $($msg)+)
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

/// The longest last-error text kept, NUL included; a longer one is cut.
const TEXT_MAX: usize = 512;

/// A thread's last-error state. Plain cells and a fixed buffer: a `const`
/// thread-local without a destructor, so entering and leaving an export
/// costs a few loads and stores, and no call allocates for its text.
struct LastError {
    /// Exports entered on this thread; a call's number tags its text.
    calls: Cell<u64>,
    /// The innermost export running (a callback's calls nest in the
    /// loop's): its number and its fn item's type name.
    current: Cell<(u64, &'static str)>,
    /// The call that set `text`, and the code it was set with.
    text_call: Cell<u64>,
    text_code: Cell<c_int>,
    /// The call whose text `eventq_last_error` shows: the last to return,
    /// if it returned the code of a text it set; else 0.
    shown: Cell<u64>,
    text: RefCell<[u8; TEXT_MAX]>,
}

thread_local! {
    static LAST: LastError = const {
        LastError {
            calls: Cell::new(0),
            current: Cell::new((0, "")),
            text_call: Cell::new(0),
            text_code: Cell::new(0),
            shown: Cell::new(0),
            text: RefCell::new([0; TEXT_MAX]),
        }
    };
}

/// An export's return value: the code a text may go with, if it is a
/// failure. A negative `int` is its code; a NULL pointer (an export that
/// returns a handle or data) counts as -EINVAL; other returns never fail.
pub(crate) trait Outcome {
    fn failure(&self) -> Option<c_int>;
}

impl Outcome for c_int {
    fn failure(&self) -> Option<c_int> {
        (*self < 0).then_some(*self)
    }
}

impl<T> Outcome for *mut T {
    fn failure(&self) -> Option<c_int> {
        self.is_null().then_some(-libc::EINVAL)
    }
}

impl<T> Outcome for *const T {
    fn failure(&self) -> Option<c_int> {
        self.is_null().then_some(-libc::EINVAL)
    }
}

impl Outcome for () {
    fn failure(&self) -> Option<c_int> {
        None
    }
}

impl Outcome for usize {
    fn failure(&self) -> Option<c_int> {
        None
    }
}

/// Runs an export (`boundary!`): `name` is the type name of a fn item
/// declared in it, `body` its body, `on_panic` what it returns if the body
/// panics. The thread-local is reached once per call (in a shared library
/// each access is a `__tls_get_addr` call): the call is numbered and made
/// the current one, and when it returns its text is shown if it failed
/// with the code the text was set with.
pub(crate) fn call<R: Outcome>(
    name: &'static str,
    on_panic: impl FnOnce() -> R,
    body: impl FnOnce() -> R,
) -> R {
    LAST.with(|l| {
        let id = l.calls.get().wrapping_add(1).max(1);
        l.calls.set(id);
        let outer = l.current.replace((id, name));
        let ret = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
            Ok(v) => v,
            Err(payload) => {
                let ret = on_panic();
                panicked(&*payload, ret.failure());
                ret
            }
        };
        let failure = ret.failure();
        let keep =
            failure.is_some() && failure == Some(l.text_code.get()) && l.text_call.get() == id;
        l.shown.set(if keep { id } else { 0 });
        l.current.set(outer);
        ret
    })
}

/// The export's name from the type name of the fn item `boundary!`
/// declares in it ("eventq::ffi::chan::eventq_chan_send::__export").
fn export_name(path: &str) -> &str {
    let path = path.strip_suffix("::__export").unwrap_or(path);
    path.rsplit("::").next().unwrap_or(path)
}

/// Writes into a fixed buffer, cutting at a character boundary when full
/// and keeping a byte for the NUL.
struct TextWriter<'a> {
    buf: &'a mut [u8; TEXT_MAX],
    len: usize,
}

impl fmt::Write for TextWriter<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = TEXT_MAX - 1 - self.len;
        let mut n = s.len().min(room);
        while !s.is_char_boundary(n) {
            n -= 1;
        }
        // A NUL would end the C string early.
        for (dst, b) in self.buf[self.len..self.len + n].iter_mut().zip(s.bytes()) {
            *dst = if b == 0 { b' ' } else { b };
        }
        self.len += n;
        Ok(())
    }
}

/// Sets the running export's text: "name: what", for `code`.
fn set_text(code: c_int, what: fmt::Arguments<'_>) {
    LAST.with(|l| {
        let (id, name) = l.current.get();
        let Ok(mut buf) = l.text.try_borrow_mut() else {
            return;
        };
        let mut w = TextWriter {
            buf: &mut buf,
            len: 0,
        };
        let name = export_name(name);
        let _ = if name.is_empty() {
            fmt::write(&mut w, what)
        } else {
            fmt::write(&mut w, format_args!("{name}: {what}"))
        };
        let len = w.len;
        buf[len] = 0;
        l.text_call.set(id);
        l.text_code.set(code);
    })
}

/// Fails with `code`, and `what` as the thread's last-error text.
pub(crate) fn fail_code(code: c_int, what: fmt::Arguments<'_>) -> c_int {
    set_text(code, what);
    code
}

/// As [`fail_code`], as the `Err` of a result.
pub(crate) fn fail<T>(code: c_int, what: fmt::Arguments<'_>) -> Result<T, c_int> {
    Err(fail_code(code, what))
}

/// `boundary!` caught a panic: its message becomes the text.
pub(crate) fn panicked(payload: &(dyn std::any::Any + Send), failure: Option<c_int>) {
    let msg = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)");
    if let Some(code) = failure {
        set_text(
            code,
            format_args!("internal error, a panic was caught: {msg}"),
        );
    }
}

/// The code an export returns when it caught a panic.
pub(crate) const PANIC: c_int = -libc::ENOTRECOVERABLE;

/// Wait without limit (`timeout_ns` argument of sends and receives). The
/// header spells it in build.rs, parenthesised as a macro must be.
pub const EVENTQ_FOREVER: i64 = -1;

/// The code an export returns for `e`: its errno, negated. The error's
/// text becomes the thread's last-error text, except for the codes that
/// say everything themselves and come on the fast paths of a busy
/// channel: -EAGAIN, -ETIMEDOUT and -EPIPE (no text is formatted there).
/// Inlined, so those three read the error's discriminant in place; the
/// rest go to the cold [`code_with_text`].
#[inline(always)]
pub(crate) fn to_code(e: &Error) -> c_int {
    match e {
        Error::WouldBlock => -libc::EAGAIN,
        Error::TimedOut => -libc::ETIMEDOUT,
        Error::Closed => -libc::EPIPE,
        _ => code_with_text(e),
    }
}

/// [`to_code`] for the errors with a text.
#[cold]
#[inline(never)]
fn code_with_text(e: &Error) -> c_int {
    fail_code(-e.errno(), format_args!("{e}"))
}

/// The code an export returns for `res`: 0, or the error's.
#[inline(always)]
pub(crate) fn code_of(res: crate::Result<()>) -> c_int {
    match res {
        Ok(()) => 0,
        Err(ref e) => to_code(e),
    }
}

/// `-EINVAL`, with `what` as the text.
pub(crate) fn einval<T>(what: fmt::Arguments<'_>) -> Result<T, c_int> {
    fail(-libc::EINVAL, what)
}

/// A timeout argument: `EVENTQ_FOREVER`, 0 (do not wait) or positive
/// nanoseconds; anything else is `-EINVAL`.
pub(crate) fn wait_of(timeout_ns: i64) -> Result<Wait, c_int> {
    match timeout_ns {
        EVENTQ_FOREVER => Ok(Wait::Forever),
        0 => Ok(Wait::Never),
        ns if ns > 0 => Ok(Wait::For(Duration::from_nanos(ns as u64))),
        ns => einval(format_args!(
            "timeout_ns is {ns}: below EVENTQ_FOREVER (-1); pass -1, 0 or a positive number of nanoseconds"
        )),
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

/// The largest `size` of a sized struct accepted, as the kernel's
/// `sched_setattr` caps its own: a page. A size above it is taken for what
/// it nearly always is, an unset size field or a wrong argument (1 MiB,
/// 2^40, SIZE_MAX), and refused with -E2BIG before a byte is read or
/// written.
pub const EVENTQ_STRUCT_SIZE_MAX: usize = 4096;

/// A struct whose caller passes its `sizeof` (in a field or an argument),
/// so fields can be added at its end.
pub(crate) trait SizedStruct: Sized {
    /// Its C name, for the texts.
    const NAME: &'static str;
    /// The smallest size accepted, and the constant that says it.
    const MIN: usize;
    const MIN_NAME: &'static str;
    /// Where each field ends, in order (the last is the struct's size): a
    /// size up to the struct's must be one of them.
    const FIELD_ENDS: &'static [usize];
}

/// Checks a sized struct's `size` (`what` names it: "size", "opts->size")
/// before anything is read or written: -E2BIG above
/// EVENTQ_STRUCT_SIZE_MAX; -EINVAL below the minimum, or ending inside a
/// field (a larger, newer struct: not a multiple of its alignment).
pub(crate) fn check_size<T: SizedStruct>(size: usize, what: &str) -> Result<(), c_int> {
    let known = mem::size_of::<T>();
    let name = T::NAME;
    if size > EVENTQ_STRUCT_SIZE_MAX {
        return fail(
            -libc::E2BIG,
            format_args!(
                "{what} is {size}: above EVENTQ_STRUCT_SIZE_MAX (4096), nothing was read or written (set it to sizeof({name}))"
            ),
        );
    }
    if size < T::MIN {
        return einval(format_args!(
            "{what} is {size}: below {} ({}) (set it to sizeof({name}))",
            T::MIN_NAME,
            T::MIN
        ));
    }
    let at_field_end = if size <= known {
        T::FIELD_ENDS.contains(&size)
    } else {
        size % mem::align_of::<T>() == 0
    };
    if !at_field_end {
        return einval(format_args!(
            "{what} is {size}: it ends inside a field of {name} (set it to sizeof({name}))"
        ));
    }
    Ok(())
}

/// Reads a struct the caller sized (`size`: its `sizeof` as the caller's
/// header had it; `what` names it for the texts) into `into`, which holds
/// the defaults: an older, smaller struct leaves the fields it lacks at
/// their defaults, and nothing past `size` is read; a newer, larger one
/// must have zeros in the fields this library does not know (-E2BIG
/// otherwise: it asked for something this version cannot do). The size is
/// checked first ([`check_size`]).
///
/// # Safety
/// `src` points to `size` readable bytes (when `size` is at most
/// EVENTQ_STRUCT_SIZE_MAX), and `T`'s fields take any bytes (integers, raw
/// pointers, optional fn pointers).
pub(crate) unsafe fn read_sized<T: SizedStruct>(
    src: *const T,
    size: usize,
    what: &str,
    into: &mut T,
) -> Result<(), c_int> {
    check_size::<T>(size, what)?;
    let known = mem::size_of::<T>();
    // SAFETY: src points to `size` readable bytes (this function's
    // contract), which C does not change during the call; size is at most
    // a page (checked).
    let bytes = unsafe { slice::from_raw_parts(src.cast::<u8>(), size) };
    if let Some(at) = bytes.iter().skip(known).position(|&b| b != 0) {
        return fail(
            -libc::E2BIG,
            format_args!(
                "{what} is {size}: byte {} is set, past the {known} bytes of {} this version of libeventq knows (built against a newer header?)",
                known + at,
                T::NAME
            ),
        );
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
/// know. The size is checked first ([`check_size`]).
///
/// # Safety
/// `dst` points to `size` writable bytes (when `size` is at most
/// EVENTQ_STRUCT_SIZE_MAX), and `T` has no padding (so all of `v`'s bytes
/// are initialised).
pub(crate) unsafe fn write_sized<T: SizedStruct>(dst: *mut T, size: usize, v: &T) -> c_int {
    try_c!(check_size::<T>(size, "size"));
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
    /// The name the exports give a parameter of this type, for the texts.
    const ARG: &'static str;
}

/// The object behind a handle, for the length of the call; -EINVAL for NULL.
///
/// # Safety
/// `p` is NULL or a live handle: made by this library, not freed, and not
/// freed by another thread during `'a`.
pub(crate) unsafe fn borrow<'a, H: Handle>(p: *const H) -> Result<&'a H, c_int> {
    // SAFETY: a non-NULL p is a live handle (this function's contract).
    match unsafe { p.as_ref() } {
        Some(h) => Ok(h),
        None => einval(format_args!("{} is NULL", H::ARG)),
    }
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
        c"a sized struct sets fields this version of libeventq does not know (built against a newer header), or its size is above EVENTQ_STRUCT_SIZE_MAX (an unset size)",
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

/// The text naming the argument or condition behind the error code that
/// the most recent libeventq call on this thread returned, e.g.
/// "eventq_chan_new: opts->size is 0: below EVENTQ_CHAN_OPTS_SIZE_MIN (16)
/// (set it to sizeof(struct eventq_chan_opts))" or "eventq_chan_send: chan
/// is NULL": the function's name, a colon, then what was wrong, in the
/// library's words (for a system error, what was being done and the
/// system's text). NULL when that call succeeded, or when its code says
/// everything: -EAGAIN, -ETIMEDOUT and -EPIPE come without a text, so a
/// busy channel formats none. As `sqlite3_errmsg`; `eventq_strerror`
/// describes the code itself.
///
/// The pointer stays valid, and the text unchanged, until this thread's
/// next libeventq call (other than eventq_last_error, eventq_strerror,
/// eventq_version and eventq_version_string, which leave it alone, so
/// `eventq_strerror(rc)` and `eventq_last_error()` may be the arguments of
/// one printf). A call made from a loop callback is a call of its own:
/// read the text before the callback returns. Texts longer than 511 bytes
/// are cut.
///
/// Returns the text, or NULL.
///
/// Thread safety: any thread; each thread has its own text.
#[no_mangle]
pub extern "C" fn eventq_last_error() -> *const c_char {
    LAST.with(|l| {
        let shown = l.shown.get();
        if shown == 0 || shown != l.text_call.get() {
            return ptr::null();
        }
        // The buffer lives as long as the thread; RefCell only guards the
        // writer, which never runs during this read.
        l.text.as_ptr().cast::<c_char>().cast_const()
    })
}

#[cfg(test)]
mod tests {
    use super::export_name;

    /// The export's name is the segment before the marker fn's, as the
    /// texts need it.
    #[test]
    fn export_name_from_type_name() {
        fn __export() {}
        let name = std::any::type_name_of_val(&__export);
        assert_eq!(export_name(name), "export_name_from_type_name");
        assert_eq!(
            export_name("eventq::ffi::chan::eventq_chan_send::__export"),
            "eventq_chan_send"
        );
    }

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
