"""The FPGA self-test's parts that need no Verilator: its workload and ROM contents from the model,
the AXI4 RAM it uses as host memory (Amaranth's simulator), the ``board`` CLI and the board top.
The whole self-test runs on Verilator in ``cocotb_tests/test_selftest.py``."""

from __future__ import annotations

import subprocess
import sys

import pytest
from amaranth.sim import Simulator

from rnic.fpga import cli
from rnic.model.config import RnicConfig
from rnic.fpga.selftest import SELFTEST_MAP, AxiRam, Fail, Op, SelfTest, selftest_workload
from rnic.model.wqe import CqeStatus
from rnic.sim.scenario import CHECKED_REGS, expected


def test_workload_fits_the_map_and_exercises_errors():
    w = selftest_workload()
    model = expected(w, RnicConfig())
    assert w.memory_map is SELFTEST_MAP
    assert all(addr + n <= SELFTEST_MAP.size for addr, n in w.regions)
    statuses = {c.cqe.status for c in model.cqes}
    assert {CqeStatus.SUCCESS, CqeStatus.LOC_LEN_ERR, CqeStatus.WR_FLUSH_ERR} <= statuses
    assert len({p.desc.mode for p in model.packets}) == 5          # every link mode on the wire
    assert model.reg("BUS_ERRORS") == 0


def test_selftest_roms_come_from_the_model():
    st = SelfTest()
    model = st.model
    assert st.expected_frames == [p.frame() for p in model.packets]
    assert sum(k.bit_count() for _, k, _ in st.beats) == sum(len(f) for f in st.expected_frames)
    assert sum(last for _, _, last in st.beats) == len(model.packets)
    checks = {a: v for op, a, v, _ in st.script if op == Op.CHECK}
    from rnic.model.regs import REG
    for name in CHECKED_REGS:
        assert checks[REG[name].offset] == model.reg(name)
    assert st.script[-1][0] == Op.END
    # the after-run image differs from the restored one where the engine wrote (CQEs, contexts)
    assert [a for a, _ in st.restore] == [a for a, _ in st.expect]
    assert sum(r != e for (_, r), (_, e) in zip(st.restore, st.expect)) > len(model.cqes)
    assert Fail.FRAME == 1 and Fail.TIMEOUT == 4


def _axi_sim(body):
    ram = AxiRam(64, bytes(range(64)), width=64, id_width=2)
    sim = Simulator(ram)
    sim.add_clock(1e-8)

    async def tb(ctx):
        await body(ctx, ram.s_axi)
    sim.add_testbench(tb)
    sim.run()


async def _handshake(ctx, ready, *sample):
    """Clock until ``ready`` is high at an edge; the ``sample`` values at that edge."""
    while True:
        r, values = ctx.get(ready), [ctx.get(x) for x in sample]
        await ctx.tick()
        if r:
            return values


