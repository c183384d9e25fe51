"""Frames: build -> parse round trips for every link mode and opcode, length fields, ICRC masking, malformed frames."""

from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

from model_strategies import OPCODES, descs, payload_len_for, refresh_crcs
from rnic.model import headers as H
from rnic.model.crc import ICRC, VCRC
from rnic.model.descriptor import MAX_PAYLOAD, LinkMode, PacketDesc
from rnic.model.frames import (
    ETH_MIN_FRAME, PSEUDO_LRH, build_frame, carried_fields, icrc, icrc_view, normalize_desc, pad_len, parse_frame,
    vcrc,
)
from rnic.model.opcodes import OPCODE_INFO, Opcode

MODES = list(LinkMode)
ETH_MODES = [m for m in MODES if m.is_ethernet]
IB_MODES = [m for m in MODES if not m.is_ethernet]


def desc_for(mode, opcode=Opcode.RC_SEND_ONLY, payload_len=13, **kw):
    return PacketDesc(mode=mode, opcode=opcode, payload_len=payload_len_for(opcode, payload_len), **kw)


def payload_for(desc):
    return bytes((7 * i + 3) & 0xFF for i in range(desc.payload_len))


def crc_trailer(mode):
    return 4 + (0 if LinkMode(mode).is_ethernet else 2)


# --- round trips -----------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.slug)
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_build_parse_round_trip(mode, data):
    desc, payload = data.draw(descs(mode=mode))
    frame = build_frame(desc, payload)
    parsed, got = parse_frame(mode, frame)
    assert got == payload
    assert parsed == normalize_desc(desc)
    assert build_frame(parsed, got) == frame


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.slug)
@pytest.mark.parametrize("opcode", OPCODES, ids=lambda o: Opcode(o).name)
def test_every_opcode_every_mode(mode, opcode):
    for n in (0, 1, 2, 3, 4, 5):
        desc = desc_for(mode, opcode, n, reth_va=0x1122334455667788, imm=0xCAFEBABE, deth_src_qp=0xABCDE,
                        aeth_msn=0x123456, atomic_swap=5, atomic_orig=9, vlan_present=n & 1, vlan_tci=0x2064)
        payload = payload_for(desc)
        frame = build_frame(desc, payload)
        parsed, got = parse_frame(mode, frame)
        assert (parsed, got) == (normalize_desc(desc), payload)
        info = OPCODE_INFO[Opcode(opcode)]
        trailer = crc_trailer(mode)
        pad = pad_len(desc.payload_len)
        body_end = len(frame) - trailer
        assert frame[body_end - pad:body_end] == bytes(pad)
        assert frame[body_end - pad - len(payload):body_end - pad] == payload
        ext_start = body_end - pad - len(payload) - info.ext_len
        bth, _ = H.BTH.parse(frame[ext_start - H.BTH.SIZE:])
        assert (bth.opcode, bth.pad_count, bth.tver) == (opcode, pad, 0)


def test_max_payload():
    for mode in MODES:
        desc = desc_for(mode, Opcode.RC_RDMA_WRITE_MIDDLE, MAX_PAYLOAD)
        frame = build_frame(desc, payload_for(desc))
        assert parse_frame(mode, frame)[0].payload_len == MAX_PAYLOAD


# --- exact layouts and length fields -----------------------------------------------------------------

def test_rocev2_ipv4_layout():
    desc = desc_for(LinkMode.ROCEV2_IPV4, payload_len=13, traffic_class=0x68, hop_limit=7, ip_id=0x4242,
                    udp_sport=0xD00D, src_gid=0xC0A80101, dst_gid=0xFFFF_0A000002)
    frame = build_frame(desc, payload_for(desc))
    eth, rest = H.Ethernet.parse(frame)
    assert eth.ethertype == H.ETHERTYPE_IPV4 and eth.vlan_tci is None
    ip, rest = H.IPv4.parse(rest)
    udp, rest = H.UDP.parse(rest)
    transport_len = 12 + 13 + 3
    assert ip.total_length == 20 + 8 + transport_len + 4 == len(frame) - 14
    assert ip.flags == H.IPV4_FLAG_DF and ip.frag_offset == 0 and ip.protocol == 17
    assert (ip.tos, ip.ttl, ip.ident, ip.src, ip.dst) == (0x68, 7, 0x4242, 0xC0A80101, 0x0A000002)
    assert ip.checksum_ok() and ip.checksum != 0
    assert (udp.sport, udp.dport, udp.length, udp.checksum) == (0xD00D, 4791, 8 + transport_len + 4, 0)
    assert frame[-4:] == ICRC.to_bytes(icrc(LinkMode.ROCEV2_IPV4, frame[:-4]))


