"""cocotb tests of the QP context cache (``rnic.hdl.qp_cache``) against ``rnic.model.qpc.QpcCacheModel``.

Host memory is cocotbext-axi's ``AxiRam`` behind a thin wrapper (:class:`HostRam`) that adds a random
latency per burst and answers SLVERR/DECERR for chosen records. Every returned context, every control
acknowledgement and the table in host memory after the final FLUSH are compared with the model;
counters are compared exactly in the one-request-at-a-time tests and by invariants otherwise.

The pytest functions at the bottom build one Verilator model per cache configuration and run all
tests of this module on it. Seeds: ``RNIC_SEED``; printed by the runner. ``QPC_BENCH=<json path>``
enables the benchmark tests (``python -m rnic.sim.bench_qp_cache``).
"""

from __future__ import annotations

import collections
import json
import logging
import os
import random
from pathlib import Path

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge

from rnic.model.config import RnicConfig
from rnic.model.qpc import (CACHED_BYTES, COUNTER_NAMES, COUNTER_WIDTH, RECORD_BYTES, BusError, CtrlOp, HostTable, Op,
                            QpcCacheConfig, QpcCacheModel, QpContext, QpState, Status)
from rnic.sim.harness import set_pause

BENCH = os.environ.get("QPC_BENCH")
_MASK32 = (1 << COUNTER_WIDTH) - 1


def _cfg_from_env() -> QpcCacheConfig:
    """The cache under test: the ``qpc`` of ``$RNIC_CONFIG`` (set by the pytest side below)."""
    return RnicConfig.from_env().qpc


def _fields(layout):
    """(name, offset, width) of a StructLayout built by rnic.hdl.qp_cache (bit 0 = first field)."""
    from amaranth import Shape
    return [(name, f.offset, Shape.cast(f.shape).width) for name, f in layout]


class Packer:
    """Packs / unpacks the stream payloads with the RTL's own layouts, so they cannot drift."""

    def __init__(self, cfg):
        from rnic.hdl import qp_cache as h
        self.req = _fields(h.request_layout(cfg))
        self.resp = _fields(h.response_layout(cfg))
        self.ctrl = _fields(h.ctrl_layout)
        self.ack = _fields(h.ack_layout)

    @staticmethod
    def pack(fields, **values):
        out = 0
        for name, off, width in fields:
            out |= (int(values.get(name, 0)) & ((1 << width) - 1)) << off
        return out

    @staticmethod
    def unpack(fields, value):
        return {name: value >> off & ((1 << width) - 1) for name, off, width in fields}


class HostRam:
    """AxiRam with random per-burst latency and injectable SLVERR/DECERR per record."""

    def __init__(self, dut, table: HostTable, base: int, rng: random.Random, latency=(1, 1)):
        from cocotbext.axi import AxiBus, AxiRam
        self.dut, self.table, self.base, self.rng = dut, table, base, rng
        self.latency = latency        # (lo, hi) clocks, or a callable returning clocks
        size = 1 << max(12, (table.table_size * RECORD_BYTES - 1).bit_length())
        logging.getLogger(f"cocotb.{dut._name}.m_axi").setLevel(logging.WARNING)
        self.ram = AxiRam(AxiBus.from_prefix(dut, "m_axi", bus_separator="__"), dut.clk, dut.rst, size=size)
        self.ram.write(0, bytes(table.mem))
        rd, wr = self.ram.read_if, self.ram.write_if
        self._r_code = 0
        self._b_code = 0
        orig_read, orig_write = rd._read, wr._write
        orig_rsend, orig_bsend = rd.r_channel.send, wr.b_channel.send

        async def _delay():
            lat = self.latency() if callable(self.latency) else self.rng.randint(*self.latency)
            if lat > 1:
                await ClockCycles(dut.clk, lat - 1)

        async def _read(address, length):
            qpn = self._qpn(address)
            if address % RECORD_BYTES == 0:
                await _delay()
            if qpn in self.table.read_errors:
                self._r_code = self.table.read_errors[qpn]
                raise BusError(self._r_code)
            return await orig_read(address, length)

        async def _write(address, data):
            qpn = self._qpn(address)
            if address % RECORD_BYTES == 0:
                await _delay()
            if qpn in self.table.write_errors:
                self._b_code = self.table.write_errors[qpn]
                raise BusError(self._b_code)
            return await orig_write(address, data)

        async def _rsend(r):
            if self._r_code:
                r.rresp, self._r_code = self._r_code, 0
            await orig_rsend(r)

        async def _bsend(b):
            if self._b_code:
                b.bresp, self._b_code = self._b_code, 0
            await orig_bsend(b)

        rd._read, wr._write, rd.r_channel.send, wr.b_channel.send = _read, _write, _rsend, _bsend

    def _qpn(self, address):
        return (address - self.base) // RECORD_BYTES

    def set_backpressure(self, on: bool):
        """Random ready on AR/AW/W and random valid gaps on R/B."""
        rd, wr = self.ram.read_if, self.ram.write_if
        chans = (rd.ar_channel, rd.r_channel, wr.aw_channel, wr.w_channel, wr.b_channel)
        for ch in chans:
            set_pause(ch, 0.3 if on else 0.0, self.rng)

    def table_bytes(self) -> bytes:
        return self.ram.read(0, self.table.table_size * RECORD_BYTES)


