"""`python -m rnic.sim bench`: the CSV, Markdown and plot writers on synthetic results, and a quick
run on the RTL (shares the Verilator build of cocotb_tests/test_rnic.py, build/sim/rnic-sim-default)."""

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from rnic.sim import bench

ROOT = Path(__file__).resolve().parents[1]


def _results():
    eff = [{"width": w, "qps": 1, "size": s, "mtu": 4096, "quota": 16, "messages": 4, "mem_latency": 50,
            "frames": 4, "wire_bytes": 4 * (s + 58), "ideal_beats": 4 * -(-(s + 58) // (w // 8)),
            "clocks": 100 + s // 4, "efficiency": e, "bytes_per_clock": 4.5, "idle_after_first_frame": 0}
           for w in (64, 128) for s, e in ((64, 0.19), (4096, 0.994))]
    rate = [{"width": 64, "qps": q, "size": 64, "mtu": 4096, "quota": 1, "messages": 64, "mem_latency": 50,
             "warmup_frames": q, "frames": 64 - q, "wire_bytes": 7808, "ideal_beats": 976, "clocks": 4000,
             "msgs_per_kclk": 12.5, "efficiency": 0.244, "bytes_per_clock": 1.95,
             "qpc_lookups": 128, "qpc_hits": 128 - q, "qpc_misses": q} for q in (1, 16)]
    lat = [{"width": 64, "mem_latency": 50, "doorbell_to_first_byte_miss": 177, "doorbell_to_first_byte_hit": 106,
            "doorbell_to_last_byte_miss": 192, "doorbell_to_last_byte_hit": 121}]
    fair = [{"width": 64, "qps": 4, "quota": 4, "mtu": 1024, "mem_latency": 50, "long_len": 16384, "short_len": 1024,
             "shorts": 16, "frames_in_span": 64, "clocks_in_span": 9000, "jain": 0.999, "frames_in_rounds": 64,
             "max_lead_packets": 4, "max_wait_packets": 12, "bound_wait_packets": 12}]
    speed = [{"width": 64, "part": "efficiency", "label": "64 B x 4", "sim_clocks": 5000, "wall_s": 2.5,
              "clocks_per_s": 2000},
             {"width": 64, "part": "launch", "label": "whole simulator launch", "sim_clocks": 9000, "wall_s": 6.0,
              "clocks_per_s": 1500}]
    return {"commit": "0123456789abcdef", "dirty": False, "seed": 1, "quick": True, "widths": [64, 128],
            "efficiency": eff, "rate": rate, "latency": lat, "fairness": fair, "speed": speed}


def _rows(path):
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def test_writers(tmp_path):
    pytest.importorskip("matplotlib")
    r = _results()
    paths = bench.write_outputs(r, tmp_path)
    assert {p.name for p in paths} == {"efficiency.csv", "rate.csv", "latency.csv", "fairness.csv", "speed.csv",
                                        "results.json", "report.md", "efficiency.png", "rate.png"}
    for name in ("efficiency", "rate", "latency", "fairness", "speed"):
        rows = _rows(tmp_path / f"{name}.csv")
        assert len(rows) == len(r[name])
        assert list(rows[0])[0] == "width"
    eff = _rows(tmp_path / "efficiency.csv")
    assert list(eff[0]) == ["width", "mem_latency", "mtu", "qps", "quota", "size", "messages", "frames",
                            "ideal_beats", "clocks", "efficiency", "bytes_per_clock", "frame_gaps",
                            "r_beats", "r_idle_none_due", "r_idle_due"]
    assert [(x["width"], x["size"], float(x["efficiency"])) for x in eff] == \
        [("64", "64", 0.19), ("64", "4096", 0.994), ("128", "64", 0.19), ("128", "4096", 0.994)]
    assert _rows(tmp_path / "rate.csv")[1]["qpc_misses"] == "16"
    assert json.loads((tmp_path / "results.json").read_text()) == r
    md = (tmp_path / "report.md").read_text()
    assert "commit `0123456789ab`" in md
    # constant settings are stated once; the width varies in the efficiency table, so it is a column
    assert "Configuration: memory latency 50 clocks; MTU 4096; 1 QP; SCHED_QUOTA 16; sink always ready; commit 0123456789ab." in md
    assert "| W (bits) | message | messages |" in md
    assert "| 128 | 4 KiB | 4 |" in md
    assert "Configuration: W = 64 bits (8 bytes per beat); memory latency 50 clocks; MTU 4096; SCHED_QUOTA 1; " \
           "64 B messages; sink always ready; commit 0123456789ab." in md
    assert "| 16 | 64 | 48 | 4000 | 12.5 | 0.244 | 1.95 | 128 | 112 | 16 |" in md
    assert "| 50 | 177 | 192 | 106 | 121 |" in md
    assert "![Wire efficiency vs message size](efficiency.png)" in md
    for png in ("efficiency.png", "rate.png"):
        assert (tmp_path / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = bench.text_tables(r)
    assert "Message rate (W = 64 bits" in text and "12.5" in text


def test_read_channel_accounting():
    """FrameClock.read_channel on a hand-made trace: memory latency 5, a 2-beat AR at clock 0 and a
    1-beat AR at 3; R beats at 5 and 8 (clock 6 due but late, 7 held by the engine) and 9."""
    from rnic.sim.harness import FrameClock
    w = FrameClock.__new__(FrameClock)
    w.starts, w.beats = [2, 9], [2, 3, 9, 12]
    w.ars, w.r_beats, w.r_stalls = [(0, 2), (3, 1)], [5, 8, 9], [7]
    # clocks 2..12: 2-4 nothing due, 5 beat, 6 due, 7 backpressure, 8-9 beats, 10-12 nothing due
    assert w.read_channel(5) == {"r_beats": 3, "r_backpressure": 1, "r_idle_due": 1, "r_idle_none_due": 6}
    assert w.read_channel(5, first=1) == {"r_beats": 1, "r_backpressure": 0, "r_idle_due": 0,
                                          "r_idle_none_due": 3}


def test_without_matplotlib(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)          # import matplotlib raises ImportError
    said = []
    paths = bench.write_outputs(_results(), tmp_path, status=said.append)
    assert not list(tmp_path.glob("*.png")) and len(paths) == 7
    assert said == ["bench: PNG plots skipped: matplotlib is not installed (pip install matplotlib, "
                    "or pip install -e '.[test]')"]
    assert "png" not in (tmp_path / "report.md").read_text()


def test_plan_sizes():
    full, quick = bench.plan(), bench.plan(quick=True)
    assert [x["size"] for x in full if x["part"] == "efficiency"] == [64, 256, 1024, 4096, 16384, 65536]
    assert [(x["qps"], x["quota"]) for x in full if x["part"] == "rate"] == \
        [(1, 1), (16, 1), (256, 1), (16, 16), (16, 16), (256, 16)]
    assert [(x["qps"], x["quota"]) for x in quick if x["part"] == "rate"] == [(1, 1), (16, 1), (16, 16)]
    assert [x["mem_latency"] for x in quick if x["part"] == "latency"] == [50]
    assert bench.plan(parts=("latency",)) == [{"part": "latency", "mem_latency": 50},
                                              {"part": "latency", "mem_latency": 500}]


def test_quick_bench_on_the_rtl(tmp_path):
    """The CI bench: ``bench --quick`` at W = 64, every run checked against the model. Messages of
    1 KiB and more at 50-clock memory must reach an efficiency of 0.99 (#7's target; a simulated
    clock count, deterministic for the seed): measured 0.995 (1 KiB x 16), 0.999 (4 KiB x 8) and
    1.000 (64 KiB) at seed 1, so a value below 0.99 means the WQE prefetch or the payload
    read-ahead stopped hiding the memory latency. 64-byte messages must reach 0.85 (0.868 at seed
    1 with the WQE read-ahead), and 16 QPs at a turn per message 0.16 (0.187 with the next turn's
    lookahead). No frame may have a gap (store and forward)."""
    proc = subprocess.run([sys.executable, "-m", "rnic.sim", "bench", "--quick", "--out", tmp_path],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in ("report.md", "results.json"):
        assert (tmp_path / name).exists()
    quick = bench.plan(quick=True)
    for name in ("efficiency", "rate", "latency", "fairness"):
        rows = _rows(tmp_path / f"{name}.csv")
        assert len(rows) == sum(x["part"] == name for x in quick), name
        for row in rows:
            assert row["width"] == "64"
            assert all(v != "" for k, v in row.items()), (name, row)
    eff = _rows(tmp_path / "efficiency.csv") + _rows(tmp_path / "rate.csv")
    assert all(0 < float(x["efficiency"]) <= 1 for x in eff)
    big = [float(x["efficiency"]) for x in _rows(tmp_path / "efficiency.csv") if int(x["size"]) >= 1024]
    assert len(big) == 3 and min(big) >= 0.99, big
    small = [float(x["efficiency"]) for x in _rows(tmp_path / "efficiency.csv") if int(x["size"]) == 64]
    assert small and small[0] >= 0.85, small      # WQE read-ahead: 0.868 at seed 1 (0.24 reading one at a time)
    turns = [float(x["efficiency"]) for x in _rows(tmp_path / "rate.csv") if (x["qps"], x["quota"]) == ("16", "1")]
    assert turns and turns[0] >= 0.16, turns      # next turn's lookahead: 0.187 at seed 1 (0.109 without)
    r = json.loads((tmp_path / "results.json").read_text())
    for x in [*r["efficiency"], *r["rate"]]:      # every clock of the span is in one read category
        assert x["frame_gaps"] == 0, x
        assert sum(x[k] for k in ("r_beats", "r_backpressure", "r_idle_due", "r_idle_none_due")) == x["clocks"]
    speed = _rows(tmp_path / "speed.csv")
    assert len(speed) == len(quick) + 1 and all(int(x["clocks_per_s"]) > 0 for x in speed)
    assert "Wire efficiency vs message size" in proc.stdout
