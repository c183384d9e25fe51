"""The lookup pipeline's front: ``s0`` compares the incoming QPN, ``s1`` decides from registers
(hit, miss or bad QPN; whether it may advance, and whether a miss allocates the MSHR), and each
set's victim way is registered every clock."""

from amaranth import Array, Cat, Const, Mux, Signal
from amaranth.hdl import Assert

__all__ = ["plru_victim", "plru_touch", "compares", "victims", "s1_decide"]


def plru_victim(bits, ways):
    """One-hot victim of a tree-PLRU state (see :func:`rnic.model.qpc.plru_victim`)."""
    onehot = []
    for w in range(ways):
        cond, node, lo, hi = Const(1), 1, 0, ways
        while hi - lo > 1:
            mid = (lo + hi) // 2
            right = w >= mid
            cond = cond & (bits[node - 1] == int(right))
            node, lo, hi = (2 * node + 1, mid, hi) if right else (2 * node, lo, mid)
        onehot.append(cond)
    return Cat(*onehot)


def plru_touch(bits, ways, way):
    """Tree-PLRU state after an access to (runtime) ``way``."""
    new = []
    for n in range(1, ways):
        # node n covers leaves [lo, hi): find them from the heap index
        depth = n.bit_length() - 1
        span = ways >> depth
        lo = (n - (1 << depth)) * span
        hi, mid = lo + span, lo + span // 2
        on_path = (way >= lo) & (way < hi)
        new.append(Mux(on_path, way < mid, bits[n - 1]))
    return Cat(*new)


def _first(vec, n):
    return Cat(*[vec[w] & ~vec[:w].any() if w else vec[0] for w in range(n)])


def _victim(inv, avail, plru_bits, ways):
    """One-hot victim among the ways ``avail``: the first invalid one, else the PLRU choice if available,
    else the first available way (all zero if none is)."""
    free = inv & avail
    if ways == 1:
        return avail
    pv = plru_victim(plru_bits, ways)
    return Mux(free.any(), _first(free, ways), Mux((pv & avail).any(), pv, _first(avail, ways)))


def compares(m, sh):
    """``s0``'s compare of the incoming QPN and ``s1``'s of its own, each registered for the clock
    after (``a_*``, ``b_*``; ``took`` says which one ``s1`` decides from), and the registers that
    check they are not stale. Leaves in ``sh``: ``s0_hit``, ``a_*``, ``b_*``, ``took``,
    ``s1_hit_r`` / ``s1_idx_r`` / ``s1_bad_r``, ``s1_miss``, ``s1_set``, ``accept``, ``load_d``,
    ``alloc_d``, ``valid_d``, ``tag_wr_d``, ``a_live``."""
    req, s1_req, tag_rp, idx_bits = sh.cache.req, sh.s1_req, sh.tag_rp, sh.idx_bits
    # ===== s0: compare the incoming request, so that s1 addresses the memory from a register
    s0_hit, s0_idx = sh.compare(req.payload.qpn, "s0_hit", tag_rp[0])
    # ===== s1: decides from a compare registered in the clock before (s1_hit_r, s1_idx_r,
    # s1_bad_r): s0's if s1 took its request then (`took`), else the s1 compare of s1's own QPN.
    a_hit, a_idx, a_bad = Signal(), Signal(idx_bits), Signal()     # s0's compare, registered
    b_hit, b_idx, b_bad = Signal(), Signal(idx_bits), Signal()     # s1's compare, registered
    took = Signal()              # s1 took a request in the clock before
    s1_hit_r, s1_idx_r, s1_bad_r = Mux(took, a_hit, b_hit), Mux(took, a_idx, b_idx), Mux(took, a_bad, b_bad)
    s1_miss = ~s1_bad_r & ~s1_hit_r
    s1_set = sh.set_of(s1_req.qpn)
    hit, hit_idx = sh.compare(s1_req.qpn, "s1_hit", tag_rp[1])
    accept = Signal()
    m.d.sync += [
        a_hit.eq(s0_hit), a_idx.eq(s0_idx), a_bad.eq(sh.bad_qpn(req.payload.qpn)),
        b_hit.eq(hit), b_idx.eq(hit_idx), b_bad.eq(sh.bad_qpn(s1_req.qpn)),
        took.eq(accept),
    ]

    # The registered compares are stale if a tag or valid bit they saw has changed. A hit's
    # entry can only fall (tags are written only into the hidden victim), and only by an
    # allocation, which happens only as s1 advances: s1's own compare (s1 waited) is fresh, s0's
    # (s1 took its request as the one before it left) is fresh unless that one allocated the
    # MSHR with the hit entry as its victim. A miss can only turn into a hit by an install (or a
    # victim's restore): it is fresh unless the MSHR loaded at the last edge. valid_d and
    # tag_wr_d check in simulation that this never passes a stale compare.
    load_d = Signal()
    alloc_d = Signal()
    valid_d = Signal(sh.E)
    tag_wr_d = Signal()
    m.d.sync += [valid_d.eq(Cat(*sh.valid)), tag_wr_d.eq(sh.tag_wp.en.any())]
    a_live = ~alloc_d | (a_idx != sh.alloc_vidx)

    sh.a_hit, sh.a_idx, sh.a_bad, sh.b_hit, sh.b_idx, sh.b_bad = a_hit, a_idx, a_bad, b_hit, b_idx, b_bad
    sh.took, sh.s1_hit_r, sh.s1_idx_r, sh.s1_bad_r = took, s1_hit_r, s1_idx_r, s1_bad_r
    sh.s1_miss, sh.s1_set, sh.accept = s1_miss, s1_set, accept
    sh.load_d, sh.alloc_d, sh.valid_d, sh.tag_wr_d, sh.a_live = load_d, alloc_d, valid_d, tag_wr_d, a_live


