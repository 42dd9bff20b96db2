//! `eventq_memcg_*` and `eventq_loop_add_memcg_*`: memory-pressure sources
//! in the C ABI.
//!
//! Each add call registers with the kernel (a `memcg::Watch`), then adds the
//! watch's fd through `eventq_loop_add_fd` with a trampoline that turns each
//! wake-up into one `eventq_memcg_event`. So a memcg source is an fd source:
//! the same handle, the same ownership rule for userdata and destroy, the
//! same removal guarantees (D8).

use std::ffi::{c_char, c_int, c_void, CStr, CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr;
use std::time::Duration;

use super::event_loop::{
    eventq_destroy_fn, eventq_loop, eventq_loop_add_fd, eventq_source, eventq_source_set_enabled,
};
use super::{boundary, eventq_strerror, put, PANIC};
use crate::memcg::{Cgroup, Level, MemEvent, Mode, PsiTrigger, Watch};

/// A memory cgroup: its cgroup v1 `memory` directory, its cgroup2
/// directory, or both (hybrid systems). Immutable; free with
/// `eventq_memcg_free`.
pub struct eventq_memcg(Cgroup);

/// `eventq_memcg_dir` version: the cgroup v1 `memory` hierarchy.
pub const EVENTQ_MEMCG_V1: u32 = 1;
/// `eventq_memcg_dir` version: cgroup2.
pub const EVENTQ_MEMCG_V2: u32 = 2;

/// memory.pressure_level levels (`eventq_loop_add_memcg_pressure_level`).
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
/// A PSI trigger fired (once per wake-up).
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

/// What a memory source reports; valid during the callback only. Fields
/// that do not apply to `kind` are 0 / NULL.
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

/// A memory source's callback: one call per wake-up, with its event.
/// Return 0, or a negative errno to disable the source (see
/// `eventq_source_error`).
pub type eventq_memcg_fn = Option<
    extern "C" fn(
        src: *mut eventq_source,
        ev: *const eventq_memcg_event,
        userdata: *mut c_void,
    ) -> c_int,
>;

/// The caller's userdata and destroy hook: destroy runs when this drops.
struct UserData {
    userdata: *mut c_void,
    destroy: eventq_destroy_fn,
}

impl Drop for UserData {
    fn drop(&mut self) {
        if let Some(destroy) = self.destroy {
            destroy(self.userdata);
        }
    }
}

/// A memcg source's state behind the fd source's userdata. Dropped by the
/// loop's destroy hook: the watch first (closing its fds unregisters it
/// with the kernel), then the caller's userdata.
struct Ctx {
    watch: Watch,
    cb: extern "C" fn(*mut eventq_source, *const eventq_memcg_event, *mut c_void) -> c_int,
    spec: CString,
    names: Vec<CString>,
    deltas: Vec<eventq_memcg_delta>,
    user: UserData,
}

impl Ctx {
    fn dispatch(&mut self, src: *mut eventq_source, revents: u32) -> c_int {
        let Ctx {
            watch,
            cb,
            spec,
            names,
            deltas,
            user,
        } = self;
        if watch.is_removed() {
            // Re-enabled after its removal: the fd of a PSI or counters
            // watch stays ready, so disable it again rather than spin.
            eventq_source_set_enabled(src, 0);
            return 0;
        }
        let ev = match watch.read(revents) {
            Ok(Some(ev)) => ev,
            Ok(None) => return 0,
            Err(e) => return -e.raw_os_error().unwrap_or(libc::EIO),
        };
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
        match ev {
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
                c.psi_stall_us = u64::try_from(trigger.stall.as_micros()).unwrap_or(u64::MAX);
                c.psi_window_us = u64::try_from(trigger.window.as_micros()).unwrap_or(u64::MAX);
            }
            MemEvent::Changed { deltas: ds, .. } => {
                c.kind = EVENTQ_MEMCG_CHANGED;
                names.clear();
                names.extend(
                    ds.iter()
                        .map(|d| CString::new(d.name.as_str()).unwrap_or_default()),
                );
                deltas.clear();
                deltas.extend(
                    ds.iter()
                        .zip(names.iter())
                        .map(|(d, n)| eventq_memcg_delta {
                            name: n.as_ptr(),
                            value: d.value,
                            delta: d.delta,
                        }),
                );
                c.deltas = deltas.as_ptr();
                c.ndeltas = deltas.len();
            }
            MemEvent::Removed { count } => {
                c.kind = EVENTQ_MEMCG_REMOVED;
                c.count = count;
            }
        }
        let removed = c.kind == EVENTQ_MEMCG_REMOVED;
        let rc = cb(src, &c, user.userdata);
        if removed && rc >= 0 {
            // Nothing follows a removal; the fd of a PSI or counters source
            // would stay ready.
            eventq_source_set_enabled(src, 0);
        }
        rc
    }
}

