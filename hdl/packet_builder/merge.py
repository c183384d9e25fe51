"""Beat merge: the generator's header part and the payload beat it took become one beat (``ga``
then ``bt``), with the ICRC view's forced-to-ones mask. See :class:`BeatMerge`."""

from __future__ import annotations

from amaranth import Cat, Const, Mux, Signal
from amaranth.lib import data

from .templates import _TEMPLATES, _or_all

__all__ = ["BeatMerge", "beat_layout"]


def beat_layout(W):
    """One output beat on its way to the output queue: data, lanes, frame end, abort, the CRC
    bytes' phase (1: this beat takes the first CRC bytes, 2: the rest), their lane offset, IB."""
    B = W // 8
    lb = B.bit_length() - 1
    return data.StructLayout({"data": W, "keep": B, "last": 1, "user": 1, "phase": 2,
                              "tail_off": max(lb, 1), "ib": 1})


class BeatMerge:
    """Stages ``ga`` and ``bt`` (a helper of :class:`~rnic.hdl.packet_builder.PacketBuilder`, adding
    its logic to the builder's module). No handshake: a beat moves on every clock, ``ga_valid`` is
    the generator's ``push`` a clock later and ``bt_valid`` ``ga_valid`` a clock after that.

    Parameters
    ----------
    width : int
        Datapath width ``W`` in bits.
    gen : BeatGenerator
        The generator's registers as they stand when it pushes.

    Members
    -------
    bt_valid, bt_beat : Signal, Signal(beat_layout(W))
        The beat: header part ORed with the payload, funnel-shifted by the header length mod W/8.
    bt_mask : Signal(W)
        The bytes forced to ones in this beat's ICRC view.
    bt_crc_valid, bt_crc_keep, bt_crc_last : Signal
        The beat's part of the CRC engines' input: covered or not, covered lanes, last covered beat.
    """

    def __init__(self, width, gen):
        self.W, self.B, self.gen = width, width // 8, gen

    def elaborate(self, m, platform):
        r, W, B = self.gen, self.W, self.B
        lb = B.bit_length() - 1
        ones = Const(-1, B)
        # ---- ga: the beat as the generator pushed it: its header part (`data`: g_lo), the masked
        # payload beat it took (`ga_pay`, zero if none) and the shift (header length mod B).
        beat = beat_layout(W)
        ga_valid = Signal()
        ga_beat = Signal(beat, reset_less=True)
        ga_pay = Signal(W, reset_less=True)
        ga_h = Signal(max(lb, 1), reset_less=True)
        ga_mj = Signal.like(r.g_mj, reset_less=True)
        ga_tmpl = Signal.like(r.g_tmpl, reset_less=True)
        ga_crc_valid = Signal()
        ga_crc_keep = Signal(B)
        ga_crc_last = Signal()
        crc_first = Mux(r.g_p.cs1, r.g_second, r.g_first)
        crc_last = Mux(r.g_p.dc, r.br_eq1, r.g_last)
        m.d.sync += [
            ga_valid.eq(r.push),
            ga_beat.data.eq(r.g_lo),
            ga_pay.eq(r.pay_m),
            ga_h.eq(r.g_p.h),
            ga_mj.eq(r.g_mj), ga_tmpl.eq(r.g_tmpl),
            ga_beat.keep.eq(Mux(r.g_last, r.g_p.last_keep, ones)),
            ga_beat.last.eq(r.g_last),
            ga_beat.user.eq(r.g_last & (r.g_abort | r.early_ev | r.late_ev)),
            ga_beat.phase.eq(Mux(Mux(r.g_p.dt, r.br_eq1, r.g_last), 1, Mux(r.g_p.dt & r.g_last, 2, 0))),
            ga_beat.tail_off.eq(r.g_p.tail_off),
            ga_beat.ib.eq(r.g_ib),
            ga_crc_valid.eq(~(r.g_p.cs1 & r.g_first) & ~(r.g_p.dc & r.g_last)),
            ga_crc_keep.eq(Mux(crc_first, r.g_p.cs_mask, ones) & Mux(crc_last, r.g_p.crc_last_mask, ones)),
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
        # into a block-RAM ROM, whose clock-to-output alone would take most of a cycle.
        mj_tmpl = Cat(ga_mj, ga_tmpl)
        mask_at = [[] for _ in range(W)]
        for t in _TEMPLATES:
            for j in range(r.mask_beats):
                hit = mj_tmpl == (j | t.index << len(r.g_mj))
                for i in range(W):
                    if t.or_mask >> (W * j + i) & 1:
                        mask_at[i].append(hit)
        m.d.sync += bt_mask.eq(Cat(*(_or_all(h) for h in mask_at)))
        self.bt_valid, self.bt_beat, self.bt_mask = bt_valid, bt_beat, bt_mask
        self.bt_crc_valid, self.bt_crc_keep, self.bt_crc_last = bt_crc_valid, bt_crc_keep, bt_crc_last
