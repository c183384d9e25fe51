"""The responder's host-memory formats and opcode properties, derived from the model's tables
(:mod:`rnic.model.recv_records`, :data:`rnic.model.opcodes.OPCODE_INFO`) so the RTL cannot drift from them."""

from __future__ import annotations

from amaranth import Signal, unsigned
from amaranth.lib import data

from ...model.opcodes import OPCODE_INFO, Position, Transport
from ...model.qpc import ServiceType
from ...model.recv_records import (MR_BYTES, MR_FIELDS, RECV_QPC_BYTES, RECV_QPC_FIELDS, RECV_SGES, RECV_WQE_BYTES,
                                   RECV_WQE_FIELDS, RES_BYTES, RES_FIELDS, SGE_FIELDS)
from ...model.responder import RxDrop
from ..qp_cache.layouts import hw_enum

__all__ = ["rx_layout", "wqe_layout", "sge_layout", "mr_layout", "res_layout", "RxDropHw", "opcode_class", "SERVICE_OF"]


def _layout(fields, nbytes, extra=None):
    members = {name: data.Field(unsigned(width), off) for name, off, width in fields}
    members.update(extra or {})
    return data.FlexibleLayout(nbytes * 8, members)


#: Record bytes 80..127: the receive half of a QP context.
rx_layout = _layout(RECV_QPC_FIELDS, RECV_QPC_BYTES)
sge_layout = _layout(SGE_FIELDS, 16)
#: A 64-byte receive WQE: the header and :data:`RECV_SGES` scatter entries at bytes 16, 32, 48.
wqe_layout = _layout(RECV_WQE_FIELDS, RECV_WQE_BYTES,
                     {"sge": data.Field(data.ArrayLayout(sge_layout, RECV_SGES), 128)})
mr_layout = _layout(MR_FIELDS, MR_BYTES)
res_layout = _layout(RES_FIELDS, RES_BYTES)
RxDropHw = hw_enum(RxDrop, shape=4)
SERVICE_OF = {Transport.RC: ServiceType.RC, Transport.UC: ServiceType.UC, Transport.UD: ServiceType.UD}


def opcode_class(m, opcode):
    """A struct of the properties of BTH ``opcode`` the responder branches on (a Switch over the table):
    its operation, its position in a message, ImmDt / IETH, and the service it belongs to."""
    props = Signal(data.StructLayout({
        "send": 1, "write": 1, "read": 1, "atomic": 1, "response": 1,
        "first": 1, "middle": 1, "last": 1, "only": 1, "imm": 1, "inv": 1, "service": 2,
    }), name="op_class")
    with m.Switch(opcode):
        for op, info in OPCODE_INFO.items():
            if info.transport not in SERVICE_OF:
                continue
            with m.Case(int(op)):
                pos = info.position
                m.d.comb += [
                    props.send.eq(info.operation == "SEND"), props.write.eq(info.operation == "RDMA_WRITE"),
                    props.read.eq(info.operation == "RDMA_READ_REQUEST"),
                    props.atomic.eq(info.operation in ("COMPARE_SWAP", "FETCH_ADD")),
                    props.response.eq(info.operation in ("RDMA_READ_RESPONSE", "ACKNOWLEDGE",
                                                         "ATOMIC_ACKNOWLEDGE")),
                    props.first.eq(pos is Position.FIRST), props.middle.eq(pos is Position.MIDDLE),
                    props.last.eq(pos is Position.LAST), props.only.eq(pos is Position.ONLY),
                    props.imm.eq(info.with_immediate), props.inv.eq(info.with_invalidate),
                    props.service.eq(int(SERVICE_OF[info.transport])),
                ]
    return props
