"""``python -m rnic.sim bench-pair``: RC between two RTL engines, measured: goodput without loss, goodput
against the loss rate beside the go-back-N bound, and message latency.

    python -m rnic.sim bench-pair --out DIR [--quick] [--parts goodput,loss,latency] [--seeds 3]

One simulator launch of ``rnic_pair`` (:func:`rnic.sim.pair_top.build_pair`, the default configuration,
W = 64) runs every item of the plan (:mod:`rnic.sim.bench_pair_tb`): engine A sends RC messages to engine
B over links that lose each frame with the item's probability, both ways; the hardware timers run; host
memory answers every read burst 50 clocks after its AR, the frame sinks never stall. No model runs beside
the engines (RC timing depends on when responses arrive); the end-to-end scoreboard checks every run.
The timers: ``TIMER_TICK`` :data:`TICK` clocks and every QP's ``ack_timeout`` :data:`ACK_TIMEOUT`, a local
ACK timeout of ``4 << ACK_TIMEOUT`` ticks.

Figures (clocks are beats of the W-bit stream). The link is store and forward and lossless apart from
its drawn losses: it hands a frame to the peer after its last beat and waits while the peer's input is
not ready (as a fabric with pause frames would), so a receiver slower than the wire slows the sender's
completions, not its frames.

* **goodput**: payload bytes / (W/8 × clocks from the first data beat to the requester's last CQE);
* **sender wire use**: the data direction's ideal beats / clocks from its first beat to its last, as the
  frames leave the sender;
* **header bound**: payload / (W/8 × ideal beats), the goodput of a wire that is never idle;
* **go-back-N bound** at loss ``p``: the lossless goodput × ``(1 - p) / (1 + (n - 1) p)``, the classic
  efficiency of go-back-N when each lost data frame costs the ``n`` frames of a round trip, found at once
  (a NAK, never a timeout); ``n`` is the unloaded round trip of a lone 1 KiB WRITE (its first data beat
  to its CQE) in frame times, plus the lost frame;
* **latency**: doorbell write to the peer's receive CQE and to the requester's own CQE.

Writes ``DIR/results.json``, ``goodput.csv``, ``loss.csv``, ``latency.csv``, ``report.md``, ``loss.png``
(with matplotlib) and ``sim.log``.
"""

from __future__ import annotations

import csv
import json
import math
import time
from pathlib import Path

from ..model.timers import ack_timeout_ticks
from .bench_engine import md_table

__all__ = ["PARTS", "TICK", "ACK_TIMEOUT", "plan", "run_bench_pair", "tables", "write_outputs"]

PARTS = ("goodput", "loss", "latency")
TICK = 16                   # clocks per timer tick (TIMER_TICK)
ACK_TIMEOUT = 8             # the QPs' local ACK timeout: 1 024 ticks = 16 384 clocks
MEMORY = 50                 # clocks from a read burst's AR to its first data beat
LOSSES = (0.0, 0.001, 0.01, 0.05)


def _item(op, size, messages, mtu, loss=0.0, seed=1, poll=8):
    return {"op": op, "size": size, "messages": messages, "mtu": mtu, "loss": loss, "seed": seed, "memory": MEMORY,
            "tick": TICK, "ack_timeout": ACK_TIMEOUT, "poll": poll}


def plan(quick: bool = False, parts=PARTS, seeds: int = 3) -> list[dict]:
    """The runs, in simulation order; each has a ``part``."""
    out = []
    if "goodput" in parts:
        shapes = ((4096, 4096),) if quick else ((4096, 4096), (4096, 1024), (1024, 1024))
        for op in ("RDMA_WRITE", "RDMA_READ"):
            out += [{"part": "goodput", **_item(op, size, 8 if quick else 32, mtu)} for size, mtu in shapes]
    if "loss" in parts:
        out.append({"part": "round trip", **_item("RDMA_WRITE", 1024, 1, 1024, poll=1)})
        for loss in LOSSES:
            out += [{"part": "loss", **_item("RDMA_WRITE", 4096, 16 if quick else 64, 1024, loss, seed)}
                    for seed in range(1, (1 if quick or loss == 0 else seeds) + 1)]
    if "latency" in parts:
        for op, size in (("SEND", 64), ("RDMA_WRITE_WITH_IMM", 4096), ("RDMA_READ", 64), ("RDMA_READ", 4096)):
            out.append({"part": "latency", **_item(op, size, 1, 4096, poll=1)})
    return out


def run_bench_pair(out: Path, quick=False, parts=PARTS, seeds=3, status=print) -> list[dict]:
    """Build the pair (cached), run the plan in one simulator launch, write the outputs; the results."""
    from ..model.config import RnicConfig
    from . import toolchain
    from .pair_top import build_pair
    config = RnicConfig()
    out.mkdir(parents=True, exist_ok=True)
    items = plan(quick, parts, seeds)
    status("building the two engines with Verilator (about six minutes the first time, then cached) ...")
    build = build_pair(config)
    job, result = out / "bench-pair-job.json", out / "bench-pair-raw.json"
    job.write_text(json.dumps({"items": items, "out": str(result.resolve())}))
    result.unlink(missing_ok=True)
    status(f"{len(items)} runs on the two engines (log: {out / 'sim.log'}) ...")
    started = time.perf_counter()
    toolchain.run(build, "rnic.sim.bench_pair_tb", seed=1, testcase="bench_pair", quiet=True,
                  extra_env={"RNIC_BENCH_PAIR": str(job.resolve()), **config.env()}, log_file=out / "sim.log")
    results = json.loads(result.read_text()) if result.exists() else []
    if len(results) != len(items):
        raise RuntimeError(f"the simulation stopped after {len(results)} of {len(items)} runs (see {out / 'sim.log'})")
    wall = round(time.perf_counter() - started, 1)
    write_outputs(out, results, config.width, wall)
    return results


