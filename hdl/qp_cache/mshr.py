"""The miss-status holding registers (MSHRs): ``cfg.mshrs`` misses outstanding, each with its fetch,
its victim's write-back and its install.

The slots are used in ring order: a miss allocates the slot at ``tail``; the slot at ``head``, the
oldest, installs next. Every fetch is a read burst of the same AXI ID, so the data of the bursts
comes back in allocation order: the head's burst fills ``fill_buf`` and the next slot's data waits
(``rready`` low) until the head has installed. One slot at a time goes through the victim's steps
(Read-Victim, Capture, Start-Write-Back: ``cap_i``); a slot's write-back B is matched to it through a
queue of slots in write-back order. A slot is a machine of flags rather than an ``m.FSM``: the fetch
(AR, then ten R beats) runs from the allocation on, beside the victim's read, capture and write-back.

=================  =========================  ======================  ==========================================
Phase              Entered from               Leaves to               Waits for
=================  =========================  ======================  ==========================================
Idle               reset; Install             Read-Victim, at         an ``s1`` miss that may allocate
                                              ``alloc`` (its AR is    (``alloc``); meanwhile its registers follow
                                              queued, victim hidden)  ``s1`` and its set's victim
Read-Victim        Idle                       Capture, next clock     nothing: ``mut_rp`` reads the victim's
                                                                      mutable bytes, its valid and dirty bits
                                                                      set ``mshr_wb_go``
Capture            Read-Victim                Start-Write-Back if     nothing: ``wb_buf`` takes the bytes (and
                                              ``mshr_wb_go``, else    the slot the victim's QPN)
                                              Wait
Start-Write-Back   Capture                    Wait                    nothing: ``we_start`` (``wb_addr`` is
                                                                      ready by then)
Wait               Capture, Start-Write-Back  Install                 its last R beat (at the head) and, if one
                                                                      was started, its write-back's B:
                                                                      ``fill_ready``
Install            Wait                       Idle                    ``s2`` free (``~s2_valid | resp.ready``):
                                                                      the fill enters ``s2``, the tag is written
                                                                      (or, after a bus error, the victim restored)
=================  =========================  ======================  ==========================================

With one slot the phases are flags: Idle is ``~mshr_busy``, Read-Victim ``mshr_rd``, Capture ``mshr_cap``,
Start-Write-Back ``mshr_ws`` (each one clock), Wait ``mshr_busy`` until Install, ``mshr_load``.

With several slots a miss allocates (:func:`allocation_gate`) when the tail slot is free, the victim
steps of the last allocation are over (four clocks) and the write engine has sent its last burst's
data (its B may be outstanding); when its set has a way no outstanding miss holds; and when its QPN
is neither an outstanding miss's nor a hidden victim's. A request for a QP being fetched merges into
its slot (:func:`merge`, two per slot); one for a hidden victim, or a third for a slot, waits in
``s1`` until that slot installs.
"""

from amaranth import Cat, Const, Mux, Signal
from amaranth.hdl import Assert

from .layouts import FILL_BEATS, WB_BEATS

__all__ = ["allocation_gate", "merge", "allocate", "capture_victim", "fetch_install"]


def allocation_gate(m, sh):
    """Whether a miss in ``s1`` may allocate a slot (``may_a`` / ``may_b``, for ``s1``'s decision from
    ``s0``'s / its own compare; ``vict_stale`` is applied there) or merge into one (``merge_a`` /
    ``merge_b``), from registers. With several slots, the compares of the incoming QPN and of ``s1``'s
    against the busy slots' QPNs (``*_match``, one-hot) and their victims' (``*_vict``) are registered
    like the tag compares, and so is whether the QPN's set has every way held (``*_none``); they are fresh,
    or err on the side of waiting, when no allocation or capture happened in the two clocks before and no
    install at the edge before, which ``alloc_ok`` and ``s1``'s wait after an install (``load_d``) ensure."""
    N = sh.N
    if N == 1:
        sh.may_a = sh.may_b = ~sh.mshr_busy
        sh.merge_a = sh.merge_b = Const(0, 1)
        return
    Q = sh.Q
    # a register, from the clock before (so a clock later than it could be): the tail slot is free, no
    # allocation then and none of its victim steps since, and the write engine idle and not starting
    alloc_ok = Signal()          # loaded in allocate()

    def match(qpn):
        return Cat(*[sh.m_busy[i] & (sh.m_req[i].qpn[:Q] == qpn[:Q]) for i in range(N)])

    def victim(qpn):
        return Cat(*[sh.m_busy[i] & sh.m_vv[i] & (sh.m_vtag[i] == qpn[:Q]) for i in range(N)]).any()
    a_match, b_match = Signal(N), Signal(N)       # the QPN is a busy slot's (one-hot)
    a_vict, b_vict = Signal(), Signal()           # the QPN is a busy slot's victim
    a_none, b_none = Signal(), Signal()           # every way of the QPN's set is held
    req_qpn = sh.cache.req.payload.qpn
    m.d.sync += [a_match.eq(match(req_qpn)), b_match.eq(match(sh.s1_req.qpn)),
                 a_vict.eq(victim(req_qpn)), b_vict.eq(victim(sh.s1_req.qpn)),
                 a_none.eq(sh.vr_none[sh.set_of(req_qpn)]), b_none.eq(sh.vr_none[sh.s1_set])]
    room = Cat(*[sh.m_cnt[i] != sh.merges for i in range(N)])
    sh.a_match, sh.b_match, sh.alloc_ok = a_match, b_match, alloc_ok
    sh.may_a = alloc_ok & ~a_match.any() & ~a_vict & ~a_none
    sh.may_b = alloc_ok & ~b_match.any() & ~b_vict & ~b_none
    sh.merge_a = (a_match & room).any()
    sh.merge_b = (b_match & room).any()


