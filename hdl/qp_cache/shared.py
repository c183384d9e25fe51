"""What the parts of the QP context cache share (:class:`Shared`): its geometry, its storage (data,
mutable-byte and tag memories; valid, dirty and PLRU bits), the registers that cross from one part
to another, and the helpers (addresses, set and entry indices, the tag compare)."""

from amaranth import Array, Cat, Const, Signal, unsigned
from amaranth.lib.memory import Memory
from amaranth.utils import ceil_log2

from ...model.qpc import CACHED_BITS, MUTABLE_BYTES, QPN_WIDTH
from ..prim import BLOCK_RAM, block_read, lut4, pairwise_eq
from .layouts import BEATS, REC_SHIFT, Status, request_layout

__all__ = ["Shared"]


class Shared:
    """The state the parts of one :class:`~rnic.hdl.qp_cache.QpCache` elaboration share.

    ``m`` is the module being elaborated (every part adds to it, in the order
    :meth:`QpCache.elaborate <rnic.hdl.qp_cache.QpCache.elaborate>` calls them), ``platform`` the
    platform (``platform.family == "ecp5"`` places the compares in ``LUT4`` s, see
    :mod:`rnic.hdl.prim`), ``cache`` the component (its ports). The signals are created here and
    named as the attributes that hold them; a part also leaves here what a later part uses of its
    decisions (``s1_advance``, ``alloc``, ``mshr_load``, ...), set by the part that computes them.
    """

    def __init__(self, m, platform, cache):
        self.m, self.platform, self.cache = m, platform, cache
        cfg = self.cfg = cache.cfg
        self.E, self.W, self.S = cfg.entries, cfg.ways, cfg.sets
        self.way_bits, self.set_bits = ceil_log2(self.W), ceil_log2(self.S)
        self.idx_bits = max(ceil_log2(self.E), 1)
        self.Q = cfg.qpn_bits        # cacheable QPNs are below 2**Q (requests above: BAD_QPN)
        self.tw = -(-self.Q // 4) * 4  # a tag lane: the QPN's low Q bits (LUT RAM lanes are multiples of 4 bits)
        self._storage()
        self._registers()

    def _storage(self):
        m, E, W, S, tw = self.m, self.E, self.W, self.S, self.tw
        # LUT RAM (143 TRELLIS_DPR16X4). In block RAM (18 DP16KD) its 5.6 ns clock-to-output
        # starts s2's update and cost the whole engine about 15 % of its Fmax (docs/history.md).
        m.submodules.data_mem = data_mem = Memory(shape=unsigned(CACHED_BITS), depth=E, init=[])
        self.wp = data_mem.write_port()
        self.rp = data_mem.read_port()       # not transparent: see fwd_rec
        # A copy of the mutable bytes, written with the data memory, with its own read port for the
        # write-backs (the MSHR's victim, the control FSM's entry), so they never take rp from s1.
        # In block RAM (yosys would take LUT RAM, six LUT4s' worth per 16 x 4 bits): its reader
        # never reads the entry written at the same edge (an Assert below), so no collision logic.
        m.submodules.mut_mem = mut_mem = Memory(shape=unsigned(MUTABLE_BYTES * 8), depth=E, init=[],
                                                attrs=BLOCK_RAM)
        self.mut_wp = mut_mem.write_port()
        self.mut_rp = block_read(m, mut_mem, "mut_rp")

        # Tags: one row per set, one QPN lane per way (compared above the set bits), read asynchronously
        # (LUT RAM on the ECP5), so the set selection is the memory's own decoder. Two copies (yosys
        # maps a memory with more read ports to flip-flops) with two read ports each: the s0 and s1
        # compares; an entry's tag (the MSHR's victim or the control FSM's entry: the write-back
        # address) and the control port's compare.
        m.submodules.tag_mem = tag_mem = Memory(shape=unsigned(tw * W), depth=max(S, 2), init=[])
        m.submodules.tag_mem2 = tag_mem2 = Memory(shape=unsigned(tw * W), depth=max(S, 2), init=[])
        tag_wp = self.tag_wp = tag_mem.write_port(granularity=tw)
        tag_wp2 = tag_mem2.write_port(granularity=tw)
        m.d.comb += [tag_wp2.addr.eq(tag_wp.addr), tag_wp2.data.eq(tag_wp.data), tag_wp2.en.eq(tag_wp.en)]
        self.tag_rp = [mem.read_port(domain="comb") for mem in (tag_mem, tag_mem, tag_mem2, tag_mem2)]
        valid = self.valid = [Signal(name=f"valid{i}") for i in range(E)]
        dirty = self.dirty = [Signal(name=f"dirty{i}") for i in range(E)]
        self.valid_a, self.dirty_a = Array(valid), Array(dirty)
        plru_w = max(W - 1, 1)
        self.plru = [Signal(plru_w, name=f"plru{s}") for s in range(S)]
        self.plru_a = Array(self.plru)

        # per-way views indexed by set
        self.way_valid = [Array(valid[s * W + w] for s in range(S)) for w in range(W)]

    def _registers(self):
        cfg, idx_bits = self.cfg, self.idx_bits
        # ---- pipeline registers -----------------------------------------------------------
        self.s1_valid = Signal()
        self.s1_req = Signal(request_layout(cfg))
        self.s2_valid = Signal()
        self.s2_from_fill = Signal()
        self.s2_fwd = Signal()       # s2's record comes from fwd_rec, not from the read port
        # copies of s2_fwd, each selecting a quarter of the record; they differ from it (so that
        # synthesis keeps them apart) only while s2 is empty
        self.s2_fwd_c = [Signal(name=f"s2_fwd{c}") for c in range(4)]
        self.fwd_rec = Signal(CACHED_BITS)  # last record written (or the fill): forwarding source
        self.s2_status = Signal(Status)
        self.s2_req = Signal(request_layout(cfg))
        self.s2_idx = Signal(idx_bits)
        self.s2_wr = Signal()        # s2 writes its record back when it leaves (OK, and an update or a fill)
        self.s2_upd = Signal()       # s2 marks its entry dirty when it leaves (OK and an update)

        # ---- MSHRs: ``N`` slots used in ring order (allocation at ``tail``, install at ``head``) ----
        N = self.N = cfg.mshrs
        self.m_busy = [Signal(name=f"mshr{i}_busy" if N > 1 else "mshr_busy") for i in range(N)]
        self.m_req = [Signal(request_layout(cfg), name=f"mshr{i}_req") for i in range(N)]
        self.m_idx = [Signal(idx_bits, name=f"mshr{i}_idx") for i in range(N)]      # the victim's entry
        self.m_vv = [Signal(name=f"mshr{i}_victim_valid") for i in range(N)]
        self.m_vtag = [Signal(self.Q, name=f"mshr{i}_vtag") for i in range(N)]      # the victim's QPN (N > 1)
        self.m_captured = [Signal(name=f"mshr{i}_captured") for i in range(N)]
        self.m_wb_need = [Signal(name=f"mshr{i}_wb_need") for i in range(N)]
        self.m_wb_done = [Signal(name=f"mshr{i}_wb_done") for i in range(N)]
        self.m_wb_err = [Signal(name=f"mshr{i}_wb_err") for i in range(N)]
        self.head = Signal(range(N))      # the oldest busy slot: its fetch fills fill_buf, it installs next
        self.tail = Signal(range(N))      # the slot the next allocation takes
        self.cap_i = Signal(range(N))     # the slot whose victim the capture steps below handle
        self.mshr_busy = self.m_busy[0] if N == 1 else Cat(*self.m_busy).any()     # any slot busy
        self.mshr_rd = Signal()      # the clock after allocation: mut_rp reads the victim
        self.mshr_cap = Signal()     # the clock after that: capture its mutable bytes
        self.mshr_ws = Signal()      # the clock after that: start the write-back (wb_addr is ready)
        self.mshr_wb_go = Signal()
        self.mshr_r_done = Signal()  # the head's fetch has had its last beat
        self.mshr_f_err = Signal()   # the head's fetch had an error beat
        self.fill_ready = Signal()   # the head can install at the next clock s2 is free (a register)
        self.fill_buf = Signal(CACHED_BITS)
        # requests merged into a slot (N > 1): answered right after its install, in order (the replay)
        K = self.merges = 2 if N > 1 else 0
        self.m_cnt = [Signal(range(K + 1), name=f"mshr{i}_merged") for i in range(N)]
        self.m_q = [[Signal(request_layout(cfg), name=f"mshr{i}_mq{k}") for k in range(K)] for i in range(N)]
        self.replaying = Signal() if N > 1 else Const(0, 1)    # s2 takes the merged requests before all else
        self.rp_slot = Signal(range(N))
        self.rp_pos = Signal(range(max(K, 1)))
        self.rp_last = Signal(range(max(K, 1)))
        self.rp_idx = Signal(idx_bits)
        self.rp_err = Signal()
        # entries hidden as an outstanding miss's victim: never chosen as a victim again (N > 1)
        self.held = [Signal(name=f"held{i}") for i in range(self.E)] if N > 1 else None
        # the head's (the slot that installs next) and the newest allocation's fields
        self.mshr_req = self.slot(self.m_req, self.head)
        self.mshr_idx = self.slot(self.m_idx, self.head)
        self.mshr_victim_valid = self.slot(self.m_vv, self.head)
        self.mshr_wb_need = self.slot(self.m_wb_need, self.head)
        self.mshr_wb_done = self.slot(self.m_wb_done, self.head)
        self.mshr_err = self.mshr_f_err | self.slot(self.m_wb_err, self.head)   # fetch or write-back failed
        self.cap_idx = self.slot(self.m_idx, self.cap_i)
        # the newest allocation's victim entry and valid bit, as registers of their own (N > 1): read
        # by s1's decision (a_live) and the victim steps without a multiplexer over the slots
        self.alloc_vidx = self.m_idx[0] if N == 1 else Signal(idx_bits, name="alloc_vidx")
        self.cap_vv = self.m_vv[0] if N == 1 else Signal(name="cap_vv")

        # ---- write engine (shared: MSHR write-back, control write-back and MODIFY) ----------
        self.we_start = Signal()
        self.we_from_ctrl = Signal()  # data from ctrl.payload.record, else from wb_buf
        self.we_start_addr = Signal(64)
        self.we_start_len = Signal(8)
        self.we_busy = Signal()      # a burst's AW and W are under way
        self.we_bcnt = Signal(range(self.N + 2))   # bursts whose B has not come
        self.we_src_ctrl = Signal()
        self.we_beats_left = Signal(range(BEATS + 1))
        # the beat number and the data source in four copies, each selecting a quarter of wdata;
        # they differ only while the write engine is idle (so that synthesis keeps them apart)
        self.we_beat_c = [Signal(range(BEATS), name=f"we_beat{c}") for c in range(4)]
        self.we_src_c = [Signal(name=f"we_src_ctrl{c}") for c in range(4)]
        self.we_done = Signal()      # pulse: B received
        self.we_err = Signal()       # valid with we_done
        self.wb_buf = Signal(MUTABLE_BYTES * 8)

        # ---- control FSM ownership --------------------------------------------------------
        self.ctrl_block = Signal()   # stop accepting requests
        self.ctrl_rd = Signal()      # control reads entry c_idx this cycle
        self.c_idx = Signal(idx_bits)  # entry being written back by control
        self.c_own = Signal()        # the control FSM has set c_idx (until its acknowledgement)

    # ---- helpers ----------------------------------------------------------------------------
    def slot(self, signals, ptr):
        """``signals[ptr]``: the one signal with one MSHR, else an ``Array`` index."""
        return signals[0] if self.N == 1 else Array(signals)[ptr]

    def rec_addr(self, qpn):
        base = Cat(Const(0, REC_SHIFT), self.cache.qpc_base[REC_SHIFT:])
        return (base + (qpn << REC_SHIFT))[:64]

    def uncacheable(self, qpn):
        return qpn[self.Q:].any() if self.Q < QPN_WIDTH else Const(0, 1)

    def bad_qpn(self, qpn):
        return (qpn >= self.cache.table_size) | self.uncacheable(qpn)

    def set_of(self, qpn):
        return qpn[:self.set_bits] if self.set_bits else Const(0, 1)

    def entry(self, set_, way):
        way_bits, set_bits = self.way_bits, self.set_bits
        return Cat(way[:way_bits] if way_bits else Const(0, 0), set_[:set_bits] if set_bits else Const(0, 0))

    @staticmethod
    def encode(onehot):
        """Binary index of a one-hot (or all-zero) vector, as an OR per bit."""
        return Cat(*[Cat(*[onehot[i] for i in range(len(onehot)) if i >> b & 1]).any()
                     for b in range(ceil_log2(len(onehot)))])

    def lane(self, port, w):
        return port.data[self.tw * w:self.tw * (w + 1)]

    def eq_terms(self, name, x, y, lo, hi):
        """``x[lo:hi] == y[lo:hi]`` as LUT4s of two bit pairs each (:func:`~rnic.hdl.prim.pairwise_eq`);
        their AND is the equality."""
        return pairwise_eq(self.m, self.platform, name, x, y, lo, hi)

    def compare(self, qpn, name, port):
        """Hit and entry index of ``qpn``: ways compared in parallel (one-hot), OR-encoded."""
        m, platform, W, way_bits = self.m, self.platform, self.W, self.way_bits
        set_ = self.set_of(qpn)
        m.d.comb += port.addr.eq(set_)
        vec = Signal(W, name=f"{name}_vec")
        for w in range(W):
            # two bits per LUT4, then ANDs of four (with the way's valid bit in the last one):
            # three LUT levels after the tag RAM, as the compare is placed by hand
            tag = self.lane(port, w)
            terms = self.eq_terms(f"{name}_eq{w}", tag, qpn, self.set_bits, self.Q)
            level = 0
            while len(terms) > 3:
                terms = [t[0] if len(t) == 1 else
                         lut4(m, platform, f"{name}_and{w}_{level}_{k}", lambda *b: all(b), t)
                         for k, t in enumerate(terms[i:i + 4] for i in range(0, len(terms), 4))]
                level += 1
            m.d.comb += vec[w].eq(lut4(m, platform, f"{name}_hit{w}", lambda *b: all(b),
                                       [self.way_valid[w][set_], *terms]))
        if W > 4:
            return vec.any(), self.entry(set_, self.encode(vec) if way_bits else Const(0, 0))
        # the hit and the way index, one LUT4 each (synthesis chained the OR behind another LUT)
        hit = lut4(m, platform, f"{name}_any", lambda *b: any(b), list(vec))
        way = Cat(*[lut4(m, platform, f"{name}_way{b}", lambda *x: any(x),
                         [vec[w] for w in range(W) if w >> b & 1]) for b in range(way_bits)])
        return hit, self.entry(set_, way if way_bits else Const(0, 0))
