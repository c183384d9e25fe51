"""FPGA primitives where synthesis would otherwise restructure timing-critical logic.

:func:`lut4` places one function of up to four signals in one ECP5 ``LUT4`` when the design is
elaborated for an ECP5 (``platform.family == "ecp5"``: Amaranth's Lattice platforms, and the
out-of-context flow of :mod:`rnic.fpga.synth`), and as plain logic otherwise (simulation, other
families). ABC, yosys' LUT mapper, only balances logic against the design's deepest path: a set of
related four-input functions of the same register bits (the packet builder's template-group
selects) came out as a chain of five LUTs, each computing its function from the one before.
An instantiated ``LUT4`` is kept as it is.

Three techniques built on :func:`lut4`, each with one home here:

* :func:`replica` / :func:`replicas`: copies of one function of the same signals, each its own
  ``LUT4`` with its pins in another order (another ``INIT``), so that synthesis cannot merge them
  and each copy can be placed by what it drives (a wide register's enables, a queue's write).
  Copies may also differ where their value is unused (``fn`` a list, one function per copy).
* :func:`late_select`: ``sel ? if1 : if0`` per bit, one ``LUT4`` each, for a late-arriving
  ``sel`` (a handshake) and two values computed ahead from registers: ``sel`` reaches the result
  through one LUT, not through the logic that computed the two candidates.
* :func:`pairwise_eq`: an equality compare as ``LUT4``s of two bit pairs each, whose AND is the
  equality (ABC otherwise shares XOR terms across compares and deepens them).

All of them are plain logic unless ``platform.family == "ecp5"``, as :func:`lut4` is.

:func:`by_state` selects a value by the state of a one-hot FSM as an AND-OR, not as the priority
chain of ``m.If`` / ``m.Elif`` (which synthesis keeps in order).

:func:`block_read` is a block RAM's synchronous read in the form yosys maps without extra logic.
:data:`BLOCK_RAM` are the ``Memory`` attributes of a block RAM whose reads never meet a write of
the same entry at the same edge.

:func:`outreg_ram` is a block RAM read through its own output register, which yosys' ECP5 memory
mapping never turns on (``DP16KD`` ``REGMODE = "NOREG"``).

Both forms index the same 16-bit truth table with ``Cat(a, b, c, d)`` (``a`` the least significant
bit), the ``LUT4`` cell's own rule ``Z = INIT[{D, C, B, A}]``.
"""

import itertools
import operator
from functools import reduce

from amaranth import Cat, ClockSignal, Const, Instance, Mux, Signal

__all__ = ["BLOCK_RAM", "block_read", "by_state", "round_robin", "late_select", "lut4", "lut4_init", "outreg_ram", "pairwise_eq",
           "replica", "replicas", "xor_lut4"]

#: ``Memory(attrs=BLOCK_RAM)``: block RAM even where yosys would pick LUT RAM, and no read-first
#: collision logic (``no_rw_check``). Only for a memory whose design never reads the entry written
#: at the same edge (each user says why, and ``Assert``s it where the reason is not structural).
BLOCK_RAM = {"ram_style": "block", "no_rw_check": 1}


class _BlockRead:
    def __init__(self, addr, en, data):
        self.addr, self.en, self.data = addr, en, data


def block_read(m, memory, name):
    """A synchronous read port of ``memory`` (for block RAM): ``addr`` and ``en`` in, ``data``
    taking the entry at ``addr`` at each edge with ``en`` and holding otherwise, as
    ``memory.read_port()``. It is an asynchronous port followed by a reset-less register (as in
    :class:`~rnic.hdl.fifo.BlockFIFO`): yosys merges that into an ECP5 ``DP16KD``, while through
    Amaranth's synchronous port it put a flip-flop and a LUT4 per bit beside the RAM (measured on
    the QP cache's ``mut_mem``; docs/fpga.md)."""
    port = memory.read_port(domain="comb")
    en = Signal(name=f"{name}_en")
    data = Signal(port.data.shape(), reset_less=True, name=f"{name}_data")
    with m.If(en):
        m.d.sync += data.eq(port.data)
    return _BlockRead(port.addr, en, data)


def by_state(fsm, values):
    """``values[state]`` while ``fsm`` (an Amaranth FSM, recoded one-hot in synthesis) is in that
    state, 0 in every other state: the OR over the states of ``Mux(fsm.ongoing(state), value, 0)``."""
    return reduce(operator.or_, (Mux(fsm.ongoing(state), value, 0) for state, value in values.items()))


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


