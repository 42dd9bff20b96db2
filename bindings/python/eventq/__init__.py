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

from ._chan import Chan, Stats
from ._errors import (
    Attached,
    BrokenProtocol,
    Closed,
    Error,
    InvalidArgument,
    MessageTooLarge,
    Timeout,
    WouldBlock,
    WrongSide,
    strerror,
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

__version__ = "0.3.0"  # the release's version (scripts/release.sh checks it); needs libeventq 0.3 or a later 0.x

__all__ = [
    "Chan",
    "Stats",
    "Side",
    "SharedFds",
    "Consumer",
    "Error",
    "Closed",
    "Timeout",
    "WouldBlock",
    "InvalidArgument",
    "MessageTooLarge",
    "WrongSide",
    "BrokenProtocol",
    "Attached",
    "strerror",
    "library_path",
    "library_version",
    "DEFAULT_CAPACITY",
    "MAX_CAPACITY",
    "DEFAULT_MAX_MSG_SIZE",
]
