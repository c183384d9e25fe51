"""A FIFO whose storage goes to block RAM without collision logic.

Yosys maps a small memory (16 to 32 entries) to LUT RAM by its own cost rule, even when it is
hundreds of bits wide; on an ECP5 each 16 x 4 bits of LUT RAM is six LUT4s' worth of logic,
while block RAM is plentiful. Amaranth's ``SyncFIFOBuffered`` asked for block RAM still costs
about one LUT4 and two flip-flops per bit: its read port is synchronous and read-first, which the
ECP5's pseudo-dual-port RAM cannot do, so yosys delays every write by a clock and bypasses it.

:class:`BlockFIFO` has the same ports and the same timing as ``SyncFIFOBuffered`` (``r_data`` is a
register, one clock more latency than ``SyncFIFO``). Its storage is marked
``ram_style = "block"`` and ``no_rw_check``, and is read through an asynchronous port followed by
a register, which yosys merges into the RAM; ``no_rw_check`` then lets it drop the read-first
logic, because this queue never reads the entry it writes in the same clock (a write needs a free
entry, a read a full one).

That RAM's read data leaves it 5.8 ns after the clock (ECP5, speed grade 6, yosys' mapping leaves the
RAM's output register off), most of a 6.4 ns clock. With ``outreg`` (``True``, or ``None``: on an ECP5 only)
:class:`BlockFIFO` reads its storage through the RAM's own output register
(:func:`rnic.hdl.prim.outreg_ram`): the RAM's read stage and output register are a two-entry
pipeline that holds the next entries ahead of ``r_data``, refilled as ``r_data`` takes them, and the
two entries written last are kept in flip-flops as well, for an entry taken within two clocks of
its write, before the pipeline can have it. The ports and their timing stay the same; the cost is
two flip-flops and about one LUT4 per bit. It is off by default: ``tests/test_fifo_ecp5.py``
simulates it against a ``DP16KD`` model written for it (yosys has only a blackbox), and the
512 x 36 mode's read data on port A's pins, with port A's output register enabled by port B's
clock enables, has not yet been checked on a board.
"""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.hdl import Assert
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import Memory

from .prim import BLOCK_RAM, lut4, outreg_ram, replicas

__all__ = ["BlockFIFO", "CreditFIFO", "check_credit"]


def check_credit(m, fifo, what, *, write=True, read=False):
    """Simulation checks of a queue written (``write``) or read (``read``) on a credit the design
    keeps, not on ``w_rdy`` / ``r_rdy``: a write while full or a read while empty would lose or
    invent an entry. Amaranth ``Assert``s: Verilator (``--assert``) stops the simulation with
    ``what`` in the message; synthesis removes them (``chformal -remove``)."""
    if write:
        m.d.sync += Assert(~fifo.w_en | fifo.w_rdy, f"{what}: write to a full queue\n")
    if read:
        m.d.sync += Assert(~fifo.r_en | fifo.r_rdy, f"{what}: read from an empty queue\n")


