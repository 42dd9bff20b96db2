// SPDX-License-Identifier: MIT OR Apache-2.0
//! Memory-pressure sources: kubelet's notifications as one loop source
//! kind, each delivered per event with the kernel's count (see
//! `docs/memcg.md`).
//!
//! - **cgroup v1** (`memory` controller): a usage threshold
//!   (`memory.usage_in_bytes` registered through `cgroup.event_control`, as
//!   kubelet's `threshold_notifier_linux.go` does), OOM (`memory.oom_control`)
//!   and `memory.pressure_level`. Each is an eventfd the kernel signals; a
//!   wake-up reads its counter, which is how many notifications the kernel
//!   made since the last read: none is merged away.
//! - **cgroup v2**: PSI triggers (`"some|full <stall us> <window us>"` written
//!   into a cgroup's `memory.pressure` or `/proc/pressure/memory`, polled for
//!   `POLLPRI`), and changes of `memory.events` (or any flat-keyed notify
//!   file), whose counters are re-read and delivered as named deltas.
//!
//! A [`Cgroup`] says where (`cgroup.rs`); a [`Watch`] is one registration
//! with the kernel (`watch.rs`), made by `Watch::threshold`, `oom`,
//! `pressure_level`, `psi`, `memory_events` or `counters`.
//! [`Loop::add_watch`](crate::Loop::add_watch) makes it a source whose
//! callback gets each [`MemEvent`] as `Event::Memory`; the loop disables the
//! source after it reported its cgroup's removal. A watch needs no loop:
//! [`Watch::wait`] waits on the calling thread, and any other event loop
//! polls its fd (`fd`, `AsFd`) for `POLLIN` and calls `read` with the poll's
//! flags, the read the loop makes too.
//!
//! Errors are the crate's [`Error`], each with its errno and a
//! message naming the file or setting at fault: no such cgroup (`ENOENT`),
//! controller or interface not there (`ENODEV`), no permission
//! (`EACCES`/`EPERM`), kernel without PSI (`EOPNOTSUPP`), a bad argument
//! (`EINVAL`).

#![forbid(unsafe_code)]

use std::fmt;
use std::io;

use crate::error::Error;

mod cgroup;
mod watch;

pub use cgroup::Cgroup;
pub use watch::{
    Delta, Level, MemEvent, Mode, PsiTrigger, Watch, PSI_UNPRIVILEGED_WINDOW, PSI_WINDOW_MAX,
    PSI_WINDOW_MIN, SYSTEM_PSI,
};

/// No such cgroup: it does not exist, is not a cgroup, or was removed.
fn no_cgroup(message: impl Into<String>) -> Error {
    Error::os(libc::ENOENT, message)
}

/// The controller or interface is not there.
fn no_controller(message: impl Into<String>) -> Error {
    Error::os(libc::ENODEV, message)
}

/// The kernel has no PSI, or it is disabled.
fn no_psi(message: impl Into<String>) -> Error {
    Error::os(libc::EOPNOTSUPP, message)
}

fn invalid(message: impl Into<String>) -> Error {
    Error::os(libc::EINVAL, message)
}

/// An OS error met while doing `what`, with a hint for a permission error.
fn os_error(what: impl fmt::Display, err: &io::Error) -> Error {
    let hint = match err.raw_os_error() {
        Some(libc::EACCES | libc::EPERM) => " (no permission: run as the cgroup's owner or root)",
        _ => "",
    };
    let errno = err.raw_os_error().unwrap_or(libc::EIO);
    Error::os(errno, format!("{what}: {err}{hint}"))
}
