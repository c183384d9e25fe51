"""Benchmark of the whole engine on Verilator: doorbell-to-frame latency and wire efficiency.

    python -m rnic.sim.bench_engine [--seed N] [--json out.json]

Runs the ``bench`` cocotb test of :mod:`rnic.sim.bench_engine_tb` on the fast top ``rnic_sim`` (the
same harness and model comparison as the tests; every run is also checked against the model). Host
memory (C++, :mod:`rnic.sim.sim_top`) presents every read burst's first beat a fixed number of
clocks after its AR (bursts overlap); the frame sink is always ready.

* latency: clocks from the DB_SQ_PI write (W handshake) to the first and last frame beat, for a 64-byte
  SEND on a QP whose context is not cached (miss) and then cached (hit);
* efficiency: ideal beats (sum of ceil(frame bytes / bytes per beat)) / clocks from the first to
  the last frame beat, for unsignaled SENDs of 64 B and 4 KiB over 1 and 16 QPs, and inside one 64 KiB message
  (payload reads issued ahead must hide the memory latency between its packets);
* rate: 64-byte SENDs over 16 QPs at 50-clock memory, quota 1 (a turn per message) and quota 16
  with 64 messages a QP (each turn reads its quota of WQEs ahead); the first round is warm-up;
* fairness: one QP with a 64 KiB message against QPs with many 1 KiB messages (MTU 1024, memory
  latency 50), while every QP has work: the largest lead in packets of one QP over another (round
  robin bounds it by the quota), Jain's index over wire bytes up to the last round boundary, and
  the longest run of other QPs' packets between two packets of one QP, against (QPs - 1) x quota.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

__all__ = ["PARTS", "ModelMismatch", "measure", "md_table", "markdown", "main"]

PARTS = ("latency", "efficiency", "message", "rate", "fairness")


class ModelMismatch(RuntimeError):
    """The RTL produced something other than the golden model during a benchmark."""


def measure(seed: int = 1, parts=PARTS, *, config=None, plan: list[dict] | None = None,
            log: Path | None = None, progress=None) -> dict:
    """Run the ``bench`` cocotb test in one simulator launch and return its results by part.

    ``plan``: the measurements (dicts with ``part`` and the arguments of its ``bench_*`` function in
    :mod:`rnic.sim.bench_engine_tb`); without it, the default measurements of ``parts``. ``log``
    receives the simulator's output (default: stdout). ``progress(row)`` is called with each
    measurement's result (``part`` included) as it finishes. The result also holds ``build_s`` (the
    Verilator build or its cache check) and ``launch_s`` (the simulator launch), in wall seconds.
    Raises :class:`ModelMismatch` if the RTL differs from the model, RuntimeError on other failures.
    ``config``: the engine (:class:`rnic.model.config.RnicConfig`; default ``$RNIC_CONFIG``).
    """
    from .rtl import ensure_build
    from .toolchain import run_watched
    from ..model.config import RnicConfig
    t0 = time.perf_counter()
    config = RnicConfig.from_env() if config is None else config
    b = ensure_build(config, fast=True, status=lambda *a, **k: None)     # the fast top rnic_sim
    build_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        out, lines, job = Path(tmp) / "bench.json", Path(tmp) / "progress.jsonl", Path(tmp) / "plan.json"
        env = {"RNIC_BENCH": str(out), "RNIC_BENCH_PARTS": ",".join(parts), "RNIC_BENCH_PROGRESS": str(lines),
               **config.env()}
        if plan is not None:
            job.write_text(json.dumps(plan))
            env["RNIC_BENCH_PLAN"] = str(job)
        seen = 0

        def report():
            nonlocal seen
            if progress is not None and lines.exists():
                done = lines.read_text().splitlines()
                for line in done[seen:]:
                    progress(json.loads(line))
                seen = len(done)

        t0 = time.perf_counter()
        tests, fails, error = run_watched(b, "rnic.sim.bench_engine_tb", poll=report, seed=seed, testcase="bench", extra_env=env,
                                          log_file=log, quiet=log is not None)
        launch_s = time.perf_counter() - t0
        r = json.loads(out.read_text()) if out.exists() else {}
    if "error" in r:
        e = r["error"]
        where = f"{e['item']['part']} {json.dumps({k: v for k, v in e['item'].items() if k != 'part'})}"
        if e["kind"] == "AssertionError":
            raise ModelMismatch(f"{where}: {e['message']}")
        raise RuntimeError(f"benchmark {where} failed: {e['kind']}: {e['message']}")
    if error is not None or fails or not r:
        where = f"; simulator log: {log}" if log else ""
        raise RuntimeError(f"benchmark simulation failed ({error or f'{fails} of {tests} tests'}{where})")
    return r | {"build_s": round(build_s, 2), "launch_s": round(launch_s, 2)}


def md_table(headers, rows) -> list[str]:
    """A Markdown table's lines: ``headers``, then one line per row of cells (each ``str()``-ed)."""
    return (["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
            + ["| " + " | ".join(map(str, row)) + " |" for row in rows])


def _size(n):
    return f"{n // 1024} KiB" if n >= 1024 else f"{n} B"


def markdown(r: dict) -> str:
    """The results as the Markdown tables of docs/engine.md."""
    tables = {
        "latency": (("memory latency (clocks)", "first byte, not cached", "last byte, not cached",
                     "first byte, cached", "last byte, cached"),
                    lambda x: (x["mem_latency"], x["doorbell_to_first_byte_miss"], x["doorbell_to_last_byte_miss"],
                               x["doorbell_to_first_byte_hit"], x["doorbell_to_last_byte_hit"])),
        "efficiency": (("memory latency", "QPs", "message", "MTU", "efficiency"),
                       lambda x: (x["mem_latency"], x["qps"], f"{_size(x['size'])} × {x['messages']}", x["mtu"],
                                  f"{x['efficiency']:.3f}")),
        "message": (("memory latency", "MTU", "frames", "efficiency", "idle clocks after the first frame"),
                    lambda x: (x["mem_latency"], x["mtu"], x["frames"], f"{x['efficiency']:.3f}",
                               x["idle_after_first_frame"])),
        "rate": (("memory latency", "QPs", "quota", "messages", "clocks", "messages / 1000 clocks", "efficiency"),
                 lambda x: (x["mem_latency"], x["qps"], x["quota"], x["messages"], x["clocks"], x["msgs_per_kclk"],
                            f"{x['efficiency']:.3f}")),
        "fairness": (("QPs", "quota", "frames while all busy", "Jain (full rounds)", "max lead (packets)",
                      "max wait (packets)", "wait bound"),
                     lambda x: (x["qps"], x["quota"], x["frames_in_span"], f"{x['jain']:.3f}", x["max_lead_packets"],
                                x["max_wait_packets"], x["bound_wait_packets"])),
    }
    out = []
    for part, (headers, cells) in tables.items():
        if r.get(part):
            out += md_table(headers, map(cells, r[part])) + [""]
    return "\n".join(out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", type=Path, help="write the results here")
    p.add_argument("--markdown", type=Path, help="write the tables of docs/engine.md here")
    p.add_argument("--only", default=",".join(PARTS), help=f"comma-separated parts of {','.join(PARTS)}")
    a = p.parse_args(argv)
    parts = a.only.split(",")
    bad = [x for x in parts if x not in PARTS]
    if bad:
        p.error(f"--only: unknown part(s) {', '.join(bad)}; choose from {', '.join(PARTS)}")
    r = {k: [] for k in PARTS} | measure(a.seed, parts)
    print("doorbell -> first / last frame byte (clocks), 64-byte SEND")
    print(f"{'mem latency':>11} {'QPC miss':>11} {'QPC hit':>11}")
    for x in r["latency"]:
        miss = f"{x['doorbell_to_first_byte_miss']} / {x['doorbell_to_last_byte_miss']}"
        hit = f"{x['doorbell_to_first_byte_hit']} / {x['doorbell_to_last_byte_hit']}"
        print(f"{x['mem_latency']:>11} {miss:>11} {hit:>11}")
    print("\nwire efficiency, unsignaled SENDs, sink always ready")
    print(f"{'mem latency':>11} {'QPs':>4} {'size':>5} {'MTU':>5} {'frames':>6} {'ideal':>7} {'clocks':>7} {'efficiency':>10}")
    for x in r["efficiency"]:
        print(f"{x['mem_latency']:>11} {x['qps']:>4} {x['size']:>5} {x['mtu']:>5} {x['frames']:>6} "
              f"{x['ideal_beats']:>7} {x['clocks']:>7} {x['efficiency']:>10.3f}")
    print("\ninside one 64 KiB message, 1 QP")
    print(f"{'mem latency':>11} {'MTU':>5} {'frames':>6} {'ideal':>7} {'clocks':>7} {'efficiency':>10} "
          f"{'idle after frame 1':>18}")
    for x in r["message"]:
        print(f"{x['mem_latency']:>11} {x['mtu']:>5} {x['frames']:>6} {x['ideal_beats']:>7} {x['clocks']:>7} "
              f"{x['efficiency']:>10.3f} {x['idle_after_first_frame']:>18}")
    print("\nmessage rate, 64-byte SENDs after the first round")
    print(f"{'mem latency':>11} {'QPs':>4} {'quota':>5} {'messages':>8} {'clocks':>7} {'msgs/kclk':>9} {'efficiency':>10}")
    for x in r["rate"]:
        print(f"{x['mem_latency']:>11} {x['qps']:>4} {x['quota']:>5} {x['messages']:>8} {x['clocks']:>7} "
              f"{x['msgs_per_kclk']:>9} {x['efficiency']:>10.3f}")
    print("\nfairness: QP 0 one 64 KiB SEND, other QPs 1 KiB SENDs, MTU 1024, 50-clk memory")
    print(f"{'QPs':>4} {'quota':>5} {'frames':>6} {'clocks':>7} {'Jain':>6} {'max lead':>8} {'max wait':>8} {'bound':>5}")
    for x in r["fairness"]:
        print(f"{x['qps']:>4} {x['quota']:>5} {x['frames_in_span']:>6} {x['clocks_in_span']:>7} {x['jain']:>6.3f} "
              f"{x['max_lead_packets']:>8} {x['max_wait_packets']:>8} {x['bound_wait_packets']:>5}")
    if a.json:
        a.json.write_text(json.dumps(r, indent=1))
    if a.markdown:
        a.markdown.write_text(markdown(r))
    return r


if __name__ == "__main__":
    main()
