"""Descriptor engine: doorbells -> scheduler -> WQE fetch -> segmentation -> packets -> completions.

The behaviour is :class:`rnic.model.engine.EngineModel`'s (``docs/engine.md``); this file is its
hardware form. One control FSM does the work in the model's order:

* a **doorbell** (from the register block's FIFO) is checked against the QP context (read through
  the QP context cache), accepted (``SET_SQ_PI``) or rejected with an error CQE, and the QP joins
  the **ready list** (a FIFO of ``max_qps`` entries plus one *scheduled* bit per QP, so a QP is in it
  at most once);
* a **turn** pops the head QP, reads its context and does up to ``SCHED_QUOTA`` steps;
* a **send step** fetches the WQE (one burst on ``m_axi``: 64 bytes, or the first 40 of an RC or
  UC WQE, read again whole if it turns out inline), validates it and then **issues**
  packets: a header descriptor to the packet builder and a payload command to the payload reader,
  up to ``window`` packets ahead of their **commit**. A packet commits when the payload reader
  reports that all its data arrived; only then are its PSN (``ADD_PSN``) and counters updated, so a
  payload bus error leaves the QP exactly as the model does. Packets issued after a failing one
  are aborted by :class:`FrameGate` (``tuser``) and never counted;
* the window spans WQEs after an unsignaled WQE (its retire cannot fail the QP): the next WQE is
  fetched and issued while the earlier packets are in flight. A prefetcher reads up to
  ``wqe_prefetch`` WQEs ahead of such a chain; what the chain does not use is dropped (by the next
  in-order Fetch, or at Turn-End) and read again in order. After a signaled WQE the engine waits
  until it has retired (its CQE may overflow the CQ and move the QP to ERROR);
* once a turn has read every WQE it can use, **Peek** looks the next turn's QP (the ready list's
  head) up in the cache and reads its first WQEs, which that turn then takes instead of reading
  them again; with ``ctx_prefetch``, :class:`.ctx_prefetch.ContextPrefetch` names the QPs behind the
  head on ``qpc_prefetch`` beforehand, so that lookup hits;
* once a turn has issued its last packet, **Handoff** starts the next turn at once and the old
  one *drains* beside it: its commits use its own QPN and context fields (``drain_*``), and D-End
  re-queues it after the last. A QP that moves to ERROR ends its turn (the model's rule), so a
  draining turn needs nothing but its commits;
* completions go through the completion writer it shares with the responder (``cq``).

After reset the engine spends ``max_qps`` clocks clearing the scheduled bits (a memory, which a
reset does not clear) before it takes a doorbell; doorbells written meanwhile wait in the FIFO.
Doorbells are taken only between turns (a doorbell written during a turn takes effect at the next
turn boundary, which ``docs/engine.md`` allows). A partly sent message keeps its byte offset in its
ready-list entry; its WQE is read again at the next turn. Under CONTROL.RELIABLE an RC QP stops at the
requester's holds (window, ``max_rd_atomic``, FENCE, an RNR wait): its turn ends and it is *parked*,
its offset kept beside its scheduled bit until a doorbell queues it again. The requester's results
(``upd``) are applied between turns too (:mod:`.update_states`): its fields, a move of the send pointer
(a queued QP is then marked *rewound*: one bit per QP in the ready list's memory, its next turn starts at offset 0),
and the QP queued again.

The blocks (one file each): :class:`.ready_list.ReadyList`, :class:`.ctx_prefetch.ContextPrefetch`,
:class:`.wqe_fetch.WqeFetch`, :class:`.wqe_check.WqeCheck`, :class:`.segment.Segmenter`, the completion
writer, and the control FSM here, whose states form five machines (:mod:`.doorbell_states`, :mod:`.turn_states`,
:mod:`.issue_states`, :mod:`.commit_states`, :mod:`.update_states`), sharing the registers of :mod:`.machine`.

Control FSM
-----------
X-Resp is the state after X that takes the cache's response (``qpc_resp.ready`` is always 1).

| State | Entered from | Leaves to | Waits for |
|---|---|---|---|
| Clear | reset | Idle | the scheduled bits cleared (`max_qps` clocks) |
| Idle | Clear, CQ-DB-Wait, DB, DB-Lookup-Resp, DB-Queue, Drop, Turn-End, Upd-Wake | DB, CQ-DB, Upd-Una, Turn | a doorbell, else a CQ doorbell, else a requester update, else (enabled) a ready-list entry |
| CQ-DB | Idle | CQ-DB-Wait | the completion writer to take SET_CI |
| CQ-DB-Wait | CQ-DB | Idle | the completion writer's `done` |
| DB | Idle | DB-Lookup; Idle (QPN out of range) | one clock |
| DB-Lookup | DB | DB-Lookup-Resp | the cache to take LOOKUP |
| DB-Lookup-Resp | DB-Lookup | DB-Check; Idle (bus error) | the cache's response |
| DB-Check | DB-Lookup-Resp | DB-Range | one clock (ring fill and size registered) |
| DB-Range | DB-Check | DB-Verdict | one clock (verdict registered) |
| DB-Verdict | DB-Range | DB-SetPI; Fail-SetError (rejected: error CQE) | one clock |
| DB-SetPI | DB-Verdict | DB-SetPI-Resp | the cache to take SET_SQ_PI |
| DB-SetPI-Resp | DB-SetPI | DB-Schedule | the cache's response |
| DB-Schedule | DB-SetPI-Resp, Completed (rejected doorbell) | DB-Queue | one clock (the scheduled bit read) |
| DB-Queue | DB-Schedule | Idle | one clock (writes the ready list) |
| Turn | Idle | Turn-Resp | the cache to take LOOKUP |
| Turn-Resp | Turn | Loop; Drop (bus error) | the cache's response |
| Drop | Turn-Resp | Idle | no WQE burst outstanding (drops them) |
| Loop | Turn-Resp, Handoff-Resp, Send-Loop, Retire-Resp, Retire-Both | Fetch; Turn-End (quota used, ring empty, QP not RTS / flushing) | one clock |
| Fetch | Loop, Fetched (read again in full), Send-Loop (chain, nothing read ahead) | Fetch-R | older bursts dropped and the slot address current, or the lookahead is this WQE |
| Fetch-R | Fetch, Send-Loop (chain, WQE read ahead) | Fetched | the gathered WQE |
| Fetched | Fetch-R | Send-Loop, Fetch (inline read short), Complete (flush), Fail-SetError (bad WQE, bus error) | one clock |
| Send-Loop | Fetched, Issue, Peek-Go, Handoff-Resp, Commit, Commit-PSN-Resp, Retire-Resp, Retire-Both, D-End | D-End, Commit, Issue, Peek, Fetch, Fetch-R, Handoff, Loop, Turn-End (in that priority) | a payload status, room in the window and quota, the next WQE, or the last commit |
| Issue | Send-Loop | Send-Loop | `desc`, `rd_cmd` and `group` all transferred |
| Peek | Send-Loop | Peek-Resp | the cache to take LOOKUP of the ready list's head |
| Peek-Resp | Peek | Peek-Want | the cache's response |
| Peek-Want | Peek-Resp | Peek-Go | one clock (first address, posted WQEs registered) |
| Peek-Go | Peek-Want | Send-Loop | the AR register free, if the lookahead starts |
| Handoff | Send-Loop | Handoff-Resp | the cache to take LOOKUP of the ready list's head |
| Handoff-Resp | Handoff | Loop (next turn started, this one drains); Send-Loop (not started) | the cache's response |
| Commit | Send-Loop | Send-Loop (squashed), Fail-SetError (payload error), Retire-Next, Commit-PSN-Resp, Commit-PSN | one clock |
| Commit-PSN | Commit | Retire-Next, Commit-PSN-Resp | the cache to take ADD_PSN |
| Commit-PSN-Resp | Commit, Commit-PSN | Complete (last packet), Send-Loop | the cache's response |
| Retire-Next | Commit, Commit-PSN | Retire-Both | the cache to take SET_SQ_CI (ADD_PSN's response taken meanwhile) |
| Retire-Both | Retire-Next | Send-Loop, Loop | the responses still owed |
| Fail-SetError | DB-Verdict, Fetched, Commit | Set-Error; Complete (QP already in ERROR) | one clock |
| Set-Error | Fail-SetError | Set-Error-Resp | the cache to take SET_ERROR |
| Set-Error-Resp | Set-Error | Complete | the cache's response |
| Complete | Fetched, Fail-SetError, Set-Error-Resp, Commit-PSN-Resp | Complete-Wait; Completed (no CQE) | the completion writer to take the CQE |
| Complete-Wait | Complete | Completed; Drop-SetError (CQE dropped, QP not yet in ERROR) | the completion writer's `done` |
| Drop-SetError | Complete-Wait | Drop-SetError-Resp | the cache to take SET_ERROR |
| Drop-SetError-Resp | Drop-SetError | Completed | the cache's response |
| Completed | Complete, Complete-Wait, Drop-SetError-Resp | Retire; DB-Schedule (a rejected doorbell) | one clock |
| Retire | Completed | Retire-Resp | the cache to take SET_SQ_CI |
| Retire-Resp | Retire | Send-Loop, Loop | the cache's response |
| D-End | Send-Loop | Send-Loop | one clock (re-queues the draining turn's QP) |
| Turn-End | Loop, Send-Loop | Idle | only the lookahead's bursts outstanding (drops the rest) |
| Upd-Una | Idle | Upd-Una-Resp | the cache to take SET_UNA (a requester update, taken in Idle after the doorbells) |
| Upd-Una-Resp | Upd-Una | Upd-Req | the cache's response |
| Upd-Req | Upd-Una-Resp | Upd-Req-Resp | the cache to take SET_REQ |
| Upd-Req-Resp | Upd-Req | Upd-Psn (a move); Upd-Sched | the cache's response |
| Upd-Psn | Upd-Req-Resp | Upd-Psn-Resp | the cache to take SET_PSN |
| Upd-Psn-Resp | Upd-Psn | Upd-Ci | the cache's response |
| Upd-Ci | Upd-Psn-Resp | Upd-Ci-Resp | the cache to take SET_SQ_CI |
| Upd-Ci-Resp | Upd-Ci | Upd-Sched | the cache's response |
| Upd-Sched | Upd-Req-Resp, Upd-Ci-Resp | Upd-Wake | one clock (the wake verdict registered) |
| Upd-Wake | Upd-Sched | Idle | one clock (takes `upd`; queues, re-marks or un-parks the QP) |
"""

