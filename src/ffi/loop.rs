// SPDX-License-Identifier: MIT OR Apache-2.0
//! `eventq_loop_*` and `eventq_source_*`: the loop's C ABI.
//!
//! A source handle (`eventq_source`) is reference-counted: the source holds
//! one reference (the pointer its callback receives), and `out` of an add
//! call receives another, released by `eventq_source_free`. So a handle
//! stays valid after its source is removed, and calls on it then fail with
//! -ESTALE instead of touching freed memory.

use std::ffi::{c_int, c_void};
use std::mem::MaybeUninit;
use std::os::fd::AsRawFd;
use std::ptr;
use std::sync::Arc;
use std::time::Duration;

use super::chan::eventq_chan;
pub use super::eventq_destroy_fn;
use super::{
    borrow, boundary, clone_arc, code_of, ensure, free_arc, free_box, int_count, out_new_handle,
    out_ref, to_code, try_c, wait_of, Handle, OwnershipArc, OwnershipBox, UserData, PANIC,
};
use crate::chan::Wait;
use crate::error::Error;
use crate::event_loop::{events, Callback, Event, Loop, LoopHandle, NewSource, SourceId};

/// An event loop. Free with `eventq_loop_free`.
pub struct eventq_loop(Loop);

impl Handle for eventq_loop {
    type Ownership = OwnershipBox;
    const ARG: &'static str = "lp";
}

/// A source of a loop (see `eventq_loop_add_fd` and the other adds, and
/// `eventq_loop_add_memcg`).
pub struct eventq_source {
    lp: LoopHandle,
    id: SourceId,
}

impl Handle for eventq_source {
    type Ownership = OwnershipArc;
    const ARG: &'static str = "src";
}

/// fd readiness flags: the epoll values.
pub const EVENTQ_IN: u32 = 0x001;
pub const EVENTQ_PRI: u32 = 0x002;
pub const EVENTQ_OUT: u32 = 0x004;
/// Always reported, whether asked for or not.
pub const EVENTQ_ERR: u32 = 0x008;
/// Always reported, whether asked for or not.
pub const EVENTQ_HUP: u32 = 0x010;
pub const EVENTQ_RDHUP: u32 = 0x2000;
/// Edge-triggered: report each change once instead of the level.
pub const EVENTQ_EDGE: u32 = 1u32 << 31;
/// Disable the source after one event; `eventq_source_set_enabled(src, 1)`
/// re-arms it.
pub const EVENTQ_ONESHOT: u32 = 1u32 << 30;

/// Messages a channel source delivers per iteration unless
/// `eventq_source_set_budget` says otherwise.
pub const EVENTQ_DEFAULT_BUDGET: usize = 256;

/// Posts a loop holds pending before `eventq_loop_post` fails with -EAGAIN.
pub const EVENTQ_POST_CAPACITY: usize = 4096;

const _: () = {
    assert!(EVENTQ_DEFAULT_BUDGET == crate::event_loop::DEFAULT_BUDGET);
    assert!(EVENTQ_POST_CAPACITY == crate::event_loop::POST_CAPACITY);
    assert!(EVENTQ_IN == events::IN && EVENTQ_PRI == events::PRI && EVENTQ_OUT == events::OUT);
    assert!(
        EVENTQ_ERR == events::ERR && EVENTQ_HUP == events::HUP && EVENTQ_RDHUP == events::RDHUP
    );
    assert!(EVENTQ_EDGE == events::EDGE && EVENTQ_ONESHOT == events::ONESHOT);
};

/// An fd source is ready; `revents` holds the EVENTQ_* flags set. Return 0,
/// or a negative errno to disable the source (see `eventq_source_error`).
pub type eventq_fd_fn = Option<
    extern "C" fn(src: *mut eventq_source, fd: c_int, revents: u32, userdata: *mut c_void) -> c_int,
>;

/// A timer expired `expirations` times since the last call (above 1: some
/// were missed; the period does not drift). Return as for eventq_fd_fn.
pub type eventq_timer_fn = Option<
    extern "C" fn(src: *mut eventq_source, expirations: u64, userdata: *mut c_void) -> c_int,
