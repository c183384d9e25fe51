"""Whole frames for the five link modes: build from a :class:`PacketDesc` and a payload, parse back, and the CRCs.

Frame layouts (no Ethernet FCS: the MAC appends it, and pads frames shorter than 60 bytes):

- RoCEv2/IPv4: Ethernet[+802.1Q] | IPv4 | UDP | BTH | ext | payload | pad | ICRC
- RoCEv2/IPv6: Ethernet[+802.1Q] | IPv6 | UDP | BTH | ext | payload | pad | ICRC
- RoCEv1:      Ethernet[+802.1Q] (0x8915) | GRH | BTH | ext | payload | pad | ICRC
- IB local:    LRH | BTH | ext | payload | pad | ICRC | VCRC
- IB global:   LRH | GRH | BTH | ext | payload | pad | ICRC | VCRC

The ICRC is CRC-32 over :func:`icrc_view` (the packet from the network header on, with the variant
fields set to ones and, without an LRH, 8 bytes of ones standing for it), sent least-significant byte
first. The VCRC is the IB CRC-16 over LRH through ICRC, also LSB first. docs/wire-formats.md has the rules
and their sources.
"""

from __future__ import annotations

from dataclasses import fields as dc_fields

from .crc import ICRC, VCRC
from .descriptor import MAX_PAYLOAD, LinkMode, PacketDesc
from .headers import (
    AETH, BTH, DETH, ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_ROCEV1, GRH, GRH_NEXT_HEADER_IBA, IETH,
    IP_PROTO_UDP, IPV4_FLAG_DF, IPV4_FLAG_MF, LNH_IBA_GLOBAL, LNH_IBA_LOCAL, LRH, LVER_IBA, RETH,
    ROCEV2_UDP_PORT, TVER_IBA, UDP, AtomicAckETH, AtomicETH, Ethernet, Header, ImmDt, IPv4, IPv6,
)
from .opcodes import opcode_info

__all__ = [
    "ICRC_LEN", "VCRC_LEN", "PSEUDO_LRH", "ETH_MIN_FRAME",
    "build_frame", "parse_frame", "icrc", "icrc_view", "vcrc", "pad_len", "normalize_desc", "carried_fields",
]

ICRC_LEN = 4
VCRC_LEN = 2
PSEUDO_LRH = b"\xff" * 8   # stands for the (absent or fully masked) LRH in the ICRC
ETH_MIN_FRAME = 60         # minimum Ethernet frame without FCS; a parser accepts MAC padding up to it
_IPV4_MAPPED_PREFIX = 0xFFFF << 32

_ETHERTYPE = {LinkMode.ROCEV2_IPV4: ETHERTYPE_IPV4, LinkMode.ROCEV2_IPV6: ETHERTYPE_IPV6,
              LinkMode.ROCEV1: ETHERTYPE_ROCEV1}


def pad_len(payload_len: int) -> int:
    """Pad bytes after a payload of ``payload_len`` bytes (BTH PadCnt)."""
    return -payload_len % 4


def _ones(width: int) -> int:
    return (1 << width) - 1


# --- extended headers <-> descriptor fields -------------------------------------------------------------

def _ext_from_desc(cls: type[Header], d: PacketDesc) -> Header:
    if cls is RETH:
        return RETH(va=d.reth_va, rkey=d.reth_rkey, dma_len=d.reth_dma_len)
    if cls is AETH:
        return AETH(syndrome=d.aeth_syndrome, msn=d.aeth_msn)
    if cls is DETH:
        return DETH(qkey=d.deth_qkey, src_qp=d.deth_src_qp)
    if cls is ImmDt:
        return ImmDt(imm=d.imm)
    if cls is IETH:
        return IETH(rkey=d.imm)
    if cls is AtomicETH:
        return AtomicETH(va=d.atomic_va, rkey=d.atomic_rkey, swap_add=d.atomic_swap, compare=d.atomic_compare)
    if cls is AtomicAckETH:
        return AtomicAckETH(orig=d.atomic_orig)
    raise AssertionError(cls)


