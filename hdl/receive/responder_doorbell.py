"""The receive-queue doorbell (``DB_RQ_PI``, the model's ``Executor.rq_doorbell``): the QP's context read,
the new producer index checked and written to the receive half, or the doorbell refused with an error CQE
and the QP moved to ERROR; in ERROR the new WQEs are flushed at once. States of
:class:`~.responder.Responder`'s FSM, added by :func:`doorbell_states`; they run between frames."""

from __future__ import annotations

from ...model.recv_records import RECV_QPC_BYTES, RecvOpcode
from ...model.regs import ErrBit
from ...model.wqe import CqeStatus
from ..qp_cache import QpState


def refuse_bad_qpn(b, then: str) -> None:
    """A doorbell or REQ_TIMER write for a QPN out of range: DB_BAD_QPN, ``db_errors``, go to ``then``."""
    c, m, qpn = b.c, b.m, b.qpn
    m.d.sync += [c.inc.db_errors.eq(1), c.err.valid.eq(1), c.err.bit.eq(ErrBit.DB_BAD_QPN), c.err.qpn.eq(qpn),
                 c.err.status.eq(0)]
    m.next = then


def doorbell_states(b):
    c = b.c
    m, qpn, ctx, rx, db_pi, fstatus = b.m, b.qpn, b.ctx, b.rx, b.db_pi, b.fstatus
    hret, herr, hdata, host_read, rx_addr, bus_error = b.hret, b.herr, b.hdata, b.host_read, b.rx_addr, b.bus_error
    cqe, cq, cret, sret, write_rx = b.cqe, b.cq, b.cret, b.sret, b.write_rx

    def refuse_count():
        m.d.sync += c.inc.db_errors.eq(1)

    with m.State("Db-Check"):
        limit = b.limit
        with m.If(qpn >= limit):
            refuse_bad_qpn(b, "Db-End")
        with m.Else():
            m.next = "Db-Req"
    def refused():
        refuse_count()
        m.next = "Db-End"

    def read_rx():
        host_read(rx_addr, RECV_QPC_BYTES)
        hret.call("Host", "Db-Got")
    b.lookup_states("Db", read_rx, refused)
    with m.State("Db-Got"):
        with m.If(herr):
            bus_error(ErrBit.BUS_QPC)
            refuse_count()
            m.next = "Db-End"
        with m.Else():
            m.d.sync += rx.eq(hdata[:8 * RECV_QPC_BYTES])
            m.next = "Db-Decide"
    with m.State("Db-Decide"):
        ahead = (db_pi - rx.rq_ci)[:16]
        with m.If(ahead > (1 << rx.log_rq_size)):
            m.d.sync += fstatus.eq(CqeStatus.RQ_OVERFLOW)
            m.next = "Db-Refuse"
        with m.Elif(ctx.state == QpState.RESET):
            m.d.sync += fstatus.eq(CqeStatus.QP_STATE_ERR)
            m.next = "Db-Refuse"
        with m.Else():
            m.d.sync += rx.rq_pi.eq(db_pi)
            write_rx("Db-Written")
    with m.State("Db-Written"):
        with m.If(ctx.state == QpState.ERROR):
            m.d.sync += sret.reg.eq(sret.targets.index("Db-End"))
            m.next = "Fl-Loop"
        with m.Else():
            m.next = "Db-End"
    with m.State("Db-Refuse"):
        refuse_count()
        m.d.sync += [c.err.valid.eq(1), c.err.bit.eq(ErrBit.DB_REJECTED), c.err.qpn.eq(qpn), c.err.status.eq(fstatus)]
        cqe(0, fstatus, RecvOpcode.RECV)
        m.d.sync += cq.wqe_index.eq(db_pi)
        cret.call("Cq", "Db-Set-Error")
    with m.State("Db-Set-Error"):
        with m.If(ctx.state != QpState.ERROR):
            m.d.sync += sret.reg.eq(sret.targets.index("Db-End"))
            m.next = "Set-Error"
        with m.Else():
            m.next = "Db-End"
    with m.State("Db-End"):
        m.next = "Idle"
