"""The receive path's CRC stage: every frame's ICRC and VCRC computed as the frame streams in, and one
record per frame of what the decoder needs. See :class:`CrcCheck`."""

from __future__ import annotations

import operator
from functools import reduce

from amaranth import Array, Cat, Const, Module, Mux, Signal, Value, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from ...model import headers as hd
from ...model.crc import ICRC, VCRC
from ..bus import PacketStream
from ..crc import CrcStream
from .layouts import HEAD_BYTES, HEADER_BYTES, LAYOUTS, LEN_BITS, MASK_BYTES, be_field, byte_of

__all__ = ["CrcCheck", "record_layout", "frame_layout_of"]


def record_layout():
    """One frame, as the decoder sees it: its first :data:`HEADER_BYTES` bytes (zero past its end), length,
    the MAC's bad-FCS flag, its layout, where the ICRC and VCRC sit (``icrc_at``, ``vcrc_at``) and the
    bytes found there, the 4 bytes before the ICRC (the pad), and the two CRCs computed over the frame."""
    return data.StructLayout({
        "hdr": 8 * HEADER_BYTES, "length": LEN_BITS, "fcs_bad": 1, "layout": 3,
        "icrc_at": LEN_BITS, "vcrc_at": LEN_BITS, "icrc_wire": 32, "vcrc_wire": 16, "prepad": 32,
        "icrc": 32, "vcrc": 16,
    })


def frame_layout_of(m: Module, head: Signal, ib: Value) -> tuple[Signal, Signal, Signal]:
    """From a frame's first :data:`HEAD_BYTES` bytes: its layout index (meaningful when the frame is one of
    the eight forms) and where its ICRC and VCRC start, from the length fields (``icrc_at``, ``vcrc_at``;
    anything when the frame is malformed: the decoder then drops it for an earlier reason)."""
    layout, icrc_at, vcrc_at = Signal(3), Signal(LEN_BITS), Signal(LEN_BITS)
    ethertype = Cat(byte_of(head, 13), byte_of(head, 12))
    tagged = ethertype == hd.ETHERTYPE_VLAN
    inner = Mux(tagged, Cat(byte_of(head, 17), byte_of(head, 16)), ethertype)
    mode = Signal(2)
    with m.Switch(inner):
        with m.Case(hd.ETHERTYPE_IPV6):
            m.d.comb += mode.eq(1)
        with m.Case(hd.ETHERTYPE_ROCEV1):
            m.d.comb += mode.eq(2)
    lnh = be_field(head, 0, hd.LRH, "lnh")
    pkt_len = be_field(head, 0, hd.LRH, "pkt_len")
    with m.If(ib):
        m.d.comb += [layout.eq(Mux(lnh == hd.LNH_IBA_GLOBAL, 7, 6)),
                     icrc_at.eq((pkt_len << 2) - 4), vcrc_at.eq(pkt_len << 2)]
    with m.Else():
        m.d.comb += layout.eq(Cat(tagged, mode))
        # the four candidates summed side by side and picked by an AND-OR (a multiplexer would let
        # yosys share one adder behind it, after the layout decode: the front end's critical path)
        eth_icrc = []
        for vlan in (0, 1):
            l2 = 14 + 4 * vlan
            total = be_field(head, l2, hd.IPv4, "total_length")
            payload = be_field(head, l2, hd.IPv6, "payload_length")      # the GRH's PayLen sits there too
            for v4, value in ((1, l2 - 4 + total), (0, l2 - 4 + 40 + payload)):
                cand = Signal(LEN_BITS, name=f"icrc_at_{'v4' if v4 else 'v6'}_vlan{vlan}")
                m.d.comb += cand.eq(value)
                eth_icrc.append(cand & ((tagged == vlan) & ((mode == 0) == v4)).replicate(LEN_BITS))
        m.d.comb += [icrc_at.eq(reduce(operator.or_, eth_icrc)), vcrc_at.eq(icrc_at)]
    return layout, icrc_at, vcrc_at


