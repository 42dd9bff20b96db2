// SPDX-License-Identifier: MIT OR Apache-2.0
//! `eventq_chan_*` and `eventq_msg_*`: the channel's C ABI.

use std::ffi::{c_int, c_void};
use std::mem::{offset_of, size_of};
use std::os::fd::AsRawFd;
use std::ptr;
use std::slice;

use super::{
    borrow, boundary, code_of, einval, ensure, fail, free_box, int_count, new_handle,
    out_new_handle, read_sized, take_box, to_code, try_c, wait_of, write_out, write_sized, Handle,
    OwnershipBox, SizedStruct, UserData, PANIC,
};
use crate::chan::{Chan, Options, Stats};

/// A channel handle. Each handle is freed once with `eventq_chan_free`; the
/// channel lives until its last handle is freed.
pub struct eventq_chan(pub(crate) Chan);

impl Handle for eventq_chan {
    type Ownership = OwnershipBox;
    const ARG: &'static str = "chan";
}

/// A received message owned by the caller; free it with `eventq_msg_free`.
pub struct eventq_msg(Vec<u8>);

impl Handle for eventq_msg {
    type Ownership = OwnershipBox;
    const ARG: &'static str = "msg";
}

/// `low_water` value meaning "half the capacity". The header defines it as
/// `SIZE_MAX` (build.rs), which cbindgen cannot spell.
pub const EVENTQ_LOW_WATER_DEFAULT: usize = usize::MAX;

/// Maximum message size when the options set neither it nor a byte limit.
pub const EVENTQ_DEFAULT_MAX_MSG_SIZE: usize = 1 << 20;
const _: () = assert!(EVENTQ_DEFAULT_MAX_MSG_SIZE == crate::chan::DEFAULT_MAX_MSG_SIZE);

/// The largest capacity accepted. Slots (64 bytes each) are allocated
/// zeroed by eventq_chan_new, and the first message over 48 bytes
/// allocates a buffer per slot (24 bytes each, plus the reused buffer of
/// each slot that has carried such a message): about 1.4 GiB of address
/// space at this maximum, resident only as messages reach the slots.
pub const EVENTQ_MAX_CAPACITY: usize = 1 << 24;
const _: () = assert!(EVENTQ_MAX_CAPACITY == crate::chan::MAX_CAPACITY);

/// Capacity set by `eventq_chan_opts_init`.
pub const EVENTQ_DEFAULT_CAPACITY: usize = 1024;

/// Called once per message still queued when the last handle is freed.
pub type eventq_drop_fn = Option<extern "C" fn(userdata: *mut c_void, data: *const u8, len: usize)>;

/// Channel options. Fill with `eventq_chan_opts_init(&opts, sizeof opts)`,
/// then change fields. Fields may be added at the end in later versions;
/// `size` tells the library which ones the caller's header had.
#[repr(C)]
pub struct eventq_chan_opts {
    /// `sizeof` the struct as the caller's header declares it; set by
    /// `eventq_chan_opts_init`.
    pub size: usize,
    /// Most messages queued at once; 1 to EVENTQ_MAX_CAPACITY.
    pub capacity: usize,
    /// Most bytes queued at once (sum of lengths); 0 for no byte limit.
    pub max_bytes: usize,
    /// Longest message accepted; 0 for the default: 1 MiB, or max_bytes if
    /// smaller. Must not exceed max_bytes when both are set.
    pub max_msg_size: usize,
    /// Queue depth at or below which the send fd is raised again after the
    /// channel was full; below capacity. EVENTQ_LOW_WATER_DEFAULT: capacity/2.
    /// With a byte limit, the queued bytes must also be at or below
    /// max_bytes/2.
    pub low_water: usize,
    /// Optional; called from the thread that frees the last handle, once per
    /// message still queued, with drop_userdata.
    pub drop_fn: eventq_drop_fn,
    pub drop_userdata: *mut c_void,
}

/// The smallest `size` of `eventq_chan_opts` accepted: `size` and
/// `capacity`. Fields past the caller's size take their defaults.
pub const EVENTQ_CHAN_OPTS_SIZE_MIN: usize = 16;
const _: () = assert!(EVENTQ_CHAN_OPTS_SIZE_MIN == offset_of!(eventq_chan_opts, max_bytes));
// Seven 8-byte fields and no padding, so write_sized copies no
// uninitialised byte.
const _: () = assert!(size_of::<eventq_chan_opts>() == 7 * size_of::<usize>());

