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

import dataclasses
import random
from dataclasses import dataclass, field

from ..model.descriptor import LinkMode
from ..model.frames import parse_frame
from ..model.qpc import QpState, ServiceType
from ..model.responder import psn_delta
from ..model.timers import TimerKind
from ..model.wqe import CQ_RECORD_BYTES, CQE_BYTES, Cqe, CqContext, CqeStatus, Wqe, WqeFlags, WqeOpcode
from ..model.recv_records import CQE_FLAG_IMM, MemoryRegion, RecvOpcode, RecvWqe, Sge
from ..model.responder_exec import GRH_BYTES
from .link import Link, LinkKnobs
from .responder_pair import A_QPN, B_QPN, CQ_BASE, LOCAL_DATA, PD, RECV_MR, REMOTE_MR, RQ_BASE, SQ_BASE, Pair

__all__ = ["Message", "Loopback", "random_messages", "cq_entries"]

SLOT = 0x1000               # each message's own remote bytes, receive buffer and local buffer
RECV_SLOTS = 16             # messages each way that take a receive WQE (half the receive ring)


@dataclass
class Message:
    op: WqeOpcode
    length: int
    data: bytes = b""               # WRITE / SEND: A's bytes; READ: B's bytes; atomic: B's original value
    compare_add: int = 0
    swap: int = 0
    signaled: bool = True


def random_messages(rng: random.Random, n: int, mtu: int, service: ServiceType = ServiceType.RC) -> list[Message]:
    """``n`` random messages of the operations ``service`` allows (UD: up to the MTU)."""
    ops = [WqeOpcode.SEND, WqeOpcode.SEND_WITH_IMM]
    if service != ServiceType.UD:
        ops += [WqeOpcode.RDMA_WRITE, WqeOpcode.RDMA_WRITE_WITH_IMM]
    if service == ServiceType.RC:
        ops += [WqeOpcode.RDMA_READ, WqeOpcode.ATOMIC_CMP_SWAP, WqeOpcode.ATOMIC_FETCH_ADD]
    out = []
    for _ in range(n):
        op = rng.choice(ops)
        if op in (WqeOpcode.ATOMIC_CMP_SWAP, WqeOpcode.ATOMIC_FETCH_ADD):
            orig = rng.getrandbits(64)
            out.append(Message(op, 8, orig.to_bytes(8, "little"), orig if rng.random() < 0.5 else rng.getrandbits(64),
                               rng.getrandbits(64), rng.random() < 0.8))
        else:
            length = rng.choice([0, 1, 100, mtu, 3 * mtu + 5, rng.randrange(1, SLOT)])
            length = min(length, mtu if service == ServiceType.UD else SLOT - 64)   # a receive buffer: SLOT - 64 B
            out.append(Message(op, length, rng.randbytes(length), signaled=rng.random() < 0.8))
    return out


def cq_entries(mem, cqn: int) -> list[Cqe]:
    """The CQEs written to CQ ``cqn`` of the pair's layout (never polled: from index 0 to the producer index)."""
    cq = CqContext.unpack(mem.peek(CQ_BASE + cqn * CQ_RECORD_BYTES, CQ_RECORD_BYTES))
    return [Cqe.unpack(mem.peek((cq.ring_base & ~0x1F) + (i % cq.size) * CQE_BYTES, CQE_BYTES)) for i in range(cq.pi)]


@dataclass
class _Flow:
    """One QP pair's messages one way: ``src`` QP ``sq`` sends ``messages[i]`` for ``i`` in ``indices`` to
    ``dst`` QP ``dq`` (``i`` numbers the direction's messages: its slots, its wr_id and immediate)."""
    name: str
    src: object
    sq: int
    dst: object
    dq: int
    messages: list[Message]
    indices: list[int]


RECV_OPS = (WqeOpcode.SEND, WqeOpcode.SEND_WITH_IMM, WqeOpcode.RDMA_WRITE_WITH_IMM)
WRITE_OPS = (WqeOpcode.RDMA_WRITE, WqeOpcode.RDMA_WRITE_WITH_IMM)
ANSWERED_OPS = (WqeOpcode.RDMA_READ, WqeOpcode.ATOMIC_CMP_SWAP, WqeOpcode.ATOMIC_FETCH_ADD)


