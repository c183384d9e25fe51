"""The packet builder's top: :class:`PacketBuilder` ties its blocks together; :class:`PacketBuilderAxis`
puts it behind AXI4-Stream ports."""

from __future__ import annotations

from amaranth import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ...model.crc import ICRC, VCRC
from ..bus import AXIStreamSignature, PacketStream, axis_to_stream, stream_to_axis
from ..crc import CrcStream
from ..descriptor import DESC_WIDTH, DescriptorLayout, ErrorFlags

from .crc_place import CrcPlacement
from .front import HeaderFrontEnd
from .generator import BeatGenerator
from .header import HeaderVector
from .merge import BeatMerge
from .queue import output_queue
from .templates import DESC_AXIS_WIDTH

__all__ = ["PacketBuilder", "PacketBuilderAxis"]


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
        gen = BeatGenerator(W, self._depth, self.payload, self.error, self.error_clear)
        front = HeaderFrontEnd(W, self.desc, self.payload.valid, gen.drop_stall)
        front.elaborate(m, platform)                                   # s1..s4
        header = HeaderVector(W, front, self.desc_late if self._late else None)
        header.elaborate(m, platform)                                  # s5
        gen.elaborate(m, platform, front, header)                      # k, generator decisions
        front.stage_enables(m, platform, gen.k_next_if, gen.k_valid)
        gen.elaborate_counters(m)
        merge = BeatMerge(W, gen)
        merge.elaborate(m, platform)                                   # ga, bt
        crc = CrcPlacement(W, self._icrc, self._vcrc, self._delay, merge)
        crc.elaborate(m, platform)                                     # CRCs, delay line, tl
        output_queue(m, W, self._depth, crc, self.frame, gen.pop)
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