def replica(m, platform, name, fn, inputs, copy=0, order=None):
    """Copy number ``copy`` of ``fn(*inputs)`` (as :func:`lut4`): a ``LUT4`` whose pins take the
    inputs in the ``copy``-th permutation (``itertools.permutations`` order, cycling; copy 0 as
    given), or in ``order`` if given. Copies with different pin orders have different ``INIT``s, so
    synthesis keeps them apart; a single copy is a cell of its own for one user. Returns the signal."""
    if order is None:
        orders = list(itertools.permutations(range(len(inputs))))
        order = orders[copy % len(orders)]
    return lut4(m, platform, name, fn, inputs, order)


def replicas(m, platform, names, fn, inputs, orders=None):
    """One :func:`replica` of ``fn(*inputs)`` per name in ``names``; copy ``c`` takes its pins in
    ``orders[c]`` (default: the ``c``-th permutation). ``fn`` may be a list, one function per copy,
    for copies that differ only where their value is not used. Returns the list of signals."""
    fns = fn if isinstance(fn, (list, tuple)) else [fn] * len(names)
    if len(fns) != len(names) or (orders is not None and len(orders) != len(names)):
        raise ValueError(f"replicas: {len(names)} names, {len(fns)} functions, orders {orders!r}")
    return [replica(m, platform, n, f, inputs, copy=c, order=None if orders is None else orders[c])
            for c, (n, f) in enumerate(zip(names, fns))]


def late_select(m, platform, name, sel, if1, if0):
    """``Mux(sel, if1, if0)`` bit by bit, each bit one ``LUT4`` of (``sel``, ``if1[i]``,
    ``if0[i]``) named ``{name}{i}``: for a late ``sel`` choosing between two values computed
    ahead, so that ``sel`` reaches the result through one LUT. Returns the value (``len(if1)`` bits)."""
    if1, if0 = Cat(if1), Cat(if0)
    if len(if1) != len(if0):
        raise ValueError(f"late_select: if1 has {len(if1)} bits, if0 {len(if0)}")
    return Cat(*(lut4(m, platform, f"{name}{i}", lambda v, a, b: a if v else b, [sel, if1[i], if0[i]])
                 for i in range(len(if1))))


def pairwise_eq(m, platform, name, x, y, lo=0, hi=None):
    """``x[lo:hi] == y[lo:hi]`` as ``LUT4``s, each comparing two bits of ``x`` with two of ``y``
    (``{name}_{i}``, and ``{name}_last`` for an odd bit out). Returns the list of terms: their AND
    is the equality (empty for an empty range), for the caller to combine with what else it ANDs."""
    hi = len(Cat(x)) if hi is None else hi
    terms = [lut4(m, platform, f"{name}_{i}", lambda a, b, c, d: a == b and c == d,
                  [x[i], y[i], x[i + 1], y[i + 1]]) for i in range(lo, hi - 1, 2)]
    if hi > lo and (hi - lo) % 2:
        terms.append(lut4(m, platform, f"{name}_last", lambda a, b: a == b, [x[hi - 1], y[hi - 1]]))
    return terms


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


# DP16KD aspect ratios: (data width, entries, lowest address pin); a wider port uses the upper
# address pins (ADx13..); at 18 bits ADA1/ADA0 are the write's byte enables, at 36 ADA3..ADA0 (the
# pseudo-dual-port mode of yosys' $__PDPW16KD_ map: {DIB, DIA} written, {DOB, DOA} read).
_DP16KD_MODES = ((36, 512, 5), (18, 1024, 4), (9, 2048, 3), (4, 4096, 2), (2, 8192, 1), (1, 16384, 0))


