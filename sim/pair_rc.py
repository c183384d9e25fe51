"""RC over the two RTL engines (``rnic_pair``) in lockstep with the two model nodes of a
:class:`~rnic.sim.loopback.Loopback`: the cocotb side of ``cocotb_tests/test_rnic_pair.py::test_reliable``.

An RC requester's frames depend on when responses arrive, so the RTL and the model must see the same
order of events. :func:`run_lockstep` fixes it: each step runs both nodes until they are idle (the model's
``engine.run()``, the RTL's STATUS.IDLE), then compares the frames each node sent in that step (its
responses and its requests, in order) with the model's, byte for byte, and puts the model's frames on its
links (:class:`~rnic.sim.link.Link`, the loopback's knobs and seed). Then the links deliver **one** frame
to its node, model and RTL alike, and the next step begins. When nothing moves, the links release what
they held back; when still nothing moves, each QP's RNR wait ends, else its local ACK timer expires: a
``REQ_TIMER`` write on both (the model's register action calls its requester), each followed by a step.
The run ends when a round of timers changes nothing.

At the end both engines flush their QP context caches, and both memories (contexts, requester records,
rings, CQs and data), the receive counters, and the end-to-end scoreboard on the RTL's memory are checked.

:func:`run_free` runs the engines alone, the link carrying frames as they come and the hardware timers on
(TIMER_TICK): the scoreboard alone judges.
"""

from __future__ import annotations

import random

from cocotb.triggers import ClockCycles

from ..model.qpc import CACHED_BYTES, RECORD_BYTES, QpContext
from ..model.regs import REG
from ..model.requester import REQ_COUNTS
from .loopback import Loopback
from .pair_tb import RamView, Side, carry_links, compare_state, flush, ring, start

__all__ = ["run_lockstep", "run_free", "set_ack_timeout", "wait_quiet"]

QUIET = 100                  # clocks after a frame went in before the engine's idle bit is trusted
STALL = 200_000


async def _settle(dut, side: Side) -> int:
    """Wait until ``side`` is idle (STATUS bit 0, twice in a row, nothing left in its frame input);
    returns the clocks waited (or raises after STALL)."""
    waited = 0
    await side.source.wait()
    await ClockCycles(dut.clk, QUIET)
    seen = 0
    while seen < 2:
        if await side.reg("STATUS") & 1:
            seen += 1
        else:
            seen = 0
        await ClockCycles(dut.clk, 20)
        waited += 40
        if waited > STALL:
            raise TimeoutError(f"engine {side.name} not idle after {STALL} clocks")
    return waited


async def _kick(side: Side, node, qpn: int, rnr: int) -> None:
    """REQ_TIMER for ``qpn`` on the model node and on the RTL engine."""
    for name, value in (("DB_QPN", qpn), ("REQ_TIMER", rnr)):
        node.engine.write_reg(REG[name].offset, value)
        await side.write(name, value)


def _take(side: Side) -> list[bytes]:
    out = []
    while not side.sink.empty():
        out.append(bytes(side.sink.recv_nowait().tdata))
    side.sent += out
    return out


async def run_lockstep(dut, rng: random.Random, a: Side, b: Side, lb: Loopback, max_quiet: int = 200) -> dict:
    """Run ``lb`` (built with ``rnr`` 0, nothing run yet) on the model and on the two engines, step by step;
    return ``{"mismatches": [...], "problems": [...], "steps": n}`` (mismatches stop the run)."""
    nodes = {"a": lb.pair.a, "b": lb.pair.b}
    sides = {"a": a, "b": b}
    doorbells = lb.post_recvs(doorbell=False)
    for name, qpn, pi in doorbells:
        nodes[name].resp.rq_doorbell(qpn, pi)
    await start(dut, rng, a, b, lb)
    lb.ring_send_queues()                             # the model's doorbells (Loopback.run rings them there)
    await ring(sides, lb, doorbells)

    links = {"a": lb.links["a-to-b"], "b": lb.links["b-to-a"]}
    dst_of = {"a": "b", "b": "a"}
    since = {n: [0, 0] for n in nodes}
    mismatches: list[str] = []
    steps = quiet = 0

    async def run_nodes() -> bool:
        """Both nodes until idle; compare and send what each sent. True if anything was sent."""
        moved = False
        for name, node in nodes.items():
            node.engine.run()
            new = node.resp.responses[since[name][0]:] + node.engine.packets[since[name][1]:]
            since[name] = [len(node.resp.responses), len(node.engine.packets)]
            want = [p.frame() for p in new]
            await _settle(dut, sides[name])
            await ClockCycles(dut.clk, 50)
            got = _take(sides[name])
            if got != want:
                first = next((i for i, (g, w) in enumerate(zip(got, want)) if g != w), min(len(got), len(want)))
                mismatches.append(f"step {steps}: engine {name} sent {len(got)} frames, the model {len(want)}; "
                                  f"they differ from frame {first}")
            for frame in want:
                lb.captured["a-to-b" if name == "a" else "b-to-a"].append(frame)
                links[name].send(frame)
            moved |= bool(want)
        return moved

    moved = await run_nodes()
    while quiet < max_quiet and not mismatches:
        steps += 1
        delivered = False
        for name in ("a", "b"):
            frames = links[name].deliver(everything=not moved)
            for frame in frames:
                dst = dst_of[name]
                nodes[dst].resp.receive(frame)
                await sides[dst].source.send(frame)
                delivered = True
                moved = await run_nodes()
                if mismatches:
                    break
            if mismatches:
                break
        if delivered or mismatches:
            quiet = 0
            continue
        quiet += 1
        fired = False
        for name, node in nodes.items():
            for qpn in lb.qpns[name]:
                for rnr in (1, 0):                  # the model's Loopback: rnr_expired(qpn) or timeout(qpn)
                    before = (node.engine._qpc_peek(qpn).req_wait, node.req.counts["timeouts"])
                    await _kick(sides[name], node, qpn, rnr)
                    moved = await run_nodes()
                    hit = before[0] if rnr else node.req.counts["timeouts"] != before[1]
                    fired |= bool(hit)
                    if hit or mismatches:
                        break
                if mismatches:
                    break
        if not fired:
            break
        quiet = 0
    await flush(dut, sides)
    mismatches += await compare_state(sides, lb)
    problems = lb.check({"a": RamView(a.ram), "b": RamView(b.ram)})
    return {"mismatches": mismatches, "problems": problems, "steps": steps}


