// SPDX-License-Identifier: MIT OR Apache-2.0
//! The C ABI of process-shared channels (`eventq_chan_new_shared`, the
//! handover calls) and of consumer counting (`eventq_chan_consumer_*`).

use std::ffi::c_int;
use std::os::fd::{BorrowedFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};

use super::chan::{chan_ref, eventq_chan, eventq_chan_opts, options_of};
use super::{
    boundary, check_size, ensure, fail, out_new_handle, read_sized, to_code, try_c, write_sized,
    SizedStruct, PANIC,
};
use crate::chan::{Chan, SharedFds, Side};

/// `side`: this process sends on the channel; the other receives.
pub const EVENTQ_SIDE_SEND: c_int = 1;
/// `side`: this process receives on the channel; the other sends.
pub const EVENTQ_SIDE_RECV: c_int = 2;

/// The smallest `size` of `eventq_shared_fds` accepted: every field.
pub const EVENTQ_SHARED_FDS_SIZE_MIN: usize = 20;

/// The fds of one end of a process-shared channel, for a process that
/// inherits them: `eventq_chan_export_fds` fills it, `eventq_chan_import_fds`
/// takes it. Each fd is O_CLOEXEC; a child that runs another program must
/// `dup2` them to the numbers it is told (dup2 clears the flag).
#[repr(C)]
pub struct eventq_shared_fds {
    /// The side the process taking these fds gets: EVENTQ_SIDE_SEND or
    /// EVENTQ_SIDE_RECV.
    pub side: c_int,
    /// The channel's memory: a sealed memfd.
    pub mem: c_int,
    /// The receive doorbell: an eventfd.
    pub recv_bell: c_int,
    /// The send doorbell: an eventfd.
    pub send_bell: c_int,
    /// The link to the exporting process: one end of a socket pair.
    pub link: c_int,
}

const _: () = assert!(std::mem::size_of::<eventq_shared_fds>() == EVENTQ_SHARED_FDS_SIZE_MIN);

impl SizedStruct for eventq_shared_fds {
    const NAME: &'static str = "struct eventq_shared_fds";
    const MIN: usize = EVENTQ_SHARED_FDS_SIZE_MIN;
    const MIN_NAME: &'static str = "EVENTQ_SHARED_FDS_SIZE_MIN";
    // Every field an int.
    const FIELD_ENDS: &'static [usize] = &[4, 8, 12, 16, 20];
}

fn side_of(side: c_int) -> Option<Side> {
    match side {
        EVENTQ_SIDE_SEND => Some(Side::Send),
        EVENTQ_SIDE_RECV => Some(Side::Receive),
        _ => None,
    }
}

fn code_of_side(side: Side) -> c_int {
    match side {
        Side::Send => EVENTQ_SIDE_SEND,
        Side::Receive => EVENTQ_SIDE_RECV,
    }
}

/// A caller's fd argument: -EBADF if negative.
///
/// # Safety
/// A non-negative `fd` is open for the duration of `'a`.
unsafe fn fd_arg<'a>(fd: RawFd) -> Result<BorrowedFd<'a>, c_int> {
    if fd < 0 {
        return fail(-libc::EBADF, format_args!("sockfd is {fd}"));
    }
    // SAFETY: fd is open during 'a (this function's contract).
    Ok(unsafe { BorrowedFd::borrow_raw(fd) })
}

/// Creates a channel to share with one other process, and writes a handle
/// to its end to `*out`. This process holds `side` (EVENTQ_SIDE_SEND or
/// EVENTQ_SIDE_RECV); the process it is handed to
/// (`eventq_chan_send_to`, `eventq_chan_export_fds`) the other, with any
/// number of threads each. `opts` as for `eventq_chan_new` (NULL for the
/// defaults), except that `max_msg_size` defaults to 4096 (at most 16 MiB:
/// every slot holds a whole message, in a memfd of about `capacity *
/// max_msg_size` bytes, resident as messages reach it), and `max_bytes`
/// and `drop_fn` must be unset (-EINVAL).
///
/// Between the two processes D1-D9 hold as in one, except that each fd to
/// poll is an epoll fd (no EPOLLEXCLUSIVE on it; readable also once the
/// other process is gone) and close from either closes it for both. When a
/// process dies, at any instruction, the other never wedges: if the sender
/// dies, every message whose send returned is delivered once, then the
/// receiver sees end of stream (-EPIPE) on a readable fd; if the receiver
/// dies, the messages its receives had taken go with it, the rest stay for
/// the next process given its end, and a send on a full ring fails with
/// -EPIPE. The other process is untrusted: a shared word out of range
/// fails the call with -EPROTO and closes the channel on this side, never
/// a fault or a hang. The full text is in eventq(7) and docs/design.md
/// ("Between processes").
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn eventq_chan_new_shared(
    opts: *const eventq_chan_opts,
    side: c_int,
    out: *mut *mut eventq_chan,
) -> c_int {
    boundary!(PANIC, {
        ensure!(!out.is_null(), "out is NULL");
        let Some(side) = side_of(side) else {
            return super::fail_code(
                -libc::EINVAL,
                format_args!("side is {side}: not EVENTQ_SIDE_SEND or EVENTQ_SIDE_RECV"),
            );
        };
        // SAFETY: opts is NULL or initialised by eventq_chan_opts_init
        // (header).
        let options = try_c!(unsafe { options_of(opts) });
        match Chan::new_shared(options, side) {
            // SAFETY: out is non-NULL (checked) and points to a handle
            // pointer (header).
            Ok(chan) => unsafe { out_new_handle(out, eventq_chan(chan)) },
            Err(e) => to_code(&e),
        }
    })
}