>;

/// A channel source's next message, `len` bytes at `data` (valid during the
/// call only). `data` is NULL exactly once, after the last message of a
/// closed channel (end of stream); the source is then disabled. Empty
/// messages have a non-NULL `data`. Return as for eventq_fd_fn.
pub type eventq_chan_fn = Option<
    extern "C" fn(
        src: *mut eventq_source,
        data: *const c_void,
        len: usize,
        userdata: *mut c_void,
    ) -> c_int,
>;

/// A batch channel source's next messages (see `eventq_loop_add_chan_batch`):
/// `count` messages (at least 1), in order, packed back to back at `data`,
/// message i being `lens[i]` bytes; both arrays are valid during the call
/// only. `data` is NULL and `count` 0 exactly once, after the last message
/// of a closed channel (end of stream); the source is then disabled. Return
/// as for eventq_fd_fn: every message of the batch counts as delivered
/// either way.
pub type eventq_chan_batch_fn = Option<
    extern "C" fn(
        src: *mut eventq_source,
        data: *const c_void,
        lens: *const usize,
        count: usize,
        userdata: *mut c_void,
    ) -> c_int,
>;

/// A signal source's signal arrived. Return as for eventq_fd_fn.
pub type eventq_signal_fn =
    Option<extern "C" fn(src: *mut eventq_source, signo: c_int, userdata: *mut c_void) -> c_int>;

/// A task posted with `eventq_loop_post`.
pub type eventq_post_fn = Option<extern "C" fn(arg: *mut c_void)>;

/// The C side of a source: its own handle reference (the `src` its
/// callback receives, made once the source exists) and the userdata with
/// its destroy hook. Dropped exactly once, releasing them in that order:
/// when the source goes away, or when the add call fails.
pub(crate) struct Hook {
    src: Option<Arc<eventq_source>>,
    userdata: UserData,
}

/// A C callback's return as a result.
pub(crate) fn status(rc: c_int) -> crate::Result<()> {
    if rc < 0 {
        Err(Error::Callback(rc))
    } else {
        Ok(())
    }
}

/// The loop behind a handle; -EINVAL for NULL.
///
/// # Safety
/// As [`borrow`]: `lp` is NULL or a live loop handle.
pub(crate) unsafe fn loop_ref<'a>(lp: *const eventq_loop) -> Result<&'a Loop, c_int> {
    // SAFETY: this function's contract is borrow's.
    unsafe { borrow(lp) }.map(|l| &l.0)
}

/// The live loop and id behind a source handle.
///
/// # Safety
/// As [`borrow`]: `src` is NULL or a live reference of a source handle.
unsafe fn source_ref(src: *const eventq_source) -> Result<(Loop, SourceId), c_int> {
    // SAFETY: this function's contract is borrow's.
    let src = unsafe { borrow(src) }?;
    let lp = src.lp.upgrade().map_err(|e| to_code(&e))?;
    Ok((lp, src.id))
}

fn duration_ns(ns: u64) -> Duration {
    Duration::from_nanos(ns)
}

impl Hook {
    /// Takes ownership of userdata at the start of an add call: from here on
    /// every path, failure included, runs destroy(userdata) exactly once.
    pub(crate) fn new(userdata: *mut c_void, destroy: eventq_destroy_fn) -> Hook {
        Hook {
            src: None,
            userdata: UserData::new(userdata, destroy),
        }
    }

    /// Makes the source's handle, and returns another reference to it if
    /// `out_wanted`. Runs under the loop's lock, before the callback can
    /// run, so the caller's reference (for `out`) exists before a callback
    /// could remove the source and drop the hook's.
    fn attach(&mut self, lp: &Loop, id: SourceId, out_wanted: bool) -> *mut eventq_source {
        let src = self.src.insert(Arc::new(eventq_source {
            lp: lp.handle(),
            id,
        }));
        if out_wanted {
            clone_arc(src)
        } else {
            ptr::null_mut()
        }
    }

