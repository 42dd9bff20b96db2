// SPDX-License-Identifier: MIT OR Apache-2.0
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use eventq::{Chan, Event, Loop, Options, Wait};

#[test]
fn chan_source_delivers_each_message_then_end_of_stream() {
    let lp = Loop::new().unwrap();
    let chan = Chan::new(Options::new(64)).unwrap();
    let got = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let g = got.clone();
    lp.add_chan(&chan, move |lp, _, ev| {
        match ev {
            Event::Message(m) => g.lock().push(m.to_vec()),
            Event::Closed => lp.stop(),
            _ => unreachable!(),
        }
        Ok(())
    })
    .unwrap();
    let producer = {
        let chan = chan.clone();
        std::thread::spawn(move || {
            for i in 0..1000u32 {
                chan.send(&i.to_le_bytes(), Wait::Forever).unwrap();
            }
            chan.close();
        })
    };
    lp.run().unwrap();
    producer.join().unwrap();
    let got = got.lock();
    assert_eq!(got.len(), 1000);
    for (i, m) in got.iter().enumerate() {
        assert_eq!(m, &(i as u32).to_le_bytes());
    }
}

#[test]
fn removing_another_source_in_the_same_batch_stops_its_callback() {
    let lp = Loop::new().unwrap();
    let a = Chan::new(Options::new(4)).unwrap();
    let b = Chan::new(Options::new(4)).unwrap();
    a.send(b"a", Wait::Never).unwrap();
    b.send(b"b", Wait::Never).unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let ids = Arc::new(parking_lot::Mutex::new(Vec::new()));
    for chan in [&a, &b] {
        let (calls, ids2) = (calls.clone(), ids.clone());
        let id = lp
            .add_chan(chan, move |lp, me, _| {
                calls.fetch_add(1, Ordering::SeqCst);
                for &other in ids2.lock().iter() {
                    if other != me {
                        lp.remove(other).unwrap();
                    }
                }
                Ok(())
            })
            .unwrap();
        ids.lock().push(id);
    }
    // Both fds are ready, so one epoll_wait returns both events.
    lp.run_once(Some(Duration::ZERO)).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[test]
fn posts_run_in_order_and_stop_from_another_thread() {
    let lp = Loop::new().unwrap();
    let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let h = lp.handle();
    let s = seen.clone();
    let t = std::thread::spawn(move || {
        for i in 0..500 {
            let s = s.clone();
            h.post(move |_| s.lock().push(i)).unwrap();
        }
        h.stop();
    });
    t.join().unwrap();
    lp.run().unwrap();
    // stop came after the posts; run may return before running them all, so
    // drain the rest.
    while seen.lock().len() < 500 {
        lp.run_once(None).unwrap();
    }
    assert_eq!(*seen.lock(), (0..500).collect::<Vec<_>>());
}

#[test]
fn periodic_timer_counts_expirations() {
    let lp = Loop::new().unwrap();
    let total = Arc::new(AtomicUsize::new(0));
    let t = total.clone();
    lp.add_timer(
        Duration::from_micros(100),
        Duration::from_micros(100),
        move |lp, _, ev| {
            let Event::Timer(n) = ev else { unreachable!() };
            if t.fetch_add(n as usize, Ordering::SeqCst) + n as usize >= 20 {
                lp.stop();
            }
            Ok(())
        },
    )
    .unwrap();
    lp.run().unwrap();
    assert!(total.load(Ordering::SeqCst) >= 20);
}
