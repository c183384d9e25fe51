"""The AXI4 interconnect that merges the engine's host-memory masters onto the one host port.

:class:`AxiInterconnect` merges ``n`` AXI4 masters onto the one host port. Address channels are
arbitrated round-robin (reads and writes independently) and the master's index becomes the top
bits of the ID, which routes R and B back. Every master-side ``ready`` depends only on that
master's own registers and on the host port, never on another master's ``valid``. An optional
bandwidth cap (``bw_cap``, register ``AXI_BW_CAP``) limits data beats per 1024-clock window.

``docs/engine.md`` ("DMA") has the contract; ``cocotb_tests/test_dma.py`` and
``tests/test_axi_arbiter.py`` the tests.
"""

from types import SimpleNamespace

from amaranth import Cat, Const, Module, Mux, Signal, signed
from amaranth.hdl import Assert
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from .bus import AXI4Signature
from .fifo import CreditFIFO
from .prim import replicas, round_robin

__all__ = ["BW_WINDOW", "AxiInterconnect"]

#: Length in clocks of one ``bw_cap`` accounting window.
BW_WINDOW = 1024

_ADDR_FIELDS = ("addr", "len", "size", "burst", "lock", "cache", "prot")


def _is_pow2(v):
    return isinstance(v, int) and v > 0 and v & (v - 1) == 0