    fn src(&self) -> *mut eventq_source {
        self.src
            .as_ref()
            .map_or(ptr::null_mut(), |src| Arc::as_ptr(src).cast_mut())
    }
}

/// The shared part of every add call: `register` calls the core add with a
/// callback factory; the factory makes the source's handle (see
/// `Hook::attach`) and a callback that passes each event to `on_event` with
/// the handle and userdata. If the add fails before the factory runs, the
/// hook is dropped here and destroy(userdata) runs. Returns 0 with the
/// handle in `*out` (from [`out_ref`]; if not NULL), or the error.
pub(crate) fn add_source(
    lp: &Loop,
    hook: Hook,
    out: Option<&mut MaybeUninit<*mut eventq_source>>,
    on_event: impl FnMut(*mut eventq_source, *mut c_void, Event<'_>) -> crate::Result<()>
        + Send
        + 'static,
    register: impl FnOnce(&mut dyn FnMut(SourceId) -> Callback) -> crate::Result<SourceId>,
) -> c_int {
    let mut made = ptr::null_mut();
    let (mut hook, mut on_event) = (Some(hook), Some(on_event));
    let out_wanted = out.is_some();
    let res = register(&mut |id| {
        let (mut hook, mut f) = (
            hook.take().expect("factory runs once"),
            on_event.take().expect("factory runs once"),
        );
        made = hook.attach(lp, id, out_wanted);
        Box::new(move |_, _, ev| f(hook.src(), hook.userdata.ptr(), ev))
    });
    match res {
        Ok(_) => {
            if let Some(out) = out {
                out.write(made);
            }
            0
        }
        Err(e) => to_code(&e),
    }
}

/// Creates a loop and writes it to `*out`. Returns 0; -EINVAL for NULL out;
/// -EMFILE/-ENFILE/-ENOMEM.
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn eventq_loop_new(out: *mut *mut eventq_loop) -> c_int {
    boundary!(PANIC, {
        ensure!(!out.is_null(), "out is NULL");
        match Loop::new() {
            // SAFETY: out is non-NULL (checked) and points to a handle
            // pointer (header).
            Ok(lp) => unsafe { out_new_handle(out, eventq_loop(lp)) },
            Err(e) => to_code(&e),
        }
    })
}

/// Frees a loop: every source goes away (destroy hooks run, here), posts not
/// yet run are discarded unrun, and source handles still held fail with
/// -ESTALE from now on (free them as usual). NULL is a no-op.
///
/// Thread safety: not while the loop runs or other threads use it.
#[no_mangle]
pub extern "C" fn eventq_loop_free(lp: *mut eventq_loop) {
    boundary!((), {
        // SAFETY: lp is NULL or a loop from eventq_loop_new, given up here:
        // not running nor used by other threads (header).
        unsafe { free_box(lp) }
    })
}

/// The loop's own fd: readable while some source has work. To embed the loop
/// in another, poll this fd there and call `eventq_loop_run_once(lp, 0)` when
/// it is readable. Not with a PSI memory watch on the loop: an outer poll
/// consumes the trigger's event before the loop sees it, so such a loop
/// must run itself (docs/design.md, Embedding). -EINVAL for NULL.
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn eventq_loop_fd(lp: *const eventq_loop) -> c_int {
    boundary!(PANIC, {
        // SAFETY: lp is NULL or a loop from eventq_loop_new, not freed
        // (header).
        try_c!(unsafe { loop_ref(lp) }).fd().as_raw_fd()
    })
}

/// Runs the loop until `eventq_loop_stop`. Returns 0 when stopped; -EBUSY if
/// the loop is already being run; -EINVAL for NULL; a negative errno if
/// epoll fails.
///
/// Thread safety: one thread at a time runs a loop.
#[no_mangle]
pub extern "C" fn eventq_loop_run(lp: *const eventq_loop) -> c_int {
    boundary!(PANIC, {
        // SAFETY: lp is NULL or a loop from eventq_loop_new, not freed
        // (header).
        code_of(try_c!(unsafe { loop_ref(lp) }).run())
    })
}

/// Runs one iteration: waits for events (EVENTQ_FOREVER without limit, 0 not
/// at all, else timeout_ns rounded up to whole milliseconds, epoll's unit:
/// any positive timeout, 1 ns included, waits at least 1 ms unless an event
/// comes first) and dispatches them. Returns the number of callbacks run (0 on timeout);
/// -EBUSY if the loop is already being run; -EINVAL for NULL or a bad
/// timeout. A stop made during the call ends its dispatch early (see
/// `eventq_loop_stop`); a stop already pending does not.
///
/// Thread safety: one thread at a time runs a loop.
#[no_mangle]
pub extern "C" fn eventq_loop_run_once(lp: *const eventq_loop, timeout_ns: i64) -> c_int {
    boundary!(PANIC, {
        // SAFETY: lp is NULL or a loop from eventq_loop_new, not freed
        // (header).
        let lp = try_c!(unsafe { loop_ref(lp) });
        let timeout = match try_c!(wait_of(timeout_ns)) {
            Wait::Forever => None,
            Wait::Never => Some(Duration::ZERO),
            Wait::For(d) => Some(d),
        };
        match lp.run_once(timeout) {
            Ok(n) => int_count(n),
            Err(e) => to_code(&e),
        }
    })
}

/// Makes `eventq_loop_run` return; if the loop is not running, the next run
/// returns at once. Returns 0; -EINVAL for NULL.
///
/// A stop made while a callback runs (from that callback or another thread)
/// takes effect as soon as that callback returns: no further callback of the
/// iteration runs (not the rest of a channel source's budget, nor other
/// ready sources, nor pending posts): a callback that stops the loop is the
/// last one before the run returns. `eventq_loop_run` then returns
/// 0; `eventq_loop_run_once` returns the count so far and leaves the stop
/// pending for the next `eventq_loop_run`. Nothing is lost: a channel source
/// takes no message it does not deliver, and what was not dispatched is
/// dispatched by the next run (a skipped edge-triggered or one-shot fd
/// source is re-armed, so it is reported again if still ready).
///
/// Thread safety: any thread (not from a signal handler).
#[no_mangle]
pub extern "C" fn eventq_loop_stop(lp: *const eventq_loop) -> c_int {
    boundary!(PANIC, {
        // SAFETY: lp is NULL or a loop from eventq_loop_new, not freed
        // (header).
        try_c!(unsafe { loop_ref(lp) }).stop();
        0
    })
}

/// Runs `fn(arg)` on the loop's thread, after everything posted before it
/// by the same thread. Like the add calls, it takes ownership of arg:
/// destroy(arg), if destroy is not NULL, runs exactly once: after fn
/// returns, or when the loop is freed with the post still pending (fn then
/// never runs), or before this call returns if it fails.
///
/// Returns 0; -EAGAIN when EVENTQ_POST_CAPACITY posts are already pending;
/// -EINVAL for a NULL loop or fn. On failure fn never runs.
///
/// Thread safety: any thread (not from a signal handler).
#[no_mangle]
pub extern "C" fn eventq_loop_post(
    lp: *const eventq_loop,
    f: eventq_post_fn,
    arg: *mut c_void,
    destroy: eventq_destroy_fn,
) -> c_int {
    boundary!(PANIC, {
        let arg = UserData::new(arg, destroy);
        // SAFETY: lp is NULL or a loop from eventq_loop_new, not freed
        // (header).
        let lp = try_c!(unsafe { loop_ref(lp) });
        ensure!(f.is_some(), "fn is NULL");
        let Some(f) = f else {
            return -libc::EINVAL;
        };
        let task = PostTask { f, arg };
        code_of(lp.post(move |_| task.run()))
    })
}

/// A posted fn and its arg; destroy(arg) runs when the task is dropped,
/// after running or unrun.
struct PostTask {
    f: extern "C" fn(*mut c_void),
    arg: UserData,
}

impl PostTask {
    fn run(self) {
        (self.f)(self.arg.ptr());
    }
}

/// Watches `fd` for `events` (EVENTQ_IN, _OUT, _PRI, _RDHUP; EVENTQ_ERR and
/// _HUP are always reported; level-triggered unless EVENTQ_EDGE; with
/// EVENTQ_ONESHOT disabled after one event). The fd stays the caller's:
/// remove the source before closing it.
///
/// Every add call takes ownership of userdata: destroy(userdata), if
/// destroy is not NULL, runs exactly once, when the source goes away
/// (removed, or its loop freed) or, if the call fails, before it returns.
/// On failure the callback never runs. `out` may be NULL: the source then
/// lives until its callback removes it (through its src argument) or the
/// loop is freed; else `*out` receives a handle, freed with
/// `eventq_source_free`. Callbacks run on the thread running the loop;
/// destroy runs on the thread that removes the source (right after the
/// callback, if removed from its own callback), frees the loop, or made the
/// failed add call. No library lock is held while either runs.
///
/// Returns 0; -EINVAL for a NULL loop or cb, unknown flags, no event asked
/// for, or the loop's own fd; -EBADF for a bad fd; -EPERM for an fd epoll
/// cannot watch (a regular file); -EEXIST if the fd is already watched by
/// this loop; -ELOOP if it is an epoll fd that would make a cycle.
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn eventq_loop_add_fd(
    lp: *const eventq_loop,
    fd: c_int,
    events: u32,
    cb: eventq_fd_fn,
    userdata: *mut c_void,
    destroy: eventq_destroy_fn,
    out: *mut *mut eventq_source,
) -> c_int {
    boundary!(PANIC, {
        let hook = Hook::new(userdata, destroy);
        // SAFETY: out is NULL or points to a handle pointer (header).
        let out = unsafe { out_ref(out) };
        // SAFETY: lp is NULL or a loop from eventq_loop_new, not freed
        // (header).
        let lp = try_c!(unsafe { loop_ref(lp) });
        ensure!(cb.is_some(), "cb is NULL");
        let Some(cb) = cb else {
            return -libc::EINVAL;
        };
        let on_event = move |src, ud, ev: Event<'_>| match ev {
            Event::Fd(revents) => status(cb(src, fd, revents, ud)),
            _ => Ok(()),
        };
        add_source(lp, hook, out, on_event, |make| {
            lp.add_with(NewSource::Fd { fd, events }, make)
        })
    })
}