impl SizedStruct for eventq_chan_opts {
    const NAME: &'static str = "struct eventq_chan_opts";
    const MIN: usize = EVENTQ_CHAN_OPTS_SIZE_MIN;
    const MIN_NAME: &'static str = "EVENTQ_CHAN_OPTS_SIZE_MIN";
    const FIELD_ENDS: &'static [usize] = &[
        offset_of!(eventq_chan_opts, capacity),
        offset_of!(eventq_chan_opts, max_bytes),
        offset_of!(eventq_chan_opts, max_msg_size),
        offset_of!(eventq_chan_opts, low_water),
        offset_of!(eventq_chan_opts, drop_fn),
        offset_of!(eventq_chan_opts, drop_userdata),
        size_of::<eventq_chan_opts>(),
    ];
}

/// The smallest `size` of `eventq_chan_stats` accepted: `sent`.
pub const EVENTQ_CHAN_STATS_SIZE_MIN: usize = 8;

/// Counters of a channel (see `eventq_chan_get_stats`). Every field is 64
/// bits, so the struct has no padding; fields may be added at the end in
/// later versions.
#[repr(C)]
pub struct eventq_chan_stats {
    /// Messages accepted by sends.
    pub sent: u64,
    /// Messages returned by receives.
    pub received: u64,
    /// Messages queued now.
    pub pending: u64,
    /// Bytes queued now.
    pub pending_bytes: u64,
    /// Messages discarded when the last handle was freed
    /// (see `eventq_chan_free_final`).
    pub dropped: u64,
    /// Most messages ever queued at once.
    pub peak_depth: u64,
    /// Writes to the receive eventfd: one per empty-to-non-empty transition,
    /// one at close, one per receive that reports end of stream (or a batch
    /// that ends short at it), and one when a loop source that leaves
    /// messages behind passes the wake-up on to another loop (D4, D6, D9).
    /// Far below `sent` on a busy channel.
    pub recv_doorbell_rings: u64,
    /// Writes to the send eventfd: one at creation, one per drain to the
    /// low-water mark after the channel was full (or refused a send),
    /// and one at close (D9).
    pub send_doorbell_rings: u64,
    /// 1 once the channel is closed.
    pub closed: u64,
}
const _: () = assert!(size_of::<eventq_chan_stats>() == 9 * 8);

impl SizedStruct for eventq_chan_stats {
    const NAME: &'static str = "struct eventq_chan_stats";
    const MIN: usize = EVENTQ_CHAN_STATS_SIZE_MIN;
    const MIN_NAME: &'static str = "EVENTQ_CHAN_STATS_SIZE_MIN";
    // Every field a u64.
    const FIELD_ENDS: &'static [usize] = &[8, 16, 24, 32, 40, 48, 56, 64, 72];
}

/// A message to send in a batch.
#[repr(C)]
pub struct eventq_buf {
    pub data: *const c_void,
    pub len: usize,
}

impl From<Stats> for eventq_chan_stats {
    fn from(s: Stats) -> eventq_chan_stats {
        eventq_chan_stats {
            sent: s.sent,
            received: s.received,
            pending: s.pending,
            pending_bytes: s.pending_bytes,
            dropped: s.dropped,
            peak_depth: s.peak_depth,
            recv_doorbell_rings: s.recv_doorbell_rings,
            send_doorbell_rings: s.send_doorbell_rings,
            closed: s.closed.into(),
        }
    }
}

/// The user's drop hook and its userdata (which has no destroy hook), called
/// from whichever thread frees the last handle.
struct DropHook {
    f: extern "C" fn(*mut c_void, *const u8, usize),
    userdata: UserData,
}

impl DropHook {
    fn call(&self, msg: &[u8]) {
        (self.f)(self.userdata.ptr(), msg.as_ptr(), msg.len());
    }
}

/// The channel behind a handle; -EINVAL for NULL.
///
/// # Safety
/// As [`borrow`]: `chan` is NULL or a live channel handle.
pub(crate) unsafe fn chan_ref<'a>(chan: *const eventq_chan) -> Result<&'a Chan, c_int> {
    // SAFETY: this function's contract is borrow's.
    unsafe { borrow(chan) }.map(|c| &c.0)
}