def _ext_to_desc(h: Header) -> dict[str, int]:
    if isinstance(h, RETH):
        return dict(reth_va=h.va, reth_rkey=h.rkey, reth_dma_len=h.dma_len)
    if isinstance(h, AETH):
        return dict(aeth_syndrome=h.syndrome, aeth_msn=h.msn)
    if isinstance(h, DETH):
        return dict(deth_qkey=h.qkey, deth_src_qp=h.src_qp)
    if isinstance(h, ImmDt):
        return dict(imm=h.imm)
    if isinstance(h, IETH):
        return dict(imm=h.rkey)
    if isinstance(h, AtomicETH):
        return dict(atomic_va=h.va, atomic_rkey=h.rkey, atomic_swap=h.swap_add, atomic_compare=h.compare)
    if isinstance(h, AtomicAckETH):
        return dict(atomic_orig=h.orig)
    raise AssertionError(h)


_EXT_FIELDS = {
    RETH: ("reth_va", "reth_rkey", "reth_dma_len"), AETH: ("aeth_syndrome", "aeth_msn"),
    DETH: ("deth_qkey", "deth_src_qp"), ImmDt: ("imm",), IETH: ("imm",),
    AtomicETH: ("atomic_va", "atomic_rkey", "atomic_swap", "atomic_compare"), AtomicAckETH: ("atomic_orig",),
}
_BTH_FIELDS = ("opcode", "se", "migreq", "pkey", "fecn", "becn", "dest_qp", "ackreq", "psn")
_MODE_FIELDS = {
    LinkMode.ROCEV2_IPV4: ("dst_mac", "src_mac", "vlan_present", "vlan_tci", "src_gid", "dst_gid",
                           "traffic_class", "hop_limit", "ip_id", "udp_sport"),
    LinkMode.ROCEV2_IPV6: ("dst_mac", "src_mac", "vlan_present", "vlan_tci", "src_gid", "dst_gid",
                           "traffic_class", "flow_label", "hop_limit", "udp_sport"),
    LinkMode.ROCEV1: ("dst_mac", "src_mac", "vlan_present", "vlan_tci", "src_gid", "dst_gid",
                      "traffic_class", "flow_label", "hop_limit"),
    LinkMode.IB_LOCAL: ("vl", "sl", "dlid", "slid"),
    LinkMode.IB_GLOBAL: ("vl", "sl", "dlid", "slid", "src_gid", "dst_gid", "traffic_class", "flow_label",
                         "hop_limit"),
}


def carried_fields(desc: PacketDesc) -> frozenset[str]:
    """The descriptor fields that appear on the wire for this descriptor's mode and opcode."""
    mode = LinkMode(desc.mode)
    names = {"mode", "payload_len", *_BTH_FIELDS, *_MODE_FIELDS[mode]}
    for cls in opcode_info(desc.opcode).ext_headers:
        names.update(_EXT_FIELDS[cls])
    if not desc.vlan_present:
        names.discard("vlan_tci")
    return frozenset(names)


def normalize_desc(desc: PacketDesc) -> PacketDesc:
    """The descriptor :func:`parse_frame` returns for ``build_frame(desc, ...)``: fields not carried on the
    wire are zero, and in IPv4 mode the GIDs become IPv4-mapped (``::ffff:a.b.c.d``)."""
    keep = carried_fields(desc)
    kw = {f.name: (int(getattr(desc, f.name)) if f.name in keep else 0) for f in dc_fields(desc)}
    if desc.mode == LinkMode.ROCEV2_IPV4:
        kw["src_gid"] = _IPV4_MAPPED_PREFIX | (desc.src_gid & _ones(32))
        kw["dst_gid"] = _IPV4_MAPPED_PREFIX | (desc.dst_gid & _ones(32))
    return PacketDesc(**kw)


# --- build ---------------------------------------------------------------------------------------------

