// SPDX-License-Identifier: MIT OR Apache-2.0
//! `eventq_memcg_*` and `eventq_loop_add_memcg`: memory-pressure watches in
//! the C ABI.
//!
//! A cgroup handle (`eventq_memcg`) says where; each `eventq_memcg_watch_*`
//! call registers one watch with the kernel (`memcg::Watch`), and
//! `eventq_loop_add_memcg` makes it a loop source through the same path as
//! every other add (`add_source`): the same `eventq_source` handle, the same
//! rules for userdata, destroy and `out`, the same removal guarantees (D8).
//! The loop disables the source after it reported its cgroup's removal.
//!
//! Without a loop, `eventq_memcg_watch_fd` is the fd to poll and
//! `eventq_memcg_watch_read` reads an event through `Watch::read`, the
//! loop's own read; both hand out the same `eventq_memcg_event`, made by
//! `c_event`.

use std::ffi::{c_char, c_int, c_void, CStr, CString, OsStr};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr;
use std::time::Duration;

use super::event_loop::{
    add_source, eventq_destroy_fn, eventq_loop, eventq_source, loop_ref, status, Hook,
};
use super::{
    borrow, boundary, einval, ensure, free_box, out_new_handle, out_ref, take_box, to_code, try_c,
    write_out, Handle, OwnershipBox, PANIC,
};
use crate::event_loop::{Event, NewSource};
use crate::memcg::{Cgroup, Level, MemEvent, Mode, PsiTrigger, Watch};

/// A memory cgroup: its cgroup v1 `memory` directory, its cgroup2
/// directory, or both (hybrid systems). Immutable; free with
/// `eventq_memcg_free`.
pub struct eventq_memcg(Cgroup);

impl Handle for eventq_memcg {
    type Ownership = OwnershipBox;
    const ARG: &'static str = "cg";
}

/// One registration with the kernel (a threshold, OOM, pressure-level or
/// PSI trigger, or a counters file), made by an `eventq_memcg_watch_*`
/// call. `eventq_loop_add_memcg` takes it over; one never added is freed
/// with `eventq_memcg_watch_free`, which unregisters it. Without a loop,
/// poll `eventq_memcg_watch_fd` and read with `eventq_memcg_watch_read`.
pub struct eventq_memcg_watch {
    watch: Watch,
    /// What `eventq_memcg_event.spec` points to.
    spec: CString,
    /// The event the last `eventq_memcg_watch_read` handed out, kept until
    /// the next read or the free (its pointers point into it and `spec`).
    last: Option<Box<CEvent>>,
}

impl eventq_memcg_watch {
    fn new(watch: Watch) -> eventq_memcg_watch {
        eventq_memcg_watch {
            spec: CString::new(watch.spec()).unwrap_or_default(),
            watch,
            last: None,
        }
    }
}

impl Handle for eventq_memcg_watch {
    type Ownership = OwnershipBox;
    const ARG: &'static str = "watch";
}

/// `eventq_memcg_dir` version: the cgroup v1 `memory` hierarchy.
pub const EVENTQ_MEMCG_V1: u32 = 1;
/// `eventq_memcg_dir` version: cgroup2.
pub const EVENTQ_MEMCG_V2: u32 = 2;

/// memory.pressure_level levels (`eventq_memcg_watch_pressure_level`).
pub const EVENTQ_MEMCG_LOW: u32 = 0;
pub const EVENTQ_MEMCG_MEDIUM: u32 = 1;
pub const EVENTQ_MEMCG_CRITICAL: u32 = 2;

/// memory.pressure_level modes: DEFAULT notifies for this level and above,
/// also for descendants unless one of theirs took it; HIERARCHY always also
/// for descendants; LOCAL only for this cgroup's own reclaim.
pub const EVENTQ_MEMCG_MODE_DEFAULT: u32 = 0;
pub const EVENTQ_MEMCG_MODE_HIERARCHY: u32 = 1;
pub const EVENTQ_MEMCG_MODE_LOCAL: u32 = 2;

/// PSI trigger kinds: SOME (at least one task stalled) and FULL (all
/// non-idle tasks stalled at once).
pub const EVENTQ_MEMCG_PSI_SOME: u32 = 0;
pub const EVENTQ_MEMCG_PSI_FULL: u32 = 1;

