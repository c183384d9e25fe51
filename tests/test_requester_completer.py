"""The requester's completer in logic (rnic.hdl.requester.Completer) against the golden model's Requester, in
Amaranth's simulator.

The jobs are real: every response, timeout and RNR wake-up the model's two engines meet in RC loopbacks
over lossy links is captured with the state it met (the QP context, the requester record, the send queue,
the response). Some are then changed the same way for both sides: another AETH syndrome, opcode or PSN,
a payload write that fails, an atomic result that straddles 64 bytes. Each job is run by the model (on a
stand-in engine that records what it is asked to do) and by the RTL (its ports served from a copy of the
same memory), and the two must agree on everything: the context after the job (the RTL's ``upd``
applied), host memory (record, READ payloads, atomic results), the CQEs, the counters, the error
reports and the wake / move flags. Seed: RNIC_SEED."""

import dataclasses
import random

from amaranth.sim import Simulator

from rnic.hdl.requester import Completer, JobKind
from rnic.model.engine import EngineModel, HostMemory, sq_slot
from rnic.model.opcodes import OPCODE_INFO, Transport
from rnic.model.qpc import CACHED_BYTES, QpContext, QpState
from rnic.model.req_records import REQ_BYTES, ReqContext
from rnic.model.requester import REQ_COUNTS, Requester, RespDrop
from rnic.model.wqe import WQE_BYTES, WQE_FIELDS
from rnic.sim.link import LinkKnobs
from rnic.sim.loopback import Loopback, random_messages
from rnic.sim.toolchain import seed_from_env

REQ_BASE = 0x7_0000
_LOCAL = next(off for name, off, _, _ in WQE_FIELDS if name == "local_addr") // 8    # its byte in a WQE
RESPONSES = [op for op, i in OPCODE_INFO.items() if i.transport == Transport.RC and
             i.operation in ("RDMA_READ_RESPONSE", "ACKNOWLEDGE", "ATOMIC_ACKNOWLEDGE")]


@dataclasses.dataclass
class Job:
    kind: JobKind
    qpn: int
    ctx: QpContext
    record: bytes
    ring: bytes
    opcode: int = 0
    psn: int = 0
    syndrome: int = 0
    payload: bytes = b""
    orig: int = 0
    write_error: bool = False


def _capture(lb: Loopback) -> list[Job]:
    """Run ``lb``, recording each requester call with the state it met."""
    jobs = []
    for node in (lb.pair.a, lb.pair.b):
        req = node.req

        def snap(kind, qpn, ctx, req=req, node=node, **kw):
            ring = node.mem.peek(ctx.sq_base & ~0x3F, WQE_BYTES << ctx.log_sq_size)
            jobs.append(Job(kind, qpn, dataclasses.replace(ctx), node.mem.peek(req.req_addr(qpn), REQ_BYTES),
                            ring, **kw))

        def response(qpn, ctx, desc, payload, req=req, orig=req.response, snap=snap):
            snap(JobKind.RESPONSE, qpn, ctx, opcode=desc.opcode, psn=desc.psn, syndrome=desc.aeth_syndrome,
                 payload=bytes(payload), orig=desc.atomic_orig or 0)
            return orig(qpn, ctx, desc, payload)

        def timeout(qpn, req=req, orig=req.timeout, snap=snap):
            snap(JobKind.TIMEOUT, qpn, req.engine._qpc_peek(qpn))
            return orig(qpn)

        def rnr_expired(qpn, req=req, orig=req.rnr_expired, snap=snap):
            snap(JobKind.RNR_DONE, qpn, req.engine._qpc_peek(qpn))
            return orig(qpn)

        req.response, req.timeout, req.rnr_expired = response, timeout, rnr_expired
    lb.run()
    return jobs


def _shift_psns(job: Job, delta: int) -> None:
    """Move every PSN of the job by ``delta`` (a consistent state again, e.g. across the 24-bit wrap)."""
    ctx, rec = job.ctx, bytearray(job.record)
    for name in ("next_psn", "una_psn", "epsn"):
        setattr(ctx, name, (getattr(ctx, name) + delta) & 0xFFFFFF)
    for lo in (2, 6):                                   # wqe_psn (bits 16..39), high_psn (bits 48..71)
        psn = (int.from_bytes(rec[lo:lo + 3], "little") + delta) & 0xFFFFFF
        rec[lo:lo + 3] = psn.to_bytes(3, "little")
    job.record, job.psn = bytes(rec), (job.psn + delta) & 0xFFFFFF


