// SPDX-License-Identifier: MIT OR Apache-2.0
//! async_peers: libeventq's Tokio wrapper (`eventq::tokio::AsyncChan`)
//! against what a Tokio program uses instead: `tokio::sync::mpsc` (bounded)
//! and `flume` (bounded, `send_async` / `recv_async`), all with capacity
//! 1024. A multi-thread Tokio runtime (a worker per CPU); 1P1C and 4P1C,
//! producers and the consumer each an async task; 8-byte and 1 KiB
//! messages.
//!
//! Each side does what its users write: a libeventq producer sends a
//! `&[u8]` (copied into the channel) and the consumer receives an owned
//! `Vec<u8>` (`recv().await`); a peer's producer sends a `Vec<u8>` made for
//! the message and its consumer receives it. One more libeventq row has
//! the consumer `recv_into` a buffer of its own (no allocation on either
//! side); the targets are judged on the `recv()` row. Every message carries its
//! producer and sequence number in its first 8 bytes, and the consumer
//! checks both (order per producer, nothing lost or repeated).
//!
//! A row is a timed window (0.5 s unless `--seconds`): producers send
//! until the window ends, then finish (libeventq: the last one closes the
//! channel; peers: the senders are dropped), and the consumer's count of
//! messages over the time to its end of stream is the row's figure.
//! Repetitions are interleaved (libeventq, mpsc, flume, libeventq, ...);
//! the table gives the median M msg/s and the min-max of the repetitions,
//! and libeventq/peer as the median and spread of per-repetition ratios.
//! Targets against tokio's mpsc, judged on that spread: at least 1.0x at
//! 1 KiB, at least 0.7x at 8 B; met only if its worse end meets the
//! target, MISSED if its better end misses, unsettled if it straddles.
//!
//! `--smoke` (or `EVENTQ_BENCH_SMOKE=1`): a fixed 2,000 messages per
//! producer, one repetition, delivery checked, no target judged (make
//! test's async-bench-smoke). `--reps N` (default 5), `--seconds S` (or
//! `--row-time S`, the other rate benches' name),
//! `--filter TEXT` (rows whose "<config> <size> <peer>" contains TEXT).
//! Nothing here asserts a timing; the program fails only if a message was
//! lost, repeated, reordered or damaged.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use eventq::tokio::AsyncChan;
use eventq::{Chan, Error, Options};
use tokio::runtime::Runtime;

#[path = "method/mod.rs"]
mod method;

const CAPACITY: usize = 1024;
const SIZES: [usize; 2] = [8, 1024];
const PRODUCERS: [usize; 2] = [1, 4];
const SMOKE_MSGS: u64 = 2000;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Peer {
    Eventq,
    EventqInto,
    Mpsc,
    Flume,
}

const PEERS: [Peer; 4] = [Peer::Eventq, Peer::EventqInto, Peer::Mpsc, Peer::Flume];

impl Peer {
    fn name(self) -> &'static str {
        match self {
            Peer::Eventq => "libeventq AsyncChan",
            Peer::EventqInto => "libeventq recv_into",
            Peer::Mpsc => "tokio::sync::mpsc",
            Peer::Flume => "flume (async)",
        }
    }
}

struct Cfg {
    smoke: bool,
    reps: usize,
    window: Duration,
    filter: Option<String>,
}

impl Cfg {
    fn parse() -> Cfg {
        let mut cfg = Cfg {
            smoke: std::env::var_os("EVENTQ_BENCH_SMOKE").is_some_and(|v| v != "0"),
            reps: 5,
            window: Duration::from_millis(500),
            filter: None,
        };
        let mut args = std::env::args().skip(1);
        while let Some(a) = args.next() {
            let mut value = |what: &str| {
                args.next()
                    .unwrap_or_else(|| panic!("{what} needs a value"))
            };
            match a.as_str() {
                "--smoke" => cfg.smoke = true,
                "--reps" => cfg.reps = value("--reps").parse().expect("--reps N"),
                // --row-time: the other rate benches' name for it.
                "--seconds" | "--row-time" => {
                    cfg.window =
                        Duration::from_secs_f64(value("--seconds").parse().expect("--seconds S"))
                }
                "--filter" => cfg.filter = Some(value("--filter")),
                // What cargo bench passes to every bench program.
                "--bench" => {}
                _ => {
                    eprintln!(
                        "usage: async_peers [--smoke] [--reps N] [--seconds S | --row-time S] [--filter TEXT]"
                    );
                    std::process::exit(2);
                }
            }
        }
        if cfg.smoke {
            cfg.reps = 1;
        }
        cfg
    }
}

/// When the producers stop: after a count (smoke) or when the window ends.
#[derive(Clone)]
struct Stop {
    flag: Arc<AtomicBool>,
    limit: u64,
}

impl Stop {
    fn now(&self, seq: u64) -> bool {
        seq == self.limit || self.flag.load(Ordering::Relaxed)
    }
}

