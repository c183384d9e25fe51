"""The cocotb side of ``python -m rnic.sim loopback --rtl``: the scenario's loopback on the two engines of
``rnic_pair`` (:func:`rnic.sim.pair_top.build_pair`) beside the model (:func:`rnic.sim.pair_tb.run_loopback`).
Reads the job from ``$RNIC_LOOPBACK`` (JSON: scenario, seed, knobs, out) and writes ``out`` (JSON: the
summary, read from the RTL's memory and links, and the mismatches)."""

from __future__ import annotations

import json
import os
import random

import cocotb

from . import tb as sim_tb
from .loopback_cli import load, summary
from .pair_tb import RamView, Side, run_loopback


@cocotb.test()
async def loopback(dut):
    job = json.loads(open(os.environ["RNIC_LOOPBACK"]).read())
    lb = load(job["scenario"], seed=job["seed"], knobs=job["knobs"], rnr=1 << 30)
    rng = random.Random(lb.seed)
    sim_tb.start_clock(dut)
    a, b = Side(dut, "a", rng), Side(dut, "b", rng)
    r = await run_loopback(dut, rng, a, b, lb)
    sent = {"a-to-b": [f.hex() for f in r["sent"].get("a", [])], "b-to-a": [f.hex() for f in r["sent"].get("b", [])]}
    links = {"a-to-b": r["links"].get("a", {}), "b-to-a": r["links"].get("b", {})} if r["links"] else None
    s = summary(lb, {"a": RamView(a.ram), "b": RamView(b.ram)}, sent, links)
    with open(job["out"], "w") as f:
        json.dump({"summary": s, "mismatches": r["mismatches"]}, f)
