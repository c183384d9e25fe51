"""Receive classification (model/receive.py): the all-opcodes catalogue round trip, one mutation per drop
reason, random single-byte corruptions, and a scapy-built RoCEv2 frame."""

from dataclasses import fields as dc_fields, replace

import pytest
from hypothesis import given, settings, strategies as st

from model_strategies import refresh_crcs
from rnic.model import headers as H
from rnic.model.crc import VCRC
from rnic.model.descriptor import LinkMode, PacketDesc
from rnic.model.frames import ETH_MIN_FRAME, ICRC_LEN, VCRC_LEN, build_frame, normalize_desc, vcrc
from rnic.model.opcodes import Opcode
from rnic.model.receive import DropCounters, DropReason, Dropped, PortAddresses, Received, classify, ipv4_gid
from rnic.sim.demo import demo_packets

MODES = list(LinkMode)
ETH_MODES = [m for m in MODES if m.is_ethernet]
IB_MODES = [m for m in MODES if not m.is_ethernet]
R = DropReason


def link_of(mode):
    return "ethernet" if LinkMode(mode).is_ethernet else "ib"


def port_for(desc: PacketDesc) -> PortAddresses:
    """The port ``desc`` is addressed to."""
    n = normalize_desc(desc)
    return PortAddresses(mac=desc.dst_mac, gids={n.dst_gid}, lid=desc.dlid)


CATALOGUE = {mode: [(d, p, build_frame(d, p)) for d, p in demo_packets(mode)] for mode in MODES}
ALL = [(mode, i) for mode in MODES for i in range(len(CATALOGUE[mode]))]


def run(mode, frame, desc, fcs_bad=False):
    return classify(frame, fcs_bad=fcs_bad, port=port_for(desc), link=link_of(mode))


def good(mode, opcode=Opcode.RC_SEND_ONLY):
    """(desc, payload, frame) of the catalogue entry for ``opcode``."""
    return next(e for e in CATALOGUE[mode] if e[0].opcode == opcode)


def eth_size(desc):
    return 18 if desc.vlan_present else 14


def transport_start(mode, desc):
    return {LinkMode.ROCEV2_IPV4: eth_size(desc) + 28, LinkMode.ROCEV2_IPV6: eth_size(desc) + 48,
            LinkMode.ROCEV1: eth_size(desc) + 40, LinkMode.IB_LOCAL: 8, LinkMode.IB_GLOBAL: 48}[mode]


def net_start(mode, desc):
    return eth_size(desc) if LinkMode(mode).is_ethernet else 8


def patch(frame, offset, new: bytes):
    return frame[:offset] + new + frame[offset + len(new):]


def refresh_ipv4(desc, frame):
    """Recompute the IPv4 header checksum after an edit."""
    off = eth_size(desc)
    ip, _ = H.IPv4.parse(frame[off:])
    return patch(frame, off, replace(ip, checksum=0).with_checksum().pack())


def refresh_vcrc(frame):
    return frame[:-VCRC_LEN] + VCRC.to_bytes(vcrc(frame[:-VCRC_LEN]))


def assert_dropped(result, reason):
    assert isinstance(result, Dropped), result
    assert result.reason == reason, result


# --- the catalogue: every opcode in every mode ------------------------------------------------------

@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.slug)
def test_catalogue_round_trip(mode):
    assert len(CATALOGUE[mode]) == 38
    counters = DropCounters()
    for desc, payload, frame in CATALOGUE[mode]:
        result = counters.count(run(mode, frame, desc))
        if desc.opcode == Opcode.CNP:   # counted, not executed; the descriptor goes with it
            assert result == Dropped(R.CNP, result.detail, mode, normalize_desc(desc))
            assert not R.CNP.is_error
        else:
            assert result == Received(mode, normalize_desc(desc), payload), hex(desc.opcode)
    assert (counters.received, counters[R.CNP], counters.total) == (37, 1, 38)


def test_mac_padding_accepted():
    """Only RoCEv2/IPv4 has frames under 60 bytes; the MAC pads them, and the padding is not a length error."""
    mode = LinkMode.ROCEV2_IPV4
    desc = PacketDesc(mode=mode, opcode=Opcode.RC_SEND_ONLY, payload_len=0)
    frame = build_frame(desc, b"")
    assert len(frame) < ETH_MIN_FRAME
    padded = frame + bytes(ETH_MIN_FRAME - len(frame))
    assert run(mode, padded, desc) == Received(mode, normalize_desc(desc), b"")
    assert_dropped(run(mode, frame + bytes(ETH_MIN_FRAME + 1 - len(frame)), desc), R.BAD_LENGTH)


