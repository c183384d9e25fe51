"""Output queue: the finished beats, popped by the ``frame`` port. See :func:`output_queue`."""

from __future__ import annotations

from amaranth import Cat
from amaranth.hdl import Assert

from ..fifo import CreditFIFO, check_credit

__all__ = ["output_queue"]


def output_queue(m, width, depth, crc, frame, pop):
    """Add the output queue (a helper of :class:`~rnic.hdl.packet_builder.PacketBuilder`): the
    beats of ``crc`` (a :class:`~.crc_place.CrcPlacement`: ``tl_valid``, ``tl_beat``, ``tl_add``)
    in, the ``frame`` stream out.

    Handshakes: writes are never refused: the generator pushes a beat only with a credit
    (``g_room``), so the queue always has room (``check_credit`` ``Assert``s it). ``frame.valid``
    is the queue's ``r_rdy`` (a flip-flop, never waiting for ``ready``); a beat leaves on
    ``frame.valid & frame.ready``, which drives ``pop`` (the generator's credit return).
    """
    W, B = width, width // 8
    tl_valid, tl_beat, tl_add = crc.tl_valid, crc.tl_beat, crc.tl_add
    # Two queues written and read together: the data in block RAM (its read stage is `data`'s
    # register), keep / last / user in LUT RAM, so the frame's control bits leave flip-flops
    # (from block RAM they would start the consumers' frame counting late in the clock).
    m.submodules.fifo = fifo = CreditFIFO(width=W, depth=depth, block=True)
    m.submodules.fifo_ctl = fifo_ctl = CreditFIFO(width=B + 2, depth=depth)
    for q in (fifo, fifo_ctl):
        m.d.comb += [q.w_en.eq(tl_valid), q.r_en.eq(frame.ready)]
        check_credit(m, q, "packet builder: output beats (g_room)")
    m.d.comb += [
        fifo.w_data.eq(tl_beat.data | tl_add),
        fifo_ctl.w_data.eq(Cat(tl_beat.keep, tl_beat.last, tl_beat.user)),
        frame.valid.eq(fifo_ctl.r_rdy),
        frame.payload.data.eq(fifo.r_data),
        frame.payload.keep.eq(fifo_ctl.r_data[:B]),
        frame.payload.last.eq(fifo_ctl.r_data[B]),
        frame.payload.user.eq(fifo_ctl.r_data[B + 1]),
        pop.eq(fifo_ctl.r_rdy & frame.ready),
    ]
    m.d.sync += Assert(fifo.r_rdy == fifo_ctl.r_rdy, "packet builder: output queues in step\n")
