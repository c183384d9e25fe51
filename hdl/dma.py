"""Host-memory DMA blocks: an AXI4 interconnect for the engine's masters, and the payload reader.

* :class:`AxiInterconnect` merges ``n`` AXI4 masters onto the one host port. Address channels are
  arbitrated round-robin (reads and writes independently) and the master's index becomes the top
  bits of the ID, which routes R and B back. Every master-side ``ready`` depends only on that
  master's own registers and on the host port, never on another master's ``valid``. An optional
  bandwidth cap (``bw_cap``, register ``AXI_BW_CAP``) limits data beats per 1024-clock window.
* :class:`PayloadReader` fetches packet payloads for the packet builder: one command per packet,
  read with the bursts of :func:`rnic.model.engine.split_bursts`, realigned so the first payload
  byte sits in lane 0, and delivered as a :func:`~rnic.hdl.bus.PacketStream` in command order.
  Its data width ``W`` (64, 128, 256 or 512 bits: ``B = W/8`` bytes per beat) is that of the bus
  and of the payload stream.
  A per-command ``status`` (bus error or not) is available as soon as the command's data has
  arrived. Read data is never back-pressured: an AR is issued only when the data queue has room
  for all of its beats (the credit rule that keeps the engine free of deadlock).

``docs/engine.md`` ("DMA") has the contract; ``cocotb_tests/test_dma.py`` the tests.
"""

from amaranth import Cat, Const, Module, Mux, Signal, signed
from amaranth.hdl import Assert
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from .bus import AXI4Signature, PacketStream, skid_stage
from .fifo import BlockFIFO, CreditFIFO, check_credit
from .prim import replica

__all__ = ["BW_WINDOW", "payload_cmd_layout", "payload_status_layout", "AxiInterconnect", "PayloadReader"]

#: Length in clocks of one ``bw_cap`` accounting window.
BW_WINDOW = 1024

_ADDR_FIELDS = ("addr", "len", "size", "burst", "lock", "cache", "prot")

#: One payload command: host address, length in bytes (0 .. ``max_payload``), and the inline flag:
#: when set, the payload is the first ``len`` (at most 32) bytes of ``data`` (byte 0 = ``data[7:0]``).
payload_cmd_layout = data.StructLayout({"addr": 64, "len": 13, "inline": 1, "data": 256})

#: One status per command: ``error`` = some read beat of the command got SLVERR or DECERR.
payload_status_layout = data.StructLayout({"error": 1})


