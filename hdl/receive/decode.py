"""The receive path's decoder: one frame record in, its verdict, descriptor and payload position out, by
the rules and in the order of :func:`rnic.model.receive.classify`. See :class:`FrameDecode`."""

from __future__ import annotations

from amaranth import Array, Cat, Const, Module, Mux, Signal
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
    to :func:`~rnic.model.frames.parse_frame`'s for a frame that passes. Three pipeline stages; ``i.ready``
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
        full = Signal(3)                # valid bits of stages 1, 2 and 3 (the output)
        m.d.comb += [adv.eq(~full[2] | self.o.ready), self.i.ready.eq(adv), self.o.valid.eq(full[2])]
        with m.If(adv):
            m.d.sync += full.eq(Cat(self.i.valid, full[:2]))

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

        # BAD_LENGTH of the network layer
        end, len_bad = Signal(LEN_BITS + 2), Signal()
        pkt_len = be_field(rec.hdr, 0, hd.LRH, "pkt_len")
        with m.If(ib):
            m.d.comb += len_bad.eq(((pkt_len << 2) + 2 != length) |
                                   ((md == LinkMode.IB_GLOBAL) & (hd.LRH.SIZE + hd.GRH.SIZE + ip6["payload_length"]
                                                                  != (pkt_len << 2))))
        with m.Else():
            m.d.comb += end.eq(l2 + Mux(v4, ip4["total_length"], hd.IPv6.SIZE + ip6["payload_length"]))
            udp_want = Mux(v4, ip4["total_length"] - hd.IPv4.SIZE, ip6["payload_length"])
            m.d.comb += len_bad.eq((end > length) | ((end != length) & (length > ETH_MIN_FRAME)) |
                                   (end < bth_at + hd.BTH.SIZE + 4) | (~roce1 & (udp_len_field != udp_want)))
        # BAD_LENGTH of the transport (a known opcode): icrc_at is where the covered transport ends
        rest = Signal(LEN_BITS + 2)
        m.d.comb += rest.eq(rec.icrc_at - bth_at - hd.BTH.SIZE - ext_len)
        fits = rec.icrc_at >= bth_at + hd.BTH.SIZE + ext_len
        # IPv4 header checksum over the header with its checksum field taken as zero (ipv4_checksum)
        words = [Cat(byte_of(net, 2 * i + 1), byte_of(net, 2 * i)) for i in range(10) if i != 5]
        csum_total = Signal(20)
        m.d.comb += csum_total.eq(sum(words))

        # addresses
        # (each GID entry's compare is registered; stage 3 combines them)
        dst_gid = Mux(v4, _IPV4_MAPPED | ip4["dst"], ip6["dst"])
        gid_eq = Cat(*((self.gids[k] == dst_gid) & self.gid_valid[k] for k in range(self.n_gids)))
        lrh = {nm: be_field(rec.hdr, 0, hd.LRH, nm) for nm in ("vl", "sl", "dlid", "slid")}
        dst_mac = Cat(*(byte_of(rec.hdr, b) for b in range(5, -1, -1)))
        addr_ok = Mux(ib, lrh["dlid"] == self.lid, dst_mac == self.mac)

        early = [  # (condition, reason) in classify's order; the transport and IPv4 checksum rules follow
            (rec.fcs_bad, DropReason.BAD_FCS),
            (s1.l2_short, DropReason.TRUNCATED),
            (s1.stacked | ~s1.mode_ok, DropReason.NOT_ROCE),
            (length < s1.need, DropReason.TRUNCATED),
            (if_net_bad, DropReason.NOT_ROCE),
            (len_bad, DropReason.BAD_LENGTH),
        ]
        late = [
            (bth["tver"] != hd.TVER_IBA, DropReason.BAD_TVER),
            (rec.icrc != rec.icrc_wire, DropReason.BAD_ICRC),
            (ib & (rec.vcrc != rec.vcrc_wire), DropReason.BAD_VCRC),
            (~known, DropReason.UNKNOWN_OPCODE),
        ]
        s2 = Signal(data.StructLayout({
            "early": len(early), "late": len(late), "v4": 1, "csum_total": 20, "csum_field": 16,
            "rest": LEN_BITS + 2, "fits": 1, "known": 1, "payload_ok": 1, "fixed": 1, "fixed_len": 13, "pad": 2,
            "prepad": 32, "mode": 3, "payload_start": 8, "desc": DescriptorLayout,
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
                         s2.v4.eq(v4), s2.csum_total.eq(csum_total), s2.csum_field.eq(ip4["checksum"]),
                         s2.rest.eq(rest), s2.fits.eq(fits), s2.known.eq(known), s2.payload_ok.eq(payload_ok),
                         s2.fixed.eq(fixed), s2.fixed_len.eq(fixed_len), s2.pad.eq(bth["pad_count"]),
                         s2.prepad.eq(rec.prepad), s2.mode.eq(md),
                         s2.payload_start.eq(bth_at + hd.BTH.SIZE + ext_len), s2.desc.eq(out.desc),
                         s2.gid_eq.eq(gid_eq), s2.addr_ok.eq(addr_ok), s2.any_gid.eq(md == LinkMode.IB_LOCAL),
                         s2.cnp.eq(opcode == Opcode.CNP)]

        # --- stage 3: the transport lengths, the IPv4 checksum, the first failing check ------------------
        n = Signal(LEN_BITS + 2)
        m.d.comb += n.eq(s2.rest - s2.pad)
        pad_bytes = Cat(byte_of(s2.prepad, 3), byte_of(s2.prepad, 2), byte_of(s2.prepad, 1))
        pad_dirty = Cat(*((s2.pad > k) & pad_bytes[8 * k:8 * k + 8].any() for k in range(3))).any()
        tr_bad = s2.known & (~s2.fits | (s2.rest[:2] != 0) | (s2.rest < s2.pad) | pad_dirty
                             | (~s2.payload_ok & (n != 0)) | (s2.fixed & (n != s2.fixed_len)) | (n > MAX_PAYLOAD))
        fold1 = Signal(17)
        m.d.comb += fold1.eq(s2.csum_total[:16] + s2.csum_total[16:])
        csum = Signal(16)
        m.d.comb += csum.eq(~(fold1[:16] + fold1[16]))
        checks = ([(s2.early[i], why) for i, (_, why) in enumerate(early)]
                  + [(tr_bad, DropReason.BAD_LENGTH), (s2.v4 & (csum != s2.csum_field), DropReason.BAD_IP_CHECKSUM)]
                  + [(s2.late[i], why) for i, (_, why) in enumerate(late)]
                  + [(~(s2.addr_ok & (s2.any_gid | s2.gid_eq.any())), DropReason.NOT_OURS),
                     (s2.cnp, DropReason.CNP)])
        ok = Signal(init=1)
        reason = Signal(4)
        for cond, why in reversed(checks):
            with m.If(cond):
                m.d.comb += [ok.eq(0), reason.eq(why)]
        res = Signal(result_layout())
        m.d.comb += [res.ok.eq(ok), res.reason.eq(reason), res.mode.eq(s2.mode), res.desc.eq(s2.desc),
                     res.desc.payload_len.eq(n), res.payload_start.eq(s2.payload_start), res.length.eq(n)]
        with m.If(adv):
            m.d.sync += self.o.payload.eq(res)
        return m
