"""The payload reader: fetches packet payloads from host memory for the packet builder.

:class:`PayloadReader` takes one command per packet, reads it with the bursts of
:func:`rnic.model.engine.split_bursts`, realigns it so the first payload byte sits in lane 0, and
delivers it as a :func:`~rnic.hdl.bus.PacketStream` in command order. Its data width ``W`` (64,
128, 256 or 512 bits: ``B = W/8`` bytes per beat) is that of the bus and of the payload stream.
A per-command ``status`` (bus error or not) is available as soon as the command's data has
arrived. Read data is never back-pressured: an AR is issued only when the data queue has room for
all of its beats (the credit rule that keeps the engine free of deadlock).

``docs/engine.md`` ("DMA") has the contract; ``cocotb_tests/test_dma.py`` the tests.
"""

from types import SimpleNamespace

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.hdl import Assert
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from .bus import AXI4Signature, PacketStream, skid_stage
from .fifo import BlockFIFO, CreditFIFO, check_credit
from .prim import replica

__all__ = ["payload_cmd_layout", "payload_status_layout", "PayloadReader"]

#: One payload command: host address, length in bytes (0 .. ``max_payload``), and the inline flag:
#: when set, the payload is the first ``len`` (at most 32) bytes of ``data`` (byte 0 = ``data[7:0]``).
payload_cmd_layout = data.StructLayout({"addr": 64, "len": 13, "inline": 1, "data": 256})

#: One status per command: ``error`` = some read beat of the command got SLVERR or DECERR.
payload_status_layout = data.StructLayout({"error": 1})


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
        # The steps below add, in this order, to the one module: no submodule, register or path is
        # theirs alone. ``ns`` carries what a later step uses of an earlier one's signals and values.
        m = Module()
        ns = SimpleNamespace()
        self._queues(m, ns)
        self._command_stage(m, ns)
        self._ar_issue(m, platform, ns)
        self._command_ready(m, ns)
        self._read_data(m, ns)
        self._output(m, ns)
        self._check_credits(m, ns)
        return m

    def _queues(self, m, ns):
        """Parameters, layouts and the queues; the AXI fields that never change."""
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
        ns.B, ns.C, ns.D, ns.W, ns.axi, ns.beat_bits, ns.done, ns.i_cap = B, C, D, W, axi, beat_bits, done, i_cap
        ns.inl, ns.p_cap, ns.page_beats, ns.pinfo, ns.pinfo_layout = inl, p_cap, page_beats, pinfo, pinfo_layout
        ns.rbeats, ns.rbeats_layout, ns.rdata, ns.sb, ns.sorder = rbeats, rbeats_layout, rdata, sb, sorder
        ns.stat = stat

    def _command_stage(self, m, ns):
        """The command stage and the queue writes on the command handshake."""
        B, C, beat_bits, inl, pinfo, pinfo_layout = ns.B, ns.C, ns.beat_bits, ns.inl, ns.pinfo, ns.pinfo_layout
        rbeats, rbeats_layout, sb, sorder = ns.rbeats, ns.rbeats_layout, ns.sb, ns.sorder
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
        ns.a_addr, ns.a_left, ns.accept, ns.active, ns.c, ns.c_valid = a_addr, a_left, accept, active, c, c_valid
        ns.cmd_rdy, ns.nonzero, ns.owed, ns.rd = cmd_rdy, nonzero, owed, rd

    def _ar_issue(self, m, platform, ns):
        """AR issue under the credit rule, and the credit logic's copies of the take strobes."""
        D, a_addr, a_left, accept, active, axi, c = ns.D, ns.a_addr, ns.a_left, ns.accept, ns.active, ns.axi, ns.c
        c_valid, cmd_rdy, nonzero, page_beats, rd = ns.c_valid, ns.cmd_rdy, ns.nonzero, ns.page_beats, ns.rd
        sb = ns.sb
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
        ns.accept_c, ns.active_next, ns.i_take_c, ns.p_take_c = accept_c, active_next, i_take_c, p_take_c
        ns.raw_pop = raw_pop

    def _command_ready(self, m, ns):
        """``cmd.ready`` from a flip-flop: next clock's state, credits returned a clock late."""
        C, accept_c, active, active_next, cmd_rdy = ns.C, ns.accept_c, ns.active, ns.active_next, ns.cmd_rdy
        i_cap, i_take_c, owed, p_cap, p_take_c = ns.i_cap, ns.i_take_c, ns.owed, ns.p_cap, ns.p_take_c
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
        ns.i_pop_r, ns.p_pop_r = i_pop_r, p_pop_r

    def _read_data(self, m, ns):
        """R beats into the data queue, beats counted per command, statuses in command order."""
        axi, beat_bits, done, rbeats, rbeats_layout = ns.axi, ns.beat_bits, ns.done, ns.rbeats, ns.rbeats_layout
        rdata, sorder, stat = ns.rdata, ns.sorder, ns.stat
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

    def _output(self, m, ns):
        """The output stage: a two-beat window over the raw beats, shifted into lane 0."""
        B, W, beat_bits, i_pop_r, inl, p_pop_r = ns.B, ns.W, ns.beat_bits, ns.i_pop_r, ns.inl, ns.p_pop_r
        pinfo, pinfo_layout, raw_pop, rdata = ns.pinfo, ns.pinfo_layout, ns.raw_pop, ns.rdata
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

    def _check_credits(self, m, ns):
        """Every queue is written (and the status queues read) only on a credit."""
        done, inl, pinfo, rbeats, rdata, sorder = ns.done, ns.inl, ns.pinfo, ns.rbeats, ns.rdata, ns.sorder
        stat = ns.stat
        for fifo, what in ((rdata, "read data (bursts in flight)"), (pinfo, "packet info"),
                           (inl, "inline data"), (rbeats, "read commands"), (sorder, "status order"),
                           (done, "finished commands"), (stat, "statuses (commands owed)")):
            check_credit(m, fifo, f"payload reader: {what}")
        for fifo, what in ((rbeats, "read commands"), (sorder, "status order"), (done, "finished commands")):
            check_credit(m, fifo, f"payload reader: {what}", write=False, read=True)
