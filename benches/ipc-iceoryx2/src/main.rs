// SPDX-License-Identifier: MIT OR Apache-2.0
//! bench-ipc's iceoryx2 rows: iceoryx2's publish-subscribe between
//! processes against libeventq's process-shared channel, through their
//! Rust APIs, the way `benches/ipc` (C) measures its rows: 1P1C and 4P1C
//! producer processes into one consumer process, 8-byte and 1 KiB
//! messages in bench-peers' format (`benches/peers/peers.h`: producer and
//! sequence header, checksum, trailer; the consumer checks every message:
//! exactly once, whole, in order per producer), each run a timed window
//! (`--seconds`, default 0.5, after a 0.1 s warm-up from the first
//! message), the rows interleaved over `--reps` repetitions (default 5),
//! and the ratio taken within each repetition (median and min-max).
//!
//! - libeventq: a shared channel per producer process (capacity 1024,
//!   max_msg_size = the message size), made by the consumer and exported
//!   to the producer it forks; producers block in `send`; the consumer
//!   waits on every receive fd in one epoll set (level-triggered) and
//!   drains each with `recv_batch` (64) until `WouldBlock`: the C
//!   program's "libeventq shared, epoll + recv_batch(64)" row; and the
//!   same with EPOLLET, as its EPOLLET row.
//! - iceoryx2: one publish-subscribe service of `[u8; N]` with
//!   back-pressure (no safe overflow; publishers `RetryUntilDelivered`,
//!   iceoryx2's blocking send, which waits adaptively: spins, yields,
//!   sleeps) and a subscriber buffer of 1024, plus one event service for
//!   the wake-ups: each producer process has a publisher and a notifier,
//!   and after each `send_copy` calls `notify`; the consumer waits on its
//!   listener's fd in an epoll set, takes the notifications
//!   (`try_wait`), then receives until `None`. The subscriber and listener
//!   exist before any producer creates its ports, and the consumer
//!   receives once (connecting to every publisher) before the start: a
//!   publisher whose subscriber has not connected yet drops what does not
//!   fit its queue, silently.
//!
//! `--smoke`: a fixed small count, one repetition; checks delivery only.
//! `--only TEXT`: only the runs whose "<config> <size> B <label>" contains
//! TEXT. A run with no progress for 30 s is killed and reported as a hang,
//! with the state, kernel wait channel and system call of each of its
//! threads.
//! Exits 1 if a run failed to deliver, 2 on an error of the bench.

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use eventq::{Chan, Error, Options, SharedFds, Side, Wait};
use iceoryx2::prelude::*;

const CAPACITY: usize = 1024;
const BATCH: usize = 64;
const MAX_P: usize = 4;
const SEQ_BITS: u32 = 48;
const SEQ_END: u64 = (1 << SEQ_BITS) - 1;
const WARM: Duration = Duration::from_millis(100);
const HANG: Duration = Duration::from_secs(30);

/// The page every process of a run shares with the harness.
#[repr(C, align(64))]
struct Shared {
    go: AtomicU32,
    stop: AtomicU32,
    done: AtomicU32,
    consumer_up: AtomicU32,
    ready: AtomicI32,
    sent: [AtomicU64; MAX_P],
    seen: AtomicU64,
    wakes: AtomicU64,
    error: [AtomicU64; 32], // the first fault, as text (256 bytes)
}