def test_rocev2_ipv6_layout():
    desc = desc_for(LinkMode.ROCEV2_IPV6, payload_len=1, traffic_class=0xA5, flow_label=0xFEDCB, hop_limit=3,
                    src_gid=1 << 127 | 5, dst_gid=0x20010DB8 << 96 | 1, vlan_present=1, vlan_tci=0xE00A)
    frame = build_frame(desc, payload_for(desc))
    eth, rest = H.Ethernet.parse(frame)
    assert eth.ethertype == H.ETHERTYPE_IPV6 and eth.vlan_tci == 0xE00A
    ip6, rest = H.IPv6.parse(rest)
    udp, _ = H.UDP.parse(rest)
    assert ip6.payload_length == udp.length == 8 + 12 + 4 + 4 == len(frame) - 18 - 40
    assert (ip6.traffic_class, ip6.flow_label, ip6.hop_limit, ip6.next_header) == (0xA5, 0xFEDCB, 3, 17)
    assert (ip6.src, ip6.dst) == (desc.src_gid, desc.dst_gid)
    assert (udp.dport, udp.checksum) == (4791, 0)


def test_rocev1_layout():
    desc = desc_for(LinkMode.ROCEV1, payload_len=6)
    frame = build_frame(desc, payload_for(desc))
    eth, rest = H.Ethernet.parse(frame)
    assert eth.ethertype == 0x8915
    grh, _ = H.GRH.parse(rest)
    assert grh.next_header == 0x1B and grh.ipver == 6
    assert grh.pay_len == 12 + 8 + 4 == len(frame) - 14 - 40


@pytest.mark.parametrize("mode", IB_MODES, ids=lambda m: m.slug)
def test_ib_layout(mode):
    desc = desc_for(mode, payload_len=9, vl=0xE, sl=0x9, dlid=0xC001, slid=0x0042)
    frame = build_frame(desc, payload_for(desc))
    lrh, rest = H.LRH.parse(frame)
    grh_len = 40 if mode is LinkMode.IB_GLOBAL else 0
    assert lrh.lnh == (3 if grh_len else 2) and lrh.lver == 0
    assert (lrh.vl, lrh.sl, lrh.dlid, lrh.slid) == (0xE, 0x9, 0xC001, 0x0042)
    assert lrh.pkt_len * 4 == 8 + grh_len + 12 + 12 + 4 == len(frame) - 2
    if grh_len:
        grh, _ = H.GRH.parse(rest)
        assert grh.pay_len == 12 + 12 + 4 and grh.next_header == 0x1B
    assert frame[-2:] == VCRC.to_bytes(vcrc(frame[:-2]))
    assert frame[-6:-2] == ICRC.to_bytes(icrc(mode, frame[:-6]))


def test_normalize_and_carried_fields():
    d = PacketDesc(mode=LinkMode.IB_LOCAL, opcode=Opcode.RC_SEND_ONLY, dst_mac=5, src_gid=7, reth_va=9, vl=3)
    n = normalize_desc(d)
    assert (n.dst_mac, n.src_gid, n.reth_va, n.vl) == (0, 0, 0, 3)
    assert "vlan_tci" not in carried_fields(replace(d, mode=LinkMode.ROCEV1))
    assert "vlan_tci" in carried_fields(replace(d, mode=LinkMode.ROCEV1, vlan_present=1))
    assert "flow_label" not in carried_fields(replace(d, mode=LinkMode.ROCEV2_IPV4))
    assert normalize_desc(replace(d, mode=0, src_gid=0x1234_C0A80001)).src_gid == 0xFFFF_C0A80001


# --- ICRC masking --------------------------------------------------------------------------------------

VARIANT = dict(traffic_class=0xFF, hop_limit=1, flow_label=0x12345, fecn=1, becn=1)


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.slug)
def test_icrc_ignores_variant_fields(mode):
    base = desc_for(mode, payload_len=21)
    changed = replace(base, **VARIANT, vl=0x7)
    a, b = build_frame(base, payload_for(base)), build_frame(changed, payload_for(base))
    trailer = crc_trailer(mode)
    assert a != b
    assert a[len(a) - trailer:][:4] == b[len(b) - trailer:][:4]


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.slug)
@pytest.mark.parametrize("field,value", [("psn", 1), ("dest_qp", 2), ("pkey", 0x7FFF), ("ackreq", 1),
                                         ("se", 1), ("udp_sport", 1), ("src_gid", 0xFFFF_01020304),
                                         ("sl", 1), ("dlid", 9)])
