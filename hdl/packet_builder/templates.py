"""Header templates, descriptor-field bit maps and small logic helpers shared by the builder's blocks.

A *template* is one fixed header layout before the extended headers: a (link mode, VLAN tag) pair.
Header bits are described per bit as an ``int`` (a constant 0 / 1) or a ``(key, signal bit)``
entry (see :func:`_field_bits`), so the header vector can be assembled bit by bit as an AND-OR
over the sources that land on each bit (:mod:`.header`, and the extended headers in :mod:`.front`).
"""

from __future__ import annotations

from amaranth import Cat, Const, Mux, Value

from ...model.descriptor import LinkMode
from ...model import headers as hd
from ...model.opcodes import OPCODE_INFO
from ..descriptor import DESC_WIDTH

__all__ = ["HEADER_MAX", "DESC_AXIS_WIDTH", "LATE_FIELDS", "EARLY_BITS"]

ICRC_LEN = 4
VCRC_LEN = 2
_LEN_BITS = 13  # byte counts inside one frame (< 8192)
_COPIES = 4     # copies of k_valid, the header multiplexer's select between k and s5
_GRP_COPIES = 8 # copies of each template-group select

#: The descriptor fields only s5 (the header vector) reads: with ``late=True`` they come from the
#: ``desc_late`` port as s5 loads, not through s1..s4.
LATE_FIELDS = ("dst_mac", "src_mac", "vlan_tci", "vl", "sl", "dlid", "slid", "traffic_class", "ip_id", "hop_limit",
               "src_gid", "dst_gid", "flow_label", "udp_sport", "opcode", "se", "migreq", "pkey", "fecn", "becn",
               "dest_qp", "ackreq", "psn")
#: The low bits of late fields that s1 / s2 still read from ``desc`` (the opcode ROM, the IPv4
#: checksum's words): with ``late=True``, ``desc`` needs only these bits of the late fields.
EARLY_BITS = {"opcode": 8, "traffic_class": 8, "ip_id": 16, "hop_limit": 8, "src_gid": 32, "dst_gid": 32}

