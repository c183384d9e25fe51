"""Published RoCEv2 frames reproduced byte for byte.

Source: scapy's regression tests for its RoCE layer, test/contrib/roce.uts in github.com/secdev/scapy
("RoCE CNP captured on ConnectX-4 Lx" and "RoCE layer", an example UC packet).
"""

from rnic.model.descriptor import LinkMode, PacketDesc
from rnic.model.frames import build_frame, icrc, normalize_desc, parse_frame
from rnic.model.headers import IPv4, UDP
from rnic.model.opcodes import Opcode

# A CNP captured from a Mellanox ConnectX-4 Lx: hardware-generated ICRC (0x82fd002a as the bytes 82 fd 00 2a).
CONNECTX4_CNP = bytes.fromhex(
    "e41d2dab2bc27cfe90643b32080045c2"
    "003c718c4000401191610a0011010a00"
    "1201000012b7002800008100ffff4000"
    "01180000000000000000000000000000"
    "000000000000" "82fd002a")

# scapy's example UC SEND ONLY: 18 payload bytes + 2 pad, UDP checksum 0xaca2 (non-zero), ICRC 0x78f353f3.
SCAPY_UC_SEND_ONLY = bytes.fromhex(
    "248a07a8fa22248a07a8fa2208004501"
    "0040047840004011b4d5c0a80007c0a8"
    "0007c00012b7002caca22460ffff0000"
    "00d300cf17104630818be28935d90e9a"
    "95505401be885e500000" "78f353f3")
SCAPY_UC_PAYLOAD = b"F0\x81\x8b\xe2\x895\xd9\x0e\x9a\x95PT\x01\xbe\x88^P"


def test_connectx4_cnp_reproduced_byte_for_byte():
    desc = PacketDesc(mode=LinkMode.ROCEV2_IPV4, payload_len=16, dst_mac=0xE41D2DAB2BC2, src_mac=0x7CFE90643B32,
                      src_gid=0xFFFF_0A001101, dst_gid=0xFFFF_0A001201, traffic_class=0xC2, hop_limit=0x40,
                      ip_id=0x718C, udp_sport=0, opcode=Opcode.CNP, pkey=0xFFFF, becn=1, dest_qp=0x118, psn=0)
    assert build_frame(desc, bytes(16)) == CONNECTX4_CNP
    parsed, payload = parse_frame(LinkMode.ROCEV2_IPV4, CONNECTX4_CNP)
    assert parsed == normalize_desc(desc) and payload == bytes(16)
    assert icrc(LinkMode.ROCEV2_IPV4, CONNECTX4_CNP[:-4]).to_bytes(4, "little") == bytes.fromhex("82fd002a")


def test_scapy_uc_example():
    mode = LinkMode.ROCEV2_IPV4
    assert icrc(mode, SCAPY_UC_SEND_ONLY[:-4]).to_bytes(4, "little") == bytes.fromhex("78f353f3")
    desc, payload = parse_frame(mode, SCAPY_UC_SEND_ONLY)
    assert payload == SCAPY_UC_PAYLOAD
    assert (desc.opcode, desc.migreq, desc.dest_qp, desc.psn, desc.traffic_class, desc.ip_id) == (
        Opcode.UC_SEND_ONLY, 1, 211, 13571856, 1, 1144)
    ours = bytearray(build_frame(desc, payload))
    assert IPv4.parse(ours[14:])[0].checksum == 0xB4D5
    # we send UDP checksum 0; with scapy's 0xaca2 patched in, the frames are identical (the ICRC masks it)
    ours[14 + 20 + 6:14 + 20 + 8] = (0xACA2).to_bytes(2, "big")
    assert bytes(ours) == SCAPY_UC_SEND_ONLY
    assert UDP.parse(SCAPY_UC_SEND_ONLY[34:])[0].checksum == 0xACA2
