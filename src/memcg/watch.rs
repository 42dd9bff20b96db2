// SPDX-License-Identifier: MIT OR Apache-2.0
//! Watches: one registration with the kernel each, and the events they
//! report.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{invalid, no_cgroup, no_controller, no_psi, os_error, Cgroup};
use crate::error::{Error, Result};
use crate::sys::{self, Epoll, EventFd};

// The epoll flags a watch polls for and reads: the values of the loop's
// `events`, named here so that memcg does not depend on the loop.
const EPOLLIN: u32 = libc::EPOLLIN as u32;
const EPOLLPRI: u32 = libc::EPOLLPRI as u32;
const EPOLLERR: u32 = libc::EPOLLERR as u32;
const EPOLLHUP: u32 = libc::EPOLLHUP as u32;

/// The system-wide PSI file, used when a PSI trigger has no cgroup.
pub const SYSTEM_PSI: &str = "/proc/pressure/memory";

/// A `memory.pressure_level` level (cgroup v1 vmpressure).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Low,
    Medium,
    Critical,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Low => "low",
            Level::Medium => "medium",
            Level::Critical => "critical",
        }
    }
}

/// How `memory.pressure_level` events propagate (the kernel's modes):
/// `Default` notifies for this level and above, also for descendants'
/// pressure unless a descendant's listener took it; `Hierarchy` always also
/// for descendants; `Local` only for this cgroup's own reclaim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    #[default]
    Default,
    Hierarchy,
    Local,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Default => "default",
            Mode::Hierarchy => "hierarchy",
            Mode::Local => "local",
        }
    }
}

/// Shortest and longest PSI trigger windows the kernel accepts.
pub const PSI_WINDOW_MIN: Duration = Duration::from_millis(500);
pub const PSI_WINDOW_MAX: Duration = Duration::from_secs(10);
/// Without `CAP_SYS_RESOURCE` a PSI window must be a multiple of this.
pub const PSI_UNPRIVILEGED_WINDOW: Duration = Duration::from_secs(2);

/// A PSI trigger: notify when tasks stalled on memory for at least `stall`
/// within any `window` ("some": at least one task stalled; "full": all
/// non-idle tasks stalled at once). The kernel notifies at most once per
/// window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PsiTrigger {
    pub full: bool,
    pub stall: Duration,
    pub window: Duration,
}

impl PsiTrigger {
    /// `"some <stall> <window>"`.
    pub fn some(stall: Duration, window: Duration) -> PsiTrigger {
        PsiTrigger {
            full: false,
            stall,
            window,
        }
    }

    /// `"full <stall> <window>"`.
    pub fn full(stall: Duration, window: Duration) -> PsiTrigger {
        PsiTrigger {
            full: true,
            stall,
            window,
        }
    }

    /// The spec written to the kernel, e.g. "some 150000 2000000".
    pub fn spec(&self) -> String {
        format!(
            "{} {} {}",
            if self.full { "full" } else { "some" },
            self.stall.as_micros(),
            self.window.as_micros()
        )
    }

    fn check(&self) -> Result<()> {
        if self.window < PSI_WINDOW_MIN || self.window > PSI_WINDOW_MAX {
            return Err(invalid(format!(
                "PSI trigger window {:?} is outside the kernel's 500ms..10s",
                self.window
            )));
        }
        if self.stall.as_micros() == 0 || self.stall > self.window {
            return Err(invalid(format!(
                "PSI trigger stall {:?} must be at least 1us and at most the window ({:?})",
                self.stall, self.window
            )));
        }
        Ok(())
    }
}

/// One counter of a flat-keyed file that changed: its name, new value, and
/// change since the previous read (a counter that appears counts from 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delta {
    pub name: String,
    pub value: u64,
    pub delta: i64,
}

