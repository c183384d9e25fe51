"""One configuration of the engine: :class:`RnicConfig`, the only place a parameter's default lives.

The gateware (:class:`rnic.hdl.rnic.Rnic`), the golden model (:class:`rnic.model.engine.EngineModel`),
the testbenches, the scenario files and the command lines all take one :class:`RnicConfig`, so RTL,
model and test cannot be built for different engines. Tests and simulator runs receive it as JSON in
the one environment variable ``RNIC_CONFIG`` (:meth:`RnicConfig.from_env`); :meth:`RnicConfig.key`
names the Verilator build of each configuration.

``python -m rnic.model.config`` prints the Markdown table of the parameters (the README's
"Configuration" section is that table; ``tests/test_config.py`` checks they agree);
``python -m rnic.model.config --json`` prints the default configuration as JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from dataclasses import dataclass, field, fields

from .qpc import PathMtu, QpcCacheConfig

__all__ = ["RnicConfig", "DATAPATH_WIDTHS", "ENV_VAR", "add_config_arguments", "config_from_args"]

#: The environment variable that carries a configuration (JSON) to tests and simulator runs.
ENV_VAR = "RNIC_CONFIG"

#: Datapath widths (bits) the whole engine is built for; CAPS2[3:0] = log2(width / 8).
DATAPATH_WIDTHS = (64, 128, 256, 512)

_MTUS = tuple(m.bytes for m in PathMtu)

# per parameter: the short tag in key(), what it means, what it accepts
_DOC = {
    "width": ("w", "Datapath width in bits: host AXI data and the frame stream.",
              ", ".join(map(str, DATAPATH_WIDTHS))),
    "max_mtu": ("mtu", "Largest path MTU in bytes; a QP context asking for more is a bad context "
                       "(LOC_QP_OP_ERR). CAPS2 reports it and the width.", ", ".join(map(str, _MTUS))),
    "max_qps": ("q", "QPNs the scheduler holds (CAPS[31:24] reports log2); the QP cache tags are "
                     "that many bits.", "power of two, 2 .. 2^24"),
    "window": ("win", "Packets the engine issues ahead of their payload reads' completion.", "2 .. 64"),
    "wqe_prefetch": ("pf", "WQE reads in flight at once: the engine reads up to `wqe_prefetch - 1` WQEs "
                           "ahead of a chain of unsignaled WQEs.", "1 .. 8"),
    "payload_queue": ("pq", "Beats of payload read and not yet taken by the packet builder; holds at least "
                            "one largest packet (store and forward), more hides memory latency.",
                      "≥ max_mtu / (width / 8) − 2"),
    "desc_queue": ("dq", "Packet descriptors queued in front of the packet builder, each waiting for its "
                         "payload.", "≥ 3"),
    "ctx_prefetch": ("cpf", "QP contexts fetched into the QP cache ahead of use: the engine's for the QPs up to "
                            "this many places behind the ready list's head, the receive path's for each frame "
                            "waiting for the responder; 0 turns both off.", "0 .. 8"),
    "qpc.entries": ("qpce", "QP context cache entries.", "power of two"),
    "qpc.ways": ("qpcw", "QP context cache associativity (1 = direct mapped, = entries: fully "
                         "associative).", "power of two ≤ entries"),
    "qpc.tag_width": ("qpct", "Requester tag bits carried through the QP context cache.", "1 .. 32"),
    "qpc.qpn_bits": ("qpcb", "QPNs below 2^qpn_bits are cacheable (the engine uses at most log2(max_qps)).",
                     "1 .. 24"),
    "qpc.mshrs": ("qpcm", "QP context cache misses outstanding at once (miss-status holding registers).",
                  "1, 2, 4, 8, 16"),
}


@dataclass(frozen=True)
class RnicConfig:
    """The parameters of one engine, each with its one default; validated on construction
    (a ``ValueError`` names the parameter).

    Parameters
    ----------
    width : int
        Datapath width in bits (64, 128, 256, 512).
    max_mtu : int
        Largest path MTU in bytes (256 .. 4096).
    max_qps : int
        QPNs the scheduler holds (a power of two, 2 .. 2**24).
    window : int
        Packets issued ahead of their payload reads' completion (2 .. 64).
    wqe_prefetch : int
        WQE reads in flight at once (1 .. 8). Default 8: the next turn's lookahead also needs room
        in the WQE queue beside the current turn's read-ahead (with 4 at W = 64, 16 QPs' 64-byte
        SENDs reach 0.766 of the wire, with 8 0.949).
    payload_queue : int
        Payload beats between the reader and the packet builder: at least one largest packet,
        ``max_mtu / (width / 8) - 2`` beats (the reader's output stage holds 3 more). About one
        largest packet plus the memory latency in clocks gives full rate (``docs/engine.md``).
    desc_queue : int
        Packet descriptors queued in front of the packet builder (at least 3).
    ctx_prefetch : int
        Context prefetch distance (0 .. 8; 0: off): the engine asks the QP cache for the contexts of the
        QPs up to this many places behind the ready list's head, and the receive path for the QP of a
        frame waiting for the responder, so their lookups hit (``docs/qp-context.md``).
    qpc : QpcCacheConfig
        QP context cache geometry (``Rnic`` bounds its ``qpn_bits`` by ``log2(max_qps)``), with 4 MSHRs
        by default: with the context prefetch and receive traffic for random QPs, one MSHR serializes
        every miss (64-byte SENDs over 256 QPs, quota 16: 0.391 of the wire with one, 0.655 with four;
        ``docs/qp-context.md``).
    """

    width: int = 64
    max_mtu: int = 4096
    max_qps: int = 256
    window: int = 32
    wqe_prefetch: int = 8
    payload_queue: int = 1024
    desc_queue: int = 16
    ctx_prefetch: int = 2
    qpc: QpcCacheConfig = field(default_factory=lambda: QpcCacheConfig(mshrs=4))

    def __post_init__(self):
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "qpc":
                if not isinstance(v, QpcCacheConfig):
                    raise ValueError(f"qpc must be a QpcCacheConfig, not {v!r}")
            elif type(v) is not int:
                raise ValueError(f"{f.name} must be an integer, not {v!r}")
        if self.width not in DATAPATH_WIDTHS:
            raise ValueError(f"width must be 64, 128, 256 or 512, not {self.width!r}")
        if self.max_mtu not in _MTUS:
            raise ValueError(f"max_mtu must be 256, 512, 1024, 2048 or 4096 bytes, not {self.max_mtu!r}")
        if not 2 <= self.max_qps <= 1 << 24 or self.max_qps & (self.max_qps - 1):
            raise ValueError(f"max_qps must be a power of two from 2 to 2**24, not {self.max_qps!r}")
        if not 2 <= self.window <= 64:
            raise ValueError(f"window must be 2..64, not {self.window!r}")
        if not 1 <= self.wqe_prefetch <= 8:
            raise ValueError(f"wqe_prefetch must be 1..8, not {self.wqe_prefetch!r}")
        # a packet's raw beats (one more than its payload beats when unaligned) must fit the queue
        # plus the reader's three-beat output stage: its frame waits for all of them
        least = self.max_mtu // (self.width // 8) + 1 - 3
        if self.payload_queue < least:
            raise ValueError(f"payload_queue must be at least {least} beats at width {self.width} and max_mtu "
                             f"{self.max_mtu} (one largest packet), not {self.payload_queue!r}")
        if self.desc_queue < 3:
            raise ValueError(f"desc_queue must be at least 3, not {self.desc_queue!r}")
        if not 0 <= self.ctx_prefetch <= 8:
            raise ValueError(f"ctx_prefetch must be 0..8, not {self.ctx_prefetch!r}")

    # --- values derived for the RTL and the model ---------------------------------------------------

    @property
    def mtu(self) -> PathMtu:
        """``max_mtu`` as an IB path MTU code (1 = 256 B .. 5 = 4096 B)."""
        return PathMtu.of_bytes(self.max_mtu)

    @property
    def qps_log2(self) -> int:
        """log2(``max_qps``): the scheduler's QPN bits, CAPS[31:24]."""
        return self.max_qps.bit_length() - 1

    @property
    def beat_bytes(self) -> int:
        return self.width // 8

    @property
    def deep_below(self) -> int:
        """Messages shorter than this many bytes (8 beats) count as short for the engine's read-ahead."""
        return 8 * self.width

    @property
    def cache_qpc(self) -> QpcCacheConfig:
        """The QP cache as ``Rnic`` builds it: ``qpn_bits`` bounded by log2(``max_qps``), since the
        engine requests only QPNs its scheduler holds."""
        return dataclasses.replace(self.qpc, qpn_bits=min(self.qpc.qpn_bits, self.qps_log2))

    # --- naming, serializing ------------------------------------------------------------------------

    def replace(self, **changes) -> RnicConfig:
        """A copy with ``changes`` (``qpc`` may be a dict of QpcCacheConfig fields to change)."""
        if isinstance(changes.get("qpc"), dict):
            changes["qpc"] = _qpc_from_dict(changes["qpc"], self.qpc)
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise ValueError(f"unknown configuration parameter(s): {', '.join(sorted(unknown))}")
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict, base: RnicConfig | None = None) -> RnicConfig:
        """``base`` (default: the default configuration) with the parameters ``d`` names; ``qpc``
        is a dict too, and may name only some of its fields."""
        if not isinstance(d, dict):
            raise ValueError(f"a configuration must be an object of parameters, not {d!r}")
        return (base or cls()).replace(**d)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> RnicConfig:
        try:
            d = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"configuration JSON: {err}") from None
        return cls.from_dict(d)

    @classmethod
    def from_env(cls, environ=None) -> RnicConfig:
        """The configuration in ``$RNIC_CONFIG`` (JSON; absent or empty: the default)."""
        text = (os.environ if environ is None else environ).get(ENV_VAR, "")
        return cls.from_json(text) if text.strip() else cls()

    def env(self) -> dict[str, str]:
        """``{"RNIC_CONFIG": json}``, for a simulator run's environment."""
        return {ENV_VAR: self.to_json()}

    def differences(self) -> dict[str, object]:
        """Parameters (``qpc.<field>`` for the cache) that differ from the default, in field order."""
        out = {}
        for name, value in _flat(self).items():
            if value != _flat(RnicConfig())[name]:
                out[name] = value
        return out

    def key(self) -> str:
        """A short stable name of this configuration: ``default``, or the parameters that differ
        from it, e.g. ``w128-mtu1024-q64``. Distinct configurations have distinct keys."""
        diff = self.differences()
        return "-".join(f"{_DOC[n][0]}{v}" for n, v in diff.items()) if diff else "default"

    @staticmethod
    def markdown_table() -> str:
        """The README's table: parameter, default, meaning, allowed values."""
        rows = ["| Parameter | Default | Meaning | Allowed |", "|---|---|---|---|"]
        for name, default in _flat(RnicConfig()).items():
            _, meaning, allowed = _DOC[name]
            rows.append(f"| `{name}` | {default} | {meaning} | {allowed} |")
        return "\n".join(rows) + "\n"


