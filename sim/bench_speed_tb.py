"""The simulator side of the simulation-speed benchmark (:mod:`rnic.sim.bench_speed`).

The ``speed`` cocotb test runs the benchmark's workloads on whichever top it was launched on —
``rnic`` with the cocotbext-axi harness (:class:`rnic.sim.harness.TB`) or the fast top
(:class:`rnic.sim.fast_harness.FastTB`) — each checked against the golden model, and on the fast top
each a second time from the same seed with Python asleep for exactly the clocks the first run took:
the *ceiling*, the model with its C++ bus models and nothing else. Results go to ``$RNIC_SPEED_OUT``.
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

import cocotb

from ..model.descriptor import LinkMode
from ..model.qpc import PathMtu
from ..model.wqe import WqeFlags, WqeOpcode
from .scenario import WorkloadBuilder, every_opcode_workload, text_payload
from .toolchain import seed_from_env

__all__ = ["WORKLOADS", "workload", "speed"]

WORKLOADS = ("demo", "send-64k", "qps-256")


def workload(name: str, seed: int, max_qps: int):
    """``(workload, options)`` of benchmark workload ``name``: the demo (every link mode, service and
    opcode; memory latency 1-40 clocks, 10 % AXI and 20 % sink stalls); eight 64 KiB SENDs on one QP
    (MTU 4096, latency 20-100); 64-byte SENDs, four on each of 256 QPs (latency 1-40)."""
    rng = random.Random(seed)
    if name == "demo":
        return every_opcode_workload(rng, payload=text_payload), {"latency": (1, 40), "pause": 0.1, "sink_pause": 0.2}
    if name == "send-64k":
        b = WorkloadBuilder(1, rng=rng)
        b.cq(0)
        b.qp(0, mtu=PathMtu.MTU_4096, mode=LinkMode.ROCEV2_IPV4)
        for _ in range(8):
            b.post(0, WqeOpcode.SEND, 1 << 16, flags=WqeFlags(0))
        return b.build(), {"latency": (20, 100)}
    if name == "qps-256":
        n = min(256, max_qps)
        b = WorkloadBuilder(n, rng=rng)
        for q in range(n):
            b.cq(q)
            b.qp(q, mode=LinkMode.ROCEV2_IPV4)
        for k in range(4 * n):
            b.post(k % n, WqeOpcode.SEND, 64, flags=WqeFlags(0))
        return b.build(), {"latency": (1, 40)}
    raise ValueError(f"unknown workload {name!r}; choose from {', '.join(WORKLOADS)}")


@cocotb.test()
async def speed(dut):
    fast = os.environ["RNIC_SPEED_PATH"] == "fast"
    names = os.environ.get("RNIC_SPEED_WORKLOADS", ",".join(WORKLOADS)).split(",")
    seed = seed_from_env(1)
    if fast:
        from .fast_harness import FastTB
        tb = FastTB(dut, seed)
    else:
        from .harness import TB
        tb = TB(dut, seed)
    rows = []
    for name in names:
        w, opts = workload(name, seed, tb.config.max_qps)
        tb.reseed(seed)
        t = time.perf_counter()
        r = await tb.execute(w, timeout=10_000_000, **opts)
        rows.append({"workload": name, "path": "fast" if fast else "cocotbext", "clocks": r.clocks,
                     "frames": len(r.frames), "mismatches": r.mismatches, "busy_s": tb.busy_s,
                     "run_s": time.perf_counter() - t})
        if fast:
            tb.reseed(seed)
            await tb.start(w.mem, fixed_latency=0, **{"pause": 0.0, "sink_pause": 0.0, **opts})
            await tb.write_regs(w.writes)
            t = time.perf_counter()
            await tb.wait_clocks(r.clocks)
            busy = time.perf_counter() - t
            idle = bool(await tb.read_reg("STATUS") & 1)
            rows.append({"workload": name, "path": "ceiling", "clocks": r.clocks, "frames": len(tb.take_frames()[0]),
                         "mismatches": [] if idle else ["not idle after the first run's clocks"],
                         "busy_s": busy, "run_s": None})
    Path(os.environ["RNIC_SPEED_OUT"]).write_text(json.dumps(rows))
