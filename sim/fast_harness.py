"""The fast path of a whole-engine simulation: the ``rnic_sim`` top (:mod:`rnic.sim.sim_top`) with
host memory, frame sink and register master in C++ inside the simulator. Python loads memory,
queues register operations and reads results back between clock edges, and otherwise waits —
for ``notify`` (a queued register operation completed) or a number of clocks — so the simulator
runs undisturbed in between. Same checks as the cocotbext-axi path (:class:`rnic.sim.harness.TB`),
through the same :class:`rnic.sim.harness.EngineHarness`. Import it only inside a simulation of
``rnic_sim``.
"""

from __future__ import annotations

from cocotb.triggers import First, Timer

from ..model.config import RnicConfig
from ..model.regs import REG, RX_STATELESS
from .harness import CLOCK_NS, EngineHarness, FrameTimes, clock_now
from .scenario import MEM_SIZE
from .sim_top import HostBus

__all__ = ["FastTB", "FastDevice", "FastFrameClock"]

POLL_CLOCKS = 16        # STATUS is read this often while waiting for idle
REG_TIMEOUT = 100_000   # clocks a register access may take before the harness gives up


class FastTB(EngineHarness):
    """One ``rnic_sim`` DUT (configuration from ``$RNIC_CONFIG``, as :class:`TB`)."""

    def __init__(self, dut, seed: int):
        self.dut = dut
        self.config = RnicConfig.from_env()
        self.width = self.config.width
        self.bus = HostBus()
        self.read_latency = 0      # the memory's read latency of the current run (start)
        self.mem_size = MEM_SIZE
        self.bus.configure(MEM_SIZE, seed)
        self.reseed(seed)

    def now(self) -> int:
        """The clock edges since the simulation started."""
        return self.bus.clock()

    async def wait_clocks(self, n: int):
        if n > 0:
            await Timer(n * CLOCK_NS, unit="ns")

    async def wait_op(self, op: int, timeout: int = REG_TIMEOUT, progress=None, every: int = 20_000):
        """Wait until register operation ``op`` completes: wake on ``notify``, and every ``every``
        clocks to call ``progress(clocks waited)``. TimeoutError after ``timeout`` clocks of
        simulated time (counted by the simulator's time, so a stopped clock cannot hang it)."""
        start = clock_now()
        while not self.bus.op_done(op):
            waited = clock_now() - start
            if waited >= timeout:
                raise TimeoutError(f"seed {self.seed}: register operation {op} not done after {timeout} clocks "
                                   f"(0x{self.bus.reg_offset(op):x})")
            step = max(1, min(every, timeout - waited))
            await First(self.dut.notify.value_change, Timer(step * CLOCK_NS, unit="ns"))
            if progress is not None:
                progress(clock_now() - start)
        resp = self.bus.op_resp(op)
        if resp:
            raise RuntimeError(f"register access at 0x{self.bus.reg_offset(op):x} answered with resp {resp}")
        return self.bus.op_result(op)

    async def reset(self):
        self.bus.reset(4)
        await self.wait_clocks(4 + 2)

    async def read_offset(self, offset: int) -> int:
        return await self.wait_op(self.bus.reg_read(offset))

    async def write_offset(self, offset: int, value: int) -> None:
        await self.wait_op(self.bus.reg_write(offset, value))

    async def start(self, mem, *, latency, pause, sink_pause, fixed_latency, size=MEM_SIZE):
        bus = self.bus
        if size != self.mem_size:                     # a workload's memory map of another size
            bus.configure(size, 0)
            self.mem_size = size
        bus.seed(self.rng.getrandbits(64))
        bus.mem_clear()
        for page, content in mem.pages.items():
            bus.write(page * 4096, bytes(content))
        bus.clear_errors()
        for write, errors in ((0, mem.read_errors), (1, mem.write_errors)):
            for lo, hi, resp in errors:
                bus.add_error(write, lo, hi, resp)
        lo, hi = latency
        bus.timing(lo, hi, fixed_latency, pause, sink_pause)
        self.read_latency = fixed_latency + hi
        await self.reset()

    async def write_regs(self, writes):
        """Queue ``writes`` and wait for the last; each may take a memory round trip (a doorbell looks its QP
        up, a miss in the QP context cache)."""
        ops = [self.bus.reg_write(offset, value) for offset, value in writes]
        if ops:
            await self.wait_op(ops[-1], REG_TIMEOUT + (32 + self.read_latency) * len(ops))

    async def wait_idle(self, timeout, progress) -> int:
        """Clocks until STATUS.IDLE, polled; with frames queued for ``s_axis``, first until every one
        has gone in and has its front end verdict (idle shows between frames)."""
        start = self.bus.clock()
        if self.bus.rx_left() or self.bus.rx_sent():
            names = ["RX_ACCEPTED"] + [f"RX_{n.upper()}" for n in RX_STATELESS]
            while True:
                if self.bus.clock() - start > timeout:
                    raise TimeoutError(f"seed {self.seed}: frames in not all taken after {timeout} clocks")
                if not self.bus.rx_left() and sum([await self.read_reg(n) for n in names]) >= self.bus.rx_sent():
                    break
                await self.wait_clocks(POLL_CLOCKS)
        op = self.bus.reg_poll(REG["STATUS"].offset, 1, 1, POLL_CLOCKS)
        try:
            await self.wait_op(op, timeout, progress)
        except TimeoutError:
            raise TimeoutError(f"seed {self.seed}: engine not idle after {timeout} clocks") from None
        return self.bus.op_clock(op) - start

    async def wait_qpc_command(self):
        await self.wait_op(self.bus.reg_poll(REG["QPC_CMD_STATUS"].offset, 1, 0, POLL_CLOCKS))

    def take_frames(self) -> tuple[list[bytes], int]:
        frames, aborted = [], 0
        for data, user in self.bus.frames():
            if user:
                aborted += 1
            else:
                frames.append(data)
        return frames, aborted

    def read_mem(self, addr: int, n: int) -> bytes:
        return self.bus.read(addr, n)

    def irq(self) -> int:
        return self.bus.irq()


class FastFrameClock(FrameTimes):
    """:class:`FrameTimes` of a :class:`FastTB`, recorded by the bus models from its creation on
    (one at a time) and read when asked. ``ar_reads`` also has every AR's (clock, address, beats, id)."""

    def __init__(self, tb: FastTB):
        self.bus = tb.bus
        self.bus.watch(1)

    def __getattr__(self, name):
        if name in ("beats", "gaps", "starts", "ends", "r_beats", "r_stalls"):
            return self.bus.trace(name)
        raise AttributeError(name)

    @property
    def ars(self):
        return list(zip(self.bus.trace("ar_clocks"), self.bus.trace("ar_beats")))

    @property
    def ar_reads(self):
        t = self.bus.trace
        return list(zip(t("ar_clocks"), t("ar_addrs"), t("ar_beats"), t("ar_ids")))


class FastDevice:
    """The RTL behind a :class:`FastTB` as a device of :mod:`rnic.sim.verbs`."""

    def __init__(self, tb: FastTB, timeout: int = 2_000_000):
        self.tb, self.timeout = tb, timeout

    async def write_reg(self, offset: int, value: int) -> None:
        await self.tb.write_offset(offset, value)

    async def read_reg(self, offset: int) -> int:
        return await self.tb.read_offset(offset)

    def peek(self, addr: int, n: int) -> bytes:
        return self.tb.bus.read(addr, n)

    def poke(self, addr: int, data: bytes) -> None:
        self.tb.bus.write(addr, data)

    async def wait_idle(self) -> None:
        await self.tb.wait_idle(self.timeout, None)
