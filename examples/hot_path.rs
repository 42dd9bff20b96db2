// SPDX-License-Identifier: MIT OR Apache-2.0
//! The small-message path, for an instruction counter (valgrind's
//! callgrind; the counts do not depend on the machine's load): 8-byte
//! messages through libeventq's `send` + `recv_into` with `Wait::Never`,
//! or through crossbeam-channel's `bounded` array channel (`try_send` +
//! `try_recv`), capacity 1024.
//!
//! ```text
//! cargo run --release --example hot_path -- MODE LIB N
//!   MODE  steady: one thread, the channel kept half full (512 queued
//!         first), then push one and pop one, N times: the path of a busy
//!         channel, whose doorbell stays up
//!         single: one thread, push then pop, N times: every push finds the
//!         channel empty and every pop empties it (for libeventq, a doorbell
//!         raise and lowering per message)
//!         1p1c | 4p1c: producer threads and one consumer, N messages in all;
//!         a full or empty channel yields the thread and tries again
//!   LIB   eventq | crossbeam
//! valgrind --tool=callgrind target/release/examples/hot_path single eventq 100000
//! ```
//!
//! Two runs with N and 2N give instructions per message as the difference
//! over N (set-up cancels out). The program prints the failed attempts
//! (full or empty) per message, which the two-thread counts include.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;

use eventq::{Chan, Error, Options, Wait};

const CAPACITY: usize = 1024;

/// One library's handles: send or receive one 8-byte message, false when
/// the channel is full (or empty).
trait Lib: Clone + Send + 'static {
    fn send(&self, msg: &[u8; 8]) -> bool;
    fn recv(&self, buf: &mut [u8; 8]) -> bool;
}

#[derive(Clone)]
struct Eq(Chan);

impl Lib for Eq {
    #[inline(never)]
    fn send(&self, msg: &[u8; 8]) -> bool {
        match self.0.send(msg, Wait::Never) {
            Ok(()) => true,
            Err(Error::WouldBlock) => false,
            Err(e) => panic!("send: {e}"),
        }
    }

    #[inline(never)]
    fn recv(&self, buf: &mut [u8; 8]) -> bool {
        match self.0.recv_into(buf, Wait::Never) {
            Ok(8) => true,
            Ok(n) => panic!("recv_into: {n} bytes"),
            Err(Error::WouldBlock) => false,
            Err(e) => panic!("recv_into: {e}"),
        }
    }
}

#[derive(Clone)]
struct Cb(
    crossbeam_channel::Sender<[u8; 8]>,
    crossbeam_channel::Receiver<[u8; 8]>,
);

impl Lib for Cb {
    #[inline(never)]
    fn send(&self, msg: &[u8; 8]) -> bool {
        match self.0.try_send(*msg) {
            Ok(()) => true,
            Err(crossbeam_channel::TrySendError::Full(_)) => false,
            Err(e) => panic!("try_send: {e}"),
        }
    }

    #[inline(never)]
    fn recv(&self, buf: &mut [u8; 8]) -> bool {
        match self.1.try_recv() {
            Ok(m) => {
                *buf = m;
                true
            }
            Err(crossbeam_channel::TryRecvError::Empty) => false,
            Err(e) => panic!("try_recv: {e}"),
        }
    }
}

fn single(lib: impl Lib, prefill: u64, n: u64) -> u64 {
    let mut buf = [0u8; 8];
    let mut sum = 0u64;
    for i in 0..prefill {
        assert!(lib.send(&i.to_le_bytes()), "full");
    }
    for i in 0..n {
        assert!(lib.send(&i.to_le_bytes()), "full");
        assert!(lib.recv(&mut buf), "empty");
        sum = sum.wrapping_add(u64::from_le_bytes(black_box(buf)));
    }
    sum
}

/// Returns the failed attempts (full, empty).
fn threads(lib: impl Lib, producers: u64, n: u64) -> (u64, u64) {
    let full = Arc::new(AtomicU64::new(0));
    let per = n / producers;
    let hs: Vec<_> = (0..producers)
        .map(|p| {
            let (lib, full) = (lib.clone(), full.clone());
            thread::spawn(move || {
                let mut fails = 0;
                for i in 0..per {
                    let msg = (p << 48 | i).to_le_bytes();
                    while !lib.send(&msg) {
                        fails += 1;
                        thread::yield_now();
                    }
                }
                full.fetch_add(fails, Ordering::Relaxed);
            })
        })
        .collect();
    let mut buf = [0u8; 8];
    let mut next = vec![0u64; producers as usize];
    let mut empty = 0;
    for _ in 0..per * producers {
        while !lib.recv(&mut buf) {
            empty += 1;
            thread::yield_now();
        }
        let h = u64::from_le_bytes(buf);
        let (p, i) = ((h >> 48) as usize, h & ((1 << 48) - 1));
        assert_eq!(i, next[p], "order");
        next[p] += 1;
    }
    for h in hs {
        h.join().expect("producer");
    }
    (full.load(Ordering::Relaxed), empty)
}

fn run(lib: impl Lib, mode: &str, n: u64) {
    match mode {
        "single" => println!("single: checksum {}", single(lib, 0, n)),
        "steady" => println!("steady: checksum {}", single(lib, CAPACITY as u64 / 2, n)),
        "1p1c" | "4p1c" => {
            let p = if mode == "1p1c" { 1 } else { 4 };
            let (full, empty) = threads(lib, p, n);
            println!(
                "{mode}: {n} messages; failed attempts per message: full {:.3}, empty {:.3}",
                full as f64 / n as f64,
                empty as f64 / n as f64
            );
        }
        _ => usage(),
    }
}

fn usage() -> ! {
    eprintln!("usage: hot_path steady|single|1p1c|4p1c eventq|crossbeam N");
    std::process::exit(2);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [mode, lib, n] = args.as_slice() else {
        usage()
    };
    let n: u64 = n.parse().unwrap_or_else(|_| usage());
    match lib.as_str() {
        "eventq" => run(
            Eq(Chan::new(Options::new(CAPACITY)).expect("Chan::new")),
            mode,
            n,
        ),
        "crossbeam" => {
            let (tx, rx) = crossbeam_channel::bounded(CAPACITY);
            run(Cb(tx, rx), mode, n)
        }
        _ => usage(),
    }
}
