"""``python -m rnic.sim.bench_rx``: the receive front end's latency and input rate, measured in Amaranth's
simulator (no Verilator build), every result checked against the model.

For each width: the clocks from a lone frame's last beat to its result (``m_result.valid``), and for
back-to-back frames of a few kinds offered on every clock (the result output always ready), the fraction
of clocks on which ``s_axis.tready`` was high. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import random
import sys

from amaranth.sim import Simulator

from ..hdl.receive.front_end import RxFrontEnd
from ..model.descriptor import LinkMode, PacketDesc
from ..model.frames import build_frame
from ..model.opcodes import Opcode
from ..model.receive import Received, classify
from .rx_stimulus import PORT_GID, PORT_LID, PORT_MAC, port_for_link

__all__ = ["WORKLOADS", "measure", "main"]

#: name -> (link mode, opcode, payload bytes)
WORKLOADS = {
    "SEND 64 B (RoCEv2/IPv4)": (LinkMode.ROCEV2_IPV4, Opcode.RC_SEND_ONLY, 64),
    "WRITE MIDDLE 1024 B (RoCEv2/IPv4)": (LinkMode.ROCEV2_IPV4, Opcode.RC_RDMA_WRITE_MIDDLE, 1024),
    "WRITE MIDDLE 4096 B (RoCEv2/IPv6)": (LinkMode.ROCEV2_IPV6, Opcode.RC_RDMA_WRITE_MIDDLE, 4096),
    "SEND 64 B (IB local)": (LinkMode.IB_LOCAL, Opcode.RC_SEND_ONLY, 64),
}


def _frame(mode, opcode, n, psn):
    desc = PacketDesc(mode=mode, opcode=opcode, payload_len=n, dst_mac=PORT_MAC, dlid=PORT_LID, psn=psn,
                      dst_gid=PORT_GID if mode is not LinkMode.ROCEV2_IPV4 else 0xC0A8_0002, dest_qp=5)
    return build_frame(desc, bytes(random.Random(psn).randbytes(n)))


def _set_port(ctx, dut, port, link: str) -> None:
    ctx.set(dut.ib, link == "ib")
    ctx.set(dut.mac, port.mac)
    ctx.set(dut.lid, port.lid)
    for k, g in enumerate(sorted(port.gids)):
        ctx.set(dut.gids[k], g)
    ctx.set(dut.gid_valid, (1 << len(port.gids)) - 1)


async def _send(ctx, dut, frame: bytes, stats: dict) -> None:
    """Offer ``frame`` beat by beat from the next clock on, counting clocks offered and clocks ready."""
    lanes = len(dut.s_axis.tkeep)
    beats = [frame[i:i + lanes] for i in range(0, len(frame), lanes)]
    for i, beat in enumerate(beats):
        ctx.set(dut.s_axis.tdata, int.from_bytes(beat.ljust(lanes, b"\0"), "little"))
        ctx.set(dut.s_axis.tkeep, (1 << len(beat)) - 1)
        ctx.set(dut.s_axis.tlast, i == len(beats) - 1)
        ctx.set(dut.s_axis.tvalid, 1)
        while True:
            ready = ctx.get(dut.s_axis.tready)
            stats["offered"] += 1
            stats["ready"] += ready
            await ctx.tick()
            if ready:
                break


def measure(width: int, frames: list[bytes], link: str) -> tuple[int, float]:
    """``(clocks, tready fraction)``: the clocks the frames took to go in back to back, and the fraction of
    clocks with tready high while a beat was offered. Raises AssertionError on a result the model disagrees
    with."""
    port = port_for_link(link)
    dut = RxFrontEnd(width, n_gids=4)
    lanes = width // 8
    results, stats = [], {"offered": 0, "ready": 0}

    async def source(ctx):
        _set_port(ctx, dut, port, link)
        for frame in frames:
            await _send(ctx, dut, frame, stats)
        ctx.set(dut.s_axis.tvalid, 0)

    async def sink(ctx):
        ctx.set(dut.m_result.ready, 1)
        while len(results) < len(frames):
            await ctx.tick()
            if ctx.get(dut.m_result.valid):
                results.append(ctx.get(dut.m_result.payload))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(source)
    sim.add_testbench(sink)
    sim.run_until(1e-8 * (sum(len(f) // lanes + 2 for f in frames) * 4 + 500))
    assert len(results) == len(frames), f"{len(results)} results for {len(frames)} frames"
    for frame, res in zip(frames, results):
        want = classify(frame, fcs_bad=False, port=port, link=link)
        assert isinstance(want, Received) and res.ok and \
            PacketDesc.from_int(res.desc.as_value().value) == want.desc, "result differs from the model"
    return stats["offered"], stats["ready"] / stats["offered"]


def latency(width: int, sizes=(0, 1, 7, 64, 200, 1000, 1024)) -> tuple[int, int]:
    """``(fewest, most)`` clocks from the clock edge that takes a lone frame's last beat until its result is
    valid, over SEND ONLY frames with payloads of ``sizes`` bytes (it varies with where the frame ends in its
    last beat)."""
    port = port_for_link("ethernet")
    lanes, out = width // 8, []
    for n in sizes:
        frame = _frame(LinkMode.ROCEV2_IPV4, Opcode.RC_SEND_ONLY, n, 1)
        dut = RxFrontEnd(width, n_gids=4)

        async def bench(ctx, dut=dut, frame=frame):
            _set_port(ctx, dut, port, "ethernet")
            ctx.set(dut.m_result.ready, 1)
            stats = {"offered": 0, "ready": 0}
            await _send(ctx, dut, frame, stats)
            assert stats["ready"] == stats["offered"], "a lone frame was held up"
            ctx.set(dut.s_axis.tvalid, 0)
            clocks = 0
            while not ctx.get(dut.m_result.valid):
                await ctx.tick()
                clocks += 1
            assert ctx.get(dut.m_result.payload.ok), "the frame did not pass"
            out.append(clocks)

        sim = Simulator(dut)
        sim.add_clock(1e-8)
        sim.add_testbench(bench)
        sim.run_until(1e-8 * (len(frame) // lanes + 100))
    return min(out), max(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rnic.sim.bench_rx", description=__doc__.splitlines()[0])
    ap.add_argument("--widths", default="64,128,256,512", help="datapath widths, comma-separated")
    ap.add_argument("--frames", type=int, default=40, help="frames per workload (default 40)")
    args = ap.parse_args(argv)
    widths = [int(w) for w in args.widths.split(",")]
    print("| W | result latency (clocks) | " + " | ".join(f"tready, {name}" for name in WORKLOADS) + " |")
    print("|---|---|" + "---|" * len(WORKLOADS))
    for w in widths:
        lo, hi = latency(w)
        cells = [f"{lo}" if lo == hi else f"{lo}–{hi}"]
        for mode, opcode, n in WORKLOADS.values():
            frames = [_frame(mode, opcode, n, psn) for psn in range(args.frames)]
            _, frac = measure(w, frames, "ethernet" if mode.is_ethernet else "ib")
            cells.append(f"{frac:.3f}")
        print(f"| {w} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
