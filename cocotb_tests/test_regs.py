"""cocotb tests of the register block (``rnic.hdl.regs.RegisterBlock``) against the model's rules.

The reference is the golden model itself: an ``EngineModel``'s :class:`~rnic.model.regs.RegisterFile`
(access rules, widths, reset values from ``REGISTERS``), its ``_error`` (first-error capture, W1C
re-arm, INT_STATUS.ERR) and ``_cq_event``, and the moderation rule of ``EngineModel._complete``
(mirrored in :meth:`TB.cqe`). Doorbells are the model's ``on_write`` actions. Byte strobes follow
the block's documented rule (:meth:`TB.model_write`).

Most tests talk to the block through cocotbext-axi's ``AxiLiteMaster``; :func:`test_bus_timing`
drives the AXI4-Lite signals by hand to pin down clock-exact facts (AW/W in any order, write-to-output
latency, a W1C write and a hardware set in the same clock, ``wstrb = 0``).

Timing convention: after ``await RisingEdge(clk)`` a signal reads its value from before that edge
(what the block sampled); a value driven after edge ``k`` is sampled at edge ``k + 1``.

The pytest function at the bottom builds the Verilator model once and runs every test on it.
Seeds: ``RNIC_SEED`` (printed by the runner); each test logs the seed it derived.
"""

import logging
import os
import random
from pathlib import Path

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge, Timer

from rnic.model.engine import EngineModel, HostMemory
from rnic.model.regs import (COUNTER_NAMES, REG, REGISTERS, SGID_BASE, SGID_ENTRIES, SGID_STRIDE, Access, ErrBit,
                             IntBit)
from rnic.sim import tb as sim_tb

_BY_OFFSET = {r.offset: r for r in REGISTERS}
_M32 = (1 << 32) - 1
# Offsets that map to nothing: holes in the map, past the counters, past the SGID table, the top.
_UNMAPPED = sorted({0x018, 0x01C, 0x02C, 0x03C, 0x070, 0x07C, 0x08C, 0x0FC, 0x12C, 0x200, 0x3FC,
                    SGID_BASE + 0x1C, SGID_BASE + SGID_ENTRIES * SGID_STRIDE, 0x1000, 0x8000, 0xFFFC}
                   - set(_BY_OFFSET))
# Config outputs: port -> value from the model's registers.
_CONFIG = {
    "enable": lambda r: r["CONTROL"] & 1,
    "qpc_base": lambda r: r.u64("QPC_BASE_LO"),
    "qpc_size": lambda r: r["QPC_SIZE"],
    "cq_base": lambda r: r.u64("CQ_BASE_LO"),
    "cq_size": lambda r: r["CQ_SIZE"],
    "quota": lambda r: r["SCHED_QUOTA"],
    "max_burst": lambda r: r["AXI_MAX_BURST"],
    "bw_cap": lambda r: r["AXI_BW_CAP"],
    "port_lid": lambda r: r["PORT_LID"],
    "reliable": lambda r: r["CONTROL"] >> 1 & 1,
    "req_base": lambda r: r.u64("REQ_BASE_LO"),
    "timer_tick": lambda r: r["TIMER_TICK"],
}


def _fields(layout):
    """(name, offset, width) of a StructLayout of rnic.hdl.regs (bit 0 = first field)."""
    from amaranth import Shape
    return [(name, f.offset, Shape.cast(f.shape).width) for name, f in layout]


def _unpack(fields, value):
    return tuple(value >> off & ((1 << w) - 1) for _, off, w in fields)


def _pack(fields, values):
    return sum((values.get(name, 0) & ((1 << w) - 1)) << off for name, off, w in fields)


_u = sim_tb.unsigned


def _bytemask(strb):
    return sum(0xFF << 8 * i for i in range(4) if strb >> i & 1)


