"""cocotb testbench of the receive path (:class:`rnic.sim.rx_top.RxTop`: front end, payload writer, responder,
QP cache, completion writer) against the golden model (:class:`rnic.model.responder.Responder`).

Node B of :class:`rnic.sim.responder_pair.Pair` is the DUT: its host memory (QP context, MR table, receive
queue, CQs, resource slots) is loaded into the AXI RAM, and node A's requests reach both B's model and the
DUT. The requests are A's transmit model's frames (SEND, SEND with immediate, RDMA WRITE, WRITE with
immediate, RDMA READ; sizes 0, 1, below, at and above the MTU; unaligned addresses; PSNs near the 24-bit
wrap), atomics and UD SENDs built by hand. Each pair gets one kind of fault, in turn: none, a lossy link
(frames dropped, duplicated, swapped, corrupted, a bad FCS flag), bad keys, ranges and alignment, short
or badly keyed receive buffers, too few receive WQEs (RNR), bus errors on a whole region (the WRITE
target, the receive buffers, the receive queue), a receive CQ of two entries. Random memory latency, AXI
pauses, gaps in the frame stream and backpressure on the responses.

Checked after every pair: every response (descriptor, and the bytes a READ response's address holds when
it leaves), every byte of B's memory (payloads, CQEs, QP context after a QP cache FLUSH, MR table, slots),
every drop and responder counter, the engine counters the receive path adds to, and the error registers.
The last test prints what the run covered. Rerun with ``RNIC_SEED``.
"""

from __future__ import annotations

import collections
import os
import logging
import random
from pathlib import Path

import cocotb
import pytest
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSource

from rnic.model.descriptor import DESC_WIDTH, PacketDesc
from rnic.model.qpc import CtrlOp
from rnic.model.receive import DropReason
from rnic.model.responder import COUNT_NAMES, RxDrop
from rnic.sim import tb as sim_tb
from rnic.sim import toolchain
from rnic.sim.harness import HostRam
from rnic.sim.responder_cases import CASES, FAULTS, Case, memory_differs
from rnic.sim.responder_pair import CQ_BASE, MR_BASE, QPC_BASE, RES_BASE
from rnic.sim.rx_top import TOP_COUNTS, RxTop

STALL = int(os.environ.get("RNIC_STALL", 20_000))    # clocks without progress that count as a hang


def _fields(value, layout):
    value = int(value)
    return {name: value >> f.offset & ((1 << f.width) - 1) for name, f in layout}


COVERAGE = collections.Counter()    # (service, verdict kind) over every case of the run
ROUNDS = 4                          # fresh pairs per link mode and service, one DUT reset each


