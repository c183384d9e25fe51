"""A small verbs layer: what a driver does to the RNIC, as calls that drive the RTL or the model alike.

:class:`Verbs` talks to a *device*: anything with ``async write_reg(offset, value)``,
``async read_reg(offset)``, ``peek(addr, n)`` / ``poke(addr, data)`` on host memory and
``async wait_idle()``. :class:`ModelDevice` wraps :class:`~rnic.model.engine.EngineModel` (it runs
to idle after every register write, like hardware infinitely fast); the cocotb harness gives
``rnic.sim.harness.RtlDevice`` for the RTL on Verilator. The same sequence of calls on both, and a
scoreboard compares what they did.

Driver rules (docs/engine.md):

* ``create_cq`` / ``create_qp`` write records into the tables in host memory; the QP is live as
  soon as its record says RTS.
* ``post_send`` writes the WQE at the software producer index, then (``ring=True``) DB_QPN and
  DB_SQ_PI. The engine may be running.
* ``poll_cq`` reads CQEs at the software consumer index while their ``owner`` bit has the
  current pass's phase, as a driver polls without reading the producer index, then returns the
  slots with CQ_DB_CQN / CQ_DB_CI.
* ``modify_qp`` quiesces the engine (STATUS.IDLE), INVALIDATEs the QP's cached context (dirty
  fields are written back first), then rewrites the record in host memory. ``query_qp`` does the
  same without the rewrite. A QP must have no WQE in flight when it is modified; waiting for
  STATUS.IDLE is the simple, always-correct way.

The receive side (docs/receive.md): ``create_qp(qpn, ctx, rx)`` also writes the receive half of the
record (:class:`~rnic.model.recv_records.RecvContext`: receive CQ, RQ ring, PD, access flags, min RNR
timer, max_dest_rd_atomic), ``modify_qp`` takes those fields too, ``reg_mr`` / ``dereg_mr`` write the
MR table, ``post_recv`` writes a receive WQE and rings the RQ doorbell (DB_QPN, then DB_RQ_PI), and
``poll_cq`` returns receive completions like send completions. ``open`` also writes the receive path's
registers when a :class:`~rnic.model.responder.ResponderSettings` is given (``receive``). A
:class:`ModelDevice` has a receive path when it has a :class:`~rnic.model.responder.Responder`.
"""

from __future__ import annotations

import dataclasses

from ..model.engine import EngineModel, RegisterSettings, sq_slot
from ..model.qpc import RECORD_BYTES, PathMtu, QpContext, ServiceType
from ..model.recv_records import (MR_BYTES, RECV_QPC_BYTES, RECV_QPC_OFFSET, RECV_WQE_BYTES, MemoryRegion, MrState,
                                  RecvContext, RecvWqe, mr_index, mr_key)
from ..model.regs import REG
from ..model.wqe import CQ_RECORD_BYTES, CQE_BYTES, CqContext, Cqe, CqState, Wqe

__all__ = ["Verbs", "ModelDevice", "VerbsError"]


class VerbsError(RuntimeError):
    """A call the device refused (a QPC_CMD error, a ring that is full)."""


class ModelDevice:
    """The golden model as a device; it runs to idle after every register write. ``responder`` (a
    :class:`~rnic.model.responder.Responder` on ``model``) gives it a receive path."""

    def __init__(self, model: EngineModel, responder=None):
        self.model, self.responder = model, responder

    async def write_reg(self, offset: int, value: int) -> None:
        if offset == REG["DB_RQ_PI"].offset and self.responder is None:
            raise VerbsError("this device has no receive path")
        self.model.write_reg(offset, value)
        self.model.run()

    async def read_reg(self, offset: int) -> int:
        return self.model.read_reg(offset)

    def peek(self, addr: int, n: int) -> bytes:
        return self.model.mem.peek(addr, n)

    def poke(self, addr: int, data: bytes) -> None:
        self.model.mem.poke(addr, data)

    async def wait_idle(self) -> None:
        self.model.run()


