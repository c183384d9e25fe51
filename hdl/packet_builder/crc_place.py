"""CRC placement: the ICRC / VCRC engines, the delay line that brings each beat to its frame's
CRC values, and the tail beat's CRC lanes. See :class:`CrcPlacement`."""

from __future__ import annotations

from amaranth import Cat, Const, Mux, Signal
from amaranth.lib.memory import Memory

from ...model.crc import VCRC
from ..crc import xor_tree
from ..prim import BLOCK_RAM

from .merge import beat_layout
from .templates import ICRC_LEN

__all__ = ["CrcPlacement"]


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


class CrcPlacement:
    """ICRC and VCRC over each frame's covered bytes, placed into the frame's tail lanes (a helper
    of :class:`~rnic.hdl.packet_builder.PacketBuilder`, adding its logic to the builder's module).
    No handshake: the CRC engines' outputs are always ready and the delay line moves every clock,
    so each beat meets its frame's CRC values at a fixed distance (``delay`` clocks).

    Parameters
    ----------
    width : int
        Datapath width ``W`` in bits.
    icrc, vcrc : CrcStream
        The CRC engines (``queue=False``), made by the builder (their latency sizes ``delay``).
    delay : int
        Clocks from ``bt`` to ``tl``: the CRC latency + 2.
    merge : BeatMerge
        The ``bt`` beat and its CRC input.

    Members
    -------
    tl_valid, tl_beat, tl_add : Signal
        The beat after the delay line and the CRC bytes to OR into its data (zero except on the
        one or two beats that carry them), for the output queue.
    """

    def __init__(self, width, icrc, vcrc, delay, merge):
        self.W, self.B = width, width // 8
        self._icrc, self._vcrc, self._delay, self.merge = icrc, vcrc, delay, merge

    def elaborate(self, m, platform):
        W, B = self.W, self.B
        lb = B.bit_length() - 1
        beat = beat_layout(W)
        mg = self.merge
        bt_valid, bt_beat, bt_mask = mg.bt_valid, mg.bt_beat, mg.bt_mask
        bt_crc_valid, bt_crc_keep, bt_crc_last = mg.bt_crc_valid, mg.bt_crc_keep, mg.bt_crc_last
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
        self.tl_valid, self.tl_beat, self.tl_add = tl_valid, tl_beat, tl_add