/// `len` bytes at `data` of a message for `chan`; NULL is allowed only for
/// length 0. The length is checked against the channel's maximum before a
/// slice is made, since no slice may exceed `isize::MAX` bytes.
///
/// # Safety
/// `data` is NULL or points to `len` readable bytes that nothing changes
/// during `'a`.
unsafe fn bytes_in<'a>(chan: &Chan, data: *const c_void, len: usize) -> Result<&'a [u8], c_int> {
    if data.is_null() {
        return if len == 0 {
            Ok(&[])
        } else {
            einval(format_args!("data is NULL with len {len}"))
        };
    }
    if len > chan.max_msg_size() {
        return fail(
            -libc::EMSGSIZE,
            format_args!(
                "len {len} is above the channel's max_msg_size {}",
                chan.max_msg_size()
            ),
        );
    }
    // SAFETY: data points to len readable bytes (this function's contract),
    // and len is at most the channel's maximum, far below isize::MAX.
    Ok(unsafe { slice::from_raw_parts(data.cast::<u8>(), len) })
}

/// `cap` writable bytes at `buf`; NULL is allowed only for capacity 0.
/// Capacities past `isize::MAX` (no real buffer has one) are clamped, since
/// no slice may be longer.
///
/// # Safety
/// `buf` is NULL or points to `cap` writable bytes that nothing else
/// accesses during `'a`.
unsafe fn bytes_out<'a>(buf: *mut c_void, cap: usize) -> Result<&'a mut [u8], c_int> {
    if buf.is_null() {
        return if cap == 0 {
            Ok(&mut [])
        } else {
            einval(format_args!("buf is NULL with cap {cap}"))
        };
    }
    let cap = cap.min(isize::MAX as usize);
    // SAFETY: buf points to at least cap writable bytes that only this
    // slice accesses (this function's contract).
    Ok(unsafe { slice::from_raw_parts_mut(buf.cast::<u8>(), cap) })
}

/// The options `eventq_chan_opts_init` writes, for `size` bytes.
fn default_opts(size: usize) -> eventq_chan_opts {
    eventq_chan_opts {
        size,
        capacity: EVENTQ_DEFAULT_CAPACITY,
        max_bytes: 0,
        max_msg_size: 0,
        low_water: EVENTQ_LOW_WATER_DEFAULT,
        drop_fn: None,
        drop_userdata: ptr::null_mut(),
    }
}

/// Fills `opts`, `size` bytes long (pass `sizeof opts`), with the defaults:
/// capacity EVENTQ_DEFAULT_CAPACITY, no byte limit, default maximum message
/// size, low water at half the capacity, no drop hook; and `opts->size`
/// with `size`. Writes nothing past `size`, and zeros there what this
/// library does not know of a larger (newer) struct.
///
/// Returns 0; -EINVAL for a NULL opts, a size below
/// EVENTQ_CHAN_OPTS_SIZE_MIN or one that ends inside a field; -E2BIG for a
/// size above EVENTQ_STRUCT_SIZE_MAX (nothing written).
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn eventq_chan_opts_init(opts: *mut eventq_chan_opts, size: usize) -> c_int {
    boundary!(PANIC, {
        ensure!(!opts.is_null(), "opts is NULL");
        // SAFETY: opts points to `size` writable bytes (header: pass sizeof
        // opts); eventq_chan_opts has no padding (asserted where defined).
        unsafe { write_sized(opts, size, &default_opts(size)) }
    })
}

