// SPDX-License-Identifier: MIT OR Apache-2.0
//! The memory-pressure API without a memory hog: how cgroups are found,
//! every error code with its reason, PSI trigger registration (system-wide
//! and on a cgroup), and removal of a cgroup under registered sources (each
//! reports it once, then is disabled).
//!
//! Parts that need something this machine lacks print why they are skipped.
//! No sleeps; the loop's timeout is only a hang guard.

mod fds;

use std::fs;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use eventq::event_loop::events;
use eventq::memcg::{Cgroup, Level, MemEvent, Mode, PsiTrigger, Watch};
use eventq::{Error, Event, Loop};
use parking_lot::Mutex;

const HANG_GUARD: Duration = Duration::from_secs(60);

fn say(msg: &str) {
    let _ = writeln!(io::stderr(), "memcg_api: {msg}");
}

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// A child cgroup of `parent`, removed on drop (if still there).
struct TempCgroup(PathBuf);

impl TempCgroup {
    fn new(parent: &Path) -> Result<TempCgroup, String> {
        let dir = parent.join(format!(
            "eventq-test-{}-api{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        fs::create_dir(&dir)
            .map(|()| TempCgroup(dir))
            .map_err(|e| format!("cannot create a child cgroup in {}: {e}", parent.display()))
    }
}

impl Drop for TempCgroup {
    fn drop(&mut self) {
        let _ = fs::remove_dir(&self.0);
    }
}

fn own() -> Option<Cgroup> {
    match Cgroup::own() {
        Ok(cg) => Some(cg),
        Err(e) => {
            say(&format!("SKIP: no memory cgroup: {e}"));
            None
        }
    }
}

fn run_until(lp: &Loop, what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < HANG_GUARD,
            "no {what} within the hang guard"
        );
        lp.run_once(Some(Duration::from_millis(500))).unwrap();
    }
}

#[test]
fn own_cgroup_matches_proc_self_cgroup() {
    let Some(cg) = own() else { return };
    let text = fs::read_to_string("/proc/self/cgroup").unwrap();
    if let Some(dir) = cg.v1_dir() {
        let line = text
            .lines()
            .find(|l| {
                l.split(':')
                    .nth(1)
                    .is_some_and(|c| c.split(',').any(|c| c == "memory"))
            })
            .expect("a memory line in /proc/self/cgroup");
        let path = line.splitn(3, ':').nth(2).unwrap();
        assert!(
            dir.to_string_lossy().ends_with(path.trim_end_matches('/')),
            "{} does not end with {path}",
            dir.display()
        );
        assert!(dir.join("memory.usage_in_bytes").exists());
        assert_eq!(Cgroup::at(dir).unwrap().v1_dir(), Some(dir));
    }
    if let Some(dir) = cg.v2_dir() {
        assert!(dir.join("cgroup.controllers").exists());
        assert_eq!(Cgroup::at(dir).unwrap().v2_dir(), Some(dir));
    }
    let me = Cgroup::of_pid(std::process::id()).unwrap();
    assert_eq!(me, cg);
}

#[test]
fn no_such_cgroup_is_enoent() {
    let e = Cgroup::at("/nonexistent/eventq").unwrap_err();
    assert!(
        matches!(&e, Error::Os { errno, message }
            if *errno == libc::ENOENT && message.contains("/nonexistent/eventq")),
        "{e:?}"
    );
    assert_eq!(e.errno(), libc::ENOENT);
    assert!(e.to_string().contains("no such cgroup"), "{e}");
    // A directory that is not a cgroup, and a file.
    let e = Cgroup::at(std::env::temp_dir()).unwrap_err();
    assert_eq!(e.errno(), libc::ENOENT, "{e}");
    assert!(e.to_string().contains("not a cgroup directory"), "{e}");
    let e = Cgroup::at("/proc/self/status").unwrap_err();
    assert_eq!(e.errno(), libc::ENOENT, "{e}");
    // No such process.
    let e = Cgroup::of_pid(u32::MAX).unwrap_err();
    assert_eq!(e.errno(), libc::ENOENT, "{e}");
}

#[test]
fn a_hierarchy_without_the_memory_controller_is_enodev() {
    let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap();
    // A cgroup v1 mount of another controller, e.g. /sys/fs/cgroup/cpu.
    let other = mounts.lines().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        let sep = f.iter().position(|x| *x == "-")?;
        (f.get(sep + 1) == Some(&"cgroup") && !f.get(sep + 3)?.split(',').any(|o| o == "memory"))
            .then(|| PathBuf::from(f[4]))
    });
    let Some(dir) = other else {
        return say("SKIP: no cgroup v1 hierarchy without the memory controller is mounted");
    };
    let e = Cgroup::at(&dir).unwrap_err();
    assert_eq!(e.errno(), libc::ENODEV);
    assert!(
        e.to_string().contains("without the memory controller"),
        "{e}"
    );
}

