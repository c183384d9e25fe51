"""Software's side of the engine, as a verbs driver lays it out: QP and CQ contexts, send and receive
rings, memory regions in :class:`~rnic.model.engine.HostMemory`, and the register writes of doorbells."""

from __future__ import annotations

from .qpc import RECORD_BYTES, QpContext, ServiceType
from .recv_records import (MR_BYTES, RECV_QPC_BYTES, RECV_QPC_OFFSET, RECV_WQE_BYTES, MemoryRegion, MrState,
                           RecvContext, RecvWqe, mr_key)
from .regs import REG
from .req_records import REQ_BYTES, ReqContext
from .wqe import CQ_RECORD_BYTES, CQE_BYTES, Cqe, CqContext, CqState, Wqe

__all__ = ["Driver"]


class Driver:
    """Software's side, as a verbs driver would do it: lay out QP and CQ contexts and rings in
    :class:`HostMemory`, post WQEs, and produce the register writes for doorbells.

    ``target`` is anything with ``write_reg(offset, value)`` (the model, or a cocotb AXI4-Lite
    wrapper around the RTL)."""

    def __init__(self, mem, settings, target=None, *, mr_base: int = 0):
        self.mem = mem
        self.settings = settings
        self.target = target
        self.mr_base = mr_base
        self.sq_pi: dict[int, int] = {}
        self.rq_pi: dict[int, int] = {}
        self.qps: dict[int, QpContext] = {}
        self.rxs: dict[int, RecvContext] = {}

    def create_cq(self, cqn: int, ring_base: int, log_size: int, state: int = CqState.ACTIVE) -> CqContext:
        cq = CqContext(state=state, log_size=log_size, ring_base=ring_base)
        self.mem.poke(self.settings.cq_base + cqn * CQ_RECORD_BYTES, cq.pack())
        return cq

    def create_qp(self, qpn: int, ctx: QpContext, rx: RecvContext | None = None, *, timeout: int = 0) -> QpContext:
        """Write QP ``qpn``'s whole record: ``ctx`` (bytes 0..79) and the receive half ``rx`` (80..127);
        nothing is unacknowledged (``una_psn`` = ``next_psn``). With a requester table (``req_base``), also
        the QP's requester record; ``timeout``, if not 0, sets the local ACK timeout (``ack_timeout``)."""
        ctx.qpn = qpn
        if timeout:
            ctx.ack_timeout = timeout
        ctx.una_psn = ctx.next_psn
        rx = RecvContext() if rx is None else rx
        self.mem.poke(self._qpc(qpn), ctx.pack()[:RECV_QPC_OFFSET] + rx.pack())
        if getattr(self.settings, "req_base", 0):
            req = ReqContext(sq_acked=ctx.sq_ci, wqe_psn=ctx.next_psn, high_psn=ctx.next_psn)
            self.mem.poke((self.settings.req_base & ~0x1F) + qpn * REQ_BYTES, req.pack())
        self.qps[qpn], self.rxs[qpn] = ctx, rx
        self.sq_pi[qpn], self.rq_pi[qpn] = ctx.sq_pi, rx.rq_pi
        return ctx

    def _qpc(self, qpn: int) -> int:
        return (self.settings.qpc_base & ~0x7F) + qpn * RECORD_BYTES

    def rx(self, qpn: int) -> RecvContext:
        """The receive half of the QP context as host memory holds it now."""
        return RecvContext.unpack(self.mem.peek(self._qpc(qpn) + RECV_QPC_OFFSET, RECV_QPC_BYTES))

    def reg_mr(self, index: int, mr: MemoryRegion) -> int:
        """Register ``mr`` at MR table entry ``index`` (valid); return its key (R_Key = L_Key)."""
        mr.state = MrState.VALID
        self.mem.poke(self.mr_base + index * MR_BYTES, mr.pack())
        return mr_key(index, mr.key)

    def dereg_mr(self, key: int) -> None:
        """Mark the MR entry ``key`` names invalid (a cached copy needs the MR_CMD invalidate too)."""
        addr = self.mr_base + (key >> 8) * MR_BYTES
        mr = MemoryRegion.unpack(self.mem.peek(addr, MR_BYTES))
        mr.state = MrState.INVALID
        self.mem.poke(addr, mr.pack())

    def post_recv(self, qpn: int, wqe: RecvWqe) -> int:
        """Write a receive WQE at the QP's software RQ producer index; return the new producer index."""
        rx = self.rxs[qpn]
        pi = self.rq_pi[qpn]
        self.mem.poke((rx.rq_base & ~0x3F) + (pi % (1 << rx.log_rq_size)) * RECV_WQE_BYTES, wqe.pack())
        self.rq_pi[qpn] = (pi + 1) & 0xFFFF
        return self.rq_pi[qpn]

    def qp(self, qpn: int) -> QpContext:
        """The QP context as host memory holds it now."""
        return QpContext.unpack(self.mem.peek(self._qpc(qpn), RECORD_BYTES))

    def cq(self, cqn: int) -> CqContext:
        return CqContext.unpack(self.mem.peek(self.settings.cq_base + cqn * CQ_RECORD_BYTES, CQ_RECORD_BYTES))

    def post(self, qpn: int, wqe: Wqe) -> int:
        """Write ``wqe`` at the QP's software producer index; return the new producer index."""
        ctx = self.qps[qpn]
        pi = self.sq_pi[qpn]
        from .engine import sq_slot
        addr = sq_slot(ctx, pi)
        self.mem.poke(addr, wqe.pack(ud=ctx.service == ServiceType.UD))
        self.sq_pi[qpn] = (pi + 1) & 0xFFFF
        return self.sq_pi[qpn]

    def doorbell_writes(self, qpn: int, pi: int | None = None) -> list[tuple[int, int]]:
        """The register writes ``(offset, value)`` of a doorbell (default: the software producer index)."""
        pi = self.sq_pi[qpn] if pi is None else pi
        return [(REG["DB_QPN"].offset, qpn), (REG["DB_SQ_PI"].offset, pi)]

    def ring(self, qpn: int, pi: int | None = None) -> None:
        """Issue :meth:`doorbell_writes` to ``target`` (a cocotb test awaits them on AXI4-Lite instead)."""
        for offset, value in self.doorbell_writes(qpn, pi):
            self.target.write_reg(offset, value)

    def cq_entries(self, cqn: int) -> list[Cqe]:
        """The CQEs between the CQ's consumer and producer index, as software would poll them."""
        cq = self.cq(cqn)
        out = []
        i = cq.ci
        while i != cq.pi:
            out.append(Cqe.unpack(self.mem.peek((cq.ring_base & ~0x1F) + (i % cq.size) * CQE_BYTES, CQE_BYTES)))
            i = (i + 1) & 0xFFFF
        return out