class TB:
    def __init__(self, dut, name, *, axil=True):
        from rnic.hdl.regs import cq_doorbell_layout, doorbell_layout, inc_layout, qpc_cmd_layout, rq_doorbell_layout
        self.dut = dut
        self.rng = random.Random(f"{sim_tb.seed(dut, what=name)}-{name}")
        self.edge = RisingEdge(dut.clk)
        self.use_axil = axil
        self.inc_fields = _fields(inc_layout)
        self.eng = EngineModel(HostMemory())    # its registers, _error and _cq_event are the reference
        self.regs = self.eng.regs
        self.regs.on_write = self._action
        self.want_db, self.want_cq, self.want_cmd, self.want_rq = [], [], [], []   # actions in write order
        self.db, self.cq, self.cmd, self.rq = (
            sim_tb.StreamSink(dut, name, decode=lambda p, f=_fields(layout): _unpack(f, p))
            for name, layout in (("doorbell", doorbell_layout), ("cq_doorbell", cq_doorbell_layout),
                                 ("qpc_cmd", qpc_cmd_layout), ("rq_doorbell", rq_doorbell_layout)))
        self.cmd_busy = self.cmd_result = 0     # driven on qpc_cmd_busy / qpc_cmd_result
        self.idle = 1
        sim_tb.start_clock(dut)

    async def reset(self):
        d = self.dut
        for name in ("sgid_index", "inc", "err_valid", "err_bit", "err_qpn", "err_status", "cqe_written",
                     "qpc_cmd_busy", "qpc_cmd_result"):
            getattr(d, name).value = 0
        d.idle.value = self.idle
        for name in ("awvalid", "wvalid", "bready", "arvalid", "rready", "awaddr", "wdata", "wstrb", "araddr",
                     "awprot", "arprot"):
            getattr(d, f"s_axil__{name}").value = 0
        if self.use_axil:
            from cocotbext.axi import AxiLiteBus, AxiLiteMaster
            logging.getLogger(f"cocotb.{d._name}.s_axil").setLevel(logging.WARNING)
            self.axil = AxiLiteMaster(AxiLiteBus.from_prefix(d, "s_axil", bus_separator="__"), d.clk, d.rst)
        await sim_tb.reset(d, 3)
        for sink in (self.db, self.cq, self.cmd, self.rq):
            sink.rng = random.Random(self.rng.randrange(1 << 30))
            sink.start()

    # ---- the model --------------------------------------------------------------------------------------
    def _action(self, reg, value):
        if reg.name == "DB_SQ_PI":
            self.want_db.append((self.regs["DB_QPN"], value))
            self.regs["DB_COUNT"] = self.regs["DB_COUNT"] + 1
        elif reg.name == "CQ_DB_CI":
            self.want_cq.append((self.regs["CQ_DB_CQN"], value))
        elif reg.name == "DB_RQ_PI":
            self.want_rq.append((self.regs["DB_QPN"], value, 0))
        elif reg.name == "REQ_TIMER":
            self.want_rq.append((self.regs["DB_QPN"], value, 1))
        elif reg.name == "QPC_CMD" and value in (1, 2):        # 1 INVALIDATE, 2 FLUSH; 0, 3 nothing
            self.want_cmd.append((value, self.regs["QPC_CMD_QPN"]))

    def model_write(self, offset, data, strb=0xF):
        """The block's strobe rule on top of RegisterFile: RW merges the strobed bytes, W1C clears 1s in
        strobed bytes, WO acts (unstrobed bytes as 0) unless wstrb is 0."""
        reg = _BY_OFFSET.get(offset & ~3)
        if reg is None or reg.access is Access.RO:
            return
        mask = _bytemask(strb)
        if reg.access is Access.RW:
            self.regs.write(reg.offset, (self.regs[reg.name] & ~mask) | (data & mask))
        elif reg.access is Access.W1C or strb:
            self.regs.write(reg.offset, data & mask)

    def error(self, bit, qpn, status):
        """One error report, as the engine calls EngineModel._error (bits outside ErrBit: ignored)."""
        if bit < len(ErrBit):
            self.eng._error(ErrBit(bit), qpn, status)

    def cqe(self):
        """One CQE written: the moderation lines of EngineModel._complete."""
        self.eng._pending_cqes += 1
        if self.eng._pending_cqes >= max(1, self.regs["INT_MOD_COUNT"]):
            self.eng._cq_event("count")

    def expect(self, offset):
        reg = _BY_OFFSET.get(offset)
        if reg is not None and reg.name == "STATUS":
            irq = bool(self.regs["INT_STATUS"] & self.regs["INT_ENABLE"])
            return (self.idle and self.queues_empty()) | int(irq) << 1
        if reg is not None and reg.name == "QPC_CMD_STATUS":     # with no command waiting in the block
            return self.cmd_busy | self.cmd_result << 1
        return self.regs.read(offset)

    # ---- bus ------------------------------------------------------------------------------------------------
    async def write(self, offset, value, nbytes=4, lane=0):
        """Write ``nbytes`` bytes of ``value`` at byte lane ``lane`` of the word at ``offset``."""
        from cocotbext.axi import AxiResp
        data = (value >> 8 * lane & (1 << 8 * nbytes) - 1).to_bytes(nbytes, "little")
        resp = await self.axil.write(offset + lane, data)
        assert resp.resp == AxiResp.OKAY, f"write {offset:#x}: {resp.resp}"
        self.model_write(offset, value, ((1 << nbytes) - 1) << lane)

    def write_nowait(self, offset, value):
        """Queue a full-word write (the model takes it now: writes complete in order)."""
        self.model_write(offset, value)
        return self.axil.init_write(offset, value.to_bytes(4, "little"))

    async def read(self, offset):
        from cocotbext.axi import AxiResp
        resp = await self.axil.read(offset, 4)
        assert resp.resp == AxiResp.OKAY, f"read {offset:#x}: {resp.resp}"
        return int.from_bytes(resp.data, "little")

    def queues_empty(self):
        return all(len(sink.items) >= len(want) for sink, want in
                   ((self.db, self.want_db), (self.cq, self.want_cq), (self.cmd, self.want_cmd), (self.rq, self.want_rq)))

    async def check(self, offset, what=""):
        if offset == REG["STATUS"].offset and self.idle and not self.queues_empty():
            await self.drain_doorbells()        # STATUS.IDLE is exact only with the queues settled
        got, want = await self.read(offset), self.expect(offset)
        name = _BY_OFFSET[offset].name if offset in _BY_OFFSET else "unmapped"
        assert got == want, f"{what} {name} @ {offset:#05x}: read {got:#x}, model {want:#x}"

    async def check_regs(self, *names, what=""):
        for n in names:
            await self.check(REG[n].offset, what)

    def check_config(self, what=""):
        for port, f in _CONFIG.items():
            got, want = _u(getattr(self.dut, port)), f(self.regs)
            assert got == want, f"{what}: output {port} = {got:#x}, model {want:#x}"

    async def drain_doorbells(self, timeout=2000):
        """Wait for every expected doorbell / QPC command; then exactly those, in write order."""
        pairs = ((self.db, self.want_db, "doorbells"), (self.cq, self.want_cq, "CQ doorbells"),
                 (self.cmd, self.want_cmd, "QPC commands"), (self.rq, self.want_rq, "RQ doorbells"))
        for _ in range(timeout):
            if all(len(sink.items) >= len(want) for sink, want, _ in pairs):
                break
            await self.edge
        await ClockCycles(self.dut.clk, 5)
        for sink, want, what in pairs:
            assert list(sink.items) == want, f"{what} {list(sink.items)[:8]}... != model {want[:8]}..."

    # ---- clock-exact stimulus ----------------------------------------------------------------------------------
    async def pulses(self, n, cqe=(), errors=None, timer=0):
        """Run ``n`` clocks; the next edge is 1. ``cqe``: edges that sample a CQE; ``errors``: edge ->
        (bit, qpn, status); ``timer``: INT_MOD_TIMER (no CQE may be unreported at the call then).

        The model applies them in edge order; the timer rule is the documented one: a CQ event on
        edge ``s + timer``, ``s`` the edge that sampled the first CQE not yet reported, unless a count
        event came first (one event when both fall on one edge; CQEs of that edge are covered).
        Returns (irq after each edge 0..n-1, [(edge, cause)] of the model's CQ events)."""
        d, errors, irq, events = self.dut, errors or {}, [], []
        assert not (timer and self.eng._pending_cqes), "timer round started with unreported CQEs"
        first = None
        for k in range(1, n + 1):
            d.cqe_written.value = int(k in cqe)
            e = errors.get(k)
            d.err_valid.value = int(e is not None)
            if e is not None:
                d.err_bit.value, d.err_qpn.value, d.err_status.value = e
            await self.edge
            irq.append(int(d.irq.value))            # the state after edge k - 1
            if e is not None:
                self.error(*e)
            fired = False
            if k in cqe:
                before = self.regs["IRQ_COUNT"]
                self.cqe()
                if self.regs["IRQ_COUNT"] != before:
                    fired = True
                    events.append((k, "count"))
            if not fired and first is not None and k == first + timer:
                self.eng._cq_event("timer")
                fired = True
                events.append((k, "timer"))
            if fired:
                first = None
            elif timer and k in cqe and first is None:
                first = k
        d.cqe_written.value = 0
        d.err_valid.value = 0
        return irq, events

    # ---- hand-driven AXI4-Lite (only in tests built with axil=False) -------------------------------
    async def raw_write(self, offset, data, strb=0xF, *, aw_at=0, w_at=0, bready_at=0, drive=None, watch=None):
        """One write: AW valid from step ``aw_at``, W from ``w_at``, bready from ``bready_at`` (step ``t``
        is driven before edge ``t + 1``; call it right after an edge, which becomes edge 0).
        ``drive``: edge -> {input: value} for that edge only (err_*/cqe_written return to 0).
        Returns the edges of the AW and W handshakes, of the write taking effect (``bvalid`` rises)
        and of the B handshake, and the trace of output ``watch`` (index i: after edge i)."""
        d, drive = self.dut, drive or {}
        aw = w = commit = b = None
        trace, t = [], 0
        while b is None:
            d.s_axil__awvalid.value = int(aw is None and t >= aw_at)
            d.s_axil__awaddr.value = offset
            d.s_axil__wvalid.value = int(w is None and t >= w_at)
            d.s_axil__wdata.value = data
            d.s_axil__wstrb.value = strb
            d.s_axil__bready.value = int(t >= bready_at)
            d.err_valid.value = d.cqe_written.value = 0
            for name, v in drive.get(t + 1, {}).items():
                getattr(d, name).value = v
            await self.edge
            t += 1
            if watch:
                trace.append(_u(getattr(d, watch)))
            if aw is None and int(d.s_axil__awvalid.value) and int(d.s_axil__awready.value):
                aw = t
            if w is None and int(d.s_axil__wvalid.value) and int(d.s_axil__wready.value):
                w = t
            bv = int(d.s_axil__bvalid.value)
            if bv and commit is None:
                commit = t - 1
            if bv and int(d.s_axil__bready.value):
                assert int(d.s_axil__bresp.value) == 0, "bresp not OKAY"
                b = t
            assert t < 200, "raw write hangs"
        d.s_axil__awvalid.value = d.s_axil__wvalid.value = d.s_axil__bready.value = 0
        d.err_valid.value = d.cqe_written.value = 0
        return aw, w, commit, b, trace

    async def raw_read(self, offset):
        d = self.dut
        d.s_axil__arvalid.value, d.s_axil__araddr.value, d.s_axil__rready.value = 1, offset, 1
        for _ in range(20):
            await self.edge
            if int(d.s_axil__arvalid.value) and int(d.s_axil__arready.value):
                d.s_axil__arvalid.value = 0
            if int(d.s_axil__rvalid.value):
                assert int(d.s_axil__rresp.value) == 0
                d.s_axil__rready.value = 0
                return _u(d.s_axil__rdata)
        raise AssertionError(f"raw read of {offset:#x} hangs")

    async def raw_check(self, *names, what=""):
        for n in names:
            got, want = await self.raw_read(REG[n].offset), self.expect(REG[n].offset)
            assert got == want, f"{what}: {n} read {got:#x}, model {want:#x}"