/// What a memory watch reports for one wake-up (in `Event::Memory`).
/// Non-exhaustive: a new kind of watch brings a variant.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MemEvent {
    /// `memory.usage_in_bytes` crossed `threshold`, up or down, `count`
    /// times since the last call (the eventfd counter). `usage` is the usage
    /// read just after (above or below `threshold` says the direction of
    /// the last crossing).
    Threshold {
        count: u64,
        threshold: u64,
        usage: u64,
    },
    /// The cgroup hit its limit (`memory.oom_control`) `count` times since
    /// the last call. `under_oom` and `oom_kill` are memory.oom_control's
    /// fields read just after.
    Oom {
        count: u64,
        under_oom: bool,
        oom_kill: u64,
    },
    /// `memory.pressure_level` reported `count` times since the last call
    /// for the registered level and mode.
    Pressure {
        count: u64,
        level: Level,
        mode: Mode,
    },
    /// A PSI trigger fired (the kernel fires a trigger at most once per
    /// window, and firings not yet seen merge into one, as in the kernel:
    /// its trigger is a flag, not a counter).
    Psi { trigger: PsiTrigger },
    /// Counters of `file` (e.g. memory.events) changed since the last read.
    Changed { file: String, deltas: Vec<Delta> },
    /// The cgroup was removed: the watch's last event (a loop source is
    /// disabled after it). For cgroup v1 watches `count` is the eventfd
    /// counter of this last read, which includes the kernel's own removal
    /// signal when it came already (the kernel signals each registered
    /// eventfd once when its cgroup goes away); 0 for the others.
    Removed { count: u64 },
}

impl MemEvent {
    /// Whether this is the last event of its watch.
    pub fn is_removed(&self) -> bool {
        matches!(self, MemEvent::Removed { .. })
    }
}

// --- Watches -----------------------------------------------------------------

/// One registration with the kernel, which reports a [`MemEvent`] per
/// wake-up. Each variant holds the state of its kind (opaque): the v1
/// variants an eventfd registered through `cgroup.event_control`, `Psi` the
/// pressure file its trigger was written to, `Counters` the counters file
/// with what it last read. Non-exhaustive: a new kind of watch brings a
/// variant.
///
/// Made by [`Watch::threshold`], [`Watch::oom`], [`Watch::pressure_level`],
/// [`Watch::psi`], [`Watch::memory_events`] and [`Watch::counters`]. Put it
/// on a loop with [`Loop::add_watch`](crate::Loop::add_watch), or use it
/// without one: [`Watch::wait`] blocks the calling thread until the next
/// event, and any other event loop polls [`Watch::fd`] (also `AsFd`) for
/// `POLLIN` and calls [`Watch::read`] with the flags its poll reported.
/// Dropping it closes its fds, which unregisters it.
///
/// Every watch's fd is readable (`POLLIN`) while it has something to read:
/// an eventfd (cgroup v1), an epoll of the counters file and an inotify
/// (counters), an epoll holding the PSI trigger's file (PSI: the kernel
/// signals a trigger with `POLLPRI` only, which some pollers, Go's
/// netpoller among them, never ask for).
///
/// **PSI and outer pollers.** The kernel keeps a trigger's firing as a flag
/// that the first poll of its file clears, whoever polls: a poll of this
/// fd polls the file through the epoll, so the poll that reports this fd
/// readable has taken the firing, and a read after it cannot find it in
/// the kernel any more. Hence [`Watch::read`] takes the poll's flags:
/// `POLLIN` in them is that firing. (The kernel also wakes a cgroup
/// trigger's pollers when another trigger on the same cgroup's
/// `memory.pressure` fires; such a wake-up reports nothing: the poll finds
/// no firing and does not report the fd readable.) A poller that reports
/// readiness and loses the report (a read never made with its flags) loses
/// that firing; so does a registration (`EPOLL_CTL_ADD`) of this fd into
/// another epoll made while a firing is pending and unread: the kernel's
/// own check at registration takes it, and reports it to nobody. Read
/// before registering, and keep the registration.
///
/// A system-wide PSI trigger on a loop (a cgroup's, with
/// `Some(&Cgroup::own()?)`, works the same way):
///
/// ```
/// use std::time::Duration;
/// use eventq::memcg::{PsiTrigger, Watch};
/// use eventq::{Event, Loop};
///
/// let lp = Loop::new()?;
/// // 150 ms of memory stall within any 2 s window.
/// let trigger = PsiTrigger::some(Duration::from_millis(150), Duration::from_secs(2));
/// match Watch::psi(None, trigger) {
///     Ok(watch) => {
///         lp.add_watch(watch, |_, _, ev| {
///             if let Event::Memory(e) = ev {
///                 println!("memory pressure: {e:?}");
///             }
///             Ok(())
///         })?;
///         lp.run_once(Some(Duration::ZERO))?; // an idle machine: no event
///     }
///     // A kernel without PSI, or no permission: the error says which.
///     Err(e) => println!("no PSI trigger here: {e}"),
/// }
/// # Ok::<(), eventq::Error>(())
/// ```
#[non_exhaustive]
pub enum Watch {
    /// cgroup v1: `memory.usage_in_bytes` crossing a threshold.
    Threshold(Threshold),
    /// cgroup v1: the cgroup hitting its limit (`memory.oom_control`).
    Oom(Oom),
    /// cgroup v1: `memory.pressure_level` notifications.
    PressureLevel(PressureLevel),
    /// A PSI trigger on a cgroup2 `memory.pressure` or system-wide.
    Psi(Psi),
    /// Changes of a flat-keyed cgroup2 file (`memory.events`, ...).
    Counters(Counters),
}

