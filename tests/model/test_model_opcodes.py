"""The opcode table against two independent ones: Linux rxe (header sets) and scapy.contrib.roce (names, values)."""

import pytest

from rnic.model import headers as H
from rnic.model.opcodes import OPCODE_INFO, Opcode, Position, Transport, opcode_info

# Transcribed from Linux drivers/infiniband/sw/rxe/rxe_opcode.c (the rxe_opcode[] table): for each opcode
# the headers after the BTH in offset order, and whether RXE_PAYLOAD_MASK is set. RD entries left out.
RXE = {
    0x00: ("", True), 0x01: ("", True), 0x02: ("", True), 0x03: ("IMMDT", True), 0x04: ("", True),
    0x05: ("IMMDT", True), 0x06: ("RETH", True), 0x07: ("", True), 0x08: ("", True), 0x09: ("IMMDT", True),
    0x0A: ("RETH", True), 0x0B: ("RETH IMMDT", True), 0x0C: ("RETH", False), 0x0D: ("AETH", True),
    0x0E: ("", True), 0x0F: ("AETH", True), 0x10: ("AETH", True), 0x11: ("AETH", False),
    0x12: ("AETH ATMACK", False), 0x13: ("ATMETH", False), 0x14: ("ATMETH", False),
    0x16: ("IETH", True), 0x17: ("IETH", True),
    0x20: ("", True), 0x21: ("", True), 0x22: ("", True), 0x23: ("IMMDT", True), 0x24: ("", True),
    0x25: ("IMMDT", True), 0x26: ("RETH", True), 0x27: ("", True), 0x28: ("", True), 0x29: ("IMMDT", True),
    0x2A: ("RETH", True), 0x2B: ("RETH IMMDT", True),
    0x64: ("DETH", True), 0x65: ("DETH IMMDT", True),
}
RXE_NAMES = {H.RETH: "RETH", H.AETH: "AETH", H.DETH: "DETH", H.ImmDt: "IMMDT", H.IETH: "IETH",
             H.AtomicETH: "ATMETH", H.AtomicAckETH: "ATMACK"}
# rxe's header sizes (RXE_*_BYTES in rxe_hdr.h)
RXE_BYTES = {"RETH": 16, "AETH": 4, "DETH": 8, "IMMDT": 4, "IETH": 4, "ATMETH": 28, "ATMACK": 8}


def test_table_matches_rxe():
    ours = {op: info for op, info in OPCODE_INFO.items() if info.transport is not Transport.CNP}
    assert sorted(ours) == sorted(RXE)
    for op, info in ours.items():
        names = " ".join(RXE_NAMES[h] for h in info.ext_headers)
        assert (names, info.has_payload) == RXE[op], op.name
        assert info.ext_len == sum(RXE_BYTES[n] for n in RXE[op][0].split())


def test_names_and_values_match_scapy():
    from scapy.contrib.roce import CNP_OPCODE, _bth_opcodes
    theirs = {v: n for v, n in _bth_opcodes.items() if not n.startswith("RD_")}
    assert CNP_OPCODE == Opcode.CNP
    # scapy lists every RC/UC/UD opcode we have except the two SEND WITH INVALIDATE forms
    assert set(theirs) == {int(op) for op in Opcode} - {0x16, 0x17}
    for value, name in theirs.items():
        assert Opcode(value).name == name


def test_scapy_binds_aeth_to_rc_acknowledge():
    from scapy.contrib.roce import AETH, BTH
    assert any(cls is AETH and fields.get("opcode") == Opcode.RC_ACKNOWLEDGE for fields, cls in BTH.payload_guess)
    assert OPCODE_INFO[Opcode.RC_ACKNOWLEDGE].ext_headers == (H.AETH,)


def test_structure():
    for op, info in OPCODE_INFO.items():
        assert info.opcode == op and info.name == op.name
        assert info.transport == Transport(op >> 5)
        if info.with_immediate:
            assert "WITH_IMMEDIATE" in op.name and info.ext_headers[-1] is H.ImmDt
        if info.with_invalidate:
            assert "WITH_INVALIDATE" in op.name
        if info.position is not None:
            assert info.position.name in op.name.replace("_WITH_IMMEDIATE", "").replace("_WITH_INVALIDATE", "")
        if info.transport is Transport.UD:
            assert info.ext_headers[0] is H.DETH
    assert OPCODE_INFO[Opcode.CNP].fixed_payload_len == 16
    assert OPCODE_INFO[Opcode.RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE].ext_headers == (H.RETH, H.ImmDt)
    assert OPCODE_INFO[Opcode.RC_ATOMIC_ACKNOWLEDGE].ext_headers == (H.AETH, H.AtomicAckETH)
    assert OPCODE_INFO[Opcode.RC_SEND_FIRST].position is Position.FIRST


@pytest.mark.parametrize("value", [0x15, 0x18, 0x1F, 0x2C, 0x40, 0x60, 0x66, 0x80, 0xFF])
def test_unknown_opcode(value):
    with pytest.raises(ValueError, match="unsupported BTH opcode"):
        opcode_info(value)
