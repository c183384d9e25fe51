"""Workloads for the whole engine: host memory, register writes, and the model's expected results.

A :class:`Workload` is what software would set up: a host-memory image (QP context table, CQ
context table, send-queue rings with WQEs, payload buffers), injected bus-error ranges, and the
AXI4-Lite writes to issue in order (configuration with CONTROL.ENABLE = 0, the doorbells, then
ENABLE = 1). :func:`expected` runs the golden model on a copy; :func:`compare` checks what the RTL
produced against it. The cocotb tests and the simulation CLI share this module.

:data:`DEFAULT_MAP` keeps everything below 32 MiB so one flat simulated RAM holds it; a smaller
:class:`MemoryMap` packs a workload into on-chip RAM (the FPGA self-test, ``fpga/selftest.py``).
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field

from ..model.descriptor import LinkMode
from ..model.config import RnicConfig
from ..model.engine import ALLOWED_OPS, ATOMIC_LEN, ATOMIC_OPS, REQUEST_OPS, Driver, EngineModel, HostMemory, RegisterSettings, SgidEntry
from ..model.qpc import MUTABLE_BYTES, RECORD_BYTES, PathMtu, QpContext, QpState, ServiceType
from ..model.regs import COUNTER_NAMES, REG
from ..model.wqe import (CQ_RECORD_BYTES, CQE_BYTES, INLINE_MAX_RC, INLINE_MAX_UD, WQE_BYTES, Wqe, WqeFlags,
                         WqeOpcode)

__all__ = ["MemoryMap", "DEFAULT_MAP", "MEM_SIZE", "QPC_BASE", "CQ_BASE", "CQ_RINGS", "SQ_RINGS", "BUFFERS", "Workload", "WorkloadBuilder", "random_workload",
           "every_opcode_workload", "text_payload", "expected", "compare", "CHECKED_REGS"]



@dataclass(frozen=True)
class MemoryMap:
    """Where a workload puts its tables, rings and buffers in host memory."""
    size: int = 1 << 25
    qpc_base: int = 0x01_0000      # up to 512 QP contexts
    cq_base: int = 0x02_0000
    cq_rings: int = 0x10_0000      # one ring per CQ, cq_stride apart
    cq_stride: int = 0x2000        # 8 KiB: 256 CQEs
    sq_rings: int = 0x40_0000      # one ring per QP, sq_stride apart
    sq_stride: int = 0x4000        # 16 KiB: 256 WQEs
    buffers: int = 0x80_0000       # payload, bump-allocated up to size

    @property
    def log_cq(self) -> int:
        """The largest CQ ring (log2 of CQEs) that fits a stride."""
        return (self.cq_stride // CQE_BYTES).bit_length() - 1

    @property
    def log_sq(self) -> int:
        return (self.sq_stride // WQE_BYTES).bit_length() - 1

    @property
    def max_qps(self) -> int:
        """The QPs it holds: contexts below ``cq_base``, send queues below ``buffers``."""
        return min((self.cq_base - self.qpc_base) // RECORD_BYTES, (self.buffers - self.sq_rings) // self.sq_stride)


DEFAULT_MAP = MemoryMap()
MEM_SIZE = DEFAULT_MAP.size
QPC_BASE = DEFAULT_MAP.qpc_base
CQ_BASE = DEFAULT_MAP.cq_base
CQ_RINGS = DEFAULT_MAP.cq_rings
SQ_RINGS = DEFAULT_MAP.sq_rings
BUFFERS = DEFAULT_MAP.buffers
SGIDS = (SgidEntry(gid=0xFFFF_C0A8_0001, mac=0x02_00_00_00_00_01),
         SgidEntry(gid=0xFE80 << 112 | 0x11, mac=0x02_00_00_00_00_11, vlan_id=0x123, vlan_present=True),
         SgidEntry(gid=0x2001_0DB8 << 96 | 0x77, mac=0x02_00_00_00_00_22))

#: Registers compared at idle (besides host memory and frames).
CHECKED_REGS = ("CAPS", "CAPS2", "ERR_STATUS", "ERR_QPN", "ERR_INFO", "INT_STATUS") + tuple(n.upper() for n in COUNTER_NAMES)

#: The WQE opcodes each service allows (the model's table), in opcode order.
_ALLOWED = {service: tuple(sorted(ops)) for service, ops in ALLOWED_OPS.items()}


@dataclass
class Workload:
    mem: HostMemory
    settings: RegisterSettings
    writes: list[tuple[int, int]]
    qpns: list[int] = field(default_factory=list)
    cqns: list[int] = field(default_factory=list)
    memory_map: MemoryMap = DEFAULT_MAP

    @property
    def regions(self) -> list[tuple[int, int]]:
        """Host-memory regions the engine may write: ``(address, bytes)``."""
        mm = self.memory_map
        out = [(mm.qpc_base, self.settings.qpc_size * RECORD_BYTES), (mm.cq_base, self.settings.cq_size * CQ_RECORD_BYTES)]
        out += [(mm.cq_rings + c * mm.cq_stride, mm.cq_stride) for c in self.cqns]
        return out


class WorkloadBuilder:
    """Lays out QPs, CQs, WQEs and buffers as a driver would; :meth:`build` returns the workload."""

    def __init__(self, nqps: int, *, ncqs: int | None = None, quota: int = 16, max_burst: int = 256,
                 int_mod_count: int = 1, rng: random.Random | None = None,
                 payload=None, memory_map: MemoryMap = DEFAULT_MAP):
        self.rng = rng or random.Random(0)
        self.payload = payload or self.rng.randbytes
        self.mem = HostMemory()
        self.map = mm = memory_map
        ncqs = nqps if ncqs is None else ncqs
        self.settings = RegisterSettings(qpc_base=mm.qpc_base, qpc_size=nqps, cq_base=mm.cq_base, cq_size=ncqs, quota=quota,
                                         max_burst=max_burst, port_lid=0x77, int_mod_count=int_mod_count,
                                         sgids=SGIDS, enable=False)
        self.drv = Driver(self.mem, self.settings)
        self.buf = mm.buffers
        self.rings: list[tuple[int, int]] = []
        self.qpns: list[int] = []
        self.cqns: list[int] = []

    def cq(self, cqn: int, log_size: int | None = None, **kw):
        log_size = self.map.log_cq if log_size is None else log_size
        assert (CQE_BYTES << log_size) <= self.map.cq_stride, "CQ ring larger than the memory map's stride"
        self.drv.create_cq(cqn, self.map.cq_rings + cqn * self.map.cq_stride, log_size, **kw)
        self.cqns.append(cqn)

    def qp(self, qpn: int, *, service=ServiceType.RC, mode=LinkMode.ROCEV2_IPV4, mtu=PathMtu.MTU_1024,
           cqn: int | None = None, **kw) -> QpContext:
        rng = self.rng
        kw.setdefault("state", QpState.RTS)
        kw.setdefault("next_psn", rng.randrange(1 << 24))
        kw.setdefault("log_sq_size", self.map.log_sq)
        assert (WQE_BYTES << kw["log_sq_size"]) <= self.map.sq_stride, "SQ ring larger than the memory map's stride"
        kw.setdefault("sgid_index", rng.randrange(len(SGIDS)))
        ctx = QpContext(service=service, link_mode=mode, path_mtu=mtu, cqn=qpn if cqn is None else cqn,
                        sq_base=self.map.sq_rings + qpn * self.map.sq_stride, dest_qpn=rng.randrange(1 << 24),
                        dst_mac=0x02_00_00_00_00_00 | rng.randrange(1 << 24), dst_gid=rng.randrange(1 << 128),
                        dlid=rng.randrange(1, 0xC000), pkey=0xFFFF, qkey=rng.randrange(1 << 31),
                        sl=rng.randrange(16), traffic_class=rng.randrange(256), hop_limit=rng.randrange(1, 256),
                        udp_sport=rng.randrange(0xC000, 0x10000), flow_label=rng.randrange(1 << 20), **kw)
        self.qpns.append(qpn)
        return self.drv.create_qp(qpn, ctx)

    def buffer(self, data: bytes, align: int | None = None) -> int:
        skew = self.rng.randrange(64) if align is None else align
        addr = (self.buf + 63) // 64 * 64 + skew
        self.mem.poke(addr, data)
        self.buf = addr + len(data) + 1
        assert self.buf <= self.map.size, "workload does not fit in the memory map"
        return addr

    def post(self, qpn: int, opcode: int, length: int, *, flags=WqeFlags.SIGNALED, **kw) -> Wqe:
        ctx = self.drv.qps[qpn]
        ud = ctx.service == ServiceType.UD
        data = self.payload(length) if length < (1 << 20) else bytes(0)
        if flags & WqeFlags.INLINE:
            kw["inline_data"] = data[:INLINE_MAX_UD if ud else INLINE_MAX_RC]
        elif opcode in REQUEST_OPS or length >= (1 << 20):
            kw.setdefault("local_addr", self.map.buffers)
        else:
            kw.setdefault("local_addr", self.buffer(data))
        kw.setdefault("wr_id", self.rng.randrange(1 << 64))
        kw.setdefault("imm", self.rng.randrange(1 << 32))
        if ud:
            kw.setdefault("qkey", self.rng.choice([self.rng.randrange(1 << 31), 1 << 31]))
            kw.setdefault("dst_mac", 0x02_00_00_00_00_00 | self.rng.randrange(1 << 24))
            kw.setdefault("dlid", self.rng.randrange(1, 0xC000))
            kw.setdefault("dest_qpn", self.rng.randrange(1 << 24))
            kw.setdefault("dst_gid", self.rng.randrange(1 << 128))
        else:
            kw.setdefault("rkey", self.rng.randrange(1 << 32))
            kw.setdefault("remote_addr", self.rng.randrange(1 << 64))
            if opcode in ATOMIC_OPS:
                kw.setdefault("compare_add", self.rng.randrange(1 << 64))
                kw.setdefault("swap", self.rng.randrange(1 << 64))
        wqe = Wqe(opcode=opcode, flags=flags, length=length, **kw)
        self.drv.post(qpn, wqe)
        return wqe

    def build(self, doorbells: list[tuple[int, int | None]] | None = None) -> Workload:
        """Configuration writes, then the doorbells (default: each QP rung once with everything
        posted), then CONTROL.ENABLE = 1 (with RELIABLE if the settings ask for it)."""
        writes = list(self.settings.writes())
        if doorbells is None:
            doorbells = [(q, None) for q in self.qpns if self.drv.sq_pi[q] != self.drv.qps[q].sq_pi]
        for qpn, pi in doorbells:
            if pi is None:
                pi = self.drv.sq_pi[qpn]
            writes += [(REG["DB_QPN"].offset, qpn), (REG["DB_SQ_PI"].offset, pi)]
        writes.append((REG["CONTROL"].offset, 1 | int(self.settings.reliable) << 1))
        return Workload(self.mem, self.settings, writes, list(self.qpns), list(self.cqns), self.map)


def random_length(rng: random.Random, mtu: int, max_len: int) -> int:
    kind = rng.random()
    if kind < 0.15:
        return rng.choice([0, 1, mtu - 1, mtu, mtu + 1])
    if kind < 0.55:
        return rng.randrange(1, 129)
    if kind < 0.9:
        return rng.randrange(1, min(max_len, 3 * mtu) + 1)
    return rng.randrange(1, max_len + 1)


def random_workload(rng: random.Random, *, nqps: int = 4, wqes: int = 6, max_len: int = 8192,
                    modes=tuple(LinkMode), mtus=tuple(PathMtu), quota: int | None = None,
                    reliable: bool = False) -> Workload:
    """Random QPs (service, link mode, MTU), random WQEs of every allowed opcode and random lengths.

    ``reliable``: CONTROL.RELIABLE, and RC QPs that meet the requester's holds with no responses
    coming: some PSNs already unacknowledged, ``max_rd_atomic`` 0 to 7, now and then an RNR wait or
    a FENCE WQE."""
    b = WorkloadBuilder(nqps, quota=quota or rng.choice([1, 2, 4, 16]), max_burst=rng.choice([256, 256, 16, 3]),
                        rng=rng)
    b.settings.reliable = reliable
    for q in range(nqps):
        b.cq(q)
        service = rng.choice([ServiceType.RC, ServiceType.RC, ServiceType.UC, ServiceType.UD])
        mtu = rng.choice(mtus)
        held = reliable and service == ServiceType.RC
        extra = dict(max_rd_atomic=rng.choice([0, 1, 2, 4, 7, 7]), req_wait=int(rng.random() < 0.1)) if held else {}
        ctx = b.qp(q, service=service, mode=rng.choice(modes), mtu=mtu, **extra)
        if held and rng.random() < 0.7:
            ctx.una_psn = (ctx.next_psn - rng.choice([rng.randrange(128), rng.randrange(100, 129)])) & 0xFFFFFF
            b.mem.poke(b.drv._qpc(q), ctx.pack()[:MUTABLE_BYTES])
        for _ in range(rng.randrange(1, wqes + 1)):
            op = rng.choice(_ALLOWED[service])
            length = random_length(rng, mtu.bytes, mtu.bytes if service == ServiceType.UD else max_len)
            if op in ATOMIC_OPS and rng.random() < 0.9:
                length = ATOMIC_LEN
            flags = WqeFlags(0)
            if rng.random() < 0.7:
                flags |= WqeFlags.SIGNALED
            if rng.random() < 0.3:
                flags |= WqeFlags.SOLICITED
            if held and rng.random() < 0.1:
                flags |= WqeFlags.FENCE
            cap = INLINE_MAX_UD if service == ServiceType.UD else INLINE_MAX_RC
            if op not in REQUEST_OPS and length <= cap and rng.random() < 0.4:
                flags |= WqeFlags.INLINE
            b.post(q, op, length, flags=flags)
    return b.build()


def text_payload(length: int) -> bytes:
    """Readable payload bytes (Wireshark's heuristic dissectors take random bytes for EoIB or IP)."""
    text = b"rnic: RDMA payload from host memory, zero copy, checked against the golden model. "
    return (text * (length // len(text) + 1))[:length]


def every_opcode_workload(rng: random.Random, *, mtu=PathMtu.MTU_256,
                          payload=None) -> Workload:
    """Each link mode x service (RC, UC, UD) x every opcode the service allows: zero-length,
    one-packet and multi-packet messages and an inline one; one QP (and CQ) per mode and service.
    ``payload(length)`` makes the payload bytes (default random)."""
    b = WorkloadBuilder(len(LinkMode) * len(_ALLOWED), rng=rng, quota=4, payload=payload)
    qpn = 0
    for mode in LinkMode:
        for service, allowed in _ALLOWED.items():
            b.cq(qpn)
            b.qp(qpn, service=service, mode=mode, mtu=mtu)
            lengths = (0, mtu.bytes - 56) if service == ServiceType.UD else (0, 1, 2 * mtu.bytes + 188)
            for op in allowed:
                for n in (ATOMIC_LEN,) if op in ATOMIC_OPS else lengths:
                    b.post(qpn, op, n)
                if op not in REQUEST_OPS:
                    b.post(qpn, op, 11, flags=WqeFlags.SIGNALED | WqeFlags.INLINE)
            qpn += 1
    return b.build()


def expected(w: Workload, config: RnicConfig) -> EngineModel:
    """The golden model of the engine ``config`` describes, run on a copy of the workload's memory."""
    model = EngineModel(copy.deepcopy(w.mem), config)
    for offset, value in w.writes:
        model.write_reg(offset, value)
    return model.run()


def compare(w: Workload, model: EngineModel, frames: list[bytes], read_mem, regs: dict[str, int]) -> list[str]:
    """Mismatches between the RTL's results and the model's: ``frames`` (not aborted, in wire
    order), ``read_mem(addr, n)`` (host memory after the QP-context FLUSH), ``regs`` (by name; pass
    only those the model defines exactly for the workload)."""
    out = []
    want = [p.frame() for p in model.packets]
    if len(frames) != len(want):
        out.append(f"frames: {len(frames)} from the RTL, {len(want)} from the model")
    for i, (got, exp) in enumerate(zip(frames, want)):
        if got != exp:
            diff = next((k for k in range(min(len(got), len(exp))) if got[k] != exp[k]), min(len(got), len(exp)))
            out.append(f"frame {i} (QP {model.packets[i].qpn}, opcode 0x{model.packets[i].desc.opcode:02x}, "
                       f"{len(exp)} bytes): first difference at byte {diff} (RTL {len(got)} bytes)")
            if len(out) > 8:
                break
    for addr, n in w.regions:
        got, exp = read_mem(addr, n), model.mem.peek(addr, n)
        if got != exp:
            diff = next(k for k in range(n) if got[k] != exp[k])
            out.append(f"host memory at 0x{addr + diff:x} (region 0x{addr:x}+{n}): RTL {got[diff:diff + 8].hex()} "
                       f"model {exp[diff:diff + 8].hex()}")
    for name, value in regs.items():
        if value != model.reg(name):
            out.append(f"register {name}: RTL 0x{value:x}, model 0x{model.reg(name):x}")
    return out