class Verbs:
    """A driver for one RNIC ``device`` (see the module docstring)."""

    def __init__(self, device, settings: RegisterSettings, *, mr_base: int = 0, mr_size: int = 0, receive=None):
        self.dev, self.settings, self.receive = device, settings, receive
        if receive is not None:
            mr_base, mr_size = receive.mr_base, receive.mr_size
        self.mr_base, self.mr_size = mr_base, mr_size
        self.rxs: dict[int, RecvContext] = {}
        self.rq_pi: dict[int, int] = {}
        self.max_mtu = PathMtu.MTU_4096          # until open() reads CAPS2
        self.qps: dict[int, QpContext] = {}
        self.sq_pi: dict[int, int] = {}
        self.cqs: dict[int, CqContext] = {}
        self.cq_ci: dict[int, int] = {}
        self.polled: dict[int, list[Cqe]] = {}

    async def open(self) -> None:
        """Read the device's limits (CAPS2) and apply the configuration registers (CONTROL.ENABLE last)."""
        self.max_mtu = PathMtu(await self.dev.read_reg(REG["CAPS2"].offset) >> 4 & 7)
        writes = self.settings.writes()          # CONTROL last
        if self.receive is not None:
            writes = self.receive.writes([e.gid for e in self.settings.sgids]) + writes
        for offset, value in writes:
            await self.dev.write_reg(offset, value)

    # --- resources -----------------------------------------------------------------------------------

    def create_cq(self, cqn: int, ring_base: int, log_size: int = 6) -> CqContext:
        if not 0 <= cqn < self.settings.cq_size:
            raise VerbsError(f"CQN {cqn} is beyond CQ_SIZE {self.settings.cq_size}")
        cq = CqContext(state=CqState.ACTIVE, log_size=log_size, ring_base=ring_base)
        self.dev.poke(ring_base, bytes(cq.size * CQE_BYTES))
        self.dev.poke(self.settings.cq_base + cqn * CQ_RECORD_BYTES, cq.pack())
        self.cqs[cqn], self.cq_ci[cqn], self.polled[cqn] = cq, 0, []
        return cq

    def create_qp(self, qpn: int, ctx: QpContext, rx: RecvContext | None = None) -> QpContext:
        """Write QP ``qpn``'s record: ``ctx`` and the receive half ``rx`` (default: no receive queue)."""
        if not 0 <= qpn < self.settings.qpc_size:
            raise VerbsError(f"QPN {qpn} is beyond QPC_SIZE {self.settings.qpc_size}")
        ctx = dataclasses.replace(ctx, qpn=qpn)
        rx = RecvContext() if rx is None else rx
        self._check_mtu(ctx)
        self.dev.poke(self._qpc(qpn), ctx.pack()[:RECV_QPC_OFFSET] + rx.pack())
        self.qps[qpn], self.sq_pi[qpn] = ctx, ctx.sq_pi
        self.rxs[qpn], self.rq_pi[qpn] = rx, rx.rq_pi
        return ctx

    async def modify_qp(self, qpn: int, **changes) -> QpContext:
        """Change fields of the QP's context (e.g. ``state``, ``dst_mac``, ``hop_limit``, and the receive
        half's ``pd``, ``access``, ``min_rnr_timer``, ``max_dest_rd_atomic``, ...)."""
        rx_names = {f.name for f in dataclasses.fields(RecvContext)}
        ctx = await self.query_qp(qpn)
        rx = RecvContext.unpack(self.dev.peek(self._qpc(qpn) + RECV_QPC_OFFSET, RECV_QPC_BYTES))
        ctx = dataclasses.replace(ctx, **{k: v for k, v in changes.items() if k not in rx_names})
        rx = dataclasses.replace(rx, **{k: v for k, v in changes.items() if k in rx_names})
        self._check_mtu(ctx)
        self.dev.poke(self._qpc(qpn), ctx.pack()[:RECV_QPC_OFFSET] + rx.pack())
        self.qps[qpn], self.rxs[qpn] = ctx, rx
        return ctx

    def _check_mtu(self, ctx: QpContext) -> None:
        """As Linux refuses a path MTU above the port's (EINVAL): the engine would fail such a QP."""
        if ctx.path_mtu > self.max_mtu:
            raise VerbsError(f"path MTU {PathMtu(ctx.path_mtu).bytes} is above the device's "
                             f"{self.max_mtu.bytes} (CAPS2)")

    async def query_qp(self, qpn: int) -> QpContext:
        """The QP's context as the engine holds it (after quiescing and INVALIDATE)."""
        await self.dev.wait_idle()
        await self.dev.write_reg(REG["QPC_CMD_QPN"].offset, qpn)
        await self.dev.write_reg(REG["QPC_CMD"].offset, 1)
        while (status := await self.dev.read_reg(REG["QPC_CMD_STATUS"].offset)) & 1:
            pass
        if status >> 1:
            raise VerbsError(f"QPC_CMD INVALIDATE of QP {qpn} failed with result {status >> 1}")
        return QpContext.unpack(self.dev.peek(self._qpc(qpn), RECORD_BYTES))

    # --- work ------------------------------------------------------------------------------------------

    async def post_send(self, qpn: int, wqe: Wqe, *, ring: bool = True) -> int:
        """Write ``wqe`` at the software producer index; return the new index."""
        ctx = self.qps[qpn]
        pi = self.sq_pi[qpn]
        self.dev.poke(sq_slot(ctx, pi), wqe.pack(ud=ctx.service == ServiceType.UD))
        self.sq_pi[qpn] = (pi + 1) & 0xFFFF
        if ring:
            await self.ring(qpn)
        return self.sq_pi[qpn]

    async def ring(self, qpn: int) -> None:
        await self.dev.write_reg(REG["DB_QPN"].offset, qpn)
        await self.dev.write_reg(REG["DB_SQ_PI"].offset, self.sq_pi[qpn])

    def reg_mr(self, index: int, mr: MemoryRegion) -> int:
        """Register ``mr`` in MR table entry ``index`` (VALID); return its key (the R_Key and L_Key)."""
        if not 0 <= index < self.mr_size:
            raise VerbsError(f"MR index {index} is beyond the MR table's {self.mr_size} entries")
        mr = dataclasses.replace(mr, state=MrState.VALID)
        self.dev.poke(self.mr_base + index * MR_BYTES, mr.pack())
        return mr_key(index, mr.key)

    def dereg_mr(self, key: int) -> None:
        """Invalidate the MR entry ``key`` names (its variant byte must match)."""
        addr = self.mr_base + mr_index(key) * MR_BYTES
        mr = MemoryRegion.unpack(self.dev.peek(addr, MR_BYTES))
        if mr_index(key) >= self.mr_size or mr.key != key & 0xFF or mr.state != MrState.VALID:
            raise VerbsError(f"key 0x{key:08x} names no registered region")
        self.dev.poke(addr, dataclasses.replace(mr, state=MrState.INVALID).pack())

    async def post_recv(self, qpn: int, wqe: RecvWqe, *, ring: bool = True) -> int:
        """Write a receive WQE at the software RQ producer index (and ring the RQ doorbell); return it."""
        rx = self.rxs[qpn]
        pi = self.rq_pi[qpn]
        if (pi - self.dev_rq_ci(qpn)) & 0xFFFF >= 1 << rx.log_rq_size:
            raise VerbsError(f"the receive queue of QP {qpn} is full")
        self.dev.poke((rx.rq_base & ~0x3F) + (pi % (1 << rx.log_rq_size)) * RECV_WQE_BYTES, wqe.pack())
        self.rq_pi[qpn] = (pi + 1) & 0xFFFF
        if ring:
            await self.dev.write_reg(REG["DB_QPN"].offset, qpn)
            await self.dev.write_reg(REG["DB_RQ_PI"].offset, self.rq_pi[qpn])
        return self.rq_pi[qpn]

    def dev_rq_ci(self, qpn: int) -> int:
        """The RQ consumer index as host memory holds it (the engine writes it back)."""
        return RecvContext.unpack(self.dev.peek(self._qpc(qpn) + RECV_QPC_OFFSET, RECV_QPC_BYTES)).rq_ci

    async def poll_cq(self, cqn: int, max_entries: int | None = None) -> list[Cqe]:
        """The new CQEs (by owner phase), oldest first; their slots are handed back with CQ_DB_CI."""
        cq = self.cqs[cqn]
        out = []
        ci = self.cq_ci[cqn]
        while max_entries is None or len(out) < max_entries:
            raw = self.dev.peek((cq.ring_base & ~0x1F) + (ci % cq.size) * CQE_BYTES, CQE_BYTES)
            cqe = Cqe.unpack(raw)
            if cqe.owner != (ci >> cq.log_size & 1) ^ 1:
                break
            out.append(cqe)
            ci = (ci + 1) & 0xFFFF
        if out:
            self.cq_ci[cqn] = ci
            await self.dev.write_reg(REG["CQ_DB_CQN"].offset, cqn)
            await self.dev.write_reg(REG["CQ_DB_CI"].offset, ci)
            self.polled[cqn] += out
        return out

    def _qpc(self, qpn: int) -> int:
        return self.settings.qpc_base + qpn * RECORD_BYTES
