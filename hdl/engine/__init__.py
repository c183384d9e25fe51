"""The descriptor engine: doorbells -> scheduler -> WQE fetch -> segmentation -> packets -> completions.

:class:`DescriptorEngine` (:mod:`.control`) is the engine; the blocks it is built from are one
module each (see :mod:`.control`'s docstring for the machine and its state table).
:class:`FrameGate` sits beside it between the packet builder and the MAC.
"""

from .control import DescriptorEngine
from .frame_gate import FrameGate
from .layouts import cq_doorbell_layout, doorbell_layout, inc_layout, rd_cmd_layout, wqe_layout

__all__ = ["wqe_layout", "inc_layout", "doorbell_layout", "cq_doorbell_layout", "rd_cmd_layout",
           "DescriptorEngine", "FrameGate"]
