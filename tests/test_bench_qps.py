"""bench-qps's plan (one engine build per QP table size and MSHR count), its table and its command line's
refusals; the runs themselves need whole-engine builds and are not in CI."""

from rnic.model.config import RnicConfig
from rnic.sim.bench_qps import config_for, markdown, plan
from rnic.sim.cli import main


def test_configs_hold_the_qps():
    assert config_for(16, 1) == RnicConfig()
    assert config_for(256, 1) == RnicConfig()
    big = config_for(4096, 4)
    assert big.max_qps == 4096 and big.qpc.mshrs == 4
    assert config_for(3000, 2).max_qps == 4096


def test_plan_groups_runs_by_engine():
    p = plan(qps=(16, 256, 4096), latencies=(50, 200), quotas=(1, 16), mshrs=(1, 4), per_qp=4)
    assert {(c.max_qps, c.qpc.mshrs) for c in p} == {(256, 1), (4096, 1), (256, 4), (4096, 4)}
    small = p[config_for(16, 1)]
    assert len(small) == 2 * 2 * 2           # 16 and 256 QPs, two latencies, two quotas
    assert {(i["qps"], i["messages"]) for i in small} == {(16, 64), (256, 1024)}
    assert all(i["part"] == "rate" and i["size"] == 64 for c in p for i in p[c])


def test_markdown_has_a_row_per_run():
    rows = [{"mem_latency": 50, "quota": 1, "mshrs": m, "qps": 16, "messages": 64, "efficiency": 0.5,
             "msgs_per_kclk": 10.0, "qpc_lookups": 10, "qpc_hits": 8, "qpc_misses": 2} for m in (1, 4)]
    text = markdown(rows)
    assert text.count("| 50 | 1 |") == 2 and "**0.500**" in text


def test_refuses_bad_arguments(tmp_path, capsys):
    assert main(["bench-qps", "--out", str(tmp_path), "--qps", "16,x"]) == 1
    assert "--qps" in capsys.readouterr().err
    assert main(["bench-qps", "--out", str(tmp_path), "--per-qp", "1"]) == 1
    assert "--per-qp" in capsys.readouterr().err
    assert main(["bench-qps", "--out", str(tmp_path), "--mshrs", "0"]) == 1