@dataclass
class Loopback:
    """Node A sends ``messages`` to node B and B sends ``back`` to A, over links with knobs ``ab`` (A to B)
    and ``ba``, on ``qps`` pairs of connected QPs (A's QP 1 + 2k with B's QP 2 + 2k; message i goes on pair
    i mod ``qps``); one service for all (UC and UD take the operations they allow)."""

    messages: list[Message]
    back: list[Message] = field(default_factory=list)
    service: ServiceType = ServiceType.RC
    mode: LinkMode = LinkMode.ROCEV2_IPV4
    mtu: int = 1024
    ab: LinkKnobs = LinkKnobs()
    ba: LinkKnobs = LinkKnobs()
    seed: int = 0
    retry: tuple[int, int] = (7, 7)
    rnr: int = 0                    # receive WQEs are posted late, after this many quiet periods (RNR NAKs first)
    audit: bool = False             # check the requester's invariants after every step (tests)
    qps: int = 1

    def __post_init__(self):
        if max(len(self.messages), len(self.back)) > REMOTE_MR[3] // SLOT:
            raise ValueError(f"at most {REMOTE_MR[3] // SLOT} messages each way")
        for msgs in (self.messages, self.back):
            if sum(m.op in RECV_OPS for m in msgs) > RECV_SLOTS:
                raise ValueError(f"at most {RECV_SLOTS} messages each way take a receive WQE")
        allowed = {ServiceType.RC: None, ServiceType.UC: RECV_OPS + WRITE_OPS, ServiceType.UD: RECV_OPS[:2]}
        for m in self.messages + self.back:
            ok = allowed[self.service]
            if ok is not None and m.op not in ok or self.service == ServiceType.UD and m.length > self.mtu:
                raise ValueError(f"{m.op.name} of {m.length} B on {self.service.name}")
        if not 1 <= self.qps <= 7:
            raise ValueError(f"qps {self.qps}: 1 to 7 QP pairs")
        self.pair = Pair(self.mode, self.service, mtu=self.mtu, psn=random.Random(self.seed).randrange(1 << 24),
                         reliable=True, retry=self.retry)
        p = self.pair
        self.qpns = {"a": [A_QPN + 2 * k for k in range(self.qps)], "b": [B_QPN + 2 * k for k in range(self.qps)]}
        for k in range(1, self.qps):                                        # more pairs like the first
            for node, qpn, dest in ((p.a, A_QPN, B_QPN), (p.b, B_QPN, A_QPN)):
                ctx = dataclasses.replace(node.driver.qp(qpn), qpn=qpn + 2 * k, dest_qpn=dest + 2 * k,
                                          sq_base=SQ_BASE + k * 0x1000, next_psn=(node.driver.qp(qpn).next_psn
                                                                                   + 1000 * k) & 0xFFFFFF)
                ctx.epsn = ctx.next_psn
                rx = dataclasses.replace(node.driver.rx(qpn), rq_base=RQ_BASE + k * 0x800, rq_ci=0, rq_pi=0)
                node.driver.create_qp(qpn + 2 * k, ctx, rx, timeout=14)
        for index, key, va, length, addr, access in (REMOTE_MR, RECV_MR):     # A gets B's regions too
            p.a.driver.reg_mr(index, MemoryRegion(va=va, length=length, addr=addr, pd=PD, access=access, key=key))
        flow = self.flow_of
        self.links = {"a-to-b": Link(self.ab, self.seed * 2 + 1, flow), "b-to-a": Link(self.ba, self.seed * 2 + 2, flow)}
        self.captured: dict[str, list[bytes]] = {name: [] for name in self.links}    # frames as each node sent them
        self.flows = []
        for k in range(self.qps):
            for name, src, sq, dst, dq, msgs in (("a-to-b", p.a, A_QPN, p.b, B_QPN, self.messages),
                                                 ("b-to-a", p.b, B_QPN, p.a, A_QPN, self.back)):
                indices = list(range(k, len(msgs), self.qps))
                self.flows.append(_Flow(name, src, sq + 2 * k, dst, dq + 2 * k, msgs, indices))
        self._recvs: list[tuple[_Flow, int]] = []
        self.delivered: dict[str, tuple[int, int]] = {}        # per direction: messages for receive WQEs, arrived
        for flow in self.flows:
            self._post(flow)
        if not self.rnr:
            self.post_recvs()

    def flow_of(self, frame: bytes) -> int:
        """A frame's flow on the link: its destination QP (a held-back frame waits for that QP's frames)."""
        return parse_frame(self.mode, frame)[0].dest_qp

    def _post(self, flow: _Flow) -> None:
        p, ctx = self.pair, flow.src.driver.qp(flow.sq)
        ud = {}
        if self.service == ServiceType.UD:
            ud = dict(dest_qpn=ctx.dest_qpn, qkey=ctx.qkey, dst_mac=ctx.dst_mac, dst_gid=ctx.dst_gid, dlid=ctx.dlid)
        for i in flow.indices:
            m = flow.messages[i]
            local = LOCAL_DATA + i * SLOT
            remote = REMOTE_MR[2] + i * SLOT
            if m.op in ANSWERED_OPS:
                if m.op == WqeOpcode.RDMA_READ:
                    m.data = random.Random(f"{self.seed}:{flow.name}:{i}").randbytes(m.length)
                flow.dst.mem.poke(p.remote(remote), m.data)
            else:
                flow.src.mem.poke(local, m.data)
            if m.op in RECV_OPS:
                self._recvs.append((flow, i))
            rc = {} if ud else dict(rkey=p.rkey, remote_addr=remote, compare_add=m.compare_add, swap=m.swap)
            flow.src.driver.post(flow.sq, Wqe(opcode=m.op, length=m.length, local_addr=local, imm=i, wr_id=i,
                                              flags=WqeFlags.SIGNALED if m.signaled else WqeFlags(0), **rc, **ud))

    def post_recvs(self, doorbell: bool = True) -> list[tuple[str, int, int]]:
        """Post the receive WQEs not posted yet; ring their doorbells on the model unless ``doorbell`` is
        False. Returns the doorbells ``(node name, qpn, producer index)`` (an RTL harness writes them)."""
        out = []
        for flow, i in self._recvs:
            wqe = RecvWqe(1000 + i, (Sge(RECV_MR[2] + i * SLOT, SLOT - 64, self.pair.lkey),))
            pi = flow.dst.driver.post_recv(flow.dq, wqe)
            if doorbell:
                flow.dst.resp.rq_doorbell(flow.dq, pi)
            out.append(("a" if flow.dst is self.pair.a else "b", flow.dq, pi))
        self._recvs = []
        return out

    def ring_send_queues(self) -> None:
        """Every flow with messages rings its send queue's doorbell on its source node's model."""
        for flow in self.flows:
            if flow.indices:
                flow.src.driver.ring(flow.sq)

    def run(self, max_quiet: int = 200) -> "Loopback":
        p = self.pair
        self.ring_send_queues()
        nodes = {"a": p.a, "b": p.b}
        sent = {n: [0, 0] for n in nodes}                  # (responses, requests) taken from each node
        quiet = 0
        while quiet < max_quiet:
            moved = False
            for name, node in nodes.items():
                node.engine.run()
                link_name = "a-to-b" if name == "a" else "b-to-a"
                link = self.links[link_name]
                new = node.resp.responses[sent[name][0]:] + node.engine.packets[sent[name][1]:]
                sent[name] = [len(node.resp.responses), len(node.engine.packets)]
                for packet in new:
                    frame = packet.frame()
                    self.captured[link_name].append(frame)
                    link.send(frame)
                moved |= bool(new)
            for key, dst in (("a-to-b", p.b), ("b-to-a", p.a)):
                for frame in self.links[key].deliver(everything=not moved):
                    dst.resp.receive(frame)
                    moved = True
                    if self.audit:
                        self._audit()
            if moved:
                continue
            quiet += 1
            if self._recvs and quiet >= self.rnr:
                self.post_recvs()
                continue
            fired = False
            for name, node in nodes.items():
                for qpn in self.qpns[name]:
                    fired |= node.req.rnr_expired(qpn) or node.req.timeout(qpn)
            if not fired:
                break
        return self

    def _audit(self) -> None:
        """The requester's invariants on both nodes: ``sq_acked`` <= ``sq_ci`` <= ``sq_pi`` in ring order,
        ``rd_pending`` equal to the READs and atomics between them, ``una_psn`` not behind ``wqe_psn``."""
        for name, node in (("a", self.pair.a), ("b", self.pair.b)):
            for qpn in self.qpns[name]:
                ctx = node.engine._qpc_peek(qpn)
                if ctx.service != ServiceType.RC or ctx.state != QpState.RTS:
                    continue
                req = node.req.read_req(qpn)
                acked, sent = (ctx.sq_ci - req.sq_acked) & 0xFFFF, (ctx.sq_pi - req.sq_acked) & 0xFFFF
                assert acked <= sent, f"QP {qpn}: sq_acked {req.sq_acked} sq_ci {ctx.sq_ci} sq_pi {ctx.sq_pi}"
                assert ctx.rd_pending == node.req.rd_pending(qpn, ctx), \
                    f"QP {qpn}: rd_pending {ctx.rd_pending}, the send queue says {node.req.rd_pending(qpn, ctx)}"
                assert psn_delta(ctx.una_psn, req.wqe_psn) >= 0, f"QP {qpn}: una_psn behind wqe_psn"
                # the timers: an RNR wait has its RNR timer, PSNs outstanding the local ACK timer, else none
                timer = node.req.timers.timers.get(qpn)
                kind = timer[0] if timer else None
                if ctx.req_wait:
                    want = TimerKind.RNR
                elif node.req._outstanding(ctx, req) and ctx.ack_timeout:
                    want = TimerKind.ACK
                else:
                    want = None
                assert kind == want, f"QP {qpn}: timer {kind}, expected {want}"

    # --- the end-to-end scoreboard -------------------------------------------------------------------

    def check(self, mems: dict | None = None) -> list[str]:
        """What went wrong, judged from the messages alone (empty: all is well). RC: every message arrived
        once, in order, with its bytes, and completed once on both sides. UC and UD: every message
        completed when sent; those that arrived have their bytes; a WRITE that was
        lost left each byte of its target either untouched or equal to its source; every receive completion
        is a message sent (the link may lose, repeat and reorder them); nothing else changed."""
        mems = mems or {"a": self.pair.a.mem, "b": self.pair.b.mem}
        out = []
        self.delivered = {}
        for flow in self.flows:
            src, dst = (mems["a"], mems["b"]) if flow.src is self.pair.a else (mems["b"], mems["a"])
            where = flow.name if self.qps == 1 else f"{flow.name} QP {flow.sq}"
            out += [f"{where}: {e}" for e in self._check(flow, src, dst)]
        return out

    def _check(self, flow: _Flow, src_mem, dst_mem) -> list[str]:
        """One direction, from the CQ rings and bytes in ``src_mem`` / ``dst_mem`` (anything with ``peek``:
        the model's memory, or the RTL's)."""
        p, out, rc = self.pair, [], self.service == ServiceType.RC
        sends = [c for c in cq_entries(src_mem, 0) if c.qpn == flow.sq]
        want = [i for i in flow.indices if flow.messages[i].signaled]
        if [c.wr_id for c in sends] != want:
            out.append(f"send completions {[c.wr_id for c in sends]}, expected {want}")
        bad = [(c.wr_id, CqeStatus(c.status).name) for c in sends if c.status != CqeStatus.SUCCESS]
        if bad:
            out.append(f"send completions in error: {bad}")
        recvs = [c for c in cq_entries(dst_mem, 1) if c.qpn == flow.dq]
        expected = [i for i in flow.indices if flow.messages[i].op in RECV_OPS]
        grh = GRH_BYTES if self.service == ServiceType.UD else 0
        if any(c.status != CqeStatus.SUCCESS for c in recvs):
            out.append(f"receive completions in error: {[(c.wr_id, c.status) for c in recvs if c.status]}")
        # RC: each receive completion is the next message, with its bytes. UC and UD: each is one of the
        # messages (the immediate names it; a SEND's bytes fit); the link may lose, repeat or reorder them
        arrived, j = set(), 0
        for c in recvs:
            length = c.byte_len - grh
            buffer = dst_mem.peek(RECV_MR[4] + (c.wr_id - 1000) * SLOT + grh, length)

            def fits(i):
                m = flow.messages[i]
                kind = {WqeOpcode.SEND: (RecvOpcode.RECV, 0), WqeOpcode.SEND_WITH_IMM: (RecvOpcode.RECV, CQE_FLAG_IMM),
                        WqeOpcode.RDMA_WRITE_WITH_IMM: (RecvOpcode.RECV_RDMA_WITH_IMM, CQE_FLAG_IMM)}[m.op]
                return (length == m.length and (c.opcode, c.flags & CQE_FLAG_IMM) == kind
                        and (m.op == WqeOpcode.SEND or c.imm == i)
                        and (m.op == WqeOpcode.RDMA_WRITE_WITH_IMM or buffer == m.data))
            if rc:
                if j >= len(expected) or not fits(expected[j]):
                    want = expected[j] if j < len(expected) else None
                    out.append(f"receive completion {c.wr_id}: not message {want}")
                    break
                arrived.add(expected[j])
                j += 1
            else:
                match = [i for i in expected if fits(i)]
                if not match:
                    out.append(f"receive completion {c.wr_id} ({length} B): no message fits it")
                arrived.update([i for i in match if i not in arrived][:1])
        n, got = self.delivered.get(flow.name, (0, 0))
        self.delivered[flow.name] = (n + len(expected), got + len(arrived))
        if rc and sorted(arrived) != expected:
            out.append(f"messages received {sorted(arrived)}, expected {expected}")
        for i in flow.indices:
            m = flow.messages[i]
            local, remote = LOCAL_DATA + i * SLOT, p.remote(REMOTE_MR[2] + i * SLOT)
            what = f"message {i} ({m.op.name}, {m.length} B)"
            if m.op in WRITE_OPS:
                target = dst_mem.peek(remote, SLOT)
                if rc or i in arrived or m.op == WqeOpcode.RDMA_WRITE and target[:m.length] == m.data:
                    if target[:m.length] != m.data:
                        out.append(f"{what}: the peer's memory differs")
                elif any(b not in (0, s) for b, s in zip(target, m.data)):
                    out.append(f"{what}: lost, yet the peer's memory holds bytes it never sent")
                if any(target[m.length:]):
                    out.append(f"{what}: bytes written past the message")
            if m.op == WqeOpcode.RDMA_READ and src_mem.peek(local, m.length) != m.data:
                out.append(f"{what}: the READ buffer differs")
            if m.op in (WqeOpcode.ATOMIC_CMP_SWAP, WqeOpcode.ATOMIC_FETCH_ADD):
                orig = int.from_bytes(m.data, "little")
                new = ((orig + m.compare_add) % (1 << 64) if m.op == WqeOpcode.ATOMIC_FETCH_ADD
                       else m.swap if orig == m.compare_add else orig)
                if int.from_bytes(dst_mem.peek(remote, 8), "little") != new:
                    out.append(f"{what}: the peer's value is not the result")
                if src_mem.peek(local, 8) != m.data:
                    out.append(f"{what}: the original value did not come back")
        return out

    def summary(self) -> dict:
        p = self.pair
        return {"requester": {"a": dict(p.a.req.counts), "b": dict(p.b.req.counts)}, "delivered": dict(self.delivered),
                "links": {k: dict(v.counts) for k, v in self.links.items()},
                "responder": {"a": dict(p.a.resp.counts), "b": dict(p.b.resp.counts)}}
