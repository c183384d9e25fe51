"""``python -m rnic.sim loopback SCENARIO --out DIR [--loss P] [--dup P] [--reorder N] [--corrupt P] [--seed S]``:
two model engines over a lossy link (:mod:`rnic.sim.loopback`), a report per node and the end-to-end
verdict, the frames each node sent as ``DIR/a-to-b-<mode>.pcap`` and ``DIR/b-to-a-<mode>.pcap``. Exit
status 2 when the scoreboard finds a message lost, repeated, out of order or wrong on RC, or wrong on UC /
UD. The golden model runs alone; with ``--rtl``, the scenario also runs on two RTL engines
(:mod:`rnic.sim.pair_tb`; RC in lockstep with the model, :mod:`rnic.sim.pair_rc`) and every frame, memory
byte and receive counter (the requester's ``REQ_*`` too) is compared with the model's; the counts printed
are the RTL's.

The scenario file (TOML or JSON)::

    mode = "rocev2-ipv4"      # a link mode (LinkMode slug)
    service = "RC"            # RC, UC or UD: both QPs
    mtu = 1024
    seed = 1                  # message bytes and random messages (--seed overrides)
    retry = 7                 # retry_cnt and rnr_retry (7 = RNR retries for ever)
    rnr = 0                   # post the receive WQEs after this many quiet periods (RNR NAKs first)
    qps = 1                   # QP pairs (1 to 7); message i goes on pair i mod qps
    [random]                  # random messages of the service's operations
    a = 15                    # from A to B
    b = 8                     # from B to A
    [[a]]                     # and/or explicit messages from A (same for [[b]])
    op = "RDMA_WRITE"         # WqeOpcode name
    length = 4096
    [link.a-to-b]             # knobs of one direction, over the command line's
    drop_nth = [0, 3]
"""

from __future__ import annotations

import collections
import json
import random
import tomllib
from pathlib import Path

from ..model.descriptor import LinkMode
from ..model.pcap import write_pcap_for_mode
from ..model.qpc import ServiceType
from ..model.wqe import CqeStatus, WqeOpcode
from .link import LinkKnobs
from .loopback import Loopback, Message, cq_entries, random_messages

__all__ = ["load", "summary", "report", "run_loopback"]

_KNOBS = ("loss", "dup", "reorder", "corrupt", "hold", "drop_nth", "cut")