/// The channel options `opts` (NULL: the defaults) asks for.
///
/// # Safety
/// `opts` is NULL or points to an `eventq_chan_opts` whose first `size`
/// bytes (its `size` field) are readable, as `eventq_chan_opts_init` fills
/// them.
pub(crate) unsafe fn options_of(opts: *const eventq_chan_opts) -> Result<Options, c_int> {
    let mut o = default_opts(size_of::<eventq_chan_opts>());
    if !opts.is_null() {
        // SAFETY: a non-NULL opts points to a struct whose first field,
        // `size`, is initialised (this function's contract).
        let size = unsafe { ptr::addr_of!((*opts).size).read() };
        // SAFETY: opts points to `size` readable bytes (this function's
        // contract); its fields are integers, a pointer and an optional fn
        // pointer, which take any bytes.
        unsafe { read_sized(opts, size, "opts->size", &mut o) }?;
    }
    // The core's own checks (Error::Invalid) name the field at fault.
    let mut options = Options::new(o.capacity);
    if o.max_bytes != 0 {
        options = options.max_bytes(o.max_bytes);
    }
    if o.max_msg_size != 0 {
        options = options.max_msg_size(o.max_msg_size);
    }
    if o.low_water != EVENTQ_LOW_WATER_DEFAULT {
        options = options.low_water(o.low_water);
    }
    if let Some(f) = o.drop_fn {
        let hook = DropHook {
            f,
            userdata: UserData::new(o.drop_userdata, None),
        };
        options = options.on_drop(move |m| hook.call(m));
    }
    Ok(options)
}

/// Creates a channel and writes its first handle to `*out`. `opts` may be
/// NULL for the defaults of `eventq_chan_opts_init`; else its `size` says
/// which fields it has (the rest take their defaults).
///
/// Returns 0; -EINVAL for a NULL out, an opts size below
/// EVENTQ_CHAN_OPTS_SIZE_MIN or ending inside a field, a capacity of 0 or
/// above EVENTQ_MAX_CAPACITY, max_msg_size above max_bytes, or low_water
/// not below capacity; -E2BIG when opts sets fields this version does not
/// know, or its size is above EVENTQ_STRUCT_SIZE_MAX (then nothing past
/// the size field is read); -EMFILE/-ENFILE when no fd is left for its
/// receive eventfd; -ENOMEM.
///
/// Cost: one fd (the receive eventfd; the send eventfd is created by the
/// first eventq_chan_send_fd) and, while idle, a few KiB of resident
/// memory whatever the capacity: the slots are allocated zeroed and their
/// pages become resident only as messages reach them.
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn eventq_chan_new(
    opts: *const eventq_chan_opts,
    out: *mut *mut eventq_chan,
) -> c_int {
    boundary!(PANIC, {
        ensure!(!out.is_null(), "out is NULL");
        // SAFETY: opts is NULL or initialised by eventq_chan_opts_init
        // (header).
        let options = try_c!(unsafe { options_of(opts) });
        match Chan::new(options) {
            // SAFETY: out is non-NULL (checked) and points to a handle
            // pointer (header).
            Ok(chan) => unsafe { out_new_handle(out, eventq_chan(chan)) },
            Err(e) => to_code(&e),
        }
    })
}

/// A new handle to the same channel, for another thread or owner; free each
/// handle once. NULL for a NULL chan.
///
/// Thread safety: any thread, concurrently with any call on other handles or
/// this one (except its free).
#[no_mangle]
pub extern "C" fn eventq_chan_clone(chan: *const eventq_chan) -> *mut eventq_chan {
    boundary!(ptr::null_mut(), {
        // SAFETY: chan is NULL or a handle from eventq_chan_new or _clone,
        // not freed (header).
        match unsafe { chan_ref(chan) } {
            Ok(c) => new_handle(eventq_chan(c.clone())),
            Err(_) => ptr::null_mut(),
        }
    })
}

/// Frees a handle. When it is the last, the channel goes away: messages
/// still queued are discarded (each passed to drop_fn) and its fds closed.
/// NULL is a no-op. Freeing does not close the channel for other handles.
///
/// Thread safety: any thread; the handle must not be used after or during.
#[no_mangle]
pub extern "C" fn eventq_chan_free(chan: *mut eventq_chan) {
    boundary!((), {
        // SAFETY: chan is NULL or a handle from eventq_chan_new or _clone,
        // given up here: not used after or during (header).
        unsafe { free_box(chan) }
    })
}

