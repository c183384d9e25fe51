"""The cocotb side of a whole-engine simulation: host memory, register access, frame capture and
the comparison with the golden model. Used by ``cocotb_tests/test_rnic.py`` and by the CLI's RTL
runs (:mod:`rnic.sim.rtl_job`); import it only inside a cocotb simulation.
"""

from __future__ import annotations

import hashlib
import logging
import random
import time
from dataclasses import dataclass, field

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge
from cocotb.utils import get_sim_time

from ..model.config import RnicConfig
from ..model.engine import EngineModel, HostMemory
from ..model.regs import QPC_COUNTERS, REG
from . import tb as _tb
from .scenario import CHECKED_REGS, MEM_SIZE, compare, expected
from .tb import set_pause

__all__ = ["CLOCK_NS", "clock_now", "HostRam", "EnginePorts", "EngineHarness", "TB", "RunResult", "FrameTimes", "FrameClock"]

CLOCK_NS = _tb.CLK_NS


@dataclass
class RunResult:
    model: EngineModel
    frames: list[bytes]
    aborted: int
    mismatches: list[str]
    clocks: int
    beats: int
    regs: dict[str, int] = field(default_factory=dict)
    memory: str = ""            # SHA-256 of the regions the engine may write (Workload.regions), after the run


def clock_now() -> int:
    """The current clock cycle (simulation time / clock period)."""
    return int(get_sim_time(unit="ns")) // CLOCK_NS


class HostRam:
    """AxiRam holding a workload's memory image, with its bus-error ranges, random latency and ready."""

    def __init__(self, dut, rng: random.Random, prefix: str = "m_axi"):
        from cocotbext.axi import AxiBus, AxiRam
        logging.getLogger(f"cocotb.{dut._name}.{prefix}").setLevel(logging.ERROR)
        self.ram = AxiRam(AxiBus.from_prefix(dut, prefix, bus_separator="__"), dut.clk, dut.rst, size=MEM_SIZE)
        self.rng, self.dut = rng, dut
        self.mem = HostMemory()
        self.latency = (0, 0)
        rd, wr = self.ram.read_if, self.ram.write_if
        orig_read, orig_write = rd._read, wr._write

        def failing(errors, addr, n):
            return any(addr < hi and lo < addr + n for lo, hi, _ in errors)

        async def _read(address, length):
            if failing(self.mem.read_errors, address, length):
                raise OSError("injected read error")
            return await orig_read(address, length)

        async def _write(address, data):
            if failing(self.mem.write_errors, address, len(data)):
                raise OSError("injected write error")
            return await orig_write(address, data)

        rd._read, wr._write = _read, _write
        self.fixed_latency = 0

        def due(arrival):
            lo, hi = self.latency
            return arrival + self.fixed_latency + (self.rng.randint(lo, hi) if hi else 0)
        _tb.delay_channel(dut.clk, rd.ar_channel, clock_now, due)
        self.channels = (rd.ar_channel, rd.r_channel, wr.aw_channel, wr.w_channel, wr.b_channel)

    def load(self, mem: HostMemory, latency=(0, 0), pause=0.0, fixed_latency=0):
        """Replace the memory image and error ranges. Every read burst's data starts ``fixed_latency``
        plus a random ``latency`` (lo, hi) clocks after its AR (bursts overlap, data stays in order);
        ``pause`` is the probability of a pause on every AXI channel."""
        self.ram.write(0, bytes(MEM_SIZE))
        for page, content in mem.pages.items():
            self.ram.write(page * 4096, bytes(content))
        self.mem, self.latency, self.fixed_latency = mem, latency, fixed_latency
        for ch in self.channels:
            set_pause(ch, pause, self.rng)

    def read(self, addr, n):
        return self.ram.read(addr, n)


