"""A 64-bit AXI4 master on a wider AXI4 bus, through AXI narrow transfers.

The engine's control masters (QP context cache, WQE fetch, completion writer) move 8-byte beats.
On a ``W``-bit host bus they keep doing so: their bursts pass unchanged (``axsize`` 3, INCR), which
AXI4 allows as *narrow transfers*, and this block moves each beat's data to and from the byte
lanes its address selects: beat ``k`` of a burst at address ``A`` uses lanes
``8 * ((A // 8 + k) mod (W / 64))`` and up.
"""

from amaranth import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from .bus import AXI4Signature

__all__ = ["NarrowPort"]

_FIELDS = ("id", "addr", "len", "size", "burst", "lock", "cache", "prot")


class NarrowPort(wiring.Component):
    """Puts a 64-bit AXI4 master (``s_axi``) on a ``data_width``-bit AXI4 port (``m_axi``).

    Requirements on the master: INCR bursts of 8-byte beats (``axsize`` 3), one ID or in-order
    responses (the R beats of its bursts come back in AR order, as AXI4 guarantees for one ID).

    AR and AW pass straight through (no added latency). The 64-bit lane of each burst's first beat
    is queued at its address handshake (``depth`` bursts per direction; while a queue is full the
    address channel waits). R: ``rdata`` is the lane of the beat. W: ``wdata`` is replicated on
    every lane and ``wstrb`` is moved to the beat's lane; W waits until its AW has been taken.
    B passes through.

    Members
    -------
    s_axi : ``In(AXI4Signature(addr_width=64, data_width=64, id_width=id_width))``
    m_axi : ``Out(AXI4Signature(addr_width=64, data_width=data_width, id_width=id_width))``
    """

    def __init__(self, data_width, *, id_width=4, depth=8):
        if data_width not in (128, 256, 512, 1024):
            raise ValueError(f"data_width must be 128, 256, 512 or 1024, not {data_width!r}")
        if not isinstance(depth, int) or depth < 1:
            raise ValueError(f"depth must be a positive integer, not {depth!r}")
        self.data_width, self.depth = data_width, depth
        super().__init__({
            "s_axi": In(AXI4Signature(addr_width=64, data_width=64, id_width=id_width)),
            "m_axi": Out(AXI4Signature(addr_width=64, data_width=data_width, id_width=id_width)),
        })

    def elaborate(self, platform):
        m = Module()
        s, mx = self.s_axi, self.m_axi
        lanes = self.data_width // 64
        lb = exact_log2(lanes)

        def lane_tracker(name, addr_ch, beat_valid, beat_last):
            """Queue the start lane at each ``addr_ch`` handshake; return the lane of the current
            data beat (and the queue, whose ``r_rdy`` says a burst's lane is known)."""
            q = SyncFIFO(width=lb, depth=self.depth)
            m.submodules[f"{name}_lanes"] = q
            valid, ready = getattr(s, addr_ch + "valid"), getattr(mx, addr_ch + "ready")
            m.d.comb += [
                getattr(mx, addr_ch + "valid").eq(valid & q.w_rdy),
                getattr(s, addr_ch + "ready").eq(ready & q.w_rdy),
                q.w_en.eq(valid & ready & q.w_rdy),
                q.w_data.eq(getattr(s, addr_ch + "addr")[3:3 + lb]),
            ]
            m.d.comb += [getattr(mx, addr_ch + f).eq(getattr(s, addr_ch + f)) for f in _FIELDS]
            first = Signal(init=1, name=f"{name}_first")
            cur = Signal(lb, name=f"{name}_cur")
            lane = Signal(lb, name=f"{name}_lane")
            m.d.comb += lane.eq(Mux(first, q.r_data, cur))
            with m.If(beat_valid):
                with m.If(beat_last):
                    m.d.comb += q.r_en.eq(1)
                    m.d.sync += first.eq(1)
                with m.Else():
                    m.d.sync += [first.eq(0), cur.eq(lane + 1)]
            return lane, q

        # R
        r_beat = mx.rvalid & s.rready
        r_lane, _ = lane_tracker("r", "ar", r_beat, mx.rlast)
        m.d.comb += [
            s.rvalid.eq(mx.rvalid), mx.rready.eq(s.rready), s.rid.eq(mx.rid), s.rresp.eq(mx.rresp),
            s.rlast.eq(mx.rlast), s.rdata.eq(mx.rdata.word_select(r_lane, 64)),
        ]

        # W
        w_known = Signal()
        w_beat = mx.wvalid & mx.wready
        w_lane, wq = lane_tracker("w", "aw", w_beat, s.wlast)
        m.d.comb += [
            w_known.eq(wq.r_rdy),
            mx.wvalid.eq(s.wvalid & w_known), s.wready.eq(mx.wready & w_known),
            mx.wdata.eq(s.wdata.replicate(lanes)), mx.wlast.eq(s.wlast),
            mx.wstrb.eq(s.wstrb << (w_lane * 8)),
        ]

        # B
        m.d.comb += [s.bvalid.eq(mx.bvalid), mx.bready.eq(s.bready), s.bid.eq(mx.bid), s.bresp.eq(mx.bresp)]
        return m