def _random_value(rng, reg):
    r = rng.random()
    if r < 0.1:
        return 0
    if r < 0.2:
        return _M32
    if r < 0.3:
        return rng.randrange(1 << 32) & reg.mask     # in range
    return rng.randrange(1 << 32)


# ------------------------------------------------------------------------------------------------------
@cocotb.test()
async def test_reset_values(dut):
    """Every register reads its REGISTERS reset value (WO: 0), unmapped offsets 0, outputs at reset."""
    tb = TB(dut, "reset")
    await tb.reset()
    for reg in REGISTERS:
        want = 0 if reg.access is Access.WO else reg.reset
        got = await tb.read(reg.offset)
        assert got == want, f"{reg.name}: reset value {got:#x}, REGISTERS says {want:#x}"
    for off in _UNMAPPED:
        assert await tb.read(off) == 0, f"unmapped {off:#x} reads non-zero"
    tb.check_config("reset")
    assert not int(dut.irq.value) and not int(dut.doorbell__valid.value) and not int(dut.cq_doorbell__valid.value)
    dut.sgid_index.value = 5
    await ClockCycles(dut.clk, 2)
    assert (_u(dut.sgid_gid), _u(dut.sgid_mac), int(dut.sgid_vlan_id.value),
            int(dut.sgid_vlan_present.value)) == (0, 0, 0, 0)


