"""The whole engine checking itself on an FPGA: host memory in block RAM, a register script, checkers.

:class:`SelfTest` wraps :class:`rnic.hdl.rnic.Rnic` with everything a board needs to run it alone.
The golden model writes the test at elaboration time: :func:`selftest_workload` lays out QPs, CQs,
WQEs and payload in a 32 KiB :data:`SELFTEST_MAP`, the model runs it, and its results become ROMs.

* :class:`AxiRam` is the host memory: the workload's image as the block RAM's initial contents,
  answering the engine's AXI4 master (INCR bursts, any ``size``, ``wstrb``; DECERR beyond the RAM).
  A back-door port lets the sequencer restore and read it while the engine is quiet.
* The **sequencer** restores the writable regions (QP and CQ context tables), so every reset
  reruns the same test, then plays a **register script** over AXI4-Lite: the configuration and
  doorbell writes of the workload, ``CONTROL.ENABLE``, a poll of ``STATUS.IDLE``, a QP context
  FLUSH, and a read of every register the model predicts (``CHECKED_REGS``) against its value.
  Then it reads the writable regions back and compares them with the model's host memory
  (contexts written back, CQEs).
* The **frame checker** takes the engine's frames with pseudo-random back-pressure and compares
  every beat (data under ``tkeep``, ``tkeep``, ``tlast``, ``tuser`` = 0) with the model's frames.

``done`` rises when the script and the memory check have finished and all frames have arrived,
or at the first failure; ``passed`` = ``done & ~failed``. ``fail_code`` (:class:`Fail`) says which
check failed and ``fail_info`` where (the beat, script step or memory word). A run that has not
finished after ``timeout`` clocks fails with TIMEOUT, so the test never hangs. ``inject`` (3 bits)
makes one checker see a wrong expectation (bit 0 frames, 1 registers, 2 memory), to show on a
board or in simulation that each checker can fail.
"""

from __future__ import annotations

import enum
import random

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ..hdl.bus import AXI4Signature
from ..hdl.rnic import Rnic
from ..model.config import RnicConfig
from ..model.descriptor import LinkMode
from ..model.qpc import PathMtu, ServiceType
from ..model.regs import REG
from ..model.wqe import WqeFlags, WqeOpcode
from ..sim.scenario import CHECKED_REGS, MemoryMap, Workload, WorkloadBuilder, expected

__all__ = ["SELFTEST_MAP", "Fail", "Op", "selftest_workload", "AxiRam", "SelfTest"]

#: 32 KiB of host memory: QP contexts, CQ contexts, 16-entry CQ and send rings, 16 KiB of payload.
SELFTEST_MAP = MemoryMap(size=0x8000, qpc_base=0x0000, cq_base=0x0400, cq_rings=0x0800, cq_stride=0x200,
                         sq_rings=0x2000, sq_stride=0x400, buffers=0x4000)


class Fail(enum.IntEnum):
    """``fail_code``: which check failed first."""
    NONE = 0
    FRAME = 1       # a beat differs from the model's (or is aborted, or is one too many); info: beat
    REGISTER = 2    # a register read differs, or an AXI4-Lite error response; info: script step
    MEMORY = 3      # host memory after the run differs from the model's; info: word of the check
    TIMEOUT = 4     # not finished after ``timeout`` clocks; info: the sequencer's state


class Op(enum.IntEnum):
    """Register script operations."""
    WRITE = 0       # write value
    POLL = 1        # read until (data & mask) == value
    CHECK = 2       # read once; (data & mask) != value fails
    END = 3


