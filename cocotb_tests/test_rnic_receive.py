"""cocotb testbench of the receive path inside the whole engine (:class:`rnic.hdl.rnic.Rnic`) against the
golden model.

Node B of :class:`rnic.sim.responder_pair.Pair` is the DUT, configured only through its registers
(the engine's settings and the receive path's: MR_BASE, MR_SIZE, RES_BASE, PORT_MAC, PORT_MODE,
PORT_GIDS, the SGID table) and posting its receive WQEs through ``DB_RQ_PI`` (with some faults, bad
doorbells too: a QPN beyond QPC_SIZE, a QP in RESET, a producer index past the ring), its host memory in
an AXI RAM. The frames of
:class:`rnic.sim.responder_cases.Case` (node A's requests, one kind of fault per case) go into ``s_axis``;
the responses leave on ``m_axis`` through the engine's packet builder, READ response payloads through its
payload reader, receive CQEs through the completion writer it shares with the transmit side, contexts
through the QP context cache it shares.

Checked after every case: every response frame byte for byte, in order; every byte of B's memory (after
a QPC_CMD FLUSH); every receive counter register (``RX_*``, ``RESP_*``) and the engine counters the
receive path adds to; the error registers. Rerun with ``RNIC_SEED``; ``RNIC_ROUNDS`` cases per link mode
and service (default 1).
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from types import SimpleNamespace

import cocotb
import pytest
from cocotb.triggers import ClockCycles
from cocotbext.axi import AxiStreamFrame

from rnic.model.config import RnicConfig
from rnic.model.descriptor import LinkMode
from rnic.model.opcodes import Opcode
from rnic.model.qpc import CtrlOp, ServiceType
from rnic.model.regs import REG, RX_COUNTERS
from rnic.sim import tb as sim_tb
from rnic.sim.harness import EnginePorts
from rnic.sim.responder_cases import CASES, FAULTS, Case, memory_differs
from rnic.sim.responder_pair import A_QPN, REMOTE_MR, Pair
from rnic.sim.toolchain import seed_from_env

STALL = int(os.environ.get("RNIC_STALL", 20_000))     # clocks without progress that count as a hang
ROUNDS = int(os.environ.get("RNIC_ROUNDS", "1"))
#: Engine counters the receive path adds to (the others stay at reset here: B transmits no request).
ENGINE_COUNTERS = ("PKT_COUNT", "BYTE_COUNT", "CQE_COUNT", "CQE_DROPS", "WQE_ERRORS", "FLUSH_COUNT", "BUS_ERRORS",
                   "DB_ERRORS")
ERR_REGS = ("ERR_STATUS", "ERR_QPN", "ERR_INFO")


class TB(EnginePorts):
    def __init__(self, dut, seed: int):
        self.dut = dut
        self.rng = random.Random(seed)
        dut._log.info("seed %d (rerun with RNIC_SEED=%d)", seed, seed)
        sim_tb.start_clock(dut)
        super().__init__(dut, self.rng)

    async def start(self, case: Case):
        b = case.pair.b
        self.ram.load(b.mem, latency=self.rng.choice([(0, 0), (0, 20), (10, 60)]), pause=self.rng.choice([0, 0.1, 0.3]))
        sim_tb.set_pause(self.sink, self.rng.choice([0, 0.3]), self.rng)
        sim_tb.set_pause(self.source, self.rng.choice([0, 0.2]), self.rng)
        await sim_tb.reset(self.dut, 4, low=("s_axis__tvalid",), after=2)
        while not self.sink.empty():
            self.sink.recv_nowait()
        for offset, value in b.settings.writes() + b.resp.settings.writes([e.gid for e in b.settings.sgids]):
            await self.axil.write_dword(offset, value)

    async def run(self, case: Case):
        dut, b = self.dut, case.pair.b
        before = {n: b.engine.regs[n] for n in ENGINE_COUNTERS + tuple(n for n, _ in RX_COUNTERS)}
        for qpn, pi in self.doorbells(case):
            b.resp.rq_doorbell(qpn, pi)
            await self.axil.write_dword(REG["DB_QPN"].offset, qpn)
            await self.axil.write_dword(REG["DB_RQ_PI"].offset, pi)
        for frame, fcs_bad in case.frames:
            b.resp.receive(frame, fcs_bad=fcs_bad)
        for frame, fcs_bad in case.frames:
            await self.source.send(AxiStreamFrame(frame, tuser=[0] * (len(frame) - 1) + [int(fcs_bad)]))
        n = len(case.frames)
        want = [p.frame() for p in b.resp.responses]
        stateless = [name for name, _ in RX_COUNTERS[1:12]]
        last, still = None, 0
        while True:                 # every frame judged, the engine idle and the responses out
            await ClockCycles(dut.clk, 100)
            seen = await self.reg("RX_ACCEPTED") + sum([await self.reg(r) for r in stateless])
            status = await self.reg("STATUS")
            if seen == n and status & 1 and self.sink.count() >= len(want):
                break
            now = (seen, self.sink.count())
            still = still + 100 if now == last else 0
            last = now
            if still > STALL:
                raise AssertionError(f"no progress for {STALL} clocks: {seen} of {n} frames judged, "
                                     f"{self.sink.count()} of {len(want)} responses")
        await ClockCycles(dut.clk, 50)
        await self.axil.write_dword(REG["QPC_CMD"].offset, CtrlOp.FLUSH)
        while await self.reg("QPC_CMD_STATUS") & 1:
            await ClockCycles(dut.clk, 20)
        self.check(case, want, before, await self.registers())

    def doorbells(self, case: Case):
        """B's receive-queue doorbells, and with some faults bad ones: a QPN beyond QPC_SIZE, a QP in RESET
        (refused: an error CQE), B's QP run past its ring (refused: B's QP to ERROR, its RQ flushed)."""
        out = list(case.pair.deferred)
        rng = self.rng
        if case.fault in ("rnr", "cq"):
            out.insert(rng.randrange(len(out) + 1), (40, 1))
            out.insert(rng.randrange(len(out) + 1), (5, rng.randrange(1 << 16)))
        if case.fault == "buffers" and out and rng.random() < 0.5:
            k = rng.randrange(len(out))
            out.insert(k + 1, (out[k][0], (out[k][1] + 40) & 0xFFFF))
        return out

    async def registers(self):
        names = ENGINE_COUNTERS + ERR_REGS + tuple(n for n, _ in RX_COUNTERS)
        return {n: await self.reg(n) for n in names}

    def check(self, case: Case, want, before, regs):
        b = case.pair.b
        verdicts = [str(v) for v in b.resp.verdicts]
        got = []
        while not self.sink.empty():
            f = self.sink.recv_nowait()
            assert not any(f.tuser or [0]), f"response frame {len(got)} aborted\nverdicts: {verdicts}"
            got.append(bytes(f.tdata))
        for i, (g, w) in enumerate(zip(got, want)):
            if g != w:
                at = next((k for k in range(min(len(g), len(w))) if g[k] != w[k]), min(len(g), len(w)))
                raise AssertionError(f"response frame {i} of {len(want)} differs at byte {at} (lengths {len(g)}, "
                                     f"{len(w)})\nRTL   {g.hex()}\nmodel {w.hex()}\nverdicts: {verdicts}")
        assert len(got) == len(want), f"{len(got)} response frames, the model sent {len(want)}\nverdicts: {verdicts}"
        model = {n: (b.engine.regs[n] - before[n]) & 0xFFFF_FFFF if n in before else b.engine.regs[n] for n in regs}
        if not b.engine.regs["ERR_STATUS"]:
            model["ERR_QPN"] = model["ERR_INFO"] = 0
        diff = {n: (regs[n], model[n]) for n in regs if regs[n] != model[n]}
        assert not diff, f"registers (RTL, model): {diff}\nverdicts: {verdicts}"
        differs = memory_differs(self.ram, b.mem)
        assert not differs, f"B's {differs}\nverdicts: {verdicts}"
        self.dut._log.info("%s %s %s: %d frames, %d responses", case.mode.slug, case.service.name, case.fault,
                           len(case.frames), len(got))


@cocotb.test()
async def test_receive(dut):
    """Every link mode x service, ``RNIC_ROUNDS`` fresh pairs each, the faults in turn."""
    seed = seed_from_env(1)
    tb = TB(dut, seed)
    k = 0
    for r in range(ROUNDS):
        for mode, service in CASES:
            fault = FAULTS[(k + seed) % len(FAULTS)]
            k += 1
            case = Case(tb.rng, mode, service, fault, defer_doorbells=True)
            await tb.start(case)
            await tb.run(case)


@cocotb.test()
async def test_scapy_requests(dut):
    """Frames this project did not build: RC requests from scapy (BTH, IP and UDP from scapy, RETH and
    AtomicETH packed with struct, scapy's ICRC) on RoCEv2 over IPv4 and IPv6: WRITE, SEND with immediate,
    READ, FETCH_ADD, CMP_SWAP, then the same WRITE again (a duplicate) and one with a bad R_Key."""
    from rnic.sim.scapy_frames import scapy_frame
    tb = TB(dut, seed_from_env(1))
    for mode in (LinkMode.ROCEV2_IPV4, LinkMode.ROCEV2_IPV6):
        pair = Pair(mode, ServiceType.RC, mtu=1024)
        pair.deferred = []
        pair.post_recv(1, 256)
        ctx = pair.a.driver.qp(A_QPN)
        va = REMOTE_MR[2] + 0x80
        pair.b.mem.poke(pair.remote(va + 64), tb.rng.randbytes(16))
        old = int.from_bytes(pair.b.mem.peek(pair.remote(va + 72), 8), "little")
        requests = [
            (Opcode.RC_RDMA_WRITE_ONLY, 100, b"scapy-write!", dict(reth_va=va, reth_rkey=pair.rkey, reth_dma_len=12)),
            (Opcode.RC_SEND_ONLY_WITH_IMMEDIATE, 101, b"scapy send", dict(imm=0x1234)),
            (Opcode.RC_RDMA_READ_REQUEST, 102, b"", dict(reth_va=va, reth_rkey=pair.rkey, reth_dma_len=1500)),
            (Opcode.RC_FETCH_ADD, 104, b"", dict(atomic_va=va + 64, atomic_rkey=pair.rkey, atomic_swap=3)),
            (Opcode.RC_COMPARE_SWAP, 105, b"", dict(atomic_va=va + 72, atomic_rkey=pair.rkey, atomic_swap=7,
                                                     atomic_compare=old)),
            (Opcode.RC_RDMA_WRITE_ONLY, 100, b"scapy-write!", dict(reth_va=va, reth_rkey=pair.rkey, reth_dma_len=12)),
            (Opcode.RC_RDMA_WRITE_ONLY, 106, b"refused", dict(reth_va=va, reth_rkey=pair.rkey ^ 1, reth_dma_len=7)),
        ]
        frames = []
        for opcode, psn, payload, extra in requests:
            desc = pair.a.engine.path_desc(ctx, psn, opcode, payload_len=len(payload), ackreq=1, **extra)
            frames.append((scapy_frame(desc, payload), False))
        case = SimpleNamespace(pair=pair, frames=frames, fault="none", mode=mode, service=ServiceType.RC)
        await tb.start(case)
        await tb.run(case)
        outcomes = [v.outcome.value for v in pair.b.resp.verdicts]
        assert outcomes == ["executed"] * 5 + ["duplicate", "nak"], outcomes


# --- pytest side -------------------------------------------------------------------------------------

def _run(config):
    from rnic.sim.rtl import ensure_build
    from rnic.sim.toolchain import run
    run(ensure_build(config, fast=False), "test_rnic_receive", seed=seed_from_env(),
        test_dir=Path(__file__).resolve().parent, extra_env=config.env())


def test_rnic_receive():
    _run(RnicConfig())


@pytest.mark.slow
def test_rnic_receive_one_mshr():
    """The receive path's and the engine's lookups through a QP context cache with one MSHR (the default
    is four)."""
    _run(RnicConfig().replace(qpc={"mshrs": 1}))
