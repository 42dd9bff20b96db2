// SPDX-License-Identifier: MIT OR Apache-2.0
//! The channel's synchronisation primitives, swappable for loom's.
//!
//! Normal builds use std's atomics, parking_lot and the real eventfd. Under
//! `--cfg loom` (`make loom`), the atomics, mutexes and condvars are loom's,
//! so loom explores every interleaving of the channel's real code, and the
//! eventfd is a model of the kernel's: a counter that is "readable" while
//! non-zero.

#[cfg(not(loom))]
pub(crate) use parking_lot::{Condvar, Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};

#[cfg(not(loom))]
pub(crate) use crate::sys::EventFd;

#[cfg(loom)]
pub(crate) use self::model::{Condvar, EventFd, Mutex, MutexGuard};
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// Waiting for another thread to finish a step it has already begun (a
/// sender between claiming a slot and filling it, a receiver between
/// claiming one and emptying it): spin briefly, then yield, because on a
/// small machine the other thread may be preempted.
pub(crate) struct Backoff(u32);

impl Backoff {
    pub(crate) fn new() -> Backoff {
        Backoff(0)
    }

    #[cfg(not(loom))]
    pub(crate) fn snooze(&mut self) {
        if self.0 < 6 {
            for _ in 0..1u32 << self.0 {
                std::hint::spin_loop();
            }
            self.0 += 1;
        } else {
            std::thread::yield_now();
        }
    }

    /// loom must be told about every spin, or it explores it forever.
    #[cfg(loom)]
    pub(crate) fn snooze(&mut self) {
        self.0 += 1;
        loom::thread::yield_now();
    }
}

/// A word of a message stored in its slot. Under loom it is std's atomic,
/// outside the model like `SlotBuf` below: the slot's stamp orders it, and
/// loom checks the stamps.
pub(crate) type PayloadWord = std::sync::atomic::AtomicU64;

/// A slot's message buffer. The slot's stamp already gives one thread at a
/// time the right to touch it, so the lock is never contended: it exists so
/// the ring needs no `unsafe`.
#[cfg(not(loom))]
pub(crate) struct SlotBuf(Mutex<Vec<u8>>);

#[cfg(not(loom))]
impl SlotBuf {
    pub(crate) fn new() -> SlotBuf {
        SlotBuf(Mutex::new(Vec::new()))
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Vec<u8>> {
        self.0.lock()
    }
}

/// Under loom the buffer's lock is std's, outside the model, and must be
/// free when taken: a second holder means the stamps let two threads into
/// one slot, which the model then reports. Keeping it out of the model
/// spares loom two scheduling points per message, which the 3-thread
/// models cannot afford.
#[cfg(loom)]
pub(crate) struct SlotBuf(std::sync::Mutex<Vec<u8>>);

#[cfg(loom)]
impl SlotBuf {
    pub(crate) fn new() -> SlotBuf {
        SlotBuf(std::sync::Mutex::new(Vec::new()))
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, Vec<u8>> {
        self.0
            .try_lock()
            .expect("two threads in one slot: the stamp protocol is broken")
    }
}

/// Keeps a value on its own cache line, so the head (written by receivers)
/// and the tail (written by senders) do not slow each other down.
#[repr(align(128))]
pub(crate) struct CachePadded<T>(pub(crate) T);

impl<T> std::ops::Deref for CachePadded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

#[cfg(loom)]
mod model {
    use std::io;
    use std::ops::{Deref, DerefMut};
    use std::os::fd::{AsRawFd, RawFd};
    use std::time::Instant;

    use loom::sync::atomic::{AtomicU64, Ordering};

    /// loom's mutex with parking_lot's API (no poisoning, `&mut` guards for
    /// condvar waits).
    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

    pub(crate) struct MutexGuard<'a, T>(Option<loom::sync::MutexGuard<'a, T>>);

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Mutex<T> {
            Mutex(loom::sync::Mutex::new(value))
        }

        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            MutexGuard(Some(self.0.lock().unwrap()))
        }

        pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
            self.0.try_lock().ok().map(|g| MutexGuard(Some(g)))
        }
    }

    impl<T> Deref for MutexGuard<'_, T> {
        type Target = T;
        fn deref(&self) -> &T {
            self.0.as_ref().unwrap()
        }
    }

    impl<T> DerefMut for MutexGuard<'_, T> {
        fn deref_mut(&mut self) -> &mut T {
            self.0.as_mut().unwrap()
        }
    }

    pub(crate) struct Condvar(loom::sync::Condvar);

    impl Condvar {
        pub(crate) fn new() -> Condvar {
            Condvar(loom::sync::Condvar::new())
        }

        pub(crate) fn wait<T>(&self, guard: &mut MutexGuard<'_, T>) {
            let inner = guard.0.take().unwrap();
            guard.0 = Some(self.0.wait(inner).unwrap());
        }

        /// loom has no clock: a timed wait is modelled as a wait that may
        /// also end spuriously, which the callers' re-check loops handle.
        pub(crate) fn wait_until<T>(&self, guard: &mut MutexGuard<'_, T>, _deadline: Instant) {
            self.wait(guard);
        }

        pub(crate) fn notify_one(&self) -> bool {
            self.0.notify_one();
            true
        }

        pub(crate) fn notify_all(&self) -> usize {
            self.0.notify_all();
            0
        }
    }

    /// The kernel's eventfd as the channel uses it: a counter, readable
    /// while non-zero, plus the number of writes ever made, which is what
    /// an edge-triggered waiter (EPOLLET, Go's netpoller) sees: each write
    /// is an event, whether or not the counter was already non-zero.
    #[derive(Debug)]
    pub(crate) struct EventFd {
        counter: AtomicU64,
        writes: AtomicU64,
    }

    impl EventFd {
        pub(crate) fn new() -> io::Result<EventFd> {
            Ok(EventFd {
                counter: AtomicU64::new(0),
                writes: AtomicU64::new(0),
            })
        }

        /// A transition to raised: the protocol makes one only while the
        /// counter is 0; checked here so loom reports any interleaving that
        /// breaks it.
        pub(crate) fn raise(&self) {
            self.writes.fetch_add(1, Ordering::SeqCst);
            let before = self.counter.fetch_add(1, Ordering::SeqCst);
            assert_eq!(before, 0, "doorbell raised while already raised");
        }

        /// An edge for waiters, raised or not.
        pub(crate) fn pulse(&self) {
            self.writes.fetch_add(1, Ordering::SeqCst);
            self.counter.fetch_add(1, Ordering::SeqCst);
        }

        pub(crate) fn lower(&self) {
            self.counter.swap(0, Ordering::SeqCst);
        }

        pub(crate) fn is_raised(&self) -> bool {
            self.counter.load(Ordering::SeqCst) != 0
        }

        pub(crate) fn writes(&self) -> u64 {
            self.writes.load(Ordering::SeqCst)
        }
    }

    impl AsRawFd for EventFd {
        fn as_raw_fd(&self) -> RawFd {
            -1
        }
    }
}
