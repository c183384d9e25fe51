"""Scenario files for ``python -m rnic.sim respond``: the responder's side of a capture (the port, its QPs
with their receive queues, the memory regions), JSON or TOML, built into a model node.

The schema is in docs/receive.md ("Replaying a capture"). Every problem raises :class:`ScenarioError`
naming the field.
"""

from __future__ import annotations

import ipaddress
import json
import random
import tomllib
from dataclasses import dataclass
from pathlib import Path

from ..model.config import RnicConfig
from ..model.descriptor import LinkMode
from ..model.driver import Driver
from ..model.engine import EngineModel, HostMemory, RegisterSettings, SgidEntry
from ..model.qpc import PathMtu, QpContext, QpState, ServiceType
from ..model.receive import PortAddresses, ipv4_gid
from ..model.recv_records import Access, MemoryRegion, RecvContext, RecvWqe, Sge
from ..model.responder import Responder, ResponderSettings
from .scenario_file import ScenarioError

__all__ = ["ScenarioError", "RespondNode", "load_respond_scenario", "QPC_BASE", "CQ_BASE", "MR_BASE", "RES_BASE"]

QPC_BASE, CQ_BASE, MR_BASE, RES_BASE = 0x10000, 0x20000, 0x30000, 0x40000
_RQ_BASE, _RCQ_RING = 0x50000, 0x78000      # QP n's receive queue at _RQ_BASE + n * 0x1000 (up to 64 WQEs)
_QPS, _MRS = 16, 64
_MODES = {m.slug: m for m in LinkMode}
_ACCESS = {a.name: a for a in Access}


def _int(v, where):
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise ScenarioError(f"{where}: expected a number, got {v!r}")
    try:
        return int(v, 0) if isinstance(v, str) else v
    except ValueError:
        raise ScenarioError(f"{where}: {v!r} is not a number") from None


def _mac(v, where):
    try:
        return int(str(v).replace(":", ""), 16) if isinstance(v, str) and ":" in v else _int(v, where)
    except ValueError:
        raise ScenarioError(f"{where}: {v!r} is not a MAC address") from None


def _gid(v, where):
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    try:
        a = ipaddress.ip_address(v)
    except ValueError:
        raise ScenarioError(f"{where}: {v!r} is not an IPv4 or IPv6 address / GID") from None
    return ipv4_gid(int(a)) if a.version == 4 else int(a)


def _access(v, where):
    if not isinstance(v, list) or any(x not in _ACCESS for x in v):
        raise ScenarioError(f"{where}: a list of {', '.join(_ACCESS)}")
    out = Access(0)
    for x in v:
        out |= _ACCESS[x]
    return out


def _choice(d, key, where, table, default=None):
    v = d.get(key, default)
    if v not in table:
        raise ScenarioError(f"{where}.{key}: {v!r} is not one of {', '.join(map(str, table))}")
    return table[v]


@dataclass
class RespondNode:
    """The responder's node as the scenario sets it up: model engine, responder and host memory (before
    any frame), and the settings the RTL top needs."""

    mem: HostMemory
    engine: EngineModel
    responder: Responder
    mac: int
    gids: tuple[int, ...]
    lid: int
    ib: bool
    seed: int
    regs: RegisterSettings

    def writes(self) -> list[tuple[int, int]]:
        """The register writes that configure an engine as this node (the receive path's first)."""
        return self.responder.settings.writes(self.gids) + self.regs.writes()


