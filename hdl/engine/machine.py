"""The control FSM's shared registers, flags and helpers (:class:`ControlBase`).

The states themselves are in :mod:`.doorbell_states`, :mod:`.turn_states` and
:mod:`.commit_states`, mixed into :class:`.control.Control`; this class holds what they share.
"""

from amaranth import Cat, Mux, Signal
from amaranth.hdl import Assert
from amaranth.lib import data
from amaranth.utils import exact_log2

from ...model.engine import REQUEST_OPS, WINDOW
from ...model.qpc import ServiceType
from ..completion import CqOp, cq_cmd_layout, err_layout
from ..qp_cache import QpState, Status, cached_layout
from .layouts import drain_ctx_layout, in_set, inc_layout, ring_layout, wqe_layout
from .wqe_fetch import ring_of

__all__ = ["ControlBase", "RET_LOOP", "RET_SEND", "RET_DB"]

#: Where a retire goes back to: Loop, Send-Loop, or a doorbell's DB-Schedule (no retire).
RET_LOOP, RET_SEND, RET_DB = 0, 1, 2


def has_work(qp):
    """The QP of context ``qp`` goes (back) into the ready list: WQEs posted, RTS or ERROR."""
    return (qp.sq_ci != qp.sq_pi) & ((qp.state == QpState.RTS) | (qp.state == QpState.ERROR))


