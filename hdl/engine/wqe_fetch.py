"""The WQE read machinery: one AR register, the beat queue, the prefetcher and the lookahead."""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.hdl import Assert
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ...model.regs import DATAPATH_WIDTHS
from ..bus import AXI4Signature
from ..fifo import BlockFIFO
from .layouts import ring_layout

__all__ = ["ring_of", "ring_slot", "WqeFetch"]


def ring_of(qp):
    """The :data:`ring_layout` fields of the context ``qp`` (values to register)."""
    return {"lo": qp.sq_base[6:21], "hi": qp.sq_base[21:], "hi1": (qp.sq_base[21:] + 1)[:43],
            "mask": ((Const(1, 17) << qp.log_sq_size[:4]) - 1)[:15]}


def ring_slot(m, ring, ci):
    """Host address of slot ``ci`` of the ring ``ring`` (a :data:`ring_layout` value)."""
    s = Signal(16)
    m.d.comb += s.eq(ring.lo + (ci[:15] & ring.mask))
    return Cat(Const(0, 6), s[:15], Mux(s[15], ring.hi1, ring.hi))


class WqeFetch(wiring.Component):
    """Reads WQEs: one burst of ``512 / width`` beats per WQE on ``m_axi``, in AR order into a beat
    queue, gathered into one 512-bit WQE (``wqe``) that the control takes whole in one clock.

    Three sources raise a burst, at most one in a clock, through one AR register (``arvalid``):

    * **Fetch** (``fetch_raise``) asks for ``issue_ci``, the WQE the control issues next, once every
      older burst is dropped;
    * the **prefetcher** (``pf_raise``) reads the WQEs after it (``pf_ci`` up) while a send chain
      is on; the control takes the oldest burst as the chained WQE (``issue_advance``), and a burst
      the chain does not use is dropped (``take`` with ``wqe_valid``) by the next Fetch or by
      Turn-End;
    * the **lookahead** (``la_raise``, then ``la_more`` on its own) reads up to ``la_want`` WQEs of
      the next turn's QP from its ``sq_ci``. Those bursts are then the newest, ``la_cnt`` of them;
      the next turn's Fetch takes the first if it is that turn's first WQE (``adopt_lookahead``:
      the rest are then its read-ahead), else they are dropped.

    The AR register loads its address and length in every clock without an AR held, from the burst
    that would be raised: which one is raised then only sets ``arvalid``, and no raise decision
    reaches the 64-bit address mux. ``pf_n`` counts bursts asked for and not yet taken out (at most
    ``prefetch_max``, so the beat queue never fills and ``rready`` stays 1).

    An RC or UC WQE is read *short*: its first beats hold every field such a WQE uses (bytes
    0..39) but inline data; the control reads an inline one again in full (``full_read``).

    Parameters
    ----------
    prefetch_max : int
        WQE bursts in flight at once (the engine's ``wqe_prefetch``).
    width : int
        Data width of ``m_axi`` in bits, 64 .. 512.

    Members
    -------
    m_axi : Out(AXI4Signature)
        WQE reads (ID 0); read only.
    ring, sq_pi, ud, qpn : In
        The current QP's SQ ring (:data:`ring_layout`, registered with its context), producer
        index, service (UD WQEs are read whole) and QPN.
    issue_restart, issue_advance, issue_from : In
        Strobes: ``issue_ci`` becomes ``issue_from`` (a turn's first WQE) / ``next_ci`` (the next
        WQE of a chain).
    issue_moved, next_ci : Out
        ``issue_ci`` changed at the last edge (Fetch waits a clock: the slot address is a
        flip-flop a clock behind); ``issue_ci + 1``, a register beside it.
    fetch_raise, fetch_state, full_read : In
        Fetch asks for ``issue_ci`` (a strobe; the control is in Fetch: ``fetch_state``) and reads
        it whole (``full_read``).
    pf_raise : In
        Strobe: the prefetcher asks for ``pf_ci``.
    adopt_lookahead : In
        Strobe (Fetch): the lookahead's first burst is ``issue_ci``'s; the prefetcher goes on after it.
    la_raise, la_first_ci, la_first_ring, la_first_addr, la_first_short, la_want : In
        Strobe (Peek-Go): start a lookahead of ``la_want`` bursts from ``la_first_ci`` of the ring
        ``la_first_ring``; its first burst's address and length.
    la_offer : In
        The control is in Peek-Go (``la_first_*`` are current). While no lookahead is held, the
        lookahead's registers and the AR register load from ``la_first_*`` on ``la_offer``, not on
        ``la_raise``: the raise, a late decision, drives only the flags and counts.
    la_hold : In
        No lookahead burst is added in this clock (Fetch).
    la_drop, la_qpn_load, la_qpn_from : In
        Strobes: forget the lookahead; take ``la_qpn_from`` as the lookahead's QP (Peek).
    la_valid, la_qpn, la_cnt, la_held, la_here : Out
        A lookahead is held, for QP ``la_qpn``, ``la_cnt`` bursts (``la_held``: 0 if none);
        ``la_here``: its first WQE is ``issue_ci`` of ``qpn`` (a flip-flop, set with ``issue_ci``).
    take : In
        Strobe: take (or drop) the gathered WQE if ``wqe_valid``.
    wqe, wqe_valid, wqe_err, wqe_short : Out
        The oldest burst gathered: its data, whole, a beat had a bus error, it was a short read.
    pf_n, pf_valid, next_ci_at_pi, pf_ci_at_pi : Out
        Bursts outstanding; the AR register holds a burst (``arvalid``); ``next_ci == sq_pi`` and
        ``pf_ci == sq_pi`` as flip-flops of a clock before (see the control's Asserts).
    bursts_moved : Out
        A burst was asked for or taken out in this clock.
    uses_ring : In
        The control reads ``next_ci_at_pi`` / ``pf_ci_at_pi`` now (for their Asserts).
    """

    def __init__(self, prefetch_max: int = 4, width: int = 64):
        if width not in DATAPATH_WIDTHS:
            raise ValueError(f"width must be 64, 128, 256 or 512, not {width!r}")
        self.prefetch_max, self.width = prefetch_max, width
        n = range(prefetch_max + 1)
        super().__init__({
            "m_axi": Out(AXI4Signature(addr_width=64, data_width=width, id_width=4)),
            "ring": In(ring_layout), "sq_pi": In(16), "ud": In(1), "qpn": In(24),
            "issue_restart": In(1), "issue_advance": In(1), "issue_from": In(16),
            "issue_moved": Out(1), "next_ci": Out(16, init=1),
            "fetch_raise": In(1), "fetch_state": In(1), "full_read": In(1),
            "pf_raise": In(1), "adopt_lookahead": In(1),
            "la_raise": In(1), "la_first_ci": In(16), "la_first_ring": In(ring_layout), "la_first_addr": In(64),
            "la_first_short": In(1), "la_want": In(n), "la_offer": In(1), "la_hold": In(1),
            "la_drop": In(1), "la_qpn_load": In(1), "la_qpn_from": In(24),
            "la_valid": Out(1), "la_qpn": Out(24), "la_cnt": Out(n), "la_held": Out(n), "la_here": Out(1),
            "take": In(1), "wqe": Out(512), "wqe_valid": Out(1), "wqe_err": Out(1), "wqe_short": Out(1),
            "pf_n": Out(n), "pf_valid": Out(1), "next_ci_at_pi": Out(1), "pf_ci_at_pi": Out(1),
            "bursts_moved": Out(1), "uses_ring": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        prefetch_max, ww = self.prefetch_max, self.width
        burst_beats = 512 // ww
        short_beats = -(-40 * 8 // ww)     # the beats of bytes 0..39
        axi = self.m_axi

        # --- the beat queue and the gathering of the oldest burst ---------------------------------
        # at W > 64 the queue is a few entries of W + 2 bits: LUT RAM, not block RAMs used for their width
        fifo = BlockFIFO if ww == 64 else SyncFIFOBuffered
        m.submodules.wqe_beats = beats = fifo(width=ww + 2, depth=max(2, burst_beats * prefetch_max))
        beat_data, beat_err, beat_last = beats.r_data[:ww], beats.r_data[ww], beats.r_data[ww + 1]
        wqe, wqe_valid, wqe_err, wqe_short = self.wqe, self.wqe_valid, self.wqe_err, self.wqe_short
        gather_beat = Signal(range(burst_beats))
        m.d.comb += beats.r_en.eq(~wqe_valid)
        with m.If(beats.r_rdy & ~wqe_valid):
            for k in range(burst_beats):
                with m.If(gather_beat == k):
                    m.d.sync += wqe[k * ww:(k + 1) * ww].eq(beat_data)
            m.d.sync += [wqe_err.eq(wqe_err | beat_err), wqe_valid.eq(beat_last),
                         gather_beat.eq(Mux(beat_last, 0, gather_beat + 1)),
                         wqe_short.eq(gather_beat != burst_beats - 1)]
        taken = self.take & wqe_valid
        with m.If(taken):
            m.d.sync += [wqe_valid.eq(0), wqe_err.eq(0)]

        # --- the AR register ----------------------------------------------------------------------
        pf_valid = self.pf_valid
        pf_addr = Signal(64)
        pf_short = Signal()            # the AR held is a short one
        m.d.comb += [axi.arsize.eq(exact_log2(ww // 8)), axi.arburst.eq(1), axi.bready.eq(1),
                     axi.arlen.eq(Mux(pf_short, short_beats - 1, burst_beats - 1)),
                     axi.arvalid.eq(pf_valid), axi.araddr.eq(pf_addr),
                     axi.rready.eq(beats.w_rdy), beats.w_en.eq(axi.rvalid),
                     beats.w_data.eq(Cat(axi.rdata, axi.rresp[1], axi.rlast))]
        with m.If(pf_valid & axi.arready):
            m.d.sync += pf_valid.eq(0)

        # --- issue_ci and the lookahead test ------------------------------------------------------
        issue_ci, next_ci = Signal(16), self.next_ci
        la_valid, la_qpn, la_cnt, la_here = self.la_valid, self.la_qpn, self.la_cnt, self.la_here
        la_ci = Signal(16)
        la_next = Signal(16)           # the next WQE index the lookahead asks for
        # la_here: Fetch's lookahead test as a flip-flop: set with issue_ci, else from the registers
        # a clock before (la_qpn, la_ci and qpn change clocks before a Fetch)
        m.d.sync += [la_here.eq((la_qpn == self.qpn) & (la_ci == issue_ci)), self.issue_moved.eq(0)]
        with m.If(self.issue_restart | self.issue_advance):
            ci = Mux(self.issue_advance, next_ci, self.issue_from)
            m.d.sync += [issue_ci.eq(ci), next_ci.eq(ci + 1), la_here.eq((la_qpn == self.qpn) & (la_ci == ci)),
                         self.issue_moved.eq(1)]
        m.d.sync += Assert(~self.fetch_state | (la_here == ((la_qpn == self.qpn) & (la_ci == issue_ci))),
                           "engine: la_here\n")

        # --- raises -------------------------------------------------------------------------------
        pf_n, pf_ci = self.pf_n, Signal(16)
        la_todo = Signal(range(prefetch_max + 1))
        la_ring = Signal(ring_layout)  # the lookahead's ring, from Peek-Go
        la_short = Signal()
        m.d.comb += self.la_held.eq(Mux(la_valid, la_cnt, 0))
        la_more = Signal()             # the lookahead's next burst
        m.d.comb += la_more.eq(la_valid & (la_todo != 0) & ~pf_valid & ~self.la_hold)
        pf_raise, la_raise, fetch_raise = self.pf_raise, self.la_raise, self.fetch_raise
        asked = pf_raise | la_raise | la_more | fetch_raise
        m.d.sync += pf_n.eq(pf_n + asked - taken)
        m.d.comb += self.bursts_moved.eq(asked | taken)
        m.d.sync += Assert((pf_n != prefetch_max) | ~asked | taken,
                           "engine: more WQE bursts asked for than the queue holds\n")
        # at most one raise in a clock (pf_raise needs ~fetching, la_more ~la_hold (Fetch) and
        # la_valid, la_raise Peek-Go)
        m.d.sync += Assert((pf_raise + la_raise + la_more + fetch_raise <= 1) & ~(la_raise & la_valid),
                           "engine: two WQE bursts raised at once\n")
        # The lookahead's next slot, the prefetcher's and Fetch's are flip-flops themselves, a clock
        # behind la_next / pf_ci / issue_ci: those move only on a raise, which holds pf_addr for a
        # clock at least (pf_valid), or Fetch waits for them (issue_moved), so the slot is current
        # whenever pf_addr loads from it (Asserts below).
        la_slot, pf_slot, fetch_slot = Signal(64), Signal(64), Signal(64)
        m.d.sync += [la_slot.eq(ring_slot(m, la_ring, la_next)), pf_slot.eq(ring_slot(m, self.ring, pf_ci)),
                     fetch_slot.eq(ring_slot(m, self.ring, issue_ci))]
        # (la_raise comes with la_offer and without la_valid; pf_raise with neither)
        la_offer = self.la_offer & ~la_valid
        with m.If(~pf_valid):
            m.d.sync += [pf_addr.eq(Mux(self.fetch_state, fetch_slot,
                                        Mux(la_valid, la_slot, Mux(la_offer, self.la_first_addr, pf_slot)))),
                         pf_short.eq(Mux(self.fetch_state, ~self.full_read & ~self.ud,
                                         Mux(la_valid, la_short, Mux(la_offer, self.la_first_short, ~self.ud))))]
        m.d.sync += [Assert(~pf_raise | (pf_slot == ring_slot(m, self.ring, pf_ci)), "engine: pf_slot stale at a raise\n"),
                     Assert(~la_more | (la_slot == ring_slot(m, la_ring, la_next)), "engine: la_slot stale at a raise\n"),
                     Assert(~fetch_raise | (fetch_slot == ring_slot(m, self.ring, issue_ci)),
                            "engine: fetch_slot stale at a raise\n"),
                     Assert(~fetch_raise | ~pf_valid, "engine: Fetch raised beside a held AR\n"),
                     Assert(~la_raise | la_offer, "engine: a lookahead raised outside Peek-Go\n")]
        with m.If(fetch_raise):
            m.d.sync += pf_valid.eq(1)
        with m.If(pf_raise):
            m.d.sync += [pf_valid.eq(1), pf_ci.eq(pf_ci + 1)]
        with m.If(la_raise):
            m.d.sync += [pf_valid.eq(1), la_valid.eq(1), la_cnt.eq(1), la_todo.eq(self.la_want - 1)]
        with m.If(la_more):
            m.d.sync += [pf_valid.eq(1), la_next.eq(la_next + 1), la_cnt.eq(la_cnt + 1), la_todo.eq(la_todo - 1)]

        # --- the control's strobes (after the raises: they win, as in the one-FSM form) -------------
        # (la_ci feeds la_here, which Fetch reads only with la_valid)
        with m.If(la_offer):
            m.d.sync += [la_ci.eq(self.la_first_ci), la_next.eq(self.la_first_ci + 1),
                         la_ring.eq(self.la_first_ring), la_short.eq(self.la_first_short)]
        with m.If(self.la_qpn_load):
            m.d.sync += la_qpn.eq(self.la_qpn_from)
        with m.If(self.la_drop):
            m.d.sync += la_valid.eq(0)
        with m.If(self.adopt_lookahead):
            m.d.sync += [la_valid.eq(0), pf_ci.eq(la_next)]      # the lookahead is this WQE and on
        with m.If(fetch_raise):
            m.d.sync += pf_ci.eq(next_ci)

        # the ring compares are flip-flops computed from the clock before (the control's Asserts)
        m.d.sync += [self.next_ci_at_pi.eq(next_ci == self.sq_pi), self.pf_ci_at_pi.eq(pf_ci == self.sq_pi)]
        m.d.sync += [Assert(~self.uses_ring | (self.next_ci_at_pi == (next_ci == self.sq_pi)),
                            "engine: registered next_ci == sq_pi differs\n"),
                     Assert(~self.uses_ring | pf_valid | (self.pf_ci_at_pi == (pf_ci == self.sq_pi)),
                            "engine: registered pf_ci == sq_pi differs\n")]
        return m
