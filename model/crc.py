"""CRC specifications shared by the model, the RTL and the tests, and a plain-Python reference.

One :class:`CrcSpec` object is the single source of truth for a CRC: the model computes with
:meth:`CrcSpec.compute` (plain Python, a byte table built from the bit-serial :meth:`CrcSpec.update`,
independent of any hardware library), the RTL takes :meth:`CrcSpec.algorithm` (an
``amaranth.lib.crc.Algorithm``) or the spec's own fields, and the tests compare both against catalogue
check values.

- :data:`ICRC` is CRC-32 (IEEE 802.3 polynomial 0x04C11DB7, reflected, init and final XOR all ones):
  the InfiniBand Invariant CRC. The 32-bit result is sent least-significant byte first.
- :data:`VCRC` is the InfiniBand Variant CRC: polynomial 0x100B, reflected, init and final XOR
  0xFFFF, sent least-significant byte first after the ICRC (see docs/wire-formats.md). Its parameters
  agree with Endace's dagcrc.c; no catalogue lists it, so ``check`` stays None (it computes 0x0A3D).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CrcSpec", "ICRC", "VCRC"]


_TABLES: dict["CrcSpec", tuple[int, ...]] = {}


def _reflect(value: int, width: int) -> int:
    out = 0
    for i in range(width):
        if value >> i & 1:
            out |= 1 << (width - 1 - i)
    return out


@dataclass(frozen=True)
class CrcSpec:
    """A CRC in the Rocksoft/Williams model (the same fields as ``amaranth.lib.crc.Algorithm``)."""

    name: str
    width: int
    polynomial: int
    initial: int
    reflect_input: bool
    reflect_output: bool
    xor_output: int
    check: int | None  # CRC of b"123456789" from a published catalogue, where one lists this CRC

    def update(self, state: int, data: bytes) -> int:
        """Advance the raw shift-register ``state`` (un-reflected, before final XOR) over ``data``."""
        top = 1 << (self.width - 1)
        mask = (1 << self.width) - 1
        for byte in data:
            if self.reflect_input:
                byte = _reflect(byte, 8)
            state ^= byte << (self.width - 8)
            for _ in range(8):
                state = ((state << 1) ^ self.polynomial) & mask if state & top else (state << 1) & mask
        return state

    def finish(self, state: int) -> int:
        """Turn a raw register value into the CRC value (output reflection and final XOR)."""
        if self.reflect_output:
            state = _reflect(state, self.width)
        return state ^ self.xor_output

    def compute(self, data: bytes) -> int:
        """CRC value of ``data``. Byte-table driven; the table is built from :meth:`update`, and the
        tests check both paths against each other."""
        table = self._table()
        mask = (1 << self.width) - 1
        if self.reflect_input:
            state = _reflect(self.initial, self.width)
            for byte in data:
                state = table[(state ^ byte) & 0xFF] ^ (state >> 8)
            if not self.reflect_output:
                state = _reflect(state, self.width)
        else:
            shift = self.width - 8
            state = self.initial
            for byte in data:
                state = table[(state >> shift) ^ byte] ^ ((state << 8) & mask)
            if self.reflect_output:
                state = _reflect(state, self.width)
        return state ^ self.xor_output

    def _table(self) -> tuple[int, ...]:
        table = _TABLES.get(self)
        if table is None:
            if self.reflect_input:
                # reflected register: entry i is the register after feeding byte i into a zero register
                plain = CrcSpec(self.name, self.width, self.polynomial, 0, False, False, 0, None)
                table = tuple(_reflect(plain.update(0, bytes([_reflect(i, 8)])), self.width) for i in range(256))
            else:
                table = tuple(self.update(0, bytes([i])) for i in range(256))
            _TABLES[self] = table
        return table

    def to_bytes(self, value: int) -> bytes:
        """Wire bytes of a CRC value: least-significant byte first (the IB rule for ICRC and VCRC)."""
        return value.to_bytes(self.width // 8, "little")

    def algorithm(self):
        """The same CRC as an ``amaranth.lib.crc.Algorithm`` (imported lazily: the model stays plain Python)."""
        from amaranth.lib import crc

        return crc.Algorithm(crc_width=self.width, polynomial=self.polynomial, initial_crc=self.initial,
                             reflect_input=self.reflect_input, reflect_output=self.reflect_output,
                             xor_output=self.xor_output)


ICRC = CrcSpec("CRC-32/ISO-HDLC (IB ICRC)", 32, 0x04C11DB7, 0xFFFFFFFF, True, True, 0xFFFFFFFF, 0xCBF43926)
VCRC = CrcSpec("CRC-16/IB-VCRC", 16, 0x100B, 0xFFFF, True, True, 0xFFFF, None)
