"""Header front end, stages s1..s4: descriptor decode, template choice, lengths, IPv4 sums.

See :class:`HeaderFrontEnd`. Stage s5 (the header vector) is :mod:`.header`.
"""

from __future__ import annotations

from amaranth import Cat, Const, Mux, Signal
from amaranth.hdl import Assert
from amaranth.lib import data

from ...model.descriptor import MAX_PAYLOAD, LinkMode
from ...model import headers as hd
from ...model.opcodes import OPCODE_INFO
from ..descriptor import DescriptorLayout
from ..prim import lut4, replicas

from .checksum import _oc_add, _oc_sum3_parts
from .templates import (_EXT_COMBOS, _EXT_MAX, _LEN_BITS, _TEMPLATES, HEADER_MAX, ICRC_LEN, _by_source,
                        _byte_mask, _ext_header_bits, _or_all)

__all__ = ["HeaderFrontEnd", "frame_params", "first_flags", "first_layout"]


def frame_params(B):
    """The frame parameters s4 computes for the generator (beat counts and lane masks)."""
    lb = B.bit_length() - 1
    return data.StructLayout({
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


def first_layout(B):
    """The first-beat flags and the payload lanes beat 0 keeps, as s5 registers them."""
    return data.StructLayout({
        **first_flags,
        "pmask": B,              # payload lanes beat 0 keeps
    })


class HeaderFrontEnd:
    """Stages s1..s4 of the packet builder and the enables of s1..s5 (a helper of
    :class:`~rnic.hdl.packet_builder.PacketBuilder`: it adds its logic to the builder's module, so
    that the stage registers keep their names and no port boundary sits on the stage enables).

    Parameters
    ----------
    width : int
        Datapath width ``W`` in bits.
    desc : ``stream.Interface(DescriptorLayout)``
        The builder's ``desc`` port (this block drives its ``ready``).
    payload_valid : Signal
        The builder's ``payload.valid`` (it enters the stage enables' last LUT only).
    drop_stall : Signal
        From :class:`~.generator.BeatGenerator`: payload packets owed to the drop logic hold new
        descriptors back.

    Members
    -------
    desc handshake
        ``desc.ready`` is ``s1_en & ~drop_stall``: a flip-flop and one gate. A descriptor moves on
        from stage i to stage i+1 whenever ``s{i+1}_en`` is high; every enable is a flip-flop
        computed a clock ahead (:meth:`stage_enables`), so the payload handshake never reaches the
        wide stage registers. A stage whose enable is low holds a descriptor (``Assert``ed).
    valid, en : list of Signal
        ``s1_valid .. s5_valid`` and ``s1_en .. s5_en``. ``en_ctl`` are copies of ``en`` for the
        next-state valids (``Assert``ed equal), ``valid_next`` those next-state valids.
    s4_* : Signal
        s4's registers, read by s5 (:class:`~.header.HeaderVector`): ``s4_d`` (the descriptor),
        ``s4_fl`` (first-beat flags), ``s4_p`` (:func:`frame_params`), ``s4_tmpl``, lengths and
        the two halves of the IPv4 checksum's last add. ``s3_tmpl`` / ``s3_valid`` feed the
        template-group selects s5 registers from s4.
    """

    def __init__(self, width, desc, payload_valid, drop_stall):
        self.W = width
        self.B = width // 8
        self.lb = self.B.bit_length() - 1
        self.desc = desc
        self.payload_valid = payload_valid
        self.drop_stall = drop_stall

    def elaborate(self, m, platform):
        """Add the stage valids and s1..s4 to ``m``."""
        self._valids(m)
        self._s1(m)
        self._s2(m)
        self._s3(m)
        self._s4(m)

    def _valids(self, m):
        # ---- pipeline handshakes: a stage loads whenever it, or any stage after it, is empty, or
        # the skid register k after s5 is empty. Every enable is a function of registers only:
        # the generator's load decision (which depends on the payload handshake) never reaches
        # the wide stage registers.
        # The enables themselves are registers, computed one clock ahead from the next-state
        # valids, so each drives its stage's ~1 000 flip-flop enables straight from a flip-flop.
        valid = [Signal(name=f"s{i}_valid") for i in range(1, 6)]
        en = [Signal(name=f"s{i}_en", init=1) for i in range(1, 6)]
        desc_in = self.desc.valid & ~self.drop_stall
        # The enables are assigned with the generator's registers (stage_enables): they depend on
        # its load decision. The next-state valids use copies of the enables (the enables
        # themselves each drive a stage's ~1 000 flip-flop enables).
        en_ctl = [Signal(name=f"s{i}_en_ctl", init=1) for i in range(1, 6)]
        valid_next = [Mux(e, v_in, v) for e, v_in, v in zip(en_ctl, [desc_in, *valid[:4]], valid)]
        m.d.sync += [v.eq(v_next) for v, v_next in zip(valid, valid_next)]
        self.valid, self.en, self.en_ctl, self.valid_next = valid, en, en_ctl, valid_next

    def _s1(self, m):
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
        m.d.comb += self.desc.ready.eq(self.en[0] & ~self.drop_stall)
        with m.If(self.en[0]):
            m.d.sync += [
                s1_d.eq(self.desc.payload),
                s1_csel.eq(Cat(~csel.any(), csel)),
                s1_ext_len.eq(Cat(*(_or_all(h) for h in len_ops))),
            ]
        self.s1_d, self.s1_csel, self.s1_ext_len = s1_d, s1_csel, s1_ext_len

    def _s2(self, m):
        B, nt = self.B, len(_TEMPLATES)
        s1_csel, s1_ext_len, s2_en = self.s1_csel, self.s1_ext_len, self.en[1]
        # ---- s2: decode, header lengths, payload length rounded up, IPv4 word pairs
        d = self.s1_d
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
        self.s2 = dict(d=s2_d, bad_mode=s2_bad_mode, too_long=s2_too_long, pdecl_nz=s2_pdecl_nz, p=s2_p,
                       p4=s2_p4, pad=s2_pad, esel=s2_esel, ext_len=s2_ext_len, tmpl=s2_tmpl, h=s2_h, hc=s2_hc,
                       cs=s2_cs, cl=s2_cl, pairs=s2_pairs, ext_sources=ext_sources)

    def _s3(self, m):
        B, lb, nt, s3_en = self.B, self.lb, len(_TEMPLATES), self.en[2]
        s2 = self.s2
        s2_d, s2_bad_mode, s2_too_long, s2_pdecl_nz, s2_p, s2_p4, s2_pad = (s2[k] for k in (
            "d", "bad_mode", "too_long", "pdecl_nz", "p", "p4", "pad"))
        s2_esel, s2_ext_len, s2_tmpl, s2_h, s2_hc, s2_cs, s2_cl, s2_pairs, ext_sources = (s2[k] for k in (
            "esel", "ext_len", "tmpl", "h", "hc", "cs", "cl", "pairs", "ext_sources"))
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
        self.s3 = dict(d=s3_d, bad_mode=s3_bad_mode, too_long=s3_too_long, pdecl_nz=s3_pdecl_nz, p=s3_p,
                       plast_mask=s3_plast_mask, pad=s3_pad, ext=s3_ext, tmpl=s3_tmpl, tl=s3_tl, ip4=s3_ip4,
                       sums=s3_sums, h=s3_h, t=s3_t, f=s3_f, cs=s3_cs, cl=s3_cl)
        self.s3_tmpl = s3_tmpl

    def _s4(self, m):
        B, lb, nt, s4_en = self.B, self.lb, len(_TEMPLATES), self.en[3]
        s3 = self.s3
        s3_d, s3_bad_mode, s3_too_long, s3_pdecl_nz, s3_p, s3_plast_mask, s3_pad, s3_ext = (s3[k] for k in (
            "d", "bad_mode", "too_long", "pdecl_nz", "p", "plast_mask", "pad", "ext"))
        s3_tmpl, s3_tl, s3_ip4, s3_sums, s3_h, s3_t, s3_f, s3_cs, s3_cl = (s3[k] for k in (
            "tmpl", "tl", "ip4", "sums", "h", "t", "f", "cs", "cl"))
        # ---- s4: IPv4 sum with total length, frame parameters
        params = frame_params(B)
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
        self.s4_fl, self.s4_d, self.s4_pad, self.s4_ext, self.s4_tl = s4_fl, s4_d, s4_pad, s4_ext, s4_tl
        self.s4_udp, self.s4_lrhw, self.s4_ip4, self.s4_tmpl = s4_udp, s4_lrhw, s4_ip4, s4_tmpl
        self.s4_sum_c0, self.s4_sum_c1, self.s4_p = s4_sum_c0, s4_sum_c1, s4_p

    def stage_enables(self, m, platform, k_next_if, k_valid):
        """Drive ``s1_en .. s5_en`` and their copies ``en_ctl`` from ``k_next_if`` (the skid register's
        next valid, for ``payload.valid`` = 0 and 1, from :class:`~.generator.BeatGenerator`)."""
        valid, en, en_ctl = self.valid, self.en, self.en_ctl
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

        def held_or_fed(*b):             # (~en_a | v_a) & (~en_b | v_b) & ...
            return all(not b[i] or b[i + 1] for i in range(0, len(b), 2))
        pair34 = lut4(m, platform, "full_34", held_or_fed, [en_ctl[3], valid[2], en_ctl[4], valid[3]])
        pair12 = lut4(m, platform, "full_12", held_or_fed, [en_ctl[1], valid[0], en_ctl[2], valid[1]])
        term0 = lut4(m, platform, "full_0", lambda e, dv, ds: not e or (dv and not ds),
                     [en_ctl[0], self.desc.valid, self.drop_stall])
        full_from = [
            lut4(m, platform, "full_from0", lambda a, b, c: a and b and c, [term0, pair12, pair34]),
            lut4(m, platform, "full_from1", lambda a, b: a and b, [pair12, pair34]),
            lut4(m, platform, "full_from2", lambda e, v, p: (not e or v) and p, [en_ctl[2], valid[1], pair34]),
            pair34,
            lut4(m, platform, "full_from4", held_or_fed, [en_ctl[4], valid[3]]),
        ]
        # Each enable and its copy: two replicas, placed by the stage registers and by the valids.
        for i, full in enumerate(full_from):
            nxt = replicas(m, platform, [f"{en[i].name}_next", f"{en_ctl[i].name}_next"],
                           lambda v, k1, k0, f: not ((k1 if v else k0) and f),
                           [self.payload_valid, k_next_if[1], k_next_if[0], full], orders=[(0, 1, 2, 3), (3, 2, 1, 0)])
            m.d.sync += [en[i].eq(nxt[0]), en_ctl[i].eq(nxt[1])]
