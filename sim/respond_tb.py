"""The cocotb side of ``python -m rnic.sim respond``: a capture's frames one at a time into
:class:`rnic.sim.rx_top.RxTop` and into the model node of the scenario, each frame's outcome on both
(the RTL's read from its counters), the response frames, and host memory at the end. Reads the job from
``$RNIC_RESPOND`` (JSON: scenario, frames, out) and writes ``out`` (JSON)."""

from __future__ import annotations

import json
import logging
import os
import random

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSource

from ..model.descriptor import DESC_WIDTH, PacketDesc
from ..model.frames import build_frame
from ..model.pcap import read_pcap
from ..model.qpc import CtrlOp
from ..model.receive import DropReason
from ..model.responder import COUNT_NAMES, RxDrop
from . import tb as sim_tb
from .harness import HostRam
from .respond_scenario import load_respond_scenario

#: the RTL's outcome of a frame, from which counter moved
_KIND_OF_COUNT = {"executed": "executed", "duplicates": "duplicate", "naks": "nak", "rnr_naks": "rnr"}
STALL = 20_000


def model_kind(v) -> str:
    if v.outcome.value == "dropped":
        return f"dropped: {v.reason.name}"
    if v.outcome.value in ("nak", "rnr"):
        return f"{'NAK' if v.outcome.value == 'nak' else 'RNR NAK'} 0x{v.syndrome:02x}"
    return v.outcome.value


def _array(value, n):
    v = int(value)
    return [v >> (32 * i) & 0xFFFFFFFF for i in range(n)]


def _counts(dut):
    c = int(dut.counts.value)
    return {name: c >> (32 * i) & 0xFFFFFFFF for i, name in enumerate(COUNT_NAMES)}


@cocotb.test()
async def respond(dut):
    job = json.loads(open(os.environ["RNIC_RESPOND"]).read())
    node = load_respond_scenario(job["scenario"])
    _, frames = read_pcap(job["frames"])
    rng = random.Random(node.seed)
    sim_tb.start_clock(dut)
    ram = HostRam(dut, rng)
    source = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis", bus_separator="__"), dut.clk, dut.rst)
    source.log.setLevel(logging.ERROR)
    resps = []
    sink = sim_tb.StreamSink(dut, "resp", on_transfer=lambda raw: resps.append(
        _response(int(raw), ram)), rng=rng)
    acks = []
    ack_sink = sim_tb.StreamSink(dut, "qpc_ack", on_transfer=acks.append, rng=rng)
    ctrl = sim_tb.StreamSource(dut, "qpc_ctrl", rng=rng, encode=lambda c: c[0] | c[1] << 2)
    dut.ib.value, dut.mac.value, dut.lid.value = int(node.ib), node.mac, node.lid
    dut.sgid_gid.value = sum(g << (128 * k) for k, g in enumerate(node.gids))
    dut.sgid_mac.value = sum(node.mac << (48 * k) for k in range(len(node.gids)))
    dut.sgid_vlan.value, dut.sgid_valid.value = 0, (1 << len(node.gids)) - 1
    for name, value in node.settings().items():
        getattr(dut, name).value = value
    before = {p: bytes(c) for p, c in node.mem.pages.items()}
    ram.load(node.mem, fixed_latency=job.get("latency", 20))
    await sim_tb.reset(dut, 3, low=("s_axis__tvalid", "qpc_ctrl__valid"), before=1, after=2)
    sink.start()
    ack_sink.start()
    ctrl.start()

    results, mismatches = [], []
    model = node.responder
    for i, frame in enumerate(frames):
        verdict = model.receive(frame)
        stateless = _array(dut.stateless.value, len(DropReason))
        drops = _array(dut.drops.value, len(RxDrop))
        counts = _counts(dut)
        n_resp = len(resps)
        await source.send(AxiStreamFrame(frame))
        stall, last = 0, None
        while True:
            await RisingEdge(dut.clk)
            seen = int(dut.received.value) + sum(_array(dut.stateless.value, len(DropReason)))
            if seen == i + 1 and dut.idle.value:
                break
            now = (seen, int(dut.resp_state.value))
            stall = stall + 1 if now == last else 0
            last = now
            if stall > STALL:
                raise AssertionError(f"frame {i}: the receive path made no progress for {STALL} clocks")
        await ClockCycles(dut.clk, 4)
        rtl = _rtl_kind(stateless, _array(dut.stateless.value, len(DropReason)), drops,
                        _array(dut.drops.value, len(RxDrop)), counts, _counts(dut), resps[n_resp:])
        want = model_kind(verdict)
        results.append({"frame": i, "model": str(verdict), "rtl": rtl, "match": rtl == want})
        if rtl != want:
            mismatches.append(f"frame {i}: RTL {rtl}, model {want}")
    ctrl.send((CtrlOp.FLUSH, 0))
    while not acks:
        await RisingEdge(dut.clk)

    got = [(d, p) for d, p in resps]
    model_resp = [(r.desc, r.payload) for r in model.responses]
    for k, (g, w) in enumerate(zip(got, model_resp)):
        if g != w:
            mismatches.append(f"response {k}: the RTL's and the model's differ")
    if len(got) != len(model_resp):
        mismatches.append(f"{len(got)} responses from the RTL, {len(model_resp)} from the model")
    changed = []
    for page in sorted(set(node.mem.pages) | set(before)):
        old = before.get(page, bytes(4096))
        new_model, new_rtl = node.mem.peek(page * 4096, 4096), ram.read(page * 4096, 4096)
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
    out = {"results": results, "responses": [build_frame(d, p).hex() for d, p in model_resp],
           "modes": [int(d.mode) for d, _ in model_resp], "mismatches": mismatches, "changed": _merge(changed),
           "stateless": {r.name: n for r, n in model.stateless.dropped.items() if n},
           "drops": {r.name: n for r, n in model.drops.items() if n}, "counts": model.counts}
    with open(job["out"], "w") as f:
        json.dump(out, f)


def _response(raw: int, ram) -> tuple[PacketDesc, bytes]:
    desc = PacketDesc.from_int(raw & (1 << DESC_WIDTH) - 1)
    return desc, ram.read(raw >> DESC_WIDTH, desc.payload_len) if desc.payload_len else b""


def _rtl_kind(st0, st1, dr0, dr1, c0, c1, new_resps) -> str:
    for r in DropReason:
        if st1[r] != st0[r]:
            return f"dropped: {r.name}"
    for r in RxDrop:
        if dr1[r] != dr0[r]:
            return f"dropped: {r.name}"
    if c1["rnr_naks"] != c0["rnr_naks"] or c1["naks"] != c0["naks"]:
        d = new_resps[-1][0] if new_resps else None
        kind = "RNR NAK" if c1["rnr_naks"] != c0["rnr_naks"] else "NAK"
        return f"{kind} 0x{d.aeth_syndrome:02x}" if d is not None else kind
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
