"""The lookup pipeline's back: ``s2`` loads the MSHR's install or ``s1``'s request (with the
record read from the data memory or forwarded), applies the engine's update, writes the record
back and presents the response."""

from amaranth import Cat, Const, Mux, Signal
from amaranth.hdl import Assert
from amaranth.lib import data

from ...model.qpc import CACHED_BITS, MUTABLE_BYTES
from .layouts import Op, QpState, Status, cached_layout, request_layout

__all__ = ["s2_load", "s2_update"]


def s2_load(m, sh):
    """The data memory's read (addressed from ``s1``) and what ``s2`` loads whenever it is free:
    the MSHR's install, else a merged request's replay, else ``s1``'s request; the PLRU touch and the
    lookup / hit / miss / merged events.
    Leaves in ``sh``: ``s2_writes`` (driven by :func:`s2_update`), ``mshr_set``, ``mshr_way``."""
    rp, mut_rp, mut_wp, wp = sh.rp, sh.mut_rp, sh.mut_wp, sh.wp
    way_bits, set_bits, idx_bits = sh.way_bits, sh.set_bits, sh.idx_bits
    s1_req, s1_idx_r, s1_bad_r, s1_hit_r, s1_miss = sh.s1_req, sh.s1_idx_r, sh.s1_bad_r, sh.s1_hit_r, sh.s1_miss
    s1_advance, s2_free, took = sh.s1_advance, sh.s2_free, sh.took
    mshr_idx, mshr_req, mshr_err, mshr_load = sh.mshr_idx, sh.mshr_req, sh.mshr_err, sh.mshr_load
    s2_idx, s2_fwd_c, ev = sh.s2_idx, sh.s2_fwd_c, sh.ev
    # The read port address comes from the tag compare; it reads whenever s2 can take new
    # data, and holds while s2 stalls. mut_rp reads the victim or the control FSM's entry.
    m.d.comb += [
        rp.addr.eq(s1_idx_r),
        rp.en.eq(s2_free),
        mut_rp.addr.eq(sh.wb_idx),
        mut_rp.en.eq(sh.mshr_rd | sh.ctrl_rd),
    ]
    m.d.sync += Assert(~(mut_rp.en & mut_wp.en & (mut_rp.addr == mut_wp.addr)),
                       "qp_cache: mut_mem read of the entry written at the same edge\n")
    s2_writes = Signal()         # s2 writes its record to the data memory at this edge

    # s2 loads whenever it is free: the MSHR's install, else a replay, else s1's request (valid if it advances)
    mshr_set = mshr_idx[way_bits:] if set_bits else Const(0, 1)
    mshr_way = mshr_idx[:way_bits] if way_bits else Const(0, 1)
    # s2's entry against s1's, compared with a_idx and b_idx apiece (took picks): the select of
    # s1_idx_r sits by the data memory it addresses, and this compare stays off it
    fwd_same = Mux(took, Cat(*sh.eq_terms("fwd_a", s2_idx, sh.a_idx, 0, idx_bits)).all(),
                   Cat(*sh.eq_terms("fwd_b", s2_idx, sh.b_idx, 0, idx_bits)).all())
    m.d.sync += Assert(fwd_same == (s2_idx == s1_idx_r), "qp_cache: fwd_same\n")
    if sh.N == 1:
        src_req, src_idx, src_ok, src_upd = s1_req, s1_idx_r, ~s1_bad_r, s1_req.op != Op.LOOKUP
        src_status = Mux(s1_bad_r, Status.BAD_QPN, Status.OK)
        s2v_next = mshr_load | (s1_advance & ~s1_miss)
        fwd_next = mshr_load | (s2_writes & fwd_same)
    else:
        # a merged request replayed: its record is the one s2 writes at this edge (or wrote last)
        replay = sh.replaying
        src_req = Signal(request_layout(sh.cfg), name="s2_src_req")
        m.d.comb += src_req.eq(s1_req)
        for i, queue in enumerate(sh.m_q):
            for k, q in enumerate(queue):
                with m.If(replay & (sh.rp_slot == i) & (sh.rp_pos == k)):
                    m.d.comb += src_req.eq(q)
        src_idx = Mux(replay, sh.rp_idx, s1_idx_r)
        src_ok = Mux(replay, ~sh.rp_err, ~s1_bad_r)
        src_status = Mux(replay, Mux(sh.rp_err, Status.BUS_ERROR, Status.OK),
                         Mux(s1_bad_r, Status.BAD_QPN, Status.OK))
        src_upd = src_req.op != Op.LOOKUP
        s2v_next = mshr_load | sh.replay_now | (s1_advance & ~s1_miss)
        fwd_next = mshr_load | replay | (s2_writes & fwd_same)
    m.d.sync += Assert(~(rp.en & wp.en & (rp.addr == wp.addr)) | fwd_next | ~s2v_next,
                       "qp_cache: data_mem read of the entry written at the same edge, used\n")
    with m.If(s2_free):
        m.d.sync += [
            sh.s2_valid.eq(s2v_next),
            sh.s2_req.eq(Mux(mshr_load, mshr_req, src_req)),
            sh.s2_from_fill.eq(mshr_load),
            sh.s2_status.eq(Mux(mshr_load, Mux(mshr_err, Status.BUS_ERROR, Status.OK), src_status)),
            s2_idx.eq(Mux(mshr_load, mshr_idx, src_idx)),
            # the read port does not see a write at the same edge: forward it
            sh.s2_fwd.eq(fwd_next),
            *(s2_fwd_c[c].eq(v) for c, v in enumerate((fwd_next, fwd_next | ~s2v_next, fwd_next & s2v_next,
                                                       fwd_next ^ ~s2v_next))),
            sh.s2_wr.eq(Mux(mshr_load, ~mshr_err, src_ok & src_upd)),
            sh.s2_upd.eq(Mux(mshr_load, ~mshr_err & (mshr_req.op != Op.LOOKUP), src_ok & src_upd)),
        ]
    m.d.sync += [
        sh.pend_v.eq((s1_advance & ~s1_bad_r & s1_hit_r) | (mshr_load & ~mshr_err)),
        sh.pend_set.eq(Mux(mshr_load, mshr_set, sh.s1_set)),
        sh.pend_way.eq(Mux(mshr_load, mshr_way, s1_idx_r[:way_bits] if way_bits else 0)),
        ev["lookups"].eq(sh.accept),
        ev["hits"].eq(s1_advance & ~s1_bad_r & s1_hit_r),
        ev["misses"].eq(sh.alloc),
        ev["merged"].eq(sh.merge if sh.N > 1 else 0),
    ]

    sh.s2_writes, sh.mshr_set, sh.mshr_way = s2_writes, mshr_set, mshr_way


