"""Completion writer: CQEs into completion-queue rings, CQ consumer-index doorbells.

One command at a time, each a short sequence of AXI4 accesses to the CQ context table and the CQ
ring (``docs/engine.md``, "Completions"): read the CQ context (16 bytes, 2 beats), check it, write the
32-byte CQE (4 beats), then write context bytes 0-7 (1 beat, ``pi + 1`` and the state). A
``SET_CI`` command reads the context and writes bytes 0-7 back with the new consumer index. Every
error the model (:meth:`rnic.model.engine.EngineModel._complete`) reports is reported here in the
same order, one per clock on ``err``.
"""

from amaranth import Array, Const, Module, Mux, Signal
from amaranth.hdl import Assert
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

from ..model.regs import ErrBit
from ..model.wqe import CQE_FLAG_SQ, CQE_FIELDS, CQC_FIELDS, CqeStatus, CqState
from .bus import AXI4Signature
from .prim import by_state, round_robin

__all__ = ["CqOp", "cq_cmd_layout", "err_layout", "CqeWriter", "CqClientSignature", "CqShare", "connect_writer"]

MAX_LOG_RING = 15


class CqOp(enum.Enum, shape=1):
    CQE = 0      # write one CQE to CQ ``cqn``
    SET_CI = 1   # CQ_DB_CI: store ``ci`` in CQ context ``cqn``


#: One command. ``recv`` = 0: a send-queue completion (CQE flags = CQE_FLAG_SQ; ``imm``, ``flags``,
#: ``src_qp`` and ``slid`` ignored and written as 0); 1: a receive completion, those four from the command.
cq_cmd_layout = data.StructLayout({
    "op": CqOp, "cqn": 24, "ci": 16,
    "wr_id": 64, "byte_len": 32, "qpn": 24, "opcode": 8, "status": 8, "wqe_index": 16,
    "recv": 1, "imm": 32, "flags": 8, "src_qp": 24, "slid": 16,
})

#: One error report (ErrBit, the QPN or CQN it concerns, the CQE status involved or 0).
err_layout = data.StructLayout({"valid": 1, "bit": 4, "qpn": 24, "status": 8})

#: What a client of the completion writer sees (drive it as ``Out``): its commands and their ``done``,
#: and the writer's reports and counter strobes, which belong to the client whose command runs.
CqClientSignature = wiring.Signature({
    "cmd": Out(stream.Signature(cq_cmd_layout)),
    "done": In(stream.Signature(data.StructLayout({"qp_error": 1}))),
    "err": In(err_layout),
    "inc_cqe_count": In(1), "inc_cqe_drops": In(1), "inc_bus_errors": In(1),
})

cqe_layout = data.StructLayout({name: width for name, _, width in CQE_FIELDS})
_CQE_OFFSETS = {name: off for name, off, _ in CQE_FIELDS}
_CQC = {name: (off, width) for name, off, width in CQC_FIELDS}