#[test]
fn each_version_refuses_the_other_ones_interfaces_with_enodev() {
    let Some(cg) = own() else { return };
    if let Some(v2) = cg.v2_dir() {
        let v2_only = Cgroup::at(v2).unwrap();
        for e in [
            Watch::threshold(&v2_only, 1).unwrap_err(),
            Watch::oom(&v2_only).unwrap_err(),
            Watch::pressure_level(&v2_only, Level::Low, Mode::Default).unwrap_err(),
        ] {
            assert_eq!(e.errno(), libc::ENODEV);
            assert!(e.to_string().contains("cgroup v1 memory controller"), "{e}");
        }
    } else {
        say("cgroup2 part skipped: cgroup2 is not mounted");
    }
    if let Some(v1) = cg.v1_dir() {
        let v1_only = Cgroup::at(v1).unwrap();
        let trig = PsiTrigger::some(Duration::from_millis(100), Duration::from_secs(2));
        for e in [
            Watch::memory_events(&v1_only).unwrap_err(),
            Watch::psi(Some(&v1_only), trig).unwrap_err(),
        ] {
            assert_eq!(e.errno(), libc::ENODEV);
            assert!(e.to_string().contains("needs a cgroup2 cgroup"), "{e}");
        }
    } else {
        say("v1 part skipped: the cgroup v1 memory controller is not mounted");
    }
}

#[test]
fn memory_events_says_whether_the_controller_is_enabled() {
    let Some(cg) = own() else { return };
    let Some(v2) = cg.v2_dir() else {
        return say("SKIP: cgroup2 is not mounted");
    };
    let child = match TempCgroup::new(v2) {
        Ok(c) => c,
        Err(why) => return say(&format!("SKIP: {why}")),
    };
    let cg = Cgroup::at(&child.0).unwrap();
    let lp = Loop::new().unwrap();
    let res = Watch::memory_events(&cg).and_then(|w| lp.add_watch(w, |_, _, _| Ok(())));
    if child.0.join("memory.events").exists() {
        res.expect("memory.events exists, so it can be watched");
    } else {
        let e = res.unwrap_err();
        assert_eq!(e.errno(), libc::ENODEV);
        assert!(
            e.to_string().contains("memory controller is not enabled"),
            "{e}"
        );
        say(&format!("memory.events absent here, as expected: {e}"));
    }
    // Not a file name of the directory.
    for bad in ["", "../memory.events", "a/b", ".."] {
        let e = Watch::counters(&cg, bad).unwrap_err();
        assert_eq!(e.errno(), libc::EINVAL, "{bad:?}: {e}");
    }
}

#[test]
fn bad_psi_triggers_are_einval() {
    let ms = Duration::from_millis;
    for trig in [
        PsiTrigger::some(ms(100), ms(400)),
        PsiTrigger::some(ms(100), ms(12_000)),
        PsiTrigger::full(Duration::ZERO, ms(2000)),
        PsiTrigger::some(ms(2500), ms(2000)),
    ] {
        let e = Watch::psi(None, trig).unwrap_err();
        assert_eq!(e.errno(), libc::EINVAL, "{trig:?}");
        assert!(e.to_string().contains("PSI trigger"), "{e}");
    }
}

fn has_cap_sys_resource() -> bool {
    fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|c| c & (1 << 24) != 0)
}

#[test]
fn system_wide_psi_trigger_registers_or_says_why_not() {
    let lp = Loop::new().unwrap();
    let trig = PsiTrigger::some(Duration::from_millis(150), Duration::from_secs(2));
    let res = Watch::psi(None, trig).and_then(|w| lp.add_watch(w, |_, _, _| Ok(())));
    if !Path::new("/proc/pressure/memory").exists() {
        let e = res.unwrap_err();
        assert_eq!(e.errno(), libc::EOPNOTSUPP, "{e}");
        return say(&format!("kernel without PSI, as reported: {e}"));
    }
    let id = res.expect("a 2 s window needs no privilege");
    // A second trigger on the same file is another open file: fine too.
    let full = PsiTrigger::full(Duration::from_millis(500), Duration::from_secs(4));
    let id2 = lp
        .add_watch(Watch::psi(None, full).unwrap(), |_, _, _| Ok(()))
        .unwrap();
    lp.run_once(Some(Duration::ZERO)).unwrap();
    lp.remove(id).unwrap();
    lp.remove(id2).unwrap();

    // A window that is not a multiple of 2 s needs CAP_SYS_RESOURCE.
    let short = PsiTrigger::some(Duration::from_millis(100), Duration::from_secs(1));
    let res = Watch::psi(None, short);
    if has_cap_sys_resource() {
        res.expect("privileged: any window from 500 ms");
    } else {
        let e = res.unwrap_err();
        assert_eq!(e.errno(), libc::EPERM);
        assert!(e.to_string().contains("CAP_SYS_RESOURCE"), "{e}");
    }
}

