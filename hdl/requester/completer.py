"""The requester's completer: one job at a time (a response of an RC QP, a local ACK timeout, the end of
an RNR wait), executed as :class:`rnic.model.requester.Requester` does it (docs/reliability.md).

A job brings the QP's context as the cache returned it. The completer reads the QP's requester record
and the send-queue WQEs it walks over through ``host``, completes WQEs through ``cq``, has READ response
payloads placed through ``place`` and writes atomic results through ``host``. It never writes the
context: its end result leaves on ``upd`` for the context's owner to apply (below).
"""

from amaranth import Array, Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ...model.engine import ATOMIC_OPS, REQUEST_OPS
from ...model.opcodes import OPCODE_INFO, Position, Transport
from ...model.qpc import QpState, ServiceType
from ...model.req_records import MUTABLE_BYTES, REQ_BYTES
from ...model.requester import RespDrop, RespKind, Step
from ...model.regs import ErrBit
from ...model.responder import RNR_TIMER_US
from ...model.timers import TimerKind, rnr_ticks
from ...model.wqe import WQE_BYTES, CqeStatus, WqeFlags, WqeOpcode
from ..completion import CqClientSignature, CqOp, err_layout
from ..engine.layouts import in_set, wqe_layout
from ..receive.host_access import host_cmd_layout, host_resp_layout
from .check import RespCheck, WalkStep, behind
from .timers import ack_ticks
from .layouts import JobKind, counts_layout, job_layout, place_layout, record_layout, timer_layout, upd_layout

__all__ = ["Completer"]


_READ_RESP = [op for op, i in OPCODE_INFO.items()
              if i.transport == Transport.RC and i.operation == "RDMA_READ_RESPONSE"]
_READ_ENDS = [op for op in _READ_RESP if OPCODE_INFO[op].position in (Position.LAST, Position.ONLY)]


