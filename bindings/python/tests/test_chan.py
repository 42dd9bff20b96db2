# SPDX-License-Identifier: MIT OR Apache-2.0
"""Chan through the binding, one thread: messages, batches, options, readiness,
close and release, and every bad input with its exception, each followed by
a check that nothing queued was lost (D7)."""

from __future__ import annotations

import errno
import select
import threading

import pytest

import eventq
from eventq import _chan


def readable(fd: int) -> bool:
    return bool(select.select([fd], [], [], 0)[0])


def drain(ch: eventq.Chan) -> list[bytes]:
    out = []
    while True:
        try:
            out.append(ch.recv(0))
        except BlockingIOError:
            return out


def test_messages_arrive_whole_once_and_in_order() -> None:
    big = bytes(range(256)) * 4096  # 1 MiB, the default maximum: past the 64 KiB scratch
    msgs = [b"", b"a", bytes(48), bytes(49), bytearray(b"from a bytearray"), memoryview(b"xyz")[1:], big, b"end"]
    with eventq.Chan() as ch:
        for m in msgs:
            ch.send(m)
        got = [ch.recv() for _ in msgs]
        assert got == [bytes(m) for m in msgs]
        assert all(type(m) is bytes for m in got)
        st = ch.stats()
        assert (st.sent, st.received, st.pending, st.pending_bytes) == (len(msgs), len(msgs), 0, 0)
        assert st.peak_depth == len(msgs) and not st.closed


def test_memoryview_of_wider_items_sends_its_bytes() -> None:
    import array

    a = array.array("I", [1, 2, 3])
    with eventq.Chan() as ch:
        ch.send(memoryview(a))
        assert ch.recv() == a.tobytes()


def test_recv_into_and_a_too_small_buffer() -> None:
    with eventq.Chan() as ch:
        ch.send(b"hello world")
        ch.send(b"next")
        small = bytearray(4)
        with pytest.raises(eventq.MessageTooLargeError) as ei:
            ch.recv_into(small)
        assert ei.value.needed == 11 and ei.value.errno == errno.EMSGSIZE
        assert "11" in str(ei.value) and isinstance(ei.value, eventq.Error)
        assert small == bytearray(4)  # untouched
        buf = bytearray(64)
        n = ch.recv_into(memoryview(buf)[8:])  # into a slice of it
        assert n == 11 and buf[8:19] == b"hello world"
        assert ch.recv_into(buf) == 4 and buf[:4] == b"next"
        assert ch.stats().received == 2


def test_recv_into_refuses_a_read_only_buffer() -> None:
    with eventq.Chan() as ch:
        ch.send(b"kept")
        with pytest.raises(TypeError):
            ch.recv_into(b"immutable")  # type: ignore[arg-type]
        assert ch.recv() == b"kept"


def test_batches() -> None:
    with eventq.Chan(4) as ch:
        assert ch.send_batch([]) == 0
        # A prefix is queued; the rest stays the caller's.
        assert ch.send_batch([b"0", bytearray(b"1"), memoryview(b"2"), b"3", b"4", b"5"]) == 4
        assert ch.recv_batch(3) == [b"0", b"1", b"2"]
        assert ch.recv_batch() == [b"3"]
        big = [b"x" * 70000, b"y" * 100000, b"z" * 300000]  # past the 64 KiB scratch
        assert ch.send_batch(big) == 3
        got: list[bytes] = []
        while len(got) < 3:
            got += ch.recv_batch(8)
        assert got == big
        with pytest.raises(BlockingIOError):
            ch.recv_batch(8, timeout=0)
        import array

        wide = array.array("I", [1, 2, 3])  # items wider than a byte: sent as their bytes
        assert ch.send_batch([b"a", memoryview(wide), bytearray(b"c")]) == 3
        assert ch.recv_batch(8) == [b"a", wide.tobytes(), b"c"]


def test_batch_send_stops_at_a_message_over_the_size_limit() -> None:
    with eventq.Chan(max_msg_size=8) as ch:
        assert ch.send_batch([b"ok", b"x" * 9, b"later"]) == 1
        with pytest.raises(eventq.MessageTooLargeError) as ei:
            ch.send_batch([b"x" * 9, b"ok"])
        assert ei.value.needed == 9
        assert drain(ch) == [b"ok"]


def test_message_over_the_size_limit() -> None:
    with eventq.Chan(max_msg_size=16) as ch:
        ch.send(b"before")
        with pytest.raises(eventq.MessageTooLargeError) as ei:
            ch.send(b"x" * 17)
        assert ei.value.needed == 17
        ch.send(b"y" * 16)
        assert drain(ch) == [b"before", b"y" * 16]


