"""cocotb testbench for :class:`rnic.hdl.crc.CrcStream` (through :class:`~rnic.hdl.crc.CrcStreamAxis`).

Every result is compared with ``spec.compute`` of the packet's bytes (the golden model). Stimulus:
random packets of 0..600 bytes plus a few up to 4096, every length residue modulo the lane count,
random leading offsets on the first beat, random garbage in null lanes, some packets ending in a
``keep == 0`` beat, random valid/ready on both sides (input side only for a build without the
result queue, whose sink must always be ready). Directed tests check the ``123456789``
catalogue value at every offset, the documented latency and full throughput.

The pytest functions at the bottom build each configuration once (cached) and run the cocotb tests;
rerun a failure with ``RNIC_SEED=<seed>`` (printed by :func:`rnic.sim.toolchain.run`).
"""

from __future__ import annotations

import logging
import os
import random
from pathlib import Path

import cocotb
import pytest
from cocotb.triggers import ClockCycles, RisingEdge, with_timeout
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource

from rnic.hdl.crc import CrcStream, CrcStreamAxis
from rnic.model.crc import ICRC, VCRC
from rnic.sim import tb as sim_tb
from rnic.sim import toolchain

SPECS = {"ICRC": ICRC, "VCRC": VCRC}
# CrcStream(queue=...) of this build: without the queue the sink must take every result at once,
# so those builds run without backpressure.
QUEUE = os.environ.get("RNIC_CRC_QUEUE", "1") == "1"


class TB:
    def __init__(self, dut):
        self.dut = dut
        self.log = logging.getLogger("cocotb.tb")
        self.log.setLevel(logging.INFO)
        self.spec = SPECS[os.environ["RNIC_CRC_SPEC"]]
        self.width = len(dut.s_axis__tdata)
        self.lanes = self.width // 8
        self.latency = CrcStream(self.spec, self.width, queue=QUEUE).latency
        self.rng = random.Random(sim_tb.seed(dut, what=f"{self.spec.name}, width {self.width}, queue {QUEUE}"))
        sim_tb.start_clock(dut)
        self.source = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis", bus_separator="__"),
                                      dut.clk, dut.rst)
        self.sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis", bus_separator="__"),
                                  dut.clk, dut.rst)
        for name in ("source", "sink"):
            getattr(self, name).log.setLevel(logging.ERROR)

        # Handshake monitor: cycle numbers of last-beat input transfers and output transfers, and
        # the count of cycles in which the source offered a beat the DUT refused.
        self.cycle = 0
        self.in_last_cycles = []
        self.out_valid_cycles = []  # cycle at which each result's tvalid first appeared
        self.stalls = 0
        cocotb.start_soon(self._monitor())

    def set_idle_generator(self, generator=None):
        self.source.set_pause_generator(generator)
        self.source.pause = False

    def set_backpressure_generator(self, generator=None):
        self.sink.set_pause_generator(generator)
        self.sink.pause = False

    async def reset(self):
        await sim_tb.reset(self.dut, 3, before=2, after=2)

    async def _monitor(self):
        dut = self.dut
        out_pending = False
        while True:
            await RisingEdge(dut.clk)
            self.cycle += 1
            if int(dut.rst.value):
                out_pending = False
                continue
            s_valid, s_ready = int(dut.s_axis__tvalid.value), int(dut.s_axis__tready.value)
            if s_valid and s_ready and int(dut.s_axis__tlast.value):
                self.in_last_cycles.append(self.cycle)
            if s_valid and not s_ready:
                self.stalls += 1
            m_valid, m_ready = int(dut.m_axis__tvalid.value), int(dut.m_axis__tready.value)
            if m_valid and not out_pending:
                self.out_valid_cycles.append(self.cycle)
            out_pending = bool(m_valid and not m_ready)
            if m_valid and m_ready:
                out_pending = False

    def frame(self, payload, offset=0, null_beat=False):
        """AXI-Stream frame for one packet: ``offset`` null lanes before it, then either a final
        all-null beat (when the packet ends on a lane boundary and ``null_beat``) or, half of the
        time, null lanes up to the boundary. Null lanes carry random garbage (the DUT must ignore
        them; cocotbext-axi would send zeros)."""
        n = self.lanes
        lead = offset
        total = offset + len(payload)
        if total == 0:
            lead = self.rng.randint(1, n)  # an empty packet is one keep == 0 beat
            total = lead
        if null_beat and len(payload) and total % n == 0:
            trail = n
        else:
            trail = (-total) % n if self.rng.random() < 0.5 else 0
        garbage = lambda k: bytes(self.rng.randrange(256) for _ in range(k))
        return AxiStreamFrame(garbage(lead) + payload + garbage(trail),
                              tkeep=[0] * lead + [1] * len(payload) + [0] * trail)

    async def check_packets(self, packets):
        """Send ``(payload, offset, null_beat)`` packets and compare every result with the model."""
        for payload, offset, null_beat in packets:
            self.source.send_nowait(self.frame(payload, offset, null_beat))
        for index, (payload, offset, _) in enumerate(packets):
            rx = await with_timeout(self.sink.recv(), 100, "us")  # 25000 cycles per result
            got = int.from_bytes(bytes(rx.tdata), "little")
            expected = self.spec.compute(payload)
            assert got == expected, (f"packet {index}: {len(payload)} bytes at offset {offset}: "
                                     f"CRC {got:#x}, model {expected:#x}")
        await ClockCycles(self.dut.clk, 4 * self.latency + 16)
        assert self.sink.empty(), "extra results came out"
        assert self.source.empty()


