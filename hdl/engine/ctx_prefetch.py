"""Context prefetch: the QPs a few places behind the ready list's head, asked of the QP cache early."""

from amaranth import Cat, Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ..fifo import BlockFIFO

__all__ = ["ContextPrefetch"]


class ContextPrefetch(wiring.Component):
    """Names the QPs up to ``distance`` places behind the ready list's head (the turns after the next
    one, which Peek looks up itself), each once, as it comes within reach. ``Rnic`` sends each as a
    LOOKUP whose response it drops: the context is then in the cache, or on its way, when the turn's
    own lookup comes.

    It keeps a copy of the ready list's QPNs (a second queue, written with every push and each entry
    numbered) and counts the pops: an entry's place behind the head is its number minus the pops. An
    entry at place 1 .. ``distance`` goes out on ``req``; one at place 0 or below (the head, or already
    popped) is dropped; a farther one waits. A push that finds the copy full is not copied (that QP is
    not prefetched: a hint, no more); the numbers keep every other place right.

    Parameters
    ----------
    max_qps : int
        Of the ready list (power of two): its depth, and the copy's.
    distance : int
        Places behind the head to prefetch, 1 .. 8.

    Members
    -------
    push, push_qpn : In(1), In(24)
        The ready list's write, in the clock it is written (``ReadyList.pushing``, ``pushed_qpn``).
    pop : In(1)
        The ready list's head is taken in this clock.
    req : Out(stream of 24-bit QPNs)
        From a register; ``valid`` stays until ``ready``.
    """

    def __init__(self, max_qps: int, distance: int):
        exact_log2(max_qps)
        if not 1 <= distance <= 8:
            raise ValueError(f"distance must be 1..8, not {distance!r}")
        self.max_qps, self.distance = max_qps, distance
        super().__init__({"push": In(1), "push_qpn": In(24), "pop": In(1), "req": Out(stream.Signature(24))})

    def elaborate(self, platform):
        m = Module()
        qb = exact_log2(self.max_qps)
        nb = qb + 2                                  # places run from -max_qps to max_qps
        entry = data.StructLayout({"qpn": qb, "num": nb})
        m.submodules.copy = copy = BlockFIFO(width=entry.size, depth=self.max_qps)
        pushes, pops = Signal(nb), Signal(nb)
        with m.If(self.push):
            m.d.sync += pushes.eq(pushes + 1)
        with m.If(self.pop):
            m.d.sync += pops.eq(pops + 1)
        m.d.comb += [copy.w_en.eq(self.push & copy.w_rdy),
                     copy.w_data.eq(Cat(self.push_qpn[:qb], pushes))]

        head = data.View(entry, copy.r_data)
        place = Signal(nb)
        m.d.comb += place.eq(head.num - pops)
        behind = place[-1] | (place == 0)            # the head or already popped
        req = self.req
        with m.If(req.ready):
            m.d.sync += req.valid.eq(0)
        with m.If(copy.r_rdy & behind):
            m.d.comb += copy.r_en.eq(1)
        with m.Elif(copy.r_rdy & (place <= self.distance) & (~req.valid | req.ready)):
            m.d.comb += copy.r_en.eq(1)
            m.d.sync += [req.valid.eq(1), req.payload.eq(head.qpn)]
        return m
