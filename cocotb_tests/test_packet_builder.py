"""cocotb testbench of the packet builder (hdl/packet_builder/) against the golden model.

Expected frames come from :func:`rnic.model.frames.build_frame`; every frame is compared byte for
byte, RoCEv2 frames are also checked with scapy's ICRC, and the frames of each test are written to
pcap files (one per link mode) that tshark must open without malformed-packet warnings (when
model/pcap.py and tshark are available). Descriptor, payload and output streams run with random
valid/ready pauses.

pytest runs :func:`test_packet_builder` (W = 64 and 512, the CI subset of the sweep); the exhaustive
mode x opcode x size sweep is ``@pytest.mark.slow`` (``pytest -m slow``). Seeds are printed;
rerun with ``RNIC_SEED=<seed>``.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from rnic.model.descriptor import DESC_FIELDS, MAX_PAYLOAD, LinkMode, PacketDesc
from rnic.model.frames import build_frame, parse_frame
from rnic.model.headers import ROCEV2_UDP_PORT
from rnic.model.opcodes import OPCODE_INFO, Opcode

try:  # only inside the simulator
    import cocotb
    from cocotb.triggers import ClockCycles, RisingEdge, ReadOnly
except ImportError:  # pragma: no cover
    cocotb = None

MODES = list(LinkMode)
LISTED_SIZES = (0, 1, 63, 64, 256, 1024, 4096)


# --- stimulus ----------------------------------------------------------------------------------------

def random_desc(rng: random.Random, mode: int, opcode: int, size: int) -> PacketDesc:
    """A descriptor with every field random (fields the mode/opcode does not carry are ignored).

    The UDP source port is drawn as RoCE stacks draw it (0xC000-0xFFFF, Linux rdma_get_udp_sport)
    seven times in eight, and from all 16 bits otherwise, so every bit of the field is exercised."""
    kw = {name: rng.getrandbits(width) for name, width in DESC_FIELDS}
    kw.update(mode=int(mode), opcode=int(opcode), payload_len=size)
    if rng.randrange(8):
        kw["udp_sport"] = 0xC000 | rng.getrandbits(14)
    return PacketDesc(**kw)


def opcodes_for(size: int) -> list[Opcode]:
    out = []
    for op, info in OPCODE_INFO.items():
        if info.fixed_payload_len is not None:
            if info.fixed_payload_len == size:
                out.append(op)
        elif size == 0 or info.has_payload:
            out.append(op)
    return out


def plan(width: int, level: str, rng: random.Random) -> list[tuple[PacketDesc, bytes]]:
    """The packets of a sweep. ``ci``: every residue mod W/8 and every listed size in every mode,
    every opcode in every mode; ``full``: the whole mode x opcode x size cross product."""
    lanes = width // 8
    sizes = sorted(set(range(lanes)) | set(LISTED_SIZES) | {lanes + r for r in range(0, lanes, 3)})
    cases = []
    if level == "full":
        for mode in MODES:
            for size in sizes:
                for op in opcodes_for(size):
                    cases.append((mode, op, size))
    else:
        for mode in MODES:
            for k, size in enumerate(sizes):
                ops = opcodes_for(size)
                cases.append((mode, ops[(k * 7 + mode) % len(ops)], size))
            for op in OPCODE_INFO:
                info = OPCODE_INFO[op]
                size = info.fixed_payload_len if info.fixed_payload_len is not None else (
                    rng.randrange(0, 3 * lanes) if info.has_payload else 0)
                cases.append((mode, op, size))
        for _ in range(20):
            size = rng.randrange(0, MAX_PAYLOAD + 1)
            ops = opcodes_for(size)
            cases.append((rng.choice(MODES), rng.choice(ops), size))
    rng.shuffle(cases)
    return [(random_desc(rng, mode, op, size), rng.randbytes(size)) for mode, op, size in cases]


# --- checks ------------------------------------------------------------------------------------------

def scapy_icrc_ok(frame: bytes) -> bool:
    """scapy.contrib.roce's own ICRC over a RoCEv2 frame equals the ICRC the frame carries."""
    from scapy.contrib.roce import BTH
    from scapy.layers.l2 import Ether

    pkt = Ether(frame)
    if BTH not in pkt:
        return False
    pkt[BTH].icrc = None
    return bytes(pkt) == frame


