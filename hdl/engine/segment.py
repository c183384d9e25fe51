"""Segmentation: the next packet of the current WQE, and what goes out with it."""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...model.engine import ACKREQ_EVERY, ATOMIC_OPS, BTH_BASE, IMM_OPS, REQUEST_OPS, SEND_OPS
from ...model.opcodes import Opcode
from ...model.qpc import ServiceType
from ...model.wqe import WqeOpcode
from ..descriptor import DescriptorLayout
from ..qp_cache import cached_layout
from .layouts import in_set, info_layout, rd_cmd_layout, wqe_layout

__all__ = ["Segmenter"]


class Segmenter(wiring.Component):
    """The next packet's segment, PSN count, position and BTH opcode, and the descriptor, payload
    command and commit record built from the context, the WQE and the issue offset.

    The segment (``seg``, ``psns``, ``first``, ``last`` and the payload address) is registered: it
    is computed from ``issue_off`` in the clocks before an issue, and the engine enters its Issue
    state only from Send-Loop, with ``issue_off``, the WQE and the context held meanwhile. The rest
    is combinational from those registers. An RDMA READ is one packet with no payload and as many
    PSNs as its response takes; an atomic is one packet with no payload, one PSN and an AtomicETH from
    the WQE's ``remote_addr``, ``rkey``, ``compare_add`` and ``swap``. The BTH opcode is
    :func:`rnic.model.engine.bth_opcode` built from the model's tables
    (:data:`~rnic.model.engine.BTH_BASE`, ``SEND_OPS``, ``IMM_OPS``). AckReq is set on a message's last
    packet and, on RC, on every packet whose PSN is 63 mod 64.

    Members
    -------
    ctx : In(cached_layout)
        The turn's QP context.
    wqe : In(wqe_layout)
        The WQE being issued, as it was fetched (the whole 64 bytes: inline data is bytes 32..63).
    qpn, issue_off, issue_psn : In
        The QP, the byte offset of the next packet in its message, and its PSN.
    port_lid, sgid_gid, sgid_mac, sgid_vlan_id, sgid_vlan_present : In
        The port's LID and the SGID table entry of ``ctx.sgid_index``.
    mtu : Out(13)
        The path MTU in bytes (combinational from ``ctx``).
    seg, psns, last : Out
        The next packet's payload bytes, the PSNs it uses and whether it ends the message
        (registered, see above).
    desc : Out(DescriptorLayout)
        The packet's header descriptor: the payload of the engine's ``desc`` stream.
    rd_cmd : Out(rd_cmd_layout)
        The payload command: the payload of the engine's ``rd_cmd`` stream.
    info : Out(info_layout)
        What the packet's commit needs, written to the in-flight queue as it issues.
    """

    def __init__(self):
        super().__init__({
            "ctx": In(cached_layout), "wqe": In(wqe_layout), "qpn": In(24), "issue_off": In(32),
            "issue_psn": In(24), "port_lid": In(16), "sgid_gid": In(128), "sgid_mac": In(48),
            "sgid_vlan_id": In(12), "sgid_vlan_present": In(1),
            "mtu": Out(13), "seg": Out(13), "psns": Out(24), "last": Out(1),
            "desc": Out(DescriptorLayout), "rd_cmd": Out(rd_cmd_layout), "info": Out(info_layout),
        })

    def elaborate(self, platform):
        m = Module()
        ctx, wqe, op, issue_off = self.ctx, self.wqe, self.wqe.opcode, self.issue_off
        seg, psns, last, mtu = self.seg, self.psns, self.last, self.mtu
        ud = Signal()
        m.d.comb += ud.eq(ctx.service == ServiceType.UD)
        log_mtu = Signal(4)
        m.d.comb += [log_mtu.eq(ctx.path_mtu[:3] + 7), mtu.eq(Const(1, 13) << log_mtu)]
        is_read, is_request, is_cas, is_fadd = Signal(), Signal(), Signal(), Signal()
        m.d.comb += [is_read.eq(op == WqeOpcode.RDMA_READ), is_request.eq(in_set(op, REQUEST_OPS)),
                     is_cas.eq(op == WqeOpcode.ATOMIC_CMP_SWAP), is_fadd.eq(op == WqeOpcode.ATOMIC_FETCH_ADD)]

        remaining = Signal(32)
        m.d.comb += remaining.eq(wqe.length - issue_off)
        first = Signal()
        rd_addr = Signal(64)
        with m.If(is_request):
            # a READ resumed at issue_off (a retransmission after part of it was answered) asks for the rest
            m.d.sync += [seg.eq(0), last.eq(1),
                         psns.eq(Mux(~is_read | (remaining == 0), 1, (remaining + mtu - 1) >> log_mtu))]
        with m.Else():
            m.d.sync += [seg.eq(Mux(remaining > mtu, mtu, remaining)), last.eq(remaining <= mtu), psns.eq(1)]
        reth_va, reth_len = Signal(64), Signal(32)
        m.d.sync += [first.eq(issue_off == 0), rd_addr.eq(wqe.local_addr + issue_off),
                     reth_va.eq(wqe.remote_addr + Mux(is_read, issue_off, 0)),
                     reth_len.eq(Mux(is_read, remaining, wqe.length))]

        # BTH opcode: the service's base, plus the operation's first opcode, plus the position
        base = Mux(ctx.service == ServiceType.UD, BTH_BASE[ServiceType.UD],
                   Mux(ctx.service == ServiceType.UC, BTH_BASE[ServiceType.UC], BTH_BASE[ServiceType.RC]))
        imm_op = in_set(op, IMM_OPS)
        send_op = in_set(op, SEND_OPS)
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
        m.d.comb += bth_op.eq(Mux(is_read, int(Opcode.RC_RDMA_READ_REQUEST),
                                  Mux(is_cas, int(ATOMIC_OPS[WqeOpcode.ATOMIC_CMP_SWAP]),
                                      Mux(is_fadd, int(ATOMIC_OPS[WqeOpcode.ATOMIC_FETCH_ADD]),
                                          base | (low + Mux(send_op, 0, 6))))))

        ackreq_psn = (ctx.service == ServiceType.RC) & (
            self.issue_psn[:ACKREQ_EVERY.bit_length() - 1] == ACKREQ_EVERY - 1)     # every 64th PSN on RC
        d = self.desc
        has_reth = is_read | (~send_op & ~is_request & first)
        atomic = is_cas | is_fadd
        m.d.comb += [
            d.mode.eq(ctx.link_mode), d.payload_len.eq(seg),
            d.dst_mac.eq(Mux(ud, wqe.dst_mac, ctx.dst_mac)), d.src_mac.eq(self.sgid_mac),
            d.vlan_present.eq(self.sgid_vlan_present),
            d.vlan_tci.eq(Mux(self.sgid_vlan_present, Cat(self.sgid_vlan_id, Const(0, 1), ctx.sl[:3]), 0)),
            d.src_gid.eq(self.sgid_gid), d.dst_gid.eq(Mux(ud, wqe.dst_gid, ctx.dst_gid)),
            d.traffic_class.eq(ctx.traffic_class), d.flow_label.eq(ctx.flow_label),
            d.hop_limit.eq(ctx.hop_limit), d.ip_id.eq(self.issue_psn[:16]), d.udp_sport.eq(ctx.udp_sport),
            d.sl.eq(ctx.sl), d.dlid.eq(Mux(ud, wqe.dlid, ctx.dlid)), d.slid.eq(self.port_lid),
            d.opcode.eq(bth_op),
            d.se.eq(wqe.flags[1] & last & (send_op | (op == WqeOpcode.RDMA_WRITE_WITH_IMM))),
            d.pkey.eq(ctx.pkey), d.dest_qp.eq(Mux(ud, wqe.dest_qpn, ctx.dest_qpn)),
            d.ackreq.eq(last | ackreq_psn),
            d.psn.eq(self.issue_psn),
            d.reth_va.eq(Mux(has_reth, reth_va, 0)), d.reth_rkey.eq(Mux(has_reth, wqe.rkey, 0)),
            d.reth_dma_len.eq(Mux(has_reth, reth_len, 0)),
            d.atomic_va.eq(Mux(atomic, wqe.remote_addr, 0)), d.atomic_rkey.eq(Mux(atomic, wqe.rkey, 0)),
            d.atomic_swap.eq(Mux(is_fadd, wqe.compare_add, Mux(is_cas, wqe.swap, 0))),
            d.atomic_compare.eq(Mux(is_cas, wqe.compare_add, 0)),
            d.imm.eq(Mux(last & imm_op, wqe.imm, 0)),
            d.deth_qkey.eq(Mux(ud, Mux(wqe.qkey[31], ctx.qkey, wqe.qkey), 0)),
            d.deth_src_qp.eq(Mux(ud, self.qpn, 0)),
        ]
        c = self.rd_cmd
        m.d.comb += [c.addr.eq(rd_addr), c.len.eq(seg), c.inline.eq(wqe.flags[3]),
                     c.data.eq(wqe.as_value()[256:512])]
        i = self.info
        m.d.comb += [i.seg.eq(seg), i.psns.eq(psns), i.last.eq(last), i.wr_id.eq(wqe.wr_id),
                     i.opcode.eq(wqe.opcode), i.length.eq(wqe.length), i.signaled.eq(wqe.flags[0])]
        return m
