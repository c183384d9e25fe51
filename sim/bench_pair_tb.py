"""The cocotb side of ``python -m rnic.sim bench-pair`` (:mod:`rnic.sim.bench_pair`): RC messages from
engine A to engine B of ``rnic_pair`` over a link that loses frames, the hardware timers on, no model
beside them; every run ends with the end-to-end scoreboard on the RTL's memory.

Reads the plan from ``$RNIC_BENCH_PAIR`` (JSON: ``items``, ``out``) and rewrites ``out`` (JSON, one result
per item) after every item. An item: ``op`` (``RDMA_WRITE``, ``RDMA_READ``, ``SEND``,
``RDMA_WRITE_WITH_IMM``), ``size``, ``messages``, ``mtu``, ``loss`` (each direction), ``seed``,
``memory`` (clocks from a read burst's AR to its data), ``tick`` (TIMER_TICK), ``ack_timeout`` and ``poll``
(clocks between looks at the completion queues).

What a run measures, in clocks (one clock = one beat of ``W`` bits on the stream):

* ``t_first`` / ``t_last``: the first beat of the first frame / the last beat of the last frame that
  carries the messages' data (A's frames for WRITE and SEND, B's READ responses for READ), taken from
  the frames' lengths and the clock each left its engine;
* ``t_done``: the requester's last completion (its CQE in host memory, seen within ``poll`` clocks),
  counted from the doorbell; ``t_recv``: the same for the responder's receive completion (SEND,
  WRITE_WITH_IMM);
* ``data_beats``, ``data_bytes``: the data direction's frames, ideal beats (``ceil(len / (W/8))``) and
  bytes; ``ack_frames``: the other direction's;
* the requester's counters (``REQ_*``), both engines' receive counters that are not 0, and what the
  links did to the frames.
"""

from __future__ import annotations

import json
import os
import random

import cocotb
from cocotb.triggers import ClockCycles

from ..model.config import RnicConfig
from ..model.descriptor import LinkMode
from ..model.qpc import ServiceType
from ..model.regs import RX_COUNTERS
from ..model.requester import REQ_COUNTS
from ..model.wqe import CQE_BYTES, WqeOpcode
from . import tb as sim_tb
from .harness import clock_now
from .link import LinkKnobs
from .loopback import Loopback, Message
from .pair_rc import set_ack_timeout, wait_quiet
from .pair_tb import RamView, Side, carry_links, flush, ring, start
from .responder_pair import CQ_RING, RCQ_RING

QUIET = 3_000           # clocks both engines idle and the links empty before a run ends
LIMIT = 5_000_000       # clocks a run may take before it is reported as stalled


def bench_loopback(item: dict) -> Loopback:
    """The loopback of one plan item: ``messages`` messages A to B, the last of each QP signaled."""
    rng = random.Random(item["seed"])
    op, n = WqeOpcode[item["op"]], item["messages"]
    qps = 1 if n <= 32 else 2
    msgs = [Message(op, item["size"], rng.randbytes(item["size"]), signaled=i >= n - qps) for i in range(n)]
    knobs = LinkKnobs(loss=item["loss"])
    return Loopback(msgs, [], service=ServiceType.RC, mode=LinkMode.ROCEV2_IPV4, mtu=item["mtu"], ab=knobs,
                    ba=knobs, seed=item["seed"], qps=qps)


async def _watch_cq(dut, ram, base: int, count: int, every: int, found: list) -> None:
    """Append the clock at which CQE ``i`` (``i < count``) of the ring at ``base`` is first seen non-zero."""
    while len(found) < count:
        if any(ram.read(base + len(found) * CQE_BYTES, CQE_BYTES)):
            found.append(clock_now())
            continue
        await ClockCycles(dut.clk, every)


async def run_item(dut, a: Side, b: Side, item: dict, width: int) -> dict:
    lb = bench_loopback(item)
    sides = {"a": a, "b": b}
    set_ack_timeout(lb, item["ack_timeout"])
    doorbells = lb.post_recvs(doorbell=False)
    await start(dut, random.Random(item["seed"]), a, b, lb, writes=[("TIMER_TICK", item["tick"])],
                fixed_latency=item["memory"])
    stamps = {"a": [], "b": []}
    links, state, tasks = carry_links(dut, a, b, lb, stamps)
    op = WqeOpcode[item["op"]]
    qps = len(lb.qpns["a"])
    done, recv = [], []
    watchers = [cocotb.start_soon(_watch_cq(dut, a.ram, CQ_RING, qps, item["poll"], done))]
    if op in (WqeOpcode.SEND, WqeOpcode.SEND_WITH_IMM, WqeOpcode.RDMA_WRITE_WITH_IMM):
        watchers.append(cocotb.start_soon(_watch_cq(dut, b.ram, RCQ_RING, item["messages"], item["poll"], recv)))
    lb.ring_send_queues()
    t0 = clock_now()
    await ring(sides, lb, doorbells)
    _, problems = await wait_quiet(dut, a, b, links, state, QUIET, LIMIT, lambda: len(done) == qps)
    for t in tasks + watchers:
        t.cancel()
    await flush(dut, sides)
    problems += lb.check({"a": RamView(a.ram), "b": RamView(b.ram)})
    counts = {n: await a.reg(f"REQ_{n.upper()}") for n in REQ_COUNTS}
    rx = {}
    for name, side in sides.items():
        values = {n: await side.reg(n) for n, _ in RX_COUNTERS}
        rx[name] = {n: v for n, v in values.items() if v}
    data_side = "b" if op == WqeOpcode.RDMA_READ else "a"
    ack_side = "a" if data_side == "b" else "b"
    beat = width // 8
    data = stamps[data_side]
    beats = [-(-n // beat) for _, _, n in data]
    return {**item, "problems": problems[:10], "qps": qps,
            "t_first": data[0][0] - t0 if data else None, "t_last": data[-1][1] + 1 - t0 if data else None,
            "t_done": max(done) - t0 if len(done) == qps else None, "t_recv": max(recv) - t0 if recv else None,
            "data_frames": len(data), "data_beats": sum(beats), "data_bytes": sum(n for _, _, n in data),
            "ack_frames": len(stamps[ack_side]), "ack_bytes": sum(n for _, _, n in stamps[ack_side]),
            "payload": item["size"] * item["messages"], "requester": counts, "rx": rx,
            "links": {"a-to-b": dict(links["a"].counts), "b-to-a": dict(links["b"].counts)}}


@cocotb.test()
async def bench_pair(dut):
    with open(os.environ["RNIC_BENCH_PAIR"]) as f:
        job = json.load(f)
    sim_tb.start_clock(dut)
    width = RnicConfig.from_env().width
    rng = random.Random(1)
    a, b = Side(dut, "a", rng), Side(dut, "b", rng)
    results = []
    for item in job["items"]:
        results.append(await run_item(dut, a, b, item, width))
        with open(job["out"], "w") as f:
            json.dump(results, f)
        r = results[-1]
        dut._log.info("%s %d x %d B, MTU %d, loss %g: t_first %s t_last %s t_done %s, %d retransmits, %d problems",
                      r["op"], r["messages"], r["size"], r["mtu"], r["loss"], r["t_first"], r["t_last"], r["t_done"],
                      r["requester"]["retransmits"], len(r["problems"]))