/// Event kinds (`eventq_memcg_event.kind`).
/// memory.usage_in_bytes crossed the threshold (count times; up or down).
pub const EVENTQ_MEMCG_THRESHOLD: u32 = 1;
/// The cgroup hit its limit (count times): memory.oom_control.
pub const EVENTQ_MEMCG_OOM: u32 = 2;
/// memory.pressure_level notified (count times).
pub const EVENTQ_MEMCG_PRESSURE: u32 = 3;
/// A PSI trigger fired (count 1: the kernel keeps a firing as a flag).
pub const EVENTQ_MEMCG_PSI: u32 = 4;
/// Counters of a flat-keyed file (memory.events) changed: see deltas.
pub const EVENTQ_MEMCG_CHANGED: u32 = 5;
/// The cgroup was removed; the source is disabled after this call.
pub const EVENTQ_MEMCG_REMOVED: u32 = 6;

/// A counter that changed (EVENTQ_MEMCG_CHANGED).
#[repr(C)]
pub struct eventq_memcg_delta {
    /// The counter's name, e.g. "oom_kill" (valid during the call).
    pub name: *const c_char,
    /// Its new value.
    pub value: u64,
    /// Its change since the previous read (a new counter counts from 0).
    pub delta: i64,
}

/// What a memory source reports: valid during the callback only, or, from
/// `eventq_memcg_watch_read`, until the next read of the watch or its
/// free. Fields that do not apply to `kind` are 0 / NULL. The library
/// allocates it (later versions may add fields at the end).
#[repr(C)]
pub struct eventq_memcg_event {
    /// EVENTQ_MEMCG_THRESHOLD, _OOM, _PRESSURE, _PSI, _CHANGED or _REMOVED.
    pub kind: u32,
    /// cgroup v1 sources: the kernel's notifications since the last call
    /// (the eventfd counter: none is merged away). PSI: 1. REMOVED of a v1
    /// source: the last counter read, which includes the kernel's own
    /// removal signal when it came already.
    pub count: u64,
    /// THRESHOLD: the registered threshold in bytes.
    pub threshold: u64,
    /// THRESHOLD: memory.usage_in_bytes read just after the wake-up (above
    /// or below the threshold tells the direction of the last crossing).
    pub usage: u64,
    /// OOM: memory.oom_control's under_oom, read just after.
    pub under_oom: bool,
    /// OOM: memory.oom_control's oom_kill counter, read just after.
    pub oom_kill: u64,
    /// PRESSURE: the registered EVENTQ_MEMCG_LOW/_MEDIUM/_CRITICAL.
    pub level: u32,
    /// PRESSURE: the registered EVENTQ_MEMCG_MODE_*.
    pub mode: u32,
    /// PSI: EVENTQ_MEMCG_PSI_SOME or _FULL, and the trigger's stall and
    /// window in microseconds.
    pub psi_kind: u32,
    pub psi_stall_us: u64,
    pub psi_window_us: u64,
    /// What the source watches: the control file and its arguments, e.g.
    /// "/sys/fs/cgroup/memory/x/memory.usage_in_bytes:16777216" or
    /// "/proc/pressure/memory:some 150000 2000000". Never NULL.
    pub spec: *const c_char,
    /// CHANGED: the counters that changed, in the file's order.
    pub deltas: *const eventq_memcg_delta,
    pub ndeltas: usize,
}

/// A memory source's callback: one call per event, with the event. Return
/// 0, or a negative errno to disable the source (see `eventq_source_error`).
pub type eventq_memcg_fn = Option<
    extern "C" fn(
        src: *mut eventq_source,
        ev: *const eventq_memcg_event,
        userdata: *mut c_void,
    ) -> c_int,
>;

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// An `eventq_memcg_event` with the storage its delta pointers point into
/// (moving it moves no heap buffer, so the pointers stay valid).
struct CEvent {
    ev: eventq_memcg_event,
    _names: Vec<CString>,
    _deltas: Vec<eventq_memcg_delta>,
}

/// Calls `cb` with `ev` as an `eventq_memcg_event` (whose pointers are
/// valid during the call).
fn call_back(
    cb: extern "C" fn(*mut eventq_source, *const eventq_memcg_event, *mut c_void) -> c_int,
    src: *mut eventq_source,
    userdata: *mut c_void,
    spec: &CStr,
    ev: &MemEvent,
) -> c_int {
    let c = c_event(spec, ev);
    cb(src, &c.ev, userdata)
}