class CrcCheck(wiring.Component):
    """Computes each frame's ICRC (over the bytes and masks :func:`~rnic.model.frames.icrc_view` defines)
    and VCRC while the frame streams through, and emits one :func:`record_layout` record per frame.

    A beat waits in a short queue until its frame's first :data:`HEAD_BYTES` bytes are in (or the frame has
    ended): they name the layout and, through the length fields, where the ICRC and VCRC start. Then it
    feeds the two :class:`~rnic.hdl.crc.CrcStream` engines (each frame is exactly one CRC packet: the
    covered bytes, or an empty packet when a malformed frame covers none) and the record's captures.

    Members
    -------
    i : ``In(PacketStream(width, user_width=1))``
        Frames; ``user`` on the last beat is the MAC's bad-FCS flag. ``keep`` runs from lane 0 on every
        beat and is full on all but the last. ``ready`` may drop while the queue or the CRC engines are
        full.
    ib : ``In(1)``
        The port is InfiniBand (LRH frames), not Ethernet. Change it only while no frame is in flight.
    o : ``Out(stream.Signature(record_layout()))``
        One record per frame, in order.
    """

    def __init__(self, width: int = 64, pending: int = 8):
        self.width, self.pending = width, pending
        self.lanes = width // 8
        self.k = -(-HEAD_BYTES // self.lanes)          # beats that hold the head bytes
        super().__init__({"i": In(PacketStream(width, user_width=1)), "ib": In(1),
                          "o": Out(stream.Signature(record_layout()))})

    def elaborate(self, platform):
        m = Module()
        B, W, K = self.lanes, self.width, self.k
        # A beat can leave at the earliest K + 1 clocks after its frame's first beat came in, so K + 1 beats
        # wait at most while frames stream in; one more slot lets ``i.ready`` be ``~full`` alone (the
        # outgoing side's pop in it was the front end's critical path, into every slot's write)
        Q = K + 2

        # --- input side: the head bytes of the frame coming in, the queue --------------------------
        # A frame's layout and CRC positions come from its head bytes one clock after the beat that
        # completes them (its K-th, or its last): `pending` then writes them into the frame's waiting
        # beats (those with its tag) and into `cur`, which later beats of the frame take as they come.
        head = Signal(8 * HEAD_BYTES)
        jh = Signal(range(K + 1))       # head beats seen of the frame coming in (saturates at K)
        j_in = Signal(LEN_BITS)         # beat number in the frame (saturates)
        tag = Signal()                  # toggles with every frame
        head_next = Signal(8 * HEAD_BYTES)
        m.d.comb += head_next.eq(head)
        for j in range(K):
            lo = j * B
            with m.If(jh == j):
                n = min(B, HEAD_BYTES - lo)
                m.d.comb += head_next[8 * lo:8 * (lo + n)].eq(self.i.payload.data[:8 * n])
        head_done = Signal(8 * HEAD_BYTES)
        pending, pending_tag, pending_open = Signal(), Signal(), Signal()
        layout_in, icrc_in, vcrc_in = frame_layout_of(m, head_done, self.ib)
        cur = Signal(data.StructLayout({"valid": 1, "layout": 3, "icrc_at": LEN_BITS, "vcrc_at": LEN_BITS}))

        slot = data.StructLayout({"data": W, "keep": B, "last": 1, "user": 1, "j": LEN_BITS, "ok": 1, "tag": 1,
                                  "layout": 3, "icrc_at": LEN_BITS, "vcrc_at": LEN_BITS})
        slots = Array(Signal(slot, name=f"slot{s}") for s in range(Q))
        busy = Signal(Q)
        wp, rp = Signal(range(Q)), Signal(range(Q))
        full = busy.all()
        head_slot = slots[rp]
        head_ready = busy.bit_select(rp, 1) & head_slot.ok

        m.submodules.icrc = icrc = CrcStream(ICRC, W)
        m.submodules.vcrc = vcrc = CrcStream(VCRC, W)
        m.submodules.records = records = SyncFIFOBuffered(width=record_layout().size, depth=self.pending)
        # the beat going out waits in a register `h` (the queue's read multiplexer and the capture
        # arithmetic behind it in one clock were the front end's critical path); `go` consumes it
        h, h_valid = Signal(slot, name="head"), Signal()
        pop, go = Signal(), Signal()
        m.d.comb += [go.eq(h_valid & icrc.i.ready & vcrc.i.ready & records.w_rdy),
                     pop.eq(head_ready & (~h_valid | go))]
        # with it, the beat numbers next to its own, for the captures below (no carry chain behind `h`)
        lb = max(1, (B - 1).bit_length())
        hi_bits = LEN_BITS - lb
        j_fits, j_minus, j_plus = Signal(), Signal(hi_bits), Signal(hi_bits + 1)
        with m.If(pop):
            m.d.sync += [h.eq(head_slot), h_valid.eq(1), j_fits.eq(head_slot.j[hi_bits:] == 0),
                         j_minus.eq(head_slot.j[:hi_bits] - 1), j_plus.eq(head_slot.j[:hi_bits] + 1)]
        with m.Elif(go):
            m.d.sync += h_valid.eq(0)

        push = self.i.valid & self.i.ready
        m.d.comb += self.i.ready.eq(~full)
        last_in = self.i.payload.last
        completes = ((jh == K - 1) | last_in) & (jh != K)
        m.d.sync += pending.eq(push & completes)
        with m.If(push):
            m.d.sync += [
                slots[wp].data.eq(self.i.payload.data), slots[wp].keep.eq(self.i.payload.keep),
                slots[wp].last.eq(last_in), slots[wp].user.eq(self.i.payload.user),
                slots[wp].j.eq(j_in), slots[wp].tag.eq(tag),
                slots[wp].ok.eq(cur.valid), slots[wp].layout.eq(cur.layout),
                slots[wp].icrc_at.eq(cur.icrc_at), slots[wp].vcrc_at.eq(cur.vcrc_at),
                wp.eq(Mux(wp == Q - 1, 0, wp + 1)),
                j_in.eq(Mux(last_in, 0, j_in + (j_in != (1 << LEN_BITS) - 1))),
                jh.eq(Mux(last_in, 0, Mux(jh == K, K, jh + 1))),
                head.eq(Mux(last_in, 0, head_next)),
            ]
            with m.If(last_in):
                m.d.sync += [tag.eq(~tag), cur.valid.eq(0)]
            with m.If(completes):
                m.d.sync += [head_done.eq(head_next), pending_tag.eq(tag), pending_open.eq(~last_in)]
        with m.If(pending):
            for s in range(Q):
                waiting = busy[s] & ~slots[s].ok & (slots[s].tag == pending_tag)
                with m.If(waiting | (push & (wp == s) & (tag == pending_tag))):
                    m.d.sync += [slots[s].layout.eq(layout_in), slots[s].icrc_at.eq(icrc_in),
                                 slots[s].vcrc_at.eq(vcrc_in), slots[s].ok.eq(1)]
            with m.If(pending_open & ~(push & last_in)):
                m.d.sync += [cur.valid.eq(1), cur.layout.eq(layout_in), cur.icrc_at.eq(icrc_in),
                             cur.vcrc_at.eq(vcrc_in)]
        set_busy = Mux(push, 1 << wp, 0)
        clr_busy = Mux(pop, 1 << rp, 0)
        m.d.sync += busy.eq((busy & ~clr_busy) | set_busy)
        with m.If(pop):
            m.d.sync += rp.eq(Mux(rp == Q - 1, 0, rp + 1))

        # --- output side: masks, CRC feeds, captures ------------------------------------------------
        base = Cat(Const(0, (B - 1).bit_length()), h.j)          # h.j * B
        lanes_ab = [base + lane for lane in range(B)]
        nbytes = Signal(range(B + 1))
        m.d.comb += nbytes.eq(sum(h.keep[i] for i in range(B)))
        jmask = -(-MASK_BYTES // B)
        roms = []                       # per lane: [layout][beat] -> the bits the ICRC sets to one
        for lane in range(B):
            roms.append(Array(Array(Const(la.ormask()[j * B + lane] if j * B + lane < MASK_BYTES else 0, 8)
                                    for j in range(jmask)) for la in LAYOUTS))
        masked = Signal(W)
        for lane in range(B):
            sel = Mux(h.j < jmask, roms[lane][h.layout][h.j[:max(1, (jmask - 1).bit_length())]], 0)
            m.d.comb += byte_of(masked, lane).eq(byte_of(h.data, lane) | sel)
        crc_start = Array(Const(la.crc_start, 8) for la in LAYOUTS)[h.layout]

        i_done, v_done = Signal(), Signal()
        for eng, start, end, done, word in ((icrc, crc_start, h.icrc_at, i_done, masked),
                                            (vcrc, 0, h.vcrc_at, v_done, h.data)):
            keep = Cat(*((ab >= start) & (ab < end) & h.keep[i] for i, ab in enumerate(lanes_ab)))
            ends = ~done & (h.last | (end <= base + B))
            m.d.comb += [eng.i.payload.data.eq(word), eng.i.payload.keep.eq(keep), eng.i.payload.last.eq(ends),
                         eng.i.valid.eq(go & ~done & (keep.any() | ends))]
            with m.If(go):
                m.d.sync += done.eq(~h.last & (done | ends))

        # captures of the frame going out (zeroed at its first beat)
        hdr, icrc_wire, vcrc_wire, prepad = Signal(8 * HEADER_BYTES), Signal(32), Signal(16), Signal(32)
        hdr_n, icrc_n, vcrc_n, prepad_n = (Signal.like(s, name=s.name + "_n") for s in (hdr, icrc_wire, vcrc_wire,
                                                                                        prepad))
        first = h.j == 0
        m.d.comb += [hdr_n.eq(Mux(first, 0, hdr)), icrc_n.eq(Mux(first, 0, icrc_wire)),
                     vcrc_n.eq(Mux(first, 0, vcrc_wire)), prepad_n.eq(Mux(first, 0, prepad))]
        kept = h.data & Cat(*(h.keep[i].replicate(8) for i in range(B)))
        for j in range(HEADER_BYTES // B):
            with m.If(h.j == j):
                m.d.comb += hdr_n[8 * j * B:8 * (j + 1) * B].eq(kept)
        # byte k of a capture sits at pos = (t + d)[:LEN_BITS] (d = k, or k - 4 for the pad; the pad's
        # pos must not be negative); it is in this beat when pos[lb:] == j. t's lane plus d says
        # whether pos is in t's beat, the one after (t[lb:] == j - 1, modulo) or the one before
        # (t[lb:] == j + 1, which also keeps pos >= 0)
        for target, count, d0, sig in ((h.icrc_at, 4, 0, icrc_n), (h.vcrc_at, 2, 0, vcrc_n),
                                       (h.icrc_at, 4, -4, prepad_n)):
            t_hi = target[lb:]
            same, after, before = t_hi == h.j[:hi_bits], t_hi == j_minus, t_hi == j_plus
            for k in range(count):
                lo = Signal(signed(lb + 2), name=f"{sig.name}_lo{k}")
                m.d.comb += lo.eq(target[:lb] + (d0 + k))
                inside = j_fits & Mux(lo < 0, before, Mux(lo >= B, after, same))
                with m.If(inside):
                    m.d.comb += byte_of(sig, k).eq(h.data.word_select(lo[:lb], 8))
        with m.If(go):
            m.d.sync += [hdr.eq(hdr_n), icrc_wire.eq(icrc_n), vcrc_wire.eq(vcrc_n), prepad.eq(prepad_n)]

        rec = Signal(record_layout())
        m.d.comb += [rec.hdr.eq(hdr_n), rec.length.eq(base + nbytes), rec.fcs_bad.eq(h.user), rec.layout.eq(h.layout),
                     rec.icrc_at.eq(h.icrc_at), rec.vcrc_at.eq(h.vcrc_at), rec.icrc_wire.eq(icrc_n),
                     rec.vcrc_wire.eq(vcrc_n), rec.prepad.eq(prepad_n)]
        m.d.comb += [records.w_data.eq(rec), records.w_en.eq(go & h.last)]

        # --- join each record with its two CRCs -------------------------------------------------------
        out = Signal(record_layout())
        m.d.comb += [out.eq(records.r_data), out.icrc.eq(icrc.o.payload), out.vcrc.eq(vcrc.o.payload),
                     self.o.payload.eq(out)]
        both = records.r_rdy & icrc.o.valid & vcrc.o.valid
        m.d.comb += [self.o.valid.eq(both), records.r_en.eq(both & self.o.ready),
                     icrc.o.ready.eq(both & self.o.ready), vcrc.o.ready.eq(both & self.o.ready)]
        return m
