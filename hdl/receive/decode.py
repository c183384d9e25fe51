"""The receive path's decoder: one frame record in, its verdict, descriptor and payload position out, by
the rules and in the order of :func:`rnic.model.receive.classify`. See :class:`FrameDecode`."""

from __future__ import annotations

from amaranth import Array, Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ...model import headers as hd
from ...model.descriptor import MAX_PAYLOAD, LinkMode
from ...model.opcodes import Opcode
from ...model.receive import DropReason
from ..descriptor import DescriptorLayout
from .crc_check import record_layout
from .layouts import ETH_MIN_FRAME, LAYOUTS, LEN_BITS, be_field, byte_of, ext_offsets, opcode_props, result_layout

__all__ = ["FrameDecode", "NET_BYTES", "TRANSPORT_BYTES"]

NET_BYTES = hd.IPv6.SIZE + hd.UDP.SIZE           # the IP header / GRH and UDP, from where they start
TRANSPORT_BYTES = hd.BTH.SIZE + 28               # BTH and the longest extended headers
_IPV4_MAPPED = 0xFFFF << 32


def _window(m, hdr, starts, select, nbytes, name):
    """``nbytes`` bytes of ``hdr`` from ``starts[select]`` (a multiplexer over the distinct starts)."""
    out = Signal(8 * nbytes, name=name)
    with m.Switch(select):
        for key, start in starts.items():
            with m.Case(key):
                m.d.comb += out.eq(hdr[8 * start:8 * (start + nbytes)])
    return out


