"""QP context cache: on-chip copies of the active 128-byte QP context records of the host-memory table.

Architecture (the shape of minerva's cache, plus one miss-status holding register):

* tags in a memory with one row per set and one QPN lane per way, read asynchronously (LUT RAM),
  valid and dirty bits in flip-flops (all ways of a set compared in one cycle), record data in
  a :class:`~amaranth.lib.memory.Memory` of ``entries`` x 640 bits (the record's first
  :data:`~rnic.model.qpc.CACHED_BYTES` bytes, which hold every field) with one synchronous read port
  and one write port. The read port is not transparent: a read of the entry ``s2_`` writes at the
  same edge is forwarded from ``fwd_rec`` (the last record written) instead;
* a two-stage pipeline: the accept clock (``s0``) compares the incoming QPN and registers the entry
  index, so ``s1_`` addresses the data memory from a flip-flop and decides from registers only
  (the compare of the clock before, checked for staleness, and each set's victim way, registered
  every clock; a miss taken right behind a hit to its set waits one clock for its victim),
  ``s2_`` applies the engine update, writes the record back to the data memory and presents the
  response. A hit is answered two clocks after the request is accepted, one request per clock;
* one MSHR (``mshr_``): a miss hides its victim way, reads the victim's 16 mutable bytes from
  ``mut_mem`` (their copy with a read port of its own), fetches the record's cached bytes with one
  10-beat AXI4 burst and, in parallel, writes the victim's mutable bytes back (2-beat burst) if it
  is dirty. Hits to other QPs keep flowing meanwhile; a second miss waits in ``s1_``. When both
  bursts are done
  the MSHR installs the tag and injects the fill into ``s2_``, which answers the request. Responses
  can therefore overtake each other: they carry the requester's tag;
* a control FSM for MODIFY / INVALIDATE / FLUSH that stops accepting requests, waits until the
  pipeline and the MSHR are empty, then owns the tags, the data memory and the AXI write channel,
  so software's changes and the engine's updates are strictly ordered.

The counters count a clock after their events (a control operation's error as its ``ack`` transfers).

Replacement: first invalid way of the set, else tree pseudo-LRU (``ways - 1`` bits per set).
The model is :class:`rnic.model.qpc.QpcCacheModel`; ``docs/qp-context.md`` has the full contract.
"""

import types

from amaranth import Array, Cat, Const, Module, Mux, Signal, unsigned
from amaranth.hdl import Assert
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from ..model import qpc as _model
from ..model.qpc import (ARG_WIDTH, CACHED_BITS, CACHED_BYTES, COUNTER_NAMES, COUNTER_WIDTH, MUTABLE_BYTES,
                         QPC_FIELDS, QPN_WIDTH, RECORD_BITS, RECORD_BYTES, QpcCacheConfig)
from .bus import AXI4Signature
from .prim import BLOCK_RAM, block_read, lut4, pairwise_eq

__all__ = ["hw_enum", "Op", "CtrlOp", "Status", "QpState", "record_layout", "cached_layout", "request_layout",
           "response_layout", "ctrl_layout", "ack_layout", "counters_layout", "QpCache", "QpcCacheConfig"]


def hw_enum(model_enum, shape=None):
    """The Amaranth enum of the model's :class:`enum.IntEnum` ``model_enum``: the same name, members and
    values, so the RTL and the golden model cannot drift apart. ``shape`` defaults to the fewest bits
    that hold the largest value."""
    shape = max(model_enum).bit_length() if shape is None else shape

    def body(ns):
        ns["__module__"] = __name__
        ns["__doc__"] = model_enum.__doc__
        for member in model_enum:
            ns[member.name] = member.value
    return types.new_class(model_enum.__name__, (enum.Enum,), {"shape": shape}, body)


Op = hw_enum(_model.Op)
CtrlOp = hw_enum(_model.CtrlOp)
Status = hw_enum(_model.Status)
#: as wide as the record's ``state`` field
QpState = hw_enum(_model.QpState, shape=next(width for name, _, width in QPC_FIELDS if name == "state"))


def _fields_layout(bits):
    return data.FlexibleLayout(bits, {
        name: data.Field(QpState if name == "state" else unsigned(width), offset)
        for name, offset, width in QPC_FIELDS
    })


#: The 1024-bit record with named fields at the offsets of :data:`rnic.model.qpc.QPC_FIELDS`.
record_layout = _fields_layout(RECORD_BITS)
#: The record's first :data:`~rnic.model.qpc.CACHED_BYTES` bytes, the same fields: what the cache holds.
cached_layout = _fields_layout(CACHED_BITS)


def request_layout(cfg):
    """Engine request: ``op`` (:class:`Op`), ``qpn``, requester ``tag``, ``arg`` (the new value)."""
    return data.StructLayout({"op": Op, "qpn": QPN_WIDTH, "tag": cfg.tag_width, "arg": ARG_WIDTH})