fn shared() -> &'static Shared {
    static mut PAGE: *const Shared = std::ptr::null();
    // SAFETY: set once in main before any fork, read only after.
    unsafe {
        if PAGE.is_null() {
            let p = libc::mmap(
                std::ptr::null_mut(),
                std::mem::size_of::<Shared>(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert!(p != libc::MAP_FAILED, "mmap failed");
            PAGE = p as *const Shared;
        }
        &*PAGE
    }
}

impl Shared {
    fn reset(&self) {
        // SAFETY: no other process of a run is alive; every field is an atomic.
        unsafe { std::ptr::write_bytes(self as *const Shared as *mut Shared, 0, 1) };
    }
    fn set_error(&self, msg: &str) {
        if self.error[0].load(Ordering::SeqCst) != 0 {
            return;
        }
        let mut b = [0u8; 256];
        let n = msg.len().min(255);
        b[..n].copy_from_slice(&msg.as_bytes()[..n]);
        for (i, w) in self.error.iter().enumerate() {
            w.store(
                u64::from_ne_bytes(b[i * 8..i * 8 + 8].try_into().unwrap()),
                Ordering::SeqCst,
            );
        }
    }
    fn error(&self) -> Option<String> {
        let b: Vec<u8> = self
            .error
            .iter()
            .flat_map(|w| w.load(Ordering::SeqCst).to_ne_bytes())
            .collect();
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        (end > 0).then(|| String::from_utf8_lossy(&b[..end]).into_owned())
    }
}

fn futex_wait_set(w: &AtomicU32) {
    while w.load(Ordering::SeqCst) == 0 {
        // SAFETY: a futex wait on a live shared word, without a timeout.
        unsafe { libc::syscall(libc::SYS_futex, w.as_ptr(), libc::FUTEX_WAIT, 0, 0, 0, 0) };
    }
}

fn futex_set(w: &AtomicU32) {
    w.store(1, Ordering::SeqCst);
    // SAFETY: a futex wake on a live shared word.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            w.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            0,
            0,
            0,
        )
    };
}

fn die(msg: &str) -> ! {
    eprintln!("bench-ipc-iceoryx2: error: {msg}");
    std::process::exit(2)
}

// --- bench-peers' message format and check ---------------------------------

fn k(i: usize) -> u64 {
    (i as u64 + 1).wrapping_mul(0xD6E8_FEB8_6659_FD93)
}

/// Producer p's message buffer (peers.h's msg_init / msg_stamp).
struct MsgBuf {
    d: Vec<u8>,
    base: u64,
}

impl MsgBuf {
    fn new(size: usize, p: usize) -> MsgBuf {
        let mut d = vec![0u8; size];
        let mut base = 0u64;
        if size >= 24 {
            for i in 2..size / 8 - 1 {
                let w = (p as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
                    ^ (i as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                d[8 * i..8 * i + 8].copy_from_slice(&w.to_le_bytes());
                base = base.wrapping_add(w ^ k(i));
            }
        }
        MsgBuf { d, base }
    }
    fn stamp(&mut self, p: usize, seq: u64) -> &[u8] {
        let h = (p as u64) << SEQ_BITS | seq;
        self.d[..8].copy_from_slice(&h.to_le_bytes());
        let size = self.d.len();
        if size >= 24 {
            let last = size / 8 - 1;
            let c = self.base.wrapping_add(h ^ k(0)).wrapping_add(h ^ k(last));
            self.d[8..16].copy_from_slice(&c.to_le_bytes());
            self.d[8 * last..8 * last + 8].copy_from_slice(&h.to_le_bytes());
        }
        &self.d
    }
}

/// The consumer's check (peers.h's tally_msg).
struct Tally {
    producers: usize,
    size: usize,
    next: [u64; MAX_P],
    ends: usize,
}

fn word(d: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(d[8 * i..8 * i + 8].try_into().unwrap())
}

impl Tally {
    /// True once every end marker is in; a fault ends the run with an error.
    fn msg(&mut self, d: &[u8]) -> bool {
        let sh = shared();
        sh.seen.fetch_add(1, Ordering::Relaxed);
        let fail = |m: String| -> bool {
            sh.set_error(&m);
            true
        };
        if d.len() != self.size {
            return fail(format!(
                "message of {} bytes, expected {}",
                d.len(),
                self.size
            ));
        }
        let h = word(d, 0);
        if d.len() >= 24 {
            let words = d.len() / 8;
            let mut sum = 0u64;
            for i in (0..words).filter(|&i| i != 1) {
                sum = sum.wrapping_add(word(d, i) ^ k(i));
            }
            if word(d, words - 1) != h {
                return fail(format!("message {h:#x}: header and trailer differ"));
            }
            if sum != word(d, 1) {
                return fail(format!("message {h:#x}: checksum mismatch"));
            }
        }
        let (p, seq) = ((h >> SEQ_BITS) as usize, h & SEQ_END);
        if p >= self.producers {
            return fail(format!("message {h:#x}: no producer {p}"));
        }
        if seq == SEQ_END {
            let want = sh.sent[p].load(Ordering::SeqCst);
            if self.next[p] != want {
                return fail(format!(
                    "producer {p}: end marker after {} of {want}",
                    self.next[p]
                ));
            }
            self.next[p] = SEQ_END;
            self.ends += 1;
            return self.ends == self.producers;
        }
        if seq != self.next[p] {
            return fail(format!(
                "producer {p}: sequence {seq} where {} was due",
                self.next[p]
            ));
        }
        self.next[p] += 1;
        false
    }
}

// --- the rows ----------------------------------------------------------------

#[derive(Clone, Copy, PartialEq)]
enum Row {
    Eventq,
    EventqEt,
    Iceoryx2,
}

impl Row {
    fn label(self) -> &'static str {
        match self {
            Row::Eventq => "libeventq shared, epoll + recv_batch(64)",
            Row::EventqEt => "libeventq shared, EPOLLET + recv_batch(64)",
            Row::Iceoryx2 => "iceoryx2 pub/sub + event, listener fd in epoll",
        }
    }
}

struct Run {
    row: Row,
    producers: usize,
    size: usize,
    smoke: Option<u64>, // a fixed count per producer
    service: String,
}

fn epoll_set(fds: &[i32], edge: bool) -> i32 {
    let events = libc::EPOLLIN as u32 | if edge { libc::EPOLLET as u32 } else { 0 };
    // SAFETY: plain epoll calls on fds this process owns.
    unsafe {
        let ep = libc::epoll_create1(libc::EPOLL_CLOEXEC);
        assert!(ep >= 0, "epoll_create1");
        for (i, &fd) in fds.iter().enumerate() {
            let mut ev = libc::epoll_event {
                events,
                u64: i as u64,
            };
            assert!(
                libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev) == 0,
                "epoll_ctl"
            );
        }
        ep
    }
}