/// A timer firing first_ns from now (0: at once), then every interval_ns if
/// it is not 0 (monotonic clock). A one-shot timer disables itself after
/// firing; `eventq_source_set_timer` re-arms it. Ownership, `out` and
/// callbacks as for `eventq_loop_add_fd`.
///
/// Returns 0; -EINVAL for a NULL loop or cb; -EMFILE/-ENFILE.
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn eventq_loop_add_timer(
    lp: *const eventq_loop,
    first_ns: u64,
    interval_ns: u64,
    cb: eventq_timer_fn,
    userdata: *mut c_void,
    destroy: eventq_destroy_fn,
    out: *mut *mut eventq_source,
) -> c_int {
    boundary!(PANIC, {
        let hook = Hook::new(userdata, destroy);
        // SAFETY: out is NULL or points to a handle pointer (header).
        let out = unsafe { out_ref(out) };
        // SAFETY: lp is NULL or a loop from eventq_loop_new, not freed
        // (header).
        let lp = try_c!(unsafe { loop_ref(lp) });
        ensure!(cb.is_some(), "cb is NULL");
        let Some(cb) = cb else {
            return -libc::EINVAL;
        };
        let (first, interval) = (duration_ns(first_ns), duration_ns(interval_ns));
        let on_event = move |src, ud, ev: Event<'_>| match ev {
            Event::Timer(n) => status(cb(src, n, ud)),
            _ => Ok(()),
        };
        add_source(lp, hook, out, on_event, |make| {
            lp.add_with(NewSource::Timer { first, interval }, make)
        })
    })
}