class BlockFIFO(SyncFIFOBuffered):
    """``SyncFIFOBuffered(width=, depth=)`` with its ``depth - 1`` entries of storage in block RAM.

    ``fabric_out=True`` (``depth`` >= 3) adds an output register in the fabric behind the queue's own
    (``depth - 2`` entries in block RAM), at the cost of one clock more from ``w_en`` to ``r_rdy``:
    where the queue's own is the RAM's read stage (yosys' mapping), ``r_data`` then comes from a
    flip-flop, not from the RAM's 5.8 ns clock-to-output (ECP5, speed grade 6); with ``outreg`` (an
    ECP5) ``r_data`` is a fabric flip-flop in both forms. The ports behave as
    ``SyncFIFOBuffered``'s otherwise (``level`` counts every entry).

    ``empty`` (not a port) is ``level == 0`` without the adders of ``level``.

    ``outreg`` (``True``; ``None``: on an ECP5 only; default off) reads the block RAM through its
    output register (module docstring), for ``depth`` >= 4; the ports behave the same.
    """

    def __init__(self, *, width, depth, fabric_out=False, outreg=False):
        if fabric_out and depth < 3:
            raise ValueError(f"fabric_out needs depth >= 3, not {depth!r}")
        self._fabric_out = fabric_out
        self._outreg = outreg
        super().__init__(width=width, depth=depth)
        self.empty = Signal()

    def elaborate(self, platform):
        if self._fabric_out:
            m = Module()
            m.submodules.ram = ram = BlockFIFO(width=self.width, depth=self.depth - 1,
                                               outreg=self._outreg)
            out = Signal(self.width, reset_less=True)
            m.d.comb += [
                ram.w_en.eq(self.w_en), ram.w_data.eq(self.w_data), self.w_rdy.eq(ram.w_rdy),
                ram.r_en.eq(~self.r_rdy | self.r_en),
                self.r_data.eq(out),
                self.level.eq(ram.level + self.r_rdy),
                self.w_level.eq(self.level),
                self.r_level.eq(self.level),
                self.empty.eq(ram.empty & ~self.r_rdy),
            ]
            with m.If(ram.r_rdy & ram.r_en):
                m.d.sync += [out.eq(ram.r_data), self.r_rdy.eq(1)]
            with m.Elif(self.r_en):
                m.d.sync += self.r_rdy.eq(0)
            return m
        if self.depth < 2:
            m = super().elaborate(platform)
            m.d.comb += self.empty.eq(self.level == 0)
            return m
        outreg = self._outreg
        if outreg is None:
            outreg = getattr(platform, "family", None) == "ecp5"
        if outreg and self.depth >= 4:
            return self._elaborate_outreg(platform)
        m = Module()
        inner_depth = self.depth - 1
        inner_level = Signal(range(inner_depth + 1))
        produce = Signal(range(inner_depth))
        consume = Signal(range(inner_depth))
        out = Signal(self.width, reset_less=True)

        m.submodules.storage = storage = Memory(shape=self.width, depth=inner_depth, init=[],
                                                attrs=BLOCK_RAM)
        w_port = storage.write_port()
        r_port = storage.read_port(domain="comb")

        do_write = self.w_rdy & self.w_en
        do_inner_read = (inner_level != 0) & (~self.r_rdy | self.r_en)
        m.d.comb += [
            self.w_rdy.eq(inner_level != inner_depth),
            w_port.addr.eq(produce), w_port.data.eq(self.w_data), w_port.en.eq(do_write),
            r_port.addr.eq(consume),
            self.r_data.eq(out),
            self.level.eq(inner_level + self.r_rdy),
            self.w_level.eq(self.level),
            self.r_level.eq(self.level),
            self.empty.eq((inner_level == 0) & ~self.r_rdy),
        ]
        with m.If(do_write):
            m.d.sync += produce.eq(Mux(produce == inner_depth - 1, 0, produce + 1))
        with m.If(do_inner_read):
            m.d.sync += [consume.eq(Mux(consume == inner_depth - 1, 0, consume + 1)),
                         out.eq(r_port.data), self.r_rdy.eq(1)]
        with m.Elif(self.r_en):
            m.d.sync += self.r_rdy.eq(0)
        with m.If(do_write & ~do_inner_read):
            m.d.sync += inner_level.eq(inner_level + 1)
        with m.If(do_inner_read & ~do_write):
            m.d.sync += inner_level.eq(inner_level - 1)
        return m

    def _elaborate_outreg(self, platform):
        m = Module()
        inner_depth = self.depth - 1
        ring = 1 << max(1, (inner_depth - 1).bit_length())
        inner_level = Signal(range(inner_depth + 1))
        n0, n1, n2 = Signal(init=1), Signal(), Signal()     # inner_level == 0, 1, 2
        full = Signal()                                     # inner_level == inner_depth
        produce = Signal(range(ring))
        consume = Signal(range(ring))
        rd = Signal(range(ring))           # next entry for the RAM's read stage
        rd_1 = Signal(range(ring), init=1)                  # rd + 1
        v_o = Signal()                     # the RAM's output register holds the entry at consume
        v_l = Signal()                     # its read stage holds the entry after those before it
        both = Signal()                    # v_o & v_l
        last = Signal(self.width, reset_less=True)       # the entry written last
        before = Signal(self.width, reset_less=True)     # the one written before it
        out = Signal(self.width, reset_less=True)

        do_write = self.w_rdy & self.w_en
        do_inner_read = ~n0 & (~self.r_rdy | self.r_en)
        # the RAM's enables, each one LUT4 of r_en and flip-flops
        l_free = lut4(m, platform, "l_free", lambda b, z, r, e: not b or (not z and (not r or e)),
                      [both, n0, self.r_rdy, self.r_en])
        o_free = lut4(m, platform, "o_free", lambda v, z, r, e: not v or (not z and (not r or e)),
                      [v_o, n0, self.r_rdy, self.r_en])
        skip = do_inner_read & ~v_o & ~v_l               # the entry taken is not read yet
        written = (~n0 & ~n1 & ~n2) | (n2 & ~both) | (n1 & ~v_o & ~v_l)
        load = l_free & written & ~skip
        # rd moves on a load or a skip: (l_free & written) | skip, as one LUT4 of r_en
        moves_anyway, moves_on_read = Signal(), Signal()
        m.d.comb += [moves_anyway.eq(~both & written),
                     moves_on_read.eq(~n0 & (written | (~v_o & ~v_l)))]
        rd_inc = lut4(m, platform, "rd_inc", lambda a, b, r, e: a or (b and (not r or e)),
                      [moves_anyway, moves_on_read, self.r_rdy, self.r_en])
        ram_data = outreg_ram(m, platform, "storage", width=self.width, depth=ring,
                              w_addr=produce, w_data=self.w_data, w_en=do_write,
                              r_addr=rd, r_ce=l_free, r_oce=o_free)
        m.d.comb += [
            self.w_rdy.eq(~full),
            self.r_data.eq(out),
            self.level.eq(inner_level + self.r_rdy),
            self.w_level.eq(self.level),
            self.r_level.eq(self.level),
            self.empty.eq(n0 & ~self.r_rdy),
        ]
        with m.If(do_write):
            m.d.sync += [produce.eq(produce + 1), last.eq(self.w_data), before.eq(last)]
        with m.If(do_inner_read):
            m.d.sync += [consume.eq(consume + 1), self.r_rdy.eq(1),
                         out.eq(Mux(n1, last, Mux(n2, before, ram_data)))]
        with m.Elif(self.r_en):
            m.d.sync += self.r_rdy.eq(0)
        with m.If(rd_inc):
            m.d.sync += [rd.eq(rd_1), rd_1.eq(rd_1 + 1)]
        grow, shrink = do_write & ~do_inner_read, do_inner_read & ~do_write
        with m.If(grow):
            m.d.sync += inner_level.eq(inner_level + 1)
        with m.If(shrink):
            m.d.sync += inner_level.eq(inner_level - 1)
        for k, flag in enumerate((n0, n1, n2)):
            m.d.sync += flag.eq(Mux(grow, (inner_level == k - 1) if k else 0,
                                    Mux(shrink, inner_level == k + 1, inner_level == k)))
        m.d.sync += full.eq(Mux(grow, inner_level == inner_depth - 1, ~shrink & full))
        v_o_next, v_l_next = Signal(), Signal()
        m.d.comb += [v_o_next.eq((v_o & ~do_inner_read) | (v_l & ~(do_inner_read & ~v_o))),
                     v_l_next.eq(load | (v_l & ~l_free))]
        m.d.sync += [
            v_o.eq(v_o_next), v_l.eq(v_l_next), both.eq(v_o_next & v_l_next),
            Assert(rd_inc == (load | skip), "BlockFIFO: rd_inc\n"),
            Assert(rd_1 == (rd + 1)[:len(rd)], "BlockFIFO: rd_1\n"),
            Assert(Cat(n0, n1, n2, full) == Cat(inner_level == 0, inner_level == 1, inner_level == 2,
                                                inner_level == inner_depth),
                   "BlockFIFO: level flags\n"),
            Assert(both == (v_o & v_l), "BlockFIFO: both\n"),
            Assert((rd - consume)[:2] == v_o + v_l, "BlockFIFO: RAM read stages\n"),
            Assert(~do_inner_read | n0 | n1 | n2 | v_o,
                   "BlockFIFO: a third entry or later not in the RAM's output register\n"),
        ]
        return m


