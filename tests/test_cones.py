"""rnic.fpga.cones on hand-made yosys netlists: levels, delays, startpoints and the endpoint grouping."""

import json

import pytest

from rnic.fpga.cones import DELAYS, cones, main


def _netlist(cells, names):
    return {"modules": {"top": {"cells": cells, "netnames": {
        n: {"hide_name": 0, "bits": bits, "attributes": {"src": f"/x/hdl/blk.py:{i + 1}"}}
        for i, (n, bits) in enumerate(names.items())}}}}


def _ff(d, q, ce=None):
    conn = {"CLK": [1], "DI": [d], "Q": [q]}
    if ce is not None:
        conn["CE"] = [ce]
    return {"type": "TRELLIS_FF", "connections": conn,
            "port_directions": {"CLK": "input", "DI": "input", "CE": "input", "Q": "output"}}


def _lut(ins, z):
    conn = dict(zip("ABCD", [[b] for b in ins] + [["0"]] * (4 - len(ins))))
    conn["Z"] = [z]
    return {"type": "LUT4", "connections": conn,
            "port_directions": {**{p: "input" for p in "ABCD"}, "Z": "output"}}


def _net(fanout):
    return DELAYS["net"] + DELAYS["net_fanout"] * __import__("math").log2(max(1, fanout))


def test_two_levels_and_grouping():
    # a[0], a[1] -> LUT -> LUT -> b[0] (D); a[0] -> b[1] directly; c is driven straight from a[1]
    cells = {"a0": _ff(90, 10), "a1": _ff(91, 11), "l1": _lut([10, 11], 20), "l2": _lut([20, 10], 21),
             "b0": _ff(21, 30), "b1": _ff(10, 31), "c": _ff(11, 40)}
    rows = cones(_netlist(cells, {"a": [10, 11], "b": [30, 31], "c": [40], "t": [20, 21]}))
    by_end = {r[2]: r for r in rows}
    assert set(by_end) == {"a (D)", "b (D)", "c (D)"}
    total, levels, _, start, srcs = by_end["b (D)"]
    assert levels == 2 and start == "a"
    # a[0] feeds l1, l2 and b1 (fanout 3); a[1] feeds l1 and c (2); l1's output feeds l2 (1)
    worst = DELAYS["ff_q"] + _net(3) + DELAYS["lut"] + _net(1) + DELAYS["lut"] + _net(1) + DELAYS["setup"]
    assert total == pytest.approx(worst)
    assert srcs[0] == "hdl/blk.py:1" and srcs[-1] == "hdl/blk.py:4"
    assert rows[0][2] == "b (D)"                      # worst first
    assert by_end["c (D)"][1] == 0


def test_clock_enable_and_bram_start():
    dp = {"type": "DP16KD", "connections": {"DOA0": [50], "CLKA": [1]},
          "port_directions": {"DOA0": "output", "CLKA": "input"}}
    cells = {"ram": dp, "l": _lut([50], 51), "r": _ff(60, 61, ce=51), "s": _ff(61, 60)}
    rows = cones(_netlist(cells, {"r": [61], "s": [60], "x": [50, 51]}))
    row = next(r for r in rows if r[2] == "r (CE)")
    assert row[1] == 1 and row[0] > DELAYS["bram_q"]


def test_cli(tmp_path, capsys):
    cells = {"a": _ff(11, 10), "l": _lut([10], 11)}
    p = tmp_path / "top.json"
    p.write_text(json.dumps(_netlist(cells, {"a": [10], "t": [11]})))
    main([str(p), "--top", "5", "--period", "1.0"])
    out = capsys.readouterr().out
    assert "1 endpoint registers, 1 over 1.0 ns" in out and "a (D)  <-  a" in out