#: ``s_desc`` tdata width of :class:`PacketBuilderAxis`: the descriptor rounded up to whole bytes.
DESC_AXIS_WIDTH = -(-DESC_WIDTH // 8) * 8


# --- header templates ---------------------------------------------------------------------------------

class _Template:
    """One fixed header layout before the extended headers: a (link mode, VLAN tag) pair."""

    def __init__(self, index, mode, vlan):
        self.index, self.mode, self.vlan = index, mode, vlan
        self.ib = mode in (LinkMode.IB_LOCAL, LinkMode.IB_GLOBAL)
        self.grh = mode in (LinkMode.ROCEV1, LinkMode.IB_GLOBAL)
        eth = hd.Ethernet.BASE_SIZE + (hd.Ethernet.VLAN_TAG_SIZE if vlan else 0)
        if mode is LinkMode.ROCEV2_IPV4:
            net = [eth, hd.IPv4.SIZE, hd.UDP.SIZE]
        elif mode is LinkMode.ROCEV2_IPV6:
            net = [eth, hd.IPv6.SIZE, hd.UDP.SIZE]
        elif mode is LinkMode.ROCEV1:
            net = [eth, hd.GRH.SIZE]
        elif mode is LinkMode.IB_LOCAL:
            net = [hd.LRH.SIZE]
        else:
            net = [hd.LRH.SIZE, hd.GRH.SIZE]
        self.eth_len = 0 if self.ib else eth
        self.bth_off = sum(net)
        self.base_len = self.bth_off + hd.BTH.SIZE
        # ICRC coverage: RoCE modes from 8 bytes before the network header (those 8 bytes stand
        # for the pseudo-LRH and are forced to ones); IB modes from the LRH.
        self.crc_start = 0 if self.ib else eth - len(b"\xff" * 8)
        self.crc_len = ICRC_LEN + (VCRC_LEN if self.ib else 0)
        self.or_mask = self._or_mask()

    def _or_mask(self):
        """Bytes forced to ones in the ICRC view (icrc_view in model/frames.py), as an integer."""
        mask = bytearray(self.base_len)

        def ones(off, n=1, value=0xFF):
            for k in range(off, off + n):
                mask[k] |= value

        def ipv6_like(off):
            ones(off, 1, 0x0F)     # traffic class high nibble (low nibble of byte 0)
            ones(off + 1, 3)       # traffic class low nibble and flow label
            ones(off + 7)          # hop limit

        if not self.ib:
            ones(self.crc_start, 8)                       # pseudo-LRH
            off = self.eth_len
            if self.mode is LinkMode.ROCEV2_IPV4:
                ones(off + 1)                             # TOS
                ones(off + 8)                             # TTL
                ones(off + 10, 2)                         # header checksum
                ones(off + hd.IPv4.SIZE + 6, 2)           # UDP checksum
            elif self.mode is LinkMode.ROCEV2_IPV6:
                ipv6_like(off)
                ones(off + hd.IPv6.SIZE + 6, 2)           # UDP checksum
            else:
                ipv6_like(off)                            # GRH
        elif self.mode is LinkMode.IB_LOCAL:
            ones(0, 1, 0xF0)                              # VL
        else:
            ones(0, hd.LRH.SIZE)                          # whole LRH
            ipv6_like(hd.LRH.SIZE)
        ones(self.bth_off + hd.BTH.RESV8A_OFFSET)         # FECN, BECN, resv6
        return int.from_bytes(mask, "little")


_TEMPLATES = []
for _mode in (LinkMode.ROCEV2_IPV4, LinkMode.ROCEV2_IPV6, LinkMode.ROCEV1):
    for _vlan in (0, 1):
        _TEMPLATES.append(_Template(len(_TEMPLATES), _mode, _vlan))
for _mode in (LinkMode.IB_LOCAL, LinkMode.IB_GLOBAL):
    _TEMPLATES.append(_Template(len(_TEMPLATES), _mode, 0))
del _mode, _vlan

# Extended header combinations (wire order) that the opcode table uses; index 0 is "none".
_EXT_COMBOS = [()]
for _info in OPCODE_INFO.values():
    if _info.ext_headers not in _EXT_COMBOS:
        _EXT_COMBOS.append(_info.ext_headers)
del _info
_EXT_MAX = max(sum(h.SIZE for h in c) for c in _EXT_COMBOS)

#: Longest header (all bytes before the payload), in bytes.
HEADER_MAX = max(t.base_len for t in _TEMPLATES) + _EXT_MAX


def _layout_fields(cls, values):
    """``(value, width)`` per field of a model header class's LAYOUT; reserved fields not given are 0."""
    fields = []
    for name, width in cls.LAYOUT:
        if name not in values:
            assert name.startswith("resv"), (cls, name)
        fields.append((values.get(name, 0), width))
    assert set(values) <= {n for n, _ in cls.LAYOUT}, (cls, values)
    return fields


class _Src:
    """A named multi-bit source of header bits (a descriptor field or a derived value): bit ``i``
    of it is the same signal, wherever and in whichever template it lands."""

    def __init__(self, name, value):
        self.name, self.value = name, Value.cast(value)


def _field_bits(value, width):
    """``width`` header bits (LSB first) of an ``int`` or a :class:`_Src`: ints 0/1 or ``(key, bit)``."""
    if isinstance(value, int):
        return [(value >> i) & 1 for i in range(width)]
    n = min(width, len(value.value))
    return [((value.name, i), value.value[i]) for i in range(n)] + [0] * (width - n)


def _wire_bits(fields):
    """As :func:`_wire`, but a list of per-bit entries (see :func:`_field_bits`)."""
    total = sum(w for _, w in fields)
    assert total % 8 == 0, fields
    bits = [b for v, w in reversed(fields) for b in _field_bits(v, w)]
    n = total // 8
    return [bits[8 * (n - 1 - k) + b] for k in range(n) for b in range(8)]


def _header_bits(cls, **values):
    """As :func:`_header`, but a list of per-bit entries."""
    return _wire_bits(_layout_fields(cls, values))


def _ext_header_bits(cls, d):
    """Per-bit entries (see :func:`_field_bits`) of an extended header from descriptor ``d``."""
    def f(name):
        return _Src(name, getattr(d, name))
    if cls is hd.RETH:
        return _header_bits(cls, va=f("reth_va"), rkey=f("reth_rkey"), dma_len=f("reth_dma_len"))
    if cls is hd.AETH:
        return _header_bits(cls, syndrome=f("aeth_syndrome"), msn=f("aeth_msn"))
    if cls is hd.DETH:
        return _header_bits(cls, qkey=f("deth_qkey"), src_qp=f("deth_src_qp"))
    if cls is hd.ImmDt:
        return _header_bits(cls, imm=f("imm"))
    if cls is hd.IETH:
        return _header_bits(cls, rkey=f("imm"))
    if cls is hd.AtomicETH:
        return _header_bits(cls, va=f("atomic_va"), rkey=f("atomic_rkey"), swap_add=f("atomic_swap"),
                            compare=f("atomic_compare"))
    if cls is hd.AtomicAckETH:
        return _header_bits(cls, orig=f("atomic_orig"))
    raise AssertionError(cls)


def _by_source(entries):
    """Group per-bit entries (see :func:`_field_bits`) of several options (``(option, entry)``
    pairs): ``{key: (value, options)}`` for the signals that land there, and the options that put a
    constant one there."""
    sources, ones = {}, set()
    for option, e in entries:
        if isinstance(e, int):
            if e:
                ones.add(option)
        else:
            key, value = e
            sources.setdefault(key, (value, set()))[1].add(option)
    return sources, ones


def _or_all(values):
    """OR of ``values``; a 1-bit 0 for none."""
    if not values:
        return Const(0, 1)
    out = values[0]
    for v in values[1:]:
        out = out | v
    return out


def _byte_mask(count, lanes):
    """``lanes``-bit mask of the ``count`` lowest lanes, ``count`` in ``1 .. lanes`` (0 means all)."""
    return Mux(count == 0, Const(-1, lanes), ((Const(1, lanes + 1) << count) - 1)[:lanes])


def _expand(keep, lanes):
    return Cat(*(keep[l].replicate(8) for l in range(lanes)))

