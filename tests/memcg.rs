// SPDX-License-Identifier: MIT OR Apache-2.0
//! The real test of the memory-pressure sources: a child process allocates
//! inside a fresh child cgroup and the kernel's notifications are asserted
//! with their counts.
//!
//! cgroup v1 (where the memory controller is mounted and writable): a
//! threshold and an OOM watcher and a memory.pressure_level listener on a
//! new child cgroup with a 40 MiB limit and the OOM killer disabled. The
//! allocating child (this test binary re-run as `memcg_hog_helper`, moved
//! into the cgroup through cgroup.procs) reports its progress through its
//! stdout pipe:
//!
//! 1. it allocates 24 MiB: exactly one threshold crossing (16 MiB), count 1;
//! 2. it allocates on into the limit: exactly one OOM notification, count 1,
//!    with under_oom set (it sleeps in the kernel's OOM wait), and at least
//!    one pressure notification; where cgroup2 is mounted too, the child is
//!    also in a cgroup2 child cgroup with a PSI trigger, which fires;
//! 3. it is killed: its memory is freed, one more crossing (down), count 1;
//! 4. the cgroups are removed: every source reports the removal once.
//!
//! Also on cgroup2: the flat-keyed counters plumbing (cgroup.events'
//! populated 0 -> 1 -> 0 as named deltas), which is what memory.events uses.
//!
//! No sleeps: the child's progress comes through a pipe, and each kernel
//! notification is waited for with the loop, whose timeout is only a hang
//! guard. The child cgroups are removed even when an assertion fails.
//! Where cgroups are not writable the test prints why it skips.

mod fds;

