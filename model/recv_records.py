"""Host-memory formats of the receive path: the QP context's receive bytes, the receive WQE, the memory
region (MR) record and the responder resource slot.

Like :mod:`rnic.model.wqe` and :mod:`rnic.model.qpc`, each format is a field table ``(name, bit offset,
width)`` over one little-endian integer (bit ``8*b + k`` is bit ``k`` of byte ``b``); the codecs, the
tests and ``docs/receive.md`` are derived from the tables.

* :data:`RECV_QPC_FIELDS`: bytes 80..127 of the 128-byte QP context record, the responder's half.
  Bytes 80..107 are engine-owned (written back like bytes 0..15); bytes 108..127 are software-owned
  (written by MODIFY). :class:`RecvContext` is the codec of those 48 bytes; offsets in the table count
  from record byte 80. The expected PSN ``epsn`` stays in record bytes 4..6.
* :data:`RECV_WQE_FIELDS`: the 64-byte receive WQE, a ring of ``2**log_rq_size`` of them at ``rq_base``.
  It holds :data:`RECV_SGES` scatter entries (address, length, L_Key).
* :data:`MR_FIELDS`: one 32-byte record of the MR table, at ``mr_base + index * 32``. A key (R_Key or
  L_Key) is ``index << 8 | key``: the table index and an 8-bit variant that software changes on every
  re-registration, so a stale key misses.
* :data:`RES_FIELDS`: one 32-byte responder resource slot; QP ``n`` owns :data:`MAX_RD_ATOMIC` slots at
  ``res_base + (n * MAX_RD_ATOMIC + i) * 32``. A slot remembers an executed RDMA READ or atomic so a
  duplicate request can be answered without executing it again.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, fields as dc_fields

from .record import FieldRecord

__all__ = ["markdown_tables", "RECV_QPC_OFFSET", "RECV_QPC_BYTES", "RECV_MUTABLE_BYTES", "RECV_QPC_FIELDS", "RecvContext", "OpenMessage",
           "Access", "RECV_WQE_BYTES", "RECV_SGES", "SGE_FIELDS", "RECV_WQE_FIELDS", "Sge", "RecvWqe",
           "MR_BYTES", "MR_FIELDS", "MrState", "MemoryRegion", "mr_index", "mr_key",
           "RES_BYTES", "MAX_RD_ATOMIC", "RES_FIELDS", "ResKind", "ResSlot", "RecvOpcode",
           "CQE_FLAG_IMM", "CQE_FLAG_GRH", "CQE_FLAG_SOLICITED", "CQE_FLAG_INV"]

RECV_QPC_OFFSET = 80        # record byte where the receive half starts
RECV_QPC_BYTES = 48         # record bytes 80..127
RECV_MUTABLE_BYTES = 28     # record bytes 80..107: engine-owned, written back

RECV_WQE_BYTES = 64
RECV_SGES = 3               # scatter entries per receive WQE
MR_BYTES = 32
RES_BYTES = 32
MAX_RD_ATOMIC = 4           # resource slots per QP: the largest max_dest_rd_atomic

CQE_FLAG_IMM = 0x02         # receive CQE: ``imm`` holds immediate data
CQE_FLAG_GRH = 0x04         # UD receive CQE: the first 40 bytes of the buffer hold a GRH (or its IPv4 image)
CQE_FLAG_SOLICITED = 0x08   # the last packet had the BTH SE bit
CQE_FLAG_INV = 0x10         # SEND with invalidate: ``imm`` holds the R_Key that was invalidated


class OpenMessage(enum.IntEnum):
    """Which multi-packet message a QP's responder is inside (``RecvContext.open``)."""
    NONE = 0
    SEND = 1
    WRITE = 2


class Access(enum.IntFlag):
    """Access rights of an MR and of a QP (``enum ibv_access_flags`` values)."""
    LOCAL_WRITE = 0x1
    REMOTE_WRITE = 0x2
    REMOTE_READ = 0x4
    REMOTE_ATOMIC = 0x8


class RecvOpcode(enum.IntEnum):
    """The CQE ``opcode`` of a receive completion (``enum ibv_wc_opcode`` values)."""
    RECV = 0x80
    RECV_RDMA_WITH_IMM = 0x81


