// SPDX-License-Identifier: MIT OR Apache-2.0
//! Cgroup discovery: which cgroup v1 `memory` directory and which cgroup2
//! directory a process (or a path) stands for, from `/proc/<pid>/cgroup`
//! and the mounts in `/proc/self/mountinfo`.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::{no_cgroup, no_controller, os_error};
use crate::error::Result;

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
    /// `ENODEV` if neither is mounted.
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
                return Err(no_cgroup(format!("no process {who} ({path})")))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(no_controller(
                    "the kernel has no cgroups (/proc/self/cgroup does not exist)",
                ))
            }
            Err(e) => return Err(os_error(format!("reading {path}"), &e)),
        };
        let mountinfo = fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| os_error("reading /proc/self/mountinfo", &e))?;
        let cg = resolve(&cgroups, &mountinfo)?;
        for dir in [&cg.v1, &cg.v2].into_iter().flatten() {
            if !dir.is_dir() {
                return Err(no_cgroup(format!(
                    "no such cgroup: {} (from /proc/{who}/cgroup) does not exist",
                    dir.display()
                )));
            }
        }
        Ok(cg)
    }

    /// The cgroup at `dir`: a directory of the cgroup v1 `memory` hierarchy
    /// (it has `memory.usage_in_bytes`) or of cgroup2 (it has
    /// `cgroup.controllers`). `ENOENT` if `dir` does not exist or is not a
    /// cgroup; `ENODEV` if it is a cgroup v1 directory of another
    /// controller's hierarchy.
    pub fn at(dir: impl AsRef<Path>) -> Result<Cgroup> {
        let dir = dir.as_ref();
        match fs::metadata(dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(no_cgroup(format!(
                    "no such cgroup: {} is not a directory",
                    dir.display()
                )))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(no_cgroup(format!(
                    "no such cgroup: {} does not exist",
                    dir.display()
                )))
            }
            Err(e) => return Err(os_error(format!("cgroup {}", dir.display()), &e)),
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
            return Err(no_controller(format!(
                "{} is a cgroup v1 directory without the memory controller \
                 (no memory.usage_in_bytes): use the memory hierarchy's directory",
                dir.display()
            )));
        }
        Err(no_cgroup(format!(
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

    pub(super) fn need_v1(&self, what: &str) -> Result<&Path> {
        self.v1.as_deref().ok_or_else(|| {
            no_controller(format!(
                "{what} needs the cgroup v1 memory controller, which is not mounted for this \
                 cgroup{}; on cgroup v2 use PSI triggers and memory.events",
                self.v2
                    .as_deref()
                    .map(|p| format!(" (cgroup2 only: {})", p.display()))
                    .unwrap_or_default()
            ))
        })
    }

    pub(super) fn need_v2(&self, what: &str) -> Result<&Path> {
        self.v2.as_deref().ok_or_else(|| {
            no_controller(format!(
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
        return Err(no_controller(why));
    }
    Ok(Cgroup { v1, v2 })
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
        assert_eq!(e.errno(), libc::ENODEV);
        assert!(
            e.to_string().contains("memory controller is not mounted"),
            "{e}"
        );
        let e = resolve("1:cpu:/\n", HYBRID_MOUNTS).unwrap_err();
        assert_eq!(e.errno(), libc::ENODEV);
    }

    #[test]
    fn unescapes_mountinfo() {
        assert_eq!(unescape("a\\040b\\011c"), "a b\tc");
        assert_eq!(unescape("plain\\"), "plain\\");
        assert_eq!(unescape("x\\04"), "x\\04");
    }
}