def victims(m, sh):
    """Each set's victim way, registered every clock (``vr_oh*``, ``vr_valid*``), and the PLRU
    state's update (touched at the edge after ``pend_v``). Leaves in ``sh``: ``pend_v`` /
    ``pend_set`` / ``pend_way`` (driven by :func:`.respond.s2_load`), ``victim_oh``, ``victim_idx``,
    ``victim_valid`` (of ``s1``'s set) and ``vict_stale``."""
    W, S, way_bits, set_bits = sh.W, sh.S, sh.way_bits, sh.set_bits
    valid, plru, s1_set, ev = sh.valid, sh.plru, sh.s1_set, sh.ev
    # Victims: the way each set would evict, registered every clock (vr_*), from the PLRU state
    # of the next clock and the valid bits. The valid bits of a set cannot change at the edge
    # before an allocation (an allocation or an install stops the next one for a clock); the
    # PLRU state can, by the touch of the hit that left s1 at that edge: a miss taken right
    # behind a hit to its set waits one clock for its victim (same_set, ev["hits"]).
    pend_v = Signal()            # touch the PLRU state of pend_set at pend_way at the next edge
    pend_set = Signal(max(set_bits, 1))
    pend_way = Signal(max(way_bits, 1))
    vr_oh = [Signal(W, name=f"vr_oh{s}") for s in range(S)]
    vr_valid = [Signal(name=f"vr_valid{s}") for s in range(S)]
    vr_none = [Signal(name=f"vr_none{s}") for s in range(S)]      # every way held (N > 1)
    for s in range(S):
        inv = Cat(*[~valid[s * W + w] for w in range(W)])
        nxt = Mux(pend_v & (pend_set == s), plru_touch(plru[s], W, pend_way), plru[s]) if W > 1 else None
        if W > 1:
            m.d.sync += plru[s].eq(nxt)
        if sh.N == 1:
            vict = Mux(inv.any(), _first(inv, W), plru_victim(nxt, W)) if W > 1 else Const(1, 1)
            m.d.sync += [vr_oh[s].eq(vict), vr_valid[s].eq(~inv.any())]
        else:
            # ways an outstanding miss holds (hidden, so invalid) are never chosen
            avail = Cat(*[~sh.held[s * W + w] for w in range(W)])
            m.d.sync += [vr_oh[s].eq(_victim(inv, avail, nxt, W)), vr_valid[s].eq(~(inv & avail).any()),
                         vr_none[s].eq(~avail.any())]
    vr_oh_a, vr_valid_a = Array(vr_oh), Array(vr_valid)
    victim_oh = Cat(*[(s1_set == s) & vr_oh[s][w] for s in range(S) for w in range(W)])
    victim_idx = sh.entry(s1_set, sh.encode(vr_oh_a[s1_set]) if way_bits else Const(0, 0))
    victim_valid = vr_valid_a[s1_set]
    sh.vr_none = Array(vr_none)
    same_set = Signal()
    m.d.sync += same_set.eq(sh.set_of(sh.cache.req.payload.qpn) == s1_set)
    vict_stale = (ev["hits"] & same_set) if W > 1 else Const(0, 1)

    sh.pend_v, sh.pend_set, sh.pend_way = pend_v, pend_set, pend_way
    sh.victim_oh, sh.victim_idx, sh.victim_valid, sh.vict_stale = victim_oh, victim_idx, victim_valid, vict_stale