def merge(m, sh):
    """A miss for a QP being fetched joins that slot's merged requests (``merge``, decided in ``s1``),
    and the replay: from the install on, ``s2`` takes the slot's merged requests in order, each answered
    from the record the clock before wrote (``fwd_rec``), or BUS_ERROR if the install failed; ``s1``
    and the next install wait meanwhile."""
    N, K = sh.N, sh.merges
    if N == 1:
        return
    slot = sh.encode(Mux(sh.took, sh.a_match, sh.b_match))
    # a busy slot's next free place follows s1's request; a merge keeps it by counting it (an idle slot's
    # places hold still: the replay reads them after the install)
    for i in range(N):
        for k in range(K):
            with m.If(sh.m_busy[i] & (sh.m_cnt[i] == k)):
                m.d.sync += sh.m_q[i][k].eq(sh.s1_req)
        with m.If(~sh.m_busy[i]):
            m.d.sync += sh.m_cnt[i].eq(0)
        with m.If(sh.merge & (slot == i)):
            m.d.sync += sh.m_cnt[i].eq(sh.m_cnt[i] + 1)
    head_cnt = sh.slot(sh.m_cnt, sh.head)
    with m.If(sh.mshr_load & (head_cnt != 0)):
        m.d.sync += [sh.replaying.eq(1), sh.rp_slot.eq(sh.head), sh.rp_pos.eq(0), sh.rp_last.eq(head_cnt - 1),
                     sh.rp_idx.eq(sh.mshr_idx), sh.rp_err.eq(sh.mshr_err)]
    with m.If(sh.replay_now):
        m.d.sync += sh.rp_pos.eq(sh.rp_pos + 1)
        with m.If(sh.rp_pos == sh.rp_last):
            m.d.sync += sh.replaying.eq(0)
    m.d.sync += Assert(~sh.merge | sh.slot(sh.m_busy, slot), "qp_cache: merge into an idle slot\n")


