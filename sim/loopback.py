"""Two model engines, each with its responder and requester, over a lossy link in each direction
(:class:`~rnic.sim.link.Link`), and an end-to-end scoreboard that checks the outcome without the model:
every RC message arrives once, in order, and completes once on both sides; WRITE and SEND bytes land equal
to their source; READs and atomics return the peer's bytes.

Time is not modelled: the nodes run until idle, the links carry what was sent, and when nothing moves
the link releases what it held back; when still nothing moves, each QP waiting out an RNR NAK ends its
wait and each QP with unacknowledged PSNs sees its local ACK timer expire (a timeout far longer than a
round trip, as it is in the engine).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from ..model.descriptor import LinkMode
from ..model.qpc import ServiceType
from ..model.wqe import CqeStatus, Wqe, WqeFlags, WqeOpcode
from .link import Link, LinkKnobs
from .responder_pair import A_QPN, B_QPN, LOCAL_DATA, REMOTE_MR, Pair

__all__ = ["Message", "Loopback", "random_messages"]

SLOT = 0x1000               # each message's own remote bytes, receive buffer and local buffer


@dataclass
class Message:
    op: WqeOpcode
    length: int
    data: bytes = b""               # WRITE / SEND: A's bytes; READ: B's bytes; atomic: B's original value
    compare_add: int = 0
    swap: int = 0
    signaled: bool = True


def random_messages(rng: random.Random, n: int, mtu: int) -> list[Message]:
    ops = [WqeOpcode.SEND, WqeOpcode.SEND_WITH_IMM, WqeOpcode.RDMA_WRITE, WqeOpcode.RDMA_WRITE_WITH_IMM,
           WqeOpcode.RDMA_READ, WqeOpcode.ATOMIC_CMP_SWAP, WqeOpcode.ATOMIC_FETCH_ADD]
    out = []
    for _ in range(n):
        op = rng.choice(ops)
        if op in (WqeOpcode.ATOMIC_CMP_SWAP, WqeOpcode.ATOMIC_FETCH_ADD):
            orig = rng.getrandbits(64)
            out.append(Message(op, 8, orig.to_bytes(8, "little"), orig if rng.random() < 0.5 else rng.getrandbits(64),
                               rng.getrandbits(64), rng.random() < 0.8))
        else:
            length = rng.choice([0, 1, 100, mtu, 3 * mtu + 5, rng.randrange(1, SLOT)])
            length = min(length, SLOT - 64)         # a receive buffer holds SLOT - 64 bytes
            out.append(Message(op, length, rng.randbytes(length),
                               signaled=rng.random() < 0.8))
    return out


@dataclass
class Loopback:
    """Node A sends ``messages`` on RC QP 1 to node B's QP 2, over links ``ab`` and ``ba``."""

    messages: list[Message]
    mode: LinkMode = LinkMode.ROCEV2_IPV4
    mtu: int = 1024
    ab: LinkKnobs = LinkKnobs()
    ba: LinkKnobs = LinkKnobs()
    seed: int = 0
    retry: tuple[int, int] = (7, 7)
    rnr: int = 0                    # receive WQEs B posts late, after this many quiet periods (RNR NAKs first)
    log: list[str] = field(default_factory=list)

    def __post_init__(self):
        if len(self.messages) > REMOTE_MR[3] // SLOT:
            raise ValueError(f"at most {REMOTE_MR[3] // SLOT} messages")
        self.pair = Pair(self.mode, ServiceType.RC, mtu=self.mtu, psn=random.Random(self.seed).randrange(1 << 24),
                         reliable=True, retry=self.retry)
        self.links = {"a-to-b": Link(self.ab, self.seed * 2 + 1), "b-to-a": Link(self.ba, self.seed * 2 + 2)}
        self._recvs: list[tuple[int, int]] = []
        p = self.pair
        for i, m in enumerate(self.messages):
            local = LOCAL_DATA + i * SLOT
            remote = REMOTE_MR[2] + i * SLOT
            if m.op in (WqeOpcode.RDMA_READ, WqeOpcode.ATOMIC_CMP_SWAP, WqeOpcode.ATOMIC_FETCH_ADD):
                if m.op == WqeOpcode.RDMA_READ:
                    m.data = random.Random(self.seed * 1000 + i).randbytes(m.length)
                p.b.mem.poke(p.remote(remote), m.data)
            else:
                p.a.mem.poke(local, m.data)
            if m.op in (WqeOpcode.SEND, WqeOpcode.SEND_WITH_IMM, WqeOpcode.RDMA_WRITE_WITH_IMM):
                self._recvs.append((1000 + i, i))
            p.a.driver.post(A_QPN, Wqe(opcode=m.op, length=m.length, local_addr=local, rkey=p.rkey, remote_addr=remote,
                                       imm=i, compare_add=m.compare_add, swap=m.swap, wr_id=i,
                                       flags=WqeFlags.SIGNALED if m.signaled else WqeFlags(0)))
        if not self.rnr:
            self._post_recvs()

    def _post_recvs(self):
        for wr_id, i in self._recvs:
            self.pair.post_recv(wr_id, SLOT - 64, offset=i * SLOT)
        self._recvs = []

    def run(self, max_quiet: int = 200) -> "Loopback":
        p = self.pair
        p.a.driver.ring(A_QPN)
        nodes = {"a": p.a, "b": p.b}
        sent = {n: [0, 0] for n in nodes}                  # (responses, requests) taken from each node
        quiet = 0
        while quiet < max_quiet:
            moved = False
            for name, node in nodes.items():
                node.engine.run()
                link = self.links["a-to-b" if name == "a" else "b-to-a"]
                new = node.resp.responses[sent[name][0]:] + node.engine.packets[sent[name][1]:]
                sent[name] = [len(node.resp.responses), len(node.engine.packets)]
                for packet in new:
                    link.send(packet.frame())
                moved |= bool(new)
            for key, dst in (("a-to-b", p.b), ("b-to-a", p.a)):
                for frame in self.links[key].deliver(everything=not moved):
                    dst.resp.receive(frame)
                    moved = True
            if moved:
                continue
            quiet += 1
            if self._recvs and quiet >= self.rnr:
                self._post_recvs()
                continue
            fired = False
            for node in nodes.values():
                for qpn in (A_QPN, B_QPN):
                    fired |= node.req.rnr_expired(qpn) or node.req.timeout(qpn)
            if not fired:
                break
        return self

    # --- the end-to-end scoreboard -------------------------------------------------------------------

    def check(self) -> list[str]:
        """What went wrong, judged from the messages alone (empty: every message arrived once, in order,
        with its bytes, and completed once on both sides)."""
        p, out = self.pair, []
        sends = [c.cqe for c in p.a.engine.cqes if c.cqn == 0]
        want = [i for i, m in enumerate(self.messages) if m.signaled]
        got = [c.wr_id for c in sends]
        if got != want:
            out.append(f"A's send completions {got}, expected {want}")
        bad = [(c.wr_id, CqeStatus(c.status).name) for c in sends if c.status != CqeStatus.SUCCESS]
        if bad:
            out.append(f"A's send completions in error: {bad}")
        recvs = [c.cqe for c in p.b.engine.cqes if c.cqn == 1]
        want_r = [1000 + i for i, m in enumerate(self.messages)
                  if m.op in (WqeOpcode.SEND, WqeOpcode.SEND_WITH_IMM, WqeOpcode.RDMA_WRITE_WITH_IMM)]
        if [c.wr_id for c in recvs] != want_r or any(c.status != CqeStatus.SUCCESS for c in recvs):
            out.append(f"B's receive completions {[(c.wr_id, c.status) for c in recvs]}, expected {want_r}")
        from .responder_pair import RECV_MR
        for i, m in enumerate(self.messages):
            local, remote = LOCAL_DATA + i * SLOT, p.remote(REMOTE_MR[2] + i * SLOT)
            if m.op in (WqeOpcode.RDMA_WRITE, WqeOpcode.RDMA_WRITE_WITH_IMM):
                where, got_b = "B's memory", p.b.mem.peek(remote, m.length)
            elif m.op in (WqeOpcode.SEND, WqeOpcode.SEND_WITH_IMM):
                where, got_b = "B's receive buffer", p.b.mem.peek(RECV_MR[4] + i * SLOT, m.length)
            elif m.op == WqeOpcode.RDMA_READ:
                where, got_b = "A's READ buffer", p.a.mem.peek(local, m.length)
            else:
                orig = int.from_bytes(m.data, "little")
                new = ((orig + m.compare_add) % (1 << 64) if m.op == WqeOpcode.ATOMIC_FETCH_ADD
                       else m.swap if orig == m.compare_add else orig)
                if int.from_bytes(p.b.mem.peek(remote, 8), "little") != new:
                    out.append(f"message {i} ({m.op.name}): B's value is not the result")
                where, got_b = "A's atomic result", p.a.mem.peek(local, 8)
            if got_b != m.data:
                out.append(f"message {i} ({m.op.name}, {m.length} B): {where} differs")
        return out

    def summary(self) -> dict:
        p = self.pair
        return {"requester": dict(p.a.req.counts), "links": {k: dict(v.counts) for k, v in self.links.items()},
                "responder": dict(p.b.resp.counts)}
