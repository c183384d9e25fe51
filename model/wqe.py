"""Host-memory formats of the descriptor engine: the 64-byte WQE, the 32-byte CQE and the CQ context.

Each format is a field table ``(name, bit offset, width)`` (bit ``8*b + k`` is bit ``k`` of byte
``b``) from which the dataclass codec, the RTL layouts and the tests are all derived. As in
:mod:`rnic.model.qpc`, a record is one little-endian integer: multi-byte fields are little-endian
in host memory, MACs and GIDs are the integers :class:`rnic.model.descriptor.PacketDesc` uses.
Reserved bits are written as zero and ignored on read. ``docs/engine.md`` has the byte tables.

The WQE has two layouts over the same 64 bytes, chosen by the QP's service type, not by the WQE:
RC/UC WQEs carry the remote address and R_Key in bytes 20..31, UD WQEs carry the destination
(Q_Key, MAC, DLID, QPN, GID) in bytes 20..31 and 44..63. Inline data replaces the local address
and L_Key and runs to the end of the spare bytes: 32 bytes (32..63) on RC/UC, 12 bytes (32..43)
on UD.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields as dc_fields

from .record import FieldRecord, get_bits

__all__ = ["WQE_BYTES", "CQE_BYTES", "CQ_RECORD_BYTES", "MAX_MESSAGE", "INLINE_OFFSET", "INLINE_MAX_RC",
           "INLINE_MAX_UD", "WqeOpcode", "WqeFlags", "CqeStatus", "CqState", "CQE_FLAG_SQ",
           "WQE_FIELDS", "CQE_FIELDS", "CQC_FIELDS", "Wqe", "Cqe", "CqContext", "inline_capacity"]

WQE_BYTES = 64
CQE_BYTES = 32
CQ_RECORD_BYTES = 32
MAX_MESSAGE = 1 << 31          # the largest message length a WQE may ask for
INLINE_OFFSET = 32             # inline data starts at this WQE byte
INLINE_MAX_RC = 32             # bytes 32..63
INLINE_MAX_UD = 12             # bytes 32..43 (44..63 hold the UD destination)
CQE_FLAG_SQ = 0x01             # CQE.flags bit 0: a send-queue completion


class WqeOpcode(enum.IntEnum):
    """The WQE operation (byte 0). 0 is never valid, so a zeroed ring slot is caught."""
    SEND = 0x01
    SEND_WITH_IMM = 0x02
    RDMA_WRITE = 0x03
    RDMA_WRITE_WITH_IMM = 0x04
    RDMA_READ = 0x05
    ATOMIC_CMP_SWAP = 0x06       # RC: compare ``compare_add``, swap in ``swap``; length 8
    ATOMIC_FETCH_ADD = 0x07      # RC: add ``compare_add``; length 8
    SEND_WITH_INV = 0x08         # reserved (the invalidate R_Key goes in ``imm``)


class WqeFlags(enum.IntFlag):
    """WQE byte 1. Bits 4..7 are reserved and ignored."""
    SIGNALED = 0x01
    SOLICITED = 0x02
    FENCE = 0x04
    INLINE = 0x08


class CqeStatus(enum.IntEnum):
    """CQE status (byte 20). Values below 0x80 are ``enum ibv_wc_status`` values."""
    SUCCESS = 0x00
    LOC_LEN_ERR = 0x01           # length > 2**31, > path MTU on UD, > inline capacity; receive: > the buffer
    LOC_QP_OP_ERR = 0x02         # unknown/reserved opcode, opcode not allowed on the service, bad QP context
    LOC_PROT_ERR = 0x04          # receive: a scatter entry's L_Key does not allow the write
    WR_FLUSH_ERR = 0x05          # flushed: the QP was in ERROR when this WQE's turn came
    REM_INV_REQ_ERR = 0x09       # the message broke a rule of the protocol (NAK 0x61, sent or received)
    REM_ACCESS_ERR = 0x0A        # the message's memory access was refused (NAK 0x62, sent or received)
    BAD_RESP_ERR = 0x07          # RC send: a response that does not fit the WQE it answers
    REM_OP_ERR = 0x0B            # the responder could not complete the message (NAK 0x63, sent or received)
    RETRY_EXC_ERR = 0x0C         # RC send: local ACK timeouts and PSN sequence NAKs used up the QP's retry count
    RNR_RETRY_EXC_ERR = 0x0D     # RC send: RNR NAKs used up the QP's RNR retry count
    QP_STATE_ERR = 0x80          # doorbell for a QP that is not in RTS (or ERROR)
    SQ_OVERFLOW = 0x81           # doorbell producer index more than the ring size ahead of the consumer index
    WQE_FETCH_ERR = 0x82         # AXI error response on the WQE read
    PAYLOAD_READ_ERR = 0x83      # AXI error response on a payload read
    CQ_OVERFLOW = 0x84           # the CQ had one free slot left: this CQE took it and the CQ went to ERROR
    RQ_OVERFLOW = 0x85           # receive-queue doorbell more than the ring size ahead of the consumer index
    RQ_WQE_FETCH_ERR = 0x86      # AXI error response on a receive WQE read, or a malformed receive WQE
    PAYLOAD_WRITE_ERR = 0x87     # AXI error response on a receive payload write


class CqState(enum.IntEnum):
    RESET = 0                    # not usable: CQEs for it are dropped
    ACTIVE = 1
    ERROR = 2                    # overflowed or bus error: CQEs for it are dropped


# (name, bit offset, width, layout): layout "all", "rc" (RC/UC only), "ud" (UD only),
# "local" (not with INLINE), "atomic" (RC/UC, not with INLINE).
WQE_FIELDS: tuple[tuple[str, int, int, str], ...] = (
    ("opcode", 0, 8, "all"),           # WqeOpcode
    ("flags", 8, 8, "all"),            # WqeFlags
    # bytes 2..3 reserved
    ("length", 32, 32, "all"),         # message length in bytes
    ("wr_id", 64, 64, "all"),          # returned in the CQE
    ("imm", 128, 32, "all"),           # immediate data (ImmDt), or the R_Key to invalidate
    ("rkey", 160, 32, "rc"),
    ("remote_addr", 192, 64, "rc"),
    ("qkey", 160, 32, "ud"),           # bit 31 set: use the QP context's Q_Key
    ("dst_mac", 192, 48, "ud"),
    ("dlid", 240, 16, "ud"),
    ("local_addr", 256, 64, "local"),  # payload source (SEND, WRITE) or destination (READ)
    ("lkey", 320, 32, "local"),        # carried, not checked (no memory registration yet)
    ("compare_add", 352, 64, "atomic"),
    ("swap", 416, 64, "atomic"),
    ("dest_qpn", 352, 24, "ud"),
    # byte 47 reserved (UD)
    ("dst_gid", 384, 128, "ud"),
)

CQE_FIELDS: tuple[tuple[str, int, int], ...] = (
    ("wr_id", 0, 64),
    ("byte_len", 64, 32),      # message length on SUCCESS, else 0
    ("imm", 96, 32),           # receive completions (later); 0 on send completions
    ("qpn", 128, 24),
    ("opcode", 152, 8),        # the WQE's WqeOpcode; 0 for a doorbell error and a failed WQE fetch
    ("status", 160, 8),        # CqeStatus
    ("flags", 168, 8),         # bit 0: send queue; receive CQEs: CQE_FLAG_IMM, _GRH, _SOLICITED, _INV
    ("wqe_index", 176, 16),    # SQ (RQ) index of the WQE (the rejected producer index for doorbell errors)
    ("src_qp", 192, 24),       # UD receive completions: the sender's QPN (DETH); 0 otherwise
    ("slid", 216, 16),         # receive completions on IB: the sender's LID (LRH SLID); 0 otherwise
    # bytes 29..30 reserved
    ("owner", 248, 1),         # 1 on the ring's 1st, 3rd, ... pass; 0 on the 2nd, 4th, ...
)

CQC_FIELDS: tuple[tuple[str, int, int], ...] = (
    ("state", 0, 8),           # CqState
    ("log_size", 8, 8),        # ring entries = 2**log_size, 1..15
    # bytes 2..3 reserved
    ("pi", 32, 16),            # producer index: written by the engine after each CQE
    ("ci", 48, 16),            # consumer index: written by the engine on a CQ_DB_CI register write
    ("ring_base", 64, 64),     # CQE ring base (bus address, 32-byte aligned)
    # bytes 16..31 reserved
)


def _check(table, nbytes, overlaps_ok=lambda a, b: False):
    """Every field inside the record; overlapping fields only in mutually exclusive layouts."""
    for i, (name, off, width, *lay) in enumerate(table):
        assert off + width <= nbytes * 8, name
        for other, off2, width2, *lay2 in table[:i]:
            if off < off2 + width2 and off2 < off + width:
                assert overlaps_ok(lay[0] if lay else None, lay2[0] if lay2 else None), (name, other)


_EXCLUSIVE = {frozenset(p) for p in (("rc", "ud"), ("ud", "local"), ("ud", "atomic"))}
_check(WQE_FIELDS, WQE_BYTES, lambda a, b: frozenset((a, b)) in _EXCLUSIVE)
_check(CQE_FIELDS, CQE_BYTES)
_check(CQC_FIELDS, CQ_RECORD_BYTES)


def inline_capacity(ud: bool) -> int:
    """Inline payload bytes a WQE can hold on a UD (``ud``) or RC/UC QP."""
    return INLINE_MAX_UD if ud else INLINE_MAX_RC


def _layouts(flags: int, ud: bool) -> set[str]:
    used = {"all", "ud" if ud else "rc"}
    if not flags & WqeFlags.INLINE:
        used.add("local")
        if not ud:
            used.add("atomic")
    return used


@dataclass
class Wqe:
    """One work request. ``pack(ud)`` / ``unpack(raw, ud)`` use the RC/UC or the UD layout.

    Fields outside the chosen layout must be zero to pack; ``unpack`` leaves them zero.
    ``inline_data`` is used with ``WqeFlags.INLINE``; unpack returns its first
    ``min(length, capacity)`` bytes.
    """

    opcode: int = WqeOpcode.SEND
    flags: int = WqeFlags.SIGNALED
    length: int = 0
    wr_id: int = 0
    imm: int = 0
    rkey: int = 0
    remote_addr: int = 0
    qkey: int = 0
    dst_mac: int = 0
    dlid: int = 0
    local_addr: int = 0
    lkey: int = 0
    compare_add: int = 0
    swap: int = 0
    dest_qpn: int = 0
    dst_gid: int = 0
    inline_data: bytes = field(default=b"")

    def __post_init__(self):
        for name, _, width, _ in WQE_FIELDS:
            value = int(getattr(self, name))
            if not 0 <= value < (1 << width):
                raise ValueError(f"Wqe.{name} must fit in {width} bits, not {value!r}")
        self.inline_data = bytes(self.inline_data)

    def pack(self, ud: bool = False) -> bytes:
        used = _layouts(self.flags, ud)
        out = 0
        for name, off, _, layout in WQE_FIELDS:
            value = int(getattr(self, name))
            if layout in used:
                out |= value << off
            elif value:
                raise ValueError(f"Wqe.{name} is not part of the {'UD' if ud else 'RC/UC'} layout "
                                 f"with flags 0x{self.flags:02x}")
        raw = bytearray(out.to_bytes(WQE_BYTES, "little"))
        if self.flags & WqeFlags.INLINE:
            cap = inline_capacity(ud)
            if len(self.inline_data) > cap:
                raise ValueError(f"{len(self.inline_data)} inline bytes exceed the {cap} the WQE holds")
            raw[INLINE_OFFSET:INLINE_OFFSET + len(self.inline_data)] = self.inline_data
        elif self.inline_data:
            raise ValueError("inline_data without WqeFlags.INLINE")
        return bytes(raw)

    @classmethod
    def unpack(cls, raw: bytes, ud: bool = False) -> "Wqe":
        if len(raw) != WQE_BYTES:
            raise ValueError(f"a WQE is {WQE_BYTES} bytes, not {len(raw)}")
        value = int.from_bytes(raw, "little")
        flags = get_bits(value, 8, 8)
        used = _layouts(flags, ud)
        kw = {name: get_bits(value, off, width) for name, off, width, layout in WQE_FIELDS if layout in used}
        if flags & WqeFlags.INLINE:
            n = min(kw["length"], inline_capacity(ud))
            kw["inline_data"] = bytes(raw[INLINE_OFFSET:INLINE_OFFSET + n])
        return cls(**kw)


@dataclass
class Cqe(FieldRecord):
    """One 32-byte completion queue entry."""

    FIELDS = CQE_FIELDS
    BYTES = CQE_BYTES

    wr_id: int = 0
    byte_len: int = 0
    imm: int = 0
    qpn: int = 0
    opcode: int = 0
    status: int = CqeStatus.SUCCESS
    flags: int = CQE_FLAG_SQ
    wqe_index: int = 0
    src_qp: int = 0
    slid: int = 0
    owner: int = 0


@dataclass
class CqContext(FieldRecord):
    """One 32-byte CQ context record, at ``cq_base + cqn * CQ_RECORD_BYTES`` in host memory."""

    FIELDS = CQC_FIELDS
    BYTES = CQ_RECORD_BYTES

    state: int = CqState.RESET
    log_size: int = 4
    pi: int = 0
    ci: int = 0
    ring_base: int = 0

    @property
    def size(self) -> int:
        return 1 << self.log_size


assert [f.name for f in dc_fields(Wqe)] == [n for n, *_ in WQE_FIELDS] + ["inline_data"]
assert [f.name for f in dc_fields(Cqe)] == [n for n, _, _ in CQE_FIELDS]
assert [f.name for f in dc_fields(CqContext)] == [n for n, _, _ in CQC_FIELDS]
