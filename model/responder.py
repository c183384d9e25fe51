"""Golden model of the responder: a received request frame checked against its QP, executed against host
memory, answered (IBTA rules as Linux rxe applies them; docs/receive.md has them in full).

:class:`Responder` attaches to an :class:`~rnic.model.engine.EngineModel` (one engine, one host memory,
one set of QP contexts, CQs, counters and interrupts) and takes frames with :meth:`Responder.receive`.
Each frame gets one :class:`Verdict`: executed, duplicate, NAK (with its AETH syndrome), RNR NAK, or
dropped with a reason, a stateless :class:`~rnic.model.receive.DropReason` or a :class:`RxDrop`.
Observable results, as for the transmit side:

* :attr:`Responder.responses`: ACK / NAK / READ response / atomic ACK packets, in order;
* host memory: WRITE and SEND payloads, atomics, receive CQEs, the receive half of the QP context
  (:class:`~rnic.model.recv_records.RecvContext`), the resource slots;
* :attr:`Responder.drops` and :attr:`Responder.counts`, and the stateless
  :class:`~rnic.model.receive.DropCounters` in :attr:`Responder.stateless`.

The order of the checks, the first failing one deciding: the stateless checks of
:func:`~rnic.model.receive.classify`; response opcodes (the requester's, #41); QP number; context read;
QP state (RTR, RTS, SQD, SQE respond); a valid context; the opcode's service is the QP's; P_Key; Q_Key
(UD); then PSN, opcode sequence, QP access rights and resources, lengths, memory protection, receive
queue; then execution (:mod:`rnic.model.responder_exec`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .descriptor import LinkMode, PacketDesc
from .frames import normalize_desc
from .opcodes import Opcode, Position, Transport, opcode_info
from .qpc import RECORD_BYTES, BusError, PathMtu, QpContext, QpState, ServiceType
from .receive import DropCounters, Dropped, DropReason, PortAddresses, classify
from .recv_records import RECV_MUTABLE_BYTES, RECV_QPC_BYTES, RECV_QPC_OFFSET, OpenMessage, RecvContext
from .regs import REG, RX_COUNTS, RX_DROPS, RX_STATELESS, SGID_ENTRIES, ErrBit
from .wqe import CqeStatus

__all__ = ["RNR_TIMER_US", "RxDrop", "Outcome", "Verdict", "Syndrome", "RNR_NAK", "PSN_MASK", "ResponderSettings", "Responder",
           "psn_delta", "RESPONDING_STATES", "RESPONSE_OPERATIONS", "COUNT_NAMES"]

PSN_MASK = (1 << 24) - 1
#: The IBTA RNR NAK timer: code -> microseconds (Vol 1, "RNR NAK timer field"). Linux rxe's table gives
#: code 25 as 61410; the spec (and this table) say 61440.
RNR_TIMER_US = (655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840,
                5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680,
                491520)
RNR_NAK = 0x20                      # AETH syndrome of an RNR NAK: 0x20 | the QP's min RNR timer code
#: QP states in which the responder answers (IBTA: the receive side keeps working in SQD and SQE).
RESPONDING_STATES = frozenset({QpState.RTR, QpState.RTS, QpState.SQD, QpState.SQE})
#: Operations that are responses to this engine's own requests: the requester's (issue #41).
RESPONSE_OPERATIONS = frozenset({"RDMA_READ_RESPONSE", "ACKNOWLEDGE", "ATOMIC_ACKNOWLEDGE"})
_SERVICE_OF = {Transport.RC: ServiceType.RC, Transport.UC: ServiceType.UC, Transport.UD: ServiceType.UD}
COUNT_NAMES = ("executed", "duplicates", "acks", "naks", "rnr_naks", "read_responses", "atomics",
               "recv_cqes", "bus_errors")


class RxDrop(enum.IntEnum):
    """Why the responder dropped a frame that passed the stateless checks (silently: no response)."""
    RESPONSE = 0        # a READ response, ACK or atomic ACK: for the requester (counted, not yet consumed)
    BAD_QPN = 1         # destination QP >= QPC_SIZE (or beyond the engine's max_qps)
    QPC_BUS_ERROR = 2   # the QP context read got SLVERR/DECERR
    QP_STATE = 3        # QP not in RTR, RTS, SQD or SQE
    BAD_CONTEXT = 4     # the context's service, link mode, path MTU or SGID index is not valid for this engine
    WRONG_SERVICE = 5   # the opcode is not of the QP's service
    PKEY = 6            # BTH P_Key does not match the QP's
    QKEY = 7            # UD: DETH Q_Key does not match the QP's
    OUT_OF_SEQ = 8      # RC: ahead of the expected PSN with a NAK outstanding; UC: a gap in a message
    DUP_UNKNOWN = 9     # RC duplicate READ / atomic with no resource slot that matches it
    NO_RQ_WQE = 10      # UC / UD: no receive WQE posted
    INVALID = 11        # UC / UD: a request an RC QP would answer with a NAK (sequence, length, access)


assert RX_DROPS == tuple(r.name.lower() for r in RxDrop) and RX_COUNTS == COUNT_NAMES
assert RX_STATELESS == tuple(r.name.lower() for r in DropReason)


class Outcome(enum.Enum):
    EXECUTED = "executed"
    DUPLICATE = "duplicate"
    NAK = "nak"
    RNR = "rnr"
    DROPPED = "dropped"
    RESPONSE = "response"       # a response to this engine's request, taken by the requester


class Syndrome(enum.IntEnum):
    """AETH syndromes the responder sends (IBTA Vol 1 table "AETH syndrome")."""
    ACK = 0x1F                  # ACK, credit field 0x1F ("no credit information"), as rxe sends
    PSN_SEQ_ERR = 0x60
    INVALID_REQUEST = 0x61
    REMOTE_ACCESS = 0x62
    REMOTE_OP_ERR = 0x63


@dataclass(frozen=True)
class Verdict:
    """What happened to one received frame."""

    outcome: Outcome
    qpn: int | None = None
    psn: int | None = None
    reason: DropReason | RxDrop | object | None = None     # or a rnic.model.requester.RespDrop
    syndrome: int | None = None
    detail: str = ""

    def __str__(self) -> str:
        if self.outcome is Outcome.DROPPED:
            text = f"dropped: {self.reason.name}"
        elif self.outcome is Outcome.NAK:
            text = f"NAK 0x{self.syndrome:02x} ({Syndrome(self.syndrome).name})"
        elif self.outcome is Outcome.RNR:
            text = f"RNR NAK 0x{self.syndrome:02x}"
        else:
            text = self.outcome.value
        return f"{text}: {self.detail}" if self.detail else text


@dataclass(frozen=True)
class ResponderSettings:
    """The receive path's configuration: the MR table, the resource table and the port's addresses."""

    mr_base: int = 0
    mr_size: int = 0
    res_base: int = 0
    port: PortAddresses = PortAddresses()
    link: str = "ethernet"

    def writes(self, sgids) -> list[tuple[int, int]]:
        """The register writes (offset, value) that configure these settings on the engine: MR_BASE,
        MR_SIZE, RES_BASE, PORT_MAC, PORT_MODE and PORT_GIDS, the entries of ``sgids`` (the SGID table's
        GIDs, in entry order) that are the port's GIDs. The port's LID is PORT_LID, the engine's."""
        gids = list(sgids)
        missing = set(self.port.gids) - set(gids)
        if missing:
            raise ValueError(f"port GIDs {sorted(map(hex, missing))} are not in the SGID table")
        values = {"MR_BASE_LO": self.mr_base & 0xFFFF_FFFF, "MR_BASE_HI": self.mr_base >> 32, "MR_SIZE": self.mr_size,
                  "RES_BASE_LO": self.res_base & 0xFFFF_FFFF, "RES_BASE_HI": self.res_base >> 32,
                  "PORT_MAC_LO": self.port.mac & 0xFFFF_FFFF, "PORT_MAC_HI": self.port.mac >> 32,
                  "PORT_MODE": int(self.link == "ib"),
                  "PORT_GIDS": sum(1 << i for i, g in enumerate(gids) if g in self.port.gids)}
        return [(REG[name].offset, v) for name, v in values.items()]


