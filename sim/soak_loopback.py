"""``python -m rnic.sim soak --loopback [--loss P] [--cycles C | --workloads M] [--seed S] [--out DIR]``:
random two-node RC workloads on the two RTL engines (``rnic_pair``) over lossy links, each in lockstep with
the golden model (:func:`rnic.sim.pair_rc.run_lockstep`), until ``C`` clocks are simulated.

Workload ``i`` is drawn from ``random.Random(workload_seed(S, i))`` (:mod:`rnic.sim.soak`): 2 to 12
messages from A to B and 0 to 8 back, every RC operation, one to three QP pairs, a link mode, an MTU, and
links that lose and repeat frames with probability ``P``, corrupt them with ``P`` (none above 5 %), and hold
some back. Each workload reports its clocks, frames, messages, the RTL's requester counters (``REQ_*``),
the RTL-model mismatches and the scoreboard's findings; the run prints the totals, and with ``--out`` writes
``DIR/soak-loopback-<S>.json`` after every workload. A workload with a mismatch or a finding stops the run;
``--only I`` reruns workload ``I`` alone.

``--jobs J`` runs J simulator launches at once, sharing one build: job ``j`` (1..J) runs workloads
``j-1, j-1+J, ...`` until it has simulated ``ceil(C / J)`` clocks, logging to ``soak-loopback-sim-job<j>.log``
and writing ``soak-loopback-<S>-job<j>.json``; the run's summary is their union, in index order.
"""

from __future__ import annotations

import concurrent.futures
import json
import math
import random
import time
from pathlib import Path

from ..model.descriptor import LinkMode
from ..model.qpc import ServiceType
from .link import LinkKnobs
from .loopback import Loopback, random_messages
from .soak import workload_seed

__all__ = ["loopback_workload", "run_soak_loopback", "TOTALS"]

#: The totals the run prints, over every workload.
TOTALS = ("workloads", "clocks", "frames", "messages", "retransmits", "timeouts", "implied_naks", "naks_seq",
          "mismatches", "problems")


def loopback_workload(seed: int, index: int, loss: float) -> Loopback:
    """Workload ``index`` of the loopback soak seeded ``seed`` (the module docstring says what it holds)."""
    s = workload_seed(seed, index)
    rng = random.Random(s)
    mtu = rng.choice([256, 1024])
    knobs = LinkKnobs(loss=loss, dup=loss, corrupt=0 if loss > 0.05 else loss, reorder=rng.choice([0, 3]) if loss else 0)
    return Loopback(random_messages(rng, rng.randint(2, 12), mtu), random_messages(rng, rng.randint(0, 8), mtu),
                    service=ServiceType.RC, mode=rng.choice(list(LinkMode)), mtu=mtu, ab=knobs, ba=knobs, seed=s,
                    qps=rng.randint(1, 3))


def _launch(build, seed: int, loss: float, cycles: int | None, workloads: int | None, only: int | None,
            start: int, stride: int, where: Path, name: str, env: dict) -> dict | None:
    """One simulator launch running workloads ``start, start + stride, ...``; its summary, or None if it
    stopped before its first workload ended."""
    from . import toolchain
    result = where / f"{name}.json"
    job = where / f"{name}-job.json"
    job.write_text(json.dumps({"seed": seed, "loss": loss, "cycles": cycles, "workloads": workloads, "only": only,
                               "start": start, "stride": stride, "out": str(result.resolve())}))
    result.unlink(missing_ok=True)
    log = where / ("soak-loopback-sim.log" if stride == 1 else f"soak-loopback-sim-job{start + 1}.log")
    toolchain.run(build, "rnic.sim.soak_loopback_tb", seed=seed, testcase="soak_loopback", quiet=True,
                  extra_env={"RNIC_SOAK_LOOPBACK": str(job.resolve()), **env}, log_file=log)
    return json.loads(result.read_text()) if result.exists() else None


def run_soak_loopback(seed: int, loss: float, cycles: int | None, workloads: int | None, only: int | None,
                      out: Path | None, status=print, jobs: int = 1) -> dict:
    """Build the pair (cached), run the soak in ``jobs`` simulator launches at once, return the summary
    (``totals``, ``workloads``: one record each in index order, ``wall_seconds``)."""
    from ..model.config import RnicConfig
    from .pair_top import build_pair
    config = RnicConfig()
    status("building the two engines with Verilator (about six minutes the first time, then cached) ...")
    build = build_pair(config)
    where = Path(out) if out is not None else build.build_dir
    where.mkdir(parents=True, exist_ok=True)
    jobs = 1 if only is not None else jobs
    started = time.perf_counter()
    budget = None if cycles is None else math.ceil(cycles / jobs)
    names = [f"soak-loopback-{seed}" if jobs == 1 else f"soak-loopback-{seed}-job{j + 1}" for j in range(jobs)]
    args = [(build, seed, loss, budget, workloads, only, j, jobs, where, names[j], config.env()) for j in range(jobs)]
    if jobs == 1:
        parts = [_launch(*args[0])]
    else:
        status(f"{jobs} simulator launches at once (logs: {where}/soak-loopback-sim-job<j>.log) ...")
        with concurrent.futures.ProcessPoolExecutor(jobs) as pool:
            parts = list(pool.map(_launch, *zip(*args)))
    if any(p is None for p in parts):
        raise RuntimeError(f"a simulation stopped before its first workload ended (see {where}/soak-loopback-sim*.log)")
    summary = new_summary(seed, loss)
    for record in sorted((w for p in parts for w in p["workloads"]), key=lambda w: w["index"]):
        add_record(summary, record)
    summary["jobs"] = jobs
    summary["wall_seconds"] = round(time.perf_counter() - started, 1)
    if out is not None:
        (where / f"soak-loopback-{seed}.json").write_text(json.dumps(summary, indent=1))
    return summary


def add_record(summary: dict, record: dict) -> None:
    """Add one workload's record to the running totals."""
    summary["workloads"].append(record)
    t = summary["totals"]
    t["workloads"] += 1
    for key in TOTALS[1:]:
        value = record[key]
        t[key] += len(value) if isinstance(value, list) else value


def new_summary(seed: int, loss: float) -> dict:
    return {"seed": seed, "loss": loss, "totals": {k: 0 for k in TOTALS}, "workloads": []}
