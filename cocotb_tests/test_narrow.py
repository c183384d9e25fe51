"""NarrowPort: a 64-bit AXI4 master's reads and writes land on the right lanes of a wider AXI RAM.

A cocotbext-axi AxiMaster (64-bit, ID 0) drives ``s_axi``; an AxiRam of the wide width answers on
``m_axi`` with random pauses on every channel. Several workers, each in its own 4 KiB region, run
random writes (any address, any length, so strobes start and end mid-beat) and reads concurrently,
so bursts queue in the lane FIFOs. Every read is compared with a byte mirror of what was written,
and at the end the whole RAM is compared with the mirror.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path

import cocotb

from rnic.sim import tb as sim_tb

try:
    import pytest
except ImportError:       # inside the simulator
    pytest = None

REGION = 4096
WORKERS = 4


@cocotb.test()
async def test_narrow_random(dut):
    from cocotbext.axi import AxiBus, AxiMaster, AxiRam

    seed = sim_tb.seed(dut, None, what=f"width {len(dut.m_axi__rdata)}")
    rng = random.Random(seed)
    sim_tb.start_clock(dut)
    for name in ("s_axi", "m_axi"):
        logging.getLogger(f"cocotb.{dut._name}.{name}").setLevel(logging.WARNING)
    master = AxiMaster(AxiBus.from_prefix(dut, "s_axi", bus_separator="__"), dut.clk, dut.rst)
    ram = AxiRam(AxiBus.from_prefix(dut, "m_axi", bus_separator="__"), dut.clk, dut.rst, size=WORKERS * REGION)
    for ch in (ram.read_if.ar_channel, ram.read_if.r_channel, ram.write_if.aw_channel, ram.write_if.w_channel,
               ram.write_if.b_channel):
        sim_tb.set_pause(ch, 0.3, rng)
    mirror = bytearray(rng.randbytes(WORKERS * REGION))
    ram.write(0, bytes(mirror))
    await sim_tb.reset(dut, 4, after=2)

    checked = [0]

    async def worker(k, wrng):
        base = k * REGION
        for _ in range(60):
            off = wrng.randrange(REGION - 1)
            n = wrng.randint(1, min(300, REGION - off))
            if wrng.random() < 0.5:
                data = wrng.randbytes(n)
                await master.write(base + off, data, awid=0)
                mirror[base + off:base + off + n] = data
            else:
                got = (await master.read(base + off, n, arid=0)).data
                assert bytes(got) == bytes(mirror[base + off:base + off + n]), \
                    f"seed {seed}: read of {n} bytes at 0x{base + off:x} differs"
                checked[0] += n

    tasks = [cocotb.start_soon(worker(k, random.Random(rng.randrange(1 << 30)))) for k in range(WORKERS)]
    for t in tasks:
        await t
    assert ram.read(0, WORKERS * REGION) == bytes(mirror), f"seed {seed}: RAM differs from the mirror"
    dut._log.info("seed %d: %d bytes read back and checked, RAM image checked", seed, checked[0])


if pytest is not None:
    @pytest.mark.parametrize("width", [128, 512])
    def test_narrow(width):
        from rnic.hdl.narrow import NarrowPort
        from rnic.sim.toolchain import build, run, seed_from_env
        b = build(lambda: NarrowPort(width), "narrow", f"narrow-w{width}")
        run(b, "test_narrow", seed=seed_from_env(), test_dir=Path(__file__).parent)

    def test_narrow_parameters():
        from rnic.hdl.narrow import NarrowPort
        for bad in (64, 96, 2048):
            with pytest.raises(ValueError):
                NarrowPort(bad)
        with pytest.raises(ValueError):
            NarrowPort(128, depth=0)
