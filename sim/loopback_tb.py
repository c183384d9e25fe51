"""The cocotb side of ``python -m rnic.sim loopback --rtl``: the scenario's loopback on the two engines of
``rnic_pair`` (:func:`rnic.sim.pair_top.build_pair`) beside the model (:func:`rnic.sim.pair_tb.run_loopback`; RC in
lockstep, :func:`rnic.sim.pair_rc.run_lockstep`).
Reads the job from ``$RNIC_LOOPBACK`` (JSON: scenario, seed, knobs, out) and writes ``out`` (JSON: the
summary, read from the RTL's memory and links, and the mismatches)."""

from __future__ import annotations

import json
import os
import random

import cocotb

from . import tb as sim_tb
from .loopback_cli import load, summary
from ..model.qpc import ServiceType
from ..model.requester import REQ_COUNTS
from .pair_rc import run_lockstep
from .pair_tb import RamView, Side, run_loopback


@cocotb.test()
async def loopback(dut):
    job = json.loads(open(os.environ["RNIC_LOOPBACK"]).read())
    lb = load(job["scenario"], seed=job["seed"], knobs=job["knobs"], rnr=1 << 30)
    rng = random.Random(lb.seed)
    sim_tb.start_clock(dut)
    a, b = Side(dut, "a", rng), Side(dut, "b", rng)
    if lb.service == ServiceType.RC:           # in lockstep with the model (rnic.sim.pair_rc)
        r = await run_lockstep(dut, rng, a, b, lb)
        r["sent"] = {"a": a.sent, "b": b.sent}
        r["links"] = {"a": dict(lb.links["a-to-b"].counts), "b": dict(lb.links["b-to-a"].counts)}
    else:
        r = await run_loopback(dut, rng, a, b, lb)
    sent = {"a-to-b": [f.hex() for f in r["sent"].get("a", [])], "b-to-a": [f.hex() for f in r["sent"].get("b", [])]}
    links = {"a-to-b": r["links"].get("a", {}), "b-to-a": r["links"].get("b", {})} if r["links"] else None
    counts = {name: {n: await side.reg(f"REQ_{n.upper()}") for n in REQ_COUNTS} for name, side in (("a", a), ("b", b))}
    s = summary(lb, {"a": RamView(a.ram), "b": RamView(b.ram)}, sent, links, counts)
    with open(job["out"], "w") as f:
        json.dump({"summary": s, "mismatches": r["mismatches"]}, f)
