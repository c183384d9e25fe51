"""Two whole engines (module ``rnic_pair``, :func:`rnic.sim.pair_top.build_pair`) over a lossy link beside the model's
:class:`~rnic.sim.loopback.Loopback`: the cocotb side that ``cocotb_tests/test_rnic_pair.py`` and
``python -m rnic.sim loopback --rtl`` share.

:func:`run_loopback` sets both engines up from the loopback's nodes (memory, registers, doorbells),
carries each direction through a :class:`~rnic.sim.link.Link` with the model's seed (each frame meets the
fate it meets in the model), waits until both engines and links are quiet, and compares: every frame each
engine sent, both memories, the receive counters, and the end-to-end scoreboard on the RTL's memory.
UC and UD only: RC's frames depend on when responses arrive, and :mod:`rnic.sim.pair_rc` runs it in
lockstep with the model instead.
"""

from __future__ import annotations

import random

import cocotb
from cocotb.triggers import ClockCycles
from cocotb.utils import get_time_from_sim_steps

from ..model.qpc import CtrlOp, ServiceType
from ..model.regs import RX_COUNTERS
from . import tb as sim_tb
from .harness import EnginePorts
from .link import Link
from .loopback import Loopback
from .responder_cases import memory_differs

__all__ = ["Side", "RamView", "carry_links", "start", "ring", "flush", "compare_state", "run_loopback"]

STALL = 40_000


class Side(EnginePorts):
    """One engine of the pair, and the frames it has sent."""

    def __init__(self, dut, name: str, rng: random.Random):
        super().__init__(dut, rng, prefix=f"{name}__")
        self.name = name
        self.sent: list[bytes] = []


class RamView:
    """An engine's RAM as the scoreboard reads memory."""

    def __init__(self, ram):
        self.ram = ram

    def peek(self, addr: int, n: int) -> bytes:
        return self.ram.read(addr, n)


def _clock(steps: int) -> int:
    return int(get_time_from_sim_steps(steps, "ns")) // sim_tb.CLK_NS


async def _carry(clk, src: Side, dst: Side, link: Link, state: dict, stamps: list | None = None):
    """Every frame ``src`` sends, through ``link`` into ``dst``; ``state["flush"]`` releases what the link
    holds back (the link goes quiet). ``stamps`` gets ``(first, last, length)`` of each frame: the clocks
    of its first and last beat, and its bytes."""
    while True:
        if state["flush"] and link.busy:
            for f in link.deliver(everything=True):
                await dst.source.send(f)
        if src.sink.empty():
            await ClockCycles(clk, 8)
            continue
        got = await src.sink.recv()
        frame = bytes(got.tdata)
        if stamps is not None:
            stamps.append((_clock(got.sim_time_start), _clock(got.sim_time_end), len(frame)))
        src.sent.append(frame)
        link.send(frame)
        for f in link.deliver():
            await dst.source.send(f)


def carry_links(dut, a: Side, b: Side, lb: Loopback, stamps: dict | None = None):
    """Fresh links with ``lb``'s knobs and seeds (each frame meets the fate it meets in the model), each
    direction carried by :func:`_carry`; ``stamps`` (``{"a": [], "b": []}``) gets each side's frame stamps.
    Returns ``(links, state, tasks)``: ``state["flush"]`` releases what the links hold back, ``tasks`` are to
    be cancelled at the end."""
    state = {"flush": False}
    links = {name: Link(lb.links[key].knobs, lb.links[key].seed, lb.flow_of)
             for name, key in (("a", "a-to-b"), ("b", "b-to-a"))}
    stamps = stamps or {"a": None, "b": None}
    tasks = [cocotb.start_soon(_carry(dut.clk, a, b, links["a"], state, stamps["a"])),
             cocotb.start_soon(_carry(dut.clk, b, a, links["b"], state, stamps["b"]))]
    return links, state, tasks


async def start(dut, rng: random.Random, a: Side, b: Side, lb: Loopback, writes=(), fixed_latency: int | None = None) -> None:
    """Both engines from reset with the memory of ``lb``'s nodes (random latency, stalls and sink pauses
    from ``rng``; with ``fixed_latency``, every read burst that many clocks after its AR and no stalls) and
    their registers, then ``writes`` (``(name, value)``) on each."""
    nodes = {"a": lb.pair.a, "b": lb.pair.b}
    for side, node in ((a, nodes["a"]), (b, nodes["b"])):
        if fixed_latency is None:
            side.ram.load(node.mem, latency=rng.choice([(0, 0), (0, 30)]), pause=rng.choice([0, 0.1]))
            sim_tb.set_pause(side.sink, rng.choice([0, 0.2]), rng)
        else:
            side.ram.load(node.mem, fixed_latency=fixed_latency)
            sim_tb.set_pause(side.sink, 0, rng)
        side.sent.clear()
    await sim_tb.reset(dut, 4, low=("a__s_axis__tvalid", "b__s_axis__tvalid"), after=2)
    for side, node in ((a, nodes["a"]), (b, nodes["b"])):
        for offset, value in node.resp.settings.writes([e.gid for e in node.settings.sgids]) + node.settings.writes():
            await side.axil.write_dword(offset, value)
        for name, value in writes:
            await side.write(name, value)


