"""The IBTA BTH opcode table for RC, UC and UD (plus the RoCEv2 CNP): which extended headers follow the BTH.

An opcode is ``transport << 5 | operation`` (IBA Vol 1, "Base Transport Header", opcode field).
:data:`OPCODE_INFO` maps every supported :class:`Opcode` to an :class:`OpcodeInfo` giving the ordered
extended headers after the BTH and whether a payload follows. RD and XRC are not supported.
Cross-checked against Linux rxe (drivers/infiniband/sw/rxe/rxe_opcode.c) and scapy.contrib.roce;
see tests/model/test_opcodes.py and docs/wire-formats.md.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .headers import AETH, DETH, IETH, RETH, AtomicAckETH, AtomicETH, Header, ImmDt

__all__ = ["Transport", "Position", "Opcode", "OpcodeInfo", "OPCODE_INFO", "opcode_info", "CNP_PAYLOAD_LEN"]

CNP_PAYLOAD_LEN = 16  # RoCEv2 CNP: 16 reserved bytes after the BTH (IBTA Annex A17)


class Transport(enum.IntEnum):
    """The opcode's top three bits."""

    RC = 0b000
    UC = 0b001
    RD = 0b010
    UD = 0b011
    CNP = 0b100


class Position(enum.Enum):
    """Where a packet sits in its message."""

    FIRST = "first"
    MIDDLE = "middle"
    LAST = "last"
    ONLY = "only"


class Opcode(enum.IntEnum):
    RC_SEND_FIRST = 0x00
    RC_SEND_MIDDLE = 0x01
    RC_SEND_LAST = 0x02
    RC_SEND_LAST_WITH_IMMEDIATE = 0x03
    RC_SEND_ONLY = 0x04
    RC_SEND_ONLY_WITH_IMMEDIATE = 0x05
    RC_RDMA_WRITE_FIRST = 0x06
    RC_RDMA_WRITE_MIDDLE = 0x07
    RC_RDMA_WRITE_LAST = 0x08
    RC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x09
    RC_RDMA_WRITE_ONLY = 0x0A
    RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x0B
    RC_RDMA_READ_REQUEST = 0x0C
    RC_RDMA_READ_RESPONSE_FIRST = 0x0D
    RC_RDMA_READ_RESPONSE_MIDDLE = 0x0E
    RC_RDMA_READ_RESPONSE_LAST = 0x0F
    RC_RDMA_READ_RESPONSE_ONLY = 0x10
    RC_ACKNOWLEDGE = 0x11
    RC_ATOMIC_ACKNOWLEDGE = 0x12
    RC_COMPARE_SWAP = 0x13
    RC_FETCH_ADD = 0x14
    RC_SEND_LAST_WITH_INVALIDATE = 0x16
    RC_SEND_ONLY_WITH_INVALIDATE = 0x17

    UC_SEND_FIRST = 0x20
    UC_SEND_MIDDLE = 0x21
    UC_SEND_LAST = 0x22
    UC_SEND_LAST_WITH_IMMEDIATE = 0x23
    UC_SEND_ONLY = 0x24
    UC_SEND_ONLY_WITH_IMMEDIATE = 0x25
    UC_RDMA_WRITE_FIRST = 0x26
    UC_RDMA_WRITE_MIDDLE = 0x27
    UC_RDMA_WRITE_LAST = 0x28
    UC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x29
    UC_RDMA_WRITE_ONLY = 0x2A
    UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x2B

    UD_SEND_ONLY = 0x64
    UD_SEND_ONLY_WITH_IMMEDIATE = 0x65

    CNP = 0x81


