"""QP context: the fixed 128-byte record in host memory, its codec, and the golden model of the cache.

The full QP context table lives in host memory at ``qpc_base + qpn * RECORD_BYTES``; the on-chip
cache (:mod:`rnic.hdl.qp_cache`) keeps the active records. :data:`QPC_FIELDS` is the single
definition of the record: the model's :class:`QpContext` dataclass, the RTL's
``data.FlexibleLayout`` (built in ``rnic.hdl.qp_cache`` from the same table) and the testbenches
all come from it. ``docs/qp-context.md`` documents it byte by byte.

Byte order: the record is a little-endian 1024-bit integer (byte ``i`` of the record is bits
``8*i+7 .. 8*i``, as on an AXI data bus); every field is an unsigned integer at a fixed bit offset,
so multi-byte fields are little-endian in memory. MAC and GID are stored as the same integers
:class:`rnic.model.descriptor.PacketDesc` uses (``dst_mac = 0x020000000002``), i.e. reversed wire
order in memory.

The first :data:`MUTABLE_BYTES` bytes hold the fields the engine changes (state, PSNs, indices,
retry counters); only they are written back on eviction. Everything else is owned by software and
changed only by a control MODIFY, which writes the whole record. Every field lies in the first
:data:`CACHED_BYTES` bytes; the cache fetches, holds and returns only those, and the bytes after
them are reserved for the receive path (a MODIFY still writes all :data:`RECORD_BYTES`).

:class:`QpcCacheModel` is the cache's policy in Python: same geometry, same victim choice (first
invalid way, else tree pseudo-LRU), same counters. What it defines exactly:

* the status and record returned for every request (policy independent: the cache is coherent);
* host memory after a FLUSH (policy independent);
* the counters, when requests are issued one at a time (the RTL may reorder replacement-state
  updates of hits that overtake a miss, so with overlapping requests only
  ``lookups``, ``hits + misses + errors == lookups`` and policy-free facts hold);
* which request sees a victim's write-back error (same caveat).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, fields as dc_fields

from .descriptor import LinkMode
from .record import FieldRecord, get_bits

__all__ = ["RECORD_BYTES", "RECORD_BITS", "MUTABLE_BYTES", "CACHED_BYTES", "CACHED_BITS", "QPN_WIDTH",
           "ARG_WIDTH", "COUNTER_WIDTH",
           "QpState", "ServiceType", "PathMtu", "Status", "Op", "CtrlOp", "QPC_FIELDS", "QpContext",
           "get_field", "set_field", "apply_op", "QpcCacheConfig", "BusError", "HostTable",
           "QpcCacheModel", "COUNTER_NAMES"]

RECORD_BYTES = 128
RECORD_BITS = RECORD_BYTES * 8
MUTABLE_BYTES = 16          # bytes 0..15: engine-owned, written back on eviction / invalidate / flush
CACHED_BYTES = 80           # bytes 0..79: every field; what a miss fetches and the cache returns
CACHED_BITS = CACHED_BYTES * 8
QPN_WIDTH = 24
ARG_WIDTH = 24
COUNTER_WIDTH = 32
COUNTER_NAMES = ("lookups", "hits", "misses", "evictions", "writebacks", "errors", "merged")


class QpState(enum.IntEnum):
    RESET = 0
    INIT = 1
    RTR = 2
    RTS = 3
    SQD = 4
    SQE = 5
    ERROR = 6


class ServiceType(enum.IntEnum):
    RC = 0
    UC = 1
    UD = 2


class PathMtu(enum.IntEnum):
    """IB encoding of the path MTU (as in ``enum ib_mtu``)."""
    MTU_256 = 1
    MTU_512 = 2
    MTU_1024 = 3
    MTU_2048 = 4
    MTU_4096 = 5

    @property
    def bytes(self) -> int:
        return 128 << self.value

    @classmethod
    def of_bytes(cls, n: int) -> "PathMtu":
        """The code of an MTU of ``n`` bytes (256, 512, 1024, 2048 or 4096)."""
        for mtu in cls:
            if mtu.bytes == n:
                return mtu
        raise ValueError(f"an MTU must be 256, 512, 1024, 2048 or 4096 bytes, not {n!r}")


class Status(enum.IntEnum):
    """Response / acknowledgement status."""
    OK = 0
    BAD_QPN = 1     # qpn >= table_size (a request: or qpn >= 2**qpn_bits): nothing was accessed
    BUS_ERROR = 2   # SLVERR/DECERR on the fetch, the victim's write-back, or the control write


class Op(enum.IntEnum):
    """Engine request opcodes. Every request returns the record *after* the operation."""
    LOOKUP = 0
    SET_PSN = 1       # next_psn = arg
    ADD_PSN = 2       # next_psn = (next_psn + arg) mod 2**24
    SET_SQ_CI = 3     # sq_ci = arg[15:0]; arg[16]: rd_pending += 1 (a READ or atomic sent, CONTROL.RELIABLE)
    SET_ERROR = 4     # state = ERROR
    SET_EPSN = 5      # epsn = arg
    SET_SQ_PI = 6     # sq_pi = arg[15:0]
    SET_REQ = 7       # the requester's fields: retry_cnt = arg[2:0], rnr_retry_cnt = arg[6:4], req_wait = arg[8];
    #                   rd_pending = 0 if arg[9] else rd_pending - arg[12:10]
    SET_UNA = 8       # una_psn = arg


class CtrlOp(enum.IntEnum):
    """Control (software) operations, serialised against the engine's requests."""
    MODIFY = 0        # write the whole record to host memory; drop any cached copy
    INVALIDATE = 1    # write back the cached copy if dirty, then drop it
    FLUSH = 2         # write back every dirty entry, then drop all entries


