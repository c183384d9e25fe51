"""The control path of the QP context cache: MODIFY / INVALIDATE / FLUSH from the ``ctrl`` port.

The control FSM stops accepting requests, waits until the pipeline, the MSHRs and the write engine
are empty, then owns the tags, the data memory and the AXI write channel, so software's changes
and the engine's updates are strictly ordered. :func:`control_fsm` has its state table.
"""

from amaranth import Cat, Signal
from amaranth.hdl import Assert

from ...model.qpc import QPN_WIDTH
from .layouts import BEATS, WB_BEATS, CtrlOp, Status

__all__ = ["control_compare", "control_fsm"]


def control_compare(m, sh):
    """The control FSM's registers and its own compare of the control port's QPN (``cq``),
    registered every clock (``cc_*``); whether the cache is drained; the errors and write-backs
    events. Leaves in ``sh`` what :func:`control_fsm` uses."""
    cache, E, idx_bits = sh.cache, sh.E, sh.idx_bits
    ev = sh.ev
    # ===== control FSM ======================================================================
    # The control port's QPN is registered (cq) and has a compare of its own, registered every
    # clock; the FSM uses it once it has waited in Drain a clock (cq holds the payload) and the
    # cache has been drained since the clock before (nothing changed since the compare).
    c_op = cache.ctrl.payload.op
    c_status = Signal(Status)
    c_cnt = Signal(range(E + 1))     # flush position
    c_hit, c_bad, c_dirty = Signal(), Signal(), Signal()
    c_vd = Signal()                  # flush: entry c_idx is valid and dirty
    c_vds = Signal(E)                # flush: valid & dirty of entries c_cnt.., shifted as it scans
    cq = Signal(QPN_WIDTH)
    cq_low = Signal()                # cq < 2**Q: it may be cached (a control operation reaches any QPN)
    c_waited = Signal()              # the FSM was in Drain the clock before
    cc_hit, cc_idx, cc_bad = Signal(), Signal(idx_bits), Signal()
    c_cmp_hit, c_cmp_idx = sh.compare(cq, "c_hit", sh.tag_rp[3])
    drained = ~sh.s1_valid & ~sh.s2_valid & ~sh.mshr_busy & ~sh.we_busy & (sh.we_bcnt == 0)
    drained_d = Signal()
    m.d.sync += [
        cq.eq(cache.ctrl.payload.qpn),
        cq_low.eq(~sh.uncacheable(cache.ctrl.payload.qpn)),
        cc_hit.eq(c_cmp_hit & cq_low), cc_idx.eq(c_cmp_idx), cc_bad.eq(cq >= cache.table_size),
        drained_d.eq(drained),
    ]
    wb_ev = Signal()
    m.d.sync += [
        ev["errors"].eq((sh.s1_advance & sh.s1_bad_r) | (sh.mshr_load & sh.mshr_err) |
                        (sh.replay_now & sh.rp_err if sh.N > 1 else 0)),
        ev["writebacks"].eq(sh.mshr_ws | wb_ev),
    ]

    sh.c_op, sh.c_status, sh.c_cnt, sh.c_hit, sh.c_bad, sh.c_dirty = c_op, c_status, c_cnt, c_hit, c_bad, c_dirty
    sh.c_vd, sh.c_vds, sh.c_waited = c_vd, c_vds, c_waited
    sh.cc_hit, sh.cc_idx, sh.cc_bad = cc_hit, cc_idx, cc_bad
    sh.drained, sh.drained_d, sh.wb_ev = drained, drained_d, wb_ev