/// Calls back once per message of `chan`, in order, at most the source's
/// budget per iteration (EVENTQ_DEFAULT_BUDGET, see `eventq_source_set_budget`) so a
/// busy channel cannot starve other sources; then once with data NULL when
/// the channel is closed and drained, after which the source is disabled.
/// The source holds its own reference to the channel. Ownership, `out` and
/// callbacks as for `eventq_loop_add_fd`.
///
/// Several loops may consume one channel: the source registers the fd with
/// EPOLLEXCLUSIVE, so a message wakes one loop, not all; a loop that stops
/// with messages left (budget spent, loop stopped, source disabled or
/// removed) wakes another, and end of stream reaches every loop (D4).
///
/// Returns 0; -EINVAL for a NULL loop, chan or cb; -EEXIST if this loop
/// already has a source for the channel.
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn eventq_loop_add_chan(
    lp: *const eventq_loop,
    chan: *const eventq_chan,
    cb: eventq_chan_fn,
    userdata: *mut c_void,
    destroy: eventq_destroy_fn,
    out: *mut *mut eventq_source,
) -> c_int {
    boundary!(PANIC, {
        let hook = Hook::new(userdata, destroy);
        // SAFETY: out is NULL or points to a handle pointer (header).
        let out = unsafe { out_ref(out) };
        // SAFETY: lp is NULL or a loop from eventq_loop_new, not freed
        // (header).
        let lp = try_c!(unsafe { loop_ref(lp) });
        // SAFETY: chan is NULL or a handle from eventq_chan_new or _clone,
        // not freed (header).
        let chan = try_c!(unsafe { super::chan::chan_ref(chan) });
        ensure!(cb.is_some(), "cb is NULL");
        let Some(cb) = cb else {
            return -libc::EINVAL;
        };
        let on_event = move |src, ud, ev: Event<'_>| match ev {
            Event::Message(m) => status(cb(src, m.as_ptr().cast(), m.len(), ud)),
            Event::Closed => status(cb(src, ptr::null(), 0, ud)),
            _ => Ok(()),
        };
        add_source(lp, hook, out, on_event, |make| {
            lp.add_with(NewSource::Chan { chan, batch: false }, make)
        })
    })
}

