//! Memory-pressure sources: kubelet's notifications as loop sources, each
//! delivered per event with the kernel's count (see `docs/memcg.md`).
//!
//! - **cgroup v1** (`memory` controller): a usage threshold
//!   (`memory.usage_in_bytes` registered through `cgroup.event_control`, as
//!   kubelet's `threshold_notifier_linux.go` does), OOM (`memory.oom_control`)
//!   and `memory.pressure_level`. Each is an eventfd the kernel signals; a
//!   wake-up reads its counter, which is how many notifications the kernel
//!   made since the last read: none is merged away.
//! - **cgroup v2**: PSI triggers ("some|full <stall us> <window us>" written
//!   into a cgroup's `memory.pressure` or `/proc/pressure/memory`, polled for
//!   `POLLPRI`), and changes of `memory.events` (or any flat-keyed notify
//!   file), whose counters are re-read and delivered as named deltas.
//!
//! A [`Watch`] is one registration: an fd to poll and a `read` that turns a
//! wake-up into one [`MemEvent`]. `Loop::add_memory_threshold` and the other
//! adds below put a watch on a [`Loop`] through `Loop::add_fd`; the watch can
//! also be polled by any other event loop.
//!
//! Errors ([`Error`]) say what is missing, each with its own errno: no such
//! cgroup (`ENOENT`), controller or interface not there (`ENODEV`), no
//! permission (`EACCES`/`EPERM`), kernel without PSI (`EOPNOTSUPP`).

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::event_loop::{events, Event, Loop, SourceId};
use crate::sys::{self, Epoll, EventFd};

/// The system-wide PSI file, used when a PSI trigger has no cgroup.
pub const SYSTEM_PSI: &str = "/proc/pressure/memory";

/// What went wrong, as one of the conditions the API distinguishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// No such cgroup: the directory does not exist, is not a cgroup, or was
    /// removed (`ENOENT`).
    NoCgroup,
    /// The controller or interface is not there: the v1 memory controller
    /// is not mounted, the cgroup2 memory controller is not enabled, or the
    /// kernel lacks the control file (`ENODEV`).
    NoController,
    /// No permission to open or write a control file (`EACCES` or `EPERM`,
    /// as the kernel said; `EPERM` for a PSI window that needs
    /// `CAP_SYS_RESOURCE`).
    Permission,
    /// The kernel has no PSI, or it is disabled (`EOPNOTSUPP`).
    NoPsi,
    /// A bad argument (`EINVAL`).
    Invalid,
    /// Another system error (its own errno).
    Os,
    /// The loop refused the source (its errno).
    Loop,
}

/// A memcg error: its kind, the errno the C ABI returns for it, and a
/// message naming the file or setting at fault.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    errno: i32,
    message: String,
}

impl Error {
    fn new(kind: ErrorKind, errno: i32, message: impl Into<String>) -> Error {
        Error {
            kind,
            errno,
            message: message.into(),
        }
    }

    fn no_cgroup(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::NoCgroup, libc::ENOENT, message)
    }

    fn no_controller(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::NoController, libc::ENODEV, message)
    }

    fn no_psi(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::NoPsi, libc::EOPNOTSUPP, message)
    }

    fn invalid(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Invalid, libc::EINVAL, message)
    }

    /// An OS error met while doing `what`, classified by its errno.
    fn os(what: impl fmt::Display, err: &io::Error) -> Error {
        let errno = err.raw_os_error().unwrap_or(libc::EIO);
        let kind = match errno {
            libc::EACCES | libc::EPERM => ErrorKind::Permission,
            libc::ENOENT => ErrorKind::NoCgroup,
            libc::ENODEV => ErrorKind::NoController,
            libc::EOPNOTSUPP => ErrorKind::NoPsi,
            libc::EINVAL => ErrorKind::Invalid,
            _ => ErrorKind::Os,
        };
        let hint = match kind {
            ErrorKind::Permission => " (no permission: run as the cgroup's owner or root)",
            _ => "",
        };
        Error::new(kind, errno, format!("{what}: {err}{hint}"))
    }

    /// Which condition this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The positive errno the C ABI returns (negated) for this error.
    pub fn errno(&self) -> i32 {
        self.errno
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl From<crate::Error> for Error {
    fn from(e: crate::Error) -> Error {
        Error::new(ErrorKind::Loop, e.errno(), format!("loop: {e}"))
    }
}

impl From<Error> for crate::Error {
    fn from(e: Error) -> crate::Error {
        crate::Error::Os(io::Error::from_raw_os_error(e.errno))
    }
}

/// A memcg result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

// --- Cgroups -----------------------------------------------------------------

/// A memory cgroup: its directory in the cgroup v1 `memory` hierarchy, its
/// directory in the cgroup2 hierarchy, or both (a hybrid system, where a
/// process's v1 memory cgroup and its cgroup2 cgroup are different
/// directories).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroup {
    v1: Option<PathBuf>,
    v2: Option<PathBuf>,
}

