"""The frame gate between the packet builder and the MAC: aborts the frames of failed packets."""

from amaranth import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from ..bus import PacketStream
from .layouts import group_layout, status_layout

__all__ = ["FrameGate"]


class FrameGate(wiring.Component):
    """Marks the frames of failed packets aborted, and forwards payload-read results to the engine.

    Per packet (in order) it takes the payload reader's ``rd_status`` and the engine's ``group``
    entry (queued here, so the engine's issue never waits for the read);
    ``abort = error | (poisoned & ~start)``, where *poisoned* is set by an error and cleared by a
    packet with ``start`` (the engine issues one with ``start`` = 1 whenever it has no packet in
    flight, so only packets issued behind a failing one are poisoned). ``abort`` goes into a FIFO
    that is read at each frame's last beat (``user`` |= abort); a last beat waits for its entry.
    A response packet (``group.resp``) is aborted by its own error only, neither poisons nor clears,
    and sends no ``status``.

    Parameters
    ----------
    window : int
        The engine's window: entries of the ``group`` and ``status`` queues.
    depth : int
        Abort flags held for frames not yet through (packets whose read finished before the frame).
    width : int
        Frame data width in bits.

    Members
    -------
    rd_status : In(stream ``{error}``)
        From the payload reader, one per packet; taken (``ready``) when a ``group`` entry is queued
        and both result queues have room.
    group : In(stream ``{start}``)
        From the engine, one per packet as it issues; ``ready`` while the queue has room.
    status : Out(stream ``{error}``)
        To the engine, one per packet in order; never holds more than the engine's window.
    frame_in : In(PacketStream(W, user 1)), frame_out : Out(PacketStream(W, user 1))
        Passed through beat by beat (``valid`` / ``ready`` combinational); a last beat waits
        (``valid`` low to the sink, ``ready`` low to the source) until its abort flag is queued.
    """

    def __init__(self, window: int, depth: int, *, width: int):
        self.window, self.depth, self.width = window, depth, width
        super().__init__({
            "rd_status": In(stream.Signature(status_layout)),
            "group": In(stream.Signature(group_layout)),
            "status": Out(stream.Signature(status_layout)),
            "frame_in": In(PacketStream(width, user_width=1)),
            "frame_out": Out(PacketStream(width, user_width=1)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.aborts = aborts = SyncFIFOBuffered(width=1, depth=self.depth)
        m.submodules.results = results = SyncFIFOBuffered(width=1, depth=self.window)
        m.submodules.groups = groups = SyncFIFOBuffered(width=2, depth=self.window)
        m.d.comb += [groups.w_en.eq(self.group.valid), groups.w_data.eq(self.group.payload.as_value()),
                     self.group.ready.eq(groups.w_rdy)]
        poisoned = Signal()
        take = self.rd_status.valid & groups.r_rdy & aborts.w_rdy & results.w_rdy
        error = self.rd_status.payload.error
        group = data.View(group_layout, groups.r_data)
        m.d.comb += [self.rd_status.ready.eq(take), groups.r_en.eq(take),
                     aborts.w_en.eq(take), aborts.w_data.eq(error | (poisoned & ~group.start & ~group.resp)),
                     results.w_en.eq(take & ~group.resp), results.w_data.eq(error)]
        with m.If(take & ~group.resp):
            m.d.sync += poisoned.eq((poisoned & ~group.start) | error)
        m.d.comb += [self.status.valid.eq(results.r_rdy), self.status.payload.error.eq(results.r_data),
                     results.r_en.eq(self.status.ready)]

        fin, fout = self.frame_in, self.frame_out
        is_last = fin.payload.last
        gate_ok = ~is_last | aborts.r_rdy
        m.d.comb += [fout.valid.eq(fin.valid & gate_ok), fout.payload.eq(fin.payload),
                     fin.ready.eq(fout.ready & gate_ok)]
        with m.If(is_last):
            m.d.comb += fout.payload.user.eq(fin.payload.user | aborts.r_data)
        m.d.comb += aborts.r_en.eq(fin.valid & fout.ready & is_last & aborts.r_rdy)
        return m