@cocotb.test()
async def test_random_access(dut):
    """Random full-word and byte/half-word reads and writes over every register and unmapped offsets,
    against RegisterFile (RO, W1C, WO, width masks); config outputs after every write; doorbells."""
    tb = TB(dut, "random_access")
    tb.idle = tb.rng.randrange(2)
    await tb.reset()
    rng = tb.rng
    tb.db.ready_p = tb.cq.ready_p = 0.6
    offsets = [r.offset for r in REGISTERS]
    for i in range(700):
        off = rng.choice(_UNMAPPED) if rng.random() < 0.15 else rng.choice(offsets)
        reg = _BY_OFFSET.get(off)
        if rng.random() < 0.45:
            await tb.check(off, f"op {i}")
            continue
        value = _random_value(rng, reg) if reg else rng.randrange(1 << 32)
        if rng.random() < 0.25:
            nbytes = rng.choice((1, 2))
            await tb.write(off, value, nbytes, rng.randrange(0, 4, nbytes))
        else:
            await tb.write(off, value)
        tb.check_config(f"op {i} after write of {reg.name if reg else hex(off)}")
        if rng.random() < 0.1:
            await tb.check(off, f"op {i} read-back")
    for reg in REGISTERS:                                   # final sweep
        await tb.check(reg.offset, "final")
    await tb.drain_doorbells()
    await tb.check_regs("DB_COUNT")
    dut._log.info("random access: %d doorbells, %d CQ doorbells, %d QPC commands",
                  len(tb.want_db), len(tb.want_cq), len(tb.want_cmd))


@cocotb.test()
async def test_sgid_port(dut):
    """SGID table read port: outputs show the entry sgid_index selected one clock earlier, and hold
    a clock after an AR handshake (the bus's read takes the table's one read port), while random
    bus reads of the table run beside it and return the model's values. Then a reset in mid-test:
    the whole table reads 0 again, and a write right after the reset lands."""
    tb = TB(dut, "sgid")
    await tb.reset()
    rng = tb.rng
    fields = ("GID0", "GID1", "GID2", "GID3", "MAC_LO", "MAC_HI", "VLAN")
    for i in range(SGID_ENTRIES):
        for field in fields:
            await tb.write(REG[f"SGID{i}_{field}"].offset, rng.randrange(1 << 32))

    def entry(i):
        r = tb.regs
        gid = sum(r[f"SGID{i}_GID{w}"] << 32 * w for w in range(4))
        vlan = r[f"SGID{i}_VLAN"]
        return gid, r[f"SGID{i}_MAC_LO"] | r[f"SGID{i}_MAC_HI"] << 32, vlan & 0xFFF, vlan >> 31

    history = []                                            # index driven before edge k
    for k in range(300):
        idx = rng.randrange(SGID_ENTRIES) if k % 20 else history[-1] if history else 0
        dut.sgid_index.value = idx
        await tb.edge
        history.append(idx)
        if len(history) >= 2:                               # registered at edge k-1 from index of k-1
            got = (_u(dut.sgid_gid), _u(dut.sgid_mac),
                   int(dut.sgid_vlan_id.value), int(dut.sgid_vlan_present.value))
            assert got == entry(history[-2]), f"clock {k}: SGID port shows {got}, entry {history[-2]} is {entry(history[-2])}"
            if history[-1] != history[-2]:
                assert got != entry(history[-1]) or entry(history[-1]) == entry(history[-2]), "SGID port not registered"

    # Bus reads beside the port: in a clock with an AR handshake the port's registers hold.
    sgid_offsets = [REG[f"SGID{i}_{f}"].offset for i in range(SGID_ENTRIES) for f in fields]
    stop = []

    async def reader():
        while not stop:
            await tb.check(rng.choice(sgid_offsets), "SGID read beside the port")
            for _ in range(rng.randrange(3)):
                await tb.edge

    task = cocotb.start_soon(reader())
    shown, holds = None, 0                                  # the port's registers after the last edge
    for k in range(600):
        idx = rng.randrange(SGID_ENTRIES) if rng.random() < 0.3 else history[-1]
        dut.sgid_index.value = idx
        await tb.edge
        history.append(idx)
        got = (_u(dut.sgid_gid), _u(dut.sgid_mac), int(dut.sgid_vlan_id.value), int(dut.sgid_vlan_present.value))
        assert shown is None or got == shown, f"clock {k} with reads: SGID port shows {got}, want {shown}"
        if int(dut.s_axil__arvalid.value) and int(dut.s_axil__arready.value):
            holds += 1
        else:
            shown = entry(idx)
    stop.append(1)
    await task
    assert holds > 50, f"only {holds} AR handshakes beside the port"

    # A reset zeroes the table (the block writes zeros for 16 clocks after it); a write issued right
    # after the reset waits for that and then lands.
    await sim_tb.reset(dut, 3)
    value = rng.randrange(1, 1 << 32)
    await tb.axil.write(REG["SGID5_GID2"].offset, value.to_bytes(4, "little"))
    for i in range(SGID_ENTRIES):
        for field in fields:
            want = value if (i, field) == (5, "GID2") else 0
            got = await tb.read(REG[f"SGID{i}_{field}"].offset)
            assert got == want, f"after reset: SGID{i}_{field} reads {got:#x}, want {want:#x}"
    for idx in (5, 9):
        dut.sgid_index.value = idx
        await ClockCycles(dut.clk, 2)
        want = (value << 64 if idx == 5 else 0, 0, 0, 0)
        got = (_u(dut.sgid_gid), _u(dut.sgid_mac), int(dut.sgid_vlan_id.value), int(dut.sgid_vlan_present.value))
        assert got == want, f"after reset: SGID port entry {idx} shows {got}, want {want}"