/// Hands the other end of the process-shared channel `chan` to the process
/// at the other end of the connected Unix socket `sockfd` (which takes it
/// with `eventq_chan_recv_from`): the channel's fds ride one SCM_RIGHTS
/// message. Allowed while no other process holds that end: before the first
/// handover, or once the one that held it is gone (it is then handed to a
/// successor, with what the gone one had not taken still queued);
/// -EISCONN otherwise. -EINVAL for a channel that is not process-shared;
/// -EAGAIN if `sockfd` is non-blocking and full; other socket errors as
/// sendmsg(2) gives them.
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn eventq_chan_send_to(chan: *const eventq_chan, sockfd: c_int) -> c_int {
    boundary!(PANIC, {
        // SAFETY: chan is NULL or a handle from eventq_chan_new_shared or
        // _recv_from, not freed (header).
        let chan = try_c!(unsafe { chan_ref(chan) });
        // SAFETY: sockfd is the caller's open socket (header).
        let sock = try_c!(unsafe { fd_arg(sockfd) });
        match chan.send_to(sock) {
            Ok(()) => 0,
            Err(e) => to_code(&e),
        }
    })
}

/// Takes the end of a process-shared channel that the process at the other
/// end of the connected Unix socket `sockfd` hands over with
/// `eventq_chan_send_to`, and writes a handle to it to `*out`. Everything
/// received is checked before use (the message, each fd's kind, the
/// memory's seals and size, its layout): -EPROTO if it is not a channel's
/// end (whatever fds came are closed). Blocks on a blocking socket until
/// the message comes; -EAGAIN on a non-blocking one with nothing to read.
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn eventq_chan_recv_from(sockfd: c_int, out: *mut *mut eventq_chan) -> c_int {
    boundary!(PANIC, {
        ensure!(!out.is_null(), "out is NULL");
        // SAFETY: sockfd is the caller's open socket (header).
        let sock = try_c!(unsafe { fd_arg(sockfd) });
        match Chan::recv_from(sock) {
            // SAFETY: out is non-NULL (checked) and points to a handle
            // pointer (header).
            Ok(chan) => unsafe { out_new_handle(out, eventq_chan(chan)) },
            Err(e) => to_code(&e),
        }
    })
}

/// Writes the fds of the other end of the process-shared channel `chan` to
/// `*out`, `size` bytes long (pass `sizeof *out`), for a child process to
/// inherit and take with `eventq_chan_import_fds`; the same rule as
/// `eventq_chan_send_to` for when it is allowed. The fds are new and the
/// caller's: close them in this process once the child has them, or the
/// link never reports the child's death.
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn eventq_chan_export_fds(
    chan: *const eventq_chan,
    out: *mut eventq_shared_fds,
    size: usize,
) -> c_int {
    boundary!(PANIC, {
        // SAFETY: chan is NULL or a handle from eventq_chan_new_shared or
        // _recv_from, not freed (header).
        let chan = try_c!(unsafe { chan_ref(chan) });
        ensure!(!out.is_null(), "out is NULL");
        try_c!(check_size::<eventq_shared_fds>(size, "size"));
        let fds = match chan.export_fds() {
            Ok(fds) => fds,
            Err(e) => return to_code(&e),
        };
        let raw = eventq_shared_fds {
            side: code_of_side(fds.side),
            mem: fds.mem.into_raw_fd(),
            recv_bell: fds.recv_bell.into_raw_fd(),
            send_bell: fds.send_bell.into_raw_fd(),
            link: fds.link.into_raw_fd(),
        };
        // SAFETY: out points to `size` writable bytes (header: pass sizeof
        // *out); eventq_shared_fds is all int, no padding.
        unsafe { write_sized(out, size, &raw) }
    })
}

