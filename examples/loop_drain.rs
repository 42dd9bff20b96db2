// SPDX-License-Identifier: MIT OR Apache-2.0
//! The loop's per-message dispatch cost on one thread, without a producer:
//! a channel holding 4096 messages is drained by a loop with one channel
//! source (a light callback), then refilled and drained by bare
//! `recv_into` calls; best of 300 rounds each, in ns a message. The
//! difference is what the loop adds per message
//! (docs/decisions/0016-loop-dispatch-one-catch-unwind-and-a-buffer-swap.md).
//!
//! `cargo run --release --example loop_drain [SIZE...]` (default 8 1024;
//! `BUDGET=N` sets the source's budget)
use std::time::Instant;

use eventq::{Chan, Event, Loop, Options, Wait};

const QUEUED: usize = 4096;
const ROUNDS: usize = 300;

fn fill(chan: &Chan, msg: &[u8]) {
    for _ in 0..QUEUED {
        chan.send(msg, Wait::Never).unwrap();
    }
}

fn main() {
    let mut sizes: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().unwrap())
        .collect();
    if sizes.is_empty() {
        sizes = vec![8, 1024];
    }
    let budget: Option<usize> = std::env::var("BUDGET").ok().map(|b| b.parse().unwrap());
    for size in sizes {
        let msg = vec![7u8; size];
        let (mut best_loop, mut best_recv) = (f64::MAX, f64::MAX);
        for _ in 0..ROUNDS {
            let chan = Chan::new(Options::new(QUEUED)).unwrap();
            fill(&chan, &msg);
            let lp = Loop::new().unwrap();
            let (mut got, mut sum) = (0usize, 0u64);
            let id = lp
                .add_chan(&chan, move |lp, _, ev| {
                    if let Event::Message(m) = ev {
                        got += 1;
                        sum = sum.wrapping_add(u64::from(m[0]) + m.len() as u64);
                        if got == QUEUED {
                            std::hint::black_box(sum);
                            lp.stop();
                        }
                    }
                    Ok(())
                })
                .unwrap();
            if let Some(b) = budget {
                lp.set_budget(id, b).unwrap();
            }
            let t = Instant::now();
            lp.run().unwrap();
            best_loop = best_loop.min(t.elapsed().as_nanos() as f64 / QUEUED as f64);
            drop(lp);

            fill(&chan, &msg);
            let mut buf = vec![0u8; size];
            let mut sum = 0u64;
            let t = Instant::now();
            for _ in 0..QUEUED {
                let n = chan.recv_into(&mut buf, Wait::Never).unwrap();
                sum = sum.wrapping_add(u64::from(buf[0]) + n as u64);
            }
            std::hint::black_box(sum);
            best_recv = best_recv.min(t.elapsed().as_nanos() as f64 / QUEUED as f64);
        }
        println!("{size} B: loop {best_loop:.1} ns/msg, recv_into {best_recv:.1} ns/msg");
    }
}