def control_fsm(m, sh):
    """The control FSM (``ctrl_fsm``). It blocks requests (``ctrl_block``) from the clock
    ``ctrl.valid`` is seen until its acknowledgement transfers, in the same clock as the ``ctrl``
    request (``ctrl.ready``).

    ===========  ==========================  ===============================  ===================================
    State        Entered from                Leaves to                        Waits for
    ===========  ==========================  ===============================  ===================================
    Idle         reset; Ack                  Drain                            ``ctrl.valid``
    Drain        Idle                        Decide (takes the registered     the cache drained since the clock
                                             compare, owns ``wb_idx``)        before (``drained_d``) and a clock
                                                                              in Drain (``c_waited``)
    Decide       Drain                       Ack (BAD_QPN; INVALIDATE of a    nothing: one clock between the
                                             clean or absent entry), Write    compare and what it decides
                                             (MODIFY), Read-Addr
                                             (INVALIDATE of a dirty hit),
                                             Flush-Scan (FLUSH)
    Flush-Scan   Decide, Flush-Entry,        Flush-Entry (next entry), Ack    nothing
                 Write-Back (FLUSH)          (all entries scanned)
    Flush-Entry  Flush-Scan                  Read-Addr (valid and dirty),     nothing
                                             Flush-Scan (else, invalidated)
    Read-Addr    Decide, Flush-Entry         Read-Entry                       nothing: ``mut_rp`` reads ``c_idx``
    Read-Entry   Read-Addr                   Write-Back                       nothing: captures the mutable
                                                                              bytes, starts their write-back
    Write-Back   Read-Entry                  Flush-Scan (FLUSH), Ack          the write engine's B
                                             (INVALIDATE)                     (``we_done``)
    Write        Decide                      Ack                              the write engine's B (``we_done``)
    Ack          Decide, Flush-Scan,         Idle                             ``ack.ready``
                 Write-Back, Write
    ===========  ==========================  ===============================  ===================================
    """
    cache, E, idx_bits = sh.cache, sh.E, sh.idx_bits
    ctrl_block, valid_a, dirty_a, c_idx, wb_idx = sh.ctrl_block, sh.valid_a, sh.dirty_a, sh.c_idx, sh.wb_idx
    c_op, c_status, c_cnt, c_hit, c_dirty = sh.c_op, sh.c_status, sh.c_cnt, sh.c_hit, sh.c_dirty
    c_vd, c_vds, c_waited = sh.c_vd, sh.c_vds, sh.c_waited
    we_start, we_from_ctrl = sh.we_start, sh.we_from_ctrl
    we_start_len, we_start_addr = sh.we_start_len, sh.we_start_addr
    we_done, we_err = sh.we_done, sh.we_err
    with m.FSM(name="ctrl_fsm"):
        with m.State("Idle"):
            with m.If(cache.ctrl.valid):
                m.d.comb += ctrl_block.eq(1)
                m.d.sync += [c_status.eq(Status.OK), c_cnt.eq(0)]
                m.next = "Drain"
        with m.State("Drain"):
            m.d.comb += ctrl_block.eq(1)
            m.d.sync += c_waited.eq(1)
            with m.If(sh.drained_d & c_waited):
                m.d.sync += [c_hit.eq(sh.cc_hit), sh.c_bad.eq(sh.cc_bad), c_idx.eq(sh.cc_idx),
                             c_dirty.eq(dirty_a[sh.cc_idx]), wb_idx.eq(sh.cc_idx), sh.c_own.eq(1), c_waited.eq(0),
                             Assert(sh.drained, "qp_cache: drained\n")]
                m.next = "Decide"
        with m.State("Decide"):
            # one clock between the compare and what it decides
            m.d.comb += ctrl_block.eq(1)
            with m.If((c_op != CtrlOp.FLUSH) & sh.c_bad):
                m.d.sync += c_status.eq(Status.BAD_QPN)
                m.next = "Ack"
            with m.Elif(c_op == CtrlOp.MODIFY):
                with m.If(c_hit):
                    m.d.sync += [valid_a[c_idx].eq(0), dirty_a[c_idx].eq(0)]
                m.d.comb += [
                    we_start.eq(1), we_from_ctrl.eq(1), we_start_len.eq(BEATS - 1),
                    we_start_addr.eq(sh.rec_addr(cache.ctrl.payload.qpn)),
                ]
                m.next = "Write"
            with m.Elif(c_op == CtrlOp.INVALIDATE):
                with m.If(c_hit & c_dirty):
                    m.next = "Read-Addr"
                with m.Else():
                    with m.If(c_hit):
                        m.d.sync += valid_a[c_idx].eq(0)
                    m.next = "Ack"
            with m.Else():
                m.d.sync += c_vds.eq(Cat(*sh.valid) & Cat(*sh.dirty))
                m.next = "Flush-Scan"
        with m.State("Flush-Scan"):
            # entries are changed only once scanned: c_vds, taken in Decide, holds for the rest
            m.d.comb += ctrl_block.eq(1)
            with m.If(c_cnt == E):
                m.next = "Ack"
            with m.Else():
                m.d.sync += [
                    c_idx.eq(c_cnt), wb_idx.eq(c_cnt), c_cnt.eq(c_cnt + 1),
                    c_vd.eq(c_vds[0]), c_vds.eq(c_vds >> 1),
                    Assert(c_vds[0] == (valid_a[c_cnt[:idx_bits]] & dirty_a[c_cnt[:idx_bits]]),
                           "qp_cache: c_vds\n"),
                ]
                m.next = "Flush-Entry"
        with m.State("Flush-Entry"):
            m.d.comb += ctrl_block.eq(1)
            with m.If(c_vd):
                m.next = "Read-Addr"
            with m.Else():
                m.d.sync += valid_a[c_idx].eq(0)
                m.next = "Flush-Scan"
        with m.State("Read-Addr"):
            m.d.comb += [ctrl_block.eq(1), sh.ctrl_rd.eq(1)]
            m.next = "Read-Entry"
        with m.State("Read-Entry"):
            m.d.comb += [ctrl_block.eq(1), sh.wb_ev.eq(1)]
            m.d.sync += sh.wb_buf.eq(sh.mut_rp.data)
            m.d.comb += [
                we_start.eq(1), we_from_ctrl.eq(0), we_start_len.eq(WB_BEATS - 1),
                we_start_addr.eq(sh.wb_addr),
            ]
            m.next = "Write-Back"
        with m.State("Write-Back"):
            m.d.comb += ctrl_block.eq(1)
            with m.If(we_done):
                with m.If(we_err):
                    m.d.sync += c_status.eq(Status.BUS_ERROR)
                with m.Else():
                    m.d.sync += [valid_a[c_idx].eq(0), dirty_a[c_idx].eq(0)]
                with m.If(c_op == CtrlOp.FLUSH):
                    m.next = "Flush-Scan"
                with m.Else():
                    m.next = "Ack"
        with m.State("Write"):
            m.d.comb += ctrl_block.eq(1)
            with m.If(we_done):
                with m.If(we_err):
                    m.d.sync += c_status.eq(Status.BUS_ERROR)
                m.next = "Ack"
        with m.State("Ack"):
            m.d.comb += [ctrl_block.eq(1), cache.ack.valid.eq(1), cache.ack.payload.status.eq(c_status)]
            with m.If(cache.ack.ready):
                m.d.comb += [cache.ctrl.ready.eq(1), sh.ctrl_err.eq(c_status != Status.OK)]
                m.d.sync += sh.c_own.eq(0)
                m.next = "Idle"
