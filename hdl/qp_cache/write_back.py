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
    # The entry being written back, a register: the newest miss's victim while its victim steps run
    # (it loads s1's victim as the slot does), the control FSM's entry while it owns one (control
    # runs only with the MSHRs idle). Its tag is registered a clock after wb_idx is set and its
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
    sh.wb_idx, sh.wb_tag, sh.wb_addr = wb_idx, wb_tag, wb_addr


def write_engine(m, sh):
    """One AXI write burst's address and data at a time, from ``ctrl.payload.record`` (MODIFY) or from
    ``wb_buf`` (a write-back), as its starter (``we_start`` with ``we_from_ctrl``, ``we_start_len``,
    ``we_start_addr``) asks; the B responses are counted apart (``we_bcnt``), so a write-back can start
    while earlier ones wait for their B.

    =====  =========================  =========  ==========================================================
    State  Entered from               Leaves to  Waits for
    =====  =========================  =========  ==========================================================
    Idle   reset; Busy                Busy       ``we_start`` (a slot's ``mshr_ws``; the control FSM's
                                                 Decide for MODIFY, its Read-Entry for a write-back)
    Busy   Idle, at ``we_start``      Idle       AW (``awvalid`` until ``awready``) and the
                                                 ``we_beats_left`` W beats (WLAST on the last)
    =====  =========================  =========  ==========================================================

    The state is ``we_busy``. Each B (``bready`` while ``we_bcnt`` is not 0) pulses ``we_done``, with
    ``we_err`` if BRESP was an error; B responses come in start order (one AXI ID). Starts never
    overlap: the control FSM runs only once the pipeline, the MSHRs and the write engine are empty
    (Drain, B responses included), and a miss allocates only while the engine is Idle, its write-back
    starting three clocks later.
    """
    axi, ctrl = sh.cache.m_axi, sh.cache.ctrl
    wb_buf, we_src_c, we_beat_c, we_busy = sh.wb_buf, sh.we_src_c, sh.we_beat_c, sh.we_busy
    we_beats_left, we_bcnt, we_from_ctrl = sh.we_beats_left, sh.we_bcnt, sh.we_from_ctrl
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
        axi.bready.eq(we_bcnt != 0),
    ]
    with m.If(~we_busy):
        m.d.sync += [*(we_beat_c[c].eq(c) for c in range(4)), *(we_src_c[c].eq(c & 1) for c in range(4))]
    m.d.sync += Assert(~we_busy | ((Cat(*we_beat_c) == we_beat_c[0].replicate(4)) &
                                   (Cat(*we_src_c) == sh.we_src_ctrl.replicate(4))), "qp_cache: we_beat copies\n")
    with m.If(sh.we_start):
        m.d.sync += [
            we_busy.eq(1), sh.we_src_ctrl.eq(we_from_ctrl), we_beats_left.eq(we_start_len + 1),
            *(we_beat_c[c].eq(0) for c in range(4)), *(we_src_c[c].eq(we_from_ctrl) for c in range(4)),
            axi.awaddr.eq(sh.we_start_addr), axi.awlen.eq(we_start_len), axi.awvalid.eq(1),
        ]
    aw_hs, w_hs, b_hs = axi.awvalid & axi.awready, axi.wvalid & axi.wready, axi.bvalid & axi.bready
    with m.If(aw_hs):
        m.d.sync += axi.awvalid.eq(0)
    with m.If(w_hs):
        m.d.sync += [we_beats_left.eq(we_beats_left - 1), *(b.eq(b + 1) for b in we_beat_c)]
    with m.If(we_busy & ((we_beats_left == 0) | ((we_beats_left == 1) & w_hs)) & (~axi.awvalid | aw_hs)):
        m.d.sync += we_busy.eq(0)
    m.d.sync += [we_bcnt.eq(we_bcnt + sh.we_start - b_hs),
                 Assert(~(sh.we_start & we_busy), "qp_cache: write engine started while busy\n")]
    m.d.comb += [sh.we_done.eq(b_hs), sh.we_err.eq(b_hs & (axi.bresp != 0))]
