// SPDX-License-Identifier: MIT OR Apache-2.0
//! Posts and stop: the task queue other threads feed, the wake eventfd that
//! tells the loop about it, and the stop that raises the same fd.
//!
//! The wake eventfd sits in the epoll set under a reserved key, outside the
//! source table (libuv's async handle, mio's waker). A post raises it only
//! when the queue goes from empty to non-empty, so a burst of posts costs
//! one write; a stop raises it too, so a blocked wait returns.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;

use super::{Loop, Shared};
use crate::error::{Error, Result};

/// Pending posts a loop holds before `post` fails with `WouldBlock`.
pub const POST_CAPACITY: usize = 4096;

/// Posts run per iteration, so posts made by posts cannot starve the rest.
const POST_BUDGET: usize = 64;

pub(super) type Task = Box<dyn FnOnce(&Loop) + Send>;

impl Shared {
    /// Queues a task; raises the wake fd only when the queue leaves empty,
    /// so a burst of posts costs one write (libuv's async coalescing).
    pub(super) fn post(&self, task: Task) -> Result<()> {
        let mut posts = self.posts.lock();
        if posts.len() >= POST_CAPACITY {
            return Err(Error::WouldBlock);
        }
        posts.push_back(task);
        if posts.len() == 1 {
            // Under the lock, so `run_posts`' lower cannot slip in between
            // and leave a task without its wake-up.
            self.wake.write(1)?;
        }
        Ok(())
    }

    /// Makes the wake fd readable iff posts are pending (a consumed stop
    /// leaves nothing else to wake for).
    pub(super) fn settle_wake(&self) {
        let posts = self.posts.lock();
        self.wake.lower();
        if !posts.is_empty() {
            let _ = self.wake.write(1);
        }
    }

    pub(super) fn stop(&self) {
        self.stop_pending.store(true, Ordering::Release);
        self.stop_count.fetch_add(1, Ordering::AcqRel);
        // Wake a blocked epoll_wait. A second raise only adds to the
        // counter, which the next lower clears.
        let _ = self.wake.write(1);
    }

    /// Consumes a pending stop: whether there was one.
    pub(super) fn take_stop(&self) -> bool {
        self.stop_pending.swap(false, Ordering::AcqRel)
    }

    /// The stop counter now: an iteration keeps it to see a stop made
    /// while it runs (see [`Loop::stopped`]).
    pub(super) fn stops_now(&self) -> u64 {
        self.stop_count.load(Ordering::Acquire)
    }
}

impl Loop {
    /// Whether `stop` was called since the stop counter read `stops_seen`.
    pub(super) fn stopped(&self, stops_seen: u64) -> bool {
        self.shared.stops_now() != stops_seen
    }

    /// The wake eventfd came up: runs pending posts in order, at most
    /// [`POST_BUDGET`], until a stop. The fd is lowered first, under the
    /// queue lock, so a post made meanwhile either is run here or raises it
    /// again; what is left (budget, stop) raises it again for the next
    /// iteration. A stop's raise is consumed here too: its flag stays set
    /// for `run`, and a `run_once` caller (an embedding loop) is not woken
    /// forever.
    pub(super) fn run_posts(&self, stops_seen: u64) -> usize {
        {
            let _posts = self.shared.posts.lock();
            self.shared.wake.lower();
        }
        let mut calls = 0;
        while calls < POST_BUDGET && !self.stopped(stops_seen) {
            let Some(task) = self.shared.posts.lock().pop_front() else {
                return calls;
            };
            calls += 1;
            let _ = catch_unwind(AssertUnwindSafe(|| task(self)));
        }
        self.shared.settle_wake();
        calls
    }
}