def _transport_bytes(desc: PacketDesc, payload: bytes) -> bytes:
    """BTH, extended headers, payload and pad: the IBA transport packet without its ICRC."""
    info = opcode_info(desc.opcode)
    if not info.has_payload and payload:
        raise ValueError(f"{info.name} carries no payload, got {len(payload)} bytes")
    if info.fixed_payload_len is not None and len(payload) != info.fixed_payload_len:
        raise ValueError(f"{info.name} carries exactly {info.fixed_payload_len} payload bytes, got {len(payload)}")
    pad = pad_len(len(payload))
    bth = BTH(opcode=desc.opcode, se=desc.se, migreq=desc.migreq, pad_count=pad, tver=TVER_IBA, pkey=desc.pkey,
              fecn=desc.fecn, becn=desc.becn, dest_qp=desc.dest_qp, ackreq=desc.ackreq, psn=desc.psn)
    ext = b"".join(_ext_from_desc(cls, desc).pack() for cls in info.ext_headers)
    return bth.pack() + ext + payload + bytes(pad)


def _ethernet(desc: PacketDesc, mode: LinkMode) -> bytes:
    return Ethernet(dst=desc.dst_mac, src=desc.src_mac, ethertype=_ETHERTYPE[mode],
                    vlan_tci=desc.vlan_tci if desc.vlan_present else None).pack()


def _grh(desc: PacketDesc, pay_len: int) -> GRH:
    return GRH(tclass=desc.traffic_class, flow_label=desc.flow_label, pay_len=pay_len,
               next_header=GRH_NEXT_HEADER_IBA, hop_limit=desc.hop_limit, sgid=desc.src_gid, dgid=desc.dst_gid)


def build_frame(desc: PacketDesc, payload: bytes) -> bytes:
    """The complete frame for ``desc`` carrying ``payload`` (``len(payload)`` must equal ``desc.payload_len``)."""
    payload = bytes(payload)
    if len(payload) != desc.payload_len:
        raise ValueError(f"payload is {len(payload)} bytes but desc.payload_len is {desc.payload_len}")
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"payload of {len(payload)} bytes exceeds MAX_PAYLOAD ({MAX_PAYLOAD})")
    try:
        mode = LinkMode(desc.mode)
    except ValueError:
        raise ValueError(f"invalid link mode {desc.mode}") from None
    transport = _transport_bytes(desc, payload)
    bth_to_icrc = len(transport) + ICRC_LEN

    if mode is LinkMode.ROCEV2_IPV4:
        udp = UDP(sport=desc.udp_sport, dport=ROCEV2_UDP_PORT, length=UDP.SIZE + bth_to_icrc, checksum=0)
        ip = IPv4(tos=desc.traffic_class, total_length=IPv4.SIZE + UDP.SIZE + bth_to_icrc, ident=desc.ip_id,
                  flags=IPV4_FLAG_DF, ttl=desc.hop_limit, protocol=IP_PROTO_UDP,
                  src=desc.src_gid & _ones(32), dst=desc.dst_gid & _ones(32)).with_checksum()
        head = _ethernet(desc, mode) + ip.pack() + udp.pack()
    elif mode is LinkMode.ROCEV2_IPV6:
        udp = UDP(sport=desc.udp_sport, dport=ROCEV2_UDP_PORT, length=UDP.SIZE + bth_to_icrc, checksum=0)
        ip6 = IPv6(traffic_class=desc.traffic_class, flow_label=desc.flow_label, payload_length=UDP.SIZE + bth_to_icrc,
                   next_header=IP_PROTO_UDP, hop_limit=desc.hop_limit, src=desc.src_gid, dst=desc.dst_gid)
        head = _ethernet(desc, mode) + ip6.pack() + udp.pack()
    elif mode is LinkMode.ROCEV1:
        head = _ethernet(desc, mode) + _grh(desc, bth_to_icrc).pack()
    else:
        grh = _grh(desc, bth_to_icrc).pack() if mode is LinkMode.IB_GLOBAL else b""
        words = (LRH.SIZE + len(grh) + bth_to_icrc) // 4
        lrh = LRH(vl=desc.vl, lver=LVER_IBA, sl=desc.sl,
                  lnh=LNH_IBA_GLOBAL if grh else LNH_IBA_LOCAL, dlid=desc.dlid, pkt_len=words, slid=desc.slid)
        head = lrh.pack() + grh

    frame = head + transport
    frame += ICRC.to_bytes(icrc(mode, frame))
    if mode in (LinkMode.IB_LOCAL, LinkMode.IB_GLOBAL):
        frame += VCRC.to_bytes(vcrc(frame))
    return frame


