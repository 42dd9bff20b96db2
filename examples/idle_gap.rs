// SPDX-License-Identifier: MIT OR Apache-2.0
//! Idle wake-up with a 1 ms gap before each message: how long from a send
//! until a consumer asleep in poll(2) on the receive fd has the message in
//! hand, against a raw eventfd written and read the same way. The gap lets
//! the consumer's vCPU go idle, as a lightly loaded server's does.
//!
//! `cargo run --release --example idle_gap [SAMPLES]`
use std::os::fd::AsRawFd;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use eventq::sys::{poll_fd, EventFd};
use eventq::{Chan, Options, Wait};

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() - 1) as f64 * p) as usize]
}

/// Runs `samples` rounds: sleep 1 ms, stamp, `send`; the consumer thread
/// polls `fd`, calls `take`, and reports the time since the stamp.
fn measure(samples: usize, fd: i32, send: impl Fn(), take: impl Fn() + Send + 'static) -> Vec<f64> {
    let (stamp_tx, stamp_rx) = mpsc::channel::<Instant>();
    let (lat_tx, lat_rx) = mpsc::channel::<f64>();
    let consumer = std::thread::spawn(move || {
        while let Ok(t0) = stamp_rx.recv() {
            poll_fd(fd, libc::POLLIN, None).unwrap();
            take();
            lat_tx.send(t0.elapsed().as_secs_f64() * 1e6).unwrap();
        }
    });
    let mut out = Vec::with_capacity(samples);
    for _ in 0..samples {
        std::thread::sleep(Duration::from_millis(1));
        let t0 = Instant::now();
        stamp_tx.send(t0).unwrap();
        send();
        out.push(lat_rx.recv().unwrap());
    }
    drop(stamp_tx);
    consumer.join().unwrap();
    out
}

fn main() {
    let samples: usize = std::env::args()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);

    let efd = std::sync::Arc::new(EventFd::new().unwrap());
    let rfd = efd.as_raw_fd();
    let e2 = efd.clone();
    let mut raw = measure(
        samples,
        rfd,
        || efd.write(1).unwrap(),
        move || {
            e2.read().unwrap();
        },
    );

    let chan = Chan::new(Options::new(1024)).unwrap();
    let rx = chan.clone();
    let cfd = chan.recv_fd().as_raw_fd();
    let mut eq = measure(
        samples,
        cfd,
        || chan.send(b"12345678", Wait::Never).unwrap(),
        move || {
            let mut buf = [0u8; 8];
            rx.recv_into(&mut buf, Wait::Never).unwrap();
        },
    );

    let (r50, r99) = (percentile(&mut raw, 0.5), percentile(&mut raw, 0.99));
    let (e50, e99) = (percentile(&mut eq, 0.5), percentile(&mut eq, 0.99));
    println!("idle wake-up after a 1 ms gap, {samples} samples (us)");
    println!("raw eventfd write -> poll + read      p50 {r50:7.2}  p99 {r99:7.2}");
    println!(
        "libeventq send -> poll + recv_into    p50 {e50:7.2}  p99 {e99:7.2}  p50 ratio {:.2}x",
        e50 / r50
    );
}
