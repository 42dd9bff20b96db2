// SPDX-License-Identifier: MIT OR Apache-2.0
//! One iteration of the loop, as libuv's `uv_run`, a flat list of phases:
//!
//! 1. wait: `epoll_wait` for at most [`EVENTS_PER_WAIT`] ready sources (or
//!    the timeout);
//! 2. dispatch: for each, in kernel order, skip it if removed or disabled
//!    since the wait, else run its callback: once for an fd, once with the
//!    expiration count for a timer, once per signal, once per memory event,
//!    once per message up to the source's budget for a channel
//!    (`chan_source.rs`);
//! 3. posts, when the wake eventfd comes up in the batch (`posts.rs`).
//!
//! A stop made during an iteration takes effect when the running callback
//! returns: the rest of the batch is left for the next run, and the
//! edge-triggered and one-shot fd sources in it are re-armed.
//!
//! Callbacks run with no lock held: dispatch takes the callback out of its
//! slot, unlocks, runs it, and puts it back only if the source still
//! exists. A callback whose source was removed meanwhile is dropped then, so
//! its destroy hook runs exactly once and never during its own call.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use super::event::{events, panicked, Callback, Event};
use super::table::{Kind, SourceId, WAKE_KEY};
use super::Loop;
use crate::error::Result;

/// Events fetched per `epoll_wait`.
const EVENTS_PER_WAIT: usize = 64;

impl Loop {
    /// Runs one iteration; returns how many callbacks (and posts) ran.
    /// `stops_seen`: the stop counter when the caller began (a stop since
    /// ends the dispatch). `lone_source_may_go_on`: whether a lone channel
    /// source may go past its budget (see `dispatch_chan`); `run` allows it,
    /// `run_once` does not, as its caller counts on the budget per call.
    pub(super) fn iterate(
        &self,
        timeout: Option<Duration>,
        stops_seen: u64,
        lone_source_may_go_on: bool,
    ) -> Result<usize> {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; EVENTS_PER_WAIT];
        // A signal interrupting the wait is not an event: wait again for
        // what is left of the timeout, so EINTR never ends an iteration.
        // The first wait is given the whole timeout, which epoll rounds up
        // to a millisecond: computed from the deadline, a timeout of a few
        // nanoseconds would have passed already and become a poll.
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let mut first = true;
        let n = loop {
            let left = match (timeout, deadline) {
                (None, _) => None,
                (Some(t), _) if first => Some(t),
                (Some(_), Some(d)) => Some(d.saturating_duration_since(Instant::now())),
                (Some(t), None) => Some(t), // too far to represent: as good as forever
            };
            first = false;
            match self.shared.epoll.wait(&mut events, left) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                other => break other?,
            }
        };
        let mut calls = 0;
        let loop_tag = self.shared.tag;
        for (i, ev) in events[..n].iter().enumerate() {
            if self.stopped(stops_seen) {
                self.rearm_skipped(&events[i..n], loop_tag);
                break;
            }
            // Copies: the struct is packed.
            let (key, revents) = (ev.u64, ev.events);
            calls += if key == WAKE_KEY {
                self.run_posts(stops_seen)
            } else {
                let id = SourceId { key, loop_tag };
                self.dispatch(id, revents, stops_seen, lone_source_may_go_on)
            };
        }
        Ok(calls)
    }

    /// Events fetched but left undispatched by a stop. Level-triggered fds
    /// are reported again by the next wait; an edge-triggered or one-shot fd
    /// source is re-armed, which makes epoll report it again if it is still
    /// ready, so its event is not lost either.
    fn rearm_skipped(&self, skipped: &[libc::epoll_event], loop_tag: u64) {
        let mut table = self.shared.table.lock();
        for ev in skipped {
            let id = SourceId {
                key: ev.u64,
                loop_tag,
            };
            let Some(entry) = table.get_mut(id) else {
                continue;
            };
            if matches!(entry.kind, Kind::Fd(_))
                && entry.enabled
                && entry.in_epoll
                && entry.events & (events::EDGE | events::ONESHOT) != 0
            {
                let fd = entry.fd();
                let _ = self.shared.epoll.modify(fd, entry.events, id.key);
            }
        }
    }

    /// Runs one source's callbacks for one event; returns how many ran.
    fn dispatch(
        &self,
        id: SourceId,
        revents: u32,
        stops_seen: u64,
        lone_source_may_go_on: bool,
    ) -> usize {
        let mut table = self.shared.table.lock();
        let Some(entry) = table.get_mut(id) else {
            return 0; // removed since the wait
        };
        if !entry.enabled {
            return 0;
        }
        // Each kind reads its fd here, under the table lock: an eventfd, a
        // timerfd, a signalfd or a small cgroup file, never user code.
        let event = match &mut entry.kind {
            Kind::Chan { .. } => {
                return self.dispatch_chan(table, id, stops_seen, lone_source_may_go_on);
            }
            Kind::Fd(_) => {
                if entry.events & events::ONESHOT != 0 {
                    entry.enabled = false; // the kernel disarmed it
                }
                Event::Fd(revents)
            }
            Kind::Timer { tfd, periodic } => match tfd.read() {
                Ok(0) | Err(_) => return 0, // re-armed or read since the wait
                Ok(n) => {
                    if !*periodic {
                        entry.enabled = false;
                    }
                    Event::Timer(n)
                }
            },
            Kind::Signal { sfd, .. } => match sfd.read() {
                Ok(Some(signo)) => Event::Signal(signo),
                _ => return 0,
            },
            Kind::Memory(watch) => {
                // A watch reports nothing once its cgroup is removed, and
                // its fd may stay ready: disabled rather than spin, also
                // when re-enabled after its last event.
                let read = watch.read(revents);
                if let Err(e) = &read {
                    entry.error = e.errno();
                }
                if read.is_err() || watch.is_removed() {
                    let _ = self.apply_enabled(entry, id, false);
                }
                match read {
                    Ok(Some(event)) => Event::Memory(event),
                    _ => return 0,
                }
            }
        };
        let Some(mut cb) = entry.callback.take() else {
            return 0;
        };
        table.running = Some(id);
        drop(table);
        let result = self.call(&mut cb, id, event);
        self.finish(id, cb, result);
        1
    }

    /// Runs a callback; a panic counts as a failure with `ENOTRECOVERABLE`.
    pub(super) fn call(&self, cb: &mut Callback, id: SourceId, event: Event<'_>) -> Result<()> {
        catch_unwind(AssertUnwindSafe(|| cb(self, id, event))).unwrap_or_else(|_| Err(panicked()))
    }

    /// Puts a callback back after it ran, or drops it (unlocked) if its
    /// source was removed meanwhile; disables the source on failure; then
    /// releases removers waiting on other threads.
    pub(super) fn finish(&self, id: SourceId, cb: Callback, result: Result<()>) {
        let mut table = self.shared.table.lock();
        match table.get_mut(id) {
            Some(entry) => {
                entry.callback = Some(cb);
                if let Err(e) = result {
                    entry.error = e.errno();
                    let _ = self.apply_enabled(entry, id, false);
                }
            }
            None => {
                drop(table);
                drop(cb);
                table = self.shared.table.lock();
            }
        }
        table.running = None;
        self.shared.callback_done.notify_all();
    }
}