/// Frees a handle like `eventq_chan_free`. If it was the last, writes the
/// channel's final counters to `*out`, `size` bytes long (pass `sizeof
/// *out`; as for `eventq_chan_get_stats`), with `dropped`, the messages
/// discarded, and returns 1; otherwise returns 0 and leaves `*out` alone.
/// -EINVAL (and nothing freed) when chan or out is NULL or size is below
/// EVENTQ_CHAN_STATS_SIZE_MIN or ends inside a field; -E2BIG (nothing
/// freed) for a size above EVENTQ_STRUCT_SIZE_MAX.
///
/// Thread safety: as `eventq_chan_free`.
#[no_mangle]
pub extern "C" fn eventq_chan_free_final(
    chan: *mut eventq_chan,
    out: *mut eventq_chan_stats,
    size: usize,
) -> c_int {
    boundary!(PANIC, {
        ensure!(!out.is_null(), "out is NULL");
        try_c!(super::check_size::<eventq_chan_stats>(size, "size"));
        ensure!(!chan.is_null(), "chan is NULL");
        // SAFETY: chan is a handle from eventq_chan_new or _clone (not
        // NULL: checked), given up here: not used after or during (header).
        let handle = try_c!(unsafe { take_box(chan) }.ok_or(-libc::EINVAL));
        match handle.0.into_final_stats() {
            // SAFETY: out points to `size` writable bytes (header: pass
            // sizeof *out; the size was checked); eventq_chan_stats is all
            // u64, no padding.
            Some(s) => unsafe { write_sized(out, size, &s.into()) + 1 },
            None => 0,
        }
    })
}

/// The fd to poll for input: readable exactly while messages are pending or
/// the channel is closed (D4). Owned by the channel: poll it, never read,
/// write or close it. -EINVAL for NULL.
///
/// Edge-triggered waiters (EPOLLET, Go's netpoller, tokio's AsyncFd) may
/// receive until -EAGAIN (or a short batch) and then wait for the next
/// event: after any receive refused for lack of messages, the fd gets a new
/// event (an eventfd write, which wakes them even if it is already
/// readable) no later than when a message is receivable, or the channel
/// closes; close always writes it (D9).
///
/// Several consumers, each polling it in its own epoll set, should register
/// it with EPOLLEXCLUSIVE (level-triggered): the kernel then wakes one of
/// them per write instead of all (D4). Each must keep receiving until
/// -EAGAIN or end of stream before it waits again: a receive that reports
/// end of stream writes the fd again, which wakes the next, so every
/// consumer learns of the close (D6). A consumer that stops waiting counts
/// itself out with `eventq_chan_consumer_leave`, which hands the wake-up on.
///
/// Of a process-shared channel (`eventq_chan_new_shared`) it is an epoll
/// fd, readable also once the other process is gone; the kernel refuses
/// EPOLLEXCLUSIVE on an epoll fd, so there every consumer wakes.
///
/// Until the first call the fd is not kept in step (nobody can poll it), so
/// a channel used only through blocking calls costs no eventfd syscalls;
/// the first call brings it up to date, and it follows the queue from then
/// on.
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn eventq_chan_recv_fd(chan: *const eventq_chan) -> c_int {
    boundary!(PANIC, {
        // SAFETY: chan is NULL or a handle from eventq_chan_new or _clone,
        // not freed (header).
        try_c!(unsafe { chan_ref(chan) }).recv_raw_fd()
    })
}

/// The fd to poll for room: not readable while the channel is full and open;
/// readable once it drains to the low-water mark, or is closed (D5). After a
/// send refused for lack of room it stays down until the next receive that
/// leaves the queue at or below low water (in messages, and with a byte
/// limit also in bytes: max_bytes/2). Owned by the channel: poll it,
/// never read, write or close it. -EINVAL for NULL.
///
/// The first call (on any handle of the channel) creates the fd, at the
/// level the channel's state gives it, and every later call returns the
/// same one: a channel never asked for it has one fd. Only that first call
/// can fail: -EMFILE, -ENFILE or -ENOMEM when the eventfd cannot be
/// created, and a later call tries again.
///
/// Edge-triggered waiters may send until -EAGAIN (or a short batch) and then
/// wait for the next event: after any send refused for lack of room, the fd
/// gets a new event when it is due readable as above (a refused send leaves
/// it down); close always writes it (D9).
///
/// Of a process-shared channel it is an epoll fd, made with the channel,
/// readable also once the other process is gone (a send then fails with
/// -EPIPE once the ring is full).
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn eventq_chan_send_fd(chan: *const eventq_chan) -> c_int {
    boundary!(PANIC, {
        // SAFETY: chan is NULL or a handle from eventq_chan_new or _clone,
        // not freed (header).
        match try_c!(unsafe { chan_ref(chan) }).send_fd() {
            Ok(fd) => fd.as_raw_fd(),
            Err(e) => to_code(&e),
        }
    })
}