def load_respond_scenario(path: str | Path) -> RespondNode:
    path = Path(path)
    try:
        raw = path.read_text()
        d = tomllib.loads(raw) if path.suffix == ".toml" else json.loads(raw)
    except (OSError, ValueError) as e:
        raise ScenarioError(f"{path}: {e}") from None
    if not isinstance(d, dict):
        raise ScenarioError(f"{path}: the top level must be a table")
    port = d.get("port")
    if not isinstance(port, dict):
        raise ScenarioError("port: missing (mac, gids, lid, link)")
    ib = _choice(port, "link", "port", {"ethernet": False, "ib": True}, "ethernet")
    mac = _mac(port.get("mac", 0), "port.mac")
    gids = tuple(_gid(g, f"port.gids[{i}]") for i, g in enumerate(port.get("gids", [])))
    if not 1 <= len(gids) <= 16:
        raise ScenarioError("port.gids: one to 16 addresses")
    lid = _int(port.get("lid", 0), "port.lid")
    seed = _int(d.get("seed", 1), "seed")
    mem = HostMemory()
    settings = RegisterSettings(qpc_base=QPC_BASE, qpc_size=_QPS, cq_base=CQ_BASE, cq_size=4, port_lid=lid,
                                sgids=tuple(SgidEntry(g, mac) for g in gids))
    engine = EngineModel(mem, RnicConfig(), settings=settings)
    driver = Driver(mem, settings, engine, mr_base=MR_BASE)
    responder = Responder(engine, ResponderSettings(MR_BASE, _MRS, RES_BASE, PortAddresses(mac, set(gids), lid),
                                                    "ib" if ib else "ethernet"))
    driver.create_cq(0, 0x70000, 6)
    driver.create_cq(1, _RCQ_RING, 10)
    rng = random.Random(seed)
    for i, m in enumerate(d.get("mrs", [])):
        w = f"mrs[{i}]"
        index = _int(m.get("index", i), f"{w}.index")
        if not 0 <= index < _MRS:
            raise ScenarioError(f"{w}.index: 0..{_MRS - 1}")
        mr = MemoryRegion(va=_int(m.get("va", 0), f"{w}.va"), length=_int(m.get("length", 0), f"{w}.length"),
                          addr=_int(m.get("addr", 0), f"{w}.addr"), pd=_int(m.get("pd", 0), f"{w}.pd"),
                          access=_access(m.get("access", []), f"{w}.access"), key=_int(m.get("key", 0), f"{w}.key"))
        if not (0x100000 <= mr.addr and mr.addr + mr.length <= 1 << 25):
            raise ScenarioError(f"{w}: addr and length must lie in 0x100000 .. 0x2000000 (the tables sit below)")
        fill = _choice(m, "fill", w, {"zero": 0, "random": 1}, "zero")
        if fill:
            mem.poke(mr.addr, rng.randbytes(mr.length))
        driver.reg_mr(index, mr)
    qps = d.get("qps", [])
    if not qps:
        raise ScenarioError("qps: at least one QP")
    for i, q in enumerate(qps):
        w = f"qps[{i}]"
        qpn = _int(q.get("qpn"), f"{w}.qpn")
        if not 0 <= qpn < _QPS:
            raise ScenarioError(f"{w}.qpn: 0..{_QPS - 1}")
        mtu = _choice(q, "mtu", w, {m.bytes: m for m in PathMtu}, 1024)
        ctx = QpContext(state=_choice(q, "state", w, {s.name: s for s in QpState}, "RTS"),
                        service=_choice(q, "service", w, {s.name: s for s in ServiceType}, "RC"),
                        link_mode=_choice(q, "mode", w, _MODES), path_mtu=mtu,
                        dest_qpn=_int(q.get("dest_qpn", 0), f"{w}.dest_qpn"),
                        dlid=_int(q.get("dlid", 0), f"{w}.dlid"), dst_mac=_mac(q.get("dst_mac", 0), f"{w}.dst_mac"),
                        dst_gid=_gid(q.get("dst_gid", 0), f"{w}.dst_gid"),
                        epsn=_int(q.get("epsn", 0), f"{w}.epsn") & 0xFFFFFF,
                        pkey=_int(q.get("pkey", 0xFFFF), f"{w}.pkey"), qkey=_int(q.get("qkey", 0), f"{w}.qkey"),
                        sgid_index=_int(q.get("sgid_index", 0), f"{w}.sgid_index"), cqn=0, log_sq_size=4,
                        sq_base=0x60000)
        rx = RecvContext(rcqn=1, log_rq_size=6, rq_base=_RQ_BASE + qpn * 0x1000, pd=_int(q.get("pd", 0), f"{w}.pd"),
                         access=_access(q.get("access", []), f"{w}.access"),
                         max_dest_rd_atomic=_int(q.get("max_dest_rd_atomic", 4), f"{w}.max_dest_rd_atomic"),
                         min_rnr_timer=_int(q.get("min_rnr_timer", 14), f"{w}.min_rnr_timer"))
        driver.create_qp(qpn, ctx, rx)
        recv = q.get("recv", [])
        if len(recv) > 64:
            raise ScenarioError(f"{w}.recv: at most 64 receive WQEs")
        for k, r in enumerate(recv):
            sges = tuple(Sge(_int(a, f"{w}.recv[{k}]"), _int(n, f"{w}.recv[{k}]"), _int(key, f"{w}.recv[{k}]"))
                         for a, n, key in r.get("sges", []))
            if len(sges) > 3:
                raise ScenarioError(f"{w}.recv[{k}].sges: at most 3 [addr, length, lkey] entries")
            pi = driver.post_recv(qpn, RecvWqe(_int(r.get("wr_id", k), f"{w}.recv[{k}].wr_id"), sges))
            responder.rq_doorbell(qpn, pi)
    return RespondNode(mem, engine, responder, mac, gids, lid, ib, seed, settings)
