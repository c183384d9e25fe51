"""Beat generator: the skid register k and the generator that turns frames into beats.

See :class:`BeatGenerator`; the beats it pushes go on to :class:`~.merge.BeatMerge`.
"""

from __future__ import annotations

from amaranth import Cat, Const, Mux, Signal, Value
from amaranth.hdl import Assert

from ..descriptor import ErrorFlags
from ..prim import late_select, lut4, replicas

from .front import first_layout, frame_params
from .header import frame_layout
from .templates import _COPIES, _LEN_BITS, _TEMPLATES, HEADER_MAX, _expand

__all__ = ["BeatGenerator"]


class BeatGenerator:
    """The frame queue's head (s5 and the skid register ``k``) and the beat generator: header
    beats, payload beats as taken (masked to their lanes), fill, and the beat flags for the CRC
    placement (a helper of :class:`~rnic.hdl.packet_builder.PacketBuilder`, adding its logic to the
    builder's module).

    Parameters
    ----------
    width : int
        Datapath width ``W`` in bits.
    depth : int
        Output queue capacity in beats: the generator's credits.
    payload : ``stream.Interface(PacketStream(W))``
        The builder's ``payload`` port (this block drives ``ready``).
    error, error_clear :
        The builder's sticky error flags and their write-1-to-clear.

    Members
    -------
    k_valid, src_valid, drop_stall : Signal
        Registers: k holds a frame; k or s5 holds one (``Assert``ed); two or more payload packets
        are owed to the drop logic (the front end then takes no descriptor).
    k_next_if : list of 2 Signal
        k's next valid for ``payload.valid`` = 0 and 1, one LUT4 each (for the stage enables).
    push : Signal
        A beat leaves the generator this clock (to :class:`~.merge.BeatMerge`); ``pop`` (driven by
        the output queue) returns its credit. The generator pushes only with a credit, so
        everything after it never stalls.
    payload handshake
        ``payload.ready = dropping | go_pay`` (flip-flops); a payload beat is taken on
        ``valid & ready``. ``valid`` reaches the generator's registers through one LUT4 each
        (:func:`rnic.hdl.prim.late_select`), the next-frame decision through three replicas.

    The generator's state is held in the flags ``g_active``, ``g_in_hdr``, ``g_pl`` and ``g_fill``
    (each computed a beat ahead). A frame is loaded on ``next_frame`` (idle, or the current frame's
    last beat going out) when ``src_valid``; its first beat's state comes from the frame's
    first-beat flags (``first_hdr``, ``first_pl``). Every beat waits for a credit (``g_room``).

    =======  ==============================  =================================  ===========================
    state    entered from                    leaves to                          waits for
    =======  ==============================  =================================  ===========================
    idle     reset; the last beat of a       header, payload or tail, on        a frame in s5 or k
             frame with no frame queued      ``g_load``                         (``src_valid``)
    header   load (``first_hdr``); header    header (``hr_ge2``), payload,      a credit
             (more header-only beats)        tail
    payload  load (``first_pl``); header;    payload, fill (payload ended       a credit and a payload
             payload                         early), tail; idle / load if last  beat (``payload.valid``)
    fill     payload (early ``last``)        fill, tail; idle / load if last    a credit
    tail     load (short header, no          tail (CRC bytes over two beats);   a credit
             payload); header; payload;      idle / load after the last beat
             fill
    =======  ==============================  =================================  ===========================

    ``header``: ``g_in_hdr`` (a header-only beat); ``payload``: ``g_pl & ~g_fill`` (``need_pl``);
    ``fill``: ``g_pl & g_fill`` (zeros for the missing payload); ``tail``: neither (the last
    header bytes, pad and CRC lanes). A beat that takes a payload beat also carries the header's
    last bytes or the pad / CRC lanes where they fall in it. While ``dropping`` (a bad
    descriptor's payload, or the rest of a payload longer than declared) the generator takes
    payload beats without pushing them.
    """

    def __init__(self, width, depth, payload, error, error_clear):
        self.W, self.B, self._depth = width, width // 8, depth
        self.payload, self.error, self.error_clear = payload, error, error_clear
        r = self
        r.k_valid = Signal()
        r.src_valid = Signal()       # k_valid | s5_valid (a frame for the generator), a register
        r.g_load = Signal()
        r.next_frame = Signal()      # the generator is ready for a frame
        # Payload packets owed to the drop logic (see the generator) hold new descriptors back
        # while two or more are pending, so the count stays small without stalling the generator.
        r.drop_stall = Signal()

    def elaborate(self, m, platform, front, header):
        """Add k and the generator's next-state logic; :meth:`elaborate_counters` adds the rest
        (after the front end's stage enables, which read ``k_next_if``)."""
        m.d.sync += Assert(self.src_valid == (self.k_valid | front.valid[4]), "packet builder: src_valid\n")
        self._skid(m, front, header)
        self._registers()
        self._beat(m, platform)
        self._next_state(m, platform, front, header)

    def _skid(self, m, front, header):
        r, B = self, self.B
        HB = -(-HEADER_MAX // B) * B
        frame_info, first_info = frame_layout(B), first_layout(B)
        valid_next, s5_f = front.valid_next, header.s5_f
        # ---- k: skid register between s5 and the generator (registered ready for s1..s5). It
        # captures s5 whenever it is empty; it is full when the generator did not take s5.
        r.k_f = Signal(frame_info, reset_less=True)
        r.src = Signal(frame_info)
        # The header part of `src` is selected, and k's header part loaded, by copies of k_valid,
        # one per quarter (see the group selects): they differ from it only while neither k nor s5
        # holds a frame (k's content is then unused), and k_valid itself serves the other fields.
        s5v_next, s4v_next = valid_next[4], valid_next[3]
        variants = [valid_next[2], Const(1, 1), s4v_next, ~s4v_next]
        assert _COPIES <= len(variants)
        r.kv = [Signal(name=f"k_valid{c}") for c in range(_COPIES)]
        quarter = -(-8 * HB // _COPIES)
        m.d.comb += [
            r.src.eq(Mux(r.k_valid, r.k_f, s5_f)),
            r.src.hdr.eq(Cat(*(Mux(r.kv[c], r.k_f.hdr[c * quarter:(c + 1) * quarter],
                                 s5_f.hdr[c * quarter:(c + 1) * quarter]) for c in range(_COPIES)))),
        ]
        with m.If(~r.k_valid):
            m.d.sync += [r.k_f.tmpl.eq(s5_f.tmpl), r.k_f.p.eq(s5_f.p), r.k_f.ib.eq(s5_f.ib), r.k_f.fl.eq(s5_f.fl)]
        for c in range(_COPIES):
            with m.If(~r.kv[c]):
                m.d.sync += r.k_f.hdr[c * quarter:(c + 1) * quarter].eq(s5_f.hdr[c * quarter:(c + 1) * quarter])
        # head.fl is src.fl from a flip-flop: next clock's head of the queue is today's if k will
        # hold a frame (k keeps it, or takes s5's), else s5's next content. So no multiplexer on
        # k_valid sits between these flags and the generator's next-state logic.
        r.head = Signal(first_info, reset_less=True)
        self._variants = variants

    def _registers(self):
        r, W, B = self, self.W, self.B
        HB = -(-HEADER_MAX // B) * B
        params, nt = frame_params(B), len(_TEMPLATES)
        # ---- generator. Control flags for the current beat are registers computed one beat
        # ahead, down to the push and load decisions themselves: `push` is one LUT of registered
        # flags and the payload valid, `g_load` one more after it.
        # The header in two parts: the low beat (the header beat being sent; zero once the payload
        # has started) and the beats above it. The upper beats are only read during header-only
        # beats; at any other time they follow the next frame's header, so their register enables
        # are functions of registers only (never of the payload handshake).
        # The ICRC view is not held: each beat's forced-to-ones bytes come from a constant table
        # indexed by the template and the beat number, ORed in at the ICRC engine's input.
        r.g_lo = Signal(W, reset_less=True)
        r.g_hi = Signal(8 * HB - W, reset_less=True)
        r.g_p = Signal(params, reset_less=True)
        r.g_ib = Signal()
        r.g_tmpl = Signal(range(nt))
        r.mask_beats = -(-max(t.base_len for t in _TEMPLATES) // B)
        r.g_mj = Signal(range(r.mask_beats + 1))  # beat number, saturating past the templates' masks
        r.g_abort = Signal()
        r.g_first = Signal()           # beat 0 of the frame
        r.g_second = Signal()          # beat 1
        r.g_active = Signal()          # a frame is being sent
        r.g_in_hdr = Signal()          # this beat is a header-only beat
        r.g_hrem = Signal(range(HEADER_MAX // B + 1))  # header-only beats left, this one included
        r.hr_ge2 = Signal()            # g_hrem >= 2: the next beat is header-only too
        r.g_pl = Signal()              # this beat takes a payload beat (or a fill beat)
        r.g_fill = Signal()            # the payload ended early: the rest of it is zeros
        r.g_last = Signal()            # this beat is the frame's last
        r.g_brem = Signal(_LEN_BITS)   # beats left after this one
        r.g_final = Signal()           # this payload beat is the payload packet's last
        r.g_prem = Signal(_LEN_BITS)   # payload beats not yet taken (this one included if g_pl)
        r.pr_ge1, r.pr_ge2, r.pr_eq1, r.pr_eq2 = (Signal(name=f"pr_{n}") for n in ("ge1", "ge2", "eq1", "eq2"))
        r.br_eq1 = Signal()            # g_brem == 1
        r.g_pmask = Signal(B)          # payload lanes this beat keeps (0 on header-only beats)
        r.g_room = Signal(init=1)      # a credit: inflight < depth - 1 (a register of its own)
        r.inflight = Signal(range(self._depth + 1))
        # Payload packets to drop: at most 3 when drop_stall rises a clock later, plus one for each
        # frame in s1..s5, k and the generator (a frame adds at most one): 4 bits never wrap.
        r.drop_cnt = Signal(4)
        r.pop = Signal()
        r.pop_d = Signal()             # pop, a clock later (what the in-flight count subtracts)
        # Flags derived from the above, registered one clock ahead:
        r.go_free = Signal()           # g_active & g_room & ~need: this beat goes out now
        r.go_pay = Signal()            # g_active & g_room & need & ~dropping: it goes with a payload beat
        r.last_free = Signal()         # go_free & g_last
        r.last_pay = Signal()          # go_pay & g_last
        r.go_any = Signal()            # go_free | go_pay: push, if the payload beat is there
        r.dropping = Signal()          # drop_cnt != 0
        r.hi_follow = Signal(init=1)   # ~g_active | ~g_in_hdr
        r.hi_en = Signal(init=1)       # hi_follow | g_room

    def _beat(self, m, platform):
        r, B = self, self.B
        r.pv = self.payload.payload
        r.need_pl = Signal()           # g_pl & ~g_fill: this beat waits for a payload beat (a register)
        r.push = Signal()
        m.d.comb += [
            self.payload.ready.eq(r.dropping | r.go_pay),
            r.push.eq(r.go_free | (r.go_pay & self.payload.valid)),
        ]
        # next_frame = ~g_active | last_free | (last_pay & payload.valid), in three copies: the
        # control logic's, and the load enables of g_lo's and of the other frame registers' ~100
        # bits. Each is one LUT4 with its inputs in another order, so that synthesis keeps them apart.
        r.nf = dict(zip(("", "_lo", "_regs"), replicas(
            m, platform, ["next_frame", "next_frame_lo", "next_frame_regs"],
            lambda a, f, p, v: not a or f or (p and v), [r.g_active, r.last_free, r.last_pay, self.payload.valid],
            orders=[(0, 1, 2, 3), (1, 0, 2, 3), (2, 0, 1, 3)])))
        m.d.comb += r.next_frame.eq(r.nf[""])
        r.take = r.push & r.need_pl                                # a payload beat goes into this beat
        r.is_final = r.g_final
        # When a payload beat is taken, g_pmask is the lane mask it must have.
        extra = (r.pv.keep & ~r.g_pmask).any()
        r.early_ev = r.take & r.pv.last & (~r.is_final | ((r.pv.keep != r.g_pmask) & ~extra))
        r.late_ev = r.take & r.is_final & (~r.pv.last | extra)

        # The payload beat as taken, lanes masked (g_pmask is 0 on header-only beats, need_pl on
        # fill beats). It is shifted by the header length mod B one stage later, in `ga` -> `bt`,
        # from registers.
        r.pay_m = r.pv.data & _expand(r.pv.keep & r.g_pmask & r.need_pl.replicate(B), B)

        r.bad_load = r.head.bad_mode | r.head.too_long
        m.d.comb += r.g_load.eq(r.src_valid & r.next_frame)

        # Next beat's flags, from registered compares.
        r.in_hdr1 = r.hr_ge2
        r.pl1 = ~r.in_hdr1 & Mux(r.g_pl, r.pr_ge2, r.pr_ge1)
        r.final1 = Mux(r.g_pl, r.pr_eq2, r.pr_eq1)


    def _next_state(self, m, platform, front, header):
        r, B = self, self.B
        ones = Const(-1, B)
        s5v_next, variants = front.valid_next[4], self._variants
        s5_en, s5_f, s5_fl = front.en[4], header.s5_f, header.s5_fl
        # The registers that the load and push decisions steer, each as its value for
        # payload.valid = 1 and for 0, both from registers only, and then one LUT4 picks by
        # payload.valid (late_select): the handshake reaches them through one LUT, not through the
        # decisions' own logic (ABC, left to itself, put the decision first and four LUTs after it).
        # The credit g_room is inflight < depth - 1 (inflight grows by at most one a clock, so that
        # leaves room for a push next clock), as a flip-flop computed from the count's next value:
        # the count moves by at most one, so that is one of three compares of today's count.
        room_after_push = r.inflight < self._depth - 2
        g_room_now = r.inflight < self._depth - 1
        m.d.sync += Assert(r.g_room == g_room_now, "packet builder: g_room\n")
        m.d.sync += Assert(r.go_any == (r.go_free | r.go_pay), "packet builder: go_any\n")
        m.d.sync += Assert(r.need_pl == (r.g_pl & ~r.g_fill), "packet builder: need_pl\n")

        def decide(v):
            push_v = r.go_any if v.value else r.go_free
            nf_v = ~r.g_active | r.last_free | (r.last_pay & v)
            g_load_v = r.src_valid & nf_v
            k_next = r.src_valid & ~nf_v
            take_v = push_v & r.need_pl
            late_drop_v = take_v & r.is_final & ~r.pv.last
            fill1_v = r.g_fill | (take_v & r.pv.last & ~r.is_final)   # an early end: the rest is fill
            # Like the frame registers below, the flags take the head of the frame queue on
            # `next_frame`, not on `g_load`: without a frame there, g_active goes low and they
            # are unused.
            active = g_load_v | (r.g_active & ~(push_v & r.g_last))
            in_hdr = Mux(nf_v, r.head.first_hdr, Mux(push_v, r.in_hdr1, r.g_in_hdr))
            pl = Mux(nf_v, r.head.first_pl, Mux(push_v, r.pl1, r.g_pl))
            fill = ~nf_v & Mux(push_v, fill1_v, r.g_fill)
            last = Mux(nf_v, r.head.first_last, Mux(push_v, r.br_eq1, r.g_last))
            drop = (r.drop_cnt + (g_load_v & r.head.drop) + late_drop_v - (r.dropping & v & r.pv.last))[:4]
            # drop != 0, without the adder (the decrement happens only while drop_cnt != 0).
            dropping_v = ((g_load_v & r.head.drop) | late_drop_v | (r.drop_cnt >= 2)
                          | ((r.drop_cnt == 1) & ~(v & r.pv.last)))
            go = active & r.g_room
            need = pl & ~fill
            dont_care = ~k_next & ~s5v_next
            return [
                (r.g_active, active), (r.g_in_hdr, in_hdr), (r.g_pl, pl), (r.g_fill, fill), (r.g_last, last),
                (r.drop_cnt, drop), (r.dropping, dropping_v),
                (r.inflight, (r.inflight + push_v - r.pop_d)[:len(r.inflight)]),
                (r.g_room, Mux(push_v & ~r.pop_d, room_after_push,
                             Mux(~push_v & r.pop_d, r.inflight < self._depth, g_room_now))),
                (r.need_pl, need),
                (r.go_free, go & ~need), (r.go_pay, go & need & ~dropping_v), (r.go_any, go & (~need | ~dropping_v)),
                (r.last_free, go & ~need & last), (r.last_pay, go & need & ~dropping_v & last),
                (r.hi_follow, ~active | ~in_hdr), (r.hi_en, ~active | ~in_hdr | r.g_room),
                (r.k_valid, k_next), (r.src_valid, k_next | s5v_next),
                *((r.kv[c], k_next | (dont_care & variants[c])) for c in range(_COPIES)),
                (r.head, Mux(k_next, r.head, Mux(s5_en, s5_fl, s5_f.fl))),
                (r.g_pmask, Mux(nf_v, r.head.pmask,
                              Mux(push_v, Mux(r.pl1, Mux(r.final1, r.g_p.plast_mask, ones), 0), r.g_pmask))),
            ]

        for (reg, if1), (_, if0) in zip(decide(Const(1, 1)), decide(Const(0, 1))):
            reg, if1, if0 = Value.cast(reg), Value.cast(if1), Value.cast(if0)
            m.d.sync += reg.eq(late_select(m, platform, f"{reg.name}_by_valid", self.payload.valid,
                                           if1[:len(reg)], if0[:len(reg)]))
        r.k_next_if = [lut4(m, platform, f"k_next_if{v}",
                            lambda sv, a, f, p, v=v: sv and not (not a or f or (p and v)),
                            [r.src_valid, r.g_active, r.last_free, r.last_pay]) for v in (0, 1)]

    def elaborate_counters(self, m):
        """The counters and frame registers that load on ``push`` / ``next_frame``, and the errors."""
        r, W, B = self, self.W, self.B
        m.d.sync += [r.drop_stall.eq(r.drop_cnt >= 2), r.pop_d.eq(r.pop)]

        with m.If(r.push):
            m.d.sync += [
                r.g_first.eq(0), r.g_second.eq(r.g_first), r.g_mj.eq(r.g_mj + (r.g_mj != r.mask_beats)),
                r.g_hrem.eq(r.g_hrem - r.g_in_hdr), r.hr_ge2.eq(Mux(r.g_in_hdr, r.g_hrem >= 3, r.hr_ge2)),
                r.g_brem.eq(r.g_brem - 1),
                r.g_prem.eq(r.g_prem - r.g_pl), r.g_final.eq(r.final1), r.br_eq1.eq(r.g_brem == 2),
                r.g_lo.eq(Mux(r.g_in_hdr, r.g_hi[:W], 0)),
            ]
            with m.If(r.g_pl):         # the compares of g_prem - 1, from g_prem
                m.d.sync += [r.pr_ge1.eq(r.pr_ge2), r.pr_ge2.eq(r.g_prem >= 3),
                             r.pr_eq1.eq(r.pr_eq2), r.pr_eq2.eq(r.g_prem == 3)]
            with m.If(r.early_ev | r.late_ev):
                m.d.sync += r.g_abort.eq(1)
        # Frame registers and counters load whenever the generator is ready for a frame, whether or
        # not one is there (harmless while g_active stays low): their select is then `push`, not
        # `g_load`, which keeps the frame queue's valid bits off their ~100 enables.
        with m.If(r.nf["_lo"]):
            m.d.sync += r.g_lo.eq(r.src.hdr[:W])
        with m.If(r.nf["_regs"]):
            m.d.sync += [
                r.g_p.eq(r.src.p), r.g_ib.eq(r.src.ib), r.g_tmpl.eq(r.src.tmpl),
                r.g_first.eq(1), r.g_second.eq(0), r.g_mj.eq(0),
                r.g_hrem.eq(r.src.p.nh), r.g_brem.eq(r.src.p.nbm1), r.g_prem.eq(r.src.p.np),
                r.g_abort.eq(r.bad_load), r.g_final.eq(r.head.first_final),
                r.br_eq1.eq(r.head.nbm1_eq1), r.hr_ge2.eq(r.head.nh_ge2),
                r.pr_ge1.eq(r.head.np_ge1), r.pr_ge2.eq(r.head.np_ge2),
                r.pr_eq1.eq(r.head.np_eq1), r.pr_eq2.eq(r.head.np_eq2),
            ]
        # The upper header beats follow the head of the frame queue whenever they are not being
        # sent (idle, or past the header-only beats; a frame's last beat is never header-only, so
        # they hold the loaded frame's header when g_load comes), and shift down one beat per
        # header-only beat sent (such a beat takes no payload: it is sent whenever g_room).
        # They rotate rather than shift: shifting in zeros made yosys clear the top beat through
        # its flip-flops' resets, one net from hi_follow across the block. The rotated-in beats
        # are never read: a header has fewer than HB / B header-only beats (HEADER_MAX % B != 0),
        # so the beat after the last of them is still one of the frame's own.
        assert HEADER_MAX % B
        with m.If(r.hi_en):
            m.d.sync += r.g_hi.eq(Mux(r.hi_follow, r.src.hdr[W:], Cat(r.g_hi[W:], r.g_hi[:W])))

        # Sticky errors, write-1-to-clear.
        raised = Signal(ErrorFlags)
        m.d.comb += [
            raised.bad_mode.eq(r.g_load & r.head.bad_mode),
            raised.too_long.eq(r.g_load & r.head.too_long),
            raised.early.eq(r.early_ev),
            raised.late.eq(r.late_ev),
        ]
        m.d.sync += self.error.eq((self.error.as_value() & ~self.error_clear.as_value()) | raised.as_value())