use std::fs;
use std::io::{self, BufRead, Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use eventq::memcg::{Cgroup, Level, MemEvent, Mode, PsiTrigger, Watch};
use eventq::{Event, Loop, SourceId};
use parking_lot::Mutex;

const MIB: u64 = 1 << 20;
/// Only a hang guard: every wait ends as soon as its event is there.
const HANG_GUARD: Duration = Duration::from_secs(60);

/// Prints past libtest's capture, so a skip is visible in `cargo test`.
fn say(msg: &str) {
    let _ = writeln!(io::stderr(), "memcg: {msg}");
}

/// Not a test: the allocating child of `v1_threshold_oom_pressure_psi`,
/// active only when that test runs this binary with EVENTQ_MEMCG_HOG set.
/// Commands on stdin: "alloc <MiB>" touches memory up to that total, then
/// answers "HOG at <MiB>"; EOF exits. The memory is reserved whole before
/// the child joins the cgroup, so every charge after that is a page fault:
/// a charge in a syscall (mmap's own kernel memory) at the limit fails
/// with ENOMEM instead of entering the OOM wait, and the child would abort
/// before the OOM notification.
#[test]
fn memcg_hog_helper() {
    if std::env::var_os("EVENTQ_MEMCG_HOG").is_none() {
        return;
    }
    const MAX: usize = 128 * MIB as usize;
    // Large enough for malloc to map it, untouched until resized.
    let mut held: Vec<u8> = Vec::with_capacity(MAX);
    println!("HOG ready {}", std::process::id());
    for line in io::stdin().lock().lines() {
        let line = line.unwrap();
        let Some(mib) = line.strip_prefix("alloc ") else {
            continue;
        };
        let want: usize = mib.trim().parse().unwrap();
        // Writes every byte, so every page is charged.
        held.resize(held.len().max((want * MIB as usize).min(MAX)), 1);
        println!("HOG at {}", held.len() / MIB as usize);
    }
}

static NEXT: AtomicUsize = AtomicUsize::new(0);

fn unique_name() -> String {
    format!(
        "eventq-test-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Removes empty test cgroups left in `parent` by runs that were killed
/// before their cleanup ran (named eventq-test-<pid>-<n>, with <pid> gone).
fn sweep_stale(parent: &Path) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("eventq-test-")
            .and_then(|rest| rest.split('-').next())
        else {
            continue;
        };
        if !Path::new("/proc").join(pid).exists()
            && read_file(&entry.path().join("cgroup.procs"))
                .trim()
                .is_empty()
        {
            let _ = fs::remove_dir(entry.path());
        }
    }
}

/// Child cgroups made by a test and the allocating child; dropping it kills
/// and reaps the child and removes the cgroups, also after a failure.
#[derive(Default)]
struct Fixture {
    dirs: Vec<PathBuf>,
    hog: Option<Hog>,
}

impl Fixture {
    /// Makes a child cgroup of `parent`, or says why not.
    fn mkdir(&mut self, parent: &Path) -> Result<PathBuf, String> {
        sweep_stale(parent);
        let dir = parent.join(unique_name());
        fs::create_dir(&dir).map_err(|e| {
            format!(
                "cannot create a child cgroup in {}: {e} (needs root or a delegated cgroup)",
                parent.display()
            )
        })?;
        self.dirs.push(dir.clone());
        Ok(dir)
    }

    fn kill_hog(&mut self) {
        if let Some(mut hog) = self.hog.take() {
            let _ = hog.child.kill();
            let _ = hog.child.wait();
        }
    }

    fn remove_dirs(&mut self) -> io::Result<()> {
        self.kill_hog();
        let mut res = Ok(());
        while let Some(d) = self.dirs.pop() {
            if let Err(e) = fs::remove_dir(&d) {
                res = Err(e);
            }
        }
        res
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if let Err(e) = self.remove_dirs() {
            say(&format!("cleanup: could not remove a child cgroup: {e}"));
        }
    }
}

/// The allocating child and its pipes.
struct Hog {
    child: Child,
    stdin: ChildStdin,
    stdout: ChildStdout,
    /// Bytes read from stdout and not yet consumed.
    pending: Vec<u8>,
}

impl Hog {
    fn spawn() -> Hog {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "memcg_hog_helper",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("EVENTQ_MEMCG_HOG", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit()) // a child that fails says why
            .spawn()
            .expect("spawn the allocating child");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        Hog {
            child,
            stdin,
            stdout,
            pending: Vec::new(),
        }
    }

    /// What follows `prefix` in the child's next line that has it
    /// (libtest's own output, which may start the same line, is skipped).
    /// The pipe is polled with the hang guard, so a silent child fails the
    /// test instead of hanging it.
    fn expect(&mut self, prefix: &str) -> String {
        loop {
            while let Some(nl) = self.pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=nl).collect();
                let line = String::from_utf8_lossy(&line);
                if let Some(at) = line.find(prefix) {
                    return line[at + prefix.len()..].trim().to_string();
                }
            }
            let fd = self.stdout.as_raw_fd();
            let ready = fds::poll_fd(fd, libc::POLLIN, Some(HANG_GUARD)).unwrap();
            assert!(
                ready != 0,
                "the allocating child said nothing within the hang guard"
            );
            let mut buf = [0u8; 4096];
            let n = self.stdout.read(&mut buf).unwrap();
            assert!(
                n > 0,
                "the allocating child exited before saying {prefix:?}"
            );
            self.pending.extend_from_slice(&buf[..n]);
        }
    }

    fn send(&mut self, cmd: &str) {
        writeln!(self.stdin, "{cmd}").unwrap();
    }
}

fn write_file(path: &Path, value: &str) -> io::Result<()> {
    fs::write(path, value)
}

fn read_file(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_default()
}

/// What the sources reported, tagged with the source's name.
#[derive(Debug, Clone, PartialEq)]
enum Rec {
    Threshold { count: u64, usage: u64 },
    Oom { count: u64, under_oom: bool },
    Pressure { count: u64 },
    Psi,
    Changed(Vec<(String, u64, i64)>),
    Removed(&'static str),
}

type Log = Arc<Mutex<Vec<Rec>>>;

fn recorder(
    log: &Log,
    name: &'static str,
) -> impl FnMut(&Loop, SourceId, Event<'_>) -> eventq::Result<()> + Send + 'static {
    let log = log.clone();
    move |_, _, ev| {
        let Event::Memory(ev) = ev else {
            panic!("{name}: not a memory event: {ev:?}");
        };
        let rec = match ev {
            MemEvent::Threshold { count, usage, .. } => Rec::Threshold { count, usage },
            MemEvent::Oom {
                count, under_oom, ..
            } => Rec::Oom { count, under_oom },
            MemEvent::Pressure { count, .. } => Rec::Pressure { count },
            MemEvent::Psi { .. } => Rec::Psi,
            MemEvent::Changed { deltas, .. } => Rec::Changed(
                deltas
                    .into_iter()
                    .map(|d| (d.name, d.value, d.delta))
                    .collect(),
            ),
            MemEvent::Removed { .. } => Rec::Removed(name),
            other => panic!("{name}: a memory event of a kind this test does not know: {other:?}"),
        };
        log.lock().push(rec);
        Ok(())
    }
}

/// Runs the loop until `done` holds; the deadline is only a hang guard.
fn run_until(lp: &Loop, what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < HANG_GUARD,
            "no {what} from the kernel within the hang guard"
        );
        lp.run_once(Some(Duration::from_millis(500))).unwrap();
    }
}

