"""``python -m rnic.sim bench``: the whole engine measured cycle-accurately, at one or more datapath widths.

    python -m rnic.sim bench --out DIR [--widths 64,128] [--quick] [--seed N] [--parts efficiency,rate]

One simulator launch per width runs the ``bench`` cocotb test of :mod:`rnic.sim.bench_engine_tb`
(:func:`rnic.sim.bench_engine.measure`): the test harness, with every run compared frame by frame
with the golden model. Host memory answers every read burst a fixed number of clocks after its AR
(bursts overlap); the frame sink is always ready. Figures (see docs/performance.md):

* efficiency: ideal beats / clocks from the first to the last frame beat, unsignaled SENDs of
  64 B .. 64 KiB on one QP, MTU 4096, 50-clock memory;
* rate: 64-byte SENDs round robin over 1, 16 and 256 QPs, one message per scheduler turn (quota 1),
  and over 16 and 256 QPs at quota 16; messages per 1000 clocks after the first QPs' worth of
  frames, and the QP context cache's hits and misses;
* latency: doorbell to first frame byte, QP context cached or not, memory latency 50 and 500;
* fairness: one 64 KiB SEND against many 1 KiB SENDs on 4 and 16 QPs, quota 4;
* speed: clocks simulated per wall second, per measurement and per simulator launch.

Writes ``DIR/{efficiency,rate,latency,fairness,speed}.csv``, ``report.md``, ``results.json``,
``efficiency.png`` and ``rate.png`` (with matplotlib), and ``sim-w<W>.log``.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ..model.config import RnicConfig
from ..model.regs import DATAPATH_WIDTHS
from .bench_engine import md_table, measure

__all__ = ["PARTS", "WIDTHS", "FIGURES", "plan", "run_bench", "write_outputs", "markdown", "text_tables",
           "write_plots"]

PARTS = ("efficiency", "rate", "latency", "fairness")
WIDTHS = DATAPATH_WIDTHS
_ROOT = Path(__file__).resolve().parents[1]


def plan(quick: bool = False, parts=PARTS) -> list[dict]:
    """The measurements of one width, in simulation order (the ``bench`` test's plan items)."""
    out = []
    if "efficiency" in parts:
        sizes = ((64, 32), (1024, 16), (4096, 8), (65536, 1)) if quick else \
            ((64, 128), (256, 128), (1024, 64), (4096, 32), (16384, 8), (65536, 4))
        out += [{"part": "efficiency", "qps": 1, "size": size, "mtu": 4096, "messages": n, "mem_latency": 50}
                for size, n in sizes]
    if "rate" in parts:
        runs = ((1, 64, 1), (16, 64, 1), (16, 64, 16)) if quick else \
            ((1, 240, 1), (16, 240, 1), (256, 768, 1), (16, 240, 16), (16, 1024, 16), (256, 1024, 16))
        out += [{"part": "rate", "qps": qps, "messages": n, "mem_latency": 50, "quota": quota, "size": 64, "mtu": 4096}
                for qps, n, quota in runs]
    if "latency" in parts:
        out += [{"part": "latency", "mem_latency": lat} for lat in ((50,) if quick else (50, 500))]
    if "fairness" in parts:
        runs = ((4, 16384, 16),) if quick else ((4, 65536, 64), (16, 65536, 8))
        out += [{"part": "fairness", "qps": qps, "quota": 4, "mem_latency": 50, "long_len": long_len,
                 "short_len": 1024, "shorts": shorts} for qps, long_len, shorts in runs]
    return out


def _size(n: int) -> str:
    return f"{n // 1024} KiB" if n >= 1024 and n % 1024 == 0 else f"{n} B"


@dataclass(frozen=True)
class Figure:
    """One table: a CSV, a Markdown table and a stdout table from the same rows. ``config`` keys
    are stated once above the table when every row has the same value, else they become columns."""

    name: str
    title: str
    text: str
    config: tuple[str, ...]
    columns: tuple[tuple, ...]         # (key, header, format spec or callable)
    traffic: bool = True               # a traffic measurement (the sink is always ready)


_CONFIG = {
    "width": ("W (bits)", lambda v: f"W = {v} bits ({v // 8} bytes per beat)"),
    "mem_latency": ("memory latency (clocks)", lambda v: f"memory latency {v} clocks"),
    "mtu": ("MTU", lambda v: f"MTU {v}"),
    "qps": ("QPs", lambda v: f"{v} QP{'s' if v != 1 else ''}"),
    "quota": ("quota", lambda v: f"SCHED_QUOTA {v}"),
    "size": ("message", lambda v: f"{_size(v)} messages"),
}

_READ_NOTE = ("The host-memory read channel over the same clocks: R beats, clocks the engine had no read "
              "data due (no AR accepted a memory latency earlier with beats still to come: it had not asked "
              "in time), and clocks data was due but the memory model sent none.")
_GAP_NOTE = (" Gaps inside frames: clocks between a frame's first and last beat with the sink ready and no "
             "beat (a MAC would underrun); 0 because a frame starts only when its payload is on chip.")
_GAP_COLUMN = ("frame_gaps", "gaps inside frames", "d")
_READ_COLUMNS = (("r_beats", "read beats", "d"), ("r_idle_none_due", "read idle, nothing due", "d"),
                 ("r_idle_due", "read idle, data due", "d"))

FIGURES = (
    Figure("efficiency", "Wire efficiency vs message size",
           "Unsignaled RoCEv2/IPv4 SENDs on one QP, posted before ENABLE. Efficiency = ideal beats "
           "(sum of ceil(frame bytes / bytes per beat)) / clocks from the first frame beat to the last; "
           "bytes/clock = frame bytes / the same clocks (the span starts at the first frame, which leaves "
           "only once its whole payload has arrived)." + _GAP_NOTE + " " + _READ_NOTE,
           ("width", "mem_latency", "mtu", "qps", "quota"),
           (("size", "message", _size), ("messages", "messages", "d"), ("frames", "frames", "d"),
            ("ideal_beats", "ideal beats", "d"), ("clocks", "clocks", "d"), ("efficiency", "efficiency", ".3f"),
            ("bytes_per_clock", "bytes/clock", ".2f"), _GAP_COLUMN, *_READ_COLUMNS)),
    Figure("rate", "Message rate",
           "Unsignaled 64-byte RoCEv2/IPv4 SENDs posted round robin over the QPs. With SCHED_QUOTA 1 every "
           "message is a scheduler turn of its own and looks its QP context up in the 16-entry cache: 1 and "
           "16 QPs hit after the first round, 256 QPs miss. With quota 16 a turn sends up to 16 messages of "
           "its QP, the engine reading their WQEs ahead. The first QPs' worth of frames is warm-up: "
           "messages/1000 clocks and efficiency count from the second round's first beat to the last beat. "
           "QPC requests (every lookup and update the engine sends to the cache, doorbells included), hits "
           "and misses are the cache's own counters over the whole run (registers QPC_LOOKUPS, QPC_HITS, "
           "QPC_MISSES)." + _GAP_NOTE + " " + _READ_NOTE,
           ("width", "mem_latency", "mtu", "quota", "size"),
           (("qps", "QPs", "d"), ("messages", "messages", "d"), ("frames", "frames measured", "d"),
            ("clocks", "clocks", "d"), ("msgs_per_kclk", "messages / 1000 clocks", ".1f"),
            ("efficiency", "efficiency", ".3f"), ("bytes_per_clock", "bytes/clock", ".2f"),
            ("qpc_lookups", "QPC requests", "d"), ("qpc_hits", "QPC hits", "d"), ("qpc_misses", "QPC misses", "d"),
            _GAP_COLUMN, *_READ_COLUMNS)),
    Figure("latency", "Doorbell to frame",
           "One 64-byte SEND on one QP (MTU 1024), engine enabled and idle: clocks from the DB_SQ_PI "
           "write's W handshake to the first and to the last frame beat, for the QP's first doorbell "
           "after reset (its context is not cached) and for a second doorbell (cached). The frame "
           "starts once its payload has arrived, so its beats follow on consecutive clocks.",
           ("width",),
           (("mem_latency", "memory latency (clocks)", "d"),
            ("doorbell_to_first_byte_miss", "first byte, QP context not cached", "d"),
            ("doorbell_to_last_byte_miss", "last byte, not cached", "d"),
            ("doorbell_to_first_byte_hit", "first byte, cached", "d"),
            ("doorbell_to_last_byte_hit", "last byte, cached", "d"))),
    Figure("fairness", "Scheduler fairness",
           "QP 0 posts one long SEND, every other QP posts 1 KiB SENDs, all before ENABLE. Over the span "
           "in which every QP has work (first frame to the frame that empties the first QP): max lead = "
           "most packets one QP is ahead of another (round robin bounds it by the quota); Jain's index "
           "over the QPs' wire bytes up to the last round boundary (1 = equal shares); max wait = longest "
           "run of other QPs' packets between two packets of one QP, against the bound (QPs - 1) x quota.",
           ("width", "mem_latency", "mtu", "quota", "qps"),
           (("long_len", "QP 0 message", _size), ("shorts", "1 KiB SENDs per other QP", "d"),
            ("frames_in_span", "frames in span", "d"), ("clocks_in_span", "clocks in span", "d"),
            ("jain", "Jain", ".3f"), ("max_lead_packets", "max lead", "d"), ("max_wait_packets", "max wait", "d"),
            ("bound_wait_packets", "wait bound", "d"))),
    Figure("speed", "Simulation speed",
           "Clocks simulated per wall-clock second: for each measurement (its setup, run, model comparison "
           "and QP context flush) and for each simulator launch as a whole (start-up included).",
           ("width",),
           (("part", "part", "s"), ("label", "measurement", "s"), ("sim_clocks", "clocks", ",d"),
            ("wall_s", "seconds", ".2f"), ("clocks_per_s", "clocks/s", ",.0f")), traffic=False),
)
_BY_NAME = {f.name: f for f in FIGURES}


def _label(part: str, r: dict) -> str:
    if part == "efficiency":
        return f"{_size(r['size'])} x {r['messages']}, {r['qps']} QP, MTU {r['mtu']}"
    if part == "rate":
        return f"{_CONFIG['qps'][1](r['qps'])}, {r['messages']} x {_size(r['size'])}, quota {r.get('quota', 1)}"
    if part == "latency":
        return f"memory latency {r['mem_latency']}"
    if part == "fairness":
        return f"{r['qps']} QPs, quota {r['quota']}"
    return ""


def _headline(part: str, r: dict) -> str:
    if part in ("efficiency", "rate"):
        rate = f"{r['msgs_per_kclk']:.1f} msgs/1000 clk, " if part == "rate" else ""
        return f"{rate}efficiency {r['efficiency']:.3f}"
    if part == "latency":
        return (f"first byte {r['doorbell_to_first_byte_miss']} clocks (miss), {r['doorbell_to_first_byte_hit']} "
                f"(hit); last byte {r['doorbell_to_last_byte_miss']}, {r['doorbell_to_last_byte_hit']}")
    if part == "fairness":
        return f"Jain {r['jain']:.3f}, max wait {r['max_wait_packets']} (bound {r['bound_wait_packets']})"
    return ""


def _speed(part: str, r: dict, width: int) -> dict:
    return {"width": width, "part": part, "label": _label(part, r), "sim_clocks": r["sim_clocks"],
            "wall_s": r["wall_s"], "clocks_per_s": round(r["sim_clocks"] / r["wall_s"]) if r["wall_s"] else None}


def _commit() -> tuple[str | None, bool]:
    try:
        head = subprocess.run(["git", "-C", str(_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(_ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None, False
    return head, bool(dirty)


def _status(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def run_bench(out: Path, *, widths=None, quick: bool = False, seed: int = 1, parts=PARTS, status=_status,
              config: RnicConfig = RnicConfig()) -> dict:
    """Measure the engine of ``config`` at every width (default: its own), write the outputs to
    ``out`` and return the results (rows by figure, each with its ``width``). Raises :class:`rnic.sim.bench_engine.ModelMismatch` if the RTL
    differs from the golden model."""
    widths = [config.width] if widths is None else widths
    out.mkdir(parents=True, exist_ok=True)
    commit, dirty = _commit()
    results = {"commit": commit, "dirty": dirty, "seed": seed, "quick": quick, "widths": list(widths),
               "parts": list(parts)} | {f.name: [] for f in FIGURES}
    items = plan(quick, parts)
    try:
        for width in widths:
            done = 0

            def progress(row, width=width):
                nonlocal done
                done += 1
                part = row.pop("part")
                status(f"bench W={width} [{done}/{len(items)}] {part}: {_label(part, row)}: {_headline(part, row)} "
                       f"({row['sim_clocks']:,} clocks in {row['wall_s']:.1f} s)")

            status(f"bench W={width}: {len(items)} measurement{'s' * (len(items) != 1)}; building the RTL with "
                   f"Verilator (minutes the first time, cached afterwards) ...")
            r = measure(seed, config=config.replace(width=width), plan=items, log=out / f"sim-w{width}.log", progress=progress)
            status(f"bench W={width}: done, {r['total_clocks']:,} clocks in {r['launch_s']:.1f} s "
                   f"(build check {r['build_s']:.1f} s)")
            for part in parts:
                results[part] += [{"width": width, **x} for x in r.get(part, [])]
                results["speed"] += [_speed(part, x, width) for x in r.get(part, [])]
            results["speed"].append({"width": width, "part": "launch", "label": "whole simulator launch",
                                     "sim_clocks": r["total_clocks"], "wall_s": r["launch_s"],
                                     "clocks_per_s": round(r["total_clocks"] / r["launch_s"])})
    finally:
        if any(results[f.name] for f in FIGURES):     # what was measured before a failure too
            write_outputs(results, out, status)
    return results


def _cell(value, fmt) -> str:
    if value is None:
        return ""
    return fmt(value) if callable(fmt) else format(value, fmt)


def _table(fig: Figure, rows: list[dict]) -> tuple[list[str], list[str], list[list[str]]]:
    """The configuration phrases, the headers and the cells of ``fig``'s table over ``rows``."""
    fixed, cols = [], []
    for key in fig.config:
        values = {r.get(key) for r in rows} - {None}
        if len(values) == 1:
            fixed.append(_CONFIG[key][1](values.pop()))
        elif values:
            cols.append((key, _CONFIG[key][0], "d"))
    cols += [c for c in fig.columns if any(r.get(c[0]) is not None for r in rows)]
    return fixed, [c[1] for c in cols], [[_cell(r.get(k), f) for k, _, f in cols] for r in rows]


def _csv_fields(fig: Figure) -> list[str]:
    return list(fig.config) + [k for k, _, _ in fig.columns if k not in fig.config]


def write_csvs(results: dict, out: Path) -> list[Path]:
    """One CSV per figure: a header row of field names, then one row per measurement (numbers unformatted)."""
    paths = []
    for fig in FIGURES:
        path = out / f"{fig.name}.csv"
        with path.open("w", newline="") as f:
            w = csv.DictWriter(f, _csv_fields(fig), extrasaction="ignore")
            w.writeheader()
            w.writerows(results.get(fig.name, []))
        paths.append(path)
    return paths


def markdown(results: dict, plots=()) -> str:
    """``report.md``: every table with the configuration it was measured in."""
    commit = results.get("commit")
    where = f"commit `{commit[:12]}`{' with uncommitted changes' if results.get('dirty') else ''}" if commit \
        else "commit unknown (not a git checkout)"
    at = f"commit {commit[:12]}{'+' if results.get('dirty') else ''}" if commit else "commit unknown"
    out = ["# rnic engine benchmark", "",
           f"`python -m rnic.sim bench{' --quick' if results.get('quick') else ''} --seed {results.get('seed')}` "
           f"at {where}; widths {', '.join(map(str, results.get('widths', [])))}. Verilator, cycle-accurate, every "
           f"run checked against the golden model. Host memory answers every read burst a fixed number of "
           f"clocks after its AR (bursts overlap, data in order); the frame sink is always ready.", ""]
    for fig in FIGURES:
        rows = results.get(fig.name, [])
        if not rows:
            continue
        fixed, headers, cells = _table(fig, rows)
        setup = fixed + ["sink always ready"] * fig.traffic + [at]
        out += [f"## {fig.title}", "", fig.text, "", f"Configuration: {'; '.join(setup)}.", ""]
        out += md_table(headers, cells) + [""]
        if f"{fig.name}.png" in plots:
            out += [f"![{fig.title}]({fig.name}.png)", ""]
    return "\n".join(out)


def text_tables(results: dict) -> str:
    """The tables for a terminal, columns aligned."""
    out = []
    for fig in FIGURES:
        rows = results.get(fig.name, [])
        if not rows:
            continue
        fixed, headers, cells = _table(fig, rows)
        widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
        out += [f"{fig.title} ({'; '.join(fixed)})",
                "  ".join(h.rjust(n) for h, n in zip(headers, widths))]
        out += ["  ".join(c.rjust(n) for c, n in zip(row, widths)) for row in cells]
        out.append("")
    return "\n".join(out)


def _pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def write_plots(results: dict, out: Path) -> list[Path] | None:
    """``efficiency.png`` (efficiency vs message size, one line per width, log x) and ``rate.png``
    (messages per 1000 clocks by QP count, one bar per width); None without matplotlib."""
    plt = _pyplot()
    if plt is None:
        return None
    paths = []
    eff = results.get("efficiency", [])
    if eff:
        fig, ax = plt.subplots(figsize=(6.4, 4))
        for width in sorted({r["width"] for r in eff}):
            rows = sorted((r for r in eff if r["width"] == width), key=lambda r: r["size"])
            ax.plot([r["size"] for r in rows], [r["efficiency"] for r in rows], marker="o", label=f"W = {width}")
        sizes = sorted({r["size"] for r in eff})
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [_size(s) for s in sizes])
        ax.minorticks_off()
        ax.set_ylim(0, 1.05)
        ax.set_xlabel("message size")
        ax.set_ylabel("efficiency (ideal beats / clocks)")
        lat = sorted({r["mem_latency"] for r in eff})
        ax.set_title(f"Wire efficiency, 1 QP, MTU 4096, memory latency {'/'.join(map(str, lat))}")
        ax.grid(True, alpha=0.3)
        ax.legend()
        fig.tight_layout()
        paths.append(out / "efficiency.png")
        fig.savefig(paths[-1], dpi=100)
        plt.close(fig)
    rate = results.get("rate", [])
    if rate:
        fig, ax = plt.subplots(figsize=(6.4, 4))
        runs = sorted({(r["quota"], r["qps"]) for r in rate})
        widths = sorted({r["width"] for r in rate})
        bar = 0.8 / len(widths)
        for i, width in enumerate(widths):
            by_run = {(r["quota"], r["qps"]): r["msgs_per_kclk"] for r in rate if r["width"] == width}
            xs = [k + (i - (len(widths) - 1) / 2) * bar for k in range(len(runs))]
            bars = ax.bar(xs, [by_run.get(x, 0) for x in runs], bar, label=f"W = {width}")
            ax.bar_label(bars, fmt="%.1f", fontsize=8)
        ax.set_xticks(range(len(runs)), [f"{q} QP{'s' if q != 1 else ''}\nquota {quota}" for quota, q in runs])
        ax.margins(y=0.15)
        ax.set_ylabel("64-byte messages / 1000 clocks")
        ax.set_title("Message rate, 64-byte SENDs, 16-entry QP cache")
        ax.legend()
        fig.tight_layout()
        paths.append(out / "rate.png")
        fig.savefig(paths[-1], dpi=100)
        plt.close(fig)
    return paths


def write_outputs(results: dict, out: Path, status=_status) -> list[Path]:
    """The CSVs, ``results.json``, the plots (skipped with one message without matplotlib) and
    ``report.md``; returns the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    paths = write_csvs(results, out)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    plots = write_plots(results, out)
    if plots is None:
        status("bench: PNG plots skipped: matplotlib is not installed (pip install matplotlib, "
               "or pip install -e '.[test]')")
        plots = []
    (out / "report.md").write_text(markdown(results, [p.name for p in plots]))
    return paths + [out / "results.json", out / "report.md"] + plots