/// As `eventq_loop_add_chan`, but the callback runs once per batch of
/// messages instead of once per message: all the messages the channel
/// holds, up to the source's budget (`budget`, or EVENTQ_DEFAULT_BUDGET for
/// 0; `eventq_source_set_budget` changes it), taken in order into one
/// buffer and handed over together as `data` and `lens` (see
/// eventq_chan_batch_fn). For a
/// consumer that can take several messages at once (a binding whose every
/// call into its language has a fixed cost, a writer that coalesces),
/// the fixed cost of a callback is paid once per batch.
///
/// Every message taken is delivered: no callback runs while a batch is
/// taken, so nothing a callback does (stop, remove, fail) leaves a message
/// taken and not delivered; the later messages stay in the channel. After
/// the channel is closed and drained, the callback runs once more with
/// data NULL and count 0, and the source is disabled. Budget, end of
/// stream, several loops on one channel, ownership, `out` and callbacks as
/// for `eventq_loop_add_chan`; `eventq_loop_run_once` counts a batch as one
/// callback.
///
/// Returns 0; -EINVAL for a NULL loop, chan or cb; -EEXIST if this loop
/// already has a source for the channel.
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn eventq_loop_add_chan_batch(
    lp: *const eventq_loop,
    chan: *const eventq_chan,
    budget: usize,
    cb: eventq_chan_batch_fn,
    userdata: *mut c_void,
    destroy: eventq_destroy_fn,
    out: *mut *mut eventq_source,
) -> c_int {
    boundary!(PANIC, {
        let hook = Hook::new(userdata, destroy);
        // SAFETY: out is NULL or points to a handle pointer (header).
        let out = unsafe { out_ref(out) };
        // SAFETY: lp is NULL or a loop from eventq_loop_new, not freed
        // (header).
        let lp = try_c!(unsafe { loop_ref(lp) });
        // SAFETY: chan is NULL or a handle from eventq_chan_new or _clone,
        // not freed (header).
        let chan = try_c!(unsafe { super::chan::chan_ref(chan) });
        ensure!(cb.is_some(), "cb is NULL");
        let Some(cb) = cb else {
            return -libc::EINVAL;
        };
        let on_event = move |src, ud, ev: Event<'_>| match ev {
            Event::Batch(b) => status(cb(
                src,
                b.data().as_ptr().cast(),
                b.lens().as_ptr(),
                b.len(),
                ud,
            )),
            Event::Closed => status(cb(src, ptr::null(), ptr::null(), 0, ud)),
            _ => Ok(()),
        };
        let budget = if budget == 0 {
            EVENTQ_DEFAULT_BUDGET
        } else {
            budget
        };
        add_source(lp, hook, out, on_event, |make| {
            lp.add_with_budget(NewSource::Chan { chan, batch: true }, budget, make)
        })
    })
}