def test_icrc_covers_invariant_fields(mode, field, value):
    base = desc_for(mode, payload_len=21)
    changed = replace(base, **{field: value})
    if field not in carried_fields(base):
        return
    a, b = build_frame(base, payload_for(base)), build_frame(changed, payload_for(base))
    trailer = crc_trailer(mode)
    same_icrc = a[len(a) - trailer:][:4] == b[len(b) - trailer:][:4]
    # IB global replaces the whole LRH with ones, so SL and DLID are outside its ICRC
    assert same_icrc == (mode is LinkMode.IB_GLOBAL and field in ("sl", "dlid"))


def test_icrc_view_shapes():
    for mode in MODES:
        desc = desc_for(mode, payload_len=5, vlan_present=1, vlan_tci=3)
        frame = build_frame(desc, payload_for(desc))
        body = frame[:len(frame) - crc_trailer(mode)]
        view = icrc_view(mode, body)
        if mode.is_ethernet:
            assert view[:8] == PSEUDO_LRH and len(view) == len(body) - 18 + 8
        elif mode is LinkMode.IB_GLOBAL:
            assert view[:8] == PSEUDO_LRH and len(view) == len(body)
        else:
            assert view[0] >> 4 == 0xF and view[1:8] == body[1:8]
        bth_at = {LinkMode.ROCEV2_IPV4: 8 + 20 + 8, LinkMode.ROCEV2_IPV6: 8 + 40 + 8, LinkMode.ROCEV1: 8 + 40,
                  LinkMode.IB_LOCAL: 8, LinkMode.IB_GLOBAL: 8 + 40}[mode]
        assert view[bth_at] == desc.opcode
        assert view[bth_at + 4] == 0xFF
        assert ICRC.compute(view) == icrc(mode, body)


def test_icrc_view_masks_exact_bytes_ipv4():
    desc = desc_for(LinkMode.ROCEV2_IPV4, payload_len=0, traffic_class=0x12, hop_limit=0x34)
    frame = build_frame(desc, b"")
    view = icrc_view(LinkMode.ROCEV2_IPV4, frame[:-4])
    ip = view[8:28]
    assert ip[1] == 0xFF and ip[8] == 0xFF and ip[10:12] == b"\xff\xff"
    assert ip[:1] + ip[2:8] + ip[9:10] + ip[12:] == frame[14:15] + frame[16:22] + frame[23:24] + frame[26:34]
    assert view[28 + 6:28 + 8] == b"\xff\xff"


# --- malformed frames ------------------------------------------------------------------------------------

def good(mode, **kw):
    desc = desc_for(mode, **kw)
    return build_frame(desc, payload_for(desc))


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.slug)
def test_truncated_frames_rejected(mode):
    frame = good(mode, payload_len=40)
    for n in range(len(frame)):
        with pytest.raises(ValueError):
            parse_frame(mode, frame[:n])


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.slug)
def test_bit_flips_rejected(mode):
    """Every single-bit error in a byte the CRCs/checksums cover (everything after the MAC addresses for RoCE,
    everything for IB) is caught."""
    frame = good(mode, payload_len=7, opcode=Opcode.RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE)
    start = 12 if mode.is_ethernet else 0
    for i in range(start, len(frame)):
        for bit in range(8):
            bad = bytearray(frame)
            bad[i] ^= 1 << bit
            try:
                parsed = parse_frame(mode, bytes(bad))
            except ValueError:
                continue
            # undetectable only in a field the ICRC masks and nothing else covers (UDP checksum, BTH resv8a,
            # IPv6/GRH traffic class, flow label, hop limit); IB frames have the VCRC over everything
            assert mode.is_ethernet, (i, bit)
            assert icrc_view(mode, bytes(bad[:-4])) == icrc_view(mode, frame[:-4]), (i, bit)
            assert parsed[1] == parse_frame(mode, frame)[1]


def test_wrong_ethertype_and_mode():
    for mode in ETH_MODES:
        for other in ETH_MODES:
            if other is not mode:
                with pytest.raises(ValueError, match="EtherType"):
                    parse_frame(other, good(mode))
    with pytest.raises(ValueError, match="LNH"):
        parse_frame(LinkMode.IB_GLOBAL, good(LinkMode.IB_LOCAL))
    with pytest.raises(ValueError, match="LNH"):
        parse_frame(LinkMode.IB_LOCAL, good(LinkMode.IB_GLOBAL))
    with pytest.raises(ValueError, match="link mode"):
        parse_frame(7, good(LinkMode.IB_LOCAL))


def edit(mode, frame, offset, new):
    """Overwrite bytes at ``offset``, then fix the IPv4 checksum and the CRCs so only the edit is wrong."""
    b = bytearray(frame)
    b[offset:offset + len(new)] = new
    if mode is LinkMode.ROCEV2_IPV4:
        ip, _ = H.IPv4.parse(bytes(b[14:]))
        b[14:34] = ip.with_checksum().pack()
    return refresh_crcs(mode, bytes(b))


