"""The control FSM's issue machine: Send-Loop, Issue, Peek, Peek-Resp, Peek-Want, Peek-Go, Handoff,
Handoff-Resp (state table: :mod:`.control`)."""

from amaranth import Cat, Mux, Signal
from amaranth.hdl import Assert
from amaranth.lib import data

from ...model.qpc import ServiceType
from ..qp_cache import Op, QpState, Status, cached_layout
from .layouts import ring_layout
from .machine import has_work
from .wqe_fetch import ring_of, ring_slot

__all__ = ["IssueStates"]


class IssueStates:
    """Mixin of :class:`.control.Control`: packets out, the next turn's lookahead and the handoff."""

    def send_loop_state(self):
        """Send-Loop: the hub of a send chain. In priority: end the draining turn, commit, issue,
        peek, chain the next WQE, hand off, or leave the chain (Loop / Turn-End)."""
        m, e, fetch, ready = self.m, self.e, self.fetch, self.ready
        with m.State("Send-Loop"):
            committing = self.info.r_rdy & e.status.valid
            m.d.sync += self.commit_draining.eq(~self.drain_empty & committing)
            with m.If(self.draining & self.drain_empty):
                m.next = "D-End"
            with m.Elif(committing):
                m.next = "Commit"
            with m.Elif(self.can_issue & ~self.peek_first):
                m.next = "Issue"
            with m.Elif(self.peek_first | (self.can_peek & self.turn_ends & ~self.none_inflight & (fetch.pf_n == 0))):
                m.d.sync += self.peeked.eq(1)
                m.d.comb += [fetch.la_qpn_load.eq(1), fetch.la_qpn_from.eq(ready.head.payload.qpn)]
                m.next = "Peek"
            with m.Elif(self.can_chain):
                with m.If(fetch.pf_n == 0):
                    m.d.sync += self.chained.eq(1)
                    self.set_issue_ci(advance=True)
                    m.next = "Fetch"
                with m.Elif(fetch.wqe_valid):
                    # the oldest prefetched burst is WQE next_ci (the lookahead is the newest)
                    m.d.sync += self.chained.eq(1)
                    self.set_issue_ci(advance=True)
                    m.next = "Fetch-R"
            with m.Elif(self.turn_ends & self.la_rts & fetch.la_valid & (fetch.pf_n == fetch.la_cnt) &
                        ~self.draining & e.enable & ready.head.valid & ~e.doorbell.valid & ~e.cq_doorbell.valid &
                        ~e.upd.valid):
                m.next = "Handoff"
            with m.Elif(self.none_inflight):
                with m.If(self.squash | self.issued_last):
                    m.next = "Loop"
                with m.Else():
                    # the quota is used, or a hold stops the QP with quota left: parked
                    m.d.sync += [self.offset.eq(self.issue_off),
                                 self.blocked.eq(self.hold & (self.below_quota | self.solo))]
                    m.next = "Turn-End"

    def issue_state(self):
        """Issue: the descriptor, the payload command and the group entry, each on its own stream;
        the packet is in flight once all three have transferred."""
        m, e, seg = self.m, self.e, self.segment
        with m.State("Issue"):
            sent = self.sent
            m.d.sync += Assert(sent[0] | self.sgid_settled, "engine: a descriptor within two clocks of a new sgid_index\n")
            m.d.comb += [e.desc.valid.eq(~sent[0]), e.rd_cmd.valid.eq(~sent[1]), e.group.valid.eq(~sent[2])]
            now = Cat(sent[0] | e.desc.ready, sent[1] | e.rd_cmd.ready, sent[2] | e.group.ready)
            m.d.sync += sent.eq(now)
            with m.If(now.all()):
                m.d.comb += self.info.w_en.eq(1)
                m.d.sync += self.skip.eq(0)
                m.d.sync += [self.none_inflight.eq(0), self.window_room.eq(self.inflight != e.window - 1)]
                m.d.sync += [sent.eq(0), self.inflight.eq(self.inflight + 1),
                             self.steps_inflight.eq(self.steps_inflight + 1), self.below_quota.eq(self.below_quota_if_more),
                             self.issue_off.eq(self.issue_off + seg.seg), self.issue_psn.eq(self.issue_psn + seg.psns),
                             self.issued_last.eq(seg.last)]
                m.next = "Send-Loop"

    def lookahead_lookup(self, name):
        """State ``name``: look the lookahead's QP up; ``name``-Resp takes the response."""
        m = self.m
        with m.State(name):
            m.d.comb += self.fetching.eq(1)
            self.request(Op.LOOKUP, 0, who=self.fetch.la_qpn)
            with m.If(self.e.qpc_req.ready):
                m.d.sync += [self.resp_lookahead.eq(1), self.resp_handoff.eq(name == "Handoff")]
                m.next = f"{name}-Resp"

    def peek_states(self):
        """Peek looks the next turn's QP up; Peek-Resp registers the fields the lookahead needs;
        Peek-Want computes from them (the cache's response feeds only flip-flops, not the burst
        arithmetic); Peek-Go starts the lookahead's bursts."""
        m, e, fetch, quota = self.m, self.e, self.fetch, self.quota
        self.lookahead_lookup("Peek")
        la_rec = Signal(data.StructLayout({"state": QpState, "sq_ci": 16, "sq_pi": 16, "service": 8, "req_wait": 1}))
        la_ok = Signal()
        la_rec_ring = Signal(ring_layout)
        with m.State("Peek-Resp"):
            rec = data.View(cached_layout, e.qpc_resp.payload.record)
            m.d.comb += self.fetching.eq(1)
            with m.If(e.qpc_resp.valid):
                m.d.sync += [la_ok.eq(e.qpc_resp.payload.status == Status.OK),
                             [getattr(la_rec, f).eq(getattr(rec, f)) for f in la_rec.shape().members],
                             [getattr(la_rec_ring, k).eq(v) for k, v in ring_of(rec).items()]]
                m.next = "Peek-Want"
        # Peek-Want registers what Peek-Go needs of la_rec: the first burst's address, whether the
        # QP has work, and the WQEs it has posted capped by the quota
        la_posted_capped = Signal(16)
        la_go = Signal()
        la_first_addr = Signal(64)
        with m.State("Peek-Want"):
            avail = Signal(16)
            m.d.comb += [self.fetching.eq(1), avail.eq(la_rec.sq_pi - la_rec.sq_ci)]
            m.d.sync += [la_posted_capped.eq(Mux(avail < quota, avail, quota)), la_go.eq(la_ok & has_work(la_rec)),
                         la_first_addr.eq(ring_slot(m, la_rec_ring, la_rec.sq_ci)),
                         # (not onto a QP waiting out an RNR NAK: its turn ends at once, before the drain)
                         self.la_rts.eq(la_ok & (la_rec.state == QpState.RTS) & (la_rec.sq_ci != la_rec.sq_pi) &
                                        ~(e.reliable & (la_rec.service == ServiceType.RC) & la_rec.req_wait))]
            m.next = "Peek-Go"
        with m.State("Peek-Go"):
            # as many as the queue has room for (pf_n < prefetch_max here), the QP has posted and
            # the quota uses
            room = Signal(range(e.wqe_prefetch + 1))
            m.d.comb += [self.fetching.eq(1), fetch.la_offer.eq(1), fetch.la_first_addr.eq(la_first_addr),
                         fetch.la_first_short.eq(la_rec.service != ServiceType.UD),
                         room.eq(e.wqe_prefetch - fetch.pf_n),
                         fetch.la_want.eq(Mux(la_posted_capped < room, la_posted_capped, room)),
                         fetch.la_first_ci.eq(la_rec.sq_ci), fetch.la_first_ring.eq(la_rec_ring)]
            # (a prefetch raised in the clock that chose Peek may still hold the AR register, or
            # have taken the queue's last place: wait for the one, skip the lookahead for the other)
            with m.If(~(la_go & fetch.pf_valid)):
                with m.If(la_go & (fetch.pf_n != e.wqe_prefetch)):
                    m.d.comb += fetch.la_raise.eq(1)
                m.next = "Send-Loop"

    def handoff_states(self):
        """Handoff: the next turn starts on the ready list's head while this one drains beside it
        (D-End re-queues it). Only onto a QP in RTS (a flush's CQEs would pass this turn's), and
        only while no doorbell waits (doorbells are taken between turns)."""
        m, e, fetch, ready, ctx = self.m, self.e, self.fetch, self.ready, self.ctx
        self.lookahead_lookup("Handoff")
        with m.State("Handoff-Resp"):
            m.d.comb += self.fetching.eq(1)
            with m.If(e.qpc_resp.valid):
                # state and indices as Peek found them (la_rts): only that QP's own requests and
                # doorbells change them, and neither comes in between; only the status is new.
                # The ready list's head is la_qpn: Peek took la_qpn from it, Send-Loop went to
                # Handoff only with head.valid, and only Idle and this state pop it
                m.d.sync += Assert(ready.head.valid & (ready.head.payload.qpn == fetch.la_qpn),
                                   "engine: Handoff onto a QP that is not the ready list's head\n")
                with m.If(self.handoff_start):
                    m.d.comb += ready.head.ready.eq(1)
                    d = self.drain_ctx
                    m.d.sync += [self.draining.eq(1), self.drain_inflight.eq(self.inflight),
                                 self.drain_empty.eq(self.none_inflight), self.drain_qpn.eq(self.qpn),
                                 self.drain_squash.eq(0),
                                 d.state.eq(ctx.state), d.sq_ci.eq(ctx.sq_ci), d.sq_pi.eq(ctx.sq_pi), d.cqn.eq(ctx.cqn),
                                 self.drain_offset.eq(Mux(self.issued_last, 0, self.issue_off)),
                                 self.qpn.eq(fetch.la_qpn), self.offset.eq(ready.head.payload.offset),
                                 self.steps.eq(0), self.steps_at_quota.eq(0), self.steps_inflight.eq(0),
                                 self.below_quota.eq(1), self.peeked.eq(0), self.turn_flush.eq(0)]
                    self.turn_rewound(fetch.la_qpn)
                    m.next = "Loop"
                with m.Else():
                    m.d.sync += self.la_rts.eq(0)     # this turn ends the usual way
                    m.next = "Send-Loop"
