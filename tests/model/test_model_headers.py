"""Header codecs: pack/parse round trips, sizes, known byte layouts, malformed input, and scapy as a second codec."""

import pytest
from hypothesis import given, settings, strategies as st

from rnic.model import headers as H

FIXED_HEADERS = [H.IPv4, H.IPv6, H.UDP, H.LRH, H.GRH, H.BTH, H.RETH, H.AETH, H.DETH, H.ImmDt, H.IETH,
                 H.AtomicETH, H.AtomicAckETH]
# fields a parser insists on (anything else would be another protocol or need options support)
PINNED = {H.IPv4: {"version": 4, "ihl": 5}, H.IPv6: {"version": 6}, H.GRH: {"ipver": 6}}
SIZES = {H.IPv4: 20, H.IPv6: 40, H.UDP: 8, H.LRH: 8, H.GRH: 40, H.BTH: 12, H.RETH: 16, H.AETH: 4,
         H.DETH: 8, H.ImmDt: 4, H.IETH: 4, H.AtomicETH: 28, H.AtomicAckETH: 8}


def header_values(cls):
    kw = {name: st.integers(0, (1 << w) - 1) for name, w in cls.LAYOUT}
    kw.update({name: st.just(v) for name, v in PINNED.get(cls, {}).items()})
    return st.builds(cls, **kw)


@pytest.mark.parametrize("cls", FIXED_HEADERS, ids=lambda c: c.__name__)
def test_sizes(cls):
    assert cls.SIZE == SIZES[cls]
    assert len(cls().pack()) == SIZES[cls]


@pytest.mark.parametrize("cls", FIXED_HEADERS, ids=lambda c: c.__name__)
@settings(max_examples=150, deadline=None)
@given(data=st.data(), tail=st.binary(max_size=8))
def test_round_trip(cls, data, tail):
    header = data.draw(header_values(cls))
    raw = header.pack()
    assert len(raw) == cls.SIZE
    parsed, rest = cls.parse(raw + tail)
    assert parsed == header and rest == tail
    assert parsed.pack() == raw


@pytest.mark.parametrize("cls", FIXED_HEADERS, ids=lambda c: c.__name__)
def test_parse_too_short(cls):
    with pytest.raises(ValueError, match=cls.__name__):
        cls.parse(bytes(cls.SIZE - 1))


@pytest.mark.parametrize("cls", FIXED_HEADERS, ids=lambda c: c.__name__)
def test_field_out_of_range(cls):
    name, width = cls.LAYOUT[-1]
    with pytest.raises(ValueError):
        cls(**{name: 1 << width})


@given(dst=st.integers(0, 2**48 - 1), src=st.integers(0, 2**48 - 1),
       ethertype=st.integers(0, 0xFFFF).filter(lambda t: t != H.ETHERTYPE_VLAN),
       tci=st.none() | st.integers(0, 0xFFFF), tail=st.binary(max_size=4))
def test_ethernet_round_trip(dst, src, ethertype, tci, tail):
    eth = H.Ethernet(dst, src, ethertype, tci)
    raw = eth.pack()
    assert len(raw) == eth.size == (18 if tci is not None else 14)
    assert H.Ethernet.parse(raw + tail) == (eth, tail)


def test_ethernet_layout_and_errors():
    raw = H.Ethernet(0x0102030405_06, 0x0A0B0C0D0E0F, H.ETHERTYPE_ROCEV1, 0x6005).pack()
    assert raw.hex() == "010203040506" "0a0b0c0d0e0f" "8100" "6005" "8915"
    with pytest.raises(ValueError):
        H.Ethernet.parse(raw[:13])
    with pytest.raises(ValueError):
        H.Ethernet.parse(raw[:17])
    with pytest.raises(ValueError, match="stacked"):
        H.Ethernet.parse(raw[:12] + b"\x81\x00\x00\x01\x81\x00\x00\x02\x08\x00")


def test_ipv4_checksum_known_value():
    # the worked example of the IPv4 header checksum article (Wikipedia, "Internet checksum"/"IPv4 header checksum")
    header = bytes.fromhex("450000730000400040110000c0a80001c0a800c7")
    assert H.ipv4_checksum(header) == 0xB861
    ip, _ = H.IPv4.parse(header[:10] + b"\xb8\x61" + header[12:])
    assert ip.checksum_ok()
    assert H.IPv4.parse(header)[0].with_checksum().checksum == 0xB861


