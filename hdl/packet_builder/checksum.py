"""16-bit ones'-complement arithmetic of the IPv4 header checksum (s2..s5 of the header front end).

Each add is split into its two carry chains (:func:`_oc_parts`) so that the end-around carry can
be picked a stage later (:func:`_oc_pick`): the front end registers the halves in s4 and picks in s5.
"""

from amaranth import Cat, Const, Mux, Signal

__all__ = []


def _oc_parts(m, a, b, name):
    """The two halves of a 16-bit ones'-complement add of ``a`` and ``b``: ``a + b`` (17 bits) and
    ``a + b + 1`` (16 bits), on two carry chains side by side; :func:`_oc_pick` chooses between
    them, in the same clock or (registered in between) the next."""
    plain = Signal(17, name=f"{name}_c0")
    plus1 = Signal(18, name=f"{name}_c1")
    m.d.comb += [plain.eq(a + b), plus1.eq(Cat(Const(1, 1), a) + Cat(Const(1, 1), b))]
    return plain, plus1[1:17]


def _oc_pick(plain, plus1):
    """The end-around carry: ``a + b + 1`` when ``a + b`` carries out. The result is 0 only if both
    operands are, as with the usual fold."""
    return Mux(plain[16], plus1, plain[:16])


def _oc_add(m, a, b, name):
    """16-bit ones'-complement sum of ``a`` and ``b`` (end-around carry), combinational."""
    return _oc_pick(*_oc_parts(m, a, b, name))


def _oc_sum3_parts(m, a, b, c, name):
    """:func:`_oc_parts` of a three-term ones'-complement sum: one carry-save layer first (the
    carry vector rotated left, as 2**16 is 1 modulo 2**16 - 1)."""
    carry = (a & b) | (a & c) | (b & c)
    return _oc_parts(m, a ^ b ^ c, Cat(carry[15], carry[:15]), name)


def _oc_sum3(m, a, b, c, name):
    """16-bit ones'-complement sum of three terms, combinational."""
    return _oc_pick(*_oc_sum3_parts(m, a, b, c, name))
