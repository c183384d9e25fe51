"""Random responder workloads on a fresh :class:`~rnic.sim.responder_pair.Pair`: node A's requests to node B
as frames, B's receive WQEs, and one kind of fault per case. Shared by the receive path's testbench
(``cocotb_tests/test_rx_responder.py``, :class:`rnic.sim.rx_top.RxTop`) and the whole engine's
(``cocotb_tests/test_rnic_receive.py``)."""

from __future__ import annotations

import random

from ..model.descriptor import LinkMode
from ..model.opcodes import Opcode
from ..model.qpc import ServiceType
from ..model.wqe import Wqe, WqeFlags, WqeOpcode
from .responder_pair import A_QPN, B_QPN, LOCAL_DATA, RCQ_RING, RECV_MR, REMOTE_MR, RQ_BASE, Pair

__all__ = ["Case", "FAULTS", "CASES", "SPAN", "memory_differs"]

FAULTS = ("none", "link", "dup", "keys", "buffers", "rnr", "bus", "cq")
SPAN = 0x240000                     # B's memory that the comparisons cover (tables, rings, both MRs)
CASES = [(mode, service) for service in (ServiceType.RC, ServiceType.UC, ServiceType.UD) for mode in LinkMode]


class Case:
    """One random workload on a fresh pair: B's receive WQEs and the frames A's requests become."""

    def __init__(self, rng: random.Random, mode: LinkMode, service: ServiceType, fault: str,
                 defer_doorbells: bool = False):
        """``defer_doorbells``: B's receive-queue doorbells are kept in ``pair.deferred`` (for the testbench
        to ring on both sides) instead of rung on B's model at once."""
        self.rng, self.mode, self.service = rng, mode, service
        mtu = rng.choice([256, 1024])
        psn = rng.choice([100, (1 << 24) - 3, rng.randrange(1 << 24)])
        self.pair = pair = Pair(mode, service, mtu=mtu, psn=psn)
        if defer_doorbells:
            pair.deferred = []
        # one kind of fault per case (an RC QP ends at its first error, so mixing them hides most of them)
        self.fault = fault
        f = {k: (1.0 if fault == k else 0.0) for k in ("link", "keys", "buffers", "rnr")}
        self.mtu = mtu
        n_msgs = rng.randint(6, 14)
        sizes = [0, 1, 100, mtu, 3 * mtu + 5, rng.randrange(1, 4 * mtu)]
        self.frames = []
        recvs = 0
        if service == ServiceType.UD:
            for i in range(n_msgs):
                n = rng.choice(sizes[:4] + [mtu + 1])
                op = rng.choice([Opcode.UD_SEND_ONLY, Opcode.UD_SEND_ONLY_WITH_IMMEDIATE])
                fields = {"imm": rng.getrandbits(32)} if op == Opcode.UD_SEND_ONLY_WITH_IMMEDIATE else {}
                if rng.random() < 0.15 * f["keys"]:
                    fields["deth_qkey"] = rng.getrandbits(32)
                fields["se"] = rng.getrandbits(1)
                self.frames.append(pair.frame(op, rng.randrange(1 << 24), rng.randbytes(n), **fields))
                recvs += 1
        else:
            pair.b.mem.poke(REMOTE_MR[4], rng.randbytes(REMOTE_MR[3]))     # what READs and atomics find
            for i in range(n_msgs):
                n = rng.choice(sizes)
                ops = [WqeOpcode.SEND, WqeOpcode.SEND_WITH_IMM, WqeOpcode.RDMA_WRITE, WqeOpcode.RDMA_WRITE_WITH_IMM]
                if service == ServiceType.RC:
                    ops += [WqeOpcode.RDMA_READ, WqeOpcode.ATOMIC_CMP_SWAP, WqeOpcode.ATOMIC_FETCH_ADD]
                op = rng.choice(ops)
                if op in (WqeOpcode.ATOMIC_CMP_SWAP, WqeOpcode.ATOMIC_FETCH_ADD):
                    self.frames.append(self.atomic(op))
                    continue
                local = LOCAL_DATA + i * 0x4000
                pair.a.mem.poke(local, rng.randbytes(n))
                va = REMOTE_MR[2] + rng.randrange(REMOTE_MR[3] - n) if n < REMOTE_MR[3] else REMOTE_MR[2]
                rkey = pair.rkey
                roll = rng.random()
                if roll < 0.06 * f["keys"]:
                    rkey ^= 1 << rng.randrange(8)                   # wrong variant byte
                elif roll < 0.10 * f["keys"]:
                    va = REMOTE_MR[2] + REMOTE_MR[3] - n + rng.randint(1, 64)   # past the end of the MR
                flags = WqeFlags.SIGNALED | (WqeFlags.SOLICITED if rng.random() < 0.3 else 0)
                recvs += op in (WqeOpcode.SEND, WqeOpcode.SEND_WITH_IMM, WqeOpcode.RDMA_WRITE_WITH_IMM)
                start = len(pair.a.engine.packets)
                pi = pair.a.driver.post(A_QPN, Wqe(opcode=op, length=n, local_addr=local, rkey=rkey, remote_addr=va,
                                                   imm=rng.getrandbits(32), flags=flags, wr_id=i))
                pair.a.driver.ring(A_QPN, pi)
                pair.a.engine.run()
                self.frames += [p.frame() for p in pair.a.engine.packets[start:]]
        # receive WQEs: usually enough, sometimes fewer (RNR); some too short, some with a bad L_Key
        posted = rng.randrange(recvs + 1) if f["rnr"] else recvs
        for k in range(min(posted, 30)):
            lengths = [rng.choice([64, 700, 1500, 4 * mtu]) for _ in range(rng.randint(1, 3))]
            if rng.random() < 0.08 * f["buffers"]:
                lengths = [rng.randint(1, 40)]
            pair.post_recv(1000 + k, *lengths, offset=0x1000 * k + rng.randrange(64))
            if rng.random() < 0.05 * f["keys"]:
                rx = pair.b.driver.rx(B_QPN)
                slot = (rx.rq_base & ~0x3F) + ((pair.b.driver.rq_pi[B_QPN] - 1) % (1 << rx.log_rq_size)) * 64
                pair.b.mem.poke(slot + 16 + 12, (pair.lkey ^ 0x80).to_bytes(4, "little"))
        self.fcs_bad = []
        if fault == "bus":          # whole regions fail, so the RAM's beat-by-beat writes change nothing either
            where = rng.choice(["remote", "recv", "rq"])
            if where == "remote":
                pair.b.mem.add_write_error(REMOTE_MR[4], REMOTE_MR[4] + REMOTE_MR[3])
            elif where == "recv":
                pair.b.mem.add_write_error(RECV_MR[4], RECV_MR[4] + RECV_MR[3])
            else:
                pair.b.mem.add_read_error(RQ_BASE, RQ_BASE + 32 * 64)
        elif fault == "cq":         # a receive CQ of 2 entries: the second CQE overflows it and ends the QP
            pair.b.driver.create_cq(1, RCQ_RING, 1)
        if fault == "link":
            self.frames = self.link(self.frames)
        elif fault == "dup":
            self.frames = self.duplicates(self.frames)
        else:
            self.frames = [(fr, False) for fr in self.frames]

    def atomic(self, op):
        """A's atomic WQE, sent by A's transmit side: some misaligned (NAK 0x61) or with a bad R_Key."""
        rng, pair = self.rng, self.pair
        va = REMOTE_MR[2] + rng.randrange(0, REMOTE_MR[3] - 8, 8)
        if rng.random() < 0.08 * (self.fault == "keys"):
            va += rng.randint(1, 7)
        old = int.from_bytes(pair.b.mem.peek(pair.remote(va), 8), "little")
        rkey = pair.rkey ^ 0x10 if rng.random() < 0.05 * (self.fault == "keys") else pair.rkey
        swap = rng.getrandbits(64)
        compare_add = swap if op == WqeOpcode.ATOMIC_FETCH_ADD else old if rng.random() < 0.5 else rng.getrandbits(64)
        start = len(pair.a.engine.packets)
        pi = pair.a.driver.post(A_QPN, Wqe(opcode=op, length=8, local_addr=LOCAL_DATA, rkey=rkey, remote_addr=va,
                                           compare_add=compare_add, swap=swap, flags=WqeFlags.SIGNALED))
        pair.a.driver.ring(A_QPN, pi)
        pair.a.engine.run()
        (packet,) = pair.a.engine.packets[start:]
        return packet.frame()

    def duplicates(self, frames):
        """Every frame once in order, and about a third of them again one to four frames later (as a
        requester's retransmission would bring them): RC answers each from its record without running it."""
        out, later = [], []
        for i, f in enumerate(frames):
            out.append((f, False))
            if self.rng.random() < 0.3:
                later.append((i + self.rng.randint(1, 4), f))
            out += [(g, False) for due, g in later if due == i]
        out += [(g, False) for due, g in later if due >= len(frames)]
        return out

    def link(self, frames):
        """Drops, duplicates, swaps, single-byte corruption and a bad FCS flag, a few percent each."""
        rng, out = self.rng, []
        i = 0
        while i < len(frames):
            f, roll = frames[i], rng.random()
            if roll < 0.04:
                pass
            elif roll < 0.08:
                out += [(f, False), (f, False)]
            elif roll < 0.12 and i + 1 < len(frames):
                out += [(frames[i + 1], False), (f, False)]
                i += 1
            elif roll < 0.15:
                b = bytearray(f)
                b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
                out.append((bytes(b), False))
            elif roll < 0.16:
                out.append((f, True))
            else:
                out.append((f, False))
            i += 1
        return out


def memory_differs(ram, mem, span: int = SPAN) -> str | None:
    """Where the RTL's RAM (``read(addr, n)``) first differs from the model's host memory below ``span``."""
    for page in range(0, span, 4096):
        g, w = ram.read(page, 4096), mem.peek(page, 4096)
        if g != w:
            i = next(k for k in range(4096) if g[k] != w[k])
            return f"memory differs first at 0x{page + i:x}: got {g[i]:#04x}, model {w[i]:#04x}"
    return None
