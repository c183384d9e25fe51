"""Response packets into the transmit path, between the engine's request packets."""

from amaranth import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..descriptor import DescriptorLayout
from ..engine.layouts import group_layout, rd_cmd_layout
from .responder import resp_layout

__all__ = ["TxMerge"]


class TxMerge(wiring.Component):
    """Merges the responder's packets (ACK / NAK, READ responses, atomic ACKs) with the engine's, a whole
    packet at a time, on the three streams each packet has: the builder's descriptor, the payload
    reader's command and the frame gate's group entry.

    A packet is chosen when the previous one has gone on all three streams. When both wait, a response
    goes first unless the packet before was a response too: responses and requests alternate under load,
    so responses never wait behind more than one request and requests are never starved. A response's
    payload command reads ``desc.payload_len`` bytes from ``addr`` (READ responses; 0 bytes otherwise);
    its group entry has ``resp`` = 1.

    Members
    -------
    req_desc, req_rd_cmd, req_group : In(stream)
        The engine's (each transfers on its own, as the engine's Issue state offers them).
    resp : In(stream of :data:`rnic.hdl.receive.responder.resp_layout`)
        The responder's; ``ready`` when its packet has gone on all three outputs.
    desc, rd_cmd, group : Out(stream)
        To the descriptor queues, the payload reader and the frame gate.
    """

    def __init__(self):
        super().__init__({
            "req_desc": In(stream.Signature(DescriptorLayout)),
            "req_rd_cmd": In(stream.Signature(rd_cmd_layout)),
            "req_group": In(stream.Signature(group_layout)),
            "resp": In(stream.Signature(resp_layout)),
            "desc": Out(stream.Signature(DescriptorLayout)),
            "rd_cmd": Out(stream.Signature(rd_cmd_layout)),
            "group": Out(stream.Signature(group_layout)),
        })

    def elaborate(self, platform):
        m = Module()
        busy = Signal()             # a packet is partly through
        cur_resp = Signal()         # ... and it is a response
        last_resp = Signal()        # the packet before was a response
        sent = Signal(3)            # desc, rd_cmd, group of the current packet gone
        req = (self.req_desc, self.req_rd_cmd, self.req_group)
        req_waits = self.req_desc.valid | self.req_rd_cmd.valid | self.req_group.valid
        pick_resp = self.resp.valid & (~last_resp | ~req_waits)
        is_resp = Mux(busy, cur_resp, pick_resp)
        active = busy | self.resp.valid | req_waits
        r = self.resp.payload
        outs = (self.desc, self.rd_cmd, self.group)
        m.d.comb += [
            self.desc.payload.eq(Mux(is_resp, r.desc, self.req_desc.payload)),
            self.rd_cmd.payload.eq(Mux(is_resp, rd_cmd_layout.const({}).as_value(), self.req_rd_cmd.payload)),
            self.group.payload.eq(Mux(is_resp, 0, self.req_group.payload)),
        ]
        with m.If(is_resp):
            m.d.comb += [self.rd_cmd.payload.addr.eq(r.addr), self.rd_cmd.payload.len.eq(r.desc.payload_len),
                         self.group.payload.resp.eq(1)]
        gone = Signal(3)
        for i, (o, q) in enumerate(zip(outs, req)):
            valid = ~sent[i] & active & Mux(is_resp, self.resp.valid, q.valid)
            m.d.comb += [o.valid.eq(valid), q.ready.eq(~is_resp & ~sent[i] & o.ready & active),
                         gone[i].eq(sent[i] | (valid & o.ready))]
        done = gone.all()
        m.d.comb += self.resp.ready.eq(is_resp & done & self.resp.valid)
        with m.If(done):
            m.d.sync += [busy.eq(0), sent.eq(0), last_resp.eq(is_resp)]
        with m.Elif(gone.any()):
            m.d.sync += [busy.eq(1), cur_resp.eq(is_resp), sent.eq(gone)]
        return m