def _flat(cfg: RnicConfig) -> dict[str, object]:
    out = {}
    for f in fields(cfg):
        if f.name == "qpc":
            out.update({f"qpc.{g.name}": getattr(cfg.qpc, g.name) for g in fields(cfg.qpc)})
        else:
            out[f.name] = getattr(cfg, f.name)
    return out


def _qpc_from_dict(d: dict, base: QpcCacheConfig) -> QpcCacheConfig:
    unknown = set(d) - {f.name for f in fields(QpcCacheConfig)}
    if unknown:
        raise ValueError(f"unknown qpc parameter(s): {', '.join(sorted(unknown))}")
    for k, v in d.items():
        if type(v) is not int:
            raise ValueError(f"qpc.{k} must be an integer, not {v!r}")
    try:
        return dataclasses.replace(base, **d)
    except ValueError as err:
        raise ValueError(f"qpc.{err}") from None


assert set(_flat(RnicConfig())) == set(_DOC), "every parameter needs a tag, meaning and allowed values"

# --- command lines -----------------------------------------------------------------------------------

# flag names per parameter: the first is the canonical one, the others kept for older command lines
_FLAGS = {
    "width": ("--width",), "max_mtu": ("--max-mtu",), "max_qps": ("--max-qps",), "window": ("--window",),
    "wqe_prefetch": ("--wqe-prefetch",), "payload_queue": ("--payload-queue",), "desc_queue": ("--desc-queue",),
    "ctx_prefetch": ("--ctx-prefetch",),
    "qpc.entries": ("--qpc-entries", "--qp-cache", "--cache-entries"),
    "qpc.ways": ("--qpc-ways", "--qp-cache-ways", "--cache-ways"),
    "qpc.tag_width": ("--qpc-tag-width",), "qpc.qpn_bits": ("--qpc-qpn-bits",), "qpc.mshrs": ("--qpc-mshrs",),
}


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """One option per :class:`RnicConfig` parameter (``--width``, ``--max-mtu``, ...,
    ``--qpc-entries``); each overrides that parameter of the configuration (see
    :func:`config_from_args`), and its help shows the default from :class:`RnicConfig`."""
    g = parser.add_argument_group("engine configuration (RnicConfig; README 'Configuration')")
    g.add_argument("--config", metavar="JSON", dest="rnic_config",
                   help=f"a whole configuration as JSON (as in ${ENV_VAR}); the options below override it")
    for name, default in _flat(RnicConfig()).items():
        _, meaning, allowed = _DOC[name]
        g.add_argument(*_FLAGS[name], dest="cfg_" + name.replace(".", "_"), type=int, default=None,
                       metavar="N", help=f"{meaning} Allowed: {allowed} (default {default})".replace("%", "%%"))