/// Queues a copy of the `len` bytes at `data` (NULL only with len 0; empty
/// messages are messages). Waits for room as `timeout_ns` says. A sender
/// waiting on a full channel resumes when it drains to its low-water mark
/// (when the send fd becomes readable) or closes, and tries once more at
/// the deadline; `low_water = capacity - 1` resumes it at the first
/// receive.
///
/// Returns 0; -EAGAIN (timeout 0) or -ETIMEDOUT when there was no room;
/// -EPIPE when closed; -EMSGSIZE when len exceeds the maximum message size;
/// -EINVAL for a NULL chan, NULL data with len > 0, or a timeout below
/// EVENTQ_FOREVER. On any error nothing was queued.
///
/// Thread safety: any thread, concurrently with any other call.
#[no_mangle]
pub extern "C" fn eventq_chan_send(
    chan: *const eventq_chan,
    data: *const c_void,
    len: usize,
    timeout_ns: i64,
) -> c_int {
    boundary!(PANIC, {
        // SAFETY: chan is NULL or a handle from eventq_chan_new or _clone,
        // not freed (header).
        let chan = try_c!(unsafe { chan_ref(chan) });
        // SAFETY: data is NULL or points to len readable bytes (header).
        let msg = try_c!(unsafe { bytes_in(chan, data, len) });
        let wait = try_c!(wait_of(timeout_ns));
        code_of(chan.send(msg, wait))
    })
}

/// Queues copies of a prefix of `msgs[0..count]`, in order, as many as fit;
/// waits (as `timeout_ns` says) only until the first fits. Returns how many
/// were queued (0 for count 0); the rest were not and stay the caller's. A
/// message over the size limit ends the prefix.
///
/// Errors (nothing queued): -EAGAIN, -ETIMEDOUT, -EPIPE as for
/// `eventq_chan_send`; -EMSGSIZE when msgs[0] is too long; -EINVAL for a NULL
/// chan, NULL msgs with count > 0, count > INT_MAX, any NULL data with len > 0,
/// or a bad timeout.
///
/// Thread safety: any thread, concurrently with any other call.
#[no_mangle]
pub extern "C" fn eventq_chan_send_batch(
    chan: *const eventq_chan,
    msgs: *const eventq_buf,
    count: usize,
    timeout_ns: i64,
) -> c_int {
    boundary!(PANIC, {
        // SAFETY: chan is NULL or a handle from eventq_chan_new or _clone,
        // not freed (header).
        let chan = try_c!(unsafe { chan_ref(chan) });
        let wait = try_c!(wait_of(timeout_ns));
        ensure!(
            count <= c_int::MAX as usize,
            "count {count} is above INT_MAX"
        );
        ensure!(
            !msgs.is_null() || count == 0,
            "msgs is NULL with count {count}"
        );
        let bufs: &[eventq_buf] = if msgs.is_null() {
            &[]
        } else {
            // SAFETY: msgs points to count initialised eventq_buf entries
            // (header).
            unsafe { slice::from_raw_parts(msgs, count) }
        };
        // Check every entry before queueing any, so a bad pointer late in
        // the batch cannot leave a half-sent batch behind an error.
        if let Some(i) = bufs.iter().position(|b| b.data.is_null() && b.len != 0) {
            return super::fail_code(
                -libc::EINVAL,
                format_args!("msgs[{i}].data is NULL with len {}", bufs[i].len),
            );
        }
        // A message over the size limit ends the prefix (the first one fails
        // the call); entries past it are never turned into slices.
        let max = chan.max_msg_size();
        let sendable = bufs.iter().position(|b| b.len > max).unwrap_or(bufs.len());
        ensure!(sendable > 0 || bufs.is_empty() => -libc::EMSGSIZE,
            "msgs[0].len {} is above the channel's max_msg_size {max}", bufs[0].len);
        // SAFETY: each data is NULL only with len 0 (checked) or points to
        // len readable bytes (header).
        let iter = bufs[..sendable]
            .iter()
            .map(|b| unsafe { bytes_in(chan, b.data, b.len) }.unwrap_or(&[]));
        match chan.send_batch(iter, wait) {
            Ok(n) => int_count(n),
            Err(e) => to_code(&e),
        }
    })
}

