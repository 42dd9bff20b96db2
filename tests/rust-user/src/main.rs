// SPDX-License-Identifier: MIT OR Apache-2.0
//! A user's program: producers on threads, a loop receiving every message.
use eventq::{Chan, Event, Loop, Options, Wait};

fn main() -> eventq::Result<()> {
    let lp = Loop::new()?;
    let chan = Chan::new(Options::new(8))?;
    let producers: Vec<_> = (0..4u8)
        .map(|p| {
            let tx = chan.clone();
            std::thread::spawn(move || {
                for i in 0..1000u32 {
                    let mut m = vec![p];
                    m.extend_from_slice(&i.to_le_bytes());
                    tx.send(&m, Wait::Forever).expect("send");
                }
            })
        })
        .collect();
    let mut next = [0u32; 4];
    lp.add_chan(&chan, move |lp, _, ev| {
        match ev {
            Event::Message(m) => {
                let (p, i) = (m[0] as usize, u32::from_le_bytes(m[1..5].try_into().unwrap()));
                assert_eq!(i, next[p], "producer {p}: out of order or lost");
                next[p] += 1;
            }
            Event::Closed => {
                assert_eq!(next, [1000; 4], "every message once");
                lp.stop();
            }
            _ => {}
        }
        Ok(())
    })?;
    let closer = std::thread::spawn(move || {
        for p in producers {
            p.join().unwrap();
        }
        chan.close();
    });
    lp.run()?;
    closer.join().unwrap();
    println!("rust-user: 4000 messages from 4 threads through a loop, each once and in order");

    // A second, semver-incompatible eventq in the same program: the crate
    // has no `links` key and, without its C ABI, no symbol of its own.
    let next = eventq_next::Chan::new(eventq_next::Options::new(1)).expect("eventq 99 new");
    next.send(b"next", eventq_next::Wait::Never).expect("eventq 99 send");
    assert_eq!(next.recv(eventq_next::Wait::Never).expect("eventq 99 recv"), b"next");
    println!("rust-user: two versions of eventq side by side (this one, and a copy numbered 99.0.0)");
    Ok(())
}
