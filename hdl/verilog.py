"""Verilog output of an Amaranth component, for the CLI (``python -m rnic.hdl verilog``) and the simulators."""

from __future__ import annotations

import os

__all__ = ["to_verilog"]


def to_verilog(component, name: str) -> str:
    """Convert an Amaranth component to Verilog with the bundled yosys (top module ``name``)."""
    os.environ.setdefault("AMARANTH_USE_YOSYS", "builtin")
    from amaranth.back import verilog

    return verilog.convert(component, name=name, emit_src=False)
