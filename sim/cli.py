"""Command line of ``python -m rnic.sim``: ``demo``, ``run``, ``respond``, ``loopback``, ``soak``, ``soak-report``,
``bench``, ``bench-pair``, ``bench-qps``."""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

from ..model.config import add_config_arguments, config_from_args

__all__ = ["main"]


def _status(text="", end="\n"):
    print(text, end=end, file=sys.stderr, flush=True)


def _report(runs, out: Path | None) -> int:
    from .rtl import summary, write_pcaps
    print(summary(runs))
    if out is not None and runs:
        paths = write_pcaps(runs[-1] if len(runs) == 1 else _merged(runs), out)
        for mode, path in paths.items():
            print(f"{mode.slug:<13} {path}")
    bad = [m for r in runs for m in r.mismatches]
    if bad:
        print("RTL and model differ:", file=sys.stderr)
        for m in bad[:20]:
            print(f"  {m}", file=sys.stderr)
        return 2
    return 0


def _merged(runs):
    from .rtl import RtlRun
    return RtlRun([f for r in runs for f in r.frames], 0, [], 0, 0, [m for r in runs for m in r.modes], 0, [],
                  width=runs[0].width)


def _cmd_demo(args) -> int:
    out = Path(args.out)
    if args.model_only:
        from .demo import run_demo
        results = run_demo(out, seed=args.seed)
        print(f"{'link mode':<13} {'frames':>6} {'bytes':>7} {'checked':>7}  pcap")
        for r in results:
            print(f"{r.mode.slug:<13} {r.frames:>6} {r.bytes:>7} {r.checked:>7}  {r.path}")
        total = sum(r.frames for r in results)
        print(f"{total} frames built by the golden model, all parsed back with valid lengths, pad, ICRC and VCRC.")
        return 0
    from .rtl import run_workloads
    from .scenario import every_opcode_workload, text_payload
    out.mkdir(parents=True, exist_ok=True)
    w = every_opcode_workload(random.Random(args.seed), payload=text_payload)
    _status("demo: every link mode x service x opcode on the RTL, checked against the golden model")
    runs = run_workloads([(w, {"latency": (1, 40), "pause": 0.1, "sink_pause": 0.2})], seed=args.seed,
                         config=config_from_args(args), fast=not args.cocotbext,
                         waves=Path(args.waves) if args.waves else None, log=out / "sim.log", status=_status)
    code = _report(runs, out)
    if code == 0:
        print(f"{len(runs[0].frames)} frames from the RTL, identical to the golden model's; "
              f"CQ rings, contexts and registers match too.")
    return code


def _cmd_run(args) -> int:
    from .rtl import run_workloads
    from .scenario_file import load_scenario
    sc = load_scenario(args.scenario)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = run_workloads([(sc.workload, sc.options)], seed=sc.seed, config=config_from_args(args, sc.config),
                         fast=not args.cocotbext, waves=Path(args.waves) if args.waves else None,
                         log=out / "sim.log", status=_status)
    return _report(runs, out)


def _cmd_respond(args) -> int:
    from .respond import run_respond
    return run_respond(args.scenario, args.frames, Path(args.out), width=args.width, status=_status)


def _cmd_loopback(args) -> int:
    from .loopback_cli import run_loopback
    knobs = {"loss": args.loss, "dup": args.dup, "reorder": args.reorder, "corrupt": args.corrupt}
    return run_loopback(args.scenario, Path(args.out), seed=args.seed, knobs=knobs, rtl=args.rtl, status=_status)


def _cmd_soak_loopback(args) -> int:
    from .soak_loopback import TOTALS, run_soak_loopback
    for name, default in (("shard", None), ("recipe", None), ("batch", 4)):
        if getattr(args, name) != default:
            raise ValueError(f"--loopback takes no --{name} (its workloads are small and run in one build; --jobs J runs J at once)")
    if args.cycles is not None and args.workloads is not None:
        raise ValueError("give --cycles or --workloads, not both")
    if not 0 <= args.loss <= 1:
        raise ValueError(f"--loss is a probability, not {args.loss}")
    only = None
    if args.only is not None:
        if not args.only.strip().isdigit():
            raise ValueError(f"--only: {args.only!r}; --loopback reruns one workload index")
        only = int(args.only)
    cycles = args.cycles if args.cycles is not None or args.workloads is not None or only is not None else 200_000
    s = run_soak_loopback(args.seed, args.loss, cycles if only is None else None, args.workloads, only,
                          Path(args.out) if args.out else None, status=_status, jobs=max(1, args.jobs))
    for w in s["workloads"]:
        print(f"workload {w['index']:>4} ({w['mode']}, MTU {w['mtu']}, {w['qps']} QP pairs): {w['clocks']} clocks, "
              f"{w['messages']} messages, {w['retransmits']} retransmits, {w['timeouts']} timeouts, "
              f"{len(w['mismatches'])} mismatches, {len(w['problems'])} scoreboard findings")
        for line in w["mismatches"] + w["problems"]:
            print(f"    {line}")
    t = s["totals"]
    print(f"soak --loopback seed {args.seed}, loss {args.loss}: " + ", ".join(f"{t[k]} {k}" for k in TOTALS)
          + f" ({s['wall_seconds']} s)")
    bad = [w for w in s["workloads"] if w["mismatches"] or w["problems"]]
    for w in bad:
        print(f"rerun workload {w['index']}: python -m rnic.sim soak --loopback --seed {args.seed} --loss {args.loss} "
              f"--only {w['index']}", file=sys.stderr)
    return 2 if bad else 0


