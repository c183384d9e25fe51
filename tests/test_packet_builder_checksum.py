"""The packet builder's IPv4 checksum arithmetic (ones'-complement adders, Amaranth's simulator)
against the model's RFC 1071 checksum, on edge sums and random headers. The pipeline around it is
checked byte for byte by ``cocotb_tests/test_packet_builder.py``."""

from __future__ import annotations

import random

from amaranth import Elaboratable, Module, Signal
from amaranth.sim import Simulator

from rnic.hdl.packet_builder import _oc_add, _oc_sum3
from rnic.model.headers import ipv4_checksum
from rnic.sim.toolchain import seed_from_env


class _Tree(Elaboratable):
    """The builder's tree: eight header words in pairs, the pairs in pairs, then with the total length."""

    def __init__(self):
        self.words = [Signal(16, name=f"w{k}") for k in range(8)]
        self.total_length = Signal(16)
        self.checksum = Signal(16)

    def elaborate(self, platform):
        m = Module()
        w = self.words
        pairs = [_oc_add(m, w[2 * k], w[2 * k + 1], f"p{k}") for k in range(4)]
        sums = [_oc_add(m, pairs[2 * k], pairs[2 * k + 1], f"s{k}") for k in range(2)]
        m.d.comb += self.checksum.eq(~_oc_sum3(m, sums[0], sums[1], self.total_length, "t"))
        return m


def _header(words, total_length):
    """20 header bytes with the builder's word order: words 0..3 are bytes 0-1, 4-5, 6-7, 8-9."""
    w = [words[0], total_length, *words[1:4], 0, *words[4:]]
    return b"".join(x.to_bytes(2, "big") for x in w)


def _vectors(rng):
    ones = [0xFFFF] * 8
    yield ones, 0xFFFF                      # every term all ones
    yield [0] * 8, 1                        # one bit
    yield [0x8000] * 8, 0x8000              # carries out of every adder
    yield [0xFFFE, 1] + [0] * 6, 0xFFFF     # sums to 0x1FFFE: 0xFFFF after the fold
    yield [0xFFFF, 1] + [0] * 6, 0          # end-around carry into a zero
    for _ in range(3000):
        kind = rng.random()
        if kind < 0.3:
            words = [rng.choice((0, 1, 0x7FFF, 0x8000, 0xFFFE, 0xFFFF)) for _ in range(8)]
        else:
            words = [rng.getrandbits(16) for _ in range(8)]
        yield words, rng.choice((rng.getrandbits(16), 0xFFFF, 20, 0))


def test_checksum_tree_matches_the_model():
    seed = seed_from_env()
    print(f"seed={seed} (rerun with RNIC_SEED={seed})")
    rng = random.Random(seed)
    dut = _Tree()
    sim = Simulator(dut)
    mismatches = []

    async def bench(ctx):
        for words, total_length in _vectors(rng):
            for sig, v in zip(dut.words, words):
                ctx.set(sig, v)
            ctx.set(dut.total_length, total_length)
            got = ctx.get(dut.checksum)
            want = ipv4_checksum(_header(words, total_length))
            if got != want:
                mismatches.append((words, total_length, got, want))

    sim.add_testbench(bench)
    sim.run()
    assert not mismatches, f"seed {seed}: {len(mismatches)} mismatches, first {mismatches[0]}"
