"""Command line of ``python -m rnic.sim``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["main"]


def _cmd_demo(args) -> int:
    from rnic.sim.demo import run_demo

    results = run_demo(Path(args.out), seed=args.seed)
    print(f"{'link mode':<13} {'frames':>6} {'bytes':>7} {'checked':>7}  pcap")
    for r in results:
        print(f"{r.mode.slug:<13} {r.frames:>6} {r.bytes:>7} {r.checked:>7}  {r.path}")
    total = sum(r.frames for r in results)
    print(f"{total} frames built by the golden model, all parsed back with valid lengths, pad, ICRC and VCRC.")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rnic.sim", description="rnic simulation tools")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="a frame of every opcode form in every link mode, one pcap per mode")
    demo.add_argument("--out", required=True, metavar="DIR", help="folder for the pcap files")
    demo.add_argument("--seed", type=int, default=0, help="seed of the payload bytes (default 0)")
    demo.set_defaults(func=_cmd_demo)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (OSError, ValueError, AssertionError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
