"""FPGA primitives where synthesis would otherwise restructure timing-critical logic.

:func:`lut4` places one function of up to four signals in one ECP5 ``LUT4`` when the design is
elaborated for an ECP5 (``platform.family == "ecp5"``: Amaranth's Lattice platforms, and the
out-of-context flow of :mod:`rnic.fpga.synth`), and as plain logic otherwise (simulation, other
families). ABC, yosys' LUT mapper, only balances logic against the design's deepest path: a set of
related four-input functions of the same register bits (the packet builder's template-group
selects) came out as a chain of five LUTs, each computing its function from the one before.
An instantiated ``LUT4`` is kept as it is.

Both forms index the same 16-bit truth table with ``Cat(a, b, c, d)`` (``a`` the least significant
bit), the ``LUT4`` cell's own rule ``Z = INIT[{D, C, B, A}]``.
"""

from amaranth import Cat, Const, Instance, Signal

__all__ = ["lut4", "lut4_init", "xor_lut4"]


def lut4_init(fn, n_inputs):
    """The truth table of ``fn`` (a function of ``n_inputs`` <= 4 bits, each 0 or 1, returning a
    truthy value) as a 16-bit ``LUT4`` ``INIT``; unused inputs are tied to 0."""
    if not 1 <= n_inputs <= 4:
        raise ValueError(f"a LUT4 has 1 to 4 inputs, not {n_inputs}")
    init = 0
    for index in range(16):
        if index >> n_inputs:
            continue
        if fn(*((index >> k) & 1 for k in range(n_inputs))):
            init |= 1 << index
    return init


def lut4(m, platform, name, fn, inputs, order=None):
    """A one-bit signal ``name`` equal to ``fn(*bits of inputs)`` (up to four one-bit values, first
    = least significant), in one ``LUT4`` on ECP5. Returns the signal (combinational).

    ``order`` (a permutation of the input indices) connects the LUT's pins to
    ``inputs[order[0]], inputs[order[1]], ..``: the same function with another INIT, so that
    copies of one function on the same signals are not merged by synthesis."""
    if order is not None:
        if sorted(order) != list(range(len(inputs))):
            raise ValueError(f"order must be a permutation of 0..{len(inputs) - 1}, not {order!r}")
        inputs = [inputs[i] for i in order]
        fn = (lambda f, o: lambda *b: f(*(b[o.index(i)] for i in range(len(o)))))(fn, tuple(order))
    inputs = [Cat(x) for x in inputs]
    if any(len(x) != 1 for x in inputs):
        raise ValueError("lut4 inputs are one bit each")
    init = lut4_init(fn, len(inputs))
    z = Signal(name=name)
    if getattr(platform, "family", None) == "ecp5":
        pins = inputs + [Const(0, 1)] * (4 - len(inputs))
        m.submodules[name] = Instance("LUT4", p_INIT=Const(init, 16), i_A=pins[0], i_B=pins[1],
                                      i_C=pins[2], i_D=pins[3], o_Z=z)
    else:
        m.d.comb += z.eq(Const(init, 1 << len(inputs)).bit_select(Cat(*inputs), 1))
    return z


def xor_lut4(m, platform, name, bits):
    """The XOR of ``bits`` (one-bit values) as a balanced tree of four-input XORs, each one LUT4
    on ECP5 (``ceil(log4(len(bits)))`` levels: ABC, sharing terms between the bits of a wide
    XOR network, made 16-input XORs five levels deep), or plain logic elsewhere."""
    bits = [Cat(b) for b in bits]
    if not bits:
        return Const(0, 1)
    if getattr(platform, "family", None) != "ecp5":
        return Cat(*bits).xor()
    level = 0
    while len(bits) > 1:
        bits = [bits[i] if len(bits[i:i + 4]) == 1 else
                lut4(m, platform, f"{name}_x{level}_{i // 4}", lambda *b: sum(b) & 1, bits[i:i + 4])
                for i in range(0, len(bits), 4)]
        level += 1
    return bits[0]
