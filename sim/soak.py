"""The random soak on the RTL (``python -m rnic.sim soak``) and the merging of its results
(``python -m rnic.sim soak-report``).

**Workloads.** A soak is defined by its seed ``S``, its recipe (``small`` or ``big``) and the engine
configuration. Workload ``i`` (``i`` = 0, 1, 2, ...) is drawn from its own generator,
``random.Random(workload_seed(S, i))``, where :func:`workload_seed` is the first 31 bits of
SHA-256 of ``"S:i"``; so workload ``i`` is the same whatever the batch size, the number of jobs or
the sharding. Each simulator launch runs a *batch* of consecutive workloads (``--batch``) on one
DUT; its seed (the random AXI and sink stalls, which run on from one workload to the next) is
:func:`batch_seed` of its first workload's index, so rerunning the same indices with the same batch
size reproduces a batch exactly, and ``--only i --batch 1`` runs workload ``i`` alone.

**How much.** ``--workloads M`` runs indices ``0 .. M-1``. ``--cycles C`` (default 200000) is a
budget: batches run in index order until the clocks simulated reach ``C``; with ``--jobs J``
the batches still running then finish and count too, so the last few indices can vary.

**Shards.** ``--shard K/N`` (``K`` from 1 to ``N``, as Slurm array and CI matrix indices usually
are) runs the indices ``i`` with ``i % N == K - 1``: ``K-1, K-1+N, K-1+2N, ...``. With
``--workloads M`` the N shards together run exactly indices ``0 .. M-1``, the unsharded set. With
``--cycles C`` each shard runs its own indices until it has simulated ``ceil(C / N)`` clocks.
A shard stops after a batch with a mismatch or a failed simulation.

**Results.** With ``--out DIR`` each run writes ``DIR/soak-<S>-shard<K>of<N>.json`` (``--only``:
``soak-<S>-only-<first index>.json``), rewritten after every batch: the seed, shard, recipe,
configuration, every workload run (index, seed, clocks, frames, aborted frames, mismatches),
totals, wall time, and for each failure the command that reruns it. ``soak-report`` merges such
files. Simulator logs: ``DIR/sim.log``, or ``DIR/sim-job<j>.log`` for job ``j`` of ``--jobs``.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import itertools
import json
import math
import random
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..model.config import RnicConfig
from . import rtl

__all__ = ["SoakPlan", "workload_seed", "batch_seed", "make_workload", "parse_shard", "parse_only",
           "shard_indices", "run_soak", "summary_path", "load_summaries", "merge_report", "report_main"]

RECIPES = ("small", "big")
BIG_FROM = 1_000_000            # --cycles from which the default recipe is "big"
DEFAULT_CYCLES = 200_000
_MAX_LISTED = 50                # mismatch texts kept per workload in the JSON
_KEYS = {"seed", "recipe", "shard", "only", "cycles", "workloads_total", "batch", "config_key", "stopped",
         "wall_seconds", "totals", "workloads", "failures", "errors"}


def _derive(*parts) -> int:
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:4], "big") >> 1


def workload_seed(seed: int, index: int) -> int:
    """The seed of workload ``index`` of the soak seeded ``seed``: 31 bits of SHA-256 of ``"seed:index"``."""
    return _derive(seed, index)


def batch_seed(seed: int, first: int) -> int:
    """The simulator seed of a batch whose first workload is ``first``: 31 bits of SHA-256 of
    ``"seed:first:batch"``."""
    return _derive(seed, first, "batch")


def make_workload(seed: int, index: int, recipe: str, config: RnicConfig):
    """Workload ``index`` of the soak: ``(Workload, options for TB.execute)``. ``small``: 1 to 8
    QPs, 3 WQEs each, messages up to 4 KiB; ``big``: 1 to 256 QPs, messages up to 64 KiB, memory
    latency up to 500 clocks."""
    from .scenario import random_workload
    big = recipe == "big"
    rng = random.Random(workload_seed(seed, index))
    nqps = min(rng.choice([1, 4, 16, 40, 100, 256] if big else [1, 2, 4, 8]), config.max_qps)
    w = random_workload(rng, nqps=nqps, wqes=max(2, 64 // nqps) if big else 3,
                        max_len=rng.choice([4096, 1 << 16] if big else [512, 4096]))
    return w, {"latency": (1, rng.choice([20, 200, 500] if big else [20, 100])),
               "pause": rng.choice([0.0, 0.2]), "sink_pause": rng.choice([0.0, 0.3]),
               "timeout": 100_000_000 if big else 2_000_000}


def parse_shard(text: str | None) -> tuple[int, int]:
    """``"K/N"`` (1 <= K <= N) as ``(K, N)``; None is ``(1, 1)``."""
    if text is None:
        return 1, 1
    k, slash, n = text.partition("/")
    if not slash or not k.strip().isdigit() or not n.strip().isdigit():
        raise ValueError(f"--shard: {text!r}; give K/N, shard K of N, K from 1 to N (e.g. 2/8)")
    k, n = int(k), int(n)
    if n < 1 or not 1 <= k <= n:
        raise ValueError(f"--shard: {text!r}; K must be 1 to N and N at least 1 (shards are numbered from 1)")
    return k, n


def parse_only(text: str | None) -> list[int] | None:
    """``"I[,I...]"`` as a list of workload indices."""
    if text is None:
        return None
    parts = [p.strip() for p in text.split(",")]
    if not parts or not all(p.isdigit() for p in parts):
        raise ValueError(f"--only: {text!r}; give workload indices, comma-separated (e.g. 17 or 16,17,18,19)")
    return [int(p) for p in parts]


def shard_indices(shard: tuple[int, int], workloads: int | None = None):
    """The workload indices of shard ``(K, N)``: ``K-1, K-1+N, ...``, below ``workloads`` if given."""
    k, n = shard
    return iter(range(k - 1, workloads, n)) if workloads is not None else itertools.count(k - 1, n)


def _chunks(indices, size: int):
    it = iter(indices)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


@dataclass
class SoakPlan:
    """What to run: the soak (seed, recipe, configuration), how much of it, and how."""

    seed: int = 1
    recipe: str = "small"
    config: RnicConfig = field(default_factory=RnicConfig)
    cycles: int | None = DEFAULT_CYCLES     # the whole soak's budget (split over the shards)
    workloads: int | None = None
    shard: tuple[int, int] = (1, 1)
    only: list[int] | None = None
    batch: int = 4
    jobs: int = 1
    out: Path | None = None
    fast: bool = True                       # the fast top; False: the cocotbext-axi harness

    @classmethod
    def from_args(cls, args, config: RnicConfig) -> SoakPlan:
        """The plan of ``soak``'s command line, checked (``ValueError`` names the option)."""
        if args.cycles is not None and args.workloads is not None:
            raise ValueError("give --cycles or --workloads, not both")
        only = parse_only(args.only)
        if only is not None and (args.shard is not None or args.workloads is not None):
            raise ValueError("--only runs the workloads it names; it takes no --shard or --workloads")
        for name in ("batch", "jobs"):
            if getattr(args, name) < 1:
                raise ValueError(f"--{name} must be at least 1, not {getattr(args, name)}")
        if args.cycles is not None and args.cycles < 0 or args.workloads is not None and args.workloads < 0:
            raise ValueError("--cycles and --workloads must not be negative")
        cycles = args.cycles if args.cycles is not None or args.workloads is not None else DEFAULT_CYCLES
        recipe = args.recipe or ("big" if cycles is not None and cycles >= BIG_FROM else "small")
        return cls(seed=args.seed, recipe=recipe, config=config, cycles=cycles if only is None else None,
                   workloads=args.workloads, shard=parse_shard(args.shard), only=only, batch=args.batch,
                   jobs=args.jobs, out=Path(args.out) if args.out else None,
                   fast=not getattr(args, "cocotbext", False))

    @property
    def budget(self) -> int | None:
        """Clocks this shard simulates at least (``--cycles`` split evenly, rounded up), or None."""
        return None if self.cycles is None else math.ceil(self.cycles / self.shard[1])

    def indices(self):
        return iter(self.only) if self.only is not None else shard_indices(self.shard, self.workloads)

    def command(self, only: list[int] | None = None, batch: int | None = None) -> str:
        """The command line of this run, or, with ``only``, of a rerun of those workloads."""
        words = ["python", "-m", "rnic.sim", "soak", "--seed", str(self.seed), "--recipe", self.recipe,
                 "--batch", str(batch or self.batch)]
        if only is not None:
            words += ["--only", ",".join(map(str, only))]
        else:
            if self.only is not None:
                words += ["--only", ",".join(map(str, self.only))]
            elif self.workloads is not None:
                words += ["--workloads", str(self.workloads)]
            else:
                words += ["--cycles", str(self.cycles)]
            if self.shard != (1, 1):
                words += ["--shard", f"{self.shard[0]}/{self.shard[1]}"]
            if self.jobs > 1:
                words += ["--jobs", str(self.jobs)]
            if self.out is not None:
                words += ["--out", str(self.out)]
        if not self.fast:
            words.append("--cocotbext")
        return shlex.join(words + _config_flags(self.config))