def _cmd_soak(args) -> int:
    if args.loopback:
        return _cmd_soak_loopback(args)
    from .soak import SoakPlan, run_soak, summary_path
    plan = SoakPlan.from_args(args, config_from_args(args))
    result = run_soak(plan, status=_status)
    print(result.headline())
    code = _report(result.runs, None)
    for f in result.to_dict()["failures"]:
        print(f"rerun workload {f['index']}: {f['rerun']}", file=sys.stderr)
    if plan.out is not None:
        print(f"summary: {summary_path(plan)}")
    return code


def _cmd_soak_report(args) -> int:
    from .soak import report_main
    return report_main(args.paths)


def _cmd_bench_speed(args) -> int:
    from .bench_speed import main as bench_speed
    return bench_speed(args)


def _cmd_bench_pair(args) -> int:
    from .bench_pair import PARTS, run_bench_pair
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = set(parts) - set(PARTS)
    if unknown or not parts:
        raise ValueError(f"--parts: {args.parts!r}; choose from {', '.join(PARTS)}")
    if args.seeds < 1:
        raise ValueError(f"--seeds {args.seeds}: at least 1")
    out = Path(args.out)
    results = run_bench_pair(out, quick=args.quick, parts=parts, seeds=args.seeds, status=_status)
    print((out / "report.md").read_text())
    bad = [r for r in results if r["problems"]]
    for r in bad:
        print(f"{r['op']} x {r['messages']}, loss {r['loss']}, seed {r['seed']}: {r['problems'][0]}", file=sys.stderr)
    print(f"wrote {out / 'report.md'}")
    return 2 if bad else 0


def _cmd_bench_qps(args) -> int:
    from .bench_qps import run_bench_qps

    def ints(text, flag, least=1):
        try:
            values = [int(v) for v in text.split(",") if v.strip()]
        except ValueError:
            values = []
        if not values or min(values) < least:
            raise ValueError(f"{flag} {text!r}: comma-separated {'positive' if least else 'non-negative'} integers")
        return values
    if args.quick:
        args.qps, args.latencies, args.mshrs, args.prefetch, args.rx = "16,256", "50", "1", "0,2", "0,1"
    if not 2 <= args.per_qp <= 7:
        raise ValueError(f"--per-qp {args.per_qp}: 2 .. 7 (the first round is warm-up; a send queue holds 8 WQEs)")
    prefetch = ints(args.prefetch, "--prefetch", least=0)
    rx = ints(args.rx, "--rx", least=0)
    if max(rx) > 1:
        raise ValueError(f"--rx {args.rx!r}: 0 (transmit alone), 1 (a frame in per message out) or both")
    out = Path(args.out)
    run_bench_qps(out, qps=ints(args.qps, "--qps"), latencies=ints(args.latencies, "--latencies"),
                  quotas=ints(args.quotas, "--quotas"), mshrs=ints(args.mshrs, "--mshrs"), prefetch=prefetch, rx=rx,
                  per_qp=args.per_qp, seed=args.seed, status=_status)
    print((out / "report.md").read_text())
    print(f"wrote {out / 'report.md'}")
    return 0


