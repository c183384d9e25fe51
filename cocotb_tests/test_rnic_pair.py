"""Two whole engines talking (``rnic_pair``, :func:`rnic.sim.pair_top.build_pair`): RDMA from engine A's memory into engine
B's, RTL to RTL, against the two model nodes of :class:`rnic.sim.responder_pair.Pair`.

A's QP 1 and B's QP 2 are connected over one link mode and service; the testbench owns the link (A's
``m_axis`` into B's ``s_axis`` and back, random gaps and backpressure). A's send queue gets random
SENDs, SENDs with immediate, RDMA WRITEs and WRITEs with immediate (RC and UC) or UD SENDs, and on RC
RDMA READs; B's receive WQEs are posted through ``DB_RQ_PI``, A's send queue rung through ``DB_SQ_PI``.
B executes every request and answers; A counts B's responses (the requester's side of them, completion
at ACK time and READ data into A's memory, is the next step). Checked: every frame each way byte for
byte, both engines' memory (after a QPC_CMD FLUSH on each) and receive counters. RC also sends atomics.

``test_lossy_link``: UC and UD messages both ways at once on one or two QP pairs
(:class:`rnic.sim.loopback.Loopback`, :func:`rnic.sim.pair_tb.run_loopback`) through links that lose,
repeat, hold back and corrupt frames, each frame's fate drawn from the same seed and its own bytes as in
the model's links: every frame each engine sends, both memories and the receive counters equal
the model's, and the end-to-end scoreboard passes on the RTL's memory. Rerun with ``RNIC_SEED``.
"""

from __future__ import annotations

import random
from pathlib import Path

import cocotb
import pytest
from cocotb.triggers import ClockCycles

from rnic.model.config import RnicConfig
from rnic.model.descriptor import LinkMode
from rnic.model.qpc import CtrlOp, ServiceType
from rnic.model.regs import RX_COUNTERS
from rnic.model.wqe import Wqe, WqeFlags, WqeOpcode
from rnic.sim import tb as sim_tb
from rnic.sim.link import LinkKnobs
from rnic.sim.loopback import Loopback, random_messages
from rnic.sim.pair_tb import Side, run_loopback
from rnic.sim.responder_cases import memory_differs
from rnic.sim.responder_pair import A_QPN, LOCAL_DATA, REMOTE_MR, Pair
from rnic.sim.toolchain import seed_from_env

STALL = 40_000


async def _link(src: Side, dst: Side):
    """Every frame ``src`` sends, into ``dst`` (kept in ``src.sent``)."""
    while True:
        frame = await src.sink.recv()
        src.sent.append(bytes(frame.tdata))
        await dst.source.send(frame)


@cocotb.test()
async def test_two_engines(dut):
    seed = seed_from_env(1)
    rng = random.Random(seed)
    dut._log.info("seed %d (rerun with RNIC_SEED=%d)", seed, seed)
    sim_tb.start_clock(dut)
    a, b = Side(dut, "a", rng), Side(dut, "b", rng)
    cocotb.start_soon(_link(a, b))
    cocotb.start_soon(_link(b, a))
    cases = [(m, s) for s in (ServiceType.RC, ServiceType.UC, ServiceType.UD) for m in LinkMode]
    for mode, service in rng.sample(cases, 6):
        await _case(dut, rng, a, b, mode, service)