@cocotb.test()
async def test_status_idle_counts_queues(dut):
    """STATUS.IDLE is 0 while an acknowledged doorbell, CQ doorbell or QPC command has not left the
    block, even though the engine's ``idle`` input is 1."""
    tb = TB(dut, "status_idle")
    await tb.reset()
    for sink, reg, value in ((tb.db, "DB_SQ_PI", 5), (tb.cq, "CQ_DB_CI", 7), (tb.cmd, "QPC_CMD", 2)):
        sink.hold = True
        await tb.edge
        await tb.write(REG[reg].offset, value)
        assert await tb.read(REG["STATUS"].offset) & 1 == 0, f"IDLE with a {reg} write queued"
        sink.hold = False
        await tb.drain_doorbells()
        assert await tb.read(REG["STATUS"].offset) & 1 == 1, f"not IDLE after the {reg} action left"


@cocotb.test()
async def test_doorbells(dut):
    """Doorbell FIFOs: FIFO-full stalls the DB_SQ_PI write (no B) while reads go on; nothing lost, order
    kept, DB_COUNT counts accepted doorbells; then a random stream under random backpressure."""
    tb = TB(dut, "doorbells")
    await tb.reset()
    rng = tb.rng
    tb.db.hold = True
    await ClockCycles(dut.clk, 2)
    for _ in range(4):                                      # fills the 4-deep FIFO
        await tb.write(REG["DB_QPN"].offset, rng.randrange(1 << 24))
        await tb.write(REG["DB_SQ_PI"].offset, rng.randrange(1 << 16))
    await tb.write(REG["DB_QPN"].offset, rng.randrange(1 << 24))
    ev = tb.write_nowait(REG["DB_SQ_PI"].offset, rng.randrange(1 << 16))
    ev_cq = tb.write_nowait(REG["CQ_DB_CI"].offset, 0x1234)  # queued behind the stalled write
    for _ in range(60):
        await tb.edge
        assert not int(dut.s_axil__bvalid.value), "the doorbell write was acknowledged while the FIFO is full"
    assert not ev.is_set() and not ev_cq.is_set()
    assert await tb.read(REG["DB_COUNT"].offset) == 4, "DB_COUNT counts a doorbell not yet accepted"
    assert not tb.db.items and int(dut.doorbell__valid.value)
    tb.db.hold = False
    tb.db.ready_p = 0.3
    await ev.wait()
    await ev_cq.wait()
    await tb.drain_doorbells()
    await tb.check_regs("DB_COUNT", what="after the stall")

    # random stream: many doorbells queued back to back, random ready, random long ready-low spells
    for i in range(150):
        if rng.random() < 0.7:
            tb.write_nowait(REG["DB_QPN"].offset, rng.randrange(1 << 24))
            tb.write_nowait(REG["DB_SQ_PI"].offset, rng.randrange(1 << 32))
        else:
            tb.write_nowait(REG["CQ_DB_CQN"].offset, rng.randrange(1 << 24))
            tb.write_nowait(REG["CQ_DB_CI"].offset, rng.randrange(1 << 32))
    for _ in range(30):
        tb.db.hold = tb.cq.hold = rng.random() < 0.3
        tb.db.ready_p, tb.cq.ready_p = rng.random(), rng.random()
        await ClockCycles(dut.clk, rng.randint(1, 40))
    tb.db.hold = tb.cq.hold = False
    await tb.axil.wait()
    await tb.drain_doorbells(timeout=20000)
    await tb.check_regs("DB_COUNT", what="after the stream")
    dut._log.info("doorbells: %d SQ, %d CQ", len(tb.want_db), len(tb.want_cq))


@cocotb.test()
async def test_qpc_cmd(dut):
    """QPC_CMD: 1/2 push (op, QPC_CMD_QPN), 0/3 nothing; BUSY = executor busy or a command waiting;
    a command write waits while BUSY (no B, reads go on) and none is lost; result bits read through."""
    tb = TB(dut, "qpc_cmd")
    await tb.reset()
    rng = tb.rng
    for result in range(4):
        tb.cmd_result = result
        dut.qpc_cmd_result.value = result
        await tb.check_regs("QPC_CMD_STATUS", what=f"result {result}")
    tb.cmd.hold = True
    await tb.write(REG["QPC_CMD_QPN"].offset, 0xABCDEF)
    await tb.write(REG["QPC_CMD"].offset, 1)                 # taken into the block's register
    assert await tb.read(REG["QPC_CMD_STATUS"].offset) & 1, "BUSY clear with a command waiting"
    for v in (0, 3, 4):                                     # no command (4: bits above the width), no wait
        await tb.write(REG["QPC_CMD"].offset, v)
    ev = tb.write_nowait(REG["QPC_CMD"].offset, 2)
    for _ in range(40):
        await tb.edge
        assert not int(dut.s_axil__bvalid.value), "QPC_CMD write acknowledged while BUSY"
    await tb.check_regs("QPC_CMD_QPN")

    async def executor(clocks):                             # plays the engine: busy while a command runs
        while True:
            await tb.edge
            if int(dut.qpc_cmd__valid.value) and int(dut.qpc_cmd__ready.value):
                dut.qpc_cmd_busy.value = 1
                await ClockCycles(dut.clk, rng.randint(*clocks))
                dut.qpc_cmd_busy.value = 0

    task = cocotb.start_soon(executor((1, 30)))
    tb.cmd.hold = False
    await ev.wait()
    for _ in range(20):
        tb.write_nowait(REG["QPC_CMD_QPN"].offset, rng.randrange(1 << 32))
        tb.write_nowait(REG["QPC_CMD"].offset, rng.randrange(4))
    await tb.axil.wait()
    await tb.drain_doorbells()
    await ClockCycles(dut.clk, 40)
    task.cancel()
    dut.qpc_cmd_busy.value = 0
    await tb.check_regs("QPC_CMD_STATUS", what="idle")
    dut._log.info("QPC commands: %s", tb.want_cmd)


