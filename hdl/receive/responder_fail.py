"""The responder's NAKs and the QP's end: a NAK with or without the QP moving to ERROR, the receive WQE in use
completed in error, the rest of the receive queue flushed, and the completion writer's handshake (the model's
``Responder.nak``, ``Executor.fail_qp`` and ``flush_rq``). States of :class:`~.responder.Responder`'s FSM,
added by :func:`fail_states`."""

from __future__ import annotations

from amaranth import Mux

from ...model.recv_records import RECV_QPC_BYTES, RECV_SGES, RECV_WQE_BYTES, OpenMessage, RecvOpcode
from ...model.regs import ErrBit
from ...model.responder import RxDrop, Syndrome
from ...model.wqe import CqeStatus
from ..qp_cache import Op, QpState

_REMOTE = {Syndrome.INVALID_REQUEST: CqeStatus.REM_INV_REQ_ERR, Syndrome.REMOTE_ACCESS: CqeStatus.REM_ACCESS_ERR,
           Syndrome.REMOTE_OP_ERR: CqeStatus.REM_OP_ERR}


def fail_states(b):
    c = b.c
    m, rc, nak_syn, d, fstatus, nak_status = b.m, b.rc, b.nak_syn, b.d, b.fstatus, b.nak_status
    fret, uc, rx, write_rx, ack, drop = b.fret, b.uc, b.rx, b.write_rx, b.ack, b.drop
    wqe_taken, wqe_have, wr_id, wqe = b.wqe_taken, b.wqe_have, b.wr_id, b.wqe
    host_read, wqe_addr = b.host_read, b.wqe_addr
    hret, herr, hdata, cqe, cret, ctx = b.hret, b.herr, b.hdata, b.cqe, b.cret, b.ctx
    sret, cq, cache_resp = b.sret, b.cq, b.cache_resp
    rx_addr, bus_error, rq_empty = b.rx_addr, b.bus_error, b.rq_empty
    with m.State("Nak"):
        with m.If(rc):
            with m.If(nak_syn != Syndrome.PSN_SEQ_ERR):
                remote = Mux(nak_syn == Syndrome.INVALID_REQUEST, _REMOTE[Syndrome.INVALID_REQUEST],
                             Mux(nak_syn == Syndrome.REMOTE_ACCESS, _REMOTE[Syndrome.REMOTE_ACCESS],
                                 _REMOTE[Syndrome.REMOTE_OP_ERR]))
                m.d.sync += fstatus.eq(Mux(nak_status != 0, nak_status, remote))
                fret.call("Fail", "Nak-Ack")
            with m.Else():
                m.next = "Nak-Ack"
        with m.Elif(nak_status != 0):
            m.d.sync += fstatus.eq(nak_status)
            fret.call("Fail", "Drop-Invalid")
        with m.Elif(uc):
            m.d.sync += [rx.uc_drop.eq(1), rx.open.eq(OpenMessage.NONE)]
            write_rx("Drop-Invalid")
        with m.Else():
            m.next = "Drop-Invalid"
    with m.State("Nak-Ack"):
        ack(d.psn, nak_syn)
    with m.State("Drop-Invalid"):
        drop(RxDrop.INVALID)
    with m.State("Fail"):
        with m.If((fstatus != 0) & (wqe_taken | (rx.open == OpenMessage.SEND))):
            with m.If(wqe_have | wqe_taken):
                m.d.sync += wr_id.eq(Mux(wqe_have, wqe.wr_id, 0))
                m.next = "Fail-Cqe"
            with m.Else():
                host_read(wqe_addr, RECV_WQE_BYTES)
                hret.call("Host", "Fail-Wqe")
        with m.Else():
            m.next = "Fail-2"
    with m.State("Fail-Wqe"):
        m.d.sync += wr_id.eq(Mux(herr | (hdata[64:72] > RECV_SGES), 0, hdata[:64]))
        m.next = "Fail-Cqe"
    with m.State("Fail-Cqe"):
        cqe(wr_id, fstatus, RecvOpcode.RECV)
        m.d.sync += [rx.rq_ci.eq(rx.rq_ci + 1), rx.open.eq(OpenMessage.NONE), c.inc.wqe_errors.eq(1)]
        write_rx("Fail-Cq")
    with m.State("Fail-Cq"):
        cret.call("Cq", "Fail-2")
    with m.State("Fail-2"):
        m.d.sync += rx.open.eq(OpenMessage.NONE)
        with m.If(ctx.state != QpState.ERROR):
            write_rx("Fail-3")
        with m.Else():
            m.next = "Fail-3"
    with m.State("Fail-3"):
        with m.If(ctx.state != QpState.ERROR):
            m.d.sync += sret.reg.eq(fret.reg)
            m.next = "Set-Error"
        with m.Else():
            fret.back()
    # the completion writer: a CQE that could not be written (or took the CQ's last slot) ends the QP
    with m.State("Cq"):
        m.d.comb += [c.cq_cmd.valid.eq(1), c.cq_cmd.payload.eq(cq)]
        with m.If(c.cq_cmd.ready):
            m.next = "Cq-Done"
    with m.State("Cq-Done"):
        m.d.comb += c.cq_done.ready.eq(1)
        with m.If(c.cq_done.valid):
            with m.If(c.cq_done.payload.qp_error & (ctx.state != QpState.ERROR)):
                with m.Switch(cret.reg):
                    for i, t in enumerate(cret.targets):
                        with m.Case(i):
                            m.d.sync += sret.reg.eq(sret.targets.index(t))
                m.next = "Set-Error"
            with m.Else():
                cret.back()
    # QP -> ERROR, then every posted receive WQE completes with WR_FLUSH_ERR; back through sret
    # (the expected PSN first: a UC resync may have moved it, and the model writes the whole context)
    with m.State("Set-Error"):
        b.cache_request(Op.SET_EPSN, "Set-Error-Epsn", ctx.epsn)
    with m.State("Set-Error-Epsn"):
        m.d.comb += cache_resp.ready.eq(1)
        with m.If(cache_resp.valid):
            m.next = "Set-Error-Req"
    with m.State("Set-Error-Req"):
        b.cache_request(Op.SET_ERROR, "Set-Error-Resp")
    with m.State("Set-Error-Resp"):
        m.d.comb += cache_resp.ready.eq(1)
        with m.If(cache_resp.valid):
            m.d.sync += ctx.state.eq(QpState.ERROR)
            host_read(rx_addr, RECV_QPC_BYTES)
            hret.call("Host", "Fl-Got")
    with m.State("Fl-Got"):
        with m.If(herr):
            bus_error(ErrBit.BUS_QPC)
            sret.back()
        with m.Else():
            m.d.sync += rx.eq(hdata[:8 * RECV_QPC_BYTES])
            m.next = "Fl-Loop"
    with m.State("Fl-Loop"):
        with m.If(rq_empty):
            sret.back()
        with m.Else():
            host_read(wqe_addr, RECV_WQE_BYTES)
            hret.call("Host", "Fl-Wqe")
    with m.State("Fl-Wqe"):
        cqe(Mux(herr | (hdata[64:72] > RECV_SGES), 0, hdata[:64]), CqeStatus.WR_FLUSH_ERR, RecvOpcode.RECV)
        m.d.sync += [rx.rq_ci.eq(rx.rq_ci + 1), rx.open.eq(OpenMessage.NONE), c.inc.flush_count.eq(1)]
        write_rx("Fl-Cq")
    with m.State("Fl-Cq"):
        cret.call("Cq", "Fl-Loop")
