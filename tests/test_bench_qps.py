"""bench-qps's plan (one engine build per QP table size and MSHR count), its table and its command line's
refusals; the runs themselves need whole-engine builds and are not in CI."""

from rnic.model.config import RnicConfig
from rnic.sim.bench_qps import config_for, markdown, plan
from rnic.sim.cli import main


def test_configs_hold_the_qps():
    assert config_for(16, 4) == RnicConfig()
    assert config_for(256, 4) == RnicConfig() and config_for(256, 1).qpc.mshrs == 1
    big = config_for(4096, 4)
    assert big.max_qps == 4096 and big.qpc.mshrs == 4
    assert config_for(3000, 2).max_qps == 4096
    assert config_for(256, 1, 0).ctx_prefetch == 0 and config_for(256, 1).ctx_prefetch == RnicConfig().ctx_prefetch


def test_plan_groups_runs_by_engine():
    p = plan(qps=(16, 256, 4096), latencies=(50, 200), quotas=(1, 16), mshrs=(1, 4), per_qp=4, prefetch=(0, 2), rx=(0,))
    assert {(c.max_qps, c.qpc.mshrs, c.ctx_prefetch) for c in p} == \
        {(q, m, f) for q in (256, 4096) for m in (1, 4) for f in (0, 2)}
    small = p[config_for(16, 1, 2)]
    assert len(small) == 2 * 2 * 2           # 16 and 256 QPs, two latencies, two quotas
    assert {(i["qps"], i["messages"]) for i in small} == {(16, 64), (256, 1024)}
    assert all(i["part"] == "rate" and i["size"] == 64 and i["rx"] == 0 for c in p for i in p[c])
    both = plan(qps=(256,), latencies=(50,), quotas=(1,), mshrs=(1,), per_qp=4, prefetch=(2,), rx=(0, 1))
    assert [i["rx"] for i in both[config_for(256, 1, 2)]] == [0, 1024]   # a frame in per message out


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
    assert main(["bench-qps", "--out", str(tmp_path), "--per-qp", "8"]) == 1
    assert "--per-qp" in capsys.readouterr().err
    assert main(["bench-qps", "--out", str(tmp_path), "--prefetch", "-1"]) == 1
    assert "--prefetch" in capsys.readouterr().err
    assert main(["bench-qps", "--out", str(tmp_path), "--rx", "2"]) == 1
    assert "--rx" in capsys.readouterr().err
    assert main(["bench-qps", "--out", str(tmp_path), "--mshrs", "0"]) == 1