fn epoll_wait(ep: i32, evs: &mut [libc::epoll_event]) -> usize {
    loop {
        // SAFETY: evs is a live buffer of evs.len() events.
        let n = unsafe { libc::epoll_wait(ep, evs.as_mut_ptr(), evs.len() as i32, -1) };
        if n >= 0 {
            shared().wakes.fetch_add(1, Ordering::Relaxed);
            return n as usize;
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            die("epoll_wait failed");
        }
    }
}

/// A producer's loop: `send` one message, until stopped; then the count
/// and the end marker.
fn produce(run: &Run, p: usize, mut send: impl FnMut(&[u8])) {
    let sh = shared();
    let mut m = MsgBuf::new(run.size, p);
    let mut seq = 0u64;
    loop {
        let stop = match run.smoke {
            Some(n) => seq == n,
            None => sh.stop.load(Ordering::Relaxed) != 0,
        };
        if stop {
            break;
        }
        send(m.stamp(p, seq));
        seq += 1;
    }
    sh.sent[p].store(seq, Ordering::SeqCst);
    send(m.stamp(p, SEQ_END));
}

fn eventq_run(run: &Run) {
    let sh = shared();
    let opts = || Options::new(CAPACITY).max_msg_size(run.size);
    let chans: Vec<Chan> = (0..run.producers)
        .map(|_| {
            Chan::new_shared(opts(), Side::Receive)
                .unwrap_or_else(|e| die(&format!("new_shared: {e}")))
        })
        .collect();
    let mut kids = Vec::new();
    for (p, chan) in chans.iter().enumerate() {
        let fds: SharedFds = chan
            .export_fds()
            .unwrap_or_else(|e| die(&format!("export_fds: {e}")));
        let me = std::process::id();
        // SAFETY: this process is single-threaded; the child uses only its
        // own new channel (eventq.h, fork()).
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            child_of(me);
            let tx = Chan::import_fds(fds).unwrap_or_else(|e| die(&format!("import_fds: {e}")));
            sh.ready.fetch_add(1, Ordering::SeqCst);
            futex_wait_set(&sh.go);
            produce(run, p, |m| {
                tx.send(m, Wait::Forever)
                    .unwrap_or_else(|e| die(&format!("send: {e}")))
            });
            futex_wait_set(&sh.done);
            drop(tx);
            // SAFETY: leaves without running the parent's destructors.
            unsafe { libc::_exit(0) };
        }
        drop(fds); // the producer has them
        kids.push(pid);
    }
    let fds: Vec<i32> = chans.iter().map(|c| c.recv_fd().as_raw_fd()).collect();
    let ep = epoll_set(&fds, run.row == Row::EventqEt);
    let mut tally = Tally {
        producers: run.producers,
        size: run.size,
        next: [0; MAX_P],
        ends: 0,
    };
    let mut buf = vec![0u8; BATCH * run.size];
    let mut lens = [0usize; BATCH];
    let mut evs = [libc::epoll_event { events: 0, u64: 0 }; MAX_P];
    sh.ready.fetch_add(1, Ordering::SeqCst);
    futex_wait_set(&sh.go);
    'run: loop {
        let n = epoll_wait(ep, &mut evs);
        for ev in &evs[..n] {
            let c = &chans[ev.u64 as usize];
            loop {
                match c.recv_batch(&mut buf, &mut lens, Wait::Never) {
                    Ok(k) => {
                        let mut off = 0;
                        for &len in &lens[..k] {
                            if tally.msg(&buf[off..off + len]) {
                                break 'run;
                            }
                            off += len;
                        }
                    }
                    Err(Error::WouldBlock) => break,
                    Err(e) => die(&format!("recv_batch: {e}")),
                }
            }
        }
    }
    finish(kids);
}

