"""Hypothesis strategies and small helpers shared by the model tests."""

from __future__ import annotations

import random

from hypothesis import strategies as st

from rnic.model.crc import ICRC, VCRC
from rnic.model.descriptor import DESC_FIELDS, MAX_PAYLOAD, LinkMode, PacketDesc
from rnic.model.frames import ICRC_LEN, VCRC_LEN, icrc, vcrc
from rnic.model.opcodes import OPCODE_INFO

OPCODES = sorted(OPCODE_INFO)
_WIDTHS = dict(DESC_FIELDS)


def payload_len_for(opcode: int, wanted: int) -> int:
    """Clamp a wanted payload length to what ``opcode`` allows."""
    info = OPCODE_INFO[opcode]
    if info.fixed_payload_len is not None:
        return info.fixed_payload_len
    return wanted if info.has_payload else 0


@st.composite
def descs(draw, mode=None, opcode=None, max_payload=MAX_PAYLOAD):
    """A random valid PacketDesc (every field within its width) and a matching payload."""
    kw = {name: draw(st.integers(0, (1 << width) - 1)) for name, width in DESC_FIELDS}
    kw["mode"] = int(draw(st.sampled_from(list(LinkMode)))) if mode is None else int(mode)
    kw["opcode"] = int(draw(st.sampled_from(OPCODES))) if opcode is None else int(opcode)
    kw["payload_len"] = payload_len_for(kw["opcode"], draw(st.integers(0, max_payload)))
    payload = draw(st.binary(min_size=kw["payload_len"], max_size=kw["payload_len"]))
    return PacketDesc(**kw), payload


def random_desc(rng: random.Random, mode: LinkMode, max_payload: int = MAX_PAYLOAD) -> tuple[PacketDesc, bytes]:
    """The same distribution as :func:`descs`, from a seeded ``random.Random`` (for the oracle sweeps)."""
    kw = {name: rng.getrandbits(width) for name, width in DESC_FIELDS}
    kw["mode"] = int(mode)
    kw["opcode"] = int(rng.choice(OPCODES))
    kw["payload_len"] = payload_len_for(kw["opcode"], rng.randint(0, max_payload))
    return PacketDesc(**kw), rng.randbytes(kw["payload_len"])


def refresh_crcs(mode: LinkMode, frame: bytes) -> bytes:
    """Recompute the ICRC (and VCRC) of a frame after a test edited its headers."""
    ib = not LinkMode(mode).is_ethernet
    body = frame[:len(frame) - ICRC_LEN - (VCRC_LEN if ib else 0)]
    out = body + ICRC.to_bytes(icrc(mode, body))
    if ib:
        out += VCRC.to_bytes(vcrc(out))
    return out