class ControlBase:
    """The registers of the control FSM, the conditions Send-Loop and the prefetcher decide on
    (:meth:`decisions`), and the helpers its states use.

    ``engine`` is the :class:`DescriptorEngine` (its ports), ``m`` the module being elaborated;
    ``ready`` (:class:`.ready_list.ReadyList`), ``fetch`` (:class:`.wqe_fetch.WqeFetch`), ``cqw``
    (:class:`rnic.hdl.completion.CqeWriter`) and ``info`` (the in-flight queue) are its blocks.
    """

    def __init__(self, engine, m, *, ready, fetch, cqw, info):
        self.e, self.m, self.ready, self.fetch, self.cqw, self.info = engine, m, ready, fetch, cqw, info
        window = engine.window
        # --- the turn ---------------------------------------------------------------------------
        self.qpn = Signal(24)
        self.pi = Signal(16)           # a doorbell's producer index
        self.ctx = Signal(cached_layout)
        self.wqe_bits = Signal(512)
        self.wqe = data.View(wqe_layout, self.wqe_bits)
        self.offset = Signal(32)       # byte offset of the current message (partial messages)
        self.steps = Signal(17)        # packets and WQEs of this turn, saturating above any quota
        self.flush_mode = Signal()
        self.wqe_bus_err = Signal()    # the current WQE's read had a bus error
        self.turn_flush = Signal()     # the QP was in ERROR when its turn began: the turn flushes

        self.issue_off = Signal(32)
        self.issue_psn = Signal(24)
        self.chained = Signal()        # this fetch overlaps the previous WQE's packets in flight
        self.chain_block = Signal()    # a chained fetch failed: drain, then fetch it again in order
        self.sending = Signal()        # a send chain is on (from its first Fetched to Loop / Turn-End)
        self.inflight = Signal(range(window + 1))
        self.steps_inflight = Signal(18)   # steps + inflight, a register beside them
        self.squash = Signal()         # a packet of this turn failed: the later ones are not counted
        self.issued_last = Signal()    # the current WQE's last packet is issued
        self.sent = Signal(3)          # desc, rd_cmd, group transferred in this Issue

        # The draining turn (*handoff*): once a turn has issued its last packet, the next turn starts
        # while the old one's packets are still in flight. The old turn keeps only what its commits
        # need: its QPN, the context fields they read or change, the re-queue offset, its own squash.
        self.draining = Signal()       # a draining turn exists (until D-End re-queues its QP)
        self.drain_inflight = Signal(range(window + 1))   # its packets in flight: always the oldest
        self.drain_qpn = Signal(24)
        self.drain_ctx = Signal(drain_ctx_layout)
        self.drain_offset = Signal(32)
        self.drain_squash = Signal()
        self.commit_draining = Signal()    # the packet being committed (and its retire) is the old turn's

        # --- completion to write / retire ---------------------------------------------------------
        self.cq_cmd = Signal(cq_cmd_layout)
        self.do_cqe = Signal()
        self.retire_to = Signal(2)     # RET_LOOP, RET_SEND or RET_DB
        self.retire_cnt = Signal(2)    # 0: none, 1: wqe_errors, 2: flush_count
        self.commit_psns = Signal(24)  # PSNs the committing packet consumed
        self.commit_last = Signal()
        self.commit_rd = Signal()      # the committing packet's retire adds one to rd_pending
        self.resp_owed = Signal()      # Retire-Both: ADD_PSN's response is still to come

        # --- reports and counters: out through flip-flops, a clock after the event -----------------
        self.err = Signal(err_layout)
        self.inc = Signal(inc_layout)
        m.d.sync += [engine.err.eq(self.err), engine.inc.eq(self.inc)]
        self.fsm_err = Signal()
        self.fsm_bit, self.fsm_status = Signal.like(self.err.bit), Signal.like(self.err.status)
        self.cq_wait = Signal()        # the FSM waits for the completion writer (set after the FSM)
        self.bus_err_fsm = Signal()

        # the commit path's QP: the draining turn's while it commits one of its packets
        self.commit_qpn, self.commit_state = Signal(24), Signal(4)
        self.commit_sq_ci, self.commit_cqn = Signal(16), Signal(24)
        drain, ctx, dctx = self.commit_draining, self.ctx, self.drain_ctx
        m.d.comb += [self.commit_qpn.eq(Mux(drain, self.drain_qpn, self.qpn)),
                     self.commit_state.eq(Mux(drain, dctx.state, ctx.state)),
                     self.commit_sq_ci.eq(Mux(drain, dctx.sq_ci, ctx.sq_ci)),
                     self.commit_cqn.eq(Mux(drain, dctx.cqn, ctx.cqn))]

        # --- the ready list's writes --------------------------------------------------------------
        self.in_drain_end = Signal()   # the FSM is in D-End (the write is the draining turn's)

        # --- derived values of the current QP and WQE (registered where the FSM's paths need it) --
        self.ud = Signal()
        m.d.comb += self.ud.eq(ctx.service == ServiceType.UD)
        # CONTROL.RELIABLE on an RC QP: no CQE when a WQE is sent, and the requester's holds
        self.rel = Signal()
        m.d.comb += self.rel.eq(engine.reliable & (ctx.service == ServiceType.RC))
        self.cqe_stop = Signal()       # the current WQE writes a CQE when it retires successfully
        self.request_op = in_set(self.wqe.opcode, REQUEST_OPS)
        m.d.comb += self.cqe_stop.eq(self.wqe.flags[0] & ~self.rel)
        self.blocked = Signal()        # the turn ends on a hold: its QP is parked, not queued again
        self.ci_at_pi = Signal(init=1)     # ctx.sq_ci == ctx.sq_pi, loaded with ctx
        self.ctx_ring = Signal(ring_layout, init={"hi1": 1})   # the SQ ring of ctx, loaded with it
        m.d.sync += Assert(self.ctx_ring.as_value() == Cat(*(v for v in ring_of(ctx).values())),
                           "engine: the registered SQ ring differs from ctx\n")
        self.wqe_status = Signal(8)    # WqeCheck's verdict, registered with the WQE
        self.wqe_bad = Signal()        # wqe_status != 0
        self.wqe_short = Signal()      # wqe_bits was read short (bytes 40..63 are not this WQE's)
        self.wqe_deep = Signal()       # wqe.length < deep_below, registered with the WQE
        self.full_read = Signal()      # Fetch reads the WQE in full (an inline WQE read short)
        self.fetching = Signal()       # Fetch, Fetch-R, Fetched, Peek, Handoff: the prefetcher waits
        self.offset_was_zero = Signal()    # offset == 0 a clock ago: Fetched comes two clocks at
        m.d.sync += self.offset_was_zero.eq(self.offset == 0)   # least after offset changes
        # una_psn ahead of next_psn (a go-back rewound the send pointer; at most the window apart): the
        # PSNs and bytes the turn's first WQE skips, from ctx a clock ago (ctx is stable clocks before Fetched)
        self.skip_ok, self.skip_psns, self.skip_off = Signal(), Signal(8), Signal(32)
        ahead = Signal(24)
        m.d.comb += ahead.eq(ctx.una_psn - ctx.next_psn)
        m.d.sync += [self.skip_ok.eq(~ahead[23] & (ahead[8:] == 0)), self.skip_psns.eq(ahead[:8]),
                     self.skip_off.eq(ahead[:8] << (ctx.path_mtu[:3] + 7))]
        self.skip = Signal(8)          # PSNs the next packet's commit adds beyond its own
        self.ctx_has_work = Signal()   # has_work(ctx) a clock ago
        self.drain_has_work = Signal() # has_work(drain_ctx) a clock ago

        # --- the lookahead's lookup (Peek) --------------------------------------------------------
        self.peeked = Signal()
        self.la_rts = Signal()         # the peeked QP was in RTS: the next turn may start by Handoff

        # --- cache responses ----------------------------------------------------------------------
        # Which request the cache answers next: a lookahead lookup (Peek, Handoff) or one of the
        # turn's own. Responses come only in the states that wait for them (an Assert checks it), so
        # ``ctx`` and ``drain_ctx`` load from the response on these flags and the response's status
        # alone, with no state decode in their enables (load_contexts).
        self.resp_lookahead = Signal()
        self.resp_handoff = Signal()
        self.resp_ok = Signal()
        self.handoff_start = Signal()  # Handoff-Resp starts the new turn (an OK answer, no doorbell)
        resp = engine.qpc_resp
        m.d.comb += [resp.ready.eq(1),
                     self.resp_ok.eq(resp.valid & (resp.payload.status == Status.OK)),
                     self.handoff_start.eq(self.resp_ok & ~engine.doorbell.valid & ~engine.cq_doorbell.valid &
                                           ~engine.upd.valid)]
        with m.If(resp.valid):
            m.d.sync += [self.resp_lookahead.eq(0), self.resp_handoff.eq(0)]
        # the states that take a cache response as it comes (checked after the FSM)
        self.resp_states = ["Peek-Resp", "Handoff-Resp", "Commit-PSN-Resp", "Retire-Next", "Retire-Both"]
        self.report_fields = {}

    def decisions(self):
        """The Send-Loop's and the prefetcher's conditions, from registered flags."""
        m, e, ctx, fetch, ready, wqe = self.m, self.e, self.ctx, self.fetch, self.ready, self.wqe
        window, prefetch_max = e.window, e.wqe_prefetch
        # nobody else waits: the turn goes on past its quota (round robin over one QP is that QP, and
        # a turn boundary would drain the window and read the WQE again). A requester update waits
        # like a doorbell: it is applied between turns, and the receive path's completer holds its next
        # response until then. A flip-flop, a clock late: a doorbell is seen as if it had come a clock
        # later (doorbells wait for the turn's end anyway); the engine's own ready-list writes and
        # draining make it 0 before they could be missed.
        self.solo = Signal()
        m.d.sync += self.solo.eq(ready.empty & ~ready.pushing & ~e.doorbell.valid & ~e.cq_doorbell.valid &
                                 ~e.upd.valid & ~self.draining)
        # inflight < window, inflight == 0 and drain_inflight == 0 as flip-flops, set with the counters
        self.window_room, self.none_inflight, self.drain_empty = Signal(init=1), Signal(init=1), Signal(init=1)
        m.d.sync += [Assert(self.window_room == (self.inflight < window), "engine: window_room\n"),
                     Assert(self.none_inflight == (self.inflight == 0), "engine: none_inflight\n"),
                     Assert(self.drain_empty == (self.drain_inflight == 0), "engine: drain_empty\n")]
        # The requester's holds (CONTROL.RELIABLE, an RC QP; the model's _send): the window of WINDOW
        # PSNs past una_psn, a READ or atomic while rd_pending is at max_rd_atomic, and a FENCE WQE's
        # first packet while anything is unacknowledged. A READ, atomic or FENCE WQE is never chained
        # (Fetched drains first), so ctx holds every earlier commit when they are judged.
        ahead = Signal(24)
        m.d.comb += ahead.eq(self.issue_psn - ctx.una_psn)
        self.hold = Signal()
        m.d.comb += self.hold.eq(self.rel & (
            (~ahead[23] & (ahead[exact_log2(WINDOW):23] != 0)) |
            (self.request_op & (ctx.rd_pending >= ctx.max_rd_atomic)) |
            (wqe.flags[2] & (self.issue_off == 0) & (ahead != 0))))
        self.can_issue = ~self.squash & ~self.issued_last & self.room() & ~self.hold
        # The next WQE may start before this one retires only if this one writes no CQE: a CQE can
        # overflow or be dropped, which moves the QP to ERROR before the next WQE (model order).
        # The ring compares (fetch.*_at_pi) are flip-flops computed from the clock before: next_ci
        # and pf_ci change only in Loop, Fetch and Send-Loop (which leave for Fetch or Fetch-R) and
        # with pf_raise (then pf_valid blocks every user for a clock), ctx.sq_pi only when a turn
        # starts; their users run while sending and not fetching, two clocks at least after such a
        # change (Asserts in WqeFetch).
        chainable = ~self.chain_block & ~self.cqe_stop & (ctx.state == QpState.RTS) & ~fetch.next_ci_at_pi
        # (not onto the next turn's lookahead burst: a chain that needs another read goes through Loop)
        self.can_chain = (~self.squash & self.issued_last & chainable & self.room() &
                          ~(fetch.la_valid & (fetch.pf_n == fetch.la_cnt)))
        # The prefetcher runs ahead of the chain while the current WQE is unsignaled and the quota
        # leaves room for one more WQE (a guess: a prefetched WQE may be signaled, or the chain may stop).
        pf_depth = Mux(self.wqe_deep, prefetch_max, 1)
        # the quota's WQEs are all read: each WQE read ahead takes one step at least, and so does the
        # current WQE's next packet if it has one. A flip-flop, a clock late; ``quota_stale`` marks
        # the clock after one of its inputs may have changed (an Issue, a Commit, a Fetch state, a
        # burst raised or taken), and neither the prefetcher nor Peek acts on it then (acting on a
        # stale "not yet" reads a WQE past the quota, which is dropped and read again)
        self.quota_stale = quota_stale = Signal(init=1)
        m.d.sync += quota_stale.eq(fetch.bursts_moved | self.fetching | self.info.w_en | self.info.r_en |
                                   self.quota_moves)
        quota_read = Signal()
        quota_read_now = self.steps_inflight + fetch.pf_n + ~self.issued_last >= self.quota
        m.d.sync += quota_read.eq(quota_read_now)
        m.d.sync += Assert(~self.sending | quota_stale | (quota_read == quota_read_now),
                           "engine: quota_read stale while quota_stale is low\n")
        m.d.comb += fetch.pf_raise.eq(self.sending & ~self.fetching & ~fetch.la_valid & chainable & ~self.squash &
                                      ~fetch.pf_valid & ~quota_stale & (fetch.pf_n < pf_depth) &
                                      ~fetch.pf_ci_at_pi & (~quota_read | self.solo) &
                                      ~self.hold)   # (a hold ends the turn: nothing to read ahead for)
        # the turn reads no more WQEs: the rest of its quota or of its ring has been read ahead (or
        # is the current WQE), so the next turn's first WQE can be read (Peek) while it issues
        reads_done = (self.sending & ~self.squash & ~self.chain_block & (ctx.state == QpState.RTS) &
                      (~self.cqe_stop | fetch.next_ci_at_pi) &
                      (fetch.pf_ci_at_pi | (quota_read & ~quota_stale & ~self.solo)))
        # Peek may look the next turn's QP up. Once the turn reads no more WQEs it goes before the
        # next Issue: the lookahead's AR then leaves ahead of that packet's payload bursts, not
        # behind them (which matters for large packets at a long memory latency)
        self.can_peek = ~self.peeked & ready.head.valid & ~fetch.pf_valid & (fetch.pf_n < prefetch_max)
        self.peek_first = self.can_peek & reads_done
        # the turn issues nothing more: only its commits (and retires) are left
        self.turn_ends = (~self.squash & ~self.chain_block &
                          ((~self.below_quota & ~self.solo) | (self.issued_last & fetch.next_ci_at_pi)))

    # --- helpers the states use ---------------------------------------------------------------------
    def goto(self, state):
        def f(ok):
            self.m.next = state
        return f

    def report(self, bit, status=0):
        """Raise ``fsm_err``; its fields come from the state alone (``report_fields``, after the FSM),
        so only the valid bit waits for the decision. An Assert checks that they agree."""
        self.m.d.comb += self.fsm_err.eq(1)
        self.m.d.sync += Assert((self.fsm_bit == bit) & (self.fsm_status == status),
                                "engine: report fields by state\n")

    def request(self, op_, arg, who=None):
        """Drive a cache request in this clock (it transfers on ``qpc_req.ready``). The FSM must go
        from here to a state that takes the response as it comes (``qpc_resp.ready`` is 1)."""
        req = self.e.qpc_req
        who = self.commit_qpn if who is None else who
        self.m.d.comb += [req.valid.eq(1), req.payload.op.eq(op_), req.payload.qpn.eq(who),
                          req.payload.arg.eq(arg)]

    def take_resp(self):
        """Take a cache response (valid in this clock); an OK one reloads ``ctx`` (``drain_ctx`` for
        the draining turn's commit, in load_contexts). Returns ok."""
        return self.e.qpc_resp.payload.status == Status.OK

    def cache(self, name, op_, arg, on_resp):
        """States ``name`` (request) and ``name``-Resp; ``on_resp(ok)`` runs with the response."""
        m = self.m
        self.resp_states.append(f"{name}-Resp")
        with m.State(name):
            self.request(op_, arg)
            with m.If(self.e.qpc_req.ready):
                m.next = f"{name}-Resp"
        with m.State(f"{name}-Resp"):
            with m.If(self.e.qpc_resp.valid):
                on_resp(self.take_resp())

    def set_cqe(self, status, with_wqe=True, byte_len=0, src=None):
        src = self.wqe if src is None else src
        c = self.cq_cmd
        self.m.d.sync += [c.op.eq(CqOp.CQE), c.cqn.eq(self.commit_cqn), c.qpn.eq(self.commit_qpn),
                          c.status.eq(status), c.wqe_index.eq(self.commit_sq_ci), c.byte_len.eq(byte_len),
                          c.wr_id.eq(src.wr_id if with_wqe else 0), c.opcode.eq(src.opcode if with_wqe else 0)]

    def count_step(self, committed=False):
        """One more step in this turn; ``committed``: a packet in flight leaves with it."""
        steps, si = self.steps, self.steps_inflight
        self.m.d.sync += [
            steps.eq(steps + ~steps[-1]), si.eq(si + ~steps[-1] - committed),
            self.steps_at_quota.eq(steps[-1] | (steps >= self.quota_less1)),
            self.below_quota.eq(Mux(steps[-1], self.below_quota_if_less, self.below_quota_if_same) if committed
                                else Mux(steps[-1], self.below_quota_if_same, self.below_quota_if_more))]

    def room(self):
        """The window and the quota allow one more packet."""
        return self.window_room & (self.below_quota | self.solo)

    def set_issue_ci(self, advance):
        """The WQE to issue next: the turn's first (``ctx.sq_ci``) or the next of a chain."""
        f = self.fetch
        self.m.d.comb += [f.issue_advance.eq(1)] if advance else [f.issue_restart.eq(1), f.issue_from.eq(self.ctx.sq_ci)]

    def drop_lookahead(self):
        self.m.d.comb += self.fetch.la_drop.eq(1)
