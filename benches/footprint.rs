// SPDX-License-Identifier: MIT OR Apache-2.0
//! footprint: what an idle channel costs, in fds and resident memory.
//!
//! Creates 10,000 channels of the default capacity (1024,
//! EVENTQ_DEFAULT_CAPACITY) and reports the process's open fds (entries of
//! /proc/self/fd) and resident memory (VmRSS of /proc/self/status) before
//! creating them, once they exist and are idle, after asking each for its
//! send fd, after one 8-byte send and receive on each, and after one
//! 100-byte (heap-buffered) send and receive on each; with the figures per
//! channel. RLIMIT_NOFILE may stop the send fds (or, with two fds per
//! channel, the channels) short: how many were had is printed.
//!
//! `--smoke` (or `EVENTQ_BENCH_SMOKE=1`): 100 channels; checks that each
//! delivers its messages and that its fds are readable as they should be,
//! never a size. `--channels N` sets the count.

#[path = "../tests/fds/mod.rs"]
mod fds;

use std::fmt::Write as _;
use std::os::fd::{AsRawFd, RawFd};

use eventq::{Chan, Options, Wait};

/// EVENTQ_DEFAULT_CAPACITY of eventq.h.
const DEFAULT_CAPACITY: usize = 1024;

/// Open fds of this process (the directory's own fd not counted).
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .count()
        .saturating_sub(1)
}

/// A line of /proc/self/status or /proc/self/limits, by its first field.
fn proc_field(file: &str, key: &str) -> Option<String> {
    let text = std::fs::read_to_string(file).ok()?;
    text.lines()
        .find(|l| l.starts_with(key))
        .map(|l| l[key.len()..].trim().to_string())
}

/// Resident memory in bytes.
fn rss() -> u64 {
    let kb = proc_field("/proc/self/status", "VmRSS:").expect("VmRSS");
    let kb: u64 = kb.trim_end_matches("kB").trim().parse().expect("VmRSS kB");
    kb * 1024
}

/// Whether `fd` is readable now.
fn readable(fd: RawFd) -> bool {
    fds::is_readable(fd).expect("poll(2)")
}

/// Asks a channel for its send fd.
fn send_fd(ch: &Chan) -> eventq::Result<RawFd> {
    ch.send_fd().map(|fd| fd.as_raw_fd())
}

struct Sample {
    what: String,
    fds: usize,
    rss: u64,
}

fn sample(what: impl Into<String>) -> Sample {
    Sample {
        what: what.into(),
        fds: open_fds(),
        rss: rss(),
    }
}

/// One send and receive of `len` bytes on each channel, checked.
fn round_trip(chans: &[Chan], len: usize) {
    let mut buf = vec![0u8; len];
    for (i, ch) in chans.iter().enumerate() {
        let msg: Vec<u8> = (0..len).map(|b| (i + b) as u8).collect();
        ch.send(&msg, Wait::Never).expect("send");
        assert!(readable(ch.recv_fd().as_raw_fd()), "recv fd after a send");
        let n = ch.recv_into(&mut buf, Wait::Never).expect("recv");
        assert_eq!(&buf[..n], &msg[..], "channel {i}: message");
        assert!(!readable(ch.recv_fd().as_raw_fd()), "recv fd once drained");
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut smoke = std::env::var_os("EVENTQ_BENCH_SMOKE").is_some_and(|v| v != "0");
    let mut count = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--smoke" => smoke = true,
            "--channels" => count = args.next().and_then(|n| n.parse().ok()),
            // cargo bench passes --bench.
            _ => {}
        }
    }
    let count = count.unwrap_or(if smoke { 100 } else { 10_000 });

    let mut samples = vec![sample("before")];
    let mut chans = Vec::with_capacity(count);
    let mut create_err = None;
    for _ in 0..count {
        match Chan::new(Options::new(DEFAULT_CAPACITY)) {
            Ok(ch) => chans.push(ch),
            Err(e) => {
                create_err = Some(e);
                break;
            }
        }
    }
    samples.push(sample(format!("{} created, idle", chans.len())));

    // An fd kept back while the send fds may use up the limit, so that
    // /proc can still be read after.
    let spare = std::fs::File::open("/dev/null").expect("/dev/null");
    let mut had = 0;
    let mut fd_err = None;
    for ch in &chans {
        match send_fd(ch) {
            Ok(fd) => {
                assert!(readable(fd), "an empty channel's send fd is readable");
                had += 1;
            }
            Err(e) => {
                fd_err.get_or_insert(e);
            }
        }
    }
    drop(spare);
    samples.push(sample(format!("send fd asked ({had} had)")));

    round_trip(&chans, 8);
    samples.push(sample("one 8-byte send+recv each"));
    round_trip(&chans, 100);
    samples.push(sample("one 100-byte send+recv each"));

    let limit = proc_field("/proc/self/limits", "Max open files")
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into());
    let mut out = String::new();
    let _ = writeln!(
        out,
        "footprint: {} channels of capacity {DEFAULT_CAPACITY} (RLIMIT_NOFILE {limit})",
        count
    );
    if let Some(e) = &create_err {
        let _ = writeln!(out, "  creation stopped at {}: {e}", chans.len());
    }
    if let Some(e) = &fd_err {
        let _ = writeln!(out, "  send fd refused for {}: {e}", chans.len() - had);
    }
    let _ = writeln!(
        out,
        "  {:<34} {:>7} {:>11} {:>12} {:>13}",
        "state", "fds", "RSS KiB", "fds/chan", "RSS B/chan"
    );
    let base = &samples[0];
    let n = chans.len().max(1) as f64;
    for s in &samples {
        let _ = writeln!(
            out,
            "  {:<34} {:>7} {:>11} {:>12.2} {:>13.0}",
            s.what,
            s.fds,
            s.rss / 1024,
            (s.fds as f64 - base.fds as f64) / n,
            (s.rss as f64 - base.rss as f64) / n,
        );
    }
    print!("{out}");
    if smoke {
        assert!(create_err.is_none(), "smoke: creation failed");
        assert!(fd_err.is_none(), "smoke: send fd failed");
        for ch in &chans {
            ch.close();
            assert!(
                readable(ch.recv_fd().as_raw_fd()),
                "closed: recv fd readable"
            );
        }
        println!("footprint smoke: ok");
    }
}
