"""Packet builder: header descriptor + payload stream in, complete RoCE / InfiniBand frames out.

:class:`PacketBuilder` turns one :data:`~rnic.hdl.descriptor.DescriptorLayout` descriptor and the
payload bytes of one packet into one wire frame for any of the five link modes, one output beat per
clock. :class:`PacketBuilderAxis` is the same block behind AXI4-Stream ports (the cocotb, benchmark
and synthesis boundary). docs/packet-builder.md describes the block, its timing and abort rules.

Pipeline (all stages move one descriptor or one beat per clock)::

    desc -> s1 (register; opcode ROM: one-hot extended header selection and length)
         -> s2 (decode, header lengths, payload rounded to 4, IPv4 word pairs)
         -> s3 (extended headers, transport and frame lengths, IPv4 partial sums)
         -> s4 (IPv4 sum with total length, frame parameters: beat counts, lane masks; template
                group selects)
         -> s5 (IPv4 checksum, header byte vector) -> k (skid register)
         -> generator (header beats, payload beats as taken, pad, CRC placeholder bytes)
         -> ga (the beat as taken) -> bt (beat register: payload funnel-shifted by header length
            mod W/8 and ORed with the header part; feeds both CRC engines)
         -> delay line (CRC latency + 2) -> tl (ICRC / VCRC placed) -> output FIFO -> frame

s1..s5 stall on registered conditions only (the skid register k takes s5 whenever the generator
does not), so the payload handshake never reaches the wide stage registers; each stage's enable is
itself a flip-flop, computed one clock ahead from the next-state valids. The generator runs on
credits: it only emits a beat when the output FIFO is sure to have room for it, so the delay line
and the CRC engines never stall and each beat meets its CRC value at a fixed distance.

Byte order: a header byte vector holds wire byte ``k`` at bits ``8k .. 8k+7`` (the stream's lane
order); multi-byte header fields are big-endian on the wire, CRCs least-significant byte first.

Blocks, one module each (docs/packet-builder.md, "Structure"):

* :mod:`.front` (:class:`~.front.HeaderFrontEnd`): s1..s4 and the stage enables;
* :mod:`.header` (:class:`~.header.HeaderVector`): s5, the IPv4 checksum and header vector;
* :mod:`.generator` (:class:`~.generator.BeatGenerator`): the skid register k and the generator;
* :mod:`.merge` (:class:`~.merge.BeatMerge`): ``ga`` / ``bt``, header and payload in one beat;
* :mod:`.crc_place` (:class:`~.crc_place.CrcPlacement`): CRC engines, delay line, tail lanes;
* :mod:`.queue` (:func:`~.queue.output_queue`): the output queue behind ``frame``;
* :mod:`.builder`: :class:`PacketBuilder` wiring them, and :class:`PacketBuilderAxis`;
* :mod:`.templates`, :mod:`.checksum`: header templates, bit maps, ones'-complement sums.
"""

from .builder import PacketBuilder, PacketBuilderAxis
from .checksum import _oc_add, _oc_sum3  # noqa: F401 (tests/test_packet_builder_checksum.py)
from .templates import DESC_AXIS_WIDTH, EARLY_BITS, HEADER_MAX, LATE_FIELDS

__all__ = ["PacketBuilder", "PacketBuilderAxis", "HEADER_MAX", "DESC_AXIS_WIDTH", "LATE_FIELDS", "EARLY_BITS"]
