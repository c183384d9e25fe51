"""The whole RNIC: registers, descriptor engine, QP context cache, payload DMA, packet builder and
the receive path with its responder, on one AXI4 master, one AXI4-Lite slave, one AXI4-Stream frame
output and one frame input.

``docs/README.md`` draws the data path. The host AXI bus and the frame stream are ``width`` bits
wide; the QP cache and the completion writer move 8-byte beats on it as AXI narrow transfers
(:class:`rnic.hdl.narrow.NarrowPort`), the payload reader and the WQE fetch full-width beats.
"""

import dataclasses

from amaranth import Cat, Module, Mux, Signal
from amaranth.hdl import Assert
from amaranth.lib import data, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from ..model.descriptor import DESC_FIELDS
from ..model.config import RnicConfig
from ..model.regs import SGID_ENTRIES, caps, caps2
from .bus import AXI4LiteSignature, AXI4Signature, AXIStreamSignature, skid_arbiter, stream_to_axis
from .completion import CqeWriter, CqShare, connect_writer, err_layout
from .dma import AxiInterconnect, PayloadReader
from .engine import DescriptorEngine, FrameGate
from .fifo import BlockFIFO
from .narrow import NarrowPort
from .packet_builder import EARLY_BITS, LATE_FIELDS, PacketBuilder
from .qp_cache import CtrlOp, Op, QpCache
from .receive.front_end import RxFrontEnd
from .receive.path import ReceivePath
from .receive.responder import Responder
from .receive.tx_merge import TxMerge
from .regs import RegisterBlock

__all__ = ["Rnic"]

_MASTERS = ("qp_cache", "payload", "wqe", "completion", "rx_write", "rx_host")   # AXI ID bits [6:4] = index
_BULK = ("payload", "rx_write")     # bursts; the others' accesses are short and go first


