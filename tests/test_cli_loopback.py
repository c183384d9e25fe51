"""``python -m rnic.sim loopback``: the example over a lossy link passes the scoreboard and writes both
directions' pcaps; a link cut with no retries fails it (exit 2); a malformed scenario is a clear error
(exit 1); ``--rtl`` runs UC on two RTL engines beside the model (``-m slow``) and refuses RC."""

import json
import subprocess
from pathlib import Path

import pytest

from rnic.model.pcap import read_pcap
from rnic.sim.cli import main
from test_demo import TSHARK, TSHARK_ARGS, needs_tshark

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "loopback" / "lossy.toml"


def test_example_over_a_lossy_link(tmp_path, capsys):
    assert main(["loopback", str(EXAMPLE), "--out", str(tmp_path), "--loss", "0.05", "--dup", "0.02",
                 "--reorder", "2", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "end-to-end verdict: every message arrived once, in order" in out
    for name in ("a-to-b", "b-to-a"):
        _, frames = read_pcap(tmp_path / f"{name}-rocev2-ipv4.pcap")
        assert frames and f"link {name}: {len(frames)} frames sent" in out


def test_a_cut_link_without_retries_fails(tmp_path, capsys):
    scenario = tmp_path / "cut.toml"
    scenario.write_text('service = "RC"\nretry = 0\n[[a]]\nop = "SEND"\nlength = 10\n[link.a-to-b]\ncut = true\n')
    assert main(["loopback", str(scenario), "--out", str(tmp_path / "out")]) == 2
    out = capsys.readouterr().out
    assert "FAILED" in out and "RETRY_EXC_ERR" in out


def test_malformed_scenario(tmp_path, capsys):
    scenario = tmp_path / "bad.toml"
    scenario.write_text('service = "XY"\n')
    assert main(["loopback", str(scenario), "--out", str(tmp_path / "out")]) == 1
    assert "service" in capsys.readouterr().err


@needs_tshark
def test_pcaps_dissect_in_tshark(tmp_path):
    """Wireshark reads every frame of both directions (as the nodes sent them, retransmissions included) as
    InfiniBand over RoCEv2."""
    assert TSHARK, "CI must have tshark installed (.ci/run installs it)"
    assert main(["loopback", str(EXAMPLE), "--out", str(tmp_path), "--loss", "0.05", "--seed", "3"]) == 0
    for name in ("a-to-b", "b-to-a"):
        path = tmp_path / f"{name}-rocev2-ipv4.pcap"
        _, frames = read_pcap(path)
        lines = subprocess.run([TSHARK, "-r", str(path), *TSHARK_ARGS, "-T", "fields", "-e", "frame.protocols"],
                               capture_output=True, text=True, check=True).stdout.splitlines()
        assert len(lines) == len(frames)
        assert all("infiniband" in line.split(":") for line in lines), name


def test_bad_knob(tmp_path, capsys):
    assert main(["loopback", str(EXAMPLE), "--out", str(tmp_path), "--loss", "1.5"]) == 1
    assert "loss is a probability" in capsys.readouterr().err


def test_rtl_refuses_late_receives(tmp_path, capsys):
    late = tmp_path / "late.toml"
    late.write_text(EXAMPLE.read_text().replace("qps = 2", "qps = 2\nrnr = 2"))
    assert main(["loopback", str(late), "--out", str(tmp_path), "--rtl"]) == 1
    assert "leave rnr out of the scenario" in capsys.readouterr().err


@pytest.mark.slow
def test_rtl_uc_beside_the_model(tmp_path, capsys):
    """UC both ways on two RTL engines over a lossy link (the pair's build takes about six minutes)."""
    uc = EXAMPLE.parent / "uc.toml"
    assert main(["loopback", str(uc), "--out", str(tmp_path), "--loss", "0.05", "--dup", "0.05", "--rtl"]) == 0
    out = capsys.readouterr().out
    assert "RTL and model agree" in out and "what arrived is what was sent" in out


def test_soak_loopback_refuses_shards(capsys):
    assert main(["soak", "--loopback", "--shard", "1/2"]) == 1
    assert "takes no --shard" in capsys.readouterr().err


@pytest.mark.slow
def test_soak_loopback(tmp_path, capsys):
    """Loopback workloads 0 and 1 of the soak, one per simulator launch (``--jobs 2``), on two RTL engines in
    lockstep with the model."""
    assert main(["soak", "--loopback", "--workloads", "2", "--jobs", "2", "--loss", "0.02", "--out",
                 str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "0 mismatches, 0 problems" in out
    summary = json.loads((tmp_path / "soak-loopback-1.json").read_text())
    assert [w["index"] for w in summary["workloads"]] == [0, 1] and summary["totals"]["messages"] > 0
    assert (tmp_path / "soak-loopback-sim-job2.log").exists()


@pytest.mark.slow
def test_rtl_rc_beside_the_model(tmp_path, capsys):
    """The RC example on two RTL engines in lockstep with the model, over a lossy link."""
    assert main(["loopback", str(EXAMPLE), "--out", str(tmp_path), "--loss", "0.05", "--dup", "0.05", "--rtl"]) == 0
    out = capsys.readouterr().out
    assert "RTL and model agree" in out and "arrived once, in order" in out
