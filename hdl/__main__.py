"""``python -m rnic.hdl verilog [--width W] [--max-mtu B] [--max-qps N] [--qpc-entries N --qpc-ways N] ...
-o rnic.v``: the whole engine as one Verilog file (top module ``rnic`` by default), for any Verilog
flow. Every option overrides one parameter of :class:`rnic.model.config.RnicConfig`."""

from __future__ import annotations

import argparse
import sys

from ..model.config import add_config_arguments, config_from_args


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rnic.hdl", description="generate Verilog of the RNIC engine")
    sub = parser.add_subparsers(dest="command", required=True)
    v = sub.add_parser("verilog", help="write the top-level Rnic component as Verilog")
    v.add_argument("-o", "--output", default="-", help="output file (default: standard output)")
    v.add_argument("--name", default="rnic", help="top module name (default rnic)")
    add_config_arguments(v)
    args = parser.parse_args(argv)
    try:
        from .verilog import to_verilog
        from .rnic import Rnic
        text = to_verilog(Rnic(config_from_args(args)), args.name)
    except (ValueError, TypeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if args.output == "-":
        sys.stdout.write(text)
    else:
        with open(args.output, "w") as f:
            f.write(text)
        print(f"wrote {args.output}: module {args.name}, {text.count(chr(10))} lines", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