def config_from_args(args: argparse.Namespace, base: RnicConfig | None = None) -> RnicConfig:
    """``base`` (default: the default configuration), then ``--config``'s parameters, then the
    single options given. When ``--qpc-entries`` is given without ``--qpc-ways``, the ways are
    ``min(ways, entries)``."""
    base = base or RnicConfig()
    text = getattr(args, "rnic_config", None)
    if text:
        try:
            base = RnicConfig.from_dict(json.loads(text), base)
        except json.JSONDecodeError as err:
            raise ValueError(f"--config: {err}") from None
    top, qpc = {}, {}
    for name in _flat(base):
        value = getattr(args, "cfg_" + name.replace(".", "_"), None)
        if value is not None:
            if name.startswith("qpc."):
                qpc[name[4:]] = value
            else:
                top[name] = value
    if "entries" in qpc and "ways" not in qpc:
        qpc["ways"] = max(1, min(base.qpc.ways, qpc["entries"]))
    if qpc:
        top["qpc"] = qpc
    return base.replace(**top)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rnic.model.config",
                                description="print the engine configuration's parameters (Markdown table, "
                                            "the README's) or a configuration as JSON")
    p.add_argument("--json", action="store_true", help="print the configuration as JSON instead of the table")
    add_config_arguments(p)
    args = p.parse_args(argv)
    try:
        cfg = config_from_args(args)
    except ValueError as err:
        p.error(str(err))
    print(cfg.to_json() if args.json else RnicConfig.markdown_table(), end="\n" if args.json else "")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
