"""Streaming CRC over a packet stream: one beat per clock, any width, any leading offset.

:class:`CrcStream` computes one :class:`~rnic.model.crc.CrcSpec` value per packet of a
:func:`~rnic.hdl.bus.PacketStream` (the ICRC and VCRC engine of the packet builder).
:class:`CrcStreamAxis` is the same block behind AXI4-Stream ports (the cocotb and synthesis boundary).

Technique (details in docs/crc.md). The CRC register update is linear over GF(2) in (register, data),
so every piece of hardware here is an XOR tree over a constant matrix derived in Python from the
spec's own bit-serial :meth:`~rnic.model.crc.CrcSpec.update`:

- Every beat is processed as a *full* word: lanes whose ``keep`` bit is clear are zeroed.
- A leading offset ``lo`` on the first beat is absorbed by starting from the register value
  ``s0(lo) = A^-lo (initial)`` (``A`` = advance over one zero byte, invertible because the
  polynomial has the ``x^0`` term), so the ``lo`` zero bytes bring the register back to ``initial``.
  ``A^N s0(lo)`` is a constant per lane, selected by the one-hot lowest ``keep`` bit: that is one
  more small XOR tree, outside the loop.
- ``z`` trailing zero lanes of the last beat are un-done *after* the loop, on the CRC-width
  result only: ``result = A^-z R``, one registered stage per bit of ``z`` (``z`` in ``0 .. N``),
  each applying ``A^-(2^k)`` or passing the value through. No per-byte-count copies of the wide
  data matrix exist.
- The loop-carried logic is only ``state' = A^N state ^ D`` with the register cleared (a
  synchronous reset) after each last beat; ``D``, the data matrix over 32-bit chunks plus the
  offset term, is summed in the stages before the loop.
- The loop register holds the state in a companion basis: ``y = K^-1 state`` with ``K`` the
  Krylov matrix of ``A^N`` (columns ``e0, A^N e0, A^2N e0, ..``), in which ``A^N`` is a companion
  matrix, so each loop bit is at most two register bits and its data bit (one LUT4). The data
  and offset matrices carry ``K^-1``; one registered stage after the loop applies ``K``.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.hdl import Assert
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from ..model.crc import CrcSpec
from .bus import AXIStreamSignature, PacketStream, axis_to_stream
from .fifo import check_credit
from .prim import xor_lut4

__all__ = ["CrcStream", "CrcStreamAxis", "xor_tree"]

# Data lanes per partial XOR sum (registered before the loop). 4 lanes = 32 bits: a ~16-input XOR
# per CRC bit, two LUT4 levels (synthesis shares terms between bits and makes eight lanes five
# levels deep, not three).
_CHUNK_LANES = 4
# Bits of the trailing-zero count handled per un-advance stage. 2 saves a cycle per two bits but
# makes each stage a 4:1 choice of XOR trees: 128 MHz instead of 142 MHz on ECP5 at width 512.
_DIGIT_BITS = 1


# --- GF(2) matrices as lists of columns: ``cols[j]`` is the image (an int) of unit vector ``1 << j``.

def _apply(cols, vector):
    result = 0
    j = 0
    while vector:
        if vector & 1:
            result ^= cols[j]
        vector >>= 1
        j += 1
    return result


def _compose(outer, inner):
    """The matrix of ``outer(inner(x))``."""
    return [_apply(outer, col) for col in inner]


def _power(cols, exponent):
    result = [1 << j for j in range(len(cols))]
    square = cols
    while exponent:
        if exponent & 1:
            result = _compose(square, result)
        square = _compose(square, square)
        exponent >>= 1
    return result


def _inverse(cols):
    """Inverse of a square matrix over GF(2) (Gauss-Jordan on rows); ``ValueError`` if singular."""
    n = len(cols)
    # Row i of the augmented matrix [M | I]: bits 0..n-1 hold M's row, bits n..2n-1 the identity's.
    rows = [sum(((cols[j] >> i) & 1) << j for j in range(n)) | (1 << (n + i)) for i in range(n)]
    for c in range(n):
        pivot = next((r for r in range(c, n) if rows[r] >> c & 1), None)
        if pivot is None:
            raise ValueError("matrix is singular")
        rows[c], rows[pivot] = rows[pivot], rows[c]
        for r in range(n):
            if r != c and rows[r] >> c & 1:
                rows[r] ^= rows[c]
    inverse_rows = [row >> n for row in rows]
    return [sum(((inverse_rows[i] >> j) & 1) << i for i in range(n)) for j in range(n)]


def xor_tree(cols, vector, out_width, m=None, platform=None, name=None):
    """Hardware for the GF(2) matrix ``cols`` (``cols[j]`` = image of bit ``j``) applied to ``vector``:
    one XOR reduction per output bit. Also used by the packet builder's VCRC-over-ICRC step.
    With ``m``, ``platform`` and ``name``, each reduction is a tree of LUT4s on ECP5
    (:func:`rnic.hdl.prim.xor_lut4`)."""
    bits = []
    for i in range(out_width):
        taps = [vector[j] for j, col in enumerate(cols) if col >> i & 1]
        if m is not None:
            bits.append(xor_lut4(m, platform, f"{name}_{i}", taps))
        else:
            bits.append(Cat(*taps).xor() if taps else Const(0, 1))
    return Cat(*bits)


def _xor_all(values):
    result = values[0]
    for value in values[1:]:
        result = result ^ value
    return result


class CrcStream(wiring.Component):
    """Streaming CRC of packets, one input beat per clock.

    Parameters
    ----------
    spec : :class:`~rnic.model.crc.CrcSpec`
        The CRC (e.g. :data:`~rnic.model.crc.ICRC`, :data:`~rnic.model.crc.VCRC`). ``spec.width``
        must be at least 8 and the polynomial must have its ``x^0`` term (all standard CRCs do).
    width : int
        Data width of the input stream in bits, a positive multiple of 8.

    Members
    -------
    i : ``In(PacketStream(width))``
        Packet bytes; transfer on ``valid & ready``. ``keep`` is a contiguous run of ones in every
        beat: on the first beat of a packet it may start at any lane (a leading offset) and runs to
        the top lane unless the beat is also last; middle beats are full; the last beat's run
        starts at lane 0 (unless it is also the first) and may end anywhere; a last beat with
        ``keep == 0`` is allowed (a single such beat is an empty packet), ``keep == 0`` on a beat
        that is not last is not. Null lanes may carry any data. ``ready`` is high
        whenever fewer than :attr:`fifo_depth` results are owed to ``o``; it depends on
        registers only (no combinational path from ``o.ready`` or ``i.valid``).
    o : ``Out(stream.Signature(spec.width))``
        One CRC value per packet, in packet order, equal to ``spec.compute(packet bytes)``.
        Transfer on ``valid & ready``; ``valid`` never waits for ``ready`` and the payload holds
        until the transfer.

    queue : bool
        With the default ``True``, results wait in an output queue for ``o.ready``. With ``False``
        there is no queue: ``o.valid`` is high for one clock per result and the consumer must take
        it then (``o.ready`` high; an ``Assert`` checks it in simulation), ``i.ready`` is always 1,
        and the latency is one clock shorter. For a consumer that is always ready (the packet
        builder), it saves the queue and its level logic.

    Attributes
    ----------
    latency : int
        Cycles from the transfer of a packet's last beat to ``o.valid`` for its result, when no
        earlier result is waiting in the output queue: 10 at width 64, 11 at 128, 12 at 256,
        13 at 512 (``5 + bit_length(width // 8) + (width > 32)``); one less without the queue.
    fifo_depth : int
        Results the block can hold; full throughput needs ``o`` to drain on average one result
        per packet. 0 without the queue.
    """

    def __init__(self, spec, width, *, queue=True):
        if not isinstance(spec, CrcSpec):
            raise TypeError(f"spec must be a CrcSpec, not {spec!r}")
        if spec.width < 8:
            raise ValueError(f"spec.width must be at least 8, not {spec.width!r}")
        if not spec.polynomial & 1:
            raise ValueError(f"spec.polynomial must have the x^0 term, not {spec.polynomial:#x}")
        if not isinstance(width, int) or width < 8 or width % 8:
            raise ValueError(f"width must be a positive multiple of 8, not {width!r}")
        self._spec = spec
        self._width = width
        self._lanes = lanes = width // 8
        self._z_bits = lanes.bit_length()  # trailing zero lanes z in 0 .. lanes
        self._digits = -(-self._z_bits // _DIGIT_BITS)
        self._chunks = -(-lanes // _CHUNK_LANES)
        # Input register, partial sums, (sum of the partials), loop/result register, basis change,
        # one register per digit stage, queue read one cycle after its write.
        self._queue = bool(queue)
        self._latency = 4 + self._digits + (self._chunks > 1) + self._queue
        depth = 1
        while depth < self._latency + 1:
            depth *= 2
        self._fifo_depth = depth if self._queue else 0
        self._derive_matrices()
        super().__init__({
            "i": In(PacketStream(width)),
            "o": Out(stream.Signature(spec.width)),
        })

    @property
    def spec(self):
        return self._spec

    @property
    def width(self):
        return self._width

    @property
    def latency(self):
        return self._latency

    @property
    def fifo_depth(self):
        return self._fifo_depth

    def _derive_matrices(self):
        spec, n, w = self._spec, self._lanes, self._spec.width
        # One zero byte: the register-only step, from the model's own bit-serial update.
        step = [spec.update(1 << j, b"\0") for j in range(w)]
        step_inv = _inverse(step)
        # Register over a full beat, and the companion basis of that advance.
        self._advance_beat = advance = _power(step, n)
        krylov, v = [], 1
        for _ in range(w):
            krylov.append(v)
            v = _apply(advance, v)
        krylov_inv = _inverse(krylov)    # e0 is a cyclic vector for ICRC and VCRC at every width
        self._basis = krylov
        self._advance_companion = _compose(krylov_inv, _compose(advance, krylov))
        # Data bit 8*l+b to register after the beat: byte (1 << b) then n-1-l zero bytes.
        data_cols = [0] * (8 * n)
        for b in range(8):
            col = spec.update(0, bytes([1 << b]))
            for lane in reversed(range(n)):
                data_cols[8 * lane + b] = col
                col = _apply(step, col)
        self._data_cols = [_apply(krylov_inv, col) for col in data_cols]
        # First beat starting at lane lo: A^n s0(lo) = A^(n-lo) initial, column lo of a
        # matrix applied to the one-hot lowest keep bit.
        self._offset_cols = [_apply(krylov_inv, _apply(_power(step, n - lo), spec.initial)) for lo in range(n)]
        # Trailing zero lanes: digit k of z (base 2**_DIGIT_BITS) with value d un-advances by
        # d * radix**k bytes.
        radix = 1 << _DIGIT_BITS
        self._digit_mats = []
        for k in range(self._digits):
            mats = {}
            for d in range(1, radix):
                count = d * radix ** k
                if count <= n:
                    mats[d] = _power(step_inv, count)
            self._digit_mats.append(mats)

    def _finish(self, value):
        spec = self._spec
        if spec.reflect_output:
            value = Cat(*(value[i] for i in reversed(range(spec.width))))
        return value ^ Const(spec.xor_output, spec.width)

    def elaborate(self, platform):
        m = Module()
        n, w = self._lanes, self._spec.width

        i_xfer = self.i.valid & self.i.ready
        if self._queue:
            m.submodules.queue = queue = SyncFIFO(width=w, depth=self._fifo_depth)
            # Credit: results owed to `o` (accepted last beats not yet transferred out). Never more
            # than the queue holds, so the pipeline after the input register never stalls.
            owed = Signal(range(self._fifo_depth + 1))
            o_xfer = self.o.valid & self.o.ready
            m.d.comb += self.i.ready.eq(owed != self._fifo_depth)
            with m.If(i_xfer & self.i.payload.last & ~o_xfer):
                m.d.sync += owed.eq(owed + 1)
            with m.Elif(~(i_xfer & self.i.payload.last) & o_xfer):
                m.d.sync += owed.eq(owed - 1)
        else:
            m.d.comb += self.i.ready.eq(1)

        first = Signal(init=1)
        with m.If(i_xfer):
            m.d.sync += first.eq(self.i.payload.last)

        # s1: input register, data lanes masked by keep; the offset selector and the trailing zero
        # count are found on the way in (from flip-flops in the packet builder), so that s2 only
        # sums XOR trees.
        keep = self.i.payload.keep
        empty = ~keep.any()
        lo_onehot = keep & ~(keep << 1)    # lowest set keep bit; lane 0 for keep == 0
        hi_onehot = keep & ~(keep >> 1)    # highest set keep bit
        s1_valid = Signal()
        s1_last = Signal()
        s1_data = Signal(self._width)
        s1_lo = Signal(n)      # offset selector; zero for a beat that is not first
        s1_z = Signal(self._z_bits)
        m.d.sync += [
            s1_valid.eq(i_xfer),
            s1_last.eq(self.i.payload.last),
            s1_data.eq(self.i.payload.data & Cat(*(keep[l].replicate(8) for l in range(n)))),
            s1_lo.eq(Cat(lo_onehot[0] | empty, lo_onehot[1:n]) & first.replicate(n)),
            s1_z.eq(Cat(*(Cat(*(hi_onehot[l] for l in range(n) if (n - 1 - l) >> b & 1),
                              empty if n >> b & 1 else Const(0, 1)).any()
                          for b in range(self._z_bits)))),
        ]

        # s2: partial sums of the data matrix per chunk, the offset term, trailing zero count.
        s2_valid = Signal()
        s2_last = Signal()
        s2_z = Signal(self._z_bits)
        partials = []
        for c, start in enumerate(range(0, n, _CHUNK_LANES)):
            stop = min(start + _CHUNK_LANES, n)
            p = Signal(w, name=f"s2_partial{c}")
            m.d.sync += p.eq(xor_tree(self._data_cols[8 * start:8 * stop],
                                       s1_data[8 * start:8 * stop], w))
            partials.append(p)
        p = Signal(w, name="s2_offset")
        m.d.sync += p.eq(xor_tree(self._offset_cols, s1_lo, w))
        partials.append(p)
        m.d.sync += [
            s2_valid.eq(s1_valid),
            s2_last.eq(s1_last),
            s2_z.eq(s1_z),
        ]

        # Wide words: sum the partials in one more stage, so the loop adds a single term.
        if len(partials) > 2:
            total = Signal(w, name="s3_sum")
            m.d.sync += total.eq(_xor_all(partials))
            loop_valid, loop_last = Signal(name="s3_valid"), Signal(name="s3_last")
            loop_z = Signal.like(s2_z, name="s3_z")
            m.d.sync += [loop_valid.eq(s2_valid), loop_last.eq(s2_last), loop_z.eq(s2_z)]
            partials = [total]
        else:
            loop_valid, loop_last, loop_z = s2_valid, s2_last, s2_z

        # The loop. A first beat's start is in s2_offset; it sees a zero register because the
        # register is cleared after every last beat (a synchronous reset, outside the XOR tree).
        state = Signal(w)
        state_next = Signal(w)
        m.d.comb += state_next.eq(_xor_all([xor_tree(self._advance_companion, state, w), *partials]))
        with m.If(loop_valid):
            m.d.sync += state.eq(Mux(loop_last, 0, state_next))

        # Tail: registered result of each last beat, back from the companion basis, then one
        # un-advance stage per digit of z.
        y_valid = Signal(name="ty_valid")
        y_value = Signal(w, name="ty_value")
        y_z = Signal(self._z_bits, name="ty_z")
        m.d.sync += [
            y_valid.eq(loop_valid & loop_last),
            y_value.eq(state_next),
            y_z.eq(loop_z),
        ]
        t_valid = Signal(name="t0_valid")
        t_value = Signal(w, name="t0_value")
        t_z = Signal(self._z_bits, name="t0_z")
        m.d.sync += [
            t_valid.eq(y_valid),
            t_value.eq(xor_tree(self._basis, y_value, w)),
            t_z.eq(y_z),
        ]
        for k, mats in enumerate(self._digit_mats):
            digit = t_z[_DIGIT_BITS * k:_DIGIT_BITS * (k + 1)]
            value = Signal(w, name=f"t{k + 1}_next")
            trees = {d: xor_tree(mat, t_value, w) for d, mat in mats.items()}
            with m.Switch(digit):
                for d in mats:
                    with m.Case(d):
                        m.d.comb += value.eq(trees[d])
                with m.Default():
                    m.d.comb += value.eq(t_value)
            nxt_valid = Signal(name=f"t{k + 1}_valid")
            nxt_value = Signal(w, name=f"t{k + 1}_value")
            nxt_z = Signal(self._z_bits, name=f"t{k + 1}_z")
            if k == self._digits - 1:
                value = self._finish(value)  # the queue is written straight from flip-flops
            m.d.sync += [nxt_valid.eq(t_valid), nxt_value.eq(value), nxt_z.eq(t_z)]
            t_valid, t_value, t_z = nxt_valid, nxt_value, nxt_z

        if self._queue:
            m.d.comb += [
                queue.w_en.eq(t_valid),
                queue.w_data.eq(t_value),
                self.o.valid.eq(queue.r_rdy),
                self.o.payload.eq(queue.r_data),
                queue.r_en.eq(self.o.ready),
            ]
            check_credit(m, queue, "CRC: results (owed)")
        else:
            m.d.comb += [self.o.valid.eq(t_valid), self.o.payload.eq(t_value)]
            m.d.sync += Assert(~self.o.valid | self.o.ready, "CRC (no queue): a result not taken\n")
        return m


class CrcStreamAxis(wiring.Component):
    """:class:`CrcStream` behind AXI4-Stream ports (the cocotb and synthesis boundary).

    Parameters
    ----------
    spec : :class:`~rnic.model.crc.CrcSpec`
        The CRC.
    width : int
        Input data width in bits, a positive multiple of 8.

    Members
    -------
    s_axis : ``In(AXIStreamSignature(width))``
        Packet bytes, ``tkeep`` as :class:`CrcStream`'s ``keep``; ``tuser`` is ignored.
    m_axis : ``Out(AXIStreamSignature(spec.width rounded up to 8))``
        One single-beat frame per packet: the CRC value in ``tdata`` (least-significant byte in
        lane 0), ``tkeep`` all ones, ``tlast`` high, ``tuser`` zero. Both sides follow the AXI4-Stream
        handshake (transfer on ``tvalid & tready``, ``tvalid`` never waits for ``tready``).
    """

    def __init__(self, spec, width, *, queue=True):
        self._crc = CrcStream(spec, width, queue=queue)  # validates the parameters
        self._out_width = -(-spec.width // 8) * 8
        super().__init__({
            "s_axis": In(AXIStreamSignature(width)),
            "m_axis": Out(AXIStreamSignature(self._out_width)),
        })

    @property
    def latency(self):
        return self._crc.latency

    def elaborate(self, platform):
        m = Module()
        m.submodules.crc = crc = self._crc
        axis_to_stream(m, self.s_axis, crc.i)
        m.d.comb += [
            self.m_axis.tdata.eq(crc.o.payload),
            self.m_axis.tkeep.eq(Const(-1, self._out_width // 8)),
            self.m_axis.tlast.eq(1),
            self.m_axis.tvalid.eq(crc.o.valid),
            crc.o.ready.eq(self.m_axis.tready),
        ]
        return m