extern "C" fn ctx_fd_cb(
    src: *mut eventq_source,
    _fd: c_int,
    revents: u32,
    userdata: *mut c_void,
) -> c_int {
    boundary!(PANIC, {
        // SAFETY: userdata is the Ctx made by `add`, owned by this source;
        // the loop runs one callback of a source at a time, and destroys the
        // Ctx only after its callback returned.
        let ctx = unsafe { &mut *userdata.cast::<Ctx>() };
        ctx.dispatch(src, revents)
    })
}

extern "C" fn ctx_destroy(userdata: *mut c_void) {
    boundary!((), {
        // SAFETY: userdata came from Box::into_raw in `add`; the loop runs
        // this destroy hook exactly once.
        drop(unsafe { Box::from_raw(userdata.cast::<Ctx>()) });
    })
}

fn cgroup_ref<'a>(cg: *const eventq_memcg) -> Option<&'a Cgroup> {
    // SAFETY: a non-NULL cg is a live handle from eventq_memcg_own/_open.
    unsafe { cg.as_ref() }.map(|c| &c.0)
}

/// The common part of the add calls: takes ownership of userdata first, so
/// every failure path runs destroy exactly once; registers the watch; adds
/// its fd to the loop.
fn add(
    lp: *const eventq_loop,
    cb: eventq_memcg_fn,
    user: UserData,
    out: *mut *mut eventq_source,
    make: impl FnOnce() -> crate::memcg::Result<Watch>,
) -> c_int {
    if lp.is_null() {
        return -libc::EINVAL;
    }
    let Some(cb) = cb else {
        return -libc::EINVAL;
    };
    let watch = match make() {
        Ok(w) => w,
        Err(e) => return -e.errno(),
    };
    let spec = CString::new(watch.spec()).unwrap_or_default();
    let (fd, interest) = (watch.fd(), watch.interest());
    let ctx = Box::into_raw(Box::new(Ctx {
        watch,
        cb,
        spec,
        names: Vec::new(),
        deltas: Vec::new(),
        user,
    }));
    // On failure eventq_loop_add_fd runs ctx_destroy before returning.
    eventq_loop_add_fd(
        lp,
        fd,
        interest,
        Some(ctx_fd_cb),
        ctx.cast(),
        Some(ctx_destroy),
        out,
    )
}

fn cstr_path<'a>(path: *const c_char) -> Option<&'a Path> {
    // SAFETY: a non-NULL path is a NUL-terminated string (header contract).
    let s = unsafe { path.as_ref().map(|p| CStr::from_ptr(p)) }?;
    Some(Path::new(OsStr::from_bytes(s.to_bytes())))
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
        if out.is_null() {
            return -libc::EINVAL;
        }
        match Cgroup::own() {
            Ok(cg) => {
                put(out, Box::into_raw(Box::new(eventq_memcg(cg))));
                0
            }
            Err(e) => -e.errno(),
        }
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
        let Some(path) = cstr_path(path) else {
            return -libc::EINVAL;
        };
        if out.is_null() {
            return -libc::EINVAL;
        }
        match Cgroup::at(path) {
            Ok(cg) => {
                put(out, Box::into_raw(Box::new(eventq_memcg(cg))));
                0
            }
            Err(e) => -e.errno(),
        }
    })
}

