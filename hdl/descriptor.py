"""RTL layouts of the packet builder's descriptor and error flags.

:data:`DescriptorLayout` is built from :data:`rnic.model.descriptor.DESC_FIELDS`, the single field
table, in its order: the first field sits at bit 0, exactly as :meth:`PacketDesc.to_int` packs it, so
the model, the RTL and the testbenches cannot drift apart.
"""

from amaranth.lib import data

from ..model.descriptor import DESC_FIELDS, DESC_WIDTH

__all__ = ["DescriptorLayout", "ErrorFlags", "DESC_WIDTH"]

#: One packet's header descriptor (see :class:`rnic.model.descriptor.PacketDesc` for the fields).
DescriptorLayout = data.StructLayout(dict(DESC_FIELDS))
assert DescriptorLayout.size == DESC_WIDTH

#: Sticky error causes of the packet builder (each one aborts the frame it occurs in).
ErrorFlags = data.StructLayout({
    "bad_mode": 1,   # descriptor link mode 5..7
    "too_long": 1,   # descriptor payload_len > MAX_PAYLOAD
    "early": 1,      # payload stream ended (last) before payload_len bytes
    "late": 1,       # payload stream went on past payload_len bytes
})