/// Calls back when signal `signo` arrives (signalfd). Blocks the signal in
/// the calling thread; block it in every thread of the process (best before
/// starting any), or another thread may take it. Ownership, `out` and
/// callbacks as for `eventq_loop_add_fd`.
///
/// Returns 0; -EINVAL for a NULL loop or cb, or a signal that cannot be
/// caught (SIGKILL, SIGSTOP, out of range); -EBUSY if the signal already has
/// a source in this loop.
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn eventq_loop_add_signal(
    lp: *const eventq_loop,
    signo: c_int,
    cb: eventq_signal_fn,
    userdata: *mut c_void,
    destroy: eventq_destroy_fn,
    out: *mut *mut eventq_source,
) -> c_int {
    boundary!(PANIC, {
        let hook = Hook::new(userdata, destroy);
        // SAFETY: out is NULL or points to a handle pointer (header).
        let out = unsafe { out_ref(out) };
        // SAFETY: lp is NULL or a loop from eventq_loop_new, not freed
        // (header).
        let lp = try_c!(unsafe { loop_ref(lp) });
        ensure!(cb.is_some(), "cb is NULL");
        let Some(cb) = cb else {
            return -libc::EINVAL;
        };
        let on_event = move |src, ud, ev: Event<'_>| match ev {
            Event::Signal(n) => status(cb(src, n, ud)),
            _ => Ok(()),
        };
        add_source(lp, hook, out, on_event, |make| {
            lp.add_with(NewSource::Signal(signo), make)
        })
    })
}

/// Removes the source: once this returns its callback never runs again,
/// even for an event already fetched in the current iteration; called from
/// another thread while that callback runs, it first waits for it to return.
/// destroy(userdata) runs before this returns, or right after the callback
/// when called from the source's own callback. The handle stays valid (calls
/// on it give -ESTALE) until `eventq_source_free`.
///
/// Returns 0; -ESTALE if already removed or the loop is freed; -EINVAL for
/// NULL.
///
/// Thread safety: any thread; from any callback of the loop.
#[no_mangle]
pub extern "C" fn eventq_source_remove(src: *const eventq_source) -> c_int {
    boundary!(PANIC, {
        // SAFETY: src is NULL or a handle from an add call's out, not
        // freed, or a callback's own src during the callback (header).
        let (lp, id) = try_c!(unsafe { source_ref(src) });
        code_of(lp.remove(id))
    })
}

/// Removes the source if it is still there, then releases the handle from
/// an add call's `out`. Only for such handles: never for the `src` pointer
/// of a source added with `out` NULL. NULL is a no-op.
///
/// Thread safety: as `eventq_source_remove`; the handle is invalid after.
#[no_mangle]
pub extern "C" fn eventq_source_free(src: *mut eventq_source) {
    boundary!((), {
        // SAFETY: src is NULL or a handle from an add call's out, given up
        // here: not used after or during (header).
        if let Ok((lp, id)) = unsafe { source_ref(src) } {
            let _ = lp.remove(id);
        }
        // SAFETY: src is NULL or an add call's out reference, released
        // once, here (header).
        unsafe { free_arc(src) };
    })
}