def test_byte_limit() -> None:
    with eventq.Chan(max_bytes=10) as ch:
        ch.send(b"12345678")
        with pytest.raises(eventq.WouldBlockError):
            ch.send(b"abc", timeout=0)
        with pytest.raises(eventq.MessageTooLargeError):
            ch.send(b"x" * 11)  # max_msg_size defaults to max_bytes
        assert ch.stats().pending_bytes == 8
        assert ch.recv() == b"12345678"
        ch.send(b"abc", timeout=0)
        assert ch.recv() == b"abc"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"capacity": 0},
        {"capacity": eventq.MAX_CAPACITY + 1},
        {"capacity": -1},
        {"capacity": 2**64},
        {"capacity": 4, "low_water": 4},
        {"capacity": 4, "low_water": -1},
        {"max_bytes": 10, "max_msg_size": 11},
        {"max_bytes": -5},
        {"max_msg_size": -1},
    ],
)
def test_bad_options(kwargs: dict[str, int]) -> None:
    with pytest.raises(eventq.InvalidArgumentError) as ei:
        eventq.Chan(**kwargs)
    e = ei.value
    assert isinstance(e, ValueError) and isinstance(e, eventq.Error) and e.errno == errno.EINVAL
    assert eventq.strerror(-errno.EINVAL) in str(e)


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"capacity": 0}, "capacity"),
        ({"capacity": 4, "low_water": 4}, "low_water"),
        ({"max_bytes": 10, "max_msg_size": 11}, "max_msg_size"),
    ],
)
def test_bad_options_carry_the_library_text(kwargs: dict[str, int], named: str) -> None:
    """The library's text for the error (eventq_last_error) names the call
    and the argument behind the code."""
    with pytest.raises(eventq.InvalidArgumentError) as ei:
        eventq.Chan(**kwargs)
    assert "eventq_chan_new" in str(ei.value) and named in str(ei.value).split("eventq_chan_new")[1]