/// `ev` as the C event, with `spec` (which must outlive it) as its spec:
/// what a loop callback gets and what `eventq_memcg_watch_read` hands out.
fn c_event(spec: &CStr, ev: &MemEvent) -> CEvent {
    let mut c = eventq_memcg_event {
        kind: 0,
        count: 0,
        threshold: 0,
        usage: 0,
        under_oom: false,
        oom_kill: 0,
        level: 0,
        mode: 0,
        psi_kind: 0,
        psi_stall_us: 0,
        psi_window_us: 0,
        spec: spec.as_ptr(),
        deltas: ptr::null(),
        ndeltas: 0,
    };
    let (mut names, mut deltas) = (Vec::new(), Vec::new());
    match *ev {
        MemEvent::Threshold {
            count,
            threshold,
            usage,
        } => {
            c.kind = EVENTQ_MEMCG_THRESHOLD;
            (c.count, c.threshold, c.usage) = (count, threshold, usage);
        }
        MemEvent::Oom {
            count,
            under_oom,
            oom_kill,
        } => {
            c.kind = EVENTQ_MEMCG_OOM;
            (c.count, c.under_oom, c.oom_kill) = (count, under_oom, oom_kill);
        }
        MemEvent::Pressure { count, level, mode } => {
            c.kind = EVENTQ_MEMCG_PRESSURE;
            c.count = count;
            c.level = match level {
                Level::Low => EVENTQ_MEMCG_LOW,
                Level::Medium => EVENTQ_MEMCG_MEDIUM,
                Level::Critical => EVENTQ_MEMCG_CRITICAL,
            };
            c.mode = match mode {
                Mode::Default => EVENTQ_MEMCG_MODE_DEFAULT,
                Mode::Hierarchy => EVENTQ_MEMCG_MODE_HIERARCHY,
                Mode::Local => EVENTQ_MEMCG_MODE_LOCAL,
            };
        }
        MemEvent::Psi { trigger } => {
            c.kind = EVENTQ_MEMCG_PSI;
            c.count = 1;
            c.psi_kind = if trigger.full {
                EVENTQ_MEMCG_PSI_FULL
            } else {
                EVENTQ_MEMCG_PSI_SOME
            };
            (c.psi_stall_us, c.psi_window_us) = (micros(trigger.stall), micros(trigger.window));
        }
        MemEvent::Changed { deltas: ref ds, .. } => {
            c.kind = EVENTQ_MEMCG_CHANGED;
            names.extend(
                ds.iter()
                    .map(|d| CString::new(d.name.as_str()).unwrap_or_default()),
            );
            deltas.extend(ds.iter().zip(&names).map(|(d, n)| eventq_memcg_delta {
                name: n.as_ptr(),
                value: d.value,
                delta: d.delta,
            }));
            (c.deltas, c.ndeltas) = (deltas.as_ptr(), deltas.len());
        }
        MemEvent::Removed { count } => {
            c.kind = EVENTQ_MEMCG_REMOVED;
            c.count = count;
        }
    }
    CEvent {
        ev: c,
        _names: names,
        _deltas: deltas,
    }
}

/// The watch behind a handle, to read it; -EINVAL for NULL.
///
/// # Safety
/// `w` is NULL or a live watch handle (neither added nor freed) that no
/// other thread uses during `'a`.
unsafe fn watch_mut<'a>(w: *mut eventq_memcg_watch) -> Result<&'a mut eventq_memcg_watch, c_int> {
    // SAFETY: a non-NULL w is a live handle that nothing else uses for 'a
    // (this function's contract).
    match unsafe { w.as_mut() } {
        Some(w) => Ok(w),
        None => einval(format_args!("watch is NULL")),
    }
}

/// The cgroup behind a handle; -EINVAL for NULL.
///
/// # Safety
/// As [`borrow`]: `cg` is NULL or a live cgroup handle.
unsafe fn cgroup_ref<'a>(cg: *const eventq_memcg) -> Result<&'a Cgroup, c_int> {
    // SAFETY: this function's contract is borrow's.
    unsafe { borrow(cg) }.map(|c| &c.0)
}

/// A string argument named `name`; -EINVAL for NULL.
///
/// # Safety
/// `s` is NULL or a NUL-terminated string that nothing changes during `'a`.
unsafe fn cstr<'a>(s: *const c_char, name: &str) -> Result<&'a CStr, c_int> {
    // SAFETY: a non-NULL s is NUL-terminated and unchanged for 'a (this
    // function's contract).
    match unsafe { s.as_ref().map(|p| CStr::from_ptr(p)) } {
        Some(s) => Ok(s),
        None => einval(format_args!("{name} is NULL")),
    }
}

