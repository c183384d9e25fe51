"""RoCEv2 frames built by scapy (``scapy.contrib.roce``) from a descriptor: an independent builder for the
model's tests and the RTL's (extended headers packed with ``struct``, not with ``rnic.model.headers``).
Import it only where scapy is installed (the ``test`` extra)."""

import ipaddress
import struct

from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Raw

from ..model.descriptor import LinkMode
from ..model.opcodes import OPCODE_INFO, Opcode

__all__ = ["mac", "ext_bytes", "scapy_frame"]


def mac(value: int) -> str:
    return ":".join(f"{b:02x}" for b in value.to_bytes(6, "big"))


def ext_bytes(desc) -> bytes:
    """Extended headers packed with struct, independently of rnic.model.headers."""
    out = b""
    for h in OPCODE_INFO[Opcode(desc.opcode)].ext_headers:
        out += {
            "RETH": lambda: struct.pack(">QII", desc.reth_va, desc.reth_rkey, desc.reth_dma_len),
            "AETH": lambda: struct.pack(">I", desc.aeth_syndrome << 24 | desc.aeth_msn),
            "DETH": lambda: struct.pack(">II", desc.deth_qkey, desc.deth_src_qp),
            "ImmDt": lambda: struct.pack(">I", desc.imm),
            "IETH": lambda: struct.pack(">I", desc.imm),
            "AtomicETH": lambda: struct.pack(">QIQQ", desc.atomic_va, desc.atomic_rkey, desc.atomic_swap,
                                             desc.atomic_compare),
            "AtomicAckETH": lambda: struct.pack(">Q", desc.atomic_orig),
        }[h.__name__]()
    return out


def scapy_frame(desc, payload: bytes, resv6: int = 0, resv7: int = 0) -> bytes:
    pad = -len(payload) % 4
    l2 = Ether(dst=mac(desc.dst_mac), src=mac(desc.src_mac))
    if desc.vlan_present:
        l2 = l2 / Dot1Q(prio=desc.vlan_tci >> 13, id=desc.vlan_tci >> 12 & 1, vlan=desc.vlan_tci & 0xFFF)
    if desc.mode == LinkMode.ROCEV2_IPV4:
        l3 = IP(tos=desc.traffic_class, id=desc.ip_id, flags="DF", ttl=desc.hop_limit,
                src=str(ipaddress.IPv4Address(desc.src_gid & 0xFFFFFFFF)),
                dst=str(ipaddress.IPv4Address(desc.dst_gid & 0xFFFFFFFF)))
    else:
        l3 = IPv6(tc=desc.traffic_class, fl=desc.flow_label, hlim=desc.hop_limit,
                  src=str(ipaddress.IPv6Address(desc.src_gid)), dst=str(ipaddress.IPv6Address(desc.dst_gid)))
    bth = BTH(opcode=desc.opcode, solicited=desc.se, migreq=desc.migreq, padcount=pad, version=0, pkey=desc.pkey,
              fecn=desc.fecn, becn=desc.becn, resv6=resv6, dqpn=desc.dest_qp, ackreq=desc.ackreq, resv7=resv7,
              psn=desc.psn)
    pkt = l2 / l3 / UDP(sport=desc.udp_sport, dport=4791, chksum=0) / bth / Raw(ext_bytes(desc) + payload + bytes(pad))
    return bytes(pkt)