def allocate(m, sh):
    """Allocation: each idle slot's registers follow ``s1`` and its victim; ``alloc`` makes the tail slot
    busy, queues its fetch's AR (``araddr`` follows ``s1`` while the AR channel is idle, so an AR with none
    queued goes out at once) and hides the victim (clears its valid bit). ``wb_idx`` follows the victim
    until an allocation's victim steps take it."""
    axi, E, N = sh.cache.m_axi, sh.E, sh.N
    mshr_busy, s1_req, victim_idx, c_own = sh.mshr_busy, sh.s1_req, sh.victim_idx, sh.c_own
    wb_idx, alloc = sh.wb_idx, sh.alloc
    for i in range(N):
        with m.If(~sh.m_busy[i]):
            m.d.sync += [sh.m_req[i].eq(s1_req), sh.m_idx[i].eq(victim_idx), sh.m_vv[i].eq(sh.victim_valid),
                         sh.m_captured[i].eq(0), sh.m_wb_need[i].eq(0), sh.m_wb_done[i].eq(0),
                         sh.m_wb_err[i].eq(0)]
    with m.If(axi.arvalid & axi.arready):
        m.d.sync += axi.arvalid.eq(0)
    if N == 1:
        with m.If(~mshr_busy):
            m.d.sync += axi.araddr.eq(sh.rec_addr(s1_req.qpn))
        with m.If(~mshr_busy & ~c_own):
            m.d.sync += wb_idx.eq(victim_idx)
        with m.If(alloc):
            m.d.sync += [mshr_busy.eq(1), axi.arvalid.eq(1)]
        m.d.sync += Assert(~mshr_busy | (wb_idx == sh.mshr_idx), "qp_cache: wb_idx (MSHR)\n")
    else:
        m.d.sync += sh.alloc_ok.eq(~sh.slot(sh.m_busy, sh.tail) & ~alloc & ~sh.mshr_rd & ~sh.mshr_cap &
                                   ~sh.mshr_ws & ~sh.we_busy)
        ar_cnt = Signal(range(N + 1))    # allocated slots whose AR has not been put on the channel
        ar_ptr = Signal(range(N))        # the slot whose AR goes on the channel next
        ar_free = ~axi.arvalid & (ar_cnt == 0)
        issue = (ar_cnt != 0) & (~axi.arvalid | axi.arready)
        with m.If(ar_free):
            m.d.sync += axi.araddr.eq(sh.rec_addr(s1_req.qpn))
        with m.If(issue):
            m.d.sync += [axi.arvalid.eq(1), axi.araddr.eq(sh.rec_addr(sh.slot(sh.m_req, ar_ptr).qpn)),
                         ar_ptr.eq(ar_ptr + 1)]
        with m.If(alloc & ar_free):
            m.d.sync += [axi.arvalid.eq(1), ar_ptr.eq(ar_ptr + 1)]
        m.d.sync += ar_cnt.eq(ar_cnt + (alloc & ~ar_free) - issue)
        with m.If(~sh.mshr_rd & ~sh.mshr_cap & ~sh.mshr_ws & ~c_own):
            m.d.sync += wb_idx.eq(victim_idx)
        with m.If(alloc):
            m.d.sync += [sh.tail.eq(sh.tail + 1), sh.cap_i.eq(sh.tail), sh.alloc_vidx.eq(victim_idx),
                         sh.cap_vv.eq(sh.victim_valid)]
            for i in range(N):
                with m.If(sh.tail == i):
                    m.d.sync += sh.m_busy[i].eq(1)
        m.d.sync += [
            Assert(~sh.mshr_rd | (wb_idx == sh.cap_idx), "qp_cache: wb_idx (MSHR)\n"),
            Assert(~sh.slot(sh.m_busy, sh.cap_i) | ((sh.alloc_vidx == sh.cap_idx) &
                                                    (sh.cap_vv == sh.slot(sh.m_vv, sh.cap_i))),
                   "qp_cache: alloc_vidx, cap_vv\n"),
            Assert(~alloc | ~sh.slot(sh.m_busy, sh.tail), "qp_cache: allocation of a busy slot\n"),
        ]
        for i in range(E):
            with m.If(alloc & sh.victim_oh[i]):
                m.d.sync += sh.held[i].eq(1)
    m.d.sync += [
        Assert(~c_own | (wb_idx == sh.c_idx), "qp_cache: wb_idx (control)\n"),
        Assert(~(mshr_busy & c_own), "qp_cache: MSHR and control own wb_idx\n"),
    ]
    m.d.sync += sh.mshr_rd.eq(alloc)
    for i in range(E):
        with m.If(alloc & sh.victim_oh[i]):          # hide the victim
            m.d.sync += sh.valid[i].eq(0)


def capture_victim(m, sh):
    """Read-Victim, Capture and Start-Write-Back of the newest allocation (slot ``cap_i``): the victim's
    mutable bytes into ``wb_buf`` and, if it is valid and dirty, its write-back."""
    mshr_rd, mshr_cap, mshr_wb_go, N = sh.mshr_rd, sh.mshr_cap, sh.mshr_wb_go, sh.N
    # after allocation: one clock to read the victim's mutable bytes and its dirty bit (whether
    # to write it back), one to capture the bytes (nothing can write the hidden victim meanwhile),
    # then the write-back starts
    m.d.sync += [mshr_cap.eq(mshr_rd), sh.mshr_ws.eq(mshr_cap & mshr_wb_go)]
    with m.If(mshr_rd):
        m.d.sync += mshr_wb_go.eq(sh.cap_vv & sh.dirty_a[sh.wb_idx])
    with m.If(mshr_cap):
        m.d.sync += sh.wb_buf.eq(sh.mut_rp.data)
        for i in range(N):
            with m.If(sh.cap_i == i if N > 1 else 1):
                m.d.sync += [sh.m_captured[i].eq(1), sh.m_wb_need[i].eq(mshr_wb_go)]
                if N > 1:
                    m.d.sync += sh.m_vtag[i].eq(sh.wb_tag)
    with m.If(sh.mshr_ws):
        m.d.comb += [
            sh.we_start.eq(1), sh.we_from_ctrl.eq(0), sh.we_start_len.eq(WB_BEATS - 1),
            sh.we_start_addr.eq(sh.wb_addr),
        ]


