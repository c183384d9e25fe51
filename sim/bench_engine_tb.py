"""The simulator side of the engine benchmark (:mod:`rnic.sim.bench_engine`, ``python -m rnic.sim bench``).

The ``bench`` cocotb test runs the measurements of ``RNIC_BENCH_PLAN`` (a JSON list of
``{"part": ..., arguments of its bench_* function}``) or, without it, the default measurements of the
parts in ``RNIC_BENCH_PARTS``, on the test harness of the fast top ``rnic_sim``
(:class:`rnic.sim.fast_harness.FastTB`: every run is compared with the golden model), and writes the
results to ``RNIC_BENCH``. ``RNIC_BENCH_PROGRESS``: a file that gets one JSON line per finished
measurement. What the benches time on the buses (frame beats, ARs, R beats) comes from the bus
models' traces (:class:`rnic.sim.fast_harness.FastFrameClock`), in the clocks of ``tb.now()``.
``cocotb_tests/test_rnic.py`` checks read efficiency floors with :func:`bench_efficiency`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import cocotb

from ..model.config import RnicConfig
from ..model.descriptor import LinkMode, PacketDesc
from ..model.frames import build_frame, normalize_desc
from ..model.opcodes import Opcode
from ..model.qpc import COUNTER_NAMES, PathMtu
from ..model.receive import PortAddresses
from ..model.regs import REG
from ..model.responder import ResponderSettings
from ..model.wqe import WqeFlags, WqeOpcode
from .fast_harness import FastFrameClock, FastTB
from .scenario import DEFAULT_MAP, SGIDS, MemoryMap, WorkloadBuilder
from .toolchain import seed_from_env

__all__ = ["build_rnic", "bench_efficiency", "bench_rate", "bench_latency", "bench_fairness", "BENCH_PARTS",
           "default_plan", "bench"]


def build_rnic(config: RnicConfig, status=None):
    """The engine of ``config`` on Verilator in the fast top ``rnic_sim`` (:func:`rnic.sim.rtl.ensure_build`:
    a cached build, one per configuration, ``build/sim/rnic-sim-<config.key()>``). ``status(text)``
    gets its build message (default: none)."""
    from .rtl import ensure_build
    return ensure_build(config, fast=True, status=status or (lambda *a, **k: None))


#: Host memory (128 MiB) for up to 65 536 QPs: contexts from 1 MiB, 512-byte send queues (8 WQEs) from
#: 16 MiB, buffers from 48 MiB.
_MANY_QPS_MAP = MemoryMap(size=1 << 27, qpc_base=0x10_0000, cq_base=0x90_0000, cq_rings=0x91_0000,
                          cq_stride=0x2000, sq_rings=0x100_0000, sq_stride=0x200, buffers=0x300_0000)


def _beat_bytes(tb) -> int:
    return tb.width // 8


def _qpc_counters(tb) -> dict:
    """The QP context cache's counters (registers QPC_LOOKUPS ..) as the last run read them."""
    return {name: tb.regs.get(f"QPC_{name.upper()}") for name in COUNTER_NAMES}


#: The peer that sends the receive traffic of :func:`bench_rate` (``rx``).
_PEER_MAC, _PEER_GID = 0x02_00_00_00_00_63, 0xFFFF_C0A8_0063


def rx_frames(rng, qps: int, count: int, size: int = 64) -> list[bytes]:
    """``count`` UC SEND-only frames of ``size`` bytes from a peer to this engine's port (SGID entry 0 of
    the workloads) for QPs drawn at random from ``0 .. qps - 1``, with random PSNs. The bench's QPs are RC,
    so the responder looks each one's context up and drops it (WRONG_SERVICE): a receive stream that
    loads the QP context cache with random QPs and changes nothing else."""
    port = SGIDS[0]
    out = []
    for _ in range(count):
        desc = PacketDesc(mode=LinkMode.ROCEV2_IPV4, payload_len=size, dst_mac=port.mac, src_mac=_PEER_MAC,
                          src_gid=_PEER_GID, dst_gid=port.gid, opcode=Opcode.UC_SEND_ONLY, pkey=0xFFFF,
                          dest_qp=rng.randrange(qps), psn=rng.randrange(1 << 24),
                          udp_sport=0xC000 | rng.randrange(1 << 14))
        out.append(build_frame(normalize_desc(desc), rng.randbytes(size)))
    return out