/// A cgroup v1 registration: the eventfd the kernel signals, and
/// `memory.usage_in_bytes`, read for the usage and to see the cgroup gone
/// (reads fail with `ENODEV` once it is removed).
struct V1 {
    efd: EventFd,
    usage: File,
    spec: String,
    removed: bool,
}

/// The state of [`Watch::Threshold`].
pub struct Threshold {
    v1: V1,
    bytes: u64,
}

/// The state of [`Watch::Oom`].
pub struct Oom {
    v1: V1,
    /// `memory.oom_control`, read for `under_oom` and `oom_kill`.
    control: File,
}

/// The state of [`Watch::PressureLevel`].
pub struct PressureLevel {
    v1: V1,
    level: Level,
    mode: Mode,
}

/// The state of [`Watch::Psi`]: the pressure file, open for the trigger
/// written to it, and the epoll that polls it for `POLLPRI` (the watch's
/// fd, readable with `POLLIN`).
pub struct Psi {
    /// The trigger's file; kept open (closing it destroys the trigger) and
    /// polled only through `epoll`.
    #[allow(dead_code)]
    file: File,
    /// Holds `file` for `EPOLLPRI`, level-triggered: readable while a
    /// firing is pending, and forever once the trigger is gone (`POLLERR`).
    epoll: Epoll,
    trigger: PsiTrigger,
    spec: String,
    removed: bool,
}

/// The state of [`Watch::Counters`].
pub struct Counters {
    /// Polled: an epoll of `file` (for `POLLPRI`) and `inotify`.
    epoll: Epoll,
    /// The counters file, re-read on each wake-up.
    file: File,
    /// Watches the parent directory: the kernel does not wake a counters
    /// file's pollers when its cgroup is removed, but inotify reports the
    /// directory's deletion.
    inotify: Option<File>,
    name: String,
    last: Vec<(String, u64)>,
    spec: String,
    removed: bool,
}

/// Drains a non-blocking inotify fd (its events only say "look again").
fn drain(inotify: &File) {
    let mut buf = [0u8; 4096];
    while matches!((&*inotify).read(&mut buf), Ok(n) if n > 0) {}
}

impl fmt::Debug for Watch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Watch")
            .field("fd", &self.fd().as_raw_fd())
            .field("spec", &self.spec())
            .finish_non_exhaustive()
    }
}

/// Reads a whole (small) control file from offset 0.
fn read_all(f: &File) -> io::Result<String> {
    let mut buf = vec![0u8; 4096];
    let mut len = 0;
    loop {
        if len == buf.len() {
            buf.resize(len * 2, 0);
        }
        let n = f.read_at(&mut buf[len..], len as u64)?;
        if n == 0 {
            break;
        }
        len += n;
    }
    buf.truncate(len);
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// Parses "key value" lines (cgroup flat-keyed files).
fn parse_flat_keyed(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let key = it.next()?;
            let value = it.next()?.parse().ok()?;
            Some((key.to_string(), value))
        })
        .collect()
}

