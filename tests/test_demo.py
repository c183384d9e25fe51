"""The README's main job: `python -m rnic.sim demo` runs the RTL, checks it against the model and
writes five pcaps that Wireshark dissects cleanly; `demo --model-only` writes the model's catalogue
of all 38 opcodes per mode. The RTL demo shares its Verilator build with cocotb_tests/test_rnic.py."""

import os
import shutil
import subprocess
import sys

from pathlib import Path

import pytest

from rnic.model.descriptor import LinkMode
from rnic.model.opcodes import OPCODE_INFO
from rnic.model.pcap import read_pcap
from rnic.sim.demo import demo_packets

# tshark is a system package (Debian: tshark). CI installs it and must not skip; elsewhere the
# check is skipped with a message when it is missing.
TSHARK = shutil.which("tshark")
ROOT = Path(__file__).resolve().parents[1]
needs_tshark = pytest.mark.skipif(TSHARK is None and not os.environ.get("CI"),
                                  reason="tshark not installed (apt-get install tshark)")

# Wireshark's RPC-over-RDMA heuristic misreads random SEND payloads as RPC and flags them; our
# payload is random bytes, not RPC, so that heuristic is switched off for the check. Its Mellanox
# EoIB dissector, tried on every UD payload, throws on an empty one (a valid zero-length UD SEND).
TSHARK_ARGS = ["--disable-protocol", "rpcordma", "--disable-protocol", "infiniband.eoib"]
# RoCEv2 sends UDP checksum 0 (IBTA Annex A17); over IPv6 Wireshark notes this as a warning.
WARNING = 0x600000  # Wireshark's PI_WARN; PI_ERROR (malformed) is above it
EXPECTED_WARNINGS = {LinkMode.ROCEV2_IPV6: {"Illegal checksum value (0)"}}


def _run_demo(out, *extra, timeout=120):
    proc = subprocess.run([sys.executable, "-m", "rnic.sim", "demo", "--out", str(out), *extra],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_demo_writes_every_opcode_in_every_mode(tmp_path):
    stdout = _run_demo(tmp_path, "--model-only")
    for mode in LinkMode:
        path = tmp_path / f"{mode.slug}.pcap"
        assert path.exists(), f"{path} missing"
        _, frames = read_pcap(path)
        assert len(frames) == len(OPCODE_INFO) == len(demo_packets(mode))
        assert mode.slug in stdout
    assert f"{5 * len(OPCODE_INFO)} frames" in stdout


def test_demo_bad_output_folder_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    proc = subprocess.run([sys.executable, "-m", "rnic.sim", "demo", "--model-only", "--out", str(blocker / "x")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.startswith("error:")


@needs_tshark
def test_demo_pcaps_dissect_in_tshark(tmp_path):
    assert TSHARK, "CI must have tshark installed (.ci/run installs it)"
    _run_demo(tmp_path, "--model-only")
    for mode in LinkMode:
        path = tmp_path / f"{mode.slug}.pcap"
        fields = subprocess.run(
            [TSHARK, "-r", str(path), *TSHARK_ARGS, "-T", "fields", "-E", "separator=|",
             "-e", "frame.protocols", "-e", "infiniband.bth.opcode", "-e", "_ws.expert.message",
             "-e", "_ws.expert.severity"],
            capture_output=True, text=True, timeout=120, check=True).stdout.splitlines()
        assert len(fields) == len(OPCODE_INFO), f"{mode.slug}: tshark saw {len(fields)} frames"
        for number, (line, (desc, _)) in enumerate(zip(fields, demo_packets(mode)), 1):
            protocols, opcode, expert, severity = line.split("|")
            assert "infiniband" in protocols.split(":"), f"{mode.slug} frame {number}: {protocols}"
            assert int(opcode) == desc.opcode, f"{mode.slug} frame {number}: opcode {opcode}"
            messages = {m for m, s in zip(expert.split(","), severity.split(",")) if m and int(s) >= WARNING}
            unexpected = messages - EXPECTED_WARNINGS.get(mode, set())
            assert not unexpected, f"{mode.slug} frame {number}: {unexpected}"


def _tshark_problems(path, mode):
    """Warnings and errors tshark reports for a pcap, beyond the expected ones."""
    lines = subprocess.run(
        [TSHARK, "-r", str(path), *TSHARK_ARGS, "-T", "fields", "-E", "separator=|",
         "-e", "frame.protocols", "-e", "_ws.expert.message", "-e", "_ws.expert.severity"],
        capture_output=True, text=True, timeout=120, check=True).stdout.splitlines()
    out = []
    for number, line in enumerate(lines, 1):
        protocols, expert, severity = line.split("|")
        if "infiniband" not in protocols.split(":"):
            out.append(f"frame {number}: not InfiniBand ({protocols})")
        messages = {m for m, s in zip(expert.split(","), severity.split(",")) if m and int(s) >= WARNING}
        out += [f"frame {number}: {m}" for m in messages - EXPECTED_WARNINGS.get(mode, set())]
    return len(lines), out


def test_rtl_demo(tmp_path):
    """The main job on the RTL: exit 0, no mismatch, a pcap per mode that tshark dissects cleanly."""
    stdout = _run_demo(tmp_path, timeout=900)
    assert "mismatches            0" in stdout
    assert "identical to the golden model's" in stdout
    total = 0
    for mode in LinkMode:
        path = tmp_path / f"{mode.slug}.pcap"
        _, frames = read_pcap(path)
        assert frames, f"{path}: no frames"
        total += len(frames)
        if TSHARK or os.environ.get("CI"):
            assert TSHARK, "CI must have tshark installed (.ci/run installs it)"
            seen, problems = _tshark_problems(path, mode)
            assert seen == len(frames) and not problems, f"{mode.slug}: {problems[:5]}"
    assert f"{total} frames from the RTL" in stdout
