"""Golden model of the DMA descriptor engine: segmentation, scheduling, completions, errors, interrupts.

Random tests print their seed; rerun with ``RNIC_SEED=<seed>``.
"""

import os
import random

import pytest
from hypothesis import given, settings, strategies as st

from rnic.model.descriptor import LinkMode
from rnic.model.config import RnicConfig
from rnic.model.engine import (PAGE, Driver, EngineModel, HostMemory, RegisterSettings, SgidEntry, split_bursts)
from rnic.model.frames import parse_frame
from rnic.model.opcodes import OPCODE_INFO, Opcode
from rnic.model.qpc import BusError, PathMtu, QpContext, QpState, ServiceType
from rnic.model.regs import REG, ErrBit
from rnic.model.wqe import CqeStatus, CqState, Wqe, WqeFlags, WqeOpcode

QPC_BASE = 0x1000_0000
CQ_BASE = 0x1100_0000
CQ_RING = 0x2000_0000
SQ_RING = 0x3000_0000
BUFFERS = 0x4000_0000
BUF_STRIDE = 0x20_0000
SGIDS = (SgidEntry(gid=0xFFFF_C0A8_0001, mac=0x02_00_00_00_00_01),
         SgidEntry(gid=0xFE80 << 112 | 0x11, mac=0x02_00_00_00_00_11, vlan_id=0x123, vlan_present=True))


def seed():
    value = int(os.environ.get("RNIC_SEED", "0"), 0) or random.SystemRandom().randrange(1, 1 << 31)
    print(f"seed={value} (rerun with RNIC_SEED={value})")
    return value


class Bench:
    """A model plus a driver with QPC table, CQ table, one CQ per QP (CQN = QPN) and payload buffers."""

    def __init__(self, nqps=4, quota=16, cq_log=10, config=RnicConfig(), **kw):
        self.mem = HostMemory()
        self.cfg = RegisterSettings(qpc_base=QPC_BASE, qpc_size=nqps, cq_base=CQ_BASE, cq_size=nqps, quota=quota,
                                    port_lid=0x77, sgids=SGIDS, **kw)
        self.model = EngineModel(self.mem, config, settings=self.cfg)
        self.drv = Driver(self.mem, self.cfg, self.model)
        for cqn in range(nqps):
            self.drv.create_cq(cqn, CQ_RING + cqn * 0x10000, cq_log)
        self.buf_next = {}

    def qp(self, qpn, service=ServiceType.RC, mtu=PathMtu.MTU_1024, mode=LinkMode.ROCEV2_IPV4, **kw):
        kw.setdefault("state", QpState.RTS)
        kw.setdefault("next_psn", 0x100 * qpn)
        kw.setdefault("cqn", qpn)
        ctx = QpContext(service=service, path_mtu=mtu, link_mode=mode, log_sq_size=kw.pop("log_sq_size", 8),
                        sq_base=SQ_RING + qpn * 0x10000, dest_qpn=0x1000 + qpn, dst_mac=0x02_00_00_00_00_02,
                        dst_gid=0xFFFF_C0A8_0002, dlid=0x22, pkey=0xFFFF, qkey=0x1111_0000 + qpn, **kw)
        return self.drv.create_qp(qpn, ctx)

    def buffer(self, qpn, data):
        addr = self.buf_next.get(qpn, BUFFERS + qpn * BUF_STRIDE)
        self.mem.poke(addr, data)
        self.buf_next[qpn] = addr + (len(data) + 63) // 64 * 64 + 64
        return addr

    def post(self, qpn, opcode, length=0, *, rng=None, flags=WqeFlags.SIGNALED, **kw):
        data = (rng or random.Random(length)).randbytes(length)
        if flags & WqeFlags.INLINE:
            kw["inline_data"] = data
        elif opcode != WqeOpcode.RDMA_READ:
            kw["local_addr"] = self.buffer(qpn, data)
        else:
            kw["local_addr"] = BUFFERS + qpn * BUF_STRIDE
        kw.setdefault("wr_id", 0xC0DE_0000 + self.drv.sq_pi[qpn])
        self.drv.post(qpn, Wqe(opcode=opcode, flags=flags, length=length, **kw))
        return data

    def ring(self, qpn, pi=None):
        self.drv.ring(qpn, pi)

    def run(self):
        self.model.run()
        for p in self.model.packets:
            desc, payload = parse_frame(p.desc.mode, p.frame())
            assert desc == p.desc and payload == p.payload
        return self.model

    def of(self, qpn):
        return [p for p in self.model.packets if p.qpn == qpn]

    def cqes(self, qpn):
        return [c.cqe for c in self.model.cqes if c.cqe.qpn == qpn]


def names(packets):
    return [Opcode(p.desc.opcode).name for p in packets]


