"""``python -m rnic.hdl verilog [--width W] [--max-mtu B] [--max-qps N] [--cache-entries N --cache-ways N]
-o rnic.v``: the whole
engine as one Verilog file (top module ``rnic`` by default), for any Verilog flow."""

from __future__ import annotations

import argparse
import sys

from ..model.qpc import QpcCacheConfig


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rnic.hdl", description="generate Verilog of the RNIC engine")
    sub = parser.add_subparsers(dest="command", required=True)
    v = sub.add_parser("verilog", help="write the top-level Rnic component as Verilog")
    v.add_argument("-o", "--output", default="-", help="output file (default: standard output)")
    v.add_argument("--name", default="rnic", help="top module name (default rnic)")
    v.add_argument("--width", type=int, default=64, help="datapath width in bits: 64, 128, 256 or 512 (default 64)")
    v.add_argument("--max-mtu", type=int, default=4096, help="largest path MTU in bytes, 256..4096 (default 4096)")
    v.add_argument("--max-qps", type=int, default=256, help="QPNs the scheduler holds, a power of two (default 256)")
    v.add_argument("--cache-entries", type=int, default=16, help="QP context cache entries (default 16)")
    v.add_argument("--cache-ways", type=int, default=4, help="QP context cache associativity (default 4)")
    args = parser.parse_args(argv)
    try:
        from .verilog import to_verilog
        from .rnic import Rnic
        cfg = QpcCacheConfig(entries=args.cache_entries, ways=args.cache_ways)
        text = to_verilog(Rnic(cfg, width=args.width, max_mtu=args.max_mtu, max_qps=args.max_qps), args.name)
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
