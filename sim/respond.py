"""``python -m rnic.sim respond SCENARIO --frames IN.pcap --out DIR``: captured requests replayed into the whole
engine (:class:`rnic.hdl.rnic.Rnic` on Verilator, configured through its registers) and into the golden model
side by side.

Prints one line per input frame (the model's verdict, and the RTL's where it differs), a summary, and the
host-memory ranges the frames changed; writes the engine's response frames to ``DIR/<mode>.pcap``. Exit status 2
when the RTL and the model differ in any verdict, response or byte of host memory; 1 on a bad scenario
or capture.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..model.descriptor import LinkMode
from ..model.pcap import read_pcap, write_pcap_for_mode
from ..model.config import RnicConfig
from . import toolchain
from .respond_scenario import load_respond_scenario
from .rtl import ensure_build

__all__ = ["run_respond"]


def run_respond(scenario, frames, out: Path, *, width: int = 64, status=print) -> int:
    load_respond_scenario(scenario)             # a bad scenario fails here, before the build
    _, captured = read_pcap(frames)
    out.mkdir(parents=True, exist_ok=True)
    status(f"respond: {len(captured)} frames; building the engine at W = {width} (once per width)")
    config = RnicConfig(width=width)
    build = ensure_build(config, fast=False)
    job, result = out / "respond-job.json", out / "respond.json"
    job.write_text(json.dumps({"scenario": str(Path(scenario).resolve()), "frames": str(Path(frames).resolve()),
                               "out": str(result.resolve())}))
    result.unlink(missing_ok=True)
    tests, fails = toolchain.run(build, "rnic.sim.respond_tb", seed=1, testcase="respond", quiet=True,
                                 extra_env={"RNIC_RESPOND": str(job.resolve()), **config.env()},
                                 log_file=out / "sim.log")
    if not result.exists():
        raise RuntimeError(f"the simulation stopped before its report (see {out / 'sim.log'})")
    r = json.loads(result.read_text())
    for x in r["results"]:
        line = f"frame {x['frame']:>4}: {x['model']}"
        print(line if x["match"] else f"{line}   <- RTL: {x['rtl']}")
    by_mode: dict[LinkMode, list[bytes]] = {}
    for mode, hexframe in zip(r["modes"], r["responses"]):
        by_mode.setdefault(LinkMode(mode), []).append(bytes.fromhex(hexframe))
    counts = ", ".join(f"{k} {v}" for k, v in r["counts"].items() if v)
    drops = ", ".join(f"{k} {v}" for k, v in {**r["stateless"], **r["drops"]}.items())
    print(f"{len(r['results'])} frames: {counts or 'nothing executed'}; dropped: {drops or 'none'}")
    for mode, fs in by_mode.items():
        path = out / f"{mode.slug}.pcap"
        write_pcap_for_mode(path, mode, fs)
        print(f"{len(fs)} responses -> {path}")
    for addr, n in r["changed"][:40]:
        print(f"host memory changed: 0x{addr:08x} +{n}")
    if len(r["changed"]) > 40:
        print(f"... and {len(r['changed']) - 40} more ranges")
    if r["mismatches"] or fails:
        print("RTL and model differ:")
        for m in r["mismatches"][:20]:
            print(f"  {m}")
        return 2
    print("RTL and model agree on every verdict, response and byte of host memory.")
    return 0
