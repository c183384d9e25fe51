"""The built-in demo: a frame of every opcode form in every link mode, checked and written to pcaps.

Today the frames come from the golden model and every one is checked by parsing it back (lengths,
checksum, pad, ICRC and VCRC are verified by the parser). When the RTL engine lands, the same
command runs it on Verilator and compares its frames with these.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from ..model.descriptor import LinkMode, PacketDesc
from ..model.frames import build_frame, normalize_desc, parse_frame
from ..model.opcodes import OPCODE_INFO, Position
from ..model.pcap import write_pcap_for_mode

__all__ = ["demo_packets", "ModeResult", "run_demo"]

DEMO_MTU = 256
_LINK_LOCAL_GIDS = (0xFE80_0000_0000_0000_0002_C9FF_FE00_0001, 0xFE80_0000_0000_0000_0002_C9FF_FE00_0002)
_IPV4_MAPPED_GIDS = (0xFFFF_C0A8_0101, 0xFFFF_C0A8_0102)  # ::ffff:192.168.1.1 and .2


def _payload_len(info, index: int) -> int:
    if not info.has_payload:
        return 0
    if info.fixed_payload_len is not None:
        return info.fixed_payload_len
    if info.position in (Position.FIRST, Position.MIDDLE):
        return DEMO_MTU
    return 1 + (index * 37) % DEMO_MTU  # LAST/ONLY: sizes that need every pad count


def demo_packets(mode: LinkMode, seed: int = 0) -> list[tuple[PacketDesc, bytes]]:
    """One packet per opcode in the model's table, with deterministic field values and payloads."""
    rng = random.Random(seed * 7919 + int(mode))
    src_gid, dst_gid = _IPV4_MAPPED_GIDS if mode == LinkMode.ROCEV2_IPV4 else _LINK_LOCAL_GIDS
    out = []
    for index, (opcode, info) in enumerate(sorted(OPCODE_INFO.items())):
        n = _payload_len(info, index)
        desc = PacketDesc(
            mode=mode, payload_len=n, opcode=int(opcode), psn=0x100 + index, dest_qp=0x12 + (index & 3),
            vlan_present=int(index % 5 == 0), vlan_tci=0x2064, ip_id=index,
            src_gid=src_gid, dst_gid=dst_gid,
            traffic_class=0x08 * (index % 4), flow_label=0x12345 * (index % 2), hop_limit=64,
            udp_sport=0xC000 | index, sl=index % 16, vl=index % 8, ackreq=int(info.position in (Position.LAST, Position.ONLY)),
            reth_va=0x7F00_0000_1000 + 256 * index, reth_rkey=0xA5A5_0000 | index, reth_dma_len=n,
            imm=0xC0DE_0000 | index, deth_qkey=0x1111_1111, deth_src_qp=0x12,
            aeth_syndrome=0x1F, aeth_msn=index, atomic_va=0x7F00_0000_2000, atomic_rkey=0xB0B0,
            atomic_swap=rng.getrandbits(64), atomic_compare=rng.getrandbits(64), atomic_orig=rng.getrandbits(64),
        )
        out.append((desc, rng.randbytes(n)))
    return out


@dataclass
class ModeResult:
    mode: LinkMode
    path: Path
    frames: int
    bytes: int
    checked: int


def run_demo(out_dir: Path, seed: int = 0) -> list[ModeResult]:
    """Build, check and write the demo pcaps; raise AssertionError on the first frame that does not check."""
    out_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for mode in LinkMode:
        frames, checked = [], 0
        for desc, payload in demo_packets(mode, seed):
            frame = build_frame(desc, payload)
            parsed, parsed_payload = parse_frame(mode, frame)
            if parsed != normalize_desc(desc) or parsed_payload != payload:
                raise AssertionError(f"{mode.slug}: opcode 0x{desc.opcode:02x} does not parse back to its descriptor")
            checked += 1
            frames.append(frame)
        path = out_dir / f"{mode.slug}.pcap"
        write_pcap_for_mode(path, mode, frames)
        results.append(ModeResult(mode, path, len(frames), sum(map(len, frames)), checked))
    return results