/// The message `seq` of producer `p`, `size` bytes (at least 8).
fn stamp(buf: &mut [u8], p: usize, seq: u64) {
    buf[..8].copy_from_slice(&((p as u64) << 56 | seq).to_le_bytes());
}

/// The consumer's check: each producer's messages arrive in order, whole.
struct Tally {
    next: Vec<u64>,
    size: usize,
    /// A message's bytes after its stamp (zeros): every consumer compares
    /// each message's body against it, so every row reads every byte it
    /// receives, as a real receiver would.
    body: Vec<u8>,
    count: u64,
}

impl Tally {
    fn new(producers: usize, size: usize) -> Tally {
        Tally {
            next: vec![0; producers],
            size,
            body: vec![0; size],
            count: 0,
        }
    }

    fn take(&mut self, m: &[u8]) {
        assert_eq!(m.len(), self.size, "a message of the wrong length");
        assert!(m[8..] == self.body[8..], "a message's body corrupted");
        let w = u64::from_le_bytes(m[..8].try_into().unwrap());
        let (p, seq) = ((w >> 56) as usize, w & ((1 << 56) - 1));
        assert_eq!(
            seq, self.next[p],
            "producer {p}: lost, repeated or reordered"
        );
        self.next[p] += 1;
        self.count += 1;
    }

    fn finish(&self, stop: &Stop) -> u64 {
        if stop.limit != u64::MAX {
            assert!(
                self.next.iter().all(|&n| n == stop.limit),
                "messages missing"
            );
        }
        self.count
    }
}

/// One row: messages received and the seconds to the end of stream.
fn run(rt: &Runtime, peer: Peer, producers: usize, size: usize, cfg: &Cfg) -> (u64, f64) {
    let stop = Stop {
        flag: Arc::new(AtomicBool::new(false)),
        limit: if cfg.smoke { SMOKE_MSGS } else { u64::MAX },
    };
    let timer = (!cfg.smoke).then(|| {
        let (flag, window) = (stop.flag.clone(), cfg.window);
        std::thread::spawn(move || {
            std::thread::sleep(window);
            flag.store(true, Ordering::Relaxed);
        })
    });
    let start = Instant::now();
    let count = rt.block_on(async {
        let mut tally = Tally::new(producers, size);
        match peer {
            Peer::Eventq | Peer::EventqInto => {
                let chan = AsyncChan::new(Chan::new(Options::new(CAPACITY)).unwrap());
                let left = Arc::new(AtomicUsize::new(producers));
                for p in 0..producers {
                    let (tx, stop, left) = (chan.clone(), stop.clone(), left.clone());
                    tokio::spawn(async move {
                        let mut buf = vec![0u8; size];
                        let mut seq = 0;
                        while !stop.now(seq) {
                            stamp(&mut buf, p, seq);
                            tx.send(&buf).await.unwrap();
                            seq += 1;
                        }
                        if left.fetch_sub(1, Ordering::SeqCst) == 1 {
                            tx.close();
                        }
                    });
                }
                tokio::spawn(async move {
                    let mut buf = vec![0u8; size];
                    loop {
                        let got = if peer == Peer::EventqInto {
                            chan.recv_into(&mut buf)
                                .await
                                .map(|n| tally.take(&buf[..n]))
                        } else {
                            chan.recv().await.map(|m| tally.take(&m))
                        };
                        match got {
                            Ok(()) => {}
                            Err(Error::Closed) => return tally,
                            Err(e) => panic!("receive: {e}"),
                        }
                    }
                })
                .await
                .unwrap()
            }
            Peer::Mpsc => {
                let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(CAPACITY);
                for p in 0..producers {
                    let (tx, stop) = (tx.clone(), stop.clone());
                    tokio::spawn(async move {
                        let mut seq = 0;
                        while !stop.now(seq) {
                            let mut buf = vec![0u8; size];
                            stamp(&mut buf, p, seq);
                            tx.send(buf).await.unwrap();
                            seq += 1;
                        }
                    });
                }
                drop(tx);
                tokio::spawn(async move {
                    while let Some(m) = rx.recv().await {
                        tally.take(&m);
                    }
                    tally
                })
                .await
                .unwrap()
            }
            Peer::Flume => {
                let (tx, rx) = flume::bounded::<Vec<u8>>(CAPACITY);
                for p in 0..producers {
                    let (tx, stop) = (tx.clone(), stop.clone());
                    tokio::spawn(async move {
                        let mut seq = 0;
                        while !stop.now(seq) {
                            let mut buf = vec![0u8; size];
                            stamp(&mut buf, p, seq);
                            tx.send_async(buf).await.unwrap();
                            seq += 1;
                        }
                    });
                }
                drop(tx);
                tokio::spawn(async move {
                    while let Ok(m) = rx.recv_async().await {
                        tally.take(&m);
                    }
                    tally
                })
                .await
                .unwrap()
            }
        }
        .finish(&stop)
    });
    let secs = start.elapsed().as_secs_f64();
    if let Some(t) = timer {
        t.join().unwrap();
    }
    (count, secs)
}