def test_ipv4_parse_rejects_other_versions_and_options():
    good = H.IPv4(src=1, dst=2).with_checksum().pack()
    with pytest.raises(ValueError, match="version"):
        H.IPv4.parse(b"\x65" + good[1:])
    with pytest.raises(ValueError, match="IHL"):
        H.IPv4.parse(b"\x46" + good[1:])
    with pytest.raises(ValueError, match="version"):
        H.IPv6.parse(b"\x40" + bytes(39))
    with pytest.raises(ValueError, match="IPVer"):
        H.GRH.parse(b"\x40" + bytes(39))


def test_known_layouts():
    # bit positions pinned against hand-assembled bytes
    assert H.LRH(vl=0xA, lver=0x1, sl=0xB, resv2=0, lnh=3, dlid=0x1234, pkt_len=0x7FF, slid=0xBEEF).pack().hex() \
        == "a1" "b3" "1234" "07ff" "beef"
    assert H.BTH(opcode=0x81, se=1, migreq=0, pad_count=3, tver=0, pkey=0xFFFF, fecn=1, becn=1, dest_qp=0x118,
                 ackreq=1, psn=0xABCDEF).pack().hex() == "81" "b0" "ffff" "c0000118" "80abcdef"
    assert H.GRH(tclass=0xAB, flow_label=0xCDEF1, pay_len=0x40, hop_limit=0xFE, sgid=1, dgid=2).pack()[:8].hex() \
        == "6abcdef1" "0040" "1b" "fe"
    assert H.DETH(qkey=0x11223344, src_qp=0x556677).pack().hex() == "11223344" "00" "556677"
    assert H.AtomicETH(va=1, rkey=2, swap_add=3, compare=4).pack().hex() == (
        "0000000000000001" "00000002" "0000000000000003" "0000000000000004")
    assert H.UDP(sport=0xC000, length=0x28).pack().hex() == "c000" "12b7" "0028" "0000"


# --- scapy as an independent codec for the headers it knows ----------------------------------------

@settings(max_examples=60, deadline=None)
@given(h=header_values(H.BTH))
def test_bth_agrees_with_scapy(h):
    from scapy.contrib.roce import BTH as SBTH
    ours = h.pack()
    theirs = bytes(SBTH(opcode=h.opcode, solicited=h.se, migreq=h.migreq, padcount=h.pad_count, version=h.tver,
                        pkey=h.pkey, fecn=h.fecn, becn=h.becn, resv6=h.resv6, dqpn=h.dest_qp, ackreq=h.ackreq,
                        resv7=h.resv7, psn=h.psn, icrc=0))[:12]
    assert ours == theirs


@settings(max_examples=60, deadline=None)
@given(h=header_values(H.GRH))
def test_grh_agrees_with_scapy(h):
    from scapy.contrib.roce import GRH as SGRH
    s = SGRH(h.pack())
    assert (s.ipver, s.tclass, s.flowlabel, s.paylen, s.nexthdr, s.hoplmt, s.sgid, s.dgid) == (
        h.ipver, h.tclass, h.flow_label, h.pay_len, h.next_header, h.hop_limit, h.sgid, h.dgid)


@settings(max_examples=60, deadline=None)
@given(h=header_values(H.IPv4))
def test_ipv4_agrees_with_scapy(h):
    from scapy.layers.inet import IP
    h = h.with_checksum()
    s = IP(h.pack())
    assert (s.tos, s.len, s.id, int(s.flags), s.frag, s.ttl, s.proto, s.chksum) == (
        h.tos, h.total_length, h.ident, h.flags, h.frag_offset, h.ttl, h.protocol, h.checksum)
    assert (int.from_bytes(bytes(map(int, s.src.split("."))), "big"),
            int.from_bytes(bytes(map(int, s.dst.split("."))), "big")) == (h.src, h.dst)
    del s.chksum
    assert IP(bytes(s)).chksum == h.checksum


@settings(max_examples=60, deadline=None)
@given(h=header_values(H.AETH))
def test_aeth_agrees_with_scapy(h):
    from scapy.contrib.roce import AETH as SAETH
    assert bytes(SAETH(syndrome=h.syndrome, msn=h.msn)) == h.pack()