# Wireshark's heuristic dissectors for InfiniBand payloads (tshark 4.0 short names). The payloads
# here are random bytes, which these would read as their protocols and call malformed.
_PAYLOAD_HEURISTICS = ("fc_infiniband", "sdp_infiniband", "iser_infiniband", "rpcrdma_infiniband",
                       "smb_direct_infiniband", "smcr_infiniband", "eth_over_ib", "lnet_ib", "mellanox_eoib",
                       "drbd_rdma", "nvme_rdma")


def check_pcaps(frames_by_mode: dict, folder: Path, log) -> None:
    """Write one pcap per mode with the model's writer and have tshark read it back.

    tshark is a system package: CI installs it and the check fails there without it; elsewhere a
    missing tshark is logged and the pcaps are still written."""
    from rnic.model.pcap import write_pcap_for_mode

    tshark = shutil.which("tshark")
    assert tshark is not None or not os.environ.get("CI"), "CI must have tshark (.ci/run installs it)"
    disable = []
    if tshark is not None:
        path = folder / "packet_builder_probe.pcap"
        write_pcap_for_mode(path, LinkMode.ROCEV2_IPV4, [])
        for name in _PAYLOAD_HEURISTICS:  # keep the names this tshark knows
            ok = subprocess.run([tshark, "--disable-heuristic", name, "-r", str(path)],
                                capture_output=True, text=True, timeout=60).returncode == 0
            if ok:
                disable += ["--disable-heuristic", name]
    for mode, frames in frames_by_mode.items():
        if mode in (LinkMode.ROCEV2_IPV4, LinkMode.ROCEV2_IPV6):
            # Wireshark hands a UDP datagram to the dissector of its lower port: with a source port
            # below 4791 (e.g. 520, RIP) the payload is read as that protocol, not as RoCEv2.
            kept = [f for f in frames if parse_frame(LinkMode(mode), f)[0].udp_sport > ROCEV2_UDP_PORT]
            if len(kept) < len(frames):
                log.info("%s: %d frames with a UDP source port below %d not given to tshark",
                         LinkMode(mode).slug, len(frames) - len(kept), ROCEV2_UDP_PORT)
            frames = kept
        if not frames:
            continue
        path = folder / f"packet_builder_{LinkMode(mode).slug}.pcap"
        write_pcap_for_mode(path, LinkMode(mode), frames)
        if tshark is None:
            log.warning("tshark not found: %s not checked", path)
            continue
        out = subprocess.run([tshark, "-r", str(path), "-V", *disable], capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, f"tshark failed on {path}: {out.stderr}"
        text = out.stdout + out.stderr
        assert "Malformed" not in text and "malformed" not in text, f"tshark: malformed packet in {path}"
        log.info("tshark read %s: %d frames, no malformed packet", path.name, len(frames))


if cocotb is not None:
    from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource

    from rnic.sim import tb as sim_tb

    class TB:
        def __init__(self, dut, seed: int):
            self.dut = dut
            self.rng = random.Random(seed)
            self.width = len(dut.m_axis__tdata)
            self.lanes = self.width // 8
            self.desc_bytes = len(dut.s_desc__tdata) // 8
            sim_tb.start_clock(dut)
            self.desc = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_desc", bus_separator="__"),
                                        dut.clk, dut.rst)
            self.payload = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_payload", bus_separator="__"),
                                           dut.clk, dut.rst)
            self.sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis", bus_separator="__"),
                                      dut.clk, dut.rst)
            for log in (self.desc.log, self.payload.log, self.sink.log):
                log.setLevel("WARNING")
            dut.error_clear.value = 0
            self.protocol_errors = []
            cocotb.start_soon(self._watch_output())

        def set_pauses(self, prob_in: float, prob_out: float) -> None:
            sim_tb.set_pause(self.desc, prob_in, self.rng)
            sim_tb.set_pause(self.payload, prob_in, self.rng)
            sim_tb.set_pause(self.sink, prob_out, self.rng)

        async def reset(self) -> None:
            await sim_tb.reset(self.dut, 3, after=2)

        async def _watch_output(self) -> None:
            """Stream rule on m_axis: once valid, valid and payload hold until the transfer."""
            d = self.dut
            held = None
            while True:
                await RisingEdge(d.clk)
                await ReadOnly()
                if held is not None:
                    now = (int(d.m_axis__tvalid.value), int(d.m_axis__tdata.value), int(d.m_axis__tkeep.value),
                           int(d.m_axis__tlast.value), int(d.m_axis__tuser.value))
                    if now != held:
                        self.protocol_errors.append("m_axis payload/valid changed before the transfer")
                if int(d.m_axis__tvalid.value) and not int(d.m_axis__tready.value):
                    held = (1, int(d.m_axis__tdata.value), int(d.m_axis__tkeep.value),
                            int(d.m_axis__tlast.value), int(d.m_axis__tuser.value))
                else:
                    held = None

        async def send(self, desc: PacketDesc, payload: bytes | None) -> None:
            await self.desc.send(AxiStreamFrame(desc.to_int().to_bytes(self.desc_bytes, "little")))
            if payload:
                await self.payload.send(AxiStreamFrame(payload))

        async def recv(self):
            frame = await self.sink.recv()
            tuser = frame.tuser
            if isinstance(tuser, (int, bool)) or tuser is None:
                users = [int(tuser or 0)]
            else:
                users = [int(u) for u in tuser]
            return bytes(frame.tdata), users

        async def expect_frame(self, expected: bytes, *, aborted: bool = False, what: str = "") -> bytes:
            got, users = await self.recv()
            if got != expected:
                first = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b),
                             min(len(got), len(expected)))
                raise AssertionError(f"{what}: frame differs at byte {first} (got {len(got)} bytes, "
                                     f"expected {len(expected)})\n got {got.hex()}\n exp {expected.hex()}")
            # tuser comes per byte (cocotbext-axi), or one value for the whole frame
            if len(users) == len(got):
                tail = len(got) - self.lanes * ((len(got) - 1) // self.lanes)
                head, last = users[:len(got) - tail], set(users[len(got) - tail:])
            else:
                head, last = [], set(users)
            assert last == {int(aborted)}, f"{what}: tuser on the last beat is {last}, expected {int(aborted)}"
            assert not any(head), f"{what}: tuser set before the last beat"
            return got

        async def finish(self) -> None:
            await ClockCycles(self.dut.clk, 50)
            assert self.sink.empty(), "sink not empty: extra frames came out"
            assert not self.protocol_errors, self.protocol_errors[:3]

    def _level() -> str:
        return os.environ.get("PB_SWEEP", "ci")

    @cocotb.test()
    async def test_sweep(dut):
        """Every link mode x opcode form x payload size (CI subset or full), random valid/ready."""
        tb = TB(dut, sim_tb.seed(dut))
        dut._log.info("width %d, sweep %s", tb.width, _level())
        await tb.reset()
        tb.set_pauses(0.3, 0.3)
        packets = plan(tb.width, _level(), tb.rng)
        dut._log.info("%d packets", len(packets))

        async def producer():
            for desc, payload in packets:
                await tb.send(desc, payload)

        cocotb.start_soon(producer())
        by_mode = {m: [] for m in MODES}
        for n, (desc, payload) in enumerate(packets):
            expected = build_frame(desc, payload)
            what = (f"packet {n}: {LinkMode(desc.mode).slug} {Opcode(desc.opcode).name} "
                    f"payload {desc.payload_len} vlan {desc.vlan_present}")
            got = await tb.expect_frame(expected, what=what)
            if desc.mode in (LinkMode.ROCEV2_IPV4, LinkMode.ROCEV2_IPV6):
                assert scapy_icrc_ok(got), f"{what}: scapy disagrees with the ICRC"
            by_mode[desc.mode].append(got)
        await tb.finish()
        assert int(dut.error.value) == 0, f"error flags {int(dut.error.value):#x} after valid traffic"
        check_pcaps(by_mode, Path.cwd(), dut._log)

    @cocotb.test()
    async def test_back_to_back(dut):
        """No pauses anywhere: the output carries one beat per clock through frame boundaries."""
        tb = TB(dut, sim_tb.seed(dut) + 1)
        await tb.reset()
        tb.set_pauses(0, 0)
        # latency of an empty pipeline: descriptor transfer -> first frame beat valid
        desc = random_desc(tb.rng, LinkMode.ROCEV2_IPV4, Opcode.RC_ACKNOWLEDGE, 0)
        await tb.send(desc, b"")
        cycle = start = None
        while True:
            await RisingEdge(dut.clk)
            await ReadOnly()
            cycle = (cycle or 0) + 1
            if start is None and int(dut.s_desc__tvalid.value) and int(dut.s_desc__tready.value):
                start = cycle
            if int(dut.m_axis__tvalid.value):
                break
        dut._log.info("latency (descriptor transfer -> first beat valid): %d clocks", cycle - start)
        await tb.expect_frame(build_frame(desc, b""), what="latency probe")
        for size in (0, 1, 63, 64, 256):
            for mode in MODES:
                packets = [(random_desc(tb.rng, mode, Opcode.RC_SEND_ONLY, size), tb.rng.randbytes(size))
                           for _ in range(8)]
                # queue everything first, then let the builder go
                for desc, payload in packets:
                    await tb.send(desc, payload)
                beats = sum(-(-len(build_frame(d, p)) // tb.lanes) for d, p in packets)
                first = None
                count = 0
                last_cycle = 0
                cycle = 0
                while count < beats:
                    await RisingEdge(dut.clk)
                    await ReadOnly()
                    cycle += 1
                    if int(dut.m_axis__tvalid.value) and int(dut.m_axis__tready.value):
                        count += 1
                        if first is None:
                            first = cycle
                        last_cycle = cycle
                for desc, payload in packets:
                    await tb.expect_frame(build_frame(desc, payload), what=f"b2b {LinkMode(mode).slug} {size}")
                span = last_cycle - first + 1
                assert span == beats, f"{LinkMode(mode).slug} payload {size}: {beats} beats took {span} clocks"
                await RisingEdge(dut.clk)
        await tb.finish()

    @cocotb.test()
    async def test_abort(dut):
        """Bad descriptors and payload length mismatches: aborted frame, sticky flag, next frame fine."""
        tb = TB(dut, sim_tb.seed(dut) + 2)
        await tb.reset()
        tb.set_pauses(0.2, 0.2)
        rng = tb.rng
        lanes = tb.lanes

        async def good(mode=LinkMode.ROCEV2_IPV4, size=None):
            size = rng.randrange(0, 3 * lanes) if size is None else size
            desc = random_desc(rng, mode, Opcode.RC_SEND_ONLY, size)
            payload = rng.randbytes(size)
            await tb.send(desc, payload)
            await tb.expect_frame(build_frame(desc, payload), what="frame after an abort")

        async def flags_then_clear(expect: int):
            await ClockCycles(dut.clk, 2)
            assert int(dut.error.value) == expect, f"error flags {int(dut.error.value):#x}, expected {expect:#x}"
            dut.error_clear.value = expect
            await RisingEdge(dut.clk)
            dut.error_clear.value = 0
            await ClockCycles(dut.clk, 1)
            assert int(dut.error.value) == 0

        BAD_MODE, TOO_LONG, EARLY, LATE = 1, 2, 4, 8
        for mode in MODES:
            # bad link mode, with and without payload: header-only IPv4 frame, payload dropped
            for size in (0, 5, lanes * 2 + 3):
                desc = random_desc(rng, 5 + rng.randrange(3), Opcode.RC_SEND_ONLY, size)
                await tb.send(desc, rng.randbytes(size))
                ref = PacketDesc(**{**desc.__dict__, "mode": LinkMode.ROCEV2_IPV4, "payload_len": 0})
                await tb.expect_frame(build_frame(ref, b""), aborted=True, what=f"bad mode, payload {size}")
                await flags_then_clear(BAD_MODE)
                await good(mode)
            # payload_len beyond MAX_PAYLOAD: header-only frame, its payload dropped through last
            for size in (MAX_PAYLOAD + 1, MAX_PAYLOAD + 1 + rng.randrange(300)):
                desc = random_desc(rng, mode, Opcode.RC_SEND_ONLY, size)
                await tb.send(desc, rng.randbytes(size))
                ref = PacketDesc(**{**desc.__dict__, "payload_len": 0})
                await tb.expect_frame(build_frame(ref, b""), aborted=True, what=f"too long {size}")
                await flags_then_clear(TOO_LONG)
                await good(mode)
            # payload ends early: the frame keeps its declared length, missing bytes are zeros
            for size, short in ((lanes * 3 + 5, lanes + 2), (lanes * 2, 1), (lanes + 1, lanes), (9, 8)):
                desc = random_desc(rng, mode, Opcode.RC_SEND_ONLY, size)
                payload = rng.randbytes(short)
                await tb.send(desc, payload)
                await tb.expect_frame(build_frame(desc, payload + bytes(size - short)), aborted=True,
                                      what=f"early {short}/{size}")
                await flags_then_clear(EARLY)
                await good(mode)
            # payload goes on past its length: the declared bytes go out, the rest is dropped
            for size, long in ((lanes + 3, lanes * 4), (lanes, lanes + 1), (5, 7), (1, lanes * 2 + 1)):
                desc = random_desc(rng, mode, Opcode.RC_SEND_ONLY, size)
                payload = rng.randbytes(long)
                await tb.send(desc, payload)
                await tb.expect_frame(build_frame(desc, payload[:size]), aborted=True, what=f"late {long}/{size}")
                await flags_then_clear(LATE)
                await good(mode, size=rng.randrange(1, 2 * lanes))
        # several aborts back to back, no waiting in between
        items = []
        for k in range(12):
            kind = k % 4
            mode = rng.choice(MODES)
            size = rng.randrange(1, 3 * lanes)
            if kind == 0:
                desc = random_desc(rng, 6, Opcode.RC_SEND_ONLY, size)
                payload = rng.randbytes(size)
                exp = build_frame(PacketDesc(**{**desc.__dict__, "mode": 0, "payload_len": 0}), b"")
            elif kind == 1:
                desc = random_desc(rng, mode, Opcode.RC_SEND_ONLY, size)
                payload = rng.randbytes(size + 1 + rng.randrange(lanes))
                exp = build_frame(desc, payload[:size])
            elif kind == 2:
                desc = random_desc(rng, mode, Opcode.RC_SEND_ONLY, size + 2)
                payload = rng.randbytes(size)
                exp = build_frame(desc, payload + bytes(2))
            else:
                desc = random_desc(rng, mode, Opcode.RC_SEND_ONLY, size)
                payload = rng.randbytes(size)
                exp = build_frame(desc, payload)
            items.append((desc, payload, exp, kind != 3))
        for desc, payload, _, _ in items:
            await tb.send(desc, payload)
        for n, (_, _, exp, aborted) in enumerate(items):
            await tb.expect_frame(exp, aborted=aborted, what=f"mixed abort {n}")
        await tb.finish()
        assert int(dut.error.value) == BAD_MODE | EARLY | LATE


# --- pytest side -------------------------------------------------------------------------------------

def _run(width: int, level: str, testcase: str | None = None) -> None:
    from rnic.hdl.packet_builder import PacketBuilderAxis
    from rnic.sim.toolchain import build, run, seed_from_env

    # -O0: compiling the builder's model at -Os takes longer than all of its CI tests (docs/toolchain.md)
    b = build(lambda: PacketBuilderAxis(width), "packet_builder", f"packet_builder-w{width}", opt="-O0")
    run(b, "test_packet_builder", seed=seed_from_env(), testcase=testcase,
        extra_env={"PB_SWEEP": level}, test_dir=Path(__file__).resolve().parent)


@pytest.mark.parametrize("width", [64, 512])
def test_packet_builder(width):
    _run(width, "ci")


@pytest.mark.slow
@pytest.mark.parametrize("width", [64, 128, 256, 512])
def test_packet_builder_full_sweep(width):
    _run(width, "full", testcase="test_sweep")