async def _sends(tb, qps, size, mtu, messages, mem_latency, quota, rx=0):
    """Unsignaled RoCEv2 SENDs of ``size`` bytes posted round robin over ``qps`` QPs, every doorbell
    before ENABLE, host memory answering ``mem_latency`` clocks after each AR, sink always ready; with
    ``rx``, that many :func:`rx_frames` offered on ``s_axis`` back to back from ENABLE on.
    Returns the frame sizes in wire order and the :class:`FastFrameClock`."""
    # more QPs than the default memory map holds: one CQ for all (no CQEs are written), 1 KiB rings
    many = qps > DEFAULT_MAP.max_qps
    assert qps <= _MANY_QPS_MAP.max_qps, f"{qps} QPs: the memory map holds {_MANY_QPS_MAP.max_qps}"
    b = WorkloadBuilder(qps, ncqs=1 if many else qps, rng=tb.rng, quota=quota,
                        memory_map=_MANY_QPS_MAP if many else DEFAULT_MAP)
    for q in range(qps):
        if q == 0 or not many:
            b.cq(q)
        b.qp(q, mtu=PathMtu.of_bytes(mtu), mode=LinkMode.ROCEV2_IPV4, sgid_index=0, cqn=0 if many else q)
    for k in range(messages):
        b.post(k % qps, WqeOpcode.SEND, size, flags=WqeFlags(0))
    w = b.build()
    frames = []
    if rx:
        port = ResponderSettings(port=PortAddresses(SGIDS[0].mac, {SGIDS[0].gid}))   # SGID entry 0's addresses
        w.writes[-1:-1] = port.writes(e.gid for e in SGIDS)                         # before ENABLE
        frames = rx_frames(tb.rng, qps, rx, 64)
    watch = FastFrameClock(tb)
    model = await tb.run(w, fixed_latency=mem_latency, timeout=2_000_000 + 4 * (messages + rx) * (mem_latency + 50),
                         after_writes=lambda: [tb.bus.send_frame(f) for f in frames])
    return [len(p.frame()) for p in model.packets], watch