impl Cgroup {
    /// The calling process's memory cgroup, from `/proc/self/cgroup` and the
    /// mounts in `/proc/self/mountinfo`: its v1 `memory` cgroup if that
    /// hierarchy is mounted, and its cgroup2 cgroup if cgroup2 is mounted.
    /// `NoController` if neither is mounted.
    pub fn own() -> Result<Cgroup> {
        Cgroup::of_process("self")
    }

    /// The memory cgroup of process `pid`, as [`Cgroup::own`].
    pub fn of_pid(pid: u32) -> Result<Cgroup> {
        Cgroup::of_process(&pid.to_string())
    }

    fn of_process(who: &str) -> Result<Cgroup> {
        let path = format!("/proc/{who}/cgroup");
        let cgroups = match fs::read_to_string(&path) {
            Ok(s) => s,
            Err(e) if e.kind() == io::ErrorKind::NotFound && who != "self" => {
                return Err(Error::no_cgroup(format!("no process {who} ({path})")))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(Error::no_controller(
                    "the kernel has no cgroups (/proc/self/cgroup does not exist)",
                ))
            }
            Err(e) => return Err(Error::os(format!("reading {path}"), &e)),
        };
        let mountinfo = fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| Error::os("reading /proc/self/mountinfo", &e))?;
        let cg = resolve(&cgroups, &mountinfo)?;
        for dir in [&cg.v1, &cg.v2].into_iter().flatten() {
            if !dir.is_dir() {
                return Err(Error::no_cgroup(format!(
                    "no such cgroup: {} (from /proc/{who}/cgroup) does not exist",
                    dir.display()
                )));
            }
        }
        Ok(cg)
    }

    /// The cgroup at `dir`: a directory of the cgroup v1 `memory` hierarchy
    /// (it has `memory.usage_in_bytes`) or of cgroup2 (it has
    /// `cgroup.controllers`). `NoCgroup` if `dir` does not exist or is not a
    /// cgroup; `NoController` if it is a cgroup v1 directory of another
    /// controller's hierarchy.
    pub fn at(dir: impl AsRef<Path>) -> Result<Cgroup> {
        let dir = dir.as_ref();
        match fs::metadata(dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(Error::no_cgroup(format!(
                    "no such cgroup: {} is not a directory",
                    dir.display()
                )))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(Error::no_cgroup(format!(
                    "no such cgroup: {} does not exist",
                    dir.display()
                )))
            }
            Err(e) => return Err(Error::os(format!("cgroup {}", dir.display()), &e)),
        }
        if dir.join("cgroup.controllers").exists() {
            return Ok(Cgroup {
                v1: None,
                v2: Some(dir.to_path_buf()),
            });
        }
        if dir.join("memory.usage_in_bytes").exists() {
            return Ok(Cgroup {
                v1: Some(dir.to_path_buf()),
                v2: None,
            });
        }
        if dir.join("cgroup.procs").exists() {
            return Err(Error::no_controller(format!(
                "{} is a cgroup v1 directory without the memory controller \
                 (no memory.usage_in_bytes): use the memory hierarchy's directory",
                dir.display()
            )));
        }
        Err(Error::no_cgroup(format!(
            "no such cgroup: {} is not a cgroup directory (no cgroup.procs)",
            dir.display()
        )))
    }

    /// The cgroup's directory in the v1 `memory` hierarchy, if any.
    pub fn v1_dir(&self) -> Option<&Path> {
        self.v1.as_deref()
    }

    /// The cgroup's cgroup2 directory, if any.
    pub fn v2_dir(&self) -> Option<&Path> {
        self.v2.as_deref()
    }

    fn need_v1(&self, what: &str) -> Result<&Path> {
        self.v1.as_deref().ok_or_else(|| {
            Error::no_controller(format!(
                "{what} needs the cgroup v1 memory controller, which is not mounted for this \
                 cgroup{}; on cgroup v2 use PSI triggers and memory.events",
                self.v2
                    .as_deref()
                    .map(|p| format!(" (cgroup2 only: {})", p.display()))
                    .unwrap_or_default()
            ))
        })
    }

    fn need_v2(&self, what: &str) -> Result<&Path> {
        self.v2.as_deref().ok_or_else(|| {
            Error::no_controller(format!(
                "{what} needs a cgroup2 cgroup, and cgroup2 is not mounted for this cgroup{}",
                self.v1
                    .as_deref()
                    .map(|p| format!(" (cgroup v1 only: {})", p.display()))
                    .unwrap_or_default()
            ))
        })
    }
}