/// An EVENTQ_MEMCG_LOW/_MEDIUM/_CRITICAL argument.
fn level_of(level: u32) -> Result<Level, c_int> {
    match level {
        EVENTQ_MEMCG_LOW => Ok(Level::Low),
        EVENTQ_MEMCG_MEDIUM => Ok(Level::Medium),
        EVENTQ_MEMCG_CRITICAL => Ok(Level::Critical),
        _ => einval(format_args!(
            "level is {level}: not EVENTQ_MEMCG_LOW, _MEDIUM or _CRITICAL"
        )),
    }
}

/// An EVENTQ_MEMCG_MODE_* argument.
fn mode_of(mode: u32) -> Result<Mode, c_int> {
    match mode {
        EVENTQ_MEMCG_MODE_DEFAULT => Ok(Mode::Default),
        EVENTQ_MEMCG_MODE_HIERARCHY => Ok(Mode::Hierarchy),
        EVENTQ_MEMCG_MODE_LOCAL => Ok(Mode::Local),
        _ => einval(format_args!(
            "mode is {mode}: not EVENTQ_MEMCG_MODE_DEFAULT, _HIERARCHY or _LOCAL"
        )),
    }
}

/// Writes a new handle made of `res`'s object to `*out`, or returns the
/// error: the end of every call that makes a cgroup or watch handle.
///
/// # Safety
/// As [`out_new_handle`]: `out` is non-NULL and valid for writing a pointer.
unsafe fn out_new_handle_of<T, H: Handle>(
    out: *mut *mut H,
    res: crate::Result<T>,
    handle: fn(T) -> H,
) -> c_int {
    match res {
        // SAFETY: this function's contract is out_new_handle's.
        Ok(v) => unsafe { out_new_handle(out, handle(v)) },
        Err(e) => to_code(&e),
    }
}

/// The calling process's memory cgroup, from /proc/self/cgroup and the
/// mounts: its cgroup v1 `memory` directory if that hierarchy is mounted,
/// its cgroup2 directory if cgroup2 is mounted (both on a hybrid system).
/// Writes a handle to `*out`.
///
/// Returns 0; -EINVAL for NULL out; -ENODEV if neither the v1 memory
/// controller nor cgroup2 is mounted (or the kernel has no cgroups);
/// -ENOENT if the cgroup's directory does not exist; -EACCES if /proc
/// cannot be read.
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn eventq_memcg_own(out: *mut *mut eventq_memcg) -> c_int {
    boundary!(PANIC, {
        ensure!(!out.is_null(), "out is NULL");
        // SAFETY: out is non-NULL (checked) and points to a handle pointer
        // (header).
        unsafe { out_new_handle_of(out, Cgroup::own(), eventq_memcg) }
    })
}

/// The cgroup at directory `path`: a directory of the cgroup v1 `memory`
/// hierarchy (it has memory.usage_in_bytes) or a cgroup2 directory (it has
/// cgroup.controllers). Writes a handle to `*out`.
///
/// Returns 0; -EINVAL for NULL path or out; -ENOENT if `path` does not
/// exist or is not a cgroup directory; -ENODEV if it is a cgroup v1
/// directory of another controller (no memory controller there); -EACCES
/// if it cannot be examined.
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn eventq_memcg_open(path: *const c_char, out: *mut *mut eventq_memcg) -> c_int {
    boundary!(PANIC, {
        // SAFETY: path is NULL or a NUL-terminated string (header).
        let path = try_c!(unsafe { cstr(path, "path") });
        ensure!(!out.is_null(), "out is NULL");
        let path = Path::new(OsStr::from_bytes(path.to_bytes()));
        // SAFETY: out is non-NULL (checked) and points to a handle pointer
        // (header).
        unsafe { out_new_handle_of(out, Cgroup::at(path), eventq_memcg) }
    })
}

/// Frees a cgroup handle (watches made with it do not need it). NULL is a
/// no-op.
///
/// Thread safety: not while other threads use the handle.
#[no_mangle]
pub extern "C" fn eventq_memcg_free(cg: *mut eventq_memcg) {
    boundary!((), {
        // SAFETY: cg is NULL or a handle from eventq_memcg_own or _open,
        // given up here: not used by other threads (header).
        unsafe { free_box(cg) }
    })
}