# --- CRCs ----------------------------------------------------------------------------------------------

def _set_ones(buf: bytearray, offset: int, length: int) -> None:
    buf[offset:offset + length] = b"\xff" * length


def _mask_ipv6_like(buf: bytearray, off: int) -> None:
    """Traffic class, flow label and hop limit of an IPv6 header or GRH at ``off`` -> ones."""
    buf[off] |= 0x0F                  # traffic class, high nibble (the low nibble is the version)
    _set_ones(buf, off + 1, 3)        # traffic class low nibble and the 20-bit flow label
    buf[off + 7] = 0xFF               # hop limit


def icrc_view(mode: LinkMode, frame: bytes) -> bytes:
    """The exact bytes the ICRC is computed over, for ``frame`` without its ICRC/VCRC (and without MAC padding).

    RoCE modes: 8 bytes of ones (pseudo-LRH), then the frame from the IP header / GRH on. IB modes: the
    frame from the LRH on. Variant fields are set to ones: IPv4 TOS, TTL, header checksum; IPv6/GRH traffic
    class, flow label, hop limit; UDP checksum; LRH VL (IB local) or the whole LRH (IB global); BTH byte 4
    (FECN, BECN, resv6)."""
    mode = LinkMode(mode)
    if mode.is_ethernet:
        eth, _ = Ethernet.parse(frame)
        buf = bytearray(PSEUDO_LRH + frame[eth.size:])
        off = len(PSEUDO_LRH)
        if mode is LinkMode.ROCEV2_IPV4:
            _need(buf, off + IPv4.SIZE + UDP.SIZE + BTH.SIZE, "RoCEv2/IPv4 headers")
            buf[off + 1] = 0xFF                       # TOS
            buf[off + 8] = 0xFF                       # TTL
            _set_ones(buf, off + 10, 2)               # header checksum
            off += IPv4.SIZE
            _set_ones(buf, off + 6, 2)                # UDP checksum
            off += UDP.SIZE
        elif mode is LinkMode.ROCEV2_IPV6:
            _need(buf, off + IPv6.SIZE + UDP.SIZE + BTH.SIZE, "RoCEv2/IPv6 headers")
            _mask_ipv6_like(buf, off)
            off += IPv6.SIZE
            _set_ones(buf, off + 6, 2)
            off += UDP.SIZE
        else:
            _need(buf, off + GRH.SIZE + BTH.SIZE, "RoCEv1 headers")
            _mask_ipv6_like(buf, off)
            off += GRH.SIZE
    else:
        buf = bytearray(frame)
        if mode is LinkMode.IB_LOCAL:
            _need(buf, LRH.SIZE + BTH.SIZE, "IB local headers")
            buf[0] |= 0xF0                            # VL
            off = LRH.SIZE
        else:
            _need(buf, LRH.SIZE + GRH.SIZE + BTH.SIZE, "IB global headers")
            _set_ones(buf, 0, LRH.SIZE)
            _mask_ipv6_like(buf, LRH.SIZE)
            off = LRH.SIZE + GRH.SIZE
    buf[off + BTH.RESV8A_OFFSET] = 0xFF
    return bytes(buf)


def _need(buf: bytes, n: int, what: str) -> None:
    if len(buf) < n:
        raise ValueError(f"frame too short for {what}")


def icrc(mode: LinkMode, frame: bytes) -> int:
    """ICRC value of ``frame`` (given without ICRC and VCRC); on the wire as ``ICRC.to_bytes(value)``."""
    return ICRC.compute(icrc_view(mode, frame))


def vcrc(frame: bytes) -> int:
    """VCRC value of an IB ``frame`` given from the LRH through the ICRC; on the wire as ``VCRC.to_bytes(value)``."""
    return VCRC.compute(frame)


# --- parse ---------------------------------------------------------------------------------------------

def _expect(cond: bool, message: str) -> None:
    if not cond:
        raise ValueError(message)


