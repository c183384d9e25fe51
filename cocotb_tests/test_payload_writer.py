"""cocotb testbench for :class:`rnic.hdl.receive.payload_writer.PayloadWriter`: frames held in the ring,
pieces of them written to host memory (cocotbext-axi ``AxiRam`` through :class:`rnic.sim.harness.HostRam`).

Random frames of 1..4200 bytes, each with 0..3 pieces (random disjoint ranges of the frame, in random
order, to random unaligned addresses, some across 4 KiB boundaries), random write latency and pauses on
every channel, random valid / ready on the streams, SLVERR blocks, and one piece in five writing zeros. Expected: host memory equal to a
Python image of the pieces' bytes, bursts split as :func:`rnic.model.engine.split_bursts` splits them (at
most ``max_burst`` beats, never across 4 KiB), every beat written except those in an error block (the RAM
model writes a burst beat by beat, as a real memory may), and one result per frame, in order, flagged
exactly when one of its beats hit an error block. Rerun with ``RNIC_SEED``.
"""

from __future__ import annotations

import random
from pathlib import Path

import cocotb
import pytest
from cocotb.triggers import ClockCycles, RisingEdge

from rnic.hdl.receive.payload_writer import PayloadWriter
from rnic.model.engine import ERROR_ALIGN, HostMemory, split_bursts
from rnic.sim import tb as sim_tb
from rnic.sim import toolchain
from rnic.sim.harness import HostRam

SPAN = 1 << 17                      # addresses the pieces write to
MAX_BURST = 16                      # short bursts: more of them, more boundaries


class TB:
    def __init__(self, dut):
        self.dut = dut
        self.width = len(dut.m_axi__wdata)
        self.lanes = self.width // 8
        self.rng = random.Random(sim_tb.seed(dut, what=f"payload writer, width {self.width}"))
        sim_tb.start_clock(dut)
        self.ram = HostRam(dut, self.rng)
        w, b = self.width, self.lanes
        self.frames = sim_tb.StreamSource(dut, "frames", rng=self.rng,
                                          encode=lambda beat: beat[0] | beat[1] << w | beat[2] << (w + b))
        self.pieces = sim_tb.StreamSource(dut, "pieces", rng=self.rng,
                                          encode=lambda p: p[0] | p[1] << 16 | p[2] << 32 | p[3] << 96 | p[4] << 97)
        self.done = []
        self.sink = sim_tb.StreamSink(dut, "done", on_transfer=self.done.append, rng=self.rng)

    async def start(self, errors):
        mem = HostMemory()
        for lo in errors:
            mem.add_write_error(lo, lo + ERROR_ALIGN)
        self.ram.load(mem, latency=(0, 20), pause=0.2)
        await sim_tb.reset(self.dut, 3, low=("frames__valid", "pieces__valid"), before=1, after=2)
        for port in (self.frames, self.pieces, self.sink):
            port.start()

    def send_frame(self, frame: bytes):
        b = self.lanes
        beats = [frame[i:i + b] for i in range(0, len(frame), b)]
        for i, beat in enumerate(beats):
            self.frames.send((int.from_bytes(beat, "little"), (1 << len(beat)) - 1, int(i == len(beats) - 1)))


def _plan(rng, n):
    """Frames and their pieces: ``[(frame, [(src, length, addr, zero), ...])]``, pieces in random order (one in
    five writes zeros)."""
    out = []
    for _ in range(n):
        frame = rng.randbytes(rng.choice([1, 7, 64, 300, rng.randint(1, 4200)]))
        cuts = sorted(rng.sample(range(len(frame) + 1), min(len(frame) + 1, 2 * rng.randint(0, 3))))
        pieces = []
        for lo, hi in zip(cuts[::2], cuts[1::2]):
            addr = rng.randrange(SPAN - 8192)
            if rng.random() < 0.2:
                addr = (addr | 0xFFF) - rng.randrange(hi - lo + 1)        # across a 4 KiB boundary
            pieces.append((lo, hi - lo, addr, int(rng.random() < 0.2)))
        rng.shuffle(pieces)
        out.append((frame, pieces))
    return out


@cocotb.test()
async def run_random(dut):
    tb = TB(dut)
    plan = _plan(tb.rng, 60)
    # error blocks under the first byte of every fourth frame's first piece (so some frames fail and
    # most do not), and a few anywhere
    errors = [p[0][2] // ERROR_ALIGN * ERROR_ALIGN for f, p in plan[::4] if p]
    errors += [tb.rng.randrange(SPAN // ERROR_ALIGN) * ERROR_ALIGN for _ in range(8)]
    await tb.start(errors)
    image = bytearray(SPAN)
    want_err = []
    for frame, pieces in plan:
        tb.send_frame(frame)
        failed = False
        for k, (src, length, addr, zero) in enumerate(pieces or [(0, 0, 0, 0)]):
            tb.pieces.send((src, length, addr, int(k == max(len(pieces), 1) - 1), zero))
            data = bytes(len(frame)) if zero else frame
            for start, beats in split_bursts(addr, length, tb.lanes, MAX_BURST):
                for k in range(beats):      # the RAM writes a burst beat by beat; a beat in an error block fails
                    beat = start + k * tb.lanes
                    lo, hi = max(beat, addr), min(beat + tb.lanes, addr + length)
                    if any(e <= beat < e + ERROR_ALIGN for e in errors):
                        failed = True
                    else:
                        image[lo:hi] = data[src + lo - addr:src + hi - addr]
        want_err.append(failed)
    while len(tb.done) < len(plan):
        await RisingEdge(dut.clk)
    await ClockCycles(dut.clk, 20)
    assert len(tb.done) == len(plan), "more results than frames"
    assert [bool(d) for d in tb.done] == want_err, "error flags per frame"
    assert any(want_err) and not all(want_err), "the error blocks gave no mix of good and failed frames"
    got = tb.ram.read(0, SPAN)
    if got != bytes(image):
        bad = next(i for i in range(SPAN) if got[i] != image[i])
        raise AssertionError(f"host memory differs first at 0x{bad:x}: got {got[bad]:#x}, want {image[bad]:#x}")


@pytest.mark.parametrize("width", [64, 512, pytest.param(128, marks=pytest.mark.slow)])
def test_payload_writer(width):
    seed = sim_tb.seed(None, None, what=f"test_payload_writer[{width}]")
    build = toolchain.build(lambda: PayloadWriter(width, depth=1 << (2 * 4224 // (width // 8)).bit_length(), max_burst=MAX_BURST),
                            "payload_writer", f"rx-payload-writer-w{width}")
    toolchain.run(build, "test_payload_writer", seed=seed, test_dir=Path(__file__).parent)