/// Writes the cgroup's directory for `version` (EVENTQ_MEMCG_V1 or _V2),
/// NUL-terminated, into `buf` of `len` bytes, and returns its length
/// (without the NUL). With buf NULL and len 0 it only returns the length.
///
/// Returns the length; -EINVAL for NULL cg, an unknown version, or NULL buf
/// with len > 0; -ENODEV if the cgroup has no directory for that version;
/// -EMSGSIZE if `len` is not more than the length (nothing written).
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn eventq_memcg_dir(
    cg: *const eventq_memcg,
    version: u32,
    buf: *mut c_char,
    len: usize,
) -> c_int {
    boundary!(PANIC, {
        // SAFETY: cg is NULL or a handle from eventq_memcg_own or _open, not
        // freed (header).
        let cg = try_c!(unsafe { cgroup_ref(cg) });
        ensure!(
            version == EVENTQ_MEMCG_V1 || version == EVENTQ_MEMCG_V2,
            "version is {version}: not EVENTQ_MEMCG_V1 or EVENTQ_MEMCG_V2"
        );
        ensure!(!buf.is_null() || len == 0, "buf is NULL with len {len}");
        let dir = if version == EVENTQ_MEMCG_V1 {
            cg.v1_dir()
        } else {
            cg.v2_dir()
        };
        let Some(dir) = dir else {
            return super::fail_code(
                -libc::ENODEV,
                format_args!("the cgroup has no cgroup v{version} directory"),
            );
        };
        let bytes = dir.as_os_str().as_bytes();
        let Ok(n) = c_int::try_from(bytes.len()) else {
            return -libc::EMSGSIZE;
        };
        if buf.is_null() {
            return n;
        }
        if len <= bytes.len() {
            return super::fail_code(
                -libc::EMSGSIZE,
                format_args!(
                    "len {len} leaves no room for the {}-byte path and its NUL",
                    bytes.len()
                ),
            );
        }
        // SAFETY: buf has room for len > bytes.len() bytes (header); the
        // regions cannot overlap (the path is ours).
        unsafe {
            ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), bytes.len());
            buf.add(bytes.len()).write(0);
        }
        n
    })
}

/// A watch of the cgroup's memory usage (memory.usage_in_bytes) crossing
/// `bytes`, up or down: kubelet's eviction threshold notifier (cgroup v1:
/// an eventfd registered through cgroup.event_control). Its events
/// (EVENTQ_MEMCG_THRESHOLD) count the crossings since the last one, with
/// the usage read just after. Writes the watch to `*out` (see
/// `eventq_loop_add_memcg`).
///
/// Returns 0; -EINVAL for NULL cg or out; -ENODEV if the cgroup has no
/// cgroup v1 memory directory (cgroup2 only: use PSI or memory.events) or
/// the kernel lacks cgroup.event_control; -ENOENT if the cgroup was
/// removed; -EACCES/-EPERM if cgroup.event_control cannot be written;
/// -EMFILE/-ENFILE.
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn eventq_memcg_watch_threshold(
    cg: *const eventq_memcg,
    bytes: u64,
    out: *mut *mut eventq_memcg_watch,
) -> c_int {
    boundary!(PANIC, {
        // SAFETY: cg is NULL or a handle from eventq_memcg_own or _open, not
        // freed (header).
        let cg = try_c!(unsafe { cgroup_ref(cg) });
        ensure!(!out.is_null(), "out is NULL");
        // SAFETY: out is non-NULL (checked) and points to a handle pointer
        // (header).
        unsafe { out_new_handle_of(out, Watch::threshold(cg, bytes), eventq_memcg_watch::new) }
    })
}

/// A watch of the cgroup hitting its memory limit and the kernel's OOM
/// handling running (cgroup v1 memory.oom_control). Its events
/// (EVENTQ_MEMCG_OOM) count the OOMs since the last one, with
/// memory.oom_control's under_oom and oom_kill. Writes the watch to `*out`.
///
/// Returns 0; -EINVAL for NULL cg or out; -ENODEV if the cgroup has no
/// cgroup v1 memory directory; -ENOENT if it was removed; -EACCES/-EPERM if
/// cgroup.event_control cannot be written; -EMFILE/-ENFILE.
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn eventq_memcg_watch_oom(
    cg: *const eventq_memcg,
    out: *mut *mut eventq_memcg_watch,
) -> c_int {
    boundary!(PANIC, {
        // SAFETY: cg is NULL or a handle from eventq_memcg_own or _open, not
        // freed (header).
        let cg = try_c!(unsafe { cgroup_ref(cg) });
        ensure!(!out.is_null(), "out is NULL");
        // SAFETY: out is non-NULL (checked) and points to a handle pointer
        // (header).
        unsafe { out_new_handle_of(out, Watch::oom(cg), eventq_memcg_watch::new) }
    })
}