def _config_flags(config: RnicConfig) -> list[str]:
    d = {}
    for name, value in config.differences().items():
        if name.startswith("qpc."):
            d.setdefault("qpc", {})[name[4:]] = value
        else:
            d[name] = value
    return ["--config", json.dumps(d, separators=(",", ":"))] if d else []


def summary_path(plan: SoakPlan) -> Path:
    """Where ``--out`` gets this run's JSON summary."""
    name = (f"soak-{plan.seed}-only-{plan.only[0]}" if plan.only is not None
            else f"soak-{plan.seed}-shard{plan.shard[0]}of{plan.shard[1]}")
    return plan.out / f"{name}.json"


def _quiet(*_, **__):
    pass


def _run_batch(seed: int, recipe: str, config: RnicConfig, indices: list[int], log: Path | None,
               isolated: bool, status=_quiet, fast: bool = True):
    """One simulator launch: ``(runs, None)``, or ``(None, error text)`` if the simulation failed."""
    work = [make_workload(seed, i, recipe, config) for i in indices]
    try:
        return rtl.run_workloads(work, seed=batch_seed(seed, indices[0]), config=config, log=log,
                                 status=status, isolated=isolated, fast=fast), None
    except (RuntimeError, OSError) as err:
        return None, str(err)


def _log_for(plan: SoakPlan, slot: int) -> Path | None:
    if plan.out is None:
        return None
    return plan.out / ("sim.log" if plan.jobs == 1 else f"sim-job{slot}.log")


