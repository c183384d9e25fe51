"""The cocotb side of ``python -m rnic.sim respond``: a capture's frames one at a time into the whole engine
(:class:`rnic.hdl.rnic.Rnic`, configured through its registers as the scenario says) and into the model node
of the scenario, each frame's outcome on both (the RTL's read from its counter registers), the response
frames the engine sends, and host memory at the end. Reads the job from ``$RNIC_RESPOND`` (JSON: scenario,
frames, out) and writes ``out`` (JSON)."""

from __future__ import annotations

import json
import os
import random

import cocotb
from cocotb.triggers import ClockCycles
from cocotbext.axi import AxiStreamFrame

from ..model.frames import parse_frame
from ..model.pcap import read_pcap
from ..model.qpc import CtrlOp
from ..model.receive import DropReason
from ..model.regs import REG, RX_COUNTERS
from ..model.responder import COUNT_NAMES, RxDrop
from . import tb as sim_tb
from .harness import EnginePorts
from .respond_scenario import load_respond_scenario

#: the RTL's outcome of a frame, from which counter moved
_KIND_OF_COUNT = {"executed": "executed", "duplicates": "duplicate", "naks": "nak", "rnr_naks": "rnr"}
_NAMES = [name for name, _ in RX_COUNTERS if not name.startswith("REQ_")]     # the responder's
STALL = 20_000


def model_kind(v) -> str:
    if v.outcome.value == "dropped":
        return f"dropped: {v.reason.name}"
    if v.outcome.value in ("nak", "rnr"):
        return f"{'NAK' if v.outcome.value == 'nak' else 'RNR NAK'} 0x{v.syndrome:02x}"
    return v.outcome.value


class _Dut(EnginePorts):
    async def counters(self):
        """The receive counters: stateless drops, responder drops, responder events."""
        v = {n: await self.reg(n) for n in _NAMES}
        return ([v["RX_" + r.name] for r in DropReason], [v["RESP_DROP_" + r.name] for r in RxDrop],
                {n: v["RESP_" + n.upper()] for n in COUNT_NAMES}, v["RX_ACCEPTED"] + sum(v["RX_" + r.name] for r in DropReason))


@cocotb.test()
async def respond(dut):
    job = json.loads(open(os.environ["RNIC_RESPOND"]).read())
    node = load_respond_scenario(job["scenario"])
    _, frames = read_pcap(job["frames"])
    sim_tb.start_clock(dut)
    t = _Dut(dut, random.Random(node.seed))
    before = {p: bytes(c) for p, c in node.mem.pages.items()}
    t.ram.load(node.mem, fixed_latency=job.get("latency", 20))
    await sim_tb.reset(dut, 4, low=("s_axis__tvalid",), after=2)
    for offset, value in node.writes():
        await t.axil.write_dword(offset, value)

    results, mismatches, got = [], [], []
    model = node.responder
    for i, frame in enumerate(frames):
        verdict = model.receive(frame)
        st0, dr0, c0, _ = await t.counters()
        await t.source.send(AxiStreamFrame(frame))
        waited, last = 0, None
        while True:
            await ClockCycles(dut.clk, 20)
            st1, dr1, c1, seen = await t.counters()
            if seen == i + 1 and await t.reg("STATUS") & 1:
                st1, dr1, c1, seen = await t.counters()     # read again once idle: the first read may be older
                break
            waited = waited + 20 if (seen, c1) == last else 0
            last = (seen, c1)
            if waited > STALL:
                raise AssertionError(f"frame {i}: the engine made no progress for {STALL} clocks")
        new = []
        while not t.sink.empty():
            new.append(bytes(t.sink.recv_nowait().tdata))
        modes = [r.desc.mode for r in model.responses[len(got):]]
        got += new
        rtl = _rtl_kind(st0, st1, dr0, dr1, c0, c1, new, modes)
        want = model_kind(verdict)
        results.append({"frame": i, "model": str(verdict), "rtl": rtl, "match": rtl == want})
        if rtl != want:
            mismatches.append(f"frame {i}: RTL {rtl}, model {want}")
    await t.axil.write_dword(REG["QPC_CMD"].offset, CtrlOp.FLUSH)
    while await t.reg("QPC_CMD_STATUS") & 1:
        await ClockCycles(dut.clk, 20)

    want_frames = [r.frame() for r in model.responses]
    for k, (g, w) in enumerate(zip(got, want_frames)):
        if g != w:
            mismatches.append(f"response {k}: the engine's frame and the model's differ")
    if len(got) != len(want_frames):
        mismatches.append(f"{len(got)} response frames from the engine, {len(want_frames)} from the model")
    changed = []
    for page in sorted(set(node.mem.pages) | set(before)):
        old = before.get(page, bytes(4096))
        new_model, new_rtl = node.mem.peek(page * 4096, 4096), t.ram.read(page * 4096, 4096)
        if new_model != new_rtl:
            k = next(j for j in range(4096) if new_model[j] != new_rtl[j])
            mismatches.append(f"host memory differs at 0x{page * 4096 + k:x}")
        j = 0
        while j < 4096:
            if new_model[j] != old[j]:
                e = j
                while e < 4096 and new_model[e] != old[e]:
                    e += 1
                changed.append([page * 4096 + j, e - j])
                j = e
            else:
                j += 1
    # the pcap gets the engine's own frames (where they differ from the model's, a mismatch says so)
    modes = [int(r.desc.mode) for r in model.responses]
    modes += [modes[-1] if modes else 0] * (len(got) - len(modes))
    out = {"results": results, "responses": [f.hex() for f in got], "modes": modes[:len(got)],
           "mismatches": mismatches, "changed": _merge(changed),
           "stateless": {r.name: n for r, n in model.stateless.dropped.items() if n},
           "drops": {r.name: n for r, n in model.drops.items() if n}, "counts": model.counts}
    with open(job["out"], "w") as f:
        json.dump(out, f)


def _rtl_kind(st0, st1, dr0, dr1, c0, c1, new_frames, modes) -> str:
    for r in DropReason:
        if st1[r] != st0[r]:
            return f"dropped: {r.name}"
    for r in RxDrop:
        if dr1[r] != dr0[r]:
            return f"dropped: {r.name}"
    if c1["rnr_naks"] != c0["rnr_naks"] or c1["naks"] != c0["naks"]:
        kind = "RNR NAK" if c1["rnr_naks"] != c0["rnr_naks"] else "NAK"
        if new_frames and modes:
            try:
                return f"{kind} 0x{parse_frame(modes[len(new_frames) - 1], new_frames[-1])[0].aeth_syndrome:02x}"
            except (ValueError, IndexError):
                pass
        return kind
    for name in ("duplicates", "executed"):
        if c1[name] != c0[name]:
            return _KIND_OF_COUNT[name]
    return "nothing"


def _merge(ranges, gap: int = 32):
    """Changed byte ranges, joined where less than ``gap`` unchanged bytes separate them."""
    out = []
    for a, n in ranges:
        if out and a - (out[-1][0] + out[-1][1]) < gap:
            out[-1][1] = a + n - out[-1][0]
        else:
            out.append([a, n])
    return out