/// A watch of memory.pressure_level notifications (cgroup v1 vmpressure)
/// for `level` (EVENTQ_MEMCG_LOW, _MEDIUM, _CRITICAL) in `mode`
/// (EVENTQ_MEMCG_MODE_DEFAULT, _HIERARCHY, _LOCAL). Its events
/// (EVENTQ_MEMCG_PRESSURE) count the notifications since the last one.
/// Writes the watch to `*out`.
///
/// Returns 0; -EINVAL for NULL cg or out, or an unknown level or mode;
/// -ENODEV if the cgroup has no cgroup v1 memory directory or the kernel
/// has no memory.pressure_level; -ENOENT if the cgroup was removed;
/// -EACCES/-EPERM if cgroup.event_control cannot be written.
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn eventq_memcg_watch_pressure_level(
    cg: *const eventq_memcg,
    level: u32,
    mode: u32,
    out: *mut *mut eventq_memcg_watch,
) -> c_int {
    boundary!(PANIC, {
        // SAFETY: cg is NULL or a handle from eventq_memcg_own or _open, not
        // freed (header).
        let cg = try_c!(unsafe { cgroup_ref(cg) });
        let level = try_c!(level_of(level));
        let mode = try_c!(mode_of(mode));
        ensure!(!out.is_null(), "out is NULL");
        // SAFETY: out is non-NULL (checked) and points to a handle pointer
        // (header).
        unsafe {
            out_new_handle_of(
                out,
                Watch::pressure_level(cg, level, mode),
                eventq_memcg_watch::new,
            )
        }
    })
}

/// A PSI trigger: "some" (EVENTQ_MEMCG_PSI_SOME) or "full" (_FULL) memory
/// stall of at least stall_us within any window_us (500000..10000000), on
/// the cgroup's cgroup2 memory.pressure, or system-wide
/// (/proc/pressure/memory) when cg is NULL. One event (EVENTQ_MEMCG_PSI)
/// per firing (the kernel fires a trigger at most once per window, and
/// keeps an unread firing as a flag: firings not yet read are one event);
/// when the cgroup is removed (POLLERR), EVENTQ_MEMCG_REMOVED.
/// Writes the watch to `*out`.
///
/// Returns 0; -EINVAL for NULL out, an unknown kind, a window outside
/// 500 ms..10 s, or a stall of 0 or longer than the window; -EPERM for a
/// window that is not a multiple of 2 s without CAP_SYS_RESOURCE (the
/// kernel's rule for unprivileged triggers); -EOPNOTSUPP if the kernel has
/// no PSI or per-cgroup PSI is disabled; -ENODEV if cg has no cgroup2
/// directory; -ENOENT if the cgroup was removed; -EACCES if the pressure
/// file cannot be opened for writing.
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn eventq_memcg_watch_psi(
    cg: *const eventq_memcg,
    kind: u32,
    stall_us: u64,
    window_us: u64,
    out: *mut *mut eventq_memcg_watch,
) -> c_int {
    boundary!(PANIC, {
        let cg = if cg.is_null() {
            None
        } else {
            // SAFETY: cg is a handle from eventq_memcg_own or _open, not
            // freed (header).
            Some(try_c!(unsafe { cgroup_ref(cg) }))
        };
        ensure!(
            kind == EVENTQ_MEMCG_PSI_SOME || kind == EVENTQ_MEMCG_PSI_FULL,
            "kind is {kind}: not EVENTQ_MEMCG_PSI_SOME or EVENTQ_MEMCG_PSI_FULL"
        );
        ensure!(!out.is_null(), "out is NULL");
        let trigger = PsiTrigger {
            full: kind == EVENTQ_MEMCG_PSI_FULL,
            stall: Duration::from_micros(stall_us),
            window: Duration::from_micros(window_us),
        };
        // SAFETY: out is non-NULL (checked) and points to a handle pointer
        // (header).
        unsafe { out_new_handle_of(out, Watch::psi(cg, trigger), eventq_memcg_watch::new) }
    })
}

/// A watch of the cgroup's cgroup2 memory.events counters (low, high, max,
/// oom, oom_kill, ...): as `eventq_memcg_watch_counters` of
/// "memory.events".
///
/// Returns 0; -EINVAL for NULL cg or out; -ENODEV if cg has no cgroup2
/// directory or it has no memory.events (the memory controller is not
/// enabled for the cgroup); -ENOENT if the cgroup was removed; -EACCES if
/// the file cannot be read.
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn eventq_memcg_watch_events(
    cg: *const eventq_memcg,
    out: *mut *mut eventq_memcg_watch,
) -> c_int {
    boundary!(PANIC, {
        // SAFETY: cg is NULL or a handle from eventq_memcg_own or _open, not
        // freed (header).
        let cg = try_c!(unsafe { cgroup_ref(cg) });
        ensure!(!out.is_null(), "out is NULL");
        // SAFETY: out is non-NULL (checked) and points to a handle pointer
        // (header).
        unsafe { out_new_handle_of(out, Watch::memory_events(cg), eventq_memcg_watch::new) }
    })
}

