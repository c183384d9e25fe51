# amaranth: UnusedElaboratable=no
"""cocotb tests of ``rnic.hdl.dma``: the payload reader and the AXI interconnect, on one test top.

:class:`DmaTestTop` puts the :class:`~rnic.hdl.dma.PayloadReader` on master 0 of a 3-master
:class:`~rnic.hdl.dma.AxiInterconnect`; masters 1 and 2 are top-level ports driven by cocotbext-axi
``AxiMaster`` s. Everything is ``data_width`` W bits wide (64 .. 512); the tests read W from the
DUT's ``m_axi__rdata`` and work in beats of B = W/8 bytes (the cocotbext-axi models take their
width from the bus). Host memory is cocotbext-axi's ``AxiRam`` behind :class:`HostMem`, which adds a
per-burst latency (pipelined: many bursts are in flight, data returns in order) and answers
SLVERR/DECERR for chosen 64-byte blocks.

Checked: every payload byte against memory (or the inline data), keep/last, one status per command
with ``error`` exactly when the beat-aligned read range of the command touches an error block, the
reader's ARs exactly :func:`rnic.model.engine.split_bursts` (hence never across 4 KiB), R never
stalled for the reader, IDs restored for the other masters, and the ``bw_cap`` window rule.
Measured and printed: payload throughput and the reader's latencies.

The pytest functions at the bottom build once per width (``dma``, ``dma-w512``, ...) and run every
test here. Seeds: ``RNIC_SEED``.
"""

from __future__ import annotations

import collections
import os
import random
import warnings
from pathlib import Path

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge, gather

from rnic.model.engine import split_bursts
from rnic.sim import tb as sim_tb

warnings.filterwarnings("ignore", category=DeprecationWarning)   # cocotbext-axi on cocotb 2

BASE = 0x7EAD_0000_0000_0000        # host addresses: all 64 address bits in use
MEM_SIZE = 1 << 22
READER_SPAN = 128 * 1024            # reader commands read [BASE, BASE + READER_SPAN)
S_BASE = {1: BASE + (1 << 20), 2: BASE + (2 << 20)}  # regions of masters s1, s2 (1 MiB each)
WINDOW = 1024
CMD_DEPTH = 32                      # the reader's cmd_depth (statuses owed) in the test top
READER_MAX_PAYLOAD, READER_FIFO_DEPTH = 4096, 512   # the test top's reader: the largest payload, a 512-beat queue
RID_SHIFT = 4                       # m_axi ID = Cat(master ID (4 bits), master index)


def _seed(dut, salt):
    return random.Random(sim_tb.seed(dut, None) * 1000 + salt)


def _pack_cmd(addr, length, inline, data):
    return addr | length << 64 | int(inline) << 77 | data << 78


