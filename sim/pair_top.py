"""Two whole engines in one simulation: :class:`RnicPair` holds engines ``a`` and ``b`` side by side, each
with all of its own ports (``a__s_axil``, ``a__m_axi``, ``a__m_axis``, ``a__s_axis``, ``a__irq``, and the same
for ``b``), so that a testbench owns the link between them (``a__m_axis`` to ``b__s_axis`` and back) and can
drop, duplicate or corrupt frames on it."""

from __future__ import annotations

from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import Out

from ..hdl.rnic import Rnic
from ..model.config import RnicConfig

__all__ = ["RnicPair"]


class RnicPair(wiring.Component):
    def __init__(self, config: RnicConfig = RnicConfig()):
        self.config = config
        probe = Rnic(config)
        probe._MustUse__silence = True          # only its signature is read here
        super().__init__({"a": Out(probe.signature), "b": Out(probe.signature)})

    def elaborate(self, platform):
        m = Module()
        for name in ("a", "b"):
            m.submodules[name] = engine = Rnic(self.config)
            wiring.connect(m, wiring.flipped(getattr(self, name)), engine)
        return m