def _read(nonempty, r_rdy, r_en):
    return nonempty and (not r_rdy or r_en)


class CreditFIFO(wiring.Component):
    """A queue for a writer that keeps its own credit: ``w_en`` is never refused.

    Same ports as ``SyncFIFOBuffered(width=, depth=)`` without the levels: ``w_en`` / ``w_data`` in;
    ``r_data`` and ``r_rdy`` from flip-flops, ``r_en`` takes the entry shown (first word falls
    through with one clock from the write, like ``SyncFIFOBuffered``). ``w_rdy`` (a flip-flop) is
    1 while the storage has room, for the writer's own check (:func:`check_credit`): a write
    while it is 0 is outside the contract. The storage (``depth - 1`` entries; LUT RAM) is
    written straight from ``w_en``, and its fill is a thermometer code, so no level counter or
    compare sits between ``r_en`` and the next state: the output register's enable is one LUT of
    ``r_en`` and two flip-flops.

    ``block=True`` asks for block RAM (``ram_style``, ``no_rw_check``: a read never meets the
    entry written at the same edge, as in :class:`BlockFIFO`); the output register is then the
    RAM's read stage, so ``r_data`` leaves the RAM's clock-to-output late (5.8 ns on an ECP5,
    grade 6). For wide queues, where LUT RAM costs six LUT4s per 16 x 4 bits.
    """

    def __init__(self, *, width, depth, block=False):
        if depth < 2:
            raise ValueError(f"depth must be at least 2, not {depth!r}")
        self.width, self.depth, self._block = width, depth, block
        super().__init__({
            "w_en": wiring.In(1), "w_data": wiring.In(width), "w_rdy": wiring.Out(1, init=1),
            "r_en": wiring.In(1), "r_data": wiring.Out(width), "r_rdy": wiring.Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        inner = self.depth - 1
        ring = 1 << (inner - 1).bit_length() if inner > 1 else 2
        m.submodules.storage = storage = Memory(shape=self.width, depth=ring, init=[],
                                                attrs=BLOCK_RAM if self._block else None)
        w_port = storage.write_port()
        r_port = storage.read_port(domain="comb")
        wp = Signal(range(ring))
        rp = Signal(range(ring))
        fill = Signal(inner)             # fill[i]: more than i entries in the storage
        out = Signal(self.width, reset_less=True)
        # The read decision in two copies (rnic.hdl.prim): one for the fill and pointer, one for
        # the wide output register's enables, each placed near what it drives.
        read, read_out = replicas(m, platform, ["read", "read_out"], _read, [fill[0], self.r_rdy, self.r_en],
                                  orders=[(0, 1, 2), (1, 0, 2)])
        m.d.comb += [
            w_port.addr.eq(wp), w_port.data.eq(self.w_data), w_port.en.eq(self.w_en),
            r_port.addr.eq(rp),
            self.r_data.eq(out),
        ]
        below = Cat(Const(1, 1), fill[:-1])      # fill[i - 1], 1 below entry 0
        above = Cat(fill[1:], Const(0, 1))       # fill[i + 1], 0 above the top
        fill_next = Signal(inner)
        m.d.comb += fill_next.eq(Mux(self.w_en, Mux(read, fill, below), Mux(read, above, fill)))
        m.d.sync += [wp.eq(wp + self.w_en), fill.eq(fill_next), self.w_rdy.eq(~fill_next[-1])]
        with m.If(read_out):
            m.d.sync += out.eq(r_port.data)
        with m.If(read):
            m.d.sync += [rp.eq(rp + 1), self.r_rdy.eq(1)]
        with m.Elif(self.r_en):
            m.d.sync += self.r_rdy.eq(0)
        if self._block:
            m.d.sync += Assert(~(read_out & fill[0] & self.w_en & (rp == wp)), "CreditFIFO: read meets write\n")
        return m
