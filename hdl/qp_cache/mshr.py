"""The miss-status holding register (``mshr_``): one outstanding miss, its fetch, its victim's
write-back and the install.

The MSHR is a machine of flags rather than an ``m.FSM``: the fetch (AR, then ten R beats) runs
from the allocation on, beside the victim's read, capture and write-back.

=================  =========================  ======================  ==========================================
Phase              Entered from               Leaves to               Waits for
=================  =========================  ======================  ==========================================
Idle               reset; Install             Read-Victim, at         an ``s1`` miss that may allocate
                                              ``alloc`` (ARVALID      (``alloc``); meanwhile its registers follow
                                              rises, victim hidden)   ``s1`` and its set's victim
Read-Victim        Idle                       Capture, next clock     nothing: ``mut_rp`` reads the victim's
                                                                      mutable bytes, its valid and dirty bits
                                                                      set ``mshr_wb_go``
Capture            Read-Victim                Start-Write-Back if     nothing: ``wb_buf`` takes the bytes
                                              ``mshr_wb_go``, else
                                              Wait
Start-Write-Back   Capture                    Wait                    nothing: ``we_start`` (``wb_addr`` is
                                                                      ready by then)
Wait               Capture, Start-Write-Back  Install                 RLAST (``mshr_r_done``) and, if one was
                                                                      started, the write-back's B
                                                                      (``mshr_wb_done``): ``fill_ready``
Install            Wait                       Idle                    ``s2`` free (``~s2_valid | resp.ready``):
                                                                      the fill enters ``s2``, the tag is written
                                                                      (or, after a bus error, the victim restored)
=================  =========================  ======================  ==========================================

The phases are flags: Idle is ``~mshr_busy``, Read-Victim ``mshr_rd``, Capture ``mshr_cap``,
Start-Write-Back ``mshr_ws`` (each one clock), Wait ``mshr_busy`` until Install, ``mshr_load``.
"""

from amaranth import Cat, Mux
from amaranth.hdl import Assert

from .layouts import FILL_BEATS, WB_BEATS

__all__ = ["allocate", "capture_victim", "fetch_install"]


def allocate(m, sh):
    """Allocation: while the MSHR is idle its registers (and ``wb_idx``, unless the control FSM
    owns it) follow ``s1`` and its victim; ``alloc`` makes it busy, starts the fetch's AR and hides
    the victim (clears its valid bit)."""
    axi, E = sh.cache.m_axi, sh.E
    mshr_busy, s1_req, victim_idx, c_own = sh.mshr_busy, sh.s1_req, sh.victim_idx, sh.c_own
    wb_idx, alloc = sh.wb_idx, sh.alloc
    # allocation: the MSHR's registers follow s1 and its victim while the MSHR is idle
    with m.If(~mshr_busy):
        m.d.sync += [
            sh.mshr_req.eq(s1_req), sh.mshr_idx.eq(victim_idx), sh.mshr_victim_valid.eq(sh.victim_valid),
            axi.araddr.eq(sh.rec_addr(s1_req.qpn)),
            sh.mshr_captured.eq(0), sh.mshr_wb_need.eq(0), sh.mshr_wb_done.eq(0), sh.mshr_r_done.eq(0),
            sh.mshr_err.eq(0), sh.mshr_wb_err.eq(0),
        ]
    with m.If(~mshr_busy & ~c_own):
        m.d.sync += wb_idx.eq(victim_idx)
    m.d.sync += [
        Assert(~mshr_busy | (wb_idx == sh.mshr_idx), "qp_cache: wb_idx (MSHR)\n"),
        Assert(~c_own | (wb_idx == sh.c_idx), "qp_cache: wb_idx (control)\n"),
        Assert(~(mshr_busy & c_own), "qp_cache: MSHR and control own wb_idx\n"),
    ]
    m.d.sync += sh.mshr_rd.eq(alloc)
    with m.If(alloc):
        m.d.sync += [mshr_busy.eq(1), axi.arvalid.eq(1)]
    for i in range(E):
        with m.If(alloc & sh.victim_oh[i]):          # hide the victim
            m.d.sync += sh.valid[i].eq(0)