class Rnic(wiring.Component):
    """The RNIC: the transmit engine and the receive path.

    Parameters
    ----------
    config : RnicConfig
        Every parameter of the engine (``rnic.model.config``, README "Configuration"): datapath
        width, largest MTU, QPNs the scheduler holds, issue window, WQE prefetch, payload and
        descriptor queue depths, QP context cache geometry. ``Rnic`` passes them to the blocks it
        builds, each explicitly.

    Members
    -------
    s_axil : In(AXI4LiteSignature(16, 32))
        Registers and doorbells (``docs/engine.md``, "Register map").
    m_axi : Out(AXI4Signature(64, width, 7))
        Host memory. ID bits [6:4] name the internal master (QP cache, payload, WQE, completion,
        receive payload writes, responder accesses).
    m_axis : Out(AXIStreamSignature(width, user_width=1))
        Frames, first byte in lane 0, ``tuser`` = 1 on the last beat of an aborted frame (a MAC
        drops it). No FCS, no padding to 60 bytes. A frame starts only when its payload is on chip,
        so while ``tready`` stays high its beats come on consecutive clocks (a MAC may not take a
        gap inside a frame). Response packets (ACK / NAK, READ responses, atomic ACKs) leave here too.
    s_axis : In(AXIStreamSignature(width, user_width=1))
        Frames in, first byte in lane 0, ``tuser`` = 1 on the last beat: the MAC saw a bad FCS.
    irq : Out(1)
        Level interrupt: ``INT_STATUS & INT_ENABLE`` non-zero.
    """

    def __init__(self, config: RnicConfig = RnicConfig()):
        if not isinstance(config, RnicConfig):
            raise ValueError(f"config must be an RnicConfig, not {config!r}")
        self.config = config
        width = config.width
        super().__init__({
            "s_axil": In(AXI4LiteSignature(addr_width=16, data_width=32)),
            "m_axi": Out(AXI4Signature(addr_width=64, data_width=width, id_width=7)),
            "m_axis": Out(AXIStreamSignature(width, user_width=1)),
            "s_axis": In(AXIStreamSignature(width, user_width=1)),
            "irq": Out(1),
        })

    def block_factories(self):
        """Constructors of the blocks as this engine builds them, by submodule name: ``regs``,
        ``cache``, ``engine``, ``reader``, ``builder``, ``gate``, ``axi``, ``path`` (the receive path), and
        the receive path's ``rx`` (front end) and ``responder`` (``rnic.fpga synth --block`` synthesizes
        one alone)."""
        c = self.config
        W = c.width
        # the engine's and the responder's requests (and the context prefetches) share the cache: the tag's
        # top bits name the requester
        shared = dataclasses.replace(c.cache_qpc, tag_width=c.qpc.tag_width + (2 if c.ctx_prefetch else 1))
        return {
            "regs": lambda: RegisterBlock(caps=caps(c.max_qps), caps2=caps2(W, c.mtu)),
            # the engine requests only QPNs its scheduler holds: the tags need log2(max_qps) bits
            "cache": lambda: QpCache(shared),
            "engine": lambda: DescriptorEngine(c.qpc, max_qps=c.max_qps, window=c.window, max_mtu=c.mtu,
                                               wqe_prefetch=c.wqe_prefetch, deep_below=c.deep_below,
                                               wqe_width=W, ctx_prefetch=c.ctx_prefetch),
            "reader": lambda: PayloadReader(max_payload=c.max_mtu, fifo_depth=c.payload_queue, data_width=W),
            "builder": lambda: PacketBuilder(W, late=True),
            # abort bits wait here from a packet's read result until its frame leaves: the window's
            # uncommitted packets plus as many committed ones as the payload queue holds
            "gate": lambda: FrameGate(c.window, depth=2 * c.window, width=W),
            # the control reads (contexts, WQEs, CQ) go before payload bursts: each is short and
            # bounded by its master's own credit, and a WQE read queued behind a 4 KiB burst stalls
            # the next packet for the burst's length
            "axi": lambda: AxiInterconnect(len(_MASTERS), data_width=W,
                                           urgent=[i for i, n in enumerate(_MASTERS) if n not in _BULK]),
            "path": lambda: ReceivePath(W, c.max_qps, c.cache_qpc, max_mtu=c.mtu, prefetch=c.ctx_prefetch > 0),
            "rx": lambda: RxFrontEnd(W, n_gids=SGID_ENTRIES),
            "responder": lambda: Responder(max_qps=c.max_qps, max_mtu=c.mtu, cache=c.cache_qpc),
        }

    def elaborate(self, platform):
        m = Module()
        c = self.config
        W = c.width
        new = self.block_factories()
        m.submodules.regs = regs = new["regs"]()
        m.submodules.cache = cache = new["cache"]()
        m.submodules.engine = eng = new["engine"]()
        m.submodules.reader = rd = new["reader"]()
        m.submodules.builder = pb = new["builder"]()
        m.submodules.gate = gate = new["gate"]()
        m.submodules.axi = ic = new["axi"]()
        m.submodules.path = path = new["path"]()
        m.submodules.cqw = cqw = CqeWriter()
        m.submodules.cq_share = share = CqShare(2)
        m.submodules.merge = merge = TxMerge()

        wiring.connect(m, wiring.flipped(self.s_axil), regs.s_axil)
        wiring.connect(m, ic.m_axi, wiring.flipped(self.m_axi))
        wiring.connect(m, wiring.flipped(self.s_axis), path.s_axis)
        masters = (cache.m_axi, rd.m_axi, eng.m_axi, cqw.m_axi, path.m_axi_write, path.m_axi_host)
        for i, (name, master) in enumerate(zip(_MASTERS, masters)):
            if W > 64 and name in ("qp_cache", "completion"):
                m.submodules[f"{name}_narrow"] = port = NarrowPort(W)
                wiring.connect(m, master, port.s_axi)
                master = port.m_axi
            wiring.connect(m, master, getattr(ic, f"s{i}"))
        m.d.comb += ic.bw_cap.eq(regs.bw_cap)

        # registers -> engine, receive path, completion writer
        m.d.comb += [
            eng.enable.eq(regs.enable), eng.reliable.eq(regs.reliable), eng.qpc_size.eq(regs.qpc_size), eng.quota.eq(regs.quota),
            eng.port_lid.eq(regs.port_lid), cqw.cq_base.eq(regs.cq_base), cqw.cq_size.eq(regs.cq_size),
            regs.sgid_index.eq(eng.sgid_index), eng.sgid_gid.eq(regs.sgid_gid), eng.sgid_mac.eq(regs.sgid_mac),
            eng.sgid_vlan_id.eq(regs.sgid_vlan_id), eng.sgid_vlan_present.eq(regs.sgid_vlan_present),
            regs.cqe_written.eq(cqw.cqe_written),
            cache.qpc_base.eq(regs.qpc_base), cache.table_size.eq(regs.qpc_size),
            rd.max_burst.eq(regs.max_burst), regs.qpc_counters.eq(cache.counters),
            path.ib.eq(regs.port_ib), path.mac.eq(regs.port_mac), path.lid.eq(regs.port_lid),
            path.gids.eq(regs.sgid_all), path.gid_valid.eq(regs.port_gids),
            path.qpc_base.eq(regs.qpc_base), path.qpc_size.eq(regs.qpc_size), path.mr_base.eq(regs.mr_base),
            path.mr_size.eq(regs.mr_size), path.res_base.eq(regs.res_base),
            path.reliable.eq(regs.reliable), path.req_base.eq(regs.req_base), path.timer_tick.eq(regs.timer_tick),
            regs.rx_sgid_index.eq(path.sgid_index), path.sgid_gid.eq(regs.rx_sgid_gid),
            path.sgid_mac.eq(regs.rx_sgid_mac), path.sgid_vlan_id.eq(regs.rx_sgid_vlan_id),
            path.sgid_vlan_present.eq(regs.rx_sgid_vlan_present),
            regs.rx_counters.eq(Cat(path.received, path.stateless, path.drops, path.counts, path.req_counts)),
        ]
        for name, _ in regs.inc.shape():
            m.d.comb += getattr(regs.inc, name).eq(sum(getattr(src, name) for src in (eng.inc, path.inc)
                                                       if name in src.shape().members))
        self._errors(m, regs, eng.err, path.err)
        wiring.connect(m, regs.doorbell, eng.doorbell)
        wiring.connect(m, regs.cq_doorbell, eng.cq_doorbell)
        wiring.connect(m, regs.rq_doorbell, path.rq_doorbell)
        wiring.connect(m, path.upd, eng.upd)            # the requester's results, applied between turns
        wiring.connect(m, eng.timer, path.eng_timer)    # local ACK timers armed as packets are issued

        # one completion writer for the engine's and the responder's CQEs
        wiring.connect(m, eng.cq, share.c0)
        wiring.connect(m, path.cq, share.c1)
        connect_writer(m, share.w, cqw)

        # the QP cache: the engine's requests, the responder's and the prefetches through a skid arbiter
        # (ready and the cache's inputs from flip-flops, a clock of latency); the tag's top bits name the
        # requester. A prefetch is a LOOKUP whose response is dropped: the receive path's first (its frame
        # waits now), then the engine's.
        tw = c.qpc.tag_width
        req = [(eng.qpc_req.valid, eng.qpc_req.ready, eng.qpc_req.payload),
               (path.qpc_req.valid, path.qpc_req.ready, path.qpc_req.payload)]
        if c.ctx_prefetch:
            pe, pp = eng.qpc_prefetch, path.qpc_prefetch
            pf_valid, pf_ready = Signal(), Signal()
            pf = Signal.like(eng.qpc_req.payload)
            m.d.comb += [pf_valid.eq(pe.valid | pp.valid), pf.op.eq(Op.LOOKUP),
                         pf.qpn.eq(Mux(pp.valid, pp.payload, pe.payload)),
                         pp.ready.eq(pf_ready), pe.ready.eq(pf_ready & ~pp.valid)]
            req.append((pf_valid, pf_ready, pf))
        req_valid, req_payload, req_from = skid_arbiter(m, req, cache.req.ready, "qpc_req")
        m.d.comb += [cache.req.valid.eq(req_valid), cache.req.payload.op.eq(req_payload.op),
                     cache.req.payload.qpn.eq(req_payload.qpn), cache.req.payload.arg.eq(req_payload.arg),
                     cache.req.payload.tag.eq(Cat(req_payload.tag, req_from))]
        resp_from = cache.resp.payload.tag[tw:]
        to_eng, to_path = resp_from == 0, resp_from == 1
        for dst, mine in ((eng.qpc_resp, to_eng), (path.qpc_resp, to_path)):
            m.d.comb += [dst.valid.eq(cache.resp.valid & mine), dst.payload.status.eq(cache.resp.payload.status),
                         dst.payload.tag.eq(cache.resp.payload.tag[:tw]), dst.payload.qpn.eq(cache.resp.payload.qpn),
                         dst.payload.record.eq(cache.resp.payload.record)]
        m.d.comb += cache.resp.ready.eq(Mux(to_path, path.qpc_resp.ready, Mux(to_eng, eng.qpc_resp.ready, 1)))

        # packets: the engine's and the responses, merged a packet at a time
        wiring.connect(m, eng.desc, merge.req_desc)
        wiring.connect(m, eng.rd_cmd, merge.req_rd_cmd)
        wiring.connect(m, eng.group, merge.req_group)
        wiring.connect(m, path.resp, merge.resp)
        desc = merge.desc

        # descriptors and payload into the builder, frames through the gate
        # Two queues written together: the builder's s1..s4 read the early part (the late fields'
        # EARLY_BITS only), its s5 the late fields, which thus skip four stage registers. The late
        # queue holds the descriptors in s1..s4 too (4 more), so it has room whenever the early one has.
        def early(p):
            return Cat(*(getattr(p, n)[:EARLY_BITS.get(n, w)] for n, w in DESC_FIELDS
                         if n not in LATE_FIELDS or n in EARLY_BITS))

        def late(p):
            return Cat(*(getattr(p, n) for n in LATE_FIELDS))
        m.submodules.desc_q = dq = BlockFIFO(width=len(early(desc.payload)), depth=c.desc_queue,
                                             fabric_out=True)
        m.submodules.late_q = lq = BlockFIFO(width=len(late(desc.payload)), depth=c.desc_queue + 8,
                                             fabric_out=True)
        m.d.comb += [lq.w_en.eq(desc.valid & dq.w_rdy), lq.w_data.eq(late(desc.payload)),
                     pb.desc_late.valid.eq(lq.r_rdy), late(pb.desc_late.payload).eq(lq.r_data),
                     lq.r_en.eq(pb.desc_late.ready)]
        m.d.sync += Assert(~lq.w_en | lq.w_rdy, "rnic: late descriptor queue full\n")
        # Store and forward: a descriptor goes to the builder only once its packet's payload has all
        # arrived (the reader's statuses come in packet order), so a started frame never waits for
        # host memory; the payload queue holds a whole packet (checked by RnicConfig).
        arrived = Signal(range(c.desc_queue + c.window + 2))
        release = Signal()
        m.d.comb += release.eq(dq.r_rdy & (arrived != 0) & pb.desc.ready)
        m.d.sync += arrived.eq(arrived + (rd.status.valid & rd.status.ready) - release)
        m.d.comb += [dq.w_en.eq(desc.valid), dq.w_data.eq(early(desc.payload)), desc.ready.eq(dq.w_rdy),
                     pb.desc.valid.eq(dq.r_rdy & (arrived != 0)), early(pb.desc.payload).eq(dq.r_data),
                     dq.r_en.eq(release)]
        wiring.connect(m, merge.rd_cmd, rd.cmd)
        wiring.connect(m, rd.payload, pb.payload)
        wiring.connect(m, rd.status, gate.rd_status)
        wiring.connect(m, merge.group, gate.group)
        wiring.connect(m, gate.status, eng.status)
        wiring.connect(m, pb.frame, gate.frame_in)
        stream_to_axis(m, gate.frame_out, self.m_axis)

        # frames issued but not yet out: part of "busy"
        pending = Signal(range(1 << 10))
        issued = desc.valid & desc.ready
        left = gate.frame_out.valid & gate.frame_out.ready & gate.frame_out.payload.last
        m.d.sync += pending.eq(pending + issued - left)

        # QPC_CMD -> the QP context cache's control port
        cmd = Signal(data.StructLayout({"op": CtrlOp, "qpn": 24}))
        busy = Signal()
        result = Signal(2)
        m.d.comb += [regs.qpc_cmd.ready.eq(~busy), regs.qpc_cmd_busy.eq(busy), regs.qpc_cmd_result.eq(result),
                     cache.ctrl.valid.eq(busy), cache.ctrl.payload.op.eq(cmd.op), cache.ctrl.payload.qpn.eq(cmd.qpn),
                     cache.ack.ready.eq(1)]
        with m.If(regs.qpc_cmd.valid & ~busy):
            m.d.sync += [busy.eq(1), cmd.op.eq(regs.qpc_cmd.payload.op), cmd.qpn.eq(regs.qpc_cmd.payload.qpn)]
        with m.If(cache.ack.valid):
            m.d.sync += [busy.eq(0), result.eq(cache.ack.payload.status)]

        m.d.comb += [regs.idle.eq(eng.idle & path.idle & (pending == 0) & ~busy), self.irq.eq(regs.irq)]
        return m

    @staticmethod
    def _errors(m, regs, eng_err, rx_err):
        """Error reports into the register block: the engine's as they come, the receive path's through
        a small queue in the clocks the engine reports nothing (both are rare; an Assert checks the queue)."""
        m.submodules.rx_errors = q = SyncFIFOBuffered(width=err_layout.size - 1, depth=4)
        head = data.View(data.StructLayout({k: v for k, v in err_layout.members.items() if k != "valid"}), q.r_data)
        m.d.comb += [q.w_en.eq(rx_err.valid), q.w_data.eq(Cat(rx_err.bit, rx_err.qpn, rx_err.status)),
                     q.r_en.eq(~eng_err.valid),
                     regs.err_valid.eq(eng_err.valid | q.r_rdy),
                     regs.err_bit.eq(Mux(eng_err.valid, eng_err.bit, head.bit)),
                     regs.err_qpn.eq(Mux(eng_err.valid, eng_err.qpn, head.qpn)),
                     regs.err_status.eq(Mux(eng_err.valid, eng_err.status, head.status))]
        m.d.sync += Assert(~q.w_en | q.w_rdy, "rnic: receive error queue full\n")