def test_ipv4_gid():
    assert ipv4_gid(0xC0A8_0102) == 0xFFFF_C0A8_0102
    assert good(LinkMode.ROCEV2_IPV4)[0].dst_gid == ipv4_gid(0xC0A8_0102)


# --- one mutation per reason -------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.slug)
def test_bad_fcs(mode):
    desc, _, frame = good(mode)
    assert_dropped(run(mode, frame, desc, fcs_bad=True), R.BAD_FCS)
    assert_dropped(run(mode, b"", desc, fcs_bad=True), R.BAD_FCS)   # before anything else


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.slug)
def test_truncated(mode):
    desc, _, frame = good(mode)
    trailer = ICRC_LEN + (0 if mode.is_ethernet else VCRC_LEN)
    headers_end = transport_start(mode, desc) + H.BTH.SIZE + trailer
    for n in (0, 5, net_start(mode, desc) + 1, headers_end - 1):
        assert_dropped(run(mode, frame[:n], desc), R.TRUNCATED)
    assert run(mode, frame[:headers_end], desc).reason != R.TRUNCATED   # long enough: a length error instead


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.slug)
def test_bad_length(mode):
    desc, _, frame = good(mode)
    cases = [frame[:-1], frame + b"\0" * 4]             # the frame disagrees with its length fields
    if mode in (LinkMode.ROCEV2_IPV4, LinkMode.ROCEV2_IPV6):
        udp = transport_start(mode, desc) - 8
        cases.append(patch(frame, udp + 4, (int.from_bytes(frame[udp + 4:udp + 6], "big") + 4).to_bytes(2, "big")))
    if mode is LinkMode.ROCEV2_IPV4:                     # total length, checksum recomputed
        off = eth_size(desc)
        cases.append(refresh_ipv4(desc, patch(frame, off + 2, (len(frame) - off + 4).to_bytes(2, "big"))))
    if mode in (LinkMode.ROCEV1, LinkMode.IB_GLOBAL):    # GRH PayLen
        grh = transport_start(mode, desc) - 40
        cases.append(refresh_crcs(mode, patch(frame, grh + 4, (int.from_bytes(frame[grh + 4:grh + 6], "big") - 4)
                                              .to_bytes(2, "big"))))
    if not mode.is_ethernet:                             # LRH PktLen, VCRC recomputed
        cases.append(refresh_vcrc(patch(frame, 4, bytes([frame[4], frame[5] + 1]))))
    # pad count on an opcode without payload: PadCnt 1 but no byte to pad (ICRC recomputed)
    adesc, _, aframe = good(mode, Opcode.RC_ACKNOWLEDGE)
    b = transport_start(mode, adesc)
    cases.append(refresh_crcs(mode, patch(aframe, b + 1, bytes([aframe[b + 1] | 0x10]))))
    for frame_ in cases[:-1]:
        assert_dropped(run(mode, frame_, desc), R.BAD_LENGTH)
    assert_dropped(run(mode, cases[-1], adesc), R.BAD_LENGTH)


def test_bad_length_transport_rules():
    """The transport rules, each with the ICRC recomputed: non-zero pad, payload on a no-payload opcode."""
    mode = LinkMode.ROCEV2_IPV6
    desc, payload, frame = good(mode, Opcode.RC_SEND_LAST)
    assert desc.payload_len % 4
    pad_byte = len(frame) - ICRC_LEN - 1
    assert_dropped(run(mode, refresh_crcs(mode, patch(frame, pad_byte, b"\x01")), desc), R.BAD_LENGTH)
    # a READ REQUEST (no payload) with 4 extra bytes in every length field
    rdesc, _, rframe = good(mode, Opcode.RC_RDMA_READ_REQUEST)
    body = rframe[:-ICRC_LEN] + b"\0" * 4 + rframe[-ICRC_LEN:]
    ip = eth_size(rdesc)
    body = patch(body, ip + 4, (int.from_bytes(body[ip + 4:ip + 6], "big") + 4).to_bytes(2, "big"))
    body = patch(body, ip + 44, (int.from_bytes(body[ip + 44:ip + 46], "big") + 4).to_bytes(2, "big"))
    assert_dropped(run(mode, refresh_crcs(mode, body), rdesc), R.BAD_LENGTH)


