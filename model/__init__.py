"""rnic.model: the golden wire-format model (plain Python, no Amaranth), the executable specification
that the RTL is compared to byte for byte. See docs/wire-formats.md."""

from .crc import ICRC, VCRC, CrcSpec
from .descriptor import DESC_FIELDS, DESC_WIDTH, MAX_PAYLOAD, LinkMode, PacketDesc
from .frames import build_frame, icrc, icrc_view, normalize_desc, parse_frame, vcrc
from .opcodes import OPCODE_INFO, Opcode, OpcodeInfo, Transport, opcode_info
from .receive import DropCounters, Dropped, DropReason, PortAddresses, Received, classify
from .pcap import LINKTYPE_ETHERNET, LINKTYPE_INFINIBAND, linktype_for, read_pcap, write_pcap, write_pcap_for_mode

__all__ = [
    "CrcSpec", "ICRC", "VCRC",
    "LinkMode", "DESC_FIELDS", "DESC_WIDTH", "MAX_PAYLOAD", "PacketDesc",
    "build_frame", "parse_frame", "icrc", "icrc_view", "vcrc", "normalize_desc",
    "Opcode", "OpcodeInfo", "Transport", "OPCODE_INFO", "opcode_info",
    "DropReason", "PortAddresses", "Received", "Dropped", "classify", "DropCounters",
    "LINKTYPE_ETHERNET", "LINKTYPE_INFINIBAND", "linktype_for", "read_pcap", "write_pcap", "write_pcap_for_mode",
]