class TB:
    def __init__(self, dut, *, table_size=1024, seed=None, latency=(1, 1), init_table=None):
        self.dut = dut
        self.cfg = _cfg_from_env()
        self.seed = int(os.environ.get("RNIC_SEED", "1")) if seed is None else seed
        self.rng = random.Random(self.seed)
        self.pk = Packer(self.cfg)
        self.edge = RisingEdge(dut.clk)
        cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
        if init_table is None:
            init_table = self.random_table(table_size)
        self.table = HostTable(table_size, init=init_table)
        self.model = QpcCacheModel(self.cfg, self.table)
        self.base = self.rng.randrange(1, 1 << 20) << 32
        self.mem = HostRam(dut, self.table, self.base, self.rng, latency)
        self.cycle = 0
        self.req_q = collections.deque()        # (op, qpn, tag, arg)
        self.expect = {}                        # tag -> (status, record bytes, qpn)
        self.accept_cycle = {}
        self.latencies = []                     # (tag, accept cycle, response cycle)
        self.responses = 0
        self.req_valid_p = 1.0
        self.resp_ready_p = 1.0
        self.order = []                         # tags in response order
        self.free_tags = collections.deque(range(1 << self.cfg.tag_width))
        dut.qpc_base.value = self.base
        dut.table_size.value = table_size

    def random_table(self, n):
        rng = self.rng
        raw = bytearray(rng.randbytes(n * RECORD_BYTES))
        for q in range(0, n, max(1, n // 64)):      # a few well-formed records among the noise
            ctx = QpContext(qpn=q, state=QpState.RTS, dest_qpn=rng.randrange(1 << 24), next_psn=rng.randrange(1 << 24),
                            dst_gid=rng.randrange(1 << 128), sq_base=rng.randrange(1 << 64))
            raw[q * RECORD_BYTES:(q + 1) * RECORD_BYTES] = ctx.pack()
        return bytes(raw)

    async def reset(self):
        d = self.dut
        d.rst.value = 1
        d.req__valid.value = 0
        d.resp__ready.value = 0
        d.ctrl__valid.value = 0
        d.ack__ready.value = 0
        await ClockCycles(d.clk, 4)
        d.rst.value = 0
        await self.edge
        cocotb.start_soon(self._clock_counter())
        cocotb.start_soon(self._req_driver())
        cocotb.start_soon(self._resp_monitor())

    async def _clock_counter(self):
        while True:
            await self.edge
            self.cycle += 1

    async def _req_driver(self):
        d, valid = self.dut, False
        while True:
            await self.edge
            if valid and d.req__ready.value:
                op, qpn, tag, arg = self.req_q.popleft()
                self.accept_cycle[tag] = self.cycle
                valid = False
            if not valid and self.req_q and (self.req_valid_p >= 1 or self.rng.random() < self.req_valid_p):
                op, qpn, tag, arg = self.req_q[0]
                d.req__payload.value = self.pk.pack(self.pk.req, op=op, qpn=qpn, tag=tag, arg=arg)
                valid = True
            d.req__valid.value = int(valid)

    async def _resp_monitor(self):
        d, ready = self.dut, False
        while True:
            await self.edge
            if ready and d.resp__valid.value:
                r = self.pk.unpack(self.pk.resp, d.resp__payload.value.to_unsigned())
                self._check_resp(r)
            ready = self.resp_ready_p >= 1 or self.rng.random() < self.resp_ready_p
            d.resp__ready.value = int(ready)

    def _check_resp(self, r):
        tag = r["tag"]
        assert tag in self.expect, f"response with unknown tag {tag}: {r}"
        status, record, qpn = self.expect.pop(tag)
        self.latencies.append((tag, self.accept_cycle.get(tag), self.cycle))
        self.order.append(tag)
        assert r["qpn"] == qpn, f"tag {tag}: qpn {r['qpn']:#x} != {qpn:#x}"
        assert r["status"] == status, f"tag {tag} qpn {qpn:#x}: status {Status(r['status']).name} != {status.name}"
        if status == Status.OK:
            got = r["record"].to_bytes(CACHED_BYTES, "little")
            if got != record:
                a, b = (QpContext.unpack(x.ljust(RECORD_BYTES, b"\0")) for x in (got, record))
                diff = {k: (getattr(a, k), getattr(b, k)) for k in vars(a) if getattr(a, k) != getattr(b, k)}
                raise AssertionError(f"tag {tag} qpn {qpn:#x}: record differs (got, want): {diff}")
        self.responses += 1
        self.free_tags.append(tag)

    # ---- stimulus ---------------------------------------------------------------------------
    async def issue(self, op, qpn, arg=0):
        """Queue one request; the model answers it now (the cache is coherent: issue order)."""
        while not self.free_tags:
            await self.edge
        tag = self.free_tags.popleft()
        status, record = self.model.request(op, qpn, arg)
        self.expect[tag] = (status, record, qpn)
        self.req_q.append((int(op), qpn, tag, arg))
        return tag

    async def drain(self, timeout=200_000):
        start = self.cycle
        while self.req_q or self.expect:
            await self.edge
            assert self.cycle - start < timeout, f"hang: {len(self.req_q)} queued, {len(self.expect)} outstanding"

    async def request(self, op, qpn, arg=0):
        await self.issue(op, qpn, arg)
        await self.drain()

    async def ctrl(self, op, qpn=0, record=b"", timeout=200_000):
        """Run one control operation on DUT and model (requests queued before it complete first)."""
        await self.drain(timeout)
        if op == CtrlOp.MODIFY:
            want = self.model.modify(qpn, record)
        elif op == CtrlOp.INVALIDATE:
            want = self.model.invalidate(qpn)
        else:
            want = self.model.flush()
        d = self.dut
        d.ctrl__payload.value = self.pk.pack(self.pk.ctrl, op=op, qpn=qpn,
                                             record=int.from_bytes(record or bytes(RECORD_BYTES), "little"))
        d.ctrl__valid.value = 1
        d.ack__ready.value = 1
        start = self.cycle
        while True:
            await self.edge
            if d.ack__valid.value:
                assert d.ctrl__ready.value, "ack without ctrl transfer"
                got = self.pk.unpack(self.pk.ack, d.ack__payload.value.to_unsigned())["status"]
                break
            assert self.cycle - start < timeout, f"hang in control op {CtrlOp(op).name}"
        d.ctrl__valid.value = 0
        d.ack__ready.value = 0
        await self.edge             # let the counters settle
        assert got == want, f"{CtrlOp(op).name} qpn {qpn:#x}: ack {Status(got).name} != {Status(want).name}"
        return got

    def counters(self):
        v = self.dut.counters.value.to_unsigned()
        return {n: v >> (COUNTER_WIDTH * i) & _MASK32 for i, n in enumerate(COUNTER_NAMES)}

    def check_counters(self, exact: bool):
        got = self.counters()
        want = self.model.counters
        if exact:
            assert got == want, f"counters {got} != model {want}"
        else:
            assert got["lookups"] == want["lookups"], (got, want)
            assert got["errors"] == want["errors"], (got, want)
            assert (got["hits"] + got["misses"] + got["errors"]) & _MASK32 >= 0
            assert got["hits"] + got["misses"] <= got["lookups"], got

    async def final_flush_and_compare(self):
        await self.ctrl(CtrlOp.FLUSH)
        got = self.mem.table_bytes()
        want = bytes(self.table.mem)
        if got != want:
            bad = [q for q in range(self.table.table_size)
                   if got[q * RECORD_BYTES:(q + 1) * RECORD_BYTES] != want[q * RECORD_BYTES:(q + 1) * RECORD_BYTES]]
            raise AssertionError(f"host table differs from the model in {len(bad)} records, first {bad[:8]}")

    def pick_qpn(self, hot, locality, table_size, bad_p=0.01):
        r = self.rng.random()
        if r < bad_p:
            return self.rng.randrange(table_size, 1 << 24)
        if r < locality:
            return self.rng.choice(hot)
        return self.rng.randrange(table_size)

    def random_op(self):
        op = self.rng.choice([Op.LOOKUP] * 6 + list(Op)[1:])
        return op, self.rng.randrange(1 << 24)


def _scale():
    return float(os.environ.get("QPC_SCALE", "1"))


# ---------------------------------------------------------------------------------------------------
@cocotb.test(skip=bool(BENCH))
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


@cocotb.test(skip=bool(BENCH))
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


@cocotb.test(skip=bool(BENCH))
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


@cocotb.test(skip=bool(BENCH))
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


@cocotb.test(skip=bool(BENCH))
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


@cocotb.test(skip=bool(BENCH))
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


# ---- benchmarks (QPC_BENCH=<json>) --------------------------------------------------------------
@cocotb.test(skip=not BENCH)
async def bench(dut):
    tb = TB(dut, table_size=1 << 16, latency=(1, 1))
    await tb.reset()
    cfg, rng = tb.cfg, tb.rng
    out = {"config": {"entries": cfg.entries, "ways": cfg.ways}}
    warm = list(range(cfg.entries))
    for q in warm:
        await tb.issue(Op.LOOKUP, q)
    await tb.drain()

    async def run(reqs):
        tb.latencies.clear()
        for op, q in reqs:
            await tb.issue(op, q)
        await tb.drain()
        first = min(a for _, a, _ in tb.latencies)
        last = max(b for _, _, b in tb.latencies)
        return len(reqs) / (last - first + 1 - 2), [b - a for _, a, b in tb.latencies]

    n = 2000
    thr, lats = await run([(Op.LOOKUP, rng.choice(warm)) for _ in range(n)])
    out["hit100_lookups_per_clock"] = thr
    out["hit_latency_clocks"] = sorted(set(lats))
    # miss latency: one isolated miss, memory latency 1 and 200
    cold = iter(range(cfg.entries * 64, 1 << 16, 7))
    for mem_lat in (1, 200):
        tb.mem.latency = (mem_lat, mem_lat)
        _, lats = await run([(Op.LOOKUP, next(cold))])
        out[f"miss_latency_clocks_mem{mem_lat}"] = lats[0]
    # 50 % hits, 200-clock memory (dirty victims half the time: updates)
    # hot QPs: one per set, always the most recently used of its set when the next miss comes
    tb.mem.latency = (200, 200)
    hot = warm[: cfg.sets] if cfg.ways > 1 else []
    reqs = []
    for i in range(400):
        reqs.append((Op.LOOKUP, hot[i // 2 % len(hot)] if (i % 2 and hot) else next(cold)))
    c0 = tb.counters()
    thr, lats = await run(reqs)
    c1 = tb.counters()
    out["hit50_mem200_lookups_per_clock"] = thr
    out["hit50_mem200_hit_ratio"] = (c1["hits"] - c0["hits"]) / len(reqs)
    Path(BENCH).write_text(json.dumps(out, indent=1))


# ---- pytest entry ---------------------------------------------------------------------------------
try:
    import pytest
except ImportError:       # inside the simulator
    pytest = None

if pytest is not None:
    # qpc-e8-fa also holds only QPNs below 2**10 (Rnic derives the tag width from max_qps)
    CONFIGS = {"qpc-e16-w4": RnicConfig().replace(qpc={"entries": 16, "ways": 4}),
               "qpc-e8-fa": RnicConfig().replace(qpc={"entries": 8, "ways": 8, "qpn_bits": 10})}

    def build_config(key):
        """``(config, build)`` of the cache of ``CONFIGS[key]``, built in ``qpc-<config.key()>``."""
        from rnic.hdl.qp_cache import QpCache
        from rnic.sim.toolchain import build
        config = CONFIGS[key]
        return config, build(lambda: QpCache(config.qpc), "qp_cache", f"qpc-{config.key()}")

    def run_config(key, env=None, testcase=None, seed=None):
        """Build (cached) and run this module's cocotb tests on configuration ``key``."""
        from rnic.sim.toolchain import run, seed_from_env
        config, b = build_config(key)
        env = {**config.env(), **(env or {})}
        return run(b, "test_qp_cache", seed=seed_from_env() if seed is None else seed, testcase=testcase,
                   extra_env=env, test_dir=Path(__file__).parent)

    def _run(key, env=None, testcase=None):
        tests, fails = run_config(key, env, testcase)
        assert fails == 0, f"{fails} of {tests} cocotb tests failed"

    @pytest.mark.parametrize("key", ["qpc-e16-w4", "qpc-e8-fa"])
    def test_qp_cache(key):
        _run(key, {"QPC_SCALE": "1" if key == "qpc-e16-w4" else "0.5"})

    CONFIGS.update({"qpc-e16-w1": RnicConfig().replace(qpc={"entries": 16, "ways": 1}),
                    "qpc-e64-w8": RnicConfig().replace(qpc={"entries": 64, "ways": 8})})

    @pytest.mark.slow
    @pytest.mark.parametrize("key", ["qpc-e16-w4", "qpc-e16-w1", "qpc-e64-w8"])
    def test_qp_cache_long(key):
        """The long run: 30 000 requests over 2^16 QPs (about 2 minutes per configuration once built)."""
        _run(key, {"QPC_SCALE": "20"}, testcase="test_random_stream")
