"""The AXI write side of the QP context cache: the entry being written back (``wb_idx``, its tag and
record address) and the write engine that the MSHR's write-back, the control FSM's write-back and
MODIFY share."""

from amaranth import Array, Cat, Mux, Signal
from amaranth.hdl import Assert

from .layouts import BEATS, WB_BEATS

__all__ = ["write_back_entry", "write_engine"]


def write_back_entry(m, sh):
    """The entry being written back (``wb_idx``), its tag and its record's address (``wb_addr``).
    Leaves in ``sh``: ``wb_idx`` (loaded by :func:`.mshr.allocate` and the control FSM),
    ``wb_addr``."""
    W, way_bits, set_bits, tag_rp = sh.W, sh.way_bits, sh.set_bits, sh.tag_rp
    # The entry being written back, a register: the MSHR's victim while a miss is outstanding
    # (it loads s1's victim with mshr_idx), the control FSM's entry while it owns one (control
    # runs only with the MSHR idle). Its tag is registered a clock after wb_idx is set and its
    # record's address a clock after that (the write-backs start three clocks after wb_idx is
    # set): the tag read and the 57-bit adder stay off the AW path.
    wb_idx = Signal(sh.idx_bits)
    m.d.comb += tag_rp[2].addr.eq(wb_idx[way_bits:] if set_bits else 0)
    wb_hi = Array(sh.lane(tag_rp[2], w) for w in range(W))[wb_idx[:way_bits] if way_bits else 0]
    wb_tag = Signal(sh.Q)
    wb_addr = Signal(64)
    m.d.sync += [
        wb_tag.eq(wb_hi),
        wb_addr.eq(sh.rec_addr(wb_tag)),
    ]
    sh.wb_idx, sh.wb_addr = wb_idx, wb_addr


def write_engine(m, sh):
    """One AXI write burst at a time, from ``ctrl.payload.record`` (MODIFY) or from ``wb_buf``
    (a write-back), as its starter (``we_start`` with ``we_from_ctrl``, ``we_start_addr``,
    ``we_start_len``) asks.

    =====  =========================  =========  ==========================================================
    State  Entered from               Leaves to  Waits for
    =====  =========================  =========  ==========================================================
    Idle   reset; Busy (B received)   Busy       ``we_start`` (the MSHR's ``mshr_ws``; the control FSM's
                                                 Decide for MODIFY, its Read-Entry for a write-back)
    Busy   Idle, at ``we_start``      Idle       AW (``awvalid`` until ``awready``), the ``we_beats_left``
                                                 W beats (WLAST on the last), then B: ``we_done`` pulses
                                                 with it, ``we_err`` says BRESP was an error
    =====  =========================  =========  ==========================================================

    The state is ``we_busy``. Starts never overlap: the control FSM runs only once the pipeline, the MSHR and the write
    engine are empty (Drain), and the MSHR starts one write-back per miss (``mshr_ws``, three clocks
    after its allocation) and installs only once it is done.
    """
    axi, ctrl = sh.cache.m_axi, sh.cache.ctrl
    wb_buf, we_src_c, we_beat_c, we_busy = sh.wb_buf, sh.we_src_c, sh.we_beat_c, sh.we_busy
    we_beats_left, we_b_seen, we_from_ctrl = sh.we_beats_left, sh.we_b_seen, sh.we_from_ctrl
    we_start_len = sh.we_start_len

    # ===== write engine ====================================================================
    def wd_part(c):
        lo, hi = 16 * c, 16 * (c + 1)
        beats = Array(ctrl.payload.record.as_value()[64 * i + lo:64 * i + hi] for i in range(BEATS))
        wb_beats = Array(wb_buf[64 * i + lo:64 * i + hi] for i in range(WB_BEATS))
        return Mux(we_src_c[c], beats[we_beat_c[c]], wb_beats[we_beat_c[c][:1]])
    m.d.comb += [
        axi.awsize.eq(3), axi.awburst.eq(1), axi.awid.eq(0),
        axi.wdata.eq(Cat(*(wd_part(c) for c in range(4)))),
        axi.wstrb.eq(0xFF),
        axi.wlast.eq(we_beats_left == 1),
        axi.wvalid.eq(we_busy & (we_beats_left != 0)),
        axi.bready.eq(we_busy & ~we_b_seen),
    ]
    with m.If(~we_busy):
        m.d.sync += [*(we_beat_c[c].eq(c) for c in range(4)), *(we_src_c[c].eq(c & 1) for c in range(4))]
    m.d.sync += Assert(~we_busy | ((Cat(*we_beat_c) == we_beat_c[0].replicate(4)) &
                                   (Cat(*we_src_c) == sh.we_src_ctrl.replicate(4))), "qp_cache: we_beat copies\n")
    with m.If(sh.we_start):
        m.d.sync += [
            we_busy.eq(1), sh.we_src_ctrl.eq(we_from_ctrl), we_beats_left.eq(we_start_len + 1),
            *(we_beat_c[c].eq(0) for c in range(4)), *(we_src_c[c].eq(we_from_ctrl) for c in range(4)),
            we_b_seen.eq(0),
            axi.awaddr.eq(sh.we_start_addr), axi.awlen.eq(we_start_len), axi.awvalid.eq(1),
        ]
    with m.If(axi.awvalid & axi.awready):
        m.d.sync += axi.awvalid.eq(0)
    with m.If(axi.wvalid & axi.wready):
        m.d.sync += [we_beats_left.eq(we_beats_left - 1), *(b.eq(b + 1) for b in we_beat_c)]
    with m.If(axi.bvalid & axi.bready):
        m.d.sync += [we_busy.eq(0), we_b_seen.eq(1)]
        m.d.comb += [sh.we_done.eq(1), sh.we_err.eq(axi.bresp != 0)]
