"""Header codecs for the RoCE and InfiniBand wire formats: pack to bytes and parse from bytes, field by field.

Every fixed-size header is a dataclass whose ``LAYOUT`` lists its fields in wire order, most significant
bit first, as ``(name, width in bits)``; reserved fields are fields too (default 0) so that
``parse`` then ``pack`` gives back the same bytes. All multi-byte fields are big-endian (network order).
``pack()`` returns the header bytes; ``parse(data)`` returns ``(header, rest_of_data)`` and raises
``ValueError`` when ``data`` is too short or a fixed field (version, header length) is wrong.

Ethernet is the one variable-size header (an optional 802.1Q tag), with the same two methods.
Layouts and sources are in docs/wire-formats.md.
"""

from __future__ import annotations

from dataclasses import dataclass, fields as dc_fields, replace
from typing import ClassVar

__all__ = [
    "ETHERTYPE_IPV4", "ETHERTYPE_IPV6", "ETHERTYPE_VLAN", "ETHERTYPE_ROCEV1",
    "IP_PROTO_UDP", "ROCEV2_UDP_PORT", "IPV4_FLAG_DF", "IPV4_FLAG_MF",
    "GRH_NEXT_HEADER_IBA", "IP_VERSION_6", "LNH_RAW", "LNH_IP_NON_IBA", "LNH_IBA_LOCAL", "LNH_IBA_GLOBAL",
    "LVER_IBA", "TVER_IBA",
    "Header", "Ethernet", "IPv4", "IPv6", "UDP", "LRH", "GRH", "BTH",
    "RETH", "AETH", "DETH", "ImmDt", "IETH", "AtomicETH", "AtomicAckETH",
    "ipv4_checksum",
]

ETHERTYPE_IPV4 = 0x0800
ETHERTYPE_IPV6 = 0x86DD
ETHERTYPE_VLAN = 0x8100       # IEEE 802.1Q C-tag
ETHERTYPE_ROCEV1 = 0x8915     # IBTA Annex A16 (RoCE)
IP_PROTO_UDP = 17
ROCEV2_UDP_PORT = 4791        # IBTA Annex A17 (RoCEv2), IANA-assigned
IPV4_FLAG_DF = 0b010          # the 3-bit IPv4 flags field: reserved, DF, MF
IPV4_FLAG_MF = 0b001
IP_VERSION_6 = 6              # IPv6 version and GRH IPVer
GRH_NEXT_HEADER_IBA = 0x1B    # GRH NxtHdr: an IBA transport header (BTH) follows
LNH_RAW = 0                   # LRH LNH: raw packet, no IBA transport
LNH_IP_NON_IBA = 1            # LRH LNH: IP packet (IPv6 / raw IP over IB link)
LNH_IBA_LOCAL = 2             # LRH LNH: BTH follows the LRH
LNH_IBA_GLOBAL = 3            # LRH LNH: GRH follows the LRH
LVER_IBA = 0                  # LRH LVer of the current IBA link layer
TVER_IBA = 0                  # BTH TVer of the current IBA transport


def _mask(width: int) -> int:
    return (1 << width) - 1


class Header:
    """A fixed-size header described by ``LAYOUT``: (field, bits) pairs in wire order, MSB first."""

    LAYOUT: ClassVar[tuple[tuple[str, int], ...]] = ()
    SIZE: ClassVar[int] = 0

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        bits = sum(w for _, w in cls.LAYOUT)
        if bits % 8:
            raise TypeError(f"{cls.__name__}.LAYOUT is {bits} bits, not a whole number of bytes")
        cls.SIZE = bits // 8

    def __post_init__(self):
        for name, width in self.LAYOUT:
            value = getattr(self, name)
            if not isinstance(value, int) or not 0 <= value <= _mask(width):
                raise ValueError(f"{type(self).__name__}.{name} must fit in {width} bits, not {value!r}")

    def pack(self) -> bytes:
        value = 0
        for name, width in self.LAYOUT:
            value = value << width | int(getattr(self, name))
        return value.to_bytes(self.SIZE, "big")

    @classmethod
    def parse(cls, data: bytes):
        """Decode the header at the start of ``data``; return ``(header, rest)``."""
        if len(data) < cls.SIZE:
            raise ValueError(f"{cls.__name__}: need {cls.SIZE} bytes, got {len(data)}")
        value = int.from_bytes(data[:cls.SIZE], "big")
        kw = {}
        for name, width in reversed(cls.LAYOUT):
            kw[name] = value & _mask(width)
            value >>= width
        header = cls(**kw)
        header._check_parsed()
        return header, bytes(data[cls.SIZE:])

    def _check_parsed(self) -> None:
        """Reject a decoded header whose fixed fields make it something else (hook for subclasses)."""