/// Receives the head message into `buf` (`cap` bytes; NULL only with cap 0)
/// and writes its length to `*len`.
///
/// Returns 0. -EMSGSIZE when cap is smaller than the message: the message
/// stays at the head and `*len` receives the length it needs (the one
/// out-parameter written on an error). -EAGAIN (timeout 0) or -ETIMEDOUT
/// when nothing came; -EPIPE when the channel is closed and drained (end of
/// stream); -EINVAL for a NULL chan or len, NULL buf with cap > 0, or a bad
/// timeout.
///
/// Thread safety: any thread, concurrently with any other call.
#[no_mangle]
pub extern "C" fn eventq_chan_recv(
    chan: *const eventq_chan,
    buf: *mut c_void,
    cap: usize,
    len: *mut usize,
    timeout_ns: i64,
) -> c_int {
    boundary!(PANIC, {
        // SAFETY: chan is NULL or a handle from eventq_chan_new or _clone,
        // not freed (header).
        let chan = try_c!(unsafe { chan_ref(chan) });
        ensure!(!len.is_null(), "len is NULL");
        // SAFETY: buf is NULL or points to cap writable bytes (header).
        let buf = try_c!(unsafe { bytes_out(buf, cap) });
        let wait = try_c!(wait_of(timeout_ns));
        // The length received, or on -EMSGSIZE the length needed. The
        // error is matched where it lies: moving it out to a new slot
        // stalled the -EAGAIN path on store forwarding (about 8 ns).
        let res = chan.recv_into(buf, wait);
        let (n, code) = match &res {
            Ok(n) => (*n, 0),
            Err(e @ crate::Error::BufferTooSmall { needed }) => (*needed, to_code(e)),
            Err(e) => return to_code(e),
        };
        // SAFETY: len is non-NULL (checked) and points to a size_t
        // (header).
        unsafe { write_out(len, n) };
        code
    })
}

/// Receives the head message without copying it and writes an owned
/// message to `*out`; read it with `eventq_msg_data`/`eventq_msg_len`, free
/// it with `eventq_msg_free`. It outlives the channel.
///
/// Returns 0; -EAGAIN, -ETIMEDOUT, -EPIPE (end of stream) as for
/// `eventq_chan_recv`; -EINVAL for a NULL chan or out, or a bad timeout.
///
/// Thread safety: any thread, concurrently with any other call.
#[no_mangle]
pub extern "C" fn eventq_chan_recv_msg(
    chan: *const eventq_chan,
    out: *mut *mut eventq_msg,
    timeout_ns: i64,
) -> c_int {
    boundary!(PANIC, {
        // SAFETY: chan is NULL or a handle from eventq_chan_new or _clone,
        // not freed (header).
        let chan = try_c!(unsafe { chan_ref(chan) });
        ensure!(!out.is_null(), "out is NULL");
        let wait = try_c!(wait_of(timeout_ns));
        match chan.recv(wait) {
            // SAFETY: out is non-NULL (checked) and points to a handle
            // pointer (header).
            Ok(m) => unsafe { out_new_handle(out, eventq_msg(m)) },
            Err(e) => to_code(&e),
        }
    })
}

/// Receives up to `max_msgs` messages, packed back to back into `buf` (`cap`
/// bytes), each length written to `lens[i]`; waits (as `timeout_ns` says)
/// only for the first. Returns the count (0 when max_msgs is 0). Stops before
/// a message that does not fit.
///
/// -EMSGSIZE when the head message alone does not fit: nothing is taken and
/// `lens[0]` receives the length it needs. Otherwise errors as for
/// `eventq_chan_recv`; -EINVAL also for NULL lens with max_msgs > 0.
///
/// Thread safety: any thread, concurrently with any other call.
#[no_mangle]
pub extern "C" fn eventq_chan_recv_batch(
    chan: *const eventq_chan,
    buf: *mut c_void,
    cap: usize,
    lens: *mut usize,
    max_msgs: usize,
    timeout_ns: i64,
) -> c_int {
    boundary!(PANIC, {
        // SAFETY: chan is NULL or a handle from eventq_chan_new or _clone,
        // not freed (header).
        let chan = try_c!(unsafe { chan_ref(chan) });
        // SAFETY: buf is NULL or points to cap writable bytes (header).
        let buf = try_c!(unsafe { bytes_out(buf, cap) });
        let wait = try_c!(wait_of(timeout_ns));
        let max_msgs = max_msgs.min(c_int::MAX as usize);
        ensure!(
            !lens.is_null() || max_msgs == 0,
            "lens is NULL with max_msgs {max_msgs}"
        );
        let lens: &mut [usize] = if lens.is_null() {
            &mut []
        } else {
            // SAFETY: lens points to max_msgs writable size_t entries
            // (header).
            unsafe { slice::from_raw_parts_mut(lens, max_msgs) }
        };
        match chan.recv_batch(buf, lens, wait) {
            Ok(n) => int_count(n),
            Err(e) => {
                if let crate::Error::BufferTooSmall { needed } = e {
                    lens[0] = needed;
                }
                to_code(&e)
            }
        }
    })
}