# offsets count from record byte 80
RECV_QPC_TABLE: tuple[tuple[str, int, int, str], ...] = (
    # --- record bytes 80..107: engine-owned ---
    ("msn", 0, 24, "message sequence number: messages completed"),
    ("open", 24, 2, "OpenMessage: 0 none, 1 SEND, 2 RDMA WRITE"),
    ("nak_sent", 26, 1, "a PSN sequence error NAK is outstanding"),
    ("uc_drop", 27, 1, "UC: dropping the rest of a message after a gap"),
    ("res_head", 28, 2, "next resource slot to fill"),
    ("rq_ci", 32, 16, "receive-queue consumer index"),
    ("rq_pi", 48, 16, "receive-queue producer index (RQ doorbell)"),
    ("write_addr", 64, 64, "bus address of the next byte of the open RDMA WRITE"),
    ("resid", 128, 32, "bytes the open RDMA WRITE's RETH still allows"),
    ("write_len", 160, 32, "the open RDMA WRITE's RETH length"),
    ("recv_off", 192, 32, "bytes placed so far of the open SEND"),
    # --- record bytes 108..127: software-owned ---
    ("rcqn", 224, 24, "receive completion queue number"),
    ("log_rq_size", 248, 4, "log2 of receive-queue entries"),
    ("pd", 256, 24, "protection domain"),
    ("access", 280, 4, "Access flags: what remote peers may do through this QP"),
    ("min_rnr_timer", 288, 5, "RNR NAK timer code sent in an RNR NAK (`RNR_TIMER_US`)"),
    ("max_dest_rd_atomic", 296, 3, "READ / atomic resource slots, 0..4 (0: READ and atomics are refused)"),
    ("rq_base", 320, 64, "receive-queue base (bus address, 64-byte aligned)"),
)

SGE_TABLE: tuple[tuple[str, int, int, str], ...] = (
    ("addr", 0, 64, "virtual address, inside the MR of `lkey`"),
    ("length", 64, 32, "bytes"),
    ("lkey", 96, 32, "L_Key of an MR of the QP's PD with LOCAL_WRITE"),
)

RECV_WQE_TABLE: tuple[tuple[str, int, int, str], ...] = (
    ("wr_id", 0, 64, "returned in the CQE"),
    ("num_sge", 64, 8, "scatter entries used, 0..3; entries past it are ignored"),
    # bytes 9..15 reserved; SGE i at bytes 16 + 16 * i
)

MR_TABLE: tuple[tuple[str, int, int, str], ...] = (
    ("va", 0, 64, "first virtual address of the region"),
    ("length", 64, 64, "bytes"),
    ("addr", 128, 64, "bus address of `va` (the region is contiguous on the bus)"),
    ("pd", 192, 24, "protection domain"),
    ("access", 216, 8, "Access flags: 1 LOCAL_WRITE, 2 REMOTE_WRITE, 4 REMOTE_READ, 8 REMOTE_ATOMIC"),
    ("key", 224, 8, "the key's variant byte: bits 7:0 of every key of this region"),
    ("state", 232, 8, "MrState: 0 INVALID, 1 VALID"),
    # bytes 30..31 reserved
)

RES_TABLE: tuple[tuple[str, int, int, str], ...] = (
    ("kind", 0, 8, "ResKind: 0 FREE, 1 READ, 2 ATOMIC"),
    ("first_psn", 8, 24, "the request's PSN"),
    ("last_psn", 32, 24, "READ: the last response's PSN; atomic: first_psn"),
    ("va", 64, 64, "the request's virtual address"),
    ("rkey", 128, 32, "the request's R_Key"),
    ("length", 160, 32, "READ length (atomic: 8)"),
    ("data", 192, 64, "READ: bus address of `va`; atomic: the original value returned"),
)


def _fields(table):
    return tuple((name, off, width) for name, off, width, _ in table)


RECV_QPC_FIELDS = _fields(RECV_QPC_TABLE)
SGE_FIELDS = _fields(SGE_TABLE)
RECV_WQE_FIELDS = _fields(RECV_WQE_TABLE)
MR_FIELDS = _fields(MR_TABLE)
RES_FIELDS = _fields(RES_TABLE)


def markdown_table(table, first_byte: int = 0) -> str:
    """A byte table of one format for docs/receive.md (byte numbers from ``first_byte``)."""
    lines = ["| byte(s) | bits | field | width | meaning |", "|---|---|---|---|---|"]
    for name, off, width, text in table:
        lo, hi = first_byte + off // 8, first_byte + (off + width - 1) // 8
        whole = off % 8 == 0 and width % 8 == 0
        bits = "" if whole else f"{off % 8 + width - 1}:{off % 8}" if width > 1 else f"{off % 8}"
        lines.append(f"| {lo if lo == hi else f'{lo}–{hi}'} | {bits} | `{name}` | {width} | {text} |")
    return "\n".join(lines)


def markdown_tables() -> str:
    """Every receive-path format, as docs/receive.md shows them (tests check the page holds this text)."""
    parts = [("QP context, receive half (record bytes 80..127)", RECV_QPC_TABLE, RECV_QPC_OFFSET),
             ("Receive WQE header (bytes 0..15; SGE i at bytes 16 + 16 i)", RECV_WQE_TABLE, 0),
             ("Scatter entry (16 bytes)", SGE_TABLE, 0),
             ("MR record (32 bytes)", MR_TABLE, 0),
             ("Responder resource slot (32 bytes)", RES_TABLE, 0)]
    return "\n\n".join(f"**{title}**\n\n{markdown_table(t, b)}" for title, t, b in parts)


class MrState(enum.IntEnum):
    INVALID = 0
    VALID = 1


class ResKind(enum.IntEnum):
    FREE = 0
    READ = 1
    ATOMIC = 2


