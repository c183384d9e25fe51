"""The cocotb side of :mod:`rnic.sim.bench_responder`: workloads on the whole engine (:class:`rnic.hdl.rnic.Rnic`,
configured through its registers), measured in clocks, every response frame checked against the model's byte
for byte. Writes ``$RNIC_BENCH`` (JSON)."""

from __future__ import annotations

import json
import os
import random

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiStreamFrame

from ..model.descriptor import LinkMode
from ..model.opcodes import Opcode
from ..model.qpc import ServiceType
from ..model.wqe import Wqe, WqeFlags, WqeOpcode
from . import tb as sim_tb
from .harness import EnginePorts
from .responder_pair import A_QPN, LOCAL_DATA, REMOTE_MR, Pair

MEMORY_LATENCY = 50
#: name -> (WQE opcode or UD, payload bytes, requests; SENDs at most the 32 receive WQEs of the ring)
WORKLOADS = {
    "SEND 64 B": (WqeOpcode.SEND, 64, 32),
    "WRITE 1 KiB": (WqeOpcode.RDMA_WRITE, 1024, 48),
    "WRITE 4 KiB (4 packets)": (WqeOpcode.RDMA_WRITE, 4096, 12),
    "READ 1 KiB": (WqeOpcode.RDMA_READ, 1024, 48),
    "READ 4 KiB (4 responses)": (WqeOpcode.RDMA_READ, 4096, 12),
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


class Bench(EnginePorts):
    def __init__(self, dut):
        self.dut = dut
        sim_tb.start_clock(dut)
        super().__init__(dut, random.Random(1))
        self.clock = 0
        self.starts: list[int] = []         # clock of each response frame's first beat
        self.beats: list[int] = []          # clock of every response beat
        cocotb.start_soon(self.watch())

    async def watch(self):
        d, in_frame = self.dut, False
        while True:
            await RisingEdge(d.clk)
            self.clock += 1
            if d.m_axis__tvalid.value and d.m_axis__tready.value:
                if not in_frame:
                    self.starts.append(self.clock)
                self.beats.append(self.clock)
                in_frame = not d.m_axis__tlast.value

    async def setup(self, pair: Pair):
        b = pair.b
        self.ram.load(b.mem, fixed_latency=MEMORY_LATENCY)
        await sim_tb.reset(self.dut, 4, low=("s_axis__tvalid",), after=2)
        for offset, value in b.settings.writes() + b.resp.settings.writes([e.gid for e in b.settings.sgids]):
            await self.axil.write_dword(offset, value)
        while not self.sink.empty():
            self.sink.recv_nowait()
        self.starts.clear()
        self.beats.clear()

    async def wait_done(self, accepted: int) -> int:
        """Poll until every frame is accepted and the engine idle; the clock it was seen (within 8)."""
        while not (await self.reg("RX_ACCEPTED") == accepted and await self.reg("STATUS") & 1):
            await ClockCycles(self.dut.clk, 8)
        return self.clock

    async def run(self, name, op, n, count) -> dict:
        pair = Pair(LinkMode.ROCEV2_IPV4, ServiceType.UD if op == "UD" else ServiceType.RC, mtu=1024)
        frames = _frames(pair, op, n, count)
        await self.setup(pair)                      # B's memory as it is before any request
        for f in frames:
            pair.b.resp.receive(f)
        want = [p.frame() for p in pair.b.resp.responses]
        dut = self.dut
        # one request alone: its last beat in -> its first response out
        await self.source.send(AxiStreamFrame(frames[0]))
        await self.source.wait()
        t_in = self.clock
        await self.wait_done(1)
        latency = self.starts[0] - t_in if self.starts else None
        first_resps = len(self.starts)
        # the rest back to back: clocks per request, how often the input was ready while offered, and
        # for READs the output's efficiency from the first response beat to the last
        offered = ready = 0
        t0 = self.clock
        for f in frames[1:]:
            await self.source.send(AxiStreamFrame(f))
        while not self.source.idle():
            await RisingEdge(dut.clk)
            offered += 1
            ready += int(dut.s_axis__tready.value)
        end = await self.wait_done(len(frames))
        beats = [c for c in self.beats if c >= (self.starts[first_resps] if len(self.starts) > first_resps else end)]
        end = max([end] + beats[-1:])
        clocks = end - t0
        await ClockCycles(dut.clk, 10)
        got = []
        while not self.sink.empty():
            got.append(bytes(self.sink.recv_nowait().tdata))
        if got != want:
            diff = next((i for i, (g, w) in enumerate(zip(got, want)) if g != w), min(len(got), len(want)))
            raise AssertionError(f"{name}: response frames differ from the model's from frame {diff} "
                                 f"({len(got)} sent, the model {len(want)})")
        out = {"workload": name, "packets": len(frames) - 1, "clocks": clocks,
               "clocks_per_packet": round(clocks / (len(frames) - 1), 1),
               "tready": round(ready / offered, 3) if offered else 1.0, "latency": latency}
        if op == WqeOpcode.RDMA_READ and beats:
            out["read_efficiency"] = round(len(beats) / (beats[-1] - beats[0] + 1), 3)
        return out


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
