# SPDX-License-Identifier: MIT OR Apache-2.0
"""Exceptions: one eventq.Error base, each also the builtin a caller expects.

Every class derives from OSError through Error, so `errno` and `strerror`
are set (strerror is libeventq's own text, from eventq_strerror), and the
builtin bases (BrokenPipeError, TimeoutError, BlockingIOError, ValueError,
PermissionError) let code that knows nothing of eventq catch them the usual
way.

Each name ends in Error; eventq.TimeoutError is a subclass of the builtin
of that name. The names of 0.2 (Closed, Timeout, WouldBlock, ...) stay as
aliases of the same classes for the 0.x releases. `__module__` is "eventq",
where they are documented, so a traceback reads eventq.ClosedError.
"""

from __future__ import annotations

import builtins
import errno as _errno
from typing import Any

from ._ffi import ffi, lib


def strerror(code: int) -> str:
    """libeventq's description of an error code (negative or positive)."""
    return ffi.string(lib.eventq_strerror(code)).decode()


class Error(OSError):
    """Base of every error libeventq reports; `errno` is the positive code."""


class ClosedError(Error, BrokenPipeError):
    """The channel is closed: a send after close, or a receive at end of stream.

    A receive raises it only once everything queued was received (D6).
    """


class TimeoutError(Error, builtins.TimeoutError):
    """A timeout ran out: no message came, or no room was made, in time."""


class WouldBlockError(Error, BlockingIOError):
    """timeout=0 and the call would have had to wait."""


class InvalidArgumentError(Error, ValueError):
    """The library refused an argument (EINVAL); nothing happened."""


class MessageTooLargeError(Error):
    """A message does not fit: `needed` is its length in bytes.

    On a receive the caller's buffer was too small and the message stays at
    the head of the queue (D7): receive again with `needed` bytes. On a send
    the message exceeds the channel's maximum message size; nothing was
    queued.
    """

    def __init__(self, needed: int, text: str | None = None) -> None:
        super().__init__(_errno.EMSGSIZE, text or strerror(-_errno.EMSGSIZE))
        self.needed = needed

    def __reduce__(self) -> tuple[Any, ...]:  # keeps `needed` through pickling
        return (type(self), (self.needed, self.strerror))

    def __str__(self) -> str:
        return f"{self.strerror} (needed {self.needed} bytes)"


class WrongSideError(Error, PermissionError):
    """This end of a process-shared channel only sends, or only receives
    (Chan.side), and the call was the other kind (EPERM)."""


class BrokenProtocolError(Error):
    """The other process of a process-shared channel broke its protocol (a
    word of the shared memory out of its range), or what recv_from() or
    import_fds() was given is not a channel's end (EPROTO). The channel is
    closed on this side."""


class AttachedError(Error):
    """The other end of a process-shared channel is held by a live process,
    so send_to() or export_fds() cannot hand it to another; once that
    process is gone, they can (EISCONN)."""


# Shown as eventq.X, the public name (pickle finds them there too).
for _cls in (Error, ClosedError, TimeoutError, WouldBlockError, InvalidArgumentError,
             MessageTooLargeError, WrongSideError, BrokenProtocolError, AttachedError):
    _cls.__module__ = "eventq"
del _cls

# The names of 0.2, kept for the 0.x releases.
Closed = ClosedError
Timeout = TimeoutError
WouldBlock = WouldBlockError
InvalidArgument = InvalidArgumentError
MessageTooLarge = MessageTooLargeError
WrongSide = WrongSideError
BrokenProtocol = BrokenProtocolError
Attached = AttachedError


_CLASSES: dict[int, type[Error]] = {
    _errno.EPIPE: ClosedError,
    _errno.ETIMEDOUT: TimeoutError,
    _errno.EAGAIN: WouldBlockError,
    _errno.EINVAL: InvalidArgumentError,
    _errno.EPERM: WrongSideError,
    _errno.EPROTO: BrokenProtocolError,
    _errno.EISCONN: AttachedError,
}


# Texts for codes whose strerror covers more than a channel call can mean.
_TEXTS: dict[int, str] = {
    _errno.EPERM: "this end of a process-shared channel only sends, or only receives (Chan.side)",
}


_NO_TEXT = frozenset((_errno.EAGAIN, _errno.ETIMEDOUT, _errno.EPIPE))


def last_error() -> str:
    """libeventq's text for the error the last call on this thread returned
    (the argument or condition behind the code), or "" without one."""
    p = lib.eventq_last_error()
    return "" if p == ffi.NULL else ffi.string(p).decode()


def error_for(rc: int, what: str | None = None) -> Error:
    """The exception for a negative return code `rc` of a channel call,
    made right after that call on the same thread, so that it carries the
    library's text for it (eventq_last_error) when there is one."""
    code = -rc
    # The flow-control codes never carry a text: no second call for them.
    detail = "" if code in _NO_TEXT else last_error()
    text = _TEXTS.get(code) or strerror(rc)
    if what:
        text = f"{what}: {text}"
    if detail:
        text = f"{text}: {detail}"
    return _CLASSES.get(code, Error)(code, text)
