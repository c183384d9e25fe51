"""``python -m rnic.sim.bench_packet_builder --synth --pnr-seeds N`` with the simulator and the FPGA
tools replaced by fakes: one synthesis per seed, each seed passed on, and the spread printed."""

from __future__ import annotations

import pytest

import rnic.fpga.synth
from rnic.sim import bench_packet_builder as bpb


def test_pnr_seeds_runs_each_seed_and_prints_the_spread(monkeypatch, capsys):
    calls = []
    fmax = {1: 140.0, 2: 160.0, 3: 145.0}

    def fake_synthesize(factory, name, *, speed=None, seed=1, **kw):
        calls.append((name, seed, speed))
        return {"device": "ecp5-25f", "speed": speed or 6, "lut4": 100, "ff": 200, "wrapper_ff": 10,
                "bram": 0, "fmax_mhz": {"clk": fmax[seed]}, "target_mhz": 156.25,
                "timing_met": False, "fits": True}

    monkeypatch.setattr(rnic.fpga.synth, "synthesize", fake_synthesize)
    assert bpb.main(["--widths", "", "--synth", "--pnr-seeds", "3"]) == 0
    assert [seed for _, seed, _ in calls] == [1, 2, 3]
    assert len({name for name, _, _ in calls}) == 3        # each seed in its own work folder
    out = capsys.readouterr().out
    assert "nextpnr seed 2" in out
    assert ("Fmax over nextpnr seeds 1..3: 140.0, 160.0, 145.0 MHz; min 140.0, mean 148.3, max 160.0; "
            "1 of 3 seeds at 156.25 MHz or more") in out


def test_pnr_seeds_must_be_positive():
    with pytest.raises(SystemExit):
        bpb.main(["--widths", "", "--synth", "--pnr-seeds", "0"])
