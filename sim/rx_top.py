"""The receive path as one simulation top: frames in, responder, host memory out, response descriptors out.

:class:`RxTop` joins the blocks the way ``Rnic`` will: :class:`~rnic.hdl.receive.front_end.RxFrontEnd` and
:class:`~rnic.hdl.receive.payload_writer.PayloadWriter` take every frame beat together,
:class:`~rnic.hdl.receive.responder.Responder` answers each verdict, with its own
:class:`~rnic.hdl.qp_cache.QpCache`, :class:`~rnic.hdl.completion.CqeWriter` and
:class:`~rnic.hdl.receive.host_access.HostAccess` on one AXI4 master. The port's settings are plain inputs
(the register block's values in ``Rnic``); the QP cache's control port is ``qpc_ctrl`` / ``qpc_ack``.
The counters add up the responder's and the completion writer's strobes; ``err_*`` hold the error
registers' view (the first report's QPN and bit | status << 8, and every bit seen).
"""

from __future__ import annotations

from amaranth import Array, Module
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..hdl.bus import AXI4Signature, AXIStreamSignature
from ..hdl.completion import CqeWriter
from ..hdl.dma import AxiInterconnect
from ..hdl.narrow import NarrowPort
from ..hdl.qp_cache import QpCache, ack_layout, ctrl_layout
from ..model.qpc import QpcCacheConfig
from ..model.receive import DropReason
from ..model.regs import SGID_ENTRIES
from ..model.responder import COUNT_NAMES, RxDrop
from ..hdl.receive.front_end import RxFrontEnd
from ..hdl.receive.host_access import HostAccess
from ..hdl.receive.payload_writer import PayloadWriter
from ..hdl.receive.responder import ENGINE_COUNTS, Responder, resp_layout

__all__ = ["RxTop", "TOP_COUNTS"]

#: Engine-level counters of the top: the responder's strobes and the completion writer's.
TOP_COUNTS = ENGINE_COUNTS + ("cqe_count", "cqe_drops")