def s2_update(m, sh):
    """``s2``: applies the request's update to the record, writes it to the data memory (and its
    mutable bytes to ``mut_mem``) as the response transfers, marks the entry dirty, and keeps the
    record written in ``fwd_rec``."""
    resp, wp, mut_wp, rp = sh.cache.resp, sh.wp, sh.mut_wp, sh.rp
    s2_valid, s2_req, s2_idx, s2_status, s2_fwd, s2_fwd_c = (sh.s2_valid, sh.s2_req, sh.s2_idx, sh.s2_status,
                                                             sh.s2_fwd, sh.s2_fwd_c)
    fwd_rec, s2_writes = sh.fwd_rec, sh.s2_writes
    # ===== s2: update, write, respond ====================================================
    quarter = -(-CACHED_BITS // 4)
    s2_data = Cat(*(Mux(s2_fwd_c[c], fwd_rec[c * quarter:(c + 1) * quarter], rp.data[c * quarter:(c + 1) * quarter])
                    for c in range(4)))
    m.d.sync += Assert(~s2_valid | (Cat(*s2_fwd_c) == s2_fwd.replicate(4)), "qp_cache: s2_fwd copies\n")
    rec = Signal(cached_layout)
    m.d.comb += rec.eq(s2_data)
    arg = s2_req.arg
    with m.Switch(s2_req.op):
        with m.Case(Op.SET_PSN):
            m.d.comb += rec.next_psn.eq(arg)
        with m.Case(Op.ADD_PSN):
            m.d.comb += rec.next_psn.eq((s2_data[8:32] + arg)[:24])
        with m.Case(Op.SET_SQ_CI):
            m.d.comb += rec.sq_ci.eq(arg[:16])
            with m.If(arg[16]):
                m.d.comb += rec.rd_pending.eq(data.View(cached_layout, s2_data).rd_pending + 1)
        with m.Case(Op.SET_ERROR):
            m.d.comb += rec.state.eq(QpState.ERROR)
        with m.Case(Op.SET_EPSN):
            m.d.comb += rec.epsn.eq(arg)
        with m.Case(Op.SET_SQ_PI):
            m.d.comb += rec.sq_pi.eq(arg[:16])
        with m.Case(Op.SET_REQ):
            old_rd = data.View(cached_layout, s2_data).rd_pending
            m.d.comb += [rec.retry_cnt.eq(arg[0:3]), rec.rnr_retry_cnt.eq(arg[4:7]), rec.req_wait.eq(arg[8]),
                         rec.rd_pending.eq(Mux(arg[9], 0, old_rd - arg[10:13]))]
        with m.Case(Op.SET_UNA):
            m.d.comb += rec.una_psn.eq(arg)

    s2_ok = s2_status == Status.OK
    is_update = s2_req.op != Op.LOOKUP
    m.d.sync += [
        Assert(~s2_valid | (sh.s2_wr == (s2_ok & (is_update | sh.s2_from_fill))), "qp_cache: s2_wr\n"),
        Assert(~s2_valid | (sh.s2_upd == (s2_ok & is_update)), "qp_cache: s2_upd\n"),
    ]
    m.d.comb += [
        s2_writes.eq(s2_valid & resp.ready & sh.s2_wr),
        resp.valid.eq(s2_valid),
        resp.payload.status.eq(s2_status),
        resp.payload.tag.eq(s2_req.tag),
        resp.payload.qpn.eq(s2_req.qpn),
        resp.payload.record.eq(rec),
        wp.addr.eq(s2_idx),
        wp.data.eq(rec),
        wp.en.eq(s2_writes),
        mut_wp.addr.eq(s2_idx),
        mut_wp.data.eq(rec.as_value()[:MUTABLE_BYTES * 8]),
        mut_wp.en.eq(s2_writes),
    ]
    with m.If(s2_valid & resp.ready & sh.s2_upd):
        m.d.sync += sh.dirty_a[s2_idx].eq(1)
    with m.If(sh.mshr_load):
        m.d.sync += fwd_rec.eq(sh.fill_buf)
    with m.Elif(s2_writes):
        m.d.sync += fwd_rec.eq(rec)
