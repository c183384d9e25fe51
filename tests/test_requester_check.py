"""The requester's first decisions in logic (rnic.hdl.requester.check) against the model's functions
(rnic.model.requester.classify, walk_step), in Amaranth's simulator: random contexts and responses with
PSNs near each other and across the 24-bit wrap, every response opcode and AETH syndrome kind, every
WQE opcode and path MTU. Seed: RNIC_SEED."""

import random

from amaranth.sim import Simulator

from rnic.hdl.requester import RespCheck, WalkStep
from rnic.model.engine import PSN_MASK
from rnic.model.opcodes import OPCODE_INFO, Transport
from rnic.model.qpc import QpState, ServiceType
from rnic.model.requester import RespDrop, classify, psn_span, walk_step
from rnic.model.wqe import WqeOpcode
from rnic.sim.toolchain import seed_from_env

RESPONSES = [op for op, i in OPCODE_INFO.items() if i.transport == Transport.RC and
             i.operation in ("RDMA_READ_RESPONSE", "ACKNOWLEDGE", "ATOMIC_ACKNOWLEDGE")]


def _near(rng, psn):
    return (psn + rng.choice([0, 1, -1, 2, -2, rng.randrange(-200, 200), rng.randrange(1 << 24)])) & PSN_MASK


def _sim(dut, vectors, check, ticks=0):
    """Apply each vector, wait ``ticks`` clocks (a registered block), then ``check``."""
    sim = Simulator(dut)
    if ticks:
        sim.add_clock(1e-8)

    async def tb(ctx):
        for inputs in vectors:
            for name, value in inputs.items():
                ctx.set(getattr(dut, name), value)
            for _ in range(ticks):
                await ctx.tick()
            check(inputs, ctx)

    sim.add_testbench(tb)
    sim.run()


def test_resp_check_against_classify():
    seed = seed_from_env()
    print(f"RNIC_SEED={seed}")
    rng = random.Random(seed)
    vectors = []
    for _ in range(3000):
        una = rng.randrange(1 << 24)
        nxt = _near(rng, una)
        vectors.append(dict(state=rng.choice([QpState.RTS] * 6 + list(QpState)), service=rng.choice(
            [ServiceType.RC] * 6 + list(ServiceType)), una_psn=una, next_psn=nxt, high_psn=_near(rng, nxt),
            opcode=rng.choice(RESPONSES), psn=_near(rng, una), syndrome=rng.randrange(256)))
    seen = set()

    def check(v, ctx):
        want = classify(**v)
        want = (type(want).__name__, int(want))            # RespDrop 0 and RespKind 0 are equal ints
        drop = ctx.get(dut.drop)
        got = ("RespDrop", ctx.get(dut.reason)) if drop else ("RespKind", ctx.get(dut.kind))
        assert got == want, f"seed {seed}: {v}: RTL {got!r}, model {want!r}"
        seen.add(want)

    dut = RespCheck()
    _sim(dut, vectors, check)
    assert len(seen) >= 10, f"only {seen} seen"


def test_walk_step_against_the_model():
    seed = seed_from_env()
    print(f"RNIC_SEED={seed}")
    rng = random.Random(seed)
    vectors = []
    for _ in range(3000):
        log_mtu = rng.randrange(8, 13)
        length = rng.choice([0, 1, (1 << log_mtu) - 1, 1 << log_mtu, (1 << log_mtu) + 1, rng.randrange(1 << 16),
                             rng.randrange(1 << 31)])
        psn = rng.randrange(1 << 24)
        vectors.append(dict(opcode=rng.choice(list(WqeOpcode)), length=length, log_mtu=log_mtu, wqe_psn=psn,
                            bound=_near(rng, psn) if rng.random() < 0.5 else (psn + length // (1 << log_mtu)
                                                                              + rng.randrange(-1, 3)) & PSN_MASK))

    def check(v, ctx):
        want = walk_step(v["opcode"], v["length"], 1 << v["log_mtu"], v["wqe_psn"], v["bound"])
        assert ctx.get(dut.step) == want, f"seed {seed}: {v}: RTL {ctx.get(dut.step)}, model {want!r}"
        span = psn_span(v["opcode"], v["length"], 1 << v["log_mtu"])
        assert ctx.get(dut.span) == span, f"seed {seed}: {v}: RTL span {ctx.get(dut.span)}, model {span}"

    dut = WalkStep()
    _sim(dut, vectors, check, ticks=2)
