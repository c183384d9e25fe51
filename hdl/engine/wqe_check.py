"""The WQE's check against its QP: the CQE status a fetched WQE completes with, or 0."""

from amaranth import Module, Mux
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...model.descriptor import LinkMode
from ...model.engine import ALLOWED_OPS, ATOMIC_LEN, ATOMIC_OPS, REQUEST_OPS
from ...model.qpc import PathMtu, ServiceType
from ...model.regs import SGID_ENTRIES
from ...model.wqe import INLINE_MAX_RC, INLINE_MAX_UD, MAX_MESSAGE, CqeStatus
from ..qp_cache import cached_layout
from .layouts import in_set, wqe_layout

__all__ = ["WqeCheck"]


class WqeCheck(wiring.Component):
    """:meth:`rnic.model.engine.EngineModel._validate` in logic, combinational.

    The context is bad (``LOC_QP_OP_ERR``) if its service, path MTU or link mode is none of the
    model's enums' values, its path MTU is above ``max_mtu`` or its SGID index is past the register
    block's table (:data:`rnic.model.regs.SGID_ENTRIES`); so is a WQE whose opcode its service does
    not allow (:data:`rnic.model.engine.ALLOWED_OPS`) or an inline RDMA READ or atomic. An atomic
    whose length is not 8, a message longer than ``MAX_MESSAGE``, inline data beyond the WQE's room,
    or a UD message beyond the path MTU is ``LOC_LEN_ERR``. Every table comes from the model: this block lists none of its own.

    Parameters
    ----------
    max_mtu : int
        Largest path MTU code the engine supports.

    Members
    -------
    ctx : In(cached_layout)
        The QP's context (constant within a turn).
    wqe : In(wqe_layout)
        The WQE, as it is gathered from its burst (the engine registers ``status`` with it).
    mtu : In(13)
        The QP's path MTU in bytes.
    status : Out(8)
        0, or the CQE status the WQE completes with; combinational from the inputs.
    """

    def __init__(self, max_mtu: int = 5):
        self.max_mtu = max_mtu
        super().__init__({"ctx": In(cached_layout), "wqe": In(wqe_layout), "mtu": In(13), "status": Out(8)})

    def elaborate(self, platform):
        m = Module()
        ctx, wqe, op = self.ctx, self.wqe, self.wqe.opcode
        ud = ctx.service == ServiceType.UD
        inline = wqe.flags[3]
        mtu_codes = [code for code in PathMtu if code <= self.max_mtu]
        ctx_ok = (in_set(ctx.service, ServiceType) & in_set(ctx.path_mtu, mtu_codes) &
                  in_set(ctx.link_mode, LinkMode) & in_set(ctx.sgid_index, range(SGID_ENTRIES)))
        allowed = Mux(ctx.service == ServiceType.RC, in_set(op, ALLOWED_OPS[ServiceType.RC]),
                      Mux(ctx.service == ServiceType.UC, in_set(op, ALLOWED_OPS[ServiceType.UC]),
                          in_set(op, ALLOWED_OPS[ServiceType.UD])))
        inline_max = Mux(ud, INLINE_MAX_UD, INLINE_MAX_RC)
        atomic = in_set(op, ATOMIC_OPS)
        with m.If(~ctx_ok | ~allowed | (inline & in_set(op, REQUEST_OPS))):
            m.d.comb += self.status.eq(CqeStatus.LOC_QP_OP_ERR)
        with m.Elif((atomic & (wqe.length != ATOMIC_LEN)) | (wqe.length > MAX_MESSAGE) | (inline & (wqe.length > inline_max)) | (ud & (wqe.length > self.mtu))):
            m.d.comb += self.status.eq(CqeStatus.LOC_LEN_ERR)
        return m