# (name, bit offset, width). Bit offset 8*b + k is bit k of record byte b.
QPC_FIELDS: tuple[tuple[str, int, int], ...] = (
    # --- bytes 0..15: mutable (engine-owned, written back) ---
    ("state", 0, 4),             # QpState
    ("next_psn", 8, 24),         # next send PSN
    ("epsn", 32, 24),            # expected receive PSN
    ("retry_cnt", 56, 3),        # transport retries left
    ("rnr_retry_cnt", 60, 3),    # RNR retries left
    ("sq_ci", 64, 16),           # send-queue consumer index
    ("sq_pi", 80, 16),           # send-queue producer index
    ("una_psn", 96, 24),         # RC: oldest unacknowledged PSN (the requester's; rnic.model.requester)
    ("req_wait", 120, 1),        # RC: waiting out an RNR NAK; the scheduler leaves the QP alone
    ("rd_pending", 121, 3),      # RC: READs and atomics between sq_acked and sq_ci (sent, not completed)
    # --- bytes 16..127: software-owned ---
    ("service", 128, 8),         # ServiceType
    ("link_mode", 136, 8),       # rnic.model.descriptor.LinkMode
    ("path_mtu", 144, 8),        # PathMtu (IB encoding)
    ("log_sq_size", 152, 8),     # log2 of send-queue entries
    ("qpn", 160, 24),            # local QPN (equals the table index)
    ("sl", 184, 4),              # IB service level / VLAN PCP
    ("max_rd_atomic", 188, 3),   # RC with a requester: READs and atomics outstanding at most (the peer's slots)
    ("dest_qpn", 192, 24),
    ("retry_limit", 216, 3),     # reload value of retry_cnt
    ("rnr_limit", 220, 3),       # reload value of rnr_retry_cnt
    ("pkey", 224, 16),
    ("dlid", 240, 16),
    ("qkey", 256, 32),
    ("cqn", 288, 24),            # send completion queue number
    ("sgid_index", 312, 8),      # source GID / MAC table index
    ("traffic_class", 320, 8),   # IPv4 TOS, IPv6 / GRH traffic class
    ("hop_limit", 328, 8),       # IPv4 TTL, IPv6 / GRH hop limit
    ("udp_sport", 336, 16),      # RoCEv2 UDP source port
    ("flow_label", 352, 20),     # IPv6 / GRH flow label
    ("ack_timeout", 376, 5),     # RC with a requester: local ACK timeout 4.096 us x 2^ack_timeout, 0 = no timer
    ("dst_mac", 384, 48),
    ("sq_base", 448, 64),        # send-queue base address (bus address)
    ("dst_gid", 512, 128),       # destination GID / IPv6 address / IPv4-mapped ::ffff:a.b.c.d
    # bytes 80..127 reserved (receive path: RQ base and size, SRQ, ...)
)

