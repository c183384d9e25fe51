"""cocotb testbench for :class:`rnic.hdl.receive.RxFrontEnd`, the receive path's frame checks, against the
golden model :func:`rnic.model.receive.classify`.

Stimulus (:mod:`rnic.sim.rx_stimulus`): random requests of every link mode addressed to the port, most of
them valid, the rest with one fault each (bad FCS flag, truncation, a flipped bit, another EtherType,
stacked tags, another destination, a broken length field, opcode, TVer or pad count with the CRCs made
good again), short frames MAC-padded to 60 bytes; plus the published ConnectX-4 Lx CNP. Random valid on
the frame input, random ready on the result output. Every result must equal the model's: the verdict
(passed, or the same drop reason), the descriptor and the payload's place in the frame; the counters must
equal the model's counts. Rerun a failure with ``RNIC_SEED=<seed>``.
"""

from __future__ import annotations

import logging
import os
import random
from pathlib import Path

import cocotb
import pytest
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSource

from rnic.hdl.receive.front_end import RxFrontEnd
from rnic.hdl.receive.layouts import result_layout
from rnic.model.descriptor import LinkMode, PacketDesc
from rnic.model.frames import parse_frame
from rnic.model.published import CONNECTX4_CNP, SCAPY_UC_SEND_ONLY
from rnic.model.receive import DropCounters, Dropped, DropReason, PortAddresses, classify
from rnic.sim import tb as sim_tb
from rnic.sim import toolchain
from rnic.sim.rx_stimulus import port_for_link, random_frames

N_GIDS = 4
FRAMES = int(os.environ.get("RNIC_RX_FRAMES", "400"))


def _fields(layout, value: int, prefix=""):
    out = {}
    for name, field in layout:
        v = value >> field.offset & ((1 << field.width) - 1)
        out[name] = v
    return out


class TB:
    def __init__(self, dut, link: str, port: PortAddresses):
        self.dut, self.link, self.port = dut, link, port
        self.width = len(dut.s_axis__tdata)
        self.rng = random.Random(sim_tb.seed(dut, what=f"rx front end, width {self.width}, {link}"))
        sim_tb.start_clock(dut)
        self.source = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis", bus_separator="__"), dut.clk, dut.rst)
        self.source.log.setLevel(logging.ERROR)
        self.results = []
        self.sink = sim_tb.StreamSink(dut, "m_result", on_transfer=self.results.append, rng=self.rng)
        self.layout = result_layout()

    async def start(self):
        dut = self.dut
        dut.ib.value = int(self.link == "ib")
        dut.mac.value = self.port.mac
        dut.lid.value = self.port.lid
        gids = sorted(self.port.gids)
        dut.gids.value = sum(g << (128 * k) for k, g in enumerate(gids))
        dut.gid_valid.value = (1 << len(gids)) - 1
        await sim_tb.reset(dut, 3, low=("s_axis__tvalid",), before=1, after=2)
        self.sink.start()

    async def run(self, frames, idle: float, ready_p: float):
        sim_tb.set_pause(self.source, idle, self.rng)
        self.sink.ready_p = ready_p
        start = len(self.results)
        for data, fcs_bad in frames:
            await self.source.send(AxiStreamFrame(data, tuser=[0] * (len(data) - 1) + [int(fcs_bad)]))
        while len(self.results) < start + len(frames):
            await RisingEdge(self.dut.clk)
        await ClockCycles(self.dut.clk, 4)
        assert len(self.results) == start + len(frames), "more results than frames"
        model = DropCounters()
        for i, ((data, fcs_bad), raw) in enumerate(zip(frames, self.results[start:])):
            want = model.count(classify(data, fcs_bad=fcs_bad, port=self.port, link=self.link))
            self.check(i, data, want, _fields(self.layout, raw))
        return model

    def check(self, i, data, want, got):
        desc = PacketDesc.from_int(got["desc"])
        where = f"frame {i} ({len(data)} bytes: {data[:24].hex()}...)"
        if isinstance(want, Dropped):
            assert not got["ok"], f"{where}: passed, the model drops it: {want.reason.name} ({want.detail})"
            assert got["reason"] == want.reason, \
                f"{where}: dropped as {DropReason(got['reason']).name}, the model says {want.reason.name}"
            if want.desc is not None:
                assert desc == want.desc, f"{where}: CNP descriptor {desc} != {want.desc}"
            return
        assert got["ok"], f"{where}: dropped as {DropReason(got['reason']).name}, the model passes it"
        assert desc == want.desc, f"{where}: descriptor {desc} != {want.desc}"
        payload = data[got["payload_start"]:got["payload_start"] + got["length"]]
        assert (got["length"], payload) == (len(want.payload), want.payload), f"{where}: payload"

    def check_counters(self, model: DropCounters):
        dut = self.dut
        assert sim_tb.unsigned(dut.received) == model.received
        flat = sim_tb.unsigned(dut.dropped)
        for r in DropReason:
            assert flat >> (32 * r) & 0xFFFF_FFFF == model[r], f"{r.name} counter"


@cocotb.test()
@cocotb.parametrize(link=["ethernet", "ib"])
async def run_random(dut, link):
    """Random frames of one link kind, good and faulty, under random valid / ready."""
    tb = TB(dut, link, port_for_link(link))
    await tb.start()
    frames = random_frames(tb.rng, link, FRAMES)
    total = DropCounters()
    for idle, ready_p in ((0.0, 1.0), (0.3, 0.5), (0.0, 0.15)):
        part = await tb.run(frames[:FRAMES // 3], idle, ready_p)
        frames = frames[FRAMES // 3:]
        total.received += part.received
        for r in DropReason:
            total.dropped[r] += part.dropped[r]
    tb.check_counters(total)
    other = DropReason.BAD_VCRC if link == "ethernet" else DropReason.BAD_IP_CHECKSUM
    missing = [r.name for r in DropReason if r is not other and not total[r]]
    assert total.received and not missing, f"reasons never exercised: {missing}"

@cocotb.test()
@cocotb.parametrize(which=["cnp", "uc-send"])
async def run_published(dut, which):
    """Frames this project did not build: the ConnectX-4 Lx CNP is counted as a CNP, scapy's UC SEND ONLY
    (non-zero UDP checksum) passes; both with the model's descriptor."""
    from rnic.model.receive import ipv4_gid
    frame = CONNECTX4_CNP if which == "cnp" else SCAPY_UC_SEND_ONLY
    desc, _ = parse_frame(LinkMode.ROCEV2_IPV4, frame)
    tb = TB(dut, "ethernet", PortAddresses(mac=desc.dst_mac, gids={ipv4_gid(desc.dst_gid)}))
    await tb.start()
    model = await tb.run([(frame, False)], 0.0, 1.0)
    assert (model[DropReason.CNP], model.received) == ((1, 0) if which == "cnp" else (0, 1))
    tb.check_counters(model)


# --- pytest: build each width once, run the cocotb tests on it -----------------------------------

WIDTHS = [64, 512, pytest.param(128, marks=pytest.mark.slow), pytest.param(256, marks=pytest.mark.slow)]


@pytest.mark.parametrize("width", WIDTHS)
def test_rx_front_end(width):
    seed = sim_tb.seed(None, None, what=f"test_rx_front_end[{width}]")
    build = toolchain.build(lambda: RxFrontEnd(width, n_gids=N_GIDS), "rx_front_end", f"rx-front-end-w{width}")
    toolchain.run(build, "test_rx_front_end", seed=seed, test_dir=Path(__file__).parent)