/// Every source of a removed cgroup reports the removal once and is then
/// disabled: v1 sources see the kernel's removal signal, PSI sees POLLERR,
/// counters files fail to read with ENODEV.
#[test]
fn removing_the_cgroup_ends_every_source_once() {
    let Some(own) = own() else { return };
    let lp = Loop::new().unwrap();
    let removed: Arc<Mutex<Vec<&'static str>>> = Arc::default();
    let others: Arc<Mutex<Vec<String>>> = Arc::default();
    let rec = |name: &'static str| {
        let (removed, others) = (removed.clone(), others.clone());
        move |_: &Loop, _, ev: Event<'_>| {
            match ev {
                Event::Memory(MemEvent::Removed { .. }) => removed.lock().push(name),
                other => others.lock().push(format!("{name}: {other:?}")),
            }
            Ok(())
        }
    };
    let mut dirs = Vec::new();
    let mut want = Vec::new();
    let mut ids = Vec::new();
    match own.v1_dir().map(TempCgroup::new) {
        Some(Ok(child)) => {
            let cg = Cgroup::at(&child.0).unwrap();
            let watches = [
                ("threshold", Watch::threshold(&cg, 1 << 30)),
                ("oom", Watch::oom(&cg)),
                (
                    "pressure",
                    Watch::pressure_level(&cg, Level::Critical, Mode::Local),
                ),
            ];
            for (name, watch) in watches {
                ids.push(lp.add_watch(watch.unwrap(), rec(name)).unwrap());
            }
            want.extend(["oom", "pressure", "threshold"]);
            dirs.push(child);
        }
        Some(Err(why)) => say(&format!("v1 part skipped: {why}")),
        None => say("v1 part skipped: the cgroup v1 memory controller is not mounted"),
    }
    match own.v2_dir().map(TempCgroup::new) {
        Some(Ok(child)) => {
            let cg = Cgroup::at(&child.0).unwrap();
            let trig = PsiTrigger::some(Duration::from_millis(100), Duration::from_secs(2));
            match Watch::psi(Some(&cg), trig) {
                Ok(w) => {
                    want.push("psi");
                    ids.push(lp.add_watch(w, rec("psi")).unwrap());
                }
                Err(e) => say(&format!("PSI part skipped: {e}")),
            }
            ids.push(
                lp.add_watch(
                    Watch::counters(&cg, "cgroup.events").unwrap(),
                    rec("events"),
                )
                .unwrap(),
            );
            want.push("events");
            dirs.push(child);
        }
        Some(Err(why)) => say(&format!("cgroup2 part skipped: {why}")),
        None => say("cgroup2 part skipped: cgroup2 is not mounted"),
    }
    if dirs.is_empty() {
        return say("SKIP: no writable cgroup");
    }
    for d in &dirs {
        fs::remove_dir(&d.0).unwrap();
    }
    want.sort_unstable();
    run_until(
        &lp,
        &format!("removal notifications (want {want:?})"),
        || removed.lock().len() >= want.len(),
    );
    for _ in 0..3 {
        lp.run_once(Some(Duration::ZERO)).unwrap();
    }
    let mut got = removed.lock().clone();
    got.sort_unstable();
    assert_eq!(got, want, "each source reports the removal exactly once");
    assert!(others.lock().is_empty(), "{:?}", others.lock());

    // Its events are the watch's: they cannot be changed.
    let e = lp.set_events(ids[0], events::IN | events::PRI).unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL, "{e}");

    // Re-enabled after the removal, a source disables itself again at its
    // next wake-up instead of making the loop spin on a ready fd.
    for id in &ids {
        lp.set_enabled(*id, true).unwrap();
    }
    lp.run_once(Some(Duration::ZERO)).unwrap();
    let again = lp.run_once(Some(Duration::ZERO)).unwrap();
    assert_eq!(again, 0, "a removed source keeps the loop busy");
    assert_eq!(removed.lock().len(), want.len(), "a second removal event");
}

