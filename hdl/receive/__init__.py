"""The receive path: frames in, checked, executed against host memory (docs/receive.md).

:class:`RxFrontEnd` runs the stateless checks of :func:`rnic.model.receive.classify` on an AXI4-Stream
frame input and gives one verdict, descriptor and payload position per frame (:mod:`.crc_check`,
:mod:`.decode`, tables from the model in :mod:`.layouts`).
"""

from .front_end import RxFrontEnd
from .layouts import Reason, result_layout

__all__ = ["RxFrontEnd", "Reason", "result_layout"]