def set_ack_timeout(lb: Loopback, ack_timeout: int) -> None:
    """Every QP context of ``lb``'s nodes gets local ACK timeout ``ack_timeout`` (before the engines start)."""
    for name, node in (("a", lb.pair.a), ("b", lb.pair.b)):
        for qpn in lb.qpns[name]:
            addr = node.driver._qpc(qpn)
            ctx = QpContext.unpack(node.mem.peek(addr, RECORD_BYTES))
            ctx.ack_timeout = ack_timeout
            node.mem.poke(addr, ctx.pack()[:CACHED_BYTES])


async def wait_quiet(dut, a: Side, b: Side, links: dict, state: dict, quiet: int, limit: int,
                     finished=lambda: True) -> tuple[int, list[str]]:
    """Wait until both engines are idle, the links empty and nothing sent for ``quiet`` clocks, and
    ``finished()``; a quiet round sets ``state["flush"]`` (the links release what they hold back).
    Returns the clocks waited and, after ``limit`` clocks, the complaint."""
    clocks = still = 0
    last = None
    while True:
        await ClockCycles(dut.clk, 500)
        clocks += 500
        now = (len(a.sent), len(b.sent))
        idle = await a.reg("STATUS") & 1 and await b.reg("STATUS") & 1 and not any(l.busy for l in links.values())
        still = still + 500 if idle and now == last else 0
        state["flush"] = now == last
        last = now
        if still >= quiet and finished():
            return clocks, []
        if clocks >= limit:
            return clocks, [f"not finished after {limit} clocks: frames sent {now}"]


async def run_free(dut, rng: random.Random, a: Side, b: Side, lb: Loopback, *, tick: int = 16,
                   ack_timeout: int = 8, quiet: int = 40_000, limit: int = 20_000_000) -> dict:
    """Run ``lb`` on the two engines alone, the link carrying frames as they come (each frame's fate drawn
    from the loopback's seed) and the hardware timers on (TIMER_TICK ``tick`` clocks, every QP's local ACK
    timeout ``ack_timeout``): no model, no software timers. Ends when both engines are idle and the links
    empty for ``quiet`` clocks; returns ``{"problems": [...], "clocks": n, "sent": {...}, "links": {...}}``
    with the scoreboard's findings on the RTL's memory (or a stall after ``limit`` clocks)."""
    sides = {"a": a, "b": b}
    doorbells = lb.post_recvs(doorbell=False)
    set_ack_timeout(lb, ack_timeout)
    await start(dut, rng, a, b, lb, writes=[("TIMER_TICK", tick)])
    links, state, tasks = carry_links(dut, a, b, lb)
    lb.ring_send_queues()
    await ring(sides, lb, doorbells)
    clocks, problems = await wait_quiet(dut, a, b, links, state, quiet, limit)
    for t in tasks:
        t.cancel()
    await flush(dut, sides)
    problems += lb.check({"a": RamView(a.ram), "b": RamView(b.ram)})
    counts = {name: {n: await side.reg(f"REQ_{n.upper()}") for n in REQ_COUNTS} for name, side in sides.items()}
    return {"problems": problems, "clocks": clocks, "sent": {"a": list(a.sent), "b": list(b.sent)},
            "links": {k: dict(v.counts) for k, v in links.items()}, "requester": counts}
