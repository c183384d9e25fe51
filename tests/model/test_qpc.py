"""Pure-model tests of the QP context record codec and the cache model (no simulator)."""

import random

import pytest
from hypothesis import given, settings, strategies as st

from rnic.model.descriptor import LinkMode
from rnic.model.qpc import (CACHED_BYTES, MUTABLE_BYTES, QPC_FIELDS, RECORD_BITS, RECORD_BYTES, HostTable, Op,
                            QpcCacheConfig, QpcCacheModel, QpContext, QpState, Status, apply_op, get_field, plru_touch,
                            plru_victim)


def contexts():
    return st.builds(QpContext, **{name: st.integers(0, (1 << width) - 1) for name, _, width in QPC_FIELDS})


@given(contexts())
def test_pack_roundtrip(ctx):
    raw = ctx.pack()
    assert len(raw) == RECORD_BYTES
    assert QpContext.unpack(raw) == ctx


def test_field_table():
    assert RECORD_BYTES in (64, 128)
    used = 0
    for name, off, width in QPC_FIELDS:
        mask = ((1 << width) - 1) << off
        assert not used & mask, name
        used |= mask
        assert off + width <= RECORD_BITS
    mutable = {n for n, off, w in QPC_FIELDS if off < MUTABLE_BYTES * 8}
    assert mutable == {"state", "next_psn", "epsn", "retry_cnt", "rnr_retry_cnt", "sq_ci", "sq_pi", "una_psn", "req_wait", "rd_pending"}
    assert all(off + w <= MUTABLE_BYTES * 8 for n, off, w in QPC_FIELDS if n in mutable)


def test_byte_layout_examples():
    ctx = QpContext(state=QpState.RTS, next_psn=0x123456, qpn=0xABCDEF, dst_mac=0x020000000002,
                    link_mode=LinkMode.ROCEV2_IPV6, sq_base=0x1122334455667788)
    raw = ctx.pack()
    assert raw[0] == QpState.RTS
    assert raw[1:4] == bytes([0x56, 0x34, 0x12])          # little-endian
    assert raw[17] == LinkMode.ROCEV2_IPV6
    assert raw[20:23] == bytes([0xEF, 0xCD, 0xAB])
    assert raw[48:54] == (0x020000000002).to_bytes(6, "little")
    assert raw[56:64] == (0x1122334455667788).to_bytes(8, "little")


def test_field_range_checked():
    with pytest.raises(ValueError):
        QpContext(next_psn=1 << 24)
    with pytest.raises(ValueError):
        QpContext.unpack(bytes(64))


@given(st.integers(0, (1 << RECORD_BITS) - 1), st.sampled_from(list(Op)), st.integers(0, (1 << 24) - 1))
def test_apply_op_touches_only_mutable_bytes(rec, op, arg):
    new = apply_op(rec, op, arg)
    assert new >> (MUTABLE_BYTES * 8) == rec >> (MUTABLE_BYTES * 8)
    if op == Op.ADD_PSN:
        assert get_field(new, "next_psn") == (get_field(rec, "next_psn") + arg) % (1 << 24)
    if op == Op.SET_ERROR:
        assert get_field(new, "state") == QpState.ERROR
    if op == Op.LOOKUP:
        assert new == rec


@pytest.mark.parametrize("ways", [2, 4, 8, 16])
def test_plru_is_a_permutation_cycle(ways):
    """Touching the victim each time visits every way once per ``ways`` steps."""
    bits, seen = 0, []
    for _ in range(ways):
        v = plru_victim(bits, ways)
        seen.append(v)
        bits = plru_touch(bits, ways, v)
    assert sorted(seen) == list(range(ways))
    # the most recently touched way is never the victim
    rng = random.Random(1)
    for _ in range(200):
        w = rng.randrange(ways)
        bits = plru_touch(bits, ways, w)
        assert plru_victim(bits, ways) != w


def _reference(table_init, ops, table_size):
    """A cache-less reference: the table itself, updated in place (what coherence means)."""
    mem = bytearray(table_init)
    out = []
    for kind, *a in ops:
        if kind == "req":
            op, qpn, arg = a
            if qpn >= table_size:
                out.append((Status.BAD_QPN, None))
                continue
            rec = int.from_bytes(mem[qpn * RECORD_BYTES:(qpn + 1) * RECORD_BYTES], "little")
            rec = apply_op(rec, op, arg)
            mem[qpn * RECORD_BYTES:(qpn + 1) * RECORD_BYTES] = rec.to_bytes(RECORD_BYTES, "little")
            out.append((Status.OK, rec.to_bytes(RECORD_BYTES, "little")[:CACHED_BYTES]))
        elif kind == "modify":
            qpn, raw = a
            if qpn < table_size:
                mem[qpn * RECORD_BYTES:(qpn + 1) * RECORD_BYTES] = raw
            out.append(Status.OK if qpn < table_size else Status.BAD_QPN)
        else:
            out.append(Status.OK if kind == "flush" or a[0] < table_size else Status.BAD_QPN)
    return out, bytes(mem)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([(16, 4), (16, 1), (8, 8), (4, 2)]), st.integers(0, 2**31))
