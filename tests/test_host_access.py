"""``HostAccess`` in Amaranth's simulator against a Python AXI4 slave: random reads and writes of 1..64
bytes inside a 64-byte block, interleaved, with random ready/valid delays on every channel and random
response latency. Beats overlapping an error range answer SLVERR or DECERR (a write burst with such a
beat writes nothing). Every response is compared with a Python image of memory, every AR/AW/W
against the command (aligned address, exact ``arlen``, exact ``wstrb``), channels stay still while
waiting, and the final memory must equal the image. Seed: RNIC_SEED."""

import gc
import random

import pytest
from amaranth.sim import Simulator

from rnic.hdl.receive.host_access import HostAccess
from rnic.sim.toolchain import seed_from_env

MEM = 2048
ERR_LO, ERR_HI = 0x310, 0x3B0     # 16-byte granular: at W = 64 a burst can mix good and bad beats
COMMANDS = 300


def _random_cmd(rng):
    block = rng.randrange(MEM // 64) * 64
    if rng.random() < 0.3:
        off, n = rng.choice([(16, 48), (0, 64), (32, 32), (16, 28), (0, 32), (63, 1)])
    else:
        off = rng.randrange(64)
        n = rng.randint(1, 64 - off)
    return {"write": rng.random() < 0.5, "addr": block + off, "nbytes": n, "wdata": rng.getrandbits(512)}


def _beats(addr, n, B):
    first = addr // B * B
    return list(range(first, (addr + n - 1) // B * B + B, B))


def _bad(beat, B):
    return beat < ERR_HI and beat + B > ERR_LO


def _run(width, aid, seed):
    B = width // 8
    rng = random.Random(f"{seed}-host-access-{width}")
    dut = HostAccess(width, id=aid)
    axi = dut.m_axi
    mem = bytearray(rng.randbytes(MEM))
    image = bytearray(mem)
    cmds = [_random_cmd(rng) for _ in range(COMMANDS)]
    stats = {"reads": 0, "writes": 0, "errors": 0, "clocks": 0}

    async def tb(ctx):
        pending = list(cmds)
        offered = None            # the command on ``cmd``
        current = None            # (command, expected rdata, expected err, beat addresses) until its response
        ar_sent = aw_sent = False
        reads = []                # [addr, beats left, ready_at]
        r_beat = None             # (data, resp, last) on R
        write = None              # [addr, beats, beats seen, bad, [(addr, data, wstrb)]]
        b_q = []                  # [resp, ready_at]
        b_cur = None
        held = {}                 # channel -> payload seen with valid & ~ready in the last clock
        t = 0
        while pending or offered or current:
            if t % 200 == 0:
                p = {k: rng.choice([1.0, 0.7, 0.3]) for k in ("cmd", "resp", "ar", "r", "aw", "w", "b")}
                lat = rng.choice([0, 2, 8])
            t += 1
            assert t < 100 * COMMANDS, "stuck"

            if offered is None and pending and rng.random() < p["cmd"]:
                offered = pending.pop(0)
            ctx.set(dut.cmd.valid, offered is not None)
            if offered:
                for k, v in offered.items():
                    ctx.set(getattr(dut.cmd.payload, k), v)
            ctx.set(dut.resp.ready, rng.random() < p["resp"])
            ctx.set(axi.arready, rng.random() < p["ar"])
            ctx.set(axi.awready, rng.random() < p["aw"])
            ctx.set(axi.wready, write is not None and rng.random() < p["w"])
            if r_beat is None and reads and reads[0][2] <= t and rng.random() < p["r"]:
                a = reads[0][0]
                bad = _bad(a, B)
                r_beat = (int.from_bytes(mem[a:a + B], "little"), rng.choice([2, 3]) if bad else 0,
                          reads[0][1] == 1)
                reads[0][0] += B
                reads[0][1] -= 1
                if reads[0][1] == 0:
                    reads.pop(0)
            ctx.set(axi.rvalid, r_beat is not None)
            if r_beat:
                ctx.set(axi.rid, aid), ctx.set(axi.rdata, r_beat[0]), ctx.set(axi.rresp, r_beat[1])
                ctx.set(axi.rlast, r_beat[2])
            if b_cur is None and b_q and b_q[0][1] <= t and rng.random() < p["b"]:
                b_cur = b_q.pop(0)[0]
            ctx.set(axi.bvalid, b_cur is not None)
            if b_cur is not None:
                ctx.set(axi.bid, aid), ctx.set(axi.bresp, b_cur)

            g = {name: ctx.get(getattr(axi, name)) for name in (
                "arvalid", "arready", "araddr", "arlen", "arsize", "arburst", "arid", "rready",
                "awvalid", "awready", "awaddr", "awlen", "awsize", "awburst", "awid",
                "wvalid", "wready", "wdata", "wstrb", "wlast", "bready")}
            cmd_ready, resp_valid = ctx.get(dut.cmd.ready), ctx.get(dut.resp.valid)
            is_read = current is not None and not current[0]["write"]
            is_write = current is not None and current[0]["write"]

            for ch, fields in (("ar", ("araddr", "arlen", "arid")), ("aw", ("awaddr", "awlen", "awid")),
                               ("w", ("wdata", "wstrb", "wlast"))):
                now = tuple(g[f] for f in fields) if g[f"{ch}valid"] else None
                if ch in held:
                    assert now == held[ch], f"clock {t}: {ch} changed while waiting: {held[ch]} -> {now}"
                held.pop(ch, None)
                if now is not None and not g[f"{ch}ready"]:
                    held[ch] = now
            assert not cmd_ready or current is None, f"clock {t}: cmd.ready while busy"
            assert not g["arvalid"] or (is_read and not ar_sent), f"clock {t}: stray arvalid"
            assert not g["rready"] or is_read, f"clock {t}: rready outside a read"
            assert not (g["awvalid"] or g["wvalid"] or g["bready"]) or is_write, f"clock {t}: stray write channel"
            assert not g["wvalid"] or aw_sent, f"clock {t}: wvalid before the address"

            if offered is not None and cmd_ready:
                c, offered = offered, None
                beats = _beats(c["addr"], c["nbytes"], B)
                err = any(_bad(b, B) for b in beats)
                a, n = c["addr"], c["nbytes"]
                if c["write"]:
                    if not err:
                        image[a:a + n] = c["wdata"].to_bytes(64, "little")[:n]
                    want = 0
                else:
                    want = int.from_bytes(image[a:a + n], "little")
                current, ar_sent, aw_sent = (c, want, err, beats), False, False
                stats["writes" if c["write"] else "reads"] += 1
                stats["errors"] += err
            if g["arvalid"] and g["arready"]:
                c, _, _, beats = current
                assert (g["araddr"], g["arlen"], g["arsize"], g["arburst"], g["arid"]) == \
                    (beats[0], len(beats) - 1, B.bit_length() - 1, 1, aid), f"clock {t}: AR {g} for {c}"
                reads.append([beats[0], len(beats), t + rng.randint(0, lat)])
                ar_sent = True
            if r_beat is not None and g["rready"]:
                r_beat = None
            if g["awvalid"] and g["awready"]:
                c, _, _, beats = current
                assert (g["awaddr"], g["awlen"], g["awsize"], g["awburst"], g["awid"]) == \
                    (beats[0], len(beats) - 1, B.bit_length() - 1, 1, aid), f"clock {t}: AW {g} for {c}"
                write = [beats[0], len(beats), 0, False, []]
                aw_sent = True
            if g["wvalid"] and write is not None and ctx.get(axi.wready):
                c = current[0]
                a = write[0] + write[2] * B
                strobe = sum(1 << i for i in range(B) if c["addr"] <= a + i < c["addr"] + c["nbytes"])
                assert g["wstrb"] == strobe, f"clock {t}: wstrb {g['wstrb']:#x}, want {strobe:#x} for {c}"
                assert g["wlast"] == (write[2] == write[1] - 1), f"clock {t}: wlast"
                write[3] |= _bad(a, B)
                write[4].append((a, g["wdata"], strobe))
                write[2] += 1
                if write[2] == write[1]:
                    if not write[3]:
                        for a, d, s in write[4]:
                            for i in range(B):
                                if s >> i & 1:
                                    mem[a + i] = d >> (8 * i) & 0xFF
                    b_q.append([rng.choice([2, 3]) if write[3] else 0, t + rng.randint(0, lat)])
                    write = None
            if b_cur is not None and g["bready"]:
                b_cur = None
            if resp_valid and ctx.get(dut.resp.ready):
                c, want, err, _ = current
                got, got_err = ctx.get(dut.resp.payload.rdata), ctx.get(dut.resp.payload.err)
                assert got_err == err, f"clock {t}: err {got_err}, want {err} for {c}"
                if not err or c["write"]:
                    assert got == want, f"clock {t}: rdata {got:#x}, want {want:#x} for {c}"
                current = None
            await ctx.tick()
        stats["clocks"] = t

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    assert mem == image, [i for i in range(MEM) if mem[i] != image[i]][:16]
    return stats


@pytest.mark.parametrize("width, aid", [(64, 0), (128, 3), (256, 15), (512, 7)])
def test_host_access_random(width, aid):
    seed = seed_from_env()
    print(f"seed {seed} (rerun with RNIC_SEED={seed})")
    stats = _run(width, aid, seed)
    print(stats)
    assert stats["reads"] > 50 and stats["writes"] > 50 and stats["errors"] > 0, stats


@pytest.mark.parametrize("addr, nbytes", [(0x130, 0x11), (0x100, 0), (0x100, 65)])
def test_range_leaving_its_block_is_caught(addr, nbytes):
    dut = HostAccess(128)

    async def tb(ctx):
        ctx.set(dut.cmd.valid, 1)
        ctx.set(dut.cmd.payload.addr, addr)
        ctx.set(dut.cmd.payload.nbytes, nbytes)
        await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    with pytest.raises(AssertionError, match="64-byte block"):
        sim.run()


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_parameters_refused():
    for kw in ({"width": 32}, {"width": 1024}, {"width": 64, "id": 16}, {"width": 64, "id": -1}):
        with pytest.raises(ValueError):
            HostAccess(**kw)
    gc.collect()            # the refused objects' UnusedElaboratable warnings, under this test's filter
