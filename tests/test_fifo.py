"""BlockFIFO and CreditFIFO against Amaranth's SyncFIFOBuffered: the same ports, the same values in every clock.

Both queues get the same random writes and reads (Amaranth's simulator, no Verilator); every
output (w_rdy, r_rdy, r_data while r_rdy, level) must match in every clock. Seed: RNIC_SEED.
"""

import random

import pytest
from amaranth import Module
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.sim import Simulator

from rnic.hdl.fifo import BlockFIFO, CreditFIFO
from rnic.sim.toolchain import seed_from_env


def _against_sync_fifo_buffered(make_dut, depth, tag, outputs, *, credit=False, check=None):
    """Random writes and reads into ``make_dut()`` and into ``SyncFIFOBuffered`` of the same depth;
    ``outputs`` and ``r_data`` (while ``r_rdy``) must match in every clock. With ``credit``,
    writes only while the reference has room. ``check(ctx, dut, level)``: more checks a clock."""
    seed = seed_from_env()
    print(f"seed {seed} (rerun with RNIC_SEED={seed})")
    rng = random.Random(f"{seed}-{tag}-{depth}")
    m = Module()
    m.submodules.ref = ref = SyncFIFOBuffered(width=12, depth=depth)
    m.submodules.dut = dut = make_dut()
    sim = Simulator(m)
    sim.add_clock(1e-8)
    stats = {"writes": 0, "reads": 0, "full": 0}

    async def tb(ctx):
        for cycle in range(3000):
            phase = cycle // 300 % 3            # fill-heavy, drain-heavy, balanced
            w_rdy = ctx.get(ref.w_rdy)
            w_en = (w_rdy or not credit) and rng.random() < (0.8, 0.2, 0.5)[phase]
            r_en = rng.random() < (0.2, 0.8, 0.5)[phase]
            data = rng.randrange(1 << 12)
            for q in (ref, dut):
                ctx.set(q.w_en, w_en), ctx.set(q.w_data, data), ctx.set(q.r_en, r_en)
            for name in outputs:
                want, have = ctx.get(getattr(ref, name)), ctx.get(getattr(dut, name))
                assert have == want, f"clock {cycle}: {name} {have}, SyncFIFOBuffered {want}"
            if check:
                check(ctx, dut, ctx.get(ref.level))
            if ctx.get(ref.r_rdy):
                assert ctx.get(dut.r_data) == ctx.get(ref.r_data), f"clock {cycle}: r_data differs"
            stats["writes"] += w_en and w_rdy
            stats["reads"] += r_en and ctx.get(ref.r_rdy)
            stats["full"] += not w_rdy
            await ctx.tick()

    sim.add_testbench(tb)
    sim.run()
    assert stats["writes"] > 500 and stats["reads"] > 500 and stats["full"] > 10, stats


@pytest.mark.parametrize("depth", [1, 2, 3, 16, 32])
def test_block_fifo_matches_sync_fifo_buffered(depth):
    def empty_is_level_zero(ctx, dut, level):
        assert ctx.get(dut.empty) == (level == 0), f"empty at level {level}"
    _against_sync_fifo_buffered(lambda: BlockFIFO(width=12, depth=depth), depth, "fifo",
                                ("w_rdy", "r_rdy", "level"), check=empty_is_level_zero)


@pytest.mark.parametrize("depth", [3, 4, 17])
def test_block_fifo_fabric_out(depth):
    """``fabric_out=True``: order kept, nothing lost, ``level`` = accepted - taken, ``w_rdy`` low at the
    depth and high two entries below it, and an entry readable three clocks after its write."""
    seed = seed_from_env()
    print(f"seed {seed} (rerun with RNIC_SEED={seed})")
    rng = random.Random(f"{seed}-fifo-fabric-{depth}")
    dut = BlockFIFO(width=12, depth=depth, fabric_out=True)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    stats = {"writes": 0, "reads": 0, "full": 0}

    async def tb(ctx):
        queue = []                          # (value, clock written)
        for cycle in range(3000):
            phase = cycle // 300 % 3
            w_en = rng.random() < (0.8, 0.2, 0.5)[phase]
            r_en = rng.random() < (0.2, 0.8, 0.5)[phase]
            data = rng.randrange(1 << 12)
            ctx.set(dut.w_en, w_en), ctx.set(dut.w_data, data), ctx.set(dut.r_en, r_en)
            level, w_rdy, r_rdy = ctx.get(dut.level), ctx.get(dut.w_rdy), ctx.get(dut.r_rdy)
            assert level == len(queue), f"clock {cycle}: level {level}, {len(queue)} entries held"
            assert ctx.get(dut.empty) == (level == 0), f"clock {cycle}: empty at level {level}"
            # full at the depth; never full with two entries free (one may be on its way out of RAM)
            assert not (w_rdy and level >= depth), f"clock {cycle}: w_rdy at level {level}"
            assert w_rdy or level > depth - 3, f"clock {cycle}: full at level {level}"
            if queue and cycle - queue[0][1] >= 3:
                assert r_rdy, f"clock {cycle}: entry written at clock {queue[0][1]} not readable"
            if r_rdy:
                assert queue, f"clock {cycle}: r_rdy with nothing written"
                assert ctx.get(dut.r_data) == queue[0][0], f"clock {cycle}: r_data out of order"
                if r_en:
                    queue.pop(0)
                    stats["reads"] += 1
            if w_en and w_rdy:
                queue.append((data, cycle))
                stats["writes"] += 1
            stats["full"] += not w_rdy
            await ctx.tick()

    sim.add_testbench(tb)
    sim.run()
    assert stats["writes"] > 500 and stats["reads"] > 500 and stats["full"] > 10, stats


@pytest.mark.parametrize("depth", [2, 3, 16, 17, 20])
def test_credit_fifo_matches_sync_fifo_buffered(depth):
    """CreditFIFO against SyncFIFOBuffered, writes only while the reference has room (the
    writer's credit): w_rdy, r_rdy and r_data the same in every clock."""
    _against_sync_fifo_buffered(lambda: CreditFIFO(width=12, depth=depth), depth, "credit-fifo",
                                ("w_rdy", "r_rdy"), credit=True)