def _span(tb, sizes, watch, first=0):
    """Wire bytes and ideal beats of frames ``first``.., and the clocks from frame ``first``'s first
    beat to the last beat (both included)."""
    beat = _beat_bytes(tb)
    clocks = watch.beats[-1] - watch.starts[first] + 1
    return sum(sizes[first:]), sum(-(-n // beat) for n in sizes[first:]), clocks


async def bench_efficiency(tb, qps, size, mtu, messages, mem_latency, quota=16):
    """Unsignaled SENDs of ``size`` bytes, round robin over ``qps`` QPs; sink always ready.
    Efficiency = ideal beats (ceil(frame bytes / bytes per beat)) / clocks from the first beat to the
    last. A frame leaves only once its payload has arrived; ``idle_after_first_frame`` counts the idle
    clocks from the second frame's first beat on, ``frame_gaps`` the clocks inside frames without a
    beat (0: store and forward)."""
    sizes, watch = await _sends(tb, qps, size, mtu, messages, mem_latency, quota)
    wire, ideal, span = _span(tb, sizes, watch)
    starts = watch.starts
    later = [t for t in watch.beats if t >= starts[1]] if len(starts) > 1 else []
    idle_later = later[-1] - later[0] + 1 - len(later) if later else 0
    return {"qps": qps, "size": size, "mtu": mtu, "quota": quota, "messages": messages, "mem_latency": mem_latency,
            "frames": len(sizes), "wire_bytes": wire, "ideal_beats": ideal, "clocks": span,
            "efficiency": round(ideal / span, 4), "bytes_per_clock": round(wire / span, 3),
            "idle_after_first_frame": idle_later, "frame_gaps": len(watch.gaps), **watch.read_channel(mem_latency)}


async def bench_rate(tb, qps, messages, mem_latency, quota=1, size=64, mtu=4096, rx=0):
    """Message rate: ``messages`` SENDs of ``size`` bytes round robin over ``qps`` QPs, ``quota``
    packets per scheduler turn (1: every message is a turn with its own QP context lookup). The
    first round (one message per QP, the cache's cold misses) is warm-up: rate and efficiency count
    from the first beat of the second round to the last beat. ``qpc_*``: the cache's counters over
    the whole run. ``rx``: 64-byte frames for random QPs offered on ``s_axis`` at the same time
    (:func:`rx_frames`); ``rx_dropped``: those the responder looked up and dropped (all of them);
    ``run_clocks``: the register writes' end to idle, the frames in all taken."""
    sizes, watch = await _sends(tb, qps, size, mtu, messages, mem_latency, quota, rx)
    rx_dropped = await tb.read_reg("RESP_DROP_WRONG_SERVICE") if rx else 0
    assert rx_dropped == rx, f"{rx} frames in, {rx_dropped} dropped as WRONG_SERVICE"
    warmup = qps if len(sizes) > qps else 0
    wire, ideal, span = _span(tb, sizes, watch, warmup)
    counters = _qpc_counters(tb)
    return {"qps": qps, "size": size, "mtu": mtu, "quota": quota, "messages": messages, "mem_latency": mem_latency,
            "rx": rx, "rx_dropped": rx_dropped, "run_clocks": tb.clocks,
            "warmup_frames": warmup, "frames": len(sizes) - warmup, "wire_bytes": wire, "ideal_beats": ideal,
            "clocks": span, "msgs_per_kclk": round(1000 * (len(sizes) - warmup) / span, 2),
            "efficiency": round(ideal / span, 4), "bytes_per_clock": round(wire / span, 3),
            **{f"qpc_{k}": counters.get(k) for k in ("lookups", "hits", "misses")}, "frame_gaps": len(watch.gaps),
            **watch.read_channel(mem_latency, warmup)}


async def bench_latency(tb, mem_latency):
    """Doorbell (the DB_SQ_PI write's W handshake) to the first and to the last frame beat, for a QP
    whose context is not cached (first doorbell after reset) and for the same QP again (cached)."""
    b = WorkloadBuilder(1, rng=tb.rng)
    b.cq(0)
    b.qp(0, mtu=PathMtu.MTU_1024, sgid_index=0)
    b.post(0, WqeOpcode.SEND, 64, flags=WqeFlags(0))
    b.post(0, WqeOpcode.SEND, 64, flags=WqeFlags(0))
    w = b.build(doorbells=[])
    await tb.start(w.mem, latency=(0, 0), pause=0.0, sink_pause=0.0, fixed_latency=mem_latency)
    for offset, value in w.writes:                     # configuration, ENABLE = 1
        await tb.write_offset(offset, value)
    while not (await tb.read_reg("STATUS")) & 1:       # the engine's clear after reset is not timed
        await tb.wait_clocks(10)
    watch = FastFrameClock(tb)
    out = {"mem_latency": mem_latency}
    for name, pi in (("miss", 1), ("hit", 2)):
        await tb.write_offset(REG["DB_QPN"].offset, 0)
        t0 = tb.now()
        await tb.write_offset(REG["DB_SQ_PI"].offset, pi)
        while len(watch.ends) < pi:                    # the trace has each frame's first and last clock
            await tb.wait_clocks(10)
        out[f"doorbell_to_first_byte_{name}"] = watch.starts[-1] - t0
        out[f"doorbell_to_last_byte_{name}"] = watch.ends[-1] - t0
        while not (await tb.read_reg("STATUS")) & 1:
            await tb.wait_clocks(10)
    return out


async def bench_fairness(tb, qps, quota, mem_latency, long_len=65536, short_len=1024, shorts=64):
    """QP 0 posts one ``long_len`` SEND, QPs 1.. post ``shorts`` SENDs of ``short_len`` each, all
    before ENABLE; MTU 1024, sink always ready. Over the span in which every QP still has work
    (first frame to the frame that finishes the first QP to run dry): the largest lead in packets of
    one QP over another at any point (round robin bounds it by the quota), Jain's index over the
    QPs' wire bytes up to the last round boundary in the span (1 = equal shares), and the longest
    run of other QPs' packets between two packets of one QP (bounded by (QPs - 1) x quota)."""
    b = WorkloadBuilder(qps, rng=tb.rng, quota=quota)
    for q in range(qps):
        b.cq(q)
        b.qp(q, mtu=PathMtu.MTU_1024, mode=LinkMode.ROCEV2_IPV4, sgid_index=0)
    b.post(0, WqeOpcode.SEND, long_len, flags=WqeFlags(0))
    for k in range(shorts):
        for q in range(1, qps):
            b.post(q, WqeOpcode.SEND, short_len, flags=WqeFlags(0))
    w = b.build()
    watch = FastFrameClock(tb)
    model = await tb.run(w, fixed_latency=mem_latency)
    order = [p.qpn for p in model.packets]             # the RTL's frame order is the model's (checked)
    last_of = {q: max(i for i, x in enumerate(order) if x == q) for q in set(order)}
    span = order[:min(last_of.values()) + 1]           # every QP has work until the first runs dry
    counts, lead, rounds = [0] * qps, 0, 0
    for i, q in enumerate(span):
        counts[q] += 1
        lead = max(lead, max(counts) - min(counts))
        if len(set(counts)) == 1:
            rounds = i + 1                              # a round boundary: every QP has sent as many
    shares = [sum(len(model.packets[i].frame()) for i, x in enumerate(span[:rounds]) if x == q)
              for q in range(qps)]
    jain = sum(shares) ** 2 / (qps * sum(x * x for x in shares)) if rounds else 0.0
    worst = 0
    for q in range(qps):
        idx = [i for i, x in enumerate(span) if x == q]
        worst = max([worst] + [b2 - a - 1 for a, b2 in zip(idx, idx[1:])])
    return {"qps": qps, "quota": quota, "mtu": 1024, "mem_latency": mem_latency, "long_len": long_len,
            "short_len": short_len, "shorts": shorts,
            "frames_in_span": len(span), "clocks_in_span": watch.ends[len(span) - 1] - watch.starts[0] + 1,
            "jain": round(jain, 4), "frames_in_rounds": rounds, "max_lead_packets": lead,
            "max_wait_packets": worst,
            "bound_wait_packets": (qps - 1) * quota}


BENCH_PARTS = {"latency": bench_latency, "efficiency": bench_efficiency, "message": bench_efficiency,
               "rate": bench_rate, "fairness": bench_fairness}


def default_plan(parts):
    """The measurements of ``python -m rnic.sim.bench_engine`` for ``parts``."""
    plan = []
    if "latency" in parts:
        plan += [{"part": "latency", "mem_latency": lat} for lat in (1, 50, 500)]
    if "efficiency" in parts:
        plan += [{"part": "efficiency", "qps": qps, "size": size, "mtu": mtu, "messages": messages, "mem_latency": lat}
                 for lat in (1, 50, 500) for qps in (1, 16)
                 for size, mtu, messages in ((64, 1024, 64), (4096, 4096, 16), (4096, 1024, 16))]
    if "message" in parts:
        plan += [{"part": "message", "qps": 1, "size": 65536, "mtu": mtu, "messages": 1, "mem_latency": lat}
                 for lat in (1, 50, 500) for mtu in (256, 1024, 4096)]
    if "rate" in parts:
        plan += [{"part": "rate", "qps": 16, "quota": quota, "messages": messages, "mem_latency": 50}
                 for quota, messages in ((1, 240), (16, 1024))]
    if "fairness" in parts:
        plan += [{"part": "fairness", "qps": qps, "quota": quota, "mem_latency": 50, "shorts": 64 if qps == 4 else 8}
                 for qps, quota in ((4, 1), (4, 4), (4, 16), (16, 4))]
    return plan


@cocotb.test()
async def bench(dut):
    """Runs the measurements of RNIC_BENCH_PLAN (or RNIC_BENCH_PARTS) in order and writes the results,
    each with the clocks it simulated and its wall time, to RNIC_BENCH. On a failure (the RTL differs
    from the model, a timeout) the results so far and the error are written before it is raised."""
    import time
    tb = FastTB(dut, seed_from_env(1))
    if os.environ.get("RNIC_BENCH_PLAN"):
        plan = json.loads(Path(os.environ["RNIC_BENCH_PLAN"]).read_text())
    else:
        plan = default_plan(os.environ.get("RNIC_BENCH_PARTS", "latency,efficiency,message,rate,fairness").split(","))
    progress = os.environ.get("RNIC_BENCH_PROGRESS")
    results = {"width": tb.width} | {x["part"]: [] for x in plan}
    try:
        for x in plan:
            args = {k: v for k, v in x.items() if k != "part"}
            t0, c0 = time.perf_counter(), tb.now()
            try:
                r = await BENCH_PARTS[x["part"]](tb, **args)
            except Exception as err:
                message = str(err).split("\nassert ", 1)[0]     # without the rewritten assert's dump
                results["error"] = {"kind": type(err).__name__, "item": x, "message": message}
                raise
            r |= {"sim_clocks": tb.now() - c0, "wall_s": round(time.perf_counter() - t0, 3)}
            results[x["part"]].append(r)
            if progress:
                with open(progress, "a") as f:
                    f.write(json.dumps({"part": x["part"], **r}) + "\n")
    finally:
        results["total_clocks"] = tb.now()
        Path(os.environ["RNIC_BENCH"]).write_text(json.dumps(results, indent=1))
