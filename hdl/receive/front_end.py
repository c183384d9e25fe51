"""The receive path's front end: AXI4-Stream frames in, one verdict per frame out (the stateless checks of
:func:`rnic.model.receive.classify`), with per-reason drop counters. See :class:`RxFrontEnd`."""

from __future__ import annotations

from amaranth import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out, connect

from ...model.receive import DropReason
from ..bus import AXIStreamSignature, axis_to_stream
from .crc_check import CrcCheck
from .decode import FrameDecode
from .layouts import result_layout

__all__ = ["RxFrontEnd"]


class RxFrontEnd(wiring.Component):
    """Frames in (``s_axis``, ``tuser`` on the last beat: the MAC saw a bad FCS), one result per frame out
    (``m_result``, :func:`~.layouts.result_layout`, in frame order), and a counter per drop reason plus
    one of frames received. ``s_axis.tready`` drops only while the CRC stage or the result path is full.

    Members
    -------
    s_axis : ``In(AXIStreamSignature(width, user_width=1))``
    m_result : ``Out(stream.Signature(result_layout()))``
    ib, mac, lid, gids, gid_valid : the port (see :class:`~.decode.FrameDecode`)
    received : ``Out(32)``; ``dropped`` : ``Out(data.ArrayLayout(32, len(DropReason)))``
        Frames that passed, and frames dropped per :class:`~rnic.model.receive.DropReason` (wrapping).
    """

    def __init__(self, width: int = 64, n_gids: int = 16):
        self.width, self.n_gids = width, n_gids
        super().__init__({
            "s_axis": In(AXIStreamSignature(width, user_width=1)),
            "m_result": Out(stream.Signature(result_layout())),
            "ib": In(1), "mac": In(48), "lid": In(16),
            "gids": In(data.ArrayLayout(128, n_gids)), "gid_valid": In(n_gids),
            "received": Out(32), "dropped": Out(data.ArrayLayout(32, len(DropReason))),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.crc = crc = CrcCheck(self.width)
        m.submodules.decode = dec = FrameDecode(self.n_gids)
        axis_to_stream(m, self.s_axis, crc.i)
        connect(m, crc.o, dec.i)
        m.d.comb += [crc.ib.eq(self.ib), dec.ib.eq(self.ib), dec.mac.eq(self.mac), dec.lid.eq(self.lid),
                     dec.gids.eq(self.gids), dec.gid_valid.eq(self.gid_valid)]
        connect(m, dec.o, wiring.flipped(self.m_result))
        res = dec.o.payload
        with m.If(dec.o.valid & dec.o.ready):
            with m.If(res.ok):
                m.d.sync += self.received.eq(self.received + 1)
            with m.Else():
                for r in DropReason:
                    with m.If(res.reason.as_value() == int(r)):
                        m.d.sync += self.dropped[r].eq(self.dropped[r] + 1)
        return m