@pytest.mark.parametrize("what,offset,new,match", [
    ("udp port", 14 + 20 + 2, b"\x12\xb8", "destination port"),
    ("udp length", 14 + 20 + 4, b"\x00\x30", "UDP length"),
    ("ip protocol", 14 + 9, b"\x06", "not UDP"),
    ("ip length", 14 + 2, b"\x00\x50", "length"),
    ("fragment", 14 + 6, b"\x20\x00", "fragment"),
    ("tver", 14 + 28 + 1, b"\x01", "TVer"),
    ("opcode", 14 + 28, b"\x15", "opcode"),
    ("pad count", 14 + 28 + 1, b"\x30", "pad bytes"),
])
def test_specific_errors_ipv4(what, offset, new, match):
    mode = LinkMode.ROCEV2_IPV4
    with pytest.raises(ValueError, match=match):
        parse_frame(mode, edit(mode, good(mode, payload_len=16), offset, new))


def test_specific_errors_other_modes():
    ib = LinkMode.IB_LOCAL
    frame = good(ib, payload_len=6)
    with pytest.raises(ValueError, match="PktLen"):
        parse_frame(ib, edit(ib, frame, 4, b"\x00\x10"))
    with pytest.raises(ValueError, match="LVer"):
        parse_frame(ib, edit(ib, frame, 0, b"\x01"))
    with pytest.raises(ValueError, match="pad bytes"):
        parse_frame(ib, edit(ib, frame, len(frame) - 7, b"\x01"))
    with pytest.raises(ValueError, match="bad ICRC"):
        bad = bytearray(frame)
        bad[9] ^= 0x40
        parse_frame(ib, refresh_vcrc_only(bytes(bad)))
    with pytest.raises(ValueError, match="bad VCRC"):
        parse_frame(ib, frame[:-1] + bytes([frame[-1] ^ 1]))
    v1 = LinkMode.ROCEV1
    with pytest.raises(ValueError, match="next header"):
        parse_frame(v1, edit(v1, good(v1), 14 + 6, b"\x11"))
    with pytest.raises(ValueError, match="IPVer"):
        parse_frame(v1, edit(v1, good(v1), 14, b"\x45"))
    v6 = LinkMode.ROCEV2_IPV6
    with pytest.raises(ValueError, match="not UDP"):
        parse_frame(v6, edit(v6, good(v6), 14 + 6, b"\x06"))
    ack = good(ib, opcode=Opcode.RC_ACKNOWLEDGE)
    with pytest.raises(ValueError, match="no payload|must not carry"):
        body = bytearray(ack[:-6]) + b"\0\0\0\0"
        body[4:6] = (len(body) // 4 + 1).to_bytes(2, "big")
        parse_frame(ib, refresh_crcs(ib, bytes(body) + bytes(6)))
    with pytest.raises(ValueError, match="bad IPv4 header checksum"):
        f = bytearray(good(LinkMode.ROCEV2_IPV4))
        f[14 + 8] ^= 1
        parse_frame(LinkMode.ROCEV2_IPV4, bytes(f))


def refresh_vcrc_only(frame):
    return frame[:-2] + VCRC.to_bytes(vcrc(frame[:-2]))


def test_mac_padding():
    mode = LinkMode.ROCEV2_IPV4
    desc = desc_for(mode, payload_len=0)
    frame = build_frame(desc, b"")
    assert len(frame) == 58 < ETH_MIN_FRAME
    padded = frame + bytes(ETH_MIN_FRAME - len(frame))
    assert parse_frame(mode, padded) == parse_frame(mode, frame)
    long = good(mode, payload_len=40)
    with pytest.raises(ValueError, match="after the ICRC"):
        parse_frame(mode, long + b"\0\0")


def test_build_errors():
    with pytest.raises(ValueError, match="payload_len"):
        build_frame(PacketDesc(payload_len=3), b"ab")
    with pytest.raises(ValueError, match="no payload"):
        build_frame(PacketDesc(opcode=Opcode.RC_ACKNOWLEDGE, payload_len=1), b"a")
    with pytest.raises(ValueError, match="exactly 16"):
        build_frame(PacketDesc(opcode=Opcode.CNP, payload_len=1), b"a")
    with pytest.raises(ValueError, match="link mode"):
        build_frame(PacketDesc(mode=6), b"")
    with pytest.raises(ValueError, match="opcode"):
        build_frame(PacketDesc(opcode=0x15), b"")
    with pytest.raises(ValueError, match="MAX_PAYLOAD"):
        build_frame(PacketDesc(payload_len=MAX_PAYLOAD + 4), bytes(MAX_PAYLOAD + 4))