_FIELD = {name: (off, width) for name, off, width in QPC_FIELDS}
MUTABLE_FIELDS = tuple(n for n, off, w in QPC_FIELDS if off + w <= MUTABLE_BYTES * 8)


def _check_table():
    used = 0
    for name, off, width in QPC_FIELDS:
        mask = ((1 << width) - 1) << off
        assert not used & mask, f"field {name} overlaps"
        assert off + width <= CACHED_BITS, f"field {name} lies beyond the cached bytes"
        used |= mask


_check_table()


def get_field(record: int, name: str) -> int:
    return get_bits(record, *_FIELD[name])


def set_field(record: int, name: str, value: int) -> int:
    off, width = _FIELD[name]
    mask = ((1 << width) - 1) << off
    return record & ~mask | (value << off) & mask


@dataclass
class QpContext(FieldRecord):
    """One QP context record. ``pack()`` gives the 128 host-memory bytes (reserved bytes zero)."""

    FIELDS = QPC_FIELDS
    BYTES = RECORD_BYTES

    state: int = QpState.RESET
    next_psn: int = 0
    epsn: int = 0
    retry_cnt: int = 7
    rnr_retry_cnt: int = 7
    sq_ci: int = 0
    sq_pi: int = 0
    una_psn: int = 0
    req_wait: int = 0
    rd_pending: int = 0
    service: int = ServiceType.RC
    link_mode: int = LinkMode.ROCEV2_IPV4
    path_mtu: int = PathMtu.MTU_1024
    log_sq_size: int = 8
    qpn: int = 0
    sl: int = 0
    max_rd_atomic: int = 4
    dest_qpn: int = 0
    retry_limit: int = 7
    rnr_limit: int = 7
    pkey: int = 0xFFFF
    dlid: int = 0
    qkey: int = 0
    cqn: int = 0
    sgid_index: int = 0
    traffic_class: int = 0
    hop_limit: int = 64
    udp_sport: int = 0xC000
    flow_label: int = 0
    ack_timeout: int = 0
    dst_mac: int = 0
    sq_base: int = 0
    dst_gid: int = 0


assert [f.name for f in dc_fields(QpContext)] == [n for n, _, _ in QPC_FIELDS]


def apply_op(record: int, op: int, arg: int) -> int:
    """The engine update ``op`` applied to a record (as an integer); LOOKUP returns it unchanged."""
    op = Op(op)
    if op == Op.LOOKUP:
        return record
    if op == Op.SET_PSN:
        return set_field(record, "next_psn", arg & 0xFFFFFF)
    if op == Op.ADD_PSN:
        return set_field(record, "next_psn", (get_field(record, "next_psn") + arg) & 0xFFFFFF)
    if op == Op.SET_SQ_CI:
        if arg >> 16 & 1:
            record = set_field(record, "rd_pending", (get_field(record, "rd_pending") + 1) & 7)
        return set_field(record, "sq_ci", arg & 0xFFFF)
    if op == Op.SET_ERROR:
        return set_field(record, "state", QpState.ERROR)
    if op == Op.SET_EPSN:
        return set_field(record, "epsn", arg & 0xFFFFFF)
    if op == Op.SET_SQ_PI:
        return set_field(record, "sq_pi", arg & 0xFFFF)
    if op == Op.SET_REQ:
        record = set_field(record, "retry_cnt", arg & 7)
        record = set_field(record, "rnr_retry_cnt", arg >> 4 & 7)
        record = set_field(record, "req_wait", arg >> 8 & 1)
        rd = 0 if arg >> 9 & 1 else (get_field(record, "rd_pending") - (arg >> 10 & 7)) & 7
        return set_field(record, "rd_pending", rd)
    if op == Op.SET_UNA:
        return set_field(record, "una_psn", arg & 0xFFFFFF)
    raise AssertionError(op)


