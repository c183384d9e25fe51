"""The responder: one received request at a time, checked against its QP and executed against host memory,
by the rules and in the order of :class:`rnic.model.responder.Responder` (docs/receive.md). See
:class:`Responder`."""

from __future__ import annotations

import functools
import operator

from amaranth import Const, Module, Mux, Signal, Value
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ...model.descriptor import LinkMode
from ...model.opcodes import Opcode
from ...model.qpc import PathMtu, QpcCacheConfig, ServiceType
from ...model.recv_records import (RECV_MUTABLE_BYTES, RECV_QPC_BYTES, RECV_QPC_OFFSET, RECV_WQE_BYTES, Access,
                                   OpenMessage)
from ...model.regs import SGID_ENTRIES, ErrBit
from ...model.responder import COUNT_NAMES, RNR_NAK, RxDrop, Syndrome
from ...model.responder_exec import GRH_BYTES
from ...model.wqe import MAX_MESSAGE
from ..completion import CqOp, cq_cmd_layout, err_layout
from ..descriptor import DescriptorLayout
from ..qp_cache import Op, QpState, Status, request_layout, response_layout
from ..regs import rq_doorbell_layout
from ..requester.layouts import job_layout, place_layout
from .host_access import host_cmd_layout, host_resp_layout
from .layouts import result_layout
from .payload_writer import piece_layout
from .resp_layouts import mr_layout, opcode_class, rx_layout, wqe_layout
from .responder_doorbell import doorbell_states
from .responder_fail import fail_states
from .responder_job import job_states
from .responder_place import place_states
from .responder_read import read_states
from .response_desc import ResponseDesc

__all__ = ["Responder", "ENGINE_COUNTS", "resp_layout"]

#: Engine counters (``COUNTERS`` registers) the responder adds to, one strobe each.
ENGINE_COUNTS = ("bus_errors", "wqe_errors", "flush_count", "pkt_count", "byte_count", "db_errors")
#: One response packet: its descriptor and, for a READ response, the bus address of its payload
#: (``desc.payload_len`` bytes).
resp_layout = data.StructLayout({"desc": DescriptorLayout, "addr": 64})
_PIECES = 16


class _Build:
    """What the FSM's states share (signals and helpers), for the state functions in the sibling modules."""

    def __init__(self, names, component):
        self.__dict__.update(names)
        self.c = component


class _Returns:
    """A return register for a shared sequence of FSM states: ``call`` saves where to go after it."""

    def __init__(self, m, name, targets):
        self.m, self.targets = m, list(targets)
        self.reg = Signal(range(len(self.targets)), name=name)

    def call(self, entry, back):
        self.m.d.sync += self.reg.eq(self.targets.index(back))
        self.m.next = entry

    def back(self):
        with self.m.Switch(self.reg):
            for i, t in enumerate(self.targets):
                with self.m.Case(i):
                    self.m.next = t


