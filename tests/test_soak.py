"""The soak's seeds, shards, jobs, JSON summaries and ``soak-report``, without the RTL: a fake
``run_workloads`` derives each workload's clocks and frames from the workload itself."""

import hashlib
import json
import multiprocessing
import pickle
import shlex

import pytest

from rnic.model.config import RnicConfig
from rnic.sim import rtl, soak
from rnic.sim.cli import main
from rnic.sim.rtl import RtlRun

BAD = set()         # fingerprints of workloads the fake finds mismatching
BROKEN = set()      # ... whose simulation fails
CALLS = []          # (batch seed, number of workloads, isolated) per fake launch in this process


def _fingerprint(w, opts) -> str:
    return hashlib.sha256(pickle.dumps((w, opts))).hexdigest()


def fingerprint_of(seed, index, recipe="small", config=RnicConfig()):
    return _fingerprint(*soak.make_workload(seed, index, recipe, config))


def fake_run_workloads(work, *, seed, config, log=None, status=print, isolated=False, **_):
    runs = []
    for w, opts in work:
        fp = _fingerprint(w, opts)
        if fp in BROKEN:
            raise RuntimeError("the RTL simulation failed: engine not idle")
        clocks = 500 + int(fp[:6], 16) % 1500
        n = len(w.qpns)
        runs.append(RtlRun([bytes(60 + n)] * n, 0, ["frame 0: RTL and model differ"] if fp in BAD else [], clocks,
                           clocks // 2, [0] * n, n, [0] * n, width=config.width))
    if log is not None:
        log.write_text(f"seed {seed} isolated {isolated}\n")
    CALLS.append((seed, len(work), isolated))
    return runs


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setattr(rtl, "run_workloads", fake_run_workloads)
    monkeypatch.setattr(rtl, "ensure_build", lambda *a, **k: None)
    BAD.clear(), BROKEN.clear(), CALLS.clear()
    yield
    BAD.clear(), BROKEN.clear()


def _run(**kw):
    return soak.run_soak(soak.SoakPlan(**kw))


def _ids(result):
    return [(r["index"], r["seed"], r["clocks"]) for r in result.records]


def test_workload_seeds_depend_on_seed_and_index_only():
    assert soak.workload_seed(1, 7) == soak.workload_seed(1, 7) < 1 << 31
    assert len({soak.workload_seed(s, i) for s in (1, 2) for i in range(50)}) == 100
    assert fingerprint_of(1, 7) == fingerprint_of(1, 7) != fingerprint_of(1, 8)
    assert fingerprint_of(1, 7) != fingerprint_of(2, 7) != fingerprint_of(1, 7, "big")


def test_shards_together_are_the_unsharded_soak(fake):
    whole = _run(seed=3, workloads=11, cycles=None, batch=2)
    assert [r["index"] for r in whole.records] == list(range(11))
    parts = [_run(seed=3, workloads=11, cycles=None, batch=3, shard=(k, 4)) for k in range(1, 5)]
    for k, part in enumerate(parts, 1):
        assert all(r["index"] % 4 == k - 1 for r in part.records)
    assert sorted(x for p in parts for x in _ids(p)) == _ids(whole)


@pytest.mark.parametrize("batch", [1, 3, 8])
def test_workloads_do_not_depend_on_the_batch_size(fake, batch):
    assert _ids(_run(seed=5, workloads=9, cycles=None, batch=batch)) == _ids(_run(seed=5, workloads=9, cycles=None))
    firsts = list(range(0, 9, batch))
    assert [c[0] for c in CALLS[:len(firsts)]] == [soak.batch_seed(5, i) for i in firsts]


def test_cycles_budget_is_split_over_the_shards(fake):
    for k in (1, 2, 3):
        r = _run(seed=2, cycles=10_000, shard=(k, 3), batch=2)
        budget = -(-10_000 // 3)
        assert r.clocks >= budget > r.clocks - sum(x["clocks"] for x in r.records[-2:])
        assert [x["index"] for x in r.records] == list(range(k - 1, 3 * len(r.records), 3))


def test_summary_json_and_headline(fake, tmp_path, capsys):
    assert main(["soak", "--workloads", "7", "--seed", "3", "--shard", "2/3", "--batch", "2", "--out",
                 str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "soak seed 3 shard 2/3:" in out and "mismatches            0" in out
    d = json.loads((tmp_path / "soak-3-shard2of3.json").read_text())
    assert d["seed"] == 3 and d["shard"] == {"index": 2, "count": 3} and d["stopped"] == "done"
    assert d["config"] == RnicConfig().to_dict() and d["recipe"] == "small"
    assert [w["index"] for w in d["workloads"]] == [1, 4]
    assert [w["seed"] for w in d["workloads"]] == [soak.workload_seed(3, 1), soak.workload_seed(3, 4)]
    assert d["totals"]["workloads"] == 2 and d["totals"]["mismatches"] == 0
    assert d["totals"]["clocks"] == sum(w["clocks"] for w in d["workloads"]) and d["wall_seconds"] >= 0
    assert d["failures"] == [] and d["errors"] == []
    assert (tmp_path / "sim.log").exists()


def test_unsharded_output_keeps_its_lines(fake, tmp_path, capsys):
    assert main(["soak", "--cycles", "3000", "--seed", "5", "--batch", "2", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("soak seed 5: ") and "mismatches            0" in out
    assert (tmp_path / "soak-5-shard1of1.json").exists()


def test_failing_workload_rerun_and_report(fake, tmp_path, capsys):
    BAD.add(fingerprint_of(4, 5))
    assert main(["soak", "--workloads", "12", "--seed", "4", "--batch", "2", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "RTL and model differ:" in err and "rerun workload 5: " in err
    d = json.loads((tmp_path / "soak-4-shard1of1.json").read_text())
    assert d["stopped"] == "mismatch" and max(w["index"] for w in d["workloads"]) == 5     # stops after that batch
    [f] = d["failures"]
    assert f["index"] == 5 and f["seed"] == soak.workload_seed(4, 5)
    words = shlex.split(f["rerun"])
    assert words[:4] == ["python", "-m", "rnic.sim", "soak"] and words[words.index("--only") + 1] == "4,5"
    assert main(["soak-report", str(tmp_path)]) == 2
    out = capsys.readouterr().out
    assert f["rerun"] in out and f["rerun_alone"] in out and "--only 5" in f["rerun_alone"]
    CALLS.clear()
    assert main(words[3:] + ["--out", str(tmp_path / "rerun")]) == 2        # the rerun finds it again
    assert CALLS[0] == (soak.batch_seed(4, 4), 2, False)
    assert json.loads((tmp_path / "rerun" / "soak-4-only-4.json").read_text())["failures"][0]["index"] == 5


def test_failed_simulation_is_recorded(fake, tmp_path, capsys):
    BROKEN.add(fingerprint_of(1, 2))
    assert main(["soak", "--workloads", "8", "--batch", "2", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "a simulation failed\nerror: the RTL simulation failed" in err and "--only 2,3" in err
    d = json.loads((tmp_path / "soak-1-shard1of1.json").read_text())
    assert d["stopped"] == "error" and d["errors"][0]["indices"] == [2, 3]
    assert main(["soak-report", str(tmp_path)]) == 2
    assert "failed simulations:" in capsys.readouterr().out


def test_report_merges_shards_and_warns(fake, tmp_path, capsys):
    for k in (1, 2, 4):
        assert main(["soak", "--workloads", "10", "--seed", "9", "--shard", f"{k}/4",
                     "--out", str(tmp_path / f"shard{k}")]) == 0
    capsys.readouterr()
    assert main(["soak-report", str(tmp_path)]) == 0
    cap = capsys.readouterr()
    total = next(line for line in cap.out.splitlines() if line.startswith("total"))
    expect = [i for i in range(10) if i % 4 != 2]
    assert total.split()[1] == str(len(expect))
    assert "missing 3/4" in cap.err and cap.err.startswith("warning: ")
    (tmp_path / "copy").mkdir()
    (tmp_path / "copy" / "soak-9-shard1of4.json").write_text((tmp_path / "shard1" / "soak-9-shard1of4.json").read_text())
    assert main(["soak", "--workloads", "10", "--seed", "9", "--shard", "3/4", "--out", str(tmp_path / "shard3")]) == 0
    capsys.readouterr()
    assert main(["soak-report", str(tmp_path)]) == 0
    cap = capsys.readouterr()
    assert "missing" not in cap.err and "shard 1/4 appears 2 times" in cap.err
    total = next(line for line in cap.out.splitlines() if line.startswith("total"))
    assert total.split()[1] == "10"                 # the repeated shard's workloads count once


def test_report_bad_input(tmp_path, capsys):
    assert main(["soak-report", str(tmp_path)]) == 1
    assert capsys.readouterr().err.startswith("error: no soak summaries")
    (tmp_path / "soak-1-shard1of1.json").write_text('{"x": 1}')
    assert main(["soak-report", str(tmp_path)]) == 1
    assert "not a soak summary" in capsys.readouterr().err
    assert main(["soak-report", str(tmp_path / "nothing")]) == 1


@pytest.mark.parametrize("shard", ["3/2", "0/0", "x", "0/3", "1/", "/2", "-1/2", "1/2/3"])
def test_bad_shard_is_an_error(fake, shard, capsys):
    assert main(["soak", "--workloads", "2", f"--shard={shard}"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: --shard: ") and err.count("\n") == 1, err
    assert not CALLS


@pytest.mark.parametrize("args, message", [
    (["--only", "1,x"], "error: --only: "),
    (["--only", "1", "--shard", "1/2"], "error: --only runs"),
    (["--cycles", "10", "--workloads", "2"], "error: give --cycles or --workloads"),
    (["--jobs", "0"], "error: --jobs must be at least 1"),
])
def test_bad_soak_options(fake, args, message, capsys):
    assert main(["soak", *args]) == 1
    assert capsys.readouterr().err.startswith(message)


def test_parse_shard():
    assert soak.parse_shard(None) == (1, 1) and soak.parse_shard("3/8") == (3, 8)
    assert list(soak.shard_indices((2, 3), 10)) == [1, 4, 7]


def test_recipe_and_config_reach_the_rerun_command():
    plan = soak.SoakPlan(seed=2, recipe="big", config=RnicConfig(width=128).replace(qpc={"ways": 2}))
    words = shlex.split(plan.command(only=[3], batch=1))
    cfg = json.loads(words[words.index("--config") + 1])
    assert cfg == {"width": 128, "qpc": {"ways": 2}} and "big" in words
    assert RnicConfig.from_dict(cfg) == plan.config


@pytest.mark.skipif(multiprocessing.get_start_method() != "fork", reason="the fake reaches workers by fork")
def test_jobs_share_the_work(fake, tmp_path):
    one = _run(seed=6, workloads=10, cycles=None, batch=2)
    two = soak.run_soak(soak.SoakPlan(seed=6, workloads=10, cycles=None, batch=2, jobs=2, out=tmp_path))
    assert _ids(two) == sorted(_ids(one)) == _ids(one)
    logs = sorted(p.name for p in tmp_path.glob("sim*.log"))
    assert logs == ["sim-job1.log", "sim-job2.log"]
    assert all("isolated True" in (tmp_path / n).read_text() for n in logs)
    assert json.loads((tmp_path / "soak-6-shard1of1.json").read_text())["jobs"] == 2
