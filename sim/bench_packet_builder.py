"""Throughput benchmark of the packet builder: efficiency of back-to-back frames per width and payload size.

Run ``python -m rnic.sim.bench_packet_builder [--widths 64,128,256,512] [--synth [--pnr-seeds N]]``.

For every width and payload size (0, 1, 63, 64, 256, 1024, 4096) the descriptor and payload
streams are kept full (payload available at one beat per clock, sink always ready) and a run of
back-to-back frames cycling through all five link modes (RC SEND ONLY) goes through the builder.
Efficiency = ideal beats (``ceil(frame bytes / (W/8))`` summed over the frames) / measured beats
(clocks from the first output beat of the run to its last, inclusive). 1.00 means no idle beat
inside or between frames. Every frame is also compared with the golden model.

With ``--synth`` the builder alone (``PacketBuilder(64)``, every port registered) is synthesized
for ECP5-25F with :func:`rnic.fpga.synth.synthesize` and its LUT4s, flip-flops and Fmax printed.
nextpnr's result moves by up to 10 % with its placement seed alone, so ``--pnr-seeds N`` runs seeds
1..N (one full synthesis each, about 3.5 minutes) and prints every Fmax with the spread.

The same file is the cocotb test module the simulator runs (``bench_efficiency``); results travel
back in a JSON file named by ``$PB_BENCH_OUT``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
from pathlib import Path

SIZES = (0, 1, 63, 64, 256, 1024, 4096)

try:
    import cocotb
    from cocotb.clock import Clock
    from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge
except ImportError:  # pragma: no cover
    cocotb = None


def _frames_for(size: int) -> int:
    return max(10, min(40, 40000 // (size + 100)))


if cocotb is not None:
    from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource

    from ..model.descriptor import DESC_FIELDS, LinkMode, PacketDesc
    from ..model.frames import build_frame
    from ..model.opcodes import Opcode

    @cocotb.test()
    async def bench_efficiency(dut):
        rng = random.Random(int(os.environ.get("RNIC_SEED", "1")))
        width = len(dut.m_axis__tdata)
        lanes = width // 8
        desc_bytes = len(dut.s_desc__tdata) // 8
        cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
        src_d = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_desc", bus_separator="__"), dut.clk, dut.rst)
        src_p = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_payload", bus_separator="__"), dut.clk, dut.rst)
        sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis", bus_separator="__"), dut.clk, dut.rst)
        for log in (src_d.log, src_p.log, sink.log):
            log.setLevel("WARNING")
        dut.error_clear.value = 0
        dut.rst.value = 1
        await ClockCycles(dut.clk, 3)
        dut.rst.value = 0
        await ClockCycles(dut.clk, 2)

        results = {}
        for size in SIZES:
            packets = []
            for k in range(_frames_for(size)):
                kw = {name: rng.getrandbits(w) for name, w in DESC_FIELDS}
                kw.update(mode=int(list(LinkMode)[k % len(LinkMode)]), opcode=int(Opcode.RC_SEND_ONLY),
                          payload_len=size)
                packets.append((PacketDesc(**kw), rng.randbytes(size)))
            expected = [build_frame(d, p) for d, p in packets]
            ideal = sum(-(-len(f) // lanes) for f in expected)
            for desc, payload in packets:
                await src_d.send(AxiStreamFrame(desc.to_int().to_bytes(desc_bytes, "little")))
                if payload:
                    await src_p.send(AxiStreamFrame(payload))
            first = last = None
            count = cycle = 0
            while count < ideal:
                await RisingEdge(dut.clk)
                await ReadOnly()
                cycle += 1
                if int(dut.m_axis__tvalid.value) and int(dut.m_axis__tready.value):
                    count += 1
                    first = cycle if first is None else first
                    last = cycle
                if cycle > 20 * ideal + 1000:
                    raise AssertionError(f"W={width} payload {size}: stalled after {count} of {ideal} beats")
            for n, exp in enumerate(expected):
                got = await sink.recv()
                assert bytes(got.tdata) == exp, f"W={width} payload {size}: frame {n} differs from the model"
            measured = last - first + 1
            results[size] = {"frames": len(packets), "ideal": ideal, "measured": measured,
                             "efficiency": ideal / measured}
            dut._log.info("W=%d payload %d: %d/%d beats, efficiency %.4f", width, size, ideal, measured,
                          ideal / measured)
            await ClockCycles(dut.clk, 5)
        Path(os.environ["PB_BENCH_OUT"]).write_text(json.dumps({"width": width, "results": results}))


def measure(width: int, seed: int) -> dict:
    """Build (cached) and run the efficiency benchmark at one width; return its result dict."""
    from ..hdl.packet_builder import PacketBuilderAxis
    from .toolchain import build, run

    b = build(lambda: PacketBuilderAxis(width), "packet_builder", f"packet_builder-w{width}")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.json"
        tests, failures = run(b, "bench_packet_builder", seed=seed, extra_env={"PB_BENCH_OUT": str(out)},
                              test_dir=Path(__file__).resolve().parent)
        if failures or not out.exists():
            raise RuntimeError(f"benchmark at W={width} failed; see the cocotb log above")
        return json.loads(out.read_text())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", default="64,128,256,512", help="comma-separated datapath widths")
    parser.add_argument("--synth", action="store_true", help="also synthesize W=64 for ECP5-25F")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--speed", type=int, choices=(6, 7, 8), help="ECP5 speed grade for --synth (default 6)")
    parser.add_argument("--pnr-seeds", type=int, default=1, metavar="N",
                        help="with --synth: place and route with nextpnr seeds 1..N and print the Fmax spread")
    args = parser.parse_args(argv)
    if args.pnr_seeds < 1:
        parser.error("--pnr-seeds must be at least 1")
    from .toolchain import seed_from_env

    seed = args.seed if args.seed is not None else seed_from_env(1)
    widths = [int(w) for w in args.widths.split(",") if w]
    table = {}
    for width in widths:
        table[width] = measure(width, seed)["results"]

    print()
    print("Packet builder efficiency, back-to-back frames (ideal beats / measured beats)")
    print("payload | " + " | ".join(f"W={w:>3}" for w in widths))
    print("------- | " + " | ".join("-----" for _ in widths))
    worst = 1.0
    for size in SIZES:
        cells = []
        for w in widths:
            eff = table[w][str(size)]["efficiency"]
            worst = min(worst, eff)
            cells.append(f"{eff:5.3f}")
        print(f"{size:>7} | " + " | ".join(cells))
    print(f"worst: {worst:.3f}")

    if args.synth:
        from ..fpga.synth import synthesize
        from ..hdl.packet_builder import PacketBuilder

        name = "packet_builder-w64" + (f"-speed{args.speed}" if args.speed else "")
        fmaxes = []
        for pnr_seed in range(1, args.pnr_seeds + 1):
            r = synthesize(lambda: PacketBuilder(64), name + (f"-seed{pnr_seed}" if pnr_seed > 1 else ""),
                           speed=args.speed, seed=pnr_seed)
            fmax = ", ".join(f"{k} {v:.1f} MHz" for k, v in r.get("fmax_mhz", {}).items())
            print()
            print(f"ECP5 ({r['device']}, speed grade {r['speed']}, nextpnr seed {pnr_seed}), PacketBuilder(64), "
                  "ports registered:")
            print(f"  LUT4 {r.get('lut4')}, FF {r.get('ff')} (of which {r['wrapper_ff']} port registers), "
                  f"BRAM {r.get('bram')}, Fmax {fmax} (target {r['target_mhz']} MHz, met: {r['timing_met']}, "
                  f"fits: {r['fits']})")
            if r.get("fmax_mhz"):
                fmaxes.append(min(r["fmax_mhz"].values()))
        if len(fmaxes) > 1:
            print()
            target = r["target_mhz"]
            print(f"Fmax over nextpnr seeds 1..{args.pnr_seeds}: " + ", ".join(f"{f:.1f}" for f in fmaxes)
                  + f" MHz; min {min(fmaxes):.1f}, mean {sum(fmaxes) / len(fmaxes):.1f}, max {max(fmaxes):.1f}; "
                  f"{sum(f >= target for f in fmaxes)} of {len(fmaxes)} seeds at {target} MHz or more")
    return 0


if __name__ == "__main__":
    sys.exit(main())