class EnginePorts:
    """One whole engine's ports under cocotbext-axi models: host memory (:class:`HostRam`, ``ram``), the
    register port (``axil``), the frame output (``sink``) and the frame input (``source``). ``prefix``
    names one engine of a top that holds several (``"a__"``)."""

    def __init__(self, dut, rng: random.Random, prefix: str = ""):
        from cocotbext.axi import AxiLiteBus, AxiLiteMaster, AxiStreamBus, AxiStreamSink, AxiStreamSource
        for port in ("s_axil", "m_axis", "s_axis"):
            logging.getLogger(f"cocotb.{dut._name}.{prefix}{port}").setLevel(logging.WARNING)
        self.ram = HostRam(dut, rng, prefix=f"{prefix}m_axi")
        bus = {port: AxiStreamBus.from_prefix(dut, f"{prefix}{port}", bus_separator="__") for port in ("m_axis", "s_axis")}
        self.axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, f"{prefix}s_axil", bus_separator="__"), dut.clk, dut.rst)
        self.sink = AxiStreamSink(bus["m_axis"], dut.clk, dut.rst)
        self.source = AxiStreamSource(bus["s_axis"], dut.clk, dut.rst)

    async def reg(self, name: str) -> int:
        return await self.axil.read_dword(REG[name].offset)

    async def write(self, name: str, value: int) -> None:
        await self.axil.write_dword(REG[name].offset, value)


