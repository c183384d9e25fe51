"""The receive path's first, stateless layer: is an incoming frame a well-formed RoCE/IB packet for this port?

:func:`classify` takes one frame as it came off the AXI4-Stream port (no Ethernet FCS; ``fcs_bad`` is the
``tuser`` flag of the last beat) and returns either :class:`Received` (the link mode, the descriptor and
payload exactly as :func:`~rnic.model.frames.parse_frame` gives them) or :class:`Dropped` with one
:class:`DropReason`. Nothing here looks at queue-pair state: P_Key, Q_Key, QP number, PSN and the QP's
transport are the next layer's checks.

A port is one of two kinds, fixed by ``link``:

- ``"ethernet"``: RoCEv2 over IPv4 or IPv6 (UDP port 4791) and RoCEv1 (EtherType 0x8915), each with an
  optional 802.1Q tag. The link mode is read from the EtherType; the VLAN ID is not filtered.
- ``"ib"``: native InfiniBand, LRH only (LNH 2, "IB local") or LRH + GRH (LNH 3, "IB global").

The checks run in the order of :class:`DropReason`; the first that fails names the reason, so a frame with
several faults is counted once, under the earliest. Every check reads only fields the earlier checks have
already shown to be present and consistent. The rules of the wire formats themselves (field layouts,
masks, what the parser accepts) are those of :mod:`rnic.model.frames` and :mod:`rnic.model.headers`;
this module decides which rule a bad frame broke, then calls ``parse_frame`` for the result (see
:func:`classify`).

References to Linux rxe name where the software RoCEv2 driver (drivers/infiniband/sw/rxe) or the kernel
network stack beneath it drops the same frames; rxe is RoCEv2 only and relies on the IP and UDP layers
for everything below the BTH.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Literal

from .descriptor import MAX_PAYLOAD, LinkMode, PacketDesc
from .frames import ETH_MIN_FRAME, ICRC_LEN, VCRC_LEN, icrc, parse_frame, vcrc
from .headers import (
    BTH, ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_ROCEV1, ETHERTYPE_VLAN, GRH, GRH_NEXT_HEADER_IBA,
    IP_PROTO_UDP, IPV4_FLAG_MF, LNH_IBA_GLOBAL, LNH_IBA_LOCAL, LRH, LVER_IBA, ROCEV2_UDP_PORT, TVER_IBA, UDP,
    Ethernet, IPv4, IPv6,
)
from .opcodes import Opcode, opcode_info

__all__ = ["DropReason", "PortAddresses", "Received", "Dropped", "classify", "DropCounters", "ipv4_gid"]

_IPV4_MAPPED_PREFIX = 0xFFFF << 32


def ipv4_gid(addr: int) -> int:
    """The IPv4-mapped GID ``::ffff:a.b.c.d`` of an IPv4 address (how a RoCE GID table holds it)."""
    return _IPV4_MAPPED_PREFIX | (addr & 0xFFFF_FFFF)


class DropReason(enum.IntEnum):
    """Why a frame was not handed on, in the order the checks are applied (the first failing check wins).

    One exception to the order: TRUNCATED and NOT_ROCE interleave by layer. The frame must hold its L2
    header (Ethernet with tag, or LRH), then the EtherType / LRH LVer and LNH must name a supported form
    (NOT_ROCE), then the frame must hold the headers that form announces through BTH and ICRC (TRUNCATED),
    then the IP / UDP / GRH fields that say what the packet is must be RoCE's (NOT_ROCE). So an ARP frame
    is NOT_ROCE however short it is, and a 40-byte frame with EtherType IPv4 is TRUNCATED.

    ======================  =====  ==================================================================
    reason                  error  rule (Linux: where rxe or the stack under it does the same)
    ======================  =====  ==================================================================
    ``BAD_FCS``             yes    the MAC flagged a bad FCS (``tuser`` on the last beat). Linux never
                                   sees these: the NIC drops them and counts ``rx_crc_errors``.
    ``TRUNCATED``           yes    the frame ends before its headers through the BTH plus the ICRC
                                   (and VCRC on IB), the headers being those its EtherType or LRH LNH
                                   announces. rxe_rcv (rxe_recv.c) drops a packet shorter than a BTH
                                   or than its opcode's headers; the IP and UDP layers drop short
                                   headers before that.
    ``NOT_ROCE``            no     not a packet of a form this port carries ("not for us", not a
                                   malformation): another EtherType, stacked 802.1Q tags, IPv4 with
                                   options or fragmented, IP version wrong, IP protocol / IPv6 next
                                   header not UDP, UDP destination port not 4791, GRH IPVer not 6 or
                                   next header not 0x1B, LRH LVer not 0 or LNH 0/1 (raw, IP).
                                   Dropped all the same (the engine has no other consumer) but counted
                                   apart from the errors. rxe only ever sees UDP port 4791: its
                                   tunnel socket (rxe_net.c) is bound to that port alone.
    ``BAD_LENGTH``          yes    a length field disagrees with the frame: IPv4 total length, IPv6
                                   payload length or GRH PayLen runs past the frame end or leaves bytes
                                   after the ICRC in a frame longer than 60 bytes (MAC padding); UDP
                                   length differs from the IP length; LRH PktLen * 4 + 2 differs from
                                   the frame; GRH PayLen differs from LRH PktLen; for a known opcode,
                                   its extended headers do not fit, payload plus pad is not a multiple
                                   of 4, PadCnt exceeds it, a pad byte is not zero, the opcode carries a
                                   payload it may not have (or a CNP not 16 bytes), or the payload
                                   exceeds 4096. The IP layer (ip_rcv_core) and UDP check their
                                   lengths before rxe runs.
    ``BAD_IP_CHECKSUM``     yes    IPv4 header checksum wrong (ip_rcv_core drops it before rxe).
    ``BAD_TVER``            yes    BTH TVer is not 0 (rxe: hdr_check in rxe_recv.c).
    ``BAD_ICRC``            yes    the ICRC does not match :func:`~rnic.model.frames.icrc` of the frame
                                   (rxe: rxe_icrc_check in rxe_icrc.c computes it the same way, with
                                   the variant fields masked, and drops on mismatch).
    ``BAD_VCRC``            yes    IB only: the VCRC does not match (no Ethernet equivalent; the FCS
                                   plays that role there).
    ``UNKNOWN_OPCODE``      yes    the BTH opcode is not in :data:`~rnic.model.opcodes.OPCODE_INFO`:
                                   reserved codes, RD and XRC, UC/UD operations that do not exist.
                                   Checked after the ICRC, so it fires only for a frame sent that way.
                                   rxe looks the opcode up in its table (rxe_opcode.c).
    ``NOT_OURS``            no     not addressed to this port: Ethernet destination MAC not the port's;
                                   IPv4/IPv6 destination or GRH DGID not in the port's GIDs; LRH DLID not
                                   the port's LID. Unicast only (multicast and the permissive LID are
                                   not accepted). Checked last of all, after the ICRC, so a corrupted
                                   address counts as BAD_ICRC/BAD_VCRC. rxe checks the DGID first of
                                   all (rxe_chk_dgid in rxe_recv.c, which also accepts multicast) and
                                   leaves the MAC to the netdev's filter.
    ``CNP``                 no     not an error and not a drop for a fault: a well-formed congestion
                                   notification (opcode 0x81) for this port. Counted, not executed;
                                   :class:`Dropped` carries its descriptor for a later rate limiter.
                                   Accepted in every link mode (the model's opcode table has it in all).
    ======================  =====  ==================================================================

    Every frame ``parse_frame`` rejects falls under one of these reasons (tests/model/test_receive.py
    checks it on random single-byte corruptions of every catalogue frame).
    """

    BAD_FCS = 0
    TRUNCATED = 1
    NOT_ROCE = 2
    BAD_LENGTH = 3
    BAD_IP_CHECKSUM = 4
    BAD_TVER = 5
    BAD_ICRC = 6
    BAD_VCRC = 7
    UNKNOWN_OPCODE = 8
    NOT_OURS = 9
    CNP = 10

    @property
    def is_error(self) -> bool:
        """False for the outcomes that are not malformations: NOT_ROCE, NOT_OURS and CNP."""
        return self not in (DropReason.NOT_ROCE, DropReason.NOT_OURS, DropReason.CNP)


@dataclass(frozen=True)
class PortAddresses:
    """The addresses a port answers to.

    ``mac`` (Ethernet ports) is the unicast destination MAC. ``gids`` are 128-bit GIDs as integers: the
    IPv6 addresses for RoCEv2/IPv6, the GRH DGIDs for RoCEv1 and IB global, and for RoCEv2/IPv4 the
    IPv4-mapped GID of each IPv4 address (:func:`ipv4_gid`), the way a RoCE GID table holds them.
    ``lid`` (IB ports) is the port's LID (LMC 0: one LID)."""

    mac: int = 0
    gids: frozenset[int] = frozenset()
    lid: int = 0

    def __post_init__(self):
        object.__setattr__(self, "gids", frozenset(self.gids))


@dataclass(frozen=True)
class Received:
    """A frame that passed every stateless check: what ``parse_frame(mode, frame)`` returns."""

    mode: LinkMode
    desc: PacketDesc
    payload: bytes


@dataclass(frozen=True)
class Dropped:
    """A frame not handed on. ``mode`` is set once the link mode is known; ``desc`` only for CNP."""

    reason: DropReason
    detail: str = ""
    mode: LinkMode | None = None
    desc: PacketDesc | None = None


class _Drop(Exception):
    def __init__(self, reason: DropReason, detail: str):
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def _check(cond: bool, reason: DropReason, detail: str) -> None:
    if not cond:
        raise _Drop(reason, detail)


# --- per-link framing: the link mode, then where the BTH starts and the ICRC ends ---------------------

def _ethernet_mode(frame: bytes) -> tuple[LinkMode, Ethernet, bytes]:
    """TRUNCATED (Ethernet header) and NOT_ROCE (EtherType): which RoCE form the frame claims to be."""
    T, N = DropReason.TRUNCATED, DropReason.NOT_ROCE
    _check(len(frame) >= Ethernet.BASE_SIZE, T, "shorter than an Ethernet header")
    outer = int.from_bytes(frame[12:14], "big")
    _check(outer != ETHERTYPE_VLAN or len(frame) >= Ethernet.BASE_SIZE + Ethernet.VLAN_TAG_SIZE, T,
           "truncated 802.1Q tag")
    try:
        eth, rest = Ethernet.parse(frame)
    except ValueError as e:            # stacked tags; the lengths were checked above
        raise _Drop(N, str(e)) from None
    mode = {ETHERTYPE_IPV4: LinkMode.ROCEV2_IPV4, ETHERTYPE_IPV6: LinkMode.ROCEV2_IPV6,
            ETHERTYPE_ROCEV1: LinkMode.ROCEV1}.get(eth.ethertype)
    _check(mode is not None, N, f"EtherType 0x{eth.ethertype:04x}")
    return mode, eth, rest


def _iba_grh(rest: bytes) -> GRH:
    """NOT_ROCE unless ``rest`` starts with a GRH (IPVer 6) whose next header is an IBA transport."""
    try:
        grh, _ = GRH.parse(rest)
    except ValueError as err:
        raise _Drop(DropReason.NOT_ROCE, str(err)) from None
    _check(grh.next_header == GRH_NEXT_HEADER_IBA, DropReason.NOT_ROCE, f"GRH next header 0x{grh.next_header:02x}")
    return grh


def _ethernet(frame: bytes, mode: LinkMode, eth: Ethernet, rest: bytes) -> tuple[int, int]:
    """The rest of TRUNCATED and NOT_ROCE, then BAD_LENGTH; returns where the BTH starts and the ICRC ends."""
    T, N, L = DropReason.TRUNCATED, DropReason.NOT_ROCE, DropReason.BAD_LENGTH
    net = {LinkMode.ROCEV2_IPV4: IPv4.SIZE + UDP.SIZE, LinkMode.ROCEV2_IPV6: IPv6.SIZE + UDP.SIZE,
           LinkMode.ROCEV1: GRH.SIZE}[mode]
    _check(len(rest) >= net + BTH.SIZE + ICRC_LEN, T, f"{mode.slug} frame of {len(frame)} bytes")

    # NOT_ROCE: the fields that say what the packet is
    if mode is LinkMode.ROCEV1:
        length = GRH.SIZE + _iba_grh(rest).pay_len
    else:
        try:
            ip, after_ip = (IPv4 if mode is LinkMode.ROCEV2_IPV4 else IPv6).parse(rest)
        except ValueError as e:        # version, IHL (options)
            raise _Drop(N, str(e)) from None
        udp, _ = UDP.parse(after_ip)
        if isinstance(ip, IPv4):
            _check(ip.protocol == IP_PROTO_UDP, N, f"IPv4 protocol {ip.protocol}")
            _check(not ip.flags & IPV4_FLAG_MF and ip.frag_offset == 0, N, "IPv4 fragment")
            length, udp_len = ip.total_length, ip.total_length - IPv4.SIZE
        else:
            _check(ip.next_header == IP_PROTO_UDP, N, f"IPv6 next header {ip.next_header}")
            length, udp_len = IPv6.SIZE + ip.payload_length, ip.payload_length
        _check(udp.dport == ROCEV2_UDP_PORT, N, f"UDP destination port {udp.dport}")

    # BAD_LENGTH
    end = eth.size + length
    _check(end <= len(frame), L, f"length fields say {end} bytes, frame has {len(frame)}")
    _check(end == len(frame) or len(frame) <= ETH_MIN_FRAME, L, f"{len(frame) - end} bytes after the ICRC")
    start = eth.size + net
    _check(end - start >= BTH.SIZE + ICRC_LEN, L, "length fields leave no room for BTH and ICRC")
    if mode is not LinkMode.ROCEV1:
        _check(udp.length == udp_len, L, f"UDP length {udp.length}, IP says {udp_len}")
    return start, end


def _ib_mode(frame: bytes) -> tuple[LinkMode, LRH, bytes]:
    """TRUNCATED (LRH) and NOT_ROCE (LVer, LNH): local or global."""
    _check(len(frame) >= LRH.SIZE, DropReason.TRUNCATED, "shorter than an LRH")
    lrh, rest = LRH.parse(frame)
    _check(lrh.lver == LVER_IBA, DropReason.NOT_ROCE, f"LRH LVer {lrh.lver}")
    _check(lrh.lnh in (LNH_IBA_LOCAL, LNH_IBA_GLOBAL), DropReason.NOT_ROCE,
           f"LRH LNH {lrh.lnh} (not an IBA transport packet)")
    return (LinkMode.IB_LOCAL if lrh.lnh == LNH_IBA_LOCAL else LinkMode.IB_GLOBAL), lrh, rest


def _ib(frame: bytes, mode: LinkMode, lrh: LRH, rest: bytes) -> tuple[int, int]:
    """The rest of TRUNCATED and NOT_ROCE (GRH), then BAD_LENGTH; returns the BTH start and the ICRC end."""
    T, L = DropReason.TRUNCATED, DropReason.BAD_LENGTH
    net = GRH.SIZE if mode is LinkMode.IB_GLOBAL else 0
    _check(len(rest) >= net + BTH.SIZE + ICRC_LEN + VCRC_LEN, T, f"{mode.slug} frame of {len(frame)} bytes")
    if mode is LinkMode.IB_GLOBAL:
        grh = _iba_grh(rest)
    _check(lrh.pkt_len * 4 + VCRC_LEN == len(frame), L,
           f"LRH PktLen {lrh.pkt_len} words + VCRC is not the frame's {len(frame)} bytes")
    if mode is LinkMode.IB_GLOBAL:
        _check(LRH.SIZE + GRH.SIZE + grh.pay_len == lrh.pkt_len * 4, L,
               f"GRH PayLen {grh.pay_len} disagrees with LRH PktLen {lrh.pkt_len}")
    return LRH.SIZE + net, len(frame) - VCRC_LEN


def _transport_lengths(transport: bytes) -> None:
    """BAD_LENGTH rules of the transport (``transport`` = BTH through pad, no ICRC), for a known opcode."""
    bth, _ = BTH.parse(transport)
    try:
        info = opcode_info(bth.opcode)
    except ValueError:
        return                          # UNKNOWN_OPCODE, checked after the ICRC
    L = DropReason.BAD_LENGTH
    rest = len(transport) - BTH.SIZE - info.ext_len
    _check(rest >= 0, L, f"{info.name}: extended headers do not fit")
    _check(rest % 4 == 0, L, f"payload plus pad is {rest} bytes, not a multiple of 4")
    _check(rest >= bth.pad_count, L, f"pad count {bth.pad_count} exceeds the {rest} bytes after the headers")
    n = rest - bth.pad_count
    _check(not any(transport[len(transport) - bth.pad_count:]), L, "pad bytes are not zero")
    _check(info.has_payload or n == 0, L, f"{info.name} carries no payload, got {n} bytes")
    _check(info.fixed_payload_len in (None, n), L, f"{info.name} carries {info.fixed_payload_len} bytes, not {n}")
    _check(n <= MAX_PAYLOAD, L, f"payload of {n} bytes exceeds {MAX_PAYLOAD}")


def _classify(frame: bytes, fcs_bad: bool, port: PortAddresses, link: str) -> Received | Dropped:
    _check(not fcs_bad, DropReason.BAD_FCS, "the MAC flagged a bad FCS")
    if link == "ethernet":
        mode, l2, rest = _ethernet_mode(frame)
    elif link == "ib":
        mode, l2, rest = _ib_mode(frame)
    else:
        raise ValueError(f"link must be 'ethernet' or 'ib', not {link!r}")
    try:
        start, end = (_ethernet if mode.is_ethernet else _ib)(frame, mode, l2, rest)
        _transport_lengths(frame[start:end - ICRC_LEN])
        if mode is LinkMode.ROCEV2_IPV4:
            ip, _ = IPv4.parse(frame[l2.size:])
            _check(ip.checksum_ok(), DropReason.BAD_IP_CHECKSUM, "bad IPv4 header checksum")
        bth, _ = BTH.parse(frame[start:])
        _check(bth.tver == TVER_IBA, DropReason.BAD_TVER, f"BTH TVer {bth.tver}")
        want, got = icrc(mode, frame[:end - ICRC_LEN]), int.from_bytes(frame[end - ICRC_LEN:end], "little")
        _check(got == want, DropReason.BAD_ICRC, f"ICRC 0x{got:08x}, expected 0x{want:08x}")
        if not mode.is_ethernet:
            want, got = vcrc(frame[:-VCRC_LEN]), int.from_bytes(frame[-VCRC_LEN:], "little")
            _check(got == want, DropReason.BAD_VCRC, f"VCRC 0x{got:04x}, expected 0x{want:04x}")
        try:
            opcode_info(bth.opcode)
        except ValueError as e:
            raise _Drop(DropReason.UNKNOWN_OPCODE, str(e)) from None
    except _Drop as d:
        return Dropped(d.reason, d.detail, mode)

    # Every rule parse_frame applies has been checked above, so it must accept the frame now.
    try:
        desc, payload = parse_frame(mode, frame)
    except ValueError as e:
        raise AssertionError(f"receive checks and parse_frame disagree on a {mode.slug} frame: {e}") from None

    if mode.is_ethernet:
        ours = desc.dst_mac == port.mac and desc.dst_gid in port.gids
    else:
        ours = desc.dlid == port.lid and (mode is LinkMode.IB_LOCAL or desc.dst_gid in port.gids)
    if not ours:
        return Dropped(DropReason.NOT_OURS, "destination is not one of the port's addresses", mode)
    if desc.opcode == Opcode.CNP:
        return Dropped(DropReason.CNP, "congestion notification", mode, desc)
    return Received(mode, desc, payload)


def classify(frame: bytes, *, fcs_bad: bool, port: PortAddresses,
             link: Literal["ethernet", "ib"]) -> Received | Dropped:
    """Run the stateless receive checks on ``frame`` (no FCS) in :class:`DropReason` order.

    ``Received`` gives the link mode and ``parse_frame``'s ``(desc, payload)``; ``Dropped`` the first
    failing check. The checks up to UNKNOWN_OPCODE restate, one reason each, the rules ``parse_frame``
    enforces; after them ``parse_frame`` is called and must succeed (an AssertionError otherwise means the
    two have drifted apart, a bug in the model)."""
    try:
        return _classify(bytes(frame), fcs_bad, port, link)
    except _Drop as d:
        return Dropped(d.reason, d.detail)


@dataclass
class DropCounters:
    """Per-reason counters, as the register block will expose them, and a count of frames received."""

    received: int = 0
    dropped: dict[DropReason, int] = field(default_factory=lambda: {r: 0 for r in DropReason})

    def count(self, result: Received | Dropped) -> Received | Dropped:
        """Count one classification result; returns it unchanged."""
        if isinstance(result, Received):
            self.received += 1
        else:
            self.dropped[result.reason] += 1
        return result

    def __getitem__(self, reason: DropReason) -> int:
        return self.dropped[DropReason(reason)]

    @property
    def total(self) -> int:
        """Every frame counted, received or not."""
        return self.received + sum(self.dropped.values())
