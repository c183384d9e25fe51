"""The control FSM's doorbell machine: Clear, Idle, CQ-DB, CQ-DB-Wait, DB, DB-Lookup, DB-Check,
DB-Range, DB-Verdict, DB-SetPI, DB-Schedule, DB-Queue (state table: :mod:`.control`)."""

from amaranth import Const, Signal

from ...model.engine import MAX_LOG_RING
from ...model.regs import ErrBit
from ...model.wqe import CqeStatus
from ..completion import CqOp
from ..qp_cache import Op, QpState
from .machine import RET_DB

__all__ = ["DoorbellStates"]


class DoorbellStates:
    """Mixin of :class:`.control.Control`: after reset, between turns, and doorbells."""

    def doorbell_signals(self):
        m, ctx = self.m, self.ctx
        self.db_bad = Signal()         # the doorbell's QPN out of range, registered as Idle takes it
        self.db_status = Signal(8)
        # DB-Check waits a clock for the ring fill (pi - sq_ci) and the ring size, registered from
        # the context it has just loaded; DB-Range registers the verdict; DB-Verdict acts on it
        self.db_ahead, self.db_ring = Signal(16), Signal(17)
        m.d.sync += [self.db_ahead.eq(self.pi - ctx.sq_ci), self.db_ring.eq(Const(1, 17) << ctx.log_sq_size[:4])]
        self.db_queue = Signal()
        self.report_fields.update({"DB": (ErrBit.DB_BAD_QPN, 0), "DB-Lookup-Resp": (ErrBit.BUS_QPC, 0),
                                   "DB-Verdict": (ErrBit.DB_REJECTED, self.db_status)})

    def idle_states(self):
        m, e, ready, fetch = self.m, self.e, self.ready, self.fetch
        with m.State("Clear"):
            m.d.comb += ready.clear.eq(1)
            with m.If(ready.clear_last):
                m.next = "Idle"

        with m.State("Idle"):
            with m.If(e.doorbell.valid):
                m.d.comb += e.doorbell.ready.eq(1)
                db_qpn = e.doorbell.payload.qpn
                m.d.sync += [self.qpn.eq(db_qpn), self.pi.eq(e.doorbell.payload.pi),
                             self.db_bad.eq((db_qpn >= e.qpc_size) | (db_qpn >= e.max_qps))]
                m.next = "DB"
            with m.Elif(e.cq_doorbell.valid):
                m.d.comb += e.cq_doorbell.ready.eq(1)
                m.d.sync += [self.cq_cmd.op.eq(CqOp.SET_CI), self.cq_cmd.cqn.eq(e.cq_doorbell.payload.cqn),
                             self.cq_cmd.ci.eq(e.cq_doorbell.payload.ci)]
                m.next = "CQ-DB"
            with m.Elif(e.upd.valid):
                self.take_update()
            with m.Elif(e.enable & ready.head.valid):
                m.d.comb += ready.head.ready.eq(1)
                m.d.sync += [self.qpn.eq(ready.head.payload.qpn), self.offset.eq(ready.head.payload.offset),
                             self.peeked.eq(0)]
                with m.If(ready.head.payload.qpn != fetch.la_qpn):
                    self.drop_lookahead()
                m.next = "Turn"

    def doorbell_states(self):
        m, ctx = self.m, self.ctx
        with m.State("CQ-DB"):
            m.d.comb += [self.cqw.cmd.valid.eq(1), self.cqw.cmd.payload.eq(self.cq_cmd)]
            with m.If(self.cqw.cmd.ready):
                m.next = "CQ-DB-Wait"
        with m.State("CQ-DB-Wait"):
            m.d.comb += self.cqw.done.ready.eq(1)
            with m.If(self.cqw.done.valid):
                m.next = "Idle"

        with m.State("DB"):
            with m.If(self.db_bad):
                m.d.comb += self.inc.db_errors.eq(1)
                self.report(ErrBit.DB_BAD_QPN)
                m.next = "Idle"
            with m.Else():
                m.next = "DB-Lookup"

        def db_lookup(ok):
            with m.If(ok):
                m.next = "DB-Check"
            with m.Else():
                m.d.comb += [self.inc.db_errors.eq(1), self.bus_err_fsm.eq(1)]
                self.report(ErrBit.BUS_QPC)
                m.next = "Idle"
        self.cache("DB-Lookup", Op.LOOKUP, 0, db_lookup)

        with m.State("DB-Check"):
            m.next = "DB-Range"
        with m.State("DB-Range"):
            with m.If((ctx.log_sq_size > MAX_LOG_RING) | (self.db_ahead > self.db_ring)):
                m.d.sync += self.db_status.eq(CqeStatus.SQ_OVERFLOW)
            with m.Elif((ctx.state != QpState.RTS) & (ctx.state != QpState.ERROR)):
                m.d.sync += self.db_status.eq(CqeStatus.QP_STATE_ERR)
            with m.Else():
                m.d.sync += self.db_status.eq(0)
            m.next = "DB-Verdict"
        with m.State("DB-Verdict"):
            with m.If(self.db_status != 0):
                c = self.cq_cmd
                m.d.comb += self.inc.db_errors.eq(1)
                self.report(ErrBit.DB_REJECTED, self.db_status)
                m.d.sync += [c.op.eq(CqOp.CQE), c.cqn.eq(ctx.cqn), c.qpn.eq(self.qpn),
                             c.status.eq(self.db_status), c.wqe_index.eq(self.pi), c.byte_len.eq(0),
                             c.wr_id.eq(0), c.opcode.eq(0),
                             self.do_cqe.eq(1), self.retire_to.eq(RET_DB), self.retire_cnt.eq(0)]
                m.next = "Fail-SetError"
            with m.Else():
                m.next = "DB-SetPI"

        self.cache("DB-SetPI", Op.SET_SQ_PI, self.pi, self.goto("DB-Schedule"))

        with m.State("DB-Schedule"):
            # ``scheduled`` is the scheduled bit of qpn (qpn has been stable for many clocks); the
            # verdict is registered, DB-Queue acts on it
            m.d.sync += self.db_queue.eq((ctx.sq_ci != ctx.sq_pi) & ~self.ready.scheduled)
            m.next = "DB-Queue"
        with m.State("DB-Queue"):
            with m.If(self.db_queue):
                m.d.comb += [self.ready.push_en.eq(1), self.ready.mark_en.eq(1), self.ready.mark_data.eq(1)]
            m.next = "Idle"
