// SPDX-License-Identifier: MIT OR Apache-2.0
//! A channel source's dispatch: one callback per message, straight from the
//! channel's receive, at most a budget per iteration.
//!
//! The rules:
//! - A message is taken only to be delivered: `Chan::recv_each` takes the
//!   next one only if the dispatch asks for it, so a stop, a removal or a
//!   failing callback leaves every later message in the channel.
//! - The budget bounds messages per iteration; the rest keep the fd
//!   readable, so the other ready sources have their turn first.
//! - A lone source under `run` (the loop's only source, no post pending)
//!   has nobody to give a turn to: its next budget follows without an
//!   `epoll_wait`, which would only report it again.
//! - A dispatch that ends with messages left hands the wake on to another
//!   loop consuming the channel (`LoopConsumer::pass_on`, D4).
//! - A batch source (`Loop::add_chan_batch`) takes the messages of one
//!   budget into one buffer, in order, and calls back once for them all;
//!   since no callback runs while they are taken, every message taken is
//!   delivered, as for the one-at-a-time form.
//! - After a closed channel is drained the callback runs once more with
//!   `Event::Closed` and the source is disabled, since its fd would stay
//!   readable forever.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;

use parking_lot::MutexGuard;

use super::event::{panicked, Batch, Event};
use super::table::{Kind, SourceId, Table};
use super::Loop;
use crate::chan::EachEnd;

/// Channel messages a channel source delivers per iteration unless set
/// otherwise: enough that the `epoll_wait` between batches costs a few
/// percent of a message's time, few enough that other ready sources wait at
/// most that many callbacks (docs/decisions/0014-loop-budget-256.md).
pub const DEFAULT_BUDGET: usize = 256;