fn iceoryx2_run<const N: usize>(run: &Run) {
    let sh = shared();
    let mut kids = Vec::new();
    // The producers first, while this process has no iceoryx2 state.
    for p in 0..run.producers {
        let me = std::process::id();
        // SAFETY: this process is single-threaded and has no iceoryx2 state yet.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            child_of(me);
            futex_wait_set(&sh.consumer_up);
            iceoryx2_produce::<N>(run, p)
                .unwrap_or_else(|e| die(&format!("iceoryx2 producer: {e}")));
            // SAFETY: leaves without running the parent's destructors.
            unsafe { libc::_exit(0) };
        }
        kids.push(pid);
    }
    iceoryx2_consume::<N>(run).unwrap_or_else(|e| die(&format!("iceoryx2 consumer: {e}")));
    finish(kids);
}

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn iceoryx2_produce<const N: usize>(run: &Run, p: usize) -> Res<()> {
    let sh = shared();
    let node = NodeBuilder::new().create::<ipc::Service>()?;
    let service = node
        .service_builder(&run.service.as_str().try_into()?)
        .publish_subscribe::<[u8; N]>()
        .open()?;
    let publisher = service
        .publisher_builder()
        .backpressure_strategy(BackpressureStrategy::RetryUntilDelivered)
        .create()?;
    let events = node
        .service_builder(&format!("{}/wake", run.service).as_str().try_into()?)
        .event()
        .open()?;
    let notifier = events.notifier_builder().create()?;
    sh.ready.fetch_add(1, Ordering::SeqCst);
    futex_wait_set(&sh.go);
    produce(run, p, |m| {
        publisher
            .send_copy(m.try_into().expect("N bytes"))
            .unwrap_or_else(|e| die(&format!("send_copy: {e:?}")));
        notifier
            .notify()
            .unwrap_or_else(|e| die(&format!("notify: {e:?}")));
    });
    futex_wait_set(&sh.done);
    Ok(())
}

