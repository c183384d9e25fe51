"""``python -m rnic.fpga synth``: out-of-context synthesis of the whole engine (``Rnic``) or of one
of its blocks (``--block``), JSON and Markdown report. ``python -m rnic.fpga board``: the self-test
bitstream for a board (``board.py``).

Exit status: 0 when the flow ran to a report, whether or not the design fits or meets timing (see
``fits`` and ``timing_met``); 1 when a tool or the elaboration failed (the error is printed on
stderr and no report is written); 2 for a usage error.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import time
from pathlib import Path

from ..model.config import DATAPATH_WIDTHS, RnicConfig, add_config_arguments, config_from_args
from .synth import DEVICES

__all__ = ["SUPPORTED_WIDTHS", "build_parser", "parse_args", "engine_config", "default_name", "build_engine",
           "build_top", "source_state", "verdict_line", "render_markdown", "main"]

SUPPORTED_WIDTHS = DATAPATH_WIDTHS
# the whole engine, or one of the blocks of Rnic.block_factories()
BLOCKS = ("rnic", "regs", "cache", "engine", "reader", "builder", "gate", "axi", "path", "rx", "responder")
# the report's config section: these RnicConfig parameters besides width and the cache geometry
ENGINE_PARAMS = ("max_qps", "max_mtu", "window", "payload_queue", "desc_queue", "wqe_prefetch", "ctx_prefetch")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m rnic.fpga",
                                     description="FPGA synthesis reports of the RNIC engine")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("synth", help="synthesize the whole engine (or one block) out of context; report size and Fmax",
                       description="Synthesize Rnic with every port registered; write a JSON report and a "
                                   "Markdown table. Exit 0 with a report (also when it does not fit), 1 on a "
                                   "tool failure, 2 on a usage error.")
    s.add_argument("--device", required=True, choices=sorted(DEVICES), help="target device")
    add_config_arguments(s)
    s.add_argument("--target-mhz", type=float, default=156.25, metavar="F", help="clock target (default 156.25)")
    s.add_argument("--seed", type=int, default=1, metavar="S", help="nextpnr placement seed (default 1)")
    s.add_argument("--router", choices=("router1", "router2"), help="nextpnr router (default: nextpnr's, router1)")
    s.add_argument("--speed", type=int, choices=(6, 7, 8), help="ECP5 speed grade (default: nextpnr's, 6)")
    s.add_argument("--block", choices=BLOCKS, default="rnic",
                   help="synthesize one block of the engine alone, built as the engine with these options "
                        "builds it (default rnic: the whole engine)")
    s.add_argument("--name", default=None,
                   help="work folder stem: build/synth/<name>-<device>/ (default rnic, plus the RnicConfig key of a non-default configuration and the speed grade)")
    s.add_argument("--json", required=True, type=Path, metavar="PATH", help="write the JSON report here")
    s.add_argument("--markdown", type=Path, metavar="PATH", help="also write the Markdown table here")
    parser.synth = s
    from .board import BOARDS
    b = sub.add_parser("board", help="build the self-test bitstream for an FPGA board",
                       description="Build the on-chip self-test (the engine, host memory in block RAM, a "
                                   "register script and frame, register and memory checkers written by the "
                                   "golden model) for a board. Exit 0 with a bitstream, 1 on a tool failure "
                                   "(including missed timing), 2 on a usage error.")
    b.add_argument("--board", required=True, choices=sorted(BOARDS), help="target board")
    b.add_argument("--out", type=Path, default=None, metavar="DIR",
                   help="build folder, relative to the current one (default build/board/<board>)")
    b.add_argument("--seed", type=int, default=1, metavar="S", help="nextpnr placement seed (default 1)")
    b.add_argument("--router", choices=("router1", "router2"),
                   help="nextpnr router (default: nextpnr's, router1; router2 stalled on an earlier netlist)")
    b.add_argument("--no-sink-pause", action="store_true",
                   help="frame sink always ready (default: not ready one clock in four, pseudo-randomly)")
    parser.board = b
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse and check ``argv``; a bad value exits 2 with a message naming what is accepted."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "board":
        if args.out is None:
            args.out = Path("build") / "board" / args.board
        if args.out.is_absolute():
            parser.board.error(f"--out must be a relative folder (YoWASP tools cannot see every absolute path), "
                               f"not {args.out}")
        return args
    error = parser.synth.error
    if args.cfg_width is not None and args.cfg_width not in SUPPORTED_WIDTHS:
        error(f"--width {args.cfg_width} is not supported: supported widths are "
              f"{', '.join(map(str, SUPPORTED_WIDTHS))}")
    try:
        args.config = config_from_args(args)
    except ValueError as err:
        error(f"engine configuration: {err}")
    if args.target_mhz <= 0:
        error(f"--target-mhz must be positive, not {args.target_mhz:g}")
    return args


def engine_config(args: argparse.Namespace, engine=None) -> dict:
    """The ``config`` section of the report: the engine's configuration (``engine.config`` if given,
    else the one the options make), with the cache geometry as ``qp_cache_*``."""
    c = engine.config if engine is not None else args.config
    config = {"width": c.width, "qp_cache_entries": c.qpc.entries, "qp_cache_ways": c.qpc.ways}
    config.update({key: getattr(c, key) for key in ENGINE_PARAMS})
    if c.qpc != RnicConfig().qpc:
        config.update({"qp_cache_tag_width": c.qpc.tag_width, "qp_cache_qpn_bits": c.qpc.qpn_bits,
                       "qp_cache_mshrs": c.qpc.mshrs})
    return config


def default_name(args: argparse.Namespace) -> str:
    """``rnic`` (or ``rnic.<block>``), plus the configuration's key when it is not the default,
    plus the speed grade when given."""
    name = "rnic" if args.block == "rnic" else f"rnic.{args.block}"
    if args.config != RnicConfig():
        name += f"-{args.config.key()}"
    if args.speed is not None:
        name += f"-speed{args.speed}"
    return name


def build_engine(args: argparse.Namespace):
    """``Rnic`` of the configuration the options make (RnicConfig's defaults for those not given)."""
    from ..hdl.rnic import Rnic
    return Rnic(args.config)


def build_top(args: argparse.Namespace):
    """``(engine, top)``: the ``Rnic`` of ``args`` and what to synthesize, it or its ``--block``."""
    engine = build_engine(args)
    if args.block == "rnic":
        return engine, engine
    engine._MustUse__silence = True     # only its configuration is used: no UnusedElaboratable warning
    return engine, engine.block_factories()[args.block]()


def source_state() -> dict:
    """The git commit of the sources and the uncommitted files under ``hdl/`` and ``model/``."""
    root = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=30).stdout.strip()
        status = subprocess.run(["git", "-C", str(root), "--no-optional-locks", "status", "--porcelain", "--",
                                 "hdl", "model"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return {"commit": commit, "modified": sorted(line[3:] for line in status.splitlines())} if commit else {}


def _count(used, available) -> str:
    if used is None:
        return "–"
    return f"{used} / {available} ({100 * used / available:.0f} %)" if available else str(used)


def verdict_line(report: dict) -> str:
    """One sentence: does it fit, and is timing met."""
    if report.get("message"):
        return report["message"]
    if not report.get("fits"):
        return f"does not fit {report.get('device', '')}" if report.get("fits") is False else ""
    text = f"fits {report.get('device', '')}"
    fmax = report.get("fmax_mhz") or {}
    if fmax:
        worst = min(fmax.values())
        met = "met" if report.get("timing_met") else "NOT met"
        text += f"; timing {met} at {report.get('target_mhz', 0):g} MHz (worst Fmax {worst:.1f} MHz)"
    return text


def render_markdown(report: dict) -> str:
    """A two-column Markdown table of ``report``, with the verdict line above it."""
    avail = report.get("available", {})
    cfg = report.get("config", {})
    cfg_text = ", ".join([f"W={cfg['width']}"] * ("width" in cfg)
                         + [f"QP cache {cfg['qp_cache_entries']} entries {cfg.get('qp_cache_ways')}-way"]
                         * ("qp_cache_entries" in cfg)
                         + [f"{k} {cfg[k]}" for k in ENGINE_PARAMS if k in cfg]) or "–"
    fmax = report.get("fmax_mhz") or {}
    fmax_text = ", ".join(f"{d} {f:.1f} MHz" for d, f in fmax.items()) or "not measured"
    met = {True: "yes", False: "**no**", None: "not measured"}[report.get("timing_met")]
    fits = {True: "yes", False: "**no**"}.get(report.get("fits"), "unknown")
    ff_text = _count(report.get("ff"), avail.get("ff"))
    src = report.get("source") or {}
    src_text = (src.get("commit", "")[:10] + (f" + uncommitted {', '.join(src['modified'])}"
                                             if src.get("modified") else "")) or "–"
    if report.get("wrapper_ff") is not None:
        ff_text += f", {report['wrapper_ff']} of them port registers"
    tools = report.get("tools", {})
    rows = [
        ("Device", report.get("device", "–") + (f", speed grade {report['speed']}" if report.get("speed") else "")),
        ("Configuration", cfg_text),
        ("LUT4", _count(report.get("lut4"), avail.get("lut4"))),
        ("FF", ff_text),
        ("Block RAM", _count(report.get("bram"), avail.get("bram"))),
        ("LUT RAM", str(report.get("lutram", "–"))),
        ("DSP", _count(report.get("dsp"), avail.get("dsp"))),
        ("Fmax", fmax_text),
        ("Target", f"{report.get('target_mhz', 0):g} MHz"),
        ("Timing met", met),
        ("Fits", fits),
        ("Place and route", report.get("pnr", "–")
         + (f" (seed {report['seed']})" if report.get("pnr") == "done" and "seed" in report else "")),
        ("Source", src_text),
        ("Synthesis time", f"{report['synth_seconds']:.0f} s" if "synth_seconds" in report else "–"),
        ("Tools", ", ".join([tools[k] for k in ("yosys", "nextpnr") if k in tools]
                            + ([f"Amaranth {tools['amaranth']}"] if "amaranth" in tools else [])) or "–"),
    ]
    verdict = verdict_line(report)
    lines = [f"**{verdict}**", ""] if verdict else []
    lines += ["| Quantity | Value |", "|---|---|"]
    lines += [f"| {k} | {v.replace('|', '/')} |" for k, v in rows]
    return "\n".join(lines) + "\n"


def board_main(args: argparse.Namespace) -> int:
    from .board import build_board
    print(f"building the self-test for {args.board} in {args.out} (yosys some minutes, nextpnr about a quarter of an hour)",
          flush=True)
    try:
        r = build_board(args.board, args.out, seed=args.seed, router=args.router,
                        sink_pause=not args.no_sink_pause)
    except Exception as err:
        print(f"error: board build for {args.board} failed: {err}", file=sys.stderr)
        return 1
    avail = r["available"]
    fmax = ", ".join(f"{d} {f:.1f} MHz" for d, f in r["fmax_mhz"].items())
    print(f"| Board | LUT4 | FF | Block RAM | Fmax | clock | build time |\n|---|---|---|---|---|---|---|\n"
          f"| {r['board']} | {_count(r['lut4'], avail['lut4'])} | {_count(r['ff'], avail['ff'])} | "
          f"{_count(r['bram'], avail['bram'])} | {fmax} | {r['clock_mhz']:g} MHz | {r['seconds']:.0f} s |")
    print(f"\nbitstream {r['bitstream']} ({r['bitstream_bytes']} bytes); report {args.out / 'board.json'}")
    print(f"program it with: openFPGALoader --board ulx3s {r['bitstream']}")
    return 0


def main(argv: list[str] | None = None, *, factory=None) -> int:
    """Run the CLI. ``factory`` replaces the ``Rnic`` constructor (tests synthesize a tiny block)."""
    args = parse_args(argv)
    if args.command == "board":
        return board_main(args)
    name = args.name or default_name(args)
    from .synth import synthesize, tool_versions

    started = datetime.datetime.now(datetime.timezone.utc)
    source = source_state()
    t0 = time.monotonic()
    try:
        engine, top = (None, None) if factory else build_top(args)
        config = engine_config(args, engine)
        if args.block != "rnic":
            config["block"] = args.block
        report = synthesize(factory or (lambda: top), name, device=args.device, target_mhz=args.target_mhz,
                            seed=args.seed, router=args.router, speed=args.speed)
    except Exception as err:
        print(f"error: synthesis of {name} for {args.device} failed: {err}", file=sys.stderr)
        return 1
    out = {"device": report["device"], "name": name, "config": config}
    out.update({k: v for k, v in report.items() if k not in out})
    out["synth_seconds"] = round(time.monotonic() - t0, 1)
    out["date"] = started.isoformat(timespec="seconds")
    out["tools"] = tool_versions(args.device)
    out["source"] = source

    md = render_markdown(out)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=2) + "\n")
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(md)
    print(md, end="")
    print("\n" + verdict_line(out).replace("does not fit", "DOES NOT FIT", 1))
    print(f"\nwrote {args.json}" + (f" and {args.markdown}" if args.markdown else ""))
    return 0