@cocotb.test()
async def test_counters(dut):
    """``inc`` adds its value every clock (all counters at once, random values); 32-bit wrap."""
    tb = TB(dut, "counters")
    await tb.reset()
    rng = tb.rng
    names = [n for n, _, _ in tb.inc_fields]
    widths = {n: w for n, _, w in tb.inc_fields}
    for k in range(1500):
        vals = {n: rng.randrange(1 << widths[n]) if rng.random() < 0.5 else 0 for n in names}
        if k % 100 < 5:
            vals = {n: (1 << widths[n]) - 1 for n in names}
        dut.inc.value = _pack(tb.inc_fields, vals)
        await tb.edge
        for n in names:
            tb.regs[n.upper()] = tb.regs[n.upper()] + vals[n]
    dut.inc.value = 0
    await tb.edge
    await tb.check_regs(*(n.upper() for n in COUNTER_NAMES), what="after random increments")


@cocotb.test()
async def test_qpc_counters(dut):
    """QPC_LOOKUPS .. QPC_MERGED read the cache's counter inputs as they are, at their offsets."""
    from rnic.hdl.qp_cache import counters_layout
    tb = TB(dut, "qpc_counters")
    await tb.reset()
    fields = _fields(counters_layout)
    for _ in range(20):
        vals = {n: tb.rng.choice([0, (1 << w) - 1, tb.rng.randrange(1 << w)]) for n, _, w in fields}
        dut.qpc_counters.value = _pack(fields, vals)
        await tb.edge
        for n, _, _ in fields:
            got = await tb.read(REG[f"QPC_{n.upper()}"].offset)
            assert got == vals[n], f"QPC_{n.upper()}: read {got:#x}, input {vals[n]:#x}"
    dut.qpc_counters.value = 0


@cocotb.test(skip=not os.environ.get("REGS_WRAP"))
async def test_counter_wrap(dut):
    """BYTE_COUNT += 8191 for enough clocks to pass 2**32 (about 525 000 clocks: minutes, so only with
    REGS_WRAP=1, the slow pytest ``test_regs_counter_wrap``). The clock runs without Python per edge."""
    tb = TB(dut, "counter_wrap")
    await tb.reset()
    clocks = (1 << 32) // 8191 + tb.rng.randint(1, 1000)
    dut.inc.value = _pack(tb.inc_fields, {"byte_count": 8191, "bus_errors": 3})
    await Timer(4 * clocks - 2, unit="ns")                  # mid-cycle ...
    await tb.edge                                           # ... to the edge that samples the last one
    dut.inc.value = 0
    tb.regs["BYTE_COUNT"] = tb.regs["BYTE_COUNT"] + 8191 * clocks
    tb.regs["BUS_ERRORS"] = tb.regs["BUS_ERRORS"] + 3 * clocks
    assert 8191 * clocks > 1 << 32
    await tb.check_regs(*(n.upper() for n in COUNTER_NAMES), what="after the wrap")


@cocotb.test()
async def test_errors(dut):
    """Error reports (back to back, repeated bits, invalid bits) against EngineModel._error: first-error
    capture, W1C re-arm of the capture, INT_STATUS.ERR, irq with INT_ENABLE."""
    tb = TB(dut, "errors")
    await tb.reset()
    rng = tb.rng
    for i in range(120):
        n = rng.randint(1, 25)
        errors = {}
        for k in rng.sample(range(1, n + 1), rng.randint(0, min(n, 5))):
            bit = rng.randrange(len(ErrBit)) if rng.random() < 0.9 else rng.randrange(len(ErrBit), 16)
            errors[k] = (bit, rng.randrange(1 << 24), rng.randrange(256))
        await tb.pulses(n + 1, errors=errors)
        await tb.check_regs("ERR_STATUS", "ERR_QPN", "ERR_INFO", "INT_STATUS", "STATUS", what=f"round {i}")
        r = rng.random()
        if r < 0.3:                                         # clear everything: re-arms the capture
            await tb.write(REG["ERR_STATUS"].offset, _M32)
        elif r < 0.6:
            await tb.write(REG["ERR_STATUS"].offset, rng.randrange(1 << 10), rng.choice((1, 2, 4)))
        if rng.random() < 0.5:
            await tb.write(REG["INT_STATUS"].offset, rng.randrange(4))
        if rng.random() < 0.2:
            await tb.write(REG["INT_ENABLE"].offset, rng.randrange(4))
        want_irq = int(bool(tb.regs["INT_STATUS"] & tb.regs["INT_ENABLE"]))
        assert int(dut.irq.value) == want_irq, f"round {i}: irq {int(dut.irq.value)}, model {want_irq}"
        await tb.check_regs("ERR_STATUS", "ERR_QPN", "ERR_INFO", "INT_STATUS", "STATUS", what=f"round {i} writes")
    dut._log.info("errors: %d error interrupt events", sum(e.kind == "err" for e in tb.eng.irq_events))




@cocotb.test()
async def test_moderation_count(dut):
    """Interrupt moderation by count (timer off), INT_MOD_COUNT 0..40: IRQ_COUNT, INT_STATUS.CQ and the
    pending count carried across rounds as the model's rule; each round's first event exactly on the
    edge that samples the threshold CQE."""
    tb = TB(dut, "moderation_count")
    await tb.reset()
    rng = tb.rng
    await tb.write(REG["INT_ENABLE"].offset, 1 << IntBit.CQ)
    for i in range(70):
        count = rng.choice([0, 1, 2, 3, 4, 7, rng.randint(1, 40)])
        await tb.write(REG["INT_MOD_COUNT"].offset, count)
        await tb.write(REG["INT_STATUS"].offset, 3)
        n = rng.randint(1, 100)
        p = rng.choice((0.1, 0.5, 1.0))
        cqe = {k for k in range(1, n + 1) if rng.random() < p}
        irq, events = await tb.pulses(n + 2, cqe=cqe)
        got = next((j for j, v in enumerate(irq) if v), None)
        want = events[0][0] if events else None
        assert got == want, f"round {i} (count {count}): first CQ event after edge {got}, model {want}"
        await tb.check_regs("IRQ_COUNT", "INT_STATUS", "STATUS", what=f"round {i} (count {count})")
    dut._log.info("moderation by count: %d events", tb.regs["IRQ_COUNT"])


