"""The QP context cache component, :class:`QpCache`: its ports, and an ``elaborate`` that adds its
parts to one module in order (storage, counters, lookup pipeline, MSHR, write engine, control)."""

from amaranth import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ...model.qpc import COUNTER_NAMES, QPN_WIDTH, QpcCacheConfig
from ..bus import AXI4Signature
from .control import control_compare, control_fsm
from .layouts import ack_layout, counters_layout, ctrl_layout, request_layout, response_layout
from .lookup import compares, s1_decide, victims
from .mshr import allocate, allocation_gate, capture_victim, fetch_install, merge
from .respond import s2_load, s2_update
from .shared import Shared
from .write_back import write_back_entry, write_engine

__all__ = ["QpCache"]


def count_events(m, sh):
    """The counters: each event is registered (``ev_*``, driven by the part that sees it) and
    counted a clock later. Leaves in ``sh``: ``ev`` (by counter name) and ``ctrl_err``."""
    cnt = Signal(counters_layout)
    m.d.comb += sh.cache.counters.eq(cnt)
    # Counter events are registered and counted a clock later (off the decisions' paths).
    # (The control FSM's error is counted as its acknowledgement transfers.)
    ev = {name: Signal(name=f"ev_{name}") for name in COUNTER_NAMES}
    ctrl_err = Signal()
    for name in COUNTER_NAMES:
        with m.If(ev[name] | ctrl_err if name == "errors" else ev[name]):
            m.d.sync += getattr(cnt, name).eq(getattr(cnt, name) + 1)
    sh.ev, sh.ctrl_err = ev, ctrl_err


class QpCache(wiring.Component):
    """QP context cache with an AXI4 master to the host-memory table.

    Parameters
    ----------
    cfg : :class:`rnic.model.qpc.QpcCacheConfig`
        ``entries``, ``ways`` (1 = direct mapped, ``entries`` = fully associative), ``tag_width``,
        ``qpn_bits``, ``mshrs`` (misses outstanding at once).

    Members
    -------
    req : ``In(stream.Signature(request_layout(cfg)))``
        Engine lookups and updates. One is accepted per clock while they hit.
    resp : ``Out(stream.Signature(response_layout(cfg)))``
        One response per request, in order of completion (a hit can overtake an outstanding miss).
    ctrl : ``In(stream.Signature(ctrl_layout))``
        Control operations. The payload is used while the operation runs; the request transfers
        (``ready``) in the same cycle as its acknowledgement.
    ack : ``Out(stream.Signature(ack_layout))``
        One acknowledgement per control operation, after it has taken effect in host memory.
    qpc_base : ``In(64)``
        Bus address of the table (128-byte aligned; the low 7 bits are ignored).
    table_size : ``In(25)``
        Number of QPs in the table; a QPN at or above it gets ``BAD_QPN``. Change only after FLUSH.
        A request for a QPN at or above ``2**cfg.qpn_bits`` gets ``BAD_QPN`` too; control operations
        reach those QPNs in host memory (they are never cached). Tags are ``cfg.qpn_bits`` wide.
    m_axi : ``Out(AXI4Signature(addr_width=64, data_width=64, id_width=4))``
        Host memory, ID 0 on every burst: up to ``cfg.mshrs`` fetches (read bursts, whose data must come
        back in order) and as many write-backs (write bursts, B in order) outstanding.
    counters : ``Out(counters_layout)``
        Free-running 32-bit counters: lookups, hits, misses, evictions, writebacks, errors, merged.
    """

    def __init__(self, cfg: QpcCacheConfig):
        if not isinstance(cfg, QpcCacheConfig):
            raise TypeError(f"cfg must be a QpcCacheConfig, not {cfg!r}")
        self.cfg = cfg
        super().__init__({
            "req": In(stream.Signature(request_layout(cfg))),
            "resp": Out(stream.Signature(response_layout(cfg))),
            "ctrl": In(stream.Signature(ctrl_layout)),
            "ack": Out(stream.Signature(ack_layout)),
            "qpc_base": In(64),
            "table_size": In(QPN_WIDTH + 1),
            "m_axi": Out(AXI4Signature(addr_width=64, data_width=64, id_width=4)),
            "counters": Out(counters_layout),
        })

    def elaborate(self, platform):
        m = Module()
        # The parts add to the same module in this order (it fixes the order of the statements
        # that drive the same signal, e.g. valid and dirty bits, and the names of the generated
        # logic); each leaves in ``sh`` what the later ones use.
        sh = Shared(m, platform, self)    # storage, the registers the parts share, the tag compare
        count_events(m, sh)
        write_back_entry(m, sh)           # wb_idx: the MSHR's victim or the control FSM's entry
        compares(m, sh)                   # s0, and the compares s1 decides from
        victims(m, sh)                    # each set's victim, registered
        allocation_gate(m, sh)            # whether a miss may allocate a slot
        s1_decide(m, sh)                  # s1 advances / allocates; req.ready
        s2_load(m, sh)                    # s2 loads the install, a replay or s1's request
        merge(m, sh)                      # merged requests, and their replay
        allocate(m, sh)                   # the MSHR follows s1 until a miss allocates it
        s2_update(m, sh)                  # s2 updates, writes back, responds
        capture_victim(m, sh)             # the victim's mutable bytes and write-back
        fetch_install(m, sh)              # the fetch and the install
        write_engine(m, sh)               # AXI writes: write-backs and MODIFY
        control_compare(m, sh)            # MODIFY / INVALIDATE / FLUSH
        control_fsm(m, sh)
        return m