def _cmd_bench(args) -> int:
    from .bench import PARTS, WIDTHS, run_bench, text_tables
    from .bench_engine import ModelMismatch
    config = config_from_args(args)
    if args.widths is None:
        args.widths = str(config.width)
    widths = [int(w) for w in args.widths.split(",")] if args.widths.replace(",", "").isdigit() else None
    if not widths or any(w not in WIDTHS for w in widths):
        raise ValueError(f"--widths: {args.widths!r}; give a comma-separated list of {', '.join(map(str, WIDTHS))}")
    parts = args.parts.split(",")
    bad = [p for p in parts if p not in PARTS]
    if bad:
        raise ValueError(f"--parts: unknown {', '.join(bad)}; choose from {', '.join(PARTS)}")
    out = Path(args.out)
    try:
        results = run_bench(out, widths=widths, quick=args.quick, seed=args.seed, parts=parts, status=_status,
                            config=config)
    except ModelMismatch as err:
        print(f"RTL and model differ: {err}", file=sys.stderr)
        return 2
    print(text_tables(results))
    print(f"written to {out}: report.md, results.json, the CSVs and (with matplotlib) the PNGs")
    return 0


def _add_path_argument(parser) -> None:
    parser.add_argument("--cocotbext", action="store_true",
                        help="drive the engine with cocotbext-axi bus models in Python, every clock (about 25 times "
                             "slower than the default, where they run inside the simulator)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rnic.sim", description="rnic simulation tools")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="every link mode and opcode on the RTL, checked against the model; pcaps")
    demo.add_argument("--out", required=True, metavar="DIR", help="folder for the pcap files and sim.log")
    demo.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    demo.add_argument("--waves", metavar="FILE.fst|FILE.vcd", help="also write a waveform (FST or VCD, by the suffix)")
    demo.add_argument("--model-only", action="store_true",
                      help="no RTL: the golden model's catalogue of all 38 opcodes per mode")
    _add_path_argument(demo)
    add_config_arguments(demo)
    demo.set_defaults(func=_cmd_demo)
    run = sub.add_parser("run", help="run a scenario file (JSON or TOML, docs/simulation.md) on the RTL")
    run.add_argument("scenario", help="scenario file")
    run.add_argument("--out", required=True, metavar="DIR", help="folder for the pcap files and sim.log")
    run.add_argument("--waves", metavar="FILE.fst|FILE.vcd", help="also write a waveform (FST or VCD, by the suffix)")
    _add_path_argument(run)
    add_config_arguments(run)       # over the scenario's [config]
    run.set_defaults(func=_cmd_run)
    respond = sub.add_parser("respond", help="replay captured requests into the RTL responder beside the model: "
                                             "verdicts, response pcaps, memory changed (docs/receive.md)")
    respond.add_argument("scenario", help="the responder's side: port, QPs, receive WQEs, MRs (JSON or TOML)")
    respond.add_argument("--frames", required=True, metavar="IN.pcap",
                         help="request frames (link type 1 Ethernet without FCS, or ERF / InfiniBand)")
    respond.add_argument("--out", required=True, metavar="DIR", help="folder for the response pcaps and sim.log")
    respond.add_argument("--width", type=int, default=64, choices=(64, 128, 256, 512),
                         help="datapath width in bits (default 64)")
    respond.set_defaults(func=_cmd_respond)
    loop = sub.add_parser("loopback", help="two engines over a lossy link (the golden model): per-node report, "
                                           "end-to-end verdict, pcaps of both directions (docs/reliability.md)")
    loop.add_argument("scenario", help="QPs' link mode, service and MTU, and the messages each way (JSON or TOML)")
    loop.add_argument("--out", required=True, metavar="DIR", help="folder for the pcaps")
    loop.add_argument("--loss", type=float, help="probability that a frame is lost (both directions)")
    loop.add_argument("--dup", type=float, help="probability that a frame arrives twice")
    loop.add_argument("--reorder", type=int, help="a frame held back arrives behind up to N later ones")
    loop.add_argument("--corrupt", type=float, help="probability that one bit of a frame flips")
    loop.add_argument("--seed", type=int, help="random seed (default: the scenario's)")
    loop.add_argument("--rtl", action="store_true", help="UC and UD: also run two RTL engines and compare them "
                                                         "with the model (the first build takes about six minutes)")
    loop.set_defaults(func=_cmd_loopback)
    soak = sub.add_parser("soak", help="random traffic on the RTL until --cycles clocks, scoreboard on",
                          description="Random workloads on the RTL, checked against the golden model. Workload i "
                                      "has its own seed, derived from --seed and i (docs/simulation.md).")
    soak.add_argument("--cycles", type=int, help="clocks to simulate at least, split evenly over the shards "
                                                 "(default 200000)")
    soak.add_argument("--workloads", type=int, metavar="M", help="run workloads 0 .. M-1 (over all shards)")
    soak.add_argument("--seed", type=int, default=1)
    soak.add_argument("--recipe", choices=("small", "big"),
                      help="workload sizes (default: big from --cycles 1000000 on, else small)")
    soak.add_argument("--batch", type=int, default=4, help="workloads per simulator launch (default 4)")
    soak.add_argument("--jobs", type=int, default=1, help="simulator processes at once, sharing one build (default 1)")
    soak.add_argument("--shard", metavar="K/N", help="run only shard K of N (K from 1): workloads i with i %% N == K-1")
    soak.add_argument("--only", metavar="I[,I...]", help="run just these workload indices (the rerun of a failure)")
    soak.add_argument("--out", metavar="DIR", help="folder for the JSON summary and sim.log (sim-job<j>.log per job)")
    soak.add_argument("--loopback", action="store_true",
                      help="RC between two RTL engines over lossy links, in lockstep with the model (docs/reliability.md)")
    soak.add_argument("--loss", type=float, default=0.01,
                      help="--loopback: probability that a frame is lost, and that one is repeated (default 0.01)")
    _add_path_argument(soak)
    add_config_arguments(soak)
    soak.set_defaults(func=_cmd_soak)
    report = sub.add_parser("soak-report", help="merge soak summaries (soak-*.json) of shards, jobs and machines")
    report.add_argument("paths", nargs="+", metavar="DIR|FILE", help="summary files, or folders searched for them")
    report.set_defaults(func=_cmd_soak_report)
    bench = sub.add_parser("bench", help="efficiency, message rate, latency, fairness and simulation speed; "
                                         "CSV, report.md and PNG plots")
    bench.add_argument("--out", required=True, metavar="DIR", help="folder for the CSVs, report.md, results.json, PNGs")
    bench.add_argument("--widths", help="datapath widths in bits, comma-separated (default: the configuration's width)")
    bench.add_argument("--quick", action="store_true", help="fewer sizes, messages and QPs (CI: about 30 s per width once built)")
    bench.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    bench.add_argument("--parts", default="efficiency,rate,latency,fairness",
                       help="comma-separated figures to measure (default all; speed is always reported)")
    add_config_arguments(bench)     # --widths sets the width of each run
    bench.set_defaults(func=_cmd_bench)
    bp = sub.add_parser("bench-pair", help="RC between two RTL engines: goodput, goodput against loss beside the "
                                           "go-back-N bound, latency (docs/reliability.md)")
    bp.add_argument("--out", required=True, metavar="DIR", help="folder for the CSVs, report.md, results.json, loss.png")
    bp.add_argument("--quick", action="store_true", help="fewer messages and one seed per loss rate")
    bp.add_argument("--parts", default="goodput,loss,latency", help="comma-separated: goodput, loss, latency")
    bp.add_argument("--seeds", type=int, default=3, help="runs per lossy rate (default 3)")
    bp.set_defaults(func=_cmd_bench_pair)
    bq = sub.add_parser("bench-qps", help="the engine's message rate against the number of active QPs, with "
                                          "the QP context cache's MSHRs, context prefetch and receive traffic "
                                          "(docs/qp-context.md)")
    bq.add_argument("--out", required=True, metavar="DIR", help="folder for qps.csv, report.md, results.json, qps.png")
    bq.add_argument("--quick", action="store_true", help="16 and 256 QPs, 50-clock memory, one MSHR")
    bq.add_argument("--qps", default="16,256,4096", help="comma-separated active QP counts (default 16,256,4096)")
    bq.add_argument("--latencies", default="50,200", help="memory latencies in clocks (default 50,200)")
    bq.add_argument("--quotas", default="1,16", help="scheduler quotas (default 1,16)")
    bq.add_argument("--mshrs", default="1,4", help="QP context cache MSHR counts (default 1,4)")
    bq.add_argument("--prefetch", default="0,2", help="context prefetch distances, 0 = off (default 0,2)")
    bq.add_argument("--rx", default="0,1", help="0: transmit alone, 1: with a 64-byte frame in for a random QP per "
                                                "message out (default 0,1)")
    bq.add_argument("--per-qp", type=int, default=4, help="messages per QP, 2 .. 7 (default 4)")
    bq.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    bq.set_defaults(func=_cmd_bench_qps)
    speed = sub.add_parser("bench-speed", help="simulation speed: clocks/s on the cocotbext-axi path, the fast path "
                                               "and the ceiling (docs/simulation.md)")
    speed.add_argument("--widths", help="datapath widths in bits, comma-separated (default: the configuration's)")
    speed.add_argument("--workloads", default="demo,send-64k,qps-256", help="comma-separated (default all three)")
    speed.add_argument("--paths", default="cocotbext,fast", help="cocotbext, fast or both (default both)")
    speed.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    speed.add_argument("--out", metavar="DIR", help="also write speed.md and speed.json here")
    add_config_arguments(speed)
    speed.set_defaults(func=_cmd_bench_speed)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (OSError, ValueError, AssertionError, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