/// Decodes mountinfo's octal escapes (`\040` is a space).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            let oct = &b[i + 1..i + 4];
            if oct.iter().all(|c| (b'0'..=b'7').contains(c)) {
                let v = oct.iter().fold(0u32, |v, c| v * 8 + u32::from(c - b'0'));
                if let Ok(v) = u8::try_from(v) {
                    out.push(v);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One cgroup mount: the hierarchy path it shows (`root`) and where.
struct Mount {
    root: String,
    point: PathBuf,
}

/// The cgroup mounts of `mountinfo`: v1 `memory` hierarchies and cgroup2.
fn cgroup_mounts(mountinfo: &str) -> (Vec<Mount>, Vec<Mount>) {
    let (mut v1, mut v2) = (Vec::new(), Vec::new());
    for line in mountinfo.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(sep) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        if fields.len() < 5 || fields.len() < sep + 4 {
            continue;
        }
        let mount = Mount {
            root: unescape(fields[3]),
            point: PathBuf::from(unescape(fields[4])),
        };
        match fields[sep + 1] {
            "cgroup" if fields[sep + 3].split(',').any(|o| o == "memory") => v1.push(mount),
            "cgroup2" => v2.push(mount),
            _ => {}
        }
    }
    (v1, v2)
}

/// The directory of hierarchy path `path` under one of `mounts`: the first
/// mount whose root contains it.
fn locate(mounts: &[Mount], path: &str) -> Option<PathBuf> {
    mounts.iter().find_map(|m| {
        let root = m.root.trim_end_matches('/');
        let rest = path.strip_prefix(root)?;
        if !(rest.is_empty() || rest.starts_with('/')) {
            return None; // "/a" is not a prefix of "/ab"
        }
        let rest = rest.trim_start_matches('/');
        Some(if rest.is_empty() {
            m.point.clone()
        } else {
            m.point.join(rest)
        })
    })
}

/// A process's memory cgroup from its `/proc/<pid>/cgroup` and
/// `/proc/self/mountinfo` texts.
fn resolve(cgroups: &str, mountinfo: &str) -> Result<Cgroup> {
    let (v1_mounts, v2_mounts) = cgroup_mounts(mountinfo);
    let (mut v1_path, mut v2_path) = (None, None);
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if id == "0" && controllers.is_empty() {
            v2_path = Some(path);
        } else if controllers.split(',').any(|c| c == "memory") {
            v1_path = Some(path);
        }
    }
    let v1 = v1_path.and_then(|p| locate(&v1_mounts, p));
    let v2 = v2_path.and_then(|p| locate(&v2_mounts, p));
    if v1.is_none() && v2.is_none() {
        let why = match (v1_path, v2_path) {
            (None, None) => "the process is in no memory cgroup (no memory line in /proc/self/cgroup)".to_string(),
            (Some(p), _) => format!(
                "the cgroup v1 memory controller is not mounted (the process is in memory cgroup {p}, \
                 but no cgroup mount with the memory option is in /proc/self/mountinfo)"
            ),
            (None, Some(p)) => format!(
                "cgroup2 is not mounted (the process is in cgroup2 cgroup {p}, but no cgroup2 \
                 mount is in /proc/self/mountinfo)"
            ),
        };
        return Err(Error::no_controller(why));
    }
    Ok(Cgroup { v1, v2 })
}

