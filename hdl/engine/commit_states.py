"""The control FSM's commit machine: Commit, Commit-PSN, Commit-PSN-Resp, Retire-Next, Retire-Both,
Fail-SetError, Set-Error, Complete, Complete-Wait, Drop-SetError, Completed, Retire, D-End (state
table: :mod:`.control`)."""

from amaranth import Cat, Mux

from ...model.regs import ErrBit
from ...model.wqe import CqeStatus
from ..qp_cache import Op, QpState
from .machine import RET_DB, RET_SEND

__all__ = ["CommitStates"]


class CommitStates:
    """Mixin of :class:`.control.Control`: a packet's commit, its WQE's retire and completion."""

    def commit_states(self):
        m, e, info_r = self.m, self.e, self.info_r
        drain_pkt = self.commit_draining   # the packet is the draining turn's (its steps were counted there)

        def psn_sent(retire_now):
            with m.If(retire_now):
                m.d.sync += self.resp_owed.eq(1)
                m.next = "Retire-Next"
            with m.Else():
                m.next = "Commit-PSN-Resp"

        with m.State("Commit"):
            m.d.comb += [self.info.r_en.eq(1), e.status.ready.eq(1)]
            m.d.sync += [self.inflight.eq(self.inflight - 1), self.none_inflight.eq(self.inflight == 1),
                         self.window_room.eq(1)]
            with m.If(drain_pkt):
                m.d.sync += [self.drain_inflight.eq(self.drain_inflight - 1), self.drain_empty.eq(self.drain_inflight == 1)]
            with m.Else():
                m.d.sync += [self.steps_inflight.eq(self.steps_inflight - 1), self.below_quota.eq(self.below_quota_if_less)]
            with m.If(Mux(drain_pkt, self.drain_squash, self.squash)):
                m.next = "Send-Loop"
            with m.Elif(e.status.payload.error):
                m.d.comb += self.bus_err_fsm.eq(1)
                self.report(ErrBit.BUS_PAYLOAD, CqeStatus.PAYLOAD_READ_ERR)
                self.set_cqe(CqeStatus.PAYLOAD_READ_ERR, src=info_r)
                with m.If(drain_pkt):
                    m.d.sync += [self.drain_squash.eq(1), self.drain_offset.eq(0)]
                with m.Else():
                    self.count_step(committed=True)
                    m.d.sync += self.squash.eq(1)
                m.d.sync += [self.do_cqe.eq(1), self.retire_to.eq(RET_SEND), self.retire_cnt.eq(1)]
                m.next = "Fail-SetError"
            with m.Else():
                m.d.comb += [self.inc.pkt_count.eq(1), self.inc.byte_count.eq(info_r.seg)]
                with m.If(~drain_pkt):
                    self.count_step(committed=True)
                m.d.sync += [self.do_cqe.eq(info_r.signaled), self.retire_to.eq(RET_SEND), self.retire_cnt.eq(0)]
                with m.If(info_r.last):
                    self.set_cqe(CqeStatus.SUCCESS, byte_len=info_r.length, src=info_r)
                m.d.sync += [self.commit_psns.eq(info_r.psns), self.commit_last.eq(info_r.last),
                             self.commit_rd.eq(info_r.rd_inc)]
                # ADD_PSN goes out now if the cache takes it, else from Commit-PSN
                self.request(Op.ADD_PSN, info_r.psns)
                with m.If(e.qpc_req.ready):
                    psn_sent(info_r.last & ~info_r.signaled)
                with m.Else():
                    m.next = "Commit-PSN"
        self.report_fields["Commit"] = (ErrBit.BUS_PAYLOAD, CqeStatus.PAYLOAD_READ_ERR)

        # Commit sends the packet's ADD_PSN itself when the cache takes it, else Commit-PSN does.
        # An unsignaled last packet retires right behind it: the SET_SQ_CI request goes out while
        # ADD_PSN's response is on its way (the cache answers them in order), and Retire-Both
        # takes the two responses.
        with m.State("Commit-PSN"):
            self.request(Op.ADD_PSN, self.commit_psns)
            with m.If(e.qpc_req.ready):
                psn_sent(self.commit_last & ~self.do_cqe)
        with m.State("Commit-PSN-Resp"):
            with m.If(e.qpc_resp.valid):
                self.take_resp()
                with m.If(self.commit_last):
                    m.next = "Complete"
                with m.Else():
                    m.next = "Send-Loop"
        with m.State("Retire-Next"):
            self.request(Op.SET_SQ_CI, Cat((self.commit_sq_ci + 1)[:16], self.commit_rd))
            with m.If(e.qpc_resp.valid):
                m.d.sync += self.resp_owed.eq(0)
                self.take_resp()
            with m.If(e.qpc_req.ready):
                m.next = "Retire-Both"
        with m.State("Retire-Both"):
            with m.If(e.qpc_resp.valid):
                ok = self.take_resp()
                with m.If(self.resp_owed):
                    m.d.sync += self.resp_owed.eq(0)
                with m.Else():
                    self.retired(ok)

    def retired(self, ok):
        m = self.m
        m.d.comb += [self.inc.wqe_count.eq(1), self.inc.wqe_errors.eq(self.retire_cnt == 1),
                     self.inc.flush_count.eq(self.retire_cnt == 2)]
        with m.If(~self.commit_draining):            # (drain_offset: set at Handoff, 0 on an error)
            m.d.sync += self.offset.eq(0)
        with m.If(self.retire_to == RET_SEND):
            m.next = "Send-Loop"
        with m.Else():
            m.next = "Loop"

    def completion_states(self):
        """Retire / fail: [SET_ERROR] -> [CQE] -> [SET_ERROR if the CQE was dropped] -> SET_SQ_CI;
        and D-End, the draining turn's end."""
        m, cqw = self.m, self.cqw
        with m.State("Fail-SetError"):
            with m.If(self.commit_state == QpState.ERROR):
                m.next = "Complete"
            with m.Else():
                m.next = "Set-Error"
        self.cache("Set-Error", Op.SET_ERROR, 0, self.goto("Complete"))

        with m.State("Complete"):
            with m.If(self.do_cqe):
                m.d.comb += [cqw.cmd.valid.eq(1), cqw.cmd.payload.eq(self.cq_cmd)]
                with m.If(cqw.cmd.ready):
                    m.next = "Complete-Wait"
            with m.Else():
                m.next = "Completed"
        with m.State("Complete-Wait"):
            m.d.comb += cqw.done.ready.eq(1)
            with m.If(cqw.done.valid):
                with m.If(cqw.done.payload.qp_error & (self.commit_state != QpState.ERROR)):
                    m.next = "Drop-SetError"
                with m.Else():
                    m.next = "Completed"
        self.cache("Drop-SetError", Op.SET_ERROR, 0, self.goto("Completed"))

        with m.State("Completed"):
            with m.If(self.retire_to == RET_DB):
                m.next = "DB-Schedule"
            with m.Else():
                m.next = "Retire"

        self.cache("Retire", Op.SET_SQ_CI, self.commit_sq_ci + 1, self.retired)

        # the draining turn's last commit is done: its QP goes back to the ready list (or leaves)
        with m.State("D-End"):
            m.d.comb += self.in_drain_end.eq(1)
            with m.If(self.drain_has_work):
                m.d.comb += self.ready.push_en.eq(1)
            with m.Else():
                m.d.comb += [self.ready.mark_en.eq(1), self.ready.mark_data.eq(0)]
            m.d.sync += [self.draining.eq(0), self.drain_squash.eq(0)]
            m.next = "Send-Loop"
