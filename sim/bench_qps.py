"""``python -m rnic.sim bench-qps``: the engine's message rate against the number of active QPs.

    python -m rnic.sim bench-qps --out DIR [--quick] [--qps 16,256,4096] [--latencies 50,200]
                                 [--quotas 1,16] [--mshrs 1,4] [--prefetch 0,2] [--rx 0,1] [--per-qp 4]
                                 [--seed N]

64-byte unsignaled SENDs (RoCEv2/IPv4, MTU 4096, the default W = 64), ``--per-qp`` of them on every QP,
posted round robin with every doorbell rung before ENABLE; host memory answers every read burst a fixed
latency after its AR; the frame sink is always ready; every run is compared with the golden model
(:func:`rnic.sim.bench_engine_tb.bench_rate`). With ``--rx 1`` a run also offers one 64-byte frame per
message on ``s_axis``, back to back from ENABLE on, each for a QP drawn at random (a UC SEND to the RC QPs,
which the responder looks up and drops: :func:`rnic.sim.bench_engine_tb.rx_frames`). The first round (one
message per QP: the cold misses) is warm-up; efficiency (ideal beats / clocks) and messages per 1000 clocks
count from the second round's first beat. One Verilator build per ``(max_qps, mshrs, prefetch)``
(``prefetch``: ``RnicConfig.ctx_prefetch``): ``max_qps`` is the smallest power of two that holds the QPs, at
least the default 256. ``--quick``: 16 and 256 QPs, 50-clock memory, one MSHR, prefetch off and on.

Writes ``DIR/qps.csv``, ``DIR/report.md``, ``DIR/results.json`` and, with matplotlib, ``DIR/qps.png``.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from ..model.config import RnicConfig

__all__ = ["plan", "config_for", "run_bench_qps", "markdown"]

FIELDS = ("qps", "mem_latency", "quota", "mshrs", "prefetch", "rx", "rx_dropped", "max_qps", "messages", "frames",
          "clocks", "run_clocks", "efficiency", "msgs_per_kclk", "qpc_lookups", "qpc_hits", "qpc_misses")


#: Published figures for commodity RNICs (relative message rate against active connections), drawn beside ours
#: (docs/qp-context.md cites them): (label, connections, fraction of peak, connections span or None).
PUBLISHED = (
    ("StaR, ICNP 2021: peak rate only below 450 connections", 450, 1.0, None),
    ("PipeDevice, CoNEXT 2022: -50 % at 4 096 connections", 4096, 0.5, None),
    ("ScalaRNIC, ISCAS 2023: -47 % at \"a few thousand\"", 3000, 0.53, (2000, 5000)),
)


def config_for(qps: int, mshrs: int, prefetch: int | None = None, base: RnicConfig | None = None) -> RnicConfig:
    """The engine a run of ``qps`` QPs with ``mshrs`` cache MSHRs and context prefetch distance ``prefetch``
    (default: the configuration's) needs."""
    base = base or RnicConfig()
    max_qps = max(base.max_qps, 1 << (qps - 1).bit_length())
    prefetch = base.ctx_prefetch if prefetch is None else prefetch
    return base.replace(max_qps=max_qps, ctx_prefetch=prefetch, qpc={"mshrs": mshrs})


def plan(qps=(16, 256, 4096), latencies=(50, 200), quotas=(1, 16), mshrs=(1, 4), per_qp=4,
         prefetch=(0, 2), rx=(0, 1)) -> dict:
    """The runs, grouped by engine configuration: ``{config: [rate plan items]}``."""
    out: dict[RnicConfig, list[dict]] = {}
    for p in prefetch:
        for n in mshrs:
            for q in qps:
                items = out.setdefault(config_for(q, n, p), [])
                items += [{"part": "rate", "qps": q, "messages": per_qp * q, "mem_latency": lat, "quota": quota,
                           "size": 64, "mtu": 4096, "rx": per_qp * q * r} for lat in latencies for quota in quotas
                          for r in rx]
    return out


def run_bench_qps(out: Path, *, qps, latencies, quotas, mshrs, prefetch=(0, 2), rx=(0, 1), per_qp=4, seed=1,
                  status=print) -> list[dict]:
    """Run :func:`plan`'s measurements (one simulator launch per configuration) and write the outputs."""
    from .bench_engine import measure
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for config, items in plan(qps, latencies, quotas, mshrs, per_qp, prefetch, rx).items():
        status(f"engine {config.key()}: {len(items)} runs (build, then simulate)")
        r = measure(seed, config=config, plan=items, log=out / f"sim-{config.key()}.log")
        for x in r["rate"]:
            row = {**x, "mshrs": config.qpc.mshrs, "prefetch": config.ctx_prefetch, "max_qps": config.max_qps}
            rows.append(row)
            status(f"  {row['qps']} QPs, memory {row['mem_latency']}, quota {row['quota']}, "
                   f"MSHRs {row['mshrs']}, prefetch {row['prefetch']}, {row['rx']} frames in: "
                   f"efficiency {row['efficiency']:.3f}")
    rows.sort(key=lambda x: (x["mem_latency"], x["quota"], x["rx"] > 0, x["prefetch"], x["mshrs"], x["qps"]))
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
            "the cache's lookups / hits / misses over the whole run; frames in: 64-byte frames for random QPs "
            "offered at the same time (every one looked up and dropped).", ""]
    table = md_table(("memory latency", "quota", "prefetch", "MSHRs", "QPs", "messages", "frames in",
                      "frames in / kclk", "efficiency", "msgs / kclk", "QPC lookups / hits / misses"),
                     [(x["mem_latency"], x["quota"], x.get("prefetch", 0), x["mshrs"], x["qps"], x["messages"],
                       x.get("rx", 0), _rx_rate(x),
                       f"**{x['efficiency']:.3f}**",
                       x["msgs_per_kclk"], f"{x['qpc_lookups']} / {x['qpc_hits']} / {x['qpc_misses']}") for x in rows])
    return "\n".join(head + table) + "\n"


