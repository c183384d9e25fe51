"""Published RoCEv2 frames, byte for byte, for the tests to check the model and the RTL against frames this
project did not build.

Source: scapy's regression tests for its RoCE layer, test/contrib/roce.uts in github.com/secdev/scapy
("RoCE CNP captured on ConnectX-4 Lx" and "RoCE layer", an example UC packet).
"""

__all__ = ["CONNECTX4_CNP", "SCAPY_UC_SEND_ONLY", "SCAPY_UC_PAYLOAD"]

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