/// The counters of `now` that differ from `before`, in `now`'s order.
fn diff(before: &[(String, u64)], now: &[(String, u64)]) -> Vec<Delta> {
    now.iter()
        .filter_map(|(name, value)| {
            let old = before
                .iter()
                .find(|(n, _)| n == name)
                .map_or(0, |(_, v)| *v);
            (old != *value).then(|| Delta {
                name: name.clone(),
                value: *value,
                delta: (*value as i128 - old as i128).clamp(i64::MIN as i128, i64::MAX as i128)
                    as i64,
            })
        })
        .collect()
}

/// Whether this process holds CAP_SYS_RESOURCE (from /proc/self/status),
/// which PSI windows that are not a multiple of 2 s need.
fn has_cap_sys_resource() -> bool {
    const CAP_SYS_RESOURCE: u32 = 24;
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << CAP_SYS_RESOURCE) != 0)
}

/// Opens control file `name` of v1 cgroup `dir`, saying which is missing.
fn open_v1_file(dir: &Path, name: &str, what: &str) -> Result<File> {
    let path = dir.join(name);
    File::open(&path).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOENT) if !dir.is_dir() => no_cgroup(format!(
            "no such cgroup: {} does not exist (removed?)",
            dir.display()
        )),
        Some(libc::ENOENT) => no_controller(format!(
            "{what}: {} does not exist: this kernel has no such cgroup v1 memory interface",
            path.display()
        )),
        Some(libc::ENODEV) => no_cgroup(format!("no such cgroup: {} was removed", dir.display())),
        _ => os_error(format!("{what}: opening {}", path.display()), &e),
    })
}

impl V1 {
    /// Registers a new eventfd for `control` (with `args`) of v1 cgroup
    /// `dir` through cgroup.event_control. Returns the registration and
    /// the open control file.
    fn register(dir: &Path, control: &str, args: &str, what: &str) -> Result<(V1, File)> {
        let efd = EventFd::new().map_err(|e| os_error("eventfd", &e))?;
        let cfile = open_v1_file(dir, control, what)?;
        let usage = open_v1_file(dir, "memory.usage_in_bytes", what)?;
        let ec_path = dir.join("cgroup.event_control");
        let ec =
            OpenOptions::new()
                .write(true)
                .open(&ec_path)
                .map_err(|e| match e.raw_os_error() {
                    Some(libc::ENOENT) => no_controller(format!(
                        "{what}: {} does not exist: this kernel has no cgroup v1 memory events",
                        ec_path.display()
                    )),
                    _ => os_error(format!("{what}: opening {}", ec_path.display()), &e),
                })?;
        let line = if args.is_empty() {
            format!("{} {}", efd.as_raw_fd(), cfile.as_raw_fd())
        } else {
            format!("{} {} {}", efd.as_raw_fd(), cfile.as_raw_fd(), args)
        };
        match (&ec).write(line.as_bytes()) {
            Ok(n) if n == line.len() => {}
            Ok(_) => {
                return Err(invalid(format!(
                    "{what}: short write to {}",
                    ec_path.display()
                )))
            }
            Err(e) => {
                return Err(os_error(
                    format!("{what}: writing \"{line}\" to {}", ec_path.display()),
                    &e,
                ))
            }
        }
        let path = dir.join(control);
        let spec = if args.is_empty() {
            path.display().to_string()
        } else {
            format!("{}:{args}", path.display())
        };
        let v1 = V1 {
            efd,
            usage,
            spec,
            removed: false,
        };
        Ok((v1, cfile))
    }

    /// Handles a wake-up: nothing if the eventfd counter was 0; `Removed`
    /// if memory.usage_in_bytes fails with ENODEV (the cgroup is gone); else
    /// `event(count, usage)`.
    fn wake(&mut self, event: impl FnOnce(u64, u64) -> MemEvent) -> Result<Option<MemEvent>> {
        let count = self.efd.read().map_err(|e| {
            Error::context(format_args!("reading the eventfd of {}", self.spec), &e)
        })?;
        if count == 0 {
            return Ok(None);
        }
        let usage = match read_all(&self.usage) {
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => {
                self.removed = true;
                return Ok(Some(MemEvent::Removed { count }));
            }
            Ok(s) => s.trim().parse().unwrap_or(0),
            Err(_) => 0,
        };
        Ok(Some(event(count, usage)))
    }
}