def _parse_transport(kw: dict, data: bytes) -> bytes:
    """Decode BTH, extended headers and payload from ``data`` (through the pad, ICRC removed) into ``kw``."""
    bth, rest = BTH.parse(data)
    _expect(bth.tver == TVER_IBA, f"BTH TVer is {bth.tver}, not {TVER_IBA}")
    info = opcode_info(bth.opcode)
    kw.update(opcode=int(bth.opcode), se=bth.se, migreq=bth.migreq, pkey=bth.pkey, fecn=bth.fecn, becn=bth.becn,
              dest_qp=bth.dest_qp, ackreq=bth.ackreq, psn=bth.psn)
    for cls in info.ext_headers:
        try:
            header, rest = cls.parse(rest)
        except ValueError as e:
            raise ValueError(f"{info.name}: {e}") from None
        kw.update(_ext_to_desc(header))
    _expect(len(rest) >= bth.pad_count, f"pad count {bth.pad_count} exceeds the {len(rest)} bytes after the headers")
    payload, pad = rest[:len(rest) - bth.pad_count], rest[len(rest) - bth.pad_count:]
    _expect(pad == bytes(len(pad)), "pad bytes are not zero")
    _expect(len(rest) % 4 == 0, f"payload plus pad is {len(rest)} bytes, not a multiple of 4")
    _expect(info.has_payload or not payload, f"{info.name} must not carry a payload ({len(payload)} bytes)")
    _expect(info.fixed_payload_len is None or len(payload) == info.fixed_payload_len,
            f"{info.name} must carry {info.fixed_payload_len} bytes, not {len(payload)}")
    _expect(len(payload) <= MAX_PAYLOAD, f"payload of {len(payload)} bytes exceeds {MAX_PAYLOAD}")
    kw["payload_len"] = len(payload)
    return payload


def _check_icrc(mode: LinkMode, covered: bytes, wire: bytes) -> None:
    expect = icrc(mode, covered)
    got = int.from_bytes(wire, "little")
    _expect(got == expect, f"bad ICRC: frame has 0x{got:08x}, expected 0x{expect:08x}")


def _parse_udp(data: bytes, udp_len: int, kw: dict) -> None:
    udp, _ = UDP.parse(data)
    _expect(udp.dport == ROCEV2_UDP_PORT, f"UDP destination port {udp.dport} is not {ROCEV2_UDP_PORT}")
    _expect(udp.length == udp_len, f"UDP length {udp.length} disagrees with the IP length ({udp_len})")
    kw["udp_sport"] = udp.sport


def _check_grh(grh: GRH, kw: dict) -> None:
    _expect(grh.next_header == GRH_NEXT_HEADER_IBA,
            f"GRH next header 0x{grh.next_header:02x} is not 0x{GRH_NEXT_HEADER_IBA:02x} (BTH)")
    kw.update(traffic_class=grh.tclass, flow_label=grh.flow_label, hop_limit=grh.hop_limit,
              src_gid=grh.sgid, dst_gid=grh.dgid)