def _rx_rate(row) -> str:
    """Frames in per 1 000 clocks over the whole run (ENABLE to idle), or a dash."""
    if not row.get("rx") or not row.get("run_clocks"):
        return "–"
    return f"{1000 * row['rx'] / row['run_clocks']:.2f}"


def _plot(rows, path: Path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, (ax, rel) = plt.subplots(1, 2, figsize=(12, 4.6))
    curves = sorted({(x["mem_latency"], x["quota"]) for x in rows})
    variants = sorted({(x.get("rx", 0) > 0, x.get("prefetch", 0), x["mshrs"]) for x in rows})
    styles = ("-", "--", ":", "-.")
    for c, (lat, quota) in enumerate(curves):
        for k, (rx, pf, n) in enumerate(variants):
            pts = sorted((x["qps"], x["efficiency"]) for x in rows
                         if (x["mem_latency"], x["quota"], x.get("rx", 0) > 0, x.get("prefetch", 0), x["mshrs"]) ==
                         (lat, quota, rx, pf, n))
            if not pts:
                continue
            style = dict(color=f"C{c}", linestyle=styles[k % len(styles)], marker="os^v<>"[k % 6],
                         markersize=max(3, 8 - k), linewidth=max(0.8, 2.5 - 0.25 * k))
            label = (f"memory {lat}, quota {quota}, {n} MSHR{'s' if n > 1 else ''}, prefetch {pf}"
                     + (", frames in" if rx else ""))
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=label, **style)
            rel.plot([p[0] for p in pts], [p[1] / pts[0][1] for p in pts], label=label, **style)
    for k, (label, n, frac, span) in enumerate(PUBLISHED):
        xerr = None if span is None else [[n - span[0]], [span[1] - n]]
        rel.errorbar([n], [frac], xerr=xerr, color="k", marker="XPD"[k % 3], markersize=9, linestyle="none",
                     capsize=4, label=label)
    for a in (ax, rel):
        a.set_xscale("log", base=2)
        a.set_xlabel("active QPs")
        a.grid(True, alpha=0.3)
    ax.set_ylabel("wire efficiency, 64-byte SENDs")
    ax.set_ylim(0, 1.05)
    rel.set_ylabel("message rate / rate at the fewest QPs")
    rel.set_ylim(0, 1.2)
    ax.legend(fontsize=6)
    rel.legend(fontsize=6, loc="lower left")
    rel.set_title("beside published commodity-RNIC figures", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