def selftest_workload(seed: int = 1) -> Workload:
    """One QP per link mode (RC, UC and UD among them), messages of one to four packets at MTU
    256, every opcode form, inline data, and a sixth QP whose oversized UD SEND fails
    (LOC_LEN_ERR, QP to ERROR) and flushes the WQE behind it."""
    rng = random.Random(seed)
    services = (ServiceType.RC, ServiceType.UC, ServiceType.UD, ServiceType.RC, ServiceType.RC)
    b = WorkloadBuilder(len(LinkMode) + 1, rng=rng, quota=2, memory_map=SELFTEST_MAP)
    work = {
        ServiceType.RC: [(WqeOpcode.SEND, 0, 0), (WqeOpcode.SEND_WITH_IMM, 300, 0), (WqeOpcode.RDMA_WRITE, 700, 0),
                         (WqeOpcode.RDMA_WRITE_WITH_IMM, 64, 0), (WqeOpcode.RDMA_READ, 1000, 0),
                         (WqeOpcode.SEND, 11, WqeFlags.INLINE)],
        ServiceType.UC: [(WqeOpcode.SEND, 513, 0), (WqeOpcode.RDMA_WRITE_WITH_IMM, 1, 0),
                         (WqeOpcode.SEND, 7, WqeFlags.INLINE)],
        ServiceType.UD: [(WqeOpcode.SEND, 100, 0), (WqeOpcode.SEND_WITH_IMM, 256, 0),
                         (WqeOpcode.SEND, 5, WqeFlags.INLINE)],
    }
    for qpn, (mode, service) in enumerate(zip(LinkMode, services)):
        b.cq(qpn)
        b.qp(qpn, service=service, mode=mode, mtu=PathMtu.MTU_256)
        for i, (op, length, flags) in enumerate(work[service]):
            b.post(qpn, op, length, flags=flags | (WqeFlags.SIGNALED if i % 2 == 0 or flags else 0))
    bad = len(LinkMode)
    b.cq(bad)
    b.qp(bad, service=ServiceType.UD, mode=LinkMode.ROCEV2_IPV6, mtu=PathMtu.MTU_256)
    b.post(bad, WqeOpcode.SEND, 300)                      # longer than a UD packet: LOC_LEN_ERR
    b.post(bad, WqeOpcode.SEND, 10)                       # flushed
    return b.build()


