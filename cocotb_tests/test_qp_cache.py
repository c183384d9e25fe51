"""cocotb tests of the QP context cache (``rnic.hdl.qp_cache``) against ``rnic.model.qpc.QpcCacheModel``.

The testbench (:class:`rnic.sim.qp_cache_tb.TB`: host memory with random latency and bus errors,
request source, response sink, the model beside) is shared with the benchmark
(``python -m rnic.sim.bench_qp_cache``). Every returned context, every control acknowledgement and
the table in host memory after the final FLUSH are compared with the model; counters are compared
exactly in the one-request-at-a-time tests and by invariants otherwise.

The pytest functions at the bottom build one Verilator model per cache configuration and run all
tests of this module on it. Seeds: ``RNIC_SEED``; printed by the runner and by every test.
"""

from __future__ import annotations

import collections
import os
import random
from pathlib import Path

import cocotb

from rnic.model.config import RnicConfig
from rnic.model.qpc import RECORD_BYTES, CtrlOp, Op, QpContext, Status
from rnic.sim.qp_cache_tb import TB, run_qp_cache


def _scale():
    return float(os.environ.get("QPC_SCALE", "1"))


# ---------------------------------------------------------------------------------------------------
@cocotb.test()
async def test_serial_exact(dut):
    """One request at a time: responses, acks, counters and the flushed table all exactly as the model."""
    tb = TB(dut, table_size=512, latency=(1, 40))
    await tb.reset()
    rng, cfg = tb.rng, tb.cfg
    hot = rng.sample(range(512), cfg.entries + cfg.entries // 2)
    n = int(400 * _scale())
    for i in range(n):
        r = rng.random()
        if r < 0.03:
            q = tb.pick_qpn(hot, 0.7, 512, bad_p=0.1)
            await tb.ctrl(CtrlOp.MODIFY, q, rng.randbytes(RECORD_BYTES))
        elif r < 0.06:
            await tb.ctrl(CtrlOp.INVALIDATE, tb.pick_qpn(hot, 0.8, 512, bad_p=0.1))
        elif r < 0.07:
            await tb.ctrl(CtrlOp.FLUSH)
        else:
            op, arg = tb.random_op()
            await tb.request(op, tb.pick_qpn(hot, 0.8, 512, bad_p=0.03), arg)
        tb.check_counters(exact=True)
    await tb.final_flush_and_compare()
    tb.check_counters(exact=True)


@cocotb.test()
async def test_hit_latency_and_hit_under_miss(dut):
    """Hits answer 2 clocks after acceptance at 1/clock, and keep doing so while a 300-clock miss is outstanding,
    the hit right behind the miss included."""
    tb = TB(dut, table_size=1024, latency=(1, 1))
    await tb.reset()
    cfg = tb.cfg
    warm = list(range(cfg.entries))          # qpn i -> set i % sets: fills the cache exactly
    for q in warm:
        await tb.issue(Op.LOOKUP, q)
    await tb.drain()
    assert tb.counters()["misses"] == cfg.entries
    tb.latencies.clear()
    for q in warm * 4:
        await tb.issue(Op.LOOKUP, q)
    await tb.drain()
    lats = [b - a for _, a, b in tb.latencies]
    assert set(lats) == {2}, f"hit latencies {collections.Counter(lats)}"
    first, last = min(a for _, a, _ in tb.latencies), max(b for _, _, b in tb.latencies)
    assert last - first + 1 - 2 == len(lats), f"{len(lats)} hits took {last - first + 1} clocks"

    # one miss with a 300-clock memory, then hits to other QPs: they all overtake it
    tb.mem.latency = (300, 300)
    tb.latencies.clear()
    tb.order.clear()
    miss_tag = await tb.issue(Op.ADD_PSN, 1000, 5)
    still = [q for q in warm if tb.model.cached(q)]         # all but the miss's victim (hidden meanwhile)
    assert len(still) == len(warm) - 1
    hit_tags = [await tb.issue(Op.ADD_PSN if i % 3 else Op.LOOKUP, q, i) for i, q in enumerate(still * 3)]
    await tb.drain()
    assert tb.order[-1] == miss_tag and tb.order[:-1] == hit_tags, "hits did not overtake the miss"
    lat = {t: b - a for t, a, b in tb.latencies}
    # the victim is read through its own port: no bubble, every hit still takes 2 clocks
    lat_hist = collections.Counter(lat[t] for t in hit_tags)
    assert set(lat_hist) == {2}, lat_hist
    hits = [(a, b) for t, a, b in tb.latencies if t != miss_tag]
    first, last = min(a for a, _ in hits), max(b for _, b in hits)
    assert last - first + 1 - 2 == len(hit_tags), f"{len(hit_tags)} hits under the miss took {last - first + 1} clocks"
    assert lat[miss_tag] >= 300
    dut._log.info("miss latency with 300-clock memory: %d clocks", lat[miss_tag])
    await tb.final_flush_and_compare()
    tb.check_counters(exact=True)


@cocotb.test()
async def test_back_to_back_same_qp(dut):
    """Updates to one QP on consecutive clocks (read of the entry written at the same edge: forwarding),
    right behind its fill, and interleaved with another QP."""
    tb = TB(dut, table_size=64, latency=(1, 3))
    await tb.reset()
    for _ in range(3):
        for i in range(20):
            await tb.issue(Op.ADD_PSN, 5, i + 1)              # first one misses: the rest follow the fill
        for i in range(20):
            await tb.issue(Op.SET_SQ_CI if i % 2 else Op.ADD_PSN, 5 + 32 * (i % 2), i)
        await tb.drain()
        await tb.ctrl(CtrlOp.INVALIDATE, 5)
    await tb.final_flush_and_compare()
    tb.check_counters(exact=True)


@cocotb.test()
async def test_misses_overlap(dut):
    """With ``mshrs`` slots, misses to different QPs overlap: 4 x mshrs cold lookups and updates (half of
    them evicting dirty victims) with a 300-clock memory take about 4 memory latencies, not 4 x mshrs;
    one slot takes them one after another. Requests for a QP being fetched merge into its slot (several
    slots) or wait (one), requests for a victim being written back wait, and all answer what the model
    does."""
    tb = TB(dut, table_size=4096, latency=(1, 1))
    await tb.reset()
    cfg = tb.cfg
    n_slots = cfg.mshrs
    for q in range(cfg.entries):                                   # fill the cache with dirty entries
        await tb.issue(Op.ADD_PSN, q, 1)
    await tb.drain()
    tb.mem.latency = (300, 300)
    tb.latencies.clear()
    k = 4 * n_slots
    cold = [cfg.entries * (4 + i) + i % cfg.sets for i in range(k)]   # every set, none cached
    for i, q in enumerate(cold):
        await tb.issue(Op.SET_SQ_CI if i % 2 else Op.LOOKUP, q, i)
    await tb.drain()
    first = min(a for _, a, _ in tb.latencies)
    last = max(b for _, _, b in tb.latencies)
    took = last - first
    dut._log.info("%d misses with %d MSHRs, 300-clock memory: %d clocks", k, n_slots, took)
    rounds = -(-k // n_slots)
    assert took >= rounds * 300, f"{k} misses in {took} clocks: faster than {rounds} memory latencies"
    assert took <= rounds * 300 + 40 * k, f"{k} misses took {took} clocks: more than {rounds} memory latencies"
    # the same QP again right behind its miss, and the victim of a miss right behind it
    tb.mem.latency = (1, 60)
    for i in range(int(200 * _scale())):
        q = tb.rng.randrange(4096)
        await tb.issue(Op.ADD_PSN, q, i)
        await tb.issue(tb.rng.choice([Op.LOOKUP, Op.ADD_PSN]), q, i)
        if tb.rng.random() < 0.5:
            await tb.issue(Op.LOOKUP, tb.rng.choice(cold))
    await tb.drain()
    tb.check_counters(exact=False)
    merged = tb.counters()["merged"]
    dut._log.info("merged requests: %d", merged)
    assert (merged > 0) == (n_slots > 1), f"{merged} requests merged with {n_slots} MSHRs"
    await tb.final_flush_and_compare()


async def _random_stream(dut, *, table_size, n, locality, latency, backpressure, ctrl_p, read_err_n):
    tb = TB(dut, table_size=table_size, latency=latency)
    await tb.reset()
    rng, cfg = tb.rng, tb.cfg
    tb.req_valid_p, tb.resp_ready_p = (0.8, 0.8) if backpressure else (1.0, 1.0)
    tb.mem.set_backpressure(backpressure)
    err_qpns = rng.sample(range(table_size), read_err_n)
    for q in err_qpns:
        tb.table.read_errors[q] = rng.choice([2, 3])
    hot_n = lambda: rng.randint(max(1, cfg.entries // 2), 2 * cfg.entries)   # fits, or thrashes
    # hot QPNs are cacheable; the others span the table (above 2**qpn_bits: BAD_QPN requests)
    space = range(min(table_size, 1 << cfg.qpn_bits))
    hot = rng.sample(space, hot_n())
    for i in range(n):
        r = rng.random()
        if r < ctrl_p:
            which = rng.random()
            if which < 0.4:
                await tb.ctrl(CtrlOp.MODIFY, tb.pick_qpn(hot, 0.7, table_size), rng.randbytes(RECORD_BYTES))
            elif which < 0.8:
                await tb.ctrl(CtrlOp.INVALIDATE, tb.pick_qpn(hot, 0.7, table_size))
            else:
                await tb.ctrl(CtrlOp.FLUSH)
        else:
            op, arg = tb.random_op()
            q = rng.choice(err_qpns) if err_qpns and rng.random() < 0.01 else tb.pick_qpn(hot, locality, table_size)
            await tb.issue(op, q, arg)
        if rng.random() < 0.002:
            hot = rng.sample(space, hot_n())                  # working set moves
    await tb.drain()
    tb.check_counters(exact=False)
    await tb.final_flush_and_compare()
    c = tb.counters()
    dut._log.info("random stream: %d requests, counters %s, %d clocks", n, c, tb.cycle)


@cocotb.test()
async def test_dependent_and_prefetch(dut):
    """A requester that waits for each answer before its next request on the same QP (LOOKUP, then an
    update, as the responder does) while LOOKUPs for the same and other QPs come in between (the
    context prefetch), over a few QPs of one set with cold ones that evict them, random latency."""
    tb = TB(dut, table_size=256, latency=lambda: random.randint(1, 40))
    await tb.reset()
    rng, sets = tb.rng, tb.cfg.sets
    qps = [2 + sets * k for k in range(tb.cfg.ways + 2)]      # one set, more QPs than ways
    for i in range(int(300 * _scale())):
        q = rng.choice(qps)
        for _ in range(rng.randint(0, 2)):
            await tb.issue(Op.LOOKUP, rng.choice(qps))
        tag = await tb.issue(Op.LOOKUP, q)
        while tag in tb.expect or any(r[2] == tag for r in tb.req_q):
            if rng.random() < 0.3:
                await tb.issue(Op.LOOKUP, rng.choice(qps))      # a prefetch while it waits
            await tb.edge
        await tb.issue(rng.choice([Op.SET_EPSN, Op.ADD_PSN, Op.SET_SQ_CI]), q, i)
    await tb.drain()
    tb.check_counters(exact=False)
    await tb.final_flush_and_compare()


@cocotb.test()
async def test_random_stream(dut):
    """Pipelined random lookups/updates/modify/invalidate/flush, random latency 1..500 and AXI ready."""
    s = _scale()
    table = int(os.environ.get("QPC_TABLE", str(1 << 16)))
    locality = float(os.environ.get("QPC_LOCALITY", "0.85"))

    def lat():                      # mostly short, sometimes up to 500 clocks
        r = random.random()
        return random.randint(1, 8) if r < 0.7 else random.randint(9, 60) if r < 0.95 else random.randint(61, 500)

    await _random_stream(dut, table_size=table, n=int(1500 * s), locality=locality, latency=lat,
                         backpressure=True, ctrl_p=0.01, read_err_n=4)


@cocotb.test()
async def test_write_errors(dut):
    """SLVERR/DECERR on write-back: BUS_ERROR to the requester, the victim stays cached and dirty,
    FLUSH reports it, and after the fault clears a FLUSH writes everything back."""
    tb = TB(dut, table_size=256, latency=(1, 20))
    await tb.reset()
    rng = tb.rng
    bad = rng.sample(range(256), 6)
    for q in bad:
        tb.table.write_errors[q] = rng.choice([2, 3])
    for q in bad:
        await tb.request(Op.SET_PSN, q, rng.randrange(1 << 24))       # dirty, cached
    for i in range(int(300 * _scale())):
        await tb.request(rng.choice([Op.LOOKUP, Op.SET_SQ_CI]), rng.randrange(256), rng.randrange(1 << 16))
        tb.check_counters(exact=True)
        if i % 50 == 49:
            await tb.ctrl(CtrlOp.INVALIDATE, rng.choice(bad))
            await tb.ctrl(CtrlOp.MODIFY, rng.choice(bad), rng.randbytes(RECORD_BYTES))
    await tb.ctrl(CtrlOp.FLUSH)
    tb.check_counters(exact=True)
    tb.table.write_errors.clear()
    await tb.final_flush_and_compare()
    tb.check_counters(exact=True)


@cocotb.test()
async def test_bad_input(dut):
    """BAD_QPN for requests and control ops at or beyond table_size, read errors, no hang."""
    tb = TB(dut, table_size=100, latency=(1, 5))
    await tb.reset()
    tb.table.read_errors.update({7: 2, 8: 3})
    for q in (100, 101, (1 << 24) - 1, 7, 8, 5, 7, 99):
        await tb.issue(Op.SET_ERROR, q)
    await tb.drain()
    assert await tb.ctrl(CtrlOp.MODIFY, 100, bytes(RECORD_BYTES)) == Status.BAD_QPN
    assert await tb.ctrl(CtrlOp.INVALIDATE, 1 << 20) == Status.BAD_QPN
    assert await tb.ctrl(CtrlOp.MODIFY, 7, QpContext(qpn=7).pack()) == Status.OK
    tb.table.read_errors.clear()
    await tb.request(Op.LOOKUP, 7)
    await tb.final_flush_and_compare()
    tb.check_counters(exact=True)


# ---- pytest entry ---------------------------------------------------------------------------------
try:
    import pytest
except ImportError:       # inside the simulator
    pytest = None

if pytest is not None:
    # qpc-e8-fa also holds only QPNs below 2**10 (Rnic derives the tag width from max_qps)
    # (one MSHR unless the key says -mN: the engine's default is four)
    CONFIGS = {"qpc-e16-w4": RnicConfig().replace(qpc={"entries": 16, "ways": 4, "mshrs": 1}),
               "qpc-e8-fa": RnicConfig().replace(qpc={"entries": 8, "ways": 8, "qpn_bits": 10, "mshrs": 1}),
               "qpc-e16-w4-m4": RnicConfig().replace(qpc={"entries": 16, "ways": 4, "mshrs": 4})}

    def run_config(key, env=None, testcase=None, seed=None):
        """Build (cached) and run this module's cocotb tests on configuration ``key``."""
        return run_qp_cache(CONFIGS[key], "test_qp_cache", env, testcase, seed, test_dir=Path(__file__).parent)

    def _run(key, env=None, testcase=None):
        tests, fails = run_config(key, env, testcase)
        assert fails == 0, f"{fails} of {tests} cocotb tests failed"

    @pytest.mark.parametrize("key", ["qpc-e16-w4", "qpc-e8-fa", "qpc-e16-w4-m4"])
    def test_qp_cache(key):
        _run(key, {"QPC_SCALE": "1" if key == "qpc-e16-w4" else "0.5"})

    CONFIGS.update({"qpc-e16-w1": RnicConfig().replace(qpc={"entries": 16, "ways": 1, "mshrs": 1}),
                    "qpc-e64-w8": RnicConfig().replace(qpc={"entries": 64, "ways": 8, "mshrs": 1}),
                    "qpc-e8-fa-m8": RnicConfig().replace(qpc={"entries": 8, "ways": 8, "qpn_bits": 10, "mshrs": 8}),
                    "qpc-e16-w1-m2": RnicConfig().replace(qpc={"entries": 16, "ways": 1, "mshrs": 2})})

    @pytest.mark.slow
    @pytest.mark.parametrize("key", ["qpc-e8-fa-m8", "qpc-e16-w1-m2"])
    def test_qp_cache_more(key):
        """Every test on more MSHR geometries: as many slots as ways (every way of a set held), and
        direct mapped (a set's one way held)."""
        _run(key, {"QPC_SCALE": "2"})

    @pytest.mark.slow
    @pytest.mark.parametrize("key", ["qpc-e16-w4", "qpc-e16-w1", "qpc-e64-w8", "qpc-e16-w4-m4"])
    def test_qp_cache_long(key):
        """The long run: 30 000 requests over 2^16 QPs (about 2 minutes per configuration once built)."""
        _run(key, {"QPC_SCALE": "20"}, testcase="test_random_stream")