// --- What a watch reports ----------------------------------------------------

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
    /// "some <stall> <window>".
    pub fn some(stall: Duration, window: Duration) -> PsiTrigger {
        PsiTrigger {
            full: false,
            stall,
            window,
        }
    }

    /// "full <stall> <window>".
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
            return Err(Error::invalid(format!(
                "PSI trigger window {:?} is outside the kernel's 500ms..10s",
                self.window
            )));
        }
        if self.stall.as_micros() == 0 || self.stall > self.window {
            return Err(Error::invalid(format!(
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

/// What a memory source reports for one wake-up.
#[derive(Debug, PartialEq, Eq)]
pub enum MemEvent<'a> {
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
    /// A PSI trigger fired (one per `POLLPRI` wake-up; the kernel fires a
    /// trigger at most once per window).
    Psi { trigger: &'a PsiTrigger },
    /// Counters of `file` (e.g. memory.events) changed since the last read.
    Changed { file: &'a str, deltas: &'a [Delta] },
    /// The cgroup was removed. The source is disabled after this call. For
    /// cgroup v1 sources `count` is the eventfd counter of this last read,
    /// which includes the kernel's own removal signal when it came already
    /// (the kernel signals each registered eventfd once when its cgroup
    /// goes away); 0 for the others.
    Removed { count: u64 },
}

impl MemEvent<'_> {
    /// Whether this is the last event of its source.
    pub fn is_removed(&self) -> bool {
        matches!(self, MemEvent::Removed { .. })
    }
}

// --- Watches -----------------------------------------------------------------

enum Kind {
    Threshold {
        bytes: u64,
    },
    Oom {
        control: File,
    },
    Pressure {
        level: Level,
        mode: Mode,
    },
    Psi {
        trigger: PsiTrigger,
    },
    Counters {
        name: String,
        /// The counters file, polled for POLLPRI through `poll`.
        file: File,
        /// Watches the parent directory: the kernel does not wake a
        /// counters file's pollers when its cgroup is removed, but inotify
        /// reports the directory's deletion.
        inotify: Option<File>,
        last: Vec<(String, u64)>,
        deltas: Vec<Delta>,
    },
}

/// One registration with the kernel: an fd to poll for [`Watch::interest`]
/// and a [`Watch::read`] that turns each wake-up into one event. The
/// registration lasts as long as the watch (dropping it closes its fds,
/// which unregisters it).
pub struct Watch {
    /// The fd polled: an eventfd (v1), the PSI file, or an epoll of the
    /// counters file and its inotify.
    poll: PollFd,
    /// v1: memory.usage_in_bytes, read for the usage and to see the cgroup
    /// gone (reads fail with ENODEV once it is removed).
    probe: Option<File>,
    kind: Kind,
    spec: String,
    removed: bool,
}

enum PollFd {
    Event(EventFd),
    File(File),
    Epoll(Epoll),
}

impl PollFd {
    fn raw(&self) -> RawFd {
        match self {
            PollFd::Event(e) => e.as_raw_fd(),
            PollFd::File(f) => f.as_raw_fd(),
            PollFd::Epoll(e) => e.as_raw_fd(),
        }
    }
}

/// Drains a non-blocking inotify fd (its events only say "look again").
fn drain(inotify: &File) {
    let mut buf = [0u8; 4096];
    while matches!((&*inotify).read(&mut buf), Ok(n) if n > 0) {}
}

impl fmt::Debug for Watch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Watch")
            .field("fd", &self.fd())
            .field("spec", &self.spec)
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

fn open_read(path: &Path) -> io::Result<File> {
    File::open(path)
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
    open_read(&path).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOENT) if !dir.is_dir() => Error::no_cgroup(format!(
            "no such cgroup: {} does not exist (removed?)",
            dir.display()
        )),
        Some(libc::ENOENT) => Error::no_controller(format!(
            "{what}: {} does not exist: this kernel has no such cgroup v1 memory interface",
            path.display()
        )),
        Some(libc::ENODEV) => {
            Error::no_cgroup(format!("no such cgroup: {} was removed", dir.display()))
        }
        _ => Error::os(format!("{what}: opening {}", path.display()), &e),
    })
}

