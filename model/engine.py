"""Golden model of the DMA descriptor engine: doorbells -> WQEs -> packets -> completions.

:class:`EngineModel` is given a :class:`HostMemory` and register writes (configuration, doorbells,
CQ consumer indices) exactly as software issues them over AXI4-Lite, and :meth:`EngineModel.run`
processes until the engine is idle. Observable results:

* :attr:`EngineModel.packets`: the ordered :class:`TxPacket` list (normalized :class:`PacketDesc`
  plus payload; :meth:`TxPacket.frame` is the wire frame);
* :attr:`EngineModel.cqes`: every CQE written, in order, with its CQ and slot;
* host memory: CQ rings, CQ contexts (producer index, state), QP contexts (``next_psn``,
  ``sq_ci``, ``sq_pi``, ``state``; the coherent view, i.e. after a QP-context-cache FLUSH);
* registers: ERR_STATUS / ERR_QPN / ERR_INFO, INT_STATUS, counters;
* :attr:`EngineModel.irq_events`: completion and error interrupt events.

Rules (docs/engine.md has them in full): doorbells are handled when written; the scheduler serves
QPs round robin in the order they became ready, up to SCHED_QUOTA steps per turn (a step is one
packet, or one WQE completed without a packet); an error completes the WQE with an error CQE,
moves the QP to ERROR, and its later WQEs are flushed with WR_FLUSH_ERR.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

from .config import RnicConfig
from .descriptor import LinkMode, PacketDesc
from .frames import build_frame, normalize_desc
from .opcodes import Opcode
from .qpc import MUTABLE_BYTES, RECORD_BYTES, BusError, PathMtu, QpContext, QpState, ServiceType
from .responder import psn_delta
from .regs import COUNTER_NAMES, REG, caps, caps2, SGID_BASE, SGID_ENTRIES, SGID_STRIDE, ErrBit, IntBit, RegisterFile
from .wqe import (CQ_RECORD_BYTES, CQE_BYTES, MAX_MESSAGE, WQE_BYTES, Cqe, CqContext, CqeStatus, CqState, Wqe,
                  WqeFlags, WqeOpcode, inline_capacity)

__all__ = ["HostMemory", "ERROR_ALIGN", "PAGE", "sq_slot", "split_bursts", "SgidEntry", "RegisterSettings", "TxPacket",
           "CqeWrite", "IrqEvent", "EngineModel", "Driver", "bth_opcode", "PSN_MASK", "MAX_LOG_RING",
           "BTH_BASE", "SEND_OPS", "IMM_OPS", "ATOMIC_OPS", "ATOMIC_LEN", "REQUEST_OPS", "ALLOWED_OPS"]

PAGE = 4096
WINDOW = 128                # RC with a requester: unacknowledged PSNs per QP (rxe: RXE_MAX_UNACKED_PSNS)
ACKREQ_EVERY = 64           # RC: AckReq on every packet whose PSN is 63 mod 64 (rxe: RXE_MAX_PKT_PER_ACK)
ERROR_ALIGN = 64            # injected bus-error ranges are aligned to the widest data bus (bytes)
PSN_MASK = (1 << 24) - 1
MAX_LOG_RING = 15           # SQ and CQ rings hold at most 2**15 entries (16-bit indices)


class HostMemory:
    """Sparse byte-addressable host memory (4 KiB pages, zero when untouched) with injected AXI errors.

    ``add_read_error`` / ``add_write_error`` make every access that touches ``[lo, hi)`` fail with
    :class:`rnic.model.qpc.BusError` (``resp`` 2 SLVERR or 3 DECERR); a failed write changes nothing.
    Ranges are :data:`ERROR_ALIGN`-aligned so that any bus width sees the same failures.
    ``peek``/``poke`` are the error-free backdoor.
    """

    def __init__(self):
        self.pages: dict[int, bytearray] = {}
        self.read_errors: list[tuple[int, int, int]] = []
        self.write_errors: list[tuple[int, int, int]] = []

    @staticmethod
    def _range(lo, hi, resp):
        if lo % ERROR_ALIGN or hi % ERROR_ALIGN or hi <= lo:
            raise ValueError(f"error range [0x{lo:x}, 0x{hi:x}) must be non-empty and {ERROR_ALIGN}-byte aligned")
        if resp not in (2, 3):
            raise ValueError(f"resp must be 2 (SLVERR) or 3 (DECERR), not {resp!r}")
        return lo, hi, resp

    def add_read_error(self, lo: int, hi: int, resp: int = 2) -> None:
        self.read_errors.append(self._range(lo, hi, resp))

    def add_write_error(self, lo: int, hi: int, resp: int = 2) -> None:
        self.write_errors.append(self._range(lo, hi, resp))

    @staticmethod
    def _check(errors, addr, n):
        for lo, hi, resp in errors:
            if addr < hi and lo < addr + max(n, 1):
                raise BusError(resp)

    def peek(self, addr: int, n: int) -> bytes:
        out = bytearray()
        while n > 0:
            page, off = divmod(addr, PAGE)
            take = min(n, PAGE - off)
            data = self.pages.get(page)
            out += data[off:off + take] if data is not None else bytes(take)
            addr, n = addr + take, n - take
        return bytes(out)

    def poke(self, addr: int, data: bytes) -> None:
        data = memoryview(bytes(data))
        while data:
            page, off = divmod(addr, PAGE)
            take = min(len(data), PAGE - off)
            self.pages.setdefault(page, bytearray(PAGE))[off:off + take] = data[:take]
            addr, data = addr + take, data[take:]

    def read(self, addr: int, n: int) -> bytes:
        self._check(self.read_errors, addr, n)
        return self.peek(addr, n)

    def write(self, addr: int, data: bytes) -> None:
        self._check(self.write_errors, addr, len(data))
        self.poke(addr, data)


def sq_slot(ctx: QpContext, index: int) -> int:
    """Host address of send-queue entry ``index`` (a 16-bit producer/consumer index) of a QP: the ring
    is ``2**log_sq_size`` 64-byte WQEs from ``sq_base`` (bits 5:0 ignored)."""
    return (ctx.sq_base & ~0x3F) + (index % (1 << ctx.log_sq_size)) * WQE_BYTES


def split_bursts(addr: int, nbytes: int, beat_bytes: int, max_beats: int = 256) -> list[tuple[int, int]]:
    """The AXI INCR bursts ``(address, beats)`` that cover ``[addr, addr + nbytes)``: beat-aligned,
    at most ``max_beats`` beats (0 or > 256 act as 256), never crossing a 4 KiB boundary."""
    if beat_bytes < 1 or beat_bytes & (beat_bytes - 1):
        raise ValueError(f"beat_bytes must be a power of two, not {beat_bytes!r}")
    max_beats = 256 if not 1 <= max_beats <= 256 else max_beats
    if nbytes <= 0:
        return []
    start = addr - addr % beat_bytes
    end = addr + nbytes
    out = []
    while start < end:
        to_page = (PAGE - start % PAGE) // beat_bytes
        beats = min(max_beats, to_page, -(-(end - start) // beat_bytes))
        out.append((start, beats))
        start += beats * beat_bytes
    return out


@dataclass(frozen=True)
class SgidEntry:
    """One source address table entry (registers SGIDn_*): GID, MAC, optional VLAN ID."""

    gid: int = 0
    mac: int = 0
    vlan_id: int = 0
    vlan_present: bool = False


@dataclass
class RegisterSettings:
    """The values software writes to the configuration registers, as one object; :meth:`writes` is
    the AXI4-Lite write sequence that software (or a cocotb test) issues to apply them. (The
    engine's build-time parameters are :class:`rnic.model.config.RnicConfig`.)"""

    qpc_base: int = 0
    qpc_size: int = 0
    cq_base: int = 0
    cq_size: int = 0
    quota: int = 16
    max_burst: int = 256
    bw_cap: int = 0
    port_lid: int = 0
    int_mod_count: int = 1
    int_mod_timer: int = 0
    int_enable: int = 0b11
    sgids: tuple[SgidEntry, ...] = ()
    enable: bool = True
    req_base: int = 0                   # requester records (rnic.model.req_records), 32 bytes per QP
    reliable: bool = False              # CONTROL.RELIABLE: RC by the requester's rules

    def writes(self) -> list[tuple[int, int]]:
        m32 = 0xFFFF_FFFF
        regs = [("QPC_BASE_LO", self.qpc_base & m32), ("QPC_BASE_HI", self.qpc_base >> 32),
                ("QPC_SIZE", self.qpc_size), ("CQ_BASE_LO", self.cq_base & m32), ("CQ_BASE_HI", self.cq_base >> 32),
                ("CQ_SIZE", self.cq_size), ("SCHED_QUOTA", self.quota), ("AXI_MAX_BURST", self.max_burst),
                ("AXI_BW_CAP", self.bw_cap), ("PORT_LID", self.port_lid), ("INT_MOD_COUNT", self.int_mod_count),
                ("INT_MOD_TIMER", self.int_mod_timer), ("INT_ENABLE", self.int_enable),
                ("REQ_BASE_LO", self.req_base & m32), ("REQ_BASE_HI", self.req_base >> 32)]
        out = [(REG[n].offset, v) for n, v in regs]
        for i, e in enumerate(self.sgids):
            base = SGID_BASE + SGID_STRIDE * i
            out += [(base + 4 * w, e.gid >> (32 * w) & m32) for w in range(4)]
            out += [(base + 0x10, e.mac & m32), (base + 0x14, e.mac >> 32),
                    (base + 0x18, e.vlan_id & 0xFFF | int(e.vlan_present) << 31)]
        out.append((REG["CONTROL"].offset, int(self.enable) | int(self.reliable) << 1))
        return out


@dataclass
class TxPacket:
    """One emitted packet: the QP it belongs to, its (normalized) header descriptor and payload."""

    qpn: int
    desc: PacketDesc
    payload: bytes

    def frame(self) -> bytes:
        return build_frame(self.desc, self.payload)


@dataclass
class CqeWrite:
    """One CQE written to host memory: CQ, producer index it was written at, bus address, content."""

    cqn: int
    index: int
    addr: int
    cqe: Cqe


@dataclass(frozen=True)
class IrqEvent:
    """An interrupt event: ``kind`` "cq" (cause "count" or "timer") or "err" (cause: the ErrBit name);
    ``cqes`` is the number of CQEs written so far."""

    kind: str
    cause: str
    cqes: int


#: The BTH opcode of a service's first SEND packet (``transport << 5``): the base of its opcodes.
BTH_BASE = {ServiceType.RC: 0x00, ServiceType.UC: 0x20, ServiceType.UD: 0x60}
SEND_OPS = frozenset({WqeOpcode.SEND, WqeOpcode.SEND_WITH_IMM})
_WRITE_OPS = frozenset({WqeOpcode.RDMA_WRITE, WqeOpcode.RDMA_WRITE_WITH_IMM})
#: WQE opcodes whose last packet carries immediate data.
IMM_OPS = frozenset({WqeOpcode.SEND_WITH_IMM, WqeOpcode.RDMA_WRITE_WITH_IMM})
#: The atomic WQE opcodes and their BTH opcodes: one request packet with an AtomicETH, no payload.
ATOMIC_OPS = {WqeOpcode.ATOMIC_CMP_SWAP: Opcode.RC_COMPARE_SWAP, WqeOpcode.ATOMIC_FETCH_ADD: Opcode.RC_FETCH_ADD}
ATOMIC_LEN = 8              # an atomic WQE's length: the 8-byte operand (any other is LOC_LEN_ERR)
#: WQE opcodes that send one request packet and no payload, whatever their length.
REQUEST_OPS = frozenset({WqeOpcode.RDMA_READ, *ATOMIC_OPS})
#: The WQE opcodes each service accepts (any other one completes with LOC_QP_OP_ERR).
ALLOWED_OPS = {ServiceType.RC: SEND_OPS | _WRITE_OPS | REQUEST_OPS,
               ServiceType.UC: SEND_OPS | _WRITE_OPS, ServiceType.UD: SEND_OPS}


def bth_opcode(service: int, op: int, first: bool, last: bool) -> Opcode:
    """The BTH opcode of one packet of a ``op`` message on a ``service`` QP."""
    if op == WqeOpcode.RDMA_READ:
        return Opcode.RC_RDMA_READ_REQUEST
    if op in ATOMIC_OPS:
        return ATOMIC_OPS[op]
    low = 0x00 if op in SEND_OPS else 0x06
    imm = op in IMM_OPS
    if first and last:
        low += 5 if imm else 4
    elif first:
        low += 0
    elif last:
        low += 3 if imm else 2
    else:
        low += 1
    return Opcode(BTH_BASE[ServiceType(service)] | low)


@dataclass
class _Entry:
    """A QP in the scheduler: where its current message stands."""

    qpn: int
    wqe: Wqe | None = None
    offset: int = 0


def _valid(enum_cls, value) -> bool:
    return value in {int(e) for e in enum_cls}


class EngineModel:
    """The descriptor engine in Python. Drive it with :meth:`write_reg` / :meth:`read_reg` (or the
    :meth:`doorbell`, :meth:`set_cq_ci` shorthands) and :meth:`run`; read the results from
    :attr:`packets`, :attr:`cqes`, :attr:`irq_events`, the registers and :attr:`mem`.

    ``config`` is the engine's configuration (the RTL's parameters): the model uses the
    scheduler's QPN range (``max_qps``), the datapath width (only CAPS2 shows it) and the largest
    path MTU a context may ask for (``max_mtu``). ``settings``, if given, are written to the
    registers first."""

    def __init__(self, mem: HostMemory, config: RnicConfig = RnicConfig(), *,
                 settings: RegisterSettings | None = None):
        if not isinstance(config, RnicConfig):
            raise ValueError(f"config must be an RnicConfig, not {config!r}")
        max_qps = config.max_qps
        self.mem = mem
        self.max_qps = max_qps
        self.config = config
        self.max_mtu = config.mtu                    # a context asking for more is bad
        self.regs = RegisterFile(on_write=self._action)
        self.regs["CAPS"] = caps(max_qps)
        self.regs["CAPS2"] = caps2(config.width, self.max_mtu)
        self.packets: list[TxPacket] = []
        self.cqes: list[CqeWrite] = []
        self.irq_events: list[IrqEvent] = []
        self._sched: collections.deque[_Entry] = collections.deque()
        self._queued: dict[int, _Entry] = {}
        self._parked: dict[int, _Entry] = {}        # QPs the requester holds back (window, FENCE), mid-WQE
        self._pending_cqes = 0
        self.responder = None                        # a rnic.model.responder.Responder attaches itself
        self.requester = None                        # a rnic.model.requester.Requester attaches itself
        if settings is not None:
            for offset, value in settings.writes():
                self.write_reg(offset, value)

    # --- software interface ------------------------------------------------------------------------

    def write_reg(self, offset: int, value: int) -> None:
        self.regs.write(offset, value)
        self._refresh_status()

    def read_reg(self, offset: int) -> int:
        return self.regs.read(offset)

    def reg(self, name: str) -> int:
        return self.regs[name]

    def doorbell(self, qpn: int, pi: int) -> None:
        """Ring the send-queue doorbell of ``qpn`` (DB_QPN then DB_SQ_PI)."""
        self.write_reg(REG["DB_QPN"].offset, qpn)
        self.write_reg(REG["DB_SQ_PI"].offset, pi)

    def set_cq_ci(self, cqn: int, ci: int) -> None:
        self.write_reg(REG["CQ_DB_CQN"].offset, cqn)
        self.write_reg(REG["CQ_DB_CI"].offset, ci)

    def counters(self) -> dict[str, int]:
        return {n: self.regs[n.upper()] for n in COUNTER_NAMES}

    @property
    def idle(self) -> bool:
        return not self._sched

    def run(self, max_turns: int | None = None) -> "EngineModel":
        """Run scheduler turns until idle (or ``max_turns``); nothing happens while CONTROL.ENABLE is 0.
        On reaching idle with unreported CQEs and INT_MOD_TIMER set, the timer event fires."""
        turns = 0
        while self.regs["CONTROL"] & 1 and self._sched and (max_turns is None or turns < max_turns):
            self._turn()
            turns += 1
        if self.idle and self._pending_cqes and self.regs["INT_MOD_TIMER"]:
            self._cq_event("timer")
        self._refresh_status()
        return self

    # --- registers, errors, interrupts ------------------------------------------------------------

    def _action(self, reg, value):
        if reg.name == "DB_SQ_PI":
            self._doorbell(self.regs["DB_QPN"], value)
        elif reg.name == "CQ_DB_CI":
            self._cq_ci(self.regs["CQ_DB_CQN"], value)
        elif reg.name == "DB_RQ_PI" and self.responder is not None:
            self.responder.rq_doorbell(self.regs["DB_QPN"], value)
        elif reg.name == "REQ_TIMER" and self.requester is not None and self.reliable:
            self._timer_kick(self.regs["DB_QPN"], value & 1)

    def _timer_kick(self, qpn: int, rnr: int) -> None:
        """REQ_TIMER: QP ``qpn``'s local ACK timeout (``rnr`` 0) or the end of its RNR wait (1), now; the
        requester's own checks decide whether anything happens."""
        if qpn >= min(self.regs["QPC_SIZE"], self.max_qps):
            self._count("db_errors")
            self._error(ErrBit.DB_BAD_QPN, qpn)
        elif rnr:
            self.requester.rnr_expired(qpn)
        else:
            self.requester.timeout(qpn)
        if self.responder is not None:
            self.responder.publish()

    def _count(self, name: str, n: int = 1) -> None:
        self.regs[name.upper()] = self.regs[name.upper()] + n

    def _refresh_status(self):
        irq = bool(self.regs["INT_STATUS"] & self.regs["INT_ENABLE"])
        self.regs["STATUS"] = int(self.idle) | int(irq) << 1

    def _error(self, bit: ErrBit, qpn: int, status: int = 0) -> None:
        old = self.regs["ERR_STATUS"]
        if not old:
            self.regs["ERR_QPN"] = qpn
            self.regs["ERR_INFO"] = int(bit) | int(status) << 8
        if not old >> bit & 1:
            self.regs["ERR_STATUS"] = old | 1 << bit
            self.regs["INT_STATUS"] = self.regs["INT_STATUS"] | 1 << IntBit.ERR
            self.irq_events.append(IrqEvent("err", bit.name, len(self.cqes)))

    def _cq_event(self, cause: str) -> None:
        self._pending_cqes = 0
        self.regs["INT_STATUS"] = self.regs["INT_STATUS"] | 1 << IntBit.CQ
        self._count("irq_count")
        self.irq_events.append(IrqEvent("cq", cause, len(self.cqes)))

    # --- contexts ------------------------------------------------------------------------------------

    def _qpc_addr(self, qpn):
        return (self.regs.u64("QPC_BASE_LO") & ~0x7F) + qpn * RECORD_BYTES

    def _qpc_read(self, qpn) -> QpContext | None:
        try:
            return QpContext.unpack(self.mem.read(self._qpc_addr(qpn), RECORD_BYTES))
        except BusError:
            self._count("bus_errors")
            self._error(ErrBit.BUS_QPC, qpn)
            return None

    def _qpc_write(self, qpn, ctx: QpContext) -> None:
        self.mem.poke(self._qpc_addr(qpn), ctx.pack()[:MUTABLE_BYTES])

    def _qpc_peek(self, qpn) -> QpContext:
        return QpContext.unpack(self.mem.peek(self._qpc_addr(qpn), RECORD_BYTES))

    def _set_error(self, qpn, ctx):
        if ctx.state != QpState.ERROR:
            ctx.state = QpState.ERROR
            if self.requester is not None and self.reliable:
                self.requester.flush_unacked(qpn, ctx)
            self._qpc_write(qpn, ctx)
            if self.responder is not None:
                self.responder.flush_rq(qpn)

    @property
    def reliable(self) -> bool:
        """CONTROL.RELIABLE: RC QPs follow the requester's rules, and responses go to the requester."""
        return bool(self.regs["CONTROL"] >> 1 & 1)

    def _reliable(self, ctx) -> bool:
        """An RC QP under CONTROL.RELIABLE: completion at acknowledgement, window, FENCE, go-back-N."""
        return self.reliable and ctx.service == ServiceType.RC

    def _wake(self, qpn) -> None:
        """The requester made room (an acknowledgement, the end of an RNR wait): schedule ``qpn`` if it has
        WQEs to send."""
        ctx = self._qpc_peek(qpn)
        if ctx.sq_ci != ctx.sq_pi and not ctx.req_wait and ctx.state in (QpState.RTS, QpState.ERROR):
            self._schedule(qpn)

    def _rewound(self, qpn) -> None:
        """The requester moved ``qpn``'s send pointer: a WQE half sent is started again from the context."""
        for entry in (self._queued.get(qpn), self._parked.get(qpn)):
            if entry is not None:
                entry.wqe, entry.offset = None, 0
        self._wake(qpn)

    def _schedule(self, qpn) -> None:
        if qpn not in self._queued:
            entry = self._parked.pop(qpn, None) or _Entry(qpn)
            self._queued[qpn] = entry
            self._sched.append(entry)

    # --- doorbells -----------------------------------------------------------------------------------

    def _doorbell(self, qpn: int, pi: int) -> None:
        self._count("db_count")
        if qpn >= min(self.regs["QPC_SIZE"], self.max_qps):
            self._count("db_errors")
            self._error(ErrBit.DB_BAD_QPN, qpn)
            return
        ctx = self._qpc_read(qpn)
        if ctx is None:
            self._count("db_errors")
            return
        ahead = (pi - ctx.sq_ci) & 0xFFFF
        if ctx.log_sq_size > MAX_LOG_RING or ahead > 1 << ctx.log_sq_size:
            status = CqeStatus.SQ_OVERFLOW
        elif ctx.state not in (QpState.RTS, QpState.ERROR):
            status = CqeStatus.QP_STATE_ERR
        else:
            ctx.sq_pi = pi
            self._qpc_write(qpn, ctx)
            if ctx.sq_ci != ctx.sq_pi:
                self._schedule(qpn)
            return
        self._count("db_errors")
        self._error(ErrBit.DB_REJECTED, qpn, status)
        self._set_error(qpn, ctx)
        self._complete(qpn, ctx, Cqe(qpn=qpn, status=status, wqe_index=pi))
        if ctx.sq_ci != ctx.sq_pi:
            self._schedule(qpn)

    # --- completions ---------------------------------------------------------------------------------

    def _cqc_addr(self, cqn):
        return (self.regs.u64("CQ_BASE_LO") & ~0x1F) + cqn * CQ_RECORD_BYTES

    def _cq_read(self, cqn, qpn) -> CqContext | None:
        try:
            return CqContext.unpack(self.mem.read(self._cqc_addr(cqn), CQ_RECORD_BYTES))
        except BusError:
            self._count("bus_errors")
            self._error(ErrBit.BUS_CQ, qpn)
            return None

    def _cq_write(self, cqn, cq: CqContext, qpn) -> bool:
        try:
            self.mem.write(self._cqc_addr(cqn), cq.pack()[:8])
            return True
        except BusError:
            self._count("bus_errors")
            self._error(ErrBit.BUS_CQ, qpn)
            return False

    def _cq_ci(self, cqn: int, ci: int) -> None:
        if cqn >= self.regs["CQ_SIZE"]:
            self._error(ErrBit.CQ_DB_BAD_CQN, cqn)
            return
        cq = self._cq_read(cqn, cqn)
        if cq is not None:
            cq.ci = ci
            self._cq_write(cqn, cq, cqn)

    def _drop(self, qpn, ctx, bit: ErrBit) -> bool:
        self._count("cqe_drops")
        self._error(bit, qpn)
        self._set_error(qpn, ctx)
        return False

    def _complete(self, qpn: int, ctx: QpContext, cqe: Cqe, cqn: int | None = None) -> bool:
        """Write ``cqe`` to CQ ``cqn`` (default: the QP's send CQ); False (and the QP in ERROR) if it could
        not be written or took the CQ's last free slot."""
        cqn = ctx.cqn if cqn is None else cqn
        if cqn >= self.regs["CQ_SIZE"]:
            return self._drop(qpn, ctx, ErrBit.CQE_DROPPED)
        cq = self._cq_read(cqn, qpn)
        if cq is None:
            return self._drop(qpn, ctx, ErrBit.CQE_DROPPED)
        if cq.state != CqState.ACTIVE or not 1 <= cq.log_size <= MAX_LOG_RING:
            return self._drop(qpn, ctx, ErrBit.CQE_DROPPED)
        used = (cq.pi - cq.ci) & 0xFFFF
        if used >= cq.size:
            cq.state = CqState.ERROR
            self._cq_write(cqn, cq, qpn)
            self._error(ErrBit.CQ_OVERFLOW, qpn)
            return self._drop(qpn, ctx, ErrBit.CQE_DROPPED)
        overflow = used == cq.size - 1
        if overflow:
            cqe.status, cqe.byte_len = CqeStatus.CQ_OVERFLOW, 0
        cqe.owner = (cq.pi >> cq.log_size & 1) ^ 1
        addr = (cq.ring_base & ~0x1F) + (cq.pi % cq.size) * CQE_BYTES
        try:
            self.mem.write(addr, cqe.pack())
        except BusError:
            self._count("bus_errors")
            self._error(ErrBit.BUS_CQ, qpn)
            cq.state = CqState.ERROR
            self._cq_write(cqn, cq, qpn)
            return self._drop(qpn, ctx, ErrBit.CQE_DROPPED)
        index = cq.pi
        cq.pi = (cq.pi + 1) & 0xFFFF
        if overflow:
            cq.state = CqState.ERROR
        if not self._cq_write(cqn, cq, qpn):
            return self._drop(qpn, ctx, ErrBit.CQE_DROPPED)
        self.cqes.append(CqeWrite(cqn, index, addr, cqe))
        self._count("cqe_count")
        self._pending_cqes += 1
        if self._pending_cqes >= max(1, self.regs["INT_MOD_COUNT"]):
            self._cq_event("count")
        if overflow:
            self._error(ErrBit.CQ_OVERFLOW, qpn, CqeStatus.CQ_OVERFLOW)
            self._set_error(qpn, ctx)
            return False
        return True

    def _retire(self, entry: _Entry, ctx: QpContext, cqe: Cqe | None) -> None:
        """Complete the WQE at sq_ci: write its CQE (if any), advance sq_ci."""
        if cqe is not None:
            if cqe.status == CqeStatus.WR_FLUSH_ERR:
                self._count("flush_count")
            elif cqe.status != CqeStatus.SUCCESS:
                self._count("wqe_errors")
            self._complete(entry.qpn, ctx, cqe)
        ctx.sq_ci = (ctx.sq_ci + 1) & 0xFFFF
        self._qpc_write(entry.qpn, ctx)
        self._count("wqe_count")
        entry.wqe, entry.offset = None, 0

    def _fail(self, entry, ctx, wqe: Wqe | None, status: CqeStatus) -> None:
        self._set_error(entry.qpn, ctx)
        op = wqe.opcode if wqe is not None else 0
        wr_id = wqe.wr_id if wqe is not None else 0
        self._retire(entry, ctx, Cqe(wr_id=wr_id, qpn=entry.qpn, opcode=op, status=status, wqe_index=ctx.sq_ci))

    # --- the scheduler ---------------------------------------------------------------------------------

    def _turn(self) -> None:
        entry = self._sched.popleft()
        del self._queued[entry.qpn]
        ctx = self._qpc_read(entry.qpn)
        if ctx is None:
            return
        quota = max(1, self.regs["SCHED_QUOTA"])
        steps = 0
        flushing = ctx.state == QpState.ERROR   # a QP that moves to ERROR in its turn ends the turn
        blocked = ctx.state == QpState.RTS and self._reliable(ctx) and ctx.req_wait
        while steps < quota and ctx.sq_ci != ctx.sq_pi and not blocked:
            if ctx.state == QpState.ERROR and flushing:
                self._flush_one(entry, ctx)
                steps += 1
            elif ctx.state == QpState.RTS:
                used = self._send(entry, ctx, quota - steps)
                blocked = used == 0           # the window or a FENCE: the requester wakes it
                steps += used
            else:
                break
        if blocked:
            self._parked[entry.qpn] = entry
        if ctx.sq_ci != ctx.sq_pi and ctx.state in (QpState.RTS, QpState.ERROR) and not blocked:
            self._queued[entry.qpn] = entry
            self._sched.append(entry)

    def _sq_ud(self, ctx) -> bool:
        return ctx.service == ServiceType.UD

    def _fetch(self, entry, ctx) -> Wqe | None:
        addr = sq_slot(ctx, ctx.sq_ci)
        try:
            return Wqe.unpack(self.mem.read(addr, WQE_BYTES), ud=self._sq_ud(ctx))
        except BusError:
            self._count("bus_errors")
            self._error(ErrBit.BUS_WQE, entry.qpn, CqeStatus.WQE_FETCH_ERR)
            return None

    def _flush_one(self, entry, ctx) -> None:
        wqe = entry.wqe if entry.wqe is not None else self._fetch(entry, ctx)
        self._retire(entry, ctx, Cqe(wr_id=wqe.wr_id if wqe else 0, qpn=entry.qpn, opcode=wqe.opcode if wqe else 0,
                                     status=CqeStatus.WR_FLUSH_ERR, wqe_index=ctx.sq_ci))

    def _validate(self, ctx, wqe: Wqe) -> CqeStatus:
        if not (_valid(ServiceType, ctx.service) and _valid(PathMtu, ctx.path_mtu) and _valid(LinkMode, ctx.link_mode)
                and ctx.sgid_index < SGID_ENTRIES and ctx.path_mtu <= self.max_mtu):
            return CqeStatus.LOC_QP_OP_ERR
        inline = wqe.flags & WqeFlags.INLINE
        if wqe.opcode not in ALLOWED_OPS[ServiceType(ctx.service)] or (inline and wqe.opcode in REQUEST_OPS):
            return CqeStatus.LOC_QP_OP_ERR
        if wqe.opcode in ATOMIC_OPS and wqe.length != ATOMIC_LEN:
            return CqeStatus.LOC_LEN_ERR
        if wqe.length > MAX_MESSAGE or (inline and wqe.length > inline_capacity(self._sq_ud(ctx))):
            return CqeStatus.LOC_LEN_ERR
        if ctx.service == ServiceType.UD and wqe.length > PathMtu(ctx.path_mtu).bytes:
            return CqeStatus.LOC_LEN_ERR
        return CqeStatus.SUCCESS

    def _send(self, entry: _Entry, ctx: QpContext, budget: int) -> int:
        """Work on the WQE at sq_ci for at most ``budget`` steps; return the steps used."""
        mtu = PathMtu(ctx.path_mtu).bytes
        reliable = self._reliable(ctx)
        if entry.wqe is None:
            wqe = self._fetch(entry, ctx)
            if wqe is None:
                self._fail(entry, ctx, None, CqeStatus.WQE_FETCH_ERR)
                return 1
            status = self._validate(ctx, wqe)
            if status != CqeStatus.SUCCESS:
                self._error(ErrBit.WQE_ERROR, entry.qpn, status)
                self._fail(entry, ctx, wqe, status)
                return 1
            skip = 0
            if reliable:
                if wqe.flags & WqeFlags.FENCE and ctx.una_psn != ctx.next_psn:
                    return 0
                skip = max(0, psn_delta(ctx.una_psn, ctx.next_psn))   # packets acknowledged before a go-back
                ctx.next_psn = (ctx.next_psn + skip) & PSN_MASK
            entry.wqe, entry.offset = wqe, skip * mtu
        wqe = entry.wqe
        if wqe.opcode in REQUEST_OPS:
            if reliable and (psn_delta(ctx.next_psn, ctx.una_psn) >= WINDOW
                             or ctx.rd_pending >= ctx.max_rd_atomic):
                return 0
            psns = max(1, -(-(wqe.length - entry.offset) // mtu)) if wqe.opcode == WqeOpcode.RDMA_READ else 1
            if reliable:
                ctx.rd_pending += 1
            self._emit(entry, ctx, wqe, entry.offset == 0, True, b"", psns=psns)
            self._retire_ok(entry, ctx, wqe)
            return 1
        steps = 0
        while steps < budget:
            if reliable and psn_delta(ctx.next_psn, ctx.una_psn) >= WINDOW:
                break
            off = entry.offset
            seg = min(mtu, wqe.length - off)
            first, last = off == 0, off + seg == wqe.length
            if wqe.flags & WqeFlags.INLINE:
                payload = wqe.inline_data[off:off + seg]
            else:
                try:
                    payload = self.mem.read(wqe.local_addr + off, seg) if seg else b""
                except BusError:
                    self._count("bus_errors")
                    self._error(ErrBit.BUS_PAYLOAD, entry.qpn, CqeStatus.PAYLOAD_READ_ERR)
                    self._fail(entry, ctx, wqe, CqeStatus.PAYLOAD_READ_ERR)
                    return steps + 1
            self._emit(entry, ctx, wqe, first, last, payload)
            steps += 1
            if last:
                self._retire_ok(entry, ctx, wqe)
                break
            entry.offset = off + seg
        return steps

    def _retire_ok(self, entry, ctx, wqe: Wqe) -> None:
        cqe = None
        if wqe.flags & WqeFlags.SIGNALED and not self._reliable(ctx):
            cqe = Cqe(wr_id=wqe.wr_id, byte_len=wqe.length, qpn=entry.qpn, opcode=wqe.opcode, wqe_index=ctx.sq_ci)
        self._retire(entry, ctx, cqe)

    def _sgid(self, index: int) -> SgidEntry:
        base = f"SGID{index}_"
        gid = sum(self.regs[f"{base}GID{w}"] << (32 * w) for w in range(4))
        vlan = self.regs[f"{base}VLAN"]
        return SgidEntry(gid, self.regs[f"{base}MAC_LO"] | self.regs[f"{base}MAC_HI"] << 32,
                         vlan & 0xFFF, bool(vlan >> 31 & 1))

    def path_desc(self, ctx: QpContext, psn: int, opcode: int, **fields) -> PacketDesc:
        """The descriptor of a packet of QP ``ctx`` with ``psn`` and ``opcode``: addresses and path from the
        context and its source GID entry (RC/UC destination; ``fields`` override or add the rest)."""
        sg = self._sgid(ctx.sgid_index)
        base = dict(
            mode=ctx.link_mode, dst_mac=ctx.dst_mac, src_mac=sg.mac,
            vlan_present=int(sg.vlan_present), vlan_tci=(ctx.sl & 7) << 13 | sg.vlan_id if sg.vlan_present else 0,
            src_gid=sg.gid, dst_gid=ctx.dst_gid,
            traffic_class=ctx.traffic_class, flow_label=ctx.flow_label, hop_limit=ctx.hop_limit,
            ip_id=psn & 0xFFFF, udp_sport=ctx.udp_sport,
            vl=0, sl=ctx.sl, dlid=ctx.dlid, slid=self.regs["PORT_LID"],
            opcode=opcode, migreq=0, pkey=ctx.pkey, dest_qp=ctx.dest_qpn, psn=psn)
        base.update(fields)
        return PacketDesc(**base)

    def _emit(self, entry, ctx, wqe: Wqe, first: bool, last: bool, payload: bytes, psns: int = 1) -> None:
        ud = ctx.service == ServiceType.UD
        op = bth_opcode(ctx.service, wqe.opcode, first, last)
        has_reth = wqe.opcode == WqeOpcode.RDMA_READ or (wqe.opcode in _WRITE_OPS and first)
        off = entry.offset if wqe.opcode == WqeOpcode.RDMA_READ else 0     # a READ resumed after a go-back
        atomic = wqe.opcode in ATOMIC_OPS
        swap = wqe.compare_add if wqe.opcode == WqeOpcode.ATOMIC_FETCH_ADD else wqe.swap
        solicited = bool(wqe.flags & WqeFlags.SOLICITED) and last and (
            wqe.opcode in SEND_OPS or wqe.opcode == WqeOpcode.RDMA_WRITE_WITH_IMM)
        desc = self.path_desc(
            ctx, ctx.next_psn, op, payload_len=len(payload),
            dst_mac=wqe.dst_mac if ud else ctx.dst_mac, dst_gid=wqe.dst_gid if ud else ctx.dst_gid,
            dlid=wqe.dlid if ud else ctx.dlid, se=int(solicited),
            dest_qp=wqe.dest_qpn if ud else ctx.dest_qpn,
            ackreq=int(last or ctx.service == ServiceType.RC and ctx.next_psn % ACKREQ_EVERY == ACKREQ_EVERY - 1),
            reth_va=(wqe.remote_addr + off) & (1 << 64) - 1 if has_reth else 0, reth_rkey=wqe.rkey if has_reth else 0,
            reth_dma_len=wqe.length - off if has_reth else 0,
            atomic_va=wqe.remote_addr if atomic else 0, atomic_rkey=wqe.rkey if atomic else 0,
            atomic_swap=swap if atomic else 0,
            atomic_compare=wqe.compare_add if wqe.opcode == WqeOpcode.ATOMIC_CMP_SWAP else 0,
            imm=wqe.imm if last and wqe.opcode in IMM_OPS else 0,
            deth_qkey=(ctx.qkey if wqe.qkey >> 31 else wqe.qkey) if ud else 0, deth_src_qp=entry.qpn if ud else 0,
        )
        self.packets.append(TxPacket(entry.qpn, normalize_desc(desc), bytes(payload)))
        if self.requester is not None and self._reliable(ctx):
            self.requester.sent(entry.qpn, ctx, ctx.next_psn)
        self._count("pkt_count")
        self._count("byte_count", len(payload))
        ctx.next_psn = (ctx.next_psn + psns) & PSN_MASK
        self._qpc_write(entry.qpn, ctx)



from .driver import Driver  # noqa: E402  (the software side, re-exported where it always was)