def load(path: str | Path, *, seed: int | None = None, knobs: dict | None = None, rnr: int | None = None) -> Loopback:
    """A :class:`Loopback` from a scenario file; ``knobs`` (command line) apply to both directions under the
    file's ``[link.a-to-b]`` / ``[link.b-to-a]``. ValueError on anything malformed."""
    path = Path(path)
    try:
        text = path.read_bytes()
        data = tomllib.loads(text.decode()) if path.suffix == ".toml" else json.loads(text)
    except OSError as err:
        raise ValueError(f"{path}: {err.strerror}") from None
    except (tomllib.TOMLDecodeError, json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not valid {'TOML' if path.suffix == '.toml' else 'JSON'}: {err}") from None
    known = {"mode", "service", "mtu", "seed", "retry", "rnr", "qps", "random", "a", "b", "link"}
    if not isinstance(data, dict) or set(data) - known:
        raise ValueError(f"{path}: unknown keys {sorted(set(data) - known) if isinstance(data, dict) else data!r}")
    modes = {m.slug: m for m in LinkMode}
    mode = data.get("mode", "rocev2-ipv4")
    if mode not in modes:
        raise ValueError(f"{path}: mode {mode!r}: one of {', '.join(modes)}")
    try:
        service = ServiceType[str(data.get("service", "RC")).upper()]
    except KeyError:
        raise ValueError(f"{path}: service {data.get('service')!r}: RC, UC or UD") from None
    mtu = data.get("mtu", 1024)
    if mtu not in (256, 512, 1024, 2048, 4096):
        raise ValueError(f"{path}: mtu {mtu!r}: 256, 512, 1024, 2048 or 4096")
    seed = data.get("seed", 1) if seed is None else seed
    rng = random.Random(seed)
    msgs = {}
    for side in ("a", "b"):
        out = random_messages(rng, int(data.get("random", {}).get(side, 0)), mtu, service)
        for i, m in enumerate(data.get(side, [])):
            try:
                op = WqeOpcode[m["op"]]
                length = int(m.get("length", 8 if "ATOMIC" in m["op"] else 0))
            except (KeyError, TypeError, ValueError):
                raise ValueError(f"{path}: [[{side}]] #{i}: needs op (a WqeOpcode name) and length") from None
            body = rng.randbytes(length) if op not in (WqeOpcode.ATOMIC_CMP_SWAP, WqeOpcode.ATOMIC_FETCH_ADD) \
                else int(m.get("orig", 0)).to_bytes(8, "little")
            out.append(Message(op, length, body, int(m.get("compare_add", 0)), int(m.get("swap", 0)),
                               bool(m.get("signaled", True))))
        msgs[side] = out
    links = {}
    for name in ("a-to-b", "b-to-a"):
        kw = {k: v for k, v in (knobs or {}).items() if v is not None}
        kw.update(data.get("link", {}).get(name, {}))
        bad = set(kw) - set(_KNOBS)
        if bad:
            raise ValueError(f"{path}: [link.{name}]: unknown knobs {sorted(bad)}; known: {', '.join(_KNOBS)}")
        if "drop_nth" in kw:
            kw["drop_nth"] = frozenset(kw["drop_nth"])
        links[name] = LinkKnobs(**kw)
    retry = int(data.get("retry", 7))
    return Loopback(msgs["a"], msgs["b"], service=service, mode=modes[mode], mtu=mtu, ab=links["a-to-b"],
                    ba=links["b-to-a"], seed=seed, retry=(retry, retry), rnr=int(data.get("rnr", 0)) if rnr is None else rnr,
                    qps=int(data.get("qps", 1)))


def summary(lb: Loopback, mems: dict | None = None, sent: dict | None = None, links: dict | None = None,
            counts: dict | None = None) -> dict:
    """What the report prints, as JSON-able data: per node its messages, CQEs by status (read from ``mems``,
    default the model's memory) and requester counts (``counts``, default the model's), per link the frames
    sent (``sent``, default the model's) and their fates (``links``), and the scoreboard's findings on
    ``mems``."""
    mems = mems or {"a": lb.pair.a.mem, "b": lb.pair.b.mem}
    problems = lb.check(mems)
    nodes = {}
    for name, node, msgs, peer in (("a", lb.pair.a, lb.messages, "b-to-a"), ("b", lb.pair.b, lb.back, "a-to-b")):
        nodes[name] = {"posted": len(msgs), "signaled": sum(m.signaled for m in msgs),
                       "cqes": dict(collections.Counter(CqeStatus(c.status).name for c in cq_entries(mems[name], 0))),
                       "requester": dict(counts[name] if counts else node.req.counts),
                       "delivered": list(lb.delivered.get(peer, (0, 0)))}
    sent = sent or {"a-to-b": [f.hex() for f in lb.captured["a-to-b"]], "b-to-a": [f.hex() for f in lb.captured["b-to-a"]]}
    links = links or {name: dict(link.counts) for name, link in lb.links.items()}
    return {"nodes": nodes, "sent": sent, "links": links, "problems": problems}


def report(lb: Loopback, s: dict, out: Path, mismatches: list[str] = ()) -> int:
    """Print the summary ``s``, write the pcaps; the exit status (2: a mismatch or a scoreboard fault)."""
    print(f"{'node':<5} {'posted':>6} {'signaled':>8}  {'CQEs by status':<30} {'retransmits':>11} {'timeouts':>8} "
          f"{'RNR retries':>11}  NAKs 60/61/62/63/RNR  delivered to it")
    for name, n in s["nodes"].items():
        c = n["requester"]
        naks = "/".join(str(c[k]) for k in ("naks_seq", "naks_inv", "naks_access", "naks_op", "rnr_naks"))
        text = ", ".join(f"{v} {k}" for k, v in sorted(n["cqes"].items())) or "-"
        print(f"{name:<5} {n['posted']:>6} {n['signaled']:>8}  {text:<30} {c['retransmits']:>11} {c['timeouts']:>8} "
              f"{c['rnr_retries']:>11}  {naks:<20} {n['delivered'][1]} of {n['delivered'][0]} receive messages")
    out.mkdir(parents=True, exist_ok=True)
    for name, frames in s["sent"].items():
        counts = s["links"][name]
        path = out / f"{name}-{lb.mode.slug}.pcap"
        write_pcap_for_mode(path, lb.mode, [bytes.fromhex(f) for f in frames])
        print(f"link {name}: {len(frames)} frames sent, {counts['lost']} lost, {counts['duplicated']} duplicated, "
              f"{counts['reordered']} held back, {counts['corrupted']} corrupted  {path}")
    code = 0
    if mismatches:
        print("RTL and model differ:")
        for line in mismatches[:20]:
            print(f"  {line}")
        code = 2
    if s["problems"]:
        print("end-to-end verdict: FAILED")
        for line in s["problems"][:20]:
            print(f"  {line}")
        return 2
    what = ("every message arrived once, in order, and completed once on both sides" if lb.service == ServiceType.RC
            else "every message completed; what arrived is what was sent")
    print(f"end-to-end verdict: {what} (scoreboard independent of the model)")
    return code


def run_loopback(scenario, out: Path, *, seed: int | None = None, knobs: dict | None = None, rtl: bool = False,
                 status=print) -> int:
    lb = load(scenario, seed=seed, knobs=knobs)
    k = lb.ab
    where = "two RTL engines beside the golden model" if rtl else "the golden model"
    status(f"loopback: {lb.mode.slug} {lb.service.name} MTU {lb.mtu}, {lb.qps} QP pair(s), {len(lb.messages)} "
           f"messages A to B and {len(lb.back)} B to A; link loss {k.loss} dup {k.dup} reorder {k.reorder} "
           f"corrupt {k.corrupt} (seed {lb.seed}; {where})")
    if not rtl:
        lb.run()
        return report(lb, summary(lb), out)
    if lb.rnr:
        raise ValueError("--rtl posts the receive WQEs up front: leave rnr out of the scenario")
    from ..model.config import RnicConfig
    from . import toolchain
    from .pair_top import build_pair
    out.mkdir(parents=True, exist_ok=True)
    config = RnicConfig()
    status("building the two engines with Verilator (about six minutes the first time, then cached) ...")
    build = build_pair(config)
    job, result = out / "loopback-job.json", out / "loopback.json"
    job.write_text(json.dumps({"scenario": str(Path(scenario).resolve()), "seed": seed, "knobs": knobs or {},
                               "out": str(result.resolve())}))
    result.unlink(missing_ok=True)
    toolchain.run(build, "rnic.sim.loopback_tb", seed=lb.seed, testcase="loopback", quiet=True,
                  extra_env={"RNIC_LOOPBACK": str(job.resolve()), **config.env()}, log_file=out / "sim.log")
    if not result.exists():
        raise RuntimeError(f"the simulation stopped before its report (see {out / 'sim.log'})")
    r = json.loads(result.read_text())
    code = report(lb, r["summary"], out, r["mismatches"])
    if not r["mismatches"]:
        print("RTL and model agree on every frame each engine sent, both memories and the receive counters.")
    return code