class RxTop(wiring.Component):
    def __init__(self, width: int = 64, max_qps: int = 1 << 10):
        self.width, self.max_qps = width, max_qps
        self.cache_cfg = QpcCacheConfig(tag_width=1, qpn_bits=max(1, (max_qps - 1).bit_length()))
        super().__init__({
            "s_axis": In(AXIStreamSignature(width, user_width=1)),
            "m_axi": Out(AXI4Signature(addr_width=64, data_width=width, id_width=6)),
            "resp": Out(stream.Signature(resp_layout)),
            "ib": In(1), "mac": In(48), "lid": In(16),
            "sgid_gid": In(data.ArrayLayout(128, SGID_ENTRIES)), "sgid_mac": In(data.ArrayLayout(48, SGID_ENTRIES)),
            "sgid_vlan": In(data.ArrayLayout(13, SGID_ENTRIES)), "sgid_valid": In(SGID_ENTRIES),
            "qpc_base": In(64), "qpc_size": In(24), "cq_base": In(64), "cq_size": In(24),
            "mr_base": In(64), "mr_size": In(32), "res_base": In(64),
            "received": Out(32), "stateless": Out(data.ArrayLayout(32, len(DropReason))),
            "drops": Out(data.ArrayLayout(32, len(RxDrop))),
            "counts": Out(data.StructLayout({n: 32 for n in COUNT_NAMES})),
            "engine_counts": Out(data.StructLayout({n: 32 for n in TOP_COUNTS})),
            "err_status": Out(16), "err_qpn": Out(24), "err_info": Out(16),
            "idle": Out(1), "resp_state": Out(8),
            "qpc_ctrl": In(stream.Signature(ctrl_layout)), "qpc_ack": Out(stream.Signature(ack_layout)),
        })

    def elaborate(self, platform):
        m = Module()
        W = self.width
        m.submodules.fe = fe = RxFrontEnd(W, n_gids=SGID_ENTRIES)
        m.submodules.pw = pw = PayloadWriter(W, depth=1 << (2 * 4224 * 8 // W).bit_length())
        m.submodules.resp = r = Responder(max_qps=self.max_qps, cache=self.cache_cfg)
        m.submodules.cache = cache = QpCache(self.cache_cfg)
        m.submodules.cqw = cqw = CqeWriter()
        m.submodules.host = host = HostAccess(W)
        m.submodules.axi = ic = AxiInterconnect(4, data_width=W, urgent=[0, 2, 3])

        # every beat to the front end and the payload writer together
        ax = self.s_axis
        both = fe.s_axis.tready & pw.frames.ready
        m.d.comb += [
            fe.s_axis.tdata.eq(ax.tdata), fe.s_axis.tkeep.eq(ax.tkeep), fe.s_axis.tlast.eq(ax.tlast),
            fe.s_axis.tuser.eq(ax.tuser), fe.s_axis.tvalid.eq(ax.tvalid & pw.frames.ready),
            pw.frames.payload.data.eq(ax.tdata), pw.frames.payload.keep.eq(ax.tkeep),
            pw.frames.payload.last.eq(ax.tlast), pw.frames.valid.eq(ax.tvalid & fe.s_axis.tready),
            ax.tready.eq(both),
        ]
        sg = self.sgid_gid
        m.d.comb += [fe.ib.eq(self.ib), fe.mac.eq(self.mac), fe.lid.eq(self.lid), fe.gids.eq(sg),
                     fe.gid_valid.eq(self.sgid_valid), self.received.eq(fe.received), self.stateless.eq(fe.dropped)]

        wiring.connect(m, fe.m_result, r.result)
        wiring.connect(m, r.qpc_req, cache.req)
        wiring.connect(m, cache.resp, r.qpc_resp)
        wiring.connect(m, r.host_cmd, host.cmd)
        wiring.connect(m, host.resp, r.host_resp)
        wiring.connect(m, r.pieces, pw.pieces)
        wiring.connect(m, pw.done, r.wdone)
        wiring.connect(m, r.cq_cmd, cqw.cmd)
        wiring.connect(m, cqw.done, r.cq_done)
        wiring.connect(m, r.resp, wiring.flipped(self.resp))
        wiring.connect(m, wiring.flipped(self.qpc_ctrl), cache.ctrl)
        wiring.connect(m, cache.ack, wiring.flipped(self.qpc_ack))
        vlan = Array(self.sgid_vlan[i] for i in range(SGID_ENTRIES))
        m.d.comb += [
            r.qpc_base.eq(self.qpc_base), r.qpc_size.eq(self.qpc_size), r.mr_base.eq(self.mr_base),
            r.mr_size.eq(self.mr_size), r.res_base.eq(self.res_base), r.port_lid.eq(self.lid),
            r.sgid_gid.eq(Array(sg[i] for i in range(SGID_ENTRIES))[r.sgid_index]),
            r.sgid_mac.eq(Array(self.sgid_mac[i] for i in range(SGID_ENTRIES))[r.sgid_index]),
            r.sgid_vlan_id.eq(vlan[r.sgid_index][:12]), r.sgid_vlan_present.eq(vlan[r.sgid_index][12]),
            cache.qpc_base.eq(self.qpc_base), cache.table_size.eq(self.qpc_size),
            cqw.cq_base.eq(self.cq_base), cqw.cq_size.eq(self.cq_size),
            self.drops.eq(r.drops), self.counts.eq(r.counts),
        ]

        for i, master in enumerate((cache.m_axi, pw.m_axi, host.m_axi, cqw.m_axi)):
            if W > 64 and i in (0, 3):
                m.submodules[f"narrow{i}"] = port = NarrowPort(W)
                wiring.connect(m, master, port.s_axi)
                master = port.m_axi
            wiring.connect(m, master, getattr(ic, f"s{i}"))
        wiring.connect(m, ic.m_axi, wiring.flipped(self.m_axi))
        m.d.comb += ic.bw_cap.eq(0)

        m.d.comb += [self.idle.eq(~r.busy & ~fe.m_result.valid), self.resp_state.eq(r.state)]
        ec = self.engine_counts
        strobes = {n: getattr(r.inc, n) for n in ENGINE_COUNTS}
        strobes["cqe_count"] = cqw.inc_cqe_count
        strobes["cqe_drops"] = cqw.inc_cqe_drops
        for name, s in strobes.items():
            extra = cqw.inc_bus_errors if name == "bus_errors" else 0
            m.d.sync += ec[name].eq(ec[name] + s + extra)

        for e in (r.err, cqw.err):
            with m.If(e.valid):
                m.d.sync += self.err_status.eq(self.err_status | (1 << e.bit))
                with m.If(self.err_status == 0):
                    m.d.sync += [self.err_qpn.eq(e.qpn), self.err_info.eq(e.bit | (e.status << 8))]
        return m