class Responder(wiring.Component):
    """Takes one front-end result at a time (``result``) and answers it: a drop, or response packets on ``resp``
    (ACK / NAK / RNR NAK, READ responses with the bus address of their payload, atomic ACKs), payload pieces on
    ``pieces`` (the :class:`~.payload_writer.PayloadWriter` holds the frame; every frame gets at least one piece,
    the last with ``last``), receive CQEs on ``cq_cmd``. The QP's transmit half comes from the QP context cache
    (``qpc_req`` / ``qpc_resp``: LOOKUP, SET_EPSN, SET_ERROR), the receive half, receive WQEs, MR records and
    resource slots from host memory through ``host_cmd`` / ``host_resp`` (a
    :class:`~.host_access.HostAccess`). Every stream is a plain valid/ready handshake; the responder waits on
    each answer before it goes on, so a stall upstream or on the bus only slows it.

    Between frames it takes receive-queue doorbells (``rq_db``, ahead of a waiting frame), and REQ_TIMER
    writes (``rq_db`` with ``timer``): under ``reliable``, the QP's context read and a TIMEOUT or RNR_DONE
    job (``pi`` bit 0) for the completer.

    With ``reliable`` (CONTROL.RELIABLE) a response frame of a QP it finds goes to the requester's completer as
    a ``job``; the completer's ``place`` becomes the frame's payload piece (``placed`` answers a write), and the
    responder waits until the completer is idle again before the next frame (``job_error``: the job ended the
    QP, which the responder then moves to ERROR with its receive queue flushed). Without it a response is
    dropped (RESPONSE).

    The states live in six files: this one (the checks up to the opcode sequence, the shared host access,
    the context write-back, responses), :mod:`.responder_place` (SEND and WRITE), :mod:`.responder_read`
    (READ, atomics, duplicates), :mod:`.responder_fail` (NAKs, the QP's end, the RQ flush),
    :mod:`.responder_doorbell` (the receive-queue doorbell) and :mod:`.responder_job` (responses to the
    completer).
    """

    def __init__(self, max_qps: int = 1 << 16, max_mtu: int = PathMtu.MTU_4096,
                 cache: QpcCacheConfig = QpcCacheConfig()):
        self.max_qps, self.max_mtu, self.cache_cfg = max_qps, int(max_mtu), cache
        super().__init__({
            "result": In(stream.Signature(result_layout())),
            "rq_db": In(stream.Signature(rq_doorbell_layout)),
            "qpc_req": Out(stream.Signature(request_layout(cache))),
            "qpc_resp": In(stream.Signature(response_layout(cache))),
            "host_cmd": Out(stream.Signature(host_cmd_layout)),
            "host_resp": In(stream.Signature(host_resp_layout)),
            "pieces": Out(stream.Signature(piece_layout())),
            "wdone": In(stream.Signature(data.StructLayout({"err": 1}))),
            "cq_cmd": Out(stream.Signature(cq_cmd_layout)),
            "cq_done": In(stream.Signature(data.StructLayout({"qp_error": 1}))),
            "resp": Out(stream.Signature(resp_layout)),
            "reliable": In(1),
            "job": Out(stream.Signature(job_layout)),
            "place": In(stream.Signature(place_layout)),
            "placed": Out(stream.Signature(data.StructLayout({"err": 1}))),
            "job_error": In(1),
            "qpc_base": In(64), "res_base": In(64), "qpc_size": In(24), "mr_base": In(64), "mr_size": In(32),
            "port_lid": In(16),
            "sgid_index": Out(4), "sgid_gid": In(128), "sgid_mac": In(48), "sgid_vlan_id": In(12),
            "sgid_vlan_present": In(1),
            "drops": Out(data.ArrayLayout(32, len(RxDrop))),
            "counts": Out(data.StructLayout({n: 32 for n in COUNT_NAMES})),
            "inc": Out(data.StructLayout({n: 13 if n == "byte_count" else 1 for n in ENGINE_COUNTS})),
            "err": Out(err_layout), "busy": Out(1), "state": Out(8),
        })

    def elaborate(self, platform):
        m = Module()
        res = Signal(result_layout())
        d = res.desc
        op_in = opcode_class(m, self.result.payload.desc.opcode)
        op = Signal(op_in.shape(), name="op")       # registered with res
        qpn = Signal(24)
        ctx = Signal(self.qpc_resp.payload.record.shape())
        rx = Signal(rx_layout)
        wqe = Signal(wqe_layout)
        mr = Signal(mr_layout)
        n = Signal(16)                      # payload bytes
        m.d.comb += [n.eq(res.length), qpn.eq(d.dest_qp)]

        # --- responses ------------------------------------------------------------------------------
        m.submodules.rdesc = rdesc = ResponseDesc()
        ack_psn, ack_syn, resp_op, resp_len = Signal(24), Signal(8), Signal(8), Signal(13)
        resp_addr, resp_orig, resp_more = Signal(64), Signal(64), Signal()
        resp_kind = Signal(data.StructLayout({"ack": 1, "rnr": 1, "nak": 1, "read": 1}))   # the counter it adds to
        m.d.comb += [rdesc.ctx.eq(ctx), rdesc.opcode.eq(resp_op), rdesc.psn.eq(ack_psn), rdesc.payload_len.eq(resp_len),
                     rdesc.atomic_orig.eq(resp_orig), self.resp.payload.addr.eq(resp_addr),
                     rdesc.syndrome.eq(ack_syn), rdesc.msn.eq(rx.msn), rdesc.port_lid.eq(self.port_lid),
                     self.sgid_index.eq(ctx.sgid_index[:4]), rdesc.sgid_gid.eq(self.sgid_gid),
                     rdesc.sgid_mac.eq(self.sgid_mac), rdesc.sgid_vlan_id.eq(self.sgid_vlan_id),
                     rdesc.sgid_vlan_present.eq(self.sgid_vlan_present), self.resp.payload.desc.eq(rdesc.desc)]

        # --- counters and error reports ----------------------------------------------------------------
        cnt = self.counts
        # a counter adds the clock after its strobe (bump) or its drop (drop_inc, one bit per reason)
        bump = {name: Signal(name=f"bump_{name}") for name in COUNT_NAMES}
        for name, s in bump.items():
            bumped = Signal(name=f"bumped_{name}")
            m.d.sync += bumped.eq(s)
            with m.If(bumped):
                m.d.sync += cnt[name].eq(cnt[name] + 1)
        drop_inc = Signal(len(RxDrop))
        m.d.sync += drop_inc.eq(0)
        for r in RxDrop:
            with m.If(drop_inc[int(r)]):
                m.d.sync += self.drops[r].eq(self.drops[r] + 1)
        m.d.sync += [self.err.valid.eq(0)] + [getattr(self.inc, n).eq(0) for n in ENGINE_COUNTS]

        def report(bit):
            m.d.sync += [self.err.valid.eq(1), self.err.bit.eq(bit), self.err.qpn.eq(qpn), self.err.status.eq(0)]

        def bus_error(bit=None):
            m.d.comb += bump["bus_errors"].eq(1)
            m.d.sync += self.inc.bus_errors.eq(1)
            if bit is not None:
                report(bit)

        # --- derived values ------------------------------------------------------------------------------
        # of the QP context's fixed fields, registered with ctx (Qpc-Resp) and equal to their reset values
        log_mtu = Signal(4, init=7)
        mtu = Signal(13, init=1 << 7)
        rc, uc, ud = Signal(init=1, name="rc"), Signal(name="uc"), Signal(name="ud")

        def load_ctx(rec):
            m.d.sync += [ctx.eq(rec), log_mtu.eq(rec.path_mtu[:3] + 7), mtu.eq(Const(1, 13) << (rec.path_mtu[:3] + 7)),
                         rc.eq(rec.service == ServiceType.RC), uc.eq(rec.service == ServiceType.UC),
                         ud.eq(rec.service == ServiceType.UD)]

        rx_addr = Signal(64)                # res is loaded two clocks before the first use
        m.d.sync += rx_addr.eq((self.qpc_base & ~0x7F) + (qpn << 7) + RECV_QPC_OFFSET)
        rq_empty = Signal()
        m.d.comb += rq_empty.eq(rx.rq_ci == rx.rq_pi)
        wqe_addr = Signal(64)
        m.d.comb += wqe_addr.eq((rx.rq_base & ~0x3F)
                                + ((rx.rq_ci & ((Const(1, 17) << rx.log_rq_size) - 1)[:16]) << 6))
        start = Signal()
        m.d.comb += start.eq(op.first | op.only)
        last = Signal()
        m.d.comb += last.eq(op.last | op.only)

        def mr_addr(key):
            return (self.mr_base & ~0x1F) + (key[8:32] << 5)

        # the MR check, one clock after the record (Mr-Chk): mr_okr, the MR read names the key (valid, the key's
        # variant byte, inside the table, the QP's PD); mr_pass, also the right and [chk_va, chk_va + chk_len)
        # inside it; mr_bus, the bus address of chk_va
        key_in = Signal()
        chk_va, chk_len, chk_end, chk_right = Signal(64), Signal(32), Signal(65), Signal(4)
        mr_end, mr_off = Signal(65), Signal(64)
        mr_okr, mr_pass, mr_bus = Signal(), Signal(), Signal(64)

        # --- per-frame registers ---------------------------------------------------------------------------
        wqe_taken, wqe_have, released, releasing = Signal(), Signal(), Signal(), Signal()
        in_job, job_write, job_err = Signal(), Signal(), Signal()     # a response handed to the completer
        nak_syn, nak_status, fstatus = Signal(8), Signal(8), Signal(8)
        key = Signal(32)                    # the key of the MR read in flight
        inv_key = Signal(32)
        off = Signal(32)                    # SEND: where this packet's payload starts in the message
        cq = Signal(cq_cmd_layout)
        do_cqe = Signal()
        wr_id = Signal(64)
        db_pi = Signal(16)                  # the receive-queue doorbell's producer index
        limit = Mux(self.qpc_size < self.max_qps, self.qpc_size, self.max_qps)

        # pieces, held until every check of the frame has passed
        piece_t = data.StructLayout({"src": 16, "length": 16, "addr": 64, "zero": 1})
        pmem = Signal(data.ArrayLayout(piece_t, _PIECES))
        npieces, emit_i = Signal(range(_PIECES + 1)), Signal(range(_PIECES + 1))

        # scatter: parts (0: 20 zero bytes, 1: the GRH or IPv4 header, 2: the payload) x SGEs
        part, sge_i = Signal(2), Signal(2)
        base = Signal(33)
        p_off, p_len, p_src, p_zero = Signal(32), Signal(16), Signal(16), Signal()     # of the part, registered with it
        p_end = Signal(33)
        l2 = Signal(8)
        m.d.comb += l2.eq(Mux(res.mode >= LinkMode.IB_LOCAL, 8, 14 + 4 * d.vlan_present))

        def set_part(pt):
            v4 = res.mode == LinkMode.ROCEV2_IPV4
            po = Mux(pt == 0, 0, Mux(pt == 1, Mux(v4, 20, 0), Mux(ud, GRH_BYTES, off)))
            pl = Mux(pt == 0, 20, Mux(pt == 1, Mux(v4, 20, GRH_BYTES), n))
            m.d.sync += [part.eq(pt), p_off.eq(po), p_len.eq(pl), p_end.eq(po + pl), p_zero.eq(pt == 0),
                         p_src.eq(Mux(pt == 0, 0, Mux(pt == 1, l2, res.payload_start)))]
        # the overlap of the part and the SGE, registered (Scatter-Wait gives them a clock after a change)
        sge = wqe.sge[sge_i]
        lo, hi = Signal(33), Signal(33)
        sge_end = Signal(33)
        lo_rel = Signal(33)                 # lo - base
        past = Signal()
        m.d.comb += past.eq(p_off > base)
        m.d.sync += [sge_end.eq(base + sge.length), lo.eq(Mux(past, p_off, base)),
                     hi.eq(Mux(p_end < base + sge.length, p_end, base + sge.length)),
                     lo_rel.eq(Mux(past, p_off - base, 0))]
        piece_len = Signal(16)
        capacity = Signal(34)               # of the WQE, registered with it (Wqe-Got)
        over = Signal()

        host, hresp = self.host_cmd, self.host_resp
        hdata, herr = Signal(512), Signal()
        cache_req, cache_resp = self.qpc_req, self.qpc_resp

        def host_read(addr, nbytes):
            m.d.sync += [host.payload.write.eq(0), host.payload.addr.eq(addr), host.payload.nbytes.eq(nbytes)]

        def host_write(addr, nbytes, wdata):
            m.d.sync += [host.payload.write.eq(1), host.payload.addr.eq(addr), host.payload.nbytes.eq(nbytes),
                         host.payload.wdata.eq(wdata)]

        def drop(reason):
            m.d.sync += drop_inc.eq(1 << int(reason))
            m.next = "Finish"

        def nak(syn, status=0):
            m.d.sync += [nak_syn.eq(syn), nak_status.eq(status)]
            m.next = "Nak"

        def respond(opcode, psn, syn, nbytes=0, addr=0, orig=0, more=0, go=True):
            """Load the response registers; ``go``: send it next (the Ack state)."""
            op_v, syn_v = Value.cast(opcode), Value.cast(syn)
            is_ack = op_v == Opcode.RC_ACKNOWLEDGE
            m.d.sync += [resp_kind.ack.eq(is_ack & (syn_v == Syndrome.ACK)),
                         resp_kind.rnr.eq(is_ack & (syn_v != Syndrome.ACK) & (syn_v[5:8] == 1)),
                         resp_kind.nak.eq(is_ack & (syn_v != Syndrome.ACK) & (syn_v[5:8] != 1)),
                         resp_kind.read.eq(~is_ack & (op_v != Opcode.RC_ATOMIC_ACKNOWLEDGE))]
            m.d.sync += [resp_op.eq(opcode), ack_psn.eq(psn), ack_syn.eq(syn), resp_len.eq(nbytes),
                         resp_addr.eq(addr), resp_orig.eq(orig), resp_more.eq(more)]
            if go:
                m.next = "Ack"

        def ack(psn, syn):
            respond(Opcode.RC_ACKNOWLEDGE, psn, syn)

        # READ / atomic
        rd_addr, orig, is_dup, epsn_then = Signal(64), Signal(64), Signal(), Signal(2)
        rsp_psn, rsp_left, rsp_first = Signal(24), Signal(32), Signal()

        def cqe(wr, status, opcode, flags=0, byte_len=0, imm=0, src_qp=0, slid=0):
            m.d.sync += [cq.op.eq(CqOp.CQE), cq.cqn.eq(rx.rcqn), cq.qpn.eq(qpn), cq.wr_id.eq(wr),
                         cq.status.eq(status), cq.opcode.eq(opcode), cq.flags.eq(flags), cq.byte_len.eq(byte_len),
                         cq.imm.eq(imm), cq.src_qp.eq(src_qp), cq.slid.eq(slid), cq.wqe_index.eq(rx.rq_ci),
                         cq.recv.eq(1)]

        hret = _Returns(m, "hret", ["Rx-Got", "Wqe-Got", "Mr-Got", "Fail-Wqe", "Fl-Got", "Fl-Wqe", "Wrx-Done",
                                    "Inv-Done", "Slot-Done", "Atom-Got", "Atom-Wrote", "Dup-Got", "Db-Got"])
        wret = _Returns(m, "wret", ["Finish", "Drop-Oos", "Drop-Invalid", "Cqe-Maybe", "Fail-Cq", "Fail-3",
                                    "Fl-Cq", "Ud-Cq", "Ack", "Rsp-Start", "Atom-Ack", "Db-Written"])
        cret = _Returns(m, "cret", ["Fail-2", "Fl-Loop", "Ack-Maybe", "Finish", "Db-Set-Error"])
        fret = _Returns(m, "fret", ["Nak-Ack", "Drop-Invalid", "Fail-2", "Fl-Loop", "Ack-Maybe", "Finish",
                                    "Db-Set-Error", "Db-End"])
        # sret (where Set-Error's flush returns) takes fret's and cret's targets by index
        assert all(t in fret.targets for t in cret.targets)
        mret = _Returns(m, "mret", ["Inv-Check", "Wmr-Check", "Smr-Check", "Rmr-Check", "Amr-Check"])
        sret = _Returns(m, "sret", fret.targets)

        def cache_request(op, then, arg=0):
            """Offer one QP cache request for this frame's QP; go to ``then`` once it is taken."""
            m.d.comb += [cache_req.valid.eq(1), cache_req.payload.op.eq(op), cache_req.payload.qpn.eq(qpn),
                         cache_req.payload.arg.eq(arg)]
            with m.If(cache_req.ready):
                m.next = then

        def lookup_states(name, on_ok, on_fail):
            """States ``name``-Req and ``name``-Resp: this frame's QP looked up in the cache and its context
            loaded; then ``on_ok()``, or after a bus error (BUS_QPC reported) ``on_fail()``."""
            with m.State(f"{name}-Req"):
                cache_request(Op.LOOKUP, f"{name}-Resp")
            with m.State(f"{name}-Resp"):
                m.d.comb += cache_resp.ready.eq(1)
                with m.If(cache_resp.valid):
                    load_ctx(cache_resp.payload.record)
                    with m.If(cache_resp.payload.status != Status.OK):
                        bus_error(ErrBit.BUS_QPC)
                        on_fail()
                    with m.Else():
                        on_ok()

        def write_rx(back):
            wret.call("Wrx-Pre", back)

        def read_mr(k, back, va=0, length=0, right=0):
            """Read and check the MR of key ``k`` (for ``right`` on ``[va, va + length)``), then go to ``back``."""
            m.d.sync += [key.eq(k), key_in.eq(k[8:32] < self.mr_size), chk_va.eq(va), chk_len.eq(length),
                         chk_right.eq(right)]
            mret.call("Mr-Read", back)

        # flags of the frame's fixed fields, registered: res is loaded (Idle) at least two clocks before a use
        dma_zero, dma_big = Signal(), Signal()
        len_bad = Signal()                  # Len's verdict; its inputs are still one clock before Len
        m.d.sync += [dma_zero.eq(d.reth_dma_len == 0), dma_big.eq(d.reth_dma_len > MAX_MESSAGE)]
        len_ok = Mux(op.first | op.middle, n == mtu, Mux(op.last, (n >= 1) & (n <= mtu), n <= mtu))
        resid = Mux(start, d.reth_dma_len, rx.resid)
        wlen_ok = ~((n > resid) | (last & (n != resid)) | (~last & (n == resid)))
        m.d.sync += len_bad.eq(~len_ok | (op.write & ~wlen_ok))

        # Check's conditions, registered in Rx-Got
        bad_qpn = Signal()
        ck = Signal(data.StructLayout({"responding": 1, "ctx_ok": 1, "svc_ok": 1, "pkey_ok": 1, "qkey_ok": 1,
                                       "long": 1, "rq_empty": 1, "in_seq": 1, "ahead": 1, "behind": 1}))

        b = _Build(locals(), self)
        with m.FSM(init="Idle") as fsm:
            m.d.comb += self.busy.eq(~fsm.ongoing("Idle"))
            place_states(b)
            read_states(b)
            fail_states(b)
            doorbell_states(b)
            job_states(b)
            with m.State("Idle"):
                # a doorbell goes first: one written before a frame arrives is seen by that frame
                m.d.comb += [self.rq_db.ready.eq(1), self.result.ready.eq(~self.rq_db.valid)]
                with m.If(self.rq_db.valid):
                    m.d.sync += [res.desc.dest_qp.eq(self.rq_db.payload.qpn), db_pi.eq(self.rq_db.payload.pi)]
                    with m.If(self.rq_db.payload.timer):
                        m.d.sync += released.eq(1)              # no frame to release
                        m.next = "Tm-Check"
                    with m.Else():
                        m.next = "Db-Check"
                with m.Elif(self.result.valid):
                    m.d.sync += [res.eq(self.result.payload), op.eq(op_in),
                                 bad_qpn.eq(self.result.payload.desc.dest_qp >= limit),
                                 wqe_taken.eq(0), wqe_have.eq(0), released.eq(0), releasing.eq(0), is_dup.eq(0),
                                 in_job.eq(0),
                                 epsn_then.eq(0), npieces.eq(0), do_cqe.eq(0)]
                    m.next = "Classify"

            with m.State("Classify"):
                with m.If(~res.ok):
                    m.next = "Finish"
                with m.Elif(op.response & ~self.reliable):
                    drop(RxDrop.RESPONSE)
                with m.Elif(bad_qpn):
                    drop(RxDrop.BAD_QPN)
                with m.Else():
                    m.next = "Qpc-Req"

            def read_rx(then):
                host_read(rx_addr, RECV_QPC_BYTES)
                hret.call("Host", then)
            lookup_states("Qpc", lambda: read_rx("Rx-Got"), lambda: drop(RxDrop.QPC_BUS_ERROR))

            # the shared host access: the command registered by the caller, the answer in hdata / herr
            with m.State("Host"):
                m.d.comb += host.valid.eq(1)
                with m.If(host.ready):
                    m.next = "Host-Wait"
            with m.State("Host-Wait"):
                m.d.comb += hresp.ready.eq(1)
                with m.If(hresp.valid):
                    m.d.sync += [hdata.eq(hresp.payload.rdata), herr.eq(hresp.payload.err)]
                    hret.back()

            with m.State("Rx-Got"):
                hrx = data.View(rx_layout, hdata[:8 * RECV_QPC_BYTES])
                delta = Signal(24)
                m.d.comb += delta.eq(d.psn - ctx.epsn)
                m.d.sync += [
                    ck.responding.eq((ctx.state == QpState.RTR) | (ctx.state == QpState.RTS)
                                     | (ctx.state == QpState.SQD) | (ctx.state == QpState.SQE)),
                    ck.ctx_ok.eq((ctx.service <= ServiceType.UD) & (ctx.link_mode <= LinkMode.IB_GLOBAL)
                                 & (ctx.path_mtu >= PathMtu.MTU_256) & (ctx.path_mtu <= self.max_mtu)
                                 & (ctx.sgid_index < SGID_ENTRIES)),
                    ck.svc_ok.eq(op.service == ctx.service),
                    ck.pkey_ok.eq((d.pkey[:15] == ctx.pkey[:15]) & (d.pkey[15] | ctx.pkey[15])),
                    ck.qkey_ok.eq(d.deth_qkey == ctx.qkey), ck.long.eq(n > mtu),
                    ck.rq_empty.eq(hrx.rq_ci == hrx.rq_pi),
                    ck.in_seq.eq(delta == 0), ck.ahead.eq((delta != 0) & ~delta[23]), ck.behind.eq(delta[23])]
                with m.If(herr):
                    bus_error(ErrBit.BUS_QPC)
                    drop(RxDrop.QPC_BUS_ERROR)
                with m.Else():
                    m.d.sync += rx.eq(hdata[:8 * RECV_QPC_BYTES])
                    m.next = "Check"

            with m.State("Check"):
                with m.If(op.response):                         # for the requester (reliable)
                    with m.If(~ck.pkey_ok):
                        drop(RxDrop.PKEY)
                    with m.Else():
                        m.d.sync += in_job.eq(1)
                        m.next = "Job"
                with m.Elif(~ck.responding):
                    drop(RxDrop.QP_STATE)
                with m.Elif(~ck.ctx_ok):
                    drop(RxDrop.BAD_CONTEXT)
                with m.Elif(~ck.svc_ok):
                    drop(RxDrop.WRONG_SERVICE)
                with m.Elif(~ck.pkey_ok):
                    drop(RxDrop.PKEY)
                with m.Elif(ud):
                    with m.If(~ck.qkey_ok):
                        drop(RxDrop.QKEY)
                    with m.Elif(ck.long):
                        drop(RxDrop.INVALID)
                    with m.Elif(ck.rq_empty):
                        drop(RxDrop.NO_RQ_WQE)
                    with m.Else():
                        m.d.sync += wqe_taken.eq(1)
                        host_read(wqe_addr, RECV_WQE_BYTES)
                        hret.call("Host", "Wqe-Got")
                with m.Elif(rc):
                    with m.If(ck.ahead):
                        with m.If(rx.nak_sent):
                            drop(RxDrop.OUT_OF_SEQ)
                        with m.Else():
                            m.d.sync += rx.nak_sent.eq(1)
                            respond(Opcode.RC_ACKNOWLEDGE, ctx.epsn, Syndrome.PSN_SEQ_ERR, go=False)
                            write_rx("Ack")
                    with m.Elif(ck.behind):
                        m.d.comb += bump["duplicates"].eq(1)
                        with m.If(op.send | op.write):
                            ack(ctx.epsn - 1, Syndrome.ACK)
                        with m.Else():
                            m.next = "Dup-Init"
                    with m.Else():
                        m.d.sync += rx.nak_sent.eq(0)
                        m.next = "Seq"
                with m.Else():                                  # UC
                    with m.If(~ck.in_seq | rx.uc_drop):
                        with m.If(~start):
                            m.d.sync += rx.uc_drop.eq(1)
                            write_rx("Drop-Oos")
                        with m.Else():
                            m.d.sync += [rx.uc_drop.eq(0), rx.open.eq(OpenMessage.NONE), ctx.epsn.eq(d.psn)]
                            m.next = "Seq"
                    with m.Else():
                        m.next = "Seq"

            with m.State("Drop-Oos"):
                drop(RxDrop.OUT_OF_SEQ)

            with m.State("Seq"):
                open_kind = Mux(op.send, OpenMessage.SEND, OpenMessage.WRITE)
                starting = start | op.read | op.atomic
                cont = (op.middle | op.last) & (rx.open == open_kind) & (op.send | op.write)
                right = Mux(op.write, Access.REMOTE_WRITE, Mux(op.read, Access.REMOTE_READ, Access.REMOTE_ATOMIC))
                need_right = (op.write | op.read | op.atomic) & starting
                with m.If((rx.open == OpenMessage.NONE) & ~starting
                          | (rx.open != OpenMessage.NONE) & ~cont & ~(starting & uc)):
                    nak(Syndrome.INVALID_REQUEST)
                with m.Else():
                    with m.If((rx.open != OpenMessage.NONE) & ~cont):
                        m.d.sync += rx.open.eq(OpenMessage.NONE)
                    with m.If(need_right & ~(rx.access & right).any()):
                        nak(Syndrome.INVALID_REQUEST)
                    with m.Elif(op.read | op.atomic):
                        m.next = "Rd-Check"
                    with m.Elif(op.send | (last & op.imm)):
                        fresh = ~op.send | start
                        with m.If(fresh & ck.rq_empty):
                            with m.If(rc):
                                ack(d.psn, RNR_NAK | rx.min_rnr_timer)
                            with m.Else():
                                drop(RxDrop.NO_RQ_WQE)
                        with m.Else():
                            m.d.sync += wqe_taken.eq(1)
                            host_read(wqe_addr, RECV_WQE_BYTES)
                            hret.call("Host", "Wqe-Got")
                    with m.Else():
                        m.next = "Len"














            # write back record bytes 80..107 (as the state before this one left them)
            with m.State("Wrx-Pre"):
                host_write(rx_addr, RECV_MUTABLE_BYTES, rx.as_value()[:8 * RECV_MUTABLE_BYTES])
                hret.call("Host", "Wrx-Done")
            with m.State("Wrx-Done"):
                wret.back()

            with m.State("Ack"):
                m.d.comb += self.resp.valid.eq(1)
                with m.If(self.resp.ready):
                    m.d.sync += [self.inc.pkt_count.eq(1), self.inc.byte_count.eq(resp_len)]
                    m.d.comb += [bump["acks"].eq(resp_kind.ack), bump["rnr_naks"].eq(resp_kind.rnr),
                                 bump["naks"].eq(resp_kind.nak), bump["read_responses"].eq(resp_kind.read)]
                    m.next = "Finish"
                    with m.If(resp_more):
                        m.next = "Rsp-More"

            with m.State("Finish"):
                with m.If(released):
                    m.next = "Idle"
                with m.Else():
                    m.next = "Emit"
                    m.d.sync += [npieces.eq(0), releasing.eq(1)]
        # decoded from the state tests rather than wired from the register: the ECP5 build measured faster so
        m.d.comb += self.state.eq(functools.reduce(operator.or_, (Mux(fsm.ongoing(name), code, 0)
                                                                  for name, code in fsm.encoding.items() if code)))
        self.state_signal = fsm.state           # its decoder names the states (for a debugging testbench)
        return m
