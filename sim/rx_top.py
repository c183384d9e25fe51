"""The receive path as one simulation top: frames in, responder, host memory out, response descriptors out.

:class:`RxTop` is :class:`~rnic.hdl.receive.path.ReceivePath` with a QP context cache and a completion
writer of its own, and the two host masters and theirs on one AXI4 port (``Rnic`` shares the cache and
the writer with the engine). The port's settings are plain inputs (the register block's values in
``Rnic``); the QP cache's control port is ``qpc_ctrl`` / ``qpc_ack``. The counters add up the receive
path's strobes; ``err_*`` hold the error registers' view (the first report's QPN and bit | status << 8,
and every bit seen).
"""

from __future__ import annotations

from amaranth import Array, Module
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..hdl.bus import AXI4Signature, AXIStreamSignature
from ..hdl.completion import CqeWriter, connect_writer
from ..hdl.dma import AxiInterconnect
from ..hdl.narrow import NarrowPort
from ..hdl.qp_cache import QpCache, ack_layout, ctrl_layout
from ..hdl.receive.path import PATH_COUNTS, ReceivePath
from ..hdl.receive.responder import resp_layout
from ..hdl.regs import rq_doorbell_layout
from ..model.qpc import QpcCacheConfig
from ..model.receive import DropReason
from ..model.regs import SGID_ENTRIES
from ..model.responder import COUNT_NAMES, RxDrop

__all__ = ["RxTop", "TOP_COUNTS"]

#: Engine-level counters of the top.
TOP_COUNTS = PATH_COUNTS


class RxTop(wiring.Component):
    def __init__(self, width: int = 64, max_qps: int = 1 << 10):
        self.width, self.max_qps = width, max_qps
        self.cache_cfg = QpcCacheConfig(tag_width=1, qpn_bits=max(1, (max_qps - 1).bit_length()))
        super().__init__({
            "s_axis": In(AXIStreamSignature(width, user_width=1)),
            "rq_doorbell": In(stream.Signature(rq_doorbell_layout)),
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
        m.submodules.path = p = ReceivePath(W, self.max_qps, self.cache_cfg)
        m.submodules.cache = cache = QpCache(self.cache_cfg)
        m.submodules.cqw = cqw = CqeWriter()
        m.submodules.axi = ic = AxiInterconnect(4, data_width=W, urgent=[0, 2, 3])

        wiring.connect(m, wiring.flipped(self.s_axis), p.s_axis)
        wiring.connect(m, wiring.flipped(self.rq_doorbell), p.rq_doorbell)
        sg = self.sgid_gid
        vlan = Array(self.sgid_vlan[i] for i in range(SGID_ENTRIES))
        m.d.comb += [p.ib.eq(self.ib), p.mac.eq(self.mac), p.lid.eq(self.lid), p.gids.eq(sg),
                     p.gid_valid.eq(self.sgid_valid),
                     p.qpc_base.eq(self.qpc_base), p.qpc_size.eq(self.qpc_size), p.mr_base.eq(self.mr_base),
                     p.mr_size.eq(self.mr_size), p.res_base.eq(self.res_base),
                     p.sgid_gid.eq(Array(sg[i] for i in range(SGID_ENTRIES))[p.sgid_index]),
                     p.sgid_mac.eq(Array(self.sgid_mac[i] for i in range(SGID_ENTRIES))[p.sgid_index]),
                     p.sgid_vlan_id.eq(vlan[p.sgid_index][:12]), p.sgid_vlan_present.eq(vlan[p.sgid_index][12]),
                     self.received.eq(p.received), self.stateless.eq(p.stateless), self.drops.eq(p.drops),
                     self.counts.eq(p.counts), self.idle.eq(p.idle), self.resp_state.eq(p.state)]
        wiring.connect(m, p.qpc_req, cache.req)
        wiring.connect(m, cache.resp, p.qpc_resp)
        wiring.connect(m, p.resp, wiring.flipped(self.resp))
        wiring.connect(m, wiring.flipped(self.qpc_ctrl), cache.ctrl)
        wiring.connect(m, cache.ack, wiring.flipped(self.qpc_ack))
        connect_writer(m, p.cq, cqw)
        m.d.comb += [cache.qpc_base.eq(self.qpc_base), cache.table_size.eq(self.qpc_size),
                     cqw.cq_base.eq(self.cq_base), cqw.cq_size.eq(self.cq_size)]

        for i, master in enumerate((cache.m_axi, p.m_axi_write, p.m_axi_host, cqw.m_axi)):
            if W > 64 and i in (0, 3):
                m.submodules[f"narrow{i}"] = port = NarrowPort(W)
                wiring.connect(m, master, port.s_axi)
                master = port.m_axi
            wiring.connect(m, master, getattr(ic, f"s{i}"))
        wiring.connect(m, ic.m_axi, wiring.flipped(self.m_axi))
        m.d.comb += ic.bw_cap.eq(0)

        ec = self.engine_counts
        for name in TOP_COUNTS:
            m.d.sync += ec[name].eq(ec[name] + getattr(p.inc, name))
        with m.If(p.err.valid):
            m.d.sync += self.err_status.eq(self.err_status | (1 << p.err.bit))
            with m.If(self.err_status == 0):
                m.d.sync += [self.err_qpn.eq(p.err.qpn), self.err_info.eq(p.err.bit | (p.err.status << 8))]
        return m