class TB:
    def __init__(self, dut, what: str, salt: int):
        self.dut = dut
        self.rng = random.Random(sim_tb.seed(dut, what=what) * 1009 + salt)
        self.started = False
        sim_tb.start_clock(dut)
        self.ram = HostRam(dut, self.rng)
        self.source = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis", bus_separator="__"), dut.clk, dut.rst)
        self.source.log.setLevel(logging.ERROR)
        self.resps = []
        self.sink = sim_tb.StreamSink(dut, "resp", on_transfer=self.take_resp, rng=self.rng)
        self.acks = []
        self.ack_sink = sim_tb.StreamSink(dut, "qpc_ack", on_transfer=self.acks.append, rng=self.rng)
        self.ctrl = sim_tb.StreamSource(dut, "qpc_ctrl", rng=self.rng, encode=lambda c: c[0] | c[1] << 2)

    def take_resp(self, raw):
        """A response: its descriptor and, for a READ response, the bytes its payload address holds now."""
        raw = int(raw)
        desc = PacketDesc.from_int(raw & (1 << DESC_WIDTH) - 1)
        self.resps.append((desc, self.ram.read(raw >> DESC_WIDTH, desc.payload_len) if desc.payload_len else b""))

    async def start(self, case: Case):
        dut, b = self.dut, case.pair.b
        dut.ib.value = int(not case.mode.is_ethernet)
        dut.mac.value, dut.lid.value = b.mac, b.lid
        dut.sgid_gid.value = b.gid
        dut.sgid_mac.value = b.mac
        dut.sgid_vlan.value = 0
        dut.sgid_valid.value = 1
        dut.qpc_base.value, dut.qpc_size.value = QPC_BASE, 16
        dut.cq_base.value, dut.cq_size.value = CQ_BASE, 4
        dut.mr_base.value, dut.mr_size.value, dut.res_base.value = MR_BASE, 16, RES_BASE
        self.ram.load(b.mem, latency=self.rng.choice([(0, 0), (0, 20), (10, 60)]), pause=self.rng.choice([0, 0.1, 0.3]))
        self.resps.clear()
        self.acks.clear()
        await sim_tb.reset(dut, 3, low=("s_axis__tvalid", "qpc_ctrl__valid"), before=1, after=2)
        self.sink.ready_p = self.rng.choice([1.0, 0.5])
        if not self.started:
            self.sink.start()
            self.ack_sink.start()
            self.ctrl.start()
            self.started = True
        sim_tb.set_pause(self.source, self.rng.choice([0, 0.2]), self.rng)

    async def run(self, case: Case):
        dut = self.dut
        b = case.pair.b
        before = {n: b.engine.regs[n.upper()] for n in TOP_COUNTS}
        for frame, fcs_bad in case.frames:
            b.resp.receive(frame, fcs_bad=fcs_bad)
        for frame, fcs_bad in case.frames:
            await self.source.send(AxiStreamFrame(frame, tuser=[0] * (len(frame) - 1) + [int(fcs_bad)]))
        n = len(case.frames)
        stall, last, clock = 0, None, 0
        while True:                     # done, or no progress (results, responder state) for STALL clocks
            await RisingEdge(dut.clk)
            clock += 1
            seen = int(dut.received.value) + sum(_fields_array(dut.stateless.value, 32, len(DropReason)))
            if seen == n and dut.idle.value:
                break
            now = (seen, int(dut.resp_state.value))
            stall = stall + 1 if now == last else 0
            last = now
            if stall > STALL:
                raise AssertionError(f"no progress for {STALL} clocks at clock {clock}: responder state {now[1]}, "
                                     f"{seen} of {n} results")
        await ClockCycles(dut.clk, 50)
        self.ctrl.send((CtrlOp.FLUSH, 0))
        while not self.acks:
            await RisingEdge(dut.clk)
        self.check(case, before)

    def check(self, case: Case, before):
        dut, b = self.dut, case.pair.b
        want = [(p.desc, p.payload) for p in b.resp.responses]
        got = self.resps
        verdicts = [str(v) for v in b.resp.verdicts]
        for i, (g, w) in enumerate(zip(got, want)):
            if g != w:
                fields = {k: (getattr(g[0], k), getattr(w[0], k)) for k in vars(w[0])
                          if getattr(g[0], k) != getattr(w[0], k)}
                raise AssertionError(f"response {i} (opcode 0x{w[0].opcode:02x} PSN {w[0].psn}): fields (RTL, model) "
                                     f"{fields}, payload {'equal' if g[1] == w[1] else 'differs'}\n"
                                     f"verdicts: {verdicts}")
        assert len(got) == len(want), f"{len(got)} responses, the model sent {len(want)}\nverdicts: {verdicts}"
        drops = _fields_array(dut.drops.value, 32, len(RxDrop))
        assert {r.name: drops[r] for r in RxDrop} == {r.name: b.resp.drops[r] for r in RxDrop}, verdicts
        counts = _fields(dut.counts.value, _count_layout())
        assert {k: counts[k] for k in COUNT_NAMES} == b.resp.counts, verdicts
        stateless = _fields_array(dut.stateless.value, 32, len(DropReason))
        assert {r.name: stateless[r] for r in DropReason} == {r.name: b.resp.stateless.dropped[r] for r in DropReason}
        engine = _fields(int(dut.engine_counts.value), _engine_layout())
        assert engine == {k: b.engine.regs[k.upper()] - before[k] for k in TOP_COUNTS}, verdicts
        assert (int(dut.err_status.value), int(dut.err_qpn.value), int(dut.err_info.value)) == (
            b.engine.regs["ERR_STATUS"], b.engine.regs["ERR_QPN"] if b.engine.regs["ERR_STATUS"] else 0,
            b.engine.regs["ERR_INFO"] if b.engine.regs["ERR_STATUS"] else 0), verdicts
        differs = memory_differs(self.ram, b.mem)
        assert not differs, f"B's {differs}\nverdicts: {verdicts}"
        self.dut._log.info("%d frames, %d responses: %s", len(case.frames), len(got),
                           {o: sum(1 for v in b.resp.verdicts if v.outcome.value == o)
                            for o in ("executed", "duplicate", "nak", "rnr", "dropped")})


def _kind(v):
    if v.outcome.value == "dropped":
        return f"dropped {v.reason.name}"
    if v.outcome.value in ("nak", "rnr"):
        return f"{v.outcome.value} 0x{v.syndrome:02x}"
    return v.outcome.value


def _fields_array(value, width, n):
    v = int(value)
    return [v >> (width * i) & ((1 << width) - 1) for i in range(n)]


def _count_layout():
    from amaranth.lib import data
    return data.StructLayout({k: 32 for k in COUNT_NAMES})


def _engine_layout():
    from amaranth.lib import data
    return data.StructLayout({k: 32 for k in TOP_COUNTS})


def _case_test(mode, service):
    async def body(dut):
        tb = TB(dut, f"responder {mode.slug} {service.name}", CASES.index((mode, service)))
        for r in range(ROUNDS):
            fault = FAULTS[(CASES.index((mode, service)) * ROUNDS + r) % len(FAULTS)]
            case = Case(tb.rng, mode, service, fault)
            await tb.start(case)
            await tb.run(case)
            for v in case.pair.b.resp.verdicts:
                COVERAGE[service.name, _kind(v)] += 1
    body.__name__ = body.__qualname__ = f"run_{mode.slug.replace('-', '_')}_{service.name.lower()}"
    return cocotb.test()(body)


for _mode, _service in CASES:
    globals()[f"run_{_mode.slug.replace('-', '_')}_{_service.name.lower()}"] = _case_test(_mode, _service)


@cocotb.test()
async def run_zz_coverage(dut):
    """What the cases of this run covered (they run in file order, so this one is last)."""
    for key, count in sorted(COVERAGE.items()):
        dut._log.info("%-3s %-40s %d", *key, count)
    kinds = {k for _, k in COVERAGE}
    assert all(COVERAGE[s, "executed"] for s in ("RC", "UC", "UD")), "a service executed nothing"
    assert len(kinds) >= 8, f"only {sorted(kinds)}"


@pytest.mark.parametrize("width", [64, pytest.param(512, marks=pytest.mark.slow)])
def test_rx_responder(width):
    seed = sim_tb.seed(None, None, what=f"test_rx_responder[{width}]")
    build = toolchain.build(lambda: RxTop(width, max_qps=16), "rx_top", f"rx-top-w{width}")
    toolchain.run(build, "test_rx_responder", seed=seed, test_dir=Path(__file__).parent)