/// A removed source unregisters: its fds are closed, and nothing of it
/// runs again.
#[test]
fn removed_sources_close_their_fds() {
    let Some(own) = own() else { return };
    let Some(v1) = own.v1_dir() else {
        return say("SKIP: the cgroup v1 memory controller is not mounted");
    };
    let child = match TempCgroup::new(v1) {
        Ok(c) => c,
        Err(why) => return say(&format!("SKIP: {why}")),
    };
    let cg = Cgroup::at(&child.0).unwrap();
    let count_fds = || fs::read_dir("/proc/self/fd").unwrap().count();
    let lp = Loop::new().unwrap();
    let before = count_fds();
    let id = lp
        .add_watch(Watch::threshold(&cg, 1 << 20).unwrap(), |_, _, _| Ok(()))
        .unwrap();
    assert!(count_fds() > before);
    lp.remove(id).unwrap();
    // Other tests open fds concurrently, so only a leak in bulk is asserted:
    // 200 sources of 3 fds each (an eventfd and two control files).
    let ids: Vec<_> = (0..200)
        .map(|_| {
            lp.add_watch(Watch::oom(&cg).unwrap(), |_, _, _| Ok(()))
                .unwrap()
        })
        .collect();
    for id in ids {
        lp.remove(id).unwrap();
    }
    assert!(count_fds() < before + 100, "fds leaked by removed sources");
}

/// A watch is usable without the loop: poll its fd for its interest and
/// read it on each wake-up (here a counters watch seeing its cgroup go).
#[test]
fn a_watch_can_be_polled_by_another_loop() {
    let Some(own) = own() else { return };
    let Some(v2) = own.v2_dir() else {
        return say("SKIP: cgroup2 is not mounted");
    };
    let child = match TempCgroup::new(v2) {
        Ok(c) => c,
        Err(why) => return say(&format!("SKIP: {why}")),
    };
    let mut w = Watch::counters(&Cgroup::at(&child.0).unwrap(), "cgroup.events").unwrap();
    assert_eq!(w.interest(), events::IN);
    assert!(w.spec().ends_with("/cgroup.events"), "{}", w.spec());
    let poll = |w: &Watch, timeout| fds::poll_fd(w.fd().as_raw_fd(), libc::POLLIN, Some(timeout));
    assert_eq!(poll(&w, Duration::ZERO).unwrap(), 0, "nothing happened yet");
    fs::remove_dir(&child.0).unwrap();
    assert_ne!(
        poll(&w, HANG_GUARD).unwrap(),
        0,
        "no wake-up for the removal"
    );
    assert_eq!(
        w.read(events::IN).unwrap(),
        Some(MemEvent::Removed { count: 0 })
    );
    assert!(w.is_removed());
    assert_eq!(
        w.read(events::IN).unwrap(),
        None,
        "nothing after the removal"
    );
}

/// A watch needs no loop: `wait` blocks the calling thread until its next
/// event (here a counters watch seeing its cgroup go, removed while another
/// thread waits), `AsFd` is its fd, and after the removal `wait` says
/// ENOENT. A PSI watch's `read` takes `EPOLLIN` from a caller's poll as the
/// firing that poll took from the kernel.
#[test]
fn a_watch_waits_without_a_loop() {
    use std::os::fd::AsFd;
    if Path::new("/proc/pressure/memory").exists() {
        let trig = PsiTrigger::full(Duration::from_secs(10), Duration::from_secs(10));
        let mut w = Watch::psi(None, trig).unwrap();
        assert_eq!(w.as_fd().as_raw_fd(), w.fd().as_raw_fd());
        assert_eq!(w.interest(), events::IN);
        // A full stall of 10 s in a 10 s window: nothing here comes near it.
        assert_eq!(w.wait(Some(Duration::ZERO)).unwrap(), None);
        assert_eq!(w.read(0).unwrap(), None);
        assert_eq!(
            w.read(events::IN).unwrap(),
            Some(MemEvent::Psi { trigger: trig }),
            "EPOLLIN is the firing the caller's poll took"
        );
        assert_eq!(w.read(0).unwrap(), None);
    } else {
        say("PSI part skipped: no /proc/pressure/memory");
    }
    let Some(own) = own() else { return };
    let Some(v2) = own.v2_dir() else {
        return say("SKIP: cgroup2 is not mounted");
    };
    let child = match TempCgroup::new(v2) {
        Ok(c) => c,
        Err(why) => return say(&format!("SKIP: {why}")),
    };
    let mut w = Watch::counters(&Cgroup::at(&child.0).unwrap(), "cgroup.events").unwrap();
    assert_eq!(w.wait(Some(Duration::ZERO)).unwrap(), None, "nothing yet");
    let waiter = std::thread::spawn(move || {
        let ev = w.wait(None);
        (w, ev)
    });
    fs::remove_dir(&child.0).unwrap();
    let (mut w, ev) = waiter.join().unwrap();
    assert_eq!(ev.unwrap(), Some(MemEvent::Removed { count: 0 }));
    let e = w.wait(None).unwrap_err();
    assert_eq!(e.errno(), libc::ENOENT, "{e}");
    assert!(e.to_string().contains("was removed"), "{e}");
    assert_eq!(w.read(events::IN).unwrap(), None);
}