/// Closes the channel for every handle (D6): sends fail with -EPIPE from now
/// on, queued messages stay receivable, receives report -EPIPE once drained,
/// both fds become and stay readable, and every blocked sender and receiver
/// wakes. Returns 0, also when already closed; -EINVAL for NULL.
///
/// Thread safety: any thread, concurrently with any other call.
#[no_mangle]
pub extern "C" fn eventq_chan_close(chan: *const eventq_chan) -> c_int {
    boundary!(PANIC, {
        // SAFETY: chan is NULL or a handle from eventq_chan_new or _clone,
        // not freed (header).
        try_c!(unsafe { chan_ref(chan) }).close();
        0
    })
}

/// Writes a snapshot of the channel's counters to `*out`, `size` bytes long
/// (pass `sizeof *out`): nothing past `size` is written, so a caller built
/// with an older, smaller struct gets the fields it knows; a newer, larger
/// struct gets zeros in the fields this library does not know.
///
/// Returns 0; -EINVAL for a NULL chan or out, or a size below
/// EVENTQ_CHAN_STATS_SIZE_MIN or ending inside a field; -E2BIG for a size
/// above EVENTQ_STRUCT_SIZE_MAX (nothing written).
///
/// Thread safety: any thread, concurrently with any other call.
#[no_mangle]
pub extern "C" fn eventq_chan_get_stats(
    chan: *const eventq_chan,
    out: *mut eventq_chan_stats,
    size: usize,
) -> c_int {
    boundary!(PANIC, {
        // SAFETY: chan is NULL or a handle from eventq_chan_new or _clone,
        // not freed (header).
        let chan = try_c!(unsafe { chan_ref(chan) });
        ensure!(!out.is_null(), "out is NULL");
        // SAFETY: out points to `size` writable bytes (header: pass sizeof
        // *out); eventq_chan_stats is all u64, no padding.
        unsafe { write_sized(out, size, &chan.stats().into()) }
    })
}

/// The bytes of a received message; NULL for a NULL msg. Valid until
/// `eventq_msg_free`.
///
/// Thread safety: any thread that owns the message.
#[no_mangle]
pub extern "C" fn eventq_msg_data(msg: *const eventq_msg) -> *const u8 {
    boundary!(ptr::null(), {
        // SAFETY: msg is NULL or a message from eventq_chan_recv_msg, not
        // freed (header).
        unsafe { borrow(msg) }.map_or(ptr::null(), |m| m.0.as_ptr())
    })
}

/// The length of a received message; 0 for a NULL msg.
///
/// Thread safety: any thread that owns the message.
#[no_mangle]
pub extern "C" fn eventq_msg_len(msg: *const eventq_msg) -> usize {
    boundary!(0, {
        // SAFETY: msg is NULL or a message from eventq_chan_recv_msg, not
        // freed (header).
        unsafe { borrow(msg) }.map_or(0, |m| m.0.len())
    })
}

/// Frees a received message. NULL is a no-op.
///
/// Thread safety: any thread that owns the message.
#[no_mangle]
pub extern "C" fn eventq_msg_free(msg: *mut eventq_msg) {
    boundary!((), {
        // SAFETY: msg is NULL or a message from eventq_chan_recv_msg, given
        // up here: not used after or during (header).
        unsafe { free_box(msg) }
    })
}