/// A watch of the counters of a flat-keyed cgroup2 file the kernel notifies
/// on, named `file` ("memory.events", "memory.events.local",
/// "memory.swap.events", "cgroup.events"). The file is re-read on each
/// POLLPRI wake-up and the counters that changed are passed as deltas
/// (EVENTQ_MEMCG_CHANGED); when the cgroup is removed,
/// EVENTQ_MEMCG_REMOVED. Writes the watch to `*out`.
///
/// Returns 0; -EINVAL for NULL cg, file or out, or a file name that is
/// empty, has a '/', or is not UTF-8; -ENODEV if cg has no cgroup2
/// directory or the file does not exist there (for memory.*: the memory
/// controller is not enabled for the cgroup); -ENOENT if the cgroup was
/// removed; -EACCES if the file cannot be read.
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn eventq_memcg_watch_counters(
    cg: *const eventq_memcg,
    file: *const c_char,
    out: *mut *mut eventq_memcg_watch,
) -> c_int {
    boundary!(PANIC, {
        // SAFETY: cg is NULL or a handle from eventq_memcg_own or _open, not
        // freed (header).
        let cg = try_c!(unsafe { cgroup_ref(cg) });
        // SAFETY: file is NULL or a NUL-terminated string (header).
        let name = try_c!(unsafe { cstr(file, "file") }.and_then(|f| f
            .to_str()
            .or_else(|_| einval(format_args!("file is not UTF-8")))));
        ensure!(!out.is_null(), "out is NULL");
        // SAFETY: out is non-NULL (checked) and points to a handle pointer
        // (header).
        unsafe { out_new_handle_of(out, Watch::counters(cg, name), eventq_memcg_watch::new) }
    })
}

/// Frees a watch that was not added to a loop (closing its fds unregisters
/// it with the kernel). Never for a watch passed to `eventq_loop_add_memcg`,
/// which owns it from then on. NULL is a no-op.
///
/// Thread safety: not while other threads use the watch.
#[no_mangle]
pub extern "C" fn eventq_memcg_watch_free(watch: *mut eventq_memcg_watch) {
    boundary!((), {
        // SAFETY: watch is NULL or a watch from an eventq_memcg_watch_*
        // call, neither added nor freed, given up here (header).
        unsafe { free_box(watch) }
    })
}

/// The fd to wait on for the watch's events without a loop, with poll,
/// epoll or any event loop (Go's netpoller, asyncio): readable (POLLIN,
/// EVENTQ_IN) while the watch has something to read; then call
/// `eventq_memcg_watch_read` with the flags the poll reported. It is an
/// eventfd (cgroup v1 watches), an epoll of the counters file and an
/// inotify (counters), or an epoll holding the PSI trigger's file (PSI:
/// the kernel signals a trigger with POLLPRI only, which some pollers
/// never ask for). The fd belongs to the watch: poll it, never read,
/// write or close it. It is closed when the watch is freed (by
/// `eventq_memcg_watch_free`, or by its source after
/// `eventq_loop_add_memcg`).
///
/// PSI: the kernel keeps a firing as a flag that the first poll of the
/// trigger's file clears, and polling this fd polls that file, so the poll
/// that reports this fd readable took the firing: pass its flags to the
/// next `eventq_memcg_watch_read`, which reports the firing for
/// EVENTQ_IN. A poll report that never reaches a read is a firing lost,
/// and so is a firing pending when this fd is added to an epoll (the
/// kernel's check at EPOLL_CTL_ADD takes it and reports it to no one):
/// read once before adding it, then keep it added. The kernel also wakes
/// a cgroup trigger's pollers when another trigger on the same cgroup's
/// memory.pressure fires; such a wake-up does not report the fd readable.
///
/// Returns the fd (>= 0); -EINVAL for NULL watch.
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn eventq_memcg_watch_fd(watch: *const eventq_memcg_watch) -> c_int {
    boundary!(PANIC, {
        // SAFETY: watch is NULL or a watch from an eventq_memcg_watch_* call,
        // neither added nor freed (header).
        let w = try_c!(unsafe { borrow(watch) });
        w.watch.fd().as_raw_fd()
    })
}