def _round_robin(m, name, reqs, last, urgent=(), last_o=None):
    """Index of the first requester after ``last`` (cyclically), and whether there is any. With
    ``urgent`` (indices), an urgent requester wins over every other: round robin among the urgent
    ones after ``last`` (the last urgent grant), else among all after ``last_o`` (the last other
    grant), so that urgent grants in between do not reset the others' turn."""
    if urgent:
        pick_u, any_u = _round_robin(m, f"{name}_u", [r if i in urgent else Const(0) for i, r in enumerate(reqs)], last)
        pick_a, any_a = _round_robin(m, f"{name}_a", reqs, last_o)
        return Mux(any_u, pick_u, pick_a), any_a
    n = len(reqs)
    pick = Signal(range(max(n, 2)), name=f"{name}_pick")
    with m.Switch(last):
        for prev in range(n):
            with m.Case(prev):
                order = [(prev + 1 + k) % n for k in range(n)]
                with m.If(reqs[order[0]]):
                    m.d.comb += pick.eq(order[0])
                for i in order[1:]:
                    with m.Elif(reqs[i]):
                        m.d.comb += pick.eq(i)
    return pick, Cat(*reqs).any()


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
        m = Module()
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
            go = Signal(name=f"{ch}_go")                # budget allows valid (see the cap logic)
            beats = Signal(9, name=f"{ch}_beats")       # the output register's len + 1
            valid, ready = getattr(axi, ch + "valid"), getattr(axi, ch + "ready")
            m.d.comb += valid.eq(full & go)
            hs = valid & ready
            # the arbiter's choice for this clock is registered, computed from next clock's
            # buffers and ``last`` (the output register's wide mux then selects from flip-flops)
            pick = Signal(range(max(n, 2)), name=f"{ch}_pick_r")
            anyreq = Signal(name=f"{ch}_any_r")
            is_urgent = Cat(*(Const(int(i in urgent)) for i in range(n))).bit_select(pick, 1) if urgent else Const(1)
            load = ~full | hs
            if ch == "aw":
                load = load & w_order.w_rdy
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
                            m.d.sync += getattr(axi, ch + "id").eq(Cat(bufs[i]["id"], Const(i, ib)))
                            m.d.sync += [getattr(axi, ch + f).eq(bufs[i][f]) for f in _ADDR_FIELDS]
                            m.d.sync += beats.eq(bufs[i]["len"] + 1)
            with m.Elif(hs):
                m.d.sync += full.eq(0)
            bvalid_next = [Mux(getattr(s, ch + "valid") & ~bvalid[i], 1, bvalid[i] & ~take[i])
                           for i, s in enumerate(ms)]
            pick_next, any_next = _round_robin(m, f"{ch}_next", bvalid_next,
                                               Mux(load & anyreq & is_urgent, pick, last), urgent,
                                               Mux(load & anyreq & ~is_urgent, pick, last_o))
            pick_now, any_now = _round_robin(m, f"{ch}_now", bvalid, last, urgent, last_o)
            m.d.sync += [pick.eq(pick_next), anyreq.eq(any_next),
                         Assert((anyreq == any_now) & (~any_now | (pick == pick_now)),
                                f"interconnect: {ch} registered pick\n")]
            out_full[ch], out_go[ch] = full, go
            out_loaded[ch] = load & anyreq
            out_len1[ch] = beats

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
        no_cap = Signal(init=1)
        prio_aw = Signal()
        lar, law = out_len1["ar"], out_len1["aw"]
        ar_up, aw_up = out_full["ar"] & out_go["ar"], out_full["aw"] & out_go["aw"]
        ar_go, aw_go = Signal(), Signal()

        # A burst waiting in its output register (valid still low) may go up next clock if it fits
        # beside everything this window has taken and the other channel's burst if that is up, or
        # if it is the window's first.
        ar_new = out_full["ar"] & ~ar_up & fresh & Mux(aw_up, fit_both, fit_ar | empty)
        aw_new = out_full["aw"] & ~aw_up & fresh & Mux(ar_up, fit_both, fit_aw | empty)
        conflict = ar_new & aw_new & ~fit_both
        m.d.comb += [out_go["ar"].eq(no_cap | ar_go), out_go["aw"].eq(no_cap | aw_go)]
        ar_hs, aw_hs = axi.arvalid & axi.arready, axi.awvalid & axi.awready
        rollover = window == BW_WINDOW - 1
        m.d.sync += [
            no_cap.eq(cap == 0),
            window.eq(window + 1),
            room.eq(cap - used), empty.eq(used == 0), stale.eq(ar_hs | aw_hs | rollover),
            fit_ar.eq(lar <= room), fit_aw.eq(law <= room), fit_both.eq(lar + law <= room),
            fresh.eq(~(ar_hs | aw_hs | rollover) & ~stale & ~out_loaded["ar"] & ~out_loaded["aw"]),
            ar_go.eq((ar_up & ~axi.arready) | (ar_new & ~(conflict & prio_aw))),
            aw_go.eq((aw_up & ~axi.awready) | (aw_new & ~(conflict & ~prio_aw))),
        ]
        with m.If(conflict):
            m.d.sync += prio_aw.eq(~prio_aw)
        with m.If(rollover):
            m.d.sync += used.eq(0)
        with m.Else():
            m.d.sync += used.eq(used + Mux(ar_hs, lar, 0) + Mux(aw_hs, law, 0))

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
        return m


