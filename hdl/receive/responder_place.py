"""The responder's execution of SEND and RDMA WRITE: lengths, MR checks, the scatter list, the payload pieces,
then the QP's advance, the receive CQE and the ACK (the model's ``Executor.send / write / ud_send / advance``).
States of :class:`~.responder.Responder`'s FSM, added by :func:`place_states`."""

from __future__ import annotations

from amaranth import Cat, Const, Mux
from amaranth.lib import data

from ...model.descriptor import LinkMode
from ...model.recv_records import (CQE_FLAG_GRH, CQE_FLAG_IMM, CQE_FLAG_INV, CQE_FLAG_SOLICITED, MR_BYTES, RECV_SGES,
                                   RECV_WQE_BYTES, Access, MrState, OpenMessage, RecvOpcode)
from ...model.regs import ErrBit
from ...model.responder import Syndrome
from ...model.responder_exec import GRH_BYTES
from ...model.wqe import CqeStatus
from ..qp_cache import Op
from .resp_layouts import mr_layout, wqe_layout

_PIECES = 16


def place_states(b):
    c = b.c
    m, herr, bus_error, nak, hdata, d = b.m, b.herr, b.bus_error, b.nak, b.hdata, b.d
    wqe, wqe_have, ud, op, n, mtu = b.wqe, b.wqe_have, b.ud, b.op, b.n, b.mtu
    last, start, rx, read_mr, off, inv_key = b.last, b.start, b.rx, b.read_mr, b.off, b.inv_key
    key, mr, mret, hret = b.key, b.mr, b.mret, b.hret
    pmem, res, npieces, capacity, uc = b.pmem, b.res, b.npieces, b.capacity, b.uc
    sge_i, base, part, lo, hi, piece_len = b.sge_i, b.base, b.part, b.lo, b.hi, b.piece_len
    lo_rel, sge, sge_end, p_src, p_off = b.lo_rel, b.sge, b.sge_end, b.p_src, b.p_off
    mr_okr, mr_pass, mr_bus, over = b.mr_okr, b.mr_pass, b.mr_bus, b.over
    p_zero, emit_i, released, releasing = b.p_zero, b.emit_i, b.released, b.releasing
    host_write, mr_addr = b.host_write, b.mr_addr
    ctx, cqe, do_cqe = b.ctx, b.cqe, b.do_cqe
    cache_resp, write_rx, bump, cret, rc, ack = b.cache_resp, b.write_rx, b.bump, b.cret, b.rc, b.ack
    with m.State("Wqe-Got"):
        with m.If(herr):
            bus_error(ErrBit.BUS_WQE)
            nak(Syndrome.REMOTE_OP_ERR, CqeStatus.RQ_WQE_FETCH_ERR)
        with m.Elif(hdata[64:72] > RECV_SGES):
            nak(Syndrome.REMOTE_OP_ERR, CqeStatus.RQ_WQE_FETCH_ERR)
        with m.Else():
            hw = data.View(wqe_layout, hdata[:8 * RECV_WQE_BYTES])
            m.d.sync += [wqe.eq(hdata), wqe_have.eq(1),
                         capacity.eq(sum(Mux(i < hw.num_sge, hw.sge[i].length, 0) for i in range(RECV_SGES)))]
            with m.If(ud):
                m.next = "Scatter-Init"
            with m.Else():
                m.next = "Len"
    with m.State("Len"):
        with m.If(b.len_bad):
            nak(Syndrome.INVALID_REQUEST)
        with m.Elif(op.write):
            with m.If(start & ~b.dma_zero):
                read_mr(d.reth_rkey, "Wmr-Check", d.reth_va, d.reth_dma_len, Access.REMOTE_WRITE)
            with m.Else():
                with m.If(start):
                    m.d.sync += [rx.write_addr.eq(0), rx.resid.eq(0), rx.write_len.eq(0)]
                m.next = "Write-Piece"
        with m.Else():
            m.d.sync += [off.eq(Mux(start, 0, rx.recv_off)), inv_key.eq(d.imm)]
            with m.If(last & op.inv):
                read_mr(d.imm, "Inv-Check")
            with m.Else():
                m.next = "Scatter-Init"
    # an MR read: skipped (no MR) when the key's index is past the table; checked a clock after the record
    with m.State("Mr-Read"):
        with m.If(~b.key_in):
            m.d.sync += [mr_okr.eq(0), mr_pass.eq(0)]
            mret.back()
        with m.Else():
            m.d.sync += b.chk_end.eq(b.chk_va + b.chk_len)
            b.host_read(mr_addr(key), MR_BYTES)
            hret.call("Host", "Mr-Got")
    with m.State("Mr-Got"):
        hmr = data.View(mr_layout, hdata[:8 * MR_BYTES])
        with m.If(herr):
            bus_error()
            m.d.sync += mr.eq(0)
        with m.Else():
            m.d.sync += mr.eq(hmr)
        m.d.sync += [b.mr_end.eq(hmr.va + hmr.length), b.mr_off.eq(hmr.addr - hmr.va)]
        m.next = "Mr-Chk"
    with m.State("Mr-Chk"):
        ok = b.key_in & (mr.state == MrState.VALID) & (mr.key == key[:8]) & (mr.pd == rx.pd)
        m.d.sync += [mr_okr.eq(ok),
                     mr_pass.eq(ok & (mr.access & b.chk_right).any() & (mr.va <= b.chk_va)
                                & (b.chk_end <= b.mr_end)),
                     mr_bus.eq(b.mr_off + b.chk_va)]
        mret.back()
    with m.State("Inv-Check"):
        with m.If(~mr_okr):
            nak(Syndrome.INVALID_REQUEST)
        with m.Else():
            m.next = "Scatter-Init"
    with m.State("Wmr-Check"):
        with m.If(~mr_pass):
            nak(Syndrome.REMOTE_ACCESS)
        with m.Else():
            m.d.sync += [rx.write_addr.eq(mr_bus), rx.resid.eq(d.reth_dma_len), rx.write_len.eq(d.reth_dma_len)]
            m.next = "Write-Piece"
    with m.State("Write-Piece"):
        with m.If(n != 0):
            m.d.sync += [pmem[0].src.eq(res.payload_start), pmem[0].length.eq(n),
                         pmem[0].addr.eq(rx.write_addr), pmem[0].zero.eq(0), npieces.eq(1)]
        m.next = "Emit"
    # Scatter-Fit is the first Scatter-Wait: the overlap registers see the new part, SGE and base
    with m.State("Scatter-Init"):
        total = Mux(ud, GRH_BYTES + n, off + n)
        m.d.sync += [over.eq(total > capacity), sge_i.eq(0), base.eq(0)]
        b.set_part(Mux(ud & (res.mode == LinkMode.ROCEV2_IPV4), 0, Mux(ud & (res.mode != LinkMode.IB_LOCAL), 1, 2)))
        m.next = "Scatter-Fit"
    with m.State("Scatter-Fit"):
        with m.If(over):
            nak(Syndrome.INVALID_REQUEST, Mux(uc, 0, CqeStatus.LOC_LEN_ERR))
        with m.Else():
            m.next = "Scatter"
    with m.State("Scatter-Wait"):
        m.next = "Scatter"
    with m.State("Scatter"):
        with m.If(sge_i >= wqe.num_sge):
            with m.If(part == 2):
                m.next = "Emit"
            with m.Else():
                m.d.sync += [sge_i.eq(0), base.eq(0)]
                b.set_part((part + 1)[:2])
                m.next = "Scatter-Wait"
        with m.Elif(lo < hi):
            m.d.sync += piece_len.eq(hi - lo)
            read_mr(sge.lkey, "Smr-Check", sge.addr + lo_rel, (hi - lo)[:16], Access.LOCAL_WRITE)
        with m.Else():
            m.d.sync += [sge_i.eq(sge_i + 1), base.eq(sge_end)]
            m.next = "Scatter-Wait"
    with m.State("Smr-Check"):
        with m.If(~mr_pass):
            nak(Syndrome.REMOTE_OP_ERR, CqeStatus.LOC_PROT_ERR)
        with m.Else():
            for i in range(_PIECES):
                with m.If(npieces == i):
                    m.d.sync += [pmem[i].src.eq(p_src + lo - p_off), pmem[i].length.eq(piece_len),
                                 pmem[i].addr.eq(mr_bus), pmem[i].zero.eq(p_zero)]
            m.d.sync += [npieces.eq(npieces + 1), sge_i.eq(sge_i + 1), base.eq(sge_end)]
            m.next = "Scatter-Wait"
    with m.State("Emit"):
        cur = pmem[emit_i]
        final = (emit_i + 1 >= npieces)
        m.d.comb += [c.pieces.valid.eq(1),
                     c.pieces.payload.src.eq(Mux(npieces == 0, 0, cur.src)),
                     c.pieces.payload.length.eq(Mux(npieces == 0, 0, cur.length)),
                     c.pieces.payload.addr.eq(Mux(npieces == 0, 0, cur.addr)),
                     c.pieces.payload.zero.eq(cur.zero & (npieces != 0)),
                     c.pieces.payload.last.eq(final)]
        with m.If(c.pieces.ready):
            m.d.sync += emit_i.eq(emit_i + 1)
            with m.If(final):
                m.d.sync += [emit_i.eq(0), released.eq(1)]
                m.next = "Wdone"
    with m.State("Wdone"):
        m.d.comb += c.wdone.ready.eq(1)
        with m.If(c.wdone.valid):
            with m.If(releasing):
                m.next = "Idle"
            with m.Elif(b.in_job):
                m.d.sync += b.job_err.eq(c.wdone.payload.err)
                m.next = "Job-Placed"
            with m.Elif(c.wdone.payload.err):
                bus_error(ErrBit.BUS_PAYLOAD)
                nak(Syndrome.REMOTE_OP_ERR, CqeStatus.PAYLOAD_WRITE_ERR)
            with m.Elif(ud):
                m.next = "Ud-Adv"
            with m.Elif(op.write):
                m.d.sync += [rx.write_addr.eq(rx.write_addr + n), rx.resid.eq(rx.resid - n)]
                m.next = "Advance"
            with m.Elif(last & op.inv):
                host_write(Cat(Const(29, 5), (c.mr_base[5:] + inv_key[8:32])[:59]), 1, MrState.INVALID)
                hret.call("Host", "Inv-Done")
            with m.Else():
                m.d.sync += rx.recv_off.eq(off + n)
                m.next = "Advance"
    with m.State("Inv-Done"):
        m.d.sync += rx.recv_off.eq(off + n)
        m.next = "Advance"
    with m.State("Advance"):
        consume = op.send | op.imm
        m.d.sync += ctx.epsn.eq(ctx.epsn + 1)
        with m.If(last):
            m.d.sync += [rx.msn.eq(rx.msn + 1), rx.open.eq(OpenMessage.NONE)]
            with m.If(consume):
                flags = Mux(op.send, CQE_FLAG_IMM * op.imm | CQE_FLAG_INV * op.inv, CQE_FLAG_IMM) \
                    | Mux(d.se, CQE_FLAG_SOLICITED, 0)
                cqe(wqe.wr_id, CqeStatus.SUCCESS,
                    Mux(op.send, RecvOpcode.RECV, RecvOpcode.RECV_RDMA_WITH_IMM), flags,
                    Mux(op.send, rx.recv_off, rx.write_len), Mux(op.imm | op.inv, d.imm, 0))
                m.d.sync += [do_cqe.eq(1), rx.rq_ci.eq(rx.rq_ci + 1)]
        with m.Else():
            m.d.sync += rx.open.eq(Mux(op.send, OpenMessage.SEND, OpenMessage.WRITE))
        m.next = "Epsn-Req"
    with m.State("Epsn-Req"):
        b.cache_request(Op.SET_EPSN, "Epsn-Resp", ctx.epsn)
    with m.State("Epsn-Resp"):
        m.d.comb += cache_resp.ready.eq(1)
        with m.If(cache_resp.valid):
            with m.Switch(b.epsn_then):
                with m.Case(1):
                    write_rx("Rsp-Start")
                with m.Case(2):
                    write_rx("Atom-Ack")
                with m.Default():
                    write_rx("Cqe-Maybe")
    with m.State("Cqe-Maybe"):
        with m.If(do_cqe):
            m.d.comb += bump["recv_cqes"].eq(1)
            cret.call("Cq", "Ack-Maybe")
        with m.Else():
            m.next = "Ack-Maybe"
    with m.State("Ack-Maybe"):
        m.d.comb += bump["executed"].eq(1)
        with m.If(rc & (d.ackreq | last)):
            ack(d.psn, Syndrome.ACK)
        with m.Else():
            m.next = "Finish"
    with m.State("Ud-Adv"):
        flags = (CQE_FLAG_IMM * op.imm | Mux(res.mode != LinkMode.IB_LOCAL, CQE_FLAG_GRH, 0)
                 | Mux(d.se, CQE_FLAG_SOLICITED, 0))
        cqe(wqe.wr_id, CqeStatus.SUCCESS, RecvOpcode.RECV, flags, GRH_BYTES + n, Mux(op.imm, d.imm, 0),
            d.deth_src_qp, Mux(res.mode >= LinkMode.IB_LOCAL, d.slid, 0))
        m.d.sync += rx.rq_ci.eq(rx.rq_ci + 1)
        write_rx("Ud-Cq")
    with m.State("Ud-Cq"):
        m.d.comb += [bump["recv_cqes"].eq(1), bump["executed"].eq(1)]
        cret.call("Cq", "Finish")
