"""``python -m rnic.sim.bench_responder [--widths 64,128] [--json F]``: the responder's speed in the whole
engine on Verilator.

Runs :mod:`rnic.sim.bench_responder_tb` on :class:`rnic.hdl.rnic.Rnic` (the same build as
``cocotb_tests/test_rnic_receive.py`` at W = 64), host memory answering every read 50 clocks after its
address, the frame output always ready. Per workload (RC on RoCEv2/IPv4, MTU 1024, one QP): the clocks from
a lone request's last beat in to its response's first beat out on ``m_axis`` (ACK or READ response; UD has
none), then the rest back to back: clocks per request, the fraction of clocks ``s_axis.tready`` was high
while frames were offered, and for READs the output's efficiency (response beats per clock from the first
response beat to the last). Every response frame is checked against the model's. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from ..model.config import RnicConfig
from . import toolchain
from .rtl import ensure_build

__all__ = ["measure", "main"]


def measure(width: int) -> dict:
    config = RnicConfig(width=width)
    build = ensure_build(config, fast=False)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.json"
        tests, fails = toolchain.run(build, "rnic.sim.bench_responder_tb", seed=1, testcase="bench",
                                     extra_env={"RNIC_BENCH": str(out), **config.env()}, quiet=True,
                                     log_file=Path(tmp) / "log.txt")
        if fails or not out.exists():
            sys.exit(f"bench_responder: the bench failed at W = {width} (a model mismatch or a hang)")
        return json.loads(out.read_text())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rnic.sim.bench_responder", description=__doc__.split("\n\n")[0])
    ap.add_argument("--widths", default="64,128", help="datapath widths, comma separated")
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args(argv)
    runs = [measure(int(w)) for w in args.widths.split(",")]
    print("| W | workload | latency, last beat in → first response beat out (clocks) | clocks per packet | "
          "tready while offered | READ response efficiency |")
    print("|---|---|---|---|---|---|")
    for r in runs:
        for x in r["results"]:
            lat = "—" if x["latency"] is None else x["latency"]
            eff = x.get("read_efficiency", "—")
            print(f"| {r['width']} | {x['workload']} | {lat} | {x['clocks_per_packet']} | {x['tready']:.3f} | {eff} |")
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
