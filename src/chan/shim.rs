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

/// Waiting for another thread to finish a step it has already begun (a
/// sender between claiming a slot and filling it, a receiver between
/// claiming one and emptying it): spin briefly, then yield, because on a
/// small machine the other thread may be preempted.
pub(super) struct Backoff(u32);

/// `snooze`'s doublings before it yields: at most 2^SPIN_STEPS pause
/// hints a look.
#[cfg(not(loom))]
const SPIN_STEPS: u32 = 6;

impl Backoff {
    pub(super) fn new() -> Backoff {
        Backoff(0)
    }

    #[cfg(not(loom))]
    pub(super) fn snooze(&mut self) {
        if self.0 < SPIN_STEPS {
            for _ in 0..1u32 << self.0 {
                std::hint::spin_loop();
            }
            self.0 += 1;
        } else {
            std::thread::yield_now();
        }
    }

    /// A receiver at a slot its sender is still filling has caught up with
    /// the sender. Each look pulls the slot's line away from the sender
    /// mid-write, so it waits `snooze`'s whole spin before it looks again
    /// (and then yields): the sender finishes and gets a few messages
    /// ahead, taken next in a run. Measured in decision 0026.
    #[cfg(not(loom))]
    pub(super) fn wait_for_writer(&mut self) {
        if self.0 < SPIN_STEPS {
            for _ in 0..1u32 << SPIN_STEPS {
                std::hint::spin_loop();
            }
            self.0 = SPIN_STEPS;
        } else {
            std::thread::yield_now();
        }
    }

    /// loom: as `snooze`.
    #[cfg(loom)]
    pub(super) fn wait_for_writer(&mut self) {
        self.snooze();
    }

    /// After a lost race for a word (another thread moved it: progress):
    /// a growing pause before the next try, so that threads contending
    /// for one line take turns instead of pulling it back and forth.
    #[cfg(not(loom))]
    pub(super) fn spin_light(&mut self) {
        for _ in 0..1u32 << self.0.min(SPIN_STEPS) {
            std::hint::spin_loop();
        }
        self.0 += 1;
    }

    /// A lost race is another thread's progress: nothing for loom to yield.
    #[cfg(loom)]
    pub(super) fn spin_light(&mut self) {}

    /// loom must be told about every spin, or it explores it forever.
    #[cfg(loom)]
    pub(super) fn snooze(&mut self) {
        self.0 += 1;
        loom::thread::yield_now();
    }
}

/// A blocking receive's look before it parks: a receiver that sleeps
/// takes tens of microseconds to run again, and a sender on another CPU
/// often has the next message ready within a few: spin briefly, then
/// yield (crossbeam's schedule: 127 pause hints, then 4 yields). loom
/// explores no spin: each look is a receive it explores anyway.
pub(super) struct Spin(u32);

impl Spin {
    pub(super) fn new() -> Spin {
        Spin(0)
    }

    /// Waits a little and returns true, or false once the spin is spent.
    #[cfg(not(loom))]
    pub(super) fn again(&mut self) -> bool {
        const SPINS: u32 = 6;
        const YIELDS: u32 = 10;
        if self.0 > YIELDS {
            return false;
        }
        if self.0 <= SPINS {
            for _ in 0..1u32 << self.0 {
                std::hint::spin_loop();
            }
        } else {
            std::thread::yield_now();
        }
        self.0 += 1;
        true
    }

    #[cfg(loom)]
    pub(super) fn again(&mut self) -> bool {
        false
    }
}

/// A blocking call's wait before it parks, when no other call of its kind
/// waits with it: it looks again after `LOOK`, up to `LOOKS` times. A
/// parked thread takes tens of microseconds to run again (its CPU may have
/// gone idle), where the thread on the other side usually queues messages
/// or frees room within a few; and a look every few microseconds, not a
/// spin on the ring's lines, lets that thread work undisturbed and leaves
/// a batch to take in a run. Between looks it yields, so a peer that
/// shares its CPU runs. Where lingering has not paid lately (its side's
/// `LingerRecord`), a wait parks at once: on a mostly idle channel each
/// linger is CPU spent for nothing. loom explores no wait: each look is a
/// call it explores anyway. Measured in decision 0031.
#[cfg_attr(loom, allow(dead_code))]
pub(super) struct Linger<'a> {
    record: &'a LingerRecord,
    start: Option<std::time::Instant>,
    looks: u32,
    /// Spent, skipped or cut short by a deadline: no more looks, and
    /// nothing to record when dropped.
    over: bool,
}

/// Between looks: at 1P1C an 8-byte sender queues a few hundred messages
/// meanwhile (a look every microsecond took them thirty at a time).
#[cfg(not(loom))]
const LOOK: std::time::Duration = std::time::Duration::from_micros(4);
/// Looks before parking: 16 microseconds in all, about a wake-up's cost.
#[cfg(not(loom))]
const LOOKS: u32 = 4;
/// Waits in a row whose linger ended in parking (or that parked at once),
/// after which a side's waits park at once...
#[cfg_attr(loom, allow(dead_code))]
const MISSES: u32 = 32;
/// ...except every `PROBE`-th, which lingers still, so that a channel
/// busy again is found within that many waits.
#[cfg_attr(loom, allow(dead_code))]
const PROBE: u32 = 16;