class FrameDecode(wiring.Component):
    """Checks one :func:`~.crc_check.record_layout` record per frame and emits its :func:`result_layout`:
    ``ok`` or the first failing :class:`~rnic.model.receive.DropReason`, and the parsed descriptor, equal
    to :func:`~rnic.model.frames.parse_frame`'s for a frame that passes. Four pipeline stages; ``i.ready``
    is ``o.ready`` or an empty output (the stages advance together).

    Members
    -------
    i : ``In(stream.Signature(record_layout()))``
    o : ``Out(stream.Signature(result_layout()))``
    ib : ``In(1)``
        An InfiniBand port (else Ethernet).
    mac, lid : ``In(48)``, ``In(16)``
        The port's unicast MAC (Ethernet) and LID (IB).
    gids, gid_valid : ``In(data.ArrayLayout(128, n_gids))``, ``In(n_gids)``
        The port's GIDs (IPv4 addresses as IPv4-mapped GIDs); a destination GID matches a valid entry.
    """

    def __init__(self, n_gids: int = 16):
        self.n_gids = n_gids
        super().__init__({
            "i": In(stream.Signature(record_layout())), "o": Out(stream.Signature(result_layout())),
            "ib": In(1), "mac": In(48), "lid": In(16),
            "gids": In(data.ArrayLayout(128, n_gids)), "gid_valid": In(n_gids),
        })

    def elaborate(self, platform):
        m = Module()
        adv = Signal()
        full = Signal(4)                # valid bits of stages 1, 2, 3 and 4 (the output)
        m.d.comb += [adv.eq(~full[3] | self.o.ready), self.i.ready.eq(adv), self.o.valid.eq(full[3])]
        with m.If(adv):
            m.d.sync += full.eq(Cat(self.i.valid, full[:3]))

        # --- stage 1: what the frame is and where its headers are ----------------------------------
        r = self.i.payload
        hdr = r.hdr
        s1 = Signal(data.StructLayout({
            "r": record_layout(), "net": 8 * NET_BYTES, "tr": 8 * TRANSPORT_BYTES, "ib": 1,
            "tagged": 1, "stacked": 1, "mode": 3, "mode_ok": 1, "l2_short": 1, "need": LEN_BITS}))
        ethertype = Cat(byte_of(hdr, 13), byte_of(hdr, 12))
        tagged = ethertype == hd.ETHERTYPE_VLAN
        inner = Mux(tagged, Cat(byte_of(hdr, 17), byte_of(hdr, 16)), ethertype)
        mode, mode_ok = Signal(3), Signal()
        with m.If(self.ib):
            lnh = be_field(hdr, 0, hd.LRH, "lnh")
            m.d.comb += [mode.eq(Mux(lnh == hd.LNH_IBA_GLOBAL, LinkMode.IB_GLOBAL, LinkMode.IB_LOCAL)),
                         mode_ok.eq((be_field(hdr, 0, hd.LRH, "lver") == hd.LVER_IBA) & lnh[1])]
        with m.Else():
            with m.Switch(inner):
                for et, md in ((hd.ETHERTYPE_IPV4, LinkMode.ROCEV2_IPV4), (hd.ETHERTYPE_IPV6, LinkMode.ROCEV2_IPV6),
                               (hd.ETHERTYPE_ROCEV1, LinkMode.ROCEV1)):
                    with m.Case(et):
                        m.d.comb += [mode.eq(md), mode_ok.eq(1)]
        # the windows' selects come straight from the record (CrcCheck decided the same layout)
        layout = r.layout
        net = _window(m, hdr, {0: 14, 1: 18, 2: hd.LRH.SIZE}, Mux(self.ib, 2, layout[0]), NET_BYTES, "net_window")
        tr = _window(m, hdr, {la.index: la.bth for la in LAYOUTS}, layout, TRANSPORT_BYTES, "transport_window")
        need = Array(Const(la.need, LEN_BITS) for la in LAYOUTS)[layout]
        with m.If(adv):
            m.d.sync += [s1.r.eq(r), s1.net.eq(net), s1.tr.eq(tr), s1.ib.eq(self.ib), s1.tagged.eq(tagged),
                         s1.stacked.eq(tagged & (inner == hd.ETHERTYPE_VLAN)), s1.mode.eq(mode),
                         s1.mode_ok.eq(mode_ok), s1.need.eq(need),
                         s1.l2_short.eq(Mux(self.ib, r.length < hd.LRH.SIZE,
                                            (r.length < 14) | (tagged & (r.length < 18))))]

        # --- stage 2: every check's condition, the descriptor ---------------------------------------
        rec, net, tr = s1.r, s1.net, s1.tr
        length, ib = rec.length, s1.ib
        md = s1.mode
        v4, v6, roce1 = md == LinkMode.ROCEV2_IPV4, md == LinkMode.ROCEV2_IPV6, md == LinkMode.ROCEV1
        grh_mode = roce1 | (md == LinkMode.IB_GLOBAL)
        l2 = Mux(ib, 0, Mux(s1.tagged, 18, 14))
        ip4 = {n: be_field(net, 0, hd.IPv4, n) for n in ("version", "ihl", "tos", "total_length", "ident", "flags",
                                                         "frag_offset", "ttl", "protocol", "checksum", "src", "dst")}
        ip6 = {n: be_field(net, 0, hd.IPv6, n) for n in ("version", "traffic_class", "flow_label", "payload_length",
                                                         "next_header", "hop_limit", "src", "dst")}
        udp4 = {n: be_field(net, hd.IPv4.SIZE, hd.UDP, n) for n in ("sport", "dport", "length")}
        udp6 = {n: be_field(net, hd.IPv6.SIZE, hd.UDP, n) for n in ("sport", "dport", "length")}
        dport, udp_len_field = Mux(v4, udp4["dport"], udp6["dport"]), Mux(v4, udp4["length"], udp6["length"])
        bth = {n: be_field(tr, 0, hd.BTH, n) for n, _ in hd.BTH.LAYOUT}
        opcode = bth["opcode"]
        known, ext_len, payload_ok, fixed, fixed_len = opcode_props(m, opcode)
        pkt_len = be_field(rec.hdr, 0, hd.LRH, "pkt_len")
        bth_at = Array(Const(la.bth, 8) for la in LAYOUTS)[Mux(ib, Mux(md == LinkMode.IB_GLOBAL, 7, 6),
                                                                Cat(s1.tagged, md[:2]))]

        # NOT_ROCE from the network header
        if_net_bad = Signal()
        with m.Switch(md):
            with m.Case(LinkMode.ROCEV2_IPV4):
                m.d.comb += if_net_bad.eq((ip4["version"] != 4) | (ip4["ihl"] != 5) | (ip4["protocol"] != hd.IP_PROTO_UDP)
                                          | ip4["flags"][0] | (ip4["frag_offset"] != 0)
                                          | (dport != hd.ROCEV2_UDP_PORT))
            with m.Case(LinkMode.ROCEV2_IPV6):
                m.d.comb += if_net_bad.eq((ip6["version"] != 6) | (ip6["next_header"] != hd.IP_PROTO_UDP)
                                          | (dport != hd.ROCEV2_UDP_PORT))
            with m.Case(LinkMode.ROCEV1, LinkMode.IB_GLOBAL):
                m.d.comb += if_net_bad.eq((ip6["version"] != 6) | (ip6["next_header"] != hd.GRH_NEXT_HEADER_IBA))

        # BAD_LENGTH: the operands are registered here and compared in stage 3 (the sums and compares in one
        # clock were the critical path); each keeps the shape of the expression it stands for
        end = Signal(LEN_BITS + 2)
        m.d.comb += end.eq(l2 + Mux(v4, ip4["total_length"], hd.IPv6.SIZE + ip6["payload_length"]))
        udp_want = Mux(v4, ip4["total_length"] - hd.IPv4.SIZE, ip6["payload_length"])
        grh_end = hd.LRH.SIZE + hd.GRH.SIZE + ip6["payload_length"]
        min_end = bth_at + hd.BTH.SIZE + 4
        # the transport (a known opcode): payload_start is where the payload starts, icrc_at where the
        # covered transport ends; stage 3 subtracts
        payload_start = Signal(8)
        m.d.comb += payload_start.eq(bth_at + hd.BTH.SIZE + ext_len)
        pad = bth["pad_count"]
        pad_bytes = Cat(byte_of(rec.prepad, 3), byte_of(rec.prepad, 2), byte_of(rec.prepad, 1))
        pad_dirty = Cat(*((pad > k) & pad_bytes[8 * k:8 * k + 8].any() for k in range(3))).any()
        # IPv4 header checksum over the header with its checksum field taken as zero (ipv4_checksum): three
        # partial sums here, their total and first fold in stage 3, the last fold in stage 4
        words = [Cat(byte_of(net, 2 * i + 1), byte_of(net, 2 * i)) for i in range(10) if i != 5]
        csum_parts = [Signal(18, name=f"csum_part{k}") for k in range(3)]
        m.d.comb += [p.eq(words[3 * k] + words[3 * k + 1] + words[3 * k + 2]) for k, p in enumerate(csum_parts)]

        # addresses
        # (each GID entry's compare is registered; stage 3 combines them)
        dst_gid = Mux(v4, _IPV4_MAPPED | ip4["dst"], ip6["dst"])
        gid_eq = Cat(*((self.gids[k] == dst_gid) & self.gid_valid[k] for k in range(self.n_gids)))
        lrh = {nm: be_field(rec.hdr, 0, hd.LRH, nm) for nm in ("vl", "sl", "dlid", "slid")}
        dst_mac = Cat(*(byte_of(rec.hdr, b) for b in range(5, -1, -1)))
        addr_ok = Mux(ib, lrh["dlid"] == self.lid, dst_mac == self.mac)

        early = [  # (condition, reason) in classify's order; stage 3 adds the two length rules
            (rec.fcs_bad, DropReason.BAD_FCS),
            (s1.l2_short, DropReason.TRUNCATED),
            (s1.stacked | ~s1.mode_ok, DropReason.NOT_ROCE),
            (length < s1.need, DropReason.TRUNCATED),
            (if_net_bad, DropReason.NOT_ROCE),
        ]
        late = [
            (bth["tver"] != hd.TVER_IBA, DropReason.BAD_TVER),
            (rec.icrc != rec.icrc_wire, DropReason.BAD_ICRC),
            (ib & (rec.vcrc != rec.vcrc_wire), DropReason.BAD_VCRC),
            (~known, DropReason.UNKNOWN_OPCODE),
        ]
        s2 = Signal(data.StructLayout({
            "early": len(early), "late": len(late), "v4": 1, "csum_parts": data.ArrayLayout(18, 3), "csum_field": 16,
            "ib": 1, "ib_global": 1, "roce1": 1, "length": LEN_BITS, "end": LEN_BITS + 2,
            "udp_len": 16, "udp_want": udp_want.shape(), "min_end": Value.cast(min_end).shape(),
            "pkt_len": len(pkt_len), "grh_end": grh_end.shape(),
            "icrc_at": LEN_BITS, "ps_pad": 9, "pad": 2, "pad_dirty": 1,
            "known": 1, "payload_ok": 1, "fixed": 1, "fixed_len": 13,
            "mode": 3, "payload_start": 8, "desc": DescriptorLayout,
            "gid_eq": self.n_gids, "addr_ok": 1, "any_gid": 1, "cnp": 1}))
        out = Signal(result_layout())
        d = out.desc
        fields = [d.mode.eq(md),
                  d.opcode.eq(opcode), d.se.eq(bth["se"]), d.migreq.eq(bth["migreq"]), d.pkey.eq(bth["pkey"]),
                  d.fecn.eq(bth["fecn"]), d.becn.eq(bth["becn"]), d.dest_qp.eq(bth["dest_qp"]),
                  d.ackreq.eq(bth["ackreq"]), d.psn.eq(bth["psn"])]
        with m.If(ib):
            m.d.comb += [d.vl.eq(lrh["vl"]), d.sl.eq(lrh["sl"]), d.dlid.eq(lrh["dlid"]), d.slid.eq(lrh["slid"])]
        with m.Else():
            m.d.comb += [d.dst_mac.eq(dst_mac), d.src_mac.eq(Cat(*(byte_of(rec.hdr, b) for b in range(11, 5, -1)))),
                         d.vlan_present.eq(s1.tagged),
                         d.vlan_tci.eq(Mux(s1.tagged, Cat(byte_of(rec.hdr, 15), byte_of(rec.hdr, 14)), 0))]
        with m.If(v4):
            m.d.comb += [d.traffic_class.eq(ip4["tos"]), d.hop_limit.eq(ip4["ttl"]), d.ip_id.eq(ip4["ident"]),
                         d.src_gid.eq(_IPV4_MAPPED | ip4["src"]), d.dst_gid.eq(_IPV4_MAPPED | ip4["dst"]),
                         d.udp_sport.eq(udp4["sport"])]
        with m.If(v6 | grh_mode):
            m.d.comb += [d.traffic_class.eq(ip6["traffic_class"]), d.flow_label.eq(ip6["flow_label"]),
                         d.hop_limit.eq(ip6["hop_limit"]), d.src_gid.eq(ip6["src"]), d.dst_gid.eq(ip6["dst"])]
        with m.If(v6):
            m.d.comb += d.udp_sport.eq(udp6["sport"])
        m.d.comb += fields
        ext = {"reth_va": (hd.RETH, "va"), "reth_rkey": (hd.RETH, "rkey"), "reth_dma_len": (hd.RETH, "dma_len"),
               "imm": (hd.ImmDt, "imm"), "deth_qkey": (hd.DETH, "qkey"), "deth_src_qp": (hd.DETH, "src_qp"),
               "aeth_syndrome": (hd.AETH, "syndrome"), "aeth_msn": (hd.AETH, "msn"),
               "atomic_va": (hd.AtomicETH, "va"), "atomic_rkey": (hd.AtomicETH, "rkey"),
               "atomic_swap": (hd.AtomicETH, "swap_add"), "atomic_compare": (hd.AtomicETH, "compare"),
               "atomic_orig": (hd.AtomicAckETH, "orig")}
        for name, (cls, field) in ext.items():
            for off, ops in ext_offsets(name).items():
                with m.If(Cat(*(opcode == op for op in ops)).any()):
                    m.d.comb += getattr(d, name).eq(be_field(tr, hd.BTH.SIZE + off, cls, field))
        with m.If(adv):
            m.d.sync += [s2.early.eq(Cat(*(c for c, _ in early))), s2.late.eq(Cat(*(c for c, _ in late))),
                         s2.v4.eq(v4), s2.csum_parts.eq(Cat(*csum_parts)), s2.csum_field.eq(ip4["checksum"]),
                         s2.ib.eq(ib), s2.ib_global.eq(md == LinkMode.IB_GLOBAL), s2.roce1.eq(roce1),
                         s2.length.eq(length), s2.end.eq(end), s2.udp_len.eq(udp_len_field),
                         s2.udp_want.eq(udp_want), s2.min_end.eq(min_end), s2.pkt_len.eq(pkt_len),
                         s2.grh_end.eq(grh_end), s2.icrc_at.eq(rec.icrc_at), s2.ps_pad.eq(payload_start + pad),
                         s2.pad.eq(pad), s2.pad_dirty.eq(pad_dirty),
                         s2.known.eq(known), s2.payload_ok.eq(payload_ok),
                         s2.fixed.eq(fixed), s2.fixed_len.eq(fixed_len), s2.mode.eq(md),
                         s2.payload_start.eq(payload_start), s2.desc.eq(out.desc),
                         s2.gid_eq.eq(gid_eq), s2.addr_ok.eq(addr_ok), s2.any_gid.eq(md == LinkMode.IB_LOCAL),
                         s2.cnp.eq(opcode == Opcode.CNP)]

        # --- stage 3: the length compares, the transport lengths, the IPv4 checksum's total -------------
        len_bad = Mux(s2.ib,
                      ((s2.pkt_len << 2) + 2 != s2.length) | (s2.ib_global & (s2.grh_end != (s2.pkt_len << 2))),
                      (s2.end > s2.length) | ((s2.end != s2.length) & (s2.length > ETH_MIN_FRAME))
                      | (s2.end < s2.min_end) | (~s2.roce1 & (s2.udp_len != s2.udp_want)))
        rest, n = Signal(LEN_BITS + 2), Signal(LEN_BITS + 2)
        m.d.comb += [rest.eq(s2.icrc_at - s2.payload_start), n.eq(s2.icrc_at - s2.ps_pad)]    # n = rest - pad
        fits = s2.icrc_at >= s2.payload_start
        tr_bad = s2.known & (~fits | (rest[:2] != 0) | (rest < s2.pad) | s2.pad_dirty
                             | (~s2.payload_ok & (n != 0)) | (s2.fixed & (n != s2.fixed_len)) | (n > MAX_PAYLOAD))
        csum_total = Signal(20)
        m.d.comb += csum_total.eq(s2.csum_parts[0] + s2.csum_parts[1] + s2.csum_parts[2])
        early3 = early + [(len_bad, DropReason.BAD_LENGTH), (tr_bad, DropReason.BAD_LENGTH)]
        s3 = Signal(data.StructLayout({
            "early": len(early3), "late": len(late), "v4": 1, "fold1": 17, "csum_field": 16, "not_ours": 1,
            "cnp": 1, "mode": 3, "payload_start": 8, "n": LEN_BITS + 2, "desc": DescriptorLayout}))
        with m.If(adv):
            m.d.sync += [s3.early.eq(Cat(s2.early, len_bad, tr_bad)), s3.late.eq(s2.late), s3.v4.eq(s2.v4),
                         s3.fold1.eq(csum_total[:16] + csum_total[16:]), s3.csum_field.eq(s2.csum_field),
                         s3.not_ours.eq(~(s2.addr_ok & (s2.any_gid | s2.gid_eq.any()))), s3.cnp.eq(s2.cnp),
                         s3.mode.eq(s2.mode), s3.payload_start.eq(s2.payload_start), s3.n.eq(n),
                         s3.desc.eq(s2.desc)]

        # --- stage 4: the IPv4 checksum's last fold, the first failing check ---------------------------
        csum = Signal(16)
        m.d.comb += csum.eq(~(s3.fold1[:16] + s3.fold1[16]))
        checks = ([(s3.early[i], why) for i, (_, why) in enumerate(early3)]
                  + [(s3.v4 & (csum != s3.csum_field), DropReason.BAD_IP_CHECKSUM)]
                  + [(s3.late[i], why) for i, (_, why) in enumerate(late)]
                  + [(s3.not_ours, DropReason.NOT_OURS), (s3.cnp, DropReason.CNP)])
        ok = Signal(init=1)
        reason = Signal(4)
        for cond, why in reversed(checks):
            with m.If(cond):
                m.d.comb += [ok.eq(0), reason.eq(why)]
        res = Signal(result_layout())
        m.d.comb += [res.ok.eq(ok), res.reason.eq(reason), res.mode.eq(s3.mode), res.desc.eq(s3.desc),
                     res.desc.payload_len.eq(s3.n), res.payload_start.eq(s3.payload_start), res.length.eq(s3.n)]
        with m.If(adv):
            m.d.sync += self.o.payload.eq(res)
        return m