impl Watch {
    /// A cgroup v1 memory threshold: notified each time
    /// `memory.usage_in_bytes` crosses `bytes`, up or down (kubelet's
    /// eviction threshold notifier).
    pub fn threshold(cg: &Cgroup, bytes: u64) -> Result<Watch> {
        let dir = cg.need_v1("a memory threshold")?;
        let args = bytes.to_string();
        let (v1, _) = V1::register(dir, "memory.usage_in_bytes", &args, "memory threshold")?;
        Ok(Watch::Threshold(Threshold { v1, bytes }))
    }

    /// A cgroup v1 OOM notifier: notified each time the cgroup hits its
    /// limit and the OOM handling runs (`memory.oom_control`).
    pub fn oom(cg: &Cgroup) -> Result<Watch> {
        let dir = cg.need_v1("an OOM notifier")?;
        let (v1, control) = V1::register(dir, "memory.oom_control", "", "OOM notifier")?;
        Ok(Watch::Oom(Oom { v1, control }))
    }

    /// A cgroup v1 `memory.pressure_level` listener for `level` in `mode`.
    pub fn pressure_level(cg: &Cgroup, level: Level, mode: Mode) -> Result<Watch> {
        let dir = cg.need_v1("a memory.pressure_level listener")?;
        let args = match mode {
            Mode::Default => level.as_str().to_string(),
            m => format!("{},{}", level.as_str(), m.as_str()),
        };
        let (v1, _) = V1::register(
            dir,
            "memory.pressure_level",
            &args,
            "memory.pressure_level listener",
        )?;
        Ok(Watch::PressureLevel(PressureLevel { v1, level, mode }))
    }

