"""The requester's first decisions, in logic: what a response asks for (:func:`rnic.model.requester.classify`)
and one step of the acknowledgement walk over the send queue (:func:`rnic.model.requester.walk_step`)."""

from amaranth import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...model.engine import ATOMIC_OPS, PSN_MASK, REQUEST_OPS
from ...model.opcodes import OPCODE_INFO, Transport
from ...model.qpc import QpState, ServiceType
from ...model.requester import RespDrop, RespKind, Step
from ..engine.layouts import in_set

__all__ = ["RespCheck", "WalkStep", "behind"]


def behind(a, b):
    """``a`` is behind ``b`` in 24-bit serial arithmetic (``psn_delta(a, b) < 0``)."""
    return (a - b)[23]


def _rc_ops(operation):
    return [op for op, info in OPCODE_INFO.items() if info.transport == Transport.RC and info.operation == operation]


class RespCheck(wiring.Component):
    """:func:`rnic.model.requester.classify`, combinational: a response of an RC QP is dropped (``drop``,
    ``reason`` a :class:`~rnic.model.requester.RespDrop`) or asks for ``kind`` (a
    :class:`~rnic.model.requester.RespKind`). The inputs are the QP context's fields, the requester
    record's ``high_psn`` and the response's BTH opcode, PSN and AETH syndrome. ``sent_end`` is the PSN
    after the last one sent (:func:`rnic.model.requester.sent_end`)."""

    def __init__(self):
        super().__init__({"state": In(4), "service": In(8), "una_psn": In(24), "next_psn": In(24),
                          "high_psn": In(24), "opcode": In(8), "psn": In(24), "syndrome": In(8),
                          "drop": Out(1), "reason": Out(3), "kind": Out(3), "sent_end": Out(24)})

    def elaborate(self, platform):
        m = Module()
        end = self.sent_end
        m.d.comb += end.eq(Mux(behind(self.next_psn, self.high_psn), self.high_psn, self.next_psn))
        with m.If(~in_set(self.state, (QpState.RTS, QpState.SQD, QpState.SQE))):
            m.d.comb += [self.drop.eq(1), self.reason.eq(RespDrop.QP_STATE)]
        with m.Elif(self.service != ServiceType.RC):
            m.d.comb += [self.drop.eq(1), self.reason.eq(RespDrop.NOT_RC)]
        with m.Elif(behind(self.psn, self.una_psn)):
            m.d.comb += [self.drop.eq(1), self.reason.eq(RespDrop.STALE)]
        with m.Elif(~behind(self.psn, end)):
            m.d.comb += [self.drop.eq(1), self.reason.eq(RespDrop.GHOST)]
        aeth = self.syndrome[5:8]
        with m.If(in_set(self.opcode, _rc_ops("RDMA_READ_RESPONSE"))):
            m.d.comb += self.kind.eq(RespKind.READ_RESPONSE)
        with m.Elif(in_set(self.opcode, _rc_ops("ATOMIC_ACKNOWLEDGE"))):
            m.d.comb += self.kind.eq(RespKind.ATOMIC_ACK)
        with m.Elif(aeth == 0):
            m.d.comb += self.kind.eq(RespKind.ACK)
        with m.Elif(aeth == 1):
            m.d.comb += self.kind.eq(RespKind.RNR)
        with m.Elif(aeth == 3):
            m.d.comb += self.kind.eq(Mux(self.syndrome[:5] == 0, RespKind.NAK_SEQ, RespKind.NAK_FATAL))
        with m.Else():
            m.d.comb += self.kind.eq(RespKind.RESERVED)
        return m


class WalkStep(wiring.Component):
    """:func:`rnic.model.requester.walk_step` in two registered steps: for the WQE at ``sq_acked`` (its opcode
    and length, the QP's path MTU as ``log_mtu``, its first PSN ``wqe_psn``) when everything before ``bound``
    is acknowledged: ``step`` (a :class:`~rnic.model.requester.Step`) and its PSN span ``span``.

    ``span`` follows ``opcode``, ``length`` and ``log_mtu`` a clock later; ``step`` follows them and
    ``wqe_psn`` two clocks later and ``bound`` and ``opcode`` at once (the carry chains stay one per clock)."""

    def __init__(self):
        super().__init__({"opcode": In(8), "length": In(32), "log_mtu": In(4), "wqe_psn": In(24), "bound": In(24),
                          "step": Out(2), "span": Out(24)})

    def elaborate(self, platform):
        m = Module()
        atomic = in_set(self.opcode, ATOMIC_OPS)
        whole = Signal(32)                      # length >> log_mtu: log_mtu is 8..12 (256..4096 bytes)
        part = Signal()                         # a last, partial packet
        with m.Switch(self.log_mtu):
            for lg in range(8, 13):
                with m.Case(lg):
                    m.d.comb += [whole.eq(self.length[lg:]), part.eq(self.length[:lg] != 0)]
        m.d.sync += self.span.eq(Mux(atomic | (self.length == 0), 1, whole + part))
        end = Signal(24)
        m.d.sync += end.eq((self.wqe_psn + self.span) & PSN_MASK)
        with m.If(behind(self.bound, end)):
            m.d.comb += self.step.eq(Step.STOP)
        with m.Elif(in_set(self.opcode, REQUEST_OPS)):
            m.d.comb += self.step.eq(Step.IMPLIED)
        with m.Else():
            m.d.comb += self.step.eq(Step.COMPLETE)
        return m