async def _case(dut, rng, a: Side, b: Side, mode: LinkMode, service: ServiceType):
    mtu = rng.choice([256, 1024])
    pair = Pair(mode, service, mtu=mtu, psn=rng.randrange(1 << 24))
    pair.deferred = []
    ops = [WqeOpcode.SEND, WqeOpcode.SEND_WITH_IMM]
    if service != ServiceType.UD:
        ops += [WqeOpcode.RDMA_WRITE, WqeOpcode.RDMA_WRITE_WITH_IMM]
    if service == ServiceType.RC:
        ops += [WqeOpcode.RDMA_READ, WqeOpcode.ATOMIC_CMP_SWAP, WqeOpcode.ATOMIC_FETCH_ADD]
    pair.b.mem.poke(REMOTE_MR[4], rng.randbytes(0x10000))          # what READs and atomics find
    n_msgs = rng.randint(4, 10)
    wqes = []
    for i in range(n_msgs):
        op = rng.choice(ops)
        n = rng.choice([0, 1, 100, mtu, 3 * mtu + 5] if service != ServiceType.UD else [0, 1, 100, mtu])
        local = LOCAL_DATA + i * 0x4000
        pair.a.mem.poke(local, rng.randbytes(n))
        va = REMOTE_MR[2] + rng.randrange(REMOTE_MR[3] - n)
        if op in (WqeOpcode.SEND, WqeOpcode.SEND_WITH_IMM, WqeOpcode.RDMA_WRITE_WITH_IMM):
            pair.post_recv(1000 + i, 4 * mtu, offset=0x1000 * i)
        atomic = {}
        if op in (WqeOpcode.ATOMIC_CMP_SWAP, WqeOpcode.ATOMIC_FETCH_ADD):
            n, va = 8, REMOTE_MR[2] + rng.randrange(0, 0x10000, 8)
            old = int.from_bytes(pair.b.mem.peek(pair.remote(va), 8), "little")
            atomic = dict(compare_add=old if rng.random() < 0.5 else rng.getrandbits(64), swap=rng.getrandbits(64))
        wqes.append(Wqe(opcode=op, length=n, local_addr=local, rkey=pair.rkey, remote_addr=va,
                        imm=rng.getrandbits(32), flags=WqeFlags.SIGNALED, wr_id=i, **atomic))
    if service == ServiceType.UD:           # UD: the destination in every WQE
        ud = pair.a.driver.qp(A_QPN)
        wqes = [Wqe(opcode=w.opcode, length=w.length, local_addr=w.local_addr, imm=w.imm, flags=w.flags,
                    wr_id=w.wr_id, dest_qpn=ud.dest_qpn, qkey=ud.qkey, dst_mac=ud.dst_mac, dst_gid=ud.dst_gid,
                    dlid=ud.dlid) for w in wqes]
    pi = 0
    for w in wqes:
        pi = pair.a.driver.post(A_QPN, w)

    # both engines from reset with the nodes' memory and registers
    for side, node in ((a, pair.a), (b, pair.b)):
        side.ram.load(node.mem, latency=rng.choice([(0, 0), (0, 30)]), pause=rng.choice([0, 0.1]))
        sim_tb.set_pause(side.sink, rng.choice([0, 0.2]), rng)
        side.sent.clear()
    await sim_tb.reset(dut, 4, low=("a__s_axis__tvalid", "b__s_axis__tvalid"), after=2)
    for side, node in ((a, pair.a), (b, pair.b)):
        for offset, value in node.resp.settings.writes([e.gid for e in node.settings.sgids]) + node.settings.writes():
            await side.axil.write_dword(offset, value)

    # the model: B's receive WQEs, A's doorbell, A's packets into B, B's responses into A
    for qpn, rq_pi in pair.deferred:
        pair.b.resp.rq_doorbell(qpn, rq_pi)
    pair.a.driver.ring(A_QPN, pi)
    pair.a.engine.run()
    want_a = [p.frame() for p in pair.a.engine.packets]
    for f in want_a:
        pair.b.resp.receive(f)
    want_b = [p.frame() for p in pair.b.resp.responses]
    for f in want_b:
        pair.a.resp.receive(f)

    # the RTL: the same doorbells through the registers, then wait for both to go quiet
    for qpn, rq_pi in pair.deferred:
        await b.write("DB_QPN", qpn)
        await b.write("DB_RQ_PI", rq_pi)
    await a.write("DB_QPN", A_QPN)
    await a.write("DB_SQ_PI", pi)
    waited, last = 0, None
    while True:
        await ClockCycles(dut.clk, 200)
        now = (len(a.sent), len(b.sent), await b.reg("RX_ACCEPTED"), await a.reg("RX_ACCEPTED"))
        # every frame sent has been taken by its peer's responder (STATUS shows idle between frames,
        # while one is still on the link or in the front end), and both are idle
        if now == (len(want_a), len(want_b), len(want_a), len(want_b)) and await a.reg("STATUS") & 1 \
                and await b.reg("STATUS") & 1:
            break
        waited = waited + 200 if now == last else 0
        last = now
        assert waited < STALL, f"no progress for {STALL} clocks: {now}, the model sent {len(want_a)} / {len(want_b)}"
    await ClockCycles(dut.clk, 100)
    for side in (a, b):
        await side.write("QPC_CMD", CtrlOp.FLUSH)
        while await side.reg("QPC_CMD_STATUS") & 1:
            await ClockCycles(dut.clk, 20)

    where = f"{mode.slug} {service.name}"
    verdicts = [str(v) for v in pair.b.resp.verdicts]
    for what, got, want in (("A's frames", a.sent, want_a), ("B's responses", b.sent, want_b)):
        assert len(got) == len(want), f"{where}: {what}: {len(got)}, the model {len(want)}\n{verdicts}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert g == w, f"{where}: {what}: frame {i} differs\nRTL   {g.hex()}\nmodel {w.hex()}\n{verdicts}"
    for side, node in ((a, pair.a), (b, pair.b)):
        differs = memory_differs(side.ram, node.mem)
        assert not differs, f"{where}: engine {side.name}: {differs}\n{verdicts}"
        regs = {n: await side.reg(n) for n, _ in RX_COUNTERS}
        model = {n: node.engine.regs[n] for n in regs}
        diff = {n: (regs[n], model[n]) for n in regs if regs[n] != model[n]}
        assert not diff, f"{where}: engine {side.name}: receive counters (RTL, model) {diff}"
    dut._log.info("%s MTU %d: %d requests, %d responses: %s", where, mtu, len(want_a), len(want_b),
                  sorted({v.outcome.value for v in pair.b.resp.verdicts}))


