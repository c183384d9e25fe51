"""Header front end, stage s5: the IPv4 checksum and the header byte vector. See :class:`HeaderVector`."""

from __future__ import annotations

from amaranth import Cat, Const, Mux, Signal
from amaranth.hdl import Assert
from amaranth.lib import data

from ...model.descriptor import LinkMode
from ...model import headers as hd
from ..prim import replica

from .checksum import _oc_pick
from .front import first_flags, first_layout, frame_params
from .templates import (_EXT_MAX, _GRP_COPIES, _TEMPLATES, HEADER_MAX, LATE_FIELDS, _by_source, _field_bits,
                        _header_bits, _or_all, _Src, _wire_bits)

__all__ = ["HeaderVector", "frame_layout"]


def frame_layout(B):
    """One frame as s5 (and the skid register k) hold it: the header vector (whole beats), the
    template, the frame parameters and the first-beat flags."""
    HB = -(-HEADER_MAX // B) * B
    return data.StructLayout({
        "hdr": 8 * HB, "tmpl": range(len(_TEMPLATES)), "p": frame_params(B), "ib": 1, "fl": first_layout(B),
    })


def _template_bits(f, s4_udp, s4_lrhw, s4_ip4, csum, s4_tl, s4_pad, s4_ext, HB):
    """Per template, the per-bit entries (:func:`~.templates._field_bits`) of its header vector:
    ``f(name)`` gives a descriptor field as a :class:`~.templates._Src`."""
    udp_len = _Src("udp_len", s4_udp)
    wire_bits = []
    for t in _TEMPLATES:
        bits = []
        if not t.ib:
            ethertype = {LinkMode.ROCEV2_IPV4: hd.ETHERTYPE_IPV4,
                         LinkMode.ROCEV2_IPV6: hd.ETHERTYPE_IPV6,
                         LinkMode.ROCEV1: hd.ETHERTYPE_ROCEV1}[t.mode]
            eth = [(f("dst_mac"), 48), (f("src_mac"), 48)]
            if t.vlan:
                eth += [(hd.ETHERTYPE_VLAN, 16), (f("vlan_tci"), 16)]
            bits += _wire_bits(eth + [(ethertype, 16)])
        else:
            bits += _header_bits(
                hd.LRH, vl=f("vl"), lver=hd.LVER_IBA, sl=f("sl"),
                lnh=hd.LNH_IBA_GLOBAL if t.grh else hd.LNH_IBA_LOCAL,
                dlid=f("dlid"), pkt_len=_Src(f"lrhw{int(t.grh)}", s4_lrhw[t.grh]), slid=f("slid"))
        if t.mode is LinkMode.ROCEV2_IPV4:
            bits += _header_bits(
                hd.IPv4, version=4, ihl=5, tos=f("traffic_class"),
                total_length=_Src("ip4", s4_ip4), ident=f("ip_id"), flags=hd.IPV4_FLAG_DF,
                frag_offset=0, ttl=f("hop_limit"), protocol=hd.IP_PROTO_UDP,
                checksum=_Src("csum", csum), src=f("src_gid"), dst=f("dst_gid"))
        elif t.mode is LinkMode.ROCEV2_IPV6:
            bits += _header_bits(
                hd.IPv6, version=hd.IP_VERSION_6, traffic_class=f("traffic_class"),
                flow_label=f("flow_label"), payload_length=udp_len,
                next_header=hd.IP_PROTO_UDP, hop_limit=f("hop_limit"),
                src=f("src_gid"), dst=f("dst_gid"))
        elif t.grh:
            bits += _header_bits(
                hd.GRH, ipver=hd.IP_VERSION_6, tclass=f("traffic_class"),
                flow_label=f("flow_label"), pay_len=_Src("tl", s4_tl),
                next_header=hd.GRH_NEXT_HEADER_IBA, hop_limit=f("hop_limit"),
                sgid=f("src_gid"), dgid=f("dst_gid"))
        if t.mode in (LinkMode.ROCEV2_IPV4, LinkMode.ROCEV2_IPV6):
            bits += _header_bits(hd.UDP, sport=f("udp_sport"), dport=hd.ROCEV2_UDP_PORT,
                                 length=udp_len, checksum=0)
        bits += _header_bits(
            hd.BTH, opcode=f("opcode"), se=f("se"), migreq=f("migreq"),
            pad_count=_Src("pad", s4_pad), tver=hd.TVER_IBA, pkey=f("pkey"), fecn=f("fecn"),
            becn=f("becn"), dest_qp=f("dest_qp"), ackreq=f("ackreq"), psn=f("psn"))
        assert len(bits) == 8 * t.base_len
        bits += _field_bits(_Src("ext", s4_ext), 8 * _EXT_MAX)
        bits += [0] * (8 * HB - len(bits))
        wire_bits.append(bits)
    return wire_bits


class HeaderVector:
    """Stage s5 of the packet builder (a helper of :class:`~rnic.hdl.packet_builder.PacketBuilder`,
    adding its logic to the builder's module): the IPv4 checksum and the header byte vector,
    registered with the frame parameters as one :func:`frame_layout`.

    The header vector is built bit by bit: for each bit, the templates are grouped by the signal
    (descriptor field bit, derived value bit, constant one) they put there, and the bit is an
    AND-OR over those signals with one registered select per template group (decoded from the
    template number in s4). Two or three LUT levels, no shared decoder. Each select has
    ``_GRP_COPIES`` replicas (:func:`rnic.hdl.prim.replica`), each serving a contiguous eighth of the
    header vector, so no select fans out across the whole block.

    Parameters
    ----------
    width : int
        Datapath width ``W`` in bits.
    front : HeaderFrontEnd
        s4's registers and the stage valids / enables.
    desc_late : ``stream.Interface(DescriptorLayout)`` or None
        The builder's ``desc_late`` port (with ``late=True``): taken (``ready = s5_en & s4_valid``)
        as the descriptor enters s5; ``valid`` must be 1 then (``Assert``ed).

    Members
    -------
    s5_f : Signal(frame_layout(B))
        s5's frame, loaded on ``s5_en`` (the stage enable; ``s5_valid`` says it holds one).
    s5_fl : Signal(first_layout(B))
        The first-beat flags as s5 loads them (combinational, from s4), for the skid logic's
        registered head of the frame queue.
    """

    def __init__(self, width, front, desc_late=None):
        self.W, self.B = width, width // 8
        self.front = front
        self.desc_late = desc_late

    def elaborate(self, m, platform):
        B, fe = self.B, self.front
        HB = -(-HEADER_MAX // B) * B           # header vector bytes, whole beats
        ones = Const(-1, B)
        nt = len(_TEMPLATES)
        s3_tmpl, s3_valid, s4_valid = fe.s3_tmpl, fe.valid[2], fe.valid[3]
        s4_en, s5_en = fe.en[3], fe.en[4]
        s4_d, s4_fl, s4_p, s4_tmpl = fe.s4_d, fe.s4_fl, fe.s4_p, fe.s4_tmpl
        first_info = first_layout(B)
        frame_info = frame_layout(B)
        s5_f = Signal(frame_info, reset_less=True)

        d = s4_d
        csum = Signal(16)
        m.d.comb += csum.eq(~_oc_pick(fe.s4_sum_c0, fe.s4_sum_c1))
        late = self.desc_late is not None
        if late:
            dl = self.desc_late
            m.d.comb += dl.ready.eq(s5_en & s4_valid)
            m.d.sync += Assert(~dl.ready | dl.valid, "packet builder: desc_late behind desc\n")

        def f(name):
            return _Src(name, getattr(self.desc_late.payload if late and name in LATE_FIELDS else d, name))

        wire_bits = _template_bits(f, fe.s4_udp, fe.s4_lrhw, fe.s4_ip4, csum, fe.s4_tl, fe.s4_pad, fe.s4_ext, HB)

        # yosys merges identical logic, so the select copies differ: while s4 holds no descriptor,
        # copy c is also 1 for the template that is the group's c-th non-member (where there is
        # one), and each copy's LUT4 takes its inputs in another order.
        groups = {}                  # (template indices, copy) -> (select, its spare template)

        def group(members, bit):
            """The select of ``members``: the copy serving header bit ``bit``."""
            members = frozenset(members)
            if len(members) == nt:
                return Const(1, 1)
            spare = [t.index for t in _TEMPLATES if t.index not in members]
            c = bit * _GRP_COPIES // (8 * HB)
            if (members, c) not in groups:
                groups[members, c] = (Signal(name=f"s4_grp{len(groups)}"),
                                      spare[c - 1] if 0 < c <= len(spare) else None)
            return groups[members, c][0]

        def mux_bit(entries, bit):
            sources, ones_at = _by_source((t.index, e) for t, e in zip(_TEMPLATES, entries))
            terms = [value & group(members, bit) for value, members in sources.values()]
            if ones_at:
                terms.append(group(ones_at, bit))
            return _or_all(terms)

        hdr = Signal(8 * HB)
        ib = Signal()
        m.d.comb += [
            hdr.eq(Cat(*(mux_bit([bits[i] for bits in wire_bits], i) for i in range(8 * HB)))),
            ib.eq(group((t.index for t in _TEMPLATES if t.ib), 0)),
        ]
        # Each select's next value is one LUT4 of (s3_tmpl, s3_valid): left to ABC, these related
        # functions of the same four bits became a chain of five LUTs (rnic.hdl.prim).
        assert len(s3_tmpl) <= 3
        sel_in = [*s3_tmpl, s3_valid]
        for (members, c), (sel, spare) in groups.items():
            def select(*bits, members=members, spare=spare):
                t = sum(b << k for k, b in enumerate(bits[:-1]))
                return t in members or (spare is not None and not bits[-1] and t == spare)
            nxt = replica(m, platform, f"{sel.name}_next", select, sel_in, copy=c)
            with m.If(s4_en):
                m.d.sync += sel.eq(nxt)
        s5_fl = Signal(first_info)           # s5's first-beat flags, as s5 loads them
        m.d.comb += [
            *(getattr(s5_fl, name).eq(getattr(s4_fl, name)) for name in first_flags),
            s5_fl.pmask.eq(Mux(s4_fl.first_pl, Mux(s4_fl.first_final, s4_p.plast_mask, ones), 0)),
        ]
        with m.If(s5_en):
            m.d.sync += [
                s5_f.hdr.eq(hdr), s5_f.tmpl.eq(s4_tmpl), s5_f.p.eq(s4_p), s5_f.ib.eq(ib), s5_f.fl.eq(s5_fl),
            ]
        self.s5_f, self.s5_fl = s5_f, s5_fl
