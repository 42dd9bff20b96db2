# SPDX-License-Identifier: MIT OR Apache-2.0
"""Stats, imported on first use (eventq.Stats, Chan.stats()): dataclasses
imports inspect, which thread and asyncio users alike need not pay for at
`import eventq`."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Stats:
    """A snapshot of a channel's counters (eventq_chan_stats)."""

    sent: int  #: messages accepted by sends
    received: int  #: messages returned by receives
    pending: int  #: messages queued now
    pending_bytes: int  #: bytes queued now
    dropped: int  #: messages discarded when the last handle was freed
    peak_depth: int  #: most messages ever queued at once
    recv_doorbell_rings: int  #: receive-fd writes (empty-to-non-empty transitions, close, end-of-stream reports)
    send_doorbell_rings: int  #: send-fd raises (creation, drains to low water, close)
    closed: bool  #: the channel is closed


Stats.__module__ = "eventq"
