// SPDX-License-Identifier: MIT OR Apache-2.0
//! What the loom models (`tests/loom.rs`) observe and do that the API does
//! not offer: the doorbells' levels and writes, and for a process-shared
//! channel the other process's end and its death.

use std::sync::Arc;

use super::{Chan, Inner};

impl Chan {
    /// Creates the send doorbell, as the first `send_fd` does.
    pub fn open_send_bell(&self) {
        if let Inner::Local(sh) = &self.inner {
            sh.bells.send(&sh.ring).expect("the model's eventfd");
        }
    }

    /// Wakes the receive doorbell, as the first `recv_fd` does.
    pub fn open_recv_bell(&self) {
        if let Inner::Local(sh) = &self.inner {
            sh.bells.wake_recv(&sh.ring);
        }
    }

    /// What an edge-triggered waiter registering the send fd now has seen:
    /// its writes so far and whether it is raised (an event at
    /// registration). The send doorbell must have been opened.
    pub fn send_fd_registered(&self) -> (u64, bool) {
        match &self.inner {
            Inner::Local(sh) => sh.bells.opened_send().registered(),
            Inner::Process(_) => unreachable!("a process-shared channel's send fd is made with it"),
        }
    }

    /// What an edge-triggered waiter registering the receive fd now has
    /// seen (as `send_fd_registered`).
    pub fn recv_fd_registered(&self) -> (u64, bool) {
        match &self.inner {
            Inner::Local(sh) => sh.bells.recv_registered(),
            Inner::Process(_) => unreachable!("in-process doorbells only"),
        }
    }

    /// Whether the receive and send doorbells are raised (the model's
    /// "readable"); the send doorbell must have been opened.
    pub fn doorbells(&self) -> (bool, bool) {
        match &self.inner {
            Inner::Local(sh) => (
                sh.bells.recv_is_raised(),
                sh.bells.opened_send().is_raised(),
            ),
            Inner::Process(p) => p.model_doorbells(),
        }
    }

    /// How many writes each eventfd has had (the events an edge-triggered
    /// waiter sees); the send doorbell must have been opened.
    pub fn doorbell_writes(&self) -> (u64, u64) {
        match &self.inner {
            Inner::Local(sh) => (sh.bells.recv_writes(), sh.bells.opened_send().writes()),
            Inner::Process(p) => p.model_doorbell_writes(),
        }
    }

    /// The other process's end of this process-shared channel.
    pub fn model_other_end(&self) -> Chan {
        let p = self.process().expect("a process-shared channel");
        Chan {
            inner: Inner::Process(Arc::new(p.model_peer().expect("the other end"))),
        }
    }

    /// Tells this end that the other process died (its link hung up).
    pub fn model_peer_died(&self) {
        self.process()
            .expect("a process-shared channel")
            .model_peer_died();
    }

    /// This end's process dies holding the doorbell lock.
    pub fn model_die_holding_the_lock(&self) {
        self.process()
            .expect("a process-shared channel")
            .model_die_holding_the_lock();
    }

    /// This end's process dies halfway through raising the receive
    /// doorbell: the flag set, the eventfd not written (it must hold the
    /// doorbell lock already).
    pub fn model_die_mid_raise(&self) {
        self.process()
            .expect("a process-shared channel")
            .model_flip_recv_flag(true);
    }

    /// This end's process dies halfway through lowering the receive
    /// doorbell: the flag cleared, the eventfd not read (it must hold the
    /// doorbell lock already).
    pub fn model_die_mid_lower(&self) {
        self.process()
            .expect("a process-shared channel")
            .model_flip_recv_flag(false);
    }
}
