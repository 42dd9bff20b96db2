// SPDX-License-Identifier: MIT OR Apache-2.0
//! Giving a process-shared channel's other end to another process, and
//! taking it: over a Unix socket (the fds ride an `SCM_RIGHTS` message with
//! a short header), or as fds a child inherits.
//!
//! Four fds make an end: the memfd, the two doorbell eventfds, and a fresh
//! link for the new pair of processes (see `peer.rs`). Everything that
//! arrives is checked before use: the header, that each fd is what it
//! claims, the memfd's seals and size, and the layout in it.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use super::layout::{Layout, HEADER_LINES};
use super::ring::Memory;
use super::{assemble, Channel, Side};
use crate::chan::shim::EventFd;
use crate::error::{Error, Result};
use crate::sys::{set_cloexec, socket, ZeroedLines};

/// "eventqH\x01": a handover message, version 1.
const MAGIC: u64 = u64::from_le_bytes(*b"eventqH\x01");
/// The message: the magic, then the side the receiving process takes.
const MESSAGE_LEN: usize = 16;

/// The fds of one end of a process-shared channel, for a process that
/// inherits them (`Chan::export_fds`, `Chan::import_fds`). Each is
/// close-on-exec, as every fd of the library is: a child that runs
/// another program must `dup2` them (which clears the flag) to the numbers
/// it is told. The process that exported them must close its copies once
/// the child has them (dropping this does), or the link never hangs up
/// when the child dies.
#[derive(Debug)]
pub struct SharedFds {
    /// The side the process taking these fds gets.
    pub side: Side,
    /// The channel's memory: a sealed memfd.
    pub mem: OwnedFd,
    /// The receive doorbell (an eventfd).
    pub recv_bell: OwnedFd,
    /// The send doorbell (an eventfd).
    pub send_bell: OwnedFd,
    /// The link to the exporting process (one end of a socket pair).
    pub link: OwnedFd,
}

impl Channel {
    /// Hands the other end to the process at the other end of the Unix
    /// socket `sock`.
    pub(in crate::chan) fn send_to(&self, sock: BorrowedFd<'_>) -> Result<()> {
        self.peer_gone();
        let side = self.side().other();
        self.peer.hand_over(|theirs| {
            let mut msg = [0u8; MESSAGE_LEN];
            msg[..8].copy_from_slice(&MAGIC.to_le_bytes());
            msg[8..12].copy_from_slice(&side_code(side).to_le_bytes());
            let fds = [
                self.mem_fd.as_raw_fd(),
                self.bells.recv.as_raw_fd(),
                self.bells.send.as_raw_fd(),
                theirs.as_raw_fd(),
            ];
            socket::send_with_fds(sock, &msg, &fds).map_err(Error::from)
        })
    }

    /// The fds of the other end, for a process that inherits them.
    pub(in crate::chan) fn export_fds(&self) -> Result<SharedFds> {
        self.peer_gone();
        let side = self.side().other();
        let mut out = None;
        self.peer.hand_over(|theirs| {
            out = Some(SharedFds {
                side,
                mem: self.mem_fd.try_clone()?,
                recv_bell: self.bells.recv.try_clone_fd()?,
                send_bell: self.bells.send.try_clone_fd()?,
                link: theirs.try_clone()?,
            });
            Ok(())
        })?;
        Ok(out.expect("hand_over ran the export"))
    }
}

/// Takes the end of a process-shared channel that the process at the other
/// end of the Unix socket `sock` hands over.
pub(in crate::chan) fn recv_from(sock: BorrowedFd<'_>) -> Result<Channel> {
    let mut msg = [0u8; MESSAGE_LEN];
    let (n, fds) = socket::recv_with_fds(sock, &mut msg).map_err(|e| {
        if e.raw_os_error() == Some(libc::EPROTO) {
            Error::Corrupt("the handover message is not whole, or carries too many fds")
        } else {
            Error::from(e)
        }
    })?;
    let magic = u64::from_le_bytes(msg[..8].try_into().expect("8 bytes"));
    let side = u32::from_le_bytes(msg[8..12].try_into().expect("4 bytes"));
    let (Ok([mem, recv_bell, send_bell, link]), true) = (
        <[OwnedFd; 4]>::try_from(fds),
        n == MESSAGE_LEN && magic == MAGIC,
    ) else {
        return Err(Error::Corrupt(
            "the message is not a process-shared channel's handover",
        ));
    };
    let side = side_of(side).ok_or(Error::Corrupt("the handover names no side"))?;
    import(SharedFds {
        side,
        mem,
        recv_bell,
        send_bell,
        link,
    })
}

/// Takes an end of a process-shared channel from its fds (received or
/// inherited): checks each, maps the memory, checks its layout.
pub(in crate::chan) fn import(fds: SharedFds) -> Result<Channel> {
    // Inherited fds were made inheritable (dup2 clears the flag): the
    // library's are close-on-exec, or a program this one runs would keep
    // the link open and this process's death would go unseen.
    for fd in [&fds.mem, &fds.recv_bell, &fds.send_bell, &fds.link] {
        set_cloexec(fd.as_fd())?;
    }
    let lines = ZeroedLines::<HEADER_LINES>::map_shared(fds.mem.as_fd()).map_err(|e| {
        if e.raw_os_error() == Some(libc::EPROTO) {
            Error::Corrupt("the memory is not a size-sealed memfd of whole lines")
        } else {
            Error::from(e)
        }
    })?;
    let mem = Memory::new(lines);
    let layout = Layout::check(mem.layout_words(), mem.slot_total())?;
    let bell = |fd: OwnedFd| {
        EventFd::from_received(fd)
            .map(Arc::new)
            .map_err(|_| Error::Corrupt("a doorbell is not an eventfd"))
    };
    let recv = bell(fds.recv_bell)?;
    let send = bell(fds.send_bell)?;
    if !socket::is_socket(fds.link.as_fd()) {
        return Err(Error::Corrupt("the link is not a socket"));
    }
    let chan = assemble(Arc::new(mem), layout, recv, send, fds.side, fds.mem)?;
    chan.peer.join(fds.link)?;
    Ok(chan)
}

fn side_code(side: Side) -> u32 {
    match side {
        Side::Send => 1,
        Side::Receive => 2,
    }
}

fn side_of(code: u32) -> Option<Side> {
    match code {
        1 => Some(Side::Send),
        2 => Some(Side::Receive),
        _ => None,
    }
}