def parse_frame(mode: LinkMode, frame: bytes) -> tuple[PacketDesc, bytes]:
    """Decode and validate a frame of link mode ``mode``; return ``(descriptor, payload)``.

    Raises ValueError on any malformation: wrong EtherType/next header/LNH/version, inconsistent length
    fields, bad IPv4 header checksum, bad ICRC or VCRC, unknown opcode, non-zero pad, payload where the
    opcode has none. Ethernet frames may carry MAC padding after the ICRC only up to 60 bytes."""
    try:
        mode = LinkMode(mode)
    except ValueError:
        raise ValueError(f"invalid link mode {mode}") from None
    frame = bytes(frame)
    kw: dict[str, int] = {f.name: 0 for f in dc_fields(PacketDesc)}
    kw["mode"] = int(mode)

    if mode.is_ethernet:
        eth, rest = Ethernet.parse(frame)
        _expect(eth.ethertype == _ETHERTYPE[mode],
                f"EtherType 0x{eth.ethertype:04x} is not {mode.slug} (0x{_ETHERTYPE[mode]:04x})")
        kw.update(dst_mac=eth.dst, src_mac=eth.src, vlan_present=int(eth.vlan_tci is not None),
                  vlan_tci=eth.vlan_tci or 0)
        if mode is LinkMode.ROCEV1:
            grh, _ = GRH.parse(rest)
            _check_grh(grh, kw)
            length = GRH.SIZE + grh.pay_len
            headers = GRH.SIZE
        elif mode is LinkMode.ROCEV2_IPV4:
            ip, rest = IPv4.parse(rest)
            _expect(ip.protocol == IP_PROTO_UDP, f"IPv4 protocol {ip.protocol} is not UDP")
            _expect(ip.checksum_ok(), "bad IPv4 header checksum")
            _expect(not ip.flags & IPV4_FLAG_MF and ip.frag_offset == 0, "IPv4 fragments are not supported")
            kw.update(traffic_class=ip.tos, hop_limit=ip.ttl, ip_id=ip.ident,
                      src_gid=_IPV4_MAPPED_PREFIX | ip.src, dst_gid=_IPV4_MAPPED_PREFIX | ip.dst)
            length = ip.total_length
            _parse_udp(rest, length - IPv4.SIZE, kw)
            headers = IPv4.SIZE + UDP.SIZE
        else:
            ip6, rest = IPv6.parse(rest)
            _expect(ip6.next_header == IP_PROTO_UDP, f"IPv6 next header {ip6.next_header} is not UDP")
            kw.update(traffic_class=ip6.traffic_class, flow_label=ip6.flow_label, hop_limit=ip6.hop_limit,
                      src_gid=ip6.src, dst_gid=ip6.dst)
            length = IPv6.SIZE + ip6.payload_length
            _parse_udp(rest, ip6.payload_length, kw)
            headers = IPv6.SIZE + UDP.SIZE
        net_end = eth.size + length
        _expect(net_end <= len(frame), f"length fields say {net_end} bytes, frame has {len(frame)}")
        _expect(net_end == len(frame) or len(frame) <= ETH_MIN_FRAME,
                f"{len(frame) - net_end} bytes after the ICRC in a frame longer than {ETH_MIN_FRAME}")
        transport_start = eth.size + headers
        _expect(net_end - transport_start >= BTH.SIZE + ICRC_LEN, "length fields leave no room for BTH and ICRC")
        covered, wire_icrc = frame[:net_end - ICRC_LEN], frame[net_end - ICRC_LEN:net_end]
    else:
        lrh, rest = LRH.parse(frame)
        _expect(lrh.lver == LVER_IBA, f"LRH LVer is {lrh.lver}, not {LVER_IBA}")
        want_lnh = LNH_IBA_LOCAL if mode is LinkMode.IB_LOCAL else LNH_IBA_GLOBAL
        _expect(lrh.lnh == want_lnh, f"LRH LNH is {lrh.lnh}, not {want_lnh} for {mode.slug}")
        kw.update(vl=lrh.vl, sl=lrh.sl, dlid=lrh.dlid, slid=lrh.slid)
        wire_vcrc = int.from_bytes(frame[-VCRC_LEN:], "little")
        expect_vcrc = vcrc(frame[:-VCRC_LEN])
        _expect(wire_vcrc == expect_vcrc, f"bad VCRC: frame has 0x{wire_vcrc:04x}, expected 0x{expect_vcrc:04x}")
        _expect(lrh.pkt_len * 4 + VCRC_LEN == len(frame),
                f"LRH PktLen {lrh.pkt_len} words + VCRC is {lrh.pkt_len * 4 + VCRC_LEN} bytes, frame has {len(frame)}")
        transport_start = LRH.SIZE
        if mode is LinkMode.IB_GLOBAL:
            grh, _ = GRH.parse(rest)
            _check_grh(grh, kw)
            _expect(LRH.SIZE + GRH.SIZE + grh.pay_len == lrh.pkt_len * 4,
                    f"GRH PayLen {grh.pay_len} disagrees with LRH PktLen {lrh.pkt_len}")
            transport_start += GRH.SIZE
        net_end = len(frame) - VCRC_LEN
        _expect(net_end - transport_start >= BTH.SIZE + ICRC_LEN, "no room for BTH and ICRC")
        covered, wire_icrc = frame[:net_end - ICRC_LEN], frame[net_end - ICRC_LEN:net_end]

    _check_icrc(mode, covered, wire_icrc)
    payload = _parse_transport(kw, frame[transport_start:net_end - ICRC_LEN])
    return PacketDesc(**kw), payload