fn iceoryx2_consume<const N: usize>(run: &Run) -> Res<()> {
    let sh = shared();
    let node = NodeBuilder::new().create::<ipc::Service>()?;
    let service = node
        .service_builder(&run.service.as_str().try_into()?)
        .publish_subscribe::<[u8; N]>()
        .enable_safe_overflow(false)
        .subscriber_max_buffer_size(CAPACITY)
        .history_size(0)
        .max_publishers(MAX_P)
        .max_subscribers(1)
        .create()?;
    let subscriber = service
        .subscriber_builder()
        .buffer_size(CAPACITY)
        .create()?;
    let events = node
        .service_builder(&format!("{}/wake", run.service).as_str().try_into()?)
        .event()
        .max_notifiers(MAX_P)
        .max_listeners(1)
        .create()?;
    let listener = events.listener_builder().create()?;
    // SAFETY: the listener, and so its fd, outlives the epoll set's use.
    let ep = epoll_set(
        &[unsafe { listener.file_descriptor().native_handle() }],
        false,
    );
    futex_set(&sh.consumer_up);
    let mut tally = Tally {
        producers: run.producers,
        size: run.size,
        next: [0; MAX_P],
        ends: 0,
    };
    let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 1];
    // Connected to every publisher before the start: a publisher that
    // finds the subscriber's queue full before the subscriber has
    // connected drops the sample (NoConnectedReceiverAndBufferIsFull).
    while sh.ready.load(Ordering::SeqCst) < run.producers as i32 {
        std::thread::sleep(Duration::from_micros(200));
    }
    // A receive connects the subscriber to the publishers it finds.
    if subscriber.receive()?.is_some() {
        die("a sample before the start");
    }
    sh.ready.fetch_add(1, Ordering::SeqCst);
    futex_wait_set(&sh.go);
    'run: loop {
        epoll_wait(ep, &mut evs);
        listener.try_wait(|_| {})?;
        while let Some(sample) = subscriber.receive()? {
            if tally.msg(&sample[..]) {
                break 'run;
            }
        }
    }
    futex_set(&sh.done);
    Ok(())
}

fn child_of(parent: u32) {
    // SAFETY: plain syscalls.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        if libc::getppid() as u32 != parent {
            libc::_exit(3);
        }
    }
}

/// The consumer's end: the producers may close, then must all exit 0.
fn finish(kids: Vec<i32>) {
    let sh = shared();
    futex_set(&sh.done);
    for pid in kids {
        let mut status = 0;
        // SAFETY: waiting for this process's own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
            sh.set_error(&format!("a producer process ended with status {status:#x}"));
        }
    }
}

/// One run in a forked consumer process; returns the rate in the timed
/// window (0 in smoke mode) and wake-ups per message, or the fault.
fn run_one(run: &Run) -> Result<(f64, f64), String> {
    let sh = shared();
    sh.reset();
    let harness = std::process::id();
    // SAFETY: the harness is single-threaded.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        child_of(harness);
        // SAFETY: a new process group for the run.
        unsafe { libc::setpgid(0, 0) };
        match (run.row, run.size) {
            (Row::Eventq | Row::EventqEt, _) => eventq_run(run),
            (Row::Iceoryx2, 8) => iceoryx2_run::<8>(run),
            (Row::Iceoryx2, 1024) => iceoryx2_run::<1024>(run),
            _ => die("no such size"),
        }
        // SAFETY: leaves without running the parent's destructors.
        unsafe { libc::_exit(0) };
    }
    let kill = |why: String| -> Result<(f64, f64), String> {
        let why = format!("{why}; {}", where_they_wait(pid));
        // SAFETY: the run's process group and consumer.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
        Err(why)
    };
    let t = Instant::now();
    while sh.ready.load(Ordering::SeqCst) < run.producers as i32 + 1 {
        if t.elapsed() > HANG {
            return kill("not set up in 30 s".into());
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    futex_set(&sh.go);
    let mut rate = 0.0;
    if run.smoke.is_none() {
        let t = Instant::now();
        while sh.seen.load(Ordering::Relaxed) == 0 && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_micros(500));
        }
        std::thread::sleep(WARM);
        let (t0, s0) = (Instant::now(), sh.seen.load(Ordering::Relaxed));
        let secs = SECONDS.load(Ordering::Relaxed) as f64 / 1000.0;
        let (mut t1, mut s1);
        loop {
            std::thread::sleep(Duration::from_millis(50));
            t1 = t0.elapsed().as_secs_f64();
            s1 = sh.seen.load(Ordering::Relaxed);
            if t1 >= secs && (s1 - s0 >= 1000 || t1 > 10.0) {
                break;
            }
        }
        sh.stop.store(1, Ordering::SeqCst);
        rate = (s1 - s0) as f64 / t1;
    }
    let (mut last, mut since) = (u64::MAX, Instant::now());
    loop {
        let mut status = 0;
        // SAFETY: polling this process's own child.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
                return Err(format!(
                    "the consumer process ended with status {status:#x}"
                ));
            }
            break;
        }
        let seen = sh.seen.load(Ordering::Relaxed);
        if seen != last {
            (last, since) = (seen, Instant::now());
        } else if since.elapsed() > HANG {
            return kill(format!(
                "no progress for 30 s ({seen} messages received): a hang"
            ));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    if let Some(e) = sh.error() {
        return Err(e);
    }
    let seen = sh.seen.load(Ordering::Relaxed).max(1);
    Ok((rate, sh.wakes.load(Ordering::Relaxed) as f64 / seen as f64))
}

