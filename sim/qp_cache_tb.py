"""The testbench of the QP context cache (:class:`rnic.hdl.qp_cache.QpCache`) against
:class:`rnic.model.qpc.QpcCacheModel`, shared by ``cocotb_tests/test_qp_cache.py`` and the benchmark
:mod:`rnic.sim.bench_qp_cache` (the ``bench`` cocotb test of this module).

Host memory is cocotbext-axi's ``AxiRam`` behind a thin wrapper (:class:`HostRam`) that adds a random
latency per burst and answers SLVERR/DECERR for chosen records. :class:`TB` queues requests on DUT
and model alike and checks every response, control acknowledgement and counter against the model.
:func:`run_qp_cache` builds one Verilator model per cache configuration and runs a cocotb module on it.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import random
from pathlib import Path

import cocotb
from cocotb.triggers import RisingEdge

from ..model.config import RnicConfig
from ..model.qpc import (CACHED_BYTES, COUNTER_NAMES, COUNTER_WIDTH, RECORD_BYTES, BusError, CtrlOp, HostTable, Op,
                         QpcCacheConfig, QpcCacheModel, QpContext, QpState, Status)
from . import tb as _tb

__all__ = ["cfg_from_env", "Packer", "HostRam", "TB", "run_qp_cache", "bench"]

_MASK32 = (1 << COUNTER_WIDTH) - 1


def cfg_from_env() -> QpcCacheConfig:
    """The cache under test: the ``qpc`` of ``$RNIC_CONFIG`` (written by :func:`run_qp_cache`)."""
    return RnicConfig.from_env().qpc


def _fields(layout):
    """(name, offset, width) of a StructLayout built by rnic.hdl.qp_cache (bit 0 = first field)."""
    from amaranth import Shape
    return [(name, f.offset, Shape.cast(f.shape).width) for name, f in layout]


class Packer:
    """Packs / unpacks the stream payloads with the RTL's own layouts, so they cannot drift."""

    def __init__(self, cfg):
        from ..hdl import qp_cache as h
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
    """AxiRam with random per-burst latency and injectable SLVERR/DECERR per record. A burst is answered
    ``latency`` clocks after its address (AR or AW) arrived, counted by ``now()``; bursts overlap, and
    each channel keeps its order."""

    def __init__(self, dut, table: HostTable, base: int, rng: random.Random, latency=(1, 1), *, now):
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

        def due(arrival):
            lat = self.latency() if callable(self.latency) else self.rng.randint(*self.latency)
            return arrival + lat - 1
        for ch in (rd.ar_channel, wr.aw_channel):
            _tb.delay_channel(dut.clk, ch, now, due)
        wr.w_channel.queue_occupancy_limit = 64      # write data is taken while earlier bursts wait

        async def _read(address, length):
            qpn = self._qpn(address)
            if qpn in self.table.read_errors:
                self._r_code = self.table.read_errors[qpn]
                raise BusError(self._r_code)
            return await orig_read(address, length)

        async def _write(address, data):
            qpn = self._qpn(address)
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
            _tb.set_pause(ch, 0.3 if on else 0.0, self.rng)

    def table_bytes(self) -> bytes:
        return self.ram.read(0, self.table.table_size * RECORD_BYTES)