def random_packets(tb, count, max_len=600):
    rng, n = tb.rng, tb.lanes
    packets = []

    def offset():
        return 0 if rng.random() < 0.25 else rng.randrange(n)

    def payload(length):
        return bytes(rng.randrange(256) for _ in range(length))

    # Every residue modulo the lane count, each with a random offset.
    for residue in range(n):
        length = residue + n * rng.randrange((max_len - residue) // n + 1)
        packets.append((payload(length), offset(), rng.random() < 0.3))
    for _ in range(count):
        packets.append((payload(rng.randrange(max_len + 1)), offset(), rng.random() < 0.3))
    for _ in range(3):
        packets.append((payload(rng.randrange(max_len, 4097)), offset(), rng.random() < 0.3))
    rng.shuffle(packets)
    # A burst of short packets (first and last beat often coincide): results come faster than a
    # slow sink takes them, so the result queue fills and the input must be held off.
    burst = [(payload(rng.randrange(0, 2 * n + 1)), offset(), rng.random() < 0.3)
             for _ in range(max(2 * n, 48))]
    at = rng.randrange(len(packets) + 1)
    return packets[:at] + burst + packets[at:]


@cocotb.test()
async def run_check_value(dut):
    """``123456789`` at every leading offset: catalogue value, amaranth.lib.crc, model, latency."""
    tb = TB(dut)
    await tb.reset()
    message = b"123456789"
    expected = tb.spec.compute(message)
    if tb.spec.check is not None:
        assert expected == tb.spec.check
    assert expected == tb.spec.algorithm()(data_width=8).compute(message)  # amaranth.lib.crc
    # First one alone on an idle pipeline: measure the latency.
    await tb.check_packets([(message, 0, False)])
    assert len(tb.in_last_cycles) == 1 and len(tb.out_valid_cycles) == 1
    latency = tb.out_valid_cycles[0] - tb.in_last_cycles[0]
    tb.log.info("latency %d cycles", latency)
    assert latency == tb.latency, f"latency {latency}, documented {tb.latency}"
    await tb.check_packets([(message, offset, False) for offset in range(tb.lanes)])


@cocotb.test()
async def run_throughput(dut):
    """No idle, no backpressure: one beat per clock, never refused, constant latency."""
    tb = TB(dut)
    await tb.reset()
    rng, n = tb.rng, tb.lanes
    # Many single-beat packets back to back (the worst case for the result queue), then a mix.
    packets = [(bytes(rng.randrange(256) for _ in range(rng.randrange(n + 1))), 0, False)
               for _ in range(4 * n + 32)]
    packets += random_packets(tb, 40, max_len=300)
    await tb.check_packets(packets)
    assert tb.stalls == 0, f"input refused for {tb.stalls} cycles without backpressure"
    assert len(tb.in_last_cycles) == len(tb.out_valid_cycles) == len(packets)
    latencies = {o - i for i, o in zip(tb.in_last_cycles, tb.out_valid_cycles)}
    assert latencies == {tb.latency}, f"latencies {sorted(latencies)}, documented {tb.latency}"


@cocotb.test(skip=QUEUE)
@cocotb.parametrize(idle=[0.0, 0.3, 0.7])
async def run_random_no_queue(dut, idle):
    """Without the queue: random packets under random input valid, a sink that is always ready;
    the input is never refused."""
    tb = TB(dut)
    await tb.reset()
    if idle:
        tb.set_idle_generator(sim_tb.random_pause(random.Random(tb.rng.random()), idle))
    await tb.check_packets(random_packets(tb, 60))
    assert tb.stalls == 0, f"input refused for {tb.stalls} cycles"


@cocotb.test(skip=not QUEUE)
@cocotb.parametrize(idle=[0.0, 0.3, 0.7], backpressure=[0.0, 0.5, 0.9])
async def run_random(dut, idle, backpressure):
    """Random packets under random valid/ready on both sides."""
    tb = TB(dut)
    await tb.reset()
    if idle:
        tb.set_idle_generator(sim_tb.random_pause(random.Random(tb.rng.random()), idle))
    if backpressure:
        tb.set_backpressure_generator(sim_tb.random_pause(random.Random(tb.rng.random()), backpressure))
    await tb.check_packets(random_packets(tb, 60))
    tb.log.info("input refused in %d cycles", tb.stalls)
    # The short-packet burst outruns a 10 % sink only if the input offers often enough: at idle 0.3
    # results arrive at about 3.5x the drain rate, at idle 0.7 barely faster (a fill of ~fifo_depth).
    if backpressure >= 0.9 and idle <= 0.3:
        assert tb.stalls, "backpressure never reached the input"


@cocotb.test()
async def run_reset_midpacket(dut):
    """A reset in the middle of a packet leaves no state behind."""
    tb = TB(dut)
    await tb.reset()
    n = tb.lanes
    tb.source.send_nowait(tb.frame(bytes(range(256)) * 4, 3))
    await ClockCycles(dut.clk, 3)
    await tb.reset()
    tb.source.clear()
    tb.sink.clear()
    await tb.check_packets(random_packets(tb, 10, max_len=4 * n))


# --- pytest: build each configuration once, run the cocotb tests on it -------------------------


CONFIGS = [
    ("ICRC", 64, True),
    ("ICRC", 512, True),
    ("VCRC", 64, True),
    ("ICRC", 64, False),
    pytest.param("ICRC", 128, True, marks=pytest.mark.slow),
    pytest.param("ICRC", 256, True, marks=pytest.mark.slow),
    pytest.param("VCRC", 512, True, marks=pytest.mark.slow),
    pytest.param("VCRC", 512, False, marks=pytest.mark.slow),
    pytest.param("ICRC", 8, True, marks=pytest.mark.slow),
    pytest.param("VCRC", 24, True, marks=pytest.mark.slow),
]


@pytest.mark.parametrize("spec_name,width,queue", CONFIGS)
def test_crc_stream(spec_name, width, queue):
    seed = sim_tb.seed(None, None, what=f"test_crc_stream[{spec_name}-{width}-{queue}]")
    spec = SPECS[spec_name]
    build = toolchain.build(lambda: CrcStreamAxis(spec, width, queue=queue), "crc_stream_axis",
                            f"crc-{spec_name.lower()}-w{width}" + ("" if queue else "-noqueue"))
    toolchain.run(build, "test_crc", seed=seed, test_dir=Path(__file__).parent,
                  extra_env={"RNIC_CRC_SPEC": spec_name, "RNIC_CRC_QUEUE": str(int(queue))})