/// Enables (non-zero) or disables (0) a source. A disabled source's callback
/// does not run; enabling re-arms a fired EVENTQ_ONESHOT fd source.
///
/// Returns 0; -ESTALE if removed; -EINVAL for NULL.
///
/// Thread safety: any thread; from any callback of the loop.
#[no_mangle]
pub extern "C" fn eventq_source_set_enabled(src: *const eventq_source, enabled: c_int) -> c_int {
    boundary!(PANIC, {
        // SAFETY: src is NULL or a handle from an add call's out, not
        // freed, or a callback's own src during the callback (header).
        let (lp, id) = try_c!(unsafe { source_ref(src) });
        code_of(lp.set_enabled(id, enabled != 0))
    })
}

/// Changes the events an fd source waits for (flags as for
/// `eventq_loop_add_fd`).
///
/// Returns 0; -ESTALE if removed; -EINVAL for NULL, bad flags, or a source
/// that is not an fd source.
///
/// Thread safety: any thread; from any callback of the loop.
#[no_mangle]
pub extern "C" fn eventq_source_set_events(src: *const eventq_source, events: u32) -> c_int {
    boundary!(PANIC, {
        // SAFETY: src is NULL or a handle from an add call's out, not
        // freed, or a callback's own src during the callback (header).
        let (lp, id) = try_c!(unsafe { source_ref(src) });
        code_of(lp.set_events(id, events))
    })
}

/// Re-arms a timer source (and enables it): first_ns from now, then every
/// interval_ns if not 0.
///
/// Returns 0; -ESTALE if removed; -EINVAL for NULL or a source that is not
/// a timer.
///
/// Thread safety: any thread; from any callback of the loop.
#[no_mangle]
pub extern "C" fn eventq_source_set_timer(
    src: *const eventq_source,
    first_ns: u64,
    interval_ns: u64,
) -> c_int {
    boundary!(PANIC, {
        // SAFETY: src is NULL or a handle from an add call's out, not
        // freed, or a callback's own src during the callback (header).
        let (lp, id) = try_c!(unsafe { source_ref(src) });
        code_of(lp.set_timer(id, duration_ns(first_ns), duration_ns(interval_ns)))
    })
}

/// Sets how many messages a channel source delivers per loop iteration (at
/// least 1; default EVENTQ_DEFAULT_BUDGET): after that many, the other ready
/// sources and posts have their turn. A loop whose only source this is,
/// run by `eventq_loop_run`, has none to give a turn to and goes on without
/// waiting on epoll; `eventq_loop_run_once` always stops at the budget.
///
/// Returns 0; -ESTALE if removed; -EINVAL for NULL, 0, or a source that is
/// not a channel source.
///
/// Thread safety: any thread; from any callback of the loop.
#[no_mangle]
pub extern "C" fn eventq_source_set_budget(src: *const eventq_source, budget: usize) -> c_int {
    boundary!(PANIC, {
        // SAFETY: src is NULL or a handle from an add call's out, not
        // freed, or a callback's own src during the callback (header).
        let (lp, id) = try_c!(unsafe { source_ref(src) });
        code_of(lp.set_budget(id, budget))
    })
}

/// The negative code a callback of this source returned, which disabled
/// it (a callback returning < 0 disables its source; re-enabling clears
/// nothing), or 0. -ESTALE if removed; -EINVAL for NULL.
///
/// Thread safety: any thread; from any callback of the loop.
#[no_mangle]
pub extern "C" fn eventq_source_error(src: *const eventq_source) -> c_int {
    boundary!(PANIC, {
        // SAFETY: src is NULL or a handle from an add call's out, not
        // freed, or a callback's own src during the callback (header).
        let (lp, id) = try_c!(unsafe { source_ref(src) });
        match lp.source_error(id) {
            Ok(errno) => -errno,
            Err(e) => to_code(&e),
        }
    })
}
