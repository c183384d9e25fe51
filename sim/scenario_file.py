"""User scenario files (JSON or TOML) for ``python -m rnic.sim run``: parsed into a :class:`Workload`.

The schema is documented in ``docs/simulation.md``. Every problem raises :class:`ScenarioError`
with the path of the field (``work[2].opcode``) and what is wrong with it.
"""

from __future__ import annotations

import json
import random
import tomllib
from pathlib import Path

from ..model.config import RnicConfig
from ..model.descriptor import LinkMode
from ..model.qpc import PathMtu, QpState, ServiceType
from ..model.wqe import INLINE_MAX_RC, INLINE_MAX_UD, WqeFlags, WqeOpcode
from .scenario import SGIDS, Workload, WorkloadBuilder, random_workload

__all__ = ["ScenarioError", "Scenario", "load_scenario"]

_MODES = {m.slug: m for m in LinkMode}
_SERVICES = {s.name: s for s in ServiceType}
_MTUS = {m.bytes: m for m in PathMtu}
_OPCODES = {o.name: o for o in WqeOpcode}
_STATES = {s.name: s for s in QpState}


class ScenarioError(ValueError):
    """A scenario file problem: ``str()`` names the field and the problem."""


class Scenario:
    """A parsed scenario: the workload, the engine's configuration (its ``[config]`` table) and
    simulation options."""

    def __init__(self, workload: Workload, seed: int, latency: tuple[int, int], pause: float, sink_pause: float,
                 config: RnicConfig):
        self.workload, self.seed, self.latency, self.pause, self.sink_pause = workload, seed, latency, pause, sink_pause
        self.config = config

    @property
    def options(self) -> dict:
        return {"latency": self.latency, "pause": self.pause, "sink_pause": self.sink_pause}


def _get(d: dict, key: str, where: str, kind, default=None, *, check=None, choices=None):
    if key not in d:
        if default is None:
            raise ScenarioError(f"{where}.{key}: missing")
        return choices[default] if choices is not None else default
    value = d[key]
    if kind is int and isinstance(value, bool) or not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise ScenarioError(f"{where}.{key}: expected {names}, got {value!r}")
    if choices is not None:
        if value not in choices:
            raise ScenarioError(f"{where}.{key}: {value!r} is not one of {', '.join(map(str, choices))}")
        return choices[value]
    if check is not None:
        problem = check(value)
        if problem:
            raise ScenarioError(f"{where}.{key}: {problem}")
    return value


def _range(lo, hi):
    return lambda v: None if lo <= v <= hi else f"{v!r} is outside {lo}..{hi}"


def _no_extra(d: dict, where: str, allowed: set[str]) -> None:
    extra = sorted(set(d) - allowed)
    if extra:
        raise ScenarioError(f"{where}: unknown field{'s' if len(extra) > 1 else ''} {', '.join(extra)} "
                            f"(allowed: {', '.join(sorted(allowed))})")


