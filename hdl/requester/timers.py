"""Per-QP timers in one memory, scanned (:class:`rnic.model.timers.TimerTable` in logic)."""

from amaranth import Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from ...model.timers import DEADLINE_BITS, ack_timeout_ticks

__all__ = ["TimerTable", "cmd_layout", "expired_layout", "ack_ticks"]


def cmd_layout(max_qps: int) -> data.StructLayout:
    """Arm QP ``qpn``'s timer ``delay`` ticks from now (replacing what it had), or disarm it."""
    return data.StructLayout({"qpn": ceil_log2(max_qps), "arm": 1, "kind": 1, "delay": DEADLINE_BITS - 1})


def expired_layout(max_qps: int) -> data.StructLayout:
    return data.StructLayout({"qpn": ceil_log2(max_qps), "kind": 1})


def ack_ticks(timeout):
    """The local ACK timeout ``timeout`` (a QP context's ``ack_timeout``, not 0) in ticks, as
    :func:`rnic.model.timers.ack_timeout_ticks`: ``4 << timeout``, saturating at ``2**31 - 1``."""
    top = (1 << (DEADLINE_BITS - 1)) - 1
    cap_from = next(t for t in range(1, 64) if ack_timeout_ticks(t) == top)
    return Mux(timeout >= cap_from, top, Const(4, 33) << timeout)


_entry = data.StructLayout({"armed": 1, "kind": 1, "deadline": DEADLINE_BITS})


class TimerTable(wiring.Component):
    """One timer per QP, ``max_qps`` of them in one memory (``2 + 32`` bits each: block RAM, not a
    counter per QP).

    Time is a 32-bit tick count, advanced every ``tick`` clocks (0 stops it). A command writes the QP's
    entry: armed with its deadline ``now + delay`` and kind, or disarmed. A scanner visits one entry every
    two clocks (read, then check); an armed entry whose deadline has come (``now - deadline`` in
    half-range arithmetic) is cleared and reported on ``expired``. So a timer fires between its deadline
    tick and ``2 * max_qps`` clocks after it, later only while ``expired`` is not ready.

    Handshakes: ``cmd.ready`` is low only in a clock where the scanner clears a firing entry (the
    memory's one write port); an entry that a command touches between the scanner's read and its check
    is left for the next scan. ``expired`` is a registered stream (valid holds until ready).

    Members
    -------
    cmd : In(stream.Signature(cmd_layout))
    expired : Out(stream.Signature(expired_layout))
    tick : In(16)
        Clocks per tick (the ``TIMER_TICK`` register).
    now : Out(32)
        The tick count.
    """

    def __init__(self, max_qps: int = 256):
        self.max_qps = max_qps
        super().__init__({"cmd": In(stream.Signature(cmd_layout(max_qps))),
                          "expired": Out(stream.Signature(expired_layout(max_qps))),
                          "tick": In(16), "now": Out(DEADLINE_BITS)})

    def elaborate(self, platform):
        m = Module()
        n = self.max_qps
        ab = ceil_log2(n)
        cmd, out = self.cmd, self.expired

        div = Signal(16)
        with m.If(self.tick != 0):
            with m.If(div + 1 >= self.tick):
                m.d.sync += [div.eq(0), self.now.eq(self.now + 1)]
            with m.Else():
                m.d.sync += div.eq(div + 1)

        m.submodules.table = table = Memory(shape=_entry, depth=n, init=[])
        wr = table.write_port()
        rd = table.read_port()

        scan = Signal(ab)
        check = Signal()                # this clock: rd.data is entry ``scan``
        stale = Signal()                # a command wrote entry ``scan`` since its read began
        hit = cmd.valid & (cmd.payload.qpn == scan)
        m.d.comb += rd.addr.eq(scan)

        entry = data.View(_entry, rd.data)
        due = Signal()
        m.d.comb += due.eq(~(self.now - entry.deadline)[DEADLINE_BITS - 1])
        fire = Signal()
        m.d.comb += fire.eq(check & ~stale & ~hit & entry.armed & due)
        clear = Signal()                # the firing entry is reported and cleared this clock
        m.d.comb += [clear.eq(fire & (~out.valid | out.ready)), cmd.ready.eq(~clear)]

        with m.If(out.ready):
            m.d.sync += out.valid.eq(0)
        with m.If(clear):
            m.d.comb += [wr.addr.eq(scan), wr.data.eq(0), wr.en.eq(1)]
            m.d.sync += [out.valid.eq(1), out.payload.qpn.eq(scan), out.payload.kind.eq(entry.kind)]
        with m.Elif(cmd.valid):
            new = Signal(_entry)
            m.d.comb += [new.armed.eq(cmd.payload.arm), new.kind.eq(cmd.payload.kind),
                         new.deadline.eq(self.now + cmd.payload.delay),
                         wr.addr.eq(cmd.payload.qpn), wr.data.eq(new), wr.en.eq(1)]

        # read (check = 0), then check (check = 1): move on unless a firing entry could not be reported
        # (``expired`` full), in which case read it again
        blocked = fire & ~clear
        with m.If(~check):
            m.d.sync += [check.eq(1), stale.eq(hit)]
        with m.Else():
            m.d.sync += [check.eq(0), stale.eq(0)]
            with m.If(~blocked):
                m.d.sync += scan.eq(Mux(scan == n - 1, 0, scan + 1))
        return m
