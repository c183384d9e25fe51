"""The requester's timer table (rnic.hdl.requester.timers) in Amaranth's simulator against its model
(rnic.model.timers): random arms, re-arms and disarms; every expiry is one the model has due, of the
right kind, once; with the output always ready each fires within 2 * max_qps clocks of its deadline
tick, and every timer due by the end has fired. Seed: RNIC_SEED."""

import random

import pytest
from amaranth.sim import Simulator

from rnic.hdl.requester import TimerTable
from rnic.model.timers import TICK_NS, TimerKind, TimerTable as Model, ack_timeout_ticks, rnr_ticks
from rnic.sim.toolchain import seed_from_env


def _run(rng, qps, tick, clocks, p_cmd, p_ready):
    dut = TimerTable(qps)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    model = Model()
    due_since: dict[int, int] = {}
    fired, late = [], []

    async def tb(ctx):
        ctx.set(dut.tick, tick)
        prev_valid = prev_ready = 0
        pending = None
        for clock in range(clocks):
            winding_down = clock > clocks - (45 * tick + 6 * qps + 20)
            now = ctx.get(dut.now)
            valid = ctx.get(dut.expired.valid)
            if valid and (not prev_valid or prev_ready):           # a new expiry, loaded last clock
                qpn, kind = ctx.get(dut.expired.payload.qpn), ctx.get(dut.expired.payload.kind)
                want = model.timers.get(qpn)
                assert want is not None and want[0] == kind, f"clock {clock}: QP {qpn} fired, model {want}"
                assert qpn in due_since, f"clock {clock}: QP {qpn} fired before its deadline"
                model.disarm(qpn)
                if p_ready == 1:
                    late.append(clock - 1 - due_since.pop(qpn))
                else:
                    due_since.pop(qpn)
                fired.append(qpn)
            for qpn, (kind, deadline) in model.timers.items():
                if qpn not in due_since and (now - deadline) & 0xFFFF_FFFF < 1 << 31:
                    due_since[qpn] = clock
            ready = int(rng.random() < p_ready)
            ctx.set(dut.expired.ready, ready)
            if pending is None and not winding_down and rng.random() < p_cmd:
                pending = (rng.randrange(qps), rng.random() < 0.75, rng.choice(list(TimerKind)),
                           rng.choice([0, 1, 2, rng.randrange(40)]))
            ctx.set(dut.cmd.valid, pending is not None)
            if pending is not None:
                qpn, arm, kind, delay = pending
                ctx.set(dut.cmd.payload.qpn, qpn)
                ctx.set(dut.cmd.payload.arm, int(arm))
                ctx.set(dut.cmd.payload.kind, int(kind))
                ctx.set(dut.cmd.payload.delay, delay)
                if ctx.get(dut.cmd.ready):
                    due_since.pop(qpn, None)
                    if arm:
                        model.arm(qpn, kind, delay, now)
                    else:
                        model.disarm(qpn)
                    pending = None
            prev_valid, prev_ready = valid, ready
            await ctx.tick()
        now = ctx.get(dut.now)
        leftover = model.due(now)
        assert not leftover, f"due and never fired: {leftover}"

    sim.add_testbench(tb)
    sim.run()
    return fired, late


@pytest.mark.parametrize("qps,tick,p_ready", [(8, 1, 1.0), (16, 3, 1.0), (8, 2, 0.4), (32, 1, 0.7)])
def test_timers_fire_once_on_time(qps, tick, p_ready):
    seed = seed_from_env()
    print(f"RNIC_SEED={seed}")
    rng = random.Random(seed)
    fired, late = _run(rng, qps, tick, 4000, 0.3, p_ready)
    assert len(fired) > 20, f"seed {seed}: only {len(fired)} expiries"
    if p_ready == 1:
        assert max(late) <= 2 * qps, f"seed {seed}: an expiry {max(late)} clocks after its deadline"


def test_tick_conversions():
    assert ack_timeout_ticks(0) == 0 and ack_timeout_ticks(1) == 8 and ack_timeout_ticks(14) == 4 << 14
    assert ack_timeout_ticks(31) == (1 << 31) - 1
    assert rnr_ticks(1) == 10 and rnr_ticks(0) == -(-655_360_000 // TICK_NS)
