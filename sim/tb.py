"""What every block testbench (``cocotb_tests/test_*.py``) needs: the seed, the clock, reset, random
valid / ready patterns, and a source and a sink for Amaranth ``lib.stream`` ports.

Amaranth ports reach Verilog as ``clk`` / ``rst``, and a stream port ``name`` as ``name__valid``,
``name__ready`` and ``name__payload`` (one flat vector): :class:`StreamSource` and
:class:`StreamSink` take the port's name. Both follow the stream rules of ``amaranth.lib.stream``: a
transfer is ``valid & ready`` at a rising edge; the source never waits for ``ready`` before raising
``valid``, and keeps ``valid`` and ``payload`` until the transfer.

Seeds: :func:`seed` reads ``RNIC_SEED`` (:func:`rnic.sim.toolchain.run` sets it for every
simulation) and logs it with the command to rerun, so every random test prints its seed.
"""

from __future__ import annotations

import collections
import random

import cocotb
from cocotb.clock import Clock
from cocotb.queue import Queue
from cocotb.triggers import ClockCycles, RisingEdge

from .toolchain import seed_from_env

__all__ = ["CLK_NS", "seed", "start_clock", "reset", "random_pause", "set_pause", "delay_channel", "unsigned",
           "StreamSource", "StreamSink"]

#: the clock period of the block testbenches, in ns
CLK_NS = 4


def seed(dut=None, default: int | None = 1, what: str = "") -> int:
    """The test's seed: ``$RNIC_SEED``, else ``default`` (None: a fresh one). Logged (on ``dut``'s
    log, or printed without a ``dut``) as ``<what>: seed N (rerun with RNIC_SEED=N)``."""
    value = seed_from_env(default)
    text = f"{what}: " if what else ""
    text += f"seed {value} (rerun with RNIC_SEED={value})"
    if dut is None:
        print(text, flush=True)
    else:
        dut._log.info(text)
    return value


def start_clock(dut, period_ns: float = CLK_NS, clk: str = "clk"):
    """Start the clock ``clk`` of ``dut`` (period ``period_ns``); returns its task."""
    return cocotb.start_soon(Clock(getattr(dut, clk), period_ns, unit="ns").start())


async def reset(dut, clocks: int = 4, *, low: tuple[str, ...] = (), before: int = 0, after: int = 1,
                clk: str = "clk", rst: str = "rst"):
    """Drive the inputs named in ``low`` to 0 and hold ``rst`` for ``clocks`` clocks (after ``before``
    clocks with ``rst`` low, when given), release it and wait ``after`` more rising edges."""
    clock, r = getattr(dut, clk), getattr(dut, rst)
    if before:
        r.value = 0
        await ClockCycles(clock, before)
    r.value = 1
    for name in low:
        getattr(dut, name).value = 0
    await ClockCycles(clock, clocks)
    r.value = 0
    if after:
        await ClockCycles(clock, after)


def random_pause(rng, probability: float):
    """An endless pause pattern: True (pause) with ``probability`` at each clock, drawn from ``rng``.
    The form of cocotbext-axi's ``set_pause_generator``; the complement is a valid / ready pattern."""
    while True:
        yield rng.random() < probability


def set_pause(port, prob: float, rng: random.Random) -> None:
    """Random pauses with probability ``prob`` on a cocotbext-axi stream or AXI channel, from a
    generator seeded by ``rng``; ``prob`` 0 stops them. (``clear_pause_generator`` alone leaves the
    port paused if its last value was a pause.)"""
    if prob:
        port.set_pause_generator(random_pause(random.Random(rng.randrange(1 << 30)), prob))
    else:
        port.clear_pause_generator()
        port.pause = False


def delay_channel(clk, channel, now, due) -> None:
    """Make a cocotbext-axi RAM take each item of its ``channel`` (an AR or AW channel) only at clock
    ``due(arrival)``, ``arrival`` being ``now()`` when the item came in and ``due`` asked as the RAM takes
    it: every burst is answered a latency after its address, bursts overlapping and in order."""
    orig_recv, queue = channel.recv, Queue()

    async def pump():
        while True:
            item = await orig_recv()
            queue.put_nowait((now(), item))

    async def recv():
        arrival, item = await queue.get()
        wait = due(arrival) - now()
        if wait > 0:
            await ClockCycles(clk, wait)
        return item

    cocotb.start_soon(pump())
    channel.recv = recv


