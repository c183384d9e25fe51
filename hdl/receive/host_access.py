"""Small host-memory reads and writes for the receive path's responder. See :class:`HostAccess`."""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.hdl import Assert
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ..bus import AXI4Signature

__all__ = ["HostAccess", "host_cmd_layout", "host_resp_layout"]

WINDOW = 64

#: One access: ``nbytes`` (1..64) bytes at ``addr``; for a write, byte ``i`` of ``wdata`` goes to
#: ``addr + i``.
host_cmd_layout = data.StructLayout({"write": 1, "addr": 64, "nbytes": 7, "wdata": 512})

#: One result: for a read, byte ``i`` of ``rdata`` is the byte at ``addr + i`` (bytes from ``nbytes`` on
#: are 0; all of ``rdata`` is 0 for a write); ``err`` if any response was SLVERR or DECERR.
host_resp_layout = data.StructLayout({"rdata": 512, "err": 1})


class HostAccess(wiring.Component):
    """Reads or writes up to 64 bytes of host memory over AXI4, one access at a time.

    The caller's rule: ``[addr, addr + nbytes)`` lies within one 64-byte aligned block and ``nbytes`` is
    1..64 (an ``Assert`` checks it in simulation). A read is one INCR burst of full-width beats
    (``arsize`` = log2(width / 8)) over the aligned beats that hold the range; a write is one INCR
    burst over the same beats with ``wstrb`` set on the range's bytes only. The write's address goes
    out before its data.

    Members
    -------
    cmd : ``In(stream.Signature(host_cmd_layout))``
        ``ready`` only while idle: a command is taken after the previous ``resp`` is.
    resp : ``Out(stream.Signature(host_resp_layout))``
        One per command, in order; held until taken.
    m_axi : ``Out(AXI4Signature(data_width=width))``
        ID ``id`` on AR and AW; the channels of the other direction stay idle (``bready`` and
        ``rready`` only while a response is awaited).
    """

    def __init__(self, width: int = 64, id: int = 0):
        if width not in (64, 128, 256, 512):
            raise ValueError(f"width must be one of 64, 128, 256, 512, not {width!r}")
        bus = AXI4Signature(data_width=width)
        if not 0 <= id < 1 << bus.id_width:
            raise ValueError(f"id must fit {bus.id_width} bits, not {id!r}")
        self.width, self.id = width, id
        super().__init__({
            "cmd": In(stream.Signature(host_cmd_layout)),
            "resp": Out(stream.Signature(host_resp_layout)),
            "m_axi": Out(bus),
        })

    def elaborate(self, platform):
        m = Module()
        W, B = self.width, self.width // 8
        lb = exact_log2(B)
        axi = self.m_axi

        c = Signal(host_cmd_layout, reset_less=True)
        alen = Signal(range(WINDOW // B))           # beats - 1
        beat = Signal(range(WINDOW // B + 1))
        acc = Signal(8 * WINDOW, reset_less=True)   # read beats, the first at lane 0
        wbuf = Signal(8 * WINDOW, reset_less=True)  # write data from the first beat's lane 0, a beat shifted out per beat
        strb = Signal(WINDOW, reset_less=True)
        rdata = Signal(8 * WINDOW, reset_less=True)
        err = Signal()

        off = c.addr[:lb]
        in_range = Cat(Const(i, 7) < c.nbytes for i in range(WINDOW))
        m.d.comb += [
            axi.arid.eq(self.id), axi.araddr.eq(Cat(Const(0, lb), c.addr[lb:])), axi.arlen.eq(alen),
            axi.arsize.eq(lb), axi.arburst.eq(1),
            axi.awid.eq(self.id), axi.awaddr.eq(Cat(Const(0, lb), c.addr[lb:])), axi.awlen.eq(alen),
            axi.awsize.eq(lb), axi.awburst.eq(1),
            axi.wdata.eq(wbuf[:W]), axi.wstrb.eq(strb[:B]), axi.wlast.eq(beat == alen),
            self.resp.payload.rdata.eq(rdata), self.resp.payload.err.eq(err),
        ]

        with m.FSM():
            with m.State("Idle"):
                p = self.cmd.payload
                m.d.comb += self.cmd.ready.eq(1)
                with m.If(self.cmd.valid):
                    m.d.sync += Assert((p.nbytes >= 1) & (p.nbytes <= WINDOW) &
                                       (p.addr[:6] + p.nbytes <= WINDOW),
                                       "host_access: the range leaves its 64-byte block\n")
                    m.d.sync += [c.eq(p), alen.eq((p.addr[:lb] + p.nbytes - 1) >> lb),
                                 beat.eq(0), err.eq(0), rdata.eq(0)]
                    with m.If(p.write):
                        m.next = "Write-AW"
                    with m.Else():
                        m.next = "Read-AR"
            with m.State("Read-AR"):
                m.d.comb += axi.arvalid.eq(1)
                with m.If(axi.arready):
                    m.next = "Read-R"
            with m.State("Read-R"):
                m.d.comb += axi.rready.eq(1)
                with m.If(axi.rvalid):
                    for j in range(WINDOW // B):
                        with m.If(beat == j):
                            m.d.sync += acc[j * W:(j + 1) * W].eq(axi.rdata)
                    m.d.sync += [beat.eq(beat + 1), err.eq(err | axi.rresp[1])]
                    with m.If(axi.rlast):
                        m.next = "Read-Align"
            with m.State("Read-Align"):
                shifted = Signal(8 * WINDOW)
                m.d.comb += shifted.eq(acc >> (off * 8))
                for i in range(WINDOW):
                    m.d.sync += rdata[8 * i:8 * i + 8].eq(Mux(in_range[i], shifted[8 * i:8 * i + 8], 0))
                m.next = "Done"
            with m.State("Write-AW"):
                m.d.comb += axi.awvalid.eq(1)
                m.d.sync += [wbuf.eq(c.wdata << (off * 8)), strb.eq(in_range << off)]
                with m.If(axi.awready):
                    m.next = "Write-W"
            with m.State("Write-W"):
                m.d.comb += axi.wvalid.eq(1)
                with m.If(axi.wready):
                    m.d.sync += [wbuf.eq(wbuf >> W), strb.eq(strb >> B), beat.eq(beat + 1)]
                    with m.If(beat == alen):
                        m.next = "Write-B"
            with m.State("Write-B"):
                m.d.comb += axi.bready.eq(1)
                with m.If(axi.bvalid):
                    m.d.sync += err.eq(axi.bresp[1])
                    m.next = "Done"
            with m.State("Done"):
                m.d.comb += self.resp.valid.eq(1)
                with m.If(self.resp.ready):
                    m.next = "Idle"
        return m