def _batch_results(plan: SoakPlan, batches, keep_going, status):
    """``(indices, runs, error)`` for each batch as it finishes; ``keep_going()`` is asked before
    each batch starts. ``--jobs J``: J worker processes, job ``j`` (1..J) logging to its own file."""
    if plan.jobs == 1:
        for indices in batches:
            if not keep_going():
                return
            yield indices, *_run_batch(plan.seed, plan.recipe, plan.config, indices, _log_for(plan, 1), False,
                                       status, plan.fast)
        return
    with concurrent.futures.ProcessPoolExecutor(plan.jobs) as pool:
        running, free, more = {}, list(range(1, plan.jobs + 1)), True
        while True:
            while more and free and keep_going():
                indices = next(batches, None)
                if indices is None:
                    more = False
                    break
                slot = free.pop(0)
                fut = pool.submit(_run_batch, plan.seed, plan.recipe, plan.config, indices, _log_for(plan, slot), True,
                                  _quiet, plan.fast)
                running[fut] = indices, slot
            if not running:
                return
            done, _ = concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED)
            for fut in sorted(done, key=lambda f: running[f][0][0]):
                indices, slot = running.pop(fut)
                free.append(slot)
                yield indices, *fut.result()


@dataclass
class SoakResult:
    """A soak run so far: its RTL runs, one record per workload, failed simulations."""

    plan: SoakPlan
    runs: list = field(default_factory=list)
    records: list[dict] = field(default_factory=list)
    errors: list[dict] = field(default_factory=list)
    batches: int = 0
    wall: float = 0.0
    stopped: str = "running"

    @property
    def clocks(self) -> int:
        return sum(r["clocks"] for r in self.records)

    @property
    def failures(self) -> list[dict]:
        return [r for r in self.records if r["mismatches"]]

    def headline(self) -> str:
        k, n = self.plan.shard
        where = f" shard {k}/{n}" if n > 1 else ""
        return f"soak seed {self.plan.seed}{where}: {self.clocks} clocks simulated, {len(self.records)} workloads"

    def to_dict(self) -> dict:
        p = self.plan
        totals = {"workloads": len(self.records), "clocks": self.clocks,
                  **{k: sum(r[k] for r in self.records) for k in ("frames", "bytes", "aborted")},
                  "mismatches": sum(r["mismatch_count"] for r in self.records), "errors": len(self.errors)}
        return {
            "format": "rnic-soak-1", "seed": p.seed, "recipe": p.recipe,
            "shard": {"index": p.shard[0], "count": p.shard[1]}, "only": p.only,
            "cycles": p.cycles, "shard_cycles": p.budget, "workloads_total": p.workloads,
            "batch": p.batch, "jobs": p.jobs, "config": p.config.to_dict(), "config_key": p.config.key(),
            "command": p.command(), "stopped": self.stopped, "wall_seconds": round(self.wall, 3),
            "batches": self.batches, "totals": totals,
            "workloads": sorted(self.records, key=lambda r: r["index"]),
            "failures": [{"index": r["index"], "seed": r["seed"], "mismatches": r["mismatch_count"],
                          "rerun": p.command(only=r["batch"], batch=len(r["batch"])),
                          "rerun_alone": p.command(only=[r["index"]], batch=1)} for r in self.failures],
            "errors": self.errors,
        }