/// Frees a cgroup handle (sources made with it do not need it). NULL is a
/// no-op.
///
/// Thread safety: not while other threads use the handle.
#[no_mangle]
pub extern "C" fn eventq_memcg_free(cg: *mut eventq_memcg) {
    boundary!((), {
        if !cg.is_null() {
            // SAFETY: cg came from Box::into_raw in eventq_memcg_own/_open
            // and is freed once.
            drop(unsafe { Box::from_raw(cg) });
        }
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
        let Some(cg) = cgroup_ref(cg) else {
            return -libc::EINVAL;
        };
        let dir = match version {
            EVENTQ_MEMCG_V1 => cg.v1_dir(),
            EVENTQ_MEMCG_V2 => cg.v2_dir(),
            _ => return -libc::EINVAL,
        };
        let Some(dir) = dir else {
            return -libc::ENODEV;
        };
        let bytes = dir.as_os_str().as_bytes();
        let Ok(n) = c_int::try_from(bytes.len()) else {
            return -libc::EMSGSIZE;
        };
        if buf.is_null() {
            return if len == 0 { n } else { -libc::EINVAL };
        }
        if len <= bytes.len() {
            return -libc::EMSGSIZE;
        }
        // SAFETY: buf has room for len > bytes.len() bytes (header
        // contract); the regions cannot overlap (the path is ours).
        unsafe {
            ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), bytes.len());
            buf.add(bytes.len()).write(0);
        }
        n
    })
}

/// What a code returned by an eventq_memcg_* or eventq_loop_add_memcg_*
/// call means there (negative or positive). Static storage, never NULL;
/// codes without a memcg-specific meaning get eventq_strerror's text.
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn eventq_memcg_strerror(code: c_int) -> *const c_char {
    let msg: &CStr = match code.checked_abs() {
        Some(libc::ENOENT) => {
            c"no such cgroup: the directory does not exist, is not a cgroup, or was removed"
        }
        Some(libc::ENODEV) => {
            c"memory controller not available: the cgroup v1 memory controller is not mounted, the cgroup2 memory controller is not enabled for this cgroup, or the kernel lacks this interface"
        }
        Some(libc::EACCES) => {
            c"permission denied: the cgroup's control file cannot be opened or written (cgroup.event_control, memory.pressure)"
        }
        Some(libc::EPERM) => {
            c"not permitted: the cgroup refused the registration, or a PSI window that is not a multiple of 2 s needs CAP_SYS_RESOURCE"
        }
        Some(libc::EOPNOTSUPP) => {
            c"kernel without PSI: CONFIG_PSI is off, psi=0, or per-cgroup PSI is disabled"
        }
        Some(libc::EINVAL) => {
            c"invalid argument: NULL, an unknown level, mode or kind, a PSI window outside 500 ms..10 s, or a stall of 0 or longer than the window"
        }
        _ => return eventq_strerror(code),
    };
    msg.as_ptr()
}

