"""The responder's execution half: receive queues, memory protection, SEND / WRITE / READ / atomic against
host memory, duplicates, and the QP's end in ERROR (see :mod:`rnic.model.responder` for the checks
that run first, and docs/receive.md for the rules).

Every step either completes or ends the frame with a :class:`~rnic.model.responder.Stop`; host memory is
written only after every check of the packet has passed, and a payload only inside an MR that allows it.
"""

from __future__ import annotations

from .descriptor import LinkMode
from .headers import IPv4
from .opcodes import Opcode, Position
from .qpc import BusError, QpState, ServiceType
from .recv_records import (CQE_FLAG_GRH, CQE_FLAG_IMM, CQE_FLAG_INV, CQE_FLAG_SOLICITED, MAX_RD_ATOMIC, MR_BYTES,
                           RECV_WQE_BYTES, RES_BYTES, Access, MemoryRegion, MrState, OpenMessage, RecvOpcode,
                           RecvWqe, ResKind, ResSlot, mr_index)
from .regs import ErrBit
from .responder import PSN_MASK, RNR_NAK, Outcome, Packet, RxDrop, Stop, Syndrome, Verdict
from .wqe import MAX_MESSAGE, Cqe, CqeStatus

__all__ = ["Executor", "GRH_BYTES", "grh_image"]

GRH_BYTES = 40                      # UD: the first 40 bytes of a receive buffer hold the GRH (or its image)
_MAX_LOG_RING = 15
_RIGHT = {"RDMA_WRITE": Access.REMOTE_WRITE, "RDMA_READ_REQUEST": Access.REMOTE_READ,
          "COMPARE_SWAP": Access.REMOTE_ATOMIC, "FETCH_ADD": Access.REMOTE_ATOMIC}
_RESPONSE = {(True, True): Opcode.RC_RDMA_READ_RESPONSE_ONLY, (True, False): Opcode.RC_RDMA_READ_RESPONSE_FIRST,
             (False, True): Opcode.RC_RDMA_READ_RESPONSE_LAST, (False, False): Opcode.RC_RDMA_READ_RESPONSE_MIDDLE}


def grh_image(mode: LinkMode, frame: bytes, vlan: bool) -> bytes | None:
    """The 40 bytes a UD receive buffer starts with: the GRH as received (RoCEv1, IB global), the IPv6
    header (RoCEv2 / IPv6), or 20 zero bytes and the IPv4 header (RoCEv2 / IPv4, as verbs delivers it);
    None on IB local (no GRH: the 40 bytes are left unwritten)."""
    l2 = 14 + 4 * vlan if mode.is_ethernet else 8
    if mode is LinkMode.IB_LOCAL:
        return None
    if mode is LinkMode.ROCEV2_IPV4:
        return bytes(GRH_BYTES - IPv4.SIZE) + frame[l2:l2 + IPv4.SIZE]
    return frame[l2:l2 + GRH_BYTES]