def s1_decide(m, sh):
    """``s1``'s decisions, from registers: whether it advances (``s1_advance``) and whether its
    miss allocates the MSHR (``alloc``), the MSHR's install (``mshr_load``) taking ``s2`` first;
    ``req.ready``, and ``s1``'s request register. Leaves in ``sh``: ``s2_free``, ``mshr_load``,
    ``s1_advance``, ``alloc``, ``merge``, ``replay_now``."""
    cache, W, way_bits = sh.cache, sh.W, sh.way_bits
    s1_valid, s2_valid, fill_ready = sh.s1_valid, sh.s2_valid, sh.fill_ready
    took, a_hit, a_bad, a_idx, b_hit, b_bad = sh.took, sh.a_hit, sh.a_bad, sh.a_idx, sh.b_hit, sh.b_bad
    load_d, vict_stale, a_live, s1_set = sh.load_d, sh.vict_stale, sh.a_live, sh.s1_set
    s1_hit_r, s1_idx_r, s1_miss, accept = sh.s1_hit_r, sh.s1_idx_r, sh.s1_miss, sh.accept
    # s1's decisions, from registers: ga / gb (s1 can go, with s0's / its own compare), the
    # MSHR's install taking s2 first.
    s2_free = ~s2_valid | cache.resp.ready
    mshr_load = fill_ready & s2_free & ~sh.replaying
    free_nf = s2_free & ~fill_ready & ~sh.replaying
    m_a = ~load_d & (a_bad | (sh.may_a & ~vict_stale) | sh.merge_a)
    m_b = ~load_d & (b_bad | sh.may_b | sh.merge_b)
    ga = took & Mux(a_hit, a_live, m_a)
    gb = s1_valid & ~took & (b_hit | m_b)
    s1_advance = Signal()
    alloc = Signal()
    merge = Signal()           # a miss for a QP being fetched joins its slot (N > 1)
    m.d.comb += [
        merge.eq(((took & ~a_hit & ~a_bad & ~load_d & sh.merge_a) |
                  (s1_valid & ~took & ~b_hit & ~b_bad & ~load_d & sh.merge_b)) & free_nf),
        s1_advance.eq((ga | gb) & free_nf),
        alloc.eq(((took & ~a_hit & ~a_bad & ~load_d & sh.may_a & ~vict_stale) |
                  (s1_valid & ~took & ~b_hit & ~b_bad & ~load_d & sh.may_b)) & free_nf),
    ]
    fresh = Mux(s1_hit_r, ~took | a_live, ~load_d)
    fell, rose = sh.valid_d & ~Cat(*sh.valid), ~sh.valid_d & Cat(*sh.valid)
    m.d.sync += [
        load_d.eq(mshr_load), sh.alloc_d.eq(alloc),
        Assert(~s1_valid | ~fresh | Mux(s1_hit_r, ~fell.bit_select(s1_idx_r, 1), ~rose.any() & ~sh.tag_wr_d),
               "qp_cache: s1 passed a stale compare\n"),
        Assert(~(took & a_hit) | (a_live == sh.valid_a[a_idx]), "qp_cache: a_live\n"),
        Assert((alloc | merge) == (s1_advance & s1_miss), "qp_cache: alloc\n"),
        Assert(~(alloc & merge), "qp_cache: alloc and merge\n"),
    ]
    # the victim registered is the one the set's state gives now
    inv_vec = Cat(*[~sh.way_valid[w][s1_set] for w in range(W)])
    if sh.N > 1:
        avail = Cat(*[~Array(sh.held[s * W + w] for s in range(sh.S))[s1_set] for w in range(W)])
        exact = _victim(inv_vec, avail, sh.plru_a[s1_set] if W > 1 else None, W)
        m.d.sync += Assert(~alloc | ((sh.victim_oh == Cat(*[(s1_set == s) & exact[w] for s in range(sh.S)
                                                             for w in range(W)])) &
                                     (sh.victim_valid == ~(inv_vec & avail).any()) & avail.any()),
                           "qp_cache: victim\n")
    elif W > 1:
        pv = plru_victim(sh.plru_a[s1_set], W)
        exact_way = Signal(way_bits)
        for w in range(W):
            with m.If(pv[w]):
                m.d.comb += exact_way.eq(w)
        for w in reversed(range(W)):
            with m.If(inv_vec[w]):
                m.d.comb += exact_way.eq(w)
        m.d.sync += Assert(~alloc | ((sh.victim_idx == sh.entry(s1_set, exact_way)) &
                                     (sh.victim_valid == ~inv_vec.any())),
                           "qp_cache: victim\n")

    m.d.comb += [
        cache.req.ready.eq(~sh.ctrl_block & (~s1_valid | s1_advance)),
        accept.eq(cache.req.valid & cache.req.ready),
    ]
    # s1's request register loads whenever s1 is free (what it holds without s1_valid is unused)
    with m.If(~s1_valid | s1_advance):
        m.d.sync += sh.s1_req.eq(cache.req.payload)
    with m.If(accept):
        m.d.sync += s1_valid.eq(1)
    with m.Elif(s1_advance):
        m.d.sync += s1_valid.eq(0)

    sh.s2_free, sh.mshr_load, sh.s1_advance, sh.alloc, sh.merge = s2_free, mshr_load, s1_advance, alloc, merge
    sh.replay_now = sh.replaying & s2_free