class EngineHarness:
    """Runs a workload on one ``Rnic`` DUT from reset and compares it with the golden model, over the
    primitives each way of driving the DUT implements: :class:`TB` (cocotbext-axi models in Python)
    and :class:`rnic.sim.fast_harness.FastTB` (bus models inside the simulator). Subclasses set
    ``config``, ``width``, ``seed``, ``rng`` and ``regs``."""

    def reseed(self, seed: int):
        self.seed = seed
        self.rng = random.Random(seed)
        self.dut._log.info("seed %d (rerun with RNIC_SEED=%d)", seed, seed)

    async def read_reg(self, name: str) -> int:
        return await self.read_offset(REG[name].offset)

    async def execute(self, w, *, latency=(0, 0), pause=0.0, sink_pause=0.0, timeout=2_000_000, fixed_latency=0,
                      settle=0, skip_regs=(), progress=None, after_writes=None) -> RunResult:
        """Run workload ``w`` on the RTL from reset and compare it with the model.
        ``self.busy_s`` is left with the wall seconds from the last register write to idle.
        ``settle`` clocks are waited after idle (interrupt timer); ``skip_regs`` are not compared;
        ``progress(clocks)`` is called while the engine runs; ``after_writes()`` right after the register writes
        (the frames a bench sends in)."""
        await self.start(w.mem, latency=latency, pause=pause, sink_pause=sink_pause, fixed_latency=fixed_latency,
                         size=w.memory_map.size)
        model = expected(w, self.config)
        await self.write_regs(w.writes)
        if after_writes is not None:
            after_writes()
        started = time.perf_counter()
        clocks = await self.wait_idle(timeout, progress)
        self.busy_s = time.perf_counter() - started
        self.clocks = clocks
        await self.wait_clocks(settle)
        await self.write_regs([(REG["QPC_CMD"].offset, 2)])          # FLUSH
        await self.wait_qpc_command()
        assert (await self.read_reg("QPC_CMD_STATUS")) >> 1 == 0, "QPC FLUSH failed"
        frames, aborted = self.take_frames()
        beats = sum(-(-len(f) // (self.width // 8)) for f in frames)
        self.regs = {name: await self.read_reg(name) for name in CHECKED_REGS}
        regs = {name: value for name, value in self.regs.items() if name not in skip_regs}
        mismatches = compare(w, model, frames, self.read_mem, regs)
        memory = hashlib.sha256(b"".join(self.read_mem(a, n) for a, n in w.regions)).hexdigest()
        mismatches += await self.check_qpc_counters(model)
        status = await self.read_reg("STATUS")
        irq = self.irq()
        if bool(status >> 1 & 1) != bool(irq):
            mismatches.append(f"irq pin {irq} but STATUS.IRQ {status >> 1 & 1}")
        want_irq = bool(model.reg("INT_STATUS") & model.reg("INT_ENABLE"))
        if "INT_STATUS" not in skip_regs and want_irq != bool(irq):
            mismatches.append(f"irq pin {irq}, model {int(want_irq)}")
        self.dut._log.info("seed %d: %d frames, %d aborted, %d CQEs, %d clocks to idle", self.seed, len(frames),
                           aborted, len(model.cqes), clocks)
        return RunResult(model, frames, aborted, mismatches, clocks, beats, dict(self.regs), memory)

    async def check_qpc_counters(self, model) -> list[str]:
        """The QP context cache's counters are not modelled exactly (the request order depends on
        timing); check what must hold of them after a run from reset."""
        c = {n: await self.read_reg(f"QPC_{n.upper()}") for n, _ in QPC_COUNTERS}
        self.regs.update({f"QPC_{n.upper()}": v for n, v in c.items()})
        out = []
        found = c["hits"] + c["misses"] + c["merged"]
        if not found <= c["lookups"] <= found + c["errors"]:
            out.append(f"QPC counters: lookups {c['lookups']} != hits {c['hits']} + misses {c['misses']} "
                       f"+ merged {c['merged']} (+ up to {c['errors']} errors)")
        if c["evictions"] > c["misses"]:
            out.append(f"QPC counters: {c['evictions']} evictions but only {c['misses']} misses")
        qps = len({p.qpn for p in model.packets})
        if c["misses"] < qps:
            out.append(f"QPC counters: {c['misses']} misses, but {qps} QPs sent packets from a cold cache")
        return out

    async def run(self, w, **kw):
        """:meth:`execute`, failing on any mismatch; returns the model."""
        r = await self.execute(w, **kw)
        assert not r.mismatches, f"seed {self.seed}: RTL differs from the model:\n  " + "\n  ".join(r.mismatches)
        return r.model


class TB(EngineHarness):
    """One ``Rnic`` DUT driven by cocotbext-axi: host memory in an AxiRam, registers through an
    AxiLiteMaster, frames into an AxiStreamSink, all running in Python every clock. Its configuration
    (which the model must share) comes from ``$RNIC_CONFIG``
    (:meth:`rnic.model.config.RnicConfig.from_env`), set by whoever built it; the datapath width
    read off the frame port must agree with it."""

    def __init__(self, dut, seed: int):
        from cocotbext.axi import AxiLiteBus, AxiLiteMaster, AxiStreamBus, AxiStreamSink
        self.dut = dut
        self.config = RnicConfig.from_env()
        self.width = len(dut.m_axis__tdata)
        assert self.width == self.config.width, (
            f"the DUT's frame port is {self.width} bits, $RNIC_CONFIG says width {self.config.width}")
        self.reseed(seed)
        _tb.start_clock(dut, CLOCK_NS)
        for name in ("s_axil", "m_axis"):
            logging.getLogger(f"cocotb.{dut._name}.{name}").setLevel(logging.WARNING)
        self.axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil", bus_separator="__"), dut.clk, dut.rst)
        self.sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis", bus_separator="__"), dut.clk, dut.rst)
        self.ram = HostRam(dut, self.rng)

    async def reset(self):
        await _tb.reset(self.dut, 4, after=2)

    def backpressure(self, p: float):
        set_pause(self.sink, p, self.rng)

    async def read_offset(self, offset: int) -> int:
        return await self.axil.read_dword(offset)

    async def start(self, mem, *, latency, pause, sink_pause, fixed_latency, size=MEM_SIZE):
        assert size <= MEM_SIZE, f"a {size}-byte memory map: the AxiRam holds {MEM_SIZE} bytes"
        self.ram.rng = self.rng
        self.ram.load(mem, latency, pause, fixed_latency)
        self.backpressure(sink_pause)
        await self.reset()
        while not self.sink.empty():
            self.sink.recv_nowait()

    async def write_regs(self, writes):
        for offset, value in writes:
            await self.axil.write_dword(offset, value)

    async def wait_idle(self, timeout, progress) -> int:
        clocks = 0
        while not (await self.read_reg("STATUS")) & 1:
            await ClockCycles(self.dut.clk, 50)
            clocks += 50
            if progress is not None:
                progress(clocks)
            if clocks >= timeout:
                raise TimeoutError(f"seed {self.seed}: engine not idle after {timeout} clocks")
        return clocks

    async def wait_clocks(self, n: int):
        await ClockCycles(self.dut.clk, n)

    async def wait_qpc_command(self):
        while (await self.read_reg("QPC_CMD_STATUS")) & 1:
            await ClockCycles(self.dut.clk, 10)

    def take_frames(self) -> tuple[list[bytes], int]:
        frames, aborted = [], 0
        while not self.sink.empty():
            f = self.sink.recv_nowait()
            user = f.tuser[-1] if isinstance(f.tuser, list) else f.tuser
            if user:
                aborted += 1
            else:
                frames.append(bytes(f.tdata))
        return frames, aborted

    def read_mem(self, addr: int, n: int) -> bytes:
        return self.ram.read(addr, n)

    def irq(self) -> int:
        return int(self.dut.irq.value)


class RtlDevice:
    """The RTL behind a :class:`TB` as a device of :mod:`rnic.sim.verbs`: registers over AXI4-Lite,
    host memory in the AxiRam."""

    def __init__(self, tb: TB, timeout: int = 2_000_000):
        self.tb, self.timeout = tb, timeout

    async def write_reg(self, offset: int, value: int) -> None:
        await self.tb.axil.write_dword(offset, value)

    async def read_reg(self, offset: int) -> int:
        return await self.tb.axil.read_dword(offset)

    def peek(self, addr: int, n: int) -> bytes:
        return self.tb.ram.read(addr, n)

    def poke(self, addr: int, data: bytes) -> None:
        self.tb.ram.ram.write(addr, data)

    async def wait_idle(self) -> None:
        clocks = 0
        while not (await self.read_reg(REG["STATUS"].offset)) & 1:
            await ClockCycles(self.tb.dut.clk, 20)
            clocks += 20
            if clocks >= self.timeout:
                raise TimeoutError(f"seed {self.tb.seed}: engine not idle after {self.timeout} clocks")


class FrameTimes:
    """When things happened on m_axis and m_axi, in clocks: every beat transferred (``beats``), every
    frame's first and last beat (``starts``, ``ends``), every *gap* (a clock inside a frame with
    ``tready`` high and ``tvalid`` low: a MAC would underrun); every AR (``ars``: clock, beats) and
    every clock R was valid and ready (``r_beats``) or valid and not ready (``r_stalls``)."""

    def read_channel(self, mem_latency: int, first: int = 0) -> dict:
        """Each clock from frame ``first``'s first beat to the last beat, by what the host-memory read
        channel did: an R beat (``r_beats``), R valid and not ready (``r_backpressure``), data due but
        R not valid (``r_idle_due``: an AR accepted ``mem_latency`` clocks before or earlier still
        has beats to come, so the memory is late), or nothing due (``r_idle_none_due``: the engine
        had not asked in time). For a memory with a fixed latency; the four add up to the span."""
        lo, hi = self.starts[first], self.beats[-1]
        beats, stalls = set(self.r_beats), set(self.r_stalls)
        due_at = {}
        for t, n in self.ars:
            due_at[t + mem_latency] = due_at.get(t + mem_latency, 0) + n
        owed = sent = 0
        counts = dict.fromkeys(("r_beats", "r_backpressure", "r_idle_due", "r_idle_none_due"), 0)
        for c in range(min([lo, *due_at]), hi + 1):
            owed += due_at.get(c, 0)
            busy = c in beats
            if c >= lo:
                kind = ("r_beats" if busy else "r_backpressure" if c in stalls
                        else "r_idle_due" if owed > sent else "r_idle_none_due")
                counts[kind] += 1
            sent += busy
        return counts


class FrameClock(FrameTimes):
    """:class:`FrameTimes` of a :class:`TB`, watched from Python every clock."""

    def __init__(self, dut):
        self.dut, self.beats, self.starts, self.ends, self.gaps = dut, [], [], [], []
        self.ars, self.r_beats, self.r_stalls = [], [], []   # host-memory read channel, for the benches
        cocotb.start_soon(self._watch())

    async def _watch(self):
        d, first = self.dut, True
        while True:
            await RisingEdge(d.clk)
            if int(d.m_axi__arvalid.value) and int(d.m_axi__arready.value):
                self.ars.append((clock_now(), int(d.m_axi__arlen.value) + 1))
            if int(d.m_axi__rvalid.value):
                (self.r_beats if int(d.m_axi__rready.value) else self.r_stalls).append(clock_now())
            valid, ready = int(d.m_axis__tvalid.value), int(d.m_axis__tready.value)
            if ready and not valid and not first:
                self.gaps.append(clock_now())
            if valid and ready:
                t = clock_now()
                self.beats.append(t)
                if first:
                    self.starts.append(t)
                first = bool(int(d.m_axis__tlast.value))
                if first:
                    self.ends.append(t)