/// Takes an end of a process-shared channel from the fds in `*fds`, `size`
/// bytes long (pass `sizeof *fds`), as `eventq_chan_export_fds` wrote them
/// in another process, and writes a handle to it to `*out`. The four fds
/// are the library's from the call on, on every path once `fds` and `size`
/// are valid (-EINVAL for NULL, a size below EVENTQ_SHARED_FDS_SIZE_MIN or
/// ending inside a field, and -E2BIG for a size above
/// EVENTQ_STRUCT_SIZE_MAX, leave them alone): owned by the handle, or
/// closed if the call fails. They are checked as `eventq_chan_recv_from`
/// checks what it receives (-EPROTO).
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn eventq_chan_import_fds(
    fds: *const eventq_shared_fds,
    size: usize,
    out: *mut *mut eventq_chan,
) -> c_int {
    boundary!(PANIC, {
        ensure!(!fds.is_null(), "fds is NULL");
        try_c!(check_size::<eventq_shared_fds>(size, "size"));
        let empty = || eventq_shared_fds {
            side: 0,
            mem: -1,
            recv_bell: -1,
            send_bell: -1,
            link: -1,
        };
        // The known fields first, so that the fds are closed on every
        // failure below, -E2BIG included.
        let mut raw = empty();
        // SAFETY: fds points to `size` (at least the minimum) readable
        // bytes (header); its fields are ints, which take any bytes.
        try_c!(unsafe { read_sized(fds, EVENTQ_SHARED_FDS_SIZE_MIN, "size", &mut raw) });
        let owned = |fd: c_int| {
            // SAFETY: a non-negative fd in the struct is the caller's, given
            // to the library by this call (header), and closed once: here
            // or by the handle.
            (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
        };
        let (mem, recv, send, link) = (
            owned(raw.mem),
            owned(raw.recv_bell),
            owned(raw.send_bell),
            owned(raw.link),
        );
        // SAFETY: as above, all `size` bytes: fields of a newer header that
        // this library does not know must be zero (-E2BIG otherwise).
        try_c!(unsafe { read_sized(fds, size, "size", &mut empty()) });
        ensure!(!out.is_null(), "out is NULL");
        let (Some(side), Some(mem), Some(recv_bell), Some(send_bell), Some(link)) =
            (side_of(raw.side), mem, recv, send, link)
        else {
            return super::fail_code(
                -libc::EINVAL,
                format_args!(
                    "fds holds side {} and fds {}, {}, {}, {}: a side that is not EVENTQ_SIDE_SEND or _RECV, or a negative fd",
                    raw.side, raw.mem, raw.recv_bell, raw.send_bell, raw.link
                ),
            );
        };
        let fds = SharedFds {
            side,
            mem,
            recv_bell,
            send_bell,
            link,
        };
        match Chan::import_fds(fds) {
            // SAFETY: out is non-NULL (checked) and points to a handle
            // pointer (header).
            Ok(chan) => unsafe { out_new_handle(out, eventq_chan(chan)) },
            Err(e) => to_code(&e),
        }
    })
}

/// Which end of a process-shared channel `chan` is: EVENTQ_SIDE_SEND or
/// EVENTQ_SIDE_RECV; 0 for a channel within this process.
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn eventq_chan_side(chan: *const eventq_chan) -> c_int {
    boundary!(PANIC, {
        // SAFETY: chan is NULL or a handle not freed (header).
        let chan = try_c!(unsafe { chan_ref(chan) });
        chan.side().map_or(0, code_of_side)
    })
}

/// Counts a consumer in on `chan`: a thread or loop that waits on the
/// receive fd (with EPOLLEXCLUSIVE, one wakes per write) and will call
/// `eventq_chan_consumer_leave` when it stops. See D4 in eventq(7).
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn eventq_chan_consumer_enter(chan: *const eventq_chan) -> c_int {
    boundary!(PANIC, {
        // SAFETY: chan is NULL or a handle not freed (header).
        let chan = try_c!(unsafe { chan_ref(chan) });
        chan.consumer_enter();
        0
    })
}

/// Counts a consumer out of `chan`: if messages remain and another
/// consumer is counted, writes the receive fd so one more waiter wakes
/// for them (a consumer woken alone that leaves without receiving passes
/// its wake-up on, D4). -EINVAL if no consumer is counted.
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn eventq_chan_consumer_leave(chan: *const eventq_chan) -> c_int {
    boundary!(PANIC, {
        // SAFETY: chan is NULL or a handle not freed (header).
        let chan = try_c!(unsafe { chan_ref(chan) });
        if chan.consumer_leave() {
            0
        } else {
            super::fail_code(
                -libc::EINVAL,
                format_args!("no consumer is counted in on chan"),
            )
        }
    })
}