def test_option_types() -> None:
    with pytest.raises(TypeError):
        eventq.Chan(2.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        eventq.Chan(max_bytes="10")  # type: ignore[arg-type]


def test_good_options() -> None:
    with eventq.Chan(4, max_bytes=100, max_msg_size=50, low_water=3) as ch:
        ch.send(b"x" * 50)
        assert ch.recv() == b"x" * 50


def test_bad_message_types_lose_nothing() -> None:
    with eventq.Chan() as ch:
        ch.send(b"kept")
        with pytest.raises(TypeError):
            ch.send("text")  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            ch.send(42)  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            ch.send(memoryview(bytes(8))[::2])  # not contiguous
        with pytest.raises(TypeError):
            ch.send_batch([b"ok", "text"])  # type: ignore[list-item]
        with pytest.raises(eventq.InvalidArgumentError):
            ch.recv_batch(0)
        with pytest.raises(eventq.InvalidArgumentError):
            ch.recv_batch(2**31)
        with pytest.raises(TypeError):
            ch.recv_batch(1.5)  # type: ignore[arg-type]
        for call in (ch.recv, ch.recv_batch, lambda timeout: ch.recv_into(bytearray(8), timeout)):
            with pytest.raises(eventq.InvalidArgumentError):
                call(timeout=-1)
        with pytest.raises(eventq.InvalidArgumentError):
            ch.send(b"x", timeout=-0.5)
        assert ch.stats().pending == 1
        assert drain(ch) == [b"kept"]


@pytest.mark.parametrize("where", ["main thread (poll)", "other thread (blocking C call)"])
def test_timeouts(where: str) -> None:
    """timeout=0 raises WouldBlockError, a positive timeout TimeoutError; nothing moves."""
    ch = eventq.Chan(1)
    caught: list[BaseException] = []

    def body() -> None:
        for call in (ch.recv, ch.recv_batch, lambda timeout: ch.recv_into(bytearray(4), timeout)):
            with pytest.raises(eventq.WouldBlockError) as e0:
                call(timeout=0)
            assert isinstance(e0.value, BlockingIOError) and e0.value.errno == errno.EAGAIN
            with pytest.raises(eventq.TimeoutError) as e1:
                call(timeout=0.001)
            assert isinstance(e1.value, TimeoutError) and e1.value.errno == errno.ETIMEDOUT
        ch.send(b"fills it")
        for send in (ch.send, lambda m, timeout: ch.send_batch([m], timeout)):
            with pytest.raises(BlockingIOError):
                send(b"no room", timeout=0)
            with pytest.raises(TimeoutError):
                send(b"no room", timeout=0.001)
        assert ch.stats().pending == 1
        assert ch.recv() == b"fills it"

    if where.startswith("main"):
        body()
    else:

        def run() -> None:
            try:
                body()
            except BaseException as e:
                caught.append(e)

        t = threading.Thread(target=run)
        t.start()
        t.join()
        if caught:
            raise caught[0]
    ch.release()


def test_send_fd_is_made_on_first_use() -> None:
    """A channel has one fd until its send fd is asked for (or a send waits
    for room on it); the send fd starts at the level of the channel's state."""
    import os

    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    before = open_fds()
    ch = eventq.Chan(2)
    assert open_fds() == before + 1
    ch.send(b"1")
    ch.send(b"2")
    with pytest.raises(BlockingIOError):
        ch.send(b"3", 0)
    assert open_fds() == before + 1  # full, refused: still no send fd
    assert "not made" in repr(ch)
    sfd = ch.send_fileno()
    assert open_fds() == before + 2 and not readable(sfd)  # made down: full
    assert ch.send_fileno() == sfd
    drain(ch)
    assert readable(sfd)
    ch.release()
    assert open_fds() == before


def test_fds_follow_the_queue() -> None:
    """D4: the receive fd is readable iff messages are pending (or closed);
    D5: the send fd is down while full and up again at low water."""
    with eventq.Chan(4, low_water=1) as ch:
        fd, sfd = ch.fileno(), ch.send_fileno()
        assert fd != sfd and not readable(fd) and readable(sfd)
        ch.send(b"1")
        assert readable(fd)
        for m in (b"2", b"3", b"4"):
            ch.send(m)
        assert not readable(sfd)  # full
        ch.recv()
        ch.recv()
        assert not readable(sfd)  # depth 2, above low water
        ch.recv()
        assert readable(sfd) and readable(fd)  # depth 1: low water
        ch.recv()
        assert not readable(fd)
        ch.close()
        assert readable(fd) and readable(sfd)


def test_close_keeps_what_is_queued_then_ends_the_stream() -> None:
    ch = eventq.Chan()
    other = ch.clone()
    ch.send(b"a")
    ch.send(b"b")
    ch.send(b"c")
    other.close()  # from another handle
    other.close()  # again: nothing
    with pytest.raises(eventq.ClosedError) as ei:
        ch.send(b"late")
    e = ei.value
    assert isinstance(e, BrokenPipeError) and isinstance(e, eventq.Error) and e.errno == errno.EPIPE
    for send in (lambda: ch.send_batch([b"late"]), lambda: ch.send(b"late", timeout=0)):
        with pytest.raises(eventq.ClosedError):
            send()
    assert ch.recv() == b"a"
    assert ch.recv_batch(1) == [b"b"]
    buf = bytearray(1)
    assert ch.recv_into(buf) == 1 and buf == b"c"
    for call in (ch.recv, ch.recv_batch, lambda: ch.recv_into(bytearray(1))):
        with pytest.raises(eventq.ClosedError):
            call()
    assert list(ch) == []
    assert ch.stats().closed
    ch.release()
    other.release()


def test_iteration_ends_at_end_of_stream() -> None:
    ch = eventq.Chan()
    for i in range(5):
        ch.send(b"%d" % i)
    ch.close()
    assert list(ch) == [b"0", b"1", b"2", b"3", b"4"]
    ch.release()


def test_release() -> None:
    ch = eventq.Chan()
    other = ch.clone()
    ch.send(b"stays")
    ch.release()
    ch.release()  # again: nothing
    assert ch.released and "released" in repr(ch)
    assert ch.final_stats is None  # `other` still holds the channel
    for call in (
        lambda: ch.send(b"x"),
        ch.recv,
        ch.recv_batch,
        lambda: ch.recv_into(bytearray(8)),
        lambda: ch.send_batch([b"x"]),
        ch.close,
        ch.stats,
        ch.clone,
        ch.clone_handle,
        ch.fileno,
        ch.send_fileno,
    ):
        with pytest.raises(ValueError, match="released"):
            call()
    assert other.recv() == b"stays"
    other.send(b"dropped 1")
    other.send(b"dropped 2")
    other.release()
    st = other.final_stats
    assert st is not None and st.dropped == 2 and st.sent == 3 and st.received == 1


def test_context_manager_closes_and_releases() -> None:
    ch = eventq.Chan()
    rx = ch.clone()
    with ch as same:
        assert same is ch
        ch.send(b"last")
    assert ch.released
    assert rx.recv() == b"last"
    with pytest.raises(eventq.ClosedError):
        rx.recv()
    rx.release()
    with eventq.Chan() as c2:
        c2.release()  # released inside: exit does nothing more


def test_c_handles() -> None:
    with eventq.Chan() as ch:
        address = ch.clone_handle()
        assert address != 0
        same = eventq.Chan.from_handle(address)  # takes it over
        same.send(b"through a C handle")
        assert ch.recv() == b"through a C handle"
        same.release()
        with pytest.raises(eventq.InvalidArgumentError):
            eventq.Chan.from_handle(0)


def test_exception_hierarchy() -> None:
    assert issubclass(eventq.Error, OSError)
    assert issubclass(eventq.ClosedError, BrokenPipeError) and issubclass(eventq.ClosedError, eventq.Error)
    assert issubclass(eventq.TimeoutError, TimeoutError) and issubclass(eventq.TimeoutError, eventq.Error)
    assert issubclass(eventq.WouldBlockError, BlockingIOError) and issubclass(eventq.WouldBlockError, eventq.Error)
    assert issubclass(eventq.InvalidArgumentError, ValueError) and issubclass(eventq.InvalidArgumentError, eventq.Error)
    assert issubclass(eventq.MessageTooLargeError, eventq.Error)
    import pickle

    e = pickle.loads(pickle.dumps(eventq.MessageTooLargeError(99)))
    assert e.needed == 99 and e.errno == errno.EMSGSIZE
    assert eventq.strerror(-errno.EPIPE) == eventq.strerror(errno.EPIPE)
    assert eventq.strerror(-99999) == "unknown error"


class _Interrupt:
    """Wraps a C receive function so that it raises KeyboardInterrupt right
    after a call that took something, as a signal handler would."""

    def __init__(self, real: object) -> None:
        self.real = real
        self.armed = True

    def __call__(self, *args: object) -> int:
        rc = self.real(*args)  # type: ignore[operator]
        if self.armed and rc >= 0:
            self.armed = False
            raise KeyboardInterrupt
        return rc


@pytest.mark.parametrize("how", ["recv", "recv_into", "recv_batch"])
def test_interrupted_after_the_take_loses_nothing(monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """An exception between the C call that took messages and the return
    keeps them: the next receive on the handle returns them first."""
    name = "_c_recv_batch" if how == "recv_batch" else "_c_recv"
    monkeypatch.setattr(_chan, name, _Interrupt(getattr(_chan, name)))
    with eventq.Chan() as ch:
        for m in (b"one", b"two", b"three"):
            ch.send(m)
        call = {"recv": ch.recv, "recv_into": lambda: ch.recv_into(bytearray(16)), "recv_batch": lambda: ch.recv_batch(2)}
        with pytest.raises(KeyboardInterrupt):
            call[how]()
        taken = 2 if how == "recv_batch" else 1
        assert ch.stats().received == taken  # taken by the library, kept by the handle
        if how == "recv_into":
            with pytest.raises(eventq.MessageTooLargeError) as ei:  # from the stash, still D7
                ch.recv_into(bytearray(2))
            assert ei.value.needed == 3
            buf = bytearray(8)
            assert ch.recv_into(buf) == 3 and buf[:3] == b"one"
            assert drain(ch) == [b"two", b"three"]
        elif how == "recv_batch":
            assert ch.recv_batch(1) == [b"one"]
            assert ch.recv_batch(5) == [b"two"]
            assert ch.recv_batch(5) == [b"three"]
        else:
            assert drain(ch) == [b"one", b"two", b"three"]
        assert ch.stats().received == 3


def test_a_forked_child_leaves_inherited_handles_alone() -> None:
    """The header forbids any call on an inherited handle, freeing included:
    in a child the package marks them released and never frees them, so
    the parent's channel keeps its state (D4: readable with a message)."""
    import gc
    import os

    ch = eventq.Chan()
    ch.send(b"the parent's")
    pid = os.fork()
    if pid == 0:  # the child: report through the exit status only
        code = 0
        try:
            if not ch.released:
                code = 1
            try:
                ch.recv(timeout=0)
                code = 2
            except ValueError:
                pass
            del ch
            gc.collect()  # the inherited handle is dropped: no eventq_chan_free
            with eventq.Chan() as fresh:  # new objects work in the child
                fresh.send(b"x")
                if fresh.recv() != b"x":
                    code = 3
        except BaseException:
            code = 4
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert readable(ch.fileno())
    assert ch.recv() == b"the parent's"
    assert not readable(ch.fileno())
    ch.release()