def test_bad_ip_checksum():
    mode = LinkMode.ROCEV2_IPV4
    desc, _, frame = good(mode)
    off = eth_size(desc) + 10
    assert_dropped(run(mode, patch(frame, off, bytes([frame[off] ^ 0x01])), desc), R.BAD_IP_CHECKSUM)
    ttl = eth_size(desc) + 8        # TTL: not in the ICRC, but in the header checksum
    assert_dropped(run(mode, patch(frame, ttl, bytes([frame[ttl] - 1])), desc), R.BAD_IP_CHECKSUM)


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.slug)
def test_not_roce(mode):
    desc, _, frame = good(mode)
    cases = []
    if mode.is_ethernet:
        e = eth_size(desc)
        cases.append(patch(frame, e - 2, b"\x08\x06"))                          # ARP
        cases.append(patch(frame, 12, b"\x81\x00\x00\x05\x81\x00") if not desc.vlan_present else
                     patch(frame, 16, b"\x81\x00"))                             # stacked tags
    if mode in (LinkMode.ROCEV2_IPV4, LinkMode.ROCEV2_IPV6):
        udp = transport_start(mode, desc) - 8
        cases.append(refresh_crcs(mode, patch(frame, udp + 2, (4792).to_bytes(2, "big"))))
    if mode is LinkMode.ROCEV2_IPV4:
        e = eth_size(desc)
        cases.append(refresh_ipv4(desc, patch(frame, e + 9, b"\x06")))         # TCP
        cases.append(refresh_ipv4(desc, patch(frame, e + 6, b"\x20\x00")))     # MF: a fragment
        cases.append(patch(frame, e, b"\x46"))                                  # IHL 6: options
        cases.append(patch(frame, e, b"\x65"))                                  # version 6
    if mode is LinkMode.ROCEV2_IPV6:
        cases.append(patch(frame, eth_size(desc) + 6, b"\x06"))
    if mode in (LinkMode.ROCEV1, LinkMode.IB_GLOBAL):
        grh = transport_start(mode, desc) - 40
        cases.append(refresh_crcs(mode, patch(frame, grh + 6, b"\x11")))       # next header UDP
        cases.append(refresh_crcs(mode, patch(frame, grh, bytes([0x40 | frame[grh] & 0x0F]))))
    if not mode.is_ethernet:
        cases.append(refresh_vcrc(patch(frame, 1, bytes([frame[1] & 0xFC | 1]))))  # LNH 1: IP over IB
        cases.append(refresh_vcrc(patch(frame, 0, bytes([frame[0] | 0x01]))))      # LVer 1
    for c in cases:
        result = run(mode, c, desc)
        assert_dropped(result, R.NOT_ROCE)
        assert not R.NOT_ROCE.is_error


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.slug)
def test_bad_tver(mode):
    desc, _, frame = good(mode)
    b = transport_start(mode, desc)
    tver1 = patch(frame, b + 1, bytes([frame[b + 1] | 0x01]))
    assert_dropped(run(mode, tver1, desc), R.BAD_TVER)                   # before the ICRC check ...
    assert_dropped(run(mode, refresh_crcs(mode, tver1), desc), R.BAD_TVER)   # ... and with a good ICRC


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.slug)
def test_bad_icrc(mode):
    desc, _, frame = good(mode)
    i = transport_start(mode, desc) + H.BTH.SIZE        # first payload byte
    bad = patch(frame, i, bytes([frame[i] ^ 0x80]))
    if not mode.is_ethernet:
        bad = refresh_vcrc(bad)
    assert_dropped(run(mode, bad, desc), R.BAD_ICRC)
    icrc_at = len(frame) - ICRC_LEN - (0 if mode.is_ethernet else VCRC_LEN)
    assert_dropped(run(mode, patch(frame, icrc_at, bytes([frame[icrc_at] ^ 1])), desc), R.BAD_ICRC)