@dataclass
class Ethernet:
    """Ethernet II header, with one optional 802.1Q tag (``vlan_tci`` = PCP(3) DEI(1) VID(12), or None)."""

    dst: int = 0
    src: int = 0
    ethertype: int = ETHERTYPE_IPV4
    vlan_tci: int | None = None

    BASE_SIZE: ClassVar[int] = 14
    VLAN_TAG_SIZE: ClassVar[int] = 4

    def __post_init__(self):
        for name, width in (("dst", 48), ("src", 48), ("ethertype", 16)):
            if not 0 <= getattr(self, name) <= _mask(width):
                raise ValueError(f"Ethernet.{name} must fit in {width} bits")
        if self.vlan_tci is not None and not 0 <= self.vlan_tci <= 0xFFFF:
            raise ValueError("Ethernet.vlan_tci must fit in 16 bits")

    @property
    def size(self) -> int:
        return self.BASE_SIZE + (self.VLAN_TAG_SIZE if self.vlan_tci is not None else 0)

    def pack(self) -> bytes:
        out = self.dst.to_bytes(6, "big") + self.src.to_bytes(6, "big")
        if self.vlan_tci is not None:
            out += ETHERTYPE_VLAN.to_bytes(2, "big") + self.vlan_tci.to_bytes(2, "big")
        return out + self.ethertype.to_bytes(2, "big")

    @classmethod
    def parse(cls, data: bytes):
        if len(data) < cls.BASE_SIZE:
            raise ValueError(f"Ethernet: need {cls.BASE_SIZE} bytes, got {len(data)}")
        dst = int.from_bytes(data[0:6], "big")
        src = int.from_bytes(data[6:12], "big")
        ethertype = int.from_bytes(data[12:14], "big")
        if ethertype != ETHERTYPE_VLAN:
            return cls(dst, src, ethertype), bytes(data[14:])
        if len(data) < cls.BASE_SIZE + cls.VLAN_TAG_SIZE:
            raise ValueError("Ethernet: truncated 802.1Q tag")
        tci = int.from_bytes(data[14:16], "big")
        inner = int.from_bytes(data[16:18], "big")
        if inner == ETHERTYPE_VLAN:
            raise ValueError("Ethernet: stacked 802.1Q tags are not supported")
        return cls(dst, src, inner, tci), bytes(data[18:])