def _mutate(rng: random.Random, job: Job) -> Job:
    job = dataclasses.replace(job, ctx=dataclasses.replace(job.ctx))
    if rng.random() < 0.3:                              # una_psn lands just before a byte boundary or the wrap
        _shift_psns(job, rng.choice([0xFFFFF0, 0xFFF0, 0xF0]) - job.ctx.una_psn + rng.randrange(-8, 8))
    if rng.random() < 0.3:                              # retries partly used up
        job.ctx.retry_cnt = rng.randrange(job.ctx.retry_limit + 1)
        job.ctx.rnr_retry_cnt = rng.randrange(job.ctx.rnr_limit + 1)
    if rng.random() < 0.2:                              # a go-back under way, or none
        rec = bytearray(job.record)
        rec[5] ^= 0x20                                  # retrying: record bit 45
        job.record = bytes(rec)
    if rng.random() < 0.1:                              # the QP has no local ACK timer
        job.ctx.ack_timeout = 0
    elif rng.random() < 0.1:                            # a long one (the delay saturates at 2^31 - 1 ticks)
        job.ctx.ack_timeout = rng.randrange(26, 32)
    if job.kind != JobKind.RESPONSE:
        return job
    roll = rng.random()
    if roll < 0.15:
        job.syndrome = rng.choice([rng.randrange(256), rng.randrange(0x60, 0x68), 0x20 | rng.randrange(32),
                                   rng.randrange(32)])
    elif roll < 0.25:
        job.opcode = rng.choice(RESPONSES)
    elif roll < 0.35:
        job.psn = (job.psn + rng.choice([-2, -1, 1, 2])) & 0xFFFFFF
    elif roll < 0.45 and job.payload:
        job.write_error = True
    elif roll < 0.55 and job.payload:
        job.payload = job.payload[:-1]
    if OPCODE_INFO[job.opcode].operation == "ATOMIC_ACKNOWLEDGE" and rng.random() < 0.5:
        ring = bytearray(job.ring)                      # every WQE's local address straddles 64 bytes
        for off in range(0, len(ring), WQE_BYTES):
            addr = int.from_bytes(ring[off + _LOCAL:off + _LOCAL + 8], "little")
            ring[off + _LOCAL:off + _LOCAL + 8] = ((addr & ~0x3F) + rng.choice([57, 60, 63])).to_bytes(8, "little")
        job.ring = bytes(ring)
        job.write_error = rng.random() < 0.2
    return job


def _memory(job: Job) -> HostMemory:
    """Host memory as the job met it (the record, the send queue); with ``write_error``, writes fail from
    the 64-byte block of the local buffer of the WQE at ``sq_acked`` on."""
    mem = HostMemory()
    mem.poke(REQ_BASE + job.qpn * REQ_BYTES, job.record)
    mem.poke(job.ctx.sq_base & ~0x3F, job.ring)
    if job.write_error:
        slot = sq_slot(job.ctx, ReqContext.unpack(job.record).sq_acked) - (job.ctx.sq_base & ~0x3F)
        block = int.from_bytes(job.ring[slot + _LOCAL:slot + _LOCAL + 8], "little") & ~0x3F
        mem.add_write_error(block, block + 0x2000)
    return mem


class _Regs:
    def u64(self, name):
        assert name == "REQ_BASE_LO"
        return REQ_BASE


class _Engine:
    """What the Requester calls on its engine, recorded."""

    reliable = True                                     # CONTROL.RELIABLE

    def __init__(self, mem, ctx):
        self.mem, self.regs, self.responder = mem, _Regs(), self
        self.ctx, self.written = ctx, None
        self.cqes, self.counts, self.errors = [], [], []
        self.woke = self.moved = False

    def _qpc_write(self, qpn, ctx):
        self.written = dataclasses.replace(ctx)

    def _qpc_peek(self, qpn):
        return dataclasses.replace(self.ctx)

    def _wake(self, qpn):
        self.woke = True

    def _rewound(self, qpn):
        self.moved = self.woke = True

    def _complete(self, qpn, ctx, cqe, cqn=None):
        self.cqes.append((ctx.cqn, cqe.wr_id, cqe.byte_len, cqe.qpn, int(cqe.opcode), int(cqe.status), cqe.wqe_index))
        return True

    def _count(self, name, n=1):
        self.counts += [name] * n

    def _error(self, bit, qpn, status=0):
        self.errors.append((int(bit), qpn, int(status)))

    def _set_error(self, qpn, ctx):
        EngineModel._set_error(self, qpn, ctx)

    def flush_rq(self, qpn):
        pass


class _Desc:
    def __init__(self, job):
        self.opcode, self.psn, self.aeth_syndrome, self.atomic_orig = job.opcode, job.psn, job.syndrome, job.orig