/// Where each thread of the run's processes (process group `pgrp`) waits:
/// its state, kernel wait channel and system call, for a hang's report.
fn where_they_wait(pgrp: i32) -> String {
    let mut out = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return "(no /proc)".into();
    };
    for p in procs.flatten() {
        let pid = p.file_name().to_string_lossy().into_owned();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let Some((_, rest)) = stat.rsplit_once(") ") else {
            continue;
        };
        // After the comm: state, ppid, pgrp.
        if rest.split(' ').nth(2) != Some(&pgrp.to_string()) {
            continue;
        }
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten();
        for t in tasks.flatten() {
            let tid = t.file_name().to_string_lossy().into_owned();
            let read = |f: &str| {
                std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/{f}")).unwrap_or_default()
            };
            let state = read("stat")
                .rsplit_once(") ")
                .map_or(String::new(), |(_, r)| r[..1].to_string());
            let sys = read("syscall");
            out.push(format!(
                "{pid}/{tid} {state} wchan {} syscall {}",
                read("wchan").trim(),
                sys.split(' ').next().unwrap_or("?").trim()
            ));
        }
    }
    format!("threads of the run: [{}]", out.join("; "))
}

static SECONDS: AtomicU64 = AtomicU64::new(500);

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_else(|_| "?".into())
        .trim()
        .to_string()
}

fn spread(v: &[f64]) -> (f64, f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = s.len();
    let med = if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    };
    (med, s[0], s[n - 1])
}

