"""bench-pair's plan, its tables' arithmetic (on made-up runs) and its command line's refusals; the runs
themselves need the pair's six-minute build and are not in CI."""

import math

from rnic.sim.bench_pair import LOSSES, plan, tables
from rnic.sim.cli import main


def _run(part, loss=0.0, t_first=100, t_last=None, t_done=1100, beats=100, frames=1, payload=4096, seed=1):
    return {"part": part, "op": "RDMA_WRITE", "size": payload, "messages": 1, "mtu": 1024, "loss": loss, "seed": seed,
            "t_first": t_first, "t_last": t_last if t_last is not None else t_first + beats, "t_done": t_done,
            "t_recv": None, "data_frames": frames, "data_beats": beats, "data_bytes": beats * 8, "ack_frames": 1,
            "payload": payload, "problems": [], "links": {"a-to-b": {"lost": 0}, "b-to-a": {"lost": 0}},
            "requester": {"retransmits": 0, "timeouts": 0, "naks_seq": 0}}


def test_plan_has_every_part_and_the_round_trip():
    items = plan(quick=True)
    assert {i["part"] for i in items} == {"goodput", "round trip", "loss", "latency"}
    assert sorted({i["loss"] for i in items if i["part"] == "loss"}) == sorted(LOSSES)
    full = plan(seeds=3)
    for loss in LOSSES:
        runs = [i for i in full if i["part"] == "loss" and i["loss"] == loss]
        assert len(runs) == (1 if loss == 0 else 3) and len({i["seed"] for i in runs}) == len(runs)


def test_goodput_and_the_go_back_n_bound():
    trip = _run("round trip", t_first=0, t_done=800, beats=100)           # 8 frame times: n = 9
    base = _run("loss", t_first=0, t_done=2048, payload=8192)              # 8192 B in 2048 clocks of 8 B: 0.5
    lossy = _run("loss", loss=0.05, t_first=0, t_done=4096, payload=8192)  # half that
    t = tables([trip, base, lossy], 64)
    rows = {r["loss"]: r for r in t["loss"]}
    assert rows[0.0]["goodput (mean)"] == 0.5 and rows[0.05]["goodput (mean)"] == 0.25
    assert math.isclose(rows[0.05]["go-back-N bound"], round(0.5 * 0.95 / (1 + 8 * 0.05), 4))
    assert rows[0.0]["go-back-N bound"] == 0.5


def test_goodput_row():
    r = _run("goodput", t_first=10, t_last=110, t_done=210, beats=100, payload=640)
    row = tables([r], 64)["goodput"][0]
    assert row["goodput"] == round(640 / (8 * 200), 4) and row["sender wire use"] == 1.0
    assert row["header bound"] == 0.8


def test_refuses_unknown_parts(tmp_path, capsys):
    assert main(["bench-pair", "--out", str(tmp_path), "--parts", "goodput,speed"]) == 1
    assert "--parts" in capsys.readouterr().err
    assert main(["bench-pair", "--out", str(tmp_path), "--seeds", "0"]) == 1
