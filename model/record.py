"""Fixed-layout records: a dataclass whose fields sit at fixed bit offsets of one integer.

Every binary format of the model (packet descriptor, QP context, CQE, CQ context) is a field table
``(name, bit offset, width)``; :class:`FieldRecord` turns such a table into range checking, integer
packing and little-endian bytes (byte ``i`` = bits ``8i+7 .. 8i``, the AXI lane order).
"""

from __future__ import annotations

__all__ = ["get_bits", "FieldRecord"]


def get_bits(value: int, off: int, width: int) -> int:
    return value >> off & ((1 << width) - 1)


class FieldRecord:
    """Base of a dataclass with class attributes ``FIELDS`` (name, offset, width) and ``BYTES``."""

    FIELDS: tuple[tuple[str, int, int], ...] = ()
    BYTES = 0

    def __post_init__(self):
        for name, _, width in self.FIELDS:
            value = int(getattr(self, name))
            if not 0 <= value < (1 << width):
                raise ValueError(f"{type(self).__name__}.{name} must fit in {width} bits, not {value!r}")

    def to_int(self) -> int:
        return sum(int(getattr(self, name)) << off for name, off, _ in self.FIELDS)

    @classmethod
    def from_int(cls, value: int):
        return cls(**{name: get_bits(value, off, width) for name, off, width in cls.FIELDS})

    def pack(self) -> bytes:
        return self.to_int().to_bytes(self.BYTES, "little")

    @classmethod
    def unpack(cls, raw: bytes):
        if len(raw) != cls.BYTES:
            raise ValueError(f"a {cls.__name__} is {cls.BYTES} bytes, not {len(raw)}")
        return cls.from_int(int.from_bytes(raw, "little"))