async def ring(sides: dict, lb: Loopback, doorbells) -> None:
    """The receive-queue ``doorbells`` (``(node, qpn, pi)``), then every QP's send queue up to its driver's
    producer index, on the engines."""
    for name, qpn, pi in doorbells:
        await sides[name].write("DB_QPN", qpn)
        await sides[name].write("DB_RQ_PI", pi)
    nodes = {"a": lb.pair.a, "b": lb.pair.b}
    for name, qpns in lb.qpns.items():
        for qpn in qpns:
            if nodes[name].driver.sq_pi[qpn]:
                await sides[name].write("DB_QPN", qpn)
                await sides[name].write("DB_SQ_PI", nodes[name].driver.sq_pi[qpn])


async def flush(dut, sides: dict) -> None:
    """A QPC_CMD FLUSH on each engine (the cached contexts back in memory)."""
    for side in sides.values():
        await side.write("QPC_CMD", CtrlOp.FLUSH)
        while await side.reg("QPC_CMD_STATUS") & 1:
            await ClockCycles(dut.clk, 20)


async def compare_state(sides: dict, lb: Loopback) -> list[str]:
    """Each engine's memory and receive counters against its model node's (after :func:`flush`)."""
    out = []
    for name, node in (("a", lb.pair.a), ("b", lb.pair.b)):
        side = sides[name]
        differs = memory_differs(side.ram, node.mem)
        if differs:
            out.append(f"engine {name}: {differs}")
        regs = {n: await side.reg(n) for n, _ in RX_COUNTERS}
        diff = {n: (regs[n], node.engine.regs[n]) for n in regs if regs[n] != node.engine.regs[n]}
        if diff:
            out.append(f"engine {name}: receive counters (RTL, model) {diff}")
    return out


async def run_loopback(dut, rng: random.Random, a: Side, b: Side, lb: Loopback) -> dict:
    """Run ``lb`` (built with ``rnr`` out of reach, nothing run yet) on the model and on the two engines;
    return ``{"mismatches": [...], "problems": [...], "sent": {node: frames}, "links": {...}}``."""
    if lb.service == ServiceType.RC:
        raise ValueError("RC over the RTL pair needs the RTL requester (issue #41); run the model alone")
    doorbells = lb.post_recvs(doorbell=False)
    nodes = {"a": lb.pair.a, "b": lb.pair.b}
    await start(dut, rng, a, b, lb)
    for name, qpn, pi in doorbells:                 # the model: the same doorbells, then both directions
        nodes[name].resp.rq_doorbell(qpn, pi)
    lb.rnr = 0
    lb.run()
    want = {n: [p.frame() for p in node.engine.packets] for n, node in nodes.items()}
    links, state, tasks = carry_links(dut, a, b, lb)
    sides = {"a": a, "b": b}
    await ring(sides, lb, doorbells)
    waited, last = 0, None
    while True:
        await ClockCycles(dut.clk, 200)
        now = (len(a.sent), len(b.sent), await a.reg("RX_ACCEPTED"), await b.reg("RX_ACCEPTED"))
        done = (len(a.sent), len(b.sent)) == (len(want["a"]), len(want["b"]))
        if done and now == last:
            if any(link.busy for link in links.values()):
                state["flush"] = True
            elif await a.reg("STATUS") & 1 and await b.reg("STATUS") & 1:
                break
        waited = waited + 200 if now == last else 0
        last = now
        if waited >= STALL:
            for t in tasks:
                t.cancel()
            return {"mismatches": [f"no progress for {STALL} clocks: frames sent {now[:2]}, the model sent "
                                   f"{len(want['a'])} / {len(want['b'])}"], "problems": [], "sent": {}, "links": {}}
    await ClockCycles(dut.clk, 300)
    for t in tasks:
        t.cancel()
    await flush(dut, sides)
    mismatches = []
    for name, side in sides.items():
        if side.sent != want[name]:
            first = next((i for i, (g, w) in enumerate(zip(side.sent, want[name])) if g != w),
                         min(len(side.sent), len(want[name])))
            mismatches.append(f"engine {name}: its frames differ from the model's from frame {first} "
                              f"({len(side.sent)} sent, the model {len(want[name])})")
    mismatches += await compare_state(sides, lb)
    problems = lb.check({"a": RamView(a.ram), "b": RamView(b.ram)})
    return {"mismatches": mismatches, "problems": problems, "sent": dict((n, s.sent) for n, s in sides.items()),
            "links": {k: dict(v.counts) for k, v in links.items()}}