class PayloadReader(wiring.Component):
    """Reads packet payloads from host memory, in command order, realigned to lane 0.

    ``data_width`` W (64, 128, 256 or 512) is the width of ``m_axi`` and of ``payload``;
    B = W/8 is the number of bytes per beat.

    Structure: the command stage splits each command into the bursts of
    :func:`rnic.model.engine.split_bursts` with ``beat_bytes`` = B (beat-aligned INCR, ``arsize``
    log2(B), ID 0, at most ``max_burst`` beats, never across 4 KiB, so at most 4096/B beats), one AR
    every other clock, for the current command and, as soon as it is issued, the next ones. An AR is issued
    only if the data queue (``fifo_depth`` beats) has room for every beat of the burst not yet
    claimed by earlier bursts (a credit counter: +beats at issue, -1 when a beat leaves the queue),
    so ``rready`` is constantly 1.

    Beats are counted per command as they arrive; when a command's last beat has arrived its
    status (OR of the beats' SLVERR/DECERR) is queued to ``status`` at once, independent of
    ``payload``. The data queue's block RAM output is registered in the fabric. The output stage
    keeps a two-beat window over the raw beats and shifts out
    ``payload`` beats (first byte in lane 0), one per clock, with no bubble between commands
    except where a command whose start is not B-byte aligned needs one more raw beat than it has
    payload beats (the memory also delivers that extra beat, so memory bandwidth is the limit).
    Commands are the other limit: one takes the command stage a clock plus one per burst, and at
    most ``cmd_depth`` are in flight, so short commands (a beat or two, common at W >= 256) do not
    fill every clock.

    Latency (clock edges, ``payload.ready`` = 1): command handshake to ``arvalid`` 3 (the command
    first enters a register stage that also computes its burst and packet fields); R beat
    handshake to its ``payload`` beat 5 (6 for a command not B-byte aligned: its first beat waits
    for a second raw beat); last R beat of a command to ``status.valid`` 1. The same at every W.

    Timing: ``cmd.ready``, ``payload.valid`` and ``arvalid`` are flip-flops, ``status.valid`` a
    queue's non-empty flag; ``cmd.ready`` is computed a clock ahead, with the packet-info and
    inline queues' room kept as credits (returned a clock after their entry leaves). A command's
    last R beat completes it through one gate (its beat count is kept as a flag ``cur_one``).

    Members
    -------
    cmd : ``In(stream.Signature(payload_cmd_layout))``
        One command per packet, into a two-entry register stage; ``ready`` is a flip-flop, low
        while the stage holds two. The stage's head waits while the current command's bursts are
        being issued, or while ``cmd_depth`` commands have a status not yet taken, or a queue is
        full.
    max_burst : ``In(9)``
        ``AXI_MAX_BURST``: 1..256 beats; 0 or above 256 acts as 256. Change only while idle.
    m_axi : ``Out(AXI4Signature(addr_width=64, data_width=W, id_width=4))``
        Host memory, read only (``awvalid`` = ``wvalid`` = 0, ``bready`` = 1, ``rready`` = 1).
    payload : ``Out(PacketStream(W))``
        For each command with ``len`` > 0: ceil(len/B) beats, keep all ones except on the ``last``
        beat, whose keep is the low (len mod B, or B) lanes. Lanes outside ``keep`` are 0.
        An inline command (``len`` <= 32) thus takes ceil(len/8) beats at W = 64, ceil(len/16) at
        W = 128 and one beat at W >= 256 (lanes 32 and up zero, their keep off).
        A command with a bus error still yields its beats (data undefined).
    status : ``Out(stream.Signature(payload_status_layout))``
        One per command, in command order (``len`` 0 and inline commands: ``error`` 0), valid
        one clock after the command's last R beat, whether or not its payload has been taken.
    """

    def __init__(self, max_payload, fifo_depth, *, data_width, cmd_depth=32, inline_depth=4):
        if not isinstance(max_payload, int) or not 1 <= max_payload < 1 << 13:
            raise ValueError(f"max_payload must be 1..8191 (the 13-bit len field), not {max_payload!r}")
        if not isinstance(fifo_depth, int) or fifo_depth < 256:
            raise ValueError(f"fifo_depth must be at least 256 (one longest burst), not {fifo_depth!r}")
        for name, v in (("cmd_depth", cmd_depth), ("inline_depth", inline_depth)):
            if not isinstance(v, int) or v < 2:
                raise ValueError(f"{name} must be an integer of at least 2, not {v!r}")
        if data_width not in (64, 128, 256, 512):
            raise ValueError(f"data_width must be 64, 128, 256 or 512, not {data_width!r}")
        self._max_payload, self._fifo_depth = max_payload, fifo_depth
        self._cmd_depth, self._inline_depth = cmd_depth, inline_depth
        self._data_width = data_width
        super().__init__({
            "cmd": In(stream.Signature(payload_cmd_layout)),
            "max_burst": In(9),
            "m_axi": Out(AXI4Signature(addr_width=64, data_width=data_width, id_width=4)),
            "payload": Out(PacketStream(data_width)),
            "status": Out(stream.Signature(payload_status_layout)),
        })

    @property
    def max_payload(self):
        return self._max_payload

    @property
    def fifo_depth(self):
        return self._fifo_depth

    @property
    def cmd_depth(self):
        return self._cmd_depth

    @property
    def data_width(self):
        return self._data_width

    def elaborate(self, platform):
        m = Module()
        axi, D, C = self.m_axi, self._fifo_depth, self._cmd_depth
        W = self._data_width
        B = W // 8                               # bytes per beat
        sb = ceil_log2(B)                        # address bits within a beat (= arsize)
        page_beats = 4096 // B                   # beats in 4 KiB
        beat_bits = ceil_log2(-(-self._max_payload // B) + 2)      # payload beats and raw beats
        pinfo_layout = data.StructLayout({
            "off": sb,                 # byte offset of the first payload byte in the first raw beat
            "offnz": 1,                # off != 0
            "nm1": beat_bits,          # payload beats - 1
            "single": 1,               # nm1 == 0
            "keep": B,                 # keep of the last beat
            "extra": 1,                # one more raw beat than payload beats (only when off != 0)
            "inline": 1,
        })
        rbeats_layout = data.StructLayout({"n": beat_bits, "one": 1})

        # Queues written on the command handshake. The packet-info and inline queues are written on
        # credits kept here (a clock late back from the read side); the others hold at most one entry
        # per command whose status is owed, so ``owed`` bounds them.
        p_cap, i_cap = C, self._inline_depth
        m.submodules.pinfo = pinfo = CreditFIFO(width=pinfo_layout.size, depth=p_cap)
        m.submodules.inline = inl = CreditFIFO(width=256, depth=i_cap, block=True)   # 8 DP16KD, not 64 LUT RAMs
        m.submodules.rbeats = rbeats = SyncFIFO(width=rbeats_layout.size, depth=C)
        m.submodules.sorder = sorder = SyncFIFO(width=1, depth=C)
        m.submodules.done = done = SyncFIFO(width=1, depth=C)
        m.submodules.stat = stat = SyncFIFO(width=1, depth=C)
        m.submodules.rdata = rdata = BlockFIFO(width=W, depth=D, fabric_out=True)

        # ---- fixed AXI fields: read only, ID 0, B-byte INCR -----------------------------------------
        m.d.comb += [
            axi.arid.eq(0), axi.arsize.eq(sb), axi.arburst.eq(1), axi.arlock.eq(0), axi.arcache.eq(0),
            axi.arprot.eq(0), axi.awvalid.eq(0), axi.wvalid.eq(0), axi.bready.eq(1), axi.rready.eq(1),
        ]

        # ---- command stage: a skid buffer that registers the command with what is derived from it,
        # so the credit logic behind it starts from flip-flops ---------------------------------------
        ci = self.cmd.payload
        ci_off = ci.addr[:sb]
        ci_lm1 = Signal(13)
        m.d.comb += ci_lm1.eq(ci.len - 1)
        ci_nz = ci.len != 0
        ci_rd = ci_nz & ~ci.inline
        stage_layout = data.StructLayout({
            "addr": 64, "inline": 1, "data": 256, "nonzero": 1, "rd": 1,
            "info": pinfo_layout, "rb": rbeats_layout})
        staged = Signal(stage_layout)
        m.d.comb += [
            staged.addr.eq(ci.addr), staged.inline.eq(ci.inline), staged.data.eq(ci.data),
            staged.nonzero.eq(ci_nz), staged.rd.eq(ci_rd),
            staged.info.off.eq(Mux(ci.inline, 0, ci_off)),
            staged.info.offnz.eq(~ci.inline & (ci_off != 0)),
            staged.info.nm1.eq(ci_lm1[sb:]),
            staged.info.single.eq(ci.len <= B),
            staged.info.keep.eq(Mux(ci.len[:sb] == 0, (1 << B) - 1, (Const(1, B + 1) << ci.len[:sb]) - 1)),
            staged.info.extra.eq(ci_off + ci_lm1[:sb] >= B),
            staged.info.inline.eq(ci.inline),
            staged.rb.n.eq(Mux(ci_rd, (ci_off + ci.len + (B - 1)) >> sb, 0)),
            staged.rb.one.eq(ci_off + ci.len <= B),
        ]
        cmd_rdy = Signal(init=1)
        c_valid, c = skid_stage(m, self.cmd.valid, self.cmd.ready, staged, cmd_rdy, "cmd")
        nonzero, rd, info, rb = c.nonzero, c.rd, c.info, c.rb
        active = Signal()                    # bursts of the accepted command still to issue
        a_addr = Signal(64 - sb)             # next burst's beat address (address >> log2(B))
        a_left = Signal(beat_bits)           # its beats not yet issued
        owed = Signal(range(C + 1))          # accepted commands whose status is not yet taken
        accept = c_valid & cmd_rdy
        p_take, i_take = accept & nonzero, accept & nonzero & c.inline
        m.d.comb += [
            pinfo.w_en.eq(p_take), pinfo.w_data.eq(info), inl.w_en.eq(i_take), inl.w_data.eq(c.data),
            rbeats.w_en.eq(accept & rd), rbeats.w_data.eq(rb),
            sorder.w_en.eq(accept), sorder.w_data.eq(~rd),
        ]
        with m.If(accept & rd):
            m.d.sync += [a_addr.eq(c.addr[sb:]), a_left.eq(rb.n)]

        # ---- AR issue under the credit rule ----------------------------------------------------------
        # The next burst's length, whether it is the command's last and whether the data queue has
        # room for it are registered (``beats``, ``beats_last``, ``fits``, valid in ``beats_ok``
        # once computed from the current a_addr and a_left), so a burst is issued at most every other
        # clock. ``room`` is the data queue's free space less the beats in flight.
        mb = self.max_burst
        lim_max = max(page_beats, 256)
        mb_r = Signal(range(257), init=256)  # max_burst, 0 or above 256 as 256
        m.d.sync += mb_r.eq(Mux((mb == 0) | (mb > 256), 256, mb))
        to_page = Signal(range(page_beats + 1))   # beats from a_addr to the 4 KiB boundary
        page_end = Signal()                      # the burst in ``beats`` ends at the boundary
        room = Signal(range(D + 1), init=D)
        beats = Signal(range(lim_max + 1))
        beats_ok = Signal()
        beats_last = Signal()
        fits = Signal()
        left_le_page, left_le_mb, page_le_mb = a_left <= to_page, a_left <= mb_r, to_page <= mb_r
        ar_load = active & beats_ok & fits & (~axi.arvalid | axi.arready)
        m.d.sync += [
            beats.eq(Mux(left_le_page & left_le_mb, a_left, Mux(page_le_mb, to_page, mb_r))),
            beats_last.eq(left_le_page & left_le_mb),
            page_end.eq(page_le_mb),
            fits.eq((a_left <= room) | (to_page <= room) | (mb_r <= room)),
            beats_ok.eq(active & ~ar_load),
        ]
        with m.If(ar_load):
            m.d.sync += [
                axi.arvalid.eq(1), axi.araddr.eq(Cat(Const(0, sb), a_addr)), axi.arlen.eq(beats - 1),
                a_addr.eq(a_addr + beats), a_left.eq(a_left - beats),
                to_page.eq(Mux(page_end, page_beats, to_page - beats)),
            ]
        with m.Elif(axi.arready):
            m.d.sync += axi.arvalid.eq(0)
        with m.If(accept & rd):
            m.d.sync += to_page.eq(page_beats - c.addr[sb:12])
        # the credit logic's own copies of the take strobes, one LUT4 each: the queues' write
        # enables are other cells, placed by their block RAMs (one shared LUT had been placed there,
        # across the die from cmd_rdy's loop and back: a long detour on the command-ready loop)
        accept_c = replica(m, platform, "accept_c", lambda v, r: v and r, [c_valid, cmd_rdy])
        rd_take_c = replica(m, platform, "rd_take_c", lambda v, r, x: v and r and x, [c_valid, cmd_rdy, rd])
        p_take_c = replica(m, platform, "p_take_c", lambda v, r, x: v and r and x, [c_valid, cmd_rdy, nonzero])
        i_take_c = replica(m, platform, "i_take_c", lambda v, r, x, y: v and r and x and y,
                           [c_valid, cmd_rdy, nonzero, c.inline])
        active_next = Mux(rd_take_c, 1, active & ~(ar_load & beats_last))
        m.d.sync += [active.eq(active_next),
                     Assert(~active | (to_page == page_beats - a_addr[:12 - sb]), "payload reader: to_page\n")]
        raw_pop = Signal()
        raw_pop_r = Signal()                 # a beat left the data queue last clock
        m.d.sync += [raw_pop_r.eq(raw_pop), room.eq(room - Mux(ar_load, beats, 0) + raw_pop_r)]

        # ---- command ready, from a flip-flop: next clock's state, credits returned a clock late -------
        status_taken = self.status.valid & self.status.ready
        p_pop_r, i_pop_r = Signal(), Signal()
        p_cred, i_cred = Signal(range(p_cap + 1), init=p_cap), Signal(range(i_cap + 1), init=i_cap)
        p_ok, i_ok, owed_ok = Signal(init=1), Signal(init=1), Signal(init=1)
        p_ok_next = Mux(p_pop_r, 1, Mux(p_take_c, p_cred != 1, p_ok))
        i_ok_next = Mux(i_pop_r, 1, Mux(i_take_c, i_cred != 1, i_ok))
        owed_ok_next = Mux(status_taken, 1, Mux(accept_c, owed != C - 1, owed_ok))
        m.d.sync += [
            p_cred.eq(p_cred - p_take_c + p_pop_r), i_cred.eq(i_cred - i_take_c + i_pop_r),
            owed.eq(owed + accept_c - status_taken),
            p_ok.eq(p_ok_next), i_ok.eq(i_ok_next), owed_ok.eq(owed_ok_next),
            cmd_rdy.eq(~active_next & p_ok_next & i_ok_next & owed_ok_next),
            Assert(cmd_rdy == (~active & (p_cred != 0) & (i_cred != 0) & (owed != C)),
                   "payload reader: cmd.ready differs from its state\n"),
        ]

        # ---- R: into the data queue; count beats per command; status --------------------------------
        # ``rbeats`` holds the raw beat count of each command that reads memory (and whether it is
        # 1), taken into ``cur_*`` for the command whose beats are arriving; ``sorder`` one bit per
        # command (1 = no read: status 0 at once) so statuses leave in command order; ``done`` holds
        # the error bit of a read command whose data has all arrived while an earlier no-read command
        # still waited for its turn.
        r_beat = axi.rvalid
        r_err = r_beat & axi.rresp[1]                 # SLVERR (2) or DECERR (3)
        m.d.comb += [rdata.w_en.eq(r_beat), rdata.w_data.eq(axi.rdata)]
        cur_v = Signal()
        cur_n = Signal(beat_bits)                     # beats still to come
        cur_one = Signal()                            # cur_n == 1
        err = Signal()
        complete = r_beat & cur_v & cur_one
        head = rbeats_layout(rbeats.r_data)
        load = rbeats.r_rdy & (~cur_v | complete)
        m.d.comb += rbeats.r_en.eq(load)
        with m.If(load):
            m.d.sync += [cur_v.eq(1), cur_n.eq(head.n), cur_one.eq(head.one)]
        with m.Elif(complete):
            m.d.sync += cur_v.eq(0)
        with m.Elif(r_beat):
            m.d.sync += [cur_n.eq(cur_n - 1), cur_one.eq(cur_n == 2)]
        with m.If(complete):
            m.d.sync += err.eq(0)
        with m.Else():
            m.d.sync += err.eq(err | r_err)
        m.d.sync += [
            Assert(~r_beat | cur_v, "payload reader: R beat with no read command\n"),
            Assert(~cur_v | (cur_one == (cur_n == 1)), "payload reader: cur_one\n"),
        ]
        bypass = sorder.r_rdy & ~sorder.r_data & ~done.r_rdy
        m.d.comb += [done.w_en.eq(complete & ~bypass), done.w_data.eq(err | r_err)]
        with m.If(sorder.r_rdy):
            with m.If(sorder.r_data):
                m.d.comb += [stat.w_en.eq(1), stat.w_data.eq(0), sorder.r_en.eq(1)]
            with m.Elif(done.r_rdy):
                m.d.comb += [stat.w_en.eq(1), stat.w_data.eq(done.r_data), sorder.r_en.eq(1), done.r_en.eq(1)]
            with m.Elif(complete):
                m.d.comb += [stat.w_en.eq(1), stat.w_data.eq(err | r_err), sorder.r_en.eq(1)]
        m.d.comb += [
            self.status.valid.eq(stat.r_rdy), self.status.payload.error.eq(stat.r_data),
            stat.r_en.eq(self.status.ready),
        ]

        # ---- output: two-beat window over raw beats, shifted into lane 0 ----------------------------
        # The head command's packet info is copied from the queue's output into ``hd``, so that what
        # the head beat needs is known a clock ahead from flip-flops: ``L`` (it is the command's
        # last beat), ``need_i`` (inline: no raw beat), ``need_1`` / ``need_2`` (one or two raw
        # beats in the window). The window is two registers (``win``) filled from the data queue's
        # output register.
        hd = Signal(pinfo_layout)
        hd_v = Signal()
        nx = pinfo_layout(pinfo.r_data)
        L = Signal()
        need_i, need_1, need_2 = Signal(), Signal(), Signal()
        j = Signal(beat_bits)                     # payload beat of the head command
        win = [Signal(W, name=f"win{k}", reset_less=True) for k in range(2)]
        wp, rp = Signal(), Signal()
        h1, h2 = Signal(), Signal()               # raw beats in the window: >= 1, == 2
        out = self.payload
        advance = ~out.valid | out.ready
        go = advance & (need_i | (need_1 & h1) | (need_2 & h2))
        take2 = hd.offnz & L & hd.extra
        consume1 = go & ~hd.inline & ~take2
        consume2 = go & ~hd.inline & take2
        hd_pop = go & L
        hd_load = pinfo.r_rdy & (~hd_v | hd_pop)
        m.d.comb += [pinfo.r_en.eq(hd_load), inl.r_en.eq(hd_pop & hd.inline)]

        def needs(v, f, last):
            n2 = f.offnz & (~last | f.extra)
            return [need_i.eq(v & f.inline), need_1.eq(v & ~f.inline & ~n2), need_2.eq(v & ~f.inline & n2)]

        last_next = Signal()
        m.d.comb += last_next.eq(j + 1 == hd.nm1)
        with m.If(hd_load):
            m.d.sync += [hd.eq(nx), hd_v.eq(1), L.eq(nx.single), j.eq(0)] + needs(1, nx, nx.single)
        with m.Elif(hd_pop):
            m.d.sync += [hd_v.eq(0), need_i.eq(0), need_1.eq(0), need_2.eq(0)]
        with m.Elif(go):
            m.d.sync += [L.eq(last_next), j.eq(j + 1)] + needs(1, hd, last_next)
        m.d.sync += [
            Assert(~hd_v | (L == (j == hd.nm1)), "payload reader: L\n"),
            Assert(~hd_v | ~hd.inline | inl.r_rdy, "payload reader: inline data\n"),
        ]

        # a raw beat enters unless the window stays full (two beats, none consumed)
        m.d.comb += rdata.r_en.eq(~h2 | (advance & hd_v & ~hd.inline))
        m.d.comb += raw_pop.eq(rdata.r_en & rdata.r_rdy)
        for k in range(2):
            with m.If(raw_pop & (wp == k)):
                m.d.sync += win[k].eq(rdata.r_data)
        have = Signal(range(3))
        m.d.comb += have.eq(Cat(h1 & ~h2, h2))
        have_next = Signal(range(4))
        m.d.comb += have_next.eq(have - Cat(consume1, consume2) + raw_pop)
        m.d.sync += [h1.eq(have_next != 0), h2.eq(have_next == 2), wp.eq(wp ^ raw_pop), rp.eq(rp ^ consume1)]

        window = Mux(rp, Cat(win[1], win[0]), Cat(win[0], win[1]))
        shifted = Signal(W)
        m.d.comb += shifted.eq(window >> Cat(Const(0, 3), hd.off))
        # inline data: 32 bytes in 256 // W beats (W < 256), else one beat with the upper lanes 0
        if W < 256:
            word = inl.r_data.word_select(j[:ceil_log2(256 // W)], W)
        else:
            word = Cat(inl.r_data, Const(0, W - 256))
        keep = Mux(L, hd.keep, (1 << B) - 1)
        mask = Cat(*(keep[i].replicate(8) for i in range(B)))
        with m.If(go):
            m.d.sync += [
                out.valid.eq(1),
                out.payload.data.eq(Mux(hd.inline, word, shifted) & mask),
                out.payload.keep.eq(keep),
                out.payload.last.eq(L),
            ]
        with m.Elif(out.ready):
            m.d.sync += out.valid.eq(0)
        m.d.sync += [p_pop_r.eq(hd_pop), i_pop_r.eq(inl.r_en)]
        for fifo, what in ((rdata, "read data (bursts in flight)"), (pinfo, "packet info"),
                           (inl, "inline data"), (rbeats, "read commands"), (sorder, "status order"),
                           (done, "finished commands"), (stat, "statuses (commands owed)")):
            check_credit(m, fifo, f"payload reader: {what}")
        for fifo, what in ((rbeats, "read commands"), (sorder, "status order"), (done, "finished commands")):
            check_credit(m, fifo, f"payload reader: {what}", write=False, read=True)
        return m
