// SPDX-License-Identifier: MIT OR Apache-2.0
//! The batch channel source (`Loop::add_chan_batch`): one callback per
//! batch, in order, at most the budget, nothing taken that is not
//! delivered, end of stream once.
use std::sync::Arc;

use eventq::{Chan, Error, Event, Loop, Options, Wait};
use parking_lot::Mutex;

fn msg(i: u32) -> Vec<u8> {
    // Lengths 0..=40: inline and heap messages alike.
    let mut m = i.to_le_bytes().to_vec();
    m.resize(4 + (i % 37) as usize, i as u8);
    if i % 41 == 0 {
        m.clear();
    }
    m
}

#[test]
fn batches_in_order_within_the_budget_then_end_of_stream() {
    let lp = Loop::new().unwrap();
    let chan = Chan::new(Options::new(1024)).unwrap();
    let got = Arc::new(Mutex::new((Vec::<Vec<u8>>::new(), Vec::<usize>::new(), 0)));
    let g = got.clone();
    let id = lp
        .add_chan_batch(&chan, move |lp, _, ev| {
            let mut g = g.lock();
            match ev {
                Event::Batch(b) => {
                    assert!(!b.is_empty());
                    assert_eq!(b.lens().iter().sum::<usize>(), b.data().len());
                    g.1.push(b.len());
                    for m in b.iter() {
                        g.0.push(m.to_vec());
                    }
                }
                Event::Closed => {
                    g.2 += 1;
                    lp.stop();
                }
                other => panic!("unexpected {other:?}"),
            }
            Ok(())
        })
        .unwrap();
    lp.set_budget(id, 100).unwrap();
    for i in 0..1000 {
        chan.send(&msg(i), Wait::Never).unwrap();
    }
    chan.close();
    lp.run().unwrap();
    let g = got.lock();
    assert_eq!(g.0.len(), 1000);
    for (i, m) in g.0.iter().enumerate() {
        assert_eq!(m, &msg(i as u32));
    }
    assert!(g.1.iter().all(|&n| n <= 100), "batches {:?}", g.1);
    assert_eq!(g.1.len(), 10, "1000 queued messages, budget 100: {:?}", g.1);
    assert_eq!(g.2, 1);
}

/// A run_once delivers one batch per ready source and counts it as one
/// callback; what the budget leaves stays queued.
#[test]
fn run_once_counts_a_batch_as_one_callback() {
    let lp = Loop::new().unwrap();
    let chan = Chan::new(Options::new(64)).unwrap();
    let sizes = Arc::new(Mutex::new(Vec::new()));
    let s = sizes.clone();
    let id = lp
        .add_chan_batch(&chan, move |_, _, ev| {
            if let Event::Batch(b) = ev {
                s.lock().push(b.len());
            }
            Ok(())
        })
        .unwrap();
    lp.set_budget(id, 8).unwrap();
    for i in 0..20u32 {
        chan.send(&i.to_le_bytes(), Wait::Never).unwrap();
    }
    assert_eq!(lp.run_once(Some(std::time::Duration::ZERO)).unwrap(), 1);
    assert_eq!(chan.stats().pending, 12);
    assert_eq!(lp.run_once(Some(std::time::Duration::ZERO)).unwrap(), 1);
    assert_eq!(lp.run_once(Some(std::time::Duration::ZERO)).unwrap(), 1);
    assert_eq!(*sizes.lock(), [8, 8, 4]);
}

/// A failing, stopping or removing batch callback leaves the later messages
/// in the channel: every message taken was delivered.
#[test]
fn a_batch_callback_that_fails_stops_or_removes_leaves_the_rest_queued() {
    for how in ["fail", "stop", "remove"] {
        let lp = Loop::new().unwrap();
        let chan = Chan::new(Options::new(64)).unwrap();
        let delivered = Arc::new(Mutex::new(0usize));
        let d = delivered.clone();
        let id = lp
            .add_chan_batch(&chan, move |lp, id, ev| {
                if let Event::Batch(b) = ev {
                    *d.lock() += b.len();
                    match how {
                        "fail" => return Err(Error::from_errno(libc::EIO)),
                        "stop" => lp.stop(),
                        _ => lp.remove(id).unwrap(),
                    }
                }
                Ok(())
            })
            .unwrap();
        lp.set_budget(id, 5).unwrap();
        for i in 0..12u32 {
            chan.send(&i.to_le_bytes(), Wait::Never).unwrap();
        }
        // Posted after the messages: it runs after the first batch unless
        // the stop ends the iteration first.
        lp.post(|lp| lp.stop()).unwrap();
        lp.run().unwrap();
        let delivered = *delivered.lock();
        assert_eq!(delivered, 5, "{how}");
        assert_eq!(chan.stats().pending, 7, "{how}: the rest stays queued");
    }
}

/// End of stream after a batch that ended in a stop comes at the next run.
#[test]
fn end_of_stream_waits_for_a_batch_that_stopped_the_loop() {
    let lp = Loop::new().unwrap();
    let chan = Chan::new(Options::new(64)).unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let l = log.clone();
    lp.add_chan_batch(&chan, move |lp, _, ev| {
        match ev {
            Event::Batch(b) => l.lock().push(b.len()),
            Event::Closed => l.lock().push(0),
            _ => {}
        }
        lp.stop();
        Ok(())
    })
    .unwrap();
    for i in 0..3u32 {
        chan.send(&i.to_le_bytes(), Wait::Never).unwrap();
    }
    chan.close();
    lp.run().unwrap();
    assert_eq!(*log.lock(), [3]);
    lp.run().unwrap();
    assert_eq!(*log.lock(), [3, 0]);
}
