"""BlockFIFO against Amaranth's SyncFIFOBuffered: the same ports, the same values in every clock.

Both queues get the same random writes and reads (Amaranth's simulator, no Verilator); every
output (w_rdy, r_rdy, r_data while r_rdy, level) must match in every clock. Seed: RNIC_SEED.
"""

import random

import pytest
from amaranth import Module
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.sim import Simulator

from rnic.hdl.fifo import BlockFIFO
from rnic.sim.toolchain import seed_from_env


@pytest.mark.parametrize("depth", [1, 2, 3, 16, 32])
def test_block_fifo_matches_sync_fifo_buffered(depth):
    seed = seed_from_env()
    print(f"seed {seed} (rerun with RNIC_SEED={seed})")
    rng = random.Random(f"{seed}-fifo-{depth}")
    m = Module()
    m.submodules.ref = ref = SyncFIFOBuffered(width=12, depth=depth)
    m.submodules.dut = dut = BlockFIFO(width=12, depth=depth)
    outputs = ("w_rdy", "r_rdy", "level")
    sim = Simulator(m)
    sim.add_clock(1e-8)
    stats = {"writes": 0, "reads": 0, "full": 0}

    async def tb(ctx):
        for cycle in range(3000):
            phase = cycle // 300 % 3            # fill-heavy, drain-heavy, balanced
            w_en = rng.random() < (0.8, 0.2, 0.5)[phase]
            r_en = rng.random() < (0.2, 0.8, 0.5)[phase]
            data = rng.randrange(1 << 12)
            for q in (ref, dut):
                ctx.set(q.w_en, w_en), ctx.set(q.w_data, data), ctx.set(q.r_en, r_en)
            got = {name: (ctx.get(getattr(ref, name)), ctx.get(getattr(dut, name))) for name in outputs}
            for name, (want, have) in got.items():
                assert have == want, f"clock {cycle}: {name} {have}, SyncFIFOBuffered {want}"
            if ctx.get(ref.r_rdy):
                assert ctx.get(dut.r_data) == ctx.get(ref.r_data), f"clock {cycle}: r_data differs"
            stats["writes"] += w_en and ctx.get(ref.w_rdy)
            stats["reads"] += r_en and ctx.get(ref.r_rdy)
            stats["full"] += not ctx.get(ref.w_rdy)
            await ctx.tick()

    sim.add_testbench(tb)
    sim.run()
    assert stats["writes"] > 500 and stats["reads"] > 500 and stats["full"] > 10, stats