def test_axi_ram_bursts_strobes_and_decerr():
    async def body(ctx, s):
        async def read(addr, n, size=3):
            ctx.set(s.araddr, addr), ctx.set(s.arlen, n - 1), ctx.set(s.arsize, size), ctx.set(s.arid, 2)
            ctx.set(s.arvalid, 1)
            await _handshake(ctx, s.arready)
            ctx.set(s.arvalid, 0)
            out, k = [], 0
            while len(out) < n:
                ready = k % 3 != 1                     # the master stalls every third clock
                k += 1
                ctx.set(s.rready, ready)
                beat = [ctx.get(x) for x in (s.rvalid, s.rdata, s.rresp, s.rlast, s.rid)]
                await ctx.tick()
                if beat[0] and ready:
                    out.append(tuple(beat[1:]))
            ctx.set(s.rready, 0)
            return out

        async def write(addr, beats, size=3):
            ctx.set(s.awaddr, addr), ctx.set(s.awlen, len(beats) - 1), ctx.set(s.awsize, size), ctx.set(s.awid, 1)
            ctx.set(s.awvalid, 1)
            await _handshake(ctx, s.awready)
            ctx.set(s.awvalid, 0)
            for i, (data, strb) in enumerate(beats):
                ctx.set(s.wdata, data), ctx.set(s.wstrb, strb), ctx.set(s.wlast, i == len(beats) - 1)
                ctx.set(s.wvalid, 1)
                await _handshake(ctx, s.wready)
            ctx.set(s.wvalid, 0)
            ctx.set(s.bready, 1)
            resp, bid = await _handshake(ctx, s.bvalid, s.bresp, s.bid)
            ctx.set(s.bready, 0)
            return resp, bid

        def word(i):
            return int.from_bytes(bytes(range(8 * i, 8 * i + 8)), "little")

        got = await read(8, 3)
        assert [g[0] for g in got] == [word(1), word(2), word(3)]
        assert [g[1:] for g in got] == [(0, 0, 2), (0, 0, 2), (0, 1, 2)]
        got = await read(48, 3)                       # runs past the end of the 64-byte RAM
        assert [g[1] for g in got] == [0, 0, 3] and got[2][0] == 0
        assert await write(16, [(0x1122334455667788, 0x0F), (0xAABBCCDDEEFF0011, 0xF0)]) == (0, 1)
        got = await read(16, 2)
        assert got[0][0] == (word(2) & ~0xFFFFFFFF) | 0x55667788
        assert got[1][0] == (word(3) & 0xFFFFFFFF) | (0xAABBCCDD << 32)
        assert await write(56, [(1, 0xFF), (2, 0xFF)]) == (3, 1)   # second beat beyond the RAM
        assert (await read(56, 1))[0][0] == 1
        got = await read(4, 2, size=2)                # narrow: 4-byte steps, whole words returned
        assert [g[0] for g in got] == [word(0), word(1)]

    _axi_sim(body)


def test_board_cli_usage_errors():
    for argv in (["board", "--board", "nope"], ["board", "--board", "ulx3s-85f", "--out", "/tmp/x"]):
        r = subprocess.run([sys.executable, "-m", "rnic.fpga", *argv], capture_output=True, text=True)
        assert r.returncode == 2, r.stderr
        assert "--board" in r.stderr or "--out" in r.stderr
    args = cli.parse_args(["board", "--board", "ulx3s-85f"])
    assert str(args.out) == "build/board/ulx3s-85f" and args.router is None and args.seed == 1


def test_board_top_pins_and_clock():
    pytest.importorskip("amaranth_boards")
    from rnic.fpga.board import BoardTop, board_platform
    plan = board_platform("ulx3s-85f").prepare(BoardTop(), name="selftest", synth_opts="-abc9")
    lpf = plan.files["selftest.lpf"]
    assert 'FREQUENCY PORT "clk25_0__io" 25000000.0 HZ' in lpf
    for i, pin in enumerate("B2 C2 C1 D2 D1 E2 E1 H3".split()):
        assert f'LOCATE COMP "led_{i}__io" SITE "{pin}"' in lpf
    assert "synth_ecp5 -abc9" in plan.files["selftest.ys"]


def test_board_yosys_script_maps_small_adders_like_synth():
    pytest.importorskip("amaranth_boards")
    from rnic.fpga.board import BoardTop, board_platform, yosys_overrides
    from rnic.fpga.synth import FSM_ONE_HOT, SMALL_ALU_TO_LUTS
    ys = board_platform("ulx3s-85f").prepare(BoardTop(), name="selftest", **yosys_overrides("selftest")).files["selftest.ys"]
    lines = [ln.strip() for ln in ys.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    first = lines.index("synth_ecp5 -abc9 -run begin:map_gates -top selftest")
    assert lines[first - 2:first] == ["chformal -remove", FSM_ONE_HOT]
    assert lines[first + 1:first + 3] == [SMALL_ALU_TO_LUTS, "synth_ecp5 -abc9 -top selftest -run map_gates:"]
