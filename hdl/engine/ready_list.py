"""The scheduler's ready list: the QPs that have work, each at most once, in round-robin order."""

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ..fifo import BlockFIFO, check_credit

__all__ = ["entry_layout", "ReadyList"]

#: A ready-list entry: the QP, and the byte offset of its current message (a partly sent message).
entry_layout = data.StructLayout({"qpn": 24, "offset": 32})


class ReadyList(wiring.Component):
    """A FIFO of ``max_qps`` entries, and one *scheduled* bit per QP (a memory) so that a QP is in
    it at most once. Beside the bit the memory keeps a *parked* QP's message offset: a QP that the
    requester's holds stopped inside a message leaves the list with its offset (``mark_offset``),
    and the doorbell that queues it again takes the offset back (``parked_offset``).

    A reset clears flip-flops, not memories: after reset the control holds ``clear`` for
    ``max_qps`` clocks (until ``clear_last``), which zeroes the scheduled bits one a clock; else a
    reset in mid-turn would leave QPs marked scheduled that are in no ready list.

    The writes (``push`` and ``mark``) go out a clock after the control decides them: registered,
    off the control FSM's paths. ``pushing`` high means an entry is on its way: the control counts
    it as in the list.

    Parameters
    ----------
    max_qps : int
        Power of two: QPNs it can hold.

    Members
    -------
    head : Out(stream of :data:`entry_layout`)
        The oldest entry; ``valid`` is the FIFO's ``r_rdy``, a transfer pops it. The control reads
        the payload without popping (the lookahead's QP) and pops only while ``valid``.
    empty : Out(1)
        No entry in the list (``level == 0``; an entry written reaches ``head.valid`` clocks later).
    push_en, push_data : In
        Strobe: queue ``push_data`` (an :data:`entry_layout` value) at the next edge's write.
    pushing, pushed_qpn : Out(1), Out(24)
        The registered write enable (an entry is being written in this clock) and the entry's QPN.
    mark_en, mark_data, mark_qpn, mark_offset : In
        Strobe: write ``mark_data`` as ``mark_qpn``'s scheduled bit and ``mark_offset`` as its parked
        offset (registered like ``push``).
    clear : In(1)
        Zero the scheduled bit of the clear counter's QP and count on (the post-reset Clear).
    clear_last : Out(1)
        The clear counter is at its last QP: ``clear`` in this clock ends the Clear.
    sched_qpn : In(24)
        The QP whose scheduled bit ``scheduled`` shows, a clock after ``sched_qpn`` (transparent
        for the bit's write).
    scheduled, parked_offset : Out(1), Out(32)
    rew_en, rew_data, rew_qpn : In
        Strobe: write ``rew_data`` as ``rew_qpn``'s *rewound* bit (a queued QP whose entry's offset is
        stale: the requester moved its send pointer), at the next edge.
    rew_read_qpn : In(24); rewound : Out(1)
        The rewound bit of ``rew_read_qpn``, a clock after it (transparent for the bit's write). One
        memory bit per QP, cleared with the scheduled bits after reset.
    """

    def __init__(self, max_qps: int = 256):
        self.max_qps = max_qps
        exact_log2(max_qps)
        super().__init__({
            "head": Out(stream.Signature(entry_layout)), "empty": Out(1),
            "push_en": In(1), "push_data": In(entry_layout), "pushing": Out(1), "pushed_qpn": Out(24),
            "mark_en": In(1), "mark_data": In(1), "mark_qpn": In(24), "mark_offset": In(32),
            "clear": In(1), "clear_last": Out(1),
            "sched_qpn": In(24), "scheduled": Out(1), "parked_offset": Out(32),
            "rew_en": In(1), "rew_data": In(1), "rew_qpn": In(24), "rew_read_qpn": In(24), "rewound": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        max_qps = self.max_qps
        qpn_bits = exact_log2(max_qps)
        m.submodules.fifo = fifo = BlockFIFO(width=entry_layout.size, depth=max_qps, fabric_out=True)
        m.submodules.sched = sched = Memory(shape=33, depth=max_qps, init=[], attrs={"ram_style": "block"})
        sched_w = sched.write_port()
        sched_r = sched.read_port(transparent_for=(sched_w,))
        m.d.comb += [sched_r.addr.eq(self.sched_qpn[:qpn_bits]), self.scheduled.eq(sched_r.data[0]),
                     self.parked_offset.eq(sched_r.data[1:])]

        clear_qpn = Signal(range(max_qps))
        with m.If(self.clear):
            m.d.sync += clear_qpn.eq(clear_qpn + 1)
        m.d.comb += self.clear_last.eq(clear_qpn == max_qps - 1)
        mark_en, mark_data, mark_addr = Signal(), Signal(33), Signal(qpn_bits)
        m.d.comb += [mark_en.eq(self.clear | self.mark_en),
                     mark_data.eq(Mux(self.clear, 0, Cat(self.mark_data, self.mark_offset))),
                     mark_addr.eq(Mux(self.clear, clear_qpn, self.mark_qpn[:qpn_bits]))]
        m.submodules.rew = rew = Memory(shape=1, depth=max_qps, init=[])
        rew_w = rew.write_port()
        rew_r = rew.read_port(transparent_for=(rew_w,))
        m.d.comb += [rew_w.en.eq(self.clear | self.rew_en), rew_w.data.eq(~self.clear & self.rew_data),
                     rew_w.addr.eq(Mux(self.clear, clear_qpn, self.rew_qpn[:qpn_bits])),
                     rew_r.addr.eq(self.rew_read_qpn[:qpn_bits]), self.rewound.eq(rew_r.data)]
        m.d.sync += [fifo.w_en.eq(self.push_en), fifo.w_data.eq(self.push_data),
                     sched_w.en.eq(mark_en), sched_w.data.eq(mark_data), sched_w.addr.eq(mark_addr)]
        m.d.comb += [self.pushing.eq(fifo.w_en), self.pushed_qpn.eq(data.View(entry_layout, fifo.w_data).qpn),
                     self.empty.eq(fifo.empty),
                     self.head.valid.eq(fifo.r_rdy), self.head.payload.eq(fifo.r_data),
                     fifo.r_en.eq(self.head.ready)]
        check_credit(m, fifo, "engine: ready list (one entry per QP at most)")
        return m
