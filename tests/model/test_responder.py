"""The responder model (rnic.model.responder): two model engines talk, A's transmit side against B's
receive side, over every link mode; then each rule of docs/receive.md on frames built by hand, by scapy,
and corrupted at random. Random tests print RNIC_SEED and rerun from it."""

import os
import random

import pytest

from rnic.sim.responder_pair import A_QPN, B_QPN, LOCAL_DATA, PD, RECV_MR, REMOTE_MR, Pair
from rnic.model.descriptor import LinkMode
from rnic.model.opcodes import Opcode
from rnic.model.qpc import QpState, ServiceType
from rnic.model.receive import DropReason
from rnic.model.recv_records import (CQE_FLAG_GRH, CQE_FLAG_IMM, CQE_FLAG_INV, CQE_FLAG_SOLICITED, Access,
                                     MemoryRegion, OpenMessage, RecvOpcode)
from rnic.model.responder import RNR_NAK, Outcome, RxDrop, Syndrome
from rnic.model.wqe import CqeStatus, Wqe, WqeFlags, WqeOpcode

MODES = list(LinkMode)
SIZES = [0, 1, 100, 1024, 3 * 1024 + 5]          # 0, 1, < MTU, = MTU, multi-packet (MTU 1024)
RC, UC, UD = ServiceType.RC, ServiceType.UC, ServiceType.UD


def seed() -> int:
    value = int(os.environ.get("RNIC_SEED", random.SystemRandom().randrange(2**31)))
    print(f"RNIC_SEED={value}")
    return value


def data_of(n: int, salt: int = 0) -> bytes:
    return bytes((i * 7 + salt) & 0xFF for i in range(n))


def outcomes(verdicts):
    return [v.outcome for v in verdicts]


def acks(pair, start=0):
    return [(r.desc.opcode, r.desc.psn, r.desc.aeth_syndrome, r.desc.aeth_msn) for r in pair.responses(start)]


# --- A's transmit side against B's receive side ---------------------------------------------------

