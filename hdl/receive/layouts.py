"""Where things are in a received frame: the eight header layouts, the ICRC's masked bits, big-endian field
extraction and the opcode tables, all derived from the model (:mod:`rnic.model.headers`,
:func:`rnic.model.frames.icrc_view`, :data:`rnic.model.opcodes.OPCODE_INFO`), so the receive path and
the golden model cannot drift apart.

A *layout* is a (link mode, VLAN tag) pair: RoCEv2/IPv4, RoCEv2/IPv6 and RoCEv1 with and without a tag
(indices 0..5, ``2 * mode + vlan``), IB local (6) and IB global (7). Byte ``i`` of a frame is bits
``8i + 7 .. 8i`` of a byte vector (the AXI lane order); header fields are big-endian on the wire.
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth import Cat, Value
from amaranth.lib import data

from ...model import headers as hd
from ...model.descriptor import LinkMode
from ...model.frames import icrc_view
from ...model.opcodes import OPCODE_INFO
from ...model.receive import DropReason
from ..qp_cache.layouts import hw_enum

__all__ = ["HEADER_BYTES", "HEAD_BYTES", "MASK_BYTES", "Layout", "LAYOUTS", "Reason", "be_field", "field_pos",
           "byte_of", "ext_offsets", "opcode_props", "LEN_BITS", "ETH_MIN_FRAME", "result_layout"]

#: Bytes of each frame the decoder sees: the longest header run (Ethernet + tag + IPv6 + UDP + BTH + the
#: longest extended headers, 106 bytes) rounded up.
HEADER_BYTES = 128
#: Bytes that decide a frame's layout and the ends of its CRC regions (up to the IPv6 / GRH payload length
#: behind a VLAN tag): a beat waits for them before it reaches the CRC engines.
HEAD_BYTES = 24
#: Every ICRC-masked byte lies in the first MASK_BYTES bytes of a frame (BTH byte 4 behind IPv6 + tag).
MASK_BYTES = 72
LEN_BITS = 16                       # frame lengths and positions in bytes
ETH_MIN_FRAME = 60

Reason = hw_enum(DropReason, shape=4)


def result_layout():
    """One frame's verdict: ``ok`` (passed every check), else ``reason``; ``mode``; the descriptor (meaningful
    when ``ok``, and for a CNP); where the payload starts in the frame and its length."""
    from ..descriptor import DescriptorLayout
    return data.StructLayout({"ok": 1, "reason": Reason, "mode": 3, "desc": DescriptorLayout,
                              "payload_start": 8, "length": LEN_BITS})


def field_pos(cls, name: str) -> tuple[int, int]:
    """``(bit offset from the header's first bit on the wire, width)`` of ``cls.LAYOUT``'s field ``name``."""
    off = 0
    for n, w in cls.LAYOUT:
        if n == name:
            return off, w
        off += w
    raise KeyError(f"{cls.__name__} has no field {name!r}")


def byte_of(vec: Value, i: int) -> Value:
    """Byte ``i`` of a byte vector."""
    return vec[8 * i:8 * i + 8]


def be_field(vec: Value, base: int, cls, name: str) -> Value:
    """Field ``name`` of the ``cls`` header that starts at byte ``base`` of byte vector ``vec``."""
    off, width = field_pos(cls, name)
    first, last = base + off // 8, base + (off + width - 1) // 8
    word = Cat(*(byte_of(vec, b) for b in range(last, first - 1, -1)))
    shift = 7 - (off + width - 1) % 8
    return word[shift:shift + width]


@dataclass(frozen=True)
class Layout:
    index: int
    mode: LinkMode
    vlan: bool

    @property
    def l2(self) -> int:
        """Bytes of the Ethernet header (0 on IB)."""
        return 0 if not self.mode.is_ethernet else hd.Ethernet.BASE_SIZE + hd.Ethernet.VLAN_TAG_SIZE * self.vlan

    @property
    def net(self) -> int:
        """Where the IP header / GRH starts (the LRH ends at 8 on IB)."""
        return self.l2 if self.mode.is_ethernet else hd.LRH.SIZE

    @property
    def bth(self) -> int:
        extra = {LinkMode.ROCEV2_IPV4: hd.IPv4.SIZE + hd.UDP.SIZE, LinkMode.ROCEV2_IPV6: hd.IPv6.SIZE + hd.UDP.SIZE,
                 LinkMode.ROCEV1: hd.GRH.SIZE, LinkMode.IB_LOCAL: 0, LinkMode.IB_GLOBAL: hd.GRH.SIZE}[self.mode]
        return self.net + extra

    @property
    def crc_start(self) -> int:
        """The first byte the ICRC covers: the 8 bytes before the IP header (standing in as ones for the
        LRH a RoCE frame does not have), or the LRH."""
        return self.l2 - len(b"\xff" * 8) if self.mode.is_ethernet else 0

    @property
    def need(self) -> int:
        """The shortest frame that holds this layout's headers through BTH, ICRC (and VCRC)."""
        return self.bth + hd.BTH.SIZE + 4 + (0 if self.mode.is_ethernet else 2)

    def ormask(self) -> bytes:
        """Per frame byte (the first :data:`MASK_BYTES`), the bits the ICRC sets to one (bytes before
        ``crc_start`` are zero: the CRC does not see them)."""
        frame = bytearray(MASK_BYTES + 64)
        if self.mode.is_ethernet:
            ethertype = {LinkMode.ROCEV2_IPV4: hd.ETHERTYPE_IPV4, LinkMode.ROCEV2_IPV6: hd.ETHERTYPE_IPV6,
                         LinkMode.ROCEV1: hd.ETHERTYPE_ROCEV1}[self.mode]
            if self.vlan:
                frame[12:14] = hd.ETHERTYPE_VLAN.to_bytes(2, "big")
            frame[self.l2 - 2:self.l2] = ethertype.to_bytes(2, "big")
        view = icrc_view(self.mode, bytes(frame))
        shift = self.crc_start          # view[i] covers frame byte crc_start + i
        out = bytearray(MASK_BYTES)
        for i in range(self.crc_start, MASK_BYTES):
            out[i] = view[i - shift] ^ frame[i] if i >= self.l2 or not self.mode.is_ethernet else 0xFF
        assert not any(view[MASK_BYTES - shift:]), self
        return bytes(out)


LAYOUTS = tuple([Layout(2 * int(m) + v, m, bool(v)) for m in (LinkMode.ROCEV2_IPV4, LinkMode.ROCEV2_IPV6,
                                                                  LinkMode.ROCEV1) for v in (0, 1)]
                + [Layout(6, LinkMode.IB_LOCAL, False), Layout(7, LinkMode.IB_GLOBAL, False)])
assert [la.index for la in LAYOUTS] == list(range(8))


def ext_offsets(field: str) -> dict[int, list[int]]:
    """For a descriptor field carried by an extended header: byte offset after the BTH -> the opcodes
    that carry it there, as ``(header class, offset)`` pairs collapse (IETH and ImmDt both give ``imm``)."""
    from ...model.frames import _EXT_FIELDS
    out: dict[int, list[int]] = {}
    for op, info in OPCODE_INFO.items():
        off = 0
        for cls in info.ext_headers:
            if field in _EXT_FIELDS[cls]:
                out.setdefault(off, []).append(int(op))
            off += cls.SIZE
    return out


def opcode_props(m, opcode: Value, domain: str = "comb"):
    """Signals ``(known, ext_len, payload_ok, fixed, fixed_len)`` of ``opcode`` (a Switch over the opcode
    table): whether the opcode is known, its extended-header bytes, whether it may carry a payload, and
    whether it must carry exactly ``fixed_len`` bytes."""
    from amaranth import Signal
    known, ext_len, payload_ok = Signal(name="op_known"), Signal(6, name="op_ext_len"), Signal(name="op_payload")
    fixed, fixed_len = Signal(name="op_fixed"), Signal(13, name="op_fixed_len")
    with m.Switch(opcode):
        for op, info in OPCODE_INFO.items():
            with m.Case(int(op)):
                m.d[domain] += [known.eq(1), ext_len.eq(info.ext_len), payload_ok.eq(info.has_payload)]
                if info.fixed_payload_len is not None:
                    m.d[domain] += [fixed.eq(1), fixed_len.eq(info.fixed_payload_len)]
    return known, ext_len, payload_ok, fixed, fixed_len