def _goodput(r: dict, width: int) -> dict:
    beat = width // 8
    return {"goodput": r["payload"] / (beat * (r["t_done"] - r["t_first"])),
            "sender wire use": r["data_beats"] / (r["t_last"] - r["t_first"]),
            "header bound": r["payload"] / (beat * r["data_beats"])}


def _round_trip(r: dict) -> int:
    """Frames sent in one unloaded round trip: the lone 1 KiB WRITE ``r``'s first data beat to its CQE, in
    frame times (ideal beats), plus the lost frame itself."""
    return 1 + math.ceil((r["t_done"] - r["t_first"]) / r["data_beats"])


def tables(results: list[dict], width: int) -> dict[str, list[dict]]:
    """The three tables (rows of column name to value) of the results."""
    out = {"goodput": [], "loss": [], "latency": []}
    for r in results:
        if r["part"] == "goodput":
            g = _goodput(r, width)
            out["goodput"].append({"operation": r["op"], "message": r["size"], "MTU": r["mtu"],
                                   "messages": r["messages"], "data frames": r["data_frames"],
                                   "clocks": r["t_done"] - r["t_first"],
                                   **{k: round(v, 4) for k, v in g.items()},
                                   "frames back": r["ack_frames"], "retransmits": r["requester"]["retransmits"],
                                   "timeouts": r["requester"]["timeouts"], "problems": len(r["problems"])})
        elif r["part"] == "latency":
            out["latency"].append({"operation": r["op"], "message": r["size"], "MTU": r["mtu"],
                                   "doorbell to peer's receive CQE": r["t_recv"] if r["t_recv"] is not None else "",
                                   "doorbell to own CQE": r["t_done"], "problems": len(r["problems"])})
    losses = [r for r in results if r["part"] == "loss"]
    base = next((r for r in losses if r["loss"] == 0), None)
    trip = next((r for r in results if r["part"] == "round trip"), None)
    n = _round_trip(trip) if trip else None
    g0 = _goodput(base, width)["goodput"] if base and n else None
    for loss in sorted({r["loss"] for r in losses}):
        runs = [r for r in losses if r["loss"] == loss]
        good = [_goodput(r, width)["goodput"] for r in runs]
        req = {k: sum(r["requester"][k] for r in runs) for k in ("retransmits", "timeouts", "naks_seq")}
        lost = sum(r["links"]["a-to-b"]["lost"] for r in runs), sum(r["links"]["b-to-a"]["lost"] for r in runs)
        row = {"loss": loss, "runs": len(runs), "messages": sum(r["messages"] for r in runs),
               "data frames lost": lost[0], "ACK frames lost": lost[1],
               "goodput (mean)": round(sum(good) / len(good), 4), "goodput (min)": round(min(good), 4),
               "go-back-N bound": round(g0 * (1 - loss) / (1 + (n - 1) * loss), 4) if g0 else "",
               "retransmits": req["retransmits"], "timeouts": req["timeouts"], "sequence NAKs": req["naks_seq"],
               "problems": sum(len(r["problems"]) for r in runs)}
        out["loss"].append(row)
    return out


def _md(rows: list[dict]) -> str:
    cells = [[f"{v:,}" if isinstance(v, int) else v for v in r.values()] for r in rows]
    return "\n".join(md_table(list(rows[0]), cells))


def write_outputs(out: Path, results: list[dict], width: int, wall: float) -> None:
    t = tables(results, width)
    (out / "results.json").write_text(json.dumps({"width": width, "tick": TICK, "ack_timeout": ACK_TIMEOUT,
                                                  "memory": MEMORY, "wall_seconds": wall, "runs": results}, indent=1))
    for name, rows in t.items():
        if rows:
            with open(out / f"{name}.csv", "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=list(rows[0]))
                w.writeheader()
                w.writerows(rows)
    trip = next((r for r in results if r["part"] == "round trip"), None)
    timeout = TICK * ack_timeout_ticks(ACK_TIMEOUT)
    parts = [f"# bench-pair: RC between two RTL engines (W = {width})", "",
             f"Memory {MEMORY} clocks, local ACK timeout {timeout:,} clocks (TIMER_TICK {TICK}, ack_timeout "
             f"{ACK_TIMEOUT}), {wall} s of wall time."]
    if trip:
        parts.append(f"Unloaded round trip (a lone 1 KiB WRITE, its first data beat to its CQE): "
                     f"{trip['t_done'] - trip['t_first']:,} clocks, {_round_trip(trip)} frames with the lost one.")
    for name, rows in t.items():
        if rows:
            parts += ["", f"## {name}", "", _md(rows)]
    (out / "report.md").write_text("\n".join(parts) + "\n")
    if t["loss"]:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return
        rows = t["loss"]
        fig, ax = plt.subplots(figsize=(6, 4))
        xs = [r["loss"] * 100 for r in rows]
        ax.plot(xs, [r["goodput (mean)"] for r in rows], "o-", label="RTL pair (mean of runs)")
        if rows[0]["go-back-N bound"] != "":
            ax.plot(xs, [r["go-back-N bound"] for r in rows], "s--", label="go-back-N bound")
        ax.set_xscale("symlog", linthresh=0.1)
        ax.set_xticks(xs, [f"{x:g}" for x in xs])
        ax.set_xlabel("frames lost each way (%)")
        ax.set_ylabel("goodput (payload / wire)")
        ax.set_title(f"4 KiB RDMA WRITEs, MTU 1024, W = {width}\nlocal ACK timeout {timeout:,} clocks", fontsize=10)
        ax.set_ylim(0, 1)
        ax.grid(True, alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / "loss.png", dpi=120)
        plt.close(fig)

