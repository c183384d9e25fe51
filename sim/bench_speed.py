"""Simulation speed: clocks per wall second of the whole engine on the cocotbext-axi path, on the
fast path and at the ceiling (:mod:`rnic.sim.bench_speed_tb`), per width and workload.

    python -m rnic.sim bench-speed [--widths 64,512] [--workloads demo,send-64k,qps-256] [--out DIR]

Clocks/s counts the clocks from the last register write of a run to idle over the wall time they
took (the golden model, the loading and the comparison are not in it; ``run_s`` has the whole run).
Every run is checked against the golden model; a mismatch fails the bench.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from ..model.config import RnicConfig

__all__ = ["PATHS", "measure", "table"]

PATHS = ("cocotbext", "fast")


def measure(config: RnicConfig, workloads, *, seed: int = 1, paths=PATHS, status=print) -> list[dict]:
    """Run ``workloads`` (names of :data:`rnic.sim.bench_speed_tb.WORKLOADS`) on each path's build
    of ``config``; one row per workload and path (``ceiling`` with ``fast``), with ``width``,
    ``clocks``, ``busy_s``, ``clocks_per_s``, ``run_s``, ``build_s``."""
    from .rtl import ensure_build
    from .toolchain import run
    rows = []
    for path in paths:
        t = time.perf_counter()
        b = ensure_build(config, fast=path == "fast", status=status)
        build_s = time.perf_counter() - t
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "speed.json"
            env = {"RNIC_SPEED_OUT": str(out), "RNIC_SPEED_PATH": path,
                   "RNIC_SPEED_WORKLOADS": ",".join(workloads), **config.env()}
            status(f"W = {config.width}: {path} path ...")
            _, fails = run(b, "rnic.sim.bench_speed_tb", seed=seed, extra_env=env, quiet=True,
                           log_file=Path(tmp) / "sim.log")
            if fails or not out.exists():
                raise RuntimeError(f"the {path} simulation failed:\n" + (Path(tmp) / "sim.log").read_text()[-3000:])
            for r in json.loads(out.read_text()):
                if r["mismatches"]:
                    raise RuntimeError(f"{path} {r['workload']}: RTL and model differ: {r['mismatches'][:5]}")
                r.update(width=config.width, build_s=build_s,
                         clocks_per_s=round(r["clocks"] / r["busy_s"]) if r["busy_s"] else None)
                rows.append(r)
    return rows


def table(rows: list[dict]) -> str:
    """A markdown table: clocks/s per width, workload and path, and the fast path's speed-up
    (``clocks``: the fast path's run, which the ceiling repeats)."""
    lines = ["| W | workload | clocks | cocotbext clocks/s | fast clocks/s | ceiling clocks/s | fast / cocotbext | ceiling / fast |",
             "|---|---|---|---|---|---|---|---|"]
    keys = sorted({(r["width"], r["workload"]) for r in rows}, key=lambda k: (k[0], k[1]))
    for width, name in keys:
        by = {r["path"]: r for r in rows if (r["width"], r["workload"]) == (width, name)}
        cps = {p: by[p]["clocks_per_s"] if p in by else None for p in ("cocotbext", "fast", "ceiling")}
        fmt = [f"{v:,}" if v else "–" for v in cps.values()]
        up = f"{cps['fast'] / cps['cocotbext']:.1f}×" if cps["fast"] and cps["cocotbext"] else "–"
        ceil = f"{cps['ceiling'] / cps['fast']:.2f}×" if cps["fast"] and cps["ceiling"] else "–"
        clocks = (by.get("fast") or next(iter(by.values())))["clocks"]
        lines.append(f"| {width} | {name} | {clocks:,} | {' | '.join(fmt)} | {up} | {ceil} |")
    return "\n".join(lines)


def main(args) -> int:
    from .bench_speed_tb import WORKLOADS
    from ..model.config import config_from_args
    base = config_from_args(args)
    widths = [int(w) for w in args.widths.split(",")] if args.widths else [base.width]
    names = args.workloads.split(",")
    bad = [n for n in names if n not in WORKLOADS]
    if bad:
        raise ValueError(f"--workloads: unknown {', '.join(bad)}; choose from {', '.join(WORKLOADS)}")
    paths = args.paths.split(",")
    if any(p not in PATHS for p in paths):
        raise ValueError(f"--paths: choose from {', '.join(PATHS)}")
    rows = []
    for width in widths:
        rows += measure(base.replace(width=width), names, seed=args.seed, paths=paths)
    text = table(rows)
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "speed.json").write_text(json.dumps(rows, indent=1))
        (out / "speed.md").write_text(text + "\n")
        print(f"written to {out}: speed.md, speed.json")
    return 0