def _record(seed: int, index: int, batch: list[int], run) -> dict:
    return {"index": index, "seed": workload_seed(seed, index), "batch": batch, "clocks": run.clocks,
            "frames": len(run.frames), "bytes": sum(map(len, run.frames)), "aborted": run.aborted,
            "mismatch_count": len(run.mismatches), "mismatches": list(run.mismatches[:_MAX_LISTED])}


def _write(result: SoakResult) -> Path | None:
    if result.plan.out is None:
        return None
    path = summary_path(result.plan)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result.to_dict(), indent=1) + "\n")
    tmp.replace(path)
    return path


def run_soak(plan: SoakPlan, status=_quiet) -> SoakResult:
    """Run ``plan``'s workloads in batches on the RTL (the parent builds it first, so ``--jobs``
    workers share that build); write the JSON summary after every batch. A failed simulation is
    recorded and raised as ``RuntimeError`` once the summary is written."""
    if plan.out is not None:
        plan.out.mkdir(parents=True, exist_ok=True)
    result = SoakResult(plan)
    start = time.monotonic()
    rtl.ensure_build(plan.config, status=status)
    budget = plan.budget

    def keep_going():
        return not result.errors and not result.failures and (budget is None or result.clocks < budget)

    for indices, runs, error in _batch_results(plan, _chunks(plan.indices(), plan.batch), keep_going, status):
        result.batches += 1
        if error is not None:
            result.errors.append({"indices": indices, "error": error,
                                  "rerun": plan.command(only=indices, batch=len(indices))})
        else:
            result.records += [_record(plan.seed, i, indices, r) for i, r in zip(indices, runs)]
            for r in runs:
                r.drop_frames()
            result.runs += runs
        frames = sum(r["frames"] for r in result.records)
        bad = sum(r["mismatch_count"] for r in result.records)
        status(f"soak: batch {result.batches}, {result.clocks:,} clocks, {frames:,} frames checked, {bad} mismatches"
               + (", a simulation failed" if result.errors else ""))
        result.wall = time.monotonic() - start
        _write(result)
    result.records.sort(key=lambda r: r["index"])
    result.stopped = "error" if result.errors else "mismatch" if result.failures else "done"
    result.wall = time.monotonic() - start
    _write(result)
    if result.errors:
        e = result.errors[0]
        raise RuntimeError(f"{e['error']}\n  rerun: {e['rerun']}")
    return result


# --- soak-report -------------------------------------------------------------------------------------