/// Reads the watch's pending event without waiting, the read a loop makes
/// for a memory source: the same `eventq_memcg_event` its callback gets
/// (count, deltas, spec, ...). `revents` are the flags a poll of
/// `eventq_memcg_watch_fd` reported just before, or 0 without one: only a
/// PSI watch uses them (EVENTQ_IN in them is the trigger's firing, which
/// that poll took from the kernel; see `eventq_memcg_watch_fd`); other
/// flags are ignored. Pass each poll's flags to one read. On success
/// `*out` points to the event, owned by the watch and valid until its next
/// read or its free; on failure `*out` is untouched. After
/// EVENTQ_MEMCG_REMOVED, the last event of a watch, every read fails with
/// -ENOENT (the fd may stay readable: stop polling it).
///
/// Returns 0; -EAGAIN if nothing is pending (nothing happened, or a
/// wake-up that carried nothing: a counters file re-read unchanged); -ENOENT
/// once the watch reported EVENTQ_MEMCG_REMOVED; -EINVAL for NULL watch or
/// out; the errno of a failed read of its fd or control file (-EIO, ...).
///
/// Thread safety: one thread at a time per watch (not concurrently with
/// another read of it, with `eventq_memcg_watch_free`, or once
/// `eventq_loop_add_memcg` took it over).
#[no_mangle]
pub extern "C" fn eventq_memcg_watch_read(
    watch: *mut eventq_memcg_watch,
    revents: u32,
    out: *mut *const eventq_memcg_event,
) -> c_int {
    boundary!(PANIC, {
        // SAFETY: watch is NULL or a watch from an eventq_memcg_watch_*
        // call, neither added nor freed, read by one thread at a time
        // (header).
        let w = try_c!(unsafe { watch_mut(watch) });
        ensure!(!out.is_null(), "out is NULL");
        if w.watch.is_removed() {
            return -libc::ENOENT;
        }
        let ev = match w.watch.read(revents) {
            Ok(Some(ev)) => ev,
            Ok(None) => return -libc::EAGAIN,
            Err(e) => return to_code(&e),
        };
        let c = w.last.insert(Box::new(c_event(&w.spec, &ev)));
        // SAFETY: out is non-NULL (checked) and points to an event pointer
        // (header); the event lives in the watch until its next read or free.
        unsafe { write_out(out, ptr::from_ref(&c.ev)) };
        0
    })
}

/// Adds `watch` to the loop as a source: `cb` runs once per event of the
/// watch, with the event. After EVENTQ_MEMCG_REMOVED (the cgroup is gone)
/// the source is disabled; re-enabled, it disables itself again at its next
/// wake-up. `eventq_source_set_events` does not apply to it (-EINVAL).
///
/// The call takes ownership of `watch`, also if it fails (the watch is
/// freed then, before it returns): never use or free it afterwards; the
/// source unregisters it when it goes away. Ownership of userdata, `out`,
/// removal and callbacks as for `eventq_loop_add_fd` (destroy(userdata)
/// runs exactly once, also if this call fails, before it returns).
///
/// Returns 0; -EINVAL for a NULL loop, watch or cb; -ENOMEM/-ENOSPC if
/// epoll cannot watch one more fd.
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn eventq_loop_add_memcg(
    lp: *const eventq_loop,
    watch: *mut eventq_memcg_watch,
    cb: eventq_memcg_fn,
    userdata: *mut c_void,
    destroy: eventq_destroy_fn,
    out: *mut *mut eventq_source,
) -> c_int {
    boundary!(PANIC, {
        let hook = Hook::new(userdata, destroy);
        // SAFETY: watch is NULL or a watch from an eventq_memcg_watch_*
        // call, neither added nor freed; this call takes it over (header).
        let watch = unsafe { take_box(watch) };
        // SAFETY: out is NULL or points to a handle pointer (header).
        let out = unsafe { out_ref(out) };
        // SAFETY: lp is NULL or a loop from eventq_loop_new, not freed
        // (header).
        let lp = try_c!(unsafe { loop_ref(lp) });
        let (Some(watch), Some(cb)) = (watch, cb) else {
            let what = if cb.is_none() { "cb" } else { "watch" };
            return super::fail_code(-libc::EINVAL, format_args!("{what} is NULL"));
        };
        let eventq_memcg_watch { watch, spec, .. } = *watch;
        let on_event = move |src, ud, ev: Event<'_>| match ev {
            Event::Memory(m) => status(call_back(cb, src, ud, &spec, &m)),
            _ => Ok(()),
        };
        add_source(lp, hook, out, on_event, |make| {
            lp.add_with(NewSource::Memory(watch), make)
        })
    })
}
