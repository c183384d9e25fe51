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
  them again;
* once a turn has issued its last packet, **Handoff** starts the next turn at once and the old
  one *drains* beside it: its commits use its own QPN and context fields (``cd``), and D-End
  re-queues it after the last. A QP that moves to ERROR ends its turn (the model's rule), so a
  draining turn needs nothing but its commits;
* completions go through :class:`rnic.hdl.completion.CqeWriter`.

After reset the engine spends ``max_qps`` clocks clearing the scheduled bits (a memory, which a
reset does not clear) before it takes a doorbell; doorbells written meanwhile wait in the FIFO.
Doorbells are taken only between turns (a doorbell written during a turn takes effect at the next
turn boundary, which ``docs/engine.md`` allows). A partly sent message keeps its byte offset in its
ready-list entry; its WQE is read again at the next turn.
"""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.hdl import Assert
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ..model.engine import MAX_LOG_RING
from ..model.opcodes import Opcode
from ..model.qpc import QpcCacheConfig, ServiceType
from ..model.regs import DATAPATH_WIDTHS, ErrBit
from ..model.wqe import INLINE_MAX_RC, INLINE_MAX_UD, MAX_MESSAGE, WQE_FIELDS, CqeStatus, WqeOpcode
from .bus import AXI4Signature, PacketStream
from .completion import CqeWriter, CqOp, cq_cmd_layout, err_layout
from .descriptor import DescriptorLayout
from .fifo import BlockFIFO, check_credit
from .prim import by_state
from .qp_cache import Op, QpState, Status, cached_layout, request_layout, response_layout

__all__ = ["wqe_layout", "inc_layout", "doorbell_layout", "cq_doorbell_layout", "rd_cmd_layout",
           "DescriptorEngine", "FrameGate"]

#: The 64-byte WQE with both layouts (RC/UC and UD) overlaid, fields at their WQE_FIELDS offsets.
wqe_layout = data.FlexibleLayout(512, {name: data.Field(width, off) for name, off, width, _ in WQE_FIELDS})

#: Counter increments per clock, in the register block's order.
inc_layout = data.StructLayout({"db_errors": 1, "wqe_count": 1, "pkt_count": 1, "byte_count": 13,
                                "cqe_count": 1, "cqe_drops": 1, "wqe_errors": 1, "flush_count": 1,
                                "bus_errors": 2})
doorbell_layout = data.StructLayout({"qpn": 24, "pi": 16})
cq_doorbell_layout = data.StructLayout({"cqn": 24, "ci": 16})
#: One packet's payload for the payload reader: ``len`` bytes from ``addr``, or inline from ``data``.
rd_cmd_layout = data.StructLayout({"addr": 64, "len": 13, "inline": 1, "data": 256})
status_layout = data.StructLayout({"error": 1})
group_layout = data.StructLayout({"start": 1})

_SEND_OPS = (WqeOpcode.SEND, WqeOpcode.SEND_WITH_IMM)
_IMM_OPS = (WqeOpcode.SEND_WITH_IMM, WqeOpcode.RDMA_WRITE_WITH_IMM)


def _in(sig, values):
    out = Const(0)
    for v in values:
        out = out | (sig == int(v))
    return out


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

    Members
    -------
    doorbell, cq_doorbell : In(stream)
        From the register block; taken between turns.
    qpc_req / qpc_resp : stream
        To / from :class:`rnic.hdl.qp_cache.QpCache`; one request outstanding at a time, except a
        commit's ADD_PSN and SET_SQ_CI back to back (two; the cache answers one QP in order).
        ``qpc_resp.ready`` is always 1: every accepted request leads straight into a state that
        takes its response in the clock it comes (the X-Resp states, Peek-Resp, Commit-PSN-Resp,
        Retire-Next, Retire-Both), so a response never waits, and the cache's pipeline never
        depends on the FSM's state. An ``Assert`` checks it in simulation.
    m_axi : Out(AXI4Signature)
        WQE reads (one 64-byte burst each, ID 0); read only.
    m_axi_cq : Out(AXI4Signature)
        The completion writer's accesses.
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
    err, inc, cqe_written, idle : Out
        To the register block; ``err`` and ``inc`` a clock after the event (flip-flops).
    """

    def __init__(self, cache_cfg: QpcCacheConfig | None = None, *, max_qps: int = 256, window: int = 16,
                 max_mtu: int = 5, wqe_prefetch: int = 4, deep_below: int = 512, wqe_width: int = 64):
        self.cache_cfg = cache_cfg = cache_cfg or QpcCacheConfig()
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
        super().__init__({
            "enable": In(1), "qpc_size": In(25), "quota": In(16), "port_lid": In(16),
            "cq_base": In(64), "cq_size": In(25),
            "sgid_index": Out(4), "sgid_gid": In(128), "sgid_mac": In(48), "sgid_vlan_id": In(12),
            "sgid_vlan_present": In(1),
            "doorbell": In(stream.Signature(doorbell_layout)),
            "cq_doorbell": In(stream.Signature(cq_doorbell_layout)),
            "qpc_req": Out(stream.Signature(request_layout(cache_cfg))),
            "qpc_resp": In(stream.Signature(response_layout(cache_cfg))),
            "m_axi": Out(AXI4Signature(addr_width=64, data_width=wqe_width, id_width=4)),
            "m_axi_cq": Out(AXI4Signature(addr_width=64, data_width=64, id_width=4)),
            "desc": Out(stream.Signature(DescriptorLayout)),
            "rd_cmd": Out(stream.Signature(rd_cmd_layout)),
            "group": Out(stream.Signature(group_layout)),
            "status": In(stream.Signature(status_layout)),
            "err": Out(err_layout),
            "inc": Out(inc_layout),
            "cqe_written": Out(1),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        max_qps, window = self.max_qps, self.window
        qbits = exact_log2(max_qps)

        m.submodules.cqw = cqw = CqeWriter()
        wiring.connect(m, wiring.flipped(self.m_axi_cq), cqw.m_axi)
        m.d.comb += [cqw.cq_base.eq(self.cq_base), cqw.cq_size.eq(self.cq_size),
                     self.cqe_written.eq(cqw.cqe_written)]

        # --- state ----------------------------------------------------------------------------------
        qpn = Signal(24)
        pi = Signal(16)
        ctx = Signal(cached_layout)
        wqe_raw = Signal(512)
        wqe_next = Signal(512)         # the WQE being gathered from the fetch queue
        wqe = data.View(wqe_layout, wqe_raw)
        offset = Signal(32)            # byte offset of the current message (partial messages)
        steps = Signal(17)             # packets and WQEs of this turn, saturating above any quota
        flush_mode = Signal()
        rerr = Signal()

        issue_off = Signal(32)
        issue_psn = Signal(24)
        issue_ci = Signal(16)          # SQ index of the WQE being issued (ctx.sq_ci: the committed one)
        chained = Signal()             # this fetch overlaps the previous WQE's packets in flight
        chain_block = Signal()         # a chained fetch failed: drain, then fetch it again in order
        sending = Signal()             # a send chain is on (from its first Fetched to Loop / Turn-End)
        inflight = Signal(range(window + 1))
        si = Signal(18)                # steps + inflight, a register beside them

        # The draining turn (*handoff*): once a turn has issued its last packet, the next turn starts
        # while the old one's packets are still in flight. The old turn keeps only what its commits
        # need: its QPN, the context fields they read or change, the re-queue offset, its own squash.
        d_active = Signal()            # a draining turn exists (until D-End re-queues its QP)
        d_inflight = Signal(range(window + 1))   # its packets in flight: always the oldest ones
        dqpn = Signal(24)
        dctx = Signal(data.StructLayout({"state": 4, "sq_ci": 16, "sq_pi": 16, "cqn": 24}))
        doffset = Signal(32)
        dsquash = Signal()
        cd = Signal()                  # the packet being committed (and its retire) is the old turn's
        turn_flush = Signal()          # the QP was in ERROR when its turn began: the turn flushes

        def count_step(committed=False):
            """One more step in this turn; ``committed``: a packet in flight leaves with it."""
            m.d.sync += [steps.eq(steps + ~steps[-1]), si.eq(si + ~steps[-1] - committed),
                         steps_ge_q.eq(steps[-1] | (steps >= qm1)),
                         si_lt_q.eq(Mux(steps[-1], si_le_q, si_lt_q1) if committed else Mux(steps[-1], si_lt_q1, si_lt_qm1))]
        squash = Signal()
        issued_last = Signal()
        sent = Signal(3)               # desc, rd_cmd, group transferred in this Issue

        # completion to write / retire
        cq_cmd = Signal(cq_cmd_layout)
        do_cqe = Signal()
        ret = Signal(2)                # 0: Loop, 1: Send-Loop, 2: doorbell (no retire)
        RET_LOOP, RET_SEND, RET_DB = 0, 1, 2
        retire_cnt = Signal(2)         # 0: none, 1: wqe_errors, 2: flush_count
        psn_arg = Signal(24)           # PSNs the committing packet consumed
        commit_last = Signal()
        resp_owed = Signal()           # Retire-Both: ADD_PSN's response is still to come

        # error reports and counter increments leave through flip-flops, a clock after the event
        err = Signal(err_layout)
        inc = Signal(inc_layout)
        m.d.sync += [self.err.eq(err), self.inc.eq(inc)]

        # the commit path's QP: the draining turn's while it commits one of its packets
        c_qpn = Signal(24)
        c_state, c_sq_ci, c_cqn = Signal(4), Signal(16), Signal(24)
        m.d.comb += [c_qpn.eq(Mux(cd, dqpn, qpn)), c_state.eq(Mux(cd, dctx.state, ctx.state)),
                     c_sq_ci.eq(Mux(cd, dctx.sq_ci, ctx.sq_ci)), c_cqn.eq(Mux(cd, dctx.cqn, ctx.cqn))]

        # The FSM's reports: report() raises fsm_err under its condition; the fields come from the
        # state alone (report_fields, after the FSM), so only the valid bit waits for the decision.
        # The completion writer reports only while the FSM waits for it (cq_wait), where the FSM
        # reports nothing.
        fsm_err = Signal()
        fsm_bit, fsm_status = Signal.like(err.bit), Signal.like(err.status)

        def report(bit, status=0):
            m.d.comb += fsm_err.eq(1)
            m.d.sync += Assert((fsm_bit == bit) & (fsm_status == status), "engine: report fields by state\n")

        cq_wait = Signal()             # the FSM waits for the completion writer (set after the FSM)
        m.d.comb += [
            err.valid.eq(cqw.err.valid | fsm_err),
            err.bit.eq(Mux(cq_wait, cqw.err.bit, fsm_bit)),
            err.qpn.eq(Mux(cq_wait, cqw.err.qpn, c_qpn)),
            err.status.eq(Mux(cq_wait, cqw.err.status, fsm_status)),
            inc.cqe_count.eq(cqw.inc_cqe_count), inc.cqe_drops.eq(cqw.inc_cqe_drops),
        ]
        bus_err_fsm = Signal()
        m.d.comb += inc.bus_errors.eq(cqw.inc_bus_errors + bus_err_fsm)

        # --- ready list -----------------------------------------------------------------------------
        m.submodules.ready = rdy = BlockFIFO(width=24 + 32, depth=max_qps, fabric_out=True)
        m.submodules.sched = sched = Memory(shape=1, depth=max_qps, init=[], attrs={"ram_style": "block"})
        sched_w = sched.write_port()
        sched_r = sched.read_port(transparent_for=(sched_w,))
        m.d.comb += sched_r.addr.eq(qpn[:qbits])
        # a reset clears flip-flops, not memories: "Clear" zeroes the scheduled bits first, else a
        # reset in mid-turn would leave QPs marked scheduled that are in no ready list
        clearing = Signal()
        clear_qpn = Signal(range(max_qps))
        in_dend = Signal()
        # The ready list's and the scheduled bits' writes go out a clock after the FSM decides them
        # (registered: off the FSM's paths). ``rdy.w_en`` high means an entry is on its way: ``solo``
        # and ``idle`` count it as in the list.
        rq_we, rq_wd = Signal(), Signal(24 + 32)
        sc_we, sc_wd, sc_wa = Signal(), Signal(), Signal(qbits)
        m.d.comb += sc_wa.eq(Mux(clearing, clear_qpn, Mux(in_dend, dqpn[:qbits], qpn[:qbits])))
        m.d.sync += [rdy.w_en.eq(rq_we), rdy.w_data.eq(rq_wd),
                     sched_w.en.eq(sc_we), sched_w.data.eq(sc_wd), sched_w.addr.eq(sc_wa)]

        # --- per-packet bookkeeping between issue and commit ----------------------------------------
        info_layout = data.StructLayout({"seg": 13, "psns": 24, "last": 1, "wr_id": 64, "opcode": 8,
                                         "length": 32, "signaled": 1})
        m.submodules.info = info = BlockFIFO(width=info_layout.size, depth=window, fabric_out=True)
        info_w = data.View(info_layout, info.w_data)
        info_r = data.View(info_layout, info.r_data)

        # --- derived values of the current QP and WQE -----------------------------------------------
        quota = Signal(17, init=1)
        q_in = Mux(self.quota == 0, 1, self.quota)
        m.d.sync += quota.eq(q_in)      # a register: off the compares
        # si < quota as a flip-flop, set with si from compares of the current si (si_lt_q exact against
        # the quota of a clock before: qd)
        qd, qm1 = Signal(17, init=1), Signal(17)
        m.d.sync += [qd.eq(quota), qm1.eq(q_in - 1)]
        si_lt_q = Signal(init=1)
        si_lt_q1, si_le_q, si_lt_qm1 = si < quota, si <= quota, si < qm1
        m.d.sync += [si_lt_q.eq(si_lt_q1), Assert(si_lt_q == (si < qd), "engine: si_lt_q\n")]
        steps_ge_q = Signal()          # steps >= qd, the same way
        m.d.sync += [steps_ge_q.eq(steps >= quota), Assert(steps_ge_q == (steps >= qd), "engine: steps_ge_q\n")]
        ci_end = Signal(init=1)        # ctx.sq_ci == ctx.sq_pi, loaded with ctx
        ud = Signal()
        m.d.comb += ud.eq(ctx.service == ServiceType.UD)
        log_mtu = Signal(4)
        m.d.comb += log_mtu.eq(ctx.path_mtu[:3] + 7)
        mtu = Signal(13)
        m.d.comb += mtu.eq(Const(1, 13) << log_mtu)
        inline = Signal()
        m.d.comb += inline.eq(wqe.flags[3])
        op = wqe.opcode
        is_read = Signal()
        m.d.comb += is_read.eq(op == WqeOpcode.RDMA_READ)
        self_sgid = ctx.sgid_index
        m.d.comb += self.sgid_index.eq(self_sgid[:4])
        sgid_last, sgid_same_d = Signal(4), Signal()     # for the Assert in Issue only
        sgid_settled = (sgid_last == self.sgid_index) & sgid_same_d     # the same for three clocks
        m.d.sync += [sgid_last.eq(self.sgid_index), sgid_same_d.eq(sgid_last == self.sgid_index)]

        # The WQE's check against its QP (0 or a CQE status), made on the WQE as it is fetched
        # (wqe_next) and registered with it: the context fields it reads do not change within a turn.
        validate = Signal(8)
        w_short = Signal()             # wqe_raw was read short (bytes 40..63 are not this WQE's)
        validate_next = Signal(8)
        v_bad = Signal()               # validate != 0
        off0 = Signal()                # offset == 0 a clock ago: Fetched comes two clocks at least after
        m.d.sync += off0.eq(offset == 0)   # offset changes (Idle, Handoff-Resp, Send-Loop, Turn-End, retires)
        w_next = data.View(wqe_layout, wqe_next)
        ctx_ok = ((ctx.service <= 2) & (ctx.path_mtu >= 1) & (ctx.path_mtu <= self.max_mtu) & (ctx.link_mode <= 4)
                  & (ctx.sgid_index < 16))
        n_op = w_next.opcode
        n_inline = w_next.flags[3]
        allowed = Mux(ctx.service == ServiceType.RC, (n_op >= 1) & (n_op <= 5),
                      Mux(ctx.service == ServiceType.UC, (n_op >= 1) & (n_op <= 4), (n_op >= 1) & (n_op <= 2)))
        cap = Mux(ud, INLINE_MAX_UD, INLINE_MAX_RC)
        with m.If(~ctx_ok | ~allowed | (n_inline & (n_op == WqeOpcode.RDMA_READ))):
            m.d.comb += validate_next.eq(CqeStatus.LOC_QP_OP_ERR)
        with m.Elif((w_next.length > MAX_MESSAGE) | (n_inline & (w_next.length > cap)) | (ud & (w_next.length > mtu))):
            m.d.comb += validate_next.eq(CqeStatus.LOC_LEN_ERR)

        # The next packet's segment, registered: computed from issue_off in the clocks before Issue
        # (Issue is entered from Send-Loop only, and issue_off, the WQE and ctx hold meanwhile).
        remaining = Signal(32)
        m.d.comb += remaining.eq(wqe.length - issue_off)
        seg = Signal(13)
        first = Signal()
        last = Signal()
        psns = Signal(24)
        rd_addr = Signal(64)
        with m.If(is_read):
            m.d.sync += [seg.eq(0), last.eq(1),
                         psns.eq(Mux(wqe.length == 0, 1, (wqe.length + mtu - 1) >> log_mtu))]
        with m.Else():
            m.d.sync += [seg.eq(Mux(remaining > mtu, mtu, remaining)), last.eq(remaining <= mtu), psns.eq(1)]
        m.d.sync += [first.eq(issue_off == 0), rd_addr.eq(wqe.local_addr + issue_off)]

        # BTH opcode of this packet
        base = Mux(ctx.service == ServiceType.UD, 0x60, Mux(ctx.service == ServiceType.UC, 0x20, 0x00))
        imm_op = _in(op, _IMM_OPS)
        send_op = _in(op, _SEND_OPS)
        low = Signal(8)
        with m.If(first & last):
            m.d.comb += low.eq(Mux(imm_op, 5, 4))
        with m.Elif(first):
            m.d.comb += low.eq(0)
        with m.Elif(last):
            m.d.comb += low.eq(Mux(imm_op, 3, 2))
        with m.Else():
            m.d.comb += low.eq(1)
        bth_op = Signal(8)
        m.d.comb += bth_op.eq(Mux(is_read, int(Opcode.RC_RDMA_READ_REQUEST), base | (low + Mux(send_op, 0, 6))))

        d = self.desc.payload
        has_reth = is_read | (~send_op & first)
        m.d.comb += [
            d.mode.eq(ctx.link_mode), d.payload_len.eq(seg),
            d.dst_mac.eq(Mux(ud, wqe.dst_mac, ctx.dst_mac)), d.src_mac.eq(self.sgid_mac),
            d.vlan_present.eq(self.sgid_vlan_present),
            d.vlan_tci.eq(Mux(self.sgid_vlan_present, Cat(self.sgid_vlan_id, Const(0, 1), ctx.sl[:3]), 0)),
            d.src_gid.eq(self.sgid_gid), d.dst_gid.eq(Mux(ud, wqe.dst_gid, ctx.dst_gid)),
            d.traffic_class.eq(ctx.traffic_class), d.flow_label.eq(ctx.flow_label),
            d.hop_limit.eq(ctx.hop_limit), d.ip_id.eq(issue_psn[:16]), d.udp_sport.eq(ctx.udp_sport),
            d.sl.eq(ctx.sl), d.dlid.eq(Mux(ud, wqe.dlid, ctx.dlid)), d.slid.eq(self.port_lid),
            d.opcode.eq(bth_op),
            d.se.eq(wqe.flags[1] & last & (send_op | (op == WqeOpcode.RDMA_WRITE_WITH_IMM))),
            d.pkey.eq(ctx.pkey), d.dest_qp.eq(Mux(ud, wqe.dest_qpn, ctx.dest_qpn)),
            d.ackreq.eq(last), d.psn.eq(issue_psn),
            d.reth_va.eq(Mux(has_reth, wqe.remote_addr, 0)), d.reth_rkey.eq(Mux(has_reth, wqe.rkey, 0)),
            d.reth_dma_len.eq(Mux(has_reth, wqe.length, 0)),
            d.imm.eq(Mux(last & imm_op, wqe.imm, 0)),
            d.deth_qkey.eq(Mux(ud, Mux(wqe.qkey[31], ctx.qkey, wqe.qkey), 0)),
            d.deth_src_qp.eq(Mux(ud, qpn, 0)),
        ]
        c = self.rd_cmd.payload
        m.d.comb += [c.addr.eq(rd_addr), c.len.eq(seg), c.inline.eq(inline),
                     c.data.eq(wqe_raw[256:512])]
        m.d.comb += self.group.payload.start.eq(inflight == d_inflight)     # the turn's first in flight
        m.d.comb += [info_w.seg.eq(seg), info_w.psns.eq(psns), info_w.last.eq(last), info_w.wr_id.eq(wqe.wr_id),
                     info_w.opcode.eq(wqe.opcode), info_w.length.eq(wqe.length), info_w.signaled.eq(wqe.flags[0])]

        # --- AXI: WQE fetch ---------------------------------------------------------------------------
        # One burst of ``nb`` beats per WQE, data in AR order into ``wqe_beats``. ``pf_n`` counts bursts
        # asked for and not yet taken out (at most ``wqe_prefetch``, so the queue never fills and
        # ``rready`` stays 1).
        # Fetch asks for ``issue_ci`` once every older burst is dropped; while a send chain is on, the
        # prefetcher asks for the following WQEs (``pf_ci`` up), and Send-Loop takes the oldest burst as
        # the chained WQE. A burst the chain does not use is dropped by the next Fetch or by Turn-End.
        axi = self.m_axi
        kpf = self.wqe_prefetch
        next_ci = Signal(16, init=1)   # issue_ci + 1, a register beside it

        # Fetch's lookahead test (la_qpn == qpn, la_ci == issue_ci) as a flip-flop: set with issue_ci,
        # else from the registers a clock before (la_qpn, la_ci and qpn change clocks before a Fetch)
        la_here = Signal()

        # Fetch's AR goes out through the AR register like the prefetcher's, from fetch_slot: the
        # slot of issue_ci, a flip-flop a clock behind it (issue_moved: issue_ci changed at the last
        # edge, Fetch waits a clock)
        issue_moved = Signal()
        m.d.sync += issue_moved.eq(0)

        def set_issue_ci(ci):
            m.d.sync += [issue_ci.eq(ci), next_ci.eq(ci + 1), la_here.eq((la_qpn == qpn) & (la_ci == ci)),
                         issue_moved.eq(1)]
        pf_n = Signal(range(kpf + 1))
        pf_ci = Signal(16)
        pf_valid = Signal()
        pf_addr = Signal(64)
        ring_layout = data.StructLayout({"lo": 15, "hi": 43, "hi1": 43, "mask": 15})
        fetch_raise = Signal()         # Fetch asks for issue_ci's WQE
        fetch_st = Signal()            # the FSM is in Fetch (set after the FSM)
        fetching = Signal()            # Fetch, Fetch-R, Fetched: the prefetcher waits (wqe is not whole)

        # An SQ ring as the slot address needs it, taken apart when a context is loaded: a ring holds
        # at most 2**15 slots of 64 bytes, so a slot's address is bits 6..20 of the base plus the
        # index (15 bits, a carry out) and bits 21..63 of the base, or those plus one.
        def ring_of(qp):
            """The ring fields of the context ``qp`` (values to register)."""
            return {"lo": qp.sq_base[6:21], "hi": qp.sq_base[21:], "hi1": (qp.sq_base[21:] + 1)[:43],
                    "mask": ((Const(1, 17) << qp.log_sq_size[:4]) - 1)[:15]}

        def ring_slot(r, ci):
            """Host address of slot ``ci`` of the ring ``r`` (a ring_layout value)."""
            s = Signal(16)
            m.d.comb += s.eq(r.lo + (ci[:15] & r.mask))
            return Cat(Const(0, 6), s[:15], Mux(s[15], r.hi1, r.hi))

        def load_ring(r, qp):
            return [getattr(r, k).eq(v) for k, v in ring_of(qp).items()]
        c_ring = Signal(ring_layout, init={"hi1": 1})   # the ring of ctx, loaded with it
        m.d.sync += Assert(c_ring.as_value() == Cat(*(v for v in ring_of(ctx).values())),
                           "engine: the registered SQ ring differs from ctx\n")

        def ring_addr(ci):
            """Host address of SQ slot ``ci`` of the current QP."""
            return ring_slot(c_ring, ci)

        def has_work(qp):
            """The QP of context ``qp`` goes (back) into the ready list: WQEs posted, RTS or ERROR."""
            return (qp.sq_ci != qp.sq_pi) & ((qp.state == QpState.RTS) | (qp.state == QpState.ERROR))
        ctx_work = Signal()            # has_work(ctx) a clock ago
        dctx_work = Signal()           # has_work(dctx) a clock ago

        ww = self.wqe_width
        nb = 512 // ww
        # at W > 64 the queue is a few entries of W + 2 bits: LUT RAM, not block RAMs used for their width
        fifo = BlockFIFO if ww == 64 else SyncFIFOBuffered
        m.submodules.wqe_beats = wqe_beats = fifo(width=ww + 2, depth=max(2, nb * kpf))
        beat_data, beat_err, beat_last = wqe_beats.r_data[:ww], wqe_beats.r_data[ww], wqe_beats.r_data[ww + 1]
        # An RC or UC WQE is read short: its first ``ns`` beats hold every field such a WQE uses
        # (bytes 0..39) but inline data; Fetched reads an inline one again in full (``full_read``).
        ns = -(-40 * 8 // ww)
        # the oldest burst's beats gather in wqe_next, so Fetch-R takes a whole WQE in one clock
        next_err = Signal()
        next_valid = Signal()
        next_short = Signal()          # the gathered burst was short: bytes beyond 40 are stale
        gbeat = Signal(range(nb))
        next_take = Signal()           # Fetch-R takes it, or Fetch / Turn-End drops it
        m.d.comb += wqe_beats.r_en.eq(~next_valid)
        with m.If(wqe_beats.r_rdy & ~next_valid):
            for k in range(nb):
                with m.If(gbeat == k):
                    m.d.sync += wqe_next[k * ww:(k + 1) * ww].eq(beat_data)
            m.d.sync += [next_err.eq(next_err | beat_err), next_valid.eq(beat_last),
                         gbeat.eq(Mux(beat_last, 0, gbeat + 1)), next_short.eq(gbeat != nb - 1)]
        with m.If(next_take & next_valid):
            m.d.sync += [next_valid.eq(0), next_err.eq(0)]
        pf_short = Signal()            # the prefetcher's or lookahead's AR is a short one
        full_read = Signal()           # Fetch reads the WQE in full (an inline WQE read short)
        m.d.comb += [axi.arsize.eq(exact_log2(ww // 8)), axi.arburst.eq(1), axi.bready.eq(1),
                     axi.arlen.eq(Mux(pf_short, ns - 1, nb - 1)), axi.arvalid.eq(pf_valid), axi.araddr.eq(pf_addr),
                     axi.rready.eq(wqe_beats.w_rdy), wqe_beats.w_en.eq(axi.rvalid),
                     wqe_beats.w_data.eq(Cat(axi.rdata, axi.rresp[1], axi.rlast))]
        with m.If(pf_valid & axi.arready):
            m.d.sync += pf_valid.eq(0)
        pf_raise = Signal()
        pf_taken = next_take & next_valid
        # Lookahead: once a turn has read the WQEs it can use, Peek looks up the ready list's head QP
        # (the next turn's) and asks for up to ``wqe_prefetch`` WQEs from its sq_ci (no more than it
        # has posted, nor than the quota). Those bursts are then the newest, ``la_cnt`` of them; the
        # next turn's Fetch takes the first if it is that turn's first WQE (the rest are then its
        # read-ahead), else they are dropped.
        la_raise = Signal()
        la_more = Signal()             # the lookahead's next burst
        la_hold = Signal()             # Fetch: no lookahead burst is added in this clock
        la_valid = Signal()
        la_qpn = Signal(24)
        la_ci = Signal(16)
        m.d.sync += la_here.eq((la_qpn == qpn) & (la_ci == issue_ci))
        la_addr = Signal(64)
        la_want = Signal(range(kpf + 1))
        la_short_next = Signal()
        la_todo = Signal(range(kpf + 1))
        la_cnt = Signal(range(kpf + 1))
        la_next = Signal(16)           # the next WQE index to ask for
        la_ring = Signal(ring_layout)  # the lookahead's ring, from Peek-Go
        la_held = Signal(range(kpf + 1))   # bursts in flight that belong to the lookahead
        m.d.comb += la_held.eq(Mux(la_valid, la_cnt, 0))
        peeked = Signal()
        la_rts = Signal()              # the peeked QP was in RTS: the next turn may start by Handoff
        m.d.comb += la_more.eq(la_valid & (la_todo != 0) & ~pf_valid & ~la_hold)
        pf_asked = pf_raise | la_raise | la_more | fetch_raise    # a WQE burst asked for
        m.d.sync += pf_n.eq(pf_n + pf_asked - pf_taken)
        quota_stale = Signal(init=1)   # (see quota_read below)
        m.d.sync += quota_stale.eq(pf_asked | pf_taken | fetching | info.w_en | info.r_en)
        m.d.sync += Assert((pf_n != kpf) | ~pf_asked | pf_taken,
                           "engine: more WQE bursts asked for than the queue holds\n")
        la_short = Signal()
        # The AR register (every WQE burst's AR leaves the engine from it) loads its address and
        # length in every clock without an AR held, from the burst that would be raised (Fetch's,
        # the lookahead's first, its next, or the prefetcher's): which one is raised then only sets
        # pf_valid, and no raise decision reaches the 64-bit address mux. At most one raise in a
        # clock (pf_raise needs ~fetching, la_more ~la_hold (Fetch) and la_valid, la_raise Peek-Go).
        m.d.sync += Assert((pf_raise + la_raise + la_more + fetch_raise <= 1) & ~(la_raise & la_valid),
                           "engine: two WQE bursts raised at once\n")
        # The lookahead's next slot and the prefetcher's are flip-flops themselves, a clock behind
        # la_next / pf_ci: those move only on a raise, which holds pf_addr for a clock at least
        # (pf_valid), so the slot is current whenever pf_addr loads from it (Asserts below).
        la_slot, pf_slot, fetch_slot = Signal(64), Signal(64), Signal(64)
        m.d.sync += [la_slot.eq(ring_slot(la_ring, la_next)), pf_slot.eq(ring_addr(pf_ci)),
                     fetch_slot.eq(ring_addr(issue_ci))]
        with m.If(~pf_valid):
            m.d.sync += [pf_addr.eq(Mux(fetch_st, fetch_slot, Mux(la_raise, la_addr, Mux(la_valid, la_slot, pf_slot)))),
                         pf_short.eq(Mux(fetch_st, ~full_read & ~ud,
                                         Mux(la_raise, la_short_next, Mux(la_valid, la_short, ~ud))))]
        m.d.sync += [Assert(~pf_raise | (pf_slot == ring_addr(pf_ci)), "engine: pf_slot stale at a raise\n"),
                     Assert(~la_more | (la_slot == ring_slot(la_ring, la_next)), "engine: la_slot stale at a raise\n"),
                     Assert(~fetch_raise | (fetch_slot == ring_addr(issue_ci)), "engine: fetch_slot stale at a raise\n"),
                     Assert(~fetch_raise | ~pf_valid, "engine: Fetch raised beside a held AR\n")]
        with m.If(fetch_raise):
            m.d.sync += pf_valid.eq(1)
        with m.If(pf_raise):
            m.d.sync += [pf_valid.eq(1), pf_ci.eq(pf_ci + 1)]
        with m.If(la_raise):
            m.d.sync += [pf_valid.eq(1), la_valid.eq(1), la_cnt.eq(1), la_todo.eq(la_want - 1)]
        with m.If(la_more):
            m.d.sync += [pf_valid.eq(1), la_next.eq(la_next + 1), la_cnt.eq(la_cnt + 1), la_todo.eq(la_todo - 1)]

        # --- the control FSM ---------------------------------------------------------------------------
        req = self.qpc_req.payload
        m.d.comb += self.qpc_resp.ready.eq(1)

        def goto(state):
            def f(ok):
                m.next = state
            return f

        # Which request the cache answers next: a lookahead lookup (Peek, Handoff) or one of the
        # turn's own. Responses come only in the states that wait for them (an Assert below checks
        # it), so ``ctx`` and ``dctx`` load from the response on these flags and the response's
        # status alone, with no state decode in their enables (after the FSM, below).
        resp_la = Signal()             # the response due is a lookahead lookup's
        resp_ho = Signal()             # ... and Handoff's
        resp_ok = Signal()
        ho_start = Signal()            # Handoff-Resp starts the new turn (an OK answer, no doorbell)
        m.d.comb += [resp_ok.eq(self.qpc_resp.valid & (self.qpc_resp.payload.status == Status.OK)),
                     ho_start.eq(resp_ok & ~self.doorbell.valid & ~self.cq_doorbell.valid)]
        with m.If(self.qpc_resp.valid):
            m.d.sync += [resp_la.eq(0), resp_ho.eq(0)]

        def take_resp():
            """Take a cache response (valid in this clock); an OK one reloads ``ctx`` (``dctx`` for
            the draining turn's commit). Returns ok."""
            return self.qpc_resp.payload.status == Status.OK

        def request(op_, arg, who=c_qpn):
            """Drive a cache request in this clock (it transfers on ``qpc_req.ready``). The FSM must
            go from here to a state that takes the response as it comes (``qpc_resp.ready`` is 1)."""
            m.d.comb += [self.qpc_req.valid.eq(1), req.op.eq(op_), req.qpn.eq(who), req.arg.eq(arg)]

        # the states that take a cache response as it comes (checked below)
        resp_states = ["Peek-Resp", "Handoff-Resp", "Commit-PSN-Resp", "Retire-Next", "Retire-Both"]

        def cache(name, op_, arg, on_resp):
            """States ``name`` (request) and ``name``-Resp; ``on_resp(ok)`` runs with the response."""
            resp_states.append(f"{name}-Resp")
            with m.State(name):
                request(op_, arg)
                with m.If(self.qpc_req.ready):
                    m.next = f"{name}-Resp"
            with m.State(f"{name}-Resp"):
                with m.If(self.qpc_resp.valid):
                    on_resp(take_resp())

        def set_cqe(status, with_wqe=True, byte_len=0, src=None):
            src = wqe if src is None else src
            m.d.sync += [cq_cmd.op.eq(CqOp.CQE), cq_cmd.cqn.eq(c_cqn), cq_cmd.qpn.eq(c_qpn),
                         cq_cmd.status.eq(status), cq_cmd.wqe_index.eq(c_sq_ci), cq_cmd.byte_len.eq(byte_len),
                         cq_cmd.wr_id.eq(src.wr_id if with_wqe else 0),
                         cq_cmd.opcode.eq(src.opcode if with_wqe else 0)]

        # nobody else waits: the turn goes on past its quota (round robin over one QP is that QP, and a
        # turn boundary would drain the window and read the WQE again). A flip-flop, a clock late: a
        # doorbell is seen as if it had come a clock later (doorbells wait for the turn's end anyway);
        # the engine's own ready-list writes and d_active make it 0 before they could be missed.
        solo = Signal()
        m.d.sync += solo.eq(rdy.empty & ~rdy.w_en & ~self.doorbell.valid & ~self.cq_doorbell.valid & ~d_active)

        # inflight < window, inflight == 0 and d_inflight == 0 as flip-flops, set with the counters
        win_ok, infl_zero, d_zero = Signal(init=1), Signal(init=1), Signal(init=1)
        m.d.sync += [Assert(win_ok == (inflight < window), "engine: win_ok\n"),
                     Assert(infl_zero == (inflight == 0), "engine: infl_zero\n"),
                     Assert(d_zero == (d_inflight == 0), "engine: d_zero\n")]

        def room():
            """The window and the quota allow one more packet."""
            return win_ok & (si_lt_q | solo)

        can_issue = ~squash & ~issued_last & room()
        # The next WQE may start before this one retires only if this one writes no CQE: a CQE can
        # overflow or be dropped, which moves the QP to ERROR before the next WQE (model order).
        # The ring compares are flip-flops computed from the clock before: next_ci and pf_ci change
        # only in Loop, Fetch and Send-Loop (which leave for Fetch or Fetch-R) and with pf_raise (then
        # pf_valid blocks every user for a clock), ctx.sq_pi only when a turn starts; their users run
        # while sending and not fetching, two clocks at least after such a change (Asserts below).
        nci_end, pfci_end = Signal(), Signal()
        m.d.sync += [nci_end.eq(next_ci == ctx.sq_pi), pfci_end.eq(pf_ci == ctx.sq_pi)]
        chainable = ~chain_block & ~wqe.flags[0] & (ctx.state == QpState.RTS) & ~nci_end
        # (not onto the next turn's lookahead burst: a chain that needs another read goes through Loop)
        can_chain = ~squash & issued_last & chainable & room() & ~(la_valid & (pf_n == la_cnt))
        # The prefetcher runs ahead of the chain while the current WQE is unsignaled and the quota leaves
        # room for one more WQE (a guess: a prefetched WQE may be signaled, or the chain may stop).
        w_deep = Signal()              # wqe.length < deep_below, registered with the WQE
        pf_depth = Mux(w_deep, kpf, 1)
        # the quota's WQEs are all read: each WQE read ahead takes one step at least, and so does the
        # current WQE's next packet if it has one. A flip-flop, a clock late; ``quota_stale`` marks
        # the clock after one of its inputs may have changed (an Issue, a Commit, a Fetch state, a
        # burst raised or taken), and neither the prefetcher nor Peek acts on it then (acting on a
        # stale "not yet" read a WQE past the quota, dropped and read again: 16 QPs x 64 messages of
        # 64 B at quota 16 took 19 036 clocks instead of 16 128)
        quota_read = Signal()
        quota_read_now = si + pf_n + ~issued_last >= quota
        m.d.sync += quota_read.eq(quota_read_now)
        m.d.sync += Assert(~sending | quota_stale | (quota_read == quota_read_now),
                           "engine: quota_read stale while quota_stale is low\n")
        m.d.comb += pf_raise.eq(sending & ~fetching & ~la_valid & chainable & ~squash & ~pf_valid & ~quota_stale &
                                (pf_n < pf_depth) & ~pfci_end & (~quota_read | solo))

        # the turn reads no more WQEs: the rest of its quota or of its ring has been read ahead (or is
        # the current WQE), so the next turn's first WQE can be read (Peek) while it issues
        reads_done = (sending & ~squash & ~chain_block & (ctx.state == QpState.RTS) &
                      (~wqe.flags[0] | nci_end) & (pfci_end | (quota_read & ~quota_stale & ~solo)))
        # Peek may look the next turn's QP up. Once the turn reads no more WQEs it goes before the
        # next Issue: the lookahead's AR then leaves ahead of that packet's payload bursts, not
        # behind them (one 4 KiB packet a turn at 500-clock memory: 0.686 -> 0.827)
        can_peek = ~peeked & rdy.r_rdy & ~pf_valid & (pf_n < kpf)
        peek_first = can_peek & reads_done
        # the turn issues nothing more: only its commits (and retires) are left
        turn_ends = ~squash & ~chain_block & ((~si_lt_q & ~solo) | (issued_last & nci_end))

        # the doorbell's QPN out of range, registered as Idle takes it (the QPC_SIZE it is checked
        # against is the one of that clock)
        db_bad = Signal()
        with m.FSM(init="Clear") as fsm:
            with m.State("Clear"):
                m.d.comb += [clearing.eq(1), sc_we.eq(1), sc_wd.eq(0)]
                m.d.sync += clear_qpn.eq(clear_qpn + 1)
                with m.If(clear_qpn == max_qps - 1):
                    m.next = "Idle"

            with m.State("Idle"):
                with m.If(self.doorbell.valid):
                    m.d.comb += self.doorbell.ready.eq(1)
                    db_qpn = self.doorbell.payload.qpn
                    m.d.sync += [qpn.eq(db_qpn), pi.eq(self.doorbell.payload.pi),
                                 db_bad.eq((db_qpn >= self.qpc_size) | (db_qpn >= max_qps))]
                    m.next = "DB"
                with m.Elif(self.cq_doorbell.valid):
                    m.d.comb += self.cq_doorbell.ready.eq(1)
                    m.d.sync += [cq_cmd.op.eq(CqOp.SET_CI), cq_cmd.cqn.eq(self.cq_doorbell.payload.cqn),
                                 cq_cmd.ci.eq(self.cq_doorbell.payload.ci)]
                    m.next = "CQ-DB"
                with m.Elif(self.enable & rdy.r_rdy):
                    m.d.comb += rdy.r_en.eq(1)
                    m.d.sync += [qpn.eq(rdy.r_data[:24]), offset.eq(rdy.r_data[24:]), peeked.eq(0)]
                    with m.If(rdy.r_data[:24] != la_qpn):
                        m.d.sync += la_valid.eq(0)
                    m.next = "Turn"

            # doorbells
            with m.State("CQ-DB"):
                m.d.comb += [cqw.cmd.valid.eq(1), cqw.cmd.payload.eq(cq_cmd)]
                with m.If(cqw.cmd.ready):
                    m.next = "CQ-DB-Wait"
            with m.State("CQ-DB-Wait"):
                m.d.comb += cqw.done.ready.eq(1)
                with m.If(cqw.done.valid):
                    m.next = "Idle"

            with m.State("DB"):
                with m.If(db_bad):
                    m.d.comb += inc.db_errors.eq(1)
                    report(ErrBit.DB_BAD_QPN)
                    m.next = "Idle"
                with m.Else():
                    m.next = "DB-Lookup"

            def db_lookup(ok):
                with m.If(ok):
                    m.next = "DB-Check"
                with m.Else():
                    m.d.comb += [inc.db_errors.eq(1), bus_err_fsm.eq(1)]
                    report(ErrBit.BUS_QPC)
                    m.next = "Idle"
            cache("DB-Lookup", Op.LOOKUP, 0, db_lookup)

            db_status = Signal(8)
            # DB-Check waits a clock for the ring fill (pi - sq_ci) and the ring size, registered from
            # the context it has just loaded; DB-Range registers the verdict; DB-Verdict acts on it
            db_ahead, db_ring = Signal(16), Signal(17)
            m.d.sync += [db_ahead.eq(pi - ctx.sq_ci), db_ring.eq(Const(1, 17) << ctx.log_sq_size[:4])]
            with m.State("DB-Check"):
                m.next = "DB-Range"
            with m.State("DB-Range"):
                with m.If((ctx.log_sq_size > MAX_LOG_RING) | (db_ahead > db_ring)):
                    m.d.sync += db_status.eq(CqeStatus.SQ_OVERFLOW)
                with m.Elif((ctx.state != QpState.RTS) & (ctx.state != QpState.ERROR)):
                    m.d.sync += db_status.eq(CqeStatus.QP_STATE_ERR)
                with m.Else():
                    m.d.sync += db_status.eq(0)
                m.next = "DB-Verdict"
            with m.State("DB-Verdict"):
                with m.If(db_status != 0):
                    m.d.comb += inc.db_errors.eq(1)
                    report(ErrBit.DB_REJECTED, db_status)
                    m.d.sync += [cq_cmd.op.eq(CqOp.CQE), cq_cmd.cqn.eq(ctx.cqn), cq_cmd.qpn.eq(qpn),
                                 cq_cmd.status.eq(db_status), cq_cmd.wqe_index.eq(pi), cq_cmd.byte_len.eq(0),
                                 cq_cmd.wr_id.eq(0), cq_cmd.opcode.eq(0),
                                 do_cqe.eq(1), ret.eq(RET_DB), retire_cnt.eq(0)]
                    m.next = "Fail-SetError"
                with m.Else():
                    m.next = "DB-SetPI"

            cache("DB-SetPI", Op.SET_SQ_PI, pi, goto("DB-Schedule"))

            db_queue = Signal()
            with m.State("DB-Schedule"):
                # sched_r.data is the scheduled bit of qpn (qpn has been stable for many clocks); the
                # verdict is registered, DB-Queue acts on it
                m.d.sync += db_queue.eq((ctx.sq_ci != ctx.sq_pi) & ~sched_r.data)
                m.next = "DB-Queue"
            with m.State("DB-Queue"):
                with m.If(db_queue):
                    m.d.comb += [rq_we.eq(1), sc_we.eq(1), sc_wd.eq(1)]
                m.next = "Idle"

            # a turn
            def turn_lookup(ok):
                with m.If(ok):
                    rec = data.View(cached_layout, self.qpc_resp.payload.record)
                    m.d.sync += [steps.eq(0), steps_ge_q.eq(0), si.eq(inflight), si_lt_q.eq(inflight < quota), turn_flush.eq(rec.state == QpState.ERROR)]
                    m.next = "Loop"
                with m.Else():
                    m.d.comb += bus_err_fsm.eq(1)
                    report(ErrBit.BUS_QPC)
                    m.d.comb += [sc_we.eq(1), sc_wd.eq(0)]
                    m.d.sync += la_valid.eq(0)
                    m.next = "Drop"
            cache("Turn", Op.LOOKUP, 0, turn_lookup)

            with m.State("Drop"):
                # a lookahead read for a turn whose own lookup failed: no WQE read stays outstanding
                m.d.comb += next_take.eq(1)
                with m.If(pf_n == 0):
                    m.next = "Idle"

            with m.State("Loop"):
                m.d.sync += sending.eq(0)
                with m.If((steps_ge_q & ~solo) | ci_end):
                    with m.If(la_qpn == qpn):
                        m.d.sync += la_valid.eq(0)          # this turn's own lookahead, unused
                    m.next = "Turn-End"
                with m.Elif((ctx.state == QpState.ERROR) & turn_flush):
                    m.d.sync += [flush_mode.eq(1), chained.eq(0), chain_block.eq(0)]
                    set_issue_ci(ctx.sq_ci)
                    m.next = "Fetch"
                with m.Elif(ctx.state == QpState.RTS):
                    m.d.sync += [flush_mode.eq(0), chained.eq(0), chain_block.eq(0)]
                    set_issue_ci(ctx.sq_ci)
                    m.next = "Fetch"
                with m.Else():
                    with m.If(la_qpn == qpn):
                        m.d.sync += la_valid.eq(0)          # this turn's own lookahead, unused
                    m.next = "Turn-End"

            with m.State("Fetch"):
                m.d.comb += fetching.eq(1)
                m.d.comb += la_hold.eq(1)
                m.d.sync += Assert(la_here == ((la_qpn == qpn) & (la_ci == issue_ci)), "engine: la_here\n")
                with m.If(la_valid & la_here & (pf_n == la_cnt) & ~full_read):
                    m.d.sync += [la_valid.eq(0), pf_ci.eq(la_next)]      # the lookahead is this WQE and on
                    m.next = "Fetch-R"
                with m.Elif(pf_n != 0):
                    m.d.comb += next_take.eq(1)               # drop what the chain did not use
                    m.d.sync += [la_valid.eq(0), peeked.eq(0)]
                with m.Elif(~issue_moved):
                    m.d.comb += fetch_raise.eq(1)
                    m.d.sync += pf_ci.eq(next_ci)
                    m.next = "Fetch-R"
            with m.State("Fetch-R"):
                m.d.comb += [fetching.eq(1), next_take.eq(1)]
                with m.If(next_valid):
                    m.d.sync += [wqe_raw.eq(wqe_next), validate.eq(validate_next), rerr.eq(next_err),
                                 v_bad.eq(validate_next != 0), w_deep.eq(w_next.length < self.deep_below),
                                 w_short.eq(next_short), full_read.eq(0)]
                    m.next = "Fetched"
            with m.State("Fetched"):
                m.d.sync += Assert(off0 == (offset == 0), "engine: Fetched's registered offset == 0 differs\n")
                m.d.comb += fetching.eq(1)
                m.d.sync += [do_cqe.eq(1), ret.eq(RET_LOOP)]
                with m.If(w_short & inline & ~rerr & ~flush_mode):
                    # inline data is in bytes 32..63: read this WQE again, in full (issue_ci and
                    # chained stay; Fetch drops the newer bursts first)
                    m.d.sync += full_read.eq(1)
                    m.next = "Fetch"
                with m.Elif(Mux(chained, rerr | v_bad,
                              d_active & (rerr | flush_mode | (off0 & v_bad)))):
                    # handled in order after the packets in flight (this turn's, or the draining
                    # turn's, whose CQEs come first): drain, then Loop fetches it again
                    m.d.sync += [chain_block.eq(1), issued_last.eq(1)]
                    m.next = "Send-Loop"
                with m.Elif(chained):
                    m.d.sync += [issue_off.eq(0), issued_last.eq(0), sent.eq(0), sending.eq(1)]
                    m.next = "Send-Loop"
                with m.Elif(rerr):
                    m.d.comb += bus_err_fsm.eq(1)
                    report(ErrBit.BUS_WQE, CqeStatus.WQE_FETCH_ERR)
                    count_step()
                    with m.If(flush_mode):
                        set_cqe(CqeStatus.WR_FLUSH_ERR, with_wqe=False)
                        m.d.sync += retire_cnt.eq(2)
                        m.next = "Complete"
                    with m.Else():
                        set_cqe(CqeStatus.WQE_FETCH_ERR, with_wqe=False)
                        m.d.sync += retire_cnt.eq(1)
                        m.next = "Fail-SetError"
                with m.Elif(flush_mode):
                    set_cqe(CqeStatus.WR_FLUSH_ERR)
                    m.d.sync += retire_cnt.eq(2)
                    count_step()
                    m.next = "Complete"
                with m.Elif(off0 & v_bad):
                    report(ErrBit.WQE_ERROR, validate)
                    set_cqe(validate)
                    m.d.sync += retire_cnt.eq(1)
                    count_step()
                    m.next = "Fail-SetError"
                with m.Else():
                    m.d.sync += [issue_off.eq(offset), issue_psn.eq(ctx.next_psn), si.eq(steps), si_lt_q.eq(steps < quota),
                                 squash.eq(0), issued_last.eq(0), sent.eq(0), sending.eq(1)]
                    m.d.sync += Assert(inflight == d_inflight, "engine: a turn's first WQE with its own packets in flight\n")
                    m.next = "Send-Loop"

            with m.State("Send-Loop"):
                m.d.sync += cd.eq(~d_zero & info.r_rdy & self.status.valid)
                with m.If(d_active & d_zero):
                    m.next = "D-End"
                with m.Elif(info.r_rdy & self.status.valid):
                    m.next = "Commit"
                with m.Elif(can_issue & ~peek_first):
                    m.next = "Issue"
                with m.Elif(peek_first | (can_peek & turn_ends & ~infl_zero & (pf_n == 0))):
                    m.d.sync += [peeked.eq(1), la_qpn.eq(rdy.r_data[:24])]
                    m.next = "Peek"
                with m.Elif(can_chain):
                    with m.If(pf_n == 0):
                        m.d.sync += chained.eq(1)
                        set_issue_ci(next_ci)
                        m.next = "Fetch"
                    with m.Elif(next_valid):
                        # the oldest prefetched burst is WQE next_ci (the lookahead is the newest)
                        m.d.sync += chained.eq(1)
                        set_issue_ci(next_ci)
                        m.next = "Fetch-R"
                with m.Elif(turn_ends & la_rts & la_valid & (pf_n == la_cnt) & ~d_active & self.enable & rdy.r_rdy &
                            ~self.doorbell.valid & ~self.cq_doorbell.valid):
                    m.next = "Handoff"
                with m.Elif(infl_zero):
                    with m.If(squash | issued_last):
                        m.next = "Loop"
                    with m.Else():
                        m.d.sync += offset.eq(issue_off)
                        m.next = "Turn-End"

            with m.State("Issue"):
                m.d.sync += Assert(sent[0] | sgid_settled, "engine: a descriptor within two clocks of a new sgid_index\n")
                m.d.comb += [self.desc.valid.eq(~sent[0]), self.rd_cmd.valid.eq(~sent[1]),
                             self.group.valid.eq(~sent[2])]
                now = Cat(sent[0] | self.desc.ready, sent[1] | self.rd_cmd.ready, sent[2] | self.group.ready)
                m.d.sync += sent.eq(now)
                with m.If(now.all()):
                    m.d.comb += info.w_en.eq(1)
                    m.d.sync += [infl_zero.eq(0), win_ok.eq(inflight != window - 1)]
                    m.d.sync += [sent.eq(0), inflight.eq(inflight + 1), si.eq(si + 1), si_lt_q.eq(si_lt_qm1), issue_off.eq(issue_off + seg),
                                 issue_psn.eq(issue_psn + psns), issued_last.eq(last)]
                    m.next = "Send-Loop"

            def la_lookup(name):
                """State ``name``: look the lookahead's QP up; ``name``-Resp takes the response."""
                with m.State(name):
                    m.d.comb += fetching.eq(1)
                    request(Op.LOOKUP, 0, who=la_qpn)
                    with m.If(self.qpc_req.ready):
                        m.d.sync += [resp_la.eq(1), resp_ho.eq(name == "Handoff")]
                        m.next = f"{name}-Resp"

            la_lookup("Peek")
            # Peek-Resp registers the fields the lookahead needs; Peek-Go computes from them (the
            # cache's response feeds only flip-flops here, not the burst arithmetic)
            la_rec = Signal(data.StructLayout({"state": QpState, "sq_ci": 16, "sq_pi": 16, "service": 8}))
            la_ok = Signal()
            la_rec_ring = Signal(ring_layout)
            with m.State("Peek-Resp"):
                rec = data.View(cached_layout, self.qpc_resp.payload.record)
                m.d.comb += fetching.eq(1)
                with m.If(self.qpc_resp.valid):
                    m.d.sync += [la_ok.eq(self.qpc_resp.payload.status == Status.OK),
                                 [getattr(la_rec, f).eq(getattr(rec, f)) for f in la_rec.shape().members],
                                 load_ring(la_rec_ring, rec)]
                    m.next = "Peek-Want"
            # Peek-Want registers what Peek-Go needs of la_rec: the first burst's address, whether the
            # QP has work, and the WQEs it has posted capped by the quota
            la_aq = Signal(16)
            la_go = Signal()
            la_addr_r = Signal(64)
            with m.State("Peek-Want"):
                rec = la_rec
                avail = Signal(16)
                m.d.comb += [fetching.eq(1), avail.eq(rec.sq_pi - rec.sq_ci)]
                m.d.sync += [la_aq.eq(Mux(avail < quota, avail, quota)), la_go.eq(la_ok & has_work(rec)),
                             la_addr_r.eq(ring_slot(la_rec_ring, rec.sq_ci)),
                             la_rts.eq(la_ok & (rec.state == QpState.RTS) & (rec.sq_ci != rec.sq_pi))]
                m.next = "Peek-Go"
            with m.State("Peek-Go"):
                rec = la_rec
                # as many as the queue has room for (pf_n < kpf here), the QP has posted and the quota uses
                room_ = Signal(range(kpf + 1))
                m.d.comb += [fetching.eq(1), la_addr.eq(la_addr_r),
                             la_short_next.eq(rec.service != ServiceType.UD),
                             room_.eq(kpf - pf_n),
                             la_want.eq(Mux(la_aq < room_, la_aq, room_))]
                # (a prefetch raised in the clock that chose Peek may still hold the AR register, or
                # have taken the queue's last place: wait for the one, skip the lookahead for the other)
                with m.If(~(la_go & pf_valid)):
                    with m.If(la_go & (pf_n != kpf)):
                        m.d.comb += la_raise.eq(1)
                        m.d.sync += [la_ci.eq(rec.sq_ci), la_next.eq(rec.sq_ci + 1), la_ring.eq(la_rec_ring),
                                     la_short.eq(la_short_next)]
                    m.next = "Send-Loop"

            # Handoff: the next turn starts on the ready list's head while this one drains beside it
            # (D-End re-queues it). Only onto a QP in RTS (a flush's CQEs would pass this turn's), and
            # only while no doorbell waits (doorbells are taken between turns).
            la_lookup("Handoff")
            with m.State("Handoff-Resp"):
                m.d.comb += fetching.eq(1)
                with m.If(self.qpc_resp.valid):
                    # state and indices as Peek found them (la_rts): only that QP's own requests and
                    # doorbells change them, and neither comes in between; only the status is new
                    # the ready list's head is la_qpn: Peek took la_qpn from it, Send-Loop went to
                    # Handoff only with r_rdy, and only Idle and this state pop it
                    m.d.sync += Assert(rdy.r_rdy & (rdy.r_data[:24] == la_qpn),
                                       "engine: Handoff onto a QP that is not the ready list's head\n")
                    with m.If(ho_start):
                        m.d.comb += rdy.r_en.eq(1)
                        m.d.sync += [d_active.eq(1), d_inflight.eq(inflight), d_zero.eq(infl_zero), dqpn.eq(qpn), dsquash.eq(0),
                                     dctx.state.eq(ctx.state), dctx.sq_ci.eq(ctx.sq_ci), dctx.sq_pi.eq(ctx.sq_pi),
                                     dctx.cqn.eq(ctx.cqn), doffset.eq(Mux(issued_last, 0, issue_off)),
                                     qpn.eq(la_qpn), offset.eq(rdy.r_data[24:]), steps.eq(0), steps_ge_q.eq(0), si.eq(0), si_lt_q.eq(1),
                                     peeked.eq(0), turn_flush.eq(0)]
                        m.next = "Loop"
                    with m.Else():
                        m.d.sync += la_rts.eq(0)              # this turn ends the usual way
                        m.next = "Send-Loop"

            def psn_sent(retire_now):
                with m.If(retire_now):
                    m.d.sync += resp_owed.eq(1)
                    m.next = "Retire-Next"
                with m.Else():
                    m.next = "Commit-PSN-Resp"

            with m.State("Commit"):
                # cd: the packet is the draining turn's (its steps were counted in its own turn)
                m.d.comb += [info.r_en.eq(1), self.status.ready.eq(1)]
                m.d.sync += [inflight.eq(inflight - 1), infl_zero.eq(inflight == 1), win_ok.eq(1)]
                with m.If(cd):
                    m.d.sync += [d_inflight.eq(d_inflight - 1), d_zero.eq(d_inflight == 1)]
                with m.Else():
                    m.d.sync += [si.eq(si - 1), si_lt_q.eq(si_le_q)]
                with m.If(Mux(cd, dsquash, squash)):
                    m.next = "Send-Loop"
                with m.Elif(self.status.payload.error):
                    m.d.comb += bus_err_fsm.eq(1)
                    report(ErrBit.BUS_PAYLOAD, CqeStatus.PAYLOAD_READ_ERR)
                    set_cqe(CqeStatus.PAYLOAD_READ_ERR, src=info_r)
                    with m.If(cd):
                        m.d.sync += [dsquash.eq(1), doffset.eq(0)]
                    with m.Else():
                        count_step(committed=True)
                        m.d.sync += squash.eq(1)
                    m.d.sync += [do_cqe.eq(1), ret.eq(RET_SEND), retire_cnt.eq(1)]
                    m.next = "Fail-SetError"
                with m.Else():
                    m.d.comb += [inc.pkt_count.eq(1), inc.byte_count.eq(info_r.seg)]
                    with m.If(~cd):
                        count_step(committed=True)
                    m.d.sync += [do_cqe.eq(info_r.signaled), ret.eq(RET_SEND),
                                 retire_cnt.eq(0)]
                    with m.If(info_r.last):
                        set_cqe(CqeStatus.SUCCESS, byte_len=info_r.length, src=info_r)
                    m.d.sync += [psn_arg.eq(info_r.psns), commit_last.eq(info_r.last)]
                    # ADD_PSN goes out now if the cache takes it, else from Commit-PSN
                    request(Op.ADD_PSN, info_r.psns)
                    with m.If(self.qpc_req.ready):
                        psn_sent(info_r.last & ~info_r.signaled)
                    with m.Else():
                        m.next = "Commit-PSN"

            def retired(ok):
                m.d.comb += [inc.wqe_count.eq(1), inc.wqe_errors.eq(retire_cnt == 1),
                             inc.flush_count.eq(retire_cnt == 2)]
                with m.If(~cd):                              # (doffset: set at Handoff, 0 on an error)
                    m.d.sync += offset.eq(0)
                with m.If(ret == RET_SEND):
                    m.next = "Send-Loop"
                with m.Else():
                    m.next = "Loop"

            # Commit sends the packet's ADD_PSN itself when the cache takes it, else Commit-PSN does.
            # An unsignaled last packet retires right behind it: the SET_SQ_CI request goes out while
            # ADD_PSN's response is on its way (the cache answers them in order), and Retire-Both
            # takes the two responses.
            with m.State("Commit-PSN"):
                request(Op.ADD_PSN, psn_arg)
                with m.If(self.qpc_req.ready):
                    psn_sent(commit_last & ~do_cqe)
            with m.State("Commit-PSN-Resp"):
                with m.If(self.qpc_resp.valid):
                    take_resp()
                    with m.If(commit_last):
                        m.next = "Complete"
                    with m.Else():
                        m.next = "Send-Loop"
            with m.State("Retire-Next"):
                request(Op.SET_SQ_CI, c_sq_ci + 1)
                with m.If(self.qpc_resp.valid):
                    m.d.sync += resp_owed.eq(0)
                    take_resp()
                with m.If(self.qpc_req.ready):
                    m.next = "Retire-Both"
            with m.State("Retire-Both"):
                with m.If(self.qpc_resp.valid):
                    ok = take_resp()
                    with m.If(resp_owed):
                        m.d.sync += resp_owed.eq(0)
                    with m.Else():
                        retired(ok)

            # retire / fail: [SET_ERROR] -> [CQE] -> [SET_ERROR if the CQE was dropped] -> SET_SQ_CI
            with m.State("Fail-SetError"):
                with m.If(c_state == QpState.ERROR):
                    m.next = "Complete"
                with m.Else():
                    m.next = "Set-Error"
            cache("Set-Error", Op.SET_ERROR, 0, goto("Complete"))

            with m.State("Complete"):
                with m.If(do_cqe):
                    m.d.comb += [cqw.cmd.valid.eq(1), cqw.cmd.payload.eq(cq_cmd)]
                    with m.If(cqw.cmd.ready):
                        m.next = "Complete-Wait"
                with m.Else():
                    m.next = "Completed"
            with m.State("Complete-Wait"):
                m.d.comb += cqw.done.ready.eq(1)
                with m.If(cqw.done.valid):
                    with m.If(cqw.done.payload.qp_error & (c_state != QpState.ERROR)):
                        m.next = "Drop-SetError"
                    with m.Else():
                        m.next = "Completed"
            cache("Drop-SetError", Op.SET_ERROR, 0, goto("Completed"))

            with m.State("Completed"):
                with m.If(ret == RET_DB):
                    m.next = "DB-Schedule"
                with m.Else():
                    m.next = "Retire"

            cache("Retire", Op.SET_SQ_CI, c_sq_ci + 1, retired)

            # the draining turn's last commit is done: its QP goes back to the ready list (or leaves)
            with m.State("D-End"):
                m.d.comb += in_dend.eq(1)
                with m.If(dctx_work):
                    m.d.comb += rq_we.eq(1)
                with m.Else():
                    m.d.comb += [sc_we.eq(1), sc_wd.eq(0)]
                m.d.sync += [d_active.eq(0), dsquash.eq(0)]
                m.next = "Send-Loop"

            with m.State("Turn-End"):
                m.d.sync += Assert(~d_active, "engine: a turn ends before the one it took over from\n")
                m.d.sync += sending.eq(0)
                with m.If(pf_n > la_held):
                    m.d.comb += next_take.eq(1)               # only the lookahead may stay between turns
                with m.Elif(ctx_work):
                    m.d.comb += rq_we.eq(1)
                with m.Else():
                    m.d.comb += [sc_we.eq(1), sc_wd.eq(0)]
                    m.d.sync += offset.eq(0)
                with m.If(pf_n <= la_held):
                    m.next = "Idle"

        # the fields of each state's report (checked against report()'s arguments)
        report_fields = {
            "DB": (ErrBit.DB_BAD_QPN, 0),
            "DB-Lookup-Resp": (ErrBit.BUS_QPC, 0),
            "DB-Verdict": (ErrBit.DB_REJECTED, db_status),
            "Turn-Resp": (ErrBit.BUS_QPC, 0),
            "Fetched": (Mux(rerr, ErrBit.BUS_WQE, ErrBit.WQE_ERROR), Mux(rerr, CqeStatus.WQE_FETCH_ERR, validate)),
            "Commit": (ErrBit.BUS_PAYLOAD, CqeStatus.PAYLOAD_READ_ERR),
        }
        m.d.comb += [fsm_bit.eq(by_state(fsm, {st: b for st, (b, _) in report_fields.items()})),
                     fsm_status.eq(by_state(fsm, {st: v for st, (_, v) in report_fields.items()}))]
        m.d.comb += cq_wait.eq(fsm.ongoing("Complete-Wait") | fsm.ongoing("CQ-DB-Wait"))
        m.d.sync += Assert(~cqw.err.valid | cq_wait, "engine: a completion writer report outside its wait\n")

        m.d.comb += fetch_st.eq(fsm.ongoing("Fetch"))

        # qpc_resp.ready is 1 (see request()): a response outside these states would be lost. An
        # assertion in simulation (Verilator --assert); synthesis removes it.
        m.d.sync += Assert(~self.qpc_resp.valid | Cat(*(fsm.ongoing(s) for s in resp_states)).any(),
                           "engine: QP cache response in a state that does not take it\n")
        # ctx / dctx from the response: every turn's own response (take_resp()), and Handoff's when
        # it starts the new turn (ho_start, on which Handoff-Resp pops the ready list)
        rec = data.View(cached_layout, self.qpc_resp.payload.record)

        def load_ctx():
            return [ctx.eq(rec), ci_end.eq(rec.sq_ci == rec.sq_pi)] + load_ring(c_ring, rec)
        with m.If(ho_start & resp_ho):
            m.d.sync += load_ctx()
        with m.Elif(resp_ok & ~resp_la & cd):
            m.d.sync += [dctx.state.eq(rec.state), dctx.sq_ci.eq(rec.sq_ci), dctx.sq_pi.eq(rec.sq_pi),
                         dctx.cqn.eq(rec.cqn)]
        with m.Elif(resp_ok & ~resp_la):
            m.d.sync += load_ctx()
        # (Loop: a Handoff has just loaded the new turn's ctx; pf_raise waits there for la_valid)
        uses_ring = sending & ~fetching & ~fsm.ongoing("Loop")
        m.d.sync += [Assert(~uses_ring | (nci_end == (next_ci == ctx.sq_pi)), "engine: registered next_ci == sq_pi differs\n"),
                     Assert(~uses_ring | pf_valid | (pfci_end == (pf_ci == ctx.sq_pi)),
                            "engine: registered pf_ci == sq_pi differs\n")]
        m.d.sync += Assert(ci_end == (ctx.sq_ci == ctx.sq_pi), "engine: ci_end\n")
        la_resp_states = ("Peek-Resp", "Handoff-Resp")
        m.d.sync += Assert(~self.qpc_resp.valid | (resp_la == Cat(*(fsm.ongoing(s) for s in la_resp_states)).any()),
                           "engine: a lookahead response outside Peek-Resp / Handoff-Resp, or the reverse\n")
        m.d.sync += Assert(~self.qpc_resp.valid | (resp_ho == fsm.ongoing("Handoff-Resp")),
                           "engine: Handoff's response flag differs\n")

        # The ready list's write data by state alone (its enable carries the conditions), and
        # has_work() of ctx / dctx a clock old: Turn-End and D-End are entered from Loop and
        # Send-Loop, which take no cache response, so neither context changed on the way in.
        m.d.comb += rq_wd.eq(Mux(in_dend, Cat(dqpn, doffset),
                                      Cat(qpn, Mux(fsm.ongoing("DB-Queue"), 0, offset))))
        m.d.sync += [ctx_work.eq(has_work(ctx)), dctx_work.eq(has_work(dctx))]
        m.d.sync += Assert((ctx_work == has_work(ctx)) | ~fsm.ongoing("Turn-End"),
                           "engine: Turn-End's registered has_work differs\n")
        m.d.sync += Assert((dctx_work == has_work(dctx)) | ~in_dend,
                           "engine: D-End's registered has_work differs\n")
        check_credit(m, rdy, "engine: ready list (one entry per QP at most)")
        check_credit(m, info, "engine: in-flight packets (the window)", read=True)

        # rdy.empty, not r_rdy: an entry written in Turn-End reaches r_rdy clocks later
        m.d.comb += self.idle.eq(fsm.ongoing("Idle") & rdy.empty & ~rdy.w_en & ~self.doorbell.valid &
                                 ~self.cq_doorbell.valid & (pf_n == 0))
        return m


class FrameGate(wiring.Component):
    """Marks the frames of failed packets aborted, and forwards payload-read results to the engine.

    Per packet (in order) it takes the payload reader's ``rd_status`` and the engine's ``group``
    entry (queued here, so the engine's issue never waits for the read); ``abort = error | (poisoned & ~start)``, where *poisoned* is set by an error and cleared by
    a packet with ``start`` (the engine issues one with ``start`` = 1 whenever it has no packet in
    flight, so only packets issued behind a failing one are poisoned). ``abort`` goes into a FIFO
    that is read at each frame's last beat (``user`` |= abort); a last beat waits for its entry.

    Members
    -------
    rd_status : In(stream ``{error}``), group : In(stream ``{start}``)
    status : Out(stream ``{error}``)
        To the engine; never holds more than the engine's window.
    frame_in : In(PacketStream(W, user 1)), frame_out : Out(PacketStream(W, user 1))
    """

    def __init__(self, window: int = 16, depth: int = 32, *, width: int = 64):
        self.window, self.depth, self.width = window, depth, width
        super().__init__({
            "rd_status": In(stream.Signature(status_layout)),
            "group": In(stream.Signature(group_layout)),
            "status": Out(stream.Signature(status_layout)),
            "frame_in": In(PacketStream(width, user_width=1)),
            "frame_out": Out(PacketStream(width, user_width=1)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.aborts = aborts = SyncFIFOBuffered(width=1, depth=self.depth)
        m.submodules.results = results = SyncFIFOBuffered(width=1, depth=self.window)
        m.submodules.groups = groups = SyncFIFOBuffered(width=1, depth=self.window)
        m.d.comb += [groups.w_en.eq(self.group.valid), groups.w_data.eq(self.group.payload.start),
                     self.group.ready.eq(groups.w_rdy)]
        poisoned = Signal()
        take = self.rd_status.valid & groups.r_rdy & aborts.w_rdy & results.w_rdy
        error = self.rd_status.payload.error
        start = groups.r_data
        m.d.comb += [self.rd_status.ready.eq(take), groups.r_en.eq(take),
                     aborts.w_en.eq(take), aborts.w_data.eq(error | (poisoned & ~start)),
                     results.w_en.eq(take), results.w_data.eq(error)]
        with m.If(take):
            m.d.sync += poisoned.eq((poisoned & ~start) | error)
        m.d.comb += [self.status.valid.eq(results.r_rdy), self.status.payload.error.eq(results.r_data),
                     results.r_en.eq(self.status.ready)]

        fin, fout = self.frame_in, self.frame_out
        is_last = fin.payload.last
        gate_ok = ~is_last | aborts.r_rdy
        m.d.comb += [fout.valid.eq(fin.valid & gate_ok), fout.payload.eq(fin.payload),
                     fin.ready.eq(fout.ready & gate_ok)]
        with m.If(is_last):
            m.d.comb += fout.payload.user.eq(fin.payload.user | aborts.r_data)
        m.d.comb += aborts.r_en.eq(fin.valid & fout.ready & is_last & aborts.r_rdy)
        return m