impl Watch {
    /// Registers `eventfd`, `control` and `args` with v1 cgroup `dir`
    /// through cgroup.event_control.
    fn register_v1(
        dir: &Path,
        control: &str,
        args: &str,
        what: &str,
        kind: impl FnOnce(&File) -> Result<Kind>,
    ) -> Result<Watch> {
        let efd = EventFd::new().map_err(|e| Error::os("eventfd", &e))?;
        let cfile = open_v1_file(dir, control, what)?;
        let probe = open_v1_file(dir, "memory.usage_in_bytes", what)?;
        let ec_path = dir.join("cgroup.event_control");
        let ec =
            OpenOptions::new()
                .write(true)
                .open(&ec_path)
                .map_err(|e| match e.raw_os_error() {
                    Some(libc::ENOENT) => Error::no_controller(format!(
                        "{what}: {} does not exist: this kernel has no cgroup v1 memory events",
                        ec_path.display()
                    )),
                    _ => Error::os(format!("{what}: opening {}", ec_path.display()), &e),
                })?;
        let line = if args.is_empty() {
            format!("{} {}", efd.as_raw_fd(), cfile.as_raw_fd())
        } else {
            format!("{} {} {}", efd.as_raw_fd(), cfile.as_raw_fd(), args)
        };
        match (&ec).write(line.as_bytes()) {
            Ok(n) if n == line.len() => {}
            Ok(_) => {
                return Err(Error::invalid(format!(
                    "{what}: short write to {}",
                    ec_path.display()
                )))
            }
            Err(e) => {
                return Err(Error::os(
                    format!("{what}: writing \"{line}\" to {}", ec_path.display()),
                    &e,
                ))
            }
        }
        let kind = kind(&cfile)?;
        let spec = match &kind {
            Kind::Threshold { bytes } => format!("{}:{bytes}", dir.join(control).display()),
            _ if args.is_empty() => dir.join(control).display().to_string(),
            _ => format!("{}:{args}", dir.join(control).display()),
        };
        Ok(Watch {
            poll: PollFd::Event(efd),
            probe: Some(probe),
            kind,
            spec,
            removed: false,
        })
    }

    /// A cgroup v1 memory threshold: notified each time
    /// `memory.usage_in_bytes` crosses `bytes`, up or down (kubelet's
    /// eviction threshold notifier).
    pub fn threshold(cg: &Cgroup, bytes: u64) -> Result<Watch> {
        let dir = cg.need_v1("a memory threshold")?;
        Watch::register_v1(
            dir,
            "memory.usage_in_bytes",
            &bytes.to_string(),
            "memory threshold",
            |_| Ok(Kind::Threshold { bytes }),
        )
    }

    /// A cgroup v1 OOM notifier: notified each time the cgroup hits its
    /// limit and the OOM handling runs (`memory.oom_control`).
    pub fn oom(cg: &Cgroup) -> Result<Watch> {
        let dir = cg.need_v1("an OOM notifier")?;
        Watch::register_v1(dir, "memory.oom_control", "", "OOM notifier", |f| {
            let control = f
                .try_clone()
                .map_err(|e| Error::os("OOM notifier: dup of memory.oom_control", &e))?;
            Ok(Kind::Oom { control })
        })
    }

