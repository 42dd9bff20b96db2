// SPDX-License-Identifier: MIT OR Apache-2.0
//! The channel's synchronisation primitives, swappable for loom's.
//!
//! Normal builds use std's atomics, parking_lot and the real eventfd. Under
//! `--cfg loom` (`make loom`), the atomics, mutexes and condvars are loom's,
//! so loom explores every interleaving of the channel's real code, and the
//! eventfd is a model of the kernel's: a counter that is "readable" while
//! non-zero, which also counts its writes (an edge-triggered waiter's
//! events).

#[cfg(not(loom))]
pub(super) use parking_lot::{Condvar, Mutex, MutexGuard};
#[cfg(not(loom))]
pub(super) use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};

#[cfg(not(loom))]
pub(super) use crate::sys::EventFd;

#[cfg(loom)]
pub(super) use self::model::{Condvar, EventFd, Mutex, MutexGuard};
#[cfg(loom)]
pub(super) use loom::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};

#[cfg(loom)]
mod model {
    use std::io;
    use std::ops::{Deref, DerefMut};
    use std::os::fd::{AsRawFd, RawFd};
    use std::time::Instant;

    use loom::sync::atomic::{AtomicU64, Ordering};

    /// loom's mutex with parking_lot's API (no poisoning, `&mut` guards for
    /// condvar waits).
    pub(in crate::chan) struct Mutex<T>(loom::sync::Mutex<T>);

    pub(in crate::chan) struct MutexGuard<'a, T>(Option<loom::sync::MutexGuard<'a, T>>);

    impl<T> Mutex<T> {
        pub(in crate::chan) fn new(value: T) -> Mutex<T> {
            Mutex(loom::sync::Mutex::new(value))
        }

        pub(in crate::chan) fn lock(&self) -> MutexGuard<'_, T> {
            MutexGuard(Some(self.0.lock().unwrap()))
        }

        pub(in crate::chan) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
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

    pub(in crate::chan) struct Condvar(loom::sync::Condvar);

    impl Condvar {
        pub(in crate::chan) fn new() -> Condvar {
            Condvar(loom::sync::Condvar::new())
        }

        pub(in crate::chan) fn wait<T>(&self, guard: &mut MutexGuard<'_, T>) {
            let inner = guard.0.take().unwrap();
            guard.0 = Some(self.0.wait(inner).unwrap());
        }

        /// loom has no clock: a timed wait is modelled as a wait that may
        /// also end spuriously, which the callers' re-check loops handle.
        pub(in crate::chan) fn wait_until<T>(
            &self,
            guard: &mut MutexGuard<'_, T>,
            _deadline: Instant,
        ) {
            self.wait(guard);
        }

        pub(in crate::chan) fn notify_one(&self) -> bool {
            self.0.notify_one();
            true
        }

        pub(in crate::chan) fn notify_all(&self) -> usize {
            self.0.notify_all();
            0
        }
    }

    /// The kernel's eventfd as the channel uses it: a counter, readable
    /// while non-zero, plus the number of writes ever made, which is what
    /// an edge-triggered waiter (EPOLLET, Go's netpoller) sees: each write
    /// is an event, whether or not the counter was already non-zero.
    #[derive(Debug)]
    pub(in crate::chan) struct EventFd {
        counter: AtomicU64,
        writes: AtomicU64,
    }

    impl EventFd {
        pub(in crate::chan) fn new() -> io::Result<EventFd> {
            Ok(EventFd {
                counter: AtomicU64::new(0),
                writes: AtomicU64::new(0),
            })
        }

        /// A transition to raised: the protocol makes one only while the
        /// counter is 0; checked here so loom reports any interleaving that
        /// breaks it.
        /// The counter moves before the write is counted, so that a
        /// `registered` that counts the write also sees the counter.
        pub(in crate::chan) fn raise(&self) {
            let before = self.counter.fetch_add(1, Ordering::SeqCst);
            self.writes.fetch_add(1, Ordering::SeqCst);
            assert_eq!(before, 0, "doorbell raised while already raised");
        }

        /// An edge for waiters, raised or not.
        pub(in crate::chan) fn pulse(&self) {
            self.counter.fetch_add(1, Ordering::SeqCst);
            self.writes.fetch_add(1, Ordering::SeqCst);
        }

        /// What an edge-triggered waiter registering the fd now has seen:
        /// the writes so far, and whether it is raised (which the
        /// registration reports as an event). Read-modify-writes, which
        /// read the latest values; the kernel's eventfd changes both at
        /// once, the model one after the other (see `raise`).
        pub(in crate::chan) fn registered(&self) -> (u64, bool) {
            let writes = self.writes.fetch_or(0, Ordering::SeqCst);
            (writes, self.counter.fetch_or(0, Ordering::SeqCst) != 0)
        }

        pub(in crate::chan) fn lower(&self) {
            self.counter.swap(0, Ordering::SeqCst);
        }

        pub(in crate::chan) fn is_raised(&self) -> bool {
            self.counter.load(Ordering::SeqCst) != 0
        }

        pub(in crate::chan) fn writes(&self) -> u64 {
            self.writes.load(Ordering::SeqCst)
        }
    }

    impl AsRawFd for EventFd {
        fn as_raw_fd(&self) -> RawFd {
            -1
        }
    }
}
