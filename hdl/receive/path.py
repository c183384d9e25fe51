"""The receive path: frames in, the responder's verdicts and the requester's responses executed, host memory
and responses out."""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.hdl import Assert
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ...model.qpc import PathMtu, QpcCacheConfig
from ...model.receive import DropReason
from ...model.regs import SGID_ENTRIES
from ...model.requester import REQ_COUNTS, RespDrop
from ...model.responder import COUNT_NAMES, RxDrop
from ..bus import AXI4Signature, AXIStreamSignature
from ..completion import CqClientSignature, CqShare, err_layout
from ..qp_cache import request_layout, response_layout
from ..regs import rq_doorbell_layout
from ..requester.completer import Completer
from ..requester.layouts import timer_layout, upd_layout
from ..requester.timers import TimerTable
from .front_end import RxFrontEnd
from .host_access import HostAccess
from .payload_writer import PayloadWriter
from .responder import ENGINE_COUNTS, Responder, resp_layout

__all__ = ["ReceivePath", "PATH_COUNTS"]

#: Engine counters (``COUNTERS`` registers) the receive path adds to: the responder's and its CQEs'.
PATH_COUNTS = ENGINE_COUNTS + ("cqe_count", "cqe_drops")


class ReceivePath(wiring.Component):
    """:class:`RxFrontEnd` and :class:`PayloadWriter` take every frame beat together (``s_axis.tready``
    when both can); :class:`Responder` answers each verdict through :class:`HostAccess` (contexts'
    receive half, WQEs, MR records, slots, atomics), the shared QP context cache (``qpc_req`` /
    ``qpc_resp``) and the shared completion writer (``cq``); response packets leave on ``resp``.
    Under ``reliable`` the responder hands each response frame to the requester's :class:`Completer`,
    which shares the host access and the completion writer with it (never at the same time: the
    responder waits for the completer) and has its payload placed by the payload writer; the
    completer's result for the QP context leaves on ``upd``.

    Parameters
    ----------
    width : int
        ``s_axis`` and host bus data width.
    max_qps : int
        QPNs at or above it are BAD_QPN.
    cache : QpcCacheConfig
        Of the QP cache port (its tag width).
    max_mtu : int
        The largest path MTU code a QP context may hold (a larger one is BAD_CONTEXT).

    Members
    -------
    s_axis : In(AXIStreamSignature(width, user_width=1))
        Frames; ``tuser`` on the last beat: bad FCS.
    rq_doorbell : In(stream ``{qpn, pi, timer}``)
        Receive-queue doorbells (``DB_RQ_PI``) and requester timer events (``REQ_TIMER``, ``timer``), taken
        between frames.
    m_axi_write, m_axi_host : Out(AXI4Signature(data_width=width))
        The payload writer's bursts; the responder's single accesses.
    ib, mac, lid, gids, gid_valid : In
        The port (``PORT_MODE``, ``PORT_MAC``, ``PORT_LID``, the SGID table, ``PORT_GIDS``).
    qpc_base, qpc_size, mr_base, mr_size, res_base : In
        The tables (registers of the same names).
    sgid_index : Out(4); sgid_gid, sgid_mac, sgid_vlan_id, sgid_vlan_present : In
        The SGID entry of the responding QP, combinational from ``sgid_index``.
    reliable : In(1)
        CONTROL.RELIABLE: responses go to the completer (else they are dropped as RESPONSE).
    req_base : In(64)
        REQ_BASE: the requester records.
    timer_tick : In(16)
        TIMER_TICK: clocks per tick of the requester's :class:`TimerTable` (0 stops it).
    eng_timer : In(stream of :data:`~rnic.hdl.requester.layouts.timer_layout`)
        The engine's timer arms (a packet at ``una_psn`` issued); they go before the completer's
        commands. An expired timer becomes a TIMEOUT or RNR_DONE job, as a REQ_TIMER write does.
    upd : Out(stream of :data:`~rnic.hdl.requester.layouts.upd_layout`)
        The completer's result, for the engine (the context's send half); a job ends when it is taken.
    req_counts : Out
        The requester's counters (``REQ_*`` registers): its events, then the responses it ignored by reason.
    err : Out(err_layout)
        The responder's, the completer's and their completions' error reports.
    inc : Out
        Counter strobes of :data:`PATH_COUNTS`.
    received, stateless, drops, counts : Out
        The receive counters (``RX_*``, ``RESP_*`` registers).
    idle : Out(1)
        No verdict waiting and the responder idle.
    state : Out(8)
        The responder's FSM state (for stall reports).
    """

    def __init__(self, width: int, max_qps: int, cache: QpcCacheConfig, max_mtu: int = PathMtu.MTU_4096,
                 prefetch: bool = False):
        self.width, self.max_qps, self.cache, self.max_mtu = width, max_qps, cache, max_mtu
        self.prefetch = prefetch
        super().__init__({
            "s_axis": In(AXIStreamSignature(width, user_width=1)),
            "rq_doorbell": In(stream.Signature(rq_doorbell_layout)),
            "m_axi_write": Out(AXI4Signature(data_width=width)),
            "m_axi_host": Out(AXI4Signature(data_width=width)),
            "qpc_req": Out(stream.Signature(request_layout(cache))),
            "qpc_resp": In(stream.Signature(response_layout(cache))),
            "qpc_prefetch": Out(stream.Signature(24)),
            "cq": Out(CqClientSignature),
            "resp": Out(stream.Signature(resp_layout)),
            "ib": In(1), "mac": In(48), "lid": In(16),
            "gids": In(data.ArrayLayout(128, SGID_ENTRIES)), "gid_valid": In(SGID_ENTRIES),
            "qpc_base": In(64), "qpc_size": In(25), "mr_base": In(64), "mr_size": In(32), "res_base": In(64),
            "sgid_index": Out(4), "sgid_gid": In(128), "sgid_mac": In(48), "sgid_vlan_id": In(12),
            "sgid_vlan_present": In(1),
            "reliable": In(1), "req_base": In(64), "timer_tick": In(16),
            "eng_timer": In(stream.Signature(timer_layout)),
            "upd": Out(stream.Signature(upd_layout)),
            "req_counts": Out(data.ArrayLayout(32, len(REQ_COUNTS) + len(RespDrop))),
            "err": Out(err_layout),
            "inc": Out(data.StructLayout({n: {"byte_count": 13, "bus_errors": 2}.get(n, 1) for n in PATH_COUNTS})),
            "received": Out(32), "stateless": Out(data.ArrayLayout(32, len(DropReason))),
            "drops": Out(data.ArrayLayout(32, len(RxDrop))),
            "counts": Out(data.StructLayout({n: 32 for n in COUNT_NAMES})),
            "idle": Out(1), "state": Out(8),
        })

    def elaborate(self, platform):
        m = Module()
        W = self.width
        m.submodules.fe = fe = RxFrontEnd(W, n_gids=SGID_ENTRIES)
        m.submodules.pw = pw = PayloadWriter(W, depth=1 << (2 * 4224 * 8 // W).bit_length())
        m.submodules.resp = r = Responder(max_qps=self.max_qps, max_mtu=self.max_mtu, cache=self.cache)
        m.submodules.host = host = HostAccess(W)
        m.submodules.comp = comp = Completer()
        m.submodules.cq_share = share = CqShare(2)
        m.submodules.timers = tt = TimerTable(self.max_qps)

        ax = self.s_axis
        m.d.comb += [
            fe.s_axis.tdata.eq(ax.tdata), fe.s_axis.tkeep.eq(ax.tkeep), fe.s_axis.tlast.eq(ax.tlast),
            fe.s_axis.tuser.eq(ax.tuser), fe.s_axis.tvalid.eq(ax.tvalid & pw.frames.ready),
            pw.frames.payload.data.eq(ax.tdata), pw.frames.payload.keep.eq(ax.tkeep),
            pw.frames.payload.last.eq(ax.tlast), pw.frames.valid.eq(ax.tvalid & fe.s_axis.tready),
            ax.tready.eq(fe.s_axis.tready & pw.frames.ready),
            fe.ib.eq(self.ib), fe.mac.eq(self.mac), fe.lid.eq(self.lid), fe.gids.eq(self.gids),
            fe.gid_valid.eq(self.gid_valid),
            self.received.eq(fe.received), self.stateless.eq(fe.dropped),
        ]
        wiring.connect(m, fe.m_result, r.result)
        if self.prefetch:
            self.prefetch_waiting(m, fe.m_result)
        # receive-queue doorbells and REQ_TIMER writes first, then expired timers (a job each)
        db, ex = self.rq_doorbell, tt.expired
        m.d.comb += [r.rq_db.valid.eq(db.valid | ex.valid),
                     r.rq_db.payload.eq(Mux(db.valid, db.payload, Cat(ex.payload.qpn, Const(0, 24 - len(ex.payload.qpn)),
                                                                      ex.payload.kind, Const(0, 15), Const(1, 1)))),
                     db.ready.eq(r.rq_db.ready), ex.ready.eq(r.rq_db.ready & ~db.valid)]
        # timer commands: the engine's arms, then the completer's
        et, ct = self.eng_timer, comp.timer
        qb = len(tt.cmd.payload.qpn)
        m.d.comb += [tt.cmd.valid.eq(et.valid | ct.valid), tt.tick.eq(self.timer_tick),
                     tt.cmd.payload.eq(Mux(et.valid, Cat(et.payload.qpn[:qb], et.payload.arm, et.payload.kind,
                                                         et.payload.delay),
                                           Cat(ct.payload.qpn[:qb], ct.payload.arm, ct.payload.kind, ct.payload.delay))),
                     et.ready.eq(tt.cmd.ready), ct.ready.eq(tt.cmd.ready & ~et.valid)]
        wiring.connect(m, r.qpc_req, wiring.flipped(self.qpc_req))
        wiring.connect(m, wiring.flipped(self.qpc_resp), r.qpc_resp)
        wiring.connect(m, r.pieces, pw.pieces)
        wiring.connect(m, pw.done, r.wdone)
        wiring.connect(m, r.cq_cmd, share.c0.cmd)
        wiring.connect(m, share.c0.done, r.cq_done)
        wiring.connect(m, comp.cq, share.c1)
        wiring.connect(m, share.w, wiring.flipped(self.cq))
        wiring.connect(m, r.job, comp.job)
        wiring.connect(m, comp.place, r.place)
        wiring.connect(m, r.placed, comp.placed)
        wiring.connect(m, comp.upd, wiring.flipped(self.upd))

        # one host access for both: the completer runs only while the responder waits for it
        to_comp = Signal()
        with m.If(host.cmd.valid & host.cmd.ready):
            m.d.sync += to_comp.eq(comp.host_cmd.valid)
        m.d.comb += [
            host.cmd.valid.eq(r.host_cmd.valid | comp.host_cmd.valid),
            host.cmd.payload.eq(Mux(comp.host_cmd.valid, comp.host_cmd.payload, r.host_cmd.payload)),
            r.host_cmd.ready.eq(host.cmd.ready & ~comp.host_cmd.valid),
            comp.host_cmd.ready.eq(host.cmd.ready),
            r.host_resp.payload.eq(host.resp.payload), comp.host_resp.payload.eq(host.resp.payload),
            r.host_resp.valid.eq(host.resp.valid & ~to_comp), comp.host_resp.valid.eq(host.resp.valid & to_comp),
            host.resp.ready.eq(Mux(to_comp, comp.host_resp.ready, r.host_resp.ready)),
        ]
        m.d.sync += Assert(~(r.host_cmd.valid & comp.host_cmd.valid), "receive path: two host accesses at once\n")
        job_error = Signal()
        with m.If(comp.job.valid & comp.job.ready):
            m.d.sync += job_error.eq(0)
        with m.If(comp.upd.valid & comp.upd.ready & comp.upd.payload.error):
            m.d.sync += job_error.eq(1)
        m.d.comb += [r.reliable.eq(self.reliable), r.job_error.eq(job_error), comp.req_base.eq(self.req_base)]
        # the requester's counters, a clock after their strobes
        strobes = Signal(len(REQ_COUNTS) + len(RespDrop))
        cc = comp.count
        m.d.sync += strobes.eq(Cat(*(getattr(cc, n) for n in REQ_COUNTS),
                                   *(cc.drop & (cc.reason == int(d)) for d in RespDrop)))
        for i in range(len(strobes)):
            with m.If(strobes[i]):
                m.d.sync += self.req_counts[i].eq(self.req_counts[i] + 1)
        wiring.connect(m, r.resp, wiring.flipped(self.resp))
        wiring.connect(m, pw.m_axi, wiring.flipped(self.m_axi_write))
        wiring.connect(m, host.m_axi, wiring.flipped(self.m_axi_host))
        m.d.comb += [
            r.qpc_base.eq(self.qpc_base), r.qpc_size.eq(self.qpc_size), r.mr_base.eq(self.mr_base),
            r.mr_size.eq(self.mr_size), r.res_base.eq(self.res_base), r.port_lid.eq(self.lid),
            self.sgid_index.eq(r.sgid_index), r.sgid_gid.eq(self.sgid_gid), r.sgid_mac.eq(self.sgid_mac),
            r.sgid_vlan_id.eq(self.sgid_vlan_id), r.sgid_vlan_present.eq(self.sgid_vlan_present),
            self.drops.eq(r.drops), self.counts.eq(r.counts),
            self.idle.eq(~r.busy & ~fe.m_result.valid & comp.job.ready & ~ex.valid), self.state.eq(r.state),
        ]
        # the responder and the completer report nothing while they wait for their completion (the writer's
        # reports then), and the responder nothing while the completer runs
        cq = self.cq
        m.d.comb += self.err.eq(Mux(cq.err.valid, cq.err, Mux(r.err.valid, r.err, comp.err)))
        m.d.sync += Assert((cq.err.valid + r.err.valid + comp.err.valid) <= 1,
                           "receive path: two error reports in one clock\n")
        for n in ENGINE_COUNTS:
            extra = {"bus_errors": cq.inc_bus_errors + cc.bus_errors, "wqe_errors": cc.wqe_errors,
                     "flush_count": cc.flush_count}.get(n, 0)
            m.d.comb += getattr(self.inc, n).eq(getattr(r.inc, n) + extra)
        m.d.comb += [self.inc.cqe_count.eq(cq.inc_cqe_count), self.inc.cqe_drops.eq(cq.inc_cqe_drops)]
        return m

    def prefetch_waiting(self, m, res):
        """``qpc_prefetch``: the QP of a good frame whose verdict waits for the responder (busy with an
        earlier one), once per frame, if the responder will look it up (below ``qpc_size`` and
        ``max_qps``)."""
        pf, qpn = self.qpc_prefetch, res.payload.desc.dest_qp
        asked = Signal()
        with m.If(res.valid & res.ready):
            m.d.sync += asked.eq(0)
        with m.If(pf.ready):
            m.d.sync += pf.valid.eq(0)
        with m.If(res.valid & ~res.ready & ~asked & res.payload.ok & (qpn < self.qpc_size) &
                  (qpn < self.max_qps) & (~pf.valid | pf.ready)):
            m.d.sync += [pf.valid.eq(1), pf.payload.eq(qpn), asked.eq(1)]
