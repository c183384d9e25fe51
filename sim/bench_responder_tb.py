"""The cocotb side of :mod:`rnic.sim.bench_responder`: workloads on :class:`rnic.sim.rx_top.RxTop`, measured
in clocks, every response checked against the model. Writes ``$RNIC_BENCH`` (JSON)."""

from __future__ import annotations

import json
import logging
import os
import random

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSource

from ..model.descriptor import DESC_WIDTH, LinkMode, PacketDesc
from ..model.opcodes import Opcode
from ..model.qpc import ServiceType
from ..model.wqe import Wqe, WqeFlags, WqeOpcode
from . import tb as sim_tb
from .harness import HostRam
from .responder_pair import A_QPN, CQ_BASE, LOCAL_DATA, MR_BASE, QPC_BASE, REMOTE_MR, RES_BASE, Pair

MEMORY_LATENCY = 50
#: name -> (WQE opcode or UD, payload bytes, requests; SENDs at most the 32 receive WQEs of the ring)
WORKLOADS = {
    "SEND 64 B": (WqeOpcode.SEND, 64, 32),
    "WRITE 1 KiB": (WqeOpcode.RDMA_WRITE, 1024, 48),
    "WRITE 4 KiB (4 packets)": (WqeOpcode.RDMA_WRITE, 4096, 12),
    "READ 1 KiB": (WqeOpcode.RDMA_READ, 1024, 48),
    "UD SEND 64 B": ("UD", 64, 32),
}


def _frames(pair: Pair, op, n: int, count: int) -> list[bytes]:
    if op == "UD":
        for k in range(count):
            pair.post_recv(k, 256, offset=0x200 * k)
        return [pair.frame(Opcode.UD_SEND_ONLY, k, bytes(n)) for k in range(count)]
    pair.a.mem.poke(LOCAL_DATA, bytes(range(256)) * (n // 256 + 1))
    frames = []
    for k in range(count):
        if op == WqeOpcode.SEND:
            pair.post_recv(k, 256, offset=0x200 * k)
        start = len(pair.a.engine.packets)
        pi = pair.a.driver.post(A_QPN, Wqe(opcode=op, length=n, local_addr=LOCAL_DATA, rkey=pair.rkey,
                                           remote_addr=REMOTE_MR[2] + (k * n) % (REMOTE_MR[3] - n),
                                           flags=WqeFlags.SIGNALED))
        pair.a.driver.ring(A_QPN, pi)
        pair.a.engine.run()
        frames += [p.frame() for p in pair.a.engine.packets[start:]]
    return frames


def _diff(got, want) -> dict:
    return {k: (getattr(got, k), v) for k, v in vars(want).items() if getattr(got, k) != v}


class Bench:
    def __init__(self, dut):
        self.dut = dut
        sim_tb.start_clock(dut)
        self.ram = HostRam(dut, random.Random(1))
        self.source = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis", bus_separator="__"), dut.clk, dut.rst)
        self.source.log.setLevel(logging.ERROR)
        self.resps = []
        self.sink = sim_tb.StreamSink(dut, "resp", on_transfer=self.on_resp, rng=random.Random(1))
        self.clock = 0
        self.started = False

    def on_resp(self, raw):
        self.resps.append((self.clock, PacketDesc.from_int(int(raw) & (1 << DESC_WIDTH) - 1)))

    async def count(self):
        while True:
            await RisingEdge(self.dut.clk)
            self.clock += 1

    async def setup(self, pair: Pair):
        dut, b = self.dut, pair.b
        dut.ib.value = 0
        dut.mac.value, dut.lid.value = b.mac, b.lid
        dut.sgid_gid.value, dut.sgid_mac.value, dut.sgid_vlan.value, dut.sgid_valid.value = b.gid, b.mac, 0, 1
        dut.qpc_base.value, dut.qpc_size.value = QPC_BASE, 16
        dut.cq_base.value, dut.cq_size.value = CQ_BASE, 4
        dut.mr_base.value, dut.mr_size.value, dut.res_base.value = MR_BASE, 16, RES_BASE
        self.ram.load(b.mem, fixed_latency=MEMORY_LATENCY)
        self.resps.clear()
        await sim_tb.reset(dut, 3, low=("s_axis__tvalid", "qpc_ctrl__valid"), before=1, after=2)
        if not self.started:
            self.sink.start()
            cocotb.start_soon(self.count())
            self.started = True

    async def run(self, name, op, n, count) -> dict:
        pair = Pair(LinkMode.ROCEV2_IPV4, ServiceType.UD if op == "UD" else ServiceType.RC, mtu=1024)
        frames = _frames(pair, op, n, count)
        await self.setup(pair)                      # B's memory as it is before any request
        for f in frames:
            pair.b.resp.receive(f)
        want = [p.desc for p in pair.b.resp.responses]
        dut = self.dut
        # one request alone: its last beat in -> its first response out
        lone = frames[0]
        await self.source.send(AxiStreamFrame(lone))
        await self.source.wait()
        t_in = self.clock
        while not self.resps and not (dut.idle.value and self.clock - t_in > 5 * MEMORY_LATENCY * 10):
            await RisingEdge(dut.clk)
        latency = self.resps[0][0] - t_in if self.resps else None
        while not dut.idle.value:
            await RisingEdge(dut.clk)
        # the rest back to back: clocks per request and how often the input was ready while offered
        offered = ready = 0
        t0 = self.clock
        for f in frames[1:]:
            await self.source.send(AxiStreamFrame(f))
        while not self.source.idle():
            await RisingEdge(dut.clk)
            offered += 1
            ready += int(dut.s_axis__tready.value)
        seen = 0
        while not (seen == len(frames) and dut.idle.value):
            await RisingEdge(dut.clk)
            seen = int(dut.received.value)
        clocks = self.clock - t0
        await ClockCycles(dut.clk, 10)              # the response sink sees the last handshake a clock late
        got = [d for _, d in self.resps]
        if got != want:
            diff = next((i for i, (g, w) in enumerate(zip(got, want)) if g != w), min(len(got), len(want)))
            raise AssertionError(f"{name}: responses differ from the model's from response {diff} "
                                 f"({len(got)} sent, the model {len(want)}): "
                                 f"{_diff(got[diff], want[diff]) if diff < min(len(got), len(want)) else ''}")
        return {"workload": name, "packets": len(frames) - 1, "clocks": clocks,
                "clocks_per_packet": round(clocks / (len(frames) - 1), 1),
                "tready": round(ready / offered, 3) if offered else 1.0,
                "latency": latency}


@cocotb.test()
async def bench(dut):
    b = Bench(dut)
    names = os.environ.get("RNIC_BENCH_WORKLOADS")
    results = []
    for name, (op, n, count) in WORKLOADS.items():
        if names and name not in names.split(","):
            continue
        results.append(await b.run(name, op, n, count))
        dut._log.info("%s", results[-1])
    out = os.environ.get("RNIC_BENCH")
    if out:
        with open(out, "w") as f:
            json.dump({"width": len(dut.s_axis__tdata), "memory_latency": MEMORY_LATENCY, "results": results}, f)
