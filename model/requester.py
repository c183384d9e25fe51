"""Golden model of the requester's reliability (RC): responses in, completions at acknowledgement time,
READ responses and atomic results into local memory, go-back-N retransmission, RNR waits, retry limits.
IBTA Vol 1 ch. 9.7 as Linux rxe (rxe_comp.c) applies it; docs/reliability.md has the rules in full.

:class:`Requester` attaches to an :class:`~rnic.model.engine.EngineModel` that has a
:class:`~rnic.model.responder.Responder`: the responder parses every frame and hands the responses
(ACKNOWLEDGE, READ_RESPONSE_*, ATOMIC_ACKNOWLEDGE) of a QP it found to :meth:`Requester.response`. With a
requester attached the engine changes for RC QPs only:

* a WQE completes when it is acknowledged, not when it is sent (UC and UD complete when sent);
* at most :data:`~rnic.model.engine.WINDOW` (128) PSNs are unacknowledged: a request whose first PSN is
  past ``una_psn + 127`` waits; so does a FENCE WQE until every earlier PSN is acknowledged, and a READ or
  atomic while ``rd_pending`` is at the QP's ``max_rd_atomic``;
* a WQE started with ``next_psn`` behind ``una_psn`` (a retransmission inside a partly acknowledged
  message, or a READ partly answered) skips the acknowledged packets: zero copy, nothing kept on chip.

The state: ``una_psn``, ``req_wait`` and ``rd_pending`` in the QP context (the transmit side reads them),
the rest in the QP's :class:`~rnic.model.req_records.ReqContext` at ``REQ_BASE + 32 * qpn``. Time is not
modelled: the
harness calls :meth:`Requester.timeout` when a QP's local ACK timer would expire and
:meth:`Requester.rnr_expired` when its RNR wait ends (:data:`rnic.model.responder.RNR_TIMER_US`).
"""

from __future__ import annotations

import dataclasses
import enum

from .engine import ATOMIC_OPS, PSN_MASK, REQUEST_OPS, sq_slot
from .opcodes import Position, opcode_info
from .qpc import BusError, PathMtu, QpContext, QpState, ServiceType
from .responder import psn_delta
from .regs import RX_REQ_COUNTS, RX_REQ_DROPS, ErrBit
from .req_records import REQ_BYTES, MUTABLE_BYTES, ReqContext
from .timers import TimerKind, TimerTable, ack_timeout_ticks, rnr_ticks
from .wqe import WQE_BYTES, Cqe, CqeStatus, Wqe, WqeFlags, WqeOpcode

__all__ = ["RespDrop", "RespKind", "Step", "REQ_COUNTS", "Requester", "psn_span", "sent_end", "classify", "walk_step"]

REQ_COUNTS = ("acks", "read_responses", "atomic_acks", "naks_seq", "naks_inv", "naks_access", "naks_op",
              "rnr_naks", "implied_naks", "retransmits", "timeouts", "rnr_retries", "completions")

_NAK_STATUS = {0x61: CqeStatus.REM_INV_REQ_ERR, 0x62: CqeStatus.REM_ACCESS_ERR, 0x63: CqeStatus.REM_OP_ERR}
_NAK_COUNT = {0x60: "naks_seq", 0x61: "naks_inv", 0x62: "naks_access", 0x63: "naks_op"}


class RespDrop(enum.IntEnum):
    """Why the requester ignored a response (silently: nothing changes)."""
    QP_STATE = 0        # the QP is not RTS / SQD / SQE (RESET, INIT, RTR, ERROR)
    NOT_RC = 1          # a response for a UC or UD QP
    STALE = 2           # PSN behind the oldest unacknowledged one: a duplicate or late response
    GHOST = 3           # PSN at or past the next PSN to send: answers nothing sent
    AHEAD = 4           # a READ response / atomic ACK past the one expected: a retry from una_psn started
    RETRYING = 5        # a sequence NAK while the retry it asks for is already under way


assert RX_REQ_COUNTS == REQ_COUNTS and RX_REQ_DROPS == tuple(r.name.lower() for r in RespDrop)


