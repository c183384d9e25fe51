"""scapy.contrib.roce as an independent oracle for RoCEv2 frames and their ICRC.

Thousands of random RoCEv2/IPv4 and RoCEv2/IPv6 frames (random TOS/TTL, traffic class/flow label/hop
limit, FECN/BECN, VLAN tags, opcodes, payloads): scapy builds each frame from the same field values with its
own IP/UDP/BTH code and its own ICRC; the bytes must equal ours. Our parser must read scapy's frames, and
scapy must read ours and recompute the same ICRC. Seeded: set RNIC_SEED to replay a run.
"""

import os
import random

import pytest

from model_strategies import random_desc
from rnic.model.descriptor import LinkMode
from rnic.model.frames import build_frame, icrc, normalize_desc, parse_frame
from rnic.model.opcodes import Opcode

scapy_l2 = pytest.importorskip("scapy.layers.l2")
from scapy.contrib.roce import BTH  # noqa: E402
from scapy.layers.inet import IP, UDP  # noqa: E402
from scapy.layers.inet6 import IPv6  # noqa: E402
from scapy.layers.l2 import Ether  # noqa: E402

from rnic.sim.scapy_frames import scapy_frame  # noqa: E402

FRAMES_PER_MODE = 1500
SLOW_FRAMES_PER_MODE = 20000
SMALL_PAYLOAD = 256   # most frames: keeps the sweep fast; one in five goes up to MAX_PAYLOAD


def seed() -> int:
    value = int(os.environ.get("RNIC_SEED", random.SystemRandom().randrange(2**31)))
    print(f"RNIC_SEED={value}")
    return value


ROCEV2 = [LinkMode.ROCEV2_IPV4, LinkMode.ROCEV2_IPV6]


@pytest.mark.parametrize("mode", ROCEV2, ids=lambda m: m.slug)
def test_random_frames_against_scapy(mode):
    sweep(mode, FRAMES_PER_MODE)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ROCEV2, ids=lambda m: m.slug)
def test_random_frames_against_scapy_long(mode):
    sweep(mode, SLOW_FRAMES_PER_MODE)


def sweep(mode, count):
    s = seed()
    rng = random.Random(s)
    for i in range(count):
        desc, payload = random_desc(rng, mode, 4096 if rng.random() < 0.2 else SMALL_PAYLOAD)
        if desc.opcode == Opcode.CNP:
            continue  # scapy attaches its own CNPPadding layer; the CNP is covered by the published capture
        ctx = f"seed={s} frame={i} desc={desc}"
        ours = build_frame(desc, payload)
        resv6, resv7 = (rng.getrandbits(6), rng.getrandbits(7)) if rng.random() < 0.25 else (0, 0)
        theirs = scapy_frame(desc, payload, resv6, resv7)
        assert icrc(mode, theirs[:-4]).to_bytes(4, "little") == theirs[-4:], ctx
        if resv6 == resv7 == 0:
            assert ours == theirs, ctx
        parsed, got = parse_frame(mode, theirs)
        assert (parsed, got) == (normalize_desc(desc), payload), ctx

        p = Ether(ours)
        b = p[BTH]
        assert (b.opcode, b.solicited, b.migreq, b.pkey, b.fecn, b.becn, b.dqpn, b.ackreq, b.psn) == (
            desc.opcode, desc.se, desc.migreq, desc.pkey, desc.fecn, desc.becn, desc.dest_qp, desc.ackreq,
            desc.psn), ctx
        assert b.padcount == -desc.payload_len % 4, ctx
        assert b.compute_icrc(None) == ours[-4:], ctx
        if mode == LinkMode.ROCEV2_IPV4:
            assert (p[IP].tos, p[IP].ttl, p[IP].id, p[IP].len) == (
                desc.traffic_class, desc.hop_limit, desc.ip_id, len(ours) - (18 if desc.vlan_present else 14)), ctx
        else:
            assert (p[IPv6].tc, p[IPv6].fl, p[IPv6].hlim) == (desc.traffic_class, desc.flow_label, desc.hop_limit), ctx
        assert (p[UDP].sport, p[UDP].len, p[UDP].chksum) == (desc.udp_sport, len(bytes(p[UDP])), 0), ctx
