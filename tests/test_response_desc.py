"""``ResponseDesc`` in Amaranth's simulator against the model: random QP contexts (every service and link
mode), random SGID entries written to an :class:`EngineModel`'s registers, every response opcode and
random PSN / MSN / syndrome / length / original data; the descriptor must equal
``normalize_desc(engine.path_desc(...))`` as ``Responder.respond`` builds it. Seed: RNIC_SEED."""

import random
from dataclasses import fields as dc_fields

from amaranth.sim import Simulator

from rnic.hdl.receive.response_desc import ResponseDesc
from rnic.model.descriptor import MAX_PAYLOAD, LinkMode, PacketDesc
from rnic.model.engine import EngineModel, HostMemory
from rnic.model.frames import normalize_desc
from rnic.model.opcodes import Opcode
from rnic.model.qpc import CACHED_BYTES, QPC_FIELDS, PathMtu, QpContext, ServiceType
from rnic.model.regs import REG, SGID_ENTRIES
from rnic.sim.toolchain import seed_from_env

RESPONSES = (Opcode.RC_ACKNOWLEDGE, Opcode.RC_RDMA_READ_RESPONSE_FIRST, Opcode.RC_RDMA_READ_RESPONSE_MIDDLE,
             Opcode.RC_RDMA_READ_RESPONSE_LAST, Opcode.RC_RDMA_READ_RESPONSE_ONLY, Opcode.RC_ATOMIC_ACKNOWLEDGE)
CASES = 400


def _random_ctx(rng: random.Random, mode: LinkMode) -> QpContext:
    ctx = QpContext(**{name: rng.getrandbits(width) for name, _, width in QPC_FIELDS})
    ctx.service = rng.choice(list(ServiceType))
    ctx.link_mode = mode
    ctx.path_mtu = rng.choice(list(PathMtu))
    ctx.sgid_index = rng.randrange(SGID_ENTRIES)
    return ctx


def _random_sgids(engine: EngineModel, rng: random.Random) -> None:
    """Every SGID entry random, through the register writes software makes (VLAN's unused bits too)."""
    for i in range(SGID_ENTRIES):
        for w in range(4):
            engine.write_reg(REG[f"SGID{i}_GID{w}"].offset, rng.getrandbits(32))
        for reg in ("MAC_LO", "MAC_HI", "VLAN"):
            engine.write_reg(REG[f"SGID{i}_{reg}"].offset, rng.getrandbits(32))
    engine.write_reg(REG["PORT_LID"].offset, rng.getrandbits(16))


def test_response_desc_matches_model():
    seed = seed_from_env()
    print(f"seed {seed} (rerun with RNIC_SEED={seed})")
    rng = random.Random(f"{seed}-response-desc")
    engine = EngineModel(HostMemory())
    dut = ResponseDesc()
    sim = Simulator(dut)
    seen = set()

    async def tb(ctx):
        for n in range(CASES):
            if n % 50 == 0:
                _random_sgids(engine, rng)
            mode, opcode = LinkMode(n % len(LinkMode)), RESPONSES[n // len(LinkMode) % len(RESPONSES)]
            qp = _random_ctx(rng, mode)
            psn, syndrome, msn = rng.getrandbits(24), rng.getrandbits(8), rng.getrandbits(24)
            length, orig = rng.randrange(MAX_PAYLOAD + 1), rng.getrandbits(64)
            want = normalize_desc(engine.path_desc(qp, psn, opcode, payload_len=length, aeth_syndrome=syndrome,
                                                   aeth_msn=msn, atomic_orig=orig))
            sg = engine._sgid(qp.sgid_index)
            ctx.set(dut.ctx.as_value(), int.from_bytes(qp.pack()[:CACHED_BYTES], "little"))
            for port, value in (("opcode", opcode), ("psn", psn), ("syndrome", syndrome), ("msn", msn),
                                ("payload_len", length), ("atomic_orig", orig),
                                ("port_lid", engine.regs["PORT_LID"]), ("sgid_gid", sg.gid),
                                ("sgid_mac", sg.mac), ("sgid_vlan_id", sg.vlan_id),
                                ("sgid_vlan_present", int(sg.vlan_present))):
                ctx.set(getattr(dut, port), value)
            got = PacketDesc.from_int(ctx.get(dut.desc.as_value()))
            diff = {f.name: (getattr(got, f.name), getattr(want, f.name)) for f in dc_fields(PacketDesc)
                    if getattr(got, f.name) != getattr(want, f.name)}
            assert not diff, f"case {n} ({mode.name}, {opcode.name}, seed {seed}): (got, want) {diff}"
            seen.add((mode, opcode, sg.vlan_present))

    sim.add_testbench(tb)
    sim.run()
    assert {(m, o) for m, o, _ in seen} == {(m, o) for m in LinkMode for o in RESPONSES}
    assert {v for _, _, v in seen} == {False, True}