@cocotb.test()
async def test_moderation_timer(dut):
    """Interrupt moderation by timer: the CQ event fires exactly INT_MOD_TIMER clocks after the edge
    that sampled the first unreported CQE (later CQEs do not restart it, a CQE on the firing edge is
    covered, a count event first cancels it); IRQ_COUNT as the model; INT_MOD_TIMER = 0: no timer."""
    tb = TB(dut, "moderation_timer")
    await tb.reset()
    rng = tb.rng
    await tb.write(REG["INT_ENABLE"].offset, 1 << IntBit.CQ)
    for i in range(80):
        timer = rng.choice([1, 2, 3, rng.randint(1, 64)])
        count = rng.choice([0xFFFF, 0xFFFF, rng.randint(2, 6)])
        await tb.write(REG["INT_MOD_COUNT"].offset, count)
        await tb.write(REG["INT_MOD_TIMER"].offset, timer)
        await tb.write(REG["INT_STATUS"].offset, 3)
        s = rng.randint(1, 4)
        cqe = {s}
        kind = rng.random()
        if kind < 0.3:                                      # on the firing edge and right after it
            cqe |= {s + timer, s + timer + 1}
        elif kind < 0.8:                                    # a random burst around the window
            cqe |= {k for k in range(s, s + 3 * timer + 3) if rng.random() < rng.choice((0.05, 0.3, 0.9))}
        n = max(cqe) + timer + 3
        irq, events = await tb.pulses(n, cqe=cqe, timer=timer)
        got = next((j for j, v in enumerate(irq) if v), None)
        assert events, "no event: the model never leaves CQEs unreported with the timer on"
        want = events[0][0]
        assert got == want, f"round {i} (timer {timer}, count {count}): first event after edge {got}, " \
                            f"model {events[0]}; CQEs at {sorted(cqe)[:10]}"
        if events[0][1] == "timer":
            assert got == s + timer
        await tb.check_regs("IRQ_COUNT", "INT_STATUS", what=f"round {i} (timer {timer}, count {count}): {events}")
        assert tb.eng._pending_cqes == 0
    # timer off: CQEs below the count stay unreported, then one more reaches the count
    await tb.write(REG["INT_MOD_TIMER"].offset, 0)
    await tb.write(REG["INT_MOD_COUNT"].offset, 5)
    await tb.write(REG["INT_STATUS"].offset, 3)
    irq, events = await tb.pulses(300, cqe={1, 2, 50, 51})
    assert not any(irq) and not events
    irq, events = await tb.pulses(5, cqe={2})
    assert events == [(2, "count")] and irq.index(1) == 2
    await tb.check_regs("IRQ_COUNT", "INT_STATUS")


@cocotb.test()
async def test_irq_and_status(dut):
    """irq = OR(INT_STATUS & INT_ENABLE) for every combination, mirrored in STATUS bit 1; STATUS bit 0
    follows ``idle``; W1C of INT_STATUS drops irq."""
    tb = TB(dut, "irq")
    await tb.reset()
    for status in range(4):
        await tb.write(REG["INT_STATUS"].offset, 3)
        await tb.pulses(3, cqe={1} if status & 1 << IntBit.CQ else (),
                        errors={2: (int(ErrBit.BUS_WQE), 7, 0)} if status & 1 << IntBit.ERR else None)
        await tb.write(REG["ERR_STATUS"].offset, _M32)
        assert tb.regs["INT_STATUS"] == status
        for enable in range(4):
            await tb.write(REG["INT_ENABLE"].offset, enable)
            for idle in (0, 1):
                tb.idle = idle
                dut.idle.value = idle
                await tb.edge
                want = int(bool(status & enable))
                assert int(dut.irq.value) == want, f"INT_STATUS {status} INT_ENABLE {enable}: irq {int(dut.irq.value)}"
                await tb.check_regs("STATUS", "INT_STATUS", what=f"INT_STATUS {status} INT_ENABLE {enable}")