def test_model_is_coherent(geom, seed):
    """Without bus errors the cached model returns exactly what a cache-less table would, and
    after FLUSH host memory equals that table."""
    rng = random.Random(seed)
    n = 64
    init = rng.randbytes(n * RECORD_BYTES)
    cfg = QpcCacheConfig(*geom)
    model = QpcCacheModel(cfg, HostTable(n, init))
    ops = []
    for _ in range(300):
        r = rng.random()
        qpn = rng.randrange(n + 2) if rng.random() < 0.3 else rng.randrange(12)
        if r < 0.05:
            ops.append(("modify", qpn, rng.randbytes(RECORD_BYTES)))
        elif r < 0.1:
            ops.append(("invalidate", qpn))
        elif r < 0.12:
            ops.append(("flush",))
        else:
            ops.append(("req", rng.choice(list(Op)), qpn, rng.randrange(1 << 24)))
    got = []
    for kind, *a in ops:
        if kind == "req":
            got.append(model.request(*a))
        elif kind == "modify":
            got.append(model.modify(*a))
        elif kind == "invalidate":
            got.append(model.invalidate(*a))
        else:
            got.append(model.flush())
    want, table = _reference(init, ops, n)
    assert got == want
    assert model.coherent_table() == table
    assert model.flush() == Status.OK
    assert bytes(model.table.mem) == table
    c = model.counters
    assert c["hits"] + c["misses"] + sum(1 for k, *a in ops if k == "req" and a[1] >= n) == c["lookups"]


def test_counters_and_policy_direct_mapped():
    cfg = QpcCacheConfig(entries=4, ways=1)
    m = QpcCacheModel(cfg, HostTable(32))
    assert m.request(Op.LOOKUP, 1)[0] == Status.OK          # miss, fill way of set 1
    assert m.request(Op.SET_PSN, 1, 5)[0] == Status.OK      # hit, dirty
    assert m.request(Op.LOOKUP, 5)[0] == Status.OK          # miss, evicts dirty 1
    assert m.counters == {"lookups": 3, "hits": 1, "misses": 2, "evictions": 1, "writebacks": 1, "errors": 0,
                          "merged": 0}
    assert QpContext.unpack(m.table.read(1)).next_psn == 5


def test_bus_errors():
    cfg = QpcCacheConfig(entries=2, ways=2)
    t = HostTable(16)
    m = QpcCacheModel(cfg, t)
    t.read_errors[3] = 3
    assert m.request(Op.LOOKUP, 3) == (Status.BUS_ERROR, None)
    m.request(Op.SET_PSN, 0, 7)
    m.request(Op.SET_PSN, 1, 9)
    t.write_errors[0] = 2
    # 2 misses: the PLRU victim is way 0 (qpn 0): its write-back fails, the request fails, 0 stays
    assert m.request(Op.LOOKUP, 2) == (Status.BUS_ERROR, None)
    assert m.cached(0) and m.cached(1) and not m.cached(2)
    assert m.flush() == Status.BUS_ERROR and m.cached(0) and not m.cached(1)
    assert m.invalidate(0) == Status.BUS_ERROR
    assert m.modify(0, bytes(RECORD_BYTES)) == Status.BUS_ERROR
    assert not m.cached(0)          # MODIFY drops the cached copy even when its write fails
    t.write_errors.clear()
    assert m.flush() == Status.OK
    assert QpContext.unpack(t.read(1)).next_psn == 9
    assert m.invalidate(99) == Status.BAD_QPN


def test_qpn_bits_bounds_cacheable_qpns():
    """Requests above 2**qpn_bits are refused; control operations still reach those records."""
    m = QpcCacheModel(QpcCacheConfig(entries=4, ways=2, qpn_bits=3), HostTable(16))
    assert m.request(Op.SET_PSN, 7, 3)[0] == Status.OK and m.cached(7)
    assert m.request(Op.LOOKUP, 8) == (Status.BAD_QPN, None) and not m.cached(8)
    rec = bytes(range(RECORD_BYTES))
    assert m.modify(9, rec) == Status.OK and m.table.read(9) == rec and not m.cached(9)
    assert m.invalidate(9) == Status.OK
    assert m.counters["errors"] == 1 and m.counters["lookups"] == 2
    with pytest.raises(ValueError):
        QpcCacheConfig(qpn_bits=25)