/// Median, min and max.
fn spread(v: &[f64]) -> (f64, f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    let med = if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    };
    (med, s[0], s[n - 1])
}

fn main() {
    let cfg = Cfg::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let workers = rt.metrics().num_workers();
    println!(
        "async_peers: {} | capacity {CAPACITY}, Tokio multi-thread runtime, {workers} workers, {} | loadavg {}",
        if cfg.smoke {
            format!("smoke: {SMOKE_MSGS} messages per producer")
        } else {
            format!("{} reps of {:.2} s windows, interleaved", cfg.reps, cfg.window.as_secs_f64())
        },
        std::thread::available_parallelism().map_or(1, |n| n.get()).to_string() + " CPUs",
        std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim(),
    );
    let mut verdicts = Vec::new();
    for &producers in &PRODUCERS {
        for &size in &SIZES {
            let config = format!("{producers}P1C {size} B");
            let peers: Vec<Peer> = PEERS
                .into_iter()
                .filter(|p| {
                    cfg.filter
                        .as_ref()
                        .is_none_or(|f| format!("{config} {}", p.name()).contains(f.as_str()))
                })
                .collect();
            if peers.is_empty() {
                continue;
            }
            // rates[peer][rep], in M msg/s; lines[peer][rep]: the phase
            // probe before and after the row (none in smoke runs)
            let mut rates = vec![Vec::new(); peers.len()];
            let mut lines = vec![Vec::new(); peers.len()];
            for _ in 0..cfg.reps {
                for (i, &peer) in peers.iter().enumerate() {
                    let ((n, secs), line, phase) =
                        method::bracketed(cfg.smoke, || run(&rt, peer, producers, size, &cfg));
                    let rate = n as f64 / secs / 1e6;
                    if !cfg.smoke {
                        eprintln!("  {config} {}: {rate:.2} M msg/s{phase}", peer.name());
                    }
                    rates[i].push(rate);
                    lines[i].push(line);
                }
            }
            println!("\n== {config} ==");
            println!("{:<32} {:>10} {:>19}", "", "M msg/s", "min-max");
            for (i, &peer) in peers.iter().enumerate() {
                let (med, lo, hi) = spread(&rates[i]);
                println!(
                    "{:<32} {med:>10.3} {:>19}",
                    peer.name(),
                    format!("{lo:.3}-{hi:.3}")
                );
            }
            // libeventq's rows over each peer's; the target on recv() (an
            // owned Vec, as the peers deliver), recv_into for information.
            for (e, &ours) in peers.iter().enumerate() {
                if !matches!(ours, Peer::Eventq | Peer::EventqInto) {
                    continue;
                }
                for (i, &peer) in peers.iter().enumerate() {
                    if matches!(peer, Peer::Eventq | Peer::EventqInto) {
                        continue;
                    }
                    let ratios: Vec<f64> =
                        rates[e].iter().zip(&rates[i]).map(|(a, b)| a / b).collect();
                    let (med, lo, hi) = spread(&ratios);
                    let label = |p: Peer| p.name().rsplit(' ').next().unwrap_or("");
                    let short = |p: Peer| p.name().split(' ').next().unwrap_or("");
                    println!(
                        "{:<32} {med:>9.2}x {:>19}",
                        format!("{} / {}", label(ours), short(peer)),
                        format!("{lo:.2}-{hi:.2}")
                    );
                    if ours == Peer::Eventq && peer == Peer::Mpsc {
                        let want = if size >= 1024 { 1.0 } else { 0.7 };
                        let some = |r: &[f64]| r.iter().map(|&x| Some(x)).collect::<Vec<_>>();
                        let figs = method::phased_ratios(
                            &some(&rates[e]),
                            &lines[e],
                            &some(&rates[i]),
                            &lines[i],
                        );
                        verdicts.push((config.clone(), want, (med, lo, hi), figs));
                    }
                }
            }
        }
    }
    println!();
    if cfg.smoke {
        println!("== targets: not evaluated in smoke mode (every message arrived once, whole, in order) ==");
        return;
    }
    println!("== targets: libeventq / tokio::sync::mpsc, per-repetition ratios (noisy when the machine is shared) ==");
    for (config, want, (med, lo, hi), figs) in verdicts {
        let v = if lo >= want {
            "met"
        } else if hi < want {
            "MISSED"
        } else {
            "unsettled"
        };
        let what = format!("{config} AsyncChan vs tokio mpsc");
        println!("{what:<40} {med:.2}x ({lo:.2}-{hi:.2})  target >= {want:.1}x  {v}");
        let mut o = String::new();
        method::phases_line(&mut o, &what, &figs);
        print!("{o}");
    }
}
