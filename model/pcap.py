"""Classic libpcap files: write frames for Wireshark/tshark, read them back.

Link types (tcpdump.org "LINKTYPE_" registry): 1 = Ethernet for the three RoCE modes (frames written
without FCS). Native IB frames (LRH through VCRC) are written by default with link type 197 (ERF),
each frame in an ERF record of type 21 (InfiniBand): that is the encapsulation Wireshark's reader
maps to its InfiniBand dissector. The registered raw type 247 (``LINKTYPE_INFINIBAND``) can be asked
for instead, but Wireshark's pcap reader has no mapping for it (tshark 4.0: "network type 247 unknown
or unsupported"). Files are written little-endian with microsecond timestamps; both byte orders and
the nanosecond variant are read, and ERF records are unwrapped on reading.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable

from .descriptor import LinkMode

__all__ = ["LINKTYPE_ETHERNET", "LINKTYPE_INFINIBAND", "LINKTYPE_ERF", "ERF_TYPE_INFINIBAND", "PCAP_MAGIC", "PCAP_MAGIC_NS", "DEFAULT_SNAPLEN",
           "linktype_for", "write_pcap", "write_pcap_for_mode", "read_pcap"]

LINKTYPE_ETHERNET = 1
LINKTYPE_INFINIBAND = 247
LINKTYPE_ERF = 197
ERF_TYPE_INFINIBAND = 21
_ERF_HEADER = ">BBHHH"        # after the little-endian 64-bit timestamp: type, flags, rlen, lctr, wlen
_ERF_VARYING_LENGTH = 0x04
PCAP_MAGIC = 0xA1B2C3D4       # microsecond timestamps
PCAP_MAGIC_NS = 0xA1B23C4D    # nanosecond timestamps
PCAP_VERSION = (2, 4)
DEFAULT_SNAPLEN = 65535

_GLOBAL_HEADER = "IHHiIII"    # magic, major, minor, thiszone, sigfigs, snaplen, network
_RECORD_HEADER = "IIII"       # ts_sec, ts_frac, incl_len, orig_len


def linktype_for(mode: LinkMode, ib_linktype: int = LINKTYPE_ERF) -> int:
    """The pcap link type for frames of ``mode``; native IB uses ``ib_linktype`` (ERF or 247)."""
    if ib_linktype not in (LINKTYPE_ERF, LINKTYPE_INFINIBAND):
        raise ValueError(f"ib_linktype must be {LINKTYPE_ERF} (ERF) or {LINKTYPE_INFINIBAND}, not {ib_linktype!r}")
    return LINKTYPE_ETHERNET if LinkMode(mode).is_ethernet else ib_linktype


def _erf_record(frame: bytes, sec: int, usec: int) -> bytes:
    timestamp = (sec << 32) | ((usec << 32) // 1_000_000)
    return (struct.pack("<Q", timestamp) +
            struct.pack(_ERF_HEADER, ERF_TYPE_INFINIBAND, _ERF_VARYING_LENGTH, 16 + len(frame), 0, len(frame)) +
            frame)


def _erf_payload(record: bytes) -> bytes:
    if len(record) < 16:
        raise ValueError("truncated ERF record")
    rtype, _, rlen, _, wlen = struct.unpack(_ERF_HEADER, record[8:16])
    if rtype & 0x7F != ERF_TYPE_INFINIBAND:
        raise ValueError(f"ERF record type {rtype & 0x7F} is not InfiniBand ({ERF_TYPE_INFINIBAND})")
    return record[16:16 + wlen]


def write_pcap(path: str | os.PathLike, frames: Iterable[bytes], linktype: int, *,
               snaplen: int = DEFAULT_SNAPLEN, start_time: float = 0.0, interval: float = 1e-6) -> int:
    """Write ``frames`` to a classic pcap file; timestamps start at ``start_time`` seconds and step by
    ``interval``. Returns the number of frames written. Frames longer than ``snaplen`` are truncated.
    With ``LINKTYPE_ERF`` each frame is wrapped in an ERF InfiniBand record."""
    count = 0
    with open(path, "wb") as f:
        f.write(struct.pack("<" + _GLOBAL_HEADER, PCAP_MAGIC, *PCAP_VERSION, 0, 0, snaplen, linktype))
        for count, frame in enumerate(frames, 1):
            frame = bytes(frame)
            usec_total = round((start_time + (count - 1) * interval) * 1_000_000)
            sec, usec = divmod(usec_total, 1_000_000)
            if linktype == LINKTYPE_ERF:
                frame = _erf_record(frame, sec, usec)
            stored = frame[:snaplen]
            f.write(struct.pack("<" + _RECORD_HEADER, sec, usec, len(stored), len(frame)))
            f.write(stored)
    return count


def write_pcap_for_mode(path: str | os.PathLike, mode: LinkMode, frames: Iterable[bytes], *,
                        ib_linktype: int = LINKTYPE_ERF, **kw) -> int:
    """:func:`write_pcap` with the link type that ``mode`` needs."""
    return write_pcap(path, frames, linktype_for(mode, ib_linktype), **kw)


def read_pcap(path: str | os.PathLike) -> tuple[int, list[bytes]]:
    """Read a classic pcap file; return ``(linktype, frames)`` with ERF records unwrapped.
    ValueError if it is not one (or is truncated)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 24:
        raise ValueError("not a pcap file: shorter than its global header")
    for order in "<>":
        magic = struct.unpack(order + "I", data[:4])[0]
        if magic in (PCAP_MAGIC, PCAP_MAGIC_NS):
            break
    else:
        raise ValueError(f"not a classic pcap file (magic {data[:4].hex()})")
    _, _, _, _, _, _, linktype = struct.unpack(order + _GLOBAL_HEADER, data[:24])
    frames, pos = [], 24
    while pos < len(data):
        if pos + 16 > len(data):
            raise ValueError("truncated pcap record header")
        _, _, incl_len, _ = struct.unpack(order + _RECORD_HEADER, data[pos:pos + 16])
        pos += 16
        if pos + incl_len > len(data):
            raise ValueError("truncated pcap record")
        record = data[pos:pos + incl_len]
        frames.append(_erf_payload(record) if linktype == LINKTYPE_ERF else record)
        pos += incl_len
    return linktype, frames