class _StreamPort:
    """The signals of the ``lib.stream`` port ``name`` of ``dut``, and the coroutine that drives them."""

    def __init__(self, dut, name: str, on_transfer, rng, clk: str):
        self.name, self.on_transfer, self.rng = name, on_transfer, rng
        self.valid, self.ready = getattr(dut, f"{name}__valid"), getattr(dut, f"{name}__ready")
        self.payload = getattr(dut, f"{name}__payload")
        self.clk = getattr(dut, clk)

    def start(self):
        """Start driving the port (once the design is out of reset); returns the task."""
        return cocotb.start_soon(self._run())

    async def _run(self):
        raise NotImplementedError


class StreamSource(_StreamPort):
    """Drives the ``lib.stream`` input ``name`` of ``dut`` from a queue.

    ``queue`` holds the items to send (append to it, or call :meth:`send`); ``encode(item)`` gives
    the payload's integer value. At each rising edge, a transfer pops the front item and calls
    ``on_transfer(item)``; an idle source then offers the next item, at each clock with probability
    ``valid_p`` (drawn from ``rng``; 1: at once). Members: ``valid_p`` may change at any time.
    Call :meth:`start` once the design is out of reset.
    """

    def __init__(self, dut, name: str, *, encode=int, on_transfer=None, rng=None, valid_p: float = 1.0,
                 clk: str = "clk"):
        super().__init__(dut, name, on_transfer, rng, clk)
        self.encode, self.valid_p = encode, valid_p
        self.queue = collections.deque()
        self.offering = False

    def send(self, item):
        self.queue.append(item)

    async def _run(self):
        while True:
            await RisingEdge(self.clk)
            if self.offering and self.ready.value:
                item = self.queue.popleft()
                self.offering = False
                if self.on_transfer is not None:
                    self.on_transfer(item)
            if not self.offering and self.queue and (self.valid_p >= 1 or self.rng.random() < self.valid_p):
                self.payload.value = self.encode(self.queue[0])
                self.offering = True
            self.valid.value = int(self.offering)


def unsigned(signal) -> int:
    """A signal's value as an unsigned int (a 1-bit signal gives a ``Logic``, a wider one a ``LogicArray``)."""
    v = signal.value
    return v.to_unsigned() if hasattr(v, "to_unsigned") else int(v)


class StreamSink(_StreamPort):
    """Takes the ``lib.stream`` output ``name`` of ``dut`` and checks the stream rule.

    ``ready`` is high at each clock with probability ``ready_p`` (drawn from ``rng``; 1: always), low
    while ``hold`` is set. Each transfer's payload (an unsigned int, through ``decode``) goes to
    ``on_transfer``, or without it to ``items``. Asserts the stream rule at every clock: once
    ``valid`` is offered and not taken, ``valid`` and the payload stay until the transfer. Members
    ``ready_p``, ``hold`` and ``rng`` may change at any time. Call :meth:`start` once the design is
    out of reset.
    """

    def __init__(self, dut, name: str, *, decode=int, on_transfer=None, rng=None, ready_p: float = 1.0,
                 clk: str = "clk"):
        super().__init__(dut, name, on_transfer, rng, clk)
        self.decode, self.ready_p = decode, ready_p
        self.items = collections.deque()
        self.hold = False
        self.ready.value = 1

    async def _run(self):
        waiting = None                          # payload offered and not taken at the last edge
        while True:
            await RisingEdge(self.clk)
            v, r = int(self.valid.value), int(self.ready.value)
            p = unsigned(self.payload)
            if waiting is not None:
                assert v and p == waiting, \
                    f"{self.name}: stream rule broken: valid {v}, payload {p:#x} after {waiting:#x}"
            if v and r:
                item = self.decode(p)
                if self.on_transfer is None:
                    self.items.append(item)
                else:
                    self.on_transfer(item)
            waiting = p if v and not r else None
            self.ready.value = int(not self.hold and (self.ready_p >= 1 or self.rng.random() < self.ready_p))