@dataclass(frozen=True)
class QpcCacheConfig:
    """Geometry shared by the model, the RTL and the testbench.

    ``ways == 1`` is direct mapped, ``ways == entries`` fully associative. Replacement is always
    the first invalid way of the set, else tree pseudo-LRU over the set's ways.

    ``qpn_bits`` bounds the QPNs the cache holds: a request for ``qpn >= 2**qpn_bits`` gets
    ``BAD_QPN`` like one beyond the table, while control operations reach every QPN of the table
    (those above the bound are never cached). ``Rnic`` passes ``log2(max_qps)``: its engine never
    requests a QPN its scheduler cannot hold, and each tag is that many bits wide, not 24.

    ``mshrs`` is how many misses the RTL keeps outstanding. The model takes one request at a time and
    does not use it: the answers are the same (a request merged into an outstanding miss gets that
    miss's outcome), only which entries stay cached, and so the counters, may differ.
    """

    entries: int = 16
    ways: int = 4
    tag_width: int = 8      # requester tag carried from request to response
    qpn_bits: int = 24      # QPNs below 2**qpn_bits are cacheable
    mshrs: int = 1          # misses outstanding at once (the RTL's miss-status holding registers)

    def __post_init__(self):
        if self.entries < 1 or self.entries & (self.entries - 1):
            raise ValueError(f"entries must be a power of two, not {self.entries!r}")
        if self.ways < 1 or self.ways & (self.ways - 1) or self.ways > self.entries:
            raise ValueError(f"ways must be a power of two no larger than entries, not {self.ways!r}")
        if not 1 <= self.tag_width <= 32:
            raise ValueError(f"tag_width must be 1..32, not {self.tag_width!r}")
        if not 1 <= self.qpn_bits <= 24:
            raise ValueError(f"qpn_bits must be 1..24, not {self.qpn_bits!r}")
        if self.mshrs not in (1, 2, 4, 8, 16):
            raise ValueError(f"mshrs must be 1, 2, 4, 8 or 16, not {self.mshrs!r}")

    @property
    def sets(self) -> int:
        return self.entries // self.ways


class BusError(Exception):
    """An AXI error response: ``resp`` is 2 (SLVERR) or 3 (DECERR)."""

    def __init__(self, resp: int = 2):
        super().__init__(f"AXI resp {resp}")
        self.resp = resp


class HostTable:
    """The QP context table in host memory, record granular, with injectable bus errors.

    ``read_errors`` / ``write_errors`` map a QPN to the AXI response (2 SLVERR, 3 DECERR) that every
    read / write of its record gets; a failed write changes nothing.
    """

    def __init__(self, table_size: int, init: bytes | None = None):
        self.table_size = table_size
        self.mem = bytearray(init if init is not None else bytes(table_size * RECORD_BYTES))
        assert len(self.mem) == table_size * RECORD_BYTES
        self.read_errors: dict[int, int] = {}
        self.write_errors: dict[int, int] = {}

    def read(self, qpn: int) -> bytes:
        if qpn in self.read_errors:
            raise BusError(self.read_errors[qpn])
        return bytes(self.mem[qpn * RECORD_BYTES:(qpn + 1) * RECORD_BYTES])

    def write(self, qpn: int, data: bytes) -> None:
        if qpn in self.write_errors:
            raise BusError(self.write_errors[qpn])
        assert len(data) <= RECORD_BYTES
        self.mem[qpn * RECORD_BYTES:qpn * RECORD_BYTES + len(data)] = data


@dataclass
class _Line:
    valid: bool = False
    dirty: bool = False
    qpn: int = 0
    record: int = 0


def plru_touch(bits: int, ways: int, way: int) -> int:
    """Tree PLRU: point every node on ``way``'s path away from it. Node ``n`` (heap order, root 1)
    is bit ``n - 1``; bit value 1 means "the victim is in the right subtree"."""
    node, lo, hi = 1, 0, ways
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if way < mid:       # accessed left: victim goes right
            bits |= 1 << (node - 1)
            node, hi = 2 * node, mid
        else:
            bits &= ~(1 << (node - 1))
            node, lo = 2 * node + 1, mid
    return bits


def plru_victim(bits: int, ways: int) -> int:
    node, lo, hi = 1, 0, ways
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if bits >> (node - 1) & 1:
            node, lo = 2 * node + 1, mid
        else:
            node, hi = 2 * node, mid
    return lo


