"""Benchmark of the QP context cache: lookups per clock, hit and miss latency, ECP5 size and Fmax.

    python -m rnic.sim.bench_qp_cache [--entries 16] [--ways 4] [--mshrs 1,2,4,8] [--seed N] [--synth] [--json out.json]

The measurements run on Verilator through the ``bench`` cocotb test of :mod:`rnic.sim.qp_cache_tb`
(the tests' harness: AxiRam host memory with a fixed latency, the request source always valid
and the response sink always ready):

* 100 % hits: 2000 back-to-back lookups of QPs that are all cached;
* hit latency: clocks from the request transfer to the response's ``valid``;
* miss latency for an isolated miss with a 1-clock and a 200-clock memory;
* 0, 50 and 90 % hits with a 200-clock memory: lookups of cached QPs mixed with QPs never seen before
  (half of those updates, so half the victims are written back), once per MSHR count of ``--mshrs``
  (one Verilator build each).

``--synth`` adds out-of-context ECP5-25F synthesis (``rnic.fpga.synth``) at 16 and 64 entries.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

__all__ = ["measure", "synth", "main"]

def measure(entries=None, ways=None, seed=1, mshrs=None) -> dict:
    """Run the ``bench`` cocotb test of :mod:`rnic.sim.qp_cache_tb` on an ``entries``/``ways``/``mshrs``
    build (default: RnicConfig's cache); return its measurements."""
    from ..model.config import RnicConfig
    from .qp_cache_tb import run_qp_cache
    default = RnicConfig().qpc
    config = RnicConfig().replace(qpc={"entries": entries or default.entries, "ways": ways or default.ways,
                                       "mshrs": mshrs or default.mshrs})
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.json"
        tests, fails = run_qp_cache(config, "rnic.sim.qp_cache_tb", {"QPC_BENCH": str(out)},
                                    testcase="bench", seed=seed)
        if fails or not out.exists():
            raise RuntimeError(f"benchmark simulation failed ({fails} of {tests})")
        return json.loads(out.read_text())


def synth(entries_list=(16, 64), ways=None, device="ecp5-25f", target_mhz=156.25, router=None) -> list[dict]:
    from ..fpga.synth import synthesize
    from ..hdl.qp_cache import QpCache
    from ..model.qpc import QpcCacheConfig
    from ..model.config import RnicConfig
    ways = ways or RnicConfig().qpc.ways
    out = []
    for e in entries_list:
        cfg = QpcCacheConfig(e, min(ways, e))
        name = f"qp_cache-e{e}-w{cfg.ways}"
        r = synthesize(lambda: QpCache(cfg), name, device=device, target_mhz=target_mhz, router=router)
        r.pop("utilisation", None)
        r["entries"], r["ways"] = e, cfg.ways
        out.append(r)
    return out


def main(argv=None):
    from ..fpga.synth import DEVICES
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    from ..model.config import RnicConfig
    p.add_argument("--entries", type=int, default=RnicConfig().qpc.entries, help="default: RnicConfig's")
    p.add_argument("--ways", type=int, default=RnicConfig().qpc.ways, help="default: RnicConfig's")
    p.add_argument("--mshrs", default=str(RnicConfig().qpc.mshrs),
                   help="comma-separated MSHR counts, one build and run each (default: RnicConfig's)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--synth", action="store_true", help="also synthesize at 16 and 64 entries (--device)")
    p.add_argument("--device", default="ecp5-25f", choices=sorted(DEVICES), help="device for --synth (default ecp5-25f; see rnic.fpga synth)")
    p.add_argument("--synth-entries", type=int, nargs="+", default=[16, 64])
    p.add_argument("--router", choices=("router1", "router2"), help="nextpnr router (default nextpnr's)")
    p.add_argument("--no-sim", action="store_true", help="skip the simulation measurements")
    p.add_argument("--json", type=Path, help="write all results here")
    a = p.parse_args(argv)
    results = {}
    if not a.no_sim:
        runs = {n: measure(a.entries, a.ways, a.seed, n) for n in map(int, a.mshrs.split(","))}
        results["sim"] = runs
        for n, r in runs.items():
            print(f"QP context cache, {a.entries} entries, {a.ways}-way, {n} MSHR{'s' if n > 1 else ''}")
            print(f"  100% hits:                 {r['hit100_lookups_per_clock']:.3f} lookups/clock")
            print(f"  hit latency:               {r['hit_latency_clocks']} clocks (request transfer -> response valid)")
            print(f"  miss latency, 1-clk mem:   {r['miss_latency_clocks_mem1']} clocks")
            print(f"  miss latency, 200-clk mem: {r['miss_latency_clocks_mem200']} clocks")
        print("\nlookups per clock, 200-clock memory (measured hit ratio)")
        print("| MSHRs | " + " | ".join(f"{p} % hits" for p in (0, 50, 90)) + " |")
        print("|---|---|---|---|")
        for n, r in runs.items():
            cells = [f"{r[f'hit{p}_mem200_lookups_per_clock']:.4f} ({r[f'hit{p}_mem200_hit_ratio']:.2f})"
                     if f"hit{p}_mem200_lookups_per_clock" in r else "—" for p in (0, 50, 90)]
            print(f"| {n} | " + " | ".join(cells) + " |")
    if a.synth:
        results["synth"] = synth(a.synth_entries, a.ways, device=a.device, router=a.router)
        for r in results["synth"]:
            own_ff = r.get("ff", 0) - r.get("wrapper_ff", 0)
            print(f"  {r['device']} {r['entries']} entries {r['ways']}-way: LUT4 {r.get('lut4')}  FF {r.get('ff')} "
                  f"(block {own_ff}, port wrapper {r.get('wrapper_ff')})  DP16KD {r.get('bram')}  "
                  f"Fmax {r.get('fmax_mhz')} MHz  fits={r.get('fits')} timing_met@{r['target_mhz']}={r.get('timing_met')}")
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()