class CqeWriter(wiring.Component):
    """Writes CQEs and consumer indices; one command at a time.

    Members
    -------
    cmd : In(stream of :data:`cq_cmd_layout`)
        Accepted only when idle; the writer then owns ``m_axi`` until ``done``.
    done : Out(stream of ``{"qp_error": 1}``)
        One per command. ``qp_error`` = 1: the CQE was dropped or took the CQ's last slot, so the
        QP must move to ERROR (the caller does that).
    cq_base, cq_size : In
        CQ_BASE (bits 4:0 ignored) and CQ_SIZE registers.
    m_axi : Out(AXI4Signature(64, 64, 4))
        One access at a time, ID 0.
    err : Out(:data:`err_layout`)
        Error reports, at most one per clock.
    inc_cqe_count, inc_cqe_drops, inc_bus_errors, cqe_written : Out(1)
        One-clock strobes for the counters and the interrupt moderation.

    FSM
    ---
    X-AW / X-W / X-B are one write burst (address, data beats, response); a bus error in X-B is
    reported (BUS_CQ) and goes where the row says.

    | State | Entered from | Leaves to | Waits for |
    |---|---|---|---|
    | Idle | reset, Done | Check-CQN | a command |
    | Check-CQN | Idle | Read-AR; Done (SET_CI, bad CQN); Drop (CQE, bad CQN) | one clock |
    | Read-AR | Check-CQN | Read-R | ``arready`` |
    | Read-R | Read-AR | Read-Check | the context's 2 beats |
    | Read-Check | Read-R | SetCI-AW; CQE-AW; Full-AW (ring full); Drop or Done (bus error, bad CQ) | one clock |
    | SetCI-AW..B | Read-Check | Done | the write |
    | Full-AW..B | Read-Check | Full-Report | the write (state ERROR) |
    | Full-Report | Full-B | Drop | one clock (CQ_OVERFLOW) |
    | CQE-AW..B | Read-Check | CQE-Ok; CQE-Failed (bus error) | the CQE's 4 beats |
    | CQE-Failed | CQE-B | Bad-AW | one clock |
    | Bad-AW..B | CQE-Failed | Drop | the write (state ERROR) |
    | CQE-Ok | CQE-B | Ctx-AW | one clock (``pi + 1``) |
    | Ctx-AW..B | CQE-Ok | Written; Drop (bus error) | the write |
    | Written | Ctx-B | Overflow-Report (last slot); Done | one clock |
    | Overflow-Report | Written | Done | one clock (the QP must go to ERROR) |
    | Drop | Check-CQN, Read-Check, Full-Report, Bad-B, Ctx-B | Done | one clock (CQE_DROPPED) |
    | Done | Check-CQN, Read-Check, SetCI-B, Written, Overflow-Report, Drop | Idle | ``done`` taken |
    """

    def __init__(self):
        super().__init__({
            "cmd": In(stream.Signature(cq_cmd_layout)),
            "done": Out(stream.Signature(data.StructLayout({"qp_error": 1}))),
            "cq_base": In(64),
            "cq_size": In(25),
            "m_axi": Out(AXI4Signature(addr_width=64, data_width=64, id_width=4)),
            "err": Out(err_layout),
            "inc_cqe_count": Out(1),
            "inc_cqe_drops": Out(1),
            "inc_bus_errors": Out(1),
            "cqe_written": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        axi = self.m_axi
        c = Signal(cq_cmd_layout)
        err_qpn = Signal(24)               # the QPN errors name: the CQN for SET_CI

        st = Signal(8)
        log_size = Signal(8)
        pi = Signal(16)
        ci = Signal(16)
        ring_base = Signal(64)
        overflow = Signal()
        qp_error = Signal()
        rbeat = Signal(1)
        rerr = Signal()
        wbeat = Signal(2)
        berr = Signal()

        # The addresses, the ring's fill and its size are flip-flops, loaded every clock from
        # registers that settle a clock before their users: ``c`` (Idle) before Read-AR, the
        # context's first beat (pi, ci, log_size) a beat before Read-Check, ring_base (the last
        # beat) and ``size`` a state before CQE-AW. No adder sits on the AXI address or a state decision.
        bad_cqn = Signal()                 # cqn >= CQ_SIZE, registered as Idle takes the command
        ctx_addr = Signal(64)
        size = Signal(17)
        used = Signal(16)
        slot_addr = Signal(64)
        m.d.sync += [
            ctx_addr.eq((self.cq_base & ~0x1F) + (c.cqn << 5)),
            size.eq(Const(1, 17) << log_size[:4]),
            used.eq(pi - ci),
            slot_addr.eq((ring_base & ~0x1F) + ((pi & (size - 1)[:16]) << 5)),
        ]

        cqe = Signal(cqe_layout)
        m.d.comb += [
            cqe.wr_id.eq(c.wr_id), cqe.byte_len.eq(Mux(overflow, 0, c.byte_len)), cqe.qpn.eq(c.qpn),
            cqe.opcode.eq(c.opcode), cqe.status.eq(Mux(overflow, CqeStatus.CQ_OVERFLOW, c.status)),
            cqe.flags.eq(Mux(c.recv, c.flags, CQE_FLAG_SQ)), cqe.wqe_index.eq(c.wqe_index),
            cqe.imm.eq(Mux(c.recv, c.imm, 0)), cqe.src_qp.eq(Mux(c.recv, c.src_qp, 0)),
            cqe.slid.eq(Mux(c.recv, c.slid, 0)),
            cqe.owner.eq(~(pi >> log_size[:4])[0]),
        ]
        cqe_bits = Signal(256)
        for name, off, width in CQE_FIELDS:
            m.d.comb += cqe_bits[off:off + width].eq(getattr(cqe, name))
        ctx_word = Signal(64)
        for name, sig in (("state", st), ("log_size", log_size), ("pi", pi), ("ci", ci)):
            off, width = _CQC[name]
            m.d.comb += ctx_word[off:off + width].eq(sig)

        # report() raises err.valid under its condition; the fields come from the state alone
        # (report_fields, after the FSM), so that only the valid bit waits for the decision
        def report(bit, status=0):
            m.d.comb += self.err.valid.eq(1)
            m.d.sync += Assert((self.err.bit == int(bit)) & (self.err.status == int(status)),
                               "completion: report fields by state\n")

        m.d.comb += [axi.arsize.eq(3), axi.arburst.eq(1), axi.awsize.eq(3), axi.awburst.eq(1),
                     axi.bready.eq(1), axi.rready.eq(1)]

        def write(prefix, addr, beats, beat_data, on_ok, on_err):
            """States ``prefix``-AW/-W/-B: one INCR burst; then ``on_ok()`` / ``on_err()`` (after
            the write response)."""
            with m.State(f"{prefix}-AW"):
                m.d.comb += [axi.awvalid.eq(1), axi.awaddr.eq(addr), axi.awlen.eq(beats - 1)]
                m.d.sync += [wbeat.eq(0), berr.eq(0)]
                with m.If(axi.awready):
                    m.next = f"{prefix}-W"
            with m.State(f"{prefix}-W"):
                m.d.comb += [axi.wvalid.eq(1), axi.wdata.eq(beat_data(wbeat)), axi.wstrb.eq(0xFF),
                             axi.wlast.eq(wbeat == beats - 1)]
                with m.If(axi.wready):
                    m.d.sync += wbeat.eq(wbeat + 1)
                    with m.If(wbeat == beats - 1):
                        m.next = f"{prefix}-B"
            with m.State(f"{prefix}-B"):
                with m.If(axi.bvalid):
                    with m.If(axi.bresp[1]):
                        m.d.comb += self.inc_bus_errors.eq(1)
                        report(ErrBit.BUS_CQ)
                        on_err()
                    with m.Else():
                        on_ok()

        def goto(state):
            def f():
                m.next = state
            return f

        with m.FSM() as fsm:
            with m.State("Idle"):
                m.d.comb += self.cmd.ready.eq(1)
                with m.If(self.cmd.valid):
                    m.d.sync += [c.eq(self.cmd.payload), overflow.eq(0), qp_error.eq(0),
                                 bad_cqn.eq(self.cmd.payload.cqn >= self.cq_size),
                                 err_qpn.eq(Mux(self.cmd.payload.op == CqOp.SET_CI, self.cmd.payload.cqn,
                                                 self.cmd.payload.qpn))]
                    m.next = "Check-CQN"
            with m.State("Check-CQN"):
                with m.If(bad_cqn):
                    with m.If(c.op == CqOp.SET_CI):
                        report(ErrBit.CQ_DB_BAD_CQN)
                        m.next = "Done"
                    with m.Else():
                        m.next = "Drop"
                with m.Else():
                    m.next = "Read-AR"
            with m.State("Read-AR"):
                m.d.comb += [axi.arvalid.eq(1), axi.araddr.eq(ctx_addr), axi.arlen.eq(1)]
                m.d.sync += [rbeat.eq(0), rerr.eq(0)]
                with m.If(axi.arready):
                    m.next = "Read-R"
            with m.State("Read-R"):
                with m.If(axi.rvalid):
                    m.d.sync += [rbeat.eq(1), rerr.eq(rerr | axi.rresp[1])]
                    with m.If(rbeat == 0):
                        m.d.sync += [st.eq(axi.rdata[0:8]), log_size.eq(axi.rdata[8:16]),
                                     pi.eq(axi.rdata[32:48]), ci.eq(axi.rdata[48:64])]
                    with m.Else():
                        m.d.sync += ring_base.eq(axi.rdata)
                    with m.If(axi.rlast):
                        m.next = "Read-Check"
            with m.State("Read-Check"):
                with m.If(rerr):
                    m.d.comb += self.inc_bus_errors.eq(1)
                    report(ErrBit.BUS_CQ)
                    with m.If(c.op == CqOp.SET_CI):
                        m.next = "Done"
                    with m.Else():
                        m.next = "Drop"
                with m.Elif(c.op == CqOp.SET_CI):
                    m.d.sync += ci.eq(c.ci)
                    m.next = "SetCI-AW"
                with m.Elif((st != CqState.ACTIVE) | (log_size == 0) | (log_size > MAX_LOG_RING)):
                    m.next = "Drop"
                with m.Elif(used >= size):
                    m.d.sync += st.eq(CqState.ERROR)
                    m.next = "Full-AW"
                with m.Else():
                    m.d.sync += overflow.eq(used == size - 1)
                    m.next = "CQE-AW"

            write("SetCI", ctx_addr, 1, lambda i: ctx_word, goto("Done"), goto("Done"))
            write("Full", ctx_addr, 1, lambda i: ctx_word, goto("Full-Report"), goto("Full-Report"))
            with m.State("Full-Report"):
                report(ErrBit.CQ_OVERFLOW)
                m.next = "Drop"
            write("CQE", slot_addr, 4, lambda i: cqe_bits.word_select(i, 64), goto("CQE-Ok"), goto("CQE-Failed"))
            with m.State("CQE-Failed"):
                m.d.sync += st.eq(CqState.ERROR)
                m.next = "Bad-AW"
            write("Bad", ctx_addr, 1, lambda i: ctx_word, goto("Drop"), goto("Drop"))
            with m.State("CQE-Ok"):
                m.d.sync += pi.eq(pi + 1)
                with m.If(overflow):
                    m.d.sync += st.eq(CqState.ERROR)
                m.next = "Ctx-AW"
            write("Ctx", ctx_addr, 1, lambda i: ctx_word, goto("Written"), goto("Drop"))
            with m.State("Written"):
                m.d.comb += [self.inc_cqe_count.eq(1), self.cqe_written.eq(1)]
                with m.If(overflow):
                    m.next = "Overflow-Report"
                with m.Else():
                    m.next = "Done"
            with m.State("Overflow-Report"):
                report(ErrBit.CQ_OVERFLOW, CqeStatus.CQ_OVERFLOW)
                m.d.sync += qp_error.eq(1)
                m.next = "Done"
            with m.State("Drop"):
                m.d.comb += self.inc_cqe_drops.eq(1)
                report(ErrBit.CQE_DROPPED)
                m.d.sync += qp_error.eq(1)
                m.next = "Done"
            with m.State("Done"):
                m.d.comb += [self.done.valid.eq(1), self.done.payload.qp_error.eq(qp_error)]
                with m.If(self.done.ready):
                    m.next = "Idle"

        report_fields = {f"{prefix}-B": (ErrBit.BUS_CQ, 0) for prefix in ("SetCI", "Full", "CQE", "Bad", "Ctx")}
        report_fields.update({
            "Check-CQN": (ErrBit.CQ_DB_BAD_CQN, 0),
            "Read-Check": (ErrBit.BUS_CQ, 0),
            "Full-Report": (ErrBit.CQ_OVERFLOW, 0),
            "Overflow-Report": (ErrBit.CQ_OVERFLOW, CqeStatus.CQ_OVERFLOW),
            "Drop": (ErrBit.CQE_DROPPED, 0),
        })
        m.d.comb += [
            self.err.qpn.eq(err_qpn),
            self.err.bit.eq(by_state(fsm, {st: int(b) for st, (b, _) in report_fields.items()})),
            self.err.status.eq(by_state(fsm, {st: int(v) for st, (_, v) in report_fields.items()})),
        ]
        return m


class CqShare(wiring.Component):
    """One :class:`CqeWriter` for ``n`` clients (the engine's send completions, the responder's receive
    completions), so every CQ context has one writer.

    A client's command is taken when the writer is idle; the writer then belongs to it until its ``done``
    transfers, and the writer's ``err`` and counter strobes go to it alone. When several wait, the one
    after the last served goes first (round robin), so none waits more than ``n - 1`` commands.

    Members
    -------
    c0 .. c{n-1} : In(CqClientSignature)
        The clients.
    w : Out(CqClientSignature)
        To the writer (``cmd``, ``done``, ``err``, ``inc_*`` of :class:`CqeWriter`).
    """

    def __init__(self, n: int = 2):
        self.n = n
        super().__init__({**{f"c{i}": In(CqClientSignature) for i in range(n)}, "w": Out(CqClientSignature)})

    def elaborate(self, platform):
        m = Module()
        n, w = self.n, self.w
        clients = [getattr(self, f"c{i}") for i in range(n)]
        busy = Signal()
        owner = Signal(range(n))
        last = Signal(range(n))
        sel, any_valid = round_robin(m, "cq_sel", [c.cmd.valid for c in clients], last)
        m.d.comb += [w.cmd.valid.eq(~busy & any_valid),
                     w.cmd.payload.eq(Array(c.cmd.payload for c in clients)[sel])]
        for i, c in enumerate(clients):
            mine = busy & (owner == i)
            m.d.comb += [c.cmd.ready.eq(~busy & (sel == i) & w.cmd.ready),
                         c.done.valid.eq(mine & w.done.valid), c.done.payload.eq(w.done.payload),
                         c.err.eq(Mux(mine, w.err, 0)),
                         c.inc_cqe_count.eq(mine & w.inc_cqe_count), c.inc_cqe_drops.eq(mine & w.inc_cqe_drops),
                         c.inc_bus_errors.eq(mine & w.inc_bus_errors)]
        m.d.comb += w.done.ready.eq(Array(c.done.ready for c in clients)[owner] & busy)
        with m.If(w.cmd.valid & w.cmd.ready):
            m.d.sync += [busy.eq(1), owner.eq(sel), last.eq(sel)]
        with m.If(w.done.valid & w.done.ready):
            m.d.sync += busy.eq(0)
        m.d.sync += Assert(~(w.err.valid | w.inc_cqe_count | w.inc_cqe_drops | w.inc_bus_errors) | busy,
                           "cq share: a writer report with no command running\n")
        return m


def connect_writer(m: Module, client, cqw: CqeWriter):
    """Wire a :data:`CqClientSignature` interface (a client's, or :class:`CqShare`'s ``w``) to ``cqw``."""
    m.d.comb += [cqw.cmd.valid.eq(client.cmd.valid), cqw.cmd.payload.eq(client.cmd.payload),
                 client.cmd.ready.eq(cqw.cmd.ready),
                 client.done.valid.eq(cqw.done.valid), client.done.payload.eq(cqw.done.payload),
                 cqw.done.ready.eq(client.done.ready), client.err.eq(cqw.err),
                 client.inc_cqe_count.eq(cqw.inc_cqe_count), client.inc_cqe_drops.eq(cqw.inc_cqe_drops),
                 client.inc_bus_errors.eq(cqw.inc_bus_errors)]
