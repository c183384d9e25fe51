"""Every deep register-to-register cone of an ECP5 netlist, from yosys alone (no place and route).

nextpnr reports one critical path per run; a design that misses its clock by half has thousands
of failing endpoints, and fixing them one placement at a time is slow. This pass reads the
``top.json`` that ``python -m rnic.fpga synth`` leaves in its work folder (yosys ``synth_ecp5``
output), walks every path from a flip-flop or block-RAM output to a flip-flop or RAM input, and
estimates its delay with a fixed model of ECP5 speed grade 6 (``DELAYS``): cell delays as nextpnr
reports them, and a routing guess per net that grows with its fanout. Placement can make a net far
longer than the guess, so the figures rank cones and count LUT levels; they do not predict Fmax.

    python -m rnic.fpga.cones build/synth/rnic.engine-ecp5-25f/top.json [--top 30] [--period 6.4]

Each row is one endpoint register (all its bits together): the worst estimated arrival, its LUT
levels, the startpoint of that path and the source lines the path passes through (the nets' ``src``
attributes, as nextpnr prints them).
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import re
import sys
from pathlib import Path

__all__ = ["DELAYS", "cones", "main"]

#: ns. ``net`` + ``net_fanout`` * log2(fanout) is the routing guess for a net.
DELAYS = {"ff_q": 0.52, "bram_q": 5.8, "lutram_q": 1.2, "lut": 0.24, "mux": 0.22, "ccu_in": 0.45,
          "ccu_carry": 0.035, "ccu_sum": 0.25, "setup": 0.1, "net": 0.6, "net_fanout": 0.12}

_COMB = {"LUT4": ("ABCD", "Z"), "PFUMX": (("ALUT", "BLUT", "C0"), "Z"), "L6MUX21": (("D0", "D1", "SD"), "Z")}


def _bits(conn):
    return [b for b in conn if isinstance(b, int)]


def cones(netlist: dict, top: str = "top"):
    """Rows ``(arrival_ns, levels, endpoint, startpoint, [src lines])`` per endpoint register, worst first."""
    mod = netlist["modules"][top]
    cells = mod["cells"]
    name_of, src_of = {}, {}
    for name, n in sorted(mod["netnames"].items(), key=lambda kv: (kv[1].get("hide_name", 0), len(kv[0]))):
        src = n.get("attributes", {}).get("src", "").split("|")[0]
        src = re.sub(r"^.*?/(hdl|fpga|sim)/", r"\1/", src) if re.search(r"/(hdl|fpga|sim)/", src) else ""
        for i, b in enumerate(n["bits"]):
            if isinstance(b, int) and b not in name_of:
                name_of[b] = f"{name}[{i}]" if len(n["bits"]) > 1 else name
                if src:
                    src_of[b] = src
    fanout = collections.Counter()
    for c in cells.values():
        for port, conn in c["connections"].items():
            if c.get("port_directions", {}).get(port) == "input":
                for b in _bits(conn):
                    fanout[b] += 1

    def net_delay(b):
        return DELAYS["net"] + DELAYS["net_fanout"] * math.log2(max(1, fanout[b]))

    # arrival[b] = (ns, levels, startpoint bit, predecessor bit) at the driver's output
    arrival: dict[int, tuple] = {}
    drivers: dict[int, tuple] = {}
    for cname, c in cells.items():
        t, conn = c["type"], c["connections"]
        if t == "TRELLIS_FF":
            for b in _bits(conn.get("Q", [])):
                arrival[b] = (DELAYS["ff_q"], 0, b, None)
        elif t == "DP16KD":
            for p, bits in conn.items():
                if p.startswith("DO"):
                    for b in _bits(bits):
                        arrival[b] = (DELAYS["bram_q"], 0, b, None)
        elif t in _COMB:
            ins, out = _COMB[t]
            for b in _bits(conn.get(out, [])):
                drivers[b] = (t, [x for p in ins for x in _bits(conn.get(p, []))])
        elif t == "CCU2C":
            a0 = [x for p in ("A0", "B0", "C0", "D0") for x in _bits(conn.get(p, []))]
            a1 = [x for p in ("A1", "B1", "C1", "D1") for x in _bits(conn.get(p, []))]
            cin = _bits(conn.get("CIN", []))
            for b in _bits(conn.get("S0", [])):
                drivers[b] = ("ccu_s", a0, cin)
            for b in _bits(conn.get("S1", [])):
                drivers[b] = ("ccu_s", a0 + a1, cin)
            for b in _bits(conn.get("COUT", [])):
                drivers[b] = ("ccu_c", a0 + a1, cin)
        elif t == "TRELLIS_DPR16X4":
            for b in _bits(conn.get("DO", [])):
                drivers[b] = ("lutram", _bits(conn.get("RAD", [])))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 200000))

    def arr(b):
        if b in arrival:
            return arrival[b]
        arrival[b] = (0.0, 0, b, None)            # a loop or an undriven net: cut here
        d = drivers.get(b)
        if d is None:
            return arrival[b]
        best = None
        if d[0] in ("LUT4", "PFUMX", "L6MUX21"):
            cell = DELAYS["lut"] if d[0] == "LUT4" else DELAYS["mux"]
            lvl = 1 if d[0] == "LUT4" else 0
            for x in d[1]:
                a = arr(x)
                cand = (a[0] + net_delay(x) + cell, a[1] + lvl, a[2], x)
                best = cand if best is None or cand[0] > best[0] else best
        elif d[0] in ("ccu_s", "ccu_c"):
            for x in d[1]:
                a = arr(x)
                cell = DELAYS["ccu_in"] + (DELAYS["ccu_sum"] if d[0] == "ccu_s" else 0)
                cand = (a[0] + net_delay(x) + cell, a[1] + 1, a[2], x)
                best = cand if best is None or cand[0] > best[0] else best
            for x in d[2]:                          # the carry: dedicated routing
                a = arr(x)
                cell = DELAYS["ccu_sum"] if d[0] == "ccu_s" else DELAYS["ccu_carry"]
                cand = (a[0] + cell, a[1], a[2], x)
                best = cand if best is None or cand[0] > best[0] else best
        elif d[0] == "lutram":
            for x in d[1]:
                a = arr(x)
                cand = (a[0] + net_delay(x) + DELAYS["lutram_q"], a[1] + 1, a[2], x)
                best = cand if best is None or cand[0] > best[0] else best
        if best is not None:
            arrival[b] = best
        return arrival[b]

    ends: dict[str, tuple] = {}
    for cname, c in cells.items():
        t, conn = c["type"], c["connections"]
        if t == "TRELLIS_FF":
            pins = [("DI", "D"), ("CE", "CE"), ("LSR", "LSR")]
            q = _bits(conn.get("Q", []))
            key = re.sub(r"\[\d+\]$", "", name_of.get(q[0], cname)) if q else cname
        elif t == "DP16KD":
            pins = [(p, p) for p in conn if p.startswith(("DI", "AD", "WE", "CE"))]
            key = cname
        elif t == "TRELLIS_DPR16X4":
            pins = [("DI", "DI"), ("WAD", "WAD"), ("WRE", "WRE")]
            key = cname
        else:
            continue
        for pin, tag in pins:
            for b in _bits(conn.get(pin, [])):
                a = arr(b)
                total = a[0] + net_delay(b) + DELAYS["setup"]
                if key not in ends or total > ends[key][0]:
                    ends[key] = (total, a[1], tag, b)

    rows = []
    for key, (total, lvl, tag, b) in ends.items():
        srcs, x, seen = [], b, set()
        while x is not None and x not in seen:
            seen.add(x)
            s = src_of.get(x)
            if s and (not srcs or srcs[-1] != s):
                srcs.append(s)
            x = arrival.get(x, (0, 0, None, None))[3]
        start = name_of.get(arrival.get(b, (0, 0, b, None))[2], "?")
        rows.append((total, lvl, f"{key} ({tag})", re.sub(r"\[\d+\]$", "", start), srcs[::-1]))
    rows.sort(key=lambda r: -r[0])
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m rnic.fpga.cones", description=__doc__.split("\n\n")[0])
    ap.add_argument("netlist", type=Path, help="yosys JSON netlist (top.json in the synth work folder)")
    ap.add_argument("--top", type=int, default=30, help="rows to print (default 30)")
    ap.add_argument("--period", type=float, default=6.4, help="clock period in ns (default 6.4: 156.25 MHz)")
    ap.add_argument("--grep", default=None, help="only endpoints whose name matches this regular expression")
    args = ap.parse_args(argv)
    rows = cones(json.loads(args.netlist.read_text()))
    failing = [r for r in rows if r[0] > args.period]
    print(f"{len(rows)} endpoint registers, {len(failing)} over {args.period} ns (estimate; "
          f"worst {rows[0][0]:.1f} ns)" if rows else "no endpoints")
    if args.grep:
        rows = [r for r in rows if re.search(args.grep, r[2])]
    print(f"{'ns':>5} {'LUTs':>4}  endpoint  <-  startpoint   [source lines, start to end]")
    for total, lvl, end, start, srcs in rows[:args.top]:
        print(f"{total:5.1f} {lvl:4d}  {end}  <-  {start}   [{' > '.join(srcs[-8:])}]")


if __name__ == "__main__":
    main()
