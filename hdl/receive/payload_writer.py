"""The receive path's payload writer: frames held whole in a ring of block RAM, pieces of them written to
host memory over AXI4. See :class:`PayloadWriter`."""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from ..bus import AXI4Signature, PacketStream

__all__ = ["PayloadWriter", "piece_layout"]

PAGE = 4096


def piece_layout():
    """One write: ``length`` bytes of the oldest held frame from byte ``src`` to bus address ``addr`` (with
    ``zero``: ``length`` zero bytes instead); ``last`` releases the frame after this piece (a frame written
    nowhere takes one piece of length 0)."""
    return data.StructLayout({"src": 16, "length": 16, "addr": 64, "last": 1, "zero": 1})


class PayloadWriter(wiring.Component):
    """Holds received frames whole and writes pieces of them to host memory.

    Frames come in on ``frames`` into a ring of ``depth`` beats (block RAM); a frame is held until a
    ``pieces`` command with ``last`` releases it. Pieces name the oldest held frame; a frame's pieces may
    come in any order. Each piece becomes AXI4 INCR write bursts of at most ``max_burst`` beats that never
    cross a 4 KiB boundary, with the frame's bytes moved to the address's byte lanes and ``wstrb`` set on
    exactly the piece's bytes. ``done`` gives one result per released frame, in order, once every burst
    of it has its write response: ``err`` if any response was SLVERR or DECERR.

    Members
    -------
    frames : ``In(PacketStream(width))``
        Frame beats; ``keep`` runs from lane 0 and is full except on the last beat. ``ready`` drops while
        the ring is full.
    pieces : ``In(stream.Signature(piece_layout()))``
        Taken one at a time; a piece is taken only once its frame is whole in the ring.
    done : ``Out(stream.Signature(data.StructLayout({"err": 1})))``
    m_axi : ``Out(AXI4Signature(data_width=width))``
        Write channels only (``arvalid`` and ``rready`` stay low); ``awid`` 0.
    """

    def __init__(self, width: int = 64, depth: int = 1024, max_burst: int = 256, frames_held: int = 16):
        if depth < 4 or depth & (depth - 1):
            raise ValueError(f"depth must be a power of two of at least 4, not {depth!r}")
        if not 1 <= max_burst <= 256:
            raise ValueError(f"max_burst must be 1..256, not {max_burst!r}")
        self.width, self.depth, self.max_burst, self.frames_held = width, depth, max_burst, frames_held
        super().__init__({
            "frames": In(PacketStream(width)), "pieces": In(stream.Signature(piece_layout())),
            "done": Out(stream.Signature(data.StructLayout({"err": 1}))),
            "m_axi": Out(AXI4Signature(data_width=width)),
        })

    def elaborate(self, platform):
        m = Module()
        W, B, D = self.width, self.width // 8, self.depth
        lb = ceil_log2(B)
        ab = ceil_log2(D)
        axi = self.m_axi

        m.submodules.ram = ram = Memory(shape=W, depth=D, init=[])
        wr = ram.write_port()
        rd = ram.read_port()

        # --- frames into the ring ------------------------------------------------------------------
        wp = Signal(ab + 1)             # beats written (mod 2 * depth)
        start = Signal(ab + 1)          # first beat of the frame coming in
        used = Signal(ab + 1)           # beats of held frames and of the frame coming in
        held_layout = data.StructLayout({"start": ab + 1, "beats": ab + 1})
        m.submodules.held = held = SyncFIFOBuffered(width=held_layout.size, depth=self.frames_held)
        head = data.View(held_layout, held.r_data)
        m.d.comb += self.frames.ready.eq((used < D) & held.w_rdy)
        take = self.frames.valid & self.frames.ready
        m.d.comb += [wr.addr.eq(wp[:ab]), wr.data.eq(self.frames.payload.data), wr.en.eq(take)]
        with m.If(take):
            m.d.sync += wp.eq(wp + 1)
            with m.If(self.frames.payload.last):
                m.d.sync += start.eq(wp + 1)
        entry = Signal(held_layout)
        m.d.comb += [entry.start.eq(start), entry.beats.eq(wp + 1 - start),
                     held.w_data.eq(entry), held.w_en.eq(take & self.frames.payload.last)]
        m.d.sync += used.eq(used + take - Mux(held.r_en, head.beats, 0))

        # --- one piece at a time: bursts, beats ------------------------------------------------------
        p = Signal(piece_layout())
        base = Signal(ab + 1)           # the piece's frame's first beat
        shift = Signal(lb)              # (src - addr) mod B: where lane 0 of an output beat is in the window
        q = Signal(17)                  # source beat in the window's low half (-1 is all ones: unused lanes)
        beat_addr = Signal(64)          # bus address of the output beat
        end = Signal(64)                # bus address after the piece
        left = Signal(16)               # output beats left in the piece
        burst = Signal(9)               # beats left in the burst
        lo, hi = Signal(W), Signal(W)
        issued = Signal(16)             # bursts issued, all frames (wraps)

        fetch = Signal(17)
        w_go = axi.wvalid & axi.wready
        m.d.comb += [fetch.eq(q + 2 + w_go), rd.addr.eq((base + fetch)[:ab])]
        to_page = Signal(ab + 2)
        m.d.comb += to_page.eq((PAGE - beat_addr[:12]) >> lb)
        m.submodules.released = released = SyncFIFOBuffered(width=16, depth=8)   # ``issued`` at each release

        with m.FSM():
            with m.State("Idle"):
                ok = held.r_rdy & released.w_rdy
                m.d.comb += self.pieces.ready.eq(ok)
                with m.If(self.pieces.valid & ok):
                    piece = self.pieces.payload
                    d0 = piece.addr[:lb]
                    m.d.sync += [
                        p.eq(piece), base.eq(head.start), shift.eq(piece.src[:lb] - d0),
                        q.eq(((piece.src - d0).as_signed() >> lb)[:17]),
                        beat_addr.eq(Cat(Signal(lb), piece.addr[lb:])),
                        end.eq(piece.addr + piece.length),
                        left.eq((d0 + piece.length + B - 1) >> lb),
                    ]
                    m.next = "Prime-Low"
            with m.State("Prime-Low"):
                m.d.comb += rd.addr.eq((base + q)[:ab])
                m.next = "Prime-High"
            with m.State("Prime-High"):
                m.d.sync += lo.eq(rd.data)
                m.d.comb += rd.addr.eq((base + q + 1)[:ab])
                m.next = "Prime-Next"
            with m.State("Prime-Next"):
                m.d.sync += hi.eq(rd.data)
                m.next = "Address"
            with m.State("Address"):
                n = Signal(9)
                m.d.comb += n.eq(Mux(left < to_page, Mux(left < self.max_burst, left, self.max_burst),
                                     Mux(to_page < self.max_burst, to_page, self.max_burst)))
                with m.If(left == 0):
                    m.next = "Release"
                with m.Else():
                    m.d.comb += [axi.awvalid.eq(1), axi.awaddr.eq(beat_addr), axi.awlen.eq(n - 1),
                                 axi.awsize.eq(lb), axi.awburst.eq(1)]
                    with m.If(axi.awready):
                        m.d.sync += [burst.eq(n), issued.eq(issued + 1)]
                        m.next = "Data"
            with m.State("Data"):
                m.d.comb += [axi.wvalid.eq(1), axi.wdata.eq(Mux(p.zero, 0, (Cat(lo, hi) >> (shift * 8))[:W])),
                             axi.wlast.eq(burst == 1)]
                for lane in range(B):
                    a = beat_addr + lane
                    m.d.comb += axi.wstrb[lane].eq((a >= p.addr) & (a < end))
                with m.If(axi.wready):
                    m.d.sync += [lo.eq(hi), hi.eq(rd.data), q.eq(q + 1), beat_addr.eq(beat_addr + B),
                                 left.eq(left - 1), burst.eq(burst - 1)]
                    with m.If(burst == 1):
                        m.next = "Address"
            with m.State("Release"):
                with m.If(p.last):
                    m.d.comb += [held.r_en.eq(1), released.w_en.eq(1), released.w_data.eq(issued)]
                m.next = "Idle"

        # --- write responses: one result per released frame, when its last burst is answered ---------
        b_count = Signal(16)
        loaded, until, err = Signal(), Signal(16), Signal()
        complete = loaded & (b_count == until)
        m.d.comb += axi.bready.eq(~complete)
        with m.If(axi.bvalid & axi.bready):
            m.d.sync += [b_count.eq(b_count + 1), err.eq(err | (axi.bresp != 0))]
        with m.If(~loaded & released.r_rdy):
            m.d.comb += released.r_en.eq(1)
            m.d.sync += [until.eq(released.r_data), loaded.eq(1)]
        m.d.comb += [self.done.valid.eq(complete), self.done.payload.err.eq(err)]
        with m.If(self.done.valid & self.done.ready):
            m.d.sync += [loaded.eq(0), err.eq(0)]
        return m