class Executor:
    """Execution for one :class:`~rnic.model.responder.Responder` (``r``): shares its engine and memory."""

    def __init__(self, r):
        self.r, self.engine, self.mem = r, r.engine, r.mem

    # --- RC / UC requests ----------------------------------------------------------------------------

    def execute(self, p: Packet) -> Verdict:
        """An in-order RC / UC request whose opcode sequence is valid: access, resources, lengths, then run it."""
        info, rx = p.info, p.rx
        op = info.operation
        right = _RIGHT.get(op)
        if right is not None and info.position in (Position.FIRST, Position.ONLY, None) and not rx.access & right:
            raise self.r.nak(p, Syndrome.INVALID_REQUEST, f"the QP does not allow {right.name}")
        if op not in ("SEND", "RDMA_WRITE"):
            if not 1 <= rx.max_dest_rd_atomic <= MAX_RD_ATOMIC:
                raise self.r.nak(p, Syndrome.INVALID_REQUEST, f"max_dest_rd_atomic is {rx.max_dest_rd_atomic}")
            return self.read(p) if op == "RDMA_READ_REQUEST" else self.atomic(p)
        last = info.position in (Position.LAST, Position.ONLY)
        if op == "SEND" or (last and info.with_immediate):
            self.take_wqe(p, fresh=op != "SEND" or info.position in (Position.FIRST, Position.ONLY))
        self.check_length(p)
        return self.send(p) if op == "SEND" else self.write(p)

    def check_length(self, p: Packet) -> None:
        """FIRST and MIDDLE carry exactly the path MTU, LAST 1..MTU, ONLY 0..MTU; a WRITE's RETH length
        bounds its message (met exactly at LAST / ONLY)."""
        n, pos, mtu = len(p.payload), p.info.position, p.mtu
        ok = {Position.FIRST: n == mtu, Position.MIDDLE: n == mtu, Position.LAST: 1 <= n <= mtu,
              Position.ONLY: n <= mtu}[pos]
        if not ok:
            raise self.r.nak(p, Syndrome.INVALID_REQUEST, f"{n}-byte {pos.value} packet, path MTU {mtu}")
        if p.info.operation == "RDMA_WRITE":
            resid = p.desc.reth_dma_len if pos in (Position.FIRST, Position.ONLY) else p.rx.resid
            ends = pos in (Position.LAST, Position.ONLY)
            if n > resid or (ends and n != resid) or (not ends and n == resid):
                raise self.r.nak(p, Syndrome.INVALID_REQUEST, f"{n} bytes with {resid} left of the RETH length")

    def send(self, p: Packet) -> Verdict:
        rx, info, desc = p.rx, p.info, p.desc
        first, last = info.position in (Position.FIRST, Position.ONLY), info.position in (Position.LAST, Position.ONLY)
        off = 0 if first else rx.recv_off
        invalidate = None
        if last and info.with_invalidate:
            invalidate = self.invalidate_target(p, desc.imm)
        self.scatter(p, [(off, p.payload)], off + len(p.payload))
        if invalidate is not None:
            invalidate.state = MrState.INVALID
            self.mem.poke(self.mr_addr(desc.imm), invalidate.pack())
        rx.recv_off = off + len(p.payload)
        flags = CQE_FLAG_IMM * info.with_immediate | CQE_FLAG_INV * info.with_invalidate
        return self.advance(p, last, OpenMessage.SEND, RecvOpcode.RECV, rx.recv_off, flags)

    def write(self, p: Packet) -> Verdict:
        rx, info, desc = p.rx, p.info, p.desc
        if info.position in (Position.FIRST, Position.ONLY):
            length = desc.reth_dma_len
            addr = self.check_remote(p, desc.reth_rkey, desc.reth_va, length, Access.REMOTE_WRITE) if length else 0
            rx.write_addr, rx.resid, rx.write_len = addr, length, length
        if p.payload:
            self.dma_write(p, rx.write_addr, p.payload)
        rx.write_addr = (rx.write_addr + len(p.payload)) & (1 << 64) - 1
        rx.resid -= len(p.payload)
        last = info.position in (Position.LAST, Position.ONLY)
        return self.advance(p, last, OpenMessage.WRITE, RecvOpcode.RECV_RDMA_WITH_IMM, rx.write_len,
                            CQE_FLAG_IMM, consume=info.with_immediate)

    def advance(self, p: Packet, last: bool, kind: OpenMessage, opcode: RecvOpcode, byte_len: int, flags: int,
                consume: bool = True) -> Verdict:
        """After a SEND / WRITE packet ran: the next PSN, the message closed (MSN, the receive CQE) or kept
        open, the ACK (RC: on AckReq and at the end of every message)."""
        rx, ctx = p.rx, p.ctx
        ctx.epsn = (ctx.epsn + 1) & PSN_MASK
        cqe = None
        if last:
            rx.msn = (rx.msn + 1) & PSN_MASK
            rx.open = OpenMessage.NONE
            if consume:
                se = CQE_FLAG_SOLICITED if p.desc.se else 0
                cqe = Cqe(wr_id=p.wqe.wr_id, byte_len=byte_len, imm=p.desc.imm if flags & (CQE_FLAG_IMM | CQE_FLAG_INV)
                          else 0, qpn=p.qpn, opcode=opcode, flags=flags | se, wqe_index=rx.rq_ci)
                rx.rq_ci = (rx.rq_ci + 1) & 0xFFFF
        else:
            rx.open = kind
        self.engine._qpc_write(p.qpn, ctx)
        self.r.write_rx(p.qpn, rx)
        if cqe is not None:
            self.complete(p, cqe)
        if p.rc and (p.desc.ackreq or last):
            self.r.ack(p, p.psn)
        self.r.count("executed")
        return Verdict(Outcome.EXECUTED, p.qpn, p.psn)

    def read(self, p: Packet) -> Verdict:
        rx, desc = p.rx, p.desc
        length = desc.reth_dma_len
        if length > MAX_MESSAGE:
            raise self.r.nak(p, Syndrome.INVALID_REQUEST, f"READ of {length} bytes")
        addr = self.check_remote(p, desc.reth_rkey, desc.reth_va, length, Access.REMOTE_READ) if length else 0
        n = max(1, -(-length // p.mtu))
        self.save_slot(p, ResSlot(ResKind.READ, p.psn, (p.psn + n - 1) & PSN_MASK, desc.reth_va, desc.reth_rkey,
                                  length, addr))
        rx.msn = (rx.msn + 1) & PSN_MASK
        p.ctx.epsn = (p.psn + n) & PSN_MASK
        self.engine._qpc_write(p.qpn, p.ctx)
        self.r.write_rx(p.qpn, rx)
        self.read_responses(p, p.psn, addr, length)
        self.r.count("executed")
        return Verdict(Outcome.EXECUTED, p.qpn, p.psn)

    def read_responses(self, p: Packet, psn: int, addr: int, length: int) -> None:
        """READ_RESPONSE FIRST / MIDDLE / LAST (or ONLY) for ``length`` bytes at bus address ``addr``, PSNs
        from ``psn``. A bus error on a segment sends none of it and ends the QP (NAK 0x63)."""
        mtu = p.mtu
        n = max(1, -(-length // mtu))
        for i in range(n):
            seg = min(mtu, length - i * mtu)
            try:
                data = self.mem.read(addr + i * mtu, seg) if seg else b""
            except BusError:
                self.bus_error(p, ErrBit.BUS_PAYLOAD)
                raise self.r.nak(p, Syndrome.REMOTE_OP_ERR, "bus error reading the READ data") from None
            self.r.respond(p, _RESPONSE[i == 0, i == n - 1], (psn + i) & PSN_MASK, data)
            self.r.count("read_responses")

    def atomic(self, p: Packet) -> Verdict:
        desc = p.desc
        if desc.atomic_va % 8:
            raise self.r.nak(p, Syndrome.INVALID_REQUEST, f"atomic VA 0x{desc.atomic_va:x} is not 8-byte aligned")
        addr = self.check_remote(p, desc.atomic_rkey, desc.atomic_va, 8, Access.REMOTE_ATOMIC)
        try:
            orig = int.from_bytes(self.mem.read(addr, 8), "little")
            if desc.opcode == Opcode.RC_COMPARE_SWAP:
                new = desc.atomic_swap if orig == desc.atomic_compare else orig
            else:
                new = (orig + desc.atomic_swap) & (1 << 64) - 1
            self.mem.write(addr, new.to_bytes(8, "little"))
        except BusError:
            self.bus_error(p, ErrBit.BUS_PAYLOAD)
            raise self.r.nak(p, Syndrome.REMOTE_OP_ERR, "bus error on the atomic") from None
        self.save_slot(p, ResSlot(ResKind.ATOMIC, p.psn, p.psn, desc.atomic_va, desc.atomic_rkey, 8, orig))
        p.rx.msn = (p.rx.msn + 1) & PSN_MASK
        p.ctx.epsn = (p.psn + 1) & PSN_MASK
        self.engine._qpc_write(p.qpn, p.ctx)
        self.r.write_rx(p.qpn, p.rx)
        self.r.respond(p, Opcode.RC_ATOMIC_ACKNOWLEDGE, p.psn, orig=orig)
        self.r.count("atomics")
        self.r.count("executed")
        return Verdict(Outcome.EXECUTED, p.qpn, p.psn)

    # --- duplicates (RC) ------------------------------------------------------------------------------

    def duplicate(self, p: Packet) -> Verdict:
        """A request behind the expected PSN: SEND / WRITE re-ACK the newest PSN without running again; a READ
        is replayed from its PSN (same R_Key, a sub-range of the original); an atomic returns its saved
        result. A READ / atomic no slot remembers is dropped."""
        op, desc = p.info.operation, p.desc
        self.r.count("duplicates")
        if op in ("SEND", "RDMA_WRITE"):
            self.r.ack(p, (p.ctx.epsn - 1) & PSN_MASK)
            return Verdict(Outcome.DUPLICATE, p.qpn, p.psn)
        for slot in self.slots(p):
            if op == "RDMA_READ_REQUEST" and slot.kind == ResKind.READ:
                if (p.psn - slot.first_psn) & PSN_MASK > (slot.last_psn - slot.first_psn) & PSN_MASK:
                    continue
                va, length = desc.reth_va, desc.reth_dma_len
                if desc.reth_rkey != slot.rkey or va < slot.va or va + length > slot.va + slot.length:
                    raise self.r.drop(p, RxDrop.DUP_UNKNOWN, "duplicate READ outside its original")
                self.read_responses(p, p.psn, slot.data + va - slot.va, length)
                return Verdict(Outcome.DUPLICATE, p.qpn, p.psn)
            if op != "RDMA_READ_REQUEST" and slot.kind == ResKind.ATOMIC and slot.first_psn == p.psn:
                self.r.respond(p, Opcode.RC_ATOMIC_ACKNOWLEDGE, p.psn, orig=slot.data)
                return Verdict(Outcome.DUPLICATE, p.qpn, p.psn)
        raise self.r.drop(p, RxDrop.DUP_UNKNOWN, f"no resource remembers PSN {p.psn}")

    def slots(self, p: Packet):
        """The QP's resource slots, newest first (unreadable ones skipped)."""
        count = min(p.rx.max_dest_rd_atomic, MAX_RD_ATOMIC)
        for k in range(1, count + 1):
            i = (p.rx.res_head - k) % count
            try:
                yield ResSlot.unpack(self.mem.read(self.slot_addr(p.qpn, i), RES_BYTES))
            except BusError:
                self.bus_error(p, None)

    def slot_addr(self, qpn: int, i: int) -> int:
        return (self.r.settings.res_base & ~0x1F) + (qpn * MAX_RD_ATOMIC + i) * RES_BYTES

    def save_slot(self, p: Packet, slot: ResSlot) -> None:
        rx = p.rx
        try:
            self.mem.write(self.slot_addr(p.qpn, rx.res_head), slot.pack())
        except BusError:
            self.bus_error(p, None)
            raise self.r.nak(p, Syndrome.REMOTE_OP_ERR, "bus error saving the resource slot") from None
        rx.res_head = (rx.res_head + 1) % rx.max_dest_rd_atomic

    # --- UD --------------------------------------------------------------------------------------------

    def ud_send(self, p: Packet) -> Verdict:
        """A UD SEND ONLY: no PSN, no ACK; the buffer gets the 40-byte GRH area, then the payload."""
        n = len(p.payload)
        if n > p.mtu:
            raise self.r.drop(p, RxDrop.INVALID, f"{n}-byte UD payload, path MTU {p.mtu}")
        self.take_wqe(p, fresh=True)
        grh = grh_image(p.mode, p.frame, bool(p.desc.vlan_present))
        self.scatter(p, ([(0, grh)] if grh is not None else []) + [(GRH_BYTES, p.payload)], GRH_BYTES + n)
        info, rx = p.info, p.rx
        flags = CQE_FLAG_IMM * info.with_immediate | CQE_FLAG_GRH * (grh is not None)
        flags |= CQE_FLAG_SOLICITED * p.desc.se
        cqe = Cqe(wr_id=p.wqe.wr_id, byte_len=GRH_BYTES + n, imm=p.desc.imm if info.with_immediate else 0,
                  qpn=p.qpn, opcode=RecvOpcode.RECV, flags=flags, wqe_index=rx.rq_ci,
                  src_qp=p.desc.deth_src_qp, slid=0 if p.mode.is_ethernet else p.desc.slid)
        rx.rq_ci = (rx.rq_ci + 1) & 0xFFFF
        self.r.write_rx(p.qpn, rx)
        self.complete(p, cqe)
        self.r.count("executed")
        return Verdict(Outcome.EXECUTED, p.qpn, p.psn)

    # --- receive queue ---------------------------------------------------------------------------------

    def take_wqe(self, p: Packet, fresh: bool) -> None:
        """Read the receive WQE at rq_ci into ``p.wqe``. With ``fresh`` (a new message) an empty RQ is an
        RNR NAK (RC) or a drop (UC, UD); a WQE that cannot be read ends the QP (NAK 0x63)."""
        rx = p.rx
        if fresh and rx.rq_ci == rx.rq_pi:
            if p.rc:
                self.r.ack(p, p.psn, RNR_NAK | rx.min_rnr_timer)
                raise Stop(Verdict(Outcome.RNR, p.qpn, p.psn, syndrome=RNR_NAK | rx.min_rnr_timer,
                                   detail="no receive WQE"))
            raise self.r.drop(p, RxDrop.NO_RQ_WQE)
        p.wqe_taken = True
        try:
            p.wqe = self.read_wqe(p.rx, rx.rq_ci)
        except BusError:
            self.bus_error(p, ErrBit.BUS_WQE)
            raise self.r.nak(p, Syndrome.REMOTE_OP_ERR, "bus error reading the receive WQE",
                             CqeStatus.RQ_WQE_FETCH_ERR) from None
        except ValueError as e:
            raise self.r.nak(p, Syndrome.REMOTE_OP_ERR, str(e), CqeStatus.RQ_WQE_FETCH_ERR) from None

    def read_wqe(self, rx, index: int) -> RecvWqe:
        addr = (rx.rq_base & ~0x3F) + (index % (1 << rx.log_rq_size)) * RECV_WQE_BYTES
        return RecvWqe.unpack(self.mem.read(addr, RECV_WQE_BYTES))

    def scatter(self, p: Packet, parts: list[tuple[int, bytes]], total: int) -> None:
        """Place each ``(offset, data)`` of a ``total``-byte message in ``p.wqe``'s scatter list: first the
        length (the message must fit the buffer), then every piece's L_Key, then the writes."""
        wqe = p.wqe
        if total > wqe.capacity:
            status = CqeStatus.LOC_LEN_ERR
            if p.ctx.service == ServiceType.UC:
                status = None                       # UC: the message is dropped, the WQE stays posted
            raise self.r.nak(p, Syndrome.INVALID_REQUEST,
                             f"{total}-byte message, receive buffer of {wqe.capacity}", status)
        pieces = []
        for off, data in parts:
            base = 0
            for sge in wqe.sges:
                lo, hi = max(off, base), min(off + len(data), base + sge.length)
                if lo < hi:
                    va = sge.addr + lo - base
                    mr = self.mr(p, sge.lkey)
                    if (mr is None or mr.pd != p.rx.pd or not mr.access & Access.LOCAL_WRITE
                            or not mr.covers(va, hi - lo)):
                        raise self.r.nak(p, Syndrome.REMOTE_OP_ERR, f"L_Key 0x{sge.lkey:08x} refuses the write",
                                         CqeStatus.LOC_PROT_ERR)
                    pieces.append((mr.bus_address(va), data[lo - off:hi - off]))
                base += sge.length
        for addr, chunk in pieces:
            self.dma_write(p, addr, chunk)

    def rq_doorbell(self, qpn: int, pi: int) -> None:
        """A receive-queue doorbell. Refused (error CQE on the receive CQ, QP -> ERROR, DB_REJECTED) in RESET
        or when ``pi`` runs more than the ring ahead; in ERROR the new WQEs are flushed at once."""
        engine = self.engine
        if qpn >= min(engine.regs["QPC_SIZE"], engine.max_qps):
            engine._count("db_errors")
            engine._error(ErrBit.DB_BAD_QPN, qpn)
            return
        both = self.r.read_qp(qpn)
        if both is None:
            engine._count("db_errors")
            return
        ctx, rx = both
        ahead = (pi - rx.rq_ci) & 0xFFFF
        if rx.log_rq_size > _MAX_LOG_RING or ahead > 1 << rx.log_rq_size:
            status = CqeStatus.RQ_OVERFLOW
        elif ctx.state == QpState.RESET:
            status = CqeStatus.QP_STATE_ERR
        else:
            rx.rq_pi = pi
            self.r.write_rx(qpn, rx)
            if ctx.state == QpState.ERROR:
                self.flush_rq(qpn)
            return
        engine._count("db_errors")
        engine._error(ErrBit.DB_REJECTED, qpn, status)
        engine._complete(qpn, ctx, Cqe(qpn=qpn, opcode=RecvOpcode.RECV, status=status, flags=0, wqe_index=pi),
                         cqn=rx.rcqn)
        engine._set_error(qpn, ctx)

    def flush_rq(self, qpn: int) -> None:
        both = self.r.read_qp(qpn)
        if both is None:
            return
        ctx, rx = both
        while rx.rq_ci != rx.rq_pi:
            try:
                wr_id = self.read_wqe(rx, rx.rq_ci).wr_id
            except (BusError, ValueError):
                wr_id = 0
            cqe = Cqe(wr_id=wr_id, qpn=qpn, opcode=RecvOpcode.RECV, status=CqeStatus.WR_FLUSH_ERR, flags=0,
                      wqe_index=rx.rq_ci)
            rx.rq_ci = (rx.rq_ci + 1) & 0xFFFF
            rx.open = OpenMessage.NONE
            self.r.write_rx(qpn, rx)
            self.engine._count("flush_count")
            self.engine._complete(qpn, ctx, cqe, cqn=rx.rcqn)

    def fail_qp(self, p: Packet, status: CqeStatus | None) -> None:
        """The QP ends in ERROR: the receive WQE in use (this packet's, or the open SEND's) completes with
        ``status``, the rest of the RQ is flushed."""
        rx = p.rx
        if status is not None and (p.wqe_taken or rx.open == OpenMessage.SEND):
            wr_id = p.wqe.wr_id if p.wqe is not None else 0
            if p.wqe is None and not p.wqe_taken:
                try:
                    wr_id = self.read_wqe(rx, rx.rq_ci).wr_id
                except (BusError, ValueError):
                    pass
            cqe = Cqe(wr_id=wr_id, qpn=p.qpn, opcode=RecvOpcode.RECV, status=status, flags=0, wqe_index=rx.rq_ci)
            rx.rq_ci = (rx.rq_ci + 1) & 0xFFFF
            rx.open = OpenMessage.NONE
            self.r.write_rx(p.qpn, rx)
            self.engine._count("wqe_errors")
            self.engine._complete(p.qpn, p.ctx, cqe, cqn=rx.rcqn)
        rx.open = OpenMessage.NONE
        if p.ctx.state != QpState.ERROR:
            self.r.write_rx(p.qpn, rx)
        self.engine._set_error(p.qpn, p.ctx)
        p.rx = self.r.peek_rx(p.qpn)

    def complete(self, p: Packet, cqe: Cqe) -> None:
        """Write a receive CQE to the QP's receive CQ (the engine's completion writer; a full CQ ends the QP)."""
        self.r.count("recv_cqes")
        self.engine._complete(p.qpn, p.ctx, cqe, cqn=p.rx.rcqn)

    # --- memory -----------------------------------------------------------------------------------------

    def mr_addr(self, key: int) -> int:
        return (self.r.settings.mr_base & ~0x1F) + mr_index(key) * MR_BYTES

    def mr(self, p: Packet, key: int) -> MemoryRegion | None:
        """The valid MR ``key`` names (index inside the table, variant byte equal), or None."""
        if mr_index(key) >= self.r.settings.mr_size:
            return None
        try:
            mr = MemoryRegion.unpack(self.mem.read(self.mr_addr(key), MR_BYTES))
        except BusError:
            self.bus_error(p, None)
            return None
        return mr if mr.state == MrState.VALID and mr.key == key & 0xFF else None

    def check_remote(self, p: Packet, key: int, va: int, length: int, right: Access) -> int:
        """The bus address of ``va`` if the MR of R_Key ``key`` belongs to the QP's PD, allows ``right`` and
        holds ``[va, va + length)``; otherwise NAK 0x62 (RC) or a drop (UC)."""
        mr = self.mr(p, key)
        if mr is None or mr.pd != p.rx.pd or not mr.access & right or not mr.covers(va, length):
            raise self.r.nak(p, Syndrome.REMOTE_ACCESS,
                             f"R_Key 0x{key:08x} refuses {right.name} of [0x{va:x}, +{length})")
        return mr.bus_address(va)

    def invalidate_target(self, p: Packet, key: int) -> MemoryRegion:
        """The MR a SEND with invalidate names, if this QP may invalidate it (valid, same PD); else NAK 0x61."""
        mr = self.mr(p, key)
        if mr is None or mr.pd != p.rx.pd:
            raise self.r.nak(p, Syndrome.INVALID_REQUEST, f"cannot invalidate R_Key 0x{key:08x}")
        return mr

    def dma_write(self, p: Packet, addr: int, data: bytes) -> None:
        try:
            self.mem.write(addr, data)
        except BusError:
            self.bus_error(p, ErrBit.BUS_PAYLOAD)
            raise self.r.nak(p, Syndrome.REMOTE_OP_ERR, "bus error writing the payload",
                             CqeStatus.PAYLOAD_WRITE_ERR) from None

    def bus_error(self, p: Packet, bit: ErrBit | None) -> None:
        self.r.count("bus_errors")
        self.engine._count("bus_errors")
        if bit is not None:
            self.engine._error(bit, p.qpn)