/// Calls back each time the cgroup's memory usage (memory.usage_in_bytes)
/// crosses `bytes`, up or down: kubelet's eviction threshold notifier
/// (cgroup v1: an eventfd registered through cgroup.event_control). The
/// event's count is the number of crossings since the last call, and usage
/// the usage read just after. When the cgroup is removed the callback gets
/// EVENTQ_MEMCG_REMOVED once and the source is disabled.
///
/// The source is an fd source: ownership of userdata, `out`, removal and
/// callbacks as for `eventq_loop_add_fd` (destroy(userdata) runs exactly
/// once, also if this call fails, before it returns).
///
/// Returns 0; -EINVAL for a NULL loop, cg or cb; -ENODEV if the cgroup has
/// no cgroup v1 memory directory (cgroup2 only: use PSI or memory.events)
/// or the kernel lacks cgroup.event_control; -ENOENT if the cgroup was
/// removed; -EACCES/-EPERM if cgroup.event_control cannot be written;
/// -EMFILE/-ENFILE.
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn eventq_loop_add_memcg_threshold(
    lp: *const eventq_loop,
    cg: *const eventq_memcg,
    bytes: u64,
    cb: eventq_memcg_fn,
    userdata: *mut c_void,
    destroy: eventq_destroy_fn,
    out: *mut *mut eventq_source,
) -> c_int {
    boundary!(PANIC, {
        let user = UserData { userdata, destroy };
        let Some(cg) = cgroup_ref(cg) else {
            return -libc::EINVAL;
        };
        add(lp, cb, user, out, || Watch::threshold(cg, bytes))
    })
}

/// Calls back each time the cgroup hits its memory limit and the kernel's
/// OOM handling runs (cgroup v1 memory.oom_control), with the count since
/// the last call and memory.oom_control's under_oom and oom_kill. Removal,
/// ownership and callbacks as for `eventq_loop_add_memcg_threshold`.
///
/// Returns 0; -EINVAL for a NULL loop, cg or cb; -ENODEV if the cgroup has
/// no cgroup v1 memory directory; -ENOENT if it was removed; -EACCES/-EPERM
/// if cgroup.event_control cannot be written; -EMFILE/-ENFILE.
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn eventq_loop_add_memcg_oom(
    lp: *const eventq_loop,
    cg: *const eventq_memcg,
    cb: eventq_memcg_fn,
    userdata: *mut c_void,
    destroy: eventq_destroy_fn,
    out: *mut *mut eventq_source,
) -> c_int {
    boundary!(PANIC, {
        let user = UserData { userdata, destroy };
        let Some(cg) = cgroup_ref(cg) else {
            return -libc::EINVAL;
        };
        add(lp, cb, user, out, || Watch::oom(cg))
    })
}

/// Calls back on memory.pressure_level notifications (cgroup v1 vmpressure)
/// for `level` (EVENTQ_MEMCG_LOW, _MEDIUM, _CRITICAL) in `mode`
/// (EVENTQ_MEMCG_MODE_DEFAULT, _HIERARCHY, _LOCAL), with the count since the
/// last call. Removal, ownership and callbacks as for
/// `eventq_loop_add_memcg_threshold`.
///
/// Returns 0; -EINVAL for a NULL loop, cg or cb, or an unknown level or
/// mode; -ENODEV if the cgroup has no cgroup v1 memory directory or the
/// kernel has no memory.pressure_level; -ENOENT if the cgroup was removed;
/// -EACCES/-EPERM if cgroup.event_control cannot be written.
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn eventq_loop_add_memcg_pressure_level(
    lp: *const eventq_loop,
    cg: *const eventq_memcg,
    level: u32,
    mode: u32,
    cb: eventq_memcg_fn,
    userdata: *mut c_void,
    destroy: eventq_destroy_fn,
    out: *mut *mut eventq_source,
) -> c_int {
    boundary!(PANIC, {
        let user = UserData { userdata, destroy };
        let Some(cg) = cgroup_ref(cg) else {
            return -libc::EINVAL;
        };
        let level = match level {
            EVENTQ_MEMCG_LOW => Level::Low,
            EVENTQ_MEMCG_MEDIUM => Level::Medium,
            EVENTQ_MEMCG_CRITICAL => Level::Critical,
            _ => return -libc::EINVAL,
        };
        let mode = match mode {
            EVENTQ_MEMCG_MODE_DEFAULT => Mode::Default,
            EVENTQ_MEMCG_MODE_HIERARCHY => Mode::Hierarchy,
            EVENTQ_MEMCG_MODE_LOCAL => Mode::Local,
            _ => return -libc::EINVAL,
        };
        add(lp, cb, user, out, || Watch::pressure_level(cg, level, mode))
    })
}