def psn_span(opcode: int, length: int, mtu: int) -> int:
    """The PSNs a WQE's request uses: one per packet, a READ one per response packet, an atomic one."""
    if opcode in ATOMIC_OPS:
        return 1
    return max(1, -(-length // mtu))


class RespKind(enum.IntEnum):
    """What a response that passed :func:`classify` asks for."""
    ACK = 0             # PSNs up to the response's done
    RNR = 1             # RNR NAK: wait, then send again from its PSN
    NAK_SEQ = 2         # NAK 0x60: go back to its PSN
    NAK_FATAL = 3       # NAK 0x61 / 0x62 / 0x63 (or a reserved NAK code: as 0x63): the WQE fails
    RESERVED = 4        # an AETH syndrome of no known kind (bits 7:5 not 0, 1 or 3): a bad response, the WQE fails
    READ_RESPONSE = 5
    ATOMIC_ACK = 6


_LIVE = (QpState.RTS, QpState.SQD, QpState.SQE)


def sent_end(next_psn: int, high_psn: int) -> int:
    """The PSN after the last one sent: ``next_psn``, or ``high_psn`` after a go-back."""
    return next_psn if psn_delta(next_psn, high_psn) >= 0 else high_psn


def classify(state: int, service: int, una_psn: int, next_psn: int, high_psn: int, opcode: int, psn: int,
             syndrome: int) -> RespDrop | RespKind:
    """The first decision on a response of an RC QP: dropped (and why) or what it asks for."""
    if state not in _LIVE:
        return RespDrop.QP_STATE
    if service != ServiceType.RC:
        return RespDrop.NOT_RC
    if psn_delta(psn, una_psn) < 0:
        return RespDrop.STALE
    if psn_delta(psn, sent_end(next_psn, high_psn)) >= 0:
        return RespDrop.GHOST
    operation = opcode_info(opcode).operation
    if operation == "RDMA_READ_RESPONSE":
        return RespKind.READ_RESPONSE
    if operation == "ATOMIC_ACKNOWLEDGE":
        return RespKind.ATOMIC_ACK
    kind = syndrome >> 5                    # bits 7:5, as rxe reads them: bit 7 set is no known kind
    if kind == 3:
        return RespKind.NAK_SEQ if syndrome & 0x1F == 0 else RespKind.NAK_FATAL
    return {0: RespKind.ACK, 1: RespKind.RNR}.get(kind, RespKind.RESERVED)


class Step(enum.IntEnum):
    """One step of the acknowledgement walk over the send queue, for the WQE at ``sq_acked``."""
    COMPLETE = 0        # its PSNs all lie before the bound: it completes
    IMPLIED = 1         # a READ or atomic whose PSNs all lie before the bound: its response was lost
    STOP = 2            # not all its PSNs lie before the bound


def walk_step(opcode: int, length: int, mtu: int, wqe_psn: int, bound: int) -> Step:
    """The walk's decision for a WQE whose first PSN is ``wqe_psn`` when everything before ``bound`` is
    acknowledged (its PSN span: :func:`psn_span`)."""
    if psn_delta(bound, (wqe_psn + psn_span(opcode, length, mtu)) & PSN_MASK) < 0:
        return Step.STOP
    return Step.IMPLIED if opcode in REQUEST_OPS else Step.COMPLETE


class _Fatal(Exception):
    """A response that ends the QP: the WQE it answers completes with ``status``."""

    def __init__(self, status: CqeStatus):
        self.status = status


class Requester:
    """The requester's half of an engine: :meth:`response` for each response frame of an RC QP."""

    def __init__(self, engine):
        self.engine = engine
        self.mem = engine.mem
        engine.requester = self
        self.counts = {n: 0 for n in REQ_COUNTS}
        self.drops = {r: 0 for r in RespDrop}
        self.timers = TimerTable()      # armed as the RTL arms its table; untimed here (now = 0)
        self.timer_log: list[tuple[int, bool, TimerKind, int]] = []    # (qpn, arm, kind, delay), in order

    # --- records --------------------------------------------------------------------------------------

    def req_addr(self, qpn: int) -> int:
        return (self.engine.regs.u64("REQ_BASE_LO") & ~0x1F) + qpn * REQ_BYTES

    def read_req(self, qpn: int) -> ReqContext:
        return ReqContext.unpack(self.mem.peek(self.req_addr(qpn), REQ_BYTES))

    def write_req(self, qpn: int, req: ReqContext) -> None:
        self.mem.poke(self.req_addr(qpn), req.pack()[:MUTABLE_BYTES])

    def _wqe(self, ctx: QpContext, index: int) -> Wqe:
        return Wqe.unpack(self.mem.peek(sq_slot(ctx, index), WQE_BYTES), ud=False)

    @staticmethod
    def _outstanding(ctx: QpContext, req: ReqContext) -> bool:
        """The QP has sent PSNs not yet acknowledged (its local ACK timer runs)."""
        return (ctx.service == ServiceType.RC and ctx.state == QpState.RTS
                and psn_delta(sent_end(ctx.next_psn, req.high_psn), ctx.una_psn) > 0)

    def rd_pending(self, qpn: int, ctx: QpContext) -> int:
        """READs and atomics sent and not yet completed, counted from the send queue: what the context's
        ``rd_pending`` must equal (the engine sends another only below ``max_rd_atomic``: the peer
        remembers that many for duplicates). The engine adds one as it sends one; the requester takes
        one off as it completes one and clears it when the send pointer moves to ``sq_acked``."""
        req, n = self.read_req(qpn), 0
        index = req.sq_acked
        while index != ctx.sq_ci:
            n += self._wqe(ctx, index).opcode in REQUEST_OPS
            index = (index + 1) & 0xFFFF
        return n

    # --- responses ------------------------------------------------------------------------------------

    def response(self, qpn: int, ctx: QpContext, desc, payload: bytes) -> RespDrop | None:
        """One response of QP ``qpn`` (its context as read): None if it was used, else why not."""
        before = dataclasses.replace(ctx)
        try:
            return self._response(qpn, ctx, desc, payload)
        finally:
            self._timer_after(qpn, before, ctx)

    def _response(self, qpn: int, ctx: QpContext, desc, payload: bytes) -> RespDrop | None:
        req = self.read_req(qpn)
        psn = desc.psn
        kind = classify(ctx.state, ctx.service, ctx.una_psn, ctx.next_psn, req.high_psn, desc.opcode, psn,
                        desc.aeth_syndrome)
        if isinstance(kind, RespDrop):
            return self._drop(kind)
        mtu = PathMtu(ctx.path_mtu).bytes
        try:
            if kind not in (RespKind.READ_RESPONSE, RespKind.ATOMIC_ACK):
                return self._aeth(qpn, ctx, req, mtu, psn, kind, desc.aeth_syndrome)
            # a READ response or an atomic ACK implies the ACK of every earlier PSN
            if not self._complete_before(qpn, ctx, req, mtu, psn):
                return None
            wqe = self._wqe(ctx, req.sq_acked)
            if psn != ctx.una_psn:
                self._go_back(qpn, ctx, req)
                return self._drop(RespDrop.AHEAD)
            if kind == RespKind.READ_RESPONSE:
                self._read_response(qpn, ctx, req, mtu, wqe, opcode_info(desc.opcode).position, payload)
            else:
                self._atomic_ack(qpn, ctx, req, wqe, desc.atomic_orig)
        except _Fatal as fatal:
            self._fail(qpn, ctx, req, fatal.status)
        return None

    def _drop(self, reason: RespDrop) -> RespDrop:
        self.drops[reason] += 1
        return reason

    def _aeth(self, qpn, ctx, req, mtu, psn, kind: RespKind, syndrome: int) -> RespDrop | None:
        if kind == RespKind.ACK:                                        # PSNs up to psn done
            self.counts["acks"] += 1
            if self._complete_before(qpn, ctx, req, mtu, (psn + 1) & PSN_MASK) and psn_delta(psn, ctx.una_psn) >= 0:
                wqe = self._wqe(ctx, req.sq_acked)                     # psn is inside this WQE's PSNs
                if wqe.opcode in REQUEST_OPS:
                    self.counts["implied_naks"] += 1
                    self._go_back(qpn, ctx, req)
                else:
                    self._advance(qpn, ctx, req, (psn + 1) & PSN_MASK)
            return None
        if not self._complete_before(qpn, ctx, req, mtu, psn):         # every NAK acknowledges before it
            return None
        if kind == RespKind.RESERVED:
            raise _Fatal(CqeStatus.BAD_RESP_ERR)
        if kind == RespKind.RNR:
            self.counts["rnr_naks"] += 1
            self._advance(qpn, ctx, req, psn)
            if ctx.rnr_limit != 7:
                if ctx.rnr_retry_cnt == 0:
                    raise _Fatal(CqeStatus.RNR_RETRY_EXC_ERR)
                ctx.rnr_retry_cnt -= 1
            self.counts["rnr_retries"] += 1
            req.rnr_code = syndrome & 0x1F
            ctx.req_wait = 1
            self._rewind(qpn, ctx, req)
            return None
        code = syndrome & 0x1F | 0x60
        self.counts[_NAK_COUNT.get(code, "naks_op")] += 1
        if kind == RespKind.NAK_SEQ:
            self._advance(qpn, ctx, req, psn)
            if not self._go_back(qpn, ctx, req):
                return self._drop(RespDrop.RETRYING)
            return None
        raise _Fatal(_NAK_STATUS.get(code, CqeStatus.REM_OP_ERR))

    def _complete_before(self, qpn, ctx, req, mtu, psn) -> bool:
        """Complete every WQE whose PSNs all lie before ``psn``; False if one is a READ or atomic, whose
        responses were then lost (an implied NAK: go back to it)."""
        while req.sq_acked != ctx.sq_pi:
            wqe = self._wqe(ctx, req.sq_acked)
            step = walk_step(wqe.opcode, wqe.length, mtu, req.wqe_psn, psn)
            if step == Step.STOP:
                return True
            if step == Step.IMPLIED:
                self.counts["implied_naks"] += 1
                self._go_back(qpn, ctx, req)
                return False
            self._retire(qpn, ctx, req, wqe, psn_span(wqe.opcode, wqe.length, mtu))
        return True

    def _read_response(self, qpn, ctx, req, mtu, wqe, position, payload) -> None:
        if wqe.opcode != WqeOpcode.RDMA_READ:
            raise _Fatal(CqeStatus.BAD_RESP_ERR)
        span = psn_span(wqe.opcode, wqe.length, mtu)
        k = psn_delta(ctx.una_psn, req.wqe_psn)
        last = k == span - 1
        want = min(mtu, wqe.length - k * mtu)
        ends = position in (Position.LAST, Position.ONLY)
        if ends != last or len(payload) != want:
            raise _Fatal(CqeStatus.BAD_RESP_ERR)
        self.counts["read_responses"] += 1
        try:
            if payload:
                self.mem.write(wqe.local_addr + k * mtu, payload)
        except BusError:
            self._bus_error(qpn)
            raise _Fatal(CqeStatus.PAYLOAD_WRITE_ERR)
        if last:
            self._retire(qpn, ctx, req, wqe, span)
        else:
            self._advance(qpn, ctx, req, (ctx.una_psn + 1) & PSN_MASK)

    def _atomic_ack(self, qpn, ctx, req, wqe, orig: int) -> None:
        if wqe.opcode not in ATOMIC_OPS:
            raise _Fatal(CqeStatus.BAD_RESP_ERR)
        self.counts["atomic_acks"] += 1
        try:
            self.mem.write(wqe.local_addr, orig.to_bytes(8, "little"))
        except BusError:
            self._bus_error(qpn)
            raise _Fatal(CqeStatus.PAYLOAD_WRITE_ERR)
        self._retire(qpn, ctx, req, wqe, 1)

    def _bus_error(self, qpn) -> None:
        self.engine._count("bus_errors")
        self.engine._error(ErrBit.BUS_PAYLOAD, qpn, CqeStatus.PAYLOAD_WRITE_ERR)

    # --- progress, completion, retry ---------------------------------------------------------------------

    def _advance(self, qpn, ctx, req, una: int) -> None:
        """``una_psn`` moves on to ``una``: progress reloads the retry counts and may open the window. A
        send pointer left behind the oldest unacknowledged WQE (acknowledgements of packets sent before
        a go-back) moves up to it."""
        if una != ctx.una_psn:
            ctx.una_psn = una
            ctx.retry_cnt, ctx.rnr_retry_cnt = ctx.retry_limit, ctx.rnr_limit
            req.retrying = 0
            if psn_delta(una, req.high_psn) > 0:
                req.high_psn = una
        self._pull_forward(qpn, ctx, req)
        self.engine._qpc_write(qpn, ctx)
        self.write_req(qpn, req)
        self.engine._wake(qpn)

    def _pull_forward(self, qpn, ctx, req) -> None:
        ahead = (req.sq_acked - ctx.sq_ci) & 0xFFFF
        if ahead and ahead <= (ctx.sq_pi - ctx.sq_ci) & 0xFFFF:
            ctx.sq_ci, ctx.next_psn, ctx.rd_pending = req.sq_acked, req.wqe_psn, 0
            self.engine._rewound(qpn)

    def _retire(self, qpn, ctx, req, wqe: Wqe, span: int) -> None:
        """The WQE at ``sq_acked`` completed successfully (a CQE if it is signaled)."""
        if wqe.flags & WqeFlags.SIGNALED:
            self.engine._complete(qpn, ctx, Cqe(wr_id=wqe.wr_id, byte_len=wqe.length, qpn=qpn, opcode=wqe.opcode,
                                                wqe_index=req.sq_acked))
        self.counts["completions"] += 1
        if wqe.opcode in REQUEST_OPS:
            ctx.rd_pending -= 1
        req.sq_acked = (req.sq_acked + 1) & 0xFFFF
        req.wqe_psn = (req.wqe_psn + span) & PSN_MASK
        self._advance(qpn, ctx, req, req.wqe_psn)

    def _go_back(self, qpn, ctx, req) -> bool:
        """Retransmit from ``una_psn`` (a sequence NAK, an implied NAK, a READ response or atomic ACK past
        the one expected); False if a retry is already under way: one started and ``una_psn`` has not moved
        since (the responses still in flight from before it would each start another and use up the
        retries: rxe's ``started_retry``), or nothing was sent past ``una_psn``. Uses up one retry."""
        if psn_delta(ctx.next_psn, ctx.una_psn) <= 0 or req.retrying:
            return False
        if ctx.retry_cnt == 0:
            raise _Fatal(CqeStatus.RETRY_EXC_ERR)
        ctx.retry_cnt -= 1
        self.counts["retransmits"] += 1
        req.retrying = 1
        self._rewind(qpn, ctx, req)
        return True

    def _rewind(self, qpn, ctx, req) -> None:
        """The send pointer goes back to the oldest unacknowledged WQE (the engine skips what is acked)."""
        req.high_psn = sent_end(ctx.next_psn, req.high_psn)
        ctx.next_psn, ctx.sq_ci, ctx.rd_pending = req.wqe_psn, req.sq_acked, 0
        self.engine._qpc_write(qpn, ctx)
        self.write_req(qpn, req)
        self.engine._rewound(qpn)

    def _fail(self, qpn, ctx, req, status: CqeStatus) -> None:
        """The WQE at ``sq_acked`` completes with ``status``; the QP goes to ERROR and every later WQE is
        flushed (those sent but unacknowledged first, then the engine's)."""
        wqe = self._wqe(ctx, req.sq_acked)
        if wqe.opcode in REQUEST_OPS and ctx.rd_pending:
            ctx.rd_pending -= 1
        self.engine._count("wqe_errors")
        self.engine._complete(qpn, ctx, Cqe(wr_id=wqe.wr_id, qpn=qpn, opcode=wqe.opcode, status=status,
                                            wqe_index=req.sq_acked))
        req.sq_acked = (req.sq_acked + 1) & 0xFFFF
        self._pull_forward(qpn, ctx, req)
        self.write_req(qpn, req)
        self.engine._set_error(qpn, ctx)

    def flush_unacked(self, qpn: int, ctx: QpContext) -> None:
        """The QP went to ERROR: the WQEs sent but not acknowledged complete with WR_FLUSH_ERR, in order
        (the engine then flushes those not sent). Called by the engine."""
        if ctx.service != ServiceType.RC:
            return
        req = self.read_req(qpn)
        while req.sq_acked != ctx.sq_ci:
            wqe = self._wqe(ctx, req.sq_acked)
            self.engine._count("flush_count")
            self.engine._complete(qpn, ctx, Cqe(wr_id=wqe.wr_id, qpn=qpn, opcode=wqe.opcode,
                                                status=CqeStatus.WR_FLUSH_ERR, wqe_index=req.sq_acked))
            req.sq_acked = (req.sq_acked + 1) & 0xFFFF
        ctx.una_psn, ctx.rd_pending = ctx.next_psn, 0
        self.write_req(qpn, req)

    # --- timers -------------------------------------------------------------------------------------------

    def _arm(self, qpn: int, kind: TimerKind, delay: int) -> None:
        self.timers.arm(qpn, kind, delay, 0)
        self.timer_log.append((qpn, True, kind, delay))

    def _disarm(self, qpn: int) -> None:
        self.timers.disarm(qpn)
        self.timer_log.append((qpn, False, TimerKind.ACK, 0))

    def sent(self, qpn: int, ctx: QpContext, psn: int) -> None:
        """The engine sends PSN ``psn`` of RC QP ``qpn`` under CONTROL.RELIABLE: the first unacknowledged one
        (nothing was outstanding, or a retransmission starts) arms the local ACK timer."""
        if psn == ctx.una_psn and ctx.ack_timeout:
            self._arm(qpn, TimerKind.ACK, ack_timeout_ticks(ctx.ack_timeout))

    def _timer_after(self, qpn: int, before: QpContext, ctx: QpContext) -> None:
        """The timer command at the end of a job of an RC QP in RTS (``before``: its context as the job met
        it; ``ctx``: as the job left it): the QP ended, disarm; an RNR wait began, its RNR timer; else
        progress (``una_psn`` moved) restarts the local ACK timer if PSNs are still outstanding, or
        disarms it. A retransmission arms it as it is sent (:meth:`sent`)."""
        if before.service != ServiceType.RC or before.state != QpState.RTS:
            return
        if ctx.state == QpState.ERROR:
            self._disarm(qpn)
        elif ctx.req_wait:
            if not before.req_wait:
                self._arm(qpn, TimerKind.RNR, rnr_ticks(self.read_req(qpn).rnr_code))
        elif ctx.una_psn != before.una_psn:
            if ctx.ack_timeout and self._outstanding(ctx, self.read_req(qpn)):
                self._arm(qpn, TimerKind.ACK, ack_timeout_ticks(ctx.ack_timeout))
            else:
                self._disarm(qpn)

    def timeout(self, qpn: int) -> bool:
        """QP ``qpn``'s local ACK timer expired: retransmit from ``una_psn`` (or end the QP with
        RETRY_EXC_ERR when its retries are used up). False if nothing was outstanding or the QP has no
        timer (``ack_timeout`` 0)."""
        self.timers.disarm(qpn)                 # the table clears an entry as it fires
        ctx, req = self.engine._qpc_peek(qpn), self.read_req(qpn)
        if not self._outstanding(ctx, req) or ctx.req_wait or not ctx.ack_timeout:
            return False
        before = dataclasses.replace(ctx)
        self.counts["timeouts"] += 1
        try:
            if ctx.retry_cnt == 0:
                raise _Fatal(CqeStatus.RETRY_EXC_ERR)
            ctx.retry_cnt -= 1
            self.counts["retransmits"] += 1
            req.retrying = 1
            self._rewind(qpn, ctx, req)
        except _Fatal as fatal:
            self._fail(qpn, ctx, req, fatal.status)
        self._timer_after(qpn, before, ctx)
        return True

    def rnr_expired(self, qpn: int) -> bool:
        """QP ``qpn``'s RNR wait is over: it sends again from the NAKed PSN. False if it was not waiting."""
        self.timers.disarm(qpn)
        ctx = self.engine._qpc_peek(qpn)
        if not ctx.req_wait:
            return False
        ctx.req_wait = 0
        self.engine._qpc_write(qpn, ctx)
        self.engine._wake(qpn)
        return True
