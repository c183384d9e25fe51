"""pcap writer/reader: round trip, header bytes, link types, and scapy's reader as an independent one."""

import struct

import pytest

from rnic.model.descriptor import LinkMode, PacketDesc
from rnic.model.frames import build_frame
from rnic.model.pcap import (
    LINKTYPE_ERF, LINKTYPE_ETHERNET, LINKTYPE_INFINIBAND, linktype_for, read_pcap, write_pcap, write_pcap_for_mode,
)


def frames(mode, n=4):
    return [build_frame(PacketDesc(mode=mode, payload_len=i * 5, psn=i), bytes(range(i * 5))) for i in range(n)]


def test_linktypes():
    assert (LINKTYPE_ETHERNET, LINKTYPE_INFINIBAND, LINKTYPE_ERF) == (1, 247, 197)
    for mode in LinkMode:
        assert linktype_for(mode) == (1 if mode.is_ethernet else 197)
        assert linktype_for(mode, LINKTYPE_INFINIBAND) == (1 if mode.is_ethernet else 247)
    with pytest.raises(ValueError, match="ib_linktype"):
        linktype_for(LinkMode.IB_LOCAL, 1)


@pytest.mark.parametrize("mode", [LinkMode.IB_LOCAL, LinkMode.IB_GLOBAL], ids=lambda m: m.slug)
def test_raw_infiniband_linktype_round_trip(tmp_path, mode):
    path = tmp_path / "raw.pcap"
    fr = frames(mode)
    write_pcap_for_mode(path, mode, fr, ib_linktype=LINKTYPE_INFINIBAND)
    assert read_pcap(path) == (247, fr)


def test_erf_record_layout(tmp_path):
    """ERF record (Endace ERF types document): 8-byte LE timestamp, type 21, flags, rlen, lctr, wlen."""
    path = tmp_path / "erf.pcap"
    write_pcap(path, [b"\x01\x02\x03"], LINKTYPE_ERF, start_time=2.5)
    data = path.read_bytes()
    assert data[:24] == struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 197)
    assert data[24:40] == struct.pack("<IIII", 2, 500000, 19, 19)
    assert data[40:48] == struct.pack("<Q", (2 << 32) | (1 << 31))
    assert data[48:56] == struct.pack(">BBHHH", 21, 0x04, 19, 0, 3)
    assert data[56:] == b"\x01\x02\x03"
    assert read_pcap(path) == (197, [b"\x01\x02\x03"])


@pytest.mark.parametrize("mode", list(LinkMode), ids=lambda m: m.slug)
def test_round_trip(tmp_path, mode):
    path = tmp_path / f"{mode.slug}.pcap"
    fr = frames(mode)
    assert write_pcap_for_mode(path, mode, fr) == len(fr)
    assert read_pcap(path) == (linktype_for(mode), fr)


def test_file_layout(tmp_path):
    path = tmp_path / "x.pcap"
    write_pcap(path, [b"\x01\x02\x03"], 247, start_time=2.5)
    data = path.read_bytes()
    assert data[:24] == struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 247)
    assert data[24:40] == struct.pack("<IIII", 2, 500000, 3, 3)
    assert data[40:] == b"\x01\x02\x03"


def test_snaplen_truncates(tmp_path):
    path = tmp_path / "x.pcap"
    write_pcap(path, [bytes(100)], 1, snaplen=60)
    assert read_pcap(path) == (1, [bytes(60)])
    assert struct.unpack("<IIII", path.read_bytes()[24:40])[2:] == (60, 100)


def test_reads_big_endian_and_rejects_garbage(tmp_path):
    path = tmp_path / "be.pcap"
    path.write_bytes(struct.pack(">IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1) + struct.pack(">IIII", 0, 0, 2, 2)
                     + b"\xaa\xbb")
    assert read_pcap(path) == (1, [b"\xaa\xbb"])
    path.write_bytes(b"\x00" * 24)
    with pytest.raises(ValueError, match="magic"):
        read_pcap(path)
    path.write_bytes(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1) + struct.pack("<IIII", 0, 0, 9, 9))
    with pytest.raises(ValueError, match="truncated"):
        read_pcap(path)


@pytest.mark.parametrize("mode", list(LinkMode), ids=lambda m: m.slug)
def test_scapy_reads_our_files(tmp_path, mode):
    from scapy.utils import PcapReader
    path = tmp_path / "s.pcap"
    fr = frames(mode)
    write_pcap_for_mode(path, mode, fr)
    with PcapReader(str(path)) as reader:
        assert reader.linktype == linktype_for(mode)
        records = [bytes(p) for p in reader]
    if not mode.is_ethernet:  # ERF: strip and check each 16-byte record header
        assert [struct.unpack(">BBHHH", r[8:16]) for r in records] == \
            [(21, 0x04, 16 + len(f), 0, len(f)) for f in fr]
        records = [r[16:] for r in records]
    assert records == fr