def outreg_ram(m, platform, name, *, width, depth, w_addr, w_data, w_en, r_addr, r_ce, r_oce):
    """A simple dual-port RAM (``depth`` entries of ``width`` bits) whose read goes through two
    registers, as an ECP5 block RAM with its output register on (``REGMODE = "OUTREG"``): at a clock
    edge with ``r_ce`` the read stage takes the entry at ``r_addr`` (writes of earlier edges, not of
    the same edge: what that reads is undefined), and at an edge with ``r_oce`` the output register
    takes the read stage's value. Returns the output register's value. The read stage's own
    clock-to-output (yosys' mapping, ``NOREG``) is 5.8 ns; the output register's was not measured
    (with it, a lone 1024 x 64 queue's critical path no longer starts at the RAM).

    On ECP5 (``platform.family == "ecp5"``): ``DP16KD`` instances side by side, 36 bits wide up to
    512 entries, else 18, 9, .. 1 bits, the widest whose depth holds ``depth``: as many as yosys' own
    mapping. At 36 bits both halves' output registers are on (``REGMODE_A`` too, as the vendor's
    ``PDPW16KD`` sets them), with ``OCEA`` = ``OCEB`` and ``CEA`` high (writes gated by ``WEA`` and
    the byte enables), so either port's enables may clock the read half on port A's pins. ``r_oce`` must only
    rise with ``r_ce`` (whether the output register follows ``OCE`` while ``CE`` is low is not relied
    on). Elsewhere an Amaranth ``Memory`` with a synchronous read port and a register, for simulation."""
    out = Signal(width, name=f"{name}_data")
    if getattr(platform, "family", None) != "ecp5":
        from amaranth.lib.memory import Memory
        m.submodules[name] = mem = Memory(shape=width, depth=depth, init=[])
        w_port = mem.write_port()
        r_port = mem.read_port(domain="sync")
        m.d.comb += [w_port.addr.eq(w_addr), w_port.data.eq(w_data), w_port.en.eq(w_en),
                     r_port.addr.eq(r_addr), r_port.en.eq(r_ce)]
        with m.If(r_oce):
            m.d.sync += out.eq(r_port.data)
        return out
    modes = [mode for mode in _DP16KD_MODES if mode[1] >= depth and (mode[0] < 36 or width > 18)]
    if not modes:
        raise ValueError(f"outreg_ram holds up to 16384 entries, not {depth}")
    bits, entries, low = modes[0]
    abits = (entries - 1).bit_length()

    def address(port, addr):
        pins = Cat(Const(0, low), Cat(addr, Const(0, abits))[:abits], Const(0, 14 - low - abits))
        if port == "A" and bits >= 18:
            enables = Cat(w_en, w_en, w_en, w_en)[:bits // 9]
            pins = Cat(enables, pins[len(enables):])
        return {f"i_AD{port}{k}": pins[k] for k in range(14)}

    wide = bits == 36
    for col in range(-(-width // bits)):
        lo = col * bits
        din = Cat(w_data[lo:lo + bits], Const(0, 36))[:36]
        dout = Signal(36, name=f"{name}_do{col}")
        m.d.comb += out[lo:lo + bits].eq(dout)
        m.submodules[f"{name}_{col}"] = Instance(
            "DP16KD",
            p_DATA_WIDTH_A=bits, p_DATA_WIDTH_B=bits, p_REGMODE_A="OUTREG" if wide else "NOREG",
            p_REGMODE_B="OUTREG",
            p_RESETMODE="SYNC", p_ASYNC_RESET_RELEASE="SYNC", p_CSDECODE_A="0b000",
            p_CSDECODE_B="0b000", p_WRITEMODE_A="NORMAL", p_WRITEMODE_B="NORMAL", p_GSR="AUTO",
            i_CLKA=ClockSignal(), i_CEA=Const(1, 1) if wide else w_en,
            i_OCEA=r_oce if wide else Const(0, 1), i_WEA=w_en, i_RSTA=Const(0, 1),
            i_CSA0=Const(0, 1), i_CSA1=Const(0, 1), i_CSA2=Const(0, 1),
            i_CLKB=ClockSignal(), i_CEB=r_ce, i_OCEB=r_oce, i_WEB=Const(0, 1), i_RSTB=Const(0, 1),
            i_CSB0=Const(0, 1), i_CSB1=Const(0, 1), i_CSB2=Const(0, 1),
            **address("A", w_addr), **address("B", r_addr),
            **{f"i_DIA{k}": din[k] for k in range(18)},
            **{f"i_DIB{k}": din[18 + k] if wide else Const(0, 1) for k in range(18)},
            **({f"o_DOA{k}": dout[k] for k in range(18)} if wide else {}),
            **{f"o_DOB{k}": dout[18 + k] if wide else dout[k] for k in range(18)},
        )
    return out


def round_robin(m, name, reqs, last, urgent=(), last_o=None):
    """Index of the first requester after ``last`` (cyclically), and whether there is any. With
    ``urgent`` (indices), an urgent requester wins over every other: round robin among the urgent
    ones after ``last`` (the last urgent grant), else among all after ``last_o`` (the last other
    grant), so that urgent grants in between do not reset the others' turn."""
    if urgent:
        pick_u, any_u = round_robin(m, f"{name}_u", [r if i in urgent else Const(0) for i, r in enumerate(reqs)], last)
        pick_a, any_a = round_robin(m, f"{name}_a", reqs, last_o)
        return Mux(any_u, pick_u, pick_a), any_a
    n = len(reqs)
    pick = Signal(range(max(n, 2)), name=f"{name}_pick")
    with m.Switch(last):
        for prev in range(n):
            with m.Case(prev):
                order = [(prev + 1 + k) % n for k in range(n)]
                with m.If(reqs[order[0]]):
                    m.d.comb += pick.eq(order[0])
                for i in order[1:]:
                    with m.Elif(reqs[i]):
                        m.d.comb += pick.eq(i)
    return pick, Cat(*reqs).any()
