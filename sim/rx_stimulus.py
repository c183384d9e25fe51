"""Frames for the receive path's tests and benches: valid requests addressed to a port, and the faults the
stateless checks must catch. The verdict each frame deserves is never computed here: the tests ask the
golden model (:func:`rnic.model.receive.classify`)."""

from __future__ import annotations

import random

from dataclasses import replace

from ..model.crc import ICRC, VCRC
from ..model.descriptor import DESC_FIELDS, MAX_PAYLOAD, LinkMode, PacketDesc
from ..model.frames import ETH_MIN_FRAME, build_frame, icrc, vcrc
from ..model.opcodes import OPCODE_INFO, Opcode
from ..model.receive import PortAddresses, ipv4_gid

__all__ = ["PORT_MAC", "PORT_LID", "port_for_link", "random_request", "random_frames", "FAULTS"]

PORT_MAC = 0x02_00_00_00_00_02
PORT_LID = 0x0002
PORT_IPV4 = 0xC0A8_0002
PORT_GID = 0xFE80_0000_0000_0000_0000_0000_0000_0002
OTHER_GID = 0x2001_0DB8_0000_0000_0000_0000_0000_0009
_OPCODES = sorted(OPCODE_INFO)
_ETHERNET = [LinkMode.ROCEV2_IPV4, LinkMode.ROCEV2_IPV6, LinkMode.ROCEV1]
_IB = [LinkMode.IB_LOCAL, LinkMode.IB_GLOBAL]
#: The faults of each link kind, applied round robin so that every one occurs.
FAULTS = {"ethernet": ("fcs", "truncate", "flip", "ethertype", "stacked", "not-ours", "length", "opcode", "tver",
                       "pad", "ip-checksum"),
          "ib": ("fcs", "truncate", "flip", "lnh", "not-ours", "length", "opcode", "tver", "pad", "vcrc")}


def port_for_link(link: str) -> PortAddresses:
    """The port the tests receive on: a MAC, two GIDs (one IPv4-mapped) and a LID."""
    return PortAddresses(mac=PORT_MAC, gids={PORT_GID, ipv4_gid(PORT_IPV4), OTHER_GID}, lid=PORT_LID)


def random_request(rng: random.Random, mode: LinkMode, max_payload: int = MAX_PAYLOAD) -> tuple[PacketDesc, bytes]:
    """A random packet of ``mode`` addressed to the test port (any opcode of the table, any field values)."""
    kw = {name: rng.getrandbits(width) for name, width in DESC_FIELDS}
    kw["mode"] = int(mode)
    op = Opcode.CNP if rng.random() < 0.05 else rng.choice(_OPCODES)
    info = OPCODE_INFO[op]
    n = rng.choice([0, 1, 3, 4, 63, 64, 200, rng.randint(0, max_payload)])
    n = info.fixed_payload_len if info.fixed_payload_len is not None else (min(n, max_payload) if info.has_payload
                                                                           else 0)
    kw.update(opcode=int(op), payload_len=n, dst_mac=PORT_MAC, dlid=PORT_LID,
              dst_gid=rng.choice([PORT_GID, OTHER_GID]) if mode is not LinkMode.ROCEV2_IPV4 else PORT_IPV4,
              vlan_present=rng.random() < 0.3)
    return PacketDesc(**kw), rng.randbytes(n)


def _bth_at(mode: LinkMode, vlan: bool) -> int:
    l2 = (18 if vlan else 14) if mode.is_ethernet else 8
    return l2 + {LinkMode.ROCEV2_IPV4: 28, LinkMode.ROCEV2_IPV6: 48, LinkMode.ROCEV1: 40, LinkMode.IB_LOCAL: 0,
                 LinkMode.IB_GLOBAL: 40}[mode]


def _refresh(mode: LinkMode, frame: bytearray) -> bytearray:
    """Recompute the ICRC (and VCRC) at the end of ``frame`` after a header edit, where the model can."""
    tail = 4 if mode.is_ethernet else 6
    try:
        body = bytes(frame[:-tail])
        out = body + ICRC.to_bytes(icrc(mode, body))
        if not mode.is_ethernet:
            out += VCRC.to_bytes(vcrc(out))
        return bytearray(out)
    except ValueError:
        return frame