def load_summaries(paths) -> list[tuple[Path, dict]]:
    """The soak summaries in ``paths``: JSON files, or folders searched (recursively) for ``soak-*.json``."""
    files = []
    for p in map(Path, paths):
        if p.is_dir():
            files += sorted(p.rglob("soak-*.json"))
        elif p.is_file():
            files.append(p)
        else:
            raise ValueError(f"{p}: no such file or folder")
    if not files:
        raise ValueError(f"no soak summaries (soak-*.json) in {', '.join(map(str, paths))}")
    out = []
    for f in files:
        try:
            d = json.loads(f.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ValueError(f"{f}: not a soak summary ({err})") from None
        if not isinstance(d, dict) or d.get("format") != "rnic-soak-1":
            raise ValueError(f"{f}: not a soak summary (no \"format\": \"rnic-soak-1\")")
        missing = _KEYS - set(d)
        if missing:
            raise ValueError(f"{f}: soak summary without {', '.join(sorted(missing))}")
        out.append((f, d))
    return out


def merge_report(summaries: list[tuple[Path, dict]]) -> tuple[str, list[str], int]:
    """``(table, warnings, exit code)`` for the summaries: one row per summary, totals over distinct
    workloads, missing and repeated shards, failures with their rerun commands. Exit code 2 if any
    workload mismatched or any simulation failed, else 0."""
    warnings, groups, seen = [], {}, {}
    rows = [("shard", "workloads", "clocks", "frames", "mismatches", "errors", "wall s", "status", "file")]
    totals = {"workloads": 0, "clocks": 0, "frames": 0, "mismatches": 0}
    failures, errors, wall = [], [], 0.0
    for path, d in summaries:
        soak = (d["seed"], d["recipe"], d["config_key"], d["batch"])
        if d["only"] is not None:
            label = "only " + ",".join(map(str, d["only"]))
        else:
            k, n = d["shard"]["index"], d["shard"]["count"]
            label = f"{k}/{n}"
            group = groups.setdefault(soak + (n, d["cycles"], d["workloads_total"]), {})
            group.setdefault(k, []).append(path)
        t = d["totals"]
        rows.append((label, t["workloads"], t["clocks"], t["frames"], t["mismatches"], t["errors"],
                     f"{d['wall_seconds']:.0f}", d["stopped"], path.name))
        if d["stopped"] == "running":
            warnings.append(f"{path}: not finished (still running, or killed)")
        wall += d["wall_seconds"]
        for w in d["workloads"]:
            key = soak[:3] + (w["index"],)
            if key in seen:
                continue
            seen[key] = path
            totals["workloads"] += 1
            totals["clocks"] += w["clocks"]
            totals["frames"] += w["frames"]
            totals["mismatches"] += w["mismatch_count"]
        failures += [(d["seed"], f) for f in d["failures"]]
        errors += [(d["seed"], e) for e in d["errors"]]
    for (seed, recipe, key, _, n, cycles, workloads), shards in groups.items():
        what = f"seed {seed} ({recipe}, config {key}, " + (f"{workloads} workloads" if cycles is None
                                                          else f"{cycles} cycles") + ")"
        missing = [k for k in range(1, n + 1) if k not in shards]
        if missing:
            warnings.append(f"soak {what}: {len(shards)} of {n} shards; missing "
                            + ", ".join(f"{k}/{n}" for k in missing))
        for k, paths in sorted(shards.items()):
            if len(paths) > 1:
                warnings.append(f"soak {what}: shard {k}/{n} appears {len(paths)} times "
                                f"({', '.join(map(str, paths))}); its workloads count once")
    rows.append(("total", totals["workloads"], totals["clocks"], totals["frames"], totals["mismatches"],
                 len(errors), f"{wall:.0f}", "", f"{len(summaries)} files"))
    text = [_table(rows)]
    if failures:
        text.append("\nfailing workloads (rerun: its batch exactly; alone: the workload by itself):")
        for seed, f in failures:
            text.append(f"  seed {seed} workload {f['index']} (workload seed {f['seed']}): {f['mismatches']} mismatches")
            text.append(f"    rerun: {f['rerun']}")
            text.append(f"    alone: {f['rerun_alone']}")
    if errors:
        text.append("\nfailed simulations:")
        for seed, e in errors:
            text.append(f"  seed {seed} workloads {','.join(map(str, e['indices']))}: {(e['error'].splitlines() or [''])[0]}")
            text.append(f"    rerun: {e['rerun']}")
    return "\n".join(text), warnings, 2 if failures or errors else 0


def _table(rows) -> str:
    cells = [[f"{c:,}" if isinstance(c, int) else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    lines = []
    for n, row in enumerate(cells):
        lines.append("  ".join(c.ljust(w) if i in (0, len(row) - 2, len(row) - 1) else c.rjust(w)
                               for i, (c, w) in enumerate(zip(row, widths))).rstrip())
        if n == 0 or n == len(cells) - 2:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def report_main(paths) -> int:
    """``soak-report``: print the merged table, then warnings on stderr; the exit code of
    :func:`merge_report`."""
    text, warnings, code = merge_report(load_summaries(paths))
    print(text)
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    return code
