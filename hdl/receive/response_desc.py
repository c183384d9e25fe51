"""The header descriptor of a response packet (ACK / NAK, READ RESPONSE, ATOMIC ACK). See :class:`ResponseDesc`."""

from __future__ import annotations

from functools import cache

from amaranth import Cat, Const, Module, Mux
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...model.descriptor import DESC_FIELDS, LinkMode, PacketDesc
from ...model.frames import carried_fields
from ...model.opcodes import Opcode
from ..descriptor import DescriptorLayout
from ..engine.layouts import in_set
from ..qp_cache import cached_layout

__all__ = ["ResponseDesc", "carried_by"]


@cache
def carried_by(name: str) -> tuple[frozenset[int], frozenset[int]]:
    """The link modes and the opcodes whose packets carry descriptor field ``name``, from
    :func:`rnic.model.frames.carried_fields` (with a VLAN tag present): a field is carried exactly when
    its mode is in the first set and its opcode in the second."""
    pairs = {(m, op) for m in LinkMode for op in Opcode
             if name in carried_fields(PacketDesc(mode=m, opcode=op, vlan_present=1))}
    modes = frozenset(m for m, _ in pairs)
    ops = frozenset(op for _, op in pairs)
    assert pairs == {(m, op) for m in modes for op in ops}, f"{name}: carried on no mode x opcode product"
    return modes, ops


class ResponseDesc(wiring.Component):
    """The descriptor of one response packet of the QP ``ctx``, combinational: what
    ``normalize_desc(EngineModel.path_desc(ctx, psn, opcode, payload_len=..., aeth_syndrome=syndrome,
    aeth_msn=msn, atomic_orig=atomic_orig))`` gives, so the fields the packet does not carry (for its
    link mode and opcode, as :func:`carried_by` reads them from the model) are zero and RoCEv2/IPv4 GIDs
    are IPv4-mapped. Addresses and path as :class:`rnic.hdl.engine.segment.Segmenter` fills them for
    requests, with ``ctx.dst_mac``, ``ctx.dst_gid``, ``ctx.dlid`` and ``ctx.dest_qpn`` as destination.

    Members
    -------
    ctx : In(cached_layout)
        The QP's context.
    opcode, psn, syndrome, msn, payload_len, atomic_orig : In
        The response's BTH opcode and PSN, AETH syndrome and MSN, payload bytes, AtomicAckETH original data.
    port_lid, sgid_gid, sgid_mac, sgid_vlan_id, sgid_vlan_present : In
        The port's LID and the SGID table entry of ``ctx.sgid_index``.
    desc : Out(DescriptorLayout)
        The response's header descriptor.
    """

    def __init__(self):
        super().__init__({
            "ctx": In(cached_layout), "opcode": In(8), "psn": In(24), "syndrome": In(8), "msn": In(24),
            "payload_len": In(DescriptorLayout["payload_len"].shape), "atomic_orig": In(64),
            "port_lid": In(16), "sgid_gid": In(128), "sgid_mac": In(48), "sgid_vlan_id": In(12),
            "sgid_vlan_present": In(1),
            "desc": Out(DescriptorLayout),
        })

    def elaborate(self, platform):
        m = Module()
        ctx, mode = self.ctx, self.ctx.link_mode[:3]

        def gid(g):
            return Mux(mode == LinkMode.ROCEV2_IPV4, Cat(g[:32], Const(0xFFFF, 16), Const(0, 80)), g)

        raw = dict(
            mode=mode, payload_len=self.payload_len,
            dst_mac=ctx.dst_mac, src_mac=self.sgid_mac, vlan_present=self.sgid_vlan_present,
            vlan_tci=Mux(self.sgid_vlan_present, Cat(self.sgid_vlan_id, Const(0, 1), ctx.sl[:3]), 0),
            src_gid=gid(self.sgid_gid), dst_gid=gid(ctx.dst_gid),
            traffic_class=ctx.traffic_class, flow_label=ctx.flow_label, hop_limit=ctx.hop_limit,
            ip_id=self.psn[:16], udp_sport=ctx.udp_sport,
            sl=ctx.sl, dlid=ctx.dlid, slid=self.port_lid,
            opcode=self.opcode, pkey=ctx.pkey, dest_qp=ctx.dest_qpn, psn=self.psn,
            aeth_syndrome=self.syndrome, aeth_msn=self.msn, atomic_orig=self.atomic_orig,
        )
        for name, _ in DESC_FIELDS:
            if name not in raw:
                continue
            modes, ops = carried_by(name)
            keep = Const(1)
            if modes != set(LinkMode):
                keep &= in_set(mode, modes)
            if ops != set(Opcode):
                keep &= in_set(self.opcode, ops)
            m.d.comb += getattr(self.desc, name).eq(Mux(keep, raw[name], 0))
        return m