@pytest.mark.parametrize("mode", IB_MODES, ids=lambda m: m.slug)
def test_bad_vcrc(mode):
    desc, _, frame = good(mode)
    assert_dropped(run(mode, frame[:-1] + bytes([frame[-1] ^ 0x40]), desc), R.BAD_VCRC)
    # a VL change: masked out of the ICRC (IB local masks VL, IB global the whole LRH), caught by the VCRC
    assert_dropped(run(mode, patch(frame, 0, bytes([frame[0] ^ 0x10])), desc), R.BAD_VCRC)


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.slug)
@pytest.mark.parametrize("opcode", [0x15, 0x18, 0x1F, 0x2C, 0x40, 0x60, 0x66, 0x80, 0xA0, 0xC0, 0xFF])
def test_unknown_opcode(mode, opcode):
    desc, _, frame = good(mode)
    b = transport_start(mode, desc)
    bad = refresh_crcs(mode, patch(frame, b, bytes([opcode])))
    assert_dropped(run(mode, bad, desc), R.UNKNOWN_OPCODE)
    assert_dropped(run(mode, patch(frame, b, bytes([opcode])), desc), R.BAD_ICRC)   # without a new ICRC


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.slug)
def test_not_ours(mode):
    desc, _, frame = good(mode)
    cases = []
    if mode.is_ethernet:
        cases.append(patch(frame, 5, bytes([frame[5] ^ 1])))                  # MAC: outside the ICRC
        cases.append(patch(frame, 0, b"\xff" * 6))                            # broadcast
    if mode is LinkMode.ROCEV2_IPV4:
        dst = eth_size(desc) + 19
        cases.append(refresh_crcs(mode, refresh_ipv4(desc, patch(frame, dst, bytes([frame[dst] ^ 1])))))
    if mode in (LinkMode.ROCEV2_IPV6, LinkMode.ROCEV1, LinkMode.IB_GLOBAL):
        dgid_last = net_start(mode, desc) + 39          # last byte of the IPv6 destination / GRH DGID
        cases.append(refresh_crcs(mode, patch(frame, dgid_last, bytes([frame[dgid_last] ^ 1]))))
    if not mode.is_ethernet:
        cases.append(refresh_crcs(mode, patch(frame, 3, bytes([frame[3] ^ 4]))))  # DLID
    for c in cases:
        assert_dropped(run(mode, c, desc), R.NOT_OURS)
    # the same frame is accepted by a port that has the address
    assert isinstance(run(mode, frame, desc), Received)
    other = PortAddresses(mac=desc.dst_mac ^ 1, gids={0}, lid=desc.dlid ^ 1)
    assert_dropped(classify(frame, fcs_bad=False, port=other, link=link_of(mode)), R.NOT_OURS)


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.slug)
def test_wrong_link_kind(mode):
    """An Ethernet frame on an IB port (or the reverse) is never Received."""
    desc, _, frame = good(mode)
    other = "ib" if mode.is_ethernet else "ethernet"
    assert isinstance(classify(frame, fcs_bad=False, port=port_for(desc), link=other), Dropped)
    with pytest.raises(ValueError):
        classify(frame, fcs_bad=False, port=port_for(desc), link="fddi")


def test_order_and_counters():
    assert [r.name for r in DropReason] == [
        "BAD_FCS", "TRUNCATED", "NOT_ROCE", "BAD_LENGTH", "BAD_IP_CHECKSUM", "BAD_TVER", "BAD_ICRC", "BAD_VCRC",
        "UNKNOWN_OPCODE", "NOT_OURS", "CNP"]
    assert {r for r in DropReason if not r.is_error} == {R.NOT_ROCE, R.NOT_OURS, R.CNP}
    c = DropCounters()
    mode = LinkMode.ROCEV2_IPV4
    desc, _, frame = good(mode)
    for fcs in (True, True, False):
        c.count(run(mode, frame, desc, fcs_bad=fcs))
    c.count(run(mode, frame[:20], desc))
    assert (c[R.BAD_FCS], c[R.TRUNCATED], c.received, c.total) == (2, 1, 1, 4)


# --- random single-byte corruptions ------------------------------------------------------------------

def outside_icrc(mode, desc, i):
    """Fields at byte ``i`` that the ICRC (and, on Ethernet, the IPv4 checksum) does not protect, as
    ``(descriptor fields a change may alter, bit mask of the byte that is outside the ICRC)``, or None.

    Ethernet header (MACs, 802.1Q tag, EtherType); IPv6 and GRH traffic class, flow label and hop limit
    (byte 0's low nibble, bytes 1-3, byte 7); UDP checksum; BTH byte 4 (FECN, BECN, resv6). IPv4 TOS, TTL
    and checksum are outside the ICRC but inside the IPv4 header checksum; on IB the VCRC covers all."""
    if not LinkMode(mode).is_ethernet:
        return None
    e, t = eth_size(desc), transport_start(mode, desc)
    if i < 6:
        return ("dst_mac",), 0xFF
    if i < 12:
        return ("src_mac",), 0xFF
    if desc.vlan_present and i in (14, 15):
        return ("vlan_tci",), 0xFF
    if i < e:
        return ("ethertype",), 0xFF             # framing: any change is a drop
    if mode in (LinkMode.ROCEV2_IPV6, LinkMode.ROCEV1):
        tfh = ("traffic_class", "flow_label", "hop_limit")
        if i == e:
            return tfh, 0x0F
        if e < i < e + 4 or i == e + 7:
            return tfh, 0xFF
    if mode is not LinkMode.ROCEV1 and i in (t - 2, t - 1):
        return (), 0xFF                          # UDP checksum: not carried in the descriptor
    if i == t + H.BTH.RESV8A_OFFSET:
        return ("fecn", "becn"), 0xFF
    return None