def fetch_install(m, sh):
    """The head's fetch (R beats into ``fill_buf``), the write-backs' completions, ``fill_ready`` and
    the install (``mshr_load``), or the victim's restore after a bus error; the evictions event."""
    axi, W, tw, N = sh.cache.m_axi, sh.W, sh.tw, sh.N
    mshr_r_done, mshr_f_err, mshr_err = sh.mshr_r_done, sh.mshr_f_err, sh.mshr_err
    mshr_cap, mshr_wb_go, mshr_wb_need, mshr_wb_done = sh.mshr_cap, sh.mshr_wb_go, sh.mshr_wb_need, sh.mshr_wb_done
    mshr_load, mshr_idx, mshr_victim_valid = sh.mshr_load, sh.mshr_idx, sh.mshr_victim_valid
    fill_buf, fill_ready, we_done, we_err = sh.fill_buf, sh.fill_ready, sh.we_done, sh.we_err
    valid_a, dirty_a, tag_wp = sh.valid_a, sh.dirty_a, sh.tag_wp
    head_busy = sh.slot(sh.m_busy, sh.head)
    head_captured = sh.slot(sh.m_captured, sh.head)
    # ===== fetch, write-back, install ====================================================
    # R data is always the head's: with several slots, an outstanding fetch means a busy head
    m.d.comb += [
        axi.arlen.eq(FILL_BEATS - 1), axi.arsize.eq(3), axi.arburst.eq(1), axi.arid.eq(0),
        axi.rready.eq((head_busy if N == 1 else 1) & ~mshr_r_done),
    ]
    r_last = axi.rvalid & axi.rready & axi.rlast
    with m.If(axi.rvalid & axi.rready):
        m.d.sync += fill_buf.eq(Cat(fill_buf[64:], axi.rdata))
        with m.If(axi.rresp != 0):
            m.d.sync += mshr_f_err.eq(1)
        with m.If(axi.rlast):
            m.d.sync += mshr_r_done.eq(1)
    if N == 1:
        cap_head = mshr_cap
        b_head = we_done
        with m.If(sh.mshr_busy & we_done):
            m.d.sync += sh.m_wb_done[0].eq(1)
            with m.If(we_err):
                m.d.sync += sh.m_wb_err[0].eq(1)
    else:
        # the slots whose write-back B is outstanding, in write-back order
        wbq = [Signal(range(N), name=f"wbq{i}") for i in range(N)]
        wq_w, wq_r = Signal(range(N)), Signal(range(N))
        wq_n = Signal(range(N + 1))
        b_mshr = we_done & (wq_n != 0)
        b_slot = sh.slot(wbq, wq_r)
        with m.If(sh.mshr_ws):
            m.d.sync += wq_w.eq(wq_w + 1)
            for i in range(N):
                with m.If(wq_w == i):
                    m.d.sync += wbq[i].eq(sh.cap_i)
        with m.If(b_mshr):
            m.d.sync += wq_r.eq(wq_r + 1)
            for i in range(N):
                with m.If(b_slot == i):
                    m.d.sync += sh.m_wb_done[i].eq(1)
                    with m.If(we_err):
                        m.d.sync += sh.m_wb_err[i].eq(1)
        m.d.sync += wq_n.eq(wq_n + sh.mshr_ws - b_mshr)
        cap_head = mshr_cap & (sh.cap_i == sh.head)
        b_head = b_mshr & (b_slot == sh.head)

    # fill_ready: the next state of head busy & r_done & captured & (~wb_need | wb_done), 0 after an install
    wb_need_next = Mux(cap_head, mshr_wb_go, mshr_wb_need)
    m.d.sync += [
        Assert(~(axi.rvalid & axi.rready) | head_busy, "qp_cache: R data with no fetch outstanding\n"),
        fill_ready.eq((head_busy if N == 1 else 1) & ~mshr_load & (mshr_r_done | r_last) & (head_captured | cap_head) &
                      (~wb_need_next | mshr_wb_done | b_head)),
        Assert(fill_ready == (head_busy & mshr_r_done & head_captured & (~mshr_wb_need | mshr_wb_done)),
               "qp_cache: fill_ready\n"),
    ]
    with m.If(mshr_load):
        m.d.sync += [mshr_r_done.eq(0), mshr_f_err.eq(0)]
        if N == 1:
            m.d.sync += sh.mshr_busy.eq(0)
        else:
            m.d.sync += sh.head.eq(sh.head + 1)
            for i in range(N):
                with m.If(sh.head == i):
                    m.d.sync += sh.m_busy[i].eq(0)
            for i in range(sh.E):
                with m.If(mshr_idx == i):
                    m.d.sync += sh.held[i].eq(0)
        with m.If(mshr_err):
            # restore the victim; it stays dirty only if its write-back failed
            m.d.sync += valid_a[mshr_idx].eq(mshr_victim_valid)
            with m.If(mshr_wb_need & ~sh.slot(sh.m_wb_err, sh.head)):
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