@cocotb.test()
async def test_bus_timing(dut):
    """Hand-driven AXI4-Lite: AW/W in either order or together, bready late; a write takes effect (and
    the output changes) on the edge after the later of the AW/W handshakes, the same edge bvalid rises;
    unmapped writes answer OKAY; wstrb = 0 on a doorbell does nothing; a W1C write and a hardware set
    on the same edge: the write first, then the set (the set wins for its bit)."""
    tb = TB(dut, "bus_timing", axil=False)
    await tb.reset()
    rng = tb.rng
    cases = [("CONTROL", "enable", 0, 0, 0), ("QPC_SIZE", "qpc_size", 0, 3, 0),
             ("PORT_LID", "port_lid", 4, 0, 7), ("QPC_BASE_HI", "qpc_base", 2, 2, 0),
             ("AXI_BW_CAP", "bw_cap", 0, 1, 2)]
    for name, port, aw_at, w_at, bready_at in cases:
        value = rng.randrange(1, 1 << 32)
        old = _u(getattr(dut, port))
        aw, w, commit, b, trace = await tb.raw_write(REG[name].offset, value, aw_at=aw_at, w_at=w_at,
                                                     bready_at=bready_at, watch=port)
        tb.model_write(REG[name].offset, value)
        new = _CONFIG[port](tb.regs)
        assert (aw, w) == (aw_at + 1, w_at + 1), f"{name}: AW/W accepted at edges {aw}, {w}"
        assert commit == max(aw, w) + 1, f"{name}: write took effect at edge {commit}, handshakes {aw}, {w}"
        assert b == max(commit + 1, bready_at + 1), f"{name}: B at edge {b}"
        assert trace[commit - 1] == old and trace[commit] == new, \
            f"{name}: {port} changed at the wrong edge (trace {trace}, commit {commit})"
        await tb.raw_check(name, what=f"read back {name}")
    for off in _UNMAPPED[:4]:
        await tb.raw_write(off, _M32)
        assert await tb.raw_read(off) == 0

    # doorbell with wstrb = 0: no action; one byte strobe: an action with that byte
    await tb.raw_write(REG["DB_QPN"].offset, 0x123456)
    tb.model_write(REG["DB_QPN"].offset, 0x123456)
    await tb.raw_write(REG["DB_SQ_PI"].offset, 0xBEEF, strb=0)
    tb.model_write(REG["DB_SQ_PI"].offset, 0xBEEF, strb=0)
    await tb.raw_write(REG["DB_SQ_PI"].offset, 0xBEEF, strb=0b0001)
    tb.model_write(REG["DB_SQ_PI"].offset, 0xBEEF, strb=0b0001)
    assert tb.want_db == [(0x123456, 0xEF)]
    await tb.drain_doorbells()
    await tb.raw_check("DB_COUNT")

    # W1C write and a hardware set on the same edge (aw_at = w_at = 0: the write takes effect at edge 2)
    async def collide(offset, data, edge_drive, model_hw, strb=0xF):
        _, _, commit, _, _ = await tb.raw_write(offset, data, strb, drive={2: edge_drive})
        assert commit == 2
        tb.model_write(offset, data, strb)          # the write first ...
        model_hw()                                   # ... then the hardware update of the same edge

    def err(bit, qpn, status):
        drive = {"err_valid": 1, "err_bit": bit, "err_qpn": qpn, "err_status": status}
        return drive, lambda: tb.error(bit, qpn, status)

    names = ("ERR_STATUS", "ERR_QPN", "ERR_INFO", "INT_STATUS", "IRQ_COUNT")
    await tb.pulses(2, errors={1: (2, 0x111, 0x11)})
    await tb.raw_check(*names, what="setup")
    # clear all, error of the same bit: re-armed capture takes the new error, INT_STATUS.ERR set again
    await tb.raw_write(REG["INT_STATUS"].offset, 3)
    tb.model_write(REG["INT_STATUS"].offset, 3)
    await collide(REG["ERR_STATUS"].offset, _M32, *err(2, 0x222, 0x22))
    await tb.raw_check(*names, what="clear all + same bit")
    assert tb.regs["ERR_STATUS"] == 1 << 2 and tb.regs["ERR_QPN"] == 0x222 and tb.regs["INT_STATUS"] == 2
    # bits 2 and 5 set; clear bit 2 while bit 2 errs again: set wins, no capture (5 still set)
    await tb.pulses(2, errors={1: (5, 0x555, 0)})
    await tb.raw_write(REG["INT_STATUS"].offset, 3)
    tb.model_write(REG["INT_STATUS"].offset, 3)
    await collide(REG["ERR_STATUS"].offset, 1 << 2, *err(2, 0x333, 0x33))
    await tb.raw_check(*names, what="clear one + same bit")
    assert tb.regs["ERR_STATUS"] == 0x24 and tb.regs["ERR_QPN"] == 0x222 and tb.regs["INT_STATUS"] == 2
    # W1C of INT_STATUS.ERR with a new error bit on the same edge: stays set
    await collide(REG["INT_STATUS"].offset, 2, *err(7, 0x777, 0))
    await tb.raw_check(*names, what="INT_STATUS.ERR clear + new error")
    assert tb.regs["INT_STATUS"] == 2
    # byte-strobed W1C of ERR_STATUS: only bits 7:0 clear
    await collide(REG["ERR_STATUS"].offset, _M32, {}, lambda: None, strb=0b0001)
    await tb.raw_check(*names, what="strobed W1C")
    # W1C of INT_STATUS.CQ with a CQ event (INT_MOD_COUNT = 1) on the same edge: stays set, counted
    await tb.pulses(2, cqe={1})
    await collide(REG["INT_STATUS"].offset, 3, {"cqe_written": 1}, tb.cqe)
    await tb.raw_check(*names, what="INT_STATUS.CQ clear + CQ event")
    assert tb.regs["INT_STATUS"] == 1 and tb.regs["IRQ_COUNT"] == 2


# ---- pytest entry ---------------------------------------------------------------------------------------
try:
    import pytest
except ImportError:       # inside the simulator
    pytest = None

if pytest is not None:
    def test_regs():
        """Build the register block once (about 45 s of Verilator) and run every test above (a few s)."""
        from rnic.hdl.regs import RegisterBlock
        from rnic.sim.toolchain import build, run, seed_from_env
        b = build(lambda: RegisterBlock(), "regs", "regs")
        tests, fails = run(b, "test_regs", seed=seed_from_env(), test_dir=Path(__file__).parent)
        assert fails == 0, f"{fails} of {tests} cocotb tests failed"

    @pytest.mark.slow
    def test_regs_counter_wrap():
        """The 32-bit counter wrap (about 525 000 clocks)."""
        from rnic.hdl.regs import RegisterBlock
        from rnic.sim.toolchain import build, run, seed_from_env
        b = build(lambda: RegisterBlock(), "regs", "regs")
        tests, fails = run(b, "test_regs", seed=seed_from_env(), testcase="test_counter_wrap",
                           extra_env={"REGS_WRAP": "1"}, test_dir=Path(__file__).parent)
        assert fails == 0, f"{fails} of {tests} cocotb tests failed"
