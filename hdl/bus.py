"""Bus signatures at the edges of the engine, and the packet stream used inside it.

Edge buses use the AXI member names (``awaddr``, ``tdata``, ...) so a port named ``m_axi`` comes out
of Amaranth as ``m_axi__awaddr`` and cocotbext-axi finds it with ``bus_separator="__"``.
Signatures are written from the initiator's side: a master holds ``Out(AXI4Signature(...))``,
a slave ``In(...)``.

Byte order: lane ``i`` of a data word (bits ``8*i+7 .. 8*i``) carries the ``i``-th byte in time
(the AXI4-Stream convention). ``keep``/``tkeep``/``wstrb`` bit ``i`` qualifies lane ``i``.
"""

from amaranth import Array, Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .prim import round_robin

__all__ = ["AXI4Signature", "AXI4LiteSignature", "AXIStreamSignature",
           "packet_layout", "PacketStream", "stream_to_axis", "axis_to_stream", "skid_stage", "skid_arbiter"]


def _check_width(name, value, allowed):
    if value not in allowed:
        raise ValueError(f"{name} must be one of {sorted(allowed)}, not {value!r}")


class AXI4Signature(wiring.Signature):
    """AXI4 full, initiator side. INCR bursts; ``id_width`` may be 1 for a single-ID master."""

    def __init__(self, *, addr_width=64, data_width=64, id_width=4):
        _check_width("data_width", data_width, {32, 64, 128, 256, 512})
        if not 12 <= addr_width <= 64:
            raise ValueError(f"addr_width must be 12..64, not {addr_width!r}")
        if id_width < 1:
            raise ValueError(f"id_width must be at least 1, not {id_width!r}")
        self.addr_width, self.data_width, self.id_width = addr_width, data_width, id_width
        members = {}
        for ch in ("aw", "ar"):
            members.update({
                f"{ch}id": Out(id_width), f"{ch}addr": Out(addr_width), f"{ch}len": Out(8),
                f"{ch}size": Out(3), f"{ch}burst": Out(2, init=1), f"{ch}lock": Out(1),
                f"{ch}cache": Out(4), f"{ch}prot": Out(3), f"{ch}valid": Out(1), f"{ch}ready": In(1),
            })
        members.update({
            "wdata": Out(data_width), "wstrb": Out(data_width // 8), "wlast": Out(1),
            "wvalid": Out(1), "wready": In(1),
            "bid": In(id_width), "bresp": In(2), "bvalid": In(1), "bready": Out(1),
            "rid": In(id_width), "rdata": In(data_width), "rresp": In(2), "rlast": In(1),
            "rvalid": In(1), "rready": Out(1),
        })
        super().__init__(members)

    def __eq__(self, other):
        return (type(other) is AXI4Signature and
                (self.addr_width, self.data_width, self.id_width) ==
                (other.addr_width, other.data_width, other.id_width))

    def __repr__(self):
        return f"AXI4Signature(addr_width={self.addr_width}, data_width={self.data_width}, id_width={self.id_width})"


class AXI4LiteSignature(wiring.Signature):
    """AXI4-Lite, initiator side."""

    def __init__(self, *, addr_width=16, data_width=32):
        _check_width("data_width", data_width, {32, 64})
        self.addr_width, self.data_width = addr_width, data_width
        super().__init__({
            "awaddr": Out(addr_width), "awprot": Out(3), "awvalid": Out(1), "awready": In(1),
            "wdata": Out(data_width), "wstrb": Out(data_width // 8), "wvalid": Out(1), "wready": In(1),
            "bresp": In(2), "bvalid": In(1), "bready": Out(1),
            "araddr": Out(addr_width), "arprot": Out(3), "arvalid": Out(1), "arready": In(1),
            "rdata": In(data_width), "rresp": In(2), "rvalid": In(1), "rready": Out(1),
        })

    def __eq__(self, other):
        return (type(other) is AXI4LiteSignature and
                (self.addr_width, self.data_width) == (other.addr_width, other.data_width))

    def __repr__(self):
        return f"AXI4LiteSignature(addr_width={self.addr_width}, data_width={self.data_width})"


class AXIStreamSignature(wiring.Signature):
    """AXI4-Stream, source side: ``tdata``, ``tkeep``, ``tlast``, ``tuser``, ``tvalid``/``tready``.

    A transfer happens when ``tvalid & tready``; once ``tvalid`` rises, neither it nor the payload
    changes until the transfer.
    """

    def __init__(self, data_width, user_width=1):
        if data_width < 8 or data_width % 8:
            raise ValueError(f"data_width must be a positive multiple of 8, not {data_width!r}")
        self.data_width, self.user_width = data_width, user_width
        super().__init__({
            "tdata": Out(data_width), "tkeep": Out(data_width // 8), "tlast": Out(1),
            "tuser": Out(user_width), "tvalid": Out(1), "tready": In(1),
        })

    def __eq__(self, other):
        return (type(other) is AXIStreamSignature and
                (self.data_width, self.user_width) == (other.data_width, other.user_width))

    def __repr__(self):
        return f"AXIStreamSignature({self.data_width}, user_width={self.user_width})"


def packet_layout(width, user_width=0):
    """One beat of a packet: ``data``, ``keep`` (a byte-lane mask), ``last``, optional ``user``."""
    if width < 8 or width % 8:
        raise ValueError(f"width must be a positive multiple of 8, not {width!r}")
    fields = {"data": width, "keep": width // 8, "last": 1}
    if user_width:
        fields["user"] = user_width
    return data.StructLayout(fields)


def PacketStream(width, user_width=0):
    """``lib.stream`` signature of a packet stream with :func:`packet_layout` beats."""
    return stream.Signature(packet_layout(width, user_width))


def stream_to_axis(m: Module, src, axis):
    """Drive AXI4-Stream ``axis`` (source side) from packet stream ``src`` (combinational)."""
    m.d.comb += [
        axis.tdata.eq(src.payload.data), axis.tkeep.eq(src.payload.keep),
        axis.tlast.eq(src.payload.last), axis.tvalid.eq(src.valid), src.ready.eq(axis.tready),
    ]
    if hasattr(src.payload, "user"):
        m.d.comb += axis.tuser.eq(src.payload.user)


def axis_to_stream(m: Module, axis, dst):
    """Drive packet stream ``dst`` from an incoming AXI4-Stream ``axis`` (combinational)."""
    m.d.comb += [
        dst.payload.data.eq(axis.tdata), dst.payload.keep.eq(axis.tkeep),
        dst.payload.last.eq(axis.tlast), dst.valid.eq(axis.tvalid), axis.tready.eq(dst.ready),
    ]
    if hasattr(dst.payload, "user"):
        m.d.comb += dst.payload.user.eq(axis.tuser)


def skid_stage(m: Module, valid, ready, payload, out_ready, name):
    """A two-entry skid buffer: takes ``payload`` on ``valid`` & ``ready`` and returns ``(out_valid,
    out_payload)``, held until ``out_ready``. ``ready``, ``out_valid`` and ``out_payload`` are
    flip-flops, so no combinational path crosses it either way (a transfer per clock, one clock of
    latency); the second entry takes what came while the output stalled. ``payload`` may carry
    fields derived from the input, so that the side after it reads them ready-made."""
    full = Signal(name=f"{name}_full")
    out = Signal(payload.shape(), name=f"{name}_data", reset_less=True)
    skid = Signal(name=f"{name}_skid")
    skid_data = Signal(payload.shape(), name=f"{name}_skid_data", reset_less=True)
    m.d.comb += ready.eq(~skid)
    with m.If(~full | out_ready):
        with m.If(skid):
            m.d.sync += [out.eq(skid_data), skid.eq(0)]
        with m.Else():
            m.d.sync += [full.eq(valid), out.eq(payload)]
    with m.Elif(valid & ~skid):
        m.d.sync += skid.eq(1)
    # the second entry follows the input while it is free (what it holds then is unused), so its
    # enable does not wait for out_ready
    with m.If(~skid):
        m.d.sync += skid_data.eq(payload)
    return full, out


def skid_arbiter(m: Module, inputs, out_ready, name):
    """:func:`skid_stage` for several sources: ``inputs`` is a list of ``(valid, ready, payload)`` (one
    payload shape), and the result ``(out_valid, out_payload, out_index)`` the source each output came
    from. Each source has its own skid entry, so its ``ready`` is a flip-flop; the output register
    takes a held entry or a source's payload, round robin from the one after the last taken (a source
    waits at most ``len(inputs) - 1`` transfers while the output moves)."""
    n = len(inputs)
    shape = inputs[0][2].shape()
    full = Signal(name=f"{name}_full")
    out = Signal(shape, name=f"{name}_data", reset_less=True)
    out_index = Signal(range(n), name=f"{name}_index")
    last = Signal(range(n), name=f"{name}_last")
    held = [Signal(name=f"{name}_held{i}") for i in range(n)]
    held_data = [Signal(shape, name=f"{name}_held{i}_data", reset_less=True) for i in range(n)]
    cand = Cat(*(h | v for h, (v, _, _) in zip(held, inputs)))
    sel, _ = round_robin(m, f"{name}_sel", list(cand), last)
    load = ~full | out_ready
    for i, (h, hd, (valid, ready, payload)) in enumerate(zip(held, held_data, inputs)):
        m.d.comb += ready.eq(~h)
        taken = load & (sel == i) & cand.any()
        with m.If(taken):
            m.d.sync += h.eq(0)
        with m.Elif(valid & ~h):
            m.d.sync += h.eq(1)
        with m.If(~h):
            m.d.sync += hd.eq(payload)
    with m.If(load):
        m.d.sync += [full.eq(cand.any()), out_index.eq(sel),
                     out.eq(Array(Mux(h, hd, p) for h, hd, (_, _, p) in zip(held, held_data, inputs))[sel])]
        with m.If(cand.any()):
            m.d.sync += last.eq(sel)
    return full, out, out_index