@pytest.mark.parametrize("service", [RC, UC], ids=lambda s: s.name)
@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.slug)
def test_write_lands_in_remote_memory(mode, service):
    pair = Pair(mode, service)
    va, msn = REMOTE_MR[2] + 0x1003, 0          # unaligned
    for n in SIZES:
        data = data_of(n, n)
        pair.a.mem.poke(LOCAL_DATA, data)
        before = len(pair.responses())
        verdicts = pair.run(Wqe(opcode=WqeOpcode.RDMA_WRITE, length=n, local_addr=LOCAL_DATA, rkey=pair.rkey,
                                remote_addr=va))
        assert outcomes(verdicts) == [Outcome.EXECUTED] * max(1, -(-n // 1024))
        assert pair.b.mem.peek(pair.remote(va), n) == data
        msn += 1
        if service == RC:       # one ACK per message: A asks for it on the last packet
            assert acks(pair, before) == [(Opcode.RC_ACKNOWLEDGE, verdicts[-1].psn, Syndrome.ACK, msn)]
        else:
            assert pair.responses() == []
        va += n + 0x101
    assert pair.recv_cqes() == []
    assert pair.b.driver.qp(B_QPN).epsn == pair.a.driver.qp(A_QPN).next_psn


@pytest.mark.parametrize("service", [RC, UC], ids=lambda s: s.name)
@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.slug)
def test_send_scatters_into_receive_buffers(mode, service):
    pair = Pair(mode, service)
    for i, n in enumerate(SIZES):
        data = data_of(n, i)
        pair.a.mem.poke(LOCAL_DATA, data)
        addrs = pair.post_recv(100 + i, 7, 1500, 3000, offset=0x100 * i + 3)
        imm = i % 2 == 1
        pair.run(Wqe(opcode=WqeOpcode.SEND_WITH_IMM if imm else WqeOpcode.SEND, imm=0x1000 + i, length=n,
                     local_addr=LOCAL_DATA, flags=WqeFlags.SIGNALED | WqeFlags.SOLICITED))
        got = pair.b.mem.peek(addrs[0], min(n, 7)) + pair.b.mem.peek(addrs[1], min(max(n - 7, 0), 1500))
        got += pair.b.mem.peek(addrs[2], max(n - 1507, 0))
        assert got == data
        cqe = pair.recv_cqes()[-1]
        assert (cqe.wr_id, cqe.byte_len, cqe.opcode, cqe.status, cqe.wqe_index, cqe.qpn) == (
            100 + i, n, RecvOpcode.RECV, CqeStatus.SUCCESS, i, B_QPN)
        assert cqe.flags == CQE_FLAG_SOLICITED | (CQE_FLAG_IMM if imm else 0)
        assert cqe.imm == (0x1000 + i if imm else 0)
    assert pair.b.driver.rx(B_QPN).rq_ci == len(SIZES)


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.slug)
def test_ud_send_delivers_the_grh_first(mode):
    pair = Pair(mode, UD)
    data = data_of(300)
    pair.a.mem.poke(LOCAL_DATA, data)
    addrs = pair.post_recv(9, 40 + 300)
    a_ctx = pair.a.driver.qp(A_QPN)
    verdicts = pair.run(Wqe(opcode=WqeOpcode.SEND_WITH_IMM, imm=77, length=300, local_addr=LOCAL_DATA,
                            qkey=0x11111111, dst_mac=a_ctx.dst_mac, dlid=a_ctx.dlid, dest_qpn=B_QPN,
                            dst_gid=a_ctx.dst_gid))
    assert outcomes(verdicts) == [Outcome.EXECUTED]
    frame = pair.a.engine.packets[-1].frame()
    head = pair.b.mem.peek(addrs[0], 40)
    if mode is LinkMode.ROCEV2_IPV4:
        assert head == bytes(20) + frame[14:34]
    elif mode is LinkMode.IB_LOCAL:
        assert head == bytes(40)            # no GRH: left unwritten
    else:
        start = 14 if mode.is_ethernet else 8
        assert head == frame[start:start + 40]
    assert pair.b.mem.peek(addrs[0] + 40, 300) == data
    cqe = pair.recv_cqes()[-1]
    assert (cqe.byte_len, cqe.src_qp, cqe.imm) == (340, A_QPN, 77)
    assert cqe.flags == CQE_FLAG_IMM | (0 if mode is LinkMode.IB_LOCAL else CQE_FLAG_GRH)
    assert cqe.slid == (0 if mode.is_ethernet else pair.a.lid)
    assert pair.responses() == []


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.slug)
def test_read_is_answered_from_local_memory(mode):
    pair = Pair(mode, RC)
    remote = REMOTE_MR[2] + 0x2001
    data = data_of(5000, 3)
    pair.b.mem.poke(pair.remote(remote), data)
    for n in SIZES:
        before = len(pair.responses())
        psn = pair.a.driver.qp(A_QPN).next_psn
        verdicts = pair.run(Wqe(opcode=WqeOpcode.RDMA_READ, length=n, local_addr=LOCAL_DATA, rkey=pair.rkey,
                                remote_addr=remote))
        assert outcomes(verdicts) == [Outcome.EXECUTED]
        got = pair.responses(before)
        count = max(1, -(-n // 1024))
        assert [r.desc.psn for r in got] == [psn + i for i in range(count)]
        names = [Opcode(r.desc.opcode).name.rsplit("_", 1)[1] for r in got]
        assert names == (["ONLY"] if count == 1 else ["FIRST"] + ["MIDDLE"] * (count - 2) + ["LAST"])
        assert b"".join(r.payload for r in got) == data[:n]
        assert pair.b.driver.qp(B_QPN).epsn == psn + count
    assert pair.b.driver.rx(B_QPN).msn == len(SIZES)


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.slug)
def test_atomic_wqes_from_the_transmit_side_execute_remotely(mode):
    """A's atomic WQEs leave as one AtomicETH request each (BTH 0x13 / 0x14, one PSN, no payload) and
    B's memory ends as the arithmetic says, computed here independently."""
    pair = Pair(mode, RC)
    va = REMOTE_MR[2] + 0x4008
    value = 0x1122_3344_5566_7788
    pair.b.mem.poke(pair.remote(va), value.to_bytes(8, "little"))
    steps = [(WqeOpcode.ATOMIC_FETCH_ADD, 0xFFFF_FFFF_FFFF_FFFF, 0),     # adds -1, wraps at 64 bits
             (WqeOpcode.ATOMIC_CMP_SWAP, 0x1234, 0xAAAA),               # compare fails: unchanged
             (WqeOpcode.ATOMIC_CMP_SWAP, value - 1, 0xBBBB)]            # compare matches: swapped
    origs, want = [], value
    for op, compare_add, swap in steps:
        psn = pair.a.driver.qp(A_QPN).next_psn
        start = len(pair.a.engine.packets)
        verdicts = pair.run(Wqe(opcode=op, length=8, rkey=pair.rkey, remote_addr=va, compare_add=compare_add,
                                swap=swap, local_addr=LOCAL_DATA, flags=WqeFlags.SIGNALED))
        assert outcomes(verdicts) == [Outcome.EXECUTED]
        (req,) = pair.a.engine.packets[start:]
        assert req.desc.opcode == (0x13 if op == WqeOpcode.ATOMIC_CMP_SWAP else 0x14)
        assert (req.desc.psn, req.payload, req.desc.atomic_va, req.desc.atomic_rkey) == (psn, b"", va, pair.rkey)
        assert pair.a.driver.qp(A_QPN).next_psn == (psn + 1) & 0xFFFFFF
        origs.append(want)
        if op == WqeOpcode.ATOMIC_FETCH_ADD:
            want = (want + compare_add) % (1 << 64)
        elif want == compare_add:
            want = swap
    assert int.from_bytes(pair.b.mem.peek(pair.remote(va), 8), "little") == want == 0xBBBB
    got = [r.desc.atomic_orig for r in pair.responses() if r.desc.opcode == Opcode.RC_ATOMIC_ACKNOWLEDGE]
    assert got == origs


@pytest.mark.parametrize("case", ["length", "inline", "uc"])
def test_atomic_wqe_refusals(case):
    """An atomic WQE of length other than 8 is LOC_LEN_ERR, an inline one and one on UC LOC_QP_OP_ERR;
    nothing is sent."""
    pair = Pair(service=UC if case == "uc" else RC)
    wqe = dict(opcode=WqeOpcode.ATOMIC_FETCH_ADD, length=7 if case == "length" else 8, rkey=pair.rkey,
               remote_addr=REMOTE_MR[2], flags=WqeFlags.SIGNALED)
    if case == "inline":
        wqe.update(flags=WqeFlags.SIGNALED | WqeFlags.INLINE, inline_data=bytes(8))
    assert pair.run(Wqe(**wqe)) == []
    (cqe,) = [c.cqe for c in pair.a.engine.cqes]
    assert cqe.status == (CqeStatus.LOC_LEN_ERR if case == "length" else CqeStatus.LOC_QP_OP_ERR)
    assert pair.a.driver.qp(A_QPN).state == QpState.ERROR


def test_write_with_immediate_consumes_a_receive_wqe():
    pair = Pair()
    pair.a.mem.poke(LOCAL_DATA, data_of(2100))
    pair.post_recv(55, 16)
    verdicts = pair.run(Wqe(opcode=WqeOpcode.RDMA_WRITE_WITH_IMM, imm=0xFEED, length=2100, local_addr=LOCAL_DATA,
                            rkey=pair.rkey, remote_addr=REMOTE_MR[2]))
    assert outcomes(verdicts) == [Outcome.EXECUTED] * 3
    cqe = pair.recv_cqes()[-1]
    assert (cqe.wr_id, cqe.byte_len, cqe.imm, cqe.opcode, cqe.flags) == (
        55, 2100, 0xFEED, RecvOpcode.RECV_RDMA_WITH_IMM, CQE_FLAG_IMM)
    assert pair.b.mem.peek(pair.remote(REMOTE_MR[2]), 2100) == data_of(2100)


# --- PSN rules ------------------------------------------------------------------------------------

def test_duplicate_send_and_write_are_acked_not_executed():
    pair = Pair()
    va = REMOTE_MR[2]
    assert pair.send(Opcode.RC_RDMA_WRITE_ONLY, 100, b"ABCD", reth_va=va, reth_rkey=pair.rkey,
                     reth_dma_len=4).outcome is Outcome.EXECUTED
    v = pair.send(Opcode.RC_RDMA_WRITE_ONLY, 100, b"WXYZ", reth_va=va, reth_rkey=pair.rkey, reth_dma_len=4)
    assert v.outcome is Outcome.DUPLICATE
    assert pair.b.mem.peek(pair.remote(va), 4) == b"ABCD"
    addrs = pair.post_recv(1, 64)
    assert pair.send(Opcode.RC_SEND_ONLY, 101, b"1234").outcome is Outcome.EXECUTED
    assert pair.send(Opcode.RC_SEND_ONLY, 101 - 5, b"5678").outcome is Outcome.DUPLICATE
    assert pair.b.mem.peek(addrs[0], 4) == b"1234" and len(pair.recv_cqes()) == 1
    # every duplicate is answered with an ACK of the newest PSN and the current MSN
    assert acks(pair) == [(Opcode.RC_ACKNOWLEDGE, 100, Syndrome.ACK, 1), (Opcode.RC_ACKNOWLEDGE, 100, Syndrome.ACK, 1),
                          (Opcode.RC_ACKNOWLEDGE, 101, Syndrome.ACK, 2), (Opcode.RC_ACKNOWLEDGE, 101, Syndrome.ACK, 2)]


def test_psn_ahead_naks_once_then_drops_until_the_gap_fills():
    pair = Pair()
    pair.post_recv(1, 64)
    pair.post_recv(2, 64)
    v = pair.send(Opcode.RC_SEND_ONLY, 102, b"late")
    assert (v.outcome, v.syndrome) == (Outcome.NAK, Syndrome.PSN_SEQ_ERR)
    assert acks(pair) == [(Opcode.RC_ACKNOWLEDGE, 100, Syndrome.PSN_SEQ_ERR, 0)]
    v = pair.send(Opcode.RC_SEND_ONLY, 103, b"later")
    assert (v.outcome, v.reason) == (Outcome.DROPPED, RxDrop.OUT_OF_SEQ)
    assert pair.send(Opcode.RC_SEND_ONLY, 100, b"ok").outcome is Outcome.EXECUTED
    assert pair.b.driver.rx(B_QPN).nak_sent == 0
    assert pair.send(Opcode.RC_SEND_ONLY, 102, b"nak again").syndrome == Syndrome.PSN_SEQ_ERR
    assert pair.b.driver.qp(B_QPN).state == QpState.RTS      # a sequence NAK does not end the QP


def test_psn_wraps_at_24_bits():
    pair = Pair(psn=(1 << 24) - 1)
    pair.post_recv(1, 64)
    pair.post_recv(2, 64)
    assert pair.send(Opcode.RC_SEND_ONLY, (1 << 24) - 1, b"a").outcome is Outcome.EXECUTED
    assert pair.send(Opcode.RC_SEND_ONLY, 0, b"b").outcome is Outcome.EXECUTED
    assert pair.send(Opcode.RC_SEND_ONLY, (1 << 24) - 1, b"a").outcome is Outcome.DUPLICATE
    # the expected PSN is 1: 2^23 - 1 ahead is a gap, 2^23 ahead counts as 2^23 behind
    assert pair.send(Opcode.RC_SEND_ONLY, (1 << 23) + 1, b"x").outcome is Outcome.DUPLICATE
    assert pair.send(Opcode.RC_SEND_ONLY, 1 << 23, b"x").outcome is Outcome.NAK


def test_uc_gap_drops_the_rest_of_the_message():
    pair = Pair(service=UC)
    addrs = pair.post_recv(1, 4096)
    mtu = bytes(1024)
    assert pair.send(Opcode.UC_SEND_FIRST, 100, mtu).outcome is Outcome.EXECUTED
    assert pair.send(Opcode.UC_SEND_MIDDLE, 102, mtu).reason == RxDrop.OUT_OF_SEQ         # 101 lost
    assert pair.send(Opcode.UC_SEND_LAST, 103, b"tail").reason == RxDrop.OUT_OF_SEQ
    # a new message starts afresh at its own PSN and reuses the abandoned WQE
    assert pair.send(Opcode.UC_SEND_ONLY, 200, b"fresh").outcome is Outcome.EXECUTED
    assert pair.b.mem.peek(addrs[0], 5) == b"fresh"
    cqe = pair.recv_cqes()[-1]
    assert (cqe.wr_id, cqe.byte_len, cqe.status) == (1, 5, CqeStatus.SUCCESS)
    assert pair.b.driver.qp(B_QPN).epsn == 201


def test_ud_has_no_psn_check():
    pair = Pair(service=UD)
    pair.post_recv(1, 64)
    pair.post_recv(2, 64)
    assert pair.send(Opcode.UD_SEND_ONLY, 5, b"x").outcome is Outcome.EXECUTED
    assert pair.send(Opcode.UD_SEND_ONLY, 5, b"y").outcome is Outcome.EXECUTED


# --- READ and atomic resources, duplicates --------------------------------------------------------

def test_duplicate_read_replays_a_sub_range():
    pair = Pair()
    va = REMOTE_MR[2] + 0x100
    pair.b.mem.poke(pair.remote(va), data_of(3000))
    pair.send(Opcode.RC_RDMA_READ_REQUEST, 100, reth_va=va, reth_rkey=pair.rkey, reth_dma_len=3000)
    assert pair.b.driver.qp(B_QPN).epsn == 103
    before = len(pair.responses())
    # the requester lost the first response: it asks again from PSN 101, 1024 bytes further on
    v = pair.send(Opcode.RC_RDMA_READ_REQUEST, 101, reth_va=va + 1024, reth_rkey=pair.rkey, reth_dma_len=1976)
    assert v.outcome is Outcome.DUPLICATE
    got = pair.responses(before)
    assert [r.desc.psn for r in got] == [101, 102]
    assert b"".join(r.payload for r in got) == data_of(3000)[1024:]
    assert pair.b.driver.qp(B_QPN).epsn == 103
    # outside the original range, or another key: no resource matches, silently dropped
    v = pair.send(Opcode.RC_RDMA_READ_REQUEST, 101, reth_va=va + 1024, reth_rkey=pair.rkey, reth_dma_len=3000)
    assert v.reason == RxDrop.DUP_UNKNOWN


def test_atomics_execute_once_and_duplicates_get_the_saved_value():
    pair = Pair()
    va = REMOTE_MR[2] + 0x40
    pair.b.mem.poke(pair.remote(va), (1000).to_bytes(8, "little"))
    fa = dict(atomic_va=va, atomic_rkey=pair.rkey, atomic_swap=5)
    assert pair.send(Opcode.RC_FETCH_ADD, 100, **fa).outcome is Outcome.EXECUTED
    cs = dict(atomic_va=va, atomic_rkey=pair.rkey, atomic_compare=1005, atomic_swap=42)
    assert pair.send(Opcode.RC_COMPARE_SWAP, 101, **cs).outcome is Outcome.EXECUTED
    assert pair.send(Opcode.RC_COMPARE_SWAP, 102, **cs).outcome is Outcome.EXECUTED     # compare fails
    assert int.from_bytes(pair.b.mem.peek(pair.remote(va), 8), "little") == 42
    assert pair.send(Opcode.RC_FETCH_ADD, 100, **fa).outcome is Outcome.DUPLICATE
    assert int.from_bytes(pair.b.mem.peek(pair.remote(va), 8), "little") == 42
    got = [(r.desc.opcode, r.desc.psn, r.desc.atomic_orig, r.desc.aeth_msn) for r in pair.responses()]
    ack = Opcode.RC_ATOMIC_ACKNOWLEDGE
    assert got == [(ack, 100, 1000, 1), (ack, 101, 1005, 2), (ack, 102, 42, 3), (ack, 100, 1000, 3)]


def test_resource_slots_are_reused_oldest_first():
    pair = Pair(rx={"max_dest_rd_atomic": 2})
    va = REMOTE_MR[2]
    for psn in (100, 101, 102):
        pair.send(Opcode.RC_FETCH_ADD, psn, atomic_va=va, atomic_rkey=pair.rkey, atomic_swap=1)
    assert pair.send(Opcode.RC_FETCH_ADD, 100, atomic_va=va, atomic_rkey=pair.rkey).reason == RxDrop.DUP_UNKNOWN
    assert pair.send(Opcode.RC_FETCH_ADD, 101, atomic_va=va, atomic_rkey=pair.rkey).outcome is Outcome.DUPLICATE


@pytest.mark.parametrize("case", ["misaligned", "no-rights", "no-resources"])
def test_atomic_refusals(case):
    pair = Pair(rx={"max_dest_rd_atomic": 0} if case == "no-resources" else
                {"access": Access.REMOTE_WRITE} if case == "no-rights" else None)
    va = REMOTE_MR[2] + (4 if case == "misaligned" else 0)
    v = pair.send(Opcode.RC_FETCH_ADD, 100, atomic_va=va, atomic_rkey=pair.rkey, atomic_swap=1)
    assert (v.outcome, v.syndrome) == (Outcome.NAK, Syndrome.INVALID_REQUEST)
    assert pair.b.driver.qp(B_QPN).state == QpState.ERROR
    assert pair.b.mem.peek(pair.remote(REMOTE_MR[2]), 8) == bytes(8)


# --- opcode sequence and lengths ------------------------------------------------------------------

_SEQUENCES = [(None, "SEND_MIDDLE"), (None, "SEND_LAST"), (None, "RDMA_WRITE_MIDDLE"),
              ("SEND_FIRST", "SEND_FIRST"), ("SEND_FIRST", "RDMA_WRITE_LAST"), ("SEND_FIRST", "SEND_ONLY"),
              ("RDMA_WRITE_FIRST", "SEND_LAST"), ("RDMA_WRITE_FIRST", "RDMA_READ_REQUEST")]


@pytest.mark.parametrize("service, first, second", [(s, a, b) for s in (RC, UC) for a, b in _SEQUENCES
                                                    if s == RC or "READ" not in b])     # UC has no READ
def test_opcode_sequence(service, first, second):
    pair = Pair(service=service)
    pair.post_recv(1, 8192)
    pair.post_recv(2, 8192)
    prefix = "RC_" if service == RC else "UC_"
    reth = dict(reth_va=REMOTE_MR[2], reth_rkey=pair.rkey, reth_dma_len=4096)
    psn = 100
    if first:
        assert pair.send(Opcode[prefix + first], psn, bytes(1024), **reth).outcome is Outcome.EXECUTED
        psn += 1
    payload = b"" if "READ" in second else bytes(1024 if second.endswith(("FIRST", "MIDDLE")) else 8)
    v = pair.send(Opcode[prefix + second], psn, payload, **reth)
    starts = second.endswith(("FIRST", "ONLY"))
    if service == RC:
        assert (v.outcome, v.syndrome) == (Outcome.NAK, Syndrome.INVALID_REQUEST)
        assert pair.b.driver.qp(B_QPN).state == QpState.ERROR
        cqes = pair.recv_cqes()
        if first == "SEND_FIRST":       # the open receive WQE completes in error, the rest are flushed
            assert [c.status for c in cqes] == [CqeStatus.REM_INV_REQ_ERR, CqeStatus.WR_FLUSH_ERR]
        else:
            assert [c.status for c in cqes] == [CqeStatus.WR_FLUSH_ERR] * 2
    elif starts:                        # UC: a new message abandons the open one
        assert v.outcome is Outcome.EXECUTED
    else:
        assert (v.outcome, v.reason) == (Outcome.DROPPED, RxDrop.INVALID)
        assert pair.b.driver.qp(B_QPN).state == QpState.RTS


@pytest.mark.parametrize("opcode, n", [("SEND_FIRST", 1000), ("SEND_MIDDLE", 1028), ("SEND_LAST", 0),
                                       ("SEND_LAST", 1028), ("SEND_ONLY", 1028)])
def test_packet_lengths_against_the_mtu(opcode, n):
    pair = Pair()
    pair.post_recv(1, 8192)
    psn = 100
    if opcode in ("SEND_MIDDLE", "SEND_LAST"):
        pair.send(Opcode.RC_SEND_FIRST, psn, bytes(1024))
        psn += 1
    v = pair.send(Opcode["RC_" + opcode], psn, bytes(n))
    assert (v.outcome, v.syndrome) == (Outcome.NAK, Syndrome.INVALID_REQUEST)


@pytest.mark.parametrize("lengths", [(1024, 2048), (2048, 1024), (1024, 1023), (5, 4)])
def test_reth_length_bounds_the_write(lengths):
    sent, reth = lengths
    pair = Pair()
    va = REMOTE_MR[2]
    fields = dict(reth_va=va, reth_rkey=pair.rkey, reth_dma_len=reth)
    if sent <= 1024 and sent != 1024:
        v = pair.send(Opcode.RC_RDMA_WRITE_ONLY, 100, bytes(sent), **fields)
    else:
        v = pair.send(Opcode.RC_RDMA_WRITE_FIRST, 100, bytes(1024), **fields)
        if v.outcome is Outcome.EXECUTED:
            v = pair.send(Opcode.RC_RDMA_WRITE_LAST, 101, bytes(sent - 1024))
    assert (v.outcome, v.syndrome) == (Outcome.NAK, Syndrome.INVALID_REQUEST)


# --- memory protection ----------------------------------------------------------------------------

def _bad_key(pair, case):
    va, key, n = REMOTE_MR[2] + 16, pair.rkey, 64
    if case == "index":
        key = 15 << 8 | REMOTE_MR[1]        # an empty table entry
    elif case == "beyond-table":
        key = 200 << 8 | REMOTE_MR[1]
    elif case == "variant":
        key ^= 1
    elif case == "pd":
        pair.b.driver.reg_mr(5, MemoryRegion(va=va, length=4096, addr=0x100000, pd=PD + 1, access=0xF, key=1))
        key = 5 << 8 | 1
    elif case == "rights":
        pair.b.driver.reg_mr(6, MemoryRegion(va=va, length=4096, addr=0x100000, pd=PD,
                                             access=Access.LOCAL_WRITE | Access.REMOTE_READ, key=2))
        key = 6 << 8 | 2
    elif case == "below":
        va = REMOTE_MR[2] - 1
    elif case == "past-end":
        va = REMOTE_MR[2] + REMOTE_MR[3] - 63
    elif case == "deregistered":
        pair.b.driver.dereg_mr(key)
    return va, key, n


BAD_KEYS = ["index", "beyond-table", "variant", "pd", "rights", "below", "past-end", "deregistered"]


@pytest.mark.parametrize("case", BAD_KEYS)
@pytest.mark.parametrize("service", [RC, UC], ids=lambda s: s.name)
def test_write_outside_a_registered_region_is_refused(service, case):
    pair = Pair(service=service)
    va, key, n = _bad_key(pair, case)
    snapshot = dict((k, bytes(v)) for k, v in pair.b.mem.pages.items())
    op = Opcode.RC_RDMA_WRITE_ONLY if service == RC else Opcode.UC_RDMA_WRITE_ONLY
    v = pair.send(op, 100, b"\xEE" * n, reth_va=va, reth_rkey=key, reth_dma_len=n)
    if service == RC:
        assert (v.outcome, v.syndrome) == (Outcome.NAK, Syndrome.REMOTE_ACCESS)
        assert pair.b.driver.qp(B_QPN).state == QpState.ERROR
    else:
        assert (v.outcome, v.reason) == (Outcome.DROPPED, RxDrop.INVALID)
    for page, content in pair.b.mem.pages.items():
        if page in snapshot:
            assert b"\xEE" * 4 not in content


@pytest.mark.parametrize("case", ["variant", "rights", "past-end"])
def test_read_outside_a_registered_region_is_refused(case):
    pair = Pair()
    va, key, n = _bad_key(pair, case if case != "rights" else "index")
    v = pair.send(Opcode.RC_RDMA_READ_REQUEST, 100, reth_va=va, reth_rkey=key, reth_dma_len=n)
    assert (v.outcome, v.syndrome) == (Outcome.NAK, Syndrome.REMOTE_ACCESS)
    assert [r.desc.opcode for r in pair.responses()] == [Opcode.RC_ACKNOWLEDGE]


def test_zero_length_write_and_read_skip_the_key_check():
    pair = Pair()
    assert pair.send(Opcode.RC_RDMA_WRITE_ONLY, 100, reth_va=1, reth_rkey=0xDEAD, reth_dma_len=0).outcome \
        is Outcome.EXECUTED
    assert pair.send(Opcode.RC_RDMA_READ_REQUEST, 101, reth_va=1, reth_rkey=0xDEAD, reth_dma_len=0).outcome \
        is Outcome.EXECUTED
    assert pair.responses()[-1].desc.opcode == Opcode.RC_RDMA_READ_RESPONSE_ONLY


def test_qp_access_flags_are_checked_before_the_mr():
    pair = Pair(rx={"access": Access.REMOTE_READ})
    v = pair.send(Opcode.RC_RDMA_WRITE_ONLY, 100, b"abcd", reth_va=REMOTE_MR[2], reth_rkey=pair.rkey, reth_dma_len=4)
    assert v.syndrome == Syndrome.INVALID_REQUEST


def test_receive_buffer_key_is_checked():
    pair = Pair()
    pair.b.driver.reg_mr(7, MemoryRegion(va=0x1000, length=4096, addr=0x500000, pd=PD, access=Access.REMOTE_READ,
                                         key=9))
    from rnic.model.recv_records import RecvWqe, Sge
    pi = pair.b.driver.post_recv(B_QPN, RecvWqe(3, (Sge(0x1000, 100, 7 << 8 | 9),)))
    pair.b.resp.rq_doorbell(B_QPN, pi)
    v = pair.send(Opcode.RC_SEND_ONLY, 100, b"data")
    assert (v.outcome, v.syndrome) == (Outcome.NAK, Syndrome.REMOTE_OP_ERR)
    assert [(c.wr_id, c.status) for c in pair.recv_cqes()] == [(3, CqeStatus.LOC_PROT_ERR)]
    assert pair.b.mem.peek(0x500000, 4) == bytes(4)


def test_send_with_invalidate_invalidates_the_region():
    pair = Pair()
    pair.post_recv(1, 64)
    v = pair.send(Opcode.RC_SEND_ONLY_WITH_INVALIDATE, 100, b"bye", imm=pair.rkey)
    assert v.outcome is Outcome.EXECUTED
    cqe = pair.recv_cqes()[-1]
    assert (cqe.flags, cqe.imm) == (CQE_FLAG_INV, pair.rkey)
    v = pair.send(Opcode.RC_RDMA_WRITE_ONLY, 101, b"abcd", reth_va=REMOTE_MR[2], reth_rkey=pair.rkey, reth_dma_len=4)
    assert v.syndrome == Syndrome.REMOTE_ACCESS


# --- receive queue --------------------------------------------------------------------------------

def test_no_receive_wqe_is_an_rnr_nak_then_a_retry_lands():
    pair = Pair()
    v = pair.send(Opcode.RC_SEND_ONLY, 100, b"early")
    assert (v.outcome, v.syndrome) == (Outcome.RNR, RNR_NAK | 14)
    assert acks(pair) == [(Opcode.RC_ACKNOWLEDGE, 100, RNR_NAK | 14, 0)]
    assert pair.b.driver.qp(B_QPN).epsn == 100
    addrs = pair.post_recv(1, 64)
    assert pair.send(Opcode.RC_SEND_ONLY, 100, b"early").outcome is Outcome.EXECUTED
    assert pair.b.mem.peek(addrs[0], 5) == b"early"


@pytest.mark.parametrize("service", [UC, UD], ids=lambda s: s.name)
def test_no_receive_wqe_drops_on_unreliable_services(service):
    pair = Pair(service=service)
    op = Opcode.UC_SEND_ONLY if service == UC else Opcode.UD_SEND_ONLY
    assert pair.send(op, 100, b"x").reason == RxDrop.NO_RQ_WQE


def test_message_longer_than_the_buffer():
    pair = Pair()
    pair.post_recv(1, 10, 20)
    pair.post_recv(2, 10)
    v = pair.send(Opcode.RC_SEND_ONLY, 100, bytes(31))
    assert (v.outcome, v.syndrome) == (Outcome.NAK, Syndrome.INVALID_REQUEST)
    assert [(c.wr_id, c.status) for c in pair.recv_cqes()] == [(1, CqeStatus.LOC_LEN_ERR), (2, CqeStatus.WR_FLUSH_ERR)]
    assert pair.b.mem.peek(RECV_MR[4], 10) == bytes(10)


def test_rq_doorbell_rules():
    pair = Pair()
    rx = pair.b.driver.rx(B_QPN)
    pair.b.resp.rq_doorbell(B_QPN, (1 << rx.log_rq_size) + 1)         # more than the ring ahead
    cqe = pair.recv_cqes()[-1]
    assert cqe.status == CqeStatus.RQ_OVERFLOW and pair.b.driver.qp(B_QPN).state == QpState.ERROR
    pair = Pair(b_state=QpState.RESET)
    pair.b.resp.rq_doorbell(B_QPN, 1)
    assert pair.recv_cqes()[-1].status == CqeStatus.QP_STATE_ERR
    pair = Pair(b_state=QpState.ERROR)
    pair.post_recv(5, 64)
    assert [(c.wr_id, c.status) for c in pair.recv_cqes()] == [(5, CqeStatus.WR_FLUSH_ERR)]


# --- QP-level drops -------------------------------------------------------------------------------

@pytest.mark.parametrize("case, reason", [
    ("qpn", RxDrop.BAD_QPN), ("reset", RxDrop.QP_STATE), ("init", RxDrop.QP_STATE), ("error", RxDrop.QP_STATE),
    ("service", RxDrop.WRONG_SERVICE), ("pkey", RxDrop.PKEY), ("response", RxDrop.RESPONSE),
])
def test_qp_level_drops(case, reason):
    state = {"reset": QpState.RESET, "init": QpState.INIT, "error": QpState.ERROR}.get(case, QpState.RTR)
    pair = Pair(b_state=state)
    pair.post_recv(1, 64) if state != QpState.ERROR else None
    fields = {}
    opcode = Opcode.RC_SEND_ONLY
    if case == "qpn":
        fields["dest_qp"] = 16
    elif case == "service":
        opcode = Opcode.UC_SEND_ONLY
    elif case == "pkey":
        fields["pkey"] = 0x8001
    elif case == "response":
        opcode = Opcode.RC_ACKNOWLEDGE
    v = pair.send(opcode, 100, b"" if case == "response" else b"x", **fields)
    assert (v.outcome, v.reason) == (Outcome.DROPPED, reason)
    assert pair.b.resp.drops[reason] == 1
    assert pair.responses() == [] and [c for c in pair.recv_cqes() if c.status == CqeStatus.SUCCESS] == []


def test_ud_qkey_mismatch_drops():
    pair = Pair(service=UD)
    pair.post_recv(1, 64)
    assert pair.send(Opcode.UD_SEND_ONLY, 1, b"x", deth_qkey=0x2222).reason == RxDrop.QKEY


def test_limited_pkey_members_do_not_talk():
    pair = Pair()
    pair.post_recv(1, 64)
    ctx = pair.b.driver.qp(B_QPN)
    ctx.pkey = 0x7FFF                          # limited member
    pair.b.driver.create_qp(B_QPN, ctx, pair.b.driver.rx(B_QPN))
    assert pair.send(Opcode.RC_SEND_ONLY, 100, b"x", pkey=0x7FFF).reason == RxDrop.PKEY
    assert pair.send(Opcode.RC_SEND_ONLY, 100, b"x", pkey=0xFFFF).outcome is Outcome.EXECUTED


# --- bus errors -----------------------------------------------------------------------------------

def test_payload_write_bus_error_ends_only_that_qp():
    pair = Pair()
    pair.b.driver.create_qp(3, pair.b.driver.qp(B_QPN), pair.b.driver.rx(B_QPN))
    addrs = pair.post_recv(1, 256)
    pair.b.mem.add_write_error(addrs[0] & ~63, (addrs[0] & ~63) + 64)
    v = pair.send(Opcode.RC_SEND_ONLY, 100, b"boom")
    assert (v.outcome, v.syndrome) == (Outcome.NAK, Syndrome.REMOTE_OP_ERR)
    assert [(c.wr_id, c.status) for c in pair.recv_cqes()] == [(1, CqeStatus.PAYLOAD_WRITE_ERR)]
    assert pair.b.driver.qp(B_QPN).state == QpState.ERROR
    assert pair.b.resp.counts["bus_errors"] == 1
    # QP 3 shares nothing with QP 2 but the receive CQ: still answers
    v = pair.send(Opcode.RC_RDMA_WRITE_ONLY, 100, b"fine", dest_qp=3, reth_va=REMOTE_MR[2], reth_rkey=pair.rkey,
                  reth_dma_len=4)
    assert v.outcome is Outcome.EXECUTED


def test_receive_wqe_read_bus_error():
    pair = Pair()
    pair.post_recv(1, 256)
    rx = pair.b.driver.rx(B_QPN)
    pair.b.mem.add_read_error(rx.rq_base, rx.rq_base + 64)
    v = pair.send(Opcode.RC_SEND_ONLY, 100, b"x")
    assert v.syndrome == Syndrome.REMOTE_OP_ERR
    assert [(c.wr_id, c.status) for c in pair.recv_cqes()] == [(0, CqeStatus.RQ_WQE_FETCH_ERR)]


def test_full_receive_cq_overflows():
    pair = Pair()
    cq = pair.b.driver.create_cq(1, 0x78000, 1)         # two slots
    assert cq.size == 2
    for i in range(3):
        pair.post_recv(i, 64)
    assert pair.send(Opcode.RC_SEND_ONLY, 100, b"a").outcome is Outcome.EXECUTED
    assert pair.send(Opcode.RC_SEND_ONLY, 101, b"b").outcome is Outcome.EXECUTED
    assert [c.status for c in pair.recv_cqes()] == [CqeStatus.SUCCESS, CqeStatus.CQ_OVERFLOW]
    assert pair.b.driver.qp(B_QPN).state == QpState.ERROR
    assert pair.send(Opcode.RC_SEND_ONLY, 102, b"c").reason == RxDrop.QP_STATE


# --- frames this project did not build ------------------------------------------------------------

def test_scapy_built_requests_execute():
    pytest.importorskip("scapy.contrib.roce")
    from rnic.sim.scapy_frames import scapy_frame
    pair = Pair()
    addrs = pair.post_recv(1, 256)
    ctx = pair.a.driver.qp(A_QPN)
    va = REMOTE_MR[2] + 0x80
    for opcode, psn, payload, extra in (
            (Opcode.RC_RDMA_WRITE_ONLY, 100, b"scapy-write!", dict(reth_va=va, reth_rkey=pair.rkey, reth_dma_len=12)),
            (Opcode.RC_SEND_ONLY_WITH_IMMEDIATE, 101, b"scapy send", dict(imm=0x1234)),
            (Opcode.RC_FETCH_ADD, 102, b"", dict(atomic_va=va + 16, atomic_rkey=pair.rkey, atomic_swap=3))):
        desc = pair.a.engine.path_desc(ctx, psn, opcode, payload_len=len(payload), ackreq=1, **extra)
        assert pair.b.resp.receive(scapy_frame(desc, payload)).outcome is Outcome.EXECUTED
    assert pair.b.mem.peek(pair.remote(va), 12) == b"scapy-write!"
    assert pair.b.mem.peek(addrs[0], 10) == b"scapy send"
    assert pair.recv_cqes()[-1].imm == 0x1234
    assert int.from_bytes(pair.b.mem.peek(pair.remote(va + 16), 8), "little") == 3


def test_connectx4_cnp_is_counted_and_changes_nothing():
    from rnic.model.published import CONNECTX4_CNP
    from rnic.model.receive import PortAddresses, ipv4_gid
    from rnic.model.frames import parse_frame
    desc, _ = parse_frame(LinkMode.ROCEV2_IPV4, CONNECTX4_CNP)
    pair = Pair()
    pair.b.resp.settings = type(pair.b.resp.settings)(
        pair.b.resp.settings.mr_base, 16, pair.b.resp.settings.res_base,
        PortAddresses(desc.dst_mac, {ipv4_gid(desc.dst_gid)}), "ethernet")
    pages = {k: bytes(v) for k, v in pair.b.mem.pages.items()}
    v = pair.b.resp.receive(CONNECTX4_CNP)
    assert (v.outcome, v.reason) == (Outcome.DROPPED, DropReason.CNP)
    assert pair.b.resp.stateless[DropReason.CNP] == 1
    assert {k: bytes(v) for k, v in pair.b.mem.pages.items()} == pages and pair.responses() == []


# --- corruption -----------------------------------------------------------------------------------

def test_corrupted_frames_are_dropped_and_change_nothing():
    """A byte of a valid request flipped: dropped and counted with host memory untouched, unless the byte lies
    where no check of the receive path reaches (the Ethernet source MAC, fields the ICRC masks that no
    other check covers), in which case the frame executes exactly as the original would."""
    s = seed()
    rng = random.Random(s)
    for i in range(300):
        mode = rng.choice(MODES)
        service = rng.choice([RC, UC])
        pair, twin = Pair(mode, service), Pair(mode, service)
        for p in (pair, twin):
            p.post_recv(1, 2048)
        prefix = "RC_" if service == RC else "UC_"
        n = rng.choice([0, 4, 100, 1024])
        kind = rng.choice(["SEND_ONLY", "RDMA_WRITE_ONLY"])
        fields = dict(reth_va=REMOTE_MR[2] + 8, reth_rkey=pair.rkey, reth_dma_len=n) if "WRITE" in kind else {}
        frame = bytearray(pair.frame(Opcode[prefix + kind], 100, data_of(n, i), **fields))
        k = rng.randrange(len(frame))
        frame[k] ^= 1 << rng.randrange(8)
        pages = {a: bytes(b) for a, b in pair.b.mem.pages.items()}
        v = pair.b.resp.receive(bytes(frame))
        ctx = f"seed={s} frame={i} {mode.slug} {service.name} {kind} n={n} byte={k}"
        if v.outcome is Outcome.DROPPED:
            assert isinstance(v.reason, DropReason), ctx
            assert {a: bytes(b) for a, b in pair.b.mem.pages.items()} == pages, ctx
            assert sum(pair.b.resp.stateless.dropped.values()) == 1, ctx
        else:
            w = twin.b.resp.receive(twin.frame(Opcode[prefix + kind], 100, data_of(n, i), **fields))
            assert (v.outcome, w.outcome) == (Outcome.EXECUTED, Outcome.EXECUTED), ctx
            assert pair.b.mem.pages == twin.b.mem.pages, ctx


def test_docs_show_the_formats():
    from pathlib import Path
    from rnic.model.recv_records import markdown_tables
    page = Path(__file__).resolve().parents[2] / "docs" / "receive.md"
    assert markdown_tables() in page.read_text(encoding="utf-8"), "regenerate the tables in docs/receive.md"