@dataclass(frozen=True)
class OpcodeInfo:
    """What follows the BTH for one opcode."""

    opcode: Opcode
    transport: Transport
    operation: str                        # SEND, RDMA_WRITE, RDMA_READ_REQUEST, RDMA_READ_RESPONSE, ...
    position: Position | None             # None for single-packet operations without FIRST/.../ONLY forms
    ext_headers: tuple[type[Header], ...]  # in wire order
    has_payload: bool
    fixed_payload_len: int | None = None  # CNP only

    @property
    def name(self) -> str:
        return self.opcode.name

    @property
    def ext_len(self) -> int:
        return sum(h.SIZE for h in self.ext_headers)

    @property
    def with_immediate(self) -> bool:
        return ImmDt in self.ext_headers

    @property
    def with_invalidate(self) -> bool:
        return IETH in self.ext_headers


# operation code (low 5 bits) -> (operation, position, extended headers, payload); IBA Vol 1 opcode table.
_OPERATIONS: dict[int, tuple[str, Position | None, tuple[type[Header], ...], bool]] = {
    0x00: ("SEND", Position.FIRST, (), True),
    0x01: ("SEND", Position.MIDDLE, (), True),
    0x02: ("SEND", Position.LAST, (), True),
    0x03: ("SEND", Position.LAST, (ImmDt,), True),
    0x04: ("SEND", Position.ONLY, (), True),
    0x05: ("SEND", Position.ONLY, (ImmDt,), True),
    0x06: ("RDMA_WRITE", Position.FIRST, (RETH,), True),
    0x07: ("RDMA_WRITE", Position.MIDDLE, (), True),
    0x08: ("RDMA_WRITE", Position.LAST, (), True),
    0x09: ("RDMA_WRITE", Position.LAST, (ImmDt,), True),
    0x0A: ("RDMA_WRITE", Position.ONLY, (RETH,), True),
    0x0B: ("RDMA_WRITE", Position.ONLY, (RETH, ImmDt), True),
    0x0C: ("RDMA_READ_REQUEST", None, (RETH,), False),
    0x0D: ("RDMA_READ_RESPONSE", Position.FIRST, (AETH,), True),
    0x0E: ("RDMA_READ_RESPONSE", Position.MIDDLE, (), True),
    0x0F: ("RDMA_READ_RESPONSE", Position.LAST, (AETH,), True),
    0x10: ("RDMA_READ_RESPONSE", Position.ONLY, (AETH,), True),
    0x11: ("ACKNOWLEDGE", None, (AETH,), False),
    0x12: ("ATOMIC_ACKNOWLEDGE", None, (AETH, AtomicAckETH), False),
    0x13: ("COMPARE_SWAP", None, (AtomicETH,), False),
    0x14: ("FETCH_ADD", None, (AtomicETH,), False),
    0x16: ("SEND", Position.LAST, (IETH,), True),
    0x17: ("SEND", Position.ONLY, (IETH,), True),
}

_UC_OPERATIONS = range(0x00, 0x0C)   # SEND and RDMA WRITE forms only
_UD_OPERATIONS = (0x04, 0x05)        # SEND ONLY [WITH IMMEDIATE], each with a DETH first


def _build_table() -> dict[Opcode, OpcodeInfo]:
    table = {}
    for op in Opcode:
        transport = Transport(op >> 5)
        low = op & 0x1F
        if transport is Transport.CNP:
            table[op] = OpcodeInfo(op, transport, "CNP", None, (), True, CNP_PAYLOAD_LEN)
            continue
        operation, position, ext, payload = _OPERATIONS[low]
        if transport is Transport.UC:
            assert low in _UC_OPERATIONS
        if transport is Transport.UD:
            assert low in _UD_OPERATIONS
            ext = (DETH,) + ext
        table[op] = OpcodeInfo(op, transport, operation, position, ext, payload)
    return table


OPCODE_INFO: dict[Opcode, OpcodeInfo] = _build_table()


def opcode_info(opcode: int) -> OpcodeInfo:
    """The table entry for ``opcode``; ValueError for an opcode this model does not support."""
    try:
        return OPCODE_INFO[Opcode(opcode)]
    except ValueError:
        raise ValueError(f"unsupported BTH opcode 0x{opcode:02x}") from None