@cocotb.test()
async def test_lossy_link(dut):
    """UC and UD both ways over links that lose, repeat, reorder and corrupt frames
    (:func:`rnic.sim.pair_tb.run_loopback`): the RTL matches the model frame for frame, and the end-to-end
    scoreboard judges both engines' memory."""
    seed = seed_from_env(1)
    rng = random.Random(seed)
    dut._log.info("seed %d (rerun with RNIC_SEED=%d)", seed, seed)
    sim_tb.start_clock(dut)
    a, b = Side(dut, "a", rng), Side(dut, "b", rng)
    cases = [(m, s) for s in (ServiceType.UC, ServiceType.UD) for m in LinkMode]
    for mode, service in rng.sample(cases, 4):
        mtu = rng.choice([256, 1024])
        loss = rng.choice([0.02, 0.1])
        knobs = LinkKnobs(loss=loss, dup=loss, corrupt=loss, reorder=rng.choice([0, 3]))
        lb = Loopback(random_messages(rng, 10, mtu, service), random_messages(rng, 6, mtu, service),
                      service=service, mode=mode, mtu=mtu, ab=knobs, ba=knobs, seed=rng.randrange(1 << 30),
                      rnr=1 << 30, qps=rng.randint(1, 2))
        r = await run_loopback(dut, rng, a, b, lb)
        where = f"{mode.slug} {service.name} loss {loss}, {lb.qps} QP pair(s)"
        assert not r["mismatches"], f"{where}: RTL and model differ: {r['mismatches']}"
        assert not r["problems"], f"{where}: scoreboard on the RTL's memory: {r['problems']}"
        dut._log.info("%s MTU %d: frames %d / %d, delivered %s, links %s", where, mtu, len(r["sent"]["a"]),
                      len(r["sent"]["b"]), lb.delivered, r["links"])


@cocotb.test()
async def test_reliable(dut):
    """RC both ways, every operation, on one or two QP pairs, with the requester in the RTL
    (:func:`rnic.sim.pair_rc.run_lockstep`): completion at acknowledgement, READ responses and atomic
    results placed, the window and ``max_rd_atomic`` holds; then over links that lose, repeat, hold back
    and corrupt frames: go-back-N, implied NAKs, partial retransmission, timeouts (REQ_TIMER); then over a
    cut link, where the retries run out and the QPs end. The RTL matches the model frame for frame at
    every step, and memory and counters at the end; the scoreboard judges the RTL's memory."""
    from rnic.sim.pair_rc import run_lockstep
    seed = seed_from_env(1)
    rng = random.Random(seed)
    dut._log.info("seed %d (rerun with RNIC_SEED=%d)", seed, seed)
    sim_tb.start_clock(dut)
    a, b = Side(dut, "a", rng), Side(dut, "b", rng)
    for k, mode in enumerate(rng.sample(list(LinkMode), 4)):
        mtu = rng.choice([256, 1024])
        loss = 0 if k == 0 else rng.choice([0.02, 0.05, 0.1])
        # as tests/model/test_requester.py: no corruption at 10 % loss, where RC may use up its retries
        knobs = LinkKnobs(loss=loss, dup=loss, corrupt=0 if loss > 0.05 else loss,
                          reorder=rng.choice([0, 3]) if loss else 0)
        lb = Loopback(random_messages(rng, rng.randint(6, 14), mtu), random_messages(rng, rng.randint(0, 8), mtu),
                      service=ServiceType.RC, mode=mode, mtu=mtu, ab=knobs, ba=knobs, seed=rng.randrange(1 << 30),
                      qps=rng.randint(1, 2))
        r = await run_lockstep(dut, rng, a, b, lb)
        where = f"{mode.slug} RC, {lb.qps} QP pair(s), MTU {mtu}, loss {loss}"
        assert not r["mismatches"], f"{where}: RTL and model differ: {r['mismatches']}"
        assert not r["problems"], f"{where}: scoreboard on the RTL's memory: {r['problems']}"
        dut._log.info("%s: %d steps, frames %d / %d, requester %s", where, r["steps"], len(a.sent), len(b.sent),
                      lb.summary()["requester"])
    # the link cut both ways: timeouts use up the retries, RETRY_EXC_ERR, every later WQE flushed, the QPs
    # (and their receive queues) in ERROR, on the RTL as in the model
    cut = LinkKnobs(loss=1.0)
    mtu = rng.choice([256, 1024])
    lb = Loopback(random_messages(rng, 5, mtu), random_messages(rng, 3, mtu), service=ServiceType.RC,
                  mode=rng.choice(list(LinkMode)), mtu=mtu, ab=cut, ba=cut, seed=rng.randrange(1 << 30),
                  retry=(rng.randint(0, 2), 7))
    r = await run_lockstep(dut, rng, a, b, lb)
    assert not r["mismatches"], f"cut link: RTL and model differ: {r['mismatches']}"
    assert any("RETRY_EXC_ERR" in p for p in r["problems"]), f"cut link: no RETRY_EXC_ERR: {r['problems']}"
    dut._log.info("cut link: %d steps, requester %s", r["steps"], lb.summary()["requester"])