fn how_many(log: &Log, f: impl Fn(&Rec) -> bool) -> usize {
    log.lock().iter().filter(|r| f(r)).count()
}

#[test]
fn v1_threshold_oom_pressure_psi() {
    let own = match Cgroup::own() {
        Ok(cg) => cg,
        Err(e) => return say(&format!("SKIP v1 test: no memory cgroup: {e}")),
    };
    let Some(v1_parent) = own.v1_dir() else {
        return say("SKIP v1 test: the cgroup v1 memory controller is not mounted here");
    };
    let mut fx = Fixture::default();
    let v1 = match fx.mkdir(v1_parent) {
        Ok(d) => d,
        Err(why) => return say(&format!("SKIP v1 test: {why}")),
    };
    write_file(&v1.join("memory.limit_in_bytes"), &(40 * MIB).to_string())
        .expect("set memory.limit_in_bytes");
    // The child then waits in the kernel's OOM handling instead of being
    // killed: exactly one OOM notification, and under_oom observable.
    write_file(&v1.join("memory.oom_control"), "1").expect("set oom_kill_disable");

    let cg = Cgroup::at(&v1).unwrap();
    assert_eq!(cg.v1_dir(), Some(v1.as_path()));
    let lp = Loop::new().unwrap();
    let log: Log = Arc::default();
    let threshold = 16 * MIB;
    let watches = [
        ("threshold", Watch::threshold(&cg, threshold)),
        ("oom", Watch::oom(&cg)),
        (
            "pressure",
            Watch::pressure_level(&cg, Level::Low, Mode::Default),
        ),
    ];
    for (name, watch) in watches {
        lp.add_watch(watch.unwrap(), recorder(&log, name)).unwrap();
    }

    // cgroup2 as well where it is mounted (hybrid): a PSI trigger on a child
    // cgroup the allocating child also joins, and its cgroup.events.
    let mut v2: Option<V2> = None;
    if let Some(v2_parent) = own.v2_dir() {
        match fx.mkdir(v2_parent) {
            Ok(dir) => {
                let cg2 = Cgroup::at(&dir).unwrap();
                let log2: Log = Arc::default();
                // 2 s: the window the kernel allows without CAP_SYS_RESOURCE.
                let trig = PsiTrigger::some(Duration::from_micros(1), Duration::from_secs(2));
                let psi = match Watch::psi(Some(&cg2), trig) {
                    Ok(w) => {
                        lp.add_watch(w, recorder(&log2, "psi")).unwrap();
                        true
                    }
                    Err(e) => {
                        say(&format!("PSI part skipped: {e}"));
                        false
                    }
                };
                lp.add_watch(
                    Watch::counters(&cg2, "cgroup.events").unwrap(),
                    recorder(&log2, "cgroup.events"),
                )
                .unwrap();
                v2 = Some(V2 {
                    dir,
                    log: log2,
                    psi,
                });
            }
            Err(why) => say(&format!("cgroup2 part skipped: {why}")),
        }
    }

    // The allocating child joins the cgroups, then allocates past 16 MiB.
    fx.hog = Some(Hog::spawn());
    let hog = fx.hog.as_mut().unwrap();
    let pid = hog.expect("HOG ready");
    write_file(&v1.join("cgroup.procs"), &pid).expect("move the child into the v1 cgroup");
    if let Some(v2) = &v2 {
        write_file(&v2.dir.join("cgroup.procs"), &pid).expect("move the child into the v2 cgroup");
    }
    hog.send("alloc 24");
    assert_eq!(hog.expect("HOG at"), "24");

    // 1. One crossing, counted once.
    run_until(&lp, "threshold notification", || {
        how_many(&log, |r| matches!(r, Rec::Threshold { .. })) > 0
    });
    let recs = log.lock().clone();
    let [Rec::Threshold { count, usage }] = recs
        .iter()
        .filter(|r| matches!(r, Rec::Threshold { .. }))
        .cloned()
        .collect::<Vec<_>>()[..]
    else {
        panic!("expected one threshold event, got {recs:?}");
    };
    assert_eq!(count, 1, "one crossing of 16 MiB: {recs:?}");
    assert!(usage >= threshold, "usage {usage} after crossing up");
    assert!(
        !recs.iter().any(|r| matches!(r, Rec::Oom { .. })),
        "{recs:?}"
    );

    // 2. Into the limit: the child now sleeps in the kernel's OOM wait.
    hog.send("alloc 64");
    run_until(&lp, "OOM notification", || {
        how_many(&log, |r| matches!(r, Rec::Oom { .. })) > 0
    });
    run_until(&lp, "memory.pressure_level notification", || {
        how_many(&log, |r| matches!(r, Rec::Pressure { .. })) > 0
    });
    let oom: Vec<Rec> = log
        .lock()
        .iter()
        .filter(|r| matches!(r, Rec::Oom { .. }))
        .cloned()
        .collect();
    assert_eq!(
        oom,
        [Rec::Oom {
            count: 1,
            under_oom: true
        }]
    );
    assert!(read_file(&v1.join("memory.oom_control")).contains("under_oom 1"));
    if let Some(v2) = &v2 {
        // cgroup.events: populated went 0 -> 1 when the child joined.
        let populated = Rec::Changed(vec![("populated".into(), 1, 1)]);
        run_until(&lp, "cgroup.events change", || {
            v2.log.lock().contains(&populated)
        });
        if v2.psi {
            // The reclaim before the OOM stalled the child: the trigger
            // fires at the kernel's next aggregation (every 2 s).
            run_until(&lp, "PSI trigger event", || {
                v2.log.lock().contains(&Rec::Psi)
            });
        }
    }

    // 3. Killed and reaped: its memory is uncharged, one crossing down.
    fx.kill_hog();
    run_until(&lp, "threshold crossing down", || {
        how_many(&log, |r| matches!(r, Rec::Threshold { .. })) > 1
    });
    let downs: Vec<Rec> = log
        .lock()
        .iter()
        .filter(|r| matches!(r, Rec::Threshold { .. }))
        .skip(1)
        .cloned()
        .collect();
    let [Rec::Threshold { count, usage }] = downs[..] else {
        panic!("expected one more threshold event, got {downs:?}");
    };
    assert_eq!(count, 1, "one crossing down");
    assert!(usage < threshold, "usage {usage} after the child exited");
    if let Some(v2) = &v2 {
        let unpopulated = Rec::Changed(vec![("populated".into(), 0, -1)]);
        run_until(&lp, "cgroup.events change", || {
            v2.log.lock().contains(&unpopulated)
        });
    }

    // 4. Removal: each source reports it once, then is disabled.
    fx.remove_dirs().expect("remove the child cgroups");
    run_until(&lp, "removal notifications", || {
        how_many(&log, |r| matches!(r, Rec::Removed(_))) == 3
    });
    if let Some(v2) = &v2 {
        let want = if v2.psi { 2 } else { 1 };
        run_until(&lp, "cgroup2 removal notifications", || {
            how_many(&v2.log, |r| matches!(r, Rec::Removed(_))) == want
        });
    }
    // Nothing more: the sources are disabled (a few iterations to show it).
    for _ in 0..3 {
        lp.run_once(Some(Duration::ZERO)).unwrap();
    }
    let recs = log.lock().clone();
    let crossings: u64 = recs
        .iter()
        .map(|r| match r {
            Rec::Threshold { count, .. } => *count,
            _ => 0,
        })
        .sum();
    assert_eq!(crossings, 2, "{recs:?}");
    for name in ["threshold", "oom", "pressure"] {
        assert_eq!(
            recs.iter().filter(|r| **r == Rec::Removed(name)).count(),
            1,
            "{name}: {recs:?}"
        );
    }
    say(&format!(
        "v1 test: {} events (threshold, OOM, pressure){}",
        recs.len(),
        match &v2 {
            Some(v2) => format!("; cgroup2: {:?}", v2.log.lock()),
            None => String::new(),
        }
    ));
}

/// The cgroup2 side of the test: its child cgroup, what its sources
/// reported, and whether the PSI trigger could be added.
struct V2 {
    dir: PathBuf,
    log: Log,
    psi: bool,
}