    /// A cgroup v1 `memory.pressure_level` listener for `level` in `mode`.
    pub fn pressure_level(cg: &Cgroup, level: Level, mode: Mode) -> Result<Watch> {
        let dir = cg.need_v1("a memory.pressure_level listener")?;
        let args = match mode {
            Mode::Default => level.as_str().to_string(),
            m => format!("{},{}", level.as_str(), m.as_str()),
        };
        Watch::register_v1(
            dir,
            "memory.pressure_level",
            &args,
            "memory.pressure_level listener",
            |_| Ok(Kind::Pressure { level, mode }),
        )
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
            return Err(Error::new(
                ErrorKind::Permission,
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
                Some(libc::ENOENT) if !Path::new("/proc/pressure").exists() => Error::no_psi(
                    "this kernel has no PSI (no /proc/pressure: CONFIG_PSI is off, or psi=0 on \
                     the kernel command line)",
                ),
                Some(libc::ENOENT) => match cg.and_then(Cgroup::v2_dir) {
                    Some(dir) if !dir.is_dir() => Error::no_cgroup(format!(
                        "no such cgroup: {} does not exist (removed?)",
                        dir.display()
                    )),
                    _ => Error::no_psi(format!(
                        "{} does not exist: per-cgroup PSI is disabled (cgroup.pressure 0 or \
                         cgroup_disable=pressure)",
                        path.display()
                    )),
                },
                Some(libc::ENODEV) => {
                    Error::no_cgroup(format!("no such cgroup: {} was removed", path.display()))
                }
                _ => Error::os(format!("PSI trigger: opening {}", path.display()), &e),
            })?;
        let spec = trigger.spec();
        // The NUL matters for /proc/pressure: the kernel overwrites the
        // last byte written with one.
        let bytes = format!("{spec}\0");
        match (&file).write(bytes.as_bytes()) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                return Err(Error::no_psi(format!(
                    "PSI trigger \"{spec}\" on {}: the kernel has PSI disabled (psi=0)",
                    path.display()
                )))
            }
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => {
                return Err(Error::no_cgroup(format!(
                    "no such cgroup: {} was removed",
                    path.display()
                )))
            }
            Err(e) => {
                return Err(Error::os(
                    format!("PSI trigger \"{spec}\" on {}", path.display()),
                    &e,
                ))
            }
        }
        Ok(Watch {
            poll: PollFd::File(file),
            probe: None,
            kind: Kind::Psi { trigger },
            spec: format!("{}:{spec}", path.display()),
            removed: false,
        })
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
            return Err(Error::invalid(format!(
                "\"{name}\" is not the name of a file of the cgroup directory"
            )));
        }
        let dir = cg.need_v2(&format!("watching {name}"))?;
        let path = dir.join(name);
        let file = open_read(&path).map_err(|e| match e.raw_os_error() {
            Some(libc::ENOENT) if !dir.is_dir() => Error::no_cgroup(format!(
                "no such cgroup: {} does not exist (removed?)",
                dir.display()
            )),
            Some(libc::ENOENT) if name.starts_with("memory.") => Error::no_controller(format!(
                "{} does not exist: the memory controller is not enabled for this cgroup2 \
                 cgroup (enable it in the parent's cgroup.subtree_control; the root cgroup has \
                 no {name}; on a hybrid system the memory controller may be bound to cgroup v1)",
                path.display()
            )),
            Some(libc::ENOENT) => {
                Error::no_controller(format!("{} does not exist", path.display()))
            }
            _ => Error::os(format!("opening {}", path.display()), &e),
        })?;
        let last = parse_flat_keyed(
            &read_all(&file).map_err(|e| Error::os(format!("reading {}", path.display()), &e))?,
        );
        let epoll = Epoll::new().map_err(|e| Error::os("epoll", &e))?;
        epoll
            .add(file.as_raw_fd(), events::PRI, 0)
            .map_err(|e| Error::os(format!("polling {}", path.display()), &e))?;
        // The root cgroup, which has no parent here, cannot be removed. If
        // inotify is out of watches, removal is seen at the next change.
        let inotify = dir.parent().and_then(|parent| {
            let fd = sys::inotify_new().ok()?;
            let mask = libc::IN_DELETE | libc::IN_DELETE_SELF | libc::IN_MOVED_FROM;
            sys::inotify_watch(fd.as_raw_fd(), parent, mask).ok()?;
            epoll.add(fd.as_raw_fd(), events::IN, 1).ok()?;
            Some(File::from(fd))
        });
        Ok(Watch {
            poll: PollFd::Epoll(epoll),
            probe: None,
            kind: Kind::Counters {
                name: name.to_string(),
                file,
                inotify,
                last,
                deltas: Vec::new(),
            },
            spec: path.display().to_string(),
            removed: false,
        })
    }

    /// The fd to poll.
    pub fn fd(&self) -> RawFd {
        self.poll.raw()
    }

    /// The poll events to wait for ([`events::IN`] for the v1 eventfds and
    /// counters watches, [`events::PRI`] for PSI files).
    pub fn interest(&self) -> u32 {
        match self.poll {
            PollFd::Event(_) | PollFd::Epoll(_) => events::IN,
            PollFd::File(_) => events::PRI,
        }
    }

    /// What was registered: the control file and its arguments, e.g.
    /// "/sys/fs/cgroup/memory/x/memory.usage_in_bytes:16777216" or
    /// "/proc/pressure/memory:some 150000 2000000".
    pub fn spec(&self) -> &str {
        &self.spec
    }

    /// Whether the cgroup was seen removed (`MemEvent::Removed` was
    /// returned); the watch reports nothing after that.
    pub fn is_removed(&self) -> bool {
        self.removed
    }

    /// Handles a wake-up with poll flags `revents`: returns its event, or
    /// `None` if there was nothing (a spurious wake-up, or nothing changed).
    pub fn read(&mut self, revents: u32) -> io::Result<Option<MemEvent<'_>>> {
        if self.removed {
            return Ok(None);
        }
        match &mut self.poll {
            PollFd::Event(efd) => {
                let count = efd.read()?;
                if count == 0 {
                    return Ok(None);
                }
                let probe = self.probe.as_ref().map(read_all);
                let usage = match probe {
                    Some(Err(e)) if e.raw_os_error() == Some(libc::ENODEV) => {
                        self.removed = true;
                        return Ok(Some(MemEvent::Removed { count }));
                    }
                    Some(Ok(s)) => s.trim().parse().unwrap_or(0),
                    _ => 0,
                };
                Ok(Some(match &self.kind {
                    Kind::Threshold { bytes } => MemEvent::Threshold {
                        count,
                        threshold: *bytes,
                        usage,
                    },
                    Kind::Oom { control } => {
                        let fields = read_all(control)
                            .map(|s| parse_flat_keyed(&s))
                            .unwrap_or_default();
                        let get = |k: &str| fields.iter().find(|(n, _)| n == k).map(|(_, v)| *v);
                        MemEvent::Oom {
                            count,
                            under_oom: get("under_oom").unwrap_or(0) != 0,
                            oom_kill: get("oom_kill").unwrap_or(0),
                        }
                    }
                    Kind::Pressure { level, mode } => MemEvent::Pressure {
                        count,
                        level: *level,
                        mode: *mode,
                    },
                    _ => return Ok(None),
                }))
            }
            PollFd::File(_) | PollFd::Epoll(_) => match &mut self.kind {
                Kind::Psi { trigger } => {
                    if revents & events::ERR != 0 {
                        // The kernel's PSI file reports POLLERR only when its
                        // trigger is gone: the cgroup was removed.
                        self.removed = true;
                        return Ok(Some(MemEvent::Removed { count: 0 }));
                    }
                    if revents & events::PRI == 0 {
                        return Ok(None);
                    }
                    Ok(Some(MemEvent::Psi { trigger }))
                }
                Kind::Counters {
                    name,
                    file,
                    inotify,
                    last,
                    deltas,
                } => {
                    if let Some(inotify) = inotify {
                        drain(inotify);
                    }
                    // POLLPRI (with POLLERR) says the file changed; reading it
                    // through this open file re-arms the notification. A
                    // read failing with ENODEV says the cgroup is gone.
                    let text = match read_all(file) {
                        Ok(t) => t,
                        Err(e) if e.raw_os_error() == Some(libc::ENODEV) => {
                            self.removed = true;
                            return Ok(Some(MemEvent::Removed { count: 0 }));
                        }
                        Err(e) => return Err(e),
                    };
                    let now = parse_flat_keyed(&text);
                    *deltas = diff(last, &now);
                    *last = now;
                    if deltas.is_empty() {
                        return Ok(None);
                    }
                    Ok(Some(MemEvent::Changed { file: name, deltas }))
                }
                _ => Ok(None),
            },
        }
    }
}

