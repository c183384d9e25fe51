"""Host-memory DMA blocks, re-exported from the modules that hold them.

* :class:`~rnic.hdl.interconnect.AxiInterconnect` (``hdl/interconnect.py``) merges the engine's
  AXI4 masters onto the one host port.
* :class:`~rnic.hdl.payload_reader.PayloadReader` (``hdl/payload_reader.py``) fetches packet
  payloads for the packet builder.

``docs/engine.md`` ("DMA") has the contract; ``cocotb_tests/test_dma.py`` the tests.
"""

from .interconnect import BW_WINDOW, AxiInterconnect
from .payload_reader import PayloadReader, payload_cmd_layout, payload_status_layout

__all__ = ["BW_WINDOW", "payload_cmd_layout", "payload_status_layout", "AxiInterconnect", "PayloadReader"]
