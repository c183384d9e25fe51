"""Published RoCEv2 frames reproduced byte for byte.

Source: scapy's regression tests for its RoCE layer, test/contrib/roce.uts in github.com/secdev/scapy
("RoCE CNP captured on ConnectX-4 Lx" and "RoCE layer", an example UC packet).
"""

from rnic.model.descriptor import LinkMode, PacketDesc
from rnic.model.frames import build_frame, icrc, normalize_desc, parse_frame
from rnic.model.headers import IPv4, UDP
from rnic.model.opcodes import Opcode
from rnic.model.published import CONNECTX4_CNP, SCAPY_UC_PAYLOAD, SCAPY_UC_SEND_ONLY


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
