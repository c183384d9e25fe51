"""Layouts the descriptor engine's blocks share, and the helper that builds a set test from a table."""

from amaranth import Const
from amaranth.lib import data

from ...model.wqe import WQE_FIELDS

__all__ = ["wqe_layout", "inc_layout", "doorbell_layout", "cq_doorbell_layout", "rd_cmd_layout",
           "status_layout", "group_layout", "info_layout", "ring_layout", "drain_ctx_layout", "in_set"]

#: The 64-byte WQE with both layouts (RC/UC and UD) overlaid, fields at their WQE_FIELDS offsets.
wqe_layout = data.FlexibleLayout(512, {name: data.Field(width, off) for name, off, width, _ in WQE_FIELDS})

#: Counter increments per clock, in the register block's order.
inc_layout = data.StructLayout({"db_errors": 1, "wqe_count": 1, "pkt_count": 1, "byte_count": 13,
                                "cqe_count": 1, "cqe_drops": 1, "wqe_errors": 1, "flush_count": 1,
                                "bus_errors": 2})
doorbell_layout = data.StructLayout({"qpn": 24, "pi": 16})
cq_doorbell_layout = data.StructLayout({"cqn": 24, "ci": 16})
#: One packet's payload for the payload reader: ``len`` bytes from ``addr``, or inline from ``data``.
rd_cmd_layout = data.StructLayout({"addr": 64, "len": 13, "inline": 1, "data": 256})
status_layout = data.StructLayout({"error": 1})
#: ``resp``: a response packet (:class:`rnic.hdl.receive.tx_merge.TxMerge`), outside the engine's
#: packet order: its frame is aborted only by its own read error and gives the engine no status.
group_layout = data.StructLayout({"start": 1, "resp": 1})

#: What a packet's commit needs of it, queued from its issue (one entry per packet in flight):
#: ``signaled``, its WQE writes a CQE when it retires successfully (not an RC WQE under
#: CONTROL.RELIABLE); ``rd_inc``, its retire adds one to ``rd_pending`` (a READ or atomic, the same).
info_layout = data.StructLayout({"seg": 13, "psns": 24, "last": 1, "wr_id": 64, "opcode": 8,
                                 "length": 32, "signaled": 1, "rd_inc": 1})

#: An SQ ring as a slot address needs it, taken apart when a context is loaded: a ring holds at
#: most 2**15 slots of 64 bytes, so a slot's address is bits 6..20 of the base plus the index (15
#: bits, a carry out) and bits 21..63 of the base (``hi``), or those plus one (``hi1``).
ring_layout = data.StructLayout({"lo": 15, "hi": 43, "hi1": 43, "mask": 15})

#: The fields of a draining turn's context that its commits read or change.
drain_ctx_layout = data.StructLayout({"state": 4, "sq_ci": 16, "sq_pi": 16, "cqn": 24})


def in_set(value, members):
    """``value`` is one of ``members`` (ints or int enums): a range compare when they are
    contiguous (no lower compare from 0), else an OR of equalities."""
    members = sorted({int(v) for v in members})
    lo, hi = members[0], members[-1]
    if members == list(range(lo, hi + 1)):
        below = value <= hi
        return below if lo == 0 else (value >= lo) & below
    out = Const(0)
    for v in members:
        out = out | (value == v)
    return out
