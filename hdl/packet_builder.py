"""Packet builder: header descriptor + payload stream in, complete RoCE / InfiniBand frames out.

:class:`PacketBuilder` turns one :data:`~rnic.hdl.descriptor.DescriptorLayout` descriptor and the
payload bytes of one packet into one wire frame for any of the five link modes, one output beat per
clock. :class:`PacketBuilderAxis` is the same block behind AXI4-Stream ports (the cocotb, benchmark
and synthesis boundary). docs/packet-builder.md describes the block, its timing and abort rules.

Pipeline (all stages move one descriptor or one beat per clock)::

    desc -> s1 (register; opcode ROM: one-hot extended header selection and length)
         -> s2 (decode, header lengths, payload rounded to 4, IPv4 word pairs)
         -> s3 (extended headers, transport and frame lengths, IPv4 partial sums)
         -> s4 (IPv4 sum with total length, frame parameters: beat counts, lane masks; template
                group selects)
         -> s5 (IPv4 checksum, header byte vector) -> k (skid register)
         -> generator (header beats, payload beats as taken, pad, CRC placeholder bytes)
         -> ga (the beat as taken) -> bt (beat register: payload funnel-shifted by header length
            mod W/8 and ORed with the header part; feeds both CRC engines)
         -> delay line (CRC latency + 2) -> tl (ICRC / VCRC placed) -> output FIFO -> frame

s1..s5 stall on registered conditions only (the skid register k takes s5 whenever the generator
does not), so the payload handshake never reaches the wide stage registers; each stage's enable is
itself a flip-flop, computed one clock ahead from the next-state valids. The generator runs on
credits: it only emits a beat when the output FIFO is sure to have room for it, so the delay line
and the CRC engines never stall and each beat meets its CRC value at a fixed distance.

Byte order: a header byte vector holds wire byte ``k`` at bits ``8k .. 8k+7`` (the stream's lane
order); multi-byte header fields are big-endian on the wire, CRCs least-significant byte first.
"""

from __future__ import annotations

import itertools

from amaranth import Cat, Const, Module, Mux, Signal, Value
from amaranth.hdl import Assert
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from rnic.model.crc import ICRC, VCRC
from rnic.model.descriptor import MAX_PAYLOAD, LinkMode
from rnic.model import headers as hd
from rnic.model.opcodes import OPCODE_INFO
from rnic.hdl.bus import AXIStreamSignature, PacketStream, axis_to_stream, stream_to_axis
from rnic.hdl.crc import CrcStream, xor_tree
from rnic.hdl.fifo import CreditFIFO, check_credit
from rnic.hdl.descriptor import DESC_WIDTH, DescriptorLayout, ErrorFlags
from rnic.hdl.prim import BLOCK_RAM, lut4

__all__ = ["PacketBuilder", "PacketBuilderAxis", "HEADER_MAX", "DESC_AXIS_WIDTH", "LATE_FIELDS", "EARLY_BITS"]

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


def _oc_parts(m, a, b, name):
    """The two halves of a 16-bit ones'-complement add of ``a`` and ``b``: ``a + b`` (17 bits) and
    ``a + b + 1`` (16 bits), on two carry chains side by side; :func:`_oc_pick` chooses between
    them, in the same clock or (registered in between) the next."""
    plain = Signal(17, name=f"{name}_c0")
    plus1 = Signal(18, name=f"{name}_c1")
    m.d.comb += [plain.eq(a + b), plus1.eq(Cat(Const(1, 1), a) + Cat(Const(1, 1), b))]
    return plain, plus1[1:17]


def _oc_pick(plain, plus1):
    """The end-around carry: ``a + b + 1`` when ``a + b`` carries out. The result is 0 only if both
    operands are, as with the usual fold."""
    return Mux(plain[16], plus1, plain[:16])


def _oc_add(m, a, b, name):
    """16-bit ones'-complement sum of ``a`` and ``b`` (end-around carry), combinational."""
    return _oc_pick(*_oc_parts(m, a, b, name))


def _oc_sum3_parts(m, a, b, c, name):
    """:func:`_oc_parts` of a three-term ones'-complement sum: one carry-save layer first (the
    carry vector rotated left, as 2**16 is 1 modulo 2**16 - 1)."""
    carry = (a & b) | (a & c) | (b & c)
    return _oc_parts(m, a ^ b ^ c, Cat(carry[15], carry[:15]), name)


def _oc_sum3(m, a, b, c, name):
    """16-bit ones'-complement sum of three terms, combinational."""
    return _oc_pick(*_oc_sum3_parts(m, a, b, c, name))


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


def _crc_extend(spec, nbytes):
    """Affine map ``(crc value, nbytes of data) -> crc value after those bytes``: (columns, constant)."""
    def unfinish(v):
        v ^= spec.xor_output
        if spec.reflect_output:
            v = int(f"{v:0{spec.width}b}"[::-1], 2)
        return v

    def g(v, payload):
        return spec.finish(spec.update(unfinish(v), payload.to_bytes(nbytes, "little")))

    const = g(0, 0)
    cols = [g(1 << j, 0) ^ const for j in range(spec.width)]
    cols += [g(0, 1 << j) ^ const for j in range(8 * nbytes)]
    return cols, const


