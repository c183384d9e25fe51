"""The responder's hand-over of a response (ACK, NAK, READ response, atomic ACK) to the requester's completer
(:class:`~rnic.hdl.requester.completer.Completer`), as the model's responder hands it to
``Requester.response``. States of :class:`~.responder.Responder`'s FSM, added by :func:`job_states`.

Job gives the completer the response and the context the lookup read; Job-Place waits for the completer's
one ``place`` and turns it into the frame's one payload piece (written at its address, or none: the frame is
released unwritten); Job-Placed answers a write on ``placed`` once the payload writer is done; Job-End waits
until the completer is idle again (its host accesses, completions and update done), then ends the QP first
if the job ended it (the responder's Set-Error: ERROR and the receive queue flushed, as the model's
``_set_error`` does).

A REQ_TIMER write (Tm-Check, Tm-Req, Tm-Resp, Tm-Job) is a job without a frame: under ``reliable`` the QP's
context is read and a TIMEOUT or RNR_DONE job handed over, then Job-End as above; else it is ignored. A QPN
out of range is DB_BAD_QPN (``db_errors``), as for a doorbell.
"""

from __future__ import annotations

from amaranth import Mux

from ..qp_cache import QpState
from ..requester.layouts import JobKind
from .responder_doorbell import refuse_bad_qpn


def job_states(b):
    c = b.c
    m, res, d, ctx, qpn, n = b.m, b.res, b.d, b.ctx, b.qpn, b.n
    pmem, npieces, sret = b.pmem, b.npieces, b.sret
    job, place, placed = c.job, c.place, c.placed
    job_write, job_err = b.job_write, b.job_err

    with m.State("Tm-Check"):
        with m.If(~c.reliable):
            m.next = "Finish"
        with m.Elif(qpn >= b.limit):
            refuse_bad_qpn(b, "Finish")
        with m.Else():
            m.next = "Tm-Req"
    def goto(state):
        def f():
            m.next = state
        return f
    b.lookup_states("Tm", goto("Tm-Job"), goto("Finish"))
    with m.State("Tm-Job"):
        p = job.payload
        m.d.comb += [job.valid.eq(1), p.kind.eq(Mux(b.db_pi[0], JobKind.RNR_DONE, JobKind.TIMEOUT)), p.qpn.eq(qpn),
                     p.ctx.eq(ctx)]
        with m.If(job.ready):
            m.next = "Job-End"

    with m.State("Job"):
        p = job.payload
        m.d.comb += [job.valid.eq(1), p.kind.eq(JobKind.RESPONSE), p.qpn.eq(qpn), p.ctx.eq(ctx),
                     p.opcode.eq(d.opcode), p.psn.eq(d.psn), p.syndrome.eq(d.aeth_syndrome), p.length.eq(n),
                     p.orig.eq(d.atomic_orig)]
        with m.If(job.ready):
            m.next = "Job-Place"
    with m.State("Job-Place"):
        m.d.comb += place.ready.eq(1)
        with m.If(place.valid):
            m.d.sync += [job_write.eq(place.payload.write), npieces.eq(0)]
            with m.If(place.payload.write & (n != 0)):
                m.d.sync += [pmem[0].src.eq(res.payload_start), pmem[0].length.eq(n),
                             pmem[0].addr.eq(place.payload.addr), pmem[0].zero.eq(0), npieces.eq(1)]
            m.next = "Emit"                 # Wdone comes back to Job-Placed
    with m.State("Job-Placed"):
        m.d.comb += [placed.valid.eq(job_write), placed.payload.err.eq(job_err)]
        with m.If(placed.ready | ~job_write):
            m.next = "Job-End"
    with m.State("Job-End"):
        with m.If(job.ready):               # the completer is idle: its update is applied
            with m.If(c.job_error & (ctx.state != QpState.ERROR)):
                sret.call("Set-Error", "Finish")
            with m.Else():
                m.next = "Finish"