/// Calls back each time a PSI trigger fires: "some" (EVENTQ_MEMCG_PSI_SOME)
/// or "full" (_FULL) memory stall of at least stall_us within any window_us
/// (500000..10000000), on the cgroup's cgroup2 memory.pressure, or
/// system-wide (/proc/pressure/memory) when cg is NULL. One call per POLLPRI
/// wake-up (the kernel fires a trigger at most once per window). When the
/// cgroup is removed (POLLERR) the callback gets EVENTQ_MEMCG_REMOVED once
/// and the source is disabled. Ownership, `out` and callbacks as for
/// `eventq_loop_add_fd`.
///
/// Returns 0; -EINVAL for a NULL loop or cb, an unknown kind, a window
/// outside 500 ms..10 s, or a stall of 0 or longer than the window; -EPERM
/// for a window that is not a multiple of 2 s without CAP_SYS_RESOURCE (the
/// kernel's rule for unprivileged triggers); -EOPNOTSUPP if the kernel has
/// no PSI or per-cgroup PSI is disabled; -ENODEV if cg has no cgroup2
/// directory; -ENOENT if the cgroup was removed; -EACCES if the pressure
/// file cannot be opened for writing.
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn eventq_loop_add_memcg_psi(
    lp: *const eventq_loop,
    cg: *const eventq_memcg,
    kind: u32,
    stall_us: u64,
    window_us: u64,
    cb: eventq_memcg_fn,
    userdata: *mut c_void,
    destroy: eventq_destroy_fn,
    out: *mut *mut eventq_source,
) -> c_int {
    boundary!(PANIC, {
        let user = UserData { userdata, destroy };
        let cg = cgroup_ref(cg);
        let full = match kind {
            EVENTQ_MEMCG_PSI_SOME => false,
            EVENTQ_MEMCG_PSI_FULL => true,
            _ => return -libc::EINVAL,
        };
        let trigger = PsiTrigger {
            full,
            stall: Duration::from_micros(stall_us),
            window: Duration::from_micros(window_us),
        };
        add(lp, cb, user, out, || Watch::psi(cg, trigger))
    })
}

/// Calls back when the counters of a flat-keyed cgroup2 file change: `file`
/// is "memory.events" when NULL (low, high, max, oom, oom_kill, ...), or any
/// file the kernel notifies on ("memory.events.local", "memory.swap.events",
/// "cgroup.events"). The file is re-read on each POLLPRI wake-up and the
/// counters that changed are passed as deltas (EVENTQ_MEMCG_CHANGED). When
/// the cgroup is removed the callback gets EVENTQ_MEMCG_REMOVED once and
/// the source is disabled. Ownership, `out` and callbacks as for
/// `eventq_loop_add_fd`.
///
/// Returns 0; -EINVAL for a NULL loop, cg or cb, or a file name with '/';
/// -ENODEV if cg has no cgroup2 directory or the file does not exist there
/// (for memory.*: the memory controller is not enabled for the cgroup);
/// -ENOENT if the cgroup was removed; -EACCES if the file cannot be read.
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn eventq_loop_add_memcg_events(
    lp: *const eventq_loop,
    cg: *const eventq_memcg,
    file: *const c_char,
    cb: eventq_memcg_fn,
    userdata: *mut c_void,
    destroy: eventq_destroy_fn,
    out: *mut *mut eventq_source,
) -> c_int {
    boundary!(PANIC, {
        let user = UserData { userdata, destroy };
        let Some(cg) = cgroup_ref(cg) else {
            return -libc::EINVAL;
        };
        let name = if file.is_null() {
            "memory.events".to_string()
        } else {
            // SAFETY: a non-NULL file is a NUL-terminated string.
            match unsafe { CStr::from_ptr(file) }.to_str() {
                Ok(s) => s.to_string(),
                Err(_) => return -libc::EINVAL,
            }
        };
        add(lp, cb, user, out, || Watch::counters(cg, &name))
    })
}
