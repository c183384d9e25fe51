"""Two model engines on one link for the responder tests (model and cocotb): ``a`` (requester, QP 1)
sends to ``b`` (responder, QP 2). Each node is a whole :class:`EngineModel` with its own host memory, driver
and :class:`Responder`, and with ``reliable`` a :class:`Requester` (:mod:`rnic.sim.loopback` runs them
over a lossy link)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..model.config import RnicConfig
from ..model.descriptor import LinkMode
from ..model.driver import Driver
from ..model.engine import EngineModel, HostMemory, RegisterSettings, SgidEntry
from ..model.frames import build_frame, normalize_desc
from ..model.qpc import PathMtu, QpContext, QpState, ServiceType
from ..model.receive import PortAddresses, ipv4_gid
from ..model.recv_records import Access, MemoryRegion, RecvContext, RecvWqe, Sge
from ..model.requester import Requester
from ..model.responder import Responder, ResponderSettings

QPC_BASE, CQ_BASE, MR_BASE, RES_BASE, REQ_BASE = 0x10000, 0x20000, 0x30000, 0x40000, 0x48000
SQ_BASE, RQ_BASE, CQ_RING, RCQ_RING = 0x50000, 0x60000, 0x70000, 0x78000
A_QPN, B_QPN = 1, 2
PD = 7
ALL = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ | Access.REMOTE_ATOMIC
# B's memory regions: index -> (key byte, va, length, bus address, access)
REMOTE_MR = (3, 0x5A, 0x7000_0000, 0x40000, 0x100000, ALL)      # the target of WRITE / READ / atomics
RECV_MR = (4, 0xC3, 0x9000_0000, 0x20000, 0x200000, Access.LOCAL_WRITE)   # receive buffers
LOCAL_DATA = 0x300000        # A's payload source / READ destination


def _ids(n: int, mode: LinkMode) -> tuple[int, int, int]:
    """(MAC, GID, LID) of node n."""
    gid = ipv4_gid(0xC0A8_0000 | n) if mode is LinkMode.ROCEV2_IPV4 else 0xFE80_0000_0000_0000_0000_0000_0000_0000 | n
    return 0x02_00_00_00_00_00 | n, gid, n


@dataclass
class Node:
    n: int
    mode: LinkMode
    mem: HostMemory = field(default_factory=HostMemory)
    reliable: bool = False          # a Requester too: RC completes at acknowledgement, go-back-N

    def __post_init__(self):
        self.mac, self.gid, self.lid = _ids(self.n, self.mode)
        self.settings = RegisterSettings(qpc_base=QPC_BASE, qpc_size=16, cq_base=CQ_BASE, cq_size=4,
                                         port_lid=self.lid, sgids=(SgidEntry(self.gid, self.mac),), req_base=REQ_BASE,
                                         reliable=self.reliable)
        self.engine = EngineModel(self.mem, RnicConfig(), settings=self.settings)
        self.driver = Driver(self.mem, self.settings, self.engine, mr_base=MR_BASE)
        link = "ethernet" if self.mode.is_ethernet else "ib"
        self.resp = Responder(self.engine, ResponderSettings(MR_BASE, 16, RES_BASE,
                                                             PortAddresses(self.mac, {self.gid}, self.lid), link))
        self.req = Requester(self.engine) if self.reliable else None
        self.driver.create_cq(0, CQ_RING, 6)
        self.driver.create_cq(1, RCQ_RING, 6)


class Pair:
    """``a`` QP 1 <-> ``b`` QP 2 of ``service`` on ``mode``; B has the remote MR and receive buffers."""

    def __init__(self, mode: LinkMode = LinkMode.ROCEV2_IPV4, service: ServiceType = ServiceType.RC,
                 mtu: int = 1024, psn: int = 100, b_state: QpState = QpState.RTS, rx: dict | None = None,
                 reliable: bool = False, retry: tuple[int, int] = (7, 7)):
        self.mode, self.service, self.mtu = mode, service, mtu
        self.a, self.b = Node(1, mode, reliable=reliable), Node(2, mode, reliable=reliable)
        for me, peer, qpn, dest, state in ((self.a, self.b, A_QPN, B_QPN, QpState.RTS),
                                          (self.b, self.a, B_QPN, A_QPN, b_state)):
            ctx = QpContext(state=state, service=service, link_mode=mode, path_mtu=PathMtu.of_bytes(mtu),
                            log_sq_size=6, dest_qpn=dest, dlid=peer.lid, dst_mac=peer.mac, dst_gid=peer.gid,
                            sq_base=SQ_BASE, next_psn=psn, epsn=psn, qkey=0x11111111, cqn=0,
                            retry_cnt=retry[0], retry_limit=retry[0], rnr_retry_cnt=retry[1], rnr_limit=retry[1])
            r = RecvContext(rcqn=1, log_rq_size=5, rq_base=RQ_BASE, pd=PD, access=ALL, max_dest_rd_atomic=4,
                            min_rnr_timer=14)
            for k, v in (rx or {}).items():
                setattr(r, k, v)
            me.driver.create_qp(qpn, ctx, r, timeout=14 if reliable else 0)
        for index, key, va, length, addr, access in (REMOTE_MR, RECV_MR):
            self.b.driver.reg_mr(index, MemoryRegion(va=va, length=length, addr=addr, pd=PD, access=access, key=key))
        self.rkey = (REMOTE_MR[0] << 8) | REMOTE_MR[1]
        self.lkey = (RECV_MR[0] << 8) | RECV_MR[1]
        self.deferred: list[tuple[int, int]] | None = None     # B's RQ doorbells, when kept for later

    # --- B's side ---------------------------------------------------------------------------------

    def post_recv(self, wr_id: int, *lengths: int, offset: int = 0) -> list[int]:
        """Post one receive WQE on B with one SGE per length, back to back in the receive MR from ``offset``;
        return the SGEs' bus addresses."""
        sges, addrs, va = [], [], RECV_MR[2] + offset
        for n in lengths:
            sges.append(Sge(va, n, self.lkey))
            addrs.append(RECV_MR[4] + va - RECV_MR[2])
            va += n + 64
        pi = self.b.driver.post_recv(B_QPN, RecvWqe(wr_id, tuple(sges)))
        if self.deferred is None:
            self.b.resp.rq_doorbell(B_QPN, pi)
        else:
            self.deferred.append((B_QPN, pi))
        return addrs

    def remote(self, va: int) -> int:
        """B's bus address of remote-MR virtual address ``va``."""
        return REMOTE_MR[4] + va - REMOTE_MR[2]

    # --- traffic ----------------------------------------------------------------------------------

    def run(self, *wqes, b_to_a: bool = False):
        """Post ``wqes`` on A, run A, deliver A's new packets to B; return B's verdicts."""
        start = len(self.a.engine.packets)
        for w in wqes:
            pi = self.a.driver.post(A_QPN, w)
        self.a.driver.ring(A_QPN, pi)
        self.a.engine.run()
        return [self.b.resp.receive(p.frame()) for p in self.a.engine.packets[start:]]

    def frame(self, opcode, psn, payload: bytes = b"", **fields) -> bytes:
        """A request frame from A's QP to B built by hand (for what A's transmit side does not send)."""
        ctx = self.a.driver.qp(A_QPN)
        if self.service == ServiceType.UD:
            fields.setdefault("deth_qkey", 0x11111111)
            fields.setdefault("deth_src_qp", A_QPN)
        desc = self.a.engine.path_desc(ctx, psn, opcode, payload_len=len(payload), **fields)
        return build_frame(normalize_desc(desc), payload)

    def send(self, opcode, psn, payload: bytes = b"", **fields):
        return self.b.resp.receive(self.frame(opcode, psn, payload, **fields))

    def responses(self, start: int = 0):
        return self.b.resp.responses[start:]

    def recv_cqes(self):
        return [c.cqe for c in self.b.engine.cqes if c.cqn == 1]
