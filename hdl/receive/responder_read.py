"""The responder's RDMA READ and atomics: the MR check, the resource slot saved in host memory, the READ
response packets (one descriptor and source address each, segmented at the path MTU), the atomic's
read-modify-write, and duplicates answered from the slots (the model's ``Executor.read / atomic / duplicate``).
States of :class:`~.responder.Responder`'s FSM, added by :func:`read_states`.

The atomic's read and write are one sequence of the responder's own accesses with nothing of the receive
path in between (the responder runs one request at a time and waits for every payload write), and the
transmit side only reads payload memory, so no other engine access can fall between them.
"""

from __future__ import annotations

from amaranth import Cat, Mux, Signal
from amaranth.lib import data

from ...model.opcodes import Opcode
from ...model.recv_records import MAX_RD_ATOMIC, RES_BYTES, Access, ResKind
from ...model.regs import ErrBit
from ...model.responder import RxDrop, Syndrome
from .resp_layouts import res_layout

_RESPONSE = {(True, True): Opcode.RC_RDMA_READ_RESPONSE_ONLY, (True, False): Opcode.RC_RDMA_READ_RESPONSE_FIRST,
             (False, True): Opcode.RC_RDMA_READ_RESPONSE_LAST, (False, False): Opcode.RC_RDMA_READ_RESPONSE_MIDDLE}


def _slot_index(m, head, k, count):
    """``(head - k) mod count`` for the small ranges the slots use (a table)."""
    out = Signal(2, name="slot_index")
    with m.Switch(Cat(head[:2], k[:3], count[:3])):
        for h in range(4):
            for kk in range(1, MAX_RD_ATOMIC + 1):
                for c in range(1, MAX_RD_ATOMIC + 1):
                    with m.Case(h | kk << 2 | c << 5):
                        m.d.comb += out.eq((h - kk) % c)
    return out


