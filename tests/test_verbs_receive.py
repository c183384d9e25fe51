"""The verbs layer's receive side on the model: two model devices, A posts sends, its frames reach B's
responder; B registers memory, posts receives and polls its receive completions like a driver."""

import asyncio

import pytest

from rnic.model.config import RnicConfig
from rnic.model.descriptor import LinkMode
from rnic.model.engine import EngineModel, HostMemory, RegisterSettings, SgidEntry
from rnic.model.qpc import PathMtu, QpContext, QpState, ServiceType
from rnic.model.receive import PortAddresses, ipv4_gid
from rnic.model.recv_records import Access, MemoryRegion, RecvContext, RecvOpcode, RecvWqe, Sge
from rnic.model.responder import Outcome, Responder, ResponderSettings, Syndrome
from rnic.model.wqe import CqeStatus, Wqe, WqeOpcode
from rnic.sim.verbs import ModelDevice, Verbs, VerbsError

MR_BASE, RES_BASE = 0x30000, 0x40000
ALL = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ | Access.REMOTE_ATOMIC


def node(n):
    mac, gid = 0x020000000000 | n, ipv4_gid(0xC0A80000 | n)
    settings = RegisterSettings(qpc_base=0x10000, qpc_size=8, cq_base=0x20000, cq_size=4,
                                sgids=(SgidEntry(gid, mac),))
    model = EngineModel(HostMemory(), RnicConfig())
    resp = Responder(model, ResponderSettings(MR_BASE, 8, RES_BASE, PortAddresses(mac, {gid})))
    return Verbs(ModelDevice(model, resp), settings, mr_base=MR_BASE, mr_size=8), model, resp, mac, gid


async def scenario():
    a, a_model, _, a_mac, a_gid = node(1)
    b, b_model, b_resp, b_mac, b_gid = node(2)
    for v in (a, b):
        await v.open()
        v.create_cq(0, 0x70000)
        v.create_cq(1, 0x78000)
    common = dict(state=QpState.RTS, service=ServiceType.RC, link_mode=LinkMode.ROCEV2_IPV4,
                  path_mtu=PathMtu.MTU_1024, log_sq_size=4, sq_base=0x50000, next_psn=7, epsn=7)
    a.create_qp(1, QpContext(dest_qpn=2, dst_mac=b_mac, dst_gid=b_gid, **common))
    b.create_qp(2, QpContext(dest_qpn=1, dst_mac=a_mac, dst_gid=a_gid, **common),
                RecvContext(rcqn=1, log_rq_size=3, rq_base=0x60000, pd=5, access=ALL, max_dest_rd_atomic=2))
    rkey = b.reg_mr(1, MemoryRegion(va=0x1000_0000, length=1 << 16, addr=0x100000, pd=5, access=ALL, key=0x33))
    lkey = b.reg_mr(2, MemoryRegion(va=0x2000_0000, length=1 << 16, addr=0x200000, pd=5,
                                    access=Access.LOCAL_WRITE, key=0x44))
    await b.post_recv(2, RecvWqe(77, (Sge(0x2000_0000, 100, lkey), Sge(0x2000_1000, 4000, lkey))))
    data = bytes(range(256)) * 10
    a_model.mem.poke(0x300000, data)

    def deliver():
        out = [b_resp.receive(p.frame()) for p in a_model.packets[deliver.sent:]]
        deliver.sent = len(a_model.packets)
        return out
    deliver.sent = 0

    await a.post_send(1, Wqe(opcode=WqeOpcode.RDMA_WRITE, length=2500, local_addr=0x300000, rkey=rkey,
                             remote_addr=0x1000_0100))
    await a.post_send(1, Wqe(opcode=WqeOpcode.SEND_WITH_IMM, imm=0xABCD, length=1500, local_addr=0x300000))
    verdicts = deliver()
    recvd = await b.poll_cq(1)
    b.dereg_mr(rkey)
    await a.post_send(1, Wqe(opcode=WqeOpcode.RDMA_WRITE, length=8, local_addr=0x300000, rkey=rkey,
                             remote_addr=0x1000_0100))
    late = deliver()
    return b, b_model, b_resp, data, verdicts, recvd, late, rkey


def test_write_and_send_through_the_verbs():
    b, b_model, b_resp, data, verdicts, recvd, late, rkey = asyncio.run(scenario())
    assert [v.outcome for v in verdicts] == [Outcome.EXECUTED] * 5
    assert b_model.mem.peek(0x100100, 2500) == data[:2500]
    assert b_model.mem.peek(0x200000, 100) == data[:100] and b_model.mem.peek(0x201000, 1400) == data[100:1500]
    assert [(c.wr_id, c.byte_len, c.imm, c.opcode, c.status) for c in recvd] == [
        (77, 1500, 0xABCD, RecvOpcode.RECV, CqeStatus.SUCCESS)]
    assert [(v.outcome, v.syndrome) for v in late] == [(Outcome.NAK, Syndrome.REMOTE_ACCESS)]
    with pytest.raises(VerbsError):
        b.dereg_mr(rkey)


def test_receive_queue_full_and_no_receive_path():
    async def go():
        b, *_ = node(3)
        b.create_qp(1, QpContext(state=QpState.RTS), RecvContext(log_rq_size=1, rq_base=0x60000))
        for i in range(2):
            await b.post_recv(1, RecvWqe(i))
        with pytest.raises(VerbsError, match="full"):
            await b.post_recv(1, RecvWqe(2))
        plain = Verbs(ModelDevice(EngineModel(HostMemory(), RnicConfig())),
                      RegisterSettings(qpc_base=0x10000, qpc_size=8))
        plain.create_qp(1, QpContext(state=QpState.RTS), RecvContext(log_rq_size=1, rq_base=0x60000))
        with pytest.raises(VerbsError, match="no receive path"):
            await plain.post_recv(1, RecvWqe(0))
    asyncio.run(go())