def parse(data: dict) -> Scenario:
    if not isinstance(data, dict):
        raise ScenarioError("scenario: the top level must be a table/object")
    _no_extra(data, "scenario", {"seed", "config", "engine", "memory", "sink", "qps", "work", "random"})
    seed = _get(data, "seed", "scenario", int, 1)
    rng = random.Random(seed)
    try:
        config = RnicConfig.from_dict(_get(data, "config", "scenario", dict, {}))
    except ValueError as err:
        raise ScenarioError(f"config: {err}") from None
    engine = _get(data, "engine", "scenario", dict, {})
    for moved in ("width", "max_mtu"):
        if moved in engine:
            raise ScenarioError(f"engine.{moved}: an engine parameter; set it in the [config] table")
    _no_extra(engine, "engine", {"quota", "max_burst", "int_mod_count", "int_mod_timer"})
    quota = _get(engine, "quota", "engine", int, 16, check=_range(0, 0xFFFF))
    max_burst = _get(engine, "max_burst", "engine", int, 256, check=_range(1, 256))
    mod_count = _get(engine, "int_mod_count", "engine", int, 1, check=_range(0, 0xFFFF))
    mod_timer = _get(engine, "int_mod_timer", "engine", int, 0, check=_range(0, 0xFFFF_FFFF))
    memory = _get(data, "memory", "scenario", dict, {})
    _no_extra(memory, "memory", {"latency", "pause"})
    lat = _get(memory, "latency", "memory", (int, list), 0)
    if isinstance(lat, int):
        lat = [lat, lat]
    if len(lat) != 2 or not all(isinstance(x, int) and 0 <= x <= 100_000 for x in lat) or lat[0] > lat[1]:
        raise ScenarioError(f"memory.latency: expected clocks or [min, max] with 0 <= min <= max, got {lat!r}")
    pause = _get(memory, "pause", "memory", (int, float), 0.0, check=lambda v: None if 0 <= v < 1 else "must be in [0, 1)")
    sink = _get(data, "sink", "scenario", dict, {})
    _no_extra(sink, "sink", {"pause"})
    sink_pause = _get(sink, "pause", "sink", (int, float), 0.0, check=lambda v: None if 0 <= v < 1 else "must be in [0, 1)")

    if "random" in data:
        if "qps" in data or "work" in data:
            raise ScenarioError("scenario: give either random or qps/work, not both")
        r = _get(data, "random", "scenario", dict)
        _no_extra(r, "random", {"qps", "wqes", "max_len"})
        w = random_workload(rng, nqps=_get(r, "qps", "random", int, 4, check=_range(1, config.max_qps)),
                            wqes=_get(r, "wqes", "random", int, 4, check=_range(1, 64)),
                            max_len=_get(r, "max_len", "random", int, 8192, check=_range(1, 1 << 20)),
                            quota=quota or 1)
        return Scenario(w, seed, tuple(lat), float(pause), float(sink_pause), config)

    qps = _get(data, "qps", "scenario", list)
    if not qps:
        raise ScenarioError("qps: at least one QP is needed")
    if len(qps) > config.max_qps:
        raise ScenarioError(f"qps: {len(qps)} QPs, the engine holds config.max_qps = {config.max_qps}")
    b = WorkloadBuilder(len(qps), quota=quota, max_burst=max_burst, int_mod_count=mod_count, rng=rng)
    b.settings.int_mod_timer = mod_timer
    services = {}
    for i, q in enumerate(qps):
        where = f"qps[{i}]"
        if not isinstance(q, dict):
            raise ScenarioError(f"{where}: expected a table/object")
        _no_extra(q, where, {"qpn", "service", "mode", "mtu", "cq_log_size", "next_psn", "sgid_index", "state"})
        qpn = _get(q, "qpn", where, int, i)
        if qpn != i:
            raise ScenarioError(f"{where}.qpn: QPs are numbered 0, 1, 2 ... in order; expected {i}, got {qpn}")
        service = _get(q, "service", where, str, "RC", choices=_SERVICES)
        mode = _get(q, "mode", where, str, "rocev2-ipv4", choices=_MODES)
        mtu = _get(q, "mtu", where, int, 1024, choices=_MTUS)
        state = _get(q, "state", where, str, "RTS", choices=_STATES)
        b.cq(i, _get(q, "cq_log_size", where, int, 8, check=_range(1, 8)))
        b.qp(i, service=service, mode=mode, mtu=mtu, state=state,
             next_psn=_get(q, "next_psn", where, int, 0, check=_range(0, (1 << 24) - 1)),
             sgid_index=_get(q, "sgid_index", where, int, 0, check=_range(0, len(SGIDS) - 1)))
        services[i] = service
    work = _get(data, "work", "scenario", list, [])
    for i, item in enumerate(work):
        where = f"work[{i}]"
        if not isinstance(item, dict):
            raise ScenarioError(f"{where}: expected a table/object")
        _no_extra(item, where, {"qpn", "opcode", "length", "signaled", "solicited", "inline", "count"})
        qpn = _get(item, "qpn", where, int, check=_range(0, len(qps) - 1))
        op = _get(item, "opcode", where, str, choices=_OPCODES)
        length = _get(item, "length", where, int, 0,
                      check=lambda v: None if 0 <= v <= 1 << 20 else f"{v!r} is outside 0..1048576 (simulation limit)")
        inline = _get(item, "inline", where, bool, False)
        cap = INLINE_MAX_UD if services[qpn] == ServiceType.UD else INLINE_MAX_RC
        if inline and length > cap:
            raise ScenarioError(f"{where}.length: {length} bytes cannot be inline (at most {cap} on this QP)")
        flags = WqeFlags(0)
        if _get(item, "signaled", where, bool, True):
            flags |= WqeFlags.SIGNALED
        if _get(item, "solicited", where, bool, False):
            flags |= WqeFlags.SOLICITED
        if inline:
            flags |= WqeFlags.INLINE
        for _ in range(_get(item, "count", where, int, 1, check=_range(1, 1 << 15))):
            if b.drv.sq_pi[qpn] - b.drv.qps[qpn].sq_ci >= 1 << b.drv.qps[qpn].log_sq_size:
                raise ScenarioError(f"{where}.count: QP {qpn}'s send queue holds {1 << b.drv.qps[qpn].log_sq_size} WQEs")
            try:
                b.post(qpn, op, length, flags=flags)
            except AssertionError as err:
                raise ScenarioError(f"{where}: {err}") from None
    return Scenario(b.build(), seed, tuple(lat), float(pause), float(sink_pause), config)


def load_scenario(path: str | Path) -> Scenario:
    """Read and parse a ``.json`` or ``.toml`` scenario file."""
    path = Path(path)
    try:
        text = path.read_bytes()
    except OSError as err:
        raise ScenarioError(f"{path}: {err.strerror}") from None
    try:
        if path.suffix == ".toml":
            data = tomllib.loads(text.decode())
        else:
            data = json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ScenarioError(f"{path}: not valid {'TOML' if path.suffix == '.toml' else 'JSON'}: {err}") from None
    return parse(data)