def _check(table, nbytes):
    used = 0
    for name, off, width in table:
        mask = ((1 << width) - 1) << off
        assert off + width <= nbytes * 8 and not used & mask, name
        used |= mask


_check(RECV_QPC_FIELDS, RECV_QPC_BYTES)
_check(RECV_WQE_FIELDS, 16)
_check(SGE_FIELDS, 16)
_check(MR_FIELDS, MR_BYTES)
_check(RES_FIELDS, RES_BYTES)
assert all(off + w <= RECV_MUTABLE_BYTES * 8 for n, off, w in RECV_QPC_FIELDS[:11])
assert all(off >= RECV_MUTABLE_BYTES * 8 for n, off, w in RECV_QPC_FIELDS[11:])


def mr_key(index: int, key: int) -> int:
    """The 32-bit R_Key / L_Key of MR table entry ``index`` with variant byte ``key``."""
    return (index << 8 | key & 0xFF) & 0xFFFF_FFFF


def mr_index(key: int) -> int:
    """The MR table index a key names."""
    return key >> 8


@dataclass
class RecvContext(FieldRecord):
    """The receive half of a QP context (record bytes 80..127). Defaults: an empty 1-entry RQ, no rights."""

    FIELDS = RECV_QPC_FIELDS
    BYTES = RECV_QPC_BYTES

    msn: int = 0
    open: int = OpenMessage.NONE
    nak_sent: int = 0
    uc_drop: int = 0
    res_head: int = 0
    rq_ci: int = 0
    rq_pi: int = 0
    write_addr: int = 0
    resid: int = 0
    write_len: int = 0
    recv_off: int = 0
    rcqn: int = 0
    log_rq_size: int = 0
    pd: int = 0
    access: int = 0
    min_rnr_timer: int = 0
    max_dest_rd_atomic: int = 0
    rq_base: int = 0


@dataclass
class Sge(FieldRecord):
    """One scatter entry of a receive WQE."""

    FIELDS = SGE_FIELDS
    BYTES = 16

    addr: int = 0
    length: int = 0
    lkey: int = 0


@dataclass
class RecvWqe:
    """One receive work request: ``wr_id`` and up to :data:`RECV_SGES` scatter entries."""

    wr_id: int = 0
    sges: tuple[Sge, ...] = ()

    def __post_init__(self):
        self.sges = tuple(self.sges)
        if len(self.sges) > RECV_SGES:
            raise ValueError(f"a receive WQE holds at most {RECV_SGES} scatter entries, not {len(self.sges)}")
        if not 0 <= self.wr_id < 1 << 64:
            raise ValueError(f"wr_id must fit in 64 bits, not {self.wr_id!r}")

    @property
    def capacity(self) -> int:
        return sum(s.length for s in self.sges)

    def pack(self) -> bytes:
        head = (self.wr_id | len(self.sges) << 64).to_bytes(16, "little")
        body = b"".join(s.pack() for s in self.sges)
        return head + body + bytes(RECV_WQE_BYTES - 16 - len(body))

    @classmethod
    def unpack(cls, raw: bytes) -> "RecvWqe":
        """The WQE in ``raw``; a ``num_sge`` above :data:`RECV_SGES` is a ValueError (a malformed WQE)."""
        if len(raw) != RECV_WQE_BYTES:
            raise ValueError(f"a receive WQE is {RECV_WQE_BYTES} bytes, not {len(raw)}")
        n = raw[8]
        if n > RECV_SGES:
            raise ValueError(f"receive WQE num_sge {n} exceeds {RECV_SGES}")
        return cls(int.from_bytes(raw[:8], "little"),
                   tuple(Sge.unpack(raw[16 + 16 * i:32 + 16 * i]) for i in range(n)))


@dataclass
class MemoryRegion(FieldRecord):
    """One MR table record."""

    FIELDS = MR_FIELDS
    BYTES = MR_BYTES

    va: int = 0
    length: int = 0
    addr: int = 0
    pd: int = 0
    access: int = 0
    key: int = 0
    state: int = MrState.INVALID

    def covers(self, va: int, length: int) -> bool:
        """``[va, va + length)`` lies inside the region."""
        return self.va <= va and va + length <= self.va + self.length

    def bus_address(self, va: int) -> int:
        return (self.addr + va - self.va) & (1 << 64) - 1


@dataclass
class ResSlot(FieldRecord):
    """One responder resource slot."""

    FIELDS = RES_FIELDS
    BYTES = RES_BYTES

    kind: int = ResKind.FREE
    first_psn: int = 0
    last_psn: int = 0
    va: int = 0
    rkey: int = 0
    length: int = 0
    data: int = 0


for _cls, _table in ((RecvContext, RECV_QPC_FIELDS), (Sge, SGE_FIELDS), (MemoryRegion, MR_FIELDS),
                     (ResSlot, RES_FIELDS)):
    assert [f.name for f in dc_fields(_cls)] == [n for n, _, _ in _table], _cls