class HostMem:
    """``AxiRam`` with a pipelined per-burst latency and injectable read errors.

    ``latency`` is (lo, hi) clocks or a callable: a burst's first beat is sent that many clocks
    after its AR is taken; bursts are answered in order, so a long one delays those behind it.
    ``err_blocks`` maps a 64-byte block index (address // 64) to the rresp of its beats (2, 3).
    """

    def __init__(self, tb, latency):
        from cocotbext.axi import AxiBus, AxiRam
        import logging
        dut = tb.dut
        self.tb, self.latency = tb, latency
        for name in ("m_axi", "s1", "s2"):
            logging.getLogger(f"cocotb.{dut._name}.{name}").setLevel(logging.WARNING)
        self.ram = AxiRam(AxiBus.from_prefix(dut, "m_axi", bus_separator="__"), dut.clk, dut.rst, size=MEM_SIZE)
        self.err_blocks = {}
        self._pending = collections.deque()
        rd = self.ram.read_if
        self._orig_recv = rd.ar_channel.recv
        orig_read, orig_rsend = rd._read, rd.r_channel.send
        self._code = 0

        async def recv():
            while not (self._pending and self._pending[0][0] <= tb.cycle):
                await tb.edge
            return self._pending.popleft()[1]

        async def _read(address, length):
            self._code = self.err_blocks.get(address // 64, 0)
            return await orig_read(address, length)

        async def _rsend(r):
            if self._code:
                r.rresp = self._code
            await orig_rsend(r)

        rd.ar_channel.recv, rd._read, rd.r_channel.send = recv, _read, _rsend

    def start(self):
        cocotb.start_soon(self._pump())

    async def _pump(self):
        while True:
            ar = await self._orig_recv()
            lat = self.latency() if callable(self.latency) else self.tb.rng.randint(*self.latency)
            self._pending.append((self.tb.cycle + max(lat, 1) - 1, ar))

    def set_backpressure(self, on, rng):
        rd = self.ram.read_if
        for ch in (rd.ar_channel, rd.r_channel, self.ram.write_if.aw_channel, self.ram.write_if.w_channel):
            sim_tb.set_pause(ch, 0.2 if on else 0.0, rng)

    def write(self, addr, data):
        self.ram.write(addr % MEM_SIZE, data)

    def read(self, addr, n):
        return self.ram.read(addr % MEM_SIZE, n)


class TB:
    def __init__(self, dut, salt, *, latency=(1, 1), masters=False):
        self.dut = dut
        self.W = len(dut.m_axi__rdata)           # data width of the bus and the payload stream
        self.B = self.W // 8                     # bytes per beat
        self.rng = _seed(dut, salt)
        dut._log.info("data width %d bits (%d bytes per beat)", self.W, self.B)
        self.edge = RisingEdge(dut.clk)
        self.cycle = 0
        sim_tb.start_clock(dut)
        self.mem = HostMem(self, latency)
        self.mem.write(BASE, self.rng.randbytes(READER_SPAN + 8192))
        self.masters = {}
        if masters:
            from cocotbext.axi import AxiBus, AxiMaster
            for k in (1, 2):
                self.masters[k] = AxiMaster(AxiBus.from_prefix(dut, f"s{k}", bus_separator="__"), dut.clk, dut.rst)
        # reader stimulus / expectations
        self.cmd = sim_tb.StreamSource(dut, "cmd", rng=self.rng, encode=lambda cmd: _pack_cmd(*cmd),
                                       on_transfer=lambda _: self.accept_cycles.append(self.cycle))
        self.cmd_q = self.cmd.queue              # (addr, len, inline, data)
        self.payload = sim_tb.StreamSink(dut, "payload", rng=self.rng,
                                         on_transfer=lambda v: self._on_beat(v, self.cycle))
        self.status = sim_tb.StreamSink(dut, "status", rng=self.rng,
                                        on_transfer=lambda v: self._on_status(v, self.cycle))
        self.max_burst = 256
        self.exp_payload = collections.deque()   # (command number, expected bytes) for len > 0
        self.exp_status = collections.deque()    # (command number, error)
        self.exp_ar = collections.deque()        # (addr, beats) of the reader
        self.pay_pos = 0
        self.n_cmds = 0
        self.beats = []                          # cycles of payload beats
        self.last_flags = []                     # cycle of each payload beat with last
        self.status_cycles = []
        self.accept_cycles = []
        self.ar_cycles = []                      # reader AR handshakes (cycle, addr, beats)
        self.r_cycles = []                       # reader R beats (cycle, last)
        self.status_seen = 0
        # interconnect bookkeeping
        self.window_beats = collections.Counter()
        self.window_bursts = collections.Counter()
        self.outstanding = {k: {"r": collections.Counter(), "b": collections.Counter()} for k in (1, 2)}
        self.check_ids = masters
        self.window_phase_check = self.window_phase_checked = False

    # valid / ready probabilities of the command source, the payload sink and the status sink
    cmd_valid_p = property(lambda self: self.cmd.valid_p, lambda self, p: setattr(self.cmd, "valid_p", p))
    ready_p = property(lambda self: self.payload.ready_p, lambda self, p: setattr(self.payload, "ready_p", p))
    status_ready_p = property(lambda self: self.status.ready_p, lambda self, p: setattr(self.status, "ready_p", p))

    async def reset(self):
        self.dut.max_burst.value = self.max_burst
        await sim_tb.reset(self.dut, 4, low=("cmd__valid", "payload__ready", "status__ready", "bw_cap"))
        self.mem.start()
        cocotb.start_soon(self._tick())         # counts the clock before the streams act on it
        for port in (self.cmd, self.payload, self.status):
            port.start()

    # ---- stimulus -------------------------------------------------------------------------------
    def set_max_burst(self, v):
        """Change AXI_MAX_BURST (call only when the reader is idle)."""
        assert not self.cmd_q and not self.exp_ar
        self.max_burst = v
        self.dut.max_burst.value = v

    def expected_error(self, addr, length):
        err = False
        for a, beats in split_bursts(addr, length, self.B, self.max_burst):
            for blk in range(a // 64, (a + self.B * beats - 1) // 64 + 1):
                err |= blk in self.mem.err_blocks
        return err

    def command(self, addr, length, inline=False, data=0):
        n = self.n_cmds
        self.n_cmds += 1
        if inline:
            want = data.to_bytes(32, "little")[:length]
            err = False
        else:
            want = self.mem.read(addr, length)
            err = self.expected_error(addr, length)
            self.exp_ar.extend(split_bursts(addr, length, self.B, self.max_burst))
        if length:
            self.exp_payload.append((n, want))
        self.exp_status.append((n, err))
        self.cmd_q.append((addr, length, inline, data))

    def random_command(self, inline_p=0.1):
        rng = self.rng
        if rng.random() < inline_p:
            length = rng.randint(0, 32)
            self.command(0, length, True, rng.randrange(1 << 256))
            return
        r = rng.random()
        length = (rng.randint(0, 64) if r < 0.35 else rng.randint(65, 1024) if r < 0.7
                  else rng.randint(1025, 4096) if r < 0.95 else 4096)
        if rng.random() < 0.2:      # start close to a 4 KiB boundary
            addr = BASE + rng.randrange(1, READER_SPAN // 4096) * 4096 - rng.randint(0, 80)
        else:
            addr = BASE + rng.randrange(READER_SPAN)
        self.command(addr, length)

    async def drain(self, timeout=400_000):
        start = self.cycle
        while self.cmd_q or self.exp_payload or self.exp_status or self.cmd.offering:
            await self.edge
            if self.cycle - start >= timeout:
                self.dump()
            assert self.cycle - start < timeout, (
                f"hang: {len(self.cmd_q)} commands queued, {len(self.exp_payload)} payloads and "
                f"{len(self.exp_status)} statuses outstanding, {len(self.exp_ar)} ARs expected")
        assert not self.exp_ar, f"{len(self.exp_ar)} expected ARs never issued"

    def dump(self):
        """Log the reader's state (on a hang)."""
        d = self.dut
        vals = {}
        for n in ("active", "reserved", "owed", "got", "a_left", "have", "j"):
            sig = getattr(getattr(d, "reader", None), n, None)
            vals[n] = sig.value if sig is not None else "?"
        for n in ("m_axi__arvalid", "m_axi__arready", "m_axi__rvalid", "cmd__valid", "cmd__ready",
                  "status__valid", "payload__valid"):
            vals[n] = getattr(d, n).value
        d._log.info("state: %s", vals)

    # ---- per-clock driver and monitors ----------------------------------------------------------
    async def _tick(self):
        d = self.dut
        while True:
            await self.edge
            self.cycle += 1
            c = self.cycle
            # host port
            if d.m_axi__arvalid.value and d.m_axi__arready.value:
                self._on_ar(d.m_axi__arid.value.to_unsigned(), d.m_axi__araddr.value.to_unsigned(),
                            d.m_axi__arlen.value.to_unsigned() + 1, c)
            if d.m_axi__awvalid.value and d.m_axi__awready.value:
                self._count_window(d.m_axi__awlen.value.to_unsigned() + 1, c)
            if d.m_axi__rvalid.value and d.m_axi__rid.value.to_unsigned() >> RID_SHIFT == 0:
                assert d.m_axi__rready.value, f"cycle {c}: reader's R beat stalled"
                self.r_cycles.append((c, int(d.m_axi__rlast.value)))
            if self.check_ids:
                self._check_ids(c)
            if self.window_phase_check:         # the RTL's window counter, where the simulator shows it
                self.window_phase_check = False
                w = getattr(getattr(d, "ic", None), "window", None)
                if w is not None:
                    assert int(w.value) == c % WINDOW, f"RTL window {int(w.value)} at test cycle {c}"
                    self.window_phase_checked = True

    def _count_window(self, beats, c):
        self.window_beats[c // WINDOW] += beats
        self.window_bursts[c // WINDOW] += 1

    def _on_ar(self, arid, addr, beats, c):
        self._count_window(beats, c)
        assert addr % 4096 // self.B * self.B + self.B * beats <= 4096, f"AR {addr:#x} x{beats} crosses 4 KiB"
        if arid >> RID_SHIFT:
            return
        assert arid == 0, f"reader ARID {arid}"
        assert self.exp_ar, f"unexpected reader AR {addr:#x} x{beats}"
        want = self.exp_ar.popleft()
        assert (addr, beats) == want, f"reader AR {addr:#x} x{beats}, want {want[0]:#x} x{want[1]}"
        self.ar_cycles.append((c, addr, beats))

    def _on_beat(self, v, c):
        W, B = self.W, self.B
        data, keep, last = v & ((1 << W) - 1), v >> W & ((1 << B) - 1), v >> W + B & 1
        assert self.exp_payload, f"cycle {c}: payload beat with no command"
        n, want = self.exp_payload[0]
        pos = self.pay_pos
        chunk = want[pos:pos + B]
        k = len(chunk)
        is_last = pos + k == len(want)
        assert keep == (1 << k) - 1, f"command {n} byte {pos}: keep {keep:#x}, want {(1 << k) - 1:#x}"
        assert last == is_last, f"command {n} byte {pos} of {len(want)}: last={last}"
        got = data.to_bytes(B, "little")[:k]
        assert got == chunk, f"command {n} byte {pos}: {got.hex()} != {chunk.hex()}"
        assert data >> 8 * k == 0, f"command {n} byte {pos}: lanes outside keep not zero: {data:#x}"
        self.beats.append(c)
        if is_last:
            self.exp_payload.popleft()
            self.pay_pos = 0
            self.last_flags.append(c)
        else:
            self.pay_pos = pos + B

    def _on_status(self, err, c):
        assert self.exp_status, f"cycle {c}: status with no command"
        n, want = self.exp_status.popleft()
        assert err == want, f"command {n}: status error={err}, want {int(want)}"
        self.status_cycles.append(c)

    def _check_ids(self, c):
        d = self.dut
        for k in (1, 2):
            s = lambda name: getattr(d, f"s{k}__{name}").value
            if s("arvalid") and s("arready"):
                self.outstanding[k]["r"][s("arid").to_unsigned()] += 1
            if s("awvalid") and s("awready"):
                self.outstanding[k]["b"][s("awid").to_unsigned()] += 1
            if s("rvalid") and s("rready") and s("rlast"):
                i = s("rid").to_unsigned()
                assert self.outstanding[k]["r"][i] > 0, f"s{k}: R with ID {i} not outstanding"
                self.outstanding[k]["r"][i] -= 1
            if s("bvalid") and s("bready"):
                i = s("bid").to_unsigned()
                assert self.outstanding[k]["b"][i] > 0, f"s{k}: B with ID {i} not outstanding"
                self.outstanding[k]["b"][i] -= 1

    def check_windows(self, cap):
        worst = 0
        for w, beats in self.window_beats.items():
            if beats > cap:
                assert self.window_bursts[w] == 1, (
                    f"window {w}: {beats} beats in {self.window_bursts[w]} bursts, cap {cap}")
            worst = max(worst, beats)
        return worst

    # ---- other masters --------------------------------------------------------------------------
    async def master_traffic(self, k, n_ops, workers=3, max_len=700):
        """Random reads and writes from master ``k``: each worker owns a slice of the region."""
        from cocotbext.axi.constants import AxiResp
        master, rng = self.masters[k], random.Random(self.rng.randrange(1 << 30))
        span = (1 << 20) // workers

        async def worker(w):
            base = S_BASE[k] + w * span
            shadow = bytearray(self.mem.read(base, span))
            for _ in range(n_ops):
                off = rng.randrange(span - 1)
                n = rng.randint(1, min(max_len, span - off))
                if rng.random() < 0.5:
                    data = rng.randbytes(n)
                    resp = await master.write(base + off, data)
                    assert resp.resp == AxiResp.OKAY, resp
                    shadow[off:off + n] = data
                else:
                    resp = await master.read(base + off, n)
                    assert resp.resp == AxiResp.OKAY, resp
                    assert resp.data == shadow[off:off + n], f"s{k} read {base + off:#x}+{n} differs"
            assert self.mem.read(base, span) == shadow, f"s{k} region {w} differs from its writes"

        await gather(*(worker(w) for w in range(workers)))


def _mixed_latency(rng):
    def lat():
        r = rng.random()
        return rng.randint(1, 8) if r < 0.6 else rng.randint(9, 100) if r < 0.9 else rng.randint(101, 500)
    return lat


def _scale():
    return float(os.environ.get("DMA_SCALE", "1"))


def _error_blocks(tb, n):
    blocks = tb.rng.sample(range(BASE // 64, (BASE + READER_SPAN) // 64), n)
    tb.mem.err_blocks.update({b: tb.rng.choice([2, 3]) for b in blocks})


# ---------------------------------------------------------------------------------------------------
@cocotb.test()
async def test_reader_random(dut):
    """Random commands (any alignment, len 0..4096, inline), random max_burst, latency 1..500,
    AXI and sink backpressure, error blocks."""
    tb = TB(dut, 1)
    tb.mem.latency = _mixed_latency(tb.rng)
    _error_blocks(tb, 24)
    await tb.reset()
    tb.mem.set_backpressure(True, tb.rng)
    rng = tb.rng
    n_err = 0
    for phase in range(int(4 * _scale())):
        tb.set_max_burst(rng.choice([rng.randint(1, 256), rng.randint(1, 16), 256, 0, 300]))
        tb.ready_p = rng.choice([1.0, 0.8, 0.3])
        tb.status_ready_p = rng.choice([1.0, 0.5, 0.1])
        tb.cmd_valid_p = rng.choice([1.0, 0.5])
        for _ in range(25):
            tb.random_command()
        n_err += sum(e for _, e in tb.exp_status)
        await tb.drain()
        dut._log.info("phase %d: max_burst %d, %d commands so far, %d clocks", phase, tb.max_burst, tb.n_cmds, tb.cycle)
    # every residue mod B of both address and length, short commands (length 0 .. 3 B): every
    # (address, length) pair up to B = 16; above that, every pair of residues once (B * B commands)
    B = tb.B
    tb.set_max_burst(rng.randint(1, 4))
    tb.ready_p, tb.status_ready_p, tb.cmd_valid_p = 0.7, 0.7, 1.0
    for a in range(B):
        lengths = range(3 * B + 1) if B <= 16 else [r + B * ((a + r) % 3) for r in range(B)]
        for n in lengths:
            tb.command(BASE + B * rng.randrange(READER_SPAN // B) + a, n)
    await tb.drain()
    dut._log.info("%d commands, %d with bus errors, %d clocks", tb.n_cmds, n_err, tb.cycle)
    assert n_err > 0, "no command hit an error block: the test lost its error coverage"


@cocotb.test()
async def test_reader_latency200(dut):
    """Fixed 200-clock memory latency, random commands and sinks, max_burst random."""
    tb = TB(dut, 2, latency=(200, 200))
    _error_blocks(tb, 4)
    await tb.reset()
    rng = tb.rng
    for phase in range(int(3 * _scale())):
        tb.set_max_burst(rng.randint(1, 256))
        tb.ready_p = rng.choice([1.0, 0.9, 0.5])
        tb.status_ready_p = rng.choice([1.0, 0.3])
        for _ in range(40):
            tb.random_command()
        await tb.drain()
    dut._log.info("%d commands in %d clocks", tb.n_cmds, tb.cycle)


@cocotb.test()
async def test_status_before_payload(dut):
    """Statuses come when the data has arrived, while payload.ready is held low; R never stalls."""
    tb = TB(dut, 3, latency=(20, 20))
    _error_blocks(tb, 3)
    await tb.reset()
    tb.ready_p = 0.0
    bad = min(tb.mem.err_blocks) * 64
    cmds = [(BASE + 3, 1000), (bad - 5, 20), (0, 5, True), (BASE + 5000, 0), (BASE + 9001, 2048)]
    for c in cmds:
        tb.command(*c[:2], *((True, 0x1122334455) if len(c) > 2 else ()))
    while len(tb.status_cycles) < len(cmds):
        await tb.edge
        assert tb.cycle < 5000, "statuses did not arrive while the payload was blocked"
    assert not tb.beats
    assert tb.r_cycles[-1][0] < tb.status_cycles[-1]
    tb.ready_p = 1.0
    await tb.drain()
    # one longest command, 4096/B + 1 memory beats (513 > fifo_depth at W = 64): its status still
    # needs no payload.ready
    tb.ready_p = 0.0
    tb.command(BASE + 3 * 4096 - 1001, 4096)
    while len(tb.status_cycles) < len(cmds) + 1:
        await tb.edge
        assert tb.cycle < 20000, "the status of a 4096-byte command waited for payload.ready"
    assert not tb.exp_status
    tb.ready_p = 1.0
    await tb.drain()


@cocotb.test()
async def test_throughput(dut):
    """Payload beats per clock for back-to-back commands (200-clock memory, ready sink), and latencies.

    Each case is checked against bounds from first principles (memory beats, command issue,
    commands in flight): at W = 64 one beat per clock, except for unaligned commands (one extra
    memory beat each); wider, short commands are limited by the ``CMD_DEPTH`` commands in flight.
    """
    tb = TB(dut, 4, latency=(1, 1))
    await tb.reset()
    rng, B = tb.rng, tb.B

    # latencies, with a 1-clock memory, one isolated aligned command of 8 beats
    tb.command(BASE + 4096, 8 * B)
    await tb.drain()
    acc, (ar, _, _), (r0, _) = tb.accept_cycles[-1], tb.ar_cycles[-1], tb.r_cycles[-8]
    r_last = tb.r_cycles[-1][0]
    lat = {"cmd_to_ar_at_m_axi": ar - acc, "r_to_payload": tb.beats[-8] - r0,
           "last_r_to_status": tb.status_cycles[-1] - r_last}
    dut._log.info("latencies (clock edges): %s", lat)
    print(f"[dma] latency clocks: {lat}", flush=True)

    results, bounds, floors = {}, {}, {}
    latency = 200
    # clocks of a command's round trip besides memory latency and its beats: 4 from the command to
    # its AR on m_axi and 1 from the last R beat to the status (the contract), 1 from the status
    # handshake to the next command's, and up to 2 in the memory model's channel registers
    pipe = 4 + 1 + 1 + 2
    tb.mem.latency = (latency, latency)
    for name, length, misalign, n in (("4096B aligned", 4096, False, 12), ("4096B unaligned", 4096, True, 12),
                                      ("64B aligned", 64, False, 300), ("64B unaligned", 64, True, 300),
                                      ("1500B unaligned", 1500, True, 30)):
        tb.beats.clear()
        pay = raw = issue = trip = 0
        for i in range(n):
            a = BASE + B * rng.randrange((READER_SPAN - 8192) // B) + (rng.randint(1, B - 1) if misalign else 0)
            tb.command(a, length)
            bursts = split_bursts(a, length, B, tb.max_burst)
            r = sum(k for _, k in bursts)
            pay += -(-length // B)
            raw += r
            issue += len(bursts) + 1
            trip += latency + r
        await tb.drain()
        beats = tb.beats
        thr = len(beats) / (beats[-1] - beats[0] + 1)
        results[name] = round(thr, 4)
        # payload beats per clock are at most: memory (one raw beat per clock), command stage (a
        # command takes one clock plus one per burst), commands in flight (CMD_DEPTH statuses owed,
        # each held for at least the memory latency plus its raw beats: ``trip``). The floor adds
        # the reader's pipeline clocks to every round trip.
        mem_issue = min(pay / raw, pay / issue)
        bounds[name] = round(min(mem_issue, CMD_DEPTH * pay / trip), 4)
        floors[name] = round(min(mem_issue, CMD_DEPTH * pay / (trip + n * pipe)), 4)
    dut._log.info("throughput (payload beats per clock, %d-clock memory): %s", latency, results)
    dut._log.info("bounds: %s, floors %s", bounds, floors)
    print(f"[dma] W={tb.W} throughput beats/clock at {latency}-clock memory latency: {results}", flush=True)
    print(f"[dma] W={tb.W} upper bounds (memory beats, command issue, {CMD_DEPTH} commands in flight): "
          f"{bounds}; floors (plus {pipe} pipeline clocks per command): {floors}", flush=True)
    # 0.01 of measuring slack: the window from the first to the last payload beat leaves out part
    # of the first command's memory time
    for name, thr in results.items():
        assert floors[name] - 0.01 <= thr <= bounds[name] + 0.01, (
            f"{name}: {thr} beats/clock, expected {floors[name]} .. {bounds[name]}")


@cocotb.test()
async def test_interconnect_random(dut):
    """Reader plus two AxiMasters doing random reads and writes at once; data and IDs checked."""
    tb = TB(dut, 5, latency=(1, 30), masters=True)
    tb.mem.latency = _mixed_latency(tb.rng)
    _error_blocks(tb, 4)
    await tb.reset()
    tb.mem.set_backpressure(True, tb.rng)
    tb.ready_p, tb.status_ready_p = 0.8, 0.8
    n = int(40 * _scale())
    for _ in range(n):
        tb.random_command()
    await gather(tb.drain(), tb.master_traffic(1, n), tb.master_traffic(2, n))
    for k in (1, 2):
        for ch in ("r", "b"):
            assert not +tb.outstanding[k][ch], f"s{k} {ch}: unanswered IDs {+tb.outstanding[k][ch]}"
    dut._log.info("interconnect: %d reader commands, %d clocks", tb.n_cmds, tb.cycle)


@cocotb.test()
async def test_bw_cap(dut):
    """Beats per 1024-clock window never above AXI_BW_CAP (or one burst alone), all three masters busy."""
    tb = TB(dut, 6, latency=(1, 4), masters=True)
    await tb.reset()
    rng = tb.rng
    report = {}
    # caps are in beats and the traffic in bytes: scale the caps so a window carries the same bytes
    # at every width (700 and 150 beats at W = 64)
    for cap in (700 * 8 // tb.B, 150 * 8 // tb.B):
        tb.window_beats.clear()
        tb.window_bursts.clear()
        tb.dut.bw_cap.value = cap
        first = tb.cycle // WINDOW + 1
        for _ in range(10):
            tb.command(BASE + rng.randrange(READER_SPAN - 4096), rng.choice([4096, 2000, 64]))
        await gather(tb.drain(timeout=2_000_000), tb.master_traffic(1, 6, workers=2, max_len=2048),
                     tb.master_traffic(2, 6, workers=2, max_len=2048))
        last = tb.cycle // WINDOW - 1
        worst = tb.check_windows(cap)
        busy = [tb.window_beats[w] for w in range(first, last)]
        tb.window_phase_check = True
        report[cap] = {"windows": len(busy), "max": worst, "mean_busy": round(sum(busy) / max(len(busy), 1), 1)}
        assert busy and min(busy) > 0, f"cap {cap}: an idle window while traffic was pending: {busy}"
    tb.dut.bw_cap.value = 0
    await ClockCycles(dut.clk, 2)
    dut._log.info("bw_cap: %s (window phase checked against the RTL: %s)", report, tb.window_phase_checked)
    print(f"[dma] bw_cap beats per window: {report}", flush=True)


# ---- test top (for the pytest entry and the cocotb tests above) ------------------------------------
def dma_test_top(data_width=64):
    """PayloadReader on master 0 of AxiInterconnect(3), all ``data_width`` bits wide; masters 1 and 2
    and m_axi are top ports."""
    from amaranth import Module
    from amaranth.lib import stream, wiring
    from amaranth.lib.wiring import In, Out

    from rnic.hdl.bus import AXI4Signature, PacketStream
    from rnic.hdl.dma import AxiInterconnect, PayloadReader, payload_cmd_layout, payload_status_layout

    class DmaTestTop(wiring.Component):
        def __init__(self):
            axi = lambda idw: AXI4Signature(addr_width=64, data_width=data_width, id_width=idw)
            super().__init__({
                "cmd": In(stream.Signature(payload_cmd_layout)), "max_burst": In(9),
                "payload": Out(PacketStream(data_width)), "status": Out(stream.Signature(payload_status_layout)),
                "s1": In(axi(4)), "s2": In(axi(4)), "bw_cap": In(16), "m_axi": Out(axi(6)),
            })

        def elaborate(self, platform):
            m = Module()
            m.submodules.reader = reader = PayloadReader(READER_MAX_PAYLOAD, READER_FIFO_DEPTH, cmd_depth=CMD_DEPTH, data_width=data_width)
            m.submodules.ic = ic = AxiInterconnect(3, data_width=data_width)
            wiring.connect(m, wiring.flipped(self.cmd), reader.cmd)
            wiring.connect(m, reader.payload, wiring.flipped(self.payload))
            wiring.connect(m, reader.status, wiring.flipped(self.status))
            wiring.connect(m, reader.m_axi, ic.s0)
            wiring.connect(m, wiring.flipped(self.s1), ic.s1)
            wiring.connect(m, wiring.flipped(self.s2), ic.s2)
            wiring.connect(m, ic.m_axi, wiring.flipped(self.m_axi))
            m.d.comb += [reader.max_burst.eq(self.max_burst), ic.bw_cap.eq(self.bw_cap)]
            return m

    return DmaTestTop()


# ---- pytest entry ---------------------------------------------------------------------------------
try:
    import pytest
except ImportError:       # inside the simulator
    pytest = None

if pytest is not None:
    def _run(env=None, testcase=None, data_width=64):
        from rnic.sim.toolchain import build, run, seed_from_env
        key = "dma" if data_width == 64 else f"dma-w{data_width}"
        b = build(lambda: dma_test_top(data_width), "dma_top", key)
        tests, fails = run(b, "test_dma", seed=seed_from_env(), testcase=testcase, extra_env=env,
                           test_dir=Path(__file__).parent)
        assert fails == 0, f"{fails} of {tests} cocotb tests failed (W={data_width})"

    def test_dma():
        _run({"DMA_SCALE": "1"})

    def test_dma_wide():
        """The widest bus, W = 512: one 64-byte beat, inline data in one beat."""
        _run({"DMA_SCALE": "1"}, data_width=512)

    @pytest.mark.slow
    @pytest.mark.parametrize("data_width", [128, 256])
    def test_dma_widths(data_width):
        """The widths between: W = 128 (inline data in 2 beats) and 256 (in 1 beat, all lanes)."""
        _run({"DMA_SCALE": "1"}, data_width=data_width)

    def test_dma_parameters():
        """Other sizes and widths convert (no combinational loop), and bad parameters are refused."""
        from rnic.hdl.dma import AxiInterconnect, PayloadReader
        from rnic.hdl.verilog import to_verilog
        for n in (1, 2, 5):
            ic = AxiInterconnect(n, id_width=2, data_width=64)
            assert len(ic.m_axi.arid) == 2 + (n - 1).bit_length()
            to_verilog(ic, f"ic{n}")
        to_verilog(PayloadReader(max_payload=1024, fifo_depth=256, cmd_depth=4, inline_depth=2, data_width=64), "pr")
        for w in (128, 256, 512):
            ic = AxiInterconnect(3, data_width=w)
            assert len(ic.m_axi.rdata) == len(ic.s2.wdata) == w and len(ic.m_axi.wstrb) == w // 8
            to_verilog(ic, f"ic_w{w}")
            pr = PayloadReader(READER_MAX_PAYLOAD, READER_FIFO_DEPTH, data_width=w)
            assert len(pr.m_axi.rdata) == len(pr.payload.payload.data) == w
            assert len(pr.payload.payload.keep) == w // 8
            to_verilog(pr, f"pr_w{w}")
        for bad in (lambda: AxiInterconnect(0, data_width=64), lambda: AxiInterconnect(2, id_width=0, data_width=64),
                    lambda: PayloadReader(4096, 128, data_width=64), lambda: PayloadReader(8192, 512, data_width=64),
                    lambda: AxiInterconnect(2, data_width=32), lambda: AxiInterconnect(2, data_width=96),
                    lambda: AxiInterconnect(2, data_width=2048), lambda: PayloadReader(4096, 512, data_width=32),
                    lambda: PayloadReader(4096, 512, data_width=96), lambda: PayloadReader(4096, 512, data_width=1024)):
            with pytest.raises(ValueError):
                bad()

    @pytest.mark.slow
    def test_dma_long():
        """Ten times the random stimulus."""
        _run({"DMA_SCALE": "10"}, testcase="test_reader_random,test_reader_latency200,test_interconnect_random")
