// SPDX-License-Identifier: MIT OR Apache-2.0
//! Producers on threads, one loop receiving every message, then the end of
//! the stream: examples-c/quickstart.c in Rust, with the library's own loop
//! in place of a hand-made epoll set.
//!
//! `cargo run --example quickstart`
use eventq::{Chan, Event, Loop, Options, Wait};

fn main() -> eventq::Result<()> {
    let chan = Chan::new(Options::new(16))?;
    let producers: Vec<_> = ["one", "two", "three"]
        .into_iter()
        .map(|name| {
            let tx = chan.clone(); // each thread its own handle
            std::thread::spawn(move || -> eventq::Result<()> {
                for i in 0..4 {
                    tx.send(format!("{name} #{i}").as_bytes(), Wait::Forever)?;
                }
                Ok(())
            })
        })
        .collect();
    // Closes once every producer is done: the loop sees the end of the
    // stream after the last message.
    let closer = {
        let chan = chan.clone();
        std::thread::spawn(move || -> eventq::Result<()> {
            for p in producers {
                p.join().expect("producer panicked")?;
            }
            chan.close();
            Ok(())
        })
    };

    let lp = Loop::new()?;
    let mut received = 0;
    lp.add_chan(&chan, move |lp, _id, ev| {
        match ev {
            // Each message once, whole; in order from each producer.
            Event::Message(m) => {
                received += 1;
                println!("received {}", String::from_utf8_lossy(m));
            }
            Event::Closed => {
                println!("end of stream after {received} messages");
                lp.stop();
            }
            _ => {}
        }
        Ok(())
    })?;
    lp.run()?;
    closer.join().expect("closer panicked")
}
