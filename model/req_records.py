"""Host-memory format of the requester's reliability state: one 32-byte record per QP at
``REQ_BASE + qpn * 32``, read and written only by the requester (the block that takes ACKs, NAKs,
READ responses and atomic ACKs), so it needs no coherence with the QP context cache.

The two requester fields the transmit side must see live in the QP context itself (record bytes
12..15, engine-owned, :data:`rnic.model.qpc.QPC_FIELDS`): ``una_psn``, the oldest unacknowledged PSN
(the window and the resume point of a retransmission), and ``req_wait`` (an RNR wait: the scheduler
leaves the QP alone until the timer expires).

Like the other formats, the table ``(name, bit offset, width, meaning)`` is the source of the codec,
the tests and the table in docs/reliability.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from .record import FieldRecord

__all__ = ["REQ_BYTES", "REQ_TABLE", "REQ_FIELDS", "ReqContext", "markdown_table"]

REQ_BYTES = 32

REQ_TABLE: tuple[tuple[str, int, int, str], ...] = (
    # --- bytes 0..11: requester-owned ---
    ("sq_acked", 0, 16, "send-queue index of the oldest WQE not yet completed"),
    ("wqe_psn", 16, 24, "first PSN of the WQE at `sq_acked`"),
    ("rnr_code", 40, 5, "RNR timer code of the RNR NAK being waited out"),
    ("retrying", 45, 1, "a go-back is under way: until `una_psn` moves, a response that would start another "
     "is ignored (`RETRYING`; a timeout still goes back), as rxe's `started_retry`"),
    ("high_psn", 48, 24, "the PSN after the last one sent before the latest go-back (or `una_psn` if later): "
     "responses up to it still count"),
    # --- bytes 12..31: reserved (the local ACK timeout is the QP context's `ack_timeout`) ---
)

REQ_FIELDS = tuple((name, off, width) for name, off, width, _ in REQ_TABLE)
MUTABLE_BYTES = 12


@dataclass
class ReqContext(FieldRecord):
    """One requester record."""

    FIELDS = REQ_FIELDS
    BYTES = REQ_BYTES

    sq_acked: int = 0
    wqe_psn: int = 0
    rnr_code: int = 0
    retrying: int = 0
    high_psn: int = 0


def markdown_table() -> str:
    """The record's table for docs/reliability.md."""
    from .recv_records import markdown_table as table
    return table(REQ_TABLE)


def _check():
    used = 0
    for name, off, width in REQ_FIELDS:
        mask = ((1 << width) - 1) << off
        assert off + width <= REQ_BYTES * 8 and not used & mask, name
        used |= mask


_check()
