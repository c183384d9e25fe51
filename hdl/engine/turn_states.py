"""The control FSM's turn machine: Turn, Drop, Loop, Fetch, Fetch-R, Fetched, Turn-End (state
table: :mod:`.control`)."""

from amaranth import Mux
from amaranth.hdl import Assert
from amaranth.lib import data

from ...model.engine import ATOMIC_OPS
from ...model.regs import ErrBit
from ...model.wqe import CqeStatus
from ..qp_cache import Op, QpState, cached_layout
from .layouts import in_set
from .machine import RET_LOOP

__all__ = ["TurnStates"]


class TurnStates:
    """Mixin of :class:`.control.Control`: a turn's start and end, and each WQE's fetch and verdict."""

    def turn_states(self):
        m, e, ctx, fetch = self.m, self.e, self.ctx, self.fetch

        def turn_lookup(ok):
            with m.If(ok):
                rec = data.View(cached_layout, e.qpc_resp.payload.record)
                m.d.sync += [self.steps.eq(0), self.steps_at_quota.eq(0), self.steps_inflight.eq(self.inflight),
                             self.below_quota.eq(self.inflight < self.quota),
                             self.turn_flush.eq(rec.state == QpState.ERROR)]
                self.turn_rewound(self.qpn)
                m.next = "Loop"
            with m.Else():
                m.d.comb += self.bus_err_fsm.eq(1)
                self.report(ErrBit.BUS_QPC)
                m.d.comb += [self.ready.mark_en.eq(1), self.ready.mark_data.eq(0)]
                self.drop_lookahead()
                m.next = "Drop"
        self.cache("Turn", Op.LOOKUP, 0, turn_lookup)
        self.report_fields["Turn-Resp"] = (ErrBit.BUS_QPC, 0)

        with m.State("Drop"):
            # a lookahead read for a turn whose own lookup failed: no WQE read stays outstanding
            m.d.comb += fetch.take.eq(1)
            with m.If(fetch.pf_n == 0):
                m.next = "Idle"

        with m.State("Loop"):
            m.d.sync += self.sending.eq(0)
            with m.If((self.steps_at_quota & ~self.solo) | self.ci_at_pi):
                with m.If(fetch.la_qpn == self.qpn):
                    self.drop_lookahead()             # this turn's own lookahead, unused
                m.next = "Turn-End"
            with m.Elif((ctx.state == QpState.ERROR) & self.turn_flush):
                m.d.sync += [self.flush_mode.eq(1), self.chained.eq(0), self.chain_block.eq(0)]
                self.set_issue_ci(advance=False)
                m.next = "Fetch"
            with m.Elif((ctx.state == QpState.RTS) & self.rel & ctx.req_wait):
                m.d.sync += self.blocked.eq(1)        # waiting out an RNR NAK: parked
                with m.If(fetch.la_qpn == self.qpn):
                    self.drop_lookahead()
                m.next = "Turn-End"
            with m.Elif(ctx.state == QpState.RTS):
                m.d.sync += [self.flush_mode.eq(0), self.chained.eq(0), self.chain_block.eq(0)]
                self.set_issue_ci(advance=False)
                m.next = "Fetch"
            with m.Else():
                with m.If(fetch.la_qpn == self.qpn):
                    self.drop_lookahead()             # this turn's own lookahead, unused
                m.next = "Turn-End"

        with m.State("Turn-End"):
            m.d.sync += Assert(~self.draining, "engine: a turn ends before the one it took over from\n")
            m.d.sync += self.sending.eq(0)
            with m.If(fetch.pf_n > fetch.la_held):
                m.d.comb += fetch.take.eq(1)          # only the lookahead may stay between turns
            with m.Elif(self.ctx_has_work & ~self.blocked):
                m.d.comb += self.ready.push_en.eq(1)
            with m.Else():
                # no work, or held (parked: its offset waits with its scheduled bit for a doorbell)
                m.d.comb += [self.ready.mark_en.eq(1), self.ready.mark_data.eq(0)]
                m.d.sync += self.offset.eq(0)
            with m.If(fetch.pf_n <= fetch.la_held):
                m.d.sync += self.blocked.eq(0)
                m.next = "Idle"

    def fetch_states(self):
        m, ctx, fetch, wqe = self.m, self.ctx, self.fetch, self.wqe
        with m.State("Fetch"):
            m.d.comb += [self.fetching.eq(1), fetch.la_hold.eq(1)]
            with m.If(fetch.la_valid & fetch.la_here & (fetch.pf_n == fetch.la_cnt) & ~self.full_read):
                m.d.comb += fetch.adopt_lookahead.eq(1)  # the lookahead is this WQE and on
                m.next = "Fetch-R"
            with m.Elif(fetch.pf_n != 0):
                m.d.comb += fetch.take.eq(1)          # drop what the chain did not use
                self.drop_lookahead()
                m.d.sync += self.peeked.eq(0)
            with m.Elif(~fetch.issue_moved):
                m.d.comb += fetch.fetch_raise.eq(1)
                m.next = "Fetch-R"
        with m.State("Fetch-R"):
            m.d.comb += [self.fetching.eq(1), fetch.take.eq(1)]
            with m.If(fetch.wqe_valid):
                m.d.sync += [self.wqe_bits.eq(fetch.wqe), self.wqe_status.eq(self.check.status),
                             self.wqe_bus_err.eq(fetch.wqe_err), self.wqe_bad.eq(self.check.status != 0),
                             self.wqe_deep.eq(self.check.wqe.length < self.e.deep_below),
                             self.wqe_short.eq(fetch.wqe_short), self.full_read.eq(0)]
                m.next = "Fetched"
        with m.State("Fetched"):
            self.fetched_state()
        self.report_fields["Fetched"] = (Mux(self.wqe_bus_err, ErrBit.BUS_WQE, ErrBit.WQE_ERROR),
                                         Mux(self.wqe_bus_err, CqeStatus.WQE_FETCH_ERR, self.wqe_status))

    def fetched_state(self):
        """Fetched: the WQE's verdict. Send it, read it again in full, defer it behind the packets in
        flight, or complete it with an error or a flush."""
        m, ctx, wqe, rerr = self.m, self.ctx, self.wqe, self.wqe_bus_err
        m.d.sync += Assert(self.offset_was_zero == (self.offset == 0),
                           "engine: Fetched's registered offset == 0 differs\n")
        m.d.comb += self.fetching.eq(1)
        m.d.sync += [self.do_cqe.eq(1), self.retire_to.eq(RET_LOOP)]
        with m.If(self.wqe_short & (wqe.flags[3] | in_set(wqe.opcode, ATOMIC_OPS)) & ~rerr & ~self.flush_mode):
            # inline data is in bytes 32..63, an atomic's operands in 44..59: read this WQE again, in
            # full (issue_ci and chained stay; Fetch drops the newer bursts first)
            m.d.sync += self.full_read.eq(1)
            m.next = "Fetch"
        with m.Elif(Mux(self.chained, rerr | self.wqe_bad | (self.rel & (self.request_op | wqe.flags[2])),
                        self.draining & (rerr | self.flush_mode | (self.offset_was_zero & self.wqe_bad)))):
            # handled in order after the packets in flight (this turn's, or the draining turn's,
            # whose CQEs come first), or judged by the requester's holds on a context that holds
            # every earlier commit: drain, then Loop fetches it again
            m.d.sync += [self.chain_block.eq(1), self.issued_last.eq(1)]
            m.next = "Send-Loop"
        with m.Elif(self.chained):
            m.d.sync += [self.issue_off.eq(0), self.issued_last.eq(0), self.sent.eq(0), self.sending.eq(1)]
            m.next = "Send-Loop"
        with m.Elif(rerr):
            m.d.comb += self.bus_err_fsm.eq(1)
            self.report(ErrBit.BUS_WQE, CqeStatus.WQE_FETCH_ERR)
            self.count_step()
            with m.If(self.flush_mode):
                self.set_cqe(CqeStatus.WR_FLUSH_ERR, with_wqe=False)
                m.d.sync += self.retire_cnt.eq(2)
                m.next = "Complete"
            with m.Else():
                self.set_cqe(CqeStatus.WQE_FETCH_ERR, with_wqe=False)
                m.d.sync += self.retire_cnt.eq(1)
                m.next = "Fail-SetError"
        with m.Elif(self.flush_mode):
            self.set_cqe(CqeStatus.WR_FLUSH_ERR)
            m.d.sync += self.retire_cnt.eq(2)
            self.count_step()
            m.next = "Complete"
        with m.Elif(self.offset_was_zero & self.wqe_bad):
            self.report(ErrBit.WQE_ERROR, self.wqe_status)
            self.set_cqe(self.wqe_status)
            m.d.sync += self.retire_cnt.eq(1)
            self.count_step()
            m.next = "Fail-SetError"
        with m.Else():
            # a WQE started behind una_psn (after a go-back) skips the packets already acknowledged: the first
            # packet goes out at una_psn, and its commit adds the skipped PSNs too
            skip = self.rel & self.offset_was_zero & self.skip_ok
            m.d.sync += [self.issue_off.eq(Mux(skip, self.skip_off, self.offset)),
                         self.issue_psn.eq(Mux(skip, ctx.una_psn, ctx.next_psn)),
                         self.skip.eq(Mux(skip, self.skip_psns, 0))]
            m.d.sync += [
                         self.steps_inflight.eq(self.steps), self.below_quota.eq(self.steps < self.quota),
                         self.squash.eq(0), self.issued_last.eq(0), self.sent.eq(0), self.sending.eq(1)]
            m.d.sync += Assert(self.inflight == self.drain_inflight,
                               "engine: a turn's first WQE with its own packets in flight\n")
            m.next = "Send-Loop"