class AxiRam(wiring.Component):
    """Block RAM as an AXI4 slave, plus a back door.

    One read burst and one write burst at a time, one beat per clock each; INCR bursts of any
    ``size`` (narrow beats return the whole word, writes use ``wstrb``). A beat whose address is at
    or beyond ``size`` bytes reads as 0 with DECERR, or is not written and the burst's BRESP is
    DECERR. While ``bd_sel`` is 1 the back door owns the RAM (``bd_addr`` a word index; ``bd_rdata``
    one clock after; ``bd_we`` writes ``bd_wdata`` whole); the AXI side must then be quiet.
    """

    def __init__(self, size: int, init: bytes = b"", *, width: int, id_width: int = 6):
        self.size, self.width = size, width
        self.beat = width // 8
        self.depth = size // self.beat
        exact_log2(self.depth)
        words = [int.from_bytes(init[i:i + self.beat], "little") for i in range(0, len(init), self.beat)]
        self._mem = Memory(shape=width, depth=self.depth, init=words)
        super().__init__({
            "s_axi": In(AXI4Signature(addr_width=64, data_width=width, id_width=id_width)),
            "bd_sel": In(1), "bd_addr": In(range(self.depth)), "bd_we": In(1), "bd_wdata": In(width),
            "bd_rdata": Out(width),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = self._mem
        rp = mem.read_port()
        wp = mem.write_port(granularity=8)
        s = self.s_axi
        lsb = exact_log2(self.beat)

        # read: one burst at a time; the read port's enable holds a beat the master has not taken
        r_busy, r_left = Signal(), Signal(9)
        r_addr, r_size, r_id = Signal(64), Signal(3), Signal(len(s.arid))
        o_valid, o_last, o_err, o_id = Signal(), Signal(), Signal(), Signal(len(s.arid))
        advance = ~o_valid | s.rready
        m.d.comb += [s.arready.eq(~r_busy & ~self.bd_sel),
                     s.rvalid.eq(o_valid), s.rlast.eq(o_last), s.rresp.eq(Mux(o_err, 3, 0)), s.rid.eq(o_id),
                     s.rdata.eq(Mux(o_err, 0, rp.data)), self.bd_rdata.eq(rp.data)]
        with m.If(s.arvalid & s.arready):
            m.d.sync += [r_busy.eq(1), r_addr.eq(s.araddr), r_left.eq(s.arlen + 1), r_size.eq(s.arsize),
                         r_id.eq(s.arid)]
        with m.If(self.bd_sel):
            m.d.comb += [rp.en.eq(1), rp.addr.eq(self.bd_addr)]
        with m.Else():
            m.d.comb += [rp.en.eq(advance), rp.addr.eq(r_addr[lsb:])]
        with m.If(advance):
            with m.If(r_busy):
                m.d.sync += [o_valid.eq(1), o_last.eq(r_left == 1), o_err.eq(r_addr >= self.size), o_id.eq(r_id),
                             r_addr.eq(r_addr + (Const(1, 8) << r_size)), r_left.eq(r_left - 1)]
                with m.If(r_left == 1):
                    m.d.sync += r_busy.eq(0)
            with m.Else():
                m.d.sync += o_valid.eq(0)

        # write: one burst at a time, then its response
        w_busy, b_pend, w_err = Signal(), Signal(), Signal()
        w_addr, w_size, w_id = Signal(64), Signal(3), Signal(len(s.awid))
        m.d.comb += [s.awready.eq(~w_busy & ~b_pend & ~self.bd_sel), s.wready.eq(w_busy),
                     s.bvalid.eq(b_pend), s.bresp.eq(Mux(w_err, 3, 0)), s.bid.eq(w_id)]
        with m.If(s.awvalid & s.awready):
            m.d.sync += [w_busy.eq(1), w_addr.eq(s.awaddr), w_size.eq(s.awsize), w_id.eq(s.awid), w_err.eq(0)]
        out_of_range = w_addr >= self.size
        with m.If(self.bd_sel):
            m.d.comb += [wp.addr.eq(self.bd_addr), wp.data.eq(self.bd_wdata),
                         wp.en.eq(Mux(self.bd_we, (1 << self.beat) - 1, 0))]
        with m.Else():
            m.d.comb += [wp.addr.eq(w_addr[lsb:]), wp.data.eq(s.wdata),
                         wp.en.eq(Mux(s.wvalid & w_busy & ~out_of_range, s.wstrb, 0))]
        with m.If(s.wvalid & s.wready):
            m.d.sync += [w_addr.eq(w_addr + (Const(1, 8) << w_size)), w_err.eq(w_err | out_of_range)]
            with m.If(s.wlast):
                m.d.sync += [w_busy.eq(0), b_pend.eq(1)]
        with m.If(s.bvalid & s.bready):
            m.d.sync += b_pend.eq(0)
        return m


def _beats(frames: list[bytes], beat: int) -> list[tuple[int, int, int]]:
    """``(data, keep, last)`` per stream beat of these frames."""
    out = []
    for f in frames:
        for i in range(0, len(f), beat):
            chunk = f[i:i + beat]
            out.append((int.from_bytes(chunk, "little"), (1 << len(chunk)) - 1, int(i + beat >= len(f))))
    return out


class SelfTest(wiring.Component):
    """``Rnic`` plus host memory, register script and checkers (see the module docstring).

    Parameters
    ----------
    workload : Workload
        Laid out in a :class:`MemoryMap` whose ``size`` is the on-chip RAM (default
        :func:`selftest_workload`).
    sink_pause : bool
        Hold the frame sink not ready one clock in four, pseudo-randomly.
    timeout : int
        Clocks from reset after which an unfinished run fails.
    config : RnicConfig
        The engine under test; the golden model that writes the checkers is built for the same one.
    """

    def __init__(self, workload: Workload | None = None, *, sink_pause: bool = True, timeout: int = 1 << 22,
                 config: RnicConfig = RnicConfig()):
        self.config = config
        self.workload = w = workload or selftest_workload()
        self.width = width = config.width
        self.sink_pause, self.timeout = sink_pause, timeout
        self.model = model = expected(w, config)
        beat = width // 8
        size = w.memory_map.size
        image = w.mem.peek(0, size)
        self.image = image
        self.expected_frames = [p.frame() for p in model.packets]
        self.beats = _beats(self.expected_frames, beat)
        # (word, data) of the writable regions: before the run (restored at reset) and after it
        words = sorted({a // beat for addr, n in w.regions for a in range(addr & -beat, addr + n, beat)})
        self.restore = [(i, int.from_bytes(image[i * beat:(i + 1) * beat], "little")) for i in words]
        self.expect = [(i, int.from_bytes(model.mem.peek(i * beat, beat), "little")) for i in words]
        script = [(Op.WRITE, off, val, 0) for off, val in w.writes]
        script += [(Op.POLL, REG["STATUS"].offset, 1, 1),
                   (Op.WRITE, REG["QPC_CMD"].offset, 2, 0),                    # FLUSH
                   (Op.POLL, REG["QPC_CMD_STATUS"].offset, 0, 1),
                   (Op.CHECK, REG["QPC_CMD_STATUS"].offset, 0, 0xFFFF_FFFF)]
        script += [(Op.CHECK, REG[name].offset, model.reg(name), 0xFFFF_FFFF) for name in CHECKED_REGS]
        script.append((Op.END, 0, 0, 0))
        self.script = script
        super().__init__({
            "inject": In(3),
            "done": Out(1), "passed": Out(1), "failed": Out(1), "fail_code": Out(3), "fail_info": Out(16),
            "frames": Out(16), "irq": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        W, beat = self.width, self.width // 8
        m.submodules.rnic = rnic = Rnic(self.config)
        m.submodules.ram = ram = AxiRam(self.workload.memory_map.size, self.image, width=W,
                                        id_width=len(rnic.m_axi.arid))
        wiring.connect(m, rnic.m_axi, ram.s_axi)
        m.d.comb += self.irq.eq(rnic.irq)

        fail_code, fail_info = Signal(3), Signal(16)
        fail_now, fail_now_code, fail_now_info = Signal(), Signal(3), Signal(16)
        m.d.comb += [self.fail_code.eq(fail_code), self.fail_info.eq(fail_info), self.failed.eq(fail_code != 0)]
        with m.If(fail_now & (fail_code == 0)):
            m.d.sync += [fail_code.eq(fail_now_code), fail_info.eq(fail_now_info)]

        def fail(code, info):
            m.d.comb += [fail_now.eq(1), fail_now_code.eq(code), fail_now_info.eq(info)]

        # --- frame checker ---------------------------------------------------------------------------
        n_beats = len(self.beats)
        beat_layout = data.StructLayout({"data": W, "keep": beat, "last": 1})
        exp_rom = Memory(shape=beat_layout, depth=max(n_beats, 2),
                         init=[{"data": d, "keep": k, "last": last} for d, k, last in self.beats])
        m.submodules.exp_rom = exp_rom
        exp_rd = exp_rom.read_port()
        idx = Signal(range(n_beats + 2))
        lfsr = Signal(16, init=0xACE1)
        m.d.sync += lfsr.eq(Cat(lfsr[1:], lfsr[0] ^ lfsr[2] ^ lfsr[3] ^ lfsr[5]))
        axis = rnic.m_axis
        m.d.comb += axis.tready.eq((lfsr[:2] != 0) if self.sink_pause else 1)
        fire = axis.tvalid & axis.tready
        m.d.comb += [exp_rd.en.eq(1), exp_rd.addr.eq(Mux(fire, idx + 1, idx))]
        e = exp_rd.data
        keep_mask = Cat(*[Mux(axis.tkeep[i], 0xFF, 0) for i in range(beat)])
        want = e.data ^ self.inject[0]
        ok = ((idx < n_beats) & ((axis.tdata & keep_mask) == (want & keep_mask)) & (axis.tkeep == e.keep)
              & (axis.tlast == e.last) & ~axis.tuser)
        frames = Signal(16)
        m.d.comb += self.frames.eq(frames)
        with m.If(fire):
            m.d.sync += idx.eq(Mux(idx > n_beats, idx, idx + 1))
            with m.If(axis.tlast):
                m.d.sync += frames.eq(frames + 1)
            with m.If(~ok):
                fail(Fail.FRAME, idx)

        # --- sequencer: restore, register script, memory check ----------------------------------------
        def rom(name, entries, layout):
            mem = Memory(shape=layout, depth=max(len(entries), 2), init=entries)
            m.submodules[name] = mem
            return mem.read_port()

        word_bits = len(ram.bd_addr)
        pair = data.StructLayout({"word": word_bits, "data": W})
        rest_rd = rom("restore_rom", [{"word": a, "data": d} for a, d in self.restore], pair)
        exp_mem_rd = rom("expect_rom", [{"word": a, "data": d} for a, d in self.expect], pair)
        step_layout = data.StructLayout({"op": 2, "addr": 16, "value": 32, "mask": 32})
        scr_rd = rom("script_rom",
            [{"op": int(op), "addr": a, "value": v, "mask": k} for op, a, v, k in self.script], step_layout)
        n_words = len(self.restore)
        ptr = Signal(range(max(n_words, len(self.script)) + 1))
        for rd in (rest_rd, exp_mem_rd, scr_rd):
            m.d.comb += [rd.en.eq(1), rd.addr.eq(ptr)]
        step = scr_rd.data

        axil = rnic.s_axil
        m.d.comb += [axil.awaddr.eq(step.addr), axil.araddr.eq(step.addr), axil.wdata.eq(step.value),
                     axil.wstrb.eq(0xF)]
        got_aw, got_w = Signal(), Signal()
        seq_done = Signal()
        rdata = Signal(32)
        clocks = Signal(range(self.timeout + 1))
        with m.If(clocks < self.timeout):
            m.d.sync += clocks.eq(clocks + 1)

        with m.FSM() as fsm:
            with m.State("Restore"):
                m.d.comb += [ram.bd_sel.eq(1), ram.bd_addr.eq(rest_rd.data.word), ram.bd_wdata.eq(rest_rd.data.data)]
                # the ROM output is valid one clock after ptr moves: write on every other clock
                phase = Signal()
                m.d.sync += phase.eq(~phase)
                with m.If(phase):
                    m.d.comb += ram.bd_we.eq(1)
                    m.d.sync += ptr.eq(ptr + 1)
                    with m.If(ptr == n_words - 1):
                        m.d.sync += ptr.eq(0)
                        m.next = "Fetch"
            with m.State("Fetch"):                                # script ROM output settles
                m.next = "Step"
            with m.State("Step"):
                with m.Switch(step.op):
                    with m.Case(Op.WRITE):
                        m.next = "Write"
                    with m.Case(Op.POLL, Op.CHECK):
                        m.next = "Read"
                    with m.Case(Op.END):
                        m.d.sync += ptr.eq(0)
                        m.next = "Mem-Fetch"
            with m.State("Write"):
                m.d.comb += [axil.awvalid.eq(~got_aw), axil.wvalid.eq(~got_w)]
                aw_now = got_aw | axil.awready
                w_now = got_w | axil.wready
                m.d.sync += [got_aw.eq(aw_now), got_w.eq(w_now)]
                with m.If(aw_now & w_now):
                    m.d.sync += [got_aw.eq(0), got_w.eq(0)]
                    m.next = "Write-B"
            with m.State("Write-B"):
                m.d.comb += axil.bready.eq(1)
                with m.If(axil.bvalid):
                    with m.If(axil.bresp != 0):
                        fail(Fail.REGISTER, ptr)
                    m.d.sync += ptr.eq(ptr + 1)
                    m.next = "Fetch"
            with m.State("Read"):
                m.d.comb += axil.arvalid.eq(1)
                with m.If(axil.arready):
                    m.next = "Read-R"
            with m.State("Read-R"):
                m.d.comb += axil.rready.eq(1)
                with m.If(axil.rvalid):
                    m.d.sync += rdata.eq(axil.rdata)
                    with m.If(axil.rresp != 0):
                        fail(Fail.REGISTER, ptr)
                    m.next = "Compare"
            with m.State("Compare"):
                want_reg = step.value ^ self.inject[1]
                match = (rdata & step.mask) == (want_reg & step.mask)
                with m.If(step.op == Op.POLL):
                    with m.If(match):
                        m.d.sync += ptr.eq(ptr + 1)
                        m.next = "Fetch"
                    with m.Else():
                        m.next = "Read"
                with m.Else():
                    with m.If(~match):
                        fail(Fail.REGISTER, ptr)
                    m.d.sync += ptr.eq(ptr + 1)
                    m.next = "Fetch"
            with m.State("Mem-Fetch"):                            # expect ROM output settles
                m.next = "Mem-Read"
            with m.State("Mem-Read"):
                m.d.comb += [ram.bd_sel.eq(1), ram.bd_addr.eq(exp_mem_rd.data.word)]
                m.next = "Mem-Compare"
            with m.State("Mem-Compare"):
                m.d.comb += ram.bd_sel.eq(1)
                with m.If(ram.bd_rdata != (exp_mem_rd.data.data ^ self.inject[2])):
                    fail(Fail.MEMORY, ptr)
                m.d.sync += ptr.eq(ptr + 1)
                with m.If(ptr == n_words - 1):
                    m.next = "Done"
                with m.Else():
                    m.next = "Mem-Fetch"
            with m.State("Done"):
                m.d.comb += seq_done.eq(1)

        all_frames = idx == n_beats
        with m.If((clocks == self.timeout) & ~(seq_done & all_frames)):
            fail(Fail.TIMEOUT, Cat(fsm.state, all_frames))
        m.d.comb += [self.done.eq((seq_done & all_frames) | self.failed),
                     self.passed.eq(seq_done & all_frames & ~self.failed)]
        return m