class AxiInterconnect(wiring.Component):
    """``n`` AXI4 masters onto one AXI4 port (``data_width``-bit data, 64-bit address).

    It only multiplexes: every master and ``m_axi`` have the same ``data_width`` (a power of two,
    64 .. 1024, as far as :class:`~rnic.hdl.bus.AXI4Signature` allows: 512 today), and bursts, beats
    and strobes pass unchanged.

    Address channels (AR, AW): each master's request is first taken into a one-entry buffer
    (``ready`` = buffer empty, a flip-flop: no combinational path from ``m_axi``'s ``ready`` back
    to a master), then a round-robin arbiter moves one buffered request per clock into the output
    register (its choice is a flip-flop, computed a clock ahead from the buffers' next state); a
    buffered request of an ``urgent`` master is chosen before any other master's (round robin among
    the urgent ones; the others share what they leave, so an urgent master that never stops asking
    starves them: give the flag only to masters whose requests are bounded); the
    master index ``i`` is prepended to the ID (``m_axi.arid = Cat(s_i.arid, i)``).
    Latency: two clocks from a master's handshake to ``valid`` on ``m_axi``; throughput one burst
    per clock per channel, one per two clocks per master. Reads and writes arbitrate
    independently.

    W: the index of every AW moved to the output register is queued (``w_order_depth`` entries, at
    least 2); W beats are taken only from the master at the head of that queue, until its ``wlast``. A
    master's W is thus never taken before its AW has been granted (it may pass to ``m_axi`` before
    the AW handshake there, as AXI4 allows).

    R and B: routed combinationally by the top ID bits; the master sees its own ID back.

    Bandwidth cap: with ``bw_cap`` = C > 0, time is cut into windows of :data:`BW_WINDOW` clocks
    (a free-running counter from reset) and a burst on AR or AW counts ``len + 1`` beats in the
    window of its handshake. An output register raises ``valid`` only when its burst fits:
    ``P + beats <= C``, where ``P`` = beats already handshaken in this window plus the other
    channel's burst whose ``valid`` is already up, or when ``P == 0`` (the first burst of a window
    may be longer than C, so nothing hangs). A burst that does not fit waits for the next window.
    Once raised, ``valid`` stays up until the handshake. Hence in every window the beats total at
    most C, or the window holds exactly one burst (longer than C). When AR and AW both become
    eligible in one clock and do not fit together, they take turns. The check is made a clock
    ahead from registered compares, and not while they are stale: with C > 0 ``valid`` rises at the
    earliest two clocks after the burst reaches the output register, three after a handshake (at
    most one burst per four clocks per channel). C = 0: no cap and no added clock.

    Members
    -------
    s0 .. s{n-1} : ``In(AXI4Signature(addr_width=64, data_width=data_width, id_width=id_width))``
        The masters (Verilog names ``s0__araddr``, ...).
    m_axi : ``Out(AXI4Signature(addr_width=64, data_width=data_width, id_width=id_width + ceil_log2(n)))``
        To host memory.
    bw_cap : ``In(16)``
        ``AXI_BW_CAP``: data beats per window, 0 = unlimited. Change only while the bus is idle.
    """

    def __init__(self, n, id_width=4, *, data_width, w_order_depth=4, urgent=()):
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be a positive integer, not {n!r}")
        if not isinstance(id_width, int) or id_width < 1:
            raise ValueError(f"id_width must be a positive integer, not {id_width!r}")
        if not isinstance(w_order_depth, int) or w_order_depth < 1:
            raise ValueError(f"w_order_depth must be a positive integer, not {w_order_depth!r}")
        if not _is_pow2(data_width) or not 64 <= data_width <= 1024:
            raise ValueError(f"data_width must be a power of two from 64 to 1024, not {data_width!r}")
        urgent = tuple(urgent)
        if any(not isinstance(i, int) or not 0 <= i < n for i in urgent):
            raise ValueError(f"urgent must hold master indices 0 .. {n - 1}, not {urgent!r}")
        # every master urgent is plain round robin
        self._urgent = frozenset(urgent) if len(set(urgent)) < n else frozenset()
        self._n, self._id_width, self._w_order_depth = n, id_width, w_order_depth
        self._data_width = data_width
        self._idx_bits = ceil_log2(n)
        members = {f"s{i}": In(AXI4Signature(addr_width=64, data_width=data_width, id_width=id_width))
                   for i in range(n)}
        members["m_axi"] = Out(AXI4Signature(addr_width=64, data_width=data_width,
                                             id_width=id_width + self._idx_bits))
        members["bw_cap"] = In(16)
        super().__init__(members)

    @property
    def n(self):
        return self._n

    @property
    def id_width(self):
        return self._id_width

    @property
    def data_width(self):
        return self._data_width

    @property
    def masters(self):
        return [getattr(self, f"s{i}") for i in range(self._n)]

    def elaborate(self, platform):
        # The steps below add, in this order, to the one module: no submodule, register or path is
        # theirs alone. ``ns`` carries what a later step uses of an earlier one's signals and values.
        m = Module()
        ns = SimpleNamespace()
        self._address_channels(m, platform, ns)
        self._bandwidth_cap(m, ns)
        self._w_channel(m, ns)
        self._response_channels(m, ns)
        return m

    def _address_channels(self, m, platform, ns):
        """AR and AW: a one-entry buffer per master, round robin into the output register."""
        n, idw, ib = self._n, self._id_width, self._idx_bits
        ms, axi = self.masters, self.m_axi

        # r_rdy and r_data from flip-flops; written only while w_rdy (a flip-flop) says there is room
        m.submodules.w_order = w_order = CreditFIFO(width=max(ib, 1), depth=max(self._w_order_depth, 2))

        # ---- AR / AW: per-master buffer, round-robin into the output register ------------------
        out_full, out_len1, out_go, out_loaded = {}, {}, {}, {}
        for ch in ("ar", "aw"):
            bvalid = [Signal(name=f"{ch}{i}_buf_valid") for i in range(n)]
            bufs = [{f: Signal.like(getattr(s, ch + f), name=f"{ch}{i}_buf_{f}") for f in ("id",) + _ADDR_FIELDS}
                    for i, s in enumerate(ms)]
            take = [Signal(name=f"{ch}{i}_take") for i in range(n)]
            last = Signal(range(max(n, 2)), name=f"{ch}_last")
            # with urgent masters, ``last`` is the last urgent grant and ``last_o`` the last other one
            urgent = self._urgent
            last_o = Signal(range(max(n, 2)), name=f"{ch}_last_o") if urgent else last
            full = Signal(name=f"{ch}_out_full")
            go = Signal(name=f"{ch}_go", init=1)        # budget allows valid (see the cap logic)
            beats = Signal(9, name=f"{ch}_beats")       # the output register's len + 1
            valid, ready = getattr(axi, ch + "valid"), getattr(axi, ch + "ready")
            m.d.comb += valid.eq(full & go)
            hs = valid & ready
            # the arbiter's choice for this clock is registered, computed from next clock's
            # buffers and ``last`` (the output register's wide mux then selects from flip-flops)
            pick = Signal(range(max(n, 2)), name=f"{ch}_pick_r")
            anyreq = Signal(name=f"{ch}_any_r")
            is_urgent = Cat(*(Const(int(i in urgent)) for i in range(n))).bit_select(pick, 1) if urgent else Const(1)
            # the output register loads (~full | hs, and room in w_order for AW) in two copies
            # (rnic.hdl.prim): one for its wide fields' enables, one for the arbiter and the flags
            inputs, fn = [full, go, ready], lambda f, g, r: not f or (g and r)
            if ch == "aw":
                inputs, fn = inputs + [w_order.w_rdy], lambda f, g, r, w: (not f or (g and r)) and w
            load, load_out = replicas(m, platform, [f"{ch}_load", f"{ch}_load_out"], fn, inputs)
            if ch == "aw":
                m.d.comb += [w_order.w_en.eq(load & anyreq), w_order.w_data.eq(pick)]
            for i, s in enumerate(ms):
                s_valid, s_ready = getattr(s, ch + "valid"), getattr(s, ch + "ready")
                m.d.comb += s_ready.eq(~bvalid[i])      # from a register: no path from m_axi's ready
                with m.If(s_valid & s_ready):
                    m.d.sync += bvalid[i].eq(1)
                    m.d.sync += [bufs[i][f].eq(getattr(s, ch + f)) for f in bufs[i]]
                with m.Elif(take[i]):
                    m.d.sync += bvalid[i].eq(0)
            with m.If(load):
                m.d.sync += full.eq(anyreq)
                with m.If(anyreq & is_urgent):
                    m.d.sync += last.eq(pick)
                with m.Elif(anyreq):
                    m.d.sync += last_o.eq(pick)
                with m.Switch(pick):
                    for i in range(n):
                        with m.Case(i):
                            m.d.comb += take[i].eq(anyreq)
            with m.Elif(hs):
                m.d.sync += full.eq(0)
            with m.If(load_out):
                with m.Switch(pick):
                    for i in range(n):
                        with m.Case(i):
                            m.d.sync += getattr(axi, ch + "id").eq(Cat(bufs[i]["id"], Const(i, ib)))
                            m.d.sync += [getattr(axi, ch + f).eq(bufs[i][f]) for f in _ADDR_FIELDS]
                            m.d.sync += beats.eq(bufs[i]["len"] + 1)
            bvalid_next = [Mux(getattr(s, ch + "valid") & ~bvalid[i], 1, bvalid[i] & ~take[i])
                           for i, s in enumerate(ms)]
            pick_next, any_next = round_robin(m, f"{ch}_next", bvalid_next,
                                               Mux(load & anyreq & is_urgent, pick, last), urgent,
                                               Mux(load & anyreq & ~is_urgent, pick, last_o))
            pick_now, any_now = round_robin(m, f"{ch}_now", bvalid, last, urgent, last_o)
            m.d.sync += [pick.eq(pick_next), anyreq.eq(any_next),
                         Assert((anyreq == any_now) & (~any_now | (pick == pick_now)),
                                f"interconnect: {ch} registered pick\n")]
            out_full[ch], out_go[ch] = full, go
            out_loaded[ch] = load & anyreq
            out_len1[ch] = beats
        ns.axi, ns.ib, ns.idw, ns.ms, ns.out_full, ns.out_go = axi, ib, idw, ms, out_full, out_go
        ns.out_len1, ns.out_loaded, ns.w_order = out_len1, out_loaded, w_order

    def _bandwidth_cap(self, m, ns):
        """The bandwidth cap: when each output register may raise ``valid``."""
        axi, out_full, out_go, out_len1, out_loaded = ns.axi, ns.out_full, ns.out_go, ns.out_len1, ns.out_loaded
        # ---- bandwidth cap -----------------------------------------------------------------------
        # The decision to raise an output register's valid is taken a clock ahead from registers:
        # the room left (``cap - used``) and whether each burst, and both, fit in it are themselves
        # registered, and no decision is taken while one of them is stale (for two clocks after a
        # handshake or a new window, and for a clock after a burst enters an output register), so no
        # adder or compare sits between an output register and its handshake.
        cap = self.bw_cap
        window = Signal(range(BW_WINDOW))
        used = Signal(20)                # beats handshaken in this window (< 2 * 1024 * 256)
        room = Signal(signed(21))        # cap - used, a clock late
        empty = Signal(init=1)           # used == 0, a clock late
        stale = Signal(init=1)           # used changed last clock
        fresh = Signal()                 # room, empty and the fits below are up to date
        fit_ar, fit_aw, fit_both = Signal(), Signal(), Signal()
        prio_aw = Signal()
        lar, law = out_len1["ar"], out_len1["aw"]
        ar_up, aw_up = out_full["ar"] & out_go["ar"], out_full["aw"] & out_go["aw"]

        # A burst waiting in its output register (valid still low) may go up next clock if it fits
        # beside everything this window has taken and the other channel's burst if that is up, or
        # if it is the window's first.
        ar_new = out_full["ar"] & ~ar_up & fresh & Mux(aw_up, fit_both, fit_ar | empty)
        aw_new = out_full["aw"] & ~aw_up & fresh & Mux(ar_up, fit_both, fit_aw | empty)
        conflict = ar_new & aw_new & ~fit_both
        ar_hs, aw_hs = axi.arvalid & axi.arready, axi.awvalid & axi.awready
        rollover = window == BW_WINDOW - 1
        # out_go: no cap, or the burst may go up next clock (one flip-flop each: a LUT input of
        # the output registers' load)
        m.d.sync += [
            window.eq(window + 1),
            room.eq(cap - used), empty.eq(used == 0), stale.eq(ar_hs | aw_hs | rollover),
            fit_ar.eq(lar <= room), fit_aw.eq(law <= room), fit_both.eq(lar + law <= room),
            fresh.eq(~(ar_hs | aw_hs | rollover) & ~stale & ~out_loaded["ar"] & ~out_loaded["aw"]),
            out_go["ar"].eq((cap == 0) | (ar_up & ~axi.arready) | (ar_new & ~(conflict & prio_aw))),
            out_go["aw"].eq((cap == 0) | (aw_up & ~axi.awready) | (aw_new & ~(conflict & ~prio_aw))),
        ]
        with m.If(conflict):
            m.d.sync += prio_aw.eq(~prio_aw)
        with m.If(rollover):
            m.d.sync += used.eq(0)
        with m.Else():
            m.d.sync += used.eq(used + Mux(ar_hs, lar, 0) + Mux(aw_hs, law, 0))

    def _w_channel(self, m, ns):
        """W beats from the master at the head of the granted-AW order."""
        axi, ms, w_order = ns.axi, ns.ms, ns.w_order
        # ---- W: in granted-AW order ----------------------------------------------------------------
        head = w_order.r_data
        with m.Switch(head):
            for i, s in enumerate(ms):
                with m.Case(i):
                    m.d.comb += [
                        axi.wvalid.eq(w_order.r_rdy & s.wvalid),
                        axi.wdata.eq(s.wdata), axi.wstrb.eq(s.wstrb), axi.wlast.eq(s.wlast),
                        s.wready.eq(w_order.r_rdy & axi.wready),
                    ]
        m.d.comb += w_order.r_en.eq(axi.wvalid & axi.wready & axi.wlast)

    def _response_channels(self, m, ns):
        """R and B routed back by the top ID bits."""
        axi, ib, idw, ms = ns.axi, ns.ib, ns.idw, ns.ms
        # ---- R / B: routed by the top ID bits -------------------------------------------------------
        for ch, fields in (("r", ("data", "resp", "last")), ("b", ("resp",))):
            mid = getattr(axi, ch + "id")
            idx = mid[idw:] if ib else Const(0, 1)
            for i, s in enumerate(ms):
                m.d.comb += [
                    getattr(s, ch + "valid").eq(getattr(axi, ch + "valid") & (idx == i)),
                    getattr(s, ch + "id").eq(mid[:idw]),
                ]
                m.d.comb += [getattr(s, ch + f).eq(getattr(axi, ch + f)) for f in fields]
            with m.Switch(idx):
                for i, s in enumerate(ms):
                    with m.Case(i):
                        m.d.comb += getattr(axi, ch + "ready").eq(getattr(s, ch + "ready"))