def _fault(rng: random.Random, kind: str, mode: LinkMode, frame: bytearray,
           desc: PacketDesc) -> tuple[bytearray, bool]:
    bth = _bth_at(mode, bool(desc.vlan_present))
    if kind == "fcs":
        return frame, True
    if kind == "truncate":
        return frame[:rng.randrange(1, min(len(frame), bth + 16) if rng.random() < 0.7 else len(frame))], False
    if kind == "flip":
        i = rng.randrange(len(frame))
        frame[i] ^= 1 << rng.randrange(8)
    elif kind == "ethertype" and mode.is_ethernet:
        at = 16 if desc.vlan_present else 12
        frame[at:at + 2] = rng.choice([b"\x08\x06", b"\x88\xa8", b"\x86\xdc", rng.randbytes(2)])
    elif kind == "stacked" and mode.is_ethernet:
        frame[12:18] = b"\x81\x00" + frame[14:16] + b"\x81\x00"
    elif kind == "not-ours":
        changes = rng.choice([{"dst_mac": desc.dst_mac ^ 1}, {"dlid": desc.dlid ^ 4}, {"dst_gid": 0x1234}])
        frame = bytearray(build_frame(replace(desc, **changes), _payload(frame, desc)))
    elif kind == "length":
        frame[rng.randrange(min(len(frame), bth + 4))] = rng.randrange(256)
        frame = _refresh(mode, frame)
    elif kind == "opcode":
        frame[bth] = rng.randrange(256)
        frame = _refresh(mode, frame)
    elif kind == "tver":
        frame[bth + 1] |= rng.randrange(1, 16)
        frame = _refresh(mode, frame)
    elif kind == "ip-checksum" and mode is LinkMode.ROCEV2_IPV4:
        frame[bth - 28 + 10] ^= 1 << rng.randrange(8)       # the ICRC masks the checksum: still good
    elif kind == "lnh":
        frame[rng.choice([0, 1])] ^= rng.choice([0x01, 0x02, 0x10, 0x03])     # LVer, LNH
    elif kind == "vcrc" and not mode.is_ethernet:
        frame[-1 - rng.randrange(2)] ^= 1 << rng.randrange(8)
    elif kind == "pad":
        frame[bth + 1] = frame[bth + 1] & 0xCF | rng.randrange(4) << 4
        frame = _refresh(mode, frame)
    return frame, False


def _payload(frame: bytearray, desc: PacketDesc) -> bytes:
    from ..model.frames import parse_frame
    return parse_frame(LinkMode(desc.mode), bytes(frame))[1]


def random_frames(rng: random.Random, link: str, count: int, fault_rate: float = 0.35,
                  max_payload: int = MAX_PAYLOAD) -> list[tuple[bytes, bool]]:
    """``count`` frames ``(bytes, fcs_bad)`` for a port of kind ``link`` ("ethernet" or "ib"): valid
    requests of every mode of that link (some shorter than 60 bytes and MAC-padded), and about
    ``fault_rate`` of them with a fault from :data:`FAULTS`."""
    out = []
    modes = _ETHERNET if link == "ethernet" else _IB
    faults = FAULTS[link]
    for _ in range(count):
        fault = faults[len(out) % len(faults)] if rng.random() < fault_rate else None
        mode = LinkMode.ROCEV2_IPV4 if fault == "ip-checksum" else rng.choice(modes)
        desc, payload = random_request(rng, mode, max_payload)
        frame, fcs_bad = bytearray(build_frame(desc, payload)), False
        if fault is not None:
            frame, fcs_bad = _fault(rng, fault, mode, frame, desc)
        if mode.is_ethernet and len(frame) < ETH_MIN_FRAME and fault != "truncate" and rng.random() < 0.9:
            frame += bytes(ETH_MIN_FRAME - len(frame))          # what a MAC sends
        out.append((bytes(frame), fcs_bad))
    return out