def ipv4_checksum(header: bytes) -> int:
    """RFC 791/1071 header checksum of an IPv4 header, computed with its checksum field taken as zero."""
    if len(header) % 2:
        raise ValueError("IPv4 header length must be even")
    data = bytes(header[:10]) + b"\0\0" + bytes(header[12:])
    total = sum(int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


@dataclass
class IPv4(Header):
    """IPv4 header without options (IHL 5, 20 bytes). ``flags`` is reserved/DF/MF."""

    version: int = 4
    ihl: int = 5
    tos: int = 0
    total_length: int = 0
    ident: int = 0
    flags: int = IPV4_FLAG_DF
    frag_offset: int = 0
    ttl: int = 64
    protocol: int = IP_PROTO_UDP
    checksum: int = 0
    src: int = 0
    dst: int = 0

    LAYOUT: ClassVar = (("version", 4), ("ihl", 4), ("tos", 8), ("total_length", 16), ("ident", 16),
                        ("flags", 3), ("frag_offset", 13), ("ttl", 8), ("protocol", 8), ("checksum", 16),
                        ("src", 32), ("dst", 32))

    def _check_parsed(self):
        if self.version != 4:
            raise ValueError(f"IPv4: version is {self.version}, not 4")
        if self.ihl != 5:
            raise ValueError(f"IPv4: IHL {self.ihl} (options) is not supported")

    def with_checksum(self) -> "IPv4":
        """A copy with the header checksum filled in."""
        return replace(self, checksum=ipv4_checksum(self.pack()))

    def checksum_ok(self) -> bool:
        return ipv4_checksum(self.pack()) == self.checksum


@dataclass
class IPv6(Header):
    """IPv6 fixed header (40 bytes)."""

    version: int = IP_VERSION_6
    traffic_class: int = 0
    flow_label: int = 0
    payload_length: int = 0
    next_header: int = IP_PROTO_UDP
    hop_limit: int = 64
    src: int = 0
    dst: int = 0

    LAYOUT: ClassVar = (("version", 4), ("traffic_class", 8), ("flow_label", 20), ("payload_length", 16),
                        ("next_header", 8), ("hop_limit", 8), ("src", 128), ("dst", 128))

    def _check_parsed(self):
        if self.version != IP_VERSION_6:
            raise ValueError(f"IPv6: version is {self.version}, not 6")


@dataclass
class UDP(Header):
    """UDP header. RoCEv2 sends checksum 0 (none) and destination port 4791."""

    sport: int = 0
    dport: int = ROCEV2_UDP_PORT
    length: int = 0
    checksum: int = 0

    LAYOUT: ClassVar = (("sport", 16), ("dport", 16), ("length", 16), ("checksum", 16))


@dataclass
class LRH(Header):
    """IB Local Route Header (8 bytes). ``pkt_len`` counts 4-byte words from the LRH through the ICRC."""

    vl: int = 0
    lver: int = LVER_IBA
    sl: int = 0
    resv2: int = 0
    lnh: int = LNH_IBA_LOCAL
    dlid: int = 0
    resv5: int = 0
    pkt_len: int = 0
    slid: int = 0

    LAYOUT: ClassVar = (("vl", 4), ("lver", 4), ("sl", 4), ("resv2", 2), ("lnh", 2), ("dlid", 16),
                        ("resv5", 5), ("pkt_len", 11), ("slid", 16))


@dataclass
class GRH(Header):
    """IB Global Route Header (40 bytes, the IPv6 layout). ``pay_len`` counts bytes after the GRH through the ICRC."""

    ipver: int = IP_VERSION_6
    tclass: int = 0
    flow_label: int = 0
    pay_len: int = 0
    next_header: int = GRH_NEXT_HEADER_IBA
    hop_limit: int = 64
    sgid: int = 0
    dgid: int = 0

    LAYOUT: ClassVar = (("ipver", 4), ("tclass", 8), ("flow_label", 20), ("pay_len", 16),
                        ("next_header", 8), ("hop_limit", 8), ("sgid", 128), ("dgid", 128))

    def _check_parsed(self):
        if self.ipver != IP_VERSION_6:
            raise ValueError(f"GRH: IPVer is {self.ipver}, not 6")


@dataclass
class BTH(Header):
    """IB Base Transport Header (12 bytes). Byte 4 is FECN, BECN and 6 reserved bits (IBA "resv8a")."""

    opcode: int = 0
    se: int = 0
    migreq: int = 0
    pad_count: int = 0
    tver: int = TVER_IBA
    pkey: int = 0xFFFF
    fecn: int = 0
    becn: int = 0
    resv6: int = 0
    dest_qp: int = 0
    ackreq: int = 0
    resv7: int = 0
    psn: int = 0

    LAYOUT: ClassVar = (("opcode", 8), ("se", 1), ("migreq", 1), ("pad_count", 2), ("tver", 4), ("pkey", 16),
                        ("fecn", 1), ("becn", 1), ("resv6", 6), ("dest_qp", 24),
                        ("ackreq", 1), ("resv7", 7), ("psn", 24))

    RESV8A_OFFSET: ClassVar[int] = 4  # the byte the ICRC masks to ones


@dataclass
class RETH(Header):
    """RDMA Extended Transport Header (16 bytes): virtual address, R_Key, DMA length."""

    va: int = 0
    rkey: int = 0
    dma_len: int = 0

    LAYOUT: ClassVar = (("va", 64), ("rkey", 32), ("dma_len", 32))


@dataclass
class AETH(Header):
    """ACK Extended Transport Header (4 bytes): syndrome and MSN."""

    syndrome: int = 0
    msn: int = 0

    LAYOUT: ClassVar = (("syndrome", 8), ("msn", 24))


@dataclass
class DETH(Header):
    """Datagram Extended Transport Header (8 bytes): Q_Key and source QP."""

    qkey: int = 0
    resv8: int = 0
    src_qp: int = 0

    LAYOUT: ClassVar = (("qkey", 32), ("resv8", 8), ("src_qp", 24))


@dataclass
class ImmDt(Header):
    """Immediate Data (4 bytes)."""

    imm: int = 0

    LAYOUT: ClassVar = (("imm", 32),)


@dataclass
class IETH(Header):
    """Invalidate Extended Transport Header (4 bytes): the R_Key to invalidate."""

    rkey: int = 0

    LAYOUT: ClassVar = (("rkey", 32),)


@dataclass
class AtomicETH(Header):
    """Atomic Extended Transport Header (28 bytes): VA, R_Key, swap (or add) data, compare data."""

    va: int = 0
    rkey: int = 0
    swap_add: int = 0
    compare: int = 0

    LAYOUT: ClassVar = (("va", 64), ("rkey", 32), ("swap_add", 64), ("compare", 64))


@dataclass
class AtomicAckETH(Header):
    """Atomic Acknowledge Extended Transport Header (8 bytes): the original remote data."""

    orig: int = 0

    LAYOUT: ClassVar = (("orig", 64),)


for _cls in (IPv4, IPv6, UDP, LRH, GRH, BTH, RETH, AETH, DETH, ImmDt, IETH, AtomicETH, AtomicAckETH):
    assert [f.name for f in dc_fields(_cls)] == [n for n, _ in _cls.LAYOUT], _cls
del _cls