def capture_victim(m, sh):
    """Read-Victim, Capture and Start-Write-Back: the victim's mutable bytes into ``wb_buf`` and,
    if it is valid and dirty, its write-back."""
    mshr_rd, mshr_cap, mshr_wb_go = sh.mshr_rd, sh.mshr_cap, sh.mshr_wb_go
    # after allocation: one clock to read the victim's mutable bytes and its dirty bit (whether
    # to write it back), one to capture the bytes (nothing can write the hidden victim meanwhile),
    # then the write-back starts
    m.d.sync += [mshr_cap.eq(mshr_rd), sh.mshr_ws.eq(mshr_cap & mshr_wb_go)]
    with m.If(mshr_rd):
        m.d.sync += mshr_wb_go.eq(sh.mshr_victim_valid & sh.dirty_a[sh.mshr_idx])
    with m.If(mshr_cap):
        m.d.sync += [
            sh.mshr_captured.eq(1),
            sh.mshr_wb_need.eq(mshr_wb_go),
            sh.wb_buf.eq(sh.mut_rp.data),
        ]
    with m.If(sh.mshr_ws):
        m.d.comb += [
            sh.we_start.eq(1), sh.we_from_ctrl.eq(0), sh.we_start_len.eq(WB_BEATS - 1),
            sh.we_start_addr.eq(sh.wb_addr),
        ]


def fetch_install(m, sh):
    """The fetch (AR, R beats into ``fill_buf``), the write-back's completion, ``fill_ready`` and
    the install (``mshr_load``), or the victim's restore after a bus error; the evictions event."""
    axi, W, tw = sh.cache.m_axi, sh.W, sh.tw
    mshr_busy, mshr_r_done, mshr_err, mshr_wb_err = sh.mshr_busy, sh.mshr_r_done, sh.mshr_err, sh.mshr_wb_err
    mshr_cap, mshr_wb_go, mshr_wb_need, mshr_wb_done = sh.mshr_cap, sh.mshr_wb_go, sh.mshr_wb_need, sh.mshr_wb_done
    mshr_load, mshr_idx, mshr_victim_valid = sh.mshr_load, sh.mshr_idx, sh.mshr_victim_valid
    fill_buf, fill_ready, we_done, we_err = sh.fill_buf, sh.fill_ready, sh.we_done, sh.we_err
    valid_a, dirty_a, tag_wp = sh.valid_a, sh.dirty_a, sh.tag_wp
    # ===== MSHR: fetch, write-back, install ==============================================
    with m.If(axi.arvalid & axi.arready):
        m.d.sync += axi.arvalid.eq(0)
    m.d.comb += [
        axi.arlen.eq(FILL_BEATS - 1), axi.arsize.eq(3), axi.arburst.eq(1), axi.arid.eq(0),
        axi.rready.eq(mshr_busy & ~mshr_r_done),
    ]
    r_last = axi.rvalid & axi.rready & axi.rlast
    with m.If(axi.rvalid & axi.rready):
        m.d.sync += fill_buf.eq(Cat(fill_buf[64:], axi.rdata))
        with m.If(axi.rresp != 0):
            m.d.sync += mshr_err.eq(1)
        with m.If(axi.rlast):
            m.d.sync += mshr_r_done.eq(1)
    with m.If(mshr_busy & we_done):
        m.d.sync += mshr_wb_done.eq(1)
        with m.If(we_err):
            m.d.sync += [mshr_err.eq(1), mshr_wb_err.eq(1)]

    # fill_ready: the next state of busy & r_done & captured & (~wb_need | wb_done)
    wb_need_next = Mux(mshr_cap, mshr_wb_go, mshr_wb_need)
    m.d.sync += [
        fill_ready.eq(mshr_busy & ~mshr_load & (mshr_r_done | r_last) & (sh.mshr_captured | mshr_cap) &
                      (~wb_need_next | mshr_wb_done | we_done)),
        Assert(fill_ready == (mshr_busy & mshr_r_done & sh.mshr_captured & (~mshr_wb_need | mshr_wb_done)),
               "qp_cache: fill_ready\n"),
    ]
    with m.If(mshr_load):
        m.d.sync += mshr_busy.eq(0)
        with m.If(mshr_err):
            # restore the victim; it stays dirty only if its write-back failed
            m.d.sync += valid_a[mshr_idx].eq(mshr_victim_valid)
            with m.If(mshr_wb_need & ~mshr_wb_err):
                m.d.sync += dirty_a[mshr_idx].eq(0)
        with m.Else():
            m.d.sync += [
                valid_a[mshr_idx].eq(1), dirty_a[mshr_idx].eq(0),
            ]
            m.d.comb += [
                tag_wp.addr.eq(sh.mshr_set), tag_wp.data.eq(sh.mshr_req.qpn[:tw].replicate(W)),
                tag_wp.en.eq(1 << sh.mshr_way if W > 1 else 1),
            ]
    m.d.sync += sh.ev["evictions"].eq(mshr_load & ~mshr_err & mshr_victim_valid)