def read_states(b):
    c = b.c
    m, d, op, rx, ctx, qpn = b.m, b.d, b.op, b.rx, b.ctx, b.qpn
    hdata, herr, host_read, host_write, hret, read_mr = b.hdata, b.herr, b.host_read, b.host_write, b.hret, b.read_mr
    nak, drop, bus_error, mr_pass, mr_bus = b.nak, b.drop, b.bus_error, b.mr_pass, b.mr_bus
    mtu, log_mtu, bump, respond = b.mtu, b.log_mtu, b.bump, b.respond
    rd_addr, orig, is_dup, epsn_then = b.rd_addr, b.orig, b.is_dup, b.epsn_then
    rsp_psn, rsp_left, rsp_first = b.rsp_psn, b.rsp_left, b.rsp_first

    length = d.reth_dma_len
    npk = Signal(25)                    # registered: its inputs are loaded long before Rd-Slot
    m.d.sync += npk.eq(Mux(length == 0, 1, (length + mtu - 1) >> log_mtu))
    slot = Signal(res_layout)
    slot_end = Signal(65)
    dpsn, span = Signal(24), Signal(24)
    hit_read, hit_atomic, inside, dup_off = Signal(), Signal(), Signal(), Signal(64)
    k = Signal(3)
    count = Signal(3)
    m.d.comb += count.eq(Mux(rx.max_dest_rd_atomic > MAX_RD_ATOMIC, MAX_RD_ATOMIC, rx.max_dest_rd_atomic))

    def slot_addr(i):
        return (c.res_base & ~0x1F) + (Cat(i[:2], qpn) << 5)

    def save_slot(kind, last_psn, va, rkey, nbytes, value):
        s = Signal(res_layout, name="new_slot")
        m.d.comb += [s.kind.eq(kind), s.first_psn.eq(d.psn), s.last_psn.eq(last_psn), s.va.eq(va), s.rkey.eq(rkey),
                     s.length.eq(nbytes), s.data.eq(value)]
        host_write(slot_addr(rx.res_head), RES_BYTES, s.as_value())
        hret.call("Host", "Slot-Done")

    with m.State("Rd-Check"):
        with m.If((rx.max_dest_rd_atomic == 0) | (rx.max_dest_rd_atomic > MAX_RD_ATOMIC)):
            nak(Syndrome.INVALID_REQUEST)
        with m.Elif(op.read):
            with m.If(b.dma_big):
                nak(Syndrome.INVALID_REQUEST)
            with m.Elif(~b.dma_zero):
                read_mr(d.reth_rkey, "Rmr-Check", d.reth_va, length, Access.REMOTE_READ)
            with m.Else():
                m.d.sync += rd_addr.eq(0)
                m.next = "Rd-Slot"
        with m.Elif(d.atomic_va[:3] != 0):
            nak(Syndrome.INVALID_REQUEST)
        with m.Else():
            read_mr(d.atomic_rkey, "Amr-Check", d.atomic_va, 8, Access.REMOTE_ATOMIC)

    with m.State("Rmr-Check"):
        with m.If(~mr_pass):
            nak(Syndrome.REMOTE_ACCESS)
        with m.Else():
            m.d.sync += rd_addr.eq(mr_bus)
            m.next = "Rd-Slot"
    with m.State("Rd-Slot"):
        save_slot(ResKind.READ, d.psn + npk - 1, d.reth_va, d.reth_rkey, length, rd_addr)

    with m.State("Amr-Check"):
        with m.If(~mr_pass):
            nak(Syndrome.REMOTE_ACCESS)
        with m.Else():
            m.d.sync += rd_addr.eq(mr_bus)
            host_read(mr_bus, 8)
            hret.call("Host", "Atom-Got")
    with m.State("Atom-Got"):
        with m.If(herr):
            bus_error(ErrBit.BUS_PAYLOAD)
            nak(Syndrome.REMOTE_OP_ERR)
        with m.Else():
            old = hdata[:64]
            swap = d.opcode == Opcode.RC_COMPARE_SWAP
            new = Mux(swap, Mux(old == d.atomic_compare, d.atomic_swap, old), (old + d.atomic_swap)[:64])
            m.d.sync += orig.eq(old)
            host_write(rd_addr, 8, new)
            hret.call("Host", "Atom-Wrote")
    with m.State("Atom-Wrote"):
        with m.If(herr):
            bus_error(ErrBit.BUS_PAYLOAD)
            nak(Syndrome.REMOTE_OP_ERR)
        with m.Else():
            save_slot(ResKind.ATOMIC, d.psn, d.atomic_va, d.atomic_rkey, 8, orig)

    with m.State("Slot-Done"):
        with m.If(herr):
            bus_error()
            nak(Syndrome.REMOTE_OP_ERR)
        with m.Else():
            head = Signal(2)
            m.d.comb += head.eq(Mux(rx.res_head + 1 >= rx.max_dest_rd_atomic, 0, rx.res_head + 1))
            m.d.sync += [rx.res_head.eq(head), rx.msn.eq(rx.msn + 1),
                         ctx.epsn.eq(d.psn + Mux(op.read, npk, 1)), epsn_then.eq(Mux(op.read, 1, 2))]
            m.next = "Epsn-Req"

    # READ responses: from rsp_psn, rsp_left bytes at rd_addr, one packet per path MTU
    with m.State("Rsp-Start"):
        with m.If(~is_dup):
            m.d.comb += bump["executed"].eq(1)
        m.d.sync += [rsp_psn.eq(d.psn), rsp_left.eq(length), rsp_first.eq(1)]
        m.next = "Rsp-Next"
    with m.State("Rsp-Next"):
        last_seg = rsp_left <= mtu
        seg = Mux(last_seg, rsp_left, mtu)
        opcode = Mux(rsp_first, Mux(last_seg, _RESPONSE[True, True], _RESPONSE[True, False]),
                     Mux(last_seg, _RESPONSE[False, True], _RESPONSE[False, False]))
        respond(opcode, rsp_psn, Syndrome.ACK, seg, rd_addr, 0, more=~last_seg)
    with m.State("Rsp-More"):
        m.d.sync += [rsp_psn.eq(rsp_psn + 1), rd_addr.eq(rd_addr + mtu), rsp_left.eq(rsp_left - mtu),
                     rsp_first.eq(0)]
        m.next = "Rsp-Next"

    with m.State("Atom-Ack"):
        with m.If(~is_dup):
            m.d.comb += [bump["atomics"].eq(1), bump["executed"].eq(1)]
        respond(Opcode.RC_ATOMIC_ACKNOWLEDGE, d.psn, Syndrome.ACK, 0, 0, orig)

    # a duplicate READ or atomic: the QP's slots, newest first
    with m.State("Dup-Init"):
        m.d.sync += [k.eq(1), is_dup.eq(1), b.chk_end.eq(d.reth_va + length)]
        m.next = "Dup-Next"
    with m.State("Dup-Next"):
        with m.If(k > count):
            drop(RxDrop.DUP_UNKNOWN)
        with m.Else():
            host_read(slot_addr(_slot_index(m, rx.res_head, k, count)), RES_BYTES)
            hret.call("Host", "Dup-Got")
    # a slot read: its sums (Dup-Got), the compares (Dup-Cmp), the verdict (Dup-Hit)
    with m.State("Dup-Got"):
        hs = data.View(res_layout, hdata[:8 * RES_BYTES])
        m.d.sync += [slot.eq(hs), slot_end.eq(hs.va + hs.length), dpsn.eq(d.psn - hs.first_psn),
                     span.eq(hs.last_psn - hs.first_psn)]
        with m.If(herr):
            bus_error()
            m.d.sync += k.eq(k + 1)
            m.next = "Dup-Next"
        with m.Else():
            m.next = "Dup-Cmp"
    with m.State("Dup-Cmp"):
        m.d.sync += [hit_read.eq(op.read & (slot.kind == ResKind.READ) & (dpsn <= span)),
                     inside.eq((d.reth_rkey == slot.rkey) & (d.reth_va >= slot.va) & (b.chk_end <= slot_end)),
                     hit_atomic.eq(op.atomic & (slot.kind == ResKind.ATOMIC) & (slot.first_psn == d.psn)),
                     dup_off.eq(slot.data - slot.va)]
        m.next = "Dup-Hit"
    with m.State("Dup-Hit"):
        with m.If(hit_read):
            with m.If(~inside):
                drop(RxDrop.DUP_UNKNOWN)
            with m.Else():
                m.d.sync += rd_addr.eq(dup_off + d.reth_va)
                m.next = "Rsp-Start"
        with m.Elif(hit_atomic):
            m.d.sync += orig.eq(slot.data)
            m.next = "Atom-Ack"
        with m.Else():
            m.d.sync += k.eq(k + 1)
            m.next = "Dup-Next"
