"""QP context cache: on-chip copies of the active 128-byte QP context records of the host-memory table.

Architecture (the shape of minerva's cache, plus ``cfg.mshrs`` miss-status holding registers):

* tags in a memory with one row per set and one QPN lane per way, read asynchronously (LUT RAM),
  valid and dirty bits in flip-flops (all ways of a set compared in one cycle), record data in
  a :class:`~amaranth.lib.memory.Memory` of ``entries`` x 640 bits (the record's first
  :data:`~rnic.model.qpc.CACHED_BYTES` bytes, which hold every field) with one synchronous read port
  and one write port. The read port is not transparent: a read of the entry ``s2_`` writes at the
  same edge is forwarded from ``fwd_rec`` (the last record written) instead;
* a two-stage pipeline: the accept clock (``s0``) compares the incoming QPN and registers the entry
  index, so ``s1_`` addresses the data memory from a flip-flop and decides from registers only
  (the compare of the clock before, checked for staleness, and each set's victim way, registered
  every clock; a miss taken right behind a hit to its set waits one clock for its victim),
  ``s2_`` applies the engine update, writes the record back to the data memory and presents the
  response. A hit is answered two clocks after the request is accepted, one request per clock;
* ``cfg.mshrs`` MSHRs (:mod:`.mshr`): a miss takes one, hides its victim way, reads the victim's 16
  mutable bytes from ``mut_mem`` (their copy with a read port of its own), fetches the record's cached
  bytes with one 10-beat AXI4 burst and, in parallel, writes the victim's mutable bytes back (2-beat
  burst) if it is dirty. Hits to other QPs keep flowing meanwhile; with one MSHR a second miss waits
  in ``s1_``, with several it takes the next one (fetches of one AXI ID, so their data comes back and
  installs in allocation order), and a request for a QP being fetched merges into its MSHR. When
  both bursts are done the MSHR installs the tag and injects the fill into ``s2_``, which answers
  the request (then its merged requests). Responses can therefore overtake each other: they carry
  the requester's tag;
* a control FSM for MODIFY / INVALIDATE / FLUSH that stops accepting requests, waits until the
  pipeline and the MSHRs are empty, then owns the tags, the data memory and the AXI write channel,
  so software's changes and the engine's updates are strictly ordered.

The counters count a clock after their events (a control operation's error as its ``ack`` transfers).

Replacement: first invalid way of the set, else tree pseudo-LRU (``ways - 1`` bits per set).
The model is :class:`rnic.model.qpc.QpcCacheModel`; ``docs/qp-context.md`` has the full contract.
"""

from ...model.qpc import QpcCacheConfig
from .cache import QpCache
from .layouts import (Op, CtrlOp, QpState, Status, ack_layout, cached_layout, counters_layout, ctrl_layout, hw_enum,
                      record_layout, request_layout, response_layout)

__all__ = ["hw_enum", "Op", "CtrlOp", "Status", "QpState", "record_layout", "cached_layout", "request_layout",
           "response_layout", "ctrl_layout", "ack_layout", "counters_layout", "QpCache", "QpcCacheConfig"]
