// SPDX-License-Identifier: MIT OR Apache-2.0
//! The other process of a process-shared channel, as this one sees it.
//!
//! The two are joined by a link: a connected pair of Unix sockets, one end
//! in each process, that carries no data. When every process holding the
//! other end is gone (exited, killed, or it freed its end of the channel),
//! this end hangs up, which the kernel reports at once and for good: that
//! is how a death becomes observable without a thread or a timeout.
//!
//! Each direction's fd that users poll is an epoll set of this process
//! holding the doorbell eventfd and the link, so it is readable while the
//! doorbell is up or once the other process is gone: a receiver then
//! drains and sees end of stream, a sender sees `EPIPE`, with no fd of
//! their own to watch. (The kernel refuses `EPOLLEXCLUSIVE` on an epoll fd,
//! so consumers of a process-shared channel register it without.)

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::Instant;

use crate::chan::shim::{AtomicBool, EventFd, Mutex, Ordering};
use crate::error::{Error, Result};
use crate::sys::{socket, Epoll};

/// Which direction a wait is for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(in crate::chan) enum Direction {
    Recv,
    Send,
}

enum Link {
    /// No other process has been given the channel yet.
    Waiting,
    /// Joined to another process by this end.
    Joined(OwnedFd),
}

pub(in crate::chan) struct Peer {
    link: Mutex<Link>,
    /// The other process was seen gone; cleared when the channel is handed
    /// to a new one.
    gone: AtomicBool,
    recv_poll: Epoll,
    send_poll: Epoll,
}

/// What a link's end is watched for in the epoll sets.
const LINK_EVENTS: u32 = (libc::EPOLLIN | libc::EPOLLRDHUP) as u32;

impl Peer {
    /// The epoll sets of both directions, each holding its doorbell; no
    /// link yet.
    pub(in crate::chan) fn new(recv_bell: &EventFd, send_bell: &EventFd) -> Result<Peer> {
        let recv_poll = Epoll::new()?;
        recv_poll.add(recv_bell.as_raw_fd(), libc::EPOLLIN as u32, 0)?;
        let send_poll = Epoll::new()?;
        send_poll.add(send_bell.as_raw_fd(), libc::EPOLLIN as u32, 0)?;
        Ok(Peer {
            link: Mutex::new(Link::Waiting),
            gone: AtomicBool::new(false),
            recv_poll,
            send_poll,
        })
    }

    /// The fd users poll for `dir`.
    pub(in crate::chan) fn poll_fd(&self, dir: Direction) -> BorrowedFd<'_> {
        match dir {
            Direction::Recv => self.recv_poll.as_fd(),
            Direction::Send => self.send_poll.as_fd(),
        }
    }

    /// Joins this process to the one that sent or inherited the channel,
    /// by its end of the link.
    pub(in crate::chan) fn join(&self, link: OwnedFd) -> Result<()> {
        let mut current = self.link.lock();
        self.replace(&mut current, link)
    }

    /// Hands the channel to a new process: makes a link, gives its other
    /// end to `give` (which sends or exports it with the channel's fds),
    /// and joins by this end. `Error::Attached` while the process joined
    /// now lives: a channel has one process on each side.
    pub(in crate::chan) fn hand_over(
        &self,
        give: impl FnOnce(OwnedFd) -> Result<()>,
    ) -> Result<()> {
        let mut current = self.link.lock();
        if let Link::Joined(old) = &*current {
            if !socket::hung_up(old.as_fd())? {
                return Err(Error::Attached);
            }
        }
        let (ours, theirs) = socket::pair()?;
        give(theirs)?;
        self.replace(&mut current, ours)
    }

    fn replace(&self, current: &mut Link, link: OwnedFd) -> Result<()> {
        if let Link::Joined(old) = &*current {
            let _ = self.recv_poll.delete(old.as_raw_fd());
            let _ = self.send_poll.delete(old.as_raw_fd());
        }
        self.recv_poll.add(link.as_raw_fd(), LINK_EVENTS, 1)?;
        if let Err(e) = self.send_poll.add(link.as_raw_fd(), LINK_EVENTS, 1) {
            let _ = self.recv_poll.delete(link.as_raw_fd());
            return Err(e.into());
        }
        *current = Link::Joined(link);
        self.gone.store(false, Ordering::SeqCst);
        Ok(())
    }

    /// Whether the other process is gone, looking at the link now (a
    /// zero-timeout poll) unless it was seen gone already. Returns true
    /// only once per death: the caller then recovers.
    pub(in crate::chan) fn newly_gone(&self) -> bool {
        if self.gone.load(Ordering::SeqCst) {
            return false;
        }
        let hung_up = match &*self.link.lock() {
            Link::Waiting => false,
            Link::Joined(link) => socket::hung_up(link.as_fd()).unwrap_or(true),
        };
        hung_up && !self.gone.swap(true, Ordering::SeqCst)
    }

    /// Whether the other process was seen gone.
    pub(in crate::chan) fn is_gone(&self) -> bool {
        self.gone.load(Ordering::SeqCst)
    }

    /// An edge-triggered epoll set for one blocking call in direction
    /// `dir`, watching the fd users poll (its doorbell and whichever link
    /// is joined by then): the level at its creation counts as one event,
    /// then only a new write or hang-up does, so a call that waits again
    /// and again on one set never spins on an fd that stays up.
    pub(in crate::chan) fn waiter(&self, dir: Direction) -> Result<Epoll> {
        let ep = Epoll::new()?;
        let fd = self.poll_fd(dir).as_raw_fd();
        ep.add(fd, (libc::EPOLLIN | libc::EPOLLET) as u32, 0)?;
        Ok(ep)
    }

    /// Waits on `waiter` for its next event, until `deadline` (`None`:
    /// without limit).
    pub(in crate::chan) fn wait(waiter: &Epoll, deadline: Option<Instant>) -> Result<()> {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 1];
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            match waiter.wait(&mut events, left) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => return other.map(drop).map_err(Error::from),
            }
        }
    }
}