_REMOTE_STATUS = {Syndrome.INVALID_REQUEST: CqeStatus.REM_INV_REQ_ERR, Syndrome.REMOTE_ACCESS: CqeStatus.REM_ACCESS_ERR,
                  Syndrome.REMOTE_OP_ERR: CqeStatus.REM_OP_ERR}


def psn_delta(psn: int, expected: int) -> int:
    """``psn - expected`` in 24-bit arithmetic, as -2**23 .. 2**23 - 1 (negative: a duplicate)."""
    d = (psn - expected) & PSN_MASK
    return d - (1 << 24) if d >= 1 << 23 else d


class Stop(Exception):
    """Ends the processing of one frame with its verdict."""

    def __init__(self, verdict: Verdict):
        super().__init__(str(verdict))
        self.verdict = verdict


@dataclass
class Packet:
    """One request being processed: the frame, its parse, its QP's context (both halves)."""

    frame: bytes
    mode: LinkMode
    desc: PacketDesc
    payload: bytes
    qpn: int = 0
    ctx: QpContext | None = None
    rx: RecvContext | None = None
    wqe_taken: bool = False          # this packet uses the receive WQE at rq_ci (a SEND, a WRITE with immediate)
    wqe: object = None               # that WQE (a RecvWqe) once read

    @property
    def info(self):
        return opcode_info(self.desc.opcode)

    @property
    def psn(self) -> int:
        return self.desc.psn

    @property
    def rc(self) -> bool:
        return self.ctx.service == ServiceType.RC

    @property
    def mtu(self) -> int:
        return PathMtu(self.ctx.path_mtu).bytes


