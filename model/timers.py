"""The requester's timers: one per QP (the local ACK timer, or an RNR wait in its place), counted in
*ticks* of the ``TIMER_TICK`` register (clocks per tick; software sets about 1.024 µs, simulation a few
clocks). :class:`TimerTable` is the model of :class:`rnic.hdl.requester.timers.TimerTable`: what fires and
when, to the tick; the RTL visits each QP once per scan of the table, so an expiry is reported between
its deadline tick and ``2 * max_qps`` clocks (plus output backpressure) after it.

Deadlines are 32-bit tick counts compared in half-range arithmetic: a delay is at most ``2**31 - 1``
ticks (about 36 minutes at 1.024 µs).
"""

from __future__ import annotations

import enum

from .responder import RNR_TIMER_US

__all__ = ["TimerKind", "TICK_NS", "DEADLINE_BITS", "ack_timeout_ticks", "rnr_ticks", "TimerTable"]

TICK_NS = 1024              # the nominal tick: 4.096 µs (the IBTA local ACK timeout unit) is 4 ticks
DEADLINE_BITS = 32
_MASK = (1 << DEADLINE_BITS) - 1


class TimerKind(enum.IntEnum):
    ACK = 0                 # the local ACK timer: go back to una_psn when it fires
    RNR = 1                 # an RNR wait: send again when it ends


def ack_timeout_ticks(timeout: int) -> int:
    """The local ACK timeout 4.096 µs * 2**timeout in ticks (0: no timer, returns 0); capped at 2**31 - 1."""
    return 0 if timeout == 0 else min((4 << timeout), (1 << 31) - 1)


def rnr_ticks(code: int) -> int:
    """The RNR NAK timer of ``code`` (the IBTA table) in ticks, rounded up."""
    return -(-RNR_TIMER_US[code] * 1000 // TICK_NS)


def _due(now: int, deadline: int) -> bool:
    return (now - deadline) & _MASK < 1 << (DEADLINE_BITS - 1)


class TimerTable:
    """``arm(qpn, kind, delay, now)`` sets QP ``qpn``'s one timer to fire at tick ``now + delay``
    (replacing what it had); ``disarm(qpn)`` stops it; ``due(now)`` returns and stops the timers whose
    deadline has come, in QPN order."""

    def __init__(self):
        self.timers: dict[int, tuple[TimerKind, int]] = {}

    def arm(self, qpn: int, kind: TimerKind, delay: int, now: int) -> None:
        if not 0 <= delay < 1 << (DEADLINE_BITS - 1):
            raise ValueError(f"delay {delay} ticks is out of range")
        self.timers[qpn] = (TimerKind(kind), (now + delay) & _MASK)

    def disarm(self, qpn: int) -> None:
        self.timers.pop(qpn, None)

    def deadline(self, qpn: int) -> int | None:
        entry = self.timers.get(qpn)
        return None if entry is None else entry[1]

    def due(self, now: int) -> list[tuple[int, TimerKind]]:
        out = [(q, k) for q, (k, d) in sorted(self.timers.items()) if _due(now & _MASK, d)]
        for q, _ in out:
            del self.timers[q]
        return out