def expected_names(service, op, n):
    """The opcode sequence of an n-packet message, written out by hand from the IBA opcode table."""
    prefix = {ServiceType.RC: "RC_", ServiceType.UC: "UC_", ServiceType.UD: "UD_"}[service]
    verb = "SEND" if op in (WqeOpcode.SEND, WqeOpcode.SEND_WITH_IMM) else "RDMA_WRITE"
    imm = "_WITH_IMMEDIATE" if op in (WqeOpcode.SEND_WITH_IMM, WqeOpcode.RDMA_WRITE_WITH_IMM) else ""
    if n == 1:
        return [f"{prefix}{verb}_ONLY{imm}"]
    return [f"{prefix}{verb}_FIRST"] + [f"{prefix}{verb}_MIDDLE"] * (n - 2) + [f"{prefix}{verb}_LAST{imm}"]


# --- segmentation ---------------------------------------------------------------------------------------

_OPS = (WqeOpcode.SEND, WqeOpcode.SEND_WITH_IMM, WqeOpcode.RDMA_WRITE, WqeOpcode.RDMA_WRITE_WITH_IMM)


@pytest.mark.parametrize("mtu", list(PathMtu), ids=lambda m: str(m.bytes))
@pytest.mark.parametrize("op", _OPS, ids=lambda o: o.name)
@pytest.mark.parametrize("service", [ServiceType.RC, ServiceType.UC], ids=lambda s: s.name)
def test_segmentation(mtu, op, service):
    size = mtu.bytes
    for length in (0, 1, size - 1, size, size + 1, 3 * size):
        b = Bench(nqps=1, quota=1000)
        start = (1 << 24) - 2
        b.qp(0, service=service, mtu=mtu, next_psn=start)
        data = b.post(0, op, length, flags=WqeFlags.SIGNALED | WqeFlags.SOLICITED, imm=0xFEEDBEEF,
                      remote_addr=0xAB00_0000_1234, rkey=0x5151)
        b.ring(0)
        pkts = b.run().packets
        n = max(1, -(-length // size))
        assert names(pkts) == expected_names(service, op, n), length
        assert [p.desc.psn for p in pkts] == [(start + i) % (1 << 24) for i in range(n)]
        assert b.drv.qp(0).next_psn == (start + n) % (1 << 24)
        assert b"".join(p.payload for p in pkts) == data
        assert [len(p.payload) for p in pkts] == [min(size, length - i * size) for i in range(n)]
        assert [p.desc.ackreq for p in pkts] == [int(i == n - 1 or service == ServiceType.RC and
                                                     (start + i) % 64 == 63) for i in range(n)]
        for i, p in enumerate(pkts):
            has_reth = op in (WqeOpcode.RDMA_WRITE, WqeOpcode.RDMA_WRITE_WITH_IMM) and i == 0
            assert (p.desc.reth_va, p.desc.reth_rkey, p.desc.reth_dma_len) == (
                (0xAB00_0000_1234, 0x5151, length) if has_reth else (0, 0, 0))
            last = i == n - 1
            has_imm = last and op in (WqeOpcode.SEND_WITH_IMM, WqeOpcode.RDMA_WRITE_WITH_IMM)
            assert p.desc.imm == (0xFEEDBEEF if has_imm else 0)
            assert p.desc.se == int(last and op != WqeOpcode.RDMA_WRITE)
            assert p.desc.dest_qp == 0x1000 and p.desc.pkey == 0xFFFF
        (cqe,) = b.cqes(0)
        assert (cqe.status, cqe.byte_len, cqe.opcode, cqe.wqe_index, cqe.wr_id) == (
            CqeStatus.SUCCESS, length, op, 0, 0xC0DE_0000)


@pytest.mark.parametrize("length", [0, 1, 1024, 1025, 65536])
def test_rdma_read_request(length):
    b = Bench(nqps=1)
    b.qp(0, mtu=PathMtu.MTU_1024, next_psn=0xFFFFFF)
    b.post(0, WqeOpcode.RDMA_READ, length, remote_addr=0x7000, rkey=0x99)
    b.post(0, WqeOpcode.SEND, 4)
    b.ring(0)
    pkts = b.run().packets
    assert names(pkts) == ["RC_RDMA_READ_REQUEST", "RC_SEND_ONLY"]
    read = pkts[0].desc
    assert (read.reth_va, read.reth_rkey, read.reth_dma_len, read.ackreq, read.payload_len) == (0x7000, 0x99, length, 1, 0)
    responses = max(1, -(-length // 1024))
    assert pkts[1].desc.psn == (0xFFFFFF + responses) % (1 << 24)
    assert [c.byte_len for c in b.cqes(0)] == [length, 4]


def test_ud_send():
    b = Bench(nqps=2)
    b.qp(1, service=ServiceType.UD, mtu=PathMtu.MTU_512, mode=LinkMode.ROCEV2_IPV6, sgid_index=1, sl=5)
    ud = dict(dest_qpn=0xABCDE, dst_mac=0x02_AA_BB_CC_DD_EE, dst_gid=0x2001_0DB8 << 96 | 7, dlid=0x55)
    b.post(1, WqeOpcode.SEND_WITH_IMM, 512, imm=0x1234, qkey=0x0000_4321, **ud)
    b.post(1, WqeOpcode.SEND, 0, qkey=0x8000_0000, **ud)
    b.ring(1)
    pkts = b.run().packets
    assert names(pkts) == ["UD_SEND_ONLY_WITH_IMMEDIATE", "UD_SEND_ONLY"]
    d = pkts[0].desc
    assert (d.dest_qp, d.dst_mac, d.dst_gid, d.deth_qkey, d.deth_src_qp, d.imm) == (
        0xABCDE, 0x02_AA_BB_CC_DD_EE, 0x2001_0DB8 << 96 | 7, 0x4321, 1, 0x1234)
    assert (d.src_mac, d.src_gid, d.vlan_present, d.vlan_tci) == (SGIDS[1].mac, SGIDS[1].gid, 1, 5 << 13 | 0x123)
    assert pkts[1].desc.deth_qkey == 0x1111_0001
    assert [c.status for c in b.cqes(1)] == [CqeStatus.SUCCESS] * 2


@pytest.mark.parametrize("mode", list(LinkMode), ids=lambda m: m.slug)
def test_link_mode_fields(mode):
    b = Bench(nqps=1)
    b.qp(0, mode=mode, sl=3, traffic_class=0x28, hop_limit=9, flow_label=0xABCDE, udp_sport=0xD000)
    b.post(0, WqeOpcode.SEND, 100)
    b.ring(0)
    (p,) = b.run().packets
    d = p.desc
    if mode.is_ethernet:
        assert (d.dst_mac, d.src_mac) == (0x02_00_00_00_00_02, SGIDS[0].mac)
    else:
        assert (d.dlid, d.slid, d.sl, d.vl) == (0x22, 0x77, 3, 0)
    if mode != LinkMode.IB_LOCAL:
        assert d.hop_limit == 9 and d.traffic_class == 0x28
    if mode == LinkMode.ROCEV2_IPV4:
        assert d.ip_id == 0 and d.udp_sport == 0xD000


def test_inline():
    b = Bench(nqps=2)
    b.qp(0)
    b.qp(1, service=ServiceType.UD)
    inl = WqeFlags.SIGNALED | WqeFlags.INLINE
    d32 = b.post(0, WqeOpcode.RDMA_WRITE, 32, flags=inl, remote_addr=0x100, rkey=1)
    b.post(0, WqeOpcode.SEND, 0, flags=inl)
    d12 = b.post(1, WqeOpcode.SEND, 12, flags=inl, dest_qpn=5)
    b.ring(0)
    b.ring(1)
    b.run()
    assert [p.payload for p in b.of(0)] == [d32, b""]
    assert [p.payload for p in b.of(1)] == [d12]
    b.post(0, WqeOpcode.SEND, 8, flags=inl)
    raw = bytearray(b.mem.peek(SQ_RING + 2 * 64, 64))
    raw[4] = 33                                     # an RC inline length above the 32 bytes the WQE holds
    b.mem.poke(SQ_RING + 2 * 64, bytes(raw))
    b.ring(0)
    b.run()
    assert b.cqes(0)[-1].status == CqeStatus.LOC_LEN_ERR


def test_unsignaled_and_zero_length():
    b = Bench(nqps=1)
    b.qp(0)
    b.post(0, WqeOpcode.SEND, 0, flags=0)
    b.post(0, WqeOpcode.RDMA_WRITE, 0, remote_addr=0x40, rkey=2)
    b.ring(0)
    pkts = b.run().packets
    assert names(pkts) == ["RC_SEND_ONLY", "RC_RDMA_WRITE_ONLY"]
    assert all(p.payload == b"" for p in pkts) and pkts[1].desc.reth_dma_len == 0
    assert [c.wqe_index for c in b.cqes(0)] == [1]
    assert b.drv.qp(0).sq_ci == 2 and b.model.counters()["wqe_count"] == 2


# --- scheduler --------------------------------------------------------------------------------------

@pytest.mark.parametrize("quota", [1, 4, 16, 64])
def test_fairness_long_message(quota):
    b = Bench(nqps=2, quota=quota)
    b.qp(0, mtu=PathMtu.MTU_256)
    b.qp(1, mtu=PathMtu.MTU_256)
    b.post(0, WqeOpcode.RDMA_WRITE, 65536, remote_addr=0, rkey=1)
    b.post(1, WqeOpcode.SEND, 10)
    b.ring(0)
    b.ring(1)
    pkts = b.run().packets
    assert len(pkts) == 257
    first_b = [p.qpn for p in pkts].index(1)
    assert first_b == quota
    assert b"".join(p.payload for p in pkts if p.qpn == 0) == b.mem.peek(BUFFERS, 65536)


def test_round_robin_order():
    b = Bench(nqps=4, quota=2)
    for qpn in (2, 0, 3):
        b.qp(qpn, mtu=PathMtu.MTU_256)
        b.post(qpn, WqeOpcode.SEND, 5 * 256 - 10)
    b.qp(1, mtu=PathMtu.MTU_256)
    for qpn in (2, 0, 3):
        b.ring(qpn)
    pkts = b.run().packets
    assert [p.qpn for p in pkts] == [2, 2, 0, 0, 3, 3] * 2 + [2, 0, 3]


def test_several_wqes_per_turn_and_late_doorbell():
    b = Bench(nqps=2, quota=3)
    b.qp(0)
    b.qp(1)
    for _ in range(4):
        b.post(0, WqeOpcode.SEND, 1)
    b.post(1, WqeOpcode.SEND, 1)
    b.ring(0)
    b.ring(1)
    b.ring(0)                                       # a second doorbell for a queued QP does not queue it twice
    b.model.run(max_turns=1)
    assert [p.qpn for p in b.model.packets] == [0, 0, 0]
    b.post(1, WqeOpcode.SEND, 1)
    b.ring(1)
    b.run()
    assert [p.qpn for p in b.model.packets] == [0, 0, 0, 1, 1, 0]


def test_enable_gates_the_scheduler():
    b = Bench(nqps=1, enable=False)
    b.qp(0)
    b.post(0, WqeOpcode.SEND, 8)
    b.ring(0)
    b.run()
    assert b.model.packets == [] and b.drv.qp(0).sq_pi == 1 and not b.model.read_reg(REG["STATUS"].offset) & 1
    b.model.write_reg(REG["CONTROL"].offset, 1)
    b.run()
    assert len(b.model.packets) == 1 and b.model.read_reg(REG["STATUS"].offset) & 1


# --- completions and interrupts ----------------------------------------------------------------------------

def test_cq_ring_wrap_owner_and_consumer_index():
    b = Bench(nqps=1, cq_log=2)
    b.qp(0)
    got = []
    for round_ in range(3):
        for _ in range(3):
            b.post(0, WqeOpcode.SEND, 1)
        b.ring(0)
        b.run()
        entries = b.drv.cq_entries(0)
        got += entries
        assert [c.owner for c in entries] == [(i >> 2 & 1) ^ 1 for i in range(3 * round_, 3 * round_ + 3)]
        b.model.set_cq_ci(0, b.drv.cq(0).pi)
    assert [c.wqe_index for c in got] == list(range(9))
    assert b.drv.cq(0).state == CqState.ACTIVE and b.drv.cq(0).pi == 9 == b.drv.cq(0).ci


def test_interrupt_moderation():
    b = Bench(nqps=1, int_mod_count=3, int_mod_timer=500)
    b.qp(0)
    for _ in range(7):
        b.post(0, WqeOpcode.SEND, 1)
    b.ring(0)
    b.run()
    assert [(e.kind, e.cause, e.cqes) for e in b.model.irq_events] == [
        ("cq", "count", 3), ("cq", "count", 6), ("cq", "timer", 7)]
    assert b.model.reg("IRQ_COUNT") == 3 and b.model.reg("INT_STATUS") == 1
    assert b.model.read_reg(REG["STATUS"].offset) == 0b11
    b.model.write_reg(REG["INT_STATUS"].offset, 1)
    assert b.model.read_reg(REG["STATUS"].offset) == 0b01
    c = Bench(nqps=1, int_mod_count=4)
    c.qp(0)
    for _ in range(7):
        c.post(0, WqeOpcode.SEND, 1)
    c.ring(0)
    c.run()
    assert [e.cqes for e in c.model.irq_events] == [4]


# --- bad input ---------------------------------------------------------------------------------------------

def _good_traffic(b, qpn):
    b.qp(qpn, mtu=PathMtu.MTU_256)
    rng = random.Random(qpn)
    for length in (0, 300, 1000, 7):
        b.post(qpn, rng.choice(_OPS), length, rng=rng, remote_addr=0x1000, rkey=3, imm=9)


def _bad_case(kind, b):
    """Set up QP 0 for bad-input class ``kind``; return the expected CQE statuses of QP 0."""
    FLUSH = CqeStatus.WR_FLUSH_ERR
    tail = [FLUSH, FLUSH]
    if kind == "bad_opcode":
        b.qp(0)
        b.post(0, 0x00, 8)
        b.post(0, WqeOpcode.SEND, 8)
        b.post(0, WqeOpcode.ATOMIC_CMP_SWAP, 8)
        b.ring(0)
        return [CqeStatus.LOC_QP_OP_ERR] + tail
    if kind == "read_on_uc":
        b.qp(0, service=ServiceType.UC)
        b.post(0, WqeOpcode.RDMA_READ, 8)
        b.post(0, WqeOpcode.SEND, 8)
        b.post(0, WqeOpcode.SEND, 8)
        b.ring(0)
        return [CqeStatus.LOC_QP_OP_ERR] + tail
    if kind == "length_2_31":
        b.qp(0)
        b.post(0, WqeOpcode.SEND, 4)
        b.drv.post(0, Wqe(opcode=WqeOpcode.RDMA_WRITE, length=(1 << 31) + 1, wr_id=7, local_addr=BUFFERS))
        b.post(0, WqeOpcode.SEND, 8)
        b.post(0, WqeOpcode.SEND, 8)
        b.ring(0)
        return [CqeStatus.SUCCESS, CqeStatus.LOC_LEN_ERR] + tail
    if kind == "ud_above_mtu":
        b.qp(0, service=ServiceType.UD, mtu=PathMtu.MTU_256)
        b.post(0, WqeOpcode.SEND, 257, dest_qpn=3)
        b.post(0, WqeOpcode.SEND, 8, dest_qpn=3)
        b.post(0, WqeOpcode.SEND, 8, dest_qpn=3)
        b.ring(0)
        return [CqeStatus.LOC_LEN_ERR] + tail
    if kind == "db_bad_qpn":
        b.drv.target.write_reg(REG["DB_QPN"].offset, 99)
        b.drv.target.write_reg(REG["DB_SQ_PI"].offset, 1)
        return []
    if kind == "qp_not_rts":
        b.qp(0, state=QpState.INIT)
        b.post(0, WqeOpcode.SEND, 8)
        b.ring(0)
        return [CqeStatus.QP_STATE_ERR]
    if kind == "pi_jump":
        b.qp(0, log_sq_size=4)
        b.post(0, WqeOpcode.SEND, 8)
        b.post(0, WqeOpcode.SEND, 8)
        b.ring(0)
        b.ring(0, 2 + 17)
        return [CqeStatus.SQ_OVERFLOW] + tail
    if kind == "wqe_fetch_bus_error":
        b.qp(0)
        b.post(0, WqeOpcode.SEND, 8)
        for _ in range(3):
            b.post(0, WqeOpcode.SEND, 8)
        b.mem.add_read_error(SQ_RING + 64, SQ_RING + 128)
        b.ring(0)
        return [CqeStatus.SUCCESS, CqeStatus.WQE_FETCH_ERR] + tail
    if kind == "payload_bus_error":
        b.qp(0, mtu=PathMtu.MTU_256)
        b.post(0, WqeOpcode.SEND, 1000)
        b.post(0, WqeOpcode.SEND, 8)
        b.post(0, WqeOpcode.SEND, 8)
        base = BUFFERS
        b.mem.add_read_error(base + 512, base + 576, resp=3)
        b.ring(0)
        return [CqeStatus.PAYLOAD_READ_ERR] + tail
    if kind == "cqe_write_bus_error":
        b.qp(0)
        b.post(0, WqeOpcode.SEND, 8)
        b.post(0, WqeOpcode.SEND, 8)
        b.post(0, WqeOpcode.SEND, 8)
        b.mem.add_write_error(CQ_RING + 64, CQ_RING + 128)
        b.ring(0)
        return [CqeStatus.SUCCESS, CqeStatus.SUCCESS]
    if kind == "cq_full":
        b.drv.create_cq(0, CQ_RING, 2)
        b.qp(0)
        for _ in range(6):
            b.post(0, WqeOpcode.SEND, 8)
        b.ring(0)
        return [CqeStatus.SUCCESS] * 3 + [CqeStatus.CQ_OVERFLOW]
    raise AssertionError(kind)


_BAD = ["bad_opcode", "read_on_uc", "length_2_31", "ud_above_mtu", "db_bad_qpn", "qp_not_rts", "pi_jump",
        "wqe_fetch_bus_error", "payload_bus_error", "cqe_write_bus_error", "cq_full"]
_ERR_BIT = {"bad_opcode": ErrBit.WQE_ERROR, "read_on_uc": ErrBit.WQE_ERROR, "length_2_31": ErrBit.WQE_ERROR,
            "ud_above_mtu": ErrBit.WQE_ERROR, "db_bad_qpn": ErrBit.DB_BAD_QPN, "qp_not_rts": ErrBit.DB_REJECTED,
            "pi_jump": ErrBit.DB_REJECTED, "wqe_fetch_bus_error": ErrBit.BUS_WQE,
            "payload_bus_error": ErrBit.BUS_PAYLOAD, "cqe_write_bus_error": ErrBit.BUS_CQ,
            "cq_full": ErrBit.CQ_OVERFLOW}


@pytest.mark.parametrize("kind", _BAD)
def test_bad_input(kind):
    def good_only():
        b = Bench(nqps=4, quota=2)
        _good_traffic(b, 2)
        b.ring(2)
        return b.run()

    ref = good_only()
    b = Bench(nqps=4, quota=2)
    _good_traffic(b, 2)
    want = _bad_case(kind, b)
    b.ring(2)
    m = b.run()
    assert [p.desc for p in b.of(2)] == [p.desc for p in ref.packets]
    assert [p.payload for p in b.of(2)] == [p.payload for p in ref.packets]
    assert b.cqes(2) == [c.cqe for c in ref.cqes]
    assert b.drv.qp(2).state == QpState.RTS
    assert [c.status for c in b.cqes(0)] == want
    assert m.reg("ERR_STATUS") >> _ERR_BIT[kind] & 1
    assert any(e.kind == "err" for e in m.irq_events)
    assert m.idle
    if kind != "db_bad_qpn":
        qp = b.drv.qp(0)
        assert qp.state == QpState.ERROR and m.reg("ERR_QPN") == 0
        assert qp.sq_ci == qp.sq_pi
    else:
        assert m.reg("ERR_QPN") == 99 and m.reg("DB_ERRORS") == 1
    if kind == "payload_bus_error":
        assert [len(p.payload) for p in b.of(0)] == [256, 256]
    if kind in ("cqe_write_bus_error", "cq_full"):
        assert b.drv.cq(0).state == CqState.ERROR
    if kind == "cq_full":
        assert len(b.of(0)) == 4 and b.drv.cq(0).pi == 4 and m.reg("CQE_DROPS") == 2


@pytest.mark.parametrize("max_mtu, width", [(256, 64), (1024, 128), (4096, 512)])
def test_max_mtu_parameter(max_mtu, width):
    """A context asking for a path MTU above the engine's maximum is bad (LOC_QP_OP_ERR, the QP goes to
    ERROR); MTUs up to the maximum segment as usual. CAPS2 reports the width and the maximum."""
    b = Bench(nqps=len(PathMtu), config=RnicConfig(max_mtu=max_mtu, width=width))
    assert b.model.reg("CAPS2") == {64: 3, 128: 4, 256: 5, 512: 6}[width] | PathMtu.of_bytes(max_mtu) << 4
    for q, mtu in enumerate(PathMtu):
        b.qp(q, mtu=mtu)
        b.post(q, WqeOpcode.SEND, 5000)
        b.ring(q)
    b.run()
    for q, mtu in enumerate(PathMtu):
        if mtu.bytes <= max_mtu:
            assert [c.status for c in b.cqes(q)] == [CqeStatus.SUCCESS]
            assert [len(p.payload) for p in b.of(q)][0] == mtu.bytes and len(b.of(q)) == -(-5000 // mtu.bytes)
        else:
            assert [c.status for c in b.cqes(q)] == [CqeStatus.LOC_QP_OP_ERR] and b.of(q) == []
            assert b.drv.qp(q).state == QpState.ERROR


def test_path_mtu_of_bytes():
    assert [PathMtu.of_bytes(n) for n in (256, 4096)] == [PathMtu.MTU_256, PathMtu.MTU_4096]
    for bad in (128, 1500, 8192):
        with pytest.raises(ValueError):
            PathMtu.of_bytes(bad)
    with pytest.raises(ValueError, match="max_mtu"):
        EngineModel(HostMemory(), RnicConfig(max_mtu=1500))


def test_flush_after_error_and_doorbell_on_error_qp():
    b = Bench(nqps=1)
    b.qp(0)
    b.post(0, 0x7F, 0)
    b.post(0, WqeOpcode.SEND, 4, flags=0)
    b.ring(0)
    b.run()
    assert [(c.status, c.wqe_index) for c in b.cqes(0)] == [(CqeStatus.LOC_QP_OP_ERR, 0), (CqeStatus.WR_FLUSH_ERR, 1)]
    b.post(0, WqeOpcode.RDMA_WRITE, 4, wr_id=0x77)
    b.ring(0)
    b.run()
    last = b.cqes(0)[-1]
    assert (last.status, last.wr_id, last.opcode, last.wqe_index) == (CqeStatus.WR_FLUSH_ERR, 0x77, 3, 2)
    assert b.model.packets == [] and b.model.counters()["flush_count"] == 2


def test_error_registers_capture_first_error():
    b = Bench(nqps=2)
    b.qp(1)
    b.post(1, 0x00, 0)
    b.ring(1)
    b.drv.target.write_reg(REG["DB_QPN"].offset, 5)
    b.drv.target.write_reg(REG["DB_SQ_PI"].offset, 1)
    b.run()
    m = b.model
    assert m.reg("ERR_STATUS") == 1 << ErrBit.DB_BAD_QPN | 1 << ErrBit.WQE_ERROR
    assert m.reg("ERR_QPN") == 5 and m.reg("ERR_INFO") == ErrBit.DB_BAD_QPN
    m.write_reg(REG["ERR_STATUS"].offset, 0xFFFF)
    assert m.reg("ERR_STATUS") == 0


def test_qpc_bus_error_on_doorbell():
    b = Bench(nqps=4)
    b.qp(3)
    b.post(3, WqeOpcode.SEND, 1)
    b.mem.add_read_error(QPC_BASE + 3 * 128, QPC_BASE + 4 * 128)
    b.ring(3)
    m = b.run()
    assert m.packets == [] and m.cqes == [] and m.reg("ERR_STATUS") == 1 << ErrBit.BUS_QPC


# --- random mixes -------------------------------------------------------------------------------------------

def test_random_mix():
    s = seed()
    rng = random.Random(s)
    nqps = rng.choice([1, 3, 16, 64])
    b = Bench(nqps=nqps, quota=rng.randint(1, 12))
    posted = {}
    for qpn in range(nqps):
        service = rng.choice(list(ServiceType))
        b.qp(qpn, service=service, mtu=rng.choice(list(PathMtu)), mode=rng.choice(list(LinkMode)),
             next_psn=rng.getrandbits(24), sgid_index=rng.randrange(2))
        posted[qpn] = []
        for _ in range(rng.randint(0, 4)):
            ops = list(_OPS) + ([WqeOpcode.RDMA_READ] if service == ServiceType.RC else [])
            ops = ops if service != ServiceType.UD else [WqeOpcode.SEND, WqeOpcode.SEND_WITH_IMM]
            op = rng.choice(ops)
            cap = PathMtu(b.drv.qps[qpn].path_mtu).bytes if service == ServiceType.UD else 65536
            length = min(cap, rng.choice([0, 1, rng.randint(0, 5000), rng.randint(0, 65536)]))
            flags = rng.choice([0, WqeFlags.SIGNALED, WqeFlags.SIGNALED | WqeFlags.SOLICITED])
            kw = {"dest_qpn": rng.getrandbits(24)} if service == ServiceType.UD else {"remote_addr": 64, "rkey": 1}
            data = b.post(qpn, op, length, rng=rng, flags=flags, **kw)
            posted[qpn].append((op, length, flags, data))
    order = list(range(nqps))
    rng.shuffle(order)
    for qpn in order:
        b.ring(qpn)
    m = b.run()
    for qpn in range(nqps):
        pkts = b.of(qpn)
        ctx = b.drv.qps[qpn]
        mtu = PathMtu(ctx.path_mtu).bytes
        psn = ctx.next_psn
        i = 0
        for op, length, flags, data in posted[qpn]:
            n = 1 if op == WqeOpcode.RDMA_READ else max(1, -(-length // mtu))
            msg = pkts[i:i + n]
            i += n
            assert msg[0].desc.psn == psn
            psn = (psn + (max(1, -(-length // mtu)) if op == WqeOpcode.RDMA_READ else n)) % (1 << 24)
            if op == WqeOpcode.RDMA_READ:
                assert names(msg) == ["RC_RDMA_READ_REQUEST"]
            else:
                assert names(msg) == expected_names(ServiceType(ctx.service), op, n)
                assert b"".join(p.payload for p in msg) == data
        assert i == len(pkts)
        assert b.drv.qp(qpn).next_psn == psn and b.drv.qp(qpn).sq_ci == len(posted[qpn])
        signaled = sum(1 for _, _, f, _ in posted[qpn] if f & WqeFlags.SIGNALED)
        assert len(b.cqes(qpn)) == signaled and all(c.status == CqeStatus.SUCCESS for c in b.cqes(qpn))
    c = m.counters()
    assert c["pkt_count"] == len(m.packets) and c["cqe_count"] == len(m.cqes)
    assert c["byte_count"] == sum(len(p.payload) for p in m.packets) % (1 << 32)
    assert m.reg("ERR_STATUS") == 0


def test_random_errors_never_hang_and_isolate():
    s = seed()
    rng = random.Random(s)
    b = Bench(nqps=8, quota=rng.randint(1, 6), cq_log=rng.choice([2, 3, 10]))
    for qpn in range(8):
        b.qp(qpn, mtu=rng.choice(list(PathMtu)), state=rng.choice([QpState.RTS] * 5 + [QpState.INIT]))
        for _ in range(rng.randint(1, 6)):
            op = rng.choice(list(_OPS) + [WqeOpcode.RDMA_READ, 0, 0x42])
            b.post(qpn, op, rng.choice([0, 10, 3000]), rng=rng, remote_addr=8, rkey=1)
        if rng.random() < 0.3:
            lo = BUFFERS + qpn * BUF_STRIDE + rng.randrange(0, 4096, 64)
            b.mem.add_read_error(lo, lo + 64)
    for qpn in rng.sample(range(8), 8):
        b.ring(qpn, rng.choice([None, None, None, 400]))
    m = b.run()
    assert m.idle
    for qpn in range(8):
        qp = b.drv.qp(qpn)
        assert qp.state in (QpState.RTS, QpState.ERROR)
        assert qp.state == QpState.ERROR or qp.sq_ci == qp.sq_pi
        statuses = [c.status for c in b.cqes(qpn)]
        if qp.state == QpState.RTS:
            assert all(st == CqeStatus.SUCCESS for st in statuses)
        first_bad = next((i for i, st in enumerate(statuses) if st != CqeStatus.SUCCESS), len(statuses))
        rest = statuses[first_bad + 1:]
        if rest and rest[-1] == CqeStatus.CQ_OVERFLOW:
            rest.pop()
        assert all(st == CqeStatus.WR_FLUSH_ERR for st in rest)
        assert len(statuses) <= 1 << b.drv.cq(qpn).log_size


def test_deterministic():
    s = seed()

    def once():
        rng = random.Random(s)
        b = Bench(nqps=5, quota=3)
        for qpn in range(5):
            b.qp(qpn, mtu=rng.choice(list(PathMtu)))
            for _ in range(3):
                b.post(qpn, rng.choice(_OPS), rng.randint(0, 9000), rng=rng, remote_addr=8, rkey=1)
            b.ring(qpn)
        m = b.run()
        return [p.frame() for p in m.packets], [c.cqe.pack() for c in m.cqes], b.mem.pages

    assert once() == once()


# --- AXI helpers -----------------------------------------------------------------------------------------

@given(st.integers(0, 1 << 20), st.integers(0, 70000), st.sampled_from([4, 8, 16, 32, 64]), st.integers(0, 300))
def test_split_bursts(addr, nbytes, beat, max_beats):
    bursts = split_bursts(addr, nbytes, beat, max_beats)
    limit = max_beats if 1 <= max_beats <= 256 else 256
    pos = addr - addr % beat
    for a, beats in bursts:
        assert a == pos and 1 <= beats <= limit
        assert a // PAGE == (a + beats * beat - 1) // PAGE
        pos += beats * beat
    assert (pos >= addr + nbytes) if nbytes else bursts == []
    assert not bursts or pos - beat < addr + nbytes


def test_host_memory_errors():
    mem = HostMemory()
    mem.poke(PAGE - 2, b"abcd")
    assert mem.peek(PAGE - 3, 6) == b"\0abcd\0"
    mem.add_read_error(PAGE, 2 * PAGE, resp=3)
    with pytest.raises(BusError) as e:
        mem.read(PAGE - 2, 4)
    assert e.value.resp == 3
    assert mem.read(PAGE - 2, 2) == b"ab"
    mem.add_write_error(0, 64)
    with pytest.raises(BusError):
        mem.write(60, b"zzzzzz")
    assert mem.peek(60, 6) == bytes(6)
    with pytest.raises(ValueError):
        mem.add_read_error(1, 64)


def test_every_opcode_form_is_emitted_and_parses():
    b = Bench(nqps=3)
    for qpn, service in enumerate(ServiceType):
        b.qp(qpn, service=service, mtu=PathMtu.MTU_256)
        if service == ServiceType.UD:
            for op in (WqeOpcode.SEND, WqeOpcode.SEND_WITH_IMM):
                b.post(qpn, op, 256, dest_qpn=1)
        else:
            for op in _OPS:
                for length in (100, 600):
                    b.post(qpn, op, length, remote_addr=8, rkey=1)
        if service == ServiceType.RC:
            b.post(qpn, WqeOpcode.RDMA_READ, 600)
        b.ring(qpn)
    emitted = {p.desc.opcode for p in b.run().packets}
    assert emitted <= set(OPCODE_INFO) and len(emitted) == 13 + 12 + 2


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(list(PathMtu)), st.sampled_from(_OPS), st.integers(0, 20000), st.integers(0, (1 << 24) - 1),
       st.integers(1, 40))
def test_segmentation_property(mtu, op, length, psn, quota):
    b = Bench(nqps=1, quota=quota)
    b.qp(0, mtu=mtu, next_psn=psn)
    data = b.post(0, op, length, remote_addr=0x10, rkey=1)
    b.ring(0)
    pkts = b.run().packets
    n = max(1, -(-length // mtu.bytes))
    assert names(pkts) == expected_names(ServiceType.RC, op, n)
    assert b"".join(p.payload for p in pkts) == data
    assert all(p.desc.psn == (psn + i) % (1 << 24) for i, p in enumerate(pkts))
    assert all(len(p.payload) == mtu.bytes for p in pkts[:-1])


@pytest.mark.parametrize("state", [QpState.RESET, QpState.INIT, QpState.RTR, QpState.SQD, QpState.SQE])
def test_doorbell_state_check(state):
    b = Bench(nqps=1)
    b.qp(0, state=state)
    b.post(0, WqeOpcode.SEND, 1)
    b.ring(0)
    b.run()
    assert [(c.status, c.wqe_index, c.wr_id) for c in b.cqes(0)] == [(CqeStatus.QP_STATE_ERR, 1, 0)]
    assert b.drv.qp(0).state == QpState.ERROR and b.drv.qp(0).sq_pi == 0 and b.model.packets == []


def test_cq_not_active_or_out_of_range_drops():
    b = Bench(nqps=3)
    b.drv.create_cq(1, CQ_RING, 4, state=CqState.RESET)
    b.qp(1)
    b.qp(2, cqn=7)
    for qpn in (1, 2):
        b.post(qpn, WqeOpcode.SEND, 1)
        b.post(qpn, WqeOpcode.SEND, 1)
        b.ring(qpn)
    m = b.run()
    assert m.cqes == [] and len(m.packets) == 2 and m.reg("CQE_DROPS") == 4
    assert b.drv.qp(1).state == b.drv.qp(2).state == QpState.ERROR
    assert m.reg("ERR_STATUS") == 1 << ErrBit.CQE_DROPPED
    m.set_cq_ci(9, 0)
    assert m.reg("ERR_STATUS") >> ErrBit.CQ_DB_BAD_CQN & 1


def test_error_ends_the_turn_and_flush_waits_for_the_next():
    """A QP that moves to ERROR in its turn ends the turn; its flush comes in its next turn, after
    the other QPs' turns (here on one shared CQ, whose order shows it)."""
    b = Bench(nqps=2, quota=16)
    b.qp(0, cqn=0)
    b.qp(1, cqn=0)
    b.post(0, WqeOpcode.SEND, 10)
    b.post(0, WqeOpcode.SEND, 10)
    b.post(0, WqeOpcode.SEND, 10)
    b.ring(0)
    b.post(1, WqeOpcode.SEND, 10)
    b.ring(1)
    b.mem.add_read_error(BUFFERS + 128, BUFFERS + 192)               # QP 0's second payload
    m = b.run()
    order = [(c.cqe.qpn, c.cqe.status, c.cqe.wqe_index) for c in m.cqes]
    assert order == [(0, CqeStatus.SUCCESS, 0), (0, CqeStatus.PAYLOAD_READ_ERR, 1), (1, CqeStatus.SUCCESS, 0),
                     (0, CqeStatus.WR_FLUSH_ERR, 2)]
    assert [p.qpn for p in m.packets] == [0, 1]
