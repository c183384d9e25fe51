"""Two whole engines in one simulation: module ``rnic_pair`` holds engines ``a`` and ``b`` side by side, each
with all of its own ports (``a__s_axil``, ``a__m_axi``, ``a__m_axis``, ``a__s_axis``, ``a__irq``, and the same
for ``b``), so that a testbench owns the link between them (``a__m_axis`` to ``b__s_axis`` and back) and can
drop, duplicate or corrupt frames on it.

The engine's Verilog is generated once (module ``rnic``) and ``rnic_pair`` is a small Verilog wrapper that
instantiates it twice; a Verilator configuration file keeps ``rnic`` a module of its own (``no_inline``), so
Verilator compiles one engine's C++ for both instances, not two inlined copies."""

from __future__ import annotations

from amaranth.hdl import Shape
from amaranth.lib.wiring import Flow

from ..hdl.rnic import Rnic
from ..model.config import RnicConfig
from . import toolchain

__all__ = ["pair_ports", "pair_verilog", "build_pair"]

#: Verilator control file: keep module ``rnic`` whole, so both instances share its compiled C++.
_NO_INLINE = '`verilator_config\nno_inline -module "rnic"\n'


def pair_ports(config: RnicConfig = RnicConfig()) -> list[tuple[str, str, int]]:
    """The engine's ports ``(direction, name, width)`` as Amaranth names them (``clk`` and ``rst`` first)."""
    engine = Rnic(config)
    engine._MustUse__silence = True             # only its signature is read here
    ports = [("input", "clk", 1), ("input", "rst", 1)]
    for path, member, _ in engine.signature.flatten(engine):
        direction = "output" if member.flow == Flow.Out else "input"
        ports.append((direction, "__".join(str(p) for p in path), Shape.cast(member.shape).width))
    return ports


def pair_verilog(config: RnicConfig = RnicConfig()) -> str:
    """The wrapper: module ``rnic_pair`` with ports ``a__<port>`` and ``b__<port>`` (one clock and reset)."""
    ports = pair_ports(config)
    decls, names = [], ["clk", "rst"]
    for direction, name, width in ports:
        rng = f"[{width - 1}:0] " if width > 1 else ""
        if name in ("clk", "rst"):
            decls.append(f"  {direction} {name};")
            continue
        for side in "ab":
            decls.append(f"  {direction} {rng}{side}__{name};")
            names.append(f"{side}__{name}")
    inst = []
    for side in "ab":
        conns = ",\n".join(f"    .{name}({name if name in ('clk', 'rst') else f'{side}__{name}'})"
                           for _, name, _ in ports)
        inst.append(f"  rnic {side} (\n{conns}\n  );")
    return (f"module rnic_pair({', '.join(names)});\n" + "\n".join(decls) + "\n" + "\n".join(inst) +
            "\nendmodule\n")


def build_pair(config: RnicConfig = RnicConfig(), waves=False) -> toolchain.Build:
    """Build (or reuse) the two-engine simulation of ``config``."""
    return toolchain.build(lambda: Rnic(config), "rnic", f"rnic-pair-{config.key()}", waves=waves, top="rnic_pair",
                           extra_sources={"rnic_pair.v": pair_verilog(config), "rnic_pair.vlt": _NO_INLINE})