class Completer(wiring.Component):
    """Executes ``job``s one at a time, as the golden model's :class:`~rnic.model.requester.Requester`.

    Handshakes: ``job`` is taken when idle. ``host`` carries the record read (32 bytes at
    ``req_base + 32 * qpn``), WQE reads (64 bytes at their slot), the atomic result (8 bytes, two accesses
    if it straddles a 64-byte block) and the record write (its first 12 bytes); one access at a time,
    each answered on ``host_resp``. Each CQE command waits for its ``done``. A response job gives exactly
    one ``place``; a ``write`` waits for ``placed`` (``err``: the payload could not be written). ``upd``
    comes last, only if the job changed something. ``count`` and ``err`` are one-clock strobes.

    States: Idle, RecRead / RecReadWait, then Classify (a response), Timeout or RnrDone. The walk (Walk,
    WalkStep, Retire, WalkEnd) completes the WQEs a response acknowledges; AfterAck, AfterNak and AfterResp
    do the rest (Rnr, Seq, GoBack, Rewind, ReadOff .. ReadPlaced, AtomicWrite, FailCqe and FailError with
    its flush); Done, Place, RecWrite and Update end the job. Load (the WQE at ``sq_acked``, read once per
    job, then two clocks for ``WalkStep``'s registers) and Advance / Pull (``una_psn`` moves on; a send
    pointer left behind moves up) return to the state in ``ret``.

    Host reads of the record and WQEs are expected to succeed (the model reads them through its
    backdoor); a failed one is reported on ``err`` as BUS_WQE and the job ends there, changing nothing.
    An atomic result that straddles 64 bytes is two writes: if only the second fails, the first block
    keeps its new bytes (the model writes nothing); the WQE fails with PAYLOAD_WRITE_ERR either way.
    A CQE the completion writer could not write (``done.qp_error``) is the writer's report; the job
    goes on.
    """

    def __init__(self):
        super().__init__({
            "req_base": In(64),
            "job": In(stream.Signature(job_layout)),
            "host_cmd": Out(stream.Signature(host_cmd_layout)),
            "host_resp": In(stream.Signature(host_resp_layout)),
            "cq": Out(CqClientSignature),
            "place": Out(stream.Signature(place_layout)),
            "placed": In(stream.Signature(data.StructLayout({"err": 1}))),
            "upd": Out(stream.Signature(upd_layout)),
            "timer": Out(stream.Signature(timer_layout)),
            "count": Out(counts_layout),
            "err": Out(err_layout),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.check = check = RespCheck()
        m.submodules.walk = walk = WalkStep()

        j = Signal(job_layout)
        c = j.ctx                                        # the context as read; the fields below change
        una, nxt = Signal(24), Signal(24)
        sq_ci = Signal(16)
        retry, rnr, wait, rd = Signal(3), Signal(3), Signal(), Signal(3)
        r = Signal(record_layout)
        w = Signal(wqe_layout)
        w_ok, w_idx = Signal(), Signal(16)
        move, wake, error, touched, dirty, placed = (Signal(name=n) for n in
                                                     ("move", "wake", "error", "touched", "dirty", "placed"))
        kind = Signal(3)
        bound = Signal(24)
        adv_to = Signal(24)
        status = Signal(8)
        from_walk = Signal()                             # Retire continues the walk (else the job ends)
        ret = Signal(4)                                  # where ADVANCE / LOAD return to
        gb_drop = Signal(2)                              # after GO_BACK: 0 none, 1 RETRYING if none, 2 AHEAD
        half = Signal()                                  # atomic write: the second access is due

        log_mtu = Signal(4)                              # registered with the job
        slot = Signal(64)
        ring_mask = Cat(Const(i, 8) < c.log_sq_size for i in range(16))
        m.d.comb += slot.eq(Cat(Const(0, 6), c.sq_base[6:]) + Cat(Const(0, 6), r.sq_acked & ring_mask))
        req_addr = Signal(64)
        m.d.comb += req_addr.eq(Cat(Const(0, 5), self.req_base[5:]) + (j.qpn << 5))
        request = in_set(w.opcode, REQUEST_OPS)

        m.d.comb += [check.state.eq(c.state), check.service.eq(c.service), check.una_psn.eq(una),
                     check.next_psn.eq(nxt), check.high_psn.eq(r.high_psn), check.opcode.eq(j.opcode),
                     check.psn.eq(j.psn), check.syndrome.eq(j.syndrome),
                     walk.opcode.eq(w.opcode), walk.length.eq(w.length), walk.log_mtu.eq(log_mtu),
                     walk.wqe_psn.eq(r.wqe_psn), walk.bound.eq(bound)]

        cnt = self.count
        # a READ response, a step a clock: its packet k within the WQE, k's byte offset, whether it is
        # the last, the bytes from it on and where its payload goes
        k = Signal(24)
        off = Signal(36)
        last = Signal()
        rest = Signal(signed(40))
        place_addr = Signal(64)
        mtu = Signal(14)                                 # registered with the job

        sent_end = check.sent_end                        # from nxt and the record's high_psn
        # return points of LOAD / ADVANCE
        R_WALK, R_ACK, R_RESP, R_FAIL, R_FAILED, R_FLUSH, R_DONE, R_RNR, R_SEQ, R_WALK_STEP = range(10)

        def ret_to(point):
            m.d.sync += ret.eq(point)

        def go_ret():
            with m.Switch(ret):
                for point, state in ((R_WALK, "Walk"), (R_WALK_STEP, "WalkStep"), (R_ACK, "AfterAck"),
                                     (R_RESP, "AfterResp"), (R_FAIL, "FailCqe"),
                                     (R_FAILED, "FailError"), (R_FLUSH, "FlushCqe"), (R_DONE, "Done"),
                                     (R_RNR, "Rnr"), (R_SEQ, "Seq")):
                    with m.Case(point):
                        m.next = state

        def load(then):
            """Have the WQE at sq_acked in ``w``, then go to ``then``."""
            ret_to(then)
            m.next = "Load"

        def advance(to, then):
            m.d.sync += adv_to.eq(to)
            ret_to(then)
            m.next = "Advance"

        def fail(code):
            m.d.sync += status.eq(code)
            load(R_FAIL)

        def drop(reason):
            m.d.comb += [cnt.drop.eq(1), cnt.reason.eq(reason)]

        def cqe_states(name, byte_len, then):
            """States ``name`` (the command) and ``name + "Wait"`` (its ``done``), then ``then()``."""
            q = self.cq.cmd.payload
            with m.State(name):
                m.d.comb += [self.cq.cmd.valid.eq(1), q.op.eq(CqOp.CQE), q.cqn.eq(c.cqn), q.wr_id.eq(w.wr_id),
                             q.byte_len.eq(byte_len), q.qpn.eq(j.qpn), q.opcode.eq(w.opcode),
                             q.status.eq(status), q.wqe_index.eq(r.sq_acked)]
                with m.If(self.cq.cmd.ready):
                    m.next = name + "Wait"
            with m.State(name + "Wait"):
                m.d.comb += self.cq.done.ready.eq(1)
                with m.If(self.cq.done.valid):
                    then()

        def goto(state):
            def f(resp):
                m.next = state
            return f

        def host_states(name, then, **fields):
            """States ``name`` (the ``host_cmd`` with ``fields``) and ``name + "Wait"`` (its ``host_resp``),
            then ``then(resp)``."""
            with m.State(name):
                m.d.comb += [self.host_cmd.valid.eq(1),
                             *(getattr(self.host_cmd.payload, k).eq(v) for k, v in fields.items())]
                with m.If(self.host_cmd.ready):
                    m.next = name + "Wait"
            with m.State(name + "Wait"):
                m.d.comb += self.host_resp.ready.eq(1)
                with m.If(self.host_resp.valid):
                    then(self.host_resp.payload)

        with m.FSM():
            with m.State("Idle"):
                m.d.comb += self.job.ready.eq(1)
                with m.If(self.job.valid):
                    p = self.job.payload
                    m.d.sync += [j.eq(p), una.eq(p.ctx.una_psn), nxt.eq(p.ctx.next_psn), sq_ci.eq(p.ctx.sq_ci),
                                 retry.eq(p.ctx.retry_cnt), rnr.eq(p.ctx.rnr_retry_cnt), wait.eq(p.ctx.req_wait),
                                 rd.eq(p.ctx.rd_pending), w_ok.eq(0), log_mtu.eq(p.ctx.path_mtu + 7),
                                 mtu.eq(Const(1, 14) << (p.ctx.path_mtu[:3] + 7)), move.eq(0), wake.eq(0), error.eq(0),
                                 touched.eq(0), dirty.eq(0), placed.eq(0), gb_drop.eq(0), half.eq(0),
                                 from_walk.eq(0)]
                    m.next = "RecRead"

            def record_read(resp):
                m.d.sync += r.eq(resp.rdata[:REQ_BYTES * 8])
                with m.If(resp.err):
                    m.next = "ReadError"
                with m.Elif(j.kind == JobKind.RESPONSE):
                    m.next = "Classify"
                with m.Elif(j.kind == JobKind.TIMEOUT):
                    m.next = "Timeout"
                with m.Else():
                    m.next = "RnrDone"
            host_states("RecRead", record_read, addr=req_addr, nbytes=REQ_BYTES)

            with m.State("ReadError"):                  # the job is abandoned
                m.d.comb += [self.err.valid.eq(1), self.err.bit.eq(ErrBit.BUS_WQE), self.err.qpn.eq(j.qpn)]
                m.d.sync += [touched.eq(0), dirty.eq(0)]
                m.next = "Place"

            with m.State("RnrDone"):
                with m.If(wait):
                    m.d.sync += [wait.eq(0), wake.eq(1), touched.eq(1)]
                m.next = "Done"

            with m.State("Timeout"):
                outstanding = ((c.service == ServiceType.RC) & (c.state.as_value() == QpState.RTS)
                               & behind(una, sent_end))
                with m.If(~outstanding | wait | (c.ack_timeout == 0)):
                    m.next = "Done"
                with m.Else():
                    m.d.comb += cnt.timeouts.eq(1)
                    m.d.sync += touched.eq(1)
                    with m.If(retry == 0):
                        fail(CqeStatus.RETRY_EXC_ERR)
                    with m.Else():
                        m.d.comb += cnt.retransmits.eq(1)
                        m.d.sync += [retry.eq(retry - 1), r.retrying.eq(1)]
                        m.next = "Rewind"

            with m.State("Classify"):
                with m.If(check.drop):
                    drop(check.reason)
                    m.next = "Done"
                with m.Else():
                    m.d.sync += kind.eq(check.kind)
                    with m.Switch(check.kind):
                        with m.Case(RespKind.ACK):
                            m.d.comb += cnt.acks.eq(1)
                            m.d.sync += bound.eq(j.psn + 1)
                        with m.Default():
                            m.d.sync += bound.eq(j.psn)
                    m.next = "Walk"

            # --- the walk: complete every WQE whose PSNs all lie before ``bound`` ------------------------
            with m.State("Walk"):
                with m.If(r.sq_acked == c.sq_pi):
                    m.next = "WalkEnd"
                with m.Else():
                    load(R_WALK_STEP)
            with m.State("WalkStep"):
                with m.Switch(walk.step):
                    with m.Case(Step.STOP):
                        m.next = "WalkEnd"
                    with m.Case(Step.IMPLIED):
                        m.d.comb += cnt.implied_naks.eq(1)
                        m.next = "GoBack"
                    with m.Default():
                        m.d.sync += from_walk.eq(1)
                        m.next = "Retire"
            with m.State("WalkEnd"):
                with m.Switch(kind):
                    with m.Case(RespKind.ACK):
                        load(R_ACK)
                    with m.Case(RespKind.READ_RESPONSE, RespKind.ATOMIC_ACK):
                        load(R_RESP)
                    with m.Default():
                        m.next = "AfterNak"

            with m.State("Retire"):                     # the WQE at sq_acked completed
                with m.If(w.flags & WqeFlags.SIGNALED):
                    m.d.sync += status.eq(CqeStatus.SUCCESS)
                    m.next = "RetireCqe"
                with m.Else():
                    m.next = "Retired"

            def retired():
                m.next = "Retired"
            cqe_states("RetireCqe", w.length, retired)
            with m.State("Retired"):
                m.d.comb += cnt.completions.eq(1)
                with m.If(request):
                    m.d.sync += rd.eq(rd - 1)
                m.d.sync += [r.sq_acked.eq(r.sq_acked + 1), r.wqe_psn.eq(r.wqe_psn + walk.span),
                             touched.eq(1), dirty.eq(1)]
                m.next = "RetireAdvance"
            with m.State("RetireAdvance"):
                advance(r.wqe_psn, Mux(from_walk, R_WALK, R_DONE))      # on to the next WQE, or the job ends
                m.d.sync += from_walk.eq(0)

            # --- after the walk --------------------------------------------------------------------------
            with m.State("AfterAck"):                   # psn is inside the WQE at sq_acked
                with m.If(~behind(j.psn, una)):
                    with m.If(request):
                        m.d.comb += cnt.implied_naks.eq(1)
                        m.next = "GoBack"
                    with m.Else():
                        advance(j.psn + 1, R_DONE)
                with m.Else():
                    m.next = "Done"

            with m.State("AfterNak"):
                with m.Switch(kind):
                    with m.Case(RespKind.RESERVED):
                        fail(CqeStatus.BAD_RESP_ERR)
                    with m.Case(RespKind.RNR):
                        m.d.comb += cnt.rnr_naks.eq(1)
                        advance(j.psn, R_RNR)
                    with m.Default():
                        code = j.syndrome[:5]
                        m.d.comb += [cnt.naks_seq.eq(code == 0), cnt.naks_inv.eq(code == 1),
                                     cnt.naks_access.eq(code == 2), cnt.naks_op.eq(code >= 3)]
                        with m.If(kind == RespKind.NAK_SEQ):
                            advance(j.psn, R_SEQ)
                        with m.Else():
                            fail(Mux(code == 1, CqeStatus.REM_INV_REQ_ERR,
                                     Mux(code == 2, CqeStatus.REM_ACCESS_ERR, CqeStatus.REM_OP_ERR)))

            with m.State("Rnr"):
                with m.If((c.rnr_limit != 7) & (rnr == 0)):
                    fail(CqeStatus.RNR_RETRY_EXC_ERR)
                with m.Else():
                    with m.If(c.rnr_limit != 7):
                        m.d.sync += rnr.eq(rnr - 1)
                    m.d.comb += cnt.rnr_retries.eq(1)
                    m.d.sync += [r.rnr_code.eq(j.syndrome[:5]), wait.eq(1), touched.eq(1), dirty.eq(1)]
                    m.next = "Rewind"

            with m.State("Seq"):
                m.d.sync += gb_drop.eq(1)
                m.next = "GoBack"

            with m.State("AfterResp"):                  # the WQE at sq_acked is the one answered
                with m.If(j.psn != una):
                    m.d.sync += gb_drop.eq(2)
                    m.next = "GoBack"
                with m.Elif(kind == RespKind.READ_RESPONSE):
                    m.d.sync += k.eq(una - r.wqe_psn)
                    m.next = "ReadOff"

                with m.Else():
                    with m.If(~in_set(w.opcode, ATOMIC_OPS)):
                        fail(CqeStatus.BAD_RESP_ERR)
                    with m.Else():
                        m.d.comb += cnt.atomic_acks.eq(1)
                        m.next = "AtomicWrite"

            with m.State("ReadOff"):
                m.d.sync += [off.eq(k << log_mtu), last.eq(k == walk.span - 1)]
                m.next = "ReadRest"
            with m.State("ReadRest"):
                m.d.sync += [rest.eq(w.length - off), place_addr.eq(w.local_addr + off)]
                m.next = "ReadCheck"
            with m.State("ReadCheck"):
                fits = Mux(rest > mtu, j.length == mtu, j.length == rest)
                with m.If((w.opcode != WqeOpcode.RDMA_READ) | (in_set(j.opcode, _READ_ENDS) != last) | ~fits):
                    fail(CqeStatus.BAD_RESP_ERR)
                with m.Else():
                    m.d.comb += cnt.read_responses.eq(1)
                    m.next = "ReadPlace"

            with m.State("ReadPlace"):
                with m.If(j.length == 0):
                    m.next = "ReadPlaced"
                with m.Else():
                    m.d.comb += [self.place.valid.eq(1), self.place.payload.write.eq(1),
                                 self.place.payload.addr.eq(place_addr)]
                    with m.If(self.place.ready):
                        m.d.sync += placed.eq(1)
                        m.next = "ReadPlaceWait"
            with m.State("ReadPlaceWait"):
                m.d.comb += self.placed.ready.eq(1)
                with m.If(self.placed.valid):
                    with m.If(self.placed.payload.err):
                        m.next = "WriteError"
                    with m.Else():
                        m.next = "ReadPlaced"
            with m.State("ReadPlaced"):
                with m.If(last):
                    m.next = "Retire"
                with m.Else():
                    advance(una + 1, R_DONE)

            straddles = w.local_addr[:6] > 56                   # the 8 bytes cross a 64-byte block
            first = Signal(7)                                   # bytes in the first access
            m.d.comb += first.eq(Mux(straddles, 64 - w.local_addr[:6], 8))

            def atomic_written(resp):
                with m.If(resp.err):
                    m.next = "WriteError"
                with m.Elif(~half & straddles):
                    m.d.sync += half.eq(1)
                    m.next = "AtomicWrite"
                with m.Else():
                    m.next = "Retire"
            host_states("AtomicWrite", atomic_written, write=1, addr=Mux(half, w.local_addr + first, w.local_addr),
                        nbytes=Mux(half, 8 - first, first), wdata=Mux(half, j.orig >> (first << 3), j.orig))

            with m.State("WriteError"):
                m.d.comb += [self.err.valid.eq(1), self.err.bit.eq(ErrBit.BUS_PAYLOAD), self.err.qpn.eq(j.qpn),
                             self.err.status.eq(CqeStatus.PAYLOAD_WRITE_ERR), cnt.bus_errors.eq(1)]
                fail(CqeStatus.PAYLOAD_WRITE_ERR)

            # --- progress, retry, failure -----------------------------------------------------------------
            with m.State("Advance"):                    # una_psn moves on to adv_to; then pull forward
                with m.If(adv_to != una):
                    m.d.sync += [una.eq(adv_to), retry.eq(c.retry_limit), rnr.eq(c.rnr_limit), r.retrying.eq(0)]
                    with m.If(behind(r.high_psn, adv_to)):
                        m.d.sync += r.high_psn.eq(adv_to)
                m.d.sync += [wake.eq(1), touched.eq(1), dirty.eq(1)]
                m.next = "Pull"
            with m.State("Pull"):
                ahead = Signal(16)
                m.d.comb += ahead.eq(r.sq_acked - sq_ci)
                with m.If((ahead != 0) & (ahead <= ((c.sq_pi - sq_ci) & 0xFFFF))):
                    m.d.sync += [sq_ci.eq(r.sq_acked), nxt.eq(r.wqe_psn), rd.eq(0), move.eq(1), wake.eq(1)]
                go_ret()

            with m.State("GoBack"):                     # retransmit from una_psn
                # a go-back under way (una_psn has not moved since), or nothing sent past una_psn
                with m.If(~behind(una, nxt) | r.retrying):
                    with m.If(gb_drop == 1):
                        drop(RespDrop.RETRYING)
                    with m.If(gb_drop == 2):
                        drop(RespDrop.AHEAD)
                    m.next = "Done"
                with m.Elif(retry == 0):
                    fail(CqeStatus.RETRY_EXC_ERR)
                with m.Else():
                    with m.If(gb_drop == 2):
                        drop(RespDrop.AHEAD)
                    m.d.comb += cnt.retransmits.eq(1)
                    m.d.sync += [retry.eq(retry - 1), r.retrying.eq(1)]
                    m.next = "Rewind"
            with m.State("Rewind"):                     # the send pointer back to the oldest unacked WQE
                m.d.sync += [r.high_psn.eq(sent_end), nxt.eq(r.wqe_psn), sq_ci.eq(r.sq_acked), rd.eq(0),
                             move.eq(1), wake.eq(1), touched.eq(1), dirty.eq(1)]
                m.next = "Done"

            with m.State("FailCqe"):                    # the WQE at sq_acked completes with ``status``
                m.d.comb += cnt.wqe_errors.eq(1)        # (rd_pending: 0 once the QP is in ERROR)
                m.next = "FailCqeSend"

            def failed():
                m.d.sync += [r.sq_acked.eq(r.sq_acked + 1), touched.eq(1), dirty.eq(1), error.eq(1)]
                ret_to(R_FAILED)
                m.next = "Pull"
            cqe_states("FailCqeSend", 0, failed)

            with m.State("FailError"):                  # flush the WQEs sent and not acknowledged
                with m.If(r.sq_acked == sq_ci):
                    m.d.sync += [una.eq(nxt), rd.eq(0)]
                    m.next = "Done"
                with m.Else():
                    m.d.sync += status.eq(CqeStatus.WR_FLUSH_ERR)
                    load(R_FLUSH)
            with m.State("FlushCqe"):
                m.d.comb += cnt.flush_count.eq(1)
                m.next = "FlushCqeSend"

            def flushed():
                m.d.sync += r.sq_acked.eq(r.sq_acked + 1)
                m.next = "FailError"
            cqe_states("FlushCqeSend", 0, flushed)

            # --- WQE loads -----------------------------------------------------------------------------------
            with m.State("Load"):
                with m.If(w_ok & (w_idx == r.sq_acked)):
                    go_ret()
                with m.Else():
                    m.next = "LoadRead"

            def wqe_read(resp):
                m.d.sync += [w.eq(resp.rdata), w_ok.eq(~resp.err), w_idx.eq(r.sq_acked)]
                with m.If(resp.err):
                    m.next = "ReadError"
                with m.Else():
                    m.next = "LoadDone"
            host_states("LoadRead", wqe_read, addr=slot, nbytes=WQE_BYTES)
            with m.State("LoadDone"):                  # WalkStep's span, then its PSN end, are registered
                m.next = "LoadSpan"
            with m.State("LoadSpan"):
                go_ret()

            # --- the end of a job ---------------------------------------------------------------------------
            with m.State("Done"):
                m.next = "Place"
            with m.State("Place"):                      # a response not placed: its payload is discarded
                with m.If((j.kind == JobKind.RESPONSE) & ~placed):
                    m.d.comb += self.place.valid.eq(1)
                    with m.If(self.place.ready):
                        m.next = "RecWrite"
                with m.Else():
                    m.next = "RecWrite"
            with m.State("RecWrite"):
                with m.If(dirty):
                    m.next = "RecWriteGo"
                with m.Else():
                    m.next = "Timer"
            host_states("RecWriteGo", goto("Timer"), write=1, addr=req_addr, nbytes=MUTABLE_BYTES,
                        wdata=r.as_value()[:MUTABLE_BYTES * 8])

            # the timer command (the model's _timer_after), decided and registered, then offered
            tm = Signal(timer_layout)
            tm_go = Signal()
            with m.State("Timer"):
                rc_rts = (c.service == ServiceType.RC) & (c.state.as_value() == QpState.RTS)
                rnr_table = Array(Const(rnr_ticks(code), 20) for code in range(len(RNR_TIMER_US)))
                m.d.sync += [tm.qpn.eq(j.qpn), tm.arm.eq(0), tm.kind.eq(TimerKind.ACK), tm.delay.eq(0), tm_go.eq(0)]
                with m.If(~rc_rts):
                    pass
                with m.Elif(error):
                    m.d.sync += tm_go.eq(1)
                with m.Elif(wait):
                    with m.If(~c.req_wait):
                        m.d.sync += [tm_go.eq(1), tm.arm.eq(1), tm.kind.eq(TimerKind.RNR),
                                     tm.delay.eq(rnr_table[r.rnr_code])]
                with m.Elif(una != c.una_psn):
                    m.d.sync += tm_go.eq(1)
                    with m.If(behind(una, sent_end) & (c.ack_timeout != 0)):
                        m.d.sync += [tm.arm.eq(1), tm.delay.eq(ack_ticks(c.ack_timeout))]
                m.next = "TimerGo"
            with m.State("TimerGo"):
                m.d.comb += [self.timer.valid.eq(tm_go), self.timer.payload.eq(tm)]
                with m.If(self.timer.ready | ~tm_go):
                    m.next = "Update"
            with m.State("Update"):
                u = self.upd.payload
                m.d.comb += [u.qpn.eq(j.qpn), u.una_psn.eq(una), u.retry_cnt.eq(retry), u.rnr_retry_cnt.eq(rnr),
                             u.req_wait.eq(wait), u.rd_dec.eq(c.rd_pending - rd), u.move.eq(move), u.sq_ci.eq(sq_ci),
                             u.next_psn.eq(nxt), u.error.eq(error), u.wake.eq(wake)]
                with m.If(touched):
                    m.d.comb += self.upd.valid.eq(1)
                    with m.If(self.upd.ready):
                        m.next = "Idle"
                with m.Else():
                    m.next = "Idle"
        return m