    /// A PSI trigger on `cg`'s cgroup2 `memory.pressure`, or on
    /// `/proc/pressure/memory` (system-wide) when `cg` is `None`.
    pub fn psi(cg: Option<&Cgroup>, trigger: PsiTrigger) -> Result<Watch> {
        trigger.check()?;
        let path = match cg {
            Some(cg) => cg.need_v2("a cgroup PSI trigger")?.join("memory.pressure"),
            None => PathBuf::from(SYSTEM_PSI),
        };
        if trigger.window.as_micros() % PSI_UNPRIVILEGED_WINDOW.as_micros() != 0
            && !has_cap_sys_resource()
        {
            return Err(Error::os(
                libc::EPERM,
                format!(
                    "PSI trigger \"{}\": without CAP_SYS_RESOURCE the kernel accepts only windows \
                     that are a multiple of 2s",
                    trigger.spec()
                ),
            ));
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ENOENT) if !Path::new("/proc/pressure").exists() => no_psi(
                    "this kernel has no PSI (no /proc/pressure: CONFIG_PSI is off, or psi=0 on \
                     the kernel command line)",
                ),
                Some(libc::ENOENT) => match cg.and_then(Cgroup::v2_dir) {
                    Some(dir) if !dir.is_dir() => no_cgroup(format!(
                        "no such cgroup: {} does not exist (removed?)",
                        dir.display()
                    )),
                    _ => no_psi(format!(
                        "{} does not exist: per-cgroup PSI is disabled (cgroup.pressure 0 or \
                         cgroup_disable=pressure)",
                        path.display()
                    )),
                },
                Some(libc::ENODEV) => {
                    no_cgroup(format!("no such cgroup: {} was removed", path.display()))
                }
                _ => os_error(format!("PSI trigger: opening {}", path.display()), &e),
            })?;
        let spec = trigger.spec();
        // The NUL matters for /proc/pressure: the kernel overwrites the
        // last byte written with one.
        let bytes = format!("{spec}\0");
        match (&file).write(bytes.as_bytes()) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                return Err(no_psi(format!(
                    "PSI trigger \"{spec}\" on {}: the kernel has PSI disabled (psi=0)",
                    path.display()
                )))
            }
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => {
                return Err(no_cgroup(format!(
                    "no such cgroup: {} was removed",
                    path.display()
                )))
            }
            Err(e) => {
                return Err(os_error(
                    format!("PSI trigger \"{spec}\" on {}", path.display()),
                    &e,
                ))
            }
        }
        // Registered once the trigger is written: without one, the file's
        // poll neither reports a firing nor enqueues a waiter. A firing in
        // the microseconds since the write would be taken by this
        // registration's own check; the kernel's first check of a new
        // trigger comes no sooner than its next update period.
        let epoll = Epoll::new().map_err(|e| os_error("epoll", &e))?;
        epoll
            .add(file.as_raw_fd(), EPOLLPRI, 0)
            .map_err(|e| os_error(format!("polling {}", path.display()), &e))?;
        Ok(Watch::Psi(Psi {
            file,
            epoll,
            trigger,
            spec: format!("{}:{spec}", path.display()),
            removed: false,
        }))
    }

    /// Changes of cgroup2 `memory.events` (low, high, max, oom, oom_kill,
    /// ...), delivered as named deltas.
    pub fn memory_events(cg: &Cgroup) -> Result<Watch> {
        Watch::counters(cg, "memory.events")
    }

    /// Changes of any flat-keyed cgroup2 file the kernel notifies on
    /// (`memory.events`, `memory.events.local`, `memory.swap.events`,
    /// `cgroup.events`), delivered as named deltas.
    pub fn counters(cg: &Cgroup, name: &str) -> Result<Watch> {
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err(invalid(format!(
                "\"{name}\" is not the name of a file of the cgroup directory"
            )));
        }
        let dir = cg.need_v2(&format!("watching {name}"))?;
        let path = dir.join(name);
        let file = File::open(&path).map_err(|e| match e.raw_os_error() {
            Some(libc::ENOENT) if !dir.is_dir() => no_cgroup(format!(
                "no such cgroup: {} does not exist (removed?)",
                dir.display()
            )),
            Some(libc::ENOENT) if name.starts_with("memory.") => no_controller(format!(
                "{} does not exist: the memory controller is not enabled for this cgroup2 \
                 cgroup (enable it in the parent's cgroup.subtree_control; the root cgroup has \
                 no {name}; on a hybrid system the memory controller may be bound to cgroup v1)",
                path.display()
            )),
            Some(libc::ENOENT) => no_controller(format!("{} does not exist", path.display())),
            _ => os_error(format!("opening {}", path.display()), &e),
        })?;
        let last = parse_flat_keyed(
            &read_all(&file).map_err(|e| os_error(format!("reading {}", path.display()), &e))?,
        );
        let epoll = Epoll::new().map_err(|e| os_error("epoll", &e))?;
        epoll
            .add(file.as_raw_fd(), EPOLLPRI, 0)
            .map_err(|e| os_error(format!("polling {}", path.display()), &e))?;
        // The root cgroup, which has no parent here, cannot be removed. If
        // inotify is out of watches, removal is seen at the next change.
        let inotify = dir.parent().and_then(|parent| {
            let fd = sys::inotify_new().ok()?;
            let mask = libc::IN_DELETE | libc::IN_DELETE_SELF | libc::IN_MOVED_FROM;
            sys::inotify_watch(fd.as_raw_fd(), parent, mask).ok()?;
            epoll.add(fd.as_raw_fd(), EPOLLIN, 1).ok()?;
            Some(File::from(fd))
        });
        Ok(Watch::Counters(Counters {
            epoll,
            file,
            inotify,
            name: name.to_string(),
            last,
            spec: path.display().to_string(),
            removed: false,
        }))
    }

    /// The fd polled, its spec and whether the cgroup was seen removed.
    fn parts(&self) -> (BorrowedFd<'_>, &str, bool) {
        match self {
            Watch::Threshold(Threshold { v1, .. })
            | Watch::Oom(Oom { v1, .. })
            | Watch::PressureLevel(PressureLevel { v1, .. }) => {
                (v1.efd.as_fd(), &v1.spec, v1.removed)
            }
            Watch::Psi(p) => (p.epoll.as_fd(), &p.spec, p.removed),
            Watch::Counters(c) => (c.epoll.as_fd(), &c.spec, c.removed),
        }
    }

    /// The fd to poll, for `POLLIN`: an eventfd (v1), an epoll of the
    /// counters file and an inotify of its cgroup's parent directory
    /// (counters), or an epoll of the PSI trigger's file (PSI). It belongs
    /// to the watch: poll it, never read or close it.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.parts().0
    }

    /// The poll events to wait for: `EPOLLIN` (the loop's `events::IN`),
    /// for every kind.
    pub fn interest(&self) -> u32 {
        EPOLLIN
    }

    /// What was registered: the control file and its arguments, e.g.
    /// "/sys/fs/cgroup/memory/x/memory.usage_in_bytes:16777216" or
    /// "/proc/pressure/memory:some 150000 2000000".
    pub fn spec(&self) -> &str {
        self.parts().1
    }

    /// Whether the cgroup was seen removed (`MemEvent::Removed` was
    /// returned); the watch reports nothing after that.
    pub fn is_removed(&self) -> bool {
        self.parts().2
    }

    /// Reads the watch's pending event, if any, without waiting: `None` if
    /// there was nothing (nothing happened, a spurious wake-up, nothing
    /// changed, or the watch reported its removal already).
    ///
    /// `revents` are the flags a poll of [`Watch::fd`] reported just before
    /// (`EPOLLIN`, the loop's `events::IN`), or 0 without one. Only PSI
    /// uses them: a poll that reported the fd readable took the trigger's
    /// firing from the kernel (see [`Watch`]), so `EPOLLIN` here reports it.
    /// Pass each poll's flags to one read.
    pub fn read(&mut self, revents: u32) -> Result<Option<MemEvent>> {
        if self.is_removed() {
            return Ok(None);
        }
        match self {
            Watch::Threshold(Threshold { v1, bytes }) => {
                v1.wake(|count, usage| MemEvent::Threshold {
                    count,
                    threshold: *bytes,
                    usage,
                })
            }
            Watch::Oom(Oom { v1, control }) => v1.wake(|count, _| {
                let fields = read_all(control)
                    .map(|s| parse_flat_keyed(&s))
                    .unwrap_or_default();
                let get = |k: &str| fields.iter().find(|(n, _)| n == k).map_or(0, |(_, v)| *v);
                MemEvent::Oom {
                    count,
                    under_oom: get("under_oom") != 0,
                    oom_kill: get("oom_kill"),
                }
            }),
            Watch::PressureLevel(PressureLevel { v1, level, mode }) => {
                v1.wake(|count, _| MemEvent::Pressure {
                    count,
                    level: *level,
                    mode: *mode,
                })
            }
            Watch::Psi(p) => {
                // The epoll reports the file if a firing is pending that no
                // poll took yet (POLLPRI, which this wait takes), or if the
                // trigger is gone (POLLERR, for good).
                let mut ev = [libc::epoll_event { events: 0, u64: 0 }];
                let n = sys::retry_eintr(|| p.epoll.wait(&mut ev, Some(Duration::ZERO)))
                    .map_err(|e| Error::context(format_args!("polling {}", p.spec), &e))?;
                let got = if n > 0 { ev[0].events } else { 0 };
                if got & (EPOLLERR | EPOLLHUP) != 0 {
                    // The kernel's PSI file reports POLLERR only when its
                    // trigger is gone: the cgroup was removed.
                    p.removed = true;
                    return Ok(Some(MemEvent::Removed { count: 0 }));
                }
                if got & EPOLLPRI == 0 && revents & EPOLLIN == 0 {
                    return Ok(None);
                }
                Ok(Some(MemEvent::Psi { trigger: p.trigger }))
            }
            Watch::Counters(c) => {
                if let Some(inotify) = &c.inotify {
                    drain(inotify);
                }
                // POLLPRI (with POLLERR) says the file changed; reading it
                // through this open file re-arms the notification. A read
                // failing with ENODEV says the cgroup is gone.
                let text = match read_all(&c.file) {
                    Ok(t) => t,
                    Err(e) if e.raw_os_error() == Some(libc::ENODEV) => {
                        c.removed = true;
                        return Ok(Some(MemEvent::Removed { count: 0 }));
                    }
                    Err(e) => return Err(Error::context(format_args!("reading {}", c.spec), &e)),
                };
                let now = parse_flat_keyed(&text);
                let deltas = diff(&c.last, &now);
                c.last = now;
                if deltas.is_empty() {
                    return Ok(None);
                }
                Ok(Some(MemEvent::Changed {
                    file: c.name.clone(),
                    deltas,
                }))
            }
        }
    }
}

