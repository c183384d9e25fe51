"""``bus.skid_stage`` (a two-entry skid buffer; the payload reader's command stage) in Amaranth's
simulator: every beat comes out once and in order under random valid / ready, one beat per clock
when ``dst`` is always ready, and ``src.ready`` does not follow ``dst.ready`` within a clock.
Seed: RNIC_SEED."""

import random

from amaranth import Module
from amaranth.lib import stream
from amaranth.sim import Simulator

from rnic.hdl.bus import skid_stage
from rnic.sim.toolchain import seed_from_env


def _run(rng, clocks, p_valid, p_ready):
    m = Module()
    src = stream.Signature(8).flip().create()
    dst = stream.Signature(8).create()
    valid, payload = skid_stage(m, src.valid, src.ready, src.payload, dst.ready, "stage")
    m.d.comb += [dst.valid.eq(valid), dst.payload.eq(payload)]
    sim = Simulator(m)
    sim.add_clock(1e-8)
    sent, got, stats = [], [], {"stalls": 0, "skid_used": 0}

    async def tb(ctx):
        nxt = 0
        for _ in range(clocks):
            valid = rng.random() < p_valid
            ready = rng.random() < p_ready
            ctx.set(src.valid, valid), ctx.set(src.payload, nxt & 0xFF), ctx.set(dst.ready, ready)
            src_ready = ctx.get(src.ready)
            ctx.set(dst.ready, not ready)          # src.ready is a flip-flop: unchanged
            assert ctx.get(src.ready) == src_ready, "src.ready follows dst.ready within the clock"
            ctx.set(dst.ready, ready)
            if ctx.get(dst.valid) and ready:
                got.append(ctx.get(dst.payload))
            if valid and src_ready:
                sent.append(nxt & 0xFF)
                nxt += 1
            stats["stalls"] += bool(ctx.get(dst.valid)) and not ready
            stats["skid_used"] += not src_ready
            await ctx.tick()

    sim.add_testbench(tb)
    sim.run()
    return sent, got, stats


def test_skid_stage_random():
    seed = seed_from_env()
    print(f"seed {seed} (rerun with RNIC_SEED={seed})")
    rng = random.Random(f"{seed}-stage")
    sent, got, stats = _run(rng, 4000, 0.7, 0.6)
    assert got == sent[:len(got)], "a beat was lost, repeated or reordered"
    assert len(sent) - len(got) <= 2, "more beats held than the two entries"
    assert len(got) > 1500 and stats["stalls"] > 200 and stats["skid_used"] > 100, stats


def test_skid_stage_full_rate():
    sent, got, _ = _run(random.Random(0), 500, 1.0, 1.0)
    assert len(sent) == 500 and got == sent[:-1]          # one clock of latency, no bubble