/// How a side's (receives' or sends') recent lingers went, shared by its
/// calls: waits since the last linger that caught what it waited for.
/// Only a hint (relaxed, races lose an update at worst): std's atomic, not
/// loom's, like `Parking`'s counts.
pub(super) struct LingerRecord(std::sync::atomic::AtomicU32);

#[cfg_attr(loom, allow(dead_code))]
impl LingerRecord {
    pub(super) fn new() -> LingerRecord {
        LingerRecord(std::sync::atomic::AtomicU32::new(0))
    }

    fn misses(&self) -> u32 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn missed(&self, misses: u32) {
        self.0
            .store(misses.wrapping_add(1), std::sync::atomic::Ordering::Relaxed);
    }

    fn caught(&self) {
        if self.misses() != 0 {
            self.0.store(0, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Whether a wait with this record should linger.
    fn pays(misses: u32) -> bool {
        misses < MISSES || misses % PROBE == 0
    }
}

impl<'a> Linger<'a> {
    pub(super) fn new(record: &'a LingerRecord) -> Linger<'a> {
        Linger {
            record,
            start: None,
            looks: 0,
            over: false,
        }
    }

    /// Waits until the next look is due and returns true, or returns
    /// false once the looks are spent, lingering has not paid lately, or
    /// `deadline` would pass first.
    #[cfg(not(loom))]
    pub(super) fn again(&mut self, deadline: Option<std::time::Instant>) -> bool {
        if self.over {
            return false;
        }
        let start = match self.start {
            Some(t) => t,
            None => {
                let misses = self.record.misses();
                if !LingerRecord::pays(misses) {
                    self.record.missed(misses);
                    self.over = true;
                    return false;
                }
                *self.start.insert(std::time::Instant::now())
            }
        };
        if self.looks >= LOOKS {
            self.record.missed(self.record.misses());
            self.over = true;
            return false;
        }
        self.looks += 1;
        let due = start + LOOK * self.looks;
        if deadline.is_some_and(|d| d < due) {
            self.over = true;
            return false;
        }
        while std::time::Instant::now() < due {
            std::thread::yield_now();
        }
        true
    }

    #[cfg(loom)]
    pub(super) fn again(&mut self, _deadline: Option<std::time::Instant>) -> bool {
        false
    }
}

/// A linger that looked and was not over when the call stopped waiting
/// caught what it waited for (or the close): it pays.
#[cfg(not(loom))]
impl Drop for Linger<'_> {
    fn drop(&mut self) {
        if self.looks > 0 && !self.over {
            self.record.caught();
        }
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::{Linger, LingerRecord, LOOKS, MISSES, PROBE};

    /// A wait that lingers until its looks are spent.
    fn miss(record: &LingerRecord) -> u32 {
        let mut linger = Linger::new(record);
        let mut looks = 0;
        while linger.again(None) {
            looks += 1;
        }
        looks
    }

    /// Lingers that keep missing stop lingering, but for a probe every
    /// `PROBE` waits; one that catches makes the next wait linger again.
    #[test]
    fn lingers_only_while_they_pay() {
        let record = LingerRecord::new();
        for _ in 0..MISSES {
            assert_eq!(miss(&record), LOOKS);
        }
        // Then one wait in every PROBE lingers, the others park at once.
        let looks: Vec<u32> = (0..2 * PROBE).map(|_| miss(&record)).collect();
        let probes: Vec<usize> = (0..looks.len()).filter(|&i| looks[i] > 0).collect();
        assert_eq!(probes.len(), 2, "{looks:?}");
        assert_eq!(probes[1] - probes[0], PROBE as usize, "{looks:?}");
        assert!(looks.iter().all(|&l| l == 0 || l == LOOKS), "{looks:?}");
        // A probe that catches: the wait looked once, then took its message.
        let mut linger = Linger::new(&record);
        while record.misses() % PROBE != 0 {
            assert!(!linger.again(None));
            linger = Linger::new(&record);
        }
        assert!(linger.again(None));
        drop(linger);
        assert_eq!(record.misses(), 0);
        assert_eq!(miss(&record), LOOKS);
    }

    /// A deadline that comes before the next look ends the linger without
    /// counting it either way.
    #[test]
    fn a_deadline_cuts_the_linger_unrecorded() {
        let record = LingerRecord::new();
        let mut linger = Linger::new(&record);
        assert!(!linger.again(Some(std::time::Instant::now())));
        assert!(!linger.again(None));
        drop(linger);
        assert_eq!(record.misses(), 0);
    }
}