// --- Loop sources ------------------------------------------------------------

impl Loop {
    /// Adds `watch` as a source: `cb` runs once per wake-up with its event.
    /// After `MemEvent::Removed` the source is disabled. The source owns the
    /// watch (removing the source unregisters it).
    pub fn add_watch(
        &self,
        mut watch: Watch,
        mut cb: impl FnMut(&Loop, SourceId, MemEvent<'_>) -> crate::Result<()> + Send + 'static,
    ) -> Result<SourceId> {
        let (fd, interest) = (watch.fd(), watch.interest());
        let id = self.add_fd(fd, interest, move |lp, id, ev| {
            let Event::Fd(revents) = ev else {
                return Ok(());
            };
            if watch.is_removed() {
                // Re-enabled after its removal: the fd of a PSI or counters
                // watch stays ready, so disable it again rather than spin.
                let _ = lp.set_enabled(id, false);
                return Ok(());
            }
            let Some(mev) = watch.read(revents)? else {
                return Ok(());
            };
            let removed = mev.is_removed();
            cb(lp, id, mev)?;
            if removed {
                // Its fd would stay ready (PSI, counters) or mean nothing
                // more (v1): nothing follows a removal.
                let _ = lp.set_enabled(id, false);
            }
            Ok(())
        })?;
        Ok(id)
    }

    /// Calls back each time `cg`'s memory usage crosses `bytes`, up or down,
    /// with the number of crossings since the last call (cgroup v1).
    pub fn add_memory_threshold(
        &self,
        cg: &Cgroup,
        bytes: u64,
        cb: impl FnMut(&Loop, SourceId, MemEvent<'_>) -> crate::Result<()> + Send + 'static,
    ) -> Result<SourceId> {
        self.add_watch(Watch::threshold(cg, bytes)?, cb)
    }

    /// Calls back each time `cg` hits its memory limit (cgroup v1
    /// `memory.oom_control`), with the count since the last call.
    pub fn add_oom(
        &self,
        cg: &Cgroup,
        cb: impl FnMut(&Loop, SourceId, MemEvent<'_>) -> crate::Result<()> + Send + 'static,
    ) -> Result<SourceId> {
        self.add_watch(Watch::oom(cg)?, cb)
    }

    /// Calls back on `memory.pressure_level` notifications for `level` in
    /// `mode` (cgroup v1), with the count since the last call.
    pub fn add_pressure_level(
        &self,
        cg: &Cgroup,
        level: Level,
        mode: Mode,
        cb: impl FnMut(&Loop, SourceId, MemEvent<'_>) -> crate::Result<()> + Send + 'static,
    ) -> Result<SourceId> {
        self.add_watch(Watch::pressure_level(cg, level, mode)?, cb)
    }

    /// Calls back each time PSI trigger `trigger` fires on `cg`'s
    /// `memory.pressure` (cgroup2), or system-wide when `cg` is `None`.
    pub fn add_psi_trigger(
        &self,
        cg: Option<&Cgroup>,
        trigger: PsiTrigger,
        cb: impl FnMut(&Loop, SourceId, MemEvent<'_>) -> crate::Result<()> + Send + 'static,
    ) -> Result<SourceId> {
        self.add_watch(Watch::psi(cg, trigger)?, cb)
    }

    /// Calls back when `cg`'s cgroup2 `memory.events` counters change, with
    /// the counters that changed and by how much.
    pub fn add_memory_events(
        &self,
        cg: &Cgroup,
        cb: impl FnMut(&Loop, SourceId, MemEvent<'_>) -> crate::Result<()> + Send + 'static,
    ) -> Result<SourceId> {
        self.add_watch(Watch::memory_events(cg)?, cb)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID_MOUNTS: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn resolves_a_hybrid_system() {
        let cg = resolve("4:memory:/process_api/abc\n1:cpu:/\n0::/\n", HYBRID_MOUNTS).unwrap();
        assert_eq!(
            cg.v1_dir(),
            Some(Path::new("/sys/fs/cgroup/memory/process_api/abc"))
        );
        assert_eq!(cg.v2_dir(), Some(Path::new("/sys/fs/cgroup/unified")));
    }

    #[test]
    fn resolves_pure_v2_and_mount_roots() {
        let mounts = "30 23 0:26 / /sys/fs/cgroup rw shared:4 - cgroup2 cgroup2 rw,nsdelegate\n";
        let cg = resolve("0::/user.slice/user-0.slice\n", mounts).unwrap();
        assert_eq!(cg.v1_dir(), None);
        assert_eq!(
            cg.v2_dir(),
            Some(Path::new("/sys/fs/cgroup/user.slice/user-0.slice"))
        );
        // A container that sees its own cgroup mounted (root = its path).
        let mounts = "40 31 0:32 /docker/x /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory\n";
        let cg = resolve("9:memory:/docker/x\n", mounts).unwrap();
        assert_eq!(cg.v1_dir(), Some(Path::new("/sys/fs/cgroup/memory")));
        // "/docker/x" does not contain "/docker/xy".
        assert!(resolve("9:memory:/docker/xy\n", mounts).is_err());
        // Escaped mount points.
        let mounts = "40 31 0:32 / /mnt/my\\040cg - cgroup2 cgroup2 rw\n";
        let cg = resolve("0::/a\n", mounts).unwrap();
        assert_eq!(cg.v2_dir(), Some(Path::new("/mnt/my cg/a")));
    }

    #[test]
    fn unmounted_controllers_are_enodev() {
        let e = resolve("4:memory:/a\n", "31 23 0:28 / /sys rw - sysfs sysfs rw\n").unwrap_err();
        assert_eq!(
            (e.kind(), e.errno()),
            (ErrorKind::NoController, libc::ENODEV)
        );
        assert!(
            e.to_string().contains("memory controller is not mounted"),
            "{e}"
        );
        let e = resolve("1:cpu:/\n", HYBRID_MOUNTS).unwrap_err();
        assert_eq!(e.errno(), libc::ENODEV);
    }

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

    #[test]
    fn unescapes_mountinfo() {
        assert_eq!(unescape("a\\040b\\011c"), "a b\tc");
        assert_eq!(unescape("plain\\"), "plain\\");
        assert_eq!(unescape("x\\04"), "x\\04");
    }
}
