"""The engine's context prefetcher (``hdl/engine/ctx_prefetch.py``) in Amaranth's simulator, against a
ready list kept in Python: random pushes (a QP at most once in the list) and pops. Every QP it names
is in the list within ``distance`` places of the head, each list entry is named at most once, and
every entry that waits at places 1 .. ``distance`` for ``distance + 6`` clocks with the requester ready
is named. Seed: RNIC_SEED."""

import random

import pytest
from amaranth.sim import Simulator

from rnic.hdl.engine.ctx_prefetch import ContextPrefetch
from rnic.sim.toolchain import seed_from_env

MAX_QPS = 16


def _run(rng, distance, clocks, p_push, p_pop, p_ready):
    dut = ContextPrefetch(MAX_QPS, distance)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    out = {"named": 0, "must": 0, "errors": []}

    async def tb(ctx):
        lst = []                  # the ready list: [qpn, occurrence id] from the head
        named = set()             # occurrence ids named
        at_reach = {}             # occurrence id -> consecutive clocks at places 1 .. distance
        must = set()              # occurrence ids that waited long enough: must be named
        occ = 0
        loaded_free = True        # the request register was empty or transferred at the last edge
        for _ in range(clocks):
            # a request loaded at the last edge: its QP is within reach of the list as it is now
            if ctx.get(dut.req.valid) and loaded_free:
                qpn = ctx.get(dut.req.payload)
                place = next((i for i, (q, _) in enumerate(lst) if q == qpn), None)
                if place is None or place > distance:
                    out["errors"].append(f"QP {qpn} named at place {place} of {[q for q, _ in lst]}")
                else:
                    oid = lst[place][1]
                    if oid in named:
                        out["errors"].append(f"QP {qpn} (entry {oid}) named twice")
                    named.add(oid)
                    out["named"] += 1
            ready = rng.random() < p_ready
            ctx.set(dut.req.ready, ready)
            loaded_free = not ctx.get(dut.req.valid) or ready
            for i, (_, oid) in enumerate(lst):       # clocks within reach with the requester ready
                if 1 <= i <= distance:
                    at_reach[oid] = at_reach.get(oid, 0) + ready
                else:
                    at_reach[oid] = 0
                if at_reach[oid] >= distance + 6:
                    must.add(oid)
            push = rng.random() < p_push and len(lst) < MAX_QPS
            pop = rng.random() < p_pop and lst
            ctx.set(dut.push, push)
            ctx.set(dut.pop, bool(pop))
            if push:
                qpn = rng.choice([q for q in range(MAX_QPS) if q not in {x for x, _ in lst}])
                ctx.set(dut.push_qpn, qpn)
            await ctx.tick()
            if pop:
                lst.pop(0)
            if push:
                lst.append((qpn, occ))
                occ += 1
        ctx.set(dut.push, 0)
        ctx.set(dut.pop, 0)
        out["must"] = len(must)
        missed = must - named
        if missed:
            out["errors"].append(f"entries {sorted(missed)[:8]} waited within reach and were not named")

    sim.add_testbench(tb)
    sim.run()
    return out


@pytest.mark.parametrize("distance", [1, 2, 8])
def test_ctx_prefetch_random(distance):
    seed = seed_from_env()
    print(f"seed {seed} (rerun with RNIC_SEED={seed})")
    rng = random.Random(f"{seed}-prefetch-{distance}")
    # slow pops (turns), then pops as fast as pushes, with a requester that is always or sometimes ready
    for p_pop, p_ready in ((0.05, 1.0), (0.3, 1.0), (0.05, 0.4), (0.4, 0.5)):
        r = _run(rng, distance, 3000, 0.3, p_pop, p_ready)
        assert not r["errors"], r["errors"][:5]
        assert r["named"] > 50 and (r["must"] > 20 or p_pop > p_ready / 2), r     # (fast pops: few wait)
