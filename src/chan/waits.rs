// SPDX-License-Identifier: MIT OR Apache-2.0
//! How a call waits a little before it tries again or parks: `Backoff`
//! for a step another thread has begun, `Spin` for a receive with company,
//! `Linger` (with its side's `LingerRecord`) for a lone blocking call. Under
//! loom none of them waits: loom explores every look anyway.

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::time::Instant;

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
    start: Option<Instant>,
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
pub(super) struct LingerRecord(AtomicU32);

#[cfg_attr(loom, allow(dead_code))]
impl LingerRecord {
    pub(super) fn new() -> LingerRecord {
        LingerRecord(AtomicU32::new(0))
    }

    fn misses(&self) -> u32 {
        self.0.load(Relaxed)
    }

    /// A load and a store, not a read-modify-write: a lost count is
    /// harmless, a locked instruction per wait is not needed.
    fn missed(&self) {
        self.0.store(self.misses().wrapping_add(1), Relaxed);
    }

    fn caught(&self) {
        if self.misses() != 0 {
            self.0.store(0, Relaxed);
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
    pub(super) fn again(&mut self, deadline: Option<Instant>) -> bool {
        if self.over {
            return false;
        }
        let start = match self.start {
            Some(t) => t,
            None => {
                if !LingerRecord::pays(self.record.misses()) {
                    self.record.missed();
                    self.over = true;
                    return false;
                }
                *self.start.insert(Instant::now())
            }
        };
        if self.looks >= LOOKS {
            self.record.missed();
            self.over = true;
            return false;
        }
        self.looks += 1;
        let due = start + LOOK * self.looks;
        if deadline.is_some_and(|d| d < due) {
            self.over = true;
            return false;
        }
        while Instant::now() < due {
            std::thread::yield_now();
        }
        true
    }

    #[cfg(loom)]
    pub(super) fn again(&mut self, _deadline: Option<Instant>) -> bool {
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