impl Watch {
    /// Waits up to `timeout` (`None`: without limit) for the watch's next
    /// event, on the calling thread (a `poll` of [`Watch::fd`]), without a
    /// loop: `Ok(None)` once the timeout passed with nothing to report. An
    /// event already pending is returned at once, also with a zero timeout.
    ///
    /// `ENOENT` once the watch returned [`MemEvent::Removed`]: its cgroup is
    /// gone and nothing more will come.
    ///
    /// ```no_run
    /// use eventq::memcg::{Cgroup, Watch};
    ///
    /// let mut watch = Watch::oom(&Cgroup::own()?)?;
    /// while let Some(ev) = watch.wait(None)? {
    ///     println!("{ev:?}");
    ///     if ev.is_removed() {
    ///         break; // the cgroup is gone: its last event
    ///     }
    /// }
    /// # Ok::<(), eventq::Error>(())
    /// ```
    pub fn wait(&mut self, timeout: Option<Duration>) -> Result<Option<MemEvent>> {
        if self.is_removed() {
            return Err(no_cgroup(format!(
                "no such cgroup: {} was removed (the watch reported it already)",
                self.spec()
            )));
        }
        if let Some(ev) = self.read(0)? {
            return Ok(Some(ev));
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let revents = sys::poll_one(self.fd(), libc::POLLIN, left)
                .map_err(|e| Error::context(format_args!("polling {}", self.spec()), &e))?;
            if revents != 0 {
                // poll's flags have epoll's values.
                if let Some(ev) = self.read(u32::from(revents as u16))? {
                    return Ok(Some(ev));
                }
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(None);
            }
        }
    }
}

