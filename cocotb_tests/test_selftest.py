"""The FPGA self-test top (``fpga/selftest.py``) in simulation: it passes, and each checker can fail.

The same Verilog a board build synthesizes (``SelfTest`` with the default workload) runs on
Verilator from reset until ``done``. The expectations here come from the golden model, not from
the self-test's own outputs: the number of frames the model sends. With one ``inject`` bit set, the
matching checker must report its failure class, so none of them passes vacuously; and a reset in
the middle of a run (as the board's button gives) must leave nothing behind for the next run.
"""

from __future__ import annotations

from pathlib import Path

import cocotb
from cocotb.triggers import ClockCycles

from rnic.sim import tb as sim_tb

try:
    import pytest
except ImportError:       # inside the simulator
    pytest = None

LIMIT = 400_000


async def run_selftest(dut, inject: int) -> int:
    """Reset (which reruns the test), then wait for ``done``."""
    dut.inject.value = inject
    await sim_tb.reset(dut, 4, after=0)
    clocks = 0
    while not int(dut.done.value):
        await ClockCycles(dut.clk, 100)
        clocks += 100
        assert clocks < LIMIT, f"self-test not done after {LIMIT} clocks"
    dut._log.info("inject %d: done after ~%d clocks, passed %d, fail_code %d, fail_info %d, frames %d", inject,
                  clocks, int(dut.passed.value), int(dut.fail_code.value), int(dut.fail_info.value),
                  int(dut.frames.value))
    return clocks


@cocotb.test()
async def test_selftest_passes(dut):
    from rnic.fpga.selftest import Fail, selftest_workload
    from rnic.model.config import RnicConfig
    from rnic.sim.scenario import expected

    model = expected(selftest_workload(), RnicConfig.from_env())
    sim_tb.start_clock(dut)
    await run_selftest(dut, 0)
    assert int(dut.fail_code.value) == Fail.NONE, f"fail_code {int(dut.fail_code.value)} info {int(dut.fail_info.value)}"
    assert int(dut.passed.value) == 1
    assert int(dut.frames.value) == len(model.packets)
    # stays passed: no late frame
    await ClockCycles(dut.clk, 2000)
    assert int(dut.passed.value) == 1 and int(dut.frames.value) == len(model.packets)


@cocotb.test()
async def test_selftest_checkers_fail(dut):
    from rnic.fpga.selftest import Fail

    sim_tb.start_clock(dut)
    for bit, code in ((0, Fail.FRAME), (1, Fail.REGISTER), (2, Fail.MEMORY)):
        await run_selftest(dut, 1 << bit)
        assert int(dut.passed.value) == 0
        assert int(dut.fail_code.value) == code, f"inject bit {bit}: fail_code {int(dut.fail_code.value)}"
        if code == Fail.FRAME:
            assert int(dut.fail_info.value) == 0, "the first beat should fail"
    # the frame check failed (and the test reset the design) in mid-run: a reset must leave no trace
    await run_selftest(dut, 0)
    assert int(dut.passed.value) == 1, f"rerun after a reset in mid-run: fail_code {int(dut.fail_code.value)}"


if pytest is not None:
    def test_selftest():
        from rnic.fpga.selftest import SelfTest
        from rnic.model.config import RnicConfig
        from rnic.sim.toolchain import build, run, seed_from_env

        config = RnicConfig.from_env()
        b = build(lambda: SelfTest(config=config), "selftest", f"selftest-{config.key()}", opt="-O0")
        run(b, "test_selftest", seed=seed_from_env(1), test_dir=Path(__file__).parent, extra_env=config.env())