class PacketBuilder(wiring.Component):
    """Frame builder for RoCEv2 (IPv4, IPv6), RoCEv1 and native IB (local, global).

    Parameters
    ----------
    width : int
        Datapath width ``W`` in bits: 64, 128, 256 or 512.

    Members
    -------
    desc : ``In(stream.Signature(DescriptorLayout))``
        One descriptor per frame; transfer on ``valid & ready``. Descriptors are taken in order and
        pipelined (up to six are held: s1..s5 and the skid register), one per clock;
        ``ready`` is a flip-flop.
    payload : ``In(PacketStream(W))``
        Payload bytes of the descriptors with ``payload_len > 0``, in descriptor order, each packet
        ending with ``last``. Beats are full (``keep`` all ones) except the last, whose ``keep`` is
        a run from lane 0. A descriptor with ``payload_len == 0`` takes no payload beat. ``ready``
        does not depend on ``valid``.
    frame : ``Out(PacketStream(W, user_width=1))``
        Frames, the first byte of each in lane 0; ``keep`` is all ones except on the ``last`` beat.
        ``user`` is 1 on the last beat of an aborted frame. ``valid`` never waits for ``ready``;
        the payload holds until the transfer (it comes straight from a FIFO).
    error : ``Out(ErrorFlags)``
        Sticky error causes; bit set when a frame is aborted for that cause.
    error_clear : ``In(ErrorFlags)``
        Write-1-to-clear for ``error``, one bit per cause, acting on the next clock edge (a cause
        raised in the same cycle wins).
    desc_late : ``In(stream.Signature(DescriptorLayout))``, with ``late=True`` only
        The :data:`LATE_FIELDS` of the same descriptors, in the same order, taken (``ready``, one
        LUT of flip-flops) as the descriptor enters s5; ``valid`` must be 1 then (``Assert``ed), so
        the sender writes both streams together and ``desc`` then needs only :data:`EARLY_BITS` of
        the late fields. Those fields then skip the four stage registers s1..s4 (``Rnic`` keeps
        them in a block-RAM queue of their own).

    Latency from a descriptor transfer to the first beat of its frame, empty pipeline, no payload
    wait: 22 clocks at W=64, 25 at W=512 (measured by the testbench); see docs/packet-builder.md.
    """

    def __init__(self, width, *, late=False):
        if width not in (64, 128, 256, 512):
            raise ValueError(f"width must be one of 64, 128, 256, 512, not {width!r}")
        self._width = width
        self._late = late
        self._icrc = CrcStream(ICRC, width, queue=False)    # the builder takes each result as it comes
        self._vcrc = CrcStream(VCRC, width, queue=False)
        self._crc_latency = self._icrc.latency
        self._delay = self._crc_latency + 2
        # Output FIFO capacity, in beats: the generator's credits (beats pushed, not yet popped),
        # more than the push-to-pop round trip, so credits never limit a ready sink. A pop reaches
        # the in-flight count a clock late (`pop_d`: the sink's ready then meets no adder), and
        # the credit a clock after that; so three beats more than that round trip: a sink that
        # stalls and resumes finds the next beats there, no gap inside a frame.
        self._depth = self._delay + 10
        super().__init__({
            "desc": In(stream.Signature(DescriptorLayout)),
            "payload": In(PacketStream(width)),
            "frame": Out(PacketStream(width, 1)),
            "error": Out(ErrorFlags),
            "error_clear": In(ErrorFlags),
            **({"desc_late": In(stream.Signature(DescriptorLayout))} if late else {}),
        })

    @property
    def width(self):
        return self._width

    def elaborate(self, platform):
        m = Module()
        W = self._width
        B = W // 8
        lb = B.bit_length() - 1
        HB = -(-HEADER_MAX // B) * B           # header vector bytes, whole beats
        ones = Const(-1, B)
        nt = len(_TEMPLATES)

        # ---- pipeline handshakes: a stage loads whenever it, or any stage after it, is empty, or
        # the skid register k after s5 is empty. Every enable is a function of registers only:
        # the generator's load decision (which depends on the payload handshake) never reaches
        # the wide stage registers.
        # The enables themselves are registers, computed one clock ahead from the next-state
        # valids, so each drives its stage's ~1 000 flip-flop enables straight from a flip-flop.
        valid = [Signal(name=f"s{i}_valid") for i in range(1, 6)]
        s1_valid, s2_valid, s3_valid, s4_valid, s5_valid = valid
        en = [Signal(name=f"s{i}_en", init=1) for i in range(1, 6)]
        s1_en, s2_en, s3_en, s4_en, s5_en = en
        k_valid = Signal()
        src_valid = Signal()         # k_valid | s5_valid (a frame for the generator), a register
        g_load = Signal()
        next_frame = Signal()        # the generator is ready for a frame
        # Payload packets owed to the drop logic (see the generator) hold new descriptors back
        # while two or more are pending, so the count stays small without stalling the generator.
        drop_stall = Signal()
        desc_in = self.desc.valid & ~drop_stall
        # k_valid, src_valid and the enables are assigned with the generator's registers (below):
        # they depend on its load decision, g_load (k_next = ~g_load & src_valid).
        # The next-state valids use copies of the enables (the enables themselves each drive a
        # stage's ~1 000 flip-flop enables).
        en_ctl = [Signal(name=f"s{i}_en_ctl", init=1) for i in range(1, 6)]
        valid_next = [Mux(e, v_in, v) for e, v_in, v in zip(en_ctl, [desc_in, *valid[:4]], valid)]
        m.d.sync += [v.eq(v_next) for v, v_next in zip(valid, valid_next)]
        m.d.sync += Assert(src_valid == (k_valid | s5_valid), "packet builder: src_valid\n")

        # ---- s1: descriptor register, and the opcode ROM: the extended header combination
        # (one-hot) and its length. The extended headers themselves are assembled in s3 from the
        # registered selection. Written as comparisons, not a case table, which yosys would make a
        # block-RAM ROM (slow clock-to-output).
        s1_d = Signal(DescriptorLayout, reset_less=True)
        s1_csel = Signal(len(_EXT_COMBOS))
        s1_ext_len = Signal(range(_EXT_MAX + 1))
        opcode = self.desc.payload.opcode
        combo_ops = [[] for _ in _EXT_COMBOS]
        len_ops = [[] for _ in range(len(s1_ext_len))]
        for op, info in OPCODE_INFO.items():
            index = _EXT_COMBOS.index(info.ext_headers)
            hit = opcode == int(op)
            if index:
                combo_ops[index].append(hit)
            for b in range(len(s1_ext_len)):
                if sum(h.SIZE for h in info.ext_headers) >> b & 1:
                    len_ops[b].append(hit)
        csel = Cat(*(_or_all(h) for h in combo_ops[1:]))
        m.d.comb += self.desc.ready.eq(s1_en & ~drop_stall)
        with m.If(s1_en):
            m.d.sync += [
                s1_d.eq(self.desc.payload),
                s1_csel.eq(Cat(~csel.any(), csel)),
                s1_ext_len.eq(Cat(*(_or_all(h) for h in len_ops))),
            ]

        # ---- s2: decode, header lengths, payload length rounded up, IPv4 word pairs
        d = s1_d
        s2_d = Signal(DescriptorLayout, reset_less=True)
        s2_bad_mode = Signal()
        s2_too_long = Signal()
        s2_pdecl_nz = Signal()
        s2_p = Signal(_LEN_BITS)
        s2_p4 = Signal(_LEN_BITS)
        s2_pad = Signal(2)
        s2_esel = {}                 # a set of extended header combinations -> its select
        s2_ext_len = Signal(range(_EXT_MAX + 1))
        s2_tmpl = Signal(range(nt))
        s2_h = Signal(range(HEADER_MAX + 1))          # header length
        s2_hc = Signal(range(HEADER_MAX + 8))         # header + CRC lengths
        s2_cs = Signal(range(B * 2 + 16))             # first ICRC-covered byte
        s2_cl = Signal(3)                             # CRC bytes: 4 or 6
        s2_pairs = [Signal(16, name=f"s2_pair{k}") for k in range(4)]

        # The extended headers are assembled in s3 bit by bit, like the header vector in s5: each
        # bit is an AND-OR over the descriptor field bits that land there, each with the select of
        # the opcode combinations that put it there, registered here (at most five sources a bit).
        combo_bits = [[e for h in hdrs for e in _ext_header_bits(h, s2_d)] for hdrs in _EXT_COMBOS]
        ext_sources = []             # per bit: (value, combinations) pairs, a constant one as Const(1)
        for i in range(8 * _EXT_MAX):
            sources, one_at = _by_source((c, bits[i]) for c, bits in enumerate(combo_bits) if i < len(bits))
            ext_sources.append([*sources.values(), *([(Const(1, 1), one_at)] if one_at else [])])
        for src in ext_sources:
            for _, combos in src:
                if frozenset(combos) not in s2_esel:
                    s2_esel[frozenset(combos)] = Signal(name=f"s2_esel{len(s2_esel)}")

        bad_mode = d.mode >= len(LinkMode)
        too_long = d.payload_len > MAX_PAYLOAD
        bad = bad_mode | too_long
        mode_eff = Mux(bad_mode, LinkMode.ROCEV2_IPV4, d.mode)
        csel, ext_len = s1_csel, s1_ext_len
        tmpl = Signal(range(nt))
        with m.Switch(mode_eff):
            for t in _TEMPLATES:
                if t.vlan:
                    continue
                with m.Case(int(t.mode)):
                    if t.ib:
                        m.d.comb += tmpl.eq(t.index)
                    else:
                        m.d.comb += tmpl.eq(t.index + d.vlan_present)
        # Template constants (registered, so s3 adds one term to each length).
        base_len = Signal(range(HEADER_MAX + 1))
        base_crc = Signal(range(HEADER_MAX + 8))
        cs = Signal(range(B * 2 + 16))
        cl = Signal(3)
        assert all(t.crc_start < 2 * B for t in _TEMPLATES)   # the ICRC starts in beat 0 or 1
        with m.Switch(tmpl):
            for t in _TEMPLATES:
                with m.Case(t.index):
                    m.d.comb += [base_len.eq(t.base_len), base_crc.eq(t.base_len + t.crc_len),
                                 cs.eq(t.crc_start), cl.eq(t.crc_len)]
        # IPv4 header words other than total length and checksum, ones'-complement sums of pairs.
        words = [Const(0x4500, 16) | d.traffic_class, d.ip_id, Const(hd.IPV4_FLAG_DF << 13, 16),
                 Cat(Const(hd.IP_PROTO_UDP, 8), d.hop_limit),
                 d.src_gid[16:32], d.src_gid[0:16], d.dst_gid[16:32], d.dst_gid[0:16]]
        p_up4 = (d.payload_len + 3)[2:]
        with m.If(s2_en):
            m.d.sync += [
                s2_d.eq(d),
                s2_bad_mode.eq(bad_mode), s2_too_long.eq(too_long),
                s2_pdecl_nz.eq(d.payload_len != 0),
                s2_p.eq(Mux(bad, 0, d.payload_len)),
                s2_p4.eq(Mux(bad, 0, Cat(Const(0, 2), p_up4))),
                s2_pad.eq(Mux(bad, 0, -d.payload_len[:2])),
                *(sel.eq(Cat(*(csel[c] for c in sorted(combos))).any()) for combos, sel in s2_esel.items()),
                s2_ext_len.eq(ext_len), s2_tmpl.eq(tmpl),
                s2_h.eq(base_len + ext_len), s2_hc.eq(base_crc + ext_len),
                s2_cs.eq(cs), s2_cl.eq(cl),
                *(s2_pairs[k].eq(_oc_add(m, words[2 * k], words[2 * k + 1], f"s2_pair{k}"))
                  for k in range(4)),
            ]

        # ---- s3: transport length, header and frame lengths, IPv4 partial sums
        s3_d = Signal(DescriptorLayout, reset_less=True)
        s3_bad_mode = Signal()
        s3_too_long = Signal()
        s3_pdecl_nz = Signal()
        s3_p = Signal(_LEN_BITS)
        s3_plast_mask = Signal(B)
        s3_pad = Signal(2)
        s3_ext = Signal(8 * _EXT_MAX, reset_less=True)
        s3_tmpl = Signal(range(nt))
        s3_tl = Signal(_LEN_BITS)
        s3_ip4 = Signal(16)
        s3_sums = [Signal(16, name=f"s3_sum{k}") for k in range(2)]
        s3_h = Signal(range(HEADER_MAX + 1))
        s3_t = Signal(_LEN_BITS)
        s3_f = Signal(_LEN_BITS)
        s3_cs = Signal(range(B * 2 + 16))
        s3_cl = Signal(3)

        ext = Cat(*(_or_all([value & s2_esel[frozenset(combos)] for value, combos in src])
                    for src in ext_sources))
        tl_fixed = hd.BTH.SIZE + ICRC_LEN
        with m.If(s3_en):
            m.d.sync += [
                s3_d.eq(s2_d),
                s3_bad_mode.eq(s2_bad_mode), s3_too_long.eq(s2_too_long), s3_pdecl_nz.eq(s2_pdecl_nz),
                s3_p.eq(s2_p), s3_plast_mask.eq(_byte_mask(s2_p[:lb], B)), s3_pad.eq(s2_pad),
                s3_ext.eq(ext), s3_tmpl.eq(s2_tmpl),
                s3_tl.eq(s2_p4 + (s2_ext_len + tl_fixed)),
                s3_ip4.eq(s2_p4 + (s2_ext_len + (tl_fixed + hd.IPv4.SIZE + hd.UDP.SIZE))),
                *(s3_sums[k].eq(_oc_add(m, s2_pairs[2 * k], s2_pairs[2 * k + 1], f"s3_sum{k}"))
                  for k in range(2)),
                s3_h.eq(s2_h), s3_t.eq(s2_h + s2_p4), s3_f.eq(s2_hc + s2_p4),
                s3_cs.eq(s2_cs), s3_cl.eq(s2_cl),
            ]

        # ---- s4: IPv4 sum with total length, frame parameters
        params = data.StructLayout({
            "nh": _LEN_BITS, "h": max(lb, 1), "np": _LEN_BITS, "plast_mask": B,
            "nbm1": _LEN_BITS, "last_keep": B, "tail_off": max(lb, 1),
            "cs_mask": B, "crc_last_mask": B,
            # Beat positions as the generator tests them: the first ICRC-covered beat is beat
            # `cs1` (0 or 1); the last covered beat and the first CRC byte's beat are `dc` and `dt`
            # (0 or 1) beats before the frame's last.
            "cs1": 1, "dc": 1, "dt": 1,
        })
        # The frame's first-beat flags, which the generator's flags take when it loads the frame:
        # compares of s3's lengths, registered in s4, then kept apart from the rest of the frame
        # in a register of their own that always holds the head of the frame queue (see k).
        first_flags = {
            "bad_mode": 1, "too_long": 1,
            "drop": 1,               # bad, with a payload packet to drop
            "first_hdr": 1,          # beat 0 is a header-only beat
            "first_pl": 1,           # beat 0 takes payload beat 0
            "first_last": 1,         # the frame is one beat
            "first_final": 1,        # payload beat 0 is the payload's last
            "np_ge1": 1, "np_ge2": 1, "np_eq1": 1, "np_eq2": 1,  # payload beat count compares
            "nbm1_eq1": 1,           # two beats
            "nh_ge2": 1,             # two header-only beats or more
        }
        first_info = data.StructLayout({
            **first_flags,
            "pmask": B,              # payload lanes beat 0 keeps
        })
        s4_fl = Signal(data.StructLayout(first_flags))
        s4_d = Signal(DescriptorLayout, reset_less=True)
        s4_pad = Signal(2)
        s4_ext = Signal(8 * _EXT_MAX, reset_less=True)
        s4_tl = Signal(_LEN_BITS)
        s4_udp = Signal(16)          # UDP length (IPv6 payload length)
        s4_lrhw = [Signal(11, name=f"s4_lrhw{g}") for g in range(2)]  # LRH PktLen: local, global
        s4_ip4 = Signal(16)
        s4_tmpl = Signal(range(nt))
        s4_sum_c0 = Signal(17)       # the last ones'-complement add's two halves, picked in s5
        s4_sum_c1 = Signal(16)
        s4_p = Signal(params)

        sum_c0, sum_c1 = _oc_sum3_parts(m, s3_sums[0], s3_sums[1], s3_ip4, "s4_sum")
        with m.If(s4_en):
            m.d.sync += [
                s4_d.eq(s3_d),
                s4_pad.eq(s3_pad), s4_ext.eq(s3_ext), s4_tl.eq(s3_tl),
                s4_udp.eq(hd.UDP.SIZE + s3_tl),
                s4_lrhw[0].eq((hd.LRH.SIZE + s3_tl)[2:]),
                s4_lrhw[1].eq((hd.LRH.SIZE + hd.GRH.SIZE + s3_tl)[2:]),
                s4_ip4.eq(s3_ip4), s4_tmpl.eq(s3_tmpl),
                s4_sum_c0.eq(sum_c0), s4_sum_c1.eq(sum_c1),
                s4_p.nh.eq(s3_h[lb:]), s4_p.h.eq(s3_h[:lb]),
                s4_p.np.eq((s3_p + (B - 1))[lb:]),
                s4_p.plast_mask.eq(s3_plast_mask),
                s4_p.nbm1.eq((s3_f - 1)[lb:]), s4_p.last_keep.eq(_byte_mask(s3_f[:lb], B)),
                s4_p.tail_off.eq(s3_t[:lb]),
                s4_p.cs1.eq(s3_cs[lb]),
                s4_p.dt.eq(s3_t[:lb] + (s3_cl - 1) >= B),
                s4_p.dc.eq((s3_t[:lb] - 1)[:lb] + s3_cl >= B),
                s4_p.cs_mask.eq(~_byte_mask(s3_cs[:lb], B) | (s3_cs[:lb] == 0).replicate(B)),
                s4_p.crc_last_mask.eq(_byte_mask(s3_t[:lb], B)),
                # in beats: nh = s3_h // B, np = ceil(s3_p / B), nbm1 = (s3_f - 1) // B (s3_f >= 1)
                s4_fl.bad_mode.eq(s3_bad_mode), s4_fl.too_long.eq(s3_too_long),
                s4_fl.drop.eq((s3_bad_mode | s3_too_long) & s3_pdecl_nz),
                s4_fl.first_hdr.eq(s3_h >= B),
                s4_fl.first_pl.eq((s3_h < B) & (s3_p != 0)),
                s4_fl.first_last.eq(s3_f <= B),
                s4_fl.first_final.eq((s3_p != 0) & (s3_p <= B)),
                s4_fl.np_ge1.eq(s3_p != 0), s4_fl.np_ge2.eq(s3_p > B),
                s4_fl.np_eq1.eq((s3_p != 0) & (s3_p <= B)), s4_fl.np_eq2.eq((s3_p > B) & (s3_p <= 2 * B)),
                s4_fl.nbm1_eq1.eq((s3_f > B) & (s3_f <= 2 * B)),
                s4_fl.nh_ge2.eq(s3_h >= 2 * B),
            ]

        # ---- s5: IPv4 checksum, header byte vector, first-beat flags
        frame_info = data.StructLayout({
            "hdr": 8 * HB, "tmpl": range(nt), "p": params, "ib": 1, "fl": first_info,
        })
        s5_f = Signal(frame_info, reset_less=True)

        # The header vector is built bit by bit: for each bit, the templates are grouped by the
        # signal (descriptor field bit, derived value bit, constant one) they put there, and the
        # bit is an AND-OR over those signals with one registered select per template group
        # (decoded from the template number in s4). Two or three LUT levels, no shared decoder.
        d = s4_d
        csum = Signal(16)
        m.d.comb += csum.eq(~_oc_pick(s4_sum_c0, s4_sum_c1))
        if self._late:
            dl = self.desc_late
            m.d.comb += dl.ready.eq(s5_en & s4_valid)
            m.d.sync += Assert(~dl.ready | dl.valid, "packet builder: desc_late behind desc\n")

        def f(name):
            late = self._late and name in LATE_FIELDS
            return _Src(name, getattr(self.desc_late.payload if late else d, name))

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

        # Each select has _GRP_COPIES copies, each serving a contiguous eighth of the header vector,
        # so no select fans out across the whole block. yosys merges identical logic, so the
        # copies differ: while s4 holds no descriptor, copy c is also 1 for the template that is
        # the group's c-th non-member (where there is one), and each copy's LUT4 takes its inputs
        # in another order.
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
        orders = list(itertools.permutations(range(len(sel_in))))
        for (members, c), (sel, spare) in groups.items():
            def select(*bits, members=members, spare=spare):
                t = sum(b << k for k, b in enumerate(bits[:-1]))
                return t in members or (spare is not None and not bits[-1] and t == spare)
            nxt = lut4(m, platform, f"{sel.name}_next", select, sel_in, orders[c % len(orders)])
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

        # ---- k: skid register between s5 and the generator (registered ready for s1..s5). It
        # captures s5 whenever it is empty; it is full when the generator did not take s5.
        k_f = Signal(frame_info, reset_less=True)
        src = Signal(frame_info)
        # The header part of `src` is selected, and k's header part loaded, by copies of k_valid,
        # one per quarter (see the group selects): they differ from it only while neither k nor s5
        # holds a frame (k's content is then unused), and k_valid itself serves the other fields.
        s5v_next, s4v_next = valid_next[4], valid_next[3]
        variants = [valid_next[2], Const(1, 1), s4v_next, ~s4v_next]
        assert _COPIES <= len(variants)
        kv = [Signal(name=f"k_valid{c}") for c in range(_COPIES)]
        quarter = -(-8 * HB // _COPIES)
        m.d.comb += [
            src.eq(Mux(k_valid, k_f, s5_f)),
            src.hdr.eq(Cat(*(Mux(kv[c], k_f.hdr[c * quarter:(c + 1) * quarter],
                                 s5_f.hdr[c * quarter:(c + 1) * quarter]) for c in range(_COPIES)))),
        ]
        with m.If(~k_valid):
            m.d.sync += [k_f.tmpl.eq(s5_f.tmpl), k_f.p.eq(s5_f.p), k_f.ib.eq(s5_f.ib), k_f.fl.eq(s5_f.fl)]
        for c in range(_COPIES):
            with m.If(~kv[c]):
                m.d.sync += k_f.hdr[c * quarter:(c + 1) * quarter].eq(s5_f.hdr[c * quarter:(c + 1) * quarter])
        # head.fl is src.fl from a flip-flop: next clock's head of the queue is today's if k will
        # hold a frame (k keeps it, or takes s5's), else s5's next content. So no multiplexer on
        # k_valid sits between these flags and the generator's next-state logic.
        head = Signal(first_info, reset_less=True)

        # ---- generator. Control flags for the current beat are registers computed one beat
        # ahead, down to the push and load decisions themselves: `push` is one LUT of registered
        # flags and the payload valid, `g_load` one more after it.
        # The header in two parts: the low beat (the header beat being sent; zero once the payload
        # has started) and the beats above it. The upper beats are only read during header-only
        # beats; at any other time they follow the next frame's header, so their register enables
        # are functions of registers only (never of the payload handshake).
        # The ICRC view is not held: each beat's forced-to-ones bytes come from a constant table
        # indexed by the template and the beat number, ORed in at the ICRC engine's input.
        g_lo = Signal(W, reset_less=True)
        g_hi = Signal(8 * HB - W, reset_less=True)
        g_p = Signal(params, reset_less=True)
        g_ib = Signal()
        g_tmpl = Signal(range(nt))
        mask_beats = -(-max(t.base_len for t in _TEMPLATES) // B)
        g_mj = Signal(range(mask_beats + 1))  # beat number, saturating past the templates' masks
        g_abort = Signal()
        g_first = Signal()           # beat 0 of the frame
        g_second = Signal()          # beat 1
        g_active = Signal()          # a frame is being sent
        g_in_hdr = Signal()          # this beat is a header-only beat
        g_hrem = Signal(range(HEADER_MAX // B + 1))  # header-only beats left, this one included
        hr_ge2 = Signal()            # g_hrem >= 2: the next beat is header-only too
        g_pl = Signal()              # this beat takes a payload beat (or a fill beat)
        g_fill = Signal()            # the payload ended early: the rest of it is zeros
        g_last = Signal()            # this beat is the frame's last
        g_brem = Signal(_LEN_BITS)   # beats left after this one
        g_final = Signal()           # this payload beat is the payload packet's last
        g_prem = Signal(_LEN_BITS)   # payload beats not yet taken (this one included if g_pl)
        pr_ge1, pr_ge2, pr_eq1, pr_eq2 = (Signal(name=f"pr_{n}") for n in ("ge1", "ge2", "eq1", "eq2"))
        br_eq1 = Signal()            # g_brem == 1
        g_pmask = Signal(B)          # payload lanes this beat keeps (0 on header-only beats)
        g_room = Signal(init=1)      # a credit: inflight < depth - 1 (a register of its own)
        inflight = Signal(range(self._depth + 1))
        # Payload packets to drop: at most 3 when drop_stall rises a clock later, plus one for each
        # frame in s1..s5, k and the generator (a frame adds at most one): 4 bits never wrap.
        drop_cnt = Signal(4)
        pop = Signal()
        pop_d = Signal()             # pop, a clock later (what the in-flight count subtracts)
        # Flags derived from the above, registered one clock ahead:
        go_free = Signal()           # g_active & g_room & ~need: this beat goes out now
        go_pay = Signal()            # g_active & g_room & need & ~dropping: it goes with a payload beat
        last_free = Signal()         # go_free & g_last
        last_pay = Signal()          # go_pay & g_last
        go_any = Signal()            # go_free | go_pay: push, if the payload beat is there
        dropping = Signal()          # drop_cnt != 0
        hi_follow = Signal(init=1)   # ~g_active | ~g_in_hdr
        hi_en = Signal(init=1)       # hi_follow | g_room

        pv = self.payload.payload
        need_pl = Signal()           # g_pl & ~g_fill: this beat waits for a payload beat (a register)
        push = Signal()
        m.d.comb += [
            self.payload.ready.eq(dropping | go_pay),
            push.eq(go_free | (go_pay & self.payload.valid)),
        ]
        # next_frame = ~g_active | last_free | (last_pay & payload.valid), in three copies: the
        # control logic's, and the load enables of g_lo's and of the other frame registers' ~100
        # bits. Each is one LUT4 with its inputs in another order, so that synthesis keeps them apart.
        nf = {copy: lut4(m, platform, f"next_frame{copy}", lambda a, f, p, v: not a or f or (p and v),
                         [g_active, last_free, last_pay, self.payload.valid], order)
              for copy, order in (("", (0, 1, 2, 3)), ("_lo", (1, 0, 2, 3)), ("_regs", (2, 0, 1, 3)))}
        m.d.comb += next_frame.eq(nf[""])
        take = push & need_pl                                # a payload beat goes into this beat
        is_final = g_final
        # When a payload beat is taken, g_pmask is the lane mask it must have.
        extra = (pv.keep & ~g_pmask).any()
        early_ev = take & pv.last & (~is_final | ((pv.keep != g_pmask) & ~extra))
        late_ev = take & is_final & (~pv.last | extra)

        # The payload beat as taken, lanes masked (g_pmask is 0 on header-only beats, need_pl on
        # fill beats). It is shifted by the header length mod B one stage later, in `ga` -> `bt`,
        # from registers.
        pay_m = pv.data & _expand(pv.keep & g_pmask & need_pl.replicate(B), B)

        bad_load = head.bad_mode | head.too_long
        m.d.comb += g_load.eq(src_valid & next_frame)

        # Next beat's flags, from registered compares.
        in_hdr1 = hr_ge2
        pl1 = ~in_hdr1 & Mux(g_pl, pr_ge2, pr_ge1)
        final1 = Mux(g_pl, pr_eq2, pr_eq1)

        # The registers that the load and push decisions steer, each as its value for
        # payload.valid = 1 and for 0, both from registers only, and then one LUT4 picks by
        # payload.valid: the handshake reaches them through one LUT, not through the decisions'
        # own logic (ABC, left to itself, put the decision first and four LUTs after it).
        # The credit g_room is inflight < depth - 1 (inflight grows by at most one a clock, so that
        # leaves room for a push next clock), as a flip-flop computed from the count's next value:
        # the count moves by at most one, so that is one of three compares of today's count.
        room_after_push = inflight < self._depth - 2
        g_room_now = inflight < self._depth - 1
        m.d.sync += Assert(g_room == g_room_now, "packet builder: g_room\n")
        m.d.sync += Assert(go_any == (go_free | go_pay), "packet builder: go_any\n")
        m.d.sync += Assert(need_pl == (g_pl & ~g_fill), "packet builder: need_pl\n")

        def decide(v):
            push_v = go_any if v.value else go_free
            nf_v = ~g_active | last_free | (last_pay & v)
            g_load_v = src_valid & nf_v
            k_next = src_valid & ~nf_v
            take_v = push_v & need_pl
            late_drop_v = take_v & is_final & ~pv.last
            fill1_v = g_fill | (take_v & pv.last & ~is_final)   # an early end: the rest is fill
            # Like the frame registers below, the flags take the head of the frame queue on
            # `next_frame`, not on `g_load`: without a frame there, g_active goes low and they
            # are unused.
            active = g_load_v | (g_active & ~(push_v & g_last))
            in_hdr = Mux(nf_v, head.first_hdr, Mux(push_v, in_hdr1, g_in_hdr))
            pl = Mux(nf_v, head.first_pl, Mux(push_v, pl1, g_pl))
            fill = ~nf_v & Mux(push_v, fill1_v, g_fill)
            last = Mux(nf_v, head.first_last, Mux(push_v, br_eq1, g_last))
            drop = (drop_cnt + (g_load_v & head.drop) + late_drop_v - (dropping & v & pv.last))[:4]
            # drop != 0, without the adder (the decrement happens only while drop_cnt != 0).
            dropping_v = ((g_load_v & head.drop) | late_drop_v | (drop_cnt >= 2)
                          | ((drop_cnt == 1) & ~(v & pv.last)))
            go = active & g_room
            need = pl & ~fill
            dont_care = ~k_next & ~s5v_next
            return [
                (g_active, active), (g_in_hdr, in_hdr), (g_pl, pl), (g_fill, fill), (g_last, last),
                (drop_cnt, drop), (dropping, dropping_v),
                (inflight, (inflight + push_v - pop_d)[:len(inflight)]),
                (g_room, Mux(push_v & ~pop_d, room_after_push,
                             Mux(~push_v & pop_d, inflight < self._depth, g_room_now))),
                (need_pl, need),
                (go_free, go & ~need), (go_pay, go & need & ~dropping_v), (go_any, go & (~need | ~dropping_v)),
                (last_free, go & ~need & last), (last_pay, go & need & ~dropping_v & last),
                (hi_follow, ~active | ~in_hdr), (hi_en, ~active | ~in_hdr | g_room),
                (k_valid, k_next), (src_valid, k_next | s5v_next),
                *((kv[c], k_next | (dont_care & variants[c])) for c in range(_COPIES)),
                (head, Mux(k_next, head, Mux(s5_en, s5_fl, s5_f.fl))),
                (g_pmask, Mux(nf_v, head.pmask,
                              Mux(push_v, Mux(pl1, Mux(final1, g_p.plast_mask, ones), 0), g_pmask))),
            ]

        for (reg, if1), (_, if0) in zip(decide(Const(1, 1)), decide(Const(0, 1))):
            reg, if1, if0 = Value.cast(reg), Value.cast(if1), Value.cast(if0)
            m.d.sync += reg.eq(Cat(*(lut4(m, platform, f"{reg.name}_by_valid{i}", lambda v, a, b: a if v else b,
                                          [self.payload.valid, if1[i], if0[i]]) for i in range(len(reg)))))

        # The stage enables: stage i loads next clock unless k and stages i..5 will all be full,
        # en_i' = ~(k_next & F_i). A stage that does not load holds a descriptor (its enable is 0
        # only while it and every stage after it are full), so its next valid is ~en | (its
        # input's valid) and F_i is an AND of two-input terms of flip-flops, two LUT4 levels as a
        # balanced tree (ABC chained F_i from F_i+1, five levels). k_next, for each payload.valid,
        # is one LUT4 of four flip-flops, and each enable one LUT4 of those two, F_i and
        # payload.valid: three LUT levels.
        for j in range(5):
            m.d.sync += Assert(en_ctl[j] | (valid[j] & k_valid), "packet builder: a held stage is full\n")
        m.d.sync += [Assert(Cat(*en_ctl) == Cat(*en), "packet builder: enable copies\n")]
        k_next_if = [lut4(m, platform, f"k_next_if{v}",
                          lambda sv, a, f, p, v=v: sv and not (not a or f or (p and v)),
                          [src_valid, g_active, last_free, last_pay]) for v in (0, 1)]
        def held_or_fed(*b):             # (~en_a | v_a) & (~en_b | v_b) & ...
            return all(not b[i] or b[i + 1] for i in range(0, len(b), 2))
        pair34 = lut4(m, platform, "full_34", held_or_fed, [en_ctl[3], valid[2], en_ctl[4], valid[3]])
        pair12 = lut4(m, platform, "full_12", held_or_fed, [en_ctl[1], valid[0], en_ctl[2], valid[1]])
        term0 = lut4(m, platform, "full_0", lambda e, dv, ds: not e or (dv and not ds),
                     [en_ctl[0], self.desc.valid, drop_stall])
        full_from = [
            lut4(m, platform, "full_from0", lambda a, b, c: a and b and c, [term0, pair12, pair34]),
            lut4(m, platform, "full_from1", lambda a, b: a and b, [pair12, pair34]),
            lut4(m, platform, "full_from2", lambda e, v, p: (not e or v) and p, [en_ctl[2], valid[1], pair34]),
            pair34,
            lut4(m, platform, "full_from4", held_or_fed, [en_ctl[4], valid[3]]),
        ]
        for i, full in enumerate(full_from):
            for copy, order in ((en, (0, 1, 2, 3)), (en_ctl, (3, 2, 1, 0))):
                m.d.sync += copy[i].eq(lut4(m, platform, f"{copy[i].name}_next",
                                            lambda v, k1, k0, f: not ((k1 if v else k0) and f),
                                            [self.payload.valid, k_next_if[1], k_next_if[0], full], order))
        m.d.sync += [drop_stall.eq(drop_cnt >= 2), pop_d.eq(pop)]

        with m.If(push):
            m.d.sync += [
                g_first.eq(0), g_second.eq(g_first), g_mj.eq(g_mj + (g_mj != mask_beats)),
                g_hrem.eq(g_hrem - g_in_hdr), hr_ge2.eq(Mux(g_in_hdr, g_hrem >= 3, hr_ge2)), g_brem.eq(g_brem - 1),
                g_prem.eq(g_prem - g_pl), g_final.eq(final1), br_eq1.eq(g_brem == 2),
                g_lo.eq(Mux(g_in_hdr, g_hi[:W], 0)),
            ]
            with m.If(g_pl):         # the compares of g_prem - 1, from g_prem
                m.d.sync += [pr_ge1.eq(pr_ge2), pr_ge2.eq(g_prem >= 3),
                             pr_eq1.eq(pr_eq2), pr_eq2.eq(g_prem == 3)]
            with m.If(early_ev | late_ev):
                m.d.sync += g_abort.eq(1)
        # Frame registers and counters load whenever the generator is ready for a frame, whether or
        # not one is there (harmless while g_active stays low): their select is then `push`, not
        # `g_load`, which keeps the frame queue's valid bits off their ~100 enables.
        with m.If(nf["_lo"]):
            m.d.sync += g_lo.eq(src.hdr[:W])
        with m.If(nf["_regs"]):
            m.d.sync += [
                g_p.eq(src.p), g_ib.eq(src.ib), g_tmpl.eq(src.tmpl),
                g_first.eq(1), g_second.eq(0), g_mj.eq(0),
                g_hrem.eq(src.p.nh), g_brem.eq(src.p.nbm1), g_prem.eq(src.p.np),
                g_abort.eq(bad_load), g_final.eq(head.first_final),
                br_eq1.eq(head.nbm1_eq1), hr_ge2.eq(head.nh_ge2),
                pr_ge1.eq(head.np_ge1), pr_ge2.eq(head.np_ge2), pr_eq1.eq(head.np_eq1), pr_eq2.eq(head.np_eq2),
            ]
        # The upper header beats follow the head of the frame queue whenever they are not being
        # sent (idle, or past the header-only beats; a frame's last beat is never header-only, so
        # they hold the loaded frame's header when g_load comes), and shift down one beat per
        # header-only beat sent (such a beat takes no payload: it is sent whenever g_room).
        # They rotate rather than shift: shifting in zeros made yosys clear the top beat through
        # its flip-flops' resets, one net from hi_follow across the block. The rotated-in beats
        # are never read: a header has fewer than HB / B header-only beats (HEADER_MAX % B != 0),
        # so the beat after the last of them is still one of the frame's own.
        assert HEADER_MAX % B
        with m.If(hi_en):
            m.d.sync += g_hi.eq(Mux(hi_follow, src.hdr[W:], Cat(g_hi[W:], g_hi[:W])))

        # Sticky errors, write-1-to-clear.
        raised = Signal(ErrorFlags)
        m.d.comb += [
            raised.bad_mode.eq(g_load & head.bad_mode),
            raised.too_long.eq(g_load & head.too_long),
            raised.early.eq(early_ev),
            raised.late.eq(late_ev),
        ]
        m.d.sync += self.error.eq((self.error.as_value() & ~self.error_clear.as_value()) | raised.as_value())

        # ---- ga: the beat as the generator pushed it: its header part (`data`: g_lo), the masked
        # payload beat it took (`ga_pay`, zero if none) and the shift (header length mod B).
        beat = data.StructLayout({"data": W, "keep": B, "last": 1, "user": 1, "phase": 2,
                                  "tail_off": max(lb, 1), "ib": 1})
        ga_valid = Signal()
        ga_beat = Signal(beat, reset_less=True)
        ga_pay = Signal(W, reset_less=True)
        ga_h = Signal(max(lb, 1), reset_less=True)
        ga_mj = Signal.like(g_mj, reset_less=True)
        ga_tmpl = Signal.like(g_tmpl, reset_less=True)
        ga_crc_valid = Signal()
        ga_crc_keep = Signal(B)
        ga_crc_last = Signal()
        crc_first = Mux(g_p.cs1, g_second, g_first)
        crc_last = Mux(g_p.dc, br_eq1, g_last)
        m.d.sync += [
            ga_valid.eq(push),
            ga_beat.data.eq(g_lo),
            ga_pay.eq(pay_m),
            ga_h.eq(g_p.h),
            ga_mj.eq(g_mj), ga_tmpl.eq(g_tmpl),
            ga_beat.keep.eq(Mux(g_last, g_p.last_keep, ones)),
            ga_beat.last.eq(g_last),
            ga_beat.user.eq(g_last & (g_abort | early_ev | late_ev)),
            ga_beat.phase.eq(Mux(Mux(g_p.dt, br_eq1, g_last), 1, Mux(g_p.dt & g_last, 2, 0))),
            ga_beat.tail_off.eq(g_p.tail_off),
            ga_beat.ib.eq(g_ib),
            ga_crc_valid.eq(~(g_p.cs1 & g_first) & ~(g_p.dc & g_last)),
            ga_crc_keep.eq(Mux(crc_first, g_p.cs_mask, ones) & Mux(crc_last, g_p.crc_last_mask, ones)),
            ga_crc_last.eq(crc_last),
        ]

        # ---- bt: beat register; feeds the CRC engines and the delay line. The payload lanes are
        # a funnel shift of this beat's payload and the one before it (`ga_prev`, the frame's last
        # payload beat, zero at a frame's start), by the header length mod B: all from registers.
        ga_prev = Signal(W)
        with m.If(ga_valid):
            m.d.sync += ga_prev.eq(Mux(ga_beat.last, 0, ga_pay))
        funnel = (Cat(ga_prev, ga_pay) << Cat(Const(0, 3), ga_h[:lb]))[W:2 * W]
        bt_valid = Signal()
        bt_beat = Signal(beat, reset_less=True)
        bt_mask = Signal(W, reset_less=True)       # ICRC view: bytes forced to ones in this beat
        bt_crc_valid = Signal()
        bt_crc_keep = Signal(B)
        bt_crc_last = Signal()
        m.d.sync += [
            bt_valid.eq(ga_valid), bt_beat.eq(ga_beat), bt_beat.data.eq(ga_beat.data | funnel),
            bt_crc_valid.eq(ga_crc_valid), bt_crc_keep.eq(ga_crc_keep), bt_crc_last.eq(ga_crc_last),
        ]

        # An OR of (template, beat) matches per bit, not a case table: yosys would turn a table
        # into a block-RAM ROM, whose clock-to-output alone is most of a 6.4 ns cycle.
        mj_tmpl = Cat(ga_mj, ga_tmpl)
        mask_at = [[] for _ in range(W)]
        for t in _TEMPLATES:
            for j in range(mask_beats):
                hit = mj_tmpl == (j | t.index << len(g_mj))
                for i in range(W):
                    if t.or_mask >> (W * j + i) & 1:
                        mask_at[i].append(hit)
        m.d.sync += bt_mask.eq(Cat(*(_or_all(h) for h in mask_at)))

        m.submodules.icrc = icrc = self._icrc
        m.submodules.vcrc = vcrc = self._vcrc
        for engine, src in ((icrc, bt_beat.data | bt_mask), (vcrc, bt_beat.data)):
            m.d.comb += [
                engine.i.valid.eq(bt_valid & bt_crc_valid),
                engine.i.payload.data.eq(src),
                engine.i.payload.keep.eq(bt_crc_keep),
                engine.i.payload.last.eq(bt_crc_last),
                engine.o.ready.eq(1),
            ]
        r1_icrc = Signal(32)
        r1_vcrc = Signal(16)
        with m.If(icrc.o.valid):
            m.d.sync += [r1_icrc.eq(icrc.o.payload), r1_vcrc.eq(vcrc.o.payload)]
        r2_icrc = Signal(32)
        r2_vcrc = Signal(16)
        cols, const = _crc_extend(VCRC, ICRC_LEN)
        m.d.sync += [r2_icrc.eq(r1_icrc),
                     r2_vcrc.eq(xor_tree(cols, Cat(r1_vcrc, r1_icrc), 16, m, platform, "r2_vcrc") ^ const)]

        # ---- delay line: each beat meets its frame's CRCs at the end
        # The beats run through a ring in block RAM (written every clock, read delay - 2 entries
        # behind into the RAM's read stage, then a fabric register); only the valid bits are a
        # shift register, so a reset empties it. The read pointer is a register of its own rather
        # than wp - (delay - 2): no subtractor before the RAM's read address.
        assert self._delay >= 3
        dl_depth = 1 << (self._delay - 2).bit_length()
        m.submodules.dl = dl_mem = Memory(shape=beat, depth=dl_depth, init=[],
                                          attrs=BLOCK_RAM)
        dl_wr = dl_mem.write_port()
        dl_rd = dl_mem.read_port(domain="comb")
        dl_wp = Signal(range(dl_depth))
        dl_rp = Signal(range(dl_depth), init=-(self._delay - 2) % dl_depth)
        dl_valids = Signal(self._delay)
        dl_ram = Signal(beat, reset_less=True)      # the RAM's read stage
        dl_beat = Signal(beat, reset_less=True)
        m.d.comb += [dl_wr.addr.eq(dl_wp), dl_wr.data.eq(bt_beat), dl_wr.en.eq(1), dl_rd.addr.eq(dl_rp)]
        m.d.sync += [dl_wp.eq(dl_wp + 1), dl_rp.eq(dl_rp + 1), dl_ram.eq(dl_rd.data), dl_beat.eq(dl_ram),
                     dl_valids.eq(Cat(bt_valid, dl_valids[:-1]))]
        dl_valid = dl_valids[-1]

        # The CRC bytes placed in the tail beat's lanes, registered with the beat (tl), then ORed
        # in on the way into the FIFO.
        crc6 = Cat(r2_icrc, Mux(dl_beat.ib, r2_vcrc, 0))
        placed = Signal(2 * W)
        m.d.comb += placed.eq(crc6 << Cat(Const(0, 3), dl_beat.tail_off[:lb]) if lb else crc6)
        tl_add = Signal(W, reset_less=True)
        tl_beat = Signal(beat, reset_less=True)
        tl_valid = Signal()
        m.d.sync += [
            tl_add.eq(Mux(dl_beat.phase == 1, placed[:W], Mux(dl_beat.phase == 2, placed[W:], 0))),
            tl_beat.eq(dl_beat), tl_valid.eq(dl_valid),
        ]

        # Two queues written and read together: the data in block RAM (its read stage is `data`'s
        # register), keep / last / user in LUT RAM, so the frame's control bits leave flip-flops
        # (from block RAM they started the gate's and Rnic's frame counting 5.6 ns late).
        m.submodules.fifo = fifo = CreditFIFO(width=W, depth=self._depth, block=True)
        m.submodules.fifo_ctl = fifo_ctl = CreditFIFO(width=B + 2, depth=self._depth)
        for q in (fifo, fifo_ctl):
            m.d.comb += [q.w_en.eq(tl_valid), q.r_en.eq(self.frame.ready)]
            check_credit(m, q, "packet builder: output beats (g_room)")
        m.d.comb += [
            fifo.w_data.eq(tl_beat.data | tl_add),
            fifo_ctl.w_data.eq(Cat(tl_beat.keep, tl_beat.last, tl_beat.user)),
            self.frame.valid.eq(fifo_ctl.r_rdy),
            self.frame.payload.data.eq(fifo.r_data),
            self.frame.payload.keep.eq(fifo_ctl.r_data[:B]),
            self.frame.payload.last.eq(fifo_ctl.r_data[B]),
            self.frame.payload.user.eq(fifo_ctl.r_data[B + 1]),
            pop.eq(fifo_ctl.r_rdy & self.frame.ready),
        ]
        m.d.sync += Assert(fifo.r_rdy == fifo_ctl.r_rdy, "packet builder: output queues in step\n")
        return m


class PacketBuilderAxis(wiring.Component):
    """:class:`PacketBuilder` behind AXI4-Stream ports (the cocotb, benchmark and synthesis boundary).

    Parameters
    ----------
    width : int
        Datapath width in bits: 64, 128, 256 or 512.

    Members
    -------
    s_desc : ``In(AXIStreamSignature(DESC_AXIS_WIDTH))``
        One single-beat transfer per descriptor: ``tdata`` carries ``PacketDesc.to_int()`` (first
        field at bit 0); ``tkeep``, ``tlast`` and ``tuser`` are ignored.
    s_payload : ``In(AXIStreamSignature(width))``
        Payload bytes, one AXI4-Stream frame per descriptor with ``payload_len > 0``; ``tuser``
        is ignored.
    m_axis : ``Out(AXIStreamSignature(width, user_width=1))``
        Frames; ``tuser`` is 1 on the last beat of an aborted frame.
    error, error_clear :
        As in :class:`PacketBuilder`.
    """

    def __init__(self, width):
        self._core = PacketBuilder(width)  # validates the parameters
        super().__init__({
            "s_desc": In(AXIStreamSignature(DESC_AXIS_WIDTH)),
            "s_payload": In(AXIStreamSignature(width)),
            "m_axis": Out(AXIStreamSignature(width, 1)),
            "error": Out(ErrorFlags),
            "error_clear": In(ErrorFlags),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.core = core = self._core
        m.d.comb += [
            core.desc.valid.eq(self.s_desc.tvalid),
            core.desc.payload.eq(self.s_desc.tdata[:DESC_WIDTH]),
            self.s_desc.tready.eq(core.desc.ready),
            self.error.eq(core.error),
            core.error_clear.eq(self.error_clear),
        ]
        axis_to_stream(m, self.s_payload, core.payload)
        stream_to_axis(m, core.frame, self.m_axis)
        return m