@cocotb.test()
async def test_reliable_free(dut):
    """RC both ways with the engines alone (:func:`rnic.sim.pair_rc.run_free`): the link carries frames as
    they come, loses and repeats some, and the hardware timers (TIMER_TICK) retransmit; the end-to-end
    scoreboard judges the RTL's memory."""
    from rnic.sim.pair_rc import run_free
    seed = seed_from_env(1)
    rng = random.Random(seed)
    dut._log.info("seed %d (rerun with RNIC_SEED=%d)", seed, seed)
    sim_tb.start_clock(dut)
    a, b = Side(dut, "a", rng), Side(dut, "b", rng)
    for loss in (0.0, rng.choice([0.02, 0.05])):
        mtu = rng.choice([256, 1024])
        knobs = LinkKnobs(loss=loss, dup=loss, corrupt=loss, reorder=rng.choice([0, 3]) if loss else 0)
        lb = Loopback(random_messages(rng, rng.randint(6, 14), mtu), random_messages(rng, rng.randint(0, 8), mtu),
                      service=ServiceType.RC, mode=rng.choice(list(LinkMode)), mtu=mtu, ab=knobs, ba=knobs,
                      seed=rng.randrange(1 << 30), qps=rng.randint(1, 2), rnr=1 << 30)
        r = await run_free(dut, rng, a, b, lb)
        where = f"{lb.mode.slug} RC, {lb.qps} QP pair(s), MTU {mtu}, loss {loss}"
        assert not r["problems"], (f"{where}: scoreboard on the RTL's memory: {r['problems']}; "
                                   f"links {r['links']}, requester {r['requester']}")
        dut._log.info("%s: %d clocks, frames %d / %d, links %s", where, r["clocks"], len(r["sent"]["a"]),
                      len(r["sent"]["b"]), r["links"])



@cocotb.test()
async def test_stream_past_the_timeout(dut):
    """One QP streams 24 4 KiB WRITEs (96 packets, MTU 1024) on a lossless link, three times as long as its
    local ACK timeout (4 096 clocks): the ACKs of the first messages restart the timer while the turn is
    still sending, so nothing times out and nothing is sent twice."""
    from rnic.sim.loopback import Message
    from rnic.sim.pair_rc import run_free
    seed = seed_from_env(1)
    rng = random.Random(seed)
    dut._log.info("seed %d (rerun with RNIC_SEED=%d)", seed, seed)
    sim_tb.start_clock(dut)
    a, b = Side(dut, "a", rng), Side(dut, "b", rng)
    msgs = [Message(WqeOpcode.RDMA_WRITE, 4096, rng.randbytes(4096), signaled=rng.random() < 0.5) for _ in range(24)]
    lb = Loopback(msgs, [], service=ServiceType.RC, mode=rng.choice(list(LinkMode)), mtu=1024, seed=seed)
    r = await run_free(dut, rng, a, b, lb, tick=16, ack_timeout=6)
    assert not r["problems"], f"scoreboard on the RTL's memory: {r['problems']}; requester {r['requester']}"
    req = r["requester"]["a"]
    assert req["timeouts"] == 0 and req["retransmits"] == 0, f"a lossless stream timed out: {req}"
    assert len(r["sent"]["a"]) == 96, f"engine A sent {len(r['sent']['a'])} frames, not 96"


# --- pytest side -------------------------------------------------------------------------------------

@pytest.mark.slow
def test_rnic_pair():
    from rnic.sim.pair_top import build_pair
    from rnic.sim.toolchain import run
    config = RnicConfig()
    run(build_pair(config), "test_rnic_pair",
        seed=seed_from_env(), test_dir=Path(__file__).resolve().parent, extra_env=config.env())
