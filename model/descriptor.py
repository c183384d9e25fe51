"""The per-packet header descriptor: everything the packet builder needs besides the payload bytes.

:data:`DESC_FIELDS` is the single definition. The model's :class:`PacketDesc` dataclass, the RTL's
``data.StructLayout`` (``rnic.hdl`` builds it from the same list) and the testbenches' packing into
an integer (:meth:`PacketDesc.to_int`, first field at bit 0 exactly as ``data.Struct`` lays it out)
all come from it, so they cannot drift apart.

Derived values are *not* fields: length fields, checksums, pad count, LRH LNH, next-header values,
which extended headers follow the BTH (a function of the opcode), ICRC and VCRC.

Addresses: ``src_gid``/``dst_gid`` are 128-bit GIDs in network order as integers. RoCEv2 over IPv6
uses them as the IPv6 addresses, RoCEv1 and IB global as GRH GIDs; RoCEv2 over IPv4 uses their low
32 bits (the IPv4-mapped GID ``::ffff:a.b.c.d`` that RoCE GID tables hold). ``traffic_class``
and ``hop_limit`` are the IPv4 TOS and TTL in IPv4 mode.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, fields as dc_fields

from .record import FieldRecord

__all__ = ["LinkMode", "DESC_FIELDS", "DESC_WIDTH", "PacketDesc", "MAX_PAYLOAD"]

MAX_PAYLOAD = 4096  # the largest IB path MTU


class LinkMode(enum.IntEnum):
    ROCEV2_IPV4 = 0
    ROCEV2_IPV6 = 1
    ROCEV1 = 2
    IB_LOCAL = 3
    IB_GLOBAL = 4

    @property
    def slug(self) -> str:
        return {0: "rocev2-ipv4", 1: "rocev2-ipv6", 2: "rocev1", 3: "ib-local", 4: "ib-global"}[self.value]

    @property
    def is_ethernet(self) -> bool:
        return self in (LinkMode.ROCEV2_IPV4, LinkMode.ROCEV2_IPV6, LinkMode.ROCEV1)


# (name, width in bits). Order is the RTL struct order: first field at bit 0.
DESC_FIELDS: tuple[tuple[str, int], ...] = (
    ("mode", 3),            # LinkMode; values 5..7 are invalid (the builder aborts the frame)
    ("payload_len", 13),    # payload bytes, 0..MAX_PAYLOAD, before padding
    # Ethernet (RoCE modes)
    ("dst_mac", 48), ("src_mac", 48),
    ("vlan_present", 1), ("vlan_tci", 16),  # 802.1Q tag: PCP(3) DEI(1) VID(12)
    # IPv4 / IPv6 / GRH
    ("src_gid", 128), ("dst_gid", 128),
    ("traffic_class", 8),   # IPv4 TOS, IPv6 traffic class, GRH TClass
    ("flow_label", 20),     # IPv6 / GRH flow label
    ("hop_limit", 8),       # IPv4 TTL, IPv6 hop limit, GRH HopLmt
    ("ip_id", 16),          # IPv4 identification (DF is always set, as Linux rxe does)
    ("udp_sport", 16),      # RoCEv2 UDP source port (entropy); destination is always 4791
    # LRH (native IB)
    ("vl", 4), ("sl", 4), ("dlid", 16), ("slid", 16),
    # BTH
    ("opcode", 8), ("se", 1), ("migreq", 1), ("pkey", 16), ("fecn", 1), ("becn", 1),
    ("dest_qp", 24), ("ackreq", 1), ("psn", 24),
    # Extended headers; which ones are emitted follows from the opcode
    ("reth_va", 64), ("reth_rkey", 32), ("reth_dma_len", 32),
    ("imm", 32),            # ImmDt, or the R_Key of IETH (SEND with invalidate)
    ("deth_qkey", 32), ("deth_src_qp", 24),
    ("aeth_syndrome", 8), ("aeth_msn", 24),
    ("atomic_va", 64), ("atomic_rkey", 32), ("atomic_swap", 64), ("atomic_compare", 64),
    ("atomic_orig", 64),    # AtomicAckETH original remote data
)

DESC_WIDTH = sum(w for _, w in DESC_FIELDS)
_DESC_OFFSETS = tuple((name, sum(w for _, w in DESC_FIELDS[:i]), width)
                      for i, (name, width) in enumerate(DESC_FIELDS))


@dataclass
class PacketDesc(FieldRecord):
    """One packet's header descriptor. Defaults give a valid RoCEv2/IPv4 RC SEND ONLY of 0 bytes.

    ``to_int()``/``from_int()`` use the RTL struct layout (first field at bit 0)."""

    FIELDS = _DESC_OFFSETS
    BYTES = (DESC_WIDTH + 7) // 8

    mode: int = LinkMode.ROCEV2_IPV4
    payload_len: int = 0
    dst_mac: int = 0x02_00_00_00_00_02
    src_mac: int = 0x02_00_00_00_00_01
    vlan_present: int = 0
    vlan_tci: int = 0
    src_gid: int = 0xFFFF_C0A8_0001
    dst_gid: int = 0xFFFF_C0A8_0002
    traffic_class: int = 0
    flow_label: int = 0
    hop_limit: int = 64
    ip_id: int = 0
    udp_sport: int = 0xC000
    vl: int = 0
    sl: int = 0
    dlid: int = 2
    slid: int = 1
    opcode: int = 0x04
    se: int = 0
    migreq: int = 0
    pkey: int = 0xFFFF
    fecn: int = 0
    becn: int = 0
    dest_qp: int = 1
    ackreq: int = 0
    psn: int = 0
    reth_va: int = 0
    reth_rkey: int = 0
    reth_dma_len: int = 0
    imm: int = 0
    deth_qkey: int = 0
    deth_src_qp: int = 0
    aeth_syndrome: int = 0
    aeth_msn: int = 0
    atomic_va: int = 0
    atomic_rkey: int = 0
    atomic_swap: int = 0
    atomic_compare: int = 0
    atomic_orig: int = 0


assert [f.name for f in dc_fields(PacketDesc)] == [n for n, _ in DESC_FIELDS]