impl AsFd for Watch {
    /// [`Watch::fd`].
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_keyed_diffs() {
        let a = parse_flat_keyed("low 0\nhigh 3\nmax 1\noom 0\noom_kill 0\n");
        let b = parse_flat_keyed("low 0\nhigh 5\nmax 1\noom 1\noom_kill 1\noom_group_kill 2\n");
        let d = diff(&a, &b);
        let got: Vec<(&str, u64, i64)> = d
            .iter()
            .map(|d| (d.name.as_str(), d.value, d.delta))
            .collect();
        assert_eq!(
            got,
            [
                ("high", 5, 2),
                ("oom", 1, 1),
                ("oom_kill", 1, 1),
                ("oom_group_kill", 2, 2)
            ]
        );
        let down = diff(
            &parse_flat_keyed("populated 1\n"),
            &parse_flat_keyed("populated 0\n"),
        );
        assert_eq!(down[0].delta, -1);
        assert!(diff(&b, &b).is_empty());
    }

    #[test]
    fn psi_specs_are_checked() {
        let ms = Duration::from_millis;
        assert_eq!(
            PsiTrigger::some(ms(150), ms(2000)).spec(),
            "some 150000 2000000"
        );
        assert_eq!(
            PsiTrigger::full(ms(1), ms(1000)).spec(),
            "full 1000 1000000"
        );
        for bad in [
            PsiTrigger::some(ms(1), ms(499)),
            PsiTrigger::some(ms(1), ms(10_001)),
            PsiTrigger::some(Duration::ZERO, ms(2000)),
            PsiTrigger::some(Duration::from_nanos(999), ms(2000)),
            PsiTrigger::some(ms(2001), ms(2000)),
        ] {
            assert_eq!(bad.check().unwrap_err().errno(), libc::EINVAL, "{bad:?}");
        }
    }
}
