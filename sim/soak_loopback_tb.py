"""The cocotb side of ``python -m rnic.sim soak --loopback`` (:mod:`rnic.sim.soak_loopback`): workloads 0, 1,
2, ... (or the one ``only`` names) on the two engines in lockstep with the model until the clock budget is
spent. Reads the job from ``$RNIC_SOAK_LOOPBACK`` (JSON: seed, loss, cycles, workloads, only, start, stride, out:
workloads ``start, start + stride, ...``) and
rewrites ``out`` (JSON) after every workload."""

from __future__ import annotations

import itertools
import json
import os
import random

import cocotb
from cocotb.utils import get_sim_time

from ..model.requester import REQ_COUNTS
from . import tb as sim_tb
from .pair_rc import run_lockstep
from .pair_tb import Side
from .soak import workload_seed
from .soak_loopback import add_record, loopback_workload, new_summary


@cocotb.test()
async def soak_loopback(dut):
    with open(os.environ["RNIC_SOAK_LOOPBACK"]) as f:
        job = json.load(f)
    seed, out = job["seed"], job["out"]
    summary = new_summary(seed, job["loss"])
    sim_tb.start_clock(dut)
    rng = random.Random(seed)
    a, b = Side(dut, "a", rng), Side(dut, "b", rng)
    start, stride = job["start"], job["stride"]
    indices = [job["only"]] if job["only"] is not None else (
        range(start, job["workloads"], stride) if job["workloads"] is not None else itertools.count(start, stride))
    for index in indices:
        if job["cycles"] is not None and summary["totals"]["clocks"] >= job["cycles"]:
            break
        lb = loopback_workload(seed, index, job["loss"])
        start = get_sim_time(unit="ns")
        r = await run_lockstep(dut, random.Random(workload_seed(seed, index) ^ 1), a, b, lb)
        both = {n: 0 for n in REQ_COUNTS}                  # the RTL's requester counters, both nodes
        for side in (a, b):
            for n in REQ_COUNTS:
                both[n] += await side.reg(f"REQ_{n.upper()}")
        record = {"index": index, "seed": workload_seed(seed, index), "mode": lb.mode.slug, "mtu": lb.mtu,
                  "qps": lb.qps, "clocks": int((get_sim_time(unit="ns") - start) / sim_tb.CLK_NS),
                  "frames": len(a.sent) + len(b.sent), "messages": len(lb.messages) + len(lb.back),
                  "retransmits": both["retransmits"], "timeouts": both["timeouts"],
                  "implied_naks": both["implied_naks"], "naks_seq": both["naks_seq"],
                  "mismatches": r["mismatches"][:20], "problems": r["problems"][:20]}
        add_record(summary, record)
        with open(out, "w") as f:
            json.dump(summary, f)
        dut._log.info("workload %d: %d clocks, %d messages, %d retransmits, %d mismatches, %d problems", index,
                      record["clocks"], record["messages"], record["retransmits"], len(record["mismatches"]),
                      len(record["problems"]))
        if record["mismatches"] or record["problems"]:
            break