fn main() {
    let mut smoke = std::env::var("EVENTQ_BENCH_SMOKE").is_ok_and(|v| !v.is_empty() && v != "0");
    let mut reps = 0usize;
    let mut only: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--smoke" => smoke = true,
            "--only" => only = args.next(),
            "--reps" => {
                reps = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| die("--reps N"))
            }
            "--seconds" => {
                let s: f64 = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| die("--seconds S"));
                SECONDS.store((s * 1000.0) as u64, Ordering::Relaxed);
            }
            _ => die("usage: ipc-iceoryx2 [--smoke] [--reps N] [--seconds S] [--only TEXT]"),
        }
    }
    if reps == 0 {
        reps = if smoke { 1 } else { 5 };
    }
    set_log_level(LogLevel::Error);
    shared();
    let groups = [(1usize, 8usize), (4, 8), (1, 1024), (4, 1024)];
    let rows = [Row::Eventq, Row::EventqEt, Row::Iceoryx2];
    // results[group][row][rep]
    let mut results =
        vec![vec![Vec::<Result<(f64, f64), String>>::new(); rows.len()]; groups.len()];
    let load_start = loadavg();
    let started = Instant::now();
    let mut failures = Vec::new();
    for rep in 0..reps {
        eprintln!("bench-ipc-iceoryx2: repetition {}/{reps}", rep + 1);
        for (gi, &(producers, size)) in groups.iter().enumerate() {
            for (ri, &row) in rows.iter().enumerate() {
                let name = format!("{producers}P1C {size} B {}", row.label());
                if only.as_ref().is_some_and(|o| !name.contains(o.as_str())) {
                    continue;
                }
                let run = Run {
                    row,
                    producers,
                    size,
                    smoke: smoke.then_some(4000 / producers as u64),
                    service: format!("eventq-bench-ipc/{}/{rep}/{gi}", std::process::id()),
                };
                let t = Instant::now();
                let r = run_one(&run);
                match &r {
                    Ok((rate, _)) => eprintln!(
                        "  {name}: {:.2} M msg/s, {:.2} s",
                        rate / 1e6,
                        t.elapsed().as_secs_f64()
                    ),
                    Err(e) => {
                        eprintln!("  {name}: DELIVERY FAILED: {e}");
                        failures.push(format!("{name}: {e}"));
                    }
                }
                results[gi][ri].push(r);
            }
        }
    }
    println!(
        "iceoryx2 between processes, against libeventq's shared channel (Rust APIs){}",
        if smoke {
            " (SMOKE: a fixed count, figures meaningless)"
        } else {
            ""
        }
    );
    println!(
        "libeventq (this tree), iceoryx2 0.10; {} repetitions interleaved, {} per run; {:.0} s",
        reps,
        if smoke {
            "a fixed count".to_string()
        } else {
            format!(
                "{:.2} s window",
                SECONDS.load(Ordering::Relaxed) as f64 / 1000.0
            )
        },
        started.elapsed().as_secs_f64()
    );
    println!("loadavg at start: {load_start}; at end: {}", loadavg());
    println!(
        "M msg/s: the consumer's rate in the timed window, median and min-max of the repetitions; \
         wakes/msg: the consumer's epoll_wait returns per message; ROW / iceoryx2: per repetition, \
         median (min-max); > 1 means libeventq is faster"
    );
    for (gi, &(producers, size)) in groups.iter().enumerate() {
        println!("\n== {producers}P1C, {size}-byte messages ==");
        println!(
            "{:<50} {:>8} {:>13} {:>9}",
            "row", "M msg/s", "min-max M/s", "wakes/msg"
        );
        for (ri, row) in rows.iter().enumerate() {
            let ok: Vec<(f64, f64)> = results[gi][ri]
                .iter()
                .filter_map(|r| r.as_ref().ok().copied())
                .collect();
            if results[gi][ri].is_empty() {
                continue; // left out by --only
            }
            if ok.is_empty() {
                println!("{:<50} DELIVERY FAILED", row.label());
                continue;
            }
            let (med, lo, hi) = spread(&ok.iter().map(|r| r.0).collect::<Vec<_>>());
            let (wk, _, _) = spread(&ok.iter().map(|r| r.1).collect::<Vec<_>>());
            println!(
                "{:<50} {:>8.2} {:>13} {:>9.4}",
                row.label(),
                med / 1e6,
                format!("{:.2}-{:.2}", lo / 1e6, hi / 1e6),
                wk
            );
        }
        for (ri, row) in rows.iter().enumerate().take(2) {
            let ratios: Vec<f64> = results[gi][ri]
                .iter()
                .zip(&results[gi][2])
                .filter_map(|(a, b)| match (a, b) {
                    (Ok(a), Ok(b)) if b.0 > 0.0 => Some(a.0 / b.0),
                    _ => None,
                })
                .collect();
            if !ratios.is_empty() {
                let (med, lo, hi) = spread(&ratios);
                println!("{} / iceoryx2: {med:.2} ({lo:.2}-{hi:.2})", row.label());
            }
        }
    }
    if !failures.is_empty() {
        println!("\nDELIVERY FAILURES ({}):", failures.len());
        for f in &failures {
            println!("  {f}");
        }
        std::process::exit(1);
    }
    println!("\ndelivery: every run delivered every message exactly once, whole and in order");
}
