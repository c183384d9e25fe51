"""The control FSM's requester-update machine: Upd-Una, Upd-Req, Upd-Psn, Upd-Ci, Upd-Wake (state table:
:mod:`.control`).

The completer's result for a QP (:data:`rnic.hdl.requester.layouts.upd_layout`) is applied between turns, where
the model's requester acts (its turns are whole): ``una_psn`` (SET_UNA), the retry counts, ``req_wait`` and
``rd_pending`` (SET_REQ: less ``rd_dec``, or 0 on a move or an error), and a move of the send pointer (SET_PSN, SET_SQ_CI).
Upd-Wake then does what the model's ``_rewound`` and ``_wake`` do to the scheduler: a moved QP starts its
message again (a parked one loses its parked offset; a queued one is marked *rewound*, and its next turn
starts at offset 0), and a woken QP with work and no RNR wait is queued. ``upd`` is taken in Upd-Wake, so the
completer's next job reads a context that holds this one.
"""

from amaranth import Cat, Mux, Signal
from amaranth.hdl import Assert
from amaranth.lib.fifo import SyncFIFOBuffered

from ...model.timers import TimerKind
from ..qp_cache import Op, QpState
from ..requester.layouts import timer_layout
from ..requester.timers import ack_ticks

__all__ = ["UpdateStates"]


class UpdateStates:
    """Mixin of :class:`.control.Control`: the requester's updates."""

    def update_signals(self):
        e = self.e
        self.upd = Signal.like(e.upd.payload)
        self.upd_queue = Signal()

    def timer_arms(self):
        """An issued packet at ``una_psn`` of a reliable RC QP with a local ACK timeout arms its timer (the
        model's ``Requester.sent``): a command into a FIFO, from flags registered a clock before Issue."""
        m, e, ctx = self.m, self.e, self.ctx
        m.submodules.timer_fifo = fifo = SyncFIFOBuffered(width=timer_layout.size, depth=4)
        at_una, ticks = Signal(), Signal(31)
        m.d.sync += [at_una.eq(self.rel & (self.issue_psn == ctx.una_psn) & (ctx.ack_timeout != 0)),
                     ticks.eq(ack_ticks(ctx.ack_timeout))]
        cmd = Signal(timer_layout)
        m.d.comb += [cmd.qpn.eq(self.qpn), cmd.arm.eq(1), cmd.kind.eq(TimerKind.ACK), cmd.delay.eq(ticks),
                     fifo.w_data.eq(cmd), fifo.w_en.eq(self.info.w_en & at_una),
                     e.timer.valid.eq(fifo.r_rdy), e.timer.payload.eq(fifo.r_data), fifo.r_en.eq(e.timer.ready)]
        m.d.sync += Assert(~fifo.w_en | fifo.w_rdy, "engine: timer command FIFO full\n")

    def take_update(self):
        """From Idle: take ``upd`` into a register (the stream is answered in Upd-Wake)."""
        m, e = self.m, self.e
        m.d.sync += [self.upd.eq(e.upd.payload), self.qpn.eq(e.upd.payload.qpn)]
        m.next = "Upd-Una"

    def update_states(self):
        m, u, ctx, ready = self.m, self.upd, self.ctx, self.ready
        self.cache("Upd-Una", Op.SET_UNA, u.una_psn, self.goto("Upd-Req"))
        # rd_pending: 0 on a move or when the QP ends (the model's _rewind, flush_unacked), else less rd_dec
        req_arg = Cat(u.retry_cnt, Signal(1), u.rnr_retry_cnt, Signal(1), u.req_wait, u.move | u.error, u.rd_dec)

        def after_req(ok):
            with m.If(u.move):
                m.next = "Upd-Psn"
            with m.Else():
                m.next = "Upd-Sched"
        self.cache("Upd-Req", Op.SET_REQ, req_arg, after_req)
        self.cache("Upd-Psn", Op.SET_PSN, u.next_psn, self.goto("Upd-Ci"))
        self.cache("Upd-Ci", Op.SET_SQ_CI, u.sq_ci, self.goto("Upd-Sched"))

        # the QP's scheduled bit and parked offset (sched_qpn is qpn, set clocks ago); the verdict is
        # registered, Upd-Wake acts on it
        with m.State("Upd-Sched"):
            wake = (u.wake & (ctx.sq_ci != ctx.sq_pi) & ~ctx.req_wait &
                    ((ctx.state == QpState.RTS) | (ctx.state == QpState.ERROR)))
            m.d.sync += self.upd_queue.eq(wake & ~ready.scheduled)
            m.next = "Upd-Wake"
        with m.State("Upd-Wake"):
            m.d.comb += self.e.upd.ready.eq(1)
            with m.If(self.upd_queue):
                m.d.comb += [ready.push_en.eq(1), ready.mark_en.eq(1), ready.mark_data.eq(1)]
            with m.Elif(u.move & ~ready.scheduled):
                m.d.comb += [ready.mark_en.eq(1), ready.mark_data.eq(0)]       # parked: no offset kept
            with m.If(u.move & ready.scheduled):
                # queued: its entry's offset is stale (the ready list's rewound bit, cleared as its turn starts)
                m.d.comb += [ready.rew_en.eq(1), ready.rew_qpn.eq(self.qpn), ready.rew_data.eq(1)]
            m.next = "Idle"

    def turn_rewound(self, qpn):
        """The turn of ``qpn`` starts: a stale offset becomes 0 (and the mark is cleared). ``qpn`` is the
        ready list's ``rew_read_qpn`` since the clock before (``rewound_reads``)."""
        m, ready = self.m, self.ready
        with m.If(ready.rewound):
            m.d.sync += self.offset.eq(0)
            m.d.comb += [ready.rew_en.eq(1), ready.rew_qpn.eq(qpn), ready.rew_data.eq(0)]

    def rewound_reads(self, fsm):
        """The rewound bit read for the QP whose turn starts next: Handoff's (the lookahead's QP, from
        Handoff on), else the turn's own (``qpn``, set as Turn is entered); Asserts check that the
        address was the same the clock before each use."""
        m, ready, fetch = self.m, self.ready, self.fetch
        handoff = fsm.ongoing("Handoff") | fsm.ongoing("Handoff-Resp")
        m.d.comb += ready.rew_read_qpn.eq(Mux(handoff, fetch.la_qpn, self.qpn))
        last = Signal(24)
        m.d.sync += last.eq(ready.rew_read_qpn)
        for state in ("Turn-Resp", "Handoff-Resp"):
            m.d.sync += Assert(~fsm.ongoing(state) | (last == ready.rew_read_qpn),
                               f"engine: the rewound bit's address moved before {state}\n")
