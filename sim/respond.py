"""``python -m rnic.sim respond SCENARIO --frames IN.pcap --out DIR``: captured requests replayed into the RTL
receive path (:class:`rnic.sim.rx_top.RxTop` on Verilator) and into the golden model side by side.

Prints one line per input frame (the model's verdict, and the RTL's where it differs), a summary, and the
host-memory ranges the frames changed; writes the response frames to ``DIR/<mode>.pcap``. Exit status 2
when the RTL and the model differ in any verdict, response or byte of host memory; 1 on a bad scenario
or capture.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..model.descriptor import LinkMode
from ..model.pcap import read_pcap, write_pcap_for_mode
from . import toolchain
from .respond_scenario import load_respond_scenario
from .rx_top import RxTop

__all__ = ["run_respond"]


def run_respond(scenario, frames, out: Path, *, width: int = 64, status=print) -> int:
    load_respond_scenario(scenario)             # a bad scenario fails here, before the build
    _, captured = read_pcap(frames)
    out.mkdir(parents=True, exist_ok=True)
    status(f"respond: {len(captured)} frames; building the receive path at W = {width} (once per width)")
    build = toolchain.build(lambda: RxTop(width, max_qps=16), "rx_top", f"rx-top-w{width}")
    job, result = out / "respond-job.json", out / "respond.json"
    job.write_text(json.dumps({"scenario": str(Path(scenario).resolve()), "frames": str(Path(frames).resolve()),
                               "out": str(result.resolve())}))
    result.unlink(missing_ok=True)
    tests, fails = toolchain.run(build, "rnic.sim.respond_tb", seed=1, testcase="respond", quiet=True,
                                 extra_env={"RNIC_RESPOND": str(job.resolve())}, log_file=out / "sim.log")
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
