# SPDX-License-Identifier: MIT OR Apache-2.0
"""eventq: Python binding of libeventq, per-event message delivery between
threads and into event loops (Linux).

A `Chan` is a bounded FIFO of byte messages with a pollable fd: every
message a send accepted is received exactly once, whole and in order
(docs/design.md, D1-D9). Use it from threads (blocking calls release the
GIL), from asyncio (`await chan.recv_async()`, `async for msg in chan`), or
from any event loop through `chan.fileno()`, and between two processes
(`Chan.new_shared`). `eventq.memcg` watches memory pressure (cgroup
thresholds, OOM, pressure levels, PSI, memory.events).
"""

from ._chan import Chan
from ._errors import (
    AttachedError,
    BrokenProtocolError,
    ClosedError,
    Error,
    InvalidArgumentError,
    MessageTooLargeError,
    TimeoutError,
    WouldBlockError,
    WrongSideError,
    strerror,
)
from ._errors import (  # the names of 0.2, kept for the 0.x releases
    Attached,
    BrokenProtocol,
    Closed,
    InvalidArgument,
    MessageTooLarge,
    Timeout,
    WouldBlock,
    WrongSide,
)
from ._shared import Consumer, SharedFds, Side
from ._ffi import ffi as _ffi
from ._ffi import lib as _lib
from ._ffi import library_path

#: The loaded library's version string, e.g. "0.2.0".
library_version: str = _ffi.string(_lib.eventq_version_string()).decode()

#: Capacity of a Chan() made without one.
DEFAULT_CAPACITY: int = _lib.EVENTQ_DEFAULT_CAPACITY
#: Largest capacity a channel accepts.
MAX_CAPACITY: int = _lib.EVENTQ_MAX_CAPACITY
#: Longest message when neither max_msg_size nor max_bytes says otherwise.
DEFAULT_MAX_MSG_SIZE: int = _lib.EVENTQ_DEFAULT_MAX_MSG_SIZE



def __getattr__(name: str) -> object:
    if name == "Stats":  # made on first use (_stats.py)
        from ._stats import Stats

        return Stats
    raise AttributeError(f"module 'eventq' has no attribute {name!r}")


__version__ = "0.3.0"  # pyproject.toml's; the library must be 0.3 or a later 0.x (_cdef.py)

# Not TimeoutError: `from eventq import *` must not shadow the builtin with
# its narrower subclass (use eventq.TimeoutError).
__all__ = [
    "Chan",
    "Stats",
    "Side",
    "SharedFds",
    "Consumer",
    "Error",
    "ClosedError",
    "WouldBlockError",
    "InvalidArgumentError",
    "MessageTooLargeError",
    "WrongSideError",
    "BrokenProtocolError",
    "AttachedError",
    "strerror",
    "library_path",
    "library_version",
    "DEFAULT_CAPACITY",
    "MAX_CAPACITY",
    "DEFAULT_MAX_MSG_SIZE",
]
