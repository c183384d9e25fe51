"""The testbench's pause control: turning random pauses off must leave the port running."""

import random

import pytest

pytest.importorskip("cocotb")
from rnic.sim.harness import set_pause  # noqa: E402


class _Port:
    """The pause interface of a cocotbext-axi stream or AXI channel: the generator's last value stays."""

    def __init__(self):
        self.pause, self.generator = False, None

    def set_pause_generator(self, generator=None):
        self.generator = generator
        if generator is not None:
            self.pause = next(generator)

    def clear_pause_generator(self):
        self.generator = None


def test_clearing_pauses_unpauses():
    port = _Port()
    set_pause(port, 1.0, random.Random(1))
    assert port.pause and port.generator is not None
    set_pause(port, 0.0, random.Random(1))
    assert port.generator is None and port.pause is False


def test_pauses_follow_probability_and_seed():
    draws = []
    for _ in range(2):
        port = _Port()
        set_pause(port, 0.3, random.Random(7))
        draws.append([next(port.generator) for _ in range(2000)])
    assert draws[0] == draws[1]
    assert 0.25 < sum(draws[0]) / 2000 < 0.35