impl Loop {
    /// Delivers up to the source's budget of messages, one callback each,
    /// stopping early if the source is removed or disabled by a callback,
    /// or the loop is stopped. With `lone_source_may_go_on`, while this is
    /// the loop's only source and no post is pending, another budget follows
    /// without an `epoll_wait`. Returns how many callbacks ran.
    pub(super) fn dispatch_chan(
        &self,
        mut table: MutexGuard<'_, Table>,
        id: SourceId,
        stops_seen: u64,
        lone_source_may_go_on: bool,
    ) -> usize {
        let Some(entry) = table.get_mut(id) else {
            return 0;
        };
        let Kind::Chan {
            consumer,
            closed_delivered,
            batch,
        } = &entry.kind
        else {
            return 0;
        };
        let batch = *batch;
        if *closed_delivered {
            // Re-enabled after end of stream, which is delivered once.
            let _ = self.apply_enabled(entry, id, false);
            return 0;
        }
        // Held through the dispatch: a callback removing its own source
        // leaves this consumer counted until the dispatch has passed the
        // wake on.
        let consumer = consumer.clone();
        let budget = entry.budget;
        let Some(mut cb) = entry.callback.take() else {
            return 0;
        };
        table.running = Some(id);
        drop(table);
        let chan = consumer.chan();
        let mut spare = std::mem::take(&mut *self.shared.spare.lock());
        let mut packed = if batch {
            std::mem::take(&mut *self.shared.batch.lock())
        } else {
            (Vec::new(), Vec::new())
        };
        let mut disables_seen = self.shared.disable_count.load(Ordering::Acquire);
        let mut calls = 0;
        let mut result = Ok(());
        // Set when the dispatch itself ends the batch (failure, stop,
        // removal), as opposed to the budget or the queue ending it.
        let mut cut_short = false;
        let end = loop {
            if batch {
                // The batch form: every message the budget allows, taken in
                // order into one buffer, then one callback for them all. No
                // callback runs while they are taken, so none is left
                // undelivered by a stop, removal or failure.
                let (data, lens) = &mut packed;
                data.clear();
                lens.clear();
                let (n, end) = chan.recv_each(&mut spare, budget, |msg| {
                    data.extend_from_slice(msg);
                    lens.push(msg.len());
                    true
                });
                if n > 0 {
                    calls += 1;
                    let ev = Event::Batch(Batch::new(data, lens));
                    if let Err(e) = self.call(&mut cb, id, ev) {
                        result = Err(e);
                        cut_short = true;
                    } else if self.stopped(stops_seen) {
                        cut_short = true;
                    } else {
                        let now = self.shared.disable_count.load(Ordering::Acquire);
                        if now != disables_seen {
                            disables_seen = now;
                            cut_short = !self.is_live(id);
                        }
                    }
                }
                if end == EachEnd::Stopped {
                    consumer.pass_on();
                }
                if end != EachEnd::Stopped
                    || cut_short
                    || !lone_source_may_go_on
                    || self.stopped(stops_seen)
                    || !self.nothing_else_to_do()
                {
                    break end;
                }
                continue;
            }
            // One catch_unwind for the whole batch rather than one per
            // message (`call`), which costs a store-forwarding stall per
            // call. A panic leaves the channel consistent: `recv_each`
            // delivers a message only after it is out of the ring.
            let each = catch_unwind(AssertUnwindSafe(|| {
                chan.recv_each(&mut spare, budget, |msg| {
                    calls += 1;
                    // Moved only on failure: copying the whole result after
                    // every call would cost on every message.
                    if let Err(e) = cb(self, id, Event::Message(msg)) {
                        result = Err(e);
                        cut_short = true;
                    } else if self.stopped(stops_seen) {
                        cut_short = true;
                    } else {
                        // A callback may have removed or disabled this source
                        // (or another thread did): only then is the table
                        // worth a look.
                        let now = self.shared.disable_count.load(Ordering::Acquire);
                        if now != disables_seen {
                            disables_seen = now;
                            cut_short = !self.is_live(id);
                        }
                    }
                    !cut_short
                })
            }));
            let end = match each {
                Ok((_, end)) => end,
                Err(_) => {
                    result = Err(panicked());
                    break EachEnd::Stopped;
                }
            };
            // The budget ran out with messages left. With other sources (or
            // posts) they wait for the next `epoll_wait`; a `run` whose only
            // source this is goes on without one. Either way (and when a
            // stop, failure or removal cut the batch short) another loop on
            // this channel, asleep, may take what is left: wake it.
            if end == EachEnd::Stopped {
                consumer.pass_on();
            }
            if end != EachEnd::Stopped
                || cut_short
                || !lone_source_may_go_on
                || self.stopped(stops_seen)
                || !self.nothing_else_to_do()
            {
                break end;
            }
        };
        // A batch callback that failed, stopped the loop or removed its
        // source after the channel's last message gets end of stream at its
        // next dispatch (the channel stays closed and drained).
        if end == EachEnd::Closed && !cut_short {
            calls += 1;
            result = self.call(&mut cb, id, Event::Closed);
            if let Some(entry) = self.shared.table.lock().get_mut(id) {
                if let Kind::Chan {
                    closed_delivered, ..
                } = &mut entry.kind
                {
                    *closed_delivered = true;
                }
                let _ = self.apply_enabled(entry, id, false);
            }
        }
        *self.shared.spare.lock() = spare;
        if batch {
            *self.shared.batch.lock() = packed;
        }
        self.finish(id, cb, result);
        calls
    }

    /// Whether the loop has one source and no pending post: then no other
    /// work can be ready, and a busy channel source needs no `epoll_wait`
    /// between two budgets (a stop is checked after every callback).
    fn nothing_else_to_do(&self) -> bool {
        let sources = self.shared.table.lock().len();
        // One lock at a time: nothing else nests these two.
        sources == 1 && self.shared.posts.lock().is_empty()
    }

    /// Whether the source still exists and is enabled.
    fn is_live(&self, id: SourceId) -> bool {
        self.shared
            .table
            .lock()
            .get_mut(id)
            .is_some_and(|e| e.enabled)
    }
}