from amaranth import Cat, Module, Mux, Signal
from amaranth.hdl import Assert
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ...model.qpc import QpcCacheConfig
from ...model.regs import DATAPATH_WIDTHS
from ..bus import AXI4Signature
from ..completion import CqClientSignature, err_layout
from ..descriptor import DescriptorLayout
from ..fifo import BlockFIFO, check_credit
from ..prim import by_state
from ..qp_cache import cached_layout, request_layout, response_layout
from ..requester.layouts import timer_layout, upd_layout
from .commit_states import CommitStates
from .ctx_prefetch import ContextPrefetch
from .doorbell_states import DoorbellStates
from .issue_states import IssueStates
from .layouts import (cq_doorbell_layout, doorbell_layout, group_layout, inc_layout, info_layout, rd_cmd_layout,
                      status_layout)
from .machine import ControlBase, has_work
from .ready_list import ReadyList
from .segment import Segmenter
from .turn_states import TurnStates
from .update_states import UpdateStates
from .wqe_check import WqeCheck
from .wqe_fetch import WqeFetch, ring_of

__all__ = ["DescriptorEngine"]


class DescriptorEngine(wiring.Component):
    """The engine's control path (see the module docstring).

    Parameters
    ----------
    cache_cfg : QpcCacheConfig
        Of the QP context cache it talks to (for the request tag width).
    max_qps : int
        Power of two: QPNs the scheduler can hold (doorbells for ``qpn >= max_qps`` are rejected
        as DB_BAD_QPN, like ``qpn >= QPC_SIZE``).
    window : int
        Packets issued ahead of their commit.
    max_mtu : int
        Largest path MTU code (1 = 256 B .. 5 = 4096 B); a context asking for more is bad
        (LOC_QP_OP_ERR), as in the model.
    wqe_prefetch : int
        WQE bursts in flight at once (1..8): the first WQE of a chain and up to ``wqe_prefetch - 1``
        read ahead of it.
    deep_below : int
        Bytes: only a current WQE shorter than this reads more than one WQE ahead (``Rnic`` passes
        64 frame beats, ``8 * width``).
    wqe_width : int
        Data width of ``m_axi`` in bits, 64 .. 512: a WQE is one burst of ``512 / wqe_width``
        full-width beats (``Rnic`` passes its datapath width).
    ctx_prefetch : int
        0, or the places behind the ready list's head whose contexts ``qpc_prefetch`` names
        (:class:`.ctx_prefetch.ContextPrefetch`).

    Members
    -------
    doorbell, cq_doorbell : In(stream)
        From the register block; taken between turns.
    upd : In(stream of :data:`rnic.hdl.requester.layouts.upd_layout`)
        The requester's completer's results, applied between turns (:mod:`.update_states`); taken once
        applied.
    timer : Out(stream of :data:`rnic.hdl.requester.layouts.timer_layout`)
        Under CONTROL.RELIABLE, the local ACK timer armed as an RC QP's packet at ``una_psn`` is issued
        (nothing was outstanding, or a retransmission starts), through a 4-entry FIFO.
    qpc_req / qpc_resp : stream
        To / from :class:`rnic.hdl.qp_cache.QpCache`; one request outstanding at a time, except a
        commit's ADD_PSN and SET_SQ_CI back to back (two; the cache answers one QP in order).
        ``qpc_resp.ready`` is always 1: every accepted request leads straight into a state that
        takes its response in the clock it comes (the X-Resp states, Peek-Resp, Commit-PSN-Resp,
        Retire-Next, Retire-Both), so a response never waits, and the cache's pipeline never
        depends on the FSM's state. An ``Assert`` checks it in simulation.
    qpc_prefetch : Out(stream of 24-bit QPNs)
        Contexts to fetch into the QP cache ahead of their turns (``valid`` stays 0 without
        ``ctx_prefetch``); ``Rnic`` sends each as a LOOKUP and drops its response.
    m_axi : Out(AXI4Signature)
        WQE reads (one 64-byte burst each, ID 0); read only.
    cq : Out(:data:`rnic.hdl.completion.CqClientSignature`)
        Commands to the completion writer (shared with the responder through
        :class:`rnic.hdl.completion.CqShare`), its ``done`` and, while a command of ours runs, its reports.
    desc : Out(stream of DescriptorLayout)
        To the packet builder, one per packet, in wire order.
    sgid_index : Out(4); sgid_gid, sgid_mac, sgid_vlan_id, sgid_vlan_present : In
        The register block's SGID table entry for the turn's QP, read two clocks or more after
        ``sgid_index`` last changed (an ``Assert`` checks it in simulation): the register block's
        port is current only then.
    rd_cmd : Out(stream of :data:`rd_cmd_layout`), group : Out(stream)
        One each per packet, to the payload reader and to :class:`FrameGate`.
    status : In(stream)
        Per packet, in order, from :class:`FrameGate`: the payload read's result.
    err, inc, idle : Out
        To the register block; ``err`` and ``inc`` a clock after the event (flip-flops).
    """

    def __init__(self, cache_cfg: QpcCacheConfig, *, max_qps: int, window: int, max_mtu: int,
                 wqe_prefetch: int, deep_below: int, wqe_width: int, ctx_prefetch: int):
        if not isinstance(cache_cfg, QpcCacheConfig):
            raise TypeError(f"cache_cfg must be a QpcCacheConfig, not {cache_cfg!r}")
        self.cache_cfg = cache_cfg
        exact_log2(max_qps)
        if not 2 <= window <= 64:
            raise ValueError(f"window must be 2..64, not {window!r}")
        if max_mtu not in range(1, 6):
            raise ValueError(f"max_mtu must be a path MTU code 1..5, not {max_mtu!r}")
        if not 1 <= wqe_prefetch <= 8:
            raise ValueError(f"wqe_prefetch must be 1..8, not {wqe_prefetch!r}")
        self.max_qps, self.window, self.max_mtu, self.wqe_prefetch = max_qps, window, max_mtu, wqe_prefetch
        if wqe_width not in DATAPATH_WIDTHS:
            raise ValueError(f"wqe_width must be 64, 128, 256 or 512, not {wqe_width!r}")
        self.deep_below, self.wqe_width = deep_below, wqe_width
        if not 0 <= ctx_prefetch <= 8:
            raise ValueError(f"ctx_prefetch must be 0..8, not {ctx_prefetch!r}")
        self.ctx_prefetch = ctx_prefetch
        super().__init__({
            "enable": In(1), "reliable": In(1), "qpc_size": In(25), "quota": In(16), "port_lid": In(16),
            "sgid_index": Out(4), "sgid_gid": In(128), "sgid_mac": In(48), "sgid_vlan_id": In(12),
            "sgid_vlan_present": In(1),
            "doorbell": In(stream.Signature(doorbell_layout)),
            "cq_doorbell": In(stream.Signature(cq_doorbell_layout)),
            "upd": In(stream.Signature(upd_layout)),
            "timer": Out(stream.Signature(timer_layout)),
            "qpc_req": Out(stream.Signature(request_layout(cache_cfg))),
            "qpc_resp": In(stream.Signature(response_layout(cache_cfg))),
            "qpc_prefetch": Out(stream.Signature(24)),
            "m_axi": Out(AXI4Signature(addr_width=64, data_width=wqe_width, id_width=4)),
            "cq": Out(CqClientSignature),
            "desc": Out(stream.Signature(DescriptorLayout)),
            "rd_cmd": Out(stream.Signature(rd_cmd_layout)),
            "group": Out(stream.Signature(group_layout)),
            "status": In(stream.Signature(status_layout)),
            "err": Out(err_layout),
            "inc": Out(inc_layout),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cqw = self.cq
        m.submodules.ready = ready = ReadyList(self.max_qps)
        # per-packet bookkeeping between issue and commit
        m.submodules.info = info = BlockFIFO(width=info_layout.size, depth=self.window, fabric_out=True)
        m.submodules.fetch = fetch = WqeFetch(self.wqe_prefetch, self.wqe_width)
        wiring.connect(m, wiring.flipped(self.m_axi), fetch.m_axi)
        if self.ctx_prefetch:
            m.submodules.prefetch = pf = ContextPrefetch(self.max_qps, self.ctx_prefetch)
            m.d.comb += [pf.push.eq(ready.pushing), pf.push_qpn.eq(ready.pushed_qpn),
                         pf.pop.eq(ready.head.valid & ready.head.ready)]
            wiring.connect(m, pf.req, wiring.flipped(self.qpc_prefetch))
        Control(self, m, ready=ready, fetch=fetch, cqw=cqw, info=info).build()
        return m


class Control(ControlBase, DoorbellStates, TurnStates, IssueStates, CommitStates, UpdateStates):
    """The control FSM of :class:`DescriptorEngine` with the blocks around it (module docstring)."""

    def build(self):
        m = self.m
        self.blocks()
        self.quota_flags()
        self.reports()
        self.doorbell_signals()
        self.update_signals()
        self.timer_arms()
        self.decisions()
        with m.FSM(init="Clear") as fsm:
            self.idle_states()
            self.doorbell_states()
            self.update_states()
            self.turn_states()
            self.fetch_states()
            self.send_loop_state()
            self.issue_state()
            self.peek_states()
            self.handoff_states()
            self.commit_states()
            self.completion_states()
        self.after_fsm(fsm)

    def blocks(self):
        """The ready list, WQE check, segmenter and WQE fetch wired to the control's registers."""
        m, e, ctx, ready, fetch, info = self.m, self.e, self.ctx, self.ready, self.fetch, self.info
        m.d.comb += [ready.sched_qpn.eq(self.qpn),
                     ready.mark_qpn.eq(Mux(self.in_drain_end, self.drain_qpn, self.qpn))]
        self.info_r = data.View(info_layout, info.r_data)
        self.info_w = Signal(info_layout)

        m.submodules.segment = seg = self.segment = Segmenter()
        m.d.comb += [seg.ctx.eq(ctx), seg.wqe.eq(self.wqe), seg.qpn.eq(self.qpn), seg.issue_off.eq(self.issue_off),
                     seg.issue_psn.eq(self.issue_psn), seg.port_lid.eq(e.port_lid), seg.sgid_gid.eq(e.sgid_gid),
                     seg.sgid_mac.eq(e.sgid_mac), seg.sgid_vlan_id.eq(e.sgid_vlan_id),
                     seg.sgid_vlan_present.eq(e.sgid_vlan_present),
                     e.desc.payload.eq(seg.desc), e.rd_cmd.payload.eq(seg.rd_cmd), self.info_w.eq(seg.info),
                     self.info_w.signaled.eq(self.cqe_stop), self.info_w.rd_inc.eq(self.rel & self.request_op),
                     self.info_w.psns.eq(seg.info.psns + self.skip),
                     info.w_data.eq(self.info_w),
                     # the turn's first packet in flight
                     e.group.payload.start.eq(self.inflight == self.drain_inflight)]

        # The WQE's check against its QP, made on the WQE as it is gathered and registered with it
        # (Fetch-R): the context fields it reads do not change within a turn.
        m.submodules.check = check = self.check = WqeCheck(e.max_mtu)
        m.d.comb += [check.ctx.eq(ctx), check.wqe.eq(fetch.wqe), check.mtu.eq(seg.mtu)]

        m.d.comb += [fetch.ring.eq(self.ctx_ring), fetch.sq_pi.eq(ctx.sq_pi), fetch.ud.eq(self.ud),
                     fetch.qpn.eq(self.qpn), fetch.full_read.eq(self.full_read)]

        # the SGID entry of the turn's QP: the register block's port is current two clocks after
        # sgid_index changes (sgid_settled: the same for three clocks; for an Assert in Issue)
        m.d.comb += e.sgid_index.eq(ctx.sgid_index[:4])
        sgid_last, sgid_same = Signal(4), Signal()
        self.sgid_settled = (sgid_last == e.sgid_index) & sgid_same
        m.d.sync += [sgid_last.eq(e.sgid_index), sgid_same.eq(sgid_last == e.sgid_index)]

    def quota_flags(self):
        """The quota, and the compares against it kept as flip-flops beside the counters. While a
        requester update waits the quota is 1: the turn ends after its next step, so the update is
        applied (and the completer takes its next response) within a packet, not a quota, of
        sending."""
        m, e = self.m, self.e
        self.quota = quota = Signal(17, init=1)
        quota_in = Mux((e.quota == 0) | e.upd.valid, 1, e.quota)
        self.quota_moves = Signal()              # the quota changes at the next edge
        m.d.comb += self.quota_moves.eq(quota_in != quota)
        m.d.sync += quota.eq(quota_in)           # a register: off the compares
        # steps_inflight < quota as a flip-flop, set with steps_inflight from compares of its
        # current value (below_quota is exact against the quota of a clock before: quota_prev)
        self.quota_prev, self.quota_less1 = quota_prev, quota_less1 = Signal(17, init=1), Signal(17)
        m.d.sync += [quota_prev.eq(quota), quota_less1.eq(quota_in - 1)]
        si = self.steps_inflight
        self.below_quota = Signal(init=1)
        self.below_quota_if_same = si < quota        # its next value if steps_inflight stays,
        self.below_quota_if_less = si <= quota       # ... goes down by one,
        self.below_quota_if_more = si < quota_less1  # ... or up by one
        m.d.sync += [self.below_quota.eq(self.below_quota_if_same),
                     Assert(self.below_quota == (si < quota_prev), "engine: below_quota\n")]
        self.steps_at_quota = Signal()           # steps >= quota_prev, the same way
        m.d.sync += [self.steps_at_quota.eq(self.steps >= quota),
                     Assert(self.steps_at_quota == (self.steps >= quota_prev), "engine: steps_at_quota\n")]

    def reports(self):
        """Error reports and counter increments: the FSM's (report()) or the completion writer's.
        The completion writer reports only while the FSM waits for it (cq_wait), where the FSM
        reports nothing."""
        m, err, inc, cqw = self.m, self.err, self.inc, self.cqw
        m.d.comb += [
            err.valid.eq(cqw.err.valid | self.fsm_err),
            err.bit.eq(Mux(self.cq_wait, cqw.err.bit, self.fsm_bit)),
            err.qpn.eq(Mux(self.cq_wait, cqw.err.qpn, self.commit_qpn)),
            err.status.eq(Mux(self.cq_wait, cqw.err.status, self.fsm_status)),
            inc.cqe_count.eq(cqw.inc_cqe_count), inc.cqe_drops.eq(cqw.inc_cqe_drops),
            inc.bus_errors.eq(cqw.inc_bus_errors + self.bus_err_fsm),
        ]

    def after_fsm(self, fsm):
        """What decodes the FSM's state: report fields, the response checks, the context loads."""
        m, e, ctx, fetch, ready, cqw = self.m, self.e, self.ctx, self.fetch, self.ready, self.cqw
        fields = self.report_fields
        m.d.comb += [self.fsm_bit.eq(by_state(fsm, {st: b for st, (b, _) in fields.items()})),
                     self.fsm_status.eq(by_state(fsm, {st: v for st, (_, v) in fields.items()}))]
        m.d.comb += self.cq_wait.eq(fsm.ongoing("Complete-Wait") | fsm.ongoing("CQ-DB-Wait"))
        m.d.sync += Assert(~cqw.err.valid | self.cq_wait, "engine: a completion writer report outside its wait\n")
        m.d.comb += fetch.fetch_state.eq(fsm.ongoing("Fetch"))
        self.rewound_reads(fsm)

        # qpc_resp.ready is 1 (see request()): a response outside these states would be lost. An
        # assertion in simulation (Verilator --assert); synthesis removes it.
        resp = e.qpc_resp
        m.d.sync += Assert(~resp.valid | Cat(*(fsm.ongoing(s) for s in self.resp_states)).any(),
                           "engine: QP cache response in a state that does not take it\n")
        # ctx / drain_ctx from the response: every turn's own response (take_resp()), and Handoff's
        # when it starts the new turn (handoff_start, on which Handoff-Resp pops the ready list)
        rec = data.View(cached_layout, resp.payload.record)
        load_ctx = ([ctx.eq(rec), self.ci_at_pi.eq(rec.sq_ci == rec.sq_pi)] +
                    [getattr(self.ctx_ring, k).eq(v) for k, v in ring_of(rec).items()])
        with m.If(self.handoff_start & self.resp_handoff):
            m.d.sync += load_ctx
        with m.Elif(self.resp_ok & ~self.resp_lookahead & self.commit_draining):
            d = self.drain_ctx
            m.d.sync += [d.state.eq(rec.state), d.sq_ci.eq(rec.sq_ci), d.sq_pi.eq(rec.sq_pi), d.cqn.eq(rec.cqn)]
        with m.Elif(self.resp_ok & ~self.resp_lookahead):
            m.d.sync += load_ctx
        # (Loop: a Handoff has just loaded the new turn's ctx; pf_raise waits there for la_valid)
        m.d.comb += fetch.uses_ring.eq(self.sending & ~self.fetching & ~fsm.ongoing("Loop"))
        m.d.sync += Assert(self.ci_at_pi == (ctx.sq_ci == ctx.sq_pi), "engine: ci_at_pi\n")
        la_resp_states = ("Peek-Resp", "Handoff-Resp")
        m.d.sync += Assert(~resp.valid | (self.resp_lookahead == Cat(*(fsm.ongoing(s) for s in la_resp_states)).any()),
                           "engine: a lookahead response outside Peek-Resp / Handoff-Resp, or the reverse\n")
        m.d.sync += Assert(~resp.valid | (self.resp_handoff == fsm.ongoing("Handoff-Resp")),
                           "engine: Handoff's response flag differs\n")

        # The ready list's write data by state alone (its enable carries the conditions), and
        # has_work() of ctx / drain_ctx a clock old: Turn-End and D-End are entered from Loop and
        # Send-Loop, which take no cache response, so neither context changed on the way in.
        m.d.comb += ready.push_data.eq(Mux(self.in_drain_end, Cat(self.drain_qpn, self.drain_offset),
                                           Cat(self.qpn, Mux(fsm.ongoing("DB-Queue"), ready.parked_offset,
                                                             Mux(fsm.ongoing("Upd-Wake"),
                                                                 Mux(self.upd.move, 0, ready.parked_offset),
                                                                 self.offset)))))
        m.d.comb += ready.mark_offset.eq(Mux(fsm.ongoing("Turn-End") & self.blocked, self.offset, 0))
        m.d.sync += [self.ctx_has_work.eq(has_work(ctx)), self.drain_has_work.eq(has_work(self.drain_ctx))]
        m.d.sync += Assert((self.ctx_has_work == has_work(ctx)) | ~fsm.ongoing("Turn-End"),
                           "engine: Turn-End's registered has_work differs\n")
        m.d.sync += Assert((self.drain_has_work == has_work(self.drain_ctx)) | ~self.in_drain_end,
                           "engine: D-End's registered has_work differs\n")
        check_credit(m, self.info, "engine: in-flight packets (the window)", read=True)

        # ready.empty, not head.valid: an entry written in Turn-End reaches head.valid clocks later
        m.d.comb += e.idle.eq(fsm.ongoing("Idle") & ready.empty & ~ready.pushing & ~e.doorbell.valid &
                              ~e.cq_doorbell.valid & ~e.upd.valid & (fetch.pf_n == 0))
