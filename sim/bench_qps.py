"""``python -m rnic.sim bench-qps``: the engine's message rate against the number of active QPs.

    python -m rnic.sim bench-qps --out DIR [--quick] [--qps 16,256,4096] [--latencies 50,200]
                                 [--quotas 1,16] [--mshrs 1,4] [--per-qp 4] [--seed N]

64-byte unsignaled SENDs (RoCEv2/IPv4, MTU 4096, the default W = 64), ``--per-qp`` of them on every QP,
posted round robin with every doorbell rung before ENABLE; host memory answers every read burst a fixed
latency after its AR; the frame sink is always ready; every run is compared with the golden model
(:func:`rnic.sim.bench_engine_tb.bench_rate`). The first round (one message per QP: the cold misses) is
warm-up; efficiency (ideal beats / clocks) and messages per 1000 clocks count from the second round's first
beat. One Verilator build per ``(max_qps, mshrs)``: ``max_qps`` is the smallest power of two that holds the
QPs, at least the default 256. ``--quick``: 16 and 256 QPs, 50-clock memory, one MSHR.

Writes ``DIR/qps.csv``, ``DIR/report.md``, ``DIR/results.json`` and, with matplotlib, ``DIR/qps.png``.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from ..model.config import RnicConfig

__all__ = ["plan", "config_for", "run_bench_qps", "markdown"]

FIELDS = ("qps", "mem_latency", "quota", "mshrs", "max_qps", "messages", "frames", "clocks", "efficiency",
          "msgs_per_kclk", "qpc_lookups", "qpc_hits", "qpc_misses")


def config_for(qps: int, mshrs: int, base: RnicConfig | None = None) -> RnicConfig:
    """The engine a run of ``qps`` QPs with ``mshrs`` cache MSHRs needs."""
    base = base or RnicConfig()
    max_qps = max(base.max_qps, 1 << (qps - 1).bit_length())
    return base.replace(max_qps=max_qps, qpc={"mshrs": mshrs})


def plan(qps=(16, 256, 4096), latencies=(50, 200), quotas=(1, 16), mshrs=(1, 4), per_qp=4) -> dict:
    """The runs, grouped by engine configuration: ``{config: [rate plan items]}``."""
    out: dict[RnicConfig, list[dict]] = {}
    for n in mshrs:
        for q in qps:
            items = out.setdefault(config_for(q, n), [])
            items += [{"part": "rate", "qps": q, "messages": per_qp * q, "mem_latency": lat, "quota": quota,
                       "size": 64, "mtu": 4096} for lat in latencies for quota in quotas]
    return out


def run_bench_qps(out: Path, *, qps, latencies, quotas, mshrs, per_qp=4, seed=1, status=print) -> list[dict]:
    """Run :func:`plan`'s measurements (one simulator launch per configuration) and write the outputs."""
    from .bench_engine import measure
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for config, items in plan(qps, latencies, quotas, mshrs, per_qp).items():
        status(f"engine {config.key()}: {len(items)} runs (build, then simulate)")
        r = measure(seed, config=config, plan=items, log=out / f"sim-{config.key()}.log")
        for x in r["rate"]:
            row = {**x, "mshrs": config.qpc.mshrs, "max_qps": config.max_qps}
            rows.append(row)
            status(f"  {row['qps']} QPs, memory {row['mem_latency']}, quota {row['quota']}, "
                   f"MSHRs {row['mshrs']}: efficiency {row['efficiency']:.3f}")
    rows.sort(key=lambda x: (x["mem_latency"], x["quota"], x["mshrs"], x["qps"]))
    with open(out / "qps.csv", "w", newline="") as f:
        w = csv.DictWriter(f, FIELDS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    (out / "results.json").write_text(json.dumps(rows, indent=1))
    (out / "report.md").write_text(markdown(rows, seed))
    _plot(rows, out / "qps.png")
    return rows


def markdown(rows: list[dict], seed: int = 1) -> str:
    from .bench_engine import md_table
    head = [f"64-byte SENDs at W = 64, seed {seed}: efficiency (messages per 1000 clocks), after the first round; "
            "the cache's lookups / hits / misses over the whole run.", ""]
    table = md_table(("memory latency", "quota", "MSHRs", "QPs", "messages", "efficiency", "msgs / kclk",
                      "QPC lookups / hits / misses"),
                     [(x["mem_latency"], x["quota"], x["mshrs"], x["qps"], x["messages"], f"**{x['efficiency']:.3f}**",
                       x["msgs_per_kclk"], f"{x['qpc_lookups']} / {x['qpc_hits']} / {x['qpc_misses']}") for x in rows])
    return "\n".join(head + table) + "\n"


def _plot(rows, path: Path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(7, 4.2))
    curves = sorted({(x["mem_latency"], x["quota"]) for x in rows})
    counts = sorted({x["mshrs"] for x in rows})
    styles = ("-", "--", ":", "-.")
    for c, (lat, quota) in enumerate(curves):
        for k, n in enumerate(counts):
            pts = sorted((x["qps"], x["efficiency"]) for x in rows
                         if (x["mem_latency"], x["quota"], x["mshrs"]) == (lat, quota, n))
            ax.plot([p[0] for p in pts], [p[1] for p in pts], color=f"C{c}", linestyle=styles[k % len(styles)],
                    marker="os^v"[k % 4], markersize=7 - 2 * k, linewidth=2.5 - k,
                    label=f"memory {lat}, quota {quota}, {n} MSHR{'s' if n > 1 else ''}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("active QPs")
    ax.set_ylabel("wire efficiency, 64-byte SENDs")
    ax.set_ylim(0, 1.05)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