def _model(job: Job):
    mem = _memory(job)
    ctx = dataclasses.replace(job.ctx)
    engine = _Engine(mem, ctx)
    req = Requester(engine)
    if job.kind == JobKind.RESPONSE:
        req.response(job.qpn, ctx, _Desc(job), job.payload)
    elif job.kind == JobKind.TIMEOUT:
        req.timeout(job.qpn)
    else:
        req.rnr_expired(job.qpn)
    counts = [n for n in REQ_COUNTS for _ in range(req.counts[n])]
    counts += [f"drop:{r.name}" for r in RespDrop for _ in range(req.drops[r])]
    counts += engine.counts
    final = engine.written or job.ctx
    return dict(ctx=_fields(final), mem=mem.pages, cqes=engine.cqes, counts=sorted(counts), errors=engine.errors,
                woke=engine.woke, moved=engine.moved,
                timers=[(q, int(arm), int(kind), delay) for q, arm, kind, delay in req.timer_log])


def _fields(ctx):
    return {n: int(getattr(ctx, n)) for n in ("state", "una_psn", "retry_cnt", "rnr_retry_cnt", "req_wait",
                                                "rd_pending", "sq_ci", "next_psn")}


def _run_rtl(jobs: list[Job]) -> list[dict]:
    dut = Completer()
    results = []
    sim = Simulator(dut)
    sim.add_clock(1e-8)

    async def tb(ctx):
        ctx.set(dut.req_base, REQ_BASE)
        for job in jobs:
            mem = _memory(job)
            out = dict(cqes=[], counts=[], errors=[], upd=None, timers=[])
            p = dut.job.payload
            ctx.set(p.kind, job.kind)
            ctx.set(p.qpn, job.qpn)
            ctx.set(p.ctx.as_value(), int.from_bytes(job.ctx.pack()[:CACHED_BYTES], "little"))
            for name in ("opcode", "psn", "syndrome", "orig"):
                ctx.set(getattr(p, name), getattr(job, name))
            ctx.set(p.length, len(job.payload))
            ctx.set(dut.job.valid, 1)
            host = placed = done = None
            places = 0
            for cycle in range(5000):
                ctx.set(dut.host_cmd.ready, host is None)
                ctx.set(dut.host_resp.valid, host is not None)
                if host is not None:
                    ctx.set(dut.host_resp.payload.rdata, host[0])
                    ctx.set(dut.host_resp.payload.err, host[1])
                ctx.set(dut.placed.valid, placed is not None)
                ctx.set(dut.placed.payload.err, bool(placed))
                ctx.set(dut.cq.cmd.ready, done is None)
                ctx.set(dut.cq.done.valid, done is not None)
                ctx.set(dut.place.ready, 1)
                ctx.set(dut.upd.ready, 1)
                ctx.set(dut.timer.ready, 1)
                taken = ctx.get(dut.job.ready) and ctx.get(dut.job.valid)
                if cycle and ctx.get(dut.job.ready) and not ctx.get(dut.job.valid):
                    break
                count = ctx.get(dut.count)
                for name in REQ_COUNTS + ("wqe_errors", "flush_count", "bus_errors"):
                    if getattr(count, name):
                        out["counts"].append(name)
                if count.drop:
                    out["counts"].append(f"drop:{RespDrop(count.reason).name}")
                e = ctx.get(dut.err)
                if e.valid:
                    out["errors"].append((e.bit, e.qpn, e.status))
                h_take = ctx.get(dut.host_cmd.valid) and host is None
                h = ctx.get(dut.host_cmd.payload) if h_take else None
                r_take = host is not None and ctx.get(dut.host_resp.ready)
                pl = ctx.get(dut.place.payload) if ctx.get(dut.place.valid) else None
                pd_take = placed is not None and ctx.get(dut.placed.ready)
                q = ctx.get(dut.cq.cmd.payload) if ctx.get(dut.cq.cmd.valid) and done is None else None
                d_take = done is not None and ctx.get(dut.cq.done.ready)
                u = ctx.get(dut.upd.payload) if ctx.get(dut.upd.valid) else None
                if ctx.get(dut.timer.valid):
                    t = ctx.get(dut.timer.payload)
                    out["timers"].append((t.qpn, t.arm, t.kind, t.delay))
                await ctx.tick()
                if taken:
                    ctx.set(dut.job.valid, 0)
                if r_take:
                    host = None
                if pd_take:
                    placed = None
                if d_take:
                    done = None
                if h is not None:
                    assert 1 <= h.nbytes <= 64 and (h.addr & 63) + h.nbytes <= 64, f"host access {h}"
                    if h.write:
                        data = h.wdata.to_bytes(64, "little")[:h.nbytes]
                        try:
                            mem.write(h.addr, data)
                            host = (0, 0)
                        except Exception:
                            host = (0, 1)
                    else:
                        host = (int.from_bytes(mem.read(h.addr, h.nbytes), "little"), 0)
                if pl is not None:
                    places += 1
                    if pl.write:
                        try:
                            mem.write(pl.addr, job.payload)
                            placed = False
                        except Exception:
                            placed = True
                if q is not None:
                    out["cqes"].append((q.cqn, q.wr_id, q.byte_len, q.qpn, q.opcode, q.status, q.wqe_index))
                    done = 0
                if u is not None:
                    assert out["upd"] is None, "two updates for one job"
                    out["upd"] = u
            else:
                raise AssertionError(f"job did not finish: {job}")
            assert places == (job.kind == JobKind.RESPONSE), f"{places} place commands"
            out["mem"] = mem.pages
            results.append(out)

    sim.add_testbench(tb)
    sim.run()
    return results