class QpcCacheModel:
    """Golden model of the QP context cache in front of a :class:`HostTable`.

    Requests are processed one at a time, in order. ``request`` returns ``(status, record_bytes)``
    (``record_bytes`` is ``None`` unless the status is OK); control operations return a status.
    """

    def __init__(self, cfg: QpcCacheConfig, table: HostTable):
        self.cfg = cfg
        self.table = table
        self.lines = [[_Line() for _ in range(cfg.ways)] for _ in range(cfg.sets)]
        self.plru = [0] * cfg.sets
        self.counters = dict.fromkeys(COUNTER_NAMES, 0)

    def _count(self, name):
        self.counters[name] = (self.counters[name] + 1) % (1 << COUNTER_WIDTH)

    def _find(self, qpn):
        s = qpn % self.cfg.sets
        for w, line in enumerate(self.lines[s]):
            if line.valid and line.qpn == qpn:
                return s, w, line
        return s, None, None

    def cached(self, qpn) -> bool:
        return self._find(qpn)[2] is not None

    def _writeback(self, line) -> bool:
        """Write the mutable bytes of a dirty line back; True if it worked."""
        self._count("writebacks")
        try:
            self.table.write(line.qpn, line.record.to_bytes(CACHED_BYTES, "little")[:MUTABLE_BYTES])
            return True
        except BusError:
            return False

    def request(self, op: int, qpn: int, arg: int = 0):
        """``(status, record)``: the first :data:`CACHED_BYTES` bytes of the record after the update,
        or ``None`` when ``status`` is not OK."""
        self._count("lookups")
        if qpn >= self.table.table_size or qpn >> self.cfg.qpn_bits:
            self._count("errors")
            return Status.BAD_QPN, None
        s, w, line = self._find(qpn)
        if line is not None:
            self._count("hits")
        else:
            self._count("misses")
            ways = self.lines[s]
            invalid = [i for i, l in enumerate(ways) if not l.valid]
            w = invalid[0] if invalid else plru_victim(self.plru[s], self.cfg.ways)
            victim = ways[w]
            wb_ok = True
            if victim.valid and victim.dirty:
                wb_ok = self._writeback(victim)
                if wb_ok:
                    victim.dirty = False
            try:
                raw = self.table.read(qpn)
                rd_ok = True
            except BusError:
                rd_ok = False
            if not (rd_ok and wb_ok):
                self._count("errors")
                return Status.BUS_ERROR, None
            if victim.valid:
                self._count("evictions")
            line = ways[w] = _Line(True, False, qpn, int.from_bytes(raw[:CACHED_BYTES], "little"))
        self.plru[s] = plru_touch(self.plru[s], self.cfg.ways, w)
        if op != Op.LOOKUP:
            line.record = apply_op(line.record, op, arg)
            line.dirty = True
        return Status.OK, line.record.to_bytes(CACHED_BYTES, "little")

    def modify(self, qpn: int, record: bytes) -> Status:
        if qpn >= self.table.table_size:
            self._count("errors")
            return Status.BAD_QPN
        s, w, line = self._find(qpn)
        if line is not None:
            self.lines[s][w] = _Line()
        try:
            self.table.write(qpn, bytes(record))
        except BusError:
            self._count("errors")
            return Status.BUS_ERROR
        return Status.OK

    def invalidate(self, qpn: int) -> Status:
        if qpn >= self.table.table_size:
            self._count("errors")
            return Status.BAD_QPN
        s, w, line = self._find(qpn)
        if line is None:
            return Status.OK
        if line.dirty and not self._writeback(line):
            self._count("errors")
            return Status.BUS_ERROR
        self.lines[s][w] = _Line()
        return Status.OK

    def flush(self) -> Status:
        status = Status.OK
        for s in range(self.cfg.sets):
            for w in range(self.cfg.ways):
                line = self.lines[s][w]
                if not line.valid:
                    continue
                if line.dirty and not self._writeback(line):
                    status = Status.BUS_ERROR
                    continue
                self.lines[s][w] = _Line()
        if status != Status.OK:
            self._count("errors")
        return status

    def coherent_table(self) -> bytes:
        """Host memory as it would be after a successful flush (the model's view of the table)."""
        mem = bytearray(self.table.mem)
        for ways in self.lines:
            for line in ways:
                if line.valid and line.dirty:
                    off = line.qpn * RECORD_BYTES
                    mem[off:off + MUTABLE_BYTES] = line.record.to_bytes(CACHED_BYTES, "little")[:MUTABLE_BYTES]
        return bytes(mem)