class TB:
    def __init__(self, dut, *, table_size=1024, seed=None, latency=(1, 1), init_table=None):
        self.dut = dut
        self.cfg = cfg_from_env()
        self.seed = _tb.seed(dut) if seed is None else seed
        self.rng = random.Random(self.seed)
        self.pk = Packer(self.cfg)
        self.edge = RisingEdge(dut.clk)
        _tb.start_clock(dut)
        if init_table is None:
            init_table = self.random_table(table_size)
        self.table = HostTable(table_size, init=init_table)
        self.model = QpcCacheModel(self.cfg, self.table)
        self.base = self.rng.randrange(1, 1 << 20) << 32
        self.cycle = 0
        self.mem = HostRam(dut, self.table, self.base, self.rng, latency, now=lambda: self.cycle)
        self.req = _tb.StreamSource(dut, "req", rng=self.rng, on_transfer=self._accepted,
                                   encode=lambda r: self.pk.pack(self.pk.req, op=r[0], qpn=r[1], tag=r[2], arg=r[3]))
        self.resp = _tb.StreamSink(dut, "resp", rng=self.rng, decode=lambda v: self.pk.unpack(self.pk.resp, v),
                                  on_transfer=self._check_resp)
        self.req_q = self.req.queue             # (op, qpn, tag, arg)
        self.expect = {}                        # tag -> (status, record bytes, qpn)
        self.accept_cycle = {}
        self.latencies = []                     # (tag, accept cycle, response cycle)
        self.responses = 0
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

    @property
    def req_valid_p(self) -> float:
        """Probability that an idle request source offers its next request at a clock."""
        return self.req.valid_p

    @req_valid_p.setter
    def req_valid_p(self, p):
        self.req.valid_p = p

    @property
    def resp_ready_p(self) -> float:
        """Probability that the response sink is ready at a clock."""
        return self.resp.ready_p

    @resp_ready_p.setter
    def resp_ready_p(self, p):
        self.resp.ready_p = p

    async def reset(self):
        await _tb.reset(self.dut, 4, low=("req__valid", "resp__ready", "ctrl__valid", "ack__ready"))
        cocotb.start_soon(self._clock_counter())
        self.req.start()
        self.resp.start()

    async def _clock_counter(self):
        while True:
            await self.edge
            self.cycle += 1

    def _accepted(self, req):
        self.accept_cycle[req[2]] = self.cycle

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
        """``exact``: every counter as the model's, except that a request merged into a miss (``merged``,
        which the one-request-at-a-time model never counts) is a hit or a miss there."""
        got = self.counters()
        want = self.model.counters
        assert got["merged"] == 0 or self.cfg.mshrs > 1, got
        if exact:
            split = ("hits", "misses", "merged")
            assert {k: v for k, v in got.items() if k not in split} == \
                {k: v for k, v in want.items() if k not in split}, f"counters {got} != model {want}"
            assert got["hits"] + got["misses"] + got["merged"] == want["hits"] + want["misses"], \
                f"counters {got} != model {want}"
            assert got["merged"] or (got["hits"], got["misses"]) == (want["hits"], want["misses"]), \
                f"counters {got} != model {want}"
        else:
            assert got["lookups"] == want["lookups"], (got, want)
            assert got["errors"] == want["errors"], (got, want)
            assert got["hits"] + got["misses"] + got["merged"] <= got["lookups"], got

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


@cocotb.test()
async def bench(dut):
    """The measurements of :mod:`rnic.sim.bench_qp_cache`, written to ``QPC_BENCH``."""
    tb = TB(dut, table_size=1 << 16, latency=(1, 1))
    await tb.reset()
    cfg, rng = tb.cfg, tb.rng
    out = {"config": {"entries": cfg.entries, "ways": cfg.ways, "mshrs": cfg.mshrs}}
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
    # 0, 50 and 90 % hits, 200-clock memory. The hits go to hot QPs, one per set, always the most
    # recently used of its set when a miss comes; the misses to QPs never seen before, every other one an
    # update, so half the victims are dirty (written back) once the cold QPs fill the cache.
    tb.mem.latency = (200, 200)
    hot = warm[: cfg.sets] if cfg.ways > 1 else []
    for pct in (0, 50, 90) if hot else (0,):
        reqs, misses = [], 0
        for i in range(400):
            if i % 10 < pct // 10:
                reqs.append((Op.ADD_PSN if i % 2 else Op.LOOKUP, hot[i % len(hot)]))
            else:
                reqs.append((Op.SET_SQ_CI if misses % 2 else Op.LOOKUP, next(cold)))
                misses += 1
        c0 = tb.counters()
        thr, lats = await run(reqs)
        c1 = tb.counters()
        out[f"hit{pct}_mem200_lookups_per_clock"] = thr
        out[f"hit{pct}_mem200_hit_ratio"] = (c1["hits"] - c0["hits"]) / len(reqs)
    Path(os.environ["QPC_BENCH"]).write_text(json.dumps(out, indent=1))


def run_qp_cache(config: RnicConfig, test_module: str, env=None, testcase=None, seed=None,
                 test_dir: Path | None = None):
    """Build (cached, in the folder ``qpc-<config.key()>``) a :class:`~rnic.hdl.qp_cache.QpCache` of
    ``config.qpc`` and run the cocotb tests of ``test_module`` on it, with ``config`` in
    ``$RNIC_CONFIG``; returns ``(tests, failures)``."""
    from ..hdl.qp_cache import QpCache
    from .toolchain import build, run, seed_from_env
    b = build(lambda: QpCache(config.qpc), "qp_cache", f"qpc-{config.key()}")
    env = {**config.env(), **(env or {})}
    return run(b, test_module, seed=seed_from_env() if seed is None else seed, testcase=testcase,
               extra_env=env, test_dir=test_dir)
