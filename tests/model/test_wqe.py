"""WQE, CQE and CQ context codecs, and the register map table (no simulator)."""

from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from rnic.model.regs import (REG, REGISTERS, SGID_BASE, SGID_ENTRIES, SGID_STRIDE, Access, RegisterFile,
                             markdown_table)
from rnic.model.wqe import (CQ_RECORD_BYTES, CQC_FIELDS, CQE_BYTES, CQE_FIELDS, INLINE_MAX_RC, INLINE_MAX_UD,
                            WQE_BYTES, WQE_FIELDS, Cqe, CqContext, Wqe, WqeFlags, WqeOpcode)

_WIDTH = {name: width for name, _, width, _ in WQE_FIELDS}
_LAYOUT = {name: layout for name, _, _, layout in WQE_FIELDS}


def _val(name):
    return st.integers(0, (1 << _WIDTH[name]) - 1)


@st.composite
def wqes(draw, ud=None):
    ud = draw(st.booleans()) if ud is None else ud
    inline = draw(st.booleans())
    flags = draw(st.integers(0, 255)) & ~WqeFlags.INLINE | (WqeFlags.INLINE if inline else 0)
    used = {"all", "ud" if ud else "rc"} | (set() if inline else {"local"} | (set() if ud else {"atomic"}))
    kw = {name: draw(_val(name)) for name in _WIDTH if _LAYOUT[name] in used}
    kw["flags"] = flags
    if inline:
        cap = INLINE_MAX_UD if ud else INLINE_MAX_RC
        kw["length"] = draw(st.integers(0, cap))
        kw["inline_data"] = draw(st.binary(min_size=kw["length"], max_size=kw["length"]))
    return ud, Wqe(**kw)


@given(wqes())
def test_wqe_roundtrip(case):
    ud, wqe = case
    raw = wqe.pack(ud)
    assert len(raw) == WQE_BYTES
    assert Wqe.unpack(raw, ud) == wqe


@given(st.binary(min_size=WQE_BYTES, max_size=WQE_BYTES), st.booleans())
def test_wqe_repack_keeps_defined_bytes(raw, ud):
    again = Wqe.unpack(Wqe.unpack(raw, ud).pack(ud), ud)
    assert again == Wqe.unpack(raw, ud)


def test_wqe_byte_layout():
    w = Wqe(opcode=WqeOpcode.RDMA_WRITE_WITH_IMM, flags=WqeFlags.SIGNALED | WqeFlags.SOLICITED, length=0x12345678,
            wr_id=0x1122334455667788, imm=0xA1A2A3A4, rkey=0xB1B2B3B4, remote_addr=0xC1C2C3C4C5C6C7C8,
            local_addr=0xD1D2D3D4D5D6D7D8, lkey=0xE1E2E3E4)
    raw = w.pack()
    assert raw[0] == 0x04 and raw[1] == 0x03 and raw[2:4] == b"\0\0"
    assert raw[4:8] == bytes.fromhex("78563412")
    assert raw[8:16] == bytes.fromhex("8877665544332211")
    assert raw[16:20] == bytes.fromhex("a4a3a2a1")
    assert raw[20:24] == bytes.fromhex("b4b3b2b1")
    assert raw[24:32] == bytes.fromhex("c8c7c6c5c4c3c2c1")
    assert raw[32:40] == bytes.fromhex("d8d7d6d5d4d3d2d1")
    assert raw[40:44] == bytes.fromhex("e4e3e2e1")
    assert raw[44:] == bytes(20)


def test_wqe_ud_and_inline_layout():
    w = Wqe(opcode=WqeOpcode.SEND, flags=WqeFlags.INLINE, length=12, qkey=0x80000000, dst_mac=0x020000000002,
            dlid=0x1234, dest_qpn=0xABCDEF, dst_gid=0xFE80 << 112 | 1, inline_data=bytes(range(1, 13)))
    raw = w.pack(ud=True)
    assert raw[20:24] == bytes.fromhex("00000080")
    assert raw[24:30] == (0x020000000002).to_bytes(6, "little")
    assert raw[30:32] == bytes.fromhex("3412")
    assert raw[32:44] == bytes(range(1, 13))
    assert raw[44:47] == bytes.fromhex("efcdab") and raw[47] == 0
    assert raw[48:64] == (0xFE80 << 112 | 1).to_bytes(16, "little")
    rc = Wqe(flags=WqeFlags.INLINE, length=32, inline_data=bytes(range(32))).pack()
    assert rc[32:64] == bytes(range(32))


