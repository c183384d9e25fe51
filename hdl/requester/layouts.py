"""The requester's interfaces: the completer's jobs, its results for the context's owner, its payload
placement and its counter strobes (:mod:`.completer`)."""

import enum

from amaranth.lib import data

from ...model.req_records import REQ_BYTES, REQ_FIELDS
from ...model.requester import REQ_COUNTS
from ..qp_cache.layouts import cached_layout

__all__ = ["JobKind", "job_layout", "record_layout", "upd_layout", "place_layout", "counts_layout", "timer_layout"]


class JobKind(enum.IntEnum):
    RESPONSE = 0        # an ACK / NAK / READ response / atomic ACK (Requester.response)
    TIMEOUT = 1         # the QP's local ACK timer expired (Requester.timeout)
    RNR_DONE = 2        # the QP's RNR wait is over (Requester.rnr_expired)


#: One job: its kind, the QP and its context as read; for a response its BTH opcode and PSN, the AETH
#: syndrome, the payload length and an atomic ACK's original value.
job_layout = data.StructLayout({"kind": 2, "qpn": 24, "ctx": cached_layout, "opcode": 8, "psn": 24,
                                "syndrome": 8, "length": 13, "orig": 64})

#: The requester record's fields at their offsets (rnic.model.req_records).
record_layout = data.FlexibleLayout(REQ_BYTES * 8, {name: data.Field(width, off) for name, off, width in REQ_FIELDS})

#: The end of a job that changed something, for the context's owner:
#:
#: * ``una_psn``, ``retry_cnt``, ``rnr_retry_cnt``, ``req_wait``: the requester's fields, new values;
#: * ``move``: the send pointer goes back (a go-back, an RNR NAK) or up (acknowledgements past it) to
#:   ``sq_ci`` / ``next_psn``, ``rd_pending`` becomes 0 and a WQE half sent starts again;
#:   else ``rd_pending`` drops by ``rd_dec`` (READs and atomics completed);
#: * ``error``: the QP goes to ERROR and ``rd_pending`` to 0 (the WQEs sent and not acknowledged are
#:   already flushed; the owner flushes those not sent and the receive queue);
#: * ``wake``: schedule the QP if it has WQEs to send.
upd_layout = data.StructLayout({"qpn": 24, "una_psn": 24, "retry_cnt": 3, "rnr_retry_cnt": 3, "req_wait": 1,
                                "rd_dec": 3, "move": 1, "sq_ci": 16, "next_psn": 24, "error": 1, "wake": 1})

#: A timer command: arm QP ``qpn``'s one timer (``kind``: :class:`rnic.model.timers.TimerKind`, ACK 0 or RNR 1)
#: to fire ``delay`` ticks from now, or disarm it (``arm`` 0).
timer_layout = data.StructLayout({"qpn": 24, "arm": 1, "kind": 1, "delay": 31})

#: One per response job: ``write`` 1 has the response's payload written at ``addr`` (answer on
#: ``placed``); 0 has it discarded.
place_layout = data.StructLayout({"write": 1, "addr": 64})

#: Counter strobes, one clock each: the model's ``Requester.counts`` and ``drops`` (``drop`` with
#: ``reason``), and the engine counters the requester adds to.
counts_layout = data.StructLayout({**{name: 1 for name in REQ_COUNTS}, "drop": 1, "reason": 3,
                                   "wqe_errors": 1, "flush_count": 1, "bus_errors": 1})