def response_layout(cfg):
    """Response: ``status``, the request's ``tag`` and ``qpn``, and the record's cached bytes after
    the update (``record`` is meaningful only when ``status`` is OK)."""
    return data.StructLayout({"status": Status, "tag": cfg.tag_width, "qpn": QPN_WIDTH,
                              "record": cached_layout})


ctrl_layout = data.StructLayout({"op": CtrlOp, "qpn": QPN_WIDTH, "record": record_layout})
ack_layout = data.StructLayout({"status": Status})
counters_layout = data.StructLayout({name: COUNTER_WIDTH for name in COUNTER_NAMES})

_BEATS = RECORD_BYTES // 8          # 64-bit AXI data: 16 beats per record (MODIFY)
_FILL_BEATS = CACHED_BYTES // 8     # 10 beats per fetch
_WB_BEATS = MUTABLE_BYTES // 8      # 2 beats of write-back
_REC_SHIFT = ceil_log2(RECORD_BYTES)


def _plru_victim(bits, ways):
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


def _plru_touch(bits, ways, way):
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


class QpCache(wiring.Component):
    """QP context cache with an AXI4 master to the host-memory table.

    Parameters
    ----------
    cfg : :class:`rnic.model.qpc.QpcCacheConfig`
        ``entries``, ``ways`` (1 = direct mapped, ``entries`` = fully associative), ``tag_width``.

    Members
    -------
    req : ``In(stream.Signature(request_layout(cfg)))``
        Engine lookups and updates. One is accepted per clock while they hit.
    resp : ``Out(stream.Signature(response_layout(cfg)))``
        One response per request, in order of completion (a hit can overtake an outstanding miss).
    ctrl : ``In(stream.Signature(ctrl_layout))``
        Control operations. The payload is used while the operation runs; the request transfers
        (``ready``) in the same cycle as its acknowledgement.
    ack : ``Out(stream.Signature(ack_layout))``
        One acknowledgement per control operation, after it has taken effect in host memory.
    qpc_base : ``In(64)``
        Bus address of the table (128-byte aligned; the low 7 bits are ignored).
    table_size : ``In(25)``
        Number of QPs in the table; a QPN at or above it gets ``BAD_QPN``. Change only after FLUSH.
        A request for a QPN at or above ``2**cfg.qpn_bits`` gets ``BAD_QPN`` too; control operations
        reach those QPNs in host memory (they are never cached). Tags are ``cfg.qpn_bits`` wide.
    m_axi : ``Out(AXI4Signature(addr_width=64, data_width=64, id_width=4))``
        Host memory. One read and one write burst outstanding at most; ID 0.
    counters : ``Out(counters_layout)``
        Free-running 32-bit counters: lookups, hits, misses, evictions, writebacks, errors.
    """

    def __init__(self, cfg: QpcCacheConfig):
        if not isinstance(cfg, QpcCacheConfig):
            raise TypeError(f"cfg must be a QpcCacheConfig, not {cfg!r}")
        self.cfg = cfg
        super().__init__({
            "req": In(stream.Signature(request_layout(cfg))),
            "resp": Out(stream.Signature(response_layout(cfg))),
            "ctrl": In(stream.Signature(ctrl_layout)),
            "ack": Out(stream.Signature(ack_layout)),
            "qpc_base": In(64),
            "table_size": In(QPN_WIDTH + 1),
            "m_axi": Out(AXI4Signature(addr_width=64, data_width=64, id_width=4)),
            "counters": Out(counters_layout),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        E, W, S = cfg.entries, cfg.ways, cfg.sets
        way_bits, set_bits = ceil_log2(W), ceil_log2(S)
        idx_bits = max(ceil_log2(E), 1)
        axi = self.m_axi
        Q = cfg.qpn_bits             # cacheable QPNs are below 2**Q (requests above: BAD_QPN)
        tw = -(-Q // 4) * 4          # a tag lane: the QPN's low Q bits (LUT RAM lanes are multiples of 4 bits)

        def rec_addr(qpn):
            base = Cat(Const(0, _REC_SHIFT), self.qpc_base[_REC_SHIFT:])
            return (base + (qpn << _REC_SHIFT))[:64]

        def uncacheable(qpn):
            return qpn[Q:].any() if Q < QPN_WIDTH else Const(0, 1)

        def bad_qpn(qpn):
            return (qpn >= self.table_size) | uncacheable(qpn)

        def set_of(qpn):
            return qpn[:set_bits] if set_bits else Const(0, 1)

        def entry(set_, way):
            return Cat(way[:way_bits] if way_bits else Const(0, 0), set_[:set_bits] if set_bits else Const(0, 0))

        def encode(onehot):
            """Binary index of a one-hot (or all-zero) vector, as an OR per bit."""
            return Cat(*[Cat(*[onehot[i] for i in range(len(onehot)) if i >> b & 1]).any()
                         for b in range(ceil_log2(len(onehot)))])

        # ---- storage ------------------------------------------------------------------------
        # LUT RAM (143 TRELLIS_DPR16X4). In block RAM (18 DP16KD) its 5.6 ns clock-to-output
        # starts s2's update: the whole engine went from 89.3 to 76.2 MHz (ECP5-45F, seed 1).
        m.submodules.data_mem = data_mem = Memory(shape=unsigned(CACHED_BITS), depth=E, init=[])
        wp = data_mem.write_port()
        rp = data_mem.read_port()            # not transparent: see fwd_rec
        # A copy of the mutable bytes, written with the data memory, with its own read port for the
        # write-backs (the MSHR's victim, the control FSM's entry), so they never take rp from s1.
        # In block RAM (yosys would take LUT RAM, six LUT4s' worth per 16 x 4 bits): its reader
        # never reads the entry written at the same edge (an Assert below), so no collision logic.
        m.submodules.mut_mem = mut_mem = Memory(shape=unsigned(MUTABLE_BYTES * 8), depth=E, init=[],
                                                attrs=BLOCK_RAM)
        mut_wp = mut_mem.write_port()
        mut_rp = block_read(m, mut_mem, "mut_rp")

        # Tags: one row per set, one QPN lane per way (compared above the set bits), read asynchronously
        # (LUT RAM on the ECP5), so the set selection is the memory's own decoder. Two copies (yosys
        # maps a memory with more read ports to flip-flops) with two read ports each: the s0 and s1
        # compares; an entry's tag (the MSHR's victim or the control FSM's entry: the write-back
        # address) and the control port's compare.
        m.submodules.tag_mem = tag_mem = Memory(shape=unsigned(tw * W), depth=max(S, 2), init=[])
        m.submodules.tag_mem2 = tag_mem2 = Memory(shape=unsigned(tw * W), depth=max(S, 2), init=[])
        tag_wp = tag_mem.write_port(granularity=tw)
        tag_wp2 = tag_mem2.write_port(granularity=tw)
        m.d.comb += [tag_wp2.addr.eq(tag_wp.addr), tag_wp2.data.eq(tag_wp.data), tag_wp2.en.eq(tag_wp.en)]
        tag_rp = [mem.read_port(domain="comb") for mem in (tag_mem, tag_mem, tag_mem2, tag_mem2)]
        valid = [Signal(name=f"valid{i}") for i in range(E)]
        dirty = [Signal(name=f"dirty{i}") for i in range(E)]
        valid_a, dirty_a = Array(valid), Array(dirty)
        plru_w = max(W - 1, 1)
        plru = [Signal(plru_w, name=f"plru{s}") for s in range(S)]
        plru_a = Array(plru)

        # per-way views indexed by set
        way_valid = [Array(valid[s * W + w] for s in range(S)) for w in range(W)]

        def lane(port, w):
            return port.data[tw * w:tw * (w + 1)]

        cnt = Signal(counters_layout)
        m.d.comb += self.counters.eq(cnt)
        # Counter events are registered and counted a clock later (off the decisions' paths).
        # (The control FSM's error is counted as its acknowledgement transfers.)
        ev = {name: Signal(name=f"ev_{name}") for name in COUNTER_NAMES}
        ctrl_err = Signal()
        for name in COUNTER_NAMES:
            with m.If(ev[name] | ctrl_err if name == "errors" else ev[name]):
                m.d.sync += getattr(cnt, name).eq(getattr(cnt, name) + 1)

        # ---- pipeline registers -----------------------------------------------------------
        s1_valid = Signal()
        s1_req = Signal(request_layout(cfg))
        s2_valid = Signal()
        s2_from_fill = Signal()
        s2_fwd = Signal()            # s2's record comes from fwd_rec, not from the read port
        # copies of s2_fwd, each selecting a quarter of the record; they differ from it (so that
        # synthesis keeps them apart) only while s2 is empty
        s2_fwd_c = [Signal(name=f"s2_fwd{c}") for c in range(4)]
        fwd_rec = Signal(CACHED_BITS)  # last record written (or the fill): forwarding source
        s2_status = Signal(Status)
        s2_req = Signal(request_layout(cfg))
        s2_idx = Signal(idx_bits)
        s2_wr = Signal()             # s2 writes its record back when it leaves (OK, and an update or a fill)
        s2_upd = Signal()            # s2 marks its entry dirty when it leaves (OK and an update)

        # ---- MSHR -----------------------------------------------------------------------
        mshr_busy = Signal()
        mshr_req = Signal(request_layout(cfg))
        mshr_idx = Signal(idx_bits)
        mshr_victim_valid = Signal()
        mshr_captured = Signal()
        mshr_rd = Signal()           # the clock after allocation: mut_rp reads the victim
        mshr_cap = Signal()          # the clock after that: capture its mutable bytes
        mshr_ws = Signal()           # the clock after that: start the write-back (wb_addr is ready)
        mshr_wb_go = Signal()
        mshr_wb_need = Signal()
        mshr_wb_done = Signal()
        mshr_r_done = Signal()
        mshr_err = Signal()          # fetch or write-back failed
        mshr_wb_err = Signal()
        fill_ready = Signal()        # the MSHR can install at the next clock s2 is free (a register)
        fill_buf = Signal(CACHED_BITS)

        # ---- write engine (shared: MSHR write-back, control write-back and MODIFY) ----------
        we_start = Signal()
        we_from_ctrl = Signal()      # data from ctrl.payload.record, else from wb_buf
        we_start_addr = Signal(64)
        we_start_len = Signal(8)
        we_busy = Signal()
        we_src_ctrl = Signal()
        we_beats_left = Signal(range(_BEATS + 1))
        # the beat number and the data source in four copies, each selecting a quarter of wdata;
        # they differ only while the write engine is idle (so that synthesis keeps them apart)
        we_beat_c = [Signal(range(_BEATS), name=f"we_beat{c}") for c in range(4)]
        we_src_c = [Signal(name=f"we_src_ctrl{c}") for c in range(4)]
        we_b_seen = Signal()
        we_done = Signal()           # pulse: B received
        we_err = Signal()            # valid with we_done
        wb_buf = Signal(MUTABLE_BYTES * 8)

        # ---- control FSM ownership --------------------------------------------------------
        ctrl_block = Signal()        # stop accepting requests
        ctrl_rd = Signal()           # control reads entry c_idx this cycle
        c_idx = Signal(idx_bits)     # entry being written back by control
        c_own = Signal()             # the control FSM has set c_idx (until its acknowledgement)

        def eq_terms(name, x, y, lo, hi):
            """``x[lo:hi] == y[lo:hi]`` as LUT4s of two bit pairs each (:func:`~rnic.hdl.prim.pairwise_eq`);
            their AND is the equality."""
            return pairwise_eq(m, platform, name, x, y, lo, hi)

        def compare(qpn, name, port):
            """Hit and entry index of ``qpn``: ways compared in parallel (one-hot), OR-encoded."""
            set_ = set_of(qpn)
            m.d.comb += port.addr.eq(set_)
            vec = Signal(W, name=f"{name}_vec")
            for w in range(W):
                # two bits per LUT4, then ANDs of four (with the way's valid bit in the last one):
                # three LUT levels after the tag RAM, as the compare is placed by hand
                tag = lane(port, w)
                terms = eq_terms(f"{name}_eq{w}", tag, qpn, set_bits, Q)
                level = 0
                while len(terms) > 3:
                    terms = [t[0] if len(t) == 1 else
                             lut4(m, platform, f"{name}_and{w}_{level}_{k}", lambda *b: all(b), t)
                             for k, t in enumerate(terms[i:i + 4] for i in range(0, len(terms), 4))]
                    level += 1
                m.d.comb += vec[w].eq(lut4(m, platform, f"{name}_hit{w}", lambda *b: all(b),
                                           [way_valid[w][set_], *terms]))
            if W > 4:
                return vec.any(), entry(set_, encode(vec) if way_bits else Const(0, 0))
            # the hit and the way index, one LUT4 each (synthesis chained the OR behind another LUT)
            hit = lut4(m, platform, f"{name}_any", lambda *b: any(b), list(vec))
            way = Cat(*[lut4(m, platform, f"{name}_way{b}", lambda *x: any(x),
                             [vec[w] for w in range(W) if w >> b & 1]) for b in range(way_bits)])
            return hit, entry(set_, way if way_bits else Const(0, 0))

        # The entry being written back, a register: the MSHR's victim while a miss is outstanding
        # (it loads s1's victim with mshr_idx), the control FSM's entry while it owns one (control
        # runs only with the MSHR idle). Its tag is registered a clock after wb_idx is set and its
        # record's address a clock after that (the write-backs start three clocks after wb_idx is
        # set): the tag read and the 57-bit adder stay off the AW path.
        wb_idx = Signal(idx_bits)
        m.d.comb += tag_rp[2].addr.eq(wb_idx[way_bits:] if set_bits else 0)
        wb_hi = Array(lane(tag_rp[2], w) for w in range(W))[wb_idx[:way_bits] if way_bits else 0]
        wb_tag = Signal(Q)
        wb_addr = Signal(64)
        m.d.sync += [
            wb_tag.eq(wb_hi),
            wb_addr.eq(rec_addr(wb_tag)),
        ]

        # ===== s0: compare the incoming request, so that s1 addresses the memory from a register
        s0_hit, s0_idx = compare(self.req.payload.qpn, "s0_hit", tag_rp[0])
        # ===== s1: decides from a compare registered in the clock before (s1_hit_r, s1_idx_r,
        # s1_bad_r): s0's if s1 took its request then (`took`), else the s1 compare of s1's own QPN.
        a_hit, a_idx, a_bad = Signal(), Signal(idx_bits), Signal()     # s0's compare, registered
        b_hit, b_idx, b_bad = Signal(), Signal(idx_bits), Signal()     # s1's compare, registered
        took = Signal()              # s1 took a request in the clock before
        s1_hit_r, s1_idx_r, s1_bad_r = Mux(took, a_hit, b_hit), Mux(took, a_idx, b_idx), Mux(took, a_bad, b_bad)
        s1_miss = ~s1_bad_r & ~s1_hit_r
        s1_set = set_of(s1_req.qpn)
        hit, hit_idx = compare(s1_req.qpn, "s1_hit", tag_rp[1])
        accept = Signal()
        m.d.sync += [
            a_hit.eq(s0_hit), a_idx.eq(s0_idx), a_bad.eq(bad_qpn(self.req.payload.qpn)),
            b_hit.eq(hit), b_idx.eq(hit_idx), b_bad.eq(bad_qpn(s1_req.qpn)),
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
        valid_d = Signal(E)
        tag_wr_d = Signal()
        m.d.sync += [valid_d.eq(Cat(*valid)), tag_wr_d.eq(tag_wp.en.any())]
        a_live = ~alloc_d | (a_idx != mshr_idx)

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
        for s in range(S):
            inv = Cat(*[~valid[s * W + w] for w in range(W)])
            first_inv = Cat(*[inv[w] & ~inv[:w].any() if w else inv[0] for w in range(W)])
            if W > 1:
                nxt = Mux(pend_v & (pend_set == s), _plru_touch(plru[s], W, pend_way), plru[s])
                m.d.sync += plru[s].eq(nxt)
                vict = Mux(inv.any(), first_inv, _plru_victim(nxt, W))
            else:
                vict = Const(1, 1)
            m.d.sync += [vr_oh[s].eq(vict), vr_valid[s].eq(~inv.any())]
        vr_oh_a, vr_valid_a = Array(vr_oh), Array(vr_valid)
        victim_oh = Cat(*[(s1_set == s) & vr_oh[s][w] for s in range(S) for w in range(W)])
        victim_idx = entry(s1_set, encode(vr_oh_a[s1_set]) if way_bits else Const(0, 0))
        victim_valid = vr_valid_a[s1_set]
        same_set = Signal()
        m.d.sync += same_set.eq(set_of(self.req.payload.qpn) == s1_set)
        vict_stale = (ev["hits"] & same_set) if W > 1 else Const(0, 1)

        # s1's decisions, from registers: ga / gb (s1 can go, with s0's / its own compare), the
        # MSHR's install taking s2 first.
        s2_free = ~s2_valid | self.resp.ready
        mshr_load = fill_ready & s2_free
        free_nf = s2_free & ~fill_ready
        m_a = ~load_d & (a_bad | (~mshr_busy & ~vict_stale))
        m_b = ~load_d & (b_bad | ~mshr_busy)
        ga = took & Mux(a_hit, a_live, m_a)
        gb = s1_valid & ~took & (b_hit | m_b)
        s1_advance = Signal()
        alloc = Signal()
        m.d.comb += [
            s1_advance.eq((ga | gb) & free_nf),
            alloc.eq(((took & ~a_hit & ~a_bad & ~load_d & ~mshr_busy & ~vict_stale) |
                      (s1_valid & ~took & ~b_hit & ~b_bad & ~load_d & ~mshr_busy)) & free_nf),
        ]
        fresh = Mux(s1_hit_r, ~took | a_live, ~load_d)
        fell, rose = valid_d & ~Cat(*valid), ~valid_d & Cat(*valid)
        m.d.sync += [
            load_d.eq(mshr_load), alloc_d.eq(alloc),
            Assert(~s1_valid | ~fresh | Mux(s1_hit_r, ~fell.bit_select(s1_idx_r, 1), ~rose.any() & ~tag_wr_d),
                   "qp_cache: s1 passed a stale compare\n"),
            Assert(~(took & a_hit) | (a_live == valid_a[a_idx]), "qp_cache: a_live\n"),
            Assert(alloc == (s1_advance & s1_miss), "qp_cache: alloc\n"),
        ]
        # the victim registered is the one the set's state gives now
        if W > 1:
            pv = _plru_victim(plru_a[s1_set], W)
            inv_vec = Cat(*[~way_valid[w][s1_set] for w in range(W)])
            exact_way = Signal(way_bits)
            for w in range(W):
                with m.If(pv[w]):
                    m.d.comb += exact_way.eq(w)
            for w in reversed(range(W)):
                with m.If(inv_vec[w]):
                    m.d.comb += exact_way.eq(w)
            m.d.sync += Assert(~alloc | ((victim_idx == entry(s1_set, exact_way)) & (victim_valid == ~inv_vec.any())),
                               "qp_cache: victim\n")

        m.d.comb += [
            self.req.ready.eq(~ctrl_block & (~s1_valid | s1_advance)),
            accept.eq(self.req.valid & self.req.ready),
        ]
        # s1's request register loads whenever s1 is free (what it holds without s1_valid is unused)
        with m.If(~s1_valid | s1_advance):
            m.d.sync += s1_req.eq(self.req.payload)
        with m.If(accept):
            m.d.sync += s1_valid.eq(1)
        with m.Elif(s1_advance):
            m.d.sync += s1_valid.eq(0)

        # The read port address comes from the tag compare; it reads whenever s2 can take new
        # data, and holds while s2 stalls. mut_rp reads the victim or the control FSM's entry.
        m.d.comb += [
            rp.addr.eq(s1_idx_r),
            rp.en.eq(s2_free),
            mut_rp.addr.eq(wb_idx),
            mut_rp.en.eq(mshr_rd | ctrl_rd),
        ]
        m.d.sync += Assert(~(mut_rp.en & mut_wp.en & (mut_rp.addr == mut_wp.addr)),
                           "qp_cache: mut_mem read of the entry written at the same edge\n")
        s2_writes = Signal()         # s2 writes its record to the data memory at this edge

        # s2 loads whenever it is free: the MSHR's install, else s1's request (valid if it advances)
        mshr_set = mshr_idx[way_bits:] if set_bits else Const(0, 1)
        mshr_way = mshr_idx[:way_bits] if way_bits else Const(0, 1)
        s1_upd = s1_req.op != Op.LOOKUP
        s2v_next = mshr_load | (s1_advance & ~s1_miss)
        # s2's entry against s1's, compared with a_idx and b_idx apiece (took picks): the select of
        # s1_idx_r sits by the data memory it addresses, and this compare stays off it
        fwd_same = Mux(took, Cat(*eq_terms("fwd_a", s2_idx, a_idx, 0, idx_bits)).all(),
                       Cat(*eq_terms("fwd_b", s2_idx, b_idx, 0, idx_bits)).all())
        fwd_next = mshr_load | (s2_writes & fwd_same)
        m.d.sync += Assert(fwd_same == (s2_idx == s1_idx_r), "qp_cache: fwd_same\n")
        m.d.sync += Assert(~(rp.en & wp.en & (rp.addr == wp.addr)) | fwd_next | ~s2v_next,
                           "qp_cache: data_mem read of the entry written at the same edge, used\n")
        with m.If(s2_free):
            m.d.sync += [
                s2_valid.eq(s2v_next),
                s2_req.eq(Mux(mshr_load, mshr_req, s1_req)),
                s2_from_fill.eq(mshr_load),
                s2_status.eq(Mux(mshr_load, Mux(mshr_err, Status.BUS_ERROR, Status.OK),
                                 Mux(s1_bad_r, Status.BAD_QPN, Status.OK))),
                s2_idx.eq(Mux(mshr_load, mshr_idx, s1_idx_r)),
                # the read port does not see a write at the same edge: forward it
                s2_fwd.eq(fwd_next),
                *(s2_fwd_c[c].eq(v) for c, v in enumerate((fwd_next, fwd_next | ~s2v_next, fwd_next & s2v_next,
                                                           fwd_next ^ ~s2v_next))),
                s2_wr.eq(Mux(mshr_load, ~mshr_err, ~s1_bad_r & s1_upd)),
                s2_upd.eq(Mux(mshr_load, ~mshr_err & (mshr_req.op != Op.LOOKUP), ~s1_bad_r & s1_upd)),
            ]
        m.d.sync += [
            pend_v.eq((s1_advance & ~s1_bad_r & s1_hit_r) | (mshr_load & ~mshr_err)),
            pend_set.eq(Mux(mshr_load, mshr_set, s1_set)),
            pend_way.eq(Mux(mshr_load, mshr_way, s1_idx_r[:way_bits] if way_bits else 0)),
            ev["lookups"].eq(accept),
            ev["hits"].eq(s1_advance & ~s1_bad_r & s1_hit_r),
            ev["misses"].eq(alloc),
        ]

        # allocation: the MSHR's registers follow s1 and its victim while the MSHR is idle
        with m.If(~mshr_busy):
            m.d.sync += [
                mshr_req.eq(s1_req), mshr_idx.eq(victim_idx), mshr_victim_valid.eq(victim_valid),
                axi.araddr.eq(rec_addr(s1_req.qpn)),
                mshr_captured.eq(0), mshr_wb_need.eq(0), mshr_wb_done.eq(0), mshr_r_done.eq(0),
                mshr_err.eq(0), mshr_wb_err.eq(0),
            ]
        with m.If(~mshr_busy & ~c_own):
            m.d.sync += wb_idx.eq(victim_idx)
        m.d.sync += [
            Assert(~mshr_busy | (wb_idx == mshr_idx), "qp_cache: wb_idx (MSHR)\n"),
            Assert(~c_own | (wb_idx == c_idx), "qp_cache: wb_idx (control)\n"),
            Assert(~(mshr_busy & c_own), "qp_cache: MSHR and control own wb_idx\n"),
        ]
        m.d.sync += mshr_rd.eq(alloc)
        with m.If(alloc):
            m.d.sync += [mshr_busy.eq(1), axi.arvalid.eq(1)]
        for i in range(E):
            with m.If(alloc & victim_oh[i]):          # hide the victim
                m.d.sync += valid[i].eq(0)

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
            with m.Case(Op.SET_ERROR):
                m.d.comb += rec.state.eq(QpState.ERROR)
            with m.Case(Op.SET_EPSN):
                m.d.comb += rec.epsn.eq(arg)
            with m.Case(Op.SET_SQ_PI):
                m.d.comb += rec.sq_pi.eq(arg[:16])
            with m.Case(Op.SET_RETRY):
                m.d.comb += [rec.retry_cnt.eq(arg[0:3]), rec.rnr_retry_cnt.eq(arg[4:7])]

        s2_ok = s2_status == Status.OK
        is_update = s2_req.op != Op.LOOKUP
        m.d.sync += [
            Assert(~s2_valid | (s2_wr == (s2_ok & (is_update | s2_from_fill))), "qp_cache: s2_wr\n"),
            Assert(~s2_valid | (s2_upd == (s2_ok & is_update)), "qp_cache: s2_upd\n"),
        ]
        m.d.comb += [
            s2_writes.eq(s2_valid & self.resp.ready & s2_wr),
            self.resp.valid.eq(s2_valid),
            self.resp.payload.status.eq(s2_status),
            self.resp.payload.tag.eq(s2_req.tag),
            self.resp.payload.qpn.eq(s2_req.qpn),
            self.resp.payload.record.eq(rec),
            wp.addr.eq(s2_idx),
            wp.data.eq(rec),
            wp.en.eq(s2_writes),
            mut_wp.addr.eq(s2_idx),
            mut_wp.data.eq(rec.as_value()[:MUTABLE_BYTES * 8]),
            mut_wp.en.eq(s2_writes),
        ]
        with m.If(s2_valid & self.resp.ready & s2_upd):
            m.d.sync += dirty_a[s2_idx].eq(1)
        with m.If(mshr_load):
            m.d.sync += fwd_rec.eq(fill_buf)
        with m.Elif(s2_writes):
            m.d.sync += fwd_rec.eq(rec)

        # after allocation: one clock to read the victim's mutable bytes and its dirty bit (whether
        # to write it back), one to capture the bytes (nothing can write the hidden victim meanwhile),
        # then the write-back starts
        m.d.sync += [mshr_cap.eq(mshr_rd), mshr_ws.eq(mshr_cap & mshr_wb_go)]
        with m.If(mshr_rd):
            m.d.sync += mshr_wb_go.eq(mshr_victim_valid & dirty_a[mshr_idx])
        with m.If(mshr_cap):
            m.d.sync += [
                mshr_captured.eq(1),
                mshr_wb_need.eq(mshr_wb_go),
                wb_buf.eq(mut_rp.data),
            ]
        with m.If(mshr_ws):
            m.d.comb += [
                we_start.eq(1), we_from_ctrl.eq(0), we_start_len.eq(_WB_BEATS - 1),
                we_start_addr.eq(wb_addr),
            ]

        # ===== MSHR: fetch, write-back, install ==============================================
        with m.If(axi.arvalid & axi.arready):
            m.d.sync += axi.arvalid.eq(0)
        m.d.comb += [
            axi.arlen.eq(_FILL_BEATS - 1), axi.arsize.eq(3), axi.arburst.eq(1), axi.arid.eq(0),
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
            fill_ready.eq(mshr_busy & ~mshr_load & (mshr_r_done | r_last) & (mshr_captured | mshr_cap) &
                          (~wb_need_next | mshr_wb_done | we_done)),
            Assert(fill_ready == (mshr_busy & mshr_r_done & mshr_captured & (~mshr_wb_need | mshr_wb_done)),
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
                    tag_wp.addr.eq(mshr_set), tag_wp.data.eq(mshr_req.qpn[:tw].replicate(W)),
                    tag_wp.en.eq(1 << mshr_way if W > 1 else 1),
                ]
        m.d.sync += ev["evictions"].eq(mshr_load & ~mshr_err & mshr_victim_valid)

        # ===== write engine ====================================================================
        def wd_part(c):
            lo, hi = 16 * c, 16 * (c + 1)
            beats = Array(self.ctrl.payload.record.as_value()[64 * i + lo:64 * i + hi] for i in range(_BEATS))
            wb_beats = Array(wb_buf[64 * i + lo:64 * i + hi] for i in range(_WB_BEATS))
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
                                       (Cat(*we_src_c) == we_src_ctrl.replicate(4))), "qp_cache: we_beat copies\n")
        with m.If(we_start):
            m.d.sync += [
                we_busy.eq(1), we_src_ctrl.eq(we_from_ctrl), we_beats_left.eq(we_start_len + 1),
                *(we_beat_c[c].eq(0) for c in range(4)), *(we_src_c[c].eq(we_from_ctrl) for c in range(4)),
                we_b_seen.eq(0),
                axi.awaddr.eq(we_start_addr), axi.awlen.eq(we_start_len), axi.awvalid.eq(1),
            ]
        with m.If(axi.awvalid & axi.awready):
            m.d.sync += axi.awvalid.eq(0)
        with m.If(axi.wvalid & axi.wready):
            m.d.sync += [we_beats_left.eq(we_beats_left - 1), *(b.eq(b + 1) for b in we_beat_c)]
        with m.If(axi.bvalid & axi.bready):
            m.d.sync += [we_busy.eq(0), we_b_seen.eq(1)]
            m.d.comb += [we_done.eq(1), we_err.eq(axi.bresp != 0)]

        # ===== control FSM ======================================================================
        # The control port's QPN is registered (cq) and has a compare of its own, registered every
        # clock; the FSM uses it once it has waited in Drain a clock (cq holds the payload) and the
        # cache has been drained since the clock before (nothing changed since the compare).
        c_op = self.ctrl.payload.op
        c_status = Signal(Status)
        c_cnt = Signal(range(E + 1))     # flush position
        c_hit, c_bad, c_dirty = Signal(), Signal(), Signal()
        c_vd = Signal()                  # flush: entry c_idx is valid and dirty
        c_vds = Signal(E)                # flush: valid & dirty of entries c_cnt.., shifted as it scans
        cq = Signal(QPN_WIDTH)
        cq_low = Signal()                # cq < 2**Q: it may be cached (a control operation reaches any QPN)
        c_waited = Signal()              # the FSM was in Drain the clock before
        cc_hit, cc_idx, cc_bad = Signal(), Signal(idx_bits), Signal()
        c_cmp_hit, c_cmp_idx = compare(cq, "c_hit", tag_rp[3])
        drained = ~s1_valid & ~s2_valid & ~mshr_busy & ~we_busy
        drained_d = Signal()
        m.d.sync += [
            cq.eq(self.ctrl.payload.qpn),
            cq_low.eq(~uncacheable(self.ctrl.payload.qpn)),
            cc_hit.eq(c_cmp_hit & cq_low), cc_idx.eq(c_cmp_idx), cc_bad.eq(cq >= self.table_size),
            drained_d.eq(drained),
        ]
        wb_ev = Signal()
        m.d.sync += [
            ev["errors"].eq((s1_advance & s1_bad_r) | (mshr_load & mshr_err)),
            ev["writebacks"].eq(mshr_ws | wb_ev),
        ]

        with m.FSM(name="ctrl_fsm"):
            with m.State("Idle"):
                with m.If(self.ctrl.valid):
                    m.d.comb += ctrl_block.eq(1)
                    m.d.sync += [c_status.eq(Status.OK), c_cnt.eq(0)]
                    m.next = "Drain"
            with m.State("Drain"):
                m.d.comb += ctrl_block.eq(1)
                m.d.sync += c_waited.eq(1)
                with m.If(drained_d & c_waited):
                    m.d.sync += [c_hit.eq(cc_hit), c_bad.eq(cc_bad), c_idx.eq(cc_idx), c_dirty.eq(dirty_a[cc_idx]),
                                 wb_idx.eq(cc_idx), c_own.eq(1), c_waited.eq(0),
                                 Assert(drained, "qp_cache: drained\n")]
                    m.next = "Decide"
            with m.State("Decide"):
                # one clock between the compare and what it decides
                m.d.comb += ctrl_block.eq(1)
                with m.If((c_op != CtrlOp.FLUSH) & c_bad):
                    m.d.sync += c_status.eq(Status.BAD_QPN)
                    m.next = "Ack"
                with m.Elif(c_op == CtrlOp.MODIFY):
                    with m.If(c_hit):
                        m.d.sync += [valid_a[c_idx].eq(0), dirty_a[c_idx].eq(0)]
                    m.d.comb += [
                        we_start.eq(1), we_from_ctrl.eq(1), we_start_len.eq(_BEATS - 1),
                        we_start_addr.eq(rec_addr(self.ctrl.payload.qpn)),
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
                    m.d.sync += c_vds.eq(Cat(*valid) & Cat(*dirty))
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
                m.d.comb += [ctrl_block.eq(1), ctrl_rd.eq(1)]
                m.next = "Read-Entry"
            with m.State("Read-Entry"):
                m.d.comb += [ctrl_block.eq(1), wb_ev.eq(1)]
                m.d.sync += wb_buf.eq(mut_rp.data)
                m.d.comb += [
                    we_start.eq(1), we_from_ctrl.eq(0), we_start_len.eq(_WB_BEATS - 1),
                    we_start_addr.eq(wb_addr),
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
                m.d.comb += [ctrl_block.eq(1), self.ack.valid.eq(1), self.ack.payload.status.eq(c_status)]
                with m.If(self.ack.ready):
                    m.d.comb += [self.ctrl.ready.eq(1), ctrl_err.eq(c_status != Status.OK)]
                    m.d.sync += c_own.eq(0)
                    m.next = "Idle"

        return m