def test_wqe_rejects_fields_outside_layout():
    with pytest.raises(ValueError):
        Wqe(qkey=1).pack(ud=False)
    with pytest.raises(ValueError):
        Wqe(rkey=1).pack(ud=True)
    with pytest.raises(ValueError):
        Wqe(flags=WqeFlags.INLINE, local_addr=1).pack()
    with pytest.raises(ValueError):
        Wqe(flags=WqeFlags.INLINE, length=13, inline_data=bytes(13)).pack(ud=True)
    with pytest.raises(ValueError):
        Wqe(inline_data=b"x").pack()
    with pytest.raises(ValueError):
        Wqe(length=1 << 32)
    with pytest.raises(ValueError):
        Wqe.unpack(bytes(32))


def test_inline_unpack_clamps_to_capacity():
    raw = bytearray(Wqe(flags=WqeFlags.INLINE, length=0).pack(ud=True))
    raw[4:8] = (1000).to_bytes(4, "little")
    assert len(Wqe.unpack(bytes(raw), ud=True).inline_data) == INLINE_MAX_UD


def _records(cls, table):
    return st.builds(cls, **{name: st.integers(0, (1 << width) - 1) for name, _, width in table})


@given(_records(Cqe, CQE_FIELDS))
def test_cqe_roundtrip(cqe):
    raw = cqe.pack()
    assert len(raw) == CQE_BYTES
    assert Cqe.unpack(raw) == cqe


@given(_records(CqContext, CQC_FIELDS))
def test_cq_context_roundtrip(cq):
    raw = cq.pack()
    assert len(raw) == CQ_RECORD_BYTES
    assert CqContext.unpack(raw) == cq


def test_cqe_and_cq_context_byte_layout():
    raw = Cqe(wr_id=0x0102030405060708, byte_len=0x11223344, imm=0x55667788, qpn=0xABCDEF, opcode=5, status=0x83,
              flags=1, wqe_index=0x1234, owner=1).pack()
    assert raw[0:8] == bytes.fromhex("0807060504030201")
    assert raw[8:12] == bytes.fromhex("44332211") and raw[12:16] == bytes.fromhex("88776655")
    assert raw[16:19] == bytes.fromhex("efcdab") and raw[19] == 5 and raw[20] == 0x83 and raw[21] == 1
    assert raw[22:24] == bytes.fromhex("3412") and raw[24:31] == bytes(7) and raw[31] == 1
    raw = CqContext(state=1, log_size=10, pi=0x1234, ci=0x5678, ring_base=0x1122334455667788).pack()
    assert raw[:8] == bytes.fromhex("010a000034127856")
    assert raw[8:16] == bytes.fromhex("8877665544332211") and raw[16:] == bytes(16)


# --- register map ---------------------------------------------------------------------------------------

def test_register_table_is_consistent():
    offsets = [r.offset for r in REGISTERS]
    assert len(set(offsets)) == len(offsets)
    for r in REGISTERS:
        assert r.offset % 4 == 0 and 1 <= r.width <= 32 and r.reset <= r.mask
    assert REG["ID"].reset == 0x524E4943
    assert REG["SGID15_VLAN"].offset == SGID_BASE + 15 * SGID_STRIDE + 0x18
    assert sum(r.name.startswith("SGID") for r in REGISTERS) == 7 * SGID_ENTRIES
    assert "| 0x064 | `DB_SQ_PI` | 16 | WO |" in markdown_table()


def test_register_access_rules():
    actions = []
    rf = RegisterFile(on_write=lambda reg, v: actions.append((reg.name, v)))
    for r in REGISTERS:
        assert rf.read(r.offset) == (0 if r.access is Access.WO else r.reset)
    rf.write(REG["ID"].offset, 0)
    assert rf.read(REG["ID"].offset) == 0x524E4943
    rf.write(REG["SCRATCH"].offset, 0xDEADBEEF)
    assert rf.read(REG["SCRATCH"].offset) == 0xDEADBEEF
    rf.write(REG["QPC_SIZE"].offset, 0xFFFF_FFFF)
    assert rf.read(REG["QPC_SIZE"].offset) == (1 << 25) - 1
    rf["ERR_STATUS"] = 0b1011
    rf.write(REG["ERR_STATUS"].offset, 0b0010)
    assert rf.read(REG["ERR_STATUS"].offset) == 0b1001
    rf.write(REG["DB_SQ_PI"].offset, 0x12345)
    assert actions == [("DB_SQ_PI", 0x2345)] and rf.read(REG["DB_SQ_PI"].offset) == 0
    rf.write(0xFFC, 1)
    assert rf.read(0xFFC) == 0


def test_docs_hold_the_register_table():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "engine.md").read_text()
    assert markdown_table() in doc