def check_corruption(mode, index, i, xor):
    """Classify catalogue frame ``index`` with byte ``i`` XORed with ``xor``; assert the outcome the ICRC
    coverage allows. Returns the result."""
    desc, payload, frame = CATALOGUE[mode][index]
    bad = patch(frame, i, bytes([frame[i] ^ xor]))
    result = run(mode, bad, desc)
    free = outside_icrc(mode, desc, i)
    if free is None or xor & ~free[1] or free[0] == ("ethertype",):
        # covered by the ICRC, the VCRC or the IPv4 checksum, or framing: a drop for a fault
        assert isinstance(result, Dropped) and (result.reason.is_error or result.reason == R.NOT_ROCE), (i, result)
        return result
    fields, _ = free
    if fields == ("dst_mac",):
        assert_dropped(result, R.NOT_OURS)
        return result
    if desc.opcode == Opcode.CNP:
        assert (result.reason, result.mode) == (R.CNP, mode), (i, result)
    else:
        assert isinstance(result, Received), (i, result)
        assert (result.mode, result.payload) == (mode, payload)
    want = normalize_desc(desc)
    changed = {f.name for f in dc_fields(PacketDesc) if getattr(result.desc, f.name) != getattr(want, f.name)}
    assert changed <= set(fields), (i, changed)
    if fields in (("src_mac",), ("vlan_tci",)):
        assert changed == set(fields)
    return result


@settings(max_examples=1500, deadline=None)
@given(where=st.sampled_from(ALL), pos=st.one_of(st.floats(0, 1, exclude_max=True), st.integers(0, 99)),
       xor=st.integers(1, 255))
def test_single_byte_corruption(where, pos, xor):
    """Random single-byte corruptions of catalogue frames, half of them in the first 100 bytes (headers)."""
    mode, index = where
    n = len(CATALOGUE[mode][index][2])
    check_corruption(mode, index, int(pos * n) if isinstance(pos, float) else pos % n, xor)


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.slug)
def test_every_header_byte_corrupted(mode):
    """Every byte through the first payload bytes, and the trailer, of a frame with and without an 802.1Q
    tag and of the CNP, each XORed with masks that hit either nibble or both."""
    send_first = 0                    # index 0 carries a VLAN tag, index 4 (SEND ONLY) does not
    cnp = next(k for k, e in enumerate(CATALOGUE[mode]) if e[0].opcode == Opcode.CNP)
    outcomes = set()
    for index in (send_first, 4, cnp):
        desc, _, frame = CATALOGUE[mode][index]
        head = transport_start(mode, desc) + H.BTH.SIZE + 8
        for i in [*range(min(head, len(frame))), *range(len(frame) - 8, len(frame))]:
            for xor in (0x01, 0x0F, 0x10, 0x80, 0xFF):
                r = check_corruption(mode, index, i, xor)
                outcomes.add("received" if isinstance(r, Received) else r.reason)
    want = {R.BAD_ICRC, R.NOT_ROCE} | ({"received", R.NOT_OURS} if mode.is_ethernet else {R.BAD_VCRC})
    assert want <= outcomes, outcomes


# --- scapy -------------------------------------------------------------------------------------------

def test_scapy_rocev2_frame_received():
    scapy_l2 = pytest.importorskip("scapy.layers.l2")
    from scapy.contrib.roce import BTH
    from scapy.layers.inet import IP, UDP
    from scapy.packet import Raw

    payload = bytes(range(37))
    pkt = (scapy_l2.Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01")
           / IP(src="192.168.0.1", dst="192.168.0.2", flags="DF", ttl=64)
           / UDP(sport=0xC123, dport=4791, chksum=0)
           / BTH(opcode=int(Opcode.RC_SEND_ONLY), padcount=3, pkey=0xFFFF, dqpn=0x42, psn=0x1234, ackreq=1)
           / Raw(payload + bytes(3)))
    port = PortAddresses(mac=0x02_00_00_00_00_02, gids={ipv4_gid(0xC0A8_0002)})
    result = classify(bytes(pkt), fcs_bad=False, port=port, link="ethernet")
    assert isinstance(result, Received), result
    d = result.desc
    assert (result.mode, result.payload) == (LinkMode.ROCEV2_IPV4, payload)
    assert (d.opcode, d.dest_qp, d.psn, d.ackreq, d.udp_sport, d.src_gid) == (
        Opcode.RC_SEND_ONLY, 0x42, 0x1234, 1, 0xC123, ipv4_gid(0xC0A8_0001))