def _apply(job: Job, u) -> dict:
    f = _fields(job.ctx)
    if u is None:
        return dict(ctx=f, woke=False, moved=False)
    f.update(una_psn=u.una_psn, retry_cnt=u.retry_cnt, rnr_retry_cnt=u.rnr_retry_cnt, req_wait=u.req_wait)
    if u.move:
        f.update(sq_ci=u.sq_ci, next_psn=u.next_psn, rd_pending=0)
    else:
        f["rd_pending"] = (f["rd_pending"] - u.rd_dec) & 7
    if u.error:
        f.update(state=int(QpState.ERROR), rd_pending=0)
    return dict(ctx=f, woke=bool(u.wake), moved=bool(u.move))


def _pages(pages):
    return {k: bytes(v) for k, v in pages.items() if any(v)}


def test_completer_against_the_model():
    seed = seed_from_env()
    print(f"RNIC_SEED={seed}")
    rng = random.Random(seed)
    jobs, met, want = [], set(), {"read_responses", "atomic_acks", "timeouts", "implied_naks", "naks_seq"}
    for i in range(12):                                 # at least 4 loopbacks, more until every kind is met
        if i >= 4 and want <= met:
            break
        knobs = LinkKnobs(loss=rng.choice([0.05, 0.15, 0.3]), dup=0.05, reorder=rng.choice([0, 2]))
        lb = Loopback(random_messages(rng, 10, 256), random_messages(rng, 6, 256), mtu=256, ab=knobs, ba=knobs,
                      seed=rng.randrange(1 << 30), retry=(rng.choice([1, 3, 7]), rng.choice([1, 2, 7])),
                      rnr=rng.choice([0, 0, 3]), qps=rng.choice([1, 2]))
        jobs += _capture(lb)
        met |= {n for node in (lb.pair.a, lb.pair.b) for n, v in node.req.counts.items() if v}
    jobs = [_mutate(rng, j) if rng.random() < 0.5 else j for j in jobs]
    rtl = _run_rtl(jobs)
    seen = set()
    for n, (job, got) in enumerate(zip(jobs, rtl)):
        want = _model(job)
        applied = _apply(job, got["upd"])
        where = f"seed {seed}, job {n}: {job.kind.name} opcode 0x{job.opcode:02x} psn {job.psn} syndrome 0x{job.syndrome:02x}"
        assert got["cqes"] == want["cqes"], f"{where}: CQEs {got['cqes']} != model {want['cqes']}"
        assert sorted(got["counts"]) == want["counts"], f"{where}: counts {sorted(got['counts'])} != {want['counts']}"
        assert got["errors"] == want["errors"], f"{where}: errors {got['errors']} != {want['errors']}"
        assert applied["ctx"] == want["ctx"], f"{where}: context {applied['ctx']} != model {want['ctx']}"
        assert (applied["woke"], applied["moved"]) == (want["woke"], want["moved"]), f"{where}: wake / move"
        assert _pages(got["mem"]) == _pages(want["mem"]), f"{where}: host memory differs"
        assert got["timers"] == want["timers"], f"{where}: timer commands {got['timers']} != model {want['timers']}"
        seen.update(want["counts"])
        seen.update(f"timer:{'arm' if arm else 'disarm'}:{kind}" for _, arm, kind, _ in want["timers"])
    print(f"{len(jobs)} jobs; seen: {sorted(seen)}")
    for name in ("acks", "read_responses", "atomic_acks", "implied_naks", "retransmits", "timeouts", "completions",
                 "naks_seq", "wqe_errors", "flush_count", "drop:STALE", "timer:arm:0", "timer:disarm:0"):
        assert name in seen, f"seed {seed}: no job exercised {name}"
