"""``python -m rnic.sim respond``: the example capture replayed into the whole engine beside the model
(shares the Verilator build of cocotb_tests/test_rnic_receive.py), and scenario errors naming their field."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rnic.model.pcap import read_pcap
from rnic.sim.respond_scenario import ScenarioError, load_respond_scenario

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args, timeout=1500):
    return subprocess.run([sys.executable, "-m", "rnic.sim", "respond", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


def test_example_capture(tmp_path):
    r = _cli("examples/respond/scenario.toml", "--frames", "examples/respond/requests.pcap", "--out", tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [line for line in r.stdout.splitlines() if line.startswith("frame ")]
    kinds = [line.split(": ", 1)[1] for line in lines]
    assert len(lines) == len(read_pcap(ROOT / "examples/respond/requests.pcap")[1]) == 10
    assert [k.split(":")[0] for k in kinds] == ["executed"] * 5 + ["duplicate", "NAK 0x60 (PSN_SEQ_ERR)",
                                                                   "dropped", "executed", "NAK 0x62 (REMOTE_ACCESS)"]
    assert "<- RTL" not in r.stdout
    assert "RTL and model agree" in r.stdout
    _, responses = read_pcap(tmp_path / "rocev2-ipv4.pcap")
    assert len(responses) == 10                  # 4 ACKs, 2 READ responses, 2 atomic ACKs, 2 NAKs
    assert "host memory changed: 0x00100010 +100" in r.stdout       # the WRITE's 100 bytes


@pytest.mark.parametrize("data, message", [
    ({}, "port: missing"),
    ({"port": {"gids": []}}, "port.gids: one to 16 addresses"),
    ({"port": {"gids": ["10.0.0.300"]}}, "port.gids[0]: '10.0.0.300' is not an IPv4 or IPv6 address"),
    ({"port": {"gids": ["10.0.0.1"]}}, "qps: at least one QP"),
    ({"port": {"gids": ["10.0.0.1"]}, "qps": [{"qpn": 40, "mode": "rocev1"}]}, "qps[0].qpn: 0..15"),
    ({"port": {"gids": ["10.0.0.1"]}, "qps": [{"qpn": 1}]}, "qps[0].mode: None is not one of"),
    ({"port": {"gids": ["10.0.0.1"]}, "qps": [{"qpn": 1, "mode": "ib-local", "access": ["READ"]}]},
     "qps[0].access: a list of"),
    ({"port": {"gids": ["10.0.0.1"]}, "mrs": [{"addr": 0x1000, "length": 64}], "qps": [{"qpn": 1}]},
     "mrs[0]: addr and length must lie in"),
])
def test_scenario_errors(tmp_path, data, message):
    path = tmp_path / "s.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ScenarioError, match=message.replace("[", r"\[").replace("(", r"\(").replace(".", r"\.")):
        load_respond_scenario(path)


def test_bad_scenario_is_exit_1(tmp_path):
    path = tmp_path / "s.json"
    path.write_text("{}")
    r = _cli(path, "--frames", "examples/respond/requests.pcap", "--out", tmp_path)
    assert r.returncode == 1 and "error: port: missing" in r.stderr