class Responder:
    """The responder in Python. ``receive(frame, fcs_bad)`` processes one frame completely;
    ``rq_doorbell(qpn, pi)`` posts receive WQEs (as the DB_RQ_PI register write will)."""

    def __init__(self, engine, settings: ResponderSettings = ResponderSettings()):
        from .responder_exec import Executor
        self.engine = engine
        self.mem = engine.mem
        self.settings = settings
        engine.responder = self
        self.stateless = DropCounters()
        self.drops = {r: 0 for r in RxDrop}
        self.counts = {n: 0 for n in COUNT_NAMES}
        self.responses: list = []
        self.verdicts: list[Verdict] = []
        self.exec = Executor(self)

    # --- software interface ------------------------------------------------------------------------

    def receive(self, frame: bytes, fcs_bad: bool = False) -> Verdict:
        """Process one frame (no FCS; ``fcs_bad`` is the MAC's flag) and return its verdict."""
        result = self.stateless.count(classify(frame, fcs_bad=fcs_bad, port=self.settings.port,
                                               link=self.settings.link))
        if isinstance(result, Dropped):
            verdict = Verdict(Outcome.DROPPED, reason=result.reason, detail=result.detail)
        else:
            p = Packet(bytes(frame), result.mode, result.desc, result.payload)
            try:
                verdict = self._process(p)
            except Stop as stop:
                verdict = stop.verdict
            if verdict.outcome is Outcome.DROPPED and isinstance(verdict.reason, RxDrop):
                self.drops[verdict.reason] += 1
        self.verdicts.append(verdict)
        self.publish()
        return verdict

    def rq_doorbell(self, qpn: int, pi: int) -> None:
        """A receive-queue doorbell: ``pi`` is the new producer index of QP ``qpn``'s RQ."""
        self.exec.rq_doorbell(qpn, pi)
        self.publish()

    def publish(self) -> None:
        """Copy the counters into the engine's registers (``RX_*``, ``RESP_*``), as the RTL shows them."""
        regs = self.engine.regs
        regs["RX_ACCEPTED"] = self.stateless.received
        for r in DropReason:
            regs[f"RX_{r.name}"] = self.stateless.dropped[r]
        for r in RxDrop:
            regs[f"RESP_DROP_{r.name}"] = self.drops[r]
        for n in COUNT_NAMES:
            regs[f"RESP_{n.upper()}"] = self.counts[n]
        req = self.engine.requester
        if req is not None:
            for n, v in req.counts.items():
                regs[f"REQ_{n.upper()}"] = v
            for r, v in req.drops.items():
                regs[f"REQ_DROP_{r.name}"] = v

    def flush_rq(self, qpn: int) -> None:
        """Complete every posted receive WQE of ``qpn`` (a QP in ERROR) with WR_FLUSH_ERR."""
        self.exec.flush_rq(qpn)

    # --- context access -----------------------------------------------------------------------------

    def qpc_addr(self, qpn: int) -> int:
        return self.engine._qpc_addr(qpn)

    def read_qp(self, qpn: int) -> tuple[QpContext, RecvContext] | None:
        """Both halves of QP ``qpn``'s context (one 128-byte read); None on a bus error (counted)."""
        try:
            raw = self.mem.read(self.qpc_addr(qpn), RECORD_BYTES)
        except BusError:
            self.count("bus_errors")
            self.engine._count("bus_errors")
            self.engine._error(ErrBit.BUS_QPC, qpn)
            return None
        return QpContext.unpack(raw), RecvContext.unpack(raw[RECV_QPC_OFFSET:])

    def peek_rx(self, qpn: int) -> RecvContext:
        """The receive half as host memory holds it now (after a flush changed it)."""
        return RecvContext.unpack(self.mem.peek(self.qpc_addr(qpn) + RECV_QPC_OFFSET, RECV_QPC_BYTES))

    def write_rx(self, qpn: int, rx: RecvContext) -> None:
        """Write back the engine-owned receive bytes (record bytes 80..107)."""
        self.mem.poke(self.qpc_addr(qpn) + RECV_QPC_OFFSET, rx.pack()[:RECV_MUTABLE_BYTES])

    def count(self, name: str, n: int = 1) -> None:
        self.counts[name] += n

    # --- verdicts -----------------------------------------------------------------------------------

    def drop(self, p: Packet, reason: RxDrop, detail: str = "") -> Stop:
        return Stop(Verdict(Outcome.DROPPED, p.qpn, p.psn, reason, detail=detail))

    def respond(self, p: Packet, opcode: Opcode, psn: int, payload: bytes = b"", syndrome: int | None = None,
                orig: int = 0) -> None:
        """Queue one response packet of ``p``'s QP (AETH with the QP's current MSN where the opcode has one)."""
        from .engine import TxPacket
        desc = self.engine.path_desc(p.ctx, psn, opcode, payload_len=len(payload),
                                     aeth_syndrome=Syndrome.ACK if syndrome is None else syndrome,
                                     aeth_msn=p.rx.msn, atomic_orig=orig)
        self.responses.append(TxPacket(p.qpn, normalize_desc(desc), bytes(payload)))
        self.engine._count("pkt_count")
        self.engine._count("byte_count", len(payload))

    def ack(self, p: Packet, psn: int, syndrome: int = Syndrome.ACK) -> None:
        self.respond(p, Opcode.RC_ACKNOWLEDGE, psn, syndrome=syndrome)
        self.count("acks" if syndrome == Syndrome.ACK else "rnr_naks" if syndrome >> 5 == 1 else "naks")

    def nak(self, p: Packet, syndrome: Syndrome, detail: str, status=None) -> Stop:
        """RC: NAK ``syndrome`` at the packet's PSN; every NAK but a PSN sequence error also moves the QP to
        ERROR, completing the receive WQE in use with ``status`` (default: the remote error status of the
        syndrome). UC / UD: the packet is dropped (INVALID); a local fault (``status`` given) still
        completes the WQE in error and ends the QP, anything else drops the rest of a UC message."""
        if p.rc:
            if syndrome != Syndrome.PSN_SEQ_ERR:
                self.exec.fail_qp(p, _REMOTE_STATUS[syndrome] if status is None else status)
            self.ack(p, p.psn, syndrome)
            return Stop(Verdict(Outcome.NAK, p.qpn, p.psn, syndrome=syndrome, detail=detail))
        if status is not None:
            self.exec.fail_qp(p, status)
        elif p.ctx.service == ServiceType.UC:
            p.rx.uc_drop, p.rx.open = 1, OpenMessage.NONE
            self.write_rx(p.qpn, p.rx)
        return self.drop(p, RxDrop.INVALID, detail)

    # --- the checks ---------------------------------------------------------------------------------

    def _process(self, p: Packet) -> Verdict:
        info = p.info
        p.qpn = p.desc.dest_qp
        response = info.operation in RESPONSE_OPERATIONS
        if response and (self.engine.requester is None or not self.engine.reliable):
            raise self.drop(p, RxDrop.RESPONSE, f"{info.name} is for the requester")
        limit = min(self.engine.regs["QPC_SIZE"], self.engine.max_qps)
        if p.qpn >= limit:
            raise self.drop(p, RxDrop.BAD_QPN, f"QP {p.qpn} >= {limit}")
        both = self.read_qp(p.qpn)
        if both is None:
            raise self.drop(p, RxDrop.QPC_BUS_ERROR)
        p.ctx, p.rx = both
        ctx = p.ctx
        if response:
            if not _pkey_match(p.desc.pkey, ctx.pkey):
                raise self.drop(p, RxDrop.PKEY, f"P_Key 0x{p.desc.pkey:04x}, QP has 0x{ctx.pkey:04x}")
            why = self.engine.requester.response(p.qpn, ctx, p.desc, p.payload)
            if why is not None:
                return Verdict(Outcome.DROPPED, p.qpn, p.psn, why, detail=f"{info.name}: {why.name}")
            return Verdict(Outcome.RESPONSE, p.qpn, p.psn, detail=info.name)
        if ctx.state not in RESPONDING_STATES:
            raise self.drop(p, RxDrop.QP_STATE, f"QP {p.qpn} in state {ctx.state}")
        if not self._context_ok(ctx):
            raise self.drop(p, RxDrop.BAD_CONTEXT)
        if _SERVICE_OF[info.transport] != ctx.service:
            raise self.drop(p, RxDrop.WRONG_SERVICE, f"{info.name} on a {ServiceType(ctx.service).name} QP")
        if not _pkey_match(p.desc.pkey, ctx.pkey):
            raise self.drop(p, RxDrop.PKEY, f"P_Key 0x{p.desc.pkey:04x}, QP has 0x{ctx.pkey:04x}")
        if ctx.service == ServiceType.UD:
            if p.desc.deth_qkey != ctx.qkey:
                raise self.drop(p, RxDrop.QKEY, f"Q_Key 0x{p.desc.deth_qkey:08x}, QP has 0x{ctx.qkey:08x}")
            return self.exec.ud_send(p)
        self._check_psn(p)
        self._check_sequence(p)
        return self.exec.execute(p)

    def _context_ok(self, ctx: QpContext) -> bool:
        try:
            ServiceType(ctx.service), LinkMode(ctx.link_mode), PathMtu(ctx.path_mtu)
        except ValueError:
            return False
        return ctx.path_mtu <= self.engine.max_mtu and ctx.sgid_index < SGID_ENTRIES

    def _check_psn(self, p: Packet) -> None:
        """RC: in order goes on; a duplicate is answered (:meth:`Executor.duplicate`); ahead: one NAK PSN
        sequence error, then silence until the gap fills. UC: a gap drops the rest of the message; a FIRST
        or ONLY packet always starts afresh at its own PSN."""
        rx, delta = p.rx, psn_delta(p.psn, p.ctx.epsn)
        if p.rc:
            if delta > 0:
                if rx.nak_sent:
                    raise self.drop(p, RxDrop.OUT_OF_SEQ, f"PSN {p.psn} ahead of {p.ctx.epsn}, NAK outstanding")
                rx.nak_sent = 1
                self.write_rx(p.qpn, rx)
                self.ack(p, p.ctx.epsn, Syndrome.PSN_SEQ_ERR)
                raise Stop(Verdict(Outcome.NAK, p.qpn, p.psn, syndrome=Syndrome.PSN_SEQ_ERR,
                                   detail=f"expected PSN {p.ctx.epsn}"))
            if delta < 0:
                raise Stop(self.exec.duplicate(p))
            rx.nak_sent = 0
            return
        start = p.info.position in (Position.FIRST, Position.ONLY)
        if delta != 0 or rx.uc_drop:
            if not start:
                rx.uc_drop = 1
                self.write_rx(p.qpn, rx)
                raise self.drop(p, RxDrop.OUT_OF_SEQ, f"UC PSN {p.psn}, expected {p.ctx.epsn}")
            rx.uc_drop, rx.open = 0, OpenMessage.NONE
            p.ctx.epsn = p.psn

    def _check_sequence(self, p: Packet) -> None:
        """FIRST / MIDDLE / LAST: a MIDDLE or LAST needs an open message of its operation; a FIRST or ONLY
        (and READ, atomics) needs none. UC: a new message inside an open one abandons the open one."""
        info, rx = p.info, p.rx
        position = info.position
        start = position in (Position.FIRST, Position.ONLY, None)
        if rx.open == OpenMessage.NONE:
            ok = start
        else:
            kind = OpenMessage.SEND if info.operation == "SEND" else OpenMessage.WRITE
            ok = position in (Position.MIDDLE, Position.LAST) and rx.open == kind and info.operation in (
                "SEND", "RDMA_WRITE")
            if not ok and start and not p.rc:
                rx.open, ok = OpenMessage.NONE, True
        if not ok:
            what = f"{info.name} with {OpenMessage(rx.open).name.lower()} message open"
            raise self.nak(p, Syndrome.INVALID_REQUEST, what)


def _pkey_match(a: int, b: int) -> bool:
    """IBTA P_Key match: the low 15 bits equal and at least one of the two a full member (bit 15)."""
    return (a & 0x7FFF) == (b & 0x7FFF) and bool((a | b) & 0x8000)

